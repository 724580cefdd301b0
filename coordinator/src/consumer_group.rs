//! KIP-848 consumer groups: the rules, without I/O.
//!
//! The coordinator assigns the partitions itself and every member carries a *member epoch*: a
//! member that missed a rebalance is fenced by it. These are the rules Kafka 4's group
//! coordinator follows (`GroupMetadataManager`, `CurrentAssignmentBuilder`), as plain types that
//! take `now` and return decisions. [`crate::groups::GroupTable`] holds them beside the classic
//! groups (one type per group id) and the offsets; every change a heartbeat or a timeout makes
//! is an [`Entry::ConsumerGroup`] record of the whole group, journaled before the answer leaves.
//!
//! - The **group epoch** rises on every change the assignment depends on: a member joining,
//!   leaving or fenced, a subscription (compared as sets) or server assignor changed, the
//!   partitions of a subscribed topic changed.
//! - When the group epoch is past the **assignment epoch**, the group's assignor (`uniform` or
//!   `range`, both sticky; the one most members name, else the first configured) computes each
//!   member's *target*, and the assignment epoch becomes the group epoch.
//! - A member reconciles towards its target at its heartbeats, **revocation before assignment**:
//!   while it owns partitions outside its target it keeps its epoch and is told to give them up
//!   (it may still commit for them); once its heartbeat no longer lists them it moves to the
//!   assignment epoch and gets the partitions of its target that no other member owns; those
//!   still owned elsewhere follow at a later heartbeat, once released. So a partition is never
//!   handed to a member while another still owns it.
//! - A member that does not revoke within its rebalance timeout, or whose session lapses, is
//!   fenced: removed, its partitions free, the group epoch up; its next heartbeat is answered
//!   UNKNOWN_MEMBER_ID (it rejoins at epoch 0).
//! - Static members (`group.instance.id`): leaving with epoch -2 keeps the member, and its
//!   partitions, until its session lapses; a new member joining with the same instance id takes
//!   its place and its assignment. An instance id held by a live member is
//!   UNRELEASED_INSTANCE_ID; a heartbeat naming an instance id with another member's id
//!   FENCED_INSTANCE_ID.
//! - Offset commits carry the member epoch: STALE_MEMBER_EPOCH (OffsetCommit) or
//!   ILLEGAL_GENERATION (TxnOffsetCommit) unless it is the member's current epoch.

use std::collections::{BTreeMap, BTreeSet};

use protocol::{ErrorCode, Status};

use crate::entry::{ConsumerGroupRecord, ConsumerMemberRecord, Entry};

/// A partition, by topic id.
pub type TopicPartition = (u128, i32);

/// Kafka's `group.consumer.session.timeout.ms` default.
pub const SESSION_TIMEOUT_MS_DEFAULT: u64 = 45_000;
/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// Kafka's `group.consumer.max.size` default (unbounded there; a bound here).
pub const MAX_SIZE_DEFAULT: usize = 1_000;

/// Bytes of a member's ids, client id and host, subscription (names and pattern) and assignor
/// name (Kafka has no such bound; here a group is journaled as one record).
pub const MEMBER_BYTES_MAX_DEFAULT: usize = 64 * 1024;
/// Most bytes a group's journal record may take, under the journal's 16 MiB record bound with
/// room for the partitions its members own (20 bytes each).
pub const GROUP_RECORD_BYTES_MAX: usize = 12 * 1024 * 1024;

/// A member epoch that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// A static member's epoch while it is away (it keeps its partitions until its session lapses).
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// The server-side assignors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Assignor {
    /// Partitions spread evenly over the members, sticky.
    Uniform,
    /// Each topic's partitions in ranges over the members subscribed to it, sticky.
    Range,
}

impl Assignor {
    /// Its name (`group.remote.assignor`).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The assignor of `name`, if served.
    pub fn parse(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }
}

/// The limits and defaults of consumer groups (the coordinator's flags).
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// `--group-consumer-session-timeout-ms`: a member not heard from for this long is fenced.
    pub session_timeout_ms: u64,
    /// `--group-consumer-heartbeat-interval-ms`: what members are told to heartbeat at.
    pub heartbeat_interval_ms: u64,
    /// `--group-consumer-max-size`: members per group.
    pub max_size: usize,
    /// Bytes one member may bring (its ids, client id and host, subscription and assignor
    /// name); beyond, POLICY_VIOLATION.
    pub member_bytes_max: usize,
    /// The assignors served, the first the default.
    pub assignors: Vec<Assignor>,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS_DEFAULT,
            max_size: MAX_SIZE_DEFAULT,
            member_bytes_max: MEMBER_BYTES_MAX_DEFAULT,
            assignors: vec![Assignor::Uniform, Assignor::Range],
        }
    }
}

/// The cluster's topics as the group sees them: name -> (topic id, partition count).
pub type Topics = BTreeMap<String, (u128, i32)>;

/// A ConsumerGroupHeartbeat, as the wire carries it. `None` (and -1 for the timeout) means
/// unchanged.
pub use protocol::ConsumerHeartbeatRequest as Heartbeat;

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    /// The member id.
    pub member_id: String,
    /// Its epoch (-1 or -2 after a leave).
    pub member_epoch: i32,
    /// How often to heartbeat, in ms (never 0).
    pub heartbeat_interval_ms: i32,
    /// The member's whole assignment, when it changed or the request was a full one.
    pub assignment: Option<BTreeSet<TopicPartition>>,
}

/// Where a member's reconciliation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MemberState {
    /// It owns its target's partitions it may have (some may still be held elsewhere).
    Stable,
    /// It owns partitions outside its target, and must give them up by `deadline_ms`.
    Revoking { deadline_ms: u64 },
}

/// One member.
#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    rebalance_timeout_ms: u64,
    session_deadline_ms: u64,
    names: BTreeSet<String>,
    /// Its subscription's regular expression, compiled to match whole names.
    regex: Option<regex::Regex>,
    assignor: Option<Assignor>,
    /// Partitions it owns and may use.
    assigned: BTreeSet<TopicPartition>,
    /// Partitions it still owns but must give up.
    revoking: BTreeSet<TopicPartition>,
}

impl Member {
    fn owns(&self, tp: &TopicPartition) -> bool {
        self.assigned.contains(tp) || self.revoking.contains(tp)
    }

    /// Whether it subscribes to `name`.
    fn subscribes(&self, name: &str) -> bool {
        self.names.contains(name) || self.regex.as_ref().is_some_and(|re| re.is_match(name))
    }
}

