//! Cluster metadata and control: metadata, topic creation, leader elections, broker
//! heartbeats, ISR changes and the admin's describe.
//!
//! Each request's `encode_body` and `decode_body` write and read the fields after the request
//! header; each response's, the fields after its [`Status`].

use bytes::{BufMut, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Ask for metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Topics wanted; empty for all.
    pub topics: Vec<String>,
    /// Create listed topics that do not exist, with the coordinator's defaults.
    pub allow_auto_create: bool,
}

impl MetadataRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.topics.len() as i32);
        for t in &self.topics {
            b.put_string(t);
        }
        b.put_bool(self.allow_auto_create);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("topics", 2)?;
        let mut topics = Vec::with_capacity(n);
        for _ in 0..n {
            topics.push(r.string("topic")?);
        }
        Ok(MetadataRequest { topics, allow_auto_create: r.bool("allow_auto_create")? })
    }
}

/// A broker's identity and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id.
    pub id: i32,
    /// `host:port` clients connect to.
    pub addr: String,
    /// `host:port` of its Kafka-protocol listener; empty if it has none.
    pub kafka_addr: String,
    /// Whether its lease is live.
    pub alive: bool,
}

impl BrokerInfo {
    fn encode(&self, b: &mut BytesMut) {
        b.put_i32(self.id);
        b.put_string(&self.addr);
        b.put_string(&self.kafka_addr);
        b.put_bool(self.alive);
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(BrokerInfo {
            id: r.i32("broker_id")?,
            addr: r.string("addr")?,
            kafka_addr: r.string("kafka_addr")?,
            alive: r.bool("alive")?,
        })
    }
}

/// Leadership of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Id of the leading broker.
    pub leader_id: i32,
    /// Leader epoch: 0 at creation, bumped on every change of leadership.
    pub leader_epoch: i32,
    /// Every replica, preferred leader first.
    pub replicas: Vec<i32>,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
}

/// One topic in a metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Per-topic outcome (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, ...).
    pub status: Status,
    /// Partitions, by index.
    pub partitions: Vec<PartitionInfo>,
    /// Created by this request (auto-creation): its leaders have not started leading yet.
    pub created: bool,
    /// The topic's id (0 if it does not exist): a topic deleted and created again under the
    /// same name has another.
    pub topic_id: u128,
    /// Its `min.insync.replicas` (0 if it does not exist).
    pub min_insync_replicas: i32,
    /// The configs set on it (its overrides of the brokers' settings), `min.insync.replicas`
    /// aside. Written after every topic, and absent in an answer of an older coordinator.
    pub configs: Vec<(String, String)>,
}

/// The answer to a metadata request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataResponse {
    /// Outcome.
    pub status: Status,
    /// Registered brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Topics asked for (or all).
    pub topics: Vec<TopicInfo>,
}

impl MetadataResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.brokers.len() as i32);
        for br in &self.brokers {
            br.encode(b);
        }
        b.put_i32(self.topics.len() as i32);
        for t in &self.topics {
            b.put_string(&t.name);
            t.status.encode(b);
            b.put_bool(t.created);
            b.put_u128(t.topic_id);
            b.put_i32(t.min_insync_replicas);
            b.put_i32(t.partitions.len() as i32);
            for p in &t.partitions {
                b.put_i32(p.partition);
                b.put_i32(p.leader_id);
                b.put_i32(p.leader_epoch);
                b.put_i32_array(&p.replicas);
                b.put_i32_array(&p.isr);
            }
        }
        for t in &self.topics {
            b.put_string_pairs(&t.configs);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("brokers", 9)?;
        let mut brokers = Vec::with_capacity(n);
        for _ in 0..n {
            brokers.push(BrokerInfo::decode(r)?);
        }
        let n = r.array_len("topics", 8)?;
        let mut topics = Vec::with_capacity(n);
        for _ in 0..n {
            let name = r.string("topic")?;
            let tstatus = Status::decode(r)?;
            let created = r.bool("created")?;
            let topic_id = r.u128("topic_id")?;
            let min_insync_replicas = r.i32("min_insync_replicas")?;
            let np = r.array_len("partitions", 20)?;
            let mut partitions = Vec::with_capacity(np);
            for _ in 0..np {
                partitions.push(PartitionInfo {
                    partition: r.i32("partition")?,
                    leader_id: r.i32("leader_id")?,
                    leader_epoch: r.i32("leader_epoch")?,
                    replicas: r.i32_array("replicas")?,
                    isr: r.i32_array("isr")?,
                });
            }
            let configs = Vec::new();
            topics.push(TopicInfo {
                name,
                status: tstatus,
                partitions,
                created,
                topic_id,
                min_insync_replicas,
                configs,
            });
        }
        if r.remaining() > 0 {
            for t in &mut topics {
                t.configs = r.string_pairs("configs")?;
            }
        }
        Ok(MetadataResponse { status, brokers, topics })
    }
}

/// Create a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicRequest {
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: i32,
    /// Replicas per partition; 0 or less for the coordinator's default, min(3, live brokers).
    pub replication_factor: i32,
    /// The topic's `min.insync.replicas`: an acks=all write needs at least this many in-sync
    /// replicas. 0 or less for the coordinator's default.
    pub min_insync_replicas: i32,
    /// Only check that the topic could be created; create nothing.
    pub validate_only: bool,
    /// The topic's configs (`protocol::topic_config`). Written last, only when given (so an
    /// older coordinator reads a request without them).
    pub configs: Vec<(String, String)>,
}

