//! The broker's tokio shell. Decisions live in [`crate::partition`] and the rule modules; this
//! file moves requests to them, asks the coordinator to verify producers and to change ISRs,
//! replicates to followers, and heartbeats.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use futures::StreamExt;
use net::{ClientTls, Connection, Dialer, ServerLimits};
use protocol::batch::{
    build_marker, validate_batch, verify_crc, BatchError, BatchHeader, MarkerKind, RecordError, TimestampLimits,
};
use protocol::{
    AddPartitionRequest, AlterPartitionRequest, DeleteRecordsRequest, DeleteRecordsResponse, ErrorCode, FetchRequest,
    FetchResponse, HeartbeatRequest, ProduceRequest, ProduceResponse, ReplicaReport, ReplicateRequest,
    ReplicateResponse, Request, Response, Status, WriteMarkerRequest, WriteMarkerResponse, ACKS_ALL, ACKS_LEADER,
};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::leader::LeaderEpochError;
use crate::log::LogConfig;
use crate::log_dir::LogDir;
use crate::metrics::Refusal;
use crate::partition::{
    AppendError, Appended, Committed, DeleteRecordsError, FetchError, Offer, Partition, PartitionRef, ReplicateError,
    RoleChange,
};
use crate::producer_state::{GateError, VerificationGuard};
use crate::replication::Sent;
use crate::storage::{OsStorage, Storage, StoredFile};

mod kafka;

pub use kafka::sasl::{
    parse_mechanisms, SaslConfig, SecurityProtocol,
    FAILED_AUTHENTICATION_DELAY_MS_DEFAULT as KAFKA_FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
};

/// When a broker makes its log writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Acknowledge (and let followers confirm) only after fdatasync. Concurrent writes share
    /// one fdatasync per partition (group commit).
    Always,
    /// fdatasync every N milliseconds; acknowledgements do not wait for it, so a machine crash
    /// can lose up to N ms of acknowledged writes on this replica.
    IntervalMs(u64),
    /// Never fdatasync; rely on replication (and the OS) for durability.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            other => other
                .strip_prefix("interval-ms=")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n > 0)
                .map(FsyncPolicy::IntervalMs)
                .ok_or_else(|| format!("fsync policy {other:?}: use always, never or interval-ms=N (N > 0)")),
        }
    }
}

/// Broker settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Broker id.
    pub id: i32,
    /// Directory holding one sub-directory per partition.
    pub data_dir: PathBuf,
    /// Coordinator address.
    pub coordinator: String,
    /// Address given to clients and peers; defaults to the listener's address.
    pub advertised_addr: Option<String>,
    /// Address Kafka clients are given for the Kafka listener (`--kafka-advertise`); defaults
    /// to that listener's address.
    pub kafka_advertised_addr: Option<String>,
    /// Largest `transaction.timeout.ms` a Kafka client may ask for in InitProducerId, in
    /// milliseconds (Kafka's `transaction.max.timeout.ms`); above it the init is refused with
    /// INVALID_TRANSACTION_TIMEOUT. The coordinator's own maximum applies too.
    pub transaction_max_timeout_ms: i32,
    /// How long a Kafka connection's relay connection to the coordinator stays open without
    /// use, in milliseconds (then it is closed, and dialled again when needed).
    pub kafka_relay_idle_ms: u64,
    /// The Kafka listener's `security.protocol`; `None`: SSL when `limits.tls` is set, else
    /// PLAINTEXT.
    pub kafka_security_protocol: Option<SecurityProtocol>,
    /// The Kafka listener's SASL mechanisms and failed-login delay, used under SASL_PLAINTEXT
    /// and SASL_SSL.
    pub kafka_sasl: SaslConfig,
    /// Mutual TLS on the Kafka listener: its own TLS acceptor, which requires a client
    /// certificate signed by the `--tls-client-ca` CAs (under SSL and SASL_SSL; `None`: the
    /// broker's `limits.tls`, no client certificates).
    pub kafka_mtls: Option<net::tls::MutualTls>,
    /// How an SSL client's certificate subject names its principal (Kafka's
    /// `ssl.principal.mapping.rules`; under SASL_SSL the SASL login names it).
    pub ssl_principal_mapping: protocol::principal::PrincipalMapper,
    /// Producer fencing on (the default). Off only to demonstrate and measure what it prevents.
    pub fencing: bool,
    /// Followers refuse replication from other leader epochs (the default). Off only to
    /// demonstrate what stale-leader fencing prevents.
    pub leader_epoch_checks: bool,
    /// Interval between heartbeats, in milliseconds; also how often an idle leader pings
    /// its followers.
    pub heartbeat_ms: u64,
    /// Deadline for a verification call to the coordinator, in milliseconds.
    pub verify_timeout_ms: u64,
    /// How long an acks=all produce or a marker waits for the in-sync replicas, in milliseconds.
    pub request_timeout_ms: u64,
    /// A follower not caught up for this long leaves the ISR, in milliseconds.
    pub replica_lag_ms: u64,
    /// Most bytes one Replicate request carries.
    pub replication_bytes_max: usize,
    /// Most Replicate requests in flight to one follower for one partition (1: each waits for
    /// the answer to the one before). A batch appended while others travel goes out at once.
    pub replication_inflight_max: usize,
    /// Largest record batch a producer may send, in bytes.
    pub batch_bytes_max: usize,
    /// Most bytes a compressed batch's records may decompress to (they are checked before the
    /// batch is stored as it came); more is refused with MESSAGE_TOO_LARGE.
    pub decompressed_batch_bytes_max: usize,
    /// How far ahead of the broker's clock a record's timestamp may be, in ms (Kafka's
    /// `log.message.timestamp.after.max.ms`; `None`: any).
    pub message_timestamp_after_max_ms: Option<u64>,
    /// How far behind the broker's clock a record's timestamp may be, in ms (`None`: any).
    pub message_timestamp_before_max_ms: Option<u64>,
    /// The Kafka broker configs set on the command line (`log.segment.bytes`, ...):
    /// DescribeConfigs reports them, and the topic configs they are the defaults of, as
    /// STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG.
    pub configs_given: Vec<&'static str>,
    /// When log writes are made durable.
    pub fsync: FsyncPolicy,
    /// Segment size and retention of every partition log.
    pub log: LogConfig,
    /// Where partition logs are stored (the operating system's files).
    pub storage: Arc<dyn Storage>,
    /// How often retention runs, in milliseconds.
    pub retention_check_ms: u64,
    /// A producer id that writes nothing to a partition for this long is forgotten there, in
    /// milliseconds (Kafka's `producer.id.expiration.ms`, 1 day); its next write is checked
    /// with the coordinator first.
    pub producer_id_expiration_ms: u64,
    /// How often idle producer ids are looked for, in milliseconds (Kafka's
    /// `producer.id.expiration.check.interval.ms`).
    pub producer_id_expiration_check_interval_ms: u64,
    /// How often each partition's high watermark is checkpointed to its directory, in ms
    /// (Kafka's `replica.high.watermark.checkpoint.interval.ms`): a restarted leader serves what
    /// was committed up to it at once, and a log found shorter than it has lost records.
    pub high_watermark_checkpoint_interval_ms: u64,
    /// Connection limits, the cluster secret and this listener's TLS certificate.
    pub limits: ServerLimits,
    /// Dial other members over TLS, trusting these CAs.
    pub peer_tls: Option<ClientTls>,
}

/// Default [`BrokerConfig::producer_id_expiration_ms`]: 1 day, as Kafka's.
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;

impl BrokerConfig {
    /// Defaults for broker `id` with data in `data_dir`, registering with `coordinator`.
    pub fn new(id: i32, data_dir: impl Into<PathBuf>, coordinator: impl Into<String>) -> Self {
        BrokerConfig {
            id,
            data_dir: data_dir.into(),
            coordinator: coordinator.into(),
            advertised_addr: None,
            kafka_advertised_addr: None,
            transaction_max_timeout_ms: TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
            kafka_relay_idle_ms: KAFKA_RELAY_IDLE_MS_DEFAULT,
            kafka_security_protocol: None,
            kafka_sasl: SaslConfig::default(),
            kafka_mtls: None,
            ssl_principal_mapping: protocol::principal::PrincipalMapper::default(),
            fencing: true,
            leader_epoch_checks: true,
            heartbeat_ms: 300,
            verify_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            replica_lag_ms: 10_000,
            replication_bytes_max: 1024 * 1024,
            replication_inflight_max: REPLICATION_INFLIGHT_MAX_DEFAULT,
            batch_bytes_max: 1024 * 1024,
            decompressed_batch_bytes_max: protocol::batch::DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT,
            message_timestamp_after_max_ms: Some(MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT),
            message_timestamp_before_max_ms: None,
            configs_given: Vec::new(),
            fsync: FsyncPolicy::Always,
            log: LogConfig::default(),
            storage: Arc::new(OsStorage),
            retention_check_ms: 60_000,
            producer_id_expiration_ms: PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            producer_id_expiration_check_interval_ms: 600_000,
            high_watermark_checkpoint_interval_ms: 5_000,
            limits: ServerLimits::default(),
            peer_tls: None,
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {detail}")]
    DataDir {
        /// Directory.
        path: String,
        /// OS error.
        detail: String,
    },
    /// The listener's address could not be read.
    #[error("listener: {0}")]
    Listener(String),
}

/// Most bytes one fetch returns (beyond its first batch).
pub const FETCH_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Default of [`BrokerConfig::transaction_max_timeout_ms`]: 15 minutes, as Kafka's.
pub const TRANSACTION_MAX_TIMEOUT_MS_DEFAULT: i32 = 15 * 60 * 1000;

/// Default of [`BrokerConfig::kafka_relay_idle_ms`]: 10 seconds.
pub const KAFKA_RELAY_IDLE_MS_DEFAULT: u64 = 10_000;

/// Default of [`BrokerConfig::message_timestamp_after_max_ms`]: one hour, as Kafka 4.0's.
pub const MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT: u64 = 3_600_000;

/// Counters a test or demonstration can read.
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Replicate requests this broker sent as a leader.
    pub replicate_requests_sent: AtomicU64,
    /// Of those, the ones with batches that were sent from the batches the leader keeps in
    /// memory (`replication_cache_bytes_max`) rather than read back from its log file.
    pub replicate_requests_from_memory: AtomicU64,
    /// Of those, the ones with batches read back from the log file.
    pub replicate_requests_from_file: AtomicU64,
    /// Replicate answers this broker received as a leader saying the follower's log does not
    /// match where the request started (OFFSET_OUT_OF_RANGE).
    pub replicate_answers_diverged: AtomicU64,
    /// Replicate requests this broker sent that a follower refused by leader epoch.
    pub replication_refused_by_epoch: AtomicU64,
    /// Replicate requests this broker received and refused by leader epoch.
    pub replication_refusals_sent: AtomicU64,
    /// Relay connections from Kafka connections to the coordinator open now (one per Kafka
    /// connection that has relayed a request in the last `kafka_relay_idle_ms`).
    pub kafka_relay_connections: AtomicU64,
    /// The Prometheus metrics (`--metrics-listen`).
    pub metrics: crate::metrics::BrokerMetrics,
}

/// Switches that freeze a broker in place, as a long GC pause or SIGSTOP would: requests,
/// replication and heartbeats stop being processed (nothing is dropped; they wait).
#[derive(Clone)]
pub struct BrokerControl {
    paused: watch::Receiver<bool>,
    heartbeats_paused: watch::Receiver<bool>,
    /// Counters.
    pub stats: Arc<BrokerStats>,
}

/// The sending side of [`BrokerControl`].
pub struct BrokerSwitch {
    paused: watch::Sender<bool>,
    heartbeats_paused: watch::Sender<bool>,
    /// Counters.
    pub stats: Arc<BrokerStats>,
}

impl BrokerSwitch {
    /// A switch and the control to hand to [`run_with`].
    pub fn new() -> (BrokerSwitch, BrokerControl) {
        let (p_tx, p_rx) = watch::channel(false);
        let (h_tx, h_rx) = watch::channel(false);
        let stats = Arc::new(BrokerStats::default());
        (
            BrokerSwitch { paused: p_tx, heartbeats_paused: h_tx, stats: stats.clone() },
            BrokerControl { paused: p_rx, heartbeats_paused: h_rx, stats },
        )
    }

    /// Freeze everything.
    pub fn freeze(&self) {
        self.heartbeats_paused.send_replace(true);
        self.paused.send_replace(true);
    }

    /// Resume request handling and replication, but not heartbeats: the broker acts on what
    /// it believed before the pause, as a process does in the moment after it wakes.
    pub fn wake_without_heartbeats(&self) {
        self.paused.send_replace(false);
    }

