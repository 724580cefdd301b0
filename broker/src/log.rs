//! A partition's log: segment files of RecordBatch v2 bytes, as stored by the leader (base
//! offset and partition leader epoch rewritten, every other byte as the producer sent it).
//!
//! Layout of a partition directory:
//!
//! ```text
//! 00000000000000000000.log      a segment: the batches from offset 0
//! 00000000000000000000.index    its offset index, written when the segment closed
//! 00000000000000052113.log      the active segment (the last one): the only one written to
//! 00000000000000052113.snapshot producer state as of offset 52113 (see the snapshot module)
//! ```
//!
//! A segment closes (rolls) when the next batch would take it past `segment_bytes`: it is
//! fdatasynced, its index is written and synced, and a new segment starts at the log end. A
//! closed segment is therefore durable and never changes again, except when a follower cuts a
//! divergent suffix into it (its index is then removed and it becomes the active segment).
//!
//! Opening a log loads each closed segment's index, checked by its CRC32C and against the
//! segment's size, instead of reading the segment (as Kafka trusts segments below its recovery
//! point); a closed segment without a valid index is scanned. The active segment is always
//! scanned: every batch's length, CRC32C and offset continuity are checked. A torn tail (a last
//! batch cut short or failing its checksum, or zeros, with no good batch after it) is cut off:
//! it was written after the last sync, and so never acknowledged under `--fsync always`. Any
//! other damage (a bad batch with good ones after it, damage in a closed segment that was
//! synced when it rolled) is cut too, but reported ([`Recovered::damage`]) with the cut bytes
//! kept in `<segment>.damaged`: the replica may have lost acknowledged records, so it must not
//! lead or count as in sync until it has refetched them from a replica that has them.
//!
//! Retention deletes whole closed segments from the front, by total size and by age (the
//! newest record timestamp in the segment), never past a bound the caller gives (the high
//! watermark and the newest producer-state snapshot). Which segments go is decided by
//! [`retention_cut`], a plain function of sizes, timestamps and `now`.
//!
//! DeleteRecords (KIP-107) moves the log start forward to any offset, also inside a segment:
//! [`PartitionLog::delete_before`] records it in [`LOG_START_FILE`] (written and synced before
//! it counts), readers see nothing below it ([`PartitionLog::log_start_offset`]), and retention
//! deletes the segments wholly below it. The batch holding it stays whole on disk, so
//! replication keeps sending whole batches from [`PartitionLog::start_offset`], the first
//! offset held.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use protocol::batch::{crc32c, marker_kind, verify_crc, BatchHeader, BatchIter, MarkerKind};
use protocol::Records;
use thiserror::Error;

use crate::storage::{OsStorage, Storage, StoredFile};

/// Extension of segment files.
pub const SEGMENT_SUFFIX: &str = "log";
/// Extension of segment index files.
pub const INDEX_SUFFIX: &str = "index";
/// Default most bytes in one segment before it rolls.
pub const SEGMENT_BYTES_DEFAULT: u64 = 128 * 1024 * 1024;
/// The file in a partition's directory holding the log start DeleteRecords set, when it is
/// above the first offset the segments hold.
pub const LOG_START_FILE: &str = "log-start-offset";
const LOG_START_HEADER: &str = "epochfence log start offset v1";
const INDEX_MAGIC: &[u8; 4] = b"EFIX";
const INDEX_VERSION: u16 = 1;
const INDEX_ENTRY_BYTES: usize = 28;
const INDEX_HEADER_BYTES: usize = 4 + 2 + 8 + 8 + 4;

/// `00000000000000000042.log`: the file name of the segment or snapshot starting at `offset`.
pub fn offset_file_name(offset: i64, suffix: &str) -> String {
    format!("{offset:020}.{suffix}")
}

/// The segment files in `dir` (on the operating system's disk), in offset order.
pub fn segment_files(dir: &Path) -> std::io::Result<Vec<(i64, PathBuf)>> {
    offset_files(&OsStorage, dir, SEGMENT_SUFFIX)
}

/// The files `<offset>.<suffix>` in `dir`, in offset order (other names are ignored).
pub fn offset_files(storage: &dyn Storage, dir: &Path, suffix: &str) -> std::io::Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for path in storage.list(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(stem) = name.strip_suffix(suffix).and_then(|s| s.strip_suffix('.')) else { continue };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(offset) = stem.parse::<i64>() {
                out.push((offset, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Segment size and retention settings of a partition log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment rolls when the next batch would take it past this many bytes.
    pub segment_bytes: u64,
    /// Delete the oldest closed segments while the log is bigger than this (none: keep all).
    pub retention_bytes: Option<u64>,
    /// Delete closed segments whose newest record is older than this (none: keep all).
    pub retention_ms: Option<i64>,
    /// Roll the active segment at the next append once its first batch (in this process) is
    /// this old by the broker's clock (none: by size only). A topic's `segment.ms`.
    pub segment_ms: Option<i64>,
    /// fdatasync a segment when it closes, so closed segments are durable (`--fsync always`
    /// and `interval-ms`). Off under `--fsync never`: a roll then costs no disk flush, and a
    /// closed segment found torn on open (a power loss) ends the log there.
    pub sync_on_roll: bool,
    /// Reserve the active segment's disk blocks this many bytes ahead of its end (at most up
    /// to `segment_bytes`), so that appends skip the file system's per-page block allocation;
    /// 0 turns it off. The file's length is not changed.
    pub preallocate_bytes: u64,
    /// While the log keeps its tail ([`PartitionLog::keep_tail`]: a leader with followers in sync),
    /// at most this many bytes of the batches appended last stay in memory, so that Replicate
    /// requests are sent from them instead of read back from the file; 0 turns it off.
    pub replication_cache_bytes_max: usize,
}

/// Default of [`LogConfig::preallocate_bytes`]: 4 MiB.
pub const PREALLOCATE_BYTES_DEFAULT: u64 = 4 * 1024 * 1024;

/// Default of [`LogConfig::replication_cache_bytes_max`]: 1 MiB, a full Replicate request at the
/// broker's default `replication_bytes_max`.
pub const REPLICATION_CACHE_BYTES_MAX_DEFAULT: usize = 1024 * 1024;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            retention_bytes: None,
            retention_ms: None,
            segment_ms: None,
            sync_on_roll: true,
            preallocate_bytes: PREALLOCATE_BYTES_DEFAULT,
            replication_cache_bytes_max: REPLICATION_CACHE_BYTES_MAX_DEFAULT,
        }
    }
}

/// Log failures.
#[derive(Debug, Error, Clone)]
pub enum LogError {
    /// An I/O call failed.
    #[error("log {path}: {op} failed: {detail}")]
    Io {
        /// File.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        detail: String,
    },
    /// Damage with intact data after it.
    #[error("log {path} is corrupt at byte {pos}: {detail}; the partition will not serve past it")]
    Corrupt {
        /// File.
        path: String,
        /// Byte position.
        pos: u64,
        /// What is wrong.
        detail: String,
    },
    /// An earlier write failed and could not be undone; the log takes no more writes.
    #[error("log {path} stopped taking writes after a failure: {detail}")]
    Failed {
        /// File.
        path: String,
        /// The failure.
        detail: String,
    },
}

