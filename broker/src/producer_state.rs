//! The per-partition producer gate: the one check every write to a partition goes through
//! (produce, markers, and log recovery replays the same bookkeeping).
//!
//! Plain synchronous rules, no I/O. For each producer id the partition keeps the highest epoch
//! it has appended and the last [`BATCHES_CACHED`] batches of that epoch. The epoch lives in
//! the batches of the log itself (every batch carries producer id and epoch, a fence is a
//! control batch at the new epoch), so rebuilding this table from the log after a restart
//! yields exactly the fencing state before it.
//!
//! What is *not* rebuilt is the verification: whether the coordinator confirmed that this
//! partition is registered under an epoch. It is volatile on purpose; after a restart every
//! producer is verified again, and so after every change of leadership
//! ([`ProducerStates::begin_leadership`]): a verification made under an earlier leader epoch
//! may predate a fence whose marker this replica never got (it was away while another replica
//! led), so it must not admit a write now. It is kept apart from what the log determines: a
//! verification says nothing about which batches the log holds, so it never fences a
//! replicated batch.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::BufMut;

use protocol::batch::{increment_sequence, BatchHeader};

use crate::snapshot::{Malformed, Reader};

/// Batches remembered per producer for duplicate detection (Kafka's 5 in-flight batches).
pub const BATCHES_CACHED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMeta {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

/// Which marker of a producer id a control batch is: the epoch it carries and the
/// coordinator's count of that producer id's transaction ends and fences (the batch's base
/// sequence; -1 in markers written before they were counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerId {
    /// The marker's epoch.
    pub epoch: i16,
    /// The coordinator's marker sequence, -1 for none.
    pub sequence: i32,
}

impl MarkerId {
    fn of(h: &BatchHeader) -> MarkerId {
        MarkerId { epoch: h.producer_epoch, sequence: h.base_sequence }
    }

    /// Whether `self` comes after `last`, a marker already appended. A later epoch always does.
    /// At one epoch (several transactions ended without a bump, transaction version 1) only a
    /// higher sequence does; sequences wrap from `i32::MAX` to 0 like record sequences, and a
    /// marker without one (-1) is the one marker of its epoch, so a retry.
    pub fn follows(self, last: MarkerId) -> bool {
        if self.epoch != last.epoch {
            return self.epoch > last.epoch;
        }
        match (self.sequence, last.sequence) {
            (s, _) if s < 0 => false,
            (_, l) if l < 0 => true,
            (s, l) => {
                let ahead = (i64::from(s) - i64::from(l)).rem_euclid(1 << 31);
                ahead > 0 && ahead < 1 << 30
            }
        }
    }
}

/// What one producer id has written to this partition.
#[derive(Debug, Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    /// The last marker appended for this producer id, and its offset: a marker that does not
    /// follow it ([`MarkerId::follows`]) is a retry, or a late copy of one already written.
    last_marker: Option<(MarkerId, i64)>,
    /// Since when nothing was appended for it, as the expiry sweep first found it so
    /// ([`ProducerStates::expire`]; volatile: a restart only lengthens its life).
    idle_since_ms: Option<u64>,
}

/// The gate's verdict on a batch that may be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Append it, then call [`ProducerStates::record`] with its offset.
    Append,
    /// Already appended (a retry): answer with the original offset, append nothing.
    Duplicate {
        /// Offset the batch got the first time.
        base_offset: i64,
    },
    /// The coordinator must first confirm that this epoch may write here
    /// ([`ProducerStates::mark_verified`], with this guard); then check again.
    NeedsVerification(VerificationGuard),
}

/// What a verification was asked against: the producer id's last marker here, and the
/// leadership, when the gate asked. A marker appended while the coordinator is asked ends the
/// transaction the answer speaks of (at the same epoch, transaction version 1), and a change of
/// leadership meanwhile may have let a fence pass this replica by; either way the answer no
/// longer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard {
    marker: Option<MarkerId>,
    leadership: i32,
}

/// Why the gate refuses a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// The batch's epoch is older than the partition's: the producer is a zombie.
    #[error("producer id {producer_id} is at epoch {current} on this partition, the batch carries epoch {got}")]
    StaleEpoch {
        /// Producer id.
        producer_id: i64,
        /// The partition's epoch for it.
        current: i16,
        /// The batch's.
        got: i16,
    },
    /// The partition holds nothing of this producer id (it was idle past
    /// `producer_id_expiration_ms`, or retention removed what it wrote) and the batch does not
    /// start a sequence (0): the producer must start over (Kafka's UNKNOWN_PRODUCER_ID, on which
    /// clients bump their epoch and start at sequence 0).
    #[error(
        "this partition holds no state for producer id {producer_id} (idle past producer_id_expiration_ms, or \
         removed by retention), and the batch continues a sequence at {got}: start again at sequence 0 \
         (Kafka clients bump their epoch and do)"
    )]
    UnknownProducer {
        /// Producer id.
        producer_id: i64,
        /// The batch's first sequence.
        got: i32,
    },
    /// The sequence does not follow the last batch.
    #[error("producer id {producer_id} epoch {epoch}: expected sequence {expected}, got {got}")]
    OutOfOrder {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// The sequence that would have been accepted.
        expected: i32,
        /// The batch's first sequence.
        got: i32,
    },
}

/// One producer id's entry as it was ([`ProducerStates::save`]).
#[derive(Debug, Clone)]
pub struct SavedProducer {
    producer_id: i64,
    entry: Option<ProducerEntry>,
    verified: Option<(i16, bool)>,
}

