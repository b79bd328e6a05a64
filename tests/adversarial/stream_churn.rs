//! HTTP/2 frames that cost the server work without ever making a request:
//! streams reset as soon as they are opened ("rapid reset", CVE-2023-44487),
//! a body sent as empty DATA frames, which never brings a byte
//! (CVE-2019-9518), a header block continued without end (CVE-2024-27316),
//! and control frames (PINGs, SETTINGS, PRIORITY) from a client that never
//! reads what they ask the server to send back. None may grow the server's
//! memory, hold a stream past the body timeout, or keep another client's
//! reviews waiting.
//!
//! The client writes raw frames (see `streams`): a conforming client
//! library does none of this.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use super::streams::{
    CANCEL, DATA, END_HEADERS, Event, HEADERS, PING, RST_STREAM, SETTINGS, frame, h2_connect,
    head_with, next,
};
use super::support::{
    Memory, PROMPT, TRAFFIC_DEADLINE, assert_answered_promptly, assert_ended_at_timeout, memory,
    mib, runtime,
};
use crate::server::harness::{DEADLINE, Kadmit, bundled_rules, fixture, post_json};

/// How long each flood lasts.
const FLOOD_TIME: Duration = Duration::from_secs(3);
/// Streams opened and reset at most, over every connection of the flood.
const MAX_RESET_STREAMS: u32 = 300_000;
/// Growth of the server's peak memory any of these floods may cause: a leaked
/// stream (its task, its entry among the open streams) is a few KiB, so
/// hundreds of thousands of them would be far above it.
const MAX_GROWTH: u64 = 48 << 20;
/// Reviews sent during a flood, at most.
const MAX_REVIEWS: usize = 400;

/// Sends reviews over one HTTP/2 connection (as the API server does) while
/// `flooding` holds, and returns each one's status and time.
fn reviews_while(kadmit: &Kadmit, flooding: &AtomicBool) -> Vec<(u16, Duration)> {
    let client = kadmit.client();
    let mut reviews = Vec::new();
    while reviews.len() < MAX_REVIEWS && flooding.load(Ordering::Relaxed) {
        let started = Instant::now();
        let (status, _, _) = post_json(
            &client,
            &kadmit.url("/validate"),
            fixture("create-pod.json"),
        );
        reviews.push((status.as_u16(), started.elapsed()));
    }
    reviews
}

/// Runs `flood` on a thread of its own while a client sends reviews
/// ([`reviews_while`]) until it is done; returns what `flood` returned and
/// the reviews.
fn beside_reviews<T: Send>(
    kadmit: &Kadmit,
    flood: impl FnOnce() -> T + Send,
) -> (T, Vec<(u16, Duration)>) {
    let flooding = AtomicBool::new(true);
    std::thread::scope(|scope| {
        let flood = scope.spawn(|| {
            let done = flood();
            flooding.store(false, Ordering::Relaxed);
            done
        });
        let reviews = reviews_while(kadmit, &flooding);
        (flood.join().expect("the flood"), reviews)
    })
}

/// The server's peak memory grew by less than [`MAX_GROWTH`] during `flood`.
fn assert_peak_held(flood: &str, before: &Memory, after: &Memory) {
    assert!(
        after.peak.saturating_sub(before.peak) < MAX_GROWTH,
        "{flood} took the server's peak from {:.1} MiB to {:.1} MiB",
        mib(before.peak),
        mib(after.peak)
    );
}

/// Every review sent during `flood` was answered 200 within [`PROMPT`],
/// and enough were sent to tell.
fn assert_reviews_answered(flood: &str, reviews: &[(u16, Duration)]) {
    let slowest = reviews
        .iter()
        .map(|(_, took)| *took)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{flood}: {} reviews answered meanwhile, the slowest in {slowest:?}",
        reviews.len()
    );
    assert!(
        reviews.len() >= 5,
        "only {} reviews sent during the {flood}",
        reviews.len()
    );
    for (status, took) in reviews {
        assert_eq!(*status, 200, "a review during the {flood}");
        assert!(*took < PROMPT, "a review during the {flood} took {took:?}");
    }
}

/// When the flood's client resets the streams it opens.
#[derive(Debug, Clone, Copy)]
enum Reset {
    /// In the same write as their heads, before the server has taken them:
    /// h2 ends the connection past `MAX_PENDING_ACCEPT_RESETS` of those.
    AtOnce,
    /// Once the server has taken every stream of a round (its handlers wait
    /// for their bodies), which the answer to a PING sent after their
    /// heads tells: each round opens as many handlers as the connection
    /// allows, and no pending-accept count sees them.
    AfterAcceptance,
}

