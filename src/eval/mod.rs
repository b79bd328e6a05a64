//! Evaluating a plan against one request: pure, `(&Plan, &Request) → Verdict`.
//!
//! One entry point, in two steps: [`select`] narrows the rules named by an
//! [`Ask`] (mode, rule sets, options) to those whose operation and resource
//! the index returns and whose request-level criteria (namespaces, users,
//! groups) hold; [`Selection::evaluate`] runs them on the request's objects.
//! Between the two a decoder learns whether any rule stands, and parses the
//! object and old object only then (`server::decide`).

pub mod budget;
mod condition;
mod document;
mod mutate;
mod reads;
mod verdict;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

pub use condition::json_equal;
pub use verdict::{
    Denial, Finding, MAX_DENIAL_MESSAGES, MAX_FINDING_MESSAGES, MAX_WARNING_CHARS, MAX_WARNINGS,
    Outcome, Verdict,
};

use crate::log_throttle::LogThrottle;
use crate::plan::{
    CompiledRule, DenyCheck, JsonPath, Mismatch, Mode, OverBudget, Plan, RequestKey, RuleSets,
};
use crate::review::{Embedded, Request};
use crate::rules::Action;
use budget::Budget;
use condition::holds;
use document::{Document, Frame, RequestValue};

/// A review that cannot be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// `request.object` or `request.oldObject` is not a JSON document kadmit can read.
    #[error("request.{field}: {message}")]
    Object {
        /// `object` or `oldObject`.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The mutating rules keep changing the object.
    #[error(
        "mutations did not converge after {passes} passes; rules still changing the object: {rules}"
    )]
    NotConverged {
        /// Passes made.
        passes: usize,
        /// `ruleset/rule` names, comma-separated.
        rules: String,
    },
    /// The review went over its budget; it is answered with a denial.
    #[error("{0}")]
    OverBudget(budget::Exceeded),
    /// The computed patch does not reproduce the mutated object (a bug).
    #[error("internal error: the computed patch does not reproduce the mutated object: {0}")]
    PatchCheck(String),
}

impl EvalError {
    /// A fixed code for metrics labels.
    pub fn reason_code(&self) -> &'static str {
        match self {
            EvalError::Object { .. } => "invalid_object",
            EvalError::NotConverged { .. } => "not_converged",
            EvalError::OverBudget(exceeded) => exceeded.code(),
            EvalError::PatchCheck(_) => "patch_check",
        }
    }
}

/// Why each rule did or did not apply, for `kadmit test --explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// Rule set name.
    pub rule_set: Arc<str>,
    /// Rule name.
    pub rule: Arc<str>,
    /// What happened, in words.
    pub result: String,
}

/// How evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalOptions {
    /// Apply every patch to a copy of the original object and compare it with
    /// the mutated object before answering. The patch is built from the
    /// edits, not diffed, and property tests check that it always reproduces
    /// the edits; the runtime check costs a copy, an application and a
    /// comparison of the object (about 4 µs, against 10.8 µs for a whole
    /// `/mutate` review of a pod with the bundled rules; see docs/benchmarks.md).
    pub verify_patches: bool,
    /// What one review may cost (see [`budget`]).
    pub limits: budget::Limits,
    /// Build what the webhook answers with besides the decision: the JSON
    /// Patch of the mutating rules' edits and the audit annotations.
    /// `kadmit audit` needs only the findings and the mutated object, and
    /// saves copying each written value and naming the rules again.
    pub answer: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            verify_patches: true,
            limits: budget::Limits::DEFAULT,
            answer: true,
        }
    }
}

/// What a caller asks of the engine: which half of the webhook, which rule
/// sets, how to evaluate, and whether to explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask<'s> {
    /// Validating or mutating rules.
    pub mode: Mode,
    /// The rule sets whose rules are evaluated.
    pub rule_sets: RuleSets<'s>,
    /// Patch checks and the budget of one review.
    pub options: EvalOptions,
    /// Consider every rule of the mode (not only the index's candidates) and
    /// say in [`Verdict::explanations`] why each applied or not.
    pub explain: bool,
}

impl<'s> Ask<'s> {
    /// Every rule set's rules of `mode`, default options, no explanations.
    pub fn new(mode: Mode) -> Self {
        Ask {
            mode,
            rule_sets: RuleSets::All,
            options: EvalOptions::default(),
            explain: false,
        }
    }

    /// The same, limited to `rule_sets` (one, several, or all for `None`).
    pub fn rule_sets(self, rule_sets: impl Into<RuleSets<'s>>) -> Self {
        Ask {
            rule_sets: rule_sets.into(),
            ..self
        }
    }

    /// The same, with `options`.
    pub fn options(self, options: EvalOptions) -> Self {
        Ask { options, ..self }
    }

    /// The same, explaining every rule of the mode.
    pub fn explaining(self) -> Self {
        Ask {
            explain: true,
            ..self
        }
    }
}

/// The engine's one entry point: the rules of `plan` that `ask` names and
/// whose request-level criteria (operation, resource, namespaces, users)
/// hold for `request`, found once. Only the parts of the request before its
/// objects are read, so a decoder can call this before it reaches them and
/// parse them only when [`Selection::reads_object`] says so.
pub fn select<'p, 's>(plan: &'p Plan, request: &Request, ask: Ask<'s>) -> Selection<'p, 's> {
    let key = RequestKey::of(request);
    // Candidates by index; when explaining, every rule.
    let numbers: Vec<u32> = if ask.explain {
        (0..plan.rules().len())
            .filter_map(|i| u32::try_from(i).ok())
            .collect()
    } else {
        plan.candidates(ask.mode, &key)
    };
    let mut selection = Selection {
        plan,
        ask,
        standing: Vec::with_capacity(numbers.len()),
        selecting_steps: 0,
        explanations: Vec::new(),
        object: None,
    };
    // Glob regexes are charged to the review's budget as they match; once
    // it is spent, nothing stands (no object is parsed) and the review is
    // denied as over its budget when it is evaluated.
    let max_steps = ask.options.limits.max_steps;
    let mut steps = 0u64;
    let mut charge = |cost: u64| {
        steps = steps.saturating_add(cost);
        steps <= max_steps
    };
    for number in numbers {
        let Some(rule) = plan.rule(number) else {
            continue;
        };
        if !selection.in_mode(rule) {
            continue;
        }
        match rule.matcher.match_request(&key, &mut charge) {
            Ok(Ok(())) => selection.standing.push(number),
            Ok(Err(mismatch)) if ask.explain => selection
                .explanations
                .push(Explanation::of(rule, format!("skipped: {mismatch}"))),
            Ok(Err(_)) => {}
            Err(OverBudget) => {
                selection.standing.clear();
                break;
            }
        }
    }
    selection.selecting_steps = steps;
    selection
}

/// [`select`] for a stream of requests against one plan and one choice of
/// rule sets (`kadmit audit`): the rules left standing for the last
/// request's [`RequestKey`] are kept for each half and used again while the
/// key stays the same, as it does for objects of one kind in one namespace.
pub struct KeptSelections<'p, 's> {
    plan: &'p Plan,
    rule_sets: RuleSets<'s>,
    /// By [`Mode`]: validating, mutating; the standing rules and the
    /// steps selecting them cost, charged again to each review.
    kept: [Option<(RequestKey<'static>, Vec<u32>, u64)>; 2],
}

impl<'p, 's> KeptSelections<'p, 's> {
    /// Nothing kept yet.
    pub fn new(plan: &'p Plan, rule_sets: impl Into<RuleSets<'s>>) -> Self {
        KeptSelections {
            plan,
            rule_sets: rule_sets.into(),
            kept: [None, None],
        }
    }

    /// The plan the selections are made from.
    pub fn plan(&self) -> &'p Plan {
        self.plan
    }

    /// [`select`] for `request` in `mode`, with these rule sets and
    /// `options`.
    pub fn select(
        &mut self,
        request: &Request,
        mode: Mode,
        options: EvalOptions,
    ) -> Selection<'p, 's> {
        let ask = Ask::new(mode).rule_sets(self.rule_sets).options(options);
        let slot = &mut self.kept[usize::from(mode == Mode::Mutate)];
        if let Some((key, standing, steps)) = slot.as_ref()
            && *key == RequestKey::of(request)
        {
            return Selection {
                plan: self.plan,
                ask,
                standing: standing.clone(),
                selecting_steps: *steps,
                explanations: Vec::new(),
                object: None,
            };
        }
        let selection = select(self.plan, request, ask);
        *slot = Some((
            RequestKey::of(request).into_owned(),
            selection.standing.clone(),
            selection.selecting_steps,
        ));
        selection
    }
}

/// The rules [`select`] left standing for one request, ready to evaluate.
#[derive(Debug)]
pub struct Selection<'p, 's> {
    plan: &'p Plan,
    ask: Ask<'s>,
    /// Rule numbers, in plan order.
    standing: Vec<u32>,
    /// The evaluation steps matching the rules' globs took: the first
    /// charge to the review's budget (over it, nothing stands).
    selecting_steps: u64,
    explanations: Vec<Explanation>,
    /// `request.object`, when the caller handed it over.
    object: Option<Option<Embedded>>,
}

impl Selection<'_, '_> {
    /// True when a rule is standing, so evaluation will read the objects.
    pub fn reads_object(&self) -> bool {
        !self.standing.is_empty()
    }

    /// True when a standing rule can deny the review: a validating rule
    /// whose action is `Deny` or whose evaluation can fail (a failing CEL
    /// expression denies whatever the action, [`CompiledRule::can_fail`]),
    /// or any mutating rule (whose edits cannot be left out without saying
    /// so).
    pub fn can_deny(&self) -> bool {
        self.standing
            .iter()
            .filter_map(|&n| self.plan.rule(n))
            .any(|rule| match self.ask.mode {
                Mode::Validate => rule.action == crate::rules::Action::Deny || rule.can_fail(),
                Mode::Mutate => true,
            })
    }

    /// The first of `places` (member names from an object's root, as
    /// [`crate::review::redacted_places`] gives them) that a path of a
    /// standing rule names in an object of `kind`, written `a.b`. A CEL
    /// expression reads its whole document and names nothing: counting it
    /// would take every review a CEL rule judges out of the comparison.
    pub fn reads_any_of(&self, kind: &str, places: &[&[&str]]) -> Option<String> {
        if self.standing.is_empty() {
            return None;
        }
        let projections = crate::plan::KindProjections::build(|projections| {
            for rule in self.standing.iter().filter_map(|&n| self.plan.rule(n)) {
                rule.project(projections);
            }
        });
        let projections = projections.of_kind(kind);
        places
            .iter()
            .find(|place| projections.names_explicitly(place))
            .map(|place| place.join("."))
    }

    /// The same selection, evaluating `object` (the request's object, taken
    /// out of it by a caller done with it) instead of reading the request's
    /// own: the mutating rules then work on it rather than on a copy.
    pub fn taking_object(self, object: Option<Embedded>) -> Self {
        Selection {
            object: Some(object),
            ..self
        }
    }

