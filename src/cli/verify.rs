//! `kadmit verify PATH...`: run test suites of rules (`*.suite.yaml`) and
//! report like `cargo test`: one line per case, then each failure with a
//! diff of what was expected and what happened, then a summary.
//!
//! Exit codes: 0 when every case passed, 1 when any failed, 2 when a suite
//! could not be used (unreadable, malformed, over a bound, or its rules do
//! not compile; every other suite still runs), no suite was found, or
//! `--filter` selected no case.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;

use super::check::write_diagnostic;
use super::color::{ColorChoice, Paint};
use super::inputs;
use super::junit;
use super::output::{self, escaped, stderr_line};
use crate::rules::Diagnostics;
use crate::suite::{self, Compiled, LoadedSuite, SUITE_SUFFIXES};

/// Arguments of `kadmit verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Suite files, or directories whose `*.suite.yaml` files (at any depth)
    /// are run.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Also write the results as JUnit XML to FILE, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Run only the cases whose `suite::case` name contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

/// The suite files below `paths`: a file as given, a directory's
/// `*.suite.yaml` / `*.suite.yml` files in name order.
fn suite_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for path in paths {
        if !path.is_dir() {
            found.push(path.clone());
            continue;
        }
        let before = found.len();
        for file in inputs::files(path, &["yaml", "yml"], false)? {
            let name = file
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if SUITE_SUFFIXES.iter().any(|suffix| name.ends_with(suffix)) {
                found.push(file);
            }
        }
        if found.len() == before {
            bail!(
                "{}: no suite files (*.suite.yaml) in the directory",
                path.display()
            );
        }
    }
    Ok(found)
}

/// A suite ready to run (boxed: a plan is large beside a diagnostics
/// list), or why it cannot.
enum Prepared {
    Ready(Box<(LoadedSuite, Compiled)>),
    Broken {
        name: String,
        file: String,
        diagnostics: Diagnostics,
    },
}

fn prepare(path: &Path) -> Prepared {
    let broken = |diagnostics| Prepared::Broken {
        name: path.display().to_string(),
        file: path.display().to_string(),
        diagnostics,
    };
    let loaded = match suite::load(path) {
        Ok(loaded) => loaded,
        Err(diagnostics) => return broken(diagnostics),
    };
    match suite::compile(&loaded) {
        Ok(compiled) => Prepared::Ready(Box::new((loaded, compiled))),
        Err(diagnostics) => Prepared::Broken {
            name: loaded.name,
            file: loaded.file,
            diagnostics,
        },
    }
}

/// A failed case, for the failures section.
struct Failure {
    id: String,
    location: String,
    report: String,
}

