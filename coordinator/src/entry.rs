//! The records of the coordinator's journal. Every decision the coordinator makes is one or
//! more entries; state changes only by applying entries, so a replay after a crash rebuilds
//! exactly the state whose replies were sent.

use bytes::{BufMut, Bytes, BytesMut};
use protocol::wire::{Reader, WriteExt};
use protocol::DecodeError;

/// A partition a fence marker must reach, and the epoch the marker carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FenceTarget {
    /// Producer id being fenced.
    pub producer_id: i64,
    /// Epoch of the marker; every older epoch of `producer_id` is fenced by it.
    pub marker_epoch: i16,
    /// Which of the producer id's transaction ends and fences this marker belongs to (the
    /// transactional id's count, the same for every partition of one end; -1 in entries
    /// written before they were counted). The broker tells a retried marker from the next
    /// transaction's by it when both are at one epoch (transaction version 1).
    pub marker_sequence: i32,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The id of the topic the partition was registered under: the marker goes to that
    /// topic's partition, and to no topic created later under the name (0 in entries written
    /// before registrations carried ids: the topic of that name, as then).
    pub topic_id: u128,
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A producer id and epoch were granted. `fence` lists the partitions registered under
    /// older epochs, which must all hold a marker at the new epoch before the grant is answered.
    Grant {
        /// Transactional id, none for an idempotent-only producer.
        transactional_id: Option<String>,
        /// Granted producer id.
        producer_id: i64,
        /// Granted epoch.
        epoch: i16,
        /// The (producer id, epoch) presented by the caller whose init made this grant (KIP-360).
        requested_by: Option<(i64, i16)>,
        /// Transaction timeout asked for.
        transaction_timeout_ms: i32,
        /// Markers to write before answering.
        fence: Vec<FenceTarget>,
    },
    /// A partition was registered under a producer's current epoch.
    Register {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Part of a transaction (which this opens, if none is open).
        transactional: bool,
        /// The topic's id ([`FenceTarget::topic_id`]).
        topic_id: u128,
        /// The transaction version of the request (issue 31): 1, 2, or 0 (it told nothing, or
        /// a journal written before recorded none).
        transaction_version: i16,
    },
    /// A transaction ended (PrepareCommit / PrepareAbort): the epoch moves to
    /// `(producer_id, epoch)` and `markers` must all be written before it completes.
    EndTxn {
        /// Transactional id.
        transactional_id: String,
        /// Producer id after the end (a new one at epoch exhaustion).
        producer_id: i64,
        /// Epoch after the end (KIP-890: every end bumps it).
        epoch: i16,
        /// The (producer id, epoch) of the transaction that ended.
        prev: (i64, i16),
        /// Commit (true) or abort (false).
        commit: bool,
        /// The coordinator aborted it because it outlived its timeout.
        timed_out: bool,
        /// The coordinator fenced the epoch because the transactional id sat idle past its
        /// expiration with partitions registered (writes outside transactions): the id is
        /// forgotten once these markers are written.
        expired: bool,
        /// Markers to write, one per registered partition.
        markers: Vec<FenceTarget>,
    },
    /// Every marker of the grant or transaction end at `epoch` for `transactional_id` is written.
    FenceDone {
        /// Transactional id.
        transactional_id: String,
        /// The grant's epoch.
        epoch: i16,
    },
    /// A partition's leadership changed (or was re-elected) under a new leader epoch.
    LeaderChanged {
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// New leader (-1: none available).
        leader_id: i32,
        /// New leader epoch.
        leader_epoch: i32,
        /// The ISR from this epoch on.
        isr: Vec<i32>,
        /// The eligible leader replicas from this epoch on (empty in entries written before
        /// they existed).
        elr: Vec<i32>,
    },
    /// A partition's replicas changed under a new leader epoch (AlterPartitionReassignments):
    /// a move began (`adding` catch up, `removing` go once they are in sync), completed, or
    /// was cancelled.
    ReplicasChanged {
        /// Topic.
        topic: String,
        /// The topic's id (the entry changes nothing of another topic of that name).
        topic_id: u128,
        /// Partition index.
        partition: i32,
        /// Every replica from this epoch on.
        replicas: Vec<i32>,
        /// Replicas being added.
        adding: Vec<i32>,
        /// Replicas being removed.
        removing: Vec<i32>,
        /// Leader (-1: none available).
        leader_id: i32,
        /// New leader epoch.
        leader_epoch: i32,
        /// The ISR from this epoch on.
        isr: Vec<i32>,
        /// The eligible leader replicas from this epoch on.
        elr: Vec<i32>,
    },
    /// A snapshot's record of a partition being moved (its replicas are in the topic's
    /// snapshot).
    Reassigning {
        /// Topic.
        topic: String,
        /// The topic's id.
        topic_id: u128,
        /// Partition index.
        partition: i32,
        /// Replicas being added.
        adding: Vec<i32>,
        /// Replicas being removed.
        removing: Vec<i32>,
    },
    /// An operator's unclean election made the leader of `leader_epoch` (journaled with its
    /// LeaderChanged): a replica leading at that epoch or later first cuts, above its high
    /// watermark, what it holds from before it; a follower of such a leader may cut below its
    /// high watermark.
    UncleanLeader {
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The leader epoch the unclean election began.
        leader_epoch: i32,
    },
    /// A broker's heartbeat carried a process incarnation the coordinator had not recorded (a
    /// broker start): kept across coordinator restarts, so a broker that restarted while the
    /// coordinator was down is still recognised as restarted.
    BrokerIncarnation {
        /// Broker id.
        broker_id: i32,
        /// Its process incarnation.
        incarnation: i64,
        /// Its data directory's id (0 in entries written before it was recorded: unknown).
        log_dir_id: i64,
        /// The broker epoch the coordinator assigned the process (0 in entries written before
        /// broker epochs existed).
        broker_epoch: i64,
    },
    /// The ISR changed under `leader_epoch` (the leader asked, or a replica's log failed).
    IsrChanged {
        /// Topic.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The leader epoch the change was made under.
        leader_epoch: i32,
        /// The new ISR.
        isr: Vec<i32>,
        /// The eligible leader replicas after it (empty in entries written before they existed).
        elr: Vec<i32>,
    },
    /// Snapshot: one transactional id's whole state.
    TxnSnapshot(TxnSnapshot),
    /// Snapshot: the producer id watermark and every producer id bound to a transactional id.
    ProducerIds {
        /// The next producer id to hand out.
        next_producer_id: i64,
        /// (producer id, transactional id) for every id ever bound to one.
        owners: Vec<(i64, String)>,
    },
    /// Snapshot: a topic's partitions as they stand.
    TopicSnapshot {
        /// Topic name.
        name: String,
        /// Its `min.insync.replicas` (0 in snapshots written before it existed: the
        /// coordinator's default).
        min_insync_replicas: i32,
        /// Per partition: replicas, leader, leader epoch, partition epoch, ISR, ELR.
        partitions: Vec<PartitionSnapshot>,
        /// Its id (0 in snapshots written before topics had ids: derived from the name).
        topic_id: u128,
        /// Its configs (`protocol::topic_config`), `min.insync.replicas` aside.
        configs: Vec<(String, String)>,
    },
    /// A topic was created; partition `i` has replicas `replicas[i]`, the first one leading at
    /// leader epoch 0, all in sync.
    TopicCreated {
        /// Topic name.
        name: String,
        /// Replicas per partition, preferred leader first.
        replicas: Vec<Vec<i32>>,
        /// Its `min.insync.replicas` (0 in entries written before it existed: the
        /// coordinator's default).
        min_insync_replicas: i32,
        /// Its id, new for every topic created (0 in entries written before topics had ids:
        /// derived from the name).
        topic_id: u128,
        /// Its configs (`protocol::topic_config`), `min.insync.replicas` aside.
        configs: Vec<(String, String)>,
    },
    /// A topic's configs changed (AlterConfigs): they are now `configs` (every one; those not
    /// named have the brokers' defaults) and its `min.insync.replicas` is `min_insync_replicas`.
    TopicConfigs {
        /// Topic name.
        name: String,
        /// Its id: an entry of a deleted topic changes nothing of one created again.
        topic_id: u128,
        /// Its `min.insync.replicas`.
        min_insync_replicas: i32,
        /// Its configs, `min.insync.replicas` aside.
        configs: Vec<(String, String)>,
    },
    /// A topic was deleted (also, in a snapshot, the record of one deleted earlier).
    TopicDeleted {
        /// Topic name.
        name: String,
        /// The id it had.
        topic_id: u128,
    },
    /// Partitions were added to a topic: new partition `n + i` has replicas `replicas[i]`, the
    /// first leading at leader epoch 0, all in sync.
    PartitionsAdded {
        /// Topic name.
        name: String,
        /// Replicas of each new partition.
        replicas: Vec<Vec<i32>>,
    },
    /// A consumer group's generation: written when a rebalance completes (members joined,
    /// `stable` false) and when the leader's assignment makes it stable; also a snapshot's
    /// record of a group. A generation never goes back, so a restarted coordinator still
    /// refuses a zombie's older one.
    GroupGeneration(GroupRecord),
    /// Offsets committed for a group (OffsetCommit, or a transaction's commit applied).
    OffsetsCommitted {
        /// Group id.
        group: String,
        /// The offsets.
        offsets: Vec<OffsetRecord>,
    },
    /// Offsets staged by a transaction (TxnOffsetCommit): visible once it commits, dropped if
    /// it aborts (its EndTxn, or a new epoch's Grant, resolves them).
    TxnOffsetsStaged {
        /// The transaction's transactional id.
        transactional_id: String,
        /// Group id.
        group: String,
        /// The offsets.
        offsets: Vec<OffsetRecord>,
    },
    /// Transactional ids idle longer than `transactional_id_expiration_ms`, with no transaction
    /// open and no marker owed, are forgotten, and their producer ids with them (never handed
    /// out again: the next producer id only grows).
    TxnIdsExpired {
        /// The transactional ids.
        transactional_ids: Vec<String>,
    },
    /// Groups without members whose offsets saw no commit for `offsets_retention_ms` are
    /// forgotten, offsets and all.
    GroupsExpired {
        /// Group ids.
        groups: Vec<String>,
    },
    /// A KIP-848 consumer group as it stands: written whenever a heartbeat or a timeout changes
    /// what it records, before any member learns of the change; also a snapshot's record of the
    /// group.
    ConsumerGroup(ConsumerGroupRecord),
    /// KIP-848 consumer groups without members converted to classic groups (a classic
    /// JoinGroup): forgotten, their committed offsets kept.
    ConsumerGroupsRemoved {
        /// Group ids.
        groups: Vec<String>,
    },
    /// Groups an admin deleted (DeleteGroups; only groups without members): forgotten with
    /// their committed offsets and the offsets open transactions staged for them.
    GroupsDeleted {
        /// Group ids.
        groups: Vec<String>,
    },
    /// A group's committed offsets of these partitions were deleted (OffsetDelete).
    OffsetsDeleted {
        /// Group id.
        group: String,
        /// (topic, partition) pairs.
        partitions: Vec<(String, i32)>,
    },
    /// From producer id `from` on, transactional ids get odd producer ids and idempotent
    /// producers even ones (written once, before the first id handed out under the rule).
    ProducerIdParity {
        /// The first producer id under the rule.
        from: i64,
    },
    /// The transaction version the cluster offers Kafka clients (KIP-890: 1, or 2 with an epoch
    /// bump per transaction), finalized at `epoch`: written when a coordinator starts with
    /// another `--transaction-version` than the one recorded, one epoch higher each time, so
    /// that a client never sees the finalized features go back.
    TransactionVersion {
        /// The level.
        level: i16,
        /// The finalized-features epoch.
        epoch: i64,
    },
    /// SCRAM credentials were created, replaced and deleted (KIP-554, and `--scram-users-file`
    /// at start); also a snapshot's record of every credential.
    ScramCredentials {
        /// Credentials created or replaced.
        upserts: Vec<protocol::UserCredential>,
        /// (user, mechanism) credentials deleted.
        deletions: Vec<(String, protocol::sasl::ScramMechanism)>,
    },
    /// ACLs were created and deleted (`--authorizer`); also a snapshot's record of every ACL.
    Acls {
        /// Bindings created.
        created: Vec<protocol::acl::AclBinding>,
        /// Bindings deleted.
        deleted: Vec<protocol::acl::AclBinding>,
    },
}

