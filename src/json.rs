//! A JSON text checked and indexed in one pass: a flat list of [`Node`]s
//! that point into the text, nothing copied and nothing allocated per value.
//!
//! Building a `serde_json::Value` allocates every string, map and list, and
//! dropping it frees them again: for a review body that is most of what
//! parsing it costs (docs/benchmarks.md, "What separates `/mutate` from the
//! floor"). A [`Doc`] only records where each value is, so a reader builds
//! just the values it keeps ([`Doc::value`], [`Doc::value_without`]) and
//! skips the rest without scanning it twice.
//!
//! [`Doc::parse`] accepts exactly the JSON that `serde_json::from_str`
//! accepts, with two deliberate refusals that send the caller to
//! serde_json instead: nesting deeper than [`MAX_DEPTH`], and more than a
//! caller's node limit (its memory bound). It keeps no decoded strings:
//! [`Doc::str`] borrows a string without escapes from the text, and a
//! string with escapes is decoded by serde_json itself, as are numbers
//! other than plain integers, so every value is what serde_json would make
//! of it.

use serde_json::{Number, Value};

/// Deepest nesting [`Doc::parse`] takes on; deeper texts go to serde_json,
/// whose own limit (128) then answers.
pub const MAX_DEPTH: usize = 100;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number; its text is the node's span.
    Number,
    /// A string; its text (without the quotes) is the node's span.
    String {
        /// True when the text holds a `\` escape.
        escaped: bool,
    },
    /// An array; its span is its whole text.
    Array,
    /// An object; its span is its whole text.
    Object,
}

/// A value in a [`Doc`], in document order: a container is followed by
/// its members, and [`Node::next`] is the index past them.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// The key text of an object member (quotes excluded), else empty.
    key: Span,
    /// True when the key holds a `\` escape.
    key_escaped: bool,
    /// The value's text (see [`Kind`]).
    span: Span,
    /// Index of the node after this one and all it contains.
    next: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

impl Node {
    /// Index of the node past this one and everything it contains.
    pub fn next(&self) -> usize {
        self.next as usize
    }
}

/// Why [`Doc::parse`] gave up; the caller asks serde_json, which accepts
/// or reports the same text with its line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not JSON.
    Invalid,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More values than the caller allowed.
    TooManyValues,
}

/// A parsed JSON text: its nodes, the root first.
#[derive(Debug)]
pub struct Doc<'t> {
    text: &'t str,
    nodes: Vec<Node>,
}

impl<'t> Doc<'t> {
    /// Parses `text`, taking at most `max_values` values (each node costs
    /// 24 bytes, so this bounds the memory).
    pub fn parse(text: &'t str, max_values: usize) -> Result<Doc<'t>, Refusal> {
        if u32::try_from(text.len()).is_err() {
            return Err(Refusal::TooManyValues);
        }
        let mut parser = Parser {
            bytes: text.as_bytes(),
            at: 0,
            // About one value per 16 bytes of pretty-printed JSON.
            nodes: Vec::with_capacity((text.len() / 16).clamp(16, max_values.max(16))),
            max_values,
        };
        parser.document()?;
        Ok(Doc {
            text,
            nodes: parser.nodes,
        })
    }

    /// The node at `index`; index 0 is the root.
    pub fn node(&self, index: usize) -> Option<&Node> {
        self.nodes.get(index)
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True for no nodes (never, for a parsed document).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The members of the container at `index`: their node indices, in
    /// document order (none for a scalar).
    pub fn children(&self, index: usize) -> Children<'_, 't> {
        let (at, end) = match self.nodes.get(index) {
            Some(node) if matches!(node.kind, Kind::Array | Kind::Object) => {
                (index + 1, node.next())
            }
            _ => (0, 0),
        };
        Children { doc: self, at, end }
    }

    /// The text of the node at `index` (see [`Kind`] for what it covers).
    pub fn text(&self, index: usize) -> &'t str {
        self.nodes
            .get(index)
            .and_then(|node| self.text.get(node.span.range()))
            .unwrap_or("")
    }

    /// The JSON text of the value at `index`, as written (quotes included
    /// for a string).
    pub fn raw(&self, index: usize) -> &'t str {
        let Some(node) = self.nodes.get(index) else {
            return "";
        };
        let range = node.span.range();
        let range = match node.kind {
            Kind::String { .. } => range.start - 1..range.end + 1,
            _ => range,
        };
        self.text.get(range).unwrap_or("")
    }

