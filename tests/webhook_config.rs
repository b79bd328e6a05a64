//! Golden tests of the webhook configurations generated for rule directories
//! (issue 6: `kadmit webhook-config`).
//!
//! Each case is a directory `tests/webhook_config/<case>/` holding `rules/`
//! (the rule files), an optional `options.yaml` (see [`CaseOptions`];
//! default: `--service kadmit/kadmit:443`, rule sets grouped) and the
//! expected output: `expected.yaml`, or `expected-error.txt` for rules that
//! must be refused.
//!
//! The bundled manifests are checked here too: `docker/k8s/base/webhooks.yaml`
//! must be what `kadmit webhook-config` prints for the bundled `rules/`, and
//! `docker/k8s/base/rules/` must hold exactly its rule files.
//!
//! To regenerate the expected files and the manifests after an intended
//! change, run `KADMIT_BLESS=1 cargo test --test tests webhook_config` (or
//! `scripts/sync-manifests.sh` for the manifests alone) and review the diff.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kadmit::webhook::{self, Client, Layout, Options};
use serde::Deserialize;

const CASES: &str = "tests/webhook_config";

/// `options.yaml` of a case: the command-line options it stands for.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseOptions {
    /// `--service`.
    service: Option<String>,
    /// `--url`.
    url: Option<String>,
    /// `grouped` (the default), `per-rule-set` or `single`.
    layout: Option<String>,
    /// `--ca-bundle`, relative to the case directory.
    ca_bundle: Option<String>,
    /// `--kadmit-namespace`.
    kadmit_namespace: Option<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blessing() -> bool {
    std::env::var_os("KADMIT_BLESS").is_some_and(|value| value == "1")
}

/// The options of a case, read from its `options.yaml`.
fn options(case: &Path) -> Options {
    let path = case.join("options.yaml");
    let given: CaseOptions = match std::fs::read_to_string(&path) {
        Ok(text) => serde_yaml::from_str(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display())),
        Err(_) => CaseOptions::default(),
    };
    let client = match (given.service, given.url) {
        (None, Some(url)) => Client::Url(url.parse().expect("a valid url in options.yaml")),
        (service, None) => Client::Service(
            service
                .as_deref()
                .unwrap_or("kadmit/kadmit:443")
                .parse()
                .expect("a valid service in options.yaml"),
        ),
        (Some(_), Some(_)) => panic!("{}: both service and url", path.display()),
    };
    let mut options = Options::new(client);
    options.layout = match given.layout.as_deref() {
        None | Some("grouped") => Layout::Grouped,
        Some("per-rule-set") => Layout::PerRuleSet,
        Some("single") => Layout::Single,
        Some(other) => panic!("{}: unknown layout {other:?}", path.display()),
    };
    if let Some(file) = given.ca_bundle {
        let pem = case.join(&file);
        options.ca_bundle_pem =
            Some(std::fs::read(&pem).unwrap_or_else(|e| panic!("{}: {e}", pem.display())));
    }
    if let Some(namespace) = given.kadmit_namespace {
        options.kadmit_namespace = namespace;
    }
    options
}

/// What `kadmit webhook-config` prints for a case: the YAML, or the errors
/// (with paths relative to the repository).
fn render(case: &Path) -> Result<String, String> {
    let loaded = kadmit::rules::load_dir(&case.join("rules")).map_err(|e| e.to_string())?;
    let prefix = format!("{}/", root().display());
    let plan = match kadmit::plan::compile(&loaded) {
        Ok(plan) => plan,
        Err(diagnostics) => {
            let mut text = String::new();
            for diagnostic in diagnostics.iter() {
                writeln!(text, "{diagnostic}").unwrap();
            }
            return Err(text.replace(&prefix, ""));
        }
    };
    match webhook::generate(&plan, &options(case)) {
        Ok(configurations) => Ok(configurations.to_yaml().expect("configurations serialize")),
        Err(error) => Err(format!("{error}\n")),
    }
}

