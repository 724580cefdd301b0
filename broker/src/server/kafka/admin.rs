//! What Kafka's admin clients call: CreateTopics, DeleteTopics, CreatePartitions (relayed to
//! the coordinator, which refuses them from a client that proves no cluster secret when the
//! cluster has one), DescribeConfigs and DescribeCluster (honest minimal answers), and Kafka's
//! read-only tools for hanging transactions: DescribeProducers (this leader's producer state),
//! DescribeTransactions and ListTransactions (the coordinator's transactional ids). Not KIP-664's
//! abort, which would be a side door around the gate.

use protocol::acl::{Operation, ResourceType};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::describe_topic_partitions_response::{
    self, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::{alter_configs_response, incremental_alter_configs_response};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, DescribeProducersRequest, DescribeProducersResponse, DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, DescribeTransactionsRequest, DescribeTransactionsResponse, ElectLeadersRequest,
    ElectLeadersResponse, ListTransactionsRequest, ListTransactionsResponse, ResponseKind, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use protocol::kafka::KafkaAnswer;
use protocol::{ErrorCode, MetadataResponse, Request, Response, Status, TopicInfo, TransactionalState};
use uuid::Uuid;

use super::super::{leader_status, partition, Shared};
use super::{kafka_code, KafkaConn, CLUSTER_ID};

/// DescribeConfigs' resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Config sources (Kafka's ConfigSource).
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
/// Config types (Kafka's ConfigType).
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;
/// DescribeCluster's endpoint types.
const ENDPOINT_BROKERS: i8 = 1;
/// Kafka's UNSUPPORTED_ENDPOINT_TYPE.
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

impl KafkaConn {
    /// Metadata of `topics` from the coordinator (none auto-created).
    async fn topic_infos(self: &Arc<Self>, topics: Vec<String>) -> Result<MetadataResponse, Status> {
        match self.relay(Request::Metadata(protocol::MetadataRequest { topics, allow_auto_create: false })).await {
            Response::Metadata(m) if m.status.is_ok() => Ok(m),
            other => Err(other.status().clone()),
        }
    }

    /// A coordinator refusal of an admin request, in words a Kafka user can act on.
    pub(super) fn admin_refusal(&self, status: Status, what: &str) -> Status {
        if status.code == ErrorCode::ClusterAuthorizationFailed {
            return Status::new(
                status.code,
                format!(
                    "{what} needs the cluster secret on this cluster, which a Kafka client cannot prove: use \
                     epochfence's admin with --cluster-secret-file"
                ),
            );
        }
        status
    }

    pub(super) async fn create_topics(self: &Arc<Self>, r: CreateTopicsRequest, version: i16) -> KafkaAnswer {
        let mut results = Vec::with_capacity(r.topics.len());
        let caller = self.caller();
        // CREATE on the cluster, or on the topic.
        let cluster_create = caller.may_cluster(Operation::Create);
        for t in r.topics {
            let name = t.name.to_string();
            let mut refused: Option<Status> = None;
            if !cluster_create && !caller.may(Operation::Create, ResourceType::Topic, &name) {
                let code = ErrorCode::TopicAuthorizationFailed;
                refused = Some(caller.refusal(code, Operation::Create, ResourceType::Topic, &name));
            }
            if !t.assignments.is_empty() && refused.is_none() {
                refused = Some(Status::new(
                    ErrorCode::InvalidRequest,
                    "replica assignments are chosen by the coordinator: give num_partitions and replication_factor",
                ));
            }
            // Checked by the coordinator (`protocol::topic_config`): a config Kafka knows that
            // epochfence does not apply is INVALID_CONFIG, named.
            // A null value leaves the config at its default, as Kafka takes it.
            let configs: Vec<(String, String)> = t
                .configs
                .iter()
                .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
                .collect();
            let status = match refused {
                Some(s) => s,
                None => {
                    let req = Request::CreateTopic(protocol::CreateTopicRequest {
                        name: name.clone(),
                        partitions: t.num_partitions,
                        replication_factor: i32::from(t.replication_factor),
                        min_insync_replicas: -1,
                        validate_only: r.validate_only,
                        configs,
                    });
                    let status = self.relay(req).await.status().clone();
                    self.admin_refusal(status, "creating a topic")
                }
            };
            let mut out = CreatableTopicResult::default().with_name(t.name.clone()).with_error_code(kafka_code(
                status.code,
                ApiKey::CreateTopics,
                version,
            ));
            if !status.is_ok() {
                out = out.with_error_message(Some(s(status.message.clone())));
            }
            if version >= 5 {
                let info = if status.is_ok() && !r.validate_only {
                    self.topic_infos(vec![name]).await.ok().and_then(|m| m.topics.into_iter().next())
                } else {
                    None
                };
                out = match info.filter(|i| i.status.is_ok()) {
                    Some(i) => {
                        let rf = i.partitions.first().map_or(-1, |p| p.replicas.len() as i16);
                        let configs = topic_configs(&self.shared, &i)
                            .into_iter()
                            .map(|e| {
                                CreatableTopicConfigs::default()
                                    .with_name(s(e.name))
                                    .with_value(Some(s(e.value)))
                                    .with_read_only(e.read_only)
                                    .with_config_source(e.source)
                            })
                            .collect();
                        let out = out
                            .with_num_partitions(i.partitions.len() as i32)
                            .with_replication_factor(rf)
                            .with_configs(Some(configs));
                        if version >= 7 {
                            out.with_topic_id(Uuid::from_u128(i.topic_id))
                        } else {
                            out
                        }
                    }
                    None if status.is_ok() => {
                        out.with_num_partitions(t.num_partitions).with_replication_factor(t.replication_factor)
                    }
                    None => out.with_num_partitions(-1).with_replication_factor(-1),
                };
            }
            results.push(out);
        }
        KafkaAnswer::Reply(ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(results)))
    }

    pub(super) async fn delete_topics(self: &Arc<Self>, r: DeleteTopicsRequest, version: i16) -> KafkaAnswer {
        // Up to v5 by name; v6 by name or id.
        let asked: Vec<(Option<TopicName>, u128)> = if version >= 6 {
            r.topics.into_iter().map(|t| (t.name, t.topic_id.as_u128())).collect()
        } else {
            r.topic_names.into_iter().map(|n| (Some(n), 0)).collect()
        };
        let mut responses = Vec::with_capacity(asked.len());
        let caller = self.caller();
        // DELETE on the cluster, or on the topic (found by its id if only that is given).
        let cluster_delete = caller.may_cluster(Operation::Delete);
        let known = match asked.iter().any(|(n, _)| n.is_none()) && !cluster_delete && caller.enabled() {
            true => self.topic_infos(Vec::new()).await.map(|m| m.topics).unwrap_or_default(),
            false => Vec::new(),
        };
        for (name, topic_id) in asked {
            let named = name
                .as_ref()
                .map(|n| n.to_string())
                .or_else(|| known.iter().find(|t| t.topic_id == topic_id && topic_id != 0).map(|t| t.name.clone()));
            let allowed = cluster_delete
                || named.as_deref().is_some_and(|n| caller.may(Operation::Delete, ResourceType::Topic, n));
            let req = Request::DeleteTopic(protocol::DeleteTopicRequest {
                name: name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                topic_id,
            });
            let status = if allowed {
                self.admin_refusal(self.relay(req).await.status().clone(), "deleting a topic")
            } else {
                let shown = named.unwrap_or_else(|| Uuid::from_u128(topic_id).to_string());
                caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::Delete, ResourceType::Topic, &shown)
            };
            let mut out = DeletableTopicResult::default().with_name(name).with_error_code(kafka_code(
                status.code,
                ApiKey::DeleteTopics,
                version,
            ));
            if version >= 6 {
                out = out.with_topic_id(Uuid::from_u128(topic_id));
            }
            if version >= 5 && !status.is_ok() {
                out = out.with_error_message(Some(s(status.message)));
            }
            responses.push(out);
        }
        KafkaAnswer::Reply(ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(responses)))
    }

    pub(super) async fn create_partitions(self: &Arc<Self>, r: CreatePartitionsRequest, version: i16) -> KafkaAnswer {
        let mut results = Vec::with_capacity(r.topics.len());
        let caller = self.caller();
        for t in r.topics {
            // ALTER on the topic.
            let status = if !caller.may(Operation::Alter, ResourceType::Topic, &t.name) {
                caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::Alter, ResourceType::Topic, &t.name)
            } else if t.assignments.as_ref().is_some_and(Vec::is_empty) {
                // The own request cannot tell an empty list from none: refused here, as Kafka
                // refuses a list that is not one per new partition.
                Status::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "topic '{}': an empty replica assignment; give one list of replicas per new partition, or \
                         none (null) for the coordinator to place them",
                        t.name.as_str()
                    ),
                )
            } else {
                let assignments =
                    t.assignments.iter().flatten().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect();
                let req = Request::CreatePartitions(protocol::CreatePartitionsRequest {
                    name: t.name.to_string(),
                    count: t.count,
                    validate_only: r.validate_only,
                    assignments,
                });
                self.admin_refusal(self.relay(req).await.status().clone(), "adding partitions")
            };
            let mut out = CreatePartitionsTopicResult::default().with_name(t.name).with_error_code(kafka_code(
                status.code,
                ApiKey::CreatePartitions,
                version,
            ));
            if !status.is_ok() {
                out = out.with_error_message(Some(s(status.message)));
            }
            results.push(out);
        }
        KafkaAnswer::Reply(ResponseKind::CreatePartitions(CreatePartitionsResponse::default().with_results(results)))
    }

    pub(super) async fn describe_configs(self: &Arc<Self>, r: DescribeConfigsRequest, version: i16) -> KafkaAnswer {
        let mut results = Vec::with_capacity(r.resources.len());
        let caller = self.caller();
        for res in r.resources {
            let keys = res.configuration_keys.clone();
            // DESCRIBE_CONFIGS on the topic, or on the cluster for a broker.
            let name = res.resource_name.as_str();
            let configs = match res.resource_type {
                RESOURCE_TOPIC if !caller.may(Operation::DescribeConfigs, ResourceType::Topic, name) => {
                    let code = ErrorCode::TopicAuthorizationFailed;
                    Err(caller.refusal(code, Operation::DescribeConfigs, ResourceType::Topic, name))
                }
                RESOURCE_BROKER if !caller.may_cluster(Operation::DescribeConfigs) => {
                    let code = ErrorCode::ClusterAuthorizationFailed;
                    let cluster = protocol::acl::CLUSTER_NAME;
                    Err(caller.refusal(code, Operation::DescribeConfigs, ResourceType::Cluster, cluster))
                }
                RESOURCE_TOPIC => match self.topic_infos(vec![res.resource_name.to_string()]).await {
                    Ok(m) => match m.topics.into_iter().next() {
                        Some(t) if t.status.is_ok() => Ok(topic_configs(&self.shared, &t)),
                        Some(t) => Err(t.status),
                        None => Err(Status::new(ErrorCode::UnknownTopicOrPartition, "no such topic")),
                    },
                    Err(status) => Err(status),
                },
                RESOURCE_BROKER => {
                    let name = res.resource_name.as_str();
                    if name.is_empty() || name == self.shared.config.id.to_string() {
                        Ok(broker_configs(&self.shared))
                    } else {
                        Err(Status::new(
                            ErrorCode::InvalidRequest,
                            format!("this is broker {}: ask broker {name} for its configs", self.shared.config.id),
                        ))
                    }
                }
                other => Err(Status::new(
                    ErrorCode::InvalidRequest,
                    format!("resource type {other}: only topics (2) and brokers (4) have configs here"),
                )),
            };
            let mut out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match configs {
                Ok(all) => {
                    let configs = all
                        .into_iter()
                        .filter(|e| keys.as_ref().is_none_or(|k| k.iter().any(|k| k.as_str() == e.name)))
                        .map(|e| {
                            let mut c = DescribeConfigsResourceResult::default()
                                .with_name(s(e.name))
                                .with_value(Some(s(e.value)))
                                .with_read_only(e.read_only)
                                .with_config_source(e.source);
                            if version >= 1 && r.include_synonyms {
                                c = c.with_synonyms(
                                    e.synonyms
                                        .into_iter()
                                        .map(|(name, value, source)| {
                                            DescribeConfigsSynonym::default()
                                                .with_name(s(name))
                                                .with_value(Some(s(value)))
                                                .with_source(source)
                                        })
                                        .collect(),
                                );
                            }
                            if version >= 3 {
                                c = c.with_config_type(e.config_type);
                                if r.include_documentation {
                                    c = c.with_documentation(e.doc.map(s));
                                }
                            }
                            c
                        })
                        .collect();
                    out = out.with_configs(configs);
                }
                Err(status) => {
                    out = out
                        .with_error_code(kafka_code(status.code, ApiKey::DescribeConfigs, version))
                        .with_error_message(Some(s(status.message)));
                }
            }
            results.push(out);
        }
        KafkaAnswer::Reply(ResponseKind::DescribeConfigs(DescribeConfigsResponse::default().with_results(results)))
    }

    /// IncrementalAlterConfigs (`replace` false) and AlterConfigs (`replace` true, every config
    /// not named back to its default): each topic's changes relayed as one own AlterConfigs,
    /// checked by the coordinator (INVALID_CONFIG naming a config Kafka knows and epochfence
    /// does not apply, or a bad value). ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED),
    /// on the cluster for a broker (CLUSTER_AUTHORIZATION_FAILED); a broker's configs are its
    /// flags and are not changed (INVALID_REQUEST). APPEND and SUBTRACT (operations 2 and 3) are
    /// for list configs, whose only one here, `cleanup.policy`, takes only `delete`: SET it.
    async fn alter_configs_of(
        self: &Arc<Self>,
        (resource_type, name): (i8, &str),
        changes: Result<Vec<protocol::ConfigChange>, Status>,
        replace: bool,
        validate_only: bool,
    ) -> Status {
        let caller = self.caller();
        match resource_type {
            RESOURCE_TOPIC if !caller.may(Operation::AlterConfigs, ResourceType::Topic, name) => {
                caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::AlterConfigs, ResourceType::Topic, name)
            }
            RESOURCE_TOPIC => match changes {
                Err(status) => status,
                Ok(changes) => {
                    let req = Request::AlterConfigs(protocol::AlterConfigsRequest {
                        topic: name.to_string(),
                        changes,
                        replace,
                        validate_only,
                    });
                    let status = self.relay(req).await.status().clone();
                    self.admin_refusal(status, "changing a topic's configs")
                }
            },
            RESOURCE_BROKER if !caller.may_cluster(Operation::AlterConfigs) => {
                let cluster = protocol::acl::CLUSTER_NAME;
                caller.refusal(
                    ErrorCode::ClusterAuthorizationFailed,
                    Operation::AlterConfigs,
                    ResourceType::Cluster,
                    cluster,
                )
            }
            RESOURCE_BROKER => Status::new(
                ErrorCode::InvalidRequest,
                "a broker's configs are its command-line flags (restart it with others); a topic's configs override \
                 them: alter the topic's",
            ),
            other => Status::new(
                ErrorCode::InvalidRequest,
                format!("resource type {other}: only topics (2) and brokers (4) have configs here"),
            ),
        }
    }

    pub(super) async fn incremental_alter_configs(
        self: &Arc<Self>,
        r: IncrementalAlterConfigsRequest,
        version: i16,
    ) -> KafkaAnswer {
        let mut responses = Vec::with_capacity(r.resources.len());
        for res in r.resources {
            let changes: Result<Vec<protocol::ConfigChange>, Status> = res
                .configs
                .iter()
                .map(|c| {
                    let name = c.name.to_string();
                    let value = c.value.as_ref().map(|v| v.to_string());
                    match (c.config_operation, value) {
                        (0, Some(value)) => Ok(protocol::ConfigChange::Set(name, value)),
                        (0, None) => Err(Status::new(
                            ErrorCode::InvalidConfig,
                            format!("{name}: SET needs a value (DELETE puts the default back)"),
                        )),
                        (1, _) => Ok(protocol::ConfigChange::Delete(name)),
                        (2 | 3, _) => Err(Status::new(
                            ErrorCode::InvalidConfig,
                            format!(
                                "{name}: APPEND and SUBTRACT are for list configs; the only one a topic has here, \
                                 cleanup.policy, takes only delete: SET it"
                            ),
                        )),
                        (op, _) => Err(Status::new(
                            ErrorCode::InvalidRequest,
                            format!("{name}: config operation {op}: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT"),
                        )),
                    }
                })
                .collect();
            let name = res.resource_name.to_string();
            let status = self.alter_configs_of((res.resource_type, &name), changes, false, r.validate_only).await;
            responses.push(
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(kafka_code(status.code, ApiKey::IncrementalAlterConfigs, version))
                    .with_error_message((!status.is_ok()).then(|| s(status.message)))
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name),
            );
        }
        KafkaAnswer::Reply(ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        ))
    }

    pub(super) async fn alter_configs(self: &Arc<Self>, r: AlterConfigsRequest, version: i16) -> KafkaAnswer {
        let mut responses = Vec::with_capacity(r.resources.len());
        for res in r.resources {
            // A null value leaves the config at its default (the set is replaced).
            let changes = Ok(res
                .configs
                .iter()
                .filter_map(|c| {
                    c.value.as_ref().map(|v| protocol::ConfigChange::Set(c.name.to_string(), v.to_string()))
                })
                .collect());
            let name = res.resource_name.to_string();
            let status = self.alter_configs_of((res.resource_type, &name), changes, true, r.validate_only).await;
            responses.push(
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(kafka_code(status.code, ApiKey::AlterConfigs, version))
                    .with_error_message((!status.is_ok()).then(|| s(status.message)))
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name),
            );
        }
        KafkaAnswer::Reply(ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(responses)))
    }

    /// ElectLeaders: ALTER on the cluster, then each partition's election relayed as an own
    /// ElectLeader, Kafka's PREFERRED (0, and every version 0 request) or UNCLEAN (1). With no
    /// partitions named, every partition of every topic, leaving out those that needed none (as
    /// Kafka does).
    pub(super) async fn elect_leaders(self: &Arc<Self>, r: ElectLeadersRequest, version: i16) -> KafkaAnswer {
        let mut out = ElectLeadersResponse::default();
        // The top-level code came with version 1: before, a refusal is each partition's.
        let top_level = |out: ElectLeadersResponse, status: &Status| {
            if version >= 1 {
                out.with_error_code(kafka_code(status.code, ApiKey::ElectLeaders, version))
            } else {
                out
            }
        };
        let election = match (version, r.election_type) {
            (0, _) | (_, 0) => protocol::Election::Preferred,
            (_, 1) => protocol::Election::Unclean,
            (_, other) => {
                let refused = Status::new(
                    ErrorCode::InvalidRequest,
                    format!("election type {other}: 0 (preferred) or 1 (unclean)"),
                );
                return KafkaAnswer::Reply(ResponseKind::ElectLeaders(top_level(out, &refused)));
            }
        };
        // ALTER on the cluster: refused as a whole (and, before version 1's top-level code, per
        // partition named); a request for every partition then answers none, as Kafka's does,
        // naming no topic the caller may not describe.
        let refused = self.caller().cluster_refusal(Operation::Alter);
        if let Some(status) = &refused {
            out = top_level(out, status);
        }
        let all = r.topic_partitions.is_none();
        let asked: Vec<(String, Vec<i32>)> = match r.topic_partitions {
            Some(topics) => topics.into_iter().map(|t| (t.topic.to_string(), t.partitions)).collect(),
            None if refused.is_some() => Vec::new(),
            None => match self.topic_infos(Vec::new()).await {
                Ok(m) => {
                    m.topics.into_iter().map(|t| (t.name, t.partitions.iter().map(|p| p.partition).collect())).collect()
                }
                Err(status) => return KafkaAnswer::Reply(ResponseKind::ElectLeaders(top_level(out, &status))),
            },
        };
        let mut results = Vec::with_capacity(asked.len());
        for (topic, partitions) in asked {
            let mut each = Vec::with_capacity(partitions.len());
            for partition in partitions {
                let status = match &refused {
                    Some(status) => status.clone(),
                    None => {
                        let req = Request::ElectLeader(protocol::ElectLeaderRequest {
                            topic: topic.clone(),
                            partition,
                            election,
                        });
                        self.admin_refusal(self.relay(req).await.status().clone(), "electing a leader")
                    }
                };
                if all && status.code == ErrorCode::ElectionNotNeeded {
                    continue;
                }
                if !status.is_ok() {
                    tracing::info!(%topic, partition, %status, "Kafka ElectLeaders refused");
                }
                let code = kafka_code(status.code, ApiKey::ElectLeaders, version);
                each.push(
                    PartitionResult::default()
                        .with_partition_id(partition)
                        .with_error_code(code)
                        .with_error_message((code != 0).then(|| s(status.message))),
                );
            }
            if !(all && each.is_empty()) {
                results
                    .push(ReplicaElectionResult::default().with_topic(TopicName(s(topic))).with_partition_result(each));
            }
        }
        KafkaAnswer::Reply(ResponseKind::ElectLeaders(out.with_replica_election_results(results)))
    }

    pub(super) async fn describe_cluster(self: &Arc<Self>, r: DescribeClusterRequest, version: i16) -> KafkaAnswer {
        let mut resp = DescribeClusterResponse::default()
            .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
            .with_controller_id(self.shared.config.id.into());
        // DESCRIBE on the cluster.
        if let Some(status) = self.caller().cluster_refusal(Operation::Describe) {
            let resp = resp.with_error_code(status.code.code()).with_error_message(Some(s(status.message)));
            return KafkaAnswer::Reply(ResponseKind::DescribeCluster(resp));
        }
        if version >= 1 {
            resp = resp.with_endpoint_type(r.endpoint_type);
            if r.endpoint_type != ENDPOINT_BROKERS {
                let resp = resp
                    .with_error_code(UNSUPPORTED_ENDPOINT_TYPE)
                    .with_error_message(Some(s("epochfence's controller is its coordinator: ask for brokers (1)")));
                return KafkaAnswer::Reply(ResponseKind::DescribeCluster(resp));
            }
        }
        match self.topic_infos(Vec::new()).await {
            Ok(m) => {
                let brokers = self
                    .listed_brokers(&m.brokers)
                    .into_iter()
                    .map(|(id, host, port)| {
                        DescribeClusterBroker::default().with_broker_id(id.into()).with_host(host).with_port(port)
                    })
                    .collect();
                resp = resp.with_brokers(brokers);
            }
            Err(status) => {
                resp = resp
                    .with_error_code(kafka_code(status.code, ApiKey::DescribeCluster, version))
                    .with_error_message(Some(s(status.message)));
            }
        }
        KafkaAnswer::Reply(ResponseKind::DescribeCluster(resp))
    }

    pub(super) async fn describe_transactions(
        self: &Arc<Self>,
        r: DescribeTransactionsRequest,
        version: i16,
    ) -> KafkaAnswer {
        let known = self.transactional_ids().await;
        let caller = self.caller();
        let states = r
            .transactional_ids
            .into_iter()
            .map(|tid| {
                let out = TransactionState::default().with_transactional_id(tid.clone());
                // DESCRIBE on the transactional id.
                if !caller.may(Operation::Describe, ResourceType::TransactionalId, &tid) {
                    return out.with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
                }
                match &known {
                    Err(status) => out.with_error_code(kafka_code(status.code, ApiKey::DescribeTransactions, version)),
                    Ok(all) => match all.iter().find(|t| t.transactional_id == tid.as_str()) {
                        None => out.with_error_code(ErrorCode::TransactionalIdNotFound.code()),
                        Some(t) => out
                            .with_transaction_state(s(t.state.clone()))
                            .with_transaction_timeout_ms(t.transaction_timeout_ms)
                            .with_transaction_start_time_ms(if t.age_ms >= 0 { now_wall_ms() - t.age_ms } else { -1 })
                            .with_producer_id(t.producer_id.into())
                            .with_producer_epoch(t.producer_epoch)
                            // Only the partitions of topics the caller may describe.
                            .with_topics(topic_data(
                                &t.partitions
                                    .iter()
                                    .filter(|p| {
                                        p.rsplit_once('-').is_none_or(|(topic, _)| {
                                            caller.may_quietly(Operation::Describe, ResourceType::Topic, topic)
                                        })
                                    })
                                    .cloned()
                                    .collect::<Vec<_>>(),
                            )),
                    },
                }
            })
            .collect();
        KafkaAnswer::Reply(ResponseKind::DescribeTransactions(
            DescribeTransactionsResponse::default().with_transaction_states(states),
        ))
    }

    pub(super) async fn list_transactions(self: &Arc<Self>, r: ListTransactionsRequest, version: i16) -> KafkaAnswer {
        const STATES: [&str; 6] =
            ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"];
        let unknown: Vec<StrBytes> =
            r.state_filters.iter().filter(|f| !STATES.contains(&f.as_str())).cloned().collect();
        let resp = match self.transactional_ids().await {
            Err(status) => ListTransactionsResponse::default().with_error_code(kafka_code(
                status.code,
                ApiKey::ListTransactions,
                version,
            )),
            Ok(all) => {
                // Those the caller may describe.
                let caller = self.caller();
                let listed = all
                    .into_iter()
                    .filter(|t| {
                        caller.may_quietly(Operation::Describe, ResourceType::TransactionalId, &t.transactional_id)
                    })
                    .filter(|t| r.state_filters.is_empty() || r.state_filters.iter().any(|f| f.as_str() == t.state))
                    .filter(|t| {
                        r.producer_id_filters.is_empty() || r.producer_id_filters.iter().any(|p| p.0 == t.producer_id)
                    })
                    .filter(|t| version < 1 || r.duration_filter < 0 || t.age_ms >= r.duration_filter)
                    .map(|t| {
                        ListedTransaction::default()
                            .with_transactional_id(TransactionalId(s(t.transactional_id)))
                            .with_producer_id(t.producer_id.into())
                            .with_transaction_state(s(t.state))
                    })
                    .collect();
                ListTransactionsResponse::default().with_transaction_states(listed)
            }
        };
        KafkaAnswer::Reply(ResponseKind::ListTransactions(resp.with_unknown_state_filters(unknown)))
    }

    /// DescribeTopicPartitions (KIP-966): the topics named (every topic the caller may
    /// describe, if none is), by name, each partition's leader, epoch, replicas, ISR, eligible
    /// leader replicas and the replicas their brokers report offline, from a relayed Metadata
    /// (topic ids) and Describe; at most `response_partition_limit` partitions (2,000 at most,
    /// as Kafka's), from `cursor` on, with the cursor to go on from when more are left. A named
    /// topic the caller may not describe: TOPIC_AUTHORIZATION_FAILED; one that does not exist:
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub(super) async fn describe_topic_partitions(self: &Arc<Self>, r: DescribeTopicPartitionsRequest) -> KafkaAnswer {
        let caller = self.caller();
        let named = !r.topics.is_empty();
        let topic_answer = |name: &str, code: i16| {
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(s(name))))
                .with_error_code(code)
                .with_topic_authorized_operations(i32::MIN)
        };
        let known = match (self.topic_infos(Vec::new()).await, self.relay(Request::Describe).await) {
            (Ok(m), Response::Describe(d)) if d.status.is_ok() => Some((m.topics, d.partitions)),
            (Err(status), _) | (_, Response::Describe(protocol::DescribeResponse { status, .. })) => {
                tracing::info!(%status, "DescribeTopicPartitions: the coordinator did not answer");
                None
            }
            _ => None,
        };
        let Some((topics, partitions)) = known else {
            // No answer to give: every topic named gets the coordinator's unavailability.
            let code = kafka_code(ErrorCode::CoordinatorNotAvailable, ApiKey::DescribeTopicPartitions, 0);
            let out = r.topics.iter().map(|t| topic_answer(t.name.as_str(), code)).collect();
            return KafkaAnswer::Reply(ResponseKind::DescribeTopicPartitions(
                DescribeTopicPartitionsResponse::default().with_topics(out),
            ));
        };
        let mut names: Vec<String> = if named {
            r.topics.iter().map(|t| t.name.to_string()).collect()
        } else {
            topics
                .iter()
                .map(|t| t.name.clone())
                .filter(|n| caller.may_quietly(Operation::Describe, ResourceType::Topic, n))
                .collect()
        };
        names.sort();
        names.dedup();
        let (from_topic, from_partition) =
            r.cursor.as_ref().map_or((String::new(), 0), |c| (c.topic_name.to_string(), c.partition_index));
        let mut left = r.response_partition_limit.clamp(1, 2_000) as usize;
        let mut out = Vec::new();
        let mut next = None;
        for name in names.into_iter().filter(|n| *n >= from_topic) {
            let first = if name == from_topic { from_partition } else { 0 };
            if named && !caller.may(Operation::Describe, ResourceType::Topic, &name) {
                out.push(topic_answer(&name, ErrorCode::TopicAuthorizationFailed.code()));
                continue;
            }
            let Some(info) = topics.iter().find(|t| t.name == name) else {
                out.push(topic_answer(&name, ErrorCode::UnknownTopicOrPartition.code()));
                continue;
            };
            let mut held: Vec<&protocol::PartitionState> =
                partitions.iter().filter(|p| p.topic == name && p.partition >= first).collect();
            held.sort_by_key(|p| p.partition);
            if left == 0 {
                next = Some((name, first));
                break;
            }
            let take = held.len().min(left);
            left -= take;
            let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
            let answered = held[..take]
                .iter()
                .map(|p| {
                    let offline: Vec<i32> =
                        p.progress.iter().filter(|g| g.problem == "offline").map(|g| g.broker_id).collect();
                    DescribeTopicPartitionsResponsePartition::default()
                        .with_partition_index(p.partition)
                        .with_leader_id(BrokerId(p.leader_id))
                        .with_leader_epoch(p.leader_epoch)
                        .with_replica_nodes(ids(&p.replicas))
                        .with_isr_nodes(ids(&p.isr))
                        .with_eligible_leader_replicas(Some(ids(&p.elr)))
                        .with_last_known_elr(Some(Vec::new()))
                        .with_offline_replicas(ids(&offline))
                })
                .collect();
            out.push(topic_answer(&name, 0).with_topic_id(Uuid::from_u128(info.topic_id)).with_partitions(answered));
            if take < held.len() {
                next = Some((name, held[take].partition));
                break;
            }
        }
        let cursor = next.map(|(topic, partition)| {
            describe_topic_partitions_response::Cursor::default()
                .with_topic_name(TopicName(s(topic)))
                .with_partition_index(partition)
        });
        KafkaAnswer::Reply(ResponseKind::DescribeTopicPartitions(
            DescribeTopicPartitionsResponse::default().with_topics(out).with_next_cursor(cursor),
        ))
    }

    /// Every transactional id the coordinator holds (its Describe, which is read-only).
    async fn transactional_ids(self: &Arc<Self>) -> Result<Vec<TransactionalState>, Status> {
        match self.relay(Request::Describe).await {
            Response::Describe(d) if d.status.is_ok() => Ok(d.transactional_ids),
            other => Err(other.status().clone()),
        }
    }
}