impl Reset {
    /// The streams the flood opens at most and the time it may take. The
    /// flood before acceptance ends at its time. The one after ends at its
    /// count, which passes the process's bound of 1,024 open streams four
    /// times, so that streams left behind would show (a handler that kept
    /// waiting after its reset made 5,876 evictions in 6,900 streams).
    fn bounds(self) -> (u32, Duration) {
        match self {
            Reset::AtOnce => (MAX_RESET_STREAMS, FLOOD_TIME),
            Reset::AfterAcceptance => (AFTER_ACCEPTANCE_STREAMS, TRAFFIC_DEADLINE),
        }
    }

    /// The fewest streams a flood must have opened to tell anything.
    fn enough(self) -> u32 {
        match self {
            Reset::AtOnce => 10 * STREAMS_PER_ROUND,
            Reset::AfterAcceptance => AFTER_ACCEPTANCE_STREAMS,
        }
    }
}

/// Streams the flood opens per round: the server's concurrent-stream limit.
const STREAMS_PER_ROUND: u32 = 100;
/// Streams the flood after acceptance opens.
const AFTER_ACCEPTANCE_STREAMS: u32 = 4_200;

/// Opens streams that declare a body (so each handler would wait for it)
/// and resets them, `how`, within its [`Reset::bounds`]; a connection the
/// server ends is replaced, as an attacker would. Returns the streams
/// opened, the connections used and how many the server ended.
async fn reset_flood(kadmit: &Kadmit, how: Reset) -> (u32, u32, u32) {
    let head = head_with("/validate", 100, 0);
    let reset = CANCEL.to_be_bytes();
    let (mut opened, mut connections, mut ended) = (0u32, 0u32, 0u32);
    let started = Instant::now();
    let (streams, time) = how.bounds();
    let flooding = |opened: u32| started.elapsed() < time && opened < streams;
    'connections: while flooding(opened) {
        let (mut writer, mut events, _) = h2_connect(kadmit, &[]).await;
        connections += 1;
        let mut stream = 1u32;
        let mut batch = Vec::new();
        while flooding(opened) {
            batch.clear();
            let first = stream;
            for _ in 0..STREAMS_PER_ROUND {
                batch.extend(frame(HEADERS, END_HEADERS, stream, &head));
                if let Reset::AtOnce = how {
                    batch.extend(frame(RST_STREAM, 0, stream, &reset));
                }
                stream += 2;
            }
            if let Reset::AfterAcceptance = how {
                batch.extend(frame(PING, 0, 0, b"accepted"));
            }
            if writer.write_all(&batch).await.is_err() {
                ended += 1;
                continue 'connections;
            }
            loop {
                match events.try_recv() {
                    Ok(Event::GoAway { .. } | Event::Closed) => {
                        ended += 1;
                        continue 'connections;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            if let Reset::AfterAcceptance = how {
                loop {
                    match next(&mut events).await {
                        Event::PingAck => break,
                        Event::GoAway { .. } | Event::Closed => {
                            ended += 1;
                            continue 'connections;
                        }
                        _ => {}
                    }
                }
                batch.clear();
                for id in (first..stream).step_by(2) {
                    batch.extend(frame(RST_STREAM, 0, id, &reset));
                }
                if writer.write_all(&batch).await.is_err() {
                    ended += 1;
                    continue 'connections;
                }
            }
            opened += STREAMS_PER_ROUND;
        }
    }
    (opened, connections, ended)
}

/// Runs a reset flood `how` beside a client sending reviews, and checks
/// the server's memory, the reviews and that no stream was left behind.
fn check_reset_flood(how: Reset) {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = memory(kadmit.pid());
    let ((opened, connections, ended), reviews) =
        beside_reviews(&kadmit, || runtime().block_on(reset_flood(&kadmit, how)));
    let after = memory(kadmit.pid());
    eprintln!(
        "rapid reset ({how:?}): {opened} streams opened and reset on {connections} connections \
         ({ended} ended by the server); peak {:.1} -> {:.1} MiB, rss now {:.1} MiB",
        mib(before.peak),
        mib(after.peak),
        mib(after.rss)
    );
    assert!(
        opened >= how.enough(),
        "the flood opened only {opened} streams"
    );
    assert_peak_held(&format!("{opened} reset streams"), &before, &after);
    assert_reviews_answered("rapid reset flood", &reviews);
    // A reset stream leaves no open stream behind. No more than a round's
    // streams and a review's are open at once, far under the process's
    // bound of 1,024 open streams: had reset streams stayed among them,
    // newer ones would have ended them (evicted) or been refused.
    for reason in ["evicted", "refused"] {
        assert_eq!(
            kadmit.metric(&format!(
                "kadmit_streams_reset_total{{reason=\"{reason}\"}}"
            )),
            0.0,
            "streams {reason} after {opened} reset ones"
        );
    }
    assert_answered_promptly(&kadmit);
    // h2 warned about each connection, unthrottled: 4,673 lines in 10 s
    // from one client.
    let h2_lines = kadmit
        .log_lines()
        .iter()
        .filter(|line| line.contains("h2::"))
        .count();
    assert_eq!(h2_lines, 0, "h2 logged {h2_lines} lines about the flood");
    kadmit.assert_no_panic();
}

#[test]
fn streams_reset_before_the_server_takes_them_leave_nothing_behind() {
    check_reset_flood(Reset::AtOnce);
}

#[test]
fn streams_reset_once_their_handlers_wait_leave_nothing_behind() {
    check_reset_flood(Reset::AfterAcceptance);
}

/// The body timeout the empty-frame test runs the server with.
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// Empty DATA frames per write.
const EMPTY_FRAMES_PER_WRITE: usize = 1_000;

#[test]
fn a_body_of_empty_data_frames_ends_at_the_body_timeout_and_reviews_are_answered() {
    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--request-timeout-secs",
            &BODY_TIMEOUT.as_secs().to_string(),
        ])
        .start();
    let before = memory(kadmit.pid());
    let ((frames, ended), reviews) = beside_reviews(&kadmit, || {
        runtime().block_on(async {
            let (mut writer, mut events, _) = h2_connect(&kadmit, &[]).await;
            // One stream declaring a 100-byte body, then empty DATA
            // frames on it, none ending it, until the server answers
            // or resets it, or twice the body timeout has passed.
            writer
                .write_all(&frame(
                    HEADERS,
                    END_HEADERS,
                    1,
                    &head_with("/validate", 100, 0),
                ))
                .await
                .expect("head");
            let (ended_tx, mut ended) = mpsc::unbounded_channel();
            let opened = Instant::now();
            tokio::spawn(async move {
                loop {
                    let event = tokio::time::timeout(DEADLINE, events.recv()).await;
                    let event = match event {
                        Ok(Some(event)) => event,
                        Ok(None) | Err(_) => Event::Closed,
                    };
                    if let Event::Answered { stream: 1, .. }
                    | Event::Reset { stream: 1, .. }
                    | Event::GoAway { .. }
                    | Event::Closed = event
                    {
                        let _ = ended_tx.send((opened.elapsed(), format!("{event:?}")));
                        return;
                    }
                }
            });
            let empty = frame(DATA, 0, 1, &[]).repeat(EMPTY_FRAMES_PER_WRITE);
            let mut frames = 0usize;
            let ended = loop {
                if let Ok(ended) = ended.try_recv() {
                    break Some(ended);
                }
                if opened.elapsed() > 2 * BODY_TIMEOUT || writer.write_all(&empty).await.is_err() {
                    break tokio::time::timeout(DEADLINE, ended.recv())
                        .await
                        .ok()
                        .flatten();
                }
                frames += EMPTY_FRAMES_PER_WRITE;
            };
            (frames, ended)
        })
    });
    let after = memory(kadmit.pid());
    eprintln!(
        "empty DATA frames: {frames} sent; the stream ended {ended:?}; peak {:.1} -> {:.1} MiB",
        mib(before.peak),
        mib(after.peak)
    );
    let (took, how) = ended.expect("the server ended the stream of empty frames");
    // Answered 408 at the body timeout: empty frames do not extend it.
    assert!(
        how.starts_with("Answered"),
        "the stream of empty frames ended otherwise: {how}"
    );
    assert_ended_at_timeout("the stream of empty frames", took, BODY_TIMEOUT);
    assert!(
        frames >= 10 * EMPTY_FRAMES_PER_WRITE,
        "only {frames} empty frames were sent"
    );
    assert_peak_held(&format!("{frames} empty frames"), &before, &after);
    assert_reviews_answered("empty DATA frame flood", &reviews);
    assert_answered_promptly(&kadmit);
    kadmit.assert_no_panic();
}

