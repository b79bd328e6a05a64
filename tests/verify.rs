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
/// wrong rule, and a Pod the defaults change expected unchanged. It names
/// `pod.json` beside it ([`write_failing_suite`]).
fn failing_suite() -> String {
    suite(
        r#"  - name: wrong-rule
    objectFile: pod.json
    expect:
      allowed: true
      denies: [pod-security-baseline/host-ports]
      messages: ["must not set securityContext.privileged=true", "no such text"]
  - name: "defaults <&> \"quoted\""
    object:
      apiVersion: v1
      kind: Pod
      metadata: {name: web, labels: {app.kubernetes.io/name: web, team: a}}
      spec:
        containers: [{name: web, image: "registry.example/web:1.0"}]
    expect:
      patch: []
  - name: a-config-map
    object: {apiVersion: v1, kind: ConfigMap, metadata: {name: settings}}
    expect: {allowed: true, denies: [], warns: []}
"#,
    )
}

/// Writes [`failing_suite`] as `demo.suite.yaml` in `dir`, with the Pod it
/// names beside it (a suite names only files below its own directory).
fn write_failing_suite(dir: &Path) -> PathBuf {
    std::fs::copy(repo(PRIVILEGED_POD), dir.join("pod.json")).unwrap();
    let path = dir.join("demo.suite.yaml");
    std::fs::write(&path, failing_suite()).unwrap();
    path
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
    let path = write_failing_suite(dir.path());
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
    // A filter that selects nothing checks nothing: it does not pass.
    let output = kadmit(&["verify", path.to_str().unwrap(), "--filter", "no-such-case"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("test result: FAILED. 0 passed; 0 failed; 3 filtered out; finished in "),
        "{stdout}"
    );
    assert!(
        text(&output.stderr).contains("no case matches --filter \"no-such-case\""),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_junit_report_is_xml_a_ci_system_can_read() {
    let dir = tempfile::tempdir().unwrap();
    write_failing_suite(dir.path());
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

/// One-key maps in an object that takes just under the 64 MiB one object
/// may take once parsed (the webhook's bound): about 63 MB from 0.6 MB of
/// JSON.
const MAPS_WITHIN_ONE_OBJECT: usize = 78_000;

#[test]
fn cases_naming_one_large_file_are_bounded_in_memory() {
    // Each case's request holds its own copy of the object's JSON text:
    // here almost 3 MiB (a long string, which takes no more parsed), so
    // two hundred cases would hold 600 MB.
    let dir = tempfile::tempdir().unwrap();
    let big = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"data\":{{\"a\":\"{}\"}}}}",
        "x".repeat((3 << 20) - 1024)
    );
    std::fs::write(dir.path().join("big.json"), big).unwrap();
    let cases: String = (0..200)
        .map(|i| {
            format!("  - name: c{i}\n    objectFile: big.json\n    expect: {{allowed: true}}\n")
        })
        .collect();
    let path = dir.path().join("big.suite.yaml");
    std::fs::write(&path, suite(&cases)).unwrap();
    let stdout = over_the_memory_bound(&path);
    assert!(
        stdout.contains(
            ".objectFile: the objects the cases name take more than 536870912 bytes (512 MiB) in \
             memory, each file counted once read and once for every case that names it"
        ),
        "{stdout}"
    );

    // Cases naming an object of many small maps hold its text (0.6 MB),
    // not the 63 MB it takes parsed: five of them run.
    let big = many_small_maps(MAPS_WITHIN_ONE_OBJECT);
    assert!(
        kadmit::review::parsed_size_estimate(big.as_bytes()) < kadmit::review::MAX_PARSED_BYTES
    );
    std::fs::write(dir.path().join("big.json"), big).unwrap();
    let five: String = cases
        .lines()
        .take(15)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&path, suite(&five)).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
}

/// A Pod with 325 aliases of a list of 250 maps: 3.5 KB of YAML, about
/// 245,000 nodes once expanded (within the 250,000 an object file may
/// have), about 50 MB parsed.
fn pod_of_aliases() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default}}\nspec:\n  containers:\n  \
         - {{name: c, image: \"registry.example/x:1\"}}\nbase: &b [{}]\nmore:\n{}",
        vec!["{a: 0}"; 250].join(","),
        "- *b\n".repeat(325)
    )
}

