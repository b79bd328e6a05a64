//! The work one review may cost: evaluation steps, and the bytes mutations
//! add to the object.
//!
//! Evaluation is linear in the size of the object for every rule the
//! language can express, but the product of two large things is not: a
//! `forEach` over 20,000 containers whose condition reads all 20,000
//! containers again, or a copy of a large value into every element. The
//! budget counts the work as it happens (each value a path selects, each
//! element visited, each rule run in each mutation pass) and the bytes each
//! write adds; a review that goes over either is denied with a message
//! saying which limit it reached, instead of holding a worker or growing the
//! object without bound.

use std::cell::{Cell, RefCell};

use serde_json::Value;

use crate::excerpt::MAX_MESSAGE_BYTES;
use crate::plan::JsonPath;

/// Default for [`Limits::max_steps`]. The bundled rules take about 150
/// steps for an ordinary pod and about 60 per container, so the largest pod
/// etcd can store (1.5 MiB, some 50,000 minimal containers) stays well
/// inside it, while a rule that compares every container with every other
/// reaches it at about 3,000 containers. A step costs tens of nanoseconds
/// (one value a path selects) to a few microseconds (a write).
pub const DEFAULT_MAX_STEPS: u64 = 10_000_000;

/// Memory the documents made for one review's expressions may take: the
/// `request` document, built once for the review's paths and expressions,
/// and the variables one CEL evaluation reads (`object`, `oldObject`,
/// `request`, a `forEach` element), made afresh for it as the interpreter's
/// values. These are made from what the request path has parsed, bounded at
/// [`crate::review::MAX_PARSED_BYTES`], and take as much again or more;
/// past this, the review is denied rather than the copy made (a ConfigMap
/// of 400,000 empty values read by one expression took the server to
/// 218 MB, a user's 900,000 groups read by one to 233 MB).
pub const MAX_CONVERTED_BYTES: u64 = 64 << 20;

/// Default for [`Limits::max_added_bytes`]: more than etcd stores in one
/// object (1.5 MiB), so a mutation that adds more could never be saved.
pub const DEFAULT_MAX_ADDED_BYTES: usize = 2 << 20;

/// What one review may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Evaluation steps: values selected by paths, `forEach` elements
    /// visited, rules run per mutation pass.
    pub max_steps: u64,
    /// Bytes (of the values' JSON text) the mutations may add to the object.
    pub max_added_bytes: usize,
}

impl Limits {
    /// The defaults, usable in constants.
    pub const DEFAULT: Limits = Limits {
        max_steps: DEFAULT_MAX_STEPS,
        max_added_bytes: DEFAULT_MAX_ADDED_BYTES,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Which limit a review reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// More than this many evaluation steps.
    Steps(u64),
    /// Mutations adding more than this many bytes.
    AddedBytes(usize),
    /// A rule reads the object (or old object), and kadmit cannot parse it
    /// as far as the rule reads: it nests deeper than serde_json's 128
    /// levels allow there (or holds what JSON parsing refuses, such as a
    /// lone surrogate).
    UnreadableObject,
    /// Rules apply to the review, and parsing its objects could take more
    /// than this many bytes of memory (estimated from the body, before
    /// parsing).
    ParsedBytes(usize),
    /// The documents the review's expressions read would take more than
    /// this many bytes of memory ([`MAX_CONVERTED_BYTES`]).
    ConvertedBytes(u64),
    /// The answer would be larger than the server may hold of all answers
    /// and bodies together, this many bytes: it could never be sent.
    AnswerBytes(usize),
}

impl Exceeded {
    /// Every [`code`](Self::code), for the metric series that start at 0.
    pub const CODES: [&'static str; 6] = [
        "evaluation_steps",
        "mutation_bytes",
        "unreadable_object",
        "parsed_bytes",
        "converted_bytes",
        "answer_bytes",
    ];

