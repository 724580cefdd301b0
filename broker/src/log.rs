//! A partition's log: one append-only file of RecordBatch v2 bytes, as stored by the leader
//! (base offset and partition leader epoch rewritten, every other byte as the producer sent it).
//!
//! Opening a log scans it: every batch's length, CRC32C and offset continuity are checked. A
//! torn or corrupt last batch is cut off (it was never acknowledged: acknowledgement follows the
//! write); damage followed by intact data is corruption, and the log refuses to open rather
//! than serve past it. Segments, snapshots and fsync policies are the durability issue's.

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use protocol::batch::{marker_kind, verify_crc, BatchHeader, BatchIter, MarkerKind};
use thiserror::Error;

/// The log file's name inside the partition directory.
pub const LOG_FILE: &str = "00000000000000000000.log";

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

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    base_offset: i64,
    last_offset: i64,
    leader_epoch: i32,
    pos: u64,
}

/// One partition's log file and its in-memory offset index.
#[derive(Debug)]
pub struct PartitionLog {
    path: PathBuf,
    file: File,
    reader: Arc<File>,
    index: Vec<IndexEntry>,
    /// The leader-epoch cache: (leader epoch, first offset of that epoch), ascending. It is
    /// derived from the batches (each carries the epoch it was appended under), so it is
    /// persisted with the log by construction and rebuilt by the scan on open.
    epochs: Vec<(i32, i64)>,
    end_offset: i64,
    size: u64,
    failed: Option<String>,
}

/// A log opened after a scan.
pub struct Recovered {
    /// The log.
    pub log: PartitionLog,
    /// Header (and marker kind, for control batches) of every batch, in order, for rebuilding
    /// producer state and the transaction index.
    pub headers: Vec<(BatchHeader, Option<MarkerKind>)>,
    /// Bytes cut off a torn tail.
    pub truncated_bytes: u64,
}

