//! The coordinator's journal: append-only files of checksummed records with group commit, and
//! snapshots that let it start in time independent of its history.
//!
//! Record framing: `len u32 | crc32c(payload) u32 | payload`. [`Journal::append`] queues
//! payloads for a dedicated writer thread, which takes everything queued, writes it, calls
//! `fdatasync` once and then completes every waiter: concurrent requests share one flush.
//! Nothing is reported durable before its flush returned.
//!
//! Generations: `snapshot-N` holds the whole state at the start of `journal-N` (generation 0
//! has no snapshot). [`Journal::rotate`] writes `snapshot-(N+1)` (to a temporary name, fsynced,
//! renamed), starts `journal-(N+1)`, and deletes generation N-1: generation N stays as the
//! fallback if the newest snapshot is ever found damaged.
//!
//! On open, a torn tail (a record cut short, a last record failing its CRC, or a tail of zero
//! bytes) is cut off; a bad record with other bytes after it is corruption, and opening fails
//! rather than forgetting grants that were answered.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use bytes::{Buf, Bytes};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use thiserror::Error;
use tokio::sync::oneshot;

const RECORD_HEADER_BYTES: usize = 8;
/// Most appends one flush takes.
pub const GROUP_COMMIT_JOBS_MAX: usize = 4096;
/// Largest journal record, in bytes.
pub const RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Journal failures.
#[derive(Debug, Error, Clone)]
pub enum JournalError {
    /// Reading, writing or syncing failed.
    #[error("journal {path}: {op} failed: {detail}")]
    Io {
        /// File.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        detail: String,
    },
    /// A record in the middle of the journal is damaged.
    #[error("journal {path} is corrupt at byte {offset}: {detail}; refusing to start, since skipping it could reissue epochs. Restore the file or move it away to start empty (which forgets every grant)")]
    Corrupt {
        /// File.
        path: String,
        /// Where.
        offset: u64,
        /// What.
        detail: String,
    },
    /// The store refused a guarded write: another coordinator replica took over.
    #[error("journal write fenced: {0}")]
    Deposed(String),
    /// An earlier write failed; the journal accepts nothing more.
    #[error("journal stopped after an earlier failure: {0}")]
    Stopped(String),
}

type Done = oneshot::Sender<Result<(), JournalError>>;

enum Job {
    Append { payloads: Vec<Bytes>, done: Done, queued: Instant },
    Rotate { snapshot: Vec<Bytes>, done: Done },
}

/// Handle to the journal; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    tx: mpsc::Sender<Job>,
    syncs: Arc<AtomicU64>,
    /// From an append's queueing to its completion, in seconds.
    latency: Histogram,
    /// Set (to why) when a write failed and the journal stopped.
    stopped: tokio::sync::watch::Receiver<Option<String>>,
}

/// Where a journal's records are kept: the writer thread calls these in queue order, one
/// call at a time. The writer owns the two rules every store keeps with it: completions in
/// queue order, and after a failed (or uncertain) call nothing later succeeds.
pub trait JournalStore: Send + 'static {
    /// Make `records` durable, after everything written before. Called with at least one record.
    fn write(&mut self, records: &[Bytes]) -> Result<(), JournalError>;
    /// Replace the history written so far by `snapshot`, the whole state after it.
    fn rotate(&mut self, snapshot: &[Bytes]) -> Result<(), JournalError>;
}

/// What [`Journal::open`] read back.
pub struct Replay {
    /// The snapshot's records (empty for generation 0): apply these first.
    pub snapshot: Vec<Bytes>,
    /// The journal records after the snapshot, in order.
    pub payloads: Vec<Bytes>,
    /// Bytes cut off a torn tail.
    pub truncated_bytes: u64,
    /// The generation opened.
    pub generation: u64,
    /// Snapshots found damaged and skipped, with why.
    pub skipped_snapshots: Vec<String>,
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl Fn(std::io::Error) -> JournalError + 'a {
    move |e| JournalError::Io { path: path.display().to_string(), op, detail: e.to_string() }
}

fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("journal-{generation:020}"))
}

fn snapshot_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("snapshot-{generation:020}"))
}

fn generations(dir: &Path, prefix: &str) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

fn frame(buf: &mut Vec<u8>, payload: &[u8]) {
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    buf.extend_from_slice(payload);
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A snapshot file: framed records, the last of which is the record count (u64), so a
/// snapshot that lost records is detected as well as one with a damaged record.
fn read_snapshot(path: &Path) -> Result<Vec<Bytes>, String> {
    let raw = std::fs::read(path).map_err(|e| e.to_string())?;
    parse_snapshot(path, Bytes::from(raw))
}

/// The records of a snapshot's bytes (see [`read_snapshot`]).
pub(crate) fn parse_snapshot(path: &Path, raw: Bytes) -> Result<Vec<Bytes>, String> {
    let total = raw.len() as u64;
    let (mut records, good) = scan(path, raw).map_err(|e| e.to_string())?;
    if good != total {
        return Err(format!("{} trailing bytes do not form a record", total - good));
    }
    let count = records.pop().ok_or("empty snapshot")?;
    if count.len() != 8 || u64::from_be_bytes(count[..].try_into().expect("8 bytes")) != records.len() as u64 {
        return Err("record count does not match".into());
    }
    Ok(records)
}

/// A snapshot's bytes: its records framed, then the record count.
pub(crate) fn frame_snapshot(snapshot: &[Bytes]) -> Vec<u8> {
    let mut buf = frame_records(snapshot);
    frame(&mut buf, &(snapshot.len() as u64).to_be_bytes());
    buf
}

/// Records framed one after another, as a journal keeps them.
pub(crate) fn frame_records(records: &[Bytes]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(records.iter().map(|r| r.len() + RECORD_HEADER_BYTES).sum());
    for p in records {
        frame(&mut buf, p);
    }
    buf
}

impl Journal {
    /// Open (or create) the journal in directory `dir`, load its newest intact snapshot and the
    /// journal records after it, and start the writer thread.
    pub fn open(dir: impl Into<PathBuf>) -> Result<(Journal, Replay), JournalError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir, "create directory"))?;
        let journals = generations(&dir, "journal-");
        let snapshots = generations(&dir, "snapshot-");
        let newest = journals.iter().chain(snapshots.iter()).copied().max().unwrap_or(0);
        // The newest generation whose snapshot reads back intact (generation 0 needs none);
        // its journal and every later one are then replayed in order.
        let mut skipped_snapshots = Vec::new();
        let mut base = None;
        for g in (0..=newest).rev() {
            if g == 0 {
                base = Some((0, Vec::new()));
                break;
            }
            if !snapshots.contains(&g) {
                continue;
            }
            match read_snapshot(&snapshot_path(&dir, g)) {
                Ok(records) => {
                    base = Some((g, records));
                    break;
                }
                Err(why) => {
                    tracing::error!(generation = g, %why, "snapshot damaged; trying the previous generation");
                    skipped_snapshots.push(format!("snapshot-{g}: {why}"));
                }
            }
        }
        let (base_gen, snapshot) = base.expect("generation 0 always qualifies");
        if base_gen > 0 || !skipped_snapshots.is_empty() {
            // Every journal from the base generation on must be there, or grants are missing.
            for g in base_gen..newest {
                if !journals.contains(&g) {
                    return Err(JournalError::Corrupt {
                        path: journal_path(&dir, g).display().to_string(),
                        offset: 0,
                        detail: "missing, and no intact snapshot after it".into(),
                    });
                }
            }
        }
        let mut payloads = Vec::new();
        let mut truncated_bytes = 0;
        let mut file = None;
        for g in base_gen..=newest {
            let path = journal_path(&dir, g);
            let last = g == newest;
            if !path.exists() && !last {
                continue;
            }
            let mut f =
                OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(io_err(&path, "open"))?;
            let mut raw = Vec::new();
            f.read_to_end(&mut raw).map_err(io_err(&path, "read"))?;
            let total = raw.len() as u64;
            let (records, good) = scan(&path, Bytes::from(raw))?;
            if good < total {
                if !last {
                    return Err(JournalError::Corrupt {
                        path: path.display().to_string(),
                        offset: good,
                        detail: "torn record in a journal that was followed by another generation".into(),
                    });
                }
                tracing::warn!(path = %path.display(), cut = total - good, "cut a torn record off the journal tail");
                f.set_len(good).map_err(io_err(&path, "truncate"))?;
                f.sync_all().map_err(io_err(&path, "sync"))?;
                truncated_bytes = total - good;
            }
            payloads.extend(records);
            if last {
                f.seek(SeekFrom::End(0)).map_err(io_err(&path, "seek"))?;
                file = Some(f);
            }
        }
        sync_dir(&dir);
        let file = file.expect("the newest generation's journal is opened");
        let store = FileStore { dir, generation: newest, file };
        let journal = Journal::start(store)?;
        Ok((journal, Replay { snapshot, payloads, truncated_bytes, generation: newest, skipped_snapshots }))
    }

    /// Start the writer thread over `store` (whose history the caller has read back).
    pub fn start(store: impl JournalStore) -> Result<Journal, JournalError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let syncs = Arc::new(AtomicU64::new(0));
        let counter = syncs.clone();
        let latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        let writer_latency = latency.clone();
        let (stopped_tx, stopped) = tokio::sync::watch::channel(None);
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer(Box::new(store), rx, counter, writer_latency, stopped_tx))
            .map_err(|e| JournalError::Io { path: String::new(), op: "spawn writer", detail: e.to_string() })?;
        Ok(Journal { tx, syncs, latency, stopped })
    }

    /// Fires (with why) once a write failed and the journal stopped for good.
    pub fn stopped(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.stopped.clone()
    }

    fn send(&self, job: Job) {
        if let Err(mpsc::SendError(job)) = self.tx.send(job) {
            let done = match job {
                Job::Append { done, .. } | Job::Rotate { done, .. } => done,
            };
            let _ = done.send(Err(JournalError::Stopped("writer thread has exited".into())));
        }
    }

    /// Queue `payloads`; the receiver completes once they (and everything queued before them)
    /// are on disk. With no payloads it completes once everything queued before is on disk.
    pub fn append(&self, payloads: Vec<Bytes>) -> oneshot::Receiver<Result<(), JournalError>> {
        let (done, rx) = oneshot::channel();
        self.send(Job::Append { payloads, done, queued: Instant::now() });
        rx
    }

    /// Start a new generation whose snapshot is `snapshot`: the state after everything queued
    /// before this call. Queue it under the same lock that orders the appends.
    pub fn rotate(&self, snapshot: Vec<Bytes>) -> oneshot::Receiver<Result<(), JournalError>> {
        let (done, rx) = oneshot::channel();
        self.send(Job::Rotate { snapshot, done });
        rx
    }

    /// How long appends took, from queueing to completion (on disk, or failed), in seconds.
    pub fn append_latency(&self) -> Histogram {
        self.latency.clone()
    }

    /// Number of flushes so far (group commit makes it smaller than the number of appends).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

