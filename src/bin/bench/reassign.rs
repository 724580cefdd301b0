//! `--mode reassign`: what an online partition move costs (issue 32's measurement;
//! docs/BENCHMARKS.md, "Moving a partition").
//!
//! An in-process cluster of four brokers; one partition with two replicas holding `--log-mib`
//! of records (written by an idempotent producer, acks=all, `--record-bytes` x
//! `--batch-records` a batch). The producer then writes for `--duration-ms` (default 5 s): its
//! throughput without a move. Then the partition is moved to the two other brokers (so its
//! leadership moves too) while the producer keeps writing: the time from the request to the
//! move's completion (the new replicas caught up and in sync, the partition on them alone),
//! and the producer's throughput meanwhile. Each batch is acknowledged before the next goes (the
//! producer crate's `send_batch`, which follows the leadership as it moves).

use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::{Admin, ClientConfig, Producer, ProducerConfig};

use super::Args;

/// Bytes written and the time taken.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Written {
    bytes: u64,
    seconds: f64,
    /// The longest a batch waited for its acknowledgement, in ms.
    max_batch_ms: f64,
}

impl Written {
    fn mb_per_s(self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// Write batches of `values` until `stop` says so.
async fn write_until(p: &mut Producer, values: &[Bytes], stop: impl Fn() -> bool) -> Result<Written, String> {
    let batch_bytes: u64 = values.iter().map(|v| v.len() as u64).sum();
    let start = Instant::now();
    let (mut bytes, mut max_batch_ms) = (0, 0f64);
    while !stop() {
        let sent = Instant::now();
        p.send_batch("bench", 0, values).await.map_err(|e| e.to_string())?;
        max_batch_ms = max_batch_ms.max(sent.elapsed().as_secs_f64() * 1e3);
        bytes += batch_bytes;
    }
    Ok(Written { bytes, seconds: start.elapsed().as_secs_f64(), max_batch_ms })
}

pub(super) async fn reassign(args: &Args) -> Result<(), String> {
    let log = broker::log::LogConfig {
        preallocate_bytes: args.preallocate_bytes,
        replication_cache_bytes_max: args.replication_cache_bytes_max,
        ..Default::default()
    };
    let opts = LocalOptions {
        brokers: 4,
        fsync: args.fsync,
        secured: false,
        log,
        replication_inflight_max: args.replication_inflight_max as usize,
        ..Default::default()
    };
    let c = LocalCluster::start(opts).await.map_err(|e| e.to_string())?;
    c.create_topic_replicated("bench", 1, 2).await.map_err(|e| e.to_string())?;
    let mut admin = Admin::new(&c.coordinator_addr, ClientConfig::default());
    let replicas = |d: &protocol::DescribeResponse| {
        d.partitions.iter().find(|p| p.topic == "bench").map(|p| (p.replicas.clone(), p.leader_id))
    };
    let (original, _) = replicas(&admin.describe().await.map_err(|e| e.to_string())?).ok_or("no partition")?;
    let target: Vec<i32> = (1..=4).filter(|b| !original.contains(b)).collect();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await.map_err(|e| e.to_string())?;
    let values: Vec<Bytes> = (0..args.batch_records).map(|_| Bytes::from(vec![b'x'; args.record_bytes])).collect();

    let fill_bytes = args.log_mib << 20;
    let batch_bytes: u64 = values.iter().map(|v| v.len() as u64).sum();
    let mut filled = 0;
    while filled < fill_bytes {
        p.send_batch("bench", 0, &values).await.map_err(|e| e.to_string())?;
        filled += batch_bytes;
    }
    let window = Duration::from_millis(if args.duration_ms > 0 { args.duration_ms } else { 5_000 });
    let started = Instant::now();
    let before = write_until(&mut p, &values, || started.elapsed() >= window).await?;

    let done = Cell::new(false);
    let move_started = Instant::now();
    let mover = async {
        let result = async {
            admin.reassign("bench", 0, Some(target.clone())).await.map_err(|e| e.to_string())?;
            let asked = Some(vec![("bench".to_string(), vec![0])]);
            while !admin.reassignments(asked.clone()).await.map_err(|e| e.to_string())?.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok::<Duration, String>(move_started.elapsed())
        }
        .await;
        done.set(true);
        result
    };
    let (moved, during) = futures::join!(mover, write_until(&mut p, &values, || done.get()));
    let (moved, during) = (moved?, during?);
    let (after, leader) = replicas(&admin.describe().await.map_err(|e| e.to_string())?).ok_or("no partition")?;
    if after != target {
        return Err(format!("the move completed with replicas {after:?}, not {target:?}"));
    }
    c.shutdown().await;
    if args.json {
        let value = serde_json::json!({
            "config": {
                "log_mib": args.log_mib, "record_bytes": args.record_bytes, "batch_records": args.batch_records,
                "fsync": format!("{:?}", args.fsync), "replication_inflight_max": args.replication_inflight_max,
            },
            "from": original, "to": target, "leader_after": leader,
            "move_seconds": moved.as_secs_f64(),
            "before": before, "during": during,
            "mb_per_s_before": before.mb_per_s(), "mb_per_s_during": during.mb_per_s(),
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("json serialises"));
    } else {
        println!(
            "moving a partition of {} MiB from {original:?} to {target:?} (leader after: {leader}), records of {} bytes, {} per batch, acks=all, fsync={:?}",
            args.log_mib, args.record_bytes, args.batch_records, args.fsync
        );
        println!("move: {:.2} s (request to completion)", moved.as_secs_f64());
        println!(
            "produce throughput: {:.1} MB/s before the move ({:.1} s), {:.1} MB/s during it ({:.0}%); longest wait for a batch's acknowledgement: {:.0} ms before, {:.0} ms during",
            before.mb_per_s(),
            before.seconds,
            during.mb_per_s(),
            100.0 * during.mb_per_s() / before.mb_per_s().max(1e-9),
            before.max_batch_ms,
            during.max_batch_ms
        );
    }
    Ok(())
}
