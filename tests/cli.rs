//! The `kadmit` command line as users run it: exit codes and output of
//! `check`, `test`, `audit`, `replay`, `schema`, and `verify`'s colour
//! (the rest of `verify` is in `verify.rs`).

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
    // `verify` ends with the time it took, like `cargo test`.
    let timing = regex::Regex::new(r"finished in [0-9.]+s").unwrap();
    for args in [
        vec!["check", BAD_RULES],
        vec!["check", "rules"],
        vec!["test", "rules", review.as_str(), "--explain"],
        vec!["verify", "docs/examples/team-label.suite.yaml"],
        vec!["audit", "rules", FIXTURES],
        vec!["replay", "--rules", "rules", "--against", "rules", FIXTURES],
    ] {
        let piped = kadmit(&args);
        let never = kadmit(&[&args[..], &["--color", "never"]].concat());
        let always = kadmit(&[&args[..], &["--color", "always"]].concat());
        let untimed = |bytes: &[u8]| timing.replace(&text(bytes), "finished in Ns").into_owned();
        let (piped_out, never_out, always_out) = (
            untimed(&piped.stdout),
            untimed(&never.stdout),
            untimed(&always.stdout),
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
        text(&output.stdout).contains("7 rule sets, 24 rules, no problems"),
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

/// Issue 12: warnings are printed and pass, unless `--deny-warnings`.
#[test]
fn check_passes_with_warnings_unless_denied() {
    let dir = "tests/golden-diagnostics/paths-a-pod-cannot-have";
    let output = kadmit(&["check", dir]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(
            "warning: spec.rules[0].deny[0].path: `spec.container` is not a field of Pod (v1)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("6 rules, 5 warning(s)"), "{stdout}");
    let denied = kadmit(&["check", "--deny-warnings", dir]);
    assert_eq!(denied.status.code(), Some(1));
    assert!(text(&denied.stderr).contains("5 warning(s) (--deny-warnings)"));
    let clean = kadmit(&["check", "--deny-warnings", "rules"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean.stderr));
}

/// `webhook-config` says the same warnings on stderr, and still prints the
/// configuration.
#[test]
fn webhook_config_prints_path_warnings_and_the_configuration() {
    let dir = "tests/golden-diagnostics/paths-a-pod-cannot-have";
    let output = kadmit(&["webhook-config", dir, "--service", "kadmit/kadmit"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.matches("warning: ").count(), 5, "{stderr}");
    assert!(
        stderr.contains("`spec.container` is not a field of Pod (v1)"),
        "{stderr}"
    );
    assert!(text(&output.stdout).contains("kind: ValidatingWebhookConfiguration"));
}

/// `--openapi` gives custom resources the same check.
#[test]
fn check_reads_custom_resources_from_openapi_files() {
    let dir = "tests/golden-diagnostics/paths-of-a-custom-resource";
    let without = kadmit(&["check", dir]);
    assert!(
        text(&without.stdout).contains("no problems"),
        "{}",
        text(&without.stdout)
    );
    let with = kadmit(&[
        "check",
        "--openapi",
        &format!("{dir}/openapi/widgets.crd.yaml"),
        dir,
    ]);
    assert_eq!(with.status.code(), Some(0), "{}", text(&with.stderr));
    assert!(
        text(&with.stdout).contains("`spec.sise` is not a field of Widget (example.com/v1)"),
        "{}",
        text(&with.stdout)
    );
}

/// An `--openapi` file over the bounds is refused before it is parsed: too
/// large (checked from the file's size, nothing read), too deep, too many
/// aliases; each exits 2 with the reason, at once.
#[test]
fn check_refuses_openapi_files_over_the_bounds_fast() {
    let dir = tempfile::tempdir().unwrap();
    let large = dir.path().join("large.json");
    let file = std::fs::File::create(&large).unwrap();
    file.set_len(kadmit::plan::openapi::MAX_OPENAPI_BYTES + 1)
        .unwrap();
    let deep = dir.path().join("deep.json");
    std::fs::write(
        &deep,
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let aliases = dir.path().join("aliases.yaml");
    let bomb: String = (0..9)
        .map(|i| {
            let previous = if i == 0 {
                "[x]".to_owned()
            } else {
                format!("[{}]", vec![format!("*a{}", i - 1); 9].join(", "))
            };
            format!("a{i}: &a{i} {previous}\n")
        })
        .collect();
    std::fs::write(&aliases, bomb).unwrap();
    for (file, reason) in [
        (&large, "more than the 8388608 an OpenAPI file may have"),
        (&deep, "nested"),
        (&aliases, "alias"),
    ] {
        let started = std::time::Instant::now();
        let output = kadmit(&["check", "--openapi", file.to_str().unwrap(), "rules"]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot use an --openapi file"), "{stderr}");
        assert!(stderr.contains(reason), "{reason}: {stderr}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{stderr}"
        );
    }
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

/// The objects of the recorded CREATE and UPDATE reviews, as one
/// `kubectl get -o json` List in a temporary file.
fn fixture_objects_list() -> tempfile::NamedTempFile {
    let mut items = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| {
                    (name.starts_with("create-") || name.starts_with("update-"))
                        && name.ends_with(".json")
                })
        })
        .collect();
    names.sort();
    for path in names {
        let review: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        if review["request"]["object"].is_object() {
            items.push(review["request"]["object"].clone());
        }
    }
    assert!(items.len() > 10, "{} objects", items.len());
    let file = tempfile::NamedTempFile::new().unwrap();
    serde_json::to_writer(
        file.as_file(),
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}),
    )
    .unwrap();
    file
}

fn kadmit_with_stdin(args: &[&str], stdin: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::fs::File::open(stdin).unwrap())
        .output()
        .expect("kadmit runs")
}

#[test]
fn audit_groups_what_the_rules_say_of_existing_objects_by_rule() {
    let list = fixture_objects_list();
    let output = kadmit_with_stdin(&["audit", "rules", "-"], list.path());
    let stdout = text(&output.stdout);
    // The recorded Deployment has no app.kubernetes.io/name label.
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(stdout.starts_with("audited "), "{stdout}");
    assert!(
        stdout.contains("DENY required-labels/workloads-have-name-and-team:"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("Deployment default/web: Deployment web has no app.kubernetes.io/name label"),
        "{stdout}"
    );
    // Drift from the defaults, separately.
    assert!(stdout.contains("CHANGE pod-defaults/"), "{stdout}");
    // Denials come before changes.
    assert!(stdout.find("DENY") < stdout.find("CHANGE"), "{stdout}");
}

#[test]
fn audit_writes_json_lines_and_openreports() {
    let list = fixture_objects_list();
    let path = list.path().to_str().unwrap();
    let output = kadmit(&["audit", "rules", path, "--output", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let lines: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document per line"))
        .collect();
    let (summary, objects) = lines.split_last().expect("lines");
    let denied: Vec<&Value> = objects
        .iter()
        .filter(|line| {
            line["violations"]
                .as_array()
                .is_some_and(|v| v.iter().any(|f| f["outcome"] == "denied"))
        })
        .collect();
    assert_eq!(
        summary["summary"]["denied"].as_u64(),
        Some(denied.len() as u64),
        "{summary}"
    );
    assert_eq!(denied[0]["violations"][0]["ruleSet"], "required-labels");

    let output = kadmit(&["audit", "rules", path, "--output", "openreports"]);
    assert_eq!(output.status.code(), Some(1));
    let reports: Vec<Value> = serde_yaml::Deserializer::from_slice(&output.stdout)
        .map(|document| serde::Deserialize::deserialize(document).expect("a YAML document"))
        .collect();
    assert_eq!(
        reports.len(),
        objects.len(),
        "one report per object with findings"
    );
    for report in &reports {
        assert_eq!(report["apiVersion"], "openreports.io/v1alpha1");
        assert!(report["kind"] == "Report" || report["kind"] == "ClusterReport");
        let results = report["results"].as_array().expect("results");
        let fail = results.iter().filter(|r| r["result"] == "fail").count();
        assert_eq!(
            report["summary"]["fail"].as_u64(),
            Some(fail as u64),
            "{report}"
        );
        assert!(report["scope"]["kind"].is_string(), "{report}");
    }
    assert!(
        reports.iter().any(|r| r["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["result"] == "fail" && x["policy"] == "required-labels")),
        "no failing result"
    );
}

#[test]
fn audit_reads_manifest_directories_and_refuses_oversized_yaml() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("apps")).unwrap();
    std::fs::write(
        dir.path().join("apps/web.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx:1.27}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let output = kadmit(&["audit", "rules", dir.path().to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(stdout.starts_with("audited 2 objects"), "{stdout}");
    assert!(stdout.contains("Deployment shop/web"), "{stdout}");

    // YAML is read whole, so it is held to the rule files' bounds.
    let big = dir.path().join("big.yaml");
    std::fs::write(
        &big,
        format!("kind: ConfigMap\ndata: {{a: {}}}\n", "x".repeat(2 << 20)),
    )
    .unwrap();
    let output = kadmit(&["audit", "rules", big.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("big.yaml"), "{stderr}");
    assert!(stderr.contains("pass JSON"), "{stderr}");
}

/// A Pod the bundled Pod Security baseline denies (host network).
const HOST_NETWORK_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"host","namespace":"default"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"nginx:1.27"}]}}"#;

fn audit_of(input: &str) -> Output {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), input).unwrap();
    kadmit_with_stdin(&["audit", "rules", "-", "--output", "json"], file.path())
}

/// The summary line of `audit --output json`.
fn audit_summary(output: &Output) -> Value {
    text(&output.stdout)
        .lines()
        .last()
        .and_then(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["summary"].clone())
        .unwrap_or_else(|| panic!("no summary: {}", text(&output.stderr)))
}

/// An audit must not pass on what it did not judge: kubectl would apply
/// the objects, and a CI gate reads the exit code.
#[test]
fn audit_fails_on_what_it_could_not_judge_and_judges_what_kubectl_applies() {
    // An empty input (a `kubectl get` that failed upstream) is an error;
    // an empty List is a real answer.
    let output = audit_of("");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    assert!(
        text(&output.stderr).contains("holds no object"),
        "{}",
        text(&output.stderr)
    );
    let output = audit_of(r#"{"kind":"List","items":[]}"#);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(audit_summary(&output)["objects"], 0);

    // An object that cannot be judged fails the audit, as the webhook
    // would not admit it.
    let output = audit_of(r#"{"apiVersion":"v1","metadata":{"name":"no-kind"}}"#);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert_eq!(audit_summary(&output)["errors"], 1);

    // An AdmissionReview stands for its object: a CREATE without one is
    // not judged, so not passed; a DELETE has none to judge.
    let mut review: Value = serde_json::from_slice(
        &std::fs::read(Path::new(FIXTURES).join("create-pod.json")).unwrap(),
    )
    .unwrap();
    review["request"].as_object_mut().unwrap().remove("object");
    let output = audit_of(&review.to_string());
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert_eq!(audit_summary(&output)["errors"], 1);
    let delete = std::fs::read_to_string(Path::new(FIXTURES).join("delete-pod.json")).unwrap();
    let output = audit_of(&delete);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(audit_summary(&output)["objects"], 0);

    // A List inside a List: kubectl applies the inner items.
    let nested = format!(
        r#"{{"kind":"List","items":[{{"kind":"List","items":[{{"kind":"List","items":[{HOST_NETWORK_POD}]}}]}}]}}"#
    );
    let output = audit_of(&nested);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let summary = audit_summary(&output);
    assert_eq!(
        (summary["objects"].as_u64(), summary["denied"].as_u64()),
        (Some(1), Some(1))
    );

    // kubectl keeps the last of two `items`: which one is meant is asked,
    // never guessed.
    let twice = format!(r#"{{"kind":"List","items":[],"items":[{HOST_NETWORK_POD}]}}"#);
    let output = audit_of(&twice);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    assert!(
        text(&output.stderr).contains("second `items`"),
        "{}",
        text(&output.stderr)
    );

    // A directory with no manifests is an error, not a clean audit.
    let empty = tempfile::tempdir().unwrap();
    let output = kadmit(&["audit", "rules", empty.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    assert!(
        text(&output.stderr).contains("no *.json"),
        "{}",
        text(&output.stderr)
    );
}

/// A rules directory with no rule file judges nothing: every command that
/// reads one refuses it, as the server does on reload, rather than
/// reporting a clean check or an admitted object (a suite naming one:
/// `verify::a_suite_whose_rules_hold_no_rule_set_is_refused`).
#[test]
fn a_rules_directory_without_rule_sets_is_refused_by_every_command() {
    let empty = tempfile::tempdir().unwrap();
    // A file beside no rule file: a README, say.
    std::fs::write(empty.path().join("README.md"), "rules go here\n").unwrap();
    let rules = empty.path().to_str().unwrap();
    let pod = "tests/suites/images/denies-implicit-latest/pod.yaml";
    for (args, code) in [
        (vec!["check", rules], 1),
        (vec!["policies", rules], 1),
        (vec!["test", rules, pod], 2),
        (vec!["audit", rules, pod], 2),
    ] {
        let output = kadmit(&args);
        let stderr = text(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}{stderr}",
            text(&output.stdout)
        );
        assert!(stderr.contains("no rule sets"), "{args:?}: {stderr}");
    }
}

/// kubectl reads manifests as YAML 1.1, where `hostNetwork: yes` is true;
/// read as YAML 1.2 it would be the string "yes", which no deny rule on
/// `true` matches. Such a manifest is refused at the scalar, in `audit` and
/// in `test`, rather than judged as something the cluster never stores.
#[test]
fn yaml_manifests_are_refused_where_kubectl_would_read_them_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: host, namespace: default}\nspec:\n  hostNetwork: yes\n  containers: [{name: c, image: nginx:1.27}]\n",
    )
    .unwrap();
    for args in [
        vec!["audit", "rules", pod.to_str().unwrap()],
        vec!["test", "rules", pod.to_str().unwrap()],
    ] {
        let output = kadmit(&args);
        let stderr = text(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}{stderr}",
            text(&output.stdout)
        );
        assert!(stderr.contains("pod.yaml:5:16"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("the boolean true to kubectl"),
            "{args:?}: {stderr}"
        );
    }
    // Written as both read it, the Pod is judged, and denied.
    std::fs::write(
        &pod,
        std::fs::read_to_string(&pod)
            .unwrap()
            .replace(": yes", ": true"),
    )
    .unwrap();
    let output = kadmit(&["audit", "rules", pod.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
}

/// Below a directory: links to directories are not followed (as `kubectl
/// apply -R` does not), and said; a file whose name is not UTF-8 is read.
#[test]
fn audit_reads_directories_as_kubectl_applies_them() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("pod.json"), HOST_NETWORK_POD).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("linked")).unwrap();
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"odd\xff.json"));
    std::fs::write(&odd, HOST_NETWORK_POD.replace("\"host\"", "\"odd\"")).unwrap();
    let output = kadmit(&[
        "audit",
        "rules",
        dir.path().to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let summary = audit_summary(&output);
    assert_eq!(summary["objects"], 2, "{summary}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("linked: a link to a directory, not followed"),
        "{stderr}"
    );
}

/// Names and messages from the input reach a terminal or CI log with their
/// control characters escaped and cut: a carriage return or an escape
/// sequence could otherwise overwrite the real lines.
#[test]
fn audit_and_replay_escape_what_the_input_names() {
    let forged = "a\r\u{1b}[2Kaudited 0 objects";
    let pod: Value = serde_json::from_str(HOST_NETWORK_POD).unwrap();
    let mut named = pod.clone();
    named["metadata"]["name"] = Value::from(forged);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), named.to_string()).unwrap();
    let output = kadmit_with_stdin(&["audit", "rules", "-"], file.path());
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\r'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("a\\u{d}\\u{1b}[2Kaudited 0 objects"),
        "{stdout}"
    );

    let review: Value = serde_json::from_slice(
        &std::fs::read(Path::new(FIXTURES).join("create-pod.json")).unwrap(),
    )
    .unwrap();
    let mut review = review;
    review["request"]["uid"] = Value::from(format!("{forged}{}", "u".repeat(1 << 20)));
    review["request"]["object"]["spec"]["hostNetwork"] = Value::from(true);
    let recording = jsonl_file();
    std::fs::write(recording.path(), review.to_string() + "\n").unwrap();
    // No rules before, the bundled rules after: the host-network Pod is
    // newly denied, and its change is shown.
    let none = tempfile::tempdir().unwrap();
    let output = kadmit(&[
        "replay",
        "--rules",
        "rules",
        "--against",
        none.path().to_str().unwrap(),
        recording.path().to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\r'),
        "{:?}",
        &stdout[..200]
    );
    assert!(stdout.len() < 16 << 10, "{} bytes", stdout.len());
}

