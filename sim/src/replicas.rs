//! Deterministic simulation of coordinator replicas on a guarded store (`sim --coordinators`):
//! three replicas share [`coordinator::kv_journal::MemKv`], an in-memory store with etcd's
//! revisions, leases and elections, on virtual time. Each campaigns under a lease it keeps
//! alive; the winner takes over with the real [`KvJournal::take_over`] (the coordinator epoch
//! bumped, the state read back), rebuilds the real [`ProducerTable`] from it and grants epochs
//! to producers' inits, journaling through the real [`KvJournal`] (guarded writes, snapshots).
//!
//! Faults, from one seeded PRNG: a replica paused (often past its lease, sometimes between
//! deciding a grant and writing it: the window no clock check closes), crashed and restarted,
//! its clock jumped ahead; the store unreachable for a while. A replica steps down when its
//! lease lapses by its own clock or a write fails, as the tokio shell does.
//!
//! The invariants, checked at every write the store applies: no write of a replica whose
//! leader key is gone lands (no decision of a deposed coordinator takes effect), and the epochs
//! the journal grants each transactional id only go up; coordinator epochs only go up from one
//! takeover to the next; and, once faults stop, every transactional id is granted again
//! (liveness). With writes not guarded (the `unguarded-writes` mutation) a deposed replica's
//! grant lands beside the new replica's, and the checks find it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use coordinator::entry::Entry;
use coordinator::journal::{JournalError, JournalStore};
use coordinator::kv_journal::{
    election_name, is_log_key, log_records, Compare, GuardedKv, KeyValue, KvError, KvJournal, KvOp, Leadership, MemKv,
};
use coordinator::table::{InitDecision, ProducerTable, TableConfig};

use super::Rng;

const REPLICAS: usize = 3;
const TIDS: [&str; 3] = ["alpha", "beta", "gamma"];
const PREFIX: &str = "/sim";
/// The lease a replica leads under (the store's clock).
const LEASE_TICKS: u64 = 100;
const KEEPALIVE_TICKS: u64 = 20;
/// Snapshot after this many journal entries.
const SNAPSHOT_EVERY: u64 = 40;

/// What to run.
#[derive(Debug, Clone)]
pub struct ReplicasConfig {
    /// Ticks with faults; then the run goes on without them until every id is granted again.
    pub fault_ticks: u64,
    /// Writes compared on the leader key; false is the mutation the simulator must catch.
    pub guarded: bool,
    /// Keep a trace of every step.
    pub verbose: bool,
}

impl Default for ReplicasConfig {
    fn default() -> Self {
        ReplicasConfig { fault_ticks: 3_000, guarded: true, verbose: false }
    }
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct ReplicasOutcome {
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// Grants answered.
    pub grants: u64,
    /// Takeovers (coordinator epochs bumped).
    pub takeovers: u64,
    /// Writes of deposed replicas the store refused.
    pub deposed_writes_refused: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// The trace (with `verbose`).
    pub trace: String,
}

/// What the checks see of every write the store applies.
#[derive(Default)]
struct Audit {
    /// The first violation.
    violation: Option<String>,
    /// The highest epoch the journal has granted each transactional id.
    granted: HashMap<String, i16>,
}

/// The store as one replica reaches it: applied log writes are audited.
struct AuditedKv {
    kv: MemKv,
    replica: usize,
    leadership: Leadership,
    audit: Arc<Mutex<Audit>>,
}

impl GuardedKv for AuditedKv {
    fn txn(&mut self, compares: &[Compare], ops: &[KvOp]) -> Result<bool, KvError> {
        let leads = self.kv.holds(&self.leadership);
        let applied = self.kv.txn(compares, ops)?;
        if !applied {
            return Ok(false);
        }
        let mut audit = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        if !leads && audit.violation.is_none() {
            audit.violation = Some(format!("a write of replica {} landed after it was deposed", self.replica));
        }
        for op in ops {
            let KvOp::Put(key, value) = op else { continue };
            if !is_log_key(PREFIX, key) {
                continue;
            }
            for record in log_records(value).unwrap_or_default() {
                let Ok(Entry::Grant { transactional_id: Some(tid), epoch, .. }) = Entry::decode(record) else {
                    continue;
                };
                let last = audit.granted.get(&tid).copied().unwrap_or(-1);
                if epoch <= last && audit.violation.is_none() {
                    audit.violation = Some(format!(
                        "replica {} journaled epoch {epoch} for '{tid}', which already had {last}",
                        self.replica
                    ));
                }
                audit.granted.insert(tid, epoch.max(last));
            }
        }
        Ok(true)
    }

