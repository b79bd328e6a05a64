//! A closed stdout (a pipe whose reader has gone, as after `| head -c1`):
//! `kadmit test` and `kadmit check` finish with the exit code of what they
//! found, and `kadmit serve` keeps serving. The pipe is closed before the
//! process starts, so every write it makes finds the reader gone.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::Value;

use crate::server::harness::{DEADLINE, bundled_rules, fixtures_dir, rules_dir};

/// A rule denying every ConfigMap CREATE.
const DENY_CONFIGMAPS: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: deny-configmaps
spec:
  rules:
    - name: deny-configmaps
      match: {operations: [CREATE], resources: [configmaps]}
      deny:
        - message: "configmap {{ $.object.metadata.name }} is refused"
"#;

/// A pipe whose read end is already closed.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

/// Runs `kadmit ARGS` with a closed stdout; returns its exit code and stderr.
fn run_with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run kadmit");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Issue 11: `kadmit test ... | head -c1` panicked on the broken pipe.
#[test]
fn kadmit_test_with_a_closed_stdout_exits_with_its_verdict() {
    let rules = rules_dir(&[("deny.yaml", DENY_CONFIGMAPS)]);
    let rules = rules.path().to_str().expect("UTF-8 path");
    let fixtures = fixtures_dir();
    let denied = fixtures.join("create-configmap.json");
    let allowed = fixtures.join("create-pod.json");
    let denied = denied.to_str().expect("UTF-8 path");
    let allowed = allowed.to_str().expect("UTF-8 path");
    for (args, code) in [
        (vec!["test", rules, allowed], 0),
        (vec!["test", rules, allowed, denied], 1),
        (vec!["test", "--output", "json", rules, denied, allowed], 1),
    ] {
        let (exit, stderr) = run_with_closed_stdout(&args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(exit, Some(code), "{args:?}: {stderr}");
    }
}

/// `kadmit audit` writes its lines in blocks: a block that finds the
/// reader gone (here the first, over 64 KiB of JSON lines, and the last,
/// written when the audit ends) is no error, and the exit code still says
/// what was found.
#[test]
fn kadmit_audit_with_a_closed_stdout_exits_with_its_verdict() {
    let pod: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures_dir().join("create-pod.json")).expect("fixture"),
    )
    .expect("JSON");
    let mut pod = pod["request"]["object"].clone();
    pod["spec"]["containers"][0]["image"] = serde_json::json!("nginx:latest");
    let items: Vec<serde_json::Value> = (0..2_000)
        .map(|i| {
            let mut pod = pod.clone();
            pod["metadata"]["name"] = serde_json::json!(format!("pod-{i}"));
            pod
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("pods.json");
    std::fs::write(
        &list,
        serde_json::to_vec(
            &serde_json::json!({"kind": "List", "apiVersion": "v1", "items": items}),
        )
        .expect("JSON"),
    )
    .expect("write the list");
    let rules = bundled_rules();
    for output in ["json", "table", "openreports"] {
        let (exit, stderr) = run_with_closed_stdout(&[
            "audit",
            rules.to_str().expect("UTF-8"),
            list.to_str().expect("UTF-8"),
            "--output",
            output,
        ]);
        assert!(!stderr.contains("panicked"), "{output}: {stderr}");
        // Every Pod is denied for its unpinned image.
        assert_eq!(exit, Some(1), "{output}: {stderr}");
    }
}

#[test]
fn kadmit_check_with_a_closed_stdout_exits_with_its_result() {
    let rules = bundled_rules();
    let (exit, stderr) = run_with_closed_stdout(&["check", rules.to_str().expect("UTF-8")]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(exit, Some(0), "{stderr}");
}

/// Issue 11: `kadmit serve` exited when it could not print its listening
/// line. The line is informational: the server logs it and serves.
#[test]
fn kadmit_serve_with_a_closed_stdout_keeps_serving() {
    let self_signed = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .arg("serve")
        .arg("--rules")
        .arg(bundled_rules())
        .args(["--listen", "127.0.0.1:0", "--plain-listen", "127.0.0.1:0"])
        .args(["--log-format", "json", "--workers", "1"])
        .arg("--self-signed-dir")
        .arg(self_signed.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kadmit");
    let stderr = child.stderr.take().expect("piped stderr");
    let (lines_tx, lines) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
            if lines_tx.send(value).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    let wait_for = |seen: &mut Vec<Value>, wanted: &str| -> Value {
        loop {
            if let Some(line) = seen.iter().find(|l| l["message"] == wanted) {
                return line.clone();
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(remaining) {
                Ok(line) => seen.push(line),
                Err(error) => panic!("no {wanted:?} log line ({error}); logs: {seen:#?}"),
            }
        }
    };
    let listening = wait_for(&mut seen, "Listening");
    wait_for(
        &mut seen,
        "Stdout is closed; the listening lines are only in this log",
    );
    let plain = listening["plain"]
        .as_str()
        .expect("plain address")
        .to_owned();

    // Still serving: the operations listener answers, and so does the
    // webhook (through its readiness).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(DEADLINE)
        .build()
        .expect("client");
    for path in ["/healthz", "/readyz"] {
        let response = client
            .get(format!("http://{plain}{path}"))
            .send()
            .expect("GET");
        assert_eq!(response.status(), 200, "{path}");
    }
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "kadmit exited"
    );
    let _ = child.kill();
    let _ = child.wait();
    let panicked = seen
        .iter()
        .any(|line| line.to_string().contains("panicked"));
    assert!(!panicked, "{seen:#?}");
}
