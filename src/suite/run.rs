//! Running a suite's cases: its rules compiled once, then each case
//! evaluated as `kadmit test` evaluates an input and compared with what it
//! expects.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::diff::unified;
use super::load::{LoadedCase, LoadedSuite};
use crate::eval::Outcome;
use crate::plan::{self, Plan, RuleSetId};
use crate::rules::{Diagnostic, Diagnostics, Severity, load_files, read_paths};
use crate::simulate::{Report, simulate};

/// A suite's rules compiled, and the rule set each case runs.
#[derive(Debug)]
pub struct Compiled {
    /// The plan of the suite's rule files.
    pub plan: Plan,
    /// For each case, in order, the rule set it names (`None`: all).
    pub rule_sets: Vec<Option<RuleSetId>>,
}

/// Compiles the rule files `suite` names; every problem of every file, and
/// every case naming a rule set they do not hold, is a diagnostic.
pub fn compile(suite: &LoadedSuite) -> Result<Compiled, Diagnostics> {
    let read = read_paths(&suite.rules).map_err(|error| {
        let cause = std::error::Error::source(&error)
            .map(|source| format!(": {source}"))
            .unwrap_or_default();
        Diagnostics(vec![Diagnostic {
            severity: Severity::Error,
            file: suite.file.clone(),
            line: 1,
            column: 1,
            path: "rules".to_owned(),
            message: format!("{error}{cause}"),
            hint: None,
        }])
    })?;
    let mut loaded = load_files(read.files);
    let mut diagnostics = read.diagnostics;
    diagnostics.0.append(&mut loaded.diagnostics.0);
    loaded.diagnostics = diagnostics;
    let plan = plan::compile(&loaded)?;
    if plan.rule_sets().is_empty() {
        // Every case expecting an admission would pass, against nothing.
        return Err(Diagnostics(vec![Diagnostic {
            severity: Severity::Error,
            file: suite.file.clone(),
            line: 1,
            column: 1,
            path: "rules".to_owned(),
            message: "the files named hold no rule set: every case would be judged by no rule"
                .to_owned(),
            hint: Some("name the rule files or directories to test".to_owned()),
        }]));
    }
    let mut problems = Diagnostics::default();
    let rule_sets = suite
        .cases
        .iter()
        .map(|case| {
            case.rule_set.as_ref().and_then(|(name, missing)| {
                let id = plan.rule_set_id(name);
                if id.is_none() {
                    problems.push(missing.clone());
                }
                id
            })
        })
        .collect();
    if problems.is_empty() {
        Ok(Compiled { plan, rule_sets })
    } else {
        Err(problems)
    }
}

/// What a case found.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// Every expectation that did not hold; empty when the case passed.
    pub mismatches: Vec<Mismatch>,
    /// How long evaluating and comparing took.
    pub duration: Duration,
}

impl CaseResult {
    /// True when every expectation held.
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// One expectation that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What differs, one line: `denies differ`.
    pub summary: String,
    /// The evidence, usually a unified diff from the expected to the actual
    /// value; may be empty.
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)?;
        if !self.detail.is_empty() {
            write!(f, "\n{}", self.detail.trim_end())?;
        }
        Ok(())
    }
}

/// Runs case `index` of a suite compiled as `compiled`.
pub fn run_case(compiled: &Compiled, index: usize, case: &LoadedCase) -> CaseResult {
    let started = Instant::now();
    let rule_set = compiled.rule_sets.get(index).copied().flatten();
    let report = simulate(&compiled.plan, &case.request, rule_set, false);
    let mismatches = compare(case, &report);
    CaseResult {
        mismatches,
        duration: started.elapsed(),
    }
}

