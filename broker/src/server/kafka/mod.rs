//! The broker's Kafka face: Kafka's wire protocol (through the kafka-protocol crate) on a second
//! listener, so that unmodified Kafka clients produce, consume and are fenced.
//!
//! A second face, not a second core: a Kafka Produce becomes the own protocol's produce requests
//! (one per partition) and goes through the same checks, gate and log as the own listener's
//! (under transaction version 1 rules, [`super::TxnRules::KafkaTv1`]); a Fetch, ListOffsets and
//! OffsetForLeaderEpoch read the same partitions. What Kafka sends to its transaction
//! coordinator (InitProducerId, AddPartitionsToTxn, EndTxn) and Metadata are relayed to the
//! coordinator as own-protocol requests, on a connection of the Kafka connection's own that
//! proves no membership: a relay never lends the broker's cluster-member authority to a client.
//! Every broker answers FindCoordinator with itself, so a client only ever needs broker
//! addresses.
//!
//! The connection loop is the own listener's ([`net::serve_protocol`]): the same limits, TLS and
//! ordering (answers in request order; a request that must finish before the next starts is
//! [`net::Handled::Serial`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use net::{Connection, Decoded, Dialer, GroupHandler, Handled, Handler, Handlers, ServerLimits};
use protocol::codec::CodecError;
use protocol::kafka::{KafkaAnswer, KafkaBody, KafkaFrame, KafkaHeader, KafkaRequest, KafkaServerCodec, Served};
use protocol::{ErrorCode, Request, Response, Status};
use tokio_util::codec::{Decoder, Encoder};

use super::Shared;

mod acls;
mod admin;
pub(crate) mod authz;
mod consumer_group;
mod coordinator;
mod errors;
mod fetch;
mod groups;
mod log_dirs;
mod produce;
mod reassign;
pub(crate) mod sasl;
mod users;

pub(crate) use errors::kafka_code;
pub(crate) use groups::GROUP_WAIT_MS_MAX;

/// The cluster id Kafka Metadata and DescribeCluster answers carry.
const CLUSTER_ID: &str = "epochfence";

/// What this listener decodes: `(api key, lowest version, highest version)`. What it offers is
/// this under transaction version 2, and without Produce v11-12, EndTxn v5 and TxnOffsetCommit
/// v4-5 under version 1 ([`offered_max`]): the coordinator's `--transaction-version` decides.
/// InitProducerId up to v4, the first that carries PRODUCER_FENCED (at v3 it must be sent as
/// INVALID_PRODUCER_EPOCH, and kafka-python then re-inits without its producer id, fencing the
/// newer instance).
pub(crate) const SERVED: Served = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // Version 0 is gone in Kafka 4 (KIP-896).
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    // From v8 a request asks for several groups at once: not served.
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // KIP-848 consumer groups: librdkafka's `group.protocol=consumer` needs v1.
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 5),
    // v0 is followed by bare tokens (the codec reads them: `KafkaBody::SaslToken`).
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // v0 has no pattern type (KIP-896 removed it).
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

/// The name of the feature KIP-890 finalizes.
const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The highest version of `key` (served up to `max`) offered under transaction version
/// `level` (KIP-890): version 2 comes with Produce v12, EndTxn v5 and TxnOffsetCommit v5 (Java
/// clients break if the feature is finalized without all three); under 1 (or before the
/// coordinator said), none of those nor the versions in between (Produce v11, TxnOffsetCommit
/// v4, which add TRANSACTION_ABORTABLE), as this listener offered before version 2.
pub(crate) fn offered_max(key: ApiKey, max: i16, level: i16) -> i16 {
    if level >= 2 {
        return max;
    }
    match key {
        ApiKey::Produce => max.min(10),
        ApiKey::EndTxn => max.min(4),
        ApiKey::TxnOffsetCommit => max.min(3),
        _ => max,
    }
}

/// The Kafka wire protocol, as [`net::serve_protocol`] serves it.
pub(crate) struct KafkaWire;

/// [`KafkaServerCodec`] with its frames as [`Decoded`].
pub(crate) struct KafkaCodec(KafkaServerCodec);

