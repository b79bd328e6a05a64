//! The operations listener's connections (issue 11): the port the liveness
//! probe uses had no connection cap and no bound on an unread answer. 3,000
//! connections that each sent a 120 KB request head and stalled held
//! 446 MB; 400 clients that asked for `/api/denials` and never read it took
//! the process from 50 MB to 1.1 GB. Now a new connection closes the oldest
//! beyond `--ops-max-connections`, an unread answer is cut off, and the
//! answer itself is shared; through it all the probe is answered.

use std::io::{ErrorKind, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::denials::{DENY_ALL, hostile_review};
use super::support::{TRAFFIC_DEADLINE, before, memory, mib};
use crate::server::harness::{Kadmit, bundled_rules, install_provider, post_json, rules_dir};

/// The probe's own bound: the kubelet's default probe timeout is 1 s.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /healthz` on a new connection, as the kubelet sends it, within
/// [`PROBE_TIMEOUT`].
fn probe(kadmit: &Kadmit) {
    install_provider();
    let client = reqwest::blocking::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let url = kadmit.plain_url("/healthz");
    let status = client
        .get(&url)
        .send()
        .unwrap_or_else(|error| panic!("the probe was not answered within 1 s: {error}"))
        .status();
    assert_eq!(status, 200, "the probe");
}

/// A non-blocking connection to the operations listener that has sent as
/// much of `bytes` as the socket took at once. A connection the server has
/// already closed is returned all the same: the attacker does not care.
fn send_and_stall(kadmit: &Kadmit, bytes: &[u8]) -> TcpStream {
    let stream = TcpStream::connect(kadmit.plain_addr()).expect("connect");
    stream.set_nonblocking(true).expect("non-blocking");
    let mut sent = 0;
    while sent < bytes.len() {
        match (&stream).write(&bytes[sent..]) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    stream
}

/// The server side of the connections to `port` on 127.0.0.1 that the
/// kernel still holds, listener excluded, and the answer bytes waiting in
/// their send queues (kernel memory, not in the process's RSS), from
/// `/proc/net/tcp`.
fn server_sockets(port: u16) -> (usize, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let mut sockets = 0;
    let mut queued = 0;
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state), Some(queues)) =
            (fields.get(1), fields.get(3), fields.get(4))
        else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, port)| u16::from_str_radix(port, 16).ok());
        // 0A: LISTEN.
        if local_port != Some(port) || *state == "0A" {
            continue;
        }
        sockets += 1;
        queued += queues
            .split_once(':')
            .and_then(|(tx, _)| u64::from_str_radix(tx, 16).ok())
            .unwrap_or(0);
    }
    (sockets, queued)
}

/// Connections opened in the head test, and the size of each one's head.
const STALLED_HEADS: usize = 1_000;
const HEAD_BYTES: usize = 120 * 1024;

#[test]
fn stalled_request_heads_neither_exhaust_memory_nor_keep_the_probe_out() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    probe(&kadmit);
    let baseline = memory(kadmit.pid()).peak;

    // Most of a head actix would still buffer (its bound is 128 KiB), never
    // finished.
    let mut head = b"GET /healthz HTTP/1.1\r\nHost: kadmit\r\nX-Padding: ".to_vec();
    head.resize(HEAD_BYTES, b'a');
    let deadline = Instant::now() + TRAFFIC_DEADLINE;
    let mut stalled = Vec::with_capacity(STALLED_HEADS);
    for n in 0..STALLED_HEADS {
        before(deadline, "opening the stalled connections");
        stalled.push(send_and_stall(&kadmit, &head));
        if n % 250 == 249 {
            probe(&kadmit);
        }
    }
    probe(&kadmit);

    let peak = memory(kadmit.pid()).peak;
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "{STALLED_HEADS} stalled heads of {} KiB: peak RSS +{:.1} MiB",
        HEAD_BYTES >> 10,
        mib(grown)
    );
    // 64 connections' heads are 8 MiB. Unbounded, these 1,000 held about
    // 150 MB.
    assert!(
        grown < 64 << 20,
        "the peak RSS grew by {:.0} MiB with {STALLED_HEADS} stalled heads",
        mib(grown)
    );
    let evicted = kadmit.metric("kadmit_operations_connections_closed_total{reason=\"evicted\"}");
    assert!(
        evicted >= (STALLED_HEADS / 2) as f64,
        "only {evicted} connections were evicted"
    );
    let open = kadmit.metric("kadmit_operations_connections_open");
    assert!(open <= 128.0, "{open} operations connections open");
    drop(stalled);
    kadmit.assert_no_panic();
}

