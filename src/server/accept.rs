//! The webhook listener's connections: accepting them, the TLS handshake
//! (bounded in time and in number), and handing each one by ALPN to HTTP/1.1
//! (actix's dispatcher) or HTTP/2 ([`super::http2`]), both serving the same
//! actix-web `App`.
//!
//! # Why kadmit owns this layer
//!
//! actix-web's `HttpServer` builds its HTTP/2 connections with no stream
//! limit and no header-list bound, and offers no way to set them; its TLS
//! acceptor pauses accepting while 256 handshakes are pending on a worker, so
//! a few thousand connections that send five bytes and stall keep every new
//! client waiting in the listen backlog for seconds. Here:
//!
//! - a handshake has [`Connections::handshake_timeout`] to complete;
//! - at most [`Connections::max_handshakes`] are pending in the process, and
//!   when a new connection would exceed that, the oldest pending one (the one
//!   that has stalled longest) is closed instead of pausing accepts, so a new
//!   client always starts its handshake at once;
//! - at most [`Connections::max_connections`] are open in the process, after
//!   which new ones wait in the listen backlog;
//! - idle connections make room while the listener is crowded, and an
//!   HTTP/1.1 client that takes nothing of its answer for 10 s (1 s while
//!   crowded) is disconnected ([`super::connections`]).
//!
//! The handshake itself is [`super::handshake`], shared with the operations
//! listener ([`super::operations`]).

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_http::ConnectionType;
use actix_server::Server;
use actix_service::{
    Service, ServiceFactory, ServiceFactoryExt, fn_factory, fn_service, map_config,
};
use actix_web::dev::{AppConfig, ServiceResponse};
use actix_web::rt::net::TcpStream;
use actix_web::{App, Error, web};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::connections::{self, Activity, Registry, Tracked};
use super::eviction::Eviction;
use super::handshake;
use super::http2::Http2;
use super::open_streams::OpenStreams;
use super::shutdown::{Phase, Shutdown};
use super::{CLIENT_DISCONNECT_TIMEOUT, Config, KEEP_ALIVE, ServeError, State, routes};
use crate::metrics;

/// Connections the kernel queues for the webhook listener while kadmit is
/// not accepting (actix-web's default).
const BACKLOG: i32 = 2048;

/// Each connection's kernel send buffer (the kernel doubles it): room for
/// any ordinary answer at once, and at most this much of an answer waits in
/// the kernel for a client that does not read.
const SEND_BUFFER: usize = 128 << 10;

/// Bounds on the webhook listener's connections.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    /// Open connections in the process, handshakes included; beyond it new
    /// connections wait in the listen backlog.
    pub max_connections: usize,
    /// Connections in TLS handshake at once in the process; a new one beyond
    /// it closes the oldest pending handshake.
    pub max_handshakes: usize,
    /// Time allowed for the TLS handshake.
    pub handshake_timeout: Duration,
    /// HTTP/2 streams a connection may have open at once (advertised in
    /// SETTINGS_MAX_CONCURRENT_STREAMS; more are refused).
    pub max_concurrent_streams: u32,
    /// HTTP/2 streams open in the process, all connections together; a new
    /// one beyond it ends the oldest (see [`super::open_streams`]).
    pub max_open_streams: usize,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            max_connections: 512,
            max_handshakes: 256,
            handshake_timeout: Duration::from_millis(2000),
            max_concurrent_streams: 100,
            max_open_streams: 1024,
        }
    }
}

/// The webhook listener, built by [`listen`].
pub(super) struct Listener {
    /// The server, not yet running.
    pub server: Server,
    /// The listening socket, to close it at shutdown.
    pub socket: std::net::TcpListener,
    /// The address bound.
    pub addr: SocketAddr,
    /// Its open connections.
    pub connections: Arc<Registry>,
}

