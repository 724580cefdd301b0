//! The coordinator's tokio shell: decode, decide under a short lock, persist, then answer.
//!
//! Ordering that the fencing argument relies on (docs/ARCHITECTURE.md):
//! 1. a decision and the queueing of its journal entries happen under one lock, so the
//!    journal order is the decision order;
//! 2. nothing is answered before its entries are flushed;
//! 3. a grant that bumps an epoch is answered only after a fence marker at the new epoch is on
//!    every partition registered under an older epoch.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use net::{ClientTls, Connection, Dialer, ServerLimits};
use protocol::{
    AddPartitionRequest, AddPartitionResponse, AlterPartitionResponse, DescribeResponse, ElectLeaderResponse,
    EndTxnRequest, EndTxnResponse, ErrorCode, HeartbeatResponse, HeldState, InitProducerIdResponse, MetadataResponse,
    Request, Response, Status, TransactionalState, WriteMarkerRequest,
};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::cluster::{BrokerStart, Cluster, ClusterConfig};
use crate::cluster::{MarkerRoute, OFFSETS_PARTITION_ID};
use crate::entry::{Entry, FenceTarget};
use crate::groups::{GroupConfig, GroupTable, OFFSETS_TOPIC};

mod groups;
use crate::journal::{Journal, JournalError};
use crate::metrics::CoordinatorMetrics;
use crate::table::{EndDecision, InitDecision, ProducerTable, RegisterDecision, Registration, TableConfig};

/// Coordinator settings.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Directory holding the journal.
    pub data_dir: PathBuf,
    /// Cluster defaults and leases.
    pub cluster: ClusterConfig,
    /// Producer table limits.
    pub table: TableConfig,
    /// Consumer group limits and switches.
    pub groups: GroupConfig,
    /// Connection limits.
    pub limits: ServerLimits,
    /// How long an init or EndTxn waits for its markers before answering CONCURRENT_TRANSACTIONS
    /// (the markers keep being retried in the background), in milliseconds.
    pub fence_wait_ms: u64,
    /// Deadline of one marker request to a broker, in milliseconds.
    pub marker_timeout_ms: u64,
    /// Dial brokers over TLS, trusting these CAs.
    pub peer_tls: Option<ClientTls>,
    /// Write a snapshot and start a new journal generation after this many journal entries,
    /// so a restart replays at most about this many entries.
    pub snapshot_every_entries: u64,
    /// How often idle transactional ids and empty groups are looked for, in milliseconds: each
    /// is forgotten between its expiration and that plus twice this.
    pub expiry_check_interval_ms: u64,
    /// `--scram-users-file`'s users and passwords: at each start each gets SCRAM-SHA-256 and
    /// SCRAM-SHA-512 credentials (journaled, 4096 iterations, new salts) unless it holds ones
    /// that match ([`crate::credentials::CredentialStore::from_users`]). The credentials, with
    /// those made through AlterUserScramCredentials, go to each broker in its heartbeat answers
    /// whenever its copy is another version.
    pub scram_users: Vec<(String, String)>,
    /// The authorizer (`--authorizer`, which needs a cluster secret): `None` leaves it off, and
    /// anyone who can reach a listener may fence anyone.
    pub authorizer: Option<crate::acls::AuthorizerConfig>,
}

impl CoordinatorConfig {
    /// Defaults with the journal in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        CoordinatorConfig {
            data_dir: data_dir.into(),
            cluster: ClusterConfig::default(),
            table: TableConfig::default(),
            groups: GroupConfig::default(),
            limits: ServerLimits::default(),
            fence_wait_ms: 10_000,
            marker_timeout_ms: 5_000,
            peer_tls: None,
            snapshot_every_entries: 100_000,
            expiry_check_interval_ms: 60_000,
            scram_users: Vec::new(),
            authorizer: None,
        }
    }
}

/// Why the coordinator could not start.
#[derive(Debug, Error)]
pub enum CoordinatorError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {detail}")]
    DataDir {
        /// The directory.
        path: String,
        /// The OS error.
        detail: String,
    },
    /// The journal could not be opened or replayed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// etcd could not be reached or used (`--etcd-endpoints`).
    #[error("{0}")]
    Etcd(String),
    /// A journal record does not decode.
    #[error("journal record {index} does not decode: {detail}")]
    BadRecord {
        /// Record number.
        index: usize,
        /// What is wrong.
        detail: String,
    },
}

struct State {
    table: ProducerTable,
    cluster: Cluster,
    groups: GroupTable,
}

impl State {
    /// Apply the producer table's entries to the groups too: a transaction's end commits or
    /// drops the offsets it staged.
    fn observe(&mut self, entries: &[Entry]) {
        for e in entries {
            self.groups.apply(e);
        }
    }

    /// The state held beside its cap: (kind, count, cap), as `admin describe` and the
    /// metrics show them.
    fn held(&self) -> Vec<(&'static str, usize, usize)> {
        let (tids, tids_max) = self.table.transactional_ids();
        let c = self.groups.counts();
        vec![
            ("transactional_ids", tids, tids_max),
            ("groups", c.groups.0, c.groups.1),
            ("group_offsets", c.fullest_group_offsets.0, c.fullest_group_offsets.1),
            ("offsets", c.offsets.0, c.offsets.1),
        ]
    }
}

/// Who waits for a group answer: (group, member id, a SyncGroup rather than a JoinGroup).
type WaiterKey = (String, String, bool);

pub(crate) struct Shared {
    /// Decisions and the queueing of their entries; never held across an `.await`.
    state: Mutex<State>,
    journal: Journal,
    /// Journal entries queued since the last snapshot.
    since_snapshot: std::sync::atomic::AtomicU64,
    started: Instant,
    config: CoordinatorConfig,
    /// Idle marker connections to brokers, by address; never held across an `.await`. Each
    /// connection carries one marker call at a time (see [`MARKER_CONNECTIONS_MAX`]).
    peers: Mutex<HashMap<String, MarkerPeers>>,
    metrics: CoordinatorMetrics,
    /// JoinGroup and SyncGroup requests waiting for their rebalance; never held across an
    /// `.await`.
    group_waiters: Mutex<HashMap<WaiterKey, oneshot::Sender<Response>>>,
    /// This replica's coordinator epoch (0 on the local journal; bumped in etcd at every
    /// takeover), on every marker and every answer to a broker.
    coordinator_epoch: i32,
    /// The etcd lease this replica leads under, as its own clock sees it (none on the local
    /// journal): past it, nothing is answered.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    lease: Option<Arc<LeaseClock>>,
    /// Stops the background work (loops, markers) when this replica steps down.
    cancel: tokio_util::sync::CancellationToken,
    /// The base of the authorization and credentials versions brokers see: new at each start,
    /// in the high 32 bits, the changes since counted in the low ones, so a broker tells a
    /// newer set from an older one of the same process (see
    /// [`crate::acls::AclStore::authorization`]).
    authorization_base: i64,
}

/// Until when a replica's lease holds, by its own clock: the send time of the last keep-alive
/// that etcd answered, plus the TTL it answered. etcd renews the lease when the keep-alive
/// arrives, after it was sent, so the lease lasts at least this long there too (with clocks
/// that run at the same rate). Counted on CLOCK_BOOTTIME, which goes on counting while the
/// machine or VM is suspended (CLOCK_MONOTONIC, Rust's `Instant`, stops then, and a resumed
/// replica would think its lease still held).
#[derive(Debug)]
pub struct LeaseClock {
    valid_until_us: std::sync::atomic::AtomicU64,
}

