//! The webhook endpoints against real kube-apiserver request bodies: the
//! response contract the API server checks (apiVersion, kind, uid, no patch
//! from /validate), both review versions, both HTTP versions, and the mutate
//! and warning round trips through the engine.

use base64::Engine as _;
use serde_json::{Value, json};

use super::harness::{
    Alpn, Kadmit, bundled_rules, client, fixture, fixtures, post_json, roots_from_pem, rules_dir,
};

/// Asserts what kube-apiserver checks in a webhook response to `request`.
fn assert_answers(request: &Value, response: &Value, endpoint: &str, name: &str) {
    assert_eq!(
        response["apiVersion"], request["apiVersion"],
        "{name} {endpoint}: answered in another version: {response}"
    );
    assert_eq!(
        response["kind"], "AdmissionReview",
        "{name} {endpoint}: {response}"
    );
    assert_eq!(
        response["response"]["uid"], request["request"]["uid"],
        "{name} {endpoint}: uid not copied: {response}"
    );
    assert!(
        response["response"]["allowed"].is_boolean(),
        "{name} {endpoint}: {response}"
    );
    let inner = response["response"]
        .as_object()
        .expect("response is an object");
    match endpoint {
        "validate" => assert!(
            !inner.contains_key("patch") && !inner.contains_key("patchType"),
            "{name}: /validate returned patch fields: {response}"
        ),
        _ => assert_eq!(
            inner.contains_key("patch"),
            inner.contains_key("patchType"),
            "{name}: a patch needs its patchType and vice versa: {response}"
        ),
    }
    if let Some(patch) = inner.get("patch") {
        assert_eq!(inner["patchType"], "JSONPatch", "{name}: {response}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch.as_str().expect("patch is a string"))
            .expect("patch is base64");
        let ops: Value = serde_json::from_slice(&bytes).expect("patch is JSON");
        assert!(ops.is_array(), "{name}: patch is not a JSON Patch array");
    }
}

#[test]
fn every_fixture_round_trips_through_both_endpoints_over_h2_and_http1() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let roots = roots_from_pem(kadmit.ca_pem());
    let mut versions_seen = std::collections::BTreeSet::new();
    for (alpn, expected_version) in [
        (Alpn::H2AndHttp1, reqwest::Version::HTTP_2),
        (Alpn::Http1, reqwest::Version::HTTP_11),
    ] {
        // One client per protocol: like the API server, it keeps its
        // connection open across every call.
        let client = client(&roots, None, alpn);
        for (name, body) in fixtures() {
            let request: Value = serde_json::from_slice(&body).expect("fixture is JSON");
            versions_seen.insert(request["apiVersion"].as_str().unwrap_or("").to_owned());
            for endpoint in ["validate", "mutate"] {
                // The API server appends ?timeout=...; routing must ignore it.
                let url = kadmit.url(&format!("/{endpoint}?timeout=10s"));
                let (status, version, response) = post_json(&client, &url, body.clone());
                assert_eq!(status, 200, "{name} {endpoint}: {response}");
                assert_eq!(version, expected_version, "{name} {endpoint}");
                assert_answers(&request, &response, endpoint, &name);
            }
        }
    }
    assert!(
        versions_seen.contains("admission.k8s.io/v1")
            && versions_seen.contains("admission.k8s.io/v1beta1"),
        "fixtures must cover both review versions: {versions_seen:?}"
    );
    kadmit.assert_no_panic();
}

#[test]
fn the_printed_curl_line_names_the_printed_ca_and_the_bound_port() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let ca_line = kadmit
        .stdout
        .iter()
        .find_map(|line| line.strip_prefix("self-signed ca="))
        .expect("a self-signed line");
    let ca_path = ca_line.split(" (").next().expect("ca path");
    let curl = kadmit
        .stdout
        .iter()
        .find_map(|line| line.strip_prefix("try: "))
        .expect("a curl line");
    assert!(
        curl.starts_with(&format!("curl --cacert {ca_path} https://127.0.0.1:{}/validate -H 'Content-Type: application/json' --data @",
            kadmit.tls_addr().port())),
        "{curl}"
    );
    // The sample review the line sends is a valid review the server answers.
    let review_path = curl.rsplit('@').next().expect("review path");
    let body = std::fs::read(review_path).expect("the sample review exists");
    let (status, _, response) = post_json(&kadmit.client(), &kadmit.url("/validate"), body);
    assert_eq!(status, 200, "{response}");
}