impl CreateTopicRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.name);
        b.put_i32(self.partitions);
        b.put_i32(self.replication_factor);
        b.put_i32(self.min_insync_replicas);
        b.put_bool(self.validate_only);
        if !self.configs.is_empty() {
            b.put_string_pairs(&self.configs);
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let name = r.string("name")?;
        let partitions = r.i32("partitions")?;
        let replication_factor = r.i32("replication_factor")?;
        let min_insync_replicas = r.i32("min_insync_replicas")?;
        let validate_only = r.bool("validate_only")?;
        let configs = if r.remaining() > 0 { r.string_pairs("configs")? } else { Vec::new() };
        Ok(CreateTopicRequest { name, partitions, replication_factor, min_insync_replicas, validate_only, configs })
    }
}

/// Delete a topic (admin -> coordinator): its partitions are removed from every broker, and a
/// topic created later under the same name is another topic (another id), which no write or
/// registration of the old one reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopicRequest {
    /// Topic name; empty to name it by `topic_id` only.
    pub name: String,
    /// Topic id; 0 to name it by `name` only. With both, they must match.
    pub topic_id: u128,
}

impl DeleteTopicRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.name);
        b.put_u128(self.topic_id);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DeleteTopicRequest { name: r.string("name")?, topic_id: r.u128("topic_id")? })
    }
}

/// Give a topic more partitions (admin -> coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsRequest {
    /// Topic name.
    pub name: String,
    /// The topic's partition count afterwards (more than it has).
    pub count: i32,
    /// Only check; create nothing.
    pub validate_only: bool,
    /// Each new partition's replicas, the first its leader (Kafka's replica assignment); empty:
    /// the coordinator places them. Written last, only when given (so an older coordinator
    /// reads a request without it), and absent in a request of an older client.
    pub assignments: Vec<Vec<i32>>,
}

impl CreatePartitionsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.name);
        b.put_i32(self.count);
        b.put_bool(self.validate_only);
        // Written only when given, so a coordinator from before the field reads the rest.
        if self.assignments.is_empty() {
            return;
        }
        b.put_i32(self.assignments.len() as i32);
        for replicas in &self.assignments {
            b.put_i32(replicas.len() as i32);
            for id in replicas {
                b.put_i32(*id);
            }
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let name = r.string("name")?;
        let count = r.i32("count")?;
        let validate_only = r.bool("validate_only")?;
        let mut assignments = Vec::new();
        if r.remaining() > 0 {
            let n = r.array_len("assignments", 4)?;
            assignments.reserve(n);
            for _ in 0..n {
                assignments.push(r.i32_array("replicas")?);
            }
        }
        Ok(CreatePartitionsRequest { name, count, validate_only, assignments })
    }
}

/// Elect a partition's leader again under a bumped leader epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectLeaderRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Which election.
    pub election: Election,
}

/// The kinds of election (an int8 on the wire: 0 and 1 are what a bool `unclean` was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Elect again under the next leader epoch: a live leader keeps leading (its epoch moves,
    /// fencing every write under the old one), else a live in-sync replica, else a live eligible
    /// one (KIP-966).
    Again,
    /// As [`Election::Again`], and with no in-sync or eligible replica live, the live replica
    /// with the longest log anyway (records committed only on the others are lost).
    AgainUnclean,
    /// Kafka's PREFERRED election: the first replica leads if it is live and in sync
    /// (ELECTION_NOT_NEEDED if it leads already, PREFERRED_LEADER_NOT_AVAILABLE if it cannot).
    Preferred,
    /// Kafka's UNCLEAN election: only for a partition whose leader is gone (ELECTION_NOT_NEEDED
    /// while it is live), as [`Election::AgainUnclean`] (ELIGIBLE_LEADERS_NOT_AVAILABLE if no
    /// replica is live).
    Unclean,
}

impl Election {
    fn code(self) -> i8 {
        match self {
            Election::Again => 0,
            Election::AgainUnclean => 1,
            Election::Preferred => 2,
            Election::Unclean => 3,
        }
    }

    /// Whether the election may choose a replica that is not in sync (or eligible).
    pub fn unclean(self) -> bool {
        matches!(self, Election::AgainUnclean | Election::Unclean)
    }
}

impl ElectLeaderRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_i8(self.election.code());
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let topic = r.string("topic")?;
        let partition = r.i32("partition")?;
        let election = match r.i8("election")? {
            0 => Election::Again,
            1 => Election::AgainUnclean,
            2 => Election::Preferred,
            3 => Election::Unclean,
            other => {
                return Err(DecodeError::InvalidValue {
                    field: "election",
                    detail: format!("{other}: 0 again, 1 again allowing unclean, 2 preferred, 3 unclean"),
                })
            }
        };
        Ok(ElectLeaderRequest { topic, partition, election })
    }
}

/// Admin or Kafka listener -> a partition's leader: delete the records below `offset`
/// (DeleteRecords, KIP-107): the log start moves there on the leader and every in-sync replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The new log start (-1: the high watermark).
    pub offset: i64,
    /// How long to wait for the in-sync replicas, in ms.
    pub timeout_ms: i32,
}

impl DeleteRecordsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_i64(self.offset);
        b.put_i32(self.timeout_ms);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DeleteRecordsRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            offset: r.i64("offset")?,
            timeout_ms: r.i32("timeout_ms")?,
        })
    }
}

/// The answer to DeleteRecords.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsResponse {
    /// Outcome: NONE once every in-sync replica hides the records; REQUEST_TIMED_OUT if they
    /// did not within the timeout (the leader has, and they will).
    pub status: Status,
    /// Kafka's low watermark: the lowest log start of the leader and its in-sync replicas (-1
    /// on a refusal).
    pub low_watermark: i64,
}

impl DeleteRecordsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i64(self.low_watermark);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DeleteRecordsResponse { status, low_watermark: r.i64("low_watermark")? })
    }
}

