//! Requests and responses, and their pure encode and decode.
//!
//! A request frame is `api_key i16, api_version i16, correlation_id i32, body`; a response
//! frame is `correlation_id i32, api_key i16, body`, where api key -1 is [`Response::Error`]
//! (the reply to a request that could not be decoded). Every response body starts with a
//! [`Status`]. docs/PROTOCOL.md gives the byte layouts.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{Reader, WriteExt};
use crate::{DecodeError, ErrorCode};

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
    /// Get a producer id and epoch; bumps and fences for a known transactional id.
    InitProducerId = 22,
    /// Producer -> coordinator: commit or abort the current transaction.
    EndTxn = 26,
    /// Answer the challenge with a membership proof (Kafka's SaslAuthenticate number).
    AuthProve = 36,
    /// Admin -> coordinator: elect a partition's leader again, under a new leader epoch.
    ElectLeaders = 43,
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
            22 => ApiKey::InitProducerId,
            26 => ApiKey::EndTxn,
            36 => ApiKey::AuthProve,
            43 => ApiKey::ElectLeaders,
            24 => ApiKey::AddPartitionsToTxn,
            27 => ApiKey::WriteTxnMarkers,
            56 => ApiKey::AlterPartition,
            63 => ApiKey::BrokerHeartbeat,
            1001 => ApiKey::Replicate,
            1000 => ApiKey::Describe,
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

    fn encode(&self, b: &mut BytesMut) {
        b.put_i16(self.code.code());
        b.put_nullable_string(if self.message.is_empty() { None } else { Some(&self.message) });
    }

    fn decode(r: &mut Reader) -> Result<Status, DecodeError> {
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

/// Append a batch to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client believes the partition is at.
    pub leader_epoch: i32,
    /// [`ACKS_ALL`] (-1): answer once every in-sync replica has the batch; [`ACKS_LEADER`] (1):
    /// once the leader has written it.
    pub acks: i8,
    /// Exactly one RecordBatch v2.
    pub records: Bytes,
}

/// Acknowledge once every in-sync replica holds the batch (the high watermark passed it).
pub const ACKS_ALL: i8 = -1;
/// Acknowledge once the leader has written the batch.
pub const ACKS_LEADER: i8 = 1;

/// The answer to a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceResponse {
    /// Outcome.
    pub status: Status,
    /// Offset of the batch's first record (its original offset for a duplicate), -1 on error.
    pub base_offset: i64,
    /// The partition's log end offset after the append.
    pub log_end_offset: i64,
    /// The producer epoch the partition holds for this producer id (-1 if none): on
    /// INVALID_PRODUCER_EPOCH it is the epoch that fenced the caller.
    pub current_producer_epoch: i16,
    /// The partition's leader epoch on this broker (-1 if unknown).
    pub current_leader_epoch: i32,
}

/// Read from one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client believes in, or -1 to skip the check.
    pub leader_epoch: i32,
    /// First offset wanted.
    pub offset: i64,
    /// Upper bound on the bytes returned (at least one whole batch is returned if any).
    pub max_bytes: i32,
    /// [`READ_UNCOMMITTED`] (0): up to the high watermark; [`READ_COMMITTED`] (1): up to the
    /// last stable offset, with the aborted transactions to skip.
    pub isolation: i8,
}

/// Read everything up to the high watermark.
pub const READ_UNCOMMITTED: i8 = 0;
/// Read only up to the last stable offset, skipping aborted transactions.
pub const READ_COMMITTED: i8 = 1;

/// An aborted transaction overlapping a fetch: skip `producer_id`'s transactional batches from
/// `first_offset` until its abort marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction on this partition.
    pub first_offset: i64,
}

/// The answer to a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Outcome.
    pub status: Status,
    /// Offset below which every replica in the ISR holds the log.
    pub high_watermark: i64,
    /// Offset below which no transaction is open (at most the high watermark).
    pub last_stable_offset: i64,
    /// The partition's leader epoch on this broker.
    pub current_leader_epoch: i32,
    /// With READ_COMMITTED: the aborted transactions overlapping `[offset, last stable offset)`
    /// (a superset of those overlapping the returned batches).
    pub aborted: Vec<AbortedTxn>,
    /// Whole batches, as stored, starting with the batch that holds `offset`.
    pub records: Bytes,
}

/// Commit or abort the current transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// The epoch of the transaction being ended.
    pub producer_epoch: i16,
    /// Commit (true) or abort (false).
    pub commit: bool,
}