    fn range(&mut self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<KeyValue>, KvError> {
        self.kv.range(from, to, limit)
    }
}

struct Active {
    journal: KvJournal<AuditedKv>,
    table: ProducerTable,
    epoch: i32,
    since_snapshot: u64,
}

/// A grant decided and not yet written (a pause fell between the two).
struct Undone {
    tid: String,
    epoch: i16,
    entries: Vec<Entry>,
}

#[derive(Default)]
struct Replica {
    active: Option<Active>,
    lease: Option<i64>,
    /// Until when its lease holds, by its own clock.
    lease_until: u64,
    last_keepalive: u64,
    paused_until: u64,
    down_until: u64,
    /// Its clock runs this far ahead of the store's.
    skew: u64,
    /// Inits waiting for it, by transactional id.
    queue: Vec<String>,
    undone: Option<Undone>,
}

struct ReplicaSim {
    rng: Rng,
    cfg: ReplicasConfig,
    now: u64,
    kv: MemKv,
    store_down_until: u64,
    replicas: Vec<Replica>,
    audit: Arc<Mutex<Audit>>,
    last_coordinator_epoch: i32,
    /// The tick each id was last granted.
    granted_at: HashMap<String, u64>,
    out: ReplicasOutcome,
}

impl ReplicaSim {
    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.verbose {
            let l = line();
            self.out.trace.push_str(&format!("{:>6} {l}\n", self.now));
        }
    }

    fn violate(&mut self, v: String) {
        if self.out.violation.is_none() {
            self.out.violation = Some(v);
        }
    }

    fn own_now(&self, r: usize) -> u64 {
        self.now + self.replicas[r].skew
    }

    fn step_down(&mut self, r: usize, why: &str) {
        if self.replicas[r].active.take().is_some() {
            self.trace(|| format!("replica {r}: steps down: {why}"));
        }
        if let Some(lease) = self.replicas[r].lease.take() {
            if self.now >= self.store_down_until {
                self.kv.lease_revoke(lease);
            }
        }
        self.replicas[r].undone = None;
    }

    fn write(&mut self, r: usize, entries: &[Entry]) -> Result<(), JournalError> {
        let active = self.replicas[r].active.as_mut().expect("an active replica writes");
        let records: Vec<bytes::Bytes> = entries.iter().map(Entry::encode).collect();
        active.journal.write(&records)?;
        active.since_snapshot += entries.len() as u64;
        if active.since_snapshot >= SNAPSHOT_EVERY {
            let snapshot: Vec<bytes::Bytes> = active.table.snapshot().iter().map(Entry::encode).collect();
            active.journal.rotate(&snapshot)?;
            active.since_snapshot = 0;
        }
        Ok(())
    }

    /// Write a decided grant and answer it, or step down.
    fn finish(&mut self, r: usize, u: Undone) {
        match self.write(r, &u.entries) {
            Ok(()) => {
                self.out.grants += 1;
                self.granted_at.insert(u.tid.clone(), self.now);
                let at = self.replicas[r].active.as_ref().map_or(-1, |a| a.epoch);
                self.trace(|| format!("replica {r}: granted '{}' epoch {} (coordinator epoch {at})", u.tid, u.epoch));
            }
            Err(e) => {
                if matches!(e, JournalError::Deposed(_)) {
                    self.out.deposed_writes_refused += 1;
                }
                self.step_down(r, &format!("journal write failed: {e}"));
            }
        }
    }

