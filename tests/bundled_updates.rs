//! The bundled rules on updates that change nothing they check: every
//! object the suites and the captured reviews hold, most of them written to
//! be denied, can still lose a finalizer while it is deleted (a denial
//! would leave it stuck in Terminating), and a Pod can still be labelled.

use std::path::{Path, PathBuf};

use crate::engine::evaluate;
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

fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// Every object of the suites' object files and of the captured reviews,
/// named by where it came from.
fn objects() -> Vec<(String, Value)> {
    let mut files = Vec::new();
    files_under(&root().join("tests/suites"), &mut files);
    files_under(&root().join("tests/fixtures/admission-reviews"), &mut files);
    files.sort();
    let mut objects = Vec::new();
    for path in files {
        let name = path.strip_prefix(root()).unwrap().display().to_string();
        let is_review = name.ends_with(".json");
        if !(is_review || name.ends_with(".yaml")) || name.ends_with(".suite.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value = parse_value(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let object = if is_review {
            value["request"]["object"].clone()
        } else {
            value
        };
        if object["apiVersion"].is_string() && object["kind"].is_string() {
            objects.push((name, object));
        }
    }
    objects
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
