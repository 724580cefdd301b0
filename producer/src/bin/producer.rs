//! `producer --bootstrap ADDR --topic T --transactional-id ID [--partition P] [--count N]
//! [--interval-ms MS] [--value PREFIX]`
//!
//! Prints one line per acknowledged record. Exit codes: 0 done, 3 fenced, 1 any other failure.

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use producer::{ClientError, Producer, ProducerConfig};

/// Writes records `PREFIX-0`, `PREFIX-1`, ... and stops with exit code 3 if it is fenced.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The coordinator's address.
    #[arg(long)]
    bootstrap: String,
    /// Topic (created with the coordinator's defaults if it does not exist).
    #[arg(long)]
    topic: String,
    /// Transactional id: a new producer with the same id fences this one.
    #[arg(long)]
    transactional_id: String,
    /// Partition to write to; without it records go round-robin over all partitions.
    #[arg(long)]
    partition: Option<i32>,
    /// Number of records to write; without it, write until interrupted.
    #[arg(long)]
    count: Option<u64>,
    /// Pause between records, in milliseconds.
    #[arg(long, default_value_t = 0)]
    interval_ms: u64,
    /// Value prefix (defaults to the transactional id): record n's value is PREFIX-n.
    #[arg(long)]
    value: Option<String>,
    /// When a record counts as acknowledged: `all` in-sync replicas have it, or the `leader` has.
    #[arg(long, default_value = "all", value_parser = ["all", "leader"])]
    acks: String,
    /// How long to keep retrying one record on retriable errors, in milliseconds.
    #[arg(long, default_value_t = 120_000)]
    delivery_timeout_ms: u64,
}

const EXIT_FENCED: u8 = 3;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ ClientError::Fenced { .. }) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_FENCED)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), ClientError> {
    let mut config = ProducerConfig::transactional(&args.transactional_id);
    config.delivery_timeout_ms = args.delivery_timeout_ms;
    config.acks = if args.acks == "leader" { protocol::ACKS_LEADER } else { protocol::ACKS_ALL };
    let mut producer = Producer::init(&args.bootstrap, config).await?;
    let partitions = producer.partition_count(&args.topic).await? as i32;
    let prefix = args.value.unwrap_or_else(|| args.transactional_id.clone());
    eprintln!(
        "producer: transactional id '{}' has producer id {} at epoch {}; writing to '{}' ({} partitions)",
        args.transactional_id,
        producer.producer_id(),
        producer.epoch(),
        args.topic,
        partitions
    );
    let mut n: u64 = 0;
    while args.count.is_none_or(|c| n < c) {
        let partition = args.partition.unwrap_or((n % partitions.max(1) as u64) as i32);
        let value = format!("{prefix}-{n}");
        let meta = producer.send(&args.topic, partition, Bytes::from(value.clone())).await?;
        println!(
            "acked partition={} offset={} producer_id={} epoch={} value={}",
            meta.partition, meta.base_offset, meta.producer_id, meta.producer_epoch, value
        );
        n += 1;
        if args.interval_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        }
    }
    Ok(())
}
