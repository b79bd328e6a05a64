//! A JSON text checked and indexed in one pass: a flat list of [`Node`]s
//! that point into the text, nothing copied and nothing allocated per value.
//!
//! Building a `serde_json::Value` allocates every string, map and list, and
//! dropping it frees them again: for a review body that is most of what
//! parsing it costs (docs/benchmarks.md, "What separates `/mutate` from the
//! floor"). A [`Doc`] only records where each value is, so a reader builds
//! just the values it keeps ([`JsonRef::to_value`]) and skips the rest
//! without scanning it twice.
//!
//! [`Doc::parse`] accepts exactly the JSON that `serde_json::from_str`
//! accepts (numbers out of range and lone surrogates included), with two
//! deliberate refusals that send the caller to serde_json instead: nesting
//! deeper than [`MAX_DEPTH`], and more than a caller's node limit (its
//! memory bound). It keeps no decoded strings: a string without escapes is
//! borrowed from the text, and a string with escapes is
//! decoded by serde_json itself, as are numbers other than plain integers,
//! so every value is what serde_json would make of it.
//!
//! [`JsonRef`] reads a value wherever it is, in a parsed text or in a
//! `serde_json::Value`, and every reading gives what the `Value` parsed
//! from the same text would: members in key order, a repeated key's last
//! value, serde_json's numbers and equality. An object with more than
//! [`INDEXED_MEMBERS`] members is searched through a sorted index built at
//! its first lookup, so no text makes a lookup linear in its size. The unit
//! and property tests here, and the `json` fuzz target, hold both to
//! serde_json.

use serde_json::{Number, Value};

mod cursor;

pub use cursor::Cursor;

/// Deepest nesting [`Doc::parse`] takes on; deeper texts go to serde_json,
/// whose own limit (128) then answers.
pub const MAX_DEPTH: usize = 100;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
struct Node {
    /// What it is.
    kind: Kind,
    /// The key text of an object member (quotes excluded), else empty.
    key: Span,
    /// True when the key holds a `\` escape.
    key_escaped: bool,
    /// The value's text (see [`Kind`]).
    span: Span,
    /// Index of the node after this one and all it contains.
    next: u32,
    /// How many members or elements a container has (repeated keys
    /// counted each time); 0 for anything else.
    count: u32,
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
    fn next(&self) -> usize {
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
    /// For each object of more than [`INDEXED_MEMBERS`] members read so far:
    /// its members sorted by key, each key once (its last), so that a
    /// lookup is a binary search however many members a text gives it.
    sorted: std::cell::RefCell<std::collections::HashMap<u32, std::rc::Rc<[u32]>>>,
}

/// The memory one value of a [`Doc`] takes.
pub const NODE_BYTES: usize = std::mem::size_of::<Node>();
// What callers' memory bounds reckon with.
const _: () = assert!(NODE_BYTES <= 28);

/// Objects with more members than this get a sorted index when first read;
/// smaller ones are scanned.
pub const INDEXED_MEMBERS: usize = 16;

impl<'t> Doc<'t> {
    /// Parses `text`, taking at most `max_values` values: each costs
    /// [`NODE_BYTES`], so this bounds the memory. A text of 4 GiB or more
    /// is refused as too many values.
    pub fn parse(text: &'t str, max_values: usize) -> Result<Doc<'t>, Refusal> {
        if u32::try_from(text.len()).is_err() {
            return Err(Refusal::TooManyValues);
        }
        let mut parser = Parser {
            cursor: Cursor::new(text),
            // About one value per 16 bytes of pretty-printed JSON, up to
            // what a review holds; a larger text grows the list as it goes,
            // so a long string alone reserves nothing for values it lacks.
            nodes: Vec::with_capacity((text.len() / 16).clamp(16, 4096).min(max_values)),
            max_values,
        };
        parser.document()?;
        Ok(Doc {
            text,
            nodes: parser.nodes,
            sorted: Default::default(),
        })
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
    fn children(&self, index: usize) -> Children<'_, 't> {
        let (at, end) = match self.nodes.get(index) {
            Some(node) if matches!(node.kind, Kind::Array | Kind::Object) => {
                (index + 1, node.next())
            }
            _ => (0, 0),
        };
        Children { doc: self, at, end }
    }

    /// The members of the object at `index` sorted by key, each key once
    /// (its last value), skipping keys serde_json would refuse; kept for
    /// objects of more than [`INDEXED_MEMBERS`] members.
    fn sorted_members(&self, index: usize) -> std::rc::Rc<[u32]> {
        if let Some(kept) = self.sorted.borrow().get(&(index as u32)) {
            return kept.clone();
        }
        let mut members: Vec<(std::borrow::Cow<'t, str>, u32)> = self
            .children(index)
            .filter_map(|child| Some((self.key(child)?, child as u32)))
            .collect();
        // Stable: of equal keys the last stays last, and is kept.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(std::borrow::Cow<'t, str>, u32)> = Vec::with_capacity(members.len());
        for member in members {
            match kept.last_mut() {
                Some(last) if last.0 == member.0 => *last = member,
                _ => kept.push(member),
            }
        }
        let kept: std::rc::Rc<[u32]> = kept.into_iter().map(|(_, child)| child).collect();
        if kept.len() > INDEXED_MEMBERS {
            self.sorted.borrow_mut().insert(index as u32, kept.clone());
        }
        kept
    }

    /// True when the object at `index` has more members than are scanned.
    fn is_large_object(&self, index: usize) -> bool {
        self.nodes
            .get(index)
            .is_some_and(|node| node.count as usize > INDEXED_MEMBERS)
    }

    /// True when the key of the member at `index` is `key`: lengths first,
    /// then bytes; an escaped key decoded.
    fn key_is(&self, index: usize, key: &str) -> bool {
        let Some(node) = self.nodes.get(index) else {
            return false;
        };
        if node.key_escaped {
            return self.key(index).is_some_and(|decoded| decoded == key);
        }
        node.key.len as usize == key.len()
            && self.text.as_bytes().get(node.key.range()) == Some(key.as_bytes())
    }

    /// The text of the node at `index` (see [`Kind`] for what it covers).
    fn text(&self, index: usize) -> &'t str {
        self.nodes
            .get(index)
            .and_then(|node| self.text.get(node.span.range()))
            .unwrap_or("")
    }

    /// The key of the object member at `index`, decoded.
    fn key(&self, index: usize) -> Option<std::borrow::Cow<'t, str>> {
        let node = self.nodes.get(index)?;
        decode_string(self.text, node.key, node.key_escaped)
    }

    /// The string at `index`, decoded; `None` when it is not a string.
    fn str(&self, index: usize) -> Option<std::borrow::Cow<'t, str>> {
        let node = self.nodes.get(index)?;
        match node.kind {
            Kind::String { escaped } => decode_string(self.text, node.span, escaped),
            _ => None,
        }
    }

