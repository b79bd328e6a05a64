//! Every request body a real kube-apiserver sent (the captures in
//! `tests/fixtures/admission-reviews/`) decodes and evaluates against the
//! bundled rules, through both halves, used as is.

use std::path::PathBuf;

use crate::engine::evaluate;
use kadmit::eval::Ask;
use kadmit::plan::Mode;
use kadmit::plan::{Plan, compile};
use kadmit::review::{Operation, ReviewVersion, decode, encode};
use kadmit::rules::load_dir;
use serde_json::Value;

fn fixture_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission-reviews"
    ));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the real API-server fixtures live in the repository)",
                dir.display()
            )
        })
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// The bundled rules in `rules/`, compiled.
fn bundled_plan() -> Plan {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
    compile(&load_dir(std::path::Path::new(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")))
        .unwrap_or_else(|d| panic!("{dir}: {d}"))
}

#[test]
fn every_real_review_decodes_and_evaluates() {
    let plan = bundled_plan();
    let files = fixture_files();
    assert!(files.len() >= 30, "found only {} fixtures", files.len());
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let body = std::fs::read(&path).unwrap();
        let review = decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected_version = if name.starts_with("v1beta1") {
            ReviewVersion::V1Beta1
        } else {
            ReviewVersion::V1
        };
        assert_eq!(review.version, expected_version, "{name}");
        for mode in [Mode::Mutate, Mode::Validate] {
            let verdict = evaluate(&plan, &review.request, mode, None)
                .unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
            if mode == Mode::Validate {
                assert!(
                    verdict.patch.is_none(),
                    "{name}: validation returned a patch"
                );
            }
            if let Some(patch) = &verdict.patch {
                // DELETE and CONNECT have nothing to mutate.
                assert!(
                    matches!(
                        review.request.operation,
                        Operation::Create | Operation::Update
                    ),
                    "{name}: patch for {:?}",
                    review.request.operation
                );
                let mut object: Value = review.request.object.as_ref().unwrap().to_value().unwrap();
                json_patch::patch(&mut object, &patch.to_json_patch().unwrap())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(Some(&object), verdict.mutated.as_ref(), "{name}");
            }
            let response: Value = serde_json::from_slice(&encode(
                review.version,
                &review.request.uid,
                &verdict.response(mode),
            ))
            .unwrap();
            assert_eq!(
                response["apiVersion"],
                review.version.api_version(),
                "{name}"
            );
            assert_eq!(response["kind"], "AdmissionReview");
            assert_eq!(
                response["response"]["uid"],
                review.request.uid.as_str(),
                "{name}"
            );
            assert_eq!(
                response["response"]["patchType"].is_string(),
                verdict.patch.is_some(),
                "{name}"
            );
        }
    }
}

#[test]
fn the_real_pod_create_is_mutated_and_the_real_deployment_denied() {
    let plan = bundled_plan();
    let read = |name: &str| {
        let path = format!(
            "{}/tests/fixtures/admission-reviews/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        decode(&std::fs::read(path).unwrap()).unwrap().request
    };
    let verdict = evaluate(&plan, &read("create-pod.json"), Mode::Mutate, None).unwrap();
    assert!(verdict.patch.is_some());
    assert_eq!(
        verdict
            .audit_annotations
            .get("rules-mutated")
            .map(String::as_str),
        Some(
            "pod-defaults/default-security-context,pod-defaults/default-resources,ownership/default-team-label"
        )
    );
    let verdict = evaluate(&plan, &read("create-deployment.json"), Mode::Validate, None).unwrap();
    assert!(!verdict.allowed);
    let verdict = evaluate(&plan, &read("create-configmap.json"), Mode::Validate, None).unwrap();
    assert!(verdict.allowed && verdict.findings.is_empty());
}

/// What the server decides (the object parsed while decoding, without
/// `metadata.managedFields` when no rule reads it, handed to the mutating
/// rules) is what the engine decides on the fully parsed review, for every
/// real review, in both halves; and with a rule that reads managedFields,
/// the server parses it.
#[test]
fn the_server_decides_as_the_engine_does_on_the_whole_object() {
    let bundled = bundled_plan();
    assert!(
        !bundled.reads_managed_fields(),
        "no bundled rule reads managedFields"
    );
    let reading = kadmit::rules::load_str(
        "managed.yaml",
        r#"apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: managed}
spec:
  rules:
    - name: no-kubectl-run
      match: {resources: ["*"], operations: [CREATE, UPDATE]}
      action: Warn
      deny:
        - path: "$.object.metadata.managedFields[*].manager"
          equals: kubectl-run
          message: "made by {{ $.object.metadata.managedFields[0].manager }}"
"#,
    );
    let reading = compile(&reading).unwrap_or_else(|d| panic!("{d}"));
    assert!(reading.reads_managed_fields());
    let options = kadmit::eval::EvalOptions {
        verify_patches: false,
        ..kadmit::eval::EvalOptions::default()
    };
    let mut warned = 0;
    for plan in [&bundled, &reading] {
        for path in fixture_files() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let body = std::fs::read(&path).unwrap();
            let whole = decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            for mode in [Mode::Mutate, Mode::Validate] {
                let expected = evaluate(plan, &whole.request, mode, None)
                    .unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
                let (_, decided) =
                    kadmit::server::decide(plan, &body, Ask::new(mode).options(options))
                        .unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
                assert_eq!(decided.allowed, expected.allowed, "{name} {mode:?}");
                assert_eq!(decided.patch, expected.patch, "{name} {mode:?}");
                assert_eq!(decided.warnings, expected.warnings, "{name} {mode:?}");
                assert_eq!(decided.denial, expected.denial, "{name} {mode:?}");
                assert_eq!(
                    decided.audit_annotations, expected.audit_annotations,
                    "{name} {mode:?}"
                );
                warned += decided.warnings.len();
            }
        }
    }
    assert!(warned > 0, "the managedFields rule warned about no fixture");
}

/// The bundled suites read reviews only from below their own directory
/// (a suite may not name files elsewhere), so `tests/suites/reviews/`
/// holds copies of the captures they use: byte for byte the same.
#[test]
fn the_suites_copies_of_the_captures_are_the_captures() {
    let copies = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/suites/reviews"));
    let mut compared = 0;
    for entry in std::fs::read_dir(&copies).expect("tests/suites/reviews") {
        let copy = entry.expect("an entry").path();
        let name = copy.file_name().expect("a file name");
        let capture = fixture_files()
            .into_iter()
            .find(|path| path.file_name() == Some(name))
            .unwrap_or_else(|| panic!("{} is not a capture", copy.display()));
        assert!(
            std::fs::read(&copy).expect("the copy")
                == std::fs::read(&capture).expect("the capture"),
            "{} differs from {}",
            copy.display(),
            capture.display()
        );
        compared += 1;
    }
    assert!(compared > 0, "no copies in {}", copies.display());
}
