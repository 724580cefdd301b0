//! One connection to a Kafka-protocol broker: requests pipelined, answers matched in order (a
//! Kafka broker answers a connection's requests in the order it sent them), api versions
//! agreed on at connect.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::StreamExt;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use net::ClientTls;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

use super::KafkaError;

/// Requests queued on one connection before `call` waits for room.
const QUEUED_REQUESTS_MAX: usize = 1024;
/// Largest response frame accepted, in bytes.
const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The client id sent in every request header.
pub const CLIENT_ID: &str = "epochfence";

/// A frame to write, and where its answer goes (none for a produce request with acks=0).
type Outgoing = (Bytes, Option<(i32, oneshot::Sender<Result<Bytes, KafkaError>>)>);

/// A connection to one broker. Clones share the socket.
#[derive(Clone)]
pub struct KafkaConnection {
    addr: String,
    tx: mpsc::Sender<Outgoing>,
    next_id: Arc<AtomicI32>,
    /// The broker's ApiVersions answer: (key, min, max).
    versions: Arc<Vec<(i16, i16, i16)>>,
    /// The `transaction.version` the broker finalized (KIP-890; 0 if it names none).
    transaction_version: i16,
    /// When to stop using the connection for new calls, if its login has a session lifetime
    /// (KIP-368): at 85% of it, so a new connection, logged in afresh, takes over before the
    /// broker would close this one.
    renew_at: Arc<std::sync::OnceLock<std::time::Instant>>,
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConnection").field("addr", &self.addr).finish()
    }
}