/// A group's membership at one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    /// Group id.
    pub group: String,
    /// Generation.
    pub generation: i32,
    /// Protocol type (`consumer`), empty for a group that only stores offsets.
    pub protocol_type: String,
    /// The chosen protocol (assignor), empty when the group has no members.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// Whether the leader's assignment was received (SyncGroup).
    pub stable: bool,
    /// Members.
    pub members: Vec<MemberRecord>,
}

/// A KIP-848 consumer group: its epochs, members and target assignment. Session and
/// revocation deadlines are not recorded: a replay starts them afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupRecord {
    /// Group id.
    pub group: String,
    /// Group epoch.
    pub group_epoch: i32,
    /// Assignment epoch.
    pub assignment_epoch: i32,
    /// Members.
    pub members: Vec<ConsumerMemberRecord>,
    /// The subscribed topics the target was computed from: (name, topic id, partitions).
    pub topics_seen: Vec<(String, u128, i32)>,
}

/// One member of a [`ConsumerGroupRecord`]. Partitions are (topic id, partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberRecord {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Member epoch (-2 while a static member is away).
    pub epoch: i32,
    /// The epoch before its current one.
    pub previous_epoch: i32,
    /// How long it has to give up partitions, in milliseconds.
    pub rebalance_timeout_ms: i64,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Subscribed topic names.
    pub topic_names: Vec<String>,
    /// Subscribed regular expression.
    pub topic_regex: Option<String>,
    /// The server assignor it names.
    pub assignor: Option<String>,
    /// Partitions it owns and may use.
    pub assigned: Vec<(u128, i32)>,
    /// Partitions it owns and must give up.
    pub revoking: Vec<(u128, i32)>,
    /// Its target at the assignment epoch.
    pub target: Vec<(u128, i32)>,
}

fn put_id_partitions(b: &mut BytesMut, v: &[(u128, i32)]) {
    b.put_i32(v.len() as i32);
    for (id, p) in v {
        b.put_u128(*id);
        b.put_i32(*p);
    }
}

fn get_id_partitions(r: &mut Reader, field: &'static str) -> Result<Vec<(u128, i32)>, DecodeError> {
    let n = r.array_len(field, 20)?;
    (0..n).map(|_| Ok((r.u128(field)?, r.i32(field)?))).collect()
}