    /// Evaluates the standing rules on `request`, the request this selection
    /// was made for (its objects now decoded).
    pub fn evaluate(self, request: &Request) -> Result<Verdict, EvalError> {
        self.evaluate_keeping(request, false)
            .map(|(verdict, _)| verdict)
    }

    /// Evaluates the standing rules on `object` instead of `request.object`
    /// and hands the object back, mutated or not, beside the verdict (whose
    /// [`Verdict::mutated`] is then `None`). A caller that judges both
    /// halves of one object (`kadmit audit`) passes the mutating half's
    /// result to the validating half this way, with no copy of the object.
    /// The object is `None` only when the evaluation stopped part way, over
    /// its budget ([`Verdict::over_budget`] says which limit).
    pub fn evaluate_object(
        self,
        request: &Request,
        object: Value,
    ) -> Result<(Verdict, Option<Value>), EvalError> {
        self.taking_object(Some(Embedded::Parsed(object)))
            .evaluate_keeping(request, true)
    }

    fn evaluate_keeping(
        self,
        request: &Request,
        keep: bool,
    ) -> Result<(Verdict, Option<Value>), EvalError> {
        let Selection {
            plan,
            ask,
            standing,
            selecting_steps,
            explanations,
            object,
        } = self;
        let mut evaluation = Evaluation {
            plan,
            selecting_steps,
            request,
            ask,
            explanations,
            taken: object,
            kept: keep.then_some(None),
        };
        let result = evaluation.run(&standing);
        let kept = evaluation.kept.flatten();
        let result = result.map(|verdict| (verdict, kept));
        let mut explanations = evaluation.explanations;
        if !ask.explain {
            return result;
        }
        // Notes are taken as rules drop out; list them in plan order.
        let position = |note: &Explanation| {
            plan.rules()
                .iter()
                .position(|rule| rule.rule_set_name == note.rule_set && rule.name == note.rule)
        };
        explanations.sort_by_key(position);
        result.map(|(verdict, kept)| {
            (
                Verdict {
                    explanations,
                    ..verdict
                },
                kept,
            )
        })
    }

    fn in_mode(&self, rule: &CompiledRule) -> bool {
        let has_work = match self.ask.mode {
            Mode::Validate => !rule.deny.is_empty(),
            Mode::Mutate => !rule.mutations.is_empty(),
        };
        has_work && self.ask.rule_sets.contains(rule.rule_set)
    }
}

impl Explanation {
    fn of(rule: &CompiledRule, result: String) -> Self {
        Explanation {
            rule_set: rule.rule_set_name.clone(),
            rule: rule.name.clone(),
            result,
        }
    }
}

/// One evaluation of the standing rules.
struct Evaluation<'a> {
    plan: &'a Plan,
    request: &'a Request,
    ask: Ask<'a>,
    /// What selecting the rules took of the budget ([`select`]).
    selecting_steps: u64,
    /// Filled only when `ask.explain`.
    explanations: Vec<Explanation>,
    /// `request.object`, when the caller handed it over.
    taken: Option<Option<Embedded>>,
    /// `Some` when the caller wants the handed-over object back: then it
    /// ends up here (mutated or not) rather than in [`Verdict::mutated`].
    kept: Option<Option<Value>>,
}

/// The rule sets' guards checked on one document, by guard group
/// ([`CompiledRule::guard_group`]): every rule of a set repeats its set's
/// guards, so a set whose `when` compares every container list with the
/// old object's (the bundled Pod Security set) compares them once per
/// review, not once per rule.
struct GuardOutcomes(Vec<Option<Option<usize>>>);

impl GuardOutcomes {
    fn new(plan: &Plan) -> Self {
        GuardOutcomes(vec![None; plan.guard_groups()])
    }

    /// The index of the first of `group`'s guards that does not hold, if
    /// any: `check` the first time, what it said after that.
    fn first_failing(
        &mut self,
        group: usize,
        check: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        match self.0.get_mut(group) {
            Some(Some(known)) => *known,
            Some(slot) => *slot.insert(check()),
            None => check(),
        }
    }
}

/// A request's object or old object as a JSON value (null when absent),
/// borrowed when the decoder already parsed it.
fn document<'r>(
    embedded: Option<&'r Embedded>,
    field: &'static str,
) -> Result<Cow<'r, Value>, EvalError> {
    match embedded {
        None => Ok(Cow::Owned(Value::Null)),
        Some(Embedded::Parsed(value)) => Ok(Cow::Borrowed(value)),
        Some(raw @ Embedded::Raw(_)) => {
            raw.to_value()
                .map(Cow::Owned)
                .map_err(|e| EvalError::Object {
                    field,
                    message: e.to_string(),
                })
        }
    }
}

impl<'a> Evaluation<'a> {
    fn note(&mut self, rule: &CompiledRule, result: impl Into<String>) {
        if self.ask.explain {
            self.explanations.push(Explanation::of(rule, result.into()));
        }
    }

    fn run(&mut self, standing: &[u32]) -> Result<Verdict, EvalError> {
        let plan = self.plan;
        let request = self.request;
        let budget = Budget::new(self.ask.options.limits);
        if !budget.charge(self.selecting_steps)
            && let Some(exceeded) = budget.exceeded()
        {
            return Ok(over_budget(plan, exceeded));
        }
        let mut verdict = Verdict::allow();
        if self.ask.options.answer {
            note_generation(&mut verdict, plan);
        }
        if standing.is_empty() {
            if let Some(kept) = &mut self.kept {
                *kept = match self.taken.take() {
                    Some(Some(taken)) => {
                        Some(taken.into_value().map_err(|e| EvalError::Object {
                            field: "object",
                            message: e.to_string(),
                        })?)
                    }
                    _ => None,
                };
            }
            return Ok(verdict);
        }
        // A document a standing rule reads that does not parse (nested
        // deeper than serde_json allows) is a denial, not an error the API
        // server would answer by the failure policy.
        let object = match self.taken.take() {
            Some(Some(taken)) => match taken.into_value() {
                Ok(object) => Cow::Owned(object),
                Err(e) => return Ok(unreadable_object(plan, &format!("request.object: {e}"))),
            },
            Some(None) => Cow::Owned(Value::Null),
            None => match document(request.object.as_ref(), "object") {
                Ok(object) => object,
                Err(e) => return Ok(unreadable_object(plan, &e.to_string())),
            },
        };
        let old_object = match document(request.old_object.as_ref(), "oldObject") {
            Ok(old_object) => old_object,
            Err(e) => return Ok(unreadable_object(plan, &e.to_string())),
        };
        let request_value = RequestValue::new(request, plan.request_fields());
        let result = match self.ask.mode {
            Mode::Validate => {
                let document = Document::new(&request_value, &object, &old_object, &budget);
                self.validate(standing, &document, &mut verdict);
                if let Some(kept) = &mut self.kept {
                    *kept = Some(object.into_owned());
                }
                Ok(())
            }
            Mode::Mutate => {
                let object = object.into_owned();
                self.mutate(
                    standing,
                    &request_value,
                    object,
                    &old_object,
                    &budget,
                    &mut verdict,
                )
            }
        };
        if let Some(exceeded) = budget.exceeded() {
            return Ok(over_budget(plan, exceeded));
        }
        if let Some(failure) = budget.failure() {
            return Ok(expression_failed(plan, failure));
        }
        result.map(|()| verdict)
    }

    /// Object selector and `when`, on `document`, whose outcomes for the
    /// rule sets' guards are kept in `guards`.
    fn applies(
        &self,
        rule: &CompiledRule,
        document: &Document<'_>,
        guards: &mut GuardOutcomes,
    ) -> Result<(), Mismatch> {
        rule.matcher
            .match_objects(document.object, document.old_object)?;
        let frame = Frame::top(document);
        let (set_guards, own) = (rule.when.guards(), rule.when.own());
        let failing = guards.first_failing(rule.guard_group, || {
            condition::first_failing_guard(set_guards, frame)
        });
        if let Some(i) = failing {
            return Err(Mismatch::When(i));
        }
        for (i, predicate) in own.iter().enumerate() {
            if !holds(predicate, frame) {
                return Err(Mismatch::When(set_guards.len() + i));
            }
        }
        Ok(())
    }

    fn validate(&mut self, standing: &[u32], document: &Document<'_>, verdict: &mut Verdict) {
        let mut guards = GuardOutcomes::new(self.plan);
        let mut selections = Selections::new(self.plan);
        for &number in standing {
            // Once the budget is spent (or an expression failed) the
            // review is denied for it: the rules left would only cost.
            if !document.budget().charge(1) {
                break;
            }
            let Some(rule) = self.plan.rule(number) else {
                continue;
            };
            if let Err(mismatch) = self.applies(rule, document, &mut guards) {
                self.note(rule, format!("skipped: {mismatch}"));
                continue;
            }
            let mut violations = Violations::default();
            let mut elements = Vec::new();
            collect_violations(
                &rule.deny,
                document,
                &mut elements,
                &mut violations,
                Some(&mut selections),
            );
            if violations.messages.is_empty() {
                self.note(rule, "matched: no violations");
                continue;
            }
            self.note(
                rule,
                format!(
                    "matched: {} violation(s): {}",
                    violations.messages.len() + violations.more,
                    violations.messages.join("; ")
                ),
            );
            verdict.findings.push(Finding {
                rule_set: rule.rule_set_name.clone(),
                rule: rule.name.clone(),
                outcome: Outcome::of(rule.action),
                messages: violations.messages,
                more_messages: violations.more,
                code: (rule.action == Action::Deny).then_some(rule.code),
            });
        }
        finish_validation(verdict);
        if self.ask.options.answer {
            annotate(verdict);
        }
    }

    fn mutate(
        &mut self,
        standing: &[u32],
        request: &RequestValue<'_>,
        object: Value,
        old_object: &Value,
        budget: &Budget,
        verdict: &mut Verdict,
    ) -> Result<(), EvalError> {
        // The original is only needed to check the patch; otherwise the
        // parsed object itself becomes the working copy.
        let original = self.ask.options.verify_patches.then(|| object.clone());
        let base = Document::new(request, &Value::Null, old_object, budget);
        let mutated = mutate::run(
            self.plan,
            standing,
            &base,
            object,
            self.ask.options.answer || self.ask.options.verify_patches,
        )?;
        tracing::trace!(passes = mutated.passes, "Mutations settled");
        let document = base.with_object(&mutated.object);
        let document = &document;
        if self.ask.explain {
            let mut guards = GuardOutcomes::new(self.plan);
            for &number in standing {
                let Some(rule) = self.plan.rule(number) else {
                    continue;
                };
                let result = if mutated.rules.contains(&number) {
                    "matched: mutated the object".to_owned()
                } else {
                    match self.applies(rule, document, &mut guards) {
                        Ok(()) => "matched: nothing to change".to_owned(),
                        Err(mismatch) => format!("skipped: {mismatch}"),
                    }
                };
                self.note(rule, result);
            }
        }
        for &number in &mutated.rules {
            if let Some(rule) = self.plan.rule(number) {
                verdict.findings.push(Finding {
                    rule_set: rule.rule_set_name.clone(),
                    rule: rule.name.clone(),
                    outcome: Outcome::Mutated,
                    messages: Vec::new(),
                    more_messages: 0,
                    code: None,
                });
            }
        }
        let mutate::Mutated { object, editor, .. } = mutated;
        if let Some(patch) = editor.into_patch() {
            // The patch was built from the edits, not diffed: check it before
            // the API server applies it, when asked to.
            if let Some(original) = &original {
                crate::patch::verify(original, &patch, &object).map_err(EvalError::PatchCheck)?;
            }
            verdict.patch = Some(patch);
            match &mut self.kept {
                Some(kept) => *kept = Some(object),
                None => verdict.mutated = Some(object),
            }
        } else if let Some(kept) = &mut self.kept {
            *kept = Some(object);
        }
        if self.ask.options.answer {
            annotate(verdict);
        }
        Ok(())
    }
}

