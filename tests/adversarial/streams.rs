//! One HTTP/2 connection opening tens of thousands of streams at once: the
//! server advertises its stream limit, refuses the streams beyond it, and
//! its memory stays bounded (unbounded, 50,000 streams took 1.8 GB). Streams
//! of hundreds of tiny headers are answered at once, and an answer whose
//! client opens its window a byte at a time is reset when its time is up.
//! Near the connection cap, streams spread over every connection end the
//! oldest beyond the process's bound, and bodies sent as fast as the server
//! opens windows keep it under the shipped Deployment's memory limit.
//!
//! The client writes raw frames: a conforming HTTP/2 client library would
//! itself hold back the streams beyond the advertised limit, which is exactly
//! what an attacker does not do.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::support::{
    SHIPPED_MEMORY_LIMIT, assert_answered_promptly, assert_flood_held, memory, mib, rss_bytes,
    runtime, tls_connect,
};
use crate::server::harness::{DEADLINE, Kadmit, bundled_rules, fixture, post_json};

/// Streams the attacker opens on its one connection.
const STREAMS: u32 = 50_000;
/// The server's default concurrent-stream limit.
const LIMIT: u32 = 100;
/// Growth of the server's memory the attack may cause.
const MAX_GROWTH: u64 = 64 << 20;

pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const REFUSED_STREAM: u32 = 0x7;
pub(super) const CANCEL: u32 = 0x8;

pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("frame length");
    let mut bytes = length.to_be_bytes()[1..].to_vec();
    bytes.push(kind);
    bytes.push(flags);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The HPACK block of `POST path` declaring a JSON body of `length` bytes
/// (one that never comes leaves each accepted stream waiting in the
/// handler), followed by `extra` header fields of two-character names and
/// empty values. Every field is a static-table reference or a literal
/// without indexing (each extra one a new name: five bytes).
pub(super) fn head_with(path: &str, length: usize, extra: usize) -> Vec<u8> {
    let mut block = vec![0x83, 0x87]; // :method POST, :scheme https
    let length = length.to_string();
    for (prefix, value) in [
        (&[0x04][..], path),                     // :path
        (&[0x01][..], "127.0.0.1"),              // :authority
        (&[0x0f, 0x10][..], "application/json"), // content-type (31)
        (&[0x0f, 0x0d][..], length.as_str()),    // content-length (28)
    ] {
        block.extend_from_slice(prefix);
        block.push(u8::try_from(value.len()).expect("short value"));
        block.extend_from_slice(value.as_bytes());
    }
    let letters = b"abcdefghijklmnopqrstuvwxyz0123456789";
    for i in 0..extra {
        let name = [letters[i / letters.len() % 26], letters[i % letters.len()]];
        block.extend_from_slice(&[0x00, 0x02, name[0], name[1], 0x00]);
    }
    block
}

/// What the server's SETTINGS say of the limits the tests look at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Advertised {
    max_concurrent_streams: Option<u32>,
    initial_window_size: Option<u32>,
}

/// What the server sent that the test looks at.
#[derive(Debug)]
pub(super) enum Event {
    Settings(Advertised),
    /// Window the server opened, on stream 0 for the connection's.
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    PingAck,
    Refused,
    /// A stream reset with another code than `REFUSED_STREAM`.
    Reset {
        stream: u32,
        code: u32,
    },
    /// A response head, and whether it ends its stream (no body follows).
    Answered {
        stream: u32,
        end_stream: bool,
    },
    GoAway {
        code: u32,
    },
    Closed,
}

