//! Deterministic simulation of a topic's partitions (two by default) on three brokers, a
//! coordinator, producers sharing transactional ids (one pair idempotent, one pair
//! transactional, every batch to any partition, so transactions span them) and a
//! read_committed consumer, on virtual time, every fault drawn from one seeded PRNG.
//!
//! It drives the real rule types: [`coordinator::table::ProducerTable`] grants epochs, opens and
//! ends transactions (and aborts those that outlive their timeout), writes fence, commit and
//! abort markers, verifies partitions and is rebuilt from its journal after a crash;
//! [`coordinator::cluster::Cluster`] keeps the brokers' leases, moves leaderships when a lease
//! expires or a broker restarts, and changes ISRs when a leader asks, all on the coordinator's
//! own clock; [`broker::partition::Partition`] runs the
//! leader-epoch check, the producer gate, replication, the transaction index and fetch, on an
//! in-memory disk ([`broker::storage::MemStorage`], 2 KiB segments so that runs roll many) that
//! a power loss cuts back to what was synced plus a torn prefix of the rest; every other broker
//! restart follows a clean stop instead. The simulator is the network (delay, reordering,
//! duplication, loss, partitions, messages lost with a crashed process), the disks (flushes,
//! slow ones), the scheduler (paused producers, brokers, coordinator and consumer: zombies and
//! stale leaders) and the clocks (each process has its own; it starts from 0 at every restart
//! and can jump ahead, which expires leases early on the coordinator and makes followers look
//! lagging on a leader). Brokers learn leaderships only from heartbeat answers, and leaders
//! ask for ISR changes, one call at a time with a timeout, as the broker's heartbeat loop does.
//! After every step it checks:
//!
//! 1. no data batch carrying an epoch older than one the coordinator has finished granting
//!    (an init, or an EndTxn's bump, answered) for its transactional id is appended by a leader
//!    and then committed;
//! 2. every acknowledged record is in the final log exactly once, at the offset acknowledged;
//! 3. once an offset is committed, no replica holds a different batch there below its own
//!    high watermark;
//! 4. leader epochs seen by each broker (within one incarnation), and epochs granted per
//!    transactional id, never go backwards;
//! 5. what the consumer reads is what is committed there, never a zombie write, and, read
//!    committed, never a record of a transaction the coordinator did not decide to commit;
//!
//! and, after the faults stop, that the replicas and the consumer converge (liveness).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use broker::partition::{AppendError, Appended, Offer, Partition, ReplicateError};
use broker::replication::Sent;
use broker::storage::{MemStorage, StoredFile};
use bytes::Bytes;
use coordinator::cluster::{Cluster, ClusterConfig};
use coordinator::entry::{Entry, FenceTarget};
use coordinator::table::{EndDecision, InitDecision, ProducerTable, RegisterDecision, TableConfig};
use protocol::batch::{build_batch, build_marker, BatchHeader, MarkerKind, ProducerStamp};
use protocol::{AlterPartitionRequest, AlterPartitionResponse, Assignment, ReplicaReport, ReplicateRequest};

const TOPIC: &str = "sim";
const BROKERS: [i32; 3] = [1, 2, 3];
/// Replicate requests a leader sends one follower per tick, each behind the one before (the
/// broker's `replication_inflight_max`).
const REPLICATE_PIPELINE: usize = 3;
const COORD: usize = 0;
const CONSUMER: usize = 9;
/// A broker heartbeats this often (in ticks, on its own clock's schedule).
const HEARTBEAT_TICKS: u64 = 30;
/// How long a heartbeat keeps a broker's lease, on the coordinator's clock.
const LEASE_TICKS: u64 = 300;
/// A follower not caught up for this long (on its leader's clock) leaves the ISR.
const REPLICA_LAG_TICKS: u64 = 400;
/// A request to the coordinator not answered within this many ticks is given up (its answer,
/// if it ever comes, is dropped), as the broker's calls time out.
const CALL_TIMEOUT_TICKS: u64 = 150;
/// A produce request waits up to this many ticks for others to the same partition on the same
/// broker, to be appended with them as one group (as one read hands a broker several).
const PRODUCE_GROUP_WAIT_TICKS_MAX: u64 = 2;
/// The producers' transaction timeout: a producer paused inside a transaction for longer is
/// aborted and fenced by the coordinator.
const TXN_TIMEOUT_TICKS: u64 = 500;
/// Small segments, so that runs roll many of them: crashes then land around rolls, segment
/// indexes and producer-state snapshots, and recovery goes through them.
const LOG: broker::log::LogConfig = broker::log::LogConfig {
    segment_bytes: 2048,
    retention_bytes: None,
    retention_ms: None,
    sync_on_roll: true,
    // The simulated disk keeps no blocks; preallocation is a hint it ignores.
    preallocate_bytes: 0,
};

/// A fence check switched off, to show the simulator catches what it prevents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The real build.
    None,
    /// The partition gate ignores producer epochs (zombie writes land).
    NoProducerFencing,
    /// Followers take replication from any sender at any leader epoch (stale leaders win).
    NoLeaderEpochChecks,
    /// Writes commit before they are on disk: followers acknowledge what they have not synced
    /// and the leader counts its unsynced log in the high watermark (a power loss then loses
    /// committed records).
    UnsyncedCommits,
    /// The partition answers read_committed fetches as read_uncommitted (no last stable
    /// offset, no aborted transactions): open and aborted transactions reach the consumer.
    ReadUncommitted,
    /// ISR changes without partition epochs: the coordinator applies a change whatever ISR it
    /// was based on, and leaders take every ISR they are told (the bug the simulator found: a
    /// late heartbeat answer undid an ISR change, and a leader committed without a member).
    UnversionedIsr,
}

impl Mutation {
    /// Parse the command-line name.
    pub fn parse(s: &str) -> Option<Mutation> {
        match s {
            "none" => Some(Mutation::None),
            "no-producer-fencing" => Some(Mutation::NoProducerFencing),
            "no-leader-epoch-checks" => Some(Mutation::NoLeaderEpochChecks),
            "unsynced-commits" => Some(Mutation::UnsyncedCommits),
            "read-uncommitted" => Some(Mutation::ReadUncommitted),
            "unversioned-isr" => Some(Mutation::UnversionedIsr),
            _ => None,
        }
    }
}

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// First invariant broken, if any.
    pub violation: Option<String>,
    /// Steps (events handled).
    pub steps: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Batches the consumer read.
    pub consumed: u64,
    /// Records acknowledged to producers.
    pub acked: u64,
    /// Writes the fence refused (zombies stopped).
    pub fenced: u64,
    /// Leader elections.
    pub elections: u64,
    /// Decisions of the real code worth counting, by kind: the coordinator's (leaderships moved
    /// and why, ISR changes) and the brokers' (held answers voided by a cut).
    pub decisions: BTreeMap<&'static str, u64>,
    /// Transactions the coordinator decided to commit.
    pub txns_committed: u64,
    /// Transactions it decided to abort on EndTxn (fences of open ones not counted).
    pub txns_aborted: u64,
    /// Transactions it aborted because they outlived their timeout.
    pub txns_timed_out: u64,
    /// Transactions it decided to commit that span more than one partition.
    pub txns_spanning: u64,
    /// Transactional records the consumer skipped as aborted.
    pub aborted_skipped: u64,
    /// Trace (only with `verbose`).
    pub trace: String,
}

/// Small, seedable, dependency-free PRNG (SplitMix64): the whole run follows from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Identity of a data batch: partition, producer id, epoch, first sequence.
type BatchId = (i32, i64, i16, i32);

/// What the invariants know a batch by: producer id, epoch, first sequence, leader epoch.
type Seen = (i64, i16, i32, i32);

