//! Evaluating compiled conditions.
//!
//! The semantics, pinned: equality is JSON-typed (`"true"` is not `true`;
//! numbers compare by value, so `1` equals `1.0`); a test on a path that
//! selects several values holds when any value satisfies it and is false when
//! the path selects nothing; `exists` / `absent` mean at least one / no value
//! selected; list tests treat an absent list as empty (so `subsetOf` holds and
//! `contains` does not).

use serde_json::Value;

use super::budget::{Budget, COPY_BYTES_PER_STEP};
use super::document::Frame;
use crate::cel::{Failure, Variable};
use crate::plan::{
    CelCheck, Comparison, ListOperand, MatchConditionOf, Operand, Pattern, Predicate,
    QuantityOperand, Root, SCANNED_VALUES, Test, ValueIndex, ValueList,
};
use crate::quantity::Quantity;
use crate::rules::ImagePart;

/// A selected value, or one part of an image reference held in one.
#[derive(Debug, Clone, Copy)]
enum Subject<'a> {
    Json(&'a Value),
    Str(&'a str),
}

/// Bytes of a quantity's text that count as one step when it is parsed
/// (parsing takes about as long per byte as a step per selected value).
pub const QUANTITY_BYTES_PER_STEP: usize = 1;

/// What an image reference that no runtime would pull yields for every part.
/// No valid reference has an empty part, so `equals: ""` selects exactly the
/// invalid ones, and negative tests (`notIn`, `notMatches`, ...) hold for
/// them: an allow list fails closed.
const INVALID_IMAGE_PART: &str = "";

impl<'a> Subject<'a> {
    fn as_str(self) -> Option<&'a str> {
        match self {
            Subject::Json(Value::String(text)) => Some(text),
            Subject::Json(_) => None,
            Subject::Str(text) => Some(text),
        }
    }

    /// Whether the subject equals `other` (as [`json_equal`] has it),
    /// charging `budget` what comparing them costs beyond one pair of short
    /// values (see [`equal_charged`]); `None` once the budget is spent.
    fn equals(self, other: &Value, budget: &Budget) -> Option<bool> {
        match self {
            Subject::Json(value) => equal_charged(value, other, budget),
            Subject::Str(text) => match other {
                Value::String(other) => strings_equal(text, other, budget),
                _ => Some(false),
            },
        }
    }

    fn quantity(self) -> Option<Quantity> {
        match self {
            Subject::Json(value) => Quantity::from_json(value),
            Subject::Str(text) => Quantity::parse(text),
        }
    }
}

/// JSON equality with numbers compared by value.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| json_equal(a, b)))
        }
        _ => a == b,
    }
}

/// [`json_equal`], charging `budget` a step for each value compared below
/// `a` and `b` (each map key and each string counted a step per
/// [`COPY_BYTES_PER_STEP`] bytes compared): comparing two scalars is free,
/// as selecting them was charged, while comparing a large map with itself
/// at each of many `forEach` elements held a worker for minutes. `None`,
/// and no more comparing, once the budget is spent.
fn equal_charged(a: &Value, b: &Value, budget: &Budget) -> Option<bool> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => strings_equal(x, y, budget),
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            charge(budget, x.len())?;
            for (a, b) in x.iter().zip(y) {
                if !equal_charged(a, b, budget)? {
                    return Some(false);
                }
            }
            Some(true)
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            charge(budget, x.len())?;
            for (key, a) in x {
                charge(budget, key.len() / COPY_BYTES_PER_STEP as usize)?;
                match y.get(key) {
                    Some(b) if equal_charged(a, b, budget)? => {}
                    _ => return Some(false),
                }
            }
            Some(true)
        }
        _ => Some(json_equal(a, b)),
    }
}

/// Whether two strings are equal, charging `budget` a step per
/// [`COPY_BYTES_PER_STEP`] bytes compared (strings of different lengths
/// are told apart without comparing a byte); `None` once it is spent.
fn strings_equal(a: &str, b: &str, budget: &Budget) -> Option<bool> {
    if a.len() != b.len() {
        return Some(false);
    }
    charge(budget, a.len() / COPY_BYTES_PER_STEP as usize)?;
    Some(a == b)
}

