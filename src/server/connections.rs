//! A listener's open connections: how many there are, when the last one
//! has closed (the end of a shutdown), when they are so many that idle ones
//! must make room, and when a client has stopped taking its answer.
//!
//! An open connection costs nothing to keep idle for its client, so a few
//! hundred connections that complete their handshake and then send nothing
//! would fill `--max-connections` for the whole keep-alive time (120 s),
//! and every new client, the API server among them, would wait in the listen
//! backlog past its webhook timeout. So once three quarters of
//! `--max-connections` are open ("crowded"), every connection that has been
//! idle for [`IDLE_WHEN_CROWDED`] is closed the graceful way (HTTP/2 GOAWAY;
//! HTTP/1.1 closes after the answer in progress, if any), until the count
//! is below that mark again. A client with reviews in flight keeps its
//! connection; the API server reopens one when it next needs it.
//!
//! A client that stops reading keeps its answer, up to the write buffer,
//! and its connection for as long as it likes. So a connection whose writes
//! have made no progress for [`WRITE_STALL_TIMEOUT`] ([`IDLE_WHEN_CROWDED`]
//! while crowded) is closed at once ([`Registry::write_stalled`]).

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_rt::ArbiterHandle;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, oneshot, watch};

use crate::metrics::Listener;

/// How long a connection must have been idle to be closed while the
/// listener is crowded.
pub const IDLE_WHEN_CROWDED: Duration = Duration::from_secs(1);

/// How long a connection's writes may make no progress before it is
/// closed: a client that has not taken a byte of its answer for this long
/// is gone or hostile.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener's open connections, handshakes included.
#[derive(Debug)]
pub struct Registry {
    /// Whose metrics the counts go to.
    listener: Listener,
    open: AtomicUsize,
    all_closed: Notify,
    /// Open connections from which the listener is crowded.
    crowded_at: usize,
    crowded: watch::Sender<bool>,
    /// The listener's worker threads, to flush their queues of accepted
    /// connections.
    workers: Mutex<Vec<ArbiterHandle>>,
}