impl LeaseClock {
    /// Now on the lease's clock, in microseconds.
    pub fn now_us() -> u64 {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
            t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
        }
    }

    /// A lease valid until `until_us` (on [`LeaseClock::now_us`]'s clock).
    pub fn new(until_us: u64) -> LeaseClock {
        LeaseClock { valid_until_us: std::sync::atomic::AtomicU64::new(until_us) }
    }

    /// The lease holds until `until_us` (never moves back).
    pub fn extend(&self, until_us: u64) {
        self.valid_until_us.fetch_max(until_us, std::sync::atomic::Ordering::SeqCst);
    }

    /// End the lease now (stepping down).
    pub fn end(&self) {
        self.valid_until_us.store(0, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the lease still holds now.
    pub fn holds(&self) -> bool {
        Self::now_us() < self.valid_until_us.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Shared {
    /// Run `fut` until it ends or this replica steps down.
    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = cancel.cancelled() => {}
            }
        });
    }

    /// Whether this replica may answer now: always on the local journal; with etcd, while its
    /// lease holds by its own clock and it has not stepped down.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn serving(&self) -> bool {
        !self.cancel.is_cancelled() && self.lease.as_ref().is_none_or(|l| l.holds())
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue entries; call under the state lock so journal order is decision order.
    fn persist(&self, entries: &[Entry]) -> oneshot::Receiver<Result<(), JournalError>> {
        self.since_snapshot.fetch_add(entries.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.metrics.count(entries);
        crate::events::record(entries);
        self.journal.append(entries.iter().map(Entry::encode).collect())
    }
}

async fn durable(rx: oneshot::Receiver<Result<(), JournalError>>) -> Result<(), Status> {
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Status::new(ErrorCode::CoordinatorNotAvailable, format!("coordinator cannot persist: {e}"))),
        Err(_) => Err(Status::new(ErrorCode::CoordinatorNotAvailable, "coordinator journal writer stopped")),
    }
}

/// Open the journal in `config.data_dir`, replay it, and serve on `listener` until `shutdown`.
pub async fn run(
    listener: TcpListener,
    config: CoordinatorConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), CoordinatorError> {
    run_with_metrics(listener, None, config, shutdown).await
}

/// [`run`], also serving the coordinator's Prometheus metrics at `GET /metrics` on
/// `metrics_listener`.
pub async fn run_with_metrics(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    config: CoordinatorConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), CoordinatorError> {
    let config = with_request_deadlines(config);
    let recovered = recover(&config)?;
    let shared = start(recovered, config.clone(), 0, None);
    // The metrics endpoint stops with the coordinator.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    if let Some(l) = metrics_listener {
        let scrape = shared.clone();
        let encode = move || scrape.encode_metrics();
        let mut stopped = stop_rx.clone();
        tokio::spawn(net::metrics::serve_metrics(l, Arc::new(encode), async move {
            let _ = stopped.changed().await;
        }));
    }
    let active = shared.clone();
    let logins = OwnLogins::new(&config, move || Ok(active.clone()));
    let limits = net::ServerLimits { client_logins: Some(Arc::new(logins)), ..config.limits.clone() };
    net::serve(listener, handler(shared.clone()), limits, shutdown).await;
    shared.cancel.cancel();
    let _ = stop_tx.send(());
    Ok(())
}

/// The connection deadline `config` needs: longer than an init's or EndTxn's wait for its
/// markers, and than a rebalance a JoinGroup waits for.
pub(crate) fn with_request_deadlines(mut config: CoordinatorConfig) -> CoordinatorConfig {
    config.limits.request_timeout_ms = config.limits.request_timeout_ms.max(config.fence_wait_ms + 5_000);
    config.limits.request_timeout_ms =
        config.limits.request_timeout_ms.max(config.groups.rebalance_timeout_max_ms.max(0) as u64 + 10_000);
    config
}

/// Serve `recovered` as the active coordinator (at `coordinator_epoch`, under `lease` if it
/// leads under one): start the background loops and resume unfinished markers. Handle its
/// requests with [`handler`]; `cancel` the returned state's token to stop it.
pub(crate) fn start(
    recovered: Recovered,
    config: CoordinatorConfig,
    coordinator_epoch: i32,
    lease: Option<Arc<LeaseClock>>,
) -> Arc<Shared> {
    let Recovered { journal, mut table, mut cluster, mut groups, replayed } = recovered;
    table.restart_clocks(0);
    groups.restart_clocks(0);
    // The clock starts at 0 below: a broker may hold a lease an earlier process granted.
    cluster.set_started(0);
    // Recorded before any heartbeat is answered: each answer waits for the journal up to it.
    let transaction_version = cluster.record_transaction_version();
    let pending = table.pending_fences();
    let shared = Arc::new(Shared {
        state: Mutex::new(State { table, cluster, groups }),
        group_waiters: Mutex::new(HashMap::new()),
        since_snapshot: std::sync::atomic::AtomicU64::new(replayed as u64),
        started: Instant::now(),
        peers: Mutex::new(HashMap::new()),
        metrics: CoordinatorMetrics::new(journal.append_latency()),
        journal,
        config: config.clone(),
        coordinator_epoch,
        lease,
        cancel: tokio_util::sync::CancellationToken::new(),
        authorization_base: {
            let mut base = [0u8; 4];
            // A failed random source leaves 1: still not a broker's 0 ("nothing heard yet").
            let _ = getrandom::fill(&mut base);
            i64::from((u32::from_le_bytes(base) & 0x7fff_ffff) | 1) << 32
        },
    });
    if let Some(entry) = transaction_version {
        tracing::info!(?entry, "transaction version recorded");
        drop(shared.persist(&[entry]));
    }
    if !config.scram_users.is_empty() {
        // Before any heartbeat is answered (they queue behind it in the journal).
        let mut st = shared.lock();
        let salt = || {
            let mut salt = vec![0u8; 32];
            if let Err(e) = getrandom::fill(&mut salt) {
                tracing::error!(error = %e, "no random source for SCRAM salts; using the time");
                salt = LeaseClock::now_us().to_be_bytes().to_vec();
            }
            salt
        };
        if let Some(entry) = st.cluster.credentials.from_users(&config.scram_users, salt) {
            st.cluster.apply(&entry);
            drop(shared.persist(&[entry]));
        }
        tracing::info!(users = config.scram_users.len(), "SCRAM credentials of --scram-users-file in place");
    }
    shared.spawn(tick_loop(shared.clone()));
    shared.spawn(groups::group_tick_loop(shared.clone()));
    shared.spawn(expiry_loop(shared.clone()));
    shared.spawn(snapshot_loop(shared.clone()));
    for (tid, epoch, commit, targets) in pending {
        tracing::info!(transactional_id = %tid, epoch, commit, partitions = targets.len(), "resuming markers after restart");
        start_markers(shared.clone(), tid, epoch, commit, targets);
    }
    if config.limits.cluster_secret.is_none() {
        tracing::warn!("no cluster secret: broker heartbeats and ISR changes are accepted from anyone who can connect");
    }
    match &config.authorizer {
        Some(a) => {
            // Members, and clients that logged in as far as the ACLs allow (see ServerLimits).
            config.limits.members_only.store(true, std::sync::atomic::Ordering::Relaxed);
            let acls = shared.lock().cluster.acls.len();
            tracing::info!(super_users = ?a.super_users, allow_everyone_if_no_acl_found = a.allow_everyone_if_no_acl_found, acls, "authorizer on");
        }
        None => tracing::warn!(
            "authorization is off (no --authorizer): anyone who can reach a listener may initialise any transactional id, and so fence anyone"
        ),
    }
    shared
}

/// The coordinator's own-protocol client logins (see [`net::ClientLogins`]): its credentials
/// and ACLs as they stand, on the replica that serves (`active`; an error to answer otherwise).
pub(crate) struct OwnLogins {
    active: Box<dyn Fn() -> Result<Arc<Shared>, Status> + Send + Sync>,
    /// The authorizer of the ACLs' last version asked about.
    cache: Mutex<Option<Arc<protocol::acl::Authorizer>>>,
    binder: Option<protocol::auth::ProducerIdBinder>,
}

impl OwnLogins {
    pub(crate) fn new(
        config: &CoordinatorConfig,
        active: impl Fn() -> Result<Arc<Shared>, Status> + Send + Sync + 'static,
    ) -> OwnLogins {
        OwnLogins {
            active: Box::new(active),
            cache: Mutex::new(None),
            binder: config.limits.cluster_secret.as_ref().map(protocol::auth::ProducerIdBinder::new),
        }
    }
}

