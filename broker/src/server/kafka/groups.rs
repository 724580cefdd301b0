//! Consumer groups over the Kafka wire (the classic protocol), relayed to the coordinator,
//! which holds every group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
//! OffsetFetch, ListGroups, DescribeGroups, and the transactional AddOffsetsToTxn and
//! TxnOffsetCommit (KIP-447: the generation fences a zombie worker's offsets).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use protocol::kafka::KafkaAnswer;
use protocol::{ErrorCode, GroupMember, PartitionOffset, Request, Response, Status, TxnOwner};

use super::authz::Caller;
use super::{kafka_code, KafkaConn};
use protocol::acl::{Operation, ResourceType};

/// The refusal of a group request whose caller may not `op` the group.
fn group_refusal(caller: &Caller, op: Operation, group: &str) -> Option<Status> {
    (!caller.may(op, ResourceType::Group, group))
        .then(|| caller.refusal(ErrorCode::GroupAuthorizationFailed, op, ResourceType::Group, group))
}

/// Longest a relayed JoinGroup or SyncGroup waits for its rebalance, in milliseconds: the
/// coordinator completes a rebalance within its `rebalance_timeout_max_ms` (300,000), and the
/// Kafka listener's connection deadline is raised to outlast this.
pub(crate) const GROUP_WAIT_MS_MAX: u64 = 330_000;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

/// The status of a relayed group call's answer.
fn status_of(resp: &Response) -> Status {
    resp.status().clone()
}

/// The refusal an answer of the wrong shape (another response, or items missing) stands for:
/// its status, or UNKNOWN_SERVER_ERROR if that says OK.
fn malformed(resp: &Response) -> Status {
    match resp.status() {
        s if s.is_ok() => Status::new(ErrorCode::UnknownServerError, "a malformed answer"),
        s => s.clone(),
    }
}

/// Offsets by topic, in first-seen order, as Kafka's answers group them.
fn by_topic<T>(items: Vec<(String, T)>) -> Vec<(String, Vec<T>)> {
    let mut out: Vec<(String, Vec<T>)> = Vec::new();
    for (topic, item) in items {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, v)) => v.push(item),
            None => out.push((topic, vec![item])),
        }
    }
    out
}

/// ListGroups' group type of a classic group (KIP-848).
const CLASSIC: &str = "classic";
/// ListGroups' group type of a KIP-848 consumer group.
const CONSUMER: &str = "consumer";

/// A group's type, as ListGroups names it.
fn group_type(g: &protocol::GroupState) -> &'static str {
    if g.consumer.is_some() {
        CONSUMER
    } else {
        CLASSIC
    }
}

impl KafkaConn {
    /// Relay a group request that may wait for a rebalance (JoinGroup, SyncGroup) up to its
    /// rebalance timeout.
    async fn relay_long(self: &Arc<Self>, req: Request, wait_ms: i32) -> Response {
        let wait = (wait_ms.max(0) as u64 + 5_000).min(GROUP_WAIT_MS_MAX);
        let timeout = Duration::from_millis(self.shared.config.request_timeout_ms.max(wait));
        self.relay_call(req, timeout).await
    }