/// Admin or Kafka listener -> coordinator: move a partition's replicas to `replicas`
/// (AlterPartitionReassignments, KIP-455), or cancel the move under way (`None`). The new
/// replicas catch up and join the ISR; then the partition's replicas become `replicas`, its
/// leader one of them, and the replicas no longer listed are dropped by their brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The target replicas, the first preferred as leader; `None` cancels.
    pub replicas: Option<Vec<i32>>,
    /// Whether the target may have another replica count than the partition has (KIP-860;
    /// Kafka's AlterPartitionReassignments before v1 always allows it).
    pub allow_replication_factor_change: bool,
}

impl ReassignRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_bool(self.replicas.is_some());
        if let Some(r) = &self.replicas {
            b.put_i32_array(r);
        }
        b.put_bool(self.allow_replication_factor_change);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let topic = r.string("topic")?;
        let partition = r.i32("partition")?;
        let replicas = if r.bool("has_replicas")? { Some(r.i32_array("replicas")?) } else { None };
        Ok(ReassignRequest { topic, partition, replicas, allow_replication_factor_change: r.bool("allow_rf_change")? })
    }
}

/// Admin or Kafka listener -> coordinator: the partitions being moved
/// (ListPartitionReassignments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReassignmentsRequest {
    /// (topic, partitions) to look at; `None`: every partition.
    pub topics: Option<Vec<(String, Vec<i32>)>>,
}

impl ListReassignmentsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_bool(self.topics.is_some());
        if let Some(topics) = &self.topics {
            b.put_i32(topics.len() as i32);
            for (t, partitions) in topics {
                b.put_string(t);
                b.put_i32_array(partitions);
            }
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let topics = if r.bool("has_topics")? {
            let n = r.array_len("topics", 6)?;
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                topics.push((r.string("topic")?, r.i32_array("partitions")?));
            }
            Some(topics)
        } else {
            None
        };
        Ok(ListReassignmentsRequest { topics })
    }
}

/// A partition being moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Every replica while it moves: the target's, then those being removed.
    pub replicas: Vec<i32>,
    /// Replicas being added (catching up).
    pub adding: Vec<i32>,
    /// Replicas being removed once the added ones are in sync.
    pub removing: Vec<i32>,
}

/// The answer to [`ListReassignmentsRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReassignmentsResponse {
    /// Outcome.
    pub status: Status,
    /// The partitions being moved (of those asked about), by topic and partition.
    pub reassignments: Vec<Reassignment>,
}

impl ListReassignmentsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.reassignments.len() as i32);
        for r in &self.reassignments {
            b.put_string(&r.topic);
            b.put_i32(r.partition);
            b.put_i32_array(&r.replicas);
            b.put_i32_array(&r.adding);
            b.put_i32_array(&r.removing);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("reassignments", 18)?;
        let mut reassignments = Vec::with_capacity(n);
        for _ in 0..n {
            reassignments.push(Reassignment {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                replicas: r.i32_array("replicas")?,
                adding: r.i32_array("adding")?,
                removing: r.i32_array("removing")?,
            });
        }
        Ok(ListReassignmentsResponse { status, reassignments })
    }
}

/// The answer to an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectLeaderResponse {
    /// Outcome.
    pub status: Status,
    /// The leader after the election.
    pub leader_id: i32,
    /// Its new leader epoch.
    pub leader_epoch: i32,
}

impl ElectLeaderResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.leader_id);
        b.put_i32(self.leader_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ElectLeaderResponse { status, leader_id: r.i32("leader_id")?, leader_epoch: r.i32("leader_epoch")? })
    }
}

/// Broker -> coordinator heartbeat (registers the broker on first use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// Broker id.
    pub broker_id: i32,
    /// Address clients should use.
    pub addr: String,
    /// Address Kafka clients should use (its `--kafka-advertise`), empty if it has no Kafka
    /// listener: other brokers list it in their Kafka Metadata answers.
    pub kafka_addr: String,
    /// New at every start of the broker process: a restart is noticed even within the lease.
    pub incarnation: i64,
    /// The broker epoch the coordinator assigned this process at registration (KIP-903), or
    /// -1 before its first answer: then this heartbeat registers the process.
    pub broker_epoch: i64,
    /// The broker epoch the coordinator last assigned a process of this broker on this data
    /// directory (from `broker.meta`), -1 if none: a registration naming the current one is
    /// that process's successor; any other waits until the current registration's lease has
    /// expired, so a late heartbeat of a dead process cannot pass for a restart.
    pub previous_broker_epoch: i64,
    /// The broker's data directory's id, made when the directory was made: another one means
    /// the logs are not the ones the broker had (a replaced or wiped disk).
    pub log_dir_id: i64,
    /// Whether this process's logs hold everything an earlier process of this broker
    /// acknowledged (its writes were synced, it stopped cleanly, or the machine has not
    /// restarted since, so the page cache kept them). A restart that is not intact may have
    /// lost acknowledged records: the replica leaves every ISR and is never elected on them.
    pub intact: bool,
    /// Progress of every replica this broker hosts.
    pub replicas: Vec<ReplicaReport>,
    /// The version of the SASL credentials the broker holds (see
    /// [`HeartbeatResponse::credentials`]), 0 before any.
    pub credentials_version: i64,
    /// The version of the authorizer's settings and ACLs the broker holds (see
    /// [`HeartbeatResponse::authorization`]), 0 before any.
    pub authorization_version: i64,
}

