//! The journal kept in a guarded key-value store: etcd for coordinator replicas
//! (`--etcd-endpoints`, [`crate::etcd`]), or [`MemKv`] in tests and the simulator.
//!
//! Every write is a transaction compared on the leader key's create revision (the replica's
//! [`Leadership`]): once another replica has won the election, the old leader key is gone and
//! each of the deposed replica's writes fails, even if it has not noticed it lost. This is the
//! fencing token of the design card, one level up: the leader key's revision fences
//! coordinators as producer epochs fence producers.
//!
//! Layout under the prefix `P`:
//! - `P/coordinator_epoch`: the coordinator epoch, a decimal i32, bumped by a guarded write at
//!   every takeover ([`KvJournal::take_over`]);
//! - `P/log/<seq>`: the journal, records framed as in the local journal, one key per group
//!   commit (a group commit larger than [`KV_VALUE_BYTES_MAX`] takes several keys);
//! - `P/snap/<generation>/<chunk>`: snapshot chunks, and `P/snapshot`, the pointer to the current
//!   one (`<generation> <chunks> <first log seq>`), switched by one guarded write that also
//!   deletes the log before it and older snapshots.
//!
//! Keys are written in order and each at once, so what a failed group commit can leave is a
//! prefix of it (as a torn tail in a file): the next takeover cuts a record left cut short.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::journal::{frame_records, frame_snapshot, parse_snapshot, scan, JournalError, JournalStore, Replay};

/// Largest value written to one key, in bytes: under etcd's 1.5 MiB request limit
/// (`--max-request-bytes`) with room for the key and the compares.
pub const KV_VALUE_BYTES_MAX: usize = 1024 * 1024;
/// Keys read per range request: at most [`KV_VALUE_BYTES_MAX`] each, so an answer stays under
/// [`KV_READ_ANSWER_BYTES_MAX`].
pub const KV_READ_KEYS_MAX: usize = 64;
/// Largest range answer the etcd client decodes, in bytes (its default is 4 MiB).
pub const KV_READ_ANSWER_BYTES_MAX: usize = KV_READ_KEYS_MAX * KV_VALUE_BYTES_MAX + 1024 * 1024;

/// One condition of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key's create revision equals this (0: the key does not exist).
    CreateRevision(Vec<u8>, i64),
    /// The key's mod revision equals this (0: the key does not exist).
    ModRevision(Vec<u8>, i64),
}

/// One write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOp {
    /// Set a key.
    Put(Vec<u8>, Vec<u8>),
    /// Delete the keys in `[from, to)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

/// A key read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
    /// Revision of its last write.
    pub mod_revision: i64,
}

/// A store failure. A failed write may or may not have been applied: the journal treats both
/// as failed for good.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

/// A key-value store with revisions and guarded transactions (etcd's model).
pub trait GuardedKv: Send + 'static {
    /// Apply `ops` atomically if every compare holds: `Ok(true)` applied, `Ok(false)` a
    /// compare failed and nothing was applied, `Err` failed or unknown.
    fn txn(&mut self, compares: &[Compare], ops: &[KvOp]) -> Result<bool, KvError>;
    /// Up to `limit` keys in `[from, to)`, in key order.
    fn range(&mut self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError>;
}

/// The election a replica won: its leader key and that key's create revision. Every write
/// of the replica is compared on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The leader key.
    pub key: Vec<u8>,
    /// Its create revision (strictly increasing from one leader to the next).
    pub revision: i64,
}

fn key(prefix: &str, rest: &str) -> Vec<u8> {
    format!("{prefix}/{rest}").into_bytes()
}

fn log_key(prefix: &str, seq: u64) -> Vec<u8> {
    key(prefix, &format!("log/{seq:020}"))
}

fn chunk_key(prefix: &str, generation: u64, chunk: u64) -> Vec<u8> {
    key(prefix, &format!("snap/{generation:020}/{chunk:06}"))
}

