//! `kadmit verify` through the binary: the bundled suites, a failing suite's
//! report and diffs, the JUnit report read back as XML, malformed suites
//! with their positions, and the bounds a suite file cannot pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn kadmit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("KADMIT_COLOR")
        .output()
        .expect("kadmit runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A suite over the bundled rules (named by absolute path, as a suite in a
/// temporary directory must), with `cases` as its `cases:` block.
fn suite(cases: &str) -> String {
    format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: Suite\nmetadata:\n  name: demo\nrules: [{}]\ncases:\n{cases}",
        repo("rules").display()
    )
}

const PRIVILEGED_POD: &str = "tests/suites/pod-security/denies-privileged-init-container/pod.json";

/// Three cases, two of which fail: a privileged Pod expected admitted by the
/// wrong rule, and a Pod the defaults change expected unchanged.
fn failing_suite() -> String {
    suite(&format!(
        r#"  - name: wrong-rule
    objectFile: {}
    expect:
      allowed: true
      denies: [pod-security-baseline/host-ports]
      messages: ["must not set securityContext.privileged=true", "no such text"]
  - name: "defaults <&> \"quoted\""
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: web, labels: {{app.kubernetes.io/name: web, team: a}}}}
      spec:
        containers: [{{name: web, image: "registry.example/web:1.0"}}]
    expect:
      patch: []
  - name: a-config-map
    object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: settings}}}}
    expect: {{allowed: true, denies: [], warns: []}}
"#,
        repo(PRIVILEGED_POD).display()
    ))
}

