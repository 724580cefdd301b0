//! Coordinator replicas on etcd (`coordinator --etcd-endpoints`, cargo feature `etcd`).
//!
//! Several replicas share one etcd; each campaigns in one election under a lease it keeps
//! alive. The winner takes over ([`KvJournal::take_over`]: a guarded bump of the coordinator
//! epoch, then the state read back from etcd), resumes unfinished markers, and serves; the
//! others answer every request with NOT_COORDINATOR naming it. Every journal write of the
//! active replica is a transaction compared on its leader key's create revision, so a replica
//! that lost the election (paused past its lease, cut off from etcd) cannot change anything;
//! and it stops answering from memory once its lease has lapsed by its own clock
//! ([`LeaseClock`]). A failed or uncertain write stops the journal for good: the replica
//! steps down and campaigns again as a standby, rebuilding from etcd if it wins.
//!
//! The tokio shell only: what is written where is [`crate::kv_journal`]'s, the decisions
//! [`crate::server`]'s.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use etcd_client::{Client, Compare as EtcdCompare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Txn, TxnOp};
use protocol::{ErrorCode, Response, Status};
use tokio::net::TcpListener;

use crate::journal::Journal;
use crate::kv_journal::{election_name, Compare, GuardedKv, KeyValue, KvError, KvJournal, KvOp, Leadership};
use crate::server::{handler, rebuild, start, with_request_deadlines, LeaseClock, Shared};
use crate::{CoordinatorConfig, CoordinatorError};

/// How a replica reaches etcd.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// Every key of this cluster of replicas starts with this.
    pub prefix: String,
    /// The lease a replica leads under, in milliseconds (etcd counts whole seconds: rounded
    /// up). A replica whose keep-alives stop is replaced about this long after.
    pub lease_ms: u64,
    /// Deadline of one etcd request, in milliseconds: a write not answered by then is
    /// uncertain, and stops the journal.
    pub request_timeout_ms: u64,
    /// The address published in the election, which standbys name and clients follow (default:
    /// the bound listen address; give it when listening on 0.0.0.0 or behind another name).
    pub advertise: Option<String>,
    /// Print `coordinator standby on ADDR` and `coordinator active on ADDR (coordinator epoch
    /// E)` on stdout as the role changes (the binary's contract; off in process).
    pub announce: bool,
}

impl EtcdConfig {
    /// Defaults for `endpoints`.
    pub fn new(endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: "/epochfence".into(),
            lease_ms: 2_000,
            request_timeout_ms: 5_000,
            advertise: None,
            announce: true,
        }
    }
}

/// A [`GuardedKv`] on etcd, called from the journal's writer thread (or a blocking task).
struct EtcdKv {
    kv: etcd_client::KvClient,
    rt: tokio::runtime::Handle,
    timeout: Duration,
}

impl EtcdKv {
    fn wait<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, KvError> {
        let timeout = self.timeout;
        match self.rt.block_on(async move { tokio::time::timeout(timeout, fut).await }) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(KvError(format!("etcd {what} failed: {e}"))),
            Err(_) => Err(KvError(format!(
                "etcd {what}: no answer within {} ms; its outcome is unknown",
                timeout.as_millis()
            ))),
        }
    }
}

impl GuardedKv for EtcdKv {
    fn txn(&mut self, compares: &[Compare], ops: &[KvOp]) -> Result<bool, KvError> {
        let when: Vec<EtcdCompare> = compares
            .iter()
            .map(|c| match c {
                Compare::CreateRevision(k, rev) => EtcdCompare::create_revision(k.clone(), CompareOp::Equal, *rev),
                Compare::ModRevision(k, rev) => EtcdCompare::mod_revision(k.clone(), CompareOp::Equal, *rev),
            })
            .collect();
        let then: Vec<TxnOp> = ops
            .iter()
            .map(|op| match op {
                KvOp::Put(k, v) => TxnOp::put(k.clone(), v.clone(), None),
                KvOp::DeleteRange(from, to) => {
                    TxnOp::delete(from.clone(), Some(DeleteOptions::new().with_range(to.clone())))
                }
            })
            .collect();
        let mut kv = self.kv.clone();
        let txn = Txn::new().when(when).and_then(then);
        self.wait("txn", async move { kv.txn(txn).await }).map(|r| r.succeeded())
    }

