//! The tokio shells shared by every epochfence process.
//!
//! - [`server`]: accept loop and per-connection loop: decode, dispatch to a handler, answer in
//!   order, with limits on frame size, in-flight requests, connections and idle time.
//! - [`client`]: a pipelined client connection: many requests in flight on one socket,
//!   answers matched by correlation id; [`Dialer`] adds TLS and the membership proof.
//! - [`coordinators`]: the coordinator replicas a client knows, following the active one.
//! - [`tls`]: optional TLS for listeners and diallers (rustls).
//! - [`metrics`]: the `/metrics` endpoint Prometheus scrapes.
//! - [`progress`]: progress of long runs on a terminal (`sim --seeds`, `bench`).
//!
//! No rules live here: handlers decide, this crate only moves frames.

pub mod client;
pub mod coordinators;
pub mod events;
pub mod metrics;
pub mod progress;
pub mod server;
pub mod tls;

pub use client::{Connection, Dialer, NetError, SaslLogin};
pub use coordinators::Coordinators;
pub use server::{
    serve, serve_grouped, serve_protocol, ClientLogins, Decoded, GroupHandler, Handled, Handler, Handlers, Own, Peer,
    Protocol, ServerLimits, MEMBER_CONNECTIONS_MAX_DEFAULT, RELAY_MEMBER_PREFIX,
};
pub use tls::{ClientTls, TlsError};

/// Read a cluster secret from a file: its bytes as they are (a binary secret keeps all its
/// entropy), less surrounding ASCII whitespace such as a trailing newline.
pub fn read_cluster_secret(path: &std::path::Path) -> Result<protocol::auth::ClusterSecret, String> {
    let raw = std::fs::read(path).map_err(|e| format!("cannot read cluster secret {}: {e}", path.display()))?;
    protocol::auth::ClusterSecret::new(raw.trim_ascii().to_vec()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Log to stderr for a binary: `RUST_LOG` if set, else `default_level` ("info", "warn").
pub fn init_logging(default_level: &str) {
    init_logging_with_events(default_level, None);
}

/// [`init_logging`], and with `events` (a file and the process's name in it) every fencing
/// event also appended to that file as a JSON line ([`events`]), whatever `RUST_LOG` says.
pub fn init_logging_with_events(default_level: &str, events: Option<events::EventsFile>) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours on a terminal only: a log redirected to a file stays plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    tracing_subscriber::registry().with(stderr).with(events.map(events::EventsFile::layer)).init();
}
