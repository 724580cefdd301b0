//! A consumer-group member (`subscribe()`): it joins the group through its coordinator, takes
//! the partitions the group assigns it, heartbeats, reads each assigned partition from the
//! group's committed offset and commits what it read.
//!
//! - **Classic protocol** (JoinGroup, SyncGroup): the leader assigns with Kafka's range
//!   assignor, so it shares a group with librdkafka and Java consumers. A rebalance
//!   (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID on a heartbeat or a commit)
//!   makes it join again and read from the committed offsets.
//! - **KIP-848** (`group.protocol=consumer`, ConsumerGroupHeartbeat): the coordinator assigns;
//!   every heartbeat answer may change the assignment, and the member first commits and gives
//!   up what was taken from it (revocation before assignment), then starts what was added at
//!   its committed offsets. Its commits carry its member epoch; UNKNOWN_MEMBER_ID or
//!   FENCED_MEMBER_EPOCH make it rejoin at epoch 0, STALE_MEMBER_EPOCH heartbeat at once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as OwnedTopic;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId,
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use protocol::{ErrorCode, Status};

use super::{KafkaClient, KafkaConnection, KafkaConsumer};
use crate::client::ClientConfig;
use crate::consumer::{Fetched, FETCH_BYTES_MAX_DEFAULT};
use crate::error::ClientError;

const JOIN_GROUP_VERSIONS: (i16, i16) = (4, 5);
const SYNC_GROUP_VERSIONS: (i16, i16) = (3, 3);
const HEARTBEAT_VERSIONS: (i16, i16) = (3, 3);
const LEAVE_GROUP_VERSIONS: (i16, i16) = (3, 3);
const OFFSET_COMMIT_VERSIONS: (i16, i16) = (7, 7);
/// KIP-848 members commit with their member epoch: OffsetCommit v9.
const OFFSET_COMMIT_VERSIONS_848: (i16, i16) = (9, 9);
const CONSUMER_GROUP_HEARTBEAT_VERSIONS: (i16, i16) = (1, 1);
const OFFSET_FETCH_VERSIONS: (i16, i16) = (7, 7);
/// The assignor, by Kafka's name.
const RANGE: &str = "range";

/// Group settings.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Session timeout (Kafka's `session.timeout.ms`).
    pub session_timeout_ms: i32,
    /// Rebalance timeout (Kafka's `max.poll.interval.ms`).
    pub rebalance_timeout_ms: i32,
    /// Heartbeat interval (Kafka's `heartbeat.interval.ms`).
    pub heartbeat_interval_ms: u64,
    /// `group.instance.id` for a static member.
    pub instance_id: Option<String>,
    /// Kafka's `group.protocol`. Under [`GroupProtocol::Consumer`] the session timeout and the
    /// heartbeat interval are the coordinator's.
    pub protocol: GroupProtocol,
}

/// Kafka's `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup and SyncGroup; the leader assigns.
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat; the coordinator assigns.
    Consumer,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 60_000,
            heartbeat_interval_ms: 1_000,
            instance_id: None,
            protocol: GroupProtocol::Classic,
        }
    }
}

/// One member of a consumer group. See the module docs.
pub struct KafkaGroupConsumer {
    client: KafkaClient,
    consumer: KafkaConsumer,
    group: String,
    topics: Vec<String>,
    config: GroupConfig,
    member_id: String,
    generation: i32,
    /// Assigned partitions and the next offset to read from each.
    positions: BTreeMap<(String, i32), i64>,
    /// What was committed of `positions`.
    committed: HashMap<(String, i32), i64>,
    last_heartbeat: Instant,
}

/// A KIP-848 member id: made by the client (KIP-1082), kept for the member's life.
fn new_member_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes = nanos.to_be_bytes();
    }
    uuid::Uuid::from_bytes(bytes).simple().to_string()
}