/// `pattern` compiled to match whole names (RE2 semantics, as Kafka's RE2/J); `None` if it does
/// not compile.
fn full_match(pattern: &str) -> Option<regex::Regex> {
    regex::Regex::new(&format!("^(?:{pattern})$")).ok()
}

/// The bytes a heartbeat's member brings to its group's record.
fn member_bytes(h: &Heartbeat) -> usize {
    h.member_id.len()
        + h.instance_id.as_ref().map_or(0, String::len)
        + h.client_id.len()
        + h.client_host.len()
        + h.topic_names.iter().flatten().map(|n| n.len() + 2).sum::<usize>()
        + h.topic_regex.as_ref().map_or(0, String::len)
        + h.server_assignor.as_ref().map_or(0, String::len)
}

/// The pattern [`full_match`] was given.
fn unanchored(compiled: &str) -> &str {
    compiled.strip_prefix("^(?:").and_then(|s| s.strip_suffix(")$")).unwrap_or(compiled)
}

/// One consumer group (kept when empty, so its epochs only grow).
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    /// Each member's target at the assignment epoch.
    target: BTreeMap<String, BTreeSet<TopicPartition>>,
    /// The subscribed topics (name -> id, partitions) the target was computed from.
    topics_seen: Topics,
    /// What the journal holds of it.
    journaled: Option<ConsumerGroupRecord>,
    /// The encoded size of that record.
    journaled_bytes: usize,
    /// Since when it has had no members (for the expiry of empty groups), if the expiry sweep
    /// has seen it so.
    idle_since_ms: Option<u64>,
}

impl ConsumerGroup {
    /// The group epoch.
    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    /// Whether it has members (a static member away counts).
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    /// How many members it has.
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Whether a member subscribes to topic `name`.
    pub fn subscribes(&self, name: &str) -> bool {
        self.members.values().any(|m| m.subscribes(name))
    }

    /// Kafka's state name: `Empty`, `Reconciling` (a member is not yet at the assignment epoch,
    /// or gives up partitions) or `Stable`.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self
            .members
            .values()
            .any(|m| (m.epoch != self.assignment_epoch && m.epoch != LEAVE_STATIC_EPOCH) || !m.revoking.is_empty())
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// The assignor it uses (the one most members name, else `default`).
    pub fn assignor(&self, default: Assignor) -> Assignor {
        let mut named: BTreeMap<Assignor, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.assignor {
                *named.entry(a).or_default() += 1;
            }
        }
        named.iter().max_by_key(|(a, n)| (**n, std::cmp::Reverse(**a))).map_or(default, |(a, _)| *a)
    }

    /// It described, topics named by `names` (topic id -> name; an id no longer known shows
    /// with an empty name).
    pub fn describe(&self, default: Assignor, names: &BTreeMap<u128, String>) -> protocol::ConsumerGroupState {
        let by_topic = |set: &BTreeSet<TopicPartition>| -> Vec<protocol::TopicPartitions> {
            let mut out: Vec<protocol::TopicPartitions> = Vec::new();
            for (id, p) in set {
                match out.last_mut() {
                    Some(t) if t.topic_id == *id => t.partitions.push(*p),
                    _ => out.push(protocol::TopicPartitions {
                        topic_id: *id,
                        topic: names.get(id).cloned().unwrap_or_default(),
                        partitions: vec![*p],
                    }),
                }
            }
            out
        };
        protocol::ConsumerGroupState {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor(default).name().to_string(),
            members: self
                .members
                .iter()
                .map(|(id, m)| protocol::ConsumerMemberState {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topic_names: m.names.iter().cloned().collect(),
                    topic_regex: m.regex.as_ref().map(|r| unanchored(r.as_str()).to_string()),
                    assigned: by_topic(&m.assigned.union(&m.revoking).copied().collect()),
                    target: by_topic(self.target.get(id).unwrap_or(&BTreeSet::new())),
                })
                .collect(),
        }
    }

    /// Its journal record.
    fn record(&self, name: &str) -> ConsumerGroupRecord {
        let list = |s: &BTreeSet<TopicPartition>| s.iter().copied().collect::<Vec<_>>();
        ConsumerGroupRecord {
            group: name.to_string(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    rebalance_timeout_ms: m.rebalance_timeout_ms.min(i64::MAX as u64) as i64,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topic_names: m.names.iter().cloned().collect(),
                    topic_regex: m.regex.as_ref().map(|r| unanchored(r.as_str()).to_string()),
                    assignor: m.assignor.map(|a| a.name().to_string()),
                    assigned: list(&m.assigned),
                    revoking: list(&m.revoking),
                    target: self.target.get(id).map(list).unwrap_or_default(),
                })
                .collect(),
            topics_seen: self.topics_seen.iter().map(|(n, (id, count))| (n.clone(), *id, *count)).collect(),
        }
    }

    /// The group a record describes; deadlines start at `now_ms` (a replay restarts them
    /// with [`ConsumerGroups::restart_clocks`]).
    fn from_record(r: &ConsumerGroupRecord, session_ms: u64, now_ms: u64) -> ConsumerGroup {
        let mut g = ConsumerGroup {
            group_epoch: r.group_epoch,
            assignment_epoch: r.assignment_epoch,
            journaled: Some(r.clone()),
            journaled_bytes: Entry::ConsumerGroup(r.clone()).encode().len(),
            ..ConsumerGroup::default()
        };
        for m in &r.members {
            let revoking: BTreeSet<TopicPartition> = m.revoking.iter().copied().collect();
            let rebalance_timeout_ms = m.rebalance_timeout_ms.max(0) as u64;
            g.members.insert(
                m.member_id.clone(),
                Member {
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    state: if revoking.is_empty() {
                        MemberState::Stable
                    } else {
                        MemberState::Revoking { deadline_ms: now_ms + rebalance_timeout_ms }
                    },
                    rebalance_timeout_ms,
                    session_deadline_ms: now_ms + session_ms,
                    names: m.topic_names.iter().cloned().collect(),
                    // A pattern recorded compiled once; one that no longer compiles is none.
                    regex: m.topic_regex.as_deref().and_then(full_match),
                    assignor: m.assignor.as_deref().and_then(Assignor::parse),
                    assigned: m.assigned.iter().copied().collect(),
                    revoking,
                },
            );
            g.target.insert(m.member_id.clone(), m.target.iter().copied().collect());
        }
        g.topics_seen = r.topics_seen.iter().map(|(n, id, count)| (n.clone(), (*id, *count))).collect();
        g
    }

    /// Who owns `tp` (assigned or being revoked), if anyone.
    fn owner(&self, tp: &TopicPartition) -> Option<&str> {
        self.members.iter().find(|(_, m)| m.owns(tp)).map(|(id, _)| id.as_str())
    }

    /// The partitions each member owns (assigned or being revoked): no partition is in two
    /// (the invariant the tests check).
    pub fn owned(&self) -> BTreeMap<&str, BTreeSet<TopicPartition>> {
        self.members.iter().map(|(id, m)| (id.as_str(), m.assigned.union(&m.revoking).copied().collect())).collect()
    }

    /// The subscribed topics among `topics`.
    fn subscribed(&self, topics: &Topics) -> Topics {
        topics
            .iter()
            .filter(|(name, _)| self.members.values().any(|m| m.subscribes(name)))
            .map(|(n, v)| (n.clone(), *v))
            .collect()
    }

    fn bump(&mut self) {
        self.group_epoch += 1;
    }

    /// Remove a member (it left or was fenced): its partitions are free.
    fn remove(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.bump();
        }
    }
}