    /// Resume everything.
    pub fn thaw(&self) {
        self.paused.send_replace(false);
        self.heartbeats_paused.send_replace(false);
    }
}

impl BrokerControl {
    /// A control that never pauses.
    pub fn running() -> BrokerControl {
        BrokerSwitch::new().1
    }
}

async fn wait_while(rx: &watch::Receiver<bool>) {
    let mut rx = rx.clone();
    while *rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// A replica whose log could not be opened ([`Shared`]'s `unopened`).
struct Unopened {
    /// Why, for the heartbeat's problem report.
    why: String,
    /// The topic id its directory records (0: none), for the heartbeat's report.
    topic_id: u128,
}

struct Shared {
    config: BrokerConfig,
    addr: String,
    /// The Kafka listener's advertised address, if this broker runs one.
    kafka_addr: Option<String>,
    /// How this broker dials the coordinator and other brokers (TLS, membership proof).
    dialer: Dialer,
    /// Random, new at every start: tells the coordinator this process is not the one before.
    incarnation: i64,
    /// The data directory's id, and whether its logs hold everything the previous process
    /// acknowledged (the coordinator keeps a restarted replica in sync only then).
    log_dir: Arc<LogDir>,
    /// The broker epoch the coordinator assigned this process (-1 until its first heartbeat is
    /// answered): every heartbeat carries it, so one from an older process is told apart.
    broker_epoch: std::sync::atomic::AtomicI64,
    partitions: DashMap<(String, i32), PartitionRef>,
    /// The topic id each hosted partition belongs to (0: not known yet), as its directory's
    /// `topic.id` records it.
    topic_ids: DashMap<(String, i32), u128>,
    /// Replicas whose log could not be opened, with why: reported offline (Kafka's offline log
    /// directory, KIP-112) until this process ends, so that a healthy replica leads instead.
    unopened: DashMap<(String, i32), Unopened>,
    /// Cached connection to the coordinator; never held across an `.await`.
    coordinators: net::Coordinators,
    /// Connections to other brokers, by address; never held across an `.await`.
    peers: Mutex<HashMap<String, Connection>>,
    /// Broker addresses from the last heartbeat; never held across an `.await`.
    broker_addrs: Mutex<HashMap<i32, String>>,
    /// Wakes the heartbeat loop early (a request showed this broker is behind).
    refresh: Notify,
    /// Wakes the flusher: something was written that a reply waits to see durable.
    flush: Notify,
    started: Instant,
    control: BrokerControl,
    stop: watch::Receiver<bool>,
    /// Set once the coordinator first answers a heartbeat. The Kafka listener serves only
    /// then (as a Kafka broker enables request processing once registered): before it, its
    /// Metadata would list no broker and a CreateTopics would find none to place replicas on.
    registered: watch::Sender<bool>,
    /// The transaction version the Kafka listener offers and its finalized-features epoch, as
    /// the coordinator's heartbeat answers say ((0, -1) until the first: version 1 is offered).
    transaction_version: Mutex<(i16, i64)>,
    /// The SCRAM credentials the Kafka listener checks SASL logins against, as the coordinator
    /// last sent them.
    credentials: kafka::sasl::CredentialCache,
    /// The authorizer's settings and ACLs the Kafka listener checks requests against, as the
    /// coordinator last sent them.
    authorization: kafka::authz::AuthorizationCache,
    /// Checks that a producer id belongs to its writer (under the authorizer; with the
    /// cluster secret).
    pid_binder: Option<protocol::auth::ProducerIdBinder>,
}

/// The broker's own-protocol client logins: the coordinator's credentials and ACLs as this
/// broker last heard them (see [`net::ClientLogins`]).
struct OwnLogins(Arc<Shared>);

impl net::ClientLogins for OwnLogins {
    fn credential(
        &self,
        user: &str,
        mechanism: protocol::sasl::ScramMechanism,
    ) -> Result<Option<protocol::sasl::ScramCredential>, Status> {
        Ok(self.0.credentials.lookup(user, mechanism))
    }

    fn authorizer(&self) -> Option<Arc<protocol::acl::Authorizer>> {
        Some(self.0.authorization.current())
    }

    fn binder(&self) -> Option<&protocol::auth::ProducerIdBinder> {
        self.0.pid_binder.as_ref()
    }
}

impl Shared {
    /// The transaction version the Kafka listener offers (1 until the coordinator says) and its
    /// finalized-features epoch (-1 until then).
    fn transaction_version(&self) -> (i16, i64) {
        let (level, epoch) = *self.transaction_version.lock().unwrap_or_else(|e| e.into_inner());
        (level.max(1), epoch)
    }

    /// The Kafka listener's security protocol (resolved at start).
    fn kafka_security(&self) -> SecurityProtocol {
        self.config.kafka_security_protocol.unwrap_or(SecurityProtocol::Plaintext)
    }

    /// The Kafka listener's SASL settings, if it uses SASL.
    fn kafka_sasl(&self) -> Option<&SaslConfig> {
        self.kafka_security().sasl().then_some(&self.config.kafka_sasl)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    async fn running(&self) {
        wait_while(&self.control.paused).await;
    }
}

/// Serve on `listener` until `shutdown`, heartbeating to the coordinator meanwhile.
pub async fn run(
    listener: TcpListener,
    config: BrokerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), BrokerError> {
    run_with(listener, config, BrokerControl::running(), shutdown).await
}

/// [`run`] with pause switches (for demonstrations and tests of paused processes).
pub async fn run_with(
    listener: TcpListener,
    config: BrokerConfig,
    control: BrokerControl,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), BrokerError> {
    run_listeners(listener, None, config, control, shutdown).await
}

/// [`run_with`], also serving the Kafka protocol on `kafka_listener` (under the same limits,
/// TLS and cluster secret as `listener`).
pub async fn run_listeners(
    listener: TcpListener,
    kafka_listener: Option<TcpListener>,
    config: BrokerConfig,
    control: BrokerControl,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), BrokerError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| BrokerError::DataDir { path: config.data_dir.display().to_string(), detail: e.to_string() })?;
    let log_dir = LogDir::open(&config.data_dir, config.fsync == FsyncPolicy::Always)
        .map_err(|e| BrokerError::DataDir { path: config.data_dir.display().to_string(), detail: e.to_string() })?;
    tracing::info!(log_dir_id = log_dir.id, intact = log_dir.intact, "data directory opened");
    let mut config = config;
    let security = config.kafka_security_protocol.unwrap_or(if config.limits.tls.is_some() {
        SecurityProtocol::Ssl
    } else {
        SecurityProtocol::Plaintext
    });
    if security.tls() && config.limits.tls.is_none() {
        return Err(BrokerError::Listener(format!("the Kafka listener's {security} needs a TLS certificate and key")));
    }
    config.kafka_security_protocol = Some(security);
    // The connection layer's deadline must outlast the broker's own waits (acks=all, verification).
    config.limits.request_timeout_ms =
        config.limits.request_timeout_ms.max(config.request_timeout_ms + config.verify_timeout_ms + 1_000);
    let local = listener.local_addr().map_err(|e| BrokerError::Listener(e.to_string()))?;
    let addr = config.advertised_addr.clone().unwrap_or_else(|| local.to_string());
    let kafka_addr = match &kafka_listener {
        Some(l) => {
            let local = l.local_addr().map_err(|e| BrokerError::Listener(e.to_string()))?;
            Some(config.kafka_advertised_addr.clone().unwrap_or_else(|| local.to_string()))
        }
        None => None,
    };
    tracing::info!(broker_id = config.id, %addr, fencing = config.fencing, "broker starting");
    let (stop_tx, stop_rx) = watch::channel(false);
    if config.limits.cluster_secret.is_none() {
        tracing::warn!(
            "no cluster secret: replication, markers and heartbeats are accepted from anyone who can connect"
        );
    }
    let shared = Arc::new(Shared {
        addr,
        kafka_addr,
        incarnation: {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).expect("the operating system's random source works");
            i64::from_be_bytes(b) & i64::MAX
        },
        log_dir: Arc::new(log_dir),
        broker_epoch: std::sync::atomic::AtomicI64::new(-1),
        dialer: Dialer {
            tls: config.peer_tls.clone(),
            secret: config.limits.cluster_secret.clone(),
            member: format!("broker-{}", config.id),
            login: None,
        },
        partitions: DashMap::new(),
        topic_ids: DashMap::new(),
        unopened: DashMap::new(),
        coordinators: net::Coordinators::new(&config.coordinator),
        peers: Mutex::new(HashMap::new()),
        broker_addrs: Mutex::new(HashMap::new()),
        refresh: Notify::new(),
        flush: Notify::new(),
        started: Instant::now(),
        control,
        stop: stop_rx.clone(),
        registered: watch::Sender::new(false),
        transaction_version: Mutex::new((0, -1)),
        credentials: kafka::sasl::CredentialCache::new(config.kafka_sasl.plain_checks_per_s_max),
        authorization: kafka::authz::AuthorizationCache::default(),
        pid_binder: config.limits.cluster_secret.as_ref().map(protocol::auth::ProducerIdBinder::new),
        config: config.clone(),
    });
    // Every replica on disk is opened before the first heartbeat, which reports what each
    // holds: one that lost records at the restart, or cannot open, must not be left to lead.
    let opening = shared.clone();
    tokio::task::spawn_blocking(move || open_existing(&opening))
        .await
        .map_err(|e| BrokerError::DataDir { path: config.data_dir.display().to_string(), detail: e.to_string() })?;
    let heartbeats = tokio::spawn(heartbeat_loop(shared.clone()));
    let flusher = tokio::spawn(flush_loop(shared.clone()));
    let retention = tokio::spawn(retention_loop(shared.clone()));
    let producer_expiry = tokio::spawn(producer_expiry_loop(shared.clone()));
    let checkpoints = tokio::spawn(high_watermark_loop(shared.clone()));
    let handler_shared = shared.clone();
    let handler: net::Handler = Arc::new(move |req| {
        if !*handler_shared.control.paused.borrow() {
            return handle(&handler_shared, req);
        }
        // Paused (a test's freeze): the request waits, and the connection's later ones behind it.
        let shared = handler_shared.clone();
        net::Handled::serial(async move {
            shared.running().await;
            match handle(&shared, req) {
                net::Handled::Applied(answer) | net::Handled::Serial(answer) => answer.await,
            }
        })
    });
    let group_shared = shared.clone();
    let group: net::GroupHandler = Arc::new(move |requests| {
        if *group_shared.control.paused.borrow() {
            return Vec::new(); // each alone, through `handler`
        }
        handle_group(&group_shared, requests)
    });
    // One shutdown for both listeners.
    let (down_tx, down_rx) = watch::channel(false);
    let down = |rx: watch::Receiver<bool>| async move {
        let _ = rx.clone().wait_for(|down| *down).await;
    };
    // Own-protocol clients log in with the credentials and are authorized by the ACLs the
    // Kafka listener uses.
    let own_limits =
        net::ServerLimits { client_logins: Some(Arc::new(OwnLogins(shared.clone()))), ..config.limits.clone() };
    let own = net::serve_grouped(listener, handler, Some(group), own_limits, down(down_rx.clone()));
    let kafka = async {
        if let Some(l) = kafka_listener {
            // A JoinGroup waits for its rebalance: the deadline outlasts the longest.
            let mut limits = config.limits.clone();
            limits.request_timeout_ms = limits.request_timeout_ms.max(kafka::GROUP_WAIT_MS_MAX + 5_000);
            // No cluster member speaks Kafka.
            limits.member_connections_max = 0;
            if !shared.kafka_security().tls() {
                limits.tls = None;
            } else if let Some(mtls) = &shared.config.kafka_mtls {
                limits.tls = Some(mtls.0.clone());
            }
            net::serve_protocol::<kafka::KafkaWire>(l, kafka::handlers(&shared), limits, down(down_rx)).await;
        }
    };
    tokio::join!(
        async {
            shutdown.await;
            let _ = down_tx.send(true);
        },
        own,
        kafka
    );
    let _ = stop_tx.send(true);
    let _ = heartbeats.await;
    let _ = flusher.await;
    let _ = retention.await;
    let _ = producer_expiry.await;
    let _ = checkpoints.await;
    // A clean shutdown: sync every log and snapshot its producer state, so the next start
    // replays nothing.
    let parts: Vec<PartitionRef> = shared.partitions.iter().map(|p| p.clone()).collect();
    let log_dir = shared.log_dir.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let mut clean = true;
        for p in parts {
            if let Err(e) = p.checkpoint() {
                clean = false;
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "no clean-shutdown checkpoint");
            }
        }
        // Only once every log is synced: the next process then counts as intact.
        if clean {
            if let Err(e) = log_dir.mark_clean() {
                tracing::warn!(error = %e, "could not record the clean shutdown");
            }
        }
    })
    .await;
    Ok(())
}