impl KafkaConnection {
    /// Connect to `addr` (over TLS if `tls`) and ask which api versions it serves.
    pub async fn connect(addr: &str, tls: Option<&ClientTls>, timeout: Duration) -> Result<Self, KafkaError> {
        let connect = async {
            let err = |detail: String| KafkaError::Connect { addr: addr.to_string(), detail };
            let stream = TcpStream::connect(addr).await.map_err(|e| err(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            let (tx, rx) = mpsc::channel(QUEUED_REQUESTS_MAX);
            let codec = LengthDelimitedCodec::builder()
                .length_field_type::<u32>()
                .max_frame_length(RESPONSE_BYTES_MAX)
                .new_codec();
            match tls {
                None => {
                    tokio::spawn(run(addr.to_string(), stream, codec, rx));
                }
                Some(tls) => {
                    let stream = tls.handshake(addr, stream).await.map_err(err)?;
                    tokio::spawn(run(addr.to_string(), stream, codec, rx));
                }
            }
            Ok::<_, KafkaError>(tx)
        };
        let tx = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| KafkaError::Timeout { addr: addr.to_string(), timeout_ms: timeout.as_millis() as u64 })??;
        let mut conn = KafkaConnection {
            addr: addr.to_string(),
            tx,
            next_id: Arc::new(AtomicI32::new(0)),
            versions: Arc::default(),
            transaction_version: 0,
            renew_at: Arc::default(),
        };
        let asked = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let answer = tokio::time::timeout(timeout, conn.call(&asked, 3))
            .await
            .map_err(|_| KafkaError::Timeout { addr: addr.to_string(), timeout_ms: timeout.as_millis() as u64 })??;
        if answer.error_code != 0 {
            return Err(KafkaError::Refused {
                what: format!("ApiVersions at {addr}"),
                code: answer.error_code,
                message: String::new(),
            });
        }
        conn.versions = Arc::new(answer.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect());
        conn.transaction_version = answer
            .finalized_features
            .iter()
            .find(|f| f.name.as_str() == "transaction.version")
            .map_or(0, |f| f.max_version_level);
        Ok(conn)
    }

    /// Log in with SASL (SaslHandshake v1, then SaslAuthenticate v1 rounds), as librdkafka
    /// does: PLAIN in one round, SCRAM in two, checking the server's signature (a server that
    /// does not know the credential is refused). The connection is the user's from then on;
    /// if the broker gives the login a session lifetime (KIP-368), this client does not log in
    /// again on the connection but stops using it at 85% of the lifetime ([`Self::renewing`]).
    pub async fn authenticate(&self, login: &crate::client::SaslLogin, timeout: Duration) -> Result<(), KafkaError> {
        use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
        use protocol::sasl::{Mechanism, PlainLogin};
        let addr = self.addr.clone();
        let timed = |_| KafkaError::Timeout { addr: addr.clone(), timeout_ms: timeout.as_millis() as u64 };
        let refused = |what: &str, code: i16, message: Option<&StrBytes>| KafkaError::Refused {
            what: format!("{what} at {}", self.addr),
            code,
            message: message.map(|m| m.to_string()).unwrap_or_default(),
        };
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(login.mechanism.name()));
        let answer = tokio::time::timeout(timeout, self.call(&handshake, 1)).await.map_err(timed)??;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            let offered = format!("the broker offers {offered:?}");
            return Err(refused("SaslHandshake", answer.error_code, Some(&StrBytes::from_string(offered))));
        }
        let round = |bytes: Vec<u8>| async move {
            let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
            let answer = tokio::time::timeout(timeout, self.call(&req, 1)).await.map_err(timed)??;
            if answer.error_code != 0 {
                return Err(refused("SaslAuthenticate", answer.error_code, answer.error_message.as_ref()));
            }
            Ok((answer.auth_bytes, answer.session_lifetime_ms))
        };
        let lifetime_ms = match login.mechanism {
            Mechanism::Plain => round(PlainLogin::encode(&login.user, login.password.as_bytes())).await?.1,
            Mechanism::Scram(m) => {
                let bad = |why: String| refused("SCRAM login", -1, Some(&why.into()));
                net::client::scram_login(m, login, round, bad).await?
            }
        };
        if lifetime_ms > 0 {
            let renew = Duration::from_millis(lifetime_ms.unsigned_abs()).mul_f64(0.85);
            // A lifetime past what the clock can count: never renewed.
            if let Some(at) = std::time::Instant::now().checked_add(renew) {
                let _ = self.renew_at.set(at);
            }
        }
        Ok(())
    }

    /// Whether new calls should go on a new connection: this one's login is near its session's
    /// end (KIP-368; see [`Self::authenticate`]).
    pub fn renewing(&self) -> bool {
        self.renew_at.get().is_some_and(|at| std::time::Instant::now() >= *at)
    }

    /// The address this connection goes to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection has closed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The `transaction.version` feature the broker finalized in its ApiVersions answer
    /// (KIP-890: 2 is an epoch bump per transaction; 0 if it names none).
    pub fn transaction_version(&self) -> i16 {
        self.transaction_version
    }

    /// The broker's ApiVersions answer: (api key, lowest version, highest version) per key.
    pub fn api_versions(&self) -> &[(i16, i16, i16)] {
        &self.versions
    }

    /// The highest version of `key` both this client (`ours`, a range) and the broker serve.
    pub fn version(&self, key: ApiKey, ours: (i16, i16)) -> Result<i16, KafkaError> {
        let theirs = self.versions.iter().find(|(k, ..)| *k == key as i16).map(|(_, min, max)| (*min, *max));
        match theirs {
            Some((min, max)) if min.max(ours.0) <= max.min(ours.1) => Ok(max.min(ours.1)),
            _ => Err(KafkaError::Unsupported { addr: self.addr.clone(), api: format!("{key:?}"), ours, theirs }),
        }
    }

    /// Send `req` at `version` and wait for its answer.
    pub async fn call<R: Request>(&self, req: &R, version: i16) -> Result<R::Response, KafkaError> {
        self.submit(req, version).await?.await
    }

    /// Queue `req` at `version` now and return its answer to await later: requests submitted
    /// one after another go out (and are handled) in that order, however their answers are
    /// awaited (a pipelining producer's batches).
    pub async fn submit<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<impl std::future::Future<Output = Result<R::Response, KafkaError>>, KafkaError> {
        let (frame, id) = self.frame(req, version)?;
        let (done, rx) = oneshot::channel();
        self.tx.send((frame, Some((id, done)))).await.map_err(|_| self.closed("connection task ended"))?;
        let closed = self.closed("connection task ended");
        Ok(async move {
            let mut body = rx.await.map_err(|_| closed)??;
            let decode = |e: anyhow::Error| KafkaError::Decode {
                what: format!("{:?} v{version} answer", api(R::KEY)),
                detail: format!("{e:#}"),
            };
            ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(decode)?;
            R::Response::decode(&mut body, version).map_err(decode)
        })
    }

    /// Send `req` at `version` without waiting for an answer (a produce request with acks=0,
    /// which gets none). Returns once it is queued on the socket.
    pub async fn send_only<R: Request>(&self, req: &R, version: i16) -> Result<(), KafkaError> {
        let (frame, _) = self.frame(req, version)?;
        self.tx.send((frame, None)).await.map_err(|_| self.closed("connection task ended"))
    }

    /// Send a raw frame body (the length prefix is added) and wait for the raw answer frame, or
    /// for the broker to close the connection (`Err(Closed)`): for testing what a broker makes of
    /// malformed requests. `correlation_id` is what the answer must carry.
    pub async fn call_raw(&self, body: Bytes, correlation_id: i32) -> Result<Bytes, KafkaError> {
        let (done, rx) = oneshot::channel();
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_u32(body.len() as u32);
        frame.put_slice(&body);
        let frame = frame.freeze();
        self.tx.send((frame, Some((correlation_id, done)))).await.map_err(|_| self.closed("connection task ended"))?;
        rx.await.map_err(|_| self.closed("connection task ended"))?
    }

    /// The whole frame of `req` (length prefix included), in one buffer sized for it up front,
    /// and its correlation id.
    fn frame<R: Request>(&self, req: &R, version: i16) -> Result<(Bytes, i32), KafkaError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let encode = |e: anyhow::Error| KafkaError::Encode {
            what: format!("{:?} v{version}", api(R::KEY)),
            detail: format!("{e:#}"),
        };
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let header_version = R::header_version(version);
        let size = header.compute_size(header_version).map_err(encode)? + req.compute_size(version).map_err(encode)?;
        let mut b = BytesMut::with_capacity(4 + size);
        b.put_u32(u32::try_from(size).map_err(|_| encode(anyhow::anyhow!("a request over 4 GiB")))?);
        header.encode(&mut b, header_version).map_err(encode)?;
        req.encode(&mut b, version).map_err(encode)?;
        Ok((b.freeze(), id))
    }

    fn closed(&self, detail: &str) -> KafkaError {
        KafkaError::Closed { addr: self.addr.clone(), detail: detail.to_string() }
    }
}

