//! KIP-848 consumer groups over the Kafka wire: ConsumerGroupHeartbeat (v0-1) and
//! ConsumerGroupDescribe (v0-1), relayed to the coordinator, which assigns the partitions and
//! fences members by their member epochs (`coordinator::consumer_group`).

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use protocol::acl::{Operation, ResourceType};
use protocol::kafka::KafkaAnswer;
use protocol::{ErrorCode, Request, Response, Status};
use uuid::Uuid;

use super::{kafka_code, KafkaConn};

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The code a ConsumerGroupHeartbeat answer carries for `code`: librdkafka treats every code it
/// does not know there as fatal (since 2.15), so anything else (a relay that failed, a timeout)
/// is COORDINATOR_NOT_AVAILABLE, which it retries after finding its coordinator again.
fn heartbeat_code(code: ErrorCode, version: i16) -> i16 {
    use ErrorCode as E;
    let kept = matches!(
        code,
        E::None
            | E::UnknownMemberId
            | E::FencedMemberEpoch
            | E::CoordinatorLoadInProgress
            | E::CoordinatorNotAvailable
            | E::NotCoordinator
            | E::GroupAuthorizationFailed
            | E::InvalidRequest
            | E::GroupMaxSizeReached
            | E::UnreleasedInstanceId
            | E::UnsupportedAssignor
            | E::UnsupportedVersion
            | E::GroupIdNotFound
            | E::FencedInstanceId
            | E::InvalidRegularExpression
            | E::TopicAuthorizationFailed
            | E::PolicyViolation
    );
    kafka_code(if kept { code } else { E::CoordinatorNotAvailable }, ApiKey::ConsumerGroupHeartbeat, version)
}

/// A new member id for a v0 join (v1 clients make their own, KIP-1082): a random UUID.
fn new_member_id() -> String {
    let mut bytes = [0u8; 16];
    // Without a random source the id is still unique enough for one process's joins: the
    // clock's nanoseconds.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes = nanos.to_be_bytes();
    }
    Uuid::from_bytes(bytes).simple().to_string()
}

