//! The `/metrics` endpoint: a minimal HTTP/1.1 responder for Prometheus scrapes. The text it
//! serves comes from the server's own registry (prometheus-client's encoder, one registry per
//! server); this only frames it. One request per connection, answered and closed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Encodes the server's registry as it is now.
pub type Scrape = Arc<dyn Fn() -> String + Send + Sync>;

/// The content type of what [`Scrape`] returns (prometheus-client encodes OpenMetrics text,
/// which Prometheus reads).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Largest request head read, in bytes; a longer one is answered 431 and closed.
pub const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;

/// A scrape connection that has not sent its request head within this long is closed.
pub const METRICS_REQUEST_MS: u64 = 5_000;

/// Scrape connections served at once; more wait for a slot.
pub const METRICS_CONNECTIONS_MAX: usize = 16;

/// Serve `GET /metrics` on `listener` with what `scrape` returns, until `shutdown` resolves.
pub async fn serve_metrics(listener: TcpListener, scrape: Scrape, shutdown: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(METRICS_CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Ok(slot) = slots.clone().acquire_owned().await else { return };
                let scrape = scrape.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let limit = Duration::from_millis(METRICS_REQUEST_MS);
                    let _ = tokio::time::timeout(limit, answer(stream, &scrape)).await;
                });
            }
        }
    }
}

/// Read one request head and answer it.
async fn answer(mut stream: TcpStream, scrape: &Scrape) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > METRICS_REQUEST_BYTES_MAX {
            break head.len();
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    if end > METRICS_REQUEST_BYTES_MAX {
        return respond(&mut stream, "431 Request Header Fields Too Large", "text/plain", "request head too large\n")
            .await;
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(&mut stream, "200 OK", METRICS_CONTENT_TYPE, &scrape()).await,
        ("GET", _) => {
            respond(&mut stream, "404 Not Found", "text/plain", "not found: the metrics are at /metrics\n").await
        }
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET /metrics is served\n").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn metrics_are_served_at_their_path_and_nothing_else_is() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scrape: Scrape = Arc::new(|| "# EOF\n".to_string());
        tokio::spawn(serve_metrics(listener, scrape, std::future::pending()));
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(METRICS_CONTENT_TYPE) && ok.ends_with("\r\n\r\n# EOF\n"), "{ok}");
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405"));
        let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(METRICS_REQUEST_BYTES_MAX + 10));
        assert!(get(addr, &long).await.starts_with("HTTP/1.1 431"));
    }
}
