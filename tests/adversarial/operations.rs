//! The plain listener (`/healthz`, `/status`, `/api/summary`) never waits
//! for a reload (issue 11): a liveness probe that times out while the rules
//! reload would get a healthy server restarted.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::deep_flow_nesting;
use crate::reload::support::{FLIP_FILE, flip_rules, generation_of, hash_of, rules_dir, start};
use crate::server::harness::{DEADLINE, Kadmit, message};

/// Longest any operations request may take while a reload runs: far above
/// an idle answer (about a millisecond), far below a probe's timeout.
const ANSWER_WITHIN: Duration = Duration::from_millis(1000);

/// GETs `/healthz`, `/status` and `/api/summary`, each bounded by
/// [`ANSWER_WITHIN`], and returns `/status`.
fn operations_answer(kadmit: &Kadmit, client: &reqwest::blocking::Client) -> Value {
    let mut status = Value::Null;
    for path in ["/healthz", "/api/summary", "/status"] {
        let response = client
            .get(kadmit.plain_url(path))
            .send()
            .unwrap_or_else(|error| {
                panic!("{path} did not answer within {ANSWER_WITHIN:?}: {error}")
            });
        assert_eq!(response.status(), 200, "{path}");
        if path == "/status" {
            status = response.json().expect("/status is JSON");
        }
    }
    status
}

fn bounded_client(kadmit: &Kadmit) -> reqwest::blocking::Client {
    // Installs the process's TLS provider, which even plain reqwest needs.
    assert_eq!(kadmit.get_plain("/healthz").0, 200);
    reqwest::blocking::Client::builder()
        .timeout(ANSWER_WITHIN)
        .build()
        .expect("client")
}

#[test]
fn issue_11_a_deeply_nested_file_neither_stalls_health_checks_nor_loads() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    let kadmit = start(&dir, &["--watch-debounce-ms", "50"]);
    let client = bounded_client(&kadmit);
    std::fs::write(dir.join("deep.yaml"), deep_flow_nesting()).expect("write");
    // Before the fix the reload parsed for minutes holding the lock that
    // /status waited on, on the listener's only thread.
    let started = Instant::now();
    let status = loop {
        let status = operations_answer(&kadmit, &client);
        if status["failedReloads"].as_u64().unwrap_or(0) > 0 {
            break status;
        }
        assert!(started.elapsed() < DEADLINE, "no failed reload: {status:#}");
        thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status["lastError"].as_str().is_some_and(
            |error| error.contains("deep.yaml:8:269: collections nested deeper than 64 levels")
        ),
        "{status:#}"
    );
    assert_eq!(generation_of(&status), 1, "{status}");
    assert_eq!(status["ruleSets"][0]["fileHash"], hash_of(&flip_rules('A')));
}

#[test]
fn issue_11_the_operations_listener_answers_while_a_reload_runs() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    // A long debounce makes a long reload: changed files are read again a
    // debounce later before they are served.
    let kadmit = start(&dir, &["--watch-debounce-ms", "3000"]);
    let client = bounded_client(&kadmit);
    let settling =
        |line: &Value| message(line).starts_with("Rule files changed; reading them again");
    // The startup reload settles once.
    kadmit.logs.wait_for(1, settling);
    let b = flip_rules('B');
    std::fs::write(dir.join(FLIP_FILE), &b).expect("write B");
    // The reload loop is now inside a reload, waiting 3 s.
    kadmit.logs.wait_for(2, settling);
    let status = operations_answer(&kadmit, &client);
    assert_eq!(generation_of(&status), 1, "{status}");
    assert_eq!(
        kadmit
            .logs
            .snapshot()
            .iter()
            .filter(|line| settling(line))
            .count(),
        2,
        "the reload finished before the check; it proves nothing"
    );
    let started = Instant::now();
    loop {
        let status = operations_answer(&kadmit, &client);
        if generation_of(&status) == 2 {
            assert_eq!(status["ruleSets"][0]["fileHash"], hash_of(&b));
            break;
        }
        assert!(started.elapsed() < DEADLINE, "B not served: {status:#}");
        thread::sleep(Duration::from_millis(20));
    }
}