/// The key just after every key that starts with `p` (`p` ends in `/`).
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// The records of one log key's value (records framed as the journal frames them), or why
/// they do not read back.
pub fn log_records(value: &[u8]) -> Result<Vec<Bytes>, JournalError> {
    let (records, good) = scan(Path::new("etcd log"), Bytes::copy_from_slice(value))?;
    if good != value.len() as u64 {
        return Err(JournalError::Corrupt {
            path: "etcd log".into(),
            offset: good,
            detail: "a record is cut short".into(),
        });
    }
    Ok(records)
}

/// Whether `key` is a log key under `prefix`.
pub fn is_log_key(prefix: &str, key: &[u8]) -> bool {
    key.starts_with(&self::key(prefix, "log/"))
}

/// The election's name under `prefix`: candidates' keys are created under it.
pub fn election_name(prefix: &str) -> Vec<u8> {
    key(prefix, "election")
}

/// The journal of one active replica, in a [`GuardedKv`].
pub struct KvJournal<K: GuardedKv> {
    kv: K,
    prefix: String,
    leadership: Leadership,
    /// The next log key's sequence number.
    next_seq: u64,
    /// The current snapshot's generation (0: none yet).
    generation: u64,
    /// Write unguarded (the simulator's mutation: shows the guard is what fences).
    unguarded: bool,
}

fn failed(what: &str, e: KvError) -> JournalError {
    JournalError::Io { path: "etcd".into(), op: "guarded write", detail: format!("{what}: {e}") }
}

fn deposed(what: &str) -> JournalError {
    JournalError::Deposed(format!(
        "{what} refused: this replica's leader key is gone (its lease lapsed and another replica took over)"
    ))
}

impl<K: GuardedKv> KvJournal<K> {
    /// Take over as the active replica under `leadership`: bump the coordinator epoch (a
    /// guarded write, so a replica that already lost cannot), then read back the current
    /// snapshot and the log after it, cutting a record a failed write left cut short.
    /// Returns the journal (for [`crate::journal::Journal::start`]), what it read, and the new
    /// coordinator epoch.
    pub fn take_over(mut kv: K, prefix: &str, leadership: Leadership) -> Result<(Self, Replay, i32), JournalError> {
        let read_err = |what: &'static str| move |e: KvError| failed(what, e);
        let epoch_key = key(prefix, "coordinator_epoch");
        let found = kv.range(&epoch_key, &key_end(&epoch_key), 1).map_err(read_err("read the coordinator epoch"))?;
        let (old, mod_revision) = match found.first() {
            None => (0, 0),
            Some(kv) => {
                let text = String::from_utf8_lossy(&kv.value);
                let old: i32 = text.trim().parse().map_err(|_| JournalError::Corrupt {
                    path: String::from_utf8_lossy(&epoch_key).into_owned(),
                    offset: 0,
                    detail: format!("coordinator epoch {text:?} is not a number"),
                })?;
                (old, kv.mod_revision)
            }
        };
        let epoch = old.checked_add(1).ok_or_else(|| JournalError::Corrupt {
            path: String::from_utf8_lossy(&epoch_key).into_owned(),
            offset: 0,
            detail: "the coordinator epoch is at i32::MAX".into(),
        })?;
        let guard = [
            Compare::CreateRevision(leadership.key.clone(), leadership.revision),
            Compare::ModRevision(epoch_key.clone(), mod_revision),
        ];
        let bumped = kv
            .txn(&guard, &[KvOp::Put(epoch_key, epoch.to_string().into_bytes())])
            .map_err(read_err("bump the coordinator epoch"))?;
        if !bumped {
            return Err(deposed("bumping the coordinator epoch"));
        }
        let mut journal =
            KvJournal { kv, prefix: prefix.to_string(), leadership, next_seq: 0, generation: 0, unguarded: false };
        let (snapshot, log_from) = journal.read_snapshot()?;
        let (payloads, truncated_bytes) = journal.read_log(log_from)?;
        let replay = Replay {
            snapshot,
            payloads,
            truncated_bytes,
            generation: journal.generation,
            skipped_snapshots: Vec::new(),
        };
        Ok((journal, replay, epoch))
    }