/// A recording made for a rule set that neither rules version has would
/// be the same error on both sides, which compares as "no change".
#[test]
fn replay_refuses_reviews_recorded_for_a_rule_set_it_cannot_find() {
    let mut review: Value = serde_json::from_slice(
        &std::fs::read(Path::new(FIXTURES).join("create-pod.json")).unwrap(),
    )
    .unwrap();
    review["kadmit"] = serde_json::json!({"endpoint": "validate", "ruleSet": "no-such-set"});
    let recording = jsonl_file();
    std::fs::write(recording.path(), review.to_string() + "\n").unwrap();
    let new = rules_with_a_new_deny();
    let output = kadmit(&[
        "replay",
        "--rules",
        new.path().to_str().unwrap(),
        "--against",
        "rules",
        recording.path().to_str().unwrap(),
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}{stderr}",
        text(&output.stdout)
    );
    assert!(
        stderr.contains("a rule set the rules replayed do not have"),
        "{stderr}"
    );
}

#[test]
fn replay_does_not_compare_a_recording_on_what_recording_left_out() {
    // What serve --record keeps of a Secret: its values blanked.
    let mut review: Value = serde_json::from_slice(
        &std::fs::read(Path::new(FIXTURES).join("create-configmap.json")).unwrap(),
    )
    .unwrap();
    review["request"]["kind"]["kind"] = "Secret".into();
    review["request"]["resource"]["resource"] = "secrets".into();
    review["request"]["object"]["kind"] = "Secret".into();
    review["request"]["object"]["data"] = serde_json::json!({"password": ""});
    review["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    review["kadmit"] = serde_json::json!({"endpoint": "validate"});
    let recording = jsonl_file();
    std::fs::write(recording.path(), review.to_string() + "\n").unwrap();
    let new = tempfile::tempdir().unwrap();
    std::fs::write(
        new.path().join("secrets.yaml"),
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: secrets\nspec:\n  rules:\n    - name: no-empty-password\n      match: {resources: [secrets]}\n      deny:\n        - {path: $.object.data.password, equals: '', message: empty password}\n",
    )
    .unwrap();
    let replay = |review: &Value| {
        std::fs::write(recording.path(), review.to_string() + "\n").unwrap();
        kadmit(&[
            "replay",
            "--rules",
            new.path().to_str().unwrap(),
            "--against",
            "rules",
            recording.path().to_str().unwrap(),
        ])
    };
    // Judged on the blanked value, every recorded Secret would be denied.
    let output = replay(&review);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stdout.contains("0 changed") && stdout.contains("1 not compared"),
        "{stdout}"
    );
    assert!(
        stderr.contains("recorded without data (a recording leaves it out)"),
        "{stderr}"
    );
    // A review as the API server sent it (no `kadmit` key) is compared.
    review.as_object_mut().unwrap().remove("kadmit");
    let output = replay(&review);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("1 changed"), "{stdout}");
}

