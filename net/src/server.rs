//! The server side: [`serve`] runs an accept loop until `shutdown` resolves.
//!
//! The loop is generic over a [`Protocol`]: how frames decode into requests, how answers are
//! written, and what a refused frame or connection gets. [`Own`] is epochfence's own protocol;
//! the broker's Kafka listener is a second [`Protocol`] served by the same loop, under the same
//! [`ServerLimits`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, SinkExt, StreamExt};
use protocol::auth::{ClusterSecret, NONCE_BYTES};
use protocol::codec::{CodecError, ServerCodec, FRAME_BYTES_MAX_DEFAULT};
use protocol::{
    request_size_hint, AuthBeginResponse, AuthProveResponse, ErrorCode, Request, Response, SaslLoginRequest,
    SaslLoginResponse, Status,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::{Decoder, Encoder, Framed};

/// A wire protocol the connection loop serves: its frames, its answers to what it cannot
/// serve, and its per-connection membership state.
pub trait Protocol: Send + Sync + Sized + 'static {
    /// A decoded request.
    type Request: Send + 'static;
    /// An answer (or, for protocols that have them, "no answer" and "close").
    type Response: Send + 'static;
    /// What an answer needs from its request to be written (a correlation id, a version).
    type Context: Copy + Send + 'static;
    /// What one connection's peer has proved so far.
    type Peer: Default + Send;
    /// What a connection from `addr` starts with (nothing proved).
    fn peer(addr: std::net::SocketAddr) -> Self::Peer {
        let _ = addr;
        Self::Peer::default()
    }
    /// Frames in and out. Both protocols frame with a 4-byte big-endian length prefix.
    type Codec: Decoder<Item = Decoded<Self>, Error = CodecError>
        + Encoder<(Self::Context, Self::Response), Error = CodecError>
        + Send
        + Unpin;

    /// A connection's codec.
    fn codec(limits: &ServerLimits) -> Self::Codec;
    /// About how many bytes a request holds (a large one gives its connection read-ahead room).
    fn request_bytes(req: &Self::Request) -> usize;
    /// The answer to a request not answered within `request_timeout_ms`.
    fn timed_out(ctx: Self::Context, timeout: Duration) -> Self::Response;
    /// The answer to a frame whose length prefix is over `frame_bytes_max`; the connection
    /// closes after it.
    fn frame_too_large(len: usize, max: usize) -> (Self::Context, Self::Response);
    /// The answer to a connection over `connections_max`, before it is closed.
    fn too_many_connections(limits: &ServerLimits) -> (Self::Context, Self::Response);
    /// Answer the membership handshake, and refuse what the peer may not ask. Returns
    /// `Some((answer, close))` when the request is answered here.
    fn gate(limits: &ServerLimits, peer: &mut Self::Peer, req: &Self::Request) -> Option<(Self::Response, bool)>;
    /// Whether [`Protocol::gate`] would answer `req` itself, without changing anything.
    fn gated(limits: &ServerLimits, peer: &Self::Peer, req: &Self::Request) -> bool;
    /// Whether `req` may be served on a connection admitted beyond `connections_max`, into the
    /// room kept for cluster members ([`ServerLimits::member_connections_max`]): a member's
    /// own request, or any request once the peer has proved membership (with a cluster secret,
    /// only the handshake until then). A protocol without members answers false.
    fn member_request(limits: &ServerLimits, peer: &Self::Peer, req: &Self::Request) -> bool;
    /// Whether `req` is a step of the membership handshake: allowed on a member's connection,
    /// it does not make the connection a member's by itself.
    fn handshake(req: &Self::Request) -> bool;
    /// The answer to a request read behind one that closes the connection.
    fn not_handled() -> Self::Response;
    /// Whether the connection closes right after this answer is written (the requests behind
    /// it are dropped, not answered): Kafka's reaction to an error under acks=0.
    fn closes(resp: &Self::Response) -> bool;
}

/// What a [`Protocol`]'s decoder made of one frame.
pub enum Decoded<P: Protocol> {
    /// A request to serve.
    Request(P::Context, P::Request),
    /// A frame that cannot be served. The connection reads nothing more; `answer` (if any) is
    /// written in the frame's place, after the answers to earlier requests, then it closes.
    Refused {
        /// The answer to write, if the protocol has one for this.
        answer: Option<(P::Context, P::Response)>,
        /// What was wrong, for the log.
        why: String,
    },
}

/// A boxed response future.
pub type ResponseFuture<R = Response> = Pin<Box<dyn Future<Output = R> + Send + 'static>>;

/// What a handler made of one request. The server calls the handler for a connection's requests
/// one at a time, in the order they arrived, and writes the answers in that order.
pub enum Handled<R = Response> {
    /// Everything the request changes was done inside the handler call. The future only waits
    /// (for the disk, for replicas) and runs beside the connection's later requests, whose
    /// handler calls go ahead meanwhile: a pipelining producer's batches wait together.
    Applied(ResponseFuture<R>),
    /// The request still has work to do in order: the connection's later requests are not handed
    /// to the handler until this future has finished and every earlier answer was written.
    Serial(ResponseFuture<R>),
}

impl<R: Send + 'static> Handled<R> {
    /// A request answered at once.
    pub fn answer(resp: R) -> Handled<R> {
        Handled::Applied(Box::pin(std::future::ready(resp)))
    }

    /// A request that must finish before the connection's next one starts.
    pub fn serial(fut: impl Future<Output = R> + Send + 'static) -> Handled<R> {
        Handled::Serial(Box::pin(fut))
    }

    /// Whether later requests wait for this one.
    pub fn is_serial(&self) -> bool {
        matches!(self, Handled::Serial(_))
    }

    /// The answer, however it is handed back.
    pub fn into_future(self) -> ResponseFuture<R> {
        match self {
            Handled::Applied(f) | Handled::Serial(f) => f,
        }
    }
}

/// Turns a request into its response.
pub type Handler<P = Own> = Arc<dyn Fn(<P as Protocol>::Request) -> Handled<<P as Protocol>::Response> + Send + Sync>;

/// Starts requests that one connection's reads brought in together, in arrival order: takes
/// from the front of the queue each request it starts and returns their [`Handled`]s in the
/// same order, stopping after the first [`Handled::Serial`] one (the requests left behind it
/// are started when it has finished). Lets a handler do together what the requests share (a
/// partition's log writes them in one go). Given to [`serve_grouped`].
pub type GroupHandler<P = Own> =
    Arc<dyn Fn(&mut VecDeque<<P as Protocol>::Request>) -> Vec<Handled<<P as Protocol>::Response>> + Send + Sync>;

/// Makes the handlers of one new connection: a protocol whose handler keeps per-connection
/// state (the Kafka listener's relay to the coordinator) makes fresh ones each time.
pub type Handlers<P = Own> = Arc<dyn Fn(&Peer) -> (Handler<P>, Option<GroupHandler<P>>) + Send + Sync>;

/// Who is at the other end of an accepted connection.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address, as the listener accepted it.
    pub addr: std::net::SocketAddr,
    /// The certificate the client presented in the TLS handshake (a listener that requires
    /// client certificates: mutual TLS), if any.
    pub certificate: Option<rustls::pki_types::CertificateDer<'static>>,
}