/// Every KIP-848 consumer group. See the module docs.
#[derive(Debug, Default)]
pub struct ConsumerGroups {
    config: ConsumerGroupConfig,
    groups: BTreeMap<String, ConsumerGroup>,
    /// Records of the changes since the last [`ConsumerGroups::take_entries`].
    entries: Vec<Entry>,
}

impl ConsumerGroups {
    /// No groups.
    pub fn new(config: ConsumerGroupConfig) -> Self {
        ConsumerGroups { config, groups: BTreeMap::new(), entries: Vec::new() }
    }

    /// The limits and defaults.
    pub fn config(&self) -> &ConsumerGroupConfig {
        &self.config
    }

    /// Group `id`, if it exists.
    pub fn group(&self, id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(id)
    }

    /// Every group id.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    /// The default assignor (the first served).
    pub fn default_assignor(&self) -> Assignor {
        self.config.assignors.first().copied().unwrap_or(Assignor::Uniform)
    }

    /// The journal entries of the changes made since the last call: make them durable before
    /// answering.
    pub fn take_entries(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
    }

    /// Whether changes wait in [`ConsumerGroups::take_entries`].
    pub fn has_entries(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Make group `name`, without members, at group epoch `epoch` (a classic group's generation
    /// as it converts: epochs only grow across a group id's types), unless it exists. Journaled
    /// with its first member; dropped if that member's join is refused.
    pub fn create_at(&mut self, name: &str, epoch: i32) {
        self.groups.entry(name.to_string()).or_insert_with(|| ConsumerGroup {
            group_epoch: epoch.max(0),
            assignment_epoch: epoch.max(0),
            ..ConsumerGroup::default()
        });
    }

    /// Record group `name` if what the journal holds of it changed. A group without members
    /// that was never journaled is dropped instead (a refused first join leaves none).
    fn journal(&mut self, name: &str) {
        let Some(g) = self.groups.get_mut(name) else { return };
        if g.journaled.is_none() && g.members.is_empty() {
            self.groups.remove(name);
            return;
        }
        let record = g.record(name);
        if g.journaled.as_ref() != Some(&record) {
            let entry = Entry::ConsumerGroup(record.clone());
            g.journaled_bytes = entry.encode().len();
            g.journaled = Some(record);
            g.idle_since_ms = None;
            self.entries.push(entry);
        }
    }

    /// Forget group `name` (converted to a classic group, deleted or expired), journaling it
    /// with [`Entry::ConsumerGroupsRemoved`] when `journal`.
    pub fn remove(&mut self, name: &str, journal: bool) {
        if self.groups.remove(name).is_some() && journal {
            self.entries.push(Entry::ConsumerGroupsRemoved { groups: vec![name.to_string()] });
        }
    }

    /// Groups without members idle for `retention_ms` at `now_ms` (their idle clock starts at
    /// the first sweep that finds them so), among those `keep` does not hold (a group with
    /// committed offsets expires with them).
    pub fn idle(&mut self, now_ms: u64, retention_ms: u64, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        for (name, g) in &mut self.groups {
            if keep(name) {
                continue;
            }
            if crate::table::idle_past(&mut g.idle_since_ms, g.members.is_empty(), now_ms, retention_ms) {
                out.push(name.clone());
            }
        }
        out
    }

    /// How many groups there are.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Apply a journal entry (a replay, or a standby following).
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::ConsumerGroup(r) => {
                let g = ConsumerGroup::from_record(r, self.config.session_timeout_ms, 0);
                self.groups.insert(r.group.clone(), g);
            }
            Entry::ConsumerGroupsRemoved { groups }
            | Entry::GroupsDeleted { groups }
            | Entry::GroupsExpired { groups } => {
                for g in groups {
                    self.groups.remove(g);
                }
            }
            _ => {}
        }
    }

    /// A snapshot's records of every group.
    pub fn snapshot(&self) -> Vec<Entry> {
        self.groups.iter().map(|(name, g)| Entry::ConsumerGroup(g.record(name))).collect()
    }