    /// The key of the object member at `index`, when it has no escape.
    /// `None` for an escaped key: [`Doc::key`] decodes it.
    pub fn plain_key(&self, index: usize) -> Option<&'t str> {
        let node = self.nodes.get(index)?;
        if node.key_escaped {
            return None;
        }
        self.text.get(node.key.range())
    }

    /// The key of the object member at `index`, decoded.
    pub fn key(&self, index: usize) -> Option<std::borrow::Cow<'t, str>> {
        let node = self.nodes.get(index)?;
        decode_string(self.text, node.key, node.key_escaped)
    }

    /// The string at `index`, decoded; `None` when it is not a string.
    pub fn str(&self, index: usize) -> Option<std::borrow::Cow<'t, str>> {
        let node = self.nodes.get(index)?;
        match node.kind {
            Kind::String { escaped } => decode_string(self.text, node.span, escaped),
            _ => None,
        }
    }

    /// The value at `index` as serde_json builds it from the same text.
    /// `None` only for a value serde_json itself refuses (a number out of
    /// range, an escape that is not a character).
    pub fn value(&self, index: usize) -> Option<Value> {
        self.value_without(index, &[])
    }

    /// Like [`Doc::value`], leaving out the member that `path` names (keys
    /// from the value at `index`), if there is one: `["metadata",
    /// "managedFields"]` leaves out an object's `metadata.managedFields`.
    pub fn value_without(&self, index: usize, path: &[&str]) -> Option<Value> {
        let node = self.nodes.get(index)?;
        Some(match node.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(b),
            Kind::Number => Value::Number(number(self.text(index))?),
            Kind::String { .. } => Value::String(self.str(index)?.into_owned()),
            Kind::Array => {
                let mut items = Vec::new();
                for child in self.children(index) {
                    items.push(self.value_without(child, &[])?);
                }
                Value::Array(items)
            }
            Kind::Object => {
                let mut map = serde_json::Map::new();
                for child in self.children(index) {
                    let key = self.key(child)?;
                    let below = match path.split_first() {
                        Some((first, rest)) if *first == key => {
                            if rest.is_empty() {
                                continue;
                            }
                            rest
                        }
                        _ => &[],
                    };
                    let value = self.value_without(child, below)?;
                    map.insert(key.into_owned(), value);
                }
                Value::Object(map)
            }
        })
    }
}

/// The members of a container, by node index.
pub struct Children<'d, 't> {
    doc: &'d Doc<'t>,
    at: usize,
    end: usize,
}

impl Iterator for Children<'_, '_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.at >= self.end {
            return None;
        }
        let index = self.at;
        // A malformed `next` (never made by the parser) ends the walk
        // instead of looping.
        self.at = self
            .doc
            .nodes
            .get(index)
            .map_or(self.end, |node| node.next().max(index + 1));
        Some(index)
    }
}

/// The text of a string: borrowed when it has no escape, else decoded by
/// serde_json (so surrogate pairs and refusals are its own).
fn decode_string(text: &str, span: Span, escaped: bool) -> Option<std::borrow::Cow<'_, str>> {
    if !escaped {
        return text.get(span.range()).map(std::borrow::Cow::Borrowed);
    }
    let range = span.range();
    let quoted = text.get(range.start.checked_sub(1)?..range.end + 1)?;
    serde_json::from_str::<String>(quoted)
        .ok()
        .map(std::borrow::Cow::Owned)
}

