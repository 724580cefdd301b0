//! Requests and responses, and their pure encode and decode.
//!
//! A request frame is `api_key i16, api_version i16, correlation_id i32, body`; a response
//! frame is `correlation_id i32, api_key i16, body`, where api key -1 is [`Response::Error`]
//! (the reply to a request that could not be decoded). Every response body starts with a
//! [`Status`]. docs/PROTOCOL.md gives the byte layouts.
//!
//! One file per request family (`produce`, `txn`, `cluster`, `replicate`, `auth`) holds its
//! structs and their field-by-field `encode_body` and `decode_body`; this module holds the
//! frame headers, [`Status`], the [`Request`] and [`Response`] enums and the functions that
//! dispatch on them, and re-exports every family's items.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{Reader, WriteExt};
use crate::{DecodeError, ErrorCode};

mod auth;
mod cluster;
mod consumer_group;
mod group;
mod produce;
mod replicate;
mod txn;

pub use auth::*;
pub use cluster::*;
pub use consumer_group::*;
pub use group::*;
pub use produce::*;
pub use replicate::*;
pub use txn::*;

/// Api keys; Kafka's numbers where the meaning matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum ApiKey {
    /// Append a record batch to a partition (client -> leader).
    Produce = 0,
    /// Read batches from a partition (client -> leader).
    Fetch = 1,
    /// Brokers, topics, partitions, leaders and leader epochs (client -> coordinator).
    Metadata = 3,
    /// Ask for a cluster-membership challenge (Kafka's SaslHandshake number).
    AuthBegin = 17,
    /// Create a topic (admin -> coordinator).
    CreateTopics = 19,
    /// Delete a topic (admin -> coordinator).
    DeleteTopics = 20,
    /// Give a topic more partitions (admin -> coordinator).
    CreatePartitions = 37,
    /// Move a partition's log start forward (admin or Kafka listener -> leader).
    DeleteRecords = 21,
    /// Change a topic's configs (admin, or a broker relaying Kafka's IncrementalAlterConfigs or
    /// AlterConfigs -> coordinator).
    AlterConfigs = 44,
    /// Get a producer id and epoch; bumps and fences for a known transactional id.
    InitProducerId = 22,
    /// Producer -> coordinator: commit or abort the current transaction.
    EndTxn = 26,
    /// Answer the challenge with a membership proof (Kafka's SaslAuthenticate number).
    AuthProve = 36,
    /// Admin -> coordinator: elect a partition's leader again, under a new leader epoch.
    ElectLeaders = 43,
    /// Move a partition's replicas to other brokers, or cancel a move (admin, or a broker
    /// relaying Kafka's AlterPartitionReassignments -> coordinator).
    AlterPartitionReassignments = 45,
    /// The partitions being moved (admin, or a broker relaying Kafka's
    /// ListPartitionReassignments -> coordinator).
    ListPartitionReassignments = 46,
    /// Leader or producer -> coordinator: register a partition under a producer's epoch before
    /// its first write there (Kafka's AddPartitionsToTxn, and KIP-890 verification by leaders).
    AddPartitionsToTxn = 24,
    /// Coordinator -> leader: write a control marker at a producer's epoch.
    WriteTxnMarkers = 27,
    /// Leader -> coordinator: change a partition's in-sync replica set, under the leader's epoch.
    AlterPartition = 56,
    /// Broker -> coordinator: register or renew the lease; answers with the broker's replicas.
    BrokerHeartbeat = 63,
    /// Leader -> follower: replicate batches, tagged with the leader epoch.
    Replicate = 1001,
    /// Admin -> coordinator: brokers, partitions and transactional ids.
    Describe = 1000,
    /// Join a consumer group (Kafka listener -> coordinator).
    JoinGroup = 11,
    /// A group member's heartbeat.
    GroupHeartbeat = 12,
    /// A KIP-848 consumer group member's heartbeat: join, beat, acknowledge, leave (Kafka
    /// listener -> coordinator).
    ConsumerGroupHeartbeat = 68,
    /// Members leave a group.
    LeaveGroup = 13,
    /// The group leader's assignment, and every member's share of it.
    SyncGroup = 14,
    /// Groups as they stand (Kafka's DescribeGroups and ListGroups).
    DescribeGroups = 15,
    /// Delete empty groups with their offsets (admin, or a broker relaying Kafka's DeleteGroups).
    DeleteGroups = 42,
    /// Delete a group's committed offsets of some partitions (Kafka's OffsetDelete).
    OffsetDelete = 47,
    /// Commit a group's offsets, at once or staged in a transaction (TxnOffsetCommit).
    OffsetCommit = 8,
    /// A group's committed offsets.
    OffsetFetch = 9,
    /// A transaction will carry a group's offsets (opens it if none is open).
    AddOffsetsToTxn = 25,
    /// Create and delete ACLs, and read them all (admin, or a broker relaying Kafka's
    /// CreateAcls and DeleteAcls -> coordinator).
    Acls = 30,
    /// Create, replace and delete SCRAM credentials, and read them all (admin, or a broker
    /// relaying Kafka's AlterUserScramCredentials -> coordinator; KIP-554).
    ScramCredentials = 51,
    /// Client -> broker or coordinator: log in as a user (SCRAM), so the ACLs decide what the
    /// connection may do.
    SaslLogin = 1002,
}

impl ApiKey {
    /// Decode a wire api key.
    pub fn from_i16(k: i16) -> Option<ApiKey> {
        Some(match k {
            0 => ApiKey::Produce,
            1 => ApiKey::Fetch,
            3 => ApiKey::Metadata,
            17 => ApiKey::AuthBegin,
            19 => ApiKey::CreateTopics,
            20 => ApiKey::DeleteTopics,
            37 => ApiKey::CreatePartitions,
            21 => ApiKey::DeleteRecords,
            44 => ApiKey::AlterConfigs,
            22 => ApiKey::InitProducerId,
            26 => ApiKey::EndTxn,
            36 => ApiKey::AuthProve,
            43 => ApiKey::ElectLeaders,
            45 => ApiKey::AlterPartitionReassignments,
            46 => ApiKey::ListPartitionReassignments,
            24 => ApiKey::AddPartitionsToTxn,
            27 => ApiKey::WriteTxnMarkers,
            56 => ApiKey::AlterPartition,
            63 => ApiKey::BrokerHeartbeat,
            1001 => ApiKey::Replicate,
            1000 => ApiKey::Describe,
            11 => ApiKey::JoinGroup,
            12 => ApiKey::GroupHeartbeat,
            68 => ApiKey::ConsumerGroupHeartbeat,
            13 => ApiKey::LeaveGroup,
            14 => ApiKey::SyncGroup,
            15 => ApiKey::DescribeGroups,
            42 => ApiKey::DeleteGroups,
            47 => ApiKey::OffsetDelete,
            8 => ApiKey::OffsetCommit,
            9 => ApiKey::OffsetFetch,
            25 => ApiKey::AddOffsetsToTxn,
            30 => ApiKey::Acls,
            51 => ApiKey::ScramCredentials,
            1002 => ApiKey::SaslLogin,
            _ => return None,
        })
    }
}

/// The only api version this build speaks.
pub const API_VERSION: i16 = 0;
/// The api key of [`Response::Error`].
pub const ERROR_RESPONSE_KEY: i16 = -1;
/// Longest error message sent, in bytes; longer ones are cut at a character boundary.
pub const MESSAGE_BYTES_MAX: usize = 1024;

/// An error code with a human message; `ErrorCode::None` and an empty message for success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: ErrorCode,
    /// What happened and what to do about it.
    pub message: String,
}

impl Status {
    /// Success.
    pub fn ok() -> Status {
        Status { code: ErrorCode::None, message: String::new() }
    }

    /// An error with a message (cut to [`MESSAGE_BYTES_MAX`]).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Status {
        let mut message = message.into();
        if message.len() > MESSAGE_BYTES_MAX {
            let mut cut = MESSAGE_BYTES_MAX;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        Status { code, message }
    }