/// DescribeProducers: the producers this leader's partitions know.
pub(super) fn describe_producers(
    shared: &Shared,
    caller: &super::authz::Caller,
    r: DescribeProducersRequest,
    version: i16,
) -> KafkaAnswer {
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            // READ on the topic.
            let denied = !caller.may(Operation::Read, ResourceType::Topic, &t.name);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let out = PartitionResponse::default().with_partition_index(index);
                    let found = if denied {
                        let code = ErrorCode::TopicAuthorizationFailed;
                        Err(caller.refusal(code, Operation::Read, ResourceType::Topic, &t.name))
                    } else {
                        partition(shared, &t.name, index)
                            .and_then(|p| p.active_producers(-1).map_err(|e| leader_status(shared, &t.name, index, &e)))
                    };
                    match found {
                        Ok(producers) => out.with_active_producers(
                            producers
                                .into_iter()
                                .map(|p| {
                                    ProducerState::default()
                                        .with_producer_id(p.producer_id.into())
                                        .with_producer_epoch(i32::from(p.epoch))
                                        .with_last_sequence(p.last_sequence)
                                        .with_last_timestamp(-1)
                                        .with_coordinator_epoch(-1)
                                        .with_current_txn_start_offset(p.txn_start_offset.unwrap_or(-1))
                                })
                                .collect(),
                        ),
                        Err(status) => out
                            .with_error_code(kafka_code(status.code, ApiKey::DescribeProducers, version))
                            .with_error_message(Some(s(status.message))),
                    }
                })
                .collect();
            TopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    KafkaAnswer::Reply(ResponseKind::DescribeProducers(DescribeProducersResponse::default().with_topics(topics)))
}