/// An empty `.jsonl` file for a recording to replay.
fn jsonl_file() -> tempfile::NamedTempFile {
    tempfile::Builder::new()
        .suffix(".jsonl")
        .tempfile()
        .unwrap()
}

/// The bundled rules plus one that denies ConfigMaps without an owner.
fn rules_with_a_new_deny() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir("rules").unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join("90-owners.yaml"),
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: owners\nspec:\n  rules:\n    - name: configmaps-have-owner\n      match: {resources: [configmaps], operations: [CREATE]}\n      deny:\n        - path: $.object.metadata.labels.owner\n          exists: false\n          message: ConfigMap has no owner label\n",
    )
    .unwrap();
    dir
}

#[test]
fn replay_prints_every_decision_new_rules_change() {
    let new = rules_with_a_new_deny();
    let output = kadmit(&[
        "replay",
        "--rules",
        new.path().to_str().unwrap(),
        "--against",
        "rules",
        FIXTURES,
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        text(&output.stderr)
    );
    let recorded_configmap_creates = std::fs::read_dir(FIXTURES)
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            let name = name.to_str().unwrap();
            name.starts_with("create-configmap") && name.ends_with(".json")
        })
        .count();
    assert!(recorded_configmap_creates >= 2);
    let changed = stdout
        .lines()
        .filter(|line| line.starts_with("CHANGED "))
        .count();
    assert_eq!(changed, recorded_configmap_creates, "{stdout}");
    assert!(
        stdout.contains("CREATE configmaps default/cfg1: admitted → denied"),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied owners/configmaps-have-owner: ConfigMap has no owner label"),
        "{stdout}"
    );
    assert!(
        stdout.lines().last().unwrap().contains(&format!(
            "{recorded_configmap_creates} changed ({recorded_configmap_creates} admitted → denied"
        )),
        "{stdout}"
    );

    // JSON lines: one per change, then the summary.
    let output = kadmit(&[
        "replay",
        "--rules",
        new.path().to_str().unwrap(),
        "--against",
        "rules",
        FIXTURES,
        "--output",
        "json",
    ]);
    let lines: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let (summary, changes) = lines.split_last().unwrap();
    assert_eq!(summary["summary"]["changed"], changes.len());
    assert_eq!(changes[0]["before"]["allowed"], true);
    assert_eq!(changes[0]["after"]["allowed"], false);
}

