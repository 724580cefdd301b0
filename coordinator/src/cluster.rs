//! Cluster metadata: brokers and their leases, topics, replicas, leaders, leader epochs, ISRs
//! and eligible leader replicas.
//!
//! Plain synchronous rules; time is a millisecond count passed in by the caller. Leases decide
//! *when* the coordinator moves a leadership (a broker whose lease expired loses its
//! leaderships at the next [`Cluster::handle_tick`]); they are never what keeps data safe. Safety
//! comes from the leader epoch every move bumps: replicas and the coordinator refuse requests
//! carrying an older one.
//!
//! ## Who may lead (KIP-966)
//! Every committed record is on every ISR member. A leader's high watermark does not move while
//! its ISR is smaller than the topic's `min.insync.replicas` (`broker::replication`), so a
//! replica that leaves the ISR while it shrinks below that minimum still holds every committed
//! record: it becomes an *eligible leader replica* (ELR), electable when no ISR member is live.
//! The ELR empties when the ISR is back at the minimum. A broker that restarted without its
//! logs intact (not synced, not stopped cleanly, the machine restarted; or another data
//! directory) leaves the ISR and the ELR of every partition: it may have lost acknowledged
//! records, so it is never elected on them. A replica whose log failed leaves them too.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use protocol::{
    AlterPartitionRequest, AlterPartitionResponse, Assignment, BrokerInfo, BrokerState, DeletedTopic, ErrorCode,
    PartitionInfo, PartitionState, ReplicaProgress, ReplicaReport, Status, TopicInfo,
};

use crate::entry::{Entry, FenceTarget, PartitionSnapshot};

/// Limits and defaults.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// How long a heartbeat keeps a broker alive, in milliseconds.
    pub broker_lease_ms: u64,
    /// Partitions of an auto-created topic.
    pub default_partitions: i32,
    /// Replicas of a topic created without a replication factor; `None`: min(3, live brokers).
    pub default_replication_factor: Option<i32>,
    /// `min.insync.replicas` of a topic created without one; `None`: 2 for topics of three or
    /// more replicas, else 1 (safer than Kafka's default of 1: an acks=all write is then on two
    /// disks at least). Never above the topic's replication factor.
    pub default_min_insync_replicas: Option<i32>,
    /// Whether Metadata may create unknown topics.
    pub auto_create_topics: bool,
    /// Most partitions one topic may have.
    pub topic_partitions_max: i32,
    /// Most partitions all topics together may have.
    pub cluster_partitions_max: i32,
    /// The transaction version offered to Kafka clients (`--transaction-version`): 2 (KIP-890
    /// part 2: an epoch bump per transaction, Produce v12, EndTxn v5, TxnOffsetCommit v5) or 1.
    pub transaction_version: i16,
}

/// Default of [`ClusterConfig::topic_partitions_max`].
pub const TOPIC_PARTITIONS_MAX_DEFAULT: i32 = 1_000;
/// Default of [`ClusterConfig::cluster_partitions_max`].
pub const CLUSTER_PARTITIONS_MAX_DEFAULT: i32 = 10_000;
/// Default of [`ClusterConfig::transaction_version`], as in Kafka 4.
pub const TRANSACTION_VERSION_DEFAULT: i16 = 2;

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            broker_lease_ms: 3_000,
            default_partitions: 1,
            default_replication_factor: None,
            default_min_insync_replicas: None,
            auto_create_topics: true,
            topic_partitions_max: TOPIC_PARTITIONS_MAX_DEFAULT,
            cluster_partitions_max: CLUSTER_PARTITIONS_MAX_DEFAULT,
            transaction_version: TRANSACTION_VERSION_DEFAULT,
        }
    }
}

/// What a broker's heartbeat says about the process that sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerStart {
    /// New at every start of the process.
    pub incarnation: i64,
    /// The broker epoch this coordinator assigned the process, -1 before its first answer
    /// (the heartbeat then registers it).
    pub broker_epoch: i64,
    /// The broker epoch last assigned a process of this broker on this data directory, -1 if
    /// none.
    pub previous_broker_epoch: i64,
    /// The id of its data directory, made with the directory.
    pub log_dir_id: i64,
    /// Whether its logs hold everything an earlier process of the broker acknowledged.
    pub intact: bool,
}

/// The process a broker id is registered to (KIP-903's broker epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Registration {
    broker_epoch: i64,
    incarnation: i64,
    log_dir_id: i64,
}

#[derive(Debug, Clone)]
struct Broker {
    addr: String,
    /// Its Kafka listener's address, empty if none.
    kafka_addr: String,
    lease_until_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Topic {
    /// `min.insync.replicas`, at most the replication factor.
    min_isr: i32,
    partitions: Vec<Partition>,
    /// Its id: another for a topic deleted and created again under the same name.
    id: u128,
    /// Its configs (`protocol::topic_config`, checked), `min.insync.replicas` aside.
    configs: BTreeMap<String, String>,
}

impl Topic {
    /// Its replication factor: its first partition's replica count, once any move of it under
    /// way completes (the replicas a move removes do not count).
    fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(1, |p| p.target().len())
    }

    fn config_pairs(&self) -> Vec<(String, String)> {
        self.configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Topic ids below this are reserved (0: Kafka's "no id"; 1: [`OFFSETS_PARTITION_ID`]); no
/// topic has one.
const TOPIC_ID_MIN: u128 = 2;

/// The id the transaction table gives the pseudo-partition of a transaction's group offsets
/// (AddOffsetsToTxn): no topic has it, so whether a marker is owed never depends on a name a
/// topic can have.
pub const OFFSETS_PARTITION_ID: u128 = 1;

/// Where a transaction marker goes now ([`Cluster::marker_route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerRoute {
    /// None is owed: the pseudo-partition of a transaction's group offsets, which the
    /// coordinator holds itself, or a partition whose topic was deleted and which no broker can
    /// still serve (see [`Cluster::drop_pending`]).
    NotNeeded,
    /// The partition's topic was deleted but a broker may still serve its old replica: wait.
    WaitForDrop,
    /// Write it to the partition's leader at this epoch (`leader_id` -1, or no address: none
    /// is available now; try again).
    Leader {
        /// The leader.
        leader_id: i32,
        /// Its leader epoch.
        leader_epoch: i32,
        /// Its address, if known.
        addr: Option<String>,
    },
}

/// A new topic's id: random, never a reserved one.
fn new_topic_id() -> u128 {
    loop {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).expect("the operating system's random source works");
        let id = u128::from_be_bytes(b);
        if id >= TOPIC_ID_MIN {
            return id;
        }
    }
}

/// The id of a topic created before topics had ids: derived from its name, so every replay
/// (and every broker) agrees on it.
pub fn legacy_topic_id(name: &str) -> u128 {
    let part = |seed: u8| {
        let mut bytes = vec![seed];
        bytes.extend_from_slice(name.as_bytes());
        u128::from(protocol::batch::crc32c(&bytes))
    };
    (part(1) << 96 | part(2) << 64 | part(3) << 32 | part(4)).max(TOPIC_ID_MIN)
}

/// `id`, or the name-derived id of a topic that predates ids.
fn topic_id_or_legacy(id: u128, name: &str) -> u128 {
    if id == 0 {
        legacy_topic_id(name)
    } else {
        id
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Partition {
    replicas: Vec<i32>,
    leader_id: i32,
    leader_epoch: i32,
    /// Moves on every leadership or ISR change (applied entry), so that a leader can tell a
    /// newer ISR from an older one under one leader epoch, and a stale or repeated ISR change
    /// is refused. Derived by replay; snapshots record it.
    partition_epoch: i32,
    isr: Vec<i32>,
    /// Eligible leader replicas: out of the ISR, and holding every committed record.
    elr: Vec<i32>,
    /// Replicas a move under way adds (catching up; empty when none is).
    adding: Vec<i32>,
    /// Replicas a move under way removes once every replica it keeps is in sync.
    removing: Vec<i32>,
}

impl Partition {
    /// A new partition on `replicas`, the first leading at epoch 0, all in sync.
    fn new(replicas: &[i32]) -> Self {
        Partition {
            replicas: replicas.to_vec(),
            leader_id: replicas.first().copied().unwrap_or(NO_LEADER),
            leader_epoch: 0,
            partition_epoch: 0,
            isr: replicas.to_vec(),
            elr: Vec::new(),
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    /// Whether a move is under way.
    fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas the partition had before the move under way (all of them when none is).
    fn original(&self) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| !self.adding.contains(r)).collect()
    }

    /// The replicas the move under way leaves (all of them when none is).
    fn target(&self) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| !self.removing.contains(r)).collect()
    }

    /// The eligible leader replicas after the ISR becomes `isr`, dropping `lost` (replicas that
    /// may have lost records): none once `isr` has `min_isr` members (the high watermark moves
    /// on without the others), else the earlier ones and every member leaving the ISR, which
    /// hold everything up to the high watermark, frozen from then on. In replica order.
    fn elr_after(&self, min_isr: i32, isr: &[i32], lost: &[i32]) -> Vec<i32> {
        if isr.len() as i32 >= min_isr.min(self.replicas.len() as i32) {
            return Vec::new();
        }
        self.replicas
            .iter()
            .copied()
            .filter(|r| (self.elr.contains(r) || self.isr.contains(r)) && !isr.contains(r) && !lost.contains(r))
            .collect()
    }
}

/// No leader is available (every in-sync replica is down).
pub const NO_LEADER: i32 = -1;

/// What happens to a partition whose last in-sync (or eligible) replica lost its log, or may
/// have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sole {
    /// It restarted without its logs intact. No replica provably holds every committed record
    /// any more: the partition goes offline (no leader, no ISR) rather than elect a replica
    /// that may hold less than another, until an operator asks for an unclean election
    /// ([`Cluster::handle_elect_leader`]). A partition of one replica keeps it as leader, at a
    /// new leader epoch: nothing else could hold more.
    Lost,
    /// Its log failed: the partition has no leader until the broker comes back with its log
    /// (it stays the one in-sync replica).
    Waits,
}

/// Brokers, topics, replicas and leaderships.
#[derive(Debug, Default)]
pub struct Cluster {
    config: ClusterConfig,
    /// The ACLs (`--authorizer`), kept with the rest of the cluster's metadata.
    pub acls: crate::acls::AclStore,
    /// The SCRAM credentials (KIP-554, `--scram-users-file`).
    pub credentials: crate::credentials::CredentialStore,
    brokers: BTreeMap<i32, Broker>,
    topics: BTreeMap<String, Topic>,
    /// Last progress each broker reported per partition: (log end offset, high watermark).
    reports: HashMap<(String, i32), BTreeMap<i32, (i64, i64)>>,
    /// What each broker last reported wrong with its replica of a partition (offline, lost,
    /// refusing its leader), for `admin describe`; in memory only.
    problems: HashMap<(String, i32), BTreeMap<i32, String>>,
    /// The process each broker id is registered to.
    registrations: HashMap<i32, Registration>,
    /// Replicas whose log failed, as their brokers reported (topic, partition, broker): never
    /// elected until the broker restarts. In memory only: a coordinator restart learns them
    /// again from the next heartbeats.
    offline: HashSet<(String, i32, i32)>,
    next_placement: usize,
    /// Deleted topics, by name, with the id each last had (a broker that was away when one was
    /// deleted drops its replicas on its next heartbeat).
    deleted: BTreeMap<String, u128>,
    /// Deleted topics some broker may still serve, by topic id: the name, and the brokers that
    /// held replicas and have not heartbeated without them since (or that reported one since).
    /// In memory only: a restart rebuilds it from the journal's deletions and from the
    /// heartbeats that report a replica of a deleted topic; a snapshot forgets who held one,
    /// which [`Cluster::drop_pending`] covers by waiting one lease after the start.
    dropping: BTreeMap<u128, (String, BTreeSet<i32>)>,
    /// Per partition, the leader epoch of its last unclean election: a replica leading at that
    /// epoch or later first cuts, above its high watermark, what it holds from before it, and a
    /// follower of such a leader may cut below its high watermark
    /// ([`Assignment::unclean_leader_epoch`]).
    unclean: BTreeMap<(String, i32), i32>,
    /// Until when a broker not heard from since this process started may still hold a lease
    /// granted by an earlier one ([`Cluster::set_started`]).
    earlier_leases_until_ms: u64,
    /// Know partitions by name, as before issue 28 ([`Cluster::set_topics_by_name`]).
    topics_by_name: bool,
    /// The recorded transaction version and its finalized-features epoch (0 and -1 until one is
    /// recorded).
    transaction_version: (i16, i64),
}

impl Cluster {
    /// An empty cluster.
    pub fn new(config: ClusterConfig) -> Self {
        Cluster { config, transaction_version: (0, -1), ..Default::default() }
    }

    /// This coordinator process started at `now_ms`: a broker may hold a lease an earlier one
    /// granted for one more lease.
    pub fn set_started(&mut self, now_ms: u64) {
        self.earlier_leases_until_ms = now_ms + self.config.broker_lease_ms;
    }

    /// The transaction version Kafka clients are offered and its finalized-features epoch (what
    /// heartbeat answers tell brokers): as recorded, or (0, -1) before any was.
    pub fn transaction_version(&self) -> (i16, i64) {
        self.transaction_version
    }

    /// The entry recording this process's configured transaction version, if the recorded one
    /// differs (applied here): one finalized-features epoch above the recorded one, so the epoch
    /// a client sees only grows. Written once a coordinator becomes active.
    pub fn record_transaction_version(&mut self) -> Option<Entry> {
        let (level, epoch) = self.transaction_version;
        if level == self.config.transaction_version {
            return None;
        }
        let entry = Entry::TransactionVersion { level: self.config.transaction_version, epoch: epoch.max(0) + 1 };
        self.apply(&entry);
        Some(entry)
    }

    /// Know partitions by name, as before issue 28 (the coordinator never does): a marker goes to
    /// whatever topic has its partition's name now, and a deleted topic's name is created again
    /// at once, while brokers may still serve the old replicas. Only for the simulator's
    /// mutation that shows what going by topic id prevents.
    pub fn set_topics_by_name(&mut self, on: bool) {
        self.topics_by_name = on;
    }

