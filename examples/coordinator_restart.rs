//! Measures how long a coordinator takes to restart after a million inits.
//!
//! `cargo run --release --example coordinator_restart [-- INITS]` grants INITS (default
//! 1,000,000) producer epochs through the real producer table and journal (10,000 transactional
//! ids, each granted durably, with snapshots every 100,000 entries as the coordinator takes
//! them), then times `coordinator::recover`: opening the journal, reading the newest snapshot and
//! the journal after it, and rebuilding the table. It checks that the recovered table would grant
//! every id a higher epoch than any it granted. docs/BENCHMARKS.md records the result.

use std::time::Instant;

use coordinator::entry::Entry;
use coordinator::table::InitDecision;
use coordinator::{recover, CoordinatorConfig};

const TRANSACTIONAL_IDS: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inits: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1_000_000);
    let dir = tempfile::tempdir()?;
    let config = CoordinatorConfig::new(dir.path());
    let every = config.snapshot_every_entries;
    let started = Instant::now();
    let mut highest = vec![-1i16; TRANSACTIONAL_IDS as usize];
    {
        let mut r = recover(&config)?;
        let mut since = 0;
        let mut pending = Vec::new();
        for i in 0..inits {
            let tid = i % TRANSACTIONAL_IDS;
            let d = r.table.handle_init(Some(&format!("tid-{tid}")), 60_000, None);
            let InitDecision::Grant { epoch, entries, .. } = d else {
                return Err(format!("init {i} refused: {d:?}").into());
            };
            highest[tid as usize] = epoch;
            since += entries.len() as u64;
            pending.push(r.journal.append(entries.iter().map(Entry::encode).collect()));
            if since >= every {
                let mut snapshot = r.table.snapshot();
                snapshot.extend(r.cluster.snapshot());
                pending.push(r.journal.rotate(snapshot.iter().map(Entry::encode).collect()));
                since = 0;
            }
            if pending.len() >= 4096 {
                for rx in pending.drain(..) {
                    rx.blocking_recv()??;
                }
            }
        }
        for rx in pending.drain(..) {
            rx.blocking_recv()??;
        }
        println!("granted {inits} epochs in {:.2?} ({} journal flushes)", started.elapsed(), r.journal.syncs());
    }
    let t = Instant::now();
    let r = recover(&config)?;
    let took = t.elapsed();
    println!("restart: replayed {} entries (newest snapshot plus the journal after it) in {took:.2?}", r.replayed);
    let summaries = r.table.describe(0);
    let ok = summaries.len() as u64 == TRANSACTIONAL_IDS.min(inits)
        && summaries.iter().all(|s| {
            let tid: usize = s.transactional_id.trim_start_matches("tid-").parse().unwrap_or(usize::MAX);
            highest.get(tid) == Some(&s.epoch)
        });
    println!("every transactional id recovered at the last epoch granted: {ok}");
    if !ok {
        return Err("recovered state differs".into());
    }
    Ok(())
}
