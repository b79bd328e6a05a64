//! Requests that are not reviews kadmit can answer: each gets its HTTP status
//! and a one-line Kubernetes Status body, is logged once with its reason and
//! counted, and the server keeps serving.

use std::io::Read;

use serde_json::{Value, json};

use super::harness::{Kadmit, assert_status_body, bundled_rules, fixture, message};

/// The limit the server under test runs with: fixtures fit, the oversize
/// bodies do not.
const MAX_BODY_BYTES: usize = 64 * 1024;

struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    content_encoding: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    /// Part of the Status message.
    message: &'static str,
    /// The reason code in the log line and the metric label.
    reason: &'static str,
}

fn review_with(change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-pod.json")).expect("fixture is JSON");
    change(&mut review);
    serde_json::to_vec(&review).expect("serialize")
}

fn cases() -> Vec<Case> {
    let json = Some("application/json");
    let post = |name, body, status, message, reason| Case {
        name,
        method: "POST",
        path: "/validate",
        content_type: json,
        content_encoding: None,
        body,
        status,
        message,
        reason,
    };
    let mut oversize = review_with(|_| {});
    oversize.resize(MAX_BODY_BYTES + 1, b' ');
    vec![
        post(
            "malformed JSON",
            b"{\"apiVersion\": ".to_vec(),
            400,
            "invalid AdmissionReview",
            "malformed",
        ),
        post(
            "not an object",
            b"[1, 2]".to_vec(),
            400,
            "invalid AdmissionReview",
            "malformed",
        ),
        post(
            "missing request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "missing field `request`",
            "missing_request",
        ),
        post(
            "missing uid",
            review_with(|r| {
                r["request"].as_object_mut().expect("request").remove("uid");
            }),
            400,
            "uid",
            "malformed",
        ),
        post(
            "empty uid",
            review_with(|r| r["request"]["uid"] = json!("")),
            400,
            "request.uid is empty",
            "missing_uid",
        ),
        post(
            "wrong apiVersion",
            review_with(|r| r["apiVersion"] = json!("admission.k8s.io/v2")),
            400,
            "unsupported apiVersion \"admission.k8s.io/v2\"",
            "api_version",
        ),
        post(
            "wrong kind",
            review_with(|r| r["kind"] = json!("Pod")),
            400,
            "unsupported kind \"Pod\"",
            "kind",
        ),
        post(
            "wrong field type",
            review_with(|r| r["request"]["operation"] = json!("EXPLODE")),
            400,
            "request.operation",
            "malformed",
        ),
        post(
            "body over the limit",
            oversize,
            413,
            "larger than the limit of 65536 bytes",
            "too_large",
        ),
        Case {
            name: "text content type",
            content_type: Some("text/plain"),
            ..post(
                "",
                review_with(|_| {}),
                415,
                "unsupported content type \"text/plain\"",
                "content_type",
            )
        },
        Case {
            name: "no content type",
            content_type: None,
            ..post(
                "",
                review_with(|_| {}),
                415,
                "missing content type",
                "content_type",
            )
        },
        Case {
            name: "gzip content encoding",
            content_encoding: Some("gzip"),
            ..post(
                "",
                review_with(|_| {}),
                415,
                "unsupported content encoding \"gzip\"",
                "content_encoding",
            )
        },
        Case {
            name: "identity then br content encoding",
            content_encoding: Some("identity, br"),
            ..post(
                "",
                review_with(|_| {}),
                415,
                "unsupported content encoding \"identity, br\"",
                "content_encoding",
            )
        },
        Case {
            name: "unknown rule set",
            path: "/validate/no-such-rule-set",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "unknown rule set \"no-such-rule-set\": the loaded rule sets are ",
                "unknown_rule_set",
            )
        },
        Case {
            name: "unknown mutate rule set",
            path: "/mutate/no-such-rule-set?timeout=10s",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "unknown rule set \"no-such-rule-set\": the loaded rule sets are ",
                "unknown_rule_set",
            )
        },
        // Issue 14: a grouped entry's path names several rule sets; one
        // unknown name refuses the review rather than admitting it unchecked.
        Case {
            name: "grouped path with an unknown rule set",
            path: "/validate/images.no-such-rule-set",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "unknown rule set \"no-such-rule-set\": the loaded rule sets are ",
                "unknown_rule_set",
            )
        },
        Case {
            name: "grouped path with an empty name",
            path: "/mutate/pod-defaults..ownership",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "the path segment \"pod-defaults..ownership\" names no rule sets: an empty rule-set name",
                "unknown_rule_set",
            )
        },
        Case {
            name: "grouped path naming a rule set twice",
            path: "/validate/images.services.images",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "rule set \"images\" is named twice",
                "unknown_rule_set",
            )
        },
        Case {
            name: "GET on a webhook path",
            method: "GET",
            content_type: None,
            ..post("", Vec::new(), 405, "method GET is not allowed", "method")
        },
        Case {
            name: "PUT on a webhook path",
            method: "PUT",
            path: "/mutate",
            ..post(
                "",
                review_with(|_| {}),
                405,
                "method PUT is not allowed",
                "method",
            )
        },
        Case {
            name: "unknown path",
            path: "/admit",
            ..post(
                "",
                review_with(|_| {}),
                404,
                "no such path \"/admit\"",
                "not_found",
            )
        },
    ]
}

