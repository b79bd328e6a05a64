//! `kadmit check DIR`: compile the rule files and print every problem.
//!
//! Exit codes: 0 when the rules compile, 1 when they have problems (each
//! printed as `file:line:column: field: message (hint)`), 2 when the
//! directory cannot be read.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::output::{Output, stderr_line};
use crate::plan::compile;
use crate::rules::load_dir;

/// Arguments of `kadmit check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Directory of rule files (`*.yaml`, `*.yml`).
    pub dir: PathBuf,
}

/// Runs `kadmit check`.
pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_dir(&args.dir)
        .with_context(|| format!("cannot load rules from {}", args.dir.display()))?;
    let mut out = Output::stdout();
    match compile(&loaded) {
        Ok(plan) => {
            let rules: usize = plan.rule_sets().iter().map(|set| set.rule_count).sum();
            writeln!(
                out,
                "{}: {} rule sets, {} rules, no problems",
                args.dir.display(),
                plan.rule_sets().len(),
                rules
            )
            .context("cannot write to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            for diagnostic in diagnostics.iter() {
                writeln!(out, "{diagnostic}").context("cannot write to stdout")?;
            }
            stderr_line(format_args!(
                "{}: {} problem(s)",
                args.dir.display(),
                diagnostics.len()
            ));
            Ok(ExitCode::from(1))
        }
    }
}