    /// Whether this is success.
    pub fn is_ok(&self) -> bool {
        self.code == ErrorCode::None
    }

    pub(crate) fn encode(&self, b: &mut BytesMut) {
        b.put_i16(self.code.code());
        b.put_nullable_string(if self.message.is_empty() { None } else { Some(&self.message) });
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Status, DecodeError> {
        let code = ErrorCode::from_code(r.i16("error_code")?);
        let message = r.nullable_string("error_message")?.unwrap_or_default();
        Ok(Status { code, message })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code.name())
        } else {
            write!(f, "{}: {}", self.code.name(), self.message)
        }
    }
}

/// A request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// See [`ProduceRequest`].
    Produce(ProduceRequest),
    /// See [`FetchRequest`].
    Fetch(FetchRequest),
    /// See [`MetadataRequest`].
    Metadata(MetadataRequest),
    /// See [`CreateTopicRequest`].
    CreateTopic(CreateTopicRequest),
    /// See [`DeleteTopicRequest`].
    DeleteTopic(DeleteTopicRequest),
    /// See [`CreatePartitionsRequest`].
    CreatePartitions(CreatePartitionsRequest),
    /// See [`InitProducerIdRequest`].
    InitProducerId(InitProducerIdRequest),
    /// See [`EndTxnRequest`].
    EndTxn(EndTxnRequest),
    /// See [`ElectLeaderRequest`].
    ElectLeader(ElectLeaderRequest),
    /// See [`DeleteRecordsRequest`].
    DeleteRecords(DeleteRecordsRequest),
    /// See [`AlterConfigsRequest`].
    AlterConfigs(AlterConfigsRequest),
    /// See [`ReassignRequest`].
    Reassign(ReassignRequest),
    /// See [`ListReassignmentsRequest`].
    ListReassignments(ListReassignmentsRequest),
    /// See [`AuthBeginRequest`].
    AuthBegin(AuthBeginRequest),
    /// See [`AuthProveRequest`].
    AuthProve(AuthProveRequest),
    /// See [`AddPartitionRequest`].
    AddPartition(AddPartitionRequest),
    /// See [`WriteMarkerRequest`].
    WriteMarker(WriteMarkerRequest),
    /// See [`HeartbeatRequest`].
    Heartbeat(HeartbeatRequest),
    /// See [`ReplicateRequest`].
    Replicate(ReplicateRequest),
    /// See [`AlterPartitionRequest`].
    AlterPartition(AlterPartitionRequest),
    /// Admin describe (no fields).
    Describe,
    /// See [`JoinGroupRequest`].
    JoinGroup(JoinGroupRequest),
    /// See [`SyncGroupRequest`].
    SyncGroup(SyncGroupRequest),
    /// See [`GroupHeartbeatRequest`].
    GroupHeartbeat(GroupHeartbeatRequest),
    /// See [`ConsumerHeartbeatRequest`].
    ConsumerHeartbeat(ConsumerHeartbeatRequest),
    /// See [`LeaveGroupRequest`].
    LeaveGroup(LeaveGroupRequest),
    /// See [`OffsetCommitRequest`].
    OffsetCommit(OffsetCommitRequest),
    /// See [`OffsetFetchRequest`].
    OffsetFetch(OffsetFetchRequest),
    /// See [`AddOffsetsRequest`].
    AddOffsets(AddOffsetsRequest),
    /// See [`AclsRequest`].
    Acls(AclsRequest),
    /// See [`ScramCredentialsRequest`].
    ScramCredentials(ScramCredentialsRequest),
    /// See [`DescribeGroupsRequest`].
    DescribeGroups(DescribeGroupsRequest),
    /// See [`DeleteGroupsRequest`].
    DeleteGroups(DeleteGroupsRequest),
    /// See [`OffsetDeleteRequest`].
    OffsetDelete(OffsetDeleteRequest),
    /// See [`SaslLoginRequest`].
    SaslLogin(SaslLoginRequest),
}

/// A response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// See [`ProduceResponse`].
    Produce(ProduceResponse),
    /// See [`FetchResponse`].
    Fetch(FetchResponse),
    /// See [`MetadataResponse`].
    Metadata(MetadataResponse),
    /// Status only.
    CreateTopic(Status),
    /// Status only.
    DeleteTopic(Status),
    /// Status only.
    CreatePartitions(Status),
    /// See [`InitProducerIdResponse`].
    InitProducerId(InitProducerIdResponse),
    /// See [`EndTxnResponse`].
    EndTxn(EndTxnResponse),
    /// See [`ElectLeaderResponse`].
    ElectLeader(ElectLeaderResponse),
    /// See [`DeleteRecordsResponse`].
    DeleteRecords(DeleteRecordsResponse),
    /// The outcome of an AlterConfigs.
    AlterConfigs(Status),
    /// The outcome of a reassignment (started, completed at once, or cancelled).
    Reassign(Status),
    /// See [`ListReassignmentsResponse`].
    ListReassignments(ListReassignmentsResponse),
    /// See [`AuthBeginResponse`].
    AuthBegin(AuthBeginResponse),
    /// See [`AuthProveResponse`].
    AuthProve(AuthProveResponse),
    /// See [`AddPartitionResponse`].
    AddPartition(AddPartitionResponse),
    /// See [`WriteMarkerResponse`].
    WriteMarker(WriteMarkerResponse),
    /// See [`HeartbeatResponse`].
    Heartbeat(HeartbeatResponse),
    /// See [`ReplicateResponse`].
    Replicate(ReplicateResponse),
    /// See [`AlterPartitionResponse`].
    AlterPartition(AlterPartitionResponse),
    /// See [`DescribeResponse`].
    Describe(DescribeResponse),
    /// See [`JoinGroupResponse`].
    JoinGroup(JoinGroupResponse),
    /// See [`SyncGroupResponse`].
    SyncGroup(SyncGroupResponse),
    /// Status only.
    GroupHeartbeat(Status),
    /// See [`ConsumerHeartbeatResponse`].
    ConsumerHeartbeat(ConsumerHeartbeatResponse),
    /// See [`LeaveGroupResponse`].
    LeaveGroup(LeaveGroupResponse),
    /// A status per partition.
    OffsetCommit(OffsetsResponse),
    /// Each partition's offset and status.
    OffsetFetch(OffsetsResponse),
    /// Status only.
    AddOffsets(Status),
    /// See [`AclsResponse`].
    Acls(AclsResponse),
    /// See [`ScramCredentialsResponse`].
    ScramCredentials(ScramCredentialsResponse),
    /// See [`DescribeGroupsResponse`].
    DescribeGroups(DescribeGroupsResponse),
    /// See [`DeleteGroupsResponse`].
    DeleteGroups(DeleteGroupsResponse),
    /// See [`OffsetDeleteResponse`].
    OffsetDelete(OffsetDeleteResponse),
    /// See [`SaslLoginResponse`].
    SaslLogin(SaslLoginResponse),
    /// The reply to a request that could not be decoded or served at all.
    Error(Status),
}

