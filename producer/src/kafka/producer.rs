//! A Kafka-protocol producer, idempotent or transactional, following the rules Kafka clients
//! follow: InitProducerId at the transaction coordinator (any broker for an idempotent one);
//! under transaction version 1, AddPartitionsToTxn before a transaction's first write to a
//! partition, EndTxn without an epoch bump, and sequences that go on across transactions;
//! under version 2 (KIP-890, when the coordinator finalizes it, as Java clients 4.0+ do), no
//! AddPartitionsToTxn (Produce v12 adds the partition), and an EndTxn v5 that answers the
//! bumped epoch (or a new producer id), with which the next transaction starts its sequences
//! over.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, InitProducerIdRequest, ProduceRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use protocol::{ErrorCode, Status};

use super::{KafkaClient, KafkaConnection, KafkaError};
use crate::error::ClientError;
use crate::producer::{ProducerConfig, RecordMetadata};
use crate::session::Session;

const PRODUCE_VERSIONS: (i16, i16) = (3, 10);
/// Under transaction version 2: v12 adds a transactional write's partition to its transaction.
const PRODUCE_VERSIONS_TV2: (i16, i16) = (12, 12);
const INIT_PRODUCER_ID_VERSIONS: (i16, i16) = (0, 4);
const ADD_PARTITIONS_VERSIONS: (i16, i16) = (0, 3);
const END_TXN_VERSIONS: (i16, i16) = (0, 3);
/// Under transaction version 2: v5 bumps the epoch and answers it.
const END_TXN_VERSIONS_TV2: (i16, i16) = (5, 5);

/// Kafka's OPERATION_NOT_ATTEMPTED (a partition of an AddPartitionsToTxn not added because
/// another one failed).
const OPERATION_NOT_ATTEMPTED: i16 = 55;
/// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE.
const COORDINATOR_MOVED: [i16; 3] = [16, 14, 15];

/// A Kafka-protocol producer. Dropping it is fine; a new instance with the same transactional
/// id fences this one.
pub struct KafkaProducer {
    client: KafkaClient,
    config: ProducerConfig,
    /// Producer id, epoch, sequences and the open transaction (its partitions).
    session: Session,
    /// Whether a transaction's partitions are added with AddPartitionsToTxn before its first
    /// write (as every Kafka client does). Off only to test a broker's own fence.
    register_partitions: bool,
    /// The transaction version the open (or next) transaction runs under: 2 when the
    /// coordinator finalized it, else 1 (decided at init and after each end, as Java's client
    /// does, so a transaction ends under the version it began with).
    transaction_version: i16,
    /// Use at most this transaction version (2: whatever the coordinator offers).
    transaction_version_max: i16,
    /// What the coordinator offered when last asked (1 or 2).
    transaction_version_offered: i16,
}

/// Whether a Kafka error code is worth retrying.
fn retriable(code: i16) -> bool {
    ErrorCode::from_code(code).is_retriable() || COORDINATOR_MOVED.contains(&code) || code == OPERATION_NOT_ATTEMPTED
}

/// Whether a code says this producer's epoch is over.
fn fenced_code(code: i16) -> bool {
    code == ErrorCode::InvalidProducerEpoch.code() || code == ErrorCode::ProducerFenced.code()
}

impl KafkaProducer {
    /// Connect to the brokers at `bootstrap` (Kafka addresses, comma separated) and get a
    /// producer id and epoch: for a known transactional id this fences every earlier instance.
    pub async fn init(bootstrap: &str, config: ProducerConfig) -> Result<KafkaProducer, ClientError> {
        let client = KafkaClient::new(bootstrap, config.client.clone());
        let mut p = KafkaProducer {
            client,
            config,
            session: Session::new(-1, -1),
            register_partitions: true,
            transaction_version: 1,
            transaction_version_max: 2,
            transaction_version_offered: 1,
        };
        p.init_producer_id(None).await?;
        Ok(p)
    }