/// Writes `suites` suite files in `dir`, `s00.suite.yaml`..., each of
/// `cases` cases naming `pod.yaml` ([`pod_of_aliases`]) and expecting it
/// admitted, except `fails` (suite, case), expected denied; then `texts`
/// cases naming `text.json`, a ConfigMap of almost 3 MiB of text, which
/// each case holds a copy of.
fn suites_of_aliases(dir: &Path, suites: usize, cases: usize, fails: (usize, usize), texts: usize) {
    std::fs::write(dir.join("pod.yaml"), pod_of_aliases()).unwrap();
    let text = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"t\"}},\"data\":{{\"a\":\"{}\"}}}}",
        "x".repeat((3 << 20) - 1024)
    );
    std::fs::write(dir.join("text.json"), text).unwrap();
    for s in 0..suites {
        let cases: String = (0..cases)
            .map(|c| {
                let allowed = (s, c) != fails;
                format!(
                    "  - name: c{c}\n    objectFile: pod.yaml\n    expect: {{allowed: {allowed}}}\n"
                )
            })
            .chain((0..texts).map(|t| {
                format!(
                    "  - name: t{t}\n    objectFile: text.json\n    expect: {{allowed: true}}\n"
                )
            }))
            .collect();
        let contents = format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: Suite\nmetadata:\n  name: s{s:02}\nrules: [{}]\ncases:\n{cases}",
            repo("rules/20-images.yaml").display()
        );
        std::fs::write(dir.join(format!("s{s:02}.suite.yaml")), contents).unwrap();
    }
}

/// The memory of a run is bounded whatever the number of suites: each is
/// loaded, run and dropped before the next. Loaded all first, eight suites
/// of six cases naming a file of aliases took 2.8 GB; the ten here (each
/// also holding 60 MB of text for twenty cases) took 2.4 GB and 40 s, and
/// now about 180 MB, what one of them takes.
#[test]
fn many_suites_take_the_memory_of_one() {
    let dir = tempfile::tempdir().unwrap();
    suites_of_aliases(dir.path(), 10, 3, (5, 2), 20);
    let junit = dir.path().join("report.xml");
    let verified = crate::adversarial::support::measured(
        &[
            "verify".as_ref(),
            dir.path().as_os_str(),
            "--junit".as_ref(),
            junit.as_os_str(),
        ],
        None,
        // Loading all suites first took 40 s of a debug build.
        Duration::from_secs(120),
    );
    let stdout = &verified.stdout;
    assert_eq!(verified.code, Some(1), "{stdout}{}", verified.stderr);
    // The report is as it was: the count first, a line per case in suite
    // order, the failure, the summary.
    assert!(
        stdout.starts_with("running 230 cases\ntest s00::c0 ... ok\n"),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("test s"))
        .collect();
    let expected: Vec<String> = (0..10)
        .flat_map(|s| {
            let cases = (0..3).map(move |c| {
                let verdict = if (s, c) == (5, 2) { "FAILED" } else { "ok" };
                format!("test s{s:02}::c{c} ... {verdict}")
            });
            cases.chain((0..20).map(move |t| format!("test s{s:02}::t{t} ... ok")))
        })
        .collect();
    assert_eq!(lines, expected);
    assert!(stdout.contains("\nfailures:\n    s05::c2\n"), "{stdout}");
    assert!(
        stdout.contains("test result: FAILED. 229 passed; 1 failed; finished in"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(report.matches("<testcase ").count(), 230, "{report}");
    assert_eq!(report.matches("<failure ").count(), 1, "{report}");
    let peak = verified.peak_rss_kib;
    assert!(peak < 512 * 1024, "kadmit verify peaked at {peak} KiB");
}

/// Cases naming one file of aliases each hold its JSON text (under 1 MB),
/// not the 50 MB it takes expanded: twelve of them run in one suite in
/// about 110 MB (holding parsed copies, six took 430 MB, and twelve were
/// refused as over the suite's bound).
#[test]
fn cases_naming_one_file_of_aliases_hold_its_text() {
    let dir = tempfile::tempdir().unwrap();
    suites_of_aliases(dir.path(), 1, 12, (0, usize::MAX), 0);
    let verified = crate::adversarial::support::measured(
        &["verify".as_ref(), dir.path().as_os_str()],
        None,
        crate::server::harness::DEADLINE,
    );
    let stdout = &verified.stdout;
    assert_eq!(verified.code, Some(0), "{stdout}{}", verified.stderr);
    assert!(
        stdout.contains("test result: ok. 12 passed; 0 failed;"),
        "{stdout}"
    );
    let peak = verified.peak_rss_kib;
    assert!(peak < 256 * 1024, "kadmit verify peaked at {peak} KiB");
}

#[test]
fn many_large_files_are_bounded_before_they_are_parsed() {
    // Each file is kept parsed for the cases that name it: twenty-one
    // files of small maps (within the 64 MiB a suite may read, each within
    // the 64 MiB one object may take parsed) would take 2.6 GB. Each is
    // counted at what it may take before it is parsed. (Files of 3 MiB of
    // such maps are each refused: `an_object_the_webhook_would_refuse_...`.)
    let dir = tempfile::tempdir().unwrap();
    let big = many_small_maps(MAPS_WITHIN_ONE_OBJECT);
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

/// Writes `contents` as `t.suite.yaml` in a new directory and runs
/// `kadmit verify` on it.
fn verify_suite(contents: &str) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.suite.yaml");
    std::fs::write(&path, contents).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    (dir, output)
}

/// A suite whose rules hold no rule set would pass every case expecting
/// an admission, judged by nothing: it cannot be used.
#[test]
fn a_suite_whose_rules_hold_no_rule_set_is_refused() {
    let empty = tempfile::tempdir().unwrap();
    let (_dir, output) = verify_suite(&format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: Suite\nmetadata: {{name: t}}\nrules: [{}]\n\
         cases:\n  - name: admitted\n    object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: a}}}}\n    \
         expect: {{allowed: true}}\n",
        empty.path().display()
    ));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("rules: the files named hold no rule set"),
        "{stdout}"
    );
}