impl Decoder for KafkaCodec {
    type Item = Decoded<KafkaWire>;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded<KafkaWire>>, CodecError> {
        Ok(self.0.decode(src)?.map(|frame| match frame {
            KafkaFrame::Request(r) => Decoded::Request(r.header, r),
            // Kafka closes the connection over these, without an answer.
            KafkaFrame::Close(why) => Decoded::Refused { answer: None, why },
        }))
    }
}

impl Encoder<(KafkaHeader, KafkaAnswer)> for KafkaCodec {
    type Error = CodecError;

    fn encode(&mut self, item: (KafkaHeader, KafkaAnswer), dst: &mut BytesMut) -> Result<(), CodecError> {
        self.0.encode(item, dst)
    }
}

impl net::Protocol for KafkaWire {
    type Request = KafkaRequest;
    type Response = KafkaAnswer;
    type Context = KafkaHeader;
    type Peer = ();
    type Codec = KafkaCodec;

    fn codec(limits: &ServerLimits) -> KafkaCodec {
        KafkaCodec(KafkaServerCodec::new(limits.frame_bytes_max, SERVED))
    }

    fn request_bytes(req: &KafkaRequest) -> usize {
        match &req.body {
            KafkaBody::Request(body) => match body.as_ref() {
                RequestKind::Produce(p) => p
                    .topic_data
                    .iter()
                    .flat_map(|t| &t.partition_data)
                    .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
                    .sum(),
                _ => 128,
            },
            KafkaBody::UnsupportedApiVersions => 128,
            KafkaBody::SaslToken(token) => token.len(),
        }
    }

    /// Kafka has no generic error answer: a request the broker cannot answer in time closes
    /// the connection (the client retries on a new one).
    fn timed_out(_: KafkaHeader, _: Duration) -> KafkaAnswer {
        KafkaAnswer::Close
    }

    fn frame_too_large(_: usize, _: usize) -> (KafkaHeader, KafkaAnswer) {
        (KafkaHeader::NONE, KafkaAnswer::Close)
    }

    fn too_many_connections(_: &ServerLimits) -> (KafkaHeader, KafkaAnswer) {
        (KafkaHeader::NONE, KafkaAnswer::Close)
    }

    fn gate(_: &ServerLimits, _: &mut (), _: &KafkaRequest) -> Option<(KafkaAnswer, bool)> {
        None
    }

    fn gated(_: &ServerLimits, _: &(), _: &KafkaRequest) -> bool {
        false
    }

    /// Cluster members never speak Kafka: no room is kept for them here.
    fn member_request(_: &ServerLimits, _: &(), _: &KafkaRequest) -> bool {
        false
    }

    fn handshake(_: &KafkaRequest) -> bool {
        false
    }

    fn not_handled() -> KafkaAnswer {
        KafkaAnswer::Close
    }

    fn closes(answer: &KafkaAnswer) -> bool {
        matches!(answer, KafkaAnswer::Close)
    }
}

/// One Kafka connection's state: its relay connection to the coordinator, dialled when first
/// needed, without a membership proof.
struct KafkaConn {
    shared: Arc<Shared>,
    relay: Mutex<Relay>,
    /// The client's address, as the listener accepted it.
    peer: std::net::SocketAddr,
    /// Where the connection is in its SASL authentication; only held inside a handler call.
    sasl: Arc<Mutex<sasl::SaslState>>,
    /// The caller's principal and address as the authorizer names them, made once the
    /// connection's principal is settled (logged in, or no SASL), not on every request.
    identity: std::sync::OnceLock<(Arc<str>, Arc<str>)>,
}

/// A Kafka connection's relay to the coordinator. Each Kafka connection has its own, so its
/// requests reach the coordinator in the order it sent them (the coordinator decides one
/// connection's InitProducerId and EndTxn one at a time) and one client's wait does not hold
/// up another's. It is closed after `kafka_relay_idle_ms` without use, so idle clients do not
/// hold the coordinator's connections (its `connections_max`), and dialled again when needed;
/// never while a call on it is under way or went unanswered (a late EndTxn must stay ahead of
/// its retry, which goes on the same connection).
#[derive(Default)]
struct Relay {
    conn: Option<RelayConn>,
    /// Calls on `conn` under way now.
    leases: usize,
    /// When the last of them ended.
    last_used: Option<Instant>,
    /// A call on `conn` timed out: the coordinator may still decide it, so `conn` is kept.
    unanswered: bool,
    /// A task is watching `conn` for idleness.
    watched: bool,
}