/// Read the framed records of one file: the records, and the length of the good prefix they
/// take. What follows the good prefix is a torn tail (cut by the caller) if it is what a write
/// that never finished leaves: a record cut short (header or body, whatever length it claims),
/// a last record whose CRC fails, or only zero bytes (what some file systems leave after a
/// power loss; eight zeros would otherwise read as an empty record, since the CRC32C of
/// nothing is 0). Any other damage, with bytes after it, is corruption.
pub(crate) fn scan(path: &Path, mut buf: Bytes) -> Result<(Vec<Bytes>, u64), JournalError> {
    let total = buf.len() as u64;
    let mut payloads = Vec::new();
    let mut offset = 0u64;
    let corrupt = |offset, detail: String| JournalError::Corrupt { path: path.display().to_string(), offset, detail };
    while buf.has_remaining() {
        if buf.iter().all(|b| *b == 0) {
            break; // a zero-filled tail
        }
        if buf.remaining() < RECORD_HEADER_BYTES {
            break; // torn header at the tail
        }
        let len = (&buf[0..4]).get_u32() as usize;
        let crc = (&buf[4..8]).get_u32();
        let end = RECORD_HEADER_BYTES.saturating_add(len);
        if end > buf.remaining() {
            break; // torn body at the tail (or a garbage length in a torn header)
        }
        if len > RECORD_BYTES_MAX {
            return Err(corrupt(offset, format!("record length {len}")));
        }
        // Every entry has a tag byte at least: an empty record is never written.
        if len == 0 {
            return Err(corrupt(offset, "empty record".into()));
        }
        let payload = buf.slice(RECORD_HEADER_BYTES..end);
        if crc32c::crc32c(&payload) != crc {
            if offset + end as u64 == total {
                break; // the last record was torn in place
            }
            return Err(corrupt(offset, "CRC32C mismatch".into()));
        }
        payloads.push(payload);
        buf.advance(end);
        offset += end as u64;
    }
    Ok((payloads, offset))
}

