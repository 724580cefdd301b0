//! Admin calls to the coordinator.

use protocol::{CreateTopicRequest, DescribeResponse, ElectLeaderRequest, Request, Response};

use crate::client::{Client, ClientConfig};
use crate::error::ClientError;

/// Creates topics and describes the cluster.
pub struct Admin {
    client: Client,
}

impl Admin {
    /// An admin client for the coordinator at `bootstrap`.
    pub fn new(bootstrap: &str, config: ClientConfig) -> Admin {
        Admin { client: Client::new(bootstrap, config) }
    }

    async fn call(&mut self, what: &str, req: Request) -> Result<Response, ClientError> {
        let resp = self.client.ask_coordinator(what, req).await?;
        if !resp.status().is_ok() {
            return Err(ClientError::Refused { what: what.to_string(), status: resp.status().clone() });
        }
        Ok(resp)
    }

    /// Create a topic with `partitions` partitions and the coordinator's default replication
    /// factor (min(3, live brokers)).
    pub async fn create_topic(&mut self, name: &str, partitions: i32) -> Result<(), ClientError> {
        self.create_topic_replicated(name, partitions, -1).await
    }

    /// Create a topic with `partitions` partitions of `replicas` replicas each (-1: default).
    pub async fn create_topic_replicated(
        &mut self,
        name: &str,
        partitions: i32,
        replicas: i32,
    ) -> Result<(), ClientError> {
        self.create_topic_with(name, partitions, replicas, -1).await
    }

    /// Create a topic with `partitions` partitions of `replicas` replicas each and
    /// `min.insync.replicas` `min_insync_replicas` (-1 for the coordinator's defaults).
    pub async fn create_topic_with(
        &mut self,
        name: &str,
        partitions: i32,
        replicas: i32,
        min_insync_replicas: i32,
    ) -> Result<(), ClientError> {
        self.create_topic_configured(name, partitions, replicas, min_insync_replicas, &[]).await
    }

    /// [`Admin::create_topic_with`] and the topic's configs (`protocol::topic_config`: each
    /// overrides the brokers' setting for this topic).
    pub async fn create_topic_configured(
        &mut self,
        name: &str,
        partitions: i32,
        replicas: i32,
        min_insync_replicas: i32,
        configs: &[(String, String)],
    ) -> Result<(), ClientError> {
        let req = Request::CreateTopic(CreateTopicRequest {
            name: name.to_string(),
            partitions,
            replication_factor: replicas,
            min_insync_replicas,
            validate_only: false,
            configs: configs.to_vec(),
        });
        self.call(&format!("create topic '{name}'"), req).await.map(|_| ())
    }

    /// Change `topic`'s configs: only those `changes` names (Kafka's IncrementalAlterConfigs).
    pub async fn alter_configs(
        &mut self,
        topic: &str,
        changes: Vec<protocol::ConfigChange>,
    ) -> Result<(), ClientError> {
        let req = Request::AlterConfigs(protocol::AlterConfigsRequest {
            topic: topic.to_string(),
            changes,
            replace: false,
            validate_only: false,
        });
        self.call(&format!("alter the configs of topic '{topic}'"), req).await.map(|_| ())
    }

    /// Move `topic`-`partition`'s replicas to `replicas` (the first preferred as leader), or
    /// cancel the move under way (`None`). Answered once the move has begun (or completed: a
    /// target already in sync completes at once); [`Admin::reassignments`] lists the moves
    /// under way. The replica count may change.
    pub async fn reassign(
        &mut self,
        topic: &str,
        partition: i32,
        replicas: Option<Vec<i32>>,
    ) -> Result<(), ClientError> {
        let what = match &replicas {
            Some(r) => format!("move {topic}-{partition} to replicas {r:?}"),
            None => format!("cancel the move of {topic}-{partition}"),
        };
        let req = Request::Reassign(protocol::ReassignRequest {
            topic: topic.to_string(),
            partition,
            replicas,
            allow_replication_factor_change: true,
        });
        self.call(&what, req).await.map(|_| ())
    }