    pub(super) async fn join_group(
        self: &Arc<Self>,
        r: JoinGroupRequest,
        version: i16,
        client_id: String,
    ) -> KafkaAnswer {
        let rebalance_timeout_ms = if version >= 1 { r.rebalance_timeout_ms } else { r.session_timeout_ms };
        let req = Request::JoinGroup(protocol::JoinGroupRequest {
            group: r.group_id.to_string(),
            member_id: r.member_id.to_string(),
            instance_id: if version >= 5 { opt(&r.group_instance_id) } else { None },
            session_timeout_ms: r.session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type: r.protocol_type.to_string(),
            protocols: r.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata)).collect(),
            require_known_member: version >= 4,
            client_id,
            // Kafka's form: a slash and the address (DescribeGroups shows it).
            client_host: format!("/{}", self.peer.ip()),
        });
        let refused = group_refusal(&self.caller(), Operation::Read, &r.group_id);
        let resp = match refused {
            Some(status) => protocol::JoinGroupResponse::error(status, &r.member_id.to_string()),
            None => match self.relay_long(req, rebalance_timeout_ms).await {
                Response::JoinGroup(j) => j,
                other => protocol::JoinGroupResponse::error(status_of(&other), &r.member_id.to_string()),
            },
        };
        if !resp.status.is_ok() && resp.status.code != ErrorCode::MemberIdRequired {
            tracing::info!(group = %r.group_id.0, status = %resp.status, "Kafka JoinGroup refused");
        }
        let members = resp
            .members
            .into_iter()
            .map(|(id, instance, metadata)| {
                let m = JoinGroupResponseMember::default().with_member_id(text(&id)).with_metadata(metadata);
                if version >= 5 {
                    m.with_group_instance_id(instance.map(|i| text(&i)))
                } else {
                    m
                }
            })
            .collect();
        let mut out = JoinGroupResponse::default()
            .with_error_code(kafka_code(resp.status.code, ApiKey::JoinGroup, version))
            .with_generation_id(resp.generation)
            .with_protocol_name(Some(text(&resp.protocol)))
            .with_leader(text(&resp.leader))
            .with_member_id(text(&resp.member_id))
            .with_members(members);
        if version >= 7 {
            out = out.with_protocol_type(Some(text(&resp.protocol_type)));
        }
        KafkaAnswer::Reply(ResponseKind::JoinGroup(out))
    }

    pub(super) async fn sync_group(self: &Arc<Self>, r: SyncGroupRequest, version: i16) -> KafkaAnswer {
        let member = GroupMember {
            group: r.group_id.to_string(),
            generation: r.generation_id,
            member_id: r.member_id.to_string(),
            instance_id: if version >= 3 { opt(&r.group_instance_id) } else { None },
        };
        let req = Request::SyncGroup(protocol::SyncGroupRequest {
            member,
            assignments: r.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect(),
        });
        // A follower waits for the leader, which has its rebalance timeout to send the assignment.
        let resp = match group_refusal(&self.caller(), Operation::Read, &r.group_id) {
            Some(status) => protocol::SyncGroupResponse::error(status),
            None => match self.relay_long(req, GROUP_WAIT_MS_MAX as i32).await {
                Response::SyncGroup(s) => s,
                other => protocol::SyncGroupResponse::error(status_of(&other)),
            },
        };
        if !resp.status.is_ok() {
            tracing::info!(group = %r.group_id.0, status = %resp.status, "Kafka SyncGroup refused");
        }
        let mut out = SyncGroupResponse::default()
            .with_error_code(kafka_code(resp.status.code, ApiKey::SyncGroup, version))
            .with_assignment(resp.assignment);
        if version >= 5 {
            out =
                out.with_protocol_type(Some(text(&resp.protocol_type))).with_protocol_name(Some(text(&resp.protocol)));
        }
        KafkaAnswer::Reply(ResponseKind::SyncGroup(out))
    }

    pub(super) async fn heartbeat(self: &Arc<Self>, r: HeartbeatRequest, version: i16) -> KafkaAnswer {
        let member = GroupMember {
            group: r.group_id.to_string(),
            generation: r.generation_id,
            member_id: r.member_id.to_string(),
            instance_id: if version >= 3 { opt(&r.group_instance_id) } else { None },
        };
        let status = match group_refusal(&self.caller(), Operation::Read, &r.group_id) {
            Some(status) => status,
            None => status_of(&self.relay(Request::GroupHeartbeat(protocol::GroupHeartbeatRequest { member })).await),
        };
        KafkaAnswer::Reply(ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(kafka_code(
            status.code,
            ApiKey::Heartbeat,
            version,
        ))))
    }

    pub(super) async fn leave_group(self: &Arc<Self>, r: LeaveGroupRequest, version: i16) -> KafkaAnswer {
        let members: Vec<(String, Option<String>)> = if version >= 3 {
            r.members.iter().map(|m| (m.member_id.to_string(), opt(&m.group_instance_id))).collect()
        } else {
            vec![(r.member_id.to_string(), None)]
        };
        let req = Request::LeaveGroup(protocol::LeaveGroupRequest {
            group: r.group_id.to_string(),
            members: members.clone(),
        });
        let (status, each) = match group_refusal(&self.caller(), Operation::Read, &r.group_id) {
            Some(status) => (status, Vec::new()),
            None => match self.relay(req).await {
                Response::LeaveGroup(l) => (l.status, l.members),
                other => (status_of(&other), Vec::new()),
            },
        };
        let code = |s: &Status| kafka_code(s.code, ApiKey::LeaveGroup, version);
        let mut out = LeaveGroupResponse::default();
        if version >= 3 {
            let results = members
                .iter()
                .enumerate()
                .map(|(i, (id, instance))| {
                    let c = each.get(i).map_or(code(&status), code);
                    MemberResponse::default()
                        .with_member_id(text(id))
                        .with_group_instance_id(instance.as_deref().map(text))
                        .with_error_code(c)
                })
                .collect();
            out = out.with_error_code(code(&status)).with_members(results);
        } else {
            let first = each.first().map_or(code(&status), code);
            out = out.with_error_code(if status.is_ok() { first } else { code(&status) });
        }
        KafkaAnswer::Reply(ResponseKind::LeaveGroup(out))
    }

    pub(super) async fn offset_commit(self: &Arc<Self>, r: OffsetCommitRequest, version: i16) -> KafkaAnswer {
        let member = GroupMember {
            group: r.group_id.to_string(),
            generation: r.generation_id_or_member_epoch,
            member_id: r.member_id.to_string(),
            instance_id: if version >= 7 { opt(&r.group_instance_id) } else { None },
        };
        let offsets: Vec<PartitionOffset> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| PartitionOffset {
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if version >= 6 { p.committed_leader_epoch } else { -1 },
                    metadata: opt(&p.committed_metadata),
                })
            })
            .collect();
        let caller = self.caller();
        let (_, codes) = match group_refusal(&caller, Operation::Read, &r.group_id) {
            Some(status) => (None, refused_codes(&offsets, &status, ApiKey::OffsetCommit, version)),
            None => {
                let make =
                    |offsets| Request::OffsetCommit(protocol::OffsetCommitRequest { member, txn: None, offsets });
                self.commit_authorized(&caller, offsets, make, ApiKey::OffsetCommit, version).await
            }
        };
        let topics = codes
            .into_iter()
            .map(|(topic, ps)| {
                let ps = ps
                    .into_iter()
                    .map(|(p, c)| OffsetCommitResponsePartition::default().with_partition_index(p).with_error_code(c));
                OffsetCommitResponseTopic::default().with_name(TopicName(text(&topic))).with_partitions(ps.collect())
            })
            .collect();
        KafkaAnswer::Reply(ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)))
    }

    /// Relay an offset commit of the offsets whose topic the caller may READ (the others are
    /// answered TOPIC_AUTHORIZATION_FAILED): as [`KafkaConn::offsets_answer`].
    async fn commit_authorized(
        self: &Arc<Self>,
        caller: &Caller,
        offsets: Vec<PartitionOffset>,
        make: impl FnOnce(Vec<PartitionOffset>) -> Request,
        key: ApiKey,
        version: i16,
    ) -> (Option<Status>, Vec<(String, Vec<(i32, i16)>)>) {
        let (allowed, denied): (Vec<PartitionOffset>, Vec<PartitionOffset>) =
            offsets.into_iter().partition(|o| caller.may(Operation::Read, ResourceType::Topic, &o.topic));
        let (mut refused, mut codes) = (None, Vec::new());
        if !allowed.is_empty() {
            (refused, codes) = self.offsets_answer(make(allowed.clone()), &allowed, key, version).await;
        }
        if let Some(first) = denied.first() {
            let status =
                caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::Read, ResourceType::Topic, &first.topic);
            codes.extend(refused_codes(&denied, &status, key, version));
            refused.get_or_insert(status);
        }
        (refused, codes)
    }

    /// Relay an offset commit: the first refusal, if any, and the Kafka code of each offset
    /// (for `key` at `version`), by topic in first-seen order.
    async fn offsets_answer(
        self: &Arc<Self>,
        req: Request,
        offsets: &[PartitionOffset],
        key: ApiKey,
        version: i16,
    ) -> (Option<Status>, Vec<(String, Vec<(i32, i16)>)>) {
        let statuses = match self.relay(req).await {
            Response::OffsetCommit(o) if o.partitions.len() == offsets.len() => {
                o.partitions.into_iter().map(|(_, s)| s).collect()
            }
            other => vec![malformed(&other); offsets.len()],
        };
        let refused = statuses.iter().find(|s| !s.is_ok()).cloned();
        let codes = offsets
            .iter()
            .zip(statuses)
            .map(|(o, s)| (o.topic.clone(), (o.partition, kafka_code(s.code, key, version))))
            .collect();
        (refused, by_topic(codes))
    }

    pub(super) async fn txn_offset_commit(self: &Arc<Self>, r: TxnOffsetCommitRequest, version: i16) -> KafkaAnswer {
        let member = if version >= 3 {
            GroupMember {
                group: r.group_id.to_string(),
                generation: r.generation_id,
                member_id: r.member_id.to_string(),
                instance_id: opt(&r.group_instance_id),
            }
        } else {
            GroupMember { group: r.group_id.to_string(), generation: -1, member_id: String::new(), instance_id: None }
        };
        let txn = TxnOwner {
            transactional_id: r.transactional_id.to_string(),
            producer_id: r.producer_id.0,
            producer_epoch: r.producer_epoch,
        };
        let offsets: Vec<PartitionOffset> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| PartitionOffset {
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if version >= 2 { p.committed_leader_epoch } else { -1 },
                    metadata: opt(&p.committed_metadata),
                })
            })
            .collect();
        let answer = |codes: Vec<(String, Vec<(i32, i16)>)>| {
            let topics = codes
                .into_iter()
                .map(|(topic, ps)| {
                    let ps = ps.into_iter().map(|(p, c)| {
                        TxnOffsetCommitResponsePartition::default().with_partition_index(p).with_error_code(c)
                    });
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(TopicName(text(&topic)))
                        .with_partitions(ps.collect())
                })
                .collect();
            KafkaAnswer::Reply(ResponseKind::TxnOffsetCommit(TxnOffsetCommitResponse::default().with_topics(topics)))
        };
        // WRITE on the transactional id, READ on the group (each the whole request's answer),
        // READ on each topic.
        let caller = self.caller();
        let whole = caller
            .transactional_refusal(self.shared.pid_binder.as_ref(), &r.transactional_id, r.producer_id.0)
            .or_else(|| group_refusal(&caller, Operation::Read, &r.group_id));
        if let Some(status) = whole {
            return answer(refused_codes(&offsets, &status, ApiKey::TxnOffsetCommit, version));
        }
        if version >= 5 {
            // Transaction version 2 (KIP-890): the commit adds the group's offsets to the
            // transaction itself, as AddOffsetsToTxn did (the client sends none), through the
            // same registration.
            let add = Request::AddOffsets(protocol::AddOffsetsRequest {
                txn: TxnOwner {
                    transactional_id: txn.transactional_id.clone(),
                    producer_id: txn.producer_id,
                    producer_epoch: txn.producer_epoch,
                },
                group: r.group_id.to_string(),
            });
            let status = status_of(&self.relay(add).await);
            if !status.is_ok() {
                tracing::info!(transactional_id = %r.transactional_id.0, group = %r.group_id.0, %status, "Kafka TxnOffsetCommit v5: adding the offsets to the transaction refused");
                let code = kafka_code(status.code, ApiKey::TxnOffsetCommit, version);
                return answer(by_topic(offsets.iter().map(|o| (o.topic.clone(), (o.partition, code))).collect()));
            }
        }
        let make = |offsets| Request::OffsetCommit(protocol::OffsetCommitRequest { member, txn: Some(txn), offsets });
        let (refused, codes) = self.commit_authorized(&caller, offsets, make, ApiKey::TxnOffsetCommit, version).await;
        if let Some(s) = refused {
            tracing::info!(transactional_id = %r.transactional_id.0, group = %r.group_id.0, status = %s, "Kafka TxnOffsetCommit refused");
        }
        answer(codes)
    }

    pub(super) async fn offset_fetch(self: &Arc<Self>, r: OffsetFetchRequest, version: i16) -> KafkaAnswer {
        // DESCRIBE on the group (the whole answer); a named topic the caller may not describe
        // is answered TOPIC_AUTHORIZATION_FAILED, and an all-topics answer leaves it out.
        let caller = self.caller();
        let topic_ok = |t: &str| caller.may(Operation::Describe, ResourceType::Topic, t);
        let asked = r.topics.as_ref().map(|ts| {
            ts.iter().flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.to_string(), *p))).collect::<Vec<_>>()
        });
        type Asked = Vec<(String, i32)>;
        let (partitions, denied): (Option<Asked>, Asked) = match asked {
            Some(all) if caller.enabled() => {
                let (ok, denied) = all.into_iter().partition(|(t, _)| topic_ok(t));
                (Some(ok), denied)
            }
            other => (other, Vec::new()),
        };
        let req = Request::OffsetFetch(protocol::OffsetFetchRequest {
            group: r.group_id.to_string(),
            partitions: partitions.clone(),
            require_stable: version >= 7 && r.require_stable,
        });
        let (status, mut answered) = match group_refusal(&caller, Operation::Describe, &r.group_id) {
            Some(status) => (status, Vec::new()),
            None if partitions.as_ref().is_some_and(|p| p.is_empty()) && !denied.is_empty() => {
                (Status::ok(), Vec::new())
            }
            None => match self.relay(req).await {
                Response::OffsetFetch(o) => (o.status, o.partitions),
                other => (status_of(&other), Vec::new()),
            },
        };
        if status.is_ok() {
            // An all-topics answer is filtered silently, as Kafka filters it.
            answered.retain(|(o, _)| {
                partitions.is_some()
                    || !caller.enabled()
                    || caller.may_quietly(Operation::Describe, ResourceType::Topic, &o.topic)
            });
            answered.extend(denied.into_iter().map(|(topic, partition)| {
                let o = PartitionOffset { topic, partition, offset: -1, leader_epoch: -1, metadata: None };
                let s = Status::new(ErrorCode::TopicAuthorizationFailed, "topic not authorized");
                (o, s)
            }));
        }
        if version < 2 && !status.is_ok() {
            // Version 1 has no top-level error code: each partition asked carries it, as Kafka
            // answers (an empty answer would read as "nothing committed").
            let asked =
                r.topics.iter().flatten().flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.to_string(), *p)));
            answered = asked
                .map(|(topic, partition)| {
                    let o = PartitionOffset { topic, partition, offset: -1, leader_epoch: -1, metadata: None };
                    (o, status.clone())
                })
                .collect();
        }
        let topics = by_topic(answered.into_iter().map(|(o, s)| (o.topic.clone(), (o, s))).collect())
            .into_iter()
            .map(|(topic, ps)| {
                OffsetFetchResponseTopic::default().with_name(TopicName(text(&topic))).with_partitions(
                    ps.into_iter()
                        .map(|(o, s)| {
                            let p = OffsetFetchResponsePartition::default()
                                .with_partition_index(o.partition)
                                .with_committed_offset(o.offset)
                                .with_metadata(Some(text(o.metadata.as_deref().unwrap_or(""))))
                                .with_error_code(kafka_code(s.code, ApiKey::OffsetFetch, version));
                            if version >= 5 {
                                p.with_committed_leader_epoch(o.leader_epoch)
                            } else {
                                p
                            }
                        })
                        .collect(),
                )
            })
            .collect();
        let mut out = OffsetFetchResponse::default().with_topics(topics);
        if version >= 2 {
            out = out.with_error_code(kafka_code(status.code, ApiKey::OffsetFetch, version));
        }
        KafkaAnswer::Reply(ResponseKind::OffsetFetch(out))
    }

    async fn groups(self: &Arc<Self>, names: Vec<String>) -> Result<Vec<protocol::GroupState>, Status> {
        match self.relay(Request::DescribeGroups(protocol::DescribeGroupsRequest { groups: names })).await {
            Response::DescribeGroups(d) if d.status.is_ok() => Ok(d.groups),
            other => Err(status_of(&other)),
        }
    }

    pub(super) async fn list_groups(self: &Arc<Self>, r: ListGroupsRequest, version: i16) -> KafkaAnswer {
        let mut out = ListGroupsResponse::default();
        match self.groups(Vec::new()).await {
            Ok(groups) => {
                let wanted = |state: &str| {
                    version < 4
                        || r.states_filter.is_empty()
                        || r.states_filter.iter().any(|f| f.eq_ignore_ascii_case(state))
                };
                let typed = |g: &protocol::GroupState| {
                    version < 5
                        || r.types_filter.is_empty()
                        || r.types_filter.iter().any(|t| t.eq_ignore_ascii_case(group_type(g)))
                };
                // DESCRIBE on the cluster lists every group; else those the caller may describe.
                let caller = self.caller();
                let all = caller.may_quietly(Operation::Describe, ResourceType::Cluster, protocol::acl::CLUSTER_NAME);
                let listed = groups
                    .into_iter()
                    .filter(|g| typed(g) && wanted(&g.state))
                    .filter(|g| all || caller.may_quietly(Operation::Describe, ResourceType::Group, &g.group))
                    .map(|g| {
                        let l = ListedGroup::default()
                            .with_group_id(GroupId(text(&g.group)))
                            .with_protocol_type(text(&g.protocol_type));
                        let l = if version >= 4 { l.with_group_state(text(&g.state)) } else { l };
                        if version >= 5 {
                            l.with_group_type(StrBytes::from_static_str(group_type(&g)))
                        } else {
                            l
                        }
                    })
                    .collect();
                out = out.with_groups(listed);
            }
            Err(s) => out = out.with_error_code(kafka_code(s.code, ApiKey::ListGroups, version)),
        }
        KafkaAnswer::Reply(ResponseKind::ListGroups(out))
    }

    pub(super) async fn describe_groups(self: &Arc<Self>, r: DescribeGroupsRequest, version: i16) -> KafkaAnswer {
        let caller = self.caller();
        let (names, denied): (Vec<String>, Vec<String>) = r
            .groups
            .iter()
            .map(|g| g.to_string())
            .partition(|g| caller.may(Operation::Describe, ResourceType::Group, g));
        let denied = denied.into_iter().map(|n| {
            DescribedGroup::default().with_group_id(GroupId(text(&n))).with_error_code(kafka_code(
                ErrorCode::GroupAuthorizationFailed,
                ApiKey::DescribeGroups,
                version,
            ))
        });
        let described: Vec<DescribedGroup> = match self.groups(names.clone()).await {
            Ok(groups) if !names.is_empty() => groups
                .into_iter()
                .map(|g| {
                    if g.consumer.is_some() {
                        // A KIP-848 group is described by ConsumerGroupDescribe. Kafka 4 answers it
                        // GROUP_ID_NOT_FOUND from DescribeGroups v6 (which carries the message);
                        // before, as the versions served here, `Dead` with no error.
                        return DescribedGroup::default()
                            .with_group_id(GroupId(text(&g.group)))
                            .with_group_state(StrBytes::from_static_str("Dead"));
                    }
                    let members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            let d = DescribedGroupMember::default()
                                .with_member_id(text(&m.member_id))
                                .with_client_id(text(&m.client_id))
                                .with_client_host(text(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment);
                            if version >= 4 {
                                d.with_group_instance_id(m.instance_id.as_deref().map(text))
                            } else {
                                d
                            }
                        })
                        .collect();
                    DescribedGroup::default()
                        .with_group_id(GroupId(text(&g.group)))
                        .with_group_state(text(&g.state))
                        .with_protocol_type(text(&g.protocol_type))
                        .with_protocol_data(text(&g.protocol))
                        .with_members(members)
                })
                .collect(),
            Ok(_) => Vec::new(),
            Err(s) => names
                .iter()
                .map(|n| {
                    DescribedGroup::default().with_group_id(GroupId(text(n))).with_error_code(kafka_code(
                        s.code,
                        ApiKey::DescribeGroups,
                        version,
                    ))
                })
                .collect(),
        };
        let described = described.into_iter().chain(denied).collect();
        KafkaAnswer::Reply(ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(described)))
    }

    pub(super) async fn add_offsets_to_txn(self: &Arc<Self>, r: AddOffsetsToTxnRequest, version: i16) -> KafkaAnswer {
        let req = Request::AddOffsets(protocol::AddOffsetsRequest {
            txn: TxnOwner {
                transactional_id: r.transactional_id.to_string(),
                producer_id: r.producer_id.0,
                producer_epoch: r.producer_epoch,
            },
            group: r.group_id.to_string(),
        });
        // WRITE on the transactional id, then READ on the group.
        let caller = self.caller();
        let refused = caller
            .transactional_refusal(self.shared.pid_binder.as_ref(), &r.transactional_id, r.producer_id.0)
            .or_else(|| group_refusal(&caller, Operation::Read, &r.group_id));
        let status = match refused {
            Some(status) => status,
            None => status_of(&self.relay(req).await),
        };
        if !status.is_ok() {
            tracing::info!(transactional_id = %r.transactional_id.0, group = %r.group_id.0, %status, "Kafka AddOffsetsToTxn refused");
        }
        KafkaAnswer::Reply(ResponseKind::AddOffsetsToTxn(
            AddOffsetsToTxnResponse::default().with_error_code(kafka_code(
                status.code,
                ApiKey::AddOffsetsToTxn,
                version,
            )),
        ))
    }
}