impl net::ClientLogins for OwnLogins {
    fn credential(
        &self,
        user: &str,
        mechanism: protocol::sasl::ScramMechanism,
    ) -> Result<Option<protocol::sasl::ScramCredential>, Status> {
        Ok((self.active)()?.lock().cluster.credentials.lookup(user, mechanism))
    }

    fn authorizer(&self) -> Option<Arc<protocol::acl::Authorizer>> {
        let shared = (self.active)().ok()?;
        let st = shared.lock();
        let version = st.cluster.acls.version(shared.authorization_base);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match cache.as_ref().filter(|a| a.settings().version == version) {
            Some(a) => Some(a.clone()),
            None => {
                let a = Arc::new(protocol::acl::Authorizer::new(shared.authorization(&st, version.wrapping_add(1))?));
                *cache = Some(a.clone());
                Some(a)
            }
        }
    }

    fn binder(&self) -> Option<&protocol::auth::ProducerIdBinder> {
        self.binder.as_ref()
    }
}

impl Shared {
    /// The authorizer's settings and every ACL, unless the broker asking holds this version
    /// already (`held`).
    fn authorization(&self, st: &State, held: i64) -> Option<protocol::acl::Authorization> {
        let a = st.cluster.acls.authorization(self.config.authorizer.as_ref(), self.authorization_base);
        (a.version != held).then_some(a)
    }

    /// The Prometheus exposition of this replica's metrics.
    pub(crate) fn encode_metrics(&self) -> String {
        let (live, held) = {
            let st = self.lock();
            (st.cluster.live_brokers(self.now_ms()).len(), st.held())
        };
        self.metrics.set_live_brokers(live);
        self.metrics.set_held(&held);
        self.metrics.encode()
    }

    /// Stop: no more answers, no more background work.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn step_down(&self) {
        self.cancel.cancel();
        // Waiting joins and syncs end now (their answers become NOT_COORDINATOR).
        self.group_waiters.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if let Some(l) = &self.lease {
            l.end();
        }
    }

    /// Fires once the journal stopped for good (a failed or uncertain write).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn journal_stopped(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.journal.stopped()
    }
}

/// The state a coordinator restarts with: its journal (open for appending) and the producer
/// table and cluster metadata replayed from the newest intact snapshot and the journal after it.
pub struct Recovered {
    /// The journal.
    pub journal: Journal,
    /// Producer table.
    pub table: ProducerTable,
    /// Cluster metadata.
    pub cluster: Cluster,
    /// Consumer groups and their offsets.
    pub groups: GroupTable,
    /// Entries replayed (snapshot and journal).
    pub replayed: usize,
}

/// Open the journal in `config.data_dir` and replay it.
pub fn recover(config: &CoordinatorConfig) -> Result<Recovered, CoordinatorError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| CoordinatorError::DataDir {
        path: config.data_dir.display().to_string(),
        detail: e.to_string(),
    })?;
    let (journal, replay) = Journal::open(config.data_dir.join("journal"))?;
    rebuild(config, journal, replay)
}

/// The state `replay` holds (a snapshot, then the journal after it), with `journal` open to
/// append to.
pub(crate) fn rebuild(
    config: &CoordinatorConfig,
    journal: Journal,
    replay: crate::journal::Replay,
) -> Result<Recovered, CoordinatorError> {
    let mut table_config = config.table.clone();
    if config.authorizer.is_some() {
        // Producer ids name their owner, which brokers check every write against.
        table_config.pid_binder = config.limits.cluster_secret.as_ref().map(protocol::auth::ProducerIdBinder::new);
    }
    let mut table = ProducerTable::new(table_config);
    let mut cluster = Cluster::new(config.cluster.clone());
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| CoordinatorError::DataDir {
        path: config.data_dir.display().to_string(),
        detail: format!("no random source for member ids: {e}"),
    })?;
    let mut groups = GroupTable::new(config.groups.clone(), u64::from_be_bytes(nonce));
    for skipped in &replay.skipped_snapshots {
        tracing::error!(%skipped, "skipped a damaged snapshot; recovered from the generation before it");
    }
    let replayed = replay.snapshot.len() + replay.payloads.len();
    for (index, payload) in replay.snapshot.into_iter().chain(replay.payloads).enumerate() {
        let entry = Entry::decode(payload).map_err(|e| CoordinatorError::BadRecord { index, detail: e.to_string() })?;
        table.apply(&entry);
        cluster.apply(&entry);
        groups.apply(&entry);
    }
    tracing::info!(
        next_producer_id = table.next_producer_id(),
        transactional_ids = table.describe(0).len(),
        truncated_bytes = replay.truncated_bytes,
        "coordinator state replayed"
    );
    Ok(Recovered { journal, table, cluster, groups, replayed })
}

/// How the coordinator's requests meet the connection loop (see [`net::Handled`]).
pub(crate) fn handler(shared: Arc<Shared>) -> net::Handler {
    Arc::new(move |req| match req {
        // Decided at once, in order; only the wait for the journal overlaps the connection's
        // next requests, so a broker's verifications (all on its one connection) share flushes.
        Request::AddPartition(r) => add_partition(&shared, r),
        // The rest one request of a connection at a time: a client's InitProducerId and EndTxn
        // are decided, made durable and answered in the order it sent them.
        req => {
            let shared = shared.clone();
            net::Handled::serial(async move { handle(shared, req).await })
        }
    })
}

/// AddPartitionsToTxn: the register decision is made now, under the lock, in the order the
/// connection's requests arrived; an acceptance is answered once its journal entry is durable.
fn add_partition(shared: &Arc<Shared>, r: AddPartitionRequest) -> net::Handled {
    let (decision, rx) = {
        let mut st = shared.lock();
        let d = match st.cluster.registration_topic_id(&r.topic, r.partition, r.topic_id) {
            Err(status) => RegisterDecision::Refuse { status, epoch: -1 },
            Ok(topic_id) => {
                let now = shared.now_ms();
                let reg = Registration {
                    producer_id: r.producer_id,
                    epoch: r.producer_epoch,
                    topic: &r.topic,
                    partition: r.partition,
                    topic_id,
                    transactional: r.transactional,
                    verify_only: r.verify_only,
                    transaction_version: r.transaction_version,
                };
                st.table.handle_register(&reg, now)
            }
        };
        let rx = match &d {
            RegisterDecision::Accept { entries, .. } => Some(shared.persist(entries)),
            RegisterDecision::Refuse { .. } => None,
        };
        (d, rx)
    };
    match decision {
        RegisterDecision::Accept { epoch, .. } => {
            let rx = rx.expect("accept persists");
            let coordinator_epoch = shared.coordinator_epoch;
            net::Handled::Applied(Box::pin(async move {
                Response::AddPartition(match durable(rx).await {
                    Ok(()) => AddPartitionResponse { status: Status::ok(), current_epoch: epoch, coordinator_epoch },
                    Err(status) => AddPartitionResponse { status, current_epoch: epoch, coordinator_epoch },
                })
            }))
        }
        RegisterDecision::Refuse { status, epoch } => {
            fencing_event(
                "add_partition",
                None,
                r.producer_id,
                r.producer_epoch,
                epoch,
                Some((&r.topic, r.partition)),
                &status,
            );
            let coordinator_epoch = shared.coordinator_epoch;
            net::Handled::answer(Response::AddPartition(AddPartitionResponse {
                status,
                current_epoch: epoch,
                coordinator_epoch,
            }))
        }
    }
}