fn refusal(line: &Value) -> bool {
    message(line) == "Refused a bad request"
}

#[test]
fn bad_requests_get_their_status_and_a_one_line_status_body() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--max-body-bytes", &MAX_BODY_BYTES.to_string()])
        .start();
    let client = kadmit.client();
    let cases = cases();
    for (i, case) in cases.iter().enumerate() {
        let method = reqwest::Method::from_bytes(case.method.as_bytes()).expect("method");
        let mut request = client
            .request(method, kadmit.url(case.path))
            .body(case.body.clone());
        if let Some(content_type) = case.content_type {
            request = request.header("Content-Type", content_type);
        }
        if let Some(content_encoding) = case.content_encoding {
            request = request.header("Content-Encoding", content_encoding);
        }
        let response = request
            .send()
            .unwrap_or_else(|error| panic!("{}: {error}", case.name));
        let status = response.status().as_u16();
        let allow = response
            .headers()
            .get("allow")
            .map(|value| value.to_str().unwrap_or("").to_owned());
        let body: Value = serde_json::from_slice(&response.bytes().expect("body"))
            .unwrap_or_else(|error| panic!("{}: body is not JSON: {error}", case.name));
        assert_eq!(status, case.status, "{}: {body}", case.name);
        assert_status_body(&body, case.status, case.message);
        if case.status == 405 {
            assert_eq!(allow.as_deref(), Some("POST"), "{}", case.name);
        }

        // Logged with its reason before the response was sent: the line is
        // the (i+1)-th refusal.
        let refusals = kadmit.logs.wait_for(i + 1, refusal);
        let line = &refusals[i];
        assert_eq!(line["reason"], case.reason, "{}: {line}", case.name);
        assert_eq!(line["status"], case.status, "{}: {line}", case.name);
    }

    // Each bad request was logged exactly once: lines are written before each
    // response, so by now every refusal line is in.
    let refusals: Vec<Value> = kadmit.logs.snapshot().into_iter().filter(refusal).collect();
    assert_eq!(refusals.len(), cases.len(), "{refusals:#?}");

    // ... and counted under its reason.
    for reason in [
        "malformed",
        "missing_request",
        "missing_uid",
        "api_version",
        "kind",
        "too_large",
        "content_type",
        "content_encoding",
        "unknown_rule_set",
        "method",
        "not_found",
    ] {
        let expected = cases.iter().filter(|c| c.reason == reason).count() as f64;
        let sample = format!(r#"kadmit_bad_requests_total{{reason="{reason}"}}"#);
        assert_eq!(kadmit.metric(&sample), expected, "{sample}");
    }

    // The server keeps serving, and `identity` is no encoding at all.
    let (status, _, response) = super::harness::post_json(
        &client,
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{response}");
    let response = client
        .post(kadmit.url("/validate"))
        .header("Content-Type", "application/json")
        .header("Content-Encoding", "identity")
        .body(fixture("create-pod.json"))
        .send()
        .expect("identity POST");
    assert_eq!(response.status(), 200);
    kadmit.assert_no_panic();
}

/// A body without a declared length (chunked) that grows past the limit is
/// cut off by the streaming limit, not only by the Content-Length check.
#[test]
fn a_chunked_body_over_the_limit_gets_413() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--max-body-bytes", "1024"])
        .start();
    let client = super::harness::client(
        &super::harness::roots_from_pem(kadmit.ca_pem()),
        None,
        super::harness::Alpn::Http1,
    );
    // A reader of unknown length makes reqwest send chunked.
    let reader = std::io::repeat(b' ').take(64 * 1024);
    let response = client
        .post(kadmit.url("/validate"))
        .header("Content-Type", "application/json")
        .body(reqwest::blocking::Body::new(reader))
        .send();
    match response {
        Ok(response) => {
            assert_eq!(response.status(), 413);
            let body: Value =
                serde_json::from_slice(&response.bytes().expect("body")).expect("Status body");
            assert_status_body(&body, 413, "larger than the limit of 1024 bytes");
        }
        // The server may answer and close before the client has finished
        // sending; then the client sees a broken pipe, and the log says why.
        Err(error) => assert!(error.is_request() || error.is_body(), "{error}"),
    }
    let line = &kadmit
        .logs
        .wait_for(1, |line| message(line) == "Refused a bad request")[0];
    assert_eq!(line["reason"], "too_large", "{line}");
    kadmit.assert_no_panic();
}

/// A client that sends the head and then stalls gets 408 after
/// --request-timeout-secs instead of holding the connection forever.
#[test]
fn a_stalled_body_times_out_with_408() {
    use std::io::Write as _;

    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--request-timeout-secs", "1"])
        .start();
    let mut stream = super::lifecycle::raw_tls(&kadmit, b"http/1.1");
    write!(
        stream,
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"apiVersion\""
    )
    .expect("write head");
    stream.flush().expect("flush");
    let response = super::lifecycle::read_http_response(&mut stream);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains(r#""reason":"Timeout""#), "{response}");
    let line = &kadmit
        .logs
        .wait_for(1, |line| message(line) == "Refused a bad request")[0];
    assert_eq!(line["reason"], "body_timeout", "{line}");
}
