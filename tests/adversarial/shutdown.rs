//! Shutdown under load (issue 11, item 9): SIGTERM while a worker runs a
//! slow review once dropped the reviews queued behind it and overran the
//! shutdown timeout; an idle keep-alive connection held the process for the
//! whole timeout; new connections were refused at once although load
//! balancers still send them for a few seconds. The rolling restart behind a
//! real load balancer is in `rolling_restart.rs`.

use std::io::Write as _;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{QUADRATIC_RULES, cpu_seconds, pod_with_containers};
use crate::server::harness::{
    Alpn, Kadmit, bundled_rules, client, fixture, message, post_json, roots_from_pem, rules_dir,
};
use crate::server::lifecycle::{raw_tls, read_http_response};

fn uid_of(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body).expect("JSON")["request"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned()
}

/// Sockets process `pid` holds open (listeners and accepted connections).
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .filter_map(Result::ok)
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// Waits (bounded) until `condition` holds, polling.
fn wait_for(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !condition() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the one worker is busy evaluating (the server has used
/// `seconds` of CPU more than `before`).
fn wait_until_busy(kadmit: &Kadmit, before: f64, seconds: f64) {
    wait_for(
        "the slow review to be evaluated",
        Duration::from_secs(60),
        || cpu_seconds(kadmit.pid()) - before >= seconds,
    );
}

#[test]
fn sigterm_answers_the_reviews_queued_behind_a_slow_one() {
    let rules = rules_dir(&[("quadratic.yaml", QUADRATIC_RULES)]);
    let kadmit = Kadmit::with_rules(rules.path())
        .args([
            "--shutdown-delay-secs",
            "0",
            "--shutdown-timeout-secs",
            "120",
        ])
        .args(["--max-evaluation-steps", "1000000000"])
        .start();
    let roots = roots_from_pem(kadmit.ca_pem());
    let url = kadmit.url("/validate");

    // 4,000 containers: 16 million comparisons, seconds of CPU in a debug
    // build, on the only worker.
    let slow_client = client(&roots, None, Alpn::Http1);
    let slow_url = url.clone();
    let cpu_before = cpu_seconds(kadmit.pid());
    let slow = thread::spawn(move || {
        let answer = post_json(&slow_client, &slow_url, pod_with_containers(4_000));
        (answer, Instant::now())
    });
    wait_until_busy(&kadmit, cpu_before, 0.3);

    // Three more reviews on connections of their own (two HTTP/1.1, one
    // HTTP/2): the accept thread takes them, but the worker is busy, so
    // they wait in its queue, handshake not even begun.
    let sockets_before = sockets(kadmit.pid());
    let queued: Vec<_> = [Alpn::Http1, Alpn::H2AndHttp1, Alpn::Http1]
        .into_iter()
        .map(|alpn| {
            let client = client(&roots, None, alpn);
            let url = url.clone();
            thread::spawn(move || {
                let body = fixture("create-pod.json");
                let uid = uid_of(&body);
                (post_json(&client, &url, body), uid, Instant::now())
            })
        })
        .collect();
    wait_for(
        "the three connections to be accepted",
        Duration::from_secs(30),
        || sockets(kadmit.pid()) >= sockets_before + 3,
    );

    let signalled = Instant::now();
    kadmit.signal("TERM");

    let ((status, _, response), slow_done) = slow.join().expect("slow client");
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    assert!(
        slow_done > signalled,
        "the slow review ended before SIGTERM; make it slower"
    );
    for client in queued {
        let ((status, _, response), uid, done) = client.join().expect("queued client");
        assert_eq!(status, 200, "a queued review was not answered: {response}");
        assert_eq!(response["response"]["uid"], uid.as_str(), "{response}");
        assert!(done > signalled, "answered before SIGTERM: not queued");
    }
    let logs = kadmit.logs.clone();
    let status = kadmit.wait_exit();
    assert!(status.success(), "kadmit exited with {status}");
    // The server has exited, but the test may not have read the end of
    // its log yet: wait for the line (a clean stop logs it last).
    logs.wait_for(1, |line| message(line) == "Stopped");
}

#[test]
fn the_shutdown_timeout_is_enforced_on_a_busy_worker() {
    let rules = rules_dir(&[("quadratic.yaml", QUADRATIC_RULES)]);
    let kadmit = Kadmit::with_rules(rules.path())
        .args(["--shutdown-delay-secs", "0", "--shutdown-timeout-secs", "1"])
        .args(["--max-evaluation-steps", "100000000000"])
        .start();
    let roots = roots_from_pem(kadmit.ca_pem());
    let slow_client = client(&roots, None, Alpn::Http1);
    let url = kadmit.url("/validate");
    let cpu_before = cpu_seconds(kadmit.pid());
    // 15,000 containers: 225 million comparisons, far longer than the
    // timeout (about a minute in a debug build).
    let slow = thread::spawn(move || {
        slow_client
            .post(url)
            .header("Content-Type", "application/json")
            .body(pod_with_containers(15_000))
            .send()
            .map(|response| response.status().as_u16())
    });
    wait_until_busy(&kadmit, cpu_before, 0.5);

    let signalled = Instant::now();
    kadmit.signal("TERM");
    let logs = kadmit.logs.clone();
    let status = kadmit.wait_exit();
    let took = signalled.elapsed();
    // One second of timeout, one of forced stop, and a wide margin for a
    // loaded machine; the review alone needs far more.
    assert!(
        took < Duration::from_secs(15),
        "exit took {took:?} after SIGTERM"
    );
    assert_eq!(status.code(), Some(2), "kadmit exited with {status}");
    // The cut review is in the log (read to its end: wait for the line).
    logs.wait_for(1, |line| {
        message(line).starts_with("Stopped with connections still open")
            && line["open_connections"] == 1
    });
    let answer = slow.join().expect("slow client");
    assert!(answer.is_err(), "the cut review got an answer: {answer:?}");
}

#[test]
fn the_drain_keeps_serving_asks_connections_to_move_then_refuses() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--shutdown-delay-secs",
            "6",
            "--shutdown-timeout-secs",
            "20",
        ])
        .start();
    let body = fixture("create-pod.json");
    let request = |body: &[u8]| {
        let mut head = format!(
            "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        head.extend_from_slice(body);
        head
    };

    // A keep-alive HTTP/1.1 connection and an idle HTTP/2 one, both open
    // when SIGTERM comes.
    let mut kept = raw_tls(&kadmit, b"http/1.1");
    kept.write_all(&request(&body)).expect("write");
    let first = read_http_response(&mut kept);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(
        !first.to_lowercase().contains("connection: close"),
        "{first}"
    );
    let h2 = kadmit.client();
    let (status, version, _) = post_json(&h2, &kadmit.url("/validate"), body.clone());
    assert_eq!((status.as_u16(), version), (200, reqwest::Version::HTTP_2));

    let signalled = Instant::now();
    kadmit.signal("TERM");
    kadmit
        .logs
        .wait_for(1, |line| message(line).starts_with("Shutting down"));
    let (status, text) = kadmit.get_plain("/readyz");
    assert_eq!(status, 503, "{text}");

    // The open HTTP/1.1 connection: answered, then closed.
    kept.write_all(&request(&body))
        .expect("write during the drain");
    let second = read_http_response(&mut kept);
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(
        second.to_lowercase().contains("connection: close"),
        "no Connection: close during the drain: {second}"
    );
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut kept, &mut rest);
    assert!(rest.is_empty(), "more after the last answer: {rest:?}");

    // New connections are still served while load balancers may send them.
    for alpn in [Alpn::H2AndHttp1, Alpn::Http1] {
        let fresh = client(&roots_from_pem(kadmit.ca_pem()), None, alpn);
        let (status, _, response) = post_json(&fresh, &kadmit.url("/validate"), body.clone());
        assert_eq!(status, 200, "refused during the drain: {response}");
    }
    assert!(
        kadmit
            .logs
            .snapshot()
            .iter()
            .all(|line| !message(line).starts_with("Stopped accepting")),
        "the drain ended before the checks ran; they prove nothing"
    );

    // After the drain: new connections are refused at once.
    kadmit
        .logs
        .wait_for(1, |line| message(line).starts_with("Stopped accepting"));
    let refused = TcpStream::connect_timeout(&kadmit.tls_addr(), Duration::from_secs(5));
    assert!(
        refused
            .as_ref()
            .is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionRefused),
        "connect after the drain: {refused:?}"
    );

    // The idle HTTP/2 connection got GOAWAY during the drain and does not
    // hold the process: it exits right after the drain.
    let status = kadmit.wait_exit();
    assert!(status.success(), "kadmit exited with {status}");
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_secs(6) && took < Duration::from_secs(14),
        "exit {took:?} after SIGTERM with a 6 s drain and nothing in flight"
    );
    drop(h2);
}