/// Open every partition directory in the data directory (`TOPIC-N`, with its `topic.id`):
/// a replica that cannot open is kept in `unopened` with why, and reported offline. Under
/// `--fsync always`, a directory the previous process did not vouch for (it ran under `never`
/// and did not stop cleanly) has every log synced before the directory is recorded as synced.
fn open_existing(shared: &Shared) {
    let entries = match std::fs::read_dir(&shared.config.data_dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!(dir = %shared.config.data_dir.display(), error = %e, "cannot list the data directory");
            return;
        }
    };
    let mut all_synced = true;
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((topic, index)) =
            name.rsplit_once('-').and_then(|(t, i)| Some((t.to_string(), i.parse::<i32>().ok()?)))
        else {
            continue;
        };
        if index < 0 || protocol::names::validate_topic(&topic).is_err() {
            continue;
        }
        let key = (topic, index);
        let topic_id = stored_topic_id(&*shared.config.storage, &entry.path());
        match open_partition(shared, &key) {
            Ok(p) => {
                if shared.config.fsync == FsyncPolicy::Always && !shared.log_dir.vouched() {
                    if let Err(e) = p.sync_all() {
                        tracing::error!(topic = %key.0, partition = key.1, error = %e, "cannot sync a log written without syncs");
                        all_synced = false;
                    }
                }
                p.set_topic_id(topic_id);
                shared.topic_ids.insert(key.clone(), topic_id);
                shared.partitions.insert(key, Arc::new(p));
            }
            Err(e) => {
                tracing::error!(topic = %key.0, partition = key.1, error = %e, "cannot open partition: reporting it offline");
                shared.unopened.insert(key, Unopened { why: e.to_string(), topic_id });
            }
        }
    }
    if shared.config.fsync == FsyncPolicy::Always && !shared.log_dir.vouched() && all_synced {
        if let Err(e) = shared.log_dir.mark_synced() {
            tracing::warn!(error = %e, "could not record that every log is synced");
        }
    }
}

/// Open the replica `key` in its directory under the data directory, with this broker's log
/// settings.
fn open_partition(shared: &Shared, key: &(String, i32)) -> Result<Partition, crate::log::LogError> {
    let dir = partition_dir(shared, key);
    let mut config = shared.config.log;
    config.sync_on_roll = shared.config.fsync != FsyncPolicy::Never;
    let p = Partition::open_with(
        shared.config.storage.clone(),
        &dir,
        config,
        &key.0,
        key.1,
        shared.config.id,
        shared.config.fencing,
    )?;
    // Under `--fsync always` nothing is committed before it is on disk on every ISR member,
    // the leader included.
    p.set_sync_before_commit(shared.config.fsync == FsyncPolicy::Always);
    Ok(p)
}

/// The directory of replica `key` under the data directory.
fn partition_dir(shared: &Shared, key: &(String, i32)) -> std::path::PathBuf {
    shared.config.data_dir.join(format!("{}-{}", key.0, key.1))
}

/// The topic id this broker knows replica `key` by (0: none).
fn known_topic_id(shared: &Shared, key: &(String, i32)) -> u128 {
    shared.topic_ids.get(key).map_or(0, |id| *id)
}

/// Every `high_watermark_checkpoint_interval_ms`, checkpoint each partition's high watermark
/// that moved (see [`Partition::checkpoint_high_watermark`]).
async fn high_watermark_loop(shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(shared.config.high_watermark_checkpoint_interval_ms)) => {}
            _ = stop.changed() => return,
        }
        let parts: Vec<PartitionRef> = shared.partitions.iter().map(|p| p.clone()).collect();
        let _ = tokio::task::spawn_blocking(move || {
            for p in parts {
                if let Err(e) = p.checkpoint_high_watermark() {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot checkpoint the high watermark");
                }
            }
        })
        .await;
    }
}

/// Retention: every `retention_check_ms`, delete the closed segments each partition's log
/// settings allow, and those wholly below the start DeleteRecords set.
async fn retention_loop(shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(shared.config.retention_check_ms)) => {}
            _ = stop.changed() => return,
        }
        let parts: Vec<PartitionRef> = shared.partitions.iter().map(|p| p.clone()).collect();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let _ = tokio::task::spawn_blocking(move || {
            for p in parts {
                if let Err(e) = p.enforce_retention(now_ms) {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed");
                }
            }
        })
        .await;
    }
}

/// Producer-id expiry: every `producer_id_expiration_check_interval_ms`, each partition forgets
/// the producer ids idle for `producer_id_expiration_ms` ([`Partition::expire_producers`]).
async fn producer_expiry_loop(shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    let period = Duration::from_millis(shared.config.producer_id_expiration_check_interval_ms.max(1));
    let started = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        let now_ms = started.elapsed().as_millis() as u64;
        let expiration_ms = shared.config.producer_id_expiration_ms;
        let mut expired = 0;
        for p in shared.partitions.iter() {
            let n = p.expire_producers(now_ms, expiration_ms);
            if n > 0 {
                tracing::info!(topic = %p.topic, partition = p.index, producer_ids = n, "idle producer ids expired");
            }
            expired += n;
        }
        shared.control.stats.metrics.producer_ids_expired.inc_by(expired as u64);
    }
}