impl Request {
    /// This request's api key.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::Produce(_) => ApiKey::Produce,
            Request::Fetch(_) => ApiKey::Fetch,
            Request::Metadata(_) => ApiKey::Metadata,
            Request::CreateTopic(_) => ApiKey::CreateTopics,
            Request::DeleteTopic(_) => ApiKey::DeleteTopics,
            Request::CreatePartitions(_) => ApiKey::CreatePartitions,
            Request::InitProducerId(_) => ApiKey::InitProducerId,
            Request::EndTxn(_) => ApiKey::EndTxn,
            Request::ElectLeader(_) => ApiKey::ElectLeaders,
            Request::DeleteRecords(_) => ApiKey::DeleteRecords,
            Request::AlterConfigs(_) => ApiKey::AlterConfigs,
            Request::Reassign(_) => ApiKey::AlterPartitionReassignments,
            Request::ListReassignments(_) => ApiKey::ListPartitionReassignments,
            Request::AuthBegin(_) => ApiKey::AuthBegin,
            Request::AuthProve(_) => ApiKey::AuthProve,
            Request::AddPartition(_) => ApiKey::AddPartitionsToTxn,
            Request::WriteMarker(_) => ApiKey::WriteTxnMarkers,
            Request::Heartbeat(_) => ApiKey::BrokerHeartbeat,
            Request::Replicate(_) => ApiKey::Replicate,
            Request::AlterPartition(_) => ApiKey::AlterPartition,
            Request::Describe => ApiKey::Describe,
            Request::JoinGroup(_) => ApiKey::JoinGroup,
            Request::SyncGroup(_) => ApiKey::SyncGroup,
            Request::GroupHeartbeat(_) => ApiKey::GroupHeartbeat,
            Request::ConsumerHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat,
            Request::LeaveGroup(_) => ApiKey::LeaveGroup,
            Request::OffsetCommit(_) => ApiKey::OffsetCommit,
            Request::OffsetFetch(_) => ApiKey::OffsetFetch,
            Request::AddOffsets(_) => ApiKey::AddOffsetsToTxn,
            Request::Acls(_) => ApiKey::Acls,
            Request::ScramCredentials(_) => ApiKey::ScramCredentials,
            Request::DescribeGroups(_) => ApiKey::DescribeGroups,
            Request::DeleteGroups(_) => ApiKey::DeleteGroups,
            Request::OffsetDelete(_) => ApiKey::OffsetDelete,
            Request::SaslLogin(_) => ApiKey::SaslLogin,
        }
    }
}

impl Request {
    /// Requests only cluster members may send when the cluster has a secret: replication,
    /// markers, ISR changes and broker heartbeats (which register brokers and hand out
    /// leaderships), and the admin requests a client could use to hurt the cluster: creating
    /// topics and partitions (each partition costs every replica a log), deleting topics, and
    /// electing leaders (each election bumps a leader epoch, failing the acks=all writes in
    /// flight), changing ACLs and credentials, deleting groups and their offsets (a
    /// consumer group's position is its state) and deleting records. An admin proves it holds
    /// the secret as brokers do.
    pub fn is_internal(&self) -> bool {
        self.is_member_traffic()
            || matches!(
                self,
                Request::CreateTopic(_)
                    | Request::DeleteTopic(_)
                    | Request::CreatePartitions(_)
                    | Request::ElectLeader(_)
                    | Request::DeleteRecords(_)
                    | Request::AlterConfigs(_)
                    | Request::Reassign(_)
                    | Request::Acls(_)
                    | Request::ScramCredentials(_)
                    | Request::DeleteGroups(_)
                    | Request::OffsetDelete(_)
            )
    }

    /// The cluster members' own traffic: replication, markers, ISR changes and broker
    /// heartbeats (what the room kept for members serves, `net::ServerLimits`).
    pub fn is_member_traffic(&self) -> bool {
        matches!(
            self,
            Request::Replicate(_) | Request::WriteMarker(_) | Request::AlterPartition(_) | Request::Heartbeat(_)
        )
    }
}

impl Response {
    /// The api key written in the response header (-1 for [`Response::Error`]).
    pub fn api_key(&self) -> i16 {
        match self {
            Response::Produce(_) => ApiKey::Produce as i16,
            Response::Fetch(_) => ApiKey::Fetch as i16,
            Response::Metadata(_) => ApiKey::Metadata as i16,
            Response::CreateTopic(_) => ApiKey::CreateTopics as i16,
            Response::DeleteTopic(_) => ApiKey::DeleteTopics as i16,
            Response::CreatePartitions(_) => ApiKey::CreatePartitions as i16,
            Response::InitProducerId(_) => ApiKey::InitProducerId as i16,
            Response::EndTxn(_) => ApiKey::EndTxn as i16,
            Response::ElectLeader(_) => ApiKey::ElectLeaders as i16,
            Response::DeleteRecords(_) => ApiKey::DeleteRecords as i16,
            Response::AlterConfigs(_) => ApiKey::AlterConfigs as i16,
            Response::Reassign(_) => ApiKey::AlterPartitionReassignments as i16,
            Response::ListReassignments(_) => ApiKey::ListPartitionReassignments as i16,
            Response::AuthBegin(_) => ApiKey::AuthBegin as i16,
            Response::AuthProve(_) => ApiKey::AuthProve as i16,
            Response::AddPartition(_) => ApiKey::AddPartitionsToTxn as i16,
            Response::WriteMarker(_) => ApiKey::WriteTxnMarkers as i16,
            Response::Heartbeat(_) => ApiKey::BrokerHeartbeat as i16,
            Response::Replicate(_) => ApiKey::Replicate as i16,
            Response::AlterPartition(_) => ApiKey::AlterPartition as i16,
            Response::Describe(_) => ApiKey::Describe as i16,
            Response::JoinGroup(_) => ApiKey::JoinGroup as i16,
            Response::SyncGroup(_) => ApiKey::SyncGroup as i16,
            Response::GroupHeartbeat(_) => ApiKey::GroupHeartbeat as i16,
            Response::ConsumerHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat as i16,
            Response::LeaveGroup(_) => ApiKey::LeaveGroup as i16,
            Response::OffsetCommit(_) => ApiKey::OffsetCommit as i16,
            Response::OffsetFetch(_) => ApiKey::OffsetFetch as i16,
            Response::AddOffsets(_) => ApiKey::AddOffsetsToTxn as i16,
            Response::Acls(_) => ApiKey::Acls as i16,
            Response::ScramCredentials(_) => ApiKey::ScramCredentials as i16,
            Response::DescribeGroups(_) => ApiKey::DescribeGroups as i16,
            Response::DeleteGroups(_) => ApiKey::DeleteGroups as i16,
            Response::OffsetDelete(_) => ApiKey::OffsetDelete as i16,
            Response::SaslLogin(_) => ApiKey::SaslLogin as i16,
            Response::Error(_) => ERROR_RESPONSE_KEY,
        }
    }

    /// The status every response carries.
    pub fn status(&self) -> &Status {
        match self {
            Response::Produce(r) => &r.status,
            Response::Fetch(r) => &r.status,
            Response::Metadata(r) => &r.status,
            Response::CreateTopic(s)
            | Response::DeleteTopic(s)
            | Response::CreatePartitions(s)
            | Response::AlterConfigs(s)
            | Response::Reassign(s) => s,
            Response::ListReassignments(r) => &r.status,
            Response::InitProducerId(r) => &r.status,
            Response::EndTxn(r) => &r.status,
            Response::ElectLeader(r) => &r.status,
            Response::DeleteRecords(r) => &r.status,
            Response::AuthBegin(r) => &r.status,
            Response::AuthProve(r) => &r.status,
            Response::SaslLogin(r) => &r.status,
            Response::AddPartition(r) => &r.status,
            Response::WriteMarker(r) => &r.status,
            Response::Heartbeat(r) => &r.status,
            Response::Replicate(r) => &r.status,
            Response::AlterPartition(r) => &r.status,
            Response::Describe(r) => &r.status,
            Response::JoinGroup(r) => &r.status,
            Response::SyncGroup(r) => &r.status,
            Response::GroupHeartbeat(s) | Response::AddOffsets(s) => s,
            Response::LeaveGroup(r) => &r.status,
            Response::ConsumerHeartbeat(r) => &r.status,
            Response::OffsetCommit(r) | Response::OffsetFetch(r) => &r.status,
            Response::DescribeGroups(r) => &r.status,
            Response::DeleteGroups(r) => &r.status,
            Response::OffsetDelete(r) => &r.status,
            Response::Acls(r) => &r.status,
            Response::ScramCredentials(r) => &r.status,
            Response::Error(s) => s,
        }
    }
}

