//! A pipelined client connection: requests go out in order, answers come back in order and
//! are matched to their callers by correlation id.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use protocol::auth::{ClusterSecret, NONCE_BYTES};

use crate::tls::ClientTls;
use protocol::codec::{ClientCodec, FRAME_BYTES_MAX_DEFAULT};
use protocol::{AuthBeginRequest, AuthProveRequest, ErrorCode, Request, Response, Status};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

/// Requests queued on one connection before callers wait.
pub const QUEUED_REQUESTS_MAX: usize = 1024;

/// Why a call did not get an answer.
#[derive(Debug, Error, Clone)]
pub enum NetError {
    /// Could not connect.
    #[error("cannot connect to {addr}: {detail}")]
    Connect {
        /// Address.
        addr: String,
        /// The OS error.
        detail: String,
    },
    /// The connection closed before the answer came.
    #[error("connection to {addr} closed: {detail}")]
    Closed {
        /// Address.
        addr: String,
        /// Why.
        detail: String,
    },
    /// No answer within the deadline.
    #[error("no answer from {addr} within {timeout_ms} ms")]
    Timeout {
        /// Address.
        addr: String,
        /// The deadline.
        timeout_ms: u64,
    },
    /// The server answered with an error frame (it could not read the request).
    #[error("{addr} refused the request: {status}")]
    Refused {
        /// Address.
        addr: String,
        /// The server's status.
        status: Status,
    },
}

impl NetError {
    /// Whether retrying (on a new connection) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            NetError::Refused { status, .. } => status.code.is_retriable(),
            _ => true,
        }
    }
}

type Call = (Request, oneshot::Sender<Result<Response, NetError>>);

/// A connection; cheap to clone, all clones share the socket. Dropping every clone closes it.
#[derive(Clone, Debug)]
pub struct Connection {
    addr: String,
    tx: mpsc::Sender<Call>,
}

