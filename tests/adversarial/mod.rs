//! Hostile input against the real binary (issue 11: no review, connection
//! or rule file can stall, exhaust or silently disable kadmit): each test
//! drives one attack that once did, and checks the bound that now holds.
//!
//! Resource bounds are checked by the memory or CPU time of the process
//! (from `/proc`), with generous limits, never by timing alone; every wait
//! has a deadline, every load is bounded in count, and all traffic stays on
//! 127.0.0.1.
#![cfg(unix)]

mod audit;
mod bodies;
mod cel_memory;
mod certificates;
mod crowding;
mod denials;
mod edge;
mod half_written;
mod handshakes;
mod operations;
mod operations_connections;
mod parsed;
mod regexes;
mod reviews;
mod rolling_restart;
mod rule_files;
mod shutdown;
mod stdout;
mod stream_churn;
mod streams;
pub mod support;