/// An open relay connection, counted in [`super::BrokerStats::kafka_relay_connections`].
struct RelayConn {
    conn: Connection,
    stats: Arc<super::BrokerStats>,
}

impl Drop for RelayConn {
    fn drop(&mut self) {
        self.stats.kafka_relay_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A call's use of the relay connection: while one is held, the connection stays open.
struct RelayLease {
    conn: Connection,
    owner: Arc<KafkaConn>,
}

impl RelayLease {
    /// The call on this connection went unanswered: keep the connection (see [`Relay`]).
    fn unanswered(&self) {
        let mut relay = self.owner.relay.lock().unwrap_or_else(|p| p.into_inner());
        if relay.conn.as_ref().is_some_and(|c| c.conn.same_as(&self.conn)) {
            relay.unanswered = true;
        }
    }
}

impl std::ops::Deref for RelayLease {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl Drop for RelayLease {
    fn drop(&mut self) {
        let mut relay = self.owner.relay.lock().unwrap_or_else(|p| p.into_inner());
        relay.leases = relay.leases.saturating_sub(1);
        relay.last_used = Some(Instant::now());
    }
}

/// The principal name of an SSL client from its certificate (mutual TLS, under SSL: under
/// SASL_SSL the SASL login names it, as in Kafka): its subject mapped by the broker's
/// `ssl.principal.mapping.rules`; `None` without a certificate (`User:ANONYMOUS`). An error if
/// the certificate cannot be read or no rule applies.
fn tls_principal(shared: &Shared, peer: &net::Peer) -> Result<Option<String>, String> {
    let Some(cert) = peer.certificate.as_ref().filter(|_| shared.kafka_security() == super::SecurityProtocol::Ssl)
    else {
        return Ok(None);
    };
    let subject = net::tls::subject_rfc2253(cert).map_err(|e| e.to_string())?;
    shared.config.ssl_principal_mapping.name(&subject).map(Some)
}

/// The handlers of each new Kafka connection.
pub(super) fn handlers(shared: &Arc<Shared>) -> Handlers<KafkaWire> {
    let shared = shared.clone();
    Arc::new(move |peer: &net::Peer| {
        let tls_user = match tls_principal(&shared, peer) {
            Ok(user) => user,
            Err(why) => {
                // Kafka fails such a client's authentication: nothing it sends is served.
                tracing::info!(peer = %peer.addr, "Kafka client's certificate refused: {why}; closing the connection");
                let refused: Handler<KafkaWire> = Arc::new(|_| Handled::answer(KafkaAnswer::Close));
                return (refused, None);
            }
        };
        let conn = Arc::new(KafkaConn {
            shared: shared.clone(),
            relay: Mutex::new(Relay::default()),
            peer: peer.addr,
            sasl: Arc::new(Mutex::new(sasl::SaslState::new(shared.kafka_sasl(), tls_user))),
            identity: std::sync::OnceLock::new(),
        });
        let for_group = conn.clone();
        let handler: Handler<KafkaWire> = Arc::new(move |req| conn.start(req));
        let group: GroupHandler<KafkaWire> = Arc::new(move |requests| {
            if *for_group.shared.control.paused.borrow()
                || !*for_group.shared.registered.borrow()
                || (for_group.shared.kafka_sasl().is_some()
                    && (!for_group.sasl.lock().unwrap_or_else(|p| p.into_inner()).open_at(Instant::now())
                        || requests.iter().any(is_sasl)))
            {
                // Each alone, through the handler, which waits (or authenticates): a run of
                // produce requests is taken as the login of its start allows, so none is taken
                // behind a (re-)authentication, which changes what is allowed.
                return Vec::new();
            }
            produce::produce_group(&for_group.shared, &for_group.caller(), requests, |r| for_group.start(r))
        });
        (handler, Some(group))
    })
}

/// Whether `req` is a step of a SASL login (KIP-368: a logged-in client's re-authentication too).
fn is_sasl(req: &KafkaRequest) -> bool {
    matches!(&req.body, KafkaBody::SaslToken(_))
        || matches!(&req.body, KafkaBody::Request(b)
            if matches!(**b, RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_)))
}

impl KafkaConn {
    /// Start a request in arrival order (see [`net::Handled`]). A frozen broker (a test's
    /// SIGSTOP stand-in) holds it, and the requests behind it, until it thaws.
    fn start(self: &Arc<Self>, req: KafkaRequest) -> Handled<KafkaAnswer> {
        let stateless = matches!(&req.body, KafkaBody::UnsupportedApiVersions)
            || matches!(&req.body, KafkaBody::Request(b) if matches!(**b, RequestKind::ApiVersions(_)));
        if !stateless && !*self.shared.registered.borrow() {
            // Not registered yet: the request waits (bounded by the connection's request timeout).
            let conn = self.clone();
            return Handled::serial(async move {
                let _ = conn.shared.registered.subscribe().wait_for(|r| *r).await;
                conn.start(req).into_future().await
            });
        }
        if *self.shared.control.paused.borrow() {
            let conn = self.clone();
            return Handled::serial(async move {
                conn.shared.running().await;
                conn.handle(req).into_future().await
            });
        }
        self.handle(req)
    }

    fn handle(self: &Arc<Self>, req: KafkaRequest) -> Handled<KafkaAnswer> {
        let version = req.header.api_version;
        if let sasl::Gate::Answer(answer) = self.sasl_gate(&req) {
            if matches!(req.body, KafkaBody::SaslToken(_)) {
                return sasl::bare_token(answer);
            }
            return answer;
        }
        let body = match req.body {
            KafkaBody::UnsupportedApiVersions => {
                // Kafka answers with a version 0 body, whatever version was asked.
                let level = self.shared.transaction_version().0;
                let resp = api_versions(level, -1, 0).with_error_code(ErrorCode::UnsupportedVersion.code());
                return Handled::answer(KafkaAnswer::ReplyAt(0, ResponseKind::ApiVersions(resp)));
            }
            KafkaBody::Request(body) => body,
            // The gate answers every token.
            KafkaBody::SaslToken(_) => return Handled::answer(KafkaAnswer::Close),
        };
        // A version that only transaction version 2 offers (the transaction version is read only
        // then, and for ApiVersions: not on every request).
        if let Ok(key) = ApiKey::try_from(req.header.api_key) {
            if version > offered_max(key, version, 1) && self.shared.transaction_version().0 < 2 {
                // Decodable, but not offered under this transaction version: as Kafka does with
                // a version it does not serve, the connection closes.
                tracing::warn!(
                    ?key,
                    version,
                    "Kafka request of a version only transaction version 2 offers, under 1; closing the connection"
                );
                return Handled::answer(KafkaAnswer::Close);
            }
        }
        match *body {
            RequestKind::ApiVersions(_) => {
                let (level, features_epoch) = self.shared.transaction_version();
                Handled::answer(KafkaAnswer::Reply(ResponseKind::ApiVersions(api_versions(
                    level,
                    features_epoch,
                    version,
                ))))
            }
            RequestKind::Produce(r) => produce::produce(&self.shared, &self.caller(), r, version),
            RequestKind::Fetch(r) => fetch::fetch(&self.shared, &self.caller(), r, version),
            RequestKind::ListOffsets(r) => fetch::list_offsets(&self.shared, &self.caller(), r, version),
            RequestKind::DeleteRecords(r) => fetch::delete_records(&self.shared, &self.caller(), r, version),
            RequestKind::OffsetForLeaderEpoch(r) => {
                fetch::offset_for_leader_epoch(&self.shared, &self.caller(), r, version)
            }
            RequestKind::Metadata(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.metadata(r, version).await })
            }
            RequestKind::FindCoordinator(r) => Handled::answer(self.find_coordinator(r, version)),
            RequestKind::InitProducerId(r) => {
                let conn = self.clone();
                let client_id = req.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
                Handled::serial(async move { conn.init_producer_id(r, version, client_id).await })
            }
            RequestKind::AddPartitionsToTxn(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.add_partitions_to_txn(r, version).await })
            }
            RequestKind::EndTxn(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.end_txn(r, version).await })
            }
            RequestKind::CreateTopics(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.create_topics(r, version).await })
            }
            RequestKind::DeleteTopics(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.delete_topics(r, version).await })
            }
            RequestKind::CreatePartitions(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.create_partitions(r, version).await })
            }
            RequestKind::AlterConfigs(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.alter_configs(r, version).await })
            }
            RequestKind::IncrementalAlterConfigs(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.incremental_alter_configs(r, version).await })
            }
            RequestKind::DescribeConfigs(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.describe_configs(r, version).await })
            }
            RequestKind::ElectLeaders(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.elect_leaders(r, version).await })
            }
            RequestKind::AlterPartitionReassignments(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.alter_partition_reassignments(r, version).await })
            }
            RequestKind::ListPartitionReassignments(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.list_partition_reassignments(r, version).await })
            }
            RequestKind::DescribeTopicPartitions(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.describe_topic_partitions(r).await })
            }
            RequestKind::DescribeLogDirs(r) => {
                Handled::answer(log_dirs::describe_log_dirs(&self.shared, &self.caller(), r, version))
            }
            RequestKind::AlterReplicaLogDirs(r) => {
                Handled::answer(log_dirs::alter_replica_log_dirs(&self.shared, &self.caller(), r, version))
            }
            RequestKind::DescribeCluster(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.describe_cluster(r, version).await })
            }
            RequestKind::DescribeTransactions(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.describe_transactions(r, version).await })
            }
            RequestKind::ListTransactions(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.list_transactions(r, version).await })
            }
            RequestKind::DescribeProducers(r) => {
                Handled::answer(admin::describe_producers(&self.shared, &self.caller(), r, version))
            }
            RequestKind::JoinGroup(r) => {
                let conn = self.clone();
                let client_id = req.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
                Handled::serial(async move { conn.join_group(r, version, client_id).await })
            }
            RequestKind::SyncGroup(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.sync_group(r, version).await })
            }
            RequestKind::ConsumerGroupHeartbeat(r) => {
                let conn = self.clone();
                let client_id = req.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
                Handled::serial(async move { conn.consumer_group_heartbeat(r, version, client_id).await })
            }
            RequestKind::ConsumerGroupDescribe(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.consumer_group_describe(r, version).await })
            }
            RequestKind::Heartbeat(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.heartbeat(r, version).await })
            }
            RequestKind::LeaveGroup(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.leave_group(r, version).await })
            }
            RequestKind::OffsetCommit(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.offset_commit(r, version).await })
            }
            RequestKind::OffsetFetch(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.offset_fetch(r, version).await })
            }
            RequestKind::ListGroups(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.list_groups(r, version).await })
            }
            RequestKind::DescribeGroups(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.describe_groups(r, version).await })
            }
            RequestKind::DeleteGroups(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.delete_groups(r, version).await })
            }
            RequestKind::OffsetDelete(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.offset_delete(r, version).await })
            }
            RequestKind::AddOffsetsToTxn(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.add_offsets_to_txn(r, version).await })
            }
            RequestKind::TxnOffsetCommit(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.txn_offset_commit(r, version).await })
            }
            RequestKind::CreateAcls(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.create_acls(r).await })
            }
            RequestKind::DeleteAcls(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.delete_acls(r).await })
            }
            RequestKind::DescribeAcls(r) => Handled::answer(self.describe_acls(r)),
            RequestKind::DescribeUserScramCredentials(r) => Handled::answer(self.describe_user_scram_credentials(r)),
            RequestKind::AlterUserScramCredentials(r) => {
                let conn = self.clone();
                Handled::serial(async move { conn.alter_user_scram_credentials(r).await })
            }
            // The codec decodes only what SERVED lists.
            other => {
                tracing::warn!(request = ?ApiKey::try_from(req.header.api_key), "a Kafka request with no handler; closing");
                drop(other);
                Handled::answer(KafkaAnswer::Close)
            }
        }
    }

    /// Pass `req` through the connection's SASL authentication ([`sasl::gate`]).
    fn sasl_gate(&self, req: &KafkaRequest) -> sasl::Gate {
        let asked = match &req.body {
            KafkaBody::UnsupportedApiVersions => sasl::Asked::ApiVersions,
            KafkaBody::SaslToken(token) => sasl::Asked::Authenticate(token),
            KafkaBody::Request(b) => match &**b {
                RequestKind::ApiVersions(_) => sasl::Asked::ApiVersions,
                RequestKind::SaslHandshake(h) => sasl::Asked::Handshake(h.mechanism.as_str()),
                RequestKind::SaslAuthenticate(a) => sasl::Asked::Authenticate(&a.auth_bytes),
                _ => sasl::Asked::Other,
            },
        };
        let Some(config) = self.shared.kafka_sasl() else {
            return sasl::gate_off(asked);
        };
        let now = Instant::now();
        let mut state = self.sasl.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(asked, sasl::Asked::Other) && state.open_at(now) {
            return sasl::Gate::Pass; // a logged-in connection's request: nothing more to decide
        }
        let stats = &self.shared.control.stats;
        sasl::gate(&mut state, &self.sasl, config, &self.shared.credentials, asked, self.peer, now, stats)
    }

    /// The authenticated principal's name (`User:` aside): `ANONYMOUS` without SASL.
    fn user(&self) -> String {
        self.sasl.lock().unwrap_or_else(|p| p.into_inner()).user().to_string()
    }

    /// The caller of the request at hand, with the ACLs of now (see [`authz::Caller`]).
    fn caller(&self) -> authz::Caller {
        let authorizer = self.shared.authorization.current();
        // An IPv4 client of a dual-stack listener as Kafka names it (10.0.0.5, not
        // ::ffff:10.0.0.5), so host ACLs match.
        let made = || -> (Arc<str>, Arc<str>) {
            (format!("User:{}", self.user()).into(), self.peer.ip().to_canonical().to_string().into())
        };
        let (principal, host) = match self.identity.get() {
            Some(identity) => identity.clone(),
            None if self.shared.kafka_sasl().is_none()
                || self.sasl.lock().unwrap_or_else(|p| p.into_inner()).settled() =>
            {
                self.identity.get_or_init(made).clone()
            }
            None => made(),
        };
        authz::Caller::new(authorizer, principal, host)
    }

    /// The relay connection to the coordinator (dialled now, by `deadline`, if there is none or
    /// it broke), held open until the returned lease is dropped.
    async fn coordinator(self: &Arc<Self>, deadline: Instant) -> Result<RelayLease, Status> {
        if let Some(lease) = self.lease_open() {
            return Ok(lease);
        }
        let c = self.shared.coordinators.dial(&self.relay_dialer(), deadline).await.map_err(|e| {
            Status::new(ErrorCode::CoordinatorNotAvailable, format!("cannot reach the coordinator: {e}; retry"))
        })?;
        let stats = self.shared.control.stats.clone();
        stats.kafka_relay_connections.fetch_add(1, Ordering::Relaxed);
        let fresh = RelayConn { conn: c.clone(), stats };
        let (replaced, watch) = {
            let mut relay = self.relay.lock().unwrap_or_else(|p| p.into_inner());
            let replaced = relay.conn.replace(fresh);
            relay.unanswered = false;
            relay.leases += 1;
            let watch = !std::mem::replace(&mut relay.watched, true);
            (replaced, watch)
        };
        drop(replaced);
        if watch {
            self.watch_relay();
        }
        Ok(RelayLease { conn: c, owner: self.clone() })
    }

    /// How the relay reaches the coordinator: without a membership proof, since the coordinator
    /// serves these requests to anyone and a client's request must not pass for the broker's own.
    fn relay_dialer(&self) -> Dialer {
        if self.shared.authorization.current().enabled() {
            // The coordinator then serves members only: this broker has authorized the request
            // by the ACLs and relays it as a member (it relays only requests it built itself),
            // under a relay's name, which keeps it out of the members' room.
            let member = format!("{}-{}", net::RELAY_MEMBER_PREFIX, self.shared.config.id);
            return Dialer { member, ..self.shared.dialer.clone() };
        }
        Dialer { tls: self.shared.config.peer_tls.clone(), ..Dialer::default() }
    }

    /// The coordinator replica behind `conn` answered NOT_COORDINATOR (a standby, or a deposed
    /// one): close the relay, so that the next call dials the replica the refusal names (else
    /// the next one).
    fn relay_not_served(&self, conn: &Connection, status: &Status) {
        let hint = net::coordinators::active_hint(&status.message);
        self.shared.coordinators.follow(conn.addr(), hint);
        let mut relay = self.relay.lock().unwrap_or_else(|p| p.into_inner());
        if relay.conn.as_ref().is_some_and(|c| c.conn.same_as(conn)) {
            relay.conn = None;
        }
    }

    /// Call the coordinator on the relay within `timeout`, following NOT_COORDINATOR to the
    /// active replica (a refused request was not applied, so it is sent again).
    async fn relay_call(self: &Arc<Self>, req: Request, timeout: Duration) -> Response {
        let deadline = Instant::now() + timeout;
        loop {
            let conn = match self.coordinator(deadline).await {
                Ok(c) => c,
                Err(status) => return Response::Error(status),
            };
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            // A replica frozen mid-request is given up once another has taken over.
            let probe = self.relay_dialer();
            match self.answer_bounded(&probe, Some(&*conn), conn.call(req.clone()), left).await {
                Ok(resp) => return resp,
                Err(net::NetError::Refused { status, .. }) if status.code == ErrorCode::NotCoordinator => {
                    self.relay_not_served(&conn, &status);
                    if Instant::now() >= deadline {
                        return Response::Error(status);
                    }
                    let pause = Duration::from_millis(net::coordinators::FOLLOW_PAUSE_MS);
                    tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
                }
                // The coordinator's own refusal (an internal request from a non-member, say).
                Err(net::NetError::Refused { status, .. }) => return Response::Error(status),
                Err(e) => {
                    if matches!(e, net::NetError::Timeout { .. }) {
                        conn.unanswered();
                    }
                    return Response::Error(Status::new(
                        ErrorCode::CoordinatorNotAvailable,
                        format!("the coordinator did not answer: {e}; retry"),
                    ));
                }
            }
        }
    }

    /// Await `answer` (a call submitted on `conn`) within `timeout`, giving up once another
    /// coordinator replica has taken over from the one behind `conn`.
    async fn answer_bounded(
        &self,
        probe: &Dialer,
        conn: Option<&Connection>,
        answer: impl std::future::Future<Output = Result<Response, net::NetError>>,
        timeout: Duration,
    ) -> Result<Response, net::NetError> {
        let bounded = async {
            match tokio::time::timeout(timeout, answer).await {
                Ok(r) => r,
                Err(_) => Err(net::NetError::Timeout {
                    addr: conn.map(|c| c.addr().to_string()).unwrap_or_default(),
                    timeout_ms: timeout.as_millis() as u64,
                }),
            }
        };
        match conn {
            Some(c) => self.shared.coordinators.answer_unless_replaced(probe, c, bounded).await,
            None => bounded.await,
        }
    }

    /// A lease on the open relay connection, if there is one.
    fn lease_open(self: &Arc<Self>) -> Option<RelayLease> {
        let mut relay = self.relay.lock().unwrap_or_else(|p| p.into_inner());
        let conn = relay.conn.as_ref().filter(|c| !c.conn.is_closed())?.conn.clone();
        relay.leases += 1;
        Some(RelayLease { conn, owner: self.clone() })
    }

    /// Close the relay connection once it has been idle for `kafka_relay_idle_ms` (see
    /// [`Relay`]). The task ends with the Kafka connection, or when it closes the relay.
    fn watch_relay(self: &Arc<Self>) {
        let idle = Duration::from_millis(self.shared.config.kafka_relay_idle_ms.max(1));
        let owner = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut wait = idle;
            loop {
                tokio::time::sleep(wait).await;
                let Some(owner) = owner.upgrade() else { return };
                let closed = {
                    let mut relay = owner.relay.lock().unwrap_or_else(|p| p.into_inner());
                    let idle_for = relay.last_used.map(|t| t.elapsed()).unwrap_or(idle);
                    if relay.conn.is_none() {
                        relay.watched = false;
                        return;
                    }
                    if relay.leases == 0 && !relay.unanswered && idle_for >= idle {
                        relay.watched = false;
                        relay.conn.take()
                    } else {
                        wait = if relay.leases == 0 {
                            idle.saturating_sub(idle_for).max(Duration::from_millis(1))
                        } else {
                            idle
                        };
                        None
                    }
                };
                if closed.is_some() {
                    tracing::debug!("closing an idle Kafka relay connection to the coordinator");
                    return;
                }
            }
        });
    }

    /// Relay `req` to the coordinator and return its answer; a failure is an answer with
    /// COORDINATOR_NOT_AVAILABLE (retriable everywhere).
    async fn relay(self: &Arc<Self>, req: Request) -> Response {
        // The coordinator's own deadline (an init's wait for its markers) is well inside this.
        let timeout = Duration::from_millis(self.shared.config.request_timeout_ms);
        self.relay_call(req, timeout).await
    }

    /// This broker's Kafka address as (host, port).
    fn own_address(&self) -> (StrBytes, i32) {
        host_port(self.shared.kafka_addr.as_deref().unwrap_or_default())
    }

    /// The brokers a Kafka answer lists, as (id, host, port) by id: those the coordinator holds
    /// alive with a Kafka listener, and always this one, as a registered Kafka broker is in its
    /// own metadata. A coordinator that restarted knows no broker until each heartbeats again,
    /// and librdkafka forgets every broker an answer leaves out (its bootstrap ones too): it
    /// would have nothing left to ask until it bootstraps again, minutes later.
    fn listed_brokers(&self, known: &[protocol::BrokerInfo]) -> Vec<(i32, StrBytes, i32)> {
        let own_id = self.shared.config.id;
        let (host, port) = self.own_address();
        let mut listed: Vec<(i32, StrBytes, i32)> = known
            .iter()
            .filter(|b| b.alive && !b.kafka_addr.is_empty() && b.id != own_id)
            .map(|b| {
                let (host, port) = host_port(&b.kafka_addr);
                (b.id, host, port)
            })
            .chain(std::iter::once((own_id, host, port)))
            .collect();
        listed.sort_by_key(|(id, _, _)| *id);
        listed
    }
}