/// The answer to EndTxn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnResponse {
    /// Outcome.
    pub status: Status,
    /// The producer id to continue with.
    pub producer_id: i64,
    /// The epoch to continue with: ending a transaction bumps it (KIP-890), so a delayed
    /// EndTxn of this transaction can never end a later one. On PRODUCER_FENCED, the current epoch.
    pub producer_epoch: i16,
}

/// Ask for metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Topics wanted; empty for all.
    pub topics: Vec<String>,
    /// Create listed topics that do not exist, with the coordinator's defaults.
    pub allow_auto_create: bool,
}

/// A broker's identity and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id.
    pub id: i32,
    /// `host:port` clients connect to.
    pub addr: String,
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

/// Create a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicRequest {
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: i32,
    /// Replicas per partition; 0 or less for the coordinator's default, min(3, live brokers).
    pub replication_factor: i32,
}

/// Ask for a membership challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthBeginRequest {
    /// Who is proving membership (`broker-3`, `coordinator`).
    pub member: String,
}

/// The challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthBeginResponse {
    /// NONE, or SASL_AUTHENTICATION_FAILED if this process has no cluster secret.
    pub status: Status,
    /// A fresh nonce to prove against.
    pub server_nonce: Bytes,
}

/// Prove membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProveRequest {
    /// Who is proving membership.
    pub member: String,
    /// The dialler's nonce.
    pub client_nonce: Bytes,
    /// HMAC-SHA256 over the nonces and the member name (see `protocol::auth`).
    pub proof: Bytes,
}

/// The verdict, and the server's own proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProveResponse {
    /// NONE, or SASL_AUTHENTICATION_FAILED (then the connection is closed).
    pub status: Status,
    /// The server's proof that it knows the secret too.
    pub server_proof: Bytes,
}

/// Elect a partition's leader again under a bumped leader epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectLeaderRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
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

/// Get a producer id and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// Transactional id, or none for an idempotent-only producer.
    pub transactional_id: Option<String>,
    /// Transaction timeout asked for.
    pub transaction_timeout_ms: i32,
    /// The caller's current producer id, -1 if none (KIP-360).
    pub producer_id: i64,
    /// The caller's current epoch, -1 if none (KIP-360).
    pub producer_epoch: i16,
}

/// The answer to InitProducerId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    /// Outcome.
    pub status: Status,
    /// Granted producer id (-1 on error).
    pub producer_id: i64,
    /// Granted epoch; on PRODUCER_FENCED the current epoch.
    pub producer_epoch: i16,
}

/// Leader -> coordinator: may `(producer_id, producer_epoch)` write to this partition?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionRequest {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch carried by the batch.
    pub producer_epoch: i16,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Whether the write is part of a transaction (it starts one, with its timeout, if none
    /// is open); otherwise the partition is only recorded so a later bump fences it.
    pub transactional: bool,
}

/// The coordinator's verdict on an [`AddPartitionRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionResponse {
    /// NONE (registered, durable), PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID,
    /// INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, UNKNOWN_TOPIC_OR_PARTITION,
    /// COORDINATOR_NOT_AVAILABLE.
    pub status: Status,
    /// The producer id's current epoch (-1 if unknown).
    pub current_epoch: i16,
}

/// Coordinator -> leader: write a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteMarkerRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Producer id.
    pub producer_id: i64,
    /// Epoch the marker carries; the partition fences every older epoch of the producer id.
    pub producer_epoch: i16,
    /// Commit (true) or abort (false).
    pub commit: bool,
    /// The partition's leader epoch as the coordinator knows it.
    pub leader_epoch: i32,
}

/// The answer to a marker write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteMarkerResponse {
    /// Outcome.
    pub status: Status,
    /// Offset of the marker (-1 on error).
    pub offset: i64,
    /// The epoch the partition holds for the producer id after the request.
    pub current_producer_epoch: i16,
}

/// Broker -> coordinator heartbeat (registers the broker on first use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// Broker id.
    pub broker_id: i32,
    /// Address clients should use.
    pub addr: String,
    /// New at every start of the broker process: a restart is noticed even within the lease.
    pub incarnation: i64,
    /// Progress of every replica this broker hosts.
    pub replicas: Vec<ReplicaReport>,
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
}

/// The answer to a heartbeat: every replica the broker hosts, and the brokers' addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// Outcome.
    pub status: Status,
    /// Lease length granted, in milliseconds.
    pub lease_ms: i32,
    /// Every partition this broker hosts a replica of.
    pub assignments: Vec<Assignment>,
    /// Addresses of the registered brokers.
    pub brokers: Vec<BrokerInfo>,
}

