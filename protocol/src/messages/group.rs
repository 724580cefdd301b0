//! Consumer groups (Kafka's classic group protocol) and their offsets, as a broker's Kafka
//! listener relays them to the coordinator, which holds every group.
//!
//! Each request's `encode_body` and `decode_body` write and read the fields after the request
//! header; each response's, the fields after its [`Status`].

use bytes::{BufMut, Bytes, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Join a group (or join it again for the next generation). Answered when the rebalance
/// completes, or at once with an error or MEMBER_ID_REQUIRED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequest {
    /// Group id.
    pub group: String,
    /// The member id the coordinator gave, empty on a first join.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (Kafka's `max.poll.interval.ms` for consumers).
    pub rebalance_timeout_ms: i32,
    /// Protocol type (`consumer`).
    pub protocol_type: String,
    /// The protocols (assignors) the member supports, in its order of preference, with its
    /// metadata for each.
    pub protocols: Vec<(String, Bytes)>,
    /// A first join is answered MEMBER_ID_REQUIRED with a member id to join with (JoinGroup v4+).
    pub require_known_member: bool,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
}

impl JoinGroupRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_string(&self.member_id);
        b.put_nullable_string(self.instance_id.as_deref());
        b.put_i32(self.session_timeout_ms);
        b.put_i32(self.rebalance_timeout_ms);
        b.put_string(&self.protocol_type);
        b.put_i32(self.protocols.len() as i32);
        for (name, metadata) in &self.protocols {
            b.put_string(name);
            b.put_blob(metadata);
        }
        b.put_bool(self.require_known_member);
        b.put_string(&self.client_id);
        b.put_string(&self.client_host);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let member_id = r.string("member_id")?;
        let instance_id = r.nullable_string("instance_id")?;
        let session_timeout_ms = r.i32("session_timeout_ms")?;
        let rebalance_timeout_ms = r.i32("rebalance_timeout_ms")?;
        let protocol_type = r.string("protocol_type")?;
        let n = r.array_len("protocols", 6)?;
        let mut protocols = Vec::with_capacity(n);
        for _ in 0..n {
            protocols.push((r.string("protocol")?, r.bytes("metadata")?));
        }
        Ok(JoinGroupRequest {
            group,
            member_id,
            instance_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            require_known_member: r.bool("require_known_member")?,
            client_id: r.string("client_id")?,
            client_host: r.string("client_host")?,
        })
    }
}

/// The answer to JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupResponse {
    /// Outcome (MEMBER_ID_REQUIRED carries the member id to join with).
    pub status: Status,
    /// The new generation (-1 on error).
    pub generation: i32,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// For the leader only: every member, with its instance id and its metadata for the chosen
    /// protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinGroupResponse {
    /// An error answer.
    pub fn error(status: Status, member_id: &str) -> Self {
        JoinGroupResponse {
            status,
            generation: -1,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }

    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.generation);
        b.put_string(&self.protocol_type);
        b.put_string(&self.protocol);
        b.put_string(&self.leader);
        b.put_string(&self.member_id);
        b.put_i32(self.members.len() as i32);
        for (member, instance, metadata) in &self.members {
            b.put_string(member);
            b.put_nullable_string(instance.as_deref());
            b.put_blob(metadata);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let generation = r.i32("generation")?;
        let protocol_type = r.string("protocol_type")?;
        let protocol = r.string("protocol")?;
        let leader = r.string("leader")?;
        let member_id = r.string("member_id")?;
        let n = r.array_len("members", 10)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push((r.string("member_id")?, r.nullable_string("instance_id")?, r.bytes("metadata")?));
        }
        Ok(JoinGroupResponse { status, generation, protocol_type, protocol, leader, member_id, members })
    }
}

/// Which member, at which generation, a group request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Group id.
    pub group: String,
    /// Generation the member holds (-1: none, a standalone offset commit).
    pub generation: i32,
    /// Member id (empty: none).
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
}

impl GroupMember {
    fn encode(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_i32(self.generation);
        b.put_string(&self.member_id);
        b.put_nullable_string(self.instance_id.as_deref());
    }

    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(GroupMember {
            group: r.string("group")?,
            generation: r.i32("generation")?,
            member_id: r.string("member_id")?,
            instance_id: r.nullable_string("instance_id")?,
        })
    }
}

/// SyncGroup: the leader sends the assignment; every member gets its own once it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequest {
    /// Who asks.
    pub member: GroupMember,
    /// The leader's assignment per member id (empty from the others).
    pub assignments: Vec<(String, Bytes)>,
}