fn api(key: i16) -> ApiKey {
    ApiKey::try_from(key).unwrap_or(ApiKey::ApiVersions)
}

/// Frames written through this much buffer: smaller ones are gathered into one write, larger
/// ones (a produce request's batch) go to the socket as they are, uncopied.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    addr: String,
    stream: S,
    codec: LengthDelimitedCodec,
    mut rx: mpsc::Receiver<Outgoing>,
) {
    let (read, write) = tokio::io::split(stream);
    let mut reader = FramedRead::new(read, codec);
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write);
    let mut pending: VecDeque<(i32, oneshot::Sender<Result<Bytes, KafkaError>>)> = VecDeque::new();
    let mut open = true;
    let failure = loop {
        if !open && pending.is_empty() {
            return;
        }
        tokio::select! {
            out = rx.recv(), if open => {
                let Some(mut out) = out else {
                    open = false;
                    continue;
                };
                // Every frame queued now goes out before one flush.
                let written = loop {
                    let (frame, answer) = out;
                    // Queued before the write: the answer may arrive before the write returns.
                    if let Some(a) = answer {
                        pending.push_back(a);
                    }
                    if let Err(e) = writer.write_all(&frame).await {
                        break Err(e);
                    }
                    match rx.try_recv() {
                        Ok(next) => out = next,
                        Err(_) => break writer.flush().await,
                    }
                };
                if let Err(e) = written {
                    break e.to_string();
                }
            }
            frame = reader.next(), if !pending.is_empty() => {
                let frame = match frame {
                    Some(Ok(f)) => f.freeze(),
                    Some(Err(e)) => break e.to_string(),
                    None => break "closed by the broker".to_string(),
                };
                if frame.len() < 4 {
                    break format!("an answer of {} bytes", frame.len());
                }
                let id = (&frame[..4]).get_i32();
                match pending.pop_front() {
                    Some((want, done)) if want == id => {
                        let _ = done.send(Ok(frame));
                    }
                    Some((want, done)) => {
                        let _ = done.send(Err(KafkaError::Closed {
                            addr: addr.clone(),
                            detail: format!("answer {id} arrived where {want} was due"),
                        }));
                        break "correlation ids out of order".into();
                    }
                    None => break "an answer nobody asked for".into(),
                }
            }
        }
    };
    for (_, done) in pending.drain(..) {
        let _ = done.send(Err(KafkaError::Closed { addr: addr.clone(), detail: failure.clone() }));
    }
}