/// Leader -> follower: the batches from `from_offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicateRequest {
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The sender's leader epoch; a replica that knows a newer one refuses.
    pub leader_epoch: i32,
    /// The sender's broker id.
    pub leader_id: i32,
    /// Offset of the first batch in `records`; the follower's log must continue there.
    pub from_offset: i64,
    /// Leader epoch of the batch holding `from_offset - 1` (-1 when `from_offset` is 0).
    pub prev_epoch: i32,
    /// The leader's high watermark.
    pub high_watermark: i64,
    /// The first offset the leader still holds (above 0 once retention deleted segments). When
    /// `from_offset` equals it, the leader has nothing before it to compare with `prev_epoch`.
    pub log_start_offset: i64,
    /// Whole batches as stored by the leader (may be empty).
    pub records: Records,
}

/// Record batches as one run of bytes held in one or more pieces: a leader replicates the
/// pieces it appended (each batch's rewritten first 16 bytes, and the rest as the producer
/// sent it) without joining them. On the wire they are one blob, their concatenation, and
/// decoding gives one piece. Equality is of the bytes, however they are cut.
#[derive(Debug, Clone, Default)]
pub struct Records {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Records {
    /// The concatenation of `pieces` (empty ones are dropped).
    pub fn from_pieces(pieces: Vec<Bytes>) -> Records {
        let pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let len = pieces.iter().map(Bytes::len).sum();
        Records { pieces, len }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The bytes in one piece: shared when they are one already (as decoded), else copied once.
    pub fn contiguous(&self) -> Bytes {
        match self.pieces.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = BytesMut::with_capacity(self.len);
                for p in many {
                    all.extend_from_slice(p);
                }
                all.freeze()
            }
        }
    }
}

impl From<Bytes> for Records {
    fn from(b: Bytes) -> Records {
        Records::from_pieces(vec![b])
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Records) -> bool {
        self.len == other.len && self.pieces.iter().flatten().eq(other.pieces.iter().flatten())
    }
}

impl Eq for Records {}

/// The follower's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicateResponse {
    /// NONE; OFFSET_OUT_OF_RANGE when the logs diverge before `from_offset` (see
    /// `hint_offset`); FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH on an epoch mismatch.
    pub status: Status,
    /// The follower's log end offset after the request.
    pub log_end_offset: i64,
    /// On divergence: the start of the follower's conflicting leader epoch (from its epoch
    /// cache), or its log end when `from_offset` is past it.
    pub hint_offset: i64,
    /// On divergence: the follower's leader epoch at `from_offset - 1`, or -1 when
    /// `from_offset` is past its log end. The leader resends from where that epoch ends in its
    /// own log (OffsetsForLeaderEpoch), so only the divergent suffix is cut.
    pub diverging_epoch: i32,
    /// The follower's leader epoch for the partition.
    pub current_leader_epoch: i32,
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
    /// The leader's epoch; a stale one is refused with FENCED_LEADER_EPOCH.
    pub leader_epoch: i32,
    /// The partition epoch the change is based on; any other is refused with
    /// INVALID_UPDATE_VERSION (the ISR moved since, or this request was already applied).
    pub partition_epoch: i32,
    /// The new ISR; must hold the leader.
    pub isr: Vec<i32>,
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
    /// See [`InitProducerIdRequest`].
    InitProducerId(InitProducerIdRequest),
    /// See [`EndTxnRequest`].
    EndTxn(EndTxnRequest),
    /// See [`ElectLeaderRequest`].
    ElectLeader(ElectLeaderRequest),
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
    /// See [`InitProducerIdResponse`].
    InitProducerId(InitProducerIdResponse),
    /// See [`EndTxnResponse`].
    EndTxn(EndTxnResponse),
    /// See [`ElectLeaderResponse`].
    ElectLeader(ElectLeaderResponse),
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
            Request::InitProducerId(_) => ApiKey::InitProducerId,
            Request::EndTxn(_) => ApiKey::EndTxn,
            Request::ElectLeader(_) => ApiKey::ElectLeaders,
            Request::AuthBegin(_) => ApiKey::AuthBegin,
            Request::AuthProve(_) => ApiKey::AuthProve,
            Request::AddPartition(_) => ApiKey::AddPartitionsToTxn,
            Request::WriteMarker(_) => ApiKey::WriteTxnMarkers,
            Request::Heartbeat(_) => ApiKey::BrokerHeartbeat,
            Request::Replicate(_) => ApiKey::Replicate,
            Request::AlterPartition(_) => ApiKey::AlterPartition,
            Request::Describe => ApiKey::Describe,
        }
    }
}