impl PartitionLog {
    /// Open (or create) the log in `dir`, scanning and repairing its tail.
    pub fn open(dir: &Path) -> Result<Recovered, LogError> {
        let path = dir.join(LOG_FILE);
        let err = |op: &'static str| {
            let path = path.display().to_string();
            move |e: std::io::Error| LogError::Io { path: path.clone(), op, detail: e.to_string() }
        };
        let created = !path.exists();
        std::fs::create_dir_all(dir).map_err(err("create directory"))?;
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(err("open"))?;
        if created {
            // Make the new directory and file themselves durable, not only their contents.
            for d in [Some(dir), dir.parent()].into_iter().flatten() {
                if let Ok(d) = File::open(d) {
                    let _ = d.sync_all();
                }
            }
        }
        let mut raw = Vec::new();
        file.read_to_end(&mut raw).map_err(err("read"))?;
        let total = raw.len() as u64;
        let mut headers = Vec::new();
        let mut index = Vec::new();
        let mut pos = 0u64;
        let mut next_offset = 0i64;
        for item in BatchIter::new(Bytes::from(raw)) {
            let problem = match item {
                Ok((h, bytes)) => match verify_crc(&bytes, &h) {
                    Ok(()) if h.base_offset != next_offset => {
                        Some(format!("batch at offset {} where {next_offset} was due", h.base_offset))
                    }
                    Ok(()) => {
                        index.push(IndexEntry {
                            base_offset: h.base_offset,
                            last_offset: h.last_offset(),
                            leader_epoch: h.partition_leader_epoch,
                            pos,
                        });
                        headers.push((h, marker_kind(&bytes)));
                        pos += bytes.len() as u64;
                        next_offset = h.last_offset() + 1;
                        None
                    }
                    Err(e) if pos + bytes.len() as u64 == total => {
                        tracing::warn!(path = %path.display(), pos, error = %e, "cutting a corrupt last batch");
                        break;
                    }
                    Err(e) => Some(e.to_string()),
                },
                Err(e) => {
                    tracing::warn!(path = %path.display(), pos, error = %e, "cutting a torn tail");
                    break;
                }
            };
            if let Some(detail) = problem {
                return Err(LogError::Corrupt { path: path.display().to_string(), pos, detail });
            }
        }
        if pos < total {
            file.set_len(pos).map_err(err("truncate"))?;
            file.sync_all().map_err(err("sync"))?;
        }
        let reader = Arc::new(File::open(&path).map_err(err("open for reading"))?);
        let mut log = PartitionLog {
            path,
            file,
            reader,
            index,
            epochs: Vec::new(),
            end_offset: next_offset,
            size: pos,
            failed: None,
        };
        log.rebuild_epochs();
        Ok(Recovered { log, headers, truncated_bytes: total - pos })
    }

    /// Whether an earlier failure stopped this log taking writes.
    pub fn has_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Stop taking writes (an fdatasync failed).
    pub fn fail(&mut self, detail: String) {
        tracing::error!(path = %self.path.display(), %detail, "log stops taking writes");
        self.failed.get_or_insert(detail);
    }

    /// The offset the next batch gets.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// Bytes in the log.
    pub fn size_bytes(&self) -> u64 {
        self.size
    }

    /// Append one batch. `prefix` holds its first 16 bytes (base offset, length and leader
    /// epoch as rewritten by the caller), `rest` the bytes after them as received, so the batch
    /// is never copied. On a failed write the file is cut back to where it was.
    pub fn append(&mut self, prefix: &[u8; 16], rest: &[u8], header: &BatchHeader) -> Result<(), LogError> {
        if let Some(detail) = &self.failed {
            return Err(LogError::Failed { path: self.path.display().to_string(), detail: detail.clone() });
        }
        if let Err(e) = write_all_two(&mut self.file, prefix, rest) {
            let detail = e.to_string();
            if let Err(undo) = self.file.set_len(self.size) {
                self.failed =
                    Some(format!("write failed ({detail}) and the partial batch could not be removed ({undo})"));
            }
            return Err(LogError::Io { path: self.path.display().to_string(), op: "write", detail });
        }
        self.index.push(IndexEntry {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            leader_epoch: header.partition_leader_epoch,
            pos: self.size,
        });
        if self.epochs.last().is_none_or(|(e, _)| *e != header.partition_leader_epoch) {
            self.epochs.push((header.partition_leader_epoch, header.base_offset));
        }
        self.size += (prefix.len() + rest.len()) as u64;
        self.end_offset = header.last_offset() + 1;
        Ok(())
    }

    fn rebuild_epochs(&mut self) {
        self.epochs.clear();
        for e in &self.index {
            if self.epochs.last().is_none_or(|(ep, _)| *ep != e.leader_epoch) {
                self.epochs.push((e.leader_epoch, e.base_offset));
            }
        }
    }

    /// The leader-epoch cache, (epoch, first offset), ascending.
    pub fn epoch_cache(&self) -> &[(i32, i64)] {
        &self.epochs
    }

    /// Leader epoch of the batch holding `offset`.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        if offset < 0 || offset >= self.end_offset {
            return None;
        }
        let i = self.index.partition_point(|e| e.last_offset < offset);
        self.index.get(i).map(|e| e.leader_epoch)
    }

    /// First offset of the run of the epoch that holds `offset` (from the epoch cache).
    pub fn epoch_start(&self, offset: i64) -> i64 {
        let i = self.epochs.partition_point(|(_, start)| *start <= offset);
        if i == 0 {
            0
        } else {
            self.epochs[i - 1].1
        }
    }

    /// OffsetsForLeaderEpoch: the largest epoch in this log's cache at or below `epoch`, and
    /// the offset where it ends here (the start of the next epoch, or the log end). `(-1, 0)`
    /// if the log has no epoch that old.
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let i = self.epochs.partition_point(|(e, _)| *e <= epoch);
        if i == 0 {
            return (-1, 0);
        }
        let end = self.epochs.get(i).map_or(self.end_offset, |(_, start)| *start);
        (self.epochs[i - 1].0, end)
    }

    /// The first offset of the batch holding `offset` (the log end if `offset` is past it).
    pub fn batch_start(&self, offset: i64) -> i64 {
        if offset >= self.end_offset {
            return self.end_offset;
        }
        let i = self.index.partition_point(|e| e.last_offset < offset.max(0));
        self.index.get(i).map_or(self.end_offset, |e| e.base_offset)
    }

    /// Cut the log back to `offset` (rounded down to a batch boundary); returns the new end.
    pub fn truncate(&mut self, offset: i64) -> Result<i64, LogError> {
        if offset >= self.end_offset {
            return Ok(self.end_offset);
        }
        let keep = self.index.partition_point(|e| e.last_offset < offset);
        let (pos, end) = match self.index.get(keep) {
            Some(e) => (e.pos, e.base_offset),
            None => (self.size, self.end_offset),
        };
        self.file.set_len(pos).map_err(|e| LogError::Io {
            path: self.path.display().to_string(),
            op: "truncate",
            detail: e.to_string(),
        })?;
        self.index.truncate(keep);
        self.size = pos;
        self.end_offset = end;
        self.rebuild_epochs();
        Ok(end)
    }

    /// Header and marker kind of every batch, read back from the file (after a truncation).
    pub fn headers(&self) -> Result<Vec<(BatchHeader, Option<MarkerKind>)>, LogError> {
        let bytes = read_at(&self.reader, 0, self.size as usize).map_err(|e| LogError::Io {
            path: self.path.display().to_string(),
            op: "read",
            detail: e.to_string(),
        })?;
        let mut out = Vec::with_capacity(self.index.len());
        for item in BatchIter::new(bytes) {
            let (h, b) = item.map_err(|e| LogError::Corrupt {
                path: self.path.display().to_string(),
                pos: 0,
                detail: e.to_string(),
            })?;
            out.push((h, marker_kind(&b)));
        }
        Ok(out)
    }

    /// Where to read whole batches from `offset`, at most `max_bytes` but at least one batch,
    /// and only batches that end before `limit` (the high watermark for consumers):
    /// `(file position, length)`, or `None` when there is nothing to read.
    pub fn locate(&self, offset: i64, max_bytes: usize, limit: i64) -> Option<(u64, usize)> {
        if offset >= self.end_offset || offset < 0 {
            return None;
        }
        let first = self.index.partition_point(|e| e.last_offset < offset);
        if self.index.get(first)?.last_offset >= limit {
            return None;
        }
        let start = self.index.get(first)?.pos;
        let end_of = |i: usize| self.index.get(i).map_or(self.size, |e| e.pos);
        // Batches first..upto are included; always at least the first one.
        let mut upto = first + 1;
        while upto < self.index.len()
            && self.index[upto].last_offset < limit
            && (end_of(upto + 1) - start) as usize <= max_bytes
        {
            upto += 1;
        }
        let end = end_of(upto);
        Some((start, (end - start) as usize))
    }

    /// A handle for reading outside the partition lock.
    pub fn reader(&self) -> Arc<File> {
        self.reader.clone()
    }
}

