//! The JSON stream reader of [`super::read_json`]: parses each object of the
//! stream from a window of the input's bytes, not through `io::Read`.
//!
//! serde_json's parser over an `io::Read` takes the input one byte per call
//! through the reader, and that was a third of what `kadmit audit` spent on
//! each Pod of a List (docs/benchmarks.md, "kadmit audit"). Here the input
//! is read in large blocks into a window, and each object is parsed from the
//! window as a slice, where serde_json also says how many bytes it took. An
//! object cut by the end of the window is parsed again once the window holds
//! all of it (the window grows up to [`MAX_OBJECT_BYTES`] for a large one).
//! Errors name the line and column in the whole input.

use std::io::{self, Read};

use serde::Deserialize;
use serde_json::Value;

use super::{AuditInputError, MAX_OBJECT_BYTES, Parse};
use crate::review::{MAX_PARSED_BYTES, PARSED_GROWTH, parsed_size_estimate};

/// Bytes read from the input at a time, and the window's starting size.
const BLOCK_BYTES: usize = 64 << 10;

/// A JSON stream of objects, lists of them and arrays of them, read one
/// object at a time.
pub(super) struct Stream<R> {
    reader: R,
    parse: Parse,
    /// The input's bytes from `start` to `end` are unread.
    window: Vec<u8>,
    start: usize,
    end: usize,
    /// The reader has no more bytes.
    exhausted: bool,
    /// Where `start` is in the input.
    at: Position,
    /// How much of the window an object is first parsed from as text
    /// (see [`Stream::object_as_text`]): twice the last object's length,
    /// doubled after each object that was longer.
    text_guess: usize,
}

/// The least [`Stream::object_as_text`] checks as text.
const TEXT_GUESS_MIN: usize = 4 << 10;

/// A place in the input.
#[derive(Debug, Clone, Copy)]
struct Position {
    /// Line, from 1.
    line: usize,
    /// Bytes before it on its line.
    column: usize,
}

impl Position {
    /// The place after `read`.
    fn advance(&mut self, read: &[u8]) {
        let lines = newlines(read);
        if lines == 0 {
            self.column += read.len();
        } else if let Some(last) = read.iter().rposition(|&byte| byte == b'\n') {
            self.line += lines;
            self.column = read.len() - last - 1;
        }
    }
}

/// The newlines in `bytes`, counted in blocks small enough for a byte
/// counter, which the compiler turns into wide compares and adds: every
/// byte read passes through here.
fn newlines(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|block| {
            let count = block
                .iter()
                .fold(0u8, |count, &byte| count + u8::from(byte == b'\n'));
            usize::from(count)
        })
        .sum()
}

/// Where a value ends, found from its strings and nesting alone; for a
/// value cut by the end of the window.
struct Extent {
    /// Bytes of the value scanned so far.
    scanned: usize,
    /// Its length, once found.
    end: Option<usize>,
    /// A number or literal: it ends before a delimiter.
    scalar: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Extent {
    /// A value whose first byte is `first`.
    fn new(first: u8) -> Self {
        let (scalar, in_string, depth) = match first {
            b'"' => (false, true, 0),
            b'{' | b'[' => (false, false, 1),
            _ => (true, false, 0),
        };
        Extent {
            scanned: if scalar { 0 } else { 1 },
            end: None,
            scalar,
            depth,
            in_string,
            escaped: false,
        }
    }

    fn found(&self) -> bool {
        self.end.is_some()
    }

    /// Scans on through `value` (the value's bytes so far, from its first):
    /// its length, once its end is among them.
    fn scan(&mut self, value: &[u8]) -> Option<usize> {
        if self.end.is_some() {
            return self.end;
        }
        for (at, &byte) in value.iter().enumerate().skip(self.scanned) {
            let ended = if self.scalar {
                matches!(byte, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r').then_some(at)
            } else if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
                (!self.in_string && self.depth == 0).then_some(at + 1)
            } else {
                match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
                (self.depth == 0).then_some(at + 1)
            };
            if ended.is_some() {
                self.end = ended;
                return ended;
            }
        }
        self.scanned = value.len();
        None
    }
}

/// An object parsed without `metadata.managedFields`.
struct Lean(Value);

impl<'de> Deserialize<'de> for Lean {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::review::without_managed_fields(deserializer).map(Lean)
    }
}

