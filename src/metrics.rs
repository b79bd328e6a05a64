//! Every metric kadmit exports: names, label sets, buckets, and the functions
//! that record them.
//!
//! Names and label values live only here so that dashboards and alerts have one
//! place to look, and so that no label ever holds free text (error messages,
//! object names, uids, namespaces, user names): every label value is a fixed
//! code from this module, a rule-set or rule name from a loaded plan, an
//! operation (4 values), or a resource name capped by [`resource_label`].
//! docs/observability.md ("Metrics") lists each metric with its labels and
//! the worst-case number of series.
//!
//! The recording functions are on the request path. The series every review
//! records (reviews, durations, what each rule did) go through handles each
//! worker thread keeps once the recorder is installed (`kept`), so a review
//! does not build and look up each series' key again; the rest use the
//! `metrics` macros with `&'static str` label values where they can.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use metrics::{
    SharedString, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use crate::eval::{Finding, Outcome, Verdict};
use crate::review::{Operation, Request};

/// Reviews answered with HTTP 200, by endpoint, rule set, operation, resource
/// and decision.
pub const REVIEWS_TOTAL: &str = "kadmit_reviews_total";
/// Time from a complete request body to an encoded response, by endpoint.
pub const REVIEW_DURATION_SECONDS: &str = "kadmit_review_duration_seconds";
/// Deny rules that fired, by rule set, rule, operation, resource and status
/// code. A review denied by two rules counts once per rule.
pub const REJECTIONS_TOTAL: &str = "kadmit_rejections_total";
/// Warn rules that fired, by rule set and rule.
pub const WARNINGS_TOTAL: &str = "kadmit_warnings_total";
/// Audit rules that fired, by rule set and rule.
pub const AUDITS_TOTAL: &str = "kadmit_audits_total";
/// Mutating rules that changed an object, by rule set and rule.
pub const MUTATIONS_TOTAL: &str = "kadmit_mutations_total";
/// Requests refused as bad input (HTTP 4xx), by fixed reason code: those
/// kadmit's handlers refuse, and those actix answers before a handler runs
/// (`head_timeout`, `malformed_http`, `head_too_large`, see
/// [`crate::server::early`]).
pub const BAD_REQUESTS_TOTAL: &str = "kadmit_bad_requests_total";
/// [`BAD_REQUESTS_TOTAL`] reason: a request head over its bounds (HTTP/1.1:
/// actix's 128 KiB or 96 headers; HTTP/2: more than 96 header fields),
/// answered with an empty 431.
pub const BAD_REQUEST_HEAD_TOO_LARGE: &str = "head_too_large";

/// Reviews kadmit could not answer (HTTP 5xx: no plan loaded, evaluation
/// failed), by fixed reason code.
pub const REVIEW_ERRORS_TOTAL: &str = "kadmit_review_errors_total";

/// Reviews denied because they went over their budget rather than by a
/// rule, by the limit reached (`evaluation_steps`, `mutation_bytes`,
/// `unreadable_object`, `parsed_bytes`, `converted_bytes`, `answer_bytes`; see
/// [`crate::eval::budget`]). Alert on any: either an attack or a rule whose
/// cost grows with the square of the object.
pub const REVIEWS_OVER_BUDGET_TOTAL: &str = "kadmit_reviews_over_budget_total";

/// Open connections of the webhook listener, handshakes included.
pub const CONNECTIONS_OPEN: &str = "kadmit_connections_open";
/// Connections of the webhook listener kadmit closed to protect the others,
/// by reason: `handshake_timeout` (no TLS handshake within
/// `--tls-handshake-timeout-ms`), `handshake_evicted` (a stalled handshake
/// closed to make room for a new one), `idle_when_crowded` (an idle
/// connection closed while three quarters of `--max-connections` were
/// open), `write_stalled` (see [`CLOSED_WRITE_STALLED`]). Connections the
/// client closes are not counted.
pub const CONNECTIONS_CLOSED_TOTAL: &str = "kadmit_connections_closed_total";
/// [`CONNECTIONS_CLOSED_TOTAL`] reason: handshake not done in time.
pub const CLOSED_HANDSHAKE_TIMEOUT: &str = "handshake_timeout";
/// [`CONNECTIONS_CLOSED_TOTAL`] reason: oldest pending handshake closed.
pub const CLOSED_HANDSHAKE_EVICTED: &str = "handshake_evicted";
/// [`CONNECTIONS_CLOSED_TOTAL`] reason: idle while the listener was crowded.
pub const CLOSED_IDLE_WHEN_CROWDED: &str = "idle_when_crowded";
/// [`CONNECTIONS_CLOSED_TOTAL`] reason: the client took nothing of an
/// answer for the write-stall timeout (one second while crowded), or had
/// not taken all of an HTTP/1.1 answer over 16 KiB 10 s after it was ready.
pub const CLOSED_WRITE_STALLED: &str = "write_stalled";
/// [`OPERATIONS_CONNECTIONS_CLOSED_TOTAL`] reason: the oldest connection
/// closed to make room for a new one.
pub const CLOSED_EVICTED: &str = "evicted";
/// HTTP/2 streams of the webhook listener kadmit reset to protect the
/// others, by reason: `write_stalled` (the client opened no window for the
/// answer for the write-stall timeout, so the answer's share of
/// `--max-buffered-body-bytes` is given back), `evicted` (a new stream found
/// `--h2-max-open-streams` open and ended the oldest waiting for its
/// client), `refused` (a new stream found them open and none waiting). The
/// connection stays open.
pub const STREAMS_RESET_TOTAL: &str = "kadmit_streams_reset_total";
/// Reason of a new HTTP/2 stream refused because `--h2-max-open-streams`
/// were open and none waited for its client.
pub const STREAM_REFUSED: &str = "refused";
/// Open connections of the operations listener, handshakes included.
pub const OPERATIONS_CONNECTIONS_OPEN: &str = "kadmit_operations_connections_open";
/// Connections of the operations listener kadmit closed to protect the
/// others (the kubelet's probes among them), by reason: `evicted`,
/// `write_stalled`, `handshake_timeout`.
pub const OPERATIONS_CONNECTIONS_CLOSED_TOTAL: &str = "kadmit_operations_connections_closed_total";

