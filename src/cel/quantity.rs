//! Kubernetes' CEL quantity library (`quantity('1Gi')`, `isQuantity`,
//! `compareTo`, ...), as the API server gives ValidatingAdmissionPolicy
//! expressions, on kadmit's exact [`Quantity`]:
//!
//! | function | result |
//! |---|---|
//! | `quantity(string)` | the quantity; an error when the string is none |
//! | `isQuantity(string)` | whether `quantity` would succeed |
//! | `q.compareTo(q)` | -1, 0 or 1 |
//! | `q.isGreaterThan(q)`, `q.isLessThan(q)` | the comparison |
//! | `q.add(q or int)`, `q.sub(q or int)` | the sum, the difference |
//! | `q.sign()` | -1, 0 or 1 |
//! | `q.isInteger()`, `q.asInteger()` | whether it is a whole number that fits an `int`; it as one (an error when not) |
//! | `q.asApproximateFloat()` | the nearest `double` |
//!
//! Quantities are equal (`==`) when their values are (`1` and `1000m`).
//! They are exact to a billionth (the `n` suffix), as [`Quantity`] is;
//! smaller digits round up, as Kubernetes rounds, and a quantity beyond
//! about ±1.7 × 10²⁹ is the largest one (see [`Quantity::parse`]), so it
//! compares as more than any other; sums beyond it are errors.

use std::sync::LazyLock;

use ::cel::common::types::{CelBool, CelDouble, CelInt, CelString, INT_TYPE, STRING_TYPE, Type};
use ::cel::common::value::{CowVal, StaticVal, Val};
use ::cel::{Env, ExecutionError};

use crate::quantity::Quantity;

/// The CEL type of quantities, named as Kubernetes names it.
static QUANTITY_TYPE: LazyLock<Type> = LazyLock::new(|| Type::new_opaque_type(QUANTITY_NAME));

const QUANTITY_NAME: &str = "kubernetes.Quantity";

/// A quantity as a CEL value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CelQuantity(Quantity);

impl Val for CelQuantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<CelQuantity>()
            .is_some_and(|other| other.0 == self.0)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for CelQuantity {}

/// Registers the library's functions on `env`.
pub(super) fn register(env: &mut Env) -> Result<(), ::cel::DeclarationError> {
    let q = || Type::new_opaque_type(QUANTITY_NAME);
    env.add_overload("quantity", "quantity_string", vec![STRING_TYPE], quantity)?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        q(),
        vec![q()],
        compare_to,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        is_greater_than,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity_is_less_than",
        q(),
        vec![q()],
        is_less_than,
    )?;
    env.add_member_overload("add", "quantity_add_quantity", q(), vec![q()], add)?;
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub_quantity", q(), vec![q()], sub)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], sub)?;
    env.add_member_overload("sign", "quantity_sign", q(), vec![], sign)?;
    env.add_member_overload("isInteger", "quantity_is_integer", q(), vec![], is_integer)?;
    env.add_member_overload("asInteger", "quantity_as_integer", q(), vec![], as_integer)?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_as_approximate_float",
        q(),
        vec![],
        as_approximate_float,
    )?;
    Ok(())
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Returned<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn text<'a>(function: &str, value: &'a CowVal<'_, '_>) -> Result<&'a str, ExecutionError> {
    value
        .downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| error(function, "takes a string"))
}

fn quantity_of(function: &str, value: &CowVal<'_, '_>) -> Result<Quantity, ExecutionError> {
    value
        .downcast_ref::<CelQuantity>()
        .map(|q| q.0)
        .ok_or_else(|| error(function, "takes a quantity"))
}

/// The receiver and the one argument of a method.
fn two(function: &str, args: &Args<'_, '_>) -> Result<(Quantity, Quantity), ExecutionError> {
    let [receiver, other] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let other = match other.downcast_ref::<CelInt>() {
        Some(int) => i128::from(*int.inner())
            .checked_mul(1_000_000_000)
            .map(Quantity::from_nanos)
            .ok_or_else(|| error(function, "the number is out of range"))?,
        None => quantity_of(function, other)?,
    };
    Ok((quantity_of(function, receiver)?, other))
}

fn one(function: &str, args: &Args<'_, '_>) -> Result<Quantity, ExecutionError> {
    let [receiver] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    quantity_of(function, receiver)
}

fn owned<'b, 'v>(value: impl Val + 'v) -> Returned<'b, 'v> {
    Ok(CowVal::Owned(Box::new(value)))
}

fn quantity<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let [value] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let text = text("quantity", value)?;
    match Quantity::parse_strict(text) {
        Some(q) => owned(CelQuantity(q)),
        None => Err(error(
            "quantity",
            format!("{:?} is not a quantity", crate::excerpt::field(text)),
        )),
    }
}

