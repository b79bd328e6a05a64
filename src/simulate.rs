//! Evaluating rules offline the way the API server calls kadmit: the mutating
//! half first, then the validating half on the mutated object. Used by
//! `kadmit test` and by the golden tests, so both exercise the same path.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::eval::{self, Ask, Denial, Explanation, Finding};
use crate::plan::Mode;
use crate::plan::{Plan, RuleSetId};
use crate::review::{
    self, Embedded, GroupVersionKind, GroupVersionResource, MAX_PARSED_BYTES, Operation, Request,
    UserInfo,
};
use crate::rules::resource::built_in_cluster_scoped;

/// How to turn a plain object into a request.
#[derive(Debug, Clone)]
pub struct ObjectOptions {
    /// The operation; on DELETE the object is the old object.
    pub operation: Operation,
    /// The old object, for UPDATE.
    pub old: Option<Value>,
    /// User name.
    pub user: String,
    /// User groups.
    pub groups: Vec<String>,
    /// Namespace, when the object names none.
    pub namespace: Option<String>,
    /// Plural resource (`widgets.example.com` or `pods`), when it cannot be
    /// derived from the kind; with a group (`deployments.apps`), that group
    /// rather than the object's.
    pub resource: Option<String>,
    /// Subresource.
    pub sub_resource: Option<String>,
}

impl Default for ObjectOptions {
    fn default() -> Self {
        ObjectOptions {
            operation: Operation::Create,
            old: None,
            user: "kadmit-test".to_owned(),
            groups: vec!["system:authenticated".to_owned()],
            namespace: None,
            resource: None,
            sub_resource: None,
        }
    }
}

/// An input that is neither an AdmissionReview nor a Kubernetes object.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Not JSON or YAML.
    #[error("not JSON or YAML: {0}")]
    Syntax(String),
    /// YAML that is not valid, or is past the bounds of rule files
    /// (aliases, depth, nodes): found before it is parsed, and said where.
    #[error("{0}")]
    Yaml(Box<crate::rules::Diagnostic>),
    /// An AdmissionReview that does not decode.
    #[error(transparent)]
    Review(#[from] review::DecodeError),
    /// An object without `apiVersion` or `kind`.
    #[error("the object has no {0} (is it a Kubernetes object?)")]
    MissingField(&'static str),
    /// An input that would take more than [`MAX_PARSED_BYTES`] once parsed,
    /// which the webhook refuses (413) and `kadmit audit` too, with the same
    /// words.
    #[error(
        "the object would take about {} MiB once parsed, more than the {} MiB one object \
         may take (the webhook denies such a review where a rule that can deny applies)",
        .0 >> 20,
        MAX_PARSED_BYTES >> 20
    )]
    TooLargeParsed(usize),
    /// A `List` (an object with an `items` array) or an array of objects,
    /// which `kadmit audit` reads item by item.
    #[error(
        "a list of objects, not one object: judge its items with `kadmit audit`, \
         or give each item as an input of its own"
    )]
    List,
}

/// Refuses `text` when its JSON may take more than [`MAX_PARSED_BYTES`]
/// once parsed, as the webhook refuses such a review before parsing it
/// ([`review::may_parse_over`]). Checked before any parse: YAML text is
/// estimated the same way, which only overcounts it.
pub fn check_parsed_text(text: &str) -> Result<(), InputError> {
    if review::may_parse_over(text.as_bytes(), MAX_PARSED_BYTES) {
        return Err(InputError::TooLargeParsed(review::parsed_size_estimate(
            text.as_bytes(),
        )));
    }
    Ok(())
}