impl ConsumerGroupRecord {
    fn encode(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_i32(self.group_epoch);
        b.put_i32(self.assignment_epoch);
        b.put_i32(self.members.len() as i32);
        for m in &self.members {
            b.put_string(&m.member_id);
            b.put_nullable_string(m.instance_id.as_deref());
            b.put_i32(m.epoch);
            b.put_i32(m.previous_epoch);
            b.put_i64(m.rebalance_timeout_ms);
            b.put_string(&m.client_id);
            b.put_string(&m.client_host);
            b.put_i32(m.topic_names.len() as i32);
            for n in &m.topic_names {
                b.put_string(n);
            }
            b.put_nullable_string(m.topic_regex.as_deref());
            b.put_nullable_string(m.assignor.as_deref());
            put_id_partitions(b, &m.assigned);
            put_id_partitions(b, &m.revoking);
            put_id_partitions(b, &m.target);
        }
        b.put_i32(self.topics_seen.len() as i32);
        for (name, id, count) in &self.topics_seen {
            b.put_string(name);
            b.put_u128(*id);
            b.put_i32(*count);
        }
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let group_epoch = r.i32("group_epoch")?;
        let assignment_epoch = r.i32("assignment_epoch")?;
        let n = r.array_len("members", 40)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            let member_id = r.string("member_id")?;
            let instance_id = r.nullable_string("instance_id")?;
            let epoch = r.i32("epoch")?;
            let previous_epoch = r.i32("previous_epoch")?;
            let rebalance_timeout_ms = r.i64("rebalance_timeout_ms")?;
            let client_id = r.string("client_id")?;
            let client_host = r.string("client_host")?;
            let names = r.array_len("topic_names", 2)?;
            let topic_names = (0..names).map(|_| r.string("topic_names")).collect::<Result<Vec<_>, _>>()?;
            members.push(ConsumerMemberRecord {
                member_id,
                instance_id,
                epoch,
                previous_epoch,
                rebalance_timeout_ms,
                client_id,
                client_host,
                topic_names,
                topic_regex: r.nullable_string("topic_regex")?,
                assignor: r.nullable_string("assignor")?,
                assigned: get_id_partitions(r, "assigned")?,
                revoking: get_id_partitions(r, "revoking")?,
                target: get_id_partitions(r, "target")?,
            });
        }
        let n = r.array_len("topics_seen", 22)?;
        let mut topics_seen = Vec::with_capacity(n);
        for _ in 0..n {
            topics_seen.push((r.string("topic")?, r.u128("topic_id")?, r.i32("partitions")?));
        }
        Ok(ConsumerGroupRecord { group, group_epoch, assignment_epoch, members, topics_seen })
    }
}

/// One member of a [`GroupRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
    /// Its assignment (empty until stable).
    pub assignment: Bytes,
}

/// A committed (or staged) offset: the wire's, recorded as it travels.
pub use protocol::PartitionOffset as OffsetRecord;

/// A transactional id's state, as a snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnSnapshot {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Epoch.
    pub epoch: i16,
    /// KIP-360 retry memory.
    pub requested_by: Option<(i64, i16)>,
    /// Transaction timeout.
    pub transaction_timeout_ms: i32,
    /// Partitions registered under the epoch: (topic, partition, topic id).
    pub registered: Vec<(String, i32, u128)>,
    /// Whether a transaction is open.
    pub txn_open: bool,
    /// Markers not yet confirmed, and their kind.
    pub pending: Vec<FenceTarget>,
    /// Commit (true) or abort markers.
    pub pending_commit: bool,
    /// Outcome of the last completed markers.
    pub last_result: Option<bool>,
    /// The transaction the last EndTxn ended.
    pub last_end: Option<((i64, i16), bool)>,
    /// Recent bumps: (epoch, kind 0 new instance / 1 commit / 2 abort / 3 timeout, timeout ms).
    pub bumps: Vec<(i16, i8, i32)>,
    /// The marker sequence the next end or fence gets (0 in snapshots written before they
    /// were counted).
    pub next_marker_sequence: i32,
    /// The transaction version of the open (or last) transaction (0 in snapshots written
    /// before it was recorded).
    pub transaction_version: i16,
}

/// A partition's state, as a snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    /// Replicas.
    pub replicas: Vec<i32>,
    /// Leader (-1 none).
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch (0 in snapshots written before it existed).
    pub partition_epoch: i32,
    /// ISR.
    pub isr: Vec<i32>,
    /// Eligible leader replicas (empty in snapshots written before they existed).
    pub elr: Vec<i32>,
}

const GRANT: i8 = 1;
const REGISTER: i8 = 2;
const FENCE_DONE: i8 = 3;
const TOPIC_CREATED: i8 = 4;
const LEADER_CHANGED: i8 = 5;
const ISR_CHANGED: i8 = 6;
const END_TXN: i8 = 7;
const TXN_SNAPSHOT: i8 = 8;
const PRODUCER_IDS: i8 = 9;
const TOPIC_SNAPSHOT: i8 = 10;
const BROKER_INCARNATION: i8 = 11;
/// A topic snapshot with partition epochs ([`TOPIC_SNAPSHOT`] is read as epoch 0).
const TOPIC_SNAPSHOT_EPOCHS: i8 = 12;
/// [`TOPIC_CREATED`] with the topic's `min.insync.replicas`.
const TOPIC_CREATED_MIN_ISR: i8 = 13;
/// [`LEADER_CHANGED`] with the eligible leader replicas.
const LEADER_CHANGED_ELR: i8 = 14;
/// [`ISR_CHANGED`] with the eligible leader replicas.
const ISR_CHANGED_ELR: i8 = 15;
/// [`TOPIC_SNAPSHOT_EPOCHS`] with `min.insync.replicas` and each partition's eligible leader
/// replicas.
const TOPIC_SNAPSHOT_ELR: i8 = 16;
/// [`BROKER_INCARNATION`] with the broker's data directory id and broker epoch.
const BROKER_REGISTERED: i8 = 17;
/// [`GRANT`] with each fence target's marker sequence.
const GRANT_SEQ: i8 = 18;
/// [`END_TXN`] with each marker's sequence.
const END_TXN_SEQ: i8 = 19;
/// [`TXN_SNAPSHOT`] with the pending markers' sequences and the next one.
const TXN_SNAPSHOT_SEQ: i8 = 20;
/// [`TOPIC_CREATED_MIN_ISR`] with the topic's id.
const TOPIC_CREATED_ID: i8 = 21;
/// [`TOPIC_SNAPSHOT_ELR`] with the topic's id.
const TOPIC_SNAPSHOT_ID: i8 = 22;
const TOPIC_DELETED: i8 = 23;
const PARTITIONS_ADDED: i8 = 24;
const GROUP_GENERATION: i8 = 25;
const OFFSETS_COMMITTED: i8 = 26;
const TXN_OFFSETS_STAGED: i8 = 27;
/// [`REGISTER`] with the topic's id.
const REGISTER_ID: i8 = 28;
/// [`GRANT_SEQ`] with each fence target's topic id.
const GRANT_ID: i8 = 29;
/// [`END_TXN_SEQ`] with each marker's topic id.
const END_TXN_ID: i8 = 30;
/// [`TXN_SNAPSHOT_SEQ`] with each registered partition's and pending marker's topic id.
const TXN_SNAPSHOT_ID: i8 = 31;
const UNCLEAN_LEADER: i8 = 32;
const TXN_IDS_EXPIRED: i8 = 33;
const GROUPS_EXPIRED: i8 = 34;
/// [`END_TXN_ID`]'s layout, for an end the expiry sweep made (`expired`).
const END_TXN_EXPIRED: i8 = 35;
const PRODUCER_ID_PARITY: i8 = 36;
const TRANSACTION_VERSION: i8 = 37;
/// [`REGISTER_ID`] with the request's transaction version.
const REGISTER_TV: i8 = 38;
/// [`TXN_SNAPSHOT_ID`] with the transaction version.
const TXN_SNAPSHOT_TV: i8 = 39;
const ACLS: i8 = 40;
const SCRAM_CREDENTIALS: i8 = 41;
const GROUPS_DELETED: i8 = 42;
const OFFSETS_DELETED: i8 = 43;
/// [`TOPIC_CREATED_ID`] with the topic's configs.
const TOPIC_CREATED_CONFIGS: i8 = 44;
/// [`TOPIC_SNAPSHOT_ID`] with the topic's configs.
const TOPIC_SNAPSHOT_CONFIGS: i8 = 45;
const TOPIC_CONFIGS: i8 = 46;
const REPLICAS_CHANGED: i8 = 47;
const REASSIGNING: i8 = 48;
const CONSUMER_GROUP: i8 = 49;
const CONSUMER_GROUPS_REMOVED: i8 = 50;

