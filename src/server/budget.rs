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
    fn an_overflowing_request_is_refused() {
        let budget = BodyBudget::new(usize::MAX);
        let mut held = budget.reservation();
        assert!(held.grow(usize::MAX));
        assert!(!budget.reservation().grow(1));
    }
}
