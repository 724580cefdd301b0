//! One partition replica on this broker: its log, its producer gate, its leadership and (while
//! leading) its replication bookkeeping, behind one lock, so that every check and the write it
//! admits are a single step. Every write to the log (produce, marker, replication, truncation)
//! goes through a method here.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use protocol::batch::{
    marker_kind, set_base_offset, set_partition_leader_epoch, verify_crc, BatchHeader, BatchIter, MarkerKind,
};
use protocol::{AbortedTxn, AlterPartitionResponse, Records, ReplicateRequest, READ_COMMITTED};
use tokio::sync::watch;

use crate::leader::{LeaderEpochError, Leadership};
use crate::log::{LogConfig, LogError, PartitionLog, ReadRange};
use crate::producer_state::{Admit, GateError, ProducerStates, SavedProducer, VerificationGuard};
use crate::replication::{ReplicaSet, Sent};
use crate::snapshot;
use crate::storage::{OsStorage, Storage, StoredFile};
use crate::txn_index::{SavedTxn, TxnIndex};

/// A successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written at `base_offset`.
    New {
        /// Offset of the first record.
        base_offset: i64,
        /// Offset after the batch.
        end_offset: i64,
        /// The leader epoch it was written under.
        leader_epoch: i32,
    },
    /// A retry of a batch already written at `base_offset`; nothing written.
    Duplicate {
        /// The original offset.
        base_offset: i64,
        /// Offset after the batch.
        end_offset: i64,
        /// The leader epoch now.
        leader_epoch: i32,
    },
}

/// A batch offered to [`Partition::append_group`], as [`Partition::append`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// One CRC-checked batch.
    pub batch: &'a Bytes,
    /// Its parsed header.
    pub header: &'a BatchHeader,
    /// The leader epoch the request carries.
    pub leader_epoch: i32,
    /// The write is to be acknowledged once committed (acks=all, and every marker): refused
    /// with [`AppendError::NotEnoughReplicas`] while the ISR is below `min.insync.replicas`.
    pub acks_all: bool,
}

/// Batches admitted and recorded in the producer state, not written yet: what one
/// [`Partition::append_group`] or one Replicate request writes in one go.
#[derive(Default)]
struct Chunk {
    batches: Vec<Staged>,
    bytes: u64,
    /// Answers (of an [`Partition::append_group`]) that stand or fall with the write: the
    /// batches', and those decided while they were staged (see [`decided`]).
    members: Vec<usize>,
    /// The producer state and transaction index entries of the batches' producers before them.
    saved: Vec<(SavedProducer, SavedTxn)>,
    /// The producer ids in `saved`.
    saved_ids: HashSet<i64>,
}

/// One batch of a [`Chunk`].
struct Staged {
    /// Its first 16 bytes as stored (base offset and leader epoch set).
    prefix: [u8; 16],
    /// The whole batch as received.
    batch: Bytes,
    /// Its header as stored.
    header: BatchHeader,
}

impl Chunk {
    /// The offset the next admitted batch gets.
    fn next_offset(&self, log: &PartitionLog) -> i64 {
        self.batches.last().map_or(log.end_offset(), |b| b.header.last_offset() + 1)
    }
}

/// Answer a batch of an [`Partition::append_group`] that is not staged. An answer decided while
/// batches are staged was decided against the state they recorded (a retry of one of them, a
/// sequence that follows them): it stands or falls with their write.
fn decided(answers: &mut Vec<Result<Appended, AppendError>>, chunk: &mut Chunk, answer: Result<Appended, AppendError>) {
    if !chunk.batches.is_empty() {
        chunk.members.push(answers.len());
    }
    answers.push(answer);
}

impl Appended {
    /// (base offset, offset after the batch, leader epoch).
    pub fn parts(&self) -> (i64, i64, i32) {
        match *self {
            Appended::New { base_offset, end_offset, leader_epoch }
            | Appended::Duplicate { base_offset, end_offset, leader_epoch } => (base_offset, end_offset, leader_epoch),
        }
    }
}

/// Why an append did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    /// Leader epoch mismatch or wrong role.
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
        /// To hand back with the coordinator's answer ([`Partition::mark_verified`]).
        guard: VerificationGuard,
    },
    /// An acks=all write while the ISR is smaller than `min.insync.replicas`: nothing written.
    #[error("the ISR {isr:?} has {} member(s), fewer than min.insync.replicas {min_isr}: an acks=all write needs {min_isr} in-sync replicas; bring the followers back in sync, or write with acks=leader", isr.len())]
    NotEnoughReplicas {
        /// The ISR.
        isr: Vec<i32>,
        /// The minimum.
        min_isr: usize,
    },
    /// The log could not be written.
    #[error(transparent)]
    Storage(#[from] LogError),
}

/// Why a follower refused replicated batches.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReplicateError {
    /// The sender's leader epoch is not this replica's.
    #[error(transparent)]
    Leader(#[from] LeaderEpochError),
    /// The logs diverge before `from_offset`.
    #[error("log diverges before the offset sent; its epoch there is {diverging_epoch}, hint {hint}")]
    Mismatch {
        /// The start of this replica's conflicting epoch, or its log end.
        hint: i64,
        /// This replica's epoch at `from_offset - 1` (-1 when `from_offset` is past its end).
        diverging_epoch: i32,
        /// This replica's log end.
        log_end_offset: i64,
    },
    /// A batch broke the producer gate (a leader bug: refused rather than stored).
    #[error(transparent)]
    Gate(#[from] GateError),
    /// A batch is damaged or out of place.
    #[error("replicated batch rejected: {0}")]
    Corrupt(String),
    /// The sender leads a replica of another topic of the same name (one was deleted and created
    /// again): nothing of it belongs here.
    #[error(
        "the sender's replica belongs to topic id {sent:032x}, this one to {mine:032x}: the topic was deleted and \
         created again under the name; the replica of the deleted one is dropped at its broker's next heartbeat"
    )]
    OtherTopic {
        /// The topic id the sender's replica belongs to.
        sent: u128,
        /// This replica's.
        mine: u128,
    },
    /// The log could not be written.
    #[error(transparent)]
    Storage(#[from] LogError),
    /// Following would cut this log below its high watermark, outside an unclean election: the
    /// leader lacks records committed here, so the leader is the one that is wrong.
    #[error(
        "leader {leader_id} at epoch {leader_epoch} would cut this log at offset {offset}, below its high watermark \
         {high_watermark}: records committed here would be lost, so the leader lacks committed records; refusing \
         (only an unclean election an operator asked for may cut committed records)"
    )]
    WouldCutCommitted {
        /// The leader that asked.
        leader_id: i32,
        /// Its leader epoch.
        leader_epoch: i32,
        /// Where it would cut.
        offset: i64,
        /// This replica's high watermark.
        high_watermark: i64,
    },
}

/// Where a write waiting to be acknowledged stands ([`Partition::committed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Not below the high watermark yet.
    NotYet,
    /// Committed, and the replicas the high watermark waits for are still at least
    /// `min.insync.replicas`.
    Yes,
    /// Committed, but those replicas have since fallen below `min.insync.replicas`: the write
    /// cannot be acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    BelowMinIsr {
        /// The replicas the high watermark waits for.
        replicas: Vec<i32>,
        /// The minimum.
        min_isr: usize,
    },
}

/// What a fetch found.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Whole batches below the high watermark (read_uncommitted) or the last stable offset
    /// (read_committed).
    pub records: Bytes,
    /// Offset after the last committed record.
    pub high_watermark: i64,
    /// Offset below which no transaction is open.
    pub last_stable_offset: i64,
    /// With read_committed: aborted transactions overlapping the records.
    pub aborted: Vec<AbortedTxn>,
    /// Leader epoch here.
    pub leader_epoch: i32,
    /// The oldest offset the log keeps.
    pub log_start_offset: i64,
}

/// Where a partition's log starts and ends, as a reader sees it (Kafka's ListOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// The oldest offset the log keeps.
    pub log_start_offset: i64,
    /// Offset after the last committed record.
    pub high_watermark: i64,
    /// Offset below which no transaction is open.
    pub last_stable_offset: i64,
    /// Leader epoch here.
    pub leader_epoch: i32,
}

/// A producer a partition knows (Kafka's DescribeProducers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    /// Producer id.
    pub producer_id: i64,
    /// Its epoch here.
    pub epoch: i16,
    /// The last sequence it appended at that epoch (-1: none).
    pub last_sequence: i32,
    /// The first offset of its open transaction here, if one is open.
    pub txn_start_offset: Option<i64>,
}

/// A record found by its timestamp (Kafka's ListOffsets by time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundByTime {
    /// Its offset.
    pub offset: i64,
    /// Its timestamp.
    pub timestamp_ms: i64,
    /// The leader epoch of its batch.
    pub leader_epoch: i32,
}

/// Why a fetch failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// Leader epoch mismatch or not the leader.
    #[error(transparent)]
    Leader(#[from] LeaderEpochError),
    /// Offset outside the log.
    #[error("offset {offset} is outside the log [{start}, {end}]; fetch from {start} (the oldest retained) or later")]
    OutOfRange {
        /// Asked.
        offset: i64,
        /// Log start (the oldest offset retention kept).
        start: i64,
        /// Log end.
        end: i64,
    },
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(String),
}

/// Why DeleteRecords was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeleteRecordsError {
    /// Leader epoch mismatch or not the leader.
    #[error(transparent)]
    Leader(#[from] LeaderEpochError),
    /// The offset is past the high watermark (or negative other than -1).
    #[error(
        "offset {offset} is past the high watermark {high_watermark}: records can be deleted only below it (-1 \
         deletes up to it)"
    )]
    OutOfRange {
        /// Asked.
        offset: i64,
        /// The high watermark.
        high_watermark: i64,
    },
    /// Recording the new start failed.
    #[error(transparent)]
    Storage(#[from] LogError),
}

/// What the leader sends a follower next.
#[derive(Debug, Clone)]
pub struct ReplicationWork {
    /// First offset sent.
    pub from_offset: i64,
    /// Epoch of the batch before it (-1 at offset 0).
    pub prev_epoch: i32,
    /// Leader's high watermark.
    pub high_watermark: i64,
    /// The leader's log start offset (the first offset its segments hold).
    pub log_start_offset: i64,
    /// The log start readers see on the leader (DeleteRecords'): the follower hides what is
    /// below it too.
    pub low_watermark: i64,
    /// When `from_offset` is the log start above 0 (a follower may start its log over there):
    /// the producer state of the producers with nothing from there on
    /// ([`ProducerStates::encode_before`]). Empty otherwise.
    pub producer_state: Bytes,
    /// Batches from `from_offset` (possibly empty).
    pub records: Records,
    /// Whether `records` came from the batches the log keeps in memory rather than its file.
    pub from_memory: bool,
    /// The offset after the last batch in `records` (`from_offset` if none).
    pub end_offset: i64,
    /// The leader's log end when the work was taken, and when: hand it back with the answer.
    pub sent: Sent,
}

/// What changed when this replica learnt a leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleChange {
    /// It now leads at `leader_epoch` and must replicate to `followers`.
    BecameLeader {
        /// Epoch.
        leader_epoch: i32,
        /// Follower ids.
        followers: Vec<i32>,
    },
    /// It now follows (or the partition has no leader).
    BecameFollower {
        /// Epoch.
        leader_epoch: i32,
    },
}

struct Inner {
    log: PartitionLog,
    producers: ProducerStates,
    txns: TxnIndex,
    leadership: Leadership,
    replicas: Vec<i32>,
    /// Present while leading.
    replica_set: Option<ReplicaSet>,
    /// This replica's high watermark (a follower's is the leader's, capped by its log end).
    high_watermark: i64,
    /// A follower's: the high watermark its leader sent last, uncapped (for the offset lag
    /// DescribeLogDirs reports).
    leader_high_watermark: i64,
    /// Offsets below this are on disk (fsynced), as far as this process knows.
    durable_end: i64,
    /// Bumped by every truncation: a sync that started before one proves nothing about the
    /// bytes written after it.
    truncations: u64,
    /// While leading, count only this replica's durable end in the high watermark (`--fsync
    /// always`): then everything committed is on disk on every ISR member, since followers
    /// acknowledge only what they synced.
    sync_before_commit: bool,
    /// Keep verifications across changes of leadership, as before issue 28: only the
    /// simulator's `keep-verifications` mutation sets it, to show what forgetting them prevents.
    keep_verifications: bool,
    /// The id of the topic this replica belongs to (0: not known, as for a replica made before
    /// topics had ids): replication from a leader of another topic of the same name is refused.
    topic_id: u128,
    /// Keep the whole log when leading after an unclean election, as before issue 28: only the
    /// simulator's `unclean-leaders-keep-their-logs` mutation sets it.
    keep_log_after_unclean: bool,
    /// The leader epoch of the partition's last unclean election, as the coordinator says
    /// ([`Partition::set_unclean_leader_epoch`]); -1 for none.
    unclean_leader_epoch: i32,
    /// The topic's `min.insync.replicas` (1 until the coordinator says).
    min_isr: i32,
    /// The high watermark last written to [`HIGH_WATERMARK_FILE`] (as far as it was on disk
    /// here then: see [`Partition::checkpoint_high_watermark`]).
    checkpointed_hw: i64,
    /// Why this replica may lack records it acknowledged before its restart (damage cut at
    /// open, or a log ending below its checkpointed high watermark), until it is back in the
    /// ISR; `None` when it holds everything it held.
    lost: Option<String>,
    /// The broker epoch of the registration that reported `lost` to the coordinator, -1 until
    /// one has (kept in the mark: [`LOST_REPORTED_PREFIX`]).
    lost_reported_at: i64,
    /// Why this follower refuses its leader (it would cut committed records), until a
    /// replication from it is taken again; for the heartbeat's problem report.
    refusing: Option<(i32, String)>,
}

impl Inner {
    /// What the leader counts of its own log in the high watermark: its end, or with
    /// `sync_before_commit` only the part of it on disk.
    fn leader_end(&self) -> i64 {
        let leo = self.log.end_offset();
        if self.sync_before_commit {
            self.durable_end.min(leo)
        } else {
            leo
        }
    }

    /// The leader's own log moved on (an append, or a sync under `sync_before_commit`): move
    /// the high watermark if the replica set now allows it.
    fn on_leader_progress(&mut self) {
        let leader_end = self.leader_end();
        if let Some(rs) = self.replica_set.as_mut() {
            if rs.on_leader_append(leader_end) {
                self.high_watermark = rs.high_watermark();
            }
        }
    }

    /// Roll the log if `bytes` more would take the active segment past its size, and snapshot
    /// the producer state as of the roll (so it must hold exactly what is written).
    fn roll_for(&mut self, bytes: u64) -> Result<(), LogError> {
        if self.log.should_roll(bytes) {
            self.log.roll()?;
            if self.log.config().sync_on_roll {
                // The roll synced everything below the new segment.
                self.durable_end = self.durable_end.max(self.log.end_offset());
            }
            self.snapshot();
        }
        Ok(())
    }

    /// Make room in `chunk` for a batch of `bytes`: write what it holds if the batch would take
    /// the active segment past its size, then, with the chunk empty, roll the log if need be.
    /// `answers`: the group's, which a failed write answers (see [`Inner::write_chunk`]).
    fn make_room(
        &mut self,
        chunk: &mut Chunk,
        bytes: u64,
        answers: &mut [Result<Appended, AppendError>],
    ) -> Result<(), LogError> {
        if !chunk.batches.is_empty() && self.log.should_roll_after(chunk.bytes, bytes) {
            self.write_chunk(chunk, answers)?;
        }
        if chunk.batches.is_empty() {
            self.roll_for(bytes)?;
        }
        Ok(())
    }

    /// Admit a batch to `chunk` (the one way a batch enters the log: staged, then written by
    /// [`Inner::write_chunk`]): record it in the producer state and transaction index now (so
    /// that a later batch of the same producer is checked against it), remembering what they
    /// held before, to put back if the write fails. The caller has rolled the log first if the
    /// chunk was empty and the batch needs it (see [`Inner::roll_for`]). `answer`: the index of
    /// its answer in an [`Partition::append_group`].
    fn stage(&mut self, chunk: &mut Chunk, answer: Option<usize>, prefix: [u8; 16], batch: Bytes, header: BatchHeader) {
        let marker = if header.is_control() { marker_kind(&batch) } else { None };
        let producer_id = header.producer_id;
        if producer_id >= 0 && chunk.saved_ids.insert(producer_id) {
            chunk.saved.push((self.producers.save(producer_id), self.txns.save(producer_id)));
        }
        self.producers.record(&header);
        self.txns.record(&header, marker);
        chunk.bytes += batch.len() as u64;
        chunk.members.extend(answer);
        chunk.batches.push(Staged { prefix, batch, header });
    }

    /// Write the batches `chunk` admitted in one vectored write; if it fails, put their
    /// producers' state back and answer them (and retries of them) with the error instead.
    fn write_chunk(
        &mut self,
        chunk: &mut Chunk,
        answers: &mut [Result<Appended, AppendError>],
    ) -> Result<(), LogError> {
        let Chunk { batches, saved, members, .. } = std::mem::take(chunk);
        if batches.is_empty() {
            return Ok(());
        }
        let pieces: Vec<(&[u8; 16], Bytes, &BatchHeader)> =
            batches.iter().map(|b| (&b.prefix, b.batch.slice(16..), &b.header)).collect();
        let written = self.log.append_many(&pieces);
        if let Err(e) = &written {
            for (producer, txn) in saved.into_iter().rev() {
                self.producers.restore(producer);
                self.txns.restore(txn);
            }
            for i in members {
                answers[i] = Err(AppendError::Storage(e.clone()));
            }
        }
        written
    }