    fn take_over(&mut self, r: usize, leadership: Leadership) {
        let kv =
            AuditedKv { kv: self.kv.clone(), replica: r, leadership: leadership.clone(), audit: self.audit.clone() };
        let (mut journal, replay, epoch) = match KvJournal::take_over(kv, PREFIX, leadership) {
            Ok(t) => t,
            Err(e) => {
                self.trace(|| format!("replica {r}: takeover failed: {e}"));
                self.step_down(r, "takeover failed");
                return;
            }
        };
        journal.set_unguarded(!self.cfg.guarded);
        if epoch <= self.last_coordinator_epoch {
            self.violate(format!("coordinator epoch {epoch} after {}", self.last_coordinator_epoch));
        }
        self.last_coordinator_epoch = epoch;
        let mut table = ProducerTable::new(TableConfig::default());
        for payload in replay.snapshot.into_iter().chain(replay.payloads) {
            match Entry::decode(payload) {
                Ok(e) => table.apply(&e),
                Err(e) => return self.violate(format!("replica {r}: a journal record does not decode: {e}")),
            }
        }
        table.restart_clocks(self.now);
        self.out.takeovers += 1;
        self.trace(|| format!("replica {r}: active at coordinator epoch {epoch}"));
        self.replicas[r].active = Some(Active { journal, table, epoch, since_snapshot: 0 });
    }

    fn run_replica(&mut self, r: usize) {
        let store_up = self.now >= self.store_down_until;
        if let Some(u) = self.replicas[r].undone.take() {
            // Woken between deciding a grant and writing it: the write goes out now, whatever
            // the clock says (the guard must refuse it if another replica took over).
            return self.finish(r, u);
        }
        // The lease: kept alive, or lost.
        if let Some(lease) = self.replicas[r].lease {
            if self.now >= self.replicas[r].last_keepalive + KEEPALIVE_TICKS {
                if store_up && self.kv.lease_keep_alive(lease, self.now + LEASE_TICKS) {
                    self.replicas[r].last_keepalive = self.now;
                    self.replicas[r].lease_until = self.own_now(r) + LEASE_TICKS;
                } else if !store_up {
                    // Not answered: the lease runs out by itself.
                } else {
                    self.replicas[r].lease = None;
                }
            }
        }
        if self.own_now(r) >= self.replicas[r].lease_until {
            self.step_down(r, "its lease lapsed by its own clock");
        }
        if self.replicas[r].active.is_none() {
            self.replicas[r].queue.clear(); // a standby refuses: NOT_COORDINATOR
            if !store_up {
                return;
            }
            if self.replicas[r].lease.is_none() {
                let lease = self.kv.lease_grant(self.now + LEASE_TICKS);
                self.replicas[r].lease = Some(lease);
                self.replicas[r].last_keepalive = self.now;
                self.replicas[r].lease_until = self.own_now(r) + LEASE_TICKS;
            }
            let lease = self.replicas[r].lease.expect("granted above");
            if let Some(leadership) = self.kv.campaign(&election_name(PREFIX), lease) {
                self.take_over(r, leadership);
            }
            return;
        }
        let queue = std::mem::take(&mut self.replicas[r].queue);
        for tid in queue {
            if self.replicas[r].active.is_none() {
                break;
            }
            let active = self.replicas[r].active.as_mut().expect("checked");
            let d = active.table.handle_init(Some(&tid), 60_000, None);
            let InitDecision::Grant { epoch, entries, fence, .. } = d else { continue };
            for e in &entries {
                active.table.apply(e);
            }
            // Fences are written by markers in the real coordinator; here they are done at once.
            let mut entries = entries;
            if !fence.is_empty() {
                if let Some(done) = active.table.handle_fence_done(&tid, epoch) {
                    active.table.apply(&done);
                    entries.push(done);
                }
            }
            let undone = Undone { tid, epoch, entries };
            if self.now < self.cfg.fault_ticks && self.rng.chance(30) {
                // Paused between the decision and its write: the clock check was passed.
                let ticks = LEASE_TICKS + self.rng.below(3 * LEASE_TICKS);
                self.replicas[r].paused_until = self.now + ticks;
                self.replicas[r].undone = Some(undone);
                *self.out.faults.entry("replica paused mid-grant").or_default() += 1;
                self.trace(|| format!("replica {r}: paused mid-grant for {ticks}"));
                return;
            }
            self.finish(r, undone);
        }
    }

