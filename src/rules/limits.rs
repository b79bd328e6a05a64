//! What one rule file may cost to read: its size, its nesting depth and what
//! its aliases expand to, checked before any parser that expands aliases or
//! slows down with depth sees the file.
//!
//! A rule file is input kadmit must survive, not trust: every replica reads
//! it at startup and at each reload, and a file that exhausts memory or time
//! there crash-loops every replica for as long as the ConfigMap holds it.
//! Two properties of YAML make a small file expensive:
//!
//! - **Aliases.** `*a` stands for the whole node anchored `&a`, and the
//!   deserializer copies it each time: a 15 KB file of aliases to one
//!   anchored list expands to hundreds of megabytes, and nested anchors (the
//!   "billion laughs") to far more.
//! - **Flow nesting.** The deserializer's parser (libyaml-rs, behind
//!   `serde_yaml`) takes time quadratic in the depth of nested flow
//!   collections (`[[[[…` or `{a: {a: …`): 200 KB of them took over a
//!   minute. The event parser used here (saphyr-parser) emits events as it
//!   goes, so the check below stops at the first level too deep after
//!   reading a few hundred bytes.
//! - **Long flow collections.** saphyr-parser itself holds every token of
//!   some flow collections until they end ([`MAX_READ_AHEAD`]), so the
//!   text reaches it metered.
//!
//! [`check`] streams the file through saphyr-parser's events once, keeping
//! only a stack as deep as the document and one count per anchor: for each
//! anchor the number of nodes and bytes of text it stands for, summed on
//! every alias. It never builds the expanded document. The bounds are the
//! constants below; none has a flag, since a rule file that needs more is
//! better split or written without aliases.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::Diagnostic;

/// Largest rule file read, in bytes: a ConfigMap holds at most 1 MiB of data
/// in total, so no file mounted from one is larger.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Most rule files read from a rules directory (or from all the paths
/// given): a directory of more is not read at all.
pub const MAX_FILES: usize = 1_000;

/// Most bytes all rule files read together may hold: eight ConfigMaps'
/// worth. The files' text is kept between reloads, to parse only those
/// that change; with this bound, a directory of files full of comments
/// cannot fill memory.
pub const MAX_TOTAL_BYTES: u64 = 8 << 20;

/// Deepest nesting of collections in a document. The rule-file schema needs
/// about ten levels (a rule's `match`, a condition, a mutation's value); the
/// bound leaves room for large embedded values while keeping the parsers'
/// per-level costs small.
pub const MAX_DEPTH: usize = 64;

/// Most aliases (`*name`) in one file. Rule files rarely need any; a
/// thousand leaves room for sharing `match` blocks between many rules.
pub const MAX_ALIASES: u64 = 1_000;

/// Most nodes (scalars and collections, each alias counted as the nodes it
/// stands for) in one file. The largest real rule files have a few tens of
/// thousands. Reading a file takes about 500 bytes a node while it is
/// parsed (a file of 240,000 took 123 MB), and keeping it about 150 (its
/// rules, and where each node is for diagnostics): with this bound, `kadmit
/// check` of a file of 99,900 list items peaks at 81 MB of resident
/// memory, the process included.
pub const MAX_NODES: u64 = 100_000;

/// Most nodes in all rule files together, counted as [`MAX_NODES`] counts
/// them: what the parsed files take between reloads stays under about
/// 40 MB, twice that while a reload builds the next plan.
pub const MAX_TOTAL_NODES: u64 = 250_000;

/// Most bytes of scalar text in one file, each alias counted as the text it
/// stands for. A file without aliases has less than [`MAX_FILE_BYTES`].
pub const MAX_TEXT_BYTES: u64 = 8 << 20;

