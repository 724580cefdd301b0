//! One partition on this broker: its log, its producer gate and its leadership, behind one
//! lock so that the gate's check and the append it admits are a single step.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use protocol::batch::{set_base_offset, set_partition_leader_epoch, BatchHeader};

use crate::leader::{LeaderEpochError, Leadership};
use crate::log::{read_at, LogError, PartitionLog};
use crate::producer_state::{Admit, GateError, ProducerStates};

/// A successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written at `base_offset`.
    New {
        /// Offset of the first record.
        base_offset: i64,
        /// Log end offset after it.
        log_end_offset: i64,
    },
    /// A retry of a batch already written at `base_offset`; nothing written.
    Duplicate {
        /// The original offset.
        base_offset: i64,
        /// Log end offset.
        log_end_offset: i64,
    },
}

/// Why an append did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    /// Leader epoch mismatch or not the leader.
    #[error(transparent)]
    Leader(#[from] LeaderEpochError),
    /// Refused by the producer gate.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The coordinator must confirm the producer's epoch first.
    #[error("producer id {producer_id} epoch {epoch} is not verified on this partition yet")]
    NeedsVerification {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
    },
    /// The log could not be written.
    #[error(transparent)]
    Storage(#[from] LogError),
}

/// What a fetch found.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Whole batches.
    pub records: Bytes,
    /// Offset after the last readable record.
    pub high_watermark: i64,
    /// Leader epoch here.
    pub leader_epoch: i32,
}

struct Inner {
    log: PartitionLog,
    producers: ProducerStates,
    leadership: Leadership,
}

/// A partition hosted here.
pub struct Partition {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub index: i32,
    /// Never held across an `.await`.
    inner: Mutex<Inner>,
}

impl Partition {
    /// Open the partition's log in `dir`, rebuilding its producer state from the batches.
    pub fn open(
        dir: &Path,
        topic: &str,
        index: i32,
        fencing: bool,
        leadership: Leadership,
    ) -> Result<Partition, LogError> {
        let recovered = PartitionLog::open(dir)?;
        let mut producers = ProducerStates::new(fencing);
        for h in &recovered.headers {
            producers.record(h);
        }
        tracing::info!(
            topic,
            partition = index,
            end_offset = recovered.log.end_offset(),
            producers = producers.len(),
            truncated_bytes = recovered.truncated_bytes,
            "partition opened"
        );
        Ok(Partition {
            topic: topic.to_string(),
            index,
            inner: Mutex::new(Inner { log: recovered.log, producers, leadership }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Leader epoch check, producer gate, append: one step under the lock. Every write to the
    /// partition, data or marker, comes through here. `batch` is one CRC-checked batch.
    pub fn append(
        &self,
        batch: &Bytes,
        header: &BatchHeader,
        request_leader_epoch: i32,
    ) -> Result<Appended, AppendError> {
        let mut g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        match g.producers.check(header)? {
            Admit::Duplicate { base_offset } => {
                return Ok(Appended::Duplicate { base_offset, log_end_offset: g.log.end_offset() })
            }
            Admit::NeedsVerification => {
                return Err(AppendError::NeedsVerification {
                    producer_id: header.producer_id,
                    epoch: header.producer_epoch,
                })
            }
            Admit::Append => {}
        }
        let base_offset = g.log.end_offset();
        let leader_epoch = g.leadership.leader_epoch;
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&batch[..16]);
        set_base_offset(&mut prefix, base_offset);
        set_partition_leader_epoch(&mut prefix, leader_epoch);
        let stored = BatchHeader { base_offset, partition_leader_epoch: leader_epoch, ..*header };
        g.log.append(&prefix, &batch[16..], &stored)?;
        g.producers.record(&stored);
        Ok(Appended::New { base_offset, log_end_offset: g.log.end_offset() })
    }

    /// The coordinator confirmed `(producer_id, epoch)` for this partition.
    pub fn mark_verified(&self, producer_id: i64, epoch: i16) {
        self.lock().producers.mark_verified(producer_id, epoch);
    }

    /// Learn leadership from the coordinator.
    pub fn learn(&self, is_leader: bool, leader_epoch: i32) {
        self.lock().leadership.learn(is_leader, leader_epoch);
    }

    /// Current leadership as this broker knows it.
    pub fn leadership(&self) -> Leadership {
        self.lock().leadership
    }

    /// The epoch this partition holds for `producer_id`.
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.lock().producers.epoch_of(producer_id)
    }

    /// Log end offset.
    pub fn end_offset(&self) -> i64 {
        self.lock().log.end_offset()
    }

    /// Whole batches from the one holding `offset`, at most `max_bytes` (at least one batch).
    /// The lock is held only to find the bytes; they are read after it is released.
    pub fn fetch(&self, offset: i64, max_bytes: usize, request_leader_epoch: i32) -> Result<Fetched, FetchError> {
        let (range, reader, high_watermark, leader_epoch) = {
            let g = self.lock();
            g.leadership.check(request_leader_epoch)?;
            let end = g.log.end_offset();
            if offset < 0 || offset > end {
                return Err(FetchError::OutOfRange { offset, end });
            }
            (g.log.locate(offset, max_bytes), g.log.reader(), end, g.leadership.leader_epoch)
        };
        let records = match range {
            None => Bytes::new(),
            Some((pos, len)) => read_at(&reader, pos, len).map_err(|e| FetchError::Io(e.to_string()))?,
        };
        Ok(Fetched { records, high_watermark, leader_epoch })
    }
}

/// Why a fetch failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// Leader epoch mismatch or not the leader.
    #[error(transparent)]
    Leader(#[from] LeaderEpochError),
    /// Offset outside the log.
    #[error("offset {offset} is outside the log [0, {end}]")]
    OutOfRange {
        /// Asked.
        offset: i64,
        /// Log end.
        end: i64,
    },
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(String),
}

/// Shared handle.
pub type PartitionRef = Arc<Partition>;
