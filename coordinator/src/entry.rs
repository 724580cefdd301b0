//! The records of the coordinator's journal. Every decision the coordinator makes is one or
//! more entries; state changes only by applying entries, so a replay after a crash rebuilds
//! exactly the state whose replies were sent.

use bytes::{BufMut, Bytes, BytesMut};
use protocol::wire::{Reader, WriteExt};
use protocol::DecodeError;

/// A partition a fence marker must reach, and the epoch the marker carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FenceTarget {
    /// Producer id being fenced.
    pub producer_id: i64,
    /// Epoch of the marker; every older epoch of `producer_id` is fenced by it.
    pub marker_epoch: i16,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A producer id and epoch were granted. `fence` lists the partitions registered under
    /// older epochs, which must all hold a marker at the new epoch before the grant is answered.
    Grant {
        /// Transactional id, none for an idempotent-only producer.
        transactional_id: Option<String>,
        /// Granted producer id.
        producer_id: i64,
        /// Granted epoch.
        epoch: i16,
        /// The (producer id, epoch) presented by the caller whose init made this grant (KIP-360).
        requested_by: Option<(i64, i16)>,
        /// Transaction timeout asked for.
        transaction_timeout_ms: i32,
        /// Markers to write before answering.
        fence: Vec<FenceTarget>,
    },
    /// A partition was registered under a producer's current epoch.
    Register {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Part of a transaction (which this opens, if none is open).
        transactional: bool,
    },
    /// A transaction ended (PrepareCommit / PrepareAbort): the epoch moves to
    /// `(producer_id, epoch)` and `markers` must all be written before it completes.
    EndTxn {
        /// Transactional id.
        transactional_id: String,
        /// Producer id after the end (a new one at epoch exhaustion).
        producer_id: i64,
        /// Epoch after the end (KIP-890: every end bumps it).
        epoch: i16,
        /// The (producer id, epoch) of the transaction that ended.
        prev: (i64, i16),
        /// Commit (true) or abort (false).
        commit: bool,
        /// The coordinator aborted it because it outlived its timeout.
        timed_out: bool,
        /// Markers to write, one per registered partition.
        markers: Vec<FenceTarget>,
    },
    /// Every marker of the grant or transaction end at `epoch` for `transactional_id` is written.
    FenceDone {
        /// Transactional id.
        transactional_id: String,
        /// The grant's epoch.
        epoch: i16,
    },
    /// A partition's leadership changed (or was re-elected) under a new leader epoch.
    LeaderChanged {
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// New leader (-1: none available).
        leader_id: i32,
        /// New leader epoch.
        leader_epoch: i32,
        /// The ISR from this epoch on.
        isr: Vec<i32>,
    },
    /// The leader of `leader_epoch` changed the ISR.
    IsrChanged {
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The leader epoch the change was made under.
        leader_epoch: i32,
        /// The new ISR.
        isr: Vec<i32>,
    },
    /// A topic was created; partition `i` has replicas `replicas[i]`, the first one leading at
    /// leader epoch 0, all in sync.
    TopicCreated {
        /// Topic name.
        name: String,
        /// Replicas per partition, preferred leader first.
        replicas: Vec<Vec<i32>>,
    },
}

const GRANT: i8 = 1;
const REGISTER: i8 = 2;
const FENCE_DONE: i8 = 3;
const TOPIC_CREATED: i8 = 4;
const LEADER_CHANGED: i8 = 5;
const ISR_CHANGED: i8 = 6;
const END_TXN: i8 = 7;

