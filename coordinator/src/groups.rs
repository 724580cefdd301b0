//! Consumer groups: Kafka's classic group protocol and committed offsets (rules, no I/O).
//!
//! [`GroupTable`] takes `now` with every call and returns decisions; what must be durable it
//! queues as journal entries, and the answers to requests that wait (a JoinGroup until its
//! rebalance completes, a follower's SyncGroup until the leader's assignment) as [`Wake`]s.
//! The shell drains both with [`GroupTable::take_effects`] after every call, makes the entries
//! durable, and only then sends the wakes and its own answer. Replaying the entries through
//! [`GroupTable::apply`] rebuilds every group's generation, members and offsets.
//!
//! The fence: a generation is journaled before any member learns it, and generations only go
//! up, so a member that a rebalance left behind (a frozen worker) holds an older generation or
//! a member id no longer in the group; its offset commits, transactional ones included
//! (KIP-447), are refused with ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or, for a static member
//! replaced by a new instance (KIP-345), FENCED_INSTANCE_ID.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use protocol::{
    ErrorCode, GroupMember, GroupMemberState, GroupState, JoinGroupRequest, JoinGroupResponse, PartitionOffset, Status,
    SyncGroupRequest, SyncGroupResponse,
};

use crate::consumer_group::{ConsumerGroup, ConsumerGroupConfig, ConsumerGroups, Heartbeat, HeartbeatAnswer, Topics};
use crate::entry::{Entry, GroupRecord, MemberRecord, OffsetRecord};

/// The name of the pseudo-partition a transaction registers when it carries group offsets
/// (AddOffsetsToTxn), as Kafka adds its `__consumer_offsets` partition (DescribeTransactions
/// shows it so). The coordinator holds the offsets itself, so no broker gets a marker for it:
/// what says so is its topic id, [`crate::cluster::OFFSETS_PARTITION_ID`], which no topic has;
/// and the name is reserved ([`protocol::names::RESERVED_TOPICS`]), so no topic has it either.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Limits and switches of the group rules.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Shortest session timeout a member may ask for (Kafka's `group.min.session.timeout.ms`).
    pub session_timeout_min_ms: i32,
    /// Longest session timeout (Kafka's `group.max.session.timeout.ms`).
    pub session_timeout_max_ms: i32,
    /// How long the first rebalance of an empty group waits for more members
    /// (Kafka's `group.initial.rebalance.delay.ms`).
    pub initial_rebalance_delay_ms: u64,
    /// Members per group (Kafka's `group.max.size`). With `member_bytes_max` it bounds a
    /// generation's journal record (`members_max` x 2 x `member_bytes_max`, under the journal's
    /// `RECORD_BYTES_MAX`).
    pub members_max: usize,
    /// Bytes a member may bring: its ids, client id and host and protocol metadata, and (from
    /// the leader) its assignment, each.
    pub member_bytes_max: usize,
    /// Longest rebalance a member can ask for; a longer `rebalance_timeout_ms` counts as this.
    pub rebalance_timeout_max_ms: i32,
    /// Bytes of a committed offset's metadata (Kafka's `offset.metadata.max.bytes`).
    pub offset_metadata_bytes_max: usize,
    /// Partitions one offset commit may carry (bounds its journal record).
    pub offsets_per_commit_max: usize,
    /// Groups the coordinator holds; a new one beyond is refused POLICY_VIOLATION.
    pub groups_max: usize,
    /// Committed offsets one group holds; a commit adding partitions beyond is refused
    /// POLICY_VIOLATION.
    pub group_offsets_max: usize,
    /// Committed offsets all groups together hold (what bounds the offsets' memory, with
    /// `offset_metadata_bytes_max`); beyond, POLICY_VIOLATION.
    pub offsets_max: usize,
    /// A group with no members whose offsets see no commit for this long is forgotten
    /// (Kafka's `offsets.retention.minutes`, 7 days).
    pub offsets_retention_ms: u64,
    /// Check the generation and member of a transactional offset commit (KIP-447), and the
    /// member epoch of a KIP-848 consumer group's offset commits. Off only to demonstrate what
    /// a zombie worker does without it (`--no-generation-fencing`).
    pub generation_fencing: bool,
    /// KIP-848 consumer groups' limits and defaults.
    pub consumer: ConsumerGroupConfig,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout_min_ms: 6_000,
            session_timeout_max_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            members_max: 100,
            member_bytes_max: 64 * 1024,
            rebalance_timeout_max_ms: 300_000,
            offset_metadata_bytes_max: 4_096,
            offsets_per_commit_max: 1_000,
            groups_max: 100_000,
            group_offsets_max: 10_000,
            offsets_max: 1_000_000,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            generation_fencing: true,
            consumer: ConsumerGroupConfig::default(),
        }
    }
}

/// What [`GroupTable::counts`] reports: (held, cap) each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCounts {
    /// Groups, `groups_max`.
    pub groups: (usize, usize),
    /// The fullest group's committed offsets, `group_offsets_max`.
    pub fullest_group_offsets: (usize, usize),
    /// Offsets over every group (committed, and staged by open transactions), `offsets_max`.
    pub offsets: (usize, usize),
}

/// Kafka's group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPhase {
    /// No members (a group that only stores offsets, or whose members all left).
    Empty,
    /// Waiting for the members to join the next generation.
    PreparingRebalance,
    /// The generation is formed; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl GroupPhase {
    /// Kafka's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            GroupPhase::Empty => "Empty",
            GroupPhase::PreparingRebalance => "PreparingRebalance",
            GroupPhase::CompletingRebalance => "CompletingRebalance",
            GroupPhase::Stable => "Stable",
        }
    }
}

/// An answer to a request that waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// A JoinGroup of `member_id` in `group` is answered.
    Join {
        /// Group id.
        group: String,
        /// The member whose join it was.
        member_id: String,
        /// Its answer.
        response: JoinGroupResponse,
    },
    /// A SyncGroup of `member_id` in `group` is answered.
    Sync {
        /// Group id.
        group: String,
        /// The member whose sync it was.
        member_id: String,
        /// Its answer.
        response: SyncGroupResponse,
    },
}

/// What a JoinGroup decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinDecision {
    /// Answered now (an error, or MEMBER_ID_REQUIRED).
    Answer(JoinGroupResponse),
    /// `member_id` waits for the rebalance; its answer comes as a [`Wake::Join`] (perhaps among
    /// this call's own effects).
    Wait {
        /// The member id it joined as.
        member_id: String,
    },
}

/// What a SyncGroup decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncDecision {
    /// Answered now.
    Answer(SyncGroupResponse),
    /// Waits for the leader's assignment; answered as a [`Wake::Sync`].
    Wait,
}

#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    /// Supported protocols with their metadata (only the chosen one's survives a restart).
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    /// Past this the member is removed (no heartbeat within its session timeout).
    deadline_ms: u64,
    /// Has joined the rebalance under way.
    joined: bool,
    /// Waits in SyncGroup.
    syncing: bool,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
struct Group {
    phase: GroupPhase,
    generation: i32,
    protocol_type: String,
    protocol: String,
    leader: String,
    members: BTreeMap<String, Member>,
    /// Static members: instance id -> its current member id.
    statics: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not joined yet, and when they lapse.
    pending: HashMap<String, u64>,
    /// When the rebalance under way completes even if not every member joined.
    rebalance_deadline_ms: u64,
    /// The first rebalance of an empty group completes no earlier than this.
    join_not_before_ms: u64,
    offsets: Offsets,
    /// The last generation journaled: what a snapshot records (the members as they are in
    /// memory mid-rebalance are not a generation anyone was told).
    journaled: Option<GroupRecord>,
    /// Since when the group has had no members and no commit, as the expiry sweep first found
    /// it so (volatile, like [`crate::table`]'s idle clocks: a restart only lengthens it).
    idle_since_ms: Option<u64>,
}

impl Group {
    fn new() -> Group {
        Group {
            phase: GroupPhase::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            statics: HashMap::new(),
            pending: HashMap::new(),
            rebalance_deadline_ms: 0,
            join_not_before_ms: 0,
            offsets: BTreeMap::new(),
            journaled: None,
            idle_since_ms: None,
        }
    }

