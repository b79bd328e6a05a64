//! Readiness before and after a plan loads, liveness, and graceful shutdown
//! with a review in flight.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use serde_json::Value;

use super::harness::{
    DEADLINE, Kadmit, assert_status_body, bundled_rules, fixture, message, post_json, rules_dir,
};

/// A rule file that parses as YAML but is not a valid rule set (the rule
/// has no `match`), so no plan can be compiled from it.
const BROKEN_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: broken
spec:
  rules:
    - name: no-match
      deny:
        - message: "never"
"#;

#[test]
fn not_ready_while_no_plan_is_loaded_but_alive() {
    let rules = rules_dir(&[("broken.yaml", BROKEN_RULES)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();

    let (status, body) = kadmit.get_plain("/healthz");
    assert_eq!(status, 200, "{body}");

    let (status, body) = kadmit.get_plain("/readyz");
    assert_eq!(status, 503, "{body}");
    let body: Value = serde_json::from_str(&body).expect("Status body");
    assert_status_body(&body, 503, "no rule plan is loaded");

    // Reviews are refused with a Status the API server shows, so its
    // failurePolicy applies with a readable reason.
    let (status, _, body) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 503, "{body}");
    assert_status_body(&body, 503, "no rule plan is loaded");

    // The reason the rules did not load is in the log.
    let lines = kadmit
        .logs
        .wait_for(1, |line| message(line) == "Rule file problem");
    assert!(
        lines[0]["problem"]
            .as_str()
            .is_some_and(|d| d.contains("broken.yaml")),
        "{}",
        lines[0]
    );
}

#[test]
fn ready_once_the_plan_is_loaded() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let (status, body) = kadmit.get_plain("/readyz");
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(body["ready"], true);
    assert_eq!(body["generation"], 1);
    let (status, _) = kadmit.get_plain("/healthz");
    assert_eq!(status, 200);
    // Unknown paths on the plain listener are Status bodies too.
    let (status, body) = kadmit.get_plain("/nope");
    assert_eq!(status, 404);
    let body: Value = serde_json::from_str(&body).expect("Status body");
    assert_status_body(&body, 404, "no such path");
}

/// A TLS stream to the server trusting its generated CA, offering `alpn`.
pub fn raw_tls(
    kadmit: &Kadmit,
    alpn: &[u8],
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(super::harness::roots_from_pem(kadmit.ca_pem()))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let server_name = ServerName::IpAddress(kadmit.tls_addr().ip().into());
    let connection =
        rustls::ClientConnection::new(Arc::new(config), server_name).expect("client connection");
    let socket = TcpStream::connect(kadmit.tls_addr()).expect("connect");
    socket
        .set_read_timeout(Some(DEADLINE))
        .expect("read timeout");
    let mut stream = rustls::StreamOwned::new(connection, socket);
    // Complete the handshake now, so the connection is established (and
    // counted by the server) before the test goes on.
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("TLS handshake");
    }
    stream
}

/// Reads one HTTP/1.1 response (head and Content-Length body) as text.
pub fn read_http_response(stream: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = find(&bytes, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().expect("content-length"));
            if bytes.len() >= end + 4 + length {
                return String::from_utf8_lossy(&bytes[..end + 4 + length]).into_owned();
            }
        }
        let read = stream.read(&mut buf).expect("read response");
        assert!(
            read > 0,
            "connection closed mid-response: {}",
            String::from_utf8_lossy(&bytes)
        );
        bytes.extend_from_slice(&buf[..read]);
    }
}

/// Reads one response head (up to the blank line) and nothing more.
fn read_head(stream: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        let read = stream.read(&mut byte).expect("read head");
        assert!(
            read > 0,
            "connection closed mid-head: {}",
            String::from_utf8_lossy(&bytes)
        );
        bytes.push(byte[0]);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[test]
fn sigterm_finishes_the_review_in_flight_then_exits_cleanly() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--shutdown-delay-secs",
            "0",
            "--shutdown-timeout-secs",
            "20",
        ])
        .start();
    let body = fixture("create-pod.json");
    let uid = serde_json::from_slice::<Value>(&body).expect("JSON")["request"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();

    // A review in flight: the head is sent with `Expect: 100-continue`, and
    // the server's "100 Continue" proves it has read the head and called the
    // handler, which now waits for the body. (A connection whose request head
    // the server has not read yet is not in flight: actix closes it.)
    let mut stream = raw_tls(&kadmit, b"http/1.1");
    write!(
        stream,
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .expect("write head");
    stream.flush().expect("flush");
    let interim = read_head(&mut stream);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");

    kadmit.signal("TERM");
    kadmit
        .logs
        .wait_for(1, |line| message(line).starts_with("Shutting down"));

    // Shutdown has begun: readiness turns false so no new reviews are routed
    // here, while the plain listener still answers.
    let (status, text) = kadmit.get_plain("/readyz");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("shutting down"), "{text}");

    // The review in flight still completes.
    stream.write_all(&body).expect("write body");
    stream.flush().expect("flush");
    let response = read_http_response(&mut stream);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(&uid), "{response}");
    drop(stream);

    let status = kadmit.wait_exit();
    assert!(status.success(), "kadmit exited with {status}");
}

/// An idle HTTP/2 connection gets GOAWAY when shutdown begins and closes,
/// so the server exits without waiting out --shutdown-timeout-secs for it.
#[test]
fn sigterm_closes_idle_h2_connections_with_goaway() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--shutdown-delay-secs",
            "0",
            "--shutdown-timeout-secs",
            "20",
        ])
        .start();
    let client = kadmit.client();
    let (status, version, body) = post_json(
        &client,
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(version, reqwest::Version::HTTP_2);

    let started = std::time::Instant::now();
    kadmit.signal("TERM");
    let status = kadmit.wait_exit();
    assert!(status.success(), "kadmit exited with {status}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the open HTTP/2 connection held shutdown for {:?}",
        started.elapsed()
    );
    drop(client);
}
