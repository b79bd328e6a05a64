//! Reading rule files: the directory walk, multi-document files, and turning
//! serde errors into [`Diagnostic`]s with positions.
//!
//! A directory is read whole (top-level `*.yaml` / `*.yml`, sorted by name,
//! hidden entries such as the kubelet's `..data` skipped; symlinks followed) and
//! every problem of every file is collected before anything fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::position::PositionIndex;
use super::{Diagnostic, Diagnostics, Rule, RuleSet};

/// The text of one rule file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name diagnostics use (the path as given).
    pub name: String,
    /// The contents.
    pub text: String,
}

impl SourceFile {
    /// A 64-bit FNV-1a hash of the contents, in hex: cheap change detection
    /// and an identifier operators can compare between replicas.
    pub fn content_hash(&self) -> String {
        format!("{:016x}", fnv1a(FNV_OFFSET, self.text.as_bytes()))
    }
}

/// The FNV-1a starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues the 64-bit FNV-1a hash `hash` over `bytes`: not cryptographic,
/// only to notice changed files cheaply.
pub fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A parsed rule set and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedRuleSet {
    /// The rule set, holding only the rules that parsed.
    pub rule_set: RuleSet<Rule>,
    /// The file it came from.
    pub file: Arc<str>,
    /// Positions of its fields, for diagnostics found later.
    pub positions: Arc<PositionIndex>,
    /// For each rule that parsed, its index in the file's `spec.rules` (rules
    /// that did not parse are left out, so the two can differ).
    pub rule_indices: Vec<usize>,
}

impl LoadedRuleSet {
    /// A diagnostic at `path` within this rule set's document.
    pub fn diagnostic(
        &self,
        path: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let position = self.positions.locate(path);
        Diagnostic {
            file: self.file.to_string(),
            line: position.line,
            column: position.column,
            path: path.to_owned(),
            message: message.into(),
            hint,
        }
    }
}

/// What reading a directory produced: the rule sets that parsed, and every
/// problem found. A non-empty `diagnostics` means the set must not be served.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Rule sets, in file order then document order.
    pub rule_sets: Vec<LoadedRuleSet>,
    /// The files read, in name order.
    pub files: Vec<SourceFile>,
    /// Every problem found.
    pub diagnostics: Diagnostics,
}

/// The directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Listing the directory or reading a file failed.
    #[error("cannot read {path}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Reads every rule file in `dir`.
pub fn load_dir(dir: &Path) -> Result<Loaded, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let path = entry.path();
        // `is_file` follows symlinks: the kubelet's visible files are links
        // through `..data`.
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
        files.push(SourceFile {
            name: path.display().to_string(),
            text,
        });
    }
    Ok(load_files(files))
}

/// Parses rule files already in memory.
pub fn load_files(files: Vec<SourceFile>) -> Loaded {
    let mut loaded = Loaded::default();
    for file in &files {
        load_one(file, &mut loaded.rule_sets, &mut loaded.diagnostics);
    }
    loaded.files = files;
    loaded
}

/// Parses one file's text (named `name` in diagnostics).
pub fn load_str(name: &str, text: &str) -> Loaded {
    load_files(vec![SourceFile {
        name: name.to_owned(),
        text: text.to_owned(),
    }])
}

fn load_one(file: &SourceFile, out: &mut Vec<LoadedRuleSet>, diagnostics: &mut Diagnostics) {
    if file.text.trim().is_empty() {
        // Seen between the truncate and the write of an editor or `>`
        // redirection: serving it would silently drop the file's rule sets.
        diagnostics.push(Diagnostic {
            file: file.name.clone(),
            line: 1,
            column: 1,
            path: String::new(),
            message: "file is empty".to_owned(),
            hint: Some("delete the file to remove its rule sets".to_owned()),
        });
        return;
    }
    let name: Arc<str> = Arc::from(file.name.as_str());
    let indexes = PositionIndex::build_all(&file.text);
    for (doc_index, document) in serde_yaml::Deserializer::from_str(&file.text).enumerate() {
        let value = match serde_yaml::Value::deserialize(document) {
            Ok(value) => value,
            Err(error) => {
                // A syntax error ends the stream: later documents cannot be found.
                let (line, column) = error
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((0, 0));
                diagnostics.push(Diagnostic {
                    file: file.name.clone(),
                    line,
                    column,
                    path: String::new(),
                    message: strip_location(&error.to_string()),
                    hint: Some("the file is not valid YAML".to_owned()),
                });
                return;
            }
        };
        if value.is_null() {
            continue; // an empty document, e.g. a trailing `---`
        }
        let positions = Arc::new(indexes.get(doc_index).cloned().unwrap_or_default());
        let context = DocContext {
            file: &name,
            positions: &positions,
        };
        let shell: RuleSet<serde_yaml::Value> = match context.deserialize("", value, diagnostics) {
            Some(shell) => shell,
            None => continue,
        };
        let mut rules = Vec::with_capacity(shell.spec.rules.len());
        let mut rule_indices = Vec::with_capacity(shell.spec.rules.len());
        for (i, rule) in shell.spec.rules.into_iter().enumerate() {
            let prefix = format!("spec.rules[{i}]");
            if let Some(rule) = context.deserialize::<Rule>(&prefix, rule, diagnostics) {
                rules.push(rule);
                rule_indices.push(i);
            }
        }
        out.push(LoadedRuleSet {
            rule_set: RuleSet {
                api_version: shell.api_version,
                kind: shell.kind,
                metadata: shell.metadata,
                spec: super::RuleSetSpec {
                    failure_policy: shell.spec.failure_policy,
                    timeout_seconds: shell.spec.timeout_seconds,
                    namespace_selector: shell.spec.namespace_selector,
                    rules,
                },
            },
            file: name.clone(),
            positions,
            rule_indices,
        });
    }
}

