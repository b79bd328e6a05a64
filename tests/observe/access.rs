//! The protected operations listener of the real binary (`--ops-tls`,
//! `--ops-token-file`, `--ops-client-ca`): what stays open, the 401s and
//! their count, token rotation, the bounds on the token file and on the
//! header, and client certificates.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use serde_json::Value;

use super::{OPS_TOKEN, Ops, policy_dir};
use crate::server::harness::{Alpn, DEADLINE, Kadmit, TestCa, assert_status_body, client, message};

const DATA_PATHS: [&str; 5] = [
    "/metrics",
    "/status",
    "/api/summary",
    "/api/denials",
    "/nope",
];
const OPEN_PATHS: [&str; 5] = [
    "/healthz",
    "/readyz",
    "/dashboard",
    "/dashboard/dashboard.js",
    "/dashboard/dashboard.css",
];

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn refused(kadmit: &Kadmit, reason: &str) -> f64 {
    kadmit.metric(&format!(
        r#"kadmit_ops_requests_refused_total{{reason="{reason}"}}"#
    ))
}

#[test]
fn probes_and_the_page_are_open_and_data_needs_the_token() {
    let rules = policy_dir();
    let kadmit = Ops::Protected.server(rules.path()).start();
    assert!(kadmit.ops_tls(), "{:?}", kadmit.stdout);
    assert!(
        kadmit.stdout.iter().any(|line| line.contains(" ops_tls=")),
        "{:?}",
        kadmit.stdout
    );

    for path in OPEN_PATHS {
        let (status, _, body) = kadmit.get_ops(path, None);
        assert_eq!(status, 200, "{path}: {body}");
    }
    for path in DATA_PATHS {
        let (status, headers, body) = kadmit.get_ops(path, None);
        assert_eq!(status, 401, "{path}: {body}");
        assert_eq!(
            headers["www-authenticate"], r#"Bearer realm="kadmit""#,
            "{path}"
        );
        let body: Value = serde_json::from_str(&body).expect("a Status body");
        assert_status_body(&body, 401, "--ops-token-file");

        let (status, headers, body) = kadmit.get_ops(path, Some(&bearer("wrong")));
        assert_eq!(status, 401, "{path}: {body}");
        assert!(
            headers["www-authenticate"]
                .to_str()
                .is_ok_and(|challenge| challenge.contains(r#"error="invalid_token""#)),
            "{path}: {headers:?}"
        );
        // The token is never echoed, nor the wrong one.
        assert!(
            !body.contains("wrong") && !body.contains(OPS_TOKEN),
            "{body}"
        );

        let (status, _, body) = kadmit.get_ops(path, Some(&bearer(OPS_TOKEN)));
        let expected = if path == "/nope" { 404 } else { 200 };
        assert_eq!(status, expected, "{path}: {body}");
    }
    assert_eq!(refused(&kadmit, "missing_token"), DATA_PATHS.len() as f64);
    assert_eq!(refused(&kadmit, "invalid_token"), DATA_PATHS.len() as f64);

    // Plain HTTP to the HTTPS port gets nothing.
    let plain = reqwest::blocking::Client::builder()
        .timeout(DEADLINE)
        .build()
        .expect("client")
        .get(format!("http://{}/metrics", kadmit.plain_addr()))
        .send();
    assert!(
        plain.is_err() || plain.is_ok_and(|response| response.status() != 200),
        "plain HTTP was answered"
    );
    for line in kadmit.logs.snapshot() {
        assert!(
            !line.to_string().contains(OPS_TOKEN),
            "the token was logged: {line}"
        );
    }
    kadmit.assert_no_panic();
}

#[test]
fn an_authorization_header_over_actix_head_limit_gets_431() {
    let rules = policy_dir();
    let kadmit = Ops::Protected.server(rules.path()).start();
    let huge = bearer(&"x".repeat(200 << 10));
    let response = client(
        &crate::server::harness::roots_from_pem(kadmit.ca_pem()),
        None,
        Alpn::Http1,
    )
    .get(kadmit.plain_url("/metrics"))
    .header("Authorization", huge)
    .send();
    if let Ok(response) = response {
        assert_eq!(response.status(), 431);
    }
    // A token as long as a token file can hold is merely wrong.
    let long = bearer(&"x".repeat(4096));
    let (status, _, _) = kadmit.get_ops("/metrics", Some(&long));
    assert_eq!(status, 401);
    let (status, _, _) = kadmit.get_ops("/healthz", None);
    assert_eq!(status, 200, "the listener survives");
    kadmit.assert_no_panic();
}

/// Replaces the file by rename, as the kubelet's `..data` swap does.
fn replace(path: &Path, contents: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, contents).expect("write");
    std::fs::rename(&next, path).expect("rename");
}

#[test]
fn a_rotated_token_is_used_at_once_and_a_broken_file_keeps_the_last() {
    let rules = policy_dir();
    let kadmit = Ops::Protected.server(rules.path()).start();
    let file = kadmit.ops_token_file().expect("a token file");

    replace(&file, "rotated-token\n");
    let (status, _, _) = kadmit.get_ops("/metrics", Some(&bearer("rotated-token")));
    assert_eq!(status, 200);
    let (status, _, _) = kadmit.get_ops("/metrics", Some(&bearer(OPS_TOKEN)));
    assert_eq!(status, 401, "the old token still works");
    kadmit.logs.wait_for(1, |line| {
        message(line) == "Loaded the changed operations token"
    });

    replace(&file, "\n");
    let (status, _, _) = kadmit.get_ops("/metrics", Some(&bearer("rotated-token")));
    assert_eq!(status, 200, "an empty file must not drop the token");
    let (status, _, _) = kadmit.get_ops("/metrics", None);
    assert_eq!(status, 401, "an empty file must not open the port");
    kadmit.logs.wait_for(1, |line| {
        message(line) == "Kept the previous operations token: the changed file cannot be used"
    });
    kadmit.assert_no_panic();
}

/// Runs `kadmit serve` with `args` expecting it to refuse to start: its
/// exit code and stderr.
fn refused_start(rules: &Path, args: &[&str]) -> (Option<i32>, String) {
    let self_signed = tempfile::tempdir().expect("tempdir");
    let child = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--plain-listen",
            "127.0.0.1:0",
        ])
        .arg("--rules")
        .arg(rules)
        .arg("--self-signed-dir")
        .arg(self_signed.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kadmit");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(output) => {
            let output = output.expect("wait for kadmit");
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("kadmit started with {args:?} instead of refusing to");
        }
    }
}

