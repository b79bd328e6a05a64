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

    /// The template as written (placeholders as `{{ path }}`).
    pub fn source(&self) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.clone(),
                Part::Path(path) => format!("{{{{ {} }}}}", path.text()),
            })
            .collect()
    }

    /// Renders the template; `select` returns the values of a placeholder's
    /// path. Strings render bare, other values as JSON, several values joined
    /// with `, `, and no value (or null) as `<none>`.
    pub fn render<'a>(&self, mut select: impl FnMut(&JsonPath) -> Vec<&'a Value>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Path(path) => {
                    let values: Vec<&Value> =
                        select(path).into_iter().filter(|v| !v.is_null()).collect();
                    if values.is_empty() {
                        out.push_str("<none>");
                    }
                    for (i, value) in values.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        match value {
                            Value::String(text) => out.push_str(text),
                            other => out.push_str(&other.to_string()),
                        }
                    }
                }
            }
        }
        out
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
}
