//! Replication: a leader sends its followers the batches from an offset on, under its leader
//! epoch.
//!
//! A replicate request's records are its payload, which a writer may send from where they are:
//! `encode_head` writes every field before them (their length included), `payload` gives them,
//! and `decode_body` reads the whole body after the request header. The response's
//! `encode_body` and `decode_body` write and read the fields after its [`Status`].

use bytes::{BufMut, Bytes, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Leader -> follower: the batches from `from_offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicateRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The id of the topic the leader's replica belongs to (0: unknown): a follower holding a
    /// replica of another topic under the name (one deleted and created again) refuses, as
    /// Kafka's Fetch v13 carries topic ids.
    pub topic_id: u128,
    /// The sender's leader epoch; a replica that knows a newer one refuses.
    pub leader_epoch: i32,
    /// The sender's broker id.
    pub leader_id: i32,
    /// Offset of the first batch in `records`; the follower's log must continue there.
    pub from_offset: i64,
    /// Leader epoch of the batch holding `from_offset - 1` (-1 when `from_offset` is 0).
    pub prev_epoch: i32,
    /// The leader's high watermark.
    pub high_watermark: i64,
    /// The first offset the leader still holds (above 0 once retention deleted segments). When
    /// `from_offset` equals it, the leader has nothing before it to compare with `prev_epoch`.
    pub log_start_offset: i64,
    /// The log start readers see on the leader (at or above `log_start_offset`, maybe inside
    /// a batch: DeleteRecords moved it). The follower hides the records below it too, as far
    /// as its log agrees with the leader's, on disk before it answers.
    pub low_watermark: i64,
    /// Sent only when `from_offset` is the leader's log start above 0, where a follower may
    /// have to start its log over: the leader's producer state of the producers with nothing at
    /// or after `from_offset` (their epochs, last batches and markers, as a producer-state
    /// snapshot encodes them), so that a follower that starts over knows them when it leads.
    /// Empty otherwise.
    pub producer_state: Bytes,
    /// Whole batches as stored by the leader (may be empty).
    pub records: Records,
}

impl ReplicateRequest {
    /// Every field but the records, which follow as the request's payload.
    pub(crate) fn encode_head(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_u128(self.topic_id);
        b.put_i32(self.leader_epoch);
        b.put_i32(self.leader_id);
        b.put_i64(self.from_offset);
        b.put_i32(self.prev_epoch);
        b.put_i64(self.high_watermark);
        b.put_i64(self.log_start_offset);
        b.put_i64(self.low_watermark);
        b.put_blob(&self.producer_state);
        b.put_i32(self.records.len() as i32); // the payload follows
    }

    /// The bytes the body ends with, after [`encode_head`](Self::encode_head): the batches.
    pub(crate) fn payload(&self) -> &[Bytes] {
        self.records.pieces()
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ReplicateRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            topic_id: r.u128("topic_id")?,
            leader_epoch: r.i32("leader_epoch")?,
            leader_id: r.i32("leader_id")?,
            from_offset: r.i64("from_offset")?,
            prev_epoch: r.i32("prev_epoch")?,
            high_watermark: r.i64("high_watermark")?,
            log_start_offset: r.i64("log_start_offset")?,
            low_watermark: r.i64("low_watermark")?,
            producer_state: r.bytes("producer_state")?,
            records: r.bytes("records")?.into(),
        })
    }
}

/// Record batches as one run of bytes held in one or more pieces: a leader replicates the
/// pieces it appended (each batch's rewritten first 16 bytes, and the rest as the producer
/// sent it) without joining them. On the wire they are one blob, their concatenation, and
/// decoding gives one piece. Equality is of the bytes, however they are cut.
#[derive(Debug, Clone, Default)]
pub struct Records {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Records {
    /// The concatenation of `pieces` (empty ones are dropped).
    pub fn from_pieces(pieces: Vec<Bytes>) -> Records {
        let pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let len = pieces.iter().map(Bytes::len).sum();
        Records { pieces, len }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The bytes in one piece: shared when they are one already (as decoded), else copied once.
    pub fn contiguous(&self) -> Bytes {
        match self.pieces.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = BytesMut::with_capacity(self.len);
                for p in many {
                    all.extend_from_slice(p);
                }
                all.freeze()
            }
        }
    }
}

impl From<Bytes> for Records {
    fn from(b: Bytes) -> Records {
        Records::from_pieces(vec![b])
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.len == other.len && self.pieces.iter().flatten().eq(other.pieces.iter().flatten())
    }
}

impl Eq for Records {}

/// The follower's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicateResponse {
    /// NONE; OFFSET_OUT_OF_RANGE when the logs diverge before `from_offset` (see
    /// `hint_offset`); FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH on an epoch mismatch.
    pub status: Status,
    /// The follower's log end offset after the request.
    pub log_end_offset: i64,
    /// On divergence: the start of the follower's conflicting leader epoch (from its epoch
    /// cache), or its log end when `from_offset` is past it.
    pub hint_offset: i64,
    /// On divergence: the follower's leader epoch at `from_offset - 1`, or -1 when
    /// `from_offset` is past its log end. The leader resends from where that epoch ends in its
    /// own log (OffsetsForLeaderEpoch), so only the divergent suffix is cut.
    pub diverging_epoch: i32,
    /// The follower's leader epoch for the partition.
    pub current_leader_epoch: i32,
    /// The follower's log start offset as readers see it, on its disk (-1: not said; written
    /// last, and read only when present).
    pub log_start_offset: i64,
}

impl ReplicateResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.log_end_offset);
        b.put_i64(self.hint_offset);
        b.put_i32(self.diverging_epoch);
        b.put_i32(self.current_leader_epoch);
        b.put_i64(self.log_start_offset);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ReplicateResponse {
            status,
            log_end_offset: r.i64("log_end_offset")?,
            hint_offset: r.i64("hint_offset")?,
            diverging_epoch: r.i32("diverging_epoch")?,
            current_leader_epoch: r.i32("current_leader_epoch")?,
            log_start_offset: if r.remaining() >= 8 { r.i64("log_start_offset")? } else { -1 },
        })
    }
}