fn io_error<'a>(path: &'a Path, op: &'static str) -> impl Fn(std::io::Error) -> LogError + 'a {
    move |e| LogError::Io { path: path.display().to_string(), op, detail: e.to_string() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexEntry {
    base_offset: i64,
    last_offset: i64,
    leader_epoch: i32,
    /// Byte position in the segment.
    pos: u64,
}

/// One segment file and its in-memory offset index (one entry per batch).
#[derive(Debug)]
struct Segment {
    base_offset: i64,
    path: PathBuf,
    /// Read and append handle; reads are positional, so it is shared with readers.
    file: Arc<dyn StoredFile>,
    size: u64,
    /// Newest record timestamp in the segment (ms), for retention by age.
    max_timestamp: i64,
    index: Vec<IndexEntry>,
    /// An index file on disk describes this segment as it is (closed segments, and the active
    /// one after a clean shutdown until its next append).
    indexed: bool,
    /// Disk blocks are reserved up to here (see [`LogConfig::preallocate_bytes`]);
    /// [`RESERVE_REFUSED`] once the file system refused, so that it is not asked again.
    reserved: u64,
}

/// [`Segment::reserved`] once the file system refused to reserve blocks.
const RESERVE_REFUSED: u64 = u64::MAX;

impl Segment {
    /// The file was cut (or set) to `len`, which frees the blocks reserved past it.
    fn forget_reserved_past(&mut self, len: u64) {
        if self.reserved != RESERVE_REFUSED {
            self.reserved = self.reserved.min(len);
        }
    }

    fn end_offset(&self) -> i64 {
        self.index.last().map_or(self.base_offset, |e| e.last_offset + 1)
    }

    fn index_path(&self) -> PathBuf {
        self.path.with_extension(INDEX_SUFFIX)
    }

    /// Position of the batch holding `offset` (the segment's size past its end).
    fn position(&self, offset: i64) -> (usize, u64) {
        let i = self.index.partition_point(|e| e.last_offset < offset);
        (i, self.index.get(i).map_or(self.size, |e| e.pos))
    }
}

/// One partition's log: its segments, their offset indexes and the leader-epoch cache.
#[derive(Debug)]
pub struct PartitionLog {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    config: LogConfig,
    /// Never empty; the last one is the active segment.
    segments: Vec<Segment>,
    /// The leader-epoch cache: (leader epoch, first offset of that epoch), ascending. It is
    /// derived from the batches (each carries the epoch it was appended under), so it is
    /// persisted with the log by construction and rebuilt from the indexes on open.
    epochs: Vec<(i32, i64)>,
    /// The leader epoch of the batch just before the log start, when known (kept from the last
    /// segment retention deleted, or given by the leader a follower started over from).
    epoch_before_start: Option<i32>,
    /// The log start DeleteRecords set (0: none): readers see nothing below it. Held in
    /// [`LOG_START_FILE`]; at most the log end.
    deleted_before: i64,
    /// When (wall-clock ms) the active segment got its first batch in this process, or this
    /// process opened it holding some; `None` while it is empty ([`LogConfig::segment_ms`]).
    active_since_ms: Option<i64>,
    failed: Option<String>,
    tail: Tail,
}

/// The wall clock in ms since the Unix epoch.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The batches appended last, in memory as they went to the file: each batch's rewritten
/// first 16 bytes and the rest as the producer sent it, sharing the buffer the request was
/// read into when it is [`TAIL_SHARE_BYTES_MIN`] or more, else copied (a small batch must not
/// keep a whole read buffer alive). Whole batches, consecutive, ending at the log's end;
/// oldest dropped first past `bytes_max` (counting each batch's bookkeeping too). A pure cache:
/// every change to the log other than an append drops what it no longer matches, and a read
/// it cannot serve goes to the file.
#[derive(Debug, Default)]
struct Tail {
    batches: VecDeque<TailBatch>,
    bytes: usize,
    /// 0: keep nothing.
    bytes_max: usize,
}

/// A batch at least this big is kept in the log's tail as the bytes it arrived in (which keeps
/// the connection's read buffer they are part of, at most 256 KiB, alive while it is kept);
/// a smaller one is copied.
pub const TAIL_SHARE_BYTES_MIN: usize = 16 * 1024;

#[derive(Debug)]
struct TailBatch {
    base_offset: i64,
    last_offset: i64,
    prefix: Bytes,
    rest: Bytes,
}

impl TailBatch {
    fn cost(&self) -> usize {
        self.prefix.len() + self.rest.len() + std::mem::size_of::<TailBatch>()
    }
}

impl Tail {
    /// Drop every batch, and the room they took.
    fn clear(&mut self) {
        self.batches = VecDeque::new();
        self.bytes = 0;
    }

    fn push(&mut self, batch: TailBatch) {
        if self.bytes_max == 0 {
            return;
        }
        if self.batches.back().is_some_and(|b| b.last_offset + 1 != batch.base_offset) {
            self.clear(); // not consecutive: cannot happen while every cut calls `cut_back`
        }
        self.bytes += batch.cost();
        self.batches.push_back(batch);
        while self.bytes > self.bytes_max {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(b) = self.batches.pop_front() {
            self.bytes -= b.cost();
        }
    }

    /// Drop every batch that does not end below `end`.
    fn cut_back(&mut self, end: i64) {
        while let Some(b) = self.batches.back().filter(|b| b.last_offset >= end) {
            self.bytes -= b.cost();
            self.batches.pop_back();
        }
    }

    /// Drop every batch that ends below `offset`, and most of the room they took once few are
    /// left.
    fn release_below(&mut self, offset: i64) {
        while self.batches.front().is_some_and(|b| b.last_offset < offset) {
            self.pop_front();
        }
        if self.batches.capacity() > 64 && self.batches.len() < self.batches.capacity() / 4 {
            self.batches.shrink_to(self.batches.len() * 2);
        }
    }

    /// By [`PartitionLog::locate`]'s rule, except that it may cross segments: the batch holding
    /// `offset`, then the ones after it while they end below `limit` and all fit in
    /// `max_bytes`; `None` if the tail does not hold it.
    fn read(&self, offset: i64, max_bytes: usize, limit: i64) -> Option<(Records, i64)> {
        let first = self.batches.partition_point(|b| b.last_offset < offset);
        let b = self.batches.get(first).filter(|b| b.base_offset <= offset && b.last_offset < limit)?;
        let mut pieces = vec![b.prefix.clone(), b.rest.clone()];
        let (mut bytes, mut end) = (b.prefix.len() + b.rest.len(), b.last_offset + 1);
        for b in self.batches.range(first + 1..) {
            let len = b.prefix.len() + b.rest.len();
            if b.last_offset >= limit || bytes + len > max_bytes {
                break;
            }
            pieces.extend([b.prefix.clone(), b.rest.clone()]);
            (bytes, end) = (bytes + len, b.last_offset + 1);
        }
        Some((Records::from_pieces(pieces), end))
    }
}

/// A log opened after recovery.
pub struct Recovered {
    /// The log.
    pub log: PartitionLog,
    /// Bytes cut off a torn tail.
    pub truncated_bytes: u64,
    /// Bytes read and checked by the scan (the active segment, and closed ones without index).
    pub scanned_bytes: u64,
    /// Damage found and cut (not a torn tail: see [`PartitionLog::open`]), described. The log
    /// may have lost acknowledged records: this replica must leave the ISR and refetch them
    /// before it may lead.
    pub damage: Option<String>,
}

/// Bytes to read for a fetch or a replication push: whole batches of one segment.
#[derive(Debug, Clone)]
pub struct ReadRange {
    /// The segment file (read positionally, outside the partition lock).
    pub file: Arc<dyn StoredFile>,
    /// Byte position in it.
    pub pos: u64,
    /// Bytes.
    pub len: usize,
    /// The offset after the last batch in it.
    pub end_offset: i64,
}

impl ReadRange {
    /// Read the bytes.
    pub fn read(&self) -> std::io::Result<Bytes> {
        self.file.read_at(self.pos, self.len)
    }
}

/// What retention needs to know of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Bytes in the segment.
    pub bytes: u64,
    /// Newest record timestamp in it (ms since the Unix epoch).
    pub max_timestamp: i64,
    /// The offset after its last batch.
    pub end_offset: i64,
}

/// How many of the oldest segments retention deletes: a prefix of closed segments (the last,
/// active, one always stays), each ending at or below `keep_below`, and each either ending at
/// or below `log_start` (DeleteRecords' start: nothing in it is readable), taking the log past
/// `retention_bytes` (what remains after deleting it is still at least that big, as in Kafka)
/// or holding only records older than `retention_ms` before `now_ms`.
pub fn retention_cut(
    segments: &[SegmentSummary],
    config: &LogConfig,
    now_ms: i64,
    (keep_below, log_start): (i64, i64),
) -> usize {
    let mut total: u64 = segments.iter().map(|s| s.bytes).sum();
    let closed = segments.len().saturating_sub(1);
    let mut n = 0;
    for s in &segments[..closed] {
        if s.end_offset > keep_below {
            break;
        }
        let too_big = config.retention_bytes.is_some_and(|max| total - s.bytes >= max);
        let too_old = config.retention_ms.is_some_and(|ms| s.max_timestamp < now_ms.saturating_sub(ms));
        let deleted = s.end_offset <= log_start;
        if !(too_big || too_old || deleted) {
            break;
        }
        total -= s.bytes;
        n += 1;
    }
    n
}

impl PartitionLog {
    /// Open (or create) the log in `dir`, loading closed segments' indexes and scanning and
    /// repairing the active segment.
    pub fn open(dir: &Path, config: LogConfig) -> Result<Recovered, LogError> {
        Self::open_in(Arc::new(OsStorage), dir, config)
    }

    /// [`PartitionLog::open`] on `storage`.
    pub fn open_in(storage: Arc<dyn Storage>, dir: &Path, config: LogConfig) -> Result<Recovered, LogError> {
        let st = storage.as_ref();
        let created = !st.exists(dir);
        st.create_dir_all(dir).map_err(io_error(dir, "create directory"))?;
        if created {
            // Make the new directory itself durable, not only what it will hold.
            st.sync_dir(dir.parent().unwrap_or(dir));
        }
        remove_leftovers(st, dir)?;
        let mut files = offset_files(st, dir, SEGMENT_SUFFIX).map_err(io_error(dir, "list"))?;
        if files.is_empty() {
            let path = dir.join(offset_file_name(0, SEGMENT_SUFFIX));
            st.open(&path, true).map_err(io_error(&path, "create"))?;
            st.sync_dir(dir);
            files.push((0, path));
        }
        let last = files.len() - 1;
        let mut segments: Vec<Segment> = Vec::with_capacity(files.len());
        let (mut truncated_bytes, mut scanned_bytes) = (0, 0);
        let mut damage = None;
        let mut files = files.into_iter().enumerate();
        while let Some((i, (base_offset, path))) = files.next() {
            if let Some(due) = segments.last().map(Segment::end_offset) {
                if base_offset != due {
                    return Err(LogError::Corrupt {
                        path: path.display().to_string(),
                        pos: 0,
                        detail: format!("the segment starts at offset {base_offset} where {due} was due"),
                    });
                }
            }
            let file = st.open(&path, false).map_err(io_error(&path, "open"))?;
            let size = file.len().map_err(io_error(&path, "stat"))?;
            let mut seg = Segment {
                base_offset,
                path,
                file,
                size,
                max_timestamp: -1,
                index: Vec::new(),
                indexed: false,
                reserved: 0,
            };
            // The active segment has a valid index only after a clean shutdown (written after
            // its sync, and removed at its next append): then it is not scanned either.
            seg.indexed = load_index(st, &mut seg, i != last) && (i != last || last_batch_checks_out(&seg));
            if !seg.indexed {
                // Closed segments were synced when they rolled: damage in one is damage, unless
                // rolls do not sync (`--fsync never`), where a power loss can tear one.
                let Scanned { cut, damage: found } = scan(st, &mut seg, i == last || !config.sync_on_roll)?;
                truncated_bytes += cut;
                scanned_bytes += seg.size + cut;
                let damaged = found.is_some();
                damage = damage.or(found);
                if cut > 0 && i != last {
                    // The log ends in this segment: what follows it cannot follow it.
                    for (_, (_, later)) in files.by_ref() {
                        if damaged {
                            // It may hold acknowledged records the damage cut off: kept aside.
                            let bytes = st.read(&later).map_err(io_error(&later, "read"))?;
                            keep_aside(st, &later, &bytes)?;
                        }
                        tracing::warn!(path = %later.display(), "removing a segment after a torn or damaged one");
                        remove_if_present(st, &later.with_extension(INDEX_SUFFIX))?;
                        remove_if_present(st, &later)?;
                    }
                    remove_if_present(st, &seg.index_path())?;
                    st.sync_dir(dir);
                    segments.push(seg);
                    break;
                }
                if i != last {
                    match write_index(st, &seg) {
                        Ok(()) => seg.indexed = true,
                        Err(e) => {
                            tracing::warn!(path = %seg.path.display(), error = %e, "could not rewrite a segment index")
                        }
                    }
                }
            }
            segments.push(seg);
        }
        let deleted_before = read_log_start(st, dir);
        let mut log = PartitionLog {
            storage,
            dir: dir.to_path_buf(),
            config,
            segments,
            epochs: Vec::new(),
            epoch_before_start: None,
            deleted_before: 0,
            active_since_ms: None,
            failed: None,
            tail: Tail::default(),
        };
        log.rebuild_epochs();
        log.active_since_ms = (log.active().size > 0).then(wall_ms);
        log.deleted_before = deleted_before.min(log.end_offset());
        Ok(Recovered { log, truncated_bytes, scanned_bytes, damage })
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a log has at least one segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.last_mut().expect("a log has at least one segment")
    }

    fn segment_for(&self, offset: i64) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        self.segments.get(i.checked_sub(1)?)
    }

    fn failed_error(&self) -> Option<LogError> {
        self.failed
            .as_ref()
            .map(|detail| LogError::Failed { path: self.dir.display().to_string(), detail: detail.clone() })
    }

    /// Whether an earlier failure stopped this log taking writes.
    pub fn has_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Stop taking writes (an fdatasync failed).
    pub fn fail(&mut self, detail: String) {
        tracing::error!(path = %self.dir.display(), %detail, "log stops taking writes");
        self.failed.get_or_insert(detail);
    }

    /// The offset the next batch gets.
    pub fn end_offset(&self) -> i64 {
        self.active().end_offset()
    }

    /// The first offset the segments still hold (above 0 once retention deleted segments):
    /// where replication sends from. Readers start at [`PartitionLog::log_start_offset`].
    pub fn start_offset(&self) -> i64 {
        self.segments[0].base_offset
    }

    /// The log start offset readers see: the first offset held, or the one DeleteRecords set
    /// if later (inside the batch that holds it, maybe).
    pub fn log_start_offset(&self) -> i64 {
        self.deleted_before.max(self.start_offset())
    }

    /// DeleteRecords: readers see nothing below `offset` from now on, durably (written to
    /// [`LOG_START_FILE`] and synced before it counts); the segments wholly below it go at the
    /// next retention pass. Returns whether the start moved (`offset` is clamped to the log
    /// end; a start already past it stays).
    pub fn delete_before(&mut self, offset: i64) -> Result<bool, LogError> {
        let offset = offset.min(self.end_offset());
        if offset <= self.log_start_offset() {
            return Ok(false);
        }
        if let Some(e) = self.failed_error() {
            return Err(e);
        }
        self.write_log_start(offset)?;
        self.deleted_before = offset;
        self.tail.release_below(self.batch_start(offset));
        Ok(true)
    }

    /// Whether a retention pass could delete anything: retention is set, or DeleteRecords'
    /// start is past the first segment.
    pub fn retention_may_cut(&self) -> bool {
        self.config.retention_bytes.is_some()
            || self.config.retention_ms.is_some()
            || self.segments.get(1).is_some_and(|s| s.base_offset <= self.deleted_before)
    }

    fn write_log_start(&self, offset: i64) -> Result<(), LogError> {
        let path = self.dir.join(LOG_START_FILE);
        self.storage
            .write_file_atomically(&path, format!("{LOG_START_HEADER}\n{offset}\n").as_bytes())
            .map_err(io_error(&path, "record the log start"))?;
        self.storage.sync_dir(&self.dir);
        Ok(())
    }

    /// After a cut to `end`: a DeleteRecords start past it comes back to it, durably, so
    /// that the records appended from there on are readable.
    fn lower_log_start_to(&mut self, end: i64) -> Result<(), LogError> {
        if self.deleted_before > end {
            self.write_log_start(end)?;
            self.deleted_before = end;
        }
        Ok(())
    }

    /// Bytes in the log.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The settings the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the log is stored.
    pub fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    /// Where the log is stored, to use without the log at hand (outside a lock).
    pub fn storage_arc(&self) -> Arc<dyn Storage> {
        self.storage.clone()
    }

    /// Whether a batch of `batch_bytes` must go to a new segment (see [`PartitionLog::roll`]).
    pub fn should_roll(&self, batch_bytes: u64) -> bool {
        self.should_roll_after(0, batch_bytes)
    }

    /// Whether a batch of `batch_bytes` must go to a new segment once `pending_bytes` more
    /// (batches to be written before it) are in the active one. A batch never waits for an
    /// empty segment.
    pub fn should_roll_after(&self, pending_bytes: u64, batch_bytes: u64) -> bool {
        let size = self.active().size + pending_bytes;
        let aged = match (self.config.segment_ms, self.active_since_ms) {
            (Some(ms), Some(since)) => self.active().size > 0 && wall_ms().saturating_sub(since) >= ms,
            _ => false,
        };
        size > 0 && (size + batch_bytes > self.config.segment_bytes || aged)
    }

    /// Take new settings (a topic's configs over the broker's): a smaller `segment_bytes` or a
    /// `segment_ms` applies from the next append, retention from its next pass.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Close the active segment (fdatasync it unless `sync_on_roll` is off, write its index)
    /// and start a new one at the log end. With the sync, everything below the new segment is
    /// then durable.
    pub fn roll(&mut self) -> Result<(), LogError> {
        if let Some(e) = self.failed_error() {
            return Err(e);
        }
        let active = self.active();
        if !self.config.sync_on_roll {
            // No sync: the index still goes, checked against the segment's size on open.
        } else if let Err(e) = active.file.sync_data() {
            let detail = format!("fdatasync of {} failed: {e}", active.path.display());
            self.fail(detail.clone());
            return Err(LogError::Io { path: self.dir.display().to_string(), op: "roll", detail });
        }
        if active.reserved > active.size && active.reserved != RESERVE_REFUSED {
            // Give back the blocks reserved past the end (a truncation to the same length
            // frees them), so that a closed segment holds only its own.
            if let Err(e) = active.file.set_len(active.size) {
                tracing::debug!(path = %active.path.display(), error = %e, "could not free the blocks reserved past a closed segment");
            }
        }
        if let Err(e) = write_index(self.storage.as_ref(), active) {
            // Only an optimisation: the segment is scanned on the next open instead.
            tracing::warn!(path = %active.path.display(), error = %e, "could not write a segment index");
        }
        self.active_mut().indexed = true;
        let base_offset = self.end_offset();
        let path = self.dir.join(offset_file_name(base_offset, SEGMENT_SUFFIX));
        let file = self.storage.open(&path, true).map_err(io_error(&path, "create"))?;
        self.storage.sync_dir(&self.dir);
        tracing::debug!(path = %path.display(), "rolled to a new segment");
        self.segments.push(Segment {
            base_offset,
            path,
            file,
            size: 0,
            max_timestamp: -1,
            index: Vec::new(),
            indexed: false,
            reserved: 0,
        });
        self.active_since_ms = None;
        Ok(())
    }

    /// Append one batch to the active segment. `prefix` holds its first 16 bytes (base offset,
    /// length and leader epoch as rewritten by the caller), `rest` the bytes after them as
    /// received, so the batch is never copied. On a failed write the file is cut back to where
    /// it was.
    pub fn append(&mut self, prefix: &[u8; 16], rest: Bytes, header: &BatchHeader) -> Result<(), LogError> {
        self.append_many(&[(prefix, rest, header)])
    }

    /// Append consecutive batches to the active segment in one vectored write, each as
    /// [`PartitionLog::append`] takes it. All or none: on a failed write the file is cut back
    /// to where it was and none of them is in the log.
    pub fn append_many(&mut self, batches: &[(&[u8; 16], Bytes, &BatchHeader)]) -> Result<(), LogError> {
        if let Some(e) = self.failed_error() {
            return Err(e);
        }
        let storage = self.storage.clone();
        let (preallocate_bytes, segment_bytes) = (self.config.preallocate_bytes, self.config.segment_bytes);
        let seg = self.active_mut();
        if seg.indexed {
            // The clean-shutdown index of the active segment stops describing it now (durably:
            // it must not come back after a power loss to describe other bytes).
            remove_if_present(storage.as_ref(), &seg.index_path())?;
            storage.sync_dir(seg.path.parent().unwrap_or(Path::new(".")));
            seg.indexed = false;
        }
        let bytes: u64 = batches.iter().map(|(prefix, rest, _)| (prefix.len() + rest.len()) as u64).sum();
        let end = seg.size + bytes;
        if end > seg.reserved && preallocate_bytes > 0 {
            // Only a hint: a file system that cannot reserve blocks still takes the writes.
            let to = end.saturating_add(preallocate_bytes).min(segment_bytes.max(end));
            match seg.file.preallocate(seg.size, to) {
                Ok(()) => seg.reserved = to,
                Err(e) => {
                    tracing::debug!(path = %seg.path.display(), error = %e, "cannot preallocate; appending without");
                    seg.reserved = RESERVE_REFUSED;
                }
            }
        }
        let pieces: Vec<&[u8]> = batches.iter().flat_map(|(prefix, rest, _)| [&prefix[..], &rest[..]]).collect();
        if let Err(e) = seg.file.append(&pieces) {
            let detail = e.to_string();
            let path = seg.path.display().to_string();
            seg.forget_reserved_past(seg.size);
            if let Err(undo) = seg.file.set_len(seg.size) {
                self.fail(format!("write failed ({detail}) and the partial batches could not be removed ({undo})"));
            }
            return Err(LogError::Io { path, op: "write", detail });
        }
        if self.active().size == 0 {
            self.active_since_ms = Some(wall_ms());
        }
        for (prefix, rest, header) in batches {
            let seg = self.active_mut();
            seg.index.push(IndexEntry {
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
                leader_epoch: header.partition_leader_epoch,
                pos: seg.size,
            });
            seg.size += (prefix.len() + rest.len()) as u64;
            seg.max_timestamp = seg.max_timestamp.max(header.max_timestamp);
            if self.epochs.last().is_none_or(|(e, _)| *e != header.partition_leader_epoch) {
                self.epochs.push((header.partition_leader_epoch, header.base_offset));
            }
            if self.tail.bytes_max > 0 {
                let (prefix, rest) = if rest.len() >= TAIL_SHARE_BYTES_MIN {
                    (Bytes::copy_from_slice(&prefix[..]), rest.clone())
                } else {
                    (Bytes::from([&prefix[..], &rest[..]].concat()), Bytes::new())
                };
                let (base_offset, last_offset) = (header.base_offset, header.last_offset());
                self.tail.push(TailBatch { base_offset, last_offset, prefix, rest });
            }
        }
        Ok(())
    }

    /// Keep the batches appended from now on in memory, up to
    /// [`LogConfig::replication_cache_bytes_max`], for [`PartitionLog::read_tail`] (a leader with
    /// followers in sync); or (`false`) keep none, and drop what is kept.
    pub fn keep_tail(&mut self, keep: bool) {
        self.tail.bytes_max = if keep { self.config.replication_cache_bytes_max } else { 0 };
        if !keep && self.tail.batches.capacity() > 0 {
            self.tail.clear();
        }
    }

    /// The batches from `offset` by [`PartitionLog::locate`]'s rule (but not stopping at a
    /// segment's end), from memory, if the kept tail holds the batch with `offset` in it;
    /// returns them and the offset after the last.
    pub fn read_tail(&self, offset: i64, max_bytes: usize, limit: i64) -> Option<(Records, i64)> {
        self.tail.read(offset, max_bytes, limit)
    }

    /// Stop keeping the batches that end below `offset` (every in-sync follower is past them).
    pub fn release_tail_below(&mut self, offset: i64) {
        self.tail.release_below(offset);
    }

    fn rebuild_epochs(&mut self) {
        self.epochs.clear();
        for e in self.segments.iter().flat_map(|s| &s.index) {
            if self.epochs.last().is_none_or(|(ep, _)| *ep != e.leader_epoch) {
                self.epochs.push((e.leader_epoch, e.base_offset));
            }
        }
    }

    /// The leader-epoch cache, (epoch, first offset), ascending.
    pub fn epoch_cache(&self) -> &[(i32, i64)] {
        &self.epochs
    }

    /// Leader epoch of the batch holding `offset` (for the offset just before the log start,
    /// the epoch of the batch that ended there, when known).
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        if offset >= self.end_offset() {
            return None;
        }
        if offset == self.start_offset() - 1 {
            return self.epoch_before_start;
        }
        let seg = self.segment_for(offset)?;
        let (i, _) = seg.position(offset);
        seg.index.get(i).map(|e| e.leader_epoch)
    }

    /// First offset of the run of the epoch that holds `offset` (from the epoch cache).
    pub fn epoch_start(&self, offset: i64) -> i64 {
        let i = self.epochs.partition_point(|(_, start)| *start <= offset);
        if i == 0 {
            self.start_offset()
        } else {
            self.epochs[i - 1].1
        }
    }

    /// Where the first epoch this log's cache knows starts, if it knows one.
    pub fn first_epoch_start(&self) -> Option<i64> {
        self.epochs.first().map(|(_, start)| *start)
    }

    /// OffsetsForLeaderEpoch: the largest epoch in this log's cache at or below `epoch`, and
    /// the offset where it ends here (the start of the next epoch, or the log end). `(-1, 0)`
    /// if the log has no epoch that old.
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let i = self.epochs.partition_point(|(e, _)| *e <= epoch);
        if i == 0 {
            return (-1, 0);
        }
        let end = self.epochs.get(i).map_or(self.end_offset(), |(_, start)| *start);
        (self.epochs[i - 1].0, end)
    }

    /// The first offset of the batch holding `offset` (the log end if `offset` is past it,
    /// the log start if before it).
    pub fn batch_start(&self, offset: i64) -> i64 {
        if offset >= self.end_offset() {
            return self.end_offset();
        }
        let offset = offset.max(self.start_offset());
        let Some(seg) = self.segment_for(offset) else { return self.end_offset() };
        let (i, _) = seg.position(offset);
        seg.index.get(i).map_or(self.end_offset(), |e| e.base_offset)
    }

    /// Cut the log back to `offset` (rounded down to a batch boundary); returns the new end.
    /// Later segments are deleted newest first, so a crash midway leaves a shorter valid log.
    pub fn truncate(&mut self, offset: i64) -> Result<i64, LogError> {
        if offset >= self.end_offset() {
            return Ok(self.end_offset());
        }
        let offset = offset.max(self.start_offset());
        let keep = self.segments.partition_point(|s| s.base_offset <= offset).max(1);
        let storage = self.storage.clone();
        let st = storage.as_ref();
        let result = (|| {
            while self.segments.len() > keep {
                let seg = self.segments.last().expect("more than `keep` segments");
                remove_if_present(st, &seg.index_path())?;
                remove_if_present(st, &seg.path)?;
                self.segments.pop();
            }
            let dir = self.dir.clone();
            let seg = self.active_mut();
            // It is the active segment now: it changes, so its index goes.
            remove_if_present(st, &seg.index_path())?;
            seg.indexed = false;
            // The removals are durable before the cut: after a power loss neither a removed
            // segment nor a stale index comes back to describe the bytes written after it.
            st.sync_dir(&dir);
            let (i, pos) = seg.position(offset);
            seg.file.set_len(pos).map_err(io_error(&seg.path, "truncate"))?;
            seg.file.sync_data().map_err(io_error(&seg.path, "sync"))?;
            seg.index.truncate(i);
            seg.size = pos;
            seg.forget_reserved_past(pos);
            Ok(seg.end_offset())
        })();
        match result {
            Ok(end) => {
                self.epochs.retain(|(_, start)| *start < end);
                self.tail.cut_back(end);
                self.lower_log_start_to(end)?;
                Ok(end)
            }
            Err(e) => {
                self.tail.clear();
                self.fail(format!("truncation to offset {offset} failed midway: {e}"));
                Err(e)
            }
        }
    }

    /// Delete everything and start an empty log at `offset` (a follower whose leader no
    /// longer holds the offsets this log would need next).
    pub fn reset_to(&mut self, offset: i64, epoch_before: Option<i32>) -> Result<(), LogError> {
        self.tail.clear();
        let path = self.dir.join(offset_file_name(offset, SEGMENT_SUFFIX));
        let storage = self.storage.clone();
        let st = storage.as_ref();
        let result = (|| {
            while let Some(seg) = self.segments.pop() {
                remove_if_present(st, &seg.index_path())?;
                remove_if_present(st, &seg.path)?;
            }
            let file = st.open(&path, true).map_err(io_error(&path, "create"))?;
            st.sync_dir(&self.dir);
            Ok(file)
        })();
        match result {
            Ok(file) => {
                self.segments.push(Segment {
                    base_offset: offset,
                    path,
                    file,
                    size: 0,
                    max_timestamp: -1,
                    index: Vec::new(),
                    indexed: false,
                    reserved: 0,
                });
                self.epochs.clear();
                self.epoch_before_start = epoch_before;
                self.active_since_ms = None;
                self.lower_log_start_to(offset)
            }
            Err(e) => {
                self.fail(format!("reset to offset {offset} failed midway: {e}"));
                Err(e)
            }
        }
    }

    /// Delete the closed segments retention allows (see [`retention_cut`]), none ending
    /// above `keep_below`; returns how many went.
    pub fn enforce_retention(&mut self, now_ms: i64, keep_below: i64) -> Result<usize, LogError> {
        let summaries: Vec<SegmentSummary> = self
            .segments
            .iter()
            .map(|s| SegmentSummary { bytes: s.size, max_timestamp: s.max_timestamp, end_offset: s.end_offset() })
            .collect();
        let n = retention_cut(&summaries, &self.config, now_ms, (keep_below, self.deleted_before));
        let mut deleted = 0;
        let mut result = Ok(());
        for seg in &self.segments[..n] {
            // The index first: a segment without one is still a valid (scanned) segment.
            let st = self.storage.as_ref();
            if let Err(e) = remove_if_present(st, &seg.index_path()).and_then(|()| remove_if_present(st, &seg.path)) {
                result = Err(e);
                break;
            }
            deleted += 1;
        }
        if deleted > 0 {
            self.storage.sync_dir(&self.dir);
            // Remember the leader epoch just before the new start: a leader still vouches for
            // the batch before the first one it sends a follower (`epoch_at(start - 1)`).
            self.epoch_before_start = self.segments[deleted - 1].index.last().map(|e| e.leader_epoch);
            self.segments.drain(..deleted);
            self.rebuild_epochs();
            self.tail.release_below(self.start_offset());
            tracing::info!(path = %self.dir.display(), segments = deleted, start_offset = self.start_offset(), "retention deleted segments");
        }
        result.map(|()| deleted)
    }

    /// Header and marker kind of every batch from `offset` (a batch boundary) to the end,
    /// read back from the segments: for rebuilding producer state and the transaction index.
    pub fn headers_from(&self, offset: i64) -> Result<Vec<(BatchHeader, Option<MarkerKind>)>, LogError> {
        let mut out = Vec::new();
        for seg in self.segments.iter().filter(|s| s.end_offset() > offset) {
            let (_, pos) = seg.position(offset);
            let bytes = seg.file.read_at(pos, (seg.size - pos) as usize).map_err(io_error(&seg.path, "read"))?;
            for item in BatchIter::new(bytes) {
                let (h, b) = item.map_err(|e| LogError::Corrupt {
                    path: seg.path.display().to_string(),
                    pos,
                    detail: e.to_string(),
                })?;
                out.push((h, marker_kind(&b)));
            }
        }
        Ok(out)
    }

    /// Where a search by time starts: for `timestamp_ms` >= 0, the first offset of the first
    /// segment holding a record at least that new, and the timestamp to look for; for -3 (the
    /// largest timestamp), the start of the segment holding it and that timestamp. `None` if no
    /// segment qualifies.
    pub fn time_search_start(&self, timestamp_ms: i64) -> Option<(i64, i64)> {
        let start = |s: &Segment| s.base_offset.max(self.log_start_offset());
        if timestamp_ms == -3 {
            let newest = self.segments.iter().filter(|s| !s.index.is_empty()).max_by_key(|s| s.max_timestamp)?;
            return Some((start(newest), newest.max_timestamp));
        }
        let s = self.segments.iter().find(|s| !s.index.is_empty() && s.max_timestamp >= timestamp_ms)?;
        Some((start(s), timestamp_ms))
    }

    /// Where to read whole batches from `offset`, at most `max_bytes` but at least one batch,
    /// and only batches that end before `limit` (the high watermark for consumers), all from
    /// one segment; `None` when there is nothing to read (or `offset` is outside the log).
    pub fn locate(&self, offset: i64, max_bytes: usize, limit: i64) -> Option<ReadRange> {
        if offset >= self.end_offset() || offset < self.start_offset() {
            return None;
        }
        let seg = self.segment_for(offset)?;
        let (first, start) = seg.position(offset);
        if seg.index.get(first)?.last_offset >= limit {
            return None;
        }
        let end_of = |i: usize| seg.index.get(i).map_or(seg.size, |e| e.pos);
        // Batches first..upto are included; always at least the first one.
        let mut upto = first + 1;
        while upto < seg.index.len()
            && seg.index[upto].last_offset < limit
            && (end_of(upto + 1) - start) as usize <= max_bytes
        {
            upto += 1;
        }
        Some(ReadRange {
            file: seg.file.clone(),
            pos: start,
            len: (end_of(upto) - start) as usize,
            end_offset: seg.index[upto - 1].last_offset + 1,
        })
    }

    /// A clean shutdown: fdatasync the active segment and write its index, so the next open
    /// reads no segment at all. Without syncs at rolls (`--fsync never`) every closed segment
    /// is synced too: a clean shutdown vouches for the whole log.
    pub fn checkpoint(&mut self) -> Result<(), LogError> {
        if let Some(e) = self.failed_error() {
            return Err(e);
        }
        if !self.config.sync_on_roll {
            self.sync_closed()?;
        }
        let storage = self.storage.clone();
        let seg = self.active_mut();
        seg.file.sync_data().map_err(io_error(&seg.path, "sync"))?;
        write_index(storage.as_ref(), seg).map_err(io_error(&seg.path, "write index"))?;
        seg.indexed = true;
        storage.sync_dir(&self.dir);
        Ok(())
    }

    /// fdatasync every closed segment (they were not synced when they rolled under `--fsync
    /// never`; a process that vouches for the whole log syncs them first).
    pub fn sync_closed(&self) -> Result<(), LogError> {
        for seg in &self.segments[..self.segments.len() - 1] {
            seg.file.sync_data().map_err(io_error(&seg.path, "sync"))?;
        }
        Ok(())
    }

    /// The active segment's file, to fdatasync (closed segments were synced when they rolled).
    pub fn active_file(&self) -> Arc<dyn StoredFile> {
        self.active().file.clone()
    }
}

