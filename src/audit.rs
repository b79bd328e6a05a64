//! Judging objects that already exist (`kadmit audit`): each object as its
//! CREATE would be judged (the mutating half, then the validating half on the
//! mutated object), read as a stream so that memory stays flat however many
//! objects come in.
//!
//! Inputs are what `kubectl get -o json` and manifest directories hold: JSON
//! (one or more values; a top-level `items` array, as in `List` and
//! `PodList`, or a top-level array is read one element at a time), or YAML
//! (multi-document files, `List`s expanded).
//!
//! Bounds: one JSON object may take [`MAX_OBJECT_BYTES`] (more is an error
//! naming the object's position); a YAML input is read whole and so is held
//! to the rule files' bounds ([`crate::rules::limits`]: 1 MiB, depth,
//! aliases), with a hint to use JSON for more; the summary keeps
//! [`MAX_EXAMPLES`] objects per rule and counts the rest.

mod json;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::eval::{EvalOptions, Finding, KeptSelections, Outcome};
use crate::plan::{Mode, Plan, RuleSets};
use crate::review::Embedded;
use crate::simulate::{ObjectOptions, request_for_object};

/// Largest JSON object read from a stream, in bytes (the webhook's default
/// body limit: no object the API server stores is larger).
pub const MAX_OBJECT_BYTES: u64 = 16 << 20;

/// Objects kept as examples per rule (and for errors) in a [`Summary`].
pub const MAX_EXAMPLES: usize = 10;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditInputError {
    /// Not valid JSON.
    #[error("{message} at line {line} column {column}")]
    Syntax {
        /// What is wrong, as serde_json says it.
        message: String,
        /// Line of the input, from 1.
        line: usize,
        /// Column of the input, in bytes from 1.
        column: usize,
    },
    /// A JSON object over [`MAX_OBJECT_BYTES`].
    #[error("the object at line {line} column {column} is larger than {} MiB", MAX_OBJECT_BYTES >> 20)]
    TooLarge {
        /// Line where the object starts.
        line: usize,
        /// Column where the object starts.
        column: usize,
    },
    /// A JSON value that would take more than
    /// [`crate::review::MAX_PARSED_BYTES`] once parsed.
    #[error(
        "the object at line {line} column {column} would take about {} MiB once parsed, \
         more than the {} MiB one object may take (the webhook denies such a review where a rule that can deny applies)",
        estimate >> 20,
        crate::review::MAX_PARSED_BYTES >> 20
    )]
    TooLargeParsed {
        /// Line where the value starts.
        line: usize,
        /// Column where the value starts.
        column: usize,
        /// Its estimated size once parsed, in bytes.
        estimate: usize,
    },
    /// Not valid YAML.
    #[error("{0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A YAML input over the rule files' bounds.
    #[error(
        "{0} (YAML is read whole; pass JSON, e.g. `kubectl get -o json`, which is read as a stream)"
    )]
    YamlBounds(crate::rules::Diagnostic),
    /// A `List` kind whose `items` is no list: kubectl refuses to decode
    /// it, so nothing in it would be applied, and none of it is audited.
    #[error(
        "a {kind} whose `items` is not a list{}: kubectl refuses it, and nothing in it was audited",
        at.map_or_else(String::new, |(line, column)| format!(" at line {line} column {column}"))
    )]
    ItemsNotAList {
        /// The object's `kind`.
        kind: String,
        /// Line and column where the object starts, where known.
        at: Option<(usize, usize)>,
    },
    /// The input could not be read.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// The `kind` of `object` when it is a `List` kind (`PodList`, `List`)
/// whose `items` is present and neither a list nor null, as kubectl's
/// decoder refuses it.
pub(crate) fn items_not_a_list(object: &serde_json::Map<String, Value>) -> Option<String> {
    let kind = object.get("kind")?.as_str()?;
    let items = object.get("items")?;
    (kind.ends_with("List") && !items.is_array() && !items.is_null())
        .then(|| crate::excerpt::printable(kind, 64))
}