fn case_dirs() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(root().join(CASES))
        .expect("tests/webhook_config exists")
        .map(|entry| entry.expect("readable case directory").path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    cases
}

/// Compares `actual` with the file at `path`, or rewrites it when blessing;
/// returns a description of the difference.
fn compare(path: &Path, actual: &str) -> Option<String> {
    if blessing() {
        std::fs::write(path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return None;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    (expected != actual).then(|| {
        format!(
            "{} differs (left: expected, right: actual):\n{}",
            path.display(),
            pretty_assertions::StrComparison::new(&expected, actual)
        )
    })
}

#[test]
fn golden_cases() {
    let cases = case_dirs();
    assert!(cases.len() >= 5, "the golden cases are missing");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let (actual, wanted, unwanted) = match render(case) {
            Ok(yaml) => (yaml, "expected.yaml", "expected-error.txt"),
            Err(error) => (error, "expected-error.txt", "expected.yaml"),
        };
        let stale = case.join(unwanted);
        if stale.exists() {
            if blessing() {
                std::fs::remove_file(&stale).unwrap();
            } else {
                failures.push(format!(
                    "case {name}: {unwanted} exists but the case produced {wanted}:\n{actual}"
                ));
                continue;
            }
        }
        if let Some(difference) = compare(&case.join(wanted), &actual) {
            failures.push(format!("case {name}: {difference}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change is intended: KADMIT_BLESS=1 cargo test --test tests webhook_config",
        failures.join("\n\n")
    );
}

/// Every generated configuration parses back, names its entries uniquely
/// with valid DNS subdomains, and never sends kube-system or kadmit's
/// namespace to kadmit.
#[test]
fn generated_configurations_are_well_formed() {
    for case in case_dirs() {
        let Ok(yaml) = render(&case) else { continue };
        // The cases are rules the server would serve, not just parse.
        let loaded = kadmit::rules::load_dir(&case.join("rules")).unwrap();
        if let Err(diagnostics) = kadmit::plan::compile(&loaded) {
            panic!(
                "{}: the rules do not compile:\n{diagnostics}",
                case.display()
            );
        }
        let documents: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|document| serde_json::Value::deserialize(document).expect("valid YAML"))
            .filter(|document| !document.is_null())
            .collect();
        assert!(!documents.is_empty(), "{}: no document", case.display());
        for document in documents {
            let mut names = std::collections::BTreeSet::new();
            for hook in document["webhooks"].as_array().expect("webhooks") {
                let name = hook["name"].as_str().expect("a name");
                assert!(names.insert(name.to_owned()), "duplicate webhook {name}");
                assert!(name.len() <= 253 && name.split('.').count() >= 3, "{name}");
                assert!(
                    name.split('.').all(|label| !label.is_empty()
                        && label.len() <= 63
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')),
                    "{name} is not a DNS subdomain"
                );
                // The API server's rule for a service path: every segment a
                // DNS subdomain (what a grouped path's `a.b` relies on).
                if let Some(path) = hook["clientConfig"]["service"]["path"].as_str() {
                    for segment in path.trim_start_matches('/').split('/') {
                        assert!(
                            !segment.is_empty()
                                && segment.len() <= 253
                                && segment.split('.').all(|label| !label.is_empty()
                                    && label.len() <= 63
                                    && !label.starts_with('-')
                                    && !label.ends_with('-')
                                    && label.bytes().all(|b| b.is_ascii_lowercase()
                                        || b.is_ascii_digit()
                                        || b == b'-')),
                            "{name}: path {path} has a segment that is not a DNS subdomain"
                        );
                    }
                }
                let exclusion = &hook["namespaceSelector"]["matchExpressions"][0];
                assert_eq!(exclusion["key"], "kubernetes.io/metadata.name", "{name}");
                assert_eq!(exclusion["operator"], "NotIn", "{name}");
                let excluded = exclusion["values"].as_array().unwrap();
                assert!(excluded.contains(&"kube-system".into()), "{name}");
                assert_eq!(hook["sideEffects"], "None");
                assert_eq!(hook["matchPolicy"], "Equivalent");
                let mutating = document["kind"] == "MutatingWebhookConfiguration";
                assert_eq!(hook["reinvocationPolicy"] == "IfNeeded", mutating, "{name}");
            }
        }
    }
}

/// The Service the bundled webhook configurations call (docker/k8s/base/service.yaml).
const BUNDLED_SERVICE: &str = "kadmit/kadmit:443";

/// Where docker/k8s/base finds the rule files for the ConfigMap kadmit-rules.
const BUNDLED_RULES_COPY: &str = "docker/k8s/base/rules";

/// `docker/k8s/base/webhooks.yaml` is the generated configuration for the
/// bundled rules, and `docker/k8s/base/rules/` holds exactly the bundled rule
/// files and a kustomization that makes the ConfigMap of them.
#[test]
fn bundled_manifests_match_the_bundled_rules() {
    let rules = root().join("rules");
    if !rules.is_dir() {
        // The bundled rules are written separately; until they exist there
        // is nothing to generate the manifests from.
        eprintln!("rules/ does not exist yet: the bundled manifests are not checked");
        return;
    }
    let mut failures = Vec::new();

    let files = rule_files(&rules);
    assert!(!files.is_empty(), "rules/ holds no rule file");
    let total_bytes: u64 = files
        .iter()
        .map(|name| std::fs::metadata(rules.join(name)).unwrap().len())
        .sum();
    // The API server stores at most 1 MiB per object.
    assert!(
        total_bytes < 1_000_000,
        "the bundled rules ({total_bytes} bytes) no longer fit one ConfigMap"
    );
    for name in &files {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)),
            "rules/{name}: a ConfigMap key allows only letters, digits, '-', '_' and '.'"
        );
    }

    let copy = root().join(BUNDLED_RULES_COPY);
    if blessing() {
        std::fs::create_dir_all(&copy).unwrap();
    }
    for name in &files {
        let text = std::fs::read_to_string(rules.join(name)).unwrap();
        failures.extend(compare(&copy.join(name), &text));
    }
    failures.extend(compare(
        &copy.join("kustomization.yaml"),
        &rules_kustomization(&files),
    ));
    // A rule file removed from rules/ must leave the ConfigMap too.
    for entry in std::fs::read_dir(&copy).into_iter().flatten() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "kustomization.yaml" && !files.contains(&name) {
            if blessing() {
                std::fs::remove_file(entry.path()).unwrap();
            } else {
                failures.push(format!("{BUNDLED_RULES_COPY}/{name} is not in rules/"));
            }
        }
    }

    let loaded = kadmit::rules::load_dir(&rules).unwrap();
    let options = Options::new(Client::Service(BUNDLED_SERVICE.parse().unwrap()));
    let plan = kadmit::plan::compile(&loaded).unwrap_or_else(|d| panic!("the bundled rules:\n{d}"));
    let yaml = match webhook::generate(&plan, &options) {
        Ok(configurations) => configurations.to_yaml().unwrap(),
        Err(error) => panic!("the bundled rules: {error}"),
    };
    let manifest = format!(
        "# kadmit webhook-config rules --service {BUNDLED_SERVICE}\n\
         # (regenerate with scripts/sync-manifests.sh)\n{yaml}"
    );
    failures.extend(compare(
        &root().join("docker/k8s/base/webhooks.yaml"),
        &manifest,
    ));
    assert!(
        failures.is_empty(),
        "{}\n\nThe bundled manifests no longer follow rules/: run scripts/sync-manifests.sh",
        failures.join("\n\n")
    );
}