impl SyncGroupRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        self.member.encode(b);
        b.put_i32(self.assignments.len() as i32);
        for (member, assignment) in &self.assignments {
            b.put_string(member);
            b.put_blob(assignment);
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let member = GroupMember::decode(r)?;
        let n = r.array_len("assignments", 6)?;
        let mut assignments = Vec::with_capacity(n);
        for _ in 0..n {
            assignments.push((r.string("member_id")?, r.bytes("assignment")?));
        }
        Ok(SyncGroupRequest { member, assignments })
    }
}

/// The answer to SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupResponse {
    /// Outcome.
    pub status: Status,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol.
    pub protocol: String,
    /// This member's assignment.
    pub assignment: Bytes,
}

impl SyncGroupResponse {
    /// An error answer.
    pub fn error(status: Status) -> Self {
        SyncGroupResponse { status, protocol_type: String::new(), protocol: String::new(), assignment: Bytes::new() }
    }

    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.protocol_type);
        b.put_string(&self.protocol);
        b.put_blob(&self.assignment);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(SyncGroupResponse {
            status,
            protocol_type: r.string("protocol_type")?,
            protocol: r.string("protocol")?,
            assignment: r.bytes("assignment")?,
        })
    }
}

/// A member's heartbeat (answered with its status only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupHeartbeatRequest {
    /// Who beats.
    pub member: GroupMember,
}

impl GroupHeartbeatRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        self.member.encode(b);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(GroupHeartbeatRequest { member: GroupMember::decode(r)? })
    }
}

/// Members leave a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    /// Group id.
    pub group: String,
    /// (member id, instance id) of each member leaving; a static member may give only its
    /// instance id.
    pub members: Vec<(String, Option<String>)>,
}

impl LeaveGroupRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_i32(self.members.len() as i32);
        for (member, instance) in &self.members {
            b.put_string(member);
            b.put_nullable_string(instance.as_deref());
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let n = r.array_len("members", 4)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push((r.string("member_id")?, r.nullable_string("instance_id")?));
        }
        Ok(LeaveGroupRequest { group, members })
    }
}

/// The answer to LeaveGroup: a status per member, in the request's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupResponse {
    /// Outcome of the request as a whole.
    pub status: Status,
    /// Per member.
    pub members: Vec<Status>,
}

impl LeaveGroupResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        put_statuses(b, &self.members);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(LeaveGroupResponse { status, members: get_statuses(r, "members")? })
    }
}

/// One partition's offset in a commit or a fetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The next offset to consume (-1 in a fetch answer: none committed).
    pub offset: i64,
    /// Leader epoch of the last record consumed (-1: unknown).
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: Option<String>,
}

impl PartitionOffset {
    /// Append `offsets` as a counted list (the coordinator's journal records them so too).
    pub fn encode_list(offsets: &[PartitionOffset], b: &mut BytesMut) {
        b.put_i32(offsets.len() as i32);
        for o in offsets {
            b.put_string(&o.topic);
            b.put_i32(o.partition);
            b.put_i64(o.offset);
            b.put_i32(o.leader_epoch);
            b.put_nullable_string(o.metadata.as_deref());
        }
    }

    /// Read a list written by [`PartitionOffset::encode_list`].
    pub fn decode_list(r: &mut Reader) -> Result<Vec<PartitionOffset>, DecodeError> {
        let n = r.array_len("offsets", 20)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(PartitionOffset {
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
                offset: r.i64("offset")?,
                leader_epoch: r.i32("leader_epoch")?,
                metadata: r.nullable_string("metadata")?,
            });
        }
        Ok(out)
    }
}

/// A list of statuses (one per item of a request, in its order).
fn put_statuses(b: &mut BytesMut, statuses: &[Status]) {
    b.put_i32(statuses.len() as i32);
    for s in statuses {
        s.encode(b);
    }
}

fn get_statuses(r: &mut Reader, field: &'static str) -> Result<Vec<Status>, DecodeError> {
    let n = r.array_len(field, 4)?;
    (0..n).map(|_| Status::decode(r)).collect()
}

/// A list of strings (group ids).
fn put_strings(b: &mut BytesMut, strings: &[String]) {
    b.put_i32(strings.len() as i32);
    for s in strings {
        b.put_string(s);
    }
}

fn get_strings(r: &mut Reader, field: &'static str) -> Result<Vec<String>, DecodeError> {
    let n = r.array_len(field, 2)?;
    (0..n).map(|_| r.string(field)).collect()
}

fn put_offsets(b: &mut BytesMut, offsets: &[PartitionOffset]) {
    PartitionOffset::encode_list(offsets, b)
}

