//! Transactions: producer ids and epochs, registering partitions, ending a transaction, and
//! the control markers the coordinator has leaders write.
//!
//! Each request's `encode_body` and `decode_body` write and read the fields after the request
//! header; each response's, the fields after its [`Status`].

use bytes::{BufMut, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Get a producer id and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// Transactional id, or none for an idempotent-only producer.
    pub transactional_id: Option<String>,
    /// Transaction timeout asked for.
    pub transaction_timeout_ms: i32,
    /// The caller's current producer id, -1 if none (KIP-360).
    pub producer_id: i64,
    /// The caller's current epoch, -1 if none (KIP-360).
    pub producer_epoch: i16,
    /// The principal a broker relays the init for (`User:alice`), empty if none: under the
    /// authorizer (where only members are served) an idempotent producer's id is bound to it.
    pub principal: String,
}

impl InitProducerIdRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_nullable_string(self.transactional_id.as_deref());
        b.put_i32(self.transaction_timeout_ms);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_string(&self.principal);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(InitProducerIdRequest {
            transactional_id: r.nullable_string("transactional_id")?,
            transaction_timeout_ms: r.i32("transaction_timeout_ms")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            principal: r.string("principal")?,
        })
    }
}

/// The answer to InitProducerId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    /// Outcome.
    pub status: Status,
    /// Granted producer id (-1 on error).
    pub producer_id: i64,
    /// Granted epoch; on PRODUCER_FENCED the current epoch.
    pub producer_epoch: i16,
}

impl InitProducerIdResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(InitProducerIdResponse {
            status,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
        })
    }
}

/// Leader -> coordinator: may `(producer_id, producer_epoch)` write to this partition?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionRequest {
    /// The transactional id the producer id is asked under (empty: none named). Under the
    /// authorizer the caller needs WRITE on it, and the producer id must be its.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch carried by the batch.
    pub producer_epoch: i16,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Whether the write is part of a transaction (it starts one, with its timeout, if none
    /// is open); otherwise the partition is only recorded so a later bump fences it.
    pub transactional: bool,
    /// Only check, register nothing: the partition must already be part of the producer's open
    /// transaction (INVALID_TXN_STATE otherwise). A leader verifies a transactional write from
    /// a Kafka client this way (transaction version 1: the client adds each partition with
    /// AddPartitionsToTxn first, and the epoch stays the same between its transactions, so a
    /// late write must not open a transaction of its own).
    pub verify_only: bool,
    /// The id of the topic the asking replica belongs to (0: any, as a client that names the
    /// topic asks): a replica of a deleted topic, on a broker that has not dropped it yet, is
    /// refused (UNKNOWN_TOPIC_OR_PARTITION), so no write is verified for a partition the
    /// coordinator no longer writes markers to.
    pub topic_id: u128,
    /// The transaction version the request comes under, recorded with the transaction
    /// (`admin describe`): 1 for a Kafka client's AddPartitionsToTxn (v0-3), 2 for a write that
    /// adds its partition itself (epochfence's own clients, Kafka's Produce v12); 0 tells
    /// nothing (a verification, which registers nothing).
    pub transaction_version: i16,
}

impl AddPartitionRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.transactional_id);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_bool(self.transactional);
        b.put_bool(self.verify_only);
        b.put_u128(self.topic_id);
        b.put_i16(self.transaction_version);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AddPartitionRequest {
            transactional_id: r.string("transactional_id")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            transactional: r.bool("transactional")?,
            verify_only: r.bool("verify_only")?,
            topic_id: r.u128("topic_id")?,
            transaction_version: r.i16("transaction_version")?,
        })
    }
}

/// The coordinator's verdict on an [`AddPartitionRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionResponse {
    /// NONE (registered, durable), PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID,
    /// INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, UNKNOWN_TOPIC_OR_PARTITION,
    /// COORDINATOR_NOT_AVAILABLE.
    pub status: Status,
    /// The producer id's current epoch (-1 if unknown).
    pub current_epoch: i16,
    /// The answering coordinator replica's epoch: a broker verifying a producer ignores an
    /// answer below the highest it has seen (a deposed replica's, from memory).
    pub coordinator_epoch: i32,
}