impl Registry {
    /// A registry for `listener`, of at most `max_connections`.
    pub fn new(listener: Listener, max_connections: usize) -> Self {
        Registry {
            listener,
            open: AtomicUsize::new(0),
            all_closed: Notify::new(),
            crowded_at: (max_connections.saturating_mul(3) / 4).max(1),
            crowded: watch::Sender::new(false),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// Counts a connection as open until the guard is dropped.
    pub fn open(self: &Arc<Self>) -> OpenConnection {
        let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        crate::metrics::record_open_connections(self.listener, open);
        if open >= self.crowded_at {
            self.refresh_crowded();
        }
        OpenConnection(self.clone())
    }

    /// A worker's service for one connection it has taken from its queue:
    /// counts the connection open at once (see [`Registry::all_closed`])
    /// and until `serve` has ended.
    pub fn serving<F: Future<Output = ()>>(
        self: &Arc<Self>,
        serve: F,
    ) -> impl Future<Output = Result<(), ()>> + use<F> {
        let open = self.open();
        async move {
            serve.await;
            drop(open);
            Ok(())
        }
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// True while idle connections are being closed to make room.
    pub fn is_crowded(&self) -> bool {
        *self.crowded.borrow()
    }

    /// Sets the crowded flag from the count, under the flag's lock, so that
    /// the last of two racing updates reads the latest count.
    fn refresh_crowded(&self) {
        self.crowded.send_if_modified(|crowded| {
            let now = self.open.load(Ordering::SeqCst) >= self.crowded_at;
            let changed = *crowded != now;
            *crowded = now;
            changed
        });
    }

    /// Resolves when the connection has been idle for [`IDLE_WHEN_CROWDED`]
    /// while the listener is crowded. `idle_since` tells when the connection
    /// last had something to do, `None` while it is busy.
    pub async fn idle_while_crowded(&self, idle_since: impl Fn() -> Option<Instant>) {
        let mut crowded = self.crowded.subscribe();
        loop {
            // The sender lives as long as `self`.
            if crowded.wait_for(|crowded| *crowded).await.is_err() {
                return std::future::pending().await;
            }
            match idle_since() {
                Some(since) if since.elapsed() >= IDLE_WHEN_CROWDED => return,
                Some(since) => tokio::time::sleep_until((since + IDLE_WHEN_CROWDED).into()).await,
                None => tokio::time::sleep(IDLE_WHEN_CROWDED).await,
            }
        }
    }

    /// Resolves when the connection's writes have made no progress for
    /// [`WRITE_STALL_TIMEOUT`], or for [`IDLE_WHEN_CROWDED`] while the
    /// listener is crowded.
    pub async fn write_stalled(&self, activity: &Activity) {
        loop {
            let allowed = if self.is_crowded() {
                IDLE_WHEN_CROWDED
            } else {
                WRITE_STALL_TIMEOUT
            };
            let next_look = match activity.write_blocked_since() {
                Some(since) if since.elapsed() >= allowed => return,
                // Looked at again within a second: the listener may become
                // crowded meanwhile.
                Some(since) => (since + allowed).min(Instant::now() + IDLE_WHEN_CROWDED),
                None => Instant::now() + IDLE_WHEN_CROWDED,
            };
            tokio::time::sleep_until(next_look.into()).await;
        }
    }

    /// Counts one connection of this listener closed to protect the others.
    pub fn record_closed(&self, reason: &'static str) {
        crate::metrics::record_connection_closed(self.listener, reason);
    }

    /// Registers the worker thread this is called on (from a worker's
    /// service factory).
    pub(super) fn register_current_worker(&self) {
        if let Some(worker) = actix_rt::Arbiter::try_current() {
            self.workers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(worker);
        }
    }

    /// Resolves when every connection accepted before the listener stopped
    /// accepting has been served and closed.
    ///
    /// A connection the accept thread has handed to a worker that is busy
    /// with a review waits in that worker's queue, not yet counted as open.
    /// A task spawned on each worker after accepting stopped runs only once
    /// the worker has taken what was queued before it (a worker runs its
    /// tasks in the order they were woken), so after those tasks the open
    /// count covers every accepted connection.
    pub async fn all_closed(&self) {
        let workers = self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut flushed = Vec::with_capacity(workers.len());
        for worker in workers {
            let (done, waited) = oneshot::channel();
            // `false`: the worker has stopped, and its queue with it.
            if worker.spawn(async move {
                let _ = done.send(());
            }) {
                flushed.push(waited);
            }
        }
        for waited in flushed {
            let _ = waited.await;
        }
        loop {
            let notified = self.all_closed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.open_connections() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// An open connection; closed when dropped.
#[derive(Debug)]
pub struct OpenConnection(Arc<Registry>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let registry = &self.0;
        let open = registry
            .open
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        crate::metrics::record_open_connections(registry.listener, open);
        if open + 1 >= registry.crowded_at {
            registry.refresh_crowded();
        }
        if open == 0 {
            registry.all_closed.notify_waiters();
        }
    }
}

/// What a connection's stream has written lately: when it last wrote
/// anything (for HTTP/1.1, whose requests kadmit does not see begin and
/// end, the time since the last write, the last answer, is how long the
/// connection has been idle: a client dribbling a request head would look
/// busy by its reads, but is answered nothing), and since when a write has
/// been waiting for the client to take bytes.
#[derive(Debug)]
pub struct Activity {
    last_write: Cell<Instant>,
    write_blocked_since: Cell<Option<Instant>>,
    reset_on_close: Cell<bool>,
    close_asked: Notify,
}

impl Activity {
    /// A connection opened now.
    pub fn new() -> Rc<Self> {
        let now = Instant::now();
        Rc::new(Activity {
            last_write: Cell::new(now),
            write_blocked_since: Cell::new(None),
            reset_on_close: Cell::new(false),
            close_asked: Notify::new(),
        })
    }

    /// When the stream last wrote a byte (or was opened).
    pub fn last_write(&self) -> Instant {
        self.last_write.get()
    }

    /// Makes the close of the connection a reset (`SO_LINGER` 0), for a
    /// client that has stopped taking its answer: closed the ordinary way,
    /// its socket would keep the unsent rest of the answer in kernel memory
    /// for minutes, retrying a client that never opens its window. Reset,
    /// the kernel drops it at once. Done when the [`Tracked`] stream is
    /// dropped.
    pub fn reset_on_close(&self) {
        self.reset_on_close.set(true);
    }

    /// Asks the connection to close once no request is in progress on it
    /// (at once when none is): its graceful-shutdown signal awaits
    /// [`Activity::close_asked`].
    pub fn ask_to_close(&self) {
        self.close_asked.notify_one();
    }

    /// Resolves once [`Activity::ask_to_close`] has been called.
    pub async fn close_asked(&self) {
        self.close_asked.notified().await;
    }

    /// Since when a write or flush has been waiting for the client, if one
    /// is.
    pub fn write_blocked_since(&self) -> Option<Instant> {
        self.write_blocked_since.get()
    }

    /// Notes a write: bytes taken are progress, `Pending` a wait for the
    /// client.
    fn wrote(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(written)) if *written > 0 => {
                self.last_write.set(Instant::now());
                self.write_blocked_since.set(None);
            }
            Poll::Pending => self.blocked(),
            Poll::Ready(_) => {}
        }
    }

    /// Notes a flush: done, nothing waits for the client (but nothing was
    /// written either: a flush of nothing is no answer).
    fn flushed(&self, polled: &Poll<std::io::Result<()>>) {
        match polled {
            Poll::Ready(Ok(())) => self.write_blocked_since.set(None),
            Poll::Pending => self.blocked(),
            Poll::Ready(Err(_)) => {}
        }
    }

    fn blocked(&self) {
        if self.write_blocked_since.get().is_none() {
            self.write_blocked_since.set(Some(Instant::now()));
        }
    }
}

/// A connection's stream that can name its TCP socket, so that a
/// [`Tracked`] stream can reset it when it is dropped.
pub trait Socket {
    /// The TCP socket under the stream.
    fn tcp(&self) -> &actix_web::rt::net::TcpStream;
}

impl Socket for tokio_rustls::server::TlsStream<actix_web::rt::net::TcpStream> {
    fn tcp(&self) -> &actix_web::rt::net::TcpStream {
        self.get_ref().0
    }
}

thread_local! {
    /// The activity of the HTTP/1.1 connection whose dispatcher is being
    /// built: set by [`building_h1`] around the call that builds it, during
    /// which actix asks for the connection's graceful-shutdown signal.
    static BUILDING_H1: Cell<Option<Rc<Activity>>> = const { Cell::new(None) };
}

/// Calls `build` (actix's HTTP/1.1 service, which builds the connection's
/// dispatcher) so that the graceful-shutdown signal built meanwhile finds
/// the connection's `activity` through [`take_building`].
pub fn building_h1<R>(activity: &Rc<Activity>, build: impl FnOnce() -> R) -> R {
    BUILDING_H1.set(Some(activity.clone()));
    let built = build();
    // Taken by the signal unless actix did not build the dispatcher there.
    BUILDING_H1.set(None);
    built
}

/// The activity of the connection whose HTTP/1.1 dispatcher is being built
/// (see [`building_h1`]); `None` outside of it.
pub fn take_building() -> Option<Rc<Activity>> {
    BUILDING_H1.take()
}

/// Request bytes a connection's reader is given before it must let the
/// request's handler take them (see [`Tracked`]'s reading).
pub const READ_BURST_BYTES: usize = 32 * 1024;
/// The most one read of a connection returns: a TLS record's worth.
const READ_PIECE_BYTES: usize = 16 * 1024;

/// A connection's stream, noting what it does in an [`Activity`], and
/// reading at most [`READ_BURST_BYTES`] before yielding.
///
/// actix's HTTP/1.1 dispatcher reads until the socket has nothing more or
/// its buffer holds 128 KiB, and only then hands the body to the handler,
/// whose budget counts it; tokio-rustls fills all the room a read offers,
/// and the buffer doubles to offer more, to 256 KiB. 480 connections sending
/// bodies as fast as they could held 290 KiB each outside a 1 MiB body
/// budget, and at the default budget took the server past the shipped
/// 256 MiB. Reads here return at most [`READ_PIECE_BYTES`], and after a
/// burst the socket is made to look empty (the task woken at once), so the
/// dispatcher hands what it read to the handler first: 185 KiB a connection,
/// most of it the TLS and HTTP state every connection has. h2's reader gets
/// the same.
#[derive(Debug)]
pub struct Tracked<T: Socket> {
    io: T,
    activity: Rc<Activity>,
    /// Bytes read since the reader last found the socket empty.
    burst: usize,
}

impl<T: Socket> Tracked<T> {
    /// `io`, noting what it does in `activity`.
    pub fn new(io: T, activity: Rc<Activity>) -> Self {
        Tracked {
            io,
            activity,
            burst: 0,
        }
    }

    /// The stream itself.
    pub fn get_ref(&self) -> &T {
        &self.io
    }
}

impl<T: Socket> Drop for Tracked<T> {
    fn drop(&mut self) {
        if !self.activity.reset_on_close.get() {
            return;
        }
        if let Err(error) = socket2::SockRef::from(self.io.tcp()).set_linger(Some(Duration::ZERO)) {
            tracing::debug!(%error, "Cannot set SO_LINGER; the connection closes the ordinary way");
        }
    }
}

impl<T: AsyncRead + Socket + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if self.burst >= READ_BURST_BYTES {
            // A burst is read: let the reader's task hand it on, and come
            // back at once.
            self.burst = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let polled = if buf.remaining() <= READ_PIECE_BYTES {
            Pin::new(&mut self.io).poll_read(cx, buf)
        } else {
            // tokio-rustls fills all the room it is given, and actix's
            // buffer doubles to give it more: read a piece at a time.
            let mut room = [MaybeUninit::<u8>::uninit(); READ_PIECE_BYTES];
            let mut piece = ReadBuf::uninit(&mut room);
            let polled = Pin::new(&mut self.io).poll_read(cx, &mut piece);
            if let Poll::Ready(Ok(())) = polled {
                buf.put_slice(piece.filled());
            }
            polled
        };
        match polled {
            Poll::Ready(Ok(())) => self.burst += buf.filled().len() - before,
            Poll::Pending => self.burst = 0,
            Poll::Ready(Err(_)) => {}
        }
        polled
    }
}

impl<T: AsyncWrite + Socket + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.activity.wrote(&polled);
        polled
    }

