//! The consumer: fetches whole batches from a partition's leader and decodes their records.

use std::time::{Duration, Instant};

use std::collections::HashSet;

use protocol::batch::{decode_records, marker_kind, BatchIter, ConsumedRecord, MarkerKind};
use protocol::{AbortedTxn, ErrorCode, FetchRequest, Request, Response, READ_COMMITTED, READ_UNCOMMITTED};

use crate::client::{Client, ClientConfig};
use crate::error::ClientError;

/// Default upper bound on the bytes of one fetch.
pub const FETCH_BYTES_MAX_DEFAULT: i32 = 1024 * 1024;

/// The records of one fetch.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Data records at or after the requested offset (control batches are skipped).
    pub records: Vec<ConsumedRecord>,
    /// The offset to fetch from next.
    pub next_offset: i64,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// Where this consumer's reading stops: the last stable offset (read_committed) or the
    /// high watermark (read_uncommitted).
    pub readable_end: i64,
}

/// Reads partitions.
pub struct Consumer {
    client: Client,
    isolation: i8,
}

impl Consumer {
    /// A read_uncommitted consumer bootstrapping from the coordinator at `bootstrap`.
    pub fn new(bootstrap: &str, config: ClientConfig) -> Consumer {
        Consumer { client: Client::new(bootstrap, config), isolation: READ_UNCOMMITTED }
    }

    /// A read_committed consumer: it stops at the last stable offset and skips aborted
    /// transactions.
    pub fn read_committed(bootstrap: &str, config: ClientConfig) -> Consumer {
        Consumer { client: Client::new(bootstrap, config), isolation: READ_COMMITTED }
    }

    /// Fetch from `offset`, retrying leadership and connection errors until the request timeout.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Fetched, ClientError> {
        let what = || format!("fetch {topic}-{partition} from offset {offset}");
        let deadline = Instant::now() + Duration::from_millis(self.client.config().request_timeout_ms);
        let mut attempt = 0;
        loop {
            let last_error = match self.client.leader_or_refresh(topic, partition).await {
                Err(ClientError::Refused { status, .. }) if !status.code.is_retriable() => {
                    return Err(ClientError::Refused { what: what(), status })
                }
                Err(e) => e.to_string(),
                Ok(leader) => {
                    let req = Request::Fetch(FetchRequest {
                        topic: topic.to_string(),
                        partition,
                        leader_epoch: leader.leader_epoch,
                        offset,
                        max_bytes,
                        isolation: self.isolation,
                    });
                    match self.client.call_broker(&leader.addr, req).await {
                        Ok(Response::Fetch(f)) if f.status.is_ok() => {
                            let end =
                                if self.isolation == READ_COMMITTED { f.last_stable_offset } else { f.high_watermark };
                            return decode(offset, f.high_watermark, end, &f.aborted, f.records);
                        }
                        Ok(other) if other.status().code.is_retriable() || other.status().code == ErrorCode::None => {
                            self.client.invalidate(topic);
                            other.status().to_string()
                        }
                        Ok(other) => return Err(ClientError::Refused { what: what(), status: other.status().clone() }),
                        // A refusal (an authorization one, say) is told at once, not retried.
                        Err(net::NetError::Refused { status, .. }) if !status.code.is_retriable() => {
                            return Err(ClientError::Refused { what: what(), status });
                        }
                        Err(e) => {
                            self.client.invalidate(topic);
                            e.to_string()
                        }
                    }
                }
            };
            let pause = self.client.backoff(attempt);
            if Instant::now() + pause > deadline {
                return Err(ClientError::Timeout {
                    what: what(),
                    timeout_ms: self.client.config().request_timeout_ms,
                    last_error,
                });
            }
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    /// Every record from `from` up to the high watermark at the time of the last fetch.
    pub async fn read_to_end(
        &mut self,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> Result<Vec<ConsumedRecord>, ClientError> {
        read_to_end_with(from, async |offset| self.fetch(topic, partition, offset, FETCH_BYTES_MAX_DEFAULT).await).await
    }
}

/// Fetch from `from` on, one fetch after another, until one reaches where reading stops (the
/// last stable offset read_committed, else the high watermark) or brings nothing new: every
/// record on the way. Both consumers' `read_to_end`.
pub(crate) async fn read_to_end_with(
    from: i64,
    mut fetch: impl AsyncFnMut(i64) -> Result<Fetched, ClientError>,
) -> Result<Vec<ConsumedRecord>, ClientError> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let f = fetch(offset).await?;
        out.extend(f.records);
        if f.next_offset >= f.readable_end || f.next_offset == offset {
            return Ok(out);
        }
        offset = f.next_offset;
    }
}

/// Decode fetched batches: skip control batches, and the transactional batches of aborted
/// transactions (each aborted transaction's producer is skipped from its first offset up to
/// its abort marker, as Kafka consumers do).
pub(crate) fn decode(
    offset: i64,
    high_watermark: i64,
    readable_end: i64,
    aborted: &[AbortedTxn],
    bytes: bytes::Bytes,
) -> Result<Fetched, ClientError> {
    let mut pending: Vec<AbortedTxn> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut skipping: HashSet<i64> = HashSet::new();
    let mut records = Vec::new();
    let mut next_offset = offset;
    for item in BatchIter::new(bytes) {
        let (header, batch) = item.map_err(|e| ClientError::Protocol(format!("fetched batch does not parse: {e}")))?;
        next_offset = next_offset.max(header.last_offset() + 1);
        while pending.last().is_some_and(|a| a.first_offset <= header.base_offset) {
            let a = pending.pop().expect("checked");
            skipping.insert(a.producer_id);
        }
        if header.is_control() {
            if marker_kind(&batch) == Some(MarkerKind::Abort) {
                skipping.remove(&header.producer_id);
            }
            continue;
        }
        if header.is_transactional() && skipping.contains(&header.producer_id) {
            continue;
        }
        let decoded =
            decode_records(&batch).map_err(|e| ClientError::Protocol(format!("fetched batch is damaged: {e}")))?;
        records.extend(decoded.into_iter().filter(|r| r.offset >= offset));
    }
    Ok(Fetched { records, next_offset, high_watermark, readable_end })
}
