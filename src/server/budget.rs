//! The process-wide budget of buffered request-body bytes.
//!
//! Each review body is collected in memory before it is decoded, and each may
//! be as large as `--max-body-bytes`. The per-body limit alone lets many
//! connections together hold far more than the process has: 24 stalled 16 MiB
//! bodies are 384 MiB. Every body therefore reserves its bytes here as they
//! arrive, before they are copied, and gives them back when the review is
//! done. A body that cannot reserve is refused at once with 503 (the server is
//! busy; the body itself is within its limit, so 413 would blame the wrong
//! party), and its connection stays usable.
//!
//! The answer is held too, until the connection has taken it: it echoes the
//! review's uid whole, so a 16 MiB body can have a 16 MiB answer, and a
//! client that never reads would otherwise leave it in memory with nothing
//! counting it. Once a review is answered, its reservation shrinks to the
//! answer's size and goes with the answer's body ([`super::body`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes all bodies being read or evaluated may hold together.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    used: AtomicUsize,
}

impl BodyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(BodyBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes reserved right now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation, to be grown as bytes arrive.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }
}

/// Bytes held from a [`BodyBudget`], returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Reservation {
    /// Holds `more` bytes in addition; false, holding nothing more, when the
    /// budget has not that much left.
    #[must_use]
    pub fn grow(&mut self, more: usize) -> bool {
        if !self.budget.take(more) {
            return false;
        }
        self.bytes += more;
        true
    }

    /// Gives back what is held beyond `bytes` (nothing when it holds no
    /// more than that).
    pub fn keep_at_most(&mut self, bytes: usize) {
        let surplus = self.bytes.saturating_sub(bytes);
        if surplus > 0 {
            self.budget.used.fetch_sub(surplus, Ordering::AcqRel);
            self.bytes -= surplus;
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The whole budget in bytes, for the refusal's message.
    pub fn limit(&self) -> usize {
        self.budget.limit
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_the_budget_and_give_it_back_when_dropped() {
        let budget = BodyBudget::new(100);
        let mut first = budget.reservation();
        assert!(first.grow(60));
        let mut second = budget.reservation();
        assert!(!second.grow(41), "over the budget");
        assert_eq!(second.bytes(), 0, "a refused growth holds nothing");
        assert!(second.grow(40));
        assert_eq!(budget.used(), 100);
        drop(first);
        assert_eq!(budget.used(), 40);
        assert!(second.grow(60));
        drop(second);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn keeping_at_most_gives_back_the_surplus_only() {
        let budget = BodyBudget::new(100);
        let mut held = budget.reservation();
        assert!(held.grow(80));
        held.keep_at_most(90);
        assert_eq!(
            (held.bytes(), budget.used()),
            (80, 80),
            "nothing to give back"
        );
        held.keep_at_most(30);
        assert_eq!((held.bytes(), budget.used()), (30, 30));
        drop(held);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn an_overflowing_request_is_refused() {
        let budget = BodyBudget::new(usize::MAX);
        let mut held = budget.reservation();
        assert!(held.grow(usize::MAX));
        assert!(!budget.reservation().grow(1));
    }
}