/// The next event, failing the test at the deadline.
pub(super) async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
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
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        let event = match kind {
            SETTINGS if flags & ACK == 0 => {
                let setting = |id: u16| {
                    payload.chunks_exact(6).find_map(|entry| {
                        (u16::from_be_bytes([entry[0], entry[1]]) == id)
                            .then(|| u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]))
                    })
                };
                Some(Event::Settings(Advertised {
                    max_concurrent_streams: setting(SETTINGS_MAX_CONCURRENT_STREAMS),
                    initial_window_size: setting(SETTINGS_INITIAL_WINDOW_SIZE),
                }))
            }
            WINDOW_UPDATE if payload.len() == 4 => Some(Event::WindowUpdate {
                stream,
                increment: code() & 0x7fff_ffff,
            }),
            PING if flags & ACK != 0 => Some(Event::PingAck),
            RST_STREAM if payload.len() == 4 && code() == REFUSED_STREAM => Some(Event::Refused),
            RST_STREAM if payload.len() == 4 => Some(Event::Reset {
                stream,
                code: code(),
            }),
            HEADERS => Some(Event::Answered {
                stream,
                end_stream: flags & END_STREAM != 0,
            }),
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
        let (mut writer, mut events, advertised) = h2_connect(&kadmit, &[]).await;

        // The flood, in batches; the server may end the connection midway.
        let head = head_with("/validate", 100, 0);
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
                Event::Settings(_)
                | Event::WindowUpdate { .. }
                | Event::Reset { .. }
                | Event::Answered { .. } => {}
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

    assert_eq!(
        advertised.max_concurrent_streams,
        Some(LIMIT),
        "SETTINGS_MAX_CONCURRENT_STREAMS"
    );
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
    assert_answered_promptly(&kadmit);
    kadmit.assert_no_panic();
}

/// The writing half of a client's connection.
pub(super) type Writer =
    tokio::io::WriteHalf<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// Opens a connection, sends the preface and `settings`, and waits for the
/// server's SETTINGS; returns the writing half, the events read and what the
/// server advertised.
pub(super) async fn h2_connect(
    kadmit: &Kadmit,
    settings: &[(u16, u32)],
) -> (Writer, mpsc::UnboundedReceiver<Event>, Advertised) {
    let tls = tls_connect(kadmit, b"h2").await;
    let (reader, mut writer) = tokio::io::split(tls);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    tokio::spawn(read_frames(reader, events_tx));
    let mut payload = Vec::new();
    for (id, value) in settings {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &payload));
    writer.write_all(&hello).await.expect("preface");
    let advertised = loop {
        match next(&mut events).await {
            Event::Settings(advertised) => break advertised,
            Event::Closed => panic!("the server closed before its SETTINGS"),
            _ => {}
        }
    };
    writer
        .write_all(&frame(SETTINGS, ACK, 0, &[]))
        .await
        .expect("settings ack");
    (writer, events, advertised)
}

/// Connections and streams each of the header flood.
const HEADER_FLOOD_CONNECTIONS: usize = 6;
/// Tiny header fields per stream: within the 16 KiB header list, four times
/// the 96 fields a request may have.
const TINY_HEADERS: usize = 400;

#[test]
fn streams_of_hundreds_of_tiny_headers_are_answered_at_once_and_memory_stays_bounded() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = rss_bytes(&kadmit);
    let during = runtime().block_on(async {
        let head = head_with("/validate", 100, TINY_HEADERS);
        let mut held = Vec::new();
        for _ in 0..HEADER_FLOOD_CONNECTIONS {
            let (mut writer, mut events, _) = h2_connect(&kadmit, &[]).await;
            let mut batch = Vec::new();
            for i in 0..LIMIT {
                batch.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &head));
            }
            writer.write_all(&batch).await.expect("streams");
            // Each stream is answered with a head that ends it (an empty
            // 431), not left waiting in the handler for its body.
            let mut answered = 0;
            while answered < LIMIT {
                match next(&mut events).await {
                    Event::Answered { stream, end_stream } => {
                        assert!(end_stream, "stream {stream} answered with a body");
                        answered += 1;
                    }
                    Event::Closed => panic!("the server closed the connection"),
                    _ => {}
                }
            }
            held.push(writer);
        }
        // The connections stay open while the server's memory is read.
        let during = rss_bytes(&kadmit);
        drop(held);
        during
    });
    eprintln!(
        "tiny headers: rss {:.1} -> {:.1} MiB",
        mib(before),
        mib(during)
    );
    assert!(
        during.saturating_sub(before) < MAX_GROWTH,
        "{HEADER_FLOOD_CONNECTIONS} x {LIMIT} streams of {TINY_HEADERS} headers grew the server \
         from {:.1} MiB to {:.1} MiB",
        mib(before),
        mib(during)
    );
    kadmit.assert_no_panic();
}

