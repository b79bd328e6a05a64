//! Where each field of a YAML document sits, so that problems found after
//! parsing (a bad regex, an unknown root in a path) can name `file:line:column`.
//!
//! serde deserializes into values that forget positions; this index is built
//! from the same text by an event parser and maps field paths
//! (`spec.rules[2].deny[0].matches`, the notation of `serde_path_to_error`) to
//! the position of the key (for map entries) or the element (for list items).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser};

/// 1-based line and column of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// Field path → position, for one document.
///
/// Kept as a tree of the document's nodes, each holding its own key or
/// index only: storing every node's full path took memory of the nodes
/// times the length of their paths, gigabytes for a small file with long
/// keys above long lists. This takes memory of the nodes plus the text of
/// the keys.
#[derive(Debug, Clone, Default)]
pub struct PositionIndex {
    /// Node 0 is the document's root; the others are reached from it.
    nodes: Vec<Node>,
    start: Position,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// Of the key for a map entry, of the element for a list item.
    position: Position,
    children: Children,
}

#[derive(Debug, Clone, Default)]
enum Children {
    #[default]
    None,
    /// Key → node; the first of duplicate keys.
    Map(HashMap<Box<str>, usize>),
    /// Index → node.
    List(Vec<usize>),
}

impl PositionIndex {
    /// The position of `path`, or of its nearest recorded ancestor, or of the
    /// document start.
    pub fn locate(&self, path: &str) -> Position {
        let mut found = self.start;
        let mut node = 0;
        let mut rest = path;
        while !rest.is_empty() {
            let Some(current) = self.nodes.get(node) else {
                break;
            };
            let next = match &current.children {
                Children::None => None,
                Children::List(items) => index_step(rest).and_then(|(index, after)| {
                    let child = *items.get(index)?;
                    Some((child, after))
                }),
                Children::Map(keys) => key_step(keys, rest),
            };
            let Some((child, after)) = next else { break };
            node = child;
            found = self.nodes.get(child).map_or(found, |child| child.position);
            rest = after;
        }
        found
    }

    /// Indexes every document of a YAML stream, in order. A stream the event
    /// parser rejects yields what it indexed before the error (the YAML
    /// deserializer reports the syntax error itself).
    pub fn build_all(text: &str) -> Vec<PositionIndex> {
        let mut documents = Vec::new();
        let mut current: Option<Builder> = None;
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            let position = Position {
                line: span.start.line(),
                column: span.start.col() + 1,
            };
            match event {
                Event::DocumentStart(_) => {
                    current = Some(Builder::new(position));
                }
                Event::DocumentEnd => {
                    if let Some(builder) = current.take() {
                        documents.push(builder.index);
                    }
                }
                other => {
                    if let Some(builder) = current.as_mut() {
                        builder.event(&other, position);
                    }
                }
            }
        }
        if let Some(builder) = current.take() {
            documents.push(builder.index);
        }
        documents
    }
}

/// `[N]` at the start of `rest`: N and what follows it.
fn index_step(rest: &str) -> Option<(usize, &str)> {
    let inner = rest.strip_prefix('[')?;
    let close = inner.find(']')?;
    let index = inner[..close].parse().ok()?;
    Some((index, &inner[close + 1..]))
}

/// The key of `keys` at the start of `rest` (after a `.` unless it starts
/// the path), the longest when keys holding `.` or `[` overlap, and what
/// follows it.
fn key_step<'a>(keys: &HashMap<Box<str>, usize>, rest: &'a str) -> Option<(usize, &'a str)> {
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let mut ends: Vec<usize> = rest
        .match_indices(['.', '['])
        .map(|(at, _)| at)
        .filter(|&at| at > 0)
        .collect();
    ends.push(rest.len());
    ends.iter()
        .rev()
        .find_map(|&end| keys.get(&rest[..end]).map(|&child| (child, &rest[end..])))
}

/// An open collection and its node.
enum Frame {
    /// `value` is `None` while a key comes next, and then the node of the
    /// value that follows (`None` for the value of a duplicate key).
    Map {
        node: usize,
        value: Option<Option<usize>>,
    },
    List {
        node: usize,
    },
    /// A collection used as a key, or the value of a duplicate key: nothing
    /// in it is indexed.
    Detached,
}

struct Builder {
    index: PositionIndex,
    stack: Vec<Frame>,
}

impl Builder {
    fn new(start: Position) -> Self {
        Builder {
            index: PositionIndex {
                nodes: vec![Node {
                    position: start,
                    children: Children::None,
                }],
                start,
            },
            stack: Vec::new(),
        }
    }

