//! What transaction version 2 costs a Kafka client (issue 31): transactions per second of one
//! transactional producer under version 1 and under version 2, in the same run, on one broker
//! over loopback TCP through its Kafka listener (the coordinator offers version 2; the producer
//! crate's Kafka client is held to version 1 for the other rounds, as librdkafka speaks it).
//!
//! Each transaction writes `BATCHES` batches of one 100-byte record to one partition and
//! commits. Under version 1 a transaction costs an AddPartitionsToTxn, the writes (the first one
//! verified with the coordinator) and an EndTxn; under version 2 no AddPartitionsToTxn (the
//! first write adds the partition, in the same verification round trip) and an EndTxn that bumps
//! the epoch. Rounds alternate between the versions, so that order effects do not pass for a
//! difference.
//!
//! `cargo run --release --example txn_versions [-- --transactions N --rounds R]` prints each
//! round's rate and the median per version.

use std::process::ExitCode;
use std::time::Instant;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::kafka::KafkaProducer;
use producer::ProducerConfig;

const BATCHES: usize = 4;

type Error = Box<dyn std::error::Error>;

fn arg(name: &str, default: usize) -> Result<usize, Error> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args.get(i + 1).ok_or_else(|| format!("{name} needs a number"))?;
            Ok(v.parse().map_err(|e| format!("{name} {v}: {e}"))?)
        }
    }
}

/// Transactions per second over `n` transactions of `p`.
async fn rate(p: &mut KafkaProducer, n: usize) -> Result<f64, Error> {
    let value = Bytes::from(vec![b'x'; 100]);
    let start = Instant::now();
    for _ in 0..n {
        p.begin()?;
        for _ in 0..BATCHES {
            p.send("txn", 0, value.clone()).await?;
        }
        p.commit().await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn run() -> Result<(), Error> {
    let transactions = arg("--transactions", 300)?;
    let rounds = arg("--rounds", 4)?.max(1);
    let c = LocalCluster::start(LocalOptions { kafka: true, ..LocalOptions::default() }).await?;
    c.create_topic("txn", 1).await?;
    let mut producers = Vec::new();
    for version in [1i16, 2] {
        let config = ProducerConfig::transactional(format!("txn-versions-{version}"));
        let mut p = KafkaProducer::init(&c.kafka_bootstrap(), config).await?;
        p.set_transaction_version_max(version);
        // One transaction first: connections, metadata and the leader found.
        rate(&mut p, 1).await?;
        if p.transaction_version() != version {
            return Err(
                format!("the producer speaks version {} where {version} was asked", p.transaction_version()).into()
            );
        }
        producers.push((version, p));
    }
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (version, p) = &mut producers[i];
            let r = rate(p, transactions).await?;
            println!("round {round}: transaction version {version}: {r:>8.0} transactions/s");
            rates[i].push(r);
        }
    }
    for (i, mut v) in rates.into_iter().enumerate() {
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        let (version, p) = &producers[i];
        println!(
            "transaction version {version}: median {median:.0} transactions/s over {rounds} rounds of {transactions} \
             ({BATCHES} batches each; epoch now {})",
            p.epoch()
        );
    }
    c.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("txn_versions: {e}");
            ExitCode::FAILURE
        }
    }
}
