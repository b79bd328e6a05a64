//! Integration tests of issue 5 (observability) with the real parts: the
//! `kadmit serve` binary, headless Chromium driven through chromedriver, and
//! Debian's Prometheus scraping kadmit and answering the Grafana dashboard's
//! queries.
//!
//! Chromium, chromedriver and Prometheus are system packages (`.ci/run`
//! installs them). Without them these tests print why and pass on a
//! developer machine, and fail under `CI=true`.
//!
//! Nothing sleeps to synchronise: every wait polls a condition (a log line,
//! a DOM state, a Prometheus answer) until a deadline.

mod access;
mod api;
mod browser;
mod grafana;
mod prometheus;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::harness::{Builder, Kadmit, fixture, post_json};

/// How the operations listener of a server under test is set up: every
/// test of this module runs against both (see [`in_both_setups`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ops {
    /// Plain HTTP, no credentials (the default).
    Plain,
    /// `--ops-tls` and `--ops-token-file` holding [`OPS_TOKEN`].
    Protected,
}

/// The operations token of [`Ops::Protected`].
pub(crate) const OPS_TOKEN: &str = "observe-0f1e2d3c4b5a69788796a5b4c3d2e1f0";

impl Ops {
    /// A server on `rules` with this setup; more flags via the builder.
    pub fn server(self, rules: &Path) -> Builder {
        let builder = Kadmit::with_rules(rules);
        match self {
            Ops::Plain => builder,
            Ops::Protected => builder.ops_token(OPS_TOKEN),
        }
    }
}

/// For each named `fn name(ops: Ops)`, a module `name` with the tests
/// `plain` and `protected`, one per [`Ops`] setup.
macro_rules! in_both_setups {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn plain() {
                    super::$name(crate::observe::Ops::Plain);
                }

                #[test]
                fn protected() {
                    super::$name(crate::observe::Ops::Protected);
                }
            }
        )*
    };
}
pub(crate) use in_both_setups;

/// The rule set every test here loads: two deny rules (codes 403 and 422),
/// a warning, an audit and a mutation, all on ConfigMaps.
pub(crate) const POLICY: &str = include_str!("observe-policy.yaml");

/// Its rule-set name.
pub(crate) const RULE_SET: &str = "observe-policy";

/// A temporary rules directory holding [`POLICY`].
pub(crate) fn policy_dir() -> tempfile::TempDir {
    crate::server::harness::rules_dir(&[("observe-policy.yaml", POLICY)])
}

/// A ConfigMap CREATE review built from the real-apiserver fixture.
pub(crate) struct ConfigMap {
    /// Object name.
    pub name: &'static str,
    /// Namespace.
    pub namespace: &'static str,
    /// Requesting user.
    pub user: &'static str,
    /// `metadata.labels`.
    pub labels: Value,
    /// `metadata.annotations`.
    pub annotations: Value,
    /// `data`.
    pub data: Value,
}

impl ConfigMap {
    /// A ConfigMap with a team label and nothing any rule objects to.
    pub fn clean(name: &'static str) -> Self {
        ConfigMap {
            name,
            namespace: "default",
            user: "admin",
            labels: json!({"team": "platform"}),
            annotations: json!({}),
            data: json!({"k": "v"}),
        }
    }

    /// The review body, with `uid`.
    pub fn review(&self, uid: &str) -> Vec<u8> {
        let mut review: Value =
            serde_json::from_slice(&fixture("create-configmap.json")).expect("fixture JSON");
        let request = &mut review["request"];
        request["uid"] = json!(uid);
        request["name"] = json!(self.name);
        request["namespace"] = json!(self.namespace);
        request["userInfo"]["username"] = json!(self.user);
        let object = &mut request["object"];
        object["metadata"]["name"] = json!(self.name);
        object["metadata"]["namespace"] = json!(self.namespace);
        object["metadata"]["labels"] = self.labels.clone();
        object["metadata"]["annotations"] = self.annotations.clone();
        object["data"] = self.data.clone();
        serde_json::to_vec(&review).expect("serialize")
    }
}