/// The files kadmit reads from a rule directory: top-level `*.yaml` and
/// `*.yml`, not hidden, sorted.
fn rule_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
        })
        .collect();
    names.sort();
    names
}

fn rules_kustomization(files: &[String]) -> String {
    let mut text = String::from(
        "# The ConfigMap kadmit-rules, holding a copy of every file of the bundled\n\
         # rules/. Generated: edit rules/ and run scripts/sync-manifests.sh instead.\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         generatorOptions:\n\
         \x20 # A stable name: `kubectl apply` updates the mounted files in place and\n\
         \x20 # kadmit reloads them, rather than a new ConfigMap rolling out new pods.\n\
         \x20 disableNameSuffixHash: true\n\
         \x20 labels:\n\
         \x20   app.kubernetes.io/name: kadmit\n\
         configMapGenerator:\n\
         \x20 - name: kadmit-rules\n\
         \x20   files:\n",
    );
    for name in files {
        writeln!(text, "      - {name}").unwrap();
    }
    text
}

/// Rules for the `--diff` tests: a mutating set and a validating set whose
/// two rules match Pods and Services.
const DIFF_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: defaults}
spec:
  rules:
    - name: default-team
      match: {operations: [CREATE], resources: [pods]}
      mutate: [{setIfAbsent: {path: $.object.metadata.labels.team, value: none}}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: checks}
