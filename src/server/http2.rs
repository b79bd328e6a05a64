//! HTTP/2 connections of the webhook listener, served with the `h2` crate
//! under explicit limits, each stream answered by the actix-web `App`.
//!
//! actix-http configures HTTP/2 with window sizes only: no bound on
//! concurrent streams or on header lists, so one connection opening 50,000
//! streams held 1.8 GB. Here every connection advertises and enforces:
//!
//! | setting | value |
//! |---|---|
//! | SETTINGS_MAX_CONCURRENT_STREAMS | `--h2-max-concurrent-streams` (more are refused) |
//! | SETTINGS_MAX_HEADER_LIST_SIZE | [`MAX_HEADER_LIST_BYTES`] |
//! | header fields of a request | [`MAX_REQUEST_HEADERS`] (more: an empty 431) |
//! | stream and connection receive window | [`RECEIVE_WINDOW_BYTES`] (the protocol's initial window) |
//! | send buffer per stream | [`MAX_SEND_BUFFER_BYTES`] |
//! | streams reset by the client before being accepted | [`MAX_PENDING_ACCEPT_RESETS`], then GOAWAY (rapid reset) |
//!
//! A connection with no stream for [`KEEP_ALIVE`], or for
//! [`super::connections::IDLE_WHEN_CROWDED`] while the listener is crowded,
//! is closed with GOAWAY
//! (after the API server's own idle timeout, so it is normally the client
//! that closes), and so is every connection once the shutdown has begun
//! (one opened during the drain right after its preface): the streams the
//! client sent before it saw the GOAWAY are answered, new ones go to a new
//! connection, which the load balancer sends to another replica.

use std::cell::Cell;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use actix_http::body::{BodySize, BoxBody, MessageBody};
use actix_http::header::{self, HeaderValue};
use actix_http::{Method, Payload, Request, Response, Version};
use actix_service::Service;
use actix_web::dev::ServiceResponse;
use actix_web::web::Bytes;
use h2::server::{Connection, SendResponse};
use tokio::io::{AsyncRead, AsyncWrite};

use super::KEEP_ALIVE;
use super::connections::{Registry, WRITE_STALL_TIMEOUT};
use super::open_streams::{OpenStreams, Waiting};
use super::shutdown::{Phase, Shutdown};
use crate::metrics;

/// Largest decoded header list of a request. The API server sends a handful
/// of short headers; this leaves room for proxies' additions.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// Header fields a request may have, as over HTTP/1.1 (actix-http's
/// bound). The header list's size alone lets about 480 tiny fields through,
/// and each becomes an entry of the request's header map: about 210 KiB a
/// stream, for 2.5 KiB sent.
pub const MAX_REQUEST_HEADERS: usize = 96;
/// Receive window of a connection, and of each of its streams: the
/// protocol's initial window, refilled as the handler reads but never
/// raised above it.
///
/// What a client sends within it waits in h2's buffers until the stream's
/// handler reads it into the body budget ([`super::budget`]), so it is the
/// one part of a request body the budget does not count. actix's windows
/// (1 MiB a stream, 2 MiB a connection) let 480 connections sending bodies as
/// fast as their windows opened take the server to 369 MiB, past the shipped
/// 256 MiB limit; at this window, at most 64 KiB a connection (32 MiB at the
/// default `--max-connections`) is uncounted. A large body costs round trips
/// instead: at 1 ms each, about 64 MiB/s a connection, shared by its
/// streams.
pub const RECEIVE_WINDOW_BYTES: u32 = 65_535;
/// Response bytes a stream may have queued for sending.
pub const MAX_SEND_BUFFER_BYTES: usize = 64 * 1024;
/// Streams the client may reset before kadmit has accepted them; beyond it
/// the connection ends with ENHANCE_YOUR_CALM (h2's default, set here so an
/// upgrade cannot loosen it).
pub const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// Time a closing connection is given to see its GOAWAY acknowledged.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The same, for a connection closed to make room on a crowded listener:
/// no longer than it had to be idle, or a client that ignores GOAWAY would
/// keep its slot five times longer than an HTTP/1.1 one and could keep the
/// listener crowded by reopening connections.
const CROWDED_CLOSE_TIMEOUT: Duration = super::connections::IDLE_WHEN_CROWDED;

/// How HTTP/2 connections are served.
#[derive(Debug, Clone, Copy)]
pub(super) struct Http2 {
    max_concurrent_streams: u32,
    /// Time allowed for the client's connection preface and settings.
    preface_timeout: Duration,
}

impl Http2 {
    pub(super) fn new(max_concurrent_streams: u32, preface_timeout: Duration) -> Self {
        Http2 {
            max_concurrent_streams: max_concurrent_streams.max(1),
            preface_timeout,
        }
    }