impl HeartbeatRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.broker_id);
        b.put_string(&self.addr);
        b.put_string(&self.kafka_addr);
        b.put_i64(self.incarnation);
        b.put_i64(self.broker_epoch);
        b.put_i64(self.previous_broker_epoch);
        b.put_i64(self.log_dir_id);
        b.put_bool(self.intact);
        b.put_i32(self.replicas.len() as i32);
        for r in &self.replicas {
            b.put_string(&r.topic);
            b.put_i32(r.partition);
            b.put_i64(r.log_end_offset);
            b.put_i64(r.high_watermark);
            b.put_bool(r.offline);
            b.put_bool(r.lost);
            b.put_string(&r.problem);
            b.put_u128(r.topic_id);
            b.put_i32(r.refused_leader_epoch);
            b.put_i64(r.lost_reported_at);
        }
        b.put_i64(self.credentials_version);
        b.put_i64(self.authorization_version);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let broker_id = r.i32("broker_id")?;
        let addr = r.string("addr")?;
        let kafka_addr = r.string("kafka_addr")?;
        let incarnation = r.i64("incarnation")?;
        let broker_epoch = r.i64("broker_epoch")?;
        let previous_broker_epoch = r.i64("previous_broker_epoch")?;
        let log_dir_id = r.i64("log_dir_id")?;
        let intact = r.bool("intact")?;
        let n = r.array_len("replicas", 26)?;
        let mut replicas = Vec::with_capacity(n);
        for _ in 0..n {
            replicas.push(ReplicaReport {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                log_end_offset: r.i64("log_end_offset")?,
                high_watermark: r.i64("high_watermark")?,
                offline: r.bool("offline")?,
                lost: r.bool("lost")?,
                problem: r.string("problem")?,
                topic_id: r.u128("topic_id")?,
                refused_leader_epoch: r.i32("refused_leader_epoch")?,
                lost_reported_at: r.i64("lost_reported_at")?,
            });
        }
        let credentials_version = r.i64("credentials_version")?;
        let authorization_version = r.i64("authorization_version")?;
        Ok(HeartbeatRequest {
            broker_id,
            addr,
            kafka_addr,
            incarnation,
            broker_epoch,
            previous_broker_epoch,
            log_dir_id,
            intact,
            replicas,
            credentials_version,
            authorization_version,
        })
    }
}

/// One replica's progress, as its broker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaReport {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Offset after the replica's last batch.
    pub log_end_offset: i64,
    /// The replica's high watermark.
    pub high_watermark: i64,
    /// Its log failed (an fdatasync or write error): it takes no writes, and must not lead or
    /// stay in the ISR (Kafka's offline log directory, KIP-112). Also a log that could not be
    /// opened at all (`log_end_offset` and `high_watermark` are then -1).
    pub offline: bool,
    /// Its log came back from a restart without everything it held before (damage was cut, or
    /// it ends below the high watermark it had checkpointed): it may lack acknowledged records,
    /// so it must leave the ISR and ELR, and never lead on them, until it has caught up.
    pub lost: bool,
    /// What is wrong with it, for operators (`admin describe`): why it is offline or lost, or
    /// why it refuses its leader; empty when nothing is.
    pub problem: String,
    /// The id of the topic the replica belongs to (0: the broker does not know it, a replica
    /// made before topics had ids): a replica of a deleted topic whose name was created again
    /// carries the old id, and the coordinator tells the broker to drop it.
    pub topic_id: u128,
    /// The leader epoch of the leader whose replication this follower refused because it would
    /// cut committed records (the leader lacks them), -1 if none: the coordinator moves that
    /// leadership to a replica that has them.
    pub refused_leader_epoch: i32,
    /// With `lost`: the broker epoch of the registration that first reported this loss, -1 if
    /// none has (found at this start, or reported by a registration whose answer never came).
    /// The coordinator took the replica out of its ISR at that registration, so a replica it
    /// holds in sync now was let back in after it refetched: the mark is stale (its broker never
    /// read the ISR that took it back), and the restart is not taken for a loss.
    pub lost_reported_at: i64,
}

/// One partition a broker hosts a replica of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The leader (-1 while none is available).
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch (Kafka's KIP-497): moves on every leadership or ISR change, so a leader
    /// can tell a newer ISR from an older one at the same leader epoch.
    pub partition_epoch: i32,
    /// Every replica.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// The topic's `min.insync.replicas`: the leader refuses acks=all writes while its ISR is
    /// smaller, and its high watermark does not move.
    pub min_insync_replicas: i32,
    /// The topic's id: a replica the broker holds under another id belongs to a deleted topic
    /// of the same name, and is dropped.
    pub topic_id: u128,
    /// The leader epoch of the partition's last unclean election (-1: none). A replica that
    /// becomes leader at this epoch or a later one first cuts, above its high watermark, what it
    /// holds from before it: that was never committed where it knows of, and may be a stale
    /// leader's append that no fence marker reached (after Kafka's KIP-704 recovery). A follower
    /// of a leader at this epoch or later may cut below its high watermark; otherwise it refuses.
    pub unclean_leader_epoch: i32,
    /// The topic's configs (its overrides of the broker's settings; `min_insync_replicas`
    /// aside). Written after everything else, one list per assignment, and absent in an answer
    /// of an older coordinator.
    pub configs: Vec<(String, String)>,
}

/// A deleted topic a broker still reported replicas of: it drops them (if they carry this id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedTopic {
    /// Topic name.
    pub name: String,
    /// The id it had.
    pub topic_id: u128,
}

/// A replica a broker reported that is no longer one of its partition's replicas (moved away
/// by a reassignment): the broker drops it if it carries this topic id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedReplica {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The topic's id.
    pub topic_id: u128,
}

