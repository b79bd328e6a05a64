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