impl KafkaConn {
    /// DeleteGroups: each group the caller may DELETE is relayed (GROUP_AUTHORIZATION_FAILED
    /// for the others); the coordinator deletes those without members.
    pub(super) async fn delete_groups(self: &Arc<Self>, r: DeleteGroupsRequest, version: i16) -> KafkaAnswer {
        let caller = self.caller();
        let names: Vec<String> = r.groups_names.iter().map(|g| g.to_string()).collect();
        let allowed: Vec<bool> = names.iter().map(|g| caller.may(Operation::Delete, ResourceType::Group, g)).collect();
        let asked: Vec<String> = names.iter().zip(&allowed).filter(|(_, a)| **a).map(|(g, _)| g.clone()).collect();
        let mut relayed = Vec::new();
        if !asked.is_empty() {
            let n = asked.len();
            relayed = match self.relay(Request::DeleteGroups(protocol::DeleteGroupsRequest { groups: asked })).await {
                Response::DeleteGroups(d) if d.status.is_ok() && d.groups.len() == n => d.groups,
                other => vec![self.admin_refusal(malformed(&other), "deleting a group"); n],
            };
        }
        let mut relayed = relayed.into_iter();
        let results = names
            .iter()
            .zip(allowed)
            .map(|(name, allowed)| {
                let status = match allowed {
                    true => relayed.next().unwrap_or_else(Status::ok),
                    false => caller.refusal(
                        ErrorCode::GroupAuthorizationFailed,
                        Operation::Delete,
                        ResourceType::Group,
                        name,
                    ),
                };
                if !status.is_ok() {
                    tracing::info!(group = %name, %status, "Kafka DeleteGroups refused");
                }
                DeletableGroupResult::default().with_group_id(GroupId(text(name))).with_error_code(kafka_code(
                    status.code,
                    ApiKey::DeleteGroups,
                    version,
                ))
            })
            .collect();
        KafkaAnswer::Reply(ResponseKind::DeleteGroups(DeleteGroupsResponse::default().with_results(results)))
    }

