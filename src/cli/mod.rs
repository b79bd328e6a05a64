//! The command line: global options and one subcommand per file, each with
//! its own `Args` and a `run(args) -> anyhow::Result<ExitCode>`.
//!
//! To add a subcommand: a file `src/cli/NAME.rs` with `Args` (clap `Args`)
//! and `run`, a variant in [`Command`], and its arm in [`Command::run`].

pub mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// kadmit: a Kubernetes admission webhook whose policy is plain YAML rule files.
#[derive(Debug, Parser)]
#[command(name = "kadmit", version, about)]
pub struct Cli {
    /// Log line format (logs go to stderr).
    #[arg(
        long,
        global = true,
        env = "KADMIT_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, fields at the top level.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook over HTTPS, with health and metrics over HTTP.
    Serve(serve::Args),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Serve(args) => serve::run(args),
        }
    }
}