/// Encode a request frame body (without the length prefix).
pub fn encode_request(correlation_id: i32, req: &Request) -> Bytes {
    let mut b = BytesMut::with_capacity(request_size_hint(req));
    encode_request_into(correlation_id, req, &mut b);
    b.freeze()
}

/// About how many bytes a request's body takes (enough for every large field).
pub fn request_size_hint(req: &Request) -> usize {
    match req {
        Request::Produce(p) => 64 + p.topic.len() + p.records.len(),
        Request::Replicate(p) => 64 + p.topic.len() + p.producer_state.len() + p.records.len(),
        _ => 128,
    }
}

/// Append a request frame body (without the length prefix) to `b`: the codec writes it
/// straight into the connection's write buffer, so a batch is copied once on the way out.
pub fn encode_request_into(correlation_id: i32, req: &Request, b: &mut BytesMut) {
    encode_request_head(correlation_id, req, b);
    for piece in request_payload(req) {
        b.put_slice(piece);
    }
}

/// The bytes a request's body ends with that a writer may send from where they are, after
/// [`encode_request_head`], instead of copying them: a Produce request's batch and a
/// Replicate's batches (the length before them is in the head). Empty for other requests.
pub fn request_payload(req: &Request) -> &[Bytes] {
    match req {
        Request::Produce(p) => p.payload(),
        Request::Replicate(r) => r.payload(),
        _ => &[],
    }
}

/// Append a request frame body (without the length prefix) to `b`, all but its
/// [`request_payload`].
pub fn encode_request_head(correlation_id: i32, req: &Request, b: &mut BytesMut) {
    b.put_i16(req.api_key() as i16);
    b.put_i16(API_VERSION);
    b.put_i32(correlation_id);
    match req {
        Request::Produce(p) => p.encode_head(b), // the payload follows
        Request::Fetch(f) => f.encode_body(b),
        Request::Metadata(m) => m.encode_body(b),
        Request::CreateTopic(c) => c.encode_body(b),
        Request::DeleteTopic(d) => d.encode_body(b),
        Request::CreatePartitions(c) => c.encode_body(b),
        Request::InitProducerId(i) => i.encode_body(b),
        Request::ElectLeader(e) => e.encode_body(b),
        Request::DeleteRecords(d) => d.encode_body(b),
        Request::AlterConfigs(a) => a.encode_body(b),
        Request::Reassign(r) => r.encode_body(b),
        Request::ListReassignments(l) => l.encode_body(b),
        Request::AuthBegin(a) => a.encode_body(b),
        Request::AuthProve(a) => a.encode_body(b),
        Request::SaslLogin(a) => a.encode_body(b),
        Request::EndTxn(e) => e.encode_body(b),
        Request::AddPartition(a) => a.encode_body(b),
        Request::WriteMarker(w) => w.encode_body(b),
        Request::Heartbeat(h) => h.encode_body(b),
        Request::Replicate(p) => p.encode_head(b), // the payload follows
        Request::AlterPartition(a) => a.encode_body(b),
        Request::Describe => {}
        Request::JoinGroup(j) => j.encode_body(b),
        Request::SyncGroup(g) => g.encode_body(b),
        Request::GroupHeartbeat(h) => h.encode_body(b),
        Request::ConsumerHeartbeat(h) => h.encode_body(b),
        Request::LeaveGroup(l) => l.encode_body(b),
        Request::OffsetCommit(c) => c.encode_body(b),
        Request::OffsetFetch(f) => f.encode_body(b),
        Request::AddOffsets(a) => a.encode_body(b),
        Request::Acls(a) => a.encode_body(b),
        Request::ScramCredentials(c) => c.encode_body(b),
        Request::DescribeGroups(d) => d.encode_body(b),
        Request::DeleteGroups(d) => d.encode_body(b),
        Request::OffsetDelete(d) => d.encode_body(b),
    }
}

/// The header of a request frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Api key as sent.
    pub api_key: i16,
    /// Api version as sent.
    pub api_version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
}

/// A request that could not be decoded: enough to answer it, if the header was readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    /// The header, if it could be read.
    pub header: Option<RequestHeader>,
    /// What was wrong.
    pub error: DecodeError,
}

/// Decode a request frame body (without the length prefix).
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, Request), BadRequest> {
    let mut r = Reader::new(frame);
    let header = (|| -> Result<RequestHeader, DecodeError> {
        Ok(RequestHeader {
            api_key: r.i16("api_key")?,
            api_version: r.i16("api_version")?,
            correlation_id: r.i32("correlation_id")?,
        })
    })()
    .map_err(|error| BadRequest { header: None, error })?;
    let bad = |error| BadRequest { header: Some(header), error };
    let key = ApiKey::from_i16(header.api_key).ok_or_else(|| bad(DecodeError::UnknownApiKey(header.api_key)))?;
    if header.api_version != API_VERSION {
        return Err(bad(DecodeError::UnsupportedVersion { api_key: header.api_key, version: header.api_version }));
    }
    let req = decode_request_body(key, &mut r).map_err(bad)?;
    r.finish().map_err(bad)?;
    Ok((header, req))
}

fn decode_request_body(key: ApiKey, r: &mut Reader) -> Result<Request, DecodeError> {
    Ok(match key {
        ApiKey::Produce => Request::Produce(ProduceRequest::decode_body(r)?),
        ApiKey::Fetch => Request::Fetch(FetchRequest::decode_body(r)?),
        ApiKey::Metadata => Request::Metadata(MetadataRequest::decode_body(r)?),
        ApiKey::CreateTopics => Request::CreateTopic(CreateTopicRequest::decode_body(r)?),
        ApiKey::DeleteTopics => Request::DeleteTopic(DeleteTopicRequest::decode_body(r)?),
        ApiKey::CreatePartitions => Request::CreatePartitions(CreatePartitionsRequest::decode_body(r)?),
        ApiKey::InitProducerId => Request::InitProducerId(InitProducerIdRequest::decode_body(r)?),
        ApiKey::ElectLeaders => Request::ElectLeader(ElectLeaderRequest::decode_body(r)?),
        ApiKey::DeleteRecords => Request::DeleteRecords(DeleteRecordsRequest::decode_body(r)?),
        ApiKey::AlterConfigs => Request::AlterConfigs(AlterConfigsRequest::decode_body(r)?),
        ApiKey::AlterPartitionReassignments => Request::Reassign(ReassignRequest::decode_body(r)?),
        ApiKey::ListPartitionReassignments => Request::ListReassignments(ListReassignmentsRequest::decode_body(r)?),
        ApiKey::AuthBegin => Request::AuthBegin(AuthBeginRequest::decode_body(r)?),
        ApiKey::AuthProve => Request::AuthProve(AuthProveRequest::decode_body(r)?),
        ApiKey::SaslLogin => Request::SaslLogin(SaslLoginRequest::decode_body(r)?),
        ApiKey::EndTxn => Request::EndTxn(EndTxnRequest::decode_body(r)?),
        ApiKey::AddPartitionsToTxn => Request::AddPartition(AddPartitionRequest::decode_body(r)?),
        ApiKey::WriteTxnMarkers => Request::WriteMarker(WriteMarkerRequest::decode_body(r)?),
        ApiKey::BrokerHeartbeat => Request::Heartbeat(HeartbeatRequest::decode_body(r)?),
        ApiKey::Replicate => Request::Replicate(ReplicateRequest::decode_body(r)?),
        ApiKey::AlterPartition => Request::AlterPartition(AlterPartitionRequest::decode_body(r)?),
        ApiKey::Describe => Request::Describe,
        ApiKey::JoinGroup => Request::JoinGroup(JoinGroupRequest::decode_body(r)?),
        ApiKey::SyncGroup => Request::SyncGroup(SyncGroupRequest::decode_body(r)?),
        ApiKey::GroupHeartbeat => Request::GroupHeartbeat(GroupHeartbeatRequest::decode_body(r)?),
        ApiKey::ConsumerGroupHeartbeat => Request::ConsumerHeartbeat(ConsumerHeartbeatRequest::decode_body(r)?),
        ApiKey::LeaveGroup => Request::LeaveGroup(LeaveGroupRequest::decode_body(r)?),
        ApiKey::OffsetCommit => Request::OffsetCommit(OffsetCommitRequest::decode_body(r)?),
        ApiKey::OffsetFetch => Request::OffsetFetch(OffsetFetchRequest::decode_body(r)?),
        ApiKey::AddOffsetsToTxn => Request::AddOffsets(AddOffsetsRequest::decode_body(r)?),
        ApiKey::Acls => Request::Acls(AclsRequest::decode_body(r)?),
        ApiKey::ScramCredentials => Request::ScramCredentials(ScramCredentialsRequest::decode_body(r)?),
        ApiKey::DescribeGroups => Request::DescribeGroups(DescribeGroupsRequest::decode_body(r)?),
        ApiKey::DeleteGroups => Request::DeleteGroups(DeleteGroupsRequest::decode_body(r)?),
        ApiKey::OffsetDelete => Request::OffsetDelete(OffsetDeleteRequest::decode_body(r)?),
    })
}