/// What the rules' own document-level `forEach` paths selected so far in
/// one validation, by [`Plan::shared_selections`] number: most Pod
/// Security rules walk
/// `$.podSpec['containers','initContainers','ephemeralContainers'][*]`,
/// each with a path of its own.
struct Selections<'a>(Vec<Option<Vec<&'a Value>>>);

impl<'a> Selections<'a> {
    fn new(plan: &Plan) -> Self {
        Selections(vec![None; plan.shared_selections()])
    }

    /// The values `path`, numbered `shared`, selects in `document`,
    /// charged to the budget as [`Frame::select`] charges them whether
    /// walked or kept.
    fn select(
        &mut self,
        path: &JsonPath,
        shared: usize,
        document: &Document<'a>,
    ) -> Cow<'_, [&'a Value]> {
        match self.0.get_mut(shared) {
            Some(Some(values)) => {
                let count = u64::try_from(values.len()).unwrap_or(u64::MAX);
                document.budget().charge(count.saturating_add(1));
                Cow::Borrowed(values)
            }
            Some(slot) => Cow::Borrowed(slot.insert(Frame::top(document).select(path))),
            None => Cow::Owned(Frame::top(document).select(path)),
        }
    }
}

/// The violations one rule finds: the messages of the first
/// [`MAX_FINDING_MESSAGES`], and how many more there were. A Pod with
/// 80,000 containers that break 15 rules each would otherwise render a
/// million messages, for a denial that lists 20.
#[derive(Debug, Default)]
struct Violations {
    messages: Vec<String>,
    more: usize,
}

impl Violations {
    /// Counts one violation, rendering its message only while there is
    /// room for it.
    fn add(&mut self, render: impl FnOnce() -> String) {
        if self.messages.len() < MAX_FINDING_MESSAGES {
            self.messages.push(render());
        } else {
            self.more += 1;
        }
    }
}

/// The violations `checks` find, added to `violations`.
/// `selections` keeps what the rule's own document-level `forEach` paths
/// select (`None` below them).
fn collect_violations<'a>(
    checks: &'a [DenyCheck],
    document: &Document<'a>,
    elements: &mut Vec<&'a Value>,
    violations: &mut Violations,
    mut selections: Option<&mut Selections<'a>>,
) {
    for check in checks {
        if !document.budget().charge(1) {
            return;
        }
        match check {
            DenyCheck::Entry {
                predicate,
                message,
                message_expression,
            } => {
                let frame = Frame { document, elements };
                if predicate.as_ref().is_none_or(|p| holds(p, frame)) {
                    violations.add(|| {
                        message_expression
                            .as_ref()
                            .and_then(|expression| condition::message(expression, frame))
                            .unwrap_or_else(|| message.render(|path| frame.select(path)))
                    });
                }
            }
            DenyCheck::ForEach {
                path,
                checks,
                entries: true,
                ..
            } => {
                let selected = Frame { document, elements }.select(path);
                for map in selected.into_iter().filter_map(Value::as_object) {
                    for (key, value) in map {
                        // The entry is a copy, charged as one: below a
                        // `forEach` over the containers, each container
                        // would otherwise copy the whole map for a step.
                        if !document.budget().afford_copy(value) {
                            return;
                        }
                        // The entry is built here, so the frame below it
                        // lives only as long as this iteration.
                        let entry = serde_json::json!({"key": key, "value": value});
                        let mut inner: Vec<&Value> = elements.clone();
                        inner.push(&entry);
                        collect_violations(checks, document, &mut inner, violations, None);
                    }
                }
            }
            DenyCheck::ForEach {
                path,
                checks,
                entries: false,
                shared,
            } => {
                let selected = match (selections.as_deref_mut(), shared) {
                    (Some(kept), Some(shared)) => kept.select(path, *shared, document),
                    _ => Cow::Owned(Frame { document, elements }.select(path)),
                };
                for &element in selected.iter() {
                    if !document.budget().charge(1) {
                        return;
                    }
                    elements.push(element);
                    collect_violations(checks, document, elements, violations, None);
                    elements.pop();
                }
            }
        }
    }
}

/// Log lines of reviews denied because a CEL expression failed on them:
/// anyone who may create an object can make every one of their reviews
/// fail an expression (a missing key, a bad timestamp), so a line each
/// would turn their request rate into log volume, as refused requests
/// would (`server::status::BAD_REQUEST_LOG`). The denial itself is counted
/// with every other.
static EXPRESSION_FAILED_LOG: LogThrottle = LogThrottle::new(100, Duration::from_secs(10));

/// Log lines of reviews denied over their evaluation budget, bounded as
/// [`EXPRESSION_FAILED_LOG`] is, each kind on its own so that a flood of
/// one does not hide the other.
static OVER_BUDGET_LOG: LogThrottle = LogThrottle::new(100, Duration::from_secs(10));

/// The denial of a review a CEL expression failed on (as the API server
/// denies when a ValidatingAdmissionPolicy expression fails under
/// `failurePolicy: Fail`): the rules could not decide it.
fn expression_failed(plan: &Plan, failure: String) -> Verdict {
    log_expression_failed(&EXPRESSION_FAILED_LOG, Instant::now(), &failure);
    undecided(plan, 403, format!("kadmit: {failure}"))
}

/// The verdict on a review whose object (or old object) a selected rule
/// reads but kadmit could not parse as far as the rule reads, `detail`
/// saying why: denied with 400, whatever the webhook's `failurePolicy`,
/// since answering the API server with an error would let `Ignore` admit
/// what the rule was there to judge.
pub fn unreadable_object(plan: &Plan, detail: &str) -> Verdict {
    let exceeded = budget::Exceeded::UnreadableObject;
    let detail = crate::excerpt::cut(detail, crate::excerpt::MAX_MESSAGE_BYTES / 2);
    over_limit(
        plan,
        exceeded,
        400,
        format!("kadmit: {exceeded} ({detail})"),
    )
}

/// The verdict on a review rules apply to whose objects could take more
/// than `limit` bytes to parse: denied with 413, whatever the webhook's
/// `failurePolicy`, as [`unreadable_object`] is.
pub fn too_large_to_parse(plan: &Plan, limit: usize) -> Verdict {
    let exceeded = budget::Exceeded::ParsedBytes(limit);
    over_limit(plan, exceeded, 413, format!("kadmit: {exceeded}"))
}

/// The verdict on a review whose answer would be larger than the `limit`
/// bytes the server may hold of all answers and bodies together: denied
/// with 413, whatever the webhook's `failurePolicy`, as
/// [`unreadable_object`] is. Refused as busy instead, it would be refused
/// again at every retry.
pub fn answer_too_large(plan: &Plan, limit: usize) -> Verdict {
    over_budget(plan, budget::Exceeded::AnswerBytes(limit))
}

/// The verdict on a review whose objects could take more than `limit`
/// bytes to parse when only `Warn` and `Audit` rules apply that cannot
/// fail ([`CompiledRule::can_fail`]), so never deny: allowed, saying in a warning and the audit annotation
/// `evaluation-limit: parsed_bytes` that they were not evaluated.
pub fn too_large_to_warn(plan: &Plan, limit: usize) -> Verdict {
    let mut verdict = Verdict {
        allowed: true,
        warnings: vec![format!(
            "kadmit: the Warn and Audit rules that apply were not evaluated: the objects could \
             take more than {limit} bytes of memory to parse"
        )],
        ..Verdict::default()
    };
    note_generation(&mut verdict, plan);
    marked_over(verdict, budget::Exceeded::ParsedBytes(limit))
}

/// Logs, unless `throttle` holds it back at `now`, that a review was
/// denied for `failure`.
///
/// The failure quotes what the request holds (`No such key: <annotation>`,
/// a pattern, a timestamp), so it is logged escaped and as a string field:
/// a newline or an escape sequence in an annotation would otherwise forge a
/// log line of its own or rewrite the operator's terminal.
fn log_expression_failed(throttle: &LogThrottle, now: Instant, failure: &str) {
    if let Some(unlogged) = throttle.admit(now) {
        let failure = crate::excerpt::printable(failure, crate::excerpt::MAX_MESSAGE_BYTES);
        tracing::warn!(
            failure = failure.as_str(),
            not_logged_before = unlogged,
            "Denied a review a CEL expression failed on (logged at most 100 times every 10 s)"
        );
    }
}

/// The denial of a review that went over its budget: whatever the rules
/// found so far is not a verdict, so none of it is kept.
fn over_budget(plan: &Plan, exceeded: budget::Exceeded) -> Verdict {
    over_limit(plan, exceeded, 413, format!("kadmit: {exceeded}"))
}

/// The denial of a review over the limit `exceeded`, with `code` and
/// `message`: logged (throttled), annotated and counted by the limit.
fn over_limit(plan: &Plan, exceeded: budget::Exceeded, code: u16, message: String) -> Verdict {
    marked_over(undecided(plan, code, message), exceeded)
}

/// `verdict`, logged (throttled) and marked as reaching `exceeded`: the
/// metric's label and the audit annotation `evaluation-limit`.
fn marked_over(mut verdict: Verdict, exceeded: budget::Exceeded) -> Verdict {
    log_over_budget(&OVER_BUDGET_LOG, Instant::now(), exceeded);
    verdict.over_budget = Some(exceeded);
    verdict
        .audit_annotations
        .insert("evaluation-limit".to_owned(), exceeded.code().to_owned());
    verdict
}

/// Logs, unless `throttle` holds it back at `now`, that a review was
/// denied over its budget: anyone may send reviews that are.
fn log_over_budget(throttle: &LogThrottle, now: Instant, exceeded: budget::Exceeded) {
    if let Some(unlogged) = throttle.admit(now) {
        tracing::warn!(
            limit = exceeded.code(),
            not_logged_before = unlogged,
            "Denied a review over its evaluation budget (logged at most 100 times every 10 s)"
        );
    }
}

/// A denial with `code` and `message` of a review the rules could not
/// decide.
fn undecided(plan: &Plan, code: u16, message: String) -> Verdict {
    let mut verdict = Verdict {
        allowed: false,
        denial: Some(Denial {
            code,
            reason: status_reason(code).to_owned(),
            message,
        }),
        ..Verdict::default()
    };
    note_generation(&mut verdict, plan);
    verdict
}