const TEAM_DEFAULT: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: team-default
spec:
  rules:
    - name: default-team-label
      match:
        operations: [CREATE]
        resources: ["pods"]
      mutate:
        - setIfAbsent: {path: "$.object.metadata.labels.team", value: "none"}
"#;

fn apply_patch(object: &Value, response: &Value) -> Value {
    let patch = response["response"]["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("no patch in {response}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("base64 patch");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("JSON Patch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("the patch applies to the object");
    patched
}

#[test]
fn mutate_returns_a_patch_that_turns_the_object_into_the_expected_one() {
    let rules = rules_dir(&[("team.yaml", TEAM_DEFAULT)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let client = kadmit.client();
    let body = fixture("create-pod.json");
    let request: Value = serde_json::from_slice(&body).expect("JSON");
    let object = &request["request"]["object"];

    let mut expected = object.clone();
    expected["metadata"]["labels"]["team"] = json!("none");
    for path in ["/mutate", "/mutate/team-default"] {
        let (status, _, response) = post_json(&client, &kadmit.url(path), body.clone());
        assert_eq!(status, 200, "{path}: {response}");
        assert_eq!(response["response"]["allowed"], true, "{path}: {response}");
        assert_eq!(response["response"]["patchType"], "JSONPatch", "{response}");
        assert_eq!(apply_patch(object, &response), expected, "{path}");
    }

    // The validating endpoint of the same rule set never sends a patch.
    let (status, _, response) = post_json(&client, &kadmit.url("/validate/team-default"), body);
    assert_eq!(status, 200, "{response}");
    assert!(response["response"].get("patch").is_none(), "{response}");

    // Idempotent: the mutated object needs no further patch, and the answer
    // then has no patch fields at all.
    let mut again = request.clone();
    again["request"]["object"] = expected;
    let body = serde_json::to_vec(&again).expect("serialize");
    let (status, _, response) = post_json(&client, &kadmit.url("/mutate"), body);
    assert_eq!(status, 200, "{response}");
    assert!(
        response["response"].get("patch").is_none()
            && response["response"].get("patchType").is_none(),
        "{response}"
    );

    // Per-rule-set metrics carry the rule set's name.
    assert!(
        kadmit.metric(
            r#"kadmit_reviews_total{endpoint="mutate",rule_set="team-default",operation="CREATE",resource="pods",decision="patched"}"#
        ) >= 1.0
    );
}

#[test]
fn warnings_reach_the_api_server_single_line_deduplicated_and_short() {
    let long = "x".repeat(200);
    let rule = format!(
        r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: noisy
spec:
  rules:
    - name: noisy-warnings
      action: Warn
      match:
        operations: [CREATE]
        resources: ["pods"]
      deny:
        - message: "first line\nsecond line"
        - message: "same warning"
        - message: "same warning"
        - message: "{long}"
"#
    );
    let rules = rules_dir(&[("noisy.yaml", &rule)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let (status, _, response) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    let warnings: Vec<&str> = response["response"]["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings in {response}"))
        .iter()
        .map(|w| w.as_str().expect("warning is a string"))
        .collect();
    for warning in &warnings {
        assert!(
            !warning.chars().any(char::is_control),
            "the API server drops warnings with control characters: {warning:?}"
        );
        assert!(warning.chars().count() <= 120, "too long: {warning:?}");
    }
    let unique: std::collections::BTreeSet<_> = warnings.iter().collect();
    assert_eq!(unique.len(), warnings.len(), "duplicates: {warnings:?}");
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("same warning"))
            .count(),
        1,
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("first line") && w.contains("second line")),
        "{warnings:?}"
    );
    assert!(warnings.iter().any(|w| w.contains("xxxx")), "{warnings:?}");
}

/// Three rule sets that each deny or warn on every Pod, and three that each
/// set a label: which of them answered shows in the response.
const GROUPED_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: alpha}
spec:
  rules:
    - name: deny-pods
      match: {operations: [CREATE], resources: [pods]}
      deny: [{message: alpha denies}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: beta}
spec:
  rules:
    - name: warn-pods
      action: Warn
      match: {operations: [CREATE], resources: [pods]}
      deny: [{message: beta warns}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: gamma}
spec:
  rules:
    - name: deny-pods
      match: {operations: [CREATE], resources: [pods]}
      deny: [{message: gamma denies}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: one}
spec:
  rules:
    - name: label
      match: {operations: [CREATE], resources: [pods]}
      mutate: [{setIfAbsent: {path: $.object.metadata.labels.one, value: "1"}}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: two}
spec:
  rules:
    - name: label
      match: {operations: [CREATE], resources: [pods]}
      mutate: [{setIfAbsent: {path: $.object.metadata.labels.two, value: "2"}}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: three}
spec:
  rules:
    - name: label
      match: {operations: [CREATE], resources: [pods]}
      mutate: [{setIfAbsent: {path: $.object.metadata.labels.three, value: "3"}}]
"#;

/// Issue 14: a grouped webhook entry's path (`/validate/alpha.beta`) gets
/// exactly the verdict of the rule sets it names, and the metrics count the
/// review once for each of them, with each one's own decision.
#[test]
fn a_grouped_path_evaluates_exactly_its_rule_sets_and_counts_each() {
    let rules = rules_dir(&[("sets.yaml", GROUPED_RULES)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let client = kadmit.client();
    let body = fixture("create-pod.json");

    let (status, _, response) =
        post_json(&client, &kadmit.url("/validate/alpha.beta"), body.clone());
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], false, "{response}");
    let message = response["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("alpha denies"), "{response}");
    assert!(
        !message.contains("gamma"),
        "gamma is not in the path: {response}"
    );
    assert_eq!(
        response["response"]["warnings"],
        json!(["beta/warn-pods: beta warns"]),
        "{response}"
    );

    let review = |rule_set: &str, decision: &str| {
        kadmit.metric(&format!(
            r#"kadmit_reviews_total{{endpoint="validate",rule_set="{rule_set}",operation="CREATE",resource="pods",decision="{decision}"}}"#
        ))
    };
    assert_eq!(review("alpha", "denied"), 1.0);
    assert_eq!(
        review("beta", "allowed"),
        1.0,
        "beta alone would have admitted"
    );
    assert_eq!(review("beta", "denied"), 0.0);
    assert_eq!(review("gamma", "denied"), 0.0);
    assert_eq!(
        review("alpha.beta", "denied"),
        0.0,
        "no label for the group"
    );
    assert_eq!(
        kadmit.metric(r#"kadmit_warnings_total{rule_set="beta",rule="warn-pods"}"#),
        1.0
    );

    // The names in any order; the rules still apply in rule-set order.
    let request: Value = serde_json::from_slice(&body).expect("JSON");
    let (status, _, response) = post_json(&client, &kadmit.url("/mutate/three.one"), body);
    assert_eq!(status, 200, "{response}");
    let patched = apply_patch(&request["request"]["object"], &response);
    let labels = &patched["metadata"]["labels"];
    assert_eq!(
        (&labels["one"], &labels["three"]),
        (&json!("1"), &json!("3"))
    );
    assert!(
        labels.get("two").is_none(),
        "two is not in the path: {labels}"
    );
    let mutated = |rule_set: &str| {
        kadmit.metric(&format!(
            r#"kadmit_reviews_total{{endpoint="mutate",rule_set="{rule_set}",operation="CREATE",resource="pods",decision="patched"}}"#
        ))
    };
    assert_eq!(
        (mutated("one"), mutated("two"), mutated("three")),
        (1.0, 0.0, 1.0)
    );
    kadmit.assert_no_panic();
}