/// Most YAML indicator characters (`? : , [ ] { } # & * ! | > ' " % @`,
/// the backquote, and `-` and `.` at the start of a line) the parser may
/// read ahead of the next event it reports.
///
/// saphyr-parser keeps every token of a flow collection (`[…]` or `{…}`)
/// that begins where a key could begin (at the start of a line, after
/// `- `, or a whole JSON document) until the collection ends, at about two
/// hundred bytes a token: a 1 MiB file of `[0,0,0,…]` took 260 MB before
/// any event reached the checks below, more than the Deployment allows.
/// Every token but a plain scalar starts with one of these characters
/// (`---` and `...` only at the start of a line; elsewhere in a flow
/// collection, `-` and `.` only continue a plain scalar), and in a flow
/// collection no two plain scalars are without one between them, so this
/// bound keeps what the parser holds to a few tens of megabytes. Block
/// collections, and flow collections after a key on the same line
/// (`key: [a, b]`), are reported as they are read and never come near it.
pub const MAX_READ_AHEAD: u32 = 32_768;

/// The text of a file as characters for the parser, counting the
/// indicators it reads since the parser's last event (the caller resets
/// the count at each): past [`MAX_READ_AHEAD`] it ends, as if the file
/// ended there, and says where.
struct Metered<'a> {
    chars: std::str::Chars<'a>,
    state: std::rc::Rc<std::cell::Cell<MeterState>>,
}

#[derive(Debug, Clone, Copy)]
struct MeterState {
    /// Indicators read since the last event.
    ahead: u32,
    /// Bytes of the text read.
    offset: usize,
    /// Whether the next character starts a line.
    line_start: bool,
    /// Whether the text was cut at [`MAX_READ_AHEAD`].
    cut: bool,
}

impl Default for MeterState {
    fn default() -> Self {
        MeterState {
            ahead: 0,
            offset: 0,
            line_start: true,
            cut: false,
        }
    }
}

impl Iterator for Metered<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let mut state = self.state.get();
        if state.cut {
            return None;
        }
        let c = self.chars.next()?;
        let counted = match c {
            '-' | '.' => state.line_start,
            '?' | ':' | ',' | '[' | ']' | '{' | '}' | '#' | '&' | '*' | '!' | '|' | '>' | '\''
            | '"' | '%' | '@' | '`' => true,
            _ => false,
        };
        if counted {
            state.ahead += 1;
            if state.ahead > MAX_READ_AHEAD {
                state.cut = true;
                self.state.set(state);
                return None;
            }
        }
        state.line_start = c == '\n' || c == '\r';
        state.offset += c.len_utf8();
        self.state.set(state);
        Some(c)
    }
}

/// The line and column (both from 1) of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[start..].chars().count() + 1)
}

fn too_far_ahead(file: &str, text: &str, offset: usize) -> Diagnostic {
    let (line, column) = line_and_column(text, offset);
    Diagnostic::error(
        file,
        line,
        column,
        format!(
            "a flow collection ([…] or {{…}}), a single value or a comment holds more than \
             {MAX_READ_AHEAD} indicators (, : [ ] {{ }} # and the like) the parser must read \
             before it can report the next node"
        ),
        "write the collection in block style (one `- item` or `key: value` per line), \
         or shorten the value or the comment",
    )
}

/// What a subtree (or a whole file) expands to.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: u64,
    bytes: u64,
}

impl Size {
    fn add(&mut self, other: Size) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// An open collection: its anchor (0 for none) and what it holds so far.
struct Frame {
    anchor: usize,
    size: Size,
}

/// Checks `text` (named `file` in diagnostics) against every bound above.
///
/// Returns the first bound exceeded, at the line and column where the file
/// crossed it, or `None` when the file stays within all of them. A syntax
/// error ends the check: it is reported as such, since the deserializer
/// must not run on text the check could not read to its end.
pub fn check(file: &str, text: &str) -> Option<Diagnostic> {
    measure(file, text).err()
}

/// Like [`check`], and for a file within every bound the number of nodes
/// it expands to, which [`MAX_TOTAL_NODES`] bounds over all rule files.
pub fn measure(file: &str, text: &str) -> Result<u64, Diagnostic> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(file, text.len() as u64));
    }
    structure(file, text, MAX_NODES, Reading::Kadmit)
}

/// Checks `text` against every bound above but its size, with at most
/// `max_nodes` nodes: for YAML files whose size is bounded otherwise and
/// that may hold more than a rule file (the objects a test suite names, as
/// large as the API server accepts, or CustomResourceDefinitions).
pub fn check_structure(file: &str, text: &str, max_nodes: u64) -> Option<Diagnostic> {
    structure(file, text, max_nodes, Reading::Kadmit).err()
}