/// Refuses what `values` take together once parsed when that is more than
/// [`MAX_PARSED_BYTES`]: their JSON, as the API server would send it in one
/// review, estimated as the webhook estimates a review's body.
pub fn check_parsed_size<'a>(
    values: impl IntoIterator<Item = &'a Value>,
) -> Result<(), InputError> {
    let mut size = 0_usize;
    for value in values {
        let json = serde_json::to_vec(value).map_err(|e| InputError::Syntax(e.to_string()))?;
        size = size.saturating_add(review::parsed_size_estimate(&json));
    }
    if size > MAX_PARSED_BYTES {
        return Err(InputError::TooLargeParsed(size));
    }
    Ok(())
}

/// Parses `text` (named `file` in errors) as JSON, which has no aliases and
/// whose depth serde_json bounds, or else as YAML, once it is within the
/// bounds of rule files and reads as kubectl reads it
/// ([`crate::rules::limits::check_manifest`]).
///
/// Either way, what it would take parsed is held to [`MAX_PARSED_BYTES`],
/// the webhook's bound: estimated from the text before it is parsed, and
/// counted again on a YAML value.
pub fn parse_value(file: &str, text: &str) -> Result<Value, InputError> {
    check_parsed_text(text)?;
    match serde_json::from_str(text) {
        Ok(value) => return Ok(value),
        // JSON nested past serde_json's 128 levels: read as YAML, it would
        // be refused with the rule files' bound, which says nothing of it.
        Err(error) if error.to_string().starts_with("recursion limit exceeded") => {
            return Err(InputError::Syntax(format!(
                "{error}: the input nests deeper than the 128 levels kadmit test reads (the \
                 webhook reads such a review, and skips a part that deep when no rule reads it)"
            )));
        }
        Err(_) => {}
    }
    if let Some(diagnostic) =
        crate::rules::limits::check_manifest(file, text, crate::rules::limits::MAX_TOTAL_NODES)
    {
        return Err(InputError::Yaml(Box::new(diagnostic)));
    }
    let value = serde_yaml::from_str(text).map_err(|e| InputError::Syntax(e.to_string()))?;
    check_parsed_size([&value])?;
    Ok(value)
}

/// Parses an input file: an AdmissionReview (JSON or YAML), or a plain
/// object turned into a request with `options`; a list of objects is
/// refused ([`refuse_list`]).
pub fn read_input(file: &str, text: &str, options: &ObjectOptions) -> Result<Request, InputError> {
    let value = parse_value(file, text)?;
    if value.get("kind").and_then(Value::as_str) == Some("AdmissionReview") {
        // A review that reads as JSON, or starts as JSON does, is decoded
        // from its own bytes, as the server decodes it: what the server
        // refuses (a byte-order mark, a key given twice) is refused here
        // too, rather than decided after a round trip that hides it.
        let json = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
        if json.starts_with('{') {
            return Ok(review::decode(text.as_bytes())?.request);
        }
        let bytes = serde_json::to_vec(&value).map_err(|e| InputError::Syntax(e.to_string()))?;
        return Ok(review::decode(&bytes)?.request);
    }
    refuse_list(&value)?;
    request_for_object(value, options)
}

/// Refuses an input that is a list of objects, as `kadmit audit` tells one
/// (and kubectl, which applies its items): an object with an `items` array
/// (`List`, `PodList`), or an array. Offline, one input is one request.
pub fn refuse_list(value: &Value) -> Result<(), InputError> {
    if value.is_array() || value.get("items").is_some_and(Value::is_array) {
        return Err(InputError::List);
    }
    Ok(())
}

/// The resource of a kind, guessed as English plurals go: `Endpoints` is
/// already plural, a consonant and `y` take `-ies` (`NetworkPolicy`), a
/// vowel and `y` take `-s` (`Gateway`).
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower == "endpoints" {
        lower
    } else if lower.ends_with('s') || lower.ends_with("ch") || lower.ends_with('x') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// A request for `object` as the API server would send it.