/// Whether `text` starts with `prefix`, charged as [`strings_equal`].
fn starts_with_charged(text: &str, prefix: &str, budget: &Budget) -> Option<bool> {
    if text.len() < prefix.len() {
        return Some(false);
    }
    charge(budget, prefix.len() / COPY_BYTES_PER_STEP as usize)?;
    Some(text.starts_with(prefix))
}

/// Charges `steps`; `None` once the budget is spent.
fn charge(budget: &Budget, steps: usize) -> Option<()> {
    budget
        .charge(u64::try_from(steps).unwrap_or(u64::MAX))
        .then_some(())
}

/// True when `predicate` holds in `frame`.
pub fn holds(predicate: &Predicate, frame: Frame<'_, '_>) -> bool {
    match predicate {
        Predicate::Any(list) => list.iter().any(|p| holds(p, frame)),
        Predicate::All(list) => list.iter().all(|p| holds(p, frame)),
        Predicate::Not(inner) => !holds(inner, frame),
        Predicate::Cel(check) => {
            match check.expression.holds(
                |variable| variable_value(variable, frame),
                frame.document.budget(),
            ) {
                Ok(holds) => holds,
                Err(failure) => {
                    fail(check, failure, frame);
                    false
                }
            }
        }
        Predicate::Test { path, image, test } => {
            // Most paths name one place: no list of values to build.
            let (one, many);
            let values: &[&Value] = if path.is_singular() {
                one = frame.select_one(path);
                one.as_slice()
            } else {
                many = frame.select(path);
                &many
            };
            match (image, values) {
                (None, []) => test_holds(test, &[], frame),
                (None, [value]) => test_holds(test, &[Subject::Json(value)], frame),
                (None, values) => {
                    let subjects: Vec<Subject<'_>> =
                        values.iter().copied().map(Subject::Json).collect();
                    test_holds(test, &subjects, frame)
                }
                (Some(part), [value]) => image_part(value, *part, frame, |part| {
                    let subject = part.map(Subject::Str);
                    test_holds(test, subject.as_slice(), frame)
                }),
                (Some(part), values) => {
                    // Parts are normalised copies; keep them alive while the
                    // test borrows them.
                    let parts: Vec<Option<String>> = values
                        .iter()
                        .map(|value| {
                            image_part(value, *part, frame, |part| part.map(str::to_owned))
                        })
                        .collect();
                    let subjects: Vec<Subject<'_>> = parts
                        .iter()
                        .flatten()
                        .map(|text| Subject::Str(text))
                        .collect();
                    test_holds(test, &subjects, frame)
                }
            }
        }
    }
}

/// The place of the first of a rule's set guards that does not hold in
/// `frame`. The `matchConditions` of each set are evaluated together, as
/// the API server evaluates a webhook's ([`MatchConditionOf`]): the guard
/// fails at the first that is false, whatever failed before it; otherwise at
/// the first that failed, a failure recorded (the review denied) under
/// `failurePolicy: Fail` and not under `Ignore`, where it only skips.
pub fn first_failing_guard(guards: &[Predicate], frame: Frame<'_, '_>) -> Option<usize> {
    let mut i = 0;
    while let Some(predicate) = guards.get(i) {
        let Some(of) = match_condition_of(predicate) else {
            if !holds(predicate, frame) {
                return Some(i);
            }
            i += 1;
            continue;
        };
        let run = guards[i..]
            .iter()
            .take_while(|predicate| match_condition_of(predicate) == Some(of))
            .count();
        if let Some(at) = failing_match_condition(&guards[i..i + run], of, frame) {
            return Some(i + at);
        }
        i += run;
    }
    None
}

fn match_condition_of(predicate: &Predicate) -> Option<MatchConditionOf> {
    match predicate {
        Predicate::Cel(check) => check.match_condition,
        _ => None,
    }
}

