//! `producer --bootstrap ADDR --topic T --transactional-id ID [--partition P] [--count N]
//! [--interval-ms MS] [--value PREFIX] [--kafka] [--sasl-username U --sasl-password-file F
//! [--sasl-mechanism M]]` (a login: SASL on a Kafka listener, SCRAM on the own protocol)
//!
//! Prints one line per acknowledged record. Exit codes: 0 done, 3 fenced, 1 any other failure.
//!
//! `producer --kafka --bootstrap ADDR --topic T --partition P --forge-producer-id PID
//! --forge-epoch E` is a lying client: one record under a producer id and epoch it names, with
//! no InitProducerId (`forged write landed at offset N`, exit 0; `forged write refused: ...`,
//! exit 3).
//! With `--kafka` it speaks the Kafka protocol to any Kafka-compatible broker (the same flags
//! and lines), following the rules of Kafka's clients (transaction version 1).

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use producer::kafka::KafkaProducer;
use producer::{ClientError, Producer, ProducerConfig, RecordMetadata};

/// Writes records `PREFIX-0`, `PREFIX-1`, ... and stops with exit code 3 if it is fenced.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The coordinator's address, or its replicas' (comma-separated: the active one is followed);
    /// with `--kafka`: brokers' Kafka addresses, comma separated.
    #[arg(long)]
    bootstrap: String,
    /// Speak the Kafka protocol to `--bootstrap`'s brokers (epochfence's `--kafka-listen`, or
    /// any Kafka-compatible broker) instead of epochfence's own.
    #[arg(long)]
    kafka: bool,
    /// Connect over TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    #[command(flatten)]
    sasl: producer::SaslArgs,
    /// Topic (created with the coordinator's defaults if it does not exist).
    #[arg(long)]
    topic: String,
    /// Transactional id: a new producer with the same id fences this one.
    #[arg(long, required_unless_present = "forge_producer_id")]
    transactional_id: Option<String>,
    /// With `--kafka`: write one record (sequence 0, not transactional) under this producer id
    /// and `--forge-epoch`, without InitProducerId, as a lying client would: under the
    /// authorizer a producer id belongs to its owner, and the broker refuses it from anyone else.
    #[arg(long, requires_all = ["kafka", "forge_epoch", "partition"], conflicts_with = "transactional_id")]
    forge_producer_id: Option<i64>,
    /// The epoch of `--forge-producer-id`'s write.
    #[arg(long, requires = "forge_producer_id")]
    forge_epoch: Option<i16>,
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
    /// Write inside transactions of `--txn-records` records each, committed (or aborted, see
    /// `--abort-every`); read_committed consumers see a transaction's records only once it commits.
    #[arg(long)]
    transactional: bool,
    /// Records per transaction (with `--transactional`).
    #[arg(long, default_value_t = 10)]
    txn_records: u64,
    /// Abort every K-th transaction instead of committing it (0: never).
    #[arg(long, default_value_t = 0)]
    abort_every: u64,
    /// Transaction timeout asked of the coordinator, in milliseconds: a transaction open longer
    /// is aborted and this producer fenced.
    #[arg(long, default_value_t = 60_000)]
    transaction_timeout_ms: i32,
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
    net::init_logging("warn");
    let args = Args::parse();
    if let (Some(producer_id), Some(epoch)) = (args.forge_producer_id, args.forge_epoch) {
        return match forge(&args, producer_id, epoch).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(ClientError::Refused { .. }) => ExitCode::from(EXIT_FENCED),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
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

/// `--forge-producer-id`: one lying write.
async fn forge(args: &Args, producer_id: i64, epoch: i16) -> Result<(), ClientError> {
    let mut client = producer::ClientConfig::with_tls_ca(args.tls_ca.as_deref())?;
    client.sasl = args.sasl.login(true).map_err(ClientError::Protocol)?;
    let partition = args.partition.unwrap_or(0);
    let value = Bytes::from(args.value.clone().unwrap_or_else(|| "forged".into()));
    match producer::kafka::forged_write(&args.bootstrap, client, &args.topic, partition, (producer_id, epoch), value)
        .await
    {
        Ok(offset) => {
            println!("forged write landed at offset {offset}: producer id {producer_id} epoch {epoch}");
            Ok(())
        }
        Err(ClientError::Refused { status, .. }) => {
            println!("forged write refused: {status}");
            Err(ClientError::Refused { what: "forged write".into(), status })
        }
        Err(e) => Err(e),
    }
}

async fn run(args: Args) -> Result<(), ClientError> {
    let transactional_id = args.transactional_id.clone().unwrap_or_default();
    let mut config = ProducerConfig::transactional(&transactional_id);
    config.client = producer::ClientConfig::with_tls_ca(args.tls_ca.as_deref())?;
    config.client.sasl = args.sasl.login(args.kafka).map_err(ClientError::Protocol)?;
    config.delivery_timeout_ms = args.delivery_timeout_ms;
    config.acks = if args.acks == "leader" { protocol::ACKS_LEADER } else { protocol::ACKS_ALL };
    config.transaction_timeout_ms = args.transaction_timeout_ms;
    let mut producer = if args.kafka {
        Either::Kafka(KafkaProducer::init(&args.bootstrap, config).await?)
    } else {
        Either::Own(Producer::init(&args.bootstrap, config).await?)
    };
    let partitions = producer.partition_count(&args.topic).await? as i32;
    let prefix = args.value.unwrap_or_else(|| transactional_id.clone());
    eprintln!(
        "producer: transactional id '{}' has producer id {} at epoch {}; writing to '{}' ({} partitions)",
        transactional_id,
        producer.producer_id(),
        producer.epoch(),
        args.topic,
        partitions
    );
    let txn_records = args.txn_records.max(1);
    let mut n: u64 = 0;
    let mut txn: u64 = 0;
    while args.count.is_none_or(|c| n < c) {
        if args.transactional && !producer.in_transaction() {
            producer.begin()?;
        }
        let partition = args.partition.unwrap_or((n % partitions.max(1) as u64) as i32);
        let value = format!("{prefix}-{n}");
        let meta = producer.send(&args.topic, partition, Bytes::from(value.clone())).await?;
        println!(
            "acked partition={} offset={} producer_id={} epoch={} value={}",
            meta.partition, meta.base_offset, meta.producer_id, meta.producer_epoch, value
        );
        n += 1;
        let last = args.count.is_some_and(|c| n >= c);
        if args.transactional && (n.is_multiple_of(txn_records) || last) {
            txn += 1;
            let epoch = producer.epoch();
            if args.abort_every > 0 && txn.is_multiple_of(args.abort_every) {
                producer.abort().await?;
                println!("aborted transaction={txn} epoch={epoch}");
            } else {
                producer.commit().await?;
                println!("committed transaction={txn} epoch={epoch}");
            }
        }
        if args.interval_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        }
    }
    Ok(())
}

/// The own protocol's producer or the Kafka protocol's: the same calls, the same lines.
enum Either {
    Own(Producer),
    Kafka(KafkaProducer),
}

macro_rules! each {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            Either::Own($p) => $e,
            Either::Kafka($p) => $e,
        }
    };
}

impl Either {
    fn producer_id(&self) -> i64 {
        each!(self, p => p.producer_id())
    }
    fn epoch(&self) -> i16 {
        each!(self, p => p.epoch())
    }
    fn in_transaction(&self) -> bool {
        each!(self, p => p.in_transaction())
    }
    fn begin(&mut self) -> Result<(), ClientError> {
        each!(self, p => p.begin())
    }
    async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        each!(self, p => p.partition_count(topic).await)
    }
    async fn send(&mut self, topic: &str, partition: i32, value: Bytes) -> Result<RecordMetadata, ClientError> {
        each!(self, p => p.send(topic, partition, value).await)
    }
    async fn commit(&mut self) -> Result<(), ClientError> {
        each!(self, p => p.commit().await)
    }
    async fn abort(&mut self) -> Result<(), ClientError> {
        each!(self, p => p.abort().await)
    }
}