/// The local journal: files in one directory (see the module's documentation).
struct FileStore {
    dir: PathBuf,
    generation: u64,
    file: File,
}

impl FileStore {
    fn path(&self) -> PathBuf {
        journal_path(&self.dir, self.generation)
    }
}

impl JournalStore for FileStore {
    fn write(&mut self, records: &[Bytes]) -> Result<(), JournalError> {
        let path = self.path();
        self.file.write_all(&frame_records(records)).map_err(io_err(&path, "write"))?;
        self.file.sync_data().map_err(io_err(&path, "fdatasync"))
    }

    fn rotate(&mut self, snapshot: &[Bytes]) -> Result<(), JournalError> {
        let next = self.generation + 1;
        let buf = frame_snapshot(snapshot);
        let tmp = self.dir.join(format!("snapshot-{next:020}.tmp"));
        let path = snapshot_path(&self.dir, next);
        {
            let mut f = File::create(&tmp).map_err(io_err(&tmp, "create"))?;
            f.write_all(&buf).map_err(io_err(&tmp, "write"))?;
            f.sync_all().map_err(io_err(&tmp, "fsync"))?;
        }
        std::fs::rename(&tmp, &path).map_err(io_err(&path, "rename"))?;
        let journal = journal_path(&self.dir, next);
        let file = OpenOptions::new().append(true).create(true).open(&journal).map_err(io_err(&journal, "create"))?;
        sync_dir(&self.dir);
        self.file = file;
        self.generation = next;
        // Keep the previous generation as the fallback; drop the one before it.
        if next >= 2 {
            let _ = std::fs::remove_file(journal_path(&self.dir, next - 2));
            let _ = std::fs::remove_file(snapshot_path(&self.dir, next - 2));
        }
        tracing::info!(generation = next, records = snapshot.len(), "journal snapshot written");
        Ok(())
    }
}

/// The writer thread: group commit over `store`, completions in queue order, and a stop for
/// good at the first failure.
struct Writer {
    store: Box<dyn JournalStore>,
    syncs: Arc<AtomicU64>,
    stopped: Option<String>,
    stopped_tx: tokio::sync::watch::Sender<Option<String>>,
}