fn compare(case: &LoadedCase, report: &Report) -> Vec<Mismatch> {
    let expect = &case.expect;
    let mut mismatches = Vec::new();
    for (half, error) in [
        ("mutating", &report.mutate.error),
        ("validating", &report.validate.error),
    ] {
        if let Some(error) = error {
            mismatches.push(Mismatch {
                summary: format!(
                    "the {half} half could not evaluate the request: {}",
                    crate::excerpt::printable(error, usize::MAX)
                ),
                detail: String::new(),
            });
        }
    }
    let messages = messages(report);
    if let Some(allowed) = expect.allowed
        && allowed != report.allowed
    {
        let said = |allowed: bool| if allowed { "admitted" } else { "denied" };
        mismatches.push(Mismatch {
            summary: format!(
                "expected the request to be {}, but it was {}",
                said(allowed),
                said(report.allowed)
            ),
            detail: list("messages", &messages),
        });
    }
    for (field, outcome, expected) in [
        ("denies", Outcome::Denied, &expect.denies),
        ("warns", Outcome::Warned, &expect.warns),
    ] {
        let Some(expected) = expected else { continue };
        let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        let actual: BTreeSet<String> = report
            .mutate
            .findings
            .iter()
            .chain(&report.validate.findings)
            .filter(|finding| finding.outcome == outcome)
            .map(|finding| format!("{}/{}", finding.rule_set, finding.rule))
            .collect();
        if !expected
            .iter()
            .copied()
            .eq(actual.iter().map(String::as_str))
        {
            mismatches.push(Mismatch {
                summary: format!("{field} differ"),
                detail: unified(&lines(expected), &lines(actual.iter().map(String::as_str))),
            });
        }
    }
    if let Some(expected) = &expect.messages {
        let missing: Vec<&String> = expected
            .iter()
            .filter(|wanted| !messages.iter().any(|text| text.contains(wanted.as_str())))
            .collect();
        if !missing.is_empty() {
            mismatches.push(Mismatch {
                summary: format!("{} of the expected messages did not appear", missing.len()),
                detail: list("missing", &missing) + &list("messages", &messages),
            });
        }
    }
    if let Some(expected) = &expect.patched {
        let actual = match &report.object {
            Some(mutated) => mutated.clone(),
            None => case
                .request
                .object
                .as_ref()
                .and_then(|object| object.to_value().ok())
                .unwrap_or(Value::Null),
        };
        if !crate::eval::json_equal(expected, &actual) {
            mismatches.push(Mismatch {
                summary: "the patched object differs".to_owned(),
                detail: unified(&yaml(expected), &yaml(&actual)),
            });
        }
    }
    if let Some(expected) = &expect.patch {
        let expected = Value::Array(expected.clone());
        let actual = report
            .mutate
            .patch
            .clone()
            .unwrap_or_else(|| Value::Array(Vec::new()));
        if !crate::eval::json_equal(&expected, &actual) {
            mismatches.push(Mismatch {
                summary: "the patch differs".to_owned(),
                detail: unified(&yaml(&expected), &yaml(&actual)),
            });
        }
    }
    mismatches
}

/// The texts a person sees: the denial message of either half, then every
/// warning.
fn messages(report: &Report) -> Vec<String> {
    [&report.mutate, &report.validate]
        .into_iter()
        .filter_map(|half| half.status.as_ref().map(|status| status.message.clone()))
        .chain(
            [&report.mutate, &report.validate]
                .into_iter()
                .flat_map(|half| half.warnings.iter().cloned()),
        )
        .collect()
}

/// `heading:` and one `  - item` line per item, or `heading: none`.
fn list<T: fmt::Display>(heading: &str, items: &[T]) -> String {
    if items.is_empty() {
        return format!("{heading}: none\n");
    }
    let mut text = format!("{heading}:\n");
    for item in items {
        // Messages and names of the input: escaped, so one cannot forge a
        // line of the report.
        let shown = crate::excerpt::printable(&item.to_string(), usize::MAX);
        text.push_str(&format!("  - {shown}\n"));
    }
    text
}

fn lines<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|item| format!("{}\n", crate::excerpt::printable(item, usize::MAX)))
        .collect()
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|error| format!("<not printable: {error}>\n"))
}
