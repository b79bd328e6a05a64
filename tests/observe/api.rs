//! The metrics, `/api/denials` and `/api/summary` of the real binary after a
//! known mix of reviews: exact counts per rule and label set, no free text in
//! labels, the denial ring's order and bound, and the server-side summary.

use serde_json::Value;

use super::{ConfigMap, Ops, RULE_SET, Traffic, in_both_setups, policy_dir, send_traffic};
use crate::server::harness::{Kadmit, post_json};

fn json(kadmit: &Kadmit, path: &str) -> Value {
    let (status, body) = kadmit.get_plain(path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"))
}

fn rules_are_counted_by_outcome_with_bounded_labels(ops: Ops) {
    let rules = policy_dir();
    let kadmit = ops.server(rules.path()).start();
    let traffic = Traffic::MIX;
    send_traffic(&kadmit, traffic);

    let rejection = |rule: &str, code: u16| {
        format!(
            r#"kadmit_rejections_total{{rule_set="{RULE_SET}",rule="{rule}",operation="CREATE",resource="configmaps",code="{code}"}}"#
        )
    };
    let per_rule =
        |metric: &str, rule: &str| format!(r#"{metric}{{rule_set="{RULE_SET}",rule="{rule}"}}"#);
    let review = |endpoint: &str, decision: &str| {
        format!(
            r#"kadmit_reviews_total{{endpoint="{endpoint}",rule_set="*",operation="CREATE",resource="configmaps",decision="{decision}"}}"#
        )
    };
    let expected = [
        (rejection("no-forbidden-label", 403), traffic.forbidden),
        (
            rejection("no-password-in-configmaps", 422),
            traffic.password,
        ),
        (
            per_rule("kadmit_warnings_total", "team-label-recommended"),
            traffic.warned,
        ),
        (
            per_rule("kadmit_audits_total", "debug-annotation-audited"),
            traffic.audited,
        ),
        (
            per_rule("kadmit_mutations_total", "default-owner-label"),
            traffic.mutated,
        ),
        (
            review("validate", "denied"),
            traffic.forbidden + traffic.password,
        ),
        (
            review("validate", "allowed"),
            traffic.warned + traffic.audited + traffic.clean,
        ),
        (review("mutate", "patched"), traffic.mutated),
        (
            r#"kadmit_review_duration_seconds_count{endpoint="validate"}"#.to_owned(),
            traffic.validated(),
        ),
        // The top bucket reaches past the API server's 30 s timeout.
        (
            r#"kadmit_review_duration_seconds_bucket{endpoint="validate",le="60"}"#.to_owned(),
            traffic.validated(),
        ),
        (r#"kadmit_reloads_total{result="failure"}"#.to_owned(), 0),
    ];
    for (sample, count) in expected {
        assert_eq!(kadmit.metric(&sample), count as f64, "{sample}");
    }

    // Namespaces, object names, users and uids are in the reviews but never
    // in a label.
    let exposition = kadmit.metrics_page();
    for private in [
        "team-a",
        "payments",
        "app-config",
        "db-settings",
        "alice",
        "deployer",
        "observe-0001",
        "hunter2",
    ] {
        assert!(
            !exposition.contains(private),
            "{private:?} leaked into /metrics:\n{exposition}"
        );
    }
    kadmit.assert_no_panic();
}

fn made_up_resources_are_labelled_other(ops: Ops) {
    let rules = policy_dir();
    let kadmit = ops.server(rules.path()).start();
    let client = kadmit.client();
    let mut review: Value =
        serde_json::from_slice(&ConfigMap::clean("x").review("odd-resource")).expect("JSON");
    review["request"]["resource"]["resource"] = Value::from("Config Maps\"} 1");
    let (status, _, response) = post_json(
        &client,
        &kadmit.url("/validate"),
        serde_json::to_vec(&review).expect("serialize"),
    );
    assert_eq!(status, 200, "{response}");
    let sample = r#"kadmit_reviews_total{endpoint="validate",rule_set="*",operation="CREATE",resource="other",decision="allowed"}"#;
    assert_eq!(kadmit.metric(sample), 1.0, "{sample}");
}

fn recent_denials_are_newest_first_with_who_and_what(ops: Ops) {
    let rules = policy_dir();
    let kadmit = ops.server(rules.path()).start();
    let traffic = Traffic::MIX;
    send_traffic(&kadmit, traffic);

    let denials = json(&kadmit, "/api/denials");
    assert_eq!(denials["capacity"], 200, "{denials}");
    let expected = traffic.forbidden + traffic.password;
    assert_eq!(denials["recorded"], expected, "{denials}");
    let entries = denials["denials"].as_array().expect("denials array");
    assert_eq!(entries.len(), expected, "{denials}");
    // The password denials were sent last.
    let newest = &entries[0];
    assert_eq!(newest["rule"], "no-password-in-configmaps", "{newest}");
    assert_eq!(newest["ruleSet"], RULE_SET);
    assert_eq!(newest["code"], 422);
    assert_eq!(newest["operation"], "CREATE");
    assert_eq!(newest["resource"], "configmaps");
    assert_eq!(newest["namespace"], "payments");
    assert_eq!(newest["name"], "db-settings");
    assert_eq!(newest["user"], "system:serviceaccount:payments:deployer");
    assert_eq!(
        newest["message"], "configmap db-settings holds a password: use a Secret",
        "{newest}"
    );
    let oldest = &entries[expected - 1];
    assert_eq!(oldest["rule"], "no-forbidden-label", "{oldest}");
    assert_eq!(oldest["user"], "alice");
    assert_eq!(oldest["uid"], "observe-0001");
    let times: Vec<&str> = entries
        .iter()
        .map(|entry| entry["time"].as_str().expect("time"))
        .collect();
    assert!(
        times.windows(2).all(|pair| pair[0] >= pair[1]),
        "not newest first: {times:?}"
    );
}

fn the_denials_capacity_flag_bounds_the_ring(ops: Ops) {
    let rules = policy_dir();
    let kadmit = ops
        .server(rules.path())
        .args(["--denials-capacity", "2"])
        .start();
    send_traffic(&kadmit, Traffic::MIX);
    let denials = json(&kadmit, "/api/denials");
    assert_eq!(denials["capacity"], 2, "{denials}");
    assert_eq!(
        denials["recorded"],
        Traffic::MIX.forbidden + Traffic::MIX.password
    );
    let rules: Vec<&str> = denials["denials"]
        .as_array()
        .expect("array")
        .iter()
        .map(|entry| entry["rule"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        rules,
        ["no-password-in-configmaps", "no-password-in-configmaps"]
    );
}

fn the_summary_has_totals_rules_latency_and_the_plan(ops: Ops) {
    let rules = policy_dir();
    let kadmit = ops.server(rules.path()).start();
    let traffic = Traffic::MIX;
    send_traffic(&kadmit, traffic);

    let summary = json(&kadmit, "/api/summary");
    let totals = &summary["totals"];
    assert_eq!(totals["reviews"], traffic.reviews() as f64, "{summary}");
    assert_eq!(
        totals["denied"],
        (traffic.forbidden + traffic.password) as f64
    );
    assert_eq!(totals["warnings"], traffic.warned as f64);
    assert_eq!(totals["audits"], traffic.audited as f64);
    assert_eq!(totals["mutations"], traffic.mutated as f64);

    let rules = summary["rules"].as_array().expect("rules");
    let names: Vec<&str> = rules
        .iter()
        .map(|rule| rule["rule"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        &names[..2],
        ["no-forbidden-label", "no-password-in-configmaps"],
        "most rejections first: {summary}"
    );
    assert_eq!(rules[0]["rejections"], traffic.forbidden as f64);

    let latency = &summary["current"]["latency"];
    assert_eq!(latency["reviews"], traffic.reviews() as f64, "{summary}");
    let p50 = latency["p50"].as_f64().expect("p50");
    let p99 = latency["p99"].as_f64().expect("p99");
    assert!(0.0 < p50 && p50 <= p99 && p99 < 30.0, "{latency}");

    assert_eq!(summary["plan"]["generation"], 1, "{summary}");
    assert_eq!(summary["plan"]["ruleSets"], 1);
    assert_eq!(summary["plan"]["rules"], 5);
    assert!(summary["plan"].get("lastError").is_none(), "{summary}");
}

in_both_setups!(
    rules_are_counted_by_outcome_with_bounded_labels,
    made_up_resources_are_labelled_other,
    recent_denials_are_newest_first_with_who_and_what,
    the_denials_capacity_flag_bounds_the_ring,
    the_summary_has_totals_rules_latency_and_the_plan,
);
