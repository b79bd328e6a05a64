//! The bundled rules on updates that change nothing they check: every
//! object the suites and the captured reviews hold, most of them written to
//! be denied, can still lose a finalizer while it is deleted (a denial
//! would leave it stuck in Terminating), and a Pod can still be labelled.

use std::path::{Path, PathBuf};

use crate::engine::evaluate;
use kadmit::cli::inputs::files;
use kadmit::plan::{Mode, Plan, compile};
use kadmit::review::Operation;
use kadmit::simulate::{ObjectOptions, parse_value, request_for_object};
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `rules/` and `profiles/`, compiled together as `kadmit check` would.
fn bundled_plan() -> Plan {
    let read = kadmit::rules::read_paths(&[root().join("rules"), root().join("profiles")])
        .expect("the bundled rules");
    compile(&kadmit::rules::load_files(read.files)).unwrap_or_else(|d| panic!("{d}"))
}

/// Every object of the suites' object files and of the captured reviews,
/// named by where it came from.
fn objects() -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    for dir in ["tests/suites", "tests/fixtures/admission-reviews"] {
        let files = files(&root().join(dir), &["yaml", "json"], false).expect("the files");
        objects.extend(files.iter().filter_map(|path| object_in(path)));
    }
    objects
}

/// The object of `path` (of the review, for a review), named by where it
/// came from; `None` for a suite file or a file that holds none.
fn object_in(path: &Path) -> Option<(String, Value)> {
    let name = path.strip_prefix(root()).unwrap().display().to_string();
    if name.ends_with(".suite.yaml") {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let value = parse_value(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let object = if value["kind"] == "AdmissionReview" {
        value["request"]["object"].clone()
    } else {
        value
    };
    (object["apiVersion"].is_string() && object["kind"].is_string()).then_some((name, object))
}

/// Denial messages of both halves for `object` under `options`.
fn denials(plan: &Plan, object: Value, options: &ObjectOptions) -> Vec<String> {
    let request = request_for_object(object, options).expect("a request");
    [Mode::Mutate, Mode::Validate]
        .into_iter()
        .filter_map(|mode| {
            let verdict = evaluate(plan, &request, mode, None).expect("an evaluation");
            verdict.denial.map(|denial| denial.message)
        })
        .collect()
}

fn update_from(old: Value) -> ObjectOptions {
    ObjectOptions {
        operation: Operation::Update,
        old: Some(old),
        ..ObjectOptions::default()
    }
}

#[test]
fn no_bundled_rule_keeps_an_object_being_deleted_from_losing_a_finalizer() {
    let plan = bundled_plan();
    let objects = objects();
    let mut denied_on_create = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for (name, object) in objects {
        if !denials(&plan, object.clone(), &ObjectOptions::default()).is_empty() {
            denied_on_create += 1;
            kinds.insert(object["kind"].as_str().unwrap_or_default().to_owned());
        }
        let mut deleting = object;
        deleting["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
        let mut old = deleting.clone();
        old["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
        if let Some(metadata) = deleting["metadata"].as_object_mut() {
            metadata.remove("finalizers");
        }
        let denied = denials(&plan, deleting, &update_from(old));
        assert!(
            denied.is_empty(),
            "{name}: taking the last finalizer off it while it is deleted is denied: {denied:?}"
        );
    }
    // The objects include ones the rules deny, of several kinds: otherwise
    // this would show nothing.
    assert!(
        denied_on_create >= 20,
        "only {denied_on_create} objects are denied on CREATE"
    );
    for kind in ["Pod", "Deployment", "Service", "CronJob"] {
        assert!(
            kinds.contains(kind),
            "no {kind} is denied on CREATE: {kinds:?}"
        );
    }
}

#[test]
fn no_bundled_rule_keeps_a_pod_from_being_labelled() {
    let plan = bundled_plan();
    let mut pods = 0;
    for (name, old) in objects() {
        if old["kind"] != "Pod" {
            continue;
        }
        pods += 1;
        let mut labelled = old.clone();
        labelled["metadata"]["labels"]["example.com/drained"] = json!("true");
        labelled["metadata"]["annotations"]["example.com/note"] = json!("seen");
        let denied = denials(&plan, labelled, &update_from(old));
        assert!(
            denied.is_empty(),
            "{name}: labelling it is denied: {denied:?}"
        );
    }
    assert!(pods >= 20, "only {pods} Pods");
}
