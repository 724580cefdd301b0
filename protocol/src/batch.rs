//! Kafka RecordBatch v2: a zero-copy header view for the broker's hot path, and builders and
//! decoders (through the `kafka-protocol` crate) for clients.
//!
//! Layout (big-endian), offsets in bytes:
//!
//! ```text
//!  0 base_offset i64        | 12 partition_leader_epoch i32 | 16 magic i8 (= 2)
//!  8 batch_length i32       | 17 crc u32 (CRC32C of bytes 21..end)
//! 21 attributes i16         | 23 last_offset_delta i32      | 27 base_timestamp i64
//! 35 max_timestamp i64      | 43 producer_id i64            | 51 producer_epoch i16
//! 53 base_sequence i32      | 57 record_count i32           | 61 records...
//! ```
//!
//! The broker rewrites `base_offset` and `partition_leader_epoch`, both outside the CRC, and
//! stores every other byte as it came.

use crate::compression::{decompress, Codec, CompressionError};
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use thiserror::Error;

/// Bytes before the records of a v2 batch.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes of the `base_offset` and `batch_length` fields, which `batch_length` does not count.
pub const BATCH_LOG_OVERHEAD_BYTES: usize = 12;
const CRC_START: usize = 21;
/// The smallest encoded record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
const RECORD_BYTES_MIN: i64 = 7;
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;
const ATTR_COMPRESSION_MASK: i16 = 0x7;