    fn builder(&self) -> h2::server::Builder {
        let mut builder = h2::server::Builder::new();
        builder
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(MAX_HEADER_LIST_BYTES)
            .initial_window_size(RECEIVE_WINDOW_BYTES)
            .initial_connection_window_size(RECEIVE_WINDOW_BYTES)
            .max_send_buffer_size(MAX_SEND_BUFFER_BYTES)
            .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS);
        builder
    }

    /// Serves `io` until the client closes it, it stays idle for
    /// [`KEEP_ALIVE`], or the shutdown has begun and its streams are done.
    pub(super) async fn serve<T, A>(
        &self,
        io: T,
        peer: Option<SocketAddr>,
        app: Rc<A>,
        streams: std::sync::Arc<OpenStreams>,
        shutdown: std::sync::Arc<Shutdown>,
        connections: std::sync::Arc<Registry>,
    ) where
        T: AsyncRead + AsyncWrite + Unpin,
        A: Service<Request, Response = ServiceResponse, Error = actix_web::Error> + 'static,
    {
        let handshake = self.builder().handshake::<T, Bytes>(io);
        let mut connection = match tokio::time::timeout(self.preface_timeout, handshake).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::debug!(%error, peer = ?peer, "HTTP/2 handshake failed");
                return;
            }
            Err(_elapsed) => {
                tracing::debug!(peer = ?peer, "HTTP/2 preface not received in time");
                return;
            }
        };
        let activity = Rc::new(Activity {
            open: Cell::new(0),
            last: Cell::new(Instant::now()),
        });
        let mut idle = pin!(tokio::time::sleep(KEEP_ALIVE));
        let mut closing = pin!(tokio::time::sleep(CLOSE_TIMEOUT));
        let mut is_closing = false;
        let shutdown = async move { shutdown.reached(Phase::Draining).await };
        let mut shutdown = pin!(shutdown);
        let watched = activity.clone();
        let crowded = async move {
            connections
                .idle_while_crowded(|| (watched.open.get() == 0).then(|| watched.last.get()))
                .await;
            connections.record_closed(metrics::CLOSED_IDLE_WHEN_CROWDED);
        };
        let mut crowded = pin!(crowded);
        loop {
            tokio::select! {
                accepted = connection.accept() => match accepted {
                    Some(Ok((request, respond))) => {
                        dispatch(request, respond, peer, &app, &streams, &activity);
                    }
                    Some(Err(error)) => {
                        tracing::debug!(%error, peer = ?peer, "HTTP/2 connection ended with an error");
                        break;
                    }
                    None => break,
                },
                () = &mut idle, if !is_closing => {
                    let due = activity.last.get() + KEEP_ALIVE;
                    if activity.open.get() > 0 {
                        idle.as_mut().reset((Instant::now() + KEEP_ALIVE).into());
                    } else if due > Instant::now() {
                        idle.as_mut().reset(due.into());
                    } else {
                        tracing::debug!(peer = ?peer, "Closing an idle HTTP/2 connection");
                        start_closing(&mut connection, closing.as_mut(), &mut is_closing, CLOSE_TIMEOUT);
                    }
                }
                () = &mut shutdown, if !is_closing => {
                    // h2 sends GOAWAY twice: first announcing no limit, then,
                    // after a ping's round trip, the last stream it took, so
                    // a stream in flight towards kadmit is answered, not
                    // refused. The server's shutdown timeout bounds the
                    // streams in progress; no close deadline of our own.
                    connection.graceful_shutdown();
                    is_closing = true;
                    closing.as_mut().reset((Instant::now() + Duration::from_secs(86_400)).into());
                }
                () = &mut crowded, if !is_closing => {
                    tracing::debug!(peer = ?peer, "Closing an idle HTTP/2 connection to make room");
                    start_closing(
                        &mut connection,
                        closing.as_mut(),
                        &mut is_closing,
                        CROWDED_CLOSE_TIMEOUT,
                    );
                }
                () = &mut closing, if is_closing => {
                    tracing::debug!(peer = ?peer, "Dropped an HTTP/2 connection that did not close in time");
                    break;
                }
            }
        }
    }
}

/// Sends GOAWAY and gives the client `timeout` to acknowledge it.
fn start_closing<T>(
    connection: &mut Connection<T, Bytes>,
    closing: std::pin::Pin<&mut tokio::time::Sleep>,
    is_closing: &mut bool,
    timeout: Duration,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    connection.graceful_shutdown();
    closing.reset((Instant::now() + timeout).into());
    *is_closing = true;
}

