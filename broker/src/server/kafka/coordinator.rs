//! What a Kafka client sends to its coordinator, relayed to epochfence's: InitProducerId,
//! AddPartitionsToTxn and EndTxn (up to v4, transaction version 1: no bump at the end; v5,
//! version 2: a bump at every end), and Metadata. FindCoordinator names this broker, which
//! relays.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest,
    MetadataResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use protocol::kafka::KafkaAnswer;
use protocol::{AddPartitionRequest, ErrorCode, Request, Response, Status};

use super::{kafka_code, KafkaConn, CLUSTER_ID};
use protocol::acl::{Operation, ResourceType, CLUSTER_NAME};

/// FindCoordinator's key types: a consumer group, a transactional id.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

impl KafkaConn {
    /// Metadata, from the coordinator: every live broker at its Kafka address, this broker as
    /// the controller (it relays what admin clients send there), and the topics asked.
    pub(super) async fn metadata(self: &Arc<Self>, r: MetadataRequest, version: i16) -> KafkaAnswer {
        // Topics asked by id (v12, Kafka's KIP-516): answered by id.
        let ids: Vec<uuid::Uuid> = r.topics.iter().flatten().map(|t| t.topic_id).filter(|id| !id.is_nil()).collect();
        if !ids.is_empty() {
            return Box::pin(self.metadata_by_ids(r, ids, version)).await;
        }
        // v0: an empty list asks for every topic; from v1 null does, and an empty list for none.
        let (names, none) = match &r.topics {
            None => (Vec::new(), false),
            Some(list) if list.is_empty() => (Vec::new(), version >= 1),
            Some(list) => (list.iter().filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect(), false),
        };
        // Before v4 there is no such flag, and Kafka creates.
        let allow_auto_create = version < 4 || r.allow_auto_topic_creation;
        // The authorizer hides the topics the caller may not describe: a named one is answered
        // TOPIC_AUTHORIZATION_FAILED (whether or not it exists), an all-topics answer leaves it
        // out; creating a topic on the way needs CREATE on the cluster or the topic.
        let caller = self.caller();
        // Named topics the caller may describe but not create: asked without auto-creation,
        // and answered TOPIC_AUTHORIZATION_FAILED if they do not exist (the others are created
        // as asked).
        let mut uncreatable: HashSet<String> = HashSet::new();
        let (names, denied, none) = if caller.enabled() {
            let (allowed, denied): (Vec<String>, Vec<String>) =
                names.into_iter().partition(|n| caller.may(Operation::Describe, ResourceType::Topic, n));
            let none = none || (allowed.is_empty() && !denied.is_empty());
            if allow_auto_create && !caller.may_quietly(Operation::Create, ResourceType::Cluster, CLUSTER_NAME) {
                uncreatable = allowed
                    .iter()
                    .filter(|n| !caller.may_quietly(Operation::Create, ResourceType::Topic, n))
                    .cloned()
                    .collect();
            }
            (allowed, denied, none)
        } else {
            (names, Vec::new(), none)
        };
        let denied_topics = || {
            denied.iter().map(|n| {
                MetadataResponseTopic::default()
                    .with_name(Some(StrBytes::from_string(n.clone()).into()))
                    .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
            })
        };
        let creatable: Vec<String> = names.iter().filter(|n| !uncreatable.contains(*n)).cloned().collect();
        let (first, second) = match (creatable.is_empty(), uncreatable.is_empty()) {
            // Only uncreatable names: one request, without auto-creation.
            (true, false) => (names.clone(), None),
            (false, false) => (creatable, Some(uncreatable.iter().cloned().collect::<Vec<_>>())),
            _ => (names.clone(), None),
        };
        let req = Request::Metadata(protocol::MetadataRequest {
            topics: if none { Vec::new() } else { first },
            allow_auto_create: allow_auto_create && !none && !names.iter().all(|n| uncreatable.contains(n)),
        });
        let own_id = self.shared.config.id;
        let mut resp = MetadataResponse::default();
        if version >= 1 {
            resp = resp.with_controller_id(own_id.into());
        }
        if version >= 2 {
            resp = resp.with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)));
        }
        let listed = |known: &[protocol::BrokerInfo]| -> Vec<MetadataResponseBroker> {
            let listed = self.listed_brokers(known).into_iter();
            listed
                .map(|(id, host, port)| {
                    MetadataResponseBroker::default().with_node_id(id.into()).with_host(host).with_port(port)
                })
                .collect()
        };
        // The coordinator is out of reach: this broker, and every topic asked as not available
        // yet (retriable).
        let unavailable = |status: &Status, resp: MetadataResponse| {
            tracing::info!(%status, "Kafka Metadata: the coordinator did not answer");
            let topics = names
                .iter()
                .map(|n| {
                    MetadataResponseTopic::default()
                        .with_name(Some(StrBytes::from_string(n.clone()).into()))
                        .with_error_code(ErrorCode::LeaderNotAvailable.code())
                })
                .chain(denied_topics())
                .collect();
            KafkaAnswer::Reply(ResponseKind::Metadata(resp.with_brokers(listed(&[])).with_topics(topics)))
        };
        let mut own = match self.relay(req).await {
            Response::Metadata(m) if m.status.is_ok() => m,
            other => return unavailable(other.status(), resp),
        };
        if let Some(rest) = second {
            let req = Request::Metadata(protocol::MetadataRequest { topics: rest, allow_auto_create: false });
            match self.relay(req).await {
                Response::Metadata(m) if m.status.is_ok() => own.topics.extend(m.topics),
                other => return unavailable(other.status(), resp),
            }
        }
        // This broker is listed whatever the coordinator knows, so it is not offline either.
        let alive: HashSet<i32> =
            own.brokers.iter().filter(|b| b.alive).map(|b| b.id).chain(std::iter::once(own_id)).collect();
        let brokers = listed(&own.brokers);
        let topics: Vec<MetadataResponseTopic> = if none {
            denied_topics().collect()
        } else {
            own.topics
                .into_iter()
                .filter(|t| !caller.enabled() || caller.may_quietly(Operation::Describe, ResourceType::Topic, &t.name))
                .map(|t| {
                    if t.status.code == ErrorCode::UnknownTopicOrPartition && uncreatable.contains(&t.name) {
                        // Not there, and the caller may not create it.
                        return MetadataResponseTopic::default()
                            .with_name(Some(StrBytes::from_string(t.name).into()))
                            .with_error_code(ErrorCode::TopicAuthorizationFailed.code());
                    }
                    let name = Some(StrBytes::from_string(t.name).into());
                    if t.created {
                        // As Kafka answers an auto-created topic: not available until it leads.
                        return MetadataResponseTopic::default()
                            .with_name(name)
                            .with_error_code(ErrorCode::LeaderNotAvailable.code());
                    }
                    let partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut out = MetadataResponsePartition::default()
                                .with_partition_index(p.partition)
                                .with_leader_id(p.leader_id.into())
                                .with_replica_nodes(p.replicas.iter().map(|r| (*r).into()).collect())
                                .with_isr_nodes(p.isr.iter().map(|r| (*r).into()).collect());
                            if p.leader_id < 0 {
                                out = out.with_error_code(ErrorCode::LeaderNotAvailable.code());
                            }
                            if version >= 7 {
                                out = out.with_leader_epoch(p.leader_epoch);
                            }
                            if version >= 5 {
                                let offline = p.replicas.iter().filter(|r| !alive.contains(r)).map(|r| (*r).into());
                                out = out.with_offline_replicas(offline.collect());
                            }
                            out
                        })
                        .collect();
                    let topic = MetadataResponseTopic::default()
                        .with_name(name)
                        .with_error_code(kafka_code(t.status.code, ApiKey::Metadata, version))
                        .with_partitions(partitions);
                    if version >= 10 {
                        topic.with_topic_id(uuid::Uuid::from_u128(t.topic_id))
                    } else {
                        topic
                    }
                })
                .chain(denied_topics())
                .collect()
        };
        KafkaAnswer::Reply(ResponseKind::Metadata(resp.with_brokers(brokers).with_topics(topics)))
    }

    /// Metadata of topics asked by id, as Kafka answers it: a request naming any id is answered
    /// by its ids alone (names beside them are not looked at); an id no topic has is
    /// UNKNOWN_TOPIC_ID (no name), one the caller may not describe TOPIC_AUTHORIZATION_FAILED with
    /// its id and no name (ids are not secret, names are), the others as asked by name, never
    /// created. Ids came with version 10 but are looked up only from version 12 (where a name may
    /// be null): before, INVALID_REQUEST.
    async fn metadata_by_ids(self: &Arc<Self>, r: MetadataRequest, ids: Vec<uuid::Uuid>, version: i16) -> KafkaAnswer {
        let each = |code: ErrorCode| {
            let topics = ids.iter().map(|id| {
                MetadataResponseTopic::default().with_name(None).with_topic_id(*id).with_error_code(code.code())
            });
            KafkaAnswer::Reply(ResponseKind::Metadata(MetadataResponse::default().with_topics(topics.collect())))
        };
        if version < 12 {
            return each(ErrorCode::InvalidRequest);
        }
        let all = protocol::MetadataRequest { topics: Vec::new(), allow_auto_create: false };
        let known = match self.relay(Request::Metadata(all)).await {
            Response::Metadata(m) if m.status.is_ok() => m.topics,
            other => {
                tracing::info!(status = %other.status(), "Kafka Metadata by topic id: the coordinator did not answer");
                return each(ErrorCode::LeaderNotAvailable);
            }
        };
        let name_of = |id: &uuid::Uuid| known.iter().find(|t| t.topic_id == id.as_u128()).map(|t| t.name.clone());
        let mut names: Vec<String> = Vec::new();
        let mut unknown: Vec<uuid::Uuid> = Vec::new();
        for id in &ids {
            match name_of(id) {
                Some(n) if !names.contains(&n) => names.push(n),
                Some(_) => {}
                None if !unknown.contains(id) => unknown.push(*id),
                None => {}
            }
        }
        let by_name = r
            .with_topics(Some(
                names
                    .iter()
                    .map(|n| {
                        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                            .with_name(Some(StrBytes::from_string(n.clone()).into()))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        let mut answer = self.metadata(by_name, version).await;
        if let KafkaAnswer::Reply(ResponseKind::Metadata(resp)) = &mut answer {
            for t in &mut resp.topics {
                if t.error_code == ErrorCode::TopicAuthorizationFailed.code() {
                    let id = t.name.as_ref().and_then(|n| known.iter().find(|k| k.name == n.as_str()));
                    if let Some(k) = id {
                        t.topic_id = uuid::Uuid::from_u128(k.topic_id);
                        t.name = None;
                    }
                }
            }
            resp.topics.extend(unknown.into_iter().map(|id| {
                MetadataResponseTopic::default()
                    .with_name(None)
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::UnknownTopicId.code())
            }));
        }
        answer
    }

    /// FindCoordinator: this broker, for a transactional id and for a group (librdkafka asks
    /// whenever `group.id` is set); it relays what the client then sends.
    pub(super) fn find_coordinator(&self, r: FindCoordinatorRequest, version: i16) -> KafkaAnswer {
        let (host, port) = self.own_address();
        let node_id = self.shared.config.id;
        let caller = self.caller();
        // DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or the transactional id
        // (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key.
        let code_of = |key: &str| match r.key_type {
            KEY_TYPE_GROUP if !caller.may(Operation::Describe, ResourceType::Group, key) => {
                ErrorCode::GroupAuthorizationFailed
            }
            KEY_TYPE_TRANSACTION if !caller.may(Operation::Describe, ResourceType::TransactionalId, key) => {
                ErrorCode::TransactionalIdAuthorizationFailed
            }
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => ErrorCode::None,
            _ => ErrorCode::InvalidRequest,
        };
        let mut resp = FindCoordinatorResponse::default();
        if version >= 4 {
            let coordinators = r
                .coordinator_keys
                .into_iter()
                .map(|key| {
                    let code = code_of(&key);
                    let c = Coordinator::default().with_key(key).with_error_code(code.code());
                    if code == ErrorCode::None {
                        c.with_node_id(node_id.into()).with_host(host.clone()).with_port(port)
                    } else {
                        c.with_node_id((-1).into()).with_port(-1)
                    }
                })
                .collect();
            resp = resp.with_coordinators(coordinators);
        } else {
            match code_of(&r.key) {
                ErrorCode::None => resp = resp.with_node_id(node_id.into()).with_host(host).with_port(port),
                code => resp = resp.with_error_code(code.code()).with_node_id((-1).into()).with_port(-1),
            }
        }
        KafkaAnswer::Reply(ResponseKind::FindCoordinator(resp))
    }

    /// InitProducerId: a producer id and epoch (a bump of a transactional id's, fencing its
    /// earlier instances; with KIP-360's producer id and epoch, a retry or a bump by the holder).
    pub(super) async fn init_producer_id(
        self: &Arc<Self>,
        r: InitProducerIdRequest,
        version: i16,
        client_id: String,
    ) -> KafkaAnswer {
        let reply = |code: ErrorCode, producer_id: i64, epoch: i16| {
            KafkaAnswer::Reply(ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_error_code(kafka_code(code, ApiKey::InitProducerId, version))
                    .with_producer_id(producer_id.into())
                    .with_producer_epoch(epoch),
            ))
        };
        let tid = r.transactional_id.map(|t| t.to_string());
        // WRITE on the transactional id; without one (KIP-679), IDEMPOTENT_WRITE on the cluster
        // or WRITE on some topic.
        let caller = self.caller();
        let refused = caller.init_producer_id_refusal(tid.as_deref()).map(|s| s.code);
        if let Some(code) = refused {
            tracing::info!(
                target: "epochfence::fencing",
                transactional_id = tid.as_deref().unwrap_or(""),
                client_id = client_id.as_str(),
                client_address = %self.peer,
                principal = caller.principal(),
                status = %code,
                reason = code.name(),
                "kafka init refused"
            );
            return reply(code, -1, -1);
        }
        let max = self.shared.config.transaction_max_timeout_ms;
        if tid.is_some() && (r.transaction_timeout_ms <= 0 || r.transaction_timeout_ms > max) {
            tracing::info!(
                transactional_id = tid.as_deref(),
                transaction_timeout_ms = r.transaction_timeout_ms,
                transaction_max_timeout_ms = max,
                "Kafka InitProducerId refused: transaction timeout out of range"
            );
            return reply(ErrorCode::InvalidTransactionTimeout, -1, -1);
        }
        let (producer_id, producer_epoch) = if version >= 3 { (r.producer_id.0, r.producer_epoch) } else { (-1, -1) };
        let req = Request::InitProducerId(protocol::InitProducerIdRequest {
            transactional_id: tid.clone(),
            transaction_timeout_ms: r.transaction_timeout_ms,
            producer_id,
            producer_epoch,
            // Under the authorizer, an idempotent producer's id is bound to it.
            principal: caller.principal().to_string(),
        });
        match self.relay(req).await {
            Response::InitProducerId(i) if i.status.is_ok() => {
                // Who the granted instance is, for the run's timeline: the coordinator sees only
                // this broker's relay.
                tracing::info!(
                    target: "epochfence::fencing",
                    transactional_id = tid.as_deref().unwrap_or(""),
                    producer_id = i.producer_id,
                    epoch = i.producer_epoch,
                    client_id = client_id.as_str(),
                    client_address = %self.peer,
                    principal = %format!("User:{}", self.user()),
                    "kafka producer initialised"
                );
                reply(ErrorCode::None, i.producer_id, i.producer_epoch)
            }
            other => {
                tracing::info!(
                    target: "epochfence::fencing",
                    transactional_id = tid.as_deref().unwrap_or(""),
                    producer_id,
                    producer_epoch,
                    client_id = client_id.as_str(),
                    client_address = %self.peer,
                    principal = %format!("User:{}", self.user()),
                    status = %other.status(),
                    reason = other.status().code.name(),
                    "kafka init refused"
                );
                reply(other.status().code, -1, -1)
            }
        }
    }

    /// AddPartitionsToTxn (v0 to v3: one transaction): registers each partition in the open
    /// transaction (opening it), as the client does before its first write there.
    pub(super) async fn add_partitions_to_txn(
        self: &Arc<Self>,
        r: AddPartitionsToTxnRequest,
        version: i16,
    ) -> KafkaAnswer {
        let (producer_id, epoch) = (r.v3_and_below_producer_id.0, r.v3_and_below_producer_epoch);
        let asked: Vec<(kafka_protocol::messages::TopicName, Vec<i32>)> =
            r.v3_and_below_topics.into_iter().map(|t| (t.name, t.partitions)).collect();
        // WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every
        // partition), then on each topic (TOPIC_AUTHORIZATION_FAILED there,
        // OPERATION_NOT_ATTEMPTED on the others): nothing is registered unless all are allowed.
        let caller = self.caller();
        if caller.enabled() {
            let tid = r.v3_and_below_transactional_id.0.as_str();
            let tid_ok = caller.transactional_refusal(self.shared.pid_binder.as_ref(), tid, producer_id).is_none();
            let denied: HashSet<String> = asked
                .iter()
                .map(|(n, _)| n.to_string())
                .filter(|n| tid_ok && !caller.may(Operation::Write, ResourceType::Topic, n))
                .collect();
            let code_of = |n: &str| match (tid_ok, denied.contains(n)) {
                (false, _) => ErrorCode::TransactionalIdAuthorizationFailed,
                (true, true) => ErrorCode::TopicAuthorizationFailed,
                (true, false) => ErrorCode::OperationNotAttempted,
            };
            if !tid_ok || !denied.is_empty() {
                tracing::info!(
                    transactional_id = tid,
                    principal = caller.principal(),
                    "Kafka AddPartitionsToTxn not authorized"
                );
                let topics = asked
                    .into_iter()
                    .map(|(name, partitions)| {
                        let code = kafka_code(code_of(&name), ApiKey::AddPartitionsToTxn, version);
                        let results = partitions
                            .into_iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(code)
                            })
                            .collect();
                        AddPartitionsToTxnTopicResult::default().with_name(name).with_results_by_partition(results)
                    })
                    .collect();
                return KafkaAnswer::Reply(ResponseKind::AddPartitionsToTxn(
                    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics),
                ));
            }
        }
        // Every partition is sent before any answer is awaited: the coordinator decides them in
        // order and each answer comes once its registration is durable.
        let timeout = std::time::Duration::from_millis(self.shared.config.request_timeout_ms);
        let conn = match self.coordinator(std::time::Instant::now() + timeout).await {
            Ok(c) => Some(c),
            Err(status) => {
                tracing::info!(%status, "Kafka AddPartitionsToTxn: the coordinator is out of reach");
                None
            }
        };
        let mut pending = Vec::new();
        for (name, partitions) in &asked {
            for partition in partitions {
                let req = Request::AddPartition(AddPartitionRequest {
                    transactional_id: r.v3_and_below_transactional_id.0.to_string(),
                    producer_id,
                    producer_epoch: epoch,
                    topic: name.to_string(),
                    partition: *partition,
                    transactional: true,
                    verify_only: false,
                    topic_id: 0,
                    // A Kafka client's AddPartitionsToTxn (v0-3): transaction version 1.
                    transaction_version: 1,
                });
                let submitted = match &conn {
                    Some(c) => c.submit(req).await.map_err(|e| e.to_string()),
                    None => Err("no connection".to_string()),
                };
                pending.push(submitted);
            }
        }
        let mut codes = Vec::with_capacity(pending.len());
        let probe = self.relay_dialer();
        for p in pending {
            let status = match p {
                // Bounded, and given up once another replica has taken over (a frozen one).
                Ok(answer) => match self.answer_bounded(&probe, conn.as_deref(), answer, timeout).await {
                    Ok(Response::AddPartition(a)) => a.status,
                    Ok(other) => other.status().clone(),
                    Err(net::NetError::Refused { status, .. }) => status,
                    Err(e) => Status::new(ErrorCode::CoordinatorNotAvailable, e.to_string()),
                },
                Err(e) => Status::new(ErrorCode::CoordinatorNotAvailable, e),
            };
            if status.code == ErrorCode::NotCoordinator {
                // A standby: the client retries (COORDINATOR_NOT_AVAILABLE), on a relay to the
                // active replica.
                if let Some(c) = &conn {
                    self.relay_not_served(c, &status);
                }
            }
            if !status.is_ok() {
                tracing::info!(producer_id, epoch, %status, "Kafka AddPartitionsToTxn: a partition was refused");
            }
            codes.push(kafka_code(status.code, ApiKey::AddPartitionsToTxn, version));
        }
        let mut codes = codes.into_iter();
        let topics = asked
            .into_iter()
            .map(|(name, partitions)| {
                let results = partitions
                    .into_iter()
                    .map(|p| {
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(p)
                            .with_partition_error_code(codes.next().unwrap_or(ErrorCode::UnknownServerError.code()))
                    })
                    .collect();
                AddPartitionsToTxnTopicResult::default().with_name(name).with_results_by_partition(results)
            })
            .collect();
        KafkaAnswer::Reply(ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics),
        ))
    }

    /// EndTxn. Up to v4 (transaction version 1): commit or abort at the producer's epoch, with
    /// no bump; the client goes on with the same epoch and its sequences. From v5 (version 2,
    /// KIP-890): the coordinator bumps the epoch (or moves to a new producer id at exhaustion),
    /// writes the markers at the new epoch, and the answer carries the producer id and epoch to
    /// go on with (sequences start again at 0), so a delayed write or EndTxn of this
    /// transaction carries an older epoch than the next one and is fenced. A retried v5 EndTxn
    /// of a transaction that ended is answered with the id and epoch it ended into.
    pub(super) async fn end_txn(self: &Arc<Self>, r: EndTxnRequest, version: i16) -> KafkaAnswer {
        let bump_epoch = version >= 5;
        let caller = self.caller();
        if caller.transactional_refusal(self.shared.pid_binder.as_ref(), &r.transactional_id, r.producer_id.0).is_some()
        {
            let code = kafka_code(ErrorCode::TransactionalIdAuthorizationFailed, ApiKey::EndTxn, version);
            return KafkaAnswer::Reply(ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code)));
        }
        let req = Request::EndTxn(protocol::EndTxnRequest {
            transactional_id: r.transactional_id.to_string(),
            producer_id: r.producer_id.0,
            producer_epoch: r.producer_epoch,
            commit: r.committed,
            bump_epoch,
        });
        let (status, next) = match self.relay(req).await {
            Response::EndTxn(e) => (e.status, (e.producer_id, e.producer_epoch)),
            other => (other.status().clone(), (-1, -1)),
        };
        if !status.is_ok() {
            tracing::info!(transactional_id = %r.transactional_id.0, commit = r.committed, %status, "Kafka EndTxn refused");
        }
        let mut resp = EndTxnResponse::default().with_error_code(kafka_code(status.code, ApiKey::EndTxn, version));
        if bump_epoch && status.is_ok() {
            resp = resp.with_producer_id(next.0.into()).with_producer_epoch(next.1);
        }
        KafkaAnswer::Reply(ResponseKind::EndTxn(resp))
    }
}