/// Errors that mean "join the group again".
fn rejoin(code: i16) -> bool {
    matches!(
        ErrorCode::from_code(code),
        ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId
    )
}

fn refused(what: String, code: i16) -> ClientError {
    ClientError::Refused {
        what,
        status: Status::new(
            ErrorCode::from_code(code),
            format!("error {code} ({})", ErrorCode::from_code(code).name()),
        ),
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// `body` at `version`, after its i16 version (the consumer protocol's embedded messages).
fn versioned<M: Encodable>(m: &M, version: i16) -> Result<Bytes, ClientError> {
    let mut b = BytesMut::new();
    b.put_i16(version);
    m.encode(&mut b, version).map_err(|e| ClientError::Protocol(format!("cannot encode: {e}")))?;
    Ok(b.freeze())
}

fn unversioned<M: Decodable>(mut bytes: Bytes) -> Result<M, ClientError> {
    if bytes.len() < 2 {
        return Err(ClientError::Protocol("an embedded consumer-protocol message without its version".into()));
    }
    let version = bytes.get_i16().clamp(0, 1);
    M::decode(&mut bytes, version).map_err(|e| ClientError::Protocol(format!("cannot decode: {e}")))
}

/// The partitions in a consumer-protocol assignment.
pub fn assigned_partitions(assignment: &Bytes) -> Result<Vec<(String, i32)>, ClientError> {
    if assignment.is_empty() {
        return Ok(Vec::new());
    }
    let a: ConsumerProtocolAssignment = unversioned(assignment.clone())?;
    Ok(a.assigned_partitions.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p))).collect())
}

/// Kafka's range assignor: each topic's partitions, in order, split into contiguous ranges over
/// its subscribers sorted by member id (the first ones get one more when it does not divide).
pub fn range_assign(
    subscriptions: &[(String, Vec<String>)],
    partitions: &HashMap<String, usize>,
) -> BTreeMap<String, Vec<(String, i32)>> {
    let mut out: BTreeMap<String, Vec<(String, i32)>> =
        subscriptions.iter().map(|(m, _)| (m.clone(), Vec::new())).collect();
    let mut topics: Vec<&String> = subscriptions.iter().flat_map(|(_, ts)| ts).collect();
    topics.sort();
    topics.dedup();
    for topic in topics {
        let mut members: Vec<&String> =
            subscriptions.iter().filter(|(_, ts)| ts.contains(topic)).map(|(m, _)| m).collect();
        members.sort();
        let n = partitions.get(topic).copied().unwrap_or(0);
        let (each, extra) = (n / members.len().max(1), n % members.len().max(1));
        let mut next = 0;
        for (i, m) in members.into_iter().enumerate() {
            let count = each + usize::from(i < extra);
            for p in next..next + count {
                out.entry(m.clone()).or_default().push((topic.clone(), p as i32));
            }
            next += count;
        }
    }
    out
}

impl KafkaGroupConsumer {
    /// A member of `group` subscribing to `topics` (not joined yet: [`KafkaGroupConsumer::join`]).
    pub fn new(
        bootstrap: &str,
        config: ClientConfig,
        group: &str,
        topics: &[&str],
        read_committed: bool,
        group_config: GroupConfig,
    ) -> KafkaGroupConsumer {
        let consumer = if read_committed {
            KafkaConsumer::read_committed(bootstrap, config.clone())
        } else {
            KafkaConsumer::new(bootstrap, config.clone())
        };
        KafkaGroupConsumer {
            client: KafkaClient::new(bootstrap, config),
            consumer,
            group: group.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            member_id: match group_config.protocol {
                GroupProtocol::Classic => String::new(),
                GroupProtocol::Consumer => new_member_id(),
            },
            config: group_config,
            generation: -1,
            positions: BTreeMap::new(),
            committed: HashMap::new(),
            last_heartbeat: Instant::now(),
        }
    }

