//! Evaluating compiled conditions.
//!
//! The semantics, pinned: equality is JSON-typed (`"true"` is not `true`;
//! numbers compare by value, so `1` equals `1.0`); a test on a path that
//! selects several values holds when any value satisfies it and is false when
//! the path selects nothing; `exists` / `absent` mean at least one / no value
//! selected; list tests treat an absent list as empty (so `subsetOf` holds and
//! `contains` does not).

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
fn elements<'a>(subject: Subject<'a>) -> Vec<Subject<'a>> {
    match subject {
        Subject::Json(Value::Array(list)) => list.iter().map(Subject::Json).collect(),
        other => vec![other],
    }
}

fn operand_list<'a>(operand: &'a Operand, frame: Frame<'_, 'a>) -> Vec<&'a Value> {
    match operand_value(operand, frame) {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other],
    }
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
                QuantityOperand::Path(path) => frame.first(path).and_then(Quantity::from_json),
            };
            let Some(limit) = limit else { return false };
            any(&|s| {
                s.quantity().is_some_and(|q| match comparison {
                    Comparison::Greater => q > limit,
                    Comparison::GreaterOrEqual => q >= limit,
                    Comparison::Less => q < limit,
                    Comparison::LessOrEqual => q <= limit,
                })
            })
        }
        Test::Contains(operand) => match operand_value(operand, frame) {
            Some(needle) => any(&|s| elements(s).iter().any(|e| e.equals(needle))),
            None => false,
        },
        Test::ContainsAny(operand) => {
            let needles = operand_list(operand, frame);
            any(&|s| {
                elements(s)
                    .iter()
                    .any(|e| needles.iter().any(|n| e.equals(n)))
            })
        }
        Test::SubsetOf(operand) => {
            let allowed = operand_list(operand, frame);
            subjects.is_empty()
                || any(&|s| {
                    elements(s)
                        .iter()
                        .all(|e| allowed.iter().any(|a| e.equals(a)))
                })
        }
    }
}