/// Which listener a connection metric is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The HTTPS webhook listener (`--listen`).
    Webhook,
    /// The operations listener (`--plain-listen`).
    Operations,
}

/// Reviews handed to `serve --record`, by result: `written`, `dropped`
/// (the queue to the recording thread was full), `failed` (the write
/// failed, logged).
pub const RECORDED_REVIEWS_TOTAL: &str = "kadmit_recorded_reviews_total";
/// [`RECORDED_REVIEWS_TOTAL`] result: on disk.
pub const RECORD_WRITTEN: &str = "written";
/// [`RECORDED_REVIEWS_TOTAL`] result: not recorded, the queue was full.
pub const RECORD_DROPPED: &str = "dropped";
/// [`RECORDED_REVIEWS_TOTAL`] result: the write failed.
pub const RECORD_FAILED: &str = "failed";

/// Answered reviews offered to the shadow ring, by result: `kept` or
/// `dropped` (the queue to its thread was full, or the review was not JSON
/// or would take more than `review::MAX_KEPT_PARSED_BYTES` to parse).
pub const SHADOW_REVIEWS_TOTAL: &str = "kadmit_shadow_reviews_total";
/// [`SHADOW_REVIEWS_TOTAL`] result: kept for the next reload's comparison.
pub const SHADOW_KEPT: &str = "kept";
/// [`SHADOW_REVIEWS_TOTAL`] result: not kept (the queue was full, or the
/// review could not be parsed within bounds).
pub const SHADOW_DROPPED: &str = "dropped";
/// Of the recent reviews the last reload compared, how many the new plan
/// decided differently, by change: `changed`, `newly_denied`, `newly_admitted`.
pub const SHADOW_DECISIONS: &str = "kadmit_shadow_decisions";
/// Label of [`SHADOW_DECISIONS`].
pub const LABEL_CHANGE: &str = "change";
/// Log lines of other crates (actix-http, rustls, ...) not written because
/// more than their share (100 every 10 s) came: clients choose how many.
pub const LOG_LINES_DROPPED: &str = "kadmit_log_lines_dropped_total";
/// Reloads whose plan was held back by `--reload-max-new-denials`.
pub const RELOADS_HELD_BACK_TOTAL: &str = "kadmit_reloads_held_back_total";

/// Label of [`REVIEWS_OVER_BUDGET_TOTAL`]: the limit reached.
pub const LABEL_LIMIT: &str = "limit";

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

/// `notAfter` of the serving certificate, as Unix time: alert on
/// `kadmit_tls_certificate_expiry_timestamp_seconds - time() < 7 * 86400`.
/// Set at each load of the certificate (startup and every rotation).
pub const TLS_CERTIFICATE_EXPIRY_SECONDS: &str = "kadmit_tls_certificate_expiry_timestamp_seconds";
/// `notBefore` of the serving certificate, as Unix time: a value above
/// `time()` means the certificate is not valid yet.
pub const TLS_CERTIFICATE_NOT_BEFORE_SECONDS: &str =
    "kadmit_tls_certificate_not_before_timestamp_seconds";

/// Requests the operations listener refused for want of credentials, by
/// reason (`missing_token`, `invalid_token`, `missing_client_certificate`;
/// see [`crate::server::access`]). A steady rate is a scraper or a person
/// with the wrong token; a burst is someone guessing.
pub const OPS_REQUESTS_REFUSED_TOTAL: &str = "kadmit_ops_requests_refused_total";