/// Header fields a request may have (`MAX_REQUEST_HEADERS`); `head_with`
/// writes two besides its extra ones (content-type, content-length).
const MAX_REQUEST_HEADERS: usize = 96;

#[test]
fn a_review_with_as_many_header_fields_as_allowed_is_answered_and_one_more_gets_431() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let body = fixture("create-pod.json");
    let answers = runtime().block_on(async {
        let (mut writer, mut events, _) = h2_connect(&kadmit, &[]).await;
        let mut requests = Vec::new();
        for (stream, extra) in [(1, MAX_REQUEST_HEADERS - 2), (3, MAX_REQUEST_HEADERS - 1)] {
            requests.extend(frame(
                HEADERS,
                END_HEADERS,
                stream,
                &head_with("/validate", body.len(), extra),
            ));
            requests.extend(frame(DATA, END_STREAM, stream, &body));
        }
        writer.write_all(&requests).await.expect("reviews");
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < 2 {
            match next(&mut events).await {
                Event::Answered { stream, end_stream } => {
                    answers.insert(stream, end_stream);
                }
                Event::Closed => panic!("the server closed the connection"),
                _ => {}
            }
        }
        answers
    });
    // At the bound, an answer with a body (the review's); one field more,
    // a head that ends the stream (the empty 431).
    assert_eq!(
        answers.get(&1),
        Some(&false),
        "96 header fields: {answers:?}"
    );
    assert_eq!(
        answers.get(&3),
        Some(&true),
        "97 header fields: {answers:?}"
    );
    assert_eq!(
        kadmit.metric("kadmit_bad_requests_total{reason=\"head_too_large\"}"),
        1.0
    );
    kadmit.assert_no_panic();
}

/// How long the client below opens its window a byte at a time: past the
/// server's 10 s for a whole answer, with room for a slow machine.
const TRICKLE_FOR: Duration = Duration::from_secs(20);
/// Between two one-byte window updates: well inside 10 s, so that only a
/// deadline for the whole answer, not one per piece, ends the stream.
const TRICKLE_EVERY: Duration = Duration::from_secs(2);

#[test]
fn an_answer_whose_window_opens_a_byte_at_a_time_is_reset_when_its_time_is_up() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let body = fixture("create-pod.json");
    let reset = runtime().block_on(async {
        // No window for any answer until the client opens one.
        let (mut writer, mut events, _) =
            h2_connect(&kadmit, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]).await;
        let mut request = frame(
            HEADERS,
            END_HEADERS,
            1,
            &head_with("/mutate", body.len(), 0),
        );
        request.extend(frame(DATA, END_STREAM, 1, &body));
        writer.write_all(&request).await.expect("review");
        let started = Instant::now();
        let mut answered = false;
        while started.elapsed() < TRICKLE_FOR {
            let update = frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes());
            writer.write_all(&update).await.expect("window update");
            let wait = tokio::time::sleep(TRICKLE_EVERY);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = &mut wait => break,
                    event = events.recv() => match event {
                        Some(Event::Answered { stream: 1, .. }) => answered = true,
                        Some(Event::Reset { stream: 1, code }) => {
                            return Some((code, started.elapsed(), answered));
                        }
                        None | Some(Event::Closed) => panic!("the server closed the connection"),
                        Some(_) => {}
                    }
                }
            }
        }
        None
    });
    let (code, after, answered) =
        reset.expect("the stream was still open after the client trickled for 20 s");
    eprintln!("trickled answer: reset with {code:#x} after {after:?}");
    assert!(answered, "the answer's head came before the reset");
    assert_eq!(code, CANCEL, "RST_STREAM code");
    assert!(
        after >= Duration::from_secs(9),
        "reset after {after:?}, before the answer's 10 s were up"
    );
    // The server answers a review on a new connection, promptly.
    let (status, _, answer) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{answer}");
    kadmit.assert_no_panic();
}

