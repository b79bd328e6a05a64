//! Graceful shutdown of the webhook listener, in the order a rolling update
//! needs it.
//!
//! 1. **Draining** (from SIGTERM, for `--shutdown-delay-secs`): `/readyz`
//!    answers 503, so the pod leaves its Service's endpoints, but the
//!    listener keeps accepting: kube-proxy and load balancers go on sending
//!    new connections to a terminating pod for a few seconds, and refusing
//!    them would fail the API server's calls. Every HTTP/1.1 response now
//!    carries `Connection: close` and every HTTP/2 connection gets GOAWAY,
//!    so clients move to another replica after the reviews they have sent.
//! 2. **Closing**: the listener is closed (a new connection is refused at
//!    once), idle keep-alive connections are closed, and every review
//!    already read is answered, including those on connections the kernel
//!    had accepted but no worker had picked up yet.
//! 3. The process exits as soon as no connection is left, or when
//!    `--shutdown-timeout-secs` have passed since closing began, closing
//!    whatever is still open.
//!
//! SIGINT (Ctrl-C at a terminal) skips the drain delay; a second signal
//! ends the wait at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix_rt::ArbiterHandle;
use tokio::sync::{Notify, oneshot, watch};

/// Where the server is in its shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Ready and accepting.
    Serving,
    /// Not ready, still accepting; connections are asked to move.
    Draining,
    /// No longer accepting; the reviews already read are being answered.
    Closing,
}

/// The shutdown phase and the webhook listener's open connections, shared by
/// the signal handling and every connection.
#[derive(Debug)]
pub struct Shutdown {
    phase: watch::Sender<Phase>,
    open: AtomicUsize,
    all_closed: Notify,
    /// The webhook listener's worker threads, to flush their queues of
    /// accepted connections.
    workers: Mutex<Vec<ArbiterHandle>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            phase: watch::Sender::new(Phase::Serving),
            open: AtomicUsize::new(0),
            all_closed: Notify::new(),
            workers: Mutex::new(Vec::new()),
        }
    }
}

impl Shutdown {
    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// True from the start of the drain on: not ready, connections asked
    /// to move.
    pub fn has_begun(&self) -> bool {
        self.phase() >= Phase::Draining
    }

    /// Moves on to `phase`; never back.
    pub fn advance(&self, phase: Phase) {
        self.phase.send_if_modified(|current| {
            let later = *current < phase;
            if later {
                *current = phase;
            }
            later
        });
    }

    /// Resolves once the shutdown has reached `phase` (at once if it has).
    pub async fn reached(&self, phase: Phase) {
        let mut phases = self.phase.subscribe();
        // The sender lives as long as `self`, so this cannot fail while
        // anyone waits on it.
        let _ = phases.wait_for(|current| *current >= phase).await;
    }

    /// Counts a connection of the webhook listener as open until the guard
    /// is dropped.
    pub fn open(self: &Arc<Self>) -> OpenConnection {
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenConnection(self.clone())
    }

    /// Connections of the webhook listener open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
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

    /// Resolves when every connection accepted before the listener closed
    /// has been served and closed.
    ///
    /// A connection the accept thread has handed to a worker that is busy
    /// with a review waits in that worker's queue, not yet counted as open.
    /// A task spawned on each worker after accepting stopped runs only once
    /// the worker has taken what was queued before it (a worker runs its
    /// tasks in the order they were woken), so after those tasks the open
    /// count covers every accepted connection.
    pub async fn connections_closed(&self) {
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

/// An open connection of the webhook listener; closed when dropped.
#[derive(Debug)]
pub struct OpenConnection(Arc<Shutdown>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.all_closed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_only_move_forward() {
        let shutdown = Shutdown::default();
        assert_eq!(shutdown.phase(), Phase::Serving);
        assert!(!shutdown.has_begun());
        shutdown.advance(Phase::Closing);
        shutdown.advance(Phase::Draining);
        assert_eq!(shutdown.phase(), Phase::Closing);
        assert!(shutdown.has_begun());
    }

    #[test]
    fn waiting_for_a_phase_already_reached_returns_at_once() {
        let shutdown = Shutdown::default();
        shutdown.advance(Phase::Draining);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                shutdown.reached(Phase::Draining),
            )
            .await
            .expect("already draining");
        });
    }

    #[test]
    fn connections_closed_waits_for_the_last_open_connection() {
        let shutdown = Arc::new(Shutdown::default());
        let first = shutdown.open();
        let second = shutdown.open();
        assert_eq!(shutdown.open_connections(), 2);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let waiting = shutdown.connections_closed();
            let mut waiting = std::pin::pin!(waiting);
            drop(first);
            // One still open: not resolved.
            assert!(
                poll_once(waiting.as_mut()).await.is_none(),
                "resolved with a connection open"
            );
            drop(second);
            tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
                .await
                .expect("resolved once the last connection closed");
        });
        assert_eq!(shutdown.open_connections(), 0);
    }

    /// Polls `future` once: `Some` if it is ready.
    async fn poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(output) => Some(output),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
