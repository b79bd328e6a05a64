//! The outcome of evaluating one review: what the response says, and what each
//! rule did (for metrics, the denial log and the CLI).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::plan::Mode;
use crate::review::{DenialStatus, Response};
use crate::rules::Action;

/// The longest warning kube-apiserver passes on unchanged.
pub const MAX_WARNING_CHARS: usize = 120;

/// The most warnings one answer carries; the rest are counted in a last
/// warning. kube-apiserver keeps about 4 KB of warnings per request, so more
/// would be dropped there anyway.
pub const MAX_WARNINGS: usize = 30;

/// The most violations one denial message lists; the rest are counted at its
/// end, so that a Pod with thousands of bad containers gets a readable
/// message of bounded size.
pub const MAX_DENIAL_MESSAGES: usize = 20;

/// The most violation messages one rule's [`Finding`] keeps; the rest are
/// counted in [`Finding::more_messages`], never rendered. A denial lists
/// fewer, but `kadmit audit` and replay show a rule's own list.
pub const MAX_FINDING_MESSAGES: usize = 100;

/// What to answer for one review.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// False when any `Deny` rule fired.
    pub allowed: bool,
    /// Code, reason and message of a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denial: Option<Denial>,
    /// Single-line, deduplicated warnings of at most [`MAX_WARNING_CHARS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// JSON Patch from the original object to the mutated one; `None` when
    /// nothing changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<crate::patch::Patch>,
    /// The mutated object, when there is a patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutated: Option<Value>,
    /// `auditAnnotations` of the response: the rules that fired and the plan
    /// generation.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
    /// What each rule that fired did, in plan order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The limit the review went over, when it was denied for its cost
    /// rather than by a rule.
    #[serde(skip)]
    pub over_budget: Option<super::budget::Exceeded>,
    /// Why each rule of the mode applied or not, in plan order; filled only
    /// when the [`Ask`](super::Ask) explains.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explanations: Vec<super::Explanation>,
}

impl Verdict {
    /// What the response to the review says. A validating webhook never
    /// patches (the API server rejects the answer if it does), so the patch
    /// is left out for [`Mode::Validate`] whatever the verdict holds.
    pub fn response(&self, mode: Mode) -> Response<'_> {
        Response {
            allowed: self.allowed,
            denial: self.denial.as_ref().map(|denial| DenialStatus {
                code: denial.code,
                reason: &denial.reason,
                message: &denial.message,
            }),
            warnings: &self.warnings,
            patch: match mode {
                Mode::Mutate => self.patch.as_ref(),
                Mode::Validate => None,
            },
            audit_annotations: &self.audit_annotations,
        }
    }

    /// An allowed verdict with nothing to say.
    pub fn allow() -> Self {
        Verdict {
            allowed: true,
            ..Verdict::default()
        }
    }
}

/// The `status` of a denied review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// HTTP-style code, 403 unless the rule sets one.
    pub code: u16,
    /// Kubernetes `StatusReason` for the code (`Forbidden`, ...).
    pub reason: String,
    /// Names the rule set, the rule and every violation.
    pub message: String,
}

/// What one rule did to a review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Rule set name.
    pub rule_set: Arc<str>,
    /// Rule name.
    pub rule: Arc<str>,
    /// What happened.
    pub outcome: Outcome,
    /// One rendered message per violation (empty for mutations), at most
    /// [`MAX_FINDING_MESSAGES`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// Violations past the first [`MAX_FINDING_MESSAGES`]: counted, not
    /// rendered.
    #[serde(skip_serializing_if = "is_zero")]
    pub more_messages: usize,
    /// Status code of a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

impl Finding {
    /// The messages kept, then `… and N more violations` when some were
    /// only counted: what a listing of this rule's violations shows.
    pub fn listed_messages(&self) -> Vec<String> {
        let mut listed = self.messages.clone();
        if self.more_messages > 0 {
            listed.push(format!("… and {} more violations", self.more_messages));
        }
        listed
    }
}

/// What a rule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// A `Deny` rule found violations.
    Denied,
    /// A `Warn` rule found violations.
    Warned,
    /// An `Audit` rule found violations.
    Audited,
    /// A rule changed the object.
    Mutated,
}

impl Outcome {
    /// The outcome of violations of a rule with `action`.
    pub fn of(action: Action) -> Self {
        match action {
            Action::Deny => Outcome::Denied,
            Action::Warn => Outcome::Warned,
            Action::Audit => Outcome::Audited,
        }
    }

    /// Lowercase name for labels and annotations.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Denied => "denied",
            Outcome::Warned => "warned",
            Outcome::Audited => "audited",
            Outcome::Mutated => "mutated",
        }
    }
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}