    /// This member's id and generation, its member epoch under KIP-848 (-1 before it joined;
    /// the classic protocol's id is empty until then).
    pub fn membership(&self) -> (&str, i32) {
        (&self.member_id, self.generation)
    }

    /// How often it heartbeats, in milliseconds (under KIP-848 the coordinator's interval).
    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.config.heartbeat_interval_ms
    }

    /// The partitions the group assigned this member.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.positions.keys().cloned().collect()
    }

    async fn coordinator(&mut self) -> Result<KafkaConnection, ClientError> {
        self.client.group_coordinator(&self.group).await
    }

    /// Join the group (again), take the assignment, and start each partition at its committed
    /// offset (0 if none).
    pub async fn join(&mut self) -> Result<(), ClientError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.rebalance_timeout_ms.max(1) as u64 + 10_000);
        let mut attempt = 0;
        loop {
            let joined = match self.config.protocol {
                GroupProtocol::Classic => self.join_once().await,
                GroupProtocol::Consumer => self.join_848().await,
            };
            match joined {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline && retriable(&e) => {
                    tracing::debug!(group = %self.group, error = %e, "joining the group again");
                    self.client.forget_group_coordinator(&self.group);
                    tokio::time::sleep(self.client.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn join_once(&mut self) -> Result<(), ClientError> {
        self.positions.clear();
        self.committed.clear();
        for t in self.topics.clone() {
            self.client.partition_count(&t).await?;
        }
        let subscription =
            ConsumerProtocolSubscription::default().with_topics(self.topics.iter().map(|t| text(t)).collect());
        let metadata = versioned(&subscription, 0)?;
        let conn = self.coordinator().await?;
        let version = conn.version(ApiKey::JoinGroup, JOIN_GROUP_VERSIONS)?;
        let join = |member_id: &str| {
            JoinGroupRequest::default()
                .with_group_id(GroupId(text(&self.group)))
                .with_session_timeout_ms(self.config.session_timeout_ms)
                .with_rebalance_timeout_ms(self.config.rebalance_timeout_ms)
                .with_member_id(text(member_id))
                .with_group_instance_id(self.config.instance_id.as_deref().map(text))
                .with_protocol_type(text("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(text(RANGE))
                    .with_metadata(metadata.clone())])
        };
        let mut resp = conn.call(&join(&self.member_id), version).await?;
        if ErrorCode::from_code(resp.error_code) == ErrorCode::MemberIdRequired {
            self.member_id = resp.member_id.to_string();
            resp = conn.call(&join(&self.member_id), version).await?;
        }
        if resp.error_code != 0 {
            if ErrorCode::from_code(resp.error_code) == ErrorCode::UnknownMemberId {
                self.member_id.clear();
            }
            return Err(refused(format!("JoinGroup '{}'", self.group), resp.error_code));
        }
        self.member_id = resp.member_id.to_string();
        self.generation = resp.generation_id;
        let assignments = if resp.leader == resp.member_id {
            let mut subscriptions: Vec<(String, Vec<String>)> = Vec::new();
            for m in &resp.members {
                let s: ConsumerProtocolSubscription = unversioned(m.metadata.clone())?;
                let topics: Vec<String> = s.topics.iter().map(|t| t.to_string()).collect();
                subscriptions.push((m.member_id.to_string(), topics));
            }
            let mut counts: HashMap<String, usize> = HashMap::new();
            for (_, topics) in &subscriptions {
                for t in topics {
                    let t: &String = t;
                    if !counts.contains_key(t.as_str()) {
                        counts.insert(t.clone(), self.client.partition_count(t).await?);
                    }
                }
            }
            let mut out = Vec::new();
            for (member, parts) in range_assign(&subscriptions, &counts) {
                let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for (t, p) in parts {
                    by_topic.entry(t).or_default().push(p);
                }
                let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| AssignedTopic::default().with_topic(TopicName(text(&t))).with_partitions(ps))
                        .collect(),
                );
                out.push(
                    SyncGroupRequestAssignment::default()
                        .with_member_id(text(&member))
                        .with_assignment(versioned(&a, 0)?),
                );
            }
            out
        } else {
            Vec::new()
        };
        let version = conn.version(ApiKey::SyncGroup, SYNC_GROUP_VERSIONS)?;
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.config.instance_id.as_deref().map(text))
            .with_assignments(assignments);
        let synced = conn.call(&sync, version).await?;
        if synced.error_code != 0 {
            return Err(refused(format!("SyncGroup '{}'", self.group), synced.error_code));
        }
        let assigned = assigned_partitions(&synced.assignment)?;
        self.last_heartbeat = Instant::now();
        self.start_at_committed(&conn, &assigned).await?;
        for key in assigned {
            self.positions.entry(key).or_insert(0);
        }
        tracing::info!(group = %self.group, member_id = %self.member_id, generation = self.generation, assignment = ?self.assignment(), "joined the group");
        Ok(())
    }

    /// Start each of `assigned` at the group's committed offset (0 if none).
    async fn start_at_committed(
        &mut self,
        conn: &KafkaConnection,
        assigned: &[(String, i32)],
    ) -> Result<(), ClientError> {
        if assigned.is_empty() {
            return Ok(());
        }
        // Where to start: the committed offsets.
        let version = conn.version(ApiKey::OffsetFetch, OFFSET_FETCH_VERSIONS)?;
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in assigned {
            by_topic.entry(t).or_default().push(*p);
        }
        let fetch = OffsetFetchRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_require_stable(true)
            .with_topics(Some(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default().with_name(TopicName(text(t))).with_partition_indexes(ps)
                    })
                    .collect(),
            ));
        // A transaction holding offsets for a partition (UNSTABLE_OFFSET_COMMIT) is waited out
        // here, not by joining again (a leader's rejoin would start another rebalance).
        let deadline = Instant::now() + Duration::from_millis(self.config.rebalance_timeout_ms.max(1) as u64);
        let mut attempt = 0;
        let offsets = loop {
            let offsets = conn.call(&fetch, version).await?;
            let unstable = offsets
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .any(|p| ErrorCode::from_code(p.error_code) == ErrorCode::UnstableOffsetCommit);
            if !unstable || Instant::now() >= deadline {
                break offsets;
            }
            tokio::time::sleep(self.client.backoff(attempt)).await;
            attempt += 1;
        };
        if offsets.error_code != 0 {
            return Err(refused(format!("OffsetFetch '{}'", self.group), offsets.error_code));
        }
        for t in &offsets.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(refused(
                        format!("OffsetFetch {}-{}", t.name.as_str(), p.partition_index),
                        p.error_code,
                    ));
                }
                let key = (t.name.to_string(), p.partition_index);
                let at = p.committed_offset.max(0);
                self.committed.insert(key.clone(), at);
                self.positions.insert(key, at);
            }
        }
        for key in assigned {
            self.positions.entry(key.clone()).or_insert(0);
        }
        Ok(())
    }

    /// One ConsumerGroupHeartbeat at `epoch`; `full` carries the subscription and the
    /// rebalance timeout (a join, or after an error). The partitions owned go in every beat.
    async fn send_heartbeat_848(
        &mut self,
        epoch: i32,
        full: bool,
    ) -> Result<kafka_protocol::messages::ConsumerGroupHeartbeatResponse, ClientError> {
        let mut owned: BTreeMap<u128, Vec<i32>> = BTreeMap::new();
        for (t, p) in self.positions.keys() {
            if let Some(id) = self.client.topic_id(t) {
                owned.entry(id).or_default().push(*p);
            }
        }
        let leaving = epoch < 0;
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_member_id(text(&self.member_id))
            .with_member_epoch(epoch)
            .with_instance_id(self.config.instance_id.as_deref().filter(|_| full || leaving).map(text))
            .with_rebalance_timeout_ms(if full { self.config.rebalance_timeout_ms } else { -1 })
            .with_subscribed_topic_names(full.then(|| self.topics.iter().map(|t| TopicName(text(t))).collect()))
            .with_topic_partitions((!leaving).then(|| {
                owned
                    .into_iter()
                    .map(|(id, ps)| OwnedTopic::default().with_topic_id(uuid::Uuid::from_u128(id)).with_partitions(ps))
                    .collect()
            }));
        let conn = self.coordinator().await?;
        let version = conn.version(ApiKey::ConsumerGroupHeartbeat, CONSUMER_GROUP_HEARTBEAT_VERSIONS)?;
        let resp = conn.call(&req, version).await?;
        self.last_heartbeat = Instant::now();
        if resp.error_code == 0 && resp.heartbeat_interval_ms > 0 {
            self.config.heartbeat_interval_ms = resp.heartbeat_interval_ms as u64;
        }
        Ok(resp)
    }

    /// Join at epoch 0 (KIP-848): the subscribed topics' ids first, so that assignments by id
    /// can be read.
    async fn join_848(&mut self) -> Result<(), ClientError> {
        self.positions.clear();
        self.committed.clear();
        for t in self.topics.clone() {
            self.client.partition_count(&t).await?;
        }
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        self.client.refresh_metadata(&topics, true).await?;
        self.generation = -1;
        let resp = self.send_heartbeat_848(0, true).await?;
        if resp.error_code != 0 {
            return Err(refused(format!("ConsumerGroupHeartbeat (join) '{}'", self.group), resp.error_code));
        }
        self.apply_heartbeat_848(resp).await?;
        tracing::info!(group = %self.group, member_id = %self.member_id, member_epoch = self.generation, assignment = ?self.assignment(), "joined the group");
        Ok(())
    }

    /// A steady heartbeat (KIP-848); `Ok(false)` when the member was fenced and rejoins.
    async fn heartbeat_848(&mut self) -> Result<bool, ClientError> {
        let resp = self.send_heartbeat_848(self.generation, false).await?;
        match ErrorCode::from_code(resp.error_code) {
            ErrorCode::None => {
                self.apply_heartbeat_848(resp).await?;
                Ok(true)
            }
            // Its partitions are lost: it rejoins at epoch 0 with its id, from the committed
            // offsets (what it read since its last commit is read again).
            ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch => {
                tracing::info!(group = %self.group, member_id = %self.member_id, code = resp.error_code, "fenced by the group coordinator: joining again");
                self.generation = -1;
                self.positions.clear();
                self.committed.clear();
                Ok(false)
            }
            // The coordinator moving or loading (a takeover): find it again and beat at the
            // next poll, as librdkafka does.
            ErrorCode::CoordinatorNotAvailable | ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress => {
                self.client.forget_group_coordinator(&self.group);
                Ok(true)
            }
            _ => Err(refused(format!("ConsumerGroupHeartbeat '{}'", self.group), resp.error_code)),
        }
    }

    /// Take a heartbeat answer: the new epoch, and, when it carries one, the new assignment:
    /// what was taken away is committed and given up first, what was added starts at its
    /// committed offset.
    async fn apply_heartbeat_848(
        &mut self,
        resp: kafka_protocol::messages::ConsumerGroupHeartbeatResponse,
    ) -> Result<(), ClientError> {
        let Some(assignment) = resp.assignment else {
            self.generation = resp.member_epoch;
            return Ok(());
        };
        let mut assigned: Vec<(String, i32)> = Vec::new();
        for t in &assignment.topic_partitions {
            let id = t.topic_id.as_u128();
            if self.client.topic_named(id).is_none() {
                let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
                self.client.refresh_metadata(&topics, false).await?;
            }
            let Some(name) = self.client.topic_named(id).map(str::to_string) else {
                return Err(ClientError::Protocol(format!(
                    "an assignment names topic id {} this member does not know",
                    t.topic_id
                )));
            };
            assigned.extend(t.partitions.iter().map(|p| (name.clone(), *p)));
        }
        // The epoch first: the revocation's commit carries the one the member holds now.
        self.generation = resp.member_epoch;
        let revoked: Vec<(String, i32)> = self.positions.keys().filter(|k| !assigned.contains(k)).cloned().collect();
        if !revoked.is_empty() {
            let kept: BTreeMap<(String, i32), i64> =
                self.positions.iter().filter(|(k, _)| revoked.contains(k)).map(|(k, v)| (k.clone(), *v)).collect();
            let all = std::mem::replace(&mut self.positions, kept);
            let committed = self.commit().await;
            self.positions = all;
            committed?;
            for k in &revoked {
                self.positions.remove(k);
                self.committed.remove(k);
            }
            if self.generation < 0 {
                // The commit found the member fenced: it rejoins from the committed offsets.
                self.positions.clear();
                self.committed.clear();
                return Ok(());
            }
        }
        let added: Vec<(String, i32)> = assigned.into_iter().filter(|k| !self.positions.contains_key(k)).collect();
        if !added.is_empty() {
            let conn = self.coordinator().await?;
            self.start_at_committed(&conn, &added).await?;
        }
        Ok(())
    }

    /// Heartbeat if one is due; `Ok(false)` when the group rebalanced and this member must join
    /// again.
    async fn heartbeat_if_due(&mut self) -> Result<bool, ClientError> {
        if self.last_heartbeat.elapsed() < Duration::from_millis(self.config.heartbeat_interval_ms) {
            return Ok(true);
        }
        if self.config.protocol == GroupProtocol::Consumer {
            return self.heartbeat_848().await;
        }
        let conn = self.coordinator().await?;
        let version = conn.version(ApiKey::Heartbeat, HEARTBEAT_VERSIONS)?;
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.config.instance_id.as_deref().map(text));
        let resp = conn.call(&req, version).await?;
        self.last_heartbeat = Instant::now();
        match resp.error_code {
            0 => Ok(true),
            c if rejoin(c) => Ok(false),
            c => Err(refused(format!("Heartbeat '{}'", self.group), c)),
        }
    }

    /// One fetch from every assigned partition (heartbeating first, and joining again after a
    /// rebalance): `(topic, partition, records)` for each.
    pub async fn poll(&mut self) -> Result<Vec<(String, i32, Fetched)>, ClientError> {
        if self.generation < 0 || !self.heartbeat_if_due().await? {
            self.join().await?;
        }
        let mut out = Vec::new();
        for ((topic, partition), at) in self.positions.clone() {
            let f = self.consumer.fetch(&topic, partition, at, FETCH_BYTES_MAX_DEFAULT).await?;
            self.positions.insert((topic.clone(), partition), f.next_offset);
            out.push((topic, partition, f));
        }
        Ok(out)
    }

    /// Commit the positions read so far. `Ok(false)`: the group rebalanced first (the member
    /// joins again at its next poll, from the committed offsets).
    pub async fn commit(&mut self) -> Result<bool, ClientError> {
        let changed: Vec<((String, i32), i64)> = self
            .positions
            .iter()
            .filter(|(k, v)| self.committed.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if changed.is_empty() {
            return Ok(true);
        }
        let mut by_topic: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((t, p), at) in &changed {
            by_topic
                .entry(t.clone())
                .or_default()
                .push(OffsetCommitRequestPartition::default().with_partition_index(*p).with_committed_offset(*at));
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_generation_id_or_member_epoch(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.config.instance_id.as_deref().map(text))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default().with_name(TopicName(text(&t))).with_partitions(ps)
                    })
                    .collect(),
            );
        let conn = self.coordinator().await?;
        let versions = match self.config.protocol {
            GroupProtocol::Classic => OFFSET_COMMIT_VERSIONS,
            GroupProtocol::Consumer => OFFSET_COMMIT_VERSIONS_848,
        };
        let version = conn.version(ApiKey::OffsetCommit, versions)?;
        let resp = conn.call(&req, version).await?;
        let code = resp.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).find(|c| *c != 0);
        match code {
            None => {
                self.committed.extend(changed);
                Ok(true)
            }
            // KIP-848: the epoch moved on; a heartbeat now brings the new one (and any change
            // of assignment), and the next commit carries it.
            Some(c) if ErrorCode::from_code(c) == ErrorCode::StaleMemberEpoch => {
                self.last_heartbeat = Instant::now() - Duration::from_millis(self.config.heartbeat_interval_ms);
                Ok(false)
            }
            Some(c) if rejoin(c) => {
                self.generation = -1;
                Ok(false)
            }
            Some(c) => Err(refused(format!("OffsetCommit '{}'", self.group), c)),
        }
    }

    /// Leave the group (its partitions move to the others at once).
    pub async fn leave(&mut self) -> Result<(), ClientError> {
        if self.member_id.is_empty() || self.generation < 0 && self.config.protocol == GroupProtocol::Consumer {
            return Ok(());
        }
        if self.config.protocol == GroupProtocol::Consumer {
            // -2: a static member away for now keeps its partitions until its session lapses.
            let epoch = if self.config.instance_id.is_some() { -2 } else { -1 };
            let resp = self.send_heartbeat_848(epoch, false).await?;
            self.generation = -1;
            return match resp.error_code {
                0 => Ok(()),
                c => Err(refused(format!("ConsumerGroupHeartbeat (leave) '{}'", self.group), c)),
            };
        }
        let conn = self.coordinator().await?;
        let version = conn.version(ApiKey::LeaveGroup, LEAVE_GROUP_VERSIONS)?;
        let req = LeaveGroupRequest::default().with_group_id(GroupId(text(&self.group))).with_members(vec![
            MemberIdentity::default()
                .with_member_id(text(&self.member_id))
                .with_group_instance_id(self.config.instance_id.as_deref().map(text)),
        ]);
        let resp = conn.call(&req, version).await?;
        self.generation = -1;
        match resp.members.first().map_or(resp.error_code, |m| m.error_code) {
            0 => Ok(()),
            c => Err(refused(format!("LeaveGroup '{}'", self.group), c)),
        }
    }
}