/// The answer to a heartbeat: every replica the broker hosts, and the brokers' addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// Outcome.
    pub status: Status,
    /// Lease length granted, in milliseconds.
    pub lease_ms: i32,
    /// The broker epoch of the process's registration (-1 on error).
    pub broker_epoch: i64,
    /// Every partition this broker hosts a replica of.
    pub assignments: Vec<Assignment>,
    /// Addresses of the registered brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Deleted topics of which the broker reported replicas.
    pub deleted: Vec<DeletedTopic>,
    /// The answering coordinator replica's epoch: a broker ignores an answer with one lower
    /// than the highest it has seen (a deposed coordinator's).
    pub coordinator_epoch: i32,
    /// The transaction version the broker's Kafka listener offers (KIP-890; 0 while none is
    /// recorded, which the broker takes as 1).
    pub transaction_version: i16,
    /// Its finalized-features epoch (-1 while none is recorded): only grows.
    pub features_epoch: i64,
    /// The SASL credentials the broker's Kafka listener checks logins against, with their
    /// version, when the broker's copy (its [`HeartbeatRequest::credentials_version`]) is not
    /// this version; `None` when it is.
    pub credentials: Option<Credentials>,
    /// The authorizer's settings and every ACL, when the broker's copy (its
    /// [`HeartbeatRequest::authorization_version`]) is not this version; `None` when it is.
    pub authorization: Option<crate::acl::Authorization>,
    /// Replicas the broker reported that its partitions no longer have (written after the
    /// assignments' configs; absent in an answer of an older coordinator).
    pub removed: Vec<RemovedReplica>,
}

/// Every user's SCRAM credentials, as the coordinator hands them to brokers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// Changes with every change to them (0: no credentials were ever set).
    pub version: i64,
    /// One per user and mechanism.
    pub users: Vec<UserCredential>,
}

/// One user's SCRAM credential for one mechanism (see [`crate::sasl::ScramCredential`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCredential {
    /// The user name.
    pub user: String,
    /// The credential.
    pub credential: crate::sasl::ScramCredential,
}

impl UserCredential {
    fn encode(&self, b: &mut BytesMut) {
        let c = &self.credential;
        b.put_string(&self.user);
        b.put_i8(c.mechanism.kafka_type());
        b.put_i32(c.iterations as i32);
        b.put_blob(&c.salt);
        b.put_blob(&c.stored_key);
        b.put_blob(&c.server_key);
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let user = r.string("user")?;
        let mechanism =
            crate::sasl::ScramMechanism::from_kafka_type(r.i8("mechanism")?).ok_or(DecodeError::InvalidValue {
                field: "mechanism",
                detail: "not a SCRAM mechanism type (1 or 2)".into(),
            })?;
        let iterations = r.i32("iterations")?;
        let iterations = u32::try_from(iterations).map_err(|_| DecodeError::InvalidValue {
            field: "iterations",
            detail: format!("{iterations} is negative"),
        })?;
        let credential = crate::sasl::ScramCredential {
            mechanism,
            iterations,
            salt: r.bytes("salt")?.to_vec(),
            stored_key: r.bytes("stored_key")?.to_vec(),
            server_key: r.bytes("server_key")?.to_vec(),
        };
        Ok(UserCredential { user, credential })
    }
}

impl HeartbeatResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.lease_ms);
        b.put_i64(self.broker_epoch);
        b.put_i32(self.assignments.len() as i32);
        for a in &self.assignments {
            b.put_string(&a.topic);
            b.put_i32(a.partition);
            b.put_i32(a.leader_id);
            b.put_i32(a.leader_epoch);
            b.put_i32(a.partition_epoch);
            b.put_i32_array(&a.replicas);
            b.put_i32_array(&a.isr);
            b.put_i32(a.min_insync_replicas);
            b.put_u128(a.topic_id);
            b.put_i32(a.unclean_leader_epoch);
        }
        b.put_i32(self.brokers.len() as i32);
        for br in &self.brokers {
            br.encode(b);
        }
        b.put_i32(self.deleted.len() as i32);
        for d in &self.deleted {
            b.put_string(&d.name);
            b.put_u128(d.topic_id);
        }
        b.put_i32(self.coordinator_epoch);
        b.put_i16(self.transaction_version);
        b.put_i64(self.features_epoch);
        b.put_bool(self.credentials.is_some());
        if let Some(c) = &self.credentials {
            b.put_i64(c.version);
            b.put_i32(c.users.len() as i32);
            for u in &c.users {
                u.encode(b);
            }
        }
        b.put_bool(self.authorization.is_some());
        if let Some(a) = &self.authorization {
            a.encode(b);
        }
        for a in &self.assignments {
            b.put_string_pairs(&a.configs);
        }
        b.put_i32(self.removed.len() as i32);
        for r in &self.removed {
            b.put_string(&r.topic);
            b.put_i32(r.partition);
            b.put_u128(r.topic_id);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let lease_ms = r.i32("lease_ms")?;
        let broker_epoch = r.i64("broker_epoch")?;
        let n = r.array_len("assignments", 42)?;
        let mut assignments = Vec::with_capacity(n);
        for _ in 0..n {
            assignments.push(Assignment {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                leader_id: r.i32("leader_id")?,
                leader_epoch: r.i32("leader_epoch")?,
                partition_epoch: r.i32("partition_epoch")?,
                replicas: r.i32_array("replicas")?,
                isr: r.i32_array("isr")?,
                min_insync_replicas: r.i32("min_insync_replicas")?,
                topic_id: r.u128("topic_id")?,
                unclean_leader_epoch: r.i32("unclean_leader_epoch")?,
                configs: Vec::new(),
            });
        }
        let n = r.array_len("brokers", 9)?;
        let mut brokers = Vec::with_capacity(n);
        for _ in 0..n {
            brokers.push(BrokerInfo::decode(r)?);
        }
        let n = r.array_len("deleted", 18)?;
        let mut deleted = Vec::with_capacity(n);
        for _ in 0..n {
            deleted.push(DeletedTopic { name: r.string("name")?, topic_id: r.u128("topic_id")? });
        }
        let coordinator_epoch = r.i32("coordinator_epoch")?;
        let transaction_version = r.i16("transaction_version")?;
        let features_epoch = r.i64("features_epoch")?;
        let credentials = match r.bool("credentials")? {
            false => None,
            true => {
                let version = r.i64("credentials_version")?;
                let n = r.array_len("credentials", 23)?;
                let mut users = Vec::with_capacity(n);
                for _ in 0..n {
                    users.push(UserCredential::decode(r)?);
                }
                Some(Credentials { version, users })
            }
        };
        let authorization = match r.bool("authorization")? {
            false => None,
            true => Some(crate::acl::Authorization::decode(r)?),
        };
        if r.remaining() > 0 {
            for a in &mut assignments {
                a.configs = r.string_pairs("configs")?;
            }
        }
        let mut removed = Vec::new();
        if r.remaining() > 0 {
            let n = r.array_len("removed", 22)?;
            removed.reserve(n);
            for _ in 0..n {
                removed.push(RemovedReplica {
                    topic: r.string("topic")?,
                    partition: r.i32("partition")?,
                    topic_id: r.u128("topic_id")?,
                });
            }
        }
        Ok(HeartbeatResponse {
            status,
            lease_ms,
            broker_epoch,
            assignments,
            brokers,
            deleted,
            coordinator_epoch,
            transaction_version,
            features_epoch,
            credentials,
            authorization,
            removed,
        })
    }
}