/// The place among one set's `conditions` at which they stop the rule, as
/// [`first_failing_guard`] says.
fn failing_match_condition(
    conditions: &[Predicate],
    of: MatchConditionOf,
    frame: Frame<'_, '_>,
) -> Option<usize> {
    let mut failed = None;
    for (i, predicate) in conditions.iter().enumerate() {
        let Predicate::Cel(check) = predicate else {
            continue;
        };
        match check.expression.holds(
            |variable| variable_value(variable, frame),
            frame.document.budget(),
        ) {
            Ok(true) => {}
            Ok(false) => return Some(i),
            Err(failure) => {
                failed.get_or_insert((i, check, failure));
            }
        }
    }
    let (i, check, failure) = failed?;
    if of.fail {
        fail(check, failure, frame);
    }
    Some(i)
}

/// The value of a CEL variable in `frame`.
fn variable_value<'a>(variable: Variable, frame: Frame<'_, 'a>) -> Option<&'a Value> {
    match variable {
        Variable::Object => frame.root(Root::Object),
        Variable::OldObject => frame.root(Root::OldObject),
        Variable::Request => frame.root(Root::Request),
        Variable::Element => frame.root(Root::Element),
        Variable::Binding(depth) => frame.root(Root::Binding(depth)),
    }
}

/// Records a failed expression on the review's budget (a spent budget is
/// recorded there already).
fn fail(check: &CelCheck, failure: Failure, frame: Frame<'_, '_>) {
    if let Failure::Error(message) = failure {
        frame.document.budget().fail(format!(
            "the CEL expression at {} failed: {message}",
            check.at
        ));
    }
}

/// The message a `messageExpression` yields: `None` when it yields no
/// string, so the entry's `message` is used.
pub fn message(check: &CelCheck, frame: Frame<'_, '_>) -> Option<String> {
    match check.expression.evaluate(
        |variable| variable_value(variable, frame),
        frame.document.budget(),
    ) {
        // Cut as a template's message is (see `Template::render`).
        Ok(::cel::Value::String(text)) => {
            Some(crate::excerpt::cut(&text, crate::excerpt::MAX_MESSAGE_BYTES).into_owned())
        }
        Ok(_) | Err(Failure::Error(_)) => None,
        Err(Failure::OverBudget) => None,
    }
}

/// Calls `f` with one part of the image reference in `value`: `None` when
/// the reference has no such part (no tag, no digest),
/// [`INVALID_IMAGE_PART`] when the value is not a reference a runtime would
/// pull (including a non-string). The reference is parsed once per
/// document (`Document::with_image`).
fn image_part<R>(
    value: &Value,
    part: ImagePart,
    frame: Frame<'_, '_>,
    f: impl FnOnce(Option<&str>) -> R,
) -> R {
    let Some(text) = value.as_str() else {
        return f(Some(INVALID_IMAGE_PART));
    };
    frame.document.with_image(text, |image| match image {
        Some(parts) => f(parts.part(part)),
        None => f(Some(INVALID_IMAGE_PART)),
    })
}

fn operand_value<'a>(operand: &'a Operand, frame: Frame<'_, 'a>) -> Option<&'a Value> {
    match operand {
        Operand::Value(value) => Some(value),
        Operand::Path(path) => frame.first(path),
    }
}

/// The elements of a list-valued subject; a scalar is a list of itself.
fn elements<'a>(subject: Subject<'a>) -> impl Iterator<Item = Subject<'a>> {
    let (list, scalar): (&'a [Value], _) = match subject {
        Subject::Json(Value::Array(list)) => (list, None),
        other => (&[], Some(other)),
    };
    list.iter().map(Subject::Json).chain(scalar)
}

/// The values a list operand holds (`subsetOf`, `containsAny`), ready to
/// be looked up.
enum Needles<'a> {
    /// A literal list, indexed when the plan was compiled.
    Literal(&'a ValueList),
    /// The list at a path, indexed for this evaluation as a literal one is.
    Selected(&'a [Value], ValueIndex<&'a str>),
}

