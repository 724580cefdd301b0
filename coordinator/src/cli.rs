//! `coordinator --listen ADDR --data-dir DIR [--etcd-endpoints URL,...]`: the transaction coordinator and
//! cluster metadata, on its local journal or as one of several replicas on etcd.
//!
//! The binary's command line and its main, in the library so that `cluster` runs the same
//! process by re-executing itself.

use crate::CoordinatorConfig;
use clap::Parser;

/// The epochfence transaction coordinator: grants producer ids and epochs (fencing earlier
/// instances), and keeps brokers, topics and partition leaders.
#[derive(Parser, Debug)]
#[command(version)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: String,
    /// Directory for the durable journal of grants, registrations and topics.
    #[arg(long)]
    data_dir: std::path::PathBuf,
    /// How long a broker heartbeat keeps its lease, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    broker_lease_ms: u64,
    /// Partitions of a topic created automatically on first use.
    #[arg(long, default_value_t = 1)]
    default_partitions: i32,
    /// Refuse unknown topics instead of creating them on first use.
    #[arg(long)]
    no_auto_create_topics: bool,
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
    /// File holding the cluster secret (at least 16 bytes; surrounding whitespace ignored).
    /// With it, internal requests are served only to peers that prove they hold it too.
    #[arg(long)]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// SASL users, one `NAME=PASSWORD` per line (`#` comments): at each start each gets
    /// SCRAM-SHA-256 and SCRAM-SHA-512 credentials (4096 iterations, new salts; journaled) unless
    /// it holds ones that match, so the file wins for the names it lists; others are managed with
    /// AlterUserScramCredentials (`admin users`). Brokers check SASL logins (PLAIN ones too)
    /// against them and fetch them in their heartbeats, so use it with `--cluster-secret-file`:
    /// then only members can read them.
    #[arg(long)]
    scram_users_file: Option<std::path::PathBuf>,
    /// Authorize every client request by Kafka's ACLs (kept here, journaled; brokers check
    /// them): who may use which transactional id, topic and group. Needs
    /// `--cluster-secret-file`, since brokers relay their clients' requests and only a member
    /// may. While on, the own protocol serves cluster members, and clients that logged in
    /// (SCRAM) as far as the ACLs allow.
    #[arg(long, requires = "cluster_secret_file")]
    authorizer: bool,
    /// Principals that may do anything, `;`-separated (`User:admin;User:ops`).
    #[arg(long, requires = "authorizer", default_value = "")]
    super_users: String,
    /// Allow a request on a resource no ACL names (Kafka's allow.everyone.if.no.acl.found;
    /// default: refuse it).
    #[arg(long, requires = "authorizer")]
    allow_everyone_if_no_acl_found: bool,
    /// Replicas of a topic created without `--replicas` (default: min(3, live brokers)).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    default_replication_factor: Option<i32>,
    /// `min.insync.replicas` of a topic created without one: an acks=all write (and a
    /// transaction marker) needs this many in-sync replicas (default: 2 for topics of three or
    /// more replicas, else 1; never above the replication factor).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    default_min_insync_replicas: Option<i32>,
    /// Most partitions one topic may have (CreateTopics and auto-creation beyond it are refused
    /// with INVALID_PARTITIONS).
    #[arg(long, default_value_t = crate::cluster::TOPIC_PARTITIONS_MAX_DEFAULT, value_parser = clap::value_parser!(i32).range(1..))]
    topic_partitions_max: i32,
    /// Most partitions all topics together may have.
    #[arg(long, default_value_t = crate::cluster::CLUSTER_PARTITIONS_MAX_DEFAULT, value_parser = clap::value_parser!(i32).range(1..))]
    cluster_partitions_max: i32,
    /// The transaction version the brokers' Kafka listeners offer (KIP-890): 2, an epoch bump at
    /// every EndTxn v5, so a delayed write or EndTxn of one transaction cannot land in the next
    /// (with Produce v12, EndTxn v5 and TxnOffsetCommit v5, as Kafka 4 by default); or 1, none of
    /// those. Clients that speak only version 1 work under either.
    #[arg(long, default_value_t = crate::cluster::TRANSACTION_VERSION_DEFAULT, value_parser = clap::value_parser!(i16).range(1..=2))]
    transaction_version: i16,
    /// Forget a transactional id with no transaction open that sees no request for this long,
    /// in milliseconds (Kafka's `transactional.id.expiration.ms`). Its producer ids are never
    /// handed out again, and a producer that slept through it is refused when it wakes.
    #[arg(long, default_value_t = crate::table::TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    transactional_id_expiration_ms: u64,
    /// Most transactional ids held; an InitProducerId of a new one beyond is refused
    /// POLICY_VIOLATION.
    #[arg(long, default_value_t = crate::table::TRANSACTIONAL_IDS_MAX_DEFAULT as u64, value_parser = clap::value_parser!(u64).range(1..))]
    transactional_ids_max: u64,
    /// Forget a group with no members, and its committed offsets, after this long without a
    /// commit, in minutes (Kafka's `offsets.retention.minutes`).
    #[arg(long, default_value_t = 10_080, value_parser = clap::value_parser!(u64).range(1..))]
    offsets_retention_minutes: u64,
    /// Most groups held; a join or commit creating one beyond is refused POLICY_VIOLATION.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    groups_max: u64,
    /// Most committed offsets one group holds; a commit adding partitions beyond is refused
    /// POLICY_VIOLATION.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    group_offsets_max: u64,
    /// Most committed offsets all groups together hold; a commit adding partitions beyond is
    /// refused POLICY_VIOLATION.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    offsets_max: u64,
    /// How often idle transactional ids and empty groups are looked for, in milliseconds.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    expiry_check_interval_ms: u64,
    /// Snapshot the state and start a new journal after this many journal entries.
    #[arg(long, default_value_t = 100_000)]
    snapshot_every_entries: u64,
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
    /// How long an init or EndTxn waits for its markers before answering CONCURRENT_TRANSACTIONS, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    fence_wait_ms: u64,
    /// Serve Prometheus metrics at `GET /metrics` on this address.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Shortest session timeout a consumer group member may ask for, in milliseconds
    /// (Kafka's `group.min.session.timeout.ms`).
    #[arg(long, default_value_t = 6_000, value_parser = clap::value_parser!(i32).range(1..))]
    group_min_session_timeout_ms: i32,
    /// Longest session timeout a consumer group member may ask for, in milliseconds
    /// (Kafka's `group.max.session.timeout.ms`).
    #[arg(long, default_value_t = 1_800_000, value_parser = clap::value_parser!(i32).range(1..))]
    group_max_session_timeout_ms: i32,
    /// How long the first rebalance of an empty group waits for more members, in milliseconds
    /// (Kafka's `group.initial.rebalance.delay.ms`).
    #[arg(long, default_value_t = 3_000)]
    group_initial_rebalance_delay_ms: u64,
    /// A KIP-848 consumer group member (`group.protocol=consumer`) not heard from for this
    /// long is fenced, in milliseconds (Kafka's `group.consumer.session.timeout.ms`).
    #[arg(long, default_value_t = 45_000, value_parser = clap::value_parser!(u64).range(1..))]
    group_consumer_session_timeout_ms: u64,
    /// How often KIP-848 consumer group members are told to heartbeat, in milliseconds
    /// (Kafka's `group.consumer.heartbeat.interval.ms`).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    group_consumer_heartbeat_interval_ms: u64,
    /// Most members of one KIP-848 consumer group; a join beyond is refused
    /// GROUP_MAX_SIZE_REACHED (Kafka's `group.consumer.max.size`).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    group_consumer_max_size: u64,
    /// Accept transactional offset commits from any generation (no KIP-447 fence), and offset
    /// commits of KIP-848 consumer group members from any member epoch: for demonstrations of
    /// what a zombie worker does without it, never in production (heartbeats keep their checks).
    #[arg(long)]
    no_generation_fencing: bool,
    /// Append every fencing event (grants, fences, transaction ends with their markers,
    /// refusals, elections, ISR changes, group generations) to this file as JSON lines
    /// (docs/EVENTS.md), beside whatever else writes there.
    #[arg(long, value_name = "FILE")]
    events_file: Option<std::path::PathBuf>,
    /// This process's name in the events file (default: as the events file section of
    /// docs/EVENTS.md says).
    #[arg(long, value_name = "NAME", requires = "events_file")]
    events_name: Option<String>,
    /// Run as one of several coordinator replicas sharing this etcd (client URLs,
    /// comma-separated): at most one is active, the others stand by. Keeps the state in etcd
    /// instead of `--data-dir`. Needs a coordinator built with the cargo feature `etcd`.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// Every etcd key of this coordinator's replicas starts with this (one etcd can serve
    /// several clusters under different prefixes).
    #[arg(long, default_value = "/epochfence", requires = "etcd_endpoints")]
    etcd_prefix: String,
    /// The etcd lease a replica leads under, in milliseconds (rounded up to whole seconds):
    /// a replica that stops renewing it is replaced about this long after.
    #[arg(long, default_value_t = 2_000, requires = "etcd_endpoints")]
    etcd_lease_ms: u64,
    /// The address this replica publishes in etcd, which standbys name in NOT_COORDINATOR and
    /// brokers and clients follow (default: the bound `--listen` address; give it when
    /// listening on 0.0.0.0, or when clients reach the replica under another name).
    #[arg(long, value_name = "HOST:PORT", requires = "etcd_endpoints")]
    advertise: Option<String>,
    /// Deadline of one etcd request, in milliseconds: a journal write not answered by then
    /// is uncertain, and the replica steps down.
    #[arg(long, default_value_t = 5_000, requires = "etcd_endpoints")]
    etcd_timeout_ms: u64,
}