/// Which object a judgement is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace`, for namespaced objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `metadata.name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `metadata.uid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ObjectRef {
    /// What an AdmissionReview's request says of its object (kind,
    /// namespace, name, the request's uid), for a review whose object is
    /// missing.
    pub fn of_review(review: &Value) -> Self {
        let text = |path: &str| {
            review
                .pointer(path)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        ObjectRef {
            api_version: String::new(),
            kind: text("/request/kind/kind").unwrap_or_else(|| "AdmissionReview".to_owned()),
            namespace: text("/request/namespace"),
            name: text("/request/name"),
            uid: text("/request/uid"),
        }
    }

    fn of(object: &Value) -> Self {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let metadata = object.get("metadata");
        ObjectRef {
            api_version: text(object.get("apiVersion")).unwrap_or_default(),
            kind: text(object.get("kind")).unwrap_or_default(),
            namespace: text(metadata.and_then(|m| m.get("namespace"))),
            name: text(metadata.and_then(|m| m.get("name"))),
            uid: text(metadata.and_then(|m| m.get("uid"))),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Shown on terminals and in CI logs: cut, control characters escaped.
        let shown = |text: &str| crate::excerpt::printable(text, crate::excerpt::MAX_FIELD_BYTES);
        let kind = shown(&self.kind);
        let name = shown(self.name.as_deref().unwrap_or("<unnamed>"));
        match &self.namespace {
            Some(namespace) => write!(f, "{kind} {}/{name}", shown(namespace)),
            None => write!(f, "{kind} {name}"),
        }
    }
}

/// What the rules say of one object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Judgement {
    /// The object.
    pub object: ObjectRef,
    /// Deny, warn and audit rules that fired on it (after mutation), with
    /// their messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Finding>,
    /// Mutating rules that would change it: drift from the defaults.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mutated_by: Vec<Finding>,
    /// Why it could not be judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The JSON Patch the mutating half would answer (`kadmit replay`
    /// compares it; the audit reports do not show it).
    #[serde(skip)]
    pub patch: Option<Value>,
}

impl Judgement {
    /// The judgement of `object` when it could not be judged, and `why`.
    pub fn not_judged(object: ObjectRef, why: String) -> Self {
        Judgement {
            object,
            violations: Vec::new(),
            mutated_by: Vec::new(),
            error: Some(why),
            patch: None,
        }
    }

    /// True when a deny rule fired.
    pub fn is_denied(&self) -> bool {
        self.violations
            .iter()
            .any(|finding| finding.outcome == Outcome::Denied)
    }

    /// True when there is nothing to report.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.mutated_by.is_empty() && self.error.is_none()
    }
}

/// Judges `object` as its CREATE would be: mutated, then validated, as
/// `kadmit serve` evaluates by default (patches are not checked: the audit
/// sends none anywhere), and without the JSON Patch in the judgement.
pub fn judge(
    selections: &mut KeptSelections<'_, '_>,
    object: Value,
    options: &ObjectOptions,
) -> Judgement {
    let reference = ObjectRef::of(&object);
    match request_for_object(object, options) {
        Ok(request) => {
            // Patches are neither checked nor built: the audit sends none.
            let options = EvalOptions {
                verify_patches: false,
                answer: false,
                ..EvalOptions::default()
            };
            judge_with(selections, reference, request, options)
        }
        Err(error) => Judgement::not_judged(reference, error.to_string()),
    }
}

/// Judges `request` as the API server's calls would: the mutating half,
/// then the validating half on the mutated object, with the JSON Patch the
/// mutating half answers (checked against the mutated object).
pub fn judge_request<'s>(
    plan: &Plan,
    rule_sets: impl Into<RuleSets<'s>>,
    object: ObjectRef,
    request: crate::review::Request,
) -> Judgement {
    judge_with(
        &mut KeptSelections::new(plan, rule_sets),
        object,
        request,
        EvalOptions::default(),
    )
}

