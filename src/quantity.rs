//! Kubernetes resource quantities (`500m`, `1Gi`, `2e3`) as exact numbers, so
//! that `1Gi` equals `1024Mi` and `2000m` equals `2`.

use std::fmt;

use serde_json::Value;

/// A quantity held exactly, in billionths (the precision of the `n` suffix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i128);

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// The quantity as a count of billionths.
    pub fn nanos(self) -> i128 {
        self.0
    }

    /// The quantity of `nanos` billionths.
    pub fn from_nanos(nanos: i128) -> Quantity {
        Quantity(nanos)
    }

    /// Parses a quantity as Kubernetes' `ParseQuantity` does: as
    /// [`Quantity::parse`], without surrounding whitespace.
    pub fn parse_strict(text: &str) -> Option<Quantity> {
        if text.trim() != text {
            return None;
        }
        Quantity::parse(text)
    }

    /// Parses a quantity string: a signed decimal number, then an optional
    /// binary suffix (`Ki` … `Ei`), decimal suffix (`n u m k M G T P E`) or
    /// exponent (`e3`, `E-2`). Digits below a billionth are rounded up, as
    /// Kubernetes does. Any number of digits is read exactly; a value
    /// beyond what a billionth count holds (about ±1.7 × 10²⁹) is the
    /// largest quantity of its sign, and one with a binary suffix is capped
    /// at 2^63 - 1, as Kubernetes caps it.
    pub fn parse(text: &str) -> Option<Quantity> {
        let text = text.trim();
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        // No digits at all (`-`, `.`, `Gi`) is zero, as Kubernetes reads it.
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if frac_part.contains('.') {
            return None;
        }
        let (binary_factor, decimal_exp): (u64, i64) = match suffix {
            "" => (1, 0),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            exponent if exponent.starts_with(['e', 'E']) => {
                (1, i64::from(exponent[1..].parse::<i32>().ok()?))
            }
            _ => return None,
        };
        // The digits as one integer, and the power of ten that makes it a
        // count of billionths.
        let digits: Vec<u8> = int_part
            .bytes()
            .chain(frac_part.bytes())
            .map(|b| b - b'0')
            .skip_while(|&d| d == 0)
            .collect();
        let exp = decimal_exp + 9 - i64::try_from(frac_part.len()).ok()?;
        let mut nanos = scaled_nanos(&digits, binary_factor, exp);
        // Kubernetes caps a quantity with a binary suffix at 2^63 - 1.
        if binary_factor > 1 {
            nanos = nanos.min(BINARY_MAX_NANOS);
        }
        Some(Quantity(if negative { -nanos } else { nanos }))
    }

    /// A JSON number or quantity string as a quantity.
    pub fn from_json(value: &Value) -> Option<Quantity> {
        match value {
            Value::String(text) => Quantity::parse(text),
            Value::Number(number) => {
                if let Some(i) = number.as_i64() {
                    i128::from(i).checked_mul(NANO).map(Quantity)
                } else if let Some(u) = number.as_u64() {
                    i128::from(u).checked_mul(NANO).map(Quantity)
                } else {
                    // Floats go through their shortest decimal form, which is exact.
                    Quantity::parse(&number.to_string())
                }
            }
            _ => None,
        }
    }
}

/// The largest quantity with a binary suffix, in billionths: Kubernetes
/// caps those at 2^63 - 1.
const BINARY_MAX_NANOS: i128 = i64::MAX as i128 * NANO;

