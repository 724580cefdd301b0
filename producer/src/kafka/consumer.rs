//! A Kafka-protocol consumer of single partitions (assign(), no group): Fetch from the leader,
//! read_committed or read_uncommitted, aborted transactions skipped as Kafka consumers skip them.

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use protocol::batch::ConsumedRecord;
use protocol::{AbortedTxn, ErrorCode, Status, READ_COMMITTED, READ_UNCOMMITTED};

use super::{KafkaClient, KafkaError};
use crate::client::ClientConfig;
use crate::consumer::{decode, read_to_end_with, Fetched, FETCH_BYTES_MAX_DEFAULT};
use crate::error::ClientError;

const FETCH_VERSIONS: (i16, i16) = (4, 12);

/// Reads partitions from a Kafka-protocol broker.
pub struct KafkaConsumer {
    client: KafkaClient,
    isolation: i8,
    /// How long a fetch waits at the broker for records, in milliseconds (0: answer at once).
    max_wait_ms: i32,
}

impl KafkaConsumer {
    /// A read_uncommitted consumer bootstrapping from `bootstrap` (Kafka addresses).
    pub fn new(bootstrap: &str, config: ClientConfig) -> KafkaConsumer {
        KafkaConsumer { client: KafkaClient::new(bootstrap, config), isolation: READ_UNCOMMITTED, max_wait_ms: 0 }
    }

    /// A read_committed consumer: it stops at the last stable offset and skips aborted
    /// transactions.
    pub fn read_committed(bootstrap: &str, config: ClientConfig) -> KafkaConsumer {
        KafkaConsumer { isolation: READ_COMMITTED, ..KafkaConsumer::new(bootstrap, config) }
    }

    /// Let each fetch wait at the broker up to `ms` for records (Kafka's `fetch.max.wait.ms`).
    pub fn set_max_wait_ms(&mut self, ms: i32) {
        self.max_wait_ms = ms.max(0);
    }

    /// How many partitions `topic` has.
    pub async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        self.client.partition_count(topic).await
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
        let timeout_ms = self.client.config().request_timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(self.max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_isolation_level(self.isolation)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)])]);
        let mut attempt = 0;
        loop {
            let last = match self.client.leader(topic, partition).await {
                Err(ClientError::Refused { status, .. }) if !status.code.is_retriable() => {
                    return Err(ClientError::Refused { what: what(), status })
                }
                Err(e) => e.to_string(),
                Ok((conn, leader)) => {
                    let version = conn.version(ApiKey::Fetch, FETCH_VERSIONS)?;
                    let mut req = req.clone();
                    if version >= 9 {
                        for t in &mut req.topics {
                            for p in &mut t.partitions {
                                p.current_leader_epoch = leader.leader_epoch;
                            }
                        }
                    }
                    match conn.call(&req, version).await {
                        Ok(r) => {
                            let p = r.responses.into_iter().next().and_then(|t| t.partitions.into_iter().next());
                            let Some(p) = p else {
                                return Err(ClientError::Protocol(format!(
                                    "{}: an answer without the partition",
                                    what()
                                )));
                            };
                            match p.error_code {
                                0 => {
                                    let end = if self.isolation == READ_COMMITTED {
                                        p.last_stable_offset
                                    } else {
                                        p.high_watermark
                                    };
                                    let aborted: Vec<AbortedTxn> = p
                                        .aborted_transactions
                                        .unwrap_or_default()
                                        .iter()
                                        .map(|a| AbortedTxn {
                                            producer_id: a.producer_id.0,
                                            first_offset: a.first_offset,
                                        })
                                        .collect();
                                    return decode(
                                        offset,
                                        p.high_watermark,
                                        end,
                                        &aborted,
                                        p.records.unwrap_or_default(),
                                    );
                                }
                                c if ErrorCode::from_code(c).is_retriable() => {
                                    self.client.invalidate(topic);
                                    KafkaError::Refused { what: what(), code: c, message: String::new() }.to_string()
                                }
                                c => {
                                    return Err(ClientError::Refused {
                                        what: what(),
                                        status: Status::new(ErrorCode::from_code(c), format!("error {c}")),
                                    })
                                }
                            }
                        }
                        Err(e) if e.is_retriable() => {
                            self.client.forget(conn.addr());
                            self.client.invalidate(topic);
                            e.to_string()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            };
            let pause = self.client.backoff(attempt);
            if Instant::now() + pause > deadline {
                return Err(ClientError::Timeout { what: what(), timeout_ms, last_error: last });
            }
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    /// Every record from `from` up to where this consumer's reading stops at the last fetch.
    pub async fn read_to_end(
        &mut self,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> Result<Vec<ConsumedRecord>, ClientError> {
        read_to_end_with(from, async |offset| self.fetch(topic, partition, offset, FETCH_BYTES_MAX_DEFAULT).await).await
    }
}
