//! The HTTP/2 streams a worker serves at once, bounded by ending the oldest.
//!
//! `--h2-max-concurrent-streams` bounds the streams of one connection, not
//! those of all connections together: 300 connections of 100 streams, each
//! waiting for a body that never comes, held 30,000 handlers and took the
//! server from 48 to 205 MiB; at the default connection cap, past the shipped
//! 256 MiB. A stream beyond this bound ends the oldest open one instead of
//! waiting for room, as a TLS handshake beyond its bound does
//! ([`super::eviction`]). The API server sends a review in one piece and
//! reads its answer at once, so its streams are open for microseconds: the
//! oldest open stream is one whose client has stalled, and a new stream
//! always gets through.
//!
//! Each worker keeps its own share of the bound, as actix does for
//! connections, so opening a stream takes no lock.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use tokio::task::AbortHandle;

use crate::metrics;

/// The open streams of one worker, oldest first.
#[derive(Debug)]
pub(super) struct OpenStreams {
    max: usize,
    next: Cell<u64>,
    /// By arrival: the task serving each stream, once spawned.
    open: RefCell<BTreeMap<u64, Option<AbortHandle>>>,
}

impl OpenStreams {
    /// At most `max` open at once (at least one).
    pub(super) fn new(max: usize) -> Rc<Self> {
        Rc::new(OpenStreams {
            max: max.max(1),
            next: Cell::new(0),
            open: RefCell::new(BTreeMap::new()),
        })
    }

    /// Registers a new stream, ending the oldest open ones beyond the bound.
    /// The stream's task is given with [`OpenStream::serve_on`]; the stream
    /// leaves the set when the returned guard is dropped.
    pub(super) fn open(self: &Rc<Self>) -> OpenStream {
        let mut open = self.open.borrow_mut();
        while open.len() >= self.max {
            let Some((_, task)) = open.pop_first() else {
                break;
            };
            // Aborting drops the task's future at its next turn: the stream
            // is reset (CANCEL), its body and answer are dropped, and its
            // share of the body budget is given back.
            if let Some(task) = task {
                task.abort();
            }
            metrics::record_stream_reset(metrics::CLOSED_EVICTED);
        }
        let id = self.next.get();
        self.next.set(id + 1);
        open.insert(id, None);
        OpenStream {
            streams: self.clone(),
            id,
        }
    }

    /// Streams open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.borrow().len()
    }
}

/// A registered stream; it leaves the set when dropped.
#[derive(Debug)]
pub(super) struct OpenStream {
    streams: Rc<OpenStreams>,
    id: u64,
}

impl OpenStream {
    /// Records the task serving this stream, so that a newer stream beyond
    /// the bound can end it; a stream already ended has its task ended at
    /// once.
    pub(super) fn serve_on(streams: &OpenStreams, id: u64, task: AbortHandle) {
        match streams.open.borrow_mut().get_mut(&id) {
            Some(slot) => *slot = Some(task),
            None => task.abort(),
        }
    }

    /// This stream's place in the set, for [`OpenStream::serve_on`].
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.streams.open.borrow_mut().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that never ends by itself, on a runtime of the test's own.
    fn pending_task(set: &tokio::task::LocalSet) -> tokio::task::JoinHandle<()> {
        set.spawn_local(std::future::pending::<()>())
    }

    #[test]
    fn a_stream_beyond_the_bound_ends_the_oldest() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let set = tokio::task::LocalSet::new();
        let streams = OpenStreams::new(2);
        let first = streams.open();
        let first_task = pending_task(&set);
        OpenStream::serve_on(&streams, first.id(), first_task.abort_handle());
        let second = streams.open();
        let second_task = pending_task(&set);
        OpenStream::serve_on(&streams, second.id(), second_task.abort_handle());
        assert_eq!(streams.len(), 2);

        let third = streams.open();
        assert_eq!(streams.len(), 2, "the oldest made room");
        let (first_ended, second_ended) = set.block_on(&runtime, async {
            // An aborted task ends at its next turn.
            let first = first_task.await;
            tokio::task::yield_now().await;
            (first, second_task.is_finished())
        });
        assert!(
            first_ended.is_err_and(|error| error.is_cancelled()),
            "the oldest stream's task was aborted"
        );
        assert!(!second_ended, "the second stream is still served");

        // The ended stream's guard, dropped later, takes no other's place.
        drop(first);
        assert_eq!(streams.len(), 2);
        drop((second, third));
        assert_eq!(streams.len(), 0);
    }

    #[test]
    fn a_stream_ended_before_its_task_is_recorded_has_its_task_ended() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let set = tokio::task::LocalSet::new();
        let streams = OpenStreams::new(1);
        let first = streams.open();
        let _second = streams.open();
        // The first stream was ended before its task was recorded: the task
        // is ended, and the stream is not put back.
        let task = pending_task(&set);
        OpenStream::serve_on(&streams, first.id(), task.abort_handle());
        assert_eq!(streams.len(), 1);
        let ended = set.block_on(&runtime, task);
        assert!(ended.is_err_and(|error| error.is_cancelled()));
    }
}
