//! Deterministic simulation of exactly-once read-process-write workers in one consumer group,
//! on the real coordinator rules: [`coordinator::groups::GroupTable`] (joins, generations,
//! sessions, offsets staged in transactions) and [`coordinator::table::ProducerTable`]
//! (each worker's own transactional id, its transactions, their timeouts), both rebuilt from
//! their journal when the coordinator crashes.
//!
//! Workers join the group, take the partitions of the input topic the leader assigns them (a
//! range assignment), and loop: read the committed offset of a partition (`require_stable`:
//! none while another transaction holds offsets for it), register the output partition, write
//! one output per input of a batch, stage the consumed offsets (AddOffsetsToTxn,
//! TxnOffsetCommit with the generation held) and commit; a refused offset commit aborts the
//! transaction. Faults, from one seeded PRNG: a worker frozen for a while (often past its
//! session timeout, sometimes past its transaction timeout, at any step of its transaction: a
//! zombie when it wakes), a worker restarted (a new instance of its transactional id, which
//! fences the old one), the coordinator crashed and rebuilt from its journal (waiting joins and
//! syncs are lost and retried).
//!
//! With `kip848` the workers are KIP-848 members instead (`sim --groups --kip848`): they join
//! and heartbeat with ConsumerGroupHeartbeat, the coordinator assigns (revocation before
//! assignment: a worker gives up a partition only once its transaction on it has ended), and
//! their TxnOffsetCommits carry their member epoch. A paused worker's session lapses and it is
//! fenced; when it wakes, its heartbeat is refused and it joins again at epoch 0.
//!
//! The invariants, checked after every step: no input's output is committed twice; under
//! KIP-848, no partition is owned by two members at once (the coordinator's view); and at the
//! end, once faults stop, every input's output is committed exactly once (liveness). With
//! generation fencing off (the `no-generation-fencing` mutation, which also skips the member
//! epoch check) a zombie's transaction commits a batch the group had given to another worker,
//! and the check finds the duplicate.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use coordinator::consumer_group::{ConsumerGroupConfig, Heartbeat, Topics};
use coordinator::entry::Entry;
use coordinator::groups::{GroupConfig, GroupTable, JoinDecision, SyncDecision, Wake, OFFSETS_TOPIC};
use coordinator::table::{EndDecision, InitDecision, ProducerTable, RegisterDecision, Registration, TableConfig};
use protocol::{ErrorCode, GroupMember, JoinGroupRequest, PartitionOffset, SyncGroupRequest};

use super::Rng;

const GROUP: &str = "workers";
const WORKERS: usize = 3;
const PARTITIONS: i32 = 4;
const SESSION_TICKS: i32 = 60;
const HEARTBEAT_TICKS: u64 = 15;
const TXN_TIMEOUT_TICKS: i32 = 600;
const BATCH_MAX: i64 = 3;
/// The input topic's id (KIP-848 assignments name topics by id).
const IN_ID: u128 = 7;

/// What to run.
#[derive(Debug, Clone)]
pub struct GroupsConfig {
    /// Inputs per partition.
    pub inputs_per_partition: i64,
    /// Ticks with faults; then the run goes on without them until every input is processed.
    pub fault_ticks: u64,
    /// The KIP-447 check (and KIP-848's member epoch check on offset commits); false is the
    /// mutation the simulator must catch.
    pub generation_fencing: bool,
    /// The workers are KIP-848 members (ConsumerGroupHeartbeat, member epochs).
    pub kip848: bool,
    /// Keep a trace of every step.
    pub verbose: bool,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig {
            inputs_per_partition: 100,
            fault_ticks: 3_000,
            generation_fencing: true,
            kip848: false,
            verbose: false,
        }
    }
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct GroupsOutcome {
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted (a refused offset commit, a timeout, a fence).
    pub aborted: u64,
    /// TxnOffsetCommits refused for a stale generation or member.
    pub generation_refusals: u64,
    /// Rebalances (generations formed).
    pub generations: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// The trace (with `verbose`).
    pub trace: String,
}

