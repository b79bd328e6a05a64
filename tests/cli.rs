//! The `kadmit` command line as users run it: exit codes and output of
//! `check`, `test` and `schema`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn kadmit(args: &[&str]) -> Output {
    kadmit_with_env(args, &[])
}

/// Runs kadmit with its output piped, without the colour variables of the
/// caller's environment, plus `env`.
fn kadmit_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("KADMIT_COLOR")
        .envs(env.iter().copied())
        .output()
        .expect("kadmit runs")
}

/// `text` without its `ESC [ ... m` sequences.
fn strip_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

const BAD_RULES: &str = "tests/golden-diagnostics/every-problem-of-every-file";

#[test]
fn piped_output_has_no_colour_and_always_adds_only_escape_codes() {
    let review = format!("{FIXTURES}/create-pod.json");
    for args in [
        vec!["check", BAD_RULES],
        vec!["check", "rules"],
        vec!["test", "rules", review.as_str(), "--explain"],
    ] {
        let piped = kadmit(&args);
        let never = kadmit(&[&args[..], &["--color", "never"]].concat());
        let always = kadmit(&[&args[..], &["--color", "always"]].concat());
        let (piped_out, never_out, always_out) = (
            text(&piped.stdout),
            text(&never.stdout),
            text(&always.stdout),
        );
        assert!(!piped_out.is_empty(), "{args:?}");
        assert!(!piped_out.contains('\x1b'), "{args:?}: {piped_out}");
        assert!(!text(&piped.stderr).contains('\x1b'), "{args:?}");
        assert_eq!(never_out, piped_out, "{args:?}");
        assert!(always_out.contains("\x1b["), "{args:?}: {always_out}");
        assert_eq!(strip_escapes(&always_out), piped_out, "{args:?}");
        assert_eq!(always.status.code(), piped.status.code(), "{args:?}");
    }
}

#[test]
fn no_color_and_clicolor_force_steer_auto_but_not_an_explicit_choice() {
    let args = ["check", BAD_RULES];
    let coloured = |output: &Output| text(&output.stdout).contains('\x1b');
    assert!(coloured(&kadmit_with_env(
        &args,
        &[("CLICOLOR_FORCE", "1")]
    )));
    assert!(!coloured(&kadmit_with_env(
        &args,
        &[("CLICOLOR_FORCE", "0")]
    )));
    assert!(!coloured(&kadmit_with_env(
        &args,
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]
    )));
    let always = [&args[..], &["--color", "always"]].concat();
    assert!(coloured(&kadmit_with_env(&always, &[("NO_COLOR", "1")])));
    let never = [&args[..], &["--color", "never"]].concat();
    assert!(!coloured(&kadmit_with_env(
        &never,
        &[("CLICOLOR_FORCE", "1")]
    )));
    assert!(coloured(&kadmit_with_env(
        &args,
        &[("KADMIT_COLOR", "always")]
    )));
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
        text(&output.stdout).contains("7 rule sets, 14 rules, no problems"),
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
