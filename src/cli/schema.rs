//! `kadmit schema`: print the JSON Schema of rule files.

use std::process::ExitCode;

/// Runs `kadmit schema`.
pub fn run() -> anyhow::Result<ExitCode> {
    println!(
        "{}",
        serde_json::to_string_pretty(&crate::rules::json_schema())?
    );
    Ok(ExitCode::SUCCESS)
}
