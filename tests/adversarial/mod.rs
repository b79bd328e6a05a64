//! Clients that try to stall or exhaust `kadmit serve` (issue 11): the real
//! binary on 127.0.0.1, attacked one way per module, must keep its memory
//! bounded and keep answering the API server.
//!
//! Every attack is bounded in count and in time, and each wait is on
//! something the server did (a frame, a log line, a response), not a sleep.

mod bodies;
mod handshakes;
mod streams;

use std::sync::Arc;

use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::server::harness::{Kadmit, roots_from_pem};

/// Resident memory of the server process, from `/proc/<pid>/status`.
pub fn rss_bytes(kadmit: &Kadmit) -> u64 {
    let path = format!("/proc/{}/status", kadmit.pid());
    let status = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("no VmRSS in {path}"))
}

/// Mebibytes, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// An async TLS connection to the server trusting its generated CA and
/// offering `alpn`, handshake completed.
pub async fn tls_connect(kadmit: &Kadmit, alpn: &[u8]) -> TlsStream<tokio::net::TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots_from_pem(kadmit.ca_pem()))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls::pki_types::ServerName::IpAddress(kadmit.tls_addr().ip().into());
    let tcp = tokio::net::TcpStream::connect(kadmit.tls_addr())
        .await
        .expect("connect");
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

/// A single-threaded runtime for one test's clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