/// Clients in the unread-answer test, and the denied reviews that fill
/// `/api/denials` first (each fills two entries of about 3 KiB).
const NON_READERS: usize = 300;
const DENIED_REVIEWS: usize = 100;

#[test]
fn clients_that_never_read_their_answer_neither_exhaust_memory_nor_keep_the_probe_out() {
    let rules = rules_dir(&[("deny-all.yaml", DENY_ALL)]);
    let kadmit = Kadmit::with_rules(rules.path()).start();
    let client = kadmit.client();
    let url = kadmit.url("/validate");
    let deadline = Instant::now() + TRAFFIC_DEADLINE;
    for n in 0..DENIED_REVIEWS {
        before(deadline, "sending the denied reviews");
        let (status, _, body) = post_json(&client, &url, hostile_review(n, 4096));
        assert_eq!(status, 200, "{body}");
    }
    let (status, denials) = kadmit.get_plain("/api/denials");
    assert_eq!(status, 200);
    assert!(
        denials.len() > 400 << 10,
        "/api/denials is only {} bytes; the test needs a large answer",
        denials.len()
    );
    probe(&kadmit);
    let baseline = memory(kadmit.pid()).peak;

    // Each asks for the whole ring and reads nothing: the kernel takes a
    // little of the answer into the socket buffers, the rest waits.
    let request = b"GET /api/denials HTTP/1.1\r\nHost: kadmit\r\n\r\n";
    let mut non_readers = Vec::with_capacity(NON_READERS);
    for n in 0..NON_READERS {
        before(deadline, "opening the non-reading connections");
        let stream = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        stream.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        stream
            .connect(&kadmit.plain_addr().into())
            .expect("connect");
        let stream = TcpStream::from(stream);
        (&stream).write_all(request).expect("request");
        non_readers.push(stream);
        if n % 100 == 99 {
            probe(&kadmit);
        }
    }
    probe(&kadmit);

    let grown = memory(kadmit.pid()).peak.saturating_sub(baseline);
    let (sockets, queued) = server_sockets(kadmit.plain_addr().port());
    eprintln!(
        "{NON_READERS} clients not reading a {} KiB answer: peak RSS +{:.1} MiB, \
         {sockets} server sockets holding {:.1} MiB unsent",
        denials.len() >> 10,
        mib(grown),
        mib(queued)
    );
    // Unbounded, the kernel held every client's whole answer (300 x 441 KiB
    // = 130 MiB, charged to the pod's memory like the process's own). Now
    // at most 128 connections with a 128 KiB send buffer each; those reset
    // are gone at once.
    assert!(
        queued < 24 << 20,
        "{:.0} MiB of answers wait in {sockets} server sockets",
        mib(queued)
    );
    // At most 128 connections' write buffers (48 KiB each) hold a piece.
    // Unshared and uncut, each of the 300 held its own copy of the answer.
    assert!(
        grown < 64 << 20,
        "the peak RSS grew by {:.0} MiB with {NON_READERS} clients not reading a {} KiB answer",
        mib(grown),
        denials.len() >> 10
    );
    // Each newcomer beyond the cap closed the oldest, its answer unread.
    let closed = kadmit.metric("kadmit_operations_connections_closed_total{reason=\"evicted\"}")
        + kadmit.metric("kadmit_operations_connections_closed_total{reason=\"write_stalled\"}");
    assert!(
        closed >= (NON_READERS / 2) as f64,
        "only {closed} non-reading connections were closed"
    );
    drop(non_readers);
    kadmit.assert_no_panic();
}

/// Reviews of `RESOURCES` resources, four operations each, on four paths:
/// the largest `/metrics` the documented caps allow them to make.
const RESOURCES: usize = 100;

