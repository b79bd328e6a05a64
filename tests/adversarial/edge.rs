//! Requests at the edge of HTTP: fields long enough to flood the logs,
//! requests actix answers by itself before kadmit sees them, and chunked
//! bodies whose framing never ends (documented in `docs/server-limits.md`;
//! these tests pin what that page says).

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::support::{assert_ended_at_timeout, memory, mib, runtime, tls_connect};
use crate::server::harness::{Kadmit, bundled_rules, fixture, message};
use crate::server::lifecycle::{raw_tls, read_http_response};

/// Longest excerpt of a request field in a log line or Status message, and
/// of a whole message (`excerpt`), with room for JSON escaping.
const FIELD_BOUND: usize = 256;
const MESSAGE_BOUND: usize = 1024;

fn refusal(line: &Value) -> bool {
    message(line) == "Refused a bad request"
}

/// Issue 11: an 8,000-character path and Content-Type were logged whole
/// (16 KB per bad request).
#[test]
fn long_request_fields_are_cut_in_logs_and_status_bodies() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let client = kadmit.client();
    let long = "p".repeat(8000);
    let cases = [
        // (path, content type, content encoding, status, reason)
        (
            format!("/{long}"),
            "application/json".to_owned(),
            None,
            404,
            "not_found",
        ),
        (
            format!("/validate/{long}"),
            "application/json".to_owned(),
            None,
            404,
            "unknown_rule_set",
        ),
        (
            "/validate".to_owned(),
            format!("text/{long}"),
            None,
            415,
            "content_type",
        ),
        (
            "/validate".to_owned(),
            "application/json".to_owned(),
            Some(format!("gzip, {long}")),
            415,
            "content_encoding",
        ),
    ];
    for (i, (path, content_type, encoding, status, reason)) in cases.iter().enumerate() {
        let mut request = client
            .post(kadmit.url(path))
            .header("Content-Type", content_type)
            .body(fixture("create-pod.json"));
        if let Some(encoding) = encoding {
            request = request.header("Content-Encoding", encoding);
        }
        let response = request.send().expect("send");
        assert_eq!(response.status().as_u16(), *status, "{reason}");
        let body = response.bytes().expect("body");
        assert!(
            body.len() < MESSAGE_BOUND + 256,
            "{reason}: body of {} bytes",
            body.len()
        );
        let body: Value = serde_json::from_slice(&body).expect("Status body");
        let text = body["message"].as_str().unwrap_or_default();
        assert!(
            text.contains(" bytes]"),
            "{reason}: not marked as cut: {text}"
        );

        let line = kadmit.logs.wait_for(i + 1, refusal)[i].clone();
        assert_eq!(line["reason"], *reason, "{line}");
        let logged_path = line["path"].as_str().unwrap_or_default();
        assert!(
            logged_path.len() <= FIELD_BOUND,
            "{reason}: path of {}",
            logged_path.len()
        );
        let error = line["error"].as_str().unwrap_or_default();
        assert!(
            error.len() <= MESSAGE_BOUND,
            "{reason}: error of {}",
            error.len()
        );
        let whole = line.to_string();
        assert!(
            whole.len() < 2 * MESSAGE_BOUND,
            "{reason}: log line of {} bytes",
            whole.len()
        );
    }
    kadmit.assert_no_panic();
}

/// Issue 11: a request head that does not arrive within
/// --request-timeout-secs is answered by actix itself: 408 with an empty
/// body, and the connection is closed. No kadmit handler sees the request, so
/// no Status body can be sent (docs/server-limits.md), but it is counted.
#[test]
fn a_stalled_request_head_gets_actixs_empty_408() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--request-timeout-secs", "1"])
        .start();
    let mut stream = raw_tls(&kadmit, b"http/1.1");
    stream
        .write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
        .expect("write part of a head");
    stream.flush().expect("flush");
    let response = read_http_response(&mut stream);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(
        response.to_lowercase().contains("content-length: 0"),
        "{response}"
    );
    assert_eq!(
        kadmit.metric(r#"kadmit_bad_requests_total{reason="head_timeout"}"#),
        1.0
    );
    kadmit.assert_no_panic();
}