/// Notes in `verdict`'s `auditAnnotations` which plan decided it.
fn note_generation(verdict: &mut Verdict, plan: &Plan) {
    verdict
        .audit_annotations
        .insert("plan-generation".to_owned(), plan.generation().to_string());
}

/// Kubernetes `StatusReason` of an HTTP code.
fn status_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// One line, at most [`MAX_WARNING_CHARS`] characters: kube-apiserver drops
/// warnings with control characters.
fn clean_warning(text: &str) -> String {
    let single: String = text
        .split(|c: char| c.is_control())
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ");
    if single.chars().count() <= MAX_WARNING_CHARS {
        single
    } else {
        let mut cut: String = single.chars().take(MAX_WARNING_CHARS - 1).collect();
        cut.push('…');
        cut
    }
}

fn finish_validation(verdict: &mut Verdict) {
    let mut denials = Vec::new();
    let mut more_denials = 0usize;
    let mut code = None;
    let mut seen_warnings = std::collections::HashSet::new();
    let mut more_warnings = 0usize;
    for finding in &verdict.findings {
        let name = format!("{}/{}", finding.rule_set, finding.rule);
        match finding.outcome {
            Outcome::Denied => {
                code = code.or(finding.code);
                for message in &finding.messages {
                    if denials.len() < MAX_DENIAL_MESSAGES {
                        denials.push(format!("{name}: {message}"));
                    } else {
                        more_denials += 1;
                    }
                }
                more_denials += finding.more_messages;
            }
            Outcome::Warned => {
                for message in &finding.messages {
                    let warning = clean_warning(&format!("{name}: {message}"));
                    if seen_warnings.contains(&warning) {
                        continue;
                    }
                    if verdict.warnings.len() < MAX_WARNINGS {
                        seen_warnings.insert(warning.clone());
                        verdict.warnings.push(warning);
                    } else {
                        more_warnings += 1;
                    }
                }
                more_warnings += finding.more_messages;
            }
            Outcome::Audited | Outcome::Mutated => {}
        }
    }
    if more_warnings > 0 {
        verdict
            .warnings
            .push(format!("… and {more_warnings} more warnings"));
    }
    if !denials.is_empty() {
        if more_denials > 0 {
            denials.push(format!("… and {more_denials} more violations"));
        }
        let code = code.unwrap_or(403);
        verdict.allowed = false;
        verdict.denial = Some(Denial {
            code,
            reason: status_reason(code).to_owned(),
            message: denials.join("; "),
        });
    }
}