/// `["t-0", "t-1", "u-3"]` as DescribeTransactions' topics.
fn topic_data(partitions: &[String]) -> Vec<TopicData> {
    let mut out: Vec<TopicData> = Vec::new();
    for p in partitions {
        let Some((topic, index)) = p.rsplit_once('-') else { continue };
        let Ok(index) = index.parse::<i32>() else { continue };
        match out.iter_mut().find(|t| t.topic.as_str() == topic) {
            Some(t) => t.partitions.push(index),
            None => out.push(TopicData::default().with_topic(TopicName(s(topic))).with_partitions(vec![index])),
        }
    }
    out
}

fn now_wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// One config as DescribeConfigs (and CreateTopics from version 5) reports it.
struct ConfigEntry {
    name: &'static str,
    value: String,
    source: i8,
    read_only: bool,
    config_type: i8,
    /// (name, value, source), the one that applies first (Kafka's synonyms).
    synonyms: Vec<(&'static str, String, i8)>,
    doc: Option<&'static str>,
}

/// The value broker setting `topic_key` (a topic config's name) has under `c`.
fn broker_value(c: &super::super::BrokerConfig, topic_key: &str) -> String {
    use protocol::topic_config as tc;
    let or_max = |v: Option<u64>| v.map_or(i64::MAX, |v| i64::try_from(v).unwrap_or(i64::MAX)).to_string();
    match topic_key {
        tc::RETENTION_MS => c.log.retention_ms.unwrap_or(-1).to_string(),
        tc::RETENTION_BYTES => c.log.retention_bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)).to_string(),
        tc::SEGMENT_BYTES => c.log.segment_bytes.to_string(),
        // No roll by time: never.
        tc::SEGMENT_MS => c.log.segment_ms.unwrap_or(i64::MAX).to_string(),
        tc::MAX_MESSAGE_BYTES => c.batch_bytes_max.to_string(),
        tc::TIMESTAMP_TYPE => "CreateTime".into(),
        tc::TIMESTAMP_BEFORE_MAX_MS => or_max(c.message_timestamp_before_max_ms),
        tc::TIMESTAMP_AFTER_MAX_MS => or_max(c.message_timestamp_after_max_ms),
        tc::CLEANUP_POLICY => "delete".into(),
        tc::COMPRESSION_TYPE => "producer".into(),
        _ => String::new(),
    }
}

