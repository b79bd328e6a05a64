//! Thousands of TCP connections that send the first bytes of a TLS record
//! and stall: a new client must still complete its handshake and get its
//! review answered well within the API server's webhook timeout (with a
//! pausing accept loop it took 2–9 s).

use std::io::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::server::harness::{Kadmit, bundled_rules, fixture, post_json};

/// Stalled connections the attacker holds.
const STALLED: usize = 2_000;
/// The API server's default webhook timeout is 10 s, and issue 11's
/// webhooks use 5 s; a review must fit well inside.
const BOUND: Duration = Duration::from_secs(2);

#[test]
fn stalled_handshakes_do_not_delay_a_new_client() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    // Warm the client's own one-time costs (provider, CA parsing) outside
    // the timed part.
    let roots = crate::server::harness::roots_from_pem(kadmit.ca_pem());

    // A TLS handshake record header announcing 200 bytes, then nothing.
    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let Ok(mut stream) = TcpStream::connect(kadmit.tls_addr()) else {
            // The backlog is full: the attack is at its strongest.
            break;
        };
        let _ = stream.write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8]);
        stalled.push(stream);
    }
    assert!(
        stalled.len() >= STALLED / 2,
        "only {} connections",
        stalled.len()
    );

    let client =
        crate::server::harness::client(&roots, None, crate::server::harness::Alpn::H2AndHttp1);
    let started = Instant::now();
    let (status, _, body) = post_json(
        &client,
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    let elapsed = started.elapsed();
    eprintln!(
        "{} stalled connections: a new client's review took {elapsed:?}",
        stalled.len()
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        elapsed < BOUND,
        "a new client waited {elapsed:?} behind {} stalled connections",
        stalled.len()
    );
    drop(stalled);
    kadmit.assert_no_panic();
}