/// Where a worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Not a member: join.
    Join,
    /// Its JoinGroup waits for the rebalance.
    AwaitJoin,
    /// Joined at a generation: sync (the leader with the assignment).
    Sync { leader: bool, members: Vec<String> },
    /// Its SyncGroup waits for the leader's.
    AwaitSync,
    /// Stable with an assignment: start a transaction on one of its partitions.
    Idle,
    /// Inputs `from..to` of `partition` read; outputs written in the open transaction next.
    Write { partition: i32, from: i64, to: i64 },
    /// Outputs written: stage the offset.
    Offsets { partition: i32, to: i64 },
    /// Offsets staged: commit.
    Commit,
    /// The offset commit was refused: abort.
    Abort,
}

#[derive(Debug)]
struct Worker {
    tid: String,
    producer: Option<(i64, i16)>,
    member_id: String,
    generation: i32,
    assignment: Vec<i32>,
    step: Step,
    paused_until: u64,
    last_heartbeat: u64,
    /// Outputs written in the open transaction: the inputs they stand for.
    pending: Vec<(i32, i64)>,
    /// KIP-848: the assignment the coordinator last gave, taken once no transaction runs on a
    /// partition it takes away.
    target: Option<Vec<i32>>,
    /// KIP-848: which instance of the worker this is (its member id's suffix).
    incarnation: u64,
}

struct GroupSim {
    rng: Rng,
    cfg: GroupsConfig,
    now: u64,
    table: ProducerTable,
    groups: GroupTable,
    journal: Vec<Entry>,
    nonce: u64,
    workers: Vec<Worker>,
    /// Committed outputs: input -> how many times.
    committed: HashMap<(i32, i64), u32>,
    /// Answers of waiting joins and syncs, by (member id, sync).
    wakes: HashMap<(String, bool), Wake>,
    /// KIP-848: the highest group epoch journaled.
    group_epoch_seen: i32,
    out: GroupsOutcome,
}

impl GroupSim {
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

    /// KIP-848: no partition owned (assigned, or being given up) by two members at once.
    fn check_owners(&mut self) {
        let Some(g) = self.groups.consumer_groups().group(GROUP) else { return };
        let mut seen: HashMap<(u128, i32), &str> = HashMap::new();
        let mut twice = None;
        for (member, owned) in g.owned() {
            for tp in owned {
                if let Some(other) = seen.insert(tp, member) {
                    twice = Some(format!("partition {} owned by members {other} and {member} at once", tp.1));
                }
            }
        }
        if let Some(v) = twice {
            self.violate(v);
        }
    }

    /// Journal the group table's entries and keep its wakes for the workers waiting.
    fn drain_groups(&mut self) {
        let (wakes, entries) = self.groups.take_effects();
        self.out.generations +=
            entries.iter().filter(|e| matches!(e, Entry::GroupGeneration(g) if !g.stable)).count() as u64;
        // KIP-848: a rebalance is a new group epoch.
        for e in &entries {
            if let Entry::ConsumerGroup(r) = e {
                if r.group_epoch > self.group_epoch_seen {
                    self.group_epoch_seen = r.group_epoch;
                    self.out.generations += 1;
                }
            }
        }
        self.journal.extend(entries);
        for w in wakes {
            let key = match &w {
                Wake::Join { member_id, .. } => (member_id.clone(), false),
                Wake::Sync { member_id, .. } => (member_id.clone(), true),
            };
            self.wakes.insert(key, w);
        }
    }

    /// The producer table's entries: journaled, seen by the groups, and their markers applied
    /// to the outputs at once (the brokers' side is the main simulation's).
    fn producer_entries(&mut self, tid: &str, entries: Vec<Entry>) {
        for e in &entries {
            self.groups.apply(e);
        }
        self.journal.extend(entries);
        let _ = tid;
    }