/// A refusal by the coordinator (a stale epoch, a fenced producer, a transaction not open) as a
/// structured `tracing` event (target `epochfence::fencing`).
fn fencing_event(
    request: &str,
    transactional_id: Option<&str>,
    producer_id: i64,
    producer_epoch: i16,
    current_epoch: i16,
    partition: Option<(&str, i32)>,
    status: &Status,
) {
    let (topic, partition) = partition.unwrap_or(("", -1));
    tracing::info!(
        target: "epochfence::fencing",
        request,
        reason = status.code.name(),
        transactional_id = transactional_id.unwrap_or(""),
        producer_id,
        producer_epoch,
        current_epoch,
        topic,
        partition,
        detail = %status.message,
        "refused by the coordinator"
    );
}

async fn handle(shared: Arc<Shared>, req: Request) -> Response {
    match req {
        Request::InitProducerId(r) => {
            let current = (r.producer_id >= 0).then_some((r.producer_id, r.producer_epoch));
            Response::InitProducerId(
                init(&shared, r.transactional_id.as_deref(), r.transaction_timeout_ms, current, &r.principal).await,
            )
        }
        Request::AddPartition(r) => match add_partition(&shared, r) {
            net::Handled::Applied(answer) | net::Handled::Serial(answer) => answer.await,
        },
        Request::Metadata(r) => {
            let ((brokers, topics, _), rx) = {
                let mut st = shared.lock();
                let now = shared.now_ms();
                let out = st.cluster.handle_metadata(now, &r.topics, r.allow_auto_create);
                let rx = shared.persist(&out.2);
                (out, rx)
            };
            let status = match durable(rx).await {
                Ok(()) => Status::ok(),
                Err(s) => s,
            };
            Response::Metadata(MetadataResponse { status, brokers, topics })
        }
        Request::CreateTopic(r) => {
            // A name whose deleted topic a broker may still serve is created once that broker
            // has dropped it (its next heartbeat, or its lease lapsing): this waits that long.
            let deadline = Instant::now() + Duration::from_millis(shared.config.cluster.broker_lease_ms + 1_000);
            let rx = loop {
                let attempt = {
                    let mut st = shared.lock();
                    let now = shared.now_ms();
                    let (name, sizes) = (&r.name, (r.partitions, r.replication_factor, r.min_insync_replicas));
                    if r.validate_only {
                        // Nothing to persist: answered once what is queued is durable.
                        st.cluster.plan_create_topic_with(now, name, sizes, &r.configs).map(|_| shared.persist(&[]))
                    } else {
                        st.cluster.handle_create_topic_with(now, name, sizes, &r.configs).map(|e| shared.persist(&[e]))
                    }
                };
                match attempt {
                    Err(s) if s.code == ErrorCode::LeaderNotAvailable && Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => break other,
                }
            };
            Response::CreateTopic(match rx {
                Ok(rx) => durable(rx).await.err().unwrap_or_else(Status::ok),
                Err(status) => status,
            })
        }
        Request::AlterConfigs(r) => {
            let rx = {
                let mut st = shared.lock();
                st.cluster.handle_alter_configs(&r.topic, &r.changes, r.replace, r.validate_only).map(|e| {
                    if let Some(e) = &e {
                        tracing::info!(entry = ?e, "topic configs changed");
                    }
                    // Nothing to journal (validate_only, or no change): answered once what is
                    // already queued is durable.
                    shared.persist(e.as_slice())
                })
            };
            Response::AlterConfigs(match rx {
                Ok(rx) => durable(rx).await.err().unwrap_or_else(Status::ok),
                Err(status) => status,
            })
        }
        Request::Reassign(r) => {
            let rx = {
                let mut st = shared.lock();
                let now = shared.now_ms();
                let target = r.replicas.as_deref();
                st.cluster.handle_reassign(now, &r.topic, r.partition, target, r.allow_replication_factor_change).map(
                    |e| {
                        if let Some(e) = &e {
                            tracing::info!(entry = ?e, "partition replicas changed");
                        }
                        shared.persist(e.as_slice())
                    },
                )
            };
            Response::Reassign(match rx {
                Ok(rx) => durable(rx).await.err().unwrap_or_else(Status::ok),
                Err(status) => status,
            })
        }
        Request::ListReassignments(r) => {
            let (reassignments, rx) = {
                let st = shared.lock();
                // Answered once what is queued is durable: a move listed as complete stays so.
                (st.cluster.reassignments(r.topics.as_deref()), shared.persist(&[]))
            };
            match durable(rx).await {
                Ok(()) => Response::ListReassignments(protocol::ListReassignmentsResponse {
                    status: Status::ok(),
                    reassignments,
                }),
                Err(status) => Response::ListReassignments(protocol::ListReassignmentsResponse {
                    status,
                    reassignments: Vec::new(),
                }),
            }
        }
        Request::DeleteTopic(r) => {
            let rx = {
                let mut st = shared.lock();
                st.cluster.handle_delete_topic(&r.name, r.topic_id).map(|e| {
                    tracing::info!(entry = ?e, "topic deleted");
                    shared.persist(&[e])
                })
            };
            Response::DeleteTopic(match rx {
                Ok(rx) => durable(rx).await.err().unwrap_or_else(Status::ok),
                Err(status) => status,
            })
        }
        Request::CreatePartitions(r) => {
            let rx = {
                let mut st = shared.lock();
                let now = shared.now_ms();
                st.cluster
                    .handle_create_partitions(now, &r.name, r.count, &r.assignments, r.validate_only)
                    .map(|e| shared.persist(e.as_slice()))
            };
            Response::CreatePartitions(match rx {
                Ok(rx) => durable(rx).await.err().unwrap_or_else(Status::ok),
                Err(status) => status,
            })
        }
        Request::EndTxn(r) => Response::EndTxn(end_txn(&shared, r).await),
        Request::ElectLeader(r) => {
            let outcome = {
                let mut st = shared.lock();
                let now = shared.now_ms();
                st.cluster.handle_elect_leader(now, &r.topic, r.partition, r.election).map(|entries| {
                    let (leader_id, leader_epoch) = match entries.first() {
                        Some(Entry::LeaderChanged { leader_id, leader_epoch, .. }) => (*leader_id, *leader_epoch),
                        _ => unreachable!("elections produce LeaderChanged first"),
                    };
                    (shared.persist(&entries), leader_id, leader_epoch)
                })
            };
            Response::ElectLeader(match outcome {
                Ok((rx, leader_id, leader_epoch)) => ElectLeaderResponse {
                    status: durable(rx).await.err().unwrap_or_else(Status::ok),
                    leader_id,
                    leader_epoch,
                },
                Err(status) => ElectLeaderResponse { status, leader_id: -1, leader_epoch: -1 },
            })
        }
        Request::Heartbeat(r) => {
            let registered = {
                let mut st = shared.lock();
                let now = shared.now_ms();
                let start = BrokerStart {
                    incarnation: r.incarnation,
                    broker_epoch: r.broker_epoch,
                    previous_broker_epoch: r.previous_broker_epoch,
                    log_dir_id: r.log_dir_id,
                    intact: r.intact,
                };
                st.cluster.handle_registration(now, r.broker_id, start, &r.replicas).map(|(broker_epoch, mut moved)| {
                    for e in &moved {
                        if let Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr, elr } = e {
                            tracing::info!(broker_id = r.broker_id, intact = r.intact, %topic, partition, leader_id, leader_epoch, ?isr, ?elr, "broker restarted");
                        }
                    }
                    let offline = st.cluster.handle_offline(now, r.broker_id, &r.replicas);
                    for e in &offline {
                        tracing::warn!(broker_id = r.broker_id, entry = ?e, "a replica's log failed: it leaves the ISR and its leadership moves");
                    }
                    moved.extend(offline);
                    moved.extend(st.cluster.handle_refusals(now, r.broker_id, &r.replicas));
                    let out = st.cluster.handle_heartbeat(now, r.broker_id, &r.addr, &r.replicas);
                    st.cluster.set_kafka_addr(r.broker_id, &r.kafka_addr);
                    let told = (
                        st.cluster.deleted_among(&r.replicas),
                        st.cluster.removed_among(r.broker_id, &r.replicas),
                        st.cluster.transaction_version(),
                    );
                    let authorization = shared.authorization(&st, r.authorization_version);
                    let credentials = Some(st.cluster.credentials.credentials(shared.authorization_base))
                        .filter(|c| c.version != r.credentials_version);
                    // Also a barrier: every leadership decided before this answer is durable before
                    // a broker acts on it, so no leader epoch is ever announced and then forgotten
                    // (nor a transaction version: it is journaled before the first answer).
                    (broker_epoch, out, told, (authorization, credentials), shared.persist(&moved))
                })
            };
            Response::Heartbeat(match registered {
                Ok((
                    broker_epoch,
                    (lease_ms, assignments, brokers),
                    (deleted, removed, tv),
                    (authorization, credentials),
                    rx,
                )) => {
                    let status = durable(rx).await.err().unwrap_or_else(Status::ok);
                    let (transaction_version, features_epoch) = tv;
                    HeartbeatResponse {
                        status,
                        lease_ms: lease_ms as i32,
                        broker_epoch,
                        assignments,
                        brokers,
                        deleted,
                        coordinator_epoch: shared.coordinator_epoch,
                        transaction_version,
                        features_epoch,
                        credentials,
                        authorization,
                        removed,
                    }
                }
                Err(status) => {
                    tracing::warn!(broker_id = r.broker_id, %status, "broker heartbeat refused");
                    HeartbeatResponse {
                        status,
                        lease_ms: 0,
                        broker_epoch: -1,
                        assignments: Vec::new(),
                        brokers: Vec::new(),
                        deleted: Vec::new(),
                        coordinator_epoch: shared.coordinator_epoch,
                        transaction_version: 0,
                        features_epoch: -1,
                        credentials: None,
                        authorization: None,
                        removed: Vec::new(),
                    }
                }
            })
        }
        Request::Acls(r) => Response::Acls(acls(&shared, r).await),
        Request::ScramCredentials(r) => Response::ScramCredentials(scram_credentials(&shared, r).await),
        Request::AlterPartition(r) => {
            let (rx, resp) = {
                let mut st = shared.lock();
                let (entry, resp) = st.cluster.handle_alter_partition(&r);
                // A refusal waits too: the ISR and epochs it reports must be durable, since the
                // leader acts on them.
                (shared.persist(entry.as_slice()), resp)
            };
            Response::AlterPartition(match durable(rx).await {
                Ok(()) => AlterPartitionResponse { coordinator_epoch: shared.coordinator_epoch, ..resp },
                // Not known to be durable: no state to learn from this answer.
                Err(status) => AlterPartitionResponse {
                    status,
                    leader_epoch: -1,
                    partition_epoch: -1,
                    isr: Vec::new(),
                    coordinator_epoch: shared.coordinator_epoch,
                },
            })
        }
        Request::Describe => {
            // The journaled state it reports is answered once it is in the journal: every
            // change queues its entries under this lock, so an empty append queued here is
            // durable only after all of them are (a state seen here, such as PrepareCommit,
            // survives a crash). Leases and replicas' progress are not journaled.
            let (resp, rx) = {
                let st = shared.lock();
                let now = shared.now_ms();
                let (brokers, partitions) = st.cluster.describe(now);
                let transactional_ids = st
                    .table
                    .describe(now)
                    .into_iter()
                    .map(|t| TransactionalState {
                        transactional_id: t.transactional_id,
                        producer_id: t.producer_id,
                        producer_epoch: t.epoch,
                        partitions: t.partitions,
                        state: t.state.name().to_string(),
                        age_ms: t.age_ms.map_or(-1, |a| a as i64),
                        transaction_timeout_ms: t.transaction_timeout_ms,
                        transaction_version: t.transaction_version,
                    })
                    .collect();
                let held = st
                    .held()
                    .into_iter()
                    .map(|(kind, count, max)| HeldState { kind: kind.into(), count: count as i64, max: max as i64 })
                    .collect();
                let resp = DescribeResponse { status: Status::ok(), brokers, partitions, transactional_ids, held };
                (resp, shared.persist(&[]))
            };
            // A journal that failed answers COORDINATOR_NOT_AVAILABLE, with what memory holds
            // (as Metadata does): an operator can still look.
            let status = durable(rx).await.err().unwrap_or(resp.status);
            Response::Describe(DescribeResponse { status, ..resp })
        }
        req @ (Request::JoinGroup(_)
        | Request::SyncGroup(_)
        | Request::GroupHeartbeat(_)
        | Request::ConsumerHeartbeat(_)
        | Request::LeaveGroup(_)
        | Request::OffsetCommit(_)
        | Request::OffsetFetch(_)
        | Request::AddOffsets(_)
        | Request::DescribeGroups(_)
        | Request::DeleteGroups(_)
        | Request::OffsetDelete(_)) => groups::handle_group(shared, req).await,
        Request::AuthBegin(_) | Request::AuthProve(_) | Request::SaslLogin(_) => Response::Error(Status::new(
            ErrorCode::InvalidRequest,
            "membership proofs and logins are answered by the connection layer",
        )),
        Request::Produce(_)
        | Request::Fetch(_)
        | Request::WriteMarker(_)
        | Request::Replicate(_)
        | Request::DeleteRecords(_) => Response::Error(Status::new(
            ErrorCode::InvalidRequest,
            "this is the coordinator: send produce, fetch and delete-records to the partition leader (see Metadata)",
        )),
    }
}