///
/// An object and an old object that would take more than
/// [`MAX_PARSED_BYTES`] together are refused, as the webhook would refuse
/// their review.
pub fn request_for_object(object: Value, options: &ObjectOptions) -> Result<Request, InputError> {
    check_parsed_size([&object].into_iter().chain(options.old.as_ref()))?;
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(InputError::MissingField("apiVersion"))?
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(InputError::MissingField("kind"))?
        .to_owned();
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), api_version.clone()),
    };
    // `deployments.apps` names the group too: a subresource's object is
    // of another group's kind (a Scale is autoscaling/v1).
    let (resource, resource_group) = match &options.resource {
        Some(resource) => match resource.split_once('.') {
            Some((name, group)) => (name.to_owned(), group.to_owned()),
            None => (resource.clone(), group.clone()),
        },
        None => (plural(&kind), group.clone()),
    };
    let metadata = object.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let cluster_scoped = built_in_cluster_scoped(&resource);
    let namespace = if kind == "Namespace" {
        name.clone()
    } else if cluster_scoped {
        None
    } else {
        metadata
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| options.namespace.clone())
            .or_else(|| Some("default".to_owned()))
    };
    let (new, old) = match options.operation {
        Operation::Delete => (None, Some(object)),
        _ => (Some(object), options.old.clone()),
    };
    Ok(Request {
        uid: "00000000-0000-0000-0000-000000000000".to_owned(),
        kind: GroupVersionKind {
            group: group.clone(),
            version: version.clone(),
            kind,
        },
        resource: GroupVersionResource {
            group: resource_group,
            version,
            resource,
        },
        sub_resource: options.sub_resource.clone(),
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name,
        namespace,
        operation: options.operation,
        user_info: UserInfo {
            username: options.user.clone(),
            uid: None,
            groups: options.groups.clone(),
            extra: BTreeMap::new(),
        },
        object: new.map(Embedded::Parsed),
        old_object: old.map(Embedded::Parsed),
        dry_run: Some(false),
        options: None,
    })
}

/// What the two halves of the webhook answered.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `OPERATION resource[/sub] namespace/name`.
    pub request: String,
    /// The final answer: false when either half denied.
    pub allowed: bool,
    /// The mutating half.
    pub mutate: HalfReport,
    /// The validating half, run on the mutated object.
    pub validate: HalfReport,
    /// The object after mutation (absent when nothing changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// Why each rule applied or not, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explain: Vec<ExplainedRule>,
}

/// One half's answer.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HalfReport {
    /// Whether it admitted the request.
    pub allowed: bool,
    /// The denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Denial>,
    /// Warnings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The JSON Patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<Value>,
    /// `auditAnnotations`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
    /// The error, when the review could not be evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What each rule that fired did (`kadmit verify` compares the rules
    /// that denied and warned; the JSON report says it through the audit
    /// annotations).
    #[serde(skip)]
    pub findings: Vec<Finding>,
}

/// An explanation with the half it belongs to.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainedRule {
    /// `mutate` or `validate`.
    pub mode: &'static str,
    /// What happened to the rule.
    #[serde(flatten)]
    pub explanation: Explanation,
}

fn half(result: Result<eval::Verdict, eval::EvalError>) -> (HalfReport, Option<Value>) {
    match result {
        Ok(verdict) => (
            HalfReport {
                allowed: verdict.allowed,
                status: verdict.denial,
                warnings: verdict.warnings,
                patch: verdict
                    .patch
                    .as_ref()
                    .and_then(|p| serde_json::to_value(p).ok()),
                audit_annotations: verdict.audit_annotations,
                error: None,
                findings: verdict.findings,
            },
            verdict.mutated,
        ),
        Err(error) => (
            HalfReport {
                allowed: false,
                error: Some(error.to_string()),
                ..HalfReport::default()
            },
            None,
        ),
    }
}