/// What a list of fence targets carries, by the entry tag it was written under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Targets {
    /// Before marker sequences.
    Plain,
    /// With marker sequences.
    Sequenced,
    /// With marker sequences and topic ids.
    WithIds,
}

impl Entry {
    /// Encode for the journal.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        match self {
            Entry::Grant { transactional_id, producer_id, epoch, requested_by, transaction_timeout_ms, fence } => {
                b.put_i8(GRANT_ID);
                b.put_nullable_string(transactional_id.as_deref());
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                let (rp, re) = requested_by.unwrap_or((-1, -1));
                b.put_i64(rp);
                b.put_i16(re);
                b.put_i32(*transaction_timeout_ms);
                put_targets(&mut b, fence);
            }
            Entry::Register { producer_id, epoch, topic, partition, transactional, topic_id, transaction_version } => {
                b.put_i8(REGISTER_TV);
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_bool(*transactional);
                b.put_u128(*topic_id);
                b.put_i16(*transaction_version);
            }
            Entry::EndTxn { transactional_id, producer_id, epoch, prev, commit, timed_out, expired, markers } => {
                b.put_i8(if *expired { END_TXN_EXPIRED } else { END_TXN_ID });
                b.put_string(transactional_id);
                b.put_i64(*producer_id);
                b.put_i16(*epoch);
                b.put_i64(prev.0);
                b.put_i16(prev.1);
                b.put_bool(*commit);
                b.put_bool(*timed_out);
                put_targets(&mut b, markers);
            }
            Entry::FenceDone { transactional_id, epoch } => {
                b.put_i8(FENCE_DONE);
                b.put_string(transactional_id);
                b.put_i16(*epoch);
            }
            Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr, elr } => {
                b.put_i8(LEADER_CHANGED_ELR);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_i32(*leader_id);
                b.put_i32(*leader_epoch);
                b.put_i32_array(isr);
                b.put_i32_array(elr);
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
                b.put_i8(REPLICAS_CHANGED);
                b.put_string(topic);
                b.put_u128(*topic_id);
                b.put_i32(*partition);
                b.put_i32_array(replicas);
                b.put_i32_array(adding);
                b.put_i32_array(removing);
                b.put_i32(*leader_id);
                b.put_i32(*leader_epoch);
                b.put_i32_array(isr);
                b.put_i32_array(elr);
            }
            Entry::Reassigning { topic, topic_id, partition, adding, removing } => {
                b.put_i8(REASSIGNING);
                b.put_string(topic);
                b.put_u128(*topic_id);
                b.put_i32(*partition);
                b.put_i32_array(adding);
                b.put_i32_array(removing);
            }
            Entry::UncleanLeader { topic, partition, leader_epoch } => {
                b.put_i8(UNCLEAN_LEADER);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_i32(*leader_epoch);
            }
            Entry::BrokerIncarnation { broker_id, incarnation, log_dir_id, broker_epoch } => {
                b.put_i8(BROKER_REGISTERED);
                b.put_i32(*broker_id);
                b.put_i64(*incarnation);
                b.put_i64(*log_dir_id);
                b.put_i64(*broker_epoch);
            }
            Entry::IsrChanged { topic, partition, leader_epoch, isr, elr } => {
                b.put_i8(ISR_CHANGED_ELR);
                b.put_string(topic);
                b.put_i32(*partition);
                b.put_i32(*leader_epoch);
                b.put_i32_array(isr);
                b.put_i32_array(elr);
            }
            Entry::TxnSnapshot(t) => {
                b.put_i8(TXN_SNAPSHOT_TV);
                b.put_string(&t.transactional_id);
                b.put_i64(t.producer_id);
                b.put_i16(t.epoch);
                let (rp, re) = t.requested_by.unwrap_or((-1, -1));
                b.put_i64(rp);
                b.put_i16(re);
                b.put_i32(t.transaction_timeout_ms);
                b.put_i32(t.registered.len() as i32);
                for (topic, partition, topic_id) in &t.registered {
                    b.put_string(topic);
                    b.put_i32(*partition);
                    b.put_u128(*topic_id);
                }
                b.put_bool(t.txn_open);
                put_targets(&mut b, &t.pending);
                b.put_bool(t.pending_commit);
                b.put_i8(t.last_result.map_or(-1, i8::from));
                match t.last_end {
                    Some(((p, e), commit)) => {
                        b.put_bool(true);
                        b.put_i64(p);
                        b.put_i16(e);
                        b.put_bool(commit);
                    }
                    None => b.put_bool(false),
                }
                b.put_i32(t.bumps.len() as i32);
                for (epoch, kind, timeout) in &t.bumps {
                    b.put_i16(*epoch);
                    b.put_i8(*kind);
                    b.put_i32(*timeout);
                }
                b.put_i32(t.next_marker_sequence);
                b.put_i16(t.transaction_version);
            }
            Entry::ProducerIds { next_producer_id, owners } => {
                b.put_i8(PRODUCER_IDS);
                b.put_i64(*next_producer_id);
                b.put_i32(owners.len() as i32);
                for (pid, tid) in owners {
                    b.put_i64(*pid);
                    b.put_string(tid);
                }
            }
            Entry::TopicSnapshot { name, min_insync_replicas, partitions, topic_id, configs } => {
                b.put_i8(if configs.is_empty() { TOPIC_SNAPSHOT_ID } else { TOPIC_SNAPSHOT_CONFIGS });
                b.put_u128(*topic_id);
                b.put_string(name);
                b.put_i32(*min_insync_replicas);
                b.put_i32(partitions.len() as i32);
                for p in partitions {
                    b.put_i32_array(&p.replicas);
                    b.put_i32(p.leader_id);
                    b.put_i32(p.leader_epoch);
                    b.put_i32(p.partition_epoch);
                    b.put_i32_array(&p.isr);
                    b.put_i32_array(&p.elr);
                }
                if !configs.is_empty() {
                    b.put_string_pairs(configs);
                }
            }
            Entry::TopicConfigs { name, topic_id, min_insync_replicas, configs } => {
                b.put_i8(TOPIC_CONFIGS);
                b.put_string(name);
                b.put_u128(*topic_id);
                b.put_i32(*min_insync_replicas);
                b.put_string_pairs(configs);
            }
            Entry::TopicCreated { name, replicas, min_insync_replicas, topic_id, configs } => {
                b.put_i8(if configs.is_empty() { TOPIC_CREATED_ID } else { TOPIC_CREATED_CONFIGS });
                b.put_string(name);
                b.put_i32(replicas.len() as i32);
                for r in replicas {
                    b.put_i32_array(r);
                }
                b.put_i32(*min_insync_replicas);
                b.put_u128(*topic_id);
                if !configs.is_empty() {
                    b.put_string_pairs(configs);
                }
            }
            Entry::TopicDeleted { name, topic_id } => {
                b.put_i8(TOPIC_DELETED);
                b.put_string(name);
                b.put_u128(*topic_id);
            }
            Entry::PartitionsAdded { name, replicas } => {
                b.put_i8(PARTITIONS_ADDED);
                b.put_string(name);
                b.put_i32(replicas.len() as i32);
                for r in replicas {
                    b.put_i32_array(r);
                }
            }
            Entry::GroupGeneration(g) => {
                b.put_i8(GROUP_GENERATION);
                b.put_string(&g.group);
                b.put_i32(g.generation);
                b.put_string(&g.protocol_type);
                b.put_string(&g.protocol);
                b.put_string(&g.leader);
                b.put_bool(g.stable);
                b.put_i32(g.members.len() as i32);
                for m in &g.members {
                    b.put_string(&m.member_id);
                    b.put_nullable_string(m.instance_id.as_deref());
                    b.put_string(&m.client_id);
                    b.put_string(&m.client_host);
                    b.put_i32(m.session_timeout_ms);
                    b.put_i32(m.rebalance_timeout_ms);
                    b.put_blob(&m.metadata);
                    b.put_blob(&m.assignment);
                }
            }
            Entry::OffsetsCommitted { group, offsets } => {
                b.put_i8(OFFSETS_COMMITTED);
                b.put_string(group);
                OffsetRecord::encode_list(offsets, &mut b);
            }
            Entry::TxnOffsetsStaged { transactional_id, group, offsets } => {
                b.put_i8(TXN_OFFSETS_STAGED);
                b.put_string(transactional_id);
                b.put_string(group);
                OffsetRecord::encode_list(offsets, &mut b);
            }
            Entry::ProducerIdParity { from } => {
                b.put_i8(PRODUCER_ID_PARITY);
                b.put_i64(*from);
            }
            Entry::TransactionVersion { level, epoch } => {
                b.put_i8(TRANSACTION_VERSION);
                b.put_i16(*level);
                b.put_i64(*epoch);
            }
            Entry::ScramCredentials { upserts, deletions } => {
                b.put_i8(SCRAM_CREDENTIALS);
                protocol::ScramCredentialsRequest { upserts: upserts.clone(), deletions: deletions.clone() }
                    .encode_into(&mut b);
            }
            Entry::Acls { created, deleted } => {
                b.put_i8(ACLS);
                for list in [created, deleted] {
                    b.put_i32(list.len() as i32);
                    for a in list {
                        a.encode(&mut b);
                    }
                }
            }
            Entry::OffsetsDeleted { group, partitions } => {
                b.put_i8(OFFSETS_DELETED);
                b.put_string(group);
                b.put_i32(partitions.len() as i32);
                for (topic, partition) in partitions {
                    b.put_string(topic);
                    b.put_i32(*partition);
                }
            }
            Entry::ConsumerGroup(g) => {
                b.put_i8(CONSUMER_GROUP);
                g.encode(&mut b);
            }
            Entry::TxnIdsExpired { transactional_ids: names }
            | Entry::GroupsExpired { groups: names }
            | Entry::GroupsDeleted { groups: names }
            | Entry::ConsumerGroupsRemoved { groups: names } => {
                b.put_i8(match self {
                    Entry::TxnIdsExpired { .. } => TXN_IDS_EXPIRED,
                    Entry::GroupsExpired { .. } => GROUPS_EXPIRED,
                    Entry::ConsumerGroupsRemoved { .. } => CONSUMER_GROUPS_REMOVED,
                    _ => GROUPS_DELETED,
                });
                b.put_i32(names.len() as i32);
                for n in names {
                    b.put_string(n);
                }
            }
        }
        b.freeze()
    }

    /// Decode one journal payload.
    pub fn decode(payload: Bytes) -> Result<Entry, DecodeError> {
        let mut r = Reader::new(payload);
        let tag = r.i8("tag")?;
        let e = match tag {
            GRANT | GRANT_SEQ | GRANT_ID => {
                let transactional_id = r.nullable_string("transactional_id")?;
                let producer_id = r.i64("producer_id")?;
                let epoch = r.i16("epoch")?;
                let rp = r.i64("requested_producer_id")?;
                let re = r.i16("requested_epoch")?;
                let transaction_timeout_ms = r.i32("transaction_timeout_ms")?;
                let fence = get_targets(&mut r, Targets::of(tag, GRANT_SEQ, GRANT_ID))?;
                Entry::Grant {
                    transactional_id,
                    producer_id,
                    epoch,
                    requested_by: (rp >= 0).then_some((rp, re)),
                    transaction_timeout_ms,
                    fence,
                }
            }
            REGISTER | REGISTER_ID | REGISTER_TV => Entry::Register {
                producer_id: r.i64("producer_id")?,
                epoch: r.i16("epoch")?,
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                transactional: r.bool("transactional")?,
                topic_id: if tag == REGISTER { 0 } else { r.u128("topic_id")? },
                transaction_version: if tag == REGISTER_TV { r.i16("transaction_version")? } else { 0 },
            },
            END_TXN | END_TXN_SEQ | END_TXN_ID | END_TXN_EXPIRED => Entry::EndTxn {
                transactional_id: r.string("transactional_id")?,
                producer_id: r.i64("producer_id")?,
                epoch: r.i16("epoch")?,
                prev: (r.i64("prev_producer_id")?, r.i16("prev_epoch")?),
                commit: r.bool("commit")?,
                timed_out: r.bool("timed_out")?,
                expired: tag == END_TXN_EXPIRED,
                markers: get_targets(
                    &mut r,
                    Targets::of(if tag == END_TXN_EXPIRED { END_TXN_ID } else { tag }, END_TXN_SEQ, END_TXN_ID),
                )?,
            },
            FENCE_DONE => Entry::FenceDone { transactional_id: r.string("transactional_id")?, epoch: r.i16("epoch")? },
            TOPIC_CREATED | TOPIC_CREATED_MIN_ISR | TOPIC_CREATED_ID | TOPIC_CREATED_CONFIGS => {
                let name = r.string("name")?;
                let n = r.array_len("replicas", 4)?;
                let mut replicas = Vec::with_capacity(n);
                for _ in 0..n {
                    replicas.push(r.i32_array("replicas")?);
                }
                let min_insync_replicas = if tag == TOPIC_CREATED { 0 } else { r.i32("min_insync_replicas")? };
                let with_id = matches!(tag, TOPIC_CREATED_ID | TOPIC_CREATED_CONFIGS);
                let topic_id = if with_id { r.u128("topic_id")? } else { 0 };
                let configs = if tag == TOPIC_CREATED_CONFIGS { r.string_pairs("configs")? } else { Vec::new() };
                Entry::TopicCreated { name, replicas, min_insync_replicas, topic_id, configs }
            }
            TOPIC_DELETED => Entry::TopicDeleted { name: r.string("name")?, topic_id: r.u128("topic_id")? },
            REPLICAS_CHANGED => Entry::ReplicasChanged {
                topic: r.string("topic")?,
                topic_id: r.u128("topic_id")?,
                partition: r.i32("partition")?,
                replicas: r.i32_array("replicas")?,
                adding: r.i32_array("adding")?,
                removing: r.i32_array("removing")?,
                leader_id: r.i32("leader_id")?,
                leader_epoch: r.i32("leader_epoch")?,
                isr: r.i32_array("isr")?,
                elr: r.i32_array("elr")?,
            },
            REASSIGNING => Entry::Reassigning {
                topic: r.string("topic")?,
                topic_id: r.u128("topic_id")?,
                partition: r.i32("partition")?,
                adding: r.i32_array("adding")?,
                removing: r.i32_array("removing")?,
            },
            UNCLEAN_LEADER => Entry::UncleanLeader {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_epoch: r.i32("leader_epoch")?,
            },
            PARTITIONS_ADDED => {
                let name = r.string("name")?;
                let n = r.array_len("replicas", 4)?;
                let mut replicas = Vec::with_capacity(n);
                for _ in 0..n {
                    replicas.push(r.i32_array("replicas")?);
                }
                Entry::PartitionsAdded { name, replicas }
            }
            TXN_SNAPSHOT | TXN_SNAPSHOT_SEQ | TXN_SNAPSHOT_ID | TXN_SNAPSHOT_TV => {
                let targets = Targets::of(
                    if tag == TXN_SNAPSHOT_TV { TXN_SNAPSHOT_ID } else { tag },
                    TXN_SNAPSHOT_SEQ,
                    TXN_SNAPSHOT_ID,
                );
                let transactional_id = r.string("transactional_id")?;
                let producer_id = r.i64("producer_id")?;
                let epoch = r.i16("epoch")?;
                let rp = r.i64("requested_producer_id")?;
                let re = r.i16("requested_epoch")?;
                let transaction_timeout_ms = r.i32("transaction_timeout_ms")?;
                let n = r.array_len("registered", 6)?;
                let mut registered = Vec::with_capacity(n);
                for _ in 0..n {
                    let (topic, partition) = (r.string("topic")?, r.i32("partition")?);
                    let topic_id = if targets == Targets::WithIds { r.u128("topic_id")? } else { 0 };
                    registered.push((topic, partition, topic_id));
                }
                let txn_open = r.bool("txn_open")?;
                let pending = get_targets(&mut r, targets)?;
                let pending_commit = r.bool("pending_commit")?;
                let last_result = match r.i8("last_result")? {
                    -1 => None,
                    v => Some(v != 0),
                };
                let last_end = if r.bool("has_last_end")? {
                    Some(((r.i64("last_end_producer_id")?, r.i16("last_end_epoch")?), r.bool("last_end_commit")?))
                } else {
                    None
                };
                let n = r.array_len("bumps", 7)?;
                let mut bumps = Vec::with_capacity(n);
                for _ in 0..n {
                    bumps.push((r.i16("bump_epoch")?, r.i8("bump_kind")?, r.i32("bump_timeout_ms")?));
                }
                let next_marker_sequence = if targets != Targets::Plain { r.i32("next_marker_sequence")? } else { 0 };
                let transaction_version = if tag == TXN_SNAPSHOT_TV { r.i16("transaction_version")? } else { 0 };
                Entry::TxnSnapshot(TxnSnapshot {
                    transactional_id,
                    producer_id,
                    epoch,
                    requested_by: (rp >= 0).then_some((rp, re)),
                    transaction_timeout_ms,
                    registered,
                    txn_open,
                    pending,
                    pending_commit,
                    last_result,
                    last_end,
                    bumps,
                    next_marker_sequence,
                    transaction_version,
                })
            }
            PRODUCER_IDS => {
                let next_producer_id = r.i64("next_producer_id")?;
                let n = r.array_len("owners", 10)?;
                let mut owners = Vec::with_capacity(n);
                for _ in 0..n {
                    owners.push((r.i64("producer_id")?, r.string("transactional_id")?));
                }
                Entry::ProducerIds { next_producer_id, owners }
            }
            TOPIC_SNAPSHOT
            | TOPIC_SNAPSHOT_EPOCHS
            | TOPIC_SNAPSHOT_ELR
            | TOPIC_SNAPSHOT_ID
            | TOPIC_SNAPSHOT_CONFIGS => {
                let with_id = matches!(tag, TOPIC_SNAPSHOT_ID | TOPIC_SNAPSHOT_CONFIGS);
                let topic_id = if with_id { r.u128("topic_id")? } else { 0 };
                let elr = matches!(tag, TOPIC_SNAPSHOT_ELR | TOPIC_SNAPSHOT_ID | TOPIC_SNAPSHOT_CONFIGS);
                let name = r.string("name")?;
                let min_insync_replicas = if elr { r.i32("min_insync_replicas")? } else { 0 };
                let n = r.array_len("partitions", 16)?;
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push(PartitionSnapshot {
                        replicas: r.i32_array("replicas")?,
                        leader_id: r.i32("leader_id")?,
                        leader_epoch: r.i32("leader_epoch")?,
                        partition_epoch: if tag == TOPIC_SNAPSHOT { 0 } else { r.i32("partition_epoch")? },
                        isr: r.i32_array("isr")?,
                        elr: if elr { r.i32_array("elr")? } else { Vec::new() },
                    });
                }
                let configs = if tag == TOPIC_SNAPSHOT_CONFIGS { r.string_pairs("configs")? } else { Vec::new() };
                Entry::TopicSnapshot { name, min_insync_replicas, partitions, topic_id, configs }
            }
            TOPIC_CONFIGS => Entry::TopicConfigs {
                name: r.string("name")?,
                topic_id: r.u128("topic_id")?,
                min_insync_replicas: r.i32("min_insync_replicas")?,
                configs: r.string_pairs("configs")?,
            },
            LEADER_CHANGED | LEADER_CHANGED_ELR => Entry::LeaderChanged {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_id: r.i32("leader_id")?,
                leader_epoch: r.i32("leader_epoch")?,
                isr: r.i32_array("isr")?,
                elr: if tag == LEADER_CHANGED_ELR { r.i32_array("elr")? } else { Vec::new() },
            },
            BROKER_INCARNATION | BROKER_REGISTERED => Entry::BrokerIncarnation {
                broker_id: r.i32("broker_id")?,
                incarnation: r.i64("incarnation")?,
                log_dir_id: if tag == BROKER_REGISTERED { r.i64("log_dir_id")? } else { 0 },
                broker_epoch: if tag == BROKER_REGISTERED { r.i64("broker_epoch")? } else { 0 },
            },
            ISR_CHANGED | ISR_CHANGED_ELR => Entry::IsrChanged {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_epoch: r.i32("leader_epoch")?,
                isr: r.i32_array("isr")?,
                elr: if tag == ISR_CHANGED_ELR { r.i32_array("elr")? } else { Vec::new() },
            },
            GROUP_GENERATION => {
                let group = r.string("group")?;
                let generation = r.i32("generation")?;
                let protocol_type = r.string("protocol_type")?;
                let protocol = r.string("protocol")?;
                let leader = r.string("leader")?;
                let stable = r.bool("stable")?;
                let n = r.array_len("members", 30)?;
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    members.push(MemberRecord {
                        member_id: r.string("member_id")?,
                        instance_id: r.nullable_string("instance_id")?,
                        client_id: r.string("client_id")?,
                        client_host: r.string("client_host")?,
                        session_timeout_ms: r.i32("session_timeout_ms")?,
                        rebalance_timeout_ms: r.i32("rebalance_timeout_ms")?,
                        metadata: r.bytes("metadata")?,
                        assignment: r.bytes("assignment")?,
                    });
                }
                Entry::GroupGeneration(GroupRecord {
                    group,
                    generation,
                    protocol_type,
                    protocol,
                    leader,
                    stable,
                    members,
                })
            }
            OFFSETS_COMMITTED => {
                Entry::OffsetsCommitted { group: r.string("group")?, offsets: OffsetRecord::decode_list(&mut r)? }
            }
            TXN_OFFSETS_STAGED => Entry::TxnOffsetsStaged {
                transactional_id: r.string("transactional_id")?,
                group: r.string("group")?,
                offsets: OffsetRecord::decode_list(&mut r)?,
            },
            PRODUCER_ID_PARITY => Entry::ProducerIdParity { from: r.i64("from")? },
            TRANSACTION_VERSION => Entry::TransactionVersion { level: r.i16("level")?, epoch: r.i64("epoch")? },
            SCRAM_CREDENTIALS => {
                let r = protocol::ScramCredentialsRequest::decode_from(&mut r)?;
                Entry::ScramCredentials { upserts: r.upserts, deletions: r.deletions }
            }
            ACLS => {
                let mut lists = [Vec::new(), Vec::new()];
                for list in &mut lists {
                    let n = r.array_len("acls", protocol::acl::AclBinding::ENCODED_BYTES_MIN)?;
                    for _ in 0..n {
                        list.push(protocol::acl::AclBinding::decode(&mut r)?);
                    }
                }
                let [created, deleted] = lists;
                Entry::Acls { created, deleted }
            }
            CONSUMER_GROUP => Entry::ConsumerGroup(ConsumerGroupRecord::decode(&mut r)?),
            TXN_IDS_EXPIRED | GROUPS_EXPIRED | GROUPS_DELETED | CONSUMER_GROUPS_REMOVED => {
                let n = r.array_len("names", 2)?;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    names.push(r.string("name")?);
                }
                match tag {
                    TXN_IDS_EXPIRED => Entry::TxnIdsExpired { transactional_ids: names },
                    GROUPS_EXPIRED => Entry::GroupsExpired { groups: names },
                    CONSUMER_GROUPS_REMOVED => Entry::ConsumerGroupsRemoved { groups: names },
                    _ => Entry::GroupsDeleted { groups: names },
                }
            }
            OFFSETS_DELETED => {
                let group = r.string("group")?;
                let n = r.array_len("partitions", 6)?;
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push((r.string("topic")?, r.i32("partition")?));
                }
                Entry::OffsetsDeleted { group, partitions }
            }
            _ => return Err(DecodeError::InvalidValue { field: "tag", detail: format!("unknown entry tag {tag}") }),
        };
        r.finish()?;
        Ok(e)
    }
}