/// The producer table of one partition.
#[derive(Debug, Clone)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Per producer id, the epoch the coordinator confirmed for this partition and whether it
    /// confirmed it for transactional writes (which also opens the transaction there).
    verified: HashMap<i64, (i16, bool)>,
    /// Producer ids whose verification for writes outside transactions was already held at
    /// the last expiry sweep: the next sweep drops it ([`ProducerStates::expire`]).
    aging: HashSet<i64>,
    /// The leader epoch the verifications belong to ([`ProducerStates::begin_leadership`]).
    leadership: i32,
    fencing: bool,
}

impl ProducerStates {
    /// An empty table. `fencing = false` turns the gate off entirely (every batch is
    /// appended): only for demonstrating and measuring what fencing prevents and costs.
    pub fn new(fencing: bool) -> Self {
        ProducerStates {
            producers: HashMap::new(),
            verified: HashMap::new(),
            aging: HashSet::new(),
            leadership: -1,
            fencing,
        }
    }

    /// This replica leads from now on at `leader_epoch`: every verification made before is
    /// forgotten, and answers to verifications asked before do not count
    /// ([`VerificationGuard`]). The first write of each producer id under the new leadership
    /// is checked with the coordinator again.
    pub fn begin_leadership(&mut self, leader_epoch: i32) {
        self.verified.clear();
        self.leadership = leader_epoch;
    }

    /// Producer ids holding a verification (for tests and the simulator).
    pub fn verified_count(&self) -> usize {
        self.verified.len()
    }

    /// The epoch this partition holds for `producer_id`, if it has seen it.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Every producer id with a batch or marker here: (producer id, epoch, last sequence
    /// appended at that epoch, -1 if none), ascending by producer id.
    pub fn active(&self) -> Vec<(i64, i16, i32)> {
        let mut out: Vec<(i64, i16, i32)> = self
            .producers
            .iter()
            .filter(|(_, e)| !e.batches.is_empty() || e.last_marker.is_some())
            .map(|(id, e)| (*id, e.epoch, e.batches.back().map_or(-1, |b| b.last_seq)))
            .collect();
        out.sort_unstable();
        out
    }

    /// Number of producer ids tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer id is tracked.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The gate. `h` is a validated header (CRC checked by the caller).
    pub fn check(&self, h: &BatchHeader) -> Result<Admit, GateError> {
        self.check_mode(h, true)
    }

    /// The same gate for a batch replicated from the leader: no coordinator verification
    /// (the leader verified it), and a duplicate data batch is an error, since a leader never
    /// sends one. A marker that repeats the last one here is taken: a leader that forgot the
    /// producer id (idle past its expiration) appends a retried marker again, and its log is
    /// the one to follow (the repeat changes nothing).
    pub fn check_replicated(&self, h: &BatchHeader) -> Result<(), GateError> {
        match self.check_mode(h, false)? {
            Admit::Append => Ok(()),
            Admit::Duplicate { .. } if h.is_control() => Ok(()),
            Admit::Duplicate { .. } | Admit::NeedsVerification(_) => Err(GateError::OutOfOrder {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                expected: self
                    .producers
                    .get(&h.producer_id)
                    .and_then(|e| e.batches.back())
                    .map_or(0, |b| increment_sequence(b.last_seq, 1)),
                got: h.base_sequence,
            }),
        }
    }

    #[cfg(test)]
    fn encode_snapshot_is_empty_of_verifications(&self) -> bool {
        let mut out = Vec::new();
        self.encode(&mut out);
        let decoded = ProducerStates::decode(&mut Reader::new(&out), true).expect("decodes");
        decoded.verified.is_empty() && decoded.len() == self.len()
    }

    fn check_mode(&self, h: &BatchHeader, verify: bool) -> Result<Admit, GateError> {
        if !self.fencing || h.producer_id < 0 {
            return Ok(Admit::Append);
        }
        let entry = self.producers.get(&h.producer_id);
        let current = entry.map(|e| e.epoch);
        if h.is_control() {
            // A marker at epoch e fences every epoch below e; an older marker is stale. One
            // that does not follow the last marker is a retry (or a late copy) of one written.
            return match (current, entry.and_then(|e| e.last_marker)) {
                (Some(c), _) if h.producer_epoch < c => {
                    Err(GateError::StaleEpoch { producer_id: h.producer_id, current: c, got: h.producer_epoch })
                }
                (_, Some((last, offset))) if !MarkerId::of(h).follows(last) => {
                    Ok(Admit::Duplicate { base_offset: offset })
                }
                _ => Ok(Admit::Append),
            };
        }
        if let Some(e) = entry {
            if h.producer_epoch == e.epoch {
                let last = h.last_sequence();
                if let Some(b) = e.batches.iter().find(|b| b.first_seq == h.base_sequence && b.last_seq == last) {
                    return Ok(Admit::Duplicate { base_offset: b.base_offset });
                }
            }
            if h.producer_epoch < e.epoch {
                return Err(GateError::StaleEpoch {
                    producer_id: h.producer_id,
                    current: e.epoch,
                    got: h.producer_epoch,
                });
            }
        }
        let verified = self.verified.get(&h.producer_id).copied();
        let covers = verified.is_some_and(|(e, txn)| e == h.producer_epoch && (txn || !h.is_transactional()));
        if verify && !covers {
            return Ok(Admit::NeedsVerification(self.guard(h.producer_id)));
        }
        let expected = match entry {
            Some(e) if e.epoch == h.producer_epoch => match e.batches.back() {
                Some(b) => increment_sequence(b.last_seq, 1),
                // A replicated batch of an epoch this replica holds no batch of (at most a
                // verification from when it led): as for an unknown producer below.
                None if !verify && e.last_marker.is_none() => return Ok(Admit::Append),
                // Same epoch, no data batch yet (only a marker at this epoch): start at 0.
                // (A marker at the epoch of earlier batches keeps them: sequences go on across
                // it, transaction version 1.)
                None => 0,
            },
            // A replicated batch of a producer this replica has no batch of: its log may start
            // past that producer's earlier batches (a replica that started over at the leader's
            // log start, as Kafka's followers do), and the leader checked the sequence. What it
            // appends now starts this replica's record of the producer. Epochs are still checked
            // above for every producer it knows.
            None if !verify => return Ok(Admit::Append),
            None if h.base_sequence != 0 => {
                return Err(GateError::UnknownProducer { producer_id: h.producer_id, got: h.base_sequence })
            }
            _ => 0,
        };
        if h.base_sequence != expected {
            return Err(GateError::OutOfOrder {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                expected,
                got: h.base_sequence,
            });
        }
        Ok(Admit::Append)
    }