/// Run the process the command line `args` describes, until SIGINT or SIGTERM.
pub fn main(args: Args) -> anyhow::Result<()> {
    let events = match &args.events_file {
        Some(path) => {
            // Replicas on etcd are told apart by their addresses; a lone coordinator is "coordinator".
            let name = match (&args.events_name, args.etcd_endpoints.is_empty(), &args.advertise) {
                (Some(name), _, _) => name.clone(),
                (None, true, _) => "coordinator".to_string(),
                (None, false, Some(advertise)) => format!("coordinator {advertise}"),
                (None, false, None) => format!("coordinator {}", args.listen),
            };
            Some(
                net::events::EventsFile::open(path, &name)
                    .map_err(|e| anyhow::anyhow!("cannot open --events-file {}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    net::init_logging_with_events("info", events);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if !args.etcd_endpoints.is_empty() && !cfg!(feature = "etcd") {
        eprintln!(
            "--etcd-endpoints: this coordinator was built without etcd support; build it with the cargo feature \
             `etcd` (cargo build --release --features coordinator/etcd, which needs protoc: scripts/etcd installs it)"
        );
        std::process::exit(2);
    }
    let mut config = CoordinatorConfig::new(&args.data_dir);
    config.cluster.broker_lease_ms = args.broker_lease_ms;
    if args.group_min_session_timeout_ms > args.group_max_session_timeout_ms {
        eprintln!(
            "--group-min-session-timeout-ms {} is above --group-max-session-timeout-ms {}; give a min at most the max",
            args.group_min_session_timeout_ms, args.group_max_session_timeout_ms
        );
        std::process::exit(2);
    }
    config.groups.session_timeout_min_ms = args.group_min_session_timeout_ms;
    config.groups.session_timeout_max_ms = args.group_max_session_timeout_ms;
    config.groups.initial_rebalance_delay_ms = args.group_initial_rebalance_delay_ms;
    config.groups.generation_fencing = !args.no_generation_fencing;
    if args.no_generation_fencing {
        tracing::warn!(
            "--no-generation-fencing: transactional offset commits of stale group generations, and offset commits of \
             stale member epochs, are accepted"
        );
    }
    if args.group_consumer_heartbeat_interval_ms >= args.group_consumer_session_timeout_ms {
        eprintln!(
            "--group-consumer-heartbeat-interval-ms {} is not below --group-consumer-session-timeout-ms {}: members \
             would be fenced between heartbeats; give an interval below the session timeout",
            args.group_consumer_heartbeat_interval_ms, args.group_consumer_session_timeout_ms
        );
        std::process::exit(2);
    }
    config.groups.consumer.session_timeout_ms = args.group_consumer_session_timeout_ms;
    config.groups.consumer.heartbeat_interval_ms = args.group_consumer_heartbeat_interval_ms;
    config.groups.consumer.max_size = usize::try_from(args.group_consumer_max_size).unwrap_or(usize::MAX);
    config.cluster.default_partitions = args.default_partitions;
    config.cluster.auto_create_topics = !args.no_auto_create_topics;
    config.limits.frame_bytes_max = args.frame_bytes_max;
    config.limits.connections_max = args.connections_max;
    config.limits.member_connections_max = args.member_connections_max;
    config.fence_wait_ms = args.fence_wait_ms;
    config.snapshot_every_entries = args.snapshot_every_entries.max(1);
    config.table.transactional_id_expiration_ms = args.transactional_id_expiration_ms;
    config.table.transactional_ids_max = usize::try_from(args.transactional_ids_max).unwrap_or(usize::MAX);
    config.groups.offsets_retention_ms = args.offsets_retention_minutes.saturating_mul(60_000);
    config.groups.groups_max = usize::try_from(args.groups_max).unwrap_or(usize::MAX);
    config.groups.group_offsets_max = usize::try_from(args.group_offsets_max).unwrap_or(usize::MAX);
    config.groups.offsets_max = usize::try_from(args.offsets_max).unwrap_or(usize::MAX);
    config.expiry_check_interval_ms = args.expiry_check_interval_ms;
    config.cluster.default_replication_factor = args.default_replication_factor;
    config.cluster.default_min_insync_replicas = args.default_min_insync_replicas;
    config.cluster.topic_partitions_max = args.topic_partitions_max;
    config.cluster.cluster_partitions_max = args.cluster_partitions_max;
    config.cluster.transaction_version = args.transaction_version;
    config.limits.idle_ms = args.idle_ms;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.limits.tls = Some(net::tls::acceptor_from_files(cert, key)?);
    }
    config.peer_tls = args.tls_ca.as_deref().map(net::ClientTls::from_file).transpose()?;
    config.limits.cluster_secret =
        args.cluster_secret_file.as_deref().map(net::read_cluster_secret).transpose().map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.scram_users_file {
        config.scram_users = scram_users(path)?;
        tracing::info!(users = config.scram_users.len(), file = %path.display(), "SCRAM users read");
        if config.limits.cluster_secret.is_none() {
            tracing::warn!("--scram-users-file without --cluster-secret-file: anyone who can reach this listener can read the stored SCRAM keys (not the passwords) as brokers do");
        }
    }
    if args.authorizer {
        config.authorizer = Some(crate::acls::AuthorizerConfig {
            super_users: parse_super_users(&args.super_users)?,
            allow_everyone_if_no_acl_found: args.allow_everyone_if_no_acl_found,
        });
    }
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %args.data_dir.display(), "coordinator listening");
    // Scripts wait for this line to learn the bound address (useful with port 0).
    println!("coordinator listening on {addr}");
    let metrics_listener = match &args.metrics_listen {
        Some(metrics) => {
            let l = tokio::net::TcpListener::bind(metrics)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {metrics} (--metrics-listen): {e}"))?;
            println!("metrics listening on {}", l.local_addr()?);
            Some(l)
        }
        None => None,
    };
    // SIGINT or SIGTERM: stop cleanly (the journal is synced as it is written either way).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    #[cfg(feature = "etcd")]
    if !args.etcd_endpoints.is_empty() {
        let mut etcd = crate::etcd::EtcdConfig::new(args.etcd_endpoints.clone());
        etcd.prefix = args.etcd_prefix.trim_end_matches('/').to_string();
        etcd.lease_ms = args.etcd_lease_ms;
        etcd.request_timeout_ms = args.etcd_timeout_ms;
        etcd.advertise = args.advertise.clone();
        crate::etcd::run_replica(listener, metrics_listener, config, etcd, shutdown).await?;
        return Ok(());
    }
    crate::run_with_metrics(listener, metrics_listener, config, shutdown).await?;
    Ok(())
}

/// The users and passwords of a `--scram-users-file`.
fn scram_users(path: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read --scram-users-file {}: {e}", path.display()))?;
    protocol::sasl::parse_users_file(&text).map_err(|e| anyhow::anyhow!("--scram-users-file {}: {e}", path.display()))
}

/// `--super-users`: `Type:name` principals separated by `;` (blanks ignored).
fn parse_super_users(s: &str) -> anyhow::Result<Vec<String>> {
    s.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(p.to_string()),
            _ => Err(anyhow::anyhow!("--super-users: `{p}` is not a principal of the form User:name")),
        })
        .collect()
}
