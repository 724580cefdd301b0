//! Deterministic simulation of a topic's partitions (two by default) on three brokers, a
//! coordinator, producers sharing transactional ids (one pair idempotent, one pair
//! transactional, every batch to any partition, so transactions span them) and a
//! read_committed consumer, on virtual time, every fault drawn from one seeded PRNG.
//!
//! It drives the real rule types: [`coordinator::table::ProducerTable`] grants epochs, opens and
//! ends transactions (and aborts those that outlive their timeout), writes fence, commit and
//! abort markers, verifies partitions, fences and forgets transactional ids it hears nothing
//! from (and partitions forget idle producer ids), and is rebuilt from its journal after a crash;
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
//!    and then committed; and in a topic deleted since ([`Config::topic_deletions`]), none is
//!    appended by its last leadership on a broker the coordinator held alive when the grant
//!    finished;
//! 2. every acknowledged record is in the final log exactly once, at the offset acknowledged;
//! 3. once an offset is committed, no replica holds a different batch there below its own
//!    high watermark;
//! 4. leader epochs seen by each broker (within one incarnation), and epochs granted per
//!    transactional id, never go backwards;
//! 5. what the consumer reads is what is committed there, never a zombie write, and, read
//!    committed, never a record of a transaction the coordinator did not decide to commit;
//! 6. nothing of transaction N lands in transaction N+1: an EndTxn ends only the coordinator's
//!    transaction that its own transaction's request opened (under transaction version 1,
//!    [`Config::transaction_version`], a delayed EndTxn ending the next transaction is the
//!    version's known hole: counted, not failed);
//!
//! and, after the faults stop, that the replicas and the consumer converge (liveness).
//!
//! [`groups`] is a second, smaller simulation: read-process-write workers of one consumer group
//! on the real group and producer rules, checking that each input's output is committed exactly
//! once (`sim --groups`).
//!
//! [`replicas`] is a third: coordinator replicas on a guarded store with leases, checking that
//! no write of a deposed replica lands (`sim --coordinators`).
//!
//! This file holds the model's types, the event loop and the network; the methods of `Sim`
//! for each part are beside it: `brokers`, `coord` (the coordinator), `clients` (producers and
//! the consumer), `faults` (the fault injector and restarts) and `checks` (the invariants).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use broker::partition::{AppendError, Appended, Committed, Offer, Partition, ReplicateError};
use broker::producer_state::VerificationGuard;
use broker::replication::Sent;
use broker::storage::{MemStorage, StoredFile};
use bytes::Bytes;
use coordinator::cluster::{BrokerStart, Cluster, ClusterConfig, MarkerRoute};
use coordinator::entry::{Entry, FenceTarget};
use coordinator::table::{
    EndDecision, InitDecision, ProducerTable, RegisterDecision, Registration, TableConfig, TxnState,
};
use protocol::batch::{build_batch, build_marker, BatchHeader, MarkerKind, ProducerStamp};
use protocol::{AlterPartitionRequest, AlterPartitionResponse, Assignment, ReplicaReport, ReplicateRequest};

