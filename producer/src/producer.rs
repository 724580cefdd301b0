//! The producer: InitProducerId, then batches stamped with (producer id, epoch, sequence),
//! retried with the same bytes until acknowledged, fenced, or out of time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::{
    AddPartitionRequest, EndTxnRequest, ErrorCode, InitProducerIdRequest, ProduceRequest, Request, Response, Status,
    ACKS_ALL,
};

use crate::client::{Client, ClientConfig};
use crate::error::ClientError;
use crate::session::Session;

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
    /// Producer id, epoch, sequences and the open transaction (its partitions registered with
    /// the coordinator).
    session: Session,
}

fn retriable(code: ErrorCode) -> bool {
    code.is_retriable()
}

/// Send `req` to the coordinator until it answers with a non-retriable status (success or a
/// refusal the caller interprets), retrying connection errors and retriable statuses with
/// backoff until `timeout_ms`.
async fn call_coordinator_retrying(
    client: &mut Client,
    what: &str,
    timeout_ms: u64,
    req: Request,
) -> Result<Response, ClientError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let mut attempt = 0;
    loop {
        let last_error = match client.call_coordinator(req.clone()).await {
            Ok(resp) if !retriable(resp.status().code) => return Ok(resp),
            Ok(resp) => resp.status().to_string(),
            Err(e) if e.is_retriable() => e.to_string(),
            // A refusal (an authorization one, say) keeps its status: its code tells what to do.
            Err(net::NetError::Refused { status, .. }) => {
                return Err(ClientError::Refused { what: what.into(), status })
            }
            Err(e) => return Err(ClientError::Protocol(e.to_string())),
        };
        let pause = client.backoff(attempt);
        if Instant::now() + pause > deadline {
            return Err(ClientError::Timeout { what: what.to_string(), timeout_ms, last_error });
        }
        tracing::debug!(what, %last_error, "coordinator call failed; retrying");
        tokio::time::sleep(pause).await;
        attempt += 1;
    }
}

impl Producer {
    /// Connect to the coordinator at `bootstrap` and get a producer id and epoch. For a known
    /// transactional id this bumps the epoch and fences every earlier instance.
    pub async fn init(bootstrap: &str, config: ProducerConfig) -> Result<Producer, ClientError> {
        let mut client = Client::new(bootstrap, config.client.clone());
        let req = Request::InitProducerId(InitProducerIdRequest {
            transactional_id: config.transactional_id.clone(),
            transaction_timeout_ms: config.transaction_timeout_ms,
            producer_id: -1,
            producer_epoch: -1,
            // Under the authorizer the coordinator binds the producer id to the login's principal.
            principal: config.client.sasl.as_ref().map(|l| l.principal()).unwrap_or_default(),
        });
        match call_coordinator_retrying(&mut client, "InitProducerId", config.delivery_timeout_ms, req).await? {
            Response::InitProducerId(r) if r.status.is_ok() => {
                tracing::info!(transactional_id = ?config.transactional_id, producer_id = r.producer_id, epoch = r.producer_epoch, "initialised");
                Ok(Producer { client, config, session: Session::new(r.producer_id, r.producer_epoch) })
            }
            other => Err(ClientError::Refused { what: "InitProducerId".into(), status: other.status().clone() }),
        }
    }

    /// Begin a transaction: until [`Producer::commit`] or [`Producer::abort`], every batch is
    /// transactional, and read_committed consumers see none of them before the commit.
    pub fn begin(&mut self) -> Result<(), ClientError> {
        self.session.begin(self.config.transactional_id.is_some())
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.session.txn.is_some()
    }

