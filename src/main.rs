//! The `kadmit` binary: parse the command line, set up logging, dispatch.

use std::process::ExitCode;

use clap::Parser;

use kadmit::cli::Cli;

// glibc malloc made the same server 1.7-1.8 times slower in some builds
// (fastbin consolidation after each request's many small frees); mimalloc was
// stable in every measured run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("kadmit: {error:#}");
            ExitCode::from(2)
        }
    }
}