/// Whether joining again may succeed (a rebalance, a coordinator moving or loading, a connection).
fn retriable(e: &ClientError) -> bool {
    match e {
        ClientError::Refused { status, .. } => {
            status.code.is_retriable()
                || matches!(
                    status.code,
                    ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId
                )
        }
        // A connection that broke or timed out (the coordinator moving or restarting).
        ClientError::Protocol(_) | ClientError::Timeout { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_assignor_splits_each_topic_in_contiguous_ranges() {
        let subs = vec![("b".to_string(), vec!["t".to_string()]), ("a".to_string(), vec!["t".to_string()])];
        let counts = HashMap::from([("t".to_string(), 5)]);
        let got = range_assign(&subs, &counts);
        assert_eq!(got["a"], [("t".to_string(), 0), ("t".to_string(), 1), ("t".to_string(), 2)]);
        assert_eq!(got["b"], [("t".to_string(), 3), ("t".to_string(), 4)]);
    }

    #[test]
    fn an_assignment_roundtrips_through_the_consumer_protocol() {
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![AssignedTopic::default()
            .with_topic(TopicName(text("t")))
            .with_partitions(vec![0, 2])]);
        let bytes = versioned(&a, 0).unwrap();
        assert_eq!(assigned_partitions(&bytes).unwrap(), [("t".to_string(), 0), ("t".to_string(), 2)]);
        assert!(assigned_partitions(&Bytes::new()).unwrap().is_empty());
    }
}
