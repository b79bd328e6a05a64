//! Message templates: text with `{{ path }}` placeholders, compiled once.

use serde_json::Value;

use super::path::{JsonPath, PathError, PathScope};

#[derive(Debug)]
enum Part {
    Text(String),
    Path(JsonPath),
}

/// A compiled message template.
#[derive(Debug)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Compiles `text`; placeholders are paths rooted as in `scope`.
    pub fn compile(text: &str, scope: PathScope<'_>) -> Result<Template, PathError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(PathError {
                    message: format!("unclosed {{{{ in message {text:?}"),
                    hint: Some("close each placeholder with }}".to_owned()),
                });
            };
            parts.push(Part::Path(JsonPath::compile(after[..close].trim(), scope)?));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Template { parts })
    }

    /// The paths the template reads.
    pub fn paths(&self) -> impl Iterator<Item = &JsonPath> {
        self.parts.iter().filter_map(|part| match part {
            Part::Path(path) => Some(path),
            Part::Text(_) => None,
        })
    }

    /// The template's text with each placeholder replaced by `placeholder`
    /// (for readers that cannot render values, such as an in-tree policy).
    pub fn text_with_placeholders(&self, placeholder: &str) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.as_str(),
                Part::Path(_) => placeholder,
            })
            .collect()
    }

    /// Renders the template; `select` returns the values of a placeholder's
    /// path. Strings render bare, other values as JSON, several values joined
    /// with `, `, and no value (or null) as `<none>`.
    ///
    /// The text is at most [`MAX_MESSAGE_BYTES`]: a placeholder can select
    /// a whole object, so rendering stops there (a JSON value is written
    /// only that far) and the message ends in `…`.
    pub fn render<'a>(&self, mut select: impl FnMut(&JsonPath) -> Vec<&'a Value>) -> String {
        let mut out = Bounded::default();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push(text),
                Part::Path(path) => {
                    let values: Vec<&Value> =
                        select(path).into_iter().filter(|v| !v.is_null()).collect();
                    if values.is_empty() {
                        out.push("<none>");
                    }
                    for (i, value) in values.iter().enumerate() {
                        if i > 0 {
                            out.push(", ");
                        }
                        match value {
                            Value::String(text) => out.push(text),
                            // Stops with an error once the bound is reached.
                            other => {
                                let _ = serde_json::to_writer(&mut out, other);
                            }
                        }
                    }
                }
            }
            if out.full {
                break;
            }
        }
        out.finish()
    }
}

/// Longest rendered message, in bytes (without the closing `…`).
pub const MAX_MESSAGE_BYTES: usize = crate::excerpt::MAX_MESSAGE_BYTES;

/// Text that stops growing at [`MAX_MESSAGE_BYTES`].
#[derive(Default)]
struct Bounded {
    bytes: Vec<u8>,
    full: bool,
}

impl Bounded {
    fn push(&mut self, text: &str) {
        let _ = std::io::Write::write_all(self, text.as_bytes());
    }

    /// The text, cut on a character boundary and marked when it was full.
    fn finish(self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        if !self.full {
            return text.into_owned();
        }
        let mut end = text.len().min(MAX_MESSAGE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    }
}

impl std::io::Write for Bounded {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = MAX_MESSAGE_BYTES.saturating_sub(self.bytes.len());
        if data.len() > room {
            self.bytes.extend_from_slice(&data[..room]);
            self.full = true;
            return Err(std::io::Error::other("the message is full"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_strings_bare_and_joins_lists() {
        let template = Template::compile(
            "pod {{ $.object.metadata.name }} uses {{$.object.images[*]}} ({{ $.object.n }}, {{ $.object.none }})",
            PathScope::DOCUMENT,
        )
        .unwrap();
        let object = json!({"metadata": {"name": "web"}, "images": ["a:1", "b:2"], "n": 3});
        let text = template.render(|path| {
            let mut out = Vec::new();
            path.select(&object, &mut out);
            out
        });
        assert_eq!(text, "pod web uses a:1, b:2 (3, <none>)");
    }

    #[test]
    fn rejects_unclosed_and_bad_paths() {
        assert!(Template::compile("x {{ $.object.a", PathScope::DOCUMENT).is_err());
        assert!(Template::compile("x {{ name }}", PathScope::DOCUMENT).is_err());
    }

    #[test]
    fn a_placeholder_selecting_a_large_value_renders_at_most_the_bound() {
        let template =
            Template::compile("object {{ $.object }} and more", PathScope::DOCUMENT).unwrap();
        let big: Vec<Value> = (0..100_000).map(|i| json!({"n": i})).collect();
        let object = json!({"items": big});
        let text = template.render(|path| {
            let mut out = Vec::new();
            path.select(&object, &mut out);
            out
        });
        assert!(
            text.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8(),
            "{}",
            text.len()
        );
        assert!(text.starts_with("object {\"items\":[{\"n\":0}"), "{text}");
        assert!(text.ends_with('…'));
    }
}
