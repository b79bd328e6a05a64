//! The operations listener's connections (`--plain-listen`): the kubelet's
//! probes, Prometheus and the dashboard, on plain HTTP/1.1 or, with
//! `--ops-tls`, HTTPS.
//!
//! # Why kadmit owns this layer
//!
//! This port answers the liveness probe, so whatever a client does here
//! must neither exhaust the process's memory nor keep the probe from
//! getting through. Under actix-web's `HttpServer` it had no connection cap
//! (3,000 connections that each sent a 120 KB head and stalled held 446 MB)
//! and no bound on how long a client may leave its answer unread (400 that
//! never read `/api/denials` each held a copy of it). Here, through the
//! webhook listener's own connection layer ([`super::connections`]):
//!
//! - at most [`OpsListener::max_connections`](super::OpsListener) are kept
//!   (64 by default; a request head is at most 128 KiB, so about 8 MiB of
//!   heads). A new connection beyond that closes the oldest one
//!   ([`super::eviction`]) once no request is in progress on it, instead of
//!   waiting in the listen backlog behind the connections that hold the
//!   cap: a probe, answered within a millisecond of arriving, always gets
//!   through, however many stalled clients came before it;
//! - a client that takes nothing of its answer for 10 s (1 s while three
//!   quarters of the cap are open), or that is evicted while not taking
//!   it, is reset, so the kernel drops the unsent rest at once; the answer
//!   it held is a view of one shared rendering, handed over 16 KiB at a
//!   time ([`super::body`]), and the kernel's send buffer is fixed at
//!   64 KiB, so such a client holds about 48 KiB of process memory and
//!   128 KiB of kernel memory while it lasts;
//! - with `--ops-tls`, the handshake has the webhook's time bound
//!   ([`super::handshake`]).
//!
//! HTTP/1.1 only: probes, Prometheus and browsers all speak it, and it
//! keeps this port's memory per connection easy to bound.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_server::Server;
use actix_service::{Service, ServiceFactory, fn_factory, fn_service, map_config};
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{AppConfig, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::rt::net::TcpStream;
use actix_web::{App, Error, web};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::body::Buffered;
use super::connections::{self, Activity, Registry, Socket, Tracked};
use super::eviction::Eviction;
use super::handshake;
use super::{CLIENT_DISCONNECT_TIMEOUT, Config, ServeError, State, access, health};
use crate::metrics;

/// Open connections of the operations listener by default
/// (`--ops-max-connections`).
pub const OPS_MAX_CONNECTIONS: usize = 64;

/// The kernel's send buffer of a connection (it doubles the figure for
/// its bookkeeping): far more than any probe or scrape needs at once.
const SEND_BUFFER: usize = 64 << 10;

/// How long an idle keep-alive connection stays open (actix-web's default).
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// The operations listener, built by [`listen`].
pub(super) struct Listener {
    /// The server, not yet running.
    pub server: Server,
    /// The address bound.
    pub addr: SocketAddr,
}

/// A connection of the operations listener: plain, or after the TLS
/// handshake with `--ops-tls`.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Binds the operations listener and builds its server.
pub(super) fn listen(config: &Config, state: web::Data<State>) -> Result<Listener, ServeError> {
    let bind_error = |source| ServeError::Bind {
        addr: config.plain_listen,
        listener: "operations",
        source,
    };
    let listener = super::accept::bind(config.plain_listen).map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    let max_connections = config.ops.max_connections.max(1);
    let registry = Arc::new(Registry::new(
        metrics::Listener::Operations,
        max_connections,
    ));
    let eviction = Arc::new(Eviction::new(max_connections));
    let acceptor = config.ops.tls.clone().map(|mut tls| {
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(tls))
    });
    let handshake_timeout = config.connections.handshake_timeout;
    let access = web::Data::from(config.ops.access.clone());
    let request_timeout = state.limits.request_timeout;

    let server = Server::build()
        .workers(1)
        // A backstop only: eviction keeps the count at `max_connections`,
        // but an evicted connection whose answer is being written closes
        // only once it is written or stalls.
        .max_concurrent_connections(max_connections.saturating_mul(2))
        // `Bound::run` stops this server at the end of the shutdown.
        .disable_signals()
        .listen("kadmit-operations", listener, move || {
            let acceptor = acceptor.clone();
            let eviction = eviction.clone();
            let registry = registry.clone();
            let state = state.clone();
            let access = access.clone();
            fn_factory(move || {
                let acceptor = acceptor.clone();
                let eviction = eviction.clone();
                let registry = registry.clone();
                let state = state.clone();
                let access = access.clone();
                async move {
                    let builder = actix_http::HttpService::build()
                        .keep_alive(KEEP_ALIVE)
                        .client_request_timeout(request_timeout)
                        .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                        .local_addr(addr)
                        .on_connect_ext(mark_verified_client)
                        .graceful_shutdown_signal(close_when_evicted);
                    let builder = if acceptor.is_some() {
                        builder.secure()
                    } else {
                        builder
                    };
                    let h1 = builder
                        .h1(operations_app(state, access))
                        .new_service(())
                        .await?;
                    let worker = Rc::new(Worker {
                        acceptor,
                        eviction,
                        handshake_timeout,
                        h1,
                        registry,
                    });
                    Ok::<_, ()>(fn_service(move |tcp: TcpStream| {
                        let worker = worker.clone();
                        let registry = worker.registry.clone();
                        registry.serving(async move { worker.serve(tcp).await })
                    }))
                }
            })
        })
        .map_err(bind_error)?
        .run();
    Ok(Listener { server, addr })
}