spec:
  rules:
    - name: no-latest
      match: {resources: [pods]}
      deny:
        - {path: "$.object.spec.containers[*].image", matches: ':latest$', message: pin the image}
    - name: no-node-port
      match: {resources: [services]}
      deny:
        - {path: $.object.spec.type, equals: NodePort, message: no NodePort}
"#;

/// What `kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations
/// -o yaml` prints for the configuration of [`DIFF_RULES`], server fields
/// and all; `RESOURCES`, `PATH` and `EXCLUDED` are replaced by each test.
const INSTALLED_LIST: &str = r#"apiVersion: v1
items:
- apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingWebhookConfiguration
  metadata:
    creationTimestamp: "2026-03-01T10:00:00Z"
    generation: 1
    labels: {app.kubernetes.io/name: kadmit}
    name: kadmit
    resourceVersion: "4242"
    uid: 0f3e0c1c-1111-4a5b-9c2d-000000000001
  webhooks:
  - admissionReviewVersions: [v1, v1beta1]
    clientConfig:
      service: {name: kadmit, namespace: kadmit, path: /mutate/defaults, port: 443}
    failurePolicy: Fail
    matchPolicy: Equivalent
    name: defaults.mutate.kadmit.dev
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kadmit, kube-system]}
    objectSelector: {}
    reinvocationPolicy: IfNeeded
    rules:
    - {apiGroups: [""], apiVersions: ["*"], operations: [CREATE], resources: [pods], scope: "*"}
    sideEffects: None
    timeoutSeconds: 5
- apiVersion: admissionregistration.k8s.io/v1
  kind: ValidatingWebhookConfiguration
  metadata:
    name: kadmit
    resourceVersion: "4243"
  webhooks:
  - admissionReviewVersions: [v1]
    clientConfig:
      service: {name: kadmit, namespace: kadmit, path: PATH}
    matchPolicy: Equivalent
    name: checks.validate.kadmit.dev
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [EXCLUDED]}
    objectSelector: {}
    rules:
    - {apiGroups: [""], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [RESOURCES], scope: "*"}
    sideEffects: None
    timeoutSeconds: 5
  - admissionReviewVersions: [v1]
    clientConfig:
      service: {name: other-webhook, namespace: elsewhere, path: /validate/checks}
    name: someone-else.example.com
    rules:
    - {apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}
    sideEffects: None
kind: List
metadata:
  resourceVersion: ""
"#;

/// Runs `kadmit webhook-config RULES --service kadmit/kadmit --diff
/// INSTALLED` on [`DIFF_RULES`] and `installed`: (exit code, stdout, stderr).
fn diff(installed: &str, extra: &[&str]) -> (i32, String, String) {
    diff_with(DIFF_RULES, installed, extra)
}