impl<R: Read> Stream<R> {
    pub(super) fn new(reader: R, parse: Parse) -> Self {
        Stream {
            reader,
            parse,
            window: Vec::new(),
            start: 0,
            end: 0,
            exhausted: false,
            at: Position { line: 1, column: 0 },
            text_guess: TEXT_GUESS_MIN,
        }
    }

    /// Calls `each` with every object of the stream: the items of a
    /// top-level object's `items` array (a `List`), the elements of a
    /// top-level array, or a top-level object itself.
    /// Says how many top-level values it read.
    pub(super) fn read(&mut self, each: &mut dyn FnMut(Value)) -> Result<u64, AuditInputError> {
        let mut values = 0;
        loop {
            match self.peek()? {
                None => return Ok(values),
                Some(b'{') => {
                    values += 1;
                    self.object(each)?;
                }
                Some(b'[') => {
                    values += 1;
                    self.bump();
                    self.elements(each)?;
                }
                Some(_) => {
                    return Err(self.syntax(
                        "expected a Kubernetes object, a list of them, or an array of them",
                    ));
                }
            }
        }
    }

    /// A top-level object: a `List`, whose items are read one at a time,
    /// or an object, gathered field by field.
    fn object(&mut self, each: &mut dyn FnMut(Value)) -> Result<(), AuditInputError> {
        let start = self.at;
        self.bump();
        let mut fields = serde_json::Map::new();
        let mut listed = false;
        // The fields other than `items`, which are kept until the end:
        // their text with their keys, and what they take parsed.
        let mut kept_bytes = 0usize;
        let mut kept_parsed = 0usize;
        if self.peek()? == Some(b'}') {
            self.bump();
            each(Value::Object(fields));
            return Ok(());
        }
        loop {
            if self.peek()? != Some(b'"') {
                return Err(self.syntax("expected a string key"));
            }
            let key_at = self.at;
            let (key, key_bytes): (String, usize) = self.value()?;
            kept_bytes = kept_bytes.saturating_add(key_bytes);
            if kept_bytes as u64 > MAX_OBJECT_BYTES {
                return Err(too_large(start));
            }
            if key == "items" && listed {
                // kubectl keeps the last of two `items`; judging the first
                // would report on objects other than those it applies.
                return Err(AuditInputError::Syntax {
                    message: "a second `items` member in one list; kubectl would apply the \
                              last, so keep only that one"
                        .to_owned(),
                    line: key_at.line,
                    column: key_at.column + 1,
                });
            }
            if self.peek()? != Some(b':') {
                return Err(self.syntax("expected `:`"));
            }
            self.bump();
            if key == "items" && !listed && self.peek()? == Some(b'[') {
                self.bump();
                self.elements(each)?;
                listed = true;
            } else {
                let value_at = self.at;
                let (mut value, bytes): (Value, usize) = self.value()?;
                kept_bytes = kept_bytes.saturating_add(bytes);
                if kept_bytes as u64 > MAX_OBJECT_BYTES {
                    return Err(too_large(start));
                }
                // Each value was held to the bound before it was parsed;
                // together they are held to it here, each text counted
                // just after its parse (it is still in the window).
                let text = &self.window[self.start - bytes..self.start];
                kept_parsed = kept_parsed.saturating_add(parsed_size_estimate(text));
                if kept_parsed > MAX_PARSED_BYTES {
                    return Err(too_large_parsed(value_at, kept_parsed));
                }
                if key == "metadata"
                    && self.parse == Parse::WithoutManagedFields
                    && let Value::Object(metadata) = &mut value
                {
                    metadata.remove("managedFields");
                }
                if !listed {
                    fields.insert(key, value);
                }
            }
            match self.peek()? {
                Some(b',') => self.bump(),
                Some(b'}') => {
                    self.bump();
                    break;
                }
                _ => return Err(self.syntax("expected `,` or `}`")),
            }
        }
        if !listed {
            if let Some(kind) = super::items_not_a_list(&fields) {
                return Err(AuditInputError::ItemsNotAList {
                    kind,
                    at: Some((start.line, start.column + 1)),
                });
            }
            each(Value::Object(fields));
        }
        Ok(())
    }

