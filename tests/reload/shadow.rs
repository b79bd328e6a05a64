//! Shadowing a new plan on the recent reviews before it serves, through the
//! binary: the comparison on `/status` and in the log, the guard
//! (`--reload-max-new-denials`) holding a plan back, and SIGHUP loading it
//! anyway.

use serde_json::Value;

use super::support::{RELOAD_DEADLINE, StatusClient, generation_of, rules_dir, send, start};

const FILE: &str = "configmaps.yaml";

/// A rule set `cm`: a Warn rule on configmaps, or the same and a Deny rule
/// on every configmap CREATE.
fn rules(deny: bool) -> String {
    let mut text = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: cm}
spec:
  rules:
    - name: warn-unlabelled
      match: {resources: [configmaps]}
      action: Warn
      deny:
        - path: $.object.metadata.labels.team
          exists: false
          message: no team label
"
    .to_owned();
    if deny {
        text.push_str(
            "    - name: no-configmaps
      match: {resources: [configmaps], operations: [CREATE]}
      deny:
        - message: configmaps are off
",
        );
    }
    text
}

/// The reviews sent: three configmap CREATEs (newly denied by the deny
/// rule), an UPDATE (unchanged) and a pod CREATE, which no rule judges.
const SENT: [(&str, &str); 5] = [
    ("create-configmap.json", "/validate"),
    ("create-configmap-impersonated.json", "/validate"),
    ("create-configmap-serviceaccount.json", "/validate"),
    ("update-configmap-patch.json", "/validate"),
    ("create-pod.json", "/mutate"),
];

/// The reviews of [`SENT`] kept: the API server sends only what the rules
/// name, and the pod CREATE is passed over.
const KEPT: usize = 4;

/// Sends [`SENT`] and waits until the shadow thread kept the [`KEPT`].
fn send_and_keep(kadmit: &crate::server::harness::Kadmit) {
    let client = kadmit.client();
    for (name, path) in SENT {
        let (_, response) = send(&client, kadmit, name, path);
        assert_eq!(response["response"]["allowed"], true, "{name}: {response}");
    }
    let kept = r#"kadmit_shadow_reviews_total{result="kept"}"#;
    let started = std::time::Instant::now();
    while kadmit.metric(kept) < KEPT as f64 {
        assert!(
            started.elapsed() < RELOAD_DEADLINE,
            "the shadow thread kept {} of {} reviews",
            kadmit.metric(kept),
            KEPT
        );
        std::thread::yield_now();
    }
}

fn allowed(kadmit: &crate::server::harness::Kadmit, fixture: &str) -> Value {
    let (_, response) = send(&kadmit.client(), kadmit, fixture, "/validate");
    response["response"]["allowed"].clone()
}

#[test]
fn a_new_plan_is_compared_on_the_recent_reviews_before_it_serves() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FILE), rules(false)).expect("write");
    let kadmit = start(&dir, &["--shadow-reviews-per-second", "1000000"]);
    let status = StatusClient::new(&kadmit);
    send_and_keep(&kadmit);

    std::fs::write(dir.join(FILE), rules(true)).expect("write");
    let now = status.wait_past(1);
    let shadow = &now["lastShadow"];
    assert_eq!(shadow["reviews"], KEPT, "{now:#}");
    assert_eq!(shadow["changed"], 3, "{now:#}");
    assert_eq!(shadow["newlyDenied"], 3, "{now:#}");
    assert_eq!(shadow["newlyAdmitted"], 0, "{now:#}");
    assert_eq!(shadow["servingGeneration"], 1, "{now:#}");
    // Five reviews take far less than the 30 s limit: none left out.
    assert!(shadow.get("notCompared").is_none(), "{now:#}");
    let examples = shadow["examples"].as_array().expect("examples");
    assert_eq!(examples.len(), 3, "{now:#}");
    for example in examples {
        assert_eq!(example["change"][0], "admitted → denied", "{example}");
        assert!(
            example["request"]
                .as_str()
                .is_some_and(|r| r.starts_with("CREATE configmaps")),
            "{example}"
        );
        assert!(
            example["after"]
                .as_str()
                .is_some_and(|a| a.contains("cm/no-configmaps denied")),
            "{example}"
        );
    }
    // Without a guard the new plan serves.
    assert_eq!(allowed(&kadmit, "create-configmap.json"), false);
    let logged = kadmit.logs.wait_for(3, |line| {
        crate::server::harness::message(line) == "A recent review the new rules decide differently"
    });
    assert_eq!(logged.len(), 3);
    assert_eq!(
        kadmit.metric(r#"kadmit_shadow_decisions{change="newly_denied"}"#),
        3.0
    );
    kadmit.assert_no_panic();
}

