//! The server side: [`serve`] runs an accept loop until `shutdown` resolves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use std::collections::VecDeque;

use futures::{SinkExt, StreamExt};
use protocol::auth::{ClusterSecret, NONCE_BYTES};
use protocol::codec::{CodecError, ServerCodec, FRAME_BYTES_MAX_DEFAULT};
use protocol::{AuthBeginResponse, AuthProveResponse, ErrorCode, Request, Response, Status};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::Framed;

/// A boxed response future.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Response> + Send + 'static>>;

/// Turns a request into its response; shared by every connection.
pub type Handler = Arc<dyn Fn(Request) -> ResponseFuture + Send + Sync>;

/// Limits of one server; every one has a default and a unit.
#[derive(Clone)]
pub struct ServerLimits {
    /// Largest request frame, in bytes, checked from the length prefix before allocating.
    pub frame_bytes_max: usize,
    /// Requests one connection may have queued (pipelined) at once. They are handled one at a
    /// time, in arrival order, as Kafka brokers do: a pipelining producer's batches are appended
    /// in the order it sent them.
    pub inflight_requests_max: usize,
    /// Connections served at once; further ones get an error frame and are closed.
    pub connections_max: usize,
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
}

impl std::fmt::Debug for ServerLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerLimits")
            .field("frame_bytes_max", &self.frame_bytes_max)
            .field("inflight_requests_max", &self.inflight_requests_max)
            .field("connections_max", &self.connections_max)
            .field("idle_ms", &self.idle_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("cluster_secret", &self.cluster_secret)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How long a TLS handshake may take before the connection is dropped.
pub const TLS_HANDSHAKE_MS: u64 = 10_000;

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            inflight_requests_max: 1024,
            connections_max: 1024,
            idle_ms: 10 * 60 * 1000,
            request_timeout_ms: 60_000,
            cluster_secret: None,
            tls: None,
        }
    }
}