/// A topic's configs: each one epochfence applies, its own value (TOPIC_CONFIG) where it sets
/// one, else this broker's (STATIC_BROKER_CONFIG when its flag was given, else
/// DEFAULT_CONFIG), with its synonyms (the topic's, the broker's flag, the default) and what it
/// does. `min.insync.replicas` is always the topic's.
fn topic_configs(shared: &Shared, t: &TopicInfo) -> Vec<ConfigEntry> {
    use protocol::topic_config as tc;
    let defaults = super::super::BrokerConfig::new(0, "", "");
    tc::KEYS
        .iter()
        .map(|k| {
            let own = if k.name == tc::MIN_INSYNC_REPLICAS {
                Some(t.min_insync_replicas.to_string())
            } else {
                t.configs.iter().find(|(n, _)| n == k.name).map(|(_, v)| v.clone())
            };
            let mut synonyms = Vec::new();
            if let Some(v) = &own {
                synonyms.push((k.name, v.clone(), SOURCE_TOPIC));
            }
            let broker = broker_value(&shared.config, k.name);
            let broker_source = source(shared, k.broker_synonym);
            if k.name != tc::MIN_INSYNC_REPLICAS {
                if broker_source == SOURCE_STATIC_BROKER {
                    synonyms.push((k.broker_synonym, broker.clone(), SOURCE_STATIC_BROKER));
                }
                synonyms.push((k.broker_synonym, broker_value(&defaults, k.name), SOURCE_DEFAULT));
            }
            let (value, source) = match own {
                Some(v) => (v, SOURCE_TOPIC),
                None => (broker, broker_source),
            };
            ConfigEntry {
                name: k.name,
                value,
                source,
                read_only: false,
                config_type: k.config_type,
                synonyms,
                doc: Some(k.doc),
            }
        })
        .collect()
}

