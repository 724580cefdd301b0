//! `broker --id N --listen ADDR --coordinator ADDR --data-dir DIR [--kafka-listen ADDR]`: hosts
//! partitions, and with `--kafka-listen` serves Kafka clients too.
//!
//! The binary's command line and its main, in the library so that `cluster` runs the same
//! process by re-executing itself.

use crate::BrokerConfig;
use std::sync::Arc;

use clap::Parser;

/// An epochfence broker: leads partitions, fences zombie producers and stale leader epochs.
#[derive(Parser, Debug)]
#[command(version)]
pub struct Args {
    /// Broker id, unique in the cluster.
    #[arg(long)]
    id: i32,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9093")]
    listen: String,
    /// The coordinator's address, or its replicas' (comma-separated: the active one is followed).
    #[arg(long)]
    coordinator: String,
    /// Directory for partition logs.
    #[arg(long)]
    data_dir: std::path::PathBuf,
    /// Address clients should use, if not the listening one.
    #[arg(long)]
    advertise: Option<String>,
    /// Also serve the Kafka protocol on this address, so Kafka clients (librdkafka,
    /// kafka-python, Java) produce and consume here, under the same limits, TLS and checks.
    #[arg(long)]
    kafka_listen: Option<String>,
    /// Address Kafka clients should use for the Kafka listener, if not the listening one.
    #[arg(long, requires = "kafka_listen")]
    kafka_advertise: Option<String>,
    /// The Kafka listener's security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    /// (default: SSL with `--tls-cert`, else PLAINTEXT). SSL and SASL_SSL need `--tls-cert` and
    /// `--tls-key`; under SASL_* clients log in with a user of the coordinator's
    /// `--scram-users-file`.
    #[arg(long, requires = "kafka_listen")]
    kafka_security_protocol: Option<crate::server::SecurityProtocol>,
    /// The SASL mechanisms offered, comma-separated, of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
    /// (Kafka's sasl.enabled.mechanisms). PLAIN sends the password in the clear: use it under
    /// SASL_SSL.
    #[arg(long, default_value = "SCRAM-SHA-256,SCRAM-SHA-512")]
    sasl_mechanisms: String,
    /// How long the answer to a failed SASL login waits, in milliseconds (Kafka's
    /// connection.failed.authentication.delay.ms): slows password guessing.
    #[arg(long, default_value_t = crate::server::KAFKA_FAILED_AUTHENTICATION_DELAY_MS_DEFAULT)]
    connection_failed_authentication_delay_ms: u64,
    /// How long a Kafka client's SASL login lasts, in milliseconds (Kafka's
    /// connections.max.reauth.ms, KIP-368): the client logs in again on the same connection
    /// before then (librdkafka and kafka-python do), or its next request closes the connection.
    /// A deleted user or changed password so ends open sessions within it. 0: a login lasts
    /// the connection's life.
    #[arg(long, default_value_t = 0)]
    connections_max_reauth_ms: u64,
    /// Most PLAIN password checks a second (each a PBKDF2 of about a millisecond of CPU). A
    /// password that passed before is not checked again; beyond this, other PLAIN logins are
    /// refused unchecked, so a storm of wrong passwords cannot take the broker's CPU (the
    /// budget is the broker's: during a storm a password not checked before is refused too).
    /// SCRAM logins cost the broker no PBKDF2 and are not counted.
    #[arg(long, default_value_t = protocol::sasl::PLAIN_CHECKS_PER_S_MAX_DEFAULT, value_parser = clap::value_parser!(u32).range(1..))]
    sasl_plain_checks_per_s_max: u32,
    /// Largest transaction timeout a Kafka client may ask for in InitProducerId, in
    /// milliseconds (Kafka's transaction.max.timeout.ms); above it the init is refused with
    /// INVALID_TRANSACTION_TIMEOUT. The coordinator's own maximum applies as well.
    #[arg(long, default_value_t = crate::server::TRANSACTION_MAX_TIMEOUT_MS_DEFAULT, value_parser = clap::value_parser!(i32).range(1..))]
    transaction_max_timeout_ms: i32,
    /// How long a Kafka connection's relay connection to the coordinator stays open without
    /// use, in milliseconds; then it is closed (and dialled again when the client next needs
    /// the coordinator), so idle Kafka clients do not hold the coordinator's connections.
    #[arg(long, default_value_t = crate::server::KAFKA_RELAY_IDLE_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    kafka_relay_idle_ms: u64,
    /// Interval between heartbeats to the coordinator, in milliseconds.
    #[arg(long, default_value_t = 300)]
    heartbeat_ms: u64,
    /// Largest request frame accepted, in bytes.
    #[arg(long, default_value_t = protocol::codec::FRAME_BYTES_MAX_DEFAULT)]
    frame_bytes_max: usize,
    /// Most connections served at once to clients (Kafka clients' relays included).
    #[arg(long, default_value_t = 1024)]
    connections_max: usize,
    /// Connections beyond `--connections-max` kept for cluster members (broker heartbeats and
    /// verifications, replication, markers): a flood of clients never keeps them out.
    #[arg(long, default_value_t = net::MEMBER_CONNECTIONS_MAX_DEFAULT)]
    member_connections_max: usize,
    /// How long an acks=all produce or a marker waits for the in-sync replicas, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// A follower not caught up for this long leaves the ISR, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    replica_lag_ms: u64,
    /// File holding the cluster secret (at least 16 bytes; surrounding whitespace ignored).
    /// With it, internal requests are served only to peers that prove they hold it too.
    #[arg(long)]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// When log writes are made durable: `always` (acknowledge after fdatasync, shared by
    /// concurrent writes), `interval-ms=N` (fdatasync every N ms, acknowledge before), or
    /// `never` (rely on replication).
    #[arg(long, default_value = "always")]
    fsync: crate::server::FsyncPolicy,
    /// A log segment rolls when the next batch would take it past this many bytes.
    #[arg(long, default_value_t = crate::log::SEGMENT_BYTES_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    segment_bytes: u64,
    /// Reserve each active segment's disk blocks this many bytes ahead of its end (0: off):
    /// appends then skip the file system's block allocation. The file's length is unchanged.
    #[arg(long, default_value_t = crate::log::PREALLOCATE_BYTES_DEFAULT)]
    preallocate_bytes: u64,
    /// Delete a partition's oldest segments while its log stays at least this big without
    /// them, in bytes (default: keep everything).
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// Delete segments whose newest record is older than this, in milliseconds (default: keep
    /// everything).
    #[arg(long)]
    retention_ms: Option<i64>,
    /// How often retention runs, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    retention_check_ms: u64,
    /// Forget a producer id that writes nothing to a partition for this long, in milliseconds
    /// (Kafka's `producer.id.expiration.ms`); its next write there is checked with the
    /// coordinator first, so a fenced producer that slept through it stays fenced.
    #[arg(long, default_value_t = crate::server::PRODUCER_ID_EXPIRATION_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    producer_id_expiration_ms: u64,
    /// How often idle producer ids are looked for, in milliseconds (Kafka's
    /// `producer.id.expiration.check.interval.ms`).
    #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    producer_id_expiration_check_interval_ms: u64,
    /// How often each partition's high watermark is written to its directory, in milliseconds
    /// (Kafka's replica.high.watermark.checkpoint.interval.ms): a restarted leader serves what
    /// was committed up to it at once, and a log found shorter than it at a restart has lost
    /// records, so the replica leaves the ISR and refetches them.
    #[arg(long, default_value_t = 5_000)]
    high_watermark_checkpoint_interval_ms: u64,
    /// Largest record batch a producer may send, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    batch_bytes_max: usize,
    /// Most bytes a compressed batch's records may decompress to (gzip, snappy, lz4 and zstd
    /// batches are checked before they are stored as sent); more is refused with
    /// MESSAGE_TOO_LARGE.
    #[arg(long, default_value_t = protocol::batch::DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT)]
    decompressed_batch_bytes_max: usize,
    /// Refuse a batch with a record timestamp further ahead of this broker's clock, in
    /// milliseconds (INVALID_TIMESTAMP; Kafka's log.message.timestamp.after.max.ms).
    #[arg(long, default_value_t = crate::server::MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT)]
    message_timestamp_after_max_ms: u64,
    /// Refuse a batch with a record timestamp further behind this broker's clock, in
    /// milliseconds (default: any age).
    #[arg(long)]
    message_timestamp_before_max_ms: Option<u64>,
    /// Close a connection that sends no complete request for this long, in milliseconds.
    #[arg(long, default_value_t = 600_000)]
    idle_ms: u64,
    /// Serve TLS with this PEM certificate chain (needs `--tls-key`).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Dial the other members over TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// Mutual TLS on the Kafka listener (SSL or SASL_SSL): require of every Kafka client a
    /// certificate signed by one of the CAs in this PEM file (Kafka's ssl.client.auth=required).
    /// Under SSL the certificate's subject names the client's principal
    /// (`--ssl-principal-mapping-rules`); under SASL_SSL the SASL login does.
    #[arg(long, requires = "tls_cert", requires = "kafka_listen")]
    tls_client_ca: Option<std::path::PathBuf>,
    /// How an SSL client's certificate subject (RFC 2253, e.g. `CN=alice,OU=clients,O=acme`)
    /// becomes its principal's name, in Kafka's syntax (ssl.principal.mapping.rules):
    /// comma-separated `RULE:pattern/replacement/[L|U]` (the pattern matches the whole subject;
    /// `$1`.. its groups, a reference to no group refused at start) and `DEFAULT` (the subject
    /// as it is), the first that applies wins; a subject none applies to is refused. E.g.
    /// `RULE:^CN=([^,]*),.*$/$1/,DEFAULT`.
    #[arg(long, default_value = "DEFAULT", requires = "tls_client_ca")]
    ssl_principal_mapping_rules: String,
    /// Most Replicate requests in flight to one follower for one partition (1: each waits for
    /// the answer to the one before).
    #[arg(long, default_value_t = crate::server::REPLICATION_INFLIGHT_MAX_DEFAULT as u64, value_parser = clap::value_parser!(u64).range(1..1025))]
    replication_inflight_max: u64,
    /// A leader with followers keeps up to this many bytes of each partition's newest batches
    /// in memory and sends Replicate requests from them instead of reading its log file back
    /// (0: always read the file).
    #[arg(long, default_value_t = crate::log::REPLICATION_CACHE_BYTES_MAX_DEFAULT)]
    replication_cache_bytes_max: usize,
    /// Serve Prometheus metrics at `GET /metrics` on this address.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Append every fencing event (refused writes with their reason, stale leaders' replication
    /// refused) to this file as JSON lines (docs/EVENTS.md), beside whatever else writes there.
    #[arg(long, value_name = "FILE")]
    events_file: Option<std::path::PathBuf>,
    /// This process's name in the events file (default: as the events file section of
    /// docs/EVENTS.md says).
    #[arg(long, value_name = "NAME", requires = "events_file")]
    events_name: Option<String>,
    /// DANGER: turn producer fencing off (demonstrations and overhead measurements only).
    #[arg(long)]
    no_fencing: bool,
    /// The Kafka broker configs whose flags were given on the command line (filled by
    /// [`Args::parse_from_command_line`]): DescribeConfigs reports them as
    /// STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG.
    #[arg(skip)]
    given: Vec<&'static str>,
}