/// `digits × factor × 10^exp` (decimal digits without leading zeros),
/// rounded up to a whole number, as Kubernetes rounds up below a
/// billionth; [`i128::MAX`] when it is larger. Exact however many digits
/// there are: the digits are multiplied as a string, in time linear in
/// their number, so `1e30`, `0e40` and forty decimals are quantities like
/// any other.
fn scaled_nanos(digits: &[u8], factor: u64, exp: i64) -> i128 {
    if digits.is_empty() {
        return 0;
    }
    // digits × factor, most significant digit first.
    let mut product = Vec::with_capacity(digits.len() + 20);
    let mut carry: u128 = 0;
    for &digit in digits.iter().rev() {
        let value = u128::from(digit) * u128::from(factor) + carry;
        product.push((value % 10) as u8);
        carry = value / 10;
    }
    while carry > 0 {
        product.push((carry % 10) as u8);
        carry /= 10;
    }
    while product.last() == Some(&0) {
        product.pop();
    }
    product.reverse();
    // Whole part, and whether anything below it is left to round up.
    let len = i64::try_from(product.len()).unwrap_or(i64::MAX);
    let (whole, round_up): (&[u8], bool) = if exp >= 0 {
        (&product, false)
    } else if -exp >= len {
        return 1;
    } else {
        let split = product.len() - usize::try_from(-exp).unwrap_or(0);
        let (whole, below) = product.split_at(split);
        (whole, below.iter().any(|&d| d != 0))
    };
    // i128::MAX has 39 digits.
    let zeros = u32::try_from(exp.max(0)).unwrap_or(u32::MAX);
    if whole.len() as u64 + u64::from(zeros) > 39 {
        return i128::MAX;
    }
    let mut value: i128 = 0;
    for &digit in whole {
        let Some(next) = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(digit)))
        else {
            return i128::MAX;
        };
        value = next;
    }
    value
        .checked_mul(10i128.pow(zeros))
        .and_then(|v| v.checked_add(i128::from(round_up)))
        .unwrap_or(i128::MAX)
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / NANO;
        let frac = (self.0 % NANO).abs();
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let sign = if self.0 < 0 && whole == 0 { "-" } else { "" };
            let digits = format!("{frac:09}");
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_exponents_never_overflow() {
        // Larger than kadmit holds exactly (about 1.7e29): the largest
        // quantity, so a limit still holds them back (they were once no
        // quantity, and `greaterThan: 2Gi` let `1e30` through; before
        // that the exponent wrapped around to a tiny one).
        let largest = Quantity::from_nanos(i128::MAX);
        for text in [
            "1e2147483647",
            "1e2147483638",
            "1.5e2147483647",
            "1e39",
            "2e29",
            "1e30",
            "1e999999",
            "1.00000000000000000000000000000000000000000e30",
            "999999999999999999999999999999999999999999999",
        ] {
            assert_eq!(Quantity::parse(text), Some(largest), "{text}");
            assert_eq!(
                Quantity::parse(&format!("-{text}")),
                Some(Quantity::from_nanos(-i128::MAX)),
                "-{text}"
            );
        }
        assert!(q("1e29") < largest && q("1e29") > q("8Ei"));
        // Too small: the smallest quantity, rounded up as Kubernetes does.
        for text in ["1e-2147483648", "1E-2147483640", "1.5e-30"] {
            assert_eq!(
                Quantity::parse(text),
                Some(Quantity::from_nanos(1)),
                "{text}"
            );
        }
        // No exponent of 32 bits: no quantity.
        for text in ["1e2147483648", "1e-2147483649", "1Ei1e3"] {
            assert_eq!(Quantity::parse(text), None, "{text}");
        }
    }

    /// `nanos` billionths spelled with the decimal point moved `shift`
    /// places left (and `e{shift}` after), `lead` zeros before and `trail`
    /// zeros after, and `below` digits under a billionth.
    fn spelling(nanos: u128, shift: i32, lead: usize, trail: usize, below: &str) -> String {
        // The digits, with the point 9 + shift places from the right.
        let mut digits = format!("{nanos}{below}");
        let mut point = i64::try_from(digits.len()).unwrap()
            - 9
            - i64::from(shift)
            - i64::try_from(below.len()).unwrap();
        if point <= 0 {
            digits.insert_str(0, &"0".repeat(usize::try_from(1 - point).unwrap()));
            point = 1;
        }
        let point = usize::try_from(point).unwrap();
        if point > digits.len() {
            let missing = point - digits.len();
            digits.push_str(&"0".repeat(missing));
        }
        let (int, frac) = digits.split_at(point);
        format!(
            "{}{int}.{frac}{}e{shift}",
            "0".repeat(lead),
            "0".repeat(trail)
        )
    }

    proptest::proptest! {
        #[test]
        fn every_spelling_of_a_value_is_that_value(
            nanos in 0u128..(1u128 << 96),
            negative: bool,
            shift in -40i32..40,
            lead in 0usize..40,
            trail in 0usize..40,
            below in proptest::option::of("[0-9]{0,20}[1-9]"),
        ) {
            let text = spelling(nanos, shift, lead, trail, below.as_deref().unwrap_or(""));
            let magnitude = i128::try_from(nanos).unwrap() + i128::from(below.is_some());
            let expected = if negative { -magnitude } else { magnitude };
            let text = if negative { format!("-{text}") } else { text };
            proptest::prop_assert_eq!(
                Quantity::parse(&text),
                Some(Quantity::from_nanos(expected)),
                "{}", text
            );
        }
    }

    #[test]
    fn any_number_of_digits_is_exact() {
        // Zero whatever its exponent.
        for text in [
            "0e30",
            "0.0e40",
            "000",
            "0.000000000000000000000000000000000000000000",
        ] {
            assert_eq!(
                Quantity::parse(text),
                Some(Quantity::from_nanos(0)),
                "{text}"
            );
        }
        // Forty digits, leading and trailing zeros included.
        assert_eq!(
            q("1.0000000000000000000000000000000000000001"),
            Quantity::from_nanos(1_000_000_001)
        );
        assert_eq!(q("0.1000000000000000000000000000000000000000"), q("100m"));
        assert_eq!(
            q("000000000000000000000000000000000000000000001.5Gi"),
            q("1536Mi")
        );
        assert_eq!(
            q("1.000000000000000000001Ki"),
            Quantity::from_nanos(1_024_000_000_001)
        );
        assert_eq!(q("0.0000000001Ki"), Quantity::from_nanos(103));
        assert_eq!(
            q("123456789012345678901234567e-9"),
            Quantity::from_nanos(123_456_789_012_345_678_901_234_567)
        );
        // A binary suffix is capped at 2^63 - 1, as Kubernetes caps it.
        assert_eq!(q("8Ei"), q("16Ei"));
        assert_eq!(q("8Ei"), q("9223372036854775807"));
        assert!(q("7Ei") < q("8Ei"));
        // Linear in the digits: a megabyte of them parses at once.
        let long = format!("{}e-999990", "7".repeat(1 << 20));
        assert!(Quantity::parse(&long).is_some_and(|q| q.nanos() > 0));
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|| panic!("{text} should parse"))
    }

    #[test]
    fn equal_quantities_in_different_units() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("2000m"), q("2"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("+3"), q("3"));
    }

    #[test]
    fn ordering() {
        assert!(q("500m") < q("1"));
        assert!(q("129Mi") > q("128Mi"));
        assert!(q("-1") < q("0"));
        assert!(q("1Ei") > q("1E"));
        assert!(q("1n") > q("0"));
    }

    #[test]
    fn rounds_up_below_a_nano() {
        assert_eq!(q("0.0000000001"), Quantity(1));
    }

    #[test]
    fn rejects_non_quantities() {
        for bad in ["", "abc", "1.2.3", "1Xi", "1e", "1e1e3", "--1", "1 Gi"] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
        // A sign, a point or a suffix without digits is zero to Kubernetes:
        // the API server stores `memory: Gi`, so a minimum must see it.
        for zero in ["-", "+", ".", "Gi", ".Ki", "-m", "e3"] {
            assert_eq!(Quantity::parse(zero), Some(Quantity(0)), "{zero}");
        }
        assert_eq!(Quantity::from_json(&Value::Bool(true)), None);
    }

    #[test]
    fn json_numbers() {
        assert_eq!(Quantity::from_json(&serde_json::json!(2)), Some(q("2")));
        assert_eq!(
            Quantity::from_json(&serde_json::json!(0.25)),
            Some(q("250m"))
        );
        assert_eq!(
            Quantity::from_json(&serde_json::json!("64Mi")),
            Some(q("64Mi"))
        );
    }

    #[test]
    fn display() {
        assert_eq!(q("1500m").to_string(), "1.5");
        assert_eq!(q("2").to_string(), "2");
        assert_eq!(q("-250m").to_string(), "-0.25");
    }
}
