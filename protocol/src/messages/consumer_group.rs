//! KIP-848 consumer groups (Kafka's ConsumerGroupHeartbeat), as a broker's Kafka listener relays
//! them to the coordinator, which holds every group and assigns its partitions itself.
//!
//! Partitions travel by topic id (Kafka's topic ids: the coordinator's 128-bit topic ids).

use bytes::{BufMut, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// A partition, by topic id.
pub type TopicIdPartition = (u128, i32);

fn put_opt_strings(b: &mut BytesMut, v: &Option<Vec<String>>) {
    b.put_bool(v.is_some());
    match v {
        None => {}
        Some(v) => {
            b.put_i32(v.len() as i32);
            for s in v {
                b.put_string(s);
            }
        }
    }
}

fn get_opt_strings(r: &mut Reader, field: &'static str) -> Result<Option<Vec<String>>, DecodeError> {
    if !r.bool(field)? {
        return Ok(None);
    }
    let n = r.array_len(field, 2)?;
    (0..n).map(|_| r.string(field)).collect::<Result<Vec<_>, _>>().map(Some)
}

fn put_partitions(b: &mut BytesMut, v: &[TopicIdPartition]) {
    b.put_i32(v.len() as i32);
    for (id, p) in v {
        b.put_u128(*id);
        b.put_i32(*p);
    }
}

fn get_partitions(r: &mut Reader, field: &'static str) -> Result<Vec<TopicIdPartition>, DecodeError> {
    let n = r.array_len(field, 20)?;
    (0..n).map(|_| Ok((r.u128(field)?, r.i32(field)?))).collect()
}

fn put_opt_partitions(b: &mut BytesMut, v: &Option<Vec<TopicIdPartition>>) {
    b.put_bool(v.is_some());
    if let Some(v) = v {
        put_partitions(b, v);
    }
}

fn get_opt_partitions(r: &mut Reader, field: &'static str) -> Result<Option<Vec<TopicIdPartition>>, DecodeError> {
    if r.bool(field)? {
        get_partitions(r, field).map(Some)
    } else {
        Ok(None)
    }
}

/// A member's ConsumerGroupHeartbeat (KIP-848): join (epoch 0), beat, acknowledge revocations
/// (`owned`), leave (-1; -2 for a static member away for now). `None`, and -1 for the rebalance
/// timeout, mean unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerHeartbeatRequest {
    /// Group id.
    pub group: String,
    /// Member id (client-generated, KIP-1082).
    pub member_id: String,
    /// The member's epoch.
    pub member_epoch: i32,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// `max.poll.interval.ms`: how long the member has to give up partitions.
    pub rebalance_timeout_ms: i32,
    /// Subscribed topic names.
    pub topic_names: Option<Vec<String>>,
    /// Subscribed topic regular expression (RE2, matched against whole names); `""` for none.
    pub topic_regex: Option<String>,
    /// `group.remote.assignor`.
    pub server_assignor: Option<String>,
    /// The partitions the member owns now.
    pub owned: Option<Vec<TopicIdPartition>>,
    /// Client id (the Kafka header's), shown by describe.
    pub client_id: String,
    /// Client host, shown by describe.
    pub client_host: String,
}

impl ConsumerHeartbeatRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_string(&self.member_id);
        b.put_i32(self.member_epoch);
        b.put_nullable_string(self.instance_id.as_deref());
        b.put_i32(self.rebalance_timeout_ms);
        put_opt_strings(b, &self.topic_names);
        b.put_nullable_string(self.topic_regex.as_deref());
        b.put_nullable_string(self.server_assignor.as_deref());
        put_opt_partitions(b, &self.owned);
        b.put_string(&self.client_id);
        b.put_string(&self.client_host);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ConsumerHeartbeatRequest {
            group: r.string("group")?,
            member_id: r.string("member_id")?,
            member_epoch: r.i32("member_epoch")?,
            instance_id: r.nullable_string("instance_id")?,
            rebalance_timeout_ms: r.i32("rebalance_timeout_ms")?,
            topic_names: get_opt_strings(r, "topic_names")?,
            topic_regex: r.nullable_string("topic_regex")?,
            server_assignor: r.nullable_string("server_assignor")?,
            owned: get_opt_partitions(r, "owned")?,
            client_id: r.string("client_id")?,
            client_host: r.string("client_host")?,
        })
    }
}