/// The log start recorded in `dir`'s [`LOG_START_FILE`] (0 if none, or unreadable: then the
/// records DeleteRecords hid are readable again, which loses nothing).
fn read_log_start(storage: &dyn Storage, dir: &Path) -> i64 {
    let path = dir.join(LOG_START_FILE);
    if !storage.exists(&path) {
        return 0;
    }
    let bytes = storage.read(&path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    match (lines.next(), lines.next().and_then(|l| l.trim().parse::<i64>().ok())) {
        (Some(LOG_START_HEADER), Some(offset)) if offset >= 0 => offset,
        _ => {
            tracing::warn!(path = %path.display(), "unreadable log start checkpoint; every retained record stays readable");
            0
        }
    }
}

fn remove_if_present(storage: &dyn Storage, path: &Path) -> Result<(), LogError> {
    match storage.remove(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(path, "remove")(e)),
        _ => Ok(()),
    }
}

/// Remove what interrupted writes leave: temporary files, and indexes without a segment.
fn remove_leftovers(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    let segments = offset_files(storage, dir, SEGMENT_SUFFIX).map_err(io_error(dir, "list"))?;
    for (offset, path) in offset_files(storage, dir, INDEX_SUFFIX).map_err(io_error(dir, "list"))? {
        if segments.binary_search_by_key(&offset, |(o, _)| *o).is_err() {
            remove_if_present(storage, &path)?;
        }
    }
    for path in storage.list(dir).map_err(io_error(dir, "list"))? {
        if path.extension().is_some_and(|e| e == "tmp") {
            remove_if_present(storage, &path)?;
        }
    }
    Ok(())
}

