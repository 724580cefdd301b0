//! Transaction bookkeeping of one partition replica: plain rules, no I/O.
//!
//! Open transactions (producer id -> first offset of its transactional batches here) give the
//! last stable offset; transactions closed by an abort marker are kept as the aborted-transaction
//! index that read_committed consumers skip. Both are derived from the batches of the log (data
//! batches carry the transactional bit, markers are control batches), so they are kept with the
//! log by construction and rebuilt by the scan when it opens or after a truncation.

use std::collections::BTreeMap;

use bytes::BufMut;

use protocol::batch::{BatchHeader, MarkerKind};
use protocol::AbortedTxn;

use crate::snapshot::{Malformed, Reader};

/// One aborted transaction on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of its transactional batches here.
    pub first_offset: i64,
    /// Offset of its abort marker.
    pub marker_offset: i64,
}

/// One producer id's open transaction and the aborted list's length as they were
/// ([`TxnIndex::save`]).
#[derive(Debug, Clone, Copy)]
pub struct SavedTxn {
    producer_id: i64,
    open: Option<i64>,
    aborted_len: usize,
}

/// Open and aborted transactions of a partition.
///
/// The aborted ones are in marker order; beside each, the smallest first offset of it and every
/// later one (`first_min`), so a fetch finds the aborted transactions overlapping its records
/// without reading the whole list: it starts at the first marker at or after its start (a
/// binary search) and stops where no later transaction began before its end. What it reads is
/// the transactions it answers, plus those that ended after its end while one that began
/// before its end was still open: never the index's length.
#[derive(Debug, Clone, Default)]
pub struct TxnIndex {
    open: BTreeMap<i64, i64>,
    aborted: Vec<AbortedRange>,
    /// `first_min[i]`: the smallest `first_offset` of `aborted[i..]` (or smaller, after a
    /// [`TxnIndex::restore`]: a bound that only lengthens a search, never cuts it short).
    first_min: Vec<i64>,
}

impl TxnIndex {
    /// An empty index.
    pub fn new() -> Self {
        TxnIndex::default()
    }

    /// Account for an appended batch (`h.base_offset` is its offset; `marker` its marker kind
    /// if it is a control batch).
    pub fn record(&mut self, h: &BatchHeader, marker: Option<MarkerKind>) {
        if h.producer_id < 0 {
            return;
        }
        if h.is_control() {
            if let Some(first_offset) = self.open.remove(&h.producer_id) {
                if marker != Some(MarkerKind::Commit) {
                    self.push_aborted(AbortedRange {
                        producer_id: h.producer_id,
                        first_offset,
                        marker_offset: h.base_offset,
                    });
                }
            }
        } else if h.is_transactional() {
            self.open.entry(h.producer_id).or_insert(h.base_offset);
        }
    }

    fn push_aborted(&mut self, a: AbortedRange) {
        // Lower the minima of the earlier entries down to this one's first offset: the walk
        // stops at the first that is already as low, so it covers only the transactions that
        // ended while this one was open.
        for m in self.first_min.iter_mut().rev() {
            if *m <= a.first_offset {
                break;
            }
            *m = a.first_offset;
        }
        self.aborted.push(a);
        self.first_min.push(a.first_offset);
    }

    /// What the index holds for `producer_id`, to put back with [`TxnIndex::restore`] if
    /// batches recorded after this are not written after all.
    pub fn save(&self, producer_id: i64) -> SavedTxn {
        SavedTxn { producer_id, open: self.open.get(&producer_id).copied(), aborted_len: self.aborted.len() }
    }

    /// Put back what [`TxnIndex::save`] saw. Restores taken in one round go back in reverse
    /// order of their saves.
    pub fn restore(&mut self, saved: SavedTxn) {
        match saved.open {
            Some(first_offset) => {
                self.open.insert(saved.producer_id, first_offset);
            }
            None => {
                self.open.remove(&saved.producer_id);
            }
        }
        self.aborted.truncate(saved.aborted_len);
        self.first_min.truncate(saved.aborted_len);
    }

    /// Forget aborted transactions whose marker is below `offset` (retention deleted them).
    pub fn forget_before(&mut self, offset: i64) {
        let gone = self.aborted.partition_point(|a| a.marker_offset < offset);
        self.aborted.drain(..gone);
        self.first_min.drain(..gone);
    }

    /// Aborted transactions held.
    pub fn aborted_len(&self) -> usize {
        self.aborted.len()
    }