    /// The partitions being moved (of `topics`: (topic, partitions); all when `None`).
    pub async fn reassignments(
        &mut self,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<protocol::Reassignment>, ClientError> {
        let req = Request::ListReassignments(protocol::ListReassignmentsRequest { topics });
        match self.call("list the partitions being moved", req).await? {
            Response::ListReassignments(l) => Ok(l.reassignments),
            other => Err(ClientError::Protocol(format!("listing moves answered with {}", other.status()))),
        }
    }

    /// Delete a topic: every broker drops its partitions, and a topic created later under the
    /// same name is another one.
    pub async fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        let req = Request::DeleteTopic(protocol::DeleteTopicRequest { name: name.to_string(), topic_id: 0 });
        self.call(&format!("delete topic '{name}'"), req).await.map(|_| ())
    }

    /// Give a topic `count` partitions in all.
    pub async fn create_partitions(&mut self, name: &str, count: i32) -> Result<(), ClientError> {
        let req = Request::CreatePartitions(protocol::CreatePartitionsRequest {
            name: name.to_string(),
            count,
            validate_only: false,
            assignments: Vec::new(),
        });
        self.call(&format!("add partitions to '{name}'"), req).await.map(|_| ())
    }

    /// Brokers, partitions and transactional ids.
    pub async fn describe(&mut self) -> Result<DescribeResponse, ClientError> {
        match self.call("describe", Request::Describe).await? {
            Response::Describe(d) => Ok(d),
            other => Err(ClientError::Protocol(format!("describe answered with {}", other.status()))),
        }
    }

    /// Every consumer group: state, generation, members with their assignments, committed
    /// offsets.
    pub async fn describe_groups(&mut self) -> Result<Vec<protocol::GroupState>, ClientError> {
        let req = Request::DescribeGroups(protocol::DescribeGroupsRequest { groups: Vec::new() });
        match self.call("describe groups", req).await? {
            Response::DescribeGroups(d) => Ok(d.groups),
            other => Err(ClientError::Protocol(format!("describe groups answered with {}", other.status()))),
        }
    }

    /// Delete groups without members, with their committed offsets (and those open
    /// transactions staged for them): a status per group, in order (NON_EMPTY_GROUP,
    /// GROUP_ID_NOT_FOUND: not deleted).
    pub async fn delete_groups(&mut self, groups: &[String]) -> Result<Vec<protocol::Status>, ClientError> {
        let req = Request::DeleteGroups(protocol::DeleteGroupsRequest { groups: groups.to_vec() });
        match self.call("delete groups", req).await? {
            Response::DeleteGroups(d) if d.groups.len() == groups.len() => Ok(d.groups),
            other => Err(ClientError::Protocol(format!("delete groups answered with {}", other.status()))),
        }
    }