/// Limits of one server; every one has a default and a unit.
#[derive(Clone)]
pub struct ServerLimits {
    /// Largest request frame, in bytes, checked from the length prefix before allocating.
    pub frame_bytes_max: usize,
    /// Requests one connection may have queued (pipelined) at once. They are started one at a
    /// time, in arrival order, and answered in that order: a pipelining producer's batches are
    /// appended in the order it sent them (see [`Handled`] for what may overlap).
    pub inflight_requests_max: usize,
    /// Connections served at once; further ones get an error frame and are closed (or, while
    /// there is room, are kept for cluster members: `member_connections_max`).
    pub connections_max: usize,
    /// Connections beyond `connections_max` kept for cluster members: brokers heartbeating
    /// and verifying, followers replicating, the coordinator writing markers. Such a connection
    /// serves only members' requests ([`Protocol::member_request`]); the first request of
    /// anyone else on it is answered as a connection over the limit, and it closes. So a flood
    /// of clients (and of the relays their Kafka connections open) never keeps the cluster's
    /// own traffic out.
    pub member_connections_max: usize,
    /// Room, in bytes, a connection's read buffer keeps for what its peer has sent, once the
    /// peer has pipelined requests or sent one of [`READ_AHEAD_REQUEST_BYTES`] or more: one
    /// read from the socket takes up to this much, so pipelined requests arrive together (and a
    /// [`GroupHandler`] starts them together). Other connections read a frame at a time.
    pub read_buffer_bytes: usize,
    /// A connection that has read no frame and written no answer for this long gives back the
    /// room it holds: its read buffer's `read_buffer_bytes` (until its peer pipelines again)
    /// and a write buffer that answers grew past [`BUFFER_BYTES_KEPT`], each once empty. So a
    /// quiet connection holds what a new one does, however busy it was.
    pub buffer_release_ms: u64,
    /// A connection with nothing in flight that sends no complete frame for this long is closed.
    pub idle_ms: u64,
    /// A request not answered within this long is answered REQUEST_TIMED_OUT.
    pub request_timeout_ms: u64,
    /// The cluster secret: with one, internal requests (`Request::is_internal`) are served
    /// only on connections that proved membership; without one they are open to anyone who
    /// can connect (listen on loopback only, as the defaults do).
    pub cluster_secret: Option<ClusterSecret>,
    /// Serve TLS only, with this certificate (plain TCP without).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// While set (and there is a cluster secret) the authorizer is on: a request is served
    /// on a connection that proved membership, or that logged in (SaslLogin, with
    /// `client_logins`) as a principal the ACLs allow it to; any other is refused. Shared by
    /// every clone of these limits; a broker sets it from the coordinator's word.
    pub members_only: Arc<std::sync::atomic::AtomicBool>,
    /// The credentials and ACLs own-protocol clients log in and are authorized by (`None`: no
    /// client logins here).
    pub client_logins: Option<Arc<dyn ClientLogins>>,
}

/// What a listener logs own-protocol clients in with and authorizes them by, as this process
/// holds it now (a broker's copies of the coordinator's, the coordinator's own).
pub trait ClientLogins: Send + Sync {
    /// `user`'s SCRAM credential for `mechanism` (`Ok(None)`: it has none); `Err` with the
    /// answer to give when this process logs no one in now (a coordinator standby:
    /// NOT_COORDINATOR, naming the active replica).
    fn credential(
        &self,
        user: &str,
        mechanism: protocol::sasl::ScramMechanism,
    ) -> Result<Option<protocol::sasl::ScramCredential>, Status>;
    /// The authorizer's settings and ACLs now; `None` while this process serves no requests
    /// (a coordinator standby, a lapsed lease): the gate then answers a logged-in client's
    /// requests NOT_COORDINATOR.
    fn authorizer(&self) -> Option<Arc<protocol::acl::Authorizer>>;
    /// The cluster's producer-id binder (with a cluster secret).
    fn binder(&self) -> Option<&protocol::auth::ProducerIdBinder>;
}

impl ServerLimits {
    /// Whether [`ServerLimits::members_only`] is set.
    pub fn members_only(&self) -> bool {
        self.members_only.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl std::fmt::Debug for ServerLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerLimits")
            .field("frame_bytes_max", &self.frame_bytes_max)
            .field("inflight_requests_max", &self.inflight_requests_max)
            .field("connections_max", &self.connections_max)
            .field("member_connections_max", &self.member_connections_max)
            .field("read_buffer_bytes", &self.read_buffer_bytes)
            .field("buffer_release_ms", &self.buffer_release_ms)
            .field("idle_ms", &self.idle_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("cluster_secret", &self.cluster_secret)
            .field("tls", &self.tls.is_some())
            .field("members_only", &self.members_only.load(std::sync::atomic::Ordering::Relaxed))
            .field("client_logins", &self.client_logins.is_some())
            .finish()
    }
}

/// The member name a broker's relay of its Kafka clients' requests proves membership under
/// (`kafka-relay-<broker id>`): a member, so the coordinator serves it under the authorizer, but
/// client traffic, so never admitted into the members' room
/// ([`ServerLimits::member_connections_max`]), which a flood of Kafka clients would otherwise
/// fill, keeping brokers' heartbeats out.
pub const RELAY_MEMBER_PREFIX: &str = "kafka-relay";

/// Default [`ServerLimits::member_connections_max`]: room for the brokers and coordinator
/// replicas of a cluster of up to a few dozen members, each with a connection or two.
pub const MEMBER_CONNECTIONS_MAX_DEFAULT: usize = 64;

/// How long a connection admitted into the members' room ([`ServerLimits::member_connections_max`])
/// may stay silent before it is refused as over the limit, in milliseconds: members speak
/// first, at once, so silent clients cannot hold the room either.
pub const MEMBER_FIRST_REQUEST_MS: u64 = 1_000;

/// Default [`ServerLimits::read_buffer_bytes`]: several 55 KB batches.
pub const READ_BUFFER_BYTES_DEFAULT: usize = 256 * 1024;

/// What a connection's read buffer starts with, in bytes, and keeps through a quiet spell
/// ([`ServerLimits::buffer_release_ms`]); the most its write buffer keeps through one, and
/// what it gathers before it is written out (tokio-util's `Framed` starts both buffers with
/// this much). The write buffer starts empty, so a held connection that sends nothing costs
/// one buffer, not two: with two, 5,000 held connections cost the debug broker 130 MB instead
/// of 90 (with mimalloc, as the binaries use; tests/limits.rs).
pub const BUFFER_BYTES_KEPT: usize = 8 * 1024;

/// Default [`ServerLimits::buffer_release_ms`].
pub const BUFFER_RELEASE_MS_DEFAULT: u64 = 1_000;

/// A request at least this large (a batch of records) gives its connection room for
/// [`ServerLimits::read_buffer_bytes`], as pipelining does.
pub const READ_AHEAD_REQUEST_BYTES: usize = 16 * 1024;

/// How long a TLS handshake may take before the connection is dropped.
pub const TLS_HANDSHAKE_MS: u64 = 10_000;

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            inflight_requests_max: 1024,
            connections_max: 1024,
            member_connections_max: MEMBER_CONNECTIONS_MAX_DEFAULT,
            read_buffer_bytes: READ_BUFFER_BYTES_DEFAULT,
            buffer_release_ms: BUFFER_RELEASE_MS_DEFAULT,
            idle_ms: 10 * 60 * 1000,
            request_timeout_ms: 60_000,
            cluster_secret: None,
            tls: None,
            members_only: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            client_logins: None,
        }
    }
}

/// Accept connections on `listener` and serve each with `handler` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, handler: Handler, limits: ServerLimits, shutdown: impl Future<Output = ()>) {
    serve_grouped(listener, handler, None, limits, shutdown).await
}

/// [`serve`], starting the requests one read brings in together with `group` (each alone
/// with `handler` otherwise).
pub async fn serve_grouped(
    listener: TcpListener,
    handler: Handler,
    group: Option<GroupHandler>,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let handlers: Handlers = Arc::new(move |_| (handler.clone(), group.clone()));
    serve_protocol::<Own>(listener, handlers, limits, shutdown).await
}

/// Accept connections on `listener` and serve each in protocol `P`, with the handlers
/// `handlers` makes for it, until `shutdown` resolves.
pub async fn serve_protocol<P: Protocol>(
    listener: TcpListener,
    handlers: Handlers<P>,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.connections_max));
    let member_permits = Arc::new(Semaphore::new(limits.member_connections_max));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Over `connections_max`, a connection may take a member's room: it is served
                // only if it turns out to be a member's (`reserved`).
                let (permit, reserved) = match permits.clone().try_acquire_owned() {
                    Ok(p) => (Ok(p), false),
                    Err(_) => (member_permits.clone().try_acquire_owned(), true),
                };
                let handlers = handlers.clone();
                let limits = limits.clone();
                let stop = stop_rx.clone();
                tokio::spawn(async move {
                    match limits.tls.clone() {
                        None => match permit {
                            Ok(_permit) => {
                                let (handler, group) = handlers(&Peer { addr: peer, certificate: None });
                                let inflight = InFlight::<P>::new(handler, group, &limits, reserved, P::peer(peer));
                                serve_connection::<P, _>(stream, inflight, stop).await;
                            }
                            Err(_) => refuse_connection::<P, _>(stream, &limits).await,
                        },
                        Some(acceptor) => {
                            let handshake = Duration::from_millis(TLS_HANDSHAKE_MS);
                            let tls = match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => {
                                    tracing::info!(%peer, error = %e, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::info!(%peer, "TLS handshake timed out");
                                    return;
                                }
                            };
                            match permit {
                                Ok(_permit) => {
                                    let certificate =
                                        tls.get_ref().1.peer_certificates().and_then(|c| c.first()).cloned();
                                    let (handler, group) = handlers(&Peer { addr: peer, certificate });
                                    let inflight = InFlight::<P>::new(handler, group, &limits, reserved, P::peer(peer));
                                    serve_connection::<P, _>(tls, inflight, stop).await;
                                }
                                Err(_) => refuse_connection::<P, _>(tls, &limits).await,
                            }
                        }
                    }
                    tracing::debug!(%peer, "connection closed");
                });
            }
        }
    }
    let _ = stop_tx.send(true);
}