/// The answer to a [`ConsumerHeartbeatRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerHeartbeatResponse {
    /// Outcome.
    pub status: Status,
    /// The member id.
    pub member_id: String,
    /// Its epoch (-1 or -2 after a leave).
    pub member_epoch: i32,
    /// How often to heartbeat, in milliseconds (never 0).
    pub heartbeat_interval_ms: i32,
    /// The member's whole assignment, when it changed or the request was a full one.
    pub assignment: Option<Vec<TopicIdPartition>>,
}

impl ConsumerHeartbeatResponse {
    /// A refusal.
    pub fn error(status: Status, member_id: &str) -> Self {
        ConsumerHeartbeatResponse {
            status,
            member_id: member_id.to_string(),
            member_epoch: -1,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }

    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.member_id);
        b.put_i32(self.member_epoch);
        b.put_i32(self.heartbeat_interval_ms);
        put_opt_partitions(b, &self.assignment);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ConsumerHeartbeatResponse {
            status,
            member_id: r.string("member_id")?,
            member_epoch: r.i32("member_epoch")?,
            heartbeat_interval_ms: r.i32("heartbeat_interval_ms")?,
            assignment: get_opt_partitions(r, "assignment")?,
        })
    }
}

/// A topic's partitions, by id and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    /// Topic id.
    pub topic_id: u128,
    /// Topic name.
    pub topic: String,
    /// Partitions.
    pub partitions: Vec<i32>,
}

fn put_topic_partitions(b: &mut BytesMut, v: &[TopicPartitions]) {
    b.put_i32(v.len() as i32);
    for t in v {
        b.put_u128(t.topic_id);
        b.put_string(&t.topic);
        b.put_i32_array(&t.partitions);
    }
}

fn get_topic_partitions(r: &mut Reader, field: &'static str) -> Result<Vec<TopicPartitions>, DecodeError> {
    let n = r.array_len(field, 22)?;
    (0..n)
        .map(|_| {
            Ok(TopicPartitions { topic_id: r.u128(field)?, topic: r.string(field)?, partitions: r.i32_array(field)? })
        })
        .collect()
}

/// One member of a KIP-848 consumer group, described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberState {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Its epoch (-2 while a static member is away).
    pub member_epoch: i32,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Subscribed topic names.
    pub topic_names: Vec<String>,
    /// Subscribed regular expression, if any.
    pub topic_regex: Option<String>,
    /// The partitions it owns and may use.
    pub assigned: Vec<TopicPartitions>,
    /// Its target at the assignment epoch.
    pub target: Vec<TopicPartitions>,
}

/// A KIP-848 consumer group's own state, in a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupState {
    /// Group epoch.
    pub group_epoch: i32,
    /// Assignment epoch.
    pub assignment_epoch: i32,
    /// The assignor the group uses.
    pub assignor: String,
    /// Members.
    pub members: Vec<ConsumerMemberState>,
}

impl ConsumerGroupState {
    pub(crate) fn encode(&self, b: &mut BytesMut) {
        b.put_i32(self.group_epoch);
        b.put_i32(self.assignment_epoch);
        b.put_string(&self.assignor);
        b.put_i32(self.members.len() as i32);
        for m in &self.members {
            b.put_string(&m.member_id);
            b.put_nullable_string(m.instance_id.as_deref());
            b.put_i32(m.member_epoch);
            b.put_string(&m.client_id);
            b.put_string(&m.client_host);
            put_opt_strings(b, &Some(m.topic_names.clone()));
            b.put_nullable_string(m.topic_regex.as_deref());
            put_topic_partitions(b, &m.assigned);
            put_topic_partitions(b, &m.target);
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let group_epoch = r.i32("group_epoch")?;
        let assignment_epoch = r.i32("assignment_epoch")?;
        let assignor = r.string("assignor")?;
        let n = r.array_len("members", 30)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(ConsumerMemberState {
                member_id: r.string("member_id")?,
                instance_id: r.nullable_string("instance_id")?,
                member_epoch: r.i32("member_epoch")?,
                client_id: r.string("client_id")?,
                client_host: r.string("client_host")?,
                topic_names: get_opt_strings(r, "topic_names")?.unwrap_or_default(),
                topic_regex: r.nullable_string("topic_regex")?,
                assigned: get_topic_partitions(r, "assigned")?,
                target: get_topic_partitions(r, "target")?,
            });
        }
        Ok(ConsumerGroupState { group_epoch, assignment_epoch, assignor, members })
    }
}