    /// The value at `index` as serde_json builds it from the same text.
    /// `None` only for a value serde_json itself refuses, which
    /// [`Doc::parse`] does not index.
    fn value(&self, index: usize) -> Option<Value> {
        let node = self.nodes.get(index)?;
        Some(match node.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(b),
            Kind::Number => Value::Number(number(self.text(index))?),
            Kind::String { .. } => Value::String(self.str(index)?.into_owned()),
            Kind::Array => Value::Array(
                self.children(index)
                    .map(|child| self.value(child))
                    .collect::<Option<_>>()?,
            ),
            Kind::Object => {
                let mut map = serde_json::Map::new();
                for child in self.children(index) {
                    map.insert(self.key(child)?.into_owned(), self.value(child)?);
                }
                Value::Object(map)
            }
        })
    }
}

/// What a JSON value is, whatever holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

/// A value to read: a node of a parsed text, or a `serde_json::Value`
/// (a rule's literal, a value built while evaluating). Every reading gives
/// what the same value parsed into a `Value` would: an object's members by
/// key order, a repeated key's last value, serde_json's numbers.
#[derive(Debug, Clone, Copy)]
pub enum JsonRef<'a> {
    /// A `serde_json::Value`.
    Value(&'a Value),
    /// The node at this index of a parsed text.
    Text(&'a Doc<'a>, u32),
}

impl<'a> From<&'a Value> for JsonRef<'a> {
    fn from(value: &'a Value) -> Self {
        JsonRef::Value(value)
    }
}

impl<'a> JsonRef<'a> {
    /// The root of a parsed text.
    pub fn root(doc: &'a Doc<'a>) -> Self {
        JsonRef::Text(doc, 0)
    }