async fn refuse_connection<P: Protocol, S: AsyncRead + AsyncWrite + Unpin>(stream: S, limits: &ServerLimits) {
    let mut framed = Framed::new(stream, P::codec(limits));
    let answer = P::too_many_connections(limits);
    let _ = tokio::time::timeout(Duration::from_secs(1), framed.send(answer)).await;
}

async fn tagged<P: Protocol>(
    ctx: P::Context,
    fut: ResponseFuture<P::Response>,
    timeout: Duration,
) -> (P::Context, P::Response) {
    match tokio::time::timeout(timeout, fut).await {
        Ok(resp) => (ctx, resp),
        Err(_) => (ctx, P::timed_out(ctx, timeout)),
    }
}

/// A started request's answer with its context, and whether the request was serial.
type Pending<P> = Pin<Box<dyn Future<Output = ((<P as Protocol>::Context, <P as Protocol>::Response), bool)> + Send>>;

/// A request read from the socket, or an answer already decided for a frame (kept in its
/// place in the order).
enum Item<P: Protocol> {
    Request(P::Request),
    Decided(P::Response),
}

/// A connection's requests between the socket and their answers.
///
/// Requests are handed to the handler in arrival order. An [`Handled::Applied`] request's
/// future runs beside later ones; after a [`Handled::Serial`] one, later requests wait in
/// `deferred` until its answer is out. Answers leave in arrival order either way.
struct InFlight<'a, P: Protocol> {
    handler: Handler<P>,
    group: Option<GroupHandler<P>>,
    limits: &'a ServerLimits,
    /// What the connection's peer has proved (see [`Protocol::gate`]).
    peer: P::Peer,
    /// Admitted into the room kept for members, and no member's request seen yet: each
    /// request must be one ([`Protocol::member_request`]) until one that is not a handshake.
    reserved: bool,
    /// Started requests, polled together, yielded in the order they started.
    running: FuturesOrdered<Pending<P>>,
    /// How many of `running` are serial.
    serials: usize,
    /// Read but not started yet: a serial request ahead of them has not finished.
    deferred: VecDeque<(P::Context, Item<P>)>,
}

impl<'a, P: Protocol> InFlight<'a, P> {
    fn new(
        handler: Handler<P>,
        group: Option<GroupHandler<P>>,
        limits: &'a ServerLimits,
        reserved: bool,
        peer: P::Peer,
    ) -> InFlight<'a, P> {
        InFlight {
            handler,
            group,
            limits,
            peer,
            reserved,
            running: FuturesOrdered::new(),
            serials: 0,
            deferred: VecDeque::new(),
        }
    }

    fn len(&self) -> usize {
        self.running.len() + self.deferred.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take a request (or a decided answer) in arrival order: start it now, or defer it behind a
    /// serial request still running. Returns whether the connection must close after it.
    fn push(&mut self, ctx: P::Context, item: Item<P>) -> bool {
        if self.serials > 0 || !self.deferred.is_empty() {
            self.deferred.push_back((ctx, item));
            return false;
        }
        self.start(ctx, item)
    }

    /// Take requests read together, in arrival order, as [`InFlight::push`] takes each; with a
    /// group handler, each run of them that the membership gate lets through is started
    /// together. Returns whether the connection must close after them.
    fn push_all(&mut self, items: Vec<(P::Context, P::Request)>) -> bool {
        let group = self.group.clone().filter(|_| items.len() > 1);
        let mut close = false;
        let mut items = items.into_iter().peekable();
        while let Some((ctx, req)) = items.next() {
            if close {
                self.start(ctx, Item::Decided(P::not_handled()));
                continue;
            }
            let startable = self.serials == 0
                && self.deferred.is_empty()
                && !self.reserved
                && !P::gated(self.limits, &self.peer, &req);
            let Some(group) = group.as_ref().filter(|_| startable) else {
                close = self.push(ctx, Item::Request(req));
                continue;
            };
            let (mut run, mut ctxs) = (VecDeque::from([req]), vec![ctx]);
            while let Some((c, r)) = items.next_if(|(_, r)| !P::gated(self.limits, &self.peer, r)) {
                ctxs.push(c);
                run.push_back(r);
            }
            let mut ctxs = ctxs.into_iter();
            let handled = group(&mut run);
            if handled.is_empty() {
                // A group handler that started nothing: the first one goes alone, so the
                // connection never stalls.
                if let (Some(c), Some(r)) = (ctxs.next(), run.pop_front()) {
                    let handled = (self.handler)(r);
                    self.start_handled(c, handled);
                }
            }
            for handled in handled {
                let Some(c) = ctxs.next() else { break };
                self.start_handled(c, handled);
            }
            self.deferred.extend(ctxs.zip(run.into_iter().map(Item::Request)));
        }
        close
    }

    fn start(&mut self, ctx: P::Context, item: Item<P>) -> bool {
        let (handled, close) = match item {
            Item::Decided(resp) => (Handled::answer(resp), false),
            Item::Request(req) if self.reserved && !P::member_request(self.limits, &self.peer, &req) => {
                tracing::info!(
                    connections_max = self.limits.connections_max,
                    "a client's request on a connection kept for cluster members; refusing and closing"
                );
                (Handled::answer(P::too_many_connections(self.limits).1), true)
            }
            Item::Request(req) => {
                self.reserved &= P::handshake(&req);
                self.gate_or_handle(req)
            }
        };
        self.start_handled(ctx, handled);
        close
    }

    fn gate_or_handle(&mut self, req: P::Request) -> (Handled<P::Response>, bool) {
        match P::gate(self.limits, &mut self.peer, &req) {
            Some((resp, close)) => (Handled::answer(resp), close),
            None => ((self.handler)(req), false),
        }
    }

    fn start_handled(&mut self, ctx: P::Context, handled: Handled<P::Response>) {
        let serial = handled.is_serial();
        let fut = handled.into_future();
        let timeout = Duration::from_millis(self.limits.request_timeout_ms);
        self.running.push_back(Box::pin(tagged::<P>(ctx, fut, timeout).map(move |answer| (answer, serial))));
        self.serials += usize::from(serial);
    }

    /// The next answer in order, once it is ready. Cancel-safe: requests keep their progress.
    async fn next(&mut self) -> Option<(P::Context, P::Response)> {
        let (answer, serial) = self.running.next().await?;
        self.serials -= usize::from(serial);
        Some(answer)
    }

    /// The next answer in order if it is ready now, without waiting.
    fn next_ready(&mut self) -> Option<(P::Context, P::Response)> {
        self.next().now_or_never().flatten()
    }

    /// Start deferred requests until one of them is serial. Returns whether the connection must
    /// close after them: then the requests still deferred are answered with an error, not run
    /// (they were read only because the one that closes it had not been started yet).
    fn resume(&mut self) -> bool {
        let mut close = false;
        while self.serials == 0 && !close {
            let Some((ctx, item)) = self.deferred.pop_front() else { break };
            close = self.start(ctx, item);
        }
        if close {
            for (ctx, _) in std::mem::take(&mut self.deferred) {
                self.start(ctx, Item::Decided(P::not_handled()));
            }
        }
        close
    }
}

/// How a served connection went, for tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Served {
    /// Times a quiet spell gave back read-ahead room ([`ServerLimits::buffer_release_ms`]).
    read_buffer_releases: u32,
    /// Times a quiet spell gave back a grown write buffer.
    write_buffer_releases: u32,
    /// The read buffer's room right after the last read-side release.
    read_capacity_released_to: usize,
}

