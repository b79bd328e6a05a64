//! `kadmit audit RULES INPUT...`: what the rules say of objects that already
//! exist, without any cluster access from kadmit:
//!
//! ```sh
//! kubectl get pods,deployments -A -o json | kadmit audit rules -
//! kadmit audit rules manifests/
//! ```
//!
//! Each object is judged as its CREATE would be ([`crate::audit::judge`]); an
//! AdmissionReview stands for the object it carries (reviews without one,
//! DELETE and CONNECT, are skipped).
//! Output: a table grouped by rule (`table`), one JSON line per object with
//! findings and a last summary line (`json`), or OpenReports `Report` /
//! `ClusterReport` objects, one per object with findings, as a YAML stream
//! `kubectl apply -f -` takes (`openreports`). Objects are read and reported
//! one at a time, so memory stays flat however large the input; the table's
//! examples are bounded per rule.
//!
//! Exit codes: 0 when no object would be denied, 1 when one would, 2 when the
//! rules do not compile or an input cannot be read.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::color::{ColorChoice, Paint};
use super::inputs;
use super::output;
use crate::audit::{self, AuditInputError, Judgement, Summary};
use crate::eval::{KeptSelections, Outcome};
use crate::simulate::ObjectOptions;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Findings grouped by rule, for people.
    Table,
    /// One JSON line per object with findings, then a summary line.
    Json,
    /// OpenReports `Report`/`ClusterReport` objects (openreports.io/v1alpha1), YAML.
    Openreports,
}

/// Arguments of `kadmit audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Directory of rule files.
    pub dir: PathBuf,
    /// Files or directories of objects (JSON or YAML; `*.json`, `*.yaml`,
    /// `*.yml` below a directory), or `-` for standard input.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub output: Format,
    /// Only this rule set, as /validate/{ruleset} would.
    #[arg(long)]
    pub rule_set: Option<String>,
}

/// Runs `kadmit audit`.
pub fn run(args: AuditArgs, color: ColorChoice) -> anyhow::Result<ExitCode> {
    let plan = inputs::judging_rules(&args.dir)?;
    let rule_set = inputs::rule_set(&plan, args.rule_set.as_deref(), &args.dir)?;
    let mut files = Vec::new();
    for input in &args.inputs {
        let found = inputs::files(input, &["json", "yaml", "yml"], false)?;
        if found.is_empty() {
            anyhow::bail!(
                "{}: no *.json, *.yaml or *.yml files below it (an audit of nothing is refused)",
                input.display()
            );
        }
        files.extend(found);
    }

    let mut auditor = Auditor {
        selections: KeptSelections::new(&plan, rule_set),
        options: ObjectOptions::default(),
        format: args.output,
        paint: Paint::stdout(color),
        out: output::Output::stdout_in_blocks(),
        summary: Summary::default(),
        progress: std::io::stderr().is_terminal().then(Instant::now),
        failed: None,
        now: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs()),
        results: ResultsYaml::default(),
        line: Vec::new(),
    };
    for file in &files {
        auditor.read(file)?;
    }
    if let Some(error) = auditor.failed.take() {
        return Err(error.context("cannot write the report to stdout"));
    }
    auditor
        .finish()
        .context("cannot write the report to stdout")?;
    // An object that could not be judged is one the webhook would not
    // admit either (an error, or over a bound): it fails the audit too.
    Ok(
        if auditor.summary.denied > 0 || auditor.summary.errors > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// Judges objects as they are read and writes what it finds.
struct Auditor<'p, W: Write> {
    /// The plan, and the rules it leaves standing for the last kind and
    /// namespace judged.
    selections: KeptSelections<'p, 'p>,
    options: ObjectOptions,
    format: Format,
    paint: Paint,
    out: output::Output<W>,
    summary: Summary,
    /// When the last progress line was written, on a terminal.
    progress: Option<Instant>,
    /// The first write error; the rest of the input is still judged.
    failed: Option<anyhow::Error>,
    /// Unix seconds, for the reports' timestamps.
    now: u64,
    /// The OpenReports results written so far, as YAML.
    results: ResultsYaml,
    /// The JSON line being written.
    line: Vec<u8>,
}

