//! The epochfence wire protocol.
//!
//! - [`wire`]: bounds-checked primitive fields.
//! - [`messages`]: requests, responses and their pure encode/decode.
//! - [`codec`]: tokio-util codecs adding the length prefix and the frame size limit.
//! - [`kafka`]: Kafka's wire format on the broker side (the kafka-protocol crate): its frame codec.
//! - [`batch`]: Kafka RecordBatch v2: the broker's zero-copy header view, client builders.
//! - [`compression`]: gzip, snappy, lz4 and zstd records, decompressed with a bound.
//! - [`acl`]: Kafka's ACLs and its authorizer's rules.
//! - [`auth`]: cluster-membership proofs (HMAC-SHA256 over a challenge).
//! - [`names`]: validation of topic names and transactional ids.
//!
//! Nothing here touches a socket, a clock or a file.

pub mod acl;
pub mod auth;
pub mod authorize;
pub mod batch;
pub mod codec;
pub mod compression;
mod error;
pub mod kafka;
pub mod messages;
pub mod names;
pub mod principal;
pub mod sasl;
pub mod topic_config;
pub mod wire;

pub use error::{DecodeError, ErrorCode};
pub use messages::*;