/// Accept connections on `listener` and serve each with `handler` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, handler: Handler, limits: ServerLimits, shutdown: impl Future<Output = ()>) {
    let permits = Arc::new(Semaphore::new(limits.connections_max));
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
                let permit = permits.clone().try_acquire_owned();
                let handler = handler.clone();
                let limits = limits.clone();
                let stop = stop_rx.clone();
                tokio::spawn(async move {
                    match limits.tls.clone() {
                        None => match permit {
                            Ok(_permit) => serve_connection(stream, handler, &limits, stop).await,
                            Err(_) => refuse_connection(stream, &limits).await,
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
                                Ok(_permit) => serve_connection(tls, handler, &limits, stop).await,
                                Err(_) => refuse_connection(tls, &limits).await,
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

async fn refuse_connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S, limits: &ServerLimits) {
    let mut framed = Framed::new(stream, ServerCodec::new(limits.frame_bytes_max));
    let status = Status::new(
        ErrorCode::BrokerNotAvailable,
        format!("too many connections: the limit connections_max is {}; retry later", limits.connections_max),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), framed.send((-1, Response::Error(status)))).await;
}

async fn tagged(correlation_id: i32, fut: ResponseFuture, timeout: Duration) -> (i32, Response) {
    match tokio::time::timeout(timeout, fut).await {
        Ok(resp) => (correlation_id, resp),
        Err(_) => (
            correlation_id,
            Response::Error(Status::new(
                ErrorCode::RequestTimedOut,
                format!("no answer within request_timeout_ms {}; retry", timeout.as_millis()),
            )),
        ),
    }
}

/// The membership state of one connection.
#[derive(Default)]
struct Peer {
    server_nonce: Option<[u8; NONCE_BYTES]>,
    member: Option<String>,
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).expect("the operating system's random source works");
    n
}

/// Answer the membership handshake, and refuse internal requests from non-members. Returns
/// `Some(response, close)` when the request is answered here.
fn gate(limits: &ServerLimits, peer: &mut Peer, req: &Request) -> Option<(Response, bool)> {
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
                Response::AuthBegin(AuthBeginResponse { status: Status::ok(), server_nonce: Bytes::copy_from_slice(&n) }),
                false,
            ))
        }
        (Request::AuthProve(p), secret) => {
            let verified = match (secret, peer.server_nonce.take()) {
                (Some(secret), Some(n)) => {
                    secret.verify_client(&n, &p.client_nonce, &p.member, &p.proof).then(|| secret.server_proof(&p.client_nonce, &n, &p.member))
                }
                _ => None,
            };
            Some(match verified {
                Some(server_proof) => {
                    tracing::debug!(member = %p.member, "cluster member authenticated");
                    peer.member = Some(p.member.clone());
                    (Response::AuthProve(AuthProveResponse { status: Status::ok(), server_proof: Bytes::from(server_proof) }), false)
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
        (req, Some(_)) if req.is_internal() && peer.member.is_none() => Some((
            Response::Error(Status::new(
                ErrorCode::ClusterAuthorizationFailed,
                format!(
                    "{:?} is a cluster-internal request; prove membership with the cluster secret first (AuthBegin, AuthProve)",
                    req.api_key()
                ),
            )),
            false,
        )),
        _ => None,
    }
}

type Pending = Pin<Box<dyn Future<Output = (i32, Response)> + Send>>;

/// A connection's requests, handled strictly one after another in arrival order.
#[derive(Default)]
struct InOrder {
    queue: VecDeque<Pending>,
}

impl InOrder {
    fn push_back(&mut self, fut: impl Future<Output = (i32, Response)> + Send + 'static) {
        self.queue.push_back(Box::pin(fut));
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drive the oldest request to its answer. Cancel-safe: the request keeps its progress.
    async fn next(&mut self) -> Option<(i32, Response)> {
        let out = self.queue.front_mut()?.await;
        self.queue.pop_front();
        Some(out)
    }
}

fn error_reply(status: Status) -> ResponseFuture {
    Box::pin(async move { Response::Error(status) })
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    handler: Handler,
    limits: &ServerLimits,
    mut stop: watch::Receiver<bool>,
) {
    let mut framed = Framed::new(stream, ServerCodec::new(limits.frame_bytes_max));
    let mut inflight = InOrder::default();
    let request_timeout = Duration::from_millis(limits.request_timeout_ms);
    let mut peer = Peer::default();
    // After a request that cannot be decoded we answer it, finish what is in flight and close.
    let mut closing = false;
    let idle = Duration::from_millis(limits.idle_ms);
    let idle_timer = tokio::time::sleep(idle);
    tokio::pin!(idle_timer);
    loop {
        if closing && inflight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some((correlation_id, resp)) = inflight.next(), if !inflight.is_empty() => {
                if framed.send((correlation_id, resp)).await.is_err() {
                    break;
                }
                idle_timer.as_mut().reset(tokio::time::Instant::now() + idle);
            }
            item = framed.next(), if !closing && inflight.len() < limits.inflight_requests_max => {
                idle_timer.as_mut().reset(tokio::time::Instant::now() + idle);
                match item {
                    None => closing = true,
                    Some(Ok(Ok((header, req)))) => {
                        let fut = match gate(limits, &mut peer, &req) {
                            Some((resp, close)) => {
                                closing |= close;
                                Box::pin(async move { resp })
                            }
                            None => handler(req),
                        };
                        inflight.push_back(tagged(header.correlation_id, fut, request_timeout));
                    }
                    Some(Ok(Err(bad))) => {
                        let correlation_id = bad.header.map_or(-1, |h| h.correlation_id);
                        tracing::info!(error = %bad.error, correlation_id, "undecodable request; answering and closing");
                        let status = Status::new(bad.error.error_code(), format!("{}; closing the connection", bad.error));
                        let fut = error_reply(status);
                        inflight.push_back(tagged(correlation_id, fut, request_timeout));
                        closing = true;
                    }
                    Some(Err(CodecError::FrameTooLarge { len, max })) => {
                        tracing::info!(len, max, "oversized frame; answering and closing");
                        let status = Status::new(
                            ErrorCode::MessageTooLarge,
                            format!("frame of {len} bytes exceeds frame_bytes_max {max}; closing the connection"),
                        );
                        let fut = error_reply(status);
                        inflight.push_back(tagged(-1, fut, request_timeout));
                        closing = true;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "connection error");
                        break;
                    }
                }
            }
            _ = &mut idle_timer, if inflight.is_empty() => {
                tracing::info!(idle_ms = limits.idle_ms, "closing idle connection");
                break;
            }
            _ = stop.changed() => break,
        }
    }
}
