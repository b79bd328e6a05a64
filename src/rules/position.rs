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
#[derive(Debug, Clone, Default)]
pub struct PositionIndex {
    positions: HashMap<String, Position>,
    start: Position,
}

impl PositionIndex {
    /// The position of `path`, or of its nearest recorded ancestor, or of the
    /// document start.
    pub fn locate(&self, path: &str) -> Position {
        let mut candidate = path;
        loop {
            if let Some(position) = self.positions.get(candidate) {
                return *position;
            }
            match candidate.rfind(['.', '[']) {
                Some(cut) => candidate = &candidate[..cut],
                None => return self.start,
            }
        }
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
                        documents.push(builder.finish());
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
            documents.push(builder.finish());
        }
        documents
    }
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

struct Builder {
    index: PositionIndex,
    stack: Vec<Frame>,
}

impl Builder {
    fn new(start: Position) -> Self {
        Builder {
            index: PositionIndex {
                positions: HashMap::new(),
                start,
            },
            stack: Vec::new(),
        }
    }

    fn finish(self) -> PositionIndex {
        self.index
    }

    /// The path a node starting now gets, or `None` when the node is a map key.
    fn node_path(&mut self, event: &Event<'_>, position: Position) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { path, key }) => match key.take() {
                Some(key) => Some(join_key(path, &key)),
                None => {
                    let name = match event {
                        Event::Scalar(value, ..) => value.to_string(),
                        _ => "?".to_owned(),
                    };
                    let child = join_key(path, &name);
                    self.index.positions.entry(child).or_insert(position);
                    *key = Some(name);
                    None
                }
            },
            Some(Frame::Seq { path, index }) => {
                let child = format!("{path}[{index}]");
                *index += 1;
                self.index
                    .positions
                    .entry(child.clone())
                    .or_insert(position);
                Some(child)
            }
        }
    }

    fn event(&mut self, event: &Event<'_>, position: Position) {
        match event {
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            Event::MappingStart(..) => {
                // A complex key (a map used as a key) gets the placeholder path.
                let path = self.node_path(event, position).unwrap_or_default();
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.node_path(event, position).unwrap_or_default();
                self.stack.push(Frame::Seq { path, index: 0 });
            }
            Event::Scalar(..) | Event::Alias(_) => {
                self.node_path(event, position);
            }
            _ => {}
        }
    }
}

fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
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
}