/// Connections of the window flood: near the listener's default cap (512).
const WINDOW_FLOOD_CONNECTIONS: usize = 480;
/// Streams each flooding connection keeps open, each declaring the largest
/// body allowed (16 MiB) so that none is refused for its length.
const WINDOW_FLOOD_STREAMS: usize = 2;
const MAX_BODY_BYTES: usize = 16 << 20;
/// How long each connection sends all the window it is given.
const WINDOW_FLOOD_FOR: Duration = Duration::from_secs(4);
/// Largest DATA payload before the peer raises SETTINGS_MAX_FRAME_SIZE.
const MAX_FRAME: usize = 16_384;
/// The window of a connection, and of a stream unless SETTINGS say
/// otherwise, before any WINDOW_UPDATE (RFC 9113, 6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;

#[test]
fn a_flood_of_bodies_sent_as_fast_as_the_windows_allow_keeps_memory_under_the_shipped_limit() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = memory(kadmit.pid());
    let (pushed, peak, stream_window) = runtime().block_on(async {
        // Every connection opens its streams at once (a connection with
        // none would be closed as idle once the listener is crowded), and
        // all start sending together.
        let mut floods = Vec::new();
        for _ in 0..WINDOW_FLOOD_CONNECTIONS {
            floods.push(Flood::open(&kadmit).await);
        }
        let stream_window = floods.first().map(|flood| flood.stream_window);
        let until = tokio::time::Instant::now() + WINDOW_FLOOD_FOR;
        let pushers: Vec<_> = floods
            .into_iter()
            .map(|flood| tokio::spawn(flood.push(until)))
            .collect();
        let mut pushed = 0;
        let mut held = Vec::new();
        for pusher in pushers {
            let flood = pusher.await.expect("pusher");
            pushed += flood.sent;
            held.push(flood);
        }
        // The connections stay open while the server's memory is read.
        let peak = memory(kadmit.pid()).peak;
        drop(held);
        (pushed, peak, stream_window)
    });
    eprintln!(
        "window flood: {WINDOW_FLOOD_CONNECTIONS} connections pushed {:.1} MiB (stream window \
         {stream_window:?}); rss {:.1} MiB, peak {:.1} MiB",
        mib(pushed),
        mib(before.rss),
        mib(peak)
    );
    assert_flood_held("window flood", pushed, peak);
    assert_answered_promptly(&kadmit);
    kadmit.assert_no_panic();
}

/// One connection of the window flood: it keeps [`WINDOW_FLOOD_STREAMS`]
/// streams open and sends their bodies as fast as the server opens windows.
struct Flood {
    writer: Writer,
    events: mpsc::UnboundedReceiver<Event>,
    /// The window each new stream starts with.
    stream_window: i64,
    connection_window: i64,
    /// The open streams and their windows.
    open: Vec<(u32, i64)>,
    next_stream: u32,
    /// Body bytes sent.
    sent: u64,
}

impl Flood {
    /// Connects and opens the streams.
    async fn open(kadmit: &Kadmit) -> Flood {
        let (writer, events, advertised) = h2_connect(kadmit, &[]).await;
        let mut flood = Flood {
            writer,
            events,
            stream_window: i64::from(advertised.initial_window_size.unwrap_or(DEFAULT_WINDOW)),
            connection_window: i64::from(DEFAULT_WINDOW),
            open: Vec::new(),
            next_stream: 1,
            sent: 0,
        };
        let mut heads = Vec::new();
        flood.open_streams(&mut heads);
        flood.writer.write_all(&heads).await.expect("streams");
        flood
    }

    /// Adds to `batch` the heads of the streams that replace those ended.
    fn open_streams(&mut self, batch: &mut Vec<u8>) {
        let head = head_with("/validate", MAX_BODY_BYTES, 0);
        while self.open.len() < WINDOW_FLOOD_STREAMS {
            batch.extend(frame(HEADERS, END_HEADERS, self.next_stream, &head));
            self.open.push((self.next_stream, self.stream_window));
            self.next_stream += 2;
        }
    }

