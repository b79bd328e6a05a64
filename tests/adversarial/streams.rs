//! One HTTP/2 connection opening tens of thousands of streams at once: the
//! server advertises its stream limit, refuses the streams beyond it, and
//! its memory stays bounded (unbounded, 50,000 streams took 1.8 GB).
//!
//! The client writes raw frames: a conforming HTTP/2 client library would
//! itself hold back the streams beyond the advertised limit, which is exactly
//! what an attacker does not do.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::support::{mib, rss_bytes, runtime, tls_connect};
use crate::server::harness::{DEADLINE, Kadmit, bundled_rules, fixture, post_json};

/// Streams the attacker opens on its one connection.
const STREAMS: u32 = 50_000;
/// The server's default concurrent-stream limit.
const LIMIT: u32 = 100;
/// Growth of the server's memory the attack may cause.
const MAX_GROWTH: u64 = 64 << 20;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const REFUSED_STREAM: u32 = 0x7;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("frame length");
    let mut bytes = length.to_be_bytes()[1..].to_vec();
    bytes.push(kind);
    bytes.push(flags);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The HPACK block of `POST /validate` declaring a 100-byte JSON body that
/// never comes, so each accepted stream waits in the handler. Every field is
/// a static-table reference or a literal without indexing.
fn review_head() -> Vec<u8> {
    let mut block = vec![0x83, 0x87]; // :method POST, :scheme https
    for (prefix, value) in [
        (&[0x04][..], "/validate"),              // :path
        (&[0x01][..], "127.0.0.1"),              // :authority
        (&[0x0f, 0x10][..], "application/json"), // content-type (31)
        (&[0x0f, 0x0d][..], "100"),              // content-length (28)
    ] {
        block.extend_from_slice(prefix);
        block.push(u8::try_from(value.len()).expect("short value"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// What the server sent that the test looks at.
#[derive(Debug)]
enum Event {
    Settings { max_concurrent_streams: Option<u32> },
    PingAck,
    Refused,
    GoAway { code: u32 },
    Closed,
}

/// The next event, failing the test at the deadline.
async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(DEADLINE, events.recv())
        .await
        .expect("the server answered in time")
        .unwrap_or(Event::Closed)
}

/// Reads frames until the connection ends, reporting the interesting ones.
async fn read_frames(
    mut reader: impl tokio::io::AsyncRead + Unpin,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut header = [0u8; 9];
    loop {
        if reader.read_exact(&mut header).await.is_err() {
            let _ = events.send(Event::Closed);
            return;
        }
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let (kind, flags) = (header[3], header[4]);
        let mut payload = vec![0u8; length];
        if reader.read_exact(&mut payload).await.is_err() {
            let _ = events.send(Event::Closed);
            return;
        }
        let code = || u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let event = match kind {
            SETTINGS if flags & ACK == 0 => Some(Event::Settings {
                max_concurrent_streams: payload.chunks_exact(6).find_map(|entry| {
                    (u16::from_be_bytes([entry[0], entry[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS)
                        .then(|| u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]))
                }),
            }),
            PING if flags & ACK != 0 => Some(Event::PingAck),
            RST_STREAM if payload.len() == 4 && code() == REFUSED_STREAM => Some(Event::Refused),
            GOAWAY if payload.len() >= 8 => Some(Event::GoAway {
                code: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
            }),
            _ => None,
        };
        if let Some(event) = event
            && events.send(event).is_err()
        {
            return;
        }
    }
}

#[test]
fn a_stream_flood_on_one_connection_is_refused_beyond_the_limit_and_memory_stays_bounded() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = rss_bytes(&kadmit);

    let (advertised, refused, goaway) = runtime().block_on(async {
        let tls = tls_connect(&kadmit, b"h2").await;
        let (reader, mut writer) = tokio::io::split(tls);
        let (events_tx, mut events) = mpsc::unbounded_channel();
        tokio::spawn(read_frames(reader, events_tx));

        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        writer.write_all(&hello).await.expect("preface");
        let advertised = loop {
            match next(&mut events).await {
                Event::Settings {
                    max_concurrent_streams,
                } => break max_concurrent_streams,
                Event::Closed => panic!("the server closed before its SETTINGS"),
                _ => {}
            }
        };
        writer
            .write_all(&frame(SETTINGS, ACK, 0, &[]))
            .await
            .expect("settings ack");

        // The flood, in batches; the server may end the connection midway.
        let head = review_head();
        let mut batch = Vec::new();
        let mut stream = 1u32;
        'flood: while stream < 2 * STREAMS {
            batch.clear();
            for _ in 0..500 {
                batch.extend(frame(HEADERS, END_HEADERS, stream, &head));
                stream += 2;
            }
            if writer.write_all(&batch).await.is_err() {
                break 'flood;
            }
        }
        // Frames are handled in order: the PING's answer means every stream
        // before it has been dealt with.
        let _ = writer.write_all(&frame(PING, 0, 0, b"kadmit!!")).await;
        let mut refused = 0u32;
        let mut goaway = None;
        loop {
            match next(&mut events).await {
                Event::PingAck | Event::Closed => break,
                Event::Refused => refused += 1,
                Event::GoAway { code } => goaway = Some(code),
                Event::Settings { .. } => {}
            }
        }
        // Keep the connection (and its accepted streams) open while the
        // server's memory is read.
        let _hold = writer;
        (advertised, refused, goaway)
    });
    let during = rss_bytes(&kadmit);
    eprintln!(
        "stream flood: rss {:.1} -> {:.1} MiB, {refused} refused, goaway {goaway:?}",
        mib(before),
        mib(during)
    );

    assert_eq!(advertised, Some(LIMIT), "SETTINGS_MAX_CONCURRENT_STREAMS");
    assert!(
        refused > 0 || goaway.is_some(),
        "the streams beyond the limit were neither refused nor the connection ended"
    );
    assert!(
        during.saturating_sub(before) < MAX_GROWTH,
        "{STREAMS} streams grew the server from {:.1} MiB to {:.1} MiB",
        mib(before),
        mib(during)
    );

    // And the server still answers a review on a new connection, promptly.
    let started = Instant::now();
    let (status, _, body) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    kadmit.assert_no_panic();
}
