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
    /// The decoded review.
    pub review: &'a Review,
    /// What the engine decided, rule by rule.
    pub verdict: &'a Verdict,
    /// What the answer says.
    pub response: &'a Response<'a>,
    /// The endpoint that answered.
    pub mode: Mode,
    /// The rule set the path named, if any.
    pub rule_set: Option<&'a str>,
    /// From the whole body read to the answer encoded.
    pub elapsed: Duration,
}

impl Answered<'_> {
    /// Logs, counts, keeps a denied review in the ring and offers the review
    /// (`body`, answered with `answer`) to the shadow ring and the recorder.
    pub fn observe(self, state: &State, body: &Bytes, answer: &[u8]) {
        let Answered {
            review,
            verdict,
            response,
            mode,
            rule_set,
            elapsed,
        } = self;
        if let Some(recorder) = &state.recorder {
            recorder.offer(
                body,
                Bytes::copy_from_slice(answer),
                mode.as_str(),
                rule_set,
            );
        }
        state.recent.offer(body, mode, rule_set);
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
            rule_set = rule_set.unwrap_or(metrics::ALL_RULE_SETS),
            decision = decision.as_str(),
            elapsed_us = elapsed.as_micros() as u64,
            "Answered a review"
        );
        let labels = metrics::ReviewLabels::of(&review.request);
        let rule_set_label = rule_set
            .map_or(SharedString::const_str(metrics::ALL_RULE_SETS), |name| {
                SharedString::from(name.to_owned())
            });
        metrics::record_review(
            endpoint,
            rule_set_label,
            &labels,
            decision,
            elapsed.as_secs_f64(),
        );
        metrics::record_findings(&verdict.findings, &labels);
        if let Some(exceeded) = verdict.over_budget {
            metrics::record_over_budget(exceeded.code());
        }
    }
}
