//! The `kadmit` command line: global options and one file per subcommand, each
//! with its own args and a `run(args) -> anyhow::Result<ExitCode>`.

pub mod audit;
pub mod check;
pub mod color;
pub mod inputs;
pub mod junit;
pub mod output;
pub mod policies;
pub mod replay;
pub mod schema;
pub mod serve;
pub mod test;
pub mod verify;
pub mod webhook_config;

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

    /// Colour the output: `auto` when the stream is a terminal (honouring
    /// NO_COLOR and CLICOLOR_FORCE), `always`, or `never`.
    #[arg(
        long,
        global = true,
        env = "KADMIT_COLOR",
        value_enum,
        value_name = "WHEN",
        default_value_t = color::ColorChoice::Auto
    )]
    pub color: color::ColorChoice,

    /// The subcommand.
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
    Serve(Box<serve::Args>),
    /// Compile the rule files in a directory and print every problem.
    Check(check::CheckArgs),
    /// Evaluate rule files against objects or AdmissionReviews, offline.
    Test(test::TestArgs),
    /// Run test suites of rules (*.suite.yaml) and report each case, like cargo test.
    Verify(verify::VerifyArgs),
    /// Judge existing objects (kubectl output, manifests) as their CREATE would be.
    Audit(audit::AuditArgs),
    /// Evaluate recorded AdmissionReviews against new rules and print every decision that changes.
    Replay(replay::ReplayArgs),
    /// Print the JSON Schema of rule files (or of test suite files).
    Schema(schema::SchemaArgs),
    /// Print the Mutating/ValidatingWebhookConfiguration for a rules directory.
    WebhookConfig(webhook_config::WebhookConfigArgs),
    /// Print the rules as in-tree Validating- and MutatingAdmissionPolicies
    /// and their bindings.
    Policies(policies::PoliciesArgs),
}

impl Command {
    /// Runs the subcommand, colouring its reports as `color` says.
    pub fn run(self, color: color::ColorChoice) -> anyhow::Result<ExitCode> {
        match self {
            Command::Serve(args) => serve::run(*args),
            Command::Check(args) => check::run(args, color),
            Command::Test(args) => test::run(args, color),
            Command::Verify(args) => verify::run(args, color),
            Command::Audit(args) => audit::run(args, color),
            Command::Replay(args) => replay::run(args, color),
            Command::Schema(args) => schema::run(args),
            Command::WebhookConfig(args) => webhook_config::run(args),
            Command::Policies(args) => policies::run(args),
        }
    }
}
