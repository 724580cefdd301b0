//! The server side: [`serve`] runs an accept loop until `shutdown` resolves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesOrdered;
use futures::{SinkExt, StreamExt};
use protocol::codec::{CodecError, ServerCodec, FRAME_BYTES_MAX_DEFAULT};
use protocol::{ErrorCode, Request, Response, Status};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::Framed;

/// A boxed response future.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Response> + Send + 'static>>;

/// Turns a request into its response; shared by every connection.
pub type Handler = Arc<dyn Fn(Request) -> ResponseFuture + Send + Sync>;

/// Limits of one server; every one has a default and a unit.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Largest request frame, in bytes, checked from the length prefix before allocating.
    pub frame_bytes_max: usize,
    /// Requests one connection may have in flight (pipelined) at once.
    pub inflight_requests_max: usize,
    /// Connections served at once; further ones get an error frame and are closed.
    pub connections_max: usize,
    /// A connection with nothing in flight that sends no complete frame for this long is closed.
    pub idle_ms: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            inflight_requests_max: 1024,
            connections_max: 1024,
            idle_ms: 10 * 60 * 1000,
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
                    match permit {
                        Ok(_permit) => serve_connection(stream, handler, &limits, stop).await,
                        Err(_) => refuse_connection(stream, &limits).await,
                    }
                    tracing::debug!(%peer, "connection closed");
                });
            }
        }
    }
    let _ = stop_tx.send(true);
}

async fn refuse_connection(stream: TcpStream, limits: &ServerLimits) {
    let mut framed = Framed::new(stream, ServerCodec::new(limits.frame_bytes_max));
    let status = Status::new(
        ErrorCode::BrokerNotAvailable,
        format!("too many connections: the limit connections_max is {}; retry later", limits.connections_max),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), framed.send((-1, Response::Error(status)))).await;
}

async fn tagged(correlation_id: i32, fut: ResponseFuture) -> (i32, Response) {
    (correlation_id, fut.await)
}

fn error_reply(status: Status) -> ResponseFuture {
    Box::pin(async move { Response::Error(status) })
}

async fn serve_connection(stream: TcpStream, handler: Handler, limits: &ServerLimits, mut stop: watch::Receiver<bool>) {
    let mut framed = Framed::new(stream, ServerCodec::new(limits.frame_bytes_max));
    let mut inflight = FuturesOrdered::new();
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
                        let fut = handler(req);
                        inflight.push_back(tagged(header.correlation_id, fut));
                    }
                    Some(Ok(Err(bad))) => {
                        let correlation_id = bad.header.map_or(-1, |h| h.correlation_id);
                        tracing::info!(error = %bad.error, correlation_id, "undecodable request; answering and closing");
                        let status = Status::new(bad.error.error_code(), format!("{}; closing the connection", bad.error));
                        let fut = error_reply(status);
                        inflight.push_back(tagged(correlation_id, fut));
                        closing = true;
                    }
                    Some(Err(CodecError::FrameTooLarge { len, max })) => {
                        tracing::info!(len, max, "oversized frame; answering and closing");
                        let status = Status::new(
                            ErrorCode::MessageTooLarge,
                            format!("frame of {len} bytes exceeds frame_bytes_max {max}; closing the connection"),
                        );
                        let fut = error_reply(status);
                        inflight.push_back(tagged(-1, fut));
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
