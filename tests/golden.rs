//! Golden tests of the bundled rules and of rule-file diagnostics.
//!
//! Each `tests/golden/<case>/case.yaml` names the bundled rule files to load
//! (`rules: [10-pod-security.yaml]`, or `all`), an input (`input:` a file in
//! the case directory, or `fixture:` one of the shared real-apiserver reviews,
//! used unchanged) and, for plain objects, the `operation` and `old` object.
//! `expected.json` is what `kadmit test --output json` prints for it.
//!
//! Each `tests/golden-diagnostics/<case>/` holds rule files and
//! `expected.txt`, the diagnostics `kadmit check` prints.
//!
//! Regenerate after an intended change with `KADMIT_BLESS=1 cargo test golden`,
//! then review the diff.

use std::path::{Path, PathBuf};

use kadmit::plan::compile;
use kadmit::review::Operation;
use kadmit::rules::{SourceFile, load_dir, load_files};
use kadmit::simulate::{ObjectOptions, read_input, simulate};
use serde::Deserialize;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/admission-reviews")
}

fn blessing() -> bool {
    std::env::var_os("KADMIT_BLESS").is_some()
}

fn case_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Compares `actual` with the file, or rewrites it when blessing.
fn compare(expected_path: &Path, actual: &str, failures: &mut Vec<String>) {
    if blessing() {
        std::fs::write(expected_path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(expected_path).unwrap_or_default();
    if expected != actual {
        let diff: Vec<String> = diff_lines(&expected, actual);
        failures.push(format!("{}:\n{}", expected_path.display(), diff.join("\n")));
    }
}

fn diff_lines(expected: &str, actual: &str) -> Vec<String> {
    let expected: Vec<&str> = expected.lines().collect();
    let actual: Vec<&str> = actual.lines().collect();
    let mut out = Vec::new();
    for i in 0..expected.len().max(actual.len()) {
        match (expected.get(i), actual.get(i)) {
            (Some(e), Some(a)) if e == a => {}
            (e, a) => {
                if let Some(e) = e {
                    out.push(format!("  line {}: - {e}", i + 1));
                }
                if let Some(a) = a {
                    out.push(format!("  line {}: + {a}", i + 1));
                }
            }
        }
        if out.len() > 40 {
            out.push("  ...".to_owned());
            break;
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    rules: Rules,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    fixture: Option<String>,
    #[serde(default)]
    operation: Option<Operation>,
    #[serde(default)]
    old: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Rules {
    All(String),
    Files(Vec<String>),
}

fn run_case(dir: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(dir.join("case.yaml")).map_err(|e| e.to_string())?;
    let case: Case = serde_yaml::from_str(&text).map_err(|e| format!("case.yaml: {e}"))?;
    let rules_dir = root().join("rules");
    let loaded = match &case.rules {
        Rules::All(all) if all == "all" => load_dir(&rules_dir).map_err(|e| e.to_string())?,
        Rules::All(other) => return Err(format!("rules: {other:?} is not `all` or a list")),
        Rules::Files(files) => load_files(
            files
                .iter()
                .map(|file| {
                    let path = rules_dir.join(file);
                    std::fs::read_to_string(&path)
                        .map(|text| SourceFile {
                            name: format!("rules/{file}"),
                            text,
                        })
                        .map_err(|e| format!("{}: {e}", path.display()))
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    let plan = compile(&loaded).map_err(|d| d.to_string())?;
    let input_path = match (&case.input, &case.fixture) {
        (Some(input), None) => dir.join(input),
        (None, Some(fixture)) => fixtures().join(fixture),
        _ => return Err("give exactly one of input and fixture".to_owned()),
    };
    let input = std::fs::read_to_string(&input_path)
        .map_err(|e| format!("{}: {e}", input_path.display()))?;
    let mut options = ObjectOptions {
        operation: case.operation.unwrap_or(Operation::Create),
        namespace: case.namespace.clone(),
        ..ObjectOptions::default()
    };
    if let Some(user) = case.user {
        options.user = user;
    }
    if let Some(old) = &case.old {
        let text = std::fs::read_to_string(dir.join(old)).map_err(|e| e.to_string())?;
        options.old = Some(serde_yaml::from_str(&text).map_err(|e| e.to_string())?);
    }
    let request = read_input(&input, &options).map_err(|e| e.to_string())?;
    let report = simulate(&plan, &request, None, false);
    Ok(serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n")
}

#[test]
fn golden_cases_of_the_bundled_rules() {
    let mut failures = Vec::new();
    let cases = case_dirs(&root().join("tests/golden"));
    assert!(
        cases.len() >= 20,
        "expected the golden cases, found {}",
        cases.len()
    );
    for dir in cases {
        match run_case(&dir) {
            Ok(actual) => compare(&dir.join("expected.json"), &actual, &mut failures),
            Err(error) => failures.push(format!("{}: {error}", dir.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden case(s) differ (KADMIT_BLESS=1 cargo test golden regenerates):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn golden_diagnostics_of_bad_rule_files() {
    let mut failures = Vec::new();
    let cases = case_dirs(&root().join("tests/golden-diagnostics"));
    assert!(!cases.is_empty());
    for dir in cases {
        let loaded = load_dir(&dir).unwrap();
        let actual = match compile(&loaded) {
            Ok(_) => "no problems\n".to_owned(),
            Err(diagnostics) => {
                // Paths relative to the case, so the file is the same on every machine.
                let prefix = format!("{}/", dir.display());
                diagnostics.to_string().replace(&prefix, "") + "\n"
            }
        };
        compare(&dir.join("expected.txt"), &actual, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