    /// The expiry sweep, run every so often: a producer id first found idle (nothing appended
    /// since the last sweep) starts its idle clock at `now_ms`; one idle for `expiration_ms` is
    /// forgotten, with its verification, unless `keep` says otherwise (an open transaction
    /// here). Returns how many were forgotten.
    ///
    /// The fence holds across it: a producer id this table does not know has every write
    /// checked with the coordinator first ([`Admit::NeedsVerification`]), which refuses an
    /// epoch older than the current one, however long ago this partition saw its fence.
    ///
    /// A verification for writes outside transactions lasts two sweeps at most: a producer
    /// writing so is then checked with the coordinator again, which is how the coordinator sees
    /// it is alive (it expires transactional ids it hears nothing from). A transactional one
    /// ends with its transaction's marker anyway.
    pub fn expire(&mut self, now_ms: u64, expiration_ms: u64, keep: impl Fn(i64) -> bool) -> usize {
        let aged = std::mem::take(&mut self.aging);
        self.verified.retain(|id, (_, txn)| *txn || !aged.contains(id));
        self.aging = self.verified.iter().filter(|(_, (_, txn))| !txn).map(|(id, _)| *id).collect();
        let before = self.producers.len();
        let mut gone = Vec::new();
        for (id, e) in self.producers.iter_mut() {
            match e.idle_since_ms {
                _ if keep(*id) => e.idle_since_ms = None,
                None => e.idle_since_ms = Some(now_ms),
                Some(since) if now_ms.saturating_sub(since) >= expiration_ms => gone.push(*id),
                Some(_) => {}
            }
        }
        for id in gone {
            self.producers.remove(&id);
            self.verified.remove(&id);
        }
        before - self.producers.len()
    }

    /// A retry of `producer_id`'s batch or marker was answered as a duplicate: it is not idle.
    pub fn touch(&mut self, producer_id: i64) {
        if let Some(e) = self.producers.get_mut(&producer_id) {
            e.idle_since_ms = None;
        }
    }

    /// What the table holds for `producer_id`, to put back with [`ProducerStates::restore`]
    /// if batches recorded after this are not written after all.
    pub fn save(&self, producer_id: i64) -> SavedProducer {
        SavedProducer {
            producer_id,
            entry: self.producers.get(&producer_id).cloned(),
            verified: self.verified.get(&producer_id).copied(),
        }
    }

    /// Put back what [`ProducerStates::save`] saw.
    pub fn restore(&mut self, saved: SavedProducer) {
        match saved.verified {
            Some(v) => self.verified.insert(saved.producer_id, v),
            None => self.verified.remove(&saved.producer_id),
        };
        match saved.entry {
            Some(entry) => {
                self.producers.insert(saved.producer_id, entry);
            }
            None => {
                self.producers.remove(&saved.producer_id);
            }
        }
    }

