//! Hostile and broken rule directories against the real binary (issue 11:
//! no review, connection or rule file can stall, exhaust or silently
//! disable kadmit): rule files that would exhaust memory or time, entries
//! that cannot be read, files served half-written, and the operations
//! listener while a reload runs.
//!
//! Resource bounds are checked by the peak memory of the process, with
//! generous limits, never by timing alone; every wait has a deadline.
#![cfg(unix)]

mod half_written;
mod operations;
mod rule_files;
pub mod support;