    /// Write without the leadership guard: for the simulator's mutation only.
    pub fn set_unguarded(&mut self, unguarded: bool) {
        self.unguarded = unguarded;
    }

    fn guard(&self) -> Vec<Compare> {
        if self.unguarded {
            return Vec::new();
        }
        vec![Compare::CreateRevision(self.leadership.key.clone(), self.leadership.revision)]
    }

    fn guarded(&mut self, what: &str, ops: &[KvOp]) -> Result<(), JournalError> {
        let guard = self.guard();
        match self.kv.txn(&guard, ops) {
            Ok(true) => Ok(()),
            Ok(false) => Err(deposed(what)),
            Err(e) => Err(failed(what, e)),
        }
    }

    /// All keys in `[from, to)`, paged.
    fn read_all(&mut self, from: Vec<u8>, to: &[u8], what: &str) -> Result<Vec<KeyValue>, JournalError> {
        let mut out: Vec<KeyValue> = Vec::new();
        let mut next = from;
        loop {
            let page = self.kv.range(&next, to, KV_READ_KEYS_MAX).map_err(|e| failed(what, e))?;
            let Some(last) = page.last() else { break };
            next = last.key.clone();
            next.push(0);
            let full = page.len() == KV_READ_KEYS_MAX;
            out.extend(page);
            if !full {
                break;
            }
        }
        Ok(out)
    }

    fn read_snapshot(&mut self) -> Result<(Vec<Bytes>, u64), JournalError> {
        let pointer_key = key(&self.prefix, "snapshot");
        let found = self
            .kv
            .range(&pointer_key, &key_end(&pointer_key), 1)
            .map_err(|e| failed("read the snapshot pointer", e))?;
        let Some(pointer) = found.first() else { return Ok((Vec::new(), 0)) };
        let corrupt = |detail: String| JournalError::Corrupt {
            path: String::from_utf8_lossy(&pointer_key).into_owned(),
            offset: 0,
            detail,
        };
        let text = String::from_utf8_lossy(&pointer.value).into_owned();
        let fields: Vec<u64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        let [generation, chunks, log_from] = fields[..] else {
            return Err(corrupt(format!("snapshot pointer {text:?} is not '<generation> <chunks> <first log seq>'")));
        };
        let from = chunk_key(&self.prefix, generation, 0);
        let to = chunk_key(&self.prefix, generation, chunks);
        let found = self.read_all(from, &to, "read the snapshot")?;
        if found.len() as u64 != chunks {
            return Err(corrupt(format!("snapshot {generation} has {} of its {chunks} chunks", found.len())));
        }
        let bytes: Vec<u8> = found.into_iter().flat_map(|kv| kv.value).collect();
        let records = parse_snapshot(Path::new("etcd snapshot"), Bytes::from(bytes))
            .map_err(|why| corrupt(format!("snapshot {generation} does not read back: {why}")))?;
        self.generation = generation;
        Ok((records, log_from))
    }