/// Label: `success`, `failure` or `unchanged`.
pub const LABEL_RESULT: &str = "result";

/// Label: `validate` or `mutate`.
pub const LABEL_ENDPOINT: &str = "endpoint";
/// Label: a rule-set name from the plan; on [`REVIEWS_TOTAL`] the one of
/// `/validate/{ruleset}`, or [`ALL_RULE_SETS`].
pub const LABEL_RULE_SET: &str = "rule_set";
/// Label: a rule name from the plan.
pub const LABEL_RULE: &str = "rule";
/// Label: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
pub const LABEL_OPERATION: &str = "operation";
/// Label: `resource` or `resource/subresource`, see [`resource_label`].
pub const LABEL_RESOURCE: &str = "resource";
/// Label: the HTTP status code of a denial (`403` unless the rule sets one).
pub const LABEL_CODE: &str = "code";
/// Label: one of the [`Decision`] names.
pub const LABEL_DECISION: &str = "decision";
/// Label: a fixed reason code such as `malformed` or `too_large`.
pub const LABEL_REASON: &str = "reason";

/// The `rule_set` label of `/validate` and `/mutate`, which evaluate every rule
/// set. `*` cannot be a rule-set name (names are DNS labels), so it never
/// collides with one.
pub const ALL_RULE_SETS: &str = "*";

/// The `resource` label of a resource name that is not a plausible
/// Kubernetes resource, or that arrived after [`MAX_RESOURCE_LABELS`] others.
pub const OTHER_RESOURCE: &str = "other";

/// How many distinct `resource` label values kadmit keeps apart; later ones
/// are counted as [`OTHER_RESOURCE`].
///
/// The API server only sends the resources the webhook configuration lists,
/// which is a handful; the cap is for a client that is not the API server
/// (without `--client-ca` anyone reaching the port can post reviews) making up
/// resource names to grow the exposition without bound.
pub const MAX_RESOURCE_LABELS: usize = 100;

/// Longest `resource` label value; Kubernetes resource names are DNS labels
/// (at most 63 bytes), and so are subresources.
const MAX_RESOURCE_LABEL_BYTES: usize = 128;

/// Buckets of [`REVIEW_DURATION_SECONDS`]: a review takes tens of
/// microseconds, and the buckets reach past the API server's longest webhook
/// timeout (30 s), so a review that took longer than the API server waited is
/// still told apart from one that took a second.
pub const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of [`RELOAD_DURATION_SECONDS`]: a reload reads and compiles every
/// rule file, from about a millisecond to a second for large rule sets.
pub const RELOAD_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The results of [`RELOADS_TOTAL`], registered at zero on install so that
/// `increase(kadmit_reloads_total{result="failure"}[1h])` is 0, not empty,
/// while nothing has failed.
const RELOAD_RESULTS: [&str; 3] = ["success", "failure", "unchanged"];

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
    /// The decision of a whole verdict.
    pub fn of(verdict: &Verdict) -> Self {
        if !verdict.allowed {
            Decision::Denied
        } else if verdict.patch.is_some() {
            Decision::Patched
        } else {
            Decision::Allowed
        }
    }

    /// What `rule_set` decided of a verdict that several rule sets made: what
    /// its own entry would have answered. Denied when one of its rules
    /// denied, patched when one of its rules mutated. A denial or a patch no
    /// rule is named for (a review over its budget) is every set's.
    pub fn of_rule_set(verdict: &Verdict, rule_set: &str) -> Self {
        let by = |outcome: Outcome| {
            let mut all = verdict
                .findings
                .iter()
                .filter(|finding| finding.outcome == outcome)
                .peekable();
            all.peek().is_none() || all.any(|finding| &*finding.rule_set == rule_set)
        };
        if !verdict.allowed && by(Outcome::Denied) {
            Decision::Denied
        } else if verdict.patch.is_some() && by(Outcome::Mutated) {
            Decision::Patched
        } else {
            Decision::Allowed
        }
    }

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
        // No idle timeout: a series is never dropped from the registry, so
        // the handles `kept` holds always count into the exposition.
        .install_recorder()?;
    kept::GLOBAL_RECORDER.store(true, std::sync::atomic::Ordering::Relaxed);
    describe();
    for result in RELOAD_RESULTS {
        counter!(RELOADS_TOTAL, LABEL_RESULT => result).absolute(0);
    }
    for limit in crate::eval::budget::Exceeded::CODES {
        counter!(REVIEWS_OVER_BUDGET_TOTAL, LABEL_LIMIT => limit).absolute(0);
    }
    for reason in [CLOSED_WRITE_STALLED, CLOSED_EVICTED, STREAM_REFUSED] {
        counter!(STREAMS_RESET_TOTAL, LABEL_REASON => reason).absolute(0);
    }
    counter!(LOG_LINES_DROPPED).absolute(0);
    Ok(handle)
}