/// Judges both halves on one object: the request's object is taken out of
/// it and handed from the mutating half to the validating half, never
/// copied. With `options.answer`, [`Judgement::patch`] holds the JSON Patch
/// (`kadmit replay` compares it).
fn judge_with(
    selections: &mut KeptSelections<'_, '_>,
    object: ObjectRef,
    mut request: crate::review::Request,
    options: EvalOptions,
) -> Judgement {
    let mut judgement = Judgement {
        object,
        violations: Vec::new(),
        mutated_by: Vec::new(),
        error: None,
        patch: None,
    };
    // No object (a DELETE) reads as null, as it does in the request.
    let document = match request.object.take().map(Embedded::into_value) {
        None => Value::Null,
        Some(Ok(document)) => document,
        Some(Err(error)) => {
            judgement.error = Some(format!("mutating rules: request.object: {error}"));
            return judgement;
        }
    };
    let mutating = selections.select(&request, Mode::Mutate, options);
    let document = match mutating.evaluate_object(&request, document) {
        Ok((verdict, document)) => {
            let undecided = undecided(&verdict);
            judgement.mutated_by = verdict.findings;
            if options.answer {
                judgement.patch = verdict
                    .patch
                    .as_ref()
                    .and_then(|patch| serde_json::to_value(patch).ok());
            }
            // The API server would refuse the CREATE for its cost, or
            // for an expression that failed.
            if let Some(reason) = undecided {
                judgement.error = Some(format!("mutating rules: {reason}"));
                return judgement;
            }
            document.unwrap_or(Value::Null)
        }
        Err(error) => {
            judgement.error = Some(format!("mutating rules: {error}"));
            return judgement;
        }
    };
    let validating = selections.select(&request, Mode::Validate, options);
    match validating.evaluate_object(&request, document) {
        // The API server would refuse the CREATE for its cost.
        Ok((verdict, _)) => match undecided(&verdict) {
            Some(reason) => judgement.error = Some(format!("validating rules: {reason}")),
            None => judgement.violations = verdict.findings,
        },
        Err(error) => judgement.error = Some(format!("validating rules: {error}")),
    }
    judgement
}

/// Why `verdict` denies without a rule deciding, when it does: over its
/// budget, or an expression failed. The API server refuses the request all
/// the same, so the object is reported, not counted as admitted.
fn undecided(verdict: &crate::eval::Verdict) -> Option<String> {
    if let Some(exceeded) = verdict.over_budget {
        return Some(exceeded.to_string());
    }
    match &verdict.denial {
        Some(denial) if !verdict.allowed && verdict.findings.is_empty() => {
            Some(denial.message.clone())
        }
        _ => None,
    }
}

/// Counts and examples of what an audit found, bounded in size.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Objects judged.
    pub objects: u64,
    /// Objects a deny rule would refuse.
    pub denied: u64,
    /// Per rule that fired, in name order.
    pub rules: Vec<RuleSummary>,
    /// Objects that could not be judged.
    pub errors: u64,
    /// The first of them, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_examples: Vec<Example>,
    #[serde(skip)]
    by_rule: BTreeMap<(Arc<str>, Arc<str>, u8), usize>,
}

/// What one rule did across the objects.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSummary {
    /// Rule set.
    pub rule_set: Arc<str>,
    /// Rule.
    pub rule: Arc<str>,
    /// `denied`, `warned`, `audited` or `mutated`.
    pub outcome: Outcome,
    /// Objects it fired on.
    pub objects: u64,
    /// The first [`MAX_EXAMPLES`] of them.
    pub examples: Vec<Example>,
}

/// One object and what was said of it.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    /// The object.
    pub object: ObjectRef,
    /// The first message (empty for mutations).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn outcome_rank(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Denied => 0,
        Outcome::Warned => 1,
        Outcome::Audited => 2,
        Outcome::Mutated => 3,
    }
}

