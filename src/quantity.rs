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
    /// Kubernetes does.
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
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        if frac_part.contains('.') {
            return None;
        }
        // Mantissa as an integer with `frac_digits` decimals.
        let mut mantissa: i128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(b - b'0'))?;
        }
        let mut decimal_exp: i32 = -(i32::try_from(frac_part.len()).ok()?);
        let mut binary_factor: i128 = 1;
        match suffix {
            "" => {}
            "Ki" => binary_factor = 1 << 10,
            "Mi" => binary_factor = 1 << 20,
            "Gi" => binary_factor = 1 << 30,
            "Ti" => binary_factor = 1 << 40,
            "Pi" => binary_factor = 1 << 50,
            "Ei" => binary_factor = 1 << 60,
            "n" => decimal_exp -= 9,
            "u" => decimal_exp -= 6,
            "m" => decimal_exp -= 3,
            "k" => decimal_exp += 3,
            "M" => decimal_exp += 6,
            "G" => decimal_exp += 9,
            "T" => decimal_exp += 12,
            "P" => decimal_exp += 15,
            "E" => decimal_exp += 18,
            exponent if exponent.starts_with(['e', 'E']) => {
                let exp: i32 = exponent[1..].parse().ok()?;
                decimal_exp = decimal_exp.checked_add(exp)?;
            }
            _ => return None,
        }
        let scaled = mantissa.checked_mul(binary_factor)?;
        // scaled * 10^decimal_exp * 10^9, rounding up below a billionth.
        let exp = decimal_exp.checked_add(9)?;
        let nanos = if exp >= 0 {
            scaled.checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)?
        } else {
            let divisor = 10i128
                .checked_pow(u32::try_from(-exp).ok()?)
                .unwrap_or(i128::MAX);
            let quotient = scaled / divisor;
            if scaled % divisor != 0 {
                quotient + 1
            } else {
                quotient
            }
        };
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
        // Too large: no quantity (the exponent once wrapped around to a
        // tiny one in release builds and panicked in debug builds).
        for text in [
            "1e2147483647",
            "1e2147483638",
            "1.5e2147483647",
            "1e39",
            "1Ei1e3",
        ] {
            assert_eq!(Quantity::parse(text), None, "{text}");
        }
        // Too small: the smallest quantity, rounded up as Kubernetes does.
        for text in ["1e-2147483648", "1E-2147483640", "1.5e-30"] {
            assert_eq!(
                Quantity::parse(text),
                Some(Quantity::from_nanos(1)),
                "{text}"
            );
        }
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
        for bad in ["", "abc", "1.2.3", "1Xi", "Gi", "-", "1e", "1e999999"] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
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