    fn read_log(&mut self, log_from: u64) -> Result<(Vec<Bytes>, u64), JournalError> {
        let log_prefix = key(&self.prefix, "log/");
        let found = self.read_all(log_key(&self.prefix, log_from), &prefix_end(&log_prefix), "read the log")?;
        let mut seqs = Vec::with_capacity(found.len());
        let mut bytes = Vec::new();
        // Where each key's bytes start in the concatenated log.
        let mut starts = Vec::with_capacity(found.len());
        for (i, kv) in found.iter().enumerate() {
            let name = String::from_utf8_lossy(&kv.key[log_prefix.len()..]).into_owned();
            let seq: u64 = name.parse().map_err(|_| JournalError::Corrupt {
                path: String::from_utf8_lossy(&kv.key).into_owned(),
                offset: 0,
                detail: "not a log key".into(),
            })?;
            if seq != log_from + i as u64 {
                return Err(JournalError::Corrupt {
                    path: String::from_utf8_lossy(&kv.key).into_owned(),
                    offset: bytes.len() as u64,
                    detail: format!("log key {} is missing", log_from + i as u64),
                });
            }
            seqs.push(seq);
            starts.push(bytes.len());
            bytes.extend_from_slice(&kv.value);
        }
        self.next_seq = log_from + found.len() as u64;
        let total = bytes.len() as u64;
        let (records, good) = scan(Path::new("etcd log"), Bytes::from(bytes.clone()))?;
        if good == total {
            return Ok((records, 0));
        }
        // Every key is written whole, so the one tail a failed write leaves is a record whose
        // length runs past the last key (its next keys never landed). A complete record that
        // fails its CRC, or zeros, is damage: cutting it could forget an answered grant.
        let rest = &bytes[good as usize..];
        let cut_short = rest.len() < 8 || {
            let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as u64;
            8 + len > rest.len() as u64
        };
        if !cut_short {
            return Err(JournalError::Corrupt {
                path: String::from_utf8_lossy(&log_prefix).into_owned(),
                offset: good,
                detail:
                    "a damaged record (not one cut short by a failed write); refusing to take over, since skipping it \
                         could reissue epochs. Restore etcd from a backup"
                        .into(),
            });
        }
        // A record cut short by a group commit that failed between its keys: keep the key it
        // starts in up to it, and drop the keys after.
        let at = starts.iter().rposition(|s| (*s as u64) <= good).expect("the first key starts at 0");
        let keep = &bytes[starts[at]..good as usize];
        let mut ops = vec![KvOp::DeleteRange(log_key(&self.prefix, seqs[at] + 1), prefix_end(&log_prefix))];
        if keep.is_empty() {
            ops.push(KvOp::DeleteRange(log_key(&self.prefix, seqs[at]), log_key(&self.prefix, seqs[at] + 1)));
            self.next_seq = seqs[at];
        } else {
            ops.push(KvOp::Put(log_key(&self.prefix, seqs[at]), keep.to_vec()));
            self.next_seq = seqs[at] + 1;
        }
        self.guarded("cutting a torn record off the log", &ops)?;
        tracing::warn!(cut = total - good, "cut a torn record off the etcd log");
        Ok((records, total - good))
    }
}

/// The key just after `k`: `[k, key_end(k))` is `k` alone.
fn key_end(k: &[u8]) -> Vec<u8> {
    let mut end = k.to_vec();
    end.push(0);
    end
}

impl<K: GuardedKv> JournalStore for KvJournal<K> {
    fn write(&mut self, records: &[Bytes]) -> Result<(), JournalError> {
        let framed = frame_records(records);
        for chunk in framed.chunks(KV_VALUE_BYTES_MAX) {
            let put = KvOp::Put(log_key(&self.prefix, self.next_seq), chunk.to_vec());
            self.guarded("journal write", &[put])?;
            self.next_seq += 1;
        }
        Ok(())
    }

    fn rotate(&mut self, snapshot: &[Bytes]) -> Result<(), JournalError> {
        let generation = self.generation + 1;
        let bytes = frame_snapshot(snapshot);
        let chunks: Vec<&[u8]> = bytes.chunks(KV_VALUE_BYTES_MAX).collect();
        let mine = key(&self.prefix, &format!("snap/{generation:020}/"));
        for (i, chunk) in chunks.iter().enumerate() {
            let mut ops = Vec::with_capacity(2);
            if i == 0 {
                // Chunks an earlier, failed attempt at this generation may have left.
                ops.push(KvOp::DeleteRange(mine.clone(), prefix_end(&mine)));
            }
            ops.push(KvOp::Put(chunk_key(&self.prefix, generation, i as u64), chunk.to_vec()));
            self.guarded("snapshot write", &ops)?;
        }
        let pointer = format!("{generation} {} {}", chunks.len(), self.next_seq);
        let ops = [
            KvOp::Put(key(&self.prefix, "snapshot"), pointer.into_bytes()),
            KvOp::DeleteRange(key(&self.prefix, "log/"), log_key(&self.prefix, self.next_seq)),
            KvOp::DeleteRange(key(&self.prefix, "snap/"), mine),
        ];
        self.guarded("snapshot switch", &ops)?;
        self.generation = generation;
        tracing::info!(generation, records = snapshot.len(), chunks = chunks.len(), "etcd snapshot written");
        Ok(())
    }
}