/// What [`scan`] found in a segment.
struct Scanned {
    /// Bytes cut off its end.
    cut: u64,
    /// Damage that was not a torn tail (see [`scan`]), described; the bytes from it on were cut
    /// and kept aside in a `.damaged` file.
    damage: Option<String>,
}

/// Read and check every batch of `seg`, building its index, and cut whatever follows the last
/// good batch. With `tail_may_tear` (the active segment, or any under `--fsync never`), a torn
/// tail is expected after a crash: the last batch cut short, a tail of zeros, or a last batch
/// whose checksum fails, with no good batch anywhere after it. Anything else is *damage*: a
/// bad batch with a good one after it (a flipped byte in the middle of the log, found by looking
/// for the next batch that checks out), any damage in a closed segment that was synced when it
/// rolled, or a batch at the wrong offset. Damage may have taken acknowledged records: the bytes
/// from it on are kept in `<segment>.damaged` for an operator and cut from the log, and the
/// replica must not lead until it has caught up again (see [`Recovered::damage`]).
fn scan(storage: &dyn Storage, seg: &mut Segment, tail_may_tear: bool) -> Result<Scanned, LogError> {
    let raw = seg.file.read_at(0, seg.size as usize).map_err(io_error(&seg.path, "read"))?;
    let total = raw.len() as u64;
    let mut pos = 0u64;
    let mut next_offset = seg.base_offset;
    let mut damage = None;
    for item in BatchIter::new(raw.clone()) {
        let bad = match item {
            Ok((h, bytes)) => match verify_crc(&bytes, &h) {
                Ok(()) if h.base_offset != next_offset => {
                    damage = Some(format!("batch at offset {} where {next_offset} was due", h.base_offset));
                    break;
                }
                Ok(()) => {
                    seg.index.push(IndexEntry {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        leader_epoch: h.partition_leader_epoch,
                        pos,
                    });
                    seg.max_timestamp = seg.max_timestamp.max(h.max_timestamp);
                    pos += bytes.len() as u64;
                    next_offset = h.last_offset() + 1;
                    continue;
                }
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        let zeros = raw[pos as usize..].iter().all(|b| *b == 0);
        let bad = if zeros { format!("{bad} (a tail of zeros)") } else { bad };
        damage = if !tail_may_tear {
            Some(format!("{bad} in a closed segment, synced when it rolled"))
        } else if !zeros && good_batch_after(&raw, pos as usize + 1, next_offset) {
            Some(format!("{bad}, with good batches after it"))
        } else {
            tracing::warn!(path = %seg.path.display(), pos, error = %bad, "cutting a torn tail");
            None
        };
        break;
    }
    if let Some(what) = &damage {
        let what = format!("{what} at byte {pos} of {}", seg.path.display());
        tracing::error!(damage = %what, cut_bytes = total - pos, "damaged log: cutting it there, keeping the cut bytes aside");
        keep_aside(storage, &seg.path, &raw[pos as usize..])?;
        damage = Some(what);
    }
    if pos < total {
        seg.file.set_len(pos).map_err(io_error(&seg.path, "truncate"))?;
        seg.file.sync_data().map_err(io_error(&seg.path, "sync"))?;
    }
    seg.size = pos;
    Ok(Scanned { cut: total - pos, damage })
}

/// Whether a batch that checks out (its header parses, it fits, its checksum holds, and it
/// starts at or after `min_offset`) starts anywhere in `raw` from byte `from` on: then what
/// stands before it is damage, not a torn tail.
fn good_batch_after(raw: &[u8], from: usize, min_offset: i64) -> bool {
    (from..raw.len()).any(|q| {
        let b = &raw[q..];
        b.len() > 16
            && b[16] == 2
            && BatchHeader::parse_prefix(b)
                .is_ok_and(|h| h.base_offset >= min_offset && h.total_bytes() <= b.len() && verify_crc(b, &h).is_ok())
    })
}

/// Keep `bytes` cut from the log file at `path` in `<path>.damaged` (or `.damaged-N`), synced,
/// for an operator to look at.
fn keep_aside(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("segment").to_string();
    let aside = (0..)
        .map(|n| path.with_file_name(if n == 0 { format!("{name}.damaged") } else { format!("{name}.damaged-{n}") }))
        .find(|p| !storage.exists(p))
        .expect("a free name");
    storage.write_file_atomically(&aside, bytes).map_err(io_error(&aside, "keep damaged bytes"))?;
    if let Some(dir) = path.parent() {
        storage.sync_dir(dir);
    }
    Ok(())
}

/// Whether the last batch an index lists is intact and ends the segment: checked before an
/// active segment is trusted by its clean-shutdown index instead of a scan.
fn last_batch_checks_out(seg: &Segment) -> bool {
    let Some(last) = seg.index.last() else { return seg.size == 0 };
    let Ok(bytes) = seg.file.read_at(last.pos, (seg.size - last.pos) as usize) else { return false };
    match BatchHeader::parse(&bytes) {
        Ok(h) => {
            h.base_offset == last.base_offset && h.last_offset() == last.last_offset && verify_crc(&bytes, &h).is_ok()
        }
        Err(_) => false,
    }
}

/// Encode `seg`'s index: magic, version, segment size, newest timestamp, entry count, the
/// entries (base offset, last offset, leader epoch, position), and a CRC32C of all of it.
fn encode_index(seg: &Segment) -> Vec<u8> {
    let mut out = Vec::with_capacity(INDEX_HEADER_BYTES + seg.index.len() * INDEX_ENTRY_BYTES + 4);
    out.put_slice(INDEX_MAGIC);
    out.put_u16(INDEX_VERSION);
    out.put_u64(seg.size);
    out.put_i64(seg.max_timestamp);
    out.put_u32(seg.index.len() as u32);
    for e in &seg.index {
        out.put_i64(e.base_offset);
        out.put_i64(e.last_offset);
        out.put_i32(e.leader_epoch);
        out.put_u64(e.pos);
    }
    let crc = crc32c(&out);
    out.put_u32(crc);
    out
}

fn write_index(storage: &dyn Storage, seg: &Segment) -> std::io::Result<()> {
    storage.write_file_atomically(&seg.index_path(), &encode_index(seg))
}

/// Load `seg`'s index file if it is intact and describes the segment as it is on disk.
fn load_index(storage: &dyn Storage, seg: &mut Segment, closed: bool) -> bool {
    let path = seg.index_path();
    let Ok(raw) = storage.read(&path) else { return false };
    if !closed && decode_index(&raw, seg.base_offset, seg.size).is_err() {
        // The active segment grew (or was cut) since its clean-shutdown index: expected after
        // a crash; the scan below covers it.
        let _ = storage.remove(&path);
        return false;
    }
    match decode_index(&raw, seg.base_offset, seg.size) {
        Ok((max_timestamp, index)) => {
            seg.max_timestamp = max_timestamp;
            seg.index = index;
            true
        }
        Err(why) => {
            tracing::warn!(path = %path.display(), why, "ignoring a segment index; scanning the segment");
            false
        }
    }
}

fn decode_index(raw: &[u8], base_offset: i64, size: u64) -> Result<(i64, Vec<IndexEntry>), &'static str> {
    if raw.len() < INDEX_HEADER_BYTES + 4 {
        return Err("too short");
    }
    let (body, crc) = raw.split_at(raw.len() - 4);
    if crc32c(body) != u32::from_be_bytes(crc.try_into().expect("4 bytes")) {
        return Err("CRC mismatch");
    }
    let mut b = body;
    if &b[..4] != INDEX_MAGIC {
        return Err("bad magic");
    }
    b.advance(4);
    if b.get_u16() != INDEX_VERSION {
        return Err("unknown version");
    }
    if b.get_u64() != size {
        return Err("written for a segment of another size");
    }
    let max_timestamp = b.get_i64();
    let count = b.get_u32() as usize;
    if b.remaining() != count * INDEX_ENTRY_BYTES {
        return Err("entry count does not match the length");
    }
    let mut index = Vec::with_capacity(count);
    let (mut next, mut next_pos) = (base_offset, 0);
    for _ in 0..count {
        let e = IndexEntry {
            base_offset: b.get_i64(),
            last_offset: b.get_i64(),
            leader_epoch: b.get_i32(),
            pos: b.get_u64(),
        };
        let pos_ok = if index.is_empty() { e.pos == 0 } else { e.pos >= next_pos && e.pos < size };
        if e.base_offset != next || e.last_offset < e.base_offset || !pos_ok {
            return Err("entries out of order");
        }
        next = e.last_offset.checked_add(1).ok_or("offset overflow")?;
        next_pos = e.pos + 1;
        index.push(e);
    }
    if count == 0 && size > 0 {
        return Err("no entries for a non-empty segment");
    }
    Ok((max_timestamp, index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::batch::{build_batch, set_base_offset, set_partition_leader_epoch, ProducerStamp};
    use std::fs::OpenOptions;

    fn config(segment_bytes: u64) -> LogConfig {
        LogConfig { segment_bytes, ..LogConfig::default() }
    }

    /// Append a batch of `value` at leader `epoch` with timestamp `ts`, rolling as a partition does.
    fn append_at(log: &mut PartitionLog, value: &str, epoch: i32, ts: i64) -> i64 {
        append_values(log, &[Bytes::from(value.to_string())], epoch, ts).0.base_offset
    }

    /// Append a batch of `values` as [`append_at`] does; returns its header and its bytes as stored.
    fn append_values(log: &mut PartitionLog, values: &[Bytes], epoch: i32, ts: i64) -> (BatchHeader, Vec<u8>) {
        let seq = log.end_offset() as i32;
        let b = build_batch(ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: seq }, false, ts, values);
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = log.end_offset();
        h.partition_leader_epoch = epoch;
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&b[..16]);
        set_base_offset(&mut prefix, h.base_offset);
        set_partition_leader_epoch(&mut prefix, epoch);
        if log.should_roll(b.len() as u64) {
            log.roll().unwrap();
        }
        log.append(&prefix, b.slice(16..), &h).unwrap();
        (h, [&prefix[..], &b[16..]].concat())
    }

    fn append(log: &mut PartitionLog, value: &str) -> i64 {
        append_at(log, value, 0, 0)
    }

    fn base_offsets(log: &PartitionLog, from: i64) -> Vec<i64> {
        log.headers_from(from).unwrap().iter().map(|(h, _)| h.base_offset).collect()
    }

    #[test]
    fn preallocation_reserves_blocks_ahead_but_not_length() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes: 1 << 20, preallocate_bytes: 256 << 10, ..LogConfig::default() };
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        for i in 0..3 {
            append(&mut log, &format!("v{i}"));
        }
        let seg = segment_files(dir.path()).unwrap()[0].1.clone();
        let meta = std::fs::metadata(&seg).unwrap();
        assert_eq!(meta.len(), log.size_bytes(), "the file's length is the end of the data");
        // Where the file system reserves blocks (ext4, xfs, tmpfs), they are there ahead.
        let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
        if rustix::fs::fallocate(&probe, rustix::fs::FallocateFlags::KEEP_SIZE, 0, 4096).is_ok() {
            assert!(meta.blocks() * 512 >= 256 << 10, "{} bytes of blocks reserved", meta.blocks() * 512);
        }
        // A cut frees what was reserved past it; the log goes on and reopens as written.
        assert_eq!(log.truncate(1).unwrap(), 1);
        append(&mut log, "after");
        drop(log);
        let r = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!(base_offsets(&r.log, 0), vec![0, 1]);
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), r.log.size_bytes());
    }

    #[test]
    fn a_roll_gives_back_the_blocks_reserved_past_the_end() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
        if rustix::fs::fallocate(&probe, rustix::fs::FallocateFlags::KEEP_SIZE, 0, 4096).is_err() {
            return; // this file system reserves nothing, so there is nothing to give back
        }
        let cfg = LogConfig { segment_bytes: 1 << 20, preallocate_bytes: 512 << 10, ..LogConfig::default() };
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        append(&mut log, "v0");
        let first = segment_files(dir.path()).unwrap()[0].1.clone();
        assert!(std::fs::metadata(&first).unwrap().blocks() * 512 >= 512 << 10, "reserved while active");
        log.roll().unwrap();
        append(&mut log, "v1");
        let closed = std::fs::metadata(&first).unwrap();
        assert_eq!(closed.len(), log.segments[0].size);
        assert!(closed.blocks() * 512 < 64 << 10, "a closed segment keeps {} bytes of blocks", closed.blocks() * 512);
    }

    #[test]
    fn appends_are_read_back_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap().log;
        for i in 0..5 {
            assert_eq!(append(&mut log, &format!("v{i}")), i);
        }
        let one = log.locate(2, 1, i64::MAX).unwrap().read().unwrap();
        assert_eq!(BatchHeader::parse(&one).unwrap().base_offset, 2, "at least one whole batch");
        assert_eq!(log.locate(0, usize::MAX, i64::MAX).unwrap().len as u64, log.size_bytes());
        assert!(log.locate(5, 100, i64::MAX).is_none());
        drop(log);
        let r = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(r.log.end_offset(), 5);
        assert_eq!(base_offsets(&r.log, 0), vec![0, 1, 2, 3, 4]);
        assert_eq!(base_offsets(&r.log, 3), vec![3, 4]);
    }

    #[test]
    fn segments_roll_by_size_and_closed_ones_open_from_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(300)).unwrap().log;
        for i in 0..20 {
            append_at(&mut log, &format!("value-{i:03}"), (i / 7) as i32, 1000 + i);
        }
        let segments = log.segment_count();
        assert!(segments >= 4, "{segments} segments of at most 300 bytes");
        assert_eq!(segment_files(dir.path()).unwrap().len(), segments);
        assert_eq!(
            offset_files(&OsStorage, dir.path(), INDEX_SUFFIX).unwrap().len(),
            segments - 1,
            "every closed segment is indexed"
        );
        // A read stops at a segment boundary and the next one continues from there.
        let first = log.locate(0, usize::MAX, i64::MAX).unwrap();
        let next = BatchIter::new(first.read().unwrap()).count() as i64;
        assert!(next < 20);
        let second = log.locate(next, usize::MAX, i64::MAX).unwrap().read().unwrap();
        assert_eq!(BatchHeader::parse_prefix(&second).unwrap().base_offset, next);
        let cache = log.epoch_cache().to_vec();
        let size = log.size_bytes();
        drop(log);

        let r = PartitionLog::open(dir.path(), config(300)).unwrap();
        assert!(r.scanned_bytes < size / 2, "only the active segment is read: {} of {size}", r.scanned_bytes);
        assert_eq!(r.log.end_offset(), 20);
        assert_eq!(r.log.epoch_cache(), cache.as_slice());
        assert_eq!(base_offsets(&r.log, 0), (0..20).collect::<Vec<_>>());
        drop(r);

        // A damaged index is ignored: the segment is scanned and the index rewritten.
        let (_, index) = offset_files(&OsStorage, dir.path(), INDEX_SUFFIX).unwrap()[1].clone();
        let mut raw = std::fs::read(&index).unwrap();
        raw[30] ^= 1;
        std::fs::write(&index, &raw).unwrap();
        let r = PartitionLog::open(dir.path(), config(300)).unwrap();
        assert_eq!(base_offsets(&r.log, 0), (0..20).collect::<Vec<_>>());
        assert!(r.scanned_bytes > 0);
        assert_ne!(std::fs::read(&index).unwrap(), raw, "rewritten");
        drop(r);

        // Damage inside a closed segment without an index is damage, not a tail to cut: it is
        // cut and reported, and the segments after it are kept aside with the cut bytes.
        let files = segment_files(dir.path()).unwrap();
        let (base, seg) = files[1].clone();
        std::fs::remove_file(seg.with_extension(INDEX_SUFFIX)).unwrap();
        let len = std::fs::metadata(&seg).unwrap().len();
        OpenOptions::new().write(true).open(&seg).unwrap().set_len(len - 3).unwrap();
        let r = PartitionLog::open(dir.path(), config(300)).unwrap();
        assert!(r.damage.as_deref().is_some_and(|d| d.contains("closed segment")), "{:?}", r.damage);
        assert!(r.log.end_offset() < files[2].0 && r.log.end_offset() >= base);
        assert_eq!(r.log.segment_count(), 2);
        for (_, later) in &files[2..] {
            assert!(!later.exists());
            assert!(later.with_file_name(format!("{}.damaged", later.file_name().unwrap().to_str().unwrap())).exists());
        }
    }

    #[test]
    fn truncation_across_segments_and_the_epoch_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(200)).unwrap().log;
        for i in 0..12 {
            append_at(&mut log, &format!("v{i}"), [0, 0, 2, 2, 2, 5, 5, 5, 5, 7, 7, 7][i], 0);
        }
        assert!(log.segment_count() > 3);
        assert_eq!(log.epoch_cache(), &[(0, 0), (2, 2), (5, 5), (7, 9)]);
        assert_eq!(log.epoch_at(3), Some(2));
        assert_eq!(log.epoch_start(4), 2);
        assert_eq!(log.epoch_start(1), 0);
        assert_eq!(log.epoch_end(0), (0, 2));
        assert_eq!(log.epoch_end(1), (0, 2), "no epoch 1 here: epoch 0 is the largest at or below it");
        assert_eq!(log.epoch_end(3), (2, 5));
        assert_eq!(log.epoch_end(9), (7, 12));
        assert_eq!(log.batch_start(4), 4);
        assert_eq!(log.batch_start(99), 12);
        assert_eq!(log.truncate(3).unwrap(), 3);
        assert_eq!(log.epoch_cache(), &[(0, 0), (2, 2)]);
        assert_eq!(base_offsets(&log, 0), vec![0, 1, 2]);
        assert_eq!(append(&mut log, "after"), 3);
        drop(log);
        let r = PartitionLog::open(dir.path(), config(200)).unwrap();
        assert_eq!(r.log.end_offset(), 4);
        assert_eq!(r.log.epoch_cache(), &[(0, 0), (2, 2), (0, 3)], "the cache is rebuilt from the log");
    }

    #[test]
    fn a_torn_tail_is_cut_and_mid_log_damage_cut_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap().log;
        for i in 0..3 {
            append(&mut log, &format!("value-{i}"));
        }
        let size = log.size_bytes();
        drop(log);
        let path = dir.path().join(offset_file_name(0, SEGMENT_SUFFIX));
        OpenOptions::new().write(true).open(&path).unwrap().set_len(size - 5).unwrap();
        let r = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(r.log.end_offset(), 2);
        assert!(r.truncated_bytes > 0);
        drop(r);
        // A tail of zeros (a file system's leftover after a power loss) is a torn tail too.
        let intact = std::fs::read(&path).unwrap();
        let mut zeros = intact.clone();
        zeros.extend_from_slice(&[0u8; 100]);
        std::fs::write(&path, &zeros).unwrap();
        let r = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!((r.log.end_offset(), r.truncated_bytes), (2, 100));
        drop(r);
        // Damage with good batches after it is not a torn tail: a damaged magic byte, a byte
        // flipped in the records, a length that reaches past the end. The log is cut there all
        // the same (it cannot serve past it), but the damage is reported, and the cut bytes are
        // kept aside.
        let first_len = BatchIter::new(Bytes::from(intact.clone())).next().unwrap().unwrap().1.len();
        let aside = path.with_file_name(format!("{}.damaged", path.file_name().unwrap().to_str().unwrap()));
        for (at, flip) in [(16, 5u8), (70, 0xff), (10, 0x40)] {
            let mut raw = intact.clone();
            raw[at] ^= flip;
            std::fs::write(&path, &raw).unwrap();
            let _ = std::fs::remove_file(&aside);
            let r = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
            assert_eq!(r.log.end_offset(), 0, "byte {at}");
            assert!(r.damage.as_deref().is_some_and(|d| d.contains("good batches after it")), "{:?}", r.damage);
            assert_eq!(std::fs::read(&aside).unwrap(), raw, "the cut bytes are kept aside");
            drop(r);
        }
        // Damage in the last batch alone cannot be told from a torn write: cut, not reported.
        let mut raw = intact;
        raw[first_len + 70] ^= 0xff;
        std::fs::write(&path, &raw).unwrap();
        let r = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!((r.log.end_offset(), r.damage), (1, None));
    }

    #[test]
    fn a_gap_between_segments_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(150)).unwrap().log;
        for i in 0..6 {
            append(&mut log, &format!("value-{i}"));
        }
        drop(log);
        let files = segment_files(dir.path()).unwrap();
        assert!(files.len() >= 3);
        std::fs::remove_file(&files[1].1).unwrap();
        std::fs::remove_file(files[1].1.with_extension(INDEX_SUFFIX)).unwrap();
        let err = PartitionLog::open(dir.path(), config(150)).err().unwrap();
        assert!(err.to_string().contains("where"), "{err}");
    }

    #[test]
    fn retention_cut_rules() {
        let seg = |bytes, max_timestamp, end_offset| SegmentSummary { bytes, max_timestamp, end_offset };
        let segs = [seg(100, 10, 10), seg(100, 20, 20), seg(100, 30, 30), seg(50, 40, 35)];
        let none = LogConfig::default();
        assert_eq!(retention_cut(&segs, &none, 1_000, (i64::MAX, 0)), 0, "no retention set");
        let bytes = LogConfig { retention_bytes: Some(150), ..none };
        assert_eq!(retention_cut(&segs, &bytes, 0, (i64::MAX, 0)), 2, "what remains stays at least 150 bytes");
        assert_eq!(retention_cut(&segs, &bytes, 0, (15, 0)), 1, "never past keep_below");
        let age = LogConfig { retention_ms: Some(100), ..none };
        assert_eq!(retention_cut(&segs, &age, 125, (i64::MAX, 0)), 2, "segments whose newest record is older than 25");
        assert_eq!(retention_cut(&segs, &age, 1_000, (i64::MAX, 0)), 3, "the active segment always stays");
        assert_eq!(retention_cut(&segs[3..], &age, 1_000, (i64::MAX, 0)), 0);
    }

    #[test]
    fn retention_deletes_whole_segments_from_the_front() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes: 200, retention_bytes: Some(300), ..LogConfig::default() };
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        for i in 0..15 {
            append_at(&mut log, &format!("v{i}"), i / 5, 0);
        }
        let before = log.segment_count();
        assert_eq!(log.enforce_retention(0, 1).unwrap(), 0, "no segment ends at or below offset 1");
        let deleted = log.enforce_retention(0, i64::MAX).unwrap();
        assert!(deleted > 0 && log.segment_count() == before - deleted);
        let start = log.start_offset();
        assert!(start > 0);
        assert!(log.size_bytes() >= 300);
        assert!(log.locate(start - 1, usize::MAX, i64::MAX).is_none());
        assert!(log.locate(start, usize::MAX, i64::MAX).is_some());
        assert_eq!(base_offsets(&log, start), (start..15).collect::<Vec<_>>());
        assert_eq!(log.epoch_cache().first().map(|(_, s)| *s), Some(start));
        drop(log);
        let r = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!((r.log.start_offset(), r.log.end_offset()), (start, 15));
        let mut log = r.log;
        log.reset_to(40, Some(3)).unwrap();
        assert_eq!(log.epoch_at(39), Some(3));
        assert_eq!((log.start_offset(), log.end_offset(), log.size_bytes()), (40, 40, 0));
        assert_eq!(append(&mut log, "x"), 40);
        drop(log);
        let r = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!((r.log.start_offset(), r.log.end_offset()), (40, 41));
    }

    #[test]
    fn delete_before_hides_records_durably_and_retention_removes_whole_segments_below() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(200);
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        for i in 0..15 {
            append_at(&mut log, &format!("v{i}"), 0, 0);
        }
        assert!(!log.retention_may_cut());
        assert!(!log.delete_before(0).unwrap(), "nothing below offset 0");
        assert!(log.delete_before(7).unwrap());
        assert!(!log.delete_before(5).unwrap(), "the start never moves back");
        assert_eq!((log.start_offset(), log.log_start_offset()), (0, 7));
        // The batch holding the start is still whole on disk, for replication.
        assert!(log.locate(0, usize::MAX, i64::MAX).is_some());
        assert_eq!(log.time_search_start(0).map(|(from, _)| from), Some(7));
        drop(log);
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        assert_eq!(log.log_start_offset(), 7, "the start survives a restart");
        assert!(log.retention_may_cut());
        let deleted = log.enforce_retention(0, i64::MAX).unwrap();
        assert!(deleted > 0);
        assert!(log.start_offset() <= 7 && log.start_offset() > 0, "only segments wholly below offset 7 go");
        assert_eq!(log.log_start_offset(), 7);
        assert!(!log.retention_may_cut());
        // Past the end: clamped to it.
        assert!(log.delete_before(99).unwrap());
        assert_eq!(log.log_start_offset(), 15);
        // A cut below the start brings it back to the new end, durably: what is appended after
        // it is readable.
        let end = log.truncate(12).unwrap();
        assert_eq!(log.log_start_offset(), end);
        assert_eq!(append(&mut log, "after"), end);
        drop(log);
        let log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        assert_eq!((log.log_start_offset(), log.end_offset()), (end, end + 1));
        // An unreadable checkpoint hides nothing.
        std::fs::write(dir.path().join(LOG_START_FILE), b"garbage").unwrap();
        drop(log);
        let log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        assert_eq!(log.log_start_offset(), log.start_offset());
    }

    #[test]
    fn segment_ms_rolls_a_segment_whose_first_batch_is_that_old() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(1 << 20)).unwrap().log;
        append(&mut log, "first");
        assert!(!log.should_roll(10), "no segment.ms: by size only");
        log.set_config(LogConfig { segment_ms: Some(60_000), ..config(1 << 20) });
        assert!(!log.should_roll(10), "a minute has not passed");
        // The first batch went in an hour ago.
        log.active_since_ms = Some(wall_ms() - 3_600_000);
        assert!(log.should_roll(10));
        log.roll().unwrap();
        assert_eq!(log.active_since_ms, None);
        assert!(!log.should_roll(10), "an empty segment never rolls");
        append(&mut log, "second");
        assert!(log.active_since_ms.is_some_and(|t| wall_ms() - t < 60_000));
        assert!(!log.should_roll(10));
    }

    #[test]
    fn a_clean_shutdown_leaves_nothing_to_scan_and_the_next_append_undoes_that() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(300)).unwrap().log;
        for i in 0..10 {
            append(&mut log, &format!("value-{i}"));
        }
        log.checkpoint().unwrap();
        drop(log);
        let mut r = PartitionLog::open(dir.path(), config(300)).unwrap();
        assert_eq!(r.scanned_bytes, 0, "every segment, the active one too, opens from its index");
        assert_eq!(base_offsets(&r.log, 0), (0..10).collect::<Vec<_>>());
        let active = segment_files(dir.path()).unwrap().pop().unwrap().1;
        assert!(active.with_extension(INDEX_SUFFIX).exists());
        append(&mut r.log, "after");
        assert!(!active.with_extension(INDEX_SUFFIX).exists(), "the active segment's index goes at its next append");
        drop(r);
        let r = PartitionLog::open(dir.path(), config(300)).unwrap();
        assert!(r.scanned_bytes > 0);
        assert_eq!(r.log.end_offset(), 11);
    }

    #[test]
    fn leftovers_of_interrupted_writes_are_removed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(150)).unwrap().log;
        for i in 0..4 {
            append(&mut log, &format!("value-{i}"));
        }
        drop(log);
        let orphan = dir.path().join(offset_file_name(999, INDEX_SUFFIX));
        let tmp = dir.path().join("00000000000000000002.snapshot.tmp");
        std::fs::write(&orphan, b"index of a deleted segment").unwrap();
        std::fs::write(&tmp, b"half a snapshot").unwrap();
        let r = PartitionLog::open(dir.path(), config(150)).unwrap();
        assert_eq!(r.log.end_offset(), 4);
        assert!(!orphan.exists() && !tmp.exists());
    }

    #[test]
    fn a_cut_is_durable_before_what_follows_it() {
        use crate::storage::MemStorage;
        let disk = Arc::new(MemStorage::new());
        let dir = Path::new("/disk/t-0");
        let mut log = PartitionLog::open_in(disk.clone(), dir, config(200)).unwrap().log;
        for i in 0..12 {
            append_at(&mut log, &format!("v{i}"), 1, 0);
        }
        log.checkpoint().unwrap();
        assert!(log.segment_count() > 3);
        // A follower's cut into the second segment, then new batches from another leader epoch,
        // synced (a follower acknowledges them), then the power goes.
        assert_eq!(log.truncate(3).unwrap(), 3);
        let segments = log.segment_count();
        append_at(&mut log, "w3", 2, 0);
        assert_eq!(log.segment_count(), segments, "no roll (and so no directory sync) since the cut");
        log.active_file().sync_data().unwrap();
        drop(log);
        disk.crash(|_, _| 0);
        let r = PartitionLog::open_in(disk, dir, config(200)).unwrap();
        assert_eq!(r.log.end_offset(), 4, "the removed segments and indexes stay removed");
        assert_eq!(r.log.epoch_cache(), &[(1, 0), (2, 3)]);
    }

    #[test]
    fn without_syncs_at_rolls_a_torn_closed_segment_ends_the_log() {
        use crate::storage::MemStorage;
        let disk = Arc::new(MemStorage::new());
        let dir = Path::new("/disk/t-0");
        let cfg = LogConfig { sync_on_roll: false, ..config(200) };
        let mut log = PartitionLog::open_in(disk.clone(), dir, cfg).unwrap().log;
        for i in 0..12 {
            append_at(&mut log, &format!("v{i}"), 1, 0);
        }
        assert!(log.segment_count() > 3);
        drop(log);
        // Nothing was synced: a power loss keeps a torn part of every segment.
        disk.crash(|_, unsynced| unsynced * 2 / 3);
        let r = PartitionLog::open_in(disk.clone(), dir, cfg).unwrap();
        let end = r.log.end_offset();
        assert!(end < 12 && r.truncated_bytes > 0, "the log ends in the first torn segment ({end})");
        assert_eq!(base_offsets(&r.log, 0), (0..end).collect::<Vec<_>>());
        assert_eq!(r.log.segment_count(), 1, "nothing after the torn segment is kept");
        // With syncs at rolls the same damage to a closed segment is damage, reported.
        let mut log = r.log;
        for i in end..12 {
            append_at(&mut log, &format!("v{i}"), 1, 0);
        }
        drop(log);
        let first = offset_files(disk.as_ref(), dir, SEGMENT_SUFFIX).unwrap()[0].1.clone();
        disk.remove(&first.with_extension(INDEX_SUFFIX)).unwrap();
        let f = disk.open(&first, false).unwrap();
        let len = f.len().unwrap();
        f.set_len(len - 3).unwrap();
        let r = PartitionLog::open_in(disk, dir, config(200)).unwrap();
        assert!(r.damage.is_some() && r.log.segment_count() == 1);
    }

    /// The kept tail serves exactly the batches the log holds, by the rule `locate` follows,
    /// through appends, rolls, cuts, releases and retention; and it stays within its budget.
    #[test]
    fn kept_tail_serves_what_the_log_holds() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            segment_bytes: 700,
            retention_bytes: Some(1400),
            replication_cache_bytes_max: 1500,
            ..LogConfig::default()
        };
        let mut log = PartitionLog::open(dir.path(), cfg).unwrap().log;
        log.keep_tail(true);
        // What the log holds, batch by batch: (base offset, last offset, bytes as stored).
        let mut model: Vec<(i64, i64, Vec<u8>)> = Vec::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let (mut served, mut missed, mut cuts) = (0, 0, 0);
        for step in 0..600 {
            match next(12) {
                0 => {
                    let (start, end) = (log.start_offset(), log.end_offset());
                    let end = log.truncate(start + next((end - start + 1) as u64) as i64).unwrap();
                    model.retain(|(_, last, _)| *last < end);
                    cuts += 1;
                }
                1 => log.release_tail_below(next(log.end_offset() as u64 + 1) as i64),
                2 => {
                    log.enforce_retention(0, log.end_offset()).unwrap();
                    model.retain(|(_, last, _)| *last >= log.start_offset());
                }
                3 if step % 5 == 0 => {
                    // A follower starting over at the leader's log start (here: the end).
                    let end = log.end_offset();
                    log.reset_to(end, Some(cuts)).unwrap();
                    model.clear();
                }
                3 => {
                    log.keep_tail(false);
                    assert!(log.read_tail(log.end_offset() - 1, usize::MAX, i64::MAX).is_none());
                    log.keep_tail(true);
                }
                _ => {
                    let values: Vec<Bytes> =
                        (0..1 + next(4)).map(|i| Bytes::from(format!("step {step} record {i}"))).collect();
                    let (h, stored) = append_values(&mut log, &values, cuts, 0);
                    model.push((h.base_offset, h.last_offset(), stored));
                }
            }
            assert!(log.tail.bytes <= 1500, "over budget: {}", log.tail.bytes);
            let end = log.end_offset();
            for offset in log.start_offset()..end {
                for (max_bytes, limit) in
                    [(0, i64::MAX), (200, i64::MAX), (usize::MAX, i64::MAX), (usize::MAX, end - 1)]
                {
                    let Some((records, after)) = log.read_tail(offset, max_bytes, limit) else {
                        missed += 1;
                        continue;
                    };
                    // By `locate`'s rule: the batch holding `offset`, then whole batches while
                    // they end below `limit` and fit in `max_bytes`.
                    let first = model.iter().position(|(base, last, _)| *base <= offset && offset <= *last).unwrap();
                    let mut want = model[first].2.clone();
                    let mut want_after = model[first].1 + 1;
                    for (_, last, bytes) in &model[first + 1..] {
                        if *last >= limit || want.len() + bytes.len() > max_bytes {
                            break;
                        }
                        want.extend_from_slice(bytes);
                        want_after = last + 1;
                    }
                    assert!(model[first].1 < limit);
                    let got = records.contiguous();
                    assert!(
                        (&got[..], after) == (&want[..], want_after),
                        "offset {offset}: the tail gave {} bytes up to {after}, the log holds {} up to {want_after}",
                        got.len(),
                        want.len()
                    );
                    // And the file agrees (its range stops at a segment's end).
                    let file = log.locate(offset, max_bytes, limit).unwrap().read().unwrap();
                    assert!(records.contiguous().starts_with(&file), "offset {offset}");
                    served += 1;
                }
            }
        }
        assert!(served > 1000 && missed > 1000 && cuts > 20, "served {served}, missed {missed}, cuts {cuts}");
        log.keep_tail(false);
        assert!(log.read_tail(log.end_offset() - 1, usize::MAX, i64::MAX).is_none());
    }

    /// A batch of 16 KiB or more is kept as the bytes it arrived in; a smaller one is copied
    /// whole, so that it does not keep the read buffer it came in alive.
    #[test]
    fn the_tail_shares_big_batches_and_copies_small_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), config(1 << 20)).unwrap().log;
        log.keep_tail(true);
        let mut originals = Vec::new();
        for value in [vec![7u8; TAIL_SHARE_BYTES_MIN], vec![8u8; 10]] {
            let b = build_batch(
                ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: 0 },
                false,
                0,
                &[Bytes::from(value)],
            );
            let mut h = BatchHeader::parse(&b).unwrap();
            h.base_offset = log.end_offset();
            let mut prefix = [0u8; 16];
            prefix.copy_from_slice(&b[..16]);
            set_base_offset(&mut prefix, h.base_offset);
            log.append(&prefix, b.slice(16..), &h).unwrap();
            originals.push(b);
        }
        let (records, end) = log.read_tail(0, usize::MAX, i64::MAX).unwrap();
        assert_eq!(end, 2);
        let pieces = records.pieces();
        assert_eq!(pieces.len(), 3, "the big batch in two pieces, the small one in one");
        assert_eq!(pieces[1].as_ptr(), originals[0][16..].as_ptr(), "the big batch's bytes are the request's");
        assert_ne!(pieces[2].as_ptr(), originals[1].as_ptr(), "the small batch is a copy");
        assert_eq!(records.contiguous(), log.locate(0, usize::MAX, i64::MAX).unwrap().read().unwrap());
    }
}