impl<W: Write> Auditor<'_, W> {
    /// Reads one input, judging each object. An input that holds no
    /// object, not even an empty List, is an error: a `kubectl get` that
    /// failed leaves its pipe empty, and an audit of nothing must not pass.
    fn read(&mut self, file: &Path) -> anyhow::Result<()> {
        let name = if file == Path::new("-") {
            "<stdin>".to_owned()
        } else {
            file.display().to_string()
        };
        let json = file.extension().is_some_and(|ext| ext == "json");
        let result = if file == Path::new("-") {
            let mut stdin = std::io::BufReader::new(std::io::stdin().lock());
            self.read_sniffed(&name, &mut stdin)
        } else if json {
            let reader =
                std::fs::File::open(file).with_context(|| format!("cannot read {name}"))?;
            audit::read_json_objects(reader, self.parse(), &mut |object| self.judge(object))
        } else {
            let reader =
                std::fs::File::open(file).with_context(|| format!("cannot read {name}"))?;
            audit::read_yaml_from(&name, reader, &mut |object| self.judge(object))
        };
        match result.with_context(|| name.clone())? {
            0 => anyhow::bail!(
                "{name}: holds no object, list or AdmissionReview (an empty input is refused: \
                 a command that failed upstream of a pipe leaves it empty)"
            ),
            _ => Ok(()),
        }
    }

    /// Standard input: JSON when it starts with `{` or `[`, else YAML.
    fn read_sniffed(
        &mut self,
        name: &str,
        input: &mut impl std::io::BufRead,
    ) -> Result<u64, AuditInputError> {
        let first = loop {
            let buffer = input.fill_buf()?;
            match buffer.iter().position(|byte| !byte.is_ascii_whitespace()) {
                Some(at) => break Some(buffer[at]),
                None if buffer.is_empty() => break None,
                None => {
                    let all = buffer.len();
                    input.consume(all);
                }
            }
        };
        match first {
            None => Ok(0),
            Some(b'{' | b'[') => {
                audit::read_json_objects(input, self.parse(), &mut |object| self.judge(object))
            }
            Some(_) => audit::read_yaml_from(name, input, &mut |object| self.judge(object)),
        }
    }

    /// What of each object a JSON input's reader parses: not
    /// `metadata.managedFields` unless a rule reads it.
    fn parse(&self) -> audit::Parse {
        if self.selections.plan().reads_managed_fields() {
            audit::Parse::Whole
        } else {
            audit::Parse::WithoutManagedFields
        }
    }

    fn judge(&mut self, mut object: Value) {
        // A List inside a List: kubectl applies its items (its
        // FlattenListVisitor goes down every level), so they are judged.
        // Its depth is bounded by the parsers' nesting bounds.
        if let Some(Value::Array(items)) = object.get_mut("items") {
            for item in std::mem::take(items) {
                self.judge(item);
            }
            return;
        }
        // An AdmissionReview (a recorded request) stands for its object.
        if object.get("kind").and_then(Value::as_str) == Some("AdmissionReview") {
            let operation = object.pointer("/request/operation").and_then(Value::as_str);
            // A DELETE or CONNECT review has no object to judge.
            let nothing_to_judge = matches!(operation, Some("DELETE" | "CONNECT"));
            match object.pointer_mut("/request/object").map(Value::take) {
                Some(inner) if inner.is_object() => object = inner,
                _ if nothing_to_judge => return,
                // Any other review stands for an object it does not hold:
                // not judged, and so not passed.
                _ => {
                    let judgement = Judgement::not_judged(
                        audit::ObjectRef::of_review(&object),
                        "an AdmissionReview whose request.object is missing or not an object, \
                         and whose operation is not DELETE or CONNECT: pass the object itself, \
                         or a review that carries it"
                            .to_owned(),
                    );
                    return self.report(judgement);
                }
            }
        }
        let judgement = audit::judge(&mut self.selections, object, &self.options);
        self.report(judgement);
    }

    /// Counts `judgement` and writes it when it has findings.
    fn report(&mut self, judgement: Judgement) {
        self.summary.add(&judgement);
        if !judgement.is_clean() && self.failed.is_none() {
            let written = match self.format {
                Format::Table => Ok(()),
                Format::Json => write_json_line(&mut self.out, &judgement, &mut self.line),
                Format::Openreports => {
                    write_report(&mut self.out, &judgement, self.now, &mut self.results)
                }
            };
            if let Err(error) = written {
                self.failed = Some(error);
            }
        }
        if let Some(last) = &mut self.progress
            && last.elapsed().as_millis() >= 200
        {
            *last = Instant::now();
            let _ = write!(
                std::io::stderr(),
                "\raudited {} objects, {} denied",
                self.summary.objects,
                self.summary.denied
            );
        }
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        if self.progress.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        match self.format {
            Format::Table => write_table(&mut self.out, &self.summary, self.paint)?,
            Format::Json => writeln!(
                self.out,
                "{}",
                serde_json::to_string(&json!({ "summary": &self.summary }))?
            )?,
            Format::Openreports => {}
        }
        self.out.flush()?;
        Ok(())
    }
}