impl KafkaConn {
    pub(super) async fn consumer_group_heartbeat(
        self: &Arc<Self>,
        r: ConsumerGroupHeartbeatRequest,
        version: i16,
        client_id: String,
    ) -> KafkaAnswer {
        let mut member_id = r.member_id.to_string();
        if version == 0 && member_id.is_empty() && r.member_epoch == 0 {
            member_id = new_member_id();
        }
        let req = protocol::ConsumerHeartbeatRequest {
            group: r.group_id.to_string(),
            member_id: member_id.clone(),
            member_epoch: r.member_epoch,
            instance_id: r.instance_id.as_ref().map(|s| s.to_string()),
            rebalance_timeout_ms: r.rebalance_timeout_ms,
            topic_names: r.subscribed_topic_names.map(|names| names.iter().map(|n| n.to_string()).collect()),
            topic_regex: r.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
            server_assignor: r.server_assignor.as_ref().map(|s| s.to_string()),
            owned: r.topic_partitions.map(|tps| {
                tps.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id.as_u128(), *p))).collect()
            }),
            client_id,
            client_host: format!("/{}", self.peer.ip()),
        };
        let caller = self.caller();
        let resp = if !caller.may(Operation::Read, ResourceType::Group, &req.group) {
            protocol::ConsumerHeartbeatResponse::error(
                caller.refusal(ErrorCode::GroupAuthorizationFailed, Operation::Read, ResourceType::Group, &req.group),
                &member_id,
            )
        } else if let Some(topic) =
            req.topic_names.iter().flatten().find(|t| !caller.may_quietly(Operation::Describe, ResourceType::Topic, t))
        {
            // As Kafka: every subscribed topic needs DESCRIBE.
            protocol::ConsumerHeartbeatResponse::error(
                caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::Describe, ResourceType::Topic, topic),
                &member_id,
            )
        } else {
            match self.relay(Request::ConsumerHeartbeat(req)).await {
                Response::ConsumerHeartbeat(h) => h,
                other => protocol::ConsumerHeartbeatResponse::error(other.status().clone(), &member_id),
            }
        };
        let mut out = ConsumerGroupHeartbeatResponse::default()
            .with_error_code(heartbeat_code(resp.status.code, version))
            .with_member_id(Some(text(&resp.member_id)))
            .with_member_epoch(resp.member_epoch)
            .with_heartbeat_interval_ms(resp.heartbeat_interval_ms);
        if resp.status.is_ok() {
            if let Some(assigned) = resp.assignment {
                let mut topics: Vec<TopicPartitions> = Vec::new();
                for (id, p) in assigned {
                    match topics.last_mut() {
                        Some(t) if t.topic_id.as_u128() == id => t.partitions.push(p),
                        _ => topics.push(
                            TopicPartitions::default().with_topic_id(Uuid::from_u128(id)).with_partitions(vec![p]),
                        ),
                    }
                }
                out = out.with_assignment(Some(Assignment::default().with_topic_partitions(topics)));
            }
        } else {
            tracing::info!(group = %r.group_id.0, member_id = %resp.member_id, status = %resp.status, "Kafka ConsumerGroupHeartbeat refused");
            out = out.with_error_message(Some(text(&resp.status.message)));
        }
        KafkaAnswer::Reply(ResponseKind::ConsumerGroupHeartbeat(out))
    }

    pub(super) async fn consumer_group_describe(
        self: &Arc<Self>,
        r: ConsumerGroupDescribeRequest,
        version: i16,
    ) -> KafkaAnswer {
        let caller = self.caller();
        let names: Vec<String> = r.group_ids.iter().map(|g| g.to_string()).collect();
        let allowed: Vec<String> =
            names.iter().filter(|g| caller.may(Operation::Describe, ResourceType::Group, g)).cloned().collect();
        let described = if allowed.is_empty() {
            Ok(Vec::new())
        } else {
            match self.relay(Request::DescribeGroups(protocol::DescribeGroupsRequest { groups: allowed.clone() })).await
            {
                Response::DescribeGroups(d) if d.status.is_ok() => Ok(d.groups),
                other => Err(other.status().clone()),
            }
        };
        let code = |c: ErrorCode| kafka_code(c, ApiKey::ConsumerGroupDescribe, version);
        let failed = |name: &str, status: &Status| {
            describe::DescribedGroup::default()
                .with_group_id(GroupId(text(name)))
                .with_error_code(code(status.code))
                .with_error_message(Some(text(&status.message)))
                .with_group_state(StrBytes::from_static_str("Dead"))
        };
        let topics = |tps: &[protocol::TopicPartitions]| {
            describe::Assignment::default().with_topic_partitions(
                tps.iter()
                    .map(|t| {
                        describe::TopicPartitions::default()
                            .with_topic_id(Uuid::from_u128(t.topic_id))
                            .with_topic_name(TopicName(text(&t.topic)))
                            .with_partitions(t.partitions.clone())
                    })
                    .collect(),
            )
        };
        let groups = names
            .iter()
            .map(|name| {
                if !allowed.contains(name) {
                    let refusal = caller.refusal(
                        ErrorCode::GroupAuthorizationFailed,
                        Operation::Describe,
                        ResourceType::Group,
                        name,
                    );
                    return failed(name, &refusal);
                }
                let found = match &described {
                    Err(status) => return failed(name, status),
                    Ok(groups) => groups.iter().find(|g| g.group == *name),
                };
                let Some((g, c)) = found.and_then(|g| g.consumer.as_ref().map(|c| (g, c))) else {
                    let why = if found.is_some_and(|g| g.state != "Dead") {
                        format!(
                            "group '{name}' is a classic group, not a consumer group: describe it with DescribeGroups"
                        )
                    } else {
                        format!("group '{name}' does not exist")
                    };
                    return failed(name, &Status::new(ErrorCode::GroupIdNotFound, why));
                };
                let members = c
                    .members
                    .iter()
                    .map(|m| {
                        let out = describe::Member::default()
                            .with_member_id(text(&m.member_id))
                            .with_instance_id(m.instance_id.as_deref().map(text))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(text(&m.client_id))
                            .with_client_host(text(&m.client_host))
                            .with_subscribed_topic_names(m.topic_names.iter().map(|t| TopicName(text(t))).collect())
                            .with_subscribed_topic_regex(m.topic_regex.as_deref().map(text))
                            .with_assignment(topics(&m.assigned))
                            .with_target_assignment(topics(&m.target));
                        if version >= 1 {
                            out.with_member_type(1)
                        } else {
                            out
                        }
                    })
                    .collect();
                describe::DescribedGroup::default()
                    .with_group_id(GroupId(text(name)))
                    .with_group_state(text(&g.state))
                    .with_group_epoch(c.group_epoch)
                    .with_assignment_epoch(c.assignment_epoch)
                    .with_assignor_name(text(&c.assignor))
                    .with_members(members)
                    .with_authorized_operations(i32::MIN)
            })
            .collect();
        KafkaAnswer::Reply(ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(groups),
        ))
    }
}