/// [`diff`] with rules `rules_text`.
fn diff_with(rules_text: &str, installed: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("rules.yaml"), rules_text).unwrap();
    let file = dir.path().join("installed.yaml");
    std::fs::write(&file, installed).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .arg("webhook-config")
        .arg(&rules)
        .args(["--service", "kadmit/kadmit", "--diff"])
        .arg(&file)
        .args(extra)
        .output()
        .expect("kadmit runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn installed(path: &str, resources: &str, excluded: &str) -> String {
    INSTALLED_LIST
        .replace("PATH", path)
        .replace("RESOURCES", resources)
        .replace("EXCLUDED", excluded)
}

/// Issue 14: what kadmit itself generates, in every layout, and the same as
/// kubectl lists it, have no differences from the rules.
#[test]
fn diff_of_the_generated_configuration_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(rules.join("rules.yaml"), DIFF_RULES).unwrap();
    for layout in [&[][..], &["--per-rule-set"], &["--single"]] {
        let generated = std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
            .arg("webhook-config")
            .arg(&rules)
            .args(["--service", "kadmit/kadmit:443"])
            .args(layout)
            .output()
            .unwrap();
        assert!(generated.status.success(), "{layout:?}");
        let (code, out, err) = diff(&String::from_utf8_lossy(&generated.stdout), &[]);
        assert_eq!(code, 0, "{layout:?}: {out}{err}");
        assert!(out.starts_with("no differences"), "{layout:?}: {out}");
    }
    let (code, out, err) = diff(
        &installed("/validate/checks", "pods, services", "kadmit, kube-system"),
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("no differences"), "{out}");
}