    /// After a replay: every session and revocation deadline starts at `now_ms`.
    pub fn restart_clocks(&mut self, now_ms: u64) {
        let session_ms = self.config.session_timeout_ms;
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                m.session_deadline_ms = now_ms + session_ms;
                if let MemberState::Revoking { deadline_ms } = &mut m.state {
                    *deadline_ms = now_ms + m.rebalance_timeout_ms;
                }
            }
        }
    }

    /// Check a heartbeat's fields (Kafka's INVALID_REQUEST cases).
    fn validate(h: &Heartbeat) -> Result<(), Status> {
        let bad = |why: &str| Err(Status::new(ErrorCode::InvalidRequest, format!("ConsumerGroupHeartbeat: {why}")));
        if h.group.is_empty() {
            return bad("the group id is empty");
        }
        if h.member_id.is_empty() {
            return bad("the member id is empty (clients generate it, KIP-1082)");
        }
        if h.instance_id.as_deref() == Some("") {
            return bad("the instance id is empty");
        }
        match h.member_epoch {
            0 => {
                if h.rebalance_timeout_ms < 0 {
                    return bad("a join (epoch 0) must carry the rebalance timeout");
                }
                if !h.owned.as_ref().is_some_and(|o| o.is_empty()) {
                    return bad("a join (epoch 0) must own no partitions (an empty list)");
                }
                if h.topic_names.is_none() && h.topic_regex.as_deref().is_none_or(str::is_empty) {
                    return bad("a join (epoch 0) must subscribe to topic names or a regular expression");
                }
            }
            LEAVE_STATIC_EPOCH if h.instance_id.is_none() => {
                return bad("epoch -2 is a static member's: no instance id")
            }
            e if e < LEAVE_STATIC_EPOCH => return bad("a member epoch below -2"),
            _ => {}
        }
        Ok(())
    }

    /// A ConsumerGroupHeartbeat at `now_ms`, against the cluster's `topics`. What it changed
    /// waits in [`ConsumerGroups::take_entries`].
    pub fn heartbeat(&mut self, now_ms: u64, h: &Heartbeat, topics: &Topics) -> Result<HeartbeatAnswer, Status> {
        let answer = self.beat(now_ms, h, topics);
        self.journal(&h.group);
        answer
    }

    fn beat(&mut self, now_ms: u64, h: &Heartbeat, topics: &Topics) -> Result<HeartbeatAnswer, Status> {
        Self::validate(h)?;
        let interval = self.config.heartbeat_interval_ms.clamp(1, i32::MAX as u64) as i32;
        let answer = |member_epoch, assignment| HeartbeatAnswer {
            member_id: h.member_id.clone(),
            member_epoch,
            heartbeat_interval_ms: interval,
            assignment,
        };
        if let Some(regex) = h.topic_regex.as_deref().filter(|r| !r.is_empty()) {
            // On its own first: `a)|(b` would otherwise escape the anchors.
            if regex::Regex::new(regex).is_err() || full_match(regex).is_none() {
                return Err(Status::new(
                    ErrorCode::InvalidRegularExpression,
                    format!("subscription regular expression {regex:?} does not compile (RE2 syntax)"),
                ));
            }
        }
        let assignor = match h.server_assignor.as_deref() {
            None => None,
            Some(name) => match Assignor::parse(name).filter(|a| self.config.assignors.contains(a)) {
                Some(a) => Some(a),
                None => {
                    let served: Vec<&str> = self.config.assignors.iter().map(|a| a.name()).collect();
                    return Err(Status::new(
                        ErrorCode::UnsupportedAssignor,
                        format!("group.remote.assignor {name:?} is not served: {}", served.join(", ")),
                    ));
                }
            },
        };
        // What the member brings is bounded: a group is journaled as one record.
        let brings = member_bytes(h);
        if brings > self.config.member_bytes_max {
            return Err(Status::new(
                ErrorCode::PolicyViolation,
                format!(
                    "member '{}' brings {brings} bytes of ids, client id and subscription, above the coordinator's \
                     {} per member: subscribe with fewer or shorter names, or a regular expression",
                    h.member_id, self.config.member_bytes_max
                ),
            ));
        }
        if let Some(g) = self.groups.get(&h.group) {
            if g.journaled_bytes + brings > GROUP_RECORD_BYTES_MAX && (h.member_epoch == 0 || h.topic_names.is_some()) {
                return Err(Status::new(
                    ErrorCode::PolicyViolation,
                    format!(
                        "group '{}' is journaled as one record of {} bytes, and this member's {brings} more would \
                         take it past {GROUP_RECORD_BYTES_MAX}: use another group, or shorter subscriptions",
                        h.group, g.journaled_bytes
                    ),
                ));
            }
        }
        // Leaving.
        if h.member_epoch == LEAVE_EPOCH || h.member_epoch == LEAVE_STATIC_EPOCH {
            let Some(g) = self.groups.get_mut(&h.group) else { return Ok(answer(h.member_epoch, None)) };
            let Some(known) = g.members.get(&h.member_id) else {
                return Ok(answer(h.member_epoch, None));
            };
            if known.instance_id != h.instance_id && h.instance_id.is_some() {
                return Err(Status::new(
                    ErrorCode::FencedInstanceId,
                    format!(
                        "member '{}' is instance '{}', not '{}'",
                        h.member_id,
                        known.instance_id.as_deref().unwrap_or(""),
                        h.instance_id.as_deref().unwrap_or("")
                    ),
                ));
            }
            if h.member_epoch == LEAVE_STATIC_EPOCH {
                // Away for now: its partitions stay its own until its session lapses.
                let m = g.members.get_mut(&h.member_id).expect("known");
                if m.epoch != LEAVE_STATIC_EPOCH {
                    m.previous_epoch = m.epoch;
                    m.epoch = LEAVE_STATIC_EPOCH;
                }
                m.session_deadline_ms = now_ms + self.config.session_timeout_ms;
            } else {
                g.remove(&h.member_id);
            }
            return Ok(answer(h.member_epoch, None));
        }
        let max_size = self.config.max_size;
        let session_ms = self.config.session_timeout_ms;
        let g = match (self.groups.get_mut(&h.group), h.member_epoch) {
            (Some(g), _) => g,
            (None, 0) => self.groups.entry(h.group.clone()).or_default(),
            (None, _) => {
                // The group is gone (every member fenced, or the coordinator's state lost): the
                // member rejoins, which librdkafka does on UNKNOWN_MEMBER_ID (GROUP_ID_NOT_FOUND
                // would be fatal to it).
                return Err(Status::new(
                    ErrorCode::UnknownMemberId,
                    format!("group '{}' has no member '{}': join again at epoch 0", h.group, h.member_id),
                ));
            }
        };
        let full = h.member_epoch == 0 || h.topic_names.is_some() || h.owned.is_some();
        let mut bump = false;
        if h.member_epoch == 0 {
            // Joining (or rejoining with the same id after being fenced, KAFKA-19233).
            let mut taken_over: Option<Member> = None;
            if let Some(instance) = &h.instance_id {
                let held = g.members.iter().find(|(_, m)| m.instance_id.as_ref() == Some(instance));
                if let Some((old_id, old)) = held {
                    if old.epoch == LEAVE_STATIC_EPOCH {
                        // Its replacement takes its place.
                        let old_id = old_id.clone();
                        taken_over = g.members.remove(&old_id);
                        if let Some(t) = g.target.remove(&old_id) {
                            g.target.insert(h.member_id.clone(), t);
                        }
                    } else if *old_id != h.member_id {
                        return Err(Status::new(
                            ErrorCode::UnreleasedInstanceId,
                            format!("instance id '{instance}' is held by member '{old_id}', which has not left"),
                        ));
                    }
                }
            }
            if taken_over.is_none() && g.members.contains_key(&h.member_id) {
                // A rejoin of a known id: it starts over (what it owned is given up).
                g.remove(&h.member_id);
            }
            if taken_over.is_none() && g.members.len() >= max_size {
                return Err(Status::new(
                    ErrorCode::GroupMaxSizeReached,
                    format!("group '{}' has {} members, its maximum (--group-consumer-max-size)", h.group, max_size),
                ));
            }
            let member = match taken_over {
                // The static member's replacement takes its place, epoch and partitions.
                Some(mut old) => {
                    old.epoch = old.previous_epoch.max(0);
                    old.session_deadline_ms = now_ms + session_ms;
                    old.client_id = h.client_id.clone();
                    old.client_host = h.client_host.clone();
                    old
                }
                None => {
                    bump = true;
                    Member {
                        instance_id: h.instance_id.clone(),
                        client_id: h.client_id.clone(),
                        client_host: h.client_host.clone(),
                        epoch: 0,
                        previous_epoch: -1,
                        state: MemberState::Stable,
                        rebalance_timeout_ms: 0,
                        session_deadline_ms: now_ms + session_ms,
                        names: BTreeSet::new(),
                        regex: None,
                        assignor: None,
                        assigned: BTreeSet::new(),
                        revoking: BTreeSet::new(),
                    }
                }
            };
            g.members.insert(h.member_id.clone(), member);
        } else {
            let Some(m) = g.members.get(&h.member_id) else {
                return Err(Status::new(
                    ErrorCode::UnknownMemberId,
                    format!("group '{}' has no member '{}': join again at epoch 0", h.group, h.member_id),
                ));
            };
            if let (Some(instance), Some(held)) = (&h.instance_id, &m.instance_id) {
                if instance != held {
                    return Err(Status::new(
                        ErrorCode::FencedInstanceId,
                        format!("member '{}' is instance '{held}', not '{instance}'", h.member_id),
                    ));
                }
            }
            let owned_within = h.owned.as_ref().is_some_and(|o| o.iter().all(|tp| m.assigned.contains(tp)));
            let fenced = h.member_epoch > m.epoch
                || (h.member_epoch < m.epoch && !(h.member_epoch == m.previous_epoch && owned_within));
            if fenced {
                return Err(Status::new(
                    ErrorCode::FencedMemberEpoch,
                    format!(
                        "member '{}' of group '{}' sent epoch {}, but its epoch is {}: it missed a rebalance; \
                         rejoin at epoch 0",
                        h.member_id, h.group, h.member_epoch, m.epoch
                    ),
                ));
            }
        }
        // The member's subscription and settings.
        let m = g.members.get_mut(&h.member_id).expect("joined or known");
        m.session_deadline_ms = now_ms + session_ms;
        if h.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout_ms = h.rebalance_timeout_ms as u64;
        }
        if let Some(names) = &h.topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            bump |= names != m.names;
            m.names = names;
        }
        if let Some(regex) = &h.topic_regex {
            // `""` is none (librdkafka sends it in every full request).
            let new = if regex.is_empty() { None } else { full_match(regex) };
            if m.regex.as_ref().map(regex::Regex::as_str) != new.as_ref().map(regex::Regex::as_str) {
                bump = true;
                m.regex = new;
            }
        }
        if h.server_assignor.is_some() && assignor != m.assignor {
            bump = true;
            m.assignor = assignor;
        }
        // A subscribed topic created, deleted or given partitions.
        bump |= g.subscribed(topics) != g.topics_seen;
        if bump {
            g.bump();
        }
        if g.group_epoch > g.assignment_epoch {
            let default = self.config.assignors.first().copied().unwrap_or(Assignor::Uniform);
            assign(g, topics, default);
        }
        let before = g.members[&h.member_id].assigned.clone();
        if let Some(owned) = &h.owned {
            // What it no longer lists, it has given up.
            let owned: BTreeSet<TopicPartition> = owned.iter().copied().collect();
            let m = g.members.get_mut(&h.member_id).expect("known");
            m.revoking.retain(|tp| owned.contains(tp));
        }
        reconcile(g, &h.member_id, now_ms);
        let m = &g.members[&h.member_id];
        let assignment = (full || m.assigned != before).then(|| m.assigned.clone());
        Ok(answer(m.epoch, assignment))
    }

    /// Fence the members whose session lapsed or who did not revoke within their rebalance
    /// timeout, at `now_ms`; returns (group, member) of each.
    pub fn handle_timeouts(&mut self, now_ms: u64) -> Vec<(String, String)> {
        let mut fenced = Vec::new();
        for (group, g) in &mut self.groups {
            let lapsed: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    m.session_deadline_ms <= now_ms
                        || matches!(m.state, MemberState::Revoking { deadline_ms } if deadline_ms <= now_ms)
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in lapsed {
                g.remove(&id);
                fenced.push((group.clone(), id));
            }
        }
        let touched: BTreeSet<String> = fenced.iter().map(|(g, _)| g.clone()).collect();
        for group in touched {
            self.journal(&group);
        }
        fenced
    }

    /// Whether `member_id` at `member_epoch` may commit offsets for `group` now
    /// (`transactional`: TxnOffsetCommit). A commit without a member (epoch < 0) is for a group
    /// with no members only.
    pub fn check_commit(
        &self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        transactional: bool,
    ) -> Result<(), Status> {
        let g = self.groups.get(group);
        // Without a member epoch and a member id, only to a group without members. Kafka takes
        // any member id there; here a commit naming a member must come from that member, so a
        // fenced member that dropped its epoch cannot commit into a group left empty (the
        // group simulation finds the double commit that allows).
        if member_epoch < 0 && member_id.is_empty() {
            return match g {
                Some(g) if !g.members.is_empty() => Err(Status::new(
                    ErrorCode::UnknownMemberId,
                    format!("group '{group}' has members: commit as one of them, with its member epoch"),
                )),
                _ => Ok(()),
            };
        }
        let Some(m) = g.and_then(|g| g.members.get(member_id)) else {
            return Err(Status::new(
                ErrorCode::UnknownMemberId,
                format!("group '{group}' has no member '{member_id}'"),
            ));
        };
        if member_epoch != m.epoch {
            let code = if transactional { ErrorCode::IllegalGeneration } else { ErrorCode::StaleMemberEpoch };
            return Err(Status::new(
                code,
                format!(
                    "member '{member_id}' of group '{group}' committed at epoch {member_epoch}, its epoch is {}",
                    m.epoch
                ),
            ));
        }
        Ok(())
    }
}