/// Create and delete ACLs ([`crate::acls::AclStore::decide`]), answered once the change is
/// durable, with the settings and every binding after it.
async fn acls(shared: &Arc<Shared>, r: protocol::AclsRequest) -> protocol::AclsResponse {
    if shared.config.authorizer.is_none() {
        return crate::acls::AclStore::disabled(&r);
    }
    let (rx, created, deleted, authorization) = {
        let mut st = shared.lock();
        let (entry, created, deleted) = st.cluster.acls.decide(&r);
        // Told as the `acls changed` decision when queued (`crate::events`).
        if let Some(e) = &entry {
            st.cluster.apply(e);
        }
        let rx = shared.persist(entry.as_slice());
        let authorization = shared.authorization(&st, 0).unwrap_or_default();
        (rx, created, deleted, authorization)
    };
    match durable(rx).await {
        Ok(()) => protocol::AclsResponse { status: Status::ok(), created, deleted, authorization },
        Err(status) => protocol::AclsResponse {
            created: created.iter().map(|_| status.clone()).collect(),
            deleted: deleted.iter().map(|_| Vec::new()).collect(),
            status,
            authorization: protocol::acl::Authorization::default(),
        },
    }
}

/// Create, replace and delete SCRAM credentials
/// ([`crate::credentials::CredentialStore::decide`]), answered once the change is durable, with
/// every credential after it.
async fn scram_credentials(
    shared: &Arc<Shared>,
    r: protocol::ScramCredentialsRequest,
) -> protocol::ScramCredentialsResponse {
    let (rx, results, credentials) = {
        let mut st = shared.lock();
        let (entry, results) = st.cluster.credentials.decide(&r);
        if let Some(Entry::ScramCredentials { upserts, deletions }) = &entry {
            let upserted: Vec<String> =
                upserts.iter().map(|u| format!("{} {}", u.user, u.credential.mechanism)).collect();
            let deleted: Vec<String> = deletions.iter().map(|(u, m)| format!("{u} {m}")).collect();
            tracing::info!(?upserted, ?deleted, "SCRAM credentials changed");
        }
        if let Some(e) = &entry {
            st.cluster.apply(e);
        }
        let rx = shared.persist(entry.as_slice());
        (rx, results, st.cluster.credentials.credentials(shared.authorization_base))
    };
    match durable(rx).await {
        Ok(()) => protocol::ScramCredentialsResponse { status: Status::ok(), results, credentials },
        Err(status) => protocol::ScramCredentialsResponse {
            results: results.into_iter().map(|(u, _)| (u, status.clone())).collect(),
            status,
            credentials: protocol::Credentials::default(),
        },
    }
}