    /// Delete a group's committed offsets of `partitions` (KIP-496): a status per partition,
    /// in order (GROUP_SUBSCRIBED_TO_TOPIC for a topic its members subscribe to).
    pub async fn delete_offsets(
        &mut self,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<protocol::Status>, ClientError> {
        let req = Request::OffsetDelete(protocol::OffsetDeleteRequest {
            group: group.to_string(),
            partitions: partitions.to_vec(),
        });
        match self.call(&format!("delete offsets of group '{group}'"), req).await? {
            Response::OffsetDelete(d) if d.partitions.len() == partitions.len() => Ok(d.partitions),
            other => Err(ClientError::Protocol(format!("delete offsets answered with {}", other.status()))),
        }
    }

    /// Elect a partition's leader again under a new leader epoch; returns (leader, epoch).
    pub async fn elect_leader(&mut self, topic: &str, partition: i32) -> Result<(i32, i32), ClientError> {
        self.elect_leader_with(topic, partition, false).await
    }

    /// [`Admin::elect_leader`]; with `unclean`, when no in-sync or eligible replica is live,
    /// the live replica with the longest log leads anyway, losing what only the others hold.
    pub async fn elect_leader_with(
        &mut self,
        topic: &str,
        partition: i32,
        unclean: bool,
    ) -> Result<(i32, i32), ClientError> {
        let election = if unclean { protocol::Election::AgainUnclean } else { protocol::Election::Again };
        self.elect(topic, partition, election).await
    }

    /// Elect `topic`-`partition`'s leader as `election` says; returns (leader, epoch).
    pub async fn elect(
        &mut self,
        topic: &str,
        partition: i32,
        election: protocol::Election,
    ) -> Result<(i32, i32), ClientError> {
        let req = Request::ElectLeader(ElectLeaderRequest { topic: topic.to_string(), partition, election });
        match self.call(&format!("elect leader of {topic}-{partition}"), req).await? {
            Response::ElectLeader(e) => Ok((e.leader_id, e.leader_epoch)),
            other => Err(ClientError::Protocol(format!("election answered with {}", other.status()))),
        }
    }

    /// Create and delete ACLs (`--authorizer`): the answer carries each creation's status, the
    /// bindings each filter deleted, and every binding afterwards (an empty request reads them).
    /// A creation refused alone (an invalid binding) is reported in `created`, not as an error.
    pub async fn acls(&mut self, req: protocol::AclsRequest) -> Result<protocol::AclsResponse, ClientError> {
        match self.call("change ACLs", Request::Acls(req)).await? {
            Response::Acls(a) => Ok(a),
            other => Err(ClientError::Protocol(format!("ACLs answered with {}", other.status()))),
        }
    }

    /// Create, replace and delete SCRAM credentials (KIP-554): each user's result and every
    /// credential afterwards (an empty request reads them). A user refused alone (too few
    /// iterations, a deletion of nothing) is reported in `results`, not as an error.
    pub async fn scram_credentials(
        &mut self,
        req: protocol::ScramCredentialsRequest,
    ) -> Result<protocol::ScramCredentialsResponse, ClientError> {
        match self.call("change SCRAM credentials", Request::ScramCredentials(req)).await? {
            Response::ScramCredentials(c) => Ok(c),
            other => Err(ClientError::Protocol(format!("SCRAM credentials answered with {}", other.status()))),
        }
    }

    /// DeleteRecords (KIP-107): the records of `topic`-`partition` below `before` (-1: the high
    /// watermark) are deleted, on its leader and every in-sync replica, durably; returns the
    /// partition's low watermark (its log start) afterwards. Sent to the leader, found by
    /// metadata (the topic is not created) and followed through leadership changes within the
    /// request timeout.
    pub async fn delete_records(&mut self, topic: &str, partition: i32, before: i64) -> Result<i64, ClientError> {
        let what = format!("delete the records of {topic}-{partition} below offset {before}");
        let timeout_ms = self.client.config().request_timeout_ms;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
        let mut attempt = 0;
        loop {
            self.client.refresh_metadata(topic, false).await?;
            let count = self.client.partition_count(topic).await?;
            if !(0..count as i64).contains(&i64::from(partition)) {
                return Err(ClientError::Refused {
                    what,
                    status: protocol::Status::new(
                        protocol::ErrorCode::UnknownTopicOrPartition,
                        format!("topic '{topic}' has {count} partitions, numbered from 0"),
                    ),
                });
            }
            let last = match self.client.leader(topic, partition) {
                None => format!("{topic}-{partition} has no leader now (or no such partition)"),
                Some(leader) => {
                    let req = Request::DeleteRecords(protocol::DeleteRecordsRequest {
                        topic: topic.to_string(),
                        partition,
                        offset: before,
                        timeout_ms: i32::try_from(timeout_ms).unwrap_or(i32::MAX),
                    });
                    let status = match self.client.call_broker(&leader.addr, req).await {
                        Ok(Response::DeleteRecords(d)) if d.status.is_ok() => return Ok(d.low_watermark),
                        Ok(other) => other.status().clone(),
                        Err(net::NetError::Refused { status, .. }) => status,
                        Err(e) => protocol::Status::new(protocol::ErrorCode::RequestTimedOut, e.to_string()),
                    };
                    if !status.code.is_retriable() {
                        return Err(ClientError::Refused { what, status });
                    }
                    status.to_string()
                }
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Timeout { what, timeout_ms, last_error: last });
            }
            tokio::time::sleep(self.client.backoff(attempt)).await;
            attempt += 1;
        }
    }
}