/// The flags behind Kafka broker configs, by the config's Kafka name.
const FLAG_CONFIGS: &[(&str, &str)] = &[
    ("segment_bytes", "log.segment.bytes"),
    ("retention_ms", "log.retention.ms"),
    ("retention_bytes", "log.retention.bytes"),
    ("batch_bytes_max", "message.max.bytes"),
    ("message_timestamp_after_max_ms", "log.message.timestamp.after.max.ms"),
    ("message_timestamp_before_max_ms", "log.message.timestamp.before.max.ms"),
    ("transaction_max_timeout_ms", "transaction.max.timeout.ms"),
    ("replica_lag_ms", "replica.lag.time.max.ms"),
    ("sasl_mechanisms", "sasl.enabled.mechanisms"),
    ("connections_max_reauth_ms", "connections.max.reauth.ms"),
];

impl Args {
    /// [`Args`] from `argv`, knowing which flags it gives (rather than their defaults).
    pub fn parse_from_command_line<I, T>(argv: I) -> Args
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Args::command().get_matches_from(argv);
        let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        args.given = FLAG_CONFIGS
            .iter()
            .filter(|(flag, _)| matches.value_source(flag) == Some(clap::parser::ValueSource::CommandLine))
            .map(|(_, config)| *config)
            .collect();
        args
    }
}