/// A number as serde_json makes it: plain integers here, the rest (a
/// fraction, an exponent, `-0`, past 64 bits) by serde_json itself.
fn number(text: &str) -> Option<Number> {
    let digits = text.strip_prefix('-');
    let plain = |d: &str| !d.is_empty() && d.len() <= 18 && d.bytes().all(|b| b.is_ascii_digit());
    match digits {
        None if plain(text) => text.parse::<u64>().ok().map(Number::from),
        Some(d) if plain(d) && d.bytes().any(|b| b != b'0') => {
            text.parse::<i64>().ok().map(Number::from)
        }
        _ => match serde_json::from_str::<Value>(text).ok()? {
            Value::Number(n) => Some(n),
            _ => None,
        },
    }
}

struct Parser<'b> {
    bytes: &'b [u8],
    at: usize,
    nodes: Vec<Node>,
    max_values: usize,
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

impl Parser<'_> {
    fn document(&mut self) -> Result<(), Refusal> {
        self.value(Span::default(), false, 0)?;
        self.skip_whitespace();
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// One value and everything in it, as an object member under `key`
    /// (empty for an array element or the root). Recursion stops at
    /// [`MAX_DEPTH`], so the stack it takes is bounded.
    fn value(&mut self, key: Span, key_escaped: bool, depth: usize) -> Result<(), Refusal> {
        self.skip_whitespace();
        if self.nodes.len() >= self.max_values {
            return Err(Refusal::TooManyValues);
        }
        let start = self.at;
        let index = self.nodes.len();
        let (kind, span) = match self.bytes.get(start) {
            Some(b'"') => {
                let escaped = self.string()?;
                let span = Span {
                    start: (start + 1) as u32,
                    len: (self.at - start - 2) as u32,
                };
                (Kind::String { escaped }, span)
            }
            Some(&open @ (b'{' | b'[')) => {
                if depth >= MAX_DEPTH {
                    return Err(Refusal::TooDeep);
                }
                self.at += 1;
                let kind = if open == b'{' {
                    Kind::Object
                } else {
                    Kind::Array
                };
                // The span and `next` are set once the container closes.
                self.nodes.push(Node {
                    kind,
                    key,
                    key_escaped,
                    span: Span::default(),
                    next: 0,
                });
                if open == b'{' {
                    self.object_members(depth)?;
                } else {
                    self.array_elements(depth)?;
                }
                let next = self.nodes.len() as u32;
                let at = self.at;
                if let Some(node) = self.nodes.get_mut(index) {
                    node.next = next;
                    node.span = Span {
                        start: start as u32,
                        len: (at - start) as u32,
                    };
                }
                return Ok(());
            }
            Some(b't') => (
                self.literal(b"true", Kind::Bool(true))?,
                self.span_from(start),
            ),
            Some(b'f') => (
                self.literal(b"false", Kind::Bool(false))?,
                self.span_from(start),
            ),
            Some(b'n') => (self.literal(b"null", Kind::Null)?, self.span_from(start)),
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
                (Kind::Number, self.span_from(start))
            }
            _ => return Err(Refusal::Invalid),
        };
        self.nodes.push(Node {
            kind,
            key,
            key_escaped,
            span,
            next: (index + 1) as u32,
        });
        Ok(())
    }

    fn span_from(&self, start: usize) -> Span {
        Span {
            start: start as u32,
            len: (self.at - start) as u32,
        }
    }

    /// After `{`: the members and the closing `}`.
    fn object_members(&mut self, depth: usize) -> Result<(), Refusal> {
        self.skip_whitespace();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            let (key, key_escaped) = self.member_key()?;
            self.value(key, key_escaped, depth + 1)?;
            self.skip_whitespace();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Refusal::Invalid),
            }
        }
    }

    /// After `[`: the elements and the closing `]`.
    fn array_elements(&mut self, depth: usize) -> Result<(), Refusal> {
        self.skip_whitespace();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.value(Span::default(), false, depth + 1)?;
            self.skip_whitespace();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Refusal::Invalid),
            }
        }
    }

    /// `"key":` of an object member, and whether the key has an escape.
    #[inline(always)]
    fn member_key(&mut self) -> Result<(Span, bool), Refusal> {
        self.skip_whitespace();
        if self.bytes.get(self.at) != Some(&b'"') {
            return Err(Refusal::Invalid);
        }
        let start = self.at;
        let escaped = self.string()?;
        let span = Span {
            start: (start + 1) as u32,
            len: (self.at - start - 2) as u32,
        };
        self.skip_whitespace();
        if self.bytes.get(self.at) != Some(&b':') {
            return Err(Refusal::Invalid);
        }
        self.at += 1;
        Ok((span, escaped))
    }

    #[inline(always)]
    fn skip_whitespace(&mut self) {
        let bytes = self.bytes;
        let mut at = self.at;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
            at += 1;
        }
        self.at = at;
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, Refusal> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(kind)
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// A string from its opening quote to past its closing one; true when
    /// it holds an escape. Eight bytes at a time: the first quote,
    /// backslash or control character in a word is found at once.
    #[inline(always)]
    fn string(&mut self) -> Result<bool, Refusal> {
        let bytes = self.bytes;
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

    /// A number as RFC 8259 writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), Refusal> {
        let bytes = self.bytes;
        let mut at = self.at;
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
        match bytes.get(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => {
                digits(&mut at);
            }
            _ => return Err(Refusal::Invalid),
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return Err(Refusal::Invalid);
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(Refusal::Invalid);
            }
        }
        self.at = at;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json makes of `text`, and what the document makes of it.
    fn both(text: &str) -> (Option<Value>, Option<Value>) {
        let serde = serde_json::from_str::<Value>(text).ok();
        let doc = Doc::parse(text, usize::MAX)
            .ok()
            .and_then(|doc| doc.value(0));
        (serde, doc)
    }

    #[test]
    fn documents_are_what_serde_json_makes_of_the_same_text() {
        for text in [
            "null",
            " true ",
            "false",
            "0",
            "-1",
            "-0",
            "12345678901234567890",
            "-9223372036854775809",
            "1.5",
            "1e400",
            "-1.0e-5",
            "2E+3",
            "\"plain\"",
            r#""esc\"aped\\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00""#,
            r#""\ud800""#,
            "\"ünïcødé and more than eight bytes\"",
            "[]",
            "{}",
            "[1, [2, [3, []]], {}]",
            r#"{"a": 1, "b": {"c": [true, null]}, "a": 2}"#,
            r#"{"k\u0065y": 1}"#,
            " { \"a\" : [ 1 , 2 ] } ",
            // Not JSON, both refuse.
            "",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "[1 2]",
            "{\"a\" 1}",
            "{1: 2}",
            "\"a",
            "\"\u{1}\"",
            "\"\\x\"",
            "\"\\u12G4\"",
            "tru",
            "nul",
            "[1] x",
            "[",
            "]",
            "{\"a\":}",
            "NaN",
        ] {
            let (serde, doc) = both(text);
            assert_eq!(serde, doc, "{text:?}");
        }
    }

    #[test]
    fn every_fixture_body_is_what_serde_json_makes_of_it() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission-reviews"
        );
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            let (serde, doc) = both(&text);
            assert!(serde.is_some(), "{}", path.display());
            assert_eq!(serde, doc, "{}", path.display());
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} fixtures");
    }

    #[test]
    fn strings_find_their_end_across_every_alignment() {
        // The eight-byte scan must stop at a quote, backslash or control
        // byte wherever it falls in a word.
        for len in 0..40 {
            for special in ["\\\"", "\\\\", "\\n", "\u{1}", "\""] {
                for at in 0..=len {
                    let mut body = "x".repeat(len);
                    body.insert_str(at, special);
                    let text = format!("[\"{body}\", 1]");
                    let (serde, doc) = both(&text);
                    assert_eq!(serde, doc, "{text:?}");
                }
            }
        }
    }

    #[test]
    fn nesting_past_the_limit_is_refused_without_recursion() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(Doc::parse(&deep(MAX_DEPTH), usize::MAX).is_ok());
        assert_eq!(
            Doc::parse(&deep(MAX_DEPTH + 1), usize::MAX).err(),
            Some(Refusal::TooDeep)
        );
        // Far deeper than any stack would take recursively.
        assert_eq!(
            Doc::parse(&"[".repeat(1 << 20), usize::MAX).err(),
            Some(Refusal::TooDeep)
        );
    }

    #[test]
    fn a_document_holds_no_more_values_than_its_limit() {
        let text = format!("[{}0]", "0,".repeat(999));
        assert_eq!(Doc::parse(&text, 1_001).map(|d| d.len()).ok(), Some(1_001));
        assert_eq!(Doc::parse(&text, 1_000).err(), Some(Refusal::TooManyValues));
    }

    #[test]
    fn members_raw_text_keys_and_skips() {
        let text =
            r#"{"metadata": {"name": "a", "managedFields": [1]}, "s\"k": "v", "n": [1, 2.5]}"#;
        let doc = Doc::parse(text, usize::MAX).expect("json");
        let members: Vec<usize> = doc.children(0).collect();
        assert_eq!(members.len(), 3);
        assert_eq!(doc.plain_key(members[0]), Some("metadata"));
        assert_eq!(doc.plain_key(members[1]), None, "escaped");
        assert_eq!(doc.key(members[1]).as_deref(), Some("s\"k"));
        assert_eq!(doc.raw(members[1]), "\"v\"");
        assert_eq!(doc.raw(members[2]), "[1, 2.5]");
        assert_eq!(doc.raw(0), text);
        let without = doc
            .value_without(0, &["metadata", "managedFields"])
            .expect("value");
        assert_eq!(
            without,
            serde_json::json!({"metadata": {"name": "a"}, "s\"k": "v", "n": [1, 2.5]})
        );
        // Only at that path.
        let text = r#"{"spec": {"managedFields": 1}, "metadata": "m"}"#;
        let doc = Doc::parse(text, usize::MAX).expect("json");
        assert_eq!(
            doc.value_without(0, &["metadata", "managedFields"]),
            serde_json::from_str(text).ok()
        );
    }

    use proptest::prelude::*;

    /// Any JSON value: every kind, keys and strings with escapes and
    /// multi-byte characters, numbers of every shape serde_json makes.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\"\\\n\u{1}é😀 ]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec(("[a-z\"é]{0,6}", inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_written_compact_or_pretty_reads_back_as_serde_json_reads_it(
            value in json_value(),
            pretty in any::<bool>(),
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            }
            .expect("serialize");
            let (serde, doc) = both(&text);
            prop_assert_eq!(serde, doc, "{}", text);
        }

        #[test]
        fn any_text_is_refused_or_read_as_serde_json_reads_it(
            text in "[\\[\\]{}:,\"\\\\0-9eE.+\\- \ntrufalsn\u{1}ué]{0,40}",
        ) {
            let (serde, doc) = both(&text);
            // Refused by the index (too deep is the only other refusal, and
            // forty bytes cannot nest that far) means refused by serde_json.
            prop_assert_eq!(serde, doc, "{:?}", text);
        }

        #[test]
        fn a_valid_text_cut_anywhere_is_refused_by_both(
            value in json_value(),
            cut in any::<prop::sample::Index>(),
        ) {
            let text = serde_json::to_string(&value).expect("serialize");
            let mut at = cut.index(text.len().max(1));
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let (serde, doc) = both(&text[..at]);
            prop_assert_eq!(serde, doc, "{:?}", &text[..at]);
        }
    }
}
