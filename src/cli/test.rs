//! `kadmit test DIR INPUT...`: evaluate rule files against objects or
//! AdmissionReviews offline, as the API server would (mutate, then validate
//! the mutated object), and print the verdict, warnings, patch and mutated
//! object.
//!
//! Exit codes: 0 when every input is admitted, 1 when any is denied, 2 when
//! the rules do not compile, an input cannot be read, a review cannot be
//! evaluated, or the report cannot be written. When the reader of stdout goes
//! away (`kadmit test ... | head -c1`), the report stops there, every input is
//! still evaluated, and the exit code is the one the whole report would have
//! had (see [`super::output`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::color::{ColorChoice, Paint};
use super::inputs;
use super::output::{self, escaped};
use crate::review::Operation;
use crate::rules::{ReadProblem, read_bounded};
use crate::simulate::{ObjectOptions, Report, parse_value, read_input, simulate};
use crate::suite::MAX_OBJECT_BYTES;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// One JSON document per input, for machines.
    Json,
}

/// Operation for plain objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OperationArg {
    /// CREATE
    Create,
    /// UPDATE (give the old object with --old)
    Update,
    /// DELETE (the input is the object being deleted)
    Delete,
    /// CONNECT
    Connect,
}

/// Arguments of `kadmit test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Directory of rule files.
    pub dir: PathBuf,
    /// AdmissionReviews or Kubernetes objects, JSON or YAML.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Operation for plain objects.
    #[arg(long, value_enum, default_value = "create")]
    pub operation: OperationArg,
    /// The old object, for an UPDATE of a plain object.
    #[arg(long)]
    pub old: Option<PathBuf>,
    /// Requesting user for plain objects.
    #[arg(long, default_value = "kadmit-test")]
    pub user: String,
    /// Groups of the requesting user (repeatable).
    #[arg(long = "group", default_values_t = ["system:authenticated".to_owned()])]
    pub groups: Vec<String>,
    /// Namespace for plain objects that name none.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Plural resource for kinds kadmit cannot derive (e.g. widgets.example.com).
    #[arg(long)]
    pub resource: Option<String>,
    /// Only this rule set, as /validate/{ruleset} would.
    #[arg(long)]
    pub rule_set: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// Say for every rule why it applied or not.
    #[arg(long)]
    pub explain: bool,
}

/// The text of an input file: at most [`MAX_OBJECT_BYTES`], the API
/// server's limit on a request.
fn read_text(path: &Path) -> anyhow::Result<String> {
    match read_bounded(path, MAX_OBJECT_BYTES) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => anyhow::bail!("cannot read {}: no such file", path.display()),
        Err(ReadProblem::TooLarge(bytes)) => anyhow::bail!(
            "cannot read {}: {bytes} bytes, more than the {MAX_OBJECT_BYTES} (3 MiB) the API server accepts",
            path.display()
        ),
        Err(ReadProblem::Directory) => {
            anyhow::bail!("cannot read {}: is a directory", path.display())
        }
        Err(ReadProblem::NotUtf8(message) | ReadProblem::Unreadable(message)) => {
            anyhow::bail!("cannot read {}: {message}", path.display())
        }
    }
}

fn read_value(path: &Path) -> anyhow::Result<Value> {
    let text = read_text(path)?;
    parse_value(&path.display().to_string(), &text).with_context(|| format!("{}", path.display()))
}

/// Runs `kadmit test`.
pub fn run(args: TestArgs, color: ColorChoice) -> anyhow::Result<ExitCode> {
    let plan = inputs::judging_rules(&args.dir)?;
    let rule_set = inputs::rule_set(&plan, args.rule_set.as_deref(), &args.dir)?;
    let options = ObjectOptions {
        operation: match args.operation {
            OperationArg::Create => Operation::Create,
            OperationArg::Update => Operation::Update,
            OperationArg::Delete => Operation::Delete,
            OperationArg::Connect => Operation::Connect,
        },
        old: args.old.as_deref().map(read_value).transpose()?,
        user: args.user.clone(),
        groups: args.groups.clone(),
        namespace: args.namespace.clone(),
        resource: args.resource.clone(),
        sub_resource: None,
    };
    let mut out = output::Output::stdout();
    let mut denied = false;
    let mut failed = false;
    for input in &args.inputs {
        let text = read_text(input)?;
        let request = read_input(&input.display().to_string(), &text, &options)
            .with_context(|| format!("{}", input.display()))?;
        let report = simulate(&plan, &request, rule_set, args.explain);
        denied |= !report.allowed;
        failed |= report.mutate.error.is_some() || report.validate.error.is_some();
        match args.output {
            Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)
                .context("cannot write the report to stdout")?,
            // JSON stays uncoloured whatever --color says: it is for programs.
            Output::Text => print_text(
                &mut out,
                &input.display().to_string(),
                &report,
                Paint::stdout(color),
            )
            .context("cannot write the report to stdout")?,
        }
    }
    out.flush().context("cannot write the report to stdout")?;
    Ok(if failed {
        ExitCode::from(2)
    } else if denied {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The report for people. Names, messages and errors come from the input
/// and the rules, which may come from anyone: each is shown with its
/// control characters escaped ([`escaped`]), so none can forge a line.
fn print_text(
    out: &mut impl Write,
    name: &str,
    report: &Report,
    paint: Paint,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "{}",
        paint.bold(format_args!(
            "== {}: {}",
            escaped(name),
            escaped(&report.request)
        ))
    )?;
    if let Some(error) = &report.mutate.error {
        writeln!(out, "mutate: {} {}", paint.error("ERROR"), escaped(error))?;
    }
    if let Some(error) = &report.validate.error {
        writeln!(out, "validate: {} {}", paint.error("ERROR"), escaped(error))?;
    }
    // A denial: `DENIED`, what denied it, and each violation on a line.
    let mut denied = |by: &str, status: &crate::eval::Denial| -> std::io::Result<()> {
        writeln!(
            out,
            "{}{by} ({} {})",
            paint.error("DENIED"),
            status.code,
            status.reason
        )?;
        for violation in status.message.split("; ") {
            writeln!(out, "  {}", escaped(violation))?;
        }
        Ok(())
    };
    if let Some(status) = &report.mutate.status
        && !report.mutate.allowed
    {
        denied(" by the mutating rules", status)?;
    }
    match &report.validate.status {
        Some(status) if !report.validate.allowed => denied("", status)?,
        _ if report.allowed => writeln!(out, "{}", paint.success("ALLOWED"))?,
        _ => {}
    }
    for warning in &report.validate.warnings {
        writeln!(out, "{} {}", paint.warning("warning:"), escaped(warning))?;
    }
    for (key, value) in &report.validate.audit_annotations {
        if key != "plan-generation" {
            writeln!(
                out,
                "{} {}={}",
                paint.note("audit:"),
                escaped(key),
                escaped(value)
            )?;
        }
    }
    if let Some(patch) = &report.mutate.patch {
        writeln!(out, "patch:")?;
        writeln!(out, "{}", serde_json::to_string_pretty(patch)?)?;
    }
    if let Some(object) = &report.object {
        writeln!(out, "mutated object:")?;
        write!(out, "{}", serde_yaml::to_string(object)?)?;
    }
    for note in &report.explain {
        writeln!(
            out,
            "{} {} {}/{}: {}",
            paint.note("explain:"),
            note.mode,
            note.explanation.rule_set,
            note.explanation.rule,
            escaped(&note.explanation.result.to_string())
        )?;
    }
    Ok(())
}