#[test]
fn the_bundled_suites_pass() {
    let output = kadmit(&["verify", "tests/suites"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    let cases = stdout
        .lines()
        .filter(|line| line.starts_with("test ") && line.ends_with(" ... ok"))
        .count();
    assert!(cases >= 35, "{stdout}");
    assert!(
        stdout.starts_with(&format!("running {cases} cases\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains("test pod-security::denies-privileged-init-container ... ok\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "\ntest result: ok. {cases} passed; 0 failed; finished in "
        )),
        "{stdout}"
    );
}

#[test]
fn a_failing_suite_shows_each_failure_with_a_diff_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.suite.yaml");
    std::fs::write(&path, failing_suite()).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    for expected in [
        "running 3 cases\n",
        "test demo::wrong-rule ... FAILED\n",
        "test demo::defaults <&> \"quoted\" ... FAILED\n",
        "test demo::a-config-map ... ok\n",
        &format!("---- demo::wrong-rule ({}:7:5) ----\n", path.display()),
        "expected the request to be admitted, but it was denied\n",
        "denies differ\n--- expected\n+++ actual\n@@ -1 +1 @@\n-pod-security-baseline/host-ports\n+pod-security-baseline/privileged\n",
        // Only the text that is missing is reported missing.
        "1 of the expected messages did not appear\nmissing:\n  - no such text\n",
        "the patch differs\n--- expected\n+++ actual\n",
        "-[]\n+- op: add\n+  path: /spec/securityContext\n",
        "failures:\n    demo::wrong-rule\n    demo::defaults <&> \"quoted\"\n",
        "\ntest result: FAILED. 1 passed; 2 failed; finished in ",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // --filter runs a subset and counts the rest.
    let output = kadmit(&["verify", path.to_str().unwrap(), "--filter", "config-map"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("test result: ok. 1 passed; 0 failed; 2 filtered out; finished in "),
        "{stdout}"
    );
}

#[test]
fn the_junit_report_is_xml_a_ci_system_can_read() {
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("demo.suite.yaml");
    std::fs::write(&failing, failing_suite()).unwrap();
    let broken = dir.path().join("broken.suite.yaml");
    std::fs::write(&broken, "apiVersion: kadmit.dev/v1alpha1\nkind: Suite\n").unwrap();
    let report = dir.path().join("out/junit.xml");
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let output = kadmit(&[
        "verify",
        dir.path().to_str().unwrap(),
        "--junit",
        report.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    let xml = std::fs::read_to_string(&report).unwrap();
    let document = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}:\n{xml}"));
    let root = document.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("4"), "{xml}");
    assert_eq!(root.attribute("failures"), Some("2"), "{xml}");
    assert_eq!(root.attribute("errors"), Some("1"), "{xml}");
    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    // Name order of the directory: broken, then demo.
    assert_eq!(suites.len(), 2);
    let error = suites[0]
        .descendants()
        .find(|n| n.has_tag_name("error"))
        .expect("the broken suite's error");
    assert!(
        error
            .text()
            .unwrap_or("")
            .contains("broken.suite.yaml:1:1: missing field `rules`"),
        "{xml}"
    );
    let cases: Vec<_> = suites[1]
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let names: Vec<_> = cases.iter().filter_map(|n| n.attribute("name")).collect();
    assert_eq!(
        names,
        ["wrong-rule", "defaults <&> \"quoted\"", "a-config-map"]
    );
    assert_eq!(cases[0].attribute("line"), Some("7"));
    assert_eq!(cases[0].attribute("classname"), Some("demo"));
    let failure = cases[1]
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure");
    assert_eq!(failure.attribute("message"), Some("the patch differs"));
    // The diff reads back line for line.
    assert!(
        failure
            .text()
            .unwrap_or("")
            .contains("--- expected\n+++ actual\n"),
        "{xml}"
    );
    assert!(!cases[2].children().any(|n| n.is_element()));
    assert!(!dir.path().join("out/junit.xml.partial").exists());
}

#[test]
fn malformed_suites_name_file_line_and_column_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.suite.yaml");
    let text_of_suite = suite(
        r#"  - name: typo
    objct: {apiVersion: v1, kind: Pod, metadata: {name: p}}
    expect: {allowed: true}
  - name: two-inputs
    object: {apiVersion: v1, kind: Pod, metadata: {name: p}}
    reviewFile: review.json
    expect: {denies: [privileged]}
  - name: two-inputs
    objectFile: missing.yaml
    oldObject: {apiVersion: v1, kind: Pod, metadata: {name: p}}
    ruleSet: pod-security-baseline
    expect: {}
"#,
    );
    std::fs::write(&path, text_of_suite).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let file = path.display().to_string();
    for expected in [
        format!("{file}:8:5: cases[0].objct: unknown field `objct`, expected one of"),
        format!(
            "{file}:10:5: cases[1]: the case has 2 inputs: object, reviewFile (give exactly one of object, objectFile, review and reviewFile)"
        ),
        format!(
            "{file}:13:23: cases[1].expect.denies[0]: \"privileged\" does not name a rule as rule-set/rule"
        ),
        format!("{file}:14:5: cases[2].name: duplicate case name \"two-inputs\""),
        format!(
            "{file}:16:5: cases[2].oldObject: an old object is given for an operation other than UPDATE (set operation: UPDATE, or remove the old object)"
        ),
        format!("{file}:18:5: cases[2].expect: the expectation checks nothing"),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(stdout.contains("running 0 cases\n"), "{stdout}");
    assert!(
        text(&output.stderr).contains("1 suite file(s) could not be used"),
        "{}",
        text(&output.stderr)
    );

    // Inputs are read when loading: a missing object file is the suite's
    // problem, at the field that names it.
    let path = dir.path().join("missing.suite.yaml");
    std::fs::write(
        &path,
        suite("  - name: missing\n    objectFile: nowhere.yaml\n    expect: {allowed: true}\n"),
    )
    .unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stdout).contains(&format!(
            "{}:8:5: cases[0].objectFile: nowhere.yaml: no such file (paths are relative to the suite file)",
            path.display()
        )),
        "{}",
        text(&output.stdout)
    );

    // A directory without suites is an error, not a pass.
    let empty = tempfile::tempdir().unwrap();
    let output = kadmit(&["verify", empty.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no suite files (*.suite.yaml)"));
}

/// Runs kadmit on a suite file holding `contents`; returns its stdout, after
/// checking the exit code is 2 and the answer came within `limit`.
fn rejected(name: &str, contents: &str, limit: Duration) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    let started = Instant::now();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    let elapsed = started.elapsed();
    let stdout = text(&output.stdout).replace(&format!("{}/", dir.path().display()), "");
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(elapsed < limit, "{name}: {elapsed:?}");
    stdout
}

#[test]
fn suites_over_the_bounds_are_rejected_fast_with_a_clear_error() {
    // Generous: a debug build on a machine shared with other builds. Each
    // answer comes after reading at most a few kilobytes past the bound.
    let limit = Duration::from_secs(10);

    let oversize = format!("# {}\n", "x".repeat(2 << 20));
    let stdout = rejected("big.suite.yaml", &oversize, limit);
    assert!(
        stdout.starts_with(
            "big.suite.yaml:1:1: file is 2097155 bytes, more than the limit of 1048576 (1 MiB) (split the cases"
        ),
        "{stdout}"
    );

    let case = "  - {name: c, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}, expect: {allowed: true}}\n";
    let many: String = (0..1001)
        .map(|i| case.replace("name: c,", &format!("name: c{i},")))
        .collect();
    let stdout = rejected("many.suite.yaml", &suite(&many), limit);
    assert!(
        stdout.starts_with(
            "many.suite.yaml:1007:5: cases[1000]: 1001 cases, more than the limit of 1000 (split the cases"
        ),
        "{stdout}"
    );

    // Nested anchors, each level ten aliases of the one before: 10^9 nodes
    // from a few hundred bytes.
    let mut laughs = String::from("x0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..=9 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        laughs.push_str(&format!("x{level}: &l{level} [{refs}]\n"));
    }
    let stdout = rejected("laughs.suite.yaml", &laughs, limit);
    assert!(
        stdout.starts_with("laughs.suite.yaml:5:")
            && stdout.contains("expands to more than 100000 nodes"),
        "{stdout}"
    );

    // The same bomb in an object file a case names: reported in that file.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bomb.yaml"), &laughs).unwrap();
    let path = dir.path().join("bomb.suite.yaml");
    std::fs::write(
        &path,
        suite("  - name: bomb\n    objectFile: bomb.yaml\n    expect: {allowed: true}\n"),
    )
    .unwrap();
    let started = Instant::now();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    assert!(started.elapsed() < limit);
    assert_eq!(output.status.code(), Some(2));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(&format!("{}:6:", dir.path().join("bomb.yaml").display()))
            && stdout.contains("expands to more than 250000 nodes"),
        "{stdout}"
    );

    let deep = format!("cases: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let stdout = rejected("deep.suite.yaml", &deep, limit);
    assert!(
        stdout.contains("collections nested deeper than 64 levels"),
        "{stdout}"
    );
}

/// A JSON object file of `maps` one-key maps (a ConfigMap with an extra
/// list): a few bytes of text each, several hundred once parsed.
fn many_small_maps(maps: usize) -> String {
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"x\":[{}]}}",
        vec!["{\"a\":1}"; maps].join(",")
    )
}

#[test]
fn cases_naming_one_large_file_are_bounded_in_memory() {
    // Each case holds its own copy of the object it names, here about 70 MB
    // of maps from 0.8 MB of JSON: without the bound, twenty cases would
    // hold 1.4 GB.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.json"), many_small_maps(100_000)).unwrap();
    let cases: String = (0..20)
        .map(|i| {
            format!("  - name: c{i}\n    objectFile: big.json\n    expect: {{allowed: true}}\n")
        })
        .collect();
    let path = dir.path().join("big.suite.yaml");
    std::fs::write(&path, suite(&cases)).unwrap();
    let stdout = over_the_memory_bound(&path);
    assert!(
        stdout.contains(
            "big.suite.yaml:23:5: cases[5].objectFile: the objects the cases name take more than \
             536870912 bytes (512 MiB) in memory, each file counted once read and once for every \
             case that names it"
        ),
        "{stdout}"
    );

    // Five cases stay within it and run.
    let five: String = cases
        .lines()
        .take(15)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&path, suite(&five)).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
}

