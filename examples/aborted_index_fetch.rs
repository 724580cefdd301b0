//! What a read_committed fetch costs with a million aborted transactions in a partition's
//! aborted-transaction index (issue 27, item 4). The index is kept in marker order with the
//! smallest later first offset beside each entry, so a fetch reads the entries overlapping its
//! records and stops: its time should not grow with the index.
//!
//! `cargo run --release --example aborted_index_fetch [-- TRANSACTIONS]` builds one replica in a
//! temporary directory: as a follower it takes TRANSACTIONS (default 1,000,000) transactions of
//! one producer id, each a transactional batch and its abort marker, then leads; it then times
//! read_committed fetches of 64 KiB at the log's start, middle and end, and the same fetches
//! read_uncommitted (no index search), and prints the medians. docs/BENCHMARKS.md records the
//! result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::log::LogConfig;
use broker::partition::Partition;
use broker::storage::OsStorage;
use bytes::Bytes;
use protocol::batch::ProducerStamp;
use protocol::batch::{build_batch, build_marker, set_base_offset, set_partition_leader_epoch, MarkerKind};
use protocol::ReplicateRequest;

const PRODUCER: i64 = 7;
const BATCHES_PER_REQUEST: usize = 20_000;
const FETCHES: usize = 200;

fn at(b: Bytes, offset: i64) -> Vec<u8> {
    let mut m = b.to_vec();
    set_base_offset(&mut m, offset);
    set_partition_leader_epoch(&mut m, 1);
    m
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let transactions: i64 = std::env::args().nth(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let p = Partition::open_with(Arc::new(OsStorage), dir.path(), LogConfig::default(), "t", 0, 2, true)?;
    p.learn(1, 1, 0, &[1, 2], &[1, 2], 0);
    let started = Instant::now();
    let (mut offset, mut records) = (0i64, Vec::new());
    for txn in 0..transactions {
        let stamp = ProducerStamp { producer_id: PRODUCER, producer_epoch: 0, base_sequence: txn as i32 };
        records.extend(at(build_batch(stamp, true, 1_000, &[Bytes::from_static(b"aborted")]), offset));
        records.extend(at(build_marker(PRODUCER, 0, txn as i32, MarkerKind::Abort, 0, 1_000), offset + 1));
        offset += 2;
        if records.len() >= BATCHES_PER_REQUEST * 70 || txn == transactions - 1 {
            let from = p.progress().0;
            let req = ReplicateRequest {
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 1,
                leader_id: 1,
                from_offset: from,
                prev_epoch: if from == 0 { -1 } else { 1 },
                high_watermark: offset,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: Bytes::new(),
                records: Bytes::from(std::mem::take(&mut records)).into(),
            };
            p.apply_replicated(&req, true)?;
        }
    }
    p.sync_all()?;
    p.learn(2, 2, 1, &[2], &[2], 0);
    let (end, hw) = p.progress();
    println!(
        "{transactions} aborted transactions ({end} batches) written in {:.1} s; high watermark {hw}",
        started.elapsed().as_secs_f64()
    );
    for (name, at) in [("start", 0), ("middle", end / 2), ("end", end - 2_000)] {
        let mut times = [Vec::new(), Vec::new()];
        let mut aborted = 0;
        for _ in 0..FETCHES {
            for (i, isolation) in [1i8, 0].into_iter().enumerate() {
                let t = Instant::now();
                let f = p.fetch(at, 64 * 1024, 2, isolation)?;
                times[i].push(t.elapsed());
                if isolation == 1 {
                    aborted = f.aborted.len();
                }
            }
        }
        let [committed, uncommitted] = times;
        println!(
            "fetch at the {name:<6} (offset {at:>7}): read_committed median {:>7.1} µs ({aborted} aborted transactions \
             in the answer), read_uncommitted {:>7.1} µs",
            median(committed),
            median(uncommitted)
        );
    }
    Ok(())
}