    /// A fixed code for logs and audit annotations.
    pub fn code(self) -> &'static str {
        match self {
            Exceeded::Steps(_) => "evaluation_steps",
            Exceeded::AddedBytes(_) => "mutation_bytes",
            Exceeded::UnreadableObject => "unreadable_object",
            Exceeded::ParsedBytes(_) => "parsed_bytes",
            Exceeded::ConvertedBytes(_) => "converted_bytes",
            Exceeded::AnswerBytes(_) => "answer_bytes",
        }
    }
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::Steps(limit) => write!(
                f,
                "evaluating the rules on this object takes more than {limit} steps \
                 (the object is too large or repetitive for the rules; \
                 the limit is `kadmit serve --max-evaluation-steps`)"
            ),
            Exceeded::AddedBytes(limit) => write!(
                f,
                "the mutating rules would add more than {limit} bytes to the object \
                 (the limit is `kadmit serve --max-mutation-bytes`)"
            ),
            Exceeded::UnreadableObject => write!(
                f,
                "a rule reads the object, which cannot be parsed as far as the rule reads \
                 (nested deeper than 125 levels there): denied, not admitted unchecked"
            ),
            Exceeded::ParsedBytes(limit) => write!(
                f,
                "rules apply to this review, whose objects could take more than {limit} bytes \
                 of memory to parse (estimated from the body's maps and lists): denied, not \
                 admitted unchecked"
            ),
            Exceeded::ConvertedBytes(limit) => write!(
                f,
                "the documents the rules' expressions read would take more than {limit} bytes \
                 of memory (the review is too large for them): denied, not admitted unchecked"
            ),
            Exceeded::AnswerBytes(limit) => write!(
                f,
                "the answer, with its patch, would be larger than the {limit} bytes the server \
                 may hold of all answers and bodies (the limit is \
                 `kadmit serve --max-buffered-body-bytes`): denied, not admitted unpatched"
            ),
        }
    }
}

/// Bytes of strings and keys that count as one step in
/// [`Budget::afford_copy`].
pub const COPY_BYTES_PER_STEP: u64 = 64;

/// The work left for one review. Shared by reference through the whole
/// evaluation; once spent it stays spent, and the loops stop early.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    steps: Cell<u64>,
    exceeded: Cell<Option<Exceeded>>,
    failure: RefCell<Option<String>>,
    /// Bytes of documents held for the whole review ([`Budget::hold`]).
    held: Cell<u64>,
}

impl Budget {
    /// A full budget.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            steps: Cell::new(0),
            exceeded: Cell::new(None),
            failure: RefCell::new(None),
            held: Cell::new(0),
        }
    }

    /// Counts `steps` more; false once the budget is spent.
    pub fn charge(&self, steps: u64) -> bool {
        let used = self.steps.get().saturating_add(steps);
        self.steps.set(used);
        if used > self.limits.max_steps && self.exceeded.get().is_none() {
            self.exceeded
                .set(Some(Exceeded::Steps(self.limits.max_steps)));
        }
        self.is_open()
    }

    fn is_open(&self) -> bool {
        self.exceeded.get().is_none() && self.failure.borrow().is_none()
    }

    /// Records that an expression failed (the first failure is kept): the
    /// review cannot be decided, so the budget counts as spent and the
    /// loops stop.
    /// The message is kept cut to [`MAX_MESSAGE_BYTES`]: it is logged and
    /// answered, and may quote what the request held.
    pub fn fail(&self, message: String) {
        let mut failure = self.failure.borrow_mut();
        if failure.is_none() {
            *failure = Some(crate::excerpt::cut(&message, MAX_MESSAGE_BYTES).into_owned());
        }
    }

    /// What failed, if anything did.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Records that the mutations have added `total` bytes so far; false
    /// once that is over the limit (or the budget is otherwise spent).
    pub fn added(&self, total: usize) -> bool {
        if total > self.limits.max_added_bytes && self.exceeded.get().is_none() {
            self.exceeded
                .set(Some(Exceeded::AddedBytes(self.limits.max_added_bytes)));
        }
        self.is_open()
    }

    /// The limit reached, if any.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.exceeded.get()
    }

    /// Charges what evaluating `path` on `root` may cost
    /// ([`JsonPath::query_cost`]) before it runs; false when that spends
    /// the budget, and the path must then not be evaluated: the review is
    /// answered as over budget, never as if the path selected nothing.
    #[inline]
    pub fn afford_query(&self, path: &JsonPath, root: &Value) -> bool {
        let cost = path.query_cost(root, self.remaining());
        cost == 0 || self.charge(cost)
    }

    /// Charges for copying `value` before it is copied: a step per value
    /// in it and per [`COPY_BYTES_PER_STEP`] bytes of its strings and keys,
    /// counted only up to just past what is left. False when that spends
    /// the budget, and the copy must then not be made.
    pub fn afford_copy(&self, value: &Value) -> bool {
        self.charge(walk_steps(value, self.remaining()))
    }

    /// Bytes a document made now may take: what [`MAX_CONVERTED_BYTES`]
    /// leaves besides the documents held.
    pub fn memory_left(&self) -> u64 {
        MAX_CONVERTED_BYTES.saturating_sub(self.held.get())
    }

    /// Counts `bytes` of a document as held for the rest of the review.
    pub fn hold(&self, bytes: u64) {
        self.held.set(self.held.get().saturating_add(bytes));
    }

    /// Records that a document would have taken more than
    /// [`Budget::memory_left`]: the budget is spent.
    pub fn out_of_memory(&self) {
        if self.exceeded.get().is_none() {
            self.exceeded
                .set(Some(Exceeded::ConvertedBytes(MAX_CONVERTED_BYTES)));
        }
    }

    /// Steps left before the limit (none once the budget is spent).
    pub fn remaining(&self) -> u64 {
        if !self.is_open() {
            return 0;
        }
        self.limits.max_steps.saturating_sub(self.steps.get())
    }

    /// Steps counted so far.
    pub fn steps(&self) -> u64 {
        self.steps.get()
    }
}

