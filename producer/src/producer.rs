//! The producer: InitProducerId, then batches stamped with (producer id, epoch, sequence),
//! retried with the same bytes until acknowledged, fenced, or out of time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::batch::{build_batch, increment_sequence, ProducerStamp};
use protocol::{ErrorCode, InitProducerIdRequest, ProduceRequest, Request, Response, Status, ACKS_ALL};

use crate::client::{Client, ClientConfig};
use crate::error::ClientError;

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Transactional id; none for an idempotent-only producer (which nothing can fence).
    pub transactional_id: Option<String>,
    /// Transaction timeout sent with InitProducerId, in milliseconds.
    pub transaction_timeout_ms: i32,
    /// How long a send (or the init) keeps retrying retriable failures, in milliseconds.
    pub delivery_timeout_ms: u64,
    /// `protocol::ACKS_ALL` (-1, the default): acknowledged once every in-sync replica has the
    /// batch. `protocol::ACKS_LEADER` (1): once the leader has written it; a failover can then
    /// lose an acknowledged batch.
    pub acks: i8,
    /// Connection settings.
    pub client: ClientConfig,
}

impl ProducerConfig {
    /// Defaults for a producer with this transactional id.
    pub fn transactional(id: impl Into<String>) -> Self {
        ProducerConfig { transactional_id: Some(id.into()), ..Self::idempotent() }
    }

    /// Defaults for an idempotent-only producer.
    pub fn idempotent() -> Self {
        ProducerConfig {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            delivery_timeout_ms: 120_000,
            acks: ACKS_ALL,
            client: ClientConfig::default(),
        }
    }
}

/// Where an acknowledged batch landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// Producer id that wrote it.
    pub producer_id: i64,
    /// Epoch it was written at.
    pub producer_epoch: i16,
}

/// A producer instance. Dropping it is fine; a new instance with the same transactional id
/// fences this one.
pub struct Producer {
    client: Client,
    config: ProducerConfig,
    producer_id: i64,
    epoch: i16,
    sequences: HashMap<(String, i32), i32>,
}

fn retriable(code: ErrorCode) -> bool {
    code.is_retriable()
}

impl Producer {
    /// Connect to the coordinator at `bootstrap` and get a producer id and epoch. For a known
    /// transactional id this bumps the epoch and fences every earlier instance.
    pub async fn init(bootstrap: &str, config: ProducerConfig) -> Result<Producer, ClientError> {
        let mut client = Client::new(bootstrap, config.client.clone());
        let deadline = Instant::now() + Duration::from_millis(config.delivery_timeout_ms);
        let mut attempt = 0;
        loop {
            let req = Request::InitProducerId(InitProducerIdRequest {
                transactional_id: config.transactional_id.clone(),
                transaction_timeout_ms: config.transaction_timeout_ms,
                producer_id: -1,
                producer_epoch: -1,
            });
            let last_error = match client.call_coordinator(req).await {
                Ok(Response::InitProducerId(r)) if r.status.is_ok() => {
                    tracing::info!(transactional_id = ?config.transactional_id, producer_id = r.producer_id, epoch = r.producer_epoch, "initialised");
                    return Ok(Producer {
                        client,
                        config,
                        producer_id: r.producer_id,
                        epoch: r.producer_epoch,
                        sequences: HashMap::new(),
                    });
                }
                Ok(Response::InitProducerId(r)) if retriable(r.status.code) => r.status.to_string(),
                Ok(other) => {
                    return Err(ClientError::Refused { what: "InitProducerId".into(), status: other.status().clone() })
                }
                Err(e) if e.is_retriable() => e.to_string(),
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            };
            let pause = client.backoff(attempt);
            if Instant::now() + pause > deadline {
                return Err(ClientError::Timeout {
                    what: "InitProducerId".into(),
                    timeout_ms: config.delivery_timeout_ms,
                    last_error,
                });
            }
            tracing::debug!(%last_error, "init failed; retrying");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    /// The granted producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The granted epoch.
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> Option<&str> {
        self.config.transactional_id.as_deref()
    }

    /// Partitions of `topic` (created with the coordinator's defaults if it does not exist).
    pub async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        self.client.partition_count(topic).await
    }

    /// Send one record and wait for its acknowledgement.
    pub async fn send(&mut self, topic: &str, partition: i32, value: Bytes) -> Result<RecordMetadata, ClientError> {
        self.send_batch(topic, partition, &[value]).await
    }

    /// Send `values` as one batch and wait for its acknowledgement. Retriable failures are
    /// retried with the same batch (same sequence) until the delivery timeout, so a retry
    /// after a lost answer is recognised as a duplicate and nothing is written twice.
    pub async fn send_batch(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
    ) -> Result<RecordMetadata, ClientError> {
        let key = (topic.to_string(), partition);
        let seq = self.sequences.get(&key).copied().unwrap_or(0);
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let stamp = ProducerStamp { producer_id: self.producer_id, producer_epoch: self.epoch, base_sequence: seq };
        let batch = build_batch(stamp, false, now_ms, values);
        let deadline = Instant::now() + Duration::from_millis(self.config.delivery_timeout_ms);
        let what = || format!("produce to {topic}-{partition}");
        let mut attempt = 0;
        loop {
            let last_error = match self.client.leader_or_refresh(topic, partition).await {
                Err(ClientError::Refused { status, .. }) if !retriable(status.code) => {
                    return Err(ClientError::Refused { what: what(), status })
                }
                Err(e) => e.to_string(),
                Ok(leader) => {
                    let req = Request::Produce(ProduceRequest {
                        topic: topic.to_string(),
                        partition,
                        leader_epoch: leader.leader_epoch,
                        acks: self.config.acks,
                        records: batch.clone(),
                    });
                    match self.client.call_broker(&leader.addr, req).await {
                        Ok(Response::Produce(r)) if r.status.is_ok() => {
                            self.sequences.insert(key, increment_sequence(seq, values.len() as i32));
                            return Ok(RecordMetadata {
                                topic: topic.to_string(),
                                partition,
                                base_offset: r.base_offset,
                                producer_id: self.producer_id,
                                producer_epoch: self.epoch,
                            });
                        }
                        Ok(Response::Produce(r)) => match r.status.code {
                            ErrorCode::InvalidProducerEpoch | ErrorCode::ProducerFenced => {
                                return Err(self.fenced(r.current_producer_epoch, r.status));
                            }
                            code if retriable(code) => {
                                self.client.invalidate(topic);
                                r.status.to_string()
                            }
                            _ => return Err(ClientError::Refused { what: what(), status: r.status }),
                        },
                        Ok(other) => {
                            let status = other.status().clone();
                            if !retriable(status.code) {
                                return Err(ClientError::Refused { what: what(), status });
                            }
                            status.to_string()
                        }
                        Err(e) => {
                            // The broker may be gone; ask the coordinator where the partition is now.
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
                    timeout_ms: self.config.delivery_timeout_ms,
                    last_error,
                });
            }
            tracing::debug!(topic, partition, attempt, %last_error, "send failed; retrying the same batch");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    fn fenced(&self, current_epoch: i16, status: Status) -> ClientError {
        ClientError::Fenced {
            transactional_id: self.config.transactional_id.clone(),
            producer_id: self.producer_id,
            own_epoch: self.epoch,
            current_epoch,
            detail: status.to_string(),
        }
    }
}