/// Run the process the command line `args` describes, until SIGINT or SIGTERM.
pub fn main(args: Args) -> anyhow::Result<()> {
    let events = match &args.events_file {
        Some(path) => Some(
            net::events::EventsFile::open(
                path,
                &args.events_name.clone().unwrap_or_else(|| format!("broker {}", args.id)),
            )
            .map_err(|e| anyhow::anyhow!("cannot open --events-file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    net::init_logging_with_events("info", events);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut config = BrokerConfig::new(args.id, &args.data_dir, &args.coordinator);
    config.advertised_addr = args.advertise;
    config.kafka_advertised_addr = args.kafka_advertise;
    config.transaction_max_timeout_ms = args.transaction_max_timeout_ms;
    config.kafka_relay_idle_ms = args.kafka_relay_idle_ms;
    if let Some(p) = args.kafka_security_protocol {
        if p.tls() && args.tls_cert.is_none() {
            anyhow::bail!("--kafka-security-protocol {p} needs --tls-cert and --tls-key");
        }
        if !p.tls() && args.tls_client_ca.is_some() {
            anyhow::bail!(
                "--tls-client-ca needs a TLS Kafka listener: --kafka-security-protocol SSL or SASL_SSL, not {p}"
            );
        }
        config.kafka_security_protocol = Some(p);
    }
    config.kafka_sasl = crate::server::SaslConfig {
        mechanisms: crate::server::parse_mechanisms(&args.sasl_mechanisms)
            .map_err(|e| anyhow::anyhow!("--sasl-mechanisms: {e}"))?,
        failed_authentication_delay_ms: args.connection_failed_authentication_delay_ms,
        max_reauth_ms: args.connections_max_reauth_ms,
        plain_checks_per_s_max: args.sasl_plain_checks_per_s_max,
    };
    config.heartbeat_ms = args.heartbeat_ms;
    config.fencing = !args.no_fencing;
    config.batch_bytes_max = args.batch_bytes_max;
    config.decompressed_batch_bytes_max = args.decompressed_batch_bytes_max;
    config.message_timestamp_after_max_ms = Some(args.message_timestamp_after_max_ms);
    config.message_timestamp_before_max_ms = args.message_timestamp_before_max_ms;
    config.fsync = args.fsync;
    config.log = crate::log::LogConfig {
        segment_bytes: args.segment_bytes,
        retention_bytes: args.retention_bytes,
        retention_ms: args.retention_ms,
        // Set per topic (`segment.ms`); no roll by time otherwise.
        segment_ms: None,
        // Set per partition from `--fsync` (no sync at a roll under `never`).
        sync_on_roll: true,
        preallocate_bytes: args.preallocate_bytes,
        replication_cache_bytes_max: args.replication_cache_bytes_max,
    };
    config.retention_check_ms = args.retention_check_ms.max(1);
    config.producer_id_expiration_ms = args.producer_id_expiration_ms;
    config.producer_id_expiration_check_interval_ms = args.producer_id_expiration_check_interval_ms;
    config.high_watermark_checkpoint_interval_ms = args.high_watermark_checkpoint_interval_ms.max(1);
    config.limits.idle_ms = args.idle_ms;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.limits.tls = Some(net::tls::acceptor_from_files(cert, key)?);
    }
    if let (Some(ca), Some(cert), Some(key)) = (&args.tls_client_ca, &args.tls_cert, &args.tls_key) {
        config.kafka_mtls = Some(net::tls::MutualTls::from_files(cert, key, ca)?);
        config.ssl_principal_mapping = protocol::principal::PrincipalMapper::parse(&args.ssl_principal_mapping_rules)
            .map_err(|e| anyhow::anyhow!("--ssl-principal-mapping-rules: {e}"))?;
    }
    config.peer_tls = args.tls_ca.as_deref().map(net::ClientTls::from_file).transpose()?;
    config.limits.cluster_secret =
        args.cluster_secret_file.as_deref().map(net::read_cluster_secret).transpose().map_err(anyhow::Error::msg)?;
    config.request_timeout_ms = args.request_timeout_ms;
    config.replica_lag_ms = args.replica_lag_ms;
    config.configs_given = args.given.clone();
    config.replication_inflight_max = args.replication_inflight_max as usize;
    config.limits.frame_bytes_max = args.frame_bytes_max;
    config.limits.connections_max = args.connections_max;
    config.limits.member_connections_max = args.member_connections_max;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("broker {} listening on {addr}", args.id);
    let kafka_listener = match &args.kafka_listen {
        Some(kafka) => {
            let l = tokio::net::TcpListener::bind(kafka)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {kafka} (--kafka-listen): {e}"))?;
            println!("broker {} kafka listening on {}", args.id, l.local_addr()?);
            Some(l)
        }
        None => None,
    };
    let control = crate::server::BrokerControl::running();
    if let Some(metrics) = &args.metrics_listen {
        let l = tokio::net::TcpListener::bind(metrics)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {metrics} (--metrics-listen): {e}"))?;
        println!("metrics listening on {}", l.local_addr()?);
        let stats = control.stats.clone();
        tokio::spawn(net::metrics::serve_metrics(l, Arc::new(move || stats.metrics.encode()), std::future::pending()));
    }
    // SIGINT or SIGTERM: stop cleanly (logs synced, producer state snapshotted).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    crate::server::run_listeners(listener, kafka_listener, config, control, async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
    .await?;
    Ok(())
}
