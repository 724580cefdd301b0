//! A Kafka-protocol client (the kafka-protocol crate, client side), for any Kafka-compatible
//! broker: [`KafkaConnection`] (one socket, api versions agreed on), [`KafkaClient`] (brokers,
//! leaders, the transaction coordinator), [`KafkaProducer`] (idempotent and transactional, the
//! rules Kafka clients follow: transaction version 1), [`KafkaConsumer`] and
//! [`KafkaGroupConsumer`] (a consumer-group member, `subscribe()`).
//!
//! `--bootstrap` is any broker's Kafka address here, not epochfence's coordinator.

use thiserror::Error;

mod client;
mod connection;
mod consumer;
mod forge;
mod group;
mod producer;

pub use client::{KafkaClient, PartitionLeader, TOPIC_ALREADY_EXISTS};
pub use connection::{KafkaConnection, CLIENT_ID};
pub use consumer::KafkaConsumer;
pub use forge::forged_write;
pub use group::{assigned_partitions, range_assign, GroupConfig, GroupProtocol, KafkaGroupConsumer};
pub use producer::KafkaProducer;

use crate::error::ClientError;
use protocol::{ErrorCode, Status};

/// What went wrong on a Kafka connection.
#[derive(Debug, Error, Clone)]
pub enum KafkaError {
    /// The connection could not be opened.
    #[error("cannot connect to {addr}: {detail}")]
    Connect {
        /// Address.
        addr: String,
        /// Why not.
        detail: String,
    },
    /// The connection closed (the broker closes it over a request it cannot serve).
    #[error("connection to {addr} closed: {detail}")]
    Closed {
        /// Address.
        addr: String,
        /// Why.
        detail: String,
    },
    /// No answer in time.
    #[error("no answer from {addr} within {timeout_ms} ms")]
    Timeout {
        /// Address.
        addr: String,
        /// The deadline.
        timeout_ms: u64,
    },
    /// The broker serves no version of an api this client speaks.
    #[error("{addr} serves {api} at versions {theirs:?}, this client speaks {ours:?}")]
    Unsupported {
        /// Address.
        addr: String,
        /// The api.
        api: String,
        /// This client's range.
        ours: (i16, i16),
        /// The broker's, if it serves the api at all.
        theirs: Option<(i16, i16)>,
    },
    /// A request could not be encoded.
    #[error("cannot encode {what}: {detail}")]
    Encode {
        /// The request.
        what: String,
        /// Why not.
        detail: String,
    },
    /// An answer could not be decoded.
    #[error("cannot decode {what}: {detail}")]
    Decode {
        /// The answer.
        what: String,
        /// Why not.
        detail: String,
    },
    /// The broker answered with an error code.
    #[error("{what}: error {code} ({}){}", code_name(*.code), if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Refused {
        /// What was asked.
        what: String,
        /// Kafka's error code.
        code: i16,
        /// The broker's message, if it sent one.
        message: String,
    },
}

fn code_name(code: i16) -> &'static str {
    match ErrorCode::from_code(code) {
        ErrorCode::UnknownServerError if code != -1 => "unknown to this client",
        c => c.name(),
    }
}

impl KafkaError {
    /// Whether retrying (on a new connection, after a metadata refresh) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaError::Connect { .. } | KafkaError::Closed { .. } | KafkaError::Timeout { .. } => true,
            KafkaError::Refused { code, .. } => ErrorCode::from_code(*code).is_retriable(),
            _ => false,
        }
    }
}

/// Whether `e` is a SASL login the broker refused (a wrong password, an unoffered mechanism):
/// trying again cannot help.
pub(crate) fn login_refused(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { what, status }
        if status.code == ErrorCode::SaslAuthenticationFailed || what.starts_with("SaslHandshake"))
}

impl From<KafkaError> for ClientError {
    fn from(e: KafkaError) -> ClientError {
        match e {
            KafkaError::Refused { what, code, message } => {
                let known = ErrorCode::from_code(code);
                // A code this client has no name for keeps its number in the message.
                let message = if known == ErrorCode::UnknownServerError && code != -1 {
                    format!("error code {code} {message}").trim_end().to_string()
                } else {
                    message
                };
                ClientError::Refused { what, status: Status::new(known, message) }
            }
            e @ KafkaError::Unsupported { .. } => ClientError::Unsupported(e.to_string()),
            other => ClientError::Protocol(other.to_string()),
        }
    }
}