    fn range(&mut self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        let mut kv = self.kv.clone();
        let (from, options) = (from.to_vec(), GetOptions::new().with_range(to.to_vec()).with_limit(limit as i64));
        let resp = self.wait("range read", async move { kv.get(from, Some(options)).await })?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| KeyValue { key: kv.key().to_vec(), value: kv.value().to_vec(), mod_revision: kv.mod_revision() })
            .collect())
    }
}

/// What the listener serves: the active state while this replica leads, else refusals.
struct Role {
    addr: String,
    active: RwLock<Option<(Arc<Shared>, net::Handler)>>,
    /// The active replica's address, as the election last showed it.
    leader: Mutex<Option<String>>,
    /// Why this replica cannot reach etcd, if it cannot.
    etcd_trouble: Mutex<Option<String>>,
    /// The lease this replica campaigns or leads under.
    lease: Mutex<Option<i64>>,
}

impl Role {
    fn active(&self) -> Option<(Arc<Shared>, net::Handler)> {
        self.active.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_active(&self, active: Option<(Arc<Shared>, net::Handler)>) {
        *self.active.write().unwrap_or_else(|p| p.into_inner()) = active;
    }

    fn not_coordinator(&self) -> Response {
        let leader = self.leader.lock().unwrap_or_else(|p| p.into_inner()).clone().filter(|l| *l != self.addr);
        let trouble = self.etcd_trouble.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let message = match (leader, trouble) {
            (Some(l), _) => format!("coordinator replica {} is a standby; {}{l}", self.addr, net::coordinators::ACTIVE_HINT),
            (None, Some(t)) => format!(
                "coordinator replica {} is a standby and no replica is active: etcd cannot be reached ({t}); nothing can be granted until it can",
                self.addr
            ),
            (None, None) => format!(
                "coordinator replica {} is a standby and no active replica is known (a takeover in progress, once \
                 etcd answers); retry",
                self.addr
            ),
        };
        Response::Error(Status::new(ErrorCode::NotCoordinator, message))
    }

    fn trouble(&self, why: Option<String>) {
        *self.etcd_trouble.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }
}

/// Requests go to the active state while its lease holds, and are checked again before the
/// answer leaves: one that outlived the lease (a pause mid-request) is answered NOT_COORDINATOR.
fn replica_handler(role: Arc<Role>) -> net::Handler {
    Arc::new(move |req| {
        let Some((shared, handle)) = role.active().filter(|(s, _)| s.serving()) else {
            return net::Handled::answer(role.not_coordinator());
        };
        let check = |fut: net::server::ResponseFuture<Response>| -> net::server::ResponseFuture<Response> {
            let (role, shared) = (role.clone(), shared.clone());
            Box::pin(async move {
                let answer = fut.await;
                if shared.serving() {
                    answer
                } else {
                    role.not_coordinator()
                }
            })
        };
        match handle(req) {
            net::Handled::Applied(fut) => net::Handled::Applied(check(fut)),
            net::Handled::Serial(fut) => net::Handled::Serial(check(fut)),
        }
    })
}

/// Keep `lease` alive, extending `clock` with every answer, for as long as the clock holds:
/// a broken keep-alive stream (an etcd member gone, a reconnect) is opened again. Ends when the
/// lease is gone in etcd, or the clock ran out (then the replica steps down).
async fn keep_alive(client: Client, lease: i64, ttl: Duration, clock: Arc<LeaseClock>) {
    while clock.holds() {
        let mut client = client.clone();
        let opened = tokio::time::timeout(ttl, client.lease_keep_alive(lease)).await;
        let Ok(Ok((mut keeper, mut stream))) = opened else {
            tracing::warn!(lease, "cannot open the etcd lease keep-alive; retrying while the lease holds");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        loop {
            let sent = LeaseClock::now_us();
            if keeper.keep_alive().await.is_err() {
                tracing::warn!(lease, "etcd lease keep-alive failed; opening it again");
                break;
            }
            match tokio::time::timeout(ttl, stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => clock.extend(sent + r.ttl() as u64 * 1_000_000),
                Ok(Ok(Some(_))) => {
                    tracing::warn!(lease, "the etcd lease is gone (it expired)");
                    return;
                }
                other => {
                    tracing::warn!(lease, answer = ?other.map(|r| r.map(|r| r.map(|r| r.ttl()))), "no keep-alive answer; opening it again");
                    break;
                }
            }
            tokio::time::sleep(ttl / 4).await;
        }
    }
}

/// Poll the election's leader into `role` (what standbys name in NOT_COORDINATOR).
async fn watch_leader(mut client: Client, name: Vec<u8>, role: Arc<Role>) {
    loop {
        refresh_leader(&mut client, &name, &role).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Read the election's leader into `role` once.
async fn refresh_leader(client: &mut Client, name: &[u8], role: &Role) {
    let leader = match tokio::time::timeout(Duration::from_secs(2), client.leader(name.to_vec())).await {
        Ok(Ok(r)) => r.kv().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
        _ => None, // no leader, or etcd unreachable or slow
    };
    *role.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
}

/// Run as one replica of a coordinator on etcd: serve `listener` (refusing as a standby,
/// serving as the active replica), campaigning until `shutdown`.
pub async fn run_replica(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    config: CoordinatorConfig,
    etcd: EtcdConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), CoordinatorError> {
    let config = with_request_deadlines(config);
    std::fs::create_dir_all(&config.data_dir).map_err(|e| CoordinatorError::DataDir {
        path: config.data_dir.display().to_string(),
        detail: e.to_string(),
    })?;
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let addr = etcd.advertise.clone().unwrap_or(bound);
    let timeout = Duration::from_millis(etcd.request_timeout_ms.max(1));
    // No deadline on every request: a campaign waits as long as another replica leads. Each
    // other call has its own (the journal's `--etcd-timeout-ms`, the lease's TTL).
    let options = ConnectOptions::new().with_connect_timeout(timeout);
    let client = Client::connect(&etcd.endpoints, Some(options))
        .await
        .map_err(|e| CoordinatorError::Etcd(format!("cannot connect to etcd at {}: {e}", etcd.endpoints.join(","))))?;
    let role = Arc::new(Role {
        addr: addr.clone(),
        active: RwLock::new(None),
        leader: Mutex::new(None),
        etcd_trouble: Mutex::new(None),
        lease: Mutex::new(None),
    });
    let name = election_name(&etcd.prefix);
    let watcher = tokio::spawn(watch_leader(client.clone(), name.clone(), role.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    if let Some(l) = metrics_listener {
        let scrape = role.clone();
        let encode = move || scrape.active().map(|(s, _)| s.encode_metrics()).unwrap_or_default();
        let mut stopped = stop_rx.clone();
        tokio::spawn(net::metrics::serve_metrics(l, Arc::new(encode), async move {
            let _ = stopped.changed().await;
        }));
    }
    let server = {
        let serving = role.clone();
        let logins = crate::server::OwnLogins::new(&config, move || match serving.active() {
            Some((shared, _)) if shared.serving() => Ok(shared),
            _ => Err(serving.not_coordinator().status().clone()),
        });
        let limits = net::ServerLimits { client_logins: Some(Arc::new(logins)), ..config.limits.clone() };
        // From the start, not from the first takeover: a standby promoted between its gate and
        // its handler must not have let an unchecked request through.
        limits.members_only.store(config.authorizer.is_some(), std::sync::atomic::Ordering::Relaxed);
        let handler = replica_handler(role.clone());
        let mut stopped = stop_rx.clone();
        tokio::spawn(net::serve(listener, handler, limits, async move {
            let _ = stopped.changed().await;
        }))
    };
    let replicas = campaign_forever(client.clone(), &config, &etcd, role.clone(), &addr, name);
    tokio::select! {
        _ = shutdown => {}
        _ = replicas => {}
    }
    // Step down at once: revoking the lease deletes the leader key, so another replica takes
    // over without waiting for it to lapse.
    if let Some((shared, _)) = role.active() {
        shared.step_down();
        role.set_active(None);
    }
    let lease = *role.lease.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(lease) = lease {
        revoke(&mut client.clone(), lease).await;
    }
    watcher.abort();
    let _ = stop_tx.send(());
    let _ = server.await;
    Ok(())
}

/// Campaign, take over, serve until the lease or the journal fails, step down; again.
async fn campaign_forever(
    mut client: Client,
    config: &CoordinatorConfig,
    etcd: &EtcdConfig,
    role: Arc<Role>,
    addr: &str,
    name: Vec<u8>,
) {
    let ttl_s = etcd.lease_ms.div_ceil(1000).max(1) as i64;
    let request_timeout = Duration::from_millis(etcd.request_timeout_ms.max(1));
    let mut backoff = Duration::from_millis(100);
    // Printed once each time the replica becomes a standby, not at every campaign.
    let mut announce_standby = etcd.announce;
    loop {
        if std::mem::take(&mut announce_standby) {
            println!("coordinator standby on {addr}");
        }
        let sent = LeaseClock::now_us();
        let granted = match tokio::time::timeout(request_timeout, client.lease_grant(ttl_s, None)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer to a lease grant within {} ms", request_timeout.as_millis())),
        };
        let lease = match granted {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot get an etcd lease; retrying");
                role.trouble(Some(e.to_string()));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        role.trouble(None);
        *role.lease.lock().unwrap_or_else(|p| p.into_inner()) = Some(lease.id());
        let ttl = Duration::from_secs(lease.ttl().max(1) as u64);
        let clock = Arc::new(LeaseClock::new(sent + ttl.as_micros() as u64));
        let keeper = tokio::spawn(keep_alive(client.clone(), lease.id(), ttl, clock.clone()));
        let won = tokio::select! {
            won = client.campaign(name.clone(), addr.as_bytes().to_vec(), lease.id()) => won,
            _ = lapse(&clock) => {
                tracing::warn!("the etcd lease lapsed while campaigning; campaigning again");
                keeper.abort();
                continue;
            }
        };
        let leadership = match won.map(|r| r.leader().cloned()) {
            Ok(Some(l)) => Leadership { key: l.key().to_vec(), revision: l.rev() },
            other => {
                tracing::warn!(answer = ?other.err(), "campaign failed; campaigning again");
                keeper.abort();
                revoke(&mut client, lease.id()).await;
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        let kv = EtcdKv {
            kv: client.kv_client().max_decoding_message_size(crate::kv_journal::KV_READ_ANSWER_BYTES_MAX),
            rt: tokio::runtime::Handle::current(),
            timeout: Duration::from_millis(etcd.request_timeout_ms.max(1)),
        };
        let prefix = etcd.prefix.clone();
        let took = tokio::task::spawn_blocking(move || KvJournal::take_over(kv, &prefix, leadership)).await;
        let recovered = match took {
            Ok(Ok((store, replay, epoch))) => match Journal::start(store) {
                Ok(journal) => rebuild(config, journal, replay).map(|r| (r, epoch)),
                Err(e) => Err(e.into()),
            },
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(CoordinatorError::Etcd(format!("takeover task failed: {e}"))),
        };
        let (recovered, epoch) = match recovered {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot take over; stepping back to standby");
                keeper.abort();
                revoke(&mut client, lease.id()).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let shared = start(recovered, config.clone(), epoch, Some(clock.clone()));
        let mut stopped = shared.journal_stopped();
        role.set_active(Some((shared.clone(), handler(shared.clone()))));
        if etcd.announce {
            println!("coordinator active on {addr} (coordinator epoch {epoch})");
        }
        tracing::info!(coordinator_epoch = epoch, "active: took over as the coordinator");
        tracing::info!(target: "epochfence::fencing", coordinator_epoch = epoch, address = %addr, "coordinator took over");
        let why = tokio::select! {
            _ = stopped.wait_for(|s| s.is_some()) => "the journal stopped after a failed or uncertain etcd write",
            _ = lapse(&clock) => "its etcd lease lapsed",
        };
        tracing::error!(coordinator_epoch = epoch, why, "stepping down to standby");
        tracing::warn!(target: "epochfence::fencing", coordinator_epoch = epoch, why, "coordinator stepped down");
        role.trouble(Some(format!("the last active replica stepped down: {why}")));
        shared.step_down();
        role.set_active(None);
        keeper.abort();
        revoke(&mut client, lease.id()).await;
        // A standby names the active replica from its first answer on: the leader it knew
        // (itself) is stale, and the poll may have been frozen with it.
        refresh_leader(&mut client, &name, &role).await;
        announce_standby = etcd.announce;
    }
}

/// Resolves once `clock` no longer holds (checked every 20 ms: the own-clock check that
/// matters is the one on every request).
async fn lapse(clock: &LeaseClock) {
    while clock.holds() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Give up `lease` (best effort, briefly): its keys go, so another replica can win now.
async fn revoke(client: &mut Client, lease: i64) {
    let _ = tokio::time::timeout(Duration::from_millis(500), client.lease_revoke(lease)).await;
}