/// HTTP/2's CONTINUATION frame type.
const CONTINUATION: u8 = 0x9;
/// HTTP/2's PRIORITY frame type.
const PRIORITY: u8 = 0x2;
/// Header-block bytes the continuation flood sends at most: 4,000 times
/// the 16 KiB header list the server allows.
const MAX_CONTINUATION_BYTES: usize = 64 << 20;

/// One HEADERS frame without END_HEADERS, then CONTINUATION frames that
/// never end the block (CVE-2024-27316 and its kin): a server that keeps
/// the block until it ends holds all of it. The block is refused once it
/// passes the header list the server allows, and the connection ends.
#[test]
fn a_header_block_continued_without_end_ends_its_connection() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = memory(kadmit.pid());
    let (sent, ended) = runtime().block_on(async {
        let (mut writer, mut events, _) = h2_connect(&kadmit, &[]).await;
        writer
            .write_all(&frame(HEADERS, 0, 1, &head_with("/validate", 100, 0)))
            .await
            .expect("head");
        // Fields of a two-character name and an empty value, each new.
        let letters = b"abcdefghijklmnopqrstuvwxyz";
        let mut fragment = Vec::new();
        for i in 0..3_000 {
            let name = [letters[i / 26 % 26], letters[i % 26]];
            fragment.extend_from_slice(&[0x00, 0x02, name[0], name[1], 0x00]);
        }
        let continuation = frame(CONTINUATION, 0, 1, &fragment);
        let mut sent = 0usize;
        let ends = |event: &Event| {
            matches!(
                event,
                Event::GoAway { .. } | Event::Reset { stream: 1, .. } | Event::Closed
            )
        };
        let ended = loop {
            if let Ok(event) = events.try_recv()
                && ends(&event)
            {
                break format!("{event:?}");
            }
            if sent >= MAX_CONTINUATION_BYTES || writer.write_all(&continuation).await.is_err() {
                // The server's answer to the block, at the deadline at most.
                let event = loop {
                    let event = next(&mut events).await;
                    if ends(&event) {
                        break event;
                    }
                };
                break format!("{event:?}");
            }
            sent += fragment.len();
        };
        (sent, ended)
    });
    let after = memory(kadmit.pid());
    eprintln!(
        "continuation flood: {} KiB of header block sent; ended by {ended}; peak {:.1} -> {:.1} MiB",
        sent >> 10,
        mib(before.peak),
        mib(after.peak)
    );
    assert!(
        ended.starts_with("GoAway") || ended.starts_with("Reset"),
        "the endless header block ended otherwise: {ended}"
    );
    assert!(
        sent < MAX_CONTINUATION_BYTES,
        "the server took {} KiB of one header block",
        sent >> 10
    );
    assert_peak_held("an endless header block", &before, &after);
    assert_answered_promptly(&kadmit);
    kadmit.assert_no_panic();
}