/// The flusher: fdatasync every partition that has undurable writes, then tell the waiters.
/// Writes that arrive while a sync runs are covered by the next one: with `--fsync always`
/// concurrent producers share syncs (group commit) instead of paying one each.
async fn flush_loop(shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    let period = match shared.config.fsync {
        FsyncPolicy::Never => return,
        FsyncPolicy::IntervalMs(ms) => Duration::from_millis(ms),
        FsyncPolicy::Always => Duration::from_millis(1_000),
    };
    loop {
        let targets: Vec<(PartitionRef, i64, Arc<dyn StoredFile>, u64)> = shared
            .partitions
            .iter()
            .filter_map(|p| p.sync_target().map(|(end, file, generation)| (p.clone(), end, file, generation)))
            .collect();
        for (part, end, file, generation) in targets {
            let at = Instant::now();
            let synced = tokio::task::spawn_blocking(move || file.sync_data()).await;
            shared.control.stats.metrics.fsync_latency.observe(at.elapsed().as_secs_f64());
            match synced {
                Ok(Ok(())) => part.mark_durable(end, generation),
                Ok(Err(e)) => part.storage_failed(format!("fdatasync failed: {e}")),
                Err(e) => part.storage_failed(format!("fdatasync task failed: {e}")),
            }
        }
        tokio::select! {
            _ = shared.flush.notified(), if shared.config.fsync == FsyncPolicy::Always => {}
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}

/// With `--fsync always`, wait until everything below `end_offset` is on disk.
async fn wait_durable(shared: &Shared, part: &Partition, end_offset: i64) -> Result<(), Status> {
    wait_durable_at(shared, part, end_offset, None).await
}

/// [`wait_durable`] for what a follower applied at cut generation `generation`: refused if the
/// log is cut meanwhile (a newer leader's push), since the offsets below `end_offset` may then
/// hold that leader's batches, not the ones this answer would acknowledge.
async fn wait_durable_at(
    shared: &Shared,
    part: &Partition,
    end_offset: i64,
    generation: Option<u64>,
) -> Result<(), Status> {
    if shared.config.fsync != FsyncPolicy::Always {
        return Ok(());
    }
    let mut progress = part.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.request_timeout_ms);
    loop {
        let durable = match generation {
            None => part.is_durable(end_offset),
            Some(g) => part.durable_at(end_offset, g).ok_or_else(|| {
                Status::new(
                    ErrorCode::NotLeaderOrFollower,
                    format!(
                        "{}-{}: the log was cut below offset {end_offset} while this acknowledgement waited for \
                         the disk (a newer leader's push); resend",
                        part.topic, part.index
                    ),
                )
            })?,
        };
        if durable {
            return Ok(());
        }
        if part.log_failed() {
            return Err(Status::new(
                ErrorCode::KafkaStorageError,
                format!(
                    "{}-{}: this broker's log failed (an fdatasync error) before the write was on disk; retry at \
                     the partition's leader (the failed replica gives up its leadership)",
                    part.topic, part.index
                ),
            ));
        }
        shared.flush.notify_one();
        tokio::select! {
            changed = progress.changed() => {
                if changed.is_err() {
                    return Err(Status::new(ErrorCode::KafkaStorageError, "partition closed"));
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(Status::new(
                    ErrorCode::KafkaStorageError,
                    format!("{}-{}: the write was not made durable within {} ms (fdatasync failing?)", part.topic, part.index, shared.config.request_timeout_ms),
                ))
            }
        }
    }
}

fn cached(map: &Mutex<HashMap<String, Connection>>, addr: &str) -> Option<Connection> {
    map.lock().unwrap_or_else(|p| p.into_inner()).get(addr).filter(|c| !c.is_closed()).cloned()
}

/// Call the active coordinator replica (following NOT_COORDINATOR to it) within `timeout`.
async fn call_coordinator(shared: &Shared, req: Request, timeout: Duration) -> Result<Response, net::NetError> {
    shared.coordinators.call(&shared.dialer, req, timeout).await
}

/// A coordinator at `epoch` sent a request or an answer: refuse it if a newer coordinator
/// replica has been seen (a deposed one's), and record a newer epoch durably before acting on
/// what it says, so no restart forgets it.
async fn check_coordinator_epoch(shared: &Shared, epoch: i32) -> Result<(), Status> {
    let highest = shared.log_dir.coordinator_epoch();
    if epoch < highest {
        return Err(Status::new(
            ErrorCode::TransactionCoordinatorFenced,
            format!(
                "coordinator epoch {epoch} is older than {highest}, the newest this broker has seen: a deposed coordinator \
                 replica. If the coordinator's state was reset on purpose (a new etcd, or back to a local journal), stop \
                 this broker and remove the coordinator_epoch line of its {}",
                crate::log_dir::META_FILE
            ),
        ));
    }
    if epoch > highest {
        let log_dir = shared.log_dir.clone();
        let recorded = tokio::task::spawn_blocking(move || log_dir.record_coordinator_epoch(epoch)).await;
        if !matches!(recorded, Ok(Ok(()))) {
            return Err(Status::new(
                ErrorCode::KafkaStorageError,
                format!("cannot record coordinator epoch {epoch} in {}; not acting on it", crate::log_dir::META_FILE),
            ));
        }
        tracing::info!(coordinator_epoch = epoch, previous = highest, "following a new coordinator epoch");
    }
    Ok(())
}

async fn peer(shared: &Shared, addr: &str) -> Result<Connection, net::NetError> {
    if let Some(c) = cached(&shared.peers, addr) {
        return Ok(c);
    }
    let c = shared.dialer.dial(addr).await?;
    shared.peers.lock().unwrap_or_else(|p| p.into_inner()).insert(addr.to_string(), c.clone());
    Ok(c)
}

async fn heartbeat_loop(shared: Arc<Shared>) {
    let interval = Duration::from_millis(shared.config.heartbeat_ms);
    let mut stop = shared.stop.clone();
    loop {
        tokio::select! {
            _ = async {
                wait_while(&shared.control.heartbeats_paused).await;
                shared.running().await;
            } => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = heartbeat(&shared).await {
            tracing::warn!(error = %e, "heartbeat to the coordinator failed; retrying");
        }
        maintain_isr(&shared).await;
        let readings = shared.partitions.iter().map(|p| (p.key().clone(), p.reading())).collect::<Vec<_>>();
        shared.control.stats.metrics.refresh(readings);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shared.refresh.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn heartbeat(shared: &Arc<Shared>) -> Result<(), String> {
    let replicas = shared
        .partitions
        .iter()
        .map(|p| {
            let (log_end_offset, high_watermark) = p.progress();
            let lost = p.lost();
            let offline = p.log_failed();
            let refusing = p.refusing();
            ReplicaReport {
                topic: p.topic.clone(),
                partition: p.index,
                log_end_offset,
                high_watermark,
                offline,
                lost: lost.is_some(),
                refused_leader_epoch: refusing.as_ref().map_or(-1, |(epoch, _)| *epoch),
                lost_reported_at: p.lost_reported_at(),
                problem: match (offline, lost, refusing) {
                    (true, ..) => {
                        "offline: its log failed (a write or fdatasync error); it takes no writes".to_string()
                    }
                    (false, Some(why), _) => format!("lost: {why}"),
                    (false, None, Some((_, why))) => format!("refusing: {why}"),
                    (false, None, None) => String::new(),
                },
                topic_id: known_topic_id(shared, &(p.topic.clone(), p.index)),
            }
        })
        .chain(shared.unopened.iter().map(|u| ReplicaReport {
            topic: u.key().0.clone(),
            partition: u.key().1,
            log_end_offset: -1,
            high_watermark: -1,
            offline: true,
            lost: false,
            problem: format!("offline: its log cannot be opened: {}", u.value().why),
            topic_id: u.value().topic_id,
            refused_leader_epoch: -1,
            lost_reported_at: -1,
        }))
        .collect::<Vec<ReplicaReport>>();
    // Lost replicas no registration has reported yet: if this heartbeat registers, it does.
    let reporting_lost: Vec<(String, i32)> =
        replicas.iter().filter(|r| r.lost && r.lost_reported_at < 0).map(|r| (r.topic.clone(), r.partition)).collect();
    let req = Request::Heartbeat(HeartbeatRequest {
        broker_id: shared.config.id,
        addr: shared.addr.clone(),
        kafka_addr: shared.kafka_addr.clone().unwrap_or_default(),
        incarnation: shared.incarnation,
        broker_epoch: shared.broker_epoch.load(Ordering::Relaxed),
        previous_broker_epoch: shared.log_dir.previous_broker_epoch,
        log_dir_id: shared.log_dir.id,
        intact: shared.log_dir.intact,
        replicas,
        credentials_version: shared.credentials.version(),
        authorization_version: shared.authorization.version(),
    });
    let resp = call_coordinator(shared, req, Duration::from_millis(shared.config.heartbeat_ms * 10))
        .await
        .map_err(|e| e.to_string())?;
    let Response::Heartbeat(hb) = resp else {
        return Err(format!("unexpected answer to a heartbeat: {}", resp.status()));
    };
    // A deposed coordinator's answer renews nothing and moves no leader.
    check_coordinator_epoch(shared, hb.coordinator_epoch).await.map_err(|s| s.to_string())?;
    match hb.status.code {
        ErrorCode::None => {}
        ErrorCode::StaleBrokerEpoch => {
            // Another process registered as this broker since: register again (refused while
            // that one's lease is live).
            tracing::error!(status = %hb.status, "this broker process was superseded; registering again");
            shared.broker_epoch.store(-1, Ordering::Relaxed);
            return Err(hb.status.to_string());
        }
        _ => return Err(hb.status.to_string()),
    }
    {
        // The finalized-features epoch only grows: an older answer changes nothing.
        let mut tv = shared.transaction_version.lock().unwrap_or_else(|e| e.into_inner());
        if hb.features_epoch > tv.1 {
            tracing::info!(
                transaction_version = hb.transaction_version,
                epoch = hb.features_epoch,
                "transaction version finalized"
            );
            *tv = (hb.transaction_version, hb.features_epoch);
        }
    }
    if let Some(credentials) = hb.credentials {
        shared.credentials.replace_if_newer(credentials);
    }
    if let Some(authorization) = hb.authorization {
        // With the authorizer on, the own listener serves members and logged-in clients the
        // ACLs allow.
        let enabled = authorization.enabled;
        if shared.authorization.replace_if_newer(authorization) {
            shared.config.limits.members_only.store(enabled, Ordering::Relaxed);
        }
    }
    if shared.broker_epoch.load(Ordering::Relaxed) < 0 {
        // Registered: the next process of this broker names this epoch as its predecessor's.
        let log_dir = shared.log_dir.clone();
        let epoch = hb.broker_epoch;
        let recorded = tokio::task::spawn_blocking(move || log_dir.record_broker_epoch(epoch)).await;
        if !matches!(recorded, Ok(Ok(()))) {
            tracing::warn!(broker_epoch = epoch, "could not record the broker epoch; the next start waits one lease");
        }
        // Record in each lost replica's mark that this registration told the coordinator (which
        // took the replica out of its ISR for it).
        let lost: Vec<_> = reporting_lost.iter().filter_map(|k| shared.partitions.get(k).map(|p| p.clone())).collect();
        if !lost.is_empty() {
            let marked = tokio::task::spawn_blocking(move || {
                lost.iter().try_for_each(|p| p.mark_lost_reported(epoch).map_err(|e| e.to_string()))
            })
            .await;
            if !matches!(marked, Ok(Ok(()))) {
                // Then the next registration reports the loss as new: the replica leaves the ISR
                // again, which is safe.
                tracing::warn!(broker_epoch = epoch, "could not record which registration reported a lost replica");
            }
        }
        shared.broker_epoch.store(epoch, Ordering::Relaxed);
        tracing::info!(broker_epoch = epoch, "registered with the coordinator");
        shared.registered.send_replace(true);
    }
    {
        let mut addrs = shared.broker_addrs.lock().unwrap_or_else(|p| p.into_inner());
        for b in &hb.brokers {
            addrs.insert(b.id, b.addr.clone());
        }
    }
    let now = shared.now_ms();
    for d in &hb.deleted {
        let unopened: Vec<((String, i32), u128)> = shared
            .unopened
            .iter()
            .filter(|u| u.key().0 == d.name)
            .map(|u| (u.key().clone(), u.value().topic_id))
            .collect();
        for (key, stored) in unopened {
            if stored == 0 || stored == d.topic_id {
                shared.unopened.remove(&key);
                tracing::info!(topic = %key.0, partition = key.1, "dropping a replica that could not open: its topic was deleted");
                remove_partition_dir(&*shared.config.storage, &partition_dir(shared, &key));
            }
        }
        let hosted: Vec<(String, i32)> =
            shared.partitions.iter().map(|p| p.key().clone()).filter(|(t, _)| *t == d.name).collect();
        for key in hosted {
            let known = known_topic_id(shared, &key);
            if known == 0 || known == d.topic_id {
                drop_partition(shared, &key, "its topic was deleted");
            }
        }
    }
    for r in &hb.removed {
        // Moved away (a reassignment completed or was cancelled): dropped only if it is the
        // replica of that topic the coordinator means.
        let key = (r.topic.clone(), r.partition);
        if shared.unopened.get(&key).is_some_and(|u| u.topic_id == r.topic_id) {
            shared.unopened.remove(&key);
            tracing::info!(topic = %key.0, partition = key.1, "dropping a replica that could not open: it was moved to other brokers");
            remove_partition_dir(&*shared.config.storage, &partition_dir(shared, &key));
        }
        if known_topic_id(shared, &key) == r.topic_id {
            drop_partition(shared, &key, "its partition was moved to other brokers");
        }
    }
    for a in hb.assignments {
        let key = (a.topic.clone(), a.partition);
        let known = known_topic_id(shared, &key);
        if known != 0 && a.topic_id != 0 && known != a.topic_id {
            drop_partition(shared, &key, "its topic was deleted and created again under the same name");
        }
        if shared.unopened.contains_key(&key) {
            continue; // offline until this process ends (KIP-112): not opened again
        }
        let part = match shared.partitions.get(&key).map(|p| p.clone()) {
            Some(p) => p,
            None => {
                let dir = partition_dir(shared, &key);
                let stored = stored_topic_id(&*shared.config.storage, &dir);
                if stored != 0 && a.topic_id != 0 && stored != a.topic_id {
                    // A replica of a deleted topic of the same name, left while this broker
                    // was away: it belongs to another topic.
                    tracing::warn!(topic = %a.topic, partition = a.partition, "dropping a replica of a deleted topic of the same name");
                    remove_partition_dir(&*shared.config.storage, &dir);
                }
                match open_partition(shared, &key) {
                    Ok(p) => {
                        if a.topic_id != 0 && stored != a.topic_id {
                            if let Err(e) = store_topic_id(&*shared.config.storage, &dir, a.topic_id) {
                                tracing::warn!(topic = %a.topic, partition = a.partition, error = %e, "cannot record the topic id");
                            }
                        }
                        shared.topic_ids.insert(key.clone(), a.topic_id);
                        let p = Arc::new(p);
                        shared.partitions.insert(key, p.clone());
                        p
                    }
                    Err(e) => {
                        tracing::error!(topic = %a.topic, partition = a.partition, error = %e, "cannot open partition: reporting it offline");
                        shared.unopened.insert(key, Unopened { why: e.to_string(), topic_id: a.topic_id });
                        continue;
                    }
                }
            }
        };
        if a.topic_id != 0 {
            part.set_topic_id(a.topic_id);
        }
        part.set_min_insync_replicas(a.min_insync_replicas);
        let topic_config = protocol::topic_config::TopicConfig::from_configs(
            a.configs.iter().map(|(name, value)| (name.as_str(), value.as_str())),
        );
        part.set_topic_config(topic_config, &shared.config.log);
        part.set_unclean_leader_epoch(a.unclean_leader_epoch);
        match part.learn(a.leader_id, a.leader_epoch, a.partition_epoch, &a.replicas, &a.isr, now) {
            Some(RoleChange::BecameLeader { leader_epoch, followers }) => {
                tracing::info!(topic = %a.topic, partition = a.partition, leader_epoch, ?followers, "leading");
                for f in followers {
                    tokio::spawn(replicate_loop(shared.clone(), part.clone(), f, leader_epoch));
                }
            }
            Some(RoleChange::BecameFollower { leader_epoch }) => {
                tracing::info!(topic = %a.topic, partition = a.partition, leader_epoch, leader = a.leader_id, "following");
            }
            None => {}
        }
    }
    Ok(())
}

/// The file in a partition's directory naming the topic id it belongs to.
const TOPIC_ID_FILE: &str = "topic.id";

/// The topic id a partition directory records (0: none, or unreadable).
fn stored_topic_id(storage: &dyn Storage, dir: &std::path::Path) -> u128 {
    storage
        .read(&dir.join(TOPIC_ID_FILE))
        .ok()
        .and_then(|b| u128::from_str_radix(String::from_utf8_lossy(&b).trim(), 16).ok())
        .unwrap_or(0)
}

fn store_topic_id(storage: &dyn Storage, dir: &std::path::Path, id: u128) -> std::io::Result<()> {
    storage.create_dir_all(dir)?;
    storage.write_file_atomically(&dir.join(TOPIC_ID_FILE), format!("{id:032x}\n").as_bytes())?;
    storage.sync_dir(dir);
    Ok(())
}

/// Delete every file of a partition directory, then the directory.
fn remove_partition_dir(storage: &dyn Storage, dir: &std::path::Path) {
    for f in storage.list(dir).unwrap_or_default() {
        if let Err(e) = storage.remove(&f) {
            tracing::warn!(path = %f.display(), error = %e, "cannot remove a file of a deleted partition");
        }
    }
    storage.sync_dir(dir);
    let _ = storage.remove_dir(dir);
}

/// Stop hosting a partition (its topic was deleted, or it moved to other brokers): it stops
/// leading and following (no request reaches it any more), and its files go.
fn drop_partition(shared: &Shared, key: &(String, i32), why: &str) {
    let Some((_, part)) = shared.partitions.remove(key) else { return };
    shared.topic_ids.remove(key);
    part.retire();
    tracing::info!(topic = %key.0, partition = key.1, why, "partition dropped");
    remove_partition_dir(&*shared.config.storage, &partition_dir(shared, key));
}

/// Ask the coordinator for the ISR each led partition should have (lagging followers out,
/// caught-up ones back in), under the partition's leader epoch.
async fn maintain_isr(shared: &Arc<Shared>) {
    let led: Vec<PartitionRef> =
        shared.partitions.iter().filter(|p| p.leadership().is_leader).map(|p| p.clone()).collect();
    for part in led {
        // Chosen and counted just before the call (earlier calls may have taken seconds). A
        // change not sent stays counted, and is asked again next round.
        let before = part.counted_replicas().map_or(0, |r| r.len());
        let Some((leader_epoch, partition_epoch, isr)) =
            part.propose_isr(shared.now_ms(), shared.config.replica_lag_ms)
        else {
            continue;
        };
        let req = Request::AlterPartition(AlterPartitionRequest {
            broker_id: shared.config.id,
            topic: part.topic.clone(),
            partition: part.index,
            topic_id: part.topic_id(),
            leader_epoch,
            partition_epoch,
            isr: isr.clone(),
        });
        let answer = call_coordinator(shared, req, Duration::from_millis(shared.config.verify_timeout_ms)).await;
        let answer = match answer {
            Ok(Response::AlterPartition(r)) => match check_coordinator_epoch(shared, r.coordinator_epoch).await {
                Ok(()) => Ok(Response::AlterPartition(r)),
                Err(status) => Err(status.to_string()),
            },
            other => other.map_err(|e| e.to_string()),
        };
        match answer {
            Ok(Response::AlterPartition(r)) => {
                if r.status.is_ok() {
                    let metrics = &shared.control.stats.metrics;
                    if isr.len() < before {
                        metrics.isr_shrinks.inc();
                    } else {
                        metrics.isr_expands.inc();
                    }
                    tracing::info!(topic = %part.topic, partition = part.index, leader_epoch, partition_epoch = r.partition_epoch, ?isr, "ISR changed");
                } else {
                    tracing::warn!(topic = %part.topic, partition = part.index, leader_epoch, status = %r.status, "ISR change refused");
                }
                part.on_isr_answer(leader_epoch, &r);
                if matches!(r.status.code, ErrorCode::FencedLeaderEpoch | ErrorCode::InvalidUpdateVersion) {
                    shared.refresh.notify_one();
                }
            }
            // Not answered: the change may have been made. Keep counting the proposed members
            // and ask again next round; an answer or a heartbeat with a newer ISR settles it.
            other => tracing::debug!(?other, "ISR change not answered"),
        }
    }
}

/// Default of [`BrokerConfig::replication_inflight_max`].
pub const REPLICATION_INFLIGHT_MAX_DEFAULT: usize = 4;

/// A Replicate request in flight: where it started, what it was taken against, and its answer.
type ReplicateCall = std::pin::Pin<Box<dyn std::future::Future<Output = (i64, Sent, Result<Response, String>)> + Send>>;

/// Push the log to one follower for as long as this broker leads at `leader_epoch`.
///
/// Up to `replication_inflight_max` requests travel at once on the follower's connection
/// (Raft's pipelined AppendEntries): each starts where the one before it ended, the follower
/// applies them in order, and their answers are taken in order. The follower checks every
/// request against its own log (the batch before it must carry the same epoch), so a request
/// sent behind one that fails cannot land out of place; the leader forgets every request
/// behind a failed or refused one and resends from what the replica set's bookkeeping says.
async fn replicate_loop(shared: Arc<Shared>, part: PartitionRef, follower: i32, leader_epoch: i32) {
    let mut progress = part.subscribe();
    let mut stop = shared.stop.clone();
    let idle = Duration::from_millis(shared.config.heartbeat_ms);
    let inflight_max = shared.config.replication_inflight_max.max(1);
    let mut backoff = Duration::from_millis(10);
    let mut inflight: futures::stream::FuturesOrdered<ReplicateCall> = Default::default();
    // Where the next request starts: where the last one in flight ends (`None`: none in
    // flight, ask the bookkeeping).
    let mut cursor: Option<i64> = None;
    // The high watermark the last request carried: one is sent with no batches when it moved
    // and nothing else is in flight to carry it, and after `idle` to keep the follower's
    // caught-up time fresh.
    let mut sent_hw = -1;
    // Likewise the log start readers see (DeleteRecords moved it).
    let mut sent_low = -1;
    let mut ping = true;
    loop {
        if *shared.stop.borrow() {
            return;
        }
        shared.running().await;
        let mut failed = false;
        while inflight.len() < inflight_max {
            let work = match part.replication_work(
                follower,
                leader_epoch,
                (cursor, shared.config.replication_bytes_max),
                shared.now_ms(),
            ) {
                Ok(Some(w)) => w,
                Ok(None) => return, // no longer the leader of this epoch
                Err(e) => {
                    tracing::warn!(topic = %part.topic, partition = part.index, error = %e, "cannot read for replication");
                    failed = true;
                    break;
                }
            };
            let worth_sending = !work.records.is_empty()
                || (inflight.is_empty() && (ping || work.high_watermark > sent_hw || work.low_watermark > sent_low));
            if !worth_sending {
                break;
            }
            let (from, sent, hw, end) = (work.from_offset, work.sent, work.high_watermark, work.end_offset);
            sent_low = work.low_watermark;
            let source = match (work.records.is_empty(), work.from_memory) {
                (true, _) => None,
                (false, true) => Some(&shared.control.stats.replicate_requests_from_memory),
                (false, false) => Some(&shared.control.stats.replicate_requests_from_file),
            };
            let req = Request::Replicate(ReplicateRequest {
                topic: part.topic.clone(),
                partition: part.index,
                topic_id: part.topic_id(),
                leader_epoch,
                leader_id: shared.config.id,
                from_offset: work.from_offset,
                prev_epoch: work.prev_epoch,
                high_watermark: work.high_watermark,
                log_start_offset: work.log_start_offset,
                low_watermark: work.low_watermark,
                producer_state: work.producer_state,
                records: work.records,
            });
            // Queued on the connection here, in order; only the answer is awaited later.
            let timeout = Duration::from_millis(shared.config.request_timeout_ms);
            let deadline = tokio::time::Instant::now() + timeout;
            let answer = match queue_to_follower(&shared, follower, req, deadline).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(follower, error = %e, "cannot reach the follower; retrying");
                    failed = true;
                    break;
                }
            };
            shared.control.stats.replicate_requests_sent.fetch_add(1, Ordering::Relaxed);
            if let Some(counter) = source {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            ping = false;
            sent_hw = hw;
            cursor = Some(end);
            inflight.push_back(Box::pin(async move {
                let outcome = match tokio::time::timeout_at(deadline, answer).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
                };
                (from, sent, outcome)
            }));
        }
        // A request that could not be sent leaves those in flight to be answered; the back-off
        // comes once none is left.
        if !failed || !inflight.is_empty() {
            failed = false;
            tokio::select! {
                Some((from, sent, outcome)) = inflight.next() => {
                    match on_replicate_answer(&shared, &part, (follower, leader_epoch), (from, sent), outcome) {
                        ReplicateOutcome::Applied => backoff = Duration::from_millis(10),
                        // Every request behind it was based on it: forget them all.
                        ReplicateOutcome::Diverged => inflight = Default::default(),
                        ReplicateOutcome::Failed => failed = true,
                    }
                }
                _ = progress.changed(), if inflight.len() < inflight_max => {}
                _ = tokio::time::sleep(idle), if inflight.is_empty() => ping = true,
                // Not left waiting for a follower that does not answer.
                _ = stop.changed() => return,
            }
        }
        if failed {
            // Every request behind the failed one was based on it. Whatever it carried (the high
            // watermark too) goes again after the back-off.
            inflight = Default::default();
            ping = true;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
        if inflight.is_empty() {
            cursor = None;
        }
    }
}

/// Queue `req` on the connection to `follower` by `deadline` (connecting if need be) and
/// return its answer, to await later. The deadline covers the queueing: a follower that stopped
/// reading fills the connection's queue.
async fn queue_to_follower(
    shared: &Shared,
    follower: i32,
    req: Request,
    deadline: tokio::time::Instant,
) -> Result<impl std::future::Future<Output = Result<Response, net::NetError>>, String> {
    let addr = shared.broker_addrs.lock().unwrap_or_else(|p| p.into_inner()).get(&follower).cloned();
    let addr = addr.ok_or("follower address unknown")?;
    let late = |what: &str| format!("{what} before the deadline of {} ms", shared.config.request_timeout_ms);
    let conn = tokio::time::timeout_at(deadline, peer(shared, &addr))
        .await
        .map_err(|_| late("no connection"))?
        .map_err(|e| e.to_string())?;
    tokio::time::timeout_at(deadline, conn.submit(req))
        .await
        .map_err(|_| late("not queued"))?
        .map_err(|e| e.to_string())
}

/// What one Replicate answer means for the requests behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplicateOutcome {
    /// Applied: the ones behind it stand.
    Applied,
    /// The follower's log does not match where it started: resend from the bookkeeping,
    /// which moved back.
    Diverged,
    /// Refused or not answered: resend from the bookkeeping after a back-off.
    Failed,
}

/// Take one Replicate answer, for the request that started at `from_offset` and was taken as
/// `sent`.
fn on_replicate_answer(
    shared: &Shared,
    part: &Partition,
    (follower, leader_epoch): (i32, i32),
    (from_offset, sent): (i64, Sent),
    outcome: Result<Response, String>,
) -> ReplicateOutcome {
    match outcome {
        Ok(Response::Replicate(r)) if r.status.is_ok() => {
            part.on_replica_ack(follower, leader_epoch, r.log_end_offset, sent);
            part.on_replica_log_start(follower, leader_epoch, r.log_start_offset);
            ReplicateOutcome::Applied
        }
        Ok(Response::Replicate(r)) if r.status.code == ErrorCode::OffsetOutOfRange => {
            shared.control.stats.replicate_answers_diverged.fetch_add(1, Ordering::Relaxed);
            tracing::info!(topic = %part.topic, partition = part.index, follower, hint = r.hint_offset, "follower diverges; resending from the hint");
            part.on_replica_mismatch(follower, leader_epoch, from_offset, r.hint_offset, r.diverging_epoch);
            ReplicateOutcome::Diverged
        }
        Ok(Response::Replicate(r)) if r.status.code == ErrorCode::FencedLeaderEpoch => {
            shared.control.stats.replication_refused_by_epoch.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                topic = %part.topic,
                partition = part.index,
                follower,
                our_epoch = leader_epoch,
                their_epoch = r.current_leader_epoch,
                "replication refused: the follower knows a newer leader epoch; this broker is a stale leader"
            );
            shared.refresh.notify_one();
            ReplicateOutcome::Failed
        }
        Ok(other) => {
            tracing::debug!(follower, status = %other.status(), "replication not accepted yet");
            ReplicateOutcome::Failed
        }
        Err(e) => {
            tracing::debug!(follower, error = %e, "replication failed; retrying");
            ReplicateOutcome::Failed
        }
    }
}

/// Start requests one read brought in, in arrival order (see [`net::GroupHandler`]): produce
/// requests to one partition in a row are appended together.
fn handle_group(shared: &Arc<Shared>, requests: &mut VecDeque<Request>) -> Vec<net::Handled> {
    let mut handled = Vec::new();
    while let Some(req) = requests.pop_front() {
        let Request::Produce(first) = req else {
            let h = handle(shared, req);
            let serial = matches!(h, net::Handled::Serial(_));
            handled.push(h);
            if serial {
                break;
            }
            continue;
        };
        let mut run = vec![first];
        while let Some(Request::Produce(next)) = requests.front() {
            if next.topic != run[0].topic || next.partition != run[0].partition {
                break;
            }
            let Some(Request::Produce(next)) = requests.pop_front() else { break };
            run.push(next);
        }
        let (started, behind) = produce_group(shared, run);
        handled.extend(started);
        // Only a batch that waits for verification is serial, and what is behind it waits too.
        if matches!(handled.last(), Some(net::Handled::Serial(_))) {
            for r in behind.into_iter().rev() {
                requests.push_front(r);
            }
            break;
        }
    }
    handled
}

/// Start a request in arrival order; see [`net::Handled`].
fn handle(shared: &Arc<Shared>, req: Request) -> net::Handled {
    match req {
        Request::Produce(r) => produce(shared, r),
        Request::Fetch(r) => {
            let at = Instant::now();
            let answer = fetch(shared, r);
            shared.control.stats.metrics.fetch_latency.observe(at.elapsed().as_secs_f64());
            net::Handled::answer(Response::Fetch(answer))
        }
        Request::WriteMarker(r) => write_marker(shared, r),
        Request::Replicate(r) => replicate(shared, r),
        Request::DeleteRecords(r) => {
            let shared = shared.clone();
            net::Handled::Applied(Box::pin(async move {
                let DeleteRecordsRequest { topic, partition, offset, timeout_ms } = r;
                Response::DeleteRecords(match delete_records(&shared, &topic, partition, offset, timeout_ms).await {
                    Ok(low_watermark) => DeleteRecordsResponse { status: Status::ok(), low_watermark },
                    Err(status) => DeleteRecordsResponse { status, low_watermark: -1 },
                })
            }))
        }
        other => net::Handled::answer(Response::Error(Status::new(
            ErrorCode::InvalidRequest,
            format!("a broker does not serve {:?}; send it to the coordinator", other.api_key()),
        ))),
    }
}

fn partition(shared: &Shared, topic: &str, index: i32) -> Result<PartitionRef, Status> {
    if index < 0 || protocol::names::validate_topic(topic).is_err() {
        return Err(Status::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("{topic}-{index} cannot exist: partitions are numbered from 0 and topic names are [A-Za-z0-9._-]"),
        ));
    }
    match shared.partitions.get(&(topic.to_string(), index)) {
        Some(p) => Ok(p.clone()),
        None => {
            shared.refresh.notify_one();
            Err(Status::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker {} hosts no replica of {topic}-{index} (or has not learnt it yet); refresh metadata and retry",
                    shared.config.id
                ),
            ))
        }
    }
}