#[test]
fn replay_of_unchanged_rules_changes_nothing_and_refuses_to_compare_with_nothing() {
    let output = kadmit(&["replay", "--rules", "rules", "--against", "rules", FIXTURES]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    assert!(
        text(&output.stdout).contains(" 0 changed"),
        "{}",
        text(&output.stdout)
    );

    // The recorded reviews carry no response: without --against there is
    // nothing to compare with, which is an error, not a pass.
    let output = kadmit(&["replay", "--rules", "rules", FIXTURES]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--against"), "{stderr}");
    // The inputs that could not be compared are named: the first ten of
    // the 33 recorded reviews.
    assert!(
        stderr.contains("connect-pod-attach.json: value 1: no recorded response"),
        "{stderr}"
    );
    let named = stderr
        .lines()
        .filter(|line| line.contains(": value "))
        .count();
    assert_eq!(named, 10, "{stderr}");
}

/// `serve --record` rotates `reviews.jsonl` to `reviews.jsonl.1` … `.3`:
/// replay reads them all. A directory with nothing to replay, or with a
/// FIFO where a recording would be, is an error, not a pass.
#[test]
fn replay_reads_rotated_recordings_and_refuses_to_replay_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |name: &str| {
        let review: Value =
            serde_json::from_slice(&std::fs::read(Path::new(FIXTURES).join(name)).unwrap())
                .unwrap();
        review.to_string() + "\n"
    };
    for (file, fixture_name) in [
        ("reviews.jsonl", "create-pod.json"),
        ("reviews.jsonl.1", "create-configmap.json"),
        ("reviews.jsonl.3", "delete-pod.json"),
        // Not a rotation: left alone.
        ("reviews.jsonl.old", "create-pod.json"),
    ] {
        std::fs::write(dir.path().join(file), fixture(fixture_name)).unwrap();
    }
    let path = dir.path().to_str().unwrap();
    let output = kadmit(&["replay", "--rules", "rules", "--against", "rules", path]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("replayed 3 reviews"),
        "{}",
        text(&output.stdout)
    );

    let empty = tempfile::tempdir().unwrap();
    let output = kadmit(&[
        "replay",
        "--rules",
        "rules",
        "--against",
        "rules",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("no reviews in"),
        "{}",
        text(&output.stderr)
    );

    let fifo = dir.path().join("stuck.jsonl");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string naming a path in a directory of our own.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let output = kadmit(&["replay", "--rules", "rules", "--against", "rules", path]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("not a regular file"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn serve_refuses_out_of_range_shutdown_recording_connection_and_timeout_bounds() {
    for (flag, value) in [
        ("--shutdown-delay-secs", "3601"),
        ("--shutdown-timeout-secs", "3601"),
        ("--record-max-bytes", "4095"),
        // Below 4 a probe and a scrape could evict each other; above, the
        // operations port could hold gigabytes of request heads.
        ("--ops-max-connections", "3"),
        ("--ops-max-connections", "65537"),
        // No stream at all, or more handlers than memory could hold.
        ("--h2-max-open-streams", "0"),
        ("--h2-max-open-streams", "1048577"),
        // 0 answers 408 to a body not read at once; past an hour, a
        // deadline that overflows.
        ("--request-timeout-secs", "0"),
        ("--request-timeout-secs", "9300000000000000000"),
        // A few milliseconds end every handshake while /readyz says ready.
        ("--tls-handshake-timeout-ms", "0"),
        ("--tls-handshake-timeout-ms", "2"),
        ("--tls-handshake-timeout-ms", "60001"),
        // The first load waits one debounce before any listener opens.
        ("--watch-debounce-ms", "0"),
        ("--watch-debounce-ms", "60000"),
    ] {
        // Refused while parsing the command line, before anything binds.
        let output = kadmit(&["serve", flag, value]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(flag) && stderr.contains("is not in"),
            "{flag} {value}: {stderr}"
        );
    }
}

/// `kadmit policies`: without `--partial` a rule with no in-tree form
/// fails the command naming it; with it, the others are written, each
/// document an API object the Kubernetes types read back (the mutating
/// ones, which `k8s-openapi` has no types for yet, are checked by
/// `scripts/validate-manifests.sh`), or one file per rule with
/// `--output-dir`.
#[test]
fn policies_writes_admission_policies_and_names_what_stays() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let strict = kadmit(&["policies", "rules"]);
    assert_eq!(strict.status.code(), Some(1));
    let stderr = text(&strict.stderr);
    assert!(
        stderr.contains("images/allowed-registries: not translated: image reference parts"),
        "{stderr}"
    );
    assert!(stderr.contains("pass --partial"), "{stderr}");
    assert!(strict.stdout.is_empty());

    let partial = kadmit(&["policies", "rules", "--partial"]);
    assert_eq!(partial.status.code(), Some(0), "{}", text(&partial.stderr));
    let stdout = text(&partial.stdout);
    let (mut policies, mut bindings) = (0, 0);
    let (mut mutating, mut mutating_bindings) = (0, 0);
    for document in serde_yaml::Deserializer::from_str(&stdout) {
        let value = <serde_yaml::Value as serde::Deserialize>::deserialize(document).expect("YAML");
        match value["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let policy: ValidatingAdmissionPolicy =
                    serde_yaml::from_value(value).expect("a ValidatingAdmissionPolicy");
                assert!(
                    !policy
                        .spec
                        .and_then(|s| s.validations)
                        .unwrap_or_default()
                        .is_empty()
                );
                policies += 1;
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let binding: ValidatingAdmissionPolicyBinding =
                    serde_yaml::from_value(value).expect("a binding");
                assert_eq!(binding.spec.validation_actions.len(), 1);
                bindings += 1;
            }
            Some("MutatingAdmissionPolicy") => {
                let mutations = value["spec"]["mutations"].as_sequence().expect("mutations");
                assert!(!mutations.is_empty());
                for mutation in mutations {
                    assert_eq!(mutation["patchType"].as_str(), Some("JSONPatch"));
                    assert!(mutation["jsonPatch"]["expression"].as_str().is_some());
                }
                assert_eq!(
                    value["spec"]["reinvocationPolicy"].as_str(),
                    Some("IfNeeded")
                );
                mutating += 1;
            }
            Some("MutatingAdmissionPolicyBinding") => {
                assert_eq!(value["spec"]["policyName"], value["metadata"]["name"]);
                mutating_bindings += 1;
            }
            other => panic!("unexpected document {other:?}"),
        }
    }
    assert!(
        policies >= 10 && policies == bindings,
        "{policies} policies, {bindings} bindings"
    );
    // The four mutating rules; none of the bundled rules both denies and
    // mutates.
    assert_eq!((mutating, mutating_bindings), (4, 4));
    assert!(stdout.contains("# not translated, stays in the webhook: images/allowed-registries"));

    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("static");
    let written = kadmit(&[
        "policies",
        "rules",
        "--partial",
        "--output-dir",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(written.status.code(), Some(0), "{}", text(&written.stderr));
    let files = std::fs::read_dir(&out).expect("output dir").count();
    assert_eq!(files, policies + mutating);
    assert!(
        out.join("pod-security-baseline.privileged.kadmit.dev.yaml")
            .is_file()
    );
    assert!(
        out.join("log-shipper.inject-sidecar.kadmit.dev.yaml")
            .is_file()
    );
}

/// `kadmit test` reads its inputs under the bounds of a request (3 MiB)
/// and, for YAML, of rule files: an alias bomb is refused before it is
/// expanded, a file too large before it is read.
#[test]
fn test_refuses_inputs_over_the_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let large = dir.path().join("large.json");
    std::fs::File::create(&large)
        .unwrap()
        .set_len(kadmit::suite::MAX_OBJECT_BYTES + 1)
        .unwrap();
    let mut laughs = String::from("l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n");
    for level in 1..=9 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        laughs.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
    }
    let bomb = dir.path().join("bomb.yaml");
    std::fs::write(&bomb, laughs).unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: web, image: nginx}]\n",
    )
    .unwrap();
    for (input, old, reason) in [
        (
            &large,
            false,
            "more than the 3145728 (3 MiB) the API server accepts",
        ),
        (&bomb, false, "bomb.yaml:6:"),
        (&bomb, true, "the file expands to more than 250000 nodes"),
    ] {
        let pod = pod.to_str().unwrap();
        let args: Vec<&str> = if old {
            vec![
                "test",
                "rules",
                pod,
                "--operation",
                "update",
                "--old",
                input.to_str().unwrap(),
            ]
        } else {
            vec!["test", "rules", input.to_str().unwrap()]
        };
        let output = kadmit(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(reason), "{reason}: {stderr}");
    }
}