impl Targets {
    /// The targets of an entry of `tag`, whose sequenced and id-carrying tags are given.
    fn of(tag: i8, sequenced: i8, with_ids: i8) -> Targets {
        if tag == with_ids {
            Targets::WithIds
        } else if tag == sequenced {
            Targets::Sequenced
        } else {
            Targets::Plain
        }
    }
}

/// Targets, each with its marker sequence and topic id (as [`Targets::WithIds`]).
fn put_targets(b: &mut BytesMut, targets: &[FenceTarget]) {
    b.put_i32(targets.len() as i32);
    for f in targets {
        b.put_i64(f.producer_id);
        b.put_i16(f.marker_epoch);
        b.put_i32(f.marker_sequence);
        b.put_string(&f.topic);
        b.put_i32(f.partition);
        b.put_u128(f.topic_id);
    }
}

/// Targets as written under `kind`: a marker sequence missing is read as -1, a topic id as 0.
fn get_targets(r: &mut Reader, kind: Targets) -> Result<Vec<FenceTarget>, DecodeError> {
    let n = r.array_len("targets", 16)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(FenceTarget {
            producer_id: r.i64("producer_id")?,
            marker_epoch: r.i16("marker_epoch")?,
            marker_sequence: if kind != Targets::Plain { r.i32("marker_sequence")? } else { -1 },
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            topic_id: if kind == Targets::WithIds { r.u128("topic_id")? } else { 0 },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_roundtrip() {
        let entries = vec![
            Entry::GroupGeneration(GroupRecord {
                group: "g".into(),
                generation: 3,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: "m-1".into(),
                stable: true,
                members: vec![MemberRecord {
                    member_id: "m-1".into(),
                    instance_id: Some("i".into()),
                    client_id: "c".into(),
                    client_host: "h".into(),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 30_000,
                    metadata: Bytes::from_static(b"m"),
                    assignment: Bytes::from_static(b"a"),
                }],
            }),
            Entry::OffsetsCommitted {
                group: "g".into(),
                offsets: vec![OffsetRecord {
                    topic: "t".into(),
                    partition: 1,
                    offset: 9,
                    leader_epoch: 2,
                    metadata: None,
                }],
            },
            Entry::TxnOffsetsStaged {
                transactional_id: "w".into(),
                group: "g".into(),
                offsets: vec![OffsetRecord {
                    topic: "t".into(),
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: Some("x".into()),
                }],
            },
            Entry::Grant {
                transactional_id: Some("orders".into()),
                producer_id: 3,
                epoch: 4,
                requested_by: Some((3, 3)),
                transaction_timeout_ms: 60_000,
                fence: vec![FenceTarget {
                    producer_id: 3,
                    marker_epoch: 4,
                    marker_sequence: 2,
                    topic: "t".into(),
                    partition: 1,
                    topic_id: 0xabc,
                }],
            },
            Entry::Grant {
                transactional_id: None,
                producer_id: 9,
                epoch: 0,
                requested_by: None,
                transaction_timeout_ms: 0,
                fence: vec![],
            },
            Entry::Register {
                producer_id: 3,
                epoch: 4,
                topic: "t".into(),
                partition: 0,
                transactional: true,
                topic_id: 0x77,
                transaction_version: 1,
            },
            Entry::EndTxn {
                transactional_id: "orders".into(),
                producer_id: 3,
                epoch: 5,
                prev: (3, 4),
                commit: true,
                timed_out: false,
                expired: false,
                markers: vec![FenceTarget {
                    producer_id: 3,
                    marker_epoch: 5,
                    marker_sequence: 3,
                    topic: "t".into(),
                    partition: 0,
                    topic_id: 0xdef,
                }],
            },
            Entry::FenceDone { transactional_id: "orders".into(), epoch: 4 },
            Entry::UncleanLeader { topic: "t".into(), partition: 2, leader_epoch: 9 },
            Entry::ReplicasChanged {
                topic: "t".into(),
                topic_id: 7 << 90,
                partition: 1,
                replicas: vec![4, 5, 1],
                adding: vec![4, 5],
                removing: vec![1],
                leader_id: 1,
                leader_epoch: 3,
                isr: vec![1],
                elr: vec![],
            },
            Entry::Reassigning { topic: "t".into(), topic_id: 7, partition: 1, adding: vec![4], removing: vec![1, 2] },
            Entry::TxnIdsExpired { transactional_ids: vec!["a".into(), "b".into()] },
            Entry::GroupsExpired { groups: vec!["g".into()] },
            Entry::GroupsDeleted { groups: vec!["g".into(), "h".into()] },
            Entry::ConsumerGroupsRemoved { groups: vec!["g".into()] },
            Entry::ConsumerGroup(ConsumerGroupRecord {
                group: "g".into(),
                group_epoch: 5,
                assignment_epoch: 4,
                members: vec![ConsumerMemberRecord {
                    member_id: "m".into(),
                    instance_id: Some("i".into()),
                    epoch: 4,
                    previous_epoch: 3,
                    rebalance_timeout_ms: 300_000,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    topic_names: vec!["in".into()],
                    topic_regex: Some("in-.*".into()),
                    assignor: Some("range".into()),
                    assigned: vec![(7, 0)],
                    revoking: vec![(7, 1)],
                    target: vec![(7, 0), (9, 2)],
                }],
                topics_seen: vec![("in".into(), 7, 3)],
            }),
            Entry::OffsetsDeleted { group: "g".into(), partitions: vec![("t".into(), 0), ("u".into(), 2)] },
            Entry::ProducerIdParity { from: 17 },
            Entry::TransactionVersion { level: 2, epoch: 3 },
            Entry::ScramCredentials {
                upserts: vec![protocol::UserCredential {
                    user: "alice".into(),
                    credential: protocol::sasl::ScramCredential::from_salted_password(
                        protocol::sasl::ScramMechanism::Sha256,
                        b"salted",
                        b"salt".to_vec(),
                        4096,
                    ),
                }],
                deletions: vec![("bob".into(), protocol::sasl::ScramMechanism::Sha512)],
            },
            Entry::Acls {
                created: vec![protocol::acl::AclBinding {
                    resource_type: protocol::acl::ResourceType::Topic,
                    name: "orders-".into(),
                    pattern: protocol::acl::PatternType::Prefixed,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: protocol::acl::Operation::Write,
                    permission: protocol::acl::Permission::Allow,
                }],
                deleted: Vec::new(),
            },
            Entry::TopicCreated {
                name: "t".into(),
                replicas: vec![vec![1, 2], vec![2, 1]],
                min_insync_replicas: 2,
                topic_id: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
                configs: Vec::new(),
            },
            Entry::TopicCreated {
                name: "c".into(),
                replicas: vec![vec![1]],
                min_insync_replicas: 1,
                topic_id: 8,
                configs: vec![("retention.ms".into(), "1000".into()), ("segment.bytes".into(), "4096".into())],
            },
            Entry::TopicConfigs {
                name: "c".into(),
                topic_id: 8,
                min_insync_replicas: 1,
                configs: vec![("max.message.bytes".into(), "100".into())],
            },
            Entry::TopicDeleted { name: "t".into(), topic_id: 7 },
            Entry::PartitionsAdded { name: "t".into(), replicas: vec![vec![3, 1]] },
            Entry::LeaderChanged {
                topic: "t".into(),
                partition: 1,
                leader_id: 2,
                leader_epoch: 7,
                isr: vec![2],
                elr: vec![1, 3],
            },
            Entry::IsrChanged { topic: "t".into(), partition: 1, leader_epoch: 7, isr: vec![2, 1], elr: vec![] },
            Entry::BrokerIncarnation { broker_id: 3, incarnation: 0x1234_5678_9abc, log_dir_id: 99, broker_epoch: 4 },
            Entry::TxnSnapshot(TxnSnapshot {
                transactional_id: "x".into(),
                producer_id: 4,
                epoch: 9,
                requested_by: Some((4, 8)),
                transaction_timeout_ms: 1000,
                registered: vec![("t".into(), 0, 0x99)],
                txn_open: true,
                pending: vec![FenceTarget {
                    producer_id: 4,
                    marker_epoch: 9,
                    marker_sequence: 0,
                    topic: "t".into(),
                    partition: 1,
                    topic_id: 5,
                }],
                pending_commit: true,
                last_result: Some(false),
                last_end: Some(((4, 7), true)),
                bumps: vec![(8, 1, 0), (9, 3, 1000)],
                next_marker_sequence: 6,
                transaction_version: 2,
            }),
            Entry::ProducerIds { next_producer_id: 12, owners: vec![(4, "x".into())] },
            Entry::TopicSnapshot {
                name: "t".into(),
                min_insync_replicas: 1,
                partitions: vec![PartitionSnapshot {
                    replicas: vec![1, 2],
                    leader_id: 2,
                    leader_epoch: 3,
                    partition_epoch: 5,
                    isr: vec![2],
                    elr: vec![1],
                }],
                topic_id: 9,
                configs: Vec::new(),
            },
            Entry::TopicSnapshot {
                name: "c".into(),
                min_insync_replicas: 1,
                partitions: vec![],
                topic_id: 8,
                configs: vec![("cleanup.policy".into(), "delete".into())],
            },
        ];
        for e in entries {
            assert_eq!(Entry::decode(e.encode()).unwrap(), e);
        }
    }

    #[test]
    fn topic_snapshots_from_before_partition_epochs_still_load() {
        let mut b = BytesMut::new();
        b.put_i8(TOPIC_SNAPSHOT);
        b.put_string("t");
        b.put_i32(1);
        b.put_i32_array(&[1, 2]);
        b.put_i32(2);
        b.put_i32(3);
        b.put_i32_array(&[2]);
        let want = PartitionSnapshot {
            replicas: vec![1, 2],
            leader_id: 2,
            leader_epoch: 3,
            partition_epoch: 0,
            isr: vec![2],
            elr: vec![],
        };
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::TopicSnapshot {
                name: "t".into(),
                min_insync_replicas: 0,
                partitions: vec![want],
                topic_id: 0,
                configs: Vec::new()
            }
        );
    }

    /// Journals written before min.insync.replicas, eligible leader replicas and data directory
    /// ids still replay: the old tags read as the defaults.
    #[test]
    fn entries_from_before_min_isr_and_elr_still_load() {
        let mut b = BytesMut::new();
        b.put_i8(TOPIC_CREATED);
        b.put_string("t");
        b.put_i32(1);
        b.put_i32_array(&[1, 2, 3]);
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::TopicCreated {
                name: "t".into(),
                replicas: vec![vec![1, 2, 3]],
                min_insync_replicas: 0,
                topic_id: 0,
                configs: Vec::new(),
            }
        );
        let mut b = BytesMut::new();
        b.put_i8(LEADER_CHANGED);
        b.put_string("t");
        b.put_i32(0);
        b.put_i32(2);
        b.put_i32(4);
        b.put_i32_array(&[2]);
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::LeaderChanged {
                topic: "t".into(),
                partition: 0,
                leader_id: 2,
                leader_epoch: 4,
                isr: vec![2],
                elr: vec![]
            }
        );
        let mut b = BytesMut::new();
        b.put_i8(ISR_CHANGED);
        b.put_string("t");
        b.put_i32(0);
        b.put_i32(4);
        b.put_i32_array(&[2, 3]);
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::IsrChanged { topic: "t".into(), partition: 0, leader_epoch: 4, isr: vec![2, 3], elr: vec![] }
        );
        let mut b = BytesMut::new();
        b.put_i8(BROKER_INCARNATION);
        b.put_i32(3);
        b.put_i64(77);
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::BrokerIncarnation { broker_id: 3, incarnation: 77, log_dir_id: 0, broker_epoch: 0 }
        );
    }

    /// Journals written before marker sequences still replay: their markers read as sequence -1.
    #[test]
    fn entries_from_before_marker_sequences_still_load() {
        let mut b = BytesMut::new();
        b.put_i8(END_TXN);
        b.put_string("orders");
        b.put_i64(3);
        b.put_i16(5);
        b.put_i64(3);
        b.put_i16(4);
        b.put_bool(true);
        b.put_bool(false);
        b.put_i32(1);
        b.put_i64(3);
        b.put_i16(5);
        b.put_string("t");
        b.put_i32(0);
        assert_eq!(
            Entry::decode(b.freeze()).unwrap(),
            Entry::EndTxn {
                transactional_id: "orders".into(),
                producer_id: 3,
                epoch: 5,
                prev: (3, 4),
                commit: true,
                timed_out: false,
                expired: false,
                markers: vec![FenceTarget {
                    producer_id: 3,
                    marker_epoch: 5,
                    marker_sequence: -1,
                    topic: "t".into(),
                    partition: 0,
                    topic_id: 0,
                }],
            }
        );
    }
}
