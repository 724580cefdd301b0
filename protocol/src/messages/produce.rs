//! Produce and Fetch: appending a batch to a partition and reading batches back.
//!
//! Each request's `encode_body` and `decode_body` write and read the fields after the request
//! header; each response's, the fields after its [`Status`]. A produce request's records are its
//! payload, which a writer may send from where they are: instead of `encode_body` it has
//! `encode_head` (every field before them, their length included) and `payload`.

use bytes::{BufMut, Bytes, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Append a batch to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client believes the partition is at.
    pub leader_epoch: i32,
    /// [`ACKS_ALL`] (-1): answer once every in-sync replica has the batch; [`ACKS_LEADER`] (1):
    /// once the leader has written it.
    pub acks: i8,
    /// The transactional id a transactional batch is written under (`None` for others): under
    /// the authorizer the writer needs WRITE on it, and the batch's producer id must be its.
    pub transactional_id: Option<String>,
    /// Exactly one RecordBatch v2.
    pub records: Bytes,
}

impl ProduceRequest {
    /// Every field but the records, which follow as the request's payload.
    pub(crate) fn encode_head(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_i32(self.leader_epoch);
        b.put_i8(self.acks);
        b.put_nullable_string(self.transactional_id.as_deref());
        b.put_i32(self.records.len() as i32); // the payload follows
    }

    /// The bytes the body ends with, after [`encode_head`](Self::encode_head): the batch.
    pub(crate) fn payload(&self) -> &[Bytes] {
        std::slice::from_ref(&self.records)
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ProduceRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            acks: r.i8("acks")?,
            transactional_id: r.nullable_string("transactional_id")?,
            records: r.bytes("records")?,
        })
    }
}

/// Acknowledge once every in-sync replica holds the batch (the high watermark passed it).
pub const ACKS_ALL: i8 = -1;
/// Acknowledge once the leader has written the batch.
pub const ACKS_LEADER: i8 = 1;

/// The answer to a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceResponse {
    /// Outcome.
    pub status: Status,
    /// Offset of the batch's first record (its original offset for a duplicate), -1 on error.
    pub base_offset: i64,
    /// The partition's log end offset after the append.
    pub log_end_offset: i64,
    /// The producer epoch the partition holds for this producer id (-1 if none): on
    /// INVALID_PRODUCER_EPOCH it is the epoch that fenced the caller.
    pub current_producer_epoch: i16,
    /// The partition's leader epoch on this broker (-1 if unknown).
    pub current_leader_epoch: i32,
    /// On a topic whose `message.timestamp.type` is LogAppendTime: the broker's time the batch
    /// was stamped with; -1 otherwise. Written last, and -1 in an answer that ends before it.
    pub log_append_time_ms: i64,
}

impl ProduceResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.base_offset);
        b.put_i64(self.log_end_offset);
        b.put_i16(self.current_producer_epoch);
        b.put_i32(self.current_leader_epoch);
        b.put_i64(self.log_append_time_ms);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ProduceResponse {
            status,
            base_offset: r.i64("base_offset")?,
            log_end_offset: r.i64("log_end_offset")?,
            current_producer_epoch: r.i16("current_producer_epoch")?,
            current_leader_epoch: r.i32("current_leader_epoch")?,
            log_append_time_ms: if r.remaining() >= 8 { r.i64("log_append_time_ms")? } else { -1 },
        })
    }
}

/// Read from one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client believes in, or -1 to skip the check.
    pub leader_epoch: i32,
    /// First offset wanted.
    pub offset: i64,
    /// Upper bound on the bytes returned (at least one whole batch is returned if any).
    pub max_bytes: i32,
    /// [`READ_UNCOMMITTED`] (0): up to the high watermark; [`READ_COMMITTED`] (1): up to the
    /// last stable offset, with the aborted transactions to skip.
    pub isolation: i8,
}

impl FetchRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_i32(self.leader_epoch);
        b.put_i64(self.offset);
        b.put_i32(self.max_bytes);
        b.put_i8(self.isolation);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(FetchRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            offset: r.i64("offset")?,
            max_bytes: r.i32("max_bytes")?,
            isolation: r.i8("isolation")?,
        })
    }
}

/// Read everything up to the high watermark.
pub const READ_UNCOMMITTED: i8 = 0;
/// Read only up to the last stable offset, skipping aborted transactions.
pub const READ_COMMITTED: i8 = 1;

/// An aborted transaction overlapping a fetch: skip `producer_id`'s transactional batches from
/// `first_offset` until its abort marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction on this partition.
    pub first_offset: i64,
}

/// The answer to a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Outcome.
    pub status: Status,
    /// Offset below which every replica in the ISR holds the log.
    pub high_watermark: i64,
    /// Offset below which no transaction is open (at most the high watermark).
    pub last_stable_offset: i64,
    /// The partition's leader epoch on this broker.
    pub current_leader_epoch: i32,
    /// With READ_COMMITTED: the aborted transactions overlapping `[offset, last stable offset)`
    /// (a superset of those overlapping the returned batches).
    pub aborted: Vec<AbortedTxn>,
    /// Whole batches, as stored, starting with the batch that holds `offset`.
    pub records: Bytes,
}

impl FetchResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.high_watermark);
        b.put_i64(self.last_stable_offset);
        b.put_i32(self.current_leader_epoch);
        b.put_i32(self.aborted.len() as i32);
        for a in &self.aborted {
            b.put_i64(a.producer_id);
            b.put_i64(a.first_offset);
        }
        b.put_blob(&self.records);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let high_watermark = r.i64("high_watermark")?;
        let last_stable_offset = r.i64("last_stable_offset")?;
        let current_leader_epoch = r.i32("current_leader_epoch")?;
        let n = r.array_len("aborted", 16)?;
        let mut aborted = Vec::with_capacity(n);
        for _ in 0..n {
            aborted.push(AbortedTxn { producer_id: r.i64("producer_id")?, first_offset: r.i64("first_offset")? });
        }
        Ok(FetchResponse {
            status,
            high_watermark,
            last_stable_offset,
            current_leader_epoch,
            aborted,
            records: r.bytes("records")?,
        })
    }
}