/// An in-memory [`GuardedKv`] with etcd's revisions, leases and elections, for tests and the
/// simulator. Time is whatever the caller passes as `now` (milliseconds or ticks). Clones
/// share one store, as replicas share one etcd.
#[derive(Clone, Default)]
pub struct MemKv {
    inner: Arc<Mutex<MemStore>>,
}

#[derive(Default)]
struct MemStore {
    revision: i64,
    /// key -> (value, create revision, mod revision, lease)
    keys: BTreeMap<Vec<u8>, (Vec<u8>, i64, i64, i64)>,
    /// lease id -> expiry
    leases: HashMap<i64, u64>,
    next_lease: i64,
    /// Refuse every call (an unreachable store).
    down: bool,
}

impl MemKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn store(&self) -> std::sync::MutexGuard<'_, MemStore> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grant a lease that expires at `expires` unless kept alive.
    pub fn lease_grant(&self, expires: u64) -> i64 {
        let mut s = self.store();
        s.next_lease += 1;
        let id = s.next_lease;
        s.leases.insert(id, expires);
        id
    }

    /// Extend a live lease to `expires`; false if it is gone.
    pub fn lease_keep_alive(&self, lease: i64, expires: u64) -> bool {
        let mut s = self.store();
        match s.leases.get_mut(&lease) {
            Some(e) => {
                *e = (*e).max(expires);
                true
            }
            None => false,
        }
    }

    /// Revoke `lease` now, deleting its keys (a replica stepping down).
    pub fn lease_revoke(&self, lease: i64) {
        let mut s = self.store();
        if s.leases.remove(&lease).is_some() {
            s.revision += 1;
            s.keys.retain(|_, (_, _, _, l)| *l != lease);
        }
    }

    /// Whether `leadership`'s key is still there (its holder still leads).
    pub fn holds(&self, leadership: &Leadership) -> bool {
        self.store().keys.get(&leadership.key).is_some_and(|v| v.1 == leadership.revision)
    }

    /// Expire the leases due by `now`, deleting their keys.
    pub fn expire(&self, now: u64) {
        let mut s = self.store();
        let dead: Vec<i64> = s.leases.iter().filter(|(_, e)| **e <= now).map(|(id, _)| *id).collect();
        if dead.is_empty() {
            return;
        }
        for id in &dead {
            s.leases.remove(id);
        }
        s.revision += 1;
        s.keys.retain(|_, (_, _, _, lease)| !dead.contains(lease));
    }

    /// Campaign in election `name` with `lease`: the leadership if no other candidate's key
    /// is there (candidates wait in create-revision order in etcd; here one tries again).
    pub fn campaign(&self, name: &[u8], lease: i64) -> Option<Leadership> {
        let mut s = self.store();
        if !s.leases.contains_key(&lease) {
            return None;
        }
        let mut dir = name.to_vec();
        dir.push(b'/');
        let end = prefix_end(&dir);
        let mine = [dir.clone(), format!("{lease:x}").into_bytes()].concat();
        if let Some((k, (_, create, _, _))) = s.keys.range(dir..end).next() {
            return (*k == mine).then(|| Leadership { key: k.clone(), revision: *create });
        }
        s.revision += 1;
        let rev = s.revision;
        s.keys.insert(mine.clone(), (Vec::new(), rev, rev, lease));
        Some(Leadership { key: mine, revision: rev })
    }

    /// Make every call fail (true) or work again (false).
    pub fn set_down(&self, down: bool) {
        self.store().down = down;
    }
}