    fn record(&self) -> GroupRecord {
        GroupRecord {
            group: String::new(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            stable: self.phase == GroupPhase::Stable,
            members: self
                .members
                .iter()
                .map(|(id, m)| MemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    metadata: m.metadata(&self.protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// The protocol every member supports, in the leader's (or first member's) order.
    fn choose_protocol(&self) -> Option<String> {
        let first = self.members.get(&self.leader).or_else(|| self.members.values().next())?;
        first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .find(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .cloned()
    }
}

/// Offsets by (topic, partition).
type Offsets = BTreeMap<(String, i32), OffsetRecord>;

fn status(code: ErrorCode, message: String) -> Status {
    Status::new(code, message)
}

/// Every consumer group and its offsets. See the module docs.
#[derive(Debug)]
pub struct GroupTable {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// Offsets staged by open transactions: transactional id -> group -> partition -> offset.
    staged: HashMap<String, BTreeMap<String, Offsets>>,
    /// Makes member ids unique across coordinator processes (new at every start).
    member_nonce: u64,
    next_member: u64,
    wakes: Vec<Wake>,
    entries: Vec<Entry>,
    /// Committed offsets held, over every group.
    offsets_total: usize,
    /// Offsets staged by open transactions, over every transaction and group.
    staged_total: usize,
    /// KIP-848 consumer groups' members and epochs (their offsets are in `groups`, as a group's
    /// that only stores offsets). A group id is of one type: a consumer group with members
    /// refuses classic joins, a classic group with members KIP-848 joins.
    consumer: ConsumerGroups,
}

impl GroupTable {
    /// An empty table; `member_nonce` (random, new at every start) goes into every member id,
    /// so no id handed out before a restart is handed out again.
    pub fn new(config: GroupConfig, member_nonce: u64) -> Self {
        GroupTable {
            config: config.clone(),
            groups: BTreeMap::new(),
            staged: HashMap::new(),
            member_nonce,
            next_member: 0,
            wakes: Vec::new(),
            entries: Vec::new(),
            offsets_total: 0,
            staged_total: 0,
            consumer: ConsumerGroups::new(config.consumer.clone()),
        }
    }

    /// The answers and journal entries the calls since the last take produced: make the entries
    /// durable, then send the answers.
    pub fn take_effects(&mut self) -> (Vec<Wake>, Vec<Entry>) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.extend(self.consumer.take_entries());
        (std::mem::take(&mut self.wakes), entries)
    }

    /// Whether calls since the last [`GroupTable::take_effects`] produced anything.
    pub fn has_effects(&self) -> bool {
        !self.wakes.is_empty() || !self.entries.is_empty() || self.consumer.has_entries()
    }

    /// The KIP-848 consumer groups.
    pub fn consumer_groups(&self) -> &ConsumerGroups {
        &self.consumer
    }

    /// A ConsumerGroupHeartbeat (KIP-848) at `now_ms` against the cluster's `topics`. A group id
    /// is of one type: a join (epoch 0) to a classic group with members is refused
    /// GROUP_ID_NOT_FOUND (no online migration), one to an empty classic group makes it a
    /// consumer group (its committed offsets kept). What changed waits in
    /// [`GroupTable::take_effects`].
    pub fn handle_consumer_heartbeat(
        &mut self,
        now_ms: u64,
        h: &Heartbeat,
        topics: &Topics,
    ) -> Result<HeartbeatAnswer, Status> {
        if h.member_epoch == 0 && self.consumer.group(&h.group).is_none() {
            if let Some(g) = self.groups.get(&h.group).filter(|g| !g.members.is_empty() || !g.pending.is_empty()) {
                return Err(status(
                    ErrorCode::GroupIdNotFound,
                    format!(
                        "group '{}' is a classic group with {} members: a KIP-848 consumer (group.protocol=consumer) \
                         joins it once they have left (no online migration); use another group id, or \
                         group.protocol=classic",
                        h.group,
                        g.members.len()
                    ),
                ));
            }
            if !h.group.is_empty() {
                self.room_for(&h.group)?;
            }
            // An empty classic group converts: its epochs start past its generation, so no
            // generation a zombie holds is ever a current member epoch.
            if let Some(g) = self.groups.get(&h.group) {
                self.consumer.create_at(&h.group, g.generation);
            }
        }
        self.consumer.heartbeat(now_ms, h, topics)
    }

    /// After a replay: every member's session starts now.
    pub fn restart_clocks(&mut self, now_ms: u64) {
        self.consumer.restart_clocks(now_ms);
        let cap = self.config.rebalance_timeout_max_ms.max(0) as u64;
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                m.deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
            }
            // A generation replayed before its assignment: its members sync afresh.
            let timeout = g.members.values().map(|m| (m.rebalance_timeout_ms.max(0) as u64).min(cap)).max();
            g.rebalance_deadline_ms = now_ms + timeout.unwrap_or(0);
        }
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_member += 1;
        format!("{client_id}-{:016x}-{}", self.member_nonce, self.next_member)
    }

    fn journal_generation(&mut self, name: &str) {
        if let Some(g) = self.groups.get_mut(name) {
            let mut record = g.record();
            record.group = name.to_string();
            g.journaled = Some(record.clone());
            self.entries.push(Entry::GroupGeneration(record));
        }
    }

    /// JoinGroup.
    pub fn handle_join(&mut self, now_ms: u64, r: &JoinGroupRequest) -> JoinDecision {
        let refuse =
            |code, msg: String| JoinDecision::Answer(JoinGroupResponse::error(status(code, msg), &r.member_id));
        if r.group.is_empty() {
            return refuse(ErrorCode::InvalidGroupId, "the group id is empty; give one (group.id)".into());
        }
        let (min, max) = (self.config.session_timeout_min_ms, self.config.session_timeout_max_ms);
        if r.session_timeout_ms < min || r.session_timeout_ms > max {
            return refuse(
                ErrorCode::InvalidSessionTimeout,
                format!(
                    "session timeout {} ms is outside the coordinator's bounds [{min}, {max}] ms \
                     (--group-min-session-timeout-ms, --group-max-session-timeout-ms)",
                    r.session_timeout_ms
                ),
            );
        }
        if r.protocol_type.is_empty() || r.protocols.is_empty() {
            return refuse(
                ErrorCode::InconsistentGroupProtocol,
                "a join must name its protocol type and protocols".into(),
            );
        }
        if let Err(s) = self.room_for(&r.group) {
            return refuse(s.code, s.message);
        }
        // One type per group id: an empty KIP-848 group becomes a classic one, its generations
        // starting past the group's epoch.
        let mut floor = 0;
        match self.consumer.group(&r.group) {
            Some(cg) if cg.has_members() => {
                return refuse(
                    ErrorCode::InconsistentGroupProtocol,
                    format!(
                        "group '{}' is a KIP-848 consumer group with members: a classic consumer joins it once they \
                         have left; use group.protocol=consumer, or another group id",
                        r.group
                    ),
                )
            }
            Some(cg) => {
                floor = cg.group_epoch();
                self.consumer.remove(&r.group, true);
            }
            None => {}
        }
        let mut g = self.groups.remove(&r.group).unwrap_or_else(Group::new);
        g.generation = g.generation.max(floor);
        let decision = self.join(&mut g, now_ms, r);
        if g.generation == 0 && g.members.is_empty() && g.pending.is_empty() && g.offsets.is_empty() {
            // A refused first join leaves no group behind.
            return decision;
        }
        self.groups.insert(r.group.clone(), g);
        self.fill_group_names(&r.group);
        if let JoinDecision::Wait { .. } = decision {
            self.maybe_complete_join(&r.group, now_ms);
        }
        decision
    }

    fn join(&mut self, g: &mut Group, now_ms: u64, r: &JoinGroupRequest) -> JoinDecision {
        let refuse =
            |code, msg: String| JoinDecision::Answer(JoinGroupResponse::error(status(code, msg), &r.member_id));
        let supported = |g: &Group| {
            g.members.is_empty()
                || (g.protocol_type == r.protocol_type
                    && r.protocols
                        .iter()
                        .any(|(p, _)| g.members.values().all(|m| m.protocols.iter().any(|(q, _)| q == p))))
        };
        // Every check that can refuse comes before anything changes (a refused new instance of
        // a static member must not have removed the old one).
        let bytes = r.member_id.len()
            + r.instance_id.as_ref().map_or(0, String::len)
            + r.client_id.len()
            + r.client_host.len()
            + r.protocols.iter().map(|(n, m)| n.len() + m.len()).sum::<usize>();
        if bytes > self.config.member_bytes_max {
            return refuse(
                ErrorCode::MessageTooLarge,
                format!(
                    "the member's ids and protocol metadata take {bytes} bytes, above member_bytes_max {}",
                    self.config.member_bytes_max
                ),
            );
        }
        if !supported(g) {
            return refuse(
                ErrorCode::InconsistentGroupProtocol,
                format!(
                    "group '{}' uses protocol type '{}' with protocols none of which this member supports",
                    r.group, g.protocol_type
                ),
            );
        }
        let member_id = match (&r.instance_id, r.member_id.is_empty()) {
            (Some(instance), true) => {
                // A static member's (new) instance: it replaces the one before, which is fenced.
                let new_id = self.new_member_id(&r.client_id);
                if let Some(old) = g.statics.get(instance).cloned() {
                    self.remove_member(
                        g,
                        &old,
                        ErrorCode::FencedInstanceId,
                        format!(
                            "static member '{instance}' was replaced by a new instance with the same group.instance.id"
                        ),
                    );
                }
                g.statics.insert(instance.clone(), new_id.clone());
                new_id
            }
            (Some(instance), false) => {
                if g.statics.get(instance).is_some_and(|current| *current != r.member_id) {
                    return refuse(
                        ErrorCode::FencedInstanceId,
                        format!(
                            "member '{}' of static instance '{instance}' was replaced by a newer instance; stop this one",
                            r.member_id
                        ),
                    );
                }
                if !g.members.contains_key(&r.member_id) {
                    return refuse(
                        ErrorCode::UnknownMemberId,
                        format!("'{}' is not a member of group '{}'; join with no member id", r.member_id, r.group),
                    );
                }
                r.member_id.clone()
            }
            (None, true) => {
                let id = self.new_member_id(&r.client_id);
                if r.require_known_member {
                    g.pending.insert(id.clone(), now_ms + r.session_timeout_ms.max(0) as u64);
                    return JoinDecision::Answer(JoinGroupResponse::error(
                        status(ErrorCode::MemberIdRequired, "join again with the member id given".into()),
                        &id,
                    ));
                }
                id
            }
            (None, false) => {
                if !g.members.contains_key(&r.member_id) && g.pending.remove(&r.member_id).is_none() {
                    return refuse(
                        ErrorCode::UnknownMemberId,
                        format!(
                            "'{}' is not a member of group '{}' (its session expired or it left); join with no member id",
                            r.member_id, r.group
                        ),
                    );
                }
                r.member_id.clone()
            }
        };
        if let Some(answer) = Self::rejoin_unchanged(g, &member_id, r, now_ms) {
            return JoinDecision::Answer(answer);
        }
        if !g.members.contains_key(&member_id) && g.members.len() >= self.config.members_max {
            return refuse(
                ErrorCode::GroupMaxSizeReached,
                format!("group '{}' has members_max {} members", r.group, self.config.members_max),
            );
        }
        let assignment = g.members.get(&member_id).map(|m| m.assignment.clone()).unwrap_or_default();
        g.members.insert(
            member_id.clone(),
            Member {
                instance_id: r.instance_id.clone(),
                client_id: r.client_id.clone(),
                client_host: r.client_host.clone(),
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                protocols: r.protocols.clone(),
                assignment,
                deadline_ms: now_ms + r.session_timeout_ms.max(0) as u64,
                joined: true,
                syncing: false,
            },
        );
        g.protocol_type = r.protocol_type.clone();
        self.prepare_rebalance(g, now_ms);
        JoinDecision::Wait { member_id }
    }

    /// Kafka's answer to a known member joining again with the same protocols while the
    /// generation stands (a follower in a stable group, or anyone while the leader's assignment
    /// is awaited): the current generation, at once, and no rebalance. Clients join again after
    /// a join whose answer they dropped (kafka-python does when it completes between polls);
    /// rebalancing for each would never settle.
    fn rejoin_unchanged(
        g: &mut Group,
        member_id: &str,
        r: &JoinGroupRequest,
        now_ms: u64,
    ) -> Option<JoinGroupResponse> {
        let standing = match g.phase {
            GroupPhase::CompletingRebalance => true,
            GroupPhase::Stable => member_id != g.leader,
            GroupPhase::Empty | GroupPhase::PreparingRebalance => false,
        };
        let m = g.members.get_mut(member_id)?;
        if !standing || m.protocols != r.protocols || r.protocol_type != g.protocol_type {
            return None;
        }
        m.deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
        let members = if member_id == g.leader {
            g.members.iter().map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata(&g.protocol))).collect()
        } else {
            Vec::new()
        };
        Some(JoinGroupResponse {
            status: Status::ok(),
            generation: g.generation,
            protocol_type: g.protocol_type.clone(),
            protocol: g.protocol.clone(),
            leader: g.leader.clone(),
            member_id: member_id.to_string(),
            members,
        })
    }

    /// Remove a member, answering its waiting requests with `code`.
    fn remove_member(&mut self, g: &mut Group, member_id: &str, code: ErrorCode, why: String) {
        let Some(m) = g.members.remove(member_id) else { return };
        tracing::info!(%member_id, generation = g.generation, reason = %why, "group member removed");
        if let Some(instance) = &m.instance_id {
            if g.statics.get(instance).map(String::as_str) == Some(member_id) {
                g.statics.remove(instance);
            }
        }
        if m.joined {
            self.wakes.push(Wake::Join {
                group: String::new(),
                member_id: member_id.to_string(),
                response: JoinGroupResponse::error(status(code, why.clone()), member_id),
            });
        }
        if m.syncing {
            self.wakes.push(Wake::Sync {
                group: String::new(),
                member_id: member_id.to_string(),
                response: SyncGroupResponse::error(status(code, why)),
            });
        }
    }

    fn prepare_rebalance(&mut self, g: &mut Group, now_ms: u64) {
        if g.phase == GroupPhase::PreparingRebalance {
            return;
        }
        for (id, m) in g.members.iter_mut() {
            if m.syncing {
                m.syncing = false;
                self.wakes.push(Wake::Sync {
                    group: String::new(),
                    member_id: id.clone(),
                    response: SyncGroupResponse::error(status(
                        ErrorCode::RebalanceInProgress,
                        "the group is rebalancing: join again".into(),
                    )),
                });
            }
        }
        let cap = self.config.rebalance_timeout_max_ms.max(0) as u64;
        let timeout = g.members.values().map(|m| (m.rebalance_timeout_ms.max(0) as u64).min(cap)).max().unwrap_or(0);
        g.join_not_before_ms =
            if g.phase == GroupPhase::Empty { now_ms + self.config.initial_rebalance_delay_ms } else { 0 };
        g.rebalance_deadline_ms = now_ms + timeout.max(self.config.initial_rebalance_delay_ms);
        g.phase = GroupPhase::PreparingRebalance;
    }

    /// Complete the rebalance under way if every member has joined (and the initial delay passed).
    fn maybe_complete_join(&mut self, name: &str, now_ms: u64) {
        let ready = self.groups.get(name).is_some_and(|g| {
            g.phase == GroupPhase::PreparingRebalance
                && now_ms >= g.join_not_before_ms
                && g.members.values().all(|m| m.joined)
        });
        if ready {
            self.complete_join(name, now_ms);
        }
    }

    /// Form the next generation from the members that joined; the others are removed.
    fn complete_join(&mut self, name: &str, now_ms: u64) {
        let Some(mut g) = self.groups.remove(name) else { return };
        let late: Vec<String> = g.members.iter().filter(|(_, m)| !m.joined).map(|(id, _)| id.clone()).collect();
        for id in late {
            self.remove_member(&mut g, &id, ErrorCode::UnknownMemberId, "it did not join the rebalance in time".into());
        }
        g.generation += 1;
        if g.members.is_empty() {
            g.phase = GroupPhase::Empty;
            g.protocol.clear();
            g.leader.clear();
        } else {
            if !g.members.contains_key(&g.leader) {
                g.leader = g.members.keys().next().cloned().unwrap_or_default();
            }
            g.protocol = g.choose_protocol().unwrap_or_default();
            g.phase = GroupPhase::CompletingRebalance;
            // The members have this long to sync (the leader with the assignment).
            let cap = self.config.rebalance_timeout_max_ms.max(0) as u64;
            let timeout =
                g.members.values().map(|m| (m.rebalance_timeout_ms.max(0) as u64).min(cap)).max().unwrap_or(0);
            g.rebalance_deadline_ms = now_ms + timeout;
            let everyone: Vec<(String, Option<String>, Bytes)> =
                g.members.iter().map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata(&g.protocol))).collect();
            for (id, m) in g.members.iter_mut() {
                m.joined = false;
                m.assignment = Bytes::new();
                m.deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
                self.wakes.push(Wake::Join {
                    group: name.to_string(),
                    member_id: id.clone(),
                    response: JoinGroupResponse {
                        status: Status::ok(),
                        generation: g.generation,
                        protocol_type: g.protocol_type.clone(),
                        protocol: g.protocol.clone(),
                        leader: g.leader.clone(),
                        member_id: id.clone(),
                        members: if *id == g.leader { everyone.clone() } else { Vec::new() },
                    },
                });
            }
        }
        tracing::info!(group = %name, generation = g.generation, members = ?g.members.keys().collect::<Vec<_>>(), leader = %g.leader, "group generation formed");
        self.groups.insert(name.to_string(), g);
        self.journal_generation(name);
        self.fill_group_names(name);
    }

    /// Wakes queued while a group was out of the map carry no name yet.
    fn fill_group_names(&mut self, name: &str) {
        for w in &mut self.wakes {
            let (Wake::Join { group, .. } | Wake::Sync { group, .. }) = w;
            if group.is_empty() {
                *group = name.to_string();
            }
        }
    }

    /// Check that `who` is a current member at the current generation.
    fn check_member(g: &Group, who: &GroupMember) -> Result<(), Status> {
        if let Some(instance) = &who.instance_id {
            // Fenced only by a newer instance; an instance the group no longer has (its
            // session lapsed) is an unknown member, which joins again.
            if g.statics.get(instance).is_some_and(|current| *current != who.member_id) {
                return Err(status(
                    ErrorCode::FencedInstanceId,
                    format!(
                        "member '{}' of static instance '{instance}' was replaced by a newer instance; stop this one",
                        who.member_id
                    ),
                ));
            }
        }
        if !g.members.contains_key(&who.member_id) {
            return Err(status(
                ErrorCode::UnknownMemberId,
                format!(
                    "'{}' is not a member of group '{}' (its session expired, or it left); join again",
                    who.member_id, who.group
                ),
            ));
        }
        if who.generation != g.generation {
            return Err(status(
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {} of group '{}' is over: the group is at generation {} (a rebalance moved on \
                     without this member); join again",
                    who.generation, who.group, g.generation
                ),
            ));
        }
        Ok(())
    }

    /// SyncGroup.
    pub fn handle_sync(&mut self, now_ms: u64, r: &SyncGroupRequest) -> SyncDecision {
        let who = &r.member;
        let Some(g) = self.groups.get_mut(&who.group) else {
            return SyncDecision::Answer(SyncGroupResponse::error(status(
                ErrorCode::UnknownMemberId,
                format!("group '{}' does not exist; join it first", who.group),
            )));
        };
        if let Err(s) = Self::check_member(g, who) {
            return SyncDecision::Answer(SyncGroupResponse::error(s));
        }
        let answer = |g: &Group, id: &str| SyncGroupResponse {
            status: Status::ok(),
            protocol_type: g.protocol_type.clone(),
            protocol: g.protocol.clone(),
            assignment: g.members.get(id).map(|m| m.assignment.clone()).unwrap_or_default(),
        };
        match g.phase {
            GroupPhase::Empty | GroupPhase::PreparingRebalance => SyncDecision::Answer(SyncGroupResponse::error(
                status(ErrorCode::RebalanceInProgress, "the group is rebalancing: join again".into()),
            )),
            GroupPhase::Stable => SyncDecision::Answer(answer(g, &who.member_id)),
            GroupPhase::CompletingRebalance => {
                if let Some(m) = g.members.get_mut(&who.member_id) {
                    m.syncing = true;
                    m.deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
                }
                if who.member_id == g.leader {
                    if let Some((id, a)) = r.assignments.iter().find(|(_, a)| a.len() > self.config.member_bytes_max) {
                        return SyncDecision::Answer(SyncGroupResponse::error(status(
                            ErrorCode::MessageTooLarge,
                            format!(
                                "the assignment of '{id}' takes {} bytes, above member_bytes_max {}",
                                a.len(),
                                self.config.member_bytes_max
                            ),
                        )));
                    }
                    for m in g.members.values_mut() {
                        m.assignment = Bytes::new();
                    }
                    for (id, a) in &r.assignments {
                        if let Some(m) = g.members.get_mut(id) {
                            m.assignment = a.clone();
                        }
                    }
                    g.phase = GroupPhase::Stable;
                    let mut wakes = Vec::new();
                    for (id, m) in g.members.iter_mut() {
                        if m.syncing {
                            m.syncing = false;
                            wakes.push(id.clone());
                        }
                    }
                    let g = &self.groups[&who.group];
                    let responses: Vec<Wake> = wakes
                        .into_iter()
                        .map(|id| Wake::Sync { group: who.group.clone(), response: answer(g, &id), member_id: id })
                        .collect();
                    self.wakes.extend(responses);
                    self.journal_generation(&who.group);
                }
                SyncDecision::Wait
            }
        }
    }

    /// A member's heartbeat.
    pub fn handle_heartbeat(&mut self, now_ms: u64, who: &GroupMember) -> Status {
        let Some(g) = self.groups.get_mut(&who.group) else {
            return status(ErrorCode::UnknownMemberId, format!("group '{}' does not exist; join it", who.group));
        };
        if let Err(s) = Self::check_member(g, who) {
            return s;
        }
        if let Some(m) = g.members.get_mut(&who.member_id) {
            m.deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
        }
        match g.phase {
            GroupPhase::PreparingRebalance => {
                status(ErrorCode::RebalanceInProgress, "the group is rebalancing: join again".into())
            }
            _ => Status::ok(),
        }
    }

    /// LeaveGroup: a status per member, in order.
    pub fn handle_leave(&mut self, now_ms: u64, group: &str, members: &[(String, Option<String>)]) -> Vec<Status> {
        let Some(mut g) = self.groups.remove(group) else {
            let s = status(ErrorCode::UnknownMemberId, format!("group '{group}' does not exist"));
            return vec![s; members.len()];
        };
        let mut out = Vec::with_capacity(members.len());
        let mut left = false;
        for (member_id, instance) in members {
            let id = match instance {
                Some(i) => match g.statics.get(i) {
                    Some(current) if member_id.is_empty() || current == member_id => current.clone(),
                    Some(_) => {
                        out.push(status(
                            ErrorCode::FencedInstanceId,
                            format!("member '{member_id}' of static instance '{i}' was replaced by a newer instance"),
                        ));
                        continue;
                    }
                    None => member_id.clone(),
                },
                None => member_id.clone(),
            };
            if !g.members.contains_key(&id) {
                out.push(status(ErrorCode::UnknownMemberId, format!("'{id}' is not a member of group '{group}'")));
                continue;
            }
            self.remove_member(&mut g, &id, ErrorCode::UnknownMemberId, "it left the group".into());
            left = true;
            out.push(Status::ok());
        }
        if left {
            if g.members.is_empty() && g.phase != GroupPhase::PreparingRebalance {
                // Nobody to wait for: the next generation is empty at once.
                g.phase = GroupPhase::PreparingRebalance;
            } else {
                self.prepare_rebalance(&mut g, now_ms);
            }
        }
        self.groups.insert(group.to_string(), g);
        self.fill_group_names(group);
        if left {
            let ready = self.groups.get(group).is_some_and(|g| g.members.values().all(|m| m.joined));
            if ready {
                self.complete_join(group, now_ms);
            }
        }
        out
    }

    /// Whether `who` may commit offsets for its group now; `transactional` for TxnOffsetCommit
    /// (KIP-447: a member id of an older client may be absent, and then only the producer's
    /// epoch fences).
    pub fn check_commit(&self, who: &GroupMember, transactional: bool) -> Result<(), Status> {
        let anonymous = who.generation < 0 && who.member_id.is_empty() && who.instance_id.is_none();
        if let Some(cg) = self.consumer.group(&who.group) {
            // A KIP-848 group: the generation is the member epoch.
            if anonymous && (transactional || !cg.has_members()) || !self.config.generation_fencing {
                return Ok(());
            }
            return self.consumer.check_commit(&who.group, &who.member_id, who.generation, transactional);
        }
        let g = self.groups.get(&who.group);
        if anonymous {
            return match g {
                Some(g) if !transactional && !g.members.is_empty() => Err(status(
                    ErrorCode::UnknownMemberId,
                    format!(
                        "group '{}' has members: a commit without a member id and generation is only for a group \
                         with none (assign() consumers); commit as a member",
                        who.group
                    ),
                )),
                _ => Ok(()),
            };
        }
        if transactional && !self.config.generation_fencing {
            return Ok(());
        }
        let Some(g) = g else {
            return Err(status(
                ErrorCode::IllegalGeneration,
                format!("group '{}' has no generation {}; join it", who.group, who.generation),
            ));
        };
        Self::check_member(g, who)?;
        if !transactional && g.phase == GroupPhase::CompletingRebalance {
            return Err(status(ErrorCode::RebalanceInProgress, "the group is rebalancing: join again".into()));
        }
        Ok(())
    }

    /// An offset commit's size limits.
    fn check_offsets(&self, offsets: &[PartitionOffset]) -> Result<(), Status> {
        if offsets.len() > self.config.offsets_per_commit_max {
            return Err(status(
                ErrorCode::MessageTooLarge,
                format!(
                    "{} partitions in one offset commit, above offsets_per_commit_max {}; commit in parts",
                    offsets.len(),
                    self.config.offsets_per_commit_max
                ),
            ));
        }
        let max = self.config.offset_metadata_bytes_max;
        if let Some(o) =
            offsets.iter().find(|o| o.metadata.as_ref().map_or(0, String::len) > max || o.topic.len() > 255)
        {
            return Err(status(
                ErrorCode::OffsetMetadataTooLarge,
                format!("the metadata of {}-{} is above offset_metadata_bytes_max {max} bytes", o.topic, o.partition),
            ));
        }
        Ok(())
    }

    /// Whether there is room for group `group` (a join or a commit to a group that does not
    /// exist creates it): POLICY_VIOLATION, naming the cap, if not.
    fn room_for(&self, group: &str) -> Result<(), Status> {
        if group.is_empty() {
            return Err(status(ErrorCode::InvalidGroupId, "the group id is empty".into()));
        }
        // A KIP-848 group that committed nothing yet is held in `consumer` alone: counted exactly
        // only near the cap.
        let near = self.groups.len() + self.consumer.len() >= self.config.groups_max;
        if !self.groups.contains_key(group)
            && self.consumer.group(group).is_none()
            && near
            && self.counts().groups.0 >= self.config.groups_max
        {
            return Err(status(
                ErrorCode::PolicyViolation,
                format!(
                    "the coordinator holds groups_max {} groups, so it takes no new one ('{group}'); use an existing \
                     group, wait for empty ones to expire (offsets_retention_ms {}), or raise --groups-max",
                    self.config.groups_max, self.config.offsets_retention_ms
                ),
            ));
        }
        Ok(())
    }

    /// Whether `group` has room for the offsets of `offsets` (those of partitions it has no
    /// offset for count): POLICY_VIOLATION, naming the cap, if not.
    fn room_for_offsets(&self, group: &str, offsets: &[PartitionOffset]) -> Result<(), Status> {
        let held = self.groups.get(group).map(|g| &g.offsets);
        let mut new: Vec<(&str, i32)> = offsets
            .iter()
            .filter(|o| !held.is_some_and(|h| h.contains_key(&(o.topic.clone(), o.partition))))
            .map(|o| (o.topic.as_str(), o.partition))
            .collect();
        new.sort_unstable();
        new.dedup();
        let count = held.map_or(0, BTreeMap::len);
        // Offsets staged by open transactions count too: they are held as long.
        if !new.is_empty() && self.offsets_total + self.staged_total + new.len() > self.config.offsets_max {
            return Err(status(
                ErrorCode::PolicyViolation,
                format!(
                    "the coordinator holds offsets_max {} offsets (committed, and staged by open transactions) over \
                     all groups, so it takes no new partition for group '{group}'; wait for empty groups to expire, \
                     or raise --offsets-max",
                    self.config.offsets_max
                ),
            ));
        }
        if !new.is_empty() && count + new.len() > self.config.group_offsets_max {
            return Err(status(
                ErrorCode::PolicyViolation,
                format!(
                    "group '{group}' holds {count} committed offsets and this commit adds {}, above group_offsets_max \
                     {}; commit fewer partitions, use another group, or raise --group-offsets-max",
                    new.len(),
                    self.config.group_offsets_max
                ),
            ));
        }
        Ok(())
    }

    /// The state held beside its cap: groups, the fullest group's offsets, all offsets.
    pub fn counts(&self) -> GroupCounts {
        let fullest = self.groups.values().map(|g| g.offsets.len()).max().unwrap_or(0);
        // A KIP-848 group that committed nothing yet is held in `consumer` alone.
        let consumer_only = self.consumer.names().filter(|n| !self.groups.contains_key(*n)).count();
        GroupCounts {
            groups: (self.groups.len() + consumer_only, self.config.groups_max),
            fullest_group_offsets: (fullest, self.config.group_offsets_max),
            offsets: (self.offsets_total + self.staged_total, self.config.offsets_max),
        }
    }

    /// The expiry sweep, run every so often: a group found without members, rebalance or
    /// offsets staged by an open transaction starts its idle clock at `now_ms` (the first sweep
    /// that finds it so after anything was applied to it); one idle for
    /// `offsets_retention_ms` is forgotten with its offsets (Kafka's `offsets.retention.minutes`
    /// for empty groups, here for the group as a whole: its newest commit keeps every offset).
    /// Returns the entries that record it, already applied.
    pub fn handle_expiry(&mut self, now_ms: u64) -> Vec<Entry> {
        let retention = self.config.offsets_retention_ms;
        let staged: std::collections::HashSet<&String> = self.staged.values().flat_map(|g| g.keys()).collect();
        let mut expired = Vec::new();
        for (name, g) in self.groups.iter_mut() {
            let quiet = g.members.is_empty()
                && g.pending.is_empty()
                && !staged.contains(name)
                && !self.consumer.group(name).is_some_and(ConsumerGroup::has_members);
            if crate::table::idle_past(&mut g.idle_since_ms, quiet, now_ms, retention) {
                expired.push(name.clone());
            }
        }
        // KIP-848 groups that never committed (nothing in `groups`) expire when idle as long.
        let groups = &self.groups;
        expired.extend(
            self.consumer
                .idle(now_ms, retention, |name| groups.contains_key(name) || staged.contains(&name.to_string())),
        );
        let entries = crate::table::expiry_entries(&expired, |groups| Entry::GroupsExpired { groups });
        for entry in &entries {
            self.apply(entry);
        }
        entries
    }

    /// Whether `group` exists: it has a generation or committed offsets, or an open transaction
    /// staged offsets for it.
    fn exists(&self, group: &str) -> bool {
        self.groups.contains_key(group)
            || self.consumer.group(group).is_some()
            || self.staged.values().any(|by_group| by_group.contains_key(group))
    }

    /// DeleteGroups: each group without members is deleted with its committed offsets and the
    /// offsets open transactions staged for it (as Kafka deletes them; such a transaction's
    /// commit then commits nothing for it); journaled. A status per group, in order:
    /// GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or INVALID_GROUP_ID when not deleted. A group
    /// created again under the name starts at generation 1, and no member id of the old one is
    /// ever handed out again, so a zombie member of the old group is not one of the new.
    pub fn handle_delete_groups(&mut self, names: &[String]) -> Vec<Status> {
        let mut deleted = Vec::new();
        let statuses = names
            .iter()
            .map(|name| {
                if name.is_empty() {
                    return status(ErrorCode::InvalidGroupId, "the group id is empty".into());
                }
                if !self.exists(name) || deleted.contains(name) {
                    return status(
                        ErrorCode::GroupIdNotFound,
                        format!("group '{name}' does not exist (never used, deleted, or expired): nothing to delete"),
                    );
                }
                if let Some(cg) = self.consumer.group(name).filter(|g| g.has_members()) {
                    return status(
                        ErrorCode::NonEmptyGroup,
                        format!(
                            "consumer group '{name}' has {} members: a group is deleted once it has none; stop its \
                             consumers (or wait for their sessions to expire) and delete it again",
                            cg.member_count()
                        ),
                    );
                }
                if let Some(g) = self.groups.get(name).filter(|g| g.phase != GroupPhase::Empty) {
                    return status(
                        ErrorCode::NonEmptyGroup,
                        format!(
                            "group '{name}' has {} members ({}): a group is deleted once it has none; stop its                              consumers (or wait for their sessions to expire) and delete it again",
                            g.members.len(),
                            g.phase.name()
                        ),
                    );
                }
                deleted.push(name.clone());
                Status::ok()
            })
            .collect();
        for entry in crate::table::expiry_entries(&deleted, |groups| Entry::GroupsDeleted { groups }) {
            self.apply(&entry);
            self.entries.push(entry);
        }
        statuses
    }

    /// OffsetDelete (KIP-496): the group's committed offsets of `partitions` are deleted (and
    /// those open transactions staged for them),
    /// except those of topics its members are subscribed to (GROUP_SUBSCRIBED_TO_TOPIC each);
    /// `exists` says which partitions exist (UNKNOWN_TOPIC_OR_PARTITION for one that does not,
    /// unless the group holds an offset for it: that of a deleted topic is deleted). A group
    /// with members whose subscriptions cannot be told (not the `consumer` protocol type) is
    /// refused NON_EMPTY_GROUP as a whole, one that does not exist GROUP_ID_NOT_FOUND.
    /// Journaled; a status per partition, in order.
    pub fn handle_offset_delete(
        &mut self,
        group: &str,
        partitions: &[(String, i32)],
        exists: &[bool],
    ) -> Result<Vec<Status>, Status> {
        if group.is_empty() {
            return Err(status(ErrorCode::InvalidGroupId, "the group id is empty".into()));
        }
        if !self.exists(group) {
            return Err(status(
                ErrorCode::GroupIdNotFound,
                format!("group '{group}' does not exist (never used, deleted, or expired): it holds no offsets"),
            ));
        }
        let subscribed: std::collections::HashSet<String> = match self.groups.get(group) {
            Some(g) if g.phase != GroupPhase::Empty => {
                let unreadable = || {
                    status(
                        ErrorCode::NonEmptyGroup,
                        format!(
                            "group '{group}' has {} members of protocol type '{}', whose subscriptions cannot be                              read: its offsets are deleted once it has none",
                            g.members.len(),
                            g.protocol_type
                        ),
                    )
                };
                if g.protocol_type != "consumer" {
                    return Err(unreadable());
                }
                let mut topics = std::collections::HashSet::new();
                for m in g.members.values() {
                    for (_, metadata) in &m.protocols {
                        topics.extend(protocol::kafka::subscribed_topics(metadata).ok_or_else(unreadable)?);
                    }
                }
                topics
            }
            _ => match self.consumer.group(group) {
                Some(cg) => partitions.iter().filter(|(t, _)| cg.subscribes(t)).map(|(t, _)| t.clone()).collect(),
                None => Default::default(),
            },
        };
        // Committed, or staged by an open transaction (whose commit would otherwise bring it
        // back): both go, as Kafka removes both.
        let held = |key: &(String, i32)| {
            self.groups.get(group).is_some_and(|g| g.offsets.contains_key(key))
                || self.staged.values().any(|by_group| by_group.get(group).is_some_and(|o| o.contains_key(key)))
        };
        let mut gone = Vec::new();
        let statuses = partitions
            .iter()
            .zip(exists.iter().copied().chain(std::iter::repeat(false)))
            .map(|(key, exists)| {
                let (topic, partition) = key;
                if subscribed.contains(topic) {
                    return status(
                        ErrorCode::GroupSubscribedToTopic,
                        format!(
                            "members of group '{group}' are subscribed to topic '{topic}': its offsets are kept;                              delete them once no member subscribes to it"
                        ),
                    );
                }
                if !exists && !held(key) {
                    return status(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("no such partition: {topic}-{partition}, and group '{group}' holds no offset for it"),
                    );
                }
                if held(key) && !gone.contains(key) {
                    gone.push(key.clone());
                }
                Status::ok()
            })
            .collect();
        let chunk = self.config.offsets_per_commit_max.max(1);
        let entries: Vec<Entry> = gone
            .chunks(chunk)
            .map(|part| Entry::OffsetsDeleted { group: group.to_string(), partitions: part.to_vec() })
            .collect();
        for entry in entries {
            self.apply(&entry);
            self.entries.push(entry);
        }
        Ok(statuses)
    }

    /// OffsetCommit: checked by [`GroupTable::check_commit`], applied and journaled.
    pub fn handle_commit(&mut self, who: &GroupMember, offsets: &[PartitionOffset]) -> Result<(), Status> {
        self.room_for(&who.group)?;
        self.check_offsets(offsets)?;
        self.room_for_offsets(&who.group, offsets)?;
        self.check_commit(who, false)?;
        let entry = Entry::OffsetsCommitted { group: who.group.clone(), offsets: offsets.to_vec() };
        self.apply(&entry);
        self.entries.push(entry);
        Ok(())
    }

    /// TxnOffsetCommit after the producer's transaction was checked: the offsets wait for the
    /// transaction's end.
    pub fn handle_txn_commit(
        &mut self,
        transactional_id: &str,
        who: &GroupMember,
        offsets: &[PartitionOffset],
    ) -> Result<(), Status> {
        self.room_for(&who.group)?;
        self.check_offsets(offsets)?;
        self.room_for_offsets(&who.group, offsets)?;
        self.check_commit(who, true)?;
        let entry = Entry::TxnOffsetsStaged {
            transactional_id: transactional_id.to_string(),
            group: who.group.clone(),
            offsets: offsets.to_vec(),
        };
        self.apply(&entry);
        self.entries.push(entry);
        Ok(())
    }

    /// OffsetFetch: each asked partition's committed offset (-1 if none), or every committed one.
    pub fn handle_fetch(
        &self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
        require_stable: bool,
    ) -> Vec<(PartitionOffset, Status)> {
        let g = self.groups.get(group);
        let pending = |key: &(String, i32)| {
            self.staged.values().any(|by_group| by_group.get(group).is_some_and(|o| o.contains_key(key)))
        };
        let keys: Vec<(String, i32)> = match partitions {
            Some(ps) => ps.to_vec(),
            None => g.map(|g| g.offsets.keys().cloned().collect()).unwrap_or_default(),
        };
        keys.into_iter()
            .map(|key| {
                let offset = g.and_then(|g| g.offsets.get(&key)).cloned().unwrap_or_else(|| PartitionOffset {
                    topic: key.0.clone(),
                    partition: key.1,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: None,
                });
                let s = if require_stable && pending(&key) {
                    status(
                        ErrorCode::UnstableOffsetCommit,
                        format!("a transaction holds uncommitted offsets for {}-{}; retry once it ends", key.0, key.1),
                    )
                } else {
                    Status::ok()
                };
                (offset, s)
            })
            .collect()
    }

    /// Expire members whose session lapsed and rebalances past their deadline (KIP-848 members
    /// too: fenced when their session lapses or they do not give up partitions in time).
    pub fn handle_tick(&mut self, now_ms: u64) {
        for (group, member_id) in self.consumer.handle_timeouts(now_ms) {
            tracing::info!(
                target: "epochfence::fencing",
                group = %group,
                member_id = %member_id,
                "consumer group member fenced: its session lapsed or it did not give up its partitions within its \
                 rebalance timeout"
            );
        }
        let names: Vec<String> = self.groups.keys().cloned().collect();
        for name in names {
            let Some(mut g) = self.groups.remove(&name) else { continue };
            g.pending.retain(|_, deadline| *deadline > now_ms);
            // A member waiting in its join does not expire (the rebalance deadline bounds it),
            // nor one waiting in SyncGroup for the leader's assignment (as in Kafka);
            // every other one does once its session lapses, in every state (after a
            // coordinator restart, a member that never comes back must not hold a rebalance).
            let preparing = g.phase == GroupPhase::PreparingRebalance;
            // A generation whose members have not all synced by its deadline (a leader that
            // never sends the assignment) loses those that did not, as Kafka's pending-sync
            // timeout does; the rest join again.
            let sync_due = g.phase == GroupPhase::CompletingRebalance && now_ms >= g.rebalance_deadline_ms;
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| (m.deadline_ms <= now_ms || sync_due) && !(preparing && m.joined) && !m.syncing)
                .map(|(id, _)| id.clone())
                .collect();
            if !expired.is_empty() {
                for id in &expired {
                    tracing::info!(group = %name, member_id = %id, generation = g.generation, "group member's session expired");
                    self.remove_member(&mut g, id, ErrorCode::UnknownMemberId, "its session expired".into());
                }
                self.prepare_rebalance(&mut g, now_ms);
                if g.members.is_empty() {
                    g.rebalance_deadline_ms = now_ms;
                }
            }
            let due = g.phase == GroupPhase::PreparingRebalance && now_ms >= g.rebalance_deadline_ms;
            if g.generation == 0 && g.members.is_empty() && g.pending.is_empty() && g.offsets.is_empty() {
                continue; // only lapsed first joins: nothing to keep
            }
            self.groups.insert(name.clone(), g);
            self.fill_group_names(&name);
            if due {
                self.complete_join(&name, now_ms);
            } else {
                self.maybe_complete_join(&name, now_ms);
            }
        }
    }

    /// Apply one entry: how decisions take effect, and how the journal is replayed. Also takes
    /// the producer table's entries: a transaction's end applies (commit) or drops (abort) the
    /// offsets it staged, and a new epoch's grant drops those of the transaction it aborted.
    pub fn apply(&mut self, entry: &Entry) {
        self.consumer.apply(entry);
        match entry {
            Entry::GroupGeneration(r) => {
                let g = self.groups.entry(r.group.clone()).or_insert_with(Group::new);
                g.idle_since_ms = None;
                g.journaled = Some(r.clone());
                g.generation = r.generation;
                g.protocol_type = r.protocol_type.clone();
                g.protocol = r.protocol.clone();
                g.leader = r.leader.clone();
                g.phase = if r.members.is_empty() {
                    GroupPhase::Empty
                } else if r.stable {
                    GroupPhase::Stable
                } else {
                    GroupPhase::CompletingRebalance
                };
                g.statics.clear();
                g.members = r
                    .members
                    .iter()
                    .map(|m| {
                        if let Some(i) = &m.instance_id {
                            g.statics.insert(i.clone(), m.member_id.clone());
                        }
                        let member = Member {
                            instance_id: m.instance_id.clone(),
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            session_timeout_ms: m.session_timeout_ms,
                            rebalance_timeout_ms: m.rebalance_timeout_ms,
                            protocols: vec![(r.protocol.clone(), m.metadata.clone())],
                            assignment: m.assignment.clone(),
                            deadline_ms: m.session_timeout_ms.max(0) as u64,
                            joined: false,
                            syncing: false,
                        };
                        (m.member_id.clone(), member)
                    })
                    .collect();
            }
            Entry::OffsetsCommitted { group, offsets } => {
                let g = self.groups.entry(group.clone()).or_insert_with(Group::new);
                g.idle_since_ms = None;
                for o in offsets {
                    if g.offsets.insert((o.topic.clone(), o.partition), o.clone()).is_none() {
                        self.offsets_total += 1;
                    }
                }
            }
            Entry::TxnOffsetsStaged { transactional_id, group, offsets } => {
                let staged = self.staged.entry(transactional_id.clone()).or_default().entry(group.clone()).or_default();
                for o in offsets {
                    if staged.insert((o.topic.clone(), o.partition), o.clone()).is_none() {
                        self.staged_total += 1;
                    }
                }
            }
            Entry::EndTxn { transactional_id, commit, .. } => {
                if let Some(by_group) = self.staged.remove(transactional_id) {
                    self.staged_total -= by_group.values().map(BTreeMap::len).sum::<usize>();
                    if *commit {
                        for (group, offsets) in by_group {
                            let g = self.groups.entry(group).or_insert_with(Group::new);
                            g.idle_since_ms = None;
                            for (key, o) in offsets {
                                if g.offsets.insert(key, o).is_none() {
                                    self.offsets_total += 1;
                                }
                            }
                        }
                    }
                }
            }
            Entry::Grant { transactional_id: Some(tid), .. } => {
                if let Some(by_group) = self.staged.remove(tid) {
                    self.staged_total -= by_group.values().map(BTreeMap::len).sum::<usize>();
                }
            }
            Entry::GroupsExpired { groups } => {
                for group in groups {
                    if let Some(g) = self.groups.remove(group) {
                        self.offsets_total -= g.offsets.len();
                    }
                }
            }
            Entry::GroupsDeleted { groups } => {
                for group in groups {
                    if let Some(g) = self.groups.remove(group) {
                        self.offsets_total -= g.offsets.len();
                    }
                    for by_group in self.staged.values_mut() {
                        if let Some(offsets) = by_group.remove(group) {
                            self.staged_total -= offsets.len();
                        }
                    }
                }
                self.staged.retain(|_, by_group| !by_group.is_empty());
            }
            Entry::OffsetsDeleted { group, partitions } => {
                if let Some(g) = self.groups.get_mut(group) {
                    for key in partitions {
                        if g.offsets.remove(key).is_some() {
                            self.offsets_total -= 1;
                        }
                    }
                }
                for by_group in self.staged.values_mut() {
                    if let Some(offsets) = by_group.get_mut(group) {
                        for key in partitions {
                            if offsets.remove(key).is_some() {
                                self.staged_total -= 1;
                            }
                        }
                        if offsets.is_empty() {
                            by_group.remove(group);
                        }
                    }
                }
                self.staged.retain(|_, by_group| !by_group.is_empty());
            }
            _ => {}
        }
    }

    /// Entries that rebuild every group, its offsets and the staged offsets: each group's last
    /// journaled generation (not its members mid-rebalance), and the offsets in records of at
    /// most `offsets_per_commit_max`, as a commit's.
    pub fn snapshot(&self) -> Vec<Entry> {
        let chunk = self.config.offsets_per_commit_max.max(1);
        let mut out = self.consumer.snapshot();
        for (name, g) in &self.groups {
            if let Some(record) = &g.journaled {
                out.push(Entry::GroupGeneration(record.clone()));
            }
            let offsets: Vec<OffsetRecord> = g.offsets.values().cloned().collect();
            for part in offsets.chunks(chunk) {
                out.push(Entry::OffsetsCommitted { group: name.clone(), offsets: part.to_vec() });
            }
        }
        for (tid, by_group) in &self.staged {
            for (group, offsets) in by_group {
                let offsets: Vec<OffsetRecord> = offsets.values().cloned().collect();
                for part in offsets.chunks(chunk) {
                    out.push(Entry::TxnOffsetsStaged {
                        transactional_id: tid.clone(),
                        group: group.clone(),
                        offsets: part.to_vec(),
                    });
                }
            }
        }
        out
    }

    /// Groups as they stand (`names` empty: all); a KIP-848 group's topics named by
    /// `topic_names` (topic id -> name).
    pub fn describe(&self, names: &[String], topic_names: &BTreeMap<u128, String>) -> Vec<GroupState> {
        let default = self.consumer.default_assignor();
        let consumer = |name: &str, cg: &ConsumerGroup| {
            let c = cg.describe(default, topic_names);
            GroupState {
                group: name.to_string(),
                state: cg.state_name().into(),
                protocol_type: "consumer".into(),
                protocol: c.assignor.clone(),
                generation: c.group_epoch,
                leader: String::new(),
                members: c
                    .members
                    .iter()
                    .map(|m| GroupMemberState {
                        member_id: m.member_id.clone(),
                        instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        metadata: Bytes::new(),
                        assignment: Bytes::new(),
                    })
                    .collect(),
                offsets: self.groups.get(name).map(|g| g.offsets.values().cloned().collect()).unwrap_or_default(),
                consumer: Some(c),
            }
        };
        let one = |name: &str, g: Option<&Group>| match (self.consumer.group(name), g) {
            (Some(cg), _) => consumer(name, cg),
            (None, None) => GroupState {
                group: name.to_string(),
                state: "Dead".into(),
                protocol_type: String::new(),
                protocol: String::new(),
                generation: -1,
                leader: String::new(),
                members: Vec::new(),
                offsets: Vec::new(),
                consumer: None,
            },
            (None, Some(g)) => GroupState {
                group: name.to_string(),
                state: g.phase.name().into(),
                protocol_type: g.protocol_type.clone(),
                protocol: g.protocol.clone(),
                generation: g.generation,
                leader: g.leader.clone(),
                members: g
                    .members
                    .iter()
                    .map(|(id, m)| GroupMemberState {
                        member_id: id.clone(),
                        instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        metadata: m.metadata(&g.protocol),
                        assignment: m.assignment.clone(),
                    })
                    .collect(),
                offsets: g.offsets.values().cloned().collect(),
                consumer: None,
            },
        };
        if names.is_empty() {
            let all: std::collections::BTreeSet<&String> = self.groups.keys().chain(self.consumer.names()).collect();
            all.into_iter().map(|n| one(n, self.groups.get(n))).collect()
        } else {
            names.iter().map(|n| one(n, self.groups.get(n))).collect()
        }
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;

    pub fn config() -> GroupConfig {
        GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() }
    }

    pub fn join_req(member_id: &str, instance: Option<&str>) -> JoinGroupRequest {
        JoinGroupRequest {
            group: "g".into(),
            member_id: member_id.into(),
            instance_id: instance.map(str::to_string),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
            require_known_member: false,
            client_id: "c".into(),
            client_host: String::new(),
        }
    }

    pub fn who(member_id: &str, generation: i32, instance: Option<&str>) -> GroupMember {
        GroupMember {
            group: "g".into(),
            generation,
            member_id: member_id.into(),
            instance_id: instance.map(str::to_string),
        }
    }

    pub fn offset(partition: i32, offset: i64) -> PartitionOffset {
        PartitionOffset { topic: "in".into(), partition, offset, leader_epoch: -1, metadata: None }
    }

    /// Join as a new member and complete the join (alone or with the others rejoining).
    pub fn join(t: &mut GroupTable, now: u64, instance: Option<&str>) -> String {
        let JoinDecision::Wait { member_id } = t.handle_join(now, &join_req("", instance)) else {
            panic!("a first join waits")
        };
        member_id
    }

    pub fn generation_of(t: &mut GroupTable, member: &str) -> Option<i32> {
        let (wakes, _) = t.take_effects();
        wakes.into_iter().rev().find_map(|w| match w {
            Wake::Join { member_id, response, .. } if member_id == member && response.status.is_ok() => {
                Some(response.generation)
            }
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::tests_support::*;

    #[test]
    fn a_member_left_behind_by_a_rebalance_cannot_commit_its_transactional_offsets() {
        let mut t = GroupTable::new(config(), 1);
        let a = join(&mut t, 0, None);
        assert_eq!(generation_of(&mut t, &a), Some(1));
        // A second member joins: a rebalance that a's rejoin completes, at generation 2.
        let b = join(&mut t, 10, None);
        let JoinDecision::Wait { .. } = t.handle_join(20, &join_req(&a, None)) else { panic!("rejoin waits") };
        assert_eq!(generation_of(&mut t, &b), Some(2));
        // The zombie's view (generation 1) is refused; the current one is accepted.
        let stale = t.handle_txn_commit("w", &who(&a, 1, None), &[offset(0, 5)]).unwrap_err();
        assert_eq!(stale.code, ErrorCode::IllegalGeneration, "{stale}");
        t.handle_txn_commit("w", &who(&b, 2, None), &[offset(0, 5)]).unwrap();
        // a's session lapses: it is no member at all any more.
        t.handle_heartbeat(30, &who(&b, 2, None));
        t.handle_tick(10_031);
        let gone = t.handle_txn_commit("w", &who(&a, 2, None), &[offset(0, 6)]).unwrap_err();
        assert_eq!(gone.code, ErrorCode::UnknownMemberId, "{gone}");
    }

    /// An anonymous commit (an assign() consumer's) to group `group`.
    fn commit_to(t: &mut GroupTable, group: &str, offsets: &[PartitionOffset]) -> Result<(), Status> {
        let who = GroupMember { group: group.into(), generation: -1, member_id: String::new(), instance_id: None };
        t.handle_commit(&who, offsets)
    }

    /// Issue 27, item 4: an empty group's offsets go after the retention without a commit; a
    /// group with members keeps them, and a commit restarts the clock.
    #[test]
    fn an_empty_group_is_forgotten_after_the_retention_and_a_member_keeps_it() {
        let mut t = GroupTable::new(GroupConfig { offsets_retention_ms: 1_000, ..config() }, 1);
        commit_to(&mut t, "idle", &[offset(0, 5)]).unwrap();
        let a = join(&mut t, 0, None);
        let _ = t.take_effects();
        assert!(t.handle_expiry(0).is_empty(), "the first sweep starts the clocks");
        assert!(t.handle_expiry(500).is_empty());
        commit_to(&mut t, "idle", &[offset(1, 6)]).unwrap();
        assert!(t.handle_expiry(1_000).is_empty(), "a commit restarts the clock");
        let entries = t.handle_expiry(2_000);
        assert_eq!(entries, vec![Entry::GroupsExpired { groups: vec!["idle".into()] }]);
        assert_eq!(t.handle_fetch("idle", Some(&[("in".into(), 0)]), false)[0].0.offset, -1, "forgotten");
        assert_eq!(t.counts().groups.0, 1, "g, with its member, stays");
        assert_eq!(t.counts().offsets.0, 0);
        assert!(t.describe(&["g".into()], &BTreeMap::new())[0].members.iter().any(|m| m.member_id == a));
        // A replay rebuilds the same groups.
        let mut replayed = GroupTable::new(config(), 2);
        for e in t.snapshot() {
            replayed.apply(&e);
        }
        assert_eq!(replayed.counts().groups.0, 1);
    }

    #[test]
    fn groups_and_offsets_beyond_their_caps_are_policy_violations() {
        let mut t = GroupTable::new(GroupConfig { groups_max: 2, group_offsets_max: 3, ..config() }, 1);
        commit_to(&mut t, "a", &[offset(0, 1), offset(1, 1)]).unwrap();
        commit_to(&mut t, "b", &[offset(0, 1)]).unwrap();
        let full = commit_to(&mut t, "c", &[offset(0, 1)]).unwrap_err();
        assert_eq!(full.code, ErrorCode::PolicyViolation);
        assert!(full.message.contains("groups_max 2"), "{full}");
        let JoinDecision::Answer(r) = t.handle_join(0, &JoinGroupRequest { group: "c".into(), ..join_req("", None) })
        else {
            panic!("a join of a new group over the cap is answered at once")
        };
        assert_eq!(r.status.code, ErrorCode::PolicyViolation);
        // Group a holds 2 offsets of 3: one more partition fits, two do not; known ones always do.
        let over = commit_to(&mut t, "a", &[offset(2, 1), offset(3, 1)]).unwrap_err();
        assert_eq!(over.code, ErrorCode::PolicyViolation);
        assert!(over.message.contains("group_offsets_max 3"), "{over}");
        commit_to(&mut t, "a", &[offset(0, 2), offset(2, 1)]).unwrap();
        commit_to(&mut t, "a", &[offset(0, 3), offset(1, 3), offset(2, 3)]).unwrap();
        let c = t.counts();
        assert_eq!((c.groups, c.fullest_group_offsets, c.offsets.0), ((2, 2), (3, 3), 4));
        // And all groups together: b may not grow past offsets_max 4 either.
        let mut t = GroupTable::new(GroupConfig { offsets_max: 2, ..config() }, 1);
        commit_to(&mut t, "a", &[offset(0, 1)]).unwrap();
        commit_to(&mut t, "b", &[offset(0, 1)]).unwrap();
        let over = commit_to(&mut t, "b", &[offset(1, 1)]).unwrap_err();
        assert!(over.code == ErrorCode::PolicyViolation && over.message.contains("offsets_max 2"), "{over}");
        // Staged offsets count as held: an open transaction cannot pile up partitions either.
        let mut t = GroupTable::new(GroupConfig { offsets_max: 2, ..config() }, 1);
        let anonymous = GroupMember { group: "a".into(), generation: -1, member_id: String::new(), instance_id: None };
        t.handle_txn_commit("w", &anonymous, &[offset(0, 1), offset(1, 1)]).unwrap();
        let over = t.handle_txn_commit("w", &anonymous, &[offset(2, 1)]).unwrap_err();
        assert_eq!(over.code, ErrorCode::PolicyViolation);
        assert_eq!(t.counts().offsets, (2, 2));
    }

    /// The consumer protocol's Subscription (version 0) of `topics`.
    fn subscription(topics: &[&str]) -> Bytes {
        use bytes::BufMut;
        let mut b = bytes::BytesMut::new();
        b.put_i16(0);
        b.put_i32(topics.len() as i32);
        for t in topics {
            b.put_i16(t.len() as i16);
            b.put_slice(t.as_bytes());
        }
        b.put_i32(-1); // no user data
        b.freeze()
    }

    fn end_txn(tid: &str, commit: bool) -> Entry {
        Entry::EndTxn {
            transactional_id: tid.into(),
            producer_id: 1,
            epoch: 1,
            prev: (1, 0),
            commit,
            timed_out: false,
            expired: false,
            markers: vec![],
        }
    }

    /// Issue 32, item 3: DeleteGroups deletes only a group without members, with its offsets
    /// and those open transactions staged for it; a replay of the journal agrees; a member of
    /// the deleted group is no member of one created again under the name.
    #[test]
    fn a_group_is_deleted_only_without_members_and_takes_its_offsets_with_it() {
        let mut t = GroupTable::new(config(), 1);
        let mut journal = Vec::new();
        let a = join(&mut t, 0, None);
        commit_to(&mut t, "idle", &[offset(0, 5), offset(1, 7)]).unwrap();
        let anonymous =
            GroupMember { group: "staged".into(), generation: -1, member_id: String::new(), instance_id: None };
        t.handle_txn_commit("w", &anonymous, &[offset(0, 9)]).unwrap();
        journal.extend(t.take_effects().1);
        assert_eq!(t.counts().offsets.0, 3);
        let names: Vec<String> = ["g", "idle", "staged", "idle", "none", ""].iter().map(|n| n.to_string()).collect();
        let codes: Vec<ErrorCode> = t.handle_delete_groups(&names).iter().map(|s| s.code).collect();
        assert_eq!(
            codes,
            [
                ErrorCode::NonEmptyGroup,
                ErrorCode::None,
                ErrorCode::None,
                ErrorCode::GroupIdNotFound,
                ErrorCode::GroupIdNotFound,
                ErrorCode::InvalidGroupId
            ]
        );
        let (_, entries) = t.take_effects();
        assert_eq!(entries, vec![Entry::GroupsDeleted { groups: vec!["idle".into(), "staged".into()] }]);
        journal.extend(entries);
        assert_eq!(t.counts().offsets.0, 0, "committed and staged offsets went with their groups");
        assert_eq!(t.handle_fetch("idle", None, false), vec![]);
        // The transaction that staged offsets for the deleted group commits: nothing for it.
        t.apply(&end_txn("w", true));
        journal.push(end_txn("w", true));
        assert_eq!(t.handle_fetch("staged", Some(&[("in".into(), 0)]), false)[0].0.offset, -1);
        assert_eq!(t.describe(&["idle".into()], &BTreeMap::new())[0].state, "Dead");
        // The journal replayed: the same groups.
        let mut replayed = GroupTable::new(config(), 2);
        journal.iter().for_each(|e| replayed.apply(e));
        assert_eq!(replayed.counts().groups.0, 1);
        assert_eq!(replayed.counts().offsets.0, 0);
        // Once its member left, g is deleted; a group created again under the name does not
        // know the old member, whatever generation it names.
        t.handle_leave(1, "g", &[(a.clone(), None)]);
        let _ = t.take_effects();
        assert_eq!(t.handle_delete_groups(&["g".into()])[0].code, ErrorCode::None);
        let b = join(&mut t, 2, None);
        assert_eq!(generation_of(&mut t, &b), Some(1));
        let zombie = t.handle_txn_commit("w2", &who(&a, 1, None), &[offset(0, 1)]).unwrap_err();
        assert_eq!(zombie.code, ErrorCode::UnknownMemberId, "{zombie}");
        t.handle_txn_commit("w2", &who(&b, 1, None), &[offset(0, 1)]).unwrap();
    }

    /// Issue 32, item 3: OffsetDelete keeps the offsets of topics the members subscribe to,
    /// deletes the others, and refuses a group whose subscriptions it cannot read.
    #[test]
    fn offset_delete_keeps_the_offsets_of_subscribed_topics() {
        let mut t = GroupTable::new(config(), 1);
        let mut req = join_req("", None);
        req.protocols = vec![("range".into(), subscription(&["in"]))];
        let JoinDecision::Wait { member_id: a } = t.handle_join(0, &req) else { panic!("a first join waits") };
        let _ = t.take_effects();
        let _ = t.handle_sync(1, &SyncGroupRequest { member: who(&a, 1, None), assignments: vec![] });
        let out = |p| PartitionOffset { topic: "out".into(), ..offset(p, 3) };
        t.handle_commit(&who(&a, 1, None), &[offset(0, 5), out(0), out(1)]).unwrap();
        let _ = t.take_effects();
        let asked: Vec<(String, i32)> =
            vec![("in".into(), 0), ("out".into(), 0), ("out".into(), 1), ("gone".into(), 0), ("out".into(), 2)];
        let codes: Vec<ErrorCode> = t
            .handle_offset_delete("g", &asked, &[true, true, false, false, true])
            .unwrap()
            .iter()
            .map(|s| s.code)
            .collect();
        assert_eq!(
            codes,
            [
                ErrorCode::GroupSubscribedToTopic,
                ErrorCode::None,
                ErrorCode::None, // a partition that is gone, whose offset the group held
                ErrorCode::UnknownTopicOrPartition,
                ErrorCode::None, // held none: nothing to delete
            ]
        );
        let (_, entries) = t.take_effects();
        assert_eq!(
            entries,
            vec![Entry::OffsetsDeleted { group: "g".into(), partitions: vec![("out".into(), 0), ("out".into(), 1)] }]
        );
        let left: Vec<(String, i64)> =
            t.handle_fetch("g", None, false).into_iter().map(|(o, _)| (o.topic, o.offset)).collect();
        assert_eq!(left, [("in".to_string(), 5)]);
        assert_eq!(t.counts().offsets.0, 1);
        // Unknown and unreadable groups.
        let missing = t.handle_offset_delete("none", &asked, &[true; 5]).unwrap_err();
        assert_eq!(missing.code, ErrorCode::GroupIdNotFound);
        let mut other = GroupTable::new(config(), 1);
        let mut req = join_req("", None);
        req.protocol_type = "connect".into();
        let JoinDecision::Wait { .. } = other.handle_join(0, &req) else { panic!() };
        let opaque = other.handle_offset_delete("g", &asked, &[true; 5]).unwrap_err();
        assert_eq!(opaque.code, ErrorCode::NonEmptyGroup, "{opaque}");
        // An offset an open transaction staged goes too: its commit brings nothing back.
        let anonymous = GroupMember { group: "g".into(), generation: -1, member_id: String::new(), instance_id: None };
        t.handle_txn_commit("w", &anonymous, &[out(7)]).unwrap();
        let _ = t.take_effects();
        assert!(t.handle_offset_delete("g", &[("out".into(), 7)], &[true]).unwrap()[0].is_ok());
        assert_eq!(t.counts().offsets.0, 1, "the staged offset no longer held");
        t.apply(&end_txn("w", true));
        assert_eq!(t.handle_fetch("g", Some(&[("out".into(), 7)]), false)[0].0.offset, -1);
        // Once the member left, every offset may go.
        t.handle_leave(2, "g", &[(a, None)]);
        let codes = t.handle_offset_delete("g", &[("in".into(), 0)], &[true]).unwrap();
        assert!(codes[0].is_ok(), "{}", codes[0]);
        assert_eq!(t.counts().offsets.0, 0);
    }

    #[test]
    fn without_generation_fencing_the_zombie_commits() {
        let mut t = GroupTable::new(GroupConfig { generation_fencing: false, ..config() }, 1);
        let a = join(&mut t, 0, None);
        let _ = t.take_effects();
        t.handle_txn_commit("w", &who(&a, 0, None), &[offset(0, 5)]).expect("the mutation lets it through");
    }

    #[test]
    fn a_follower_joining_again_unchanged_keeps_the_generation() {
        let mut t = GroupTable::new(config(), 1);
        let a = join(&mut t, 0, None);
        let b = join(&mut t, 1, None);
        let JoinDecision::Wait { .. } = t.handle_join(2, &join_req(&a, None)) else { panic!() };
        let generation = generation_of(&mut t, &b).unwrap();
        let sync = |member: &str, assignments| SyncGroupRequest { member: who(member, generation, None), assignments };
        let _ = t.handle_sync(3, &sync(&a, vec![]));
        let JoinDecision::Answer(again) = t.handle_join(4, &join_req(&b, None)) else {
            panic!("answered at once, with no rebalance")
        };
        assert_eq!((again.generation, again.status.code), (generation, ErrorCode::None));
        assert_eq!(t.describe(&[], &BTreeMap::new())[0].state, "Stable");
        // Changed protocols, or the leader joining again, do rebalance.
        let mut changed = join_req(&b, None);
        changed.protocols = vec![("roundrobin".into(), Bytes::new()), ("range".into(), Bytes::new())];
        assert!(matches!(t.handle_join(5, &changed), JoinDecision::Wait { .. }));
        assert_eq!(t.describe(&[], &BTreeMap::new())[0].state, "PreparingRebalance");
    }

    #[test]
    fn a_snapshot_mid_rebalance_records_the_generation_members_were_told() {
        let mut t = GroupTable::new(config(), 1);
        let a = join(&mut t, 0, None);
        let _ = t.take_effects();
        let _ = t.handle_sync(1, &SyncGroupRequest { member: who(&a, 1, None), assignments: vec![] });
        let _c = join(&mut t, 2, None); // a rebalance under way: c is in memory, in no generation
        let mut back = GroupTable::new(config(), 2);
        t.snapshot().iter().for_each(|e| back.apply(e));
        let d = &back.describe(&[], &BTreeMap::new())[0];
        assert_eq!(d.generation, 1);
        assert_eq!(d.members.iter().map(|m| m.member_id.clone()).collect::<Vec<_>>(), [a]);
    }

    #[test]
    fn a_static_member_whose_session_lapsed_is_unknown_not_fenced() {
        let mut t = GroupTable::new(config(), 1);
        let m = join(&mut t, 0, Some("i"));
        let _ = t.take_effects();
        t.handle_tick(20_000);
        let s = t.handle_heartbeat(20_001, &who(&m, 1, Some("i")));
        assert_eq!(s.code, ErrorCode::UnknownMemberId, "it may join again: {s}");
    }

    #[test]
    fn a_refused_new_instance_leaves_the_static_member_in_place() {
        let mut t = GroupTable::new(config(), 1);
        let old = join(&mut t, 0, Some("i"));
        let _ = t.take_effects();
        let mut other = join_req("", Some("i"));
        other.protocols = vec![("sticky".into(), Bytes::new())];
        let JoinDecision::Answer(a) = t.handle_join(1, &other) else { panic!("refused") };
        assert_eq!(a.status.code, ErrorCode::InconsistentGroupProtocol);
        assert_eq!(t.handle_heartbeat(2, &who(&old, 1, Some("i"))).code, ErrorCode::None);
    }

    #[test]
    fn offset_commits_over_the_limits_are_refused() {
        let mut t = GroupTable::new(config(), 1);
        let mut big = offset(0, 1);
        big.metadata = Some("x".repeat(4_097));
        assert_eq!(t.handle_commit(&who("", -1, None), &[big]).unwrap_err().code, ErrorCode::OffsetMetadataTooLarge);
        let many: Vec<PartitionOffset> = (0..1_001).map(|p| offset(p, 1)).collect();
        assert_eq!(t.handle_commit(&who("", -1, None), &many).unwrap_err().code, ErrorCode::MessageTooLarge);
        assert!(t.describe(&[], &BTreeMap::new()).is_empty(), "nothing was committed");
    }

    #[test]
    fn a_leader_that_never_syncs_is_removed_at_the_rebalance_deadline() {
        let mut t = GroupTable::new(config(), 1);
        let a = join(&mut t, 0, None);
        let b = join(&mut t, 1, None);
        let JoinDecision::Wait { .. } = t.handle_join(2, &join_req(&a, None)) else { panic!() };
        let generation = generation_of(&mut t, &b).unwrap();
        let leader = if t.describe(&[], &BTreeMap::new())[0].leader == a { a.clone() } else { b.clone() };
        let follower = if leader == a { b.clone() } else { a.clone() };
        let SyncDecision::Wait =
            t.handle_sync(3, &SyncGroupRequest { member: who(&follower, generation, None), assignments: vec![] })
        else {
            panic!("the follower waits for the leader")
        };
        // The leader heartbeats (its session holds) but never syncs.
        for now in (10..30_000).step_by(5_000) {
            t.handle_heartbeat(now, &who(&leader, generation, None));
            t.handle_tick(now);
        }
        let _ = t.take_effects();
        t.handle_heartbeat(30_002, &who(&leader, generation, None));
        t.handle_tick(30_003);
        let (wakes, _) = t.take_effects();
        let woken = wakes.iter().any(|w| {
            matches!(w, Wake::Sync { member_id, response, .. }
                if *member_id == follower && response.status.code == ErrorCode::RebalanceInProgress)
        });
        assert!(woken, "the follower is told to join again: {wakes:?}");
        let members: Vec<String> =
            t.describe(&[], &BTreeMap::new())[0].members.iter().map(|m| m.member_id.clone()).collect();
        assert_eq!(members, [follower], "the leader that never synced is out");
    }

    #[test]
    fn a_refused_first_join_leaves_no_group() {
        let mut t = GroupTable::new(config(), 1);
        let mut r = join_req("", None);
        r.session_timeout_ms = 1;
        assert!(matches!(t.handle_join(0, &r), JoinDecision::Answer(_)));
        assert!(t.describe(&[], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_replaced_static_member_is_fenced() {
        let mut t = GroupTable::new(config(), 1);
        let old = join(&mut t, 0, Some("worker-1"));
        assert_eq!(generation_of(&mut t, &old), Some(1));
        let new = join(&mut t, 5, Some("worker-1"));
        assert_ne!(old, new);
        let s = t.handle_heartbeat(6, &who(&old, 1, Some("worker-1")));
        assert_eq!(s.code, ErrorCode::FencedInstanceId, "{s}");
        let JoinDecision::Answer(a) = t.handle_join(7, &join_req(&old, Some("worker-1"))) else { panic!() };
        assert_eq!(a.status.code, ErrorCode::FencedInstanceId);
        let c = t.handle_commit(&who(&old, 1, Some("worker-1")), &[offset(0, 1)]).unwrap_err();
        assert_eq!(c.code, ErrorCode::FencedInstanceId);
    }

    #[test]
    fn staged_offsets_appear_at_commit_and_vanish_at_abort() {
        let mut t = GroupTable::new(config(), 1);
        t.handle_txn_commit("w", &who("", -1, None), &[offset(0, 7)]).unwrap();
        let fetched = t.handle_fetch("g", Some(&[("in".into(), 0)]), true);
        assert_eq!(fetched[0].0.offset, -1, "not visible before the commit");
        assert_eq!(fetched[0].1.code, ErrorCode::UnstableOffsetCommit);
        let end = |commit| Entry::EndTxn {
            transactional_id: "w".into(),
            producer_id: 1,
            epoch: 0,
            prev: (1, 0),
            commit,
            timed_out: false,
            expired: false,
            markers: vec![],
        };
        t.apply(&end(true));
        let fetched = t.handle_fetch("g", None, true);
        assert_eq!((fetched[0].0.offset, fetched[0].1.code), (7, ErrorCode::None));
        t.handle_txn_commit("w", &who("", -1, None), &[offset(0, 9)]).unwrap();
        t.apply(&end(false));
        assert_eq!(t.handle_fetch("g", None, false)[0].0.offset, 7, "the abort dropped 9");
        // A new epoch's grant drops what an open transaction staged.
        t.handle_txn_commit("w", &who("", -1, None), &[offset(0, 11)]).unwrap();
        t.apply(&Entry::Grant {
            transactional_id: Some("w".into()),
            producer_id: 1,
            epoch: 1,
            requested_by: None,
            transaction_timeout_ms: 60_000,
            fence: vec![],
        });
        t.apply(&end(true));
        assert_eq!(t.handle_fetch("g", None, false)[0].0.offset, 7);
    }

    #[test]
    fn a_replay_keeps_generations_members_and_offsets() {
        let mut t = GroupTable::new(config(), 1);
        let a = join(&mut t, 0, Some("i"));
        let _ = t.take_effects();
        let SyncDecision::Wait = t.handle_sync(
            1,
            &SyncGroupRequest {
                member: who(&a, 1, Some("i")),
                assignments: vec![(a.clone(), Bytes::from_static(b"all"))],
            },
        ) else {
            panic!("the leader's sync is answered as a wake")
        };
        t.handle_commit(&who(&a, 1, Some("i")), &[offset(2, 42)]).unwrap();
        let (_, journal) = t.take_effects();
        let mut back = GroupTable::new(config(), 2);
        journal.iter().for_each(|e| back.apply(e));
        back.restart_clocks(100);
        assert_eq!(back.handle_heartbeat(101, &who(&a, 1, Some("i"))).code, ErrorCode::None);
        assert_eq!(back.handle_fetch("g", None, false)[0].0.offset, 42);
        let d = &back.describe(&[], &BTreeMap::new())[0];
        assert_eq!((d.state.as_str(), d.generation), ("Stable", 1));
        // The snapshot rebuilds the same.
        let mut again = GroupTable::new(config(), 3);
        back.snapshot().iter().for_each(|e| again.apply(e));
        assert_eq!(again.describe(&[], &BTreeMap::new()), back.describe(&[], &BTreeMap::new()));
        // A member id handed out after the restart is new.
        let b = join(&mut back, 200, None);
        assert_ne!(a, b);
    }

    #[test]
    fn a_standalone_commit_needs_a_group_without_members() {
        let mut t = GroupTable::new(config(), 1);
        t.handle_commit(&who("", -1, None), &[offset(0, 3)]).unwrap();
        let _a = join(&mut t, 0, None);
        let s = t.handle_commit(&who("", -1, None), &[offset(0, 4)]).unwrap_err();
        assert_eq!(s.code, ErrorCode::UnknownMemberId);
    }

    #[test]
    fn session_timeouts_outside_the_bounds_are_refused() {
        let mut t = GroupTable::new(config(), 1);
        let mut r = join_req("", None);
        r.session_timeout_ms = 5_999;
        let JoinDecision::Answer(a) = t.handle_join(0, &r) else { panic!() };
        assert_eq!(a.status.code, ErrorCode::InvalidSessionTimeout);
        r.session_timeout_ms = 1_800_001;
        let JoinDecision::Answer(a) = t.handle_join(0, &r) else { panic!() };
        assert_eq!(a.status.code, ErrorCode::InvalidSessionTimeout);
    }

    #[test]
    fn a_first_join_of_a_new_client_gets_a_member_id_to_join_with() {
        let mut t = GroupTable::new(config(), 1);
        let mut r = join_req("", None);
        r.require_known_member = true;
        let JoinDecision::Answer(a) = t.handle_join(0, &r) else { panic!() };
        assert_eq!(a.status.code, ErrorCode::MemberIdRequired);
        r.member_id = a.member_id.clone();
        assert_eq!(t.handle_join(1, &r), JoinDecision::Wait { member_id: a.member_id.clone() });
        assert_eq!(generation_of(&mut t, &a.member_id), Some(1));
    }
}

#[cfg(test)]
mod restart_tests {
    use super::tests_support::*;
    use super::*;

    #[test]
    fn a_member_that_never_returns_after_a_restart_does_not_hold_the_rebalance() {
        let mut t = GroupTable::new(GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() }, 1);
        let gone = join(&mut t, 0, None);
        let (_, journal) = t.take_effects();
        let mut back = GroupTable::new(GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() }, 2);
        journal.iter().for_each(|e| back.apply(e));
        back.restart_clocks(0);
        let fresh = join(&mut back, 100, None);
        assert_eq!(generation_of(&mut back, &fresh), None, "waits for the member it knew");
        back.handle_tick(10_001);
        assert_eq!(generation_of(&mut back, &fresh), Some(2), "{gone} expired and the join completed");
    }

    fn topics() -> Topics {
        [("in".to_string(), (7u128, 4))].into_iter().collect()
    }

    /// A KIP-848 heartbeat to group "g".
    fn beat(member: &str, epoch: i32, owned: Option<Vec<(u128, i32)>>) -> Heartbeat {
        let joining = epoch == 0;
        Heartbeat {
            group: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if joining { 30_000 } else { -1 },
            topic_names: joining.then(|| vec!["in".to_string()]),
            owned: if joining { Some(Vec::new()) } else { owned },
            ..Heartbeat::default()
        }
    }

    fn replayed(entries: &[Entry]) -> GroupTable {
        let mut back = GroupTable::new(config(), 2);
        for e in entries {
            back.apply(&Entry::decode(e.encode()).expect("decodes"));
        }
        back.restart_clocks(0);
        back
    }

    #[test]
    fn a_group_id_is_either_classic_or_kip848_and_converts_only_when_empty() {
        let mut t = GroupTable::new(config(), 1);
        // A KIP-848 member in "g": a classic join is INCONSISTENT_GROUP_PROTOCOL.
        let a = t.handle_consumer_heartbeat(0, &beat("a", 0, None), &topics()).unwrap();
        assert_eq!(a.member_epoch, 1);
        let JoinDecision::Answer(refused) = t.handle_join(1, &join_req("", None)) else { panic!("answered") };
        assert_eq!(refused.status.code, ErrorCode::InconsistentGroupProtocol, "{}", refused.status);
        // Once it left, the classic join converts the group (journaled), its offsets kept.
        t.handle_commit(&who("a", 1, None), &[offset(0, 3)]).unwrap();
        t.handle_consumer_heartbeat(2, &beat("a", -1, None), &topics()).unwrap();
        t.take_effects();
        let m = join(&mut t, 3, None);
        let (_, entries) = t.take_effects();
        assert!(entries.contains(&Entry::ConsumerGroupsRemoved { groups: vec!["g".into()] }), "{entries:?}");
        assert!(t.consumer_groups().group("g").is_none());
        assert_eq!(t.handle_fetch("g", None, false)[0].0.offset, 3, "offsets kept");
        // A classic group with a member: a KIP-848 join is GROUP_ID_NOT_FOUND (no online
        // migration), and nothing of it is left behind.
        let refused = t.handle_consumer_heartbeat(4, &beat("b", 0, None), &topics()).unwrap_err();
        assert_eq!(refused.code, ErrorCode::GroupIdNotFound, "{refused}");
        assert!(t.consumer_groups().group("g").is_none());
        assert!(!t.has_effects(), "a refused join journals nothing");
        // Epochs only grow across the types: the classic generation starts past the KIP-848
        // group's epoch (2: a's join and leave), the next KIP-848 epoch past that generation.
        let classic = t.describe(&["g".into()], &BTreeMap::new())[0].generation;
        assert!(classic > 2, "generation {classic}");
        // Once the classic member left, the KIP-848 join converts it back.
        t.handle_leave(5, "g", &[(m, None)]);
        let b = t.handle_consumer_heartbeat(6, &beat("b", 0, None), &topics()).unwrap();
        assert_eq!(b.assignment.map(|a| a.len()), Some(4), "every partition to the only member");
        assert!(b.member_epoch > classic, "epoch {} after generation {classic}", b.member_epoch);
        assert_eq!(t.describe(&["g".into()], &BTreeMap::new())[0].protocol_type, "consumer");
    }

    #[test]
    fn kip848_epochs_are_journaled_and_a_replay_keeps_fencing_the_old_epoch() {
        let mut t = GroupTable::new(config(), 1);
        let a = t.handle_consumer_heartbeat(0, &beat("a", 0, None), &topics()).unwrap();
        let (_, joined) = t.take_effects();
        assert!(matches!(joined.as_slice(), [Entry::ConsumerGroup(r)] if r.group_epoch == 1), "{joined:?}");
        // A steady heartbeat changes nothing the journal holds.
        let owned: Vec<(u128, i32)> = a.assignment.clone().unwrap().into_iter().collect();
        t.handle_consumer_heartbeat(10, &beat("a", 1, Some(owned.clone())), &topics()).unwrap();
        assert!(!t.has_effects(), "nothing to journal");
        // b joins: a must give up two partitions, and keeps epoch 1 while it does.
        t.handle_consumer_heartbeat(20, &beat("b", 0, None), &topics()).unwrap();
        let revoke = t.handle_consumer_heartbeat(30, &beat("a", 1, Some(owned.clone())), &topics()).unwrap();
        assert_eq!((revoke.member_epoch, revoke.assignment.as_ref().map(|a| a.len())), (1, Some(2)));
        let kept: Vec<(u128, i32)> = revoke.assignment.unwrap().into_iter().collect();
        let acked = t.handle_consumer_heartbeat(40, &beat("a", 1, Some(kept)), &topics()).unwrap();
        assert_eq!(acked.member_epoch, 2, "the new epoch once the revocation is acknowledged");
        let (_, entries) = t.take_effects();
        let mut all = joined.clone();
        all.extend(entries);
        // The coordinator restarts from its journal: the zombie's epoch stays fenced, its
        // commits stale, and the current member's epoch and partitions hold.
        let mut back = replayed(&all);
        let stale = back.handle_consumer_heartbeat(50, &beat("a", 3, None), &topics()).unwrap_err();
        assert_eq!(stale.code, ErrorCode::FencedMemberEpoch, "{stale}");
        let commit = back.handle_commit(&who("a", 1, None), &[offset(0, 1)]).unwrap_err();
        assert_eq!(commit.code, ErrorCode::StaleMemberEpoch, "{commit}");
        let txn = back.handle_txn_commit("w", &who("a", 1, None), &[offset(0, 1)]).unwrap_err();
        assert_eq!(txn.code, ErrorCode::IllegalGeneration, "{txn}");
        back.handle_commit(&who("a", 2, None), &[offset(0, 1)]).unwrap();
        assert_eq!(back.describe(&[], &BTreeMap::new()), {
            let mut d = t.describe(&[], &BTreeMap::new());
            d[0].offsets = back.describe(&[], &BTreeMap::new())[0].offsets.clone();
            d
        });
        // A snapshot rebuilds the same groups.
        let again = replayed(&back.snapshot());
        assert_eq!(again.describe(&[], &BTreeMap::new()), back.describe(&[], &BTreeMap::new()));
        // The sessions restart at the replay: a member never heard from again is fenced after
        // the session timeout, journaled.
        back.take_effects();
        back.handle_tick(config().consumer.session_timeout_ms + 1);
        let (_, fenced) = back.take_effects();
        assert!(matches!(fenced.as_slice(), [Entry::ConsumerGroup(r)] if r.members.is_empty()), "{fenced:?}");
    }

    #[test]
    fn an_empty_kip848_group_that_never_committed_expires_and_one_with_members_never_does() {
        let retention = config().offsets_retention_ms;
        let mut t = GroupTable::new(config(), 1);
        t.handle_consumer_heartbeat(0, &beat("a", 0, None), &topics()).unwrap();
        t.handle_tick(1);
        assert!(t.handle_expiry(2).is_empty());
        assert!(t.handle_expiry(retention + 10).is_empty(), "a member keeps it (its session is not ticked here)");
        t.handle_consumer_heartbeat(3, &beat("a", -1, None), &topics()).unwrap();
        assert_eq!(t.counts().groups.0, 1, "held while empty");
        assert!(t.handle_expiry(4).is_empty(), "its idle clock starts");
        let expired = t.handle_expiry(retention + 4);
        assert_eq!(expired, [Entry::GroupsExpired { groups: vec!["g".into()] }]);
        assert!(t.consumer_groups().group("g").is_none());
        assert_eq!(t.counts().groups.0, 0);
    }

    #[test]
    fn without_generation_fencing_a_stale_member_epoch_commits() {
        let mut t = GroupTable::new(GroupConfig { generation_fencing: false, ..config() }, 1);
        t.handle_consumer_heartbeat(0, &beat("a", 0, None), &topics()).unwrap();
        t.handle_commit(&who("a", 7, None), &[offset(0, 1)]).unwrap();
        t.handle_txn_commit("w", &who("a", 0, None), &[offset(0, 1)]).unwrap();
        // Heartbeats keep their checks.
        let beat_err = t.handle_consumer_heartbeat(1, &beat("a", 7, None), &topics()).unwrap_err();
        assert_eq!(beat_err.code, ErrorCode::FencedMemberEpoch);
    }
}