/// What walking `value` whole costs (to copy or compare it): a step per
/// value in it and per [`COPY_BYTES_PER_STEP`] bytes of its strings and
/// keys, counted only up to just past `limit`.
pub fn walk_steps(value: &Value, limit: u64) -> u64 {
    let mut cost = 0_u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        let bytes = match value {
            Value::String(text) => text.len(),
            Value::Array(items) => {
                pending.extend(items);
                0
            }
            Value::Object(map) => {
                pending.extend(map.values());
                map.keys().map(String::len).sum()
            }
            _ => 0,
        };
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        cost = cost.saturating_add(1 + bytes / COPY_BYTES_PER_STEP);
        if cost > limit {
            break;
        }
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_s_code_is_listed() {
        // A match with no wildcard: a new limit does not compile until it
        // is listed here, and then in `CODES`.
        let listed = |exceeded: Exceeded| match exceeded {
            Exceeded::Steps(_)
            | Exceeded::AddedBytes(_)
            | Exceeded::UnreadableObject
            | Exceeded::ParsedBytes(_)
            | Exceeded::ConvertedBytes(_)
            | Exceeded::AnswerBytes(_) => Exceeded::CODES.contains(&exceeded.code()),
        };
        for exceeded in [
            Exceeded::Steps(1),
            Exceeded::AddedBytes(1),
            Exceeded::UnreadableObject,
            Exceeded::ParsedBytes(1),
            Exceeded::ConvertedBytes(1),
            Exceeded::AnswerBytes(1),
        ] {
            assert!(listed(exceeded), "{}", exceeded.code());
        }
    }

    #[test]
    fn steps_past_the_limit_spend_the_budget_for_good() {
        let budget = Budget::new(Limits {
            max_steps: 10,
            max_added_bytes: 100,
        });
        assert!(budget.charge(10));
        assert_eq!(budget.exceeded(), None);
        assert!(!budget.charge(1));
        assert_eq!(budget.exceeded(), Some(Exceeded::Steps(10)));
        assert!(!budget.added(0), "a spent budget stays spent");
    }

    #[test]
    fn added_bytes_past_the_limit_spend_the_budget() {
        let budget = Budget::new(Limits {
            max_steps: 10,
            max_added_bytes: 100,
        });
        assert!(budget.added(100));
        assert!(!budget.added(101));
        assert_eq!(budget.exceeded(), Some(Exceeded::AddedBytes(100)));
        assert!(!budget.charge(0));
    }

    #[test]
    fn values_held_past_the_memory_limit_spend_the_budget() {
        let budget = Budget::new(Limits::DEFAULT);
        budget.hold(MAX_CONVERTED_BYTES - 10);
        assert_eq!(budget.memory_left(), 10);
        budget.hold(20);
        assert_eq!(budget.memory_left(), 0);
        assert!(budget.charge(0), "holding spends no steps");
        budget.out_of_memory();
        assert_eq!(
            budget.exceeded(),
            Some(Exceeded::ConvertedBytes(MAX_CONVERTED_BYTES))
        );
        assert!(!budget.charge(0));
    }
}