/// `auditAnnotations`: the rules that fired, by outcome, each list written
/// once at its final length.
fn annotate(verdict: &mut Verdict) {
    fn slot(outcome: Outcome) -> usize {
        match outcome {
            Outcome::Denied => 0,
            Outcome::Warned => 1,
            Outcome::Audited => 2,
            Outcome::Mutated => 3,
        }
    }
    // `rule_set/rule`, and a comma before all but the first.
    let mut lengths = [0usize; 4];
    for finding in &verdict.findings {
        lengths[slot(finding.outcome)] += finding.rule_set.len() + finding.rule.len() + 2;
    }
    let mut lists: [Option<(Outcome, String)>; 4] = Default::default();
    for finding in &verdict.findings {
        let at = slot(finding.outcome);
        let (_, rules) =
            lists[at].get_or_insert_with(|| (finding.outcome, String::with_capacity(lengths[at])));
        if !rules.is_empty() {
            rules.push(',');
        }
        rules.push_str(&finding.rule_set);
        rules.push('/');
        rules.push_str(&finding.rule);
    }
    for (outcome, rules) in lists.into_iter().flatten() {
        verdict
            .audit_annotations
            .insert(["rules-", outcome.as_str()].concat(), rules);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_that_fired_are_listed_by_outcome_each_list_at_its_length() {
        let finding = |rule_set: &str, rule: &str, outcome| Finding {
            rule_set: rule_set.into(),
            rule: rule.into(),
            outcome,
            messages: Vec::new(),
            more_messages: 0,
            code: None,
        };
        let mut verdict = Verdict {
            findings: vec![
                finding("pods", "defaults", Outcome::Mutated),
                finding("pss", "privileged", Outcome::Denied),
                finding("pods", "team", Outcome::Mutated),
                finding("pss", "host-ports", Outcome::Warned),
                finding("images", "latest", Outcome::Mutated),
            ],
            ..Verdict::default()
        };
        annotate(&mut verdict);
        let listed: Vec<(&str, &str)> = verdict
            .audit_annotations
            .iter()
            .map(|(key, rules)| (key.as_str(), rules.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("rules-denied", "pss/privileged"),
                ("rules-mutated", "pods/defaults,pods/team,images/latest"),
                ("rules-warned", "pss/host-ports"),
            ]
        );
        // Room for a comma after each: no list grew while it was written.
        for rules in verdict.audit_annotations.values() {
            assert_eq!(rules.capacity(), rules.len() + 1, "{rules}");
        }
    }

    #[test]
    fn warnings_are_single_line_and_short() {
        assert_eq!(clean_warning("a\nb\t c"), "a b c");
        let long = "x".repeat(300);
        let cleaned = clean_warning(&long);
        assert_eq!(cleaned.chars().count(), MAX_WARNING_CHARS);
        assert!(cleaned.ends_with('…'));
    }
}

#[cfg(test)]
mod rule_tests {
    //! Evaluation of small rule sets against the real API server fixtures.
    use super::*;

    /// The engine's entry point, for tests that pass a whole request.
    pub(super) fn evaluate(
        plan: &Plan,
        request: &Request,
        mode: Mode,
        rule_set: Option<crate::plan::RuleSetId>,
    ) -> Result<Verdict, EvalError> {
        select(plan, request, Ask::new(mode).rule_sets(rule_set)).evaluate(request)
    }
    use crate::plan::test_plan as plan;
    use crate::review::decode;
    use serde_json::json;

    fn fixture(name: &str) -> Request {
        let path = format!(
            "{}/tests/fixtures/admission-reviews/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        decode(&body)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .request
    }

    fn with_object(mut request: Request, object: Value) -> Request {
        request.object = Some(Embedded::Raw(
            serde_json::value::to_raw_value(&object).unwrap(),
        ));
        request
    }

    fn apply_patch(request: &Request, verdict: &Verdict) -> Value {
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        if let Some(patch) = &verdict.patch {
            json_patch::patch(&mut object, &patch.to_json_patch().unwrap()).unwrap();
        }
        object
    }

    const PRIVILEGED: &str = "    - name: no-privileged
      match: {resources: [pods, deployments]}
      deny:
        - forEach: \"$.podSpec['containers','initContainers'][*]\"
          deny:
            - path: $.securityContext.privileged
              equals: true
              message: 'container {{ $.name }} of {{ $$.object.metadata.name }} is privileged'
";

    #[test]
    fn denies_every_violation_with_rule_names() {
        let plan = plan(PRIVILEGED);
        let request = fixture("create-pod.json");
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        object["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        let mut second = object["spec"]["containers"][0].clone();
        second["name"] = json!("two");
        object["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(second);
        let verdict = evaluate(&plan, &with_object(request, object), Mode::Validate, None).unwrap();
        assert!(!verdict.allowed);
        let denial = verdict.denial.unwrap();
        assert_eq!((denial.code, denial.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            denial.message,
            "t/no-privileged: container pod1 of pod1 is privileged; t/no-privileged: container two of pod1 is privileged"
        );
        assert_eq!(verdict.audit_annotations["rules-denied"], "t/no-privileged");
    }

    #[test]
    fn pod_spec_covers_deployments_and_allows_clean_objects() {
        let plan = plan(PRIVILEGED);
        let verdict = evaluate(
            &plan,
            &fixture("create-deployment.json"),
            Mode::Validate,
            None,
        )
        .unwrap();
        assert!(verdict.allowed);
        let mut request = fixture("create-deployment.json");
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        object["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"privileged": true});
        request = with_object(request, object);
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert!(!verdict.allowed, "{verdict:?}");
    }

    #[test]
    fn nested_for_each_with_binding() {
        let plan = plan(
            "    - name: no-host-ports
      match: {resources: [pods]}
      action: Warn
      deny:
        - forEach: $.podSpec.containers[*]
          as: c
          deny:
            - forEach: $c.ports[*]
              deny:
                - path: $.hostPort
                  greaterThan: 0
                  message: '{{ $c.name }} uses host port {{ $.hostPort }}'
",
        );
        let request = fixture("create-pod.json");
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        object["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]);
        let verdict = evaluate(&plan, &with_object(request, object), Mode::Validate, None).unwrap();
        assert!(verdict.allowed);
        assert_eq!(
            verdict.warnings,
            vec!["t/no-host-ports: pod1 uses host port 8080"]
        );
        assert!(verdict.denial.is_none());
    }

    #[test]
    fn immutable_label_on_update_compares_paths() {
        let plan = plan(
            "    - name: team-immutable
      match: {operations: [UPDATE], resources: [pods]}
      when: [{path: $.oldObject.metadata.labels.app, exists: true}]
      deny:
        - path: $.object.metadata.labels.app
          notEquals: {path: $.oldObject.metadata.labels.app}
          message: label app cannot change from {{ $.oldObject.metadata.labels.app }}
",
        );
        let request = fixture("update-pod-labels.json");
        assert!(
            evaluate(&plan, &request, Mode::Validate, None)
                .unwrap()
                .allowed
        );
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        object["metadata"]["labels"]["app"] = json!("other");
        let verdict = evaluate(&plan, &with_object(request, object), Mode::Validate, None).unwrap();
        assert!(!verdict.allowed);
    }

    #[test]
    fn delete_connect_and_generate_name_do_not_break_rules() {
        let plan = plan(
            "    - name: everything
      match: {operations: ['*'], resources: ['*', '*/*'], objectSelector: {matchLabels: {app: demo}}}
      deny:
        - message: '{{ $.request.operation }} of {{ $.object.metadata.name }} / {{ $.oldObject.metadata.name }} named {{ $.request.name }}'
    - name: any-object
      match: {operations: ['*'], resources: ['*', '*/*']}
      action: Audit
      deny:
        - message: '{{ $.request.name }} {{ $.object.kind }}'
",
        );
        // DELETE: object null, the selector matches the old object.
        let verdict = evaluate(&plan, &fixture("delete-pod.json"), Mode::Validate, None).unwrap();
        assert_eq!(
            verdict.denial.unwrap().message,
            "t/everything: DELETE of <none> / pod1 named pod1"
        );
        // CONNECT: PodExecOptions has no metadata; the selector never matches it.
        let verdict = evaluate(
            &plan,
            &fixture("connect-pod-exec.json"),
            Mode::Validate,
            None,
        )
        .unwrap();
        assert!(verdict.allowed);
        assert_eq!(verdict.audit_annotations["rules-audited"], "t/any-object");
        // generateName: no request.name.
        let verdict = evaluate(
            &plan,
            &fixture("create-configmap-generatename.json"),
            Mode::Validate,
            None,
        )
        .unwrap();
        assert_eq!(verdict.findings[0].messages, vec!["<none> ConfigMap"]);
    }

    #[test]
    fn mutations_patch_idempotently_through_pod_spec() {
        let plan = plan(
            "    - name: defaults
      match: {resources: [pods, deployments]}
      mutate:
        - setIfAbsent: {path: \"$.object.metadata.labels['app.kubernetes.io/managed-by']\", value: kadmit}
        - setIfAbsent: {path: $.podSpec.securityContext.runAsNonRoot, value: true}
        - mergeIfAbsent: {path: '$.podSpec.containers[*].resources', value: {limits: {memory: 256Mi}, requests: {cpu: 100m}}}
        - injectIfMissing: {path: $.podSpec.tolerations, key: [key, effect], value: {key: dedicated, effect: NoSchedule, operator: Exists}}
        - forEach: '$.podSpec.containers[*]'
          mutate:
            - setIfAbsent: {path: $.resources.requests.memory, valueFrom: {path: $.resources.limits.memory}}
",
        );
        for name in ["create-pod.json", "create-deployment.json"] {
            let request = fixture(name);
            let verdict = evaluate(&plan, &request, Mode::Mutate, None).unwrap();
            let mutated = apply_patch(&request, &verdict);
            assert_eq!(Some(&mutated), verdict.mutated.as_ref(), "{name}");
            assert_eq!(
                mutated["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                json!("kadmit")
            );
            let spec = if name == "create-pod.json" {
                &mutated["spec"]
            } else {
                &mutated["spec"]["template"]["spec"]
            };
            assert_eq!(
                spec["securityContext"]["runAsNonRoot"],
                json!(true),
                "{name}"
            );
            assert_eq!(
                spec["containers"][0]["resources"]["requests"]["memory"],
                json!("256Mi"),
                "{name}"
            );
            let dedicated = spec["tolerations"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["key"] == "dedicated")
                .count();
            assert_eq!(dedicated, 1, "{name}");
            // Running again on the output gives no patch.
            let again =
                evaluate(&plan, &with_object(request, mutated), Mode::Mutate, None).unwrap();
            assert!(again.patch.is_none(), "{name}: {:?}", again.patch);
        }
        // DELETE has no object: nothing to mutate, and DELETE is not matched by default.
        let verdict = evaluate(&plan, &fixture("delete-pod.json"), Mode::Mutate, None).unwrap();
        assert!(verdict.patch.is_none());
    }

    /// The fixture pod with `n` minimal containers.
    fn pod_with_containers(n: usize) -> Request {
        let request = fixture("create-pod.json");
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        object["spec"]["containers"] = (0..n)
            .map(|i| json!({"name": format!("c{i}"), "image": "registry.example/app:1"}))
            .collect();
        with_object(request, object)
    }

    fn assert_denied_over_budget(verdict: &Verdict, limit: &str, flag: &str) {
        assert!(!verdict.allowed, "{verdict:?}");
        let denial = verdict.denial.as_ref().expect("a denial");
        assert_eq!(denial.code, 413);
        assert_eq!(denial.reason, "RequestEntityTooLarge");
        assert!(denial.message.contains(flag), "{}", denial.message);
        assert_eq!(verdict.audit_annotations["evaluation-limit"], limit);
        assert!(verdict.patch.is_none() && verdict.findings.is_empty());
        assert_eq!(verdict.over_budget.map(|e| e.code()), Some(limit));
    }

    #[test]
    fn a_review_over_the_step_budget_is_denied_naming_the_limit() {
        // Every container compared with every container: 4,000 containers
        // are 16 million steps.
        let plan = plan(
            "    - name: quadratic
      match: {resources: [pods]}
      deny:
        - forEach: \"$.podSpec.containers[*]\"
          deny:
            - path: \"$$.podSpec.containers[*].image\"
              equals: forbidden
              message: no
",
        );
        let request = pod_with_containers(4_000);
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert_denied_over_budget(&verdict, "evaluation_steps", "--max-evaluation-steps");

        // The same rule on an ordinary pod is well within the budget.
        let verdict = evaluate(&plan, &pod_with_containers(3), Mode::Validate, None).unwrap();
        assert!(verdict.allowed, "{verdict:?}");
    }

    #[test]
    fn a_descendant_path_under_long_keys_is_over_budget_before_it_runs() {
        // jsonpath-rust would build 12,000 paths of 16 KiB each (about
        // 200 MB) for `..` here; the review is answered as over budget
        // without running it, in both halves.
        let plan = plan(
            "    - name: images-anywhere
      match: {resources: [pods]}
      deny:
        - path: \"$.object..image\"
          equals: forbidden
          message: no
      mutate:
        - set: {path: \"$.object..image\", value: allowed}
",
        );
        let long_key = "k".repeat(16 << 10);
        let hostile = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {long_key: vec![0; 12_000]}});
        let request = with_object(fixture("create-pod.json"), hostile);
        for mode in [Mode::Validate, Mode::Mutate] {
            let verdict = evaluate(&plan, &request, mode, None).unwrap();
            assert_denied_over_budget(&verdict, "evaluation_steps", "--max-evaluation-steps");
        }
        // The same rules on an ordinary pod run.
        let ordinary = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "forbidden"}]}}),
        );
        let verdict = evaluate(&plan, &ordinary, Mode::Validate, None).unwrap();
        assert!(
            !verdict.allowed && verdict.over_budget.is_none(),
            "{verdict:?}"
        );
        let verdict = evaluate(&plan, &ordinary, Mode::Mutate, None).unwrap();
        assert!(
            verdict.patch.is_some() && verdict.over_budget.is_none(),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_cel_expression_over_the_budget_denies_naming_the_limit() {
        // Every container compared with every container, in CEL.
        let plan = plan(
            "    - name: quadratic-cel
      match: {resources: [pods]}
      deny:
        - cel: \"object.spec.containers.exists(a, object.spec.containers.exists(b, a.name == b.name && a != b))\"
          message: two containers share a name
",
        );
        let verdict = evaluate(&plan, &pod_with_containers(4_000), Mode::Validate, None).unwrap();
        assert_denied_over_budget(&verdict, "evaluation_steps", "--max-evaluation-steps");
        let verdict = evaluate(&plan, &pod_with_containers(3), Mode::Validate, None).unwrap();
        assert!(verdict.allowed, "{verdict:?}");
    }

    #[test]
    fn a_failing_cel_expression_denies_naming_where_it_is() {
        let plan = plan(
            "    - name: team
      match: {resources: [pods]}
      deny:
        - cel: \"object.metadata.labels.team == 'none'\"
          message: no team
",
        );
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}),
        );
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert!(!verdict.allowed);
        let denial = verdict.denial.expect("a denial");
        assert_eq!(denial.code, 403);
        assert!(
            denial.message.contains("the CEL expression at t.yaml:")
                && denial.message.contains("labels"),
            "{}",
            denial.message
        );
        // With the label there, the expression decides.
        let labelled = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "labels": {"team": "a"}}, "spec": {}}),
        );
        let verdict = evaluate(&plan, &labelled, Mode::Validate, None).unwrap();
        assert!(verdict.allowed, "{verdict:?}");
    }

    #[test]
    fn a_cel_failure_quoting_a_large_value_is_cut_to_the_bound() {
        // cel-interpreter names both operands of an addition it cannot do:
        // here a map of 20,000 entries, about a megabyte as text.
        let plan = plan(
            "    - name: adds
      match: {resources: [pods]}
      deny:
        - cel: \"object.spec + 1 == 2\"
          message: never
",
        );
        let entries: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("key-{i:05}"), json!("v".repeat(40))))
            .collect();
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": entries}),
        );
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        let denial = verdict.denial.expect("a denial");
        assert_eq!(denial.code, 403);
        assert!(
            denial.message.contains("the CEL expression at t.yaml:"),
            "{}",
            denial.message
        );
        assert!(
            denial.message.len() <= crate::excerpt::MAX_MESSAGE_BYTES + 16,
            "{} bytes",
            denial.message.len()
        );
    }

    /// What `log` writes in the text format `kadmit` logs in by default
    /// (`main::init_tracing`), uncoloured.
    fn text_log(log: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let written = sink.0.lock().unwrap().clone();
        String::from_utf8(written).unwrap()
    }

    #[test]
    fn a_cel_failure_quoting_a_hostile_annotation_is_logged_escaped_on_one_line() {
        // cel-interpreter quotes the missing key as it is: here an
        // annotation holding a whole forged log line, a bidi override and
        // escape sequences.
        let plan = plan(
            "    - name: ref-label
      match: {resources: [pods]}
      deny:
        - cel: \"object.metadata.labels[object.metadata.annotations['ref']] == 'x'\"
          message: ref
",
        );
        let forged = "x\n2026-11-28T00:00:00.000000Z  INFO kadmit::reload::reloader: \
                      Loaded a new rule plan generation=99 \u{1b}[31mFORGED\u{1b}[0m\r\u{2028}\u{202e}";
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {},
                   "metadata": {"name": "p", "labels": {}, "annotations": {"ref": forged}}}),
        );
        let denial = evaluate(&plan, &request, Mode::Validate, None)
            .unwrap()
            .denial
            .expect("a denial");
        let failure = denial.message.strip_prefix("kadmit: ").expect("prefixed");
        // The precondition: the failure holds the annotation raw.
        assert!(
            failure.contains('\n') && failure.contains('\u{1b}'),
            "{failure}"
        );
        let throttle = LogThrottle::new(100, Duration::from_secs(10));
        let logged = text_log(|| log_expression_failed(&throttle, Instant::now(), failure));
        assert_eq!(logged.matches('\n').count(), 1, "one line: {logged}");
        assert!(logged.ends_with('\n'), "{logged}");
        assert!(
            !logged
                .trim_end_matches('\n')
                .chars()
                .any(crate::excerpt::is_unprintable),
            "{logged:?}"
        );
        assert!(logged.contains("No such key: x"), "{logged}");
        assert!(logged.contains("FORGED"), "{logged}");
    }

    #[test]
    fn failure_and_budget_log_lines_are_throttled_and_say_how_many_were_not() {
        let start = Instant::now();
        let expression = LogThrottle::new(100, Duration::from_secs(10));
        let budget = LogThrottle::new(100, Duration::from_secs(10));
        let exceeded = budget::Exceeded::Steps(10);
        // A flood of 250 of each in one interval: 100 lines of each.
        let flood = text_log(|| {
            for _ in 0..250 {
                log_expression_failed(&expression, start, "No such key: x");
                log_over_budget(&budget, start, exceeded);
            }
        });
        let count =
            |text: &str, message: &str| text.lines().filter(|line| line.contains(message)).count();
        assert_eq!(count(&flood, "a CEL expression failed on"), 100, "{flood}");
        assert_eq!(count(&flood, "over its evaluation budget"), 100, "{flood}");
        assert_eq!(count(&flood, "not_logged_before=0"), 200, "{flood}");
        // The next interval's first line of each says how many were not
        // logged.
        let later = start + Duration::from_secs(10);
        let next = text_log(|| {
            log_expression_failed(&expression, later, "No such key: x");
            log_over_budget(&budget, later, exceeded);
        });
        assert_eq!(count(&next, "not_logged_before=150"), 2, "{next}");
        assert_eq!(count(&next, "limit=\"evaluation_steps\""), 1, "{next}");
    }

    #[test]
    fn messages_of_any_length_are_cut_to_the_bound() {
        let plan = plan(
            "    - name: named
      match: {resources: [pods]}
      deny:
        - path: $.object.metadata.name
          exists: true
          message: \"pod {{ $.object.metadata }}\"
        - cel: \"has(object.metadata.name)\"
          messageExpression: \"'pod ' + object.metadata.name\"
",
        );
        let name = "n".repeat(50_000);
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {}}),
        );
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        let messages = &verdict.findings[0].messages;
        assert_eq!(messages.len(), 2, "{messages:?}");
        for message in messages {
            assert!(message.starts_with("pod "), "{message}");
            assert!(
                message.len() <= crate::excerpt::MAX_MESSAGE_BYTES + '…'.len_utf8(),
                "{}",
                message.len()
            );
        }
    }

    #[test]
    fn a_cel_guard_on_a_mutation_settles() {
        // The guard reads the object the mutation writes: a second pass must
        // see the label and leave it.
        let plan = plan(
            "    - name: default-team
      match: {resources: [pods]}
      mutate:
        - when:
            - cel: \"!has(object.metadata.labels) || !('team' in object.metadata.labels)\"
          setIfAbsent: {path: $.object.metadata.labels.team, value: unassigned}
",
        );
        let request = fixture("create-pod.json");
        let verdict = evaluate(&plan, &request, Mode::Mutate, None).unwrap();
        assert!(verdict.allowed, "{verdict:?}");
        let patched = apply_patch(&request, &verdict);
        assert_eq!(patched["metadata"]["labels"]["team"], "unassigned");
        let again = with_object(request, patched);
        let verdict = evaluate(&plan, &again, Mode::Mutate, None).unwrap();
        assert!(verdict.patch.is_none(), "{:?}", verdict.patch);
    }

    /// The fixture pod with these annotations.
    fn pod_with_annotations(annotations: Value) -> Request {
        let request = fixture("create-pod.json");
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        object["metadata"]["annotations"] = annotations;
        with_object(request, object)
    }

    const APPARMOR: &str = "    - name: apparmor
      match: {resources: [pods]}
      deny:
        - forEach: $.object.metadata.annotations
          entries: true
          deny:
            - all:
                - {path: $.key, startsWith: [container.apparmor.security.beta.kubernetes.io/]}
                - {path: $.value, notMatches: '^(runtime/default|localhost/.*)$'}
              message: '{{ $.key }}={{ $.value }} in {{ $$.object.metadata.name }}'
