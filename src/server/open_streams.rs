//! The HTTP/2 streams the process serves at once, on all connections
//! together, bounded by ending the oldest.
//!
//! `--h2-max-concurrent-streams` bounds the streams of one connection, not
//! those of all connections together: 500 connections of 100 streams, each
//! waiting for a body that never comes, held 50,000 handlers and took the
//! server to 323 MiB, past the shipped 256 MiB.
//!
//! A stream beyond this bound ends the oldest open stream that waits for
//! its client (for more of its body, or for window to send its answer), so
//! a client holding the bound with stalled streams cannot shut out new
//! reviews, as it could if new streams were refused. A stream being read,
//! evaluated or answered is never ended: the API server sends a review in
//! one piece and reads its answer at once, so its streams hardly ever wait,
//! and a client opening streams fast cannot end them. When no open stream
//! waits, the new stream is refused (`REFUSED_STREAM`, which tells the
//! client that nothing was done, so it may retry).
//!
//! One set for the process: a share per worker would let one API server
//! connection (served by one worker) end its own reviews on a machine with
//! many workers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::task::AbortHandle;

use crate::metrics;

/// Whether a stream waits for its client, as its body and its answer note.
#[derive(Debug, Default)]
pub(super) struct Waiting(AtomicBool);

impl Waiting {
    /// Notes whether the stream now waits for its client.
    pub(super) fn set(&self, waiting: bool) {
        self.0.store(waiting, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The open streams of the process, oldest first.
#[derive(Debug)]
pub(super) struct OpenStreams {
    max: usize,
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Entry>>,
}

#[derive(Debug)]
struct Entry {
    waiting: Arc<Waiting>,
    /// The task serving the stream, once spawned.
    task: Option<AbortHandle>,
}

impl OpenStreams {
    /// At most `max` open at once (at least one).
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(OpenStreams {
            max: max.max(1),
            next: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        // A poisoned lock only means a thread panicked while holding it; the
        // map is still consistent (each operation is one call on it).
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new stream, ending the oldest waiting one when the set
    /// is full; `None` when it is full and none waits, and the new stream is
    /// to be refused. The stream's task is given with
    /// [`OpenStreams::serve_on`]; the stream leaves the set when the returned
    /// guard is dropped.
    pub(super) fn open(self: &Arc<Self>) -> Option<OpenStream> {
        let waiting = Arc::new(Waiting::default());
        let (ended, id) = {
            let mut open = self.entries();
            let mut ended = None;
            if open.len() >= self.max {
                let oldest_waiting = open
                    .iter()
                    .find_map(|(id, entry)| entry.waiting.get().then_some(*id))?;
                ended = open.remove(&oldest_waiting).map(|entry| entry.task);
            }
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            open.insert(
                id,
                Entry {
                    waiting: waiting.clone(),
                    task: None,
                },
            );
            (ended, id)
        };
        if let Some(task) = ended {
            // Aborting drops the task's future at its next turn: the stream
            // is reset (CANCEL), its body and answer are dropped, and its
            // share of the body budget is given back.
            if let Some(task) = task {
                task.abort();
            }
            metrics::record_stream_reset(metrics::CLOSED_EVICTED);
        }
        Some(OpenStream {
            streams: self.clone(),
            id,
            waiting,
        })
    }

    /// Records the task serving stream `id`, so that a newer stream beyond
    /// the bound can end it; a stream already ended has its task ended at
    /// once.
    pub(super) fn serve_on(&self, id: u64, task: AbortHandle) {
        let ended = match self.entries().get_mut(&id) {
            Some(entry) => {
                entry.task = Some(task);
                None
            }
            None => Some(task),
        };
        if let Some(task) = ended {
            task.abort();
        }
    }

    /// Streams open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

/// A registered stream; it leaves the set when dropped.
#[derive(Debug)]
pub(super) struct OpenStream {
    streams: Arc<OpenStreams>,
    id: u64,
    waiting: Arc<Waiting>,
}

impl OpenStream {
    /// This stream's place in the set, for [`OpenStreams::serve_on`].
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Where the stream's body and answer note whether it waits.
    pub(super) fn waiting(&self) -> &Arc<Waiting> {
        &self.waiting
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.streams.entries().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that never ends by itself, on a runtime of the test's own.
    fn pending_task(set: &tokio::task::LocalSet) -> tokio::task::JoinHandle<()> {
        set.spawn_local(std::future::pending::<()>())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_stream_beyond_the_bound_ends_the_oldest_waiting_one() {
        let runtime = runtime();
        let set = tokio::task::LocalSet::new();
        let streams = OpenStreams::new(3);
        let served = |stream: &OpenStream| {
            let task = pending_task(&set);
            streams.serve_on(stream.id(), task.abort_handle());
            task
        };
        let busy = streams.open().expect("room");
        let busy_task = served(&busy);
        let first = streams.open().expect("room");
        let first_task = served(&first);
        let second = streams.open().expect("room");
        let second_task = served(&second);

        // Full, and none waits for its client: refused.
        assert!(streams.open().is_none(), "refused while none waits");
        assert_eq!(streams.len(), 3);

        // The oldest stream is busy; of the two waiting, the older ends.
        first.waiting().set(true);
        second.waiting().set(true);
        let third = streams.open().expect("a waiting one made room");
        assert_eq!(streams.len(), 3);
        let (first_ended, busy_ended, second_ended) = set.block_on(&runtime, async {
            // An aborted task ends at its next turn.
            let first = first_task.await;
            tokio::task::yield_now().await;
            (first, busy_task.is_finished(), second_task.is_finished())
        });
        assert!(
            first_ended.is_err_and(|error| error.is_cancelled()),
            "the oldest waiting stream's task was aborted"
        );
        assert!(!busy_ended && !second_ended, "the others are still served");

        // The ended stream's guard, dropped later, takes no other's place.
        drop(first);
        assert_eq!(streams.len(), 3);
        drop((busy, second, third));
        assert_eq!(streams.len(), 0);
    }

    #[test]
    fn a_stream_ended_before_its_task_is_recorded_has_its_task_ended() {
        let runtime = runtime();
        let set = tokio::task::LocalSet::new();
        let streams = OpenStreams::new(1);
        let first = streams.open().expect("room");
        first.waiting().set(true);
        let _second = streams.open().expect("room");
        // The first stream was ended before its task was recorded: the task
        // is ended, and the stream is not put back.
        let task = pending_task(&set);
        streams.serve_on(first.id(), task.abort_handle());
        assert_eq!(streams.len(), 1);
        let ended = set.block_on(&runtime, task);
        assert!(ended.is_err_and(|error| error.is_cancelled()));
    }

    #[test]
    fn streams_of_every_worker_share_one_set() {
        let streams = OpenStreams::new(1);
        let held = streams.open().expect("room");
        let other = streams.clone();
        let refused = std::thread::spawn(move || other.open().is_none())
            .join()
            .expect("thread");
        assert!(refused, "another thread sees the set full");
        drop(held);
        assert_eq!(streams.len(), 0);
    }
}
