//! The webhook listener's open connections: how many there are, when the
//! last one has closed (the end of a shutdown), and when they are so many
//! that idle ones must make room.
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

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_rt::ArbiterHandle;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, oneshot, watch};

/// How long a connection must have been idle to be closed while the
/// listener is crowded.
pub const IDLE_WHEN_CROWDED: Duration = Duration::from_secs(1);

/// The webhook listener's open connections, handshakes included.
#[derive(Debug)]
pub struct Registry {
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
    /// A registry for a listener of at most `max_connections`.
    pub fn new(max_connections: usize) -> Self {
        Registry {
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
        crate::metrics::record_open_connections(open);
        if open >= self.crowded_at {
            self.refresh_crowded();
        }
        OpenConnection(self.clone())
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
        crate::metrics::record_open_connections(open);
        if open + 1 >= registry.crowded_at {
            registry.refresh_crowded();
        }
        if open == 0 {
            registry.all_closed.notify_waiters();
        }
    }
}

/// A connection's stream, noting when it last read anything: for HTTP/1.1,
/// whose requests kadmit does not see begin and end, the time since the
/// last read is how long the connection has been idle.
#[derive(Debug)]
pub struct Tracked<T> {
    io: T,
    last_read: Rc<Cell<Instant>>,
}

impl<T> Tracked<T> {
    /// `io`, noting its reads in `last_read`.
    pub fn new(io: T, last_read: Rc<Cell<Instant>>) -> Self {
        Tracked { io, last_read }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last_read.set(Instant::now());
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    }

    #[test]
    fn crowded_from_three_quarters_of_the_maximum_until_below_again() {
        let registry = Arc::new(Registry::new(8));
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
        let registry = Arc::new(Registry::new(8));
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
        let registry = Arc::new(Registry::new(4));
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