/// Runs `kadmit verify`.
pub fn run(args: VerifyArgs, color: ColorChoice) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let paint = Paint::stdout(color);
    let files = suite_files(&args.paths)?;
    let mut out = output::Output::stdout();
    let write_error = "cannot write the report to stdout";

    let selected = |suite: &str, case: &str| {
        args.filter
            .as_deref()
            .is_none_or(|filter| format!("{suite}::{case}").contains(filter))
    };
    // One suite at a time: each is loaded, run and dropped (its objects and
    // its plan) before the next is read, so the run takes what its largest
    // suite takes however many suites it runs (eight suites of 245,000
    // nodes each, all loaded first, took 2.8 GB). What is kept is text: the
    // problems of suites that could not be used and a line per case, printed
    // once every suite has run, as the count of cases comes first.
    let mut broken: Vec<Diagnostics> = Vec::new();
    let mut lines = Vec::new();
    let mut to_run = 0;
    let mut filtered_out = 0;
    let mut junit_suites = Vec::with_capacity(files.len());
    let mut failures = Vec::new();
    let mut passed = 0;
    for file in &files {
        let (loaded, compiled) = match prepare(file) {
            Prepared::Ready(ready) => *ready,
            Prepared::Broken {
                name,
                file,
                diagnostics,
            } => {
                junit_suites.push(junit::TestSuite {
                    name,
                    file,
                    cases: Vec::new(),
                    error: Some(diagnostics.to_string()),
                });
                broken.push(diagnostics);
                continue;
            }
        };
        let mut cases = Vec::with_capacity(loaded.cases.len());
        for (index, case) in loaded.cases.iter().enumerate() {
            if !selected(&loaded.name, &case.name) {
                filtered_out += 1;
                continue;
            }
            to_run += 1;
            // Names come from the suite, which comes from anyone: shown
            // escaped, so a newline in one cannot forge a line of the report.
            let id = format!("{}::{}", escaped(&loaded.name), escaped(&case.name));
            let result = suite::run_case(&compiled, index, case);
            let verdict = if result.passed() {
                passed += 1;
                paint.success("ok").to_string()
            } else {
                paint.error("FAILED").to_string()
            };
            lines.push(format!("test {id} ... {verdict}"));
            let failure = (!result.passed()).then(|| {
                let report = result
                    .mismatches
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n\n");
                let summary = result
                    .mismatches
                    .iter()
                    .map(|mismatch| mismatch.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ");
                failures.push(Failure {
                    id,
                    location: format!("{}:{}:{}", escaped(&loaded.file), case.line, case.column),
                    report: report.clone(),
                });
                (summary, report)
            });
            cases.push(junit::TestCase {
                name: case.name.clone(),
                line: case.line,
                duration: result.duration,
                failure,
            });
        }
        junit_suites.push(junit::TestSuite {
            name: loaded.name,
            file: loaded.file,
            cases,
            error: None,
        });
    }

    for diagnostics in &broken {
        for diagnostic in diagnostics.iter() {
            write_diagnostic(&mut out, diagnostic, paint).context(write_error)?;
        }
    }
    if !broken.is_empty() {
        writeln!(out).context(write_error)?;
    }
    let noun = |n: usize| if n == 1 { "case" } else { "cases" };
    writeln!(out, "running {to_run} {}", noun(to_run)).context(write_error)?;
    for line in &lines {
        writeln!(out, "{line}").context(write_error)?;
    }
    let broken = broken.len();

    if !failures.is_empty() {
        writeln!(out, "\nfailures:\n").context(write_error)?;
        for failure in &failures {
            writeln!(
                out,
                "{}",
                paint.bold(format_args!(
                    "---- {} ({}) ----",
                    failure.id, failure.location
                ))
            )
            .context(write_error)?;
            write_report(&mut out, &failure.report, paint).context(write_error)?;
            writeln!(out).context(write_error)?;
        }
        writeln!(out, "failures:").context(write_error)?;
        for failure in &failures {
            writeln!(out, "    {}", failure.id).context(write_error)?;
        }
    }
    let elapsed = started.elapsed();
    // A filter that selects nothing checks nothing: a CI gate on it must
    // not pass (a typo in the filter would pass forever).
    let nothing_selected = args.filter.is_some() && to_run == 0;
    let ok = failures.is_empty() && broken == 0 && !nothing_selected;
    let mut summary = format!("{passed} passed; {} failed", failures.len());
    if broken > 0 {
        summary.push_str(&format!(
            "; {broken} {} could not be used",
            if broken == 1 { "suite" } else { "suites" }
        ));
    }
    if filtered_out > 0 {
        summary.push_str(&format!("; {filtered_out} filtered out"));
    }
    writeln!(
        out,
        "\ntest result: {}. {summary}; finished in {:.2}s",
        if ok {
            paint.success("ok").to_string()
        } else {
            paint.error("FAILED").to_string()
        },
        elapsed.as_secs_f64()
    )
    .context(write_error)?;
    out.flush().context(write_error)?;

    if let Some(path) = &args.junit {
        write_junit(path, &junit_suites, elapsed)?;
    }
    if broken > 0 {
        stderr_line(format_args!(
            "kadmit: {broken} suite file(s) could not be used; their problems are listed above"
        ));
    }
    if nothing_selected {
        stderr_line(format_args!(
            "kadmit: no case matches --filter {:?}",
            args.filter.as_deref().unwrap_or_default()
        ));
    }
    Ok(if broken > 0 || nothing_selected {
        ExitCode::from(2)
    } else if !failures.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A failure's report, its diff lines coloured.
fn write_report(out: &mut impl Write, report: &str, paint: Paint) -> std::io::Result<()> {
    for line in report.lines() {
        // The report quotes messages and objects of the input.
        let line = &escaped(line);
        if line.starts_with("+++") || line.starts_with("---") || line.starts_with("@@") {
            writeln!(out, "{}", paint.note(line))?;
        } else if line.starts_with('+') {
            writeln!(out, "{}", paint.success(line))?;
        } else if line.starts_with('-') {
            writeln!(out, "{}", paint.error(line))?;
        } else {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// Writes the JUnit report beside its final name, then renames it, so a CI
/// system never reads half a file.
fn write_junit(path: &Path, suites: &[junit::TestSuite], elapsed: Duration) -> anyhow::Result<()> {
    let xml = junit::render(suites, elapsed);
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, xml)
        .with_context(|| format!("cannot write the JUnit report to {}", partial.display()))?;
    std::fs::rename(&partial, path)
        .with_context(|| format!("cannot write the JUnit report to {}", path.display()))
}