    /// The elements of an array whose `[` was read, each one an object.
    fn elements(&mut self, each: &mut dyn FnMut(Value)) -> Result<(), AuditInputError> {
        if self.peek()? == Some(b']') {
            self.bump();
            return Ok(());
        }
        loop {
            let element = match self.parse {
                Parse::Whole => self.value::<Value>()?.0,
                Parse::WithoutManagedFields => self.value::<Lean>()?.0.0,
            };
            each(element);
            match self.peek()? {
                Some(b',') => self.bump(),
                Some(b']') => {
                    self.bump();
                    return Ok(());
                }
                _ => return Err(self.syntax("expected `,` or `]`")),
            }
        }
    }

    /// Parses the value that starts at the next byte that is not
    /// whitespace, and says how many bytes it took. A value that could
    /// take more than [`MAX_PARSED_BYTES`] once parsed is refused before
    /// it is parsed: JSON may take about 84 times its size (16 MiB of
    /// `[{"a":0},…]` took 1.4 GB), so when the unread window is large
    /// enough for that, the value's end is found and its text estimated
    /// first.
    fn value<T: for<'de> Deserialize<'de>>(&mut self) -> Result<(T, usize), AuditInputError> {
        let Some(first) = self.peek()? else {
            return Err(self.syntax("EOF while parsing a value"));
        };
        if first == b'{'
            && let Some(parsed) = self.object_as_text::<T>()
        {
            return Ok(parsed);
        }
        let value_at = self.at;
        let mut extent: Option<Extent> = None;
        let mut estimated = false;
        loop {
            let unread = &self.window[self.start..self.end];
            if !estimated && unread.len().saturating_mul(PARSED_GROWTH) > MAX_PARSED_BYTES {
                let extent = extent.get_or_insert_with(|| Extent::new(first));
                self.read_to_end_of(extent)?;
                let unread = &self.window[self.start..self.end];
                let text = extent
                    .end
                    .and_then(|end| unread.get(..end))
                    .unwrap_or(unread);
                let estimate = parsed_size_estimate(text);
                if estimate > MAX_PARSED_BYTES {
                    return Err(too_large_parsed(value_at, estimate));
                }
                estimated = true;
            }
            // Nothing more will come for this value: what the parse says
            // stands.
            let settled = self.exhausted || extent.as_ref().is_some_and(Extent::found);
            let unread = &self.window[self.start..self.end];
            let mut values = serde_json::Deserializer::from_slice(unread).into_iter::<T>();
            let parsed = values.next();
            let taken = values.byte_offset();
            match parsed {
                // A number at the end of the window may go on after it.
                Some(Ok(value)) if taken < unread.len() || settled => {
                    self.at.advance(&unread[..taken]);
                    self.start += taken;
                    if first == b'{' {
                        self.guess_after(taken);
                    }
                    return Ok((value, taken));
                }
                Some(Err(error)) if !error.is_eof() || settled => {
                    return Err(located(&error, self.at));
                }
                None if settled => return Err(self.syntax("EOF while parsing a value")),
                _ => {}
            }
            // Cut by the end of the window: read on to its end (found
            // without parsing, so a value arriving in small reads is not
            // parsed again at each), then parse it again.
            let extent = extent.get_or_insert_with(|| Extent::new(first));
            self.read_to_end_of(extent)?;
        }
    }

    /// The next [`Stream::text_guess`] after an object `taken` bytes long.
    fn guess_after(&mut self, taken: usize) {
        self.text_guess = taken.saturating_mul(2).max(TEXT_GUESS_MIN);
    }