impl Summary {
    /// Adds one judgement.
    pub fn add(&mut self, judgement: &Judgement) {
        self.objects += 1;
        if judgement.is_denied() {
            self.denied += 1;
        }
        if let Some(error) = &judgement.error {
            self.errors += 1;
            if self.error_examples.len() < MAX_EXAMPLES {
                self.error_examples.push(Example {
                    object: judgement.object.clone(),
                    message: error.clone(),
                });
            }
        }
        for finding in judgement.violations.iter().chain(&judgement.mutated_by) {
            let key = (
                finding.rule_set.clone(),
                finding.rule.clone(),
                outcome_rank(finding.outcome),
            );
            let index = *self.by_rule.entry(key).or_insert_with(|| {
                self.rules.push(RuleSummary {
                    rule_set: finding.rule_set.clone(),
                    rule: finding.rule.clone(),
                    outcome: finding.outcome,
                    objects: 0,
                    examples: Vec::new(),
                });
                self.rules.len() - 1
            });
            let rule = &mut self.rules[index];
            rule.objects += 1;
            if rule.examples.len() < MAX_EXAMPLES {
                rule.examples.push(Example {
                    object: judgement.object.clone(),
                    message: finding.messages.first().cloned().unwrap_or_default(),
                });
            }
        }
    }

    /// The rules by outcome (denials first), then by name.
    pub fn sorted_rules(&self) -> Vec<&RuleSummary> {
        let mut rules: Vec<&RuleSummary> = self.rules.iter().collect();
        rules.sort_by(|a, b| {
            (outcome_rank(a.outcome), &a.rule_set, &a.rule).cmp(&(
                outcome_rank(b.outcome),
                &b.rule_set,
                &b.rule,
            ))
        });
        rules
    }
}

/// What of each listed object [`read_json_objects`] parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// All of it.
    Whole,
    /// All but `metadata.managedFields`, which no rule of the plan reads
    /// ([`Plan::reads_managed_fields`]), as the webhook parses a review's
    /// objects: often half of an object's bytes.
    WithoutManagedFields,
}

/// Calls `each` with every object of a JSON stream, one at a time; the
/// number of top-level values (objects, lists, arrays) the stream held.
pub fn read_json(reader: impl Read, each: &mut dyn FnMut(Value)) -> Result<u64, AuditInputError> {
    read_json_objects(reader, Parse::Whole, each)
}

/// Like [`read_json`], parsing what `parse` says of each object.
pub fn read_json_objects(
    reader: impl Read,
    parse: Parse,
    each: &mut dyn FnMut(Value),
) -> Result<u64, AuditInputError> {
    json::Stream::new(reader, parse).read(each)
}

/// [`read_yaml`] of what `reader` holds, read only up to the bound of a
/// YAML input: a larger input is refused for its size, before its text is
/// checked as UTF-8 (where the cut could split a character).
pub fn read_yaml_from(
    file: &str,
    reader: impl Read,
    each: &mut dyn FnMut(Value),
) -> Result<u64, AuditInputError> {
    use crate::rules::{ReadProblem, limits};
    let text = match crate::rules::read_text(reader, limits::MAX_FILE_BYTES) {
        Ok(text) => text,
        Err(ReadProblem::TooLarge(bytes)) => {
            return Err(AuditInputError::YamlBounds(limits::too_large(file, bytes)));
        }
        Err(ReadProblem::NotUtf8(message)) => {
            return Err(io::Error::new(io::ErrorKind::InvalidData, message).into());
        }
        Err(ReadProblem::Directory) => {
            return Err(io::Error::other("is a directory").into());
        }
        Err(ReadProblem::Unreadable(message)) => return Err(io::Error::other(message).into()),
    };
    read_yaml(file, &text, each)
}

