//! Keeping the served plan current: the store that request handlers read the
//! plan from, and (later) the watcher that rebuilds the plan when rule files
//! change.

pub mod store;