/// The streams of a connection: how many are open, and when the last one
/// ended.
struct Activity {
    open: Cell<usize>,
    last: Cell<Instant>,
}

/// Counts a stream as open until dropped.
struct Open(Rc<Activity>);

impl Open {
    fn new(activity: &Rc<Activity>) -> Self {
        activity.open.set(activity.open.get() + 1);
        Open(activity.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get().saturating_sub(1));
        self.0.last.set(Instant::now());
    }
}

/// Hands one stream to the app on a task of its own (streams of a connection
/// are served concurrently, up to the stream limit; those of all connections
/// up to `--h2-max-open-streams`, beyond which the oldest waiting for its
/// client is ended or, when none waits, the new one refused).
fn dispatch<A>(
    request: http::Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: Option<SocketAddr>,
    app: &Rc<A>,
    streams: &std::sync::Arc<OpenStreams>,
    activity: &Rc<Activity>,
) where
    A: Service<Request, Response = ServiceResponse, Error = actix_web::Error> + 'static,
{
    let (parts, body) = request.into_parts();
    if parts.headers.len() > MAX_REQUEST_HEADERS {
        // Answered here, as actix answers an HTTP/1.1 head with too many
        // headers, before any of them is copied; dropping the body resets
        // the stream if the client is still sending.
        metrics::record_bad_request(metrics::BAD_REQUEST_HEAD_TOO_LARGE);
        let mut head = http::Response::new(());
        *head.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        if let Err(error) = respond.send_response(head, true) {
            tracing::debug!(%error, peer = ?peer, "Could not send an HTTP/2 response");
        }
        return;
    }
    let Some(open_stream) = streams.open() else {
        // Nothing was done with it: the client may send it again.
        metrics::record_stream_reset(metrics::STREAM_REFUSED);
        respond.send_reset(h2::Reason::REFUSED_STREAM);
        return;
    };
    let head_only = parts.method == Method::HEAD;
    let waiting = open_stream.waiting().clone();
    let body: actix_http::BoxedPayloadStream = Box::pin(RequestBody {
        stream: body,
        waiting: waiting.clone(),
    });
    let mut request = Request::with_payload(Payload::from(body));
    let head = request.head_mut();
    head.uri = parts.uri;
    head.method = parts.method;
    head.version = parts.version;
    head.headers = parts.headers.into();
    head.peer_addr = peer;
    let id = open_stream.id();
    let call = app.call(request);
    let open = Open::new(activity);
    let task = actix_web::rt::spawn(async move {
        let _open_stream = open_stream;
        let response: Response<BoxBody> = match call.await {
            Ok(response) => response.into(),
            Err(error) => error.into(),
        };
        if let Err(error) = send(response, respond, head_only, &waiting).await {
            tracing::debug!(%error, peer = ?peer, "Could not send an HTTP/2 response");
        }
        drop(open);
    });
    streams.serve_on(id, task.abort_handle());
}

/// A stream's request body as the handler reads it: flow-control capacity
/// goes back to the client as it is read (as in actix's own HTTP/2 payload),
/// and the stream is noted as waiting for its client while the handler
/// waits for more.
struct RequestBody {
    stream: h2::RecvStream,
    waiting: std::sync::Arc<Waiting>,
}

impl futures_core::Stream for RequestBody {
    type Item = Result<Bytes, actix_http::error::PayloadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = self.stream.poll_data(cx);
        self.waiting.set(polled.is_pending());
        polled.map(|data| {
            data.map(|data| {
                let chunk = data?;
                self.stream.flow_control().release_capacity(chunk.len())?;
                Ok(chunk)
            })
        })
    }
}