    fn node(doc: &'a Doc<'a>, index: u32) -> Option<&'a Node> {
        doc.nodes.get(index as usize)
    }

    /// What it is (`Null` for a node outside its text, which a `JsonRef`
    /// made here never points at).
    pub fn kind(self) -> JsonKind {
        match self {
            JsonRef::Value(value) => match value {
                Value::Null => JsonKind::Null,
                Value::Bool(_) => JsonKind::Bool,
                Value::Number(_) => JsonKind::Number,
                Value::String(_) => JsonKind::String,
                Value::Array(_) => JsonKind::Array,
                Value::Object(_) => JsonKind::Object,
            },
            JsonRef::Text(doc, index) => match Self::node(doc, index).map(|node| node.kind) {
                None | Some(Kind::Null) => JsonKind::Null,
                Some(Kind::Bool(_)) => JsonKind::Bool,
                Some(Kind::Number) => JsonKind::Number,
                Some(Kind::String { .. }) => JsonKind::String,
                Some(Kind::Array) => JsonKind::Array,
                Some(Kind::Object) => JsonKind::Object,
            },
        }
    }

    /// The value of an object's member `key` (its last, when the text
    /// repeats it); `None` when this is not an object or has no such key.
    pub fn get(self, key: &str) -> Option<JsonRef<'a>> {
        match self {
            JsonRef::Value(value) => value.as_object()?.get(key).map(JsonRef::Value),
            JsonRef::Text(doc, index) => {
                if Self::node(doc, index)?.kind != Kind::Object {
                    return None;
                }
                if doc.is_large_object(index as usize) {
                    let sorted = doc.sorted_members(index as usize);
                    let at = sorted
                        .binary_search_by(|&child| {
                            doc.key(child as usize)
                                .map_or(std::cmp::Ordering::Less, |k| (*k).cmp(key))
                        })
                        .ok()?;
                    return sorted.get(at).map(|&child| JsonRef::Text(doc, child));
                }
                let mut found = None;
                for child in doc.children(index as usize) {
                    if doc.key_is(child, key) {
                        found = Some(child);
                    }
                }
                found.map(|child| JsonRef::Text(doc, child as u32))
            }
        }
    }

    /// An array's element at `index`; in a text, found by walking the
    /// elements before it ([`JsonRef::elements`] walks all of them once).
    pub fn at(self, index: usize) -> Option<JsonRef<'a>> {
        match self {
            JsonRef::Value(value) => value.as_array()?.get(index).map(JsonRef::Value),
            JsonRef::Text(doc, node) => {
                if Self::node(doc, node)?.kind != Kind::Array {
                    return None;
                }
                doc.children(node as usize)
                    .nth(index)
                    .map(|child| JsonRef::Text(doc, child as u32))
            }
        }
    }

    /// An array's elements, in order (none for anything else).
    pub fn elements(self) -> Vec<JsonRef<'a>> {
        match self {
            JsonRef::Value(Value::Array(list)) => list.iter().map(JsonRef::Value).collect(),
            JsonRef::Value(_) => Vec::new(),
            JsonRef::Text(doc, index) => match Self::node(doc, index) {
                Some(node) if node.kind == Kind::Array => doc
                    .children(index as usize)
                    .map(|child| JsonRef::Text(doc, child as u32))
                    .collect(),
                _ => Vec::new(),
            },
        }
    }

    /// An object's members by key, as a `Value`'s map has them: sorted,
    /// each key once with its last value (none for anything else, or for
    /// a member whose key serde_json would refuse).
    pub fn members(self) -> Vec<(std::borrow::Cow<'a, str>, JsonRef<'a>)> {
        match self {
            JsonRef::Value(Value::Object(map)) => map
                .iter()
                .map(|(key, value)| {
                    (
                        std::borrow::Cow::Borrowed(key.as_str()),
                        JsonRef::Value(value),
                    )
                })
                .collect(),
            JsonRef::Value(_) => Vec::new(),
            JsonRef::Text(doc, index) => {
                if Self::node(doc, index).map(|node| node.kind) != Some(Kind::Object) {
                    return Vec::new();
                }
                doc.sorted_members(index as usize)
                    .iter()
                    .filter_map(|&child| {
                        Some((doc.key(child as usize)?, JsonRef::Text(doc, child)))
                    })
                    .collect()
            }
        }
    }

    /// How many elements an array has, or distinct keys an object; 0 for
    /// anything else.
    pub fn len(self) -> usize {
        match self.kind() {
            JsonKind::Array => match self {
                JsonRef::Value(value) => value.as_array().map_or(0, Vec::len),
                JsonRef::Text(doc, index) => {
                    Self::node(doc, index).map_or(0, |node| node.count as usize)
                }
            },
            JsonKind::Object => match self {
                JsonRef::Value(value) => value.as_object().map_or(0, serde_json::Map::len),
                JsonRef::Text(doc, index) => doc.sorted_members(index as usize).len(),
            },
            _ => 0,
        }
    }

    /// True for an empty array or object, and for anything else.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The string, decoded.
    pub fn as_str(self) -> Option<std::borrow::Cow<'a, str>> {
        match self {
            JsonRef::Value(value) => value.as_str().map(std::borrow::Cow::Borrowed),
            JsonRef::Text(doc, index) => doc.str(index as usize),
        }
    }

    /// The number, as serde_json makes it.
    pub fn as_number(self) -> Option<Number> {
        match self {
            JsonRef::Value(Value::Number(number)) => Some(number.clone()),
            JsonRef::Value(_) => None,
            JsonRef::Text(doc, index) => match Self::node(doc, index)?.kind {
                Kind::Number => number(doc.text(index as usize)),
                _ => None,
            },
        }
    }

    /// The boolean.
    pub fn as_bool(self) -> Option<bool> {
        match self {
            JsonRef::Value(value) => value.as_bool(),
            JsonRef::Text(doc, index) => match Self::node(doc, index)?.kind {
                Kind::Bool(b) => Some(b),
                _ => None,
            },
        }
    }

    /// True for `null`.
    pub fn is_null(self) -> bool {
        self.kind() == JsonKind::Null
    }

    /// The value as a `serde_json::Value` (`Null` for a text value serde_json
    /// would refuse, which [`Doc::parse`] does not index).
    pub fn to_value(self) -> Value {
        match self {
            JsonRef::Value(value) => value.clone(),
            JsonRef::Text(doc, index) => doc.value(index as usize).unwrap_or(Value::Null),
        }
    }
}

