//! The tokio shells shared by every epochfence process.
//!
//! - [`server`]: accept loop and per-connection loop: decode, dispatch to a handler, answer in
//!   order, with limits on frame size, in-flight requests, connections and idle time.
//! - [`client`]: a pipelined client connection: many requests in flight on one socket,
//!   answers matched by correlation id; [`Dialer`] adds TLS and the membership proof.
//! - [`tls`]: optional TLS for listeners and diallers (rustls).
//!
//! No rules live here: handlers decide, this crate only moves frames.

pub mod client;
pub mod server;
pub mod tls;

pub use client::{Connection, Dialer, NetError};
pub use server::{serve, Handler, ServerLimits};
pub use tls::{ClientTls, TlsError};
