//! Hostile input against the real binary (issue 11: no review, connection or
//! rule file can stall, exhaust or silently disable kadmit): huge fields,
//! requests actix answers before kadmit sees them, closed output, bad
//! certificates. One file per concern.
//!
//! Memory and size bounds are checked with generous margins: what they catch
//! is growth with the input (hundreds of megabytes), not a few megabytes of
//! allocator slack.

mod certificates;
mod denials;
mod edge;
mod stdout;

use std::time::{Duration, Instant};

/// The resident set size of process `pid`, in bytes (`VmRSS` of
/// `/proc/<pid>/status`).
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {path}: {error}"));
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {path}:\n{status}"));
    kib * 1024
}

/// Fails the test once `deadline` has passed; for loops bounded in time.
pub(crate) fn before(deadline: Instant, what: &str) {
    assert!(Instant::now() < deadline, "{what} took longer than allowed");
}

/// Time allowed for a whole test's traffic.
pub(crate) const TRAFFIC_DEADLINE: Duration = Duration::from_secs(120);