impl GuardedKv for MemKv {
    fn txn(&mut self, compares: &[Compare], ops: &[KvOp]) -> Result<bool, KvError> {
        let mut s = self.store();
        if s.down {
            return Err(KvError("the store is unreachable".into()));
        }
        let holds = compares.iter().all(|c| match c {
            Compare::CreateRevision(k, rev) => s.keys.get(k).map_or(0, |v| v.1) == *rev,
            Compare::ModRevision(k, rev) => s.keys.get(k).map_or(0, |v| v.2) == *rev,
        });
        if !holds {
            return Ok(false);
        }
        s.revision += 1;
        let rev = s.revision;
        for op in ops {
            match op {
                KvOp::Put(k, v) => {
                    let create = s.keys.get(k).map_or(rev, |old| old.1);
                    s.keys.insert(k.clone(), (v.clone(), create, rev, 0));
                }
                KvOp::DeleteRange(from, to) => {
                    let doomed: Vec<Vec<u8>> = s.keys.range(from.clone()..to.clone()).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        s.keys.remove(&k);
                    }
                }
            }
        }
        Ok(true)
    }

    fn range(&mut self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        let s = self.store();
        if s.down {
            return Err(KvError("the store is unreachable".into()));
        }
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(s.keys
            .range(from.to_vec()..to.to_vec())
            .take(limit)
            .map(|(k, (v, _, m, _))| KeyValue { key: k.clone(), value: v.clone(), mod_revision: *m })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    fn leader(kv: &MemKv, now: u64) -> Leadership {
        let lease = kv.lease_grant(now + 1_000);
        kv.campaign(&election_name("/t"), lease).expect("no other candidate")
    }

    #[test]
    fn a_takeover_reads_back_the_snapshot_and_log_and_bumps_the_epoch() {
        let kv = MemKv::new();
        let (mut j, replay, epoch) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 0)).unwrap();
        assert_eq!((epoch, replay.snapshot.len(), replay.payloads.len()), (1, 0, 0));
        j.write(&[b("a"), b("b")]).unwrap();
        j.rotate(&[b("state-after-b")]).unwrap();
        j.write(&[b("c")]).unwrap();
        // A record larger than one key's value spans several keys.
        let big = Bytes::from(vec![7u8; KV_VALUE_BYTES_MAX * 2 + 5]);
        j.write(&[big.clone(), b("d")]).unwrap();
        drop(j);
        kv.expire(2_000);
        let (_, replay, epoch) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 2_000)).unwrap();
        assert_eq!(epoch, 2);
        assert_eq!(replay.snapshot, vec![b("state-after-b")]);
        assert_eq!(replay.payloads, vec![b("c"), big, b("d")]);
        let mut probe = kv.clone();
        let log = probe.range(b"/t/log/", b"/t/log0", 100).unwrap();
        assert_eq!(log.len(), 4, "the log before the snapshot was deleted");
    }

    #[test]
    fn a_log_of_many_keys_is_read_back_in_pages() {
        let kv = MemKv::new();
        let (mut j, _, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 0)).unwrap();
        let written: Vec<Bytes> = (0..KV_READ_KEYS_MAX * 2 + 7).map(|i| b(&format!("r{i}"))).collect();
        for r in &written {
            j.write(std::slice::from_ref(r)).unwrap(); // one key each
        }
        drop(j);
        kv.expire(1_000);
        let (_, replay, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 1_000)).unwrap();
        assert_eq!(replay.payloads, written);
    }

    #[test]
    fn a_deposed_replica_cannot_write_or_bump_the_epoch() {
        let kv = MemKv::new();
        let old = leader(&kv, 0);
        let (mut j, _, _) = KvJournal::take_over(kv.clone(), "/t", old.clone()).unwrap();
        j.write(&[b("granted-by-old")]).unwrap();
        kv.expire(1_000); // the old replica's lease lapsed while it was paused
        let (mut new, replay, epoch) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 1_000)).unwrap();
        assert_eq!((epoch, replay.payloads.clone()), (2, vec![b("granted-by-old")]));
        // The old one wakes: its writes, snapshots and takeovers are all refused.
        assert!(matches!(j.write(&[b("zombie")]), Err(JournalError::Deposed(_))));
        assert!(matches!(j.rotate(&[b("zombie-state")]), Err(JournalError::Deposed(_))));
        assert!(matches!(KvJournal::take_over(kv.clone(), "/t", old.clone()), Err(JournalError::Deposed(_))));
        new.write(&[b("granted-by-new")]).unwrap();
        kv.expire(5_000);
        let (_, replay, epoch) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 5_000)).unwrap();
        assert_eq!(epoch, 3);
        assert_eq!(replay.payloads, vec![b("granted-by-old"), b("granted-by-new")]);

        // Without the guard, the zombie's write lands: what the simulator's mutation shows.
        let other = MemKv::new();
        let (mut zombie, _, _) = KvJournal::take_over(other.clone(), "/t", leader(&other, 0)).unwrap();
        other.expire(1_000);
        assert!(zombie.write(&[b("refused")]).is_err());
        zombie.set_unguarded(true);
        zombie.write(&[b("lands")]).unwrap();
        drop(old);
    }

    #[test]
    fn a_record_cut_short_between_keys_is_cut_at_the_next_takeover() {
        let kv = MemKv::new();
        let (mut j, _, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 0)).unwrap();
        j.write(&[b("kept")]).unwrap();
        // A group commit whose second key never landed: its first key holds a record's start.
        let framed = frame_records(&[Bytes::from(vec![1u8; KV_VALUE_BYTES_MAX + 10])]);
        let mut raw = kv.clone();
        let first = KvOp::Put(log_key("/t", 1), framed[..KV_VALUE_BYTES_MAX].to_vec());
        assert!(raw.txn(&[], &[first]).unwrap());
        drop(j);
        kv.expire(1_000);
        let (mut j, replay, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 1_000)).unwrap();
        assert_eq!(replay.payloads, vec![b("kept")]);
        assert_eq!(replay.truncated_bytes, KV_VALUE_BYTES_MAX as u64);
        j.write(&[b("after")]).unwrap();
        drop(j);
        kv.expire(2_000);
        let (_, replay, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 2_000)).unwrap();
        assert_eq!(replay.payloads, vec![b("kept"), b("after")]);
    }

    #[test]
    fn a_damaged_complete_record_is_refused_not_cut() {
        let kv = MemKv::new();
        let (mut j, _, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 0)).unwrap();
        j.write(&[b("kept"), b("granted")]).unwrap();
        drop(j);
        let mut raw = kv.clone();
        let mut value = raw.range(&log_key("/t", 0), &log_key("/t", 1), 1).unwrap().remove(0).value;
        let last = value.len() - 1;
        value[last] ^= 1; // the last record's payload flips a bit
        assert!(raw.txn(&[], &[KvOp::Put(log_key("/t", 0), value)]).unwrap());
        kv.expire(1_000);
        let taken = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 1_000));
        assert!(matches!(taken, Err(JournalError::Corrupt { .. })), "{:?}", taken.err());
    }

    #[test]
    fn a_failed_write_stops_the_journal_for_good() {
        let kv = MemKv::new();
        let (store, _, _) = KvJournal::take_over(kv.clone(), "/t", leader(&kv, 0)).unwrap();
        let journal = crate::journal::Journal::start(store).unwrap();
        journal.append(vec![b("one")]).blocking_recv().unwrap().unwrap();
        kv.set_down(true);
        assert!(journal.append(vec![b("two")]).blocking_recv().unwrap().is_err());
        kv.set_down(false);
        // The store is back, but a write whose outcome is unknown came before: nothing later
        // is accepted, barriers included.
        assert!(journal.append(vec![b("three")]).blocking_recv().unwrap().is_err());
        assert!(journal.append(vec![]).blocking_recv().unwrap().is_err());
        assert!(journal.stopped().borrow().is_some());
    }
}
