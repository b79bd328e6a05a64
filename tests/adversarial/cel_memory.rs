//! CEL expressions on large reviews. The interpreter copies every value it
//! is given and every item a `map` appends: one expression appending copies
//! of `object` took a 12 KB review to 1.7 GB within the step budget, and one
//! reading `request` held a user's groups four times (291 MB for a 16 MB
//! review). The shipped Deployment allows 256 MiB.

use serde_json::{Value, json};

use super::support::memory;
use crate::server::harness::{Kadmit, fixture, post_json, rules_dir};

/// A rule set `name` (and its file, `name.yaml`) denying ConfigMap CREATEs
/// where `cel` holds.
fn denying(name: &str, cel: &str) -> (String, String) {
    let rule_set = format!(
        r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: {name}
spec:
  rules:
    - name: denies
      match: {{operations: [CREATE], resources: [configmaps]}}
      deny:
        - cel: "{cel}"
          message: denied
"#
    );
    (format!("{name}.yaml"), rule_set)
}

/// The rule sets of the test, each posted to at `/validate/{name}`.
fn rule_sets() -> Vec<(String, String)> {
    let sixty: Vec<String> = (0..60).map(|i| i.to_string()).collect();
    let four_mb = format!(
        "'aaaaaaaaaa'{}.replace('a', 'aaaa')",
        ".replace('a', 'aaaaaaaaaa')".repeat(5)
    );
    let nested = (0..20).fold("0".to_owned(), |inner, _| {
        format!("d.reverse().indexOf(d.reverse(), {inner})")
    });
    vec![
        // A `map` appending copies of the whole object.
        denying(
            "copies-object",
            &format!(
                "object.data.map(k, [{}]).size() == 0",
                ["object"; 8].join(", ")
            ),
        ),
        // A list literal holding 120 copies of the whole object.
        denying(
            "literal-of-objects",
            &format!("[{}].size() == 0", ["object"; 120].join(", ")),
        ),
        // A `map` appending 60 optionals holding the object's data.
        denying(
            "map-of-optionals",
            &format!("[{}].map(i, object.?data).size() == 0", sixty.join(", ")),
        ),
        // A 4 MB string made by the rule, two reversed copies of it held at
        // each of 20 nested calls: 300 MB and 0.6 s for 30, admitted.
        denying(
            "nested-reversals",
            &format!("[{four_mb}].all(d, {nested} == 0)"),
        ),
        // The user's groups.
        denying("reads-groups", "'evil' in request.userInfo.groups"),
    ]
}

/// Posts `review` to `path` and checks it is denied with 413 over `limit`.
fn assert_denied_over(kadmit: &Kadmit, path: &str, review: Vec<u8>, limit: &str) {
    let (status, _, body) = post_json(&kadmit.client(), &kadmit.url(path), review);
    assert_eq!(status, 200, "{path}: {body}");
    assert_eq!(body["response"]["allowed"], false, "{path}: {body}");
    assert_eq!(body["response"]["status"]["code"], 413, "{path}: {body}");
    assert_eq!(
        body["response"]["auditAnnotations"]["evaluation-limit"], limit,
        "{path}: {body}"
    );
}

/// The ConfigMap CREATE fixture with `edit` applied.
fn configmap_review(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture is JSON");
    edit(&mut review);
    serde_json::to_vec(&review).expect("serialize")
}

#[test]
fn expressions_on_large_reviews_are_denied_before_their_copies_exhaust_memory() {
    let rule_sets = rule_sets();
    let files: Vec<(&str, &str)> = rule_sets
        .iter()
        .map(|(file, rule_set)| (file.as_str(), rule_set.as_str()))
        .collect();
    let rules = rules_dir(&files);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let client = kadmit.client();
    let baseline = memory(kadmit.pid()).peak;

    // 1,150 keys: each of the 1,150 items appended holds eight copies of
    // the object.
    let copies = configmap_review(|review| {
        let data: serde_json::Map<String, Value> =
            (0..1_150).map(|i| (format!("k{i}"), json!({}))).collect();
        review["request"]["object"]["data"] = Value::Object(data);
    });
    assert_denied_over(
        &kadmit,
        "/validate/copies-object",
        copies,
        "evaluation_steps",
    );

    // 120 copies of a 350 KB object in one list: each is charged as it is
    // copied (they held 1.9 GB and took 11.5 s).
    let large = configmap_review(|review| {
        let data: serde_json::Map<String, Value> = (0..25_000)
            .map(|i| (format!("key-{i:06}"), json!("v")))
            .collect();
        review["request"]["object"]["data"] = Value::Object(data);
    });
    assert!(large.len() > 350_000, "{}", large.len());
    assert_denied_over(
        &kadmit,
        "/validate/literal-of-objects",
        large.clone(),
        "evaluation_steps",
    );
    // The same copies held in optionals (`object.?data`) were charged
    // nothing: 60 of a 180 KB object took 326 MB and were admitted.
    assert_denied_over(
        &kadmit,
        "/validate/map-of-optionals",
        large,
        "evaluation_steps",
    );

    // Values the rule makes itself are charged as variables of their size:
    // the reversals of a string made from a short literal, on the
    // fixture's small ConfigMap.
    assert_denied_over(
        &kadmit,
        "/validate/nested-reversals",
        configmap_review(|_| {}),
        "evaluation_steps",
    );

    // 900,000 groups (3.6 MB), within what the request path parses: the
    // request document and the interpreter's copy of it would take more
    // than the documents of one review may.
    let groups = configmap_review(|review| {
        review["request"]["userInfo"]["groups"] = json!(vec!["g"; 900_000]);
    });
    assert_denied_over(&kadmit, "/validate/reads-groups", groups, "converted_bytes");

    // An ordinary number of groups is read as before.
    let evil = configmap_review(|review| {
        review["request"]["userInfo"]["groups"] = json!(["a", "evil"]);
    });
    let (status, _, body) = post_json(&client, &kadmit.url("/validate/reads-groups"), evil);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert_eq!(body["response"]["status"]["code"], 403, "{body}");

    // Unbounded, the first review alone took the peak past 1.7 GB, the
    // second to 1.9 GB, the optionals to 326 MB, the reversals to 300 MB
    // and the groups to 233 MB.
    let grown = memory(kadmit.pid()).peak.saturating_sub(baseline);
    assert!(grown < 160 << 20, "the peak grew by {} MiB", grown >> 20);
    kadmit.assert_no_panic();
}