#[test]
fn many_large_files_are_bounded_before_they_are_parsed() {
    // Each file is kept parsed for the cases that name it: twenty-one
    // files of 3 MiB of small maps (within the 64 MiB a suite may read)
    // went past 4 GB. Each is now counted at what it may take before it
    // is parsed.
    let dir = tempfile::tempdir().unwrap();
    let big = many_small_maps(370_000);
    assert!(big.len() < 3 << 20, "{} bytes", big.len());
    let cases: String = (0..21)
        .map(|i| {
            std::fs::write(dir.path().join(format!("big{i}.json")), &big).unwrap();
            format!("  - name: c{i}\n    objectFile: big{i}.json\n    expect: {{allowed: true}}\n")
        })
        .collect();
    let path = dir.path().join("big.suite.yaml");
    std::fs::write(&path, suite(&cases)).unwrap();
    over_the_memory_bound(&path);
}

/// Runs `kadmit verify` on the suite at `path`, which names more objects
/// than a suite may hold: it exits 2, reports the bound once (not again for
/// later cases), and stays under 1 GiB. Returns what it printed.
fn over_the_memory_bound(path: &Path) -> String {
    let verified = crate::adversarial::support::measured(
        &["verify".as_ref(), path.as_os_str()],
        None,
        crate::server::harness::DEADLINE,
    );
    assert_eq!(
        verified.code,
        Some(2),
        "{}{}",
        verified.stdout,
        verified.stderr
    );
    assert_eq!(
        verified.stdout.matches("in memory").count(),
        1,
        "{}",
        verified.stdout
    );
    let peak = verified.peak_rss_kib;
    assert!(peak < 1024 * 1024, "kadmit verify peaked at {peak} KiB");
    verified.stdout
}