#[derive(Debug, Clone)]
enum Msg {
    InitReq {
        prod: usize,
    },
    InitResp {
        prod: usize,
        granted: Option<(i64, i16)>,
    },
    Produce {
        prod: usize,
        partition: i32,
        batch: Bytes,
        header: BatchHeader,
        leader_epoch: i32,
    },
    ProduceResp {
        prod: usize,
        batch: BatchId,
        result: ProduceResult,
    },
    Verify {
        broker: i32,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
    },
    VerifyResp {
        partition: i32,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        ok: bool,
    },
    Marker {
        tid: String,
        target: FenceTarget,
        leader_epoch: i32,
        commit: bool,
    },
    EndTxn {
        prod: usize,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    },
    /// `for_epoch`: the epoch the EndTxn was sent with; `retry`: refused for now (markers still
    /// being written), ask again.
    EndTxnResp {
        prod: usize,
        for_epoch: i16,
        granted: Option<(i64, i16)>,
        retry: bool,
    },
    MarkerResp {
        tid: String,
        epoch: i16,
        producer_id: i64,
        partition: i32,
        ok: bool,
    },
    /// A broker's heartbeat: its process incarnation and its replicas' progress.
    Heartbeat {
        broker: i32,
        call: u64,
        incarnation: i64,
        reports: Vec<ReplicaReport>,
    },
    /// The coordinator's answer: each partition's leadership, replicas and ISR.
    HeartbeatResp {
        call: u64,
        assignments: Vec<Assignment>,
    },
    /// A leader asks the coordinator to change the ISR under its leader epoch.
    AlterIsr {
        call: u64,
        req: AlterPartitionRequest,
    },
    AlterIsrResp {
        call: u64,
        partition: i32,
        leader_epoch: i32,
        resp: AlterPartitionResponse,
    },
    Fetch {
        partition: i32,
        offset: i64,
        leader_epoch: i32,
    },
    FetchResp {
        partition: i32,
        offset: i64,
        records: Option<Bytes>,
        aborted: Vec<protocol::AbortedTxn>,
    },
    Replicate {
        req: ReplicateRequest,
        sent: Sent,
    },
    ReplicateResp {
        partition: i32,
        follower: i32,
        leader_epoch: i32,
        from_offset: i64,
        sent: Sent,
        result: Result<i64, (i64, i32)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProduceResult {
    Acked { base_offset: i64 },
    Fenced,
    Retry,
}

#[derive(Debug, Clone)]
enum Event {
    /// `incarnation`: the destination process's incarnation when sent; a message to a
    /// process that has since crashed is lost with its connections.
    Deliver {
        to: usize,
        from: usize,
        incarnation: u64,
        msg: Msg,
    },
    ProducerTick(usize),
    BrokerTick(i32),
    /// A broker's flusher looks for unsynced writes (every few ticks).
    FlushStart(i32),
    /// The fdatasync it started finishes (later on a slow disk); lost if the broker crashed.
    FlushDone {
        id: i32,
        partition: i32,
        incarnation: u64,
        end: i64,
        generation: u64,
        file: Arc<dyn StoredFile>,
    },
    ControllerTick,
    ConsumerTick,
    /// A broker's heartbeat timer.
    Heartbeat(i32),
    /// A broker appends the produce requests in a partition's inbox, as one group; lost if
    /// the broker crashed.
    ProduceGroup {
        id: i32,
        partition: i32,
        incarnation: u64,
    },
}

/// Host numbering: 0 coordinator, 1..=3 brokers, 10+ producers.
fn producer_host(p: usize) -> usize {
    10 + p
}

struct Producer {
    tid: String,
    /// Writes in transactions (the producers of `tid-1`); the others are idempotent.
    transactional: bool,
    /// Batches acknowledged in the open transaction, and how many it is to hold.
    txn_acked: u32,
    txn_size: u32,
    /// An EndTxn sent and not answered: (commit, when sent).
    ending: Option<(bool, u64)>,
    ids: Option<(i64, i16)>,
    /// When the outstanding init was sent (it is retried if no answer comes).
    init_sent: Option<u64>,
    /// Next sequence per partition.
    next_seq: Vec<i32>,
    /// The batch in flight: partition, batch, header, when sent.
    inflight: Option<(i32, Bytes, BatchHeader, u64)>,
    /// Whom it believes leads each partition, at which leader epoch.
    leader: Vec<(i32, i32)>,
    paused_until: u64,
    dead_until: u64,
}

struct Pending {
    prod: Option<(usize, BatchId)>,
    marker: Option<(String, i16, i64)>,
    end_offset: i64,
    base_offset: i64,
    leader_epoch: i32,
}

/// One partition's replica on a broker.
struct Replica {
    part: Partition,
    dir: std::path::PathBuf,
    pending: Vec<Pending>,
    /// Replicate answers held until what they acknowledge is on disk (`--fsync always`):
    /// (leader host, answer, end that must be durable, the log's cut generation when applied;
    /// dropped if the log is cut meanwhile, as the broker does).
    unsynced_acks: Vec<(usize, Msg, i64, u64)>,
    /// An fdatasync is in flight.
    flushing: bool,
    refused: HashSet<(i64, i16)>,
    last_leader_epoch: i32,
    /// The partition's change counter when last checked: unchanged, nothing to re-check.
    checked_version: Option<u64>,
    /// An ISR change asked of the coordinator and not answered: (call number, sent at).
    alter_call: Option<(u64, u64)>,
    /// Produce requests read and not appended yet: those that arrive within a tick or two are
    /// appended together, as one read from a connection hands the broker several
    /// (`Partition::append_group`). Lost with the process.
    inbox: Vec<Inbound>,
}

/// A produce request a broker has read: (producer, batch, header, the leader epoch it carries).
type Inbound = (usize, Bytes, BatchHeader, i32);

struct BrokerHost {
    /// Its replicas, by partition index.
    replicas: Vec<Replica>,
    /// Its disk: loses what was not synced when the broker loses power.
    disk: Arc<MemStorage>,
    paused_until: u64,
    /// The heartbeat awaiting an answer (one at a time, as the broker's heartbeat loop makes
    /// it, each with a timeout): (call number, sent at).
    heartbeat_call: Option<(u64, u64)>,
}

struct PendingInit {
    /// Who to answer (none for fences resumed after a coordinator restart).
    prod: Option<usize>,
    /// The markers commit (an EndTxn that commits) or abort (an init's fence, an abort).
    commit: bool,
    /// An EndTxn's markers (answered with EndTxnResp), not an init's fence.
    end: bool,
    /// The epoch the EndTxn was sent with (what its answer names).
    asked_epoch: i16,
    producer_id: i64,
    epoch: i16,
    targets: Vec<(FenceTarget, u64)>,
}

/// A read_committed consumer's position in one partition, read from offset 0.
struct Consumer {
    position: i64,
    leader: (i32, i32),
    sent: Option<u64>,
}

/// Knobs of one run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Ticks with faults.
    pub fault_ticks: u64,
    /// Ticks after the faults for the cluster to converge.
    pub settle_ticks: u64,
    /// Producer instances (pairs share a transactional id).
    pub producers: usize,
    /// Partitions of the topic (every producer writes to any of them, transactions span them).
    pub partitions: i32,
    /// Which check is switched off.
    pub mutation: Mutation,
    /// Keep a readable trace.
    pub verbose: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fault_ticks: 3_000,
            settle_ticks: 3_000,
            producers: 4,
            partitions: 2,
            mutation: Mutation::None,
            verbose: false,
        }
    }
}

struct Sim {
    cfg: Config,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: HashMap<usize, Event>,
    next_event: usize,
    table: ProducerTable,
    /// The coordinator's durable journal: every entry a decision returned, in order.
    journal: Vec<Entry>,
    owner: HashMap<i64, String>,
    pending_inits: BTreeMap<String, PendingInit>,
    finished_grant: HashMap<String, i16>,
    brokers: BTreeMap<i32, BrokerHost>,
    producers: Vec<Producer>,
    /// The coordinator's cluster metadata: leases, leaderships, ISRs, incarnations.
    cluster: Cluster,
    /// Each process's clock: (sim time it started at, how far it jumped ahead since). A
    /// restart starts the clock again from 0, as the servers' monotonic clocks do.
    clocks: BTreeMap<usize, (u64, u64)>,
    /// Calls made (numbers the answers are matched by).
    calls: u64,
    cut: HashSet<(usize, usize)>,
    /// Restarts per host (absent: 0).
    incarnations: BTreeMap<usize, u64>,
    cut_until: u64,
    /// Zombie batches appended: (partition, base offset, what).
    zombie_appends: HashSet<(i32, i64, Seen)>,
    /// What is committed at each (partition, offset).
    committed: BTreeMap<(i32, i64), Seen>,
    acked: Vec<(BatchId, i64)>,
    /// (producer id, epoch) of every transaction the coordinator decided to commit.
    txn_committed: HashSet<(i64, i16)>,
    /// The consumer's position in each partition.
    consumers: Vec<Consumer>,
    consumer_paused_until: u64,
    /// The coordinator is paused (a long GC pause) until then: requests queue up and are read
    /// in some order afterwards; its timers do not run.
    coord_paused_until: u64,
    out: Outcome,
}

fn cluster_config() -> ClusterConfig {
    ClusterConfig { broker_lease_ms: LEASE_TICKS, ..ClusterConfig::default() }
}

/// Open (or reopen, after a crash) one replica's log on a broker's disk.
fn open_replica(
    disk: &Arc<MemStorage>,
    dir: &std::path::Path,
    partition: i32,
    broker_id: i32,
    mutation: Mutation,
) -> Result<Partition, broker::log::LogError> {
    let fencing = mutation != Mutation::NoProducerFencing;
    let part = Partition::open_with(disk.clone(), dir, LOG, TOPIC, partition, broker_id, fencing)?;
    part.set_sync_before_commit(mutation != Mutation::UnsyncedCommits);
    Ok(part)
}

/// Run one seed.
pub fn run(seed: u64, cfg: Config) -> Outcome {
    let mut brokers = BTreeMap::new();
    for id in BROKERS {
        let disk = Arc::new(MemStorage::new());
        let mut replicas = Vec::new();
        for partition in 0..cfg.partitions {
            let dir = std::path::PathBuf::from(format!("/sim/b{id}/{TOPIC}-{partition}"));
            match open_replica(&disk, &dir, partition, id, cfg.mutation) {
                Ok(part) => replicas.push(Replica {
                    part,
                    dir,
                    pending: Vec::new(),
                    unsynced_acks: Vec::new(),
                    flushing: false,
                    refused: HashSet::new(),
                    last_leader_epoch: -1,
                    checked_version: None,
                    alter_call: None,
                    inbox: Vec::new(),
                }),
                Err(e) => panic!("a new partition on an empty disk opens: {e}"),
            }
        }
        brokers.insert(id, BrokerHost { replicas, disk, paused_until: 0, heartbeat_call: None });
    }
    let producers = (0..cfg.producers)
        .map(|i| Producer {
            tid: format!("tid-{}", i / 2),
            transactional: i / 2 == 1,
            txn_acked: 0,
            txn_size: 1,
            ending: None,
            ids: None,
            init_sent: None,
            next_seq: vec![0; cfg.partitions as usize],
            inflight: None,
            leader: vec![(-1, -1); cfg.partitions as usize],
            paused_until: 0,
            dead_until: 0,
        })
        .collect();
    let mut sim = Sim {
        rng: Rng(seed ^ 0x5eed_f00d),
        cfg,
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        next_event: 0,
        table: ProducerTable::new(TableConfig::default()),
        journal: Vec::new(),
        owner: HashMap::new(),
        pending_inits: BTreeMap::new(),
        finished_grant: HashMap::new(),
        brokers,
        producers,
        cluster: Cluster::new(cluster_config()),
        clocks: BTreeMap::new(),
        calls: 0,
        cut: HashSet::new(),
        incarnations: BTreeMap::new(),
        cut_until: 0,
        zombie_appends: HashSet::new(),
        committed: BTreeMap::new(),
        acked: Vec::new(),
        txn_committed: HashSet::new(),
        consumers: Vec::new(),
        consumer_paused_until: 0,
        coord_paused_until: 0,
        out: Outcome::default(),
    };
    sim.consumers = (0..sim.cfg.partitions).map(|_| Consumer { position: 0, leader: (-1, -1), sent: None }).collect();
    // The brokers register, then the topic is created: three replicas, the ISR all three.
    for id in BROKERS {
        sim.cluster.handle_heartbeat(0, id, &format!("b{id}"), &[]);
    }
    match sim.cluster.handle_create_topic(0, TOPIC, sim.cfg.partitions, 3) {
        Ok(entry) => sim.journal.push(entry),
        Err(status) => sim.violate(format!("the topic cannot be created: {status}")),
    }
    sim.out.elections += sim.cfg.partitions as u64;
    sim.schedule(1, Event::ControllerTick);
    for id in BROKERS {
        sim.schedule(1, Event::BrokerTick(id));
        sim.schedule(1, Event::Heartbeat(id));
        sim.schedule(2, Event::FlushStart(id));
    }
    for p in 0..sim.producers.len() {
        sim.schedule(1 + p as u64, Event::ProducerTick(p));
    }
    sim.schedule(7, Event::ConsumerTick);
    let end = sim.cfg.fault_ticks + sim.cfg.settle_ticks;
    while let Some(Reverse((at, _, id))) = sim.queue.pop() {
        if at > end || sim.out.violation.is_some() {
            break;
        }
        sim.now = at;
        let ev = sim.events.remove(&id).expect("scheduled event");
        sim.out.steps += 1;
        sim.step(ev);
    }
    if sim.out.violation.is_none() {
        sim.finish();
    }
    sim.out
}