/// Leader -> coordinator: set a partition's ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    /// The leader's broker id.
    pub broker_id: i32,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The id of the topic the leader's replica belongs to (0: unknown): a change asked by a
    /// replica of a deleted topic of the same name is refused with UNKNOWN_TOPIC_ID, as Kafka's
    /// AlterPartition v2 carries topic ids.
    pub topic_id: u128,
    /// The leader's epoch; a stale one is refused with FENCED_LEADER_EPOCH.
    pub leader_epoch: i32,
    /// The partition epoch the change is based on; any other is refused with
    /// INVALID_UPDATE_VERSION (the ISR moved since, or this request was already applied).
    pub partition_epoch: i32,
    /// The new ISR; must hold the leader.
    pub isr: Vec<i32>,
}

impl AlterPartitionRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.broker_id);
        b.put_string(&self.topic);
        b.put_i32(self.partition);
        b.put_u128(self.topic_id);
        b.put_i32(self.leader_epoch);
        b.put_i32(self.partition_epoch);
        b.put_i32_array(&self.isr);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AlterPartitionRequest {
            broker_id: r.i32("broker_id")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            topic_id: r.u128("topic_id")?,
            leader_epoch: r.i32("leader_epoch")?,
            partition_epoch: r.i32("partition_epoch")?,
            isr: r.i32_array("isr")?,
        })
    }
}

/// The coordinator's answer to an ISR change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionResponse {
    /// Outcome.
    pub status: Status,
    /// The partition's leader epoch.
    pub leader_epoch: i32,
    /// The partition epoch of the ISR now in force.
    pub partition_epoch: i32,
    /// The ISR now in force.
    pub isr: Vec<i32>,
    /// The answering coordinator replica's epoch (see [`HeartbeatResponse::coordinator_epoch`]).
    pub coordinator_epoch: i32,
}

impl AlterPartitionResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.leader_epoch);
        b.put_i32(self.partition_epoch);
        b.put_i32_array(&self.isr);
        b.put_i32(self.coordinator_epoch);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AlterPartitionResponse {
            status,
            leader_epoch: r.i32("leader_epoch")?,
            partition_epoch: r.i32("partition_epoch")?,
            isr: r.i32_array("isr")?,
            coordinator_epoch: r.i32("coordinator_epoch")?,
        })
    }
}

/// A broker as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerState {
    /// Broker id.
    pub id: i32,
    /// Address.
    pub addr: String,
    /// Whether its lease is live.
    pub alive: bool,
}

/// A partition as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Leader broker id (-1 if none).
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Every replica.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Eligible leader replicas (KIP-966): replicas out of the ISR that still hold every
    /// committed record, since the ISR shrank below `min_insync_replicas` (the high watermark
    /// stops there); electable when no ISR member is live.
    pub elr: Vec<i32>,
    /// The topic's `min.insync.replicas`.
    pub min_insync_replicas: i32,
    /// While a reassignment moves it (KIP-455): the replicas being added.
    pub adding: Vec<i32>,
    /// While a reassignment moves it: the replicas being removed.
    pub removing: Vec<i32>,
    /// Each replica's last reported progress, by broker id.
    pub progress: Vec<ReplicaProgress>,
}

/// A replica's log end offset and high watermark, as last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaProgress {
    /// Broker id.
    pub broker_id: i32,
    /// Log end offset.
    pub log_end_offset: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// What its broker last reported wrong with it (offline, lost, refusing its leader); empty
    /// when nothing is.
    pub problem: String,
}

/// A transactional id as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionalState {
    /// Transactional id.
    pub transactional_id: String,
    /// Current producer id.
    pub producer_id: i64,
    /// Current epoch.
    pub producer_epoch: i16,
    /// Partitions registered under the current epoch (the open transaction's).
    pub partitions: Vec<String>,
    /// Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit or CompleteAbort.
    pub state: String,
    /// Milliseconds since the open transaction began (-1 if none is open).
    pub age_ms: i64,
    /// The transaction timeout its producer asked for, in milliseconds.
    pub transaction_timeout_ms: i32,
    /// The transaction version the open (or last) transaction runs under: 1, 2, or 0 if no
    /// request has told.
    pub transaction_version: i16,
}

/// The answer to Describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeResponse {
    /// Outcome.
    pub status: Status,
    /// Brokers.
    pub brokers: Vec<BrokerState>,
    /// Partitions.
    pub partitions: Vec<PartitionState>,
    /// Transactional ids.
    pub transactional_ids: Vec<TransactionalState>,
    /// The state the coordinator holds beside its caps.
    pub held: Vec<HeldState>,
}

/// One kind of state the coordinator holds, and its cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldState {
    /// `transactional_ids`, `groups`, `group_offsets` (the fullest group's) or `offsets` (all
    /// groups').
    pub kind: String,
    /// How many are held.
    pub count: i64,
    /// The cap.
    pub max: i64,
}

