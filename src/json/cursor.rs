//! A place in a JSON text and the steps that read it by hand: whitespace,
//! strings, numbers and literals, each checked as serde_json checks them
//! ([`super::Doc::parse`] builds its index with them), and whole values
//! skipped or built without serde_json's per-byte dispatch
//! ([`Cursor::skip_value`], [`Cursor::value`]).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::{Refusal, Span, decode_string, number, out_of_range, refused_escape};

/// A JSON text and how far it has been read.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'t> {
    text: &'t str,
    at: usize,
}

/// Eight copies of `b`.
const fn splat(b: u8) -> u64 {
    u64::from_le_bytes([b; 8])
}

/// The eight bytes from `at`, the first in the lowest bits.
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let chunk: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(chunk))
}

impl<'t> Cursor<'t> {
    /// At the start of `text`.
    pub fn new(text: &'t str) -> Self {
        Cursor { text, at: 0 }
    }

    /// The whole text.
    pub fn text(&self) -> &'t str {
        self.text
    }

    /// How far the text has been read, in bytes.
    pub fn at(&self) -> usize {
        self.at
    }

    /// Moves to `at` (a place a reader of the same text found).
    pub fn seek(&mut self, at: usize) {
        self.at = at;
    }

    /// The next byte, if any, without reading it.
    pub fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Reads `byte` if it is next.
    pub fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    /// A string from its opening quote: its text's span (quotes excluded)
    /// and whether it holds an escape. An escape serde_json refuses (a lone
    /// surrogate) is refused here too.
    #[inline(always)]
    pub(super) fn checked_string(&mut self) -> Result<(Span, bool), Refusal> {
        let found = self.string_span()?;
        self.readable(found)
    }

    /// `found` (a string's span, and whether it holds an escape), or a
    /// refusal for an escape serde_json refuses in a string it reads.
    #[inline(always)]
    fn readable(&self, found: (Span, bool)) -> Result<(Span, bool), Refusal> {
        let (span, escaped) = found;
        if escaped && refused_escape(self.text, span) {
            Err(Refusal::Invalid)
        } else {
            Ok(found)
        }
    }

    /// A string from its opening quote: its text's span and whether it
    /// holds an escape, checked as serde_json checks a string it skips
    /// (which lets a lone surrogate pass).
    #[inline(always)]
    fn string_span(&mut self) -> Result<(Span, bool), Refusal> {
        let start = self.at;
        let escaped = self.string()?;
        let span = Span {
            start: (start + 1) as u32,
            len: (self.at - start - 2) as u32,
        };
        Ok((span, escaped))
    }

    /// `"key":` of an object member, and whether the key has an escape.
    #[inline(always)]
    pub(super) fn member_key(&mut self) -> Result<(Span, bool), Refusal> {
        let found = self.key_span()?;
        self.readable(found)
    }

    /// `"key":` of an object member, its key checked as a skipped string.
    #[inline(always)]
    fn key_span(&mut self) -> Result<(Span, bool), Refusal> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(Refusal::Invalid);
        }
        let key = self.string_span()?;
        self.skip_whitespace();
        if self.eat(b':') {
            Ok(key)
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// Whitespace, if any. Indentation (a run of spaces) is passed eight
    /// bytes at a time; text without whitespace costs one comparison.
    #[inline(always)]
    pub fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
            at += 1;
            while let Some(word) = word_at(bytes, at) {
                let other = word ^ splat(b' ');
                if other != 0 {
                    // The first byte is the lowest.
                    at += (other.trailing_zeros() / 8) as usize;
                    break;
                }
                at += 8;
            }
        }
        self.at = at;
    }

    pub fn literal(&mut self, word: &[u8]) -> Result<(), Refusal> {
        if self.text.as_bytes().get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// A string from its opening quote to past its closing one; true when
    /// it holds an escape. Eight bytes at a time: the first quote,
    /// backslash or control character in a word is found at once.
    #[inline(always)]
    pub(super) fn string(&mut self) -> Result<bool, Refusal> {
        let bytes = self.text.as_bytes();
        let mut at = self.at + 1;
        let mut escaped = false;
        loop {
            while let Some(word) = word_at(bytes, at) {
                // A byte under 0x20, or equal to '"' or '\\', sets its high
                // bit; the lowest set is exact (borrows only run upwards).
                let quote = word ^ splat(b'"');
                let backslash = word ^ splat(b'\\');
                let special = ((quote.wrapping_sub(splat(1)) & !quote)
                    | (backslash.wrapping_sub(splat(1)) & !backslash)
                    | (word.wrapping_sub(splat(0x20)) & !word))
                    & splat(0x80);
                if special != 0 {
                    at += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                at += 8;
            }
            match bytes.get(at) {
                Some(b'"') => {
                    self.at = at + 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    match bytes.get(at + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => at += 2,
                        Some(b'u') => {
                            let hex = bytes.get(at + 2..at + 6).ok_or(Refusal::Invalid)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(Refusal::Invalid);
                            }
                            at += 6;
                        }
                        _ => return Err(Refusal::Invalid),
                    }
                }
                Some(&b) if b < 0x20 => return Err(Refusal::Invalid),
                Some(_) => at += 1,
                None => return Err(Refusal::Invalid),
            }
        }
    }

    /// A number as RFC 8259 writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`,
    /// within the range serde_json reads.
    pub(super) fn number(&mut self) -> Result<(), Refusal> {
        let start = self.at;
        let plain = self.number_syntax()?;
        // What serde_json refuses (a number out of range) is refused here
        // too; an integer of up to 18 digits, the usual number, always fits.
        if !plain && out_of_range(self.text.get(start..self.at).unwrap_or("")) {
            self.at = start;
            return Err(Refusal::Invalid);
        }
        Ok(())
    }

    /// A number's text, as serde_json checks a number it skips (of any
    /// size); true for an integer of at most 18 digits.
    fn number_syntax(&mut self) -> Result<bool, Refusal> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut at = start;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        let digits = |at: &mut usize| {
            let start = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - start
        };
        let integer = match bytes.get(at) {
            Some(b'0') => {
                at += 1;
                1
            }
            Some(b'1'..=b'9') => digits(&mut at),
            _ => return Err(Refusal::Invalid),
        };
        let mut plain = integer <= 18;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return Err(Refusal::Invalid);
            }
            plain = false;
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(Refusal::Invalid);
            }
            plain = false;
        }
        self.at = at;
        Ok(plain)
    }

    /// `"name":` of an object member, its escapes decoded as serde_json
    /// decodes them; borrowed from the text when it has none.
    pub fn key(&mut self) -> Result<Cow<'t, str>, Refusal> {
        // Decoding refuses what `member_key` would (a lone surrogate): an
        // escaped key is decoded once, not checked and then decoded.
        let (span, escaped) = self.key_span()?;
        decode_string(self.text, span, escaped).ok_or(Refusal::Invalid)
    }

    /// A string value (after any whitespace), its escapes decoded as
    /// serde_json decodes them; anything else is refused.
    pub fn string_value(&mut self) -> Result<Cow<'t, str>, Refusal> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(Refusal::Invalid);
        }
        // Decoded once: decoding refuses what `checked_string` would.
        let (span, escaped) = self.string_span()?;
        decode_string(self.text, span, escaped).ok_or(Refusal::Invalid)
    }

    /// After a value in a container closed by `close`: true past a `,`
    /// (another member follows), false past `close`.
    pub fn next_member(&mut self, close: u8) -> Result<bool, Refusal> {
        self.skip_whitespace();
        if self.eat(b',') {
            Ok(true)
        } else if self.eat(close) {
            Ok(false)
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// Reads `open` (`{` or `[`, after any whitespace) and, if the
    /// container is empty, its `close`: true when members follow.
    pub fn open(&mut self, open: u8, close: u8) -> Result<bool, Refusal> {
        self.skip_whitespace();
        if !self.eat(open) {
            return Err(Refusal::Invalid);
        }
        self.skip_whitespace();
        Ok(!self.eat(close))
    }

    /// Skips one value (after any whitespace) and all it holds, checked as
    /// serde_json checks a value it skips (`IgnoredAny`, `RawValue`): the
    /// syntax, but not a number's range nor an escape's surrogates. Open containers
    /// are kept one bit each, not by recursion, so a value nested as deep
    /// as its text allows is skipped in constant stack: serde_json's
    /// `IgnoredAny` takes any depth too.
    pub fn skip_value(&mut self) -> Result<(), Refusal> {
        let mut open = Levels::default();
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'{') => {
                    self.at += 1;
                    self.skip_whitespace();
                    if !self.eat(b'}') {
                        open.push(true);
                        self.key_span()?;
                        continue;
                    }
                }
                Some(b'[') => {
                    self.at += 1;
                    self.skip_whitespace();
                    if !self.eat(b']') {
                        open.push(false);
                        continue;
                    }
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => {
                    self.number_syntax()?;
                }
                _ => return Err(Refusal::Invalid),
            }
            // Past a value: close what ends here, up to a container with
            // another member.
            loop {
                let Some(object) = open.top() else {
                    return Ok(());
                };
                if self.next_member(if object { b'}' } else { b']' })? {
                    if object {
                        self.key_span()?;
                    }
                    break;
                }
                open.pop();
            }
        }
    }

    /// Builds one value (after any whitespace) as serde_json's `Value`
    /// would, opening at most `levels` nested containers
    /// ([`Refusal::TooDeep`] past them): the caller passes what is left of
    /// the nesting serde_json would allow at this place.
    pub fn value(&mut self, levels: usize) -> Result<Value, Refusal> {
        self.skip_whitespace();
        let start = self.at;
        match self.peek() {
            Some(b'"') => Ok(Value::String(self.string_value()?.into_owned())),
            Some(b'{') => {
                let inner = levels.checked_sub(1).ok_or(Refusal::TooDeep)?;
                let mut map = Map::new();
                if self.open(b'{', b'}')? {
                    loop {
                        let key = self.key()?;
                        let value = self.value(inner)?;
                        map.insert(key.into_owned(), value);
                        if !self.next_member(b'}')? {
                            break;
                        }
                    }
                }
                Ok(Value::Object(map))
            }
            Some(b'[') => {
                let inner = levels.checked_sub(1).ok_or(Refusal::TooDeep)?;
                let mut list = Vec::new();
                if self.open(b'[', b']')? {
                    loop {
                        list.push(self.value(inner)?);
                        if !self.next_member(b']')? {
                            break;
                        }
                    }
                }
                Ok(Value::Array(list))
            }
            Some(b't') => self.literal(b"true").map(|()| Value::Bool(true)),
            Some(b'f') => self.literal(b"false").map(|()| Value::Bool(false)),
            Some(b'n') => self.literal(b"null").map(|()| Value::Null),
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
                let text = self.text.get(start..self.at).unwrap_or("");
                number(text).map(Value::Number).ok_or(Refusal::Invalid)
            }
            _ => Err(Refusal::Invalid),
        }
    }
}

/// The containers [`Cursor::skip_value`] is inside, innermost last: one
/// bit each, set for an object. The first 64 take no allocation.
#[derive(Default)]
struct Levels {
    depth: usize,
    first: u64,
    more: Vec<u64>,
}

impl Levels {
    fn push(&mut self, object: bool) {
        let (word, bit) = (self.depth / 64, self.depth % 64);
        let slot = match word {
            0 => &mut self.first,
            _ => {
                if self.more.len() < word {
                    self.more.push(0);
                }
                match self.more.get_mut(word - 1) {
                    Some(slot) => slot,
                    None => return,
                }
            }
        };
        *slot = (*slot & !(1 << bit)) | (u64::from(object) << bit);
        self.depth += 1;
    }

    /// Whether the innermost container is an object; `None` outside any.
    fn top(&self) -> Option<bool> {
        let last = self.depth.checked_sub(1)?;
        let (word, bit) = (last / 64, last % 64);
        let bits = match word {
            0 => self.first,
            _ => *self.more.get(word - 1)?,
        };
        Some(bits >> bit & 1 == 1)
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}