impl Writer {
    fn flush(&mut self, records: &[Bytes]) -> Result<(), JournalError> {
        if let Some(why) = &self.stopped {
            return Err(JournalError::Stopped(why.clone()));
        }
        if records.is_empty() {
            return Ok(()); // a barrier: everything before it was flushed by an earlier round
        }
        let result = self.store.write(records);
        match &result {
            Ok(()) => {
                self.syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.fail(e),
        }
        result
    }

    fn rotate(&mut self, snapshot: &[Bytes]) -> Result<(), JournalError> {
        if let Some(why) = &self.stopped {
            return Err(JournalError::Stopped(why.clone()));
        }
        let result = self.store.rotate(snapshot);
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn fail(&mut self, e: &JournalError) {
        tracing::error!(error = %e, "journal write failed; the coordinator stops granting");
        self.stopped = Some(e.to_string());
        self.stopped_tx.send_replace(Some(e.to_string()));
    }
}

fn writer(
    store: Box<dyn JournalStore>,
    rx: mpsc::Receiver<Job>,
    syncs: Arc<AtomicU64>,
    latency: Histogram,
    stopped_tx: tokio::sync::watch::Sender<Option<String>>,
) {
    let mut w = Writer { store, syncs, stopped: None, stopped_tx };
    let mut records: Vec<Bytes> = Vec::new();
    let mut waiting: Vec<(Done, Instant)> = Vec::new();
    let complete = |waiting: &mut Vec<(Done, Instant)>, result: &Result<(), JournalError>| {
        for (d, queued) in waiting.drain(..) {
            latency.observe(queued.elapsed().as_secs_f64());
            let _ = d.send(result.clone());
        }
    };
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_COMMIT_JOBS_MAX {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        records.clear();
        for job in jobs {
            match job {
                Job::Append { payloads, done, queued } => {
                    records.extend(payloads);
                    waiting.push((done, queued));
                }
                Job::Rotate { snapshot, done } => {
                    // Everything queued before the rotation goes into the old generation.
                    let result = w.flush(&records).and_then(|()| w.rotate(&snapshot));
                    records.clear();
                    complete(&mut waiting, &result);
                    let _ = done.send(result);
                }
            }
        }
        let result = w.flush(&records);
        complete(&mut waiting, &result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<T>(rx: oneshot::Receiver<T>) -> T {
        rx.blocking_recv().unwrap()
    }

    #[test]
    fn appends_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, r) = Journal::open(&path).unwrap();
            assert!(r.payloads.is_empty());
            block(j.append(vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")])).unwrap();
            block(j.append(vec![])).unwrap();
            block(j.append(vec![Bytes::from_static(b"three")])).unwrap();
        }
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(
            r.payloads,
            vec![Bytes::from_static(b"one"), Bytes::from_static(b"two"), Bytes::from_static(b"three")]
        );
    }

    #[test]
    fn torn_tail_is_cut_and_later_appends_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, _) = Journal::open(&path).unwrap();
            block(j.append(vec![Bytes::from_static(b"kept"), Bytes::from_static(b"torn-record")])).unwrap();
        }
        let file = journal_path(&path, 0);
        let len = std::fs::metadata(&file).unwrap().len();
        OpenOptions::new().write(true).open(&file).unwrap().set_len(len - 3).unwrap();
        {
            let (j, r) = Journal::open(&path).unwrap();
            assert_eq!(r.payloads, vec![Bytes::from_static(b"kept")]);
            assert!(r.truncated_bytes > 0);
            block(j.append(vec![Bytes::from_static(b"after")])).unwrap();
        }
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.payloads, vec![Bytes::from_static(b"kept"), Bytes::from_static(b"after")]);
    }

    #[test]
    fn flipped_byte_in_last_record_is_cut_but_in_the_middle_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, _) = Journal::open(&path).unwrap();
            block(j.append(vec![Bytes::from_static(b"aaaa"), Bytes::from_static(b"bbbb")])).unwrap();
        }
        let file = journal_path(&path, 0);
        let mut raw = std::fs::read(&file).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(&file, &raw).unwrap();
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.payloads, vec![Bytes::from_static(b"aaaa")]);

        let mut raw = std::fs::read(&file).unwrap();
        raw.extend_from_slice(&raw.clone()); // two copies of record "aaaa"
        raw[RECORD_HEADER_BYTES] ^= 1; // damage the first
        std::fs::write(&file, &raw).unwrap();
        assert!(matches!(Journal::open(&path), Err(JournalError::Corrupt { offset: 0, .. })));
    }

    /// What a power loss can leave after the last synced record: zeros (which would read as an
    /// empty record with a valid CRC), or a header whose length runs past the end. Both are a
    /// torn tail, cut; an empty record with a record after it is corruption.
    #[test]
    fn a_zero_filled_tail_or_a_length_past_the_end_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, _) = Journal::open(&path).unwrap();
            block(j.append(vec![Bytes::from_static(b"kept")])).unwrap();
        }
        let file = journal_path(&path, 0);
        let intact = std::fs::read(&file).unwrap();
        for tail in [vec![0u8; 4096], vec![0u8; 8], vec![0xff, 0xff, 0xff, 0xf0, 1, 2, 3, 4, 5, 6]] {
            let mut raw = intact.clone();
            raw.extend_from_slice(&tail);
            std::fs::write(&file, &raw).unwrap();
            let (j, r) = Journal::open(&path).unwrap();
            assert_eq!(r.payloads, vec![Bytes::from_static(b"kept")], "tail {:?}", &tail[..8.min(tail.len())]);
            assert_eq!(r.truncated_bytes, tail.len() as u64);
            block(j.append(vec![Bytes::from_static(b"next")])).unwrap();
            drop(j);
            let (_, r) = Journal::open(&path).unwrap();
            assert_eq!(r.payloads, vec![Bytes::from_static(b"kept"), Bytes::from_static(b"next")]);
            std::fs::write(&file, &intact).unwrap();
        }
        // An empty record followed by a real one is damage in the middle.
        let mut raw = intact.clone();
        raw.extend_from_slice(&[0u8; 8]);
        raw.extend_from_slice(&intact);
        std::fs::write(&file, &raw).unwrap();
        assert!(matches!(Journal::open(&path), Err(JournalError::Corrupt { .. })));
    }

    #[test]
    fn concurrent_appends_share_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(dir.path().join("j")).unwrap();
        let rxs: Vec<_> = (0..200).map(|i| j.append(vec![Bytes::from(format!("r{i}"))])).collect();
        for rx in rxs {
            block(rx).unwrap();
        }
        assert!(j.syncs() >= 1 && j.syncs() <= 200);
    }

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn rotation_starts_a_generation_from_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, _) = Journal::open(&path).unwrap();
            block(j.append(vec![b("a"), b("b")])).unwrap();
            block(j.rotate(vec![b("state-after-b")])).unwrap();
            block(j.append(vec![b("c")])).unwrap();
            block(j.rotate(vec![b("state-after-c")])).unwrap();
            block(j.append(vec![b("d")])).unwrap();
        }
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.generation, 2);
        assert_eq!(r.snapshot, vec![b("state-after-c")]);
        assert_eq!(r.payloads, vec![b("d")]);
        assert!(!journal_path(&path, 0).exists(), "generation 0 was dropped");
        assert!(journal_path(&path, 1).exists(), "generation 1 is kept as the fallback");
    }

    #[test]
    fn a_damaged_snapshot_falls_back_to_the_previous_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let (j, _) = Journal::open(&path).unwrap();
            block(j.append(vec![b("a")])).unwrap();
            block(j.rotate(vec![b("state-after-a")])).unwrap();
            block(j.append(vec![b("b")])).unwrap();
            block(j.rotate(vec![b("state-after-b")])).unwrap();
            block(j.append(vec![b("c")])).unwrap();
        }
        let snap = snapshot_path(&path, 2);
        let mut raw = std::fs::read(&snap).unwrap();
        raw[RECORD_HEADER_BYTES + 2] ^= 0x40;
        std::fs::write(&snap, &raw).unwrap();
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.skipped_snapshots.len(), 1);
        assert_eq!(r.snapshot, vec![b("state-after-a")]);
        assert_eq!(r.payloads, vec![b("b"), b("c")], "journal 1 then journal 2");
        // An empty (lost) snapshot is skipped the same way.
        std::fs::write(&snap, b"").unwrap();
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.snapshot, vec![b("state-after-a")]);
    }
}