/// `kadmit test` and `replay` show what the input holds (names, rule
/// messages quoting them, decode errors quoting the review) with control
/// characters escaped: a newline or an escape sequence cannot forge an
/// `ALLOWED` line.
#[test]
fn test_and_replay_escape_what_the_input_holds() {
    let dir = tempfile::tempdir().unwrap();
    let forged = "c\r\u{1b}[2KALLOWED\n\u{1b}[8m";
    let mut pod: Value = serde_json::from_str(HOST_NETWORK_POD).unwrap();
    pod["metadata"]["name"] = Value::from("p\u{1b}[1A");
    pod["spec"]["containers"][0]["name"] = Value::from(forged);
    pod["spec"]["containers"][0]["securityContext"] = serde_json::json!({"privileged": true});
    let input = dir.path().join("pod.json");
    std::fs::write(&input, pod.to_string()).unwrap();
    let output = kadmit(&["test", "rules", input.to_str().unwrap(), "--explain"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\r'),
        "{stdout:?}"
    );
    assert!(
        !stdout.lines().any(|line| line.starts_with("ALLOWED")),
        "{stdout}"
    );
    assert!(
        stdout.contains(": CREATE pods default/p\\u{1b}[1A\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  pod-security-baseline/privileged: container c\\u{d}\\u{1b}[2KALLOWED\\u{a}\\u{1b}[8m must not"
        ),
        "{stdout}"
    );

    let mut review: Value = serde_json::from_slice(
        &std::fs::read(Path::new(FIXTURES).join("create-pod.json")).unwrap(),
    )
    .unwrap();
    review["request"]["operation"] = Value::from("CREATE\n\u{1b}[2Kreplayed 1 reviews: 0 changed");
    let recording = dir.path().join("r.jsonl");
    std::fs::write(&recording, review.to_string() + "\n").unwrap();
    let output = kadmit(&[
        "replay",
        "--rules",
        "rules",
        "--against",
        "rules",
        recording.to_str().unwrap(),
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.lines().any(|line| line.starts_with("replayed")),
        "{stderr:?}"
    );
    assert!(
        stderr.contains("CREATE\\u{a}\\u{1b}[2Kreplayed 1 reviews"),
        "{stderr}"
    );
}

/// What the webhook would refuse (413: more than 64 MiB once parsed) is
/// refused offline too, with audit's words, before it is parsed: `kadmit
/// test` never says ALLOWED of a review the server would not decide. An
/// object and its old object count together, as in one review. A List is
/// refused, pointing to `kadmit audit`.
#[test]
fn test_refuses_what_the_webhook_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let maps = |count: usize| {
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"x\":[{}]}}",
            vec!["{\"a\":0}"; count].join(",")
        )
    };
    let big = dir.path().join("big.json");
    std::fs::write(&big, maps(370_000)).unwrap();
    let checked = crate::adversarial::support::measured(
        &["test".as_ref(), "rules".as_ref(), big.as_os_str()],
        None,
        crate::server::harness::DEADLINE,
    );
    assert_eq!(checked.code, Some(2), "{}", checked.stderr);
    assert!(
        checked.stderr.contains(
            "big.json: the object would take about 285 MiB once parsed, more than the 64 MiB \
             one object may take (the webhook denies such a review where a rule that can deny applies)"
        ),
        "{}",
        checked.stderr
    );
    assert!(!checked.stdout.contains("ALLOWED"), "{}", checked.stdout);
    let peak = checked.peak_rss_kib;
    assert!(peak < 128 * 1024, "kadmit test peaked at {peak} KiB");

    // Each half within the bound, both over it.
    let half = dir.path().join("half.json");
    std::fs::write(&half, maps(45_000)).unwrap();
    let half = half.to_str().unwrap();
    let output = kadmit(&["test", "rules", half]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let output = kadmit(&[
        "test",
        "rules",
        half,
        "--operation",
        "update",
        "--old",
        half,
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("more than the 64 MiB one object may take"),
        "{stderr}"
    );

    let list = dir.path().join("list.yaml");
    std::fs::write(
        &list,
        format!("apiVersion: v1\nkind: List\nitems:\n- {HOST_NETWORK_POD}\n"),
    )
    .unwrap();
    let output = kadmit(&["test", "rules", list.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "list.yaml: a list of objects, not one object: judge its items with `kadmit audit`, \
             or give each item as an input of its own"
        ),
        "{stderr}"
    );
}