#[test]
fn clients_asking_for_a_large_metrics_page_without_reading_it_keep_the_probe_answered() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let client = kadmit.client();
    let deadline = Instant::now() + TRAFFIC_DEADLINE;
    let mut review: serde_json::Value =
        serde_json::from_slice(&crate::server::harness::fixture("create-configmap.json"))
            .expect("fixture is JSON");
    // Each of the bundled rule sets counts a review to a grouped path.
    let sets = "pod-security-baseline.images.required-labels.pod-defaults.log-shipper.\
                ownership.services";
    let (validate, mutate) = (format!("/validate/{sets}"), format!("/mutate/{sets}"));
    for path in ["/validate", &validate, "/mutate", &mutate] {
        let url = kadmit.url(path);
        for resource in 0..RESOURCES {
            for operation in ["CREATE", "UPDATE", "DELETE", "CONNECT"] {
                before(deadline, "sending the reviews");
                review["request"]["resource"]["resource"] = format!("r{resource}").into();
                review["request"]["operation"] = operation.into();
                let body = serde_json::to_vec(&review).expect("serialize");
                let (status, _, answer) = post_json(&client, &url, body);
                assert_eq!(status, 200, "{answer}");
            }
        }
    }
    let page = kadmit.metrics_page();
    assert!(
        page.len() > 400 << 10,
        "/metrics is only {} bytes; the test needs a large page",
        page.len()
    );
    probe(&kadmit);
    let baseline = memory(kadmit.pid()).peak;

    // One client asks for the page again and again, never reading it, with
    // at most 16 connections open: each used to be rendered afresh (15 ms
    // for 800 KB, much more in a debug build), and nine probes in ten
    // timed out.
    let addr = kadmit.plain_addr();
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flooder = {
        let flooding = std::sync::Arc::clone(&flooding);
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            let mut sent = 0_usize;
            while flooding.load(std::sync::atomic::Ordering::Relaxed) && sent < 5_000 {
                let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
                    continue;
                };
                let _ = (&stream).write_all(b"GET /metrics HTTP/1.1\r\nHost: kadmit\r\n\r\n");
                open.push_back(stream);
                if open.len() > 16 {
                    open.pop_front();
                }
                sent += 1;
                // About as fast as one scripted client sends them.
                std::thread::park_timeout(Duration::from_millis(5));
            }
            sent
        })
    };
    // The probes themselves pace the test: ten, each within 1 s.
    for _ in 0..10 {
        before(deadline, "probing during the flood");
        probe(&kadmit);
        std::thread::park_timeout(Duration::from_millis(200));
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let sent = flooder.join().expect("flooder");
    let grown = memory(kadmit.pid()).peak.saturating_sub(baseline);
    eprintln!(
        "{sent} unread /metrics requests of {} KiB: peak RSS +{:.1} MiB",
        page.len() >> 10,
        mib(grown)
    );
    assert!(sent >= 100, "only {sent} requests were sent");
    assert!(
        grown < 64 << 20,
        "the peak RSS grew by {:.0} MiB",
        mib(grown)
    );
    kadmit.assert_no_panic();
}

#[test]
fn malformed_request_heads_do_not_become_a_log_line_each() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let deadline = Instant::now() + TRAFFIC_DEADLINE;
    // actix-http logged an error for each: 6,500 lines a second from one
    // client on the operations listener.
    for _ in 0..500 {
        before(deadline, "sending the malformed heads");
        let mut stream = TcpStream::connect(kadmit.plain_addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
            .write_all(b"GET / HTTP/1.1\r\nbad header\r\n\r\n")
            .expect("send");
        let mut answer = [0_u8; 12];
        std::io::Read::read_exact(&mut stream, &mut answer).expect("an answer");
        assert_eq!(
            &answer,
            b"HTTP/1.1 400",
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    probe(&kadmit);
    let lines = kadmit
        .log_lines()
        .iter()
        .filter(|line| line.contains("actix_http"))
        .count();
    assert!(
        (1..=100).contains(&lines),
        "{lines} actix-http lines for 500 malformed heads"
    );
    // The lines left out are counted.
    let dropped = kadmit.metric("kadmit_log_lines_dropped_total");
    assert!(
        dropped >= (500 - lines) as f64,
        "{dropped} lines counted as dropped, {lines} written, of 500"
    );
    kadmit.assert_no_panic();
}
