//! Every metric kadmit exports: names, label sets, buckets, and the functions
//! that record them.
//!
//! Names and label values live only here so that dashboards and alerts have one
//! place to look, and so that no label ever holds free text (error messages,
//! object names, uids): every label value is either a fixed code from this
//! module or a rule-set name from the loaded plan.

use metrics::{
    SharedString, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Reviews answered with HTTP 200, by endpoint, rule set and decision.
pub const REVIEWS_TOTAL: &str = "kadmit_reviews_total";
/// Time from a complete request body to an encoded response, by endpoint.
pub const REVIEW_DURATION_SECONDS: &str = "kadmit_review_duration_seconds";
/// Requests refused as bad input (HTTP 4xx), by fixed reason code.
pub const BAD_REQUESTS_TOTAL: &str = "kadmit_bad_requests_total";

/// Reviews kadmit could not answer (HTTP 5xx: no plan loaded, evaluation
/// failed), by fixed reason code.
pub const REVIEW_ERRORS_TOTAL: &str = "kadmit_review_errors_total";

/// Rule reloads by result (`success`, `failure`, `unchanged`).
pub const RELOADS_TOTAL: &str = "kadmit_reloads_total";
/// Time to read, compile and store the rules, by result.
pub const RELOAD_DURATION_SECONDS: &str = "kadmit_reload_duration_seconds";
/// Generation of the plan serving (0 before the first).
pub const PLAN_GENERATION: &str = "kadmit_plan_generation";
/// Rule sets in the plan serving.
pub const RULE_SETS_LOADED: &str = "kadmit_rule_sets_loaded";
/// Rules in the plan serving.
pub const RULES_LOADED: &str = "kadmit_rules_loaded";
/// Unix time of the last successful reload.
pub const LAST_RELOAD_SUCCESS_SECONDS: &str = "kadmit_last_reload_success_timestamp_seconds";

/// Label: `success`, `failure` or `unchanged`.
pub const LABEL_RESULT: &str = "result";

/// Label: `validate` or `mutate`.
pub const LABEL_ENDPOINT: &str = "endpoint";
/// Label: the rule-set name of `/validate/{ruleset}`, or [`ALL_RULE_SETS`].
pub const LABEL_RULE_SET: &str = "rule_set";
/// Label: one of the [`Decision`] names.
pub const LABEL_DECISION: &str = "decision";
/// Label: a fixed reason code such as `malformed` or `too_large`.
pub const LABEL_REASON: &str = "reason";

/// The `rule_set` label of `/validate` and `/mutate`, which evaluate every rule
/// set. `*` cannot be a rule-set name (names are DNS labels), so it never
/// collides with one.
pub const ALL_RULE_SETS: &str = "*";

/// Buckets of [`REVIEW_DURATION_SECONDS`]: a review takes tens of microseconds,
/// and anything near a second is already a problem (the API server's default
/// webhook timeout is 10 s).
const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25, 1.0,
];

/// Buckets of [`RELOAD_DURATION_SECONDS`]: a reload reads and compiles every
/// rule file, from about a millisecond to a second for large rule sets.
const RELOAD_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The outcome of one answered review, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Allowed without changes.
    Allowed,
    /// Denied by a rule.
    Denied,
    /// Allowed with a JSON Patch.
    Patched,
}

impl Decision {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::Patched => "patched",
        }
    }
}

/// Installs the Prometheus recorder as the process-wide `metrics` recorder and
/// describes every metric.
///
/// The returned handle renders the text exposition for `/metrics`; call
/// [`PrometheusHandle::run_upkeep`] on it periodically (the recorder installed
/// this way does not do it by itself).
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(REVIEW_DURATION_SECONDS.to_owned()),
            DURATION_BUCKETS_SECONDS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(RELOAD_DURATION_SECONDS.to_owned()),
            RELOAD_BUCKETS_SECONDS,
        )?
        .install_recorder()?;
    describe();
    Ok(handle)
}

fn describe() {
    describe_counter!(
        REVIEWS_TOTAL,
        Unit::Count,
        "Reviews answered with HTTP 200, by endpoint, rule set and decision."
    );
    describe_histogram!(
        REVIEW_DURATION_SECONDS,
        Unit::Seconds,
        "Time to decode, evaluate and encode one review."
    );
    describe_counter!(
        BAD_REQUESTS_TOTAL,
        Unit::Count,
        "Requests refused as bad input (HTTP 4xx), by reason."
    );
    describe_counter!(RELOADS_TOTAL, Unit::Count, "Rule reloads, by result.");
    describe_histogram!(
        RELOAD_DURATION_SECONDS,
        Unit::Seconds,
        "Time to read, compile and store the rules."
    );
    describe_gauge!(
        PLAN_GENERATION,
        "Generation of the plan serving (0 before the first)."
    );
    describe_gauge!(
        RULE_SETS_LOADED,
        Unit::Count,
        "Rule sets in the plan serving."
    );
    describe_gauge!(RULES_LOADED, Unit::Count, "Rules in the plan serving.");
    describe_gauge!(
        LAST_RELOAD_SUCCESS_SECONDS,
        Unit::Seconds,
        "Unix time of the last successful reload."
    );
    describe_counter!(
        REVIEW_ERRORS_TOTAL,
        Unit::Count,
        "Reviews kadmit could not answer (HTTP 5xx), by reason."
    );
}

/// Counts one answered review and records how long it took.
///
/// `rule_set` is a name from the plan or [`ALL_RULE_SETS`], never a name taken
/// unchecked from a URL.
pub fn record_review(
    endpoint: &'static str,
    rule_set: impl Into<SharedString>,
    decision: Decision,
    seconds: f64,
) {
    counter!(
        REVIEWS_TOTAL,
        LABEL_ENDPOINT => endpoint,
        LABEL_RULE_SET => rule_set.into(),
        LABEL_DECISION => decision.as_str()
    )
    .increment(1);
    histogram!(REVIEW_DURATION_SECONDS, LABEL_ENDPOINT => endpoint).record(seconds);
}

/// Counts one refused request under its fixed reason code.
pub fn record_bad_request(reason: &'static str) {
    counter!(BAD_REQUESTS_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Counts one review kadmit could not answer under its fixed reason code.
pub fn record_review_error(reason: &'static str) {
    counter!(REVIEW_ERRORS_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Records one reload: its result and duration, and the plan now serving.
pub fn record_reload(
    result: &'static str,
    seconds: f64,
    generation: u64,
    status: &crate::reload::ReloadStatus,
) {
    counter!(RELOADS_TOTAL, LABEL_RESULT => result).increment(1);
    histogram!(RELOAD_DURATION_SECONDS, LABEL_RESULT => result).record(seconds);
    // Gauges are f64; generations and counts stay far below 2^53.
    gauge!(PLAN_GENERATION).set(generation as f64);
    if result == "success" {
        gauge!(RULE_SETS_LOADED).set(status.rule_sets.len() as f64);
        let rules: usize = status.rule_sets.iter().map(|r| r.rules).sum();
        gauge!(RULES_LOADED).set(rules as f64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        gauge!(LAST_RELOAD_SUCCESS_SECONDS).set(now);
    }
}