/// Encode a response frame body (without the length prefix).
pub fn encode_response(correlation_id: i32, resp: &Response) -> Bytes {
    let mut b = BytesMut::with_capacity(response_size_hint(resp));
    encode_response_into(correlation_id, resp, &mut b);
    b.freeze()
}

/// About how many bytes a response's body takes (enough for every large field).
pub fn response_size_hint(resp: &Response) -> usize {
    match resp {
        Response::Fetch(f) => 64 + f.records.len(),
        _ => 128,
    }
}

/// Append a response frame body (without the length prefix) to `b` (see
/// [`encode_request_into`]).
pub fn encode_response_into(correlation_id: i32, resp: &Response, b: &mut BytesMut) {
    b.put_i32(correlation_id);
    b.put_i16(resp.api_key());
    resp.status().encode(b);
    match resp {
        Response::Produce(p) => p.encode_body(b),
        Response::Fetch(f) => f.encode_body(b),
        Response::Metadata(m) => m.encode_body(b),
        Response::CreateTopic(_)
        | Response::DeleteTopic(_)
        | Response::CreatePartitions(_)
        | Response::AlterConfigs(_)
        | Response::Reassign(_)
        | Response::GroupHeartbeat(_)
        | Response::AddOffsets(_)
        | Response::Error(_) => {}
        Response::InitProducerId(i) => i.encode_body(b),
        Response::Acls(a) => a.encode_body(b),
        Response::ScramCredentials(c) => c.encode_body(b),
        Response::EndTxn(e) => e.encode_body(b),
        Response::AuthBegin(a) => a.encode_body(b),
        Response::AuthProve(a) => a.encode_body(b),
        Response::SaslLogin(a) => a.encode_body(b),
        Response::ElectLeader(e) => e.encode_body(b),
        Response::DeleteRecords(d) => d.encode_body(b),
        Response::ListReassignments(l) => l.encode_body(b),
        Response::AddPartition(a) => a.encode_body(b),
        Response::WriteMarker(w) => w.encode_body(b),
        Response::Heartbeat(h) => h.encode_body(b),
        Response::Replicate(r) => r.encode_body(b),
        Response::AlterPartition(a) => a.encode_body(b),
        Response::Describe(d) => d.encode_body(b),
        Response::JoinGroup(j) => j.encode_body(b),
        Response::SyncGroup(g) => g.encode_body(b),
        Response::LeaveGroup(l) => l.encode_body(b),
        Response::ConsumerHeartbeat(h) => h.encode_body(b),
        Response::OffsetCommit(o) | Response::OffsetFetch(o) => o.encode_body(b),
        Response::DescribeGroups(d) => d.encode_body(b),
        Response::DeleteGroups(d) => d.encode_body(b),
        Response::OffsetDelete(d) => d.encode_body(b),
    }
}

/// Decode a response frame body (without the length prefix) into its correlation id and body.
pub fn decode_response(frame: Bytes) -> Result<(i32, Response), DecodeError> {
    let mut r = Reader::new(frame);
    let correlation_id = r.i32("correlation_id")?;
    let key = r.i16("api_key")?;
    let status = Status::decode(&mut r)?;
    let resp = if key == ERROR_RESPONSE_KEY {
        Response::Error(status)
    } else {
        let key = ApiKey::from_i16(key).ok_or(DecodeError::UnknownApiKey(key))?;
        decode_response_body(key, status, &mut r)?
    };
    r.finish()?;
    Ok((correlation_id, resp))
}

