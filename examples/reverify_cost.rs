//! What re-verifying after a leader change costs a producer (issue 28). A replica that becomes
//! leader forgets every verification, so the first write of each producer id to each partition
//! under the new leadership waits for one coordinator round trip before it is appended. This
//! measures it on loopback TCP, in one process: one broker (the leader changes by election, so
//! the same replica leads at a new epoch), 16 partitions, 8 idempotent producers.
//!
//! 1. Each producer's first write to each partition (a new producer id: verified), then its
//!    second (already verified): the difference is the verification round trip.
//! 2. Every partition is elected again (a new leader epoch); each producer's next write to each
//!    partition is refused for its old leader epoch, refreshes its metadata, and is verified
//!    again; the write after it is not.
//!
//! `cargo run --release --example reverify_cost` prints the medians and the 99th percentiles.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::{Producer, ProducerConfig};

const TOPIC: &str = "reverify";
const PARTITIONS: i32 = 16;
const PRODUCERS: usize = 8;
const ROUNDS: usize = 5;

type Error = Box<dyn std::error::Error>;

fn summary(name: &str, mut v: Vec<Duration>) -> String {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    format!(
        "{name:<52} n={:<5} median {:>7.1} µs   p99 {:>8.1} µs",
        v.len(),
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    )
}

async fn timed(p: &mut Producer, partition: i32) -> Result<Duration, Error> {
    let start = Instant::now();
    p.send(TOPIC, partition, Bytes::from_static(b"x")).await?;
    Ok(start.elapsed())
}

async fn run() -> Result<(), Error> {
    let c = LocalCluster::start(LocalOptions { brokers: 1, ..Default::default() }).await?;
    c.create_topic_replicated(TOPIC, PARTITIONS, 1).await?;
    let (mut first, mut second, mut after_change, mut after_that) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let mut producers = Vec::new();
        for _ in 0..PRODUCERS {
            producers.push(Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await?);
        }
        // Metadata first (a write of its own to partition 0, not counted), so that what is
        // timed is the verification alone.
        for p in &mut producers {
            p.send(TOPIC, 0, Bytes::from_static(b"warm")).await?;
        }
        for p in &mut producers {
            for partition in 1..PARTITIONS {
                first.push(timed(p, partition).await?);
                second.push(timed(p, partition).await?);
            }
        }
        let mut admin = c.admin();
        for partition in 0..PARTITIONS {
            admin.elect_leader(TOPIC, partition).await?;
        }
        // A fresh producer's write to each partition waits until the broker leads at the new
        // epoch (UNKNOWN_LEADER_EPOCH is retried), so what follows is timed against it.
        let mut probe = Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await?;
        for partition in 0..PARTITIONS {
            probe.send(TOPIC, partition, Bytes::from_static(b"probe")).await?;
        }
        for p in &mut producers {
            for partition in 1..PARTITIONS {
                after_change.push(timed(p, partition).await?);
                after_that.push(timed(p, partition).await?);
            }
        }
    }
    println!(
        "{PRODUCERS} idempotent producers x {} partitions x {ROUNDS} rounds, one broker, acks=all",
        PARTITIONS - 1
    );
    println!("{}", summary("first write of a producer id (verified)", first));
    println!("{}", summary("second write (already verified)", second));
    println!("{}", summary("first write after a leader change (refresh + verify)", after_change));
    println!("{}", summary("the write after it", after_that));
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
