//! Bounded excerpts of text taken from requests, for log lines, `Status`
//! messages and the recent-denials ring.
//!
//! Anything a client sends (a path, a header, a uid, an object name) can be
//! as long as the request limits allow: megabytes. Copied whole into a log
//! line or a kept record, one request multiplies into memory, log volume and
//! response size. Every such field goes through [`cut`] before it is kept or
//! written, so each has a fixed upper size whatever the request held.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Longest excerpt of one short request field (a path, a header value, a
/// name, a uid), in bytes. Kubernetes names are at most 253 bytes and uids
/// 36, so real values fit whole.
pub const MAX_FIELD_BYTES: usize = 256;

/// Longest message (a `Status` message, a rule's denial message), in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The shortest `max_bytes` that leaves room for the marker of a cut.
const MIN_BYTES: usize = 32;

/// `text` when it fits in `max_bytes`, otherwise its beginning followed by a
/// marker saying how much was left out: `abc…[+1234 bytes]`.
///
/// The result never exceeds `max_bytes` (nor [`MIN_BYTES`] when `max_bytes`
/// is smaller), and is cut on a character boundary.
///
/// ```
/// use kadmit::excerpt::cut;
///
/// assert_eq!(cut("short", 64), "short");
/// let long = "x".repeat(1000);
/// let short = cut(&long, 64);
/// assert!(short.len() <= 64);
/// assert!(short.ends_with("bytes]"), "{short}");
/// ```
pub fn cut(text: &str, max_bytes: usize) -> Cow<'_, str> {
    let max_bytes = max_bytes.max(MIN_BYTES);
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    // Room for the marker with as many digits as the whole length has: the
    // count left out is never longer than that.
    let digits = text.len().checked_ilog10().unwrap_or(0) as usize + 1;
    let marker_bytes = "…[+ bytes]".len() + digits;
    let mut end = max_bytes.saturating_sub(marker_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut short = String::with_capacity(max_bytes);
    short.push_str(&text[..end]);
    // Writing into a String cannot fail.
    let _ = write!(short, "…[+{} bytes]", text.len() - end);
    Cow::Owned(short)
}

/// [`cut`] to [`MAX_FIELD_BYTES`], as an owned string.
pub fn field(text: &str) -> String {
    cut(text, MAX_FIELD_BYTES).into_owned()
}

/// [`cut`] to `max_bytes`, with every control character written as an
/// escape (`\u{1b}`), for a line a terminal or a CI log shows: a carriage
/// return or an escape sequence in an object's name would otherwise
/// overwrite what is on the screen, and a newline forge a line of its own.
pub fn printable(text: &str, max_bytes: usize) -> String {
    let short = cut(text, max_bytes);
    if !short.chars().any(char::is_control) {
        return short.into_owned();
    }
    let mut shown = String::with_capacity(short.len() + 8);
    for c in short.chars() {
        if c.is_control() {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// What `shown` writes, stopped at `max_bytes`: the beginning followed by
/// `…[cut]` when there was more. Unlike [`cut`], the whole text is never
/// made first, so a message that quotes a value (a CEL error naming the
/// map it could not add to) costs at most `max_bytes` however large the
/// value is.
pub fn shown_within(shown: impl std::fmt::Display, max_bytes: usize) -> String {
    const MARKER: &str = "…[cut]";
    let max_bytes = max_bytes.max(MIN_BYTES);
    let mut bounded = Bounded {
        text: String::new(),
        room: max_bytes - MARKER.len(),
        full: false,
    };
    // Only `Bounded` stops the writing, by failing once it is full.
    let _ = write!(bounded, "{shown}");
    if bounded.full {
        bounded.text.push_str(MARKER);
    }
    bounded.text
}

/// A `fmt::Write` that keeps at most `room` bytes, then refuses.
struct Bounded {
    text: String,
    room: usize,
    full: bool,
}

impl std::fmt::Write for Bounded {
    fn write_str(&mut self, piece: &str) -> std::fmt::Result {
        let left = self.room - self.text.len();
        if piece.len() <= left {
            self.text.push_str(piece);
            return Ok(());
        }
        let mut end = left;
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&piece[..end]);
        self.full = true;
        Err(std::fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_within_stops_writing_at_the_bound() {
        assert_eq!(shown_within(format_args!("{} {}", "a", 1), 64), "a 1");
        // A value that would show as 2 MB: what is written stays within the
        // bound, ends on a character boundary and is marked.
        struct Endless;
        impl std::fmt::Display for Endless {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                for _ in 0..1_000_000 {
                    f.write_str("é")?;
                }
                Ok(())
            }
        }
        for max_bytes in [0, MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES + 1] {
            let shown = shown_within(Endless, max_bytes);
            assert!(shown.len() <= max_bytes.max(MIN_BYTES), "{}", shown.len());
            assert!(shown.ends_with("é…[cut]"), "{shown}");
        }
    }

    #[test]
    fn printable_text_has_no_control_characters_and_stays_near_its_bound() {
        assert_eq!(printable("web-1", MAX_FIELD_BYTES), "web-1");
        let forged = "a\r\u{1b}[2Kreplayed 0 reviews\nok\u{7f}";
        let shown = printable(forged, MAX_FIELD_BYTES);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(shown, "a\\u{d}\\u{1b}[2Kreplayed 0 reviews\\u{a}ok\\u{7f}");
        // Cut first, so each byte kept grows to at most an 8-byte escape.
        let long = "\u{1b}".repeat(10_000);
        assert!(printable(&long, MAX_FIELD_BYTES).len() <= 8 * MAX_FIELD_BYTES);
    }

    #[test]
    fn text_that_fits_is_kept_whole() {
        let exact = "a".repeat(MAX_FIELD_BYTES);
        assert!(matches!(cut(&exact, MAX_FIELD_BYTES), Cow::Borrowed(_)));
        assert_eq!(cut("", 0), "");
    }

    #[test]
    fn long_text_is_cut_within_the_bound_and_marked() {
        for length in [MAX_FIELD_BYTES + 1, 10_000, 2 << 20] {
            let long = "b".repeat(length);
            let short = cut(&long, MAX_FIELD_BYTES);
            assert!(short.len() <= MAX_FIELD_BYTES, "{length}: {}", short.len());
            let kept = short.find('…').expect("marked");
            assert_eq!(
                short[kept..],
                format!("…[+{} bytes]", length - kept),
                "{length}"
            );
            assert!(kept > MAX_FIELD_BYTES / 2, "{length}: kept {kept}");
        }
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // Two- and four-byte characters, so some bounds fall mid-character.
        let text = "é𝄞".repeat(500);
        for max_bytes in MIN_BYTES..MIN_BYTES + 8 {
            let short = cut(&text, max_bytes);
            assert!(short.len() <= max_bytes, "{max_bytes}: {short}");
            assert!(short.starts_with('é'), "{short}");
        }
    }

    #[test]
    fn tiny_bounds_still_leave_room_for_the_marker() {
        let text = "c".repeat(100);
        let short = cut(&text, 1);
        assert!(short.len() <= MIN_BYTES, "{short}");
        assert!(short.ends_with("bytes]"), "{short}");
    }
}