/// A suite comes from anyone (a pull request), and what it names can be
/// printed in a failure's diff: it names only files below its own
/// directory, however the path or a link says otherwise.
#[test]
fn suites_name_only_files_below_their_own_directory() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {token: s3cr3t-t0ken}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let suite_dir = dir.path().join("suites");
    std::fs::create_dir_all(suite_dir.join("sub")).unwrap();
    std::fs::copy(&secret, dir.path().join("secret.yaml")).unwrap();
    std::os::unix::fs::symlink(&secret, suite_dir.join("link.yaml")).unwrap();
    std::os::unix::fs::symlink(outside.path(), suite_dir.join("linked-dir")).unwrap();
    std::fs::copy(repo(PRIVILEGED_POD), suite_dir.join("pod.json")).unwrap();
    let config_map = "object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}";
    let cases = format!(
        "  - name: absolute\n    {config_map}\n    expect: {{patchedFile: {}}}\n\
         \x20 - name: parent\n    objectFile: ../secret.yaml\n    expect: {{allowed: true}}\n\
         \x20 - name: down-then-out\n    {config_map}\n    oldObjectFile: sub/../../secret.yaml\n    operation: UPDATE\n    expect: {{allowed: true}}\n\
         \x20 - name: link\n    reviewFile: link.yaml\n    expect: {{allowed: true}}\n\
         \x20 - name: linked-dir\n    {config_map}\n    expect: {{patchedFile: linked-dir/secret.yaml}}\n",
        secret.display()
    );
    let path = suite_dir.join("t.suite.yaml");
    std::fs::write(&path, suite(&cases)).unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(!stdout.contains("s3cr3t"), "{stdout}");
    let file = path.display();
    let hint = "(name a file in the suite file's directory or below it; copy a file from elsewhere next to the suite)";
    for expected in [
        format!(
            "{file}:9:14: cases[0].expect.patchedFile: {:?} is an absolute path {hint}",
            secret.display().to_string()
        ),
        format!(
            "{file}:11:5: cases[1].objectFile: \"../secret.yaml\" leaves the suite file's directory {hint}"
        ),
        format!(
            "{file}:15:5: cases[2].oldObjectFile: \"sub/../../secret.yaml\" leaves the suite file's directory {hint}"
        ),
        format!(
            "{file}:19:5: cases[3].reviewFile: \"link.yaml\" is a link to a file outside the suite file's directory {hint}"
        ),
        format!(
            "{file}:23:14: cases[4].expect.patchedFile: \"linked-dir/secret.yaml\" is a link to a file outside the suite file's directory {hint}"
        ),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }

    // `..` that stays inside the directory is a path like any other.
    std::fs::write(
        &path,
        suite("  - name: inside\n    objectFile: sub/../pod.json\n    expect: {allowed: false}\n"),
    )
    .unwrap();
    let output = kadmit(&["verify", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
}

/// Names and messages of a suite reach a terminal or a CI log escaped: a
/// case name with a newline and escape sequences cannot forge the lines of
/// a passing run.
#[test]
fn names_and_messages_of_a_suite_cannot_forge_lines() {
    let forged = "x ... ok\\ntest result: ok. 2 passed; 0 failed\\n\\e[8m";
    let (_dir, output) = verify_suite(&suite(&format!(
        "  - name: \"{forged}\"\n    object: {{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{containers: [{{name: \"c\\r\\e[2K\", image: nginx, securityContext: {{privileged: true}}}}]}}}}\n    expect: {{allowed: true, messages: [\"\\e[8m\"]}}\n"
    )));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\r'),
        "{stdout:?}"
    );
    assert!(
        !stdout
            .lines()
            .any(|line| line.starts_with("test result: ok")),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "test demo::x ... ok\\u{a}test result: ok. 2 passed; 0 failed\\u{a}\\u{1b}[8m ... FAILED\n"
        ),
        "{stdout}"
    );
    // The rule's message quotes the container's name; the expected text
    // is the suite's own.
    assert!(
        stdout.contains("container c\\u{d}\\u{1b}[2K must not"),
        "{stdout}"
    );
    assert!(stdout.contains("missing:\n  - \\u{1b}[8m\n"), "{stdout}");
}