/// `host:port` as Kafka's (host, port); port 0 if there is none.
fn host_port(addr: &str) -> (StrBytes, i32) {
    match addr.rsplit_once(':') {
        Some((host, port)) => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (StrBytes::from_string(host.to_string()), port.parse().unwrap_or(0))
        }
        None => (StrBytes::from_string(addr.to_string()), 0),
    }
}

/// The ApiVersions answer (at `version`) under transaction version `level`, finalized at
/// `features_epoch`: every offered key and its range, and from v3 the `transaction.version`
/// feature, supported from 0 to 2 (sent from v4 only: Kafka drops a supported range starting
/// at 0 before it, KAFKA-17492) and finalized at `level` (not sent while none is recorded, as
/// Kafka omits level 0).
fn api_versions(level: i16, features_epoch: i64, version: i16) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
    let keys = SERVED
        .iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(offered_max(*key, *max, level))
        })
        .collect();
    let mut resp = ApiVersionsResponse::default().with_api_keys(keys);
    if version >= 4 {
        resp = resp.with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE))
            .with_min_version(0)
            .with_max_version(2)]);
    }
    if version >= 3 && level >= 1 && features_epoch >= 0 {
        resp = resp.with_finalized_features_epoch(features_epoch).with_finalized_features(vec![
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE))
                .with_min_version_level(level)
                .with_max_version_level(level),
        ]);
    }
    resp
}