    /// Keep the log's tail for the in-sync followers (a leader's; a follower has none): let go
    /// of the batches every one of them is past, and keep none while none is in sync, so that a
    /// follower out of the ISR catches up from the file and holds no memory. Called on every
    /// change of the leadership, the ISR and a follower's progress; an append needs none (what
    /// it adds ends past every follower's next offset, and the tail bounds its own size).
    fn trim_tail(&mut self) {
        let slowest = self.replica_set.as_ref().and_then(ReplicaSet::slowest_in_sync_next_offset);
        self.log.keep_tail(slowest.is_some());
        if let Some(below) = slowest {
            self.log.release_tail_below(below);
        }
    }

    /// Snapshot the producer state as of the log end. Only an optimisation of recovery: a
    /// failure is logged, and recovery replays more of the log instead.
    fn snapshot(&self) {
        if let Err(e) =
            snapshot::write(self.log.storage(), self.log.dir(), self.log.end_offset(), &self.producers, &self.txns)
        {
            tracing::warn!(dir = %self.log.dir().display(), error = %e, "could not write a producer-state snapshot");
        }
    }

    /// Record `hw` in [`HIGH_WATERMARK_FILE`], durably (under the partition lock).
    fn write_high_watermark(&mut self, hw: i64) -> Result<(), LogError> {
        write_high_watermark(self.log.storage(), self.log.dir(), hw)?;
        self.checkpointed_hw = hw;
        Ok(())
    }

    /// Rebuild the producer state and transaction index: from the newest intact snapshot
    /// within the log, replaying the batches after it; or from the whole log.
    fn recover_state(&mut self, fencing: bool) -> Result<Option<i64>, LogError> {
        let (start, end) = (self.log.start_offset(), self.log.end_offset());
        let (from, used, mut producers, mut txns) =
            match snapshot::load_newest(self.log.storage(), self.log.dir(), start, end, fencing) {
                Some((offset, p, t)) => (offset, Some(offset), p, t),
                None => (start, None, ProducerStates::new(fencing), TxnIndex::new()),
            };
        for (h, marker) in self.log.headers_from(from)? {
            producers.record(&h);
            txns.record(&h, marker);
        }
        (self.producers, self.txns) = (producers, txns);
        Ok(used)
    }
}

/// The file in a partition's directory holding its checkpointed high watermark.
pub const HIGH_WATERMARK_FILE: &str = "high-watermark";
/// The file in a partition's directory that marks it lost (why, as text) from the start that
/// found it so until it is back in an ISR: a restart in between must not forget it.
pub const LOST_FILE: &str = "lost";
/// The mark's second line, once a registration reported the loss: this, then the broker epoch.
const LOST_REPORTED_PREFIX: &str = "reported by the registration of broker epoch ";
const HIGH_WATERMARK_HEADER: &str = "epochfence high watermark v1";

/// A [`LOST_FILE`]'s text: why, and the broker epoch of the registration that reported it (-1
/// if none did; a mark written before this was recorded has one line).
fn parse_lost_mark(mark: &[u8]) -> (String, i64) {
    let text = String::from_utf8_lossy(mark);
    let mut why = Vec::new();
    let mut reported_at = -1;
    for line in text.lines() {
        match line.strip_prefix(LOST_REPORTED_PREFIX).map(|e| e.trim().parse::<i64>()) {
            Some(Ok(epoch)) => reported_at = epoch,
            _ => why.push(line),
        }
    }
    (why.join("\n").trim().to_string(), reported_at)
}

/// Write the lost mark durably: a file renamed into place, and the directory synced.
fn write_lost_mark(storage: &dyn Storage, dir: &Path, why: &str, reported_at: i64) -> Result<(), LogError> {
    let text =
        if reported_at >= 0 { format!("{why}\n{LOST_REPORTED_PREFIX}{reported_at}\n") } else { format!("{why}\n") };
    storage.write_file_atomically(&dir.join(LOST_FILE), text.as_bytes()).map_err(|e| LogError::Io {
        path: dir.display().to_string(),
        op: "record a lost replica",
        detail: e.to_string(),
    })?;
    storage.sync_dir(dir);
    Ok(())
}

/// Record `hw` in `dir`'s [`HIGH_WATERMARK_FILE`], durably: a synced temporary file renamed over
/// it, and the directory synced.
fn write_high_watermark(storage: &dyn Storage, dir: &Path, hw: i64) -> Result<(), LogError> {
    let path = dir.join(HIGH_WATERMARK_FILE);
    storage.write_file_atomically(&path, format!("{HIGH_WATERMARK_HEADER}\n{hw}\n").as_bytes()).map_err(|e| {
        LogError::Io { path: path.display().to_string(), op: "checkpoint the high watermark", detail: e.to_string() }
    })?;
    storage.sync_dir(dir);
    Ok(())
}

/// The high watermark checkpointed in `dir` (0 if none, or unreadable: then nothing is
/// known to have been committed here).
fn read_high_watermark(storage: &dyn Storage, dir: &Path) -> i64 {
    let Ok(bytes) = storage.read(&dir.join(HIGH_WATERMARK_FILE)) else { return 0 };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    match (lines.next(), lines.next().and_then(|l| l.trim().parse::<i64>().ok())) {
        (Some(HIGH_WATERMARK_HEADER), Some(hw)) if hw >= 0 => hw,
        _ => {
            tracing::warn!(dir = %dir.display(), "unreadable high-watermark checkpoint; ignoring it");
            0
        }
    }
}

/// A partition replica hosted here.
pub struct Partition {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub index: i32,
    broker_id: i32,
    fencing: bool,
    /// Never held across an `.await`.
    inner: Mutex<Inner>,
    /// The topic's configs (its overrides of the broker's settings), as the coordinator said:
    /// read by every produce before the partition's lock, so under a lock of their own.
    topic_config: Mutex<protocol::topic_config::TopicConfig>,
    /// Bumped whenever the log end, the high watermark or the leadership changes; waiters
    /// (acks=all answers, replication loops) watch it.
    progress: watch::Sender<u64>,
}

impl Partition {
    /// Open the replica's log in `dir` with the default [`LogConfig`].
    pub fn open(dir: &Path, topic: &str, index: i32, broker_id: i32, fencing: bool) -> Result<Partition, LogError> {
        Self::open_with(Arc::new(OsStorage), dir, LogConfig::default(), topic, index, broker_id, fencing)
    }

