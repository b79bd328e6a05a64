//! Integration tests of `kadmit serve` (issue 3): the real binary on
//! ephemeral ports, spoken to over TLS like kube-apiserver does.

mod bad_input;
mod endpoints;
pub(crate) mod harness;
pub(crate) mod lifecycle;
mod record;
mod tls;
