//! The validity period of the serving certificate: read from its DER when it
//! is loaded, warned about when the certificate is expired or not yet valid,
//! and exported as metrics an operator alerts on
//! ([`crate::metrics::TLS_CERTIFICATE_EXPIRY_SECONDS`]).
//!
//! rustls checks that the key fits the certificate but not its dates (the
//! client does that), and rustls-webpki keeps the dates private, so the two
//! `Time` fields are read here: `Certificate ::= SEQUENCE { tbsCertificate
//! SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer,
//! validity SEQUENCE { notBefore, notAfter }, ... } ... }` (RFC 5280 4.1).
//! That is a walk over five DER headers; a general X.509 parser would add a
//! handful of crates for it.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls_pki_types::CertificateDer;

/// One of a certificate's validity dates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CertTime {
    /// Seconds since the Unix epoch (negative before 1970).
    pub unix_seconds: i64,
}

impl CertTime {
    fn now() -> Self {
        let unix_seconds = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
        };
        CertTime { unix_seconds }
    }
}

impl fmt::Display for CertTime {
    /// RFC 3339 in UTC, `2026-11-23T18:50:00Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.unix_seconds.div_euclid(86_400);
        let seconds = self.unix_seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )
    }
}

/// A certificate's `notBefore` and `notAfter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// First second the certificate is valid.
    pub not_before: CertTime,
    /// Last second the certificate is valid.
    pub not_after: CertTime,
}

impl Validity {
    /// The validity of the DER certificate `cert`, or `None` when it is not
    /// a certificate this walk can read.
    pub fn of(cert: &CertificateDer<'_>) -> Option<Self> {
        let (certificate, _) = expect(cert.as_ref(), SEQUENCE)?;
        let (tbs, _) = expect(certificate, SEQUENCE)?;
        let mut rest = tbs;
        // version [0] EXPLICIT, absent in v1 certificates.
        if rest.first() == Some(&VERSION) {
            rest = expect(rest, VERSION)?.1;
        }
        rest = expect(rest, INTEGER)?.1; // serialNumber
        rest = expect(rest, SEQUENCE)?.1; // signature
        rest = expect(rest, SEQUENCE)?.1; // issuer
        let (validity, _) = expect(rest, SEQUENCE)?;
        let (not_before, rest) = time(validity)?;
        let (not_after, _) = time(rest)?;
        Some(Validity {
            not_before,
            not_after,
        })
    }

    /// Whether the certificate is valid at `now`.
    fn covers(&self, now: CertTime) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// Logs a warning when the serving certificate `cert` (loaded from `source`)
/// is expired or not yet valid, and records its dates as metrics.
pub fn observe(cert: &CertificateDer<'_>, source: &str) {
    let Some(validity) = Validity::of(cert) else {
        tracing::warn!(
            cert = source,
            "Cannot read the validity dates of the TLS certificate"
        );
        return;
    };
    crate::metrics::record_certificate_validity(
        validity.not_before.unix_seconds as f64,
        validity.not_after.unix_seconds as f64,
    );
    let now = CertTime::now();
    if !validity.covers(now) {
        let state = if now < validity.not_before {
            "not yet valid"
        } else {
            "expired"
        };
        tracing::warn!(
            cert = source,
            state,
            not_before = %validity.not_before,
            not_after = %validity.not_after,
            "Serving a TLS certificate outside its validity period: clients will refuse it"
        );
    }
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The content of the DER element at the start of `input` if its tag is
/// `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = input.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        // A certificate is far smaller than 4 GiB; 0 is BER's indefinite form.
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, rest) = rest.split_at_checked(count)?;
        let length = bytes
            .iter()
            .fold(0usize, |length, byte| length << 8 | usize::from(*byte));
        (length, rest)
    };
    rest.split_at_checked(length)
}

/// A `Time` (UTCTime or GeneralizedTime, in the `Z` forms RFC 5280 requires)
/// and what follows it.
fn time(input: &[u8]) -> Option<(CertTime, &[u8])> {
    if let Some((text, rest)) = expect(input, UTC_TIME) {
        // YYMMDDHHMMSSZ; RFC 5280: YY >= 50 is 19YY.
        let text = text.strip_suffix(b"Z").filter(|t| t.len() == 12)?;
        let yy = number(text.get(..2)?)?;
        let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
        return Some((civil(year, text.get(2..)?)?, rest));
    }
    let (text, rest) = expect(input, GENERALIZED_TIME)?;
    // YYYYMMDDHHMMSSZ
    let text = text.strip_suffix(b"Z").filter(|t| t.len() == 14)?;
    Some((civil(number(text.get(..4)?)?, text.get(4..)?)?, rest))
}

/// `year` and `MMDDHHMMSS` as a time.
fn civil(year: i64, text: &[u8]) -> Option<CertTime> {
    let field = |at: usize| text.get(at..at + 2).and_then(number);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // 60: a leap second, which DER may carry.
    if second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(CertTime {
        unix_seconds: days * 86_400 + hour * 3600 + minute * 60 + second,
    })
}

/// ASCII digits as a number.
fn number(digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0i64, |n, digit| {
        digit
            .is_ascii_digit()
            .then(|| n * 10 + i64::from(digit - b'0'))
    })
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_valid(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        params.self_signed(&key).expect("cert").der().clone()
    }

    #[test]
    fn reads_the_dates_of_utc_and_generalized_times() {
        // rcgen writes UTCTime before 2050 and GeneralizedTime from 2050 on.
        for (not_before, not_after, before_text, after_text) in [
            (
                (2020, 1, 2),
                (2021, 3, 4),
                "2020-01-02T00:00:00Z",
                "2021-03-04T00:00:00Z",
            ),
            (
                (1975, 1, 1),
                (4096, 1, 1),
                "1975-01-01T00:00:00Z",
                "4096-01-01T00:00:00Z",
            ),
            (
                (2049, 12, 31),
                (2050, 2, 28),
                "2049-12-31T00:00:00Z",
                "2050-02-28T00:00:00Z",
            ),
        ] {
            let validity = Validity::of(&cert_valid(not_before, not_after)).expect("readable");
            assert_eq!(validity.not_before.to_string(), before_text);
            assert_eq!(validity.not_after.to_string(), after_text);
        }
        let validity = Validity::of(&cert_valid((2020, 1, 2), (2021, 3, 4))).expect("readable");
        assert_eq!(validity.not_before.unix_seconds, 1_577_923_200);
        assert!(!validity.covers(CertTime::now()));
        let current = Validity::of(&cert_valid((2000, 1, 1), (4000, 1, 1))).expect("readable");
        assert!(current.covers(CertTime::now()));
    }

    #[test]
    fn dates_round_trip_through_days() {
        for days in [-800_000, -1, 0, 1, 11_016, 19_000, 60_000, 2_000_000] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
        }
        assert_eq!(
            CertTime { unix_seconds: -1 }.to_string(),
            "1969-12-31T23:59:59Z"
        );
    }

    #[test]
    fn anything_else_is_unreadable_without_a_panic() {
        let good = cert_valid((2020, 1, 1), (2030, 1, 1));
        let bytes = good.as_ref();
        for end in 0..bytes.len().min(400) {
            // Cut short: the outer length no longer fits.
            assert_eq!(
                Validity::of(&CertificateDer::from(&bytes[..end])),
                None,
                "{end}"
            );
        }
        assert_eq!(Validity::of(&CertificateDer::from(&b"\x30\x80"[..])), None);
        assert_eq!(Validity::of(&CertificateDer::from(&b"not DER"[..])), None);
    }
}