";

    #[test]
    fn entries_test_map_keys_by_pattern_with_their_values() {
        let plan = plan(APPARMOR);
        let verdict = evaluate(
            &plan,
            &pod_with_annotations(json!({
                "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/c": "localhost/mine",
                "example.com/unconfined": "unconfined",
            })),
            Mode::Validate,
            None,
        )
        .unwrap();
        assert_eq!(
            verdict.findings[0].messages,
            vec!["container.apparmor.security.beta.kubernetes.io/a=unconfined in pod1"]
        );
        // Values that are not maps have no entries.
        for annotations in [json!("text"), json!(["a", "b"]), json!(null)] {
            let verdict = evaluate(
                &plan,
                &pod_with_annotations(annotations.clone()),
                Mode::Validate,
                None,
            )
            .unwrap();
            assert!(verdict.allowed, "{annotations}: {verdict:?}");
        }
    }

    #[test]
    fn entries_of_a_huge_map_stop_at_the_step_budget() {
        let plan = plan(APPARMOR);
        let huge: serde_json::Map<String, Value> = (0..100_000)
            .map(|i| (format!("example.com/k{i}"), json!("v")))
            .collect();
        let request = pod_with_annotations(Value::Object(huge));
        let options = EvalOptions {
            limits: budget::Limits {
                max_steps: 50_000,
                ..budget::Limits::DEFAULT
            },
            ..EvalOptions::default()
        };
        let verdict = select(&plan, &request, Ask::new(Mode::Validate).options(options))
            .evaluate(&request)
            .unwrap();
        assert_denied_over_budget(&verdict, "evaluation_steps", "--max-evaluation-steps");
        // Under the default budget the same map is checked in full.
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert!(verdict.allowed, "{:?}", verdict.denial);
    }

    #[test]
    fn entries_of_a_large_map_under_each_container_are_charged_as_copies() {
        // Each of 1,000 containers walks the 200 entries of a 1.6 MB
        // annotation map, and each entry is a copy of its value: 1.6 GB
        // copied for 200,000 steps, until copies were charged by size.
        let plan = plan(
            "    - name: per-container
      match: {resources: [pods]}
      deny:
        - forEach: \"$.podSpec.containers[*]\"
          deny:
            - forEach: $$.object.metadata.annotations
              entries: true
              deny:
                - path: $.value
                  equals: never
                  message: no
",
        );
        let large: serde_json::Map<String, Value> = (0..200)
            .map(|i| (format!("example.com/k{i}"), json!("v".repeat(8 << 10))))
            .collect();
        let mut request = pod_with_containers(1_000);
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        object["metadata"]["annotations"] = Value::Object(large.clone());
        request = with_object(request, object);
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert_denied_over_budget(&verdict, "evaluation_steps", "--max-evaluation-steps");
        // A few containers under the same map are well within the budget.
        let mut request = pod_with_containers(3);
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        object["metadata"]["annotations"] = Value::Object(large);
        request = with_object(request, object);
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert!(verdict.allowed, "{verdict:?}");
    }

    #[test]
    fn a_rule_sets_guards_are_checked_once_per_review_for_all_its_rules() {
        // The set's `when` selects every container's name: 201 steps. Ten
        // rules checking it each would take 2,010 of the 1,000 allowed.
        let mut text = String::from(
            "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: t}
spec:
  when: [{path: '$.podSpec.containers[*].name', exists: true}]
  rules:
",
        );
        for i in 0..10 {
            text.push_str(&format!(
                "    - {{name: r{i}, match: {{resources: [pods]}}, deny: [{{message: m{i}}}]}}\n"
            ));
        }
        text.push_str(
            "    - {name: own-when, match: {resources: [pods]}, when: [{path: $.object.kind, equals: Job}], deny: [{message: never}]}\n",
        );
        let plan = crate::plan::compile(&crate::rules::load_str("t.yaml", &text)).unwrap();
        let request = fixture("create-pod.json");
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        object["spec"]["containers"] = (0..200)
            .map(|i| json!({"name": format!("c{i}"), "image": "registry.example/app:v1"}))
            .collect();
        let request = with_object(request, object);
        let options = EvalOptions {
            limits: budget::Limits {
                max_steps: 1_000,
                ..budget::Limits::DEFAULT
            },
            ..EvalOptions::default()
        };
        let verdict = select(
            &plan,
            &request,
            Ask::new(Mode::Validate).options(options).explaining(),
        )
        .evaluate(&request)
        .unwrap();
        let fired: Vec<&str> = verdict.findings.iter().map(|f| &*f.rule).collect();
        assert_eq!(
            fired,
            ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"]
        );
        // The rule's own `when` still counts after the set's.
        let own = verdict
            .explanations
            .iter()
            .find(|e| &*e.rule == "own-when")
            .unwrap();
        assert_eq!(own.result, "skipped: when[1] does not hold");

        // A guard that does not hold skips every rule, named by its index.
        let mut bare: Value = request.object.as_ref().unwrap().to_value().unwrap();
        bare["spec"]["containers"] = json!([{"image": "registry.example/app:v1"}]);
        let bare = with_object(request, bare);
        let verdict = select(&plan, &bare, Ask::new(Mode::Validate).explaining())
            .evaluate(&bare)
            .unwrap();
        assert!(verdict.findings.is_empty(), "{verdict:?}");
        assert!(
            verdict
                .explanations
                .iter()
                .all(|e| e.result == "skipped: when[0] does not hold"),
            "{:?}",
            verdict.explanations
        );
    }

    #[test]
    fn for_each_selections_shared_by_rules_find_every_violation() {
        // Twenty distinct paths, each walked by two rules.
        let mut rules = String::new();
        for i in 0..20 {
            for (copy, equals) in [("a", "privileged"), ("b", "root")] {
                rules.push_str(&format!(
                    "    - name: r{i}{copy}
      match: {{resources: [pods]}}
      deny:
        - forEach: '$.podSpec.containers[{i}]'
          deny: [{{path: $.role, equals: {equals}, message: '{{{{ $.name }}}} {copy}'}}]
"
                ));
            }
        }
        let plan = plan(&rules);
        let messages: Vec<String> = {
            let request = fixture("create-pod.json");
            let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
            object["spec"]["containers"] = (0..20)
                .map(|i| {
                    let role = ["privileged", "root", "none"][i % 3];
                    json!({"name": format!("c{i}"), "image": "registry.example/app:v1", "role": role})
                })
                .collect();
            let verdict =
                evaluate(&plan, &with_object(request, object), Mode::Validate, None).unwrap();
            verdict
                .findings
                .iter()
                .flat_map(|f| f.messages.clone())
                .collect()
        };
        let expected: Vec<String> = (0..20)
            .filter_map(|i| match i % 3 {
                0 => Some(format!("c{i} a")),
                1 => Some(format!("c{i} b")),
                _ => None,
            })
            .collect();
        assert_eq!(messages, expected);
    }

    #[test]
    fn request_keys_differ_when_any_field_rules_match_on_differs() {
        let request = fixture("update-pod-ephemeralcontainers.json");
        let key = RequestKey::of(&request);
        assert_eq!(key, key.clone().into_owned());
        let changes: [fn(&mut Request); 9] = [
            |r| r.operation = crate::review::Operation::Delete,
            |r| r.resource.group = "apps".to_owned(),
            |r| r.resource.version = "v2".to_owned(),
            |r| r.resource.resource = "deployments".to_owned(),
            |r| r.sub_resource = None,
            |r| r.namespace = None,
            |r| r.namespace = Some("other".to_owned()),
            |r| r.user_info.username = "bob".to_owned(),
            |r| r.user_info.groups.push("extra".to_owned()),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut other = request.clone();
            change(&mut other);
            assert_ne!(RequestKey::of(&other), key, "change {i}");
            assert_ne!(key, RequestKey::of(&other).into_owned(), "change {i}");
        }
    }

    #[test]
    fn kept_selections_are_the_rules_select_leaves_standing_for_every_request() {
        let plan = plan(
            "    - name: most
      match: {resources: [pods], excludeNamespaces: [kube-system]}
      deny: [{message: m}]
    - name: one-namespace
      match: {resources: [pods], namespaces: [team-*]}
      deny: [{message: m}]
    - name: users
      match: {resources: ['*'], excludeUsers: ['system:admin'], groups: [devs]}
      deny: [{message: m}]
    - name: updates
      match: {operations: [UPDATE], resources: [pods, pods/ephemeralcontainers]}
      deny: [{message: m}]
    - name: defaults
      match: {resources: [pods], excludeNamespaces: [kube-system]}
      mutate: [{setIfAbsent: {path: $.object.metadata.labels.a, value: b}}]
    - name: cluster
      match: {resources: [{apiGroups: [''], apiVersions: ['*'], resources: ['*'], scope: Cluster}]}
      deny: [{message: m}]
",
        );
        let mut requests = Vec::new();
        for name in [
            "create-pod.json",
            "update-pod-labels.json",
            "update-pod-ephemeralcontainers.json",
            "create-namespace.json",
            "create-configmap.json",
        ] {
            let request = fixture(name);
            for namespace in [None, Some("default"), Some("kube-system"), Some("team-a")] {
                for (user, groups) in [
                    ("alice", vec!["devs"]),
                    ("system:admin", vec!["devs"]),
                    ("alice", vec![]),
                ] {
                    let mut request = request.clone();
                    if namespace.is_some() || request.namespace.is_some() {
                        request.namespace = namespace.map(str::to_owned);
                    }
                    request.user_info.username = user.to_owned();
                    request.user_info.groups = groups.iter().map(|g| (*g).to_owned()).collect();
                    requests.push(request);
                }
            }
        }
        // Every request after every other (and after itself): what was
        // kept for the first never stands in for the second's selection.
        let mut selected_any = false;
        for first in &requests {
            for second in &requests {
                for mode in [Mode::Validate, Mode::Mutate] {
                    let mut kept = KeptSelections::new(&plan, None);
                    kept.select(first, mode, EvalOptions::default());
                    let fresh = select(&plan, second, Ask::new(mode)).standing;
                    selected_any |= !fresh.is_empty();
                    assert_eq!(
                        kept.select(second, mode, EvalOptions::default()).standing,
                        fresh,
                        "{mode:?} {:?} {:?} {:?} {:?}",
                        second.operation,
                        second.resource,
                        second.namespace,
                        second.user_info
                    );
                }
            }
        }
        assert!(selected_any);
    }

    #[test]
    fn without_the_answer_the_findings_and_the_mutated_object_are_the_same() {
        let rules = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"));
        let plan = crate::plan::compile(&crate::rules::load_dir(rules).unwrap()).unwrap();
        let request = fixture("create-pod.json");
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        // Denied by the image rules, changed by the defaults.
        object["spec"]["containers"][0]["image"] = json!("nginx:latest");
        let judge = |mode: Mode, answer: bool| {
            let options = EvalOptions {
                verify_patches: false,
                answer,
                ..EvalOptions::default()
            };
            select(&plan, &request, Ask::new(mode).options(options))
                .evaluate_object(&request, object.clone())
                .unwrap()
        };
        for mode in [Mode::Mutate, Mode::Validate] {
            let (full, full_object) = judge(mode, true);
            let (lean, lean_object) = judge(mode, false);
            assert!(
                !full.findings.is_empty(),
                "{mode:?}: the fixture fires no rule"
            );
            assert_eq!(lean.findings, full.findings, "{mode:?}");
            assert_eq!(lean_object, full_object, "{mode:?}");
            assert_eq!(lean.allowed, full.allowed, "{mode:?}");
            assert!(!full.audit_annotations.is_empty(), "{mode:?}");
            assert!(lean.audit_annotations.is_empty(), "{mode:?}");
            assert!(lean.patch.is_none(), "{mode:?}");
            assert_eq!(full.patch.is_some(), mode == Mode::Mutate);
        }
    }

    #[test]
    fn set_guards_and_includes_apply_to_every_rule() {
        let text = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: base}