/// The operations routes behind the access guard, every answer handed over
/// in shared pieces.
fn operations_app(
    state: web::Data<State>,
    access: web::Data<access::OpsAccess>,
) -> impl ServiceFactory<
    actix_http::Request,
    Config = (),
    Response = ServiceResponse<BoxBody>,
    Error = Error,
    InitError = (),
> {
    let app = App::new()
        .app_data(access)
        .wrap(actix_web::middleware::from_fn(access::guard))
        .wrap(actix_web::middleware::from_fn(in_shared_pieces))
        .configure(move |cfg| health::routes(cfg, &state));
    map_config(app, |()| AppConfig::default())
}

/// Hands a complete answer over in pieces that are views of it
/// ([`Buffered::shared`]) rather than as one piece actix copies whole.
async fn in_shared_pieces(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let response = next.call(request).await?;
    Ok(response.map_body(|_, body| match body.try_into_bytes() {
        Ok(bytes) => BoxBody::new(Buffered::shared(bytes)),
        Err(body) => body.boxed(),
    }))
}

/// Marks a connection whose client presented a certificate: with
/// `--ops-client-ca` rustls has verified it by then (a certificate that
/// does not verify fails the handshake).
fn mark_verified_client(stream: &Tracked<Stream>, extensions: &mut actix_web::dev::Extensions) {
    if let Stream::Tls(tls) = stream.get_ref()
        && tls
            .get_ref()
            .1
            .peer_certificates()
            .is_some_and(|chain| !chain.is_empty())
    {
        extensions.insert(access::VerifiedClient);
    }
}

/// When actix's dispatcher closes the connection being built, once no
/// request is in progress on it: when a newer connection has evicted it
/// (see `Worker::serve`).
fn close_when_evicted() -> impl Future<Output = ()> {
    let activity = connections::take_building();
    async move {
        match activity {
            Some(activity) => activity.close_asked().await,
            None => std::future::pending().await,
        }
    }
}

/// What the worker thread needs to serve a connection.
struct Worker<H> {
    acceptor: Option<TlsAcceptor>,
    eviction: Arc<Eviction>,
    handshake_timeout: Duration,
    h1: H,
    registry: Arc<Registry>,
}

impl<H> Worker<H>
where
    H: Service<(Tracked<Stream>, Option<SocketAddr>), Response = ()>,
    H::Error: std::fmt::Display,
{
    /// Serves one accepted connection until it closes.
    async fn serve(&self, tcp: TcpStream) {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "Cannot set TCP_NODELAY");
        }
        // A fixed send buffer: the kernel's autotuning would let a client
        // that does not read leave megabytes of answer in kernel memory.
        if let Err(error) = socket2::SockRef::from(&tcp).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!(%error, "Cannot set SO_SNDBUF");
        }
        let peer = tcp.peer_addr().ok();
        // Kept until the connection ends: dropping it leaves the set.
        let (_slot, mut evicted) = self.eviction.enter();
        let stream = match &self.acceptor {
            None => Stream::Plain(tcp),
            Some(acceptor) => {
                let Some(tls) = handshake::handshake(
                    acceptor,
                    self.handshake_timeout,
                    &mut evicted,
                    &self.registry,
                    tcp,
                    peer,
                )
                .await
                else {
                    return;
                };
                Stream::Tls(Box::new(tls))
            }
        };
        let activity = Activity::new();
        let dispatcher = connections::building_h1(&activity, || {
            self.h1.call((Tracked::new(stream, activity.clone()), peer))
        });
        let mut dispatcher = std::pin::pin!(dispatcher);
        let mut evicted = std::pin::pin!(evicted);
        let mut is_evicted = false;
        loop {
            tokio::select! {
                ended = &mut dispatcher => {
                    if let Err(error) = ended {
                        tracing::debug!(%error, peer = ?peer, "Operations connection ended with an error");
                    }
                    return;
                }
                () = self.registry.write_stalled(&activity) => {
                    self.registry.record_closed(metrics::CLOSED_WRITE_STALLED);
                    activity.reset_on_close();
                    tracing::debug!(peer = ?peer, "Closed an operations connection whose client took no answer");
                    return;
                }
                // Resolves (with an error) when the eviction drops its sender.
                _ = &mut evicted, if !is_evicted => {
                    is_evicted = true;
                    self.registry.record_closed(metrics::CLOSED_EVICTED);
                    if activity.write_blocked_since().is_some() {
                        // Its client is not taking the answer in progress:
                        // waiting for it would keep the newcomer waiting.
                        activity.reset_on_close();
                        tracing::debug!(peer = ?peer, "Closed the oldest operations connection, its answer unread");
                        return;
                    }
                    // The dispatcher closes it once no request is in
                    // progress, at once when none is.
                    tracing::debug!(peer = ?peer, "Closing the oldest operations connection to make room");
                    activity.ask_to_close();
                }
            }
        }
    }
}

impl Socket for Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
