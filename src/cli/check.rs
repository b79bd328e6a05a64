//! `kadmit check DIR`: compile the rule files and print every problem.
//!
//! Exit codes: 0 when the rules compile (warnings, printed, do not count
//! unless `--deny-warnings`), 1 when they have problems (each printed as
//! `file:line:column: field: message (hint)`), 2 when the directory or an
//! `--openapi` file cannot be read.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::color::{ColorChoice, Paint};
use super::output::{Output, stderr_line};
use crate::plan::{Fields, compile_with, openapi};
use crate::rules::{Diagnostic, Severity, load_dir};

/// Arguments of `kadmit check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Directory of rule files (`*.yaml`, `*.yml`).
    pub dir: PathBuf,

    /// Fail (exit 1) on warnings too: paths no matched kind has.
    #[arg(long)]
    pub deny_warnings: bool,

    /// The fields of custom resources, to check rules' paths against: an
    /// OpenAPI v3 document (`kubectl get --raw
    /// /openapi/v3/apis/GROUP/VERSION`) or CustomResourceDefinitions (YAML
    /// or JSON). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub openapi: Vec<PathBuf>,
}

/// Runs `kadmit check`.
pub fn run(args: CheckArgs, color: ColorChoice) -> anyhow::Result<ExitCode> {
    let paint = Paint::stdout(color);
    // The OpenAPI files first: a bad one is refused before any rule is read.
    let mut fields: Option<Fields> = None;
    for path in &args.openapi {
        let read = openapi::read(path).context("cannot use an --openapi file")?;
        fields.get_or_insert_with(Fields::default).extend(read);
    }
    let loaded = load_dir(&args.dir)
        .with_context(|| format!("cannot load rules from {}", args.dir.display()))?;
    let mut out = Output::stdout();
    match compile_with(&loaded, fields.as_ref()) {
        Ok(plan) if plan.rule_sets().is_empty() => {
            stderr_line(format_args!(
                "{}: {}",
                args.dir.display(),
                Paint::stderr(color).error(super::inputs::NO_RULE_SETS.to_owned())
            ));
            Ok(ExitCode::from(1))
        }
        Ok(plan) => {
            for warning in plan.warnings().iter() {
                write_diagnostic(&mut out, warning, paint).context("cannot write to stdout")?;
            }
            let rules: usize = plan.rule_sets().iter().map(|set| set.rule_count).sum();
            let warnings = plan.warnings().len();
            let verdict = if warnings == 0 {
                paint.success("no problems".to_owned())
            } else {
                paint.warning(format!("{warnings} warning(s)"))
            };
            writeln!(
                out,
                "{}: {} rule sets, {} rules, {}",
                args.dir.display(),
                plan.rule_sets().len(),
                rules,
                verdict
            )
            .context("cannot write to stdout")?;
            if warnings > 0 && args.deny_warnings {
                stderr_line(format_args!(
                    "{}: {} (--deny-warnings)",
                    args.dir.display(),
                    Paint::stderr(color).error(format!("{warnings} warning(s)"))
                ));
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            for diagnostic in diagnostics.iter() {
                write_diagnostic(&mut out, diagnostic, paint).context("cannot write to stdout")?;
            }
            let warnings = diagnostics.warnings();
            let mut problems = format!("{} problem(s)", diagnostics.len() - warnings);
            if warnings > 0 {
                problems.push_str(&format!(", {warnings} warning(s)"));
            }
            stderr_line(format_args!(
                "{}: {}",
                args.dir.display(),
                Paint::stderr(color).error(problems)
            ));
            Ok(ExitCode::from(1))
        }
    }
}

/// Writes `diagnostic` as its `Display` form (`file:line:col: path: message
/// (hint)`), the position in bold and the hint in colour when `paint` is on.
pub(super) fn write_diagnostic(
    out: &mut impl std::io::Write,
    diagnostic: &Diagnostic,
    paint: Paint,
) -> std::io::Result<()> {
    if !paint.is_enabled() {
        // Exactly the Display form, which the golden files hold.
        return writeln!(out, "{diagnostic}");
    }
    let Diagnostic {
        severity,
        file,
        line,
        column,
        path,
        message,
        hint,
    } = diagnostic;
    write!(
        out,
        "{} ",
        paint.bold(format_args!("{file}:{line}:{column}:"))
    )?;
    if *severity == Severity::Warning {
        write!(out, "{} ", paint.warning("warning:"))?;
    }
    if !path.is_empty() {
        write!(out, "{path}: ")?;
    }
    match severity {
        Severity::Error => write!(out, "{}", paint.error(message))?,
        Severity::Warning => write!(out, "{}", paint.warning(message))?,
    }
    if let Some(hint) = hint {
        write!(out, " {}", paint.note(format_args!("({hint})")))?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_painted_diagnostic_is_the_plain_one_with_escape_codes() {
        let diagnostic = Diagnostic {
            severity: Severity::Error,
            file: "rules/a.yaml".to_owned(),
            line: 3,
            column: 7,
            path: "spec.rules[0].deny[0]".to_owned(),
            message: "unknown field `mesage`".to_owned(),
            hint: Some("did you mean `message`?".to_owned()),
        };
        let render = |enabled| {
            let mut out = Vec::new();
            write_diagnostic(&mut out, &diagnostic, Paint::new(enabled)).expect("write");
            String::from_utf8(out).expect("UTF-8")
        };
        let (plain, painted) = (render(false), render(true));
        assert_eq!(plain, format!("{diagnostic}\n"));
        assert!(!plain.contains('\x1b'));
        assert!(
            painted.contains("\x1b[1mrules/a.yaml:3:7:\x1b[0m"),
            "{painted:?}"
        );
        let stripped = painted
            .split('\x1b')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    part
                } else {
                    part.split_once('m').map_or("", |(_, rest)| rest)
                }
            })
            .collect::<String>();
        assert_eq!(stripped, plain);
    }
}
