//! The `kadmit` binary: allocator, TLS provider, logging, and dispatch to the
//! subcommands in [`cli`].

mod cli;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;
use tracing_subscriber::EnvFilter;

use cli::{Cli, LogFormat};

// glibc malloc falls into a state where a third of the CPU goes to
// consolidation, making the same server 1.7x slower depending on the build;
// mimalloc was stable in every run (stack notes, section 4).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, before anything can touch rustls: exactly one process-wide
    // provider, so no transitive feature can make the choice ambiguous. An
    // error only means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match cli.command.run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr (stdout carries the parseable `listening ...` line),
/// filtered by `RUST_LOG`, `info` by default.
fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