/// Sends `response` on its stream. The body goes out piece by piece as the
/// body yields them (the review body yields pieces below h2's threshold for
/// writing a frame on its own, see `body.rs`); a body of known size ends the
/// stream with its last piece rather than with an empty frame.
async fn send(
    response: Response<BoxBody>,
    mut respond: SendResponse<Bytes>,
    head_only: bool,
    waiting: &Waiting,
) -> Result<(), SendError> {
    let (response, body) = response.into_parts();
    let mut size = body.size();
    let head = response_head(&response, &mut size);
    let empty = size.is_eof() || head_only;
    let mut stream = respond.send_response(head, empty)?;
    if empty {
        return Ok(());
    }
    let mut remaining = match size {
        BodySize::Sized(length) => Some(length),
        BodySize::None | BodySize::Stream => None,
    };
    let mut body = pin!(body);
    // One deadline for the whole answer, not one per piece: a client that
    // opens a byte of window every few seconds would otherwise hold the
    // answer, and its share of the body budget, for as long as it likes.
    let deadline = tokio::time::Instant::now() + WRITE_STALL_TIMEOUT;
    while let Some(chunk) = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
        let mut chunk = chunk.map_err(|error| SendError::Body(error.to_string()))?;
        while !chunk.is_empty() {
            stream.reserve_capacity(chunk.len());
            let granted = std::future::poll_fn(|cx| {
                let granted = stream.poll_capacity(cx);
                waiting.set(granted.is_pending());
                granted
            });
            let capacity = match tokio::time::timeout_at(deadline, granted).await {
                // The client reset the stream: nobody to send to.
                Ok(None) => return Ok(()),
                Ok(Some(capacity)) => capacity?,
                // The client has not opened the window for all of the
                // answer in time: it would hold the answer's share of the
                // body budget for as long as it likes, unless the stream
                // ends here.
                Err(_elapsed) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    crate::metrics::record_stream_reset(crate::metrics::CLOSED_WRITE_STALLED);
                    return Err(SendError::Stalled);
                }
            };
            let piece = chunk.split_to(capacity.min(chunk.len()));
            remaining = remaining.map(|left| left.saturating_sub(piece.len() as u64));
            let last = remaining == Some(0);
            stream.send_data(piece, last)?;
            if last {
                return Ok(());
            }
        }
    }
    stream.send_data(Bytes::new(), true)?;
    Ok(())
}

/// Why a response could not be sent.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error(transparent)]
    H2(#[from] h2::Error),
    #[error("the response body failed: {0}")]
    Body(String),
    #[error(
        "the client did not open the window for the whole answer in {WRITE_STALL_TIMEOUT:?}; stream reset"
    )]
    Stalled,
}

/// The HTTP/2 head of `response`: its status and headers without the
/// HTTP/1-only ones, the body's length, and a `Date`.
fn response_head(response: &Response<()>, size: &mut BodySize) -> http::Response<()> {
    let status = response.status();
    if matches!(status.as_u16(), 100..=199 | 204) {
        *size = BodySize::None;
    }
    let mut head = http::Response::new(());
    *head.status_mut() = status;
    *head.version_mut() = Version::HTTP_2;
    let headers = head.headers_mut();
    if let BodySize::Sized(length) = size {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(*length));
    }
    let mut has_date = false;
    for (name, value) in response.headers() {
        let is_date = match *name {
            header::CONNECTION | header::TRANSFER_ENCODING | header::UPGRADE => continue,
            header::CONTENT_LENGTH => continue,
            header::DATE => true,
            _ if name == "keep-alive" || name == "proxy-connection" => continue,
            _ => false,
        };
        let mut value = value.clone();
        if is_date {
            has_date = true;
            value.set_sensitive(true); // as `date()` does
        }
        headers.append(name.clone(), value);
    }
    if !has_date {
        headers.insert(header::DATE, date());
    }
    head
}

/// The current `Date` value, formatted once per second per thread, and
/// marked sensitive so that HPACK never indexes it: a new value each second
/// would otherwise be added to each connection's encoder table, which h2
/// 0.3 sizes from the client's `SETTINGS_HEADER_TABLE_SIZE` without a cap
/// (a client announcing 4 GiB would grow the server by every second's
/// value on every connection it keeps busy).
fn date() -> HeaderValue {
    thread_local! {
        static CACHED: Cell<Option<(u64, HeaderValue)>> = const { Cell::new(None) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    CACHED.with(|cached| {
        let current = cached.take();
        let value = match current {
            Some((at, value)) if at == second => value,
            _ => {
                let mut value = HeaderValue::from_str(&httpdate::fmt_http_date(now))
                    .unwrap_or_else(|_| HeaderValue::from_static(""));
                value.set_sensitive(true);
                value
            }
        };
        cached.set(Some((second, value.clone())));
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_drops_http1_headers_and_carries_length_and_date() {
        let mut response = Response::with_body(actix_http::StatusCode::OK, ());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut size = BodySize::Sized(42);
        let head = response_head(&response, &mut size);
        assert_eq!(head.headers()[header::CONTENT_LENGTH], "42");
        assert_eq!(head.headers()[header::CONTENT_TYPE], "application/json");
        assert!(head.headers().get(header::CONNECTION).is_none());
        assert!(head.headers().contains_key(header::DATE));
        assert!(
            head.headers()[header::DATE].is_sensitive(),
            "HPACK must not index a value that changes every second"
        );
    }

    #[test]
    fn no_content_has_no_body() {
        let response = Response::with_body(actix_http::StatusCode::NO_CONTENT, ());
        let mut size = BodySize::Sized(3);
        let head = response_head(&response, &mut size);
        assert_eq!(size, BodySize::None);
        assert!(head.headers().get(header::CONTENT_LENGTH).is_none());
    }
}