/// Snapshot the state into a new journal generation once enough entries were written since
/// the last one, so a restart replays a bounded journal. Runs for the life of the process.
async fn snapshot_loop(shared: Arc<Shared>) {
    use std::sync::atomic::Ordering::Relaxed;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if shared.since_snapshot.load(Relaxed) < shared.config.snapshot_every_entries {
            continue;
        }
        let rx = {
            // Under the lock: the snapshot is exactly the state after every entry queued so far.
            let st = shared.lock();
            let mut snapshot = st.table.snapshot();
            snapshot.extend(st.cluster.snapshot());
            snapshot.extend(st.groups.snapshot());
            shared.since_snapshot.store(0, Relaxed);
            shared.journal.rotate(snapshot.iter().map(Entry::encode).collect())
        };
        if let Err(e) = durable(rx).await {
            tracing::error!(error = %e, "journal snapshot failed");
        }
    }
}

/// Move leaderships off brokers whose lease expired. Runs for the life of the process.
async fn tick_loop(shared: Arc<Shared>) {
    let period = Duration::from_millis((shared.config.cluster.broker_lease_ms / 4).clamp(10, 1_000));
    // After a (re)start no broker holds a lease yet: give them one lease to heartbeat before
    // anything is judged expired, so a coordinator restart does not move every leadership.
    tokio::time::sleep(Duration::from_millis(shared.config.cluster.broker_lease_ms)).await;
    loop {
        tokio::time::sleep(period).await;
        let mut st = shared.lock();
        let now = shared.now_ms();
        for (tid, decision) in st.table.handle_timeouts(now) {
            tracing::warn!(transactional_id = %tid, "transaction timed out; aborting it and fencing its producer");
            abort_and_fence(&shared, &mut st, tid, decision);
        }
        let entries = st.cluster.handle_tick(now);
        for e in &entries {
            match e {
                Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr, elr } => {
                    tracing::info!(%topic, partition, leader_id, leader_epoch, ?isr, ?elr, "leader lease expired; leadership moved");
                }
                Entry::ReplicasChanged { topic, partition, replicas, leader_id, leader_epoch, .. } => {
                    tracing::info!(%topic, partition, ?replicas, leader_id, leader_epoch, "partition move completed");
                }
                _ => {}
            }
        }
        if !entries.is_empty() {
            // Announced only through heartbeat answers, which wait for this to be durable.
            drop(shared.persist(&entries));
        }
    }
}

/// Forget idle transactional ids and empty groups (their expiration flags). Runs for the life
/// of the process. The entries are journaled like any decision; one lost in a crash only
/// brings back what it forgot, until the next sweep. An idle id whose epoch could still write
/// outside a transaction is fenced first, as a timeout fences ([`ProducerTable::handle_expiry`]).
async fn expiry_loop(shared: Arc<Shared>) {
    let period = Duration::from_millis(shared.config.expiry_check_interval_ms.max(1));
    loop {
        tokio::time::sleep(period).await;
        let rx = {
            let mut st = shared.lock();
            let now = shared.now_ms();
            let expiry = st.table.handle_expiry(now);
            for (tid, decision) in expiry.fences {
                tracing::info!(transactional_id = %tid, "idle transactional id: fencing its epoch before it is forgotten");
                abort_and_fence(&shared, &mut st, tid, decision);
            }
            let mut entries = expiry.forgotten;
            entries.extend(st.groups.handle_expiry(now));
            for e in &entries {
                match e {
                    Entry::TxnIdsExpired { transactional_ids } => {
                        tracing::info!(count = transactional_ids.len(), first = %transactional_ids[0], "idle transactional ids expired");
                    }
                    Entry::GroupsExpired { groups } => {
                        tracing::info!(count = groups.len(), first = %groups[0], "empty groups expired with their offsets");
                    }
                    _ => {}
                }
            }
            if entries.is_empty() {
                continue;
            }
            shared.persist(&entries)
        };
        if let Err(e) = durable(rx).await {
            tracing::warn!(error = %e, "an expiry could not be journaled; it is looked for again at the next sweep");
        }
    }
}

/// Persist an abort the coordinator decided itself (a timeout, an idle id's fence) and write
/// its markers once it is durable.
fn abort_and_fence(shared: &Arc<Shared>, st: &mut State, tid: String, decision: EndDecision) {
    if let EndDecision::Markers { epoch, entries, markers, .. } = decision {
        st.observe(&entries);
        // Markers are written only once the abort (and its epoch) is durable.
        let rx = shared.persist(&entries);
        let done = shared.clone();
        shared.spawn(async move {
            let shared = done;
            if durable(rx).await.is_ok() {
                start_markers(shared, tid, epoch, false, markers);
            }
        });
    }
}

async fn init(
    shared: &Arc<Shared>,
    tid: Option<&str>,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
    principal: &str,
) -> InitProducerIdResponse {
    let refused = |status, epoch| InitProducerIdResponse { status, producer_id: -1, producer_epoch: epoch };
    let (decision, rx) = {
        let mut st = shared.lock();
        let d = st.table.handle_init_as(tid, timeout_ms, current, principal);
        let rx = match &d {
            InitDecision::Grant { entries, .. } => {
                st.observe(entries);
                Some(shared.persist(entries))
            }
            InitDecision::Refuse { .. } => None,
        };
        (d, rx)
    };
    let (producer_id, epoch, fence) = match decision {
        InitDecision::Refuse { status, epoch } => {
            let (pid, own) = current.unwrap_or((-1, -1));
            fencing_event("init_producer_id", tid, pid, own, epoch, None, &status);
            return refused(status, epoch);
        }
        InitDecision::Grant { producer_id, epoch, fence, .. } => (producer_id, epoch, fence),
    };
    if let Err(status) = durable(rx.expect("grant persists")).await {
        return refused(status, -1);
    }
    let fenced = fence.len();
    if !fence.is_empty() {
        let tid = tid.expect("only transactional ids are fenced").to_string();
        let done = start_markers(shared.clone(), tid.clone(), epoch, false, fence);
        let wait = Duration::from_millis(shared.config.fence_wait_ms);
        if !matches!(tokio::time::timeout(wait, done).await, Ok(Ok(()))) {
            return refused(
                Status::new(
                    ErrorCode::ConcurrentTransactions,
                    format!(
                        "transactional id '{tid}': fence markers for the previous epoch are not all written after {} ms \
                         (a partition leader is unreachable); they are being retried, init again shortly",
                        shared.config.fence_wait_ms
                    ),
                ),
                -1, // the new epoch is not handed out until its markers are written
            );
        }
    }
    tracing::info!(
        target: "epochfence::fencing",
        transactional_id = tid.unwrap_or("-"),
        producer_id,
        epoch,
        fenced_partitions = fenced,
        "granted"
    );
    InitProducerIdResponse { status: Status::ok(), producer_id, producer_epoch: epoch }
}

/// EndTxn: bump the epoch, write commit or abort markers to every partition of the
/// transaction, and answer the new epoch once they are all written.
async fn end_txn(shared: &Arc<Shared>, r: EndTxnRequest) -> EndTxnResponse {
    let (decision, rx) = {
        let mut st = shared.lock();
        let d = st.table.handle_end_txn(&r.transactional_id, r.producer_id, r.producer_epoch, r.commit, r.bump_epoch);
        let rx = match &d {
            EndDecision::Markers { entries, .. } => {
                st.observe(entries);
                Some(shared.persist(entries))
            }
            EndDecision::Done { .. } => Some(shared.persist(&[])),
            EndDecision::Refuse { .. } => None,
        };
        (d, rx)
    };
    let refused = |status, epoch| EndTxnResponse { status, producer_id: -1, producer_epoch: epoch };
    let (producer_id, epoch, markers) = match decision {
        EndDecision::Refuse { status, epoch } => {
            let tid = Some(r.transactional_id.as_str());
            fencing_event("end_txn", tid, r.producer_id, r.producer_epoch, epoch, None, &status);
            return refused(status, epoch);
        }
        EndDecision::Done { producer_id, epoch } => (producer_id, epoch, None),
        EndDecision::Markers { producer_id, epoch, commit, markers, .. } => {
            (producer_id, epoch, Some((commit, markers)))
        }
    };
    if let Err(status) = durable(rx.expect("accepted decisions persist")).await {
        return refused(status, -1);
    }
    if let Some((commit, markers)) = markers {
        let done = start_markers(shared.clone(), r.transactional_id.clone(), epoch, commit, markers);
        let wait = Duration::from_millis(shared.config.fence_wait_ms);
        if !matches!(tokio::time::timeout(wait, done).await, Ok(Ok(()))) {
            return refused(
                Status::new(
                    ErrorCode::ConcurrentTransactions,
                    format!(
                        "transaction of '{}' is prepared to {} but not all markers are written after {} ms (a partition \
                         leader is unreachable); they are being retried, retry EndTxn",
                        r.transactional_id,
                        if commit { "commit" } else { "abort" },
                        shared.config.fence_wait_ms
                    ),
                ),
                -1, // the new epoch is not handed out until its markers are written
            );
        }
        tracing::info!(transactional_id = %r.transactional_id, commit, epoch, "transaction ended");
    }
    EndTxnResponse { status: Status::ok(), producer_id, producer_epoch: epoch }
}