    /// Not offered: h2 then copies DATA frames under 1 KiB into its write
    /// buffer (with vectored writes, under 256 bytes), so a review's answer
    /// goes out in two frames instead of five, together with the other
    /// streams' frames ([`super::body`]). TLS gains nothing from vectored
    /// writes: rustls copies every slice into one record anyway.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.activity.flushed(&polled);
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Socket for actix_web::rt::net::TcpStream {
        fn tcp(&self) -> &actix_web::rt::net::TcpStream {
            self
        }
    }

    /// Both ends of a loopback TCP connection: kadmit's and its client's.
    async fn connected() -> (actix_web::rt::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let ours = actix_web::rt::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let (theirs, _) = listener.accept().await.expect("accept");
        (ours, theirs)
    }

    #[test]
    fn the_stream_offers_no_vectored_writes_yet_notes_one_it_is_given() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (client, mut server) = connected().await;
            // The socket itself offers them: the answer is Tracked's.
            assert!(client.is_write_vectored());
            let activity = Activity::new();
            let mut tracked = Tracked::new(client, activity.clone());
            // h2 copies DATA frames under 1 KiB into its buffer only on a
            // stream that offers none (`body::PIECE`).
            assert!(!tracked.is_write_vectored());
            // A caller that writes vectored anyway still writes, and the
            // write counts as progress.
            activity.blocked();
            let slices = [std::io::IoSlice::new(b"ab"), std::io::IoSlice::new(b"cd")];
            let written = tracked.write_vectored(&slices).await.expect("write");
            assert!(written > 0);
            assert_eq!(activity.write_blocked_since(), None);
            let mut read = vec![0; written];
            server.read_exact(&mut read).await.expect("read");
            assert_eq!(read, &b"abcd"[..written]);
        });
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection whose client always has more to send: every read
    /// fills all the room it is given, as tokio-rustls does.
    struct Endless {
        tcp: actix_web::rt::net::TcpStream,
    }

    impl Socket for Endless {
        fn tcp(&self) -> &actix_web::rt::net::TcpStream {
            &self.tcp
        }
    }

    impl AsyncRead for Endless {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let room = buf.remaining();
            buf.put_slice(&vec![b'x'; room]);
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn reads_come_in_pieces_and_a_burst_yields_to_the_reader_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (tcp, _server) = connected().await;
            let mut tracked = Tracked::new(Endless { tcp }, Activity::new());
            let wakes = Arc::new(CountingWaker::default());
            let waker = std::task::Waker::from(wakes.clone());
            let mut cx = Context::from_waker(&waker);
            // A reader offering far more room than a piece, as actix's
            // grown buffer does.
            let mut room = vec![0u8; 256 * 1024];
            for _burst in 0..2 {
                let mut reads = Vec::new();
                loop {
                    let mut buf = ReadBuf::new(&mut room);
                    match Pin::new(&mut tracked).poll_read(&mut cx, &mut buf) {
                        Poll::Ready(Ok(())) => reads.push(buf.filled().len()),
                        Poll::Pending => break,
                        Poll::Ready(Err(error)) => panic!("{error}"),
                    }
                }
                assert_eq!(
                    reads,
                    vec![READ_PIECE_BYTES; READ_BURST_BYTES / READ_PIECE_BYTES],
                    "pieces of one burst"
                );
            }
            assert_eq!(
                wakes.0.load(Ordering::Relaxed),
                2,
                "woken to come back after each burst"
            );
            // A reader offering less room than a piece gets what it asks.
            let mut small = [0u8; 100];
            let mut buf = ReadBuf::new(&mut small);
            let read = Pin::new(&mut tracked).poll_read(&mut cx, &mut buf);
            assert!(matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() == 100);
        });
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    #[test]
    fn crowded_from_three_quarters_of_the_maximum_until_below_again() {
        let registry = Arc::new(Registry::new(Listener::Webhook, 8));
        let mut open: Vec<_> = (0..5).map(|_| registry.open()).collect();
        assert!(!registry.is_crowded(), "5 of 8");
        open.push(registry.open());
        assert!(registry.is_crowded(), "6 of 8");
        open.pop();
        assert!(!registry.is_crowded(), "5 of 8 again");
        assert_eq!(registry.open_connections(), 5);
    }

    #[test]
    fn all_closed_waits_for_the_last_open_connection() {
        let registry = Arc::new(Registry::new(Listener::Webhook, 8));
        let first = registry.open();
        let second = registry.open();
        runtime().block_on(async {
            let waiting = registry.all_closed();
            let mut waiting = std::pin::pin!(waiting);
            drop(first);
            assert!(poll_once(waiting.as_mut()).await.is_none(), "one is open");
            drop(second);
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("resolved once the last connection closed");
        });
    }

    #[test]
    fn only_a_connection_idle_while_crowded_is_asked_to_close() {
        let registry = Arc::new(Registry::new(Listener::Webhook, 4));
        let _open: Vec<_> = (0..2).map(|_| registry.open()).collect();
        runtime().block_on(async {
            let long_idle = Instant::now()
                .checked_sub(IDLE_WHEN_CROWDED * 10)
                .expect("a clock older than ten seconds");
            // Not crowded: even a long-idle connection stays.
            let waiting = registry.idle_while_crowded(|| Some(long_idle));
            let mut waiting = std::pin::pin!(waiting);
            assert!(poll_once(waiting.as_mut()).await.is_none(), "not crowded");
            let _third = registry.open();
            assert!(registry.is_crowded());
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("idle and crowded");

            // A busy connection stays while crowded.
            let busy = registry.idle_while_crowded(|| None);
            let mut busy = std::pin::pin!(busy);
            tokio::time::advance(IDLE_WHEN_CROWDED * 5).await;
            assert!(poll_once(busy.as_mut()).await.is_none(), "busy");
        });
    }

    #[test]
    fn a_write_blocked_past_its_bound_is_stalled_and_sooner_while_crowded() {
        let registry = Arc::new(Registry::new(Listener::Operations, 4));
        runtime().block_on(async {
            let activity = Activity::new();
            // Writing nothing: never stalled.
            let waiting = registry.write_stalled(&activity);
            let mut waiting = std::pin::pin!(waiting);
            tokio::time::advance(WRITE_STALL_TIMEOUT * 2).await;
            assert!(poll_once(waiting.as_mut()).await.is_none(), "not writing");

            // Blocked for two seconds: within the bound while not crowded.
            let two_seconds_ago = Instant::now()
                .checked_sub(IDLE_WHEN_CROWDED * 2)
                .expect("an old enough clock");
            activity.write_blocked_since.set(Some(two_seconds_ago));
            assert!(poll_once(waiting.as_mut()).await.is_none(), "within 10 s");
            // Crowded: a second is enough.
            let _open: Vec<_> = (0..3).map(|_| registry.open()).collect();
            assert!(registry.is_crowded());
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("stalled while crowded");
        });
        // Not crowded: the whole bound.
        assert!(!registry.is_crowded());
        runtime().block_on(async {
            let ago = |elapsed| {
                Instant::now()
                    .checked_sub(elapsed)
                    .expect("an old enough clock")
            };
            let activity = Activity::new();
            activity
                .write_blocked_since
                .set(Some(ago(WRITE_STALL_TIMEOUT - IDLE_WHEN_CROWDED)));
            let waiting = registry.write_stalled(&activity);
            let mut waiting = std::pin::pin!(waiting);
            assert!(poll_once(waiting.as_mut()).await.is_none(), "within 10 s");
            activity
                .write_blocked_since
                .set(Some(ago(WRITE_STALL_TIMEOUT + IDLE_WHEN_CROWDED)));
            let stalled = registry.write_stalled(&activity);
            assert!(
                poll_once(std::pin::pin!(stalled)).await.is_some(),
                "past 10 s"
            );
        });
    }

    #[test]
    fn a_write_that_moves_clears_the_stall() {
        let activity = Activity::new();
        let opened = activity.last_write();
        activity.wrote(&Poll::Pending);
        let blocked = activity.write_blocked_since().expect("blocked");
        // A second Pending keeps the first time.
        activity.flushed(&Poll::Pending);
        assert_eq!(activity.write_blocked_since(), Some(blocked));
        // Nothing written is no progress.
        activity.wrote(&Poll::Ready(Ok(0)));
        assert_eq!(activity.write_blocked_since(), Some(blocked));
        // A flush that is done leaves nothing waiting, but is no answer:
        // the connection stays as idle as it was.
        activity.flushed(&Poll::Ready(Ok(())));
        assert_eq!(activity.write_blocked_since(), None);
        assert_eq!(activity.last_write(), opened);
        activity.wrote(&Poll::Pending);
        activity.wrote(&Poll::Ready(Ok(5)));
        assert_eq!(activity.write_blocked_since(), None);
        assert!(activity.last_write() >= blocked);
    }

    /// Polls `future` once: `Some` if it is ready.
    async fn poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut future).poll(cx) {
                Poll::Ready(output) => Some(output),
                Poll::Pending => None,
            })
        })
        .await
    }
}