    /// Open the replica's log in `dir`, rebuilding its producer state (from the newest intact
    /// snapshot and the batches after it) and its epoch cache.
    pub fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: LogConfig,
        topic: &str,
        index: i32,
        broker_id: i32,
        fencing: bool,
    ) -> Result<Partition, LogError> {
        let recovered = PartitionLog::open_in(storage, dir, config)?;
        let end = recovered.log.end_offset();
        let checkpointed_hw = read_high_watermark(recovered.log.storage(), dir);
        // Found at an earlier start and not caught up since (it may have restarted again before
        // its broker could tell the coordinator).
        let marked = recovered.log.storage().read(&dir.join(LOST_FILE)).ok().map(|m| parse_lost_mark(&m));
        let found = if let Some(damage) = &recovered.damage {
            Some(format!("damage cut from its log at the restart: {damage}"))
        } else {
            (checkpointed_hw > end).then(|| {
                format!(
                    "its log ends at offset {end} after the restart, below the high watermark {checkpointed_hw} it \
                     had on disk before: acknowledged records are gone from it"
                )
            })
        };
        // A loss found at this start is new (no registration has reported it yet), even where
        // an earlier one's mark was still there; else the earlier mark, as it was.
        let (lost, lost_reported_at) = match (found, marked) {
            (Some(why), _) => (Some(why), -1),
            (None, Some((why, reported_at))) => (Some(why), reported_at),
            (None, None) => (None, -1),
        };
        if let Some(why) = &lost {
            tracing::error!(topic, partition = index, %why, "replica lost records: it must refetch them before it may lead");
            // Durably, before anything can lower the checkpoint that told it.
            write_lost_mark(recovered.log.storage(), dir, why, lost_reported_at)?;
        }
        // A snapshot past the log end describes batches the log no longer has.
        if let Err(e) = snapshot::remove_outside(recovered.log.storage(), dir, i64::MIN, end) {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove stale snapshots");
        }
        let latest_epoch = if end > 0 { recovered.log.epoch_at(end - 1).unwrap_or(-1) } else { -1 };
        let mut inner = Inner {
            log: recovered.log,
            producers: ProducerStates::new(fencing),
            txns: TxnIndex::new(),
            // The latest leader epoch in the log is a floor: a restarted replica never takes a
            // leadership or replication from an older epoch than it has already stored (the
            // role Kafka's leader-epoch checkpoint plays).
            leadership: Leadership { is_leader: false, leader_id: -1, leader_epoch: latest_epoch },
            replicas: Vec::new(),
            replica_set: None,
            leader_high_watermark: -1,
            // Records below the high watermark checkpointed before the restart were committed:
            // readable at once, without waiting for the followers to answer.
            high_watermark: checkpointed_hw.min(end),
            // Made durable below, once the log is recovered.
            durable_end: 0,
            truncations: 0,
            sync_before_commit: false,
            keep_verifications: false,
            topic_id: 0,
            keep_log_after_unclean: false,
            unclean_leader_epoch: -1,
            min_isr: 1,
            checkpointed_hw,
            lost,
            lost_reported_at,
            refusing: None,
        };
        let snapshot = inner.recover_state(fencing)?;
        // What the scan found may still sit unsynced in the page cache (a process crash):
        // sync it now, so the log starts out durable to its end.
        inner.log.active_file().sync_data().map_err(|e| LogError::Io {
            path: dir.display().to_string(),
            op: "sync on open",
            detail: e.to_string(),
        })?;
        inner.durable_end = end;
        tracing::info!(
            topic,
            partition = index,
            start_offset = inner.log.start_offset(),
            end_offset = end,
            segments = inner.log.segment_count(),
            snapshot,
            producers = inner.producers.len(),
            scanned_bytes = recovered.scanned_bytes,
            truncated_bytes = recovered.truncated_bytes,
            high_watermark = inner.high_watermark,
            "partition opened"
        );
        let (progress, _) = watch::channel(0);
        Ok(Partition {
            topic: topic.to_string(),
            index,
            broker_id,
            fencing,
            inner: Mutex::new(inner),
            topic_config: Mutex::default(),
            progress,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.progress.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that changes whenever the log end, high watermark or leadership changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.progress.subscribe()
    }

    /// Leader epoch check, producer gate, append: one step under the lock. Client batches and
    /// coordinator markers come through here (as a group of one, [`Partition::append_group`]).
    /// `batch` is one CRC-checked batch.
    pub fn append(
        &self,
        batch: &Bytes,
        header: &BatchHeader,
        request_leader_epoch: i32,
        acks_all: bool,
    ) -> Result<Appended, AppendError> {
        let offer = Offer { batch, header, leader_epoch: request_leader_epoch, acks_all };
        self.append_group(std::slice::from_ref(&offer)).pop().expect("one answer for one batch")
    }

    /// [`Partition::append`] for consecutive batches, in order, in one step under the lock:
    /// each passes the leader-epoch check and the producer gate as if appended alone (a
    /// batch's sequence may follow one earlier in the group), and those admitted go to the log
    /// in one vectored write (more where the active segment rolls in between). A failed write
    /// fails every batch it carried and every one after it, and the producer state is put back
    /// as it was before them.
    ///
    /// One answer per batch, up to and including the first that needs the coordinator's
    /// verification ([`AppendError::NeedsVerification`]): the batches after it are not looked
    /// at, since they must wait for that answer.
    pub fn append_group(&self, offers: &[Offer<'_>]) -> Vec<Result<Appended, AppendError>> {
        let mut g = self.lock();
        let mut answers: Vec<Result<Appended, AppendError>> = Vec::with_capacity(offers.len());
        let mut chunk = Chunk::default();
        let mut failed: Option<LogError> = None;
        for offer in offers {
            if let Some(e) = &failed {
                answers.push(Err(AppendError::Storage(e.clone())));
                continue;
            }
            if let Err(e) = g.leadership.check(offer.leader_epoch) {
                decided(&mut answers, &mut chunk, Err(e.into()));
                continue;
            }
            if let Some((isr, min_isr)) =
                g.replica_set.as_ref().and_then(ReplicaSet::below_min_isr).filter(|_| offer.acks_all)
            {
                decided(&mut answers, &mut chunk, Err(AppendError::NotEnoughReplicas { isr, min_isr }));
                continue;
            }
            let leader_epoch = g.leadership.leader_epoch;
            let header = offer.header;
            match g.producers.check(header) {
                Err(e) => {
                    decided(&mut answers, &mut chunk, Err(e.into()));
                    continue;
                }
                Ok(Admit::Duplicate { base_offset }) => {
                    // A producer whose batches or markers are being retried is not idle.
                    g.producers.touch(header.producer_id);
                    let end_offset = base_offset + i64::from(header.last_offset_delta) + 1;
                    decided(
                        &mut answers,
                        &mut chunk,
                        Ok(Appended::Duplicate { base_offset, end_offset, leader_epoch }),
                    );
                    continue;
                }
                Ok(Admit::NeedsVerification(guard)) => {
                    let (producer_id, epoch) = (header.producer_id, header.producer_epoch);
                    decided(
                        &mut answers,
                        &mut chunk,
                        Err(AppendError::NeedsVerification { producer_id, epoch, guard }),
                    );
                    break;
                }
                Ok(Admit::Append) => {}
            }
            if let Err(e) = g.make_room(&mut chunk, offer.batch.len() as u64, &mut answers) {
                failed = Some(e.clone());
                answers.push(Err(AppendError::Storage(e)));
                continue;
            }
            let base_offset = chunk.next_offset(&g.log);
            let mut prefix = [0u8; 16];
            prefix.copy_from_slice(&offer.batch[..16]);
            set_base_offset(&mut prefix, base_offset);
            set_partition_leader_epoch(&mut prefix, leader_epoch);
            let stored = BatchHeader { base_offset, partition_leader_epoch: leader_epoch, ..*header };
            g.stage(&mut chunk, Some(answers.len()), prefix, offer.batch.clone(), stored);
            // Stands if the chunk's write succeeds (`write_chunk` answers the error otherwise).
            let end_offset = stored.last_offset() + 1;
            answers.push(Ok(Appended::New { base_offset, end_offset, leader_epoch }));
        }
        let _ = g.write_chunk(&mut chunk, &mut answers); // a failure is in the answers
        let appended = answers.iter().any(|a| matches!(a, Ok(Appended::New { .. })));
        if appended {
            g.on_leader_progress();
            drop(g);
            self.bump();
        }
        answers
    }

    /// What a sync would cover, if anything is written but not yet durable: the log end, a
    /// handle to fsync, and the truncation generation to hand back to [`Partition::mark_durable`].
    pub fn sync_target(&self) -> Option<(i64, Arc<dyn StoredFile>, u64)> {
        let g = self.lock();
        let end = g.log.end_offset();
        // Only the active segment can hold unsynced bytes: a segment is synced when it rolls.
        (end > g.durable_end && !g.log.has_failed()).then(|| (end, g.log.active_file(), g.truncations))
    }

    /// A sync taken at `generation` covering everything below `end` succeeded. Ignored if the
    /// log was truncated since: the bytes now below `end` may be newer than the sync.
    pub fn mark_durable(&self, end: i64, generation: u64) {
        let mut g = self.lock();
        if generation == g.truncations && end > g.durable_end {
            g.durable_end = end.min(g.log.end_offset());
            g.on_leader_progress();
            drop(g);
            self.bump();
        }
    }

    /// An fdatasync failed: the kernel may have dropped the unsynced pages, so nothing written
    /// since the last good sync can be promised any more. The log stops taking writes; waiting
    /// acknowledgements time out with a storage error; reads go on.
    pub fn storage_failed(&self, detail: String) {
        self.lock().log.fail(detail);
        self.bump();
    }

    /// Count only what is on disk of this replica's log in the high watermark while it leads
    /// (`--fsync always`; see [`Inner`]'s `sync_before_commit`).
    pub fn set_sync_before_commit(&self, on: bool) {
        self.lock().sync_before_commit = on;
    }

    /// The leader epoch of the partition's last unclean election (-1: none), from the
    /// coordinator's assignment, learnt before the leadership it comes with: a replica that
    /// becomes leader (at that epoch or a later one) first cuts, above its high watermark,
    /// what it holds from before that epoch. That was committed nowhere it knows of, and may be
    /// a zombie's batch it appended as a stale leader after the fence marker went to the leader
    /// of the time (it verified the zombie before that): a clean election never makes such a
    /// replica lead without first cutting that suffix as a follower, an unclean one would
    /// commit it. What leaders wrote from the unclean epoch on is never cut this way.
    pub fn set_unclean_leader_epoch(&self, leader_epoch: i32) {
        self.lock().unclean_leader_epoch = leader_epoch;
    }

    /// The id of the topic this replica belongs to (the broker sets it from its directory and
    /// from the coordinator's assignments; 0 until then).
    pub fn set_topic_id(&self, topic_id: u128) {
        self.lock().topic_id = topic_id;
    }

    /// The id of the topic this replica belongs to (0: not known).
    pub fn topic_id(&self) -> u128 {
        self.lock().topic_id
    }

    /// Keep verifications when this replica becomes leader (the broker never does: a
    /// verification made under an earlier leadership may predate a fence this replica never
    /// got). Only for the simulator's mutation that shows what forgetting them prevents.
    pub fn set_keep_verifications(&self, on: bool) {
        self.lock().keep_verifications = on;
    }

    /// Keep the whole log when leading after an unclean election (the broker never does; see
    /// [`Partition::set_unclean_leader_epoch`]). Only for the simulator's mutation that shows what
    /// the cut prevents.
    pub fn set_keep_log_after_unclean(&self, on: bool) {
        self.lock().keep_log_after_unclean = on;
    }

    /// Whether this log holds, on disk, the batch a leader of `leader_epoch` wrote at
    /// `base_offset..end_offset` (the same offsets and leader epoch: the same batch, since a
    /// leader writes each offset once per epoch).
    pub fn holds_durably(&self, base_offset: i64, end_offset: i64, leader_epoch: i32) -> bool {
        let g = self.lock();
        g.durable_end >= end_offset
            && g.log.end_offset() >= end_offset
            && base_offset >= g.log.start_offset()
            && g.log.batch_start(base_offset) == base_offset
            && g.log.epoch_at(base_offset) == Some(leader_epoch)
    }

    /// The leader epoch of the batch holding `offset`, as this log stores it.
    pub fn stored_epoch_at(&self, offset: i64) -> Option<i32> {
        self.lock().log.epoch_at(offset)
    }

    /// Whether everything below `end_offset` is on disk.
    pub fn is_durable(&self, end_offset: i64) -> bool {
        self.lock().durable_end >= end_offset
    }

    /// Whether `end_offset` is committed (below the high watermark) while this replica still
    /// leads at `leader_epoch`; `Err` leadership lost.
    pub fn committed(&self, end_offset: i64, leader_epoch: i32) -> Result<Committed, LeaderEpochError> {
        let g = self.lock();
        g.leadership.check(leader_epoch)?;
        if g.high_watermark < end_offset {
            return Ok(Committed::NotYet);
        }
        // Committed while the ISR had the minimum; it may have shrunk below it since.
        Ok(match g.replica_set.as_ref().and_then(ReplicaSet::counted_below_min_isr) {
            Some((replicas, min_isr)) => Committed::BelowMinIsr { replicas, min_isr },
            None => Committed::Yes,
        })
    }

    /// Set the topic's `min.insync.replicas` (from the coordinator, before [`Partition::learn`]).
    pub fn set_min_insync_replicas(&self, min_isr: i32) {
        let mut g = self.lock();
        g.min_isr = min_isr;
        let leader_end = g.leader_end();
        let moved = g.replica_set.as_mut().is_some_and(|rs| rs.set_min_isr(min_isr, leader_end));
        if moved {
            g.high_watermark = g.replica_set.as_ref().map_or(g.high_watermark, ReplicaSet::high_watermark);
            drop(g);
            self.bump();
        }
    }

    /// The topic's configs (`segment.bytes`, `segment.ms`, `retention.ms`, `retention.bytes`
    /// over `base`, the broker's log settings; the rest the produce path reads through
    /// [`Partition::topic_config`]).
    pub fn set_topic_config(&self, config: protocol::topic_config::TopicConfig, base: &LogConfig) {
        let mut g = self.lock();
        let log = LogConfig {
            segment_bytes: config.segment_bytes.unwrap_or(base.segment_bytes),
            retention_ms: config.retention_ms.unwrap_or(base.retention_ms),
            retention_bytes: config.retention_bytes.unwrap_or(base.retention_bytes),
            segment_ms: config.segment_ms.or(base.segment_ms),
            ..*g.log.config()
        };
        if *g.log.config() != log {
            tracing::info!(topic = %self.topic, partition = self.index, ?log, "topic configs applied to the log");
            g.log.set_config(log);
        }
        drop(g);
        *self.topic_config.lock().unwrap_or_else(|p| p.into_inner()) = config;
    }

    /// The topic's configs as last learnt.
    pub fn topic_config(&self) -> protocol::topic_config::TopicConfig {
        *self.topic_config.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The follower path: check the sender's leader epoch and that this log matches the
    /// leader's before `from_offset` (the batch before it has `prev_epoch`), cut any suffix that
    /// does not, and append the leader's batches as they are. Returns the end of what this log
    /// now holds in agreement with the leader (what the follower acknowledges).
    pub fn apply_replicated(&self, req: &ReplicateRequest, epoch_checks: bool) -> Result<i64, ReplicateError> {
        self.apply_replicated_at(req, epoch_checks).map(|(end, _)| end)
    }

    /// [`Partition::apply_replicated`], also returning the log's cut generation right after it,
    /// for [`Partition::durable_at`]: an acknowledgement held until its end is on disk must be
    /// dropped if the log is cut meanwhile, since the bytes then below that end may be another
    /// leader's.
    pub fn apply_replicated_at(
        &self,
        req: &ReplicateRequest,
        epoch_checks: bool,
    ) -> Result<(i64, u64), ReplicateError> {
        let ReplicateRequest {
            leader_epoch,
            leader_id,
            from_offset,
            prev_epoch,
            high_watermark,
            log_start_offset,
            low_watermark,
            ref producer_state,
            ref records,
            ..
        } = *req;
        // One piece as decoded from a frame; joined here only when a leader in this process
        // handed its pieces over directly (the simulator, tests).
        let records = &records.contiguous();
        let mut g = self.lock();
        // By topic id, as Kafka's followers fetch: a leader of a deleted topic's replica (or of
        // the one created after it) may carry the same leader id and epoch as this replica's.
        let mine = g.topic_id;
        if req.topic_id != 0 && mine != 0 && req.topic_id != mine {
            return Err(ReplicateError::OtherTopic { sent: req.topic_id, mine });
        }
        g.leadership.check_replication(leader_epoch, leader_id, epoch_checks)?;
        if from_offset < 0 {
            return Err(ReplicateError::Corrupt(format!("from_offset {from_offset} is negative")));
        }
        let own_start = g.log.start_offset();
        // The leader holds nothing before `from_offset` (retention deleted it) and this log ends
        // before it, or the leader cannot say which epoch the batch before it had; or this log
        // no longer holds what comes before it. Then this replica starts over at `from_offset`
        // (Kafka's truncate-fully-and-start-at): everything below it was committed when the
        // leader deleted it.
        let at_leader_start = from_offset > 0 && from_offset == log_start_offset;
        let unverifiable = at_leader_start && prev_epoch < 0 && from_offset != own_start;
        // This log ends before the leader's start: the gap is gone from the leader.
        let behind = at_leader_start && from_offset > g.log.end_offset();
        if unverifiable || behind || from_offset < own_start {
            self.restart_log_at(&mut g, from_offset, (prev_epoch >= 0).then_some(prev_epoch), producer_state)?;
        }
        let leo = g.log.end_offset();
        if from_offset > leo {
            return Err(ReplicateError::Mismatch { hint: leo, diverging_epoch: -1, log_end_offset: leo });
        }
        if from_offset > g.log.start_offset() {
            let mine = g.log.epoch_at(from_offset - 1);
            if mine != Some(prev_epoch) {
                // Report this replica's epoch there and where its run starts (the epoch cache);
                // the leader works out where that epoch ends in its own log.
                let hint = g.log.epoch_start(from_offset - 1);
                let diverging_epoch = mine.unwrap_or(-1);
                return Err(ReplicateError::Mismatch { hint, diverging_epoch, log_end_offset: leo });
            }
        }
        // Raft's rule, per batch: a batch this log already holds (same base offset, same leader
        // epoch: a leader writes each offset once per epoch) is skipped; the first that
        // conflicts cuts this log there. Never cut on the offset alone: a resent or reordered
        // request must not remove batches a later request delivered and this replica acked.
        // The batches to append go to the log together, in one write (more where the segment
        // rolls); what comes before a refused batch is still written.
        let mut matched_end = from_offset;
        let mut chunk = Chunk::default();
        let sender = (leader_id, leader_epoch, epoch_checks);
        let applied = self.stage_replicated(&mut g, records, &mut matched_end, &mut chunk, sender);
        let written = g.write_chunk(&mut chunk, &mut []);
        applied?;
        written?;
        if records.is_empty() && g.log.epoch_at(from_offset).is_some_and(|e| e < leader_epoch) {
            // An empty push means the leader's log ended at `from_offset` when it was sent, and
            // that leader only appends at its own epoch: a batch here from an earlier epoch is in
            // no log that leads. Cut it, so the follower does not keep a longer, divergent log.
            Self::may_cut(&mut g, from_offset, sender)?;
            self.cut_divergent(&mut g, from_offset)?;
        }
        // What this replica now holds in agreement with the leader: the batches just sent and
        // everything before them. Anything past it may still be a divergent suffix, so it is
        // neither acknowledged nor counted in the high watermark.
        g.high_watermark = g.high_watermark.max(high_watermark.min(matched_end));
        g.leader_high_watermark = high_watermark;
        // DeleteRecords on the leader: hide what it hid, as far as this log agrees with it (the
        // leader's start is below its high watermark), on disk before the acknowledgement.
        if g.log.delete_before(low_watermark.min(matched_end)).map_err(ReplicateError::Storage)? {
            let start = g.log.log_start_offset();
            g.txns.forget_before(start);
        }
        g.refusing = None;
        let generation = g.truncations;
        drop(g);
        self.bump();
        Ok((matched_end, generation))
    }

    /// [`Partition::apply_replicated_at`]'s batches, checked and staged in `chunk` in order
    /// (written when it fills a segment); `matched_end` follows the last one this log holds or
    /// has staged.
    fn stage_replicated(
        &self,
        g: &mut Inner,
        records: &Bytes,
        matched_end: &mut i64,
        chunk: &mut Chunk,
        sender: (i32, i32, bool),
    ) -> Result<(), ReplicateError> {
        for item in BatchIter::new(records.clone()) {
            let (h, bytes) = item.map_err(|e| ReplicateError::Corrupt(e.to_string()))?;
            verify_crc(&bytes, &h).map_err(|e| ReplicateError::Corrupt(e.to_string()))?;
            if h.base_offset != *matched_end {
                return Err(ReplicateError::Corrupt(format!(
                    "batch at offset {} where {matched_end} was due",
                    h.base_offset
                )));
            }
            let end = h.base_offset + i64::from(h.last_offset_delta) + 1;
            // Staged batches end at `matched_end`, so only a batch before anything staged can
            // be one this log already holds.
            let leo = chunk.next_offset(&g.log);
            if h.base_offset < leo {
                let held = end <= leo
                    && g.log.batch_start(h.base_offset) == h.base_offset
                    && g.log.batch_start(end) == end
                    && g.log.epoch_at(h.base_offset) == Some(h.partition_leader_epoch);
                if held {
                    *matched_end = end;
                    continue;
                }
                // Everything from here on is not in the leader's log: cut it, and rebuild the
                // producer state from what remains.
                Self::may_cut(g, h.base_offset, sender)?;
                self.cut_divergent(g, h.base_offset)?;
            }
            g.producers.check_replicated(&h)?;
            g.make_room(chunk, bytes.len() as u64, &mut [])?;
            let mut prefix = [0u8; 16];
            prefix.copy_from_slice(&bytes[..16]);
            g.stage(chunk, None, prefix, bytes, h);
            *matched_end = end;
        }
        Ok(())
    }

    /// Whether everything below `end_offset` is on disk, for an acknowledgement of what was
    /// applied at cut generation `generation` ([`Partition::apply_replicated_at`]). `None`: the
    /// log was cut since, so the offsets below `end_offset` may now hold other batches; the
    /// acknowledgement must not be sent.
    pub fn durable_at(&self, end_offset: i64, generation: u64) -> Option<bool> {
        let g = self.lock();
        (g.truncations == generation).then_some(g.durable_end >= end_offset)
    }

    /// Cut a divergent suffix at `offset` (a batch boundary): clamp the durable end and high
    /// watermark, and rebuild the producer state and transaction index from what remains.
    fn cut_divergent(&self, g: &mut Inner, offset: i64) -> Result<(), LogError> {
        let leo = g.log.end_offset();
        // Snapshots of the batches being cut go first, so none survives to describe them.
        let keep = g.log.batch_start(offset);
        snapshot::remove_outside(g.log.storage(), g.log.dir(), i64::MIN, keep).map_err(|e| LogError::Io {
            path: g.log.dir().display().to_string(),
            op: "remove snapshots",
            detail: e.to_string(),
        })?;
        let cut = g.log.truncate(offset)?;
        g.durable_end = g.durable_end.min(cut);
        g.high_watermark = g.high_watermark.min(cut);
        g.truncations += 1;
        if g.checkpointed_hw > cut {
            // Else the next start would take the cut for a loss.
            g.write_high_watermark(cut)?;
        }
        g.recover_state(self.fencing)?;
        tracing::info!(topic = %self.topic, partition = self.index, from = leo, to = cut, "truncated a divergent suffix");
        Ok(())
    }

    /// Drop the whole log and start an empty one at `offset`, with the producer state of the
    /// producers with nothing from `offset` on as the leader sent it (`producer_state`, see
    /// [`ReplicationWork::producer_state`]; none if it sent none or it does not decode).
    fn restart_log_at(
        &self,
        g: &mut Inner,
        offset: i64,
        epoch_before: Option<i32>,
        producer_state: &Bytes,
    ) -> Result<(), LogError> {
        let (start, leo) = (g.log.start_offset(), g.log.end_offset());
        snapshot::remove_all(g.log.storage(), g.log.dir()).map_err(|e| LogError::Io {
            path: g.log.dir().display().to_string(),
            op: "remove snapshots",
            detail: e.to_string(),
        })?;
        g.log.reset_to(offset, epoch_before)?;
        g.durable_end = offset;
        g.high_watermark = offset;
        g.truncations += 1;
        g.producers = if producer_state.is_empty() {
            ProducerStates::new(self.fencing)
        } else {
            ProducerStates::decode(&mut snapshot::Reader::new(producer_state), self.fencing).unwrap_or_else(|e| {
                tracing::warn!(topic = %self.topic, partition = self.index, error = ?e, "the leader's producer state does not decode; starting without it");
                ProducerStates::new(self.fencing)
            })
        };
        g.txns = TxnIndex::new();
        tracing::info!(
            topic = %self.topic,
            partition = self.index,
            start,
            end = leo,
            new_start = offset,
            "the leader's log starts past what this replica can match: starting over at its log start"
        );
        Ok(())
    }

    /// Forget the producer ids that wrote nothing here for `expiration_ms` (Kafka's
    /// `producer.id.expiration.ms`), except those with a transaction open here
    /// ([`ProducerStates::expire`]); `now_ms` is a monotonic clock. Returns how many.
    pub fn expire_producers(&self, now_ms: u64, expiration_ms: u64) -> usize {
        let mut g = self.lock();
        let Inner { producers, txns, .. } = &mut *g;
        producers.expire(now_ms, expiration_ms, |id| txns.open_since(id).is_some())
    }

    /// Retention: delete the closed segments the log's settings allow, keeping everything at or
    /// above the high watermark and the newest producer-state snapshot (the state is recovered
    /// from it, so its producers outlive the segments that carried them). `now_ms` is
    /// wall-clock time in ms since the Unix epoch (record timestamps are too).
    pub fn enforce_retention(&self, now_ms: i64) -> Result<usize, LogError> {
        let mut g = self.lock();
        if !g.log.retention_may_cut() {
            return Ok(0);
        }
        let dir = g.log.dir().to_path_buf();
        let io = |e: std::io::Error| LogError::Io {
            path: dir.display().to_string(),
            op: "snapshots",
            detail: e.to_string(),
        };
        // The newest snapshot that loads, not merely the newest file, and at or below the high
        // watermark: recovery must be able to start from it once the segments below it are
        // gone, and a later cut (never below the high watermark, outside an unclean election)
        // removes only snapshots above the cut, so this one survives every cut. (Snapshots are
        // written at every roll, so the segment holding the high watermark normally starts at
        // one; this holds also where a snapshot could not be written.)
        let start = g.log.start_offset();
        let newest_snapshot =
            snapshot::load_newest(g.log.storage(), &dir, start, g.high_watermark.min(g.log.end_offset()), self.fencing)
                .map_or(start, |(offset, ..)| offset);
        let keep_below = g.high_watermark.min(newest_snapshot);
        let deleted = g.log.enforce_retention(now_ms, keep_below)?;
        if deleted > 0 {
            let start = g.log.start_offset();
            g.txns.forget_before(start);
            snapshot::remove_outside(g.log.storage(), &dir, start, i64::MAX).map_err(io)?;
        }
        Ok(deleted)
    }

    /// A clean shutdown: sync the log, index its active segment and snapshot the producer
    /// state as of its end, so the next open reads and replays nothing; and checkpoint the high
    /// watermark.
    pub fn checkpoint(&self) -> Result<(), LogError> {
        let mut g = self.lock();
        if g.log.has_failed() {
            return Ok(());
        }
        g.log.checkpoint()?;
        g.snapshot();
        g.durable_end = g.log.end_offset();
        let hw = g.high_watermark;
        if hw != g.checkpointed_hw {
            g.write_high_watermark(hw)?;
        }
        Ok(())
    }

    /// Write the high watermark to [`HIGH_WATERMARK_FILE`] if it moved since the last write
    /// (Kafka's `replication-offset-checkpoint`, every `--high-watermark-checkpoint-interval-ms`):
    /// as far as this replica's log is on disk, so that a log found shorter than it at the next
    /// start has lost records it held durably, and a restarted leader serves what was committed
    /// at once. Returns whether it wrote.
    ///
    /// The file is written outside the partition lock (two fsyncs must not stall appends); a cut
    /// made meanwhile is caught afterwards, under the lock, and the checkpoint written again.
    pub fn checkpoint_high_watermark(&self) -> Result<bool, LogError> {
        let (hw, generation, storage, dir) = {
            let g = self.lock();
            let hw = g.high_watermark.min(g.durable_end);
            if hw == g.checkpointed_hw || g.log.has_failed() {
                return Ok(false);
            }
            (hw, g.truncations, g.log.storage_arc(), g.log.dir().to_path_buf())
        };
        write_high_watermark(storage.as_ref(), &dir, hw)?;
        let mut g = self.lock();
        if g.truncations == generation {
            g.checkpointed_hw = hw;
        } else {
            // The log was cut while the file was written: it may name records no longer here.
            let now = g.high_watermark.min(g.durable_end);
            g.write_high_watermark(now)?;
        }
        Ok(true)
    }

    /// fdatasync the whole log (a directory written without syncs, taken over by a process
    /// that acknowledges only what is on disk).
    pub fn sync_all(&self) -> Result<(), LogError> {
        let g = self.lock();
        g.log.sync_closed()?;
        g.log.active_file().sync_data().map_err(|e| LogError::Io {
            path: g.log.dir().display().to_string(),
            op: "sync",
            detail: e.to_string(),
        })
    }

    /// Why this replica may lack records it acknowledged before its restart, while it does
    /// (see [`Inner`]'s `lost`).
    pub fn lost(&self) -> Option<String> {
        self.lock().lost.clone()
    }

    /// The broker epoch of the registration that reported this replica lost, -1 if none has
    /// (or it is not lost): what its heartbeat reports beside `lost`.
    pub fn lost_reported_at(&self) -> i64 {
        let g = self.lock();
        if g.lost.is_some() {
            g.lost_reported_at
        } else {
            -1
        }
    }

    /// The registration of `broker_epoch` reported this replica lost and was answered: the
    /// coordinator took it out of its ISR then, so an ISR that holds it later was granted after
    /// it refetched. Recorded in the mark (once: the first registration that reported it).
    pub fn mark_lost_reported(&self, broker_epoch: i64) -> Result<(), LogError> {
        let mut g = self.lock();
        let Some(why) = g.lost.clone().filter(|_| g.lost_reported_at < 0) else { return Ok(()) };
        let (storage, dir) = (g.log.storage_arc(), g.log.dir().to_path_buf());
        write_lost_mark(storage.as_ref(), &dir, &why, broker_epoch)?;
        g.lost_reported_at = broker_epoch;
        Ok(())
    }

    /// The leader epoch this follower refuses, and why, if it does
    /// ([`ReplicateError::WouldCutCommitted`]).
    pub fn refusing(&self) -> Option<(i32, String)> {
        self.lock().refusing.clone()
    }

    /// A follower never cuts below its high watermark (committed records) because a leader
    /// told it to, unless an unclean election an operator asked for began that leader's history
    /// ([`Partition::set_unclean_leader_epoch`]).
    /// Off with the leader-epoch checks (`epoch_checks` false, demonstrations only): a follower
    /// then takes any leader's word, as it takes any leader's epoch. A refusal is kept as
    /// `refusing`, for the heartbeat's report.
    fn may_cut(
        g: &mut Inner,
        offset: i64,
        (leader_id, leader_epoch, epoch_checks): (i32, i32, bool),
    ) -> Result<(), ReplicateError> {
        let after_unclean = g.unclean_leader_epoch >= 0 && leader_epoch >= g.unclean_leader_epoch;
        if offset >= g.high_watermark || after_unclean || !epoch_checks {
            return Ok(());
        }
        let refused =
            ReplicateError::WouldCutCommitted { leader_id, leader_epoch, offset, high_watermark: g.high_watermark };
        g.refusing = Some((leader_epoch, refused.to_string()));
        Err(refused)
    }

    /// (log start offset, segments, bytes) of this replica's log.
    pub fn log_shape(&self) -> (i64, usize, u64) {
        let g = self.lock();
        (g.log.start_offset(), g.log.segment_count(), g.log.size_bytes())
    }

    /// What to send `follower` next, while leading at `leader_epoch` (`None` otherwise): at
    /// most `max_bytes` (but at least one batch) from `from`, or from where the replica set's
    /// bookkeeping says when `from` is `None`. `from` is for pipelined requests, which start
    /// where the one before them ended. `now_ms` is when the work is taken.
    pub fn replication_work(
        &self,
        follower: i32,
        leader_epoch: i32,
        (from, max_bytes): (Option<i64>, usize),
        now_ms: u64,
    ) -> Result<Option<ReplicationWork>, FetchError> {
        let (
            from_offset,
            prev_epoch,
            high_watermark,
            leader_leo,
            found,
            (log_start_offset, low_watermark),
            producer_state,
        ) = {
            let g = self.lock();
            if !g.leadership.is_leader || g.leadership.leader_epoch != leader_epoch {
                return Ok(None);
            }
            let Some(f) = g.replica_set.as_ref().and_then(|rs| rs.follower(follower)) else { return Ok(None) };
            // A follower behind this log's start starts over there (see `apply_replicated`).
            let from = from.unwrap_or(f.next_offset).min(g.log.end_offset()).max(g.log.start_offset());
            let prev_epoch = if from == 0 { -1 } else { g.log.epoch_at(from - 1).unwrap_or(-1) };
            // From memory if the log still keeps these batches; else a range of the file, read
            // outside the lock.
            let found = match g.log.read_tail(from, max_bytes, i64::MAX) {
                Some((records, end)) => Found::Kept(records, end),
                None => Found::InFile(g.log.locate(from, max_bytes, i64::MAX)),
            };
            let log_start = g.log.start_offset();
            let mut producer_state = Vec::new();
            if from == log_start && from > 0 {
                g.producers.encode_before(from, &mut producer_state);
            }
            let low_watermark = g.log.log_start_offset();
            (
                from,
                prev_epoch,
                g.high_watermark,
                g.log.end_offset(),
                found,
                (log_start, low_watermark),
                Bytes::from(producer_state),
            )
        };
        let from_memory = matches!(found, Found::Kept(..));
        let (records, end_offset) = match found {
            Found::Kept(records, end) => (records, end),
            Found::InFile(range) => {
                let end_offset = range.as_ref().map_or(from_offset, |r| r.end_offset);
                (read_range(range)?.into(), end_offset)
            }
        };
        Ok(Some(ReplicationWork {
            from_offset,
            prev_epoch,
            high_watermark,
            log_start_offset,
            low_watermark,
            producer_state,
            records,
            from_memory,
            end_offset,
            sent: Sent { leader_leo, at_ms: now_ms },
        }))
    }

    /// A follower acknowledged up to `log_end_offset` at `leader_epoch`, answering a request
    /// taken as `sent` ([`ReplicationWork::sent`]).
    pub fn on_replica_ack(&self, follower: i32, leader_epoch: i32, log_end_offset: i64, sent: Sent) {
        let mut g = self.lock();
        if g.leadership.leader_epoch != leader_epoch || !g.leadership.is_leader {
            return;
        }
        let leader_end = g.leader_end();
        let moved = g.replica_set.as_mut().is_some_and(|rs| rs.on_ack(follower, log_end_offset, leader_end, sent));
        g.trim_tail();
        if moved {
            g.high_watermark = g.replica_set.as_ref().map_or(g.high_watermark, |rs| rs.high_watermark());
            drop(g);
            self.bump();
        }
    }

    /// A follower's log diverges before `from_offset`: it holds `diverging_epoch` there (-1:
    /// `from_offset` is past its end, which is `hint`), and that epoch's run starts at `hint`.
    /// Resend from where the two logs can agree (KIP-101/279): the end, in this log, of the
    /// largest epoch at or below the follower's; or, if this log never had the follower's epoch,
    /// no later than where the follower's run of it starts.
    pub fn on_replica_mismatch(
        &self,
        follower: i32,
        leader_epoch: i32,
        from_offset: i64,
        hint: i64,
        diverging_epoch: i32,
    ) {
        let mut g = self.lock();
        if g.leadership.leader_epoch != leader_epoch {
            return;
        }
        let next = if diverging_epoch < 0 {
            hint
        } else {
            let (epoch, end) = g.log.epoch_end(diverging_epoch);
            if epoch == diverging_epoch {
                end
            } else {
                end.min(hint)
            }
        };
        // Always move back, and always to a batch boundary of this log.
        let next = if next < from_offset { next } else { from_offset - 1 };
        let next = g.log.batch_start(next.max(0));
        if let Some(rs) = g.replica_set.as_mut() {
            rs.on_mismatch(follower, next);
        }
    }

    /// As leader: the ISR to ask the coordinator for now, if it should change, with the leader
    /// epoch and the partition epoch the change is based on. From this call on, the high
    /// watermark counts its members (KIP-841): choosing the members and counting them happen
    /// under one lock, so nothing is committed in between that a member being added lacks.
    /// Call it just before sending the change.
    pub fn propose_isr(&self, now_ms: u64, lag_ms: u64) -> Option<(i32, i32, Vec<i32>)> {
        let mut g = self.lock();
        let leader_epoch = g.leadership.leader_epoch;
        let rs = g.replica_set.as_mut()?;
        let isr = rs.wanted_isr(now_ms, lag_ms)?;
        rs.propose_isr(&isr);
        Some((leader_epoch, rs.partition_epoch(), isr))
    }

    /// What the metrics' gauges read off this partition (see
    /// [`crate::metrics::BrokerMetrics::refresh`]).
    pub fn reading(&self) -> crate::metrics::PartitionReading {
        let g = self.lock();
        let leading = g.leadership.is_leader;
        let (under_replicated, replication_lag_records) = match (leading, g.replica_set.as_ref()) {
            (true, Some(rs)) => {
                let leo = g.log.end_offset();
                let followers = rs.follower_ids();
                let lag = followers
                    .iter()
                    .filter_map(|id| rs.follower(*id))
                    .map(|f| (leo - f.log_end_offset).max(0))
                    .max()
                    .unwrap_or(0);
                (rs.isr().len() < followers.len() + 1, lag)
            }
            _ => (false, 0),
        };
        crate::metrics::PartitionReading {
            leading,
            under_replicated,
            replication_lag_records,
            truncations: g.truncations,
            producer_ids: g.producers.len(),
        }
    }

    /// As leader: the replicas the high watermark waits for (see [`ReplicaSet::counted`]).
    pub fn counted_replicas(&self) -> Option<Vec<i32>> {
        self.lock().replica_set.as_ref().map(ReplicaSet::counted)
    }

    /// The coordinator answered the ISR change asked under `leader_epoch` (an answer it made
    /// durable first; the caller passes no other). A newer ISR is taken, which settles the
    /// change; a refusal reporting the partition epoch this leader holds (the change was
    /// refused, not overtaken: in practice INVALID_REQUEST) drops the proposal. Anything else
    /// (a newer leadership, an answer without state) leaves the proposal counted until the
    /// next heartbeat or answer: a deposed leader must not commit with fewer replicas.
    pub fn on_isr_answer(&self, leader_epoch: i32, answer: &AlterPartitionResponse) {
        let mut g = self.lock();
        if g.leadership.leader_epoch != leader_epoch || answer.leader_epoch != leader_epoch {
            return;
        }
        let leader_end = g.leader_end();
        let Some(rs) = g.replica_set.as_mut() else { return };
        let (newer, mut moved) = rs.learn_isr(answer.partition_epoch, &answer.isr, leader_end);
        if !newer && !answer.status.is_ok() && answer.partition_epoch == rs.partition_epoch() {
            moved = rs.drop_proposal(leader_end);
        }
        let hw = rs.high_watermark();
        g.trim_tail();
        if moved {
            g.high_watermark = hw;
        }
        if moved || newer {
            drop(g);
            // Wake whoever waits for the high watermark (acks=all answers, markers) or for the
            // low watermark, which a smaller ISR may move (DeleteRecords).
            self.bump();
        }
    }

    /// Learn this partition's leadership from the coordinator.
    pub fn learn(
        &self,
        leader_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: &[i32],
        isr: &[i32],
        now_ms: u64,
    ) -> Option<RoleChange> {
        let mut g = self.lock();
        let is_leader = leader_id == self.broker_id;
        if g.lost.is_some() && isr.contains(&self.broker_id) {
            // Back in sync (the coordinator took it out at its restart and a leader let it in
            // once it held every committed record), or the sole replica, which nothing beats.
            tracing::info!(topic = %self.topic, partition = self.index, "replica back in the ISR: no longer lost");
            let (storage, dir) = (g.log.storage_arc(), g.log.dir().to_path_buf());
            match storage.remove(&dir.join(LOST_FILE)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the lost mark; it stays lost");
                }
                _ => {
                    storage.sync_dir(&dir);
                    g.lost = None;
                    g.lost_reported_at = -1;
                }
            }
        }
        if !g.leadership.learn(is_leader, leader_id, leader_epoch) {
            // Same epoch: keep the ISR in step with the coordinator's record, if this one is
            // newer than the leader's (a heartbeat answered before a change was applied, and
            // read after, must not undo it).
            let leader_end = g.leader_end();
            let same_epoch = g.leadership.leader_epoch == leader_epoch;
            if let (true, Some(rs)) = (same_epoch, g.replica_set.as_mut()) {
                let (_, moved) = rs.learn_isr(partition_epoch, isr, leader_end);
                let hw = rs.high_watermark();
                g.trim_tail();
                if moved {
                    g.high_watermark = hw;
                    // Wake whoever waits for the high watermark (acks=all answers, markers).
                    drop(g);
                    self.bump();
                }
            }
            return None;
        }
        g.replicas = replicas.to_vec();
        let (hw, leo) = (g.high_watermark, g.log.end_offset());
        let before_unclean =
            g.unclean_leader_epoch >= 0 && g.log.epoch_at(hw).is_some_and(|e| e < g.unclean_leader_epoch);
        if is_leader
            && leader_epoch >= g.unclean_leader_epoch
            && leo > hw
            && before_unclean
            && !g.keep_log_after_unclean
        {
            // The partition's history since an unclean election is its leaders' from that
            // epoch on: what this replica holds from before it, above its high watermark, was
            // committed nowhere it knows of (see `set_unclean_leader_epoch`).
            match self.cut_divergent(&mut g, hw) {
                Ok(()) => {
                    tracing::warn!(topic = %self.topic, partition = self.index, from = leo, to = hw, "leading after an unclean election: cut what was never committed before it")
                }
                Err(e) => {
                    tracing::error!(topic = %self.topic, partition = self.index, error = %e, "leading after an unclean election, and cannot cut the log to the high watermark")
                }
            }
        }
        if is_leader && g.sync_before_commit {
            // Committed only as far as it is on this leader's disk (a replica that was out of
            // the ISR may have learnt a high watermark past what it synced).
            g.high_watermark = g.high_watermark.min(g.durable_end);
        }
        let change = if is_leader {
            let hw = g.high_watermark;
            let ends = (g.log.end_offset(), g.leader_end());
            let min_isr = g.min_isr;
            let rs =
                ReplicaSet::with_min_isr(self.broker_id, replicas, (isr, partition_epoch), ends, hw, now_ms, min_isr);
            g.high_watermark = rs.high_watermark();
            let followers = rs.follower_ids();
            g.replica_set = Some(rs);
            // Kept from now on (what came before is read from the file once).
            g.trim_tail();
            // Verifications end with the leadership that made them: one made when this replica
            // led before may predate a fence whose marker went to another leader while this one
            // was away (an unclean election brings it back without it), so the first write of
            // each producer id under this leadership is checked with the coordinator again.
            if !g.keep_verifications {
                g.producers.begin_leadership(leader_epoch);
            }
            RoleChange::BecameLeader { leader_epoch, followers }
        } else {
            g.replica_set = None;
            g.trim_tail();
            RoleChange::BecameFollower { leader_epoch }
        };
        drop(g);
        self.bump();
        Some(change)
    }

    /// The partition's topic was deleted: stop leading and following for good (every
    /// leader-epoch check fails from now on, and replication to or from it stops).
    pub fn retire(&self) {
        self.learn(-1, i32::MAX, i32::MAX, &[], &[], 0);
    }

    /// The coordinator confirmed `(producer_id, epoch)` for this partition (`transactional`:
    /// for transactional writes), answering the verification asked under `guard`. False if the
    /// producer's transaction here ended (a marker) since: the answer does not count.
    pub fn mark_verified(&self, producer_id: i64, epoch: i16, transactional: bool, guard: VerificationGuard) -> bool {
        self.lock().producers.mark_verified(producer_id, epoch, transactional, guard)
    }

    /// The guard a verification of `producer_id` would carry now (for tests and the simulator).
    pub fn verification_guard(&self, producer_id: i64) -> VerificationGuard {
        self.lock().producers.guard(producer_id)
    }

    /// Whether this replica's log stopped taking writes after a failed write or fdatasync.
    pub fn log_failed(&self) -> bool {
        self.lock().log.has_failed()
    }

    /// Current leadership as this broker knows it.
    pub fn leadership(&self) -> Leadership {
        self.lock().leadership
    }

    /// The epoch this partition holds for `producer_id`.
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.lock().producers.epoch_of(producer_id)
    }

    /// The producers this replica knows (Kafka's DescribeProducers), if it leads at
    /// `request_leader_epoch` (-1: any).
    pub fn active_producers(&self, request_leader_epoch: i32) -> Result<Vec<ActiveProducer>, LeaderEpochError> {
        let g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        Ok(g.producers
            .active()
            .into_iter()
            .map(|(producer_id, epoch, last_sequence)| ActiveProducer {
                producer_id,
                epoch,
                last_sequence,
                txn_start_offset: g.txns.open_since(producer_id),
            })
            .collect())
    }

    /// Every batch header in the log, in offset order, with the marker kind of control batches
    /// (the simulator compares replicas with them).
    pub fn batch_headers(&self) -> Result<Vec<(BatchHeader, Option<MarkerKind>)>, LogError> {
        let g = self.lock();
        g.log.headers_from(g.log.start_offset())
    }

    /// (log end offset, high watermark).
    pub fn progress(&self) -> (i64, i64) {
        let g = self.lock();
        (g.log.end_offset(), g.high_watermark)
    }

    /// Committed batches from the one holding `offset`, at most `max_bytes` (at least one batch).
    /// The lock is held only to find the bytes; they are read after it is released.
    pub fn fetch(
        &self,
        offset: i64,
        max_bytes: usize,
        request_leader_epoch: i32,
        isolation: i8,
    ) -> Result<Fetched, FetchError> {
        let (range, high_watermark, last_stable_offset, aborted, leader_epoch, log_start_offset) = {
            let g = self.lock();
            g.leadership.check(request_leader_epoch)?;
            let (start, end) = (g.log.log_start_offset(), g.log.end_offset());
            if offset < start || offset > end {
                return Err(FetchError::OutOfRange { offset, start, end });
            }
            let hw = g.high_watermark;
            let lso = g.txns.last_stable_offset(hw);
            let committed = isolation == READ_COMMITTED;
            let limit = if committed { lso } else { hw };
            let range = g.log.locate(offset, max_bytes, limit);
            // The aborted transactions overlapping the records returned, not all up to the
            // limit: a fetch's answer (and the search for it) does not grow with the index.
            let aborted = match (&range, committed) {
                (Some(r), true) => g.txns.aborted_between(offset, r.end_offset),
                _ => Vec::new(),
            };
            (range, hw, lso, aborted, g.leadership.leader_epoch, start)
        };
        let records = read_range(range)?;
        Ok(Fetched { records, high_watermark, last_stable_offset, aborted, leader_epoch, log_start_offset })
    }

    /// The log's start, high watermark and last stable offset, if this replica leads at
    /// `request_leader_epoch` (-1: any).
    pub fn offsets(&self, request_leader_epoch: i32) -> Result<Offsets, LeaderEpochError> {
        let g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        let high_watermark = g.high_watermark;
        Ok(Offsets {
            log_start_offset: g.log.log_start_offset(),
            high_watermark,
            last_stable_offset: g.txns.last_stable_offset(high_watermark),
            leader_epoch: g.leadership.leader_epoch,
        })
    }

    /// DeleteRecords (KIP-107) on the leader at `request_leader_epoch` (-1: any): readers see
    /// nothing below `offset` (-1: the high watermark) from now on, recorded on disk before
    /// this returns. Producer state stays as it is (Kafka since KAFKA-7190: a producer id is
    /// forgotten when it expires, not when its batches go); the aborted transactions wholly
    /// below the new start leave the index. Followers hide the same records when the next
    /// Replicate carries the start; returns the offset [`Partition::low_watermark`] must reach
    /// before the deletion is done, with the leader epoch it was done at. An offset at or below
    /// the start changes nothing.
    pub fn delete_records(&self, request_leader_epoch: i32, offset: i64) -> Result<(i64, i32), DeleteRecordsError> {
        let mut g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        let high_watermark = g.high_watermark;
        let target = if offset == -1 { high_watermark } else { offset };
        if !(0..=high_watermark).contains(&target) {
            return Err(DeleteRecordsError::OutOfRange { offset, high_watermark });
        }
        let leader_epoch = g.leadership.leader_epoch;
        if g.log.delete_before(target)? {
            let start = g.log.log_start_offset();
            g.txns.forget_before(start);
            tracing::info!(topic = %self.topic, partition = self.index, log_start_offset = start, "records deleted below the new log start");
            drop(g);
            self.bump();
        }
        Ok((target, leader_epoch))
    }

    /// Kafka's low watermark on the leader at `request_leader_epoch` (-1: any): the lowest log
    /// start offset of this replica and the replicas the high watermark counts
    /// ([`ReplicaSet::low_watermark`]).
    pub fn low_watermark(&self, request_leader_epoch: i32) -> Result<i64, LeaderEpochError> {
        let g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        let start = g.log.log_start_offset();
        Ok(g.replica_set.as_ref().map_or(start, |rs| rs.low_watermark(start)))
    }

    /// DescribeLogDirs: the bytes this replica's log holds, and how far its end is behind the
    /// partition's high watermark (on a follower, the one its leader sent last; 0 on a leader).
    pub fn log_dir_stats(&self) -> (u64, i64) {
        let g = self.lock();
        let hw = if g.leadership.is_leader { g.high_watermark } else { g.leader_high_watermark };
        (g.log.size_bytes(), (hw - g.log.end_offset()).max(0))
    }

    /// The log start offset readers see here.
    pub fn log_start_offset(&self) -> i64 {
        self.lock().log.log_start_offset()
    }

    /// A follower answered with its log start offset, on its disk (while leading at
    /// `leader_epoch`).
    pub fn on_replica_log_start(&self, follower: i32, leader_epoch: i32, log_start_offset: i64) {
        let mut g = self.lock();
        if g.leadership.leader_epoch != leader_epoch || !g.leadership.is_leader {
            return;
        }
        if g.replica_set.as_mut().is_some_and(|rs| rs.on_log_start(follower, log_start_offset)) {
            drop(g);
            self.bump();
        }
    }

    /// OffsetForLeaderEpoch, if this replica leads at `request_leader_epoch` (-1: any): the
    /// largest leader epoch of this log at or below `epoch` and the offset where it ends (the
    /// start of the next epoch, or the log end). For an epoch older than every one this log
    /// knows (retention took the first ones), as Kafka answers: that epoch, ending where the
    /// first known one starts (not below the log start), so a consumer truncates to there
    /// instead of resetting its position. `(-1, -1)` for a negative epoch or an empty cache.
    pub fn epoch_end_offset(&self, request_leader_epoch: i32, epoch: i32) -> Result<(i32, i64), LeaderEpochError> {
        let g = self.lock();
        g.leadership.check(request_leader_epoch)?;
        Ok(match (g.log.epoch_end(epoch), g.log.first_epoch_start()) {
            ((-1, _), Some(first)) if epoch >= 0 => (epoch, first.max(g.log.log_start_offset())),
            ((-1, _), _) => (-1, -1),
            (found, _) => found,
        })
    }

    /// ListOffsets by time: the first record below the high watermark (the last stable offset
    /// with read_committed) whose timestamp is at least `timestamp_ms`, or with
    /// [`TIMESTAMP_MAX`] the record with the largest timestamp; `None` if there is none. Whole
    /// segments whose newest timestamp is older are skipped; within a segment the batches are
    /// read in order (there is no time index).
    pub fn find_by_time(
        &self,
        request_leader_epoch: i32,
        timestamp_ms: i64,
        isolation: i8,
    ) -> Result<Option<FoundByTime>, FetchError> {
        let (mut offset, limit, target, start) = {
            let g = self.lock();
            g.leadership.check(request_leader_epoch)?;
            let hw = g.high_watermark;
            let limit = if isolation == READ_COMMITTED { g.txns.last_stable_offset(hw) } else { hw };
            match g.log.time_search_start(timestamp_ms) {
                Some((from, target)) => (from, limit, target, g.log.log_start_offset()),
                None => return Ok(None),
            }
        };
        let mut best: Option<FoundByTime> = None;
        loop {
            let range = self.lock().log.locate(offset, TIME_SCAN_BYTES, limit);
            let Some(range) = range else { return Ok(best) };
            let end = range.end_offset;
            let bytes = read_range(Some(range))?;
            for item in BatchIter::new(bytes) {
                let (h, b) = item.map_err(|e| FetchError::Io(e.to_string()))?;
                if h.is_control() || h.max_timestamp < target {
                    continue;
                }
                let records = protocol::batch::decode_records(&b).map_err(|e| FetchError::Io(e.to_string()))?;
                // The batch holding the log start may begin below it (DeleteRecords).
                for r in records.into_iter().filter(|r| r.offset >= start) {
                    let hit = FoundByTime {
                        offset: r.offset,
                        timestamp_ms: r.timestamp_ms,
                        leader_epoch: h.partition_leader_epoch,
                    };
                    if timestamp_ms == TIMESTAMP_MAX {
                        if best.is_none_or(|b| r.timestamp_ms > b.timestamp_ms) {
                            best = Some(hit);
                        }
                    } else if r.timestamp_ms >= target {
                        return Ok(Some(hit));
                    }
                }
            }
            offset = end;
        }
    }
}

#[cfg(test)]
impl Partition {
    /// Every byte of the log (tests compare replicas with it).
    fn fetch_all_for_test(&self) -> Vec<u8> {
        let g = self.lock();
        let mut out = Vec::new();
        let mut offset = g.log.start_offset();
        while let Some(range) = g.log.locate(offset, usize::MAX, i64::MAX) {
            let bytes = range.read().unwrap();
            offset = BatchIter::new(bytes.clone()).last().unwrap().unwrap().0.last_offset() + 1;
            out.extend_from_slice(&bytes);
        }
        out
    }
}

/// Where a follower's next batches are: kept in memory (with the offset after them), or in a
/// range of the file (none: nothing to send).
enum Found {
    Kept(Records, i64),
    InFile(Option<ReadRange>),
}

/// Read a located range outside the partition lock (nothing located: no bytes).
/// [`Partition::find_by_time`]'s target for the record with the largest timestamp (Kafka's
/// ListOffsets MAX_TIMESTAMP).
pub const TIMESTAMP_MAX: i64 = -3;

/// How much of a segment one read of [`Partition::find_by_time`]'s scan takes, in bytes.
const TIME_SCAN_BYTES: usize = 1024 * 1024;

fn read_range(range: Option<ReadRange>) -> Result<Bytes, FetchError> {
    range.map_or(Ok(Bytes::new()), |r| r.read().map_err(|e| FetchError::Io(e.to_string())))
}

/// Shared handle.
pub type PartitionRef = Arc<Partition>;

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::batch::{build_batch, ProducerStamp};

    /// A batch as a leader of `epoch` stored it at `offset`.
    fn stored(offset: i64, epoch: i32, value: &str) -> Bytes {
        let b = build_batch(
            ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
            false,
            0,
            &[Bytes::from(value.to_string())],
        );
        let mut m = b.to_vec();
        set_base_offset(&mut m, offset);
        set_partition_leader_epoch(&mut m, epoch);
        Bytes::from(m)
    }

    fn replicate(p: &Partition, epoch: i32, from: i64, prev: i32, batches: &[Bytes]) -> Result<i64, ReplicateError> {
        replicate_at(p, epoch, from, prev, batches).map(|(end, _)| end)
    }

    fn replicate_at(
        p: &Partition,
        epoch: i32,
        from: i64,
        prev: i32,
        batches: &[Bytes],
    ) -> Result<(i64, u64), ReplicateError> {
        let records = Bytes::from(batches.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>());
        let req = ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch: epoch,
            leader_id: 1,
            from_offset: from,
            prev_epoch: prev,
            high_watermark: 0,
            log_start_offset: 0,
            low_watermark: 0,
            producer_state: bytes::Bytes::new(),
            records: records.into(),
        };
        p.apply_replicated_at(&req, true)
    }

    /// An answer held until the disk has it must not outlive a cut: once a newer leader's push
    /// rewrote the offsets it covers, it would acknowledge that leader's batches as the old ones.
    #[test]
    fn a_cut_voids_an_acknowledgement_waiting_for_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let f = Partition::open(dir.path(), "t", 0, 2, true).unwrap();
        f.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let old: Vec<Bytes> = (0..3).map(|o| stored(o, 1, &format!("v{o}"))).collect();
        let (end, generation) = replicate_at(&f, 1, 0, -1, &old).unwrap();
        assert_eq!(end, 3);
        assert_eq!(f.durable_at(end, generation), Some(false), "written, not yet synced");
        // Epoch 2's leader holds other batches from offset 1: the follower cuts there and takes them.
        f.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        let new: Vec<Bytes> = (1..3).map(|o| stored(o, 2, &format!("w{o}"))).collect();
        assert_eq!(replicate(&f, 2, 1, 1, &new).unwrap(), 3);
        let (sync_end, file, g) = f.sync_target().unwrap();
        file.sync_data().unwrap();
        f.mark_durable(sync_end, g);
        assert!(f.is_durable(end), "offsets 0..3 are on disk, epoch 2's at 1 and 2");
        assert_eq!(f.durable_at(end, generation), None, "the epoch-1 answer must not acknowledge them");
    }

    #[test]
    fn a_divergent_follower_is_cut_only_where_it_diverges() {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = Partition::open(ld.path(), "t", 0, 1, true).unwrap();
        let follower = Partition::open(fd.path(), "t", 0, 2, true).unwrap();
        // Both hold epoch 0's committed offsets 0..4; the follower also got X at 4 (epoch 0),
        // while the leader, at epoch 1, wrote Y at 4 and 5.
        let common: Vec<Bytes> = (0..4).map(|o| stored(o, 0, &format!("c{o}"))).collect();
        let mut leader_log = common.clone();
        leader_log.extend([stored(4, 1, "y4"), stored(5, 1, "y5")]);
        let mut follower_log = common.clone();
        follower_log.push(stored(4, 0, "x4"));
        // Load the two logs as they stand (as followers of a sender claiming epoch 1).
        leader.learn(3, 1, 0, &[1, 2], &[1, 2], 0);
        follower.learn(3, 1, 0, &[1, 2], &[1, 2], 0);
        let load = |p: &Partition, log: &[Bytes]| {
            let req = ReplicateRequest {
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 1,
                leader_id: 3,
                from_offset: 0,
                prev_epoch: -1,
                high_watermark: 0,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: bytes::Bytes::new(),
                records: Bytes::from(log.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>()).into(),
            };
            p.apply_replicated(&req, true).unwrap()
        };
        assert_eq!(load(&leader, &leader_log), 6);
        assert_eq!(load(&follower, &follower_log), 5);
        // Broker 1 now leads at epoch 2; broker 2 follows.
        let change = leader.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        assert!(matches!(change, Some(RoleChange::BecameLeader { .. })));
        follower.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        // Run the leader's replication against the follower until it succeeds.
        let mut rounds = 0;
        let mut lowest_from = i64::MAX;
        loop {
            rounds += 1;
            assert!(rounds < 10, "replication did not converge");
            let w = leader.replication_work(2, 2, (None, usize::MAX), 0).unwrap().unwrap();
            lowest_from = lowest_from.min(w.from_offset);
            let batches: Vec<Bytes> =
                protocol::batch::BatchIter::new(w.records.contiguous()).map(|i| i.unwrap().1).collect();
            match replicate(&follower, 2, w.from_offset, w.prev_epoch, &batches) {
                Ok(leo) => {
                    leader.on_replica_ack(2, 2, leo, w.sent);
                    break;
                }
                Err(ReplicateError::Mismatch { hint, diverging_epoch, .. }) => {
                    leader.on_replica_mismatch(2, 2, w.from_offset, hint, diverging_epoch)
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(lowest_from, 4, "the follower is cut at the divergence, not before the committed prefix");
        assert_eq!(follower.progress().0, 6);
        let theirs = follower.fetch_all_for_test();
        assert_eq!(theirs, leader.fetch_all_for_test(), "the logs converge");
    }

    /// Found by the simulator (`--topic-deletions --mutation topics-by-name`): the leader of a
    /// deleted topic's replica and the leader of the topic created again under the name may be
    /// one broker at one leader epoch; a Replicate of the old replica reaching a follower of the
    /// new one would put the deleted topic's batches into it. Refused by topic id (0 on either
    /// side: taken, as before ids were sent).
    #[test]
    fn replication_of_another_topic_of_the_same_name_is_refused() {
        let fd = tempfile::tempdir().unwrap();
        let follower = Partition::open(fd.path(), "t", 0, 2, true).unwrap();
        follower.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        follower.set_topic_id(7);
        let batch = [stored(0, 1, "old")];
        let old = ReplicateRequest { topic_id: 6, ..replicate_request(0, &batch) };
        match follower.apply_replicated(&old, true) {
            Err(ReplicateError::OtherTopic { sent: 6, mine: 7 }) => {}
            other => panic!("expected a refusal by topic id, got {other:?}"),
        }
        assert_eq!(follower.progress().0, 0, "nothing of the other topic was written");
        let new = ReplicateRequest { topic_id: 7, ..replicate_request(0, &batch) };
        assert_eq!(follower.apply_replicated(&new, true).unwrap(), 1);
        let unknown = ReplicateRequest { topic_id: 0, ..replicate_request(1, &[stored(1, 1, "x")]) };
        assert_eq!(follower.apply_replicated(&unknown, true).unwrap(), 2);
    }

    /// Found by the simulator (seed 30): a resent or reordered push from the same leader,
    /// starting below what the follower already holds and acknowledged, used to cut the log
    /// at its `from_offset`, dropping committed batches the leader had counted.
    #[test]
    fn a_reordered_resend_does_not_cut_batches_the_follower_acked() {
        let fd = tempfile::tempdir().unwrap();
        let follower = follower_of_leader_1(fd.path(), LogConfig::default());
        let log: Vec<Bytes> = (0..6).map(|o| stored(o, 1, &format!("v{o}"))).collect();
        // The second push arrives first and is acknowledged up to 6...
        assert_eq!(replicate(&follower, 1, 0, -1, &log).unwrap(), 6);
        let all = follower.fetch_all_for_test();
        // ...then the first, older push (offsets 0..2) arrives late.
        assert_eq!(replicate(&follower, 1, 0, -1, &log[..2]).unwrap(), 2, "acknowledges what it carried");
        assert_eq!(follower.progress().0, 6, "nothing the follower acknowledged is cut");
        assert_eq!(follower.fetch_all_for_test(), all);
        // A push that does conflict (a later epoch's batch at 4) still cuts there.
        follower.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        assert_eq!(replicate(&follower, 2, 4, 1, &[stored(4, 2, "w4")]).unwrap(), 5);
        assert_eq!(follower.progress().0, 5);
    }

    /// An empty push says the leader's log ends at `from_offset`: a follower holding more
    /// there from an earlier leader epoch cuts it (else its log stays longer than the
    /// leader's); batches from the sender's own epoch stay (a reordered old push).
    #[test]
    fn an_empty_push_cuts_an_older_epochs_suffix_only() {
        let fd = tempfile::tempdir().unwrap();
        let follower = follower_of_leader_1(fd.path(), LogConfig::default());
        let old: Vec<Bytes> = (0..5).map(|o| stored(o, 1, &format!("v{o}"))).collect();
        assert_eq!(replicate(&follower, 1, 0, -1, &old).unwrap(), 5);
        // Epoch 2's leader holds only offsets 0..3 and has nothing more to send.
        follower.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        assert_eq!(replicate(&follower, 2, 3, 1, &[]).unwrap(), 3);
        assert_eq!(follower.progress().0, 3, "the epoch-1 suffix the leader lacks is cut");
        // Batches the epoch-2 leader sent stay when an older empty push of its arrives late.
        assert_eq!(replicate(&follower, 2, 3, 1, &[stored(3, 2, "w3"), stored(4, 2, "w4")]).unwrap(), 5);
        assert_eq!(replicate(&follower, 2, 3, 1, &[]).unwrap(), 3);
        assert_eq!(follower.progress().0, 5);
    }

    /// Found by the simulator (seed 54639): a restarted replica knew no leader epoch and took
    /// a delayed push from an older epoch over the batches of a newer one in its own log.
    #[test]
    fn a_reopened_replica_refuses_epochs_older_than_its_log() {
        let fd = tempfile::tempdir().unwrap();
        {
            let follower = Partition::open(fd.path(), "t", 0, 2, true).unwrap();
            follower.learn(3, 2, 0, &[1, 2, 3], &[1, 2, 3], 0);
            let req = ReplicateRequest {
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 2,
                leader_id: 3,
                from_offset: 0,
                prev_epoch: -1,
                high_watermark: 0,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: bytes::Bytes::new(),
                records: stored(0, 2, "e2").into(),
            };
            assert_eq!(follower.apply_replicated(&req, true).unwrap(), 1);
        }
        let reopened = Partition::open(fd.path(), "t", 0, 2, true).unwrap();
        assert_eq!(reopened.leadership().leader_epoch, 2, "the log's latest epoch is the floor");
        // A leadership from before the log's latest epoch is not learnt...
        assert!(reopened.learn(1, 1, 0, &[1, 2, 3], &[1, 2, 3], 0).is_none());
        // ...and a push at it is refused rather than cutting the epoch-2 batch.
        assert!(matches!(replicate(&reopened, 1, 0, -1, &[stored(0, 1, "e1")]), Err(ReplicateError::Leader(_))));
        assert_eq!(reopened.progress().0, 1);
    }

    /// A producer's batch (or, with `marker`, a transaction marker) as a leader of epoch 1
    /// stored it at `offset`.
    fn producer_batch(offset: i64, pid: i64, epoch: i16, seq: i32, txn: bool, marker: Option<MarkerKind>) -> Bytes {
        let b = match marker {
            Some(kind) => protocol::batch::build_marker(pid, epoch, -1, kind, 0, 1_000),
            None => build_batch(
                ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
                txn,
                1_000,
                &[Bytes::from(format!("p{pid}-e{epoch}-s{seq}"))],
            ),
        };
        let mut m = b.to_vec();
        set_base_offset(&mut m, offset);
        set_partition_leader_epoch(&mut m, 1);
        Bytes::from(m)
    }

    /// The producer state and transaction index, encoded (equal state, equal bytes).
    fn state_of(p: &Partition) -> Vec<u8> {
        let g = p.lock();
        snapshot::encode(0, &g.producers, &g.txns)
    }

    /// The state a replay of the whole log gives.
    fn replayed_state(p: &Partition) -> Vec<u8> {
        let (mut producers, mut txns) = (ProducerStates::new(true), TxnIndex::new());
        for (h, marker) in p.batch_headers().unwrap() {
            producers.record(&h);
            txns.record(&h, marker);
        }
        snapshot::encode(0, &producers, &txns)
    }

    /// Push `batches` (consecutive, from the follower's log end) as the leader of epoch 1.
    fn push(p: &Partition, batches: &[Bytes], high_watermark: i64) -> i64 {
        let req = ReplicateRequest { high_watermark, ..replicate_request(p.progress().0, batches) };
        p.apply_replicated(&req, true).unwrap()
    }

    /// The Replicate broker `leader_id`'s replicate loop sends for `w` at `leader_epoch`.
    fn request_of(w: &ReplicationWork, leader_id: i32, leader_epoch: i32) -> ReplicateRequest {
        ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch,
            leader_id,
            from_offset: w.from_offset,
            prev_epoch: w.prev_epoch,
            high_watermark: w.high_watermark,
            log_start_offset: w.log_start_offset,
            low_watermark: w.low_watermark,
            producer_state: w.producer_state.clone(),
            records: w.records.clone(),
        }
    }

    /// Broker 1's Replicate at epoch 1 of `batches` from `from`.
    fn replicate_request(from: i64, batches: &[Bytes]) -> ReplicateRequest {
        ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch: 1,
            leader_id: 1,
            from_offset: from,
            prev_epoch: if from == 0 { -1 } else { 1 },
            high_watermark: 0,
            log_start_offset: 0,
            low_watermark: 0,
            producer_state: bytes::Bytes::new(),
            records: Bytes::from(batches.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>()).into(),
        }
    }

    /// A workload with fences, open, committed and aborted transactions, spread over small
    /// segments: producer 1 is fenced from epoch 0 to 1 early on (its zombie must stay fenced).
    fn fencing_workload(p: &Partition) {
        let mut next = 0i64;
        let mut batch = |pid, epoch, seq, txn, marker| {
            let b = producer_batch(next, pid, epoch, seq, txn, marker);
            next += 1;
            b
        };
        let mut batches = vec![
            batch(1, 0, 0, false, None),
            batch(1, 0, 1, false, None),
            batch(1, 1, 0, false, Some(MarkerKind::Abort)),
            batch(1, 1, 0, false, None),
        ];
        for round in 0..6 {
            batches.push(batch(2, 0, round, false, None));
            batches.push(batch(3, round as i16, 0, true, None));
            let kind = if round % 2 == 0 { MarkerKind::Commit } else { MarkerKind::Abort };
            batches.push(batch(3, round as i16, 0, false, Some(kind)));
        }
        batches.push(batch(4, 2, 0, true, None)); // left open
        for b in batches {
            push(p, &[b], 0);
        }
    }

    /// Broker 2's replica in `dir`, following broker 1 at leader epoch 1.
    fn follower_of_leader_1(dir: &Path, config: LogConfig) -> Partition {
        let p = Partition::open_with(Arc::new(OsStorage), dir, config, "t", 0, 2, true).unwrap();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        p
    }

    /// Issue 28: a zombie's verification does not survive its leader losing the leadership and
    /// getting it back (an unclean election of a replica that never got the fence marker): its
    /// next write is checked with the coordinator again, which refuses the old epoch.
    #[test]
    fn a_verification_does_not_outlive_the_leadership_that_made_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open_with(Arc::new(OsStorage), dir.path(), LogConfig::default(), "t", 0, 1, true).unwrap();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let stamp = |seq| ProducerStamp { producer_id: 7, producer_epoch: 0, base_sequence: seq };
        let z1 = build_batch(stamp(0), true, 0, &[Bytes::from_static(b"z1")]);
        let h1 = BatchHeader::parse(&z1).unwrap();
        let Err(AppendError::NeedsVerification { guard, .. }) = p.append(&z1, &h1, 1, false) else { panic!() };
        assert!(p.mark_verified(7, 0, true, guard));
        let asked_before = p.verification_guard(7);
        assert!(matches!(p.append(&z1, &h1, 1, false), Ok(Appended::New { .. })));
        // Broker 2 leads at epoch 2 (and gets the fence marker); then broker 1 is elected
        // uncleanly at epoch 3 without it.
        p.learn(2, 2, 1, &[1, 2], &[2], 0);
        p.learn(1, 3, 2, &[1, 2], &[1], 0);
        let z2 = build_batch(stamp(1), true, 0, &[Bytes::from_static(b"z2")]);
        let h2 = BatchHeader::parse(&z2).unwrap();
        assert!(
            matches!(p.append(&z2, &h2, 3, false), Err(AppendError::NeedsVerification { .. })),
            "the zombie's write under the new leadership goes to the coordinator"
        );
        assert!(!p.mark_verified(7, 0, true, asked_before), "a late answer asked under epoch 1 does not count");
        assert!(matches!(p.append(&z2, &h2, 3, false), Err(AppendError::NeedsVerification { .. })));
    }

    /// Issue 28: a stale leader's append that no fence marker reached (above its high
    /// watermark) is cut when an unclean election makes it lead, and only then.
    #[test]
    fn a_replica_elected_uncleanly_cuts_its_log_to_its_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open_with(Arc::new(OsStorage), dir.path(), LogConfig::default(), "t", 0, 1, true).unwrap();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let batch = |seq, value: &'static [u8]| {
            build_batch(
                ProducerStamp { producer_id: 7, producer_epoch: 0, base_sequence: seq },
                false,
                0,
                &[Bytes::from_static(value)],
            )
        };
        let z = batch(0, b"zombie");
        let h = BatchHeader::parse(&z).unwrap();
        assert!(p.mark_verified(7, 0, false, p.verification_guard(7)));
        assert!(matches!(p.append(&z, &h, 1, false), Ok(Appended::New { .. })));
        assert_eq!(p.progress(), (1, 0), "appended, never committed: the follower did not take it");
        // Elected again, cleanly: the log stays.
        p.learn(1, 2, 1, &[1, 2], &[1, 2], 0);
        assert_eq!(p.progress().0, 1);
        // An unclean election at epoch 4 made it lead; it restarted before it learnt that, and
        // leads at epoch 5: it still cuts what it holds from before epoch 4 above its high
        // watermark.
        p.set_unclean_leader_epoch(4);
        p.learn(2, 3, 2, &[1, 2], &[2], 0);
        p.learn(1, 5, 3, &[1, 2], &[1], 0);
        assert_eq!(p.progress(), (0, 0), "the stale append is gone");
        // What it writes from then on is never cut this way, even uncommitted.
        let next = batch(0, b"later");
        let h = BatchHeader::parse(&next).unwrap();
        p.learn(1, 6, 4, &[1, 2], &[1, 2], 0);
        assert!(p.mark_verified(7, 0, false, p.verification_guard(7)));
        assert!(matches!(p.append(&next, &h, 6, false), Ok(Appended::New { .. })));
        let end = p.progress().0;
        assert_eq!(end, 1);
        p.learn(2, 7, 5, &[1, 2], &[2], 0);
        p.learn(1, 8, 6, &[1, 2], &[1], 0);
        assert_eq!(p.progress().0, end, "written at epoch 6, after the unclean one: kept");
    }

    /// Issue 27 (item 6): OffsetForLeaderEpoch for an epoch older than every one the log knows
    /// answers as Kafka does (that epoch, ending where the first known one starts), not
    /// (-1, -1), which makes librdkafka reset its position.
    #[test]
    fn an_epoch_older_than_the_cache_ends_where_the_first_known_one_starts() {
        let (p, _disk) = counted_leader(LogConfig::default());
        let b = producer_batch(0, 7, 0, 0, false, None);
        let h = BatchHeader::parse(&b).unwrap();
        assert!(matches!(p.append(&b, &h, 1, false), Ok(Appended::New { .. })));
        assert_eq!(p.epoch_end_offset(-1, 1).unwrap(), (1, 1), "the current epoch ends at the log end");
        assert_eq!(p.epoch_end_offset(-1, 0).unwrap(), (0, 0), "older than any: ends where epoch 1 starts");
        assert_eq!(p.epoch_end_offset(-1, -1).unwrap(), (-1, -1));
        let (empty, _disk) = counted_leader(LogConfig::default());
        assert_eq!(empty.epoch_end_offset(-1, 0).unwrap(), (-1, -1), "an empty log knows no epoch");
    }

    /// Issue 27: a follower never cuts below its high watermark because a leader told it to:
    /// such a leader lacks committed records. It refuses, says why, and stays out of sync;
    /// after an unclean election an operator asked for, it follows.
    #[test]
    fn a_follower_refuses_to_cut_committed_records_outside_an_unclean_election() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower_of_leader_1(dir.path(), LogConfig::default());
        let batches = [producer_batch(0, 7, 0, 0, false, None), producer_batch(1, 7, 0, 1, false, None)];
        push(&p, &batches, 2);
        assert_eq!(p.progress(), (2, 2), "both committed");
        // Broker 3 leads at epoch 2 with another batch at offset 1.
        p.learn(3, 2, 1, &[1, 2, 3], &[3], 0);
        let mut other = producer_batch(1, 8, 0, 0, false, None).to_vec();
        set_partition_leader_epoch(&mut other, 2);
        let req = ReplicateRequest { leader_epoch: 2, leader_id: 3, ..replicate_request(1, &[Bytes::from(other)]) };
        let refused = p.apply_replicated(&req, true).unwrap_err();
        assert!(matches!(refused, ReplicateError::WouldCutCommitted { offset: 1, high_watermark: 2, .. }), "{refused}");
        assert!(p.refusing().unwrap().1.contains("below its high watermark 2"));
        assert_eq!(p.progress(), (2, 2), "nothing cut");
        // An unclean election began that leadership: the follower takes the leader's history.
        p.set_unclean_leader_epoch(2);
        assert_eq!(p.apply_replicated(&req, true).unwrap(), 2);
        assert!(p.refusing().is_none());
        assert_eq!(p.batch_headers().unwrap()[1].0.producer_id, 8);
    }

    /// Issue 27: a replica starts from the high watermark it checkpointed (readable at once); a
    /// log that opens shorter than it is lost, and stays lost across another restart until an
    /// ISR it is in reaches it.
    #[test]
    fn a_checkpointed_high_watermark_is_restored_and_a_log_below_it_is_lost_until_back_in_sync() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower_of_leader_1(dir.path(), LogConfig::default());
        let batches: Vec<Bytes> = (0..6).map(|i| stored(i, 1, &format!("v{i}"))).collect();
        push(&p, &batches, 5);
        assert_eq!(p.progress(), (6, 5));
        p.checkpoint().unwrap();
        drop(p);
        let open = || Partition::open_with(Arc::new(OsStorage), dir.path(), LogConfig::default(), "t", 0, 2, true);
        let p = open().unwrap();
        assert_eq!((p.progress(), p.lost()), ((6, 5), None), "restored, not lost");
        drop(p);
        // The last three batches go, as if never written: it looks like a torn tail.
        let segment = dir.path().join(crate::log::offset_file_name(0, crate::log::SEGMENT_SUFFIX));
        let keep: usize = batches[..3].iter().map(|b| b.len()).sum();
        std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(keep as u64).unwrap();
        let _ = std::fs::remove_file(segment.with_extension(crate::log::INDEX_SUFFIX));
        let p = open().unwrap();
        assert_eq!(p.progress(), (3, 3));
        assert!(p.lost().is_some_and(|why| why.contains("below the high watermark 5")), "{:?}", p.lost());
        // Its checkpoint is lowered at the next interval; the mark keeps it lost all the same.
        p.checkpoint().unwrap();
        drop(p);
        let p = open().unwrap();
        assert!(p.lost().is_some_and(|why| why.contains("below the high watermark 5")), "{:?}", p.lost());
        p.learn(1, 2, 1, &[1, 2], &[1], 0);
        assert!(p.lost().is_some(), "out of the ISR: still lost");
        p.learn(1, 2, 2, &[1, 2], &[1, 2], 0);
        assert_eq!(p.lost(), None, "back in the ISR");
        drop(p);
        assert_eq!(open().unwrap().lost(), None, "and the mark is gone");
    }

    /// A lost mark records the registration that reported it, across restarts, so that the
    /// coordinator can tell a mark its broker never got to clear (the ISR took the replica back
    /// while the broker was paused) from a new loss; a loss found at a later start is new again.
    #[test]
    fn a_lost_mark_records_the_registration_that_reported_it_until_a_new_loss() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower_of_leader_1(dir.path(), LogConfig::default());
        let batches: Vec<Bytes> = (0..6).map(|i| stored(i, 1, &format!("v{i}"))).collect();
        push(&p, &batches, 5);
        p.checkpoint().unwrap();
        drop(p);
        let open = || Partition::open_with(Arc::new(OsStorage), dir.path(), LogConfig::default(), "t", 0, 2, true);
        let segment = dir.path().join(crate::log::offset_file_name(0, crate::log::SEGMENT_SUFFIX));
        let cut = |n: usize| {
            let keep: usize = batches[..n].iter().map(|b| b.len()).sum();
            std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(keep as u64).unwrap();
            let _ = std::fs::remove_file(segment.with_extension(crate::log::INDEX_SUFFIX));
        };
        cut(3);
        let p = open().unwrap();
        let why = p.lost().expect("lost");
        assert_eq!(p.lost_reported_at(), -1, "no registration has reported it");
        p.mark_lost_reported(4).unwrap();
        p.mark_lost_reported(6).unwrap();
        assert_eq!(p.lost_reported_at(), 4, "the first registration that reported it");
        p.checkpoint().unwrap();
        drop(p);
        let p = open().unwrap();
        assert_eq!((p.lost(), p.lost_reported_at()), (Some(why), 4), "kept across a restart");
        drop(p);
        // A new loss at the next start: reported by no registration yet.
        cut(2);
        let p = open().unwrap();
        assert!(p.lost().is_some_and(|w| w.contains("below the high watermark 3")), "{:?}", p.lost());
        assert_eq!(p.lost_reported_at(), -1);
        // Back in the ISR: no longer lost, nothing reported.
        p.learn(1, 2, 2, &[1, 2], &[1, 2], 0);
        assert_eq!((p.lost(), p.lost_reported_at()), (None, -1));
    }

    fn small_segments() -> LogConfig {
        LogConfig { segment_bytes: 400, ..LogConfig::default() }
    }

    fn snapshot_files(dir: &Path) -> Vec<std::path::PathBuf> {
        snapshot::list(&OsStorage, dir).unwrap().into_iter().map(|(_, p)| p).collect()
    }

    #[test]
    fn recovery_from_snapshots_gives_the_state_of_a_full_replay() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Partition::open_with(Arc::new(OsStorage), dir.path(), small_segments(), "t", 0, 2, true).unwrap();
        let p = open();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        fencing_workload(&p);
        let expected = state_of(&p);
        assert_eq!(expected, replayed_state(&p));
        let end = p.progress().0;
        assert!(p.log_shape().1 > 3, "the workload spans several segments");
        drop(p);
        assert_eq!(snapshot_files(dir.path()).len(), snapshot::SNAPSHOTS_KEPT, "older snapshots are pruned");

        // From the newest snapshot and the batches after it.
        let p = open();
        assert_eq!(state_of(&p), expected);
        drop(p);

        // The newest snapshot corrupt: the older one, and more of the log.
        let newest = snapshot_files(dir.path()).pop().unwrap();
        let mut raw = std::fs::read(&newest).unwrap();
        raw[20] ^= 0x40;
        std::fs::write(&newest, &raw).unwrap();
        let p = open();
        assert_eq!(state_of(&p), expected, "a corrupt snapshot is skipped");
        drop(p);

        // Every snapshot unusable (one cut short, one garbage): a full replay.
        for path in snapshot_files(dir.path()) {
            let raw = std::fs::read(&path).unwrap();
            std::fs::write(&path, &raw[..raw.len() / 2]).unwrap();
        }
        let p = open();
        assert_eq!(state_of(&p), expected, "a full replay when no snapshot is usable");

        // The zombie fenced before the restarts is still fenced.
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let zombie = producer_batch(end, 1, 0, 2, false, None);
        assert!(matches!(
            replicate(&p, 1, end, 1, &[zombie]),
            Err(ReplicateError::Gate(GateError::StaleEpoch { producer_id: 1, current: 1, got: 0 }))
        ));

        // A clean shutdown's checkpoint leaves nothing to replay.
        p.checkpoint().unwrap();
        assert_eq!(snapshot::list(&OsStorage, dir.path()).unwrap().last().map(|(o, _)| *o), Some(end));
        drop(p);
        assert_eq!(state_of(&open()), expected);
    }

    #[test]
    fn a_cut_removes_the_snapshots_of_the_batches_it_drops() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower_of_leader_1(dir.path(), small_segments());
        fencing_workload(&p);
        // Epoch 2's leader diverges at offset 3: the follower cuts everything from there.
        p.learn(1, 2, 0, &[1, 2], &[1, 2], 0);
        let end = p.progress().0;
        let other: Vec<Bytes> = (3..end + 10).map(|o| stored(o, 2, "other")).collect();
        assert_eq!(replicate(&p, 2, 3, 1, &other[..1]).unwrap(), 4);
        assert!(snapshot::list(&OsStorage, dir.path()).unwrap().iter().all(|(o, _)| *o <= 3));
        assert_eq!(state_of(&p), replayed_state(&p));
        // The log grows past where the removed snapshots were: one left behind would be loaded.
        assert_eq!(replicate(&p, 2, 4, 2, &other[1..]).unwrap(), end + 10);
        drop(p);
        let p = Partition::open_with(Arc::new(OsStorage), dir.path(), small_segments(), "t", 0, 2, true).unwrap();
        assert_eq!(state_of(&p), replayed_state(&p));
        assert_eq!(p.producer_epoch(1), Some(1), "the fence at offset 2 is below the cut and stays");
    }

    #[test]
    fn retention_keeps_the_fencing_state_of_deleted_segments() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 400, retention_bytes: Some(800), ..LogConfig::default() };
        let p = follower_of_leader_1(dir.path(), config);
        fencing_workload(&p);
        let end = p.progress().0;
        assert_eq!(p.enforce_retention(0).unwrap(), 0, "nothing below the high watermark (0) goes");
        push(&p, &[], end);
        let deleted = p.enforce_retention(0).unwrap();
        let (start, _, bytes) = p.log_shape();
        assert!(deleted > 0 && start > 3 && bytes >= 800, "{deleted} segments deleted, start {start}, {bytes} bytes");
        assert!(snapshot::list(&OsStorage, dir.path()).unwrap().iter().all(|(o, _)| *o >= start));
        drop(p);
        let p = Partition::open_with(Arc::new(OsStorage), dir.path(), config, "t", 0, 2, true).unwrap();
        assert_eq!(p.log_shape().0, start);
        assert_eq!(p.producer_epoch(1), Some(1), "producer 1's batches are gone; its fence is not");
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let zombie = producer_batch(end, 1, 0, 2, false, None);
        assert!(matches!(replicate(&p, 1, end, 1, &[zombie]), Err(ReplicateError::Gate(GateError::StaleEpoch { .. }))));
    }

    #[test]
    fn retention_by_age_deletes_segments_whose_newest_record_is_old() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 400, retention_ms: Some(60_000), ..LogConfig::default() };
        let p = follower_of_leader_1(dir.path(), config);
        fencing_workload(&p); // every record stamped 1,000 ms after the epoch
        let end = p.progress().0;
        push(&p, &[], end);
        assert_eq!(p.enforce_retention(61_000).unwrap(), 0, "nothing older than a minute yet");
        let segments = p.log_shape().1;
        let deleted = p.enforce_retention(61_001).unwrap();
        assert!(deleted > 0 && deleted < segments, "closed segments up to the newest snapshot go: {deleted}");
        assert_eq!(p.producer_epoch(1), Some(1));
    }

    /// A leader with followers sends what it appended from memory while it keeps it, and
    /// reads its file for a follower further behind; both are the log's bytes. A follower
    /// keeps nothing.
    #[test]
    fn a_leader_replicates_from_the_batches_it_keeps_and_else_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { replication_cache_bytes_max: 800, ..LogConfig::default() };
        let leader = Partition::open_with(Arc::new(OsStorage), dir.path(), config, "t", 0, 1, true).unwrap();
        leader.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        let append = |n: i64| {
            let b = producer_batch(0, -1, -1, -1, false, None);
            let h = BatchHeader::parse(&b).unwrap();
            for _ in 0..n {
                leader.append(&b, &h, 1, false).unwrap();
            }
        };
        let work_at =
            |epoch: i32, from: Option<i64>| leader.replication_work(2, epoch, (from, 250), 0).unwrap().unwrap();
        let work = |from: Option<i64>| work_at(1, from);
        let file_from = |from: i64| {
            let g = leader.lock();
            read_range(g.log.locate(from, 250, i64::MAX)).unwrap()
        };
        append(2);
        let w = work(None);
        assert!(w.from_memory, "just appended: kept");
        assert_eq!((w.from_offset, w.end_offset), (0, 2));
        assert_eq!(w.records.contiguous(), file_from(0));
        assert_eq!(w.records.pieces().len(), 2, "one piece per (small) batch, not joined");
        // Far more than the budget, unacknowledged: the oldest batches are no longer kept.
        append(20);
        let w = work(None);
        assert!(!w.from_memory, "offset 0 is no longer kept: read from the file");
        assert_eq!(w.records.contiguous(), file_from(0));
        let w = work(Some(21));
        assert!(w.from_memory, "the newest batch is still kept");
        assert_eq!(w.records.contiguous(), file_from(21));
        // Acknowledged batches are let go: the follower has them.
        leader.on_replica_ack(2, 1, 22, w.sent);
        assert!(!work(Some(21)).from_memory, "released once the follower holds it");
        append(1);
        assert!(work(None).from_memory, "kept again from the follower's next offset");
        // With no follower in sync, nothing is kept: one out of the ISR reads the file.
        leader.learn(1, 1, 1, &[1, 2], &[1], 0);
        append(1);
        assert!(!work(None).from_memory, "let go once the follower left the ISR");
        leader.learn(1, 1, 2, &[1, 2], &[1, 2], 0);
        append(1);
        assert!(work(Some(24)).from_memory, "kept again once it is back in sync");
        // A follower does not keep its log's tail, and a leader with no followers neither.
        leader.learn(2, 2, 0, &[1, 2], &[1, 2], 0);
        leader.learn(1, 3, 0, &[1, 2], &[1, 2], 0);
        assert!(!work_at(3, Some(24)).from_memory, "what it kept before it followed was dropped");
        let alone =
            Partition::open_with(Arc::new(OsStorage), tempfile::tempdir().unwrap().path(), config, "t", 0, 1, true)
                .unwrap();
        alone.learn(1, 1, 0, &[1], &[1], 0);
        let b = producer_batch(0, -1, -1, -1, false, None);
        alone.append(&b, &BatchHeader::parse(&b).unwrap(), 1, false).unwrap();
        assert_eq!(alone.lock().log.read_tail(0, usize::MAX, i64::MAX), None);
    }

    #[test]
    fn with_sync_before_commit_the_leader_commits_only_what_it_synced() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open(dir.path(), "t", 0, 1, true).unwrap();
        p.set_sync_before_commit(true);
        p.learn(1, 1, 0, &[1], &[1], 0);
        let b = producer_batch(0, -1, -1, -1, false, None);
        let h = BatchHeader::parse(&b).unwrap();
        let Appended::New { end_offset, leader_epoch, .. } = p.append(&b, &h, 1, false).unwrap() else { panic!() };
        assert_eq!(p.committed(end_offset, leader_epoch), Ok(Committed::NotYet), "appended, not yet on disk");
        let (end, file, generation) = p.sync_target().unwrap();
        file.sync_data().unwrap();
        p.mark_durable(end, generation);
        assert_eq!(p.committed(end_offset, leader_epoch), Ok(Committed::Yes));
        // Without it (`--fsync interval-ms` and `never`) the append alone commits.
        let q = Partition::open(tempfile::tempdir().unwrap().path(), "t", 0, 1, true).unwrap();
        q.learn(1, 1, 0, &[1], &[1], 0);
        q.append(&b, &h, 1, false).unwrap();
        assert_eq!(q.committed(end_offset, leader_epoch), Ok(Committed::Yes));
    }

    #[test]
    fn a_power_loss_keeps_what_was_synced_and_the_matching_producer_state() {
        let disk = Arc::new(crate::storage::MemStorage::new());
        let dir = Path::new("/disk/t-0");
        let open = || Partition::open_with(disk.clone(), dir, small_segments(), "t", 0, 2, true).unwrap();
        let p = open();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        fencing_workload(&p);
        let (end, file, generation) = p.sync_target().unwrap();
        file.sync_data().unwrap();
        p.mark_durable(end, generation);
        let synced = state_of(&p);
        // More batches, never synced, then the power goes: a torn prefix of them survives.
        for i in 0..5 {
            push(&p, &[producer_batch(end + i, 2, 0, 6 + i as i32, false, None)], 0);
        }
        assert!(disk.unsynced_bytes() > 0);
        drop(p);
        disk.crash(|_, unsynced| unsynced / 3);
        let p = open();
        let recovered_end = p.progress().0;
        assert!((end..end + 5).contains(&recovered_end), "{recovered_end}: the synced log and whole batches after it");
        assert_eq!(state_of(&p), replayed_state(&p), "the producer state is the log's");
        if recovered_end == end {
            assert_eq!(state_of(&p), synced);
        }
        // The gate goes on from what survived: the next sequence of producer 2 is accepted.
        let seq = 6 + (recovered_end - end) as i32;
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
        push(&p, &[producer_batch(recovered_end, 2, 0, seq, false, None)], 0);
    }

    #[test]
    fn a_follower_behind_the_leaders_log_start_starts_over_there() {
        let fd = tempfile::tempdir().unwrap();
        let follower = follower_of_leader_1(fd.path(), LogConfig::default());
        let old: Vec<Bytes> = (0..3).map(|o| stored(o, 1, &format!("v{o}"))).collect();
        assert_eq!(replicate(&follower, 1, 0, -1, &old).unwrap(), 3);
        // The leader's log now starts at 10 (retention): it cannot vouch for anything before.
        let kept: Vec<Bytes> = (10..12).map(|o| stored(o, 1, &format!("k{o}"))).collect();
        let req = |from: i64, prev: i32, batches: &[Bytes]| ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch: 1,
            leader_id: 1,
            from_offset: from,
            prev_epoch: prev,
            high_watermark: 12,
            log_start_offset: 10,
            low_watermark: 10,
            producer_state: bytes::Bytes::new(),
            records: Bytes::from(batches.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>()).into(),
        };
        assert_eq!(follower.apply_replicated(&req(10, -1, &kept), true).unwrap(), 12);
        assert_eq!(follower.log_shape().0, 10);
        assert_eq!(follower.fetch_all_for_test(), kept.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>());
        // From there on the usual checks apply.
        assert!(matches!(
            follower.apply_replicated(&req(12, 0, &[stored(12, 1, "x")]), true),
            Err(ReplicateError::Mismatch { .. })
        ));
        assert_eq!(follower.apply_replicated(&req(12, 1, &[stored(12, 1, "x")]), true).unwrap(), 13);
        drop(follower);
        let reopened = Partition::open(fd.path(), "t", 0, 2, true).unwrap();
        assert_eq!(reopened.progress().0, 13);
        assert_eq!(reopened.log_shape().0, 10);

        // The same when the leader knows the epoch before its start: the gap is gone anyway.
        let bd = tempfile::tempdir().unwrap();
        let behind = Partition::open(bd.path(), "t", 0, 4, true).unwrap();
        behind.learn(1, 1, 0, &[1, 4], &[1, 4], 0);
        assert_eq!(replicate(&behind, 1, 0, -1, &old).unwrap(), 3);
        assert_eq!(behind.apply_replicated(&req(10, 1, &kept), true).unwrap(), 12);
        assert_eq!(behind.log_shape().0, 10);

        // A follower that holds everything up to the leader's start keeps its log when the
        // leader still knows the epoch before its start.
        let id = tempfile::tempdir().unwrap();
        let in_step = Partition::open(id.path(), "t", 0, 3, true).unwrap();
        in_step.learn(1, 1, 0, &[1, 3], &[1, 3], 0);
        let held: Vec<Bytes> = (0..10).map(|o| stored(o, 1, &format!("h{o}"))).collect();
        assert_eq!(replicate(&in_step, 1, 0, -1, &held).unwrap(), 10);
        assert_eq!(in_step.apply_replicated(&req(10, 1, &kept), true).unwrap(), 12);
        assert_eq!(in_step.log_shape().0, 0, "not started over");
        assert_eq!(in_step.progress().0, 12);
    }

    /// A follower that starts its log over at the leader's log start (retention deleted what
    /// it lacked) gets the leader's state of the producers idle since before that start: when it
    /// leads later, such a producer's next batch continues its sequence instead of being refused
    /// as out of order.
    #[test]
    fn a_follower_that_starts_over_knows_the_producers_idle_since_before_the_leaders_start() {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let config = LogConfig { segment_bytes: 400, retention_bytes: Some(800), ..LogConfig::default() };
        let leader = follower_of_leader_1(ld.path(), config);
        // Producer 7 writes once, then producer 8 fills segments; retention deletes 7's batch.
        let mut batches = vec![producer_batch(0, 7, 0, 0, false, None)];
        batches.extend((1..40).map(|o| producer_batch(o, 8, 0, o as i32 - 1, false, None)));
        let end = push(&leader, &batches, 0);
        push(&leader, &[], end);
        assert!(leader.enforce_retention(0).unwrap() > 0);
        let start = leader.log_shape().0;
        assert!(start > 0);
        // Broker 2 now leads; broker 3, with nothing, is behind its log start.
        leader.learn(2, 2, 1, &[2, 3], &[2, 3], 0);
        leader.on_replica_mismatch(3, 2, end, 0, -1);
        let w = leader.replication_work(3, 2, (None, usize::MAX), 0).unwrap().unwrap();
        assert_eq!(w.from_offset, start);
        assert!(!w.producer_state.is_empty(), "producer 7 has nothing from the log start on");
        let follower = Partition::open_with(Arc::new(OsStorage), fd.path(), config, "t", 0, 3, true).unwrap();
        follower.learn(2, 2, 1, &[2, 3], &[2, 3], 0);
        let req = request_of(&w, 2, 2);
        assert_eq!(follower.apply_replicated(&req, true).unwrap(), w.end_offset);
        assert_eq!(follower.log_shape().0, start, "started over at the leader's start");
        // The follower leads; producer 7 sends its next batch.
        follower.learn(3, 3, 2, &[2, 3], &[3], 0);
        assert!(follower.mark_verified(7, 0, false, follower.verification_guard(7)));
        let next = build_batch(
            ProducerStamp { producer_id: 7, producer_epoch: 0, base_sequence: 1 },
            false,
            0,
            &[Bytes::from_static(b"p7-again")],
        );
        let h = BatchHeader::parse(&next).unwrap();
        assert!(matches!(follower.append(&next, &h, 3, false), Ok(Appended::New { .. })), "it continues at sequence 1");
        // Without the leader's state (as before), the same batch continues a producer this
        // replica holds nothing of: refused, the producer must start over.
        let bare = tempfile::tempdir().unwrap();
        let other = Partition::open_with(Arc::new(OsStorage), bare.path(), config, "t", 0, 3, true).unwrap();
        other.learn(2, 2, 1, &[2, 3], &[2, 3], 0);
        other.apply_replicated(&ReplicateRequest { producer_state: Bytes::new(), ..req }, true).unwrap();
        other.learn(3, 3, 2, &[2, 3], &[3], 0);
        assert!(other.mark_verified(7, 0, false, other.verification_guard(7)));
        assert!(matches!(
            other.append(&next, &h, 3, false),
            Err(AppendError::Gate(GateError::UnknownProducer { producer_id: 7, got: 1 }))
        ));
    }

    /// Issue 32 (item 2): DeleteRecords moves the leader's log start inside a batch, durably;
    /// readers below it get OFFSET_OUT_OF_RANGE; the producer state stays and the aborted
    /// transactions below it leave the index; the next Replicate carries the start to the
    /// follower, which hides the same records on its disk and reports it, and the low
    /// watermark then reaches it.
    #[test]
    fn delete_records_moves_the_log_start_on_the_leader_and_its_followers() {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let config = LogConfig { segment_bytes: 300, ..LogConfig::default() };
        let leader = Partition::open_with(Arc::new(OsStorage), ld.path(), config, "t", 0, 2, true).unwrap();
        let follower = Partition::open_with(Arc::new(OsStorage), fd.path(), config, "t", 0, 3, true).unwrap();
        let mut batches =
            vec![producer_batch(0, 9, 0, 0, true, None), producer_batch(1, 9, 0, -1, false, Some(MarkerKind::Abort))];
        batches.extend((2..10).map(|o| producer_batch(o, 8, 0, o as i32 - 2, false, None)));
        for p in [&leader, &follower] {
            p.learn(1, 1, 0, &[1, 2, 3], &[1, 2, 3], 0);
            let end = push(p, &batches, 0);
            push(p, &[], end);
        }
        leader.learn(2, 2, 1, &[2, 3], &[2, 3], 0);
        follower.learn(2, 2, 1, &[2, 3], &[2, 3], 0);
        assert_eq!(leader.fetch(0, usize::MAX, -1, READ_COMMITTED).unwrap().aborted.len(), 1);

        // Refusals: past the high watermark, a negative offset other than -1, a stale leader
        // epoch, a follower.
        assert!(matches!(
            leader.delete_records(-1, 11),
            Err(DeleteRecordsError::OutOfRange { high_watermark: 10, .. })
        ));
        assert!(matches!(leader.delete_records(-1, -2), Err(DeleteRecordsError::OutOfRange { .. })));
        assert!(matches!(leader.delete_records(1, 5), Err(DeleteRecordsError::Leader(_))));
        assert!(matches!(follower.delete_records(-1, 5), Err(DeleteRecordsError::Leader(_))));

        assert_eq!(leader.delete_records(2, 4).unwrap(), (4, 2));
        assert_eq!(leader.offsets(-1).unwrap().log_start_offset, 4);
        assert!(matches!(
            leader.fetch(3, usize::MAX, -1, protocol::READ_UNCOMMITTED),
            Err(FetchError::OutOfRange { start: 4, .. })
        ));
        let read = leader.fetch(4, usize::MAX, -1, READ_COMMITTED).unwrap();
        assert_eq!((read.log_start_offset, read.aborted.len()), (4, 0), "the aborted transaction below left the index");
        assert_eq!(leader.lock().txns.aborted_len(), 0);
        assert_eq!(leader.producer_epoch(9), Some(0), "producer state is kept (KAFKA-7190)");
        assert_eq!(leader.producer_epoch(8), Some(0));
        assert_eq!(leader.low_watermark(2).unwrap(), -1, "the follower has not reported its start");
        assert_eq!(leader.delete_records(-1, 2).unwrap(), (2, 2), "below the start: nothing changes");
        assert_eq!(leader.offsets(-1).unwrap().log_start_offset, 4);

        // The next push carries the start; the follower hides the same records.
        let w = leader.replication_work(3, 2, (None, usize::MAX), 0).unwrap().unwrap();
        assert_eq!((w.log_start_offset, w.low_watermark), (0, 4), "whole batches still go from the first held");
        let req = request_of(&w, 2, 2);
        follower.apply_replicated(&req, true).unwrap();
        assert_eq!(follower.log_start_offset(), 4);
        leader.on_replica_log_start(3, 2, follower.log_start_offset());
        assert_eq!(leader.low_watermark(2).unwrap(), 4);
        // -1 deletes up to the high watermark.
        assert_eq!(leader.delete_records(-1, -1).unwrap(), (10, 2));
        assert_eq!(leader.low_watermark(2).unwrap(), 4, "until the follower confirms");
        drop(follower);
        let reopened = Partition::open_with(Arc::new(OsStorage), fd.path(), config, "t", 0, 3, true).unwrap();
        assert_eq!(reopened.log_start_offset(), 4, "on the follower's disk");
        assert_eq!(reopened.producer_epoch(8), Some(0));
        // Retention (no limit set) deletes the segments wholly below the start.
        assert!(leader.enforce_retention(0).unwrap() > 0);
        assert!(leader.log_shape().0 > 0);
        assert_eq!(leader.log_start_offset(), 10);
        drop(leader);
        let reopened = Partition::open_with(Arc::new(OsStorage), ld.path(), config, "t", 0, 2, true).unwrap();
        assert_eq!(reopened.log_start_offset(), 10);
        assert_eq!(reopened.producer_epoch(8), Some(0), "recovered from the snapshot retention kept");
    }

    /// Issue 32 (item 4): DescribeLogDirs' offset lag: on a follower, how far its log end is
    /// behind the high watermark its leader sent last; 0 on a leader.
    #[test]
    fn the_offset_lag_is_the_leaders_high_watermark_past_the_followers_end() {
        let dir = tempfile::tempdir().unwrap();
        let f = follower_of_leader_1(dir.path(), LogConfig::default());
        let batches: Vec<Bytes> = (0..3).map(|o| stored(o, 1, &format!("v{o}"))).collect();
        push(&f, &batches, 10);
        let (size, lag) = f.log_dir_stats();
        assert_eq!(lag, 7);
        assert_eq!(size, batches.iter().map(|b| b.len() as u64).sum::<u64>());
        f.learn(2, 2, 1, &[1, 2], &[2], 0);
        assert_eq!(f.log_dir_stats().1, 0, "a leader is behind no one");
    }

    /// Issue 27 (item 6): retention stops at the newest snapshot at or below the high
    /// watermark. Here the snapshot where the segment holding the high watermark starts is
    /// gone (its write failed, say), and the only one left is above the high watermark: bounded
    /// by that one, retention would delete up to the high watermark, and a cut below it (from a
    /// leader that lacks the uncommitted suffix) would leave no snapshot to recover from, the
    /// producer state rebuilt from a log start past producer 1's fence.
    #[test]
    fn retention_keeps_what_recovery_needs_below_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 400, retention_bytes: Some(1), ..LogConfig::default() };
        let p = follower_of_leader_1(dir.path(), config);
        fencing_workload(&p);
        assert_eq!(p.producer_epoch(1), Some(1), "producer 1 fenced at epoch 1 early on");
        let snapshots = snapshot::list(&OsStorage, dir.path()).unwrap();
        let [.., (older, older_path), (newer, _)] = &snapshots[..] else { panic!("two snapshots: {snapshots:?}") };
        let (older, newer) = (*older, *newer);
        let hw = p.batch_headers().unwrap().into_iter().map(|(h, _)| h.base_offset).find(|o| *o > older && *o < newer);
        let hw = hw.expect("a batch between the two snapshots");
        push(&p, &[], hw);
        std::fs::remove_file(older_path).unwrap();
        p.enforce_retention(0).unwrap();
        // Broker 3 leads at epoch 2 without what follows the high watermark here.
        p.learn(3, 2, 1, &[1, 2, 3], &[3], 0);
        let mut other = producer_batch(hw, 9, 0, 0, false, None).to_vec();
        set_partition_leader_epoch(&mut other, 2);
        let req = ReplicateRequest { leader_epoch: 2, leader_id: 3, ..replicate_request(hw, &[Bytes::from(other)]) };
        p.apply_replicated(&req, true).unwrap();
        assert_eq!(p.producer_epoch(1), Some(1), "the fence survives the cut (log start {})", p.log_shape().0);
    }

    #[test]
    fn retention_stops_at_the_newest_snapshot_that_loads() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 400, retention_bytes: Some(1), ..LogConfig::default() };
        let p = follower_of_leader_1(dir.path(), config);
        fencing_workload(&p);
        let end = p.progress().0;
        push(&p, &[], end);
        for path in snapshot_files(dir.path()) {
            std::fs::write(&path, b"not a snapshot").unwrap();
        }
        assert_eq!(p.enforce_retention(0).unwrap(), 0, "no snapshot to recover the deleted producers from");
        assert_eq!(p.log_shape().0, 0);
    }

    /// A disk (in memory) that counts log writes and fails them while `fail` is set.
    #[derive(Debug, Default)]
    struct CountingDisk {
        disk: crate::storage::MemStorage,
        writes: Arc<std::sync::atomic::AtomicUsize>,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    #[derive(Debug)]
    struct CountingFile {
        file: Arc<dyn StoredFile>,
        writes: Arc<std::sync::atomic::AtomicUsize>,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Storage for CountingDisk {
        fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
            self.disk.create_dir_all(dir)
        }
        fn exists(&self, path: &Path) -> bool {
            self.disk.exists(path)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
            self.disk.list(dir)
        }
        fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn StoredFile>> {
            let file = self.disk.open(path, create)?;
            Ok(Arc::new(CountingFile { file, writes: self.writes.clone(), fail: self.fail.clone() }))
        }
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            self.disk.read(path)
        }
        fn write_file_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
            self.disk.write_file_atomically(path, bytes)
        }
        fn remove(&self, path: &Path) -> std::io::Result<()> {
            self.disk.remove(path)
        }
        fn sync_dir(&self, dir: &Path) {
            self.disk.sync_dir(dir)
        }
    }

    impl StoredFile for CountingFile {
        fn append(&self, pieces: &[&[u8]]) -> std::io::Result<()> {
            self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                // Part of it lands, as on a disk that fills up midway.
                self.file.append(&pieces[..1])?;
                return Err(std::io::Error::other("disk full (test)"));
            }
            self.file.append(pieces)
        }
        fn read_at(&self, pos: u64, len: usize) -> std::io::Result<Bytes> {
            self.file.read_at(pos, len)
        }
        fn len(&self) -> std::io::Result<u64> {
            self.file.len()
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.file.sync_data()
        }
    }

    /// Broker 1 leading at epoch 1 on a [`CountingDisk`], producer 7 (epoch 0) verified.
    fn counted_leader(config: LogConfig) -> (Partition, Arc<CountingDisk>) {
        let disk = Arc::new(CountingDisk::default());
        let p = Partition::open_with(disk.clone(), Path::new("/disk/t-0"), config, "t", 0, 1, true).unwrap();
        p.learn(1, 1, 0, &[1], &[1], 0);
        assert!(p.mark_verified(7, 0, false, p.verification_guard(7)));
        (p, disk)
    }

    fn offer_all(p: &Partition, batches: &[Bytes]) -> Vec<Result<Appended, AppendError>> {
        let headers: Vec<BatchHeader> = batches.iter().map(|b| BatchHeader::parse(b).unwrap()).collect();
        let offers: Vec<Offer<'_>> = batches
            .iter()
            .zip(&headers)
            .map(|(batch, header)| Offer { batch, header, leader_epoch: 1, acks_all: false })
            .collect();
        p.append_group(&offers)
    }

    /// The appends of `answers` (`None` for a refusal).
    fn oks(answers: &[Result<Appended, AppendError>]) -> Vec<Option<Appended>> {
        answers.iter().map(|a| a.as_ref().ok().copied()).collect()
    }

    fn new_at(base_offset: i64) -> Appended {
        Appended::New { base_offset, end_offset: base_offset + 1, leader_epoch: 1 }
    }

    #[test]
    fn a_group_is_checked_batch_by_batch_and_written_in_one_write() {
        let (p, disk) = counted_leader(LogConfig::default());
        let writes = || disk.writes.load(std::sync::atomic::Ordering::SeqCst);
        let b = |seq| producer_batch(0, 7, 0, seq, false, None);
        let before = writes();
        // Each batch's sequence follows the one before it in the group; a retry of one in the
        // group gets its offset; a gap is refused, as if each were appended alone.
        let answers = offer_all(&p, &[b(0), b(1), b(2), b(1), b(5), b(3)]);
        let duplicate = Appended::Duplicate { base_offset: 1, end_offset: 2, leader_epoch: 1 };
        assert_eq!(
            oks(&answers),
            [Some(new_at(0)), Some(new_at(1)), Some(new_at(2)), Some(duplicate), None, Some(new_at(3))]
        );
        assert!(matches!(answers[4], Err(AppendError::Gate(GateError::OutOfOrder { expected: 3, got: 5, .. }))));
        assert_eq!(writes() - before, 1, "four batches, one write");
        assert_eq!(p.progress().0, 4);
        // The same bytes as appending them one by one.
        let (q, _) = counted_leader(LogConfig::default());
        for seq in 0..4 {
            q.append(&b(seq), &BatchHeader::parse(&b(seq)).unwrap(), 1, false).unwrap();
        }
        assert_eq!(p.fetch_all_for_test(), q.fetch_all_for_test());
    }

    #[test]
    fn a_failed_group_write_appends_none_of_it_and_puts_the_producer_state_back() {
        let (p, disk) = counted_leader(LogConfig::default());
        let b = |seq| producer_batch(0, 7, 0, seq, false, None);
        assert_eq!(oks(&offer_all(&p, &[b(0)])), [Some(new_at(0))]);
        disk.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        // A retry of a staged batch and a gap after them were judged against the staged
        // batches: they fail with the write too, not as a duplicate or "expected 3".
        let answers = offer_all(&p, &[b(1), b(2), b(1), b(9)]);
        assert!(answers.iter().all(|a| matches!(a, Err(AppendError::Storage(_)))), "{answers:?}");
        assert_eq!(p.progress().0, 1, "nothing of the group is in the log");
        disk.fail.store(false, std::sync::atomic::Ordering::SeqCst);
        // Had the state kept the failed batches, 1 would be a duplicate and 2 out of order.
        assert_eq!(oks(&offer_all(&p, &[b(1), b(2)])), [Some(new_at(1)), Some(new_at(2))]);
        let mut expected = Vec::new();
        for (offset, seq) in (0..3).zip(0..3) {
            expected.extend_from_slice(&producer_batch(offset, 7, 0, seq, false, None));
        }
        assert_eq!(p.fetch_all_for_test(), expected, "the partial write was cut off");
    }

    #[test]
    fn a_group_stops_at_a_batch_that_needs_verification() {
        let (p, _) = counted_leader(LogConfig::default());
        let answers = offer_all(
            &p,
            &[
                producer_batch(0, 7, 0, 0, false, None),
                producer_batch(0, 8, 0, 0, true, None), // producer 8: not verified here yet
                producer_batch(0, 7, 0, 1, false, None),
            ],
        );
        assert_eq!(answers.len(), 2, "nothing after the batch that waits: {answers:?}");
        assert_eq!(oks(&answers[..1]), [Some(new_at(0))]);
        assert!(matches!(answers[1], Err(AppendError::NeedsVerification { producer_id: 8, epoch: 0, .. })));
        assert_eq!(p.progress().0, 1);
    }

    #[test]
    fn a_group_that_fills_the_segment_rolls_between_its_batches() {
        let (p, disk) = counted_leader(small_segments());
        let batches: Vec<Bytes> = (0..12).map(|seq| producer_batch(0, 7, 0, seq, false, None)).collect();
        let answers = offer_all(&p, &batches);
        assert_eq!(oks(&answers), (0..12).map(|o| Some(new_at(o))).collect::<Vec<_>>());
        let segments = p.log_shape().1;
        assert!(segments > 1, "400-byte segments");
        assert_eq!(disk.writes.load(std::sync::atomic::Ordering::SeqCst), segments, "one write per segment");
        // Reopened from its snapshots and log, it holds the same producer state.
        drop(p);
        let q = Partition::open_with(disk.clone(), Path::new("/disk/t-0"), small_segments(), "t", 0, 1, true).unwrap();
        q.learn(1, 1, 0, &[1], &[1], 0);
        assert!(q.mark_verified(7, 0, false, q.verification_guard(7)));
        let duplicate = Appended::Duplicate { base_offset: 11, end_offset: 12, leader_epoch: 1 };
        assert_eq!(oks(&offer_all(&q, &[batches[11].clone()])), [Some(duplicate)]);
        assert_eq!(oks(&offer_all(&q, &[producer_batch(0, 7, 0, 12, false, None)])), [Some(new_at(12))]);
    }

    #[test]
    fn a_follower_writes_a_replicate_requests_batches_in_one_write() {
        let disk = Arc::new(CountingDisk::default());
        let p =
            Partition::open_with(disk.clone(), Path::new("/disk/t-0"), LogConfig::default(), "t", 0, 2, true).unwrap();
        p.learn(1, 1, 0, &[1, 2], &[1, 2], 0); // broker 2 follows broker 1
        let before = disk.writes.load(std::sync::atomic::Ordering::SeqCst);
        let batches: Vec<Bytes> = (0..5).map(|o| producer_batch(o, 7, 0, o as i32, false, None)).collect();
        assert_eq!(push(&p, &batches, 0), 5);
        assert_eq!(disk.writes.load(std::sync::atomic::Ordering::SeqCst) - before, 1);
        // A failed write acknowledges nothing and leaves the state as it was.
        disk.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let more: Vec<Bytes> = (5..8).map(|o| producer_batch(o, 7, 0, o as i32, false, None)).collect();
        assert!(p.apply_replicated(&replicate_request(5, &more), true).is_err());
        assert_eq!(p.progress().0, 5);
        disk.fail.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(p.apply_replicated(&replicate_request(5, &more), true).unwrap(), 8);
    }
}