impl DescribeResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.brokers.len() as i32);
        for br in &self.brokers {
            b.put_i32(br.id);
            b.put_string(&br.addr);
            b.put_bool(br.alive);
        }
        b.put_i32(self.partitions.len() as i32);
        for p in &self.partitions {
            b.put_string(&p.topic);
            b.put_i32(p.partition);
            b.put_i32(p.leader_id);
            b.put_i32(p.leader_epoch);
            b.put_i32_array(&p.replicas);
            b.put_i32_array(&p.isr);
            b.put_i32_array(&p.elr);
            b.put_i32(p.min_insync_replicas);
            b.put_i32_array(&p.adding);
            b.put_i32_array(&p.removing);
            b.put_i32(p.progress.len() as i32);
            for g in &p.progress {
                b.put_i32(g.broker_id);
                b.put_i64(g.log_end_offset);
                b.put_i64(g.high_watermark);
                b.put_string(&g.problem);
            }
        }
        b.put_i32(self.transactional_ids.len() as i32);
        for t in &self.transactional_ids {
            b.put_string(&t.transactional_id);
            b.put_i64(t.producer_id);
            b.put_i16(t.producer_epoch);
            b.put_i32(t.partitions.len() as i32);
            for p in &t.partitions {
                b.put_string(p);
            }
            b.put_string(&t.state);
            b.put_i64(t.age_ms);
            b.put_i32(t.transaction_timeout_ms);
            b.put_i16(t.transaction_version);
        }
        b.put_i32(self.held.len() as i32);
        for h in &self.held {
            b.put_string(&h.kind);
            b.put_i64(h.count);
            b.put_i64(h.max);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("brokers", 7)?;
        let mut brokers = Vec::with_capacity(n);
        for _ in 0..n {
            brokers.push(BrokerState { id: r.i32("broker_id")?, addr: r.string("addr")?, alive: r.bool("alive")? });
        }
        let n = r.array_len("partitions", 34)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            let topic = r.string("topic")?;
            let partition = r.i32("partition")?;
            let leader_id = r.i32("leader_id")?;
            let leader_epoch = r.i32("leader_epoch")?;
            let replicas = r.i32_array("replicas")?;
            let isr = r.i32_array("isr")?;
            let elr = r.i32_array("elr")?;
            let min_insync_replicas = r.i32("min_insync_replicas")?;
            let adding = r.i32_array("adding")?;
            let removing = r.i32_array("removing")?;
            let np = r.array_len("progress", 22)?;
            let mut progress = Vec::with_capacity(np);
            for _ in 0..np {
                progress.push(ReplicaProgress {
                    broker_id: r.i32("broker_id")?,
                    log_end_offset: r.i64("log_end_offset")?,
                    high_watermark: r.i64("high_watermark")?,
                    problem: r.string("problem")?,
                });
            }
            partitions.push(PartitionState {
                topic,
                partition,
                leader_id,
                leader_epoch,
                replicas,
                isr,
                elr,
                min_insync_replicas,
                adding,
                removing,
                progress,
            });
        }
        let n = r.array_len("transactional_ids", 20)?;
        let mut transactional_ids = Vec::with_capacity(n);
        for _ in 0..n {
            let transactional_id = r.string("transactional_id")?;
            let producer_id = r.i64("producer_id")?;
            let producer_epoch = r.i16("producer_epoch")?;
            let np = r.array_len("partitions", 2)?;
            let mut parts = Vec::with_capacity(np);
            for _ in 0..np {
                parts.push(r.string("partition")?);
            }
            transactional_ids.push(TransactionalState {
                transactional_id,
                producer_id,
                producer_epoch,
                partitions: parts,
                state: r.string("state")?,
                age_ms: r.i64("age_ms")?,
                transaction_timeout_ms: r.i32("transaction_timeout_ms")?,
                transaction_version: r.i16("transaction_version")?,
            });
        }
        let n = r.array_len("held", 18)?;
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(HeldState { kind: r.string("kind")?, count: r.i64("count")?, max: r.i64("max")? });
        }
        Ok(DescribeResponse { status, brokers, partitions, transactional_ids, held })
    }
}

/// A principal's ACL changes (admin, or a broker relaying a Kafka client's CreateAcls or
/// DeleteAcls, which it has authorized) -> coordinator; also how `admin acls list` reads them
/// (nothing to change). Cluster-internal: only a proven member may send it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclsRequest {
    /// Bindings to create (each validated; one that exists already is not created twice).
    pub create: Vec<crate::acl::AclBinding>,
    /// Filters whose matching bindings to delete.
    pub delete: Vec<crate::acl::AclFilter>,
}

impl AclsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.create.len() as i32);
        for a in &self.create {
            a.encode(b);
        }
        b.put_i32(self.delete.len() as i32);
        for f in &self.delete {
            f.encode(b);
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("create", crate::acl::AclBinding::ENCODED_BYTES_MIN)?;
        let create = (0..n).map(|_| crate::acl::AclBinding::decode(r)).collect::<Result<_, _>>()?;
        let n = r.array_len("delete", 10)?;
        let delete = (0..n).map(|_| crate::acl::AclFilter::decode(r)).collect::<Result<_, _>>()?;
        Ok(AclsRequest { create, delete })
    }
}

/// The coordinator's answer to an [`AclsRequest`], once its changes are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclsResponse {
    /// SECURITY_DISABLED without `--authorizer`, else NONE (items carry their own errors).
    pub status: Status,
    /// Per binding to create: NONE, or INVALID_REQUEST and why.
    pub created: Vec<Status>,
    /// Per filter: the bindings it deleted.
    pub deleted: Vec<Vec<crate::acl::AclBinding>>,
    /// The settings and every binding after the change (the relaying broker takes them at
    /// once, so that its next DescribeAcls sees the change).
    pub authorization: crate::acl::Authorization,
}