impl Connection {
    /// Connect to `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Result<Connection, NetError> {
        Self::connect_with(addr, FRAME_BYTES_MAX_DEFAULT * 4).await
    }

    /// Connect, accepting response frames up to `frame_bytes_max`.
    pub async fn connect_with(addr: &str, frame_bytes_max: usize) -> Result<Connection, NetError> {
        Self::open(addr, frame_bytes_max, None).await
    }

    async fn open(addr: &str, frame_bytes_max: usize, tls: Option<&ClientTls>) -> Result<Connection, NetError> {
        let connect_err = |detail: String| NetError::Connect { addr: addr.to_string(), detail };
        let stream = TcpStream::connect(addr).await.map_err(|e| connect_err(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (tx, rx) = mpsc::channel(QUEUED_REQUESTS_MAX);
        match tls {
            None => {
                tokio::spawn(run(addr.to_string(), Framed::new(stream, ClientCodec::new(frame_bytes_max)), rx));
            }
            Some(tls) => {
                let name = crate::tls::server_name(addr).map_err(connect_err)?;
                let stream = tls
                    .connector()
                    .connect(name, stream)
                    .await
                    .map_err(|e| connect_err(format!("TLS handshake failed: {e}")))?;
                tokio::spawn(run(addr.to_string(), Framed::new(stream, ClientCodec::new(frame_bytes_max)), rx));
            }
        }
        Ok(Connection { addr: addr.to_string(), tx })
    }

    /// Connect and prove membership of the cluster as `member` (and check that the server is a
    /// member too). Without a secret this is [`Connection::connect`].
    pub async fn connect_as(addr: &str, secret: Option<&ClusterSecret>, member: &str) -> Result<Connection, NetError> {
        let conn = Connection::connect(addr).await?;
        Self::prove(conn, addr, secret, member).await
    }

    async fn prove(
        conn: Connection,
        addr: &str,
        secret: Option<&ClusterSecret>,
        member: &str,
    ) -> Result<Connection, NetError> {
        let Some(secret) = secret else { return Ok(conn) };
        let refused = |msg: String| NetError::Refused {
            addr: addr.to_string(),
            status: Status::new(ErrorCode::SaslAuthenticationFailed, msg),
        };
        let begin = conn.call(Request::AuthBegin(AuthBeginRequest { member: member.to_string() })).await?;
        let Response::AuthBegin(b) = begin else {
            return Err(refused(format!("unexpected answer to AuthBegin: {}", begin.status())));
        };
        if !b.status.is_ok() {
            return Err(NetError::Refused { addr: addr.to_string(), status: b.status });
        }
        let mut client_nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut client_nonce).expect("the operating system's random source works");
        let proof = secret.client_proof(&b.server_nonce, &client_nonce, member);
        let req = Request::AuthProve(AuthProveRequest {
            member: member.to_string(),
            client_nonce: Bytes::copy_from_slice(&client_nonce),
            proof: Bytes::from(proof),
        });
        let prove = conn.call(req).await?;
        let Response::AuthProve(p) = prove else {
            return Err(refused(format!("unexpected answer to AuthProve: {}", prove.status())));
        };
        if !p.status.is_ok() {
            return Err(NetError::Refused { addr: addr.to_string(), status: p.status });
        }
        if !secret.verify_server(&client_nonce, &b.server_nonce, member, &p.server_proof) {
            return Err(refused(format!("{addr} could not prove it holds the cluster secret")));
        }
        Ok(conn)
    }

    /// The address this connection goes to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection has closed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Queue a request now and return its answer to await later: requests submitted one after
    /// another go out (and are handled) in that order, however their answers are awaited.
    pub async fn submit(
        &self,
        req: Request,
    ) -> Result<impl std::future::Future<Output = Result<Response, NetError>>, NetError> {
        let (done, rx) = oneshot::channel();
        let closed = || NetError::Closed { addr: self.addr.clone(), detail: "connection task ended".into() };
        self.tx.send((req, done)).await.map_err(|_| closed())?;
        let closed = closed();
        Ok(async move { rx.await.map_err(|_| closed)? })
    }

    /// Send a request and wait for its answer.
    pub async fn call(&self, req: Request) -> Result<Response, NetError> {
        let (done, rx) = oneshot::channel();
        let closed = || NetError::Closed { addr: self.addr.clone(), detail: "connection task ended".into() };
        self.tx.send((req, done)).await.map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// [`Connection::call`] with a deadline.
    pub async fn call_timeout(&self, req: Request, timeout: Duration) -> Result<Response, NetError> {
        match tokio::time::timeout(timeout, self.call(req)).await {
            Ok(r) => r,
            Err(_) => Err(NetError::Timeout { addr: self.addr.clone(), timeout_ms: timeout.as_millis() as u64 }),
        }
    }
}

/// How to open connections: optionally over TLS, optionally proving cluster membership.
#[derive(Clone, Debug, Default)]
pub struct Dialer {
    /// Dial TLS, trusting these CAs.
    pub tls: Option<ClientTls>,
    /// Prove membership with this secret (cluster members only).
    pub secret: Option<ClusterSecret>,
    /// The name to prove membership as (`broker-3`, `coordinator`).
    pub member: String,
}

impl Dialer {
    /// A plain dialler: no TLS, no membership.
    pub fn plain() -> Dialer {
        Dialer::default()
    }

    /// Open a connection to `addr`.
    pub async fn dial(&self, addr: &str) -> Result<Connection, NetError> {
        let conn = Connection::open(addr, FRAME_BYTES_MAX_DEFAULT * 4, self.tls.as_ref()).await?;
        Connection::prove(conn, addr, self.secret.as_ref(), &self.member).await
    }
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    addr: String,
    mut framed: Framed<S, ClientCodec>,
    mut rx: mpsc::Receiver<Call>,
) {
    let mut pending: VecDeque<(i32, oneshot::Sender<Result<Response, NetError>>)> = VecDeque::new();
    let mut next_id: i32 = 0;
    let mut open = true;
    let failure = loop {
        if !open && pending.is_empty() {
            return;
        }
        tokio::select! {
            call = rx.recv(), if open => {
                let Some((req, done)) = call else {
                    // Every handle is gone: finish the answers still due, then close.
                    open = false;
                    continue;
                };
                let id = next_id;
                next_id = next_id.wrapping_add(1) & i32::MAX;
                if let Err(e) = framed.send((id, req)).await {
                    let _ = done.send(Err(NetError::Closed { addr: addr.clone(), detail: e.to_string() }));
                    break e.to_string();
                }
                pending.push_back((id, done));
            }
            frame = framed.next(), if !pending.is_empty() => {
                match frame {
                    Some(Ok((-1, Response::Error(status)))) => {
                        // A frame-level refusal (oversized, unreadable header): the server is closing.
                        let err = NetError::Refused { addr: addr.clone(), status };
                        for (_, done) in pending.drain(..) {
                            let _ = done.send(Err(err.clone()));
                        }
                        return;
                    }
                    Some(Ok((id, resp))) => match pending.pop_front() {
                        Some((want, done)) if want == id => {
                            let answer = match resp {
                                Response::Error(status) => Err(NetError::Refused { addr: addr.clone(), status }),
                                other => Ok(other),
                            };
                            let _ = done.send(answer);
                        }
                        Some((want, done)) => {
                            let _ = done.send(Err(NetError::Closed {
                                addr: addr.clone(),
                                detail: format!("answer {id} arrived where {want} was due"),
                            }));
                            break "correlation id out of order".into();
                        }
                        None => break "unsolicited answer".into(),
                    },
                    Some(Err(e)) => break e.to_string(),
                    None => break "closed by peer".into(),
                }
            }
        }
    };
    for (_, done) in pending.drain(..) {
        let _ = done.send(Err(NetError::Closed { addr: addr.clone(), detail: failure.clone() }));
    }
}