/// What a produced batch's timestamps may be, by the broker's wall clock now: the topic's
/// limits, else the broker's.
fn timestamp_limits(config: &BrokerConfig, topic: &protocol::topic_config::TopicConfig) -> TimestampLimits {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let ms = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    TimestampLimits {
        now_ms,
        after_max_ms: ms(topic.timestamp_after_max_ms.or(config.message_timestamp_after_max_ms)),
        before_max_ms: ms(topic.timestamp_before_max_ms.or(config.message_timestamp_before_max_ms)),
    }
}

fn record_status(e: &RecordError) -> Status {
    let code = match e {
        RecordError::Invalid(_) => ErrorCode::InvalidRecord,
        RecordError::Timestamp(_) => ErrorCode::InvalidTimestamp,
        RecordError::Compression(protocol::compression::CompressionError::TooLarge { .. }) => {
            ErrorCode::MessageTooLarge
        }
        RecordError::Compression(_) => ErrorCode::CorruptMessage,
    };
    Status::new(code, format!("record batch rejected: {e}"))
}

fn batch_status(e: &BatchError) -> Status {
    let code = match e {
        BatchError::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
        BatchError::Compressed(_) => ErrorCode::UnsupportedCompressionType,
        _ => ErrorCode::CorruptMessage,
    };
    Status::new(code, format!("record batch rejected: {e}"))
}