/// Equal as the two values parsed into `Value`s are equal (numbers as
/// serde_json compares them: `1` is not `1.0`).
impl PartialEq for JsonRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (*self, *other);
        if a.kind() != b.kind() {
            return false;
        }
        match a.kind() {
            JsonKind::Null => true,
            JsonKind::Bool => a.as_bool() == b.as_bool(),
            JsonKind::Number => a.as_number() == b.as_number(),
            JsonKind::String => a.as_str() == b.as_str(),
            JsonKind::Array => {
                let (x, y) = (a.elements(), b.elements());
                x.len() == y.len() && x.iter().zip(&y).all(|(x, y)| x == y)
            }
            JsonKind::Object => {
                let (x, y) = (a.members(), b.members());
                x.len() == y.len()
                    && x.iter()
                        .zip(&y)
                        .all(|((kx, vx), (ky, vy))| kx == ky && vx == vy)
            }
        }
    }
}

/// The members of a container, by node index.
struct Children<'d, 't> {
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

/// True for a string with escapes serde_json refuses (a lone surrogate).
#[cold]
#[inline(never)]
fn refused_escape(text: &str, span: Span) -> bool {
    decode_string(text, span, true).is_none()
}

/// True for a number serde_json refuses: out of range.
#[cold]
#[inline(never)]
fn out_of_range(text: &str) -> bool {
    number(text).is_none()
}

/// True for an integer of at most 18 digits, other than `-0`: one that
/// fits 64 bits and that [`number`] reads without serde_json.
fn is_plain_integer(text: &str) -> bool {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(negative && digits.bytes().all(|b| b == b'0'))
}

/// A number as serde_json makes it: plain integers here, the rest (a
/// fraction, an exponent, `-0`, past 64 bits) by serde_json itself.
fn number(text: &str) -> Option<Number> {
    if is_plain_integer(text) {
        return if text.starts_with('-') {
            text.parse::<i64>().ok().map(Number::from)
        } else {
            text.parse::<u64>().ok().map(Number::from)
        };
    }
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Number(n) => Some(n),
        _ => None,
    }
}

struct Parser<'b> {
    /// The text, checked UTF-8, and how far it has been read.
    cursor: Cursor<'b>,
    nodes: Vec<Node>,
    max_values: usize,
}