/// Issue 14: a resource missing from the installed entry is a rule that
/// looks active and enforces nothing: exit 1, naming the rule set, the rule
/// and the requests.
#[test]
fn diff_names_the_rule_whose_requests_are_not_sent() {
    let (code, out, err) = diff(
        &installed("/validate/checks", "pods", "kadmit, kube-system"),
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("not sent to kadmit"), "{out}");
    assert!(
        out.contains("checks rule no-node-port (validate): CREATE services, UPDATE services: no installed entry"),
        "{out}"
    );
    assert!(!out.contains("no-latest"), "{out}");

    // Sent, but not into every namespace the rule set covers.
    let (code, out, _) = diff(
        &installed(
            "/validate/checks",
            "pods, services",
            "kadmit, kube-system, team-a",
        ),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("checks rule no-node-port (validate): CREATE services, UPDATE services: entry kadmit/checks.validate.kadmit.dev has a namespaceSelector narrower than the rule set's (kubernetes.io/metadata.name NotIn [kadmit, kube-system, team-a])"),
        "{out}"
    );
    assert!(
        out.contains("checks rule no-latest (validate): CREATE pods, UPDATE pods: entry"),
        "{out}"
    );

    // A path naming a rule set the rules no longer have: kadmit answers 404.
    let (code, out, _) = diff(
        &installed(
            "/validate/checks.removed",
            "pods, services",
            "kadmit, kube-system",
        ),
        &["--output", "json"],
    );
    assert_eq!(code, 1, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let reason = json["notSent"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("names rule set \"removed\", which the rules do not have"),
        "{json}"
    );
    assert_eq!(
        json["kadmitEntries"], 2,
        "the other webhook is not kadmit's"
    );
}

/// Issue 14: what an entry sends that its rules do not match is reported,
/// and is no failure.
#[test]
fn diff_reports_what_is_sent_needlessly() {
    let (code, out, err) = diff(
        &installed(
            "/validate/checks",
            "pods, services, configmaps",
            "kadmit, kube-system",
        ),
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("sent needlessly: calls that cost latency for nothing\n  kadmit/checks.validate.kadmit.dev: CREATE configmaps, UPDATE configmaps: no validate rule of checks matches them"),
        "{out}"
    );
    assert!(!out.contains("not sent"), "{out}");
}

/// A file that is not webhook configurations, or is larger, deeper or more
/// aliased than a rule file may be, is refused with exit 2 and a reason.
#[test]
fn diff_refuses_unusable_installed_files() {
    let bomb = format!(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n{}",
        (1..=8)
            .map(|i| format!(
                "l{i}: &l{i} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                p = if i == 1 {
                    "a".to_owned()
                } else {
                    format!("l{}", i - 1)
                }
            ))
            .collect::<String>()
    );
    // 300 groups times 300 resources: 90,000 combinations from 8 KB.
    let names = |prefix: &str| {
        (0..300)
            .map(|i| format!("{prefix}{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let wide = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: wide}}\nwebhooks:\n- name: wide.example.com\n  clientConfig: {{service: {{namespace: kadmit, name: kadmit, path: /validate}}}}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n  rules:\n  - {{operations: [CREATE], apiVersions: [v1], apiGroups: [{}], resources: [{}]}}\n",
        names("g"),
        names("r")
    );
    let cases = [
        ("kind: [unclosed", "the file is not valid YAML"),
        (
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingWebhookConfiguration\n",
            "apiVersion Some(\"admissionregistration.k8s.io/v1beta1\") is not admissionregistration.k8s.io/v1",
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: admissionregistration.k8s.io/v1\n  kind: ValidatingWebhookConfiguration\n  webhooks: {not: a list}\n",
            "document 1, items[0]: invalid type: map, expected a sequence",
        ),
        (bomb.as_str(), "alias"),
        (
            wide.as_str(),
            "the webhook rules expand to more than 50000 combinations",
        ),
    ];
    for (text, needle) in cases {
        let (code, out, err) = diff(text, &[]);
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert!(out.is_empty(), "{out}");
    }
    let huge = format!("# {}\n", "x".repeat(1 << 20));
    let (code, _, err) = diff(&huge, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than the limit of 1048576"), "{err}");
}

/// An installed entry's `matchConditions` the rule set does not have (by
/// expression) may keep the API server from sending what the rules match:
/// reported, with exit 1. The rule set's own are no difference.
#[test]
fn diff_reports_match_conditions_the_rule_set_lacks() {
    let with_conditions = |conditions: &str| {
        installed("/validate/checks", "pods, services", "kadmit, kube-system").replace(
            "    name: checks.validate.kadmit.dev\n",
            &format!("    name: checks.validate.kadmit.dev\n    matchConditions: {conditions}\n"),
        )
    };
    let (code, out, err) = diff(
        &with_conditions("[{name: never, expression: \"false\"}]"),
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("checks rules no-latest, no-node-port (validate)")
            || (out.contains("checks rule no-latest (validate)")
                && out.contains("checks rule no-node-port (validate)")),
        "{out}"
    );
    assert!(
        out.contains("entry kadmit/checks.validate.kadmit.dev has matchConditions the rule set does not have (\"never\"), so the API server may not send them"),
        "{out}"
    );

    // The rule set's own condition, as generated, is none.
    let rules = DIFF_RULES.replace(
        "metadata: {name: checks}\nspec:\n",
        "metadata: {name: checks}\nspec:\n  matchConditions:\n    - {name: not-kadmit, expression: \"request.userInfo.username != 'kadmit'\"}\n",
    );
    let own =
        with_conditions("[{name: renamed, expression: \"request.userInfo.username != 'kadmit'\"}]");
    let (code, out, err) = diff_with(&rules, &own, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("no differences"), "{out}");
    // One more than the rule set's is reported.
    let more = with_conditions(
        "[{name: renamed, expression: \"request.userInfo.username != 'kadmit'\"}, {name: extra, expression: \"has(object.metadata.labels)\"}]",
    );
    let (code, out, _) = diff_with(&rules, &more, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not have (\"extra\")"), "{out}");
}

/// `matchPolicy: Exact` leaves out the same requests made through another
/// group or version of a resource; a mutating entry's `reinvocationPolicy:
/// Never` (the API's default) leaves what later webhooks add unedited.
/// Each is reported, with exit 1.
#[test]
fn diff_reports_match_and_reinvocation_policies() {
    let base = installed("/validate/checks", "pods, services", "kadmit, kube-system");
    // Only the validating entry's: the mutating one is listed first.
    let (head, tail) = base.split_at(base.find("ValidatingWebhookConfiguration").unwrap());
    let exact = format!(
        "{head}{}",
        tail.replacen("matchPolicy: Equivalent", "matchPolicy: Exact", 1)
    );
    let (code, out, err) = diff(&exact, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("entry kadmit/checks.validate.kadmit.dev has matchPolicy Exact, so the same requests made through another API group or version of the resource are not sent"),
        "{out}"
    );
    assert!(!out.contains("defaults rule"), "{out}");

    for (policy, shown) in [("reinvocationPolicy: Never", "Never"), ("", "Never")] {
        let never = base.replace("reinvocationPolicy: IfNeeded", policy);
        let (code, out, err) = diff(&never, &[]);
        assert_eq!(code, 1, "{policy:?}: {out}{err}");
        assert!(
            out.contains(&format!("defaults rule default-team (mutate): CREATE pods: entry kadmit/defaults.mutate.kadmit.dev has reinvocationPolicy {shown}, so what later webhooks and policies add to these objects is not sent back to kadmit")),
            "{policy:?}: {out}"
        );
    }

    // All at once, on one entry: each is named.
    let all = base
        .replace("matchPolicy: Equivalent\n    name: defaults", "matchPolicy: Exact\n    name: defaults")
        .replace("reinvocationPolicy: IfNeeded", "reinvocationPolicy: Never")
        .replace(
            "    name: defaults.mutate.kadmit.dev\n",
            "    name: defaults.mutate.kadmit.dev\n    matchConditions: [{name: never, expression: \"false\"}]\n",
        );
    let (code, out, _) = diff(&all, &[]);
    assert_eq!(code, 1, "{out}");
    for needle in [
        "has matchConditions the rule set does not have (\"never\")",
        "has matchPolicy Exact",
        "has reinvocationPolicy Never",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
}

/// The installed entries' `matchConditions` are read within bounds: the
/// API's 64 per entry, and each expression's length.
#[test]
fn diff_refuses_match_conditions_past_the_bounds() {
    let with_conditions = |conditions: String| {
        installed("/validate/checks", "pods, services", "kadmit, kube-system").replace(
            "    name: checks.validate.kadmit.dev\n",
            &format!("    name: checks.validate.kadmit.dev\n    matchConditions: [{conditions}]\n"),
        )
    };
    let many = (0..65)
        .map(|i| format!("{{name: c{i}, expression: \"true\"}}"))
        .collect::<Vec<_>>()
        .join(", ");
    let long = format!(
        "{{name: long, expression: \"{}true\"}}",
        "true && ".repeat(9_000)
    );
    for (conditions, needle) in [
        (
            many,
            "has 65 matchConditions, more than the 64 the API allows",
        ),
        (
            long,
            "matchConditions \"long\" has an expression of more than 65536 bytes",
        ),
    ] {
        let (code, out, err) = diff(&with_conditions(conditions), &[]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert!(out.is_empty(), "{out}");
    }
    // 65 entries of 64 each, as `kubectl get -o json` lists them: past the
    // 4,096 looked up in all.
    let entry = |i: usize| {
        serde_json::json!({
            "name": format!("e{i}.example.com"),
            "clientConfig": {"service": {"namespace": "kadmit", "name": "kadmit", "path": "/validate/checks"}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "matchConditions": (0..64)
                .map(|c| serde_json::json!({"name": format!("c{c}"), "expression": "true"}))
                .collect::<Vec<_>>(),
        })
    };
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [{
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "many"},
            "webhooks": (0..65).map(entry).collect::<Vec<_>>(),
        }],
    });
    let (code, out, err) = diff(&list.to_string(), &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("the webhooks have more than 4096 matchConditions in all"),
        "{err}"
    );
}
