//! The consumer: fetches whole batches from a partition's leader and decodes their records.

use std::time::{Duration, Instant};

use protocol::batch::{decode_records, BatchIter, ConsumedRecord};
use protocol::{ErrorCode, FetchRequest, Request, Response};

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
}

/// Reads partitions.
pub struct Consumer {
    client: Client,
}

impl Consumer {
    /// A consumer bootstrapping from the coordinator at `bootstrap`.
    pub fn new(bootstrap: &str, config: ClientConfig) -> Consumer {
        Consumer { client: Client::new(bootstrap, config) }
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
                    });
                    match self.client.call_broker(&leader.addr, req).await {
                        Ok(Response::Fetch(f)) if f.status.is_ok() => {
                            return decode(offset, f.high_watermark, f.records)
                        }
                        Ok(other) if other.status().code.is_retriable() || other.status().code == ErrorCode::None => {
                            self.client.invalidate(topic);
                            other.status().to_string()
                        }
                        Ok(other) => return Err(ClientError::Refused { what: what(), status: other.status().clone() }),
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
        let mut out = Vec::new();
        let mut offset = from;
        loop {
            let f = self.fetch(topic, partition, offset, FETCH_BYTES_MAX_DEFAULT).await?;
            out.extend(f.records);
            if f.next_offset >= f.high_watermark || f.next_offset == offset {
                return Ok(out);
            }
            offset = f.next_offset;
        }
    }
}

fn decode(offset: i64, high_watermark: i64, bytes: bytes::Bytes) -> Result<Fetched, ClientError> {
    let mut records = Vec::new();
    let mut next_offset = offset;
    for item in BatchIter::new(bytes) {
        let (header, batch) = item.map_err(|e| ClientError::Protocol(format!("fetched batch does not parse: {e}")))?;
        let decoded =
            decode_records(&batch).map_err(|e| ClientError::Protocol(format!("fetched batch is damaged: {e}")))?;
        records.extend(decoded.into_iter().filter(|r| r.offset >= offset));
        next_offset = next_offset.max(header.last_offset() + 1);
    }
    Ok(Fetched { records, next_offset, high_watermark })
}
