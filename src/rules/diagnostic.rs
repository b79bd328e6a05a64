//! Problems found in rule files, each with its file, line, column and field path.

use std::fmt;

/// How much a [`Diagnostic`] matters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The rules cannot be served: `kadmit check` fails, a reload keeps the
    /// plan that serves.
    #[default]
    Error,
    /// The rules compile and serve, but something in them cannot do what it
    /// looks like it does (a path no matched kind has). `kadmit check` prints
    /// it and passes unless `--deny-warnings`; a reload logs it.
    Warning,
}

/// One problem in a rule file.
///
/// Prints as `file:line:column: field.path: message (hint)`, the form editors
/// and CI logs link to; a warning as `file:line:column: warning: field.path:
/// message (hint)`, as compilers print theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Whether it blocks the rules.
    pub severity: Severity,
    /// The file, as it was named when loading.
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: usize,
    /// 1-based column; 0 when unknown.
    pub column: usize,
    /// Field path within the document, e.g. `spec.rules[2].deny[0].matches`.
    pub path: String,
    /// What is wrong, lowercase, naming the bad value.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl Diagnostic {
    /// An error in `file` at `line` and `column`, of the file as a whole
    /// rather than of a field.
    pub fn error(file: &str, line: usize, column: usize, message: String, hint: &str) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.to_owned(),
            line,
            column,
            path: String::new(),
            message,
            hint: Some(hint.to_owned()),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        // A path and a message quote the rule file, whose keys and values
        // may be megabytes long: a line stays readable, in a terminal and
        // in the log of a failed reload.
        fn cut(text: &str) -> std::borrow::Cow<'_, str> {
            crate::excerpt::cut(text, crate::excerpt::MAX_MESSAGE_BYTES)
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", cut(&self.path))?;
        }
        f.write_str(&cut(&self.message))?;
        if let Some(hint) = &self.hint {
            write!(f, " ({})", cut(hint))?;
        }
        Ok(())
    }
}

/// Every problem found in a set of rule files, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// True when nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when at least one problem is an error, not a warning.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.0
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .count()
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds a problem.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    /// Iterates over the problems.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// Keeps the first `len` problems.
    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Drops each problem from position `start` on that repeats an earlier
    /// one of those: one mistake found by several checks is said once.
    pub fn dedup_from(&mut self, start: usize) {
        let mut kept: Vec<Diagnostic> = Vec::new();
        for diagnostic in self.0.drain(start.min(self.0.len())..) {
            if !kept.contains(&diagnostic) {
                kept.push(diagnostic);
            }
        }
        self.0.extend(kept);
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