    /// Adds a node at `position` to the node `parent`, under `key` for a
    /// map; `None` when the map has the key already (the first stays).
    fn add(&mut self, parent: usize, key: Option<Box<str>>, position: Position) -> Option<usize> {
        let child = self.index.nodes.len();
        match (
            self.index.nodes.get_mut(parent).map(|p| &mut p.children),
            key,
        ) {
            (Some(Children::Map(keys)), Some(key)) => {
                if keys.contains_key(&key) {
                    return None;
                }
                keys.insert(key, child);
            }
            (Some(Children::List(items)), None) => items.push(child),
            _ => return None,
        }
        self.index.nodes.push(Node {
            position,
            children: Children::None,
        });
        Some(child)
    }

    /// The node of the value starting now at `position`; `None` for a map
    /// key (indexed as its entry) and anything not indexed.
    fn node(&mut self, event: &Event<'_>, position: Position) -> Option<usize> {
        let Some(frame) = self.stack.last_mut() else {
            return Some(0); // the root
        };
        match frame {
            Frame::Detached => None,
            Frame::Map {
                value: Some(value), ..
            } => {
                let node = *value;
                if let Some(Frame::Map { value, .. }) = self.stack.last_mut() {
                    *value = None;
                }
                node
            }
            Frame::Map { node, value: None } => {
                let parent = *node;
                let key: Box<str> = match event {
                    Event::Scalar(text, ..) => text.as_ref().into(),
                    _ => "?".into(),
                };
                let child = self.add(parent, Some(key), position);
                if let Some(Frame::Map { value, .. }) = self.stack.last_mut() {
                    *value = Some(child);
                }
                None
            }
            Frame::List { node } => {
                let parent = *node;
                self.add(parent, None, position)
            }
        }
    }

    fn event(&mut self, event: &Event<'_>, position: Position) {
        match event {
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_map = matches!(event, Event::MappingStart(..));
                let frame = match self.node(event, position) {
                    Some(node) => {
                        if let Some(entry) = self.index.nodes.get_mut(node) {
                            entry.children = if is_map {
                                Children::Map(HashMap::new())
                            } else {
                                Children::List(Vec::new())
                            };
                        }
                        if is_map {
                            Frame::Map { node, value: None }
                        } else {
                            Frame::List { node }
                        }
                    }
                    // A collection used as a key, or inside one.
                    None => Frame::Detached,
                };
                self.stack.push(frame);
            }
            Event::Scalar(..) | Event::Alias(_) => {
                self.node(event, position);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_keys_and_list_items_per_document() {
        let text = "a: 1\nb:\n  c: [x, y]\n  d:\n    - e: 2\n---\nz: 3\n";
        let docs = PositionIndex::build_all(text);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].locate("a"), Position { line: 1, column: 1 });
        assert_eq!(docs[0].locate("b.c"), Position { line: 3, column: 3 });
        assert_eq!(
            docs[0].locate("b.c[1]"),
            Position {
                line: 3,
                column: 10
            }
        );
        assert_eq!(docs[0].locate("b.d[0].e"), Position { line: 5, column: 7 });
        // An unknown child falls back to its nearest known ancestor.
        assert_eq!(
            docs[0].locate("b.d[0].e.nope"),
            Position { line: 5, column: 7 }
        );
        assert_eq!(docs[1].locate("z"), Position { line: 7, column: 1 });
    }

    #[test]
    fn keys_holding_dots_duplicates_and_keys_that_are_collections() {
        let text = "metadata:\n  labels:\n    app.kubernetes.io/name: web\n    app: x\n    app: y\n  ? [a, b]\n  : {c: 1}\nspec: {c: 1, c: {d: 2}}\n";
        let doc = &PositionIndex::build_all(text)[0];
        let at = |line, column| Position { line, column };
        assert_eq!(
            doc.locate("metadata.labels.app.kubernetes.io/name"),
            at(3, 5)
        );
        assert_eq!(doc.locate("metadata.labels.app"), at(4, 5));
        // The first of duplicate keys, and nothing of the second's value.
        assert_eq!(doc.locate("spec.c"), at(8, 8));
        assert_eq!(doc.locate("spec.c.d"), at(8, 8));
        // A collection used as a key is `?`; nothing in it is a field.
        assert_eq!(doc.locate("metadata.?.c"), at(7, 6));
        assert_eq!(doc.locate("metadata.a"), at(1, 1));
        assert_eq!(doc.locate("metadata[0]"), at(1, 1));
        assert_eq!(doc.locate("nope"), at(1, 1));
        assert_eq!(doc.locate(""), at(1, 1));
    }
}