fn get_offsets(r: &mut Reader) -> Result<Vec<PartitionOffset>, DecodeError> {
    PartitionOffset::decode_list(r)
}

/// The transaction a TxnOffsetCommit stages its offsets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOwner {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
}

/// Commit offsets for a group: at once (OffsetCommit), or staged in a transaction
/// (TxnOffsetCommit, `txn` set) until its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    /// Who commits (generation -1 and no member id: a standalone commit).
    pub member: GroupMember,
    /// The transaction, for TxnOffsetCommit.
    pub txn: Option<TxnOwner>,
    /// The offsets.
    pub offsets: Vec<PartitionOffset>,
}

impl OffsetCommitRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        self.member.encode(b);
        match &self.txn {
            Some(t) => {
                b.put_bool(true);
                b.put_string(&t.transactional_id);
                b.put_i64(t.producer_id);
                b.put_i16(t.producer_epoch);
            }
            None => b.put_bool(false),
        }
        put_offsets(b, &self.offsets);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let member = GroupMember::decode(r)?;
        let txn = if r.bool("txn")? {
            Some(TxnOwner {
                transactional_id: r.string("transactional_id")?,
                producer_id: r.i64("producer_id")?,
                producer_epoch: r.i16("producer_epoch")?,
            })
        } else {
            None
        };
        Ok(OffsetCommitRequest { member, txn, offsets: get_offsets(r)? })
    }
}

/// The committed offsets of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequest {
    /// Group id.
    pub group: String,
    /// The partitions asked, or none for every partition with a committed offset.
    pub partitions: Option<Vec<(String, i32)>>,
    /// Answer UNSTABLE_OFFSET_COMMIT for a partition an open transaction holds offsets for.
    pub require_stable: bool,
}

impl OffsetFetchRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        match &self.partitions {
            Some(ps) => {
                b.put_i32(ps.len() as i32);
                for (topic, partition) in ps {
                    b.put_string(topic);
                    b.put_i32(*partition);
                }
            }
            None => b.put_i32(-1),
        }
        b.put_bool(self.require_stable);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let partitions = match r.i32("partitions")? {
            -1 => None,
            n if n < 0 => return Err(DecodeError::InvalidLength { field: "partitions", len: n.into() }),
            n => {
                let n = usize::try_from(n).unwrap_or(0);
                if n > r.remaining() / 6 {
                    return Err(DecodeError::InvalidLength { field: "partitions", len: n as i64 });
                }
                let mut ps = Vec::with_capacity(n);
                for _ in 0..n {
                    ps.push((r.string("topic")?, r.i32("partition")?));
                }
                Some(ps)
            }
        };
        Ok(OffsetFetchRequest { group, partitions, require_stable: r.bool("require_stable")? })
    }
}

/// The answer to an offset commit (a status per partition, in the request's order) or fetch
/// (each partition's offset and status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsResponse {
    /// Outcome of the request as a whole.
    pub status: Status,
    /// Per partition: its offset (fetch) and status.
    pub partitions: Vec<(PartitionOffset, Status)>,
}

impl OffsetsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.partitions.len() as i32);
        for (o, s) in &self.partitions {
            put_offsets(b, std::slice::from_ref(o));
            s.encode(b);
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("partitions", 24)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            let o = get_offsets(r)?.pop().ok_or(DecodeError::InvalidValue {
                field: "partitions",
                detail: "a partition without its offset".into(),
            })?;
            partitions.push((o, Status::decode(r)?));
        }
        Ok(OffsetsResponse { status, partitions })
    }
}

/// AddOffsetsToTxn: the producer's open transaction (which this opens if none is) will carry
/// offsets for `group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsRequest {
    /// The transaction.
    pub txn: TxnOwner,
    /// Group id.
    pub group: String,
}

impl AddOffsetsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.txn.transactional_id);
        b.put_i64(self.txn.producer_id);
        b.put_i16(self.txn.producer_epoch);
        b.put_string(&self.group);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AddOffsetsRequest {
            txn: TxnOwner {
                transactional_id: r.string("transactional_id")?,
                producer_id: r.i64("producer_id")?,
                producer_epoch: r.i16("producer_epoch")?,
            },
            group: r.string("group")?,
        })
    }
}

/// Groups as they stand (empty `groups`: every group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
}

impl DescribeGroupsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        put_strings(b, &self.groups);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DescribeGroupsRequest { groups: get_strings(r, "groups")? })
    }
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMemberState {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
    /// Its assignment.
    pub assignment: Bytes,
}

