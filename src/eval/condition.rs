//! Evaluating compiled conditions.
//!
//! The semantics, pinned: equality is JSON-typed (`"true"` is not `true`;
//! numbers compare by value, so `1` equals `1.0`); a test on a path that
//! selects several values holds when any value satisfies it and is false when
//! the path selects nothing; `exists` / `absent` mean at least one / no value
//! selected; list tests treat an absent list as empty (so `subsetOf` holds and
//! `contains` does not).

use std::collections::HashSet;

use serde_json::Value;

use super::document::Frame;
use crate::cel::{Converted, Failure, Variable};
use crate::plan::{CelCheck, Comparison, Operand, Pattern, Predicate, QuantityOperand, Root, Test};
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

    fn equals(self, other: &Value) -> bool {
        match self {
            Subject::Json(value) => json_equal(value, other),
            Subject::Str(text) => other.as_str() == Some(text),
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

/// True when `predicate` holds in `frame`.
pub fn holds(predicate: &Predicate, frame: Frame<'_, '_>) -> bool {
    match predicate {
        Predicate::Any(list) => list.iter().any(|p| holds(p, frame)),
        Predicate::All(list) => list.iter().all(|p| holds(p, frame)),
        Predicate::Not(inner) => !holds(inner, frame),
        Predicate::Cel(check) => {
            match check.expression.holds_converted(
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

/// The value of a CEL variable in `frame`: the documents converted once
/// per review, elements each time.
fn variable_value(variable: Variable, frame: Frame<'_, '_>) -> Option<Converted> {
    match variable {
        Variable::Object => frame.document.cel_root(Root::Object),
        Variable::OldObject => frame.document.cel_root(Root::OldObject),
        Variable::Request => frame.document.cel_root(Root::Request),
        Variable::Element => frame.root(Root::Element).map(Converted::of),
        Variable::Binding(depth) => frame.root(Root::Binding(depth)).map(Converted::of),
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
    match check.expression.evaluate_converted(
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

/// The most values a list operand may have for its strings to be looked up
/// one by one rather than through a hash set: a set of the bundled rules'
/// thirteen capabilities, built again at each evaluation, cost more than
/// the comparisons it saved (6,500 instructions a `/validate` review).
const SCANNED_STRINGS: usize = 16;

/// The strings of a list operand, ready to be looked up.
enum Strings<'a> {
    /// An operand of at most [`SCANNED_STRINGS`] values: its strings are
    /// compared in turn, so a lookup costs at most that many comparisons.
    Few(&'a [Value]),
    /// More: in a hash set, so that a list against a list of strings costs
    /// the sum of their lengths, not their product.
    Many(HashSet<&'a str>),
}

impl Strings<'_> {
    fn contains(&self, text: &str) -> bool {
        match self {
            Strings::Few(values) => values.iter().any(|value| value.as_str() == Some(text)),
            Strings::Many(many) => many.contains(text),
        }
    }
}

/// The values a list operand holds (`subsetOf`, `containsAny`), ready to
/// be looked up: strings as [`Strings`]; any other value compared
/// pairwise, each comparison charged.
struct Needles<'a> {
    strings: Strings<'a>,
    others: Vec<&'a Value>,
    /// What comparing an element with every one of `others` may cost: a
    /// step per value in them (see [`comparison_steps`]).
    others_steps: u64,
}

impl<'a> Needles<'a> {
    /// The list `operand` names (an absent list is empty; a scalar a list
    /// of itself), charged a step per value in it, as it is built again at
    /// every `forEach` element; `None` once the budget is spent.
    fn of(operand: &'a Operand, frame: Frame<'_, 'a>) -> Option<Needles<'a>> {
        let values: &'a [Value] = match operand_value(operand, frame) {
            Some(Value::Array(list)) => list,
            Some(Value::Null) | None => &[],
            Some(other) => std::slice::from_ref(other),
        };
        let budget = frame.document.budget();
        if !budget.charge(u64::try_from(values.len()).unwrap_or(u64::MAX)) {
            return None;
        }
        let mut needles = Needles {
            strings: Strings::Few(values),
            others: Vec::new(),
            others_steps: 0,
        };
        for other in values.iter().filter(|value| !value.is_string()) {
            needles.others_steps = needles.others_steps.saturating_add(comparison_steps(other));
            needles.others.push(other);
        }
        if values.len() > SCANNED_STRINGS {
            needles.strings = Strings::Many(values.iter().filter_map(Value::as_str).collect());
        }
        Some(needles)
    }

    /// Whether `subject` equals one of the values (as [`Subject::equals`]
    /// has it: a string equals only a string), charged a step, and for a
    /// value other than a string what comparing it with every other value
    /// may cost; `None`, without comparing, once the budget is spent.
    fn contain(&self, subject: Subject<'_>, frame: Frame<'_, '_>) -> Option<bool> {
        let budget = frame.document.budget();
        if let Some(text) = subject.as_str() {
            return budget.charge(1).then(|| self.strings.contains(text));
        }
        if !budget.charge(self.others_steps.saturating_add(1)) {
            return None;
        }
        Some(self.others.iter().any(|other| subject.equals(other)))
    }
}

/// An upper bound on what comparing `value` with anything costs
/// ([`json_equal`] walks no more of it): what walking it costs.
fn comparison_steps(value: &Value) -> u64 {
    super::budget::walk_steps(value, u64::MAX)
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

fn test_holds(test: &Test, subjects: &[Subject<'_>], frame: Frame<'_, '_>) -> bool {
    let any = |f: &dyn Fn(Subject<'_>) -> bool| subjects.iter().any(|s| f(*s));
    match test {
        Test::Exists => !subjects.is_empty(),
        Test::Absent => subjects.is_empty(),
        Test::Equals(operand) => match operand_value(operand, frame) {
            Some(expected) => any(&|s| s.equals(expected)),
            None => false,
        },
        Test::NotEquals(operand) => match operand_value(operand, frame) {
            Some(expected) => any(&|s| !s.equals(expected)),
            // Any value differs from a value that is not there.
            None => !subjects.is_empty(),
        },
        Test::In(list) => any(&|s| list.iter().any(|v| s.equals(v))),
        Test::NotIn(list) => any(&|s| !list.iter().any(|v| s.equals(v))),
        // Once the budget is spent no match runs, and the review is denied.
        Test::Matches(pattern) => {
            any(&|s| s.as_str().and_then(|t| charged_match(pattern, t, frame)) == Some(true))
        }
        Test::NotMatches(pattern) => {
            any(&|s| s.as_str().and_then(|t| charged_match(pattern, t, frame)) == Some(false))
        }
        Test::StartsWith(prefixes) => any(&|s| {
            s.as_str()
                .is_some_and(|t| prefixes.iter().any(|p| t.starts_with(p.as_str())))
        }),
        Test::NotStartsWith(prefixes) => any(&|s| {
            s.as_str()
                .is_some_and(|t| !prefixes.iter().any(|p| t.starts_with(p.as_str())))
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
        Test::Contains(operand) => match operand_value(operand, frame) {
            Some(needle) => any(&|s| elements(s).any(|e| e.equals(needle))),
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
                    .map(|e| needles.contain(e, frame))
                    .find(|found| *found != Some(false))
                    == Some(Some(true))
            })
        }
        Test::SubsetOf(operand) => {
            let Some(allowed) = Needles::of(operand, frame) else {
                return false;
            };
            subjects.is_empty()
                || any(&|s| elements(s).all(|e| allowed.contain(e, frame) == Some(true)))
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
    fn list_test(test: fn(Operand) -> Test, a: Value, b: Value) -> (bool, Budget) {
        let predicate = Predicate::Test {
            path: path("$.object.a", false),
            image: None,
            test: test(Operand::Path(path("$.object.b", false))),
        };
        let object = json!({"a": a, "b": b});
        on_object(&object, |document| holds(&predicate, Frame::top(document)))
    }

    #[test]
    fn operands_either_side_of_the_scanned_length_give_the_same_answers() {
        // At SCANNED_STRINGS values the strings are compared in turn; one
        // more, and they are hashed: the answers must not tell them apart.
        for length in [SCANNED_STRINGS, SCANNED_STRINGS + 1] {
            let mut operand: Vec<Value> = (1..length).map(|i| json!(format!("s{i}"))).collect();
            operand.push(json!(7));
            let last = format!("s{}", length - 1);
            for (test, a, expected) in [
                (
                    Test::SubsetOf as fn(Operand) -> Test,
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
            }
        }
    }

    #[test]
    fn list_against_list_tests_compare_as_json_and_pay_for_the_pairs() {
        for (test, a, b, expected) in [
            (
                Test::SubsetOf as fn(Operand) -> Test,
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
            (Test::SubsetOf as fn(Operand) -> Test, json!(reversed)),
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
            on_object(&object, |document| {
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
                    any |= holds(&predicate, frame);
                    if document.budget().exceeded().is_some() {
                        break;
                    }
                }
                any
            })
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