fn decode_response_body(key: ApiKey, status: Status, r: &mut Reader) -> Result<Response, DecodeError> {
    Ok(match key {
        ApiKey::Produce => Response::Produce(ProduceResponse::decode_body(status, r)?),
        ApiKey::Fetch => Response::Fetch(FetchResponse::decode_body(status, r)?),
        ApiKey::Metadata => Response::Metadata(MetadataResponse::decode_body(status, r)?),
        ApiKey::CreateTopics => Response::CreateTopic(status),
        ApiKey::AlterConfigs => Response::AlterConfigs(status),
        ApiKey::AlterPartitionReassignments => Response::Reassign(status),
        ApiKey::ListPartitionReassignments => {
            Response::ListReassignments(ListReassignmentsResponse::decode_body(status, r)?)
        }
        ApiKey::DeleteTopics => Response::DeleteTopic(status),
        ApiKey::CreatePartitions => Response::CreatePartitions(status),
        ApiKey::InitProducerId => Response::InitProducerId(InitProducerIdResponse::decode_body(status, r)?),
        ApiKey::AuthBegin => Response::AuthBegin(AuthBeginResponse::decode_body(status, r)?),
        ApiKey::AuthProve => Response::AuthProve(AuthProveResponse::decode_body(status, r)?),
        ApiKey::SaslLogin => Response::SaslLogin(SaslLoginResponse::decode_body(status, r)?),
        ApiKey::EndTxn => Response::EndTxn(EndTxnResponse::decode_body(status, r)?),
        ApiKey::ElectLeaders => Response::ElectLeader(ElectLeaderResponse::decode_body(status, r)?),
        ApiKey::DeleteRecords => Response::DeleteRecords(DeleteRecordsResponse::decode_body(status, r)?),
        ApiKey::AddPartitionsToTxn => Response::AddPartition(AddPartitionResponse::decode_body(status, r)?),
        ApiKey::WriteTxnMarkers => Response::WriteMarker(WriteMarkerResponse::decode_body(status, r)?),
        ApiKey::BrokerHeartbeat => Response::Heartbeat(HeartbeatResponse::decode_body(status, r)?),
        ApiKey::Replicate => Response::Replicate(ReplicateResponse::decode_body(status, r)?),
        ApiKey::AlterPartition => Response::AlterPartition(AlterPartitionResponse::decode_body(status, r)?),
        ApiKey::Describe => Response::Describe(DescribeResponse::decode_body(status, r)?),
        ApiKey::JoinGroup => Response::JoinGroup(JoinGroupResponse::decode_body(status, r)?),
        ApiKey::SyncGroup => Response::SyncGroup(SyncGroupResponse::decode_body(status, r)?),
        ApiKey::GroupHeartbeat => Response::GroupHeartbeat(status),
        ApiKey::ConsumerGroupHeartbeat => {
            Response::ConsumerHeartbeat(ConsumerHeartbeatResponse::decode_body(status, r)?)
        }
        ApiKey::LeaveGroup => Response::LeaveGroup(LeaveGroupResponse::decode_body(status, r)?),
        ApiKey::OffsetCommit => Response::OffsetCommit(OffsetsResponse::decode_body(status, r)?),
        ApiKey::OffsetFetch => Response::OffsetFetch(OffsetsResponse::decode_body(status, r)?),
        ApiKey::AddOffsetsToTxn => Response::AddOffsets(status),
        ApiKey::Acls => Response::Acls(AclsResponse::decode_body(status, r)?),
        ApiKey::ScramCredentials => Response::ScramCredentials(ScramCredentialsResponse::decode_body(status, r)?),
        ApiKey::DescribeGroups => Response::DescribeGroups(DescribeGroupsResponse::decode_body(status, r)?),
        ApiKey::DeleteGroups => Response::DeleteGroups(DeleteGroupsResponse::decode_body(status, r)?),
        ApiKey::OffsetDelete => Response::OffsetDelete(OffsetDeleteResponse::decode_body(status, r)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl_binding() -> crate::acl::AclBinding {
        crate::acl::AclBinding {
            resource_type: crate::acl::ResourceType::TransactionalId,
            name: "payments".into(),
            pattern: crate::acl::PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: crate::acl::Operation::Write,
            permission: crate::acl::Permission::Allow,
        }
    }

    fn roundtrip_req(req: Request) {
        let frame = encode_request(42, &req);
        let (h, back) = decode_request(frame).unwrap();
        assert_eq!(h.correlation_id, 42);
        assert_eq!(back, req);
    }

    fn roundtrip_resp(resp: Response) {
        let frame = encode_response(-7, &resp);
        let (c, back) = decode_response(frame).unwrap();
        assert_eq!(c, -7);
        assert_eq!(back, resp);
    }

    #[test]
    fn every_request_roundtrips() {
        roundtrip_req(Request::Produce(ProduceRequest {
            transactional_id: None,
            topic: "t".into(),
            partition: 3,
            leader_epoch: 2,
            acks: ACKS_ALL,
            records: Bytes::from_static(b"xyz"),
        }));
        roundtrip_req(Request::Fetch(FetchRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: -1,
            offset: 9,
            max_bytes: 100,
            isolation: READ_COMMITTED,
        }));
        roundtrip_req(Request::EndTxn(EndTxnRequest {
            transactional_id: "x".into(),
            producer_id: 3,
            producer_epoch: 4,
            commit: true,
            bump_epoch: false,
        }));
        roundtrip_req(Request::Metadata(MetadataRequest {
            topics: vec!["a".into(), "b".into()],
            allow_auto_create: true,
        }));
        roundtrip_req(Request::CreateTopic(CreateTopicRequest {
            name: "n".into(),
            partitions: 4,
            replication_factor: -1,
            min_insync_replicas: 2,
            validate_only: true,
            configs: vec![("retention.ms".into(), "1000".into())],
        }));
        roundtrip_req(Request::CreateTopic(CreateTopicRequest {
            name: "n".into(),
            partitions: 4,
            replication_factor: -1,
            min_insync_replicas: 2,
            validate_only: false,
            configs: Vec::new(),
        }));
        roundtrip_req(Request::AlterConfigs(AlterConfigsRequest {
            topic: "t".into(),
            changes: vec![
                ConfigChange::Set("segment.bytes".into(), "4096".into()),
                ConfigChange::Delete("retention.ms".into()),
            ],
            replace: false,
            validate_only: true,
        }));
        roundtrip_resp(Response::AlterConfigs(Status::new(ErrorCode::InvalidConfig, "no")));
        roundtrip_req(Request::DeleteTopic(DeleteTopicRequest { name: "n".into(), topic_id: u128::MAX - 3 }));
        roundtrip_req(Request::CreatePartitions(CreatePartitionsRequest {
            name: "n".into(),
            count: 7,
            validate_only: false,
            assignments: vec![],
        }));
        roundtrip_req(Request::CreatePartitions(CreatePartitionsRequest {
            name: "n".into(),
            count: 3,
            validate_only: true,
            assignments: vec![vec![2, 1], vec![1, 3]],
        }));
        roundtrip_req(Request::InitProducerId(InitProducerIdRequest {
            transactional_id: Some("orders".into()),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            principal: String::new(),
        }));
        roundtrip_req(Request::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 0,
            producer_id: 5,
            producer_epoch: 3,
            principal: String::new(),
        }));
        roundtrip_req(Request::AddPartition(AddPartitionRequest {
            transactional_id: String::new(),
            producer_id: 1,
            producer_epoch: 2,
            topic: "t".into(),
            partition: 1,
            transactional: true,
            verify_only: true,
            topic_id: 0x1234,
            transaction_version: 2,
        }));
        roundtrip_req(Request::WriteMarker(WriteMarkerRequest {
            topic: "t".into(),
            partition: 1,
            producer_id: 1,
            producer_epoch: 9,
            marker_sequence: 12,
            commit: false,
            leader_epoch: 3,
            coordinator_epoch: 7,
        }));
        roundtrip_req(Request::Heartbeat(HeartbeatRequest {
            broker_id: 1,
            addr: "127.0.0.1:9".into(),
            kafka_addr: "127.0.0.1:19".into(),
            incarnation: 42,
            broker_epoch: 3,
            previous_broker_epoch: 2,
            log_dir_id: 7,
            intact: true,
            replicas: vec![ReplicaReport {
                topic: "t".into(),
                partition: 0,
                log_end_offset: 5,
                high_watermark: 4,
                offline: true,
                lost: true,
                problem: "damaged".into(),
                topic_id: 0x5678,
                refused_leader_epoch: 9,
                lost_reported_at: 4,
            }],
            credentials_version: 12,
            authorization_version: 13,
        }));
        roundtrip_req(Request::Replicate(ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            topic_id: 0xabc << 64,
            leader_epoch: 2,
            leader_id: 1,
            from_offset: 10,
            prev_epoch: 1,
            high_watermark: 9,
            log_start_offset: 3,
            low_watermark: 3,
            producer_state: Bytes::from_static(b"state"),
            records: Bytes::from_static(b"batches").into(),
        }));
        roundtrip_req(Request::AlterPartition(AlterPartitionRequest {
            broker_id: 1,
            topic: "t".into(),
            partition: 0,
            topic_id: 7,
            leader_epoch: 2,
            partition_epoch: 7,
            isr: vec![1, 3],
        }));
        roundtrip_req(Request::Describe);
        let member =
            GroupMember { group: "g".into(), generation: 3, member_id: "m-1".into(), instance_id: Some("i".into()) };
        roundtrip_req(Request::JoinGroup(JoinGroupRequest {
            group: "g".into(),
            member_id: String::new(),
            instance_id: None,
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 300_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"meta")), ("roundrobin".into(), Bytes::new())],
            require_known_member: true,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }));
        roundtrip_req(Request::SyncGroup(SyncGroupRequest {
            member: member.clone(),
            assignments: vec![("m-1".into(), Bytes::from_static(b"a"))],
        }));
        roundtrip_req(Request::GroupHeartbeat(GroupHeartbeatRequest { member: member.clone() }));
        roundtrip_req(Request::LeaveGroup(LeaveGroupRequest {
            group: "g".into(),
            members: vec![("m-1".into(), None), (String::new(), Some("i".into()))],
        }));
        let offset = PartitionOffset {
            topic: "t".into(),
            partition: 2,
            offset: 17,
            leader_epoch: 4,
            metadata: Some("x".into()),
        };
        roundtrip_req(Request::OffsetCommit(OffsetCommitRequest {
            member: member.clone(),
            txn: Some(TxnOwner { transactional_id: "w".into(), producer_id: 5, producer_epoch: 6 }),
            offsets: vec![offset.clone()],
        }));
        roundtrip_req(Request::OffsetCommit(OffsetCommitRequest { member, txn: None, offsets: vec![] }));
        roundtrip_req(Request::OffsetFetch(OffsetFetchRequest {
            group: "g".into(),
            partitions: Some(vec![("t".into(), 1)]),
            require_stable: true,
        }));
        roundtrip_req(Request::OffsetFetch(OffsetFetchRequest {
            group: "g".into(),
            partitions: None,
            require_stable: false,
        }));
        roundtrip_req(Request::Acls(AclsRequest {
            create: vec![acl_binding()],
            delete: vec![crate::acl::AclFilter { principal: Some("User:bob".into()), ..Default::default() }],
        }));
        roundtrip_req(Request::AddOffsets(AddOffsetsRequest {
            txn: TxnOwner { transactional_id: "w".into(), producer_id: 5, producer_epoch: 6 },
            group: "g".into(),
        }));
        roundtrip_req(Request::DescribeGroups(DescribeGroupsRequest { groups: vec!["g".into()] }));
        roundtrip_req(Request::DeleteGroups(DeleteGroupsRequest { groups: vec!["g".into(), "h".into()] }));
        roundtrip_resp(Response::DeleteGroups(DeleteGroupsResponse {
            status: Status::ok(),
            groups: vec![Status::ok(), Status::new(ErrorCode::NonEmptyGroup, "it has members")],
        }));
        roundtrip_req(Request::DeleteRecords(DeleteRecordsRequest {
            topic: "t".into(),
            partition: 3,
            offset: -1,
            timeout_ms: 30_000,
        }));
        roundtrip_resp(Response::DeleteRecords(DeleteRecordsResponse { status: Status::ok(), low_watermark: 42 }));
        roundtrip_req(Request::OffsetDelete(OffsetDeleteRequest {
            group: "g".into(),
            partitions: vec![("t".into(), 0), ("u".into(), 3)],
        }));
        roundtrip_resp(Response::OffsetDelete(OffsetDeleteResponse {
            status: Status::ok(),
            partitions: vec![Status::new(ErrorCode::GroupSubscribedToTopic, "subscribed"), Status::ok()],
        }));
        roundtrip_resp(Response::JoinGroup(JoinGroupResponse {
            status: Status::ok(),
            generation: 4,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "m-1".into(),
            member_id: "m-1".into(),
            members: vec![("m-1".into(), Some("i".into()), Bytes::from_static(b"meta"))],
        }));
        roundtrip_resp(Response::SyncGroup(SyncGroupResponse {
            status: Status::ok(),
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            assignment: Bytes::from_static(b"a"),
        }));
        roundtrip_resp(Response::GroupHeartbeat(Status::new(ErrorCode::RebalanceInProgress, "rejoin")));
        roundtrip_resp(Response::LeaveGroup(LeaveGroupResponse {
            status: Status::ok(),
            members: vec![Status::ok(), Status::new(ErrorCode::UnknownMemberId, "who")],
        }));
        roundtrip_resp(Response::OffsetFetch(OffsetsResponse {
            status: Status::ok(),
            partitions: vec![(offset.clone(), Status::new(ErrorCode::UnstableOffsetCommit, "pending"))],
        }));
        roundtrip_resp(Response::AddOffsets(Status::ok()));
        roundtrip_resp(Response::DescribeGroups(DescribeGroupsResponse {
            status: Status::ok(),
            groups: vec![GroupState {
                group: "g".into(),
                state: "Stable".into(),
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                generation: 2,
                leader: "m-1".into(),
                members: vec![GroupMemberState {
                    member_id: "m-1".into(),
                    instance_id: None,
                    client_id: "c".into(),
                    client_host: "h".into(),
                    metadata: Bytes::from_static(b"m"),
                    assignment: Bytes::from_static(b"a"),
                }],
                offsets: vec![offset.clone()],
                consumer: None,
            }],
        }));
        let tp = |p| TopicPartitions { topic_id: 7, topic: "t".into(), partitions: vec![p] };
        roundtrip_resp(Response::DescribeGroups(DescribeGroupsResponse {
            status: Status::ok(),
            groups: vec![GroupState {
                group: "g".into(),
                state: "Reconciling".into(),
                protocol_type: "consumer".into(),
                protocol: "uniform".into(),
                generation: 4,
                leader: String::new(),
                members: Vec::new(),
                offsets: vec![offset],
                consumer: Some(ConsumerGroupState {
                    group_epoch: 4,
                    assignment_epoch: 3,
                    assignor: "uniform".into(),
                    members: vec![ConsumerMemberState {
                        member_id: "m".into(),
                        instance_id: Some("i".into()),
                        member_epoch: 3,
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        topic_names: vec!["t".into()],
                        topic_regex: Some("t.*".into()),
                        assigned: vec![tp(0)],
                        target: vec![tp(1)],
                    }],
                }),
            }],
        }));
        for (names, owned) in [(None, None), (Some(vec!["a".to_string(), "b".to_string()]), Some(vec![(7u128, 0)]))] {
            roundtrip_req(Request::ConsumerHeartbeat(ConsumerHeartbeatRequest {
                group: "g".into(),
                member_id: "m".into(),
                member_epoch: 3,
                instance_id: Some("i".into()),
                rebalance_timeout_ms: -1,
                topic_names: names,
                topic_regex: Some(String::new()),
                server_assignor: None,
                owned,
                client_id: "c".into(),
                client_host: "/h".into(),
            }));
        }
        for assignment in [None, Some(vec![(7u128, 1), (9, 0)])] {
            roundtrip_resp(Response::ConsumerHeartbeat(ConsumerHeartbeatResponse {
                status: Status::ok(),
                member_id: "m".into(),
                member_epoch: 5,
                heartbeat_interval_ms: 5000,
                assignment,
            }));
        }
        roundtrip_resp(Response::ConsumerHeartbeat(ConsumerHeartbeatResponse::error(
            Status::new(ErrorCode::FencedMemberEpoch, "old"),
            "m",
        )));
        roundtrip_req(Request::AuthBegin(AuthBeginRequest { member: "broker-1".into() }));
        roundtrip_req(Request::SaslLogin(SaslLoginRequest {
            mechanism: "SCRAM-SHA-512".into(),
            auth_bytes: Bytes::from_static(b"n,,n=alice,r=x"),
        }));
        roundtrip_resp(Response::SaslLogin(SaslLoginResponse {
            status: Status::ok(),
            auth_bytes: Bytes::from_static(b"v=sig"),
        }));
        roundtrip_req(Request::AuthProve(AuthProveRequest {
            member: "broker-1".into(),
            client_nonce: Bytes::from_static(&[1; 32]),
            proof: Bytes::from_static(&[2; 32]),
        }));
        for election in [Election::Again, Election::AgainUnclean, Election::Preferred, Election::Unclean] {
            roundtrip_req(Request::ElectLeader(ElectLeaderRequest { topic: "t".into(), partition: 2, election }));
        }
        for replicas in [Some(vec![3, 1, 2]), None] {
            roundtrip_req(Request::Reassign(ReassignRequest {
                topic: "t".into(),
                partition: 1,
                replicas,
                allow_replication_factor_change: false,
            }));
        }
        roundtrip_resp(Response::Reassign(Status::new(ErrorCode::NoReassignmentInProgress, "none")));
        for topics in [None, Some(vec![("t".to_string(), vec![0, 2])])] {
            roundtrip_req(Request::ListReassignments(ListReassignmentsRequest { topics }));
        }
        roundtrip_resp(Response::ListReassignments(ListReassignmentsResponse {
            status: Status::ok(),
            reassignments: vec![Reassignment {
                topic: "t".into(),
                partition: 0,
                replicas: vec![3, 4, 1],
                adding: vec![3, 4],
                removing: vec![1],
            }],
        }));
    }

    #[test]
    fn every_response_roundtrips() {
        roundtrip_resp(Response::Produce(ProduceResponse {
            status: Status::new(ErrorCode::InvalidProducerEpoch, "fenced"),
            base_offset: -1,
            log_end_offset: 10,
            current_producer_epoch: 4,
            current_leader_epoch: 0,
            log_append_time_ms: 1_700_000_000_000,
        }));
        roundtrip_resp(Response::Fetch(FetchResponse {
            status: Status::ok(),
            high_watermark: 3,
            last_stable_offset: 2,
            current_leader_epoch: 1,
            aborted: vec![AbortedTxn { producer_id: 4, first_offset: 1 }],
            records: Bytes::from_static(b"b"),
        }));
        roundtrip_resp(Response::EndTxn(EndTxnResponse { status: Status::ok(), producer_id: 4, producer_epoch: 6 }));
        roundtrip_resp(Response::Metadata(MetadataResponse {
            status: Status::ok(),
            brokers: vec![BrokerInfo { id: 1, addr: "a:1".into(), kafka_addr: "a:9".into(), alive: true }],
            topics: vec![TopicInfo {
                name: "t".into(),
                status: Status::ok(),
                created: true,
                topic_id: 0xfeed,
                min_insync_replicas: 2,
                partitions: vec![PartitionInfo {
                    partition: 0,
                    leader_id: 1,
                    leader_epoch: 0,
                    replicas: vec![1, 2],
                    isr: vec![1],
                }],
                configs: vec![("segment.bytes".into(), "2048".into())],
            }],
        }));
        roundtrip_resp(Response::CreateTopic(Status::new(ErrorCode::TopicAlreadyExists, "exists")));
        roundtrip_resp(Response::DeleteTopic(Status::new(ErrorCode::UnknownTopicId, "gone")));
        roundtrip_resp(Response::CreatePartitions(Status::ok()));
        roundtrip_resp(Response::InitProducerId(InitProducerIdResponse {
            status: Status::ok(),
            producer_id: 1,
            producer_epoch: 0,
        }));
        roundtrip_resp(Response::AddPartition(AddPartitionResponse {
            status: Status::new(ErrorCode::ProducerFenced, "x"),
            current_epoch: 3,
            coordinator_epoch: 3,
        }));
        roundtrip_resp(Response::WriteMarker(WriteMarkerResponse {
            status: Status::ok(),
            offset: 5,
            current_producer_epoch: 2,
        }));
        roundtrip_resp(Response::Heartbeat(HeartbeatResponse {
            status: Status::ok(),
            lease_ms: 3000,
            broker_epoch: 4,
            assignments: vec![Assignment {
                topic: "t".into(),
                partition: 0,
                leader_id: 2,
                leader_epoch: 0,
                partition_epoch: 4,
                replicas: vec![1, 2],
                isr: vec![2],
                min_insync_replicas: 1,
                topic_id: 1 << 100,
                unclean_leader_epoch: 4,
                configs: vec![("max.message.bytes".into(), "100".into())],
            }],
            brokers: vec![BrokerInfo { id: 2, addr: "b:2".into(), kafka_addr: String::new(), alive: false }],
            deleted: vec![DeletedTopic { name: "old".into(), topic_id: 5 }],
            coordinator_epoch: 7,
            transaction_version: 2,
            features_epoch: 9,
            credentials: Some(Credentials {
                version: 77,
                users: vec![UserCredential {
                    user: "alice".into(),
                    credential: crate::sasl::ScramCredential::from_salted_password(
                        crate::sasl::ScramMechanism::Sha512,
                        b"salted",
                        b"salt".to_vec(),
                        4096,
                    ),
                }],
            }),
            authorization: Some(crate::acl::Authorization {
                version: 3,
                enabled: true,
                super_users: vec!["User:admin".into()],
                allow_everyone_if_no_acl_found: false,
                acls: vec![acl_binding()],
            }),
            removed: vec![RemovedReplica { topic: "moved".into(), partition: 3, topic_id: 6 }],
        }));
        roundtrip_resp(Response::Acls(AclsResponse {
            status: Status::ok(),
            created: vec![Status::ok(), Status::new(ErrorCode::InvalidRequest, "empty name")],
            deleted: vec![vec![acl_binding()], Vec::new()],
            authorization: crate::acl::Authorization::default(),
        }));
        roundtrip_resp(Response::Describe(DescribeResponse {
            status: Status::ok(),
            brokers: vec![BrokerState { id: 1, addr: "a".into(), alive: true }],
            partitions: vec![PartitionState {
                topic: "t".into(),
                partition: 0,
                leader_id: 1,
                leader_epoch: 0,
                replicas: vec![1, 2],
                isr: vec![1, 2],
                elr: vec![3],
                min_insync_replicas: 2,
                adding: vec![4],
                removing: vec![1],
                progress: vec![ReplicaProgress {
                    broker_id: 2,
                    log_end_offset: 3,
                    high_watermark: 2,
                    problem: "lost".into(),
                }],
            }],
            transactional_ids: vec![TransactionalState {
                transactional_id: "x".into(),
                producer_id: 1,
                producer_epoch: 2,
                partitions: vec!["t-0".into()],
                state: "Ongoing".into(),
                age_ms: 17,
                transaction_timeout_ms: 60_000,
                transaction_version: 1,
            }],
            held: vec![HeldState { kind: "groups".into(), count: 3, max: 100_000 }],
        }));
        roundtrip_resp(Response::Error(Status::new(ErrorCode::InvalidRequest, "bad")));
        roundtrip_resp(Response::AuthBegin(AuthBeginResponse {
            status: Status::ok(),
            server_nonce: Bytes::from_static(&[3; 32]),
        }));
        roundtrip_resp(Response::AuthProve(AuthProveResponse {
            status: Status::ok(),
            server_proof: Bytes::from_static(&[4; 32]),
        }));
        roundtrip_resp(Response::Replicate(ReplicateResponse {
            status: Status::new(ErrorCode::OffsetOutOfRange, "diverged"),
            log_end_offset: 12,
            hint_offset: 7,
            diverging_epoch: 1,
            current_leader_epoch: 2,
            log_start_offset: 5,
        }));
        roundtrip_resp(Response::AlterPartition(AlterPartitionResponse {
            status: Status::ok(),
            leader_epoch: 2,
            partition_epoch: 8,
            isr: vec![1],
            coordinator_epoch: 7,
        }));
    }

    #[test]
    fn unknown_key_and_version_keep_the_header() {
        let mut b = BytesMut::new();
        b.put_i16(777);
        b.put_i16(0);
        b.put_i32(5);
        let err = decode_request(b.freeze()).unwrap_err();
        assert_eq!(err.header.unwrap().correlation_id, 5);
        assert_eq!(err.error, DecodeError::UnknownApiKey(777));

        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i16(9);
        b.put_i32(6);
        let err = decode_request(b.freeze()).unwrap_err();
        assert_eq!(err.error.error_code(), ErrorCode::UnsupportedVersion);
    }

    #[test]
    fn truncated_and_trailing_bytes_are_errors_not_panics() {
        let full = encode_request(
            1,
            &Request::Fetch(FetchRequest {
                topic: "t".into(),
                partition: 0,
                leader_epoch: 0,
                offset: 0,
                max_bytes: 1,
                isolation: READ_UNCOMMITTED,
            }),
        );
        for cut in 0..full.len() {
            assert!(decode_request(full.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut longer = BytesMut::from(&full[..]);
        longer.put_u8(0);
        assert!(matches!(decode_request(longer.freeze()).unwrap_err().error, DecodeError::TrailingBytes(1)));
    }

    #[test]
    fn lying_array_length_does_not_allocate() {
        let mut b = BytesMut::new();
        b.put_i16(ApiKey::Metadata as i16);
        b.put_i16(0);
        b.put_i32(1);
        b.put_i32(i32::MAX);
        let err = decode_request(b.freeze()).unwrap_err();
        assert!(matches!(err.error, DecodeError::InvalidLength { .. }));
    }

    #[test]
    fn invalid_utf8_is_named() {
        let mut b = BytesMut::new();
        b.put_i16(ApiKey::CreateTopics as i16);
        b.put_i16(0);
        b.put_i32(1);
        b.put_i16(2);
        b.put_slice(&[0xff, 0xfe]);
        b.put_i32(1);
        assert!(matches!(decode_request(b.freeze()).unwrap_err().error, DecodeError::InvalidUtf8 { field: "name" }));
    }
}