async fn serve_connection<P: Protocol, S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    mut inflight: InFlight<'_, P>,
    mut stop: watch::Receiver<bool>,
) -> Served {
    let (limits, reserved) = (inflight.limits, inflight.reserved);
    let mut served = Served::default();
    // The write buffer starts empty (the encoders reserve room for each answer); the read
    // buffer starts with room for the requests a first read brings.
    let mut framed = Framed::with_capacity(stream, P::codec(limits), 0);
    framed.set_backpressure_boundary(BUFFER_BYTES_KEPT);
    *framed.read_buffer_mut() = BytesMut::with_capacity(BUFFER_BYTES_KEPT);
    // After a request that cannot be decoded we answer it, finish what is in flight and close.
    let mut closing = false;
    let idle = Duration::from_millis(limits.idle_ms);
    // A connection in a member's room has little time to show it is one.
    let first = if reserved { idle.min(Duration::from_millis(MEMBER_FIRST_REQUEST_MS)) } else { idle };
    let idle_timer = tokio::time::sleep(first);
    tokio::pin!(idle_timer);
    // Whether this connection keeps room for `read_buffer_bytes` in its read buffer.
    let mut read_ahead = false;
    // Whether an answer made the write buffer grow past what it keeps.
    let mut write_grown = false;
    let quiet = Duration::from_millis(limits.buffer_release_ms);
    let quiet_timer = tokio::time::sleep(quiet);
    tokio::pin!(quiet_timer);
    loop {
        if closing && inflight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some(answer) = inflight.next(), if !inflight.running.is_empty() => {
                // Every answer ready now goes out in one write.
                let mut answer = Some(answer);
                let mut failed = false;
                let mut close_now = false;
                while let Some(a) = answer.take() {
                    close_now = P::closes(&a.1);
                    if let Err(e) = framed.feed(a).await {
                        if matches!(e, CodecError::Encode(_)) {
                            tracing::warn!(error = %e, "closing the connection");
                        }
                        failed = true;
                        break;
                    }
                    if close_now {
                        break;
                    }
                    // The buffer's allocation is at least what it holds now (after a flush its
                    // `capacity` no longer shows it).
                    write_grown |= framed.write_buffer().len() > BUFFER_BYTES_KEPT;
                    closing |= inflight.resume();
                    answer = inflight.next_ready();
                }
                if failed || framed.flush().await.is_err() || close_now {
                    break;
                }
                let now = tokio::time::Instant::now();
                idle_timer.as_mut().reset(now + if inflight.reserved { first } else { idle });
                quiet_timer.as_mut().reset(now + quiet);
            }
            item = framed.next(), if !closing && inflight.len() < limits.inflight_requests_max => {
                let now = tokio::time::Instant::now();
                idle_timer.as_mut().reset(now + if inflight.reserved { first } else { idle });
                quiet_timer.as_mut().reset(now + quiet);
                // The requests already read behind this one are taken with it.
                let mut requests = Vec::new();
                let mut item = Some(item);
                while let Some(Some(Ok(Decoded::Request(ctx, req)))) = item {
                    requests.push((ctx, req));
                    let room = inflight.len() + requests.len() < limits.inflight_requests_max;
                    item = (room && protocol::codec::frame_buffered(framed.read_buffer()))
                        .then(|| framed.next().now_or_never())
                        .flatten();
                }
                let large = requests.iter().any(|(_, r)| P::request_bytes(r) >= READ_AHEAD_REQUEST_BYTES);
                if !requests.is_empty() {
                    closing |= inflight.push_all(requests);
                }
                // A peer that pipelines (it has more requests in flight, or more of its bytes
                // are here already) or sends large requests gets room, from then on, to have
                // several requests taken in one read.
                read_ahead = read_ahead
                    || inflight.len() > 1
                    || !framed.read_buffer().is_empty()
                    || large;
                let buffer = framed.read_buffer_mut();
                if read_ahead && buffer.capacity() - buffer.len() < limits.read_buffer_bytes / 2 {
                    buffer.reserve(limits.read_buffer_bytes);
                }
                match item {
                    None | Some(Some(Ok(Decoded::Request(..)))) => {}
                    Some(None) => closing = true,
                    Some(Some(Ok(Decoded::Refused { answer, why }))) => {
                        tracing::info!(error = %why, "a request that cannot be served; answering (if the protocol answers it) and closing");
                        if let Some((ctx, resp)) = answer {
                            inflight.push(ctx, Item::Decided(resp));
                        }
                        closing = true;
                    }
                    Some(Some(Err(CodecError::FrameTooLarge { len, max }))) => {
                        tracing::info!(len, max, "oversized frame; answering (if the protocol answers it) and closing");
                        let (ctx, resp) = P::frame_too_large(len, max);
                        inflight.push(ctx, Item::Decided(resp));
                        closing = true;
                    }
                    Some(Some(Err(e))) => {
                        tracing::debug!(error = %e, "connection error");
                        break;
                    }
                }
            }
            // Produce records are slices of the read buffer: what requests still in flight
            // hold of it is freed when they are answered.
            _ = &mut quiet_timer, if holds_room(&framed, read_ahead, write_grown) => {
                if read_ahead && framed.read_buffer().is_empty() {
                    *framed.read_buffer_mut() = BytesMut::with_capacity(BUFFER_BYTES_KEPT);
                    read_ahead = false;
                    served.read_buffer_releases += 1;
                    served.read_capacity_released_to = framed.read_buffer().capacity();
                }
                if write_grown && framed.write_buffer().is_empty() {
                    *framed.write_buffer_mut() = BytesMut::new();
                    write_grown = false;
                    served.write_buffer_releases += 1;
                }
            }
            _ = &mut idle_timer, if inflight.is_empty() => {
                if inflight.reserved {
                    // Not a member's after all: answered as a connection over the limit.
                    let _ = framed.send(P::too_many_connections(limits)).await;
                    break;
                }
                tracing::info!(idle_ms = limits.idle_ms, "closing idle connection");
                break;
            }
            _ = stop.changed() => break,
        }
    }
    served
}

/// Whether a connection holds buffer room that [`ServerLimits::buffer_release_ms`] of quiet
/// gives back: read-ahead room, or a write buffer grown past [`BUFFER_BYTES_KEPT`], with
/// nothing in it.
fn holds_room<S, C>(framed: &Framed<S, C>, read_ahead: bool, write_grown: bool) -> bool {
    (read_ahead && framed.read_buffer().is_empty()) || (write_grown && framed.write_buffer().is_empty())
}

/// epochfence's own protocol ([`protocol::messages`]), with its membership handshake and client
/// logins.
pub struct Own;

/// The membership and login state of one own-protocol connection.
#[derive(Default)]
pub struct OwnPeer {
    server_nonce: Option<[u8; NONCE_BYTES]>,
    member: Option<String>,
    /// The client's address as host ACLs name it (10.0.0.5, not ::ffff:10.0.0.5).
    host: String,
    login: OwnLogin,
}

/// Where a connection is in its client login (SaslLogin).
#[derive(Default)]
enum OwnLogin {
    #[default]
    None,
    /// The server-first message is out; the client's final one is awaited.
    ScramFinal(protocol::sasl::ScramExchange),
    /// Logged in as this principal (`User:alice`).
    Authenticated(String),
}

/// A SaslLogin answer (empty bytes unless it carries a SCRAM message), and whether the
/// connection closes after it.
fn login_answer(status: Status, auth_bytes: Bytes, close: bool) -> (Response, bool) {
    (Response::SaslLogin(SaslLoginResponse { status, auth_bytes }), close)
}

/// The answer to a failed login: the client learns only that it failed (the log says why),
/// and the connection closes.
fn login_failed(peer: &OwnPeer, why: &str) -> (Response, bool) {
    tracing::info!(peer = %peer.host, "own-protocol client login failed: {why}; closing the connection");
    let status = Status::new(
        ErrorCode::SaslAuthenticationFailed,
        "Authentication failed: invalid credentials (SCRAM-SHA-256 or SCRAM-SHA-512 of a user the cluster knows: \
         admin users set)",
    );
    login_answer(status, Bytes::new(), true)
}