fn is_quantity<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let [value] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let text = text("isQuantity", value)?;
    owned(CelBool::from(Quantity::parse_strict(text).is_some()))
}

fn compare_to<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (a, b) = two("compareTo", &args)?;
    owned(CelInt::from(a.cmp(&b) as i64))
}

fn is_greater_than<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (a, b) = two("isGreaterThan", &args)?;
    owned(CelBool::from(a > b))
}

fn is_less_than<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (a, b) = two("isLessThan", &args)?;
    owned(CelBool::from(a < b))
}

fn add<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (a, b) = two("add", &args)?;
    match a.nanos().checked_add(b.nanos()) {
        Some(sum) => owned(CelQuantity(Quantity::from_nanos(sum))),
        None => Err(error("add", "the sum is out of range")),
    }
}

fn sub<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (a, b) = two("sub", &args)?;
    match a.nanos().checked_sub(b.nanos()) {
        Some(difference) => owned(CelQuantity(Quantity::from_nanos(difference))),
        None => Err(error("sub", "the difference is out of range")),
    }
}

fn sign<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let q = one("sign", &args)?;
    owned(CelInt::from(q.nanos().signum() as i64))
}

/// The quantity as an `int`, when it is a whole number that fits one.
fn integer(q: Quantity) -> Option<i64> {
    let nanos = q.nanos();
    if nanos % 1_000_000_000 != 0 {
        return None;
    }
    i64::try_from(nanos / 1_000_000_000).ok()
}

fn is_integer<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let q = one("isInteger", &args)?;
    owned(CelBool::from(integer(q).is_some()))
}

fn as_integer<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let q = one("asInteger", &args)?;
    match integer(q) {
        Some(int) => owned(CelInt::from(int)),
        None => Err(error(
            "asInteger",
            format!("{q} is not a whole number that fits an int"),
        )),
    }
}

fn as_approximate_float<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let q = one("asApproximateFloat", &args)?;
    owned(CelDouble::from(q.nanos() as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use crate::cel::{Expression, Failure};
    use crate::eval::budget::{Budget, Limits};

    fn holds(source: &str) -> Result<bool, Failure> {
        let expression =
            Expression::compile(source, &[]).unwrap_or_else(|e| panic!("{source}: {e}"));
        expression.holds(|_| None, &Budget::new(Limits::DEFAULT))
    }

    #[test]
    fn quantities_compare_and_compute_as_kubernetes_does() {
        for source in [
            "quantity('1Gi') == quantity('1024Mi')",
            "quantity('1') == quantity('1000m')",
            "quantity('1') != quantity('1001m')",
            "quantity('2Gi').isGreaterThan(quantity('2G'))",
            "quantity('500m').isLessThan(quantity('1'))",
            "quantity('1.5').compareTo(quantity('1500m')) == 0",
            "quantity('1k').compareTo(quantity('1Ki')) == -1",
            "quantity('3').compareTo(quantity('2e0')) == 1",
            "quantity('1').add(quantity('500m')) == quantity('1.5')",
            "quantity('1').add(2) == quantity('3')",
            "quantity('1').sub(quantity('2')).sign() == -1",
            "quantity('0').sign() == 0",
            "quantity('3').sub(1) == quantity('2000m')",
            "quantity('2Ki').isInteger() && quantity('2Ki').asInteger() == 2048",
            "!quantity('1500m').isInteger()",
            "quantity('1500m').asApproximateFloat() == 1.5",
            "isQuantity('100Mi') && isQuantity('-2.5e3') && isQuantity('.5')",
            "isQuantity('1e30') && quantity('1e30').isGreaterThan(quantity('8Ei'))",
            "quantity('0e40') == quantity('0')",
            "!isQuantity('1GiB') && !isQuantity('') && !isQuantity(' 1') && !isQuantity('one')",
        ] {
            assert_eq!(holds(source), Ok(true), "{source}");
        }
    }

    #[test]
    fn what_is_no_quantity_fails_the_expression() {
        for (source, expected) in [
            ("quantity('1GiB') == quantity('1')", "is not a quantity"),
            ("quantity('1500m').asInteger() == 1", "not a whole number"),
            ("quantity('1e19').asInteger() == 1", "not a whole number"),
            (
                "quantity('1e100').add(quantity('1e100')) == quantity('1')",
                "out of range",
            ),
        ] {
            match holds(source) {
                Err(Failure::Error(message)) => {
                    assert!(message.contains(expected), "{source}: {message}");
                }
                other => panic!("{source}: {other:?}"),
            }
        }
    }
}