/// Where broker config `broker_key`'s value comes from: STATIC_BROKER_CONFIG if its flag was
/// given on the command line, else DEFAULT_CONFIG (the broker's default).
fn source(shared: &Shared, broker_key: &str) -> i8 {
    if shared.config.configs_given.contains(&broker_key) {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

/// This broker's settings, as Kafka names them.
fn broker_configs(shared: &Shared) -> Vec<ConfigEntry> {
    let c = &shared.config;
    let opt = |v: Option<i64>| v.map_or("-1".to_string(), |v| v.to_string());
    let entry = |name: &'static str, value: String, source: i8, config_type: i8| ConfigEntry {
        synonyms: vec![(name, value.clone(), source)],
        name,
        value,
        source,
        read_only: true,
        config_type,
        doc: None,
    };
    let given = |key: &'static str, value: String, config_type: i8| entry(key, value, source(shared, key), config_type);
    let mut out = vec![
        entry("broker.id", c.id.to_string(), SOURCE_STATIC_BROKER, TYPE_INT),
        given("transaction.max.timeout.ms", c.transaction_max_timeout_ms.to_string(), TYPE_INT),
        given("message.max.bytes", c.batch_bytes_max.to_string(), TYPE_INT),
        given("log.segment.bytes", c.log.segment_bytes.to_string(), TYPE_INT),
        given("log.retention.ms", opt(c.log.retention_ms), TYPE_LONG),
        given("log.retention.bytes", opt(c.log.retention_bytes.map(|b| b as i64)), TYPE_LONG),
        given("replica.lag.time.max.ms", c.replica_lag_ms.to_string(), TYPE_LONG),
        // None: no limit, Kafka's Long.MAX_VALUE (as the topic configs report it).
        given(
            "log.message.timestamp.after.max.ms",
            broker_value(c, protocol::topic_config::TIMESTAMP_AFTER_MAX_MS),
            TYPE_LONG,
        ),
        given(
            "log.message.timestamp.before.max.ms",
            broker_value(c, protocol::topic_config::TIMESTAMP_BEFORE_MAX_MS),
            TYPE_LONG,
        ),
        // The Kafka listener's mechanisms (empty on a listener without SASL).
        entry(
            "sasl.enabled.mechanisms",
            shared
                .kafka_sasl()
                .map_or(String::new(), |s| s.mechanisms.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")),
            if shared.kafka_sasl().is_some() { source(shared, "sasl.enabled.mechanisms") } else { SOURCE_DEFAULT },
            TYPE_LIST,
        ),
        // KIP-368 re-authentication (0: off, Kafka's default; librdkafka's own tests read it).
        given("connections.max.reauth.ms", shared.config.kafka_sasl.max_reauth_ms.to_string(), TYPE_LONG),
    ];
    // The Kafka listener as clients are told to reach it (`--kafka-listen`, `--kafka-advertise`),
    // named by its security protocol as Kafka names a listener that has no name of its own.
    if let Some(addr) = &shared.kafka_addr {
        let listener = format!("{}://{addr}", shared.kafka_security());
        out.push(entry("advertised.listeners", listener, SOURCE_STATIC_BROKER, TYPE_LIST));
    }
    out
}
