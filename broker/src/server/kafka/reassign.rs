//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): relayed to the
//! coordinator, which moves a partition's replicas online (`Cluster::handle_reassign`). ALTER
//! and DESCRIBE on the cluster, as Kafka authorizes them; without the authorizer, a move needs
//! the cluster secret on a cluster with one, as every request that changes the cluster does.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use protocol::acl::Operation;
use protocol::kafka::KafkaAnswer;
use protocol::{Request, Response};

use super::{kafka_code, KafkaConn};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(*b)).collect()
}

impl KafkaConn {
    /// AlterPartitionReassignments v0-1: each partition's move (or, with null replicas, its
    /// cancellation) relayed as an own Reassign. The answer comes once the move has begun (or
    /// completed, for a target already in sync), as Kafka's does; ListPartitionReassignments
    /// follows it. Version 0 always allows the replication factor to change (KIP-860 came
    /// with version 1).
    pub(super) async fn alter_partition_reassignments(
        self: &Arc<Self>,
        r: AlterPartitionReassignmentsRequest,
        version: i16,
    ) -> KafkaAnswer {
        let allow = version < 1 || r.allow_replication_factor_change;
        let mut out = AlterPartitionReassignmentsResponse::default().with_allow_replication_factor_change(allow);
        let refused = self.caller().cluster_refusal(Operation::Alter);
        if let Some(refused) = &refused {
            // Top-level and on every partition, as Kafka's error response has it.
            out = out
                .with_error_code(kafka_code(refused.code, ApiKey::AlterPartitionReassignments, version))
                .with_error_message(Some(s(refused.message.clone())));
        }
        let mut responses = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let topic = t.name.to_string();
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let status = match &refused {
                    Some(refused) => refused.clone(),
                    None => {
                        let req = Request::Reassign(protocol::ReassignRequest {
                            topic: topic.clone(),
                            partition: p.partition_index,
                            replicas: p.replicas.map(|r| r.iter().map(|b| b.0).collect()),
                            allow_replication_factor_change: allow,
                        });
                        self.admin_refusal(self.relay(req).await.status().clone(), "moving a partition's replicas")
                    }
                };
                if !status.is_ok() && refused.is_none() {
                    tracing::info!(%topic, partition = p.partition_index, %status, "Kafka AlterPartitionReassignments refused");
                }
                let code = kafka_code(status.code, ApiKey::AlterPartitionReassignments, version);
                partitions.push(
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message((code != 0).then(|| s(status.message))),
                );
            }
            responses
                .push(ReassignableTopicResponse::default().with_name(TopicName(s(topic))).with_partitions(partitions));
        }
        KafkaAnswer::Reply(ResponseKind::AlterPartitionReassignments(out.with_responses(responses)))
    }

    /// ListPartitionReassignments v0: the partitions being moved, of those asked (every one for
    /// null topics); partitions not being moved, and unknown ones, are left out, as Kafka does.
    pub(super) async fn list_partition_reassignments(
        self: &Arc<Self>,
        r: ListPartitionReassignmentsRequest,
        version: i16,
    ) -> KafkaAnswer {
        let out = ListPartitionReassignmentsResponse::default();
        let refuse = |out: ListPartitionReassignmentsResponse, status: protocol::Status| {
            let out = out
                .with_error_code(kafka_code(status.code, ApiKey::ListPartitionReassignments, version))
                .with_error_message(Some(s(status.message)));
            KafkaAnswer::Reply(ResponseKind::ListPartitionReassignments(out))
        };
        if let Some(refused) = self.caller().cluster_refusal(Operation::Describe) {
            return refuse(out, refused);
        }
        let topics = r.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
        let listed = match self.relay(Request::ListReassignments(protocol::ListReassignmentsRequest { topics })).await {
            Response::ListReassignments(l) if l.status.is_ok() => l.reassignments,
            other => return refuse(out, other.status().clone()),
        };
        let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
        for m in listed {
            let partition = OngoingPartitionReassignment::default()
                .with_partition_index(m.partition)
                .with_replicas(ids(&m.replicas))
                .with_adding_replicas(ids(&m.adding))
                .with_removing_replicas(ids(&m.removing));
            match topics.last_mut().filter(|t| t.name.0.as_str() == m.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(
                    OngoingTopicReassignment::default()
                        .with_name(TopicName(s(m.topic)))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        KafkaAnswer::Reply(ResponseKind::ListPartitionReassignments(out.with_topics(topics)))
    }
}