struct DocContext<'a> {
    file: &'a Arc<str>,
    positions: &'a PositionIndex,
}

impl DocContext<'_> {
    /// Deserializes `value` (found at `prefix`), reporting a failure with the
    /// full field path and its position.
    fn deserialize<T: DeserializeOwned>(
        &self,
        prefix: &str,
        value: serde_yaml::Value,
        diagnostics: &mut Diagnostics,
    ) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                let inner = error.path().to_string();
                let mut path = match (prefix.is_empty(), inner.as_str()) {
                    (_, ".") => prefix.to_owned(),
                    (true, _) => inner.clone(),
                    (false, _) if inner.starts_with('[') => format!("{prefix}{inner}"),
                    (false, _) => format!("{prefix}.{inner}"),
                };
                let message = strip_location(&error.into_inner().to_string());
                // For an unknown field, point at the field itself.
                let mut hint = None;
                if let Some(field) = unknown_field(&message) {
                    let already = path == field || path.ends_with(&format!(".{field}"));
                    path = if already {
                        path
                    } else if path.is_empty() {
                        field.to_owned()
                    } else {
                        format!("{path}.{field}")
                    };
                    hint = Some("check the spelling; see schema/ruleset.schema.json".to_owned());
                }
                let position = self.positions.locate(&path);
                diagnostics.push(Diagnostic {
                    file: self.file.to_string(),
                    line: position.line,
                    column: position.column,
                    path,
                    message,
                    hint,
                });
                None
            }
        }
    }
}

fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

/// yaml errors append " at line L column C"; the diagnostic carries that already.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(cut) => message[..cut].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: demo
spec:
  rules:
    - name: one
      match:
        resources: [pods]
      deny:
        - message: no
";

    #[test]
    fn loads_several_documents() {
        let text = format!("{GOOD}---\n{}", GOOD.replace("demo", "other"));
        let loaded = load_str("a.yaml", &text);
        assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
        let names: Vec<_> = loaded
            .rule_sets
            .iter()
            .map(|r| r.rule_set.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["demo", "other"]);
    }

    #[test]
    fn reports_every_bad_rule_with_its_position() {
        let text = GOOD.replace("      deny:", "      denny:\n      deny:")
            + "    - name: two\n      match:\n        resources: [pods]\n        operations: [CREAT]\n";
        let loaded = load_str("a.yaml", &text);
        let printed: Vec<String> = loaded.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(printed.len(), 2, "{printed:#?}");
        assert!(
            printed[0].starts_with("a.yaml:10:7: spec.rules[0].denny: unknown field `denny`"),
            "{}",
            printed[0]
        );
        assert!(
            printed[1].starts_with(
                "a.yaml:16:22: spec.rules[1].match.operations[0]: unknown variant `CREAT`"
            ),
            "{}",
            printed[1]
        );
    }

    #[test]
    fn reports_yaml_syntax_errors() {
        let loaded = load_str("bad.yaml", "a: [1, 2\nb: 3\n");
        assert_eq!(loaded.diagnostics.len(), 1);
        let d = &loaded.diagnostics.0[0];
        assert!(d.line > 0, "{d}");
        assert_eq!(d.file, "bad.yaml");
    }

    #[test]
    fn an_empty_file_is_an_error_not_an_empty_rule_set() {
        let loaded = load_str("half-written.yaml", "");
        assert_eq!(loaded.diagnostics.len(), 1);
        assert_eq!(
            loaded.diagnostics.0[0].to_string(),
            "half-written.yaml:1:1: file is empty (delete the file to remove its rule sets)"
        );
    }

    #[test]
    fn header_errors_name_the_field() {
        let loaded = load_str(
            "h.yaml",
            &GOOD.replace("kadmit.dev/v1alpha1", "kadmit.dev/v9"),
        );
        let d = &loaded.diagnostics.0[0];
        assert_eq!(d.path, "apiVersion");
        assert_eq!((d.line, d.column), (1, 1));
    }
}
