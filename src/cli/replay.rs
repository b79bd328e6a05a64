//! `kadmit replay --rules NEW [--against OLD] RECORDINGS...`: every recorded
//! AdmissionReview evaluated against new rules, and each decision that would
//! change printed, so that a pull request changing the rules can be gated on
//! it:
//!
//! ```sh
//! kadmit replay --rules rules/ --against main-rules/ recordings/
//! ```
//!
//! Each review is evaluated as the API server calls kadmit (mutating half,
//! then validating half on the mutated object) against NEW and against OLD,
//! or, without `--against`, compared with the `response` recorded with it
//! (by `serve --record`, which notes the endpoint and rule set that
//! answered: a `/validate` response is compared by its verdict, a `/mutate`
//! one by its patch).
//! A change is admitted → denied (or back), other deny/warn/audit rules or
//! messages, another patch, or an evaluation error appearing or going.
//!
//! Recordings are files (or directories of `*.json` / `*.jsonl` files) of
//! AdmissionReviews, one per file or one per line, read as a stream.
//!
//! Exit codes: 0 when no decision changes, 1 when one does, 2 when the rules
//! do not compile, a recording cannot be read, or a review has nothing to
//! be compared with (no `--against` and no recorded response).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use base64::Engine as _;
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::{Value, json};

use super::color::{ColorChoice, Paint};
use super::inputs;
use super::output::{self, stderr_line};
use crate::audit::{self, Judgement, ObjectRef};
use crate::eval::{self, Ask, Outcome};
use crate::excerpt;
use crate::plan::{Mode, Plan, RuleSets};
use crate::review;
use crate::webhook;

/// Inputs that could not be compared named on stderr, at most.
const MAX_PROBLEMS_SHOWN: usize = 10;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One paragraph per change, then counts.
    Text,
    /// One JSON line per change, then a summary line.
    Json,
}

/// Arguments of `kadmit replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Directory of the new rule files.
    #[arg(long)]
    pub rules: PathBuf,
    /// Directory of the rule files serving now; without it, each review is
    /// compared with the response recorded with it.
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// Recorded AdmissionReviews: files, or directories of `*.json` and
    /// `*.jsonl` files.
    #[arg(required = true)]
    pub recordings: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Format,
}

/// What one side decided about a review, in the terms a change is told in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Decision {
    allowed: bool,
    /// `rule-set/rule` of each deny, warn and audit rule that fired, with
    /// its outcome and messages (empty when recorded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rules: Vec<RuleDecision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct RuleDecision {
    rule: String,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    messages: Vec<String>,
}

impl Decision {
    fn of(judgement: &Judgement) -> Self {
        let mut rules: Vec<RuleDecision> = judgement
            .violations
            .iter()
            .map(|finding| RuleDecision {
                rule: format!("{}/{}", finding.rule_set, finding.rule),
                outcome: finding.outcome.as_str(),
                messages: finding.listed_messages(),
            })
            .collect();
        rules.sort();
        Decision {
            allowed: judgement.error.is_none()
                && !judgement
                    .violations
                    .iter()
                    .any(|finding| finding.outcome == Outcome::Denied),
            rules,
            patch: judgement.patch.clone(),
            error: judgement.error.clone(),
        }
    }

    /// The decision recorded in a review's `response`, if it has one.
    fn recorded(review: &Value) -> Option<Self> {
        let response = review.get("response")?;
        let allowed = response.get("allowed")?.as_bool()?;
        let patch = response
            .get("patch")
            .and_then(Value::as_str)
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .ok()
            })
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        Some(Decision {
            allowed,
            rules: Vec::new(),
            patch,
            error: None,
        })
    }
}