/// Write every marker of a bump (abort for a grant or a timeout, commit or abort for an
/// EndTxn), retrying each until its partition confirms, then record them as done. The
/// returned receiver fires when all are written.
fn start_markers(
    shared: Arc<Shared>,
    tid: String,
    epoch: i16,
    commit: bool,
    targets: Vec<FenceTarget>,
) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let spawner = shared.clone();
    spawner.spawn(async move {
        futures::future::join_all(targets.iter().map(|t| write_marker_until_done(&shared, t, commit))).await;
        {
            let mut st = shared.lock();
            if let Some(entry) = st.table.handle_fence_done(&tid, epoch) {
                // Recording completion only saves a re-fence after a restart; not awaited.
                drop(shared.persist(&[entry]));
            }
        }
        tracing::info!(transactional_id = %tid, epoch, partitions = targets.len(), "fence complete");
        let _ = tx.send(());
    });
    rx
}

/// Marker calls in flight to one broker at once, each on a connection of its own: a broker
/// answers a connection's requests in order, so a marker waiting for its partition's ISR (a
/// frozen follower) would hold back every marker behind it on a shared connection. More wait
/// for a free one.
pub const MARKER_CONNECTIONS_MAX: usize = 16;

/// One broker's marker connections: the idle ones, and the slots of those in use.
struct MarkerPeers {
    idle: Vec<Connection>,
    slots: Arc<tokio::sync::Semaphore>,
}

/// A marker connection to `addr`, with its slot: an idle one, or a new one.
async fn peer(shared: &Shared, addr: &str) -> Result<(Connection, tokio::sync::OwnedSemaphorePermit), net::NetError> {
    let slots = {
        let mut peers = shared.peers.lock().unwrap_or_else(|p| p.into_inner());
        let p = peers.entry(addr.to_string()).or_insert_with(|| MarkerPeers {
            idle: Vec::new(),
            slots: Arc::new(tokio::sync::Semaphore::new(MARKER_CONNECTIONS_MAX)),
        });
        p.slots.clone()
    };
    let slot = slots.acquire_owned().await.expect("the semaphore is never closed");
    let idle = {
        let mut peers = shared.peers.lock().unwrap_or_else(|p| p.into_inner());
        let idle = peers.get_mut(addr).map(|p| &mut p.idle);
        idle.and_then(|idle| {
            idle.retain(|c| !c.is_closed());
            idle.pop()
        })
    };
    if let Some(c) = idle {
        return Ok((c, slot));
    }
    let dialer = Dialer {
        tls: shared.config.peer_tls.clone(),
        secret: shared.config.limits.cluster_secret.clone(),
        member: "coordinator".into(),
        login: None,
    };
    Ok((dialer.dial(addr).await?, slot))
}

/// A marker call on `conn` was answered: it can carry the next one.
fn return_peer(shared: &Shared, addr: &str, conn: Connection) {
    let mut peers = shared.peers.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = peers.get_mut(addr) {
        if p.idle.len() < MARKER_CONNECTIONS_MAX {
            p.idle.push(conn);
        }
    }
}

