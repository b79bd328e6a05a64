//! The one place the current [`Plan`] lives: an atomically swappable slot that
//! request handlers read without locking and a reload replaces in one step.
//!
//! A reload builds the new plan off to the side and calls [`Store::store`]
//! only when it compiled; a failed build never touches the store, so the old
//! plan keeps serving. Until the first plan is stored the store is empty and
//! the server reports not ready.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use crate::plan::Plan;

/// Holds the plan being served, if any, and numbers the plans it is given.
#[derive(Default)]
pub struct Store {
    current: ArcSwapOption<Plan>,
    /// The plan replaced by the last store, kept until the next store so that
    /// freeing it (milliseconds for thousands of rules) happens on the reload
    /// thread, not on whichever review happened to hold the last reference.
    retired: Mutex<Option<Arc<Plan>>>,
    /// The generation of the last plan stored; 0 before the first.
    last_generation: AtomicU64,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("generation", &self.generation())
            .finish()
    }
}

impl Store {
    /// An empty store: not ready until a plan is stored.
    pub fn new() -> Self {
        Store::default()
    }

    /// The plan being served, or `None` before the first plan is stored.
    ///
    /// The guard keeps the plan alive for one review; a reload that happens
    /// meanwhile does not affect it.
    pub fn load(&self) -> Option<Guard> {
        // One reference-count increment per review (a few nanoseconds) buys a
        // guard that cannot be empty.
        self.current.load_full().map(|inner| Guard { inner })
    }

    /// The plan being served as an owned `Arc`, or `None` before the first.
    pub fn load_full(&self) -> Option<Arc<Plan>> {
        self.current.load_full()
    }

    /// Makes `plan` the one served, giving it the next generation number
    /// (1 for the first), and returns that number.
    ///
    /// Reviews already holding the previous plan finish with it.
    pub fn store(&self, plan: Plan) -> u64 {
        // Reloads are serialised by the caller (one reload loop); fetch_add
        // still keeps generations unique if two ever race.
        let generation = self.last_generation.fetch_add(1, Ordering::AcqRel) + 1;
        let previous = self
            .current
            .swap(Some(Arc::new(plan.with_generation(generation))));
        // Reviews still holding the previous plan finish with it; the one
        // retired before it has had a whole reload interval to be released.
        let older = std::mem::replace(
            &mut *self
                .retired
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            previous,
        );
        drop(older);
        generation
    }

    /// True once a plan has been stored.
    pub fn is_ready(&self) -> bool {
        self.current.load().is_some()
    }

    /// The generation of the plan being served; 0 before the first.
    pub fn generation(&self) -> u64 {
        self.current
            .load()
            .as_ref()
            .map_or(0, |plan| plan.generation())
    }
}

/// A plan borrowed from the [`Store`] for the duration of one review.
pub struct Guard {
    inner: Arc<Plan>,
}

impl Deref for Guard {
    type Target = Plan;

    fn deref(&self) -> &Plan {
        &self.inner
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("generation", &self.generation())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::compile;
    use crate::rules::Loaded;

    /// The plan of an empty rule directory, built through the public API so
    /// the test does not depend on how `Plan` is constructed.
    fn empty_plan() -> Plan {
        compile(&Loaded::default()).expect("an empty rule set compiles")
    }

    #[test]
    fn empty_until_the_first_plan() {
        let store = Store::new();
        assert!(!store.is_ready());
        assert!(store.load().is_none());
        assert_eq!(store.generation(), 0);
    }

    #[test]
    fn store_numbers_plans_from_one() {
        let store = Store::new();
        assert_eq!(store.store(empty_plan()), 1);
        assert!(store.is_ready());
        assert_eq!(store.load().map(|plan| plan.generation()), Some(1));
        assert_eq!(store.store(empty_plan()), 2);
        assert_eq!(store.generation(), 2);
    }

    #[test]
    fn a_held_guard_keeps_its_plan_across_a_swap() {
        let store = Store::new();
        store.store(empty_plan());
        let held = store.load();
        store.store(empty_plan());
        assert_eq!(held.map(|plan| plan.generation()), Some(1));
        assert_eq!(store.load_full().map(|plan| plan.generation()), Some(2));
    }
}