    fn alive(&self, id: i32, now_ms: u64) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.lease_until_ms > now_ms)
    }

    /// Whether broker `id` may lead `topic-partition` now: its lease is live and its replica's
    /// log has not failed.
    fn electable(&self, topic: &str, partition: i32, id: i32, now_ms: u64) -> bool {
        self.alive(id, now_ms) && !self.offline.contains(&(topic.to_string(), partition, id))
    }

    /// The brokers whose lease holds at `now_ms`.
    pub fn live_brokers(&self, now_ms: u64) -> Vec<i32> {
        self.brokers.iter().filter(|(_, b)| b.lease_until_ms > now_ms).map(|(id, _)| *id).collect()
    }

    fn broker_infos(&self, now_ms: u64) -> Vec<BrokerInfo> {
        self.brokers
            .iter()
            .map(|(id, b)| BrokerInfo {
                id: *id,
                addr: b.addr.clone(),
                kafka_addr: b.kafka_addr.clone(),
                alive: b.lease_until_ms > now_ms,
            })
            .collect()
    }

    /// Record the address of a broker's Kafka listener (from its heartbeat; empty: none).
    pub fn set_kafka_addr(&mut self, broker_id: i32, kafka_addr: &str) {
        if let Some(b) = self.brokers.get_mut(&broker_id) {
            if b.kafka_addr != kafka_addr {
                b.kafka_addr = kafka_addr.to_string();
            }
        }
    }

    /// The `min.insync.replicas` of a topic of `replication_factor` replicas created without one.
    fn default_min_isr(&self, replication_factor: i32) -> i32 {
        let m = self.config.default_min_insync_replicas.unwrap_or(if replication_factor >= 3 { 2 } else { 1 });
        m.clamp(1, replication_factor.max(1))
    }

    /// A broker's heartbeat carries `start`: which process sent it. A process that registered
    /// holds the broker epoch it was assigned; a heartbeat with another one comes from a
    /// superseded process (a late message of one that restarted) and is refused with
    /// STALE_BROKER_EPOCH, changing nothing. A process registers with broker epoch -1; it is
    /// taken as the broker's next process only if it names the current registration's epoch as
    /// its predecessor's (from its data directory) or that registration's lease has expired,
    /// else DUPLICATE_BROKER_REGISTRATION (it retries): so a late registration of a dead
    /// process cannot pass for a restart. Returns the process's broker epoch and the entries to
    /// persist before answering.
    ///
    /// A restart (a new registration after another) whose logs are intact keeps every ISR and
    /// ELR place (what it acknowledged is on its disk); the partitions it led get a new leader
    /// epoch all the same, since batches it had replicated but not synced may be gone, and what
    /// it writes now at those offsets must not pass for them on the followers that received
    /// them. A restart that is not intact, or with another data directory, may have lost
    /// acknowledged records: the broker leaves every ISR and ELR and its leaderships move to
    /// another in-sync replica (or an eligible one) under a new leader epoch; where it is the
    /// sole in-sync replica and no other is eligible it keeps leading, at a new epoch; and every
    /// other partition it is a replica of gets a new leader epoch too, so that its leader
    /// forgets what the old process acknowledged. It rejoins ISRs by catching up.
    ///
    /// `reports` are the replicas the process opened: one reported `lost` (damage cut at open,
    /// or a log ending below its checkpointed high watermark) is treated as a restart that is
    /// not intact, for its partition alone.
    pub fn handle_registration(
        &mut self,
        now_ms: u64,
        broker_id: i32,
        start: BrokerStart,
        reports: &[ReplicaReport],
    ) -> Result<(i64, Vec<Entry>), Status> {
        let current = self.registrations.get(&broker_id).copied();
        if start.broker_epoch >= 0 {
            return match current {
                Some(r) if r.broker_epoch == start.broker_epoch => Ok((r.broker_epoch, Vec::new())),
                _ => Err(Status::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!(
                        "broker {broker_id} heartbeats with broker epoch {}, but broker epoch {} is registered: a later \
                         process of broker {broker_id} took over, so this one is stale; stop it (two processes must \
                         not share a broker id)",
                        start.broker_epoch,
                        current.map_or(-1, |r| r.broker_epoch)
                    ),
                )),
            };
        }
        if let Some(r) = current.filter(|r| r.incarnation == start.incarnation) {
            // The same process registering again (its first answer was lost).
            return Ok((r.broker_epoch, Vec::new()));
        }
        if let Some(r) = current {
            if start.previous_broker_epoch != r.broker_epoch && self.alive(broker_id, now_ms) {
                return Err(Status::new(
                    ErrorCode::DuplicateBrokerRegistration,
                    format!(
                        "broker {broker_id} is registered to another process (broker epoch {}) whose lease is live, and \
                         this process does not follow it (its data directory names broker epoch {}); retry once \
                         that lease expires",
                        r.broker_epoch, start.previous_broker_epoch
                    ),
                ));
            }
        }
        let broker_epoch = current.map_or(1, |r| r.broker_epoch + 1).max(start.previous_broker_epoch + 1);
        // Journaled, so that a broker that restarts while the coordinator is down is still seen
        // to have restarted when the coordinator is back.
        let mut out = vec![Entry::BrokerIncarnation {
            broker_id,
            incarnation: start.incarnation,
            log_dir_id: start.log_dir_id,
            broker_epoch,
        }];
        // A new process reopened its logs.
        self.offline.retain(|(_, _, b)| *b != broker_id);
        let Some(previous) = current else {
            self.apply(&out[0]);
            return Ok((broker_epoch, out));
        };
        let all_lost = !start.intact || (previous.log_dir_id != 0 && previous.log_dir_id != start.log_dir_id);
        for (topic, t) in &self.topics {
            for (i, p) in t.partitions.iter().enumerate() {
                let i = i as i32;
                // (A replica of a deleted topic of that name, under another id, says nothing
                // about this one.)
                let of_this = |r: &ReplicaReport| r.topic_id == 0 || r.topic_id == t.id;
                // A loss an earlier registration of this broker reported took the replica out of
                // the ISR then; one in the ISR now was let back in after it refetched, and its
                // broker never read that ISR (paused, cut off) to clear its mark: not a loss.
                let stale = |r: &ReplicaReport| {
                    (0..=previous.broker_epoch).contains(&r.lost_reported_at) && p.isr.contains(&broker_id)
                };
                let lost = all_lost
                    || reports
                        .iter()
                        .any(|r| r.lost && r.topic == *topic && r.partition == i && of_this(r) && !stale(r));
                let change = if lost {
                    // Also where it is out of the ISR: a new leader epoch makes the leader
                    // forget what the old process acknowledged (KIP-903's case), so that only
                    // answers of the new process can bring it back in sync.
                    self.without_replica(now_ms, topic, i, broker_id, Sole::Lost).or_else(|| {
                        p.replicas.contains(&broker_id).then(|| Entry::LeaderChanged {
                            topic: topic.clone(),
                            partition: i,
                            leader_id: p.leader_id,
                            leader_epoch: p.leader_epoch + 1,
                            isr: p.isr.clone(),
                            elr: p.elr.clone(),
                        })
                    })
                } else if p.leader_id == broker_id {
                    Some(Entry::LeaderChanged {
                        topic: topic.clone(),
                        partition: i,
                        leader_id: broker_id,
                        leader_epoch: p.leader_epoch + 1,
                        isr: p.isr.clone(),
                        elr: p.elr.clone(),
                    })
                } else {
                    None
                };
                out.extend(change);
            }
        }
        for e in &out {
            self.apply(e);
        }
        Ok((broker_epoch, out))
    }

    /// The change that takes `broker_id`'s replica of `topic-partition` out of its ISR and ELR
    /// (it lost its log or may have), moving its leadership; `None` if it is in neither.
    fn without_replica(&self, now_ms: u64, topic: &str, partition: i32, broker_id: i32, sole: Sole) -> Option<Entry> {
        let t = self.topics.get(topic)?;
        let p = t.partitions.get(partition as usize)?;
        if !p.isr.contains(&broker_id) && !p.elr.contains(&broker_id) {
            return None;
        }
        let leader_changed = |leader_id, isr: Vec<i32>, elr| {
            Some(Entry::LeaderChanged {
                topic: topic.to_string(),
                partition,
                leader_id,
                leader_epoch: p.leader_epoch + 1,
                isr,
                elr,
            })
        };
        if !p.isr.contains(&broker_id) {
            if p.isr.is_empty() && p.elr == [broker_id] {
                // It was the last replica that could lead (the in-sync ones all lost their logs
                // before): as a sole in-sync replica.
                return match sole {
                    Sole::Lost => leader_changed(NO_LEADER, Vec::new(), Vec::new()),
                    Sole::Waits => leader_changed(NO_LEADER, vec![broker_id], Vec::new()),
                };
            }
            // Only eligible: it leaves the ELR; the leader and the ISR stay, under a new leader
            // epoch all the same (the leader forgets what the replica acknowledged before).
            let elr = p.elr.iter().copied().filter(|b| *b != broker_id).collect();
            return leader_changed(p.leader_id, p.isr.clone(), elr);
        }
        let lost = [broker_id];
        if p.isr == lost {
            let eligible: Vec<i32> = p.elr.iter().copied().filter(|b| *b != broker_id).collect();
            if let Some(c) = eligible.iter().copied().find(|b| self.electable(topic, partition, *b, now_ms)) {
                return leader_changed(c, vec![c], p.elr_after(t.min_isr, &[c], &lost));
            }
            if !eligible.is_empty() {
                // The eligible replicas are down: no leader until one is back.
                return leader_changed(NO_LEADER, Vec::new(), eligible);
            }
            return match sole {
                Sole::Lost if p.replicas == lost => leader_changed(broker_id, p.isr.clone(), Vec::new()),
                Sole::Lost => leader_changed(NO_LEADER, Vec::new(), Vec::new()),
                Sole::Waits => leader_changed(NO_LEADER, p.isr.clone(), Vec::new()),
            };
        }
        let isr: Vec<i32> = p.isr.iter().copied().filter(|b| *b != broker_id).collect();
        let elr = p.elr_after(t.min_isr, &isr, &lost);
        let leader_id = if p.leader_id == broker_id {
            isr.iter()
                .chain(elr.iter())
                .copied()
                .find(|b| self.electable(topic, partition, *b, now_ms))
                .unwrap_or(NO_LEADER)
        } else {
            p.leader_id
        };
        if leader_id != p.leader_id && !isr.contains(&leader_id) && leader_id != NO_LEADER {
            // Elected from the ELR: the ISR starts again from it.
            return leader_changed(leader_id, vec![leader_id], p.elr_after(t.min_isr, &[leader_id], &lost));
        }
        leader_changed(leader_id, isr, elr)
    }

    /// A broker's heartbeat reports replicas whose log failed (Kafka's offline log directory,
    /// KIP-112): each leaves its ISR and ELR, and its leadership moves to another in-sync (or
    /// eligible) replica under a new leader epoch, so that a healthy replica takes the writes.
    /// Where it is the only in-sync replica, the partition has no leader until the broker comes
    /// back with a working log (a restart). Returns the entries to persist before answering.
    pub fn handle_offline(&mut self, now_ms: u64, broker_id: i32, reports: &[ReplicaReport]) -> Vec<Entry> {
        let mut out = Vec::new();
        for r in reports.iter().filter(|r| r.offline) {
            if !self.partition(&r.topic, r.partition).is_some_and(|p| p.replicas.contains(&broker_id)) {
                continue; // moved away (a reassignment): it is dropped, not the partition's
            }
            if !self.offline.insert((r.topic.clone(), r.partition, broker_id)) {
                continue;
            }
            if let Some(e) = self.without_replica(now_ms, &r.topic, r.partition, broker_id, Sole::Waits) {
                self.apply(&e);
                out.push(e);
            }
        }
        out
    }

    /// A broker's heartbeat reports followers refusing their leader's replication because it
    /// would cut records they hold committed: a leader elected from the ISR holds every
    /// committed record, so this one does not (damage its restart did not find). Outside an
    /// unclean election (where the follower does not refuse), the leader is taken out of the ISR
    /// and ELR as a lost replica would be, and the leadership moves to an in-sync or eligible
    /// replica, under a new leader epoch; with none electable, the partition waits without a
    /// leader (an operator may elect the refusing replica, `admin elect-leader --unclean`). Only
    /// a refusal of the current leader epoch counts. Returns the entries to persist.
    pub fn handle_refusals(&mut self, now_ms: u64, broker_id: i32, reports: &[ReplicaReport]) -> Vec<Entry> {
        let mut out = Vec::new();
        for r in reports.iter().filter(|r| r.refused_leader_epoch >= 0) {
            let Some((leader, leader_epoch, _)) = self.leader_of(&r.topic, r.partition) else { continue };
            if leader_epoch != r.refused_leader_epoch || leader == broker_id || leader == NO_LEADER {
                continue;
            }
            if !self.partition(&r.topic, r.partition).is_some_and(|p| p.replicas.contains(&broker_id)) {
                continue; // moved away: its refusal says nothing of the leader
            }
            if self.topics.get(&r.topic).is_some_and(|t| r.topic_id != 0 && r.topic_id != t.id) {
                continue;
            }
            if let Some(e) = self.without_replica(now_ms, &r.topic, r.partition, leader, Sole::Waits) {
                tracing::warn!(
                    topic = %r.topic,
                    partition = r.partition,
                    leader,
                    leader_epoch,
                    follower = broker_id,
                    "a follower refuses to cut committed records to its leader: the leader lacks them; moving the leadership"
                );
                self.apply(&e);
                out.push(e);
            }
        }
        out
    }

    /// A broker heartbeat: registers or renews its lease, records its replicas' progress, and
    /// returns the lease, every replica it hosts, and the brokers' addresses.
    pub fn handle_heartbeat(
        &mut self,
        now_ms: u64,
        broker_id: i32,
        addr: &str,
        reports: &[ReplicaReport],
    ) -> (u64, Vec<Assignment>, Vec<BrokerInfo>) {
        let lease_until_ms = now_ms + self.config.broker_lease_ms;
        // A deleted topic this broker no longer reports is dropped there; one it reports (a
        // broker that was away when it was deleted) it may still serve.
        for d in self.deleted_among(reports) {
            let entry = self.dropping.entry(d.topic_id).or_insert_with(|| (d.name.clone(), BTreeSet::new()));
            entry.1.insert(broker_id);
        }
        self.dropping.retain(|id, (name, holders)| {
            if !reports.iter().any(|r| r.topic_id == *id || (r.topic_id == 0 && r.topic == *name)) {
                holders.remove(&broker_id);
            }
            !holders.is_empty()
        });
        let kafka_addr = self.brokers.get(&broker_id).map(|b| b.kafka_addr.clone()).unwrap_or_default();
        self.brokers.insert(broker_id, Broker { addr: addr.to_string(), kafka_addr, lease_until_ms });
        for r in reports {
            // (A replica moved away reports until it is dropped: not the partition's any more.)
            let current = self.topics.get(&r.topic).is_some_and(|t| {
                (r.topic_id == 0 || r.topic_id == t.id)
                    && t.partitions.get(r.partition as usize).is_some_and(|p| p.replicas.contains(&broker_id))
            });
            if current {
                let key = (r.topic.clone(), r.partition);
                self.reports.entry(key.clone()).or_default().insert(broker_id, (r.log_end_offset, r.high_watermark));
                if r.problem.is_empty() {
                    if let Some(p) = self.problems.get_mut(&key) {
                        p.remove(&broker_id);
                    }
                } else {
                    self.problems.entry(key).or_default().insert(broker_id, r.problem.clone());
                }
            }
        }
        let unclean = &self.unclean;
        let assignments = self
            .topics
            .iter()
            .flat_map(|(name, t)| {
                t.partitions.iter().enumerate().filter(|(_, p)| p.replicas.contains(&broker_id)).map(move |(i, p)| {
                    Assignment {
                        topic: name.clone(),
                        partition: i as i32,
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        min_insync_replicas: t.min_isr,
                        topic_id: t.id,
                        unclean_leader_epoch: unclean.get(&(name.clone(), i as i32)).copied().unwrap_or(-1),
                        configs: t.config_pairs(),
                    }
                })
            })
            .collect();
        (self.config.broker_lease_ms, assignments, self.broker_infos(now_ms))
    }

    /// Partitions of every topic together.
    fn partition_count(&self) -> i64 {
        self.topics.values().map(|t| t.partitions.len() as i64).sum()
    }

    /// Create a topic; returns the entry to persist before answering. `replication_factor` and
    /// `min_insync_replicas` <= 0 mean the defaults.
    pub fn handle_create_topic(
        &mut self,
        now_ms: u64,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        min_insync_replicas: i32,
    ) -> Result<Entry, Status> {
        self.handle_create_topic_with(now_ms, name, (partitions, replication_factor, min_insync_replicas), &[])
    }

    /// [`Cluster::handle_create_topic`] with the topic's configs (`protocol::topic_config`;
    /// a `min.insync.replicas` among them is the topic's, and wins over the argument).
    pub fn handle_create_topic_with(
        &mut self,
        now_ms: u64,
        name: &str,
        (partitions, replication_factor, min_insync_replicas): (i32, i32, i32),
        configs: &[(String, String)],
    ) -> Result<Entry, Status> {
        let entry =
            self.plan_create_topic_with(now_ms, name, (partitions, replication_factor, min_insync_replicas), configs)?;
        if let Entry::TopicCreated { replicas, .. } = &entry {
            self.next_placement = self.next_placement.wrapping_add(replicas.len());
        }
        self.apply(&entry);
        Ok(entry)
    }

    /// What [`Cluster::handle_create_topic`] would do (the entry it would apply), changing
    /// nothing: CreateTopics' `validate_only`.
    pub fn plan_create_topic(
        &self,
        now_ms: u64,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        min_insync_replicas: i32,
    ) -> Result<Entry, Status> {
        self.plan_create_topic_with(now_ms, name, (partitions, replication_factor, min_insync_replicas), &[])
    }

    /// [`Cluster::plan_create_topic`] with the topic's configs.
    pub fn plan_create_topic_with(
        &self,
        now_ms: u64,
        name: &str,
        (partitions, replication_factor, min_insync_replicas): (i32, i32, i32),
        configs: &[(String, String)],
    ) -> Result<Entry, Status> {
        if let Err(why) = protocol::names::validate_topic(name) {
            return Err(Status::new(ErrorCode::InvalidTopicException, why));
        }
        if protocol::names::is_reserved_topic(name) {
            return Err(Status::new(ErrorCode::InvalidRequest, protocol::names::reserved_topic_refusal(name)));
        }
        // -1: the coordinator's default (Kafka's num.partitions).
        let partitions = if partitions == -1 { self.config.default_partitions } else { partitions };
        let max = self.config.topic_partitions_max;
        if partitions < 1 || partitions > max {
            return Err(Status::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "{partitions} partitions asked for topic '{name}'; a topic may have 1..={max} \
                     (the coordinator's --topic-partitions-max)"
                ),
            ));
        }
        self.check_cluster_partitions(name, partitions)?;
        if self.topics.contains_key(name) {
            return Err(Status::new(ErrorCode::TopicAlreadyExists, format!("topic '{name}' already exists")));
        }
        if let Some(holders) = self.deleted_still_served(name, now_ms).filter(|_| !self.topics_by_name) {
            // Until they drop them, those brokers take writes by the name into the old
            // replicas: writes meant for the new topic would vanish with them.
            return Err(Status::new(
                ErrorCode::LeaderNotAvailable,
                format!(
                    "topic '{name}' was deleted and broker(s) {holders:?} may still serve its old replicas; it can be \
                     created again once they have dropped them (at their next heartbeat, or when their lease \
                     lapses): retry shortly"
                ),
            ));
        }
        let live = self.live_brokers(now_ms);
        if live.is_empty() {
            return Err(Status::new(
                ErrorCode::BrokerNotAvailable,
                format!("no live broker to place topic '{name}' on; start a broker and retry"),
            ));
        }
        let rf = if replication_factor > 0 {
            replication_factor
        } else {
            self.config.default_replication_factor.unwrap_or_else(|| (live.len() as i32).min(3))
        };
        if rf < 1 || rf as usize > live.len() {
            return Err(Status::new(
                ErrorCode::InvalidReplicationFactor,
                format!("replication factor {rf} for topic '{name}' but {} live broker(s)", live.len()),
            ));
        }
        let mut configs = protocol::topic_config::check_all(configs, rf)
            .map_err(|why| Status::new(ErrorCode::InvalidConfig, format!("topic '{name}': {why}")))?;
        let min_insync_replicas = match configs.remove(protocol::topic_config::MIN_INSYNC_REPLICAS) {
            Some(v) => v.parse().unwrap_or(min_insync_replicas),
            None => min_insync_replicas,
        };
        let min_isr = if min_insync_replicas > 0 { min_insync_replicas } else { self.default_min_isr(rf) };
        if min_isr > rf {
            return Err(Status::new(
                ErrorCode::InvalidConfig,
                format!(
                    "min.insync.replicas {min_isr} is above the replication factor {rf} of topic '{name}': every \
                     acks=all write would be refused; ask for at most {rf}"
                ),
            ));
        }
        let replicas = self.place(&live, partitions as usize, rf as usize);
        Ok(Entry::TopicCreated {
            name: name.to_string(),
            replicas,
            min_insync_replicas: min_isr,
            topic_id: new_topic_id(),
            configs: configs.into_iter().collect(),
        })
    }

    /// AlterConfigs on topic `name` (IncrementalAlterConfigs, or with `replace` AlterConfigs:
    /// the configs not named go back to the brokers' defaults, `min.insync.replicas` to the
    /// coordinator's): the entry to persist before answering, applied; `None` under
    /// `validate_only`, or when the change leaves the topic as it is (nothing to journal).
    /// INVALID_CONFIG naming the config for one Kafka knows and epochfence does not apply, or
    /// a bad value; UNKNOWN_TOPIC_OR_PARTITION for no such topic.
    pub fn handle_alter_configs(
        &mut self,
        name: &str,
        changes: &[protocol::ConfigChange],
        replace: bool,
        validate_only: bool,
    ) -> Result<Option<Entry>, Status> {
        use protocol::topic_config::{apply_ops, ConfigOp, MIN_INSYNC_REPLICAS};
        let Some(t) = self.topics.get(name) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("no topic '{name}'")));
        };
        let rf = t.replication_factor() as i32;
        let mut current = t.configs.clone();
        current.insert(MIN_INSYNC_REPLICAS.to_string(), t.min_isr.to_string());
        let ops: Vec<(String, ConfigOp)> = changes
            .iter()
            .map(|c| match c {
                protocol::ConfigChange::Set(k, v) => (k.clone(), ConfigOp::Set(v.clone())),
                protocol::ConfigChange::Delete(k) => (k.clone(), ConfigOp::Delete),
            })
            .collect();
        let mut next = apply_ops(&current, &ops, replace, rf)
            .map_err(|why| Status::new(ErrorCode::InvalidConfig, format!("topic '{name}': {why}")))?;
        let min_isr = match next.remove(MIN_INSYNC_REPLICAS) {
            Some(v) => v.parse().unwrap_or(t.min_isr),
            None => self.default_min_isr(rf),
        };
        if validate_only || (next == t.configs && min_isr == t.min_isr) {
            return Ok(None);
        }
        let entry = Entry::TopicConfigs {
            name: name.to_string(),
            topic_id: t.id,
            min_insync_replicas: min_isr,
            configs: next.into_iter().collect(),
        };
        self.apply(&entry);
        Ok(Some(entry))
    }

    /// Replicas for `partitions` new partitions of `rf` each, round-robin over `live` from where
    /// the last placement stopped.
    fn place(&self, live: &[i32], partitions: usize, rf: usize) -> Vec<Vec<i32>> {
        (0..partitions).map(|i| (0..rf).map(|j| live[(self.next_placement + i + j) % live.len()]).collect()).collect()
    }

    /// Refuse `more` partitions for topic `name` if the cluster would pass its limit.
    fn check_cluster_partitions(&self, name: &str, more: i32) -> Result<(), Status> {
        let (have, cluster_max) = (self.partition_count(), i64::from(self.config.cluster_partitions_max));
        if have + i64::from(more) > cluster_max {
            return Err(Status::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "topic '{name}' with {more} more partitions would take the cluster past {cluster_max} \
                     partitions (the coordinator's --cluster-partitions-max; {have} exist): delete topics or \
                     raise the limit"
                ),
            ));
        }
        Ok(())
    }

    /// Delete a topic named by `name` (or, empty, by `topic_id`; with both they must match).
    /// Its partitions disappear from every broker's assignments; its brokers drop their
    /// replicas, and a topic created later under the name is another (another id).
    pub fn handle_delete_topic(&mut self, name: &str, topic_id: u128) -> Result<Entry, Status> {
        let found = if name.is_empty() {
            self.topics.iter().find(|(_, t)| t.id == topic_id).map(|(n, t)| (n.clone(), t.id))
        } else {
            self.topics.get(name).map(|t| (name.to_string(), t.id)).filter(|(_, id)| topic_id == 0 || *id == topic_id)
        };
        let Some((name, topic_id)) = found else {
            let what = if name.is_empty() { format!("topic id {topic_id:032x}") } else { format!("topic '{name}'") };
            let code = if name.is_empty() { ErrorCode::UnknownTopicId } else { ErrorCode::UnknownTopicOrPartition };
            return Err(Status::new(code, format!("{what} does not exist")));
        };
        let entry = Entry::TopicDeleted { name, topic_id };
        self.apply(&entry);
        Ok(entry)
    }

    /// Give topic `name` `count` partitions in all (more than it has), placed as a new topic's
    /// are; with `validate_only` only check.
    pub fn handle_create_partitions(
        &mut self,
        now_ms: u64,
        name: &str,
        count: i32,
        assignments: &[Vec<i32>],
        validate_only: bool,
    ) -> Result<Option<Entry>, Status> {
        let Some(t) = self.topics.get(name) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("topic '{name}' does not exist")));
        };
        let have = t.partitions.len() as i32;
        let max = self.config.topic_partitions_max;
        if count <= have || count > max {
            return Err(Status::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "topic '{name}' has {have} partitions; ask for more than that, and at most {max} (the \
                     coordinator's --topic-partitions-max)"
                ),
            ));
        }
        self.check_cluster_partitions(name, count - have)?;
        let rf = t.replication_factor();
        let live = self.live_brokers(now_ms);
        if !assignments.is_empty() {
            Self::check_assignments(name, assignments, (count - have) as usize, rf, &live)?;
        } else if live.len() < rf {
            return Err(Status::new(
                ErrorCode::InvalidReplicationFactor,
                format!("topic '{name}' has {rf} replicas per partition but {} live broker(s)", live.len()),
            ));
        }
        let replicas =
            if assignments.is_empty() { self.place(&live, (count - have) as usize, rf) } else { assignments.to_vec() };
        let entry = Entry::PartitionsAdded { name: name.to_string(), replicas };
        if validate_only {
            return Ok(None);
        }
        if assignments.is_empty() {
            self.next_placement = self.next_placement.wrapping_add((count - have) as usize);
        }
        self.apply(&entry);
        Ok(Some(entry))
    }

    /// Whether `assignments` (CreatePartitions' replica lists) can be followed for `new` new
    /// partitions of topic `name` with `rf` replicas each: one list per new partition, `rf`
    /// distinct live brokers in each (Kafka's INVALID_REPLICA_ASSIGNMENT otherwise).
    fn check_assignments(
        name: &str,
        assignments: &[Vec<i32>],
        new: usize,
        rf: usize,
        live: &[i32],
    ) -> Result<(), Status> {
        let refuse = |why: String| {
            Err(Status::new(
                ErrorCode::InvalidReplicaAssignment,
                format!("topic '{name}': {why}; give one list of replicas per new partition, or none"),
            ))
        };
        if assignments.len() != new {
            return refuse(format!("{} replica lists for {new} new partitions", assignments.len()));
        }
        for (i, replicas) in assignments.iter().enumerate() {
            if replicas.len() != rf {
                return refuse(format!("new partition {i} is given {} replicas, the topic has {rf}", replicas.len()));
            }
            if let Some((j, b)) = replicas.iter().enumerate().find(|(j, b)| replicas[..*j].contains(b)) {
                return refuse(format!("new partition {i} names broker {b} twice (at {j})"));
            }
            if let Some(b) = replicas.iter().find(|b| !live.contains(b)) {
                return refuse(format!("new partition {i} names broker {b}, which is not live (live: {live:?})"));
            }
        }
        Ok(())
    }

    /// The deleted topics among `reports` (a broker's replicas): it drops the replicas that
    /// carry the id each had. A replica is of a deleted topic when it carries an id that is not
    /// its name's current one (the name was deleted, or deleted and created again, while the
    /// broker was away), or, from a broker that does not know its replica's id, when its name
    /// was deleted and not created again. A name this coordinator never knew is left alone.
    pub fn deleted_among(&self, reports: &[ReplicaReport]) -> Vec<DeletedTopic> {
        let mut out: Vec<DeletedTopic> = Vec::new();
        for r in reports {
            let stale = match (self.topics.get(&r.topic), r.topic_id) {
                (Some(_), 0) => None,
                (Some(t), id) if t.id == id => None,
                (Some(_), id) => Some(id),
                (None, 0) => self.deleted.get(&r.topic).copied(),
                (None, id) => (self.deleted.contains_key(&r.topic) || self.dropping.contains_key(&id)).then_some(id),
            };
            if let Some(topic_id) = stale {
                if !out.iter().any(|d| d.name == r.topic && d.topic_id == topic_id) {
                    out.push(DeletedTopic { name: r.topic.clone(), topic_id });
                }
            }
        }
        out
    }

    /// Whether `topic` exists.
    pub fn topic_exists(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Every topic: name -> (topic id, partition count), what KIP-848 consumer groups subscribe
    /// to.
    pub fn topic_ids(&self) -> crate::consumer_group::Topics {
        self.topics.iter().map(|(name, t)| (name.clone(), (t.id, t.partitions.len() as i32))).collect()
    }

    /// Every topic's name by its id.
    pub fn topic_names(&self) -> BTreeMap<u128, String> {
        self.topics.iter().map(|(name, t)| (t.id, name.clone())).collect()
    }

    /// The id of topic `name`, if it exists.
    pub fn topic_id(&self, name: &str) -> Option<u128> {
        self.topics.get(name).map(|t| t.id)
    }

    /// Where a marker owed to `t` goes now. By topic id: a topic created again under the name
    /// is another topic, and the partition the marker is owed to is the deleted one's (an entry
    /// from before registrations carried ids names the topic). Whether one is owed never
    /// depends on a name a topic can have: the offsets pseudo-partition has a topic id no topic
    /// has (entries from before ids name it, and no topic could be created under that name
    /// since).
    pub fn marker_route(&self, t: &FenceTarget, now_ms: u64) -> MarkerRoute {
        if t.topic_id == OFFSETS_PARTITION_ID || (t.topic_id == 0 && t.topic == crate::groups::OFFSETS_TOPIC) {
            return MarkerRoute::NotNeeded;
        }
        let id = match t.topic_id {
            _ if self.topics_by_name => self.topic_id(&t.topic).unwrap_or(t.topic_id),
            0 => self.topic_id(&t.topic).or_else(|| self.deleted_topic_id(&t.topic)).unwrap_or(0),
            id => id,
        };
        // A topic id names one topic, under one name: the target's.
        let live = self.topics.get(&t.topic).is_some_and(|topic| topic.id == id);
        match live.then(|| self.leader_of(&t.topic, t.partition)).flatten() {
            Some((leader_id, leader_epoch, addr)) => MarkerRoute::Leader { leader_id, leader_epoch, addr },
            None if id != 0 && self.drop_pending(id, now_ms) => MarkerRoute::WaitForDrop,
            // Deleted since it was registered (or the partition is not in it), and no broker
            // can still serve the old replica: no write can reach it, so there is nothing to
            // fence, and the transaction may end.
            None => MarkerRoute::NotNeeded,
        }
    }

    /// Whether a write to `topic`-`partition` may be registered (AddPartitionsToTxn, a leader's
    /// verification), asked by a replica of the topic with id `asking_topic_id` (0: unknown, a
    /// client's request): the id to register it under, or why not. A registration is a promise
    /// to fence that partition later, so only real partitions of a topic that exists, never a
    /// reserved name, and never for a replica of a deleted topic of that name (on a broker that
    /// has not dropped it yet): no marker will ever go there.
    pub fn registration_topic_id(&self, topic: &str, partition: i32, asking_topic_id: u128) -> Result<u128, Status> {
        if protocol::names::is_reserved_topic(topic) {
            return Err(Status::new(
                ErrorCode::InvalidTopicException,
                format!("topic name '{topic}' is reserved for Kafka's internal topics: no write goes there"),
            ));
        }
        let Some(topic_id) = self.leader_of(topic, partition).and(self.topic_id(topic)) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")));
        };
        if asking_topic_id != 0 && asking_topic_id != topic_id {
            return Err(Status::new(
                ErrorCode::UnknownTopicOrPartition,
                format!(
                    "{topic}-{partition}: this replica belongs to a deleted topic of that name (topic id \
                     {asking_topic_id:032x}); the topic now has another id and other replicas: refresh metadata"
                ),
            ));
        }
        Ok(topic_id)
    }

    /// The id topic `name` had when it was last deleted, if it was.
    pub fn deleted_topic_id(&self, name: &str) -> Option<u128> {
        self.deleted.get(name).copied()
    }

    /// Whether a broker may still serve a replica of the deleted topic with id `topic_id`: one
    /// that held it (or reported it since) has not heartbeated without it and its lease holds,
    /// or this process started less than a lease ago (a broker it has not heard from may hold a
    /// lease an earlier process granted, and a replica nobody told it to drop). A marker owed
    /// to such a partition waits for this to end, so a fence is answered only once the zombie
    /// cannot write there either; then it is dropped.
    pub fn drop_pending(&self, topic_id: u128, now_ms: u64) -> bool {
        self.drop_pending_inner(topic_id, now_ms)
    }

    /// The live brokers that may still serve replicas of a deleted topic named `name` (they
    /// held one and have not heartbeated without it since; after a restart, any broker within a
    /// lease of the start), if any: the name is not created again before they drop them.
    pub fn deleted_still_served(&self, name: &str, now_ms: u64) -> Option<Vec<i32>> {
        let mut holders: Vec<i32> = self
            .dropping
            .values()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, h)| h.iter().copied())
            .filter(|b| self.alive(*b, now_ms))
            .collect();
        holders.sort_unstable();
        holders.dedup();
        if holders.is_empty() && self.deleted.contains_key(name) && now_ms < self.earlier_leases_until_ms {
            holders = self.brokers.keys().copied().collect();
        }
        (!holders.is_empty()).then_some(holders)
    }

    fn drop_pending_inner(&self, topic_id: u128, now_ms: u64) -> bool {
        if self.topics.values().any(|t| t.id == topic_id) {
            return false;
        }
        let holder =
            self.dropping.get(&topic_id).is_some_and(|(_, holders)| holders.iter().any(|b| self.alive(*b, now_ms)));
        holder || now_ms < self.earlier_leases_until_ms
    }

    /// Move leaderships away from brokers whose lease expired (or whose replica's log failed),
    /// and give leaderless partitions a leader once an in-sync replica is back, or, with none
    /// live, an eligible one (KIP-966). A follower whose broker's lease expired leaves the ISR at
    /// once (as Kafka's controller takes a fenced broker out of every ISR), into the ELR if the
    /// ISR is then below `min.insync.replicas`: the leader's high watermark does not wait for it
    /// until the replica lag timeout. Returns the entries to persist; brokers learn the changes
    /// from their next heartbeat, which is answered only once these are durable.
    pub fn handle_tick(&mut self, now_ms: u64) -> Vec<Entry> {
        let mut out = Vec::new();
        for (topic, t) in &self.topics {
            for (i, p) in t.partitions.iter().enumerate() {
                let i = i as i32;
                let live = |b: i32| self.electable(topic, i, b, now_ms);
                if p.reassigning() && p.leader_id != NO_LEADER && live(p.leader_id) {
                    let target = p.target();
                    if target.iter().all(|r| p.isr.contains(r)) {
                        // Every replica the move keeps is in sync: complete it.
                        match self.replicas_change(now_ms, topic, i, &target) {
                            Ok(e) => {
                                out.push(e);
                                continue;
                            }
                            Err(why) => tracing::debug!(%topic, partition = i, why, "a move cannot complete yet"),
                        }
                    }
                }
                if p.leader_id != NO_LEADER && live(p.leader_id) {
                    if p.isr.iter().any(|b| !self.alive(*b, now_ms)) {
                        let isr: Vec<i32> = p.isr.iter().copied().filter(|b| self.alive(*b, now_ms)).collect();
                        let elr = p.elr_after(t.min_isr, &isr, &[]);
                        let (leader_epoch, partition) = (p.leader_epoch, i);
                        out.push(Entry::IsrChanged { topic: topic.clone(), partition, leader_epoch, isr, elr });
                    }
                    continue;
                }
                let changed = |leader_id, isr: Vec<i32>, elr| Entry::LeaderChanged {
                    topic: topic.clone(),
                    partition: i,
                    leader_id,
                    leader_epoch: p.leader_epoch + 1,
                    isr,
                    elr,
                };
                if let Some(c) = p.isr.iter().copied().find(|b| *b != p.leader_id && live(*b)) {
                    // A lost leader leaves the ISR (into the ELR if the ISR is now below the
                    // minimum), and so does every other member whose lease expired.
                    let isr: Vec<i32> =
                        p.isr.iter().copied().filter(|b| *b != p.leader_id && self.alive(*b, now_ms)).collect();
                    let elr = p.elr_after(t.min_isr, &isr, &[]);
                    out.push(changed(c, isr, elr));
                } else if let Some(c) = p.elr.iter().copied().find(|b| live(*b)) {
                    // No in-sync replica is live, but an eligible one holds every committed record.
                    out.push(changed(c, vec![c], p.elr_after(t.min_isr, &[c], &[])));
                } else if p.leader_id != NO_LEADER {
                    // The old leader may be the only replica with every committed record:
                    // keep it in the ISR, take away its leadership, wait for it.
                    out.push(changed(NO_LEADER, p.isr.clone(), p.elr.clone()));
                }
            }
        }
        for e in &out {
            self.apply(e);
        }
        out
    }

    /// Elect a partition's leader again under the next leader epoch: the current leader if its
    /// lease is live, else the first live in-sync replica, else the first live eligible one.
    /// With none of them live and `unclean`, the live replica with the longest log its broker
    /// last reported, which then is the ISR: records committed on the others, and not on it,
    /// are lost (Kafka's unclean election; asked by an operator, never automatic), and an
    /// [`Entry::UncleanLeader`] follows the LeaderChanged. Returns the entries to persist.
    pub fn handle_elect_leader(
        &mut self,
        now_ms: u64,
        topic: &str,
        partition: i32,
        election: protocol::Election,
    ) -> Result<Vec<Entry>, Status> {
        let unclean = election.unclean();
        let Some(t) = self.topics.get(topic) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")));
        };
        let Some(p) = usize::try_from(partition).ok().and_then(|i| t.partitions.get(i)) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")));
        };
        let live = |b: i32| self.electable(topic, partition, b, now_ms);
        let leader_alive = p.leader_id != NO_LEADER && live(p.leader_id);
        let mut elected_uncleanly = false;
        let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
        let (leader_id, isr, elr) = if election == protocol::Election::Preferred {
            if leader_alive && p.leader_id == preferred {
                return Err(Status::new(
                    ErrorCode::ElectionNotNeeded,
                    format!("{topic}-{partition}: its preferred replica, broker {preferred}, leads it already"),
                ));
            }
            if !(live(preferred) && p.isr.contains(&preferred)) {
                return Err(Status::new(
                    ErrorCode::PreferredLeaderNotAvailable,
                    format!(
                        "{topic}-{partition}: its preferred replica, broker {preferred}, is not {} (ISR {:?}); retry \
                         once it is back in sync",
                        if live(preferred) { "in sync" } else { "live" },
                        p.isr
                    ),
                ));
            }
            // A live leader stays in sync, a follower now; a dead one leaves the ISR, as in
            // the other elections.
            if leader_alive {
                (preferred, p.isr.clone(), p.elr.clone())
            } else {
                let isr: Vec<i32> = p.isr.iter().copied().filter(|b| *b != p.leader_id).collect();
                let elr = p.elr_after(t.min_isr, &isr, &[]);
                (preferred, isr, elr)
            }
        } else if leader_alive && election == protocol::Election::Unclean {
            return Err(Status::new(
                ErrorCode::ElectionNotNeeded,
                format!("{topic}-{partition} has a live leader, broker {}: no unclean election", p.leader_id),
            ));
        } else if leader_alive {
            (p.leader_id, p.isr.clone(), p.elr.clone())
        } else if let Some(c) = p.isr.iter().copied().find(|b| live(*b)) {
            // A dead leader that is replaced leaves the ISR, as in a lease-expiry election;
            // otherwise the new leader's high watermark would wait for it.
            let isr: Vec<i32> = p.isr.iter().copied().filter(|b| *b != p.leader_id).collect();
            let elr = p.elr_after(t.min_isr, &isr, &[]);
            (c, isr, elr)
        } else if let Some(c) = p.elr.iter().copied().find(|b| live(*b)) {
            (c, vec![c], p.elr_after(t.min_isr, &[c], &[]))
        } else if let Some(c) = unclean
            .then(|| {
                let reports = self.reports.get(&(topic.to_string(), partition));
                let end = |b: i32| reports.and_then(|r| r.get(&b)).map_or(-1, |(leo, _)| *leo);
                p.replicas.iter().copied().filter(|b| live(*b)).max_by_key(|b| (end(*b), -b))
            })
            .flatten()
        {
            tracing::warn!(%topic, partition, leader = c, "unclean election: records committed only on other replicas are lost");
            elected_uncleanly = true;
            (c, vec![c], Vec::new())
        } else {
            let code = match election {
                protocol::Election::Unclean => ErrorCode::EligibleLeadersNotAvailable,
                _ => ErrorCode::LeaderNotAvailable,
            };
            return Err(Status::new(
                code,
                format!(
                    "no in-sync or eligible replica of {topic}-{partition} holds a live lease (ISR {:?}, ELR {:?}); \
                     start one and retry{}",
                    p.isr,
                    p.elr,
                    if unclean { "" } else { ", or elect uncleanly (loses what only the others hold)" }
                ),
            ));
        };
        let leader_epoch = p.leader_epoch + 1;
        let mut entries =
            vec![Entry::LeaderChanged { topic: topic.to_string(), partition, leader_id, leader_epoch, isr, elr }];
        if elected_uncleanly {
            entries.push(Entry::UncleanLeader { topic: topic.to_string(), partition, leader_epoch });
        }
        for e in &entries {
            self.apply(e);
        }
        Ok(entries)
    }

    /// Move `topic-partition`'s replicas to `target` (AlterPartitionReassignments, KIP-455), or
    /// cancel the move under way (`None`: back to the replicas it had before). Returns the
    /// entry to persist before answering (`None`: nothing to do).
    ///
    /// A move keeps the partition's replicas and adds the target's: its replicas are the
    /// target's, then those it removes, under a new leader epoch, so the leader replicates to
    /// the new ones; they catch up and the leader brings them into the ISR. Once every target
    /// replica is in sync, [`Cluster::handle_tick`] completes it: the replicas become the
    /// target, the ISR keeps only them, and a removed leader hands its leadership to an in-sync
    /// target replica, all under the next leader epoch; the brokers of the removed replicas drop
    /// them ([`Cluster::removed_among`]). A target already in sync completes at once. A new
    /// move of a partition being moved replaces the target, keeping the replicas it had
    /// before. The target must name live brokers, each once, at least
    /// `min.insync.replicas` of them, and (unless `allow_replication_factor_change`) as many
    /// as the partition has.
    pub fn handle_reassign(
        &mut self,
        now_ms: u64,
        topic: &str,
        partition: i32,
        target: Option<&[i32]>,
        allow_replication_factor_change: bool,
    ) -> Result<Option<Entry>, Status> {
        let Some((min_isr, p)) = self.topic_partition(topic, partition) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")));
        };
        let refuse = |why: String| {
            Err(Status::new(ErrorCode::InvalidReplicaAssignment, format!("cannot move {topic}-{partition}: {why}")))
        };
        let target = match target {
            None if !p.reassigning() => {
                return Err(Status::new(
                    ErrorCode::NoReassignmentInProgress,
                    format!("{topic}-{partition} is not being moved: there is nothing to cancel"),
                ))
            }
            None => p.original(),
            Some(target) => {
                let live = self.live_brokers(now_ms);
                if target.is_empty() {
                    return refuse("no replicas given (to cancel a move, give none: null)".to_string());
                }
                if let Some((j, b)) = target.iter().enumerate().find(|(j, b)| target[..*j].contains(b)) {
                    return refuse(format!("broker {b} is named twice (at {j})"));
                }
                if let Some(b) = target.iter().find(|b| !live.contains(b)) {
                    return refuse(format!("broker {b} is not live (live: {live:?})"));
                }
                if (target.len() as i32) < min_isr {
                    return refuse(format!(
                        "{} replicas is fewer than the topic's min.insync.replicas ({min_isr}), so acks=all writes \
                         would be refused; lower min.insync.replicas first",
                        target.len()
                    ));
                }
                let rf = p.original().len();
                if !allow_replication_factor_change && target.len() != rf {
                    return Err(Status::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!(
                            "cannot move {topic}-{partition} to {} replicas: it has {rf}, and the request does not \
                             allow the replication factor to change",
                            target.len()
                        ),
                    ));
                }
                target.to_vec()
            }
        };
        if (target == p.replicas && !p.reassigning()) || (p.reassigning() && target == p.target()) {
            // Already there, or already moving there (a repeated request changes nothing).
            return Ok(None);
        }
        match self.replicas_change(now_ms, topic, partition, &target) {
            Ok(entry) => {
                self.apply(&entry);
                Ok(Some(entry))
            }
            Err(why) => refuse(why),
        }
    }

    /// The entry that moves `topic-partition` towards `target` (see
    /// [`Cluster::handle_reassign`]): complete when every target replica is in sync, else
    /// under way. Err says why it cannot be made now.
    fn replicas_change(&self, now_ms: u64, topic: &str, partition: i32, target: &[i32]) -> Result<Entry, String> {
        let (t, p) = self
            .topics
            .get(topic)
            .and_then(|t| Some((t, t.partitions.get(usize::try_from(partition).ok()?)?)))
            .ok_or_else(|| format!("{topic}-{partition} does not exist"))?;
        let original = p.original();
        let complete = target.iter().all(|r| p.isr.contains(r));
        let (replicas, adding, removing) = if complete {
            (target.to_vec(), Vec::new(), Vec::new())
        } else {
            let mut replicas = target.to_vec();
            replicas.extend(original.iter().copied().filter(|r| !target.contains(r)));
            let adding = target.iter().copied().filter(|r| !original.contains(r)).collect();
            let removing = original.iter().copied().filter(|r| !target.contains(r)).collect();
            (replicas, adding, removing)
        };
        let isr: Vec<i32> = p.isr.iter().copied().filter(|r| replicas.contains(r)).collect();
        let elr: Vec<i32> = p.elr_after(t.min_isr, &isr, &[]).into_iter().filter(|r| replicas.contains(r)).collect();
        let leader_id = if p.leader_id == NO_LEADER || isr.contains(&p.leader_id) {
            // (Without a leader, the tick elects one as for any partition.)
            p.leader_id
        } else {
            // The leader is removed: the first in-sync target replica that can lead, in the
            // target's order (its first is the preferred leader).
            replicas
                .iter()
                .copied()
                .find(|r| isr.contains(r) && self.electable(topic, partition, *r, now_ms))
                .ok_or_else(|| {
                    format!("the leader {} is removed and no replica left in sync ({isr:?}) is live", p.leader_id)
                })?
        };
        let held = !p.isr.is_empty() || !p.elr.is_empty();
        if held && isr.is_empty() && elr.is_empty() {
            // The replicas holding every committed record would all go (a partition without a
            // leader whose in-sync replicas are down, say): only an unclean election could
            // bring it back, without them.
            return Err(format!(
                "no replica holding every committed record would be left (in sync: {:?}, eligible: {:?}); \
                 bring one of them back first",
                p.isr, p.elr
            ));
        }
        Ok(Entry::ReplicasChanged {
            topic: topic.to_string(),
            topic_id: t.id,
            partition,
            replicas,
            adding,
            removing,
            leader_id,
            leader_epoch: p.leader_epoch + 1,
            isr,
            elr,
        })
    }

    /// The partitions being moved, of `topics` ((topic, partitions); all when `None`).
    pub fn reassignments(&self, topics: Option<&[(String, Vec<i32>)]>) -> Vec<protocol::Reassignment> {
        let asked = |topic: &str, i: i32| {
            topics.is_none_or(|ts| ts.iter().any(|(t, partitions)| t == topic && partitions.contains(&i)))
        };
        self.topics
            .iter()
            .flat_map(|(name, t)| t.partitions.iter().enumerate().map(move |(i, p)| (name, i as i32, p)))
            .filter(|(name, i, p)| p.reassigning() && asked(name, *i))
            .map(|(name, i, p)| protocol::Reassignment {
                topic: name.clone(),
                partition: i,
                replicas: p.replicas.clone(),
                adding: p.adding.clone(),
                removing: p.removing.clone(),
            })
            .collect()
    }

    /// The replicas among `reports` (broker `broker_id`'s) that their partition no longer has:
    /// moved away by a reassignment. Only replicas that carry their topic's current id: one of
    /// a topic this coordinator does not know, or without an id, is never named (a deleted
    /// topic's are [`Cluster::deleted_among`]'s).
    pub fn removed_among(&self, broker_id: i32, reports: &[ReplicaReport]) -> Vec<protocol::RemovedReplica> {
        reports
            .iter()
            .filter(|r| r.topic_id != 0 && self.topic_id(&r.topic) == Some(r.topic_id))
            .filter(|r| self.partition(&r.topic, r.partition).is_some_and(|p| !p.replicas.contains(&broker_id)))
            .map(|r| protocol::RemovedReplica { topic: r.topic.clone(), partition: r.partition, topic_id: r.topic_id })
            .collect()
    }

    /// A leader asks to change the ISR. Refused with FENCED_LEADER_EPOCH unless it is the
    /// leader of the current epoch (a stale leader cannot shrink the ISR to itself), and with
    /// INVALID_UPDATE_VERSION unless it is based on the current partition epoch: a change asked
    /// before another one was applied, or a repeat of one already applied, must not undo what
    /// the leader has since counted on (KIP-497). Members leaving an ISR that falls below the
    /// minimum become eligible leader replicas. Returns the entry to persist before answering
    /// (none when refused) and the answer, which carries the ISR in force and its epochs.
    pub fn handle_alter_partition(&mut self, r: &AlterPartitionRequest) -> (Option<Entry>, AlterPartitionResponse) {
        let (topic, partition, broker_id, leader_epoch, isr) =
            (&r.topic, r.partition, r.broker_id, r.leader_epoch, &r.isr);
        let other_topic = r.topic_id != 0 && self.topic_id(topic).is_some_and(|id| id != r.topic_id);
        let found = self.topic_partition(topic, partition).filter(|_| !other_topic);
        let Some((min_isr, p)) = found else {
            let status = if other_topic {
                // A replica of a deleted topic of that name, on a broker that has not dropped it
                // yet: its ISR is not this topic's.
                Status::new(
                    ErrorCode::UnknownTopicId,
                    format!(
                        "{topic}-{partition}: the asking replica belongs to a deleted topic of that name (topic id \
                         {:032x}); it is dropped at its broker's next heartbeat",
                        r.topic_id
                    ),
                )
            } else {
                Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist"))
            };
            return (
                None,
                AlterPartitionResponse {
                    status,
                    leader_epoch: -1,
                    partition_epoch: -1,
                    isr: Vec::new(),
                    coordinator_epoch: -1,
                },
            );
        };
        let refuse = |code, msg: String| {
            let status = Status::new(code, msg);
            let resp = AlterPartitionResponse {
                status,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr: p.isr.clone(),
                coordinator_epoch: -1,
            };
            (None, resp)
        };
        if leader_epoch < p.leader_epoch || (leader_epoch == p.leader_epoch && broker_id != p.leader_id) {
            return refuse(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "broker {broker_id} at leader epoch {leader_epoch} is not the leader of {topic}-{partition}: \
                     broker {} leads at epoch {}",
                    p.leader_id, p.leader_epoch
                ),
            );
        }
        if leader_epoch > p.leader_epoch {
            return refuse(
                ErrorCode::UnknownLeaderEpoch,
                format!("leader epoch {leader_epoch} of {topic}-{partition} was never granted"),
            );
        }
        if r.partition_epoch != p.partition_epoch {
            return refuse(
                ErrorCode::InvalidUpdateVersion,
                format!(
                    "ISR change of {topic}-{partition} based on partition epoch {}, but the ISR is {:?} at partition \
                     epoch {}: learn it and ask again",
                    r.partition_epoch, p.isr, p.partition_epoch
                ),
            );
        }
        let mut unique = isr.to_vec();
        unique.sort_unstable();
        unique.dedup();
        if !isr.contains(&broker_id) || unique.len() != isr.len() || isr.iter().any(|b| !p.replicas.contains(b)) {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("ISR {isr:?} must hold the leader {broker_id} and only replicas {:?}", p.replicas),
            );
        }
        let elr = p.elr_after(min_isr, isr, &[]);
        let entry = Entry::IsrChanged { topic: topic.to_string(), partition, leader_epoch, isr: isr.to_vec(), elr };
        self.apply(&entry);
        let partition_epoch = self.partition(topic, partition).map_or(-1, |p| p.partition_epoch);
        let resp = AlterPartitionResponse {
            status: Status::ok(),
            leader_epoch,
            partition_epoch,
            isr: isr.to_vec(),
            coordinator_epoch: -1,
        };
        (Some(entry), resp)
    }

    /// Metadata for `topics` (all if empty); unknown ones are created when asked and allowed.
    /// Returns the response parts and the entries to persist before answering.
    pub fn handle_metadata(
        &mut self,
        now_ms: u64,
        topics: &[String],
        allow_auto_create: bool,
    ) -> (Vec<BrokerInfo>, Vec<TopicInfo>, Vec<Entry>) {
        let mut entries = Vec::new();
        let names: Vec<String> =
            if topics.is_empty() { self.topics.keys().cloned().collect() } else { topics.to_vec() };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let mut status = Status::ok();
            let mut created = false;
            if !self.topics.contains_key(&name) {
                if protocol::names::is_reserved_topic(&name) {
                    // Never auto-created (a topic of that name was once never fenced).
                    status = Status::new(
                        ErrorCode::InvalidTopicException,
                        format!("topic name '{name}' is reserved for Kafka's internal topics; use another name"),
                    );
                } else if allow_auto_create && self.config.auto_create_topics {
                    match self.handle_create_topic(now_ms, &name, self.config.default_partitions, -1, -1) {
                        Ok(e) => {
                            entries.push(e);
                            created = true;
                        }
                        Err(s) => status = s,
                    }
                } else {
                    status = Status::new(ErrorCode::UnknownTopicOrPartition, format!("topic '{name}' does not exist"));
                }
            }
            let partitions = self
                .topics
                .get(&name)
                .map(|t| {
                    t.partitions
                        .iter()
                        .enumerate()
                        .map(|(i, p)| PartitionInfo {
                            partition: i as i32,
                            leader_id: p.leader_id,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replicas.clone(),
                            isr: p.isr.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (topic_id, min_insync_replicas, configs) =
                self.topics.get(&name).map_or((0, 0, Vec::new()), |t| (t.id, t.min_isr, t.config_pairs()));
            out.push(TopicInfo { name, status, partitions, created, topic_id, min_insync_replicas, configs });
        }
        (self.broker_infos(now_ms), out, entries)
    }

    fn topic_partition(&self, topic: &str, partition: i32) -> Option<(i32, &Partition)> {
        let t = self.topics.get(topic)?;
        Some((t.min_isr, t.partitions.get(usize::try_from(partition).ok()?)?))
    }

    fn partition(&self, topic: &str, partition: i32) -> Option<&Partition> {
        self.topic_partition(topic, partition).map(|(_, p)| p)
    }

    /// Which broker leads a partition (-1: none), at which leader epoch, and at which address.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Option<(i32, i32, Option<String>)> {
        let p = self.partition(topic, partition)?;
        Some((p.leader_id, p.leader_epoch, self.brokers.get(&p.leader_id).map(|b| b.addr.clone())))
    }

    /// A partition's replicas.
    pub fn replicas_of(&self, topic: &str, partition: i32) -> Option<&[i32]> {
        self.partition(topic, partition).map(|p| p.replicas.as_slice())
    }

    /// A partition's ISR and its partition epoch.
    pub fn isr_of(&self, topic: &str, partition: i32) -> Option<(&[i32], i32)> {
        self.partition(topic, partition).map(|p| (p.isr.as_slice(), p.partition_epoch))
    }

    /// The process a broker id is registered to: (incarnation, broker epoch).
    pub fn registration_of(&self, broker_id: i32) -> Option<(i64, i64)> {
        self.registrations.get(&broker_id).map(|r| (r.incarnation, r.broker_epoch))
    }

    /// A partition's eligible leader replicas and its topic's `min.insync.replicas`.
    pub fn elr_of(&self, topic: &str, partition: i32) -> Option<(&[i32], i32)> {
        self.topic_partition(topic, partition).map(|(m, p)| (p.elr.as_slice(), m))
    }

    /// Brokers and partitions for `admin describe`.
    pub fn describe(&self, now_ms: u64) -> (Vec<BrokerState>, Vec<PartitionState>) {
        let brokers = self
            .brokers
            .iter()
            .map(|(id, b)| BrokerState { id: *id, addr: b.addr.clone(), alive: b.lease_until_ms > now_ms })
            .collect();
        let partitions = self
            .topics
            .iter()
            .flat_map(|(name, t)| {
                t.partitions.iter().enumerate().map(move |(i, p)| {
                    let reports = self.reports.get(&(name.clone(), i as i32));
                    let problems = self.problems.get(&(name.clone(), i as i32));
                    PartitionState {
                        topic: name.clone(),
                        partition: i as i32,
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        elr: p.elr.clone(),
                        min_insync_replicas: t.min_isr,
                        adding: p.adding.clone(),
                        removing: p.removing.clone(),
                        progress: p
                            .replicas
                            .iter()
                            .filter_map(|b| {
                                reports.and_then(|r| r.get(b)).map(|(leo, hw)| ReplicaProgress {
                                    broker_id: *b,
                                    log_end_offset: *leo,
                                    high_watermark: *hw,
                                    problem: problems.and_then(|p| p.get(b)).cloned().unwrap_or_default(),
                                })
                            })
                            .collect(),
                    }
                })
            })
            .collect();
        (brokers, partitions)
    }

    /// Topics and leaderships as journal entries (brokers and leases are not durable: they come
    /// back with the next heartbeats).
    pub fn snapshot(&self) -> Vec<Entry> {
        let mut brokers: Vec<(&i32, &Registration)> = self.registrations.iter().collect();
        brokers.sort_unstable_by_key(|(id, _)| **id);
        let incarnations = brokers.into_iter().map(|(broker_id, r)| Entry::BrokerIncarnation {
            broker_id: *broker_id,
            incarnation: r.incarnation,
            log_dir_id: r.log_dir_id,
            broker_epoch: r.broker_epoch,
        });
        let deleted = self.deleted.iter().map(|(name, id)| Entry::TopicDeleted { name: name.clone(), topic_id: *id });
        self.topics
            .iter()
            .map(|(name, t)| Entry::TopicSnapshot {
                name: name.clone(),
                topic_id: t.id,
                min_insync_replicas: t.min_isr,
                configs: t.config_pairs(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| PartitionSnapshot {
                        replicas: p.replicas.clone(),
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        isr: p.isr.clone(),
                        elr: p.elr.clone(),
                    })
                    .collect(),
            })
            .chain(self.topics.iter().flat_map(|(name, t)| {
                t.partitions.iter().enumerate().filter(|(_, p)| p.reassigning()).map(|(i, p)| Entry::Reassigning {
                    topic: name.clone(),
                    topic_id: t.id,
                    partition: i as i32,
                    adding: p.adding.clone(),
                    removing: p.removing.clone(),
                })
            }))
            .chain(self.unclean.iter().map(|((topic, partition), leader_epoch)| Entry::UncleanLeader {
                topic: topic.clone(),
                partition: *partition,
                leader_epoch: *leader_epoch,
            }))
            .chain(deleted)
            .chain(incarnations)
            .chain((self.transaction_version.1 >= 0).then_some(Entry::TransactionVersion {
                level: self.transaction_version.0,
                epoch: self.transaction_version.1,
            }))
            .chain(self.acls.snapshot())
            .chain(self.credentials.snapshot())
            .collect()
    }

    fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Partition> {
        self.topics.get_mut(topic)?.partitions.get_mut(usize::try_from(partition).ok()?)
    }

    /// Apply a journal entry (topics and leaderships; other entries belong to the producer table).
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::TopicCreated { name, replicas, min_insync_replicas, topic_id, configs } => {
                let rf = replicas.first().map_or(1, |r| r.len() as i32);
                let min_isr = if *min_insync_replicas > 0 { *min_insync_replicas } else { self.default_min_isr(rf) };
                let partitions = replicas.iter().map(|r| Partition::new(r)).collect();
                let id = topic_id_or_legacy(*topic_id, name);
                let configs = configs.iter().cloned().collect();
                self.topics.insert(name.clone(), Topic { min_isr, partitions, id, configs });
            }
            Entry::TopicConfigs { name, topic_id, min_insync_replicas, configs } => {
                if let Some(t) = self.topics.get_mut(name).filter(|t| t.id == *topic_id) {
                    if t.min_isr != *min_insync_replicas {
                        // KIP-966: an ISR at least the new minimum moves the high watermark
                        // again, so the eligible replicas no longer hold everything committed.
                        for p in &mut t.partitions {
                            p.elr = p.elr_after(*min_insync_replicas, &p.isr, &[]);
                        }
                    }
                    t.min_isr = *min_insync_replicas;
                    t.configs = configs.iter().cloned().collect();
                }
            }
            Entry::TransactionVersion { level, epoch } if *epoch > self.transaction_version.1 => {
                self.transaction_version = (*level, *epoch);
            }
            Entry::TopicDeleted { name, topic_id } => {
                if let Some(t) = self.topics.get(name).filter(|t| t.id == *topic_id) {
                    let holders = t.partitions.iter().flat_map(|p| p.replicas.iter().copied()).collect();
                    self.dropping.insert(*topic_id, (name.clone(), holders));
                    self.topics.remove(name);
                    self.unclean.retain(|(t, _), _| t != name);
                    self.reports.retain(|(t, _), _| t != name);
                    self.problems.retain(|(t, _), _| t != name);
                    self.offline.retain(|(t, ..)| t != name);
                }
                self.deleted.insert(name.clone(), *topic_id);
            }
            Entry::UncleanLeader { topic, partition, leader_epoch }
                if self.topic_partition(topic, *partition).is_some() =>
            {
                self.unclean.insert((topic.clone(), *partition), *leader_epoch);
            }
            Entry::PartitionsAdded { name, replicas } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.partitions.extend(replicas.iter().map(|r| Partition::new(r)));
                }
            }
            Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr, elr } => {
                if let Some(p) = self.partition_mut(topic, *partition) {
                    if *leader_epoch > p.leader_epoch {
                        p.leader_id = *leader_id;
                        p.leader_epoch = *leader_epoch;
                        p.partition_epoch += 1;
                        p.isr = isr.clone();
                        p.elr = elr.clone();
                    }
                }
            }
            Entry::TopicSnapshot { name, min_insync_replicas, partitions, topic_id, configs } => {
                let rf = partitions.first().map_or(1, |p| p.replicas.len() as i32);
                let min_isr = if *min_insync_replicas > 0 { *min_insync_replicas } else { self.default_min_isr(rf) };
                let partitions = partitions
                    .iter()
                    .map(|p| Partition {
                        replicas: p.replicas.clone(),
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        isr: p.isr.clone(),
                        elr: p.elr.clone(),
                        adding: Vec::new(),
                        removing: Vec::new(),
                    })
                    .collect();
                let id = topic_id_or_legacy(*topic_id, name);
                let configs = configs.iter().cloned().collect();
                self.topics.insert(name.clone(), Topic { min_isr, partitions, id, configs });
            }
            Entry::BrokerIncarnation { broker_id, incarnation, log_dir_id, broker_epoch } => {
                let r =
                    Registration { broker_epoch: *broker_epoch, incarnation: *incarnation, log_dir_id: *log_dir_id };
                self.registrations.insert(*broker_id, r);
            }
            Entry::IsrChanged { topic, partition, leader_epoch, isr, elr } => {
                if let Some(p) = self.partition_mut(topic, *partition) {
                    if *leader_epoch == p.leader_epoch {
                        p.partition_epoch += 1;
                        p.isr = isr.clone();
                        p.elr = elr.clone();
                    }
                }
            }
            Entry::ReplicasChanged {
                topic,
                topic_id,
                partition,
                replicas,
                adding,
                removing,
                leader_id,
                leader_epoch,
                isr,
                elr,
            } => {
                if self.topic_id(topic) != Some(*topic_id) {
                    return;
                }
                let Some(p) = self.partition_mut(topic, *partition) else { return };
                if *leader_epoch <= p.leader_epoch {
                    return;
                }
                p.replicas = replicas.clone();
                p.adding = adding.clone();
                p.removing = removing.clone();
                p.leader_id = *leader_id;
                p.leader_epoch = *leader_epoch;
                p.partition_epoch += 1;
                p.isr = isr.clone();
                p.elr = elr.clone();
                // What removed replicas last reported is no longer the partition's.
                let key = (topic.clone(), *partition);
                if let Some(r) = self.reports.get_mut(&key) {
                    r.retain(|b, _| replicas.contains(b));
                }
                if let Some(r) = self.problems.get_mut(&key) {
                    r.retain(|b, _| replicas.contains(b));
                }
                self.offline.retain(|(t, i, b)| !(t == topic && i == partition && !replicas.contains(b)));
            }
            Entry::Reassigning { topic, topic_id, partition, adding, removing } => {
                if self.topic_id(topic) != Some(*topic_id) {
                    return;
                }
                if let Some(p) = self.partition_mut(topic, *partition) {
                    p.adding = adding.clone();
                    p.removing = removing.clone();
                }
            }
            Entry::Acls { .. } => self.acls.apply(entry),
            Entry::ScramCredentials { .. } => self.credentials.apply(entry),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process start whose logs may have lost acknowledged records (not intact).
    fn lost(incarnation: i64) -> BrokerStart {
        BrokerStart { incarnation, broker_epoch: -1, previous_broker_epoch: -1, log_dir_id: 1, intact: false }
    }

    /// A process start with its logs intact, on data directory 1.
    fn intact(incarnation: i64) -> BrokerStart {
        BrokerStart { incarnation, broker_epoch: -1, previous_broker_epoch: -1, log_dir_id: 1, intact: true }
    }

    /// Register `start` for `broker_id` as the successor of its current registration.
    fn restart(c: &mut Cluster, now: u64, broker_id: i32, start: BrokerStart) -> Vec<Entry> {
        let previous_broker_epoch = c.registration_of(broker_id).map_or(-1, |(_, e)| e);
        c.handle_registration(now, broker_id, BrokerStart { previous_broker_epoch, ..start }, &[]).unwrap().1
    }

    fn cluster(brokers: &[i32]) -> Cluster {
        let mut c = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..Default::default() });
        for b in brokers {
            c.handle_heartbeat(0, *b, &format!("a:{b}"), &[]);
        }
        c
    }

    #[test]
    fn topics_need_live_brokers_and_spread_replicas() {
        let mut c = Cluster::new(ClusterConfig::default());
        assert_eq!(c.handle_create_topic(0, "t", 2, -1, -1).unwrap_err().code, ErrorCode::BrokerNotAvailable);
        let mut c2 = cluster(&[1, 2, 3, 4]);
        c2.handle_create_topic(10, "t", 4, -1, -1).unwrap();
        let (_, parts) = c2.describe(10);
        assert!(parts.iter().all(|p| p.replicas.len() == 3 && p.isr == p.replicas && p.leader_id == p.replicas[0]));
        let leaders: std::collections::BTreeSet<i32> = parts.iter().map(|p| p.leader_id).collect();
        assert_eq!(leaders.len(), 4, "leaderships spread over brokers");
        assert_eq!(c2.handle_create_topic(10, "u", 1, 5, -1).unwrap_err().code, ErrorCode::InvalidReplicationFactor);
        assert_eq!(c2.handle_create_topic(10, "t", 1, 1, -1).unwrap_err().code, ErrorCode::TopicAlreadyExists);
        assert_eq!(
            c2.handle_create_topic(10, "bad name", 1, 1, -1).unwrap_err().code,
            ErrorCode::InvalidTopicException
        );
        assert_eq!(c2.handle_create_topic(10, "v", 0, 1, -1).unwrap_err().code, ErrorCode::InvalidPartitions);
        c.handle_heartbeat(0, 1, "a:1", &[]);
        c.handle_create_topic(0, "solo", 1, -1, -1).unwrap();
        assert_eq!(c.describe(0).1[0].replicas, vec![1], "default factor is min(3, live)");
    }

    #[test]
    fn expired_leader_loses_leadership_to_an_isr_member_at_a_higher_epoch() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        assert!(c.handle_tick(50).is_empty(), "all leases live");
        // Everyone but the leader renews.
        for b in [1, 2, 3].iter().filter(|b| **b != leader) {
            c.handle_heartbeat(90, *b, "x", &[]);
        }
        let entries = c.handle_tick(150);
        assert_eq!(entries.len(), 1);
        let (new_leader, new_epoch, _) = c.leader_of("t", 0).unwrap();
        assert_ne!(new_leader, leader);
        assert_eq!(new_epoch, epoch + 1);
        let p = &c.describe(150).1[0];
        assert!(!p.isr.contains(&leader), "the lost leader leaves the ISR");
        assert!(c.handle_tick(150).is_empty(), "stable once a live leader exists");
    }

    #[test]
    fn with_no_live_isr_member_the_partition_goes_leaderless_then_recovers() {
        let mut c = cluster(&[1]);
        c.handle_create_topic(0, "t", 1, 1, -1).unwrap();
        let e = c.handle_tick(150);
        assert_eq!(e.len(), 1);
        assert_eq!(c.leader_of("t", 0).unwrap().0, NO_LEADER);
        assert_eq!(c.leader_of("t", 0).unwrap().1, 1, "the old leader is fenced by epoch");
        c.handle_heartbeat(200, 1, "a:1", &[]);
        c.handle_tick(210);
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        assert_eq!((leader, epoch), (1, 2));
    }

    #[test]
    fn a_restarted_broker_that_may_have_lost_records_leaves_the_isr_and_its_leaderships_move() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        assert_eq!(restart(&mut c, 10, leader, lost(7)).len(), 1, "first sight: only recorded");
        assert!(restart(&mut c, 10, leader, lost(7)).is_empty(), "same process");
        let entries = restart(&mut c, 20, leader, lost(8));
        assert_eq!(entries.len(), 2, "recorded, and the leadership moved");
        let (new_leader, new_epoch, _) = c.leader_of("t", 0).unwrap();
        assert_ne!(new_leader, leader);
        assert_eq!(new_epoch, epoch + 1);
        assert!(!c.describe(20).1[0].isr.contains(&leader));
        // A sole in-sync replica keeps its leadership through a restart, at a new epoch (found
        // by the simulator: at the same epoch, batches written again at offsets it lost passed
        // for the lost ones on followers, and the replicas diverged).
        let mut solo = cluster(&[1]);
        solo.handle_create_topic(0, "s", 1, 1, -1).unwrap();
        let (_, epoch, _) = solo.leader_of("s", 0).unwrap();
        restart(&mut solo, 0, 1, lost(1));
        assert_eq!(restart(&mut solo, 5, 1, lost(2)).len(), 2);
        assert_eq!(solo.leader_of("s", 0).unwrap().0, 1);
        assert_eq!(solo.leader_of("s", 0).unwrap().1, epoch + 1);
    }

    fn alter(
        c: &mut Cluster,
        broker_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: &[i32],
    ) -> AlterPartitionResponse {
        let r = AlterPartitionRequest {
            broker_id,
            topic: "t".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch,
            partition_epoch,
            isr: isr.to_vec(),
        };
        let (entry, resp) = c.handle_alter_partition(&r);
        assert_eq!(entry.is_some(), resp.status.is_ok(), "an entry exactly when accepted");
        resp
    }

    /// Issue 31: the transaction version is recorded once per change of `--transaction-version`,
    /// its finalized-features epoch one higher each time, kept by snapshots and replays.
    #[test]
    fn the_transaction_version_is_recorded_with_an_epoch_that_only_grows() {
        let with = |level| Cluster::new(ClusterConfig { transaction_version: level, ..Default::default() });
        let mut c = with(2);
        assert_eq!(c.transaction_version(), (0, -1), "nothing recorded yet");
        assert_eq!(c.record_transaction_version(), Some(Entry::TransactionVersion { level: 2, epoch: 1 }));
        assert_eq!(c.transaction_version(), (2, 1));
        assert_eq!(c.record_transaction_version(), None, "recorded already");
        // A restart with version 1: replayed from the snapshot, then recorded one epoch higher.
        let mut down = with(1);
        for e in c.snapshot() {
            down.apply(&e);
        }
        assert_eq!(down.transaction_version(), (2, 1));
        assert_eq!(down.record_transaction_version(), Some(Entry::TransactionVersion { level: 1, epoch: 2 }));
        // An older entry replayed after a newer one changes nothing.
        down.apply(&Entry::TransactionVersion { level: 2, epoch: 1 });
        assert_eq!(down.transaction_version(), (1, 2));
    }

    #[test]
    fn stale_leader_cannot_change_the_isr() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        c.handle_elect_leader(10, "t", 0, protocol::Election::Again).unwrap();
        let r = alter(&mut c, leader, epoch, 1, &[leader]);
        assert_eq!(r.status.code, ErrorCode::FencedLeaderEpoch);
        assert_eq!((r.leader_epoch, r.partition_epoch, r.isr.len()), (epoch + 1, 1, 3));
        // The leader of the current epoch may.
        let r = alter(&mut c, leader, epoch + 1, 1, &[leader]);
        assert!(r.status.is_ok(), "{}", r.status);
        assert_eq!((r.partition_epoch, r.isr.clone()), (2, vec![leader]));
        assert_eq!(c.describe(10).1[0].isr, vec![leader]);
        // A follower at the current epoch may not, nor may an ISR without the leader.
        let other = (1..=3).find(|b| *b != leader).unwrap();
        assert_eq!(alter(&mut c, other, epoch + 1, 2, &[other]).status.code, ErrorCode::FencedLeaderEpoch);
        assert_eq!(alter(&mut c, leader, epoch + 1, 2, &[other]).status.code, ErrorCode::InvalidRequest);
    }

    /// Found by the simulator (`--topic-deletions --mutation topics-by-name`): a leader of a
    /// deleted topic's replica asks for an ISR change by name after the topic was created again
    /// with the same leader at the same epochs; applied, it would change the new topic's ISR
    /// (adding a follower that holds nothing of it). A change carrying another topic id is
    /// refused; one without an id (0) is taken by name, as before ids were sent.
    #[test]
    fn an_isr_change_of_a_deleted_topics_replica_is_refused() {
        let mut c = cluster(&[1, 2, 3]);
        let Entry::TopicCreated { topic_id: old, .. } = c.handle_create_topic(0, "t", 1, 3, -1).unwrap() else {
            panic!("created")
        };
        c.handle_delete_topic("t", 0).unwrap();
        for b in 1..=3 {
            c.handle_heartbeat(100, b, "x", &[]); // dropped everywhere
        }
        let Entry::TopicCreated { topic_id: new, .. } = c.handle_create_topic(100, "t", 1, 3, -1).unwrap() else {
            panic!("created")
        };
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let ask = |c: &mut Cluster, topic_id| {
            let r = AlterPartitionRequest {
                broker_id: leader,
                topic: "t".into(),
                partition: 0,
                topic_id,
                leader_epoch: epoch,
                partition_epoch: 0,
                isr: vec![leader],
            };
            c.handle_alter_partition(&r)
        };
        let (entry, resp) = ask(&mut c, old);
        assert!(entry.is_none());
        assert_eq!(resp.status.code, ErrorCode::UnknownTopicId, "{}", resp.status);
        assert_eq!(c.isr_of("t", 0).unwrap().0.len(), 3, "the new topic's ISR is untouched");
        let (entry, resp) = ask(&mut c, new);
        assert!(entry.is_some() && resp.status.is_ok(), "{}", resp.status);
    }

    /// Found by the simulator: a leader asked to add a follower back; the coordinator was paused
    /// and read that request only after the leader's next heartbeat, whose answer still showed
    /// the old ISR. The leader took the old ISR, stopped counting the follower, and committed
    /// without it, while the coordinator then added it: elected next, that follower lacked
    /// committed records. With partition epochs, the leader takes only a newer ISR, and a
    /// change based on an older one is refused.
    #[test]
    fn isr_changes_are_ordered_by_the_partition_epoch() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let hb = |c: &mut Cluster| c.handle_heartbeat(0, leader, "x", &[]).1[0].clone();
        assert_eq!(hb(&mut c).partition_epoch, 0);
        let shrink = alter(&mut c, leader, epoch, 0, &[leader]);
        assert!(shrink.status.is_ok());
        assert_eq!(hb(&mut c).partition_epoch, 1, "heartbeats carry the partition epoch");
        // The same request again (a retry, a duplicate) is refused, with the ISR in force.
        let again = alter(&mut c, leader, epoch, 0, &[leader]);
        assert_eq!(again.status.code, ErrorCode::InvalidUpdateVersion);
        assert!(again.status.message.contains("learn it and ask again"), "{}", again.status);
        assert_eq!((again.partition_epoch, again.isr.clone()), (1, vec![leader]));
        // A change based on the current epoch passes.
        let others: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        let grow = alter(&mut c, leader, epoch, 1, &[leader, others[0]]);
        assert!(grow.status.is_ok());
        assert_eq!(grow.partition_epoch, 2);
        // Leadership changes move it too, and it survives a snapshot and a replay.
        c.handle_elect_leader(5, "t", 0, protocol::Election::Again).unwrap();
        assert_eq!(hb(&mut c).partition_epoch, 3);
        let mut replayed = Cluster::new(ClusterConfig::default());
        for e in c.snapshot() {
            replayed.apply(&Entry::decode(e.encode()).unwrap());
        }
        replayed.handle_heartbeat(0, leader, "x", &[]);
        assert_eq!(replayed.handle_heartbeat(0, leader, "x", &[]).1[0].partition_epoch, 3);
    }

    #[test]
    fn election_bumps_the_epoch_and_needs_a_live_isr_member() {
        let mut c = cluster(&[1]);
        c.handle_create_topic(0, "t", 1, 1, -1).unwrap();
        c.handle_elect_leader(10, "t", 0, protocol::Election::Again).unwrap();
        c.handle_elect_leader(10, "t", 0, protocol::Election::Again).unwrap();
        assert_eq!(c.leader_of("t", 0).unwrap().1, 2);
        let (_, a, _) = c.handle_heartbeat(20, 1, "a:1", &[]);
        assert_eq!(a[0].leader_epoch, 2);
        assert_eq!(
            c.handle_elect_leader(500, "t", 0, protocol::Election::Again).unwrap_err().code,
            ErrorCode::LeaderNotAvailable
        );
        assert_eq!(
            c.handle_elect_leader(10, "t", 5, protocol::Election::Again).unwrap_err().code,
            ErrorCode::UnknownTopicOrPartition
        );
    }

    /// Issue 32, item 4: Kafka's PREFERRED election moves the leadership back to the first
    /// replica once it is live and in sync, and its UNCLEAN one acts only for a partition whose
    /// leader is gone; each under a new leader epoch, with Kafka's refusals.
    #[test]
    fn kafkas_preferred_and_unclean_elections() {
        use protocol::Election::{Preferred, Unclean};
        // The preferred replica leads, then its lease lapses and another leads; it comes back
        // and the leader takes it into the ISR again (at 160).
        let setup = || {
            let mut c = cluster(&[1, 2, 3]);
            c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
            let p = state(&c, "t");
            let preferred = p.replicas[0];
            assert_eq!(p.leader_id, preferred);
            assert_eq!(c.handle_elect_leader(10, "t", 0, Preferred).unwrap_err().code, ErrorCode::ElectionNotNeeded);
            assert_eq!(c.handle_elect_leader(10, "t", 0, Unclean).unwrap_err().code, ErrorCode::ElectionNotNeeded);
            for b in &p.replicas[1..] {
                c.handle_heartbeat(90, *b, &format!("a:{b}"), &[]);
            }
            c.handle_tick(150);
            let moved = state(&c, "t");
            assert!(p.replicas[1..].contains(&moved.leader_id) && !moved.isr.contains(&preferred), "{moved:?}");
            let refused = c.handle_elect_leader(150, "t", 0, Preferred).unwrap_err();
            assert_eq!(refused.code, ErrorCode::PreferredLeaderNotAvailable, "{refused}");
            // Back, but not in sync yet: still refused.
            c.handle_heartbeat(160, preferred, &format!("a:{preferred}"), &[]);
            let refused = c.handle_elect_leader(160, "t", 0, Preferred).unwrap_err();
            assert!(refused.code == ErrorCode::PreferredLeaderNotAvailable && refused.message.contains("in sync"));
            let partition_epoch = c.handle_heartbeat(160, moved.leader_id, "x", &[]).1[0].partition_epoch;
            let grown: Vec<i32> = moved.isr.iter().copied().chain([preferred]).collect();
            assert!(alter(&mut c, moved.leader_id, moved.leader_epoch, partition_epoch, &grown).status.is_ok());
            (c, preferred, moved)
        };
        // The preferred election moves the leadership to it, the old leader a follower in sync.
        let (mut c, preferred, moved) = setup();
        let entries = c.handle_elect_leader(160, "t", 0, Preferred).unwrap();
        assert_eq!(entries.len(), 1);
        let back = state(&c, "t");
        assert_eq!((back.leader_id, back.leader_epoch), (preferred, moved.leader_epoch + 1));
        assert!(back.isr.contains(&moved.leader_id), "{back:?}");
        assert_eq!(c.handle_elect_leader(160, "t", 0, Preferred).unwrap_err().code, ErrorCode::ElectionNotNeeded);
        // Every lease lapsed: nobody to elect, even uncleanly.
        let none = c.handle_elect_leader(10_000, "t", 0, Unclean).unwrap_err();
        assert_eq!(none.code, ErrorCode::EligibleLeadersNotAvailable, "{none}");
        // The leader's lease lapsed before any tick noticed: the preferred election takes it out
        // of the ISR, as the other elections do.
        let (mut c, preferred, moved) = setup();
        for b in [1, 2, 3].into_iter().filter(|b| *b != moved.leader_id) {
            c.handle_heartbeat(250, b, &format!("a:{b}"), &[]);
        }
        c.handle_elect_leader(300, "t", 0, Preferred).unwrap();
        let back = state(&c, "t");
        assert_eq!(back.leader_id, preferred);
        assert!(!back.isr.contains(&moved.leader_id), "{back:?}");
    }

    #[test]
    fn metadata_auto_creates_only_when_asked() {
        let mut c = cluster(&[1]);
        let (_, topics, entries) = c.handle_metadata(0, &["x".into()], false);
        assert_eq!(topics[0].status.code, ErrorCode::UnknownTopicOrPartition);
        assert!(entries.is_empty());
        let (brokers, topics, entries) = c.handle_metadata(0, &["x".into()], true);
        assert!(topics[0].status.is_ok());
        assert_eq!(topics[0].partitions.len(), 1);
        assert_eq!(entries.len(), 1);
        assert_eq!(brokers.len(), 1);
    }

    #[test]
    fn replay_rebuilds_leaders_and_isr() {
        let mut c = cluster(&[1, 2]);
        let mut log = vec![c.handle_create_topic(0, "t", 2, 2, -1).unwrap()];
        log.extend(c.handle_tick(150));
        log.extend(c.handle_elect_leader(0, "t", 1, protocol::Election::Again).unwrap_or_default());
        let mut r = Cluster::new(ClusterConfig::default());
        for e in &log {
            r.apply(e);
        }
        assert_eq!(r.topics, c.topics);
        let mut s = Cluster::new(ClusterConfig::default());
        for e in c.snapshot() {
            s.apply(&e);
        }
        assert_eq!(s.topics, c.topics, "a snapshot rebuilds the same topics");
    }

    /// Found in review: incarnations lived only in memory, so after a coordinator restart a
    /// broker that had restarted meanwhile counted as first seen and kept its leadership at the
    /// same epoch.
    #[test]
    fn a_broker_restart_is_recognised_across_a_coordinator_restart() {
        let mut c = cluster(&[1]);
        c.handle_create_topic(0, "s", 1, 1, -1).unwrap();
        let mut journal = c.snapshot();
        journal.extend(restart(&mut c, 0, 1, lost(1)));
        // The coordinator restarts from its journal; the broker restarts too.
        let mut back = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..Default::default() });
        for e in &journal {
            back.apply(e);
        }
        let (_, epoch, _) = back.leader_of("s", 0).unwrap();
        assert!(restart(&mut back, 5, 1, lost(1)).is_empty(), "the same process is not a restart");
        assert_eq!(restart(&mut back, 6, 1, lost(2)).len(), 2);
        assert_eq!(back.leader_of("s", 0).unwrap().1, epoch + 1, "a new leader epoch");
        // Snapshots carry the incarnations too.
        let mut again = Cluster::new(ClusterConfig::default());
        for e in back.snapshot() {
            again.apply(&e);
        }
        assert!(restart(&mut again, 7, 1, lost(2)).is_empty());
    }

    fn state(c: &Cluster, topic: &str) -> PartitionState {
        c.describe(0).1.into_iter().find(|p| p.topic == topic).unwrap()
    }

    /// Issue 27: a broker whose lease lapsed leaves every ISR at the next tick, not after the
    /// leader's replica lag timeout, so the leader's high watermark stops waiting for it; into
    /// the ELR once the ISR is below `min.insync.replicas`. Its leaderships move as before.
    #[test]
    fn a_follower_whose_lease_lapsed_leaves_every_isr_at_once() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, 2).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let followers: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        c.handle_heartbeat(80, leader, "a", &[]);
        c.handle_heartbeat(80, followers[0], "a", &[]);
        assert!(c.handle_tick(90).is_empty(), "every lease holds");
        let out = c.handle_tick(120);
        assert!(matches!(out.as_slice(), [Entry::IsrChanged { .. }]), "{out:?}");
        let p = state(&c, "t");
        assert_eq!((p.leader_id, p.leader_epoch), (leader, epoch), "the leader stays");
        assert!(!p.isr.contains(&followers[1]) && p.isr.len() == 2 && p.elr.is_empty(), "{p:?}");
        assert!(c.handle_tick(130).is_empty(), "once");
        c.handle_heartbeat(150, leader, "a", &[]);
        let out = c.handle_tick(200);
        assert_eq!(out.len(), 1);
        let p = state(&c, "t");
        assert_eq!(p.isr, vec![leader]);
        assert_eq!(p.elr, vec![followers[0]], "it held everything committed when the ISR fell below the minimum");
    }

    /// Issue 27: a broker restarts with its logs intact but one replica's log came back short
    /// (damage cut, or below its checkpointed high watermark). That replica alone is treated as
    /// lost: out of the ISR and ELR, its leadership moved; the broker's other replicas keep their
    /// places.
    #[test]
    fn a_replica_reported_lost_at_its_restart_leaves_the_isr_alone() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        c.handle_create_topic(0, "u", 1, 3, -1).unwrap();
        for b in [1, 2, 3] {
            c.handle_registration(0, b, intact(b.into()), &[]).unwrap();
        }
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let damaged = ReplicaReport { lost: true, problem: "lost: damage".into(), ..report("t") };
        restart(&mut c, 10, leader, intact(40));
        let (_, epoch_after_intact, _) = c.leader_of("t", 0).unwrap();
        assert_eq!(epoch_after_intact, epoch + 1, "an intact restart keeps the leadership");
        let previous_broker_epoch = c.registration_of(leader).unwrap().1;
        let start = BrokerStart { previous_broker_epoch, ..intact(41) };
        c.handle_registration(20, leader, start, &[damaged, report("u")]).unwrap();
        let t = state(&c, "t");
        assert!(
            t.leader_id != leader && t.leader_id > 0 && !t.isr.contains(&leader) && !t.elr.contains(&leader),
            "{t:?}"
        );
        let u = state(&c, "u");
        assert!(u.isr.contains(&leader), "its other replica keeps its place: {u:?}");
        c.handle_heartbeat(
            30,
            leader,
            "a",
            &[ReplicaReport { lost: true, problem: "lost: damage".into(), ..report("t") }],
        );
        let problem = state(&c, "t").progress.iter().find(|g| g.broker_id == leader).unwrap().problem.clone();
        assert_eq!(problem, "lost: damage", "admin describe shows it");
    }

    /// A lost mark its broker never got to clear: the replica was reported lost by one
    /// registration (out of the ISR then), refetched and was let back in, but its broker did not
    /// read that ISR before it restarted again (found by the simulator: the partition lost its
    /// sole in-sync replica that way, and its leader). The coordinator keeps it in sync; a new
    /// loss, a mark no registration of this broker reported, or one of a replica out of the ISR
    /// still takes it out.
    #[test]
    fn a_stale_lost_mark_of_a_replica_in_sync_again_is_not_a_loss() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        for b in [1, 2, 3] {
            c.handle_registration(0, b, intact(b.into()), &[]).unwrap();
        }
        let (leader, _, _) = c.leader_of("t", 0).unwrap();
        let f = (1..=3).find(|b| *b != leader).unwrap();
        let lost_at = |reported_at| ReplicaReport {
            lost: true,
            problem: "lost: damage".into(),
            lost_reported_at: reported_at,
            ..report("t")
        };
        let register = |c: &mut Cluster, now, incarnation, reports: &[ReplicaReport]| {
            let previous_broker_epoch = c.registration_of(f).unwrap().1;
            let start = BrokerStart { previous_broker_epoch, ..intact(incarnation) };
            c.handle_registration(now, f, start, reports).unwrap().0
        };
        let reported = register(&mut c, 10, 10, &[lost_at(-1)]);
        assert!(!state(&c, "t").isr.contains(&f), "a new loss leaves the ISR");
        let back_in = |c: &mut Cluster| {
            let (leader, leader_epoch, _) = c.leader_of("t", 0).unwrap();
            let (isr, partition_epoch) = c.isr_of("t", 0).map(|(i, e)| (i.to_vec(), e)).unwrap();
            let isr: Vec<i32> = isr.into_iter().chain([f]).collect();
            assert!(alter(c, leader, leader_epoch, partition_epoch, &isr).status.is_ok());
            assert!(state(c, "t").isr.contains(&f));
        };
        back_in(&mut c);
        // Restarted before it read that ISR: its mark names the registration that reported it.
        register(&mut c, 20, 11, &[lost_at(reported)]);
        assert!(state(&c, "t").isr.contains(&f), "a stale mark: still in sync");
        // A mark no registration of this broker made (later than its last) is a loss.
        let last = c.registration_of(f).unwrap().1;
        register(&mut c, 30, 12, &[lost_at(last + 1)]);
        assert!(!state(&c, "t").isr.contains(&f));
        // Out of the ISR, a mark reported earlier still counts (it is not back in sync).
        register(&mut c, 40, 13, &[lost_at(reported)]);
        assert!(!state(&c, "t").isr.contains(&f));
        // Back in, then a loss found at this start (reported by none): out.
        back_in(&mut c);
        register(&mut c, 50, 14, &[lost_at(-1)]);
        assert!(!state(&c, "t").isr.contains(&f));
    }

    /// The restart the hardening review found: every broker of a 3-replica partition is killed;
    /// each one that comes back used to leave the ISR, so the last to return was the only
    /// electable one. Brokers whose logs are intact keep their place: the first back leads.
    #[test]
    fn after_a_whole_cluster_crash_the_first_intact_replica_back_leads() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        for b in [1, 2, 3] {
            restart(&mut c, 0, b, intact(b.into()));
        }
        // All three die: no live ISR member, the partition waits without a leader.
        c.handle_tick(150);
        assert_eq!(c.leader_of("t", 0).unwrap().0, NO_LEADER);
        assert_eq!(state(&c, "t").isr, vec![1, 2, 3]);
        // Broker 3 comes back with its logs intact (synced, or stopped cleanly).
        assert!(restart(&mut c, 200, 3, intact(30)).iter().all(|e| matches!(e, Entry::BrokerIncarnation { .. })));
        c.handle_heartbeat(200, 3, "a:3", &[]);
        c.handle_tick(210);
        assert_eq!(c.leader_of("t", 0).unwrap().0, 3, "an intact in-sync replica leads at once");
        // The others' leases lapsed: they leave the ISR (its high watermark must not wait for
        // them), but stay eligible, since they hold every committed record (KIP-966).
        let p = state(&c, "t");
        assert_eq!((p.isr, p.elr), (vec![3], vec![1, 2]));
    }

    /// A replica that comes back with a shorter log (lost unsynced writes, a replaced disk) is
    /// never elected over one that holds every committed record.
    #[test]
    fn a_restart_that_lost_records_or_its_disk_is_never_elected_over_an_intact_replica() {
        for start in [lost(20), BrokerStart { log_dir_id: 2, ..intact(20) }] {
            let mut c = cluster(&[1, 2, 3]);
            c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
            for b in [1, 2, 3] {
                restart(&mut c, 0, b, intact(b.into()));
            }
            c.handle_tick(150);
            // Broker 2 comes back first, but its log may be short: it leaves the ISR.
            restart(&mut c, 200, 2, start);
            c.handle_heartbeat(200, 2, "a:2", &[]);
            c.handle_tick(210);
            assert_eq!(c.leader_of("t", 0).unwrap().0, NO_LEADER, "{start:?} must not lead");
            assert_eq!(state(&c, "t").isr, vec![1, 3]);
            // Broker 1 is back intact and leads.
            restart(&mut c, 220, 1, intact(10));
            c.handle_heartbeat(220, 1, "a:1", &[]);
            c.handle_tick(230);
            assert_eq!(c.leader_of("t", 0).unwrap().0, 1);
        }
    }

    /// A restarted leader keeps its place when its logs are intact, under a new leader epoch:
    /// batches it replicated but had not synced may be gone, and what it writes next at those
    /// offsets must not pass for them on the followers.
    #[test]
    fn an_intact_restart_keeps_the_isr_and_bumps_the_leader_epoch_of_what_it_led() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        restart(&mut c, 0, leader, intact(1));
        let follower = (1..=3).find(|b| *b != leader).unwrap();
        restart(&mut c, 0, follower, intact(1));
        assert_eq!(restart(&mut c, 5, follower, intact(2)).len(), 1, "a follower's intact restart changes nothing");
        assert_eq!(restart(&mut c, 5, leader, intact(2)).len(), 2);
        assert_eq!(c.leader_of("t", 0).unwrap(), (leader, epoch + 1, Some("a:".to_string() + &leader.to_string())));
        assert_eq!(state(&c, "t").isr, vec![1, 2, 3]);
    }

    /// KIP-966: members that leave an ISR falling below min.insync.replicas hold every
    /// committed record (the high watermark stops), and lead when no ISR member is live.
    #[test]
    fn replicas_leaving_an_isr_below_the_minimum_become_eligible_and_may_lead() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        assert_eq!(state(&c, "t").min_insync_replicas, 2, "the default for three replicas");
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let others: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        // One follower lags: the ISR shrinks to two, still the minimum, so nobody is eligible.
        let r = alter(&mut c, leader, epoch, 0, &[leader, others[0]]);
        assert!(r.status.is_ok());
        assert!(state(&c, "t").elr.is_empty());
        // The other one lags too: below the minimum, it becomes eligible.
        assert!(alter(&mut c, leader, epoch, 1, &[leader]).status.is_ok());
        assert_eq!(state(&c, "t").elr, vec![others[0]]);
        // The leader dies for good: the eligible replica leads, and the ISR starts from it.
        c.handle_heartbeat(100, others[0], "a", &[]);
        c.handle_heartbeat(100, others[1], "a", &[]);
        c.handle_tick(150);
        let p = state(&c, "t");
        assert_eq!((p.leader_id, p.isr.clone()), (others[0], vec![others[0]]));
        assert_eq!(p.elr, vec![leader], "the old leader held everything committed too");
        assert!(!p.elr.contains(&others[1]), "a replica that left at the minimum lacks records");
        // Back at the minimum, nobody is eligible any more.
        let (_, epoch, _) = c.leader_of("t", 0).unwrap();
        let pe = c.isr_of("t", 0).unwrap().1;
        assert!(alter(&mut c, others[0], epoch, pe, &[others[0], others[1]]).status.is_ok());
        assert!(state(&c, "t").elr.is_empty());
        // An eligible replica that restarts without its logs is eligible no more.
        assert!(alter(&mut c, others[0], epoch, pe + 1, &[others[0]]).status.is_ok());
        assert_eq!(state(&c, "t").elr, vec![others[1]]);
        restart(&mut c, 160, others[1], intact(1));
        restart(&mut c, 170, others[1], lost(2));
        assert!(state(&c, "t").elr.is_empty());
    }

    #[test]
    fn min_insync_replicas_defaults_and_limits() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "one", 1, 1, -1).unwrap();
        c.handle_create_topic(0, "two", 1, 2, -1).unwrap();
        c.handle_create_topic(0, "three", 1, 3, 3).unwrap();
        assert_eq!(state(&c, "one").min_insync_replicas, 1);
        assert_eq!(state(&c, "two").min_insync_replicas, 1);
        assert_eq!(state(&c, "three").min_insync_replicas, 3);
        let refused = c.handle_create_topic(0, "four", 1, 2, 3).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidConfig);
        assert!(refused.message.contains("at most 2"), "{refused}");
        let mut strict = Cluster::new(ClusterConfig { default_min_insync_replicas: Some(3), ..Default::default() });
        strict.handle_heartbeat(0, 1, "a", &[]);
        strict.handle_create_topic(0, "solo", 1, 1, -1).unwrap();
        assert_eq!(state(&strict, "solo").min_insync_replicas, 1, "a default above the factor is capped");
    }

    /// Issue 32, item 1: a topic's configs are checked when it is created and changed, kept
    /// with it (journal entries, snapshot), and handed to its brokers with each assignment.
    #[test]
    fn topic_configs_are_checked_kept_and_handed_to_the_brokers() {
        use protocol::ConfigChange::{Delete, Set};
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let configs =
            |c: &mut Cluster, name: &str| c.handle_metadata(0, &[name.to_string()], false).1[0].configs.clone();
        let mut c = cluster(&[1, 2, 3]);
        let refused = c
            .handle_create_topic_with(0, "t", (1, 3, -1), &pairs(&[("unclean.leader.election.enable", "true")]))
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidConfig);
        assert!(refused.message.contains("unclean.leader.election.enable"), "{refused}");
        assert!(c.topics.is_empty(), "nothing created");
        let created = c
            .handle_create_topic_with(
                0,
                "t",
                (2, 3, -1),
                &pairs(&[("retention.ms", "60000"), ("min.insync.replicas", "3"), ("segment.bytes", "4096")]),
            )
            .unwrap();
        assert_eq!(configs(&mut c, "t"), pairs(&[("retention.ms", "60000"), ("segment.bytes", "4096")]));
        assert_eq!(state(&c, "t").min_insync_replicas, 3, "min.insync.replicas among the configs is the topic's");
        let (_, assignments, _) = c.handle_heartbeat(0, 2, "b", &[]);
        assert!(assignments.iter().all(|a| a.configs == configs(&mut c, "t")), "{assignments:?}");

        // Incremental: only what is named changes; a bad change changes nothing.
        let bad = c.handle_alter_configs("t", &[Set("cleanup.policy".into(), "compact".into())], false, false);
        assert!(bad.unwrap_err().message.contains("only delete"));
        let checked = c.handle_alter_configs("t", &[Set("max.message.bytes".into(), "100".into())], false, true);
        assert_eq!(checked, Ok(None));
        let same = c.handle_alter_configs("t", &[Set("retention.ms".into(), "60000".into())], false, false);
        assert_eq!(same, Ok(None), "nothing changes, nothing to journal");
        assert_eq!(configs(&mut c, "t").len(), 2, "validate_only changes nothing");
        let changed = c
            .handle_alter_configs(
                "t",
                &[Set("max.message.bytes".into(), "100".into()), Delete("retention.ms".into())],
                false,
                false,
            )
            .unwrap()
            .unwrap();
        assert_eq!(configs(&mut c, "t"), pairs(&[("max.message.bytes", "100"), ("segment.bytes", "4096")]));
        assert_eq!(state(&c, "t").min_insync_replicas, 3);
        // Replace: what is not named goes back to its default (min.insync.replicas: 2 for three).
        let replaced =
            c.handle_alter_configs("t", &[Set("retention.bytes".into(), "-1".into())], true, false).unwrap().unwrap();
        assert_eq!(configs(&mut c, "t"), pairs(&[("retention.bytes", "-1")]));
        assert_eq!(state(&c, "t").min_insync_replicas, 2);
        assert_eq!(
            c.handle_alter_configs("nope", &[], false, false).unwrap_err().code,
            ErrorCode::UnknownTopicOrPartition
        );

        // Replaying the entries, or the snapshot, gives the same topic.
        let mut replay = cluster(&[1, 2, 3]);
        for e in [&created, &changed, &replaced] {
            replay.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!((configs(&mut replay, "t"), state(&replay, "t").min_insync_replicas), (configs(&mut c, "t"), 2));
        let mut restored = cluster(&[1, 2, 3]);
        for e in c.snapshot() {
            restored.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!(configs(&mut restored, "t"), configs(&mut c, "t"));
        // KIP-966: eligible replicas are kept while the ISR stays below the minimum, and cleared
        // once a lower minimum lets the high watermark move again.
        if let Some(t) = c.topics.get_mut("t") {
            t.partitions[0].isr = vec![1];
            t.partitions[0].elr = vec![2, 3];
        }
        c.handle_alter_configs("t", &[Set("retention.ms".into(), "5".into())], false, false).unwrap();
        assert_eq!(c.topics["t"].partitions[0].elr, [2, 3], "the minimum did not change");
        c.handle_alter_configs("t", &[Set("min.insync.replicas".into(), "1".into())], false, false).unwrap();
        assert!(c.topics["t"].partitions[0].elr.is_empty());
        // An entry of a deleted topic changes nothing of one created again under the name.
        c.handle_delete_topic("t", 0).unwrap();
        for b in [1, 2, 3] {
            c.handle_heartbeat(100, b, "a", &[]);
        }
        c.handle_create_topic(100, "t", 1, 3, -1).unwrap();
        c.apply(&changed);
        assert!(configs(&mut c, "t").is_empty());
    }

    #[test]
    fn partition_limits_per_topic_and_for_the_cluster() {
        let mut c =
            Cluster::new(ClusterConfig { topic_partitions_max: 10, cluster_partitions_max: 25, ..Default::default() });
        c.handle_heartbeat(0, 1, "a", &[]);
        let refused = c.handle_create_topic(0, "big", 11, 1, -1).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidPartitions);
        assert!(refused.message.contains("--topic-partitions-max"), "{refused}");
        c.handle_create_topic(0, "a", 10, 1, -1).unwrap();
        c.handle_create_topic(0, "b", 10, 1, -1).unwrap();
        let refused = c.handle_create_topic(0, "c", 6, 1, -1).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidPartitions);
        assert!(
            refused.message.contains("--cluster-partitions-max") && refused.message.contains("20 exist"),
            "{refused}"
        );
        c.handle_create_topic(0, "c", 5, 1, -1).unwrap();
        let (_, topics, entries) = c.handle_metadata(0, &["auto".into()], true);
        assert_eq!(topics[0].status.code, ErrorCode::InvalidPartitions, "auto-creation is bounded too");
        assert!(entries.is_empty());
    }

    /// KIP-112: a replica whose log failed gives up its leadership to another in-sync replica
    /// and leaves the ISR; the only in-sync replica leaves the partition leaderless until its
    /// broker restarts.
    #[test]
    fn a_replica_whose_log_failed_leaves_the_isr_and_gives_up_its_leadership() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let failed = |topic: &str| ReplicaReport {
            topic: topic.into(),
            partition: 0,
            log_end_offset: 0,
            high_watermark: 0,
            offline: true,
            lost: false,
            problem: "offline".into(),
            topic_id: 0,
            refused_leader_epoch: -1,
            lost_reported_at: -1,
        };
        assert_eq!(c.handle_offline(10, leader, &[failed("t")]).len(), 1);
        assert!(c.handle_offline(10, leader, &[failed("t")]).is_empty(), "reported once is enough");
        let (new_leader, new_epoch, _) = c.leader_of("t", 0).unwrap();
        assert!(new_leader != leader && new_epoch == epoch + 1);
        assert!(!state(&c, "t").isr.contains(&leader));
        // The sole in-sync replica of another topic fails: no leader, and it is not re-elected
        // while its broker stays up with the failed log.
        c.handle_create_topic(0, "s", 1, 1, -1).unwrap();
        let (solo, _, _) = c.leader_of("s", 0).unwrap();
        c.handle_offline(20, solo, &[failed("s")]);
        assert_eq!(c.leader_of("s", 0).unwrap().0, NO_LEADER);
        c.handle_heartbeat(30, solo, "a", &[]);
        c.handle_tick(40);
        assert_eq!(c.leader_of("s", 0).unwrap().0, NO_LEADER, "not elected with its log failed");
        // The broker restarts (its log reopened): it leads again.
        restart(&mut c, 50, solo, intact(5));
        restart(&mut c, 60, solo, intact(6));
        c.handle_tick(70);
        assert_eq!(c.leader_of("s", 0).unwrap().0, solo);
    }

    /// Found by the simulator: heartbeats of a broker's old process, delayed behind its
    /// restart, were taken for more restarts (each one not intact, so the broker left every
    /// ISR), until a replica whose disk was replaced was the only one left to lead. Broker
    /// epochs order the processes: a superseded one's heartbeats are refused and change nothing.
    #[test]
    fn heartbeats_of_a_superseded_process_are_refused_and_change_nothing() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (first, _) = c.handle_registration(0, 2, intact(10), &[]).unwrap();
        assert_eq!(c.handle_registration(0, 2, intact(10), &[]).unwrap(), (first, vec![]), "a repeated registration");
        // The process restarts; its successor names it.
        let next = BrokerStart { previous_broker_epoch: first, ..intact(11) };
        let (second, _) = c.handle_registration(5, 2, next, &[]).unwrap();
        assert!(second > first);
        let before = state(&c, "t");
        // A late heartbeat of the old process, and a late registration of it: refused.
        let late = c.handle_registration(6, 2, BrokerStart { broker_epoch: first, ..lost(10) }, &[]).unwrap_err();
        assert_eq!(late.code, ErrorCode::StaleBrokerEpoch);
        let late = c.handle_registration(6, 2, lost(10), &[]).unwrap_err();
        assert_eq!(late.code, ErrorCode::DuplicateBrokerRegistration);
        assert!(late.message.contains("retry once that lease expires"), "{late}");
        assert_eq!(state(&c, "t"), before, "nothing moved");
        assert_eq!(
            c.handle_registration(7, 2, BrokerStart { broker_epoch: second, ..intact(11) }, &[]).unwrap().0,
            second
        );
        // A process that does not name the current one (a wiped data directory) registers once
        // the current registration's lease has expired.
        let wiped = BrokerStart { log_dir_id: 9, ..lost(12) };
        assert_eq!(c.handle_registration(50, 2, wiped, &[]).unwrap_err().code, ErrorCode::DuplicateBrokerRegistration);
        let (third, entries) = c.handle_registration(150, 2, wiped, &[]).unwrap();
        assert!(third > second && entries.len() > 1, "registered, and out of the ISR");
        assert!(!state(&c, "t").isr.contains(&2));
    }

    /// When the last in-sync replica restarts without its logs intact, no replica provably holds
    /// every committed record: the partition goes offline rather than elect one that may hold
    /// less than another, until an operator asks for an unclean election, which picks the live
    /// replica with the longest log.
    #[test]
    fn with_no_replica_holding_every_committed_record_the_partition_waits_for_an_unclean_election() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, 1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        for b in [1, 2, 3] {
            c.handle_registration(0, b, intact(b.into()), &[]).unwrap();
        }
        // The followers fall behind: the ISR is the leader alone (the minimum is 1: nobody eligible).
        assert!(alter(&mut c, leader, epoch, 0, &[leader]).status.is_ok());
        let others: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        let report = |leo| ReplicaReport {
            topic: "t".into(),
            partition: 0,
            log_end_offset: leo,
            high_watermark: 0,
            offline: false,
            lost: false,
            problem: String::new(),
            topic_id: 0,
            refused_leader_epoch: -1,
            lost_reported_at: -1,
        };
        c.handle_heartbeat(90, others[0], "a", &[report(5)]);
        c.handle_heartbeat(90, others[1], "a", &[report(7)]);
        restart(&mut c, 150, leader, lost(40));
        let p = state(&c, "t");
        assert_eq!((p.leader_id, p.isr.len(), p.elr.len()), (NO_LEADER, 0, 0), "offline: {p:?}");
        c.handle_tick(160);
        assert_eq!(c.leader_of("t", 0).unwrap().0, NO_LEADER, "never elected automatically");
        assert_eq!(
            c.handle_elect_leader(170, "t", 0, protocol::Election::Again).unwrap_err().code,
            ErrorCode::LeaderNotAvailable
        );
        let entries = c.handle_elect_leader(170, "t", 0, protocol::Election::AgainUnclean).unwrap();
        let p = state(&c, "t");
        assert_eq!((p.leader_id, p.isr.clone()), (others[1], vec![others[1]]), "the longest log leads");
        // Issue 28: the unclean leader learns it is one, and cuts its log to its high watermark
        // before it serves; a replay and a snapshot keep it.
        let epoch = p.leader_epoch;
        assert_eq!(entries[1], Entry::UncleanLeader { topic: "t".into(), partition: 0, leader_epoch: epoch });
        let unclean_of = |c: &mut Cluster| {
            let (_, a, _) = c.handle_heartbeat(180, others[1], "a", &[report(7)]);
            a[0].unclean_leader_epoch
        };
        assert_eq!(unclean_of(&mut c), epoch);
        let mut replayed = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..ClusterConfig::default() });
        for e in c.snapshot() {
            replayed.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!(unclean_of(&mut replayed), epoch);
        // A clean election after it: the assignment still names the unclean epoch, which no
        // longer matches the leadership (the new leader cuts nothing).
        let clean = c.handle_elect_leader(185, "t", 0, protocol::Election::Again).unwrap();
        assert_eq!(clean.len(), 1);
    }

    /// Issue 27, item 1: a follower refusing its leader's replication (it would cut committed
    /// records) shows the leader lacks them; the leadership moves to an eligible replica. A
    /// refusal of an earlier leader epoch, or the leader's own report, changes nothing.
    #[test]
    fn a_leader_its_followers_refuse_for_lacking_committed_records_loses_its_leadership() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 3, -1).unwrap();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        // The followers fell behind the (damaged) leader: the ISR is the leader alone, and they
        // are eligible (KIP-966: below min.insync.replicas 2).
        assert!(alter(&mut c, leader, epoch, 0, &[leader]).status.is_ok());
        let followers: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        assert_eq!(state(&c, "t").elr.len(), 2);
        let refusing = |leader_epoch| ReplicaReport { refused_leader_epoch: leader_epoch, ..report("t") };
        assert!(c.handle_refusals(10, followers[0], &[refusing(epoch - 1)]).is_empty(), "an older leadership's");
        assert!(c.handle_refusals(10, leader, &[refusing(epoch)]).is_empty(), "the leader's own");
        let moved = c.handle_refusals(10, followers[0], &[refusing(epoch)]);
        assert_eq!(moved.len(), 1, "{moved:?}");
        let (new_leader, new_epoch, _) = c.leader_of("t", 0).unwrap();
        assert!(followers.contains(&new_leader) && new_epoch == epoch + 1, "{new_leader} at {new_epoch}");
        let p = state(&c, "t");
        assert!(!p.isr.contains(&leader) && !p.elr.contains(&leader), "{p:?}");
        assert!(c.handle_refusals(20, followers[0], &[refusing(epoch)]).is_empty(), "once is enough");
    }

    fn report(topic: &str) -> ReplicaReport {
        ReplicaReport {
            topic: topic.into(),
            partition: 0,
            log_end_offset: 0,
            high_watermark: 0,
            offline: false,
            lost: false,
            problem: String::new(),
            topic_id: 0,
            refused_leader_epoch: -1,
            lost_reported_at: -1,
        }
    }

    /// A deleted topic: gone from metadata and assignments, its brokers told to drop it, a
    /// marker to it waiting until they have; created again it is another topic.
    #[test]
    fn a_deleted_topic_is_dropped_by_its_brokers_and_its_name_is_another_topic_after() {
        let mut c = cluster(&[1, 2]);
        let e = c.handle_create_topic(0, "t", 2, 2, -1).unwrap();
        let Entry::TopicCreated { topic_id: first, .. } = e else { panic!("{e:?}") };
        assert_ne!(first, 0);
        let (_, assignments, _) = c.handle_heartbeat(1, 1, "a:1", &[report("t")]);
        assert!(assignments.iter().all(|a| a.topic_id == first));
        let deleted = c.handle_delete_topic("t", 0).unwrap();
        assert_eq!(deleted, Entry::TopicDeleted { name: "t".into(), topic_id: first });
        assert!(!c.topic_exists("t"));
        assert_eq!(c.handle_delete_topic("t", 0).unwrap_err().code, ErrorCode::UnknownTopicOrPartition);
        assert_eq!(c.handle_delete_topic("", first).unwrap_err().code, ErrorCode::UnknownTopicId);
        // Its brokers still serve it until they heartbeat without it.
        assert!(c.drop_pending(first, 2));
        assert_eq!(c.deleted_among(&[report("t")]), [DeletedTopic { name: "t".into(), topic_id: first }]);
        let (_, assignments, _) = c.handle_heartbeat(3, 1, "a:1", &[report("t")]);
        assert!(assignments.is_empty());
        assert!(c.drop_pending(first, 3), "broker 1 still reports it, broker 2 never said");
        c.handle_heartbeat(4, 1, "a:1", &[]);
        assert!(c.drop_pending(first, 4), "broker 2 has not heartbeated without it");
        c.handle_heartbeat(5, 2, "a:2", &[]);
        assert!(!c.drop_pending(first, 5));
        // The name again: another id; a replay and a snapshot agree.
        let e = c.handle_create_topic(6, "t", 1, 1, -1).unwrap();
        let Entry::TopicCreated { topic_id: second, .. } = e.clone() else { panic!() };
        assert_ne!(second, first);
        let mut replayed = Cluster::new(ClusterConfig::default());
        for e in c.snapshot() {
            replayed.apply(&Entry::decode(e.encode()).unwrap());
        }
        let (_, topics, _) = replayed.handle_metadata(7, &["t".to_string()], false);
        assert_eq!(topics[0].topic_id, second);
        assert!(replayed.deleted_among(&[report("t")]).is_empty(), "it exists again");
    }

    fn report_of(c: &Cluster, topic: &str, partition: i32) -> ReplicaReport {
        ReplicaReport { partition, topic_id: c.topic_id(topic).unwrap(), ..report(topic) }
    }

    fn moved(e: &Entry) -> (Vec<i32>, Vec<i32>, Vec<i32>, i32, i32, Vec<i32>) {
        let Entry::ReplicasChanged { replicas, adding, removing, leader_id, leader_epoch, isr, .. } = e else {
            panic!("not a replicas change: {e:?}")
        };
        (replicas.clone(), adding.clone(), removing.clone(), *leader_id, *leader_epoch, isr.clone())
    }

    /// Issue 32: a move adds the target's replicas under a new leader epoch, completes once
    /// they are in sync (the removed leader hands over to an in-sync target replica), and the
    /// removed replicas' brokers are told to drop them; replay and snapshots agree mid-move.
    #[test]
    fn a_move_adds_replicas_and_completes_once_they_are_in_sync() {
        let mut c = cluster(&[1, 2, 3, 4]);
        let mut journal = vec![c.handle_create_topic(0, "t", 1, 2, 1).unwrap()];
        let original = c.replicas_of("t", 0).unwrap().to_vec();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let target: Vec<i32> = [1, 2, 3, 4].into_iter().filter(|b| !original.contains(b)).collect();
        let code = |r: Result<Option<Entry>, Status>| r.unwrap_err().code;
        assert_eq!(code(c.handle_reassign(1, "t", 0, Some(&[]), true)), ErrorCode::InvalidReplicaAssignment);
        let twice = [target[0], target[0]];
        assert_eq!(code(c.handle_reassign(1, "t", 0, Some(&twice), true)), ErrorCode::InvalidReplicaAssignment);
        let dead = [target[0], 9];
        assert_eq!(code(c.handle_reassign(1, "t", 0, Some(&dead), true)), ErrorCode::InvalidReplicaAssignment);
        let one = [target[0]];
        assert_eq!(code(c.handle_reassign(1, "t", 0, Some(&one), false)), ErrorCode::InvalidReplicationFactor);
        assert_eq!(code(c.handle_reassign(1, "t", 0, None, false)), ErrorCode::NoReassignmentInProgress);
        assert_eq!(code(c.handle_reassign(1, "t", 1, Some(&target), false)), ErrorCode::UnknownTopicOrPartition);
        assert_eq!(c.handle_reassign(1, "t", 0, Some(&original), false).unwrap(), None, "already there");
        assert_eq!(c.leader_of("t", 0).unwrap().1, epoch, "refusals change nothing");

        let start = c.handle_reassign(1, "t", 0, Some(&target), false).unwrap().unwrap();
        journal.push(start.clone());
        let full: Vec<i32> = target.iter().chain(original.iter()).copied().collect();
        assert_eq!(
            moved(&start),
            (full.clone(), target.clone(), original.clone(), leader, epoch + 1, original.clone())
        );
        let listed = c.reassignments(None);
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].adding.clone(), listed[0].removing.clone()), (target.clone(), original.clone()));
        assert!(c.reassignments(Some(&[("t".to_string(), vec![1])])).is_empty());
        // The topic's replication factor is the target's, not the four replicas of the move.
        let added = c.handle_create_partitions(1, "t", 2, &[], false).unwrap().unwrap();
        let Entry::PartitionsAdded { replicas: ref placed, .. } = added else { panic!("{added:?}") };
        assert_eq!(placed.iter().map(Vec::len).collect::<Vec<_>>(), [2]);
        journal.push(added);
        // Mid-move, a replay of the journal and a snapshot hold the move.
        for entries in [journal.clone(), c.snapshot()] {
            let mut replayed = Cluster::new(ClusterConfig::default());
            for e in entries {
                replayed.apply(&Entry::decode(e.encode()).unwrap());
            }
            assert_eq!(replayed.reassignments(None), listed);
            assert_eq!(replayed.partition("t", 0), c.partition("t", 0));
        }
        for b in [1, 2, 3, 4] {
            let reports = if original.contains(&b) { vec![report_of(&c, "t", 0)] } else { vec![] };
            c.handle_heartbeat(2, b, &format!("a:{b}"), &reports);
        }
        assert_eq!(state(&c, "t").progress.len(), 2, "the original replicas report");
        // Not complete while the new replicas are out of sync; the old ones are not dropped.
        assert!(c.handle_tick(3).iter().all(|e| !matches!(e, Entry::ReplicasChanged { .. })));
        assert!(c.removed_among(original[0], &[report_of(&c, "t", 0)]).is_empty());
        // The leader brings one in: still not complete.
        let pe = c.partition("t", 0).unwrap().partition_epoch;
        let mut isr = original.clone();
        isr.push(target[0]);
        assert!(alter(&mut c, leader, epoch + 1, pe, &isr).status.is_ok());
        assert!(c.handle_tick(4).iter().all(|e| !matches!(e, Entry::ReplicasChanged { .. })));
        isr.push(target[1]);
        assert!(alter(&mut c, leader, epoch + 1, pe + 1, &isr).status.is_ok());
        let done = c.handle_tick(5);
        let [done] = done.as_slice() else { panic!("{done:?}") };
        let (replicas, adding, removing, new_leader, new_epoch, new_isr) = moved(done);
        assert_eq!((replicas, adding, removing), (target.clone(), vec![], vec![]));
        assert_eq!(
            (new_leader, new_epoch, new_isr),
            (target[0], epoch + 2, target.clone()),
            "the removed leader hands over"
        );
        assert!(c.reassignments(None).is_empty());
        // The old leader's ISR change under its old epoch is fenced.
        assert_eq!(alter(&mut c, leader, epoch + 1, pe + 2, &isr).status.code, ErrorCode::FencedLeaderEpoch);
        // The removed replicas are dropped; the kept ones, a replica without an id and a
        // topic this coordinator does not know are not.
        let removed = c.removed_among(original[0], &[report_of(&c, "t", 0), report("t"), report("other")]);
        assert_eq!(
            removed,
            [protocol::RemovedReplica { topic: "t".into(), partition: 0, topic_id: c.topic_id("t").unwrap() }]
        );
        assert!(c.removed_among(target[0], &[report_of(&c, "t", 0)]).is_empty());
        let (_, assignments, _) = c.handle_heartbeat(6, original[0], "a", &[report_of(&c, "t", 0)]);
        assert!(assignments.is_empty());
        let progress: Vec<i32> = state(&c, "t").progress.iter().map(|g| g.broker_id).collect();
        assert!(
            progress.iter().all(|b| target.contains(b)),
            "a removed replica's progress is not the partition's: {progress:?}"
        );
    }

    /// A move can be cancelled (back to the replicas it had) or replaced (another target, the
    /// same original replicas); a move whose target is in sync completes at once.
    #[test]
    fn a_move_is_cancelled_or_replaced_and_one_in_sync_completes_at_once() {
        let mut c = cluster(&[1, 2, 3, 4]);
        c.handle_create_topic(0, "t", 1, 2, 1).unwrap();
        let original = c.replicas_of("t", 0).unwrap().to_vec();
        let (leader, epoch, _) = c.leader_of("t", 0).unwrap();
        let others: Vec<i32> = [1, 2, 3, 4].into_iter().filter(|b| !original.contains(b)).collect();
        // Shrinking to the leader alone: in sync, complete at once.
        let e = c.handle_reassign(1, "t", 0, Some(&[leader]), true).unwrap().unwrap();
        assert_eq!(moved(&e), (vec![leader], vec![], vec![], leader, epoch + 1, vec![leader]));
        // Growing back: under way, the leader stays.
        let grow = [leader, others[0]];
        let e = c.handle_reassign(2, "t", 0, Some(&grow), true).unwrap().unwrap();
        assert_eq!(moved(&e), (grow.to_vec(), vec![others[0]], vec![], leader, epoch + 2, vec![leader]));
        // Replaced: the original is still [leader]; the first target's replica is no replica.
        let e = c.handle_reassign(3, "t", 0, Some(&[others[1], leader]), true).unwrap().unwrap();
        assert_eq!(moved(&e), (vec![others[1], leader], vec![others[1]], vec![], leader, epoch + 3, vec![leader]));
        // Cancelled: back to [leader].
        let e = c.handle_reassign(4, "t", 0, None, true).unwrap().unwrap();
        assert_eq!(moved(&e), (vec![leader], vec![], vec![], leader, epoch + 4, vec![leader]));
        assert_eq!(c.handle_reassign(5, "t", 0, None, true).unwrap_err().code, ErrorCode::NoReassignmentInProgress);
        // A target below min.insync.replicas is refused.
        c.handle_create_topic(6, "m", 1, 2, 2).unwrap();
        let code = c.handle_reassign(7, "m", 0, Some(&[1]), true).unwrap_err().code;
        assert_eq!(code, ErrorCode::InvalidReplicaAssignment);
    }

    /// A cancellation or a new target that would drop every replica holding the committed
    /// records is refused: here the added replica took over the leadership and then went down,
    /// so it alone holds what was acknowledged since.
    #[test]
    fn a_move_never_drops_every_replica_holding_the_committed_records() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 1, 1).unwrap();
        let x = c.replicas_of("t", 0).unwrap()[0];
        let (_, epoch, _) = c.leader_of("t", 0).unwrap();
        let others: Vec<i32> = [1, 2, 3].into_iter().filter(|b| *b != x).collect();
        let (y, z) = (others[0], others[1]);
        c.handle_reassign(1, "t", 0, Some(&[y, z]), true).unwrap().unwrap();
        let pe = c.partition("t", 0).unwrap().partition_epoch;
        assert!(alter(&mut c, x, epoch + 1, pe, &[x, y]).status.is_ok());
        // x dies: y leads alone; then y dies: no leader, y kept in sync.
        for b in [y, z] {
            c.handle_heartbeat(120, b, &format!("a:{b}"), &[]);
        }
        c.handle_tick(150);
        assert_eq!(c.leader_of("t", 0).unwrap().0, y);
        c.handle_heartbeat(200, z, "a:z", &[]);
        c.handle_tick(250);
        let p = c.partition("t", 0).unwrap().clone();
        assert_eq!((p.leader_id, p.isr.clone()), (NO_LEADER, vec![y]));
        for target in [None, Some(&[z][..])] {
            let refused = c.handle_reassign(260, "t", 0, target, true).unwrap_err();
            assert_eq!(refused.code, ErrorCode::InvalidReplicaAssignment, "{target:?}");
            assert!(refused.message.contains("committed"), "{refused}");
        }
        assert_eq!(c.partition("t", 0), Some(&p), "nothing changed");
        // A repeat of the move under way changes nothing either.
        c.handle_heartbeat(270, y, "a:y", &[]);
        assert_eq!(c.handle_reassign(271, "t", 0, Some(&[y, z]), true).unwrap(), None);
        assert_eq!(c.partition("t", 0), Some(&p));
    }

    /// Issue 28: a broker that was paused while its topic was deleted and created again on
    /// another broker reports the old replica under the old id: it is told to drop it, it
    /// counts as a holder until it has, and a marker owed to the old partition waits for that.
    #[test]
    fn a_replica_of_a_deleted_topic_whose_name_lives_again_elsewhere_is_dropped() {
        let mut c = cluster(&[1, 2]);
        let Entry::TopicCreated { topic_id: old, .. } = c.handle_create_topic(0, "t", 1, 1, -1).unwrap() else {
            panic!()
        };
        let held = ReplicaReport { topic_id: old, ..report("t") };
        c.handle_delete_topic("t", 0).unwrap();
        // Not created again while a live broker may still serve the old replica (writes meant
        // for the new topic would land there and vanish with it).
        let refused = c.handle_create_topic(1, "t", 1, 1, -1).unwrap_err();
        assert_eq!(refused.code, ErrorCode::LeaderNotAvailable, "{refused}");
        assert!(refused.message.contains("may still serve its old replicas"), "{refused}");
        // Broker 2 heartbeats without it; broker 1 (paused, say) lets its lease lapse: then.
        c.handle_heartbeat(60, 2, "a:2", &[]);
        let Entry::TopicCreated { topic_id: new, .. } = c.handle_create_topic(101, "t", 1, 1, -1).unwrap() else {
            panic!()
        };
        assert_ne!(old, new);
        assert!(!c.drop_pending(new, 2), "the live topic's partitions are not being dropped");
        assert_eq!(c.deleted_among(std::slice::from_ref(&held)), [DeletedTopic { name: "t".into(), topic_id: old }]);
        assert!(c.deleted_among(&[ReplicaReport { topic_id: new, ..report("t") }]).is_empty());
        assert!(c.deleted_among(&[report("t")]).is_empty(), "without an id, a live name is left alone");
        assert!(
            c.deleted_among(&[ReplicaReport { topic_id: 77, ..report("never-known") }]).is_empty(),
            "a name this coordinator never knew is left alone"
        );
        // A coordinator that restarted forgot who held it: the broker that reports it holds it.
        let mut restarted = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..ClusterConfig::default() });
        for e in c.snapshot() {
            restarted.apply(&e);
        }
        restarted.set_started(1_000);
        assert!(restarted.drop_pending(old, 1_050), "one lease after the start, any broker may still hold it");
        assert!(!restarted.drop_pending(old, 1_100), "nobody reported it: not pending");
        restarted.handle_heartbeat(1_100, 1, "a:1", std::slice::from_ref(&held));
        assert!(restarted.drop_pending(old, 1_150), "broker 1 reports the old replica");
        restarted.handle_heartbeat(1_160, 1, "a:1", &[]);
        assert!(!restarted.drop_pending(old, 1_170), "broker 1 dropped it");
        restarted.handle_heartbeat(1_180, 2, "a:2", std::slice::from_ref(&held));
        assert!(restarted.drop_pending(old, 1_200));
        assert!(!restarted.drop_pending(old, 1_281), "broker 2's lease lapsed");
        // Markers: one owed to the old partition waits while a broker may serve it, then is not
        // needed; it never goes to the new topic of the name.
        let owed = |topic_id| FenceTarget {
            producer_id: 1,
            marker_epoch: 1,
            marker_sequence: 0,
            topic: "t".into(),
            partition: 0,
            topic_id,
        };
        restarted.handle_heartbeat(1_300, 2, "a:2", std::slice::from_ref(&held));
        assert_eq!(restarted.marker_route(&owed(old), 1_310), MarkerRoute::WaitForDrop);
        assert!(matches!(restarted.marker_route(&owed(new), 1_310), MarkerRoute::Leader { .. }));
        restarted.handle_heartbeat(1_320, 2, "a:2", &[]);
        assert_eq!(restarted.marker_route(&owed(old), 1_330), MarkerRoute::NotNeeded);
        let offsets = FenceTarget { topic: "__consumer_offsets".into(), ..owed(OFFSETS_PARTITION_ID) };
        assert_eq!(restarted.marker_route(&offsets, 1_330), MarkerRoute::NotNeeded);
        // An entry from before ids names the topic: the one of that name now.
        assert!(matches!(restarted.marker_route(&owed(0), 1_330), MarkerRoute::Leader { .. }));
    }

    /// Issue 28: reserved names are never topics.
    #[test]
    fn reserved_names_are_never_created() {
        let mut c = cluster(&[1]);
        for name in protocol::names::RESERVED_TOPICS {
            let refused = c.handle_create_topic(0, name, 1, 1, -1).unwrap_err();
            assert_eq!(refused.code, ErrorCode::InvalidRequest);
            assert_eq!(refused.message, format!("Creation of internal topic {name} is prohibited."));
            let (_, topics, entries) = c.handle_metadata(0, &[name.to_string()], true);
            assert!(entries.is_empty() && !c.topic_exists(name), "{name} auto-created");
            assert_eq!(topics[0].status.code, ErrorCode::InvalidTopicException);
        }
    }

    #[test]
    fn a_topic_from_before_ids_gets_one_from_its_name() {
        let mut c = cluster(&[1]);
        c.apply(&Entry::TopicCreated {
            name: "old".into(),
            replicas: vec![vec![1]],
            min_insync_replicas: 1,
            topic_id: 0,
            configs: Vec::new(),
        });
        let (_, topics, _) = c.handle_metadata(1, &["old".to_string()], false);
        assert_eq!(topics[0].topic_id, legacy_topic_id("old"));
        assert_ne!(legacy_topic_id("old"), legacy_topic_id("older"));
        assert_ne!(legacy_topic_id("old"), 0);
    }

    #[test]
    fn partitions_are_added_and_validate_only_checks_alone() {
        let mut c = cluster(&[1, 2]);
        c.handle_create_topic(0, "t", 2, 2, -1).unwrap();
        assert!(c.handle_create_partitions(1, "t", 4, &[], true).unwrap().is_none());
        assert_eq!(c.handle_metadata(1, &["t".to_string()], false).1[0].partitions.len(), 2);
        c.handle_create_partitions(1, "t", 4, &[], false).unwrap().unwrap();
        let (_, topics, _) = c.handle_metadata(1, &["t".to_string()], false);
        assert_eq!(topics[0].partitions.len(), 4);
        assert!(topics[0].partitions.iter().all(|p| p.replicas.len() == 2 && p.leader_id >= 0));
        assert_eq!(c.handle_create_partitions(1, "t", 3, &[], false).unwrap_err().code, ErrorCode::InvalidPartitions);
        assert_eq!(
            c.handle_create_partitions(1, "u", 3, &[], false).unwrap_err().code,
            ErrorCode::UnknownTopicOrPartition
        );
        // The topic's default: -1 partitions.
        c.handle_create_topic(1, "d", -1, 1, -1).unwrap();
        assert_eq!(c.handle_metadata(1, &["d".to_string()], false).1[0].partitions.len(), 1);
    }

    /// Issue 32, item 5: CreatePartitions with Kafka's replica assignment places each new
    /// partition on the replicas given, the first leading; one that cannot be followed is
    /// refused INVALID_REPLICA_ASSIGNMENT and nothing is added.
    #[test]
    fn partitions_are_added_on_the_replicas_assigned() {
        let mut c = cluster(&[1, 2, 3]);
        c.handle_create_topic(0, "t", 1, 2, -1).unwrap();
        let refused = |c: &mut Cluster, assignments: &[Vec<i32>]| {
            let e = c.handle_create_partitions(1, "t", 3, assignments, false).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidReplicaAssignment, "{assignments:?}: {e}");
            e.message
        };
        assert!(refused(&mut c, &[vec![3, 1]]).contains("1 replica lists for 2 new partitions"));
        assert!(refused(&mut c, &[vec![3, 1], vec![2]]).contains("is given 1 replicas, the topic has 2"));
        assert!(refused(&mut c, &[vec![3, 1], vec![2, 2]]).contains("names broker 2 twice"));
        assert!(refused(&mut c, &[vec![3, 1], vec![2, 9]]).contains("broker 9, which is not live"));
        assert_eq!(c.handle_metadata(1, &["t".to_string()], false).1[0].partitions.len(), 1, "nothing added");
        c.handle_create_partitions(1, "t", 3, &[vec![3, 1], vec![2, 3]], false).unwrap().unwrap();
        let (_, topics, _) = c.handle_metadata(1, &["t".to_string()], false);
        let placed: Vec<(Vec<i32>, i32)> =
            topics[0].partitions[1..].iter().map(|p| (p.replicas.clone(), p.leader_id)).collect();
        assert_eq!(placed, [(vec![3, 1], 3), (vec![2, 3], 2)]);
    }
}
