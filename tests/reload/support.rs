//! What the reload tests share: two versions of a small rule set that answer
//! the same reviews differently, the verdicts each version gives (computed
//! in-process with `kadmit::eval::select`), and polling `/status` with a
//! deadline.
//!
//! Every wait for a reload polls for the state it expects and fails after
//! [`RELOAD_DEADLINE`]; none sleeps a fixed time in place of synchronising.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::engine::evaluate;
use kadmit::plan::Mode;
use kadmit::plan::{Plan, compile};
use kadmit::review::{decode, encode};
use kadmit::rules::{Loaded, SourceFile, load_files};
use serde_json::Value;

use crate::server::harness::{Kadmit, fixture, post_json};

/// The longest a wait for a reload lasts before the test fails.
///
/// A reload takes the debounce, the settle read and a compile: well under
/// a second on an idle machine. The margin is for a debug build sharing two
/// cores with the rest of the suite (floods, a rolling restart behind
/// HAProxy), where one of these tests took 7.7 s instead of its usual 0.7 s
/// and a 2 s deadline left too little room. Every wait returns as soon as the state it expects is there,
/// so the margin costs a passing test nothing; how fast a change is served
/// is documented in docs/reload.md, not asserted by a timed test.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Shorter than the operations port keeps an idle connection (5 s): a
/// pooled connection is dropped by the client before the server may close
/// it, so a request never races the server's close of an idle connection.
const STATUS_POOL_IDLE: Duration = Duration::from_secs(2);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(5);

/// A rules directory, `rules`, inside a private temporary parent: the
/// watcher watches the parent too, and a private one keeps other tests'
/// files out of it. Keep the `TempDir` alive for as long as the directory.
pub fn rules_dir() -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("rules");
    std::fs::create_dir(&dir).expect("mkdir rules");
    (parent, dir)
}

/// The file both versions of the `flip` rule set live in.
pub const FLIP_FILE: &str = "flip.yaml";

/// The `flip` rule set, version `A` or `B`, which answer every review in
/// [`REVIEWS`] differently: A denies pods and deployments and labels pods
/// `flip: a`; B only warns and labels pods `flip: b`.
pub fn flip_rules(version: char) -> String {
    let (action, verb, label) = match version {
        'A' => ("Deny", "denies", "a"),
        'B' => ("Warn", "warns about", "b"),
        other => panic!("no version {other}"),
    };
    format!(
        r#"apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: flip
spec:
  rules:
    - name: workloads
      match: {{resources: [pods, deployments]}}
      action: {action}
      deny:
        - path: $.object.metadata.name
          exists: true
          message: "version {version} {verb} {{{{ $.object.metadata.name }}}}"
    - name: label
      match: {{resources: [pods]}}
      mutate:
        - setIfAbsent: {{path: "$.object.metadata.labels.flip", value: {label}}}
"#
    )
}

/// A second, independent rule set (`extra`), for adding and removing files.
pub const EXTRA_FILE: &str = "extra.yaml";

/// The `extra` rule set: denies deployments labelled `app: web` (the
/// deployment fixture is).
pub const EXTRA_RULES: &str = r#"apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: extra
spec:
  rules:
    - name: no-web
      match: {resources: [deployments]}
      deny:
        - path: $.object.metadata.labels.app
          equals: web
          message: "extra denies app=web"
"#;

/// The `flip` rule set with a misspelt field on line 13 (`exits:`), so it
/// does not compile: the diagnostic starts with `flip.yaml:13:`.
pub const BROKEN_FLIP: &str = r#"apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: flip
spec:
  rules:
    - name: workloads
      match: {resources: [pods, deployments]}
      action: Deny
      deny:
        - path: $.object.metadata.name
          message: "broken"
          exits: true
"#;

/// The line:column of the problem in [`BROKEN_FLIP`].
pub const BROKEN_FLIP_AT: &str = "flip.yaml:13:11:";

/// The reviews the tests send: (fixture, endpoint path, mode, rule set).
pub const REVIEWS: [(&str, &str, Mode, Option<&str>); 4] = [
    ("create-pod.json", "/validate", Mode::Validate, None),
    ("create-pod.json", "/mutate", Mode::Mutate, None),
    ("create-deployment.json", "/validate", Mode::Validate, None),
    (
        "create-pod.json",
        "/validate/flip",
        Mode::Validate,
        Some("flip"),
    ),
];

/// The `fileHash` `/status` shows for a file with `text`.
pub fn hash_of(text: &str) -> String {
    SourceFile {
        name: String::new(),
        text: text.to_owned(),
    }
    .content_hash()
}

/// Compiles rule files given as (name, text), as the server would.
pub fn plan_of(files: &[(&str, &str)]) -> Plan {
    let loaded: Loaded = load_files(
        files
            .iter()
            .map(|(name, text)| SourceFile {
                name: (*name).to_owned(),
                text: (*text).to_owned(),
            })
            .collect(),
    );
    assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    compile(&loaded).unwrap_or_else(|diagnostics| panic!("does not compile:\n{diagnostics}"))
}