spec:
  when: [{path: $.object.metadata.labels.checked, equals: 'yes'}]
  rules:
    - {name: from-base, match: {resources: [pods]}, deny: [{message: base}]}
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: top}
spec:
  include: [base]
  when: [{path: $.request.namespace, equals: default}]
  rules:
    - {name: own, match: {resources: [pods]}, deny: [{message: own}]}
";
        let plan = crate::plan::compile(&crate::rules::load_str("t.yaml", text)).unwrap();
        let top = plan.rule_set_id("top");
        let request = fixture("create-pod.json");
        let fired = |request: &Request| -> Vec<String> {
            evaluate(&plan, request, Mode::Validate, top)
                .unwrap()
                .findings
                .iter()
                .map(|f| format!("{}/{}", f.rule_set, f.rule))
                .collect()
        };
        // The fixture pod is in default and has no label `checked`: the
        // included rule keeps its own set's guard, the top guard holds.
        assert_eq!(fired(&request), vec!["top/own"]);
        let mut object = request.object.as_ref().unwrap().to_value().unwrap();
        object["metadata"]["labels"]["checked"] = json!("yes");
        let labelled = with_object(request.clone(), object);
        assert_eq!(fired(&labelled), vec!["top/from-base", "top/own"]);
        // The top guard holds the included rules too.
        let mut elsewhere = labelled.clone();
        elsewhere.namespace = Some("other".to_owned());
        assert!(fired(&elsewhere).is_empty());
    }

    #[test]
    fn validating_stops_at_the_first_rule_the_budget_is_spent_on() {
        // The first rule's expression fails, which denies the review: the
        // guards of the twenty after it would each make the object's
        // variables again.
        let mut text = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: s}
spec:
  rules:
    - {name: fails, match: {resources: [pods]}, deny: [{cel: 'object.nothing == 1', message: m}]}
"
        .to_owned();
        for i in 0..20 {
            text.push_str(&format!(
                "    - {{name: r{i}, match: {{resources: [pods]}}, when: [{{cel: 'size(object.metadata.name) == 0'}}], deny: [{{message: m}}]}}\n"
            ));
        }
        let plan = crate::plan::compile(&crate::rules::load_str("t.yaml", &text)).unwrap();
        let request = fixture("create-pod.json");
        crate::cel::VALUES_MADE.set(0);
        let verdict = evaluate(&plan, &request, Mode::Validate, None).unwrap();
        assert!(!verdict.allowed);
        let one_rule = crate::cel::VALUES_MADE.get();
        assert!(one_rule > 0);
        // Without the first rule, all twenty run.
        let rest = text.replacen("object.nothing == 1", "false", 1);
        let plan = crate::plan::compile(&crate::rules::load_str("t.yaml", &rest)).unwrap();
        crate::cel::VALUES_MADE.set(0);
        assert!(
            evaluate(&plan, &request, Mode::Validate, None)
                .unwrap()
                .allowed
        );
        assert!(
            crate::cel::VALUES_MADE.get() >= 20 * one_rule,
            "{} against {one_rule}",
            crate::cel::VALUES_MADE.get()
        );
    }

    #[test]
    fn a_set_included_through_another_keeps_the_middle_sets_guard() {
        // top includes middle, middle includes base: base's rule applies
        // in top only where it applies in middle, under middle's `when`.
        let text = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: base}
spec:
  rules:
    - {name: no-pods, match: {resources: [pods]}, deny: [{message: base}]}
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: middle}
spec:
  include: [base]
  when: [{path: $.request.namespace, notEquals: exempt}]
  rules: []
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: top}
spec:
  include: [middle]
  rules: []
