//! Reviews whose JSON takes far more memory parsed than its size: a body of
//! one-key maps (`[{"":0},...]`) takes about 84 times its size as
//! `serde_json` values, so one 14 MB review took the server to 1.5 GB
//! (request path) and the shadow and recording threads, which parse every
//! review they keep, to 476 MB and 873 MB. The shipped Deployment allows
//! 256 MiB.

use serde_json::{Value, json};

use super::support::memory;
use crate::server::harness::{Kadmit, fixture, post_json, rules_dir};

/// A rule that reads every ConfigMap's data, so its object is parsed.
const READS_DATA: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: reads-data
spec:
  rules:
    - name: no-forbidden-key
      match: {operations: [CREATE], resources: [configmaps]}
      deny:
        - path: $.object.data.forbidden
          exists: true
          message: forbidden key
"#;

/// A ConfigMap CREATE whose object holds `list` under `extra`.
fn configmap_review(list: &str) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture is JSON");
    review["request"]["object"]["extra"] = json!("@LIST@");
    serde_json::to_string(&review)
        .expect("serialize")
        .replace("\"@LIST@\"", list)
        .into_bytes()
}

/// A rule that reads every ConfigMap's data, and only warns.
const WARNS_ON_DATA: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: warns-on-data
spec:
  rules:
    - name: forbidden-key
      match: {operations: [CREATE], resources: [configmaps]}
      action: Warn
      deny:
        - path: $.object.data.forbidden
          exists: true
          message: forbidden key
"#;

/// A rule that only warns, through a CEL expression: one that fails (here
/// on a ConfigMap without `data`) denies whatever the action.
const WARNS_BY_CEL: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: warns-by-cel
spec:
  rules:
    - name: forbidden-key
      match: {operations: [CREATE], resources: [configmaps]}
      action: Warn
      deny:
        - cel: "'forbidden' in object.data"
          message: forbidden key
"#;

/// A rule that no ConfigMap review is sent to.
const SECRETS_ONLY: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: secrets-only
spec:
  rules:
    - name: no-forbidden-name
      match: {operations: [CREATE], resources: [secrets]}
      deny:
        - path: $.request.name
          equals: forbidden
          message: forbidden name
"#;

#[test]
fn a_review_that_would_parse_into_gigabytes_is_denied_before_it_is_parsed() {
    let rules = rules_dir(&[
        ("reads-data.yaml", READS_DATA),
        ("secrets-only.yaml", SECRETS_ONLY),
        ("warns-on-data.yaml", WARNS_ON_DATA),
        ("warns-by-cel.yaml", WARNS_BY_CEL),
    ]);
    let record = tempfile::tempdir().expect("tempdir");
    let kadmit = Kadmit::with_rules(rules.path())
        .args(["--record".as_ref(), record.path().as_os_str()])
        .start();
    let client = kadmit.client();
    let url = kadmit.url("/validate");
    let baseline = memory(kadmit.pid()).peak;

    // 1.8 million one-key maps, 14 MB: about 1.2 GB parsed.
    let hostile = configmap_review(&format!("[{}]", vec![r#"{"":0}"#; 1_800_000].join(",")));
    assert!(hostile.len() < 16 << 20);
    // Denied, not refused: the API server answers a 413 by the webhook's
    // failurePolicy, and would admit it unchecked under Ignore.
    let (status, _, body) = post_json(&client, &url, hostile.clone());
    assert_eq!(status, 200, "{body}");
    let response = &body["response"];
    assert_eq!(response["allowed"], false, "{body}");
    assert_eq!(response["status"]["code"], 413, "{body}");
    assert!(
        response["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bytes of memory to parse")),
        "{body}"
    );
    assert_eq!(
        response["auditAnnotations"]["evaluation-limit"], "parsed_bytes",
        "{body}"
    );
    // Where only rules that never deny apply, it is allowed, saying that
    // they were not evaluated.
    let (status, _, body) = post_json(
        &client,
        &kadmit.url("/validate/warns-on-data"),
        hostile.clone(),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(
        body["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("were not evaluated")),
        "{body}"
    );
    assert_eq!(
        body["response"]["auditAnnotations"]["evaluation-limit"], "parsed_bytes",
        "{body}"
    );
    // A rule that only warns but whose expression could fail, which would
    // deny it, denies it.
    let (status, _, body) = post_json(
        &client,
        &kadmit.url("/validate/warns-by-cel"),
        hostile.clone(),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert_eq!(body["response"]["status"]["code"], 413, "{body}");
    // Where no rule applies, it is allowed as any other, with nothing of
    // the objects built.
    let (status, _, body) = post_json(&client, &kadmit.url("/validate/secrets-only"), hostile);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");

    // Millions of groups outside the objects: what decoding with the
    // objects unparsed would build, so refused before it does (it took the
    // peak past 300 MB).
    let mut review: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture is JSON");
    review["request"]["userInfo"]["groups"] = json!("@GROUPS@");
    let groups = serde_json::to_string(&review).expect("serialize").replace(
        "\"@GROUPS@\"",
        &format!("[{}]", vec!["\"\""; 5_000_000].join(",")),
    );
    assert!(groups.len() < 16 << 20);
    let (status, _, body) = post_json(&client, &url, groups.into_bytes());
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["reason"], "RequestEntityTooLarge", "{body}");

    // As large a body of long strings parses in about its size, and is
    // answered.
    let honest = configmap_review(&format!(
        "[{}]",
        vec![format!("\"{}\"", "x".repeat(1 << 20)); 13].join(",")
    ));
    let (status, _, body) = post_json(&client, &url, honest);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");

    // Unbounded, the hostile review alone took the peak past 1 GB; the
    // honest one (kept for shadowing and recorded too) takes a few times
    // its 13 MiB.
    let grown = memory(kadmit.pid()).peak.saturating_sub(baseline);
    assert!(grown < 192 << 20, "the peak grew by {} MiB", grown >> 20);
    kadmit.assert_no_panic();
}