impl Own {
    /// One round of a client's SCRAM login (see [`ClientLogins`]).
    fn login_round(limits: &ServerLimits, peer: &mut OwnPeer, req: &SaslLoginRequest) -> (Response, bool) {
        use protocol::sasl::{ScramExchange, ScramMechanism};
        let again = || {
            let status = Status::new(
                ErrorCode::IllegalSaslState,
                "this connection has logged in already; open another to log in as someone else",
            );
            login_answer(status, Bytes::new(), false)
        };
        if let OwnLogin::Authenticated(_) = peer.login {
            return again();
        }
        let Some(logins) = &limits.client_logins else {
            return login_failed(peer, "this listener takes no client logins");
        };
        if req.auth_bytes.len() > protocol::sasl::SASL_MESSAGE_BYTES_MAX {
            let why =
                format!("a message of {} bytes, over {}", req.auth_bytes.len(), protocol::sasl::SASL_MESSAGE_BYTES_MAX);
            return login_failed(peer, &why);
        }
        let Some(mechanism) = ScramMechanism::parse(&req.mechanism) else {
            // As Kafka answers a mechanism it does not offer; the connection is done.
            tracing::info!(peer = %peer.host, mechanism = req.mechanism, "own-protocol client asked for a mechanism not offered");
            let status = Status::new(
                ErrorCode::UnsupportedSaslMechanism,
                format!(
                    "mechanism {:?}: the own protocol logs in with SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN is served \
                     on Kafka listeners)",
                    req.mechanism
                ),
            );
            return login_answer(status, Bytes::new(), true);
        };
        let ok = |auth_bytes: Vec<u8>| login_answer(Status::ok(), Bytes::from(auth_bytes), false);
        match std::mem::take(&mut peer.login) {
            OwnLogin::None => {
                let server_nonce = crate::client::scram_nonce();
                let mut unavailable = None;
                let lookup = |user: &str| {
                    logins.credential(user, mechanism).unwrap_or_else(|s| {
                        unavailable = Some(s);
                        None
                    })
                };
                let started = ScramExchange::first_round(mechanism, &req.auth_bytes, lookup, &server_nonce);
                if let Some(status) = unavailable {
                    return login_answer(status, Bytes::new(), true);
                }
                match started {
                    Ok((exchange, server_first)) => {
                        peer.login = OwnLogin::ScramFinal(exchange);
                        ok(server_first)
                    }
                    Err(e) => login_failed(peer, &e.to_string()),
                }
            }
            OwnLogin::ScramFinal(exchange) if exchange.mechanism() == mechanism => {
                match exchange.finish(&req.auth_bytes) {
                    Ok((user, server_final)) => {
                        tracing::debug!(peer = %peer.host, %user, "own-protocol client logged in");
                        peer.login = OwnLogin::Authenticated(format!("User:{user}"));
                        ok(server_final)
                    }
                    Err(e) => login_failed(peer, &e.to_string()),
                }
            }
            OwnLogin::ScramFinal(_) => login_failed(peer, "the final message names another mechanism"),
            OwnLogin::Authenticated(principal) => {
                peer.login = OwnLogin::Authenticated(principal);
                again()
            }
        }
    }

    /// Why a request that is neither a membership proof nor a login is refused on this
    /// connection, if it is: the members' own traffic needs membership; under the authorizer
    /// (`members_only`) a member may do anything, a logged-in client what the ACLs allow it
    /// ([`protocol::authorize::own_refusal`]), anyone else nothing; without it the admin
    /// requests (`Request::is_internal`) need membership. All only with a cluster secret.
    fn refusal(limits: &ServerLimits, peer: &OwnPeer, req: &Request) -> Option<Status> {
        if limits.cluster_secret.is_none() || peer.member.is_some() {
            return None;
        }
        let prove = || {
            Status::new(
                ErrorCode::ClusterAuthorizationFailed,
                format!(
                    "{:?} is a cluster-internal request; prove membership with the cluster secret first (AuthBegin, \
                     AuthProve)",
                    req.api_key()
                ),
            )
        };
        if req.is_member_traffic() {
            return Some(prove());
        }
        if limits.members_only() {
            let OwnLogin::Authenticated(principal) = &peer.login else {
                return Some(Status::new(
                    ErrorCode::ClusterAuthorizationFailed,
                    format!(
                        "{:?} refused: the cluster runs with --authorizer, so a client logs in first (--sasl-username \
                         and --sasl-password-file, SCRAM-SHA-256 or SCRAM-SHA-512) and the ACLs decide what it may \
                         do; cluster members prove the cluster secret instead",
                        req.api_key()
                    ),
                ));
            };
            let logins = limits.client_logins.as_ref()?;
            let Some(authorizer) = logins.authorizer() else {
                // A coordinator replica that serves nothing now: nothing passes unchecked, and
                // the client looks for the replica that serves.
                return Some(Status::new(
                    ErrorCode::NotCoordinator,
                    "this coordinator replica serves no requests now (a standby, or its lease lapsed); retry",
                ));
            };
            let binder = logins.binder();
            let refused = protocol::authorize::own_refusal(&authorizer, binder, principal, &peer.host, req)?;
            tracing::info!(
                target: "epochfence::fencing",
                principal = %principal,
                host = %peer.host,
                request = ?req.api_key(),
                reason = refused.code.name(),
                "own-protocol request not authorized"
            );
            return Some(refused);
        }
        req.is_internal().then(prove)
    }
}

/// [`ServerCodec`] with its items as [`Decoded`].
pub struct OwnCodec(ServerCodec);

impl Decoder for OwnCodec {
    type Item = Decoded<Own>;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded<Own>>, CodecError> {
        Ok(self.0.decode(src)?.map(|item| match item {
            Ok((header, req)) => Decoded::Request(header.correlation_id, req),
            Err(bad) => {
                let correlation_id = bad.header.map_or(-1, |h| h.correlation_id);
                let status = Status::new(bad.error.error_code(), format!("{}; closing the connection", bad.error));
                Decoded::Refused {
                    answer: Some((correlation_id, Response::Error(status))),
                    why: format!("undecodable request (correlation id {correlation_id}): {}", bad.error),
                }
            }
        }))
    }
}

impl Encoder<(i32, Response)> for OwnCodec {
    type Error = CodecError;

    fn encode(&mut self, item: (i32, Response), dst: &mut BytesMut) -> Result<(), CodecError> {
        self.0.encode(item, dst)
    }
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).expect("the operating system's random source works");
    n
}

impl Protocol for Own {
    type Request = Request;
    type Response = Response;
    type Context = i32;
    type Peer = OwnPeer;
    type Codec = OwnCodec;

    fn peer(addr: std::net::SocketAddr) -> OwnPeer {
        OwnPeer { host: addr.ip().to_canonical().to_string(), ..OwnPeer::default() }
    }

    fn codec(limits: &ServerLimits) -> OwnCodec {
        OwnCodec(ServerCodec::new(limits.frame_bytes_max))
    }

    fn request_bytes(req: &Request) -> usize {
        request_size_hint(req)
    }

    fn timed_out(_: i32, timeout: Duration) -> Response {
        Response::Error(Status::new(
            ErrorCode::RequestTimedOut,
            format!("no answer within request_timeout_ms {}; retry", timeout.as_millis()),
        ))
    }

    fn frame_too_large(len: usize, max: usize) -> (i32, Response) {
        let status = Status::new(
            ErrorCode::MessageTooLarge,
            format!("frame of {len} bytes exceeds frame_bytes_max {max}; closing the connection"),
        );
        (-1, Response::Error(status))
    }

    fn too_many_connections(limits: &ServerLimits) -> (i32, Response) {
        let status = Status::new(
            ErrorCode::BrokerNotAvailable,
            format!("too many connections: the limit connections_max is {}; retry later", limits.connections_max),
        );
        (-1, Response::Error(status))
    }

    /// Answer the membership handshake and client logins, and refuse what the peer may not ask
    /// ([`Own::refusal`]).
    fn gate(limits: &ServerLimits, peer: &mut OwnPeer, req: &Request) -> Option<(Response, bool)> {
        let failed = |msg: String| Status::new(ErrorCode::SaslAuthenticationFailed, msg);
        match (req, &limits.cluster_secret) {
            (Request::AuthBegin(_), None) => Some((
                Response::AuthBegin(AuthBeginResponse {
                    status: failed("this process has no cluster secret, so there is nothing to prove".into()),
                    server_nonce: Bytes::new(),
                }),
                false,
            )),
            (Request::AuthBegin(_), Some(_)) => {
                let n = nonce();
                peer.server_nonce = Some(n);
                Some((
                    Response::AuthBegin(AuthBeginResponse {
                        status: Status::ok(),
                        server_nonce: Bytes::copy_from_slice(&n),
                    }),
                    false,
                ))
            }
            (Request::AuthProve(p), secret) => {
                let verified = match (secret, peer.server_nonce.take()) {
                    (Some(secret), Some(n)) => secret
                        .verify_client(&n, &p.client_nonce, &p.member, &p.proof)
                        .then(|| secret.server_proof(&p.client_nonce, &n, &p.member)),
                    _ => None,
                };
                Some(match verified {
                    Some(server_proof) => {
                        tracing::debug!(member = %p.member, "cluster member authenticated");
                        peer.member = Some(p.member.clone());
                        (
                            Response::AuthProve(AuthProveResponse {
                                status: Status::ok(),
                                server_proof: Bytes::from(server_proof),
                            }),
                            false,
                        )
                    }
                    None => {
                        tracing::warn!(member = %p.member, "membership proof refused; closing the connection");
                        (
                            Response::AuthProve(AuthProveResponse {
                                status: failed(format!(
                                    "membership proof for '{}' refused: wrong cluster secret, or no challenge asked first",
                                    p.member
                                )),
                                server_proof: Bytes::new(),
                            }),
                            true,
                        )
                    }
                })
            }
            (Request::SaslLogin(l), _) => Some(Self::login_round(limits, peer, l)),
            (req, _) => Self::refusal(limits, peer, req).map(|status| (Response::Error(status), false)),
        }
    }