/// Writes `judgement` as one JSON line, serialised into `line` (kept from
/// line to line) and handed to `out` whole: serialising into `out` itself
/// would pass each token through its layers.
fn write_json_line(
    out: &mut impl Write,
    judgement: &Judgement,
    line: &mut Vec<u8>,
) -> anyhow::Result<()> {
    line.clear();
    serde_json::to_writer(&mut *line, judgement)?;
    line.push(b'\n');
    out.write_all(line)?;
    Ok(())
}

/// One OpenReports `Report` (`ClusterReport` for a cluster-scoped object),
/// scoped to the object, as a YAML document.
/// The YAML of OpenReports results already written, by the result's JSON.
/// Most objects share their findings (the same rules, the same messages),
/// and yaml_serde's emitter took about 40,000 instructions per result,
/// more than judging a Pod; a result's YAML stands alone as the one element
/// of a sequence, as it does under the report's `results`.
#[derive(Default)]
struct ResultsYaml {
    written: HashMap<String, String>,
}

impl ResultsYaml {
    /// Results kept; more are written without being kept.
    const MAX_KEPT: usize = 4096;

    fn write(&mut self, out: &mut impl Write, result: &Value) -> anyhow::Result<()> {
        let key = result.to_string();
        if let Some(yaml) = self.written.get(&key) {
            out.write_all(yaml.as_bytes())?;
            return Ok(());
        }
        let yaml = serde_yaml::to_string(std::slice::from_ref(result))?;
        out.write_all(yaml.as_bytes())?;
        if self.written.len() < Self::MAX_KEPT {
            self.written.insert(key, yaml);
        }
        Ok(())
    }
}

fn write_report(
    out: &mut impl Write,
    judgement: &Judgement,
    now: u64,
    written: &mut ResultsYaml,
) -> anyhow::Result<()> {
    let object = &judgement.object;
    let mut results = Vec::new();
    let (mut fail, mut warn, mut error) = (0, 0, 0);
    let timestamp = json!({ "seconds": now, "nanos": 0 });
    for finding in judgement.violations.iter().chain(&judgement.mutated_by) {
        let (result, category) = match finding.outcome {
            Outcome::Denied => ("fail", "deny"),
            Outcome::Warned => ("warn", "warn"),
            Outcome::Audited => ("warn", "audit"),
            Outcome::Mutated => ("warn", "mutate"),
        };
        if result == "fail" {
            fail += 1;
        } else {
            warn += 1;
        }
        let message = match finding.outcome {
            Outcome::Mutated => "a mutating rule would change this object".to_owned(),
            _ => finding.listed_messages().join("; "),
        };
        results.push(json!({
            "source": "kadmit",
            "policy": &*finding.rule_set,
            "rule": &*finding.rule,
            "category": category,
            "result": result,
            "message": message,
            "timestamp": timestamp,
        }));
    }
    if let Some(reason) = &judgement.error {
        error += 1;
        results.push(json!({
            "source": "kadmit",
            "policy": "kadmit",
            "rule": "evaluation",
            "result": "error",
            "message": reason,
            "timestamp": timestamp,
        }));
    }
    let name = report_name(object);
    let mut metadata = json!({
        "name": name,
        "labels": { "app.kubernetes.io/managed-by": "kadmit" },
    });
    if let Some(namespace) = &object.namespace {
        metadata["namespace"] = json!(namespace);
    }
    let mut scope = json!({ "apiVersion": object.api_version, "kind": object.kind });
    for (key, value) in [
        ("name", &object.name),
        ("namespace", &object.namespace),
        ("uid", &object.uid),
    ] {
        if let Some(value) = value {
            scope[key] = json!(value);
        }
    }
    // The report's members in the order yaml_serde writes a map's keys
    // (sorted), with `results` between the two halves.
    let head = json!({
        "apiVersion": "openreports.io/v1alpha1",
        "kind": if object.namespace.is_some() { "Report" } else { "ClusterReport" },
        "metadata": metadata,
    });
    let tail = json!({
        "source": "kadmit",
        "scope": scope,
        "summary": { "pass": 0, "fail": fail, "warn": warn, "error": error, "skip": 0 },
    });
    writeln!(out, "---")?;
    write!(out, "{}", serde_yaml::to_string(&head)?)?;
    if results.is_empty() {
        writeln!(out, "results: []")?;
    } else {
        writeln!(out, "results:")?;
        for result in &results {
            written.write(out, result)?;
        }
    }
    write!(out, "{}", serde_yaml::to_string(&tail)?)?;
    Ok(())
}

