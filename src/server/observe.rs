//! What kadmit keeps of an answered review: the log line, the metrics, the
//! denials ring, the recent reviews a reload is shadowed with, and the
//! recording (`serve --record`). The counterpart of
//! [`Rejection::respond`](super::Rejection::respond), which does the same for
//! a review that could not be answered.

use std::time::Duration;

use ::metrics::SharedString;
use actix_web::web::Bytes;

use super::State;
use crate::eval::Verdict;
use crate::excerpt;
use crate::metrics::{self, Decision};
use crate::plan::Mode;
use crate::review::{Response, Review};

/// A review and the answer it got.
pub(super) struct Answered<'a> {
    /// The plan that answered it.
    pub plan: &'a crate::plan::Plan,
    /// The decoded review.
    pub review: &'a Review,
    /// What the engine decided, rule by rule.
    pub verdict: &'a Verdict,
    /// What the answer says.
    pub response: &'a Response<'a>,
    /// The endpoint that answered.
    pub mode: Mode,
    /// The rule sets the path named (`images` or `images.services`), if any.
    pub path_rule_sets: Option<&'a str>,
    /// The `rule_set` label of each rule set evaluated, under the plan's
    /// names ([`metrics::ALL_RULE_SETS`] when the path named none).
    pub rule_set_labels: Vec<SharedString>,
    /// From the whole body read to the answer encoded.
    pub elapsed: Duration,
}

impl Answered<'_> {
    /// Logs, counts, keeps a denied review in the ring and offers the review
    /// (`body`, answered with `answer`) to the shadow ring and the recorder.
    pub fn observe(self, state: &State, body: &Bytes, answer: &[u8]) {
        let Answered {
            plan,
            review,
            verdict,
            response,
            mode,
            path_rule_sets,
            rule_set_labels,
            elapsed,
        } = self;
        if let Some(recorder) = &state.recorder {
            recorder.offer(
                body,
                Bytes::copy_from_slice(answer),
                mode.as_str(),
                path_rule_sets,
            );
        }
        state.recent.offer(body, mode, path_rule_sets, || {
            [Mode::Validate, Mode::Mutate].into_iter().any(|mode| {
                crate::eval::select(plan, &review.request, crate::eval::Ask::new(mode))
                    .reads_object()
            })
        });
        if !response.allowed {
            state.denials.record(&review.request, verdict);
        }
        let decision = if !response.allowed {
            Decision::Denied
        } else if response.patch.is_some() {
            Decision::Patched
        } else {
            Decision::Allowed
        };
        let endpoint = mode.as_str();
        tracing::debug!(
            uid = &*excerpt::cut(&review.request.uid, excerpt::MAX_FIELD_BYTES),
            endpoint,
            rule_set = path_rule_sets.unwrap_or(metrics::ALL_RULE_SETS),
            decision = decision.as_str(),
            elapsed_us = elapsed.as_micros() as u64,
            "Answered a review"
        );
        let labels = metrics::ReviewLabels::of(&review.request, || {
            state
                .store
                .load()
                .is_some_and(|plan| plan.names_resource(&review.request))
        });
        let grouped = rule_set_labels.len() > 1;
        for label in rule_set_labels {
            let decision = if grouped {
                Decision::of_rule_set(verdict, &label)
            } else {
                decision
            };
            metrics::count_review(endpoint, label, &labels, decision);
        }
        metrics::record_review_duration(endpoint, elapsed.as_secs_f64());
        metrics::record_findings(&verdict.findings, &labels);
        if let Some(exceeded) = verdict.over_budget {
            metrics::record_over_budget(exceeded.code());
        }
    }
}
