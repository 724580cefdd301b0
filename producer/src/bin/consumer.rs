//! `consumer --bootstrap ADDR --topic T --partition P [--from OFFSET] [--follow] [--json] [--kafka]`
//! `consumer --kafka --bootstrap ADDR --topic T --group G [--group-protocol classic|consumer] [--follow] [--json]`
//! (`--sasl-username U --sasl-password-file F [--sasl-mechanism M]` log in: SASL with `--kafka`,
//! SCRAM on the own protocol)
//!
//! With `--kafka` it reads over the Kafka protocol from any Kafka-compatible broker, printing the
//! same lines. With `--group` it is a member of consumer group G (`subscribe()`): it reads the
//! partitions the group assigns it from the group's committed offsets, commits what it printed,
//! and leaves the group when it exits; its lines then start with the partition. With
//! `--group-protocol consumer` it is a KIP-848 member: the coordinator assigns its partitions
//! and fences it by its member epoch.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use producer::consumer::{Fetched, FETCH_BYTES_MAX_DEFAULT};
use producer::kafka::{GroupConfig, GroupProtocol, KafkaConsumer, KafkaGroupConsumer};
use producer::{ClientConfig, ClientError, Consumer};

/// Prints every record of a partition: offset, producer id, producer epoch, sequence, value.
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
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    partition: i32,
    /// First offset to read.
    #[arg(long, default_value_t = 0)]
    from: i64,
    /// Join this consumer group (needs `--kafka`): read the partitions it assigns, from its
    /// committed offsets, and commit.
    #[arg(long, requires = "kafka", conflicts_with_all = ["partition", "from"])]
    group: Option<String>,
    /// With `--group`: the session timeout asked of the group coordinator, in milliseconds
    /// (10000 if not given; not with `--group-protocol consumer`, whose session timeout is the
    /// coordinator's `--group-consumer-session-timeout-ms`).
    #[arg(long, requires = "group")]
    session_timeout_ms: Option<i32>,
    /// With `--group`: Kafka's `group.protocol`: `classic` (JoinGroup and SyncGroup; the
    /// leader assigns) or `consumer` (KIP-848: the coordinator assigns, member epochs fence).
    #[arg(long, default_value = "classic", value_parser = ["classic", "consumer"])]
    group_protocol: String,
    /// With `--group`: `group.instance.id`, making this a static member.
    #[arg(long, requires = "group")]
    group_instance_id: Option<String>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
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
    let config = match ClientConfig::with_tls_ca(args.tls_ca.as_deref()).and_then(|c| {
        let sasl = args.sasl.login(args.kafka).map_err(ClientError::Protocol)?;
        Ok(ClientConfig { sasl, ..c })
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let committed = args.isolation == "read_committed";
    if let Some(group) = &args.group {
        return group_member(&args, group, config, committed).await;
    }
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
        print_records(&f, None, args.json);
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

fn print_records(f: &Fetched, partition: Option<i32>, json: bool) {
    for r in &f.records {
        let value = String::from_utf8_lossy(&r.value);
        if json {
            let line = Line {
                partition,
                offset: r.offset,
                producer_id: r.producer_id,
                producer_epoch: r.producer_epoch,
                sequence: r.sequence,
                leader_epoch: r.leader_epoch,
                value: &value,
            };
            println!("{}", serde_json::to_string(&line).expect("plain struct serialises"));
        } else {
            let at = partition.map(|p| format!("partition={p} ")).unwrap_or_default();
            println!(
                "{at}offset={} producer_id={} producer_epoch={} sequence={} value={}",
                r.offset, r.producer_id, r.producer_epoch, r.sequence, value
            );
        }
    }
}

/// `--group`: a member of the group until every assigned partition is read to its end (or, with
/// `--follow`, until stopped), committing after every poll that printed something.
async fn group_member(args: &Args, group: &str, config: ClientConfig, committed: bool) -> ExitCode {
    let protocol = if args.group_protocol == "consumer" { GroupProtocol::Consumer } else { GroupProtocol::Classic };
    if protocol == GroupProtocol::Consumer && args.session_timeout_ms.is_some() {
        eprintln!(
            "error: --session-timeout-ms does not go with --group-protocol consumer: a KIP-848 member's session \
             timeout is the coordinator's (--group-consumer-session-timeout-ms)"
        );
        return ExitCode::from(2);
    }
    let session_timeout_ms = args.session_timeout_ms.unwrap_or(10_000);
    let group_config = GroupConfig {
        session_timeout_ms,
        heartbeat_interval_ms: (session_timeout_ms.max(3) / 3) as u64,
        instance_id: args.group_instance_id.clone(),
        protocol,
        ..GroupConfig::default()
    };
    let mut member = KafkaGroupConsumer::new(&args.bootstrap, config, group, &[&args.topic], committed, group_config);
    let fail = |e: ClientError| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    };
    let mut generation = -1;
    let mut assignment = Vec::new();
    // Under KIP-848 partitions come at later heartbeats while other members give them up: the
    // assignment must have held for two heartbeat intervals before its end is the end.
    let mut assigned_at = std::time::Instant::now();
    loop {
        let polled = match member.poll().await {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let (member_id, now) = member.membership();
        let member_id = member_id.to_string();
        // A KIP-848 assignment can grow at the same epoch (partitions released by others).
        let changed = now != generation || protocol == GroupProtocol::Consumer && member.assignment() != assignment;
        if changed {
            generation = now;
            assignment = member.assignment();
            assigned_at = std::time::Instant::now();
            let parts = assignment.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(",");
            match protocol {
                GroupProtocol::Classic => {
                    eprintln!("joined group {group} as {member_id} at generation {generation}: partitions [{parts}]")
                }
                GroupProtocol::Consumer => {
                    eprintln!("joined group {group} as {member_id} at member epoch {generation}: partitions [{parts}]")
                }
            }
        }
        let mut printed = false;
        let mut all_at_end = true;
        for (_, partition, f) in &polled {
            printed |= !f.records.is_empty();
            all_at_end &= f.next_offset >= f.readable_end || f.records.is_empty();
            print_records(f, Some(*partition), args.json);
        }
        if printed {
            if let Err(e) = member.commit().await {
                return fail(e);
            }
        }
        let settled = protocol == GroupProtocol::Classic
            || assigned_at.elapsed() >= Duration::from_millis(2 * member.heartbeat_interval_ms());
        if all_at_end {
            if !args.follow && settled {
                if let Err(e) = member.commit().await {
                    return fail(e);
                }
                return match member.leave().await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e),
                };
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
