//! `serve --record DIR`: answered reviews land as JSON lines, redacted, and
//! `kadmit replay` reads them back as the decisions that were given.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::harness::{Kadmit, bundled_rules, fixture, post_json};

#[test]
fn recorded_reviews_are_redacted_and_replay_to_the_same_decisions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recordings = dir.path().join("recordings");
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--record".as_ref(), recordings.as_os_str()])
        .start();
    let client = kadmit.client();

    // A Secret with a value and managedFields, and two real reviews.
    let mut secret: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture");
    let object = &mut secret["request"]["object"];
    object["kind"] = "Secret".into();
    object["data"] = serde_json::json!({"password": "c2VjcmV0"});
    object["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
    secret["request"]["kind"]["kind"] = "Secret".into();
    secret["request"]["resource"]["resource"] = "secrets".into();
    let sent = [
        ("/validate", serde_json::to_vec(&secret).expect("JSON")),
        ("/validate", fixture("create-deployment.json")),
        ("/mutate", fixture("create-pod.json")),
    ];
    for (path, body) in &sent {
        let (status, _, response) = post_json(&client, &kadmit.url(path), body.clone());
        assert_eq!(status, 200, "{response}");
    }

    // The recording thread writes each line whole; wait for all three.
    let file = recordings.join("reviews.jsonl");
    let deadline = Instant::now() + Duration::from_secs(30);
    let lines: Vec<Value> = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if text.lines().count() >= sent.len() {
            break text
                .lines()
                .map(|line| serde_json::from_str(line).expect("a JSON line"))
                .collect();
        }
        assert!(Instant::now() < deadline, "recorded: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let recorded_secret = &lines[0]["request"]["object"];
    assert_eq!(recorded_secret["data"]["password"], "", "{recorded_secret}");
    assert!(recorded_secret["metadata"].get("managedFields").is_none());
    assert_eq!(
        lines[1]["response"]["allowed"], false,
        "the unlabelled Deployment"
    );
    assert!(
        lines[2]["response"]["patch"].is_string(),
        "the defaulted Pod"
    );
    assert_eq!(
        kadmit.metric("kadmit_recorded_reviews_total{result=\"written\"}"),
        3.0
    );

    // The same rules give the recorded decisions again.
    let replay = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(["replay", "--rules"])
        .arg(bundled_rules())
        .arg(&recordings)
        .output()
        .expect("kadmit replay");
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(stdout.contains("replayed 3 reviews: 0 changed"), "{stdout}");

    // Without the rule that denied the Deployment, replay says so.
    let loosened = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(bundled_rules()).expect("rules") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|name| name != "30-required-labels.yaml")
        {
            std::fs::copy(&path, loosened.path().join(path.file_name().expect("name")))
                .expect("copy");
        }
    }
    let replay = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(["replay", "--rules"])
        .arg(loosened.path())
        .arg(&recordings)
        .output()
        .expect("kadmit replay");
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("CREATE deployments default/web: denied → admitted"),
        "{stdout}"
    );
}

/// Waits until the server has written `count` reviews in all.
fn wait_written(kadmit: &Kadmit, count: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let written = kadmit.metric("kadmit_recorded_reviews_total{result=\"written\"}");
        if written >= count {
            assert_eq!(written, count);
            return;
        }
        assert!(Instant::now() < deadline, "{written} of {count} written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The uids recorded in `path`, in order; none when it is missing.
fn recorded_uids(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let review: Value = serde_json::from_str(line).expect("a JSON line");
            review["request"]["uid"].as_str().expect("a uid").to_owned()
        })
        .collect()
}

/// Sends ConfigMap CREATEs with uids `{tag}-{i}` for `i` in `range`.
fn send_configmaps(kadmit: &Kadmit, tag: &str, range: std::ops::Range<usize>) {
    let client = kadmit.client();
    let mut review: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture");
    for i in range {
        review["request"]["uid"] = format!("{tag}-{i}").into();
        let body = serde_json::to_vec(&review).expect("JSON");
        let (status, _, response) = post_json(&client, &kadmit.url("/validate"), body);
        assert_eq!(status, 200, "{response}");
    }
}

/// A recording deleted by someone else (a clean-up job, an operator) made
/// each later rotation drop the oldest file and then fail on the missing
/// one: three reviews deleted every older recording, and none was written
/// again.
#[test]
fn recording_goes_on_in_a_new_file_when_its_file_is_deleted_and_keeps_the_older_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recordings = dir.path().join("recordings");
    // 10,000 bytes a file: about ten ConfigMap reviews.
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--record".as_ref(), recordings.as_os_str()])
        .args(["--record-max-bytes", "40000"])
        .start();
    send_configmaps(&kadmit, "old", 0..45);
    wait_written(&kadmit, 45.0);
    let older = |n: usize| recordings.join(format!("reviews.jsonl.{n}"));
    let kept: Vec<Vec<String>> = (1..=3).map(|n| recorded_uids(&older(n))).collect();
    assert!(kept.iter().all(|uids| !uids.is_empty()), "{kept:?}");

    let current = recordings.join("reviews.jsonl");
    std::fs::remove_file(&current).expect("delete the recording");
    send_configmaps(&kadmit, "new", 0..5);
    wait_written(&kadmit, 50.0);
    let after: Vec<Vec<String>> = (1..=3).map(|n| recorded_uids(&older(n))).collect();
    assert_eq!(after, kept, "the older recordings are as they were");
    let new: Vec<String> = (0..5).map(|i| format!("new-{i}")).collect();
    assert_eq!(recorded_uids(&current), new);
    assert_eq!(
        kadmit.metric("kadmit_recorded_reviews_total{result=\"failed\"}"),
        0.0
    );
    kadmit.assert_no_panic();
}

/// kadmit makes the `--record` directory readable by its own user only; one
/// that exists keeps its permissions, and a start that finds it open to
/// others says so.
#[cfg(unix)]
#[test]
fn a_record_directory_open_to_others_is_warned_about_and_left_as_it_is() {
    use std::os::unix::fs::PermissionsExt;
    let warning = |line: &Value| {
        super::harness::message(line).starts_with("The --record directory lets users other")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--record".as_ref(), shared.as_os_str()])
        .start();
    let warned = kadmit.logs.wait_for(1, warning);
    assert_eq!(warned[0]["mode"], "750", "{}", warned[0]);
    let mode = std::fs::metadata(&shared)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750, "not changed");
    drop(kadmit);

    // A directory kadmit makes is private: nothing to warn about.
    let made = dir.path().join("made");
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--record".as_ref(), made.as_os_str()])
        .start();
    kadmit
        .logs
        .wait_for(1, |line| super::harness::message(line) == "Listening");
    assert!(!kadmit.logs.snapshot().iter().any(warning));
    let mode = std::fs::metadata(&made)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}