fn leader_status(shared: &Shared, topic: &str, index: i32, e: &LeaderEpochError) -> Status {
    if matches!(e, LeaderEpochError::Unknown { .. }) {
        shared.refresh.notify_one();
    }
    Status::new(e.code(), format!("{topic}-{index} on broker {}: {e}", shared.config.id))
}

fn produce_error(status: Status, producer_epoch: i16, leader_epoch: i32) -> ProduceResponse {
    ProduceResponse {
        status,
        base_offset: -1,
        log_end_offset: -1,
        current_producer_epoch: producer_epoch,
        current_leader_epoch: leader_epoch,
        log_append_time_ms: -1,
    }
}

/// Wait until `end_offset` is below the high watermark while the partition is still led at
/// `leader_epoch` by this broker.
async fn wait_committed(shared: &Shared, part: &Partition, end_offset: i64, leader_epoch: i32) -> Result<(), Status> {
    let mut progress = part.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.request_timeout_ms);
    loop {
        match part.committed(end_offset, leader_epoch) {
            Ok(Committed::Yes) => return Ok(()),
            Ok(Committed::NotYet) => {}
            Ok(Committed::BelowMinIsr { replicas, min_isr }) => {
                return Err(Status::new(
                    ErrorCode::NotEnoughReplicasAfterAppend,
                    format!(
                        "{}-{}: the batch was written, but the in-sync replicas fell to {replicas:?}, fewer than \
                         min.insync.replicas {min_isr}, before it could be acknowledged; it may or may not stay, \
                         retry it (a retry is recognised as a duplicate) once the followers are back in sync",
                        part.topic, part.index
                    ),
                ))
            }
            Err(e) => {
                return Err(Status::new(
                    ErrorCode::NotLeaderOrFollower,
                    format!(
                        "{}-{}: leadership moved before the batch reached every in-sync replica ({e}); retry at the new leader",
                        part.topic, part.index
                    ),
                ))
            }
        }
        tokio::select! {
            changed = progress.changed() => {
                if changed.is_err() {
                    return Err(Status::new(ErrorCode::NotLeaderOrFollower, "partition closed"));
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(Status::new(
                    ErrorCode::RequestTimedOut,
                    format!(
                        "{}-{}: the in-sync replicas did not all confirm the batch within {} ms",
                        part.topic, part.index, shared.config.request_timeout_ms
                    ),
                ))
            }
        }
    }
}

/// Which transaction rules a produce request comes under. All go through the same gate; they
/// differ in what the leader asks the coordinator before a producer's first write here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnRules {
    /// epochfence's own clients: the leader registers the partition under the batch's epoch
    /// (a transactional write opens the transaction), and every transaction ends with a bump.
    Own,
    /// Kafka clients (transaction version 1): a transactional write's partition must already
    /// be in the producer's open transaction (the client added it with AddPartitionsToTxn), so
    /// a write that comes after its transaction ended cannot open one of its own.
    KafkaTv1,
    /// Kafka clients under transaction version 2 (Produce v12, KIP-890): as [`TxnRules::Own`],
    /// the first transactional write of a transaction to a partition adds it (the client sends
    /// no AddPartitionsToTxn); a write of an ended transaction carries an older epoch than the
    /// next one, since every end bumped it, and is fenced.
    KafkaTv2,
}

impl TxnRules {
    /// The rules a Kafka produce request of `version` comes under (Kafka decides by each
    /// request's version, not by the finalized feature).
    fn for_kafka_produce(version: i16) -> TxnRules {
        if version >= 12 {
            TxnRules::KafkaTv2
        } else {
            TxnRules::KafkaTv1
        }
    }
}

/// A produce request that passed the checks that need no partition state.
struct Checked {
    r: ProduceRequest,
    header: BatchHeader,
    part: PartitionRef,
    rules: TxnRules,
}

/// What one append attempt came to.
enum Attempt {
    Appended(Appended),
    /// The gate wants the coordinator to confirm `(producer_id, epoch)` first.
    Verify {
        producer_id: i64,
        epoch: i16,
        guard: VerificationGuard,
        leader_epoch: i32,
    },
    Answer(ProduceResponse),
}

/// A produce request's checks and its append, in the order requests arrived. What is left (the
/// wait for the disk and the replicas) runs beside the connection's later requests, so a
/// producer's pipelined batches wait for one fdatasync and one replication round together.
/// Only a batch that needs the coordinator's verification first is handled serially.
fn produce(shared: &Arc<Shared>, r: ProduceRequest) -> net::Handled {
    produce_under(shared, r, TxnRules::Own)
}

/// Whether `checked` is a transactional write that adds its partition to its transaction
/// (transaction version 2) on a broker with fencing off: the gate, which would register the
/// partition with the coordinator when it verifies the producer, never asks, so the broker
/// registers it without looking at the answer ([`register_unfenced`]).
fn adds_partition_unfenced(shared: &Shared, checked: &Checked) -> bool {
    !shared.config.fencing && checked.rules == TxnRules::KafkaTv2 && checked.header.is_transactional()
}

/// A transactional write under transaction version 2 with fencing off: the partition is added
/// to the producer's transaction first (so its markers come, and the transaction ends), and the
/// write is appended whatever the coordinator answered: with fencing off a zombie's write lands,
/// which is what the switch shows.
fn register_unfenced(shared: &Arc<Shared>, checked: Checked) -> net::Handled {
    let shared = shared.clone();
    net::Handled::serial(async move {
        let asked = AddPartitionRequest {
            transactional_id: checked.r.transactional_id.clone().unwrap_or_default(),
            producer_id: checked.header.producer_id,
            producer_epoch: checked.header.producer_epoch,
            topic: checked.r.topic.clone(),
            partition: checked.r.partition,
            transactional: true,
            verify_only: false,
            topic_id: checked.part.topic_id(),
            transaction_version: 2,
        };
        if let Err((status, _)) = verify(&shared, asked).await {
            tracing::info!(topic = %checked.r.topic, partition = checked.r.partition, %status, "fencing off: the partition was not added to the producer's transaction; appended all the same");
        }
        let appended = checked.part.append(
            &checked.r.records,
            &checked.header,
            checked.r.leader_epoch,
            checked.r.acks == ACKS_ALL,
        );
        started(&shared, checked, appended).into_future().await
    })
}

/// [`produce`] under `rules`.
fn produce_under(shared: &Arc<Shared>, r: ProduceRequest, rules: TxnRules) -> net::Handled {
    match check_produce(shared, r, rules) {
        Checking::Passed(checked) if adds_partition_unfenced(shared, &checked) => register_unfenced(shared, checked),
        Checking::Passed(checked) => {
            let appended = checked.part.append(
                &checked.r.records,
                &checked.header,
                checked.r.leader_epoch,
                checked.r.acks == ACKS_ALL,
            );
            started(shared, checked, appended)
        }
        Checking::Refused(_, answer) => net::Handled::answer(Response::Produce(answer)),
    }
}

/// Produce requests to one partition that one read brought in, in arrival order: checked one
/// by one, appended together ([`Partition::append_group`]: one gate, one write). Returns what
/// was started, and the requests behind the first one that needs the coordinator's
/// verification, which wait for it.
fn produce_group(shared: &Arc<Shared>, run: Vec<ProduceRequest>) -> (Vec<net::Handled>, Vec<Request>) {
    produce_group_under(shared, run, TxnRules::Own)
}

/// [`produce_group`] under `rules`.
fn produce_group_under(
    shared: &Arc<Shared>,
    run: Vec<ProduceRequest>,
    rules: TxnRules,
) -> (Vec<net::Handled>, Vec<Request>) {
    if !shared.config.fencing && rules == TxnRules::KafkaTv2 {
        // Each waits for its registration (`register_unfenced`): one at a time.
        let mut run = run.into_iter();
        let first = run.next().map(|r| produce_under(shared, r, rules));
        return (first.into_iter().collect(), run.map(Request::Produce).collect());
    }
    let checks: Vec<Checking> = run.into_iter().map(|r| check_produce(shared, r, rules)).collect();
    let checked: Vec<&Checked> = checks
        .iter()
        .filter_map(|c| match c {
            Checking::Passed(c) => Some(c),
            Checking::Refused(..) => None,
        })
        .collect();
    // All to one partition (looked up once per request, by name).
    let appended = match checked.first() {
        Some(first) => {
            let offers: Vec<Offer<'_>> = checked
                .iter()
                .map(|c| Offer {
                    batch: &c.r.records,
                    header: &c.header,
                    leader_epoch: c.r.leader_epoch,
                    acks_all: c.r.acks == ACKS_ALL,
                })
                .collect();
            first.part.append_group(&offers)
        }
        None => Vec::new(),
    };
    let mut appended = appended.into_iter();
    let (mut handled, mut behind) = (Vec::new(), Vec::new());
    let mut waiting = false;
    for check in checks {
        match check {
            Checking::Passed(c) if waiting => behind.push(Request::Produce(c.r)),
            Checking::Refused(r, _) if waiting => behind.push(Request::Produce(r)),
            Checking::Passed(c) => match appended.next() {
                Some(result) => {
                    waiting = matches!(result, Err(AppendError::NeedsVerification { .. }));
                    handled.push(started(shared, c, result));
                }
                None => {
                    waiting = true;
                    behind.push(Request::Produce(c.r));
                }
            },
            Checking::Refused(_, answer) => handled.push(net::Handled::answer(Response::Produce(answer))),
        }
    }
    (handled, behind)
}

/// A produce request after the checks that need no partition state.
enum Checking {
    Passed(Checked),
    /// With its answer.
    Refused(ProduceRequest, ProduceResponse),
}

/// The checks that need no partition state.
fn check_produce(shared: &Shared, mut r: ProduceRequest, rules: TxnRules) -> Checking {
    match check_produce_ref(shared, &mut r) {
        Ok((header, part)) => Checking::Passed(Checked { r, header, part, rules }),
        Err(answer) => {
            // A broker hosting no replica of the partition refuses before any gate.
            if answer.status.code == ErrorCode::NotLeaderOrFollower {
                shared.control.stats.metrics.refused(Refusal::NotLeader);
            }
            Checking::Refused(r, answer)
        }
    }
}

fn check_produce_ref(shared: &Shared, r: &mut ProduceRequest) -> Result<(BatchHeader, PartitionRef), ProduceResponse> {
    if r.acks != ACKS_ALL && r.acks != ACKS_LEADER {
        return Err(produce_error(
            Status::new(ErrorCode::InvalidRequiredAcks, format!("acks {} is not -1 (all) or 1 (leader)", r.acks)),
            -1,
            -1,
        ));
    }
    // The topic's configs over the broker's (none where this broker hosts no replica: the
    // request is refused below).
    let found = partition(shared, &r.topic, r.partition);
    let topic_config = found.as_ref().map(|p| p.topic_config()).unwrap_or_default();
    let batch_bytes_max = topic_config.max_message_bytes.unwrap_or(shared.config.batch_bytes_max);
    if r.records.len() > batch_bytes_max {
        let what = if topic_config.max_message_bytes.is_some() {
            "the topic's max.message.bytes"
        } else {
            "the broker's message.max.bytes (--batch-bytes-max)"
        };
        return Err(produce_error(
            Status::new(
                ErrorCode::MessageTooLarge,
                format!("batch of {} bytes exceeds {what}, {batch_bytes_max}", r.records.len()),
            ),
            -1,
            -1,
        ));
    }
    let log_append_time = topic_config.timestamp_type == Some(protocol::topic_config::TimestampType::LogAppendTime);
    let header = match BatchHeader::parse(&r.records).and_then(|h| verify_crc(&r.records, &h).map(|_| h)) {
        Ok(h) if h.is_control() => {
            return Err(produce_error(
                Status::new(ErrorCode::InvalidRequest, "control batches are written by the coordinator only"),
                -1,
                -1,
            ))
        }
        Ok(h) => h,
        Err(e) => return Err(produce_error(batch_status(&e), -1, -1)),
    };
    // Under LogAppendTime the producer's timestamps are not kept, so not checked (as Kafka).
    let limits = timestamp_limits(&shared.config, &topic_config);
    validate_batch(
        &r.records,
        &header,
        (!log_append_time).then_some(limits),
        shared.config.decompressed_batch_bytes_max,
    )
    .map_err(|e| produce_error(record_status(&e), -1, -1))?;
    if protocol::names::is_reserved_topic(&r.topic) {
        // Kafka's internal names: no topic may have one, and one left in a data directory from
        // before they were reserved takes no writes (the coordinator once wrote no marker there).
        return Err(produce_error(
            Status::new(
                ErrorCode::InvalidTopicException,
                format!("topic name '{}' is reserved for Kafka's internal topics: produce to another topic", r.topic),
            ),
            -1,
            -1,
        ));
    }
    let part = found.map_err(|s| produce_error(s, -1, -1))?;
    if log_append_time {
        // Stamped with this broker's clock; replicated and read as stamped.
        r.records = protocol::batch::stamp_log_append_time(&r.records, limits.now_ms);
        let header = BatchHeader::parse(&r.records).map_err(|e| produce_error(batch_status(&e), -1, -1))?;
        return Ok((header, part));
    }
    Ok((header, part))
}