/// Binds the webhook listener and builds its server.
pub(super) fn listen(
    config: &Config,
    mut tls: rustls::ServerConfig,
    state: web::Data<State>,
) -> Result<Listener, ServeError> {
    let bind_error = |source| ServeError::Bind {
        addr: config.tls_listen,
        listener: "tls",
        source,
    };
    let listener = bind(config.tls_listen).map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    let closer = listener.try_clone().map_err(bind_error)?;

    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let connections = config.connections;
    let workers = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let builder = Server::build()
        .workers(workers)
        // actix counts connections per worker.
        .max_concurrent_connections(connections.max_connections.div_ceil(workers).max(1))
        // `Bound::run` handles the signals and the shutdown (`shutdown.rs`)
        // and stops this server only once nothing is left to serve.
        .disable_signals();
    let shutdown = state.shutdown().clone();
    let registry = Arc::new(Registry::new(
        metrics::Listener::Webhook,
        connections.max_connections,
    ));
    let open = registry.clone();
    let handshakes = Arc::new(Eviction::new(connections.max_handshakes));
    let streams = OpenStreams::new(connections.max_open_streams);
    let limits = state.limits;
    // A client sends its HTTP/2 preface right after the handshake: waiting
    // for it is part of setting up the connection, under the same bound.
    let http2 = Http2::new(
        connections.max_concurrent_streams,
        connections.handshake_timeout,
    );

    let server = builder
        .listen("kadmit-tls", listener, move || {
            let acceptor = acceptor.clone();
            let handshakes = handshakes.clone();
            let streams = streams.clone();
            let state = state.clone();
            let shutdown = shutdown.clone();
            let registry = registry.clone();
            fn_factory(move || {
                let acceptor = acceptor.clone();
                let handshakes = handshakes.clone();
                let streams = streams.clone();
                let state = state.clone();
                let shutdown = shutdown.clone();
                let registry = registry.clone();
                async move {
                    registry.register_current_worker();
                    let on_close = (shutdown.clone(), registry.clone());
                    let on_response = shutdown.clone();
                    let h1 = actix_http::HttpService::build()
                        .keep_alive(KEEP_ALIVE)
                        .client_request_timeout(limits.request_timeout)
                        .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                        .secure()
                        .local_addr(addr)
                        .graceful_shutdown_signal(move || h1_close(&on_close.0, &on_close.1))
                        .h1(webhook_app(state.clone())
                            .map(move |response| close_after_when_draining(response, &on_response)))
                        .new_service(())
                        .await?;
                    let app = webhook_app(state.clone())
                        .new_service(())
                        .await
                        .map_err(|_| {
                            tracing::error!("Cannot start the webhook application");
                        })?;
                    let worker = Rc::new(Worker {
                        streams,
                        acceptor,
                        handshakes,
                        handshake_timeout: connections.handshake_timeout,
                        h1,
                        app: Rc::new(app),
                        http2,
                        shutdown,
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
    Ok(Listener {
        server,
        socket: closer,
        addr,
        connections: open,
    })
}

/// When actix's HTTP/1.1 dispatcher closes a connection, after the answer in
/// progress if there is one:
///
/// - at closing, for a connection opened before the listener closed; a
///   connection taken from a worker's queue after that is served, and
///   `Connection: close` ends it. Not at the start of the drain: actix drops
///   a request that arrives in the same poll as the signal, and an idle
///   connection closed while its client sends would fail that review.
///   During the drain the client closes after its next answer instead.
/// - when it has written nothing for a second while the listener is crowded
///   ([`super::connections`]).
fn h1_close(
    shutdown: &Arc<Shutdown>,
    registry: &Arc<Registry>,
) -> impl Future<Output = ()> + use<> {
    let shutdown = shutdown.clone();
    let registry = registry.clone();
    let opened_while_accepting = shutdown.phase() < Phase::Closing;
    let activity = connections::take_building();
    async move {
        let closing = async {
            if opened_while_accepting {
                shutdown.reached(Phase::Closing).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let crowded = async {
            match &activity {
                Some(activity) => {
                    // Since its last write, not its last read: a client
                    // dribbling a request head a byte at a time is as idle
                    // as a silent one. A request whose head has arrived is
                    // answered before actix closes the connection.
                    registry
                        .idle_while_crowded(|| Some(activity.last_write()))
                        .await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = closing => {}
            () = crowded => {
                registry.record_closed(metrics::CLOSED_IDLE_WHEN_CROWDED);
                tracing::debug!("Closing an idle HTTP/1.1 connection to make room");
            }
        }
    }
}

/// Asks an HTTP/1.1 client to close its connection after this answer once
/// the shutdown has begun, so that its next review opens a connection to
/// another replica.
fn close_after_when_draining(
    mut response: ServiceResponse,
    shutdown: &Shutdown,
) -> ServiceResponse {
    if shutdown.has_begun() {
        response
            .response_mut()
            .head_mut()
            .set_connection_type(ConnectionType::Close);
    }
    response
}

/// The webhook routes as an actix-web application. The handlers read nothing
/// of the `AppConfig` (host, scheme), so the default one does.
fn webhook_app(
    state: web::Data<State>,
) -> impl ServiceFactory<
    actix_http::Request,
    Config = (),
    Response = ServiceResponse,
    Error = Error,
    InitError = (),
> {
    map_config(App::new().configure(move |cfg| routes(cfg, &state)), |()| {
        AppConfig::default()
    })
}

/// A listening socket with actix-web's options: address reuse (a restart
/// binds at once) and a deep backlog.
pub(super) fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// What a worker thread needs to serve a connection.
struct Worker<H, A> {
    acceptor: TlsAcceptor,
    handshakes: Arc<Eviction>,
    handshake_timeout: Duration,
    h1: H,
    app: Rc<A>,
    http2: Http2,
    /// The HTTP/2 streams open in the process.
    streams: Arc<OpenStreams>,
    shutdown: Arc<Shutdown>,
    registry: Arc<Registry>,
}

impl<H, A> Worker<H, A>
where
    H: Service<(Tracked<TlsStream<TcpStream>>, Option<SocketAddr>), Response = ()>,
    H::Error: std::fmt::Display + 'static,
    A: Service<actix_http::Request, Response = ServiceResponse, Error = Error> + 'static,
{
    /// Serves one accepted connection until it closes.
    async fn serve(&self, tcp: TcpStream) {
        // Without it, HTTP/2 responses wait ~40 ms on Nagle + delayed ACK.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "Cannot set TCP_NODELAY");
        }
        // A fixed send buffer: the kernel's autotuning let each client that
        // does not read its answers leave 3.8 MB of them in kernel memory,
        // which counts against the pod's limit as the process's own does.
        if let Err(error) = socket2::SockRef::from(&tcp).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!(%error, "Cannot set SO_SNDBUF");
        }
        let peer = tcp.peer_addr().ok();
        let (handshake_slot, mut evicted) = self.handshakes.enter();
        let tls = handshake::handshake(
            &self.acceptor,
            self.handshake_timeout,
            &mut evicted,
            &self.registry,
            tcp,
            peer,
        )
        .await;
        drop(handshake_slot);
        let Some(tls) = tls else {
            return;
        };
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        let activity = Activity::new();
        let io = Tracked::new(tls, activity.clone());
        let serving = async {
            if h2 {
                self.http2
                    .serve(
                        io,
                        peer,
                        self.app.clone(),
                        self.streams.clone(),
                        self.shutdown.clone(),
                        self.registry.clone(),
                    )
                    .await;
                return;
            }
            let dispatcher = connections::building_h1(&activity, || self.h1.call((io, peer)));
            if let Err(error) = dispatcher.await {
                if taken_too_slowly(&error) {
                    // As for a stalled write: the kernel drops the unsent
                    // rest at once, rather than sending it at the client's
                    // pace.
                    self.registry.record_closed(metrics::CLOSED_WRITE_STALLED);
                    activity.reset_on_close();
                }
                tracing::debug!(%error, peer = ?peer, "HTTP/1.1 connection ended with an error");
            }
        };
        tokio::select! {
            () = serving => {}
            // An HTTP/2 client that stops reading holds the answers of all
            // its streams; an HTTP/1.1 client the one in progress.
            () = self.registry.write_stalled(&activity) => {
                self.registry.record_closed(metrics::CLOSED_WRITE_STALLED);
                activity.reset_on_close();
                tracing::debug!(peer = ?peer, "Closed a connection whose client took no answer");
            }
        }
    }
}

/// Whether an HTTP/1.1 connection ended because its client did not take an
/// answer in time ([`super::body::Buffered::taken_within`]).
fn taken_too_slowly(error: &dyn std::any::Any) -> bool {
    matches!(
        error.downcast_ref::<actix_http::error::DispatchError>(),
        Some(actix_http::error::DispatchError::Body(inner))
            if inner.downcast_ref::<super::body::TakenTooSlowly>().is_some()
    )
}

#[cfg(test)]
mod tests {
    use actix_http::error::DispatchError;
    use actix_web::body::{BoxBody, MessageBody};
    use actix_web::web::Bytes;

    use super::taken_too_slowly;
    use crate::server::body::{Buffered, SHARED_PIECE};

    /// The error the dispatcher ends with when an answer's body fails: the
    /// body's own error, boxed as actix boxes it.
    async fn dispatch_error_of(body: BoxBody) -> DispatchError {
        let mut body = Box::pin(body);
        match std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
            Some(Err(error)) => DispatchError::Body(error),
            other => panic!("the body did not fail: {other:?}"),
        }
    }

    #[actix_web::test]
    async fn an_answer_not_taken_in_time_is_told_from_other_dispatch_errors() {
        let late = Buffered::shared(Bytes::from(vec![0u8; SHARED_PIECE + 1]))
            .taken_within(std::time::Duration::ZERO);
        assert!(taken_too_slowly(
            &dispatch_error_of(BoxBody::new(late)).await
        ));
        let other = DispatchError::Body("a body that failed otherwise".into());
        assert!(!taken_too_slowly(&other));
        assert!(!taken_too_slowly(&DispatchError::SlowRequestTimeout));
        assert!(!taken_too_slowly(&"not a dispatch error"));
    }
}