";
        let plan = crate::plan::compile(&crate::rules::load_str("t.yaml", text)).unwrap();
        let fired = |request: &Request, set: &str| -> Vec<String> {
            evaluate(&plan, request, Mode::Validate, plan.rule_set_id(set))
                .unwrap()
                .findings
                .iter()
                .map(|f| format!("{}/{}", f.rule_set, f.rule))
                .collect()
        };
        let request = fixture("create-pod.json");
        assert_eq!(fired(&request, "top"), vec!["top/no-pods"]);
        assert_eq!(fired(&request, "middle"), vec!["middle/no-pods"]);
        let mut exempt = request.clone();
        exempt.namespace = Some("exempt".to_owned());
        assert_eq!(fired(&exempt, "middle"), Vec::<String>::new());
        assert_eq!(fired(&exempt, "top"), Vec::<String>::new());
        assert_eq!(fired(&exempt, "base"), vec!["base/no-pods"]);
    }

    #[test]
    fn cel_inside_a_for_each_reads_the_review_s_documents() {
        // `request`, `object` and `oldObject` are the review's in CEL
        // inside a forEach too: the fields it reads must be built and
        // parsed, or every review fails the expression and is denied.
        for (condition, denied) in [
            (
                "request.operation == 'CREATE' && request.userInfo.username != ''",
                true,
            ),
            ("request.operation == 'UPDATE'", false),
            (
                "object.metadata.name == 'pod1' && element.name == 'pod1'",
                true,
            ),
            ("oldObject == null && c.name == 'pod1'", true),
        ] {
            let plan = plan(&format!(
                "    - name: r
      match: {{resources: [pods]}}
      deny:
        - forEach: $.podSpec.containers[*]
          as: c
          deny:
            - {{cel: \"{condition}\", message: m}}
"
            ));
            assert_eq!(plan.warnings().len(), 0, "{condition}: {}", plan.warnings());
            let verdict =
                evaluate(&plan, &fixture("create-pod.json"), Mode::Validate, None).unwrap();
            assert_eq!(
                !verdict.allowed, denied,
                "{condition}: {:?}",
                verdict.denial
            );
            if denied {
                assert_eq!(
                    verdict.findings.len(),
                    1,
                    "{condition}: {:?}",
                    verdict.denial
                );
            }
        }
    }

    #[test]
    fn copies_that_double_the_object_stop_at_the_size_limit() {
        // A copy of a parent of the target through a path the compiler
        // cannot place (a descendant segment): each pass doubles metadata.
        let copy = |name: &str| {
            format!(
                "    - name: {name}
      match: {{resources: [pods]}}
      mutate:
        - set: {{path: $.object.metadata.annotations.{name}, valueFrom: {{path: \"$.object..metadata\"}}}}
"
            )
        };
        let plan = plan(&["a", "b", "c", "d"].map(copy).concat());
        let verdict = evaluate(&plan, &fixture("create-pod.json"), Mode::Mutate, None).unwrap();
        assert_denied_over_budget(&verdict, "mutation_bytes", "--max-mutation-bytes");
    }

    #[test]
    fn thousands_of_violations_make_one_bounded_message() {
        let plan = plan(
            "    - name: tags
      match: {resources: [pods]}
      deny:
        - forEach: \"$.podSpec.containers[*]\"
          deny:
            - path: $.image
              matches: ':1$'
              message: 'container {{ $.name }} is on tag 1'
      action: Deny
    - name: tags-warn
      match: {resources: [pods]}
      action: Warn
      deny:
        - forEach: \"$.podSpec.containers[*]\"
          deny:
            - path: $.image
              matches: ':1$'
              message: 'container {{ $.name }} is on tag 1'
",
        );
        let verdict = evaluate(&plan, &pod_with_containers(5_000), Mode::Validate, None).unwrap();
        let message = &verdict.denial.as_ref().expect("denied").message;
        assert!(message.ends_with("… and 4980 more violations"), "{message}");
        assert_eq!(message.matches("is on tag 1").count(), MAX_DENIAL_MESSAGES);
        assert_eq!(verdict.warnings.len(), MAX_WARNINGS + 1);
        assert_eq!(
            verdict.warnings.last().map(String::as_str),
            Some("… and 4970 more warnings")
        );
        // Each rule keeps the first messages and counts the rest, never
        // rendering 5,000 of them.
        for finding in &verdict.findings {
            assert_eq!(finding.messages.len(), MAX_FINDING_MESSAGES);
            assert_eq!(finding.more_messages, 5_000 - MAX_FINDING_MESSAGES);
            assert_eq!(
                finding.listed_messages().last().map(String::as_str),
                Some("… and 4900 more violations")
            );
        }
        assert_eq!(verdict.findings.len(), 2);
    }

    #[test]
    fn non_converging_mutations_are_an_error_naming_the_rules() {
        // Limited to a namespace, so compiling cannot be sure the two meet
        // (unconditional pairs are compile errors, see plan::conflicts):
        // the per-request check finds it.
        let plan = plan(
            "    - name: one
      match: {resources: [pods]}
      mutate: [{set: {path: $.object.metadata.labels.x, value: a}}]
    - name: two
      match: {resources: [pods], namespaces: ['*']}
      mutate: [{set: {path: $.object.metadata.labels.x, value: b}}]
",
        );
        let error = evaluate(&plan, &fixture("create-pod.json"), Mode::Mutate, None).unwrap_err();
        assert!(matches!(error, EvalError::NotConverged { .. }));
        assert!(error.to_string().contains("t/one, t/two"), "{error}");
    }

    #[test]
    fn a_chain_of_copies_within_one_rule_settles() {
        // Each copy reads what the next entry writes: three passes to
        // settle and one to confirm, more than the rules (one) plus one.
        let plan = plan(
            "    - name: chain
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.c, valueFrom: {path: $.object.metadata.labels.b}}
        - setIfAbsent: {path: $.object.metadata.labels.b, valueFrom: {path: $.object.metadata.labels.a}}
        - setIfAbsent: {path: $.object.metadata.labels.a, value: x}
",
        );
        let request = fixture("create-pod.json");
        let verdict = evaluate(&plan, &request, Mode::Mutate, None).expect("settles");
        let labels = &apply_patch(&request, &verdict)["metadata"]["labels"];
        for label in ["a", "b", "c"] {
            assert_eq!(labels[label], "x", "{labels}");
        }
    }

    #[test]
    fn writes_through_a_filter_or_slice_create_what_follows_it() {
        let plan = plan(
            "    - name: through-filters
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: \"$.podSpec.containers[?@.name == 'app'].securityContext.allowPrivilegeEscalation\", value: false}
        - injectIfMissing: {path: \"$.podSpec.containers[?@.name == 'app'].env\", key: name, value: {name: LOG_LEVEL, value: info}}
        - setIfAbsent: {path: \"$.podSpec.containers[1:].securityContext.runAsNonRoot\", value: true}
",
        );
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "app"}, {"name": "side"}]}}),
        );
        let verdict = evaluate(&plan, &request, Mode::Mutate, None).expect("settles");
        let object = apply_patch(&request, &verdict);
        let containers = &object["spec"]["containers"];
        assert_eq!(
            containers[0]["securityContext"],
            json!({"allowPrivilegeEscalation": false})
        );
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "LOG_LEVEL", "value": "info"}])
        );
        assert_eq!(
            containers[1]["securityContext"],
            json!({"runAsNonRoot": true})
        );
        assert!(containers[1].get("env").is_none(), "{object}");
    }

    #[test]
    fn a_null_is_not_copied() {
        let plan = plan(
            "    - name: owner
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.owner, valueFrom: {path: $.object.metadata.annotations.owner}}
        - set: {path: $.object.metadata.labels.team, valueFrom: {path: $.object.metadata.annotations.team}}
",
        );
        let request = with_object(
            fixture("create-pod.json"),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "labels": {"team": "a"},
                                "annotations": {"owner": null, "team": null}},
                   "spec": {"containers": [{"name": "app"}]}}),
        );
        let verdict = evaluate(&plan, &request, Mode::Mutate, None).expect("settles");
        assert!(verdict.patch.is_none(), "{:?}", verdict.patch);
    }

    #[test]
    fn matching_by_namespace_user_and_subresource() {
        let plan = plan(
            "    - name: status-only
      match: {resources: [pods/status], excludeUsers: ['system:node:*']}
      deny: [{message: status}]
    - name: scale
      match: {resources: ['*/scale'], namespaces: [default]}
      deny: [{message: scale}]
    - name: not-kube
      match: {resources: [pods], excludeNamespaces: [kube-*, wide]}
      deny: [{message: pods}]
",
        );
        let denied = |name: &str| -> Vec<String> {
            evaluate(&plan, &fixture(name), Mode::Validate, None)
                .unwrap()
                .findings
                .iter()
                .map(|f| f.rule.to_string())
                .collect()
        };
        assert_eq!(denied("update-pod-status.json"), vec!["status-only"]);
        assert_eq!(denied("update-deployment-scale.json"), vec!["scale"]);
        assert_eq!(denied("create-pod.json"), vec!["not-kube"]);
        assert!(denied("update-pod-ephemeralcontainers.json").is_empty());
        let id = plan.rule_set_id("t");
        assert!(id.is_some());
        let request = fixture("update-pod-ephemeralcontainers.json");
        let explanations = select(&plan, &request, Ask::new(Mode::Validate).explaining())
            .evaluate(&request)
            .unwrap()
            .explanations;
        assert_eq!(explanations.len(), 3);
        assert_eq!(explanations[2].result, "skipped: resource not matched");
    }

    #[test]
    fn image_parts_and_quantities() {
        let plan = plan(
            "    - name: images
      match: {resources: [pods]}
      deny:
        - forEach: $.podSpec.containers[*]
          deny:
            - {path: $.image, image: tag, in: [latest], message: 'latest {{ $.image }}'}
            - {path: $.image, image: tag, absent: true, message: 'untagged {{ $.image }}'}
            - {path: $.image, image: registry, notIn: [registry.example], message: 'registry {{ $.image }}'}
            - {path: $.resources.limits.memory, greaterThan: 1Gi, message: 'memory {{ $.resources.limits.memory }}'}
",
        );
        let messages = pod_messages(&plan, |object| {
            object["spec"]["containers"][0]["image"] = json!("nginx");
            object["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1025Mi"}});
        });
        assert_eq!(
            messages,
            vec!["untagged nginx", "registry nginx", "memory 1025Mi"]
        );
    }

    /// The messages of the first finding when `plan` validates the recorded
    /// Pod CREATE with its object changed by `edit`; none when allowed.
    fn pod_messages(plan: &Plan, edit: impl FnOnce(&mut Value)) -> Vec<String> {
        let request = fixture("create-pod.json");
        let mut object: Value = request.object.as_ref().unwrap().to_value().unwrap();
        edit(&mut object);
        let verdict = evaluate(plan, &with_object(request, object), Mode::Validate, None).unwrap();
        verdict
            .findings
            .first()
            .map(|finding| finding.messages.clone())
            .unwrap_or_default()
    }

    #[test]
    fn image_parts_are_right_for_every_container_past_the_parsed_references_kept() {
        // Each container's image is tested three times; a document keeps
        // the first eight references it parses. Twenty containers, with
        // the unpinned and the invalid ones past the eighth, and repeated
        // texts in between.
        let plan = plan(
            "    - name: images
      match: {resources: [pods]}
      deny:
        - forEach: $.podSpec.containers[*]
          deny:
            - {path: $.image, image: tag, in: [latest], message: 'latest {{ $.name }}'}
            - {path: $.image, image: registry, notIn: [registry.example], message: 'registry {{ $.name }}'}
            - {path: $.image, image: repository, equals: library/nginx, message: 'nginx {{ $.name }}'}
",
        );
        let image = |i: usize| match i {
            12 => "registry.example/app:latest".to_owned(),
            15 => "registry.example/App:v1".to_owned(),
            17 => "nginx:1.27".to_owned(),
            i if i % 2 == 0 => format!("registry.example/app{i}:v1"),
            _ => "registry.example/shared:v1".to_owned(),
        };
        let messages = pod_messages(&plan, |object| {
            object["spec"]["containers"] = (0..20)
                .map(|i| json!({"name": format!("c{i}"), "image": image(i)}))
                .collect();
        });
        assert_eq!(
            messages,
            vec!["latest c12", "registry c15", "registry c17", "nginx c17"]
        );
    }

    #[test]
    fn image_parts_of_map_entries_are_each_entrys_own() {
        // Entries are built afresh for each key, so a later entry's text
        // may sit where an earlier one's was: parts must follow the text.
        let plan = plan(
            "    - name: images
      match: {resources: [pods]}
      deny:
        - forEach: $.object.metadata.annotations
          entries: true
          deny:
            - {path: $.value, image: tag, in: [latest], message: '{{ $.key }}'}
",
        );
        let annotations: serde_json::Map<String, Value> = (0..40)
            .map(|i| {
                let tag = if i % 3 == 0 { "latest" } else { "v1.0.0" };
                (
                    format!("k{i:02}"),
                    json!(format!("registry.example/a{}:{tag}", i % 10)),
                )
            })
            .collect();
        let verdict = evaluate(
            &plan,
            &pod_with_annotations(Value::Object(annotations)),
            Mode::Validate,
            None,
        )
        .unwrap();
        let expected: Vec<String> = (0..40)
            .filter(|i| i % 3 == 0)
            .map(|i| format!("k{i:02}"))
            .collect();
        assert_eq!(verdict.findings[0].messages, expected);
    }

    #[test]
    fn an_invalid_image_reference_fails_an_allow_list_closed() {
        let plan = plan(
            "    - name: images
      match: {resources: [pods]}
      deny:
        - forEach: $.podSpec.containers[*]
          deny:
            - {path: $.image, image: registry, notIn: [registry.example], message: 'registry {{ $.image }}'}
            - {path: $.image, image: registry, in: [evil.example], message: 'evil {{ $.image }}'}
            - {path: $.image, image: digest, equals: '', message: 'invalid {{ $.image }}'}
            - {path: $.image, image: tag, notMatches: '^v', message: 'unversioned {{ $.image }}'}
",
        );
        let messages: Vec<Vec<String>> = [
            "registry.example/app@sha256:ABC",
            "EVIL.example:443/app:v1",
            "registry.example/app:v1",
        ]
        .into_iter()
        .map(|image| {
            pod_messages(&plan, |object| {
                object["spec"]["containers"][0]["image"] = json!(image);
            })
        })
        .collect();
        assert_eq!(
            messages,
            vec![
                vec![
                    "registry registry.example/app@sha256:ABC",
                    "invalid registry.example/app@sha256:ABC",
                    "unversioned registry.example/app@sha256:ABC"
                ],
                vec![
                    "registry EVIL.example:443/app:v1",
                    "evil EVIL.example:443/app:v1"
                ],
                vec![],
            ]
        );
    }
}
