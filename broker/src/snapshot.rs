//! Producer-state snapshots: the producer table and the transaction index of a partition as of
//! one offset, so that recovery replays only the batches after it instead of the whole log.
//!
//! A snapshot is written when a segment rolls (as of the new segment's base offset, once the
//! segments below it are synced) and on a clean shutdown (as of the log end, after a sync), to
//! `<offset>.snapshot` through a synced temporary file and a rename. The file ends with a
//! CRC32C of everything before it; a snapshot that fails it, or does not parse, is skipped and
//! recovery falls back to the next older one, or to a replay of the whole log. Either way the
//! result is the state a full replay gives: the snapshot holds only what the log's batches
//! determine (never the volatile coordinator verifications).
//!
//! Format (big-endian): magic `EFPS`, version u16 (2; 1 is read too), offset i64, the producer table, the
//! transaction index, CRC32C u32. Every count is checked against the bytes left before
//! anything is allocated for it.

use std::path::{Path, PathBuf};

use bytes::BufMut;
use protocol::batch::crc32c;
use thiserror::Error;

use crate::log::{offset_file_name, offset_files};
use crate::producer_state::ProducerStates;
use crate::storage::Storage;
use crate::txn_index::TxnIndex;

/// Extension of snapshot files.
pub const SNAPSHOT_SUFFIX: &str = "snapshot";
/// Snapshots kept per partition (older ones are deleted when a new one is written).
pub const SNAPSHOTS_KEPT: usize = 2;
const MAGIC: &[u8; 4] = b"EFPS";
/// Version 2 keeps each producer's last marker sequence; version 1 files are read as markers
/// without one.
const VERSION: u16 = 2;

/// Why a snapshot was not used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("snapshot is malformed: {0}")]
pub struct Malformed(pub &'static str);

/// A bounds-checked big-endian reader: running out of bytes is an error, never a panic.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Read from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        if self.buf.len() < N {
            return Err(Malformed("ends early"));
        }
        let (head, rest) = self.buf.split_at(N);
        self.buf = rest;
        Ok(head.try_into().expect("N bytes"))
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }
    /// A big-endian i16.
    pub fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(i16::from_be_bytes(self.take()?))
    }
    /// A big-endian u16.
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    /// A big-endian i32.
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(i32::from_be_bytes(self.take()?))
    }
    /// A big-endian i64.
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_be_bytes(self.take()?))
    }

    /// A u32 count of items of at least `item_bytes` each, checked against the bytes left.
    pub fn count(&mut self, item_bytes: usize) -> Result<usize, Malformed> {
        let n = u32::from_be_bytes(self.take()?) as usize;
        if n.saturating_mul(item_bytes) > self.buf.len() {
            return Err(Malformed("a count larger than the bytes that follow"));
        }
        Ok(n)
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Encode a snapshot of `producers` and `txns` as of `offset`.
pub fn encode(offset: i64, producers: &ProducerStates, txns: &TxnIndex) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_slice(MAGIC);
    out.put_u16(VERSION);
    out.put_i64(offset);
    producers.encode(&mut out);
    txns.encode(&mut out);
    let crc = crc32c(&out);
    out.put_u32(crc);
    out
}

/// Decode a snapshot: its offset, producer table (with the gate on or off as `fencing`) and
/// transaction index.
pub fn decode(raw: &[u8], fencing: bool) -> Result<(i64, ProducerStates, TxnIndex), Malformed> {
    if raw.len() < MAGIC.len() + 2 + 8 + 4 {
        return Err(Malformed("too short"));
    }
    let (body, crc) = raw.split_at(raw.len() - 4);
    if crc32c(body) != u32::from_be_bytes(crc.try_into().expect("4 bytes")) {
        return Err(Malformed("CRC mismatch"));
    }
    let mut r = Reader::new(body);
    if &r.take::<4>()? != MAGIC {
        return Err(Malformed("bad magic"));
    }
    let version = r.u16()?;
    if version != VERSION && version != 1 {
        return Err(Malformed("unknown version"));
    }
    let offset = r.i64()?;
    let producers = ProducerStates::decode_version(&mut r, fencing, version >= 2)?;
    let txns = TxnIndex::decode(&mut r)?;
    if !r.is_empty() {
        return Err(Malformed("bytes after the end"));
    }
    Ok((offset, producers, txns))
}

/// The snapshot files in `dir`, oldest first.
pub fn list(storage: &dyn Storage, dir: &Path) -> std::io::Result<Vec<(i64, PathBuf)>> {
    offset_files(storage, dir, SNAPSHOT_SUFFIX)
}

/// Write a snapshot as of `offset` to `dir` (synced, then renamed into place), and delete all
/// but the newest [`SNAPSHOTS_KEPT`].
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    offset: i64,
    producers: &ProducerStates,
    txns: &TxnIndex,
) -> std::io::Result<()> {
    let path = dir.join(offset_file_name(offset, SNAPSHOT_SUFFIX));
    storage.write_file_atomically(&path, &encode(offset, producers, txns))?;
    let all = list(storage, dir)?;
    for (_, path) in &all[..all.len().saturating_sub(SNAPSHOTS_KEPT)] {
        storage.remove(path)?;
    }
    storage.sync_dir(dir);
    Ok(())
}

/// Delete the snapshots as of offsets above `offset` (the log was cut below them) and, with
/// `below`, those under it (retention deleted the log they would replay from).
pub fn remove_outside(storage: &dyn Storage, dir: &Path, below: i64, above: i64) -> std::io::Result<()> {
    for (o, path) in list(storage, dir)? {
        if o < below || o > above {
            storage.remove(&path)?;
        }
    }
    Ok(())
}

/// Delete every snapshot (the log starts over).
pub fn remove_all(storage: &dyn Storage, dir: &Path) -> std::io::Result<()> {
    remove_outside(storage, dir, i64::MAX, i64::MIN)
}

/// The newest usable snapshot in `dir` as of an offset in `from..=to`: corrupt ones are
/// reported and skipped.
pub fn load_newest(
    storage: &dyn Storage,
    dir: &Path,
    from: i64,
    to: i64,
    fencing: bool,
) -> Option<(i64, ProducerStates, TxnIndex)> {
    let files = match list(storage, dir) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list producer-state snapshots");
            return None;
        }
    };
    for (offset, path) in files.into_iter().rev().filter(|(o, _)| (from..=to).contains(o)) {
        let decoded = storage
            .read(&path)
            .map_err(|e| e.to_string())
            .and_then(|raw| decode(&raw, fencing).map_err(|e| e.to_string()));
        match decoded {
            Ok((o, producers, txns)) if o == offset => return Some((o, producers, txns)),
            Ok((o, ..)) => {
                tracing::warn!(path = %path.display(), holds = o, "skipping a snapshot named for another offset")
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "skipping a corrupt producer-state snapshot"),
        }
    }
    None
}