    fn gated(limits: &ServerLimits, peer: &OwnPeer, req: &Request) -> bool {
        matches!(req, Request::AuthBegin(_) | Request::AuthProve(_) | Request::SaslLogin(_))
            || Self::refusal(limits, peer, req).is_some()
    }

    fn member_request(limits: &ServerLimits, peer: &OwnPeer, req: &Request) -> bool {
        if matches!(req, Request::AuthBegin(b) if b.member.starts_with(RELAY_MEMBER_PREFIX)) {
            // A broker relaying its Kafka clients' requests (under the authorizer) proves
            // membership, but is client traffic: the members' room is not for it.
            return false;
        }
        if limits.cluster_secret.is_some() {
            // A member proves itself first: a claim (a heartbeat the gate would refuse) must
            // not make a client's connection a member's.
            return peer.member.is_some() || Self::handshake(req);
        }
        peer.member.is_some() || req.is_member_traffic() || Self::handshake(req)
    }

    fn handshake(req: &Request) -> bool {
        matches!(req, Request::AuthBegin(_) | Request::AuthProve(_))
    }

    fn not_handled() -> Response {
        Response::Error(Status::new(
            ErrorCode::ClusterAuthorizationFailed,
            "not handled: an earlier request on this connection failed (a membership proof or a login), closing \
             it; reconnect",
        ))
    }

    fn closes(_: &Response) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::FetchRequest;
    use std::sync::Mutex;
    use tokio::sync::oneshot;

    fn fetch(partition: i32) -> Request {
        Request::Fetch(FetchRequest {
            topic: "t".into(),
            partition,
            leader_epoch: -1,
            offset: 0,
            max_bytes: 1,
            isolation: 0,
        })
    }

    /// A broker's first heartbeat: a cluster member's own request.
    fn heartbeat() -> Request {
        Request::Heartbeat(protocol::HeartbeatRequest {
            broker_id: 1,
            addr: "a".into(),
            kafka_addr: String::new(),
            incarnation: 1,
            broker_epoch: -1,
            previous_broker_epoch: -1,
            log_dir_id: 1,
            intact: true,
            replicas: Vec::new(),
            credentials_version: 0,
            authorization_version: 0,
        })
    }

    /// An answer that names the partition asked.
    fn answer(partition: i32) -> Response {
        Response::Error(Status::new(ErrorCode::None, partition.to_string()))
    }

    /// The partitions a [`holding`] handler was called with, in order.
    type Calls = Arc<Mutex<Vec<i32>>>;

    /// A handler that records each call's partition and holds the answer to partition 0 until
    /// `release` fires; `serial` says how it hands that request back.
    fn holding(serial: bool) -> (Handler, Calls, oneshot::Sender<()>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (release, released) = oneshot::channel::<()>();
        let released = Arc::new(Mutex::new(Some(released)));
        let seen = calls.clone();
        let handler: Handler = Arc::new(move |req| {
            let Request::Fetch(f) = req else { panic!("only fetches here") };
            seen.lock().unwrap().push(f.partition);
            if f.partition != 0 {
                return Handled::answer(answer(f.partition));
            }
            let released = released.lock().unwrap().take().expect("partition 0 asked once");
            let fut = async move {
                let _ = released.await;
                answer(0)
            };
            if serial {
                Handled::serial(fut)
            } else {
                Handled::Applied(Box::pin(fut))
            }
        });
        (handler, calls, release)
    }