/// What is wrong with a record batch.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a header, or fewer than `batch_length` announces.
    #[error("batch truncated: {have} bytes, needs {need}")]
    Truncated {
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// `batch_length` disagrees with the bytes sent.
    #[error("batch_length field says {claimed} bytes, but {actual} follow it")]
    LengthMismatch {
        /// What the field says.
        claimed: i64,
        /// What is there.
        actual: usize,
    },
    /// Not magic 2.
    #[error("record batch magic {0} is not supported (only v2)")]
    UnsupportedMagic(i8),
    /// CRC32C mismatch.
    #[error("CRC32C mismatch: batch says {stored:#010x}, bytes hash to {computed:#010x}")]
    CrcMismatch {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A count or delta field is out of range.
    #[error("invalid {field}: {value}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// A compression type Kafka does not have (5 to 7).
    #[error("compression type {0} is not one of 1 (gzip), 2 (snappy), 3 (lz4) and 4 (zstd)")]
    Compressed(i16),
    /// The records inside do not decode.
    #[error("records do not decode: {0}")]
    Records(String),
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The fixed header of one v2 record batch, read without copying the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record (rewritten by the broker on append).
    pub base_offset: i64,
    /// Bytes after the `batch_length` field.
    pub batch_length: i32,
    /// Leader epoch under which the batch was appended (stamped by the broker).
    pub partition_leader_epoch: i32,
    /// Stored CRC32C.
    pub crc: u32,
    /// Attribute bits (compression, timestamp type, transactional, control).
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`.
    pub last_offset_delta: i32,
    /// Largest record timestamp in the batch, in ms since the Unix epoch (as the producer set it).
    pub max_timestamp: i64,
    /// Producer id, -1 for a producer without one.
    pub producer_id: i64,
    /// Producer epoch, -1 without a producer id.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 without a producer id.
    pub base_sequence: i32,
    /// Records in the batch.
    pub record_count: i32,
}

impl BatchHeader {
    /// Read and validate the header of exactly one batch occupying all of `b`.
    ///
    /// Checks lengths, magic, counts and compression; the CRC is checked by [`verify_crc`].
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        let h = Self::parse_prefix(b)?;
        let total = h.total_bytes();
        if total != b.len() {
            return Err(BatchError::LengthMismatch {
                claimed: h.batch_length.into(),
                actual: b.len() - BATCH_LOG_OVERHEAD_BYTES,
            });
        }
        Ok(h)
    }

    /// Read the header of the batch that starts `b`; `b` may hold more after it, and must hold
    /// at least the header (the whole batch is checked by the caller through `total_bytes`).
    pub fn parse_prefix(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated { have: b.len(), need: BATCH_HEADER_BYTES });
        }
        let magic = b[16] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let h = BatchHeader {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, 8),
            partition_leader_epoch: be_i32(b, 12),
            crc: u32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        };
        let min_len = (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES) as i32;
        if h.batch_length < min_len {
            return Err(BatchError::InvalidField { field: "batch_length", value: h.batch_length.into() });
        }
        let compression = h.attributes & ATTR_COMPRESSION_MASK;
        if compression != 0 && Codec::from_code(compression).is_none() {
            return Err(BatchError::Compressed(compression));
        }
        // Every record takes at least RECORD_BYTES_MIN bytes: a count the batch cannot hold is a
        // lie, and must not reach a decoder that reserves memory by it (compressed records are
        // counted once decompressed, by `validate_batch`).
        let record_bytes = i64::from(h.batch_length) - i64::from(min_len);
        let fits = compression != 0 || i64::from(h.record_count) * RECORD_BYTES_MIN <= record_bytes;
        if h.record_count < 1 || !fits {
            return Err(BatchError::InvalidField { field: "record_count", value: h.record_count.into() });
        }
        if h.last_offset_delta < h.record_count - 1 {
            return Err(BatchError::InvalidField { field: "last_offset_delta", value: h.last_offset_delta.into() });
        }
        if h.producer_id >= 0 && h.producer_epoch < 0 {
            return Err(BatchError::InvalidField { field: "producer_epoch", value: h.producer_epoch.into() });
        }
        if h.producer_id >= 0 && !h.is_control() && h.base_sequence < 0 {
            return Err(BatchError::InvalidField { field: "base_sequence", value: h.base_sequence.into() });
        }
        Ok(h)
    }

    /// The batch's compression codec, `None` if its records are not compressed.
    pub fn codec(&self) -> Option<Codec> {
        Codec::from_code(self.attributes & ATTR_COMPRESSION_MASK)
    }

    /// Bytes the whole batch occupies, header included.
    pub fn total_bytes(&self) -> usize {
        BATCH_LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    /// Whether this is a control batch (a transaction or fence marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Offset of the last record (saturating: a client's header may carry any base offset
    /// before the leader rewrites it).
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }

    /// Sequence of the last record; sequences wrap from `i32::MAX` to 0, as in Kafka.
    pub fn last_sequence(&self) -> i32 {
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// `seq + delta`, wrapping from `i32::MAX` to 0.
pub fn increment_sequence(seq: i32, delta: i32) -> i32 {
    if seq > i32::MAX - delta {
        delta - (i32::MAX - seq) - 1
    } else {
        seq + delta
    }
}

/// CRC32C as record batches use it (over bytes 21..end of a batch).
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Check the CRC32C of one whole batch.
pub fn verify_crc(b: &[u8], header: &BatchHeader) -> Result<(), BatchError> {
    let computed = crc32c::crc32c(&b[CRC_START..header.total_bytes()]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch { stored: header.crc, computed });
    }
    Ok(())
}

/// Overwrite `base_offset` (outside the CRC).
pub fn set_base_offset(b: &mut [u8], offset: i64) {
    b[0..8].copy_from_slice(&offset.to_be_bytes());
}

/// Overwrite `partition_leader_epoch` (outside the CRC).
pub fn set_partition_leader_epoch(b: &mut [u8], epoch: i32) {
    b[12..16].copy_from_slice(&epoch.to_be_bytes());
}

/// Splits a buffer of concatenated batches; stops at the first incomplete or invalid one.
pub struct BatchIter {
    buf: Bytes,
}

impl BatchIter {
    /// Iterate over the batches in `buf`.
    pub fn new(buf: Bytes) -> Self {
        BatchIter { buf }
    }
}

impl Iterator for BatchIter {
    type Item = Result<(BatchHeader, Bytes), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let header = match BatchHeader::parse_prefix(&self.buf) {
            Ok(h) => h,
            Err(e) => {
                self.buf = Bytes::new();
                return Some(Err(e));
            }
        };
        let total = header.total_bytes();
        if total > self.buf.len() {
            let have = self.buf.len();
            self.buf = Bytes::new();
            return Some(Err(BatchError::Truncated { have, need: total }));
        }
        Some(Ok((header, self.buf.split_to(total))))
    }
}

/// Who writes a batch: the producer id, epoch and first sequence stamped into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    /// Producer id (-1 for none).
    pub producer_id: i64,
    /// Producer epoch (-1 for none).
    pub producer_epoch: i16,
    /// Sequence of the first record (-1 for none).
    pub base_sequence: i32,
}

/// Kind of a control record: the marker that ends (or fences) a producer's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    /// Abort: also what the coordinator writes, at a bumped epoch, to fence an older epoch.
    Abort,
    /// Commit.
    Commit,
}

impl MarkerKind {
    fn control_type(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

fn encode(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::with_capacity(
        BATCH_HEADER_BYTES + records.iter().map(|r| 24 + r.value.as_ref().map_or(0, |v| v.len())).sum::<usize>(),
    );
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options)
        .expect("encoding uncompressed v2 records into memory cannot fail");
    buf.freeze()
}

/// Build one uncompressed v2 batch holding `values`, stamped with `stamp`.
///
/// Panics if `values` is empty (a batch holds at least one record).
pub fn build_batch(stamp: ProducerStamp, transactional: bool, timestamp_ms: i64, values: &[Bytes]) -> Bytes {
    assert!(!values.is_empty(), "a batch holds at least one record");
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: stamp.producer_id,
            producer_epoch: stamp.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Without a producer id the batch's base sequence is -1; the encoder keeps records
            // with offset - sequence constant in one batch, so they count up from it.
            sequence: if stamp.base_sequence < 0 {
                (i as i32).wrapping_sub(1)
            } else {
                increment_sequence(stamp.base_sequence, i as i32)
            },
            timestamp: timestamp_ms,
            key: None,
            value: Some(v.clone()),
            headers: Default::default(),
        })
        .collect();
    encode(&records)
}

/// Build a control batch holding one marker (Kafka's control record layout: key = version i16,
/// type i16; value = version i16, coordinator epoch i32). `sequence` goes in the batch's base
/// sequence: which end of the producer id's transactions it is (-1, as Kafka writes, for none).
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    sequence: i32,
    kind: MarkerKind,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.control_type().to_be_bytes());
    let mut value = BytesMut::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence,
        timestamp: timestamp_ms,
        key: Some(key.freeze()),
        value: Some(value.freeze()),
        headers: Default::default(),
    };
    encode(std::slice::from_ref(&record))
}

/// The marker kind of a control batch; `None` for a data batch or an unreadable control record.
pub fn marker_kind(batch: &Bytes) -> Option<MarkerKind> {
    let h = BatchHeader::parse_prefix(batch).ok()?;
    if !h.is_control() {
        return None;
    }
    let set = RecordBatchDecoder::decode(&mut batch.clone()).ok()?;
    let key = set.records.first()?.key.clone()?;
    if key.len() < 4 {
        return None;
    }
    match i16::from_be_bytes([key[2], key[3]]) {
        0 => Some(MarkerKind::Abort),
        1 => Some(MarkerKind::Commit),
        _ => None,
    }
}

/// One record read back from a batch, with the batch's producer stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Offset in the partition.
    pub offset: i64,
    /// Producer id of the batch.
    pub producer_id: i64,
    /// Producer epoch of the batch.
    pub producer_epoch: i16,
    /// Sequence of this record.
    pub sequence: i32,
    /// Leader epoch under which the batch was appended.
    pub leader_epoch: i32,
    /// Creation timestamp.
    pub timestamp_ms: i64,
    /// The value.
    pub value: Bytes,
}

/// Byte position of the batch's first timestamp, which each record's timestamp delta is added to.
const FIRST_TIMESTAMP_AT: usize = 27;

/// `kafka_protocol`'s unsigned varint: up to `max_bytes` bytes of 7 bits, low first; stops
/// after the last byte allowed whatever its continuation bit (as that decoder does).
fn uvarint(b: &[u8], max_bytes: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let byte = u64::from(*b.get(i)?);
        value |= (byte & 0x7F) << (i * 7);
        if byte < 0x80 {
            return Some((value, i + 1));
        }
    }
    Some((value, max_bytes))
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The record decoder (`kafka_protocol`) adds every record's offset and timestamp deltas to the
/// batch's base offset and first timestamp unchecked, which panics on overflow where overflow
/// checks are on (debug builds, the fuzzers) and wraps elsewhere. Refuse such a batch first.
/// Records that do not parse are left to the decoder, which refuses them with an error.
fn check_record_deltas(first_timestamp: i64, records: &[u8], h: &BatchHeader) -> Result<(), BatchError> {
    // Offset deltas are i32: the base offset must leave room for any of them.
    if h.base_offset.checked_add(i64::from(i32::MIN)).is_none()
        || h.base_offset.checked_add(i64::from(i32::MAX)).is_none()
    {
        return Err(BatchError::InvalidField { field: "base_offset", value: h.base_offset });
    }
    let mut rest = records;
    for _ in 0..h.record_count {
        // Record length (a 32-bit varint), then the record: attributes, timestamp delta, ...
        let Some((len, n)) = uvarint(rest, 5) else { break };
        let Ok(len) = usize::try_from(zigzag(len & 0xFFFF_FFFF) as i32) else { break };
        let Some(record) = rest.get(n..n + len) else { break };
        if let Some((delta, _)) = record.get(1..).and_then(|r| uvarint(r, 10)) {
            let delta = zigzag(delta);
            if first_timestamp.checked_add(delta).is_none() {
                return Err(BatchError::InvalidField { field: "timestamp_delta", value: delta });
            }
        }
        rest = &rest[n + len..];
    }
    Ok(())
}

/// What the records of a client's batch may say about time (Kafka's
/// `log.message.timestamp.after.max.ms` and `.before.max.ms`, for create-time batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampLimits {
    /// The broker's wall clock, in ms since the Unix epoch.
    pub now_ms: i64,
    /// How far ahead of `now_ms` a record's timestamp may be (`None`: any).
    pub after_max_ms: Option<i64>,
    /// How far behind `now_ms` a record's timestamp may be (`None`: any).
    pub before_max_ms: Option<i64>,
}

/// Why a client's batch is refused after its header and CRC passed: its records disagree with
/// the header, or say something about time the broker does not accept.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The records or the header lie (Kafka's INVALID_RECORD).
    #[error("{0}")]
    Invalid(String),
    /// A timestamp is out of range, or the batch claims log-append time (Kafka's INVALID_TIMESTAMP).
    #[error("{0}")]
    Timestamp(String),
    /// Compressed records do not decompress, or to more than the limit.
    #[error(transparent)]
    Compression(#[from] CompressionError),
}

/// Attribute bit 3: the batch's timestamps are the broker's (log-append time), not the
/// producer's.
pub const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;

/// A producer's batch stamped with the broker's clock, for a topic whose
/// `message.timestamp.type` is LogAppendTime (as Kafka's `setMaxTimestamp`): the timestamp-type
/// attribute set, the max timestamp `now_ms`, the CRC recomputed; every other byte as sent.
/// Readers then take `now_ms` as every record's timestamp.
pub fn stamp_log_append_time(batch: &[u8], now_ms: i64) -> Bytes {
    let mut b = batch.to_vec();
    if b.len() < RECORDS_AT {
        return Bytes::from(b);
    }
    let attributes = i16::from_be_bytes([b[ATTRIBUTES_AT], b[ATTRIBUTES_AT + 1]]) | ATTR_LOG_APPEND_TIME;
    b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    b[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c(&b[ATTRIBUTES_AT..]);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// Byte positions in a batch header: its CRC, the attributes the CRC starts at, the max
/// timestamp, and where the records start.
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const MAX_TIMESTAMP_AT: usize = 35;
const RECORDS_AT: usize = BATCH_HEADER_BYTES;

/// The zigzag varint of at most `max_bytes` bytes at `b[at..]`: (value, the position after
/// it); `None` if it runs past `b` or past `max_bytes`. One-byte varints (most record fields)
/// take the first branch.
#[inline(always)]
fn varint_at(b: &[u8], at: usize, max_bytes: usize) -> Option<(i64, usize)> {
    let first = *b.get(at)?;
    if first < 0x80 {
        return Some((zigzag(u64::from(first)), at + 1));
    }
    let mut value = u64::from(first & 0x7F);
    for i in 1..max_bytes {
        let byte = *b.get(at + i)?;
        value |= u64::from(byte & 0x7F) << (i * 7);
        if byte < 0x80 {
            return Some((zigzag(value), at + i + 1));
        }
    }
    None
}

/// Where in a record the validation failed (turned into a message only then).
enum RecordFault {
    Field(&'static str),
    Length(&'static str, i64),
    LeftOver(usize),
    OffsetDelta(i64),
    Timestamp,
}

#[cold]
fn record_fault(i: i32, fault: RecordFault) -> RecordError {
    let what = match fault {
        RecordFault::Field(f) => format!("its {f} does not decode"),
        RecordFault::Length(f, len) => format!("{f} length {len} does not fit the bytes left"),
        RecordFault::LeftOver(n) => format!("{n} bytes left over inside it"),
        RecordFault::OffsetDelta(d) => format!("offset delta {d}, where {i} was due"),
        RecordFault::Timestamp => "its timestamp overflows".into(),
    };
    RecordError::Invalid(format!("record {i}: {what}"))
}

/// Skip a field of `len` bytes at `at` in a record ending at `end` (-1: null, where
/// `nullable`); the position after it.
#[inline(always)]
fn skip_field(at: usize, end: usize, len: i64, nullable: bool, what: &'static str) -> Result<usize, RecordFault> {
    if len == -1 && nullable {
        return Ok(at);
    }
    match usize::try_from(len) {
        Ok(n) if end - at >= n => Ok(at + n),
        _ => Err(RecordFault::Length(what, len)),
    }
}

/// Check record `i`, whose body (after its length) is `b[at..end]`: returns its timestamp delta.
#[inline(always)]
fn check_record(b: &[u8], at: usize, end: usize, i: i32) -> Result<i64, RecordFault> {
    let body = &b[..end];
    // Attributes (unused in v2), then the timestamp and offset deltas.
    let (timestamp_delta, at) = varint_at(body, at + 1, 10).ok_or(RecordFault::Field("timestamp delta"))?;
    let (offset_delta, at) = varint_at(body, at, 5).ok_or(RecordFault::Field("offset delta"))?;
    let (len, at) = varint_at(body, at, 5).ok_or(RecordFault::Field("key length"))?;
    let at = skip_field(at, end, len, true, "key")?;
    let (len, at) = varint_at(body, at, 5).ok_or(RecordFault::Field("value length"))?;
    let at = skip_field(at, end, len, true, "value")?;
    let (headers, mut at) = varint_at(body, at, 5).ok_or(RecordFault::Field("header count"))?;
    if headers < 0 || headers as usize > end - at {
        return Err(RecordFault::Length("header count", headers));
    }
    for _ in 0..headers {
        let (len, next) = varint_at(body, at, 5).ok_or(RecordFault::Field("header key length"))?;
        at = skip_field(next, end, len, false, "header key")?;
        let (len, next) = varint_at(body, at, 5).ok_or(RecordFault::Field("header value length"))?;
        at = skip_field(next, end, len, true, "header value")?;
    }
    if at != end {
        return Err(RecordFault::LeftOver(end - at));
    }
    if offset_delta != i64::from(i) {
        return Err(RecordFault::OffsetDelta(offset_delta));
    }
    Ok(timestamp_delta)
}

/// Check what Kafka's log validator checks of a v2 batch a client produced, beyond its header
/// and CRC: a transactional batch carries a producer id; the header's last offset delta is its
/// record count less one; exactly `record_count` records fill the batch, each whole (its
/// length, key, value and headers within it), record `i` at offset delta `i` (so that one record
/// cannot take 2^31 offsets); the header's max timestamp is the newest record's; and, for a
/// create-time batch, every timestamp is within `limits` (a max timestamp of i64::MAX would
/// freeze time-based retention). `records` are the batch's record bytes (after its 61-byte
/// header; decompressed for a compressed batch) and `first_timestamp` the header's.
pub fn validate_records(
    h: &BatchHeader,
    first_timestamp: i64,
    records: &[u8],
    limits: Option<TimestampLimits>,
) -> Result<(), RecordError> {
    let invalid = |m: String| Err(RecordError::Invalid(m));
    if h.is_transactional() && h.producer_id < 0 {
        return invalid("a transactional batch must carry a producer id (it has -1)".into());
    }
    if h.last_offset_delta != h.record_count - 1 {
        return invalid(format!(
            "the batch says {} records but last offset delta {}: a batch's records take offsets 0..count",
            h.record_count, h.last_offset_delta
        ));
    }
    if h.attributes & ATTR_LOG_APPEND_TIME != 0 {
        return Err(RecordError::Timestamp(
            "the batch claims log-append time; producers send create-time timestamps".into(),
        ));
    }
    let (mut at, mut min_delta, mut max_delta) = (0usize, i64::MAX, i64::MIN);
    for i in 0..h.record_count {
        let (len, body) = varint_at(records, at, 5).ok_or_else(|| record_fault(i, RecordFault::Field("length")))?;
        let end = usize::try_from(len)
            .ok()
            .filter(|l| *l > 0 && records.len() - body >= *l)
            .map(|l| body + l)
            .ok_or_else(|| record_fault(i, RecordFault::Length("record", len)))?;
        let delta = check_record(records, body, end, i).map_err(|f| record_fault(i, f))?;
        min_delta = min_delta.min(delta);
        max_delta = max_delta.max(delta);
        at = end;
    }
    if at != records.len() {
        return invalid(format!("{} bytes after the batch's {} records", records.len() - at, h.record_count));
    }
    let (Some(oldest), Some(newest)) = (first_timestamp.checked_add(min_delta), first_timestamp.checked_add(max_delta))
    else {
        return Err(record_fault(0, RecordFault::Timestamp));
    };
    if h.max_timestamp != newest {
        return invalid(format!("the header's max timestamp {} is not its newest record's {newest}", h.max_timestamp));
    }
    let Some(l) = limits else { return Ok(()) };
    // A timestamp of -1 means none: not checked.
    let ahead = newest.saturating_sub(l.now_ms);
    if let Some(max) = l.after_max_ms.filter(|max| newest >= 0 && ahead > *max) {
        return Err(RecordError::Timestamp(format!(
            "a record's timestamp {newest} is {ahead} ms ahead of the broker's clock; at most {max} ms ahead is \
             accepted (message_timestamp_after_max_ms)"
        )));
    }
    let behind = l.now_ms.saturating_sub(oldest);
    if let Some(max) = l.before_max_ms.filter(|max| oldest >= 0 && behind > *max) {
        return Err(RecordError::Timestamp(format!(
            "a record's timestamp {oldest} is {behind} ms behind the broker's clock; at most {max} ms behind is \
             accepted (message_timestamp_before_max_ms)"
        )));
    }
    Ok(())
}

/// Default bound on what one batch's records may decompress to, in bytes.
pub const DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// [`validate_records`] of batch `b` (whole, header and CRC checked); compressed records are
/// decompressed first, to at most `decompressed_bytes_max` bytes.
pub fn validate_batch(
    b: &[u8],
    h: &BatchHeader,
    limits: Option<TimestampLimits>,
    decompressed_bytes_max: usize,
) -> Result<(), RecordError> {
    let records = &b[BATCH_HEADER_BYTES..h.total_bytes()];
    let first_timestamp = be_i64(b, FIRST_TIMESTAMP_AT);
    let Some(codec) = h.codec() else {
        return validate_records(h, first_timestamp, records, limits);
    };
    let plain = decompress(codec, records, decompressed_bytes_max)?;
    if i64::from(h.record_count) * RECORD_BYTES_MIN > plain.len() as i64 {
        return Err(RecordError::Invalid(format!(
            "the batch says {} records but its {} bytes of {} records cannot hold them",
            h.record_count,
            plain.len(),
            codec.name()
        )));
    }
    validate_records(h, first_timestamp, &plain, limits)
}

/// Decode the data records of one batch (decompressing them, to at most
/// [`DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT`] bytes). Control batches yield no records.
pub fn decode_records(batch: &Bytes) -> Result<Vec<ConsumedRecord>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    verify_crc(batch, &header)?;
    if header.is_control() {
        return Ok(Vec::new());
    }
    let first_timestamp = be_i64(batch, FIRST_TIMESTAMP_AT);
    let records = &batch[BATCH_HEADER_BYTES..header.total_bytes()];
    let plain = match header.codec() {
        None => None,
        Some(codec) => Some(
            decompress(codec, records, DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT)
                .map_err(|e| BatchError::Records(e.to_string()))?,
        ),
    };
    check_record_deltas(first_timestamp, plain.as_deref().unwrap_or(records), &header)?;
    let mut buf = batch.clone();
    // The decoder hands compressed records to this, and reads them from what it returns.
    let decompressed = |given: &mut Bytes, _: Compression| -> anyhow::Result<Bytes> {
        Ok(match &plain {
            Some(p) => Bytes::from(p.clone()),
            None => given.clone(),
        })
    };
    let set = RecordBatchDecoder::decode_with_custom_compression(&mut buf, Some(decompressed))
        .map_err(|e| BatchError::Records(e.to_string()))?;
    Ok(set
        .records
        .into_iter()
        .map(|r| ConsumedRecord {
            offset: r.offset,
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            sequence: r.sequence,
            leader_epoch: header.partition_leader_epoch,
            // LogAppendTime: the broker's clock, in the max timestamp, for every record.
            timestamp_ms: if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
                header.max_timestamp
            } else {
                r.timestamp
            },
            value: r.value.unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp() -> ProducerStamp {
        ProducerStamp { producer_id: 7, producer_epoch: 3, base_sequence: 10 }
    }

    /// `b` with its CRC recomputed (after a field was rewritten to lie).
    fn recrc(mut b: Vec<u8>) -> Bytes {
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    fn check(b: &Bytes, limits: Option<TimestampLimits>) -> Result<(), RecordError> {
        let h = BatchHeader::parse(b).unwrap();
        verify_crc(b, &h).unwrap();
        validate_batch(b, &h, limits, DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT)
    }

    fn two(timestamp: i64) -> Bytes {
        build_batch(stamp(), false, timestamp, &[Bytes::from_static(b"aaaaaaaaaa"), Bytes::from_static(b"bbbbbbbbbb")])
    }

    const NOW: i64 = 1_700_000_000_000;
    const LIMITS: TimestampLimits = TimestampLimits { now_ms: NOW, after_max_ms: Some(3_600_000), before_max_ms: None };

    #[test]
    fn a_batch_without_a_producer_id_holds_all_its_records() {
        let none = ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
        let b = build_batch(none, false, NOW, &[Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
        let h = BatchHeader::parse(&b).expect("one batch");
        assert_eq!((h.record_count, h.base_sequence), (2, -1));
    }

    #[test]
    fn an_honest_batch_passes_validation() {
        assert_eq!(check(&two(NOW), Some(LIMITS)), Ok(()));
        assert_eq!(check(&two(0), Some(LIMITS)), Ok(()), "no lower bound by default");
    }

    /// Kafka's log validator's checks, each on a batch whose CRC is right but whose header or
    /// records lie.
    #[test]
    fn batches_whose_records_disagree_with_their_header_are_invalid() {
        let invalid = |b: &Bytes, what: &str| match check(b, Some(LIMITS)) {
            Err(RecordError::Invalid(m)) => assert!(m.contains(what), "{m}"),
            other => panic!("expected invalid ({what}), got {other:?}"),
        };
        let txn = build_batch(
            ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
            true,
            NOW,
            &[Bytes::from_static(b"x")],
        );
        invalid(&txn, "must carry a producer id");
        // One record claiming 2^31 offsets.
        let mut b = two(NOW).to_vec();
        b[23..27].copy_from_slice(&i32::MAX.to_be_bytes());
        invalid(&recrc(b), "last offset delta");
        // A count of three for two records (and a delta to match).
        let mut b = two(NOW).to_vec();
        b[23..27].copy_from_slice(&2i32.to_be_bytes());
        b[57..61].copy_from_slice(&3i32.to_be_bytes());
        invalid(&recrc(b), "record 2");
        // A count of one for two records: bytes left over.
        let mut b = two(NOW).to_vec();
        b[23..27].copy_from_slice(&0i32.to_be_bytes());
        b[57..61].copy_from_slice(&1i32.to_be_bytes());
        invalid(&recrc(b), "bytes after");
        // The second record's offset delta says 5 (zigzag 10).
        let mut b = two(NOW).to_vec();
        let first_len = (zigzag(u64::from(b[BATCH_HEADER_BYTES])) + 1) as usize;
        let second = BATCH_HEADER_BYTES + first_len;
        assert_eq!(b[second + 3], 2, "record 1's offset delta is zigzag(1)");
        b[second + 3] = 10;
        invalid(&recrc(b), "offset delta 5");
        // A record whose length runs past the batch.
        let mut b = two(NOW).to_vec();
        b[second] = 100;
        invalid(&recrc(b), "does not fit");
        // A max timestamp of i64::MAX over records of now.
        let mut b = two(NOW).to_vec();
        b[35..43].copy_from_slice(&i64::MAX.to_be_bytes());
        invalid(&recrc(b), "max timestamp");
    }

    #[test]
    fn timestamps_too_far_ahead_or_log_append_time_are_refused() {
        let ahead = two(NOW + 2 * 3_600_000);
        assert!(matches!(check(&ahead, Some(LIMITS)), Err(RecordError::Timestamp(m)) if m.contains("ahead")));
        assert_eq!(check(&ahead, None), Ok(()), "without limits, any timestamp");
        let behind = TimestampLimits { before_max_ms: Some(1_000), ..LIMITS };
        assert!(
            matches!(check(&two(NOW - 5_000), Some(behind)), Err(RecordError::Timestamp(m)) if m.contains("behind"))
        );
        let mut b = two(NOW).to_vec();
        b[22] |= ATTR_LOG_APPEND_TIME as u8;
        assert!(matches!(check(&recrc(b), Some(LIMITS)), Err(RecordError::Timestamp(m)) if m.contains("log-append")));
    }

    #[test]
    fn a_stamped_batch_carries_the_brokers_clock_and_a_good_crc() {
        let b = build_batch(stamp(), false, 1_000, &[Bytes::from_static(b"a"), Bytes::from_static(b"bc")]);
        let stamped = stamp_log_append_time(&b, 5_000);
        let h = BatchHeader::parse(&stamped).unwrap();
        verify_crc(&stamped, &h).unwrap();
        assert_eq!(h.max_timestamp, 5_000);
        assert_eq!(stamped[ATTRIBUTES_AT + 1] & ATTR_LOG_APPEND_TIME as u8, ATTR_LOG_APPEND_TIME as u8);
        assert_eq!((h.producer_id, h.base_sequence, h.record_count), (7, 10, 2));
        let records = decode_records(&stamped).unwrap();
        assert!(records.iter().all(|r| r.timestamp_ms == 5_000), "{records:?}");
    }

    #[test]
    fn a_header_with_the_largest_base_offset_does_not_overflow() {
        let mut b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"a"), Bytes::from_static(b"bc")]).to_vec();
        b[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.last_offset(), i64::MAX);
    }

    #[test]
    fn built_batch_parses_and_crc_holds() {
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"a"), Bytes::from_static(b"bc")]);
        let h = BatchHeader::parse(&b).unwrap();
        verify_crc(&b, &h).unwrap();
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (7, 3, 10));
        assert_eq!(h.record_count, 2);
        assert_eq!(h.last_sequence(), 11);
        assert!(!h.is_control());
    }

    #[test]
    fn rewriting_offset_and_leader_epoch_keeps_crc() {
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"a")]);
        let mut m = b.to_vec();
        set_base_offset(&mut m, 1234);
        set_partition_leader_epoch(&mut m, 9);
        let h = BatchHeader::parse(&m).unwrap();
        verify_crc(&m, &h).unwrap();
        assert_eq!((h.base_offset, h.partition_leader_epoch), (1234, 9));
        let recs = decode_records(&Bytes::from(m)).unwrap();
        assert_eq!(recs[0].offset, 1234);
        assert_eq!(recs[0].value, Bytes::from_static(b"a"));
    }

    #[test]
    fn flipped_byte_fails_crc() {
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"hello")]);
        let mut m = b.to_vec();
        let last = m.len() - 1;
        m[last] ^= 0xff;
        let h = BatchHeader::parse(&m).unwrap();
        assert!(matches!(verify_crc(&m, &h), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn lying_length_is_rejected() {
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"hello")]);
        assert!(matches!(BatchHeader::parse(&b[..b.len() - 1]), Err(BatchError::LengthMismatch { .. })));
        assert!(matches!(BatchHeader::parse(&b[..20]), Err(BatchError::Truncated { .. })));
        let mut m = b.to_vec();
        m[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(BatchHeader::parse(&m).is_err());
    }

    #[test]
    fn a_record_count_the_batch_cannot_hold_is_refused_before_decoding() {
        // Found by the record_batch fuzz target: a valid-looking batch claiming millions of
        // records made the record decoder reserve ~24 GB.
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"a")]);
        let mut m = b.to_vec();
        m[57..61].copy_from_slice(&50_000_000i32.to_be_bytes());
        m[23..27].copy_from_slice(&49_999_999i32.to_be_bytes());
        assert!(matches!(BatchHeader::parse(&m), Err(BatchError::InvalidField { field: "record_count", .. })));
        assert!(marker_kind(&Bytes::from(m.clone())).is_none());
        assert!(decode_records(&Bytes::from(m)).is_err());
    }

    #[test]
    fn record_deltas_that_would_overflow_are_refused_before_decoding() {
        // Found by the record_batch fuzz target: a base offset near i64::MIN plus a record's
        // offset delta overflowed inside the record decoder (a panic with overflow checks on).
        let b = build_batch(stamp(), false, i64::MAX, &[Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
        assert_eq!(decode_records(&b).unwrap().len(), 2, "the unpatched batch decodes");
        for base in [i64::MAX - 1, i64::MIN + 1] {
            let mut m = b.to_vec();
            set_base_offset(&mut m, base); // outside the CRC
            let err = decode_records(&Bytes::from(m)).unwrap_err();
            assert!(matches!(err, BatchError::InvalidField { field: "base_offset", .. }), "{err}");
        }
        // The first record's timestamp delta (after its length and attributes) from 0 to 1, on a
        // batch whose first timestamp is i64::MAX; the CRC made again so that only this is wrong.
        let mut m = b.to_vec();
        assert_eq!(m[BATCH_HEADER_BYTES + 2], 0, "timestamp delta 0");
        m[BATCH_HEADER_BYTES + 2] = 2; // zigzag(1)
        let crc = crc32c::crc32c(&m[CRC_START..]);
        m[CRC_START - 4..CRC_START].copy_from_slice(&crc.to_be_bytes());
        let err = decode_records(&Bytes::from(m)).unwrap_err();
        assert!(matches!(err, BatchError::InvalidField { field: "timestamp_delta", value: 1 }), "{err}");
    }

    #[test]
    fn marker_is_a_control_batch_without_records() {
        let b = build_marker(7, 4, -1, MarkerKind::Abort, 0, 1);
        let h = BatchHeader::parse(&b).unwrap();
        verify_crc(&b, &h).unwrap();
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(h.producer_epoch, 4);
        assert!(decode_records(&b).unwrap().is_empty());
    }

    #[test]
    fn marker_kinds_read_back() {
        assert_eq!(marker_kind(&build_marker(1, 1, -1, MarkerKind::Commit, 0, 0)), Some(MarkerKind::Commit));
        assert_eq!(marker_kind(&build_marker(1, 1, -1, MarkerKind::Abort, 0, 0)), Some(MarkerKind::Abort));
        assert_eq!(marker_kind(&build_batch(stamp(), true, 0, &[Bytes::from_static(b"x")])), None);
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 0), 5);
    }

    #[test]
    fn iterator_splits_and_stops_on_torn_tail() {
        let a = build_batch(stamp(), false, 1, &[Bytes::from_static(b"a")]);
        let b = build_batch(stamp(), false, 1, &[Bytes::from_static(b"b")]);
        let mut all = BytesMut::new();
        all.extend_from_slice(&a);
        all.extend_from_slice(&b[..b.len() - 3]);
        let items: Vec<_> = BatchIter::new(all.freeze()).collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(matches!(items[1], Err(BatchError::Truncated { .. })));
    }
}
