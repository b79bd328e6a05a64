//! The TLS handshake of a new connection, bounded in time and closed early
//! when it must make room for a newer one ([`super::eviction`]): when a new
//! connection would exceed the cap, the oldest pending handshake (the one
//! that has stalled longest) is closed instead of pausing accepts, so a new
//! client always starts its handshake at once. Both listeners use it (the
//! operations listener with `--ops-tls`).

use std::net::SocketAddr;
use std::time::Duration;

use actix_web::rt::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::connections::Registry;
use crate::metrics;

/// Completes the TLS handshake of `tcp` within `timeout`, unless `evicted`
/// resolves first (the connection is closed to make room, see
/// [`super::eviction`]); `None` when it failed, timed out or was evicted
/// (counted in `registry`'s metrics).
pub(super) async fn handshake(
    acceptor: &TlsAcceptor,
    timeout: Duration,
    evicted: &mut oneshot::Receiver<()>,
    registry: &Registry,
    tcp: TcpStream,
    peer: Option<SocketAddr>,
) -> Option<TlsStream<TcpStream>> {
    let handshake = tokio::time::timeout(timeout, acceptor.accept(tcp));
    tokio::select! {
        finished = handshake => match finished {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(error)) => {
                tracing::debug!(%error, peer = ?peer, "TLS handshake failed");
                None
            }
            Err(_elapsed) => {
                registry.record_closed(metrics::CLOSED_HANDSHAKE_TIMEOUT);
                tracing::debug!(peer = ?peer, "TLS handshake timed out");
                None
            }
        },
        _ = evicted => {
            registry.record_closed(metrics::CLOSED_HANDSHAKE_EVICTED);
            tracing::debug!(
                peer = ?peer,
                "Closed a pending TLS handshake to make room for a new connection"
            );
            None
        }
    }
}