impl Request {
    /// Requests only cluster members may send: replication, markers, ISR changes and broker
    /// heartbeats (which register brokers and hand out leaderships).
    pub fn is_internal(&self) -> bool {
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
            Response::InitProducerId(_) => ApiKey::InitProducerId as i16,
            Response::EndTxn(_) => ApiKey::EndTxn as i16,
            Response::ElectLeader(_) => ApiKey::ElectLeaders as i16,
            Response::AuthBegin(_) => ApiKey::AuthBegin as i16,
            Response::AuthProve(_) => ApiKey::AuthProve as i16,
            Response::AddPartition(_) => ApiKey::AddPartitionsToTxn as i16,
            Response::WriteMarker(_) => ApiKey::WriteTxnMarkers as i16,
            Response::Heartbeat(_) => ApiKey::BrokerHeartbeat as i16,
            Response::Replicate(_) => ApiKey::Replicate as i16,
            Response::AlterPartition(_) => ApiKey::AlterPartition as i16,
            Response::Describe(_) => ApiKey::Describe as i16,
            Response::Error(_) => ERROR_RESPONSE_KEY,
        }
    }

    /// The status every response carries.
    pub fn status(&self) -> &Status {
        match self {
            Response::Produce(r) => &r.status,
            Response::Fetch(r) => &r.status,
            Response::Metadata(r) => &r.status,
            Response::CreateTopic(s) => s,
            Response::InitProducerId(r) => &r.status,
            Response::EndTxn(r) => &r.status,
            Response::ElectLeader(r) => &r.status,
            Response::AuthBegin(r) => &r.status,
            Response::AuthProve(r) => &r.status,
            Response::AddPartition(r) => &r.status,
            Response::WriteMarker(r) => &r.status,
            Response::Heartbeat(r) => &r.status,
            Response::Replicate(r) => &r.status,
            Response::AlterPartition(r) => &r.status,
            Response::Describe(r) => &r.status,
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
        Request::Replicate(p) => 64 + p.topic.len() + p.records.len(),
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
        Request::Produce(p) => std::slice::from_ref(&p.records),
        Request::Replicate(r) => r.records.pieces(),
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
        Request::Produce(p) => {
            b.put_string(&p.topic);
            b.put_i32(p.partition);
            b.put_i32(p.leader_epoch);
            b.put_i8(p.acks);
            b.put_i32(p.records.len() as i32); // the payload follows
        }
        Request::Fetch(f) => {
            b.put_string(&f.topic);
            b.put_i32(f.partition);
            b.put_i32(f.leader_epoch);
            b.put_i64(f.offset);
            b.put_i32(f.max_bytes);
            b.put_i8(f.isolation);
        }
        Request::Metadata(m) => {
            b.put_i32(m.topics.len() as i32);
            for t in &m.topics {
                b.put_string(t);
            }
            b.put_bool(m.allow_auto_create);
        }
        Request::CreateTopic(c) => {
            b.put_string(&c.name);
            b.put_i32(c.partitions);
            b.put_i32(c.replication_factor);
        }
        Request::InitProducerId(i) => {
            b.put_nullable_string(i.transactional_id.as_deref());
            b.put_i32(i.transaction_timeout_ms);
            b.put_i64(i.producer_id);
            b.put_i16(i.producer_epoch);
        }
        Request::ElectLeader(e) => {
            b.put_string(&e.topic);
            b.put_i32(e.partition);
        }
        Request::AuthBegin(a) => b.put_string(&a.member),
        Request::AuthProve(a) => {
            b.put_string(&a.member);
            b.put_blob(&a.client_nonce);
            b.put_blob(&a.proof);
        }
        Request::EndTxn(e) => {
            b.put_string(&e.transactional_id);
            b.put_i64(e.producer_id);
            b.put_i16(e.producer_epoch);
            b.put_bool(e.commit);
        }
        Request::AddPartition(a) => {
            b.put_i64(a.producer_id);
            b.put_i16(a.producer_epoch);
            b.put_string(&a.topic);
            b.put_i32(a.partition);
            b.put_bool(a.transactional);
        }
        Request::WriteMarker(w) => {
            b.put_string(&w.topic);
            b.put_i32(w.partition);
            b.put_i64(w.producer_id);
            b.put_i16(w.producer_epoch);
            b.put_bool(w.commit);
            b.put_i32(w.leader_epoch);
        }
        Request::Heartbeat(h) => {
            b.put_i32(h.broker_id);
            b.put_string(&h.addr);
            b.put_i64(h.incarnation);
            b.put_i32(h.replicas.len() as i32);
            for r in &h.replicas {
                b.put_string(&r.topic);
                b.put_i32(r.partition);
                b.put_i64(r.log_end_offset);
                b.put_i64(r.high_watermark);
            }
        }
        Request::Replicate(p) => {
            b.put_string(&p.topic);
            b.put_i32(p.partition);
            b.put_i32(p.leader_epoch);
            b.put_i32(p.leader_id);
            b.put_i64(p.from_offset);
            b.put_i32(p.prev_epoch);
            b.put_i64(p.high_watermark);
            b.put_i64(p.log_start_offset);
            b.put_i32(p.records.len() as i32); // the payload follows
        }
        Request::AlterPartition(a) => {
            b.put_i32(a.broker_id);
            b.put_string(&a.topic);
            b.put_i32(a.partition);
            b.put_i32(a.leader_epoch);
            b.put_i32(a.partition_epoch);
            b.put_i32_array(&a.isr);
        }
        Request::Describe => {}
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
        ApiKey::Produce => Request::Produce(ProduceRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            acks: r.i8("acks")?,
            records: r.bytes("records")?,
        }),
        ApiKey::Fetch => Request::Fetch(FetchRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            offset: r.i64("offset")?,
            max_bytes: r.i32("max_bytes")?,
            isolation: r.i8("isolation")?,
        }),
        ApiKey::Metadata => {
            let n = r.array_len("topics", 2)?;
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                topics.push(r.string("topic")?);
            }
            Request::Metadata(MetadataRequest { topics, allow_auto_create: r.bool("allow_auto_create")? })
        }
        ApiKey::CreateTopics => Request::CreateTopic(CreateTopicRequest {
            name: r.string("name")?,
            partitions: r.i32("partitions")?,
            replication_factor: r.i32("replication_factor")?,
        }),
        ApiKey::InitProducerId => Request::InitProducerId(InitProducerIdRequest {
            transactional_id: r.nullable_string("transactional_id")?,
            transaction_timeout_ms: r.i32("transaction_timeout_ms")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
        }),
        ApiKey::ElectLeaders => {
            Request::ElectLeader(ElectLeaderRequest { topic: r.string("topic")?, partition: r.i32("partition")? })
        }
        ApiKey::AuthBegin => Request::AuthBegin(AuthBeginRequest { member: r.string("member")? }),
        ApiKey::AuthProve => Request::AuthProve(AuthProveRequest {
            member: r.string("member")?,
            client_nonce: r.bytes("client_nonce")?,
            proof: r.bytes("proof")?,
        }),
        ApiKey::EndTxn => Request::EndTxn(EndTxnRequest {
            transactional_id: r.string("transactional_id")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            commit: r.bool("commit")?,
        }),
        ApiKey::AddPartitionsToTxn => Request::AddPartition(AddPartitionRequest {
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            transactional: r.bool("transactional")?,
        }),
        ApiKey::WriteTxnMarkers => Request::WriteMarker(WriteMarkerRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
            commit: r.bool("commit")?,
            leader_epoch: r.i32("leader_epoch")?,
        }),
        ApiKey::BrokerHeartbeat => {
            let broker_id = r.i32("broker_id")?;
            let addr = r.string("addr")?;
            let incarnation = r.i64("incarnation")?;
            let n = r.array_len("replicas", 22)?;
            let mut replicas = Vec::with_capacity(n);
            for _ in 0..n {
                replicas.push(ReplicaReport {
                    topic: r.string("topic")?,
                    partition: r.i32("partition")?,
                    log_end_offset: r.i64("log_end_offset")?,
                    high_watermark: r.i64("high_watermark")?,
                });
            }
            Request::Heartbeat(HeartbeatRequest { broker_id, addr, incarnation, replicas })
        }
        ApiKey::Replicate => Request::Replicate(ReplicateRequest {
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            leader_id: r.i32("leader_id")?,
            from_offset: r.i64("from_offset")?,
            prev_epoch: r.i32("prev_epoch")?,
            high_watermark: r.i64("high_watermark")?,
            log_start_offset: r.i64("log_start_offset")?,
            records: r.bytes("records")?.into(),
        }),
        ApiKey::AlterPartition => Request::AlterPartition(AlterPartitionRequest {
            broker_id: r.i32("broker_id")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
            leader_epoch: r.i32("leader_epoch")?,
            partition_epoch: r.i32("partition_epoch")?,
            isr: r.i32_array("isr")?,
        }),
        ApiKey::Describe => Request::Describe,
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
        Response::Produce(p) => {
            b.put_i64(p.base_offset);
            b.put_i64(p.log_end_offset);
            b.put_i16(p.current_producer_epoch);
            b.put_i32(p.current_leader_epoch);
        }
        Response::Fetch(f) => {
            b.put_i64(f.high_watermark);
            b.put_i64(f.last_stable_offset);
            b.put_i32(f.current_leader_epoch);
            b.put_i32(f.aborted.len() as i32);
            for a in &f.aborted {
                b.put_i64(a.producer_id);
                b.put_i64(a.first_offset);
            }
            b.put_blob(&f.records);
        }
        Response::Metadata(m) => {
            b.put_i32(m.brokers.len() as i32);
            for br in &m.brokers {
                b.put_i32(br.id);
                b.put_string(&br.addr);
            }
            b.put_i32(m.topics.len() as i32);
            for t in &m.topics {
                b.put_string(&t.name);
                t.status.encode(b);
                b.put_i32(t.partitions.len() as i32);
                for p in &t.partitions {
                    b.put_i32(p.partition);
                    b.put_i32(p.leader_id);
                    b.put_i32(p.leader_epoch);
                    b.put_i32_array(&p.replicas);
                    b.put_i32_array(&p.isr);
                }
            }
        }
        Response::CreateTopic(_) | Response::Error(_) => {}
        Response::InitProducerId(i) => {
            b.put_i64(i.producer_id);
            b.put_i16(i.producer_epoch);
        }
        Response::EndTxn(e) => {
            b.put_i64(e.producer_id);
            b.put_i16(e.producer_epoch);
        }
        Response::AuthBegin(a) => b.put_blob(&a.server_nonce),
        Response::AuthProve(a) => b.put_blob(&a.server_proof),
        Response::ElectLeader(e) => {
            b.put_i32(e.leader_id);
            b.put_i32(e.leader_epoch);
        }
        Response::AddPartition(a) => b.put_i16(a.current_epoch),
        Response::WriteMarker(w) => {
            b.put_i64(w.offset);
            b.put_i16(w.current_producer_epoch);
        }
        Response::Heartbeat(h) => {
            b.put_i32(h.lease_ms);
            b.put_i32(h.assignments.len() as i32);
            for a in &h.assignments {
                b.put_string(&a.topic);
                b.put_i32(a.partition);
                b.put_i32(a.leader_id);
                b.put_i32(a.leader_epoch);
                b.put_i32(a.partition_epoch);
                b.put_i32_array(&a.replicas);
                b.put_i32_array(&a.isr);
            }
            b.put_i32(h.brokers.len() as i32);
            for br in &h.brokers {
                b.put_i32(br.id);
                b.put_string(&br.addr);
            }
        }
        Response::Replicate(r) => {
            b.put_i64(r.log_end_offset);
            b.put_i64(r.hint_offset);
            b.put_i32(r.diverging_epoch);
            b.put_i32(r.current_leader_epoch);
        }
        Response::AlterPartition(a) => {
            b.put_i32(a.leader_epoch);
            b.put_i32(a.partition_epoch);
            b.put_i32_array(&a.isr);
        }
        Response::Describe(d) => {
            b.put_i32(d.brokers.len() as i32);
            for br in &d.brokers {
                b.put_i32(br.id);
                b.put_string(&br.addr);
                b.put_bool(br.alive);
            }
            b.put_i32(d.partitions.len() as i32);
            for p in &d.partitions {
                b.put_string(&p.topic);
                b.put_i32(p.partition);
                b.put_i32(p.leader_id);
                b.put_i32(p.leader_epoch);
                b.put_i32_array(&p.replicas);
                b.put_i32_array(&p.isr);
                b.put_i32(p.progress.len() as i32);
                for g in &p.progress {
                    b.put_i32(g.broker_id);
                    b.put_i64(g.log_end_offset);
                    b.put_i64(g.high_watermark);
                }
            }
            b.put_i32(d.transactional_ids.len() as i32);
            for t in &d.transactional_ids {
                b.put_string(&t.transactional_id);
                b.put_i64(t.producer_id);
                b.put_i16(t.producer_epoch);
                b.put_i32(t.partitions.len() as i32);
                for p in &t.partitions {
                    b.put_string(p);
                }
                b.put_string(&t.state);
                b.put_i64(t.age_ms);
            }
        }
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
        ApiKey::Produce => Response::Produce(ProduceResponse {
            status,
            base_offset: r.i64("base_offset")?,
            log_end_offset: r.i64("log_end_offset")?,
            current_producer_epoch: r.i16("current_producer_epoch")?,
            current_leader_epoch: r.i32("current_leader_epoch")?,
        }),
        ApiKey::Fetch => {
            let high_watermark = r.i64("high_watermark")?;
            let last_stable_offset = r.i64("last_stable_offset")?;
            let current_leader_epoch = r.i32("current_leader_epoch")?;
            let n = r.array_len("aborted", 16)?;
            let mut aborted = Vec::with_capacity(n);
            for _ in 0..n {
                aborted.push(AbortedTxn { producer_id: r.i64("producer_id")?, first_offset: r.i64("first_offset")? });
            }
            Response::Fetch(FetchResponse {
                status,
                high_watermark,
                last_stable_offset,
                current_leader_epoch,
                aborted,
                records: r.bytes("records")?,
            })
        }
        ApiKey::Metadata => {
            let n = r.array_len("brokers", 6)?;
            let mut brokers = Vec::with_capacity(n);
            for _ in 0..n {
                brokers.push(BrokerInfo { id: r.i32("broker_id")?, addr: r.string("addr")? });
            }
            let n = r.array_len("topics", 8)?;
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.string("topic")?;
                let tstatus = Status::decode(r)?;
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
                topics.push(TopicInfo { name, status: tstatus, partitions });
            }
            Response::Metadata(MetadataResponse { status, brokers, topics })
        }
        ApiKey::CreateTopics => Response::CreateTopic(status),
        ApiKey::InitProducerId => Response::InitProducerId(InitProducerIdResponse {
            status,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
        }),
        ApiKey::AuthBegin => Response::AuthBegin(AuthBeginResponse { status, server_nonce: r.bytes("server_nonce")? }),
        ApiKey::AuthProve => Response::AuthProve(AuthProveResponse { status, server_proof: r.bytes("server_proof")? }),
        ApiKey::EndTxn => Response::EndTxn(EndTxnResponse {
            status,
            producer_id: r.i64("producer_id")?,
            producer_epoch: r.i16("producer_epoch")?,
        }),
        ApiKey::ElectLeaders => Response::ElectLeader(ElectLeaderResponse {
            status,
            leader_id: r.i32("leader_id")?,
            leader_epoch: r.i32("leader_epoch")?,
        }),
        ApiKey::AddPartitionsToTxn => {
            Response::AddPartition(AddPartitionResponse { status, current_epoch: r.i16("current_epoch")? })
        }
        ApiKey::WriteTxnMarkers => Response::WriteMarker(WriteMarkerResponse {
            status,
            offset: r.i64("offset")?,
            current_producer_epoch: r.i16("current_producer_epoch")?,
        }),
        ApiKey::BrokerHeartbeat => {
            let lease_ms = r.i32("lease_ms")?;
            let n = r.array_len("assignments", 22)?;
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
                });
            }
            let n = r.array_len("brokers", 6)?;
            let mut brokers = Vec::with_capacity(n);
            for _ in 0..n {
                brokers.push(BrokerInfo { id: r.i32("broker_id")?, addr: r.string("addr")? });
            }
            Response::Heartbeat(HeartbeatResponse { status, lease_ms, assignments, brokers })
        }
        ApiKey::Replicate => Response::Replicate(ReplicateResponse {
            status,
            log_end_offset: r.i64("log_end_offset")?,
            hint_offset: r.i64("hint_offset")?,
            diverging_epoch: r.i32("diverging_epoch")?,
            current_leader_epoch: r.i32("current_leader_epoch")?,
        }),
        ApiKey::AlterPartition => Response::AlterPartition(AlterPartitionResponse {
            status,
            leader_epoch: r.i32("leader_epoch")?,
            partition_epoch: r.i32("partition_epoch")?,
            isr: r.i32_array("isr")?,
        }),
        ApiKey::Describe => {
            let n = r.array_len("brokers", 7)?;
            let mut brokers = Vec::with_capacity(n);
            for _ in 0..n {
                brokers.push(BrokerState { id: r.i32("broker_id")?, addr: r.string("addr")?, alive: r.bool("alive")? });
            }
            let n = r.array_len("partitions", 26)?;
            let mut partitions = Vec::with_capacity(n);
            for _ in 0..n {
                let topic = r.string("topic")?;
                let partition = r.i32("partition")?;
                let leader_id = r.i32("leader_id")?;
                let leader_epoch = r.i32("leader_epoch")?;
                let replicas = r.i32_array("replicas")?;
                let isr = r.i32_array("isr")?;
                let np = r.array_len("progress", 20)?;
                let mut progress = Vec::with_capacity(np);
                for _ in 0..np {
                    progress.push(ReplicaProgress {
                        broker_id: r.i32("broker_id")?,
                        log_end_offset: r.i64("log_end_offset")?,
                        high_watermark: r.i64("high_watermark")?,
                    });
                }
                partitions.push(PartitionState { topic, partition, leader_id, leader_epoch, replicas, isr, progress });
            }
            let n = r.array_len("transactional_ids", 16)?;
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
                });
            }
            Response::Describe(DescribeResponse { status, brokers, partitions, transactional_ids })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }));
        roundtrip_req(Request::Metadata(MetadataRequest {
            topics: vec!["a".into(), "b".into()],
            allow_auto_create: true,
        }));
        roundtrip_req(Request::CreateTopic(CreateTopicRequest {
            name: "n".into(),
            partitions: 4,
            replication_factor: -1,
        }));
        roundtrip_req(Request::InitProducerId(InitProducerIdRequest {
            transactional_id: Some("orders".into()),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
        }));
        roundtrip_req(Request::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 0,
            producer_id: 5,
            producer_epoch: 3,
        }));
        roundtrip_req(Request::AddPartition(AddPartitionRequest {
            producer_id: 1,
            producer_epoch: 2,
            topic: "t".into(),
            partition: 1,
            transactional: true,
        }));
        roundtrip_req(Request::WriteMarker(WriteMarkerRequest {
            topic: "t".into(),
            partition: 1,
            producer_id: 1,
            producer_epoch: 9,
            commit: false,
            leader_epoch: 3,
        }));
        roundtrip_req(Request::Heartbeat(HeartbeatRequest {
            broker_id: 1,
            addr: "127.0.0.1:9".into(),
            incarnation: 42,
            replicas: vec![ReplicaReport { topic: "t".into(), partition: 0, log_end_offset: 5, high_watermark: 4 }],
        }));
        roundtrip_req(Request::Replicate(ReplicateRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: 2,
            leader_id: 1,
            from_offset: 10,
            prev_epoch: 1,
            high_watermark: 9,
            log_start_offset: 3,
            records: Bytes::from_static(b"batches").into(),
        }));
        roundtrip_req(Request::AlterPartition(AlterPartitionRequest {
            broker_id: 1,
            topic: "t".into(),
            partition: 0,
            leader_epoch: 2,
            partition_epoch: 7,
            isr: vec![1, 3],
        }));
        roundtrip_req(Request::Describe);
        roundtrip_req(Request::AuthBegin(AuthBeginRequest { member: "broker-1".into() }));
        roundtrip_req(Request::AuthProve(AuthProveRequest {
            member: "broker-1".into(),
            client_nonce: Bytes::from_static(&[1; 32]),
            proof: Bytes::from_static(&[2; 32]),
        }));
        roundtrip_req(Request::ElectLeader(ElectLeaderRequest { topic: "t".into(), partition: 2 }));
    }

    #[test]
    fn every_response_roundtrips() {
        roundtrip_resp(Response::Produce(ProduceResponse {
            status: Status::new(ErrorCode::InvalidProducerEpoch, "fenced"),
            base_offset: -1,
            log_end_offset: 10,
            current_producer_epoch: 4,
            current_leader_epoch: 0,
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
            brokers: vec![BrokerInfo { id: 1, addr: "a:1".into() }],
            topics: vec![TopicInfo {
                name: "t".into(),
                status: Status::ok(),
                partitions: vec![PartitionInfo {
                    partition: 0,
                    leader_id: 1,
                    leader_epoch: 0,
                    replicas: vec![1, 2],
                    isr: vec![1],
                }],
            }],
        }));
        roundtrip_resp(Response::CreateTopic(Status::new(ErrorCode::TopicAlreadyExists, "exists")));
        roundtrip_resp(Response::InitProducerId(InitProducerIdResponse {
            status: Status::ok(),
            producer_id: 1,
            producer_epoch: 0,
        }));
        roundtrip_resp(Response::AddPartition(AddPartitionResponse {
            status: Status::new(ErrorCode::ProducerFenced, "x"),
            current_epoch: 3,
        }));
        roundtrip_resp(Response::WriteMarker(WriteMarkerResponse {
            status: Status::ok(),
            offset: 5,
            current_producer_epoch: 2,
        }));
        roundtrip_resp(Response::Heartbeat(HeartbeatResponse {
            status: Status::ok(),
            lease_ms: 3000,
            assignments: vec![Assignment {
                topic: "t".into(),
                partition: 0,
                leader_id: 2,
                leader_epoch: 0,
                partition_epoch: 4,
                replicas: vec![1, 2],
                isr: vec![2],
            }],
            brokers: vec![BrokerInfo { id: 2, addr: "b:2".into() }],
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
                progress: vec![ReplicaProgress { broker_id: 2, log_end_offset: 3, high_watermark: 2 }],
            }],
            transactional_ids: vec![TransactionalState {
                transactional_id: "x".into(),
                producer_id: 1,
                producer_epoch: 2,
                partitions: vec!["t-0".into()],
                state: "Ongoing".into(),
                age_ms: 17,
            }],
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
        }));
        roundtrip_resp(Response::AlterPartition(AlterPartitionResponse {
            status: Status::ok(),
            leader_epoch: 2,
            partition_epoch: 8,
            isr: vec![1],
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
