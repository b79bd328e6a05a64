//! Denied reviews whose fields are megabytes long: the recent-denials ring
//! keeps a bounded excerpt of each, so neither the process's memory nor the
//! `/api/denials` body grows with them.

use std::time::Instant;

use serde_json::{Value, json};

use super::support::{TRAFFIC_DEADLINE, before, memory};
use crate::server::harness::{Kadmit, fixture, post_json, rules_dir};

/// Two rules denying every ConfigMap CREATE, each quoting the object's name
/// in its message: every review becomes two entries.
pub const DENY_ALL: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: deny-all
spec:
  rules:
    - name: deny-configmaps
      match: {operations: [CREATE], resources: [configmaps]}
      deny:
        - message: "configmap {{ $.object.metadata.name }} is refused"
    - name: deny-configmaps-again
      code: 422
      match: {operations: [CREATE], resources: [configmaps]}
      deny:
        - message: "configmap {{ $.object.metadata.name }} is refused again"
"#;

/// Reviews sent, and the size of each hostile field. Unbounded, the ring
/// would hold REVIEWS x 2 entries x 4 fields x FIELD_BYTES = 256 MiB.
const REVIEWS: usize = 64;
const FIELD_BYTES: usize = 512 * 1024;

/// A denied review whose uid, name, namespace and user are `field_bytes`
/// long.
pub fn hostile_review(n: usize, field_bytes: usize) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture is JSON");
    let long = |tag: &str| format!("{tag}-{n}-{}", "x".repeat(field_bytes));
    let request = &mut review["request"];
    request["uid"] = json!(long("uid"));
    request["name"] = json!(long("name"));
    request["namespace"] = json!(long("ns"));
    request["userInfo"]["username"] = json!(long("user"));
    request["object"]["metadata"]["name"] = json!(long("name"));
    serde_json::to_vec(&review).expect("serialize")
}

/// Issue 11: 120 denied reviews with a 2 MiB uid held 329 MB and made
/// `/api/denials` a 254 MB body.
#[test]
fn denials_of_huge_reviews_keep_memory_and_the_api_body_bounded() {
    let rules = rules_dir(&[("deny-all.yaml", DENY_ALL)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let client = kadmit.client();
    let url = kadmit.url("/validate");

    // One review first, so the baseline includes the buffers any large
    // request needs.
    let (status, _, body) = post_json(&client, &url, hostile_review(0, FIELD_BYTES));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let baseline = memory(kadmit.pid()).rss;

    let deadline = Instant::now() + TRAFFIC_DEADLINE;
    for n in 1..REVIEWS {
        before(deadline, "sending the hostile reviews");
        let (status, _, body) = post_json(&client, &url, hostile_review(n, FIELD_BYTES));
        assert_eq!(status, 200, "review {n}");
        // The answer echoes the uid whole: the API server matches on it.
        let uid = body["response"]["uid"].as_str().unwrap_or_default();
        assert_eq!(uid.len(), format!("uid-{n}-").len() + FIELD_BYTES);
    }

    let (status, text) = kadmit.get_plain("/api/denials");
    assert_eq!(status, 200);
    let denials: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        denials["recorded"],
        2 * REVIEWS,
        "{}",
        text.get(..200).unwrap_or(&text)
    );
    let entries = denials["denials"].as_array().expect("entries");
    assert!(!entries.is_empty());
    for entry in entries {
        for field in ["uid", "name", "namespace", "user", "message"] {
            let value = entry[field].as_str().unwrap_or_default();
            assert!(
                !value.is_empty() && value.len() <= 1024,
                "{field} kept {} bytes",
                value.len()
            );
            assert!(value.ends_with(" bytes]"), "{field} not marked as cut");
        }
    }
    // 128 entries of at most ~3 KiB each: well under 1 MiB. Unbounded, this
    // was a body of hundreds of megabytes.
    assert!(text.len() < 1 << 20, "/api/denials is {} bytes", text.len());

    // The entries themselves are ~400 KiB; the margin is for allocator
    // slack. Unbounded, the growth was over 256 MiB.
    let grown = memory(kadmit.pid()).rss.saturating_sub(baseline);
    assert!(
        grown < 96 << 20,
        "RSS grew by {} MiB over {REVIEWS} hostile reviews",
        grown >> 20
    );
    kadmit.assert_no_panic();
}

/// The byte budget holds when entries are large: a budget of 64 KiB keeps
/// only the newest few.
#[test]
fn the_denials_byte_budget_evicts_the_oldest() {
    let rules = rules_dir(&[("deny-all.yaml", DENY_ALL)]);
    let budget = 64 * 1024;
    let kadmit = Kadmit::with_rules(rules.path())
        .args(["--denials-max-bytes", &budget.to_string()])
        .start();
    let client = kadmit.client();
    for n in 0..40 {
        let (status, _, _) = post_json(
            &client,
            &kadmit.url("/validate"),
            hostile_review(n, 8 * 1024),
        );
        assert_eq!(status, 200, "review {n}");
    }
    let (status, text) = kadmit.get_plain("/api/denials");
    assert_eq!(status, 200);
    let denials: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(denials["maxBytes"], budget);
    assert_eq!(denials["recorded"], 80);
    let entries = denials["denials"].as_array().expect("entries");
    // About 3 KiB per entry: more than 2 fit, far fewer than 80.
    assert!(
        (2..40).contains(&entries.len()),
        "{} entries kept",
        entries.len()
    );
    // Newest first: the last review's entries lead.
    let newest = entries[0]["uid"].as_str().unwrap_or_default();
    assert!(
        newest.starts_with("uid-39-"),
        "{}",
        newest.get(..20).unwrap_or(newest)
    );
    assert!(text.len() < 2 * budget, "{} bytes", text.len());
}