    /// OffsetDelete (KIP-496): DELETE on the group, then READ on each topic
    /// (TOPIC_AUTHORIZATION_FAILED for a partition of a topic the caller may not read); the
    /// coordinator deletes the offsets of topics no member subscribes to.
    pub(super) async fn offset_delete(self: &Arc<Self>, r: OffsetDeleteRequest, version: i16) -> KafkaAnswer {
        let caller = self.caller();
        let asked: Vec<(String, i32)> = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), p.partition_index)))
            .collect();
        let code = |s: &Status| kafka_code(s.code, ApiKey::OffsetDelete, version);
        let mut out = OffsetDeleteResponse::default();
        let statuses: Vec<Status> = match group_refusal(&caller, Operation::Delete, &r.group_id) {
            Some(refused) => {
                out = out.with_error_code(code(&refused));
                Vec::new()
            }
            None => {
                let readable: Vec<bool> =
                    asked.iter().map(|(t, _)| caller.may(Operation::Read, ResourceType::Topic, t)).collect();
                let partitions: Vec<(String, i32)> =
                    asked.iter().zip(&readable).filter(|(_, r)| **r).map(|(p, _)| p.clone()).collect();
                // Relayed even with no partition left: the group's own refusal (it does not
                // exist, say) is still the answer, as Kafka's.
                let n = partitions.len();
                let req =
                    Request::OffsetDelete(protocol::OffsetDeleteRequest { group: r.group_id.to_string(), partitions });
                let relayed = match self.relay(req).await {
                    Response::OffsetDelete(d) if d.status.is_ok() && d.partitions.len() == n => d.partitions,
                    other => {
                        out = out.with_error_code(code(
                            &self.admin_refusal(malformed(&other), "deleting a group's offsets"),
                        ));
                        Vec::new()
                    }
                };
                let mut relayed = relayed.into_iter();
                asked
                    .iter()
                    .zip(readable)
                    .map(|((topic, _), readable)| match readable {
                        true => relayed.next().unwrap_or_else(Status::ok),
                        false => caller.refusal(
                            ErrorCode::TopicAuthorizationFailed,
                            Operation::Read,
                            ResourceType::Topic,
                            topic,
                        ),
                    })
                    .collect()
            }
        };
        if out.error_code == 0 {
            let codes = asked.iter().zip(&statuses).map(|((t, p), s)| (t.clone(), (*p, code(s)))).collect();
            let topics = by_topic(codes)
                .into_iter()
                .map(|(topic, ps)| {
                    let ps = ps.into_iter().map(|(p, c)| {
                        OffsetDeleteResponsePartition::default().with_partition_index(p).with_error_code(c)
                    });
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(text(&topic)))
                        .with_partitions(ps.collect())
                })
                .collect();
            out = out.with_topics(topics);
        }
        if out.error_code != 0 || statuses.iter().any(|s| !s.is_ok()) {
            tracing::info!(group = %r.group_id.0, error_code = out.error_code, "Kafka OffsetDelete refused in part or whole");
        }
        KafkaAnswer::Reply(ResponseKind::OffsetDelete(out))
    }
}

/// Every offset of `offsets` answered with `status`'s code, by topic.
fn refused_codes(
    offsets: &[PartitionOffset],
    status: &Status,
    key: ApiKey,
    version: i16,
) -> Vec<(String, Vec<(i32, i16)>)> {
    let code = kafka_code(status.code, key, version);
    by_topic(offsets.iter().map(|o| (o.topic.clone(), (o.partition, code))).collect())
}