/// The response `plan` gives to `body`, as JSON, without the plan generation
/// (see [`without_generation`]).
pub fn expected(plan: &Plan, body: &[u8], mode: Mode, rule_set: Option<&str>) -> Value {
    let review = decode(body).expect("fixture decodes");
    let rule_set = rule_set.map(|name| plan.rule_set_id(name).expect("rule set in plan"));
    let verdict = evaluate(plan, &review.request, mode, rule_set).expect("fixture evaluates");
    let bytes = encode(review.version, &review.request.uid, &verdict.response(mode));
    let value: Value = serde_json::from_slice(&bytes).expect("encoded response is JSON");
    without_generation(&value).1
}

/// Splits a response into its `plan-generation` audit annotation and the
/// rest, so responses of different generations of one plan compare equal.
pub fn without_generation(response: &Value) -> (u64, Value) {
    let mut rest = response.clone();
    let annotations = rest["response"]["auditAnnotations"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("no auditAnnotations in {response}"));
    let generation = annotations
        .remove("plan-generation")
        .and_then(|value| value.as_str().and_then(|text| text.parse().ok()))
        .unwrap_or_else(|| panic!("no plan-generation annotation in {response}"));
    if annotations.is_empty() {
        rest["response"]
            .as_object_mut()
            .expect("response object")
            .remove("auditAnnotations");
    }
    (generation, rest)
}

/// Starts `kadmit serve` on `rules` without the periodic re-read (so only
/// the watcher or SIGHUP can reload), with extra flags.
pub fn start(rules: &Path, args: &[&str]) -> Kadmit {
    Kadmit::with_rules(rules)
        .args(["--reload-interval-secs", "0"])
        .args(args.iter().copied())
        .start()
}

/// Reads `/status` on the plain port through one kept-alive client.
pub struct StatusClient {
    client: reqwest::blocking::Client,
    url: String,
}

impl StatusClient {
    /// A client for `kadmit`'s `/status`.
    pub fn new(kadmit: &Kadmit) -> Self {
        // The harness's plain GET installs the process's rustls provider,
        // which even a plain-HTTP reqwest client needs.
        let (code, body) = kadmit.get_plain("/healthz");
        assert_eq!(code, 200, "{body}");
        StatusClient {
            client: reqwest::blocking::Client::builder()
                .timeout(RELOAD_DEADLINE)
                .pool_idle_timeout(STATUS_POOL_IDLE)
                .build()
                .expect("plain client"),
            url: kadmit.plain_url("/status"),
        }
    }

    /// The current `/status`.
    pub fn get(&self) -> Value {
        let response = self
            .client
            .get(&self.url)
            .send()
            .unwrap_or_else(|error| panic!("GET {}: {error}", self.url));
        assert_eq!(response.status(), 200, "GET {}", self.url);
        response.json().expect("/status is JSON")
    }

    /// Polls `/status` until `done` holds and returns it with the time
    /// waited; fails the test after [`RELOAD_DEADLINE`], saying `what`.
    pub fn wait(&self, what: &str, done: impl Fn(&Value) -> bool) -> (Value, Duration) {
        let started = Instant::now();
        loop {
            let status = self.get();
            if done(&status) {
                return (status, started.elapsed());
            }
            assert!(
                started.elapsed() < RELOAD_DEADLINE,
                "not within {RELOAD_DEADLINE:?}: {what}; /status is {status:#}"
            );
            thread::sleep(POLL);
        }
    }

    /// Waits until a generation above `generation` serves; returns /status.
    pub fn wait_past(&self, generation: u64) -> Value {
        self.wait(&format!("a generation above {generation}"), |status| {
            generation_of(status) > generation
        })
        .0
    }

    /// Waits until `failedReloads` exceeds `failed`; returns /status.
    pub fn wait_failure(&self, failed: u64) -> Value {
        self.wait(&format!("more than {failed} failed reloads"), |status| {
            status["failedReloads"].as_u64().unwrap_or(0) > failed
        })
        .0
    }
}

/// The `generation` of a `/status` body.
pub fn generation_of(status: &Value) -> u64 {
    status["generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("no generation in {status}"))
}

/// The rule-set names a `/status` body lists.
pub fn rule_set_names(status: &Value) -> Vec<String> {
    status["ruleSets"]
        .as_array()
        .unwrap_or_else(|| panic!("no ruleSets in {status}"))
        .iter()
        .map(|set| set["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Sends one review and returns its plan generation and the rest of the
/// response; any status but 200 fails the test.
pub fn send(
    client: &reqwest::blocking::Client,
    kadmit: &Kadmit,
    fixture_name: &str,
    path: &str,
) -> (u64, Value) {
    let (code, _, body) = post_json(client, &kadmit.url(path), fixture(fixture_name));
    assert_eq!(code, 200, "{path} {fixture_name}: {body}");
    without_generation(&body)
}

/// Asserts that every review of [`REVIEWS`] is answered by `generation` as
/// `plan` answers it.
pub fn assert_serves(
    client: &reqwest::blocking::Client,
    kadmit: &Kadmit,
    generation: u64,
    plan: &Plan,
    what: &str,
) {
    for (name, path, mode, rule_set) in REVIEWS {
        if rule_set.is_some_and(|set| plan.rule_set_id(set).is_none()) {
            continue;
        }
        let (served, response) = send(client, kadmit, name, path);
        assert_eq!(served, generation, "{what}: {path} {name}");
        assert_eq!(
            response,
            expected(plan, &fixture(name), mode, rule_set),
            "{what}: {path} {name}"
        );
    }
}