async fn write_marker_until_done(shared: &Shared, t: &FenceTarget, commit: bool) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let route = {
            let st = shared.lock();
            st.cluster.marker_route(t, shared.now_ms())
        };
        let leader = match route {
            MarkerRoute::NotNeeded => {
                // The offsets pseudo-partition (the transaction's end, journaled before the
                // markers start, already applied or dropped its offsets), or a deleted topic's
                // partition no broker can still serve.
                if t.topic_id != OFFSETS_PARTITION_ID && t.topic != OFFSETS_TOPIC {
                    tracing::info!(topic = %t.topic, partition = t.partition, "marker not needed: the topic was deleted");
                }
                return;
            }
            MarkerRoute::WaitForDrop => None,
            MarkerRoute::Leader { leader_id, leader_epoch, addr } => Some((leader_id, leader_epoch, addr)),
        };
        let outcome = match leader {
            None => Err(format!("{}-{} was deleted; waiting for its brokers to drop it", t.topic, t.partition)),
            Some((id, _, None)) => Err(format!("no address for leader {id} (-1: no leader available now)")),
            Some((_, leader_epoch, Some(addr))) => match peer(shared, &addr).await {
                Err(e) => Err(e.to_string()),
                Ok((conn, _slot)) => {
                    let req = Request::WriteMarker(WriteMarkerRequest {
                        topic: t.topic.clone(),
                        partition: t.partition,
                        producer_id: t.producer_id,
                        producer_epoch: t.marker_epoch,
                        marker_sequence: t.marker_sequence,
                        commit,
                        leader_epoch,
                        coordinator_epoch: shared.coordinator_epoch,
                    });
                    let answer = conn.call_timeout(req, Duration::from_millis(shared.config.marker_timeout_ms)).await;
                    // Not answered in time (or the connection broke): the connection is dropped,
                    // so that the retry does not queue behind whatever holds this one up.
                    if answer.is_ok() {
                        return_peer(shared, &addr, conn);
                    }
                    match answer {
                        Ok(Response::WriteMarker(r)) if r.status.is_ok() => Ok(()),
                        // Already fenced at this epoch or a later one: the goal holds.
                        Ok(Response::WriteMarker(r))
                            if r.status.code == ErrorCode::InvalidProducerEpoch
                                && r.current_producer_epoch >= t.marker_epoch =>
                        {
                            Ok(())
                        }
                        Ok(other) => Err(other.status().to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
        };
        match outcome {
            Ok(()) => return,
            Err(why) => {
                tracing::debug!(topic = %t.topic, partition = t.partition, epoch = t.marker_epoch, %why, "marker not written yet; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::InitProducerIdRequest;

    /// A coordinator's shared state over `journal`, `table` and `cluster`, with no groups, as
    /// the active replica at epoch 0 (no loops started).
    fn serving(journal: Journal, table: ProducerTable, cluster: Cluster, config: CoordinatorConfig) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State { table, cluster, groups: GroupTable::new(GroupConfig::default(), 0) }),
            group_waiters: Mutex::new(HashMap::new()),
            since_snapshot: std::sync::atomic::AtomicU64::new(0),
            started: Instant::now(),
            peers: Mutex::new(HashMap::new()),
            metrics: CoordinatorMetrics::new(journal.append_latency()),
            journal,
            config,
            coordinator_epoch: 0,
            lease: None,
            cancel: tokio_util::sync::CancellationToken::new(),
            authorization_base: 1 << 32,
        })
    }

    #[tokio::test]
    async fn registrations_are_decided_in_the_handler_call_and_only_wait_for_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let config = CoordinatorConfig::new(dir.path());
        let Recovered { journal, mut table, mut cluster, .. } = recover(&config).unwrap();
        cluster.handle_heartbeat(0, 1, "127.0.0.1:1", &[]);
        let topic = cluster.handle_create_topic(0, "t", 2, 1, -1).unwrap();
        cluster.apply(&topic);
        let InitDecision::Grant { producer_id, epoch, entries, .. } = table.handle_init(Some("tid"), 60_000, None)
        else {
            panic!("a new transactional id is granted")
        };
        entries.iter().for_each(|e| table.apply(e));
        let shared = serving(journal, table, cluster, config);
        let handle = handler(shared.clone());
        let add = |partition| {
            Request::AddPartition(AddPartitionRequest {
                transactional_id: String::new(),
                producer_id,
                producer_epoch: epoch,
                topic: "t".into(),
                partition,
                transactional: true,
                verify_only: false,
                topic_id: 0,
                transaction_version: 2,
            })
        };
        let (net::Handled::Applied(first), net::Handled::Applied(second)) = (handle(add(0)), handle(add(1))) else {
            panic!("an accepted registration only waits for the journal, beside later requests")
        };
        // Both decided in the handler calls, before either answer was awaited.
        let registered = shared.lock().table.describe(0)[0].partitions.clone();
        assert_eq!(registered, ["t-0", "t-1"]);
        for answer in [second.await, first.await] {
            let Response::AddPartition(r) = answer else { panic!("wrong answer") };
            assert!(r.status.is_ok(), "{}", r.status);
        }
        let init = Request::InitProducerId(InitProducerIdRequest {
            transactional_id: Some("tid".into()),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            principal: String::new(),
        });
        assert!(matches!(handle(init), net::Handled::Serial(_)), "inits stay one at a time");
    }

    /// Issue 29: an ACL change is answered once journaled, with every binding after it; a
    /// restart replays it; heartbeat answers carry the set only to a broker holding another
    /// version; without `--authorizer` the request is SECURITY_DISABLED.
    #[tokio::test]
    async fn acl_changes_are_journaled_and_handed_to_brokers_by_version() {
        use protocol::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
        let dir = tempfile::tempdir().unwrap();
        let mut config = CoordinatorConfig::new(dir.path());
        let alice = AclBinding {
            resource_type: ResourceType::TransactionalId,
            name: "payments".into(),
            pattern: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Write,
            permission: Permission::Allow,
        };
        let create = protocol::AclsRequest { create: vec![alice.clone()], delete: Vec::new() };
        {
            let Recovered { journal, table, cluster, .. } = recover(&config).unwrap();
            let off = serving(journal, table, cluster, config.clone());
            let Response::Acls(r) = handle(off.clone(), Request::Acls(create.clone())).await else { panic!() };
            assert_eq!(r.status.code, ErrorCode::SecurityDisabled);
            let held = off.authorization(&off.lock(), 0).unwrap();
            assert!(!held.enabled && held.acls.is_empty());
        }
        config.authorizer = Some(crate::acls::AuthorizerConfig {
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        });
        {
            let Recovered { journal, table, cluster, .. } = recover(&config).unwrap();
            let on = serving(journal, table, cluster, config.clone());
            let Response::Acls(r) = handle(on.clone(), Request::Acls(create.clone())).await else { panic!() };
            assert!(r.status.is_ok() && r.created[0].is_ok(), "{:?}", r);
            assert_eq!(r.authorization.acls, vec![alice.clone()]);
            assert!(r.authorization.enabled && r.authorization.super_users == ["User:admin"]);
            let version = r.authorization.version;
            assert!(on.authorization(&on.lock(), version).is_none(), "a broker holding it is sent nothing");
            assert!(on.authorization(&on.lock(), version - 1).is_some());
        }
        // A restart replays the change from the journal.
        let Recovered { cluster, .. } = recover(&config).unwrap();
        assert_eq!(cluster.acls.authorization(None, 0).acls, vec![alice]);
    }

    /// Issue 29 (KIP-554): a credential change is answered once journaled, with every credential
    /// after it, and a restart replays it; the users file at start adds only what differs.
    #[tokio::test]
    async fn credential_changes_are_journaled_and_survive_a_restart() {
        use protocol::sasl::{ScramCredential, ScramMechanism};
        let dir = tempfile::tempdir().unwrap();
        let config = CoordinatorConfig::new(dir.path());
        let carol = protocol::UserCredential {
            user: "carol".into(),
            credential: ScramCredential::from_password(ScramMechanism::Sha512, b"pw", b"salt".to_vec(), 4096),
        };
        {
            let Recovered { journal, table, cluster, .. } = recover(&config).unwrap();
            let shared = serving(journal, table, cluster, config.clone());
            let req = protocol::ScramCredentialsRequest { upserts: vec![carol.clone()], deletions: Vec::new() };
            let Response::ScramCredentials(r) = handle(shared.clone(), Request::ScramCredentials(req)).await else {
                panic!()
            };
            assert!(r.status.is_ok() && r.results == vec![("carol".to_string(), Status::ok())], "{r:?}");
            assert_eq!(r.credentials.users, vec![carol.clone()]);
        }
        let Recovered { cluster, .. } = recover(&config).unwrap();
        assert_eq!(cluster.credentials.credentials(0).users, vec![carol]);
    }

    /// Issue 28: a registration records the topic's id; one asked by a replica of a deleted
    /// topic whose name lives again (another id) is refused, and so is a reserved name.
    #[tokio::test]
    async fn registrations_go_by_topic_id_and_never_to_a_reserved_name() {
        let dir = tempfile::tempdir().unwrap();
        let config = CoordinatorConfig::new(dir.path());
        let Recovered { journal, mut table, mut cluster, .. } = recover(&config).unwrap();
        cluster.handle_heartbeat(0, 1, "127.0.0.1:1", &[]);
        let Entry::TopicCreated { topic_id: old, .. } = cluster.handle_create_topic(0, "t", 1, 1, -1).unwrap() else {
            panic!()
        };
        cluster.handle_delete_topic("t", 0).unwrap();
        // Broker 1 heartbeats without the old replica (it dropped it): the name lives again.
        cluster.handle_heartbeat(1, 1, "127.0.0.1:1", &[]);
        let Entry::TopicCreated { topic_id: new, .. } = cluster.handle_create_topic(1, "t", 1, 1, -1).unwrap() else {
            panic!()
        };
        let InitDecision::Grant { producer_id, epoch, entries, .. } = table.handle_init(Some("tid"), 60_000, None)
        else {
            panic!("a new transactional id is granted")
        };
        entries.iter().for_each(|e| table.apply(e));
        let shared = serving(journal, table, cluster, config);
        let handle = handler(shared.clone());
        let add = |topic: &str, topic_id| {
            Request::AddPartition(AddPartitionRequest {
                transactional_id: String::new(),
                producer_id,
                producer_epoch: epoch,
                topic: topic.into(),
                partition: 0,
                transactional: true,
                verify_only: false,
                topic_id,
                transaction_version: 2,
            })
        };
        let answer = |h: net::Handled| async move {
            match h {
                net::Handled::Applied(f) | net::Handled::Serial(f) => match f.await {
                    Response::AddPartition(r) => r.status,
                    other => panic!("wrong answer {other:?}"),
                },
            }
        };
        let refused = answer(handle(add("t", old))).await;
        assert_eq!(refused.code, ErrorCode::UnknownTopicOrPartition, "{refused}");
        assert!(refused.message.contains("deleted topic"), "{refused}");
        let reserved = answer(handle(add("__consumer_offsets", 0))).await;
        assert_eq!(reserved.code, ErrorCode::InvalidTopicException, "{reserved}");
        assert!(shared.lock().table.pending_fences().is_empty());
        assert!(answer(handle(add("t", new))).await.is_ok());
        let InitDecision::Grant { fence, .. } = shared.lock().table.handle_init(Some("tid"), 60_000, None) else {
            panic!("granted")
        };
        assert_eq!(fence.len(), 1);
        assert_eq!((fence[0].topic.as_str(), fence[0].topic_id), ("t", new), "the marker is owed to the live topic");
    }
}