    /// The object at `start` parsed from the text of the window's next
    /// [`Stream::text_guess`] bytes, when they hold all of it and are
    /// UTF-8: the UTF-8 check then runs once over them, where parsing
    /// bytes checks every string on its own (3 % of an audited Pod).
    /// `None` when it cannot say (the object goes on past them, or is not
    /// valid there): [`Stream::value`] then parses as before, and finds
    /// the same object or the same error.
    fn object_as_text<T: for<'de> Deserialize<'de>>(&mut self) -> Option<(T, usize)> {
        let unread = &self.window[self.start..self.end];
        let guess = unread.len().min(self.text_guess);
        // Objects that could grow past the parsed-size bound are estimated
        // first, on the byte path.
        if guess.saturating_mul(PARSED_GROWTH) > MAX_PARSED_BYTES {
            return None;
        }
        let prefix = &unread[..guess];
        let text = match std::str::from_utf8(prefix) {
            Ok(text) => text,
            // Cut inside a character, or not UTF-8 further on: up to there.
            Err(error) => std::str::from_utf8(&prefix[..error.valid_up_to()]).ok()?,
        };
        let mut values = serde_json::Deserializer::from_str(text).into_iter::<T>();
        let parsed = values.next();
        let taken = values.byte_offset();
        match parsed {
            // An object ends at its `}`: what was parsed is all of it.
            Some(Ok(value)) => {
                self.at.advance(&unread[..taken]);
                self.start += taken;
                self.guess_after(taken);
                Some((value, taken))
            }
            _ => {
                // Longer than guessed (or an error, found again on the
                // byte path): guess longer next time.
                self.text_guess = self.text_guess.saturating_mul(2);
                None
            }
        }
    }

    /// Reads on until the window holds the end of the value `extent`
    /// scans, or the input ends.
    fn read_to_end_of(&mut self, extent: &mut Extent) -> Result<(), AuditInputError> {
        while extent.scan(&self.window[self.start..self.end]).is_none() && !self.exhausted {
            if !self.fill()? {
                return Err(too_large(self.at));
            }
        }
        Ok(())
    }

    /// Reads more of the input into the window, moving the unread bytes to
    /// its front, or growing it when they fill it; false when the window
    /// may not grow (it holds more than [`MAX_OBJECT_BYTES`]).
    fn fill(&mut self) -> Result<bool, AuditInputError> {
        if self.start > 0 {
            self.window.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.window.len() {
            if self.window.len() as u64 > MAX_OBJECT_BYTES {
                return Ok(false);
            }
            let grown =
                (self.window.len() * 2).clamp(BLOCK_BYTES, MAX_OBJECT_BYTES as usize + BLOCK_BYTES);
            self.window.resize(grown, 0);
        }
        loop {
            match self.reader.read(&mut self.window[self.end..]) {
                Ok(0) => self.exhausted = true,
                Ok(read) => self.end += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error.into()),
            }
            return Ok(true);
        }
    }

    /// The next byte that is not whitespace, left unread.
    fn peek(&mut self) -> Result<Option<u8>, AuditInputError> {
        loop {
            let unread = &self.window[self.start..self.end];
            match unread
                .iter()
                .position(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
            {
                Some(at) => {
                    self.at.advance(&unread[..at]);
                    self.start += at;
                    return Ok(Some(self.window[self.start]));
                }
                None => {
                    self.at.advance(unread);
                    self.start = self.end;
                    if self.exhausted {
                        return Ok(None);
                    }
                    self.fill()?;
                }
            }
        }
    }

    /// Reads the byte [`Stream::peek`] returned (never a newline).
    fn bump(&mut self) {
        self.start += 1;
        self.at.column += 1;
    }

    /// A syntax error at the next unread byte.
    fn syntax(&self, message: &str) -> AuditInputError {
        AuditInputError::Syntax {
            message: message.to_owned(),
            line: self.at.line,
            column: self.at.column + 1,
        }
    }
}

fn too_large(start: Position) -> AuditInputError {
    AuditInputError::TooLarge {
        line: start.line,
        column: start.column + 1,
    }
}

fn too_large_parsed(start: Position, estimate: usize) -> AuditInputError {
    AuditInputError::TooLargeParsed {
        line: start.line,
        column: start.column + 1,
        estimate,
    }
}

/// An error of the parse of a value that started at `start`, placed in the
/// input (serde_json counts lines from 1 and columns in bytes from 1).
fn located(error: &serde_json::Error, start: Position) -> AuditInputError {
    let Position { line, column } = start;
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let message = text.strip_suffix(&position).unwrap_or(&text).to_owned();
    let (line, column) = match error.line() {
        0 | 1 => (line, column + error.column()),
        below => (line + below - 1, error.column()),
    };
    AuditInputError::Syntax {
        message,
        line,
        column,
    }
}