/// Calls `each` with every object of a YAML text (`file` names it in
/// errors); the number of documents that were not empty.
pub fn read_yaml(
    file: &str,
    text: &str,
    each: &mut dyn FnMut(Value),
) -> Result<u64, AuditInputError> {
    use crate::rules::limits;
    let bounds = if text.len() as u64 > limits::MAX_FILE_BYTES {
        Some(limits::too_large(file, text.len() as u64))
    } else {
        limits::check_manifest(file, text, limits::MAX_NODES)
    };
    if let Some(diagnostic) = bounds {
        return Err(AuditInputError::YamlBounds(diagnostic));
    }
    let mut documents = 0;
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = <Value as serde::Deserialize>::deserialize(document)?;
        if !value.is_null() {
            documents += 1;
        }
        match value {
            Value::Null => {}
            Value::Object(mut object) if object.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(items)) = object.remove("items") {
                    items.into_iter().for_each(&mut *each);
                }
            }
            Value::Object(object) if let Some(kind) = items_not_a_list(&object) => {
                return Err(AuditInputError::ItemsNotAList { kind, at: None });
            }
            Value::Array(items) => items.into_iter().for_each(&mut *each),
            value => each(value),
        }
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(objects: &[Value]) -> Vec<&str> {
        objects
            .iter()
            .map(|object| object["metadata"]["name"].as_str().unwrap_or("?"))
            .collect()
    }

    #[test]
    fn json_lists_arrays_and_concatenated_objects_give_every_object() {
        let input = r#"
            {"apiVersion": "v1", "items": [
                {"kind": "Pod", "metadata": {"name": "a"}},
                {"kind": "Pod", "metadata": {"name": "b"}}
            ], "kind": "List", "metadata": {}}
            {"kind": "ConfigMap", "metadata": {"name": "c"}}
            [{"kind": "Secret", "metadata": {"name": "d"}}]
        "#;
        let mut objects = Vec::new();
        read_json(input.as_bytes(), &mut |object| objects.push(object)).expect("reads");
        assert_eq!(names(&objects), ["a", "b", "c", "d"]);
    }

    fn read(input: &str, parse: Parse) -> Result<Vec<Value>, AuditInputError> {
        let mut objects = Vec::new();
        read_json_objects(input.as_bytes(), parse, &mut |object| objects.push(object))?;
        Ok(objects)
    }

    #[test]
    fn json_objects_are_read_as_serde_json_reads_them() {
        // Strings that hold brackets, quotes and escapes do not end an
        // object early; scalars, empty containers and odd spacing survive.
        let items = [
            r#"{"kind":"Pod","metadata":{"name":"a"},"s":"}]\"{[","e":"\\","u":"\u00e9"}"#,
            r#"{ "kind" : "Pod" , "n" : [ 1 , -2.5e3 , true , false , null , [ ] , { } ] }"#,
            "\t{\"kind\":\"Pod\",\r\n\"x\":\"\"}\n",
        ];
        let input = format!("{{\"kind\":\"List\",\"items\":[{}]}}", items.join(","));
        let expected: Vec<Value> = items
            .iter()
            .map(|item| serde_json::from_str(item).expect("valid"))
            .collect();
        assert_eq!(read(&input, Parse::Whole).expect("reads"), expected);
        // A top-level array of them, and each on its own.
        let array = format!("[{}]", items.join(","));
        assert_eq!(read(&array, Parse::Whole).expect("reads"), expected);
        let each = items.join(" ");
        assert_eq!(read(&each, Parse::Whole).expect("reads"), expected);
    }

    #[test]
    fn objects_cut_by_the_reads_are_read_whole() {
        /// Hands out the input a few bytes per read, as a pipe may.
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let count = self.1.min(buf.len()).min(self.0.len());
                buf[..count].copy_from_slice(&self.0[..count]);
                self.0 = &self.0[count..];
                Ok(count)
            }
        }
        // Numbers and literals that a read may cut anywhere (after a `-`, a
        // `.` or an `e`, where a number is not yet one), escapes, and an
        // object larger than the window's first size.
        let big = format!("{{\"kind\":\"Pod\",\"data\":\"{}\"}}", "b".repeat(200_000));
        let input = format!(
            "{{\"items\": [{{\"n\": -12.5e-3, \"t\": true, \"f\": null}}, 123456, {big}, -1.5E+10, {{\"s\": \"a\\\"b\\u00e9\"}}]}}\n[7, 89]"
        );
        let mut whole = Vec::new();
        read_json(input.as_bytes(), &mut |object| whole.push(object)).expect("reads");
        assert_eq!(whole.len(), 7);
        assert_eq!(whole[1], 123456);
        assert_eq!(whole[2]["data"].as_str().map(str::len), Some(200_000));
        for step in [1, 3, 7, 4096] {
            let mut objects = Vec::new();
            read_json(Trickle(input.as_bytes(), step), &mut |object| {
                objects.push(object)
            })
            .expect("reads");
            assert_eq!(objects, whole, "{step} bytes per read");
        }
    }

    #[test]
    fn objects_of_every_size_and_text_are_read_as_serde_json_reads_them() {
        // Sizes around the share of the window first parsed as text (4 KiB,
        // then twice the last object), with two- and three-byte characters
        // where that share may cut one.
        let sizes = [10, 5_000, 100, 9_000, 20_000, 3, 70_000, 50];
        let items: Vec<String> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    "{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"p{i}\"}},\"data\":\"{}\"}}",
                    "é€".repeat(*n)
                )
            })
            .collect();
        let input = format!("{{\"items\": [{}]}}", items.join(","));
        let expected: Value = serde_json::from_str(&input).expect("valid");
        let objects = read(&input, Parse::Whole).expect("reads");
        assert_eq!(Value::Array(objects), expected["items"]);

        // A byte that is not UTF-8 in the fifth object, after objects read
        // as text: the error is where serde_json puts it.
        let mut bytes = input.into_bytes();
        let at = bytes.windows(4).position(|w| w == b"\"p4\"").expect("p4") + 40;
        bytes[at] = 0xff;
        let error =
            read_json_objects(&bytes[..], Parse::Whole, &mut |_| {}).expect_err("not UTF-8");
        let AuditInputError::Syntax { line, column, .. } = &error else {
            panic!("{error}");
        };
        let whole = serde_json::from_slice::<Value>(&bytes).expect_err("not UTF-8");
        assert_eq!(
            (*line, *column),
            (whole.line(), whole.column()),
            "{error}; {whole}"
        );
    }

    #[test]
    fn json_lists_without_managed_fields_lose_only_those() {
        let input = r#"{"items": [
            {"kind": "Pod", "metadata": {"name": "a", "managedFields": [{"manager": "x"}]},
             "spec": {"managedFields": 1}}
        ]}
        {"kind": "Pod", "metadata": {"name": "b", "managedFields": []}}"#;
        let lean = read(input, Parse::WithoutManagedFields).expect("reads");
        assert_eq!(
            lean,
            [
                serde_json::json!({"kind": "Pod", "metadata": {"name": "a"}, "spec": {"managedFields": 1}}),
                serde_json::json!({"kind": "Pod", "metadata": {"name": "b"}}),
            ]
        );
        let whole = read(input, Parse::Whole).expect("reads");
        assert_eq!(whole[0]["metadata"]["managedFields"][0]["manager"], "x");
    }

    #[test]
    fn an_object_whose_items_is_no_array_is_an_object() {
        let objects = read(
            r#"{"kind": "Thing", "items": {"a": 1}} {"items": [], "kind": "List"} []"#,
            Parse::Whole,
        )
        .expect("reads");
        assert_eq!(
            objects,
            [serde_json::json!({"kind": "Thing", "items": {"a": 1}})]
        );
    }

    #[test]
    fn a_list_whose_items_is_no_list_is_refused_as_kubectl_refuses_it() {
        let privileged = r#"{"kind": "Pod", "metadata": {"name": "p"}}"#;
        for input in [
            format!(r#"{{"apiVersion": "v1", "kind": "PodList", "items": {{"a": {privileged}}}}}"#),
            r#"{"items": "{}", "kind": "List"}"#.to_owned(),
        ] {
            let error = read(&input, Parse::Whole).expect_err(&input);
            assert!(
                matches!(
                    &error,
                    AuditInputError::ItemsNotAList {
                        at: Some((1, 1)),
                        ..
                    }
                ),
                "{input}: {error:?}"
            );
            assert!(
                error.to_string().contains("nothing in it was audited"),
                "{error}"
            );
            let mut objects = Vec::new();
            let error =
                read_yaml("f.yaml", &input, &mut |object| objects.push(object)).expect_err(&input);
            assert!(
                matches!(error, AuditInputError::ItemsNotAList { .. }),
                "{input}: {error:?}"
            );
        }
        // A List with null items is an empty list to kubectl.
        let objects = read(r#"{"kind": "PodList", "items": null}"#, Parse::Whole).expect("reads");
        assert_eq!(
            objects,
            [serde_json::json!({"kind": "PodList", "items": null})]
        );
    }

    #[test]
    fn json_errors_name_the_line_and_column_serde_json_names() {
        for input in [
            // In the third item, on line 3.
            "{\"items\": [\n{\"a\": 1},\n  {\"a\": 1}, {\"a\": tru}]}",
            "[{\"a\":\n {\"b\": 1 2}}]",
            "{\"items\": [{\"a\": 1}\n{\"a\": 2}]}",
            "{\"items\": [{\"a\": 1}, {\"a\": \"x\u{1}\"}]}",
            "{\"items\": [\"\\q\"]}",
            "{\"kind\": \"Pod\",\n \"x\": 1,\n \"metadata\": }",
            "{\"kind\" 1}",
        ] {
            let error = read(input, Parse::Whole).expect_err(input);
            let AuditInputError::Syntax { line, column, .. } = &error else {
                panic!("{input}: {error}");
            };
            let whole = serde_json::from_str::<Value>(input).expect_err(input);
            assert_eq!(
                (*line, *column),
                (whole.line(), whole.column()),
                "{input}: {error}; serde_json: {whole}"
            );
        }
        // At the end of the input, and where a value that is no object
        // starts, the line is the last one.
        for input in [
            "{\"items\": [{\"a\": 1}",
            "{\"items\": [{\"a\": \"x",
            "[\n1,\n",
            "\n\n  \"just a string\"",
        ] {
            let error = read(input, Parse::Whole).expect_err(input);
            let AuditInputError::Syntax { line, .. } = &error else {
                panic!("{input}: {error}");
            };
            assert_eq!(*line, input.matches('\n').count() + 1, "{input}: {error}");
        }
    }

    #[test]
    fn a_create_over_its_budget_is_an_error_not_clean() {
        // Each copy holds the metadata it is copied into: every pass
        // doubles the object, until the mutation-size limit stops it.
        let copy = |name: &str| {
            format!(
                "    - name: {name}\n      match: {{resources: [pods]}}\n      mutate:\n        - set: {{path: $.object.metadata.annotations.{name}, valueFrom: {{path: \"$.object..metadata\"}}}}\n"
            )
        };
        let rules = format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: growing\nspec:\n  rules:\n{}",
            ["a", "b", "c", "d"].map(copy).concat()
        );
        let plan = crate::plan::compile(&crate::rules::load_str("growing.yaml", &rules))
            .expect("compiles");
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"x": "y".repeat(10_000)}},
        });
        let judgement = judge(
            &mut KeptSelections::new(&plan, None),
            pod,
            &ObjectOptions::default(),
        );
        let error = judgement.error.as_deref().unwrap_or_default();
        assert!(error.starts_with("mutating rules: "), "{judgement:?}");
        assert!(error.contains("--max-mutation-bytes"), "{error}");
        assert!(!judgement.is_clean());
    }

    #[test]
    fn an_expression_that_fails_is_not_counted_as_admitted() {
        // The API server refuses the request when a CEL expression fails,
        // on either half: the audit says it could not judge the object.
        let failing = "object.metadata.name.matches(object.metadata.annotations['p'])";
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "annotations": {"p": "("}},
        });
        for (half, rule) in [
            (
                "mutating rules: ",
                format!(
                    "    - name: r\n      match: {{resources: [pods]}}\n      when: [{{cel: \"{failing}\"}}]\n      mutate:\n        - setIfAbsent: {{path: $.object.metadata.labels.x, value: y}}\n"
                ),
            ),
            (
                "validating rules: ",
                format!(
                    "    - name: r\n      match: {{resources: [pods]}}\n      deny: [{{cel: \"{failing}\", message: m}}]\n"
                ),
            ),
        ] {
            let plan = crate::plan::test_plan(&rule);
            let judgement = judge(
                &mut KeptSelections::new(&plan, None),
                pod.clone(),
                &ObjectOptions::default(),
            );
            let error = judgement.error.as_deref().unwrap_or_default();
            assert!(
                error.starts_with(half) && error.contains("failed"),
                "{judgement:?}"
            );
            assert!(!judgement.is_clean());
        }
    }

    #[test]
    fn a_json_syntax_error_says_where() {
        let error = read_json(
            "{\"kind\": \"Pod\",\n \"metadata\": }".as_bytes(),
            &mut |_| {},
        )
        .expect_err("broken");
        assert!(error.to_string().contains("line 2"), "{error}");
    }

    #[test]
    fn an_object_over_the_bound_is_an_error_not_memory() {
        // A stream that never ends inside one string: the bound stops it.
        struct Endless;
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                buf.fill(b'a');
                Ok(buf.len())
            }
        }
        let input = "{\"kind\": \"Pod\", \"data\": \"".as_bytes().chain(Endless);
        let error = read_json(input, &mut |_| {}).expect_err("bounded");
        assert!(error.to_string().contains("larger than 16 MiB"), "{error}");
        // Between the fields of an object too, not only in one of them.
        let field = format!("\"{}\"", "a".repeat(1 << 20));
        let fields: Vec<String> = (0..17).map(|i| format!("\"f{i}\": {field}")).collect();
        let input = format!("{{{}}}", fields.join(","));
        let error = read_json(input.as_bytes(), &mut |_| {}).expect_err("bounded");
        assert!(error.to_string().contains("larger than 16 MiB"), "{error}");
    }

    #[test]
    fn yaml_documents_and_lists_give_every_object() {
        let input = "kind: Pod\nmetadata: {name: a}\n---\nkind: List\nitems:\n  - {kind: Pod, metadata: {name: b}}\n---\n";
        let mut objects = Vec::new();
        read_yaml("in.yaml", input, &mut |object| objects.push(object)).expect("reads");
        assert_eq!(names(&objects), ["a", "b"]);
    }

    #[test]
    fn a_yaml_alias_bomb_is_refused_before_expansion() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x]\n");
        for level in 0..9 {
            text.push_str(&format!(
                "l{level}: &l{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n",
                prev = if level == 0 { "a".to_owned() } else { format!("l{}", level - 1) }
            ));
        }
        let error = read_yaml("bomb.yaml", &text, &mut |_| {}).expect_err("refused");
        assert!(matches!(error, AuditInputError::YamlBounds(_)), "{error}");
    }

    #[test]
    fn a_yaml_input_over_the_bound_is_refused_for_its_size_even_when_the_cut_splits_a_character() {
        let bound = crate::rules::limits::MAX_FILE_BYTES as usize;
        // Characters start at even offsets: the cut after bound + 1 bytes
        // falls inside one.
        let text = format!("ab: {}", "é".repeat(bound / 2 + 2));
        let error =
            read_yaml_from("big.yaml", text.as_bytes(), &mut |_| {}).expect_err("over the bound");
        assert!(matches!(error, AuditInputError::YamlBounds(_)), "{error}");
        assert!(error.to_string().contains("big.yaml"), "{error}");
        // Within it, a text that is not UTF-8 says so.
        let error =
            read_yaml_from("bad.yaml", &b"a: \xff\n"[..], &mut |_| {}).expect_err("not UTF-8");
        assert!(error.to_string().contains("not UTF-8"), "{error}");
    }
}