impl AddPartitionResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i16(self.current_epoch);
        b.put_i32(self.coordinator_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AddPartitionResponse {
            status,
            current_epoch: r.i16("current_epoch")?,
            coordinator_epoch: r.i32("coordinator_epoch")?,
        })
    }
}

/// Commit or abort the current transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// The epoch of the transaction being ended.
    pub producer_epoch: i16,
    /// Commit (true) or abort (false).
    pub commit: bool,
    /// Bump the epoch with the end (epochfence's own clients, KIP-890's transaction version 2:
    /// a delayed EndTxn can then never end a later transaction). Without, the transaction ends
    /// at the producer's current epoch and the next one runs at the same epoch (transaction
    /// version 1, what Kafka clients speak: the Kafka listener relays their EndTxn so).
    pub bump_epoch: bool,
}

impl EndTxnRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.transactional_id);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_bool(self.commit);
        b.put_bool(self.bump_epoch);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(EndTxnRequest {
            transactional_id: r.string("transactional_id")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            commit: r.bool("commit")?,
            bump_epoch: r.bool("bump_epoch")?,
        })
    }
}

/// The answer to EndTxn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnResponse {
    /// Outcome.
    pub status: Status,
    /// The producer id to continue with.
    pub producer_id: i64,
    /// The epoch to continue with: ending a transaction with `bump_epoch` bumps it (KIP-890),
    /// so a delayed EndTxn of this transaction can never end a later one. On PRODUCER_FENCED,
    /// the current epoch.
    pub producer_epoch: i16,
}

impl EndTxnResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(EndTxnResponse { status, producer_id: r.i64("producer_id")?, producer_epoch: r.i16("producer_epoch")? })
    }
}

/// Coordinator -> leader: write a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteMarkerRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Producer id.
    pub producer_id: i64,
    /// Epoch the marker carries; the partition fences every older epoch of the producer id.
    pub producer_epoch: i16,
    /// Which end of a transaction (or fence) of the producer id this marker is, counted by the
    /// coordinator (-1: none, a marker from before they were counted). Several transactions
    /// can end at one epoch (transaction version 1), so the epoch alone does not tell a retried
    /// marker from the next transaction's; the broker stores it as the control batch's base
    /// sequence.
    pub marker_sequence: i32,
    /// Commit (true) or abort (false).
    pub commit: bool,
    /// The partition's leader epoch as the coordinator knows it.
    pub leader_epoch: i32,
    /// The coordinator epoch of the replica that writes it (the control record's
    /// `coordinator_epoch`): a broker refuses one lower than the highest it has seen.
    pub coordinator_epoch: i32,
}

impl WriteMarkerRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_i64(self.producer_id);
        b.put_i16(self.producer_epoch);
        b.put_i32(self.marker_sequence);
        b.put_bool(self.commit);
        b.put_i32(self.leader_epoch);
        b.put_i32(self.coordinator_epoch);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(WriteMarkerRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            marker_sequence: r.i32("marker_sequence")?,
            commit: r.bool("commit")?,
            leader_epoch: r.i32("leader_epoch")?,
            coordinator_epoch: r.i32("coordinator_epoch")?,
        })
    }
}

/// The answer to a marker write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteMarkerResponse {
    /// Outcome.
    pub status: Status,
    /// Offset of the marker (-1 on error).
    pub offset: i64,
    /// The epoch the partition holds for the producer id after the request.
    pub current_producer_epoch: i16,
}

impl WriteMarkerResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.offset);
        b.put_i16(self.current_producer_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(WriteMarkerResponse {
            status,
            offset: r.i64("offset")?,
            current_producer_epoch: r.i16("current_producer_epoch")?,
        })
    }
}