    /// Append the open transactions and the aborted-transaction index to a snapshot.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.open.len() as u32);
        for (pid, first) in &self.open {
            out.put_i64(*pid);
            out.put_i64(*first);
        }
        out.put_u32(self.aborted.len() as u32);
        for a in &self.aborted {
            out.put_i64(a.producer_id);
            out.put_i64(a.first_offset);
            out.put_i64(a.marker_offset);
        }
    }

    /// Read an index written by [`TxnIndex::encode`].
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut open = BTreeMap::new();
        for _ in 0..r.count(16)? {
            open.insert(r.i64()?, r.i64()?);
        }
        let n = r.count(24)?;
        let mut aborted = Vec::with_capacity(n);
        for _ in 0..n {
            aborted.push(AbortedRange { producer_id: r.i64()?, first_offset: r.i64()?, marker_offset: r.i64()? });
        }
        if aborted.windows(2).any(|w| w[0].marker_offset > w[1].marker_offset) {
            return Err(Malformed("aborted transactions out of marker order"));
        }
        let mut first_min = vec![0; aborted.len()];
        let mut min = i64::MAX;
        for (i, a) in aborted.iter().enumerate().rev() {
            min = min.min(a.first_offset);
            first_min[i] = min;
        }
        Ok(TxnIndex { open, aborted, first_min })
    }

    /// First offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.open.values().min().copied()
    }

    /// The first offset of `producer_id`'s open transaction here, if one is open.
    pub fn open_since(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).copied()
    }

    /// The last stable offset: below it no transaction is open, and it never passes `hw`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset().map_or(high_watermark, |f| f.min(high_watermark))
    }

    /// Aborted transactions that overlap offsets `[from, to)`, in marker order.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.marker_offset < from);
        self.aborted[start..]
            .iter()
            .zip(&self.first_min[start..])
            .take_while(|(_, min)| **min < to)
            .filter(|(a, _)| a.first_offset < to)
            .map(|(a, _)| AbortedTxn { producer_id: a.producer_id, first_offset: a.first_offset })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protocol::batch::{build_batch, build_marker, ProducerStamp};

    fn at(b: Bytes, offset: i64) -> BatchHeader {
        let mut h = BatchHeader::parse(&b).unwrap();
        h.base_offset = offset;
        h
    }

    fn data(pid: i64, transactional: bool, offset: i64) -> BatchHeader {
        at(
            build_batch(
                ProducerStamp { producer_id: pid, producer_epoch: 0, base_sequence: 0 },
                transactional,
                0,
                &[Bytes::from_static(b"v")],
            ),
            offset,
        )
    }

    #[test]
    fn open_transactions_hold_back_the_last_stable_offset() {
        let mut x = TxnIndex::new();
        x.record(&data(1, false, 0), None);
        assert_eq!(x.last_stable_offset(1), 1);
        x.record(&data(2, true, 1), None);
        x.record(&data(3, true, 2), None);
        x.record(&data(2, true, 3), None);
        assert_eq!(x.last_stable_offset(4), 1);
        x.record(&at(build_marker(2, 1, -1, MarkerKind::Commit, 0, 0), 4), Some(MarkerKind::Commit));
        assert_eq!(x.last_stable_offset(5), 2);
        x.record(&at(build_marker(3, 1, -1, MarkerKind::Abort, 0, 0), 5), Some(MarkerKind::Abort));
        assert_eq!(x.last_stable_offset(6), 6);
        assert_eq!(x.aborted_between(0, 6), vec![AbortedTxn { producer_id: 3, first_offset: 2 }]);
        assert!(x.aborted_between(6, 9).is_empty());
        assert!(x.aborted_between(0, 2).is_empty(), "the abort starts at 2");
    }

    fn abort(x: &mut TxnIndex, pid: i64, offset: i64) {
        x.record(&at(build_marker(pid, 1, -1, MarkerKind::Abort, 0, 0), offset), Some(MarkerKind::Abort));
    }

    /// The search answers exactly what a scan of the whole list would, interleaved and long
    /// transactions included, after retention and after a decode.
    #[test]
    fn the_bounded_search_answers_as_the_whole_scan_does() {
        let mut x = TxnIndex::new();
        // Producer 1 opens at 0 and stays open across producers 2..=40, each opening and
        // aborting in turn; then 1 aborts; then short ones again.
        x.record(&data(1, true, 0), None);
        let mut offset = 1;
        for pid in 2..=40 {
            x.record(&data(pid, true, offset), None);
            abort(&mut x, pid, offset + 1);
            offset += 2;
        }
        abort(&mut x, 1, offset);
        offset += 1;
        for pid in 41..=60 {
            x.record(&data(pid, true, offset), None);
            abort(&mut x, pid, offset + 1);
            offset += 2;
        }
        let scan = |x: &TxnIndex, from: i64, to: i64| -> Vec<AbortedTxn> {
            x.aborted
                .iter()
                .filter(|a| a.marker_offset >= from && a.first_offset < to)
                .map(|a| AbortedTxn { producer_id: a.producer_id, first_offset: a.first_offset })
                .collect()
        };
        let check = |x: &TxnIndex| {
            for from in 0..=offset {
                for to in from..=offset + 1 {
                    assert_eq!(x.aborted_between(from, to), scan(x, from, to), "[{from}, {to})");
                }
            }
        };
        check(&x);
        assert!(x.aborted_between(5, 6).iter().any(|a| a.producer_id == 1), "the long one overlaps every range");
        x.forget_before(30);
        check(&x);
        let mut out = Vec::new();
        x.encode(&mut out);
        let decoded = TxnIndex::decode(&mut Reader::new(&out)).unwrap();
        check(&decoded);
    }

    #[test]
    fn a_fence_marker_without_an_open_transaction_changes_nothing() {
        let mut x = TxnIndex::new();
        x.record(&at(build_marker(9, 3, -1, MarkerKind::Abort, 0, 0), 0), Some(MarkerKind::Abort));
        assert!(x.aborted_between(0, 10).is_empty());
        assert_eq!(x.last_stable_offset(1), 1);
    }
}