fn describe() {
    describe_counter!(
        OPS_REQUESTS_REFUSED_TOTAL,
        Unit::Count,
        "Requests the operations listener refused for want of credentials, by reason."
    );
    describe_counter!(
        REVIEWS_TOTAL,
        Unit::Count,
        "Reviews answered with HTTP 200, by endpoint, rule set, operation, resource and decision."
    );
    describe_histogram!(
        REVIEW_DURATION_SECONDS,
        Unit::Seconds,
        "Time to decode, evaluate and encode one review, by endpoint."
    );
    describe_counter!(
        REJECTIONS_TOTAL,
        Unit::Count,
        "Deny rules that fired, by rule set, rule, operation, resource and status code."
    );
    describe_counter!(
        WARNINGS_TOTAL,
        Unit::Count,
        "Warn rules that fired, by rule set and rule."
    );
    describe_counter!(
        AUDITS_TOTAL,
        Unit::Count,
        "Audit rules that fired, by rule set and rule."
    );
    describe_counter!(
        MUTATIONS_TOTAL,
        Unit::Count,
        "Mutating rules that changed an object, by rule set and rule."
    );
    describe_counter!(
        BAD_REQUESTS_TOTAL,
        Unit::Count,
        "Requests refused as bad input (HTTP 4xx), by reason."
    );
    describe_counter!(RELOADS_TOTAL, Unit::Count, "Rule reloads, by result.");
    describe_counter!(
        REVIEWS_OVER_BUDGET_TOTAL,
        Unit::Count,
        "Reviews denied for going over their evaluation budget, by the limit reached."
    );
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
    describe_gauge!(
        TLS_CERTIFICATE_EXPIRY_SECONDS,
        Unit::Seconds,
        "Unix time at which the serving TLS certificate expires (its notAfter)."
    );
    describe_gauge!(
        TLS_CERTIFICATE_NOT_BEFORE_SECONDS,
        Unit::Seconds,
        "Unix time from which the serving TLS certificate is valid (its notBefore)."
    );
    describe_counter!(
        REVIEW_ERRORS_TOTAL,
        Unit::Count,
        "Reviews kadmit could not answer (HTTP 5xx), by reason."
    );
    describe_counter!(
        RECORDED_REVIEWS_TOTAL,
        Unit::Count,
        "Reviews handed to serve --record, by result."
    );
    describe_counter!(
        SHADOW_REVIEWS_TOTAL,
        Unit::Count,
        "Answered reviews offered to the shadow ring, by result."
    );
    describe_gauge!(
        SHADOW_DECISIONS,
        Unit::Count,
        "Recent reviews the last compared plan decided differently, by change."
    );
    describe_counter!(
        LOG_LINES_DROPPED,
        Unit::Count,
        "Log lines of other crates not written, past their share of 100 every 10 s."
    );
    describe_counter!(
        RELOADS_HELD_BACK_TOTAL,
        Unit::Count,
        "Reloads whose plan was held back because it would deny too many recent reviews."
    );
    describe_gauge!(
        CONNECTIONS_OPEN,
        Unit::Count,
        "Open connections of the webhook listener, handshakes included."
    );
    describe_counter!(
        CONNECTIONS_CLOSED_TOTAL,
        Unit::Count,
        "Webhook connections kadmit closed to protect the others, by reason."
    );
    describe_counter!(
        STREAMS_RESET_TOTAL,
        Unit::Count,
        "HTTP/2 streams kadmit reset to protect the others, by reason; the connection stays open."
    );
    describe_gauge!(
        OPERATIONS_CONNECTIONS_OPEN,
        Unit::Count,
        "Open connections of the operations listener, handshakes included."
    );
    describe_counter!(
        OPERATIONS_CONNECTIONS_CLOSED_TOTAL,
        Unit::Count,
        "Operations connections kadmit closed to protect the others, by reason."
    );
}

/// The `operation` and `resource` labels of one review, computed once and
/// shared by every metric the review records.
#[derive(Debug, Clone)]
pub struct ReviewLabels {
    /// The admission operation.
    pub operation: Operation,
    /// The bounded resource label, see [`resource_label`].
    pub resource: SharedString,
}

impl ReviewLabels {
    /// The labels of `request`; `named` tells (asked only for a resource
    /// not labelled yet) whether a rule of the plan names its resource.
    pub fn of(request: &Request, named: impl FnOnce() -> bool) -> Self {
        ReviewLabels {
            operation: request.operation,
            resource: RESOURCES.label(&request.resource.resource, request.sub_resource(), named),
        }
    }
}

/// Known `resource` label values, interned so that labelling a review copies
/// an `Arc` instead of allocating a string. Resources a rule names get their
/// own value always; the others share a cap, so that a client making up
/// names fills only that share and the resources the rules are about keep
/// their series.
#[derive(Debug)]
struct ResourceLabels {
    cap: usize,
    known: RwLock<Known>,
}

