//! Hot reload of the rules (issue 4): a kubelet atomic writer for the tests,
//! the reload pieces in-process, and the real binary under every way a rules
//! directory changes, including while reviews are being answered.
#![cfg(unix)]

mod concurrency;
pub mod kubelet;
mod library;
mod patterns;
mod shadow;
mod signals;
pub mod support;