    async fn answers(inflight: &mut InFlight<'_, Own>, n: usize) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let (id, resp) = inflight.next().await.expect("an answer is due");
            let Response::Error(s) = resp else { panic!("wrong answer") };
            out.push((id, s.message));
        }
        out
    }

    fn want(pairs: &[(i32, &str)]) -> Vec<(i32, String)> {
        pairs.iter().map(|(id, m)| (*id, m.to_string())).collect()
    }

    /// A connection's in-flight requests after fetches of partitions 0, 1 and 2 (correlation
    /// ids 10, 11, 12) were pushed to a [`holding`] handler; its calls and its release.
    fn three_fetches(serial: bool, limits: &ServerLimits) -> (InFlight<'_, Own>, Calls, oneshot::Sender<()>) {
        let (handler, calls, release) = holding(serial);
        let mut inflight = InFlight::new(handler, None, limits, false, OwnPeer::default());
        for (id, p) in [(10, 0), (11, 1), (12, 2)] {
            inflight.push(id, Item::Request(fetch(p)));
        }
        (inflight, calls, release)
    }

    /// A group handler that records the partitions of each call's requests and takes them up
    /// to and including partition 0's, which it starts serial and holds until `release` fires.
    /// The partitions of each call of a [`grouping`] handler, in order.
    type GroupCalls = Arc<Mutex<Vec<Vec<i32>>>>;

    fn grouping() -> (GroupHandler, GroupCalls, oneshot::Sender<()>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (release, released) = oneshot::channel::<()>();
        let released = Arc::new(Mutex::new(Some(released)));
        let seen = calls.clone();
        let group: GroupHandler = Arc::new(move |requests: &mut VecDeque<Request>| {
            let mut taken = Vec::new();
            let mut handled = Vec::new();
            while let Some(Request::Fetch(f)) = requests.pop_front() {
                taken.push(f.partition);
                if f.partition == 0 {
                    let released = released.lock().unwrap().take().expect("partition 0 asked once");
                    handled.push(Handled::serial(async move {
                        let _ = released.await;
                        answer(0)
                    }));
                    break;
                }
                handled.push(Handled::answer(answer(f.partition)));
            }
            seen.lock().unwrap().push(taken);
            handled
        });
        (group, calls, release)
    }

    #[tokio::test]
    async fn a_connection_in_the_members_room_serves_members_only() {
        let limits = ServerLimits { connections_max: 7, ..ServerLimits::default() };
        let (handler, calls, _) = holding(false);
        let mut client = InFlight::<Own>::new(handler.clone(), None, &limits, true, OwnPeer::default());
        assert!(client.push(10, Item::Request(fetch(1))), "a client's request closes the connection");
        let (id, resp) = client.next().await.unwrap();
        assert_eq!(id, 10, "answered in the request's place");
        assert_eq!(resp.status().code, ErrorCode::BrokerNotAvailable, "{}", resp.status());
        assert!(resp.status().message.contains("connections_max is 7"), "{}", resp.status());
        assert!(calls.lock().unwrap().is_empty(), "the handler never saw it");
        // With a cluster secret, a claim is not enough: a heartbeat of a peer that proved
        // nothing is refused there too (the gate would refuse it anyway).
        let secured = ServerLimits { cluster_secret: Some(ClusterSecret::new(vec![7; 32]).unwrap()), ..limits.clone() };
        let mut claim = InFlight::<Own>::new(handler.clone(), None, &secured, true, OwnPeer::default());
        let heartbeat = heartbeat();
        assert!(claim.push(12, Item::Request(heartbeat)), "an unproven claim closes the connection");
        assert_eq!(claim.next().await.unwrap().1.status().code, ErrorCode::BrokerNotAvailable);
        // A broker's relay of Kafka clients' requests proves membership, but is client traffic:
        // its handshake does not make it a member's connection (a flood would fill the room).
        let mut relay = InFlight::<Own>::new(handler.clone(), None, &secured, true, OwnPeer::default());
        let begin = Request::AuthBegin(protocol::AuthBeginRequest { member: format!("{RELAY_MEMBER_PREFIX}-1") });
        assert!(relay.push(13, Item::Request(begin)), "a relay's handshake in the members' room closes it");
        assert_eq!(relay.next().await.unwrap().1.status().code, ErrorCode::BrokerNotAvailable);
        let mut broker = InFlight::<Own>::new(handler.clone(), None, &secured, true, OwnPeer::default());
        let begin = Request::AuthBegin(protocol::AuthBeginRequest { member: "broker-1".into() });
        assert!(!broker.push(14, Item::Request(begin)), "a broker's handshake is a member's");
        // A member (here: one that proved membership) is served as on any connection.
        let mut member = InFlight::<Own>::new(handler, None, &limits, true, OwnPeer::default());
        member.peer.member = Some("broker-1".into());
        assert!(!member.push(11, Item::Request(fetch(2))));
        assert_eq!(answers(&mut member, 1).await, want(&[(11, "2")]));
    }

    #[tokio::test]
    async fn requests_read_together_are_started_together_up_to_a_serial_one() {
        let limits = ServerLimits::default();
        let (handler, single_calls, _) = holding(false);
        let (group, group_calls, release) = grouping();
        let mut inflight = InFlight::new(handler, Some(group), &limits, false, OwnPeer::default());
        let requests = [(10, 1), (11, 2), (12, 0), (13, 3), (14, 4)];
        inflight.push_all(requests.iter().map(|(id, p)| (*id, fetch(*p))).collect());
        assert_eq!(*group_calls.lock().unwrap(), [vec![1, 2, 0]], "one call, up to the serial request");
        assert!(single_calls.lock().unwrap().is_empty(), "3 and 4 wait behind it");
        assert_eq!(inflight.len(), 5);
        assert_eq!(answers(&mut inflight, 2).await, want(&[(10, "1"), (11, "2")]));
        release.send(()).unwrap();
        assert_eq!(answers(&mut inflight, 1).await, want(&[(12, "0")]));
        inflight.resume();
        assert_eq!(*single_calls.lock().unwrap(), [3, 4]);
        assert_eq!(answers(&mut inflight, 2).await, want(&[(13, "3"), (14, "4")]));
        assert!(inflight.is_empty());
    }

    #[tokio::test]
    async fn a_connection_hands_the_requests_one_read_brings_to_the_group_handler() {
        use protocol::codec::ClientCodec;
        let (handler, _, _) = holding(false);
        let (group, group_calls, _release) = grouping();
        let limits = ServerLimits::default();
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, stop) = watch::channel(false);
        let served = tokio::spawn(async move {
            serve_connection::<Own, _>(
                server,
                InFlight::new(handler, Some(group), &limits, false, OwnPeer::default()),
                stop,
            )
            .await
        });
        let mut framed = Framed::new(client, ClientCodec::new(FRAME_BYTES_MAX_DEFAULT));
        // Three requests in one write: the server reads them at once.
        for (id, p) in [(1, 1), (2, 2), (3, 3)] {
            framed.feed((id, fetch(p))).await.unwrap();
        }
        framed.flush().await.unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let (id, resp) = framed.next().await.unwrap().unwrap();
            got.push((id, resp.status().message.clone()));
        }
        assert_eq!(got, want(&[(1, "1"), (2, "2"), (3, "3")]));
        assert_eq!(*group_calls.lock().unwrap(), [vec![1, 2, 3]]);
        drop(framed);
        served.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_gives_back_its_read_ahead_room_and_a_grown_write_buffer() {
        use protocol::codec::ClientCodec;
        // Answers a fetch of partition p with p bytes of records.
        let handler: Handler = Arc::new(|req| {
            let Request::Fetch(f) = req else { panic!("only fetches here") };
            Handled::answer(Response::Fetch(protocol::FetchResponse {
                status: Status::ok(),
                high_watermark: 0,
                last_stable_offset: 0,
                current_leader_epoch: 0,
                aborted: Vec::new(),
                records: Bytes::from(vec![0; f.partition as usize]),
            }))
        });
        let limits = ServerLimits { buffer_release_ms: 1_000, ..ServerLimits::default() };
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, stop) = watch::channel(false);
        let served = tokio::spawn(async move {
            let inflight = InFlight::new(handler, None, &limits, false, OwnPeer::default());
            serve_connection::<Own, _>(server, inflight, stop).await
        });
        let mut framed = Framed::new(client, ClientCodec::new(FRAME_BYTES_MAX_DEFAULT));
        let mut call = async |partitions: &[i32]| {
            for (id, p) in partitions.iter().enumerate() {
                framed.feed((id as i32, fetch(*p))).await.unwrap();
            }
            framed.flush().await.unwrap();
            for p in partitions {
                let (_, resp) = framed.next().await.unwrap().unwrap();
                let Response::Fetch(f) = resp else { panic!("a fetch answer") };
                assert_eq!(f.records.len(), *p as usize);
            }
        };
        let quiet = || tokio::time::sleep(Duration::from_millis(1_500));
        // Pipelined requests give the connection read-ahead room; a quiet spell takes it back.
        call(&[1, 2, 3]).await;
        quiet().await;
        // A 20 KB answer grows the write buffer; a quiet spell takes that back too.
        call(&[20_000]).await;
        quiet().await;
        // Small requests one at a time hold nothing to give back.
        call(&[4]).await;
        quiet().await;
        call(&[5]).await;
        drop(framed);
        let served = served.await.unwrap();
        assert_eq!((served.read_buffer_releases, served.write_buffer_releases), (1, 1));
        assert!(served.read_capacity_released_to <= BUFFER_BYTES_KEPT, "{served:?}");
    }

    #[tokio::test]
    async fn applied_requests_let_later_ones_start_and_answers_keep_their_order() {
        let limits = ServerLimits::default();
        let (mut inflight, calls, release) = three_fetches(false, &limits);
        // Request 0 is still waiting, yet 1 and 2 were handed to the handler already.
        assert_eq!(*calls.lock().unwrap(), [0, 1, 2]);
        assert!(inflight.next_ready().is_none(), "answer 0 is not ready, and 1 may not overtake it");
        release.send(()).unwrap();
        assert_eq!(answers(&mut inflight, 3).await, want(&[(10, "0"), (11, "1"), (12, "2")]));
        assert!(inflight.is_empty());
    }

    #[tokio::test]
    async fn a_serial_request_holds_back_later_ones_until_it_finishes() {
        let limits = ServerLimits::default();
        let (mut inflight, calls, release) = three_fetches(true, &limits);
        let bad = Status::new(ErrorCode::InvalidRequest, "undecodable");
        inflight.push(13, Item::Decided(Response::Error(bad)));
        assert_eq!(*calls.lock().unwrap(), [0], "1 and 2 wait for the serial request");
        assert_eq!(inflight.len(), 4);
        assert!(inflight.next_ready().is_none());
        release.send(()).unwrap();
        assert_eq!(answers(&mut inflight, 1).await, want(&[(10, "0")]));
        // As the server loop does after each answer.
        inflight.resume();
        assert_eq!(*calls.lock().unwrap(), [0, 1, 2]);
        assert_eq!(answers(&mut inflight, 2).await, want(&[(11, "1"), (12, "2")]));
        let (id, resp) = inflight.next().await.expect("the decided answer keeps its place");
        assert_eq!(id, 13);
        assert!(matches!(resp, Response::Error(s) if s.code == ErrorCode::InvalidRequest));
        assert!(inflight.is_empty());
    }

    #[tokio::test]
    async fn requests_read_behind_a_failed_membership_proof_are_answered_but_not_run() {
        use protocol::codec::ClientCodec;
        use protocol::AuthProveRequest;
        let (handler, calls, release) = holding(true);
        let limits =
            ServerLimits { cluster_secret: Some(ClusterSecret::new(vec![7; 32]).unwrap()), ..ServerLimits::default() };
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, stop) = watch::channel(false);
        let served = tokio::spawn(async move {
            let inflight = InFlight::new(handler, None, &limits, false, OwnPeer::default());
            serve_connection::<Own, _>(server, inflight, stop).await
        });
        let mut framed = Framed::new(client, ClientCodec::new(FRAME_BYTES_MAX_DEFAULT));
        let prove = Request::AuthProve(AuthProveRequest {
            member: "intruder".into(),
            client_nonce: Bytes::from_static(&[0; NONCE_BYTES]),
            proof: Bytes::from_static(&[0; 32]),
        });
        // A holds the connection (serial); the proof, without a challenge first, fails.
        for (id, req) in [(1, fetch(0)), (2, fetch(1)), (3, prove), (4, fetch(2))] {
            framed.send((id, req)).await.unwrap();
        }
        // Let the server read all four while A waits (this test runs on one thread).
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*calls.lock().unwrap(), [0], "requests behind the serial one wait");
        release.send(()).unwrap();
        let mut got = Vec::new();
        while let Some(frame) = framed.next().await {
            let (id, resp) = frame.unwrap();
            got.push((id, resp.status().code));
        }
        served.await.unwrap();
        assert_eq!(
            got,
            [
                (1, ErrorCode::None),
                (2, ErrorCode::None),
                (3, ErrorCode::SaslAuthenticationFailed),
                (4, ErrorCode::ClusterAuthorizationFailed)
            ],
            "every answer, in order, then the connection closes"
        );
        assert_eq!(*calls.lock().unwrap(), [0, 1], "the request after the failed proof never ran");
    }

    /// Credentials of alice (SCRAM-SHA-512) and an authorizer letting her read `t`; a standby
    /// logs no one in.
    struct Logins {
        standby: bool,
        authorizer: Arc<protocol::acl::Authorizer>,
    }

    impl ClientLogins for Logins {
        fn credential(
            &self,
            user: &str,
            mechanism: protocol::sasl::ScramMechanism,
        ) -> Result<Option<protocol::sasl::ScramCredential>, Status> {
            if self.standby {
                return Err(Status::new(ErrorCode::NotCoordinator, "a standby; the active replica is 10.0.0.9:9092"));
            }
            Ok((user == "alice")
                .then(|| protocol::sasl::ScramCredential::from_password(mechanism, b"alice-pw", vec![3; 16], 4096)))
        }

        fn authorizer(&self) -> Option<Arc<protocol::acl::Authorizer>> {
            (!self.standby).then(|| self.authorizer.clone())
        }

        fn binder(&self) -> Option<&protocol::auth::ProducerIdBinder> {
            None
        }
    }

    fn logins_limits(standby: bool) -> ServerLimits {
        use protocol::acl::*;
        let read = AclBinding {
            resource_type: ResourceType::Topic,
            name: "t".into(),
            pattern: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        };
        let authorizer =
            Arc::new(Authorizer::new(Authorization { enabled: true, acls: vec![read], ..Default::default() }));
        let limits = ServerLimits {
            cluster_secret: Some(ClusterSecret::new(vec![7; 32]).unwrap()),
            client_logins: Some(Arc::new(Logins { standby, authorizer })),
            ..ServerLimits::default()
        };
        limits.members_only.store(true, std::sync::atomic::Ordering::Relaxed);
        limits
    }

    fn sasl_login(mechanism: &str, bytes: Vec<u8>) -> Request {
        Request::SaslLogin(SaslLoginRequest { mechanism: mechanism.into(), auth_bytes: Bytes::from(bytes) })
    }

    /// One SaslLogin round through the gate: the answer's status, its bytes, and whether the
    /// connection closes.
    fn round(limits: &ServerLimits, peer: &mut OwnPeer, req: Request) -> (ErrorCode, Bytes, bool) {
        assert!(Own::gated(limits, peer, &req), "the gate answers logins itself");
        match Own::gate(limits, peer, &req) {
            Some((Response::SaslLogin(r), close)) => (r.status.code, r.auth_bytes, close),
            other => panic!("not a login answer: {:?}", other.map(|(r, _)| r)),
        }
    }

    /// A SCRAM-SHA-512 login as alice with `password`: the last round's code and whether it
    /// closes the connection.
    fn log_in(limits: &ServerLimits, peer: &mut OwnPeer, password: &str) -> (ErrorCode, bool) {
        use protocol::sasl::{ScramClient, ScramMechanism};
        let (mut client, first) = ScramClient::new(ScramMechanism::Sha512, "alice", password.as_bytes(), "cnonce");
        let (code, server_first, close) = round(limits, peer, sasl_login("SCRAM-SHA-512", first));
        if code != ErrorCode::None {
            return (code, close);
        }
        let last = client.server_first(&server_first).unwrap();
        let (code, server_final, close) = round(limits, peer, sasl_login("SCRAM-SHA-512", last));
        if code == ErrorCode::None {
            client.server_final(&server_final).expect("the server proves it holds the credential");
        }
        (code, close)
    }

    #[test]
    fn own_clients_log_in_with_scram_and_the_acls_decide_what_they_may_do() {
        let limits = logins_limits(false);
        let describe = Request::Describe;
        // Before a login: refused, saying how to log in; the connection stays.
        let mut peer = Own::peer("10.0.0.5:4000".parse().unwrap());
        assert!(Own::gated(&limits, &peer, &fetch(0)));
        let refused = Own::gate(&limits, &mut peer, &fetch(0)).unwrap();
        assert_eq!(refused.0.status().code, ErrorCode::ClusterAuthorizationFailed);
        assert!(refused.0.status().message.contains("--sasl-username") && !refused.1, "{:?}", refused);
        // A login: then what the ACLs allow passes to the handler, and nothing else.
        assert_eq!(log_in(&limits, &mut peer, "alice-pw"), (ErrorCode::None, false));
        assert!(!Own::gated(&limits, &peer, &fetch(0)) && Own::gate(&limits, &mut peer, &fetch(0)).is_none());
        let no = Own::gate(&limits, &mut peer, &describe).unwrap();
        assert_eq!(no.0.status().code, ErrorCode::ClusterAuthorizationFailed, "no DESCRIBE on the cluster");
        assert!(Own::gated(&limits, &peer, &describe), "gated agrees with the gate");
        let heartbeat = heartbeat();
        let members = Own::gate(&limits, &mut peer, &heartbeat).unwrap();
        assert_eq!(members.0.status().code, ErrorCode::ClusterAuthorizationFailed, "a member's request");
        // A second login on the connection: ILLEGAL_SASL_STATE, the first one stands.
        let (code, _, close) = round(&limits, &mut peer, sasl_login("SCRAM-SHA-512", b"n,,n=bob,r=x".to_vec()));
        assert_eq!((code, close), (ErrorCode::IllegalSaslState, false));
        let (code, _, close) = round(&limits, &mut peer, sasl_login("PLAIN", Vec::new()));
        assert_eq!((code, close), (ErrorCode::IllegalSaslState, false), "whatever the mechanism");
        assert!(Own::gate(&limits, &mut peer, &fetch(0)).is_none(), "still alice");
        // Failures close the connection: a wrong password, an unknown user, PLAIN, a final
        // round under another mechanism, a malformed message.
        let failed = (ErrorCode::SaslAuthenticationFailed, true);
        let fresh = || Own::peer("10.0.0.5:4001".parse().unwrap());
        assert_eq!(log_in(&limits, &mut fresh(), "guess"), failed);
        let mut p = fresh();
        let (code, _, close) = round(&limits, &mut p, sasl_login("SCRAM-SHA-512", b"n,,n=bob,r=x".to_vec()));
        assert_eq!((code, close), failed, "an unknown user");
        let mut p = fresh();
        let (code, _, close) = round(&limits, &mut p, sasl_login("PLAIN", b"\0alice\0alice-pw".to_vec()));
        assert_eq!((code, close), (ErrorCode::UnsupportedSaslMechanism, true), "PLAIN is a Kafka listener's");
        let mut p = fresh();
        let (mut client, first) =
            protocol::sasl::ScramClient::new(protocol::sasl::ScramMechanism::Sha512, "alice", b"alice-pw", "cnonce");
        let (_, server_first, _) = round(&limits, &mut p, sasl_login("SCRAM-SHA-512", first));
        let last = client.server_first(&server_first).unwrap();
        let (code, _, close) = round(&limits, &mut p, sasl_login("SCRAM-SHA-256", last));
        assert_eq!((code, close), failed, "the final round under another mechanism");
        assert!(Own::gate(&limits, &mut p, &fetch(0)).is_some(), "no login came of it");
        let mut p = fresh();
        let (code, _, close) = round(&limits, &mut p, sasl_login("SCRAM-SHA-512", b"garbage".to_vec()));
        assert_eq!((code, close), failed);
        let mut p = fresh();
        let huge = vec![b'r'; protocol::sasl::SASL_MESSAGE_BYTES_MAX + 1];
        let (code, _, close) = round(&limits, &mut p, sasl_login("SCRAM-SHA-512", huge));
        assert_eq!((code, close), failed, "a message over SASL_MESSAGE_BYTES_MAX");
    }

    #[test]
    fn a_replica_that_serves_nothing_lets_nothing_pass_unchecked() {
        let limits = logins_limits(true);
        let mut peer = Own::peer("10.0.0.5:4000".parse().unwrap());
        peer.login = OwnLogin::Authenticated("User:alice".into()); // logged in while it served
        assert!(Own::gated(&limits, &peer, &fetch(0)));
        let refused = Own::gate(&limits, &mut peer, &fetch(0)).unwrap();
        assert_eq!(refused.0.status().code, ErrorCode::NotCoordinator, "{:?}", refused);
    }

    #[test]
    fn a_standby_logs_no_one_in_and_names_the_active_replica() {
        let limits = logins_limits(true);
        let mut peer = Own::peer("10.0.0.5:4000".parse().unwrap());
        let first =
            protocol::sasl::ScramClient::new(protocol::sasl::ScramMechanism::Sha512, "alice", b"alice-pw", "n").1;
        let req = sasl_login("SCRAM-SHA-512", first);
        match Own::gate(&limits, &mut peer, &req) {
            Some((Response::SaslLogin(r), true)) => {
                assert_eq!(r.status.code, ErrorCode::NotCoordinator);
                assert!(r.status.message.contains("10.0.0.9:9092"), "{}", r.status);
            }
            other => panic!("{:?}", other.map(|(r, _)| r)),
        }
    }
}
