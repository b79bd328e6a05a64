//! `kadmit schema [rule-set|suite]`: print the JSON Schema of rule files or
//! of test suite files.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use super::output::Output;

/// Which file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Rule files (`kind: RuleSet`): schema/ruleset.schema.json.
    RuleSet,
    /// Test suite files (`kind: Suite`): schema/suite.schema.json.
    Suite,
}

/// Arguments of `kadmit schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The format whose schema to print.
    #[arg(value_enum, default_value = "rule-set")]
    pub format: Format,
}

/// Runs `kadmit schema`.
pub fn run(args: SchemaArgs) -> anyhow::Result<ExitCode> {
    let schema = match args.format {
        Format::RuleSet => crate::rules::json_schema(),
        Format::Suite => crate::suite::json_schema(),
    };
    let schema = serde_json::to_string_pretty(&schema)?;
    writeln!(Output::stdout(), "{schema}").context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
