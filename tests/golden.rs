//! Golden tests of rule-file diagnostics, and the bundled rules' suites.
//!
//! Each `tests/golden-diagnostics/<case>/` holds rule files and
//! `expected.txt`, the diagnostics `kadmit check` prints. Regenerate after an
//! intended change with `KADMIT_BLESS=1 cargo test golden`, then review the
//! diff.
//!
//! The bundled rules' cases are suites, `tests/suites/*.suite.yaml`, run here
//! through the library and by `.ci/run` through `kadmit verify`: one source
//! of truth for what the bundled rules do.

use std::path::{Path, PathBuf};

use kadmit::plan::{Fields, compile, compile_with, openapi};
use kadmit::rules::load_dir;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

/// The files in `dir`, sorted; none when it does not exist.
fn case_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
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

#[test]
fn the_bundled_rules_pass_their_suites() {
    let dir = root().join("tests/suites");
    let mut suites: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.to_string_lossy().ends_with(".suite.yaml"))
        .collect();
    suites.sort();
    let mut failures = Vec::new();
    let mut cases = 0;
    for path in &suites {
        let loaded = match kadmit::suite::load(path) {
            Ok(loaded) => loaded,
            Err(diagnostics) => {
                failures.push(diagnostics.to_string());
                continue;
            }
        };
        let compiled = match kadmit::suite::compile(&loaded) {
            Ok(compiled) => compiled,
            Err(diagnostics) => {
                failures.push(diagnostics.to_string());
                continue;
            }
        };
        for (index, case) in loaded.cases.iter().enumerate() {
            cases += 1;
            let result = kadmit::suite::run_case(&compiled, index, case);
            for mismatch in &result.mismatches {
                failures.push(format!("{}::{}: {mismatch}", loaded.name, case.name));
            }
        }
    }
    assert!(cases >= 35, "expected the bundled cases, found {cases}");
    assert!(
        failures.is_empty(),
        "{} problem(s) (`kadmit verify tests/suites` shows them too):\n{}",
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
        // A case's `openapi/` holds the files `kadmit check --openapi` gets.
        let mut fields: Option<Fields> = None;
        for file in case_files(&dir.join("openapi")) {
            let read = openapi::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            fields.get_or_insert_with(Fields::default).extend(read);
        }
        // Paths relative to the case, so the file is the same on every machine.
        let prefix = format!("{}/", dir.display());
        let actual = match compile_with(&loaded, fields.as_ref()) {
            Ok(plan) if plan.warnings().is_empty() => "no problems\n".to_owned(),
            Ok(plan) => plan.warnings().to_string().replace(&prefix, "") + "\n",
            Err(diagnostics) => diagnostics.to_string().replace(&prefix, "") + "\n",
        };
        compare(&dir.join("expected.txt"), &actual, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 12: a path no matched kind has is a warning. The bundled rules and
/// profiles, checked together (the restricted profile includes the baseline
/// rules), must have none: every path they read exists.
#[test]
fn bundled_rules_have_no_warnings() {
    let read = kadmit::rules::read_paths(&[root().join("rules"), root().join("profiles")])
        .expect("the bundled rules");
    assert!(read.diagnostics.is_empty(), "{}", read.diagnostics);
    let plan = compile(&kadmit::rules::load_files(read.files)).unwrap_or_else(|d| panic!("{d}"));
    assert!(plan.rule_sets().len() >= 8);
    assert!(plan.warnings().is_empty(), "{}", plan.warnings());
}
