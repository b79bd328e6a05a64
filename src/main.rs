//! The `kadmit` binary: allocator, TLS provider, logging, dispatch.

// `println!` and `eprintln!` panic when their stream is closed; output goes
// through `kadmit::cli::output` instead.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt as _, dynamic_filter_fn};
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use kadmit::cli::color::ColorChoice;
use kadmit::cli::{Cli, LogFormat};
use kadmit::log_throttle::LogThrottle;
use kadmit::server::early::EarlyAnswers;

// glibc malloc made the same server 1.7-1.8 times slower in some builds
// (fastbin consolidation after each request's many small frees); mimalloc was
// stable in every measured run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, before anything can touch rustls: exactly one process-wide
    // provider, so no transitive feature can make the choice ambiguous. An
    // error only means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let cli = Cli::parse();
    init_tracing(cli.log_format, cli.color);
    match cli.command.run(cli.color) {
        Ok(code) => code,
        Err(error) => {
            kadmit::cli::output::stderr_line(format_args!("kadmit: {error:#}"));
            ExitCode::from(2)
        }
    }
}

/// The filter `rust_log` (`RUST_LOG`) gives, `info` when unset or invalid,
/// with the `h2` crate held to errors unless it names `h2`: h2 warns once
/// per misbehaving HTTP/2 connection, unthrottled (470 lines a second from
/// one client sending rapid resets), while kadmit's own lines about
/// clients are throttled.
fn log_filter(rust_log: Option<&str>) -> EnvFilter {
    let filter = rust_log
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    if rust_log.is_some_and(|directives| directives.contains("h2")) {
        return filter;
    }
    match "h2=error".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// Lines of other crates' events, let through at most 100 every 10 s:
/// clients choose how many there are (actix-http logs an error for each
/// malformed request head, 6,500 lines a second from one client).
/// kadmit's own lines about clients have throttles of their own.
static OTHER_CRATES_LOG: LogThrottle = LogThrottle::new(100, Duration::from_secs(10));

/// Whether an event the level filter let through is logged: kadmit's
/// always, another crate's within [`OTHER_CRATES_LOG`]; one that is not is
/// counted in `kadmit_log_lines_dropped_total`, so a flood hiding other
/// lines (an accept error) is seen.
fn within_log_rate(metadata: &tracing::Metadata<'_>) -> bool {
    if !metadata.is_event()
        || metadata.target().starts_with("kadmit")
        || OTHER_CRATES_LOG.admit(Instant::now()).is_some()
    {
        return true;
    }
    metrics::counter!(kadmit::metrics::LOG_LINES_DROPPED).increment(1);
    false
}

/// Logs to stderr (stdout carries the parseable `listening ...` line and the
/// CLI's reports), filtered by `RUST_LOG`, `info` by default; and counts the
/// answers actix gives before kadmit sees a request (`server::early`), which
/// it announces only as trace events. Text lines are coloured as `--color`
/// says for stderr; JSON lines never are.
fn init_tracing(format: LogFormat, color: ColorChoice) {
    let filter = || {
        log_filter(std::env::var("RUST_LOG").ok().as_deref())
            .and(dynamic_filter_fn(|metadata, _| within_log_rate(metadata)))
    };
    let ansi = color.enabled(std::io::stderr().is_terminal());
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_filter(filter())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            // Escape codes inside JSON strings only get in a parser's way.
            .with_ansi(false)
            .with_filter(filter())
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(EarlyAnswers.with_filter(EarlyAnswers))
        .init();
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn h2_warnings_are_off_unless_asked_for() {
        assert_eq!(log_filter(None).to_string(), "h2=error,info");
        assert_eq!(log_filter(Some("debug")).to_string(), "h2=error,debug");
        assert_eq!(log_filter(Some("info,h2=warn")).to_string(), "h2=warn,info");
        assert_eq!(log_filter(Some("[[")).to_string(), "h2=error,info");
    }
}