#[derive(Debug, Default)]
struct Known {
    values: HashMap<Box<str>, SharedString>,
    /// Values given to resources no rule named.
    unnamed: usize,
}

impl ResourceLabels {
    fn new(cap: usize) -> Self {
        ResourceLabels {
            cap,
            known: RwLock::new(Known::default()),
        }
    }

    fn label(
        &self,
        resource: &str,
        sub_resource: &str,
        named: impl FnOnce() -> bool,
    ) -> SharedString {
        let mut buffer = [0u8; MAX_RESOURCE_LABEL_BYTES];
        let Some(label) = compose(&mut buffer, resource, sub_resource) else {
            return SharedString::const_str(OTHER_RESOURCE);
        };
        {
            let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(value) = known.values.get(label) {
                return value.clone();
            }
        }
        let named = named();
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = known.values.get(label) {
            return value.clone();
        }
        if !named {
            if known.unnamed >= self.cap {
                return SharedString::const_str(OTHER_RESOURCE);
            }
            known.unnamed += 1;
        }
        let value = SharedString::from(Arc::<str>::from(label));
        known.values.insert(label.into(), value.clone());
        value
    }
}

static RESOURCES: LazyLock<ResourceLabels> =
    LazyLock::new(|| ResourceLabels::new(MAX_RESOURCE_LABELS));

/// The `resource` label of `resource` and `sub_resource`: `pods`,
/// `pods/exec`, `deployments/scale`, like [`Request::resource_label`].
///
/// Bounded: names that are not lowercase DNS-style (`[a-z0-9.-]`, at most
/// 128 bytes in all) and every name after the first [`MAX_RESOURCE_LABELS`]
/// become [`OTHER_RESOURCE`]. The group is left out: two groups rarely share
/// a resource name, and when they do, the webhook rules name the group.
pub fn resource_label(resource: &str, sub_resource: &str) -> SharedString {
    RESOURCES.label(resource, sub_resource, || false)
}

/// `resource[/sub]` written into `buffer`, or `None` when it is empty, too
/// long, or holds a character no Kubernetes resource name has.
fn compose<'a>(buffer: &'a mut [u8], resource: &str, sub_resource: &str) -> Option<&'a str> {
    fn plausible(name: &str) -> bool {
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    }
    if resource.is_empty() || !plausible(resource) || !plausible(sub_resource) {
        return None;
    }
    let mut length = 0;
    let parts: [&[u8]; 3] = if sub_resource.is_empty() {
        [resource.as_bytes(), b"", b""]
    } else {
        [resource.as_bytes(), b"/", sub_resource.as_bytes()]
    };
    for part in parts {
        let end = length + part.len();
        buffer.get_mut(length..end)?.copy_from_slice(part);
        length = end;
    }
    // Only ASCII was copied.
    std::str::from_utf8(buffer.get(..length)?).ok()
}

/// Counts one answered review for one rule set, without its duration: a
/// grouped entry's review (`/validate/images.services`) is counted once per
/// rule set it names, each with that set's [`Decision::of_rule_set`], and
/// timed once.
pub fn count_review(
    endpoint: &'static str,
    rule_set: impl Into<SharedString>,
    labels: &ReviewLabels,
    decision: Decision,
) {
    let rule_set = rule_set.into();
    let parts = [
        endpoint,
        &*rule_set,
        labels.operation.as_str(),
        &*labels.resource,
        decision.as_str(),
    ];
    kept::handle(Series::Reviews, &parts, || {
        counter!(
            REVIEWS_TOTAL,
            LABEL_ENDPOINT => endpoint,
            LABEL_RULE_SET => rule_set.clone(),
            LABEL_OPERATION => labels.operation.as_str(),
            LABEL_RESOURCE => labels.resource.clone(),
            LABEL_DECISION => decision.as_str()
        )
    })
    .increment(1);
}

/// Records how long one answered review took.
pub fn record_review_duration(endpoint: &'static str, seconds: f64) {
    kept::handle(
        Series::ReviewDuration,
        &[endpoint],
        || histogram!(REVIEW_DURATION_SECONDS, LABEL_ENDPOINT => endpoint),
    )
    .record(seconds);
}