impl<'a> Needles<'a> {
    /// The list `operand` names (an absent list is empty; a scalar a list
    /// of itself); a list from a path is charged a step per value in it,
    /// as it is indexed again at every `forEach` element. `None` once the
    /// budget is spent.
    fn of(operand: &'a ListOperand, frame: Frame<'_, 'a>) -> Option<Needles<'a>> {
        let path = match operand {
            ListOperand::List(list) => return Some(Needles::Literal(list)),
            ListOperand::Path(path) => path,
        };
        let values: &'a [Value] = match frame.first(path) {
            Some(Value::Array(list)) => list,
            Some(Value::Null) | None => &[],
            Some(other) => std::slice::from_ref(other),
        };
        charge(frame.document.budget(), values.len())?;
        Some(Needles::Selected(
            values,
            ValueIndex::new(values, |text| text),
        ))
    }

    /// Whether `subject` is one of the values, charged as [`one_of`] has
    /// it; `None`, without comparing, once the budget is spent.
    fn contain(&self, subject: Subject<'_>, budget: &Budget) -> Option<bool> {
        match self {
            Needles::Literal(list) => one_of(subject, list, budget),
            Needles::Selected(values, index) => look_up(subject, values, index, budget),
        }
    }
}

/// Whether `subject` is one of the values of `list` (a string equals only
/// a string), charged to `budget`: see [`look_up`].
fn one_of(subject: Subject<'_>, list: &ValueList, budget: &Budget) -> Option<bool> {
    look_up(subject, list.values(), list.index(), budget)
}

/// Whether `subject` is one of `values`, which `index` indexes. A string
/// is compared with each of at most [`SCANNED_VALUES`] values, charged as
/// [`strings_equal`], or looked up in the hashed strings of a longer list,
/// charged a step and a step per [`COPY_BYTES_PER_STEP`] bytes hashed; any
/// other value is charged what comparing it with each value other than a
/// string may cost before it is compared. `None`, without comparing, once
/// the budget is spent.
fn look_up<S: std::hash::Hash + Eq + std::borrow::Borrow<str>>(
    subject: Subject<'_>,
    values: &[Value],
    index: &ValueIndex<S>,
    budget: &Budget,
) -> Option<bool> {
    if let Some(text) = subject.as_str() {
        if let Some(found) = index.has_string(text) {
            charge(budget, 1 + text.len() / COPY_BYTES_PER_STEP as usize)?;
            return Some(found);
        }
        for value in values {
            if subject.equals(value, budget)? {
                return Some(true);
            }
        }
        return Some(false);
    }
    if !budget.charge(index.others_steps().saturating_add(1)) {
        return None;
    }
    Some(
        index
            .others(values)
            .any(|other| json_equal_subject(subject, other)),
    )
}

/// [`json_equal`] of a subject that is not a string: uncharged, for
/// callers that charged the comparison's bound already.
fn json_equal_subject(subject: Subject<'_>, other: &Value) -> bool {
    match subject {
        Subject::Json(value) => json_equal(value, other),
        Subject::Str(text) => other.as_str() == Some(text),
    }
}

/// The quantity `value` holds (a string is parsed, a number converted),
/// charging parsing a string a step per [`QUANTITY_BYTES_PER_STEP`] bytes:
/// a value from a path is parsed again at every `forEach` element, and a
/// request may hold a string of a million digits. `None` when it holds
/// none, or without parsing once the budget is spent.
fn charged_quantity(subject: Subject<'_>, frame: Frame<'_, '_>) -> Option<Quantity> {
    let bytes = subject.as_str().map_or(0, str::len);
    let steps = u64::try_from(bytes / QUANTITY_BYTES_PER_STEP).unwrap_or(u64::MAX);
    if steps > 0 && !frame.document.budget().charge(steps) {
        return None;
    }
    subject.quantity()
}