mod brokers;
mod checks;
mod clients;
mod coord;
mod faults;
pub mod groups;
pub mod replicas;
pub mod timeline;

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
/// A transactional id the coordinator hears nothing from for this long (on its clock) is fenced
/// if it wrote outside a transaction, then forgotten: a producer paused that long (and its
/// sibling quiet) wakes with an id the coordinator no longer knows.
const TXN_ID_EXPIRATION_TICKS: u64 = 600;
/// A producer gives a batch up this long after it made it (a pause included), as a real
/// client's delivery timeout does, and starts over.
const DELIVERY_TIMEOUT_TICKS: u64 = 800;
/// A partition forgets a producer id that wrote nothing there for this long (simulated time:
/// the broker's clock for it is monotonic, it does not jump), and asks the coordinator again
/// about one writing outside transactions after two of its sweeps (`producer_states_expiry`,
/// every `PRODUCER_ID_SWEEP_TICKS`). Longer than the delivery timeout, as it must be in a real
/// deployment too: a retry of a batch after its producer id is forgotten here would be taken
/// for a new one (the simulator found that duplicate with a shorter expiration).
const PRODUCER_ID_EXPIRATION_TICKS: u64 = 1_000;
/// How often each broker sweeps its partitions' producer ids.
const PRODUCER_ID_SWEEP_TICKS: u64 = 60;
/// Small segments, so that runs roll many of them: crashes then land around rolls, segment
/// indexes and producer-state snapshots, and recovery goes through them.
const LOG: broker::log::LogConfig = broker::log::LogConfig {
    segment_bytes: 2048,
    retention_bytes: None,
    retention_ms: None,
    segment_ms: None,
    sync_on_roll: true,
    // The simulated disk keeps no blocks; preallocation is a hint it ignores.
    preallocate_bytes: 0,
    // Small, so that a leader sends some Replicate requests from the batches it keeps in
    // memory and, for a follower further behind, others from the file.
    replication_cache_bytes_max: 4096,
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
    /// Leaders ignore `min.insync.replicas`: they acknowledge acks=all writes, and move the high
    /// watermark, with an ISR of one.
    NoMinIsr,
    /// Every broker restart counts as intact, even on a replaced disk: the coordinator keeps a
    /// replica that lost its log in sync, and may elect it.
    TrustRestarts,
    /// Brokers never report a replica lost: one whose log came back damaged (a flipped byte cut
    /// at open) stays in sync, may lead, and makes the others cut to it.
    TrustDamagedLogs,
    /// A replica keeps the verifications it made when it led before (as before issue 28): a
    /// zombie verified there writes again once an unclean election makes it lead without the
    /// fence marker (needs [`Config::unclean_elections`]).
    KeepVerifications,
    /// A replica elected uncleanly keeps its whole log: a zombie batch it appended as a stale
    /// leader, after the fence marker went to the leader of the time, is committed (needs
    /// [`Config::unclean_elections`]).
    UncleanLeadersKeepTheirLogs,
    /// The coordinator takes a forgotten transactional id's producer id for an idempotent
    /// producer's (issue 27): a zombie its partitions forgot too is verified at any epoch.
    ExpiredIdsTakenForIdempotent,
    /// The coordinator knows partitions by name, as before issue 28: a marker owed to a deleted
    /// topic's partition goes to whatever topic has the name now, and the name is created again
    /// at once, while a paused broker still serves the old replica (needs
    /// [`Config::topic_deletions`]). A zombie verified there writes after its fence was answered.
    TopicsByName,
    /// The coordinator ends a version 2 transaction without bumping the epoch, as version 1
    /// does (issue 31): a delayed or duplicated EndTxn of transaction N, at the epoch N+1 runs
    /// under too, ends N+1.
    NoBumpPerTransaction,
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
            "no-min-isr" => Some(Mutation::NoMinIsr),
            "trust-restarts" => Some(Mutation::TrustRestarts),
            "trust-damaged-logs" => Some(Mutation::TrustDamagedLogs),
            "keep-verifications" => Some(Mutation::KeepVerifications),
            "unclean-leaders-keep-their-logs" => Some(Mutation::UncleanLeadersKeepTheirLogs),
            "expired-ids-taken-for-idempotent" => Some(Mutation::ExpiredIdsTakenForIdempotent),
            "topics-by-name" => Some(Mutation::TopicsByName),
            "no-bump-per-transaction" => Some(Mutation::NoBumpPerTransaction),
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
    /// Transactional ids the coordinator forgot after `TXN_ID_EXPIRATION_TICKS` idle.
    pub txn_ids_expired: u64,
    /// Producer ids a partition forgot after `PRODUCER_ID_EXPIRATION_TICKS` idle.
    pub producer_ids_expired: u64,
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

/// Identity of a data batch: partition slot, producer id, epoch, first sequence.
///
/// A *slot* names one partition of one incarnation of the topic: `generation * partitions +
/// index`, where the generation counts the topic's creations (0 until it is first deleted and
/// created again, so that without deletions a slot is the partition index). What the
/// invariants know (offsets committed, records acknowledged, unclean elections) is per slot: a
/// topic created again under the name is another topic.
type BatchId = (i32, i64, i16, i32);

/// A finished grant: the (producer id, epoch) granted, and the brokers whose lease the
/// coordinator held live when it finished.
type Grant = ((i64, i16), Vec<i32>);

/// What the invariants know a batch by: producer id, epoch, first sequence, leader epoch.
type Seen = (i64, i16, i32, i32);

#[derive(Debug, Clone)]
enum Msg {
    InitReq {
        prod: usize,
    },
    /// A version 1 client's AddPartitionsToTxn, sent in transaction `txn` (see
    /// [`Producer::txn`]) before its first write there.
    AddPartitions {
        prod: usize,
        txn: u64,
        producer_id: i64,
        epoch: i16,
        index: i32,
    },
    /// `fenced`: refused for good (an older epoch, or the id taken over); else, if not `ok`,
    /// asked again later.
    AddPartitionsResp {
        prod: usize,
        txn: u64,
        index: i32,
        ok: bool,
        fenced: bool,
    },
    InitResp {
        prod: usize,
        granted: Option<(i64, i16)>,
    },
    /// To the partition `index` of the topic by name: the broker appends it to whichever replica
    /// it holds under that name (a client's produce carries no topic id).
    Produce {
        prod: usize,
        index: i32,
        batch: Bytes,
        header: BatchHeader,
        leader_epoch: i32,
    },
    ProduceResp {
        prod: usize,
        batch: BatchId,
        result: ProduceResult,
    },
    /// `txn`: the transaction the write that needs it is part of, if transactional (the
    /// simulator's knowledge, which decides nothing); `verify_only`: a version 1 write, whose
    /// partition its client added (AddPartitionsToTxn), only checked.
    Verify {
        broker: i32,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        guard: VerificationGuard,
        txn: Option<u64>,
        verify_only: bool,
    },
    VerifyResp {
        partition: i32,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        guard: VerificationGuard,
        ok: bool,
    },
    Marker {
        tid: String,
        target: FenceTarget,
        leader_epoch: i32,
        commit: bool,
    },
    /// `txn`: the transaction it ends, as its producer numbers them (a real client matches
    /// the answer to its request by the connection's correlation id).
    EndTxn {
        prod: usize,
        txn: u64,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    },
    /// `txn`: the EndTxn's; `retry`: refused for now (markers still being written), ask again.
    EndTxnResp {
        prod: usize,
        txn: u64,
        granted: Option<(i64, i16)>,
        retry: bool,
    },
    /// A marker's answer, for the target it was owed to (partition index and topic id).
    MarkerResp {
        tid: String,
        epoch: i16,
        producer_id: i64,
        partition: i32,
        topic_id: u128,
        ok: bool,
    },
    /// A broker's heartbeat: its process incarnation and its replicas' progress.
    Heartbeat {
        broker: i32,
        call: u64,
        start: BrokerStart,
        reports: Vec<ReplicaReport>,
    },
    /// The coordinator's answer: each partition's leadership, replicas and ISR, and the ids of
    /// deleted topics the broker still reported replicas of (it drops them).
    HeartbeatResp {
        call: u64,
        /// The process's broker epoch, or why its heartbeat was refused.
        registered: Result<i64, protocol::ErrorCode>,
        assignments: Vec<Assignment>,
        deleted: Vec<u128>,
    },
    /// A leader asks the coordinator to change the ISR under its leader epoch.
    AlterIsr {
        call: u64,
        req: AlterPartitionRequest,
        /// The asking replica's slot (what the answer goes back to).
        slot: i32,
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
        /// The leader epoch the fetch was sent under.
        leader_epoch: i32,
    },
    /// To the follower's replica of `req.topic`-`req.partition`; `from_slot`: the leader's
    /// replica, which the answer goes back to.
    Replicate {
        req: ReplicateRequest,
        sent: Sent,
        from_slot: i32,
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
    /// `leader_epoch`: the leadership that acknowledged it.
    Acked {
        base_offset: i64,
        leader_epoch: i32,
    },
    Fenced,
    /// The partition holds nothing of the producer id and the batch continued a sequence.
    StartOver,
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
    /// The transaction it is in (or is to begin), numbered across all producers of the run:
    /// a new one after every end and every init. What "transaction N" means in the check
    /// that nothing of transaction N lands in transaction N+1 ([`Sim::txn_opened_by`]).
    txn: u64,
    /// Version 1: the partitions added to the open transaction, and the AddPartitionsToTxn
    /// outstanding (partition index, when sent).
    added: HashSet<i32>,
    adding: Option<(i32, u64)>,
    /// Batches acknowledged in the open transaction, and how many it is to hold.
    txn_acked: u32,
    txn_size: u32,
    /// An EndTxn sent and not answered: (commit, when sent).
    ending: Option<(bool, u64)>,
    ids: Option<(i64, i16)>,
    /// When the outstanding init was sent (it is retried if no answer comes).
    init_sent: Option<u64>,
    /// Next sequence per partition index (a client knows partitions by name).
    next_seq: Vec<i32>,
    /// The batch in flight: partition index, batch, header, when sent.
    inflight: Option<(i32, Bytes, BatchHeader, u64)>,
    /// Whom it believes leads each partition index, at which leader epoch.
    leader: Vec<(i32, i32)>,
    paused_until: u64,
    dead_until: u64,
}

struct Pending {
    prod: Option<(usize, BatchId)>,
    /// A marker's (transactional id, epoch, producer id, the topic id it was owed to).
    marker: Option<(String, i16, i64, u128)>,
    end_offset: i64,
    base_offset: i64,
    leader_epoch: i32,
}

/// One partition's replica on a broker (of one incarnation of the topic: its slot is its key).
struct Replica {
    part: Partition,
    dir: std::path::PathBuf,
    /// When a byte of its log last flipped (see `damage_a_log`): like a replaced disk, it may
    /// lack acknowledged records until its process registers and reports it lost.
    damaged_at: Option<u64>,
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
    /// Its replicas, by slot: at most one per partition index (one per name, as a broker keeps
    /// them), dropped when a heartbeat answer names its topic deleted or assigns the index
    /// under another topic id.
    replicas: BTreeMap<i32, Replica>,
    /// Its disk: loses what was not synced when the broker loses power.
    disk: Arc<MemStorage>,
    /// The disk's id (a replaced disk has another), as the broker reports it.
    log_dir_id: i64,
    /// Whether its logs hold everything the previous process acknowledged: true after a clean
    /// stop or a power loss (a replica acknowledges only what it synced, `--fsync always`),
    /// false on a replaced disk.
    intact: bool,
    /// When its disk was last replaced.
    disk_replaced_at: Option<u64>,
    /// The broker epoch the coordinator assigned this process (-1 until answered).
    broker_epoch: i64,
    /// The one recorded on its disk for its predecessor when this process started (-1: none).
    previous_broker_epoch: i64,
    /// The last one recorded on its disk (what the next process names as its predecessor's).
    recorded_broker_epoch: i64,
    paused_until: u64,
    /// The heartbeat awaiting an answer (one at a time, as the broker's heartbeat loop makes
    /// it, each with a timeout): (call number, sent at).
    heartbeat_call: Option<(u64, u64)>,
    /// When (its clock) this process last swept its partitions' producer ids.
    producer_sweep_at: u64,
}

struct PendingInit {
    /// Who to answer (none for fences resumed after a coordinator restart).
    prod: Option<usize>,
    /// The markers commit (an EndTxn that commits) or abort (an init's fence, an abort).
    commit: bool,
    /// An EndTxn's markers (answered with EndTxnResp), not an init's fence.
    end: bool,
    /// The transaction the EndTxn ended (what its answer names).
    asked_txn: u64,
    producer_id: i64,
    epoch: i16,
    targets: Vec<(FenceTarget, u64)>,
}

/// A read_committed consumer's position in one partition (by index), read from offset 0: of
/// the slot it reads, the one the topic has now (from offset 0 again once it is created anew).
struct Consumer {
    slot: i32,
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
    /// An operator forces unclean elections: every in-sync and eligible replica of a partition
    /// is lost (paused past its lease) and `admin elect-leader --unclean` makes a replica outside
    /// them lead. Records and markers only the lost replicas held are lost with them (what an
    /// unclean election costs), so for such a partition the checks of what is committed and
    /// acknowledged, and of which transactions read_committed returns, cover only what was
    /// written from the unclean leadership on; the fence (invariant 1, and no zombie write read)
    /// is checked throughout.
    pub unclean_elections: bool,
    /// Transactional ids and producer ids expire (issue 27), and producers give a batch up
    /// after their delivery timeout. Off: the runs as before expiry (`--no-expiry`).
    pub expiry: bool,
    /// An operator deletes the topic while one of its leaders is paused (under its lease) and
    /// creates it again under the name (issue 28), and the paused leader's producers' siblings
    /// take their transactional ids over meanwhile. What was written into a deleted topic is
    /// gone with it (acknowledged records included, when a write raced the deletion, as in
    /// Kafka); the fence is checked throughout, and in the deleted topic too: once a fence is
    /// answered, no broker the coordinator held alive then appends a write of the fenced epoch
    /// to the replica the deleted topic's partition was led by.
    pub topic_deletions: bool,
    /// The transaction version the transactional producers run under (issue 31), as Kafka
    /// clients do: 2 (the default) adds a partition with its first write and bumps the epoch
    /// at every EndTxn; 1 adds each partition with AddPartitionsToTxn first, the leader only
    /// verifies, and the epoch stays. Under 1, a delayed EndTxn of one transaction ending the
    /// next is version 1's known hole: counted, not a failure; under 2 it is a violation.
    pub transaction_version: i16,
    /// The network holds a message now and then for 100-599 ticks more (issue 31; on by
    /// default). Off: the network as it was before, which some pinned seeds were found under
    /// (`--no-held-messages`).
    pub held_messages: bool,
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
            unclean_elections: false,
            expiry: true,
            topic_deletions: false,
            transaction_version: 2,
            held_messages: true,
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
    /// Per transactional id, the newest (producer id, epoch) whose grant (or bump) finished:
    /// producer ids only grow, so an older pair is an older instance or epoch.
    finished_grant: HashMap<String, (i64, i16)>,
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
    /// When each batch was first appended: (partition, base offset, leader epoch) -> tick.
    first_appended: HashMap<(i32, i64, i32), u64>,
    /// What is committed at each (partition, offset).
    committed: BTreeMap<(i32, i64), Seen>,
    /// Acknowledged records: (batch, offset, the leader epoch that acknowledged it).
    acked: Vec<(BatchId, i64, i32)>,
    /// An unclean election under way: (partition, the replica to elect, give up at).
    unclean_plan: Option<(i32, i32, u64)>,
    /// Per partition, the leader epoch of its last unclean election: what was written under
    /// earlier epochs may be lost (see [`Config::unclean_elections`]).
    unclean_epoch: HashMap<i32, i32>,
    /// Every transaction the coordinator decided to commit: (producer id, epoch, transaction)
    /// (see [`Producer::txn`]): the one whose EndTxn decided it and the one whose request
    /// opened it, which differ only through version 1's hole.
    txn_committed: HashSet<(i64, i16, u64)>,
    /// Per transactional id, the transaction whose registration (an AddPartitionsToTxn, or a
    /// write's implicit add) opened the coordinator's open transaction.
    txn_opened_by: HashMap<String, u64>,
    /// Which transaction each transactional batch was made in, by (partition index, producer
    /// id, epoch, first sequence), unique per batch.
    txn_of: HashMap<(i32, i64, i16, i32), u64>,
    /// The next transaction number ([`Producer::txn`]).
    next_txn: u64,
    /// The topic's id in each generation (see [`BatchId`] for slots).
    topic_ids: Vec<u128>,
    /// The generation the topic has now; none while it is deleted and not created again.
    live_gen: Option<i32>,
    /// The replication factor the topic is to be created again with (two or three: with two,
    /// the new topic may leave out the paused broker, and its partitions commit without it).
    recreate_rf: i32,
    /// The operator is to delete the topic at the next chance (a producer writing to a leader).
    deletion_due: bool,
    /// Per slot of a deleted generation, the leader epoch its partition had when the topic was
    /// deleted: the last leadership that took writes the coordinator answered for.
    final_epoch: HashMap<i32, i32>,
    /// Per transactional id, every finished grant (init, or an EndTxn's bump) with the brokers
    /// whose lease the coordinator held live when it finished.
    grants: HashMap<String, Vec<Grant>>,
    /// The consumer's position in each partition.
    consumers: Vec<Consumer>,
    consumer_paused_until: u64,
    /// The coordinator is paused (a long GC pause) until then: requests queue up and are read
    /// in some order afterwards; its timers do not run.
    coord_paused_until: u64,
    out: Outcome,
}

/// The coordinator's cluster rules, as a process starting at `now` (its clock) has them.
fn new_cluster(cfg: &Config, now: u64) -> Cluster {
    let mut cluster = Cluster::new(ClusterConfig { broker_lease_ms: LEASE_TICKS, ..ClusterConfig::default() });
    cluster.set_topics_by_name(cfg.mutation == Mutation::TopicsByName);
    cluster.set_started(now);
    cluster
}

fn table_config(cfg: &Config) -> TableConfig {
    TableConfig {
        transactional_id_expiration_ms: TXN_ID_EXPIRATION_TICKS,
        producer_id_kinds: cfg.mutation != Mutation::ExpiredIdsTakenForIdempotent,
        ..TableConfig::default()
    }
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
    part.set_keep_verifications(mutation == Mutation::KeepVerifications);
    part.set_keep_log_after_unclean(mutation == Mutation::UncleanLeadersKeepTheirLogs);
    Ok(part)
}

/// A new replica of partition `slot` (see [`BatchId`]) on broker `id`'s disk.
fn new_replica(disk: &Arc<MemStorage>, id: i32, slot: i32, cfg: &Config) -> Result<Replica, broker::log::LogError> {
    let (generation, index) = (slot / cfg.partitions, slot % cfg.partitions);
    let dir = match generation {
        0 => std::path::PathBuf::from(format!("/sim/b{id}/{TOPIC}-{index}")),
        g => std::path::PathBuf::from(format!("/sim/b{id}/{TOPIC}-{index}.g{g}")),
    };
    let part = open_replica(disk, &dir, index, id, cfg.mutation)?;
    Ok(Replica {
        part,
        dir,
        damaged_at: None,
        pending: Vec::new(),
        unsynced_acks: Vec::new(),
        flushing: false,
        refused: HashSet::new(),
        last_leader_epoch: -1,
        checked_version: None,
        alter_call: None,
        inbox: Vec::new(),
    })
}

/// Run one seed.
pub fn run(seed: u64, cfg: Config) -> Outcome {
    let mut brokers = BTreeMap::new();
    for id in BROKERS {
        let disk = Arc::new(MemStorage::new());
        let mut replicas = BTreeMap::new();
        for slot in 0..cfg.partitions {
            match new_replica(&disk, id, slot, &cfg) {
                Ok(r) => replicas.insert(slot, r),
                Err(e) => panic!("a new partition on an empty disk opens: {e}"),
            };
        }
        brokers.insert(
            id,
            BrokerHost {
                replicas,
                disk,
                log_dir_id: id.into(),
                intact: false,
                disk_replaced_at: None,
                broker_epoch: -1,
                previous_broker_epoch: -1,
                recorded_broker_epoch: -1,
                paused_until: 0,
                heartbeat_call: None,
                producer_sweep_at: 0,
            },
        );
    }
    let cfg_producers = cfg.producers;
    let producers = (0..cfg.producers)
        .map(|i| Producer {
            tid: format!("tid-{}", i / 2),
            transactional: i / 2 == 1,
            txn: i as u64,
            added: HashSet::new(),
            adding: None,
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
    let table = ProducerTable::new(table_config(&cfg));
    let cluster = new_cluster(&cfg, 0);
    let mut sim = Sim {
        rng: Rng(seed ^ 0x5eed_f00d),
        cfg,
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        next_event: 0,
        table,
        journal: Vec::new(),
        owner: HashMap::new(),
        pending_inits: BTreeMap::new(),
        finished_grant: HashMap::new(),
        brokers,
        producers,
        cluster,
        clocks: BTreeMap::new(),
        calls: 0,
        cut: HashSet::new(),
        incarnations: BTreeMap::new(),
        cut_until: 0,
        zombie_appends: HashSet::new(),
        first_appended: HashMap::new(),
        committed: BTreeMap::new(),
        acked: Vec::new(),
        unclean_plan: None,
        unclean_epoch: HashMap::new(),
        txn_committed: HashSet::new(),
        txn_opened_by: HashMap::new(),
        txn_of: HashMap::new(),
        next_txn: cfg_producers as u64,
        topic_ids: Vec::new(),
        live_gen: None,
        recreate_rf: 3,
        deletion_due: false,
        final_epoch: HashMap::new(),
        grants: HashMap::new(),
        consumers: Vec::new(),
        consumer_paused_until: 0,
        coord_paused_until: 0,
        out: Outcome::default(),
    };
    sim.consumers =
        (0..sim.cfg.partitions).map(|slot| Consumer { slot, position: 0, leader: (-1, -1), sent: None }).collect();
    // The brokers register, then the topic is created: three replicas, the ISR all three.
    for id in BROKERS {
        sim.cluster.handle_heartbeat(0, id, &format!("b{id}"), &[]);
    }
    // Kafka's internal names are never topics (a topic named `__consumer_offsets` was once never
    // fenced); names that only look like them are.
    for name in protocol::names::RESERVED_TOPICS {
        if sim.cluster.plan_create_topic(0, name, 1, 3, -1).is_ok() {
            sim.violate(format!("a topic named '{name}' can be created"));
        }
    }
    for name in ["__consumer_offsets_", "_consumer_offsets", "__Consumer_offsets"] {
        if let Err(status) = sim.cluster.plan_create_topic(0, name, 1, 3, -1) {
            sim.violate(format!("a topic named '{name}' cannot be created: {status}"));
        }
    }
    // Three replicas: min.insync.replicas 2 by default.
    match sim.cluster.handle_create_topic(0, TOPIC, sim.cfg.partitions, 3, -1) {
        Ok(entry) => {
            sim.journal.push(entry);
            sim.topic_ids.push(sim.cluster.topic_id(TOPIC).unwrap_or(0));
            sim.live_gen = Some(0);
        }
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
        let mut delay = if faulty { 1 + self.rng.below(40) } else { 1 + self.rng.below(3) };
        // Requests queue up at the coordinator most (behind its journal writes and markers).
        let held = if to == COORD { 50 } else { 10 };
        if faulty && self.cfg.held_messages && self.rng.chance(held) {
            // Held in a connection for long (a stuck socket, a queue behind a slow handler): it
            // arrives after its sender gave it up and moved on, as a request a client timed
            // out and retried on another connection does.
            self.fault("message held long");
            delay += 100 + self.rng.below(500);
            if matches!(msg, Msg::EndTxn { .. }) {
                self.trace(|| format!("network: {from} -> {to} EndTxn held for {delay} ticks"));
            }
        }
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

    /// The partition index of a slot (see [`BatchId`]).
    fn index(&self, slot: i32) -> i32 {
        slot % self.cfg.partitions
    }

    /// The slot of partition `index` in the topic as it is now, if it exists.
    fn live_slot(&self, index: i32) -> Option<i32> {
        self.live_gen.map(|g| g * self.cfg.partitions + index)
    }

    /// Whether `slot` is a partition of the topic as it is now (not of a deleted one).
    fn is_live(&self, slot: i32) -> bool {
        self.live_slot(self.index(slot)) == Some(slot)
    }

    /// The slot of partition `index` of the topic with id `topic_id`, if the simulated topic
    /// ever had that id.
    fn slot_of(&self, topic_id: u128, index: i32) -> Option<i32> {
        let generation = self.topic_ids.iter().position(|id| *id == topic_id)? as i32;
        Some(generation * self.cfg.partitions + index)
    }

    /// The id of the topic `slot` belongs to.
    fn topic_id_of(&self, slot: i32) -> u128 {
        self.topic_ids.get((slot / self.cfg.partitions) as usize).copied().unwrap_or(0)
    }

    /// The slot of the replica broker `id` holds under the topic's name at `index`, if any:
    /// where a request by name lands there.
    fn held_slot(&self, id: i32, index: i32) -> Option<i32> {
        self.brokers[&id].replicas.keys().copied().find(|slot| self.index(*slot) == index)
    }

    /// The slots broker `id` holds replicas of.
    fn slots(&self, id: i32) -> Vec<i32> {
        self.brokers[&id].replicas.keys().copied().collect()
    }

    /// A partition's leader and leader epoch as the coordinator records them (what a
    /// Metadata request answers); the leader is -1 while there is none, and for a slot of a
    /// deleted topic.
    fn leader(&self, slot: i32) -> (i32, i32) {
        if !self.is_live(slot) {
            return (-1, -1);
        }
        let index = self.index(slot);
        self.cluster.leader_of(TOPIC, index).map_or((-1, -1), |(leader, epoch, _)| (leader, epoch))
    }

    /// The leader of partition `index` of the topic as it is now (-1 while there is none, or
    /// while the topic is deleted): what Metadata answers for the name.
    fn leader_at_index(&self, index: i32) -> (i32, i32) {
        self.live_slot(index).map_or((-1, -1), |slot| self.leader(slot))
    }

    /// Whether what was written at `leader_epoch` on `slot` predates its last unclean
    /// election (see [`Config::unclean_elections`]).
    fn before_unclean(&self, slot: i32, leader_epoch: i32) -> bool {
        self.unclean_epoch.get(&slot).is_some_and(|e| leader_epoch < *e)
    }

    fn rep(&self, id: i32, slot: i32) -> &Replica {
        &self.brokers[&id].replicas[&slot]
    }

    fn rep_mut(&mut self, id: i32, slot: i32) -> &mut Replica {
        self.brokers.get_mut(&id).expect("broker").replicas.get_mut(&slot).expect("replica")
    }

    fn holds(&self, id: i32, slot: i32) -> bool {
        self.brokers[&id].replicas.contains_key(&slot)
    }

    fn next_call(&mut self) -> u64 {
        self.calls += 1;
        self.calls
    }

    fn step(&mut self, ev: Event) {
        match ev {
            Event::ControllerTick => self.controller_tick(),
            Event::BrokerTick(id) => self.broker_tick(id),
            Event::FlushStart(id) => self.flush_start(id),
            Event::FlushDone { id, partition, incarnation, end, generation, file } => {
                if self.incarnations.get(&(id as usize)).copied().unwrap_or(0) != incarnation
                    || !self.holds(id, partition)
                {
                    return; // the broker crashed (or dropped the replica) meanwhile: nobody waits
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
                if self.incarnations.get(&(id as usize)).copied().unwrap_or(0) != incarnation
                    || !self.holds(id, partition)
                {
                    return; // the broker crashed (or dropped the replica) meanwhile, and its inbox with it
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

    fn deliver(&mut self, to: usize, from: usize, msg: Msg) {
        match msg {
            Msg::InitReq { prod } => self.coord_init(prod),
            Msg::InitResp { prod, granted } => {
                let pr = &mut self.producers[prod];
                pr.init_sent = None;
                if let Some(ids) = granted {
                    if pr.ids.is_none() {
                        pr.ids = Some(ids);
                        // A new instance: a new transaction.
                        (pr.txn, pr.adding) = (self.next_txn, None);
                        self.next_txn += 1;
                        pr.added.clear();
                        pr.next_seq.fill(0);
                        pr.inflight = None;
                        pr.ending = None;
                        pr.txn_acked = 0;
                        pr.leader.fill((-1, -1)); // asks the metadata before its first write
                    }
                }
                self.trace(|| format!("producer {prod}: init answered {granted:?}"));
            }
            Msg::Produce { prod, index, batch, header, leader_epoch } => {
                // Appended with whatever else arrives for the partition in the next tick or two,
                // to the replica this broker holds under the name.
                let id = to as i32;
                let Some(partition) = self.held_slot(id, index) else {
                    // UNKNOWN_TOPIC_OR_PARTITION: the producer refreshes its metadata, retries.
                    let batch = (index, header.producer_id, header.producer_epoch, header.base_sequence);
                    return self.send(to, from, Msg::ProduceResp { prod, batch, result: ProduceResult::Retry });
                };
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
                // By topic id (Fetch v13): nothing from a replica of another incarnation.
                let fetched = match self.brokers[&(to as i32)].replicas.get(&partition) {
                    Some(r) => r.part.fetch(offset, 16 * 1024, leader_epoch, isolation).ok(),
                    None => None,
                };
                let aborted = fetched.as_ref().map(|f| f.aborted.clone()).unwrap_or_default();
                let records = fetched.map(|f| f.records);
                self.send(to, from, Msg::FetchResp { partition, offset, records, aborted, leader_epoch });
            }
            Msg::FetchResp { partition, offset, records, aborted, leader_epoch } => {
                if self.before_unclean(partition, leader_epoch) {
                    // Asked of a leadership an unclean election has since replaced: a consumer
                    // validates its position against the new leader epoch (KIP-320) and reads
                    // the new leader's log instead.
                    return;
                }
                self.consumer_answer(partition, offset, records, aborted)
            }
            Msg::EndTxn { prod, txn, producer_id, epoch, commit } => {
                self.coord_end((prod, txn), producer_id, epoch, commit)
            }
            Msg::EndTxnResp { prod, txn, granted, retry } => {
                let pr = &mut self.producers[prod];
                if pr.ending.is_none() || pr.txn != txn {
                    return; // a duplicated or late answer, or one to an earlier request
                }
                if retry {
                    return; // the end is resent on a later tick
                }
                pr.ending = None;
                pr.txn_acked = 0;
                pr.txn_size = 1 + self.rng.below(3) as u32;
                (pr.txn, pr.adding) = (self.next_txn, None);
                self.next_txn += 1;
                pr.added.clear();
                match granted {
                    // Version 2 bumps the epoch at every end (KIP-890): the next transaction
                    // starts at sequence 0. Version 1 keeps the epoch, and the sequences go on.
                    Some(ids) => {
                        if pr.ids != Some(ids) {
                            pr.next_seq.fill(0);
                        }
                        pr.ids = Some(ids);
                    }
                    None => pr.ids = None,
                }
                self.trace(|| format!("producer {prod}: transaction ended, continuing with {granted:?}"));
            }
            Msg::ProduceResp { prod, batch, result } => self.producer_answer(prod, batch, result),
            Msg::Verify { broker, partition, producer_id, epoch, transactional, guard, txn, verify_only } => {
                // The asking replica's topic id: one of a deleted topic is refused.
                let index = self.index(partition);
                let ok = match self.cluster.registration_topic_id(TOPIC, index, self.topic_id_of(partition)) {
                    Ok(topic_id) => {
                        let mut reg = Registration::new(producer_id, epoch, (TOPIC, topic_id), index, transactional);
                        reg.verify_only = verify_only;
                        matches!(self.coord_register(&reg, txn), RegisterDecision::Accept { .. })
                    }
                    Err(_) => false,
                };
                let resp = Msg::VerifyResp { partition, producer_id, epoch, transactional, guard, ok };
                self.send(COORD, broker as usize, resp);
            }
            Msg::VerifyResp { partition, producer_id, epoch, transactional, guard, ok } => {
                if !self.holds(to as i32, partition) {
                    return; // dropped meanwhile
                }
                let r = self.rep_mut(to as i32, partition);
                if ok {
                    // False when a marker landed meanwhile: the producer's retry asks again.
                    r.part.mark_verified(producer_id, epoch, transactional, guard);
                } else {
                    r.refused.insert((producer_id, epoch));
                }
            }
            Msg::AddPartitions { prod, txn, producer_id, epoch, index } => {
                // A client's request names the topic: the one under the name now.
                let (ok, fenced) = match self.live_slot(index).map(|slot| self.topic_id_of(slot)) {
                    Some(topic_id) => {
                        let reg = Registration {
                            transaction_version: 1,
                            ..Registration::new(producer_id, epoch, (TOPIC, topic_id), index, true)
                        };
                        match self.coord_register(&reg, Some(txn)) {
                            RegisterDecision::Accept { .. } => (true, false),
                            RegisterDecision::Refuse { status, .. } => {
                                (false, status.code != protocol::ErrorCode::ConcurrentTransactions)
                            }
                        }
                    }
                    None => (false, false),
                };
                self.send(COORD, producer_host(prod), Msg::AddPartitionsResp { prod, txn, index, ok, fenced });
            }
            Msg::AddPartitionsResp { prod, txn, index, ok, fenced } => {
                self.added_partition(prod, txn, index, ok, fenced)
            }
            Msg::Marker { tid, target, leader_epoch, commit } => {
                self.broker_marker(to as i32, tid, target, leader_epoch, commit)
            }
            Msg::MarkerResp { tid, epoch, producer_id, partition, topic_id, ok } => {
                self.coord_marker_done(tid, epoch, (producer_id, partition, topic_id), ok)
            }
            Msg::Heartbeat { broker, call, start, reports } => {
                let now = self.clock(COORD);
                if start.broker_epoch < 0 {
                    self.trace(|| format!("coordinator: broker {broker} registers as {start:?}"));
                }
                let registered = match self.cluster.handle_registration(now, broker, start, &reports) {
                    Ok((broker_epoch, moved)) => {
                        self.journal_cluster(moved, "elected (broker restarted)");
                        let refused = self.cluster.handle_refusals(now, broker, &reports);
                        self.journal_cluster(
                            refused,
                            "elected (a follower refused a leader lacking committed records)",
                        );
                        Ok(broker_epoch)
                    }
                    Err(status) => {
                        *self.out.decisions.entry("heartbeat of a superseded process refused").or_default() += 1;
                        self.trace(|| format!("coordinator: refused broker {broker}'s heartbeat {start:?}: {status}"));
                        Err(status.code)
                    }
                };
                let (assignments, deleted) = match registered {
                    Ok(_) => {
                        let assignments = self.cluster.handle_heartbeat(now, broker, &format!("b{broker}"), &reports).1;
                        let deleted = self.cluster.deleted_among(&reports).into_iter().map(|d| d.topic_id).collect();
                        (assignments, deleted)
                    }
                    Err(_) => (Vec::new(), Vec::new()),
                };
                self.send(COORD, broker as usize, Msg::HeartbeatResp { call, registered, assignments, deleted });
            }
            Msg::HeartbeatResp { call, registered, assignments, deleted } => {
                let id = to as i32;
                if self.brokers[&id].heartbeat_call.map(|(c, _)| c) != Some(call) {
                    return; // an answer to a call given up on
                }
                let b = self.brokers.get_mut(&id).expect("broker");
                b.heartbeat_call = None;
                match registered {
                    Ok(epoch) if b.broker_epoch < 0 => {
                        b.broker_epoch = epoch;
                        b.recorded_broker_epoch = epoch;
                        // The registration reported its lost replicas (a replica turns lost only
                        // when its process starts, before its first heartbeat), as the broker
                        // records in each one's mark.
                        for r in b.replicas.values() {
                            if let Err(e) = r.part.mark_lost_reported(epoch) {
                                return self.violate(format!("broker {id} cannot record a lost mark: {e}"));
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(protocol::ErrorCode::StaleBrokerEpoch) => b.broker_epoch = -1,
                    Err(_) => {}
                }
                // Replicas of deleted topics go; so does one the name now assigns under another id.
                for slot in self.slots(id) {
                    let id_now = self.topic_id_of(slot);
                    let index = self.index(slot);
                    let other = assignments.iter().any(|a| a.partition == index && a.topic_id != id_now);
                    if deleted.contains(&id_now) || other {
                        self.drop_replica(id, slot);
                    }
                }
                let now = self.clock(to);
                for mut a in assignments {
                    a.partition_epoch = self.unversioned(a.partition_epoch);
                    let Some(slot) = self.slot_of(a.topic_id, a.partition) else {
                        return self
                            .violate(format!("broker {id} was assigned a topic id the simulator never created"));
                    };
                    if !self.holds(id, slot) {
                        let disk = self.brokers[&id].disk.clone();
                        match new_replica(&disk, id, slot, &self.cfg) {
                            Ok(r) => {
                                self.brokers.get_mut(&id).expect("broker").replicas.insert(slot, r);
                            }
                            Err(e) => return self.violate(format!("broker {id} cannot create a replica: {e}")),
                        }
                    }
                    let part = &self.rep(id, slot).part;
                    part.set_topic_id(a.topic_id);
                    if self.cfg.mutation != Mutation::NoMinIsr {
                        part.set_min_insync_replicas(a.min_insync_replicas);
                    }
                    part.set_unclean_leader_epoch(a.unclean_leader_epoch);
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
            Msg::AlterIsr { call, req, slot } => {
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
                let leader_epoch = req.leader_epoch;
                let resp = Msg::AlterIsrResp { call, partition: slot, leader_epoch, resp };
                self.send(COORD, req.broker_id as usize, resp);
            }
            Msg::AlterIsrResp { call, partition, leader_epoch, resp } => {
                let id = to as i32;
                if !self.holds(id, partition) || self.rep(id, partition).alter_call.map(|(c, _)| c) != Some(call) {
                    return;
                }
                self.rep_mut(id, partition).alter_call = None;
                let mut resp = resp;
                resp.partition_epoch = self.unversioned(resp.partition_epoch);
                self.rep(id, partition).part.on_isr_answer(leader_epoch, &resp);
                self.after_broker_step(id);
            }
            Msg::Replicate { req, sent, from_slot } => {
                let id = to as i32;
                // To the replica this broker holds under the name.
                let Some(partition) = self.held_slot(id, req.partition) else { return };
                let checks = self.cfg.mutation != Mutation::NoLeaderEpochChecks;
                let mut generation = 0;
                let result = match self.rep(id, partition).part.apply_replicated_at(&req, checks) {
                    Ok((leo, g)) => {
                        generation = g;
                        Some(Ok(leo))
                    }
                    Err(ReplicateError::Mismatch { hint, diverging_epoch, .. }) => Some(Err((hint, diverging_epoch))),
                    Err(e) => {
                        let (from_offset, leader_epoch) = (req.from_offset, req.leader_epoch);
                        self.trace(|| {
                            format!("broker {id}: refused Replicate of partition {partition} from {from_offset} at leader epoch {leader_epoch}: {e}")
                        });
                        None
                    }
                };
                self.after_broker_step(id);
                if let Some(result) = result {
                    let resp = Msg::ReplicateResp {
                        partition: from_slot,
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
                if !self.holds(id, partition) {
                    return; // dropped meanwhile
                }
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
}