/// Counts what each rule that fired did: rejections (with the review's
/// operation, resource and the denial's code), warnings, audits, mutations.
pub fn record_findings(findings: &[Finding], labels: &ReviewLabels) {
    for finding in findings {
        let (rule_set, rule) = (&*finding.rule_set, &*finding.rule);
        let shared = || {
            (
                SharedString::from(finding.rule_set.clone()),
                SharedString::from(finding.rule.clone()),
            )
        };
        let counter = match finding.outcome {
            Outcome::Denied => {
                let code = code_label(finding.code.unwrap_or(403));
                let parts = [
                    rule_set,
                    rule,
                    labels.operation.as_str(),
                    &*labels.resource,
                    &*code,
                ];
                kept::handle(Series::Rejections, &parts, || {
                    let (rule_set, rule) = shared();
                    counter!(
                        REJECTIONS_TOTAL,
                        LABEL_RULE_SET => rule_set,
                        LABEL_RULE => rule,
                        LABEL_OPERATION => labels.operation.as_str(),
                        LABEL_RESOURCE => labels.resource.clone(),
                        LABEL_CODE => code.clone()
                    )
                })
            }
            Outcome::Warned => kept::handle(Series::Warnings, &[rule_set, rule], || {
                let (rule_set, rule) = shared();
                counter!(WARNINGS_TOTAL, LABEL_RULE_SET => rule_set, LABEL_RULE => rule)
            }),
            Outcome::Audited => kept::handle(Series::Audits, &[rule_set, rule], || {
                let (rule_set, rule) = shared();
                counter!(AUDITS_TOTAL, LABEL_RULE_SET => rule_set, LABEL_RULE => rule)
            }),
            Outcome::Mutated => kept::handle(Series::Mutations, &[rule_set, rule], || {
                let (rule_set, rule) = shared();
                counter!(MUTATIONS_TOTAL, LABEL_RULE_SET => rule_set, LABEL_RULE => rule)
            }),
        };
        counter.increment(1);
    }
}

/// The series recorded for every review, whose handles [`kept`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Series {
    Reviews,
    ReviewDuration,
    Rejections,
    Warnings,
    Audits,
    Mutations,
}

/// Handles of the series recorded for every review, kept per thread once
/// [`install`] has installed the process-wide recorder. Recording through a
/// kept handle skips building the series' key (a label list) and looking it
/// up in the recorder's registry, which was most of what recording a review
/// cost. Before `install` (tests, `kadmit test`), or under a local recorder,
/// every call asks the current recorder as the `metrics` macros do.
mod kept {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::atomic::{AtomicBool, Ordering};

    use metrics::{Counter, Histogram};

    use super::Series;

    /// Set by [`super::install`]: the process-wide recorder, which can be
    /// set only once, is the one every handle kept came from.
    pub(super) static GLOBAL_RECORDER: AtomicBool = AtomicBool::new(false);

    /// The most handles a thread keeps. Every label of these series is
    /// bounded already (rule names from the plan, capped resources); past
    /// this (several reloads renaming rules) a thread starts over, so its
    /// memory stays bounded too.
    pub(super) const MAX_KEPT: usize = 4096;

    /// A series and its label values.
    pub(super) type Key = (Series, Box<[Box<str>]>);

    #[derive(Default)]
    pub(super) struct Kept {
        hasher: foldhash::fast::FixedState,
        counters: HashMap<u64, Vec<(Key, Counter)>>,
        histograms: HashMap<u64, Vec<(Key, Histogram)>>,
        len: usize,
    }

    thread_local! {
        static KEPT: RefCell<Kept> = RefCell::new(Kept::default());
    }

    fn hash(hasher: &foldhash::fast::FixedState, series: Series, parts: &[&str]) -> u64 {
        let mut h = hasher.build_hasher();
        series.hash(&mut h);
        for part in parts {
            part.hash(&mut h);
        }
        h.finish()
    }

    /// True when `key` is `series` with `parts`.
    fn same(key: &Key, series: Series, parts: &[&str]) -> bool {
        key.0 == series
            && key.1.len() == parts.len()
            && key.1.iter().zip(parts).all(|(kept, part)| **kept == **part)
    }

    fn key(series: Series, parts: &[&str]) -> Key {
        (series, parts.iter().map(|part| Box::from(*part)).collect())
    }

    /// A kind of handle [`Kept`] holds, and where.
    pub(super) trait Handle: Clone {
        fn kept(kept: &mut Kept) -> &mut HashMap<u64, Vec<(Key, Self)>>;
    }

    impl Handle for Counter {
        fn kept(kept: &mut Kept) -> &mut HashMap<u64, Vec<(Key, Self)>> {
            &mut kept.counters
        }
    }

    impl Handle for Histogram {
        fn kept(kept: &mut Kept) -> &mut HashMap<u64, Vec<(Key, Self)>> {
            &mut kept.histograms
        }
    }

    /// The handle of `series` with label values `parts` (in the order
    /// `make` gives them), made by `make` the first time.
    pub(super) fn handle<H: Handle>(series: Series, parts: &[&str], make: impl FnOnce() -> H) -> H {
        keep(GLOBAL_RECORDER.load(Ordering::Relaxed), series, parts, make)
    }

