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

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::eval::{self, Ask, EvalOptions, Finding, Outcome};
use crate::plan::{Mode, Plan, RuleSetId, RuleSets};
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
    /// Not valid JSON, or an object over [`MAX_OBJECT_BYTES`].
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Not valid YAML.
    #[error("{0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A YAML input over the rule files' bounds.
    #[error(
        "{0} (YAML is read whole; pass JSON, e.g. `kubectl get -o json`, which is read as a stream)"
    )]
    YamlBounds(crate::rules::Diagnostic),
    /// The input could not be read.
    #[error("{0}")]
    Io(#[from] io::Error),
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
        let name = self.name.as_deref().unwrap_or("<unnamed>");
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{name}", self.kind),
            None => write!(f, "{} {name}", self.kind),
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
    plan: &Plan,
    rule_set: Option<RuleSetId>,
    object: Value,
    options: &ObjectOptions,
) -> Judgement {
    let reference = ObjectRef::of(&object);
    match request_for_object(object, options) {
        Ok(request) => {
            let judging = Judging {
                options: EvalOptions {
                    verify_patches: false,
                    ..EvalOptions::default()
                },
                patch: false,
            };
            judge_with(plan, rule_set.into(), reference, request, judging)
        }
        Err(error) => Judgement {
            object: reference,
            violations: Vec::new(),
            mutated_by: Vec::new(),
            error: Some(error.to_string()),
            patch: None,
        },
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
    let judging = Judging {
        options: EvalOptions::default(),
        patch: true,
    };
    judge_with(plan, rule_sets.into(), object, request, judging)
}

/// How [`judge_with`] evaluates.
#[derive(Debug, Clone, Copy)]
struct Judging {
    options: EvalOptions,
    /// Keep the JSON Patch in [`Judgement::patch`] (`kadmit replay`
    /// compares it).
    patch: bool,
}

/// Judges both halves on one object: the request's object is taken out of
/// it and handed from the mutating half to the validating half, never
/// copied.
fn judge_with(
    plan: &Plan,
    rule_sets: RuleSets<'_>,
    object: ObjectRef,
    mut request: crate::review::Request,
    judging: Judging,
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
    let ask = Ask::new(Mode::Mutate)
        .rule_sets(rule_sets)
        .options(judging.options);
    let document = match eval::select(plan, &request, ask).evaluate_object(&request, document) {
        Ok((verdict, document)) => {
            judgement.mutated_by = verdict.findings;
            if judging.patch {
                judgement.patch = verdict
                    .patch
                    .as_ref()
                    .and_then(|patch| serde_json::to_value(patch).ok());
            }
            match (document, verdict.over_budget) {
                (Some(document), None) => document,
                // The API server would refuse the CREATE for its cost.
                (_, Some(exceeded)) => {
                    judgement.error = Some(format!("mutating rules: {exceeded}"));
                    return judgement;
                }
                (None, None) => Value::Null,
            }
        }
        Err(error) => {
            judgement.error = Some(format!("mutating rules: {error}"));
            return judgement;
        }
    };
    let ask = Ask::new(Mode::Validate)
        .rule_sets(rule_sets)
        .options(judging.options);
    match eval::select(plan, &request, ask).evaluate_object(&request, document) {
        Ok((verdict, _)) => judgement.violations = verdict.findings,
        Err(error) => judgement.error = Some(format!("validating rules: {error}")),
    }
    judgement
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

/// Calls `each` with every object of a JSON stream, one at a time.
pub fn read_json(reader: impl Read, each: &mut dyn FnMut(Value)) -> Result<(), AuditInputError> {
    let since_mark = Rc::new(Cell::new(0));
    let bounded = Bounded {
        inner: reader,
        since_mark: since_mark.clone(),
    };
    let mut deserializer =
        serde_json::Deserializer::from_reader(io::BufReader::with_capacity(64 << 10, bounded));
    while deserializer.end().is_err() {
        since_mark.set(0);
        Objects {
            each: &mut *each,
            since_mark: &since_mark,
        }
        .deserialize(&mut deserializer)?;
    }
    Ok(())
}

/// Calls `each` with every object of a YAML text (`file` names it in
/// errors).
pub fn read_yaml(
    file: &str,
    text: &str,
    each: &mut dyn FnMut(Value),
) -> Result<(), AuditInputError> {
    if let Some(diagnostic) = crate::rules::limits::check(file, text) {
        return Err(AuditInputError::YamlBounds(diagnostic));
    }
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = <Value as serde::Deserialize>::deserialize(document)?;
        match value {
            Value::Null => {}
            Value::Object(mut object) if object.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(items)) = object.remove("items") {
                    items.into_iter().for_each(&mut *each);
                }
            }
            Value::Array(items) => items.into_iter().for_each(&mut *each),
            value => each(value),
        }
    }
    Ok(())
}

/// A reader that fails once more than [`MAX_OBJECT_BYTES`] have been read
/// since the mark was last reset (at the start of each object).
struct Bounded<R> {
    inner: R,
    since_mark: Rc<Cell<u64>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        let total = self.since_mark.get().saturating_add(read as u64);
        self.since_mark.set(total);
        if total > MAX_OBJECT_BYTES + (64 << 10) {
            return Err(io::Error::other(format!(
                "an object is larger than {} MiB",
                MAX_OBJECT_BYTES >> 20
            )));
        }
        Ok(read)
    }
}

/// One top-level JSON value: an object (or, with an `items` array, a list of
/// them) or an array of objects.
struct Objects<'a> {
    each: &'a mut dyn FnMut(Value),
    since_mark: &'a Rc<Cell<u64>>,
}

impl<'de> DeserializeSeed<'de> for Objects<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Objects<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object, a list of them, or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut fields = serde_json::Map::new();
        let mut listed = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" && !listed {
                map.next_value_seed(Objects {
                    each: &mut *self.each,
                    since_mark: self.since_mark,
                })?;
                listed = true;
            } else {
                fields.insert(key, map.next_value()?);
            }
        }
        if !listed {
            (self.each)(Value::Object(fields));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            self.since_mark.set(0);
            match seq.next_element::<Value>()? {
                Some(item) => (self.each)(item),
                None => return Ok(()),
            }
        }
    }
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
}
