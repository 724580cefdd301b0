//! The coordinator's journal: an append-only file of checksummed records with group commit.
//!
//! Record framing: `len u32 | crc32c(payload) u32 | payload`. [`Journal::append`] queues
//! payloads for a dedicated writer thread, which takes everything queued, writes it, calls
//! `fdatasync` once and then completes every waiter: concurrent requests share one flush.
//! Nothing is reported durable before its flush returned.
//!
//! On open, a torn last record (short, or failing its CRC at the very end of the file) is cut
//! off; a bad record with valid data after it is corruption, and opening fails rather than
//! forgetting grants that were answered.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use bytes::{Buf, Bytes};
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
    /// An earlier write failed; the journal accepts nothing more.
    #[error("journal stopped after an earlier failure: {0}")]
    Stopped(String),
}

struct Job {
    payloads: Vec<Bytes>,
    done: oneshot::Sender<Result<(), JournalError>>,
}

/// Handle to the journal; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    tx: mpsc::Sender<Job>,
    syncs: Arc<AtomicU64>,
}

/// What [`Journal::open`] read back.
pub struct Replay {
    /// Every intact record, in order.
    pub payloads: Vec<Bytes>,
    /// Bytes cut off a torn tail.
    pub truncated_bytes: u64,
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl Fn(std::io::Error) -> JournalError + 'a {
    move |e| JournalError::Io { path: path.display().to_string(), op, detail: e.to_string() }
}

impl Journal {
    /// Open (or create) the journal at `path`, replay it, and start the writer thread.
    pub fn open(path: impl Into<PathBuf>) -> Result<(Journal, Replay), JournalError> {
        let path = path.into();
        let mut file =
            OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(io_err(&path, "open"))?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw).map_err(io_err(&path, "read"))?;
        let (payloads, good_len) = scan(&path, Bytes::from(raw.clone()))?;
        let truncated_bytes = raw.len() as u64 - good_len;
        if truncated_bytes > 0 {
            tracing::warn!(path = %path.display(), truncated_bytes, "cut a torn record off the journal tail");
            file.set_len(good_len).map_err(io_err(&path, "truncate"))?;
            file.sync_all().map_err(io_err(&path, "sync"))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io_err(&path, "seek"))?;
        if let Some(dir) = path.parent() {
            // Make the file's directory entry durable too (first start).
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let syncs = Arc::new(AtomicU64::new(0));
        let counter = syncs.clone();
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer(path, file, rx, counter))
            .map_err(|e| JournalError::Io { path: String::new(), op: "spawn writer", detail: e.to_string() })?;
        Ok((Journal { tx, syncs }, Replay { payloads, truncated_bytes }))
    }

    /// Queue `payloads`; the receiver completes once they (and everything queued before them)
    /// are on disk. With no payloads it completes once everything queued before is on disk.
    pub fn append(&self, payloads: Vec<Bytes>) -> oneshot::Receiver<Result<(), JournalError>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::SendError(job)) = self.tx.send(Job { payloads, done }) {
            let _ = job.done.send(Err(JournalError::Stopped("writer thread has exited".into())));
        }
        rx
    }

    /// Number of flushes so far (group commit makes it smaller than the number of appends).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

fn scan(path: &Path, mut buf: Bytes) -> Result<(Vec<Bytes>, u64), JournalError> {
    let total = buf.len() as u64;
    let mut payloads = Vec::new();
    let mut offset = 0u64;
    while buf.has_remaining() {
        if buf.remaining() < RECORD_HEADER_BYTES {
            break; // torn header at the tail
        }
        let len = (&buf[0..4]).get_u32() as usize;
        let crc = (&buf[4..8]).get_u32();
        let end = RECORD_HEADER_BYTES + len;
        if len > RECORD_BYTES_MAX {
            return Err(JournalError::Corrupt {
                path: path.display().to_string(),
                offset,
                detail: format!("record length {len}"),
            });
        }
        if end > buf.remaining() {
            break; // torn body at the tail
        }
        let payload = buf.slice(RECORD_HEADER_BYTES..end);
        if crc32c::crc32c(&payload) != crc {
            if offset + end as u64 == total {
                break; // the last record was torn in place
            }
            return Err(JournalError::Corrupt {
                path: path.display().to_string(),
                offset,
                detail: "CRC32C mismatch".into(),
            });
        }
        payloads.push(payload);
        buf.advance(end);
        offset += end as u64;
    }
    Ok((payloads, offset))
}

fn writer(path: PathBuf, mut file: File, rx: mpsc::Receiver<Job>, syncs: Arc<AtomicU64>) {
    let mut stopped: Option<String> = None;
    let mut buf = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_COMMIT_JOBS_MAX {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        if let Some(why) = &stopped {
            for j in jobs {
                let _ = j.done.send(Err(JournalError::Stopped(why.clone())));
            }
            continue;
        }
        buf.clear();
        for p in jobs.iter().flat_map(|j| j.payloads.iter()) {
            buf.extend_from_slice(&(p.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(p).to_be_bytes());
            buf.extend_from_slice(p);
        }
        let result = if buf.is_empty() && jobs.iter().all(|j| j.payloads.is_empty()) {
            Ok(()) // a barrier: everything before it was flushed by an earlier round
        } else {
            file.write_all(&buf)
                .map_err(io_err(&path, "write"))
                .and_then(|_| file.sync_data().map_err(io_err(&path, "fdatasync")))
        };
        if result.is_ok() && !buf.is_empty() {
            syncs.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, "journal write failed; the coordinator stops granting");
            stopped = Some(e.to_string());
        }
        for j in jobs {
            let _ = j.done.send(result.clone());
        }
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
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();
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
        let mut raw = std::fs::read(&path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        let (_, r) = Journal::open(&path).unwrap();
        assert_eq!(r.payloads, vec![Bytes::from_static(b"aaaa")]);

        let mut raw = std::fs::read(&path).unwrap();
        raw.extend_from_slice(&raw.clone()); // two copies of record "aaaa"
        raw[RECORD_HEADER_BYTES] ^= 1; // damage the first
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(Journal::open(&path), Err(JournalError::Corrupt { offset: 0, .. })));
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
}