impl<'b> Parser<'b> {
    fn document(&mut self) -> Result<(), Refusal> {
        self.value(Span::default(), false, 0)?;
        self.cursor.skip_whitespace();
        if self.cursor.at() == self.cursor.text().len() {
            Ok(())
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// One value and everything in it, as an object member under `key`
    /// (empty for an array element or the root). Recursion stops at
    /// [`MAX_DEPTH`], so the stack it takes is bounded.
    fn value(&mut self, key: Span, key_escaped: bool, depth: usize) -> Result<(), Refusal> {
        self.cursor.skip_whitespace();
        if self.nodes.len() >= self.max_values {
            return Err(Refusal::TooManyValues);
        }
        let start = self.cursor.at();
        let index = self.nodes.len();
        let (kind, span) = match self.cursor.text().as_bytes().get(start) {
            Some(b'"') => {
                let (span, escaped) = self.cursor.checked_string()?;
                (Kind::String { escaped }, span)
            }
            Some(&open @ (b'{' | b'[')) => {
                if depth >= MAX_DEPTH {
                    return Err(Refusal::TooDeep);
                }
                self.cursor.eat(open);
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
                    count: 0,
                });
                // Each kind of container gets its own copy of the loop.
                let count = if open == b'{' {
                    self.members(true, depth)?
                } else {
                    self.members(false, depth)?
                };
                let next = self.nodes.len() as u32;
                let at = self.cursor.at();
                if let Some(node) = self.nodes.get_mut(index) {
                    node.next = next;
                    node.count = count;
                    node.span = Span {
                        start: start as u32,
                        len: (at - start) as u32,
                    };
                }
                return Ok(());
            }
            Some(b't') => (
                {
                    self.cursor.literal(b"true")?;
                    Kind::Bool(true)
                },
                self.span_from(start),
            ),
            Some(b'f') => (
                {
                    self.cursor.literal(b"false")?;
                    Kind::Bool(false)
                },
                self.span_from(start),
            ),
            Some(b'n') => (
                {
                    self.cursor.literal(b"null")?;
                    Kind::Null
                },
                self.span_from(start),
            ),
            Some(b'-' | b'0'..=b'9') => {
                self.cursor.number()?;
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
            count: 0,
        });
        Ok(())
    }

    fn span_from(&self, start: usize) -> Span {
        Span {
            start: start as u32,
            len: (self.cursor.at() - start) as u32,
        }
    }