    /// Sends all the window the server gives until `until`; a stream the
    /// server answers or resets is replaced by a new one.
    async fn push(mut self, until: tokio::time::Instant) -> Flood {
        let payload = vec![b' '; MAX_FRAME];
        loop {
            let mut batch = Vec::new();
            self.open_streams(&mut batch);
            for (stream, window) in &mut self.open {
                while *window > 0 && self.connection_window > 0 {
                    let length = (MAX_FRAME as i64).min(*window).min(self.connection_window);
                    batch.extend(frame(DATA, 0, *stream, &payload[..length as usize]));
                    *window -= length;
                    self.connection_window -= length;
                    self.sent += length as u64;
                }
            }
            if !matches!(
                tokio::time::timeout_at(until, self.writer.write_all(&batch)).await,
                Ok(Ok(()))
            ) {
                break;
            }
            match tokio::time::timeout_at(until, self.events.recv()).await {
                Err(_) | Ok(None | Some(Event::Closed | Event::GoAway { .. })) => break,
                Ok(Some(Event::WindowUpdate {
                    stream: 0,
                    increment,
                })) => self.connection_window += i64::from(increment),
                Ok(Some(Event::WindowUpdate { stream, increment })) => {
                    if let Some((_, window)) =
                        self.open.iter_mut().find(|(open, _)| *open == stream)
                    {
                        *window += i64::from(increment);
                    }
                }
                Ok(Some(Event::Answered { stream, .. } | Event::Reset { stream, .. })) => {
                    self.open.retain(|(open, _)| *open != stream);
                }
                Ok(Some(_)) => {}
            }
        }
        self
    }
}

/// Connections of the spread stream flood: near the listener's default cap
/// (512).
const SPREAD_CONNECTIONS: usize = 500;
/// Streams each of them opens, within the 100 a connection may have: 12,500
/// in all, twelve times the process's bound.
const SPREAD_STREAMS: u32 = 25;
/// HTTP/2 streams the server keeps open on all connections together
/// (`--h2-max-open-streams`).
const MAX_OPEN_STREAMS: usize = 1024;
/// Copies of one 160-byte header field each stream of the spread flood
/// carries: with the request's own six, 86 fields and a decoded header list
/// just under the 16 KiB allowed, for a few bytes sent (the field is sent
/// once a connection, into HPACK's table, then named by its index).
const PADDING_FIELDS: usize = 80;

/// The HPACK block of `POST /validate` declaring a 100-byte body, with
/// [`PADDING_FIELDS`] copies of `x-pad`: on the connection's first stream
/// the field is added to the dynamic table, on every other one only named
/// by its index.
fn padded_head(first_on_connection: bool) -> Vec<u8> {
    let mut block = head_with("/validate", 100, 0);
    let mut copies = PADDING_FIELDS;
    if first_on_connection {
        // Literal with incremental indexing, new name (RFC 7541, 6.2.1);
        // the value's length, 160, in a 7-bit prefix: 127 + 33.
        block.extend_from_slice(&[0x40, 5]);
        block.extend_from_slice(b"x-pad");
        block.extend_from_slice(&[0x7f, 33]);
        block.extend_from_slice(&[b'p'; 160]);
        copies -= 1;
    }
    // Indexed field 62, the dynamic table's first entry.
    block.extend(std::iter::repeat_n(0x80 | 62, copies));
    block
}

/// How a stream of the spread flood ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Reset with `CANCEL`: a newer stream ended it.
    Evicted,
    /// Reset with `REFUSED_STREAM`: no open stream waited for its client.
    Refused,
    /// Answered, or reset for another reason.
    Otherwise,
}