    /// A transaction of `w` ended: its outputs are committed or dropped.
    fn resolve(&mut self, w: usize, commit: bool) {
        let pending = std::mem::take(&mut self.workers[w].pending);
        if commit {
            self.out.committed += 1;
            for input in &pending {
                let n = {
                    let n = self.committed.entry(*input).or_default();
                    *n += 1;
                    *n
                };
                if n > 1 {
                    let tid = self.workers[w].tid.clone();
                    self.violate(format!(
                        "input {}/{} has its output committed {} times (the last by '{tid}')",
                        input.0, input.1, n
                    ));
                }
            }
        } else {
            self.out.aborted += 1;
        }
    }

    fn init(&mut self, w: usize) {
        let tid = self.workers[w].tid.clone();
        match self.table.handle_init(Some(&tid), TXN_TIMEOUT_TICKS, None) {
            InitDecision::Grant { producer_id, epoch, entries, fence } => {
                self.producer_entries(&tid, entries);
                if !fence.is_empty() {
                    // The earlier instance's open transaction is aborted by the fence.
                    self.resolve(w, false);
                    if let Some(e) = self.table.handle_fence_done(&tid, epoch) {
                        self.journal.push(e);
                    }
                }
                self.workers[w].producer = Some((producer_id, epoch));
                self.trace(|| format!("{tid}: granted pid {producer_id} epoch {epoch}"));
            }
            InitDecision::Refuse { status, .. } => self.trace(|| format!("{tid}: init refused: {status}")),
        }
    }

    fn who(&self, w: usize) -> GroupMember {
        let wk = &self.workers[w];
        GroupMember {
            group: GROUP.into(),
            generation: wk.generation,
            member_id: wk.member_id.clone(),
            instance_id: None,
        }
    }