#[test]
fn an_unusable_token_file_or_a_token_without_tls_stops_startup() {
    let rules = policy_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let oversize = dir.path().join("oversize");
    std::fs::write(&oversize, "x".repeat(4097)).expect("write");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let missing = dir.path().join("missing");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").expect("write");
    let path = |p: &Path| p.to_str().expect("UTF-8 path").to_owned();

    let cases = [
        (
            vec![
                "--ops-tls".to_owned(),
                "--ops-token-file".to_owned(),
                path(&oversize),
            ],
            "larger than 4096 bytes",
        ),
        (
            vec![
                "--ops-tls".to_owned(),
                "--ops-token-file".to_owned(),
                path(&empty),
            ],
            "is empty",
        ),
        (
            vec![
                "--ops-tls".to_owned(),
                "--ops-token-file".to_owned(),
                path(&missing),
            ],
            "cannot read the token file",
        ),
        (
            vec![
                "--ops-tls=false".to_owned(),
                "--ops-token-file".to_owned(),
                path(&token),
            ],
            "need --ops-tls",
        ),
        (
            vec!["--ops-token-file".to_owned(), path(&token)],
            "--ops-tls",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = refused_start(rules.path(), &args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_client_certificate_from_the_ops_ca_is_enough() {
    let rules = policy_dir();
    let server_ca = TestCa::new("server");
    let ops_ca = TestCa::new("operators");
    let rogue_ca = TestCa::new("rogue");
    let dir = tempfile::tempdir().expect("tempdir");
    let ops_ca_file = dir.path().join("ops-ca.pem");
    std::fs::write(&ops_ca_file, &ops_ca.pem).expect("write");
    let kadmit = Ops::Protected
        .server(rules.path())
        .certificate(&server_ca)
        .args([
            std::ffi::OsStr::new("--ops-client-ca"),
            ops_ca_file.as_os_str(),
        ])
        .start();
    let roots = server_ca.roots();

    let with_cert = client(
        &roots,
        Some(ops_ca.client_identity("prometheus")),
        Alpn::H2AndHttp1,
    );
    let response = with_cert
        .get(kadmit.plain_url("/metrics"))
        .send()
        .expect("GET with a client certificate");
    assert_eq!(response.status(), 200);

    // Without a certificate: the token still works, nothing else does.
    let (status, _, body) = kadmit.get_ops("/metrics", None);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("--ops-client-ca"), "{body}");
    let (status, _, _) = kadmit.get_ops("/metrics", Some(&bearer(OPS_TOKEN)));
    assert_eq!(status, 200);
    let (status, _, _) = kadmit.get_ops("/readyz", None);
    assert_eq!(status, 200);

    // A certificate from another CA fails the handshake, even for a probe.
    let rogue = client(
        &roots,
        Some(rogue_ca.client_identity("rogue")),
        Alpn::H2AndHttp1,
    );
    assert!(rogue.get(kadmit.plain_url("/healthz")).send().is_err());
    kadmit.assert_no_panic();
}