    fn keep<H: Handle>(keep: bool, series: Series, parts: &[&str], make: impl FnOnce() -> H) -> H {
        if !keep {
            return make();
        }
        KEPT.with(|kept| {
            let Ok(mut kept) = kept.try_borrow_mut() else {
                return make();
            };
            let kept = &mut *kept;
            let hash = hash(&kept.hasher, series, parts);
            if let Some((_, handle)) = H::kept(kept)
                .get(&hash)
                .and_then(|list| list.iter().find(|(key, _)| same(key, series, parts)))
            {
                return handle.clone();
            }
            if kept.len >= MAX_KEPT {
                kept.counters.clear();
                kept.histograms.clear();
                kept.len = 0;
            }
            let handle = make();
            H::kept(kept)
                .entry(hash)
                .or_default()
                .push((key(series, parts), handle.clone()));
            kept.len += 1;
            handle
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn kept_len() -> usize {
            KEPT.with(|kept| kept.borrow().len)
        }

        #[test]
        fn a_series_handle_is_made_once_per_thread_and_the_cache_stays_bounded() {
            let mut made = 0;
            for _ in 0..3 {
                let _: Counter = keep(true, Series::Mutations, &["set", "rule"], || {
                    made += 1;
                    Counter::noop()
                });
            }
            assert_eq!(made, 1, "kept after the first");
            let _: Counter = keep(true, Series::Warnings, &["set", "rule"], || {
                made += 1;
                Counter::noop()
            });
            assert_eq!(made, 2, "another series is another handle");
            // Not kept before the process-wide recorder is installed.
            for _ in 0..2 {
                let _: Counter = keep(false, Series::Audits, &["x"], || {
                    made += 1;
                    Counter::noop()
                });
            }
            assert_eq!(made, 4);
            for i in 0..MAX_KEPT * 2 + 3 {
                let name = i.to_string();
                let _ = keep(true, Series::ReviewDuration, &[&name], Histogram::noop);
                assert!(kept_len() <= MAX_KEPT, "{} kept", kept_len());
            }
        }

        #[test]
        fn keys_match_only_the_same_labels() {
            let k = key(Series::Mutations, &["a", "bc"]);
            assert!(same(&k, Series::Mutations, &["a", "bc"]));
            assert!(!same(&k, Series::Warnings, &["a", "bc"]));
            assert!(!same(&k, Series::Mutations, &["ab", "c"]));
            assert!(!same(&k, Series::Mutations, &["a", "b"]));
            assert!(!same(&k, Series::Mutations, &["a"]));
            assert!(!same(&k, Series::Mutations, &["a", "bc", ""]));
            let k = key(Series::Mutations, &["a\0b", "c"]);
            assert!(!same(&k, Series::Mutations, &["a", "b\0c"]));
        }
    }
}

/// The `code` label: static strings for the codes rules use, a formatted one
/// for any other (each rule has one code, so this adds no series).
fn code_label(code: u16) -> SharedString {
    let fixed = match code {
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        409 => "409",
        422 => "422",
        429 => "429",
        500 => "500",
        503 => "503",
        _ => return SharedString::from(code.to_string()),
    };
    SharedString::const_str(fixed)
}

/// Counts one refused request under its fixed reason code.
pub fn record_bad_request(reason: &'static str) {
    counter!(BAD_REQUESTS_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Counts one request the operations listener refused, under its fixed
/// reason code.
pub fn record_ops_refusal(reason: &'static str) {
    counter!(OPS_REQUESTS_REFUSED_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Counts one review handed to the recorder, by result.
pub fn record_recorded_review(result: &'static str) {
    counter!(RECORDED_REVIEWS_TOTAL, LABEL_RESULT => result).increment(1);
}

/// Counts one review offered to the shadow ring, by result.
pub fn record_shadow_review(result: &'static str) {
    counter!(SHADOW_REVIEWS_TOTAL, LABEL_RESULT => result).increment(1);
}

/// Records the last shadow comparison's counts, and whether its plan was
/// held back.
pub fn record_shadow(changed: u64, newly_denied: u64, newly_admitted: u64, held_back: bool) {
    // Gauges are f64; review counts stay far below 2^53.
    gauge!(SHADOW_DECISIONS, LABEL_CHANGE => "changed").set(changed as f64);
    gauge!(SHADOW_DECISIONS, LABEL_CHANGE => "newly_denied").set(newly_denied as f64);
    gauge!(SHADOW_DECISIONS, LABEL_CHANGE => "newly_admitted").set(newly_admitted as f64);
    if held_back {
        counter!(RELOADS_HELD_BACK_TOTAL).increment(1);
    }
}

/// Counts one connection of `listener` kadmit closed to protect the others.
pub fn record_connection_closed(listener: Listener, reason: &'static str) {
    let name = match listener {
        Listener::Webhook => CONNECTIONS_CLOSED_TOTAL,
        Listener::Operations => OPERATIONS_CONNECTIONS_CLOSED_TOTAL,
    };
    counter!(name, LABEL_REASON => reason).increment(1);
}

/// Counts one HTTP/2 stream kadmit reset to protect the others.
pub fn record_stream_reset(reason: &'static str) {
    counter!(STREAMS_RESET_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Sets the number of open connections of `listener`.
pub fn record_open_connections(listener: Listener, open: usize) {
    let name = match listener {
        Listener::Webhook => CONNECTIONS_OPEN,
        Listener::Operations => OPERATIONS_CONNECTIONS_OPEN,
    };
    gauge!(name).set(open as f64);
}

/// Counts a review denied for its cost.
pub fn record_over_budget(limit: &'static str) {
    counter!(REVIEWS_OVER_BUDGET_TOTAL, LABEL_LIMIT => limit).increment(1);
}

/// Counts one review kadmit could not answer under its fixed reason code.
pub fn record_review_error(reason: &'static str) {
    counter!(REVIEW_ERRORS_TOTAL, LABEL_REASON => reason).increment(1);
}

/// Records the validity period of the serving certificate just loaded, as
/// Unix times.
pub fn record_certificate_validity(not_before_seconds: f64, not_after_seconds: f64) {
    gauge!(TLS_CERTIFICATE_NOT_BEFORE_SECONDS).set(not_before_seconds);
    gauge!(TLS_CERTIFICATE_EXPIRY_SECONDS).set(not_after_seconds);
}

/// The size of a plan that loaded, for [`record_reload`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Loaded {
    /// Rule sets in the plan.
    pub rule_sets: usize,
    /// Rules in the plan.
    pub rules: usize,
}

/// Records one reload: its result and duration, the generation now serving
/// and, after a success, how many rule sets and rules it has.
pub fn record_reload(result: &'static str, seconds: f64, generation: u64, loaded: Loaded) {
    counter!(RELOADS_TOTAL, LABEL_RESULT => result).increment(1);
    histogram!(RELOAD_DURATION_SECONDS, LABEL_RESULT => result).record(seconds);
    // Gauges are f64; generations and counts stay far below 2^53.
    gauge!(PLAN_GENERATION).set(generation as f64);
    if result == "success" {
        gauge!(RULE_SETS_LOADED).set(loaded.rule_sets as f64);
        gauge!(RULES_LOADED).set(loaded.rules as f64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        gauge!(LAST_RELOAD_SUCCESS_SECONDS).set(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_labels_join_the_subresource() {
        assert_eq!(&*resource_label("pods", ""), "pods");
        assert_eq!(&*resource_label("pods", "exec"), "pods/exec");
        assert_eq!(
            &*resource_label("deployments.v2", "scale"),
            "deployments.v2/scale"
        );
    }

    #[test]
    fn implausible_resources_are_other() {
        for (resource, sub) in [
            ("", ""),
            ("Pods", ""),
            ("pods", "exec\"} 1\nfake_metric"),
            ("a b", ""),
            ("ünïcode", ""),
        ] {
            assert_eq!(
                &*resource_label(resource, sub),
                OTHER_RESOURCE,
                "{resource}"
            );
        }
        let long = "x".repeat(MAX_RESOURCE_LABEL_BYTES + 1);
        assert_eq!(&*resource_label(&long, ""), OTHER_RESOURCE);
        // Exactly at the limit still fits.
        let fits = "y".repeat(MAX_RESOURCE_LABEL_BYTES - 2);
        assert_eq!(&*resource_label(&fits, "z"), format!("{fits}/z"));
    }

    #[test]
    fn resource_labels_are_capped() {
        let labels = ResourceLabels::new(3);
        for name in ["pods", "configmaps", "services"] {
            assert_eq!(&*labels.label(name, "", || false), name);
        }
        assert_eq!(&*labels.label("secrets", "", || false), OTHER_RESOURCE);
        // Names seen before the cap keep their own series.
        assert_eq!(&*labels.label("pods", "", || false), "pods");
    }

    /// A client making up resource names fills the share of names no rule
    /// mentions; a resource the rules name still gets its own series.
    #[test]
    fn resources_the_rules_name_are_labelled_past_the_cap() {
        let labels = ResourceLabels::new(3);
        for n in 0..50 {
            labels.label(&format!("made-up-{n}"), "", || false);
        }
        assert_eq!(&*labels.label("made-up-99", "", || false), OTHER_RESOURCE);
        assert_eq!(&*labels.label("deployments", "", || true), "deployments");
        assert_eq!(&*labels.label("deployments", "", || false), "deployments");
        // Asked only once per name.
        assert_eq!(
            &*labels.label("deployments", "", || panic!("asked again")),
            "deployments"
        );
    }

    #[test]
    fn codes_render_as_numbers() {
        assert_eq!(&*code_label(403), "403");
        assert_eq!(&*code_label(418), "418");
    }
}
