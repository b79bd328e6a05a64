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

use kadmit::webhook::{self, Client, GenerateError, Layout, Options};
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
    match webhook::generate(&loaded, &options(case)) {
        Ok(configurations) => Ok(configurations.to_yaml().expect("configurations serialize")),
        Err(GenerateError::Rules(diagnostics)) => {
            let mut text = String::new();
            for diagnostic in diagnostics.iter() {
                writeln!(text, "{diagnostic}").unwrap();
            }
            Err(text.replace(&prefix, ""))
        }
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
    let yaml = match webhook::generate(&loaded, &options) {
        Ok(configurations) => configurations.to_yaml().unwrap(),
        Err(GenerateError::Rules(diagnostics)) => panic!("the bundled rules:\n{diagnostics}"),
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