    /// Record an appended batch (after [`ProducerStates::check`] said `Append`, or while
    /// replaying the log on recovery). `h.base_offset` must be the assigned offset.
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        let e = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry { epoch: h.producer_epoch, ..Default::default() });
        e.idle_since_ms = None;
        if h.producer_epoch > e.epoch {
            e.epoch = h.producer_epoch;
            e.batches.clear();
            // A verification holds for its own epoch only.
            if self.verified.get(&h.producer_id).is_some_and(|(v, _)| *v != h.producer_epoch) {
                self.verified.remove(&h.producer_id);
            }
        } else if h.producer_epoch < e.epoch {
            // Only with the gate off: the log holds a zombie's batch; the epoch stays.
            return;
        }
        if h.is_control() {
            // A marker ends the producer's transaction here. At a new epoch (cleared above) the
            // next data batch starts at sequence 0; at the same epoch (transaction version 1)
            // sequences go on, as in Kafka. Either way the next transactional write is verified
            // with the coordinator again: the transaction a verification spoke of is over.
            e.last_marker = Some((MarkerId::of(h), h.base_offset));
            self.verified.remove(&h.producer_id);
            return;
        }
        if e.batches.len() == BATCHES_CACHED {
            e.batches.pop_front();
        }
        e.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
        });
    }

    /// Append this table to a snapshot: per producer id (ascending), its epoch, last marker
    /// and cached batches. Entries that only hold a coordinator verification are left out: they
    /// are not in the log, so a replay would not have them either.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_where(out, |_| true);
    }

    /// [`ProducerStates::encode`] for the producers with nothing at or after `offset` (every
    /// batch and marker they have here is below it): what a replica that starts its log over at
    /// `offset` cannot learn from the batches it is sent from there, and needs so that an
    /// idempotent producer idle since before `offset` is not refused as out of order.
    pub fn encode_before(&self, offset: i64, out: &mut Vec<u8>) {
        self.encode_where(out, |e| {
            e.batches.iter().all(|b| b.base_offset < offset) && e.last_marker.is_none_or(|(_, o)| o < offset)
        });
    }

    fn encode_where(&self, out: &mut Vec<u8>, keep: impl Fn(&ProducerEntry) -> bool) {
        let mut ids: Vec<(&i64, &ProducerEntry)> = self
            .producers
            .iter()
            .filter(|(_, e)| (!e.batches.is_empty() || e.last_marker.is_some()) && keep(e))
            .collect();
        ids.sort_unstable_by_key(|(id, _)| **id);
        out.put_u32(ids.len() as u32);
        for (id, e) in ids {
            out.put_i64(*id);
            out.put_i16(e.epoch);
            match e.last_marker {
                Some((m, offset)) => {
                    out.put_u8(1);
                    out.put_i16(m.epoch);
                    out.put_i32(m.sequence);
                    out.put_i64(offset);
                }
                None => out.put_u8(0),
            }
            out.put_u8(e.batches.len() as u8);
            for b in &e.batches {
                out.put_i32(b.first_seq);
                out.put_i32(b.last_seq);
                out.put_i64(b.base_offset);
            }
        }
    }

    /// Read a table written by [`ProducerStates::encode`].
    pub fn decode(r: &mut Reader<'_>, fencing: bool) -> Result<Self, Malformed> {
        Self::decode_version(r, fencing, true)
    }

    /// [`ProducerStates::decode`] for a table written with marker sequences (`marker_sequences`)
    /// or before they were kept (the markers then read as sequence -1).
    pub fn decode_version(r: &mut Reader<'_>, fencing: bool, marker_sequences: bool) -> Result<Self, Malformed> {
        const ENTRY_BYTES_MIN: usize = 8 + 2 + 1 + 1;
        let n = r.count(ENTRY_BYTES_MIN)?;
        let mut producers = HashMap::with_capacity(n);
        for _ in 0..n {
            let id = r.i64()?;
            let epoch = r.i16()?;
            let last_marker = match r.u8()? {
                0 => None,
                1 => {
                    let epoch = r.i16()?;
                    let sequence = if marker_sequences { r.i32()? } else { -1 };
                    Some((MarkerId { epoch, sequence }, r.i64()?))
                }
                _ => return Err(Malformed("bad marker flag")),
            };
            let cached = r.u8()? as usize;
            if cached > BATCHES_CACHED {
                return Err(Malformed("more cached batches than a producer keeps"));
            }
            let mut batches = VecDeque::with_capacity(cached);
            for _ in 0..cached {
                batches.push_back(BatchMeta { first_seq: r.i32()?, last_seq: r.i32()?, base_offset: r.i64()? });
            }
            let entry = ProducerEntry { epoch, batches, last_marker, idle_since_ms: None };
            if producers.insert(id, entry).is_some() {
                return Err(Malformed("a producer id twice"));
            }
        }
        Ok(ProducerStates { producers, verified: HashMap::new(), aging: HashSet::new(), leadership: -1, fencing })
    }

    /// The coordinator confirmed that `(producer_id, epoch)` is registered for this partition
    /// (`transactional`: for transactional writes), answering a verification the gate asked for
    /// under `guard`. Ignored if the partition already holds a newer epoch for it (the batch is
    /// then refused as stale). Returns false, recording nothing, if a marker for the producer
    /// was appended since the gate asked (the transaction the answer confirmed is over), or if
    /// the leadership changed since (a fence may have passed this replica by).
    pub fn mark_verified(
        &mut self,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        guard: VerificationGuard,
    ) -> bool {
        let entry = self.producers.get(&producer_id);
        if entry.is_some_and(|e| epoch < e.epoch) {
            return true;
        }
        if entry.and_then(|e| e.last_marker).map(|(m, _)| m) != guard.marker || guard.leadership != self.leadership {
            return false;
        }
        let txn = transactional || self.verified.get(&producer_id).is_some_and(|(v, t)| *v == epoch && *t);
        self.verified.insert(producer_id, (epoch, txn));
        // A fresh verification lasts its two sweeps again.
        self.aging.remove(&producer_id);
        true
    }

    /// The guard a verification of `producer_id` asked now would carry (for tests and the
    /// simulator, which confirm without asking the gate first).
    pub fn guard(&self, producer_id: i64) -> VerificationGuard {
        VerificationGuard {
            marker: self.producers.get(&producer_id).and_then(|e| e.last_marker).map(|(m, _)| m),
            leadership: self.leadership,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protocol::batch::{build_batch, build_marker, MarkerKind, ProducerStamp};

    fn header(pid: i64, epoch: i16, seq: i32, n: usize, offset: i64) -> BatchHeader {
        let values: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("v{i}"))).collect();
        let b = build_batch(
            ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
            false,
            0,
            &values,
        );
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = offset;
        h
    }

    fn marker(pid: i64, epoch: i16, offset: i64) -> BatchHeader {
        marker_seq(pid, epoch, -1, offset)
    }

    /// A marker with the coordinator's marker sequence `seq`.
    fn marker_seq(pid: i64, epoch: i16, seq: i32, offset: i64) -> BatchHeader {
        let b = build_marker(pid, epoch, seq, MarkerKind::Abort, 0, 0);
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = offset;
        h
    }

    /// Check, verify if asked, and record: what a leader does with an accepted batch.
    fn admit(s: &mut ProducerStates, h: &BatchHeader) -> Result<Admit, GateError> {
        let mut a = s.check(h)?;
        if let Admit::NeedsVerification(guard) = a {
            assert!(s.mark_verified(h.producer_id, h.producer_epoch, h.is_transactional(), guard));
            a = s.check(h)?;
        }
        if a == Admit::Append {
            s.record(h);
        }
        Ok(a)
    }

    #[test]
    fn first_write_of_an_epoch_needs_verification() {
        let s = ProducerStates::new(true);
        assert!(matches!(s.check(&header(1, 0, 0, 1, 0)), Ok(Admit::NeedsVerification(_))));
    }

    #[test]
    fn same_epoch_writes_many_times_in_sequence() {
        let mut s = ProducerStates::new(true);
        for i in 0..20 {
            assert_eq!(admit(&mut s, &header(1, 3, i * 2, 2, i as i64 * 2)), Ok(Admit::Append));
        }
    }

    #[test]
    fn older_epoch_is_refused_with_the_current_one() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 4, 0, 1, 0)).unwrap();
        assert_eq!(
            admit(&mut s, &header(1, 3, 1, 1, 1)),
            Err(GateError::StaleEpoch { producer_id: 1, current: 4, got: 3 })
        );
    }

    #[test]
    fn marker_at_new_epoch_fences_older_epochs_even_without_data() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 0, 0, 1, 0)).unwrap();
        assert_eq!(admit(&mut s, &marker(1, 1, 1)), Ok(Admit::Append));
        assert!(matches!(admit(&mut s, &header(1, 0, 1, 1, 2)), Err(GateError::StaleEpoch { current: 1, .. })));
        // A stale marker is refused too.
        assert!(matches!(s.check(&marker(1, 0, 2)), Err(GateError::StaleEpoch { .. })));
        // The new epoch writes from sequence 0.
        assert_eq!(admit(&mut s, &header(1, 1, 0, 1, 2)), Ok(Admit::Append));
    }

    #[test]
    fn a_retried_marker_is_a_duplicate_not_a_second_marker() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 0, 0, 1, 0)).unwrap();
        assert_eq!(admit(&mut s, &marker(1, 1, 1)), Ok(Admit::Append));
        assert_eq!(s.check(&marker(1, 1, 7)), Ok(Admit::Duplicate { base_offset: 1 }));
        assert_eq!(s.check(&marker(1, 2, 7)), Ok(Admit::Append), "the next bump's marker is new");
    }

    #[test]
    fn duplicate_of_a_recent_batch_returns_its_original_offset() {
        let mut s = ProducerStates::new(true);
        for i in 0..6 {
            admit(&mut s, &header(1, 0, i, 1, 100 + i as i64)).unwrap();
        }
        assert_eq!(s.check(&header(1, 0, 5, 1, 999)), Ok(Admit::Duplicate { base_offset: 105 }));
        assert_eq!(s.check(&header(1, 0, 1, 1, 999)), Ok(Admit::Duplicate { base_offset: 101 }));
        // Older than the last five: not a duplicate we can prove, so out of order.
        assert!(matches!(s.check(&header(1, 0, 0, 1, 999)), Err(GateError::OutOfOrder { expected: 6, .. })));
    }

    #[test]
    fn gaps_and_new_epochs_not_starting_at_zero_are_out_of_order() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 0, 0, 1, 0)).unwrap();
        assert!(matches!(
            admit(&mut s, &header(1, 0, 2, 1, 1)),
            Err(GateError::OutOfOrder { expected: 1, got: 2, .. })
        ));
        assert!(matches!(admit(&mut s, &header(1, 1, 5, 1, 1)), Err(GateError::OutOfOrder { expected: 0, .. })));
        // A producer id this partition holds nothing of must start a sequence: Kafka's
        // UNKNOWN_PRODUCER_ID, which clients answer by starting over at 0.
        assert!(matches!(admit(&mut s, &header(2, 0, 7, 1, 1)), Err(GateError::UnknownProducer { got: 7, .. })));
    }

    #[test]
    fn verification_for_an_older_epoch_does_not_reopen_it() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &marker(1, 5, 0)).unwrap();
        s.mark_verified(1, 4, false, s.guard(1));
        assert!(matches!(s.check(&header(1, 4, 0, 1, 1)), Err(GateError::StaleEpoch { current: 5, .. })));
    }

    /// Issue 28: a verification ends with the leadership that made it, and an answer to one
    /// asked under an earlier leadership does not count.
    #[test]
    fn verifications_end_with_the_leadership_that_made_them() {
        let mut s = ProducerStates::new(true);
        s.begin_leadership(1);
        let first = header(1, 0, 0, 1, 0);
        assert!(matches!(s.check(&first), Ok(Admit::NeedsVerification(_))));
        assert!(s.mark_verified(1, 0, true, s.guard(1)));
        s.record(&first);
        let second = header(1, 0, 1, 1, 1);
        assert!(matches!(s.check(&second), Ok(Admit::Append)), "verified under leadership 1");
        let asked = s.guard(1);
        s.begin_leadership(3);
        assert_eq!(s.verified_count(), 0);
        assert!(matches!(s.check(&second), Ok(Admit::NeedsVerification(_))), "checked again under leadership 3");
        assert!(!s.mark_verified(1, 0, true, asked), "an answer asked under leadership 1 does not count");
        assert!(matches!(s.check(&second), Ok(Admit::NeedsVerification(_))));
        assert!(s.mark_verified(1, 0, true, s.guard(1)));
        assert!(matches!(s.check(&second), Ok(Admit::Append)));
    }

    #[test]
    fn replaying_records_rebuilds_the_fence() {
        let mut live = ProducerStates::new(true);
        let batches = [header(1, 0, 0, 1, 0), marker(1, 1, 1), header(1, 1, 0, 2, 2)];
        for b in &batches {
            admit(&mut live, b).unwrap();
        }
        let mut replayed = ProducerStates::new(true);
        for b in &batches {
            replayed.record(b);
        }
        assert_eq!(replayed.epoch_of(1), Some(1));
        assert!(matches!(replayed.check(&header(1, 0, 1, 1, 4)), Err(GateError::StaleEpoch { .. })));
        assert_eq!(replayed.check(&header(1, 1, 0, 2, 9)), Ok(Admit::Duplicate { base_offset: 2 }));
        // Verification is volatile: a replayed table asks the coordinator again.
        assert!(matches!(replayed.check(&header(1, 1, 2, 1, 4)), Ok(Admit::NeedsVerification(_))));
    }

    #[test]
    fn a_non_transactional_verification_does_not_cover_transactional_writes() {
        let mut s = ProducerStates::new(true);
        let plain = header(1, 0, 0, 1, 0);
        s.mark_verified(1, 0, false, s.guard(1));
        assert_eq!(s.check(&plain), Ok(Admit::Append));
        let values = [Bytes::from_static(b"t")];
        let txn = build_batch(ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: 0 }, true, 0, &values);
        let txn = BatchHeader::parse(&txn).unwrap();
        assert!(
            matches!(s.check(&txn), Ok(Admit::NeedsVerification(_))),
            "the transaction must be opened at the coordinator"
        );
        s.mark_verified(1, 0, true, s.guard(1));
        assert_eq!(s.check(&txn), Ok(Admit::Append));
        assert_eq!(s.check(&plain), Ok(Admit::Append), "a transactional verification covers both");
    }

    #[test]
    fn replicated_batches_pass_the_same_epoch_and_sequence_checks() {
        let mut s = ProducerStates::new(true);
        assert_eq!(s.check_replicated(&header(1, 2, 0, 1, 0)), Ok(()), "no verification on a follower");
        s.record(&header(1, 2, 0, 1, 0));
        s.record(&marker(1, 3, 1));
        assert!(matches!(s.check_replicated(&header(1, 2, 1, 1, 2)), Err(GateError::StaleEpoch { current: 3, .. })));
        assert!(matches!(s.check_replicated(&header(1, 3, 4, 1, 2)), Err(GateError::OutOfOrder { .. })));
        assert_eq!(s.check_replicated(&header(1, 3, 0, 1, 2)), Ok(()));
        s.record(&header(1, 3, 0, 1, 2));
        assert!(s.check_replicated(&header(1, 3, 0, 1, 3)).is_err(), "a leader never replicates a duplicate");
    }

    /// Found by the simulator: a verification that reached a replica whose disk had been
    /// replaced (empty log) counted as the producer's epoch there, and the leader's older
    /// batches were then refused as stale: the replica never caught up.
    #[test]
    fn a_verification_does_not_fence_replicated_batches() {
        let mut s = ProducerStates::new(true);
        s.mark_verified(1, 10, true, s.guard(1));
        assert_eq!(s.check_replicated(&header(1, 1, 0, 1, 0)), Ok(()), "the log holds nothing of epoch 10");
        s.record(&header(1, 1, 0, 1, 0));
        assert_eq!(s.epoch_of(1), Some(1));
        assert!(s.encode_snapshot_is_empty_of_verifications());
    }

    #[test]
    fn with_fencing_off_the_zombie_gets_through() {
        let mut s = ProducerStates::new(false);
        s.record(&header(1, 4, 0, 1, 0));
        assert_eq!(s.check(&header(1, 3, 9, 1, 1)), Ok(Admit::Append));
    }

    #[test]
    fn a_follower_takes_an_unknown_producer_mid_stream_the_leader_does_not() {
        let s = ProducerStates::new(true);
        let mid = header(7, 2, 40, 1, 100);
        assert_eq!(s.check_replicated(&mid), Ok(()), "a replica that started over at the leader's log start");
        let mut leader = ProducerStates::new(true);
        leader.mark_verified(7, 2, false, leader.guard(7));
        assert!(matches!(leader.check(&mid), Err(GateError::UnknownProducer { producer_id: 7, got: 40 })));
        let mut known = ProducerStates::new(true);
        known.record(&header(7, 2, 0, 1, 0));
        assert!(known.check_replicated(&mid).is_err(), "a known producer's sequence is still checked");
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize, offset: i64) -> BatchHeader {
        let values: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("t{i}"))).collect();
        let b = build_batch(
            ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
            true,
            0,
            &values,
        );
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = offset;
        h
    }

    /// Transaction version 1 (Kafka clients): transactions end without a bump, so several
    /// markers share an epoch; sequences go on across them, and each transaction's first write
    /// is verified again.
    #[test]
    fn transactions_at_one_epoch_continue_sequences_and_verify_each_transaction() {
        let mut s = ProducerStates::new(true);
        assert_eq!(admit(&mut s, &txn_batch(1, 3, 0, 2, 0)), Ok(Admit::Append));
        assert_eq!(admit(&mut s, &marker_seq(1, 3, 0, 2)), Ok(Admit::Append));
        // The next transaction, same epoch: sequence 2 follows, 0 would be out of order.
        assert!(matches!(s.check(&txn_batch(1, 3, 2, 1, 3)), Ok(Admit::NeedsVerification(_))), "verified again");
        assert!(matches!(admit(&mut s, &txn_batch(1, 3, 0, 1, 3)), Err(GateError::OutOfOrder { expected: 2, .. })));
        assert_eq!(admit(&mut s, &txn_batch(1, 3, 2, 1, 3)), Ok(Admit::Append));
        // A retried marker of the first transaction is a duplicate, not the second's end.
        assert_eq!(s.check(&marker_seq(1, 3, 0, 9)), Ok(Admit::Duplicate { base_offset: 2 }));
        assert_eq!(admit(&mut s, &marker_seq(1, 3, 1, 4)), Ok(Admit::Append));
        assert_eq!(
            s.check(&marker_seq(1, 3, 0, 9)),
            Ok(Admit::Duplicate { base_offset: 4 }),
            "a late copy of an older one"
        );
        assert_eq!(s.check(&marker_seq(1, 3, 1, 9)), Ok(Admit::Duplicate { base_offset: 4 }));
        // A bump's marker follows whatever its sequence; the new epoch starts at 0.
        assert_eq!(admit(&mut s, &marker_seq(1, 4, 2, 5)), Ok(Admit::Append));
        assert_eq!(admit(&mut s, &txn_batch(1, 4, 0, 1, 6)), Ok(Admit::Append));
        assert!(matches!(s.check(&txn_batch(1, 3, 3, 1, 7)), Err(GateError::StaleEpoch { current: 4, .. })));
    }

    #[test]
    fn marker_sequences_wrap_and_markers_without_one_are_retries() {
        let at = |epoch, sequence| MarkerId { epoch, sequence };
        assert!(at(2, 0).follows(at(1, 5)));
        assert!(!at(1, 5).follows(at(2, 0)));
        assert!(at(1, 6).follows(at(1, 5)));
        assert!(!at(1, 5).follows(at(1, 5)));
        assert!(!at(1, 4).follows(at(1, 5)));
        assert!(at(1, 0).follows(at(1, i32::MAX)), "wraps as record sequences do");
        assert!(!at(1, i32::MAX).follows(at(1, 0)));
        assert!(!at(1, -1).follows(at(1, -1)), "one marker per epoch before sequences");
        assert!(at(1, 0).follows(at(1, -1)));
        assert!(!at(1, -1).follows(at(1, 7)));
    }

    /// A marker that lands while the coordinator is asked ends the transaction the answer is
    /// about: the answer does not open the partition to the write.
    #[test]
    fn a_verification_answer_after_a_marker_does_not_count() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &txn_batch(1, 0, 0, 1, 0)).unwrap();
        admit(&mut s, &marker_seq(1, 0, 0, 1)).unwrap();
        let late = txn_batch(1, 0, 1, 1, 2);
        let Ok(Admit::NeedsVerification(guard)) = s.check(&late) else { panic!("needs verification") };
        admit(&mut s, &marker_seq(1, 0, 1, 2)).unwrap();
        assert!(!s.mark_verified(1, 0, true, guard), "the transaction it was verified for ended");
        assert!(matches!(s.check(&late), Ok(Admit::NeedsVerification(_))));
        // At a newer epoch the answer is moot: the batch is refused as stale instead.
        let Ok(Admit::NeedsVerification(guard)) = s.check(&late) else { panic!("needs verification") };
        admit(&mut s, &marker_seq(1, 1, 2, 3)).unwrap();
        assert!(s.mark_verified(1, 0, true, guard));
        assert!(matches!(s.check(&late), Err(GateError::StaleEpoch { current: 1, .. })));
    }

    /// Issue 27, item 4: an idle producer id is forgotten; the zombie of a fenced epoch that
    /// wakes after it is sent to the coordinator again instead of being let in, and an open
    /// transaction keeps its producer.
    #[test]
    fn an_idle_producer_id_expires_and_its_next_write_is_verified_again() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 0, 0, 3, 0)).unwrap();
        // The fence: a marker at epoch 1 (a new instance initialised).
        s.record(&marker(1, 1, 3));
        admit(&mut s, &header(2, 0, 0, 1, 4)).unwrap();
        assert_eq!(s.expire(0, 1_000, |_| false), 0, "the first sweep starts the clocks");
        assert_eq!(s.expire(999, 1_000, |id| id == 2), 0);
        assert_eq!(s.expire(1_000, 1_000, |id| id == 2), 1, "producer 1 idle since 0; 2 kept");
        assert_eq!(s.epoch_of(1), None);
        assert_eq!(s.epoch_of(2), Some(0));
        // The zombie at epoch 0 is no longer refused here: it is checked with the coordinator,
        // which knows the epoch is 1 and refuses it.
        assert!(matches!(s.check(&header(1, 0, 3, 1, 5)), Ok(Admit::NeedsVerification(_))));
        // A write keeps a producer: its clock starts again.
        admit(&mut s, &header(2, 0, 1, 1, 5)).unwrap();
        assert_eq!(s.expire(5_000, 1_000, |_| false), 0);
        assert_eq!(s.expire(6_000, 1_000, |_| false), 1);
        assert!(s.is_empty());
    }

    /// A verification for writes outside transactions is asked again after two sweeps, so the
    /// coordinator hears from a producer that writes so (it forgets ids it hears nothing from);
    /// a transactional one is left to its transaction's marker.
    #[test]
    fn verifications_outside_transactions_are_asked_again_after_two_sweeps() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(1, 0, 0, 1, 0)).unwrap();
        assert!(s.mark_verified(2, 0, true, s.guard(2)));
        s.record(&txn_batch(2, 0, 0, 1, 1));
        let busy = |_| true; // nothing expires here: only the verifications are looked at
        s.expire(0, 1_000, busy);
        assert_eq!(s.check(&header(1, 0, 1, 1, 2)), Ok(Admit::Append), "held through one sweep");
        s.record(&header(1, 0, 1, 1, 2));
        s.expire(10, 1_000, busy);
        assert!(matches!(s.check(&header(1, 0, 2, 1, 3)), Ok(Admit::NeedsVerification(_))), "asked again");
        assert_eq!(s.check(&txn_batch(2, 0, 1, 1, 4)), Ok(Admit::Append), "the transaction's stays");
        // Verified again: good for two more sweeps.
        assert!(s.mark_verified(1, 0, false, s.guard(1)));
        s.expire(20, 1_000, busy);
        assert_eq!(s.check(&header(1, 0, 2, 1, 3)), Ok(Admit::Append));
    }

    /// Found by the simulator: a marker retried while every answer to it was lost kept a
    /// producer id's entry from changing, so it expired and the next retry was appended again;
    /// followers that still knew the marker refused the leader's copy for good. Now a retry
    /// answered as a duplicate keeps the entry alive, and a follower takes a repeated marker.
    #[test]
    fn retries_keep_a_producer_alive_and_followers_take_a_repeated_marker() {
        let mut s = ProducerStates::new(true);
        s.record(&marker_seq(1, 2, 5, 0));
        assert_eq!(s.expire(0, 1_000, |_| false), 0);
        assert!(matches!(s.check(&marker_seq(1, 2, 5, 9)), Ok(Admit::Duplicate { base_offset: 0 })));
        s.touch(1);
        assert_eq!(s.expire(1_500, 1_000, |_| false), 0, "the retry restarted its clock");
        assert_eq!(s.epoch_of(1), Some(2));
        assert_eq!(s.check_replicated(&marker_seq(1, 2, 5, 9)), Ok(()), "the leader's repeat is followed");
        assert!(s.check_replicated(&header(1, 1, 0, 1, 10)).is_err(), "an older epoch still is not");
    }

    /// librdkafka's idempotent producer bumps its own epoch after a sequence gap: same producer
    /// id, epoch + 1, sequence 0.
    #[test]
    fn an_idempotent_producer_may_start_a_higher_epoch_at_sequence_zero() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &header(5, 0, 0, 3, 0)).unwrap();
        assert!(matches!(s.check(&header(5, 1, 0, 1, 3)), Ok(Admit::NeedsVerification(_))));
        assert!(matches!(admit(&mut s, &header(5, 1, 4, 1, 3)), Err(GateError::OutOfOrder { expected: 0, .. })));
        assert_eq!(admit(&mut s, &header(5, 1, 0, 1, 3)), Ok(Admit::Append));
        assert!(matches!(s.check(&header(5, 0, 3, 1, 4)), Err(GateError::StaleEpoch { current: 1, .. })));
    }

    #[test]
    fn snapshots_keep_marker_sequences_and_read_older_ones() {
        let mut s = ProducerStates::new(true);
        admit(&mut s, &txn_batch(1, 0, 0, 1, 0)).unwrap();
        admit(&mut s, &marker_seq(1, 0, 7, 1)).unwrap();
        let mut out = Vec::new();
        s.encode(&mut out);
        let back = ProducerStates::decode(&mut Reader::new(&out), true).unwrap();
        assert_eq!(back.check(&marker_seq(1, 0, 7, 5)), Ok(Admit::Duplicate { base_offset: 1 }));
        assert_eq!(back.check(&marker_seq(1, 0, 8, 5)), Ok(Admit::Append));
        // A table written before marker sequences: (epoch, offset) per marker.
        let mut old = Vec::new();
        old.put_u32(1);
        old.put_i64(1);
        old.put_i16(0);
        old.put_u8(1);
        old.put_i16(0);
        old.put_i64(1);
        old.put_u8(0);
        let back = ProducerStates::decode_version(&mut Reader::new(&old), true, false).unwrap();
        assert_eq!(back.check(&marker(1, 0, 5)), Ok(Admit::Duplicate { base_offset: 1 }));
        assert_eq!(back.check(&marker_seq(1, 0, 0, 5)), Ok(Admit::Append), "the first counted marker follows");
    }
}