/// Read `len` bytes at `pos` (positional read: no shared cursor, no lock).
pub fn read_at(file: &File, pos: u64, len: usize) -> std::io::Result<Bytes> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, pos)?;
    Ok(Bytes::from(buf))
}

fn write_all_two(file: &mut File, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let mut a = a;
    let mut b = b;
    while !a.is_empty() || !b.is_empty() {
        let n = file.write_vectored(&[IoSlice::new(a), IoSlice::new(b)])?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing"));
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::batch::{build_batch, set_base_offset, ProducerStamp};

    fn append(log: &mut PartitionLog, value: &str) -> i64 {
        let seq = log.end_offset() as i32;
        let b = build_batch(
            ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: seq },
            false,
            0,
            &[Bytes::from(value.to_string())],
        );
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = log.end_offset();
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&b[..16]);
        set_base_offset(&mut prefix, h.base_offset);
        log.append(&prefix, &b[16..], &h).unwrap();
        h.base_offset
    }

    #[test]
    fn appends_are_read_back_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path()).unwrap().log;
        for i in 0..5 {
            assert_eq!(append(&mut log, &format!("v{i}")), i);
        }
        let (pos, len) = log.locate(2, 1, i64::MAX).unwrap();
        let one = read_at(&log.reader(), pos, len).unwrap();
        assert_eq!(BatchHeader::parse(&one).unwrap().base_offset, 2, "at least one whole batch");
        let (_, all) = log.locate(0, usize::MAX, i64::MAX).unwrap();
        assert_eq!(all as u64, log.size_bytes());
        assert!(log.locate(5, 100, i64::MAX).is_none());
        drop(log);
        let r = PartitionLog::open(dir.path()).unwrap();
        assert_eq!(r.log.end_offset(), 5);
        assert_eq!(r.headers.len(), 5);
    }

    #[test]
    fn truncation_and_the_epoch_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path()).unwrap().log;
        for i in 0..6 {
            let epoch = [0, 0, 2, 2, 2, 5][i];
            let b = build_batch(
                ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: i as i32 },
                false,
                0,
                &[Bytes::from(format!("v{i}"))],
            );
            let mut h = BatchHeader::parse(&b).unwrap();
            h.base_offset = i as i64;
            h.partition_leader_epoch = epoch;
            let mut prefix = [0u8; 16];
            prefix.copy_from_slice(&b[..16]);
            set_base_offset(&mut prefix, h.base_offset);
            protocol::batch::set_partition_leader_epoch(&mut prefix, epoch);
            log.append(&prefix, &b[16..], &h).unwrap();
        }
        assert_eq!(log.epoch_cache(), &[(0, 0), (2, 2), (5, 5)]);
        assert_eq!(log.epoch_at(3), Some(2));
        assert_eq!(log.epoch_start(4), 2);
        assert_eq!(log.epoch_start(1), 0);
        assert_eq!(log.epoch_end(0), (0, 2));
        assert_eq!(log.epoch_end(1), (0, 2), "no epoch 1 here: epoch 0 is the largest at or below it");
        assert_eq!(log.epoch_end(3), (2, 5));
        assert_eq!(log.epoch_end(9), (5, 6));
        assert_eq!(log.batch_start(4), 4);
        assert_eq!(log.batch_start(99), 6);
        assert_eq!(
            log.locate(0, usize::MAX, 3).map(|(_, l)| l),
            log.locate(0, usize::MAX, i64::MAX).map(|(_, l)| l / 2)
        );
        assert_eq!(log.truncate(3).unwrap(), 3);
        assert_eq!(log.epoch_cache(), &[(0, 0), (2, 2)]);
        assert_eq!(log.headers().unwrap().len(), 3);
        drop(log);
        let r = PartitionLog::open(dir.path()).unwrap();
        assert_eq!(r.log.end_offset(), 3);
        assert_eq!(r.log.epoch_cache(), &[(0, 0), (2, 2)], "the cache is rebuilt from the log");
    }

    #[test]
    fn torn_tail_is_cut_and_mid_log_damage_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path()).unwrap().log;
        for i in 0..3 {
            append(&mut log, &format!("value-{i}"));
        }
        let size = log.size_bytes();
        drop(log);
        let path = dir.path().join(LOG_FILE);
        OpenOptions::new().write(true).open(&path).unwrap().set_len(size - 5).unwrap();
        let r = PartitionLog::open(dir.path()).unwrap();
        assert_eq!(r.log.end_offset(), 2);
        assert!(r.truncated_bytes > 0);
        drop(r);
        let mut raw = std::fs::read(&path).unwrap();
        raw[70] ^= 0xff; // inside the first batch's records
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(PartitionLog::open(dir.path()), Err(LogError::Corrupt { pos: 0, .. })));
    }
}