/// Move `member_id` towards its target (Kafka's CurrentAssignmentBuilder): revocation first,
/// then the new epoch and the partitions no other member owns.
fn reconcile(g: &mut ConsumerGroup, member_id: &str, now_ms: u64) {
    let target = g.target.get(member_id).cloned().unwrap_or_default();
    let assignment_epoch = g.assignment_epoch;
    let m = g.members.get_mut(member_id).expect("known");
    if m.epoch < assignment_epoch || matches!(m.state, MemberState::Revoking { .. }) {
        // Partitions outside the target move to `revoking`.
        let outside: Vec<TopicPartition> = m.assigned.iter().filter(|tp| !target.contains(tp)).copied().collect();
        for tp in outside {
            m.assigned.remove(&tp);
            m.revoking.insert(tp);
        }
        // A partition being revoked that the target gives back is the member's again.
        let back: Vec<TopicPartition> = m.revoking.iter().filter(|tp| target.contains(tp)).copied().collect();
        for tp in back {
            m.revoking.remove(&tp);
            m.assigned.insert(tp);
        }
        if !m.revoking.is_empty() {
            if !matches!(m.state, MemberState::Revoking { .. }) {
                m.state = MemberState::Revoking { deadline_ms: now_ms + m.rebalance_timeout_ms };
            }
            return;
        }
        m.state = MemberState::Stable;
        if m.epoch < assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
    }
    // Stable at the assignment epoch: take what of the target no other member owns.
    let wanted: Vec<TopicPartition> =
        target.iter().filter(|tp| !g.members[member_id].assigned.contains(tp)).copied().collect();
    let free: Vec<TopicPartition> =
        wanted.into_iter().filter(|tp| g.owner(tp).is_none_or(|owner| owner == member_id)).collect();
    let m = g.members.get_mut(member_id).expect("known");
    m.assigned.extend(free);
}

