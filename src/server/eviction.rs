//! Bounding a set of connections by closing the oldest: a newcomer beyond
//! the bound closes the one that arrived first, instead of waiting for room.
//! Connections that stall (a TLS handshake never finished, a request head
//! never completed) then cannot keep a new client waiting, and the count
//! stays at the bound however fast they come. The webhook listener bounds
//! its pending TLS handshakes this way ([`super::handshake`]), the
//! operations listener all of its connections ([`super::operations`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// A bounded set of connections (or of their handshakes), oldest first,
/// each with the means to close it.
#[derive(Debug)]
pub struct Eviction {
    max: usize,
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    next: u64,
    /// By arrival: dropping a sender closes that connection.
    closers: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Eviction {
    /// At most `max` entered at once.
    pub fn new(max: usize) -> Self {
        Eviction {
            max: max.max(1),
            pending: Mutex::new(Pending::default()),
        }
    }

    /// Registers a newcomer, closing the oldest ones beyond the cap. The
    /// receiver resolves when this one is to be closed; the slot
    /// unregisters it when dropped.
    pub fn enter(self: &Arc<Self>) -> (Slot, oneshot::Receiver<()>) {
        let (closer, closed) = oneshot::channel();
        // A poisoned lock only means a thread panicked while holding it; the
        // map is still consistent (each operation is one call on it).
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        while pending.closers.len() >= self.max {
            // Dropping the sender wakes the oldest, which ends.
            let _ = pending.closers.pop_first();
        }
        let id = pending.next;
        pending.next += 1;
        pending.closers.insert(id, closer);
        (
            Slot {
                eviction: self.clone(),
                id,
            },
            closed,
        )
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closers
            .len()
    }
}

/// A registered connection; unregistered when dropped.
#[derive(Debug)]
pub struct Slot {
    eviction: Arc<Eviction>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut pending = self
            .eviction
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.closers.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_beyond_the_cap_closes_the_oldest() {
        let handshakes = Arc::new(Eviction::new(2));
        let (first, mut first_closed) = handshakes.enter();
        let (_second, mut second_closed) = handshakes.enter();
        assert_eq!(handshakes.pending(), 2);
        let (_third, mut third_closed) = handshakes.enter();
        assert_eq!(handshakes.pending(), 2);
        assert!(first_closed.try_recv().is_err(), "the oldest is closed");
        assert!(matches!(
            second_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ));
        assert!(matches!(
            third_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ));
        // An evicted slot unregisters nothing else when dropped.
        drop(first);
        assert_eq!(handshakes.pending(), 2);
    }

    #[test]
    fn a_finished_connection_leaves_the_set() {
        let handshakes = Arc::new(Eviction::new(4));
        let (slot, _closed) = handshakes.enter();
        assert_eq!(handshakes.pending(), 1);
        drop(slot);
        assert_eq!(handshakes.pending(), 0);
    }
}
