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

/// [`cut`] to `max_bytes`, with every character [`is_unprintable`] written
/// as an escape (`\u{1b}`), for a line a terminal or a CI log shows: a
/// carriage return or an escape sequence in an object's name would
/// otherwise overwrite what is on the screen, a newline (or a Unicode line
/// separator, which some viewers break lines at) forge a line of its own,
/// and a bidi override show the text after it reversed.
pub fn printable(text: &str, max_bytes: usize) -> String {
    let short = cut(text, max_bytes);
    if !short.chars().any(is_unprintable) {
        return short.into_owned();
    }
    let mut shown = String::with_capacity(short.len() + 8);
    for c in short.chars() {
        if is_unprintable(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// Whether [`printable`] escapes `c`: a character of Unicode's general
/// categories Cc (controls: C0, DEL, C1), Zl and Zp (U+2028 LINE SEPARATOR,
/// U+2029 PARAGRAPH SEPARATOR) or Cf (format characters, as of Unicode
/// 15.1: bidi embeddings, overrides and isolates, zero-width spaces and
/// joiners, the byte-order mark, tag characters, ...). None of them shows
/// as a glyph of its own, so what a terminal or a viewer draws of them is
/// not what the text holds; no Kubernetes name or uid contains one.
pub fn is_unprintable(c: char) -> bool {
    /// Zl, Zp and Cf, as inclusive ranges in code-point order.
    const INVISIBLE: &[(char, char)] = &[
        ('\u{ad}', '\u{ad}'),
        ('\u{600}', '\u{605}'),
        ('\u{61c}', '\u{61c}'),
        ('\u{6dd}', '\u{6dd}'),
        ('\u{70f}', '\u{70f}'),
        ('\u{890}', '\u{891}'),
        ('\u{8e2}', '\u{8e2}'),
        ('\u{180e}', '\u{180e}'),
        ('\u{200b}', '\u{200f}'),
        // U+2028, U+2029 (Zl, Zp), then the bidi embeddings and overrides.
        ('\u{2028}', '\u{202e}'),
        ('\u{2060}', '\u{2064}'),
        ('\u{2066}', '\u{206f}'),
        ('\u{feff}', '\u{feff}'),
        ('\u{fff9}', '\u{fffb}'),
        ('\u{110bd}', '\u{110bd}'),
        ('\u{110cd}', '\u{110cd}'),
        ('\u{13430}', '\u{1343f}'),
        ('\u{1bca0}', '\u{1bca3}'),
        ('\u{1d173}', '\u{1d17a}'),
        ('\u{e0001}', '\u{e0001}'),
        ('\u{e0020}', '\u{e007f}'),
    ];
    if c.is_control() {
        return true;
    }
    // Most text is below the first range: one comparison.
    if c < '\u{ad}' {
        return false;
    }
    INVISIBLE
        .binary_search_by(|&(first, last)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
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
    fn printable_text_has_no_line_separators_nor_format_characters() {
        // A line separator some viewers break at, a bidi override that
        // shows `exe.txt` for `txt.exe`, isolates, zero-width characters,
        // a byte-order mark and a tag character.
        let forged = "a\u{2028}b\u{2029}c\u{202e}txt.exe\u{2066}\u{2069}\u{200b}\u{200f}\u{feff}\u{e0041}\u{ad}";
        assert_eq!(
            printable(forged, MAX_FIELD_BYTES),
            "a\\u{2028}b\\u{2029}c\\u{202e}txt.exe\\u{2066}\\u{2069}\\u{200b}\\u{200f}\\u{feff}\\u{e0041}\\u{ad}"
        );
        // Each range's ends are escaped, and the characters beside them
        // (letters, marks, spaces, symbols) are not.
        for (first, last) in [
            ('\u{600}', '\u{605}'),
            ('\u{200b}', '\u{200f}'),
            ('\u{2028}', '\u{202e}'),
            ('\u{2060}', '\u{2064}'),
            ('\u{2066}', '\u{206f}'),
            ('\u{13430}', '\u{1343f}'),
            ('\u{e0020}', '\u{e007f}'),
        ] {
            assert!(is_unprintable(first) && is_unprintable(last), "{first:?}");
            let before = char::from_u32(first as u32 - 1).expect("a char");
            let after = char::from_u32(last as u32 + 1).expect("a char");
            assert!(!is_unprintable(before), "{before:?}");
            assert!(!is_unprintable(after), "{after:?}");
        }
        for kept in [
            'a',
            ' ',
            'é',
            '\u{2013}',
            '\u{2065}',
            '\u{fffc}',
            '𝄞',
            '\u{e0080}',
        ] {
            assert!(!is_unprintable(kept), "{kept:?}");
        }
        assert_eq!(printable("web-1 — é", MAX_FIELD_BYTES), "web-1 — é");
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