/// Control frames each sent this many times at most.
const CONTROL_FRAMES: usize = 2_000_000;

/// PINGs and SETTINGS each ask for an acknowledgement, and PRIORITY frames
/// name streams never opened (CVE-2019-9512, -9515 and -9513): a server
/// that queued every acknowledgement, or kept every priority, for a client
/// that never reads would grow without bound.
#[test]
fn control_frames_from_a_client_that_never_reads_are_bounded() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = memory(kadmit.pid());
    let (sent, reviews) = beside_reviews(&kadmit, || {
        runtime().block_on(async {
            let mut tls = super::support::tls_connect(&kadmit, b"h2").await;
            let mut hello = super::streams::PREFACE.to_vec();
            hello.extend(frame(SETTINGS, 0, 0, &[]));
            tls.write_all(&hello).await.expect("preface");
            let mut batch = Vec::new();
            // Each SETTINGS lists one parameter a hundred times, and a
            // PRIORITY names a stream never opened, each time another.
            let settings = [0x00, 0x03, 0x00, 0x00, 0x00, 0x64].repeat(100);
            for i in 0..1_000u32 {
                batch.extend(frame(PING, 0, 0, b"pingpong"));
                batch.extend(frame(SETTINGS, 0, 0, &settings));
                batch.extend(frame(PRIORITY, 0, 2 * i + 1, &[0, 0, 0, 0, 16]));
            }
            let until = tokio::time::Instant::now() + FLOOD_TIME;
            let mut sent = 0usize;
            while sent < CONTROL_FRAMES
                && matches!(
                    tokio::time::timeout_at(until, tls.write_all(&batch)).await,
                    Ok(Ok(()))
                )
            {
                sent += 1_000;
            }
            sent
        })
    });
    let after = memory(kadmit.pid());
    eprintln!(
        "control frames: {sent} PINGs, SETTINGS of 100 parameters and PRIORITY frames each sent, \
         none read; peak {:.1} -> {:.1} MiB",
        mib(before.peak),
        mib(after.peak)
    );
    assert!(sent >= 10_000, "only {sent} PINGs were sent");
    assert_peak_held(
        &format!("{sent} unread PINGs and SETTINGS"),
        &before,
        &after,
    );
    assert_reviews_answered("control frame flood", &reviews);
    kadmit.assert_no_panic();
}