/// A suite that checks nothing must not pass: no cases, or an expectation
/// whose only check is an empty list of messages.
#[test]
fn suites_that_check_nothing_are_refused() {
    let (dir, output) = verify_suite(&suite("  []\n"));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}:6:1: cases: the suite has no cases (a suite that checks nothing would pass; add cases, or delete the file)",
            dir.path().join("t.suite.yaml").display()
        )),
        "{stdout}"
    );
    let (dir, output) = verify_suite(&suite(
        "  - name: vacuous\n    object: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n    expect: {messages: []}\n",
    ));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let file = dir.path().join("t.suite.yaml");
    for expected in [
        format!(
            "{}:9:5: cases[0].expect: the expectation checks nothing",
            file.display()
        ),
        format!(
            "{}:9:14: cases[0].expect.messages: an empty list of messages checks nothing",
            file.display()
        ),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// What the webhook would refuse (413) is refused here too, before it is
/// parsed: a suite cannot pass a case the server would never decide. A
/// List is refused, pointing to `kadmit audit`.
#[test]
fn objects_the_webhook_would_refuse_are_refused_before_they_are_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let big = many_small_maps(370_000);
    assert!(big.len() < 3 << 20, "{} bytes", big.len());
    std::fs::write(dir.path().join("big.json"), &big).unwrap();
    std::fs::write(
        dir.path().join("list.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n",
    )
    .unwrap();
    let path = dir.path().join("big.suite.yaml");
    std::fs::write(
        &path,
        suite(
            "  - name: big\n    objectFile: big.json\n    expect: {allowed: true}\n\
             \x20 - name: list\n    objectFile: list.yaml\n    expect: {allowed: true}\n",
        ),
    )
    .unwrap();
    let verified = crate::adversarial::support::measured(
        &["verify".as_ref(), path.as_os_str()],
        None,
        crate::server::harness::DEADLINE,
    );
    let stdout = &verified.stdout;
    assert_eq!(verified.code, Some(2), "{stdout}{}", verified.stderr);
    let file = path.display();
    for expected in [
        format!(
            "{file}:8:5: cases[0].objectFile: big.json: the object would take about 285 MiB once \
             parsed, more than the 64 MiB one object may take (the webhook denies such a review where a rule that can deny applies)"
        ),
        format!(
            "{file}:11:5: cases[1].objectFile: a list of objects, not one object: judge its items \
             with `kadmit audit`, or give each item as an input of its own"
        ),
    ] {
        assert!(
            stdout.contains(&expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let peak = verified.peak_rss_kib;
    assert!(peak < 256 * 1024, "kadmit verify peaked at {peak} KiB");
}
