//! A pipelined client connection: requests go out in order, answers come back in order and
//! are matched to their callers by correlation id.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use protocol::auth::{ClusterSecret, NONCE_BYTES};

use crate::tls::ClientTls;
use protocol::codec::{encode_request_frame_head, ClientCodec, FRAME_BYTES_MAX_DEFAULT};
use protocol::{AuthBeginRequest, AuthProveRequest, ErrorCode, Request, Response, SaslLoginRequest, Status};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

/// Requests queued on one connection before callers wait.
pub const QUEUED_REQUESTS_MAX: usize = 1024;

/// A request whose batches take at least this many bytes is written with its batches where
/// they are (one vectored write of the frame's head and their pieces) instead of copied into
/// the connection's write buffer first.
pub const VECTORED_PAYLOAD_BYTES_MIN: usize = 16 * 1024;

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

    /// Log in as `login`'s user with SCRAM (two SaslLogin rounds), checking the server's
    /// signature: a server that does not hold the credential is refused.
    async fn login(conn: Connection, addr: &str, login: &SaslLogin) -> Result<Connection, NetError> {
        use protocol::sasl::Mechanism;
        let refused = |msg: String| NetError::Refused {
            addr: addr.to_string(),
            status: Status::new(ErrorCode::SaslAuthenticationFailed, msg),
        };
        let Mechanism::Scram(mechanism) = login.mechanism else {
            return Err(refused(format!(
                "{} logs in on a Kafka listener only; epochfence's own protocol logs in with SCRAM-SHA-256 or \
                 SCRAM-SHA-512 (the same user and password): --sasl-mechanism SCRAM-SHA-512",
                login.mechanism
            )));
        };
        let round = |bytes: Vec<u8>| {
            let conn = &conn;
            async move {
                let req = Request::SaslLogin(SaslLoginRequest {
                    mechanism: mechanism.name().to_string(),
                    auth_bytes: Bytes::from(bytes),
                });
                match conn.call(req).await? {
                    Response::SaslLogin(r) if r.status.is_ok() => Ok((r.auth_bytes, ())),
                    Response::SaslLogin(r) => Err(NetError::Refused { addr: addr.to_string(), status: r.status }),
                    other => Err(NetError::Refused { addr: addr.to_string(), status: other.status().clone() }),
                }
            }
        };
        scram_login(mechanism, login, round, refused).await?;
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

    /// Whether `other` is a clone of this connection (the same socket).
    pub fn same_as(&self, other: &Connection) -> bool {
        self.tx.same_channel(&other.tx)
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

/// A client's SASL login: mechanism, user and password. On a Kafka listener any mechanism it
/// offers; on the own protocol SCRAM-SHA-256 or SCRAM-SHA-512 ([`Dialer::login`]).
#[derive(Clone)]
pub struct SaslLogin {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: protocol::sasl::Mechanism,
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SaslLogin({} as {:?})", self.mechanism, self.user)
    }
}

impl SaslLogin {
    /// The principal the login names (`User:alice`).
    pub fn principal(&self) -> String {
        format!("User:{}", self.user)
    }
}

/// A fresh printable SCRAM nonce (18 random bytes in hex), a client's or a server's.
pub fn scram_nonce() -> String {
    let mut nonce = [0u8; 18];
    getrandom::fill(&mut nonce).expect("the operating system's random source works");
    nonce.iter().map(|b| format!("{b:02x}")).collect()
}

/// A SCRAM login as `login`'s user with `mechanism`, on any wire: `round` sends one client
/// message and returns the server's answer with what else that answer carries (`T`); the
/// server's signature is checked, so a server that does not hold the credential is refused
/// (`bad` makes the error). Returns the last answer's `T`. One client for both protocols.
pub async fn scram_login<T, E, Fut>(
    mechanism: protocol::sasl::ScramMechanism,
    login: &SaslLogin,
    mut round: impl FnMut(Vec<u8>) -> Fut,
    bad: impl Fn(String) -> E,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<(Bytes, T), E>>,
{
    let (mut client, first) =
        protocol::sasl::ScramClient::new(mechanism, &login.user, login.password.as_bytes(), &scram_nonce());
    let (server_first, _) = round(first).await?;
    let last = client.server_first(&server_first).map_err(|e| bad(format!("SCRAM server-first message: {e}")))?;
    let (server_final, carried) = round(last).await?;
    client
        .server_final(&server_final)
        .map_err(|e| bad(format!("the server could not prove it holds {}'s credential: {e}", login.user)))?;
    Ok(carried)
}

/// How to open connections: optionally over TLS, optionally proving cluster membership or
/// logging in as a user.
#[derive(Clone, Debug, Default)]
pub struct Dialer {
    /// Dial TLS, trusting these CAs.
    pub tls: Option<ClientTls>,
    /// Prove membership with this secret (cluster members only).
    pub secret: Option<ClusterSecret>,
    /// The name to prove membership as (`broker-3`, `coordinator`).
    pub member: String,
    /// Log in as this user (SaslLogin, SCRAM) after any membership proof: under the
    /// authorizer, the ACLs decide what the connection may do.
    pub login: Option<SaslLogin>,
}

impl Dialer {
    /// A plain dialler: no TLS, no membership.
    pub fn plain() -> Dialer {
        Dialer::default()
    }

    /// Open a connection to `addr`.
    pub async fn dial(&self, addr: &str) -> Result<Connection, NetError> {
        let conn = Connection::open(addr, FRAME_BYTES_MAX_DEFAULT * 4, self.tls.as_ref()).await?;
        let conn = Connection::prove(conn, addr, self.secret.as_ref(), &self.member).await?;
        match &self.login {
            Some(login) => Connection::login(conn, addr, login).await,
            None => Ok(conn),
        }
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
                if let Err(e) = send_request(&mut framed, id, req).await {
                    let _ = done.send(Err(NetError::Closed { addr: addr.clone(), detail: e.clone() }));
                    break e;
                }
                pending.push_back((id, done));
            }
            // Read while nothing is due too: a peer that closes (a restarted server) is
            // noticed at once, so `is_closed` tells the next caller to dial again rather than
            // lose its request on a dead socket.
            frame = framed.next() => {
                match frame {
                    Some(Ok((-1, Response::Error(status)))) => {
                        // A frame-level refusal (oversized, unreadable header): the server is closing.
                        let err = NetError::Refused { addr: addr.clone(), status };
                        if pending.is_empty() {
                            // Refused before any request (over `connections_max`): the next
                            // call gets the refusal, which says why.
                            if let Some((_, done)) = rx.recv().await {
                                let _ = done.send(Err(err));
                            }
                            return;
                        }
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

/// Write one request frame and flush it. A large payload (a Produce request's batch, a
/// Replicate's batches) goes from where it is, in one vectored write after the frame's head;
/// anything smaller through the codec's write buffer.
async fn send_request<S: AsyncWrite + Unpin>(
    framed: &mut Framed<S, ClientCodec>,
    id: i32,
    req: Request,
) -> Result<(), String> {
    let payload = protocol::request_payload(&req);
    if payload.iter().map(Bytes::len).sum::<usize>() < VECTORED_PAYLOAD_BYTES_MIN {
        return framed.send((id, req)).await.map_err(|e| e.to_string());
    }
    // The write buffer is empty (every frame is flushed), so the frame cannot overtake one.
    framed.flush().await.map_err(|e| e.to_string())?;
    let mut head = BytesMut::with_capacity(256);
    encode_request_frame_head(id, &req, &mut head);
    let mut slices: Vec<IoSlice<'_>> =
        std::iter::once(&head[..]).chain(payload.iter().map(|p| &p[..])).map(IoSlice::new).collect();
    let mut rest = &mut slices[..];
    let io = framed.get_mut();
    while !rest.is_empty() {
        let n = io.write_vectored(rest).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection took no more bytes".into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    // A TLS stream holds what it encrypted until it is flushed.
    io.flush().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{serve, Handled, ServerLimits};
    use protocol::{ProduceRequest, ProduceResponse, Records, ReplicateRequest, ReplicateResponse};
    use std::sync::Arc;

    /// What the server received, as numbers an answer can carry: (bytes, a checksum).
    fn digest(b: &[u8]) -> (i64, i64) {
        (
            b.len() as i64,
            b.iter().enumerate().fold(0i64, |h, (i, x)| h.wrapping_mul(31).wrapping_add(*x as i64 ^ i as i64)),
        )
    }

    /// Large payloads go out by a vectored write of their pieces, small ones through the
    /// codec's buffer; pipelined one after another they arrive whole and in order.
    #[tokio::test]
    async fn large_payloads_written_from_their_pieces_arrive_whole_and_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handler: crate::server::Handler = Arc::new(|req| {
            let (status, (len, sum)) = match &req {
                Request::Produce(p) => (Status::ok(), digest(&p.records)),
                Request::Replicate(r) => (Status::ok(), digest(&r.records.contiguous())),
                _ => (Status::new(ErrorCode::InvalidRequest, "unexpected"), (0, 0)),
            };
            Handled::answer(match req {
                Request::Produce(_) => Response::Produce(ProduceResponse {
                    status,
                    base_offset: len,
                    log_end_offset: sum,
                    current_producer_epoch: -1,
                    current_leader_epoch: -1,
                    log_append_time_ms: -1,
                }),
                _ => Response::Replicate(ReplicateResponse {
                    status,
                    log_end_offset: len,
                    hint_offset: sum,
                    diverging_epoch: -1,
                    current_leader_epoch: -1,
                    log_start_offset: -1,
                }),
            })
        });
        tokio::spawn(serve(listener, handler, ServerLimits::default(), std::future::pending()));
        let conn = Connection::connect(&addr).await.unwrap();
        let bytes = |n: usize, seed: u8| Bytes::from((0..n).map(|i| (i as u8).wrapping_mul(seed)).collect::<Vec<u8>>());
        let produce = |records: Bytes| {
            Request::Produce(ProduceRequest {
                transactional_id: None,
                topic: "t".into(),
                partition: 0,
                leader_epoch: 1,
                acks: 1,
                records,
            })
        };
        let replicate = |pieces: Vec<Bytes>| {
            Request::Replicate(ReplicateRequest {
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 1,
                leader_id: 1,
                from_offset: 0,
                prev_epoch: -1,
                high_watermark: 0,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: bytes::Bytes::new(),
                records: Records::from_pieces(pieces),
            })
        };
        let pieces: Vec<Bytes> = (0..40).map(|i| bytes(16 + i * 97, i as u8 + 3)).collect();
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.to_vec()).collect();
        assert!(joined.len() >= VECTORED_PAYLOAD_BYTES_MIN);
        let sent = [
            (produce(bytes(300 << 10, 7)), digest(&bytes(300 << 10, 7))),
            (produce(bytes(100, 5)), digest(&bytes(100, 5))),
            (replicate(pieces), digest(&joined)),
            (replicate(vec![bytes(10, 9), bytes(20, 11)]), digest(&[bytes(10, 9), bytes(20, 11)].concat())),
            (produce(bytes(VECTORED_PAYLOAD_BYTES_MIN, 13)), digest(&bytes(VECTORED_PAYLOAD_BYTES_MIN, 13))),
        ];
        let mut answers = Vec::new();
        for (req, _) in &sent {
            answers.push(conn.submit(req.clone()).await.unwrap());
        }
        for ((_, want), answer) in sent.iter().zip(answers) {
            let got = match answer.await.unwrap() {
                Response::Produce(p) => (p.base_offset, p.log_end_offset),
                Response::Replicate(r) => (r.log_end_offset, r.hint_offset),
                other => panic!("unexpected answer {other:?}"),
            };
            assert_eq!(&got, want);
        }
    }

    /// A writer that remembers the largest buffer it was handed.
    struct Largest<S> {
        inner: S,
        largest: usize,
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Largest<S> {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.largest = self.largest.max(buf.len());
            std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Largest<S> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    /// Written from its pieces through a pipe that takes 100 bytes at a time (so every write is
    /// partial), a frame arrives exactly as the codec would have written it, and no buffer
    /// handed to the pipe holds more than one piece (the codec's would hold the whole frame).
    #[tokio::test]
    async fn a_frame_written_from_its_pieces_survives_partial_writes() {
        use tokio::io::AsyncReadExt;
        use tokio_util::codec::Encoder;
        let (client, mut server) = tokio::io::duplex(100);
        let mut framed = Framed::new(Largest { inner: client, largest: 0 }, ClientCodec::new(1 << 20));
        let pieces: Vec<Bytes> = (0..30).map(|i| Bytes::from(vec![i as u8; 1000 + i])).collect();
        let req = Request::Replicate(ReplicateRequest {
            topic: "t".into(),
            partition: 2,
            topic_id: 0,
            leader_epoch: 5,
            leader_id: 1,
            from_offset: 40,
            prev_epoch: 4,
            high_watermark: 39,
            log_start_offset: 0,
            low_watermark: 0,
            producer_state: bytes::Bytes::new(),
            records: Records::from_pieces(pieces),
        });
        assert!(protocol::request_payload(&req).iter().map(Bytes::len).sum::<usize>() >= VECTORED_PAYLOAD_BYTES_MIN);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            server.read_to_end(&mut all).await.unwrap();
            all
        });
        send_request(&mut framed, 7, req.clone()).await.unwrap();
        assert!(framed.get_ref().largest <= 1029, "the payload was copied: {} bytes at once", framed.get_ref().largest);
        drop(framed);
        let mut want = BytesMut::new();
        ClientCodec::new(1 << 20).encode((7, req), &mut want).unwrap();
        assert_eq!(reader.await.unwrap(), want.to_vec());
    }

    /// A server that closes the connection while no answer is due (it restarted, say) is
    /// noticed without a request: the connection reports closed, so callers dial again.
    #[tokio::test]
    async fn a_peer_closing_an_idle_connection_closes_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conn = Connection::connect(&addr).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        assert!(!conn.is_closed());
        drop(socket);
        tokio::time::timeout(Duration::from_secs(10), conn.tx.closed())
            .await
            .expect("the connection noticed its peer closing");
        assert!(conn.is_closed());
        let err = conn.call(Request::Describe).await.unwrap_err();
        assert!(matches!(err, NetError::Closed { .. }), "{err}");
    }
}