/// Issue 11: a request head that is not HTTP (here a bad request line) gets
/// actix's own 400 with an empty body; a head that fills actix's 128 KiB
/// buffer gets 431. Both are counted, under fixed reasons.
#[test]
fn malformed_and_oversized_heads_get_actixs_own_answers() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();

    let mut stream = raw_tls(&kadmit, b"http/1.1");
    stream
        .write_all(b"POST /validate HTTP/1.1 extra\r\nHost: localhost\r\n\r\n")
        .expect("write");
    stream.flush().expect("flush");
    let response = read_http_response(&mut stream);
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(
        response.to_lowercase().contains("content-length: 0"),
        "{response}"
    );

    // Exactly actix's 128 KiB head buffer of an unfinished head: the server
    // reads every byte before it answers, so its close resets nothing.
    let mut stream = raw_tls(&kadmit, b"http/1.1");
    let start = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Big: ";
    let mut head = start.to_vec();
    head.resize(128 * 1024, b'x');
    stream.write_all(&head).expect("write");
    stream.flush().expect("flush");
    let response = read_http_response(&mut stream);
    assert!(response.starts_with("HTTP/1.1 431"), "{response}");

    // Neither reached kadmit's handlers: nothing was refused there.
    assert!(kadmit.logs.snapshot().iter().all(|line| !refusal(line)));
    for (reason, count) in [
        ("malformed_http", 1.0),
        ("head_too_large", 1.0),
        ("head_timeout", 0.0),
    ] {
        let sample = format!(r#"kadmit_bad_requests_total{{reason="{reason}"}}"#);
        assert_eq!(kadmit.metric(&sample), count, "{sample}");
    }
    kadmit.assert_no_panic();
}

/// A flood of bad requests (here 404s on the webhook port, which need no
/// certificate) is counted in full but logged at most 100 lines every 10 s:
/// a line for each wrote a thousand warnings a second.
#[test]
fn a_flood_of_bad_requests_is_counted_but_not_logged_line_for_line() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let client = kadmit.client();
    let sent: u32 = 300;
    let started = Instant::now();
    for _ in 0..sent {
        let response = client.get(kadmit.url("/nope")).send().expect("send");
        assert_eq!(response.status().as_u16(), 404);
    }
    let intervals = started.elapsed().as_secs() / 10 + 1;
    let sample = r#"kadmit_bad_requests_total{reason="not_found"}"#;
    assert_eq!(kadmit.metric(sample), f64::from(sent), "{sample}");
    // Lines are written before each response; the test reads them through
    // a pipe, so it waits for the first hundred.
    let logged = kadmit.logs.wait_for(100, refusal).len() as u64;
    assert!(
        logged <= 100 * intervals && logged < u64::from(sent),
        "{logged} lines for {sent} requests in {intervals} interval(s) of 10 s"
    );
    kadmit.assert_no_panic();
}

/// The body timeout of the endless-chunk test.
const CHUNK_BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// A chunked body whose chunk line or trailer section never ends: actix's
/// decoder passes over a chunk extension and a trailer byte by byte
/// without keeping them, and no body byte comes, so the request gets the
/// 408 of the body timeout, however much is sent. Nothing grows meanwhile.
#[test]
fn a_chunked_body_that_never_ends_its_chunk_line_or_trailers_gets_408_in_time() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--request-timeout-secs",
            &CHUNK_BODY_TIMEOUT.as_secs().to_string(),
        ])
        .start();
    let before = memory(kadmit.pid());
    let head = "POST /validate HTTP/1.1\r\nHost: kadmit\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    for (what, start, filler) in [
        ("chunk extension", "1;", b"a".repeat(16 << 10)),
        ("trailer section", "0\r\n", b"X-a: b\r\n".repeat(2 << 10)),
    ] {
        let (sent, answered) = runtime().block_on(async {
            let tls = tls_connect(&kadmit, b"http/1.1").await;
            let (mut reader, mut writer) = tokio::io::split(tls);
            let opened = Instant::now();
            let (answered_tx, mut answered) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let mut answer = vec![0u8; 64];
                let read = reader.read(&mut answer).await.unwrap_or(0);
                let _ = answered_tx.send((
                    opened.elapsed(),
                    String::from_utf8_lossy(&answer[..read]).into_owned(),
                ));
            });
            writer
                .write_all(format!("{head}{start}").as_bytes())
                .await
                .expect("head");
            let mut sent = 0usize;
            let answered = loop {
                if let Ok(answered) = answered.try_recv() {
                    break Some(answered);
                }
                if opened.elapsed() > 2 * CHUNK_BODY_TIMEOUT
                    || writer.write_all(&filler).await.is_err()
                {
                    break tokio::time::timeout(2 * CHUNK_BODY_TIMEOUT, answered)
                        .await
                        .ok()
                        .and_then(Result::ok);
                }
                sent += filler.len();
            };
            (sent, answered)
        });
        eprintln!(
            "endless {what}: {} KiB sent, answered {answered:?}",
            sent >> 10
        );
        let (took, answer) = answered.unwrap_or_else(|| panic!("no answer to an endless {what}"));
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "an endless {what} got {answer:?}"
        );
        assert_ended_at_timeout(&format!("an endless {what}"), took, CHUNK_BODY_TIMEOUT);
        assert!(sent > 1 << 20, "only {sent} bytes of {what} sent");
    }
    let after = memory(kadmit.pid());
    eprintln!(
        "endless chunk lines: peak {:.1} -> {:.1} MiB",
        mib(before.peak),
        mib(after.peak)
    );
    assert!(
        after.peak.saturating_sub(before.peak) < 16 << 20,
        "endless chunk lines took the peak from {:.1} MiB to {:.1} MiB",
        mib(before.peak),
        mib(after.peak)
    );
    kadmit.assert_no_panic();
}