    /// Commit the open transaction. The coordinator writes a commit marker to every partition
    /// it touched and bumps the epoch (KIP-890), which this producer continues with. Refused
    /// with [`ClientError::Abortable`], changing nothing, if a send in the transaction failed.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        self.session.refuse_if_abortable()?;
        self.end(true).await
    }

    /// Abort the open transaction: its records are never shown to read_committed consumers.
    /// It also clears a failed send's state: the abort bumps the epoch, so the next
    /// transaction's sequences start again at 0.
    pub async fn abort(&mut self) -> Result<(), ClientError> {
        self.end(false).await
    }

    /// Why the open transaction can only be aborted, if a send in it failed.
    pub fn transaction_failed(&self) -> Option<&str> {
        self.session.txn_failed.as_deref()
    }

    async fn end(&mut self, commit: bool) -> Result<(), ClientError> {
        let Some(tid) = self.config.transactional_id.clone() else {
            return Err(ClientError::Protocol("transactions need a transactional id".into()));
        };
        if self.session.txn.is_none() {
            return Err(ClientError::Protocol("no transaction is open".into()));
        }
        let req = Request::EndTxn(EndTxnRequest {
            transactional_id: tid,
            producer_id: self.session.producer_id,
            producer_epoch: self.session.epoch,
            commit,
            bump_epoch: true,
        });
        let what = if commit { "commit" } else { "abort" };
        match call_coordinator_retrying(&mut self.client, what, self.config.delivery_timeout_ms, req).await? {
            Response::EndTxn(r) if r.status.is_ok() => {
                self.session.ended();
                if (r.producer_id, r.producer_epoch) != (self.session.producer_id, self.session.epoch) {
                    self.session.granted(r.producer_id, r.producer_epoch);
                }
                Ok(())
            }
            Response::EndTxn(r) if r.status.code == ErrorCode::ProducerFenced => {
                Err(self.fenced(r.producer_epoch, r.status))
            }
            other => Err(ClientError::Refused { what: what.into(), status: other.status().clone() }),
        }
    }

    /// Register a partition with the coordinator before the transaction's first write there.
    async fn add_to_txn(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        let key = (topic.to_string(), partition);
        if self.session.txn.as_ref().is_none_or(|t| t.contains(&key)) {
            return Ok(());
        }
        let req = Request::AddPartition(AddPartitionRequest {
            transactional_id: self.config.transactional_id.clone().unwrap_or_default(),
            producer_id: self.session.producer_id,
            producer_epoch: self.session.epoch,
            topic: topic.to_string(),
            partition,
            transactional: true,
            verify_only: false,
            topic_id: 0,
            // Every EndTxn of this client bumps the epoch: version 2's rules.
            transaction_version: 2,
        });
        match call_coordinator_retrying(&mut self.client, "AddPartitionsToTxn", self.config.delivery_timeout_ms, req)
            .await?
        {
            Response::AddPartition(a) if a.status.is_ok() => {
                if let Some(t) = self.session.txn.as_mut() {
                    t.insert(key);
                }
                Ok(())
            }
            Response::AddPartition(a)
                if matches!(a.status.code, ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch) =>
            {
                Err(self.fenced(a.current_epoch, a.status))
            }
            other => Err(ClientError::Refused {
                what: format!("add {topic}-{partition} to the transaction"),
                status: other.status().clone(),
            }),
        }
    }

    /// The granted producer id.
    pub fn producer_id(&self) -> i64 {
        self.session.producer_id
    }

    /// The granted epoch.
    pub fn epoch(&self) -> i16 {
        self.session.epoch
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
    ///
    /// Inside a transaction, a send that fails (other than by fencing, which ends the producer)
    /// leaves the transaction abortable only: [`Producer::commit`] then refuses.
    pub async fn send_batch(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
    ) -> Result<RecordMetadata, ClientError> {
        self.session.refuse_if_abortable()?;
        let sent = self.send_batch_once(topic, partition, values).await;
        self.session.note_sent(topic, partition, &sent);
        sent
    }

    async fn send_batch_once(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
    ) -> Result<RecordMetadata, ClientError> {
        self.session.refuse_if_poisoned("initialise a new producer (which bumps the epoch)")?;
        self.add_to_txn(topic, partition).await?;
        let (seq, batch) = self.session.next_batch(topic, partition, values);
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
                        transactional_id: self.config.transactional_id.clone(),
                        topic: topic.to_string(),
                        partition,
                        leader_epoch: leader.leader_epoch,
                        acks: self.config.acks,
                        records: batch.clone(),
                    });
                    match self.client.call_broker(&leader.addr, req).await {
                        Ok(Response::Produce(r)) if r.status.is_ok() => {
                            self.session.acked(topic, partition, seq, values.len());
                            return Ok(RecordMetadata {
                                topic: topic.to_string(),
                                partition,
                                base_offset: r.base_offset,
                                producer_id: self.session.producer_id,
                                producer_epoch: self.session.epoch,
                            });
                        }
                        Ok(Response::Produce(r)) => match r.status.code {
                            ErrorCode::InvalidProducerEpoch | ErrorCode::ProducerFenced => {
                                return Err(self
                                    .explain_fence(r.current_producer_epoch, r.status, topic, partition)
                                    .await);
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
                        Err(net::NetError::Refused { status, .. }) if !status.code.is_retriable() => {
                            return Err(ClientError::Refused { what: what(), status });
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
                self.session.poisoned =
                    Some(format!("a batch to {topic}-{partition} may or may not have been written"));
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

    /// A partition refused this producer's epoch. It knows the newer epoch but not why it
    /// exists; the coordinator does (a new instance, or this transaction's timeout), so ask it,
    /// and report its explanation when it has one.
    async fn explain_fence(&mut self, current_epoch: i16, status: Status, topic: &str, partition: i32) -> ClientError {
        if self.config.transactional_id.is_some() {
            let req = Request::AddPartition(AddPartitionRequest {
                transactional_id: self.config.transactional_id.clone().unwrap_or_default(),
                producer_id: self.session.producer_id,
                producer_epoch: self.session.epoch,
                topic: topic.to_string(),
                partition,
                transactional: false,
                verify_only: false,
                topic_id: 0,
                transaction_version: 0,
            });
            if let Ok(Response::AddPartition(a)) = self.client.call_coordinator(req).await {
                if a.status.code == ErrorCode::ProducerFenced {
                    return self.fenced(a.current_epoch, a.status);
                }
            }
        }
        self.fenced(current_epoch, status)
    }

    fn fenced(&self, current_epoch: i16, status: Status) -> ClientError {
        ClientError::Fenced {
            transactional_id: self.config.transactional_id.clone(),
            producer_id: self.session.producer_id,
            own_epoch: self.session.epoch,
            current_epoch,
            detail: status.to_string(),
        }
    }
}