    fn join_request(&self, w: usize) -> JoinGroupRequest {
        let topics = Bytes::from_static(b"in");
        JoinGroupRequest {
            group: GROUP.into(),
            member_id: self.workers[w].member_id.clone(),
            instance_id: None,
            session_timeout_ms: SESSION_TICKS,
            rebalance_timeout_ms: SESSION_TICKS * 2,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), topics)],
            require_known_member: false,
            client_id: format!("w{w}"),
            client_host: String::new(),
        }
    }

    /// The end of the worker's open transaction, if it has one.
    fn end(&mut self, w: usize, commit: bool) {
        let Some((pid, epoch)) = self.workers[w].producer else { return };
        let tid = self.workers[w].tid.clone();
        match self.table.handle_end_txn(&tid, pid, epoch, commit, false) {
            EndDecision::Markers { commit, entries, .. } => {
                self.producer_entries(&tid, entries);
                self.resolve(w, commit);
                if let Some(e) = self.table.handle_fence_done(&tid, epoch) {
                    self.journal.push(e);
                }
                self.trace(|| format!("{tid}: transaction {}", if commit { "committed" } else { "aborted" }));
            }
            EndDecision::Done { .. } => self.resolve(w, false),
            EndDecision::Refuse { status, .. } => {
                // Fenced (a timeout aborted it, or a newer instance): nothing of it commits.
                self.trace(|| format!("{tid}: EndTxn refused: {status}"));
                self.workers[w].pending.clear();
                if matches!(status.code, ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch) {
                    self.workers[w].producer = None;
                }
            }
        }
        self.workers[w].step = Step::Idle;
    }

    fn topics() -> Topics {
        [("in".to_string(), (IN_ID, PARTITIONS))].into_iter().collect()
    }

    /// A KIP-848 heartbeat of worker `w` (epoch 0: a join), reporting what it owns.
    fn heartbeat_848(&mut self, w: usize) {
        let now = self.now;
        let wk = &self.workers[w];
        let joining = wk.generation <= 0;
        let h = Heartbeat {
            group: GROUP.into(),
            member_id: format!("w{w}-{}", wk.incarnation),
            member_epoch: if joining { 0 } else { wk.generation },
            rebalance_timeout_ms: if joining { SESSION_TICKS * 2 } else { -1 },
            topic_names: joining.then(|| vec!["in".to_string()]),
            owned: Some(if joining { Vec::new() } else { wk.assignment.iter().map(|p| (IN_ID, *p)).collect() }),
            ..Heartbeat::default()
        };
        self.workers[w].last_heartbeat = now;
        let answer = self.groups.handle_consumer_heartbeat(now, &h, &Self::topics());
        self.drain_groups();
        match answer {
            Ok(a) => {
                if joining {
                    self.workers[w].member_id = h.member_id.clone();
                    self.workers[w].assignment.clear();
                    self.workers[w].step = Step::Idle;
                    self.trace(|| format!("w{w}: joined at member epoch {}", a.member_epoch));
                }
                self.workers[w].generation = a.member_epoch;
                if let Some(set) = a.assignment {
                    self.workers[w].target = Some(set.into_iter().map(|(_, p)| p).collect());
                }
                self.reconcile(w);
            }
            Err(status) => {
                // Fenced (its session lapsed, or it missed a rebalance): it joins again at
                // epoch 0, with nothing.
                self.trace(|| format!("w{w}: heartbeat refused: {status}"));
                self.workers[w].generation = -1;
                self.workers[w].assignment.clear();
                self.workers[w].target = None;
                if self.workers[w].step == Step::Idle {
                    self.workers[w].step = Step::Join;
                }
            }
        }
    }

    /// Take the last assignment given, keeping a partition its open transaction works on until
    /// the transaction ends (the revocation is acknowledged at the next heartbeat).
    fn reconcile(&mut self, w: usize) {
        let busy = match self.workers[w].step {
            Step::Write { partition, .. } | Step::Offsets { partition, .. } => Some(partition),
            _ => None,
        };
        let Some(target) = self.workers[w].target.clone() else { return };
        let mut now_owned = target.clone();
        if let Some(p) = busy.filter(|p| !target.contains(p) && self.workers[w].assignment.contains(p)) {
            now_owned.push(p);
        } else {
            self.workers[w].target = None;
        }
        if now_owned != self.workers[w].assignment {
            let a = now_owned.clone();
            self.trace(|| format!("w{w}: assignment {a:?}"));
        }
        self.workers[w].assignment = now_owned;
    }

    /// One step of worker `w`.
    fn step(&mut self, w: usize) {
        if self.workers[w].producer.is_none() {
            return self.init(w);
        }
        let now = self.now;
        if self.cfg.kip848 {
            let member = matches!(self.workers[w].step, Step::Idle | Step::Write { .. } | Step::Offsets { .. });
            if self.workers[w].step == Step::Join || member && now >= self.workers[w].last_heartbeat + HEARTBEAT_TICKS {
                self.heartbeat_848(w);
                self.check_owners();
            }
            if matches!(self.workers[w].step, Step::Join | Step::AwaitJoin | Step::Sync { .. } | Step::AwaitSync) {
                return;
            }
        }
        // Heartbeats while a member (a rebalance sends it back to join).
        if !self.cfg.kip848
            && matches!(self.workers[w].step, Step::Idle | Step::Write { .. } | Step::Offsets { .. })
            && now >= self.workers[w].last_heartbeat + HEARTBEAT_TICKS
        {
            self.workers[w].last_heartbeat = now;
            let s = self.groups.handle_heartbeat(now, &self.who(w));
            if !s.is_ok() {
                self.trace(|| format!("w{w}: heartbeat: {s}"));
                if self.workers[w].step == Step::Idle {
                    self.workers[w].step = Step::Join;
                }
            }
        }
        match self.workers[w].step.clone() {
            Step::Join => {
                let req = self.join_request(w);
                match self.groups.handle_join(now, &req) {
                    JoinDecision::Answer(a) => {
                        self.trace(|| format!("w{w}: join answered: {}", a.status));
                        if a.status.code == ErrorCode::UnknownMemberId {
                            self.workers[w].member_id.clear();
                        }
                    }
                    JoinDecision::Wait { member_id } => {
                        self.workers[w].member_id = member_id;
                        self.workers[w].step = Step::AwaitJoin;
                    }
                }
                self.drain_groups();
            }
            Step::AwaitJoin => {
                let key = (self.workers[w].member_id.clone(), false);
                if let Some(Wake::Join { response, .. }) = self.wakes.remove(&key) {
                    if response.status.is_ok() {
                        let leader = response.leader == response.member_id;
                        let members = response.members.iter().map(|(m, _, _)| m.clone()).collect();
                        self.workers[w].generation = response.generation;
                        self.workers[w].step = Step::Sync { leader, members };
                        self.trace(|| format!("w{w}: joined at generation {} (leader {leader})", response.generation));
                    } else {
                        self.workers[w].step = Step::Join;
                    }
                }
            }
            Step::Sync { leader, members } => {
                let assignments = if leader { range(&members) } else { Vec::new() };
                let req = SyncGroupRequest { member: self.who(w), assignments };
                match self.groups.handle_sync(now, &req) {
                    SyncDecision::Answer(a) if a.status.is_ok() => self.assigned(w, &a.assignment),
                    SyncDecision::Answer(a) => {
                        self.trace(|| format!("w{w}: sync answered: {}", a.status));
                        self.workers[w].step = Step::Join;
                    }
                    SyncDecision::Wait => self.workers[w].step = Step::AwaitSync,
                }
                self.drain_groups();
            }
            Step::AwaitSync => {
                let key = (self.workers[w].member_id.clone(), true);
                if let Some(Wake::Sync { response, .. }) = self.wakes.remove(&key) {
                    if response.status.is_ok() {
                        self.assigned(w, &response.assignment);
                    } else {
                        self.workers[w].step = Step::Join;
                    }
                }
            }
            Step::Idle => {
                let parts = self.workers[w].assignment.clone();
                if parts.is_empty() {
                    return;
                }
                let partition = parts[self.rng.below(parts.len() as u64) as usize];
                let asked = [("in".to_string(), partition)];
                let (offset, status) = self.groups.handle_fetch(GROUP, Some(&asked), true).remove(0);
                if !status.is_ok() {
                    return; // a transaction holds offsets for it: wait for its end
                }
                let from = offset.offset.max(0);
                let to = (from + 1 + self.rng.below(BATCH_MAX as u64) as i64).min(self.cfg.inputs_per_partition);
                if from < to {
                    self.workers[w].step = Step::Write { partition, from, to };
                }
            }
            Step::Write { partition, from, to } => {
                let (pid, epoch) = self.workers[w].producer.expect("initialised");
                let tid = self.workers[w].tid.clone();
                // AddPartitionsToTxn for the output, then the writes (the leader's gate lets
                // only the current epoch of an open transaction write).
                match self.table.handle_register(&Registration::new(pid, epoch, ("out", 0), 0, true), now) {
                    RegisterDecision::Accept { entries, .. } => {
                        self.producer_entries(&tid, entries);
                        self.workers[w].pending.extend((from..to).map(|o| (partition, o)));
                        self.workers[w].step = Step::Offsets { partition, to };
                    }
                    RegisterDecision::Refuse { status, .. } => {
                        self.trace(|| format!("{tid}: write refused: {status}"));
                        self.workers[w].pending.clear();
                        self.workers[w].producer = None;
                        self.workers[w].step = Step::Idle;
                    }
                }
            }
            Step::Offsets { partition, to } => {
                let (pid, epoch) = self.workers[w].producer.expect("initialised");
                let tid = self.workers[w].tid.clone();
                let reg =
                    Registration::new(pid, epoch, (OFFSETS_TOPIC, coordinator::cluster::OFFSETS_PARTITION_ID), 0, true);
                let verified = match self.table.handle_register(&reg, now) {
                    RegisterDecision::Accept { entries, .. } => {
                        self.producer_entries(&tid, entries);
                        true
                    }
                    RegisterDecision::Refuse { .. } => false,
                };
                let offsets =
                    [PartitionOffset { topic: "in".into(), partition, offset: to, leader_epoch: -1, metadata: None }];
                let who = self.who(w);
                match verified.then(|| self.groups.handle_txn_commit(&tid, &who, &offsets)) {
                    Some(Ok(())) => self.workers[w].step = Step::Commit,
                    Some(Err(status)) => {
                        self.out.generation_refusals += 1;
                        self.trace(|| format!("{tid}: TxnOffsetCommit refused: {status}"));
                        self.workers[w].step = Step::Abort;
                    }
                    None => self.workers[w].step = Step::Abort,
                }
                self.drain_groups();
            }
            Step::Commit => {
                self.end(w, true);
                self.reconcile(w);
            }
            Step::Abort => {
                self.end(w, false);
                // A refused offset commit means the group moved on: join again.
                self.workers[w].step = Step::Join;
                if self.cfg.kip848 {
                    self.workers[w].generation = -1;
                    self.workers[w].assignment.clear();
                    self.workers[w].target = None;
                }
            }
        }
    }

    fn assigned(&mut self, w: usize, assignment: &Bytes) {
        self.workers[w].assignment = assignment.iter().map(|b| i32::from(*b)).collect();
        self.workers[w].step = Step::Idle;
        self.workers[w].last_heartbeat = self.now;
        let (a, generation) = (self.workers[w].assignment.clone(), self.workers[w].generation);
        self.trace(|| format!("w{w}: assigned {a:?} at generation {generation}"));
    }

    /// The coordinator crashes and is rebuilt from its journal; what waited is lost.
    fn crash_coordinator(&mut self) {
        self.nonce += 1;
        let mut table = ProducerTable::new(TableConfig::default());
        let mut groups = GroupTable::new(self.groups_config(), self.nonce);
        for e in &self.journal {
            table.apply(e);
            groups.apply(e);
        }
        table.restart_clocks(self.now);
        groups.restart_clocks(self.now);
        self.table = table;
        self.groups = groups;
        self.wakes.clear();
        for w in &mut self.workers {
            if matches!(w.step, Step::AwaitJoin | Step::AwaitSync | Step::Sync { .. }) {
                w.step = Step::Join;
            }
        }
        self.trace(|| "coordinator: crashed and rebuilt from its journal".into());
    }

    fn groups_config(&self) -> GroupConfig {
        GroupConfig {
            session_timeout_min_ms: 1,
            session_timeout_max_ms: 1_000_000,
            initial_rebalance_delay_ms: 0,
            generation_fencing: self.cfg.generation_fencing,
            consumer: ConsumerGroupConfig {
                session_timeout_ms: SESSION_TICKS as u64,
                heartbeat_interval_ms: HEARTBEAT_TICKS,
                ..ConsumerGroupConfig::default()
            },
            ..GroupConfig::default()
        }
    }

    fn faults(&mut self) {
        let now = self.now;
        if self.rng.chance(4) {
            let w = self.rng.below(WORKERS as u64) as usize;
            // Often past the session timeout (a zombie), now and then past the transaction's.
            let ticks = match self.rng.below(10) {
                0 => TXN_TIMEOUT_TICKS as u64 + 50,
                1..=6 => SESSION_TICKS as u64 * 2,
                _ => 10,
            };
            self.workers[w].paused_until = now + ticks;
            *self.out.faults.entry("worker paused").or_default() += 1;
            self.trace(|| format!("w{w}: paused for {ticks} ticks"));
        }
        if self.rng.chance(1) {
            let w = self.rng.below(WORKERS as u64) as usize;
            // A new instance of the worker: its transactional id's init fences the old one.
            let tid = self.workers[w].tid.clone();
            let incarnation = self.workers[w].incarnation + 1;
            self.workers[w] = Worker { incarnation, ..worker(tid) };
            *self.out.faults.entry("worker restarted").or_default() += 1;
            self.trace(|| format!("w{w}: restarted"));
        }
        if self.rng.chance(1) {
            self.crash_coordinator();
            *self.out.faults.entry("coordinator crashed").or_default() += 1;
        }
    }

    fn done(&self) -> bool {
        (0..PARTITIONS).all(|p| (0..self.cfg.inputs_per_partition).all(|o| self.committed.contains_key(&(p, o))))
    }
}