    /// InitProducerId; with `current`, KIP-360's bump by the holder of (producer id, epoch).
    async fn init_producer_id(&mut self, current: Option<(i64, i16)>) -> Result<(), ClientError> {
        let tid = self.config.transactional_id.clone();
        let (pid, epoch) = current.unwrap_or((-1, -1));
        let req = InitProducerIdRequest::default()
            .with_transactional_id(tid.clone().map(|t| TransactionalId(StrBytes::from_string(t))))
            .with_transaction_timeout_ms(self.config.transaction_timeout_ms)
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch);
        let deadline = self.deadline();
        let mut attempt = 0;
        loop {
            let conn = self.coordinator().await;
            let last = match conn {
                Ok(conn) => {
                    let version = conn.version(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSIONS)?;
                    // KIP-360's producer id and epoch came with v3.
                    if current.is_some() && version < 3 {
                        return Err(ClientError::Protocol(format!(
                            "{} serves InitProducerId only below v3: it cannot bump this producer's epoch",
                            conn.addr()
                        )));
                    }
                    match conn.call(&req, version).await {
                        Ok(r) if r.error_code == 0 => {
                            self.session.granted(r.producer_id.0, r.producer_epoch);
                            self.decide_transaction_version(&conn);
                            return Ok(());
                        }
                        Ok(r) if fenced_code(r.error_code) => {
                            return Err(self.fenced(-1, "InitProducerId", r.error_code, String::new()))
                        }
                        Ok(r) if retriable(r.error_code) => {
                            self.moved(r.error_code);
                            KafkaError::Refused {
                                what: "InitProducerId".into(),
                                code: r.error_code,
                                message: String::new(),
                            }
                            .to_string()
                        }
                        Ok(r) => {
                            return Err(KafkaError::Refused {
                                what: "InitProducerId".into(),
                                code: r.error_code,
                                message: String::new(),
                            }
                            .into())
                        }
                        Err(e) => self.connection_failed(&conn, e)?,
                    }
                }
                // A login the broker refused is refused again: no retry.
                Err(e) if super::login_refused(&e) => return Err(e),
                Err(e) => e.to_string(),
            };
            attempt = self.pause("InitProducerId", deadline, attempt, last).await?;
        }
    }

    /// The transaction coordinator (any broker for an idempotent producer).
    async fn coordinator(&mut self) -> Result<KafkaConnection, ClientError> {
        match self.config.transactional_id.clone() {
            Some(tid) => self.client.transaction_coordinator(&tid).await,
            None => Ok(self.client.any().await?),
        }
    }

    /// A coordinator error that means it moved or is not there yet: find it again.
    fn moved(&mut self, code: i16) {
        if COORDINATOR_MOVED.contains(&code) {
            if let Some(tid) = &self.config.transactional_id {
                self.client.forget_coordinator(tid);
            }
        }
    }

    /// A call's connection failed: forget it, and return what to report if retries run out.
    fn connection_failed(&mut self, conn: &KafkaConnection, e: KafkaError) -> Result<String, ClientError> {
        if !e.is_retriable() {
            return Err(e.into());
        }
        self.client.forget(conn.addr());
        if let Some(tid) = self.config.transactional_id.clone() {
            self.client.forget_coordinator(&tid);
        }
        Ok(e.to_string())
    }

    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.config.delivery_timeout_ms)
    }

    /// Wait before retry `attempt`, or give up at `deadline`.
    async fn pause(&self, what: &str, deadline: Instant, attempt: u32, last_error: String) -> Result<u32, ClientError> {
        let pause = self.client.backoff(attempt);
        if Instant::now() + pause > deadline {
            return Err(ClientError::Timeout {
                what: what.to_string(),
                timeout_ms: self.config.delivery_timeout_ms,
                last_error,
            });
        }
        tracing::debug!(what, %last_error, "retrying");
        tokio::time::sleep(pause).await;
        Ok(attempt + 1)
    }

    fn fenced(&self, current_epoch: i16, what: &str, code: i16, message: String) -> ClientError {
        let detail = KafkaError::Refused { what: what.to_string(), code, message }.to_string();
        ClientError::Fenced {
            transactional_id: self.config.transactional_id.clone(),
            producer_id: self.session.producer_id,
            own_epoch: self.session.epoch,
            current_epoch,
            detail,
        }
    }

    /// Add each transaction's partitions to it with AddPartitionsToTxn before its first write
    /// there (the default, as every Kafka client does). Turned off, a write goes to the
    /// partition unannounced, as a buggy client's or a zombie's would: only for testing that the
    /// broker refuses it by itself.
    pub fn set_register_partitions(&mut self, on: bool) {
        self.register_partitions = on;
    }

    /// Use transaction version 1 even where the coordinator offers 2 (as librdkafka and
    /// kafka-python do), or 2 again: for tests of mixed versions and of what version 2
    /// prevents. Takes effect from the next transaction on (an open one ends under the version
    /// it began with).
    pub fn set_transaction_version_max(&mut self, max: i16) {
        self.transaction_version_max = max;
        if self.session.txn.is_none() {
            self.transaction_version = self.transaction_version_offered.min(max).max(1);
        }
    }

    /// The transaction version the open (or next) transaction runs under (1 or 2).
    pub fn transaction_version(&self) -> i16 {
        self.transaction_version
    }

    /// The version the next transaction runs under, from what the coordinator connection
    /// `conn` finalized (and offers: Produce v12 and EndTxn v5 come with version 2).
    fn decide_transaction_version(&mut self, conn: &KafkaConnection) {
        let offered = conn.transaction_version() >= 2 && conn.version(ApiKey::EndTxn, END_TXN_VERSIONS_TV2).is_ok();
        self.transaction_version_offered = if offered { 2 } else { 1 };
        self.transaction_version = self.transaction_version_offered.min(self.transaction_version_max).max(1);
    }

    /// Give the next batch to `topic-partition` the sequence `sequence`, as a retry of a batch
    /// whose answer was lost would carry: only for testing a broker's duplicate detection.
    pub fn set_next_sequence(&mut self, topic: &str, partition: i32, sequence: i32) {
        self.session.sequences.insert((topic.to_string(), partition), sequence);
    }

    /// Start a transaction.
    pub fn begin(&mut self) -> Result<(), ClientError> {
        self.session.begin(self.config.transactional_id.is_some())
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.session.txn.is_some()
    }

    /// Why the open transaction can only be aborted, if it can.
    pub fn transaction_failed(&self) -> Option<&str> {
        self.session.txn_failed.as_deref()
    }

    /// Commit the open transaction (EndTxn; under transaction version 1 the epoch stays, under
    /// 2 it is bumped).
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        self.session.refuse_if_abortable()?;
        self.end(true).await
    }

    /// Abort the open transaction. If a send of it gave up not knowing whether its batch was
    /// written, the epoch is bumped afterwards (KIP-360), so its sequences start over.
    pub async fn abort(&mut self) -> Result<(), ClientError> {
        self.end(false).await?;
        if self.session.poisoned.is_some() {
            self.init_producer_id(Some((self.session.producer_id, self.session.epoch))).await?;
        }
        Ok(())
    }

    async fn end(&mut self, commit: bool) -> Result<(), ClientError> {
        let Some(tid) = self.config.transactional_id.clone() else {
            return Err(ClientError::Protocol("transactions need a transactional id".into()));
        };
        let Some(partitions) = self.session.txn.clone() else {
            return Err(ClientError::Protocol("no transaction is open".into()));
        };
        let what = if commit { "commit" } else { "abort" };
        if partitions.is_empty() && self.register_partitions {
            // Nothing was added to it: Kafka clients send no EndTxn then.
            self.session.ended();
            return Ok(());
        }
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(tid)))
            .with_producer_id(self.session.producer_id.into())
            .with_producer_epoch(self.session.epoch)
            .with_committed(commit);
        let versions = if self.transaction_version >= 2 { END_TXN_VERSIONS_TV2 } else { END_TXN_VERSIONS };
        let deadline = self.deadline();
        let mut attempt = 0;
        loop {
            let last = match self.coordinator().await {
                Ok(conn) => {
                    let version = conn.version(ApiKey::EndTxn, versions)?;
                    match conn.call(&req, version).await {
                        Ok(r) if r.error_code == 0 => {
                            self.session.ended();
                            if version >= 5 && r.producer_id.0 >= 0 {
                                // Bumped (or a new producer id at exhaustion): the next
                                // transaction writes under it, its sequences from 0.
                                self.session.granted(r.producer_id.0, r.producer_epoch);
                            }
                            self.decide_transaction_version(&conn);
                            return Ok(());
                        }
                        Ok(r) if fenced_code(r.error_code) => {
                            return Err(self.fenced(-1, what, r.error_code, String::new()))
                        }
                        Ok(r) if retriable(r.error_code) => {
                            self.moved(r.error_code);
                            KafkaError::Refused { what: what.into(), code: r.error_code, message: String::new() }
                                .to_string()
                        }
                        Ok(r) => {
                            return Err(KafkaError::Refused {
                                what: what.into(),
                                code: r.error_code,
                                message: String::new(),
                            }
                            .into())
                        }
                        Err(e) => self.connection_failed(&conn, e)?,
                    }
                }
                Err(e) => e.to_string(),
            };
            attempt = self.pause(what, deadline, attempt, last).await?;
        }
    }

    /// Add a partition to the open transaction before its first write there.
    async fn add_to_txn(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        let key = (topic.to_string(), partition);
        if !self.register_partitions || self.transaction_version >= 2 {
            // Under transaction version 2 the write itself adds the partition (Produce v12).
            if let Some(t) = self.session.txn.as_mut() {
                t.insert(key);
            }
            return Ok(());
        }
        if self.session.txn.as_ref().is_none_or(|t| t.contains(&key)) {
            return Ok(());
        }
        let tid = self.config.transactional_id.clone().unwrap_or_default();
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(tid)))
            .with_v3_and_below_producer_id(self.session.producer_id.into())
            .with_v3_and_below_producer_epoch(self.session.epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![partition])]);
        let what = format!("AddPartitionsToTxn {topic}-{partition}");
        let deadline = self.deadline();
        let mut attempt = 0;
        loop {
            let last = match self.coordinator().await {
                Ok(conn) => {
                    let version = conn.version(ApiKey::AddPartitionsToTxn, ADD_PARTITIONS_VERSIONS)?;
                    match conn.call(&req, version).await {
                        Ok(r) => {
                            let code = r
                                .results_by_topic_v3_and_below
                                .iter()
                                .flat_map(|t| &t.results_by_partition)
                                .map(|p| p.partition_error_code)
                                .find(|c| *c != 0)
                                .unwrap_or(0);
                            match code {
                                0 => {
                                    if let Some(t) = self.session.txn.as_mut() {
                                        t.insert(key);
                                    }
                                    return Ok(());
                                }
                                c if fenced_code(c) => return Err(self.fenced(-1, &what, c, String::new())),
                                c if retriable(c) => {
                                    self.moved(c);
                                    KafkaError::Refused { what: what.clone(), code: c, message: String::new() }
                                        .to_string()
                                }
                                c => return Err(KafkaError::Refused { what, code: c, message: String::new() }.into()),
                            }
                        }
                        Err(e) => self.connection_failed(&conn, e)?,
                    }
                }
                Err(e) => e.to_string(),
            };
            attempt = self.pause(&what, deadline, attempt, last).await?;
        }
    }

    /// The producer id.
    pub fn producer_id(&self) -> i64 {
        self.session.producer_id
    }

    /// The epoch.
    pub fn epoch(&self) -> i16 {
        self.session.epoch
    }

    /// The transactional id, if any.
    pub fn transactional_id(&self) -> Option<&str> {
        self.config.transactional_id.as_deref()
    }

    /// How many partitions `topic` has (created by the broker's defaults if it does not exist
    /// and the broker auto-creates).
    pub async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        self.client.partition_count(topic).await
    }

    /// Send one record and wait for its acknowledgement.
    pub async fn send(&mut self, topic: &str, partition: i32, value: Bytes) -> Result<RecordMetadata, ClientError> {
        self.send_batch(topic, partition, &[value]).await
    }

    /// Send `values` as one batch and wait for its acknowledgement, retrying retriable
    /// failures with the same batch (same sequence) until the delivery timeout. Inside a
    /// transaction, a failed send (other than a fence) leaves the transaction abortable only.
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
        self.session
            .refuse_if_poisoned("abort the transaction (which bumps the epoch) or initialise a new producer")?;
        self.add_to_txn(topic, partition).await?;
        let (seq, batch) = self.session.next_batch(topic, partition, values);
        let acks: i16 = self.config.acks.into();
        let req = ProduceRequest::default()
            .with_transactional_id(
                self.config.transactional_id.clone().map(|t| TransactionalId(StrBytes::from_string(t))),
            )
            .with_acks(acks)
            .with_timeout_ms(i32::try_from(self.client.config().request_timeout_ms).unwrap_or(i32::MAX))
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch))])]);
        let what = || format!("produce to {topic}-{partition}");
        let tv2 = self.config.transactional_id.is_some() && self.transaction_version >= 2;
        let versions = if tv2 { PRODUCE_VERSIONS_TV2 } else { PRODUCE_VERSIONS };
        let deadline = self.deadline();
        let mut attempt = 0;
        loop {
            let last = match self.client.leader(topic, partition).await {
                Err(ClientError::Refused { status, .. }) if !status.code.is_retriable() => {
                    return Err(ClientError::Refused { what: what(), status })
                }
                Err(e) => e.to_string(),
                Ok((conn, _)) => {
                    let version = conn.version(ApiKey::Produce, versions)?;
                    match conn.call(&req, version).await {
                        Ok(r) => {
                            let p = r.responses.first().and_then(|t| t.partition_responses.first());
                            let Some(p) = p else {
                                return Err(ClientError::Protocol(format!(
                                    "{}: an answer without the partition",
                                    what()
                                )));
                            };
                            let message = p.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
                            match p.error_code {
                                0 => {
                                    self.session.acked(topic, partition, seq, values.len());
                                    return Ok(RecordMetadata {
                                        topic: topic.to_string(),
                                        partition,
                                        base_offset: p.base_offset,
                                        producer_id: self.session.producer_id,
                                        producer_epoch: self.session.epoch,
                                    });
                                }
                                c if fenced_code(c) => return Err(self.fenced(-1, &what(), c, message)),
                                c if retriable(c) => {
                                    self.client.invalidate(topic);
                                    KafkaError::Refused { what: what(), code: c, message }.to_string()
                                }
                                c => {
                                    return Err(ClientError::Refused {
                                        what: what(),
                                        status: Status::new(ErrorCode::from_code(c), message),
                                    })
                                }
                            }
                        }
                        Err(e) => {
                            self.client.invalidate(topic);
                            self.connection_failed(&conn, e)?
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
                    last_error: last,
                });
            }
            tracing::debug!(topic, partition, attempt, %last, "send failed; retrying the same batch");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }
}