    /// After `{` or `[`: the members (each with its key, in an object) and
    /// the closing `}` or `]`; how many members.
    #[inline(always)]
    fn members(&mut self, object: bool, depth: usize) -> Result<u32, Refusal> {
        let close = if object { b'}' } else { b']' };
        self.cursor.skip_whitespace();
        if self.cursor.eat(close) {
            return Ok(0);
        }
        let mut count = 0u32;
        loop {
            let (key, key_escaped) = if object {
                self.cursor.member_key()?
            } else {
                (Span::default(), false)
            };
            self.value(key, key_escaped, depth + 1)?;
            count += 1;
            self.cursor.skip_whitespace();
            if !self.cursor.eat(b',') {
                return if self.cursor.eat(close) {
                    Ok(count)
                } else {
                    Err(Refusal::Invalid)
                };
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What serde_json makes of `text`, and what the document makes of it.
    /// Also asserts that the index accepts exactly what serde_json does, and
    /// that a [`Cursor`] builds and skips as serde_json does.
    fn both(text: &str) -> (Option<Value>, Option<Value>) {
        let serde = serde_json::from_str::<Value>(text).ok();
        let parsed = Doc::parse(text, usize::MAX);
        assert_eq!(
            parsed.is_ok(),
            serde.is_some(),
            "{text:?}: {:?}",
            parsed.err()
        );
        let doc = parsed.ok().and_then(|doc| doc.value(0));
        // A cursor builds the same value, and skips the same texts (a
        // lone surrogate aside, which serde_json skips but never builds).
        let mut cursor = Cursor::new(text);
        let built = cursor.value(127).ok().filter(|_| {
            cursor.skip_whitespace();
            cursor.at() == text.len()
        });
        assert_eq!(built, serde, "{text:?}");
        let mut cursor = Cursor::new(text);
        let skipped = cursor.skip_value().is_ok() && {
            cursor.skip_whitespace();
            cursor.at() == text.len()
        };
        let raw = serde_json::from_str::<Box<serde_json::value::RawValue>>(text).is_ok();
        assert_eq!(skipped, raw, "{text:?}");
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
            "[1E400, 0]",
            "-1e-400",
            "222222222222222222222222222222222222222222222222222222222222222222E2",
            r#""\udc00 lone""#,
            r#"{"\ud800": 1}"#,
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
        let mut checked = 0;
        for (name, body) in crate::review::fixture_bodies() {
            let text = std::str::from_utf8(&body).expect("UTF-8");
            let (serde, doc) = both(text);
            assert!(serde.is_some(), "{name}");
            assert_eq!(serde, doc, "{name}");
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
    fn a_value_costs_a_node_and_a_long_string_reserves_no_nodes() {
        let text = format!("\"{}\"", "x".repeat(1 << 20));
        let doc = Doc::parse(&text, 1 << 20).expect("index");
        assert_eq!(doc.len(), 1);
        assert!(doc.nodes.capacity() <= 4096, "{}", doc.nodes.capacity());
    }

    use proptest::prelude::*;

    /// Any JSON value: every kind, keys and strings with escapes and
    /// multi-byte characters, numbers of every shape serde_json makes.
    pub(crate) fn json_value() -> impl Strategy<Value = Value> {
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
                prop::collection::vec(("[a-z\"é]{0,6}", inner), 0..24)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// Every path of keys and indices through `value`, up to `limit`.
    fn paths(
        value: &Value,
        prefix: Vec<Result<String, usize>>,
        out: &mut Vec<Vec<Result<String, usize>>>,
        limit: usize,
    ) {
        if out.len() >= limit {
            return;
        }
        out.push(prefix.clone());
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let mut next = prefix.clone();
                    next.push(Ok(key.clone()));
                    paths(child, next, out, limit);
                }
                // A key that is not there.
                let mut missing = prefix.clone();
                missing.push(Ok("absent".to_owned()));
                out.push(missing);
            }
            Value::Array(list) => {
                for (i, child) in list.iter().enumerate() {
                    let mut next = prefix.clone();
                    next.push(Err(i));
                    paths(child, next, out, limit);
                }
                let mut past = prefix;
                past.push(Err(list.len()));
                out.push(past);
            }
            _ => {}
        }
    }

    /// Reads `text` through a document and through serde_json's `Value`
    /// along every path, and asserts that every reading agrees.
    fn assert_reads_agree(text: &str) {
        let value: Value = serde_json::from_str(text).expect("JSON");
        let doc = Doc::parse(text, usize::MAX).expect("index");
        let mut all = Vec::new();
        paths(&value, Vec::new(), &mut all, 200);
        for path in all {
            let mut by_text = Some(JsonRef::root(&doc));
            let mut by_value = Some(&value);
            for step in &path {
                by_text = by_text.and_then(|r| match step {
                    Ok(key) => r.get(key),
                    Err(i) => r.at(*i),
                });
                by_value = by_value.and_then(|v| match step {
                    Ok(key) => v.get(key.as_str()),
                    Err(i) => v.get(*i),
                });
            }
            let (Some(r), Some(v)) = (by_text, by_value) else {
                assert!(by_text.is_none() && by_value.is_none(), "{text}: {path:?}");
                continue;
            };
            let at = || format!("{text}: {path:?}");
            assert_eq!(r.to_value(), *v, "{}", at());
            assert!(r == JsonRef::Value(v), "{}", at());
            assert_eq!(r.len(), JsonRef::Value(v).len(), "{}", at());
            assert_eq!(r.as_str().as_deref(), v.as_str(), "{}", at());
            assert_eq!(r.as_bool(), v.as_bool(), "{}", at());
            assert_eq!(r.as_number(), v.as_number().cloned(), "{}", at());
            let keys: Vec<String> = r
                .members()
                .into_iter()
                .map(|(k, _)| k.into_owned())
                .collect();
            let expected: Vec<String> = v
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            assert_eq!(keys, expected, "{}", at());
            assert_eq!(
                r.elements().len(),
                v.as_array().map_or(0, Vec::len),
                "{}",
                at()
            );
        }
    }

    #[test]
    fn repeated_and_escaped_keys_read_as_serde_json_reads_them() {
        for text in [
            r#"{"a": 1, "b": 2, "a": 3}"#,
            r#"{"b": {"x": 1}, "a": [1, 2], "b": {"y": 2}}"#,
            r#"{"k\u0065y": 1, "key": 2, "k\u0065y": 3}"#,
            r#"{"\ud83d\ude00": "😀", "é": "e\u0301"}"#,
            r#"[{"a": 1.0}, {"a": 1}, 1e2, 100, -0, 0]"#,
        ] {
            assert_reads_agree(text);
        }
        let doc = Doc::parse(r#"{"a": 1, "a": 2}"#, 64).expect("index");
        assert_eq!(
            JsonRef::root(&doc).get("a").and_then(JsonRef::as_number),
            Some(Number::from(2))
        );
        assert_eq!(JsonRef::root(&doc).len(), 1);
    }

    #[test]
    fn values_compare_as_serde_json_compares_them() {
        let texts = [
            "1",
            "1.0",
            "-0",
            "0",
            "\"1\"",
            "[1]",
            "[1.0]",
            "{}",
            "[]",
            "null",
            r#"{"a": 1, "b": 2}"#,
            r#"{"b": 2, "a": 1}"#,
            r#"{"a": 1, "a": 2, "b": 2}"#,
            r#"{"a": 2, "b": 2}"#,
        ];
        for x in texts {
            for y in texts {
                let (vx, vy): (Value, Value) = (
                    serde_json::from_str(x).expect("x"),
                    serde_json::from_str(y).expect("y"),
                );
                let (dx, dy) = (Doc::parse(x, 64).expect("x"), Doc::parse(y, 64).expect("y"));
                let expected = vx == vy;
                assert_eq!(
                    JsonRef::root(&dx) == JsonRef::root(&dy),
                    expected,
                    "{x} {y}"
                );
                assert_eq!(
                    JsonRef::root(&dx) == JsonRef::Value(&vy),
                    expected,
                    "{x} {y}"
                );
                assert_eq!(
                    JsonRef::Value(&vx) == JsonRef::root(&dy),
                    expected,
                    "{x} {y}"
                );
            }
        }
    }

    #[test]
    fn large_objects_are_read_through_one_sorted_index() {
        // More members than are scanned: keys out of order, repeated (the
        // last counts), escaped.
        let mut text = String::from("{");
        for i in (0..50_000).rev() {
            text.push_str(&format!("\"k{i}\": {i}, "));
        }
        text.push_str(r#""k7": "last", "\u006b8": "escaped", "k9": null}"#);
        let value: Value = serde_json::from_str(&text).expect("JSON");
        let doc = Doc::parse(&text, usize::MAX).expect("index");
        let root = JsonRef::root(&doc);
        for i in 0..50_000 {
            let key = format!("k{i}");
            assert_eq!(
                root.get(&key).map(JsonRef::to_value).as_ref(),
                value.get(&key),
                "{key}"
            );
        }
        assert!(root.get("k50000").is_none() && root.get("").is_none());
        assert_eq!(root.len(), 50_000);
        assert_eq!(root.to_value(), value);
        assert!(root == JsonRef::Value(&value));
        assert_eq!(doc.sorted.borrow().len(), 1, "one index, built once");
        // Small objects are scanned, not indexed.
        let small = Doc::parse(r#"{"b": 1, "a": 2, "b": 3}"#, 64).expect("index");
        assert_eq!(
            JsonRef::root(&small).get("b").and_then(JsonRef::as_number),
            Some(Number::from(3))
        );
        assert!(small.sorted.borrow().is_empty());
    }

    proptest! {
        #[test]
        fn any_value_written_compact_or_pretty_reads_as_serde_json_reads_it(
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
            // And read along every path, as a `Value` is.
            assert_reads_agree(&text);
        }

        #[test]
        fn two_values_compare_the_same_through_their_texts(
            x in json_value(),
            y in json_value(),
        ) {
            let (tx, ty) = (serde_json::to_string(&x).expect("x"), serde_json::to_string(&y).expect("y"));
            let (dx, dy) = (Doc::parse(&tx, usize::MAX).expect("x"), Doc::parse(&ty, usize::MAX).expect("y"));
            // What serde_json reads back (a float need not round-trip
            // through its text without `float_roundtrip`).
            let (x, y): (Value, Value) = (serde_json::from_str(&tx).expect("x"), serde_json::from_str(&ty).expect("y"));
            prop_assert_eq!(JsonRef::root(&dx) == JsonRef::root(&dy), x == y);
            prop_assert_eq!(JsonRef::root(&dx) == JsonRef::Value(&y), x == y);
            prop_assert!(JsonRef::root(&dx) == JsonRef::Value(&x));
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