impl Sim {
    fn faulty(&self) -> bool {
        self.now < self.cfg.fault_ticks
    }

    fn fault(&mut self, kind: &'static str) {
        *self.out.faults.entry(kind).or_default() += 1;
    }

    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.verbose {
            let l = line();
            let _ = writeln!(self.out.trace, "[{:>6}] {l}", self.now);
        }
    }

    fn violate(&mut self, what: String) {
        self.trace(|| format!("VIOLATION {what}"));
        if self.out.violation.is_none() {
            self.out.violation = Some(format!("tick {}: {what}", self.now));
        }
    }

    fn schedule(&mut self, delay: u64, ev: Event) {
        let id = self.next_event;
        self.next_event += 1;
        self.seq += 1;
        self.events.insert(id, ev);
        self.queue.push(Reverse((self.now + delay, self.seq, id)));
    }

    /// The network: delay (which reorders), loss, duplication, partitions.
    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        let faulty = self.faulty();
        if faulty && (self.cut.contains(&(from, to)) || self.cut.contains(&(to, from))) {
            self.fault("dropped by partition");
            return;
        }
        if faulty && self.rng.chance(30) {
            self.fault("message lost");
            return;
        }
        let delay = if faulty { 1 + self.rng.below(40) } else { 1 + self.rng.below(3) };
        let incarnation = self.incarnations.get(&to).copied().unwrap_or(0);
        if faulty && self.rng.chance(20) {
            self.fault("message duplicated");
            let again = 1 + self.rng.below(80);
            self.schedule(again, Event::Deliver { to, from, incarnation, msg: msg.clone() });
        }
        self.schedule(delay, Event::Deliver { to, from, incarnation, msg });
    }

    /// A process's clock (what its `now_ms` reads).
    fn clock(&self, host: usize) -> u64 {
        let (started, jumped) = self.clocks.get(&host).copied().unwrap_or((0, 0));
        self.now - started + jumped
    }

    /// A partition's leader and leader epoch as the coordinator records them (what a
    /// Metadata request answers); the leader is -1 while there is none.
    fn leader(&self, partition: i32) -> (i32, i32) {
        self.cluster.leader_of(TOPIC, partition).map_or((-1, -1), |(leader, epoch, _)| (leader, epoch))
    }

    fn rep(&self, id: i32, partition: i32) -> &Replica {
        &self.brokers[&id].replicas[partition as usize]
    }

    fn rep_mut(&mut self, id: i32, partition: i32) -> &mut Replica {
        &mut self.brokers.get_mut(&id).expect("broker").replicas[partition as usize]
    }

    fn next_call(&mut self) -> u64 {
        self.calls += 1;
        self.calls
    }

    /// Journal the coordinator's cluster decisions (leaderships, ISRs, incarnations).
    fn journal_cluster(&mut self, entries: Vec<Entry>, why: &'static str) {
        for e in &entries {
            if let Entry::LeaderChanged { partition, leader_id, leader_epoch, isr, .. } = e {
                self.out.elections += 1;
                *self.out.decisions.entry(why).or_default() += 1;
                let (p, l, le, isr) = (*partition, *leader_id, *leader_epoch, isr.clone());
                self.trace(|| format!("coordinator: {why}: broker {l} leads partition {p} at epoch {le}, ISR {isr:?}"));
            }
        }
        self.journal.extend(entries);
    }

    /// Send a transaction marker to whoever leads now (if anyone: else it is resent later).
    fn send_marker(&mut self, tid: &str, target: &FenceTarget, commit: bool) {
        let (leader, leader_epoch) = self.leader(target.partition);
        if leader > 0 {
            let m = Msg::Marker { tid: tid.to_string(), target: target.clone(), leader_epoch, commit };
            self.send(COORD, leader as usize, m);
        }
    }

    fn step(&mut self, ev: Event) {
        match ev {
            Event::ControllerTick => self.controller_tick(),
            Event::BrokerTick(id) => self.broker_tick(id),
            Event::FlushStart(id) => self.flush_start(id),
            Event::FlushDone { id, partition, incarnation, end, generation, file } => {
                if self.incarnations.get(&(id as usize)).copied().unwrap_or(0) != incarnation {
                    return; // the broker crashed meanwhile: nobody waits for this sync
                }
                let paused_until = self.brokers[&id].paused_until;
                if paused_until > self.now {
                    let wait = paused_until - self.now;
                    self.schedule(wait, Event::FlushDone { id, partition, incarnation, end, generation, file });
                    return;
                }
                self.flush_done(id, partition, end, generation, file);
            }
            Event::ProduceGroup { id, partition, incarnation } => {
                if self.incarnations.get(&(id as usize)).copied().unwrap_or(0) != incarnation {
                    return; // the broker crashed meanwhile, and its inbox with it
                }
                let paused_until = self.brokers[&id].paused_until;
                if paused_until > self.now {
                    self.schedule(paused_until - self.now, Event::ProduceGroup { id, partition, incarnation });
                    return;
                }
                let inbox = std::mem::take(&mut self.rep_mut(id, partition).inbox);
                self.broker_produce_group(id, partition, inbox);
            }
            Event::ProducerTick(p) => self.producer_tick(p),
            Event::ConsumerTick => self.consumer_tick(),
            Event::Heartbeat(id) => self.heartbeat(id),
            Event::Deliver { to, from, incarnation, msg } => {
                if self.incarnations.get(&to).copied().unwrap_or(0) != incarnation {
                    self.fault("message lost with a crashed process");
                    return;
                }
                if let Some(b) = self.brokers.get(&(to as i32)) {
                    if b.paused_until > self.now {
                        // What piled up while paused is read in some order after the pause:
                        // a resumed leader may act before it reads that it was deposed.
                        let wait = b.paused_until - self.now + self.rng.below(40);
                        self.schedule(wait, Event::Deliver { to, from, incarnation, msg });
                        return;
                    }
                }
                if to == COORD && self.coord_paused_until > self.now {
                    let wait = self.coord_paused_until - self.now + self.rng.below(40);
                    self.schedule(wait, Event::Deliver { to, from, incarnation, msg });
                    return;
                }
                if to == CONSUMER && self.consumer_paused_until > self.now {
                    let wait = self.consumer_paused_until - self.now;
                    self.schedule(wait, Event::Deliver { to, from, incarnation, msg });
                    return;
                }
                if to >= 10 && self.producers[to - 10].paused_until > self.now {
                    let wait = self.producers[to - 10].paused_until - self.now;
                    self.schedule(wait, Event::Deliver { to, from, incarnation, msg });
                    return;
                }
                self.deliver(to, from, msg);
            }
        }
    }

    /// The coordinator's timers and the fault injector.
    fn controller_tick(&mut self) {
        if self.faulty() {
            if self.rng.chance(5) {
                // The classic stale leader: the leader stalls (a long GC pause), often past its
                // lease, and the coordinator moves the leadership while it sleeps.
                let partition = self.rng.below(self.cfg.partitions as u64) as i32;
                let (id, _) = self.leader(partition);
                if id > 0 {
                    let until = self.now + 100 + self.rng.below(800);
                    self.brokers.get_mut(&id).expect("broker").paused_until = until;
                    self.fault("leader paused");
                    self.trace(|| format!("leader {id} paused until {until}"));
                }
            }
            if self.rng.chance(8) && self.coord_paused_until <= self.now {
                // An operator asks for an election (`admin elect`): a new leader epoch.
                let now = self.clock(COORD);
                let partition = self.rng.below(self.cfg.partitions as u64) as i32;
                if let Ok(entry) = self.cluster.handle_elect_leader(now, TOPIC, partition) {
                    self.fault("leader election asked");
                    self.journal_cluster(vec![entry], "elected (asked)");
                }
            }
            if self.now >= self.cut_until && !self.cut.is_empty() {
                self.cut.clear();
            }
            if self.cut.is_empty() && self.rng.chance(8) {
                let mut hosts: Vec<usize> = vec![COORD, 1, 2, 3];
                hosts.extend((0..self.producers.len()).map(producer_host));
                let a = hosts[self.rng.below(hosts.len() as u64) as usize];
                let b = hosts[self.rng.below(hosts.len() as u64) as usize];
                if a != b {
                    self.cut.insert((a, b));
                    self.cut_until = self.now + 50 + self.rng.below(300);
                    self.fault("network partition");
                    self.trace(|| format!("network: hosts {a} and {b} cut off"));
                }
            }
            if self.rng.chance(6) {
                let id = BROKERS[self.rng.below(3) as usize];
                let until = self.now + 50 + self.rng.below(400);
                self.brokers.get_mut(&id).expect("broker").paused_until = until;
                self.fault("broker paused");
                self.trace(|| format!("broker {id} paused until {until}"));
            }
            if self.rng.chance(4) {
                let id = BROKERS[self.rng.below(3) as usize];
                self.restart_broker(id);
            }
            if self.rng.chance(3) {
                self.restart_coordinator();
            }
            if self.rng.chance(8) {
                let until = self.now + 100 + self.rng.below(800);
                self.coord_paused_until = self.coord_paused_until.max(until);
                self.fault("coordinator paused");
                self.trace(|| format!("coordinator paused until {until}"));
            }
            if self.rng.chance(5) {
                // A clock jumps ahead (a VM resumed, a suspended host woke): on the coordinator
                // every lease looks expired at once; on a leader every follower looks lagging.
                let host = [COORD, 1, 2, 3][self.rng.below(4) as usize];
                let jump = 50 + self.rng.below(600);
                self.clocks.entry(host).or_default().1 += jump;
                self.fault("clock jumped");
                self.trace(|| format!("host {host}: clock jumps {jump} ahead"));
            }
            if self.rng.chance(10) {
                let p = self.rng.below(self.producers.len() as u64) as usize;
                let until = self.now + 100 + self.rng.below(600);
                self.producers[p].paused_until = until;
                self.fault("producer paused");
                self.trace(|| format!("producer {p} paused until {until}"));
            }
        } else {
            self.cut.clear();
        }
        self.schedule(10, Event::ControllerTick);
        if self.coord_paused_until > self.now {
            return;
        }
        // The lease check, as the coordinator's tick loop runs it: only once a lease has passed
        // since it started, so that the brokers have heartbeated meanwhile.
        let now = self.clock(COORD);
        if now >= LEASE_TICKS {
            self.coord_timeouts();
            let entries = self.cluster.handle_tick(now);
            self.journal_cluster(entries, "elected (lease expired)");
        }
        // Markers not confirmed are re-sent to whoever leads now.
        let now = self.now;
        let mut resend = Vec::new();
        for (tid, pi) in self.pending_inits.iter_mut() {
            for (target, sent) in pi.targets.iter_mut() {
                if now.saturating_sub(*sent) > 100 {
                    *sent = now;
                    resend.push((tid.clone(), target.clone(), pi.commit));
                }
            }
        }
        for (tid, target, commit) in resend {
            self.send_marker(&tid, &target, commit);
        }
    }

    /// A broker process crashes and restarts: everything in memory is gone (pending
    /// acknowledgements, verifications, leadership); the partition reopens from its log.
    fn restart_broker(&mut self, id: i32) {
        let down = 20 + self.rng.below(100);
        // Every other restart of a broker follows a clean stop (logs synced, active segments
        // indexed, producer state snapshotted); the others are a power loss: the disk keeps
        // what was synced and a torn prefix of the rest.
        let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
        let disk = self.brokers[&id].disk.clone();
        if incarnation % 2 == 1 {
            for r in &self.brokers[&id].replicas {
                if let Err(e) = r.part.checkpoint() {
                    return self.violate(format!("broker {id} cannot checkpoint its log: {e}"));
                }
            }
        } else {
            let unsynced = disk.unsynced_bytes();
            let rng = &mut self.rng;
            disk.crash(|_, bytes| rng.below(bytes as u64 + 1) as usize);
            self.fault("power loss");
            if unsynced > 0 {
                self.fault("power loss with unsynced writes");
            }
            let lost = unsynced - disk.unsynced_bytes();
            self.trace(|| format!("broker {id} loses power with {unsynced} bytes unsynced ({lost} torn off)"));
        }
        let mutation = self.cfg.mutation;
        let b = self.brokers.get_mut(&id).expect("broker");
        for (partition, r) in b.replicas.iter_mut().enumerate() {
            match open_replica(&disk, &r.dir, partition as i32, id, mutation) {
                Ok(part) => r.part = part,
                Err(e) => return self.violate(format!("broker {id} cannot reopen its log: {e}")),
            }
            r.unsynced_acks.clear();
            r.flushing = false;
            r.pending.clear();
            r.refused.clear();
            r.checked_version = None;
            r.alter_call = None;
            r.inbox.clear();
            // It knows no leadership until its first heartbeat is answered.
            r.last_leader_epoch = -1;
        }
        b.heartbeat_call = None;
        b.paused_until = self.now + down;
        *self.incarnations.entry(id as usize).or_default() += 1;
        // A new process: its clock starts again from 0.
        self.clocks.insert(id as usize, (self.now + down, 0));
        self.fault("broker crashed and restarted");
        let back = self.now + down;
        self.trace(|| format!("broker {id} crashed; back at {back}"));
        // Its next heartbeat carries a new incarnation: the coordinator takes it out of the
        // ISRs and moves its leaderships under a new leader epoch.
    }

    /// The coordinator crashes and restarts: the table is rebuilt from its journal, and the
    /// fences it had not confirmed are written again (nobody is waiting for their answer).
    fn restart_coordinator(&mut self) {
        let mut table = ProducerTable::new(TableConfig::default());
        let mut cluster = Cluster::new(cluster_config());
        for entry in &self.journal {
            table.apply(entry);
            cluster.apply(entry);
        }
        // A new process: its clock starts again from 0, and no broker holds a lease yet.
        self.clocks.insert(COORD, (self.now, 0));
        self.coord_paused_until = 0;
        table.restart_clocks(0);
        self.table = table;
        self.cluster = cluster;
        self.pending_inits.clear();
        *self.incarnations.entry(COORD).or_default() += 1;
        self.fault("coordinator crashed and restarted");
        let now = self.now;
        for (tid, epoch, commit, targets) in self.table.pending_fences() {
            let producer_id = self.table.current(&tid).map_or(-1, |(pid, _)| pid);
            for t in &targets {
                self.send_marker(&tid, t, commit);
            }
            let targets = targets.into_iter().map(|t| (t, now)).collect();
            let pi = PendingInit { prod: None, commit, end: commit, asked_epoch: -1, producer_id, epoch, targets };
            self.pending_inits.insert(tid, pi);
        }
        let n = self.pending_inits.len();
        let entries = self.journal.len();
        self.trace(|| format!("coordinator crashed and restarted from {entries} journal entries, {n} fences resumed"));
    }

    fn consumer_tick(&mut self) {
        self.schedule(10, Event::ConsumerTick);
        if self.consumer_paused_until > self.now {
            return;
        }
        if self.faulty() && self.rng.chance(5) {
            self.consumer_paused_until = self.now + 100 + self.rng.below(400);
            self.fault("consumer paused");
            return;
        }
        for partition in 0..self.cfg.partitions {
            let now = self.now;
            let leader = self.leader(partition);
            let c = &mut self.consumers[partition as usize];
            if c.sent.is_some_and(|t| now.saturating_sub(t) < 100) {
                continue;
            }
            if c.leader.0 < 0 {
                c.leader = leader;
            }
            let (leader, leader_epoch) = c.leader;
            if leader < 0 {
                continue; // no leader for now: ask the metadata again next time
            }
            c.sent = Some(now);
            let offset = c.position;
            self.send(CONSUMER, leader as usize, Msg::Fetch { partition, offset, leader_epoch });
        }
    }

    /// What the consumer read must be committed: every batch matches what the replicas
    /// committed at that offset, and none is a zombie write.
    fn consumer_answer(
        &mut self,
        partition: i32,
        offset: i64,
        records: Option<Bytes>,
        aborted: Vec<protocol::AbortedTxn>,
    ) {
        let p = partition as usize;
        if offset != self.consumers[p].position {
            return;
        }
        self.consumers[p].sent = None;
        let Some(records) = records else {
            self.consumers[p].leader = self.leader(partition);
            return;
        };
        // read_committed as a Kafka consumer does it: a producer id is skipped from the first
        // offset of one of its aborted transactions to its abort marker.
        let mut aborted = aborted;
        aborted.sort_by_key(|a| a.first_offset);
        let mut aborted = aborted.into_iter().peekable();
        let mut skipped: HashSet<i64> = HashSet::new();
        for item in protocol::batch::BatchIter::new(records) {
            let (h, bytes) = match item {
                Ok(hb) => hb,
                Err(e) => {
                    return self.violate(format!("consumer got an unreadable batch at {partition}/{offset}: {e}"))
                }
            };
            while let Some(a) = aborted.next_if(|a| a.first_offset <= h.base_offset) {
                skipped.insert(a.producer_id);
            }
            if h.is_control() {
                if protocol::batch::marker_kind(&bytes) == Some(MarkerKind::Abort) {
                    skipped.remove(&h.producer_id);
                }
            } else if h.is_transactional() {
                if skipped.contains(&h.producer_id) {
                    if self.txn_committed.contains(&(h.producer_id, h.producer_epoch)) {
                        let (pid, e) = (h.producer_id, h.producer_epoch);
                        return self.violate(format!(
                            "read_committed skipped offset {partition}/{} of producer id {pid} epoch {e}, a committed \
                             transaction",
                            h.base_offset
                        ));
                    }
                    self.out.aborted_skipped += 1;
                } else if !self.txn_committed.contains(&(h.producer_id, h.producer_epoch)) {
                    // Invariant 5: read_committed returns only committed transactions.
                    let (pid, e) = (h.producer_id, h.producer_epoch);
                    return self.violate(format!(
                        "read_committed returned offset {partition}/{} of producer id {pid} epoch {e}, a transaction \
                         not committed",
                        h.base_offset
                    ));
                }
            }
            if h.base_offset != self.consumers[p].position {
                let want = self.consumers[p].position;
                return self
                    .violate(format!("consumer asked for {partition}/{want} and got a batch at {}", h.base_offset));
            }
            let seen = (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch);
            if !h.is_control() && self.zombie_appends.contains(&(partition, h.base_offset, seen)) {
                return self.violate(format!(
                    "consumer read a zombie write at offset {partition}/{}: {seen:?}",
                    h.base_offset
                ));
            }
            match self.committed.get(&(partition, h.base_offset)) {
                Some(c) if *c != seen => {
                    let c = *c;
                    return self.violate(format!(
                        "consumer read {seen:?} at offset {partition}/{}, where {c:?} is committed",
                        h.base_offset
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed.insert((partition, h.base_offset), seen);
                }
            }
            self.consumers[p].position = h.base_offset + i64::from(h.last_offset_delta) + 1;
            self.out.consumed += 1;
        }
    }

    fn producer_tick(&mut self, p: usize) {
        let next = 5 + self.rng.below(10);
        self.schedule(next, Event::ProducerTick(p));
        let writing = self.now < self.cfg.fault_ticks + self.cfg.settle_ticks / 3;
        let pr = &self.producers[p];
        if pr.paused_until > self.now || pr.dead_until > self.now {
            return;
        }
        let Some((producer_id, epoch)) = pr.ids else {
            let waiting = pr.init_sent.is_some_and(|t| self.now.saturating_sub(t) < 200);
            // A transactional producer inits after the writing too: its init aborts a
            // transaction a previous instance left open, which would hold the LSO back.
            if !waiting && (writing || pr.transactional) {
                self.producers[p].init_sent = Some(self.now);
                self.trace(|| format!("producer {p}: init"));
                self.send(producer_host(p), COORD, Msg::InitReq { prod: p });
            }
            return;
        };
        if self.faulty() && self.rng.chance(3) {
            // A restart: a second instance takes over the transactional id, fencing this one's
            // sibling (and this one's old epoch).
            self.fault("producer restarted");
            let pr = &mut self.producers[p];
            pr.ids = None;
            pr.inflight = None;
            pr.init_sent = None;
            pr.ending = None;
            pr.txn_acked = 0;
            return;
        }
        let pr = &mut self.producers[p];
        if pr.transactional {
            // End the transaction once it holds its batches (or the writing is over).
            let due = pr.inflight.is_none() && (pr.txn_acked >= pr.txn_size || (!writing && pr.txn_acked > 0));
            let resend_end = pr.ending.is_some_and(|(_, sent)| self.now.saturating_sub(sent) > 200);
            if (due && pr.ending.is_none()) || resend_end {
                let commit = match pr.ending {
                    Some((commit, _)) => commit,
                    None => !self.rng.chance(300),
                };
                let pr = &mut self.producers[p];
                pr.ending = Some((commit, self.now));
                self.trace(|| format!("producer {p}: EndTxn commit={commit} at epoch {epoch}"));
                self.send(producer_host(p), COORD, Msg::EndTxn { prod: p, producer_id, epoch, commit });
                return;
            }
            if pr.ending.is_some() {
                return;
            }
        }
        let resend = match &self.producers[p].inflight {
            Some((.., sent)) => self.now.saturating_sub(*sent) > 120,
            None => false,
        };
        if self.producers[p].inflight.is_none() && writing {
            // Each batch goes to any partition: a transaction may span them.
            let partition = self.rng.below(self.cfg.partitions as u64) as i32;
            let pr = &mut self.producers[p];
            let seq = pr.next_seq[partition as usize];
            let stamp = ProducerStamp { producer_id, producer_epoch: epoch, base_sequence: seq };
            let value = Bytes::from(format!("{p}-{producer_id}-{epoch}-{partition}-{seq}"));
            let batch = build_batch(stamp, pr.transactional, self.now as i64, &[value]);
            let header = BatchHeader::parse_prefix(&batch).expect("a batch we built parses");
            pr.inflight = Some((partition, batch, header, self.now));
        } else if !resend {
            return;
        }
        let Some((partition, ..)) = self.producers[p].inflight else { return };
        let leader = self.leader(partition);
        let pr = &mut self.producers[p];
        let Some((_, batch, header, sent)) = pr.inflight.as_mut() else { return };
        *sent = self.now;
        let known = &mut pr.leader[partition as usize];
        if known.0 < 0 {
            *known = leader;
        }
        let (leader, leader_epoch) = *known;
        if leader < 0 {
            return;
        }
        let msg = Msg::Produce { prod: p, partition, batch: batch.clone(), header: *header, leader_epoch };
        self.send(producer_host(p), leader as usize, msg);
    }

    /// The flusher: start an fdatasync of each log's unsynced writes, if any (one at a time
    /// per log).
    fn flush_start(&mut self, id: i32) {
        self.schedule(10, Event::FlushStart(id));
        if self.brokers[&id].paused_until > self.now {
            return;
        }
        for partition in 0..self.cfg.partitions {
            let r = self.rep(id, partition);
            if r.flushing {
                continue;
            }
            let Some((end, file, generation)) = r.part.sync_target() else { continue };
            let delay = if self.faulty() && self.rng.chance(30) {
                self.fault("slow disk");
                50 + self.rng.below(250)
            } else {
                1 + self.rng.below(10)
            };
            let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
            self.rep_mut(id, partition).flushing = true;
            self.schedule(delay, Event::FlushDone { id, partition, incarnation, end, generation, file });
        }
    }

    /// The fdatasync finished: what it covered is durable; held answers that waited for it go.
    fn flush_done(&mut self, id: i32, partition: i32, end: i64, generation: u64, file: Arc<dyn StoredFile>) {
        let r = self.rep_mut(id, partition);
        r.flushing = false;
        if let Err(e) = file.sync_data() {
            return self.violate(format!("broker {id}: the simulated disk failed a sync: {e}"));
        }
        r.part.mark_durable(end, generation);
        let (mut ready, mut voided) = (Vec::new(), 0);
        let part = &r.part;
        r.unsynced_acks.retain(|(to, msg, end, generation)| match part.durable_at(*end, *generation) {
            Some(true) => {
                ready.push((*to, msg.clone()));
                false
            }
            Some(false) => true,
            None => {
                voided += 1; // cut meanwhile: not sent, the leader resends
                false
            }
        });
        if voided > 0 {
            *self.out.decisions.entry("held Replicate answers voided by a cut").or_default() += voided;
            self.trace(|| format!("broker {id}: {voided} held answers of partition {partition} voided by a cut"));
        }
        for (to, msg) in ready {
            self.send(id as usize, to, msg);
        }
        self.after_broker_step(id);
    }

    fn broker_tick(&mut self, id: i32) {
        self.schedule(5, Event::BrokerTick(id));
        if self.brokers[&id].paused_until > self.now {
            return;
        }
        for partition in 0..self.cfg.partitions {
            let l = self.rep(id, partition).part.leadership();
            if !l.is_leader {
                continue;
            }
            for f in BROKERS.into_iter().filter(|f| *f != id) {
                // A few requests back to back, unanswered, as the broker's pipelined loop sends
                // them (this over-approximates it: a new round every tick, no in-flight limit):
                // the first from the bookkeeping, each other one where the one before ended,
                // while the one before carried batches.
                let mut from = None;
                for _ in 0..REPLICATE_PIPELINE {
                    let now = self.clock(id as usize);
                    let work = self.rep(id, partition).part.replication_work(f, l.leader_epoch, (from, 16 * 1024), now);
                    match work {
                        Ok(Some(w)) => {
                            let more = !w.records.is_empty();
                            from = Some(w.end_offset);
                            let req = ReplicateRequest {
                                topic: TOPIC.into(),
                                partition,
                                leader_epoch: l.leader_epoch,
                                leader_id: id,
                                from_offset: w.from_offset,
                                prev_epoch: w.prev_epoch,
                                high_watermark: w.high_watermark,
                                log_start_offset: w.log_start_offset,
                                records: w.records,
                            };
                            self.send(id as usize, f as usize, Msg::Replicate { req, sent: w.sent });
                            if !more {
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            self.violate(format!("broker {id} cannot read its own log: {e}"));
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The broker's heartbeat loop: heartbeat, then ask for the ISR its leaderships should
    /// have; calls wait for their answer, each given up on after a timeout.
    fn heartbeat(&mut self, id: i32) {
        self.schedule(HEARTBEAT_TICKS, Event::Heartbeat(id));
        let b = &self.brokers[&id];
        if b.paused_until > self.now {
            return;
        }
        let waiting = |call: Option<(u64, u64)>| call.is_some_and(|(_, sent)| self.now - sent < CALL_TIMEOUT_TICKS);
        if waiting(b.heartbeat_call) || b.replicas.iter().any(|r| waiting(r.alter_call)) {
            return;
        }
        if b.heartbeat_call.is_some() {
            // The last heartbeat was never answered: the ISR round runs anyway.
            self.brokers.get_mut(&id).expect("broker").heartbeat_call = None;
            self.maintain_isr(id);
            if self.brokers[&id].replicas.iter().any(|r| r.alter_call.is_some()) {
                return;
            }
        }
        let reports = (0..self.cfg.partitions)
            .map(|partition| {
                let (log_end_offset, high_watermark) = self.rep(id, partition).part.progress();
                ReplicaReport { topic: TOPIC.into(), partition, log_end_offset, high_watermark }
            })
            .collect();
        let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0) as i64;
        let call = self.next_call();
        self.brokers.get_mut(&id).expect("broker").heartbeat_call = Some((call, self.now));
        self.send(id as usize, COORD, Msg::Heartbeat { broker: id, call, incarnation, reports });
    }

    /// A leader whose followers fell behind (or caught up) asks the coordinator for the ISR it
    /// wants, and counts the proposed members until the answer.
    fn maintain_isr(&mut self, id: i32) {
        let now = self.clock(id as usize);
        let at = self.now;
        for partition in 0..self.cfg.partitions {
            let r = self.rep_mut(id, partition);
            match r.alter_call {
                Some((_, sent)) if at - sent < CALL_TIMEOUT_TICKS => continue,
                // Given up on: its answer, if it ever comes, is dropped.
                Some(_) => r.alter_call = None,
                None => {}
            }
            let Some((leader_epoch, partition_epoch, isr)) = r.part.propose_isr(now, REPLICA_LAG_TICKS) else {
                continue;
            };
            let call = self.next_call();
            self.rep_mut(id, partition).alter_call = Some((call, self.now));
            self.trace(|| {
                format!(
                    "broker {id}: asks for ISR {isr:?} of partition {partition} at leader epoch {leader_epoch}, \
                     partition epoch {partition_epoch}"
                )
            });
            let req = AlterPartitionRequest {
                broker_id: id,
                topic: TOPIC.into(),
                partition,
                leader_epoch,
                partition_epoch,
                isr,
            };
            self.send(id as usize, COORD, Msg::AlterIsr { call, req });
        }
    }

    /// The `unversioned-isr` mutation's coordinator: the change applies whatever it was based on.
    fn alter_isr_unversioned(&mut self, req: &AlterPartitionRequest) -> (Option<Entry>, AlterPartitionResponse) {
        let mut req = req.clone();
        req.partition_epoch = self.cluster.isr_of(TOPIC, req.partition).map_or(-1, |(_, epoch)| epoch);
        self.cluster.handle_alter_partition(&req)
    }

    /// Under `unversioned-isr`, every ISR a broker is told looks newer than the one it has.
    fn unversioned(&mut self, partition_epoch: i32) -> i32 {
        if self.cfg.mutation == Mutation::UnversionedIsr {
            1_000_000 + self.next_call() as i32
        } else {
            partition_epoch
        }
    }

    fn deliver(&mut self, to: usize, from: usize, msg: Msg) {
        match msg {
            Msg::InitReq { prod } => self.coord_init(prod),
            Msg::InitResp { prod, granted } => {
                let pr = &mut self.producers[prod];
                pr.init_sent = None;
                if let Some(ids) = granted {
                    if pr.ids.is_none() {
                        pr.ids = Some(ids);
                        pr.next_seq.fill(0);
                        pr.inflight = None;
                        pr.ending = None;
                        pr.txn_acked = 0;
                        pr.leader.fill((-1, -1)); // asks the metadata before its first write
                    }
                }
                self.trace(|| format!("producer {prod}: init answered {granted:?}"));
            }
            Msg::Produce { prod, partition, batch, header, leader_epoch } => {
                // Appended with whatever else arrives for the partition in the next tick or two.
                let id = to as i32;
                let inbox = &mut self.rep_mut(id, partition).inbox;
                inbox.push((prod, batch, header, leader_epoch));
                if inbox.len() == 1 {
                    let incarnation = self.incarnations.get(&to).copied().unwrap_or(0);
                    let wait = self.rng.below(PRODUCE_GROUP_WAIT_TICKS_MAX + 1);
                    self.schedule(wait, Event::ProduceGroup { id, partition, incarnation });
                }
            }
            Msg::Fetch { partition, offset, leader_epoch } => {
                let isolation = match self.cfg.mutation {
                    Mutation::ReadUncommitted => protocol::READ_UNCOMMITTED,
                    _ => protocol::READ_COMMITTED,
                };
                let fetched =
                    self.rep(to as i32, partition).part.fetch(offset, 16 * 1024, leader_epoch, isolation).ok();
                let aborted = fetched.as_ref().map(|f| f.aborted.clone()).unwrap_or_default();
                let records = fetched.map(|f| f.records);
                self.send(to, from, Msg::FetchResp { partition, offset, records, aborted });
            }
            Msg::FetchResp { partition, offset, records, aborted } => {
                self.consumer_answer(partition, offset, records, aborted)
            }
            Msg::EndTxn { prod, producer_id, epoch, commit } => self.coord_end(prod, producer_id, epoch, commit),
            Msg::EndTxnResp { prod, for_epoch, granted, retry } => {
                let pr = &mut self.producers[prod];
                if pr.ending.is_none() || pr.ids.map(|(_, e)| e) != Some(for_epoch) {
                    return; // a duplicated or late answer, or one to an earlier request
                }
                if retry {
                    return; // the end is resent on a later tick
                }
                pr.ending = None;
                pr.txn_acked = 0;
                pr.txn_size = 1 + self.rng.below(3) as u32;
                match granted {
                    // Every end bumps the epoch (KIP-890): the next transaction starts at 0.
                    Some(ids) => {
                        pr.ids = Some(ids);
                        pr.next_seq.fill(0);
                    }
                    None => pr.ids = None,
                }
                self.trace(|| format!("producer {prod}: transaction ended, continuing with {granted:?}"));
            }
            Msg::ProduceResp { prod, batch, result } => self.producer_answer(prod, batch, result),
            Msg::Verify { broker, partition, producer_id, epoch, transactional } => {
                let now = self.clock(COORD);
                let ok = match self.table.handle_register(producer_id, epoch, TOPIC, partition, transactional, now) {
                    RegisterDecision::Accept { entries, .. } => {
                        self.journal.extend(entries);
                        true
                    }
                    RegisterDecision::Refuse { .. } => false,
                };
                let resp = Msg::VerifyResp { partition, producer_id, epoch, transactional, ok };
                self.send(COORD, broker as usize, resp);
            }
            Msg::VerifyResp { partition, producer_id, epoch, transactional, ok } => {
                let r = self.rep_mut(to as i32, partition);
                if ok {
                    r.part.mark_verified(producer_id, epoch, transactional);
                } else {
                    r.refused.insert((producer_id, epoch));
                }
            }
            Msg::Marker { tid, target, leader_epoch, commit } => {
                self.broker_marker(to as i32, tid, target, leader_epoch, commit)
            }
            Msg::MarkerResp { tid, epoch, producer_id, partition, ok } => {
                self.coord_marker_done(tid, epoch, (producer_id, partition), ok)
            }
            Msg::Heartbeat { broker, call, incarnation, reports } => {
                let now = self.clock(COORD);
                let moved = self.cluster.handle_incarnation(now, broker, incarnation);
                self.journal_cluster(moved, "elected (broker restarted)");
                let (_, assignments, _) = self.cluster.handle_heartbeat(now, broker, &format!("b{broker}"), &reports);
                self.send(COORD, broker as usize, Msg::HeartbeatResp { call, assignments });
            }
            Msg::HeartbeatResp { call, assignments } => {
                let id = to as i32;
                if self.brokers[&id].heartbeat_call.map(|(c, _)| c) != Some(call) {
                    return; // an answer to a call given up on
                }
                self.brokers.get_mut(&id).expect("broker").heartbeat_call = None;
                let now = self.clock(to);
                for mut a in assignments {
                    a.partition_epoch = self.unversioned(a.partition_epoch);
                    let part = &self.rep(id, a.partition).part;
                    let change = part.learn(a.leader_id, a.leader_epoch, a.partition_epoch, &a.replicas, &a.isr, now);
                    if change.is_some() {
                        let (l, e, p) = (a.leader_id, a.leader_epoch, a.partition);
                        self.trace(|| {
                            format!("broker {id}: learned partition {p}'s leader {l} at epoch {e}, ISR {:?}", a.isr)
                        });
                    }
                }
                self.after_broker_step(id);
                self.maintain_isr(id);
            }
            Msg::AlterIsr { call, req } => {
                let (entry, resp) = if self.cfg.mutation == Mutation::UnversionedIsr {
                    self.alter_isr_unversioned(&req)
                } else {
                    self.cluster.handle_alter_partition(&req)
                };
                let decision = match resp.status.code {
                    _ if entry.is_some() => "ISR changed",
                    protocol::ErrorCode::InvalidUpdateVersion => "ISR change refused: stale partition epoch",
                    _ => "ISR change refused: other",
                };
                *self.out.decisions.entry(decision).or_default() += 1;
                if let Some(entry) = entry {
                    let (isr, pe) = (&resp.isr, resp.partition_epoch);
                    self.trace(|| {
                        format!("coordinator: ISR {isr:?} at leader epoch {}, partition epoch {pe}", req.leader_epoch)
                    });
                    self.journal.push(entry);
                }
                let (leader_epoch, partition) = (req.leader_epoch, req.partition);
                self.send(COORD, req.broker_id as usize, Msg::AlterIsrResp { call, partition, leader_epoch, resp });
            }
            Msg::AlterIsrResp { call, partition, leader_epoch, resp } => {
                let id = to as i32;
                if self.rep(id, partition).alter_call.map(|(c, _)| c) != Some(call) {
                    return;
                }
                self.rep_mut(id, partition).alter_call = None;
                let mut resp = resp;
                resp.partition_epoch = self.unversioned(resp.partition_epoch);
                self.rep(id, partition).part.on_isr_answer(leader_epoch, &resp);
                self.after_broker_step(id);
            }
            Msg::Replicate { req, sent } => {
                let id = to as i32;
                let partition = req.partition;
                let checks = self.cfg.mutation != Mutation::NoLeaderEpochChecks;
                let mut generation = 0;
                let result = match self.rep(id, partition).part.apply_replicated_at(&req, checks) {
                    Ok((leo, g)) => {
                        generation = g;
                        Some(Ok(leo))
                    }
                    Err(ReplicateError::Mismatch { hint, diverging_epoch, .. }) => Some(Err((hint, diverging_epoch))),
                    Err(_) => None,
                };
                self.after_broker_step(id);
                if let Some(result) = result {
                    let resp = Msg::ReplicateResp {
                        partition,
                        follower: id,
                        leader_epoch: req.leader_epoch,
                        from_offset: req.from_offset,
                        sent,
                        result,
                    };
                    // A follower acknowledges only what is on disk (`--fsync always`).
                    match result {
                        Ok(leo)
                            if self.cfg.mutation != Mutation::UnsyncedCommits
                                && !self.rep(id, partition).part.is_durable(leo) =>
                        {
                            self.rep_mut(id, partition).unsynced_acks.push((from, resp, leo, generation));
                        }
                        _ => self.send(to, from, resp),
                    }
                }
            }
            Msg::ReplicateResp { partition, follower, leader_epoch, from_offset, sent, result } => {
                let id = to as i32;
                let part = &self.rep(id, partition).part;
                match result {
                    Ok(leo) => part.on_replica_ack(follower, leader_epoch, leo, sent),
                    Err((hint, diverging)) => {
                        part.on_replica_mismatch(follower, leader_epoch, from_offset, hint, diverging)
                    }
                }
                self.after_broker_step(id);
            }
        }
    }

    fn coord_init(&mut self, prod: usize) {
        let tid = self.producers[prod].tid.clone();
        match self.table.handle_init(Some(&tid), TXN_TIMEOUT_TICKS as i32, None) {
            InitDecision::Grant { producer_id, epoch, fence, entries } => {
                self.journal.extend(entries);
                self.owner.insert(producer_id, tid.clone());
                self.trace(|| {
                    format!("coordinator: '{tid}' granted pid {producer_id} epoch {epoch}, {} fences", fence.len())
                });
                if fence.is_empty() {
                    self.finish_grant(&tid, Some(prod), producer_id, epoch);
                } else {
                    let now = self.now;
                    for t in &fence {
                        self.send_marker(&tid, t, false);
                    }
                    let targets = fence.into_iter().map(|t| (t, now)).collect();
                    let pi = PendingInit {
                        prod: Some(prod),
                        commit: false,
                        end: false,
                        asked_epoch: -1,
                        producer_id,
                        epoch,
                        targets,
                    };
                    self.pending_inits.insert(tid, pi);
                }
            }
            InitDecision::Refuse { .. } => {
                self.send(COORD, producer_host(prod), Msg::InitResp { prod, granted: None });
            }
        }
    }

    fn finish_grant(&mut self, tid: &str, prod: Option<usize>, producer_id: i64, epoch: i16) {
        if let Some(old) = self.finished_grant.get(tid) {
            if *old >= epoch {
                self.violate(format!("'{tid}' granted epoch {epoch} after epoch {old}"));
            }
        }
        self.finished_grant.insert(tid.to_string(), epoch);
        if let Some(prod) = prod {
            self.send(COORD, producer_host(prod), Msg::InitResp { prod, granted: Some((producer_id, epoch)) });
        }
    }

    /// EndTxn at the coordinator: commit or abort, write the markers, then answer the new epoch.
    fn coord_end(&mut self, prod: usize, producer_id: i64, epoch: i16, commit: bool) {
        let tid = self.producers[prod].tid.clone();
        match self.table.handle_end_txn(&tid, producer_id, epoch, commit) {
            EndDecision::Markers { producer_id: pid, epoch: new_epoch, commit, entries, markers } => {
                self.journal.extend(entries);
                if commit {
                    // Decided (journaled): the transaction of this producer id and epoch commits.
                    self.txn_committed.insert((producer_id, epoch));
                    self.out.txns_committed += 1;
                    let partitions: HashSet<i32> = markers.iter().map(|t| t.partition).collect();
                    self.out.txns_spanning += u64::from(partitions.len() > 1);
                } else {
                    self.out.txns_aborted += 1;
                }
                let what = if commit { "commits" } else { "aborts" };
                self.trace(|| {
                    format!("coordinator: '{tid}' {what} pid {producer_id} epoch {epoch}, next epoch {new_epoch}")
                });
                self.write_end_markers(tid, Some((prod, epoch)), (pid, new_epoch), commit, markers);
            }
            EndDecision::Done { producer_id, epoch: now_epoch } => {
                let granted = Some((producer_id, now_epoch));
                let resp = Msg::EndTxnResp { prod, for_epoch: epoch, granted, retry: false };
                self.send(COORD, producer_host(prod), resp);
            }
            EndDecision::Refuse { status, .. } => {
                let retry = status.code == protocol::ErrorCode::ConcurrentTransactions;
                let resp = Msg::EndTxnResp { prod, for_epoch: epoch, granted: None, retry };
                self.send(COORD, producer_host(prod), resp);
            }
        }
    }

    /// Write a transaction's commit or abort markers; once all are confirmed the bump to
    /// `next` (producer id, epoch) is final and `asked` (who sent the EndTxn, with its epoch),
    /// if anyone, is answered.
    fn write_end_markers(
        &mut self,
        tid: String,
        asked: Option<(usize, i16)>,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        markers: Vec<FenceTarget>,
    ) {
        if markers.is_empty() {
            return self.finish_end(&tid, asked, producer_id, epoch);
        }
        for t in &markers {
            self.send_marker(&tid, t, commit);
        }
        let now = self.now;
        let targets = markers.into_iter().map(|t| (t, now)).collect();
        let (prod, asked_epoch) = match asked {
            Some((p, e)) => (Some(p), e),
            None => (None, -1),
        };
        let pi = PendingInit { prod, commit, end: true, asked_epoch, producer_id, epoch, targets };
        self.pending_inits.insert(tid, pi);
    }

    /// The coordinator's transaction timer: abort every transaction open for longer than its
    /// timeout, bumping the epoch so that its (slow, paused) producer is fenced.
    fn coord_timeouts(&mut self) {
        let now = self.clock(COORD);
        for (tid, decision) in self.table.handle_timeouts(now) {
            if let EndDecision::Markers { producer_id, epoch, entries, markers, .. } = decision {
                self.journal.extend(entries);
                self.out.txns_timed_out += 1;
                self.trace(|| format!("coordinator: '{tid}' transaction timed out; aborting, next epoch {epoch}"));
                self.write_end_markers(tid, None, (producer_id, epoch), false, markers);
            }
        }
    }

    /// An EndTxn's markers are written: the epoch it bumped to is final (older ones are fenced
    /// wherever the transaction wrote), and the producer continues with it.
    fn finish_end(&mut self, tid: &str, asked: Option<(usize, i16)>, producer_id: i64, epoch: i16) {
        if let Some(old) = self.finished_grant.get(tid) {
            if *old >= epoch {
                return self.violate(format!("'{tid}' ended a transaction into epoch {epoch} after epoch {old}"));
            }
        }
        self.finished_grant.insert(tid.to_string(), epoch);
        if let Some((prod, for_epoch)) = asked {
            let resp = Msg::EndTxnResp { prod, for_epoch, granted: Some((producer_id, epoch)), retry: false };
            self.send(COORD, producer_host(prod), resp);
        }
    }

    fn coord_marker_done(&mut self, tid: String, epoch: i16, (producer_id, partition): (i64, i32), ok: bool) {
        if !ok {
            return;
        }
        let Some(pi) = self.pending_inits.get_mut(&tid) else { return };
        if pi.epoch != epoch {
            return;
        }
        pi.targets.retain(|(t, _)| (t.producer_id, t.partition) != (producer_id, partition));
        if pi.targets.is_empty() {
            let pi = self.pending_inits.remove(&tid).expect("pending init");
            self.journal.extend(self.table.handle_fence_done(&tid, epoch));
            if pi.end {
                self.finish_end(&tid, pi.prod.map(|p| (p, pi.asked_epoch)), pi.producer_id, pi.epoch);
            } else {
                self.finish_grant(&tid, pi.prod, pi.producer_id, pi.epoch);
            }
        }
    }

    fn broker_marker(&mut self, id: i32, tid: String, target: FenceTarget, leader_epoch: i32, commit: bool) {
        let kind = if commit { MarkerKind::Commit } else { MarkerKind::Abort };
        let batch = build_marker(target.producer_id, target.marker_epoch, kind, 0, self.now as i64);
        let header = BatchHeader::parse_prefix(&batch).expect("a marker we built parses");
        let partition = target.partition;
        let r = self.rep_mut(id, partition);
        match r.part.append(&batch, &header, leader_epoch) {
            Ok(a) => {
                let (base_offset, end_offset, leader_epoch) = a.parts();
                r.pending.push(Pending {
                    prod: None,
                    marker: Some((tid, target.marker_epoch, target.producer_id)),
                    end_offset,
                    base_offset,
                    leader_epoch,
                });
                let (pid, e) = (target.producer_id, target.marker_epoch);
                self.trace(|| {
                    format!(
                        "broker {id}: marker for producer id {pid} at epoch {e} at offset {partition}/{base_offset}"
                    )
                });
            }
            Err(_) => {
                let (epoch, producer_id) = (target.marker_epoch, target.producer_id);
                let resp = Msg::MarkerResp { tid, epoch, producer_id, partition, ok: false };
                self.send(id as usize, COORD, resp);
            }
        }
        self.after_broker_step(id);
    }

    /// Append the produce requests a broker read for one partition, as one group.
    fn broker_produce_group(&mut self, id: i32, partition: i32, inbox: Vec<Inbound>) {
        let mut admitted = Vec::new();
        for (prod, batch, header, leader_epoch) in inbox {
            // A producer id and epoch the coordinator refused to verify is fenced here.
            if self.rep(id, partition).refused.contains(&(header.producer_id, header.producer_epoch)) {
                self.out.fenced += 1;
                let bid = (partition, header.producer_id, header.producer_epoch, header.base_sequence);
                self.send(
                    id as usize,
                    producer_host(prod),
                    Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Fenced },
                );
            } else {
                admitted.push((prod, batch, header, leader_epoch));
            }
        }
        let offers: Vec<Offer<'_>> = admitted
            .iter()
            .map(|(_, batch, header, leader_epoch)| Offer { batch, header, leader_epoch: *leader_epoch })
            .collect();
        let answers = self.rep(id, partition).part.append_group(&offers);
        drop(offers);
        // A group stops at a batch that needs the coordinator's verification; the broker starts
        // the requests behind it once that is answered. Here they go back to the inbox.
        let later = admitted.split_off(answers.len());
        if !later.is_empty() {
            self.rep_mut(id, partition).inbox.splice(0..0, later);
            let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
            let wait = self.rng.below(PRODUCE_GROUP_WAIT_TICKS_MAX + 1);
            self.schedule(wait, Event::ProduceGroup { id, partition, incarnation });
        }
        self.count_group(&admitted);
        for ((prod, _, header, _), answer) in admitted.into_iter().zip(answers) {
            self.broker_produced(id, prod, partition, header, answer);
        }
        self.after_broker_step(id);
    }

    /// Count what a group's batches checked against each other (those the partition looked at).
    fn count_group(&mut self, group: &[Inbound]) {
        if group.len() < 2 {
            return;
        }
        self.fault("produce requests appended as a group");
        // A zombie and the instance that fenced it, checked one after the other.
        let mixed = group.iter().any(|(_, _, a, _)| {
            group.iter().any(|(_, _, b, _)| a.producer_id == b.producer_id && a.producer_epoch != b.producer_epoch)
        });
        if mixed {
            self.fault("produce group with two epochs of one producer id");
        }
        // A duplicated request checked after its original.
        let twice = group.iter().enumerate().any(|(i, (_, _, a, _))| {
            group[..i].iter().any(|(_, _, b, _)| {
                (a.producer_id, a.producer_epoch, a.base_sequence) == (b.producer_id, b.producer_epoch, b.base_sequence)
            })
        });
        if twice {
            self.fault("produce group with one batch twice");
        }
    }

    /// One produce request's answer from its group.
    fn broker_produced(
        &mut self,
        id: i32,
        prod: usize,
        partition: i32,
        header: BatchHeader,
        answer: Result<Appended, AppendError>,
    ) {
        let from = producer_host(prod);
        let bid = (partition, header.producer_id, header.producer_epoch, header.base_sequence);
        match answer {
            Ok(a) => {
                let (base_offset, end_offset, stored_epoch) = a.parts();
                if let Appended::New { .. } = a {
                    let tid = self.owner.get(&header.producer_id).cloned().unwrap_or_default();
                    if let Some(&granted) = self.finished_grant.get(&tid) {
                        if header.producer_epoch < granted {
                            // Appended after the grant finished: a violation once committed.
                            let seen = (header.producer_id, header.producer_epoch, header.base_sequence, stored_epoch);
                            self.zombie_appends.insert((partition, base_offset, seen));
                            let e = header.producer_epoch;
                            self.trace(|| {
                                format!(
                                    "broker {id}: zombie batch epoch {e} appended at {base_offset} (granted {granted})"
                                )
                            });
                        }
                    }
                }
                if let Appended::New { .. } = a {
                    self.trace(|| {
                        format!(
                            "broker {id}: appended producer {prod} epoch {} seq {} at offset {partition}/{base_offset}, \
                             leader epoch {stored_epoch}",
                            bid.2, bid.3
                        )
                    });
                }
                self.rep_mut(id, partition).pending.push(Pending {
                    prod: Some((prod, bid)),
                    marker: None,
                    end_offset,
                    base_offset,
                    leader_epoch: stored_epoch,
                });
            }
            Err(AppendError::NeedsVerification { producer_id, epoch }) => {
                let transactional = header.is_transactional();
                let verify = Msg::Verify { broker: id, partition, producer_id, epoch, transactional };
                self.send(id as usize, COORD, verify);
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Retry });
            }
            Err(AppendError::Gate(g)) => {
                let fenced = matches!(g, broker::producer_state::GateError::StaleEpoch { .. });
                if fenced {
                    self.out.fenced += 1;
                    self.trace(|| format!("broker {id}: refused producer {prod}: {g}"));
                }
                let result = if fenced { ProduceResult::Fenced } else { ProduceResult::Retry };
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result });
            }
            Err(_) => {
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Retry });
            }
        }
    }

    fn producer_answer(&mut self, prod: usize, batch: BatchId, result: ProduceResult) {
        let now = self.now;
        let Some((partition, _, header, _)) = self.producers[prod].inflight.as_ref() else { return };
        let id = (*partition, header.producer_id, header.producer_epoch, header.base_sequence);
        if id != batch {
            // An answer to an earlier batch (delayed or duplicated): already handled.
            return;
        }
        let leader = self.leader(id.0);
        let pr = &mut self.producers[prod];
        match result {
            ProduceResult::Acked { base_offset } => {
                pr.inflight = None;
                pr.next_seq[id.0 as usize] += 1;
                pr.txn_acked += u32::from(pr.transactional);
                self.acked.push((id, base_offset));
                self.out.acked += 1;
                self.trace(|| {
                    format!(
                        "producer {prod}: acknowledged epoch {} seq {} at offset {}/{base_offset}",
                        id.2, id.3, id.0
                    )
                });
            }
            ProduceResult::Fenced => {
                pr.ids = None;
                pr.inflight = None;
                pr.ending = None;
                pr.txn_acked = 0;
                pr.dead_until = now + 200;
                self.trace(|| format!("producer {prod}: fenced at epoch {}", id.2));
            }
            ProduceResult::Retry => {
                // Metadata refresh; resend on the next tick.
                pr.leader[id.0 as usize] = leader;
                if let Some((.., sent)) = pr.inflight.as_mut() {
                    *sent = 0;
                }
            }
        }
    }

    /// Answer what became committed, fail what lost leadership, and check the replicas.
    fn after_broker_step(&mut self, id: i32) {
        for partition in 0..self.cfg.partitions {
            let r = self.rep_mut(id, partition);
            let mut answers = Vec::new();
            let part = &r.part;
            r.pending.retain(|p| match part.committed(p.end_offset, p.leader_epoch) {
                Ok(true) => {
                    answers.push((p.prod, p.marker.clone(), Some(p.base_offset)));
                    false
                }
                Ok(false) => true,
                Err(_) => {
                    answers.push((p.prod, p.marker.clone(), None));
                    false
                }
            });
            for (prod, marker, offset) in answers {
                if let Some((prod, batch)) = prod {
                    let result = match offset {
                        Some(base_offset) => ProduceResult::Acked { base_offset },
                        None => ProduceResult::Retry,
                    };
                    self.send(id as usize, producer_host(prod), Msg::ProduceResp { prod, batch, result });
                }
                if let Some((tid, epoch, producer_id)) = marker {
                    let ok = offset.is_some();
                    self.send(id as usize, COORD, Msg::MarkerResp { tid, epoch, producer_id, partition, ok });
                }
            }
            self.check_replica(id, partition);
            self.check_isr_holds_committed(partition);
        }
    }

    /// What a leader has committed is on every replica the coordinator holds in sync, since
    /// the coordinator elects the next leader from them.
    fn check_isr_holds_committed(&mut self, partition: i32) {
        let (leader, leader_epoch) = self.leader(partition);
        if leader < 0 {
            return;
        }
        let part = &self.rep(leader, partition).part;
        let l = part.leadership();
        if !l.is_leader || l.leader_epoch != leader_epoch {
            return;
        }
        let (_, hw) = part.progress();
        let counted = part.counted_replicas().unwrap_or_default();
        let isr = self.cluster.isr_of(TOPIC, partition).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
        if let Some(m) = isr.iter().find(|m| !counted.contains(m)) {
            return self.violate(format!(
                "leader {leader} of partition {partition} at epoch {leader_epoch} commits without broker {m}, which \
                 the coordinator holds in sync (ISR {isr:?}); the leader waits for {counted:?}"
            ));
        }
        for m in isr {
            let part = &self.rep(m, partition).part;
            let (leo, _) = part.progress();
            // On disk, not only written: a power loss must not take it either.
            if leo < hw || !part.is_durable(hw) {
                return self.violate(format!(
                    "leader {leader} of partition {partition} at epoch {leader_epoch} has committed up to {hw}, but \
                     broker {m}, in sync at the coordinator, holds only up to {leo} or has not synced it: electing it \
                     would lose committed records"
                ));
            }
        }
    }

    fn check_replica(&mut self, id: i32, partition: i32) {
        let r = self.rep(id, partition);
        let epoch = r.part.leadership().leader_epoch;
        if epoch < r.last_leader_epoch {
            let last = r.last_leader_epoch;
            self.violate(format!("broker {id} leader epoch of partition {partition} went back from {last} to {epoch}"));
        }
        let r = self.rep_mut(id, partition);
        r.last_leader_epoch = epoch;
        let version = *r.part.subscribe().borrow();
        if r.checked_version == Some(version) {
            return;
        }
        r.checked_version = Some(version);
        let r = self.rep(id, partition);
        let (leo, hw) = r.part.progress();
        let l = r.part.leadership();
        self.trace(|| {
            format!(
                "broker {id}: partition {partition} log end {leo}, high watermark {hw}, leader {} at epoch {}",
                l.leader_id, l.leader_epoch
            )
        });
        let headers = match self.rep(id, partition).part.batch_headers() {
            Ok(h) => h,
            Err(e) => return self.violate(format!("broker {id} cannot read its log: {e}")),
        };
        // Below its high watermark a replica's log is committed: every replica agrees there. (A
        // replica outside the ISR may hold other, uncommitted batches above it, which it
        // truncates once it follows the leader again.)
        for (h, _) in headers.iter().filter(|(h, _)| h.base_offset < hw) {
            let seen = (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch);
            if !h.is_control() && self.zombie_appends.contains(&(partition, h.base_offset, seen)) {
                let tid = self.owner.get(&h.producer_id).cloned().unwrap_or_default();
                return self.violate(format!(
                    "zombie write committed: '{tid}' producer {} epoch {} seq {} at offset {partition}/{} on broker \
                     {id}, appended after a newer epoch was granted",
                    h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset
                ));
            }
            match self.committed.get(&(partition, h.base_offset)) {
                Some(c) if *c != seen => {
                    let c = *c;
                    return self.violate(format!(
                        "replicas disagree on a committed offset: offset {partition}/{} committed {c:?}, broker {id} \
                         holds {seen:?}",
                        h.base_offset
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed.insert((partition, h.base_offset), seen);
                }
            }
        }
    }

    /// After the settle phase: replicas converged, every acknowledged record present once.
    fn finish(&mut self) {
        let mut count: HashMap<BatchId, Vec<i64>> = HashMap::new();
        for partition in 0..self.cfg.partitions {
            let mut logs = Vec::new();
            for (id, b) in &self.brokers {
                let part = &b.replicas[partition as usize].part;
                let (leo, hw) = part.progress();
                let headers: Vec<_> = match part.batch_headers() {
                    Ok(h) => h
                        .into_iter()
                        .map(|(h, _)| (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence))
                        .collect(),
                    Err(e) => return self.violate(format!("broker {id} cannot read its log: {e}")),
                };
                logs.push((*id, leo, hw, headers));
            }
            let (leader, _) = self.leader(partition);
            let Some((_, leo, hw, log)) = logs.iter().find(|(id, ..)| *id == leader).cloned() else {
                return self.violate(format!("no convergence: partition {partition} has no leader"));
            };
            if hw != leo {
                return self.violate(format!(
                    "no convergence: leader {leader} of partition {partition} has high watermark {hw} below its log \
                     end {leo}"
                ));
            }
            for (id, l, h, other) in &logs {
                if *l != leo || *h != hw || *other != log {
                    return self.violate(format!(
                        "no convergence: broker {id} has partition {partition} log end {l}, high watermark {h}; \
                         leader {leader} has {leo}, {hw}"
                    ));
                }
            }
            let pos = self.consumers[partition as usize].position;
            if pos != hw {
                return self.violate(format!(
                    "no convergence: the consumer is at {partition}/{pos}, the high watermark at {hw}"
                ));
            }
            for (offset, pid, epoch, seq) in &log {
                if *pid >= 0 && *seq >= 0 {
                    count.entry((partition, *pid, *epoch, *seq)).or_default().push(*offset);
                }
            }
        }
        for (id, offset) in self.acked.clone() {
            match count.get(&id).map(Vec::as_slice) {
                None => return self.violate(format!("acknowledged record {id:?} at offset {offset} is lost")),
                Some([o]) if *o == offset => {}
                Some(found) => {
                    return self.violate(format!("acknowledged record {id:?} at offset {offset} found at {found:?}"))
                }
            }
        }
    }
}