/// A described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupState {
    /// Group id.
    pub group: String,
    /// Kafka's state name: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`, or
    /// `Dead` for a group that does not exist.
    pub state: String,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol.
    pub protocol: String,
    /// Generation.
    pub generation: i32,
    /// The leader's member id.
    pub leader: String,
    /// Members.
    pub members: Vec<GroupMemberState>,
    /// Committed offsets.
    pub offsets: Vec<PartitionOffset>,
    /// A KIP-848 consumer group's epochs and members (`protocol_type` `consumer`, `members`
    /// listing the same members by id); `None` for a classic group.
    pub consumer: Option<super::ConsumerGroupState>,
}

/// The answer to DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupsResponse {
    /// Outcome.
    pub status: Status,
    /// The groups.
    pub groups: Vec<GroupState>,
}

impl DescribeGroupsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_i32(self.groups.len() as i32);
        for g in &self.groups {
            b.put_string(&g.group);
            b.put_string(&g.state);
            b.put_string(&g.protocol_type);
            b.put_string(&g.protocol);
            b.put_i32(g.generation);
            b.put_string(&g.leader);
            b.put_i32(g.members.len() as i32);
            for m in &g.members {
                b.put_string(&m.member_id);
                b.put_nullable_string(m.instance_id.as_deref());
                b.put_string(&m.client_id);
                b.put_string(&m.client_host);
                b.put_blob(&m.metadata);
                b.put_blob(&m.assignment);
            }
            put_offsets(b, &g.offsets);
            b.put_bool(g.consumer.is_some());
            if let Some(c) = &g.consumer {
                c.encode(b);
            }
        }
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.array_len("groups", 28)?;
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            let group = r.string("group")?;
            let state = r.string("state")?;
            let protocol_type = r.string("protocol_type")?;
            let protocol = r.string("protocol")?;
            let generation = r.i32("generation")?;
            let leader = r.string("leader")?;
            let m = r.array_len("members", 18)?;
            let mut members = Vec::with_capacity(m);
            for _ in 0..m {
                members.push(GroupMemberState {
                    member_id: r.string("member_id")?,
                    instance_id: r.nullable_string("instance_id")?,
                    client_id: r.string("client_id")?,
                    client_host: r.string("client_host")?,
                    metadata: r.bytes("metadata")?,
                    assignment: r.bytes("assignment")?,
                });
            }
            let offsets = get_offsets(r)?;
            let consumer = if r.bool("consumer")? { Some(super::ConsumerGroupState::decode(r)?) } else { None };
            groups.push(GroupState {
                group,
                state,
                protocol_type,
                protocol,
                generation,
                leader,
                members,
                offsets,
                consumer,
            });
        }
        Ok(DescribeGroupsResponse { status, groups })
    }
}

/// Delete groups, each with its committed offsets and the offsets open transactions staged for
/// it (Kafka's DeleteGroups). Only a group without members is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
}

impl DeleteGroupsRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        put_strings(b, &self.groups);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DeleteGroupsRequest { groups: get_strings(r, "groups")? })
    }
}

/// The answer to DeleteGroups: a status per group, in the request's order (OK, NON_EMPTY_GROUP,
/// GROUP_ID_NOT_FOUND, INVALID_GROUP_ID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteGroupsResponse {
    /// Outcome of the request as a whole.
    pub status: Status,
    /// Per group.
    pub groups: Vec<Status>,
}

impl DeleteGroupsResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        put_statuses(b, &self.groups);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DeleteGroupsResponse { status, groups: get_statuses(r, "groups")? })
    }
}

/// Delete a group's committed offsets of some partitions (Kafka's OffsetDelete, KIP-496): only
/// of topics no member of the group is subscribed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteRequest {
    /// Group id.
    pub group: String,
    /// (topic, partition) pairs.
    pub partitions: Vec<(String, i32)>,
}

impl OffsetDeleteRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.group);
        b.put_i32(self.partitions.len() as i32);
        for (topic, partition) in &self.partitions {
            b.put_string(topic);
            b.put_i32(*partition);
        }
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let n = r.array_len("partitions", 6)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push((r.string("topic")?, r.i32("partition")?));
        }
        Ok(OffsetDeleteRequest { group, partitions })
    }
}

/// The answer to OffsetDelete: the group's outcome (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...)
/// and, when it is OK, a status per partition in the request's order (OK, whether or not an
/// offset was held; GROUP_SUBSCRIBED_TO_TOPIC; UNKNOWN_TOPIC_OR_PARTITION).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteResponse {
    /// The group's outcome.
    pub status: Status,
    /// Per partition.
    pub partitions: Vec<Status>,
}

impl OffsetDeleteResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        put_statuses(b, &self.partitions);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(OffsetDeleteResponse { status, partitions: get_statuses(r, "partitions")? })
    }
}
