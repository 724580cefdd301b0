//! Error codes (Kafka's names and numbers where the meaning matches) and the decode error type.

use thiserror::Error;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $num:expr, $kafka:literal, $retriable:expr; )*) => {
        /// An error code carried in every response's status.
        ///
        /// Numbers and names follow Apache Kafka wherever the meaning matches, so that a
        /// Kafka-wire listener can pass them through unchanged.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i16)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $num, )*
        }

        impl ErrorCode {
            /// The code as it travels on the wire.
            pub fn code(self) -> i16 { self as i16 }

            /// Decode a wire code; codes this build does not know become `UnknownServerError`.
            pub fn from_code(code: i16) -> ErrorCode {
                match code {
                    $( $num => ErrorCode::$name, )*
                    _ => ErrorCode::UnknownServerError,
                }
            }

            /// Kafka's upper-case name (`INVALID_PRODUCER_EPOCH`).
            pub fn name(self) -> &'static str {
                match self { $( ErrorCode::$name => $kafka, )* }
            }

            /// Whether a client may retry the same request (same batch, same sequence) later.
            pub fn is_retriable(self) -> bool {
                match self { $( ErrorCode::$name => $retriable, )* }
            }
        }
    };
}

error_codes! {
    /// Success.
    None = 0, "NONE", false;
    /// An unexpected server error; the message says what happened.
    UnknownServerError = -1, "UNKNOWN_SERVER_ERROR", false;
    /// The requested offset is outside the partition's log.
    OffsetOutOfRange = 1, "OFFSET_OUT_OF_RANGE", false;
    /// A record batch failed its CRC32C check or its length fields lie.
    CorruptMessage = 2, "CORRUPT_MESSAGE", false;
    /// The topic or partition does not exist.
    UnknownTopicOrPartition = 3, "UNKNOWN_TOPIC_OR_PARTITION", true;
    /// The partition has no leader right now.
    LeaderNotAvailable = 5, "LEADER_NOT_AVAILABLE", true;
    /// This broker does not lead the partition.
    NotLeaderOrFollower = 6, "NOT_LEADER_OR_FOLLOWER", true;
    /// The request did not complete in time.
    RequestTimedOut = 7, "REQUEST_TIMED_OUT", true;
    /// No broker is registered to host the request.
    BrokerNotAvailable = 8, "BROKER_NOT_AVAILABLE", true;
    /// An internal request (replication, markers, ISR changes, broker heartbeats) came from a
    /// connection that has not proven it belongs to the cluster.
    ClusterAuthorizationFailed = 31, "CLUSTER_AUTHORIZATION_FAILED", false;
    /// The cluster-membership handshake failed (wrong secret, or no challenge asked first).
    SaslAuthenticationFailed = 58, "SASL_AUTHENTICATION_FAILED", false;
    /// A frame or batch is larger than the configured limit.
    MessageTooLarge = 10, "MESSAGE_TOO_LARGE", false;
    /// The coordinator cannot serve the request now.
    CoordinatorNotAvailable = 15, "COORDINATOR_NOT_AVAILABLE", true;
    /// This coordinator replica is not the active one (a standby, or one whose lease lapsed):
    /// the message names the active replica when it is known.
    NotCoordinator = 16, "NOT_COORDINATOR", true;
    /// A request from a coordinator replica older than the newest one this broker has seen
    /// (its coordinator epoch is lower): a deposed coordinator.
    TransactionCoordinatorFenced = 52, "TRANSACTION_COORDINATOR_FENCED", false;
    /// The topic name is empty, too long or has characters outside `[A-Za-z0-9._-]`.
    InvalidTopicException = 17, "INVALID_TOPIC_EXCEPTION", false;
    /// The api version is not supported.
    UnsupportedVersion = 35, "UNSUPPORTED_VERSION", false;
    /// The topic already exists.
    TopicAlreadyExists = 36, "TOPIC_ALREADY_EXISTS", false;
    /// The partition count is not positive or exceeds the limit.
    InvalidPartitions = 37, "INVALID_PARTITIONS", false;
    /// An acks=all write (or a marker) while the partition's ISR is smaller than its
    /// `min.insync.replicas`: nothing was written.
    NotEnoughReplicas = 19, "NOT_ENOUGH_REPLICAS", true;
    /// An acks=all write (or a marker) was written, but the ISR shrank below
    /// `min.insync.replicas` before it could be acknowledged: it may or may not stay.
    NotEnoughReplicasAfterAppend = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true;
    /// The produce request's acks is neither -1 (all) nor 1 (leader).
    InvalidRequiredAcks = 21, "INVALID_REQUIRED_ACKS", false;
    /// A record's timestamp is out of the range the broker accepts (too far in the future,
    /// `message_timestamp_after_max_ms`), or the batch claims log-append time.
    InvalidTimestamp = 32, "INVALID_TIMESTAMP", false;
    /// A topic setting is out of range (such as `min.insync.replicas` above the replication factor).
    InvalidConfig = 40, "INVALID_CONFIG", false;
    /// The replication factor exceeds the live brokers.
    InvalidReplicationFactor = 38, "INVALID_REPLICATION_FACTOR", false;
    /// The request could not be decoded, or its api key is unknown.
    InvalidRequest = 42, "INVALID_REQUEST", false;
    /// The batch is not a RecordBatch v2.
    UnsupportedForMessageFormat = 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", false;
    /// A batch's sequence does not follow the last one of its producer on this partition.
    OutOfOrderSequenceNumber = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false;
    /// A partition leader saw a producer epoch older than the one it knows: the producer is a zombie.
    InvalidProducerEpoch = 47, "INVALID_PRODUCER_EPOCH", false;
    /// The request does not fit the transaction's state.
    InvalidTxnState = 48, "INVALID_TXN_STATE", false;
    /// The producer id does not belong to the transactional id.
    InvalidProducerIdMapping = 49, "INVALID_PRODUCER_ID_MAPPING", false;
    /// The transaction timeout is out of range.
    InvalidTransactionTimeout = 50, "INVALID_TRANSACTION_TIMEOUT", false;
    /// An earlier epoch of this transactional id is still being fenced; retry shortly.
    ConcurrentTransactions = 51, "CONCURRENT_TRANSACTIONS", true;
    /// The broker hosts no replica of the partition (AlterReplicaLogDirs).
    ReplicaNotAvailable = 9, "REPLICA_NOT_AVAILABLE", true;
    /// The broker could not read or write its log.
    KafkaStorageError = 56, "KAFKA_STORAGE_ERROR", true;
    /// No log directory of that path on the broker (AlterReplicaLogDirs).
    LogDirNotFound = 57, "LOG_DIR_NOT_FOUND", false;
    /// The producer id was never granted by the coordinator.
    UnknownProducerId = 59, "UNKNOWN_PRODUCER_ID", false;
    /// The request's leader epoch is older than the partition's: the caller is stale.
    FencedLeaderEpoch = 74, "FENCED_LEADER_EPOCH", true;
    /// A broker heartbeat carries a broker epoch older than the broker's current registration:
    /// it comes from a process that was superseded (a late message of one that restarted).
    StaleBrokerEpoch = 77, "STALE_BROKER_EPOCH", false;
    /// The request's leader epoch is newer than the partition's: this replica is behind.
    UnknownLeaderEpoch = 75, "UNKNOWN_LEADER_EPOCH", true;
    /// The coordinator saw an epoch older than the current one on its own request.
    ProducerFenced = 90, "PRODUCER_FENCED", false;
    /// A broker registered while the broker's current registration is still live and was not
    /// its predecessor's: it waits until that lease expires.
    DuplicateBrokerRegistration = 101, "DUPLICATE_BROKER_REGISTRATION", true;
    /// A batch's records disagree with its header (count, offset deltas, sizes, max
    /// timestamp), or a transactional batch carries no producer id.
    InvalidRecord = 87, "INVALID_RECORD", false;
    /// An ISR change was based on a partition epoch that is no longer current: the ISR moved
    /// since, or this very change was already applied. The leader learns the current ISR and asks again.
    InvalidUpdateVersion = 95, "INVALID_UPDATE_VERSION", false;
    /// A batch's compression type is none Kafka knows (5 to 7).
    UnsupportedCompressionType = 76, "UNSUPPORTED_COMPRESSION_TYPE", false;
    /// No topic has this id (it was deleted, or never existed).
    UnknownTopicId = 100, "UNKNOWN_TOPIC_ID", true;
    /// The coordinator holds no state for this transactional id.
    TransactionalIdNotFound = 105, "TRANSACTIONAL_ID_NOT_FOUND", false;
    /// The request names a topic in a way this server cannot serve (a config it does not have).
    TopicAuthorizationFailed = 29, "TOPIC_AUTHORIZATION_FAILED", false;
    /// The group's coordinator is loading its state; retry shortly.
    CoordinatorLoadInProgress = 14, "COORDINATOR_LOAD_IN_PROGRESS", true;
    /// The generation the request names is not the group's current one: the caller was
    /// removed from the group by a rebalance (a zombie worker), and must join again.
    IllegalGeneration = 22, "ILLEGAL_GENERATION", false;
    /// The member's protocol type or protocols do not match the group's.
    InconsistentGroupProtocol = 23, "INCONSISTENT_GROUP_PROTOCOL", false;
    /// The group id is empty.
    InvalidGroupId = 24, "INVALID_GROUP_ID", false;
    /// The member id is not a member of the group (its session expired, or it left).
    UnknownMemberId = 25, "UNKNOWN_MEMBER_ID", false;
    /// The session timeout is outside the coordinator's bounds.
    InvalidSessionTimeout = 26, "INVALID_SESSION_TIMEOUT", false;
    /// The group is rebalancing: join it again.
    RebalanceInProgress = 27, "REBALANCE_IN_PROGRESS", false;
    /// The group has reached its member limit.
    GroupMaxSizeReached = 81, "GROUP_MAX_SIZE_REACHED", false;
    /// A new member id was assigned: join again with it (JoinGroup v4+).
    MemberIdRequired = 79, "MEMBER_ID_REQUIRED", false;
    /// Another instance joined with the same `group.instance.id`: this static member was replaced.
    FencedInstanceId = 82, "FENCED_INSTANCE_ID", false;
    /// A KIP-848 member's heartbeat carries another member epoch than its own (not its previous
    /// one with only partitions it still has): it missed a rebalance and must rejoin at epoch 0.
    FencedMemberEpoch = 110, "FENCED_MEMBER_EPOCH", false;
    /// A static member joined with an instance id a live member holds.
    UnreleasedInstanceId = 111, "UNRELEASED_INSTANCE_ID", false;
    /// `group.remote.assignor` names an assignor the coordinator does not serve.
    UnsupportedAssignor = 112, "UNSUPPORTED_ASSIGNOR", false;
    /// A KIP-848 member's offset commit carries another member epoch than its current one.
    StaleMemberEpoch = 113, "STALE_MEMBER_EPOCH", false;
    /// A subscription's regular expression does not compile (RE2 syntax).
    InvalidRegularExpression = 128, "INVALID_REGULAR_EXPRESSION", false;
    /// A committed offset's metadata is longer than the coordinator takes.
    OffsetMetadataTooLarge = 12, "OFFSET_METADATA_TOO_LARGE", false;
    /// A transaction holds uncommitted offsets for the partition; retry once it ends.
    UnstableOffsetCommit = 88, "UNSTABLE_OFFSET_COMMIT", true;
    /// A preferred election of a partition its preferred replica leads already, or an unclean
    /// one of a partition whose leader is live (ElectLeaders).
    ElectionNotNeeded = 84, "ELECTION_NOT_NEEDED", false;
    /// A preferred election whose preferred replica (the first) is not live or not in sync.
    PreferredLeaderNotAvailable = 80, "PREFERRED_LEADER_NOT_AVAILABLE", true;
    /// An unclean election of a partition none of whose replicas is live.
    EligibleLeadersNotAvailable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true;
    /// A CreatePartitions replica assignment that cannot be followed: not one per new
    /// partition, another replica count than the topic's, a broker repeated or not live.
    InvalidReplicaAssignment = 39, "INVALID_REPLICA_ASSIGNMENT", false;
    /// A cancellation (AlterPartitionReassignments with null replicas) of a partition that is
    /// not being reassigned.
    NoReassignmentInProgress = 85, "NO_REASSIGNMENT_IN_PROGRESS", false;
    /// The group does not exist.
    GroupIdNotFound = 69, "GROUP_ID_NOT_FOUND", false;
    /// The group has members (DeleteGroups; OffsetDelete of a group whose subscriptions cannot
    /// be told): it can be deleted once they have left.
    NonEmptyGroup = 68, "NON_EMPTY_GROUP", false;
    /// OffsetDelete of a partition of a topic the group's members are subscribed to.
    GroupSubscribedToTopic = 86, "GROUP_SUBSCRIBED_TO_TOPIC", false;
    /// The request would take the server past one of its caps (transactional ids, groups,
    /// offsets per group); the message names the cap.
    PolicyViolation = 44, "POLICY_VIOLATION", false;
    /// The principal may not use this group (the authorizer, `--authorizer`).
    GroupAuthorizationFailed = 30, "GROUP_AUTHORIZATION_FAILED", false;
    /// The principal may not use this transactional id, or the producer id it wrote under was
    /// granted to another principal's transactional id.
    TransactionalIdAuthorizationFailed = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false;
    /// An ACL request while the coordinator runs without `--authorizer`.
    SecurityDisabled = 54, "SECURITY_DISABLED", false;
    /// Not attempted, because another item of the same request was refused.
    OperationNotAttempted = 55, "OPERATION_NOT_ATTEMPTED", false;
    /// A SASL mechanism the listener does not offer, or a SCRAM mechanism Kafka does not know.
    UnsupportedSaslMechanism = 33, "UNSUPPORTED_SASL_MECHANISM", false;
    /// A login step out of turn (a second login on a connection that logged in).
    IllegalSaslState = 34, "ILLEGAL_SASL_STATE", false;
    /// A credential to delete or describe does not exist (KIP-554).
    ResourceNotFound = 91, "RESOURCE_NOT_FOUND", false;
    /// A user named twice in one credential request (KIP-554).
    DuplicateResource = 92, "DUPLICATE_RESOURCE", false;
    /// A credential Kafka would not accept: an empty user, too few or too many iterations.
    UnacceptableCredential = 93, "UNACCEPTABLE_CREDENTIAL", false;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// Why a frame or message could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The message ended before a field it announced.
    #[error("truncated: needed {needed} more bytes for {field}, {remaining} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the message.
        remaining: usize,
    },
    /// A length prefix is negative (and not the null marker) or larger than what is left.
    #[error("invalid length {len} for {field}")]
    InvalidLength {
        /// The field whose length is wrong.
        field: &'static str,
        /// The length found.
        len: i64,
    },
    /// A string is not UTF-8.
    #[error("field {field} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
    /// A non-nullable field was null.
    #[error("field {field} must not be null")]
    UnexpectedNull {
        /// The field.
        field: &'static str,
    },
    /// Bytes remain after the message ended.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// The api key is not one this build serves.
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    /// The api version is not one this build serves.
    #[error("unsupported version {version} of api key {api_key}")]
    UnsupportedVersion {
        /// The api key.
        api_key: i16,
        /// The version asked for.
        version: i16,
    },
    /// A field holds a value outside its domain.
    #[error("invalid value for {field}: {detail}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl DecodeError {
    /// The error code a server answers this decode failure with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            DecodeError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            _ => ErrorCode::InvalidRequest,
        }
    }
}