impl Entry {
    /// Encode for the journal.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        match self {
            Entry::Grant { transactional_id, producer_id, epoch, requested_by, transaction_timeout_ms, fence } => {
                b.put_i8(GRANT);
                b.put_nullable_string(transactional_id.as_deref());
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                let (rp, re) = requested_by.unwrap_or((-1, -1));
                b.put_i64(rp);
                b.put_i16(re);
                b.put_i32(*transaction_timeout_ms);
                put_targets(&mut b, fence);
            }
            Entry::Register { producer_id, epoch, topic, partition, transactional } => {
                b.put_i8(REGISTER);
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_bool(*transactional);
            }
            Entry::EndTxn { transactional_id, producer_id, epoch, prev, commit, timed_out, markers } => {
                b.put_i8(END_TXN);
                b.put_string(transactional_id);
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                b.put_i64(prev.0);
                b.put_i16(prev.1);
                b.put_bool(*commit);
                b.put_bool(*timed_out);
                put_targets(&mut b, markers);
            }
            Entry::FenceDone { transactional_id, epoch } => {
                b.put_i8(FENCE_DONE);
                b.put_string(transactional_id);
                b.put_i16(*epoch);
            }
            Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr } => {
                b.put_i8(LEADER_CHANGED);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_i32(*leader_id);
                b.put_i32(*leader_epoch);
                b.put_i32_array(isr);
            }
            Entry::IsrChanged { topic, partition, leader_epoch, isr } => {
                b.put_i8(ISR_CHANGED);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_i32(*leader_epoch);
                b.put_i32_array(isr);
            }
            Entry::TopicCreated { name, replicas } => {
                b.put_i8(TOPIC_CREATED);
                b.put_string(name);
                b.put_i32(replicas.len() as i32);
                for r in replicas {
                    b.put_i32_array(r);
                }
            }
        }
        b.freeze()
    }

    /// Decode one journal payload.
    pub fn decode(payload: Bytes) -> Result<Entry, DecodeError> {
        let mut r = Reader::new(payload);
        let e = match r.i8("tag")? {
            GRANT => {
                let transactional_id = r.nullable_string("transactional_id")?;
                let producer_id = r.i64("producer_id")?;
                let epoch = r.i16("epoch")?;
                let rp = r.i64("requested_producer_id")?;
                let re = r.i16("requested_epoch")?;
                let transaction_timeout_ms = r.i32("transaction_timeout_ms")?;
                let fence = get_targets(&mut r)?;
                Entry::Grant {
                    transactional_id,
                    producer_id,
                    epoch,
                    requested_by: (rp >= 0).then_some((rp, re)),
                    transaction_timeout_ms,
                    fence,
                }
            }
            REGISTER => Entry::Register {
                producer_id: r.i64("producer_id")?,
                epoch: r.i16("epoch")?,
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                transactional: r.bool("transactional")?,
            },
            END_TXN => Entry::EndTxn {
                transactional_id: r.string("transactional_id")?,
                producer_id: r.i64("producer_id")?,
                epoch: r.i16("epoch")?,
                prev: (r.i64("prev_producer_id")?, r.i16("prev_epoch")?),
                commit: r.bool("commit")?,
                timed_out: r.bool("timed_out")?,
                markers: get_targets(&mut r)?,
            },
            FENCE_DONE => Entry::FenceDone { transactional_id: r.string("transactional_id")?, epoch: r.i16("epoch")? },
            TOPIC_CREATED => {
                let name = r.string("name")?;
                let n = r.array_len("replicas", 4)?;
                let mut replicas = Vec::with_capacity(n);
                for _ in 0..n {
                    replicas.push(r.i32_array("replicas")?);
                }
                Entry::TopicCreated { name, replicas }
            }
            LEADER_CHANGED => Entry::LeaderChanged {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_id: r.i32("leader_id")?,
                leader_epoch: r.i32("leader_epoch")?,
                isr: r.i32_array("isr")?,
            },
            ISR_CHANGED => Entry::IsrChanged {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_epoch: r.i32("leader_epoch")?,
                isr: r.i32_array("isr")?,
            },
            tag => return Err(DecodeError::InvalidValue { field: "tag", detail: format!("unknown entry tag {tag}") }),
        };
        r.finish()?;
        Ok(e)
    }
}

fn put_targets(b: &mut BytesMut, targets: &[FenceTarget]) {
    b.put_i32(targets.len() as i32);
    for f in targets {
        b.put_i64(f.producer_id);
        b.put_i16(f.marker_epoch);
        b.put_string(&f.topic);
        b.put_i32(f.partition);
    }
}

fn get_targets(r: &mut Reader) -> Result<Vec<FenceTarget>, DecodeError> {
    let n = r.array_len("targets", 16)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(FenceTarget {
            producer_id: r.i64("producer_id")?,
            marker_epoch: r.i16("marker_epoch")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_roundtrip() {
        let entries = vec![
            Entry::Grant {
                transactional_id: Some("orders".into()),
                producer_id: 3,
                epoch: 4,
                requested_by: Some((3, 3)),
                transaction_timeout_ms: 60_000,
                fence: vec![FenceTarget { producer_id: 3, marker_epoch: 4, topic: "t".into(), partition: 1 }],
            },
            Entry::Grant {
                transactional_id: None,
                producer_id: 9,
                epoch: 0,
                requested_by: None,
                transaction_timeout_ms: 0,
                fence: vec![],
            },
            Entry::Register { producer_id: 3, epoch: 4, topic: "t".into(), partition: 0, transactional: true },
            Entry::EndTxn {
                transactional_id: "orders".into(),
                producer_id: 3,
                epoch: 5,
                prev: (3, 4),
                commit: true,
                timed_out: false,
                markers: vec![FenceTarget { producer_id: 3, marker_epoch: 5, topic: "t".into(), partition: 0 }],
            },
            Entry::FenceDone { transactional_id: "orders".into(), epoch: 4 },
            Entry::TopicCreated { name: "t".into(), replicas: vec![vec![1, 2], vec![2, 1]] },
            Entry::LeaderChanged { topic: "t".into(), partition: 1, leader_id: 2, leader_epoch: 7, isr: vec![2] },
            Entry::IsrChanged { topic: "t".into(), partition: 1, leader_epoch: 7, isr: vec![2, 1] },
        ];
        for e in entries {
            assert_eq!(Entry::decode(e.encode()).unwrap(), e);
        }
    }
}
