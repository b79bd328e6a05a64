//! Keeping the served plan current: the store request handlers read the plan
//! from, the watcher that notices rule-file changes, and the reload loop
//! that turns a request into a new plan or a reported error.

pub mod reloader;
pub mod store;
pub mod watcher;

pub use reloader::{
    ReloadError, ReloadHistory, ReloadResult, ReloadState, Reloader, Reloads, Shadowing, Trigger,
    spawn_loop,
};
pub use store::Store;