/// Runs the mutating then the validating half on `request`.
pub fn simulate(
    plan: &Plan,
    request: &Request,
    rule_set: Option<RuleSetId>,
    explain: bool,
) -> Report {
    let mut explained = Vec::new();
    let mut run = |mode: Mode, request: &Request| {
        let mut ask = Ask::new(mode).rule_sets(rule_set);
        if explain {
            ask = ask.explaining();
        }
        let mut result = eval::select(plan, request, ask).evaluate(request);
        if let Ok(verdict) = &mut result {
            let notes = std::mem::take(&mut verdict.explanations);
            explained.extend(notes.into_iter().map(|explanation| ExplainedRule {
                mode: mode.as_str(),
                explanation,
            }));
        }
        result
    };
    let (mutate, mutated) = half(run(Mode::Mutate, request));
    let mut validated_request = request.clone();
    if let Some(object) = &mutated {
        validated_request.object = Some(Embedded::Parsed(object.clone()));
    }
    let validate_result = run(Mode::Validate, &validated_request);
    let (validate, _) = half(validate_result);
    let target = match (&request.namespace, &request.name) {
        (Some(ns), Some(name)) => format!(" {ns}/{name}"),
        (None, Some(name)) => format!(" {name}"),
        (Some(ns), None) => format!(" {ns}/<generated>"),
        (None, None) => String::new(),
    };
    Report {
        request: format!(
            "{} {}{}",
            request.operation,
            request.resource_label(),
            target
        ),
        // The API server stops at a mutating webhook's denial (an
        // expression that failed, a budget spent) before any validation.
        allowed: mutate.error.is_none()
            && mutate.allowed
            && validate.error.is_none()
            && validate.allowed,
        mutate,
        validate,
        object: mutated,
        explain: explained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_review_is_decoded_from_its_own_bytes_as_the_server_decodes_it() {
        let path = format!(
            "{}/tests/fixtures/admission-reviews/create-pod.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let review = std::fs::read_to_string(&path).expect("the fixture reads");
        let options = ObjectOptions::default();
        assert!(read_input("review.json", &review, &options).is_ok());
        // The server refuses both with a 400; a round trip through a
        // serde_json value used to hide what it refuses.
        let with_bom = format!("\u{feff}{review}");
        let twice = review.replacen(
            "\"operation\":",
            "\"operation\": \"DELETE\", \"operation\":",
            1,
        );
        for (name, text) in [
            ("a byte-order mark", with_bom),
            ("a key given twice", twice),
        ] {
            let server = crate::review::decode(text.as_bytes());
            assert!(server.is_err(), "{name}: the server decodes it");
            let offline = read_input("review.json", &text, &options);
            assert!(
                matches!(offline, Err(InputError::Review(_))),
                "{name}: {offline:?}"
            );
        }
    }

    #[test]
    fn a_denial_of_the_mutating_half_is_the_answer() {
        // An expression that fails denies the review on /mutate, before
        // the API server runs any validation.
        let plan = crate::plan::test_plan(
            "    - name: r
      match: {resources: [pods]}
      when: [{cel: \"object.metadata.name.matches(object.metadata.annotations['p'])\"}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.x, value: y}
",
        );
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, annotations: {p: '('}}\nspec: {containers: [{name: a, image: nginx}]}\n";
        let request = read_input("pod.yaml", pod, &ObjectOptions::default()).expect("reads");
        let report = simulate(&plan, &request, None, false);
        assert!(!report.mutate.allowed);
        assert!(report.validate.allowed);
        assert!(!report.allowed);
    }

    #[test]
    fn kinds_become_the_plurals_the_api_server_uses() {
        for (kind, resource) in [
            ("Pod", "pods"),
            ("Ingress", "ingresses"),
            ("IngressClass", "ingressclasses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Endpoints", "endpoints"),
            ("EndpointSlice", "endpointslices"),
            ("Gateway", "gateways"),
            ("Key", "keys"),
            ("Proxy", "proxies"),
        ] {
            assert_eq!(plural(kind), resource, "{kind}");
        }
    }

    #[test]
    fn json_nested_past_what_serde_json_reads_is_refused_as_such() {
        let deep = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"x\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let refused = parse_value("deep.json", &deep).expect_err("refused");
        let said = refused.to_string();
        assert!(
            said.contains("recursion limit exceeded")
                && said.contains("deeper than the 128 levels"),
            "{said}"
        );
        assert!(!said.contains("rule files"), "{said}");
    }

    #[test]
    fn inputs_over_the_webhooks_parsed_bound_are_refused() {
        let maps = |count: usize| {
            format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"x\":[{}]}}",
                vec!["{\"a\":0}"; count].join(",")
            )
        };
        let refused = parse_value("big.json", &maps(100_000)).expect_err("refused");
        assert!(
            matches!(refused, InputError::TooLargeParsed(size) if size > MAX_PARSED_BYTES),
            "{refused}"
        );
        let half: Value = parse_value("half.json", &maps(45_000)).expect("within the bound");
        let alone = request_for_object(half.clone(), &ObjectOptions::default());
        assert!(alone.is_ok());
        let update = ObjectOptions {
            operation: Operation::Update,
            old: Some(half.clone()),
            ..ObjectOptions::default()
        };
        assert!(matches!(
            request_for_object(half, &update),
            Err(InputError::TooLargeParsed(_))
        ));
        for list in [r#"{"kind": "PodList", "items": []}"#, "[]"] {
            assert!(matches!(
                read_input("list.json", list, &ObjectOptions::default()),
                Err(InputError::List)
            ));
        }
    }

    #[test]
    fn a_resource_with_a_group_is_of_that_group() {
        let scale = serde_json::json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 3}});
        let options = ObjectOptions {
            operation: Operation::Update,
            old: Some(scale.clone()),
            resource: Some("deployments.apps".to_owned()),
            sub_resource: Some("scale".to_owned()),
            ..ObjectOptions::default()
        };
        let request = request_for_object(scale.clone(), &options).unwrap();
        assert_eq!(request.resource.group, "apps");
        assert_eq!(request.resource.resource, "deployments");
        assert_eq!(request.kind.group, "autoscaling");
        assert_eq!(request.kind.kind, "Scale");
        // Without a group, the object's group, as before.
        let options = ObjectOptions {
            resource: Some("scales".to_owned()),
            ..options
        };
        let request = request_for_object(scale, &options).unwrap();
        assert_eq!(request.resource.group, "autoscaling");
    }

    #[test]
    fn plain_objects_become_requests() {
        let object = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let request = request_for_object(object, &ObjectOptions::default()).unwrap();
        assert_eq!(request.resource.group, "apps");
        assert_eq!(request.resource.resource, "deployments");
        assert_eq!(request.namespace.as_deref(), Some("default"));
        assert_eq!(plural("Ingress"), "ingresses");
        assert_eq!(plural("NetworkPolicy"), "networkpolicies");
        let options = ObjectOptions {
            operation: Operation::Delete,
            ..ObjectOptions::default()
        };
        let object = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
        let request = request_for_object(object, &options).unwrap();
        assert!(request.object.is_none() && request.old_object.is_some());
        assert_eq!(request.namespace.as_deref(), Some("team-a"));
        assert!(matches!(
            read_input("in.yaml", "a: [", &ObjectOptions::default()),
            Err(InputError::Yaml(_))
        ));
        assert!(matches!(
            read_input("in.yaml", "a: 1", &ObjectOptions::default()),
            Err(InputError::MissingField("apiVersion"))
        ));
        // An alias bomb is refused before it is expanded.
        let mut laughs = String::from("l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n");
        for level in 1..=9 {
            let refs = vec![format!("*l{}", level - 1); 10].join(", ");
            laughs.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        }
        let refused =
            read_input("in.yaml", &laughs, &ObjectOptions::default()).expect_err("refused");
        assert!(
            refused.to_string().starts_with("in.yaml:6:")
                && refused.to_string().contains("more than 250000 nodes"),
            "{refused}"
        );
    }
}