/// Compute every member's target with the group's assignor (the one most members name, ties to
/// `uniform`; `default` when none names one), sticky to the current targets.
fn assign(g: &mut ConsumerGroup, topics: &Topics, default: Assignor) {
    let assignor = g.assignor(default);
    let subscribed = g.subscribed(topics);
    // Members subscribed to each topic (a static member away still holds its share).
    let members: Vec<String> = g.members.keys().cloned().collect();
    let subscribers =
        |name: &str| -> Vec<String> { members.iter().filter(|id| g.members[*id].subscribes(name)).cloned().collect() };
    let previous = &g.target;
    let mut target: BTreeMap<String, BTreeSet<TopicPartition>> =
        members.iter().map(|id| (id.clone(), BTreeSet::new())).collect();
    match assignor {
        Assignor::Range => {
            for (name, (id, count)) in &subscribed {
                let subs = subscribers(name);
                if subs.is_empty() {
                    continue;
                }
                let n = subs.len() as i32;
                let quota = |i: usize| count / n + i32::from((i as i32) < count % n);
                let mut left: BTreeSet<i32> = (0..*count).collect();
                let mut have: Vec<i32> = vec![0; subs.len()];
                // Sticky: each keeps what it had of this topic, up to its quota.
                for (i, s) in subs.iter().enumerate() {
                    for (_, p) in previous.get(s).into_iter().flatten().filter(|(t, _)| t == id) {
                        if have[i] < quota(i) && left.remove(p) {
                            target.get_mut(s).expect("member").insert((*id, *p));
                            have[i] += 1;
                        }
                    }
                }
                for (i, s) in subs.iter().enumerate() {
                    while have[i] < quota(i) {
                        let Some(p) = left.pop_first() else { break };
                        target.get_mut(s).expect("member").insert((*id, p));
                        have[i] += 1;
                    }
                }
            }
        }
        Assignor::Uniform => {
            // Every subscribed partition, with its topic's name.
            let all: BTreeMap<TopicPartition, &str> = subscribed
                .iter()
                .flat_map(|(name, (id, count))| (0..*count).map(move |p| ((*id, p), name.as_str())))
                .collect();
            let eligible =
                |tp: &TopicPartition, member: &str| all.get(tp).is_some_and(|n| g.members[member].subscribes(n));
            let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
            // Sticky: each keeps what it had that it still subscribes to.
            for id in &members {
                for tp in previous.get(id).into_iter().flatten() {
                    if eligible(tp, id) && taken.insert(*tp) {
                        target.get_mut(id).expect("member").insert(*tp);
                    }
                }
            }
            // The rest to the eligible member with the fewest.
            for tp in all.keys() {
                if taken.contains(tp) {
                    continue;
                }
                let to =
                    members.iter().filter(|id| eligible(tp, id)).min_by_key(|id| (target[*id].len(), (*id).clone()));
                if let Some(to) = to {
                    target.get_mut(to).expect("member").insert(*tp);
                    taken.insert(*tp);
                }
            }
            // Balance: move from the fullest to the emptiest while they differ by more than one
            // and the emptiest may take one of the fullest's partitions.
            loop {
                let most = members.iter().max_by_key(|id| (target[*id].len(), std::cmp::Reverse((*id).clone())));
                let least = members.iter().min_by_key(|id| (target[*id].len(), (*id).clone()));
                let (Some(most), Some(least)) = (most.cloned(), least.cloned()) else { break };
                if target[&most].len() <= target[&least].len() + 1 {
                    break;
                }
                let movable = target[&most].iter().rev().find(|tp| eligible(tp, &least));
                let Some(tp) = movable.copied() else { break };
                target.get_mut(&most).expect("member").remove(&tp);
                target.get_mut(&least).expect("member").insert(tp);
            }
        }
    }
    g.target = target;
    g.topics_seen = subscribed;
    g.assignment_epoch = g.group_epoch;
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u128 = 7;

    fn topics(count: i32) -> Topics {
        [("in".to_string(), (T, count))].into_iter().collect()
    }

    fn join(member: &str) -> Heartbeat {
        Heartbeat {
            group: "g".into(),
            member_id: member.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1_000,
            topic_names: Some(vec!["in".into()]),
            owned: Some(Vec::new()),
            ..Heartbeat::default()
        }
    }

    fn steady(member: &str, epoch: i32) -> Heartbeat {
        Heartbeat {
            group: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            ..Heartbeat::default()
        }
    }

    fn ack(member: &str, epoch: i32, owned: &BTreeSet<TopicPartition>) -> Heartbeat {
        Heartbeat { owned: Some(owned.iter().copied().collect()), ..steady(member, epoch) }
    }

    fn no_partition_twice(g: &ConsumerGroup) {
        let mut seen = BTreeSet::new();
        for (id, parts) in g.owned() {
            for tp in parts {
                assert!(seen.insert(tp), "{tp:?} owned twice (again by {id}): {:?}", g.owned());
            }
        }
    }

    #[test]
    fn a_second_member_gets_partitions_only_once_the_first_revoked_them() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let t = topics(4);
        let a = c.heartbeat(0, &join("a"), &t).unwrap();
        assert_eq!(a.member_epoch, 1);
        let a_parts = a.assignment.unwrap();
        assert_eq!(a_parts.len(), 4);
        let b = c.heartbeat(1, &join("b"), &t).unwrap();
        assert_eq!(b.member_epoch, 2, "nothing to revoke: b is at the new epoch at once");
        assert_eq!(b.assignment, Some(BTreeSet::new()), "a still owns every partition");
        no_partition_twice(c.group("g").unwrap());
        // a hears it must give two up: its epoch stays.
        let a2 = c.heartbeat(2, &steady("a", 1), &t).unwrap();
        assert_eq!(a2.member_epoch, 1);
        let kept = a2.assignment.clone().unwrap();
        assert_eq!(kept.len(), 2);
        // Commits of a at its epoch still succeed while it revokes.
        c.check_commit("g", "a", 1, false).unwrap();
        // b heartbeats: still nothing (a owns them).
        let b2 = c.heartbeat(3, &steady("b", 2), &t).unwrap();
        assert_eq!((b2.member_epoch, b2.assignment), (2, None));
        no_partition_twice(c.group("g").unwrap());
        // a acknowledges: it moves to epoch 2; then b gets the two.
        let a3 = c.heartbeat(4, &ack("a", 1, &kept), &t).unwrap();
        assert_eq!(a3.member_epoch, 2);
        assert_eq!(c.check_commit("g", "a", 1, false).unwrap_err().code, ErrorCode::StaleMemberEpoch);
        assert_eq!(c.check_commit("g", "a", 1, true).unwrap_err().code, ErrorCode::IllegalGeneration);
        let b3 = c.heartbeat(5, &steady("b", 2), &t).unwrap();
        assert_eq!(b3.member_epoch, 2);
        let b_parts = b3.assignment.unwrap();
        assert_eq!(b_parts.len(), 2);
        assert!(b_parts.is_disjoint(&kept));
        no_partition_twice(c.group("g").unwrap());
    }

    #[test]
    fn epochs_are_checked_and_a_fenced_member_rejoins() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let t = topics(2);
        c.heartbeat(0, &join("a"), &t).unwrap();
        let code = |r: Result<HeartbeatAnswer, Status>| r.unwrap_err().code;
        assert_eq!(code(c.heartbeat(1, &steady("a", 5), &t)), ErrorCode::FencedMemberEpoch);
        assert_eq!(code(c.heartbeat(1, &steady("nobody", 1), &t)), ErrorCode::UnknownMemberId);
        let elsewhere = Heartbeat { group: "h".into(), ..steady("a", 1) };
        assert_eq!(code(c.heartbeat(1, &elsewhere, &t)), ErrorCode::UnknownMemberId);
        // The session lapses: fenced, then unknown; it rejoins at epoch 0.
        let fenced = c.handle_timeouts(SESSION_TIMEOUT_MS_DEFAULT + 1);
        assert_eq!(fenced, [("g".to_string(), "a".to_string())]);
        assert_eq!(code(c.heartbeat(SESSION_TIMEOUT_MS_DEFAULT + 2, &steady("a", 1), &t)), ErrorCode::UnknownMemberId);
        let again = c.heartbeat(SESSION_TIMEOUT_MS_DEFAULT + 3, &join("a"), &t).unwrap();
        assert_eq!(again.member_epoch, 3, "the group's epochs only grow: a zombie's epoch 1 is never current again");
        // Invalid requests.
        let mut bad = join("b");
        bad.owned = None;
        assert_eq!(code(c.heartbeat(0, &bad, &t)), ErrorCode::InvalidRequest);
        let mut bad = join("b");
        bad.server_assignor = Some("sticky".into());
        assert_eq!(code(c.heartbeat(0, &bad, &t)), ErrorCode::UnsupportedAssignor);
        let mut bad = join("b");
        bad.topic_regex = Some("(".into());
        assert_eq!(code(c.heartbeat(0, &bad, &t)), ErrorCode::InvalidRegularExpression);
        // A pattern that would escape the anchors it is wrapped in is refused, not widened.
        bad.topic_regex = Some("a)|(b".into());
        assert_eq!(code(c.heartbeat(0, &bad, &t)), ErrorCode::InvalidRegularExpression);
        // What one member brings is bounded (a group is journaled as one record).
        let mut big = join("b");
        big.topic_names = Some((0..300).map(|i| format!("{i:0>240}")).collect());
        assert_eq!(code(c.heartbeat(0, &big, &t)), ErrorCode::PolicyViolation);
        assert!(!c.group("g").unwrap().members.contains_key("b"), "the refused member did not join");
    }

    #[test]
    fn commits_without_a_member_epoch_go_only_to_groups_without_members_and_leaves_check_the_instance() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let t = topics(2);
        assert!(c.check_commit("g", "", -1, false).is_ok(), "no group: accepted, as Kafka");
        assert_eq!(c.check_commit("g", "fenced", -1, true).unwrap_err().code, ErrorCode::UnknownMemberId);
        let static_join = Heartbeat { instance_id: Some("i-1".into()), ..join("a") };
        c.heartbeat(0, &static_join, &t).unwrap();
        assert_eq!(c.check_commit("g", "anyone", -1, false).unwrap_err().code, ErrorCode::UnknownMemberId);
        assert_eq!(c.check_commit("g", "", -1, false).unwrap_err().code, ErrorCode::UnknownMemberId);
        // A leave naming another instance id is fenced; the member stays.
        let wrong = Heartbeat { instance_id: Some("i-2".into()), ..steady("a", LEAVE_STATIC_EPOCH) };
        assert_eq!(c.heartbeat(1, &wrong, &t).unwrap_err().code, ErrorCode::FencedInstanceId);
        assert_eq!(c.group("g").unwrap().members["a"].epoch, 1);
        c.heartbeat(2, &Heartbeat { instance_id: Some("i-1".into()), ..steady("a", LEAVE_EPOCH) }, &t).unwrap();
        assert!(c.check_commit("g", "", -1, false).is_ok(), "an empty group: accepted");
        // A member id at epoch -1 must be a member: a fenced worker that dropped its epoch
        // cannot commit into the emptied group.
        assert_eq!(c.check_commit("g", "a", -1, true).unwrap_err().code, ErrorCode::UnknownMemberId);
    }

    #[test]
    fn a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let t = topics(2);
        c.heartbeat(0, &join("a"), &t).unwrap();
        c.heartbeat(1, &join("b"), &t).unwrap();
        c.heartbeat(2, &steady("a", 1), &t).unwrap(); // told to revoke one, deadline 1002
        assert!(c.handle_timeouts(1_000).is_empty());
        assert_eq!(c.handle_timeouts(1_003), [("g".to_string(), "a".to_string())]);
        let b = c.heartbeat(1_004, &steady("b", 2), &t).unwrap();
        assert_eq!(b.assignment.map(|a| a.len()), Some(2), "b takes both once a is fenced");
    }

    #[test]
    fn a_static_member_away_keeps_its_partitions_and_its_replacement_takes_them() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let t = topics(2);
        let static_join = |m: &str| Heartbeat { instance_id: Some("i-1".into()), ..join(m) };
        let a = c.heartbeat(0, &static_join("a"), &t).unwrap();
        let a_parts = a.assignment.unwrap();
        assert_eq!(c.heartbeat(1, &static_join("a2"), &t).unwrap_err().code, ErrorCode::UnreleasedInstanceId);
        let left = Heartbeat { instance_id: Some("i-1".into()), ..steady("a", LEAVE_STATIC_EPOCH) };
        assert_eq!(c.heartbeat(2, &left, &t).unwrap().member_epoch, LEAVE_STATIC_EPOCH);
        let epoch = c.group("g").unwrap().group_epoch();
        let a2 = c.heartbeat(3, &static_join("a2"), &t).unwrap();
        assert_eq!(a2.assignment, Some(a_parts), "the replacement takes the same partitions");
        assert_eq!(c.group("g").unwrap().group_epoch(), epoch, "no rebalance");
        assert_eq!(c.heartbeat(4, &steady("a", 1), &t).unwrap_err().code, ErrorCode::UnknownMemberId);
        let wrong = Heartbeat { instance_id: Some("i-2".into()), ..steady("a2", a2.member_epoch) };
        assert_eq!(c.heartbeat(5, &wrong, &t).unwrap_err().code, ErrorCode::FencedInstanceId);
    }

    #[test]
    fn range_and_uniform_spread_partitions_evenly_and_stickily() {
        for assignor in ["uniform", "range"] {
            let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
            let t = topics(6);
            let with = |m: &str| Heartbeat { server_assignor: Some(assignor.into()), ..join(m) };
            c.heartbeat(0, &with("a"), &t).unwrap();
            c.heartbeat(1, &with("b"), &t).unwrap();
            c.heartbeat(2, &with("c"), &t).unwrap();
            let g = c.group("g").unwrap();
            let sizes: Vec<usize> = g.target.values().map(BTreeSet::len).collect();
            assert_eq!(sizes, [2, 2, 2], "{assignor}: {:?}", g.target);
            let before = g.target.clone();
            // c leaves: a and b keep theirs and share c's.
            c.heartbeat(3, &steady("c", LEAVE_EPOCH), &t).unwrap();
            c.heartbeat(4, &steady("a", 1), &t).unwrap();
            let after = &c.group("g").unwrap().target;
            for m in ["a", "b"] {
                assert!(before[m].is_subset(&after[m]), "{assignor}: {m} kept its partitions: {before:?} -> {after:?}");
                assert_eq!(after[m].len(), 3);
            }
        }
    }

    #[test]
    fn a_regex_subscription_picks_up_a_topic_created_later() {
        let mut c = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut t = topics(1);
        let by_regex = Heartbeat { topic_names: None, topic_regex: Some("in|new-.*".into()), ..join("a") };
        let a = c.heartbeat(0, &by_regex, &t).unwrap();
        assert_eq!(a.assignment.map(|a| a.len()), Some(1));
        t.insert("new-1".into(), (9, 2));
        t.insert("other".into(), (10, 2));
        let a = c.heartbeat(1, &steady("a", a.member_epoch), &t).unwrap();
        assert_eq!(a.assignment.unwrap(), [(T, 0), (9, 0), (9, 1)].into_iter().collect(), "whole names only");
    }

    #[test]
    fn no_partition_is_ever_owned_twice_under_churn() {
        // A deterministic walk: members join, heartbeat (acknowledging what they were told to
        // keep, or not yet), leave and lapse, in a pseudo-random order.
        let mut c =
            ConsumerGroups::new(ConsumerGroupConfig { session_timeout_ms: 500, ..ConsumerGroupConfig::default() });
        let t = topics(8);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut epochs: BTreeMap<String, (i32, BTreeSet<TopicPartition>)> = BTreeMap::new();
        for now in 0..5_000u64 {
            let member = format!("m{}", next() % 5);
            match (epochs.get(&member).cloned(), next() % 10) {
                (None, _) => {
                    if let Ok(a) = c.heartbeat(now, &join(&member), &t) {
                        epochs.insert(member, (a.member_epoch, a.assignment.unwrap_or_default()));
                    }
                }
                (Some(_), 0) => {
                    c.heartbeat(now, &steady(&member, LEAVE_EPOCH), &t).unwrap();
                    epochs.remove(&member);
                }
                (Some((epoch, owned)), r) => {
                    let h = if r < 5 { ack(&member, epoch, &owned) } else { steady(&member, epoch) };
                    match c.heartbeat(now, &h, &t) {
                        Ok(a) => {
                            let owned = a.assignment.unwrap_or(owned);
                            epochs.insert(member, (a.member_epoch, owned));
                        }
                        Err(s) => {
                            assert!(matches!(s.code, ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch), "{s}");
                            epochs.remove(&member);
                        }
                    }
                }
            }
            for (_, m) in c.handle_timeouts(now) {
                epochs.remove(&m);
            }
            if let Some(g) = c.group("g") {
                no_partition_twice(g);
            }
        }
    }
}