/// Whether `text` matches `pattern`, charged to the review's budget;
/// `None`, without matching, once the budget is spent.
fn charged_match(pattern: &Pattern, text: &str, frame: Frame<'_, '_>) -> Option<bool> {
    let budget = frame.document.budget();
    pattern
        .is_match_charged(text, |steps| budget.charge(steps).then_some(()).ok_or(()))
        .ok()
}

/// Whether `text` starts with one of `prefixes`, charged a step per prefix
/// past [`SCANNED_VALUES`] and as [`starts_with_charged`] for each; `None`
/// once the budget is spent.
fn starts_with_any(text: &str, prefixes: &[String], budget: &Budget) -> Option<bool> {
    if prefixes.len() > SCANNED_VALUES {
        charge(budget, prefixes.len())?;
    }
    for prefix in prefixes {
        if starts_with_charged(text, prefix, budget)? {
            return Some(true);
        }
    }
    Some(false)
}

fn test_holds(test: &Test, subjects: &[Subject<'_>], frame: Frame<'_, '_>) -> bool {
    let budget = frame.document.budget();
    let any = |f: &dyn Fn(Subject<'_>) -> bool| subjects.iter().any(|s| f(*s));
    match test {
        Test::Exists => !subjects.is_empty(),
        Test::Absent => subjects.is_empty(),
        // Once the budget is spent no comparison runs, and the review is
        // denied.
        Test::Equals(operand) => match operand_value(operand, frame) {
            Some(expected) => any(&|s| s.equals(expected, budget) == Some(true)),
            None => false,
        },
        Test::NotEquals(operand) => match operand_value(operand, frame) {
            Some(expected) => any(&|s| s.equals(expected, budget) == Some(false)),
            // Any value differs from a value that is not there.
            None => !subjects.is_empty(),
        },
        Test::In(list) => any(&|s| one_of(s, list, budget) == Some(true)),
        Test::NotIn(list) => any(&|s| one_of(s, list, budget) == Some(false)),
        // Once the budget is spent no match runs, and the review is denied.
        Test::Matches(pattern) => {
            any(&|s| s.as_str().and_then(|t| charged_match(pattern, t, frame)) == Some(true))
        }
        Test::NotMatches(pattern) => {
            any(&|s| s.as_str().and_then(|t| charged_match(pattern, t, frame)) == Some(false))
        }
        Test::StartsWith(prefixes) => any(&|s| {
            s.as_str()
                .and_then(|t| starts_with_any(t, prefixes, budget))
                == Some(true)
        }),
        Test::NotStartsWith(prefixes) => any(&|s| {
            s.as_str()
                .and_then(|t| starts_with_any(t, prefixes, budget))
                == Some(false)
        }),
        Test::Compare(comparison, operand) => {
            let limit = match operand {
                QuantityOperand::Value(q) => Some(*q),
                QuantityOperand::Path(path) => frame
                    .first(path)
                    .and_then(|limit| charged_quantity(Subject::Json(limit), frame)),
            };
            let Some(limit) = limit else { return false };
            any(&|s| {
                charged_quantity(s, frame).is_some_and(|q| match comparison {
                    Comparison::Greater => q > limit,
                    Comparison::GreaterOrEqual => q >= limit,
                    Comparison::Less => q < limit,
                    Comparison::LessOrEqual => q <= limit,
                })
            })
        }
        // Each element of a list is charged: none of them was selected.
        Test::Contains(operand) => match operand_value(operand, frame) {
            Some(needle) => any(&|s| {
                elements(s)
                    .map(|e| charge(budget, 1).and_then(|()| e.equals(needle, budget)))
                    .find(|found| *found != Some(false))
                    == Some(Some(true))
            }),
            None => false,
        },
        // Once the budget is spent no comparison runs, and the review is
        // denied.
        Test::ContainsAny(operand) => {
            let Some(needles) = Needles::of(operand, frame) else {
                return false;
            };
            // The first element found, or the first the budget stopped.
            any(&|s| {
                elements(s)
                    .map(|e| needles.contain(e, budget))
                    .find(|found| *found != Some(false))
                    == Some(Some(true))
            })
        }
        Test::SubsetOf(operand) => {
            let Some(allowed) = Needles::of(operand, frame) else {
                return false;
            };
            subjects.is_empty()
                || any(&|s| elements(s).all(|e| allowed.contain(e, budget) == Some(true)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::budget::{Budget, DEFAULT_MAX_STEPS, Exceeded, Limits};
    use crate::eval::document::{Document, RequestValue};
    use crate::plan::{JsonPath, PathScope, RequestFields};
    use serde_json::json;

    fn request() -> crate::review::Request {
        let path = format!(
            "{}/tests/fixtures/admission-reviews/create-pod.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let body = std::fs::read(&path).expect("the fixture reads");
        crate::review::decode(&body).expect("decodes").request
    }

    /// Runs `f` on the documents of a review of `object`, with the
    /// default budget; gives what it gave and the budget.
    fn on_object(object: &Value, f: impl FnOnce(&Document<'_>) -> bool) -> (bool, Budget) {
        let request = request();
        let request_value = RequestValue::new(&request, RequestFields::default());
        let budget = Budget::new(Limits::DEFAULT);
        let holds = {
            let document = Document::new(&request_value, object, &Value::Null, &budget);
            f(&document)
        };
        (holds, budget)
    }

    fn path(text: &str, in_for_each: bool) -> JsonPath {
        let scope = PathScope {
            in_for_each,
            bindings: &[],
        };
        JsonPath::compile(text, scope).expect("a valid path")
    }

    /// `$.object.a` tested with `test` on `{b: …}`.
    fn list_test(test: fn(ListOperand) -> Test, a: Value, b: Value) -> (bool, Budget) {
        test_on(test(ListOperand::Path(path("$.object.b", false))), a, b)
    }

    /// `$.object.a` tested with `test` on `{a: …, b: …}`.
    fn test_on(test: Test, a: Value, b: Value) -> (bool, Budget) {
        let predicate = Predicate::Test {
            path: path("$.object.a", false),
            image: None,
            test,
        };
        let object = json!({"a": a, "b": b});
        on_object(&object, |document| holds(&predicate, Frame::top(document)))
    }

    #[test]
    fn operands_either_side_of_the_scanned_length_give_the_same_answers() {
        // At SCANNED_VALUES values the strings are compared in turn; one
        // more, and they are hashed: the answers must not tell them apart.
        for length in [SCANNED_VALUES, SCANNED_VALUES + 1] {
            let mut operand: Vec<Value> = (1..length).map(|i| json!(format!("s{i}"))).collect();
            operand.push(json!(7));
            let last = format!("s{}", length - 1);
            for (test, a, expected) in [
                (
                    Test::SubsetOf as fn(ListOperand) -> Test,
                    json!(["s1", last, 7]),
                    true,
                ),
                (Test::SubsetOf, json!(["s1", "absent"]), false),
                (Test::SubsetOf, json!(["7"]), false),
                (Test::ContainsAny, json!(["absent", last]), true),
                (Test::ContainsAny, json!(["absent", 8]), false),
            ] {
                let (holds, _) = list_test(test, a.clone(), json!(operand));
                assert_eq!(holds, expected, "{length} values, {a}");
                let literal = ListOperand::List(ValueList::new(operand.clone()));
                let (holds, _) = test_on(test(literal), a.clone(), Value::Null);
                assert_eq!(holds, expected, "{length} literal values, {a}");
            }
        }
    }

    #[test]
    fn list_against_list_tests_compare_as_json_and_pay_for_the_pairs() {
        for (test, a, b, expected) in [
            (
                Test::SubsetOf as fn(ListOperand) -> Test,
                json!([1, "x"]),
                json!(["x", 1.0]),
                true,
            ),
            (Test::SubsetOf, json!([1, "1"]), json!([1]), false),
            (
                Test::SubsetOf,
                json!([{"k": [1]}]),
                json!([{"k": [1.0]}, 2]),
                true,
            ),
            (Test::SubsetOf, json!([]), json!(null), true),
            (Test::SubsetOf, json!("x"), json!("x"), true),
            (Test::ContainsAny, json!([2, "y"]), json!(["x", 1]), false),
            (Test::ContainsAny, json!([2, "x"]), json!(["x", 1]), true),
            (Test::ContainsAny, json!([true]), json!([null, true]), true),
            (Test::ContainsAny, json!(["x"]), json!(null), false),
        ] {
            let (holds, _) = list_test(test, a.clone(), b.clone());
            assert_eq!(holds, expected, "{a} against {b}");
        }

        // 40,000 strings against 40,000: hashed, a step for each.
        let n = 40_000;
        let strings: Vec<Value> = (0..n).map(|i| json!(format!("s{i}"))).collect();
        let reversed: Vec<Value> = strings.iter().rev().cloned().collect();
        let (holds, budget) = list_test(Test::SubsetOf, json!(strings), json!(reversed));
        assert!(holds);
        assert!(budget.steps() < 3 * n, "{} steps", budget.steps());
        let (holds, budget) = list_test(Test::ContainsAny, json!(strings), json!(["t"]));
        assert!(!holds);
        assert!(budget.steps() < 2 * n, "{} steps", budget.steps());

        // 40,000 numbers against 40,000 compared pairwise took 13.9 s for
        // almost no steps: each element is charged the list it is
        // compared with, and the review stops at the budget.
        let numbers: Vec<Value> = (0..n).map(Value::from).collect();
        let reversed: Vec<Value> = numbers.iter().rev().cloned().collect();
        for (test, b) in [
            (Test::SubsetOf as fn(ListOperand) -> Test, json!(reversed)),
            (Test::ContainsAny, json!(vec![-1; 40_000])),
        ] {
            let (holds, budget) = list_test(test, json!(numbers), b);
            assert!(!holds);
            assert_eq!(budget.exceeded(), Some(Exceeded::Steps(DEFAULT_MAX_STEPS)));
            // Stopped within one element's charge of the limit.
            assert!(
                budget.steps() <= DEFAULT_MAX_STEPS + n + 1,
                "{}",
                budget.steps()
            );
        }
    }

    /// Whether `predicate` holds at any of `object`'s
    /// `spec.containers`, evaluated at each in turn as a `forEach` does
    /// (stopping once the budget is spent), and the budget.
    fn at_each_container(predicate: &Predicate, object: &Value) -> (bool, Budget) {
        on_object(object, |document| {
            let mut any = false;
            for element in object["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let elements = [element];
                let frame = Frame {
                    document,
                    elements: &elements,
                };
                any |= holds(predicate, frame);
                if document.budget().exceeded().is_some() {
                    break;
                }
            }
            any
        })
    }

    /// `test` of `subject` (a path inside a `forEach`) at each of `n`
    /// containers `{name: cN}` of a pod whose annotations are
    /// `annotations`, and the budget.
    fn at_each_of(n: usize, subject: &str, test: Test, annotations: Value) -> (bool, Budget) {
        let predicate = Predicate::Test {
            path: path(subject, true),
            image: None,
            test,
        };
        let containers: Vec<Value> = (0..n).map(|i| json!({"name": format!("c{i}")})).collect();
        let object = json!({
            "metadata": {"annotations": annotations},
            "spec": {"containers": containers},
        });
        at_each_container(&predicate, &object)
    }

    fn over_budget(budget: &Budget) -> bool {
        budget.exceeded() == Some(Exceeded::Steps(DEFAULT_MAX_STEPS))
    }

    #[test]
    fn comparing_large_values_at_each_element_is_charged_for_their_size() {
        // The whole spec compared with itself at each of 80,000
        // containers held a worker past two minutes, charged nothing.
        let spec = || Test::Equals(Operand::Path(path("$$.object.spec", true)));
        let (holds, budget) = at_each_of(3_000, "$$.object.spec", spec(), json!({}));
        assert!(holds, "the first comparison is within the budget");
        assert!(over_budget(&budget), "{}", budget.steps());
        let (_, budget) = at_each_of(100, "$$.object.spec", spec(), json!({}));
        assert!(!over_budget(&budget), "{}", budget.steps());

        // Two 700 KB strings, equal but for the last byte.
        let long = "x".repeat(700_000);
        let annotations = json!({"a": format!("{long}a"), "b": format!("{long}b")});
        let other = Test::NotEquals(Operand::Path(path(
            "$$.object.metadata.annotations.b",
            true,
        )));
        let (holds, budget) = at_each_of(
            2_000,
            "$$.object.metadata.annotations.a",
            other,
            annotations,
        );
        assert!(holds);
        assert!(over_budget(&budget), "{}", budget.steps());
    }

    #[test]
    fn a_list_searched_at_each_element_is_charged_for_its_length() {
        // `contains` of the pod's own container list, at each container.
        let contains = Test::Contains(Operand::Value(json!({"name": "absent"})));
        let (holds, budget) = at_each_of(5_000, "$$.object.spec.containers", contains, json!({}));
        assert!(!holds);
        assert!(over_budget(&budget), "{}", budget.steps());

        // 20,000 prefixes, at each of 20,000 containers.
        let prefixes: Vec<String> = (0..20_000).map(|i| format!("p{i}")).collect();
        let (holds, budget) = at_each_of(20_000, "$.name", Test::StartsWith(prefixes), json!({}));
        assert!(!holds);
        assert!(over_budget(&budget), "{}", budget.steps());
        let few: Vec<String> = (0..SCANNED_VALUES).map(|i| format!("p{i}")).collect();
        let (_, budget) = at_each_of(20_000, "$.name", Test::StartsWith(few), json!({}));
        assert!(!over_budget(&budget), "{}", budget.steps());
    }

    #[test]
    fn a_long_literal_list_is_looked_up_not_scanned() {
        let n = 20_000;
        // Strings: hashed when the plan was compiled, a step a lookup.
        let strings = ValueList::new((0..n).map(|i| json!(format!("s{i}"))).collect());
        let (holds, budget) = at_each_of(n, "$.name", Test::In(strings), json!({}));
        assert!(!holds);
        assert!(budget.steps() < 5 * n as u64, "{}", budget.steps());
        let names = ValueList::new((0..n).map(|i| json!(format!("c{i}"))).collect());
        let (holds, _) = at_each_of(n, "$.name", Test::NotIn(names), json!({}));
        assert!(!holds, "every name is in the list");
        // Values other than strings are compared in turn, each charged.
        let numbers = ValueList::new((0..n).map(Value::from).collect());
        let subject = "$$.object.metadata.annotations.k";
        let (holds, budget) = at_each_of(n, subject, Test::In(numbers), json!({"k": -1}));
        assert!(!holds);
        assert!(over_budget(&budget), "{}", budget.steps());
    }

    #[test]
    fn a_quantity_from_a_path_is_charged_for_its_length_at_each_element() {
        let container = json!({"resources": {"limits": {"cpu": "1"}}});
        let compare = |limit: &str| {
            let predicate = Predicate::Test {
                path: path("$.resources.limits.cpu", true),
                image: None,
                test: Test::Compare(
                    Comparison::Greater,
                    QuantityOperand::Path(path("$$.object.metadata.annotations.max", true)),
                ),
            };
            let object = json!({
                "metadata": {"annotations": {"max": limit}},
                "spec": {"containers": vec![container.clone(); 300]},
            });
            at_each_container(&predicate, &object)
        };
        let (holds, budget) = compare("500m");
        assert!(holds);
        assert!(budget.exceeded().is_none());
        // 300 KB of digits parsed at each of 300 containers took 8.4 s
        // uncharged: a step per byte stops it after 10 MB.
        let (holds, budget) = compare(&"1".repeat(300_000));
        assert!(!holds);
        assert_eq!(budget.exceeded(), Some(Exceeded::Steps(DEFAULT_MAX_STEPS)));
        assert!(
            budget.steps() <= DEFAULT_MAX_STEPS + 300_000 + 10,
            "{}",
            budget.steps()
        );
    }
}
