//! `consumer --bootstrap ADDR --topic T --partition P [--from OFFSET] [--follow] [--json] [--kafka]`
//!
//! With `--kafka` it reads over the Kafka protocol from any Kafka-compatible broker, printing the
//! same lines.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use producer::consumer::{Fetched, FETCH_BYTES_MAX_DEFAULT};
use producer::kafka::KafkaConsumer;
use producer::{ClientConfig, ClientError, Consumer};

/// Prints every record of a partition: offset, producer id, producer epoch, sequence, value.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The coordinator's address (with `--kafka`: brokers' Kafka addresses, comma separated).
    #[arg(long)]
    bootstrap: String,
    /// Speak the Kafka protocol to `--bootstrap`'s brokers (epochfence's `--kafka-listen`, or
    /// any Kafka-compatible broker) instead of epochfence's own.
    #[arg(long)]
    kafka: bool,
    /// Connect over TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    partition: i32,
    /// First offset to read.
    #[arg(long, default_value_t = 0)]
    from: i64,
    /// Keep waiting for new records instead of exiting at the end of the log.
    #[arg(long)]
    follow: bool,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// `read_committed`: only committed records, never aborted or open transactions (up to the
    /// last stable offset); `read_uncommitted`: everything up to the high watermark.
    #[arg(long, default_value = "read_committed", value_parser = ["read_committed", "read_uncommitted"])]
    isolation: String,
}

#[derive(serde::Serialize)]
struct Line<'a> {
    offset: i64,
    producer_id: i64,
    producer_epoch: i16,
    sequence: i32,
    leader_epoch: i32,
    value: &'a str,
}

#[tokio::main]
async fn main() -> ExitCode {
    net::init_logging("warn");
    let args = Args::parse();
    let config = match ClientConfig::with_tls_ca(args.tls_ca.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let committed = args.isolation == "read_committed";
    let mut consumer = match (args.kafka, committed) {
        (false, true) => Either::Own(Consumer::read_committed(&args.bootstrap, config)),
        (false, false) => Either::Own(Consumer::new(&args.bootstrap, config)),
        (true, true) => Either::Kafka(KafkaConsumer::read_committed(&args.bootstrap, config)),
        (true, false) => Either::Kafka(KafkaConsumer::new(&args.bootstrap, config)),
    };
    let mut offset = args.from;
    loop {
        let f = match consumer.fetch(&args.topic, args.partition, offset, FETCH_BYTES_MAX_DEFAULT).await {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        for r in &f.records {
            let value = String::from_utf8_lossy(&r.value);
            if args.json {
                let line = Line {
                    offset: r.offset,
                    producer_id: r.producer_id,
                    producer_epoch: r.producer_epoch,
                    sequence: r.sequence,
                    leader_epoch: r.leader_epoch,
                    value: &value,
                };
                println!("{}", serde_json::to_string(&line).expect("plain struct serialises"));
            } else {
                println!(
                    "offset={} producer_id={} producer_epoch={} sequence={} value={}",
                    r.offset, r.producer_id, r.producer_epoch, r.sequence, value
                );
            }
        }
        let at_end = f.next_offset >= f.readable_end || f.next_offset == offset;
        offset = f.next_offset;
        if at_end {
            if !args.follow {
                return ExitCode::SUCCESS;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The own protocol's consumer or the Kafka protocol's.
enum Either {
    Own(Consumer),
    Kafka(KafkaConsumer),
}

impl Either {
    async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Fetched, ClientError> {
        match self {
            Either::Own(c) => c.fetch(topic, partition, offset, max_bytes).await,
            Either::Kafka(c) => c.fetch(topic, partition, offset, max_bytes).await,
        }
    }
}