    fn faults(&mut self) {
        let r = self.rng.below(REPLICAS as u64) as usize;
        if self.rng.chance(4) {
            let ticks = 20 + self.rng.below(4 * LEASE_TICKS);
            self.replicas[r].paused_until = self.now + ticks;
            *self.out.faults.entry("replica paused").or_default() += 1;
            self.trace(|| format!("replica {r}: paused for {ticks}"));
        } else if self.rng.chance(2) {
            self.replicas[r] = Replica { down_until: self.now + 50 + self.rng.below(200), ..Replica::default() };
            *self.out.faults.entry("replica crashed").or_default() += 1;
            self.trace(|| format!("replica {r}: crashed"));
        } else if self.rng.chance(2) {
            self.replicas[r].skew += 30 + self.rng.below(LEASE_TICKS);
            *self.out.faults.entry("clock jumped").or_default() += 1;
        } else if self.rng.chance(1) && self.now >= self.store_down_until {
            self.store_down_until = self.now + 20 + self.rng.below(200);
            *self.out.faults.entry("store unreachable").or_default() += 1;
            self.trace(|| "store: unreachable".to_string());
        }
    }
}

/// Run one seed.
pub fn run_replicas(seed: u64, cfg: ReplicasConfig) -> ReplicasOutcome {
    let mut sim = ReplicaSim {
        rng: Rng(seed),
        now: 0,
        kv: MemKv::new(),
        store_down_until: 0,
        replicas: (0..REPLICAS).map(|_| Replica::default()).collect(),
        audit: Arc::new(Mutex::new(Audit::default())),
        last_coordinator_epoch: 0,
        granted_at: HashMap::new(),
        out: ReplicasOutcome::default(),
        cfg,
    };
    let limit = sim.cfg.fault_ticks + 5_000;
    while sim.now < limit && sim.out.violation.is_none() {
        sim.now += 1;
        let now = sim.now;
        if now < sim.cfg.fault_ticks {
            sim.faults();
        }
        sim.kv.set_down(now < sim.store_down_until);
        if now >= sim.store_down_until {
            sim.kv.expire(now);
        }
        // Producers' inits, each to a replica picked at random (a client that follows
        // NOT_COORDINATOR reaches the active one in a few tries).
        if sim.rng.chance(80) {
            let tid = TIDS[sim.rng.below(TIDS.len() as u64) as usize].to_string();
            let r = sim.rng.below(REPLICAS as u64) as usize;
            sim.replicas[r].queue.push(tid);
        }
        let order = sim.rng.below(REPLICAS as u64) as usize;
        for i in 0..REPLICAS {
            let r = (order + i) % REPLICAS;
            let rep = &sim.replicas[r];
            if rep.paused_until <= now && rep.down_until <= now {
                sim.run_replica(r);
            }
        }
        let audited = sim.audit.lock().unwrap_or_else(|p| p.into_inner()).violation.clone();
        if let Some(v) = audited {
            sim.violate(v);
        }
        let faults_over = sim.cfg.fault_ticks;
        if now > faults_over && TIDS.iter().all(|t| sim.granted_at.get(*t).is_some_and(|at| *at > faults_over)) {
            break;
        }
    }
    let faults_over = sim.cfg.fault_ticks;
    if sim.out.violation.is_none() && !TIDS.iter().all(|t| sim.granted_at.get(*t).is_some_and(|at| *at > faults_over)) {
        sim.violate(format!("no convergence: not every transactional id was granted in {limit} ticks"));
    }
    sim.out
}