/// What the partition's gate and log made of a checked request, started: the wait for the
/// disk and the replicas, the coordinator's verification first, or an answer now.
fn started(shared: &Arc<Shared>, checked: Checked, appended: Result<Appended, AppendError>) -> net::Handled {
    let shared = shared.clone();
    let at = Instant::now();
    let observe =
        move |shared: &Shared| shared.control.stats.metrics.produce_latency.observe(at.elapsed().as_secs_f64());
    match attempt(&shared, &checked, appended) {
        Attempt::Appended(appended) => net::Handled::Applied(Box::pin(async move {
            let answer = finish_produce(&shared, &checked, appended).await;
            observe(&shared);
            Response::Produce(answer)
        })),
        Attempt::Answer(answer) => {
            observe(&shared);
            net::Handled::answer(Response::Produce(answer))
        }
        Attempt::Verify { producer_id, epoch, guard, leader_epoch } => net::Handled::serial(async move {
            let answer = verify_and_produce(&shared, &checked, (producer_id, epoch), guard, leader_epoch).await;
            observe(&shared);
            Response::Produce(answer)
        }),
    }
}

/// What the partition's gate and log said to the batch, as an answer or the next step.
fn attempt(shared: &Shared, c: &Checked, appended: Result<Appended, AppendError>) -> Attempt {
    let (r, header) = (&c.r, &c.header);
    // Only a refusal reports the leader epoch; an append carries its own.
    let leader_epoch = if appended.is_ok() { -1 } else { c.part.leadership().leader_epoch };
    let metrics = &shared.control.stats.metrics;
    match &appended {
        Ok(Appended::New { .. }) => {
            metrics.records_appended.inc_by(u64::try_from(header.record_count).unwrap_or(0));
            metrics.bytes_appended.inc_by(r.records.len() as u64);
        }
        Ok(Appended::Duplicate { .. }) | Err(AppendError::NeedsVerification { .. }) => {}
        Err(e) => {
            let why = refusal(e);
            metrics.refused(why);
            fencing_event(why, &r.topic, r.partition, header, r.leader_epoch, leader_epoch, e);
        }
    }
    match appended {
        Ok(appended) => Attempt::Appended(appended),
        Err(AppendError::NeedsVerification { producer_id, epoch, guard }) => {
            Attempt::Verify { producer_id, epoch, guard, leader_epoch }
        }
        Err(AppendError::Leader(e)) => {
            Attempt::Answer(produce_error(leader_status(shared, &r.topic, r.partition, &e), -1, leader_epoch))
        }
        Err(AppendError::Gate(GateError::StaleEpoch { producer_id, current, got })) => Attempt::Answer(produce_error(
            Status::new(
                ErrorCode::InvalidProducerEpoch,
                format!(
                    "fenced: {}-{} holds epoch {current} for producer id {producer_id}, this batch carries epoch {got}; \
                     the producer's epoch was bumped (a newer instance, or the end or timeout of its \
                     transaction), so stop this producer",
                    r.topic, r.partition
                ),
            ),
            current,
            leader_epoch,
        )),
        Err(AppendError::Gate(e @ GateError::OutOfOrder { .. })) => Attempt::Answer(produce_error(
            Status::new(ErrorCode::OutOfOrderSequenceNumber, e.to_string()),
            header.producer_epoch,
            leader_epoch,
        )),
        Err(AppendError::Gate(e @ GateError::UnknownProducer { .. })) => Attempt::Answer(produce_error(
            Status::new(ErrorCode::UnknownProducerId, format!("{}-{}: {e}", r.topic, r.partition)),
            header.producer_epoch,
            leader_epoch,
        )),
        Err(AppendError::Storage(e)) => {
            Attempt::Answer(produce_error(Status::new(ErrorCode::KafkaStorageError, e.to_string()), -1, leader_epoch))
        }
        Err(e @ AppendError::NotEnoughReplicas { .. }) => Attempt::Answer(produce_error(
            Status::new(ErrorCode::NotEnoughReplicas, format!("{}-{}: {e}", r.topic, r.partition)),
            header.producer_epoch,
            leader_epoch,
        )),
    }
}

/// A refused write as a structured `tracing` event (target `epochfence::fencing`), so that
/// `RUST_LOG` and any JSON log pipeline see every fencing decision with its epochs.
fn fencing_event(
    why: Refusal,
    topic: &str,
    partition: i32,
    header: &BatchHeader,
    request_leader_epoch: i32,
    leader_epoch: i32,
    e: &AppendError,
) {
    let current_producer_epoch = match e {
        AppendError::Gate(GateError::StaleEpoch { current, .. }) => i32::from(*current),
        _ => -1,
    };
    macro_rules! event {
        ($level:expr) => {
            tracing::event!(
                target: "epochfence::fencing",
                $level,
                reason = why.label(),
                topic,
                partition,
                producer_id = header.producer_id,
                producer_epoch = header.producer_epoch,
                current_producer_epoch,
                request_leader_epoch,
                leader_epoch,
                error = %e,
                "write refused"
            )
        };
    }
    // Fences at info; the retriable refusals a producer may meet many times in a row at debug.
    match why {
        Refusal::ProducerEpoch
        | Refusal::LeaderEpoch
        | Refusal::Sequence
        | Refusal::Coordinator
        | Refusal::CoordinatorEpoch => {
            event!(tracing::Level::INFO)
        }
        Refusal::NotLeader | Refusal::NotEnoughReplicas | Refusal::Storage => event!(tracing::Level::DEBUG),
    }
}

/// The `reason` a refused append is counted under.
fn refusal(e: &AppendError) -> Refusal {
    match e {
        AppendError::Leader(LeaderEpochError::Fenced { .. }) => Refusal::LeaderEpoch,
        AppendError::Leader(_) => Refusal::NotLeader,
        AppendError::Gate(GateError::StaleEpoch { .. }) => Refusal::ProducerEpoch,
        AppendError::Gate(_) => Refusal::Sequence,
        AppendError::NeedsVerification { .. } => Refusal::Coordinator,
        AppendError::NotEnoughReplicas { .. } => Refusal::NotEnoughReplicas,
        AppendError::Storage(_) => Refusal::Storage,
    }
}

/// Ask the coordinator, then offer the batch once more: after one verification round the gate
/// decides with the coordinator's answer.
async fn verify_and_produce(
    shared: &Shared,
    c: &Checked,
    (producer_id, epoch): (i64, i16),
    guard: VerificationGuard,
    leader_epoch: i32,
) -> ProduceResponse {
    let transactional = c.header.is_transactional();
    // Under Kafka's rules the client added the partition to its transaction itself: only check.
    let verify_only = transactional && c.rules == TxnRules::KafkaTv1;
    let asked = AddPartitionRequest {
        transactional_id: c.r.transactional_id.clone().unwrap_or_default(),
        producer_id,
        producer_epoch: epoch,
        topic: c.r.topic.clone(),
        partition: c.r.partition,
        transactional,
        verify_only,
        topic_id: known_topic_id(shared, &(c.r.topic.clone(), c.r.partition)),
        // Under version 1 the client added the partition (a verification registers nothing);
        // epochfence's own clients and Kafka's Produce v12 add it with the write.
        transaction_version: if c.rules == TxnRules::KafkaTv1 { 1 } else { 2 },
    };
    if let Err((status, current)) = verify(shared, asked).await {
        if status.code != ErrorCode::CoordinatorNotAvailable {
            shared.control.stats.metrics.refused(Refusal::Coordinator);
        }
        return produce_error(status, current, leader_epoch);
    }
    if !c.part.mark_verified(producer_id, epoch, transactional, guard) {
        shared.control.stats.metrics.refused(Refusal::Coordinator);
        return produce_error(
            Status::new(
                ErrorCode::InvalidTxnState,
                format!(
                    "{}-{}: producer id {producer_id}'s transaction here ended (its marker was written) while this \
                     write was being verified, so the write belongs to no open transaction; abort",
                    c.r.topic, c.r.partition
                ),
            ),
            epoch,
            leader_epoch,
        );
    }
    match attempt(shared, c, c.part.append(&c.r.records, &c.header, c.r.leader_epoch, c.r.acks == ACKS_ALL)) {
        Attempt::Appended(appended) => finish_produce(shared, c, appended).await,
        Attempt::Answer(answer) => answer,
        Attempt::Verify { .. } => produce_error(
            Status::new(ErrorCode::CoordinatorNotAvailable, "producer verification did not settle; retry"),
            -1,
            -1,
        ),
    }
}

/// Wait until the appended batch is as durable as the request asked, then answer.
async fn finish_produce(shared: &Shared, c: &Checked, appended: Appended) -> ProduceResponse {
    let (r, header, part) = (&c.r, &c.header, &c.part);
    let (base_offset, end_offset, epoch) = appended.parts();
    if let Err(status) = wait_durable(shared, part, end_offset).await {
        return produce_error(status, header.producer_epoch, epoch);
    }
    if r.acks == ACKS_ALL {
        // Also refuses if leadership moved, during the disk wait too.
        if let Err(status) = wait_committed(shared, part, end_offset, epoch).await {
            return produce_error(status, header.producer_epoch, epoch);
        }
    } else if shared.config.fsync == FsyncPolicy::Always {
        let now = part.leadership();
        if !now.is_leader || now.leader_epoch != epoch {
            // Deposed while the write went to disk: the new leader may cut it.
            let status = Status::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{}-{}: this broker stopped leading at epoch {epoch} before the batch at offset \
                     {base_offset} was on disk; retry with the current leader",
                    r.topic, r.partition
                ),
            );
            return produce_error(status, header.producer_epoch, now.leader_epoch);
        }
    }
    if matches!(appended, Appended::Duplicate { .. }) {
        shared.control.stats.metrics.duplicates_answered.inc();
        tracing::debug!(topic = %r.topic, partition = r.partition, base_offset, "duplicate batch answered with its original offset");
    }
    ProduceResponse {
        status: Status::ok(),
        base_offset,
        log_end_offset: end_offset,
        current_producer_epoch: header.producer_epoch,
        current_leader_epoch: epoch,
        // The stamp `check_produce_ref` put on the batch (a duplicate's answer carries the
        // retry's stamp, not the stored one's).
        log_append_time_ms: if header.attributes & protocol::batch::ATTR_LOG_APPEND_TIME != 0 {
            header.max_timestamp
        } else {
            -1
        },
    }
}

/// Ask the coordinator to register the partition under the producer's epoch (or, with
/// `verify_only`, to confirm it is in the open transaction). On refusal returns the status to
/// answer with and the current epoch.
async fn verify(shared: &Shared, req: AddPartitionRequest) -> Result<(), (Status, i16)> {
    let producer_id = req.producer_id;
    let unavailable = |detail: String| {
        (
            Status::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("cannot verify producer id {producer_id} with the coordinator: {detail}; retry"),
            ),
            -1,
        )
    };
    let req = Request::AddPartition(req);
    let resp = call_coordinator(shared, req, Duration::from_millis(shared.config.verify_timeout_ms))
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let Response::AddPartition(a) = resp else {
        return Err(unavailable(format!("unexpected answer: {}", resp.status())));
    };
    // A deposed replica's verification (answered from its memory) confirms nothing.
    check_coordinator_epoch(shared, a.coordinator_epoch).await.map_err(|s| unavailable(s.message))?;
    match a.status.code {
        ErrorCode::None => Ok(()),
        // The partition leader answers a stale producer epoch with INVALID_PRODUCER_EPOCH,
        // passing on the coordinator's explanation and current epoch.
        ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch => {
            Err((Status::new(ErrorCode::InvalidProducerEpoch, a.status.message), a.current_epoch))
        }
        _ => Err((a.status, a.current_epoch)),
    }
}