/// Like [`check_structure`], for a manifest that kubectl would apply (an
/// input of `kadmit test`, `kadmit audit`, a suite's object file), and
/// which must therefore mean to kadmit what it means to kubectl: also the
/// first plain scalar that the two read differently
/// ([`yaml_1_1_meaning`]).
pub fn check_manifest(file: &str, text: &str, max_nodes: u64) -> Option<Diagnostic> {
    structure(file, text, max_nodes, Reading::Manifest).err()
}

/// Whose reading of YAML a text must be checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// kadmit's own files: YAML 1.2, as yaml_serde reads it.
    Kadmit,
    /// Manifests: also as kubectl reads them (YAML 1.1).
    Manifest,
}

/// What kubectl makes of the plain scalar `value` when that is not what
/// kadmit makes of it, with a way to write it that both read alike.
///
/// kubectl (sigs.k8s.io/yaml, on go-yaml v2) reads YAML 1.1: `yes`, `on`,
/// `y` are booleans, `0644` is an octal number (420), `1_000` is 1000, and
/// `<<` merges a map. yaml_serde reads YAML 1.2, where all of these are
/// strings, or an ordinary key. Judged as strings, `hostNetwork: yes` or a
/// `privileged: on` that the cluster stores as `true` would pass a deny
/// rule; so such a manifest is refused rather than guessed at.
fn yaml_1_1_meaning(value: &str) -> Option<(&'static str, String)> {
    let boolean = match value {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some("true"),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some("false"),
        _ => None,
    };
    if let Some(boolean) = boolean {
        return Some((
            if boolean == "true" {
                "the boolean true"
            } else {
                "the boolean false"
            },
            format!("{boolean}, or \"{value}\" for a string"),
        ));
    }
    if value == "<<" {
        return Some((
            "a merge key (the keys of the map it names are copied in)",
            "the merged keys written out".to_owned(),
        ));
    }
    let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
    let numeric =
        |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Some((
            "a number (a leading 0 makes it octal)",
            format!(
                "the number in decimal or as 0o{}, or \"{value}\" for a string",
                &digits[1..]
            ),
        ));
    }
    if digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.contains('_')
        && digits.split('.').all(numeric)
    {
        return Some((
            "a number (its underscores are dropped)",
            format!("{}, or \"{value}\" for a string", value.replace('_', "")),
        ));
    }
    // Plain decimal digits (the leading-zero case is above) are the same
    // number to both: most numbers of a manifest, not parsed again here.
    let decimal = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    if !decimal && go_yaml_integer(value) && !yaml_1_2_number(value) {
        return Some((
            "a number (Go reads 0X, 0O and 0B prefixes, in either case, and drops underscores)",
            format!("the number in decimal, or \"{value}\" for a string"),
        ));
    }
    None
}

/// True when go-yaml v2 reads the plain scalar `value` as an integer: its
/// underscores dropped, Go's `strconv.ParseInt` with base 0 takes it (a
/// sign, then a `0x`, `0o` or `0b` prefix in either case, a leading `0`
/// for octal, or decimal digits).
fn go_yaml_integer(value: &str) -> bool {
    let plain = value.replace('_', "");
    let unsigned = plain.strip_prefix(['-', '+']).unwrap_or(&plain);
    let all =
        |text: &str, digit: fn(&u8) -> bool| !text.is_empty() && text.bytes().all(|b| digit(&b));
    let prefixed = |lower: &str, upper: &str| {
        unsigned
            .strip_prefix(lower)
            .or_else(|| unsigned.strip_prefix(upper))
    };
    if let Some(hex) = prefixed("0x", "0X") {
        all(hex, u8::is_ascii_hexdigit)
    } else if let Some(octal) = prefixed("0o", "0O") {
        all(octal, |b| (b'0'..=b'7').contains(b))
    } else if let Some(binary) = prefixed("0b", "0B") {
        all(binary, |b| matches!(b, b'0' | b'1'))
    } else {
        all(unsigned, u8::is_ascii_digit)
    }
}