/// A valid object name for the report: `kadmit-<uid>` when the object has
/// one (as policy engines name per-object reports), else
/// `kadmit-<kind>-<name>` made a DNS subdomain.
fn report_name(object: &audit::ObjectRef) -> String {
    let raw = match (&object.uid, &object.name) {
        (Some(uid), _) => format!("kadmit-{uid}"),
        (None, Some(name)) => format!("kadmit-{}-{name}", object.kind),
        (None, None) => format!("kadmit-{}", object.kind),
    };
    let mut name: String = raw
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    while name.ends_with(['-', '.']) {
        name.pop();
    }
    name
}

fn write_table(out: &mut impl Write, summary: &Summary, paint: Paint) -> anyhow::Result<()> {
    writeln!(
        out,
        "{}",
        paint.bold(format_args!(
            "audited {} objects: {} would be denied, {} could not be judged",
            summary.objects, summary.denied, summary.errors
        ))
    )?;
    for rule in summary.sorted_rules() {
        let what = match rule.outcome {
            Outcome::Denied => paint.error("DENY"),
            Outcome::Warned => paint.warning("WARN"),
            Outcome::Audited => paint.note("AUDIT"),
            Outcome::Mutated => paint.note("CHANGE"),
        };
        writeln!(
            out,
            "\n{what} {}: {} object(s)",
            paint.bold(format_args!("{}/{}", rule.rule_set, rule.rule)),
            rule.objects
        )?;
        for example in &rule.examples {
            if example.message.is_empty() {
                writeln!(out, "  {}", example.object)?;
            } else {
                writeln!(out, "  {}: {}", example.object, shown(&example.message))?;
            }
        }
        let more = rule.objects.saturating_sub(rule.examples.len() as u64);
        if more > 0 {
            writeln!(out, "  … and {more} more")?;
        }
    }
    if summary.errors > 0 {
        writeln!(
            out,
            "\nERROR {} object(s) could not be judged",
            summary.errors
        )?;
        for example in &summary.error_examples {
            writeln!(out, "  {}: {}", example.object, shown(&example.message))?;
        }
    }
    Ok(())
}

/// A message as the table shows it: cut, control characters escaped.
fn shown(message: &str) -> String {
    crate::excerpt::printable(message, crate::excerpt::MAX_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_are_dns_subdomains() {
        let object = audit::ObjectRef {
            kind: "Pod".to_owned(),
            name: Some("Web_1..".to_owned()),
            ..audit::ObjectRef::default()
        };
        assert_eq!(report_name(&object), "kadmit-pod-web-1");
        let long = audit::ObjectRef {
            kind: "Pod".to_owned(),
            name: Some("x".repeat(400)),
            ..audit::ObjectRef::default()
        };
        assert_eq!(report_name(&long).len(), 253);
    }
}