fn fetch(shared: &Shared, r: FetchRequest) -> FetchResponse {
    let err = |status| FetchResponse {
        status,
        high_watermark: -1,
        last_stable_offset: -1,
        current_leader_epoch: -1,
        aborted: Vec::new(),
        records: Bytes::new(),
    };
    if r.isolation != protocol::READ_UNCOMMITTED && r.isolation != protocol::READ_COMMITTED {
        return err(Status::new(
            ErrorCode::InvalidRequest,
            format!("isolation {} is not 0 (read_uncommitted) or 1 (read_committed)", r.isolation),
        ));
    }
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return err(s),
    };
    // A fetch returns at most FETCH_BYTES_MAX (and at least one batch), whatever it asks for.
    let max_bytes = (r.max_bytes.max(0) as usize).min(FETCH_BYTES_MAX);
    match part.fetch(r.offset, max_bytes, r.leader_epoch, r.isolation) {
        Ok(f) => FetchResponse {
            status: Status::ok(),
            high_watermark: f.high_watermark,
            last_stable_offset: f.last_stable_offset,
            current_leader_epoch: f.leader_epoch,
            aborted: f.aborted,
            records: f.records,
        },
        Err(FetchError::Leader(e)) => err(leader_status(shared, &r.topic, r.partition, &e)),
        Err(e @ FetchError::OutOfRange { .. }) => err(Status::new(ErrorCode::OffsetOutOfRange, e.to_string())),
        Err(e @ FetchError::Io(_)) => err(Status::new(ErrorCode::KafkaStorageError, e.to_string())),
    }
}

/// DeleteRecords (KIP-107) on this broker, the leader of `topic`-`index`: its log start moves to
/// `offset` (-1: the high watermark) on disk here, then the answer waits, at most `timeout_ms`,
/// until every replica the high watermark counts has its own there too (the next Replicate
/// carries it). Returns Kafka's low watermark. Both listeners call it.
async fn delete_records(shared: &Shared, topic: &str, index: i32, offset: i64, timeout_ms: i32) -> Result<i64, Status> {
    let part = partition(shared, topic, index)?;
    let mut progress = part.subscribe();
    let (target, leader_epoch) = part.delete_records(-1, offset).map_err(|e| match e {
        DeleteRecordsError::Leader(e) => leader_status(shared, topic, index, &e),
        e @ DeleteRecordsError::OutOfRange { .. } => {
            Status::new(ErrorCode::OffsetOutOfRange, format!("{topic}-{index}: {e}"))
        }
        e @ DeleteRecordsError::Storage(_) => {
            Status::new(ErrorCode::KafkaStorageError, format!("{topic}-{index}: {e}"))
        }
    })?;
    let timeout_ms = u64::try_from(timeout_ms).unwrap_or(0).min(shared.config.request_timeout_ms.max(1));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let low = part.low_watermark(leader_epoch).map_err(|e| leader_status(shared, topic, index, &e))?;
        if low >= target {
            return Ok(low);
        }
        tokio::select! {
            changed = progress.changed() => {
                if changed.is_err() {
                    return Err(Status::new(ErrorCode::NotLeaderOrFollower, format!("{topic}-{index} is gone from this broker")));
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(Status::new(
                    ErrorCode::RequestTimedOut,
                    format!(
                        "{topic}-{index}: the leader hides the records below offset {target}, but an in-sync replica \
                         has not confirmed it within {timeout_ms} ms (the low watermark is {low}); retry to wait again"
                    ),
                ));
            }
        }
    }
}

/// Apply a leader's push in arrival order; the wait for the disk runs beside later requests.
fn replicate(shared: &Arc<Shared>, r: ReplicateRequest) -> net::Handled {
    let answer_diverged = |diverging_epoch, status, leo, hint, epoch| ReplicateResponse {
        status,
        log_end_offset: leo,
        hint_offset: hint,
        diverging_epoch,
        current_leader_epoch: epoch,
        log_start_offset: -1,
    };
    let answer = move |status, leo, hint, epoch| answer_diverged(-1, status, leo, hint, epoch);
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return net::Handled::answer(Response::Replicate(answer(s, -1, -1, -1))),
    };
    let epoch = part.leadership().leader_epoch;
    let refused = match part.apply_replicated_at(&r, shared.config.leader_epoch_checks) {
        // A follower confirms only what it has made durable (with --fsync always), and only if
        // its log was not cut meanwhile.
        Ok((leo, generation)) => {
            let shared = shared.clone();
            return net::Handled::Applied(Box::pin(async move {
                Response::Replicate(match wait_durable_at(&shared, &part, leo, Some(generation)).await {
                    // The log start is on disk when it moves (`PartitionLog::delete_before`).
                    Ok(()) => ReplicateResponse {
                        log_start_offset: part.log_start_offset(),
                        ..answer(Status::ok(), leo, -1, epoch)
                    },
                    Err(status) => answer(status, -1, -1, epoch),
                })
            }));
        }
        Err(ReplicateError::Mismatch { hint, diverging_epoch, log_end_offset }) => answer_diverged(
            diverging_epoch,
            Status::new(
                ErrorCode::OffsetOutOfRange,
                format!("log diverges before offset {}; resend from {hint}", r.from_offset),
            ),
            log_end_offset,
            hint,
            epoch,
        ),
        Err(ReplicateError::Leader(e)) => {
            if matches!(e, LeaderEpochError::Fenced { .. }) {
                shared.control.stats.replication_refusals_sent.fetch_add(1, Ordering::Relaxed);
                // A stale leader's append, refused here as its client's would be there.
                shared.control.stats.metrics.refused(Refusal::LeaderEpoch);
                tracing::warn!(target: "epochfence::fencing", reason = Refusal::LeaderEpoch.label(), topic = %r.topic, partition = r.partition, sender = r.leader_id, sender_epoch = r.leader_epoch, epoch, "refused replication from a stale leader");
            }
            answer(leader_status(shared, &r.topic, r.partition, &e), -1, -1, epoch)
        }
        Err(ReplicateError::Gate(e)) => {
            let why =
                if matches!(e, GateError::StaleEpoch { .. }) { Refusal::ProducerEpoch } else { Refusal::Sequence };
            shared.control.stats.metrics.refused(why);
            tracing::error!(topic = %r.topic, partition = r.partition, error = %e, "replicated batch breaks the producer gate; refused");
            answer(Status::new(ErrorCode::InvalidProducerEpoch, e.to_string()), -1, -1, epoch)
        }
        Err(e @ ReplicateError::Corrupt(_)) => {
            answer(Status::new(ErrorCode::CorruptMessage, e.to_string()), -1, -1, epoch)
        }
        Err(e @ ReplicateError::OtherTopic { .. }) => {
            tracing::warn!(topic = %r.topic, partition = r.partition, sender = r.leader_id, error = %e, "refused replication of another topic of the same name");
            answer(Status::new(ErrorCode::UnknownTopicId, e.to_string()), -1, -1, epoch)
        }
        Err(e @ ReplicateError::Storage(_)) => {
            answer(Status::new(ErrorCode::KafkaStorageError, e.to_string()), -1, -1, epoch)
        }
        Err(e @ ReplicateError::WouldCutCommitted { .. }) => {
            // The follower stays out of the ISR (it acknowledges nothing) and says why in its
            // heartbeats, for `admin describe`.
            shared.control.stats.metrics.cut_refusals.inc();
            tracing::error!(topic = %r.topic, partition = r.partition, error = %e, "refusing the leader's replication");
            answer(Status::new(ErrorCode::NotLeaderOrFollower, e.to_string()), -1, -1, epoch)
        }
    };
    net::Handled::answer(Response::Replicate(refused))
}

/// A marker is appended in arrival order, in the handler call; only the wait for it to be
/// committed runs beside the connection's later requests, so markers to different partitions
/// (the coordinator sends them all on one connection) do not wait for each other: one
/// partition whose followers lag does not hold back every fence and commit on this broker.
///
/// Every marker carries its coordinator's epoch: one from a deposed coordinator replica is
/// refused (TRANSACTION_COORDINATOR_FENCED); the first from a newer one waits until its epoch
/// is recorded, and the connection's later requests wait behind it.
fn write_marker(shared: &Arc<Shared>, r: WriteMarkerRequest) -> net::Handled {
    {
        // Appended under the epoch gate: no newer coordinator epoch is recorded meanwhile (a
        // record waits for this append; this waits, once per takeover, for a record's write).
        let (highest, _held) = shared.log_dir.coordinator_epoch_held();
        if r.coordinator_epoch == highest {
            return append_marker(shared, r);
        }
    }
    let shared = shared.clone();
    let checked = async move {
        let refused = |status: Status| {
            tracing::warn!(topic = %r.topic, partition = r.partition, coordinator_epoch = r.coordinator_epoch, %status, "marker refused");
            if status.code == ErrorCode::TransactionCoordinatorFenced {
                shared.control.stats.metrics.refused(crate::metrics::Refusal::CoordinatorEpoch);
            }
            Response::WriteMarker(WriteMarkerResponse { status, offset: -1, current_producer_epoch: -1 })
        };
        if let Err(status) = check_coordinator_epoch(&shared, r.coordinator_epoch).await {
            return refused(status);
        }
        let appended = {
            // As in the fast path: appended under the gate, unless a newer epoch came meanwhile.
            let (highest, _held) = shared.log_dir.coordinator_epoch_held();
            (r.coordinator_epoch >= highest).then(|| append_marker(&shared, r.clone())).ok_or(highest)
        };
        match appended {
            Ok(net::Handled::Applied(answer) | net::Handled::Serial(answer)) => answer.await,
            Err(highest) => refused(Status::new(
                ErrorCode::TransactionCoordinatorFenced,
                format!("coordinator epoch {} is older than {highest}, recorded meanwhile", r.coordinator_epoch),
            )),
        }
    };
    net::Handled::serial(checked)
}

fn append_marker(shared: &Arc<Shared>, r: WriteMarkerRequest) -> net::Handled {
    let err = |status, current| {
        net::Handled::answer(Response::WriteMarker(WriteMarkerResponse {
            status,
            offset: -1,
            current_producer_epoch: current,
        }))
    };
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return err(s, -1),
    };
    if r.producer_id < 0 || r.producer_epoch < 0 {
        return err(Status::new(ErrorCode::InvalidRequest, "a marker needs a producer id and epoch of 0 or more"), -1);
    }
    let kind = if r.commit { MarkerKind::Commit } else { MarkerKind::Abort };
    let marker = build_marker(
        r.producer_id,
        r.producer_epoch,
        r.marker_sequence,
        kind,
        r.coordinator_epoch,
        shared.now_ms() as i64,
    );
    let header = match BatchHeader::parse(&marker) {
        Ok(h) => h,
        Err(e) => return err(Status::new(ErrorCode::InvalidRequest, format!("marker does not form a batch: {e}")), -1),
    };
    // A marker is committed only with min.insync.replicas in sync, as an acks=all write.
    let appended = part.append(&marker, &header, r.leader_epoch, true);
    let metrics = &shared.control.stats.metrics;
    match &appended {
        Ok(Appended::New { .. }) => {
            metrics.markers_written.inc();
        }
        Ok(Appended::Duplicate { .. }) | Err(AppendError::NeedsVerification { .. }) => {}
        Err(e) => metrics.refused(refusal(e)),
    }
    match appended {
        Ok(appended) => {
            let shared = shared.clone();
            net::Handled::Applied(Box::pin(async move {
                Response::WriteMarker(marker_committed(&shared, &part, &r, appended).await)
            }))
        }
        Err(AppendError::Gate(GateError::StaleEpoch { current, .. })) => err(
            Status::new(
                ErrorCode::InvalidProducerEpoch,
                format!("marker at epoch {} is older than the partition's {current}", r.producer_epoch),
            ),
            current,
        ),
        Err(AppendError::Leader(e)) => err(leader_status(shared, &r.topic, r.partition, &e), -1),
        Err(e @ AppendError::NotEnoughReplicas { .. }) => {
            err(Status::new(ErrorCode::NotEnoughReplicas, format!("{}-{}: {e}", r.topic, r.partition)), -1)
        }
        Err(e) => err(
            Status::new(ErrorCode::KafkaStorageError, e.to_string()),
            part.producer_epoch(r.producer_id).unwrap_or(-1),
        ),
    }
}

/// Answer an appended marker once it is durable and committed: a fence counts only once every
/// in-sync replica holds it, so any future leader will.
async fn marker_committed(
    shared: &Shared,
    part: &Partition,
    r: &WriteMarkerRequest,
    appended: Appended,
) -> WriteMarkerResponse {
    let err = |status| WriteMarkerResponse { status, offset: -1, current_producer_epoch: -1 };
    let (offset, end_offset, epoch) = appended.parts();
    if let Err(status) = wait_durable(shared, part, end_offset).await {
        return err(status);
    }
    if let Err(status) = wait_committed(shared, part, end_offset, epoch).await {
        return err(status);
    }
    tracing::info!(topic = %r.topic, partition = r.partition, producer_id = r.producer_id, epoch = r.producer_epoch, offset, "marker written");
    WriteMarkerResponse { status: Status::ok(), offset, current_producer_epoch: r.producer_epoch }
}