impl AclsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.created.len() as i32);
        for s in &self.created {
            s.encode(b);
        }
        b.put_i32(self.deleted.len() as i32);
        for d in &self.deleted {
            b.put_i32(d.len() as i32);
            for a in d {
                a.encode(b);
            }
        }
        self.authorization.encode(b);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("created", 4)?;
        let created = (0..n).map(|_| Status::decode(r)).collect::<Result<_, _>>()?;
        let n = r.array_len("deleted", 4)?;
        let mut deleted = Vec::with_capacity(n);
        for _ in 0..n {
            let m = r.array_len("deleted_bindings", crate::acl::AclBinding::ENCODED_BYTES_MIN)?;
            deleted.push((0..m).map(|_| crate::acl::AclBinding::decode(r)).collect::<Result<_, _>>()?);
        }
        let authorization = crate::acl::Authorization::decode(r)?;
        Ok(AclsResponse { status, created, deleted, authorization })
    }
}

/// SCRAM credential changes (KIP-554: admin, or a broker relaying a Kafka client's
/// AlterUserScramCredentials) -> coordinator; also how `admin users list` reads them (nothing to
/// change). Cluster-internal: only a proven member may send it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScramCredentialsRequest {
    /// Credentials to create or replace (the client salted the password: it never travels).
    pub upserts: Vec<UserCredential>,
    /// (user, mechanism) credentials to delete.
    pub deletions: Vec<(String, crate::sasl::ScramMechanism)>,
}

impl ScramCredentialsRequest {
    /// Encode as the coordinator's journal records it.
    pub fn encode_into(&self, b: &mut BytesMut) {
        self.encode_body(b)
    }

    /// Decode what [`ScramCredentialsRequest::encode_into`] wrote.
    pub fn decode_from(r: &mut Reader) -> Result<Self, DecodeError> {
        Self::decode_body(r)
    }

    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.upserts.len() as i32);
        for u in &self.upserts {
            u.encode(b);
        }
        b.put_i32(self.deletions.len() as i32);
        for (user, mechanism) in &self.deletions {
            b.put_string(user);
            b.put_i8(mechanism.kafka_type());
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("upserts", 23)?;
        let upserts = (0..n).map(|_| UserCredential::decode(r)).collect::<Result<_, _>>()?;
        let n = r.array_len("deletions", 3)?;
        let mut deletions = Vec::with_capacity(n);
        for _ in 0..n {
            let user = r.string("user")?;
            let mechanism =
                crate::sasl::ScramMechanism::from_kafka_type(r.i8("mechanism")?).ok_or(DecodeError::InvalidValue {
                    field: "mechanism",
                    detail: "not a SCRAM mechanism type (1 or 2)".into(),
                })?;
            deletions.push((user, mechanism));
        }
        Ok(ScramCredentialsRequest { upserts, deletions })
    }
}

/// The coordinator's answer to a [`ScramCredentialsRequest`], once its changes are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialsResponse {
    /// NONE, or why nothing was decided (the journal failed).
    pub status: Status,
    /// One per user the request named, in first-seen order.
    pub results: Vec<(String, Status)>,
    /// Every credential after the change (the relaying broker takes them at once).
    pub credentials: Credentials,
}

impl ScramCredentialsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.results.len() as i32);
        for (user, status) in &self.results {
            b.put_string(user);
            status.encode(b);
        }
        b.put_i64(self.credentials.version);
        b.put_i32(self.credentials.users.len() as i32);
        for u in &self.credentials.users {
            u.encode(b);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("results", 4)?;
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            results.push((r.string("user")?, Status::decode(r)?));
        }
        let version = r.i64("credentials_version")?;
        let n = r.array_len("credentials", 23)?;
        let users = (0..n).map(|_| UserCredential::decode(r)).collect::<Result<_, _>>()?;
        Ok(ScramCredentialsResponse { status, results, credentials: Credentials { version, users } })
    }
}

/// What one change does to a topic config (AlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// Set the config to a value.
    Set(String, String),
    /// Remove the config: the broker's default applies again.
    Delete(String),
}

/// Change a topic's configs (admin, or a broker relaying Kafka's IncrementalAlterConfigs or
/// AlterConfigs -> coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigsRequest {
    /// Topic name.
    pub topic: String,
    /// The changes, in order.
    pub changes: Vec<ConfigChange>,
    /// Kafka's AlterConfigs: the topic's configs become exactly those set (the rest go back to
    /// their defaults). Otherwise only the configs named change (IncrementalAlterConfigs).
    pub replace: bool,
    /// Only check; change nothing.
    pub validate_only: bool,
}

impl AlterConfigsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.topic);
        b.put_i32(self.changes.len() as i32);
        for c in &self.changes {
            match c {
                ConfigChange::Set(name, value) => {
                    b.put_i8(0);
                    b.put_string(name);
                    b.put_string(value);
                }
                ConfigChange::Delete(name) => {
                    b.put_i8(1);
                    b.put_string(name);
                }
            }
        }
        b.put_bool(self.replace);
        b.put_bool(self.validate_only);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let topic = r.string("topic")?;
        let n = r.array_len("changes", 3)?;
        let mut changes = Vec::with_capacity(n);
        for _ in 0..n {
            changes.push(match r.i8("op")? {
                0 => ConfigChange::Set(r.string("config_name")?, r.string("config_value")?),
                1 => ConfigChange::Delete(r.string("config_name")?),
                other => {
                    return Err(DecodeError::InvalidValue { field: "op", detail: format!("{other}: 0 set, 1 delete") })
                }
            });
        }
        Ok(AlterConfigsRequest { topic, changes, replace: r.bool("replace")?, validate_only: r.bool("validate_only")? })
    }
}
