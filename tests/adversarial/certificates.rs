//! Certificates that would silently break the webhook: a serving certificate
//! outside its validity period (clients refuse it, nothing said so), and a
//! client CA file replaced while kadmit runs (it was read once, at startup).

use std::path::Path;

use serde_json::Value;

use crate::server::harness::{
    Alpn, Kadmit, TestCa, bundled_rules, client, fixture, message, post_json,
};

const OUTSIDE: &str =
    "Serving a TLS certificate outside its validity period: clients will refuse it";

/// Writes `contents` to `path` the way the kubelet and atomic writers do:
/// a new file renamed over the old one.
fn replace(path: &Path, contents: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, contents).expect("write");
    std::fs::rename(&staged, path).expect("rename");
}

/// A server on the bundled rules serving `cert` and `key` from files in the
/// returned directory (`tls.crt`, `tls.key`), which it watches for rotation.
fn serving(cert: &str, key: &str) -> (Kadmit, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert).expect("write cert");
    std::fs::write(&key_path, key).expect("write key");
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--tls-cert".as_ref(),
            cert_path.as_os_str(),
            "--tls-key".as_ref(),
            key_path.as_os_str(),
        ])
        .start();
    (kadmit, dir)
}

/// Issue 11: an expired (or not yet valid) certificate was loaded without a
/// word. It is logged with its dates, at startup and at rotation, and its
/// dates are metrics to alert on.
#[test]
fn a_certificate_outside_its_validity_is_logged_and_exported() {
    let ca = TestCa::new("validity CA");
    let (expired_cert, expired_key) = ca.server_cert_valid((2020, 1, 1), (2021, 1, 1));
    let (kadmit, dir) = serving(&expired_cert, &expired_key);
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let line = kadmit.logs.wait_for(1, |line| message(line) == OUTSIDE)[0].clone();
    assert_eq!(line["state"], "expired", "{line}");
    assert_eq!(line["not_before"], "2020-01-01T00:00:00Z", "{line}");
    assert_eq!(line["not_after"], "2021-01-01T00:00:00Z", "{line}");
    assert_eq!(
        kadmit.metric("kadmit_tls_certificate_expiry_timestamp_seconds"),
        1_609_459_200.0
    );

    // Rotated to a certificate that is not valid yet: the next handshake
    // loads it (the client refuses it, as clients will) and says so.
    let (future_cert, future_key) = ca.server_cert_valid((2090, 1, 1), (2091, 1, 1));
    replace(&key, &future_key);
    replace(&cert, &future_cert);
    let attempt = client(&ca.roots(), None, Alpn::Http1)
        .post(kadmit.url("/validate"))
        .header("Content-Type", "application/json")
        .body(fixture("create-pod.json"))
        .send();
    assert!(attempt.is_err(), "a not-yet-valid certificate was accepted");
    let line = kadmit.logs.wait_for(2, |line| message(line) == OUTSIDE)[1].clone();
    assert_eq!(line["state"], "not yet valid", "{line}");
    assert_eq!(line["not_before"], "2090-01-01T00:00:00Z", "{line}");
    assert_eq!(
        kadmit.metric("kadmit_tls_certificate_not_before_timestamp_seconds"),
        3_786_912_000.0
    );
    kadmit.assert_no_panic();
}

/// A valid certificate is loaded without a warning, and its expiry is
/// exported too.
#[test]
fn a_valid_certificate_only_exports_its_expiry() {
    let ca = TestCa::new("validity CA");
    let (good_cert, good_key) = ca.server_cert_valid((2000, 1, 1), (2999, 1, 1));
    let (kadmit, _dir) = serving(&good_cert, &good_key);
    assert_eq!(
        kadmit.metric("kadmit_tls_certificate_expiry_timestamp_seconds"),
        32_472_144_000.0
    );
    let warned: Vec<Value> = kadmit
        .logs
        .snapshot()
        .into_iter()
        .filter(|line| message(line) == OUTSIDE)
        .collect();
    assert!(warned.is_empty(), "{warned:?}");
}

/// Issue 11: the `--client-ca` file was never read again. After it is
/// replaced, new connections are verified against the new CAs.
#[test]
fn a_replaced_client_ca_file_applies_to_new_connections() {
    let first = TestCa::new("first client CA");
    let second = TestCa::new("second client CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_path = dir.path().join("client-ca.pem");
    std::fs::write(&ca_path, &first.pem).expect("write client CA");
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--client-ca".as_ref(), ca_path.as_os_str()])
        .start();
    let roots = crate::server::harness::roots_from_pem(kadmit.ca_pem());
    let url = kadmit.url("/validate");
    let body = fixture("create-pod.json");
    let connect = |ca: &TestCa| {
        client(
            &roots,
            Some(ca.client_identity("kube-apiserver")),
            Alpn::H2AndHttp1,
        )
    };

    let (status, _, response) = post_json(&connect(&first), &url, body.clone());
    assert_eq!(status, 200, "{response}");

    replace(&ca_path, &second.pem);
    let (status, _, response) = post_json(&connect(&second), &url, body.clone());
    assert_eq!(status, 200, "{response}");
    kadmit.logs.wait_for(1, |line| {
        message(line) == "Loaded the changed client CA for new connections"
    });
    let refused = connect(&first)
        .post(&url)
        .header("Content-Type", "application/json")
        .body(body.clone())
        .send();
    assert!(
        refused.is_err(),
        "a client of the replaced CA was still accepted"
    );

    // A broken file keeps the second CA in force, and says so.
    replace(&ca_path, "not a certificate");
    let (status, _, response) = post_json(&connect(&second), &url, body);
    assert_eq!(status, 200, "{response}");
    kadmit.logs.wait_for(1, |line| {
        message(line) == "Kept the previous client CA: the changed file cannot be used"
    });
    kadmit.assert_no_panic();
}
