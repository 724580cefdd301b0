//! Client errors.

use protocol::Status;
use thiserror::Error;

/// What went wrong for a client call.
#[derive(Debug, Error, Clone)]
pub enum ClientError {
    /// This producer is a zombie: a newer instance with the same transactional id has
    /// initialised (or its producer id was retired). Never retried.
    #[error("{}", fenced_line(.transactional_id.as_deref(), *.own_epoch, *.current_epoch, .detail))]
    Fenced {
        /// The transactional id, if any.
        transactional_id: Option<String>,
        /// Producer id.
        producer_id: i64,
        /// The epoch this producer holds.
        own_epoch: i16,
        /// The epoch that fenced it (-1 if the server did not say).
        current_epoch: i16,
        /// The server's explanation.
        detail: String,
    },
    /// A retriable failure persisted past the delivery timeout.
    #[error("gave up after {timeout_ms} ms ({what}); last error: {last_error}")]
    Timeout {
        /// What was being attempted.
        what: String,
        /// The deadline.
        timeout_ms: u64,
        /// The last error seen.
        last_error: String,
    },
    /// The server refused with a non-retriable error.
    #[error("{what}: {status}")]
    Refused {
        /// What was being attempted.
        what: String,
        /// The server's status.
        status: Status,
    },
    /// An answer of the wrong kind arrived.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker does not serve an api (or any version of it this client speaks).
    #[error("not supported by the broker: {0}")]
    Unsupported(String),
    /// A send inside the open transaction failed, so the transaction holds an unknown subset of
    /// its records: it cannot commit. Abort it; the next transaction starts clean.
    #[error(
        "the transaction cannot commit: an earlier send in it failed ({0}); abort it and run the transaction again"
    )]
    Abortable(String),
}

fn fenced_line(tid: Option<&str>, own: i16, current: i16, detail: &str) -> String {
    // The coordinator's own explanation already names the id, both epochs and the reason.
    let message = detail.split_once(": ").map_or(detail, |(_, m)| m);
    if tid.is_some_and(|t| message.starts_with("fenced: ") && message.contains(&format!("'{t}'"))) {
        return message.to_string();
    }
    let who = match tid {
        Some(t) => format!("transactional id '{t}'"),
        None => "this producer id".to_string(),
    };
    if current >= 0 {
        format!("fenced: {who} is at epoch {current}, this producer holds epoch {own} ({detail})")
    } else {
        format!("fenced: {who} has moved past epoch {own}, which this producer holds ({detail})")
    }
}

impl ClientError {
    /// Whether this is the fenced error.
    pub fn is_fenced(&self) -> bool {
        matches!(self, ClientError::Fenced { .. })
    }
}
