//! The tokio shells shared by every epochfence process.
//!
//! - [`server`]: accept loop and per-connection loop: decode, dispatch to a handler, answer in
//!   order, with limits on frame size, in-flight requests, connections and idle time.
//! - [`client`]: a pipelined client connection: many requests in flight on one socket,
//!   answers matched by correlation id.
//!
//! No rules live here: handlers decide, this crate only moves frames.

pub mod client;
pub mod server;

pub use client::{Connection, NetError};
pub use server::{serve, Handler, ServerLimits};