/// How two decisions differ; empty when they agree.
fn changes(before: &Decision, after: &Decision, compare_rules: bool) -> Vec<&'static str> {
    let mut changes = crate::shadow::verdict_changes(
        (before.allowed, before.error.is_some()),
        (after.allowed, after.error.is_some()),
    );
    if compare_rules {
        let names = |decision: &Decision| -> BTreeSet<(String, &'static str)> {
            decision
                .rules
                .iter()
                .map(|rule| (rule.rule.clone(), rule.outcome))
                .collect()
        };
        if names(before) != names(after) {
            changes.push("other rules");
        } else if before.rules != after.rules {
            changes.push("other messages");
        }
    }
    if before.patch != after.patch {
        changes.push("other patch");
    }
    changes
}

/// Counts of a replay.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Totals {
    reviews: u64,
    changed: u64,
    newly_denied: u64,
    newly_admitted: u64,
    /// Reviews with nothing to compare with (no `--against`, no response).
    uncompared: u64,
    /// Recorded inputs that are not AdmissionReviews, or do not decode.
    unreadable: u64,
}

/// Runs `kadmit replay`.
pub fn run(args: ReplayArgs, color: ColorChoice) -> anyhow::Result<ExitCode> {
    let paint = Paint::stdout(color);
    let new = inputs::compile_rules(&args.rules)?;
    let old = args
        .against
        .as_deref()
        .map(inputs::compile_rules)
        .transpose()?;
    let mut files = Vec::new();
    for recording in &args.recordings {
        files.extend(inputs::files(recording, &["json", "jsonl"], true)?);
    }
    let mut out = output::Output::stdout();
    let mut totals = Totals::default();
    let mut failed: Option<anyhow::Error> = None;
    // The first inputs that could not be compared, and why, for stderr.
    let mut problems: Vec<String> = Vec::new();
    for file in &files {
        let reader =
            std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
        let mut item = 0_u64;
        audit::read_json(reader, &mut |recorded| {
            item += 1;
            let written = replay_one(
                &recorded,
                &new,
                old.as_ref(),
                (args.output, paint),
                &mut out,
                &mut totals,
            );
            match written {
                Ok(Some(problem)) if problems.len() < MAX_PROBLEMS_SHOWN => {
                    problems.push(format!("{}: value {item}: {problem}", file.display()));
                }
                Ok(_) => {}
                Err(error) if failed.is_none() => failed = Some(error),
                Err(_) => {}
            }
        })
        .with_context(|| file.display().to_string())?;
    }
    if let Some(error) = failed {
        return Err(error.context("cannot write the report to stdout"));
    }
    // Nothing replayed proves nothing: a gate on it must not pass.
    if totals.reviews == 0 && totals.unreadable == 0 {
        anyhow::bail!(
            "no reviews in {}: replay reads .json and .jsonl files (and the rotated \
             reviews.jsonl.1 … of serve --record)",
            args.recordings
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    match args.output {
        Format::Text => writeln!(
            out,
            "{}",
            paint.bold(format_args!(
                "replayed {} reviews: {} changed ({} admitted → denied, {} denied → admitted), {} not compared, {} unreadable",
                totals.reviews,
                totals.changed,
                totals.newly_denied,
                totals.newly_admitted,
                totals.uncompared,
                totals.unreadable
            ))
        ),
        Format::Json => writeln!(out, "{}", json!({ "summary": &totals })),
    }
    .and_then(|()| out.flush())
    .context("cannot write the report to stdout")?;
    if totals.uncompared > 0 || totals.unreadable > 0 {
        for problem in &problems {
            stderr_line(format_args!("kadmit: {problem}"));
        }
        stderr_line(format_args!(
            "kadmit: {} review(s) could not be compared (above: why) and {} input(s) were not readable reviews",
            totals.uncompared, totals.unreadable
        ));
        return Ok(ExitCode::from(2));
    }
    Ok(if totals.changed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn replay_one(
    recorded: &Value,
    new: &Plan,
    old: Option<&Plan>,
    (format, paint): (Format, Paint),
    out: &mut impl Write,
    totals: &mut Totals,
) -> anyhow::Result<Option<String>> {
    let decoded = serde_json::to_vec(recorded)
        .map_err(|error| error.to_string())
        .and_then(|bytes| review::decode(&bytes).map_err(|error| error.to_string()));
    let request = match decoded {
        Ok(review) => review.request,
        Err(error) => {
            totals.unreadable += 1;
            // The error may quote the review (an unknown operation):
            // shown on stderr, so cut and escaped.
            let why = format!("not an AdmissionReview kadmit can read: {error}");
            return Ok(Some(excerpt::printable(&why, excerpt::MAX_MESSAGE_BYTES)));
        }
    };
    totals.reviews += 1;
    let object = ObjectRef {
        api_version: String::new(),
        kind: request.kind.kind.clone(),
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        uid: Some(request.uid.clone()),
    };
    // Shown on terminals and in CI logs: each part cut, control
    // characters escaped.
    let shown = |text: &str| excerpt::printable(text, excerpt::MAX_FIELD_BYTES);
    let title = format!(
        "{} {} {}",
        shown(&request.uid),
        request.operation,
        shown(&request.resource_label())
    );
    let target = match (&request.namespace, &request.name) {
        (Some(namespace), Some(name)) => format!("{title} {}/{}", shown(namespace), shown(name)),
        (None, Some(name)) => format!("{title} {}", shown(name)),
        _ => title,
    };
    // `serve --record` notes which endpoint answered, for which rule set.
    let endpoint = recorded.pointer("/kadmit/endpoint").and_then(Value::as_str);
    let rule_set = recorded.pointer("/kadmit/ruleSet").and_then(Value::as_str);
    // A rule set that neither version has would make both sides the same
    // error, which compares as "no change" however the rules differ.
    if let Some(segment) = rule_set
        && let Err(error) = webhook::rule_set_ids(new, segment)
        && old.is_none_or(|old| webhook::rule_set_ids(old, segment).is_err())
    {
        totals.uncompared += 1;
        let why = format!("recorded for a rule set the rules replayed do not have: {error}");
        return Ok(Some(excerpt::printable(&why, excerpt::MAX_MESSAGE_BYTES)));
    }
    // A recording (`serve --record` writes the `kadmit` key) leaves out
    // managedFields and a Secret's values: rules that read them would be
    // judged on what the API server never sent, and could show changes
    // that are none or hide ones that are.
    let places = review::redacted_places(&request);
    // The rules that judge it: the recorded rule set's, as `judge` below.
    let reads_left_out = |plan: &Plan, mode: Mode| {
        let ids = match rule_set {
            Some(segment) => Some(webhook::rule_set_ids(plan, segment).ok()?),
            None => None,
        };
        let rule_sets = ids.as_deref().map_or(RuleSets::All, RuleSets::from);
        eval::select(plan, &request, Ask::new(mode).rule_sets(rule_sets))
            .reads_any_of(&request.kind.kind, &places)
    };
    if recorded.get("kadmit").is_some()
        && let Some(place) = std::iter::once(new)
            .chain(old)
            .flat_map(|plan| [Mode::Validate, Mode::Mutate].map(|mode| (plan, mode)))
            .find_map(|(plan, mode)| reads_left_out(plan, mode))
    {
        totals.uncompared += 1;
        return Ok(Some(format!(
            "recorded without {place} (a recording leaves it out), which the rules replayed read"
        )));
    }
    let judge = |plan: &Plan, request: review::Request| match rule_set {
        None => Decision::of(&audit::judge_request(plan, None, object.clone(), request)),
        // One name, or the several of a grouped entry (`images.services`).
        Some(segment) => match webhook::rule_set_ids(plan, segment) {
            Ok(ids) => Decision::of(&audit::judge_request(
                plan,
                &ids[..],
                object.clone(),
                request,
            )),
            Err(error) => Decision {
                allowed: false,
                rules: Vec::new(),
                patch: None,
                error: Some(error.to_string()),
            },
        },
    };
    let (before, compare_rules) = match old {
        Some(old) => (judge(old, request.clone()), true),
        None => match Decision::recorded(recorded) {
            Some(decision) => (decision, false),
            None => {
                totals.uncompared += 1;
                return Ok(Some(
                    "no recorded response to compare with (pass --against OLD)".to_owned(),
                ));
            }
        },
    };
    let mut after = judge(new, request);
    if old.is_none() {
        // A recorded response is one endpoint's: /validate answers the
        // verdict and never a patch; /mutate answers a patch and admits
        // unless its evaluation fails (a deny rule does not run there).
        match endpoint {
            Some("validate") => after.patch = None,
            Some("mutate") => after.allowed = after.error.is_none(),
            _ => {}
        }
    }
    let found = changes(&before, &after, compare_rules);
    if found.is_empty() {
        return Ok(None);
    }
    totals.changed += 1;
    match (before.allowed, after.allowed) {
        (true, false) => totals.newly_denied += 1,
        (false, true) => totals.newly_admitted += 1,
        _ => {}
    }
    match format {
        Format::Json => writeln!(
            out,
            "{}",
            json!({ "review": target, "changes": found, "before": before, "after": after })
        )?,
        Format::Text => {
            let changed = match (before.allowed, after.allowed) {
                (true, false) => paint.error("CHANGED"),
                _ => paint.warning("CHANGED"),
            };
            writeln!(
                out,
                "{changed} {}: {}",
                paint.bold(&target),
                found.join(", ")
            )?;
            for (side, decision) in [("before", &before), ("after", &after)] {
                let verdict = if decision.error.is_some() {
                    "error"
                } else if decision.allowed {
                    "admitted"
                } else {
                    "denied"
                };
                writeln!(out, "  {side}: {verdict}")?;
                for rule in &decision.rules {
                    writeln!(
                        out,
                        "    {} {}: {}",
                        rule.outcome,
                        rule.rule,
                        excerpt::printable(&rule.messages.join("; "), excerpt::MAX_MESSAGE_BYTES)
                    )?;
                }
                if let Some(error) = &decision.error {
                    let error = excerpt::printable(error, excerpt::MAX_MESSAGE_BYTES);
                    writeln!(out, "    {error}")?;
                }
                if found.contains(&"other patch") {
                    let patch = decision
                        .patch
                        .as_ref()
                        .map_or_else(|| "no patch".to_owned(), Value::to_string);
                    let patch = excerpt::cut(&patch, excerpt::MAX_MESSAGE_BYTES);
                    writeln!(out, "    patch: {patch}")?;
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, rules: &[(&str, &str)]) -> Decision {
        Decision {
            allowed,
            rules: rules
                .iter()
                .map(|(rule, message)| RuleDecision {
                    rule: (*rule).to_owned(),
                    outcome: "denied",
                    messages: vec![(*message).to_owned()],
                })
                .collect(),
            patch: None,
            error: None,
        }
    }

    #[test]
    fn changes_name_what_differs() {
        let admitted = decision(true, &[]);
        let denied = decision(false, &[("s/a", "no")]);
        assert_eq!(changes(&admitted, &admitted, true), Vec::<&str>::new());
        assert_eq!(
            changes(&admitted, &denied, true),
            ["admitted → denied", "other rules"]
        );
        assert_eq!(
            changes(&denied, &decision(false, &[("s/a", "other")]), true),
            ["other messages"]
        );
        // A recorded response carries no rule names: only the verdict and
        // the patch are compared.
        assert_eq!(changes(&admitted, &denied, false), ["admitted → denied"]);
        let patched = Decision {
            patch: Some(json!([{"op": "add", "path": "/x", "value": 1}])),
            ..admitted.clone()
        };
        assert_eq!(changes(&admitted, &patched, false), ["other patch"]);
    }

    #[test]
    fn a_recorded_response_gives_its_verdict_and_patch() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#);
        let recorded = json!({"response": {"uid": "u", "allowed": true, "patch": patch}});
        let decision = Decision::recorded(&recorded).expect("recorded");
        assert!(decision.allowed);
        assert_eq!(
            decision.patch.expect("patch")[0]["path"],
            "/metadata/labels/x"
        );
        assert!(Decision::recorded(&json!({"request": {}})).is_none());
    }
}
