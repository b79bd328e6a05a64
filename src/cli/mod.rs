//! The `kadmit` command line: one file per subcommand.

pub mod check;
pub mod schema;
pub mod test;
pub mod webhook_config;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kadmit: a Kubernetes admission webhook whose policy is plain YAML rule files.
#[derive(Debug, Parser)]
#[command(name = "kadmit", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile the rule files in a directory and print every problem.
    Check(check::CheckArgs),
    /// Evaluate rule files against objects or AdmissionReviews, offline.
    Test(test::TestArgs),
    /// Print the JSON Schema of rule files.
    Schema,
    /// Print the Mutating/ValidatingWebhookConfiguration for a rules directory.
    WebhookConfig(webhook_config::WebhookConfigArgs),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Check(args) => check::run(args),
            Command::Test(args) => test::run(args),
            Command::Schema => schema::run(),
            Command::WebhookConfig(args) => webhook_config::run(args),
        }
    }
}
