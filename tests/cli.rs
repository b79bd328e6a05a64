//! The `kadmit` command line as users run it: exit codes and output of
//! `check`, `test` and `schema`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn kadmit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kadmit runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const FIXTURES: &str = "tests/fixtures/admission-reviews";

#[test]
fn check_accepts_the_bundled_rules() {
    let output = kadmit(&["check", "rules"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("7 rule sets, 21 rules, no problems"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn check_prints_every_problem_and_exits_1() {
    let output = kadmit(&[
        "check",
        "tests/golden-diagnostics/every-problem-of-every-file",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 9, "{stdout}");
    assert!(
        stdout.contains("a.yaml:17:11: spec.rules[1].deny[0].matches: invalid regex"),
        "{stdout}"
    );
    assert!(text(&output.stderr).contains("9 problem(s)"));
}

#[test]
fn check_of_a_missing_directory_exits_2() {
    let output = kadmit(&["check", "no-such-directory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("no-such-directory"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn test_reports_admitted_reviews_with_their_patch() {
    let review = format!("{FIXTURES}/create-pod.json");
    let output = kadmit(&["test", "rules", &review, "--output", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON report");
    assert_eq!(report["allowed"], true);
    assert_eq!(report["request"], "CREATE pods default/pod1");
    assert!(
        report["mutate"]["patch"]
            .as_array()
            .is_some_and(|ops| !ops.is_empty())
    );
    assert_eq!(report["object"]["metadata"]["labels"]["team"], "unassigned");
}

#[test]
fn test_exits_1_on_denial_and_explains_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: web, image: nginx}]\n",
    )
    .unwrap();
    let output = kadmit(&["test", "rules", pod.to_str().unwrap(), "--explain"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("DENIED (403 Forbidden)"), "{stdout}");
    assert!(
        stdout.contains("images/disallow-latest-tag: container web uses unpinned image nginx"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "explain: validate services/disallow-node-port: skipped: resource not matched"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("explain: mutate log-shipper/inject-sidecar: skipped: object labels do not match match.objectSelector"), "{stdout}");
}

#[test]
fn test_plain_objects_as_updates_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.yaml");
    let new = dir.path().join("new.yaml");
    std::fs::write(
        &old,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: a}}\n",
    )
    .unwrap();
    std::fs::write(
        &new,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: b}}\n",
    )
    .unwrap();
    let output = kadmit(&[
        "test",
        "rules",
        new.to_str().unwrap(),
        "--operation",
        "update",
        "--old",
        old.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["validate"]["status"]["message"],
        "ownership/immutable-team-label: label team cannot change from a to b"
    );
    let output = kadmit(&[
        "test",
        "rules",
        old.to_str().unwrap(),
        "--operation",
        "delete",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
}

#[test]
fn test_exits_2_on_unreadable_input_or_rules() {
    let output = kadmit(&["test", "rules", "no-such-file.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    let output = kadmit(&[
        "test",
        "tests/golden-diagnostics/yaml-syntax",
        &format!("{FIXTURES}/create-pod.json"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("s.yaml:9:7"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn schema_prints_the_committed_schema() {
    let output = kadmit(&["schema"]);
    assert_eq!(output.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/ruleset.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(printed, committed);
}