/// True when kadmit's YAML 1.2 reads the plain scalar `value` as a number.
fn yaml_1_2_number(value: &str) -> bool {
    serde_yaml::from_str::<serde_yaml::Value>(value).is_ok_and(|read| read.is_number())
}

/// For a scalar tagged `tag` in a manifest: what go-yaml v2 does with it
/// that kadmit does not, when a tag outside the core schema's scalar types
/// (`!!binary`, decoded from base64; `!!merge`, a merge key;
/// `!!timestamp`) or a local tag (`!thing`) makes the two read it apart.
fn tag_read_otherwise(tag: &saphyr_parser::Tag) -> Option<String> {
    let core_scalar = tag.is_yaml_core_schema()
        && matches!(
            tag.suffix.as_str(),
            "str" | "int" | "float" | "bool" | "null"
        );
    if core_scalar {
        None
    } else if tag.is_yaml_core_schema() {
        Some(format!("!!{}", tag.suffix))
    } else {
        Some(format!("{}{}", tag.handle, tag.suffix))
    }
}

/// The nodes `text` expands to, or the first bound it exceeds.
fn structure(file: &str, text: &str, max_nodes: u64, reading: Reading) -> Result<u64, Diagnostic> {
    let at = |line: usize, column: usize, message: String, hint: &str| {
        Diagnostic::error(file, line, column, message, hint)
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Size> = HashMap::new();
    let mut total = Size::default();
    let mut aliases: u64 = 0;
    let meter = std::rc::Rc::new(std::cell::Cell::new(MeterState::default()));
    let parser = Parser::new_from_iter(Metered {
        chars: text.chars(),
        state: meter.clone(),
    });
    for item in parser {
        let cut = meter.get();
        if cut.cut {
            return Err(too_far_ahead(file, text, cut.offset));
        }
        meter.set(MeterState { ahead: 0, ..cut });
        let (event, span) = match item {
            Ok(item) => item,
            Err(error) if error.info() == "recursion limit exceeded" => {
                // saphyr-parser's own bound (255 flow levels), met before our
                // lower one when it reads ahead.
                let marker = error.marker();
                return Err(too_deep(file, marker.line(), marker.col() + 1));
            }
            Err(error) => {
                let marker = error.marker();
                return Err(at(
                    marker.line(),
                    marker.col() + 1,
                    error.info().to_owned(),
                    "the file is not valid YAML",
                ));
            }
        };
        let (line, column) = (span.start.line(), span.start.col() + 1);
        // The node this event completes, and the anchor it gets.
        let (node, anchor) = match event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(file, line, column));
                }
                stack.push(Frame {
                    anchor,
                    size: Size { nodes: 1, bytes: 0 },
                });
                total.add(Size { nodes: 1, bytes: 0 });
                (None, 0)
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(frame) => (Some(frame.size), frame.anchor),
                None => (None, 0),
            },
            Event::Scalar(value, style, anchor, tag) => {
                if reading == Reading::Manifest
                    && let Some(tag) = tag.as_deref().and_then(tag_read_otherwise)
                {
                    return Err(at(
                        line,
                        column,
                        format!(
                            "a value tagged `{tag}`: kubectl, which reads YAML 1.1, decodes such \
                             tags (`!!binary` from base64, `!!merge` as a merge key) where kadmit \
                             (YAML 1.2) keeps the text"
                        ),
                        "write the value as kubectl would store it, without the tag",
                    ));
                }
                if reading == Reading::Manifest
                    && style == ScalarStyle::Plain
                    && tag.is_none()
                    && let Some((meaning, instead)) = yaml_1_1_meaning(&value)
                {
                    return Err(at(
                        line,
                        column,
                        format!(
                            "`{value}` is {meaning} to kubectl, which reads YAML 1.1, but the \
                             string \"{value}\" to kadmit (YAML 1.2)"
                        ),
                        &format!("write {instead}"),
                    ));
                }
                let size = Size {
                    nodes: 1,
                    bytes: value.len() as u64,
                };
                total.add(size);
                (Some(size), anchor)
            }
            Event::Alias(id) => {
                aliases += 1;
                if aliases > MAX_ALIASES {
                    return Err(at(
                        line,
                        column,
                        format!("more than {MAX_ALIASES} aliases"),
                        "write the values out, or share fewer of them through anchors",
                    ));
                }
                // An alias to an unknown anchor is the deserializer's error
                // to report; it expands to nothing.
                let size = anchors.get(&id).copied().unwrap_or_default();
                total.add(size);
                (Some(size), 0)
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => (None, 0),
        };
        if total.nodes > max_nodes {
            return Err(at(
                line,
                column,
                format!("the file expands to more than {max_nodes} nodes"),
                "an alias copies the whole node its anchor names; \
                 split the file or use fewer aliases of large nodes",
            ));
        }
        if total.bytes > MAX_TEXT_BYTES {
            return Err(at(
                line,
                column,
                format!("the file expands to more than {MAX_TEXT_BYTES} bytes of text"),
                "an alias copies the whole node its anchor names; \
                 use fewer aliases of long values",
            ));
        }
        if let Some(size) = node {
            if anchor != 0 {
                anchors.insert(anchor, size);
            }
            if let Some(parent) = stack.last_mut() {
                parent.size.add(size);
            }
        }
    }
    let cut = meter.get();
    if cut.cut {
        return Err(too_far_ahead(file, text, cut.offset));
    }
    Ok(total.nodes)
}