/// How many reviews [`send_traffic`] sends of each kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traffic {
    /// Denied by `no-forbidden-label` (403).
    pub forbidden: usize,
    /// Denied by `no-password-in-configmaps` (422).
    pub password: usize,
    /// Allowed with a `team-label-recommended` warning.
    pub warned: usize,
    /// Allowed, audited by `debug-annotation-audited`.
    pub audited: usize,
    /// Allowed with nothing to say, on `/validate`.
    pub clean: usize,
    /// Patched by `default-owner-label` on `/mutate`.
    pub mutated: usize,
}

impl Traffic {
    /// The mix the browser and API tests send.
    pub const MIX: Traffic = Traffic {
        forbidden: 3,
        password: 2,
        warned: 4,
        audited: 1,
        clean: 5,
        mutated: 5,
    };

    /// Reviews on `/validate`.
    pub fn validated(&self) -> usize {
        self.forbidden + self.password + self.warned + self.audited + self.clean
    }

    /// Every review sent.
    pub fn reviews(&self) -> usize {
        self.validated() + self.mutated
    }
}

/// Sends `traffic` to `kadmit` and checks each answer, so that a count the
/// tests later look for is known to have happened.
pub(crate) fn send_traffic(kadmit: &Kadmit, traffic: Traffic) {
    let client = kadmit.client();
    let mut sent = 0;
    let mut send = |path: &str, configmap: &ConfigMap, allowed: bool| {
        sent += 1;
        let uid = format!("observe-{sent:04}");
        let (status, _, response) = post_json(&client, &kadmit.url(path), configmap.review(&uid));
        assert_eq!(status, 200, "{response}");
        assert_eq!(
            response["response"]["allowed"], allowed,
            "{path}: {response}"
        );
        response
    };
    for _ in 0..traffic.forbidden {
        let configmap = ConfigMap {
            namespace: "team-a",
            user: "alice",
            labels: json!({"team": "a", "forbidden": "yes"}),
            ..ConfigMap::clean("app-config")
        };
        send("/validate", &configmap, false);
    }
    for _ in 0..traffic.password {
        let configmap = ConfigMap {
            namespace: "payments",
            user: "system:serviceaccount:payments:deployer",
            data: json!({"password": "hunter2"}),
            ..ConfigMap::clean("db-settings")
        };
        let response = send("/validate", &configmap, false);
        assert_eq!(response["response"]["status"]["code"], 422, "{response}");
    }
    for _ in 0..traffic.warned {
        let configmap = ConfigMap {
            labels: json!({}),
            user: "bob",
            ..ConfigMap::clean("nginx-conf")
        };
        let response = send("/validate", &configmap, true);
        assert!(response["response"]["warnings"].is_array(), "{response}");
    }
    for _ in 0..traffic.audited {
        let configmap = ConfigMap {
            annotations: json!({"debug": "true"}),
            ..ConfigMap::clean("debug-me")
        };
        send("/validate", &configmap, true);
    }
    for _ in 0..traffic.clean {
        send("/validate", &ConfigMap::clean("fine"), true);
    }
    for _ in 0..traffic.mutated {
        let response = send("/mutate", &ConfigMap::clean("fine"), true);
        assert_eq!(response["response"]["patchType"], "JSONPatch", "{response}");
    }
}

/// The path of a system tool the test needs, or `None` (after saying why)
/// when it is missing on a developer machine. Under `CI=true` a missing tool
/// fails the test: CI must run these.
pub(crate) fn tool(path: &str, package: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    if path.exists() {
        return Some(path.to_owned());
    }
    let message = format!(
        "{} is not installed (Debian package `{package}`; `.ci/run` installs it)",
        path.display()
    );
    crate::external::missing(&message);
    None
}

/// A TCP port free on 127.0.0.1 right now, for tools that cannot be told to
/// pick their own and report it.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

/// `target/test-artifacts`, next to the test binary's own target directory
/// (so it follows `CARGO_TARGET_DIR`).
pub(crate) fn artifacts_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/tests-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create the artifacts directory");
    dir
}

/// How long to wait between two polls of a condition.
const POLL: Duration = Duration::from_millis(100);

/// Polls `check` until it returns `Ok`; at the deadline, fails naming `what`
/// and the state of the last `Err`.
pub(crate) fn wait_until<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let until = Instant::now() + deadline;
    loop {
        match check() {
            Ok(value) => return value,
            Err(state) if Instant::now() >= until => {
                panic!("timed out after {deadline:?} waiting for {what}; last state: {state}")
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}
