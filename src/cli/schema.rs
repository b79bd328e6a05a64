//! `kadmit schema`: print the JSON Schema of rule files.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::output::Output;

/// Runs `kadmit schema`.
pub fn run() -> anyhow::Result<ExitCode> {
    let schema = serde_json::to_string_pretty(&crate::rules::json_schema())?;
    writeln!(Output::stdout(), "{schema}").context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