#[test]
fn streams_spread_over_many_connections_end_the_oldest_beyond_the_process_bound() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let before = memory(kadmit.pid());
    let total = SPREAD_CONNECTIONS * SPREAD_STREAMS as usize;
    let (ended, peak, held) = runtime().block_on(async {
        // Every stream declares a body that never comes, so each waits in
        // its handler until the body timeout, unless it is ended.
        let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
        let mut held = Vec::new();
        for _ in 0..SPREAD_CONNECTIONS {
            let (mut writer, mut events, _) = h2_connect(&kadmit, &[]).await;
            let mut batch = Vec::new();
            for i in 0..SPREAD_STREAMS {
                batch.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &padded_head(i == 0)));
            }
            writer.write_all(&batch).await.expect("streams");
            let ended_tx = ended_tx.clone();
            tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    let ended = match event {
                        Event::Reset { code: CANCEL, .. } => Ended::Evicted,
                        Event::Refused => Ended::Refused,
                        Event::Reset { .. } | Event::Answered { .. } => Ended::Otherwise,
                        Event::Closed => break,
                        _ => continue,
                    };
                    if ended_tx.send(ended).is_err() {
                        break;
                    }
                }
            });
            held.push(writer);
        }
        // Each stream beyond the bound ends an older stream or is refused.
        let mut ended = Vec::new();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while ended.len() < total - MAX_OPEN_STREAMS {
            match tokio::time::timeout_at(deadline, ended_rx.recv()).await {
                Ok(Some(how)) => ended.push(how),
                Ok(None) | Err(_) => break,
            }
        }
        (ended, memory(kadmit.pid()).peak, held)
    });
    let count = |how: Ended| ended.iter().filter(|ended| **ended == how).count();
    let (evicted, refused) = (count(Ended::Evicted), count(Ended::Refused));
    eprintln!(
        "spread streams: {total} streams of {PADDING_FIELDS} padding fields on \
         {SPREAD_CONNECTIONS} connections: {evicted} ended by newer ones, {refused} refused, {} \
         otherwise; peak {:.1} -> {:.1} MiB",
        count(Ended::Otherwise),
        mib(before.peak),
        mib(peak)
    );
    assert!(
        peak < SHIPPED_MEMORY_LIMIT,
        "{total} streams took the server from {:.1} MiB to {:.1} MiB",
        mib(before.peak),
        mib(peak)
    );
    assert_eq!(
        evicted + refused,
        total - MAX_OPEN_STREAMS,
        "streams ended or refused to keep the bound ({} ended in all)",
        ended.len()
    );
    assert!(evicted > 0, "no stalled stream was ended");
    // The newest streams are still open, and a new client is answered at
    // once beside them.
    assert_answered_promptly(&kadmit);
    assert!(
        kadmit.metric("kadmit_streams_reset_total{reason=\"evicted\"}") >= evicted as f64
            && kadmit.metric("kadmit_streams_reset_total{reason=\"refused\"}") >= refused as f64
    );
    drop(held);
    kadmit.assert_no_panic();
}

/// Reviews the client sends during the spread flood, at most.
const REVIEWS_DURING_FLOOD: usize = 300;

#[test]
fn reviews_sent_during_a_spread_stream_flood_are_all_answered() {
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let flooding = std::sync::atomic::AtomicBool::new(true);
    let reviews = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut started = Some(started_tx);
            runtime().block_on(async {
                let mut held = Vec::new();
                for connection in 0..SPREAD_CONNECTIONS {
                    let (mut writer, events, _) = h2_connect(&kadmit, &[]).await;
                    let mut batch = Vec::new();
                    for i in 0..SPREAD_STREAMS {
                        batch.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &padded_head(i == 0)));
                    }
                    writer.write_all(&batch).await.expect("streams");
                    held.push((writer, events));
                    // Past the process's bound: the reviews may start.
                    if (connection + 1) * SPREAD_STREAMS as usize >= 2 * MAX_OPEN_STREAMS
                        && let Some(started) = started.take()
                    {
                        let _ = started.send(());
                    }
                }
            });
            flooding.store(false, std::sync::atomic::Ordering::Relaxed);
        });
        started_rx.recv().expect("the flood started");
        // One HTTP/2 connection, as the API server's; a review whose stream
        // is reset fails `post_json`.
        let client = kadmit.client();
        let mut reviews = Vec::new();
        while reviews.len() < REVIEWS_DURING_FLOOD
            && flooding.load(std::sync::atomic::Ordering::Relaxed)
        {
            let (status, _, answer) = post_json(
                &client,
                &kadmit.url("/validate"),
                fixture("create-pod.json"),
            );
            reviews.push((status, answer));
        }
        reviews
    });
    eprintln!("{} reviews answered during the flood", reviews.len());
    assert!(
        reviews.len() >= 5,
        "only {} reviews sent during the flood",
        reviews.len()
    );
    for (status, answer) in &reviews {
        assert_eq!(*status, 200, "{answer}");
    }
    assert_eq!(
        kadmit.metric("kadmit_streams_reset_total{reason=\"refused\"}"),
        0.0
    );
    kadmit.assert_no_panic();
}