fn too_deep(file: &str, line: usize, column: usize) -> Diagnostic {
    Diagnostic::error(
        file,
        line,
        column,
        format!("collections nested deeper than {MAX_DEPTH} levels"),
        "rule files need about ten levels; flatten the structure",
    )
}

/// The diagnostic of a file larger than [`MAX_FILE_BYTES`], `bytes` long.
pub fn too_large(file: &str, bytes: u64) -> Diagnostic {
    Diagnostic::error(
        file,
        1,
        1,
        format!("file is {bytes} bytes, more than the limit of {MAX_FILE_BYTES} (1 MiB)"),
        "a ConfigMap holds at most 1 MiB; split the rules over several files",
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Nested anchors, each level ten aliases of the one before: 10^depth
    /// nodes from a file of a few hundred bytes.
    fn laughs(depth: usize) -> String {
        let mut text = String::from("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..=depth {
            let previous = format!("*l{}", level - 1);
            let refs = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        }
        text
    }

    fn message(text: &str) -> Option<String> {
        check("f.yaml", text).map(|d| d.to_string())
    }

    #[test]
    fn manifests_that_kubectl_reads_otherwise_are_refused_where_they_differ() {
        let refused = |text: &str| check_manifest("m.yaml", text, MAX_TOTAL_NODES);
        for (text, line, column, said) in [
            ("spec:\n  hostNetwork: yes\n", 2, 16, "the boolean true"),
            ("a: [1, Off]\n", 1, 8, "the boolean false"),
            ("on: 1\n", 1, 1, "the boolean true"),
            ("mode: 0644\n", 1, 7, "octal"),
            ("mode: -012\n", 1, 7, "octal"),
            ("x: 1_000\n", 1, 4, "underscores"),
            ("x: 1_000.5\n", 1, 4, "underscores"),
            ("runAsUser: 0X0\n", 1, 12, "0X, 0O and 0B"),
            ("runAsUser: 0x_0\n", 1, 12, "a number"),
            ("runAsUser: 0O0\n", 1, 12, "a number"),
            ("runAsUser: 0B0\n", 1, 12, "a number"),
            (
                "seccompProfile: {type: !!binary VW5jb25maW5lZA==}\n",
                1,
                24,
                "tagged `!!binary`",
            ),
            (
                "b: &b {hostNetwork: true}\nspec: {!!merge <<: *b}\n",
                2,
                8,
                "tagged `!!merge`",
            ),
            ("a: !local x\n", 1, 4, "tagged `!local`"),
            (
                "base: &b {privileged: true}\nsc:\n  <<: *b\n",
                3,
                3,
                "merge key",
            ),
        ] {
            let diagnostic = refused(text).unwrap_or_else(|| panic!("{text:?} passed"));
            assert_eq!(
                (diagnostic.line, diagnostic.column),
                (line, column),
                "{text:?}"
            );
            assert!(diagnostic.message.contains(said), "{text:?}: {diagnostic}");
            assert!(diagnostic.message.contains("YAML 1.1"), "{diagnostic}");
        }
        // Quoted or tagged, they are strings to both; what both read alike
        // passes, and kadmit's own files keep YAML 1.2.
        for text in [
            "a: \"yes\"\nb: 'on'\nc: !!str off\nd: \"0644\"\n",
            "a: true\nb: 0o644\nc: 420\nd: 0\ne: -1.5\nf: yesterday\ng: a_b\nh: 0x1F\n",
            // Numbers to both, and the same ones.
            "a: -0b1\nb: 0b101\nc: -0x1f\n",
        ] {
            assert_eq!(refused(text).map(|d| d.to_string()), None, "{text:?}");
        }
        assert!(check("r.yaml", "a: yes\nmode: 0644\n").is_none());
    }

    #[test]
    fn a_comment_of_indicators_is_named_among_the_causes() {
        let text = format!("a: 1\n{}\n", "#".repeat(40_000));
        let printed = message(&text).expect("rejected");
        assert!(
            printed.starts_with("f.yaml:2:") && printed.contains("or a comment holds more than"),
            "{printed}"
        );
        assert!(
            printed.contains("shorten the value or the comment"),
            "{printed}"
        );
    }

    #[test]
    fn ordinary_files_pass() {
        let text = "a: &m {resources: [pods]}\nb: *m\nc: [1, [2, {d: e}]]\n---\nz: 1\n";
        assert_eq!(message(text), None);
        assert_eq!(message(""), None);
    }

    #[test]
    fn a_flow_collection_the_parser_reads_whole_stops_at_the_read_ahead_bound() {
        let items = vec!["0"; 40_000].join(",");
        // A whole JSON-like document, an item of a block list, a line of
        // its own: the parser reports nothing in them until they end.
        for (text, at) in [
            (format!("[{items}]\n"), "f.yaml:1:65539:"),
            (format!("- [{items}]\n"), "f.yaml:1:65541:"),
            (format!("a:\n  [{items}]\n"), "f.yaml:2:65551:"),
        ] {
            let printed = message(&text).expect("rejected");
            assert!(
                printed.starts_with(at)
                    && printed.contains("holds more than 32768 indicators (, : [ ] { }"),
                "{printed}"
            );
        }
        // After a key on its line, and in block style, items are reported
        // as they are read: the same 40,000 pass.
        assert_eq!(message(&format!("a: [{items}]\n")), None);
        let block: String = (0..40_000).map(|_| "- 0\n").collect();
        assert_eq!(message(&block), None);
        // Just under the bound passes where the parser reads it whole.
        let under = vec!["0"; 16_000].join(",");
        assert_eq!(message(&format!("- [{under}]\n")), None);
    }

    #[test]
    fn document_markers_in_a_flow_collection_count_and_dashes_in_comments_do_not() {
        // `...` and `---` at the start of a line are tokens of no other
        // indicator: the parser held 262,000 of them from 1 MiB.
        for marker in ["...", "---"] {
            let text = format!("[\n{}]\n", format!("{marker}\n").repeat(40_000));
            let printed = message(&text).expect("rejected");
            assert!(
                printed.contains("holds more than 32768 indicators"),
                "{printed}"
            );
        }
        // A banner of dashes in comments is not a flow collection.
        let banner = format!("# {}\n", "-".repeat(78)).repeat(1_000);
        assert_eq!(message(&format!("{banner}a: [x, y-z, 1.5]\n")), None);
    }

    #[test]
    fn a_value_of_more_indicators_than_the_bound_is_refused_too() {
        // The bound counts characters, not tokens: a scalar holding more
        // indicators than it is refused, though one token. Documented.
        let text = format!("a: \"{}\"\n", ",".repeat(40_000));
        let printed = message(&text).expect("rejected");
        assert!(
            printed.contains("holds more than 32768 indicators"),
            "{printed}"
        );
        assert_eq!(message(&format!("a: \"{}\"\n", ",".repeat(30_000))), None);
    }

    #[test]
    fn the_cut_is_reported_where_the_text_was_cut() {
        assert_eq!(line_and_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_and_column("é\né", 3), (2, 1));
        assert_eq!(line_and_column("éé", 4), (1, 3));
        assert_eq!(line_and_column("", 0), (1, 1));
    }

    #[test]
    fn nested_anchors_stop_at_the_node_bound() {
        let printed = message(&laughs(9)).expect("rejected");
        assert!(
            printed.starts_with("f.yaml:5:")
                && printed.contains(": the file expands to more than 100000 nodes ("),
            "{printed}"
        );
        // Four levels (about 11,000 nodes) are within the bound.
        assert_eq!(message(&laughs(3)), None);
    }

    #[test]
    fn a_file_within_the_bounds_is_measured_in_nodes() {
        // The map, its key, the list and its two items; an alias counts
        // what it stands for.
        assert_eq!(measure("f.yaml", "a: [1, 2]\n"), Ok(5));
        assert_eq!(measure("f.yaml", "a: &x [1, 2]\nb: *x\n"), Ok(9));
        assert_eq!(measure("f.yaml", "a: 1\n---\nb: 2\n"), Ok(6));
    }

    #[test]
    fn one_anchor_referenced_many_times_stops_at_the_node_bound() {
        let list = vec!["lol"; 1000].join(",");
        let refs = vec!["*a"; 900].join(", ");
        let text = format!("a: &a [{list}]\nb: [{refs}]\n");
        let printed = message(&text).expect("rejected");
        assert!(
            printed.contains("expands to more than 100000 nodes"),
            "{printed}"
        );
    }

    #[test]
    fn long_text_copied_by_aliases_stops_at_the_text_bound() {
        let text = format!(
            "a: &a {}\nb: [{}]\n",
            "x".repeat(100_000),
            vec!["*a"; 100].join(", ")
        );
        let printed = message(&text).expect("rejected");
        assert!(
            printed.contains("expands to more than 8388608 bytes of text"),
            "{printed}"
        );
    }

    #[test]
    fn aliases_are_counted() {
        let text = format!("a: &a 1\nb: [{}]\n", vec!["*a"; 1001].join(", "));
        let printed = message(&text).expect("rejected");
        assert!(printed.contains(": more than 1000 aliases ("), "{printed}");
        let text = format!("a: &a 1\nb: [{}]\n", vec!["*a"; 1000].join(", "));
        assert_eq!(message(&text), None);
    }

    #[test]
    fn depth_is_bounded_for_flow_and_block_collections() {
        // The document's mapping is the first level.
        let flow = format!("a: {}{}\n", "[".repeat(64), "]".repeat(64));
        let printed = message(&flow).expect("rejected");
        assert_eq!(
            printed,
            "f.yaml:1:67: collections nested deeper than 64 levels \
             (rule files need about ten levels; flatten the structure)"
        );
        let ok = format!("a: {}{}\n", "[".repeat(63), "]".repeat(63));
        assert_eq!(message(&ok), None);
        let mut block = String::new();
        for level in 0..70 {
            block.push_str(&format!("{}k:\n", "  ".repeat(level)));
        }
        assert!(message(&block).is_some_and(|m| m.contains("deeper than 64")));
    }

    #[test]
    fn deep_flow_nesting_is_rejected_without_reading_it_all() {
        // 200 KB of nesting: the deserializer's parser needs minutes for it.
        // The bound is generous (a debug build on a loaded machine); the
        // check stops within the first few hundred bytes.
        for text in [
            format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
            format!("{}1{}\n", "{a: ".repeat(50_000), "}".repeat(50_000)),
        ] {
            let started = Instant::now();
            let printed = message(&text).expect("rejected");
            assert!(printed.contains("deeper than 64 levels"), "{printed}");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn oversized_files_are_rejected_before_parsing() {
        let text = format!("a: \"{}\"\n", "x".repeat(MAX_FILE_BYTES as usize));
        let printed = message(&text).expect("rejected");
        assert!(
            printed.starts_with("f.yaml:1:1: file is 1048582 bytes, more than the limit"),
            "{printed}"
        );
    }

    #[test]
    fn syntax_errors_end_the_check() {
        let printed = message("a: [1, 2\nb: *x\n").expect("rejected");
        assert!(
            printed.contains("(the file is not valid YAML)"),
            "{printed}"
        );
    }
}