#[test]
fn a_plan_denying_too_many_recent_reviews_is_held_back_until_sighup() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FILE), rules(false)).expect("write");
    let kadmit = start(
        &dir,
        &[
            "--reload-max-new-denials",
            "2",
            "--shadow-reviews-per-second",
            "1000000",
        ],
    );
    let status = StatusClient::new(&kadmit);
    send_and_keep(&kadmit);
    // Reviews of resources no rule names, as anyone reaching the port can
    // send: once they pushed every real review out of the ring, and the
    // plan passed the guard. They are passed over.
    let client = kadmit.client();
    let mut review: Value =
        serde_json::from_slice(&crate::server::harness::fixture("create-configmap.json"))
            .expect("fixture");
    for n in 0..200 {
        review["request"]["resource"]["resource"] = format!("made-up-{n}").into();
        let (status, _, _) = crate::server::harness::post_json(
            &client,
            &kadmit.url("/validate"),
            serde_json::to_vec(&review).expect("serialize"),
        );
        assert_eq!(status, 200);
    }
    // One more real review, kept after them: when it is, they have been
    // passed over or kept.
    let (_, response) = send(&client, &kadmit, "update-configmap-patch.json", "/validate");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    let kept = r#"kadmit_shadow_reviews_total{result="kept"}"#;
    let started = std::time::Instant::now();
    while kadmit.metric(kept) < (KEPT + 1) as f64 {
        assert!(
            started.elapsed() < RELOAD_DEADLINE,
            "the last review was not kept"
        );
        std::thread::yield_now();
    }
    assert_eq!(kadmit.metric(kept), (KEPT + 1) as f64);

    std::fs::write(dir.join(FILE), rules(true)).expect("write");
    let held = status.wait_failure(0);
    assert_eq!(generation_of(&held), 1, "the old plan serves: {held:#}");
    let error = held["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains("would deny 3 reviews that the rules serving admitted")
            && error.contains("--reload-max-new-denials 2"),
        "{error}"
    );
    assert!(error.contains("SIGHUP"), "{error}");
    assert_eq!(held["lastShadow"]["newlyDenied"], 3, "{held:#}");
    assert_eq!(kadmit.metric("kadmit_reloads_held_back_total"), 1.0);
    assert_eq!(allowed(&kadmit, "create-configmap.json"), true);

    // SIGHUP loads the new rules anyway.
    kadmit.signal("HUP");
    let now = status.wait_past(1);
    assert!(now.get("lastError").is_none(), "{now:#}");
    assert_eq!(allowed(&kadmit, "create-configmap.json"), false);
    assert_eq!(kadmit.metric("kadmit_reloads_held_back_total"), 1.0);
    // Without --client-ca anyone could have sent the kept reviews: said
    // when it starts.
    assert!(
        kadmit
            .log_lines()
            .iter()
            .any(|line| line.contains("WARN") && line.contains("without --client-ca")),
        "{:?}",
        kadmit.log_lines()
    );
    kadmit.assert_no_panic();
}

#[test]
fn the_guard_needs_kept_reviews() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FILE), rules(false)).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(["serve", "--rules"])
        .arg(&dir)
        .args(["--shadow-reviews", "0", "--reload-max-new-denials", "1"])
        .output()
        .expect("run kadmit");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--shadow-reviews above 0"), "{stderr}");
    for (flag, value) in [
        ("--shadow-reviews", "100001"),
        ("--shadow-max-bytes", "1073741825"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
            .args(["serve", "--rules"])
            .arg(&dir)
            .args([flag, value])
            .output()
            .expect("run kadmit");
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
    }
}