/// The range assignment of the input's partitions over `members` (sorted), one byte each.
fn range(members: &[String]) -> Vec<(String, Bytes)> {
    let mut sorted = members.to_vec();
    sorted.sort();
    let n = sorted.len().max(1) as i32;
    sorted
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let parts: Vec<u8> = (0..PARTITIONS).filter(|p| p % n == i as i32).map(|p| p as u8).collect();
            (m.clone(), Bytes::from(parts))
        })
        .collect()
}

fn worker(tid: String) -> Worker {
    Worker {
        tid,
        producer: None,
        member_id: String::new(),
        generation: -1,
        assignment: Vec::new(),
        step: Step::Join,
        paused_until: 0,
        last_heartbeat: 0,
        pending: Vec::new(),
        target: None,
        incarnation: 0,
    }
}

/// Run one seed.
pub fn run_groups(seed: u64, cfg: GroupsConfig) -> GroupsOutcome {
    let mut sim = GroupSim {
        rng: Rng(seed),
        now: 0,
        table: ProducerTable::new(TableConfig::default()),
        groups: GroupTable::new(GroupConfig::default(), 0),
        journal: Vec::new(),
        nonce: 0,
        workers: (0..WORKERS).map(|w| worker(format!("worker-{w}"))).collect(),
        committed: HashMap::new(),
        wakes: HashMap::new(),
        group_epoch_seen: 0,
        out: GroupsOutcome::default(),
        cfg,
    };
    sim.groups = GroupTable::new(sim.groups_config(), 0);
    let limit = sim.cfg.fault_ticks + 20_000;
    while sim.now < limit && sim.out.violation.is_none() {
        sim.now += 1;
        if sim.now < sim.cfg.fault_ticks {
            sim.faults();
        }
        let now = sim.now;
        sim.groups.handle_tick(now);
        sim.drain_groups();
        for (tid, d) in sim.table.handle_timeouts(now) {
            if let EndDecision::Markers { entries, epoch, .. } = d {
                sim.producer_entries(&tid, entries);
                if let Some(w) = sim.workers.iter().position(|w| w.tid == tid) {
                    sim.resolve(w, false);
                }
                if let Some(e) = sim.table.handle_fence_done(&tid, epoch) {
                    sim.journal.push(e);
                }
                sim.trace(|| format!("coordinator: '{tid}' timed out and aborted"));
            }
        }
        let order = sim.rng.below(WORKERS as u64) as usize;
        for i in 0..WORKERS {
            let w = (order + i) % WORKERS;
            if sim.workers[w].paused_until <= now {
                sim.step(w);
            }
        }
        if sim.now >= sim.cfg.fault_ticks && sim.done() {
            break;
        }
    }
    if sim.out.violation.is_none() && !sim.done() {
        let missing = (0..PARTITIONS)
            .flat_map(|p| (0..sim.cfg.inputs_per_partition).map(move |o| (p, o)))
            .filter(|i| !sim.committed.contains_key(i))
            .count();
        sim.violate(format!("no convergence: {missing} inputs have no committed output {limit} ticks in"));
    }
    sim.out
}
