//! Who may send what: the checks an own-protocol request needs under the authorizer, and the
//! producer-id rule both listeners share ("a producer id belongs to its principal"). Pure
//! functions over an [`Authorizer`] and a [`ProducerIdBinder`]: no socket, clock or file.
//!
//! An own-protocol request asks what its Kafka counterpart asks (`kafka-security.md`), with
//! Kafka's error for each resource type: TOPIC_, GROUP_, TRANSACTIONAL_ID_ and
//! CLUSTER_AUTHORIZATION_FAILED. Where Kafka filters an answer (an all-topics Metadata, an
//! OffsetFetch of every partition) the own protocol asks instead: DESCRIBE on the cluster for
//! every topic, DESCRIBE on the group for its offsets. The cluster members' own traffic
//! (replication, markers, ISR changes, heartbeats) is never a client's.

use crate::acl::{Authorizer, Operation, ResourceType, CLUSTER_NAME};
use crate::auth::{PidOwner, ProducerIdBinder};
use crate::batch::BatchHeader;
use crate::{ErrorCode, Request, Status};

/// The refusal of `operation` on `(resource_type, name)` to `principal`, with what to do.
pub fn refusal(
    principal: &str,
    code: ErrorCode,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> Status {
    Status::new(
        code,
        format!(
            "{principal} may not {operation} {resource_type} `{name}`: no ACL allows it (ask an operator: admin acls \
             add --principal {principal} --operation {operation} ...)"
        ),
    )
}

/// Why `principal` may not use `producer_id` (under transactional id `tid`, if any), if it may
/// not: under the authorizer a producer id belongs to the transactional id it was granted for
/// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, also for a write that names no transactional id
/// under one) or, an idempotent producer's, to the principal it was granted to
/// (CLUSTER_AUTHORIZATION_FAILED). Super users aside; -1 (no producer) is nobody's; without a
/// binder (no cluster secret) or with the authorizer off, nothing is refused.
pub fn producer_id_refusal(
    authorizer: &Authorizer,
    binder: Option<&ProducerIdBinder>,
    principal: &str,
    tid: Option<&str>,
    producer_id: i64,
) -> Option<Status> {
    let binder = binder.filter(|_| authorizer.enabled() && producer_id >= 0)?;
    if authorizer.is_super_user(principal) {
        return None;
    }
    Some(match tid {
        Some(t) if !binder.bound_to(producer_id, PidOwner::TransactionalId(t)) => Status::new(
            ErrorCode::TransactionalIdAuthorizationFailed,
            format!(
                "producer id {producer_id} was not granted to transactional id '{t}': a producer id belongs to the \
                 transactional id it was initialised for; call InitProducerId for your own"
            ),
        ),
        // An odd producer id is a transactional id's (the coordinator's parity rule), and a
        // transactional producer writes only transactionally.
        None if ProducerIdBinder::counter(producer_id) % 2 == 1 => Status::new(
            ErrorCode::TransactionalIdAuthorizationFailed,
            format!(
                "producer id {producer_id} belongs to a transactional id, and this write names none: only that \
                 transactional id's producer writes under it; call InitProducerId for your own"
            ),
        ),
        None if !binder.bound_to(producer_id, PidOwner::Principal(principal)) => Status::new(
            ErrorCode::ClusterAuthorizationFailed,
            format!(
                "producer id {producer_id} was not granted to {principal}: an idempotent producer id belongs to the \
                 principal that initialised it; call InitProducerId for your own"
            ),
        ),
        _ => return None,
    })
}

/// What InitProducerId needs of `principal` at `host`, refused with Kafka's error: WRITE on the
/// transactional id `tid` (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one (KIP-679),
/// IDEMPOTENT_WRITE on the cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).
pub fn init_producer_id_refusal(
    authorizer: &Authorizer,
    principal: &str,
    host: &str,
    tid: Option<&str>,
) -> Option<Status> {
    let (code, operation, resource_type, name) = match tid {
        Some(t) if !authorizer.authorize(principal, host, Operation::Write, ResourceType::TransactionalId, t) => {
            (ErrorCode::TransactionalIdAuthorizationFailed, Operation::Write, ResourceType::TransactionalId, t)
        }
        None if !authorizer.authorize(
            principal,
            host,
            Operation::IdempotentWrite,
            ResourceType::Cluster,
            CLUSTER_NAME,
        ) && !authorizer.authorize_any(principal, host, Operation::Write, ResourceType::Topic) =>
        {
            (ErrorCode::ClusterAuthorizationFailed, Operation::IdempotentWrite, ResourceType::Cluster, CLUSTER_NAME)
        }
        _ => return None,
    };
    Some(refusal(principal, code, operation, resource_type, name))
}

/// One caller's view of the ACLs: its principal and host.
struct Asker<'a> {
    authorizer: &'a Authorizer,
    binder: Option<&'a ProducerIdBinder>,
    principal: &'a str,
    host: &'a str,
}

impl Asker<'_> {
    /// `code`'s refusal unless the caller may `operation` on `(resource_type, name)`.
    fn need(
        &self,
        code: ErrorCode,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Result<(), Status> {
        if self.authorizer.authorize(self.principal, self.host, operation, resource_type, name) {
            Ok(())
        } else {
            Err(refusal(self.principal, code, operation, resource_type, name))
        }
    }

    fn topic(&self, operation: Operation, name: &str) -> Result<(), Status> {
        self.need(ErrorCode::TopicAuthorizationFailed, operation, ResourceType::Topic, name)
    }

    fn group(&self, operation: Operation, name: &str) -> Result<(), Status> {
        self.need(ErrorCode::GroupAuthorizationFailed, operation, ResourceType::Group, name)
    }

    fn cluster(&self, operation: Operation) -> Result<(), Status> {
        self.need(ErrorCode::ClusterAuthorizationFailed, operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// WRITE on transactional id `tid`, and `producer_id` is that id's: what every request of
    /// a transaction needs.
    fn transaction(&self, tid: &str, producer_id: i64) -> Result<(), Status> {
        self.need(ErrorCode::TransactionalIdAuthorizationFailed, Operation::Write, ResourceType::TransactionalId, tid)?;
        self.producer_id(Some(tid), producer_id)
    }

    fn producer_id(&self, tid: Option<&str>, producer_id: i64) -> Result<(), Status> {
        match producer_id_refusal(self.authorizer, self.binder, self.principal, tid, producer_id) {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    /// What `req` needs (see the module).
    fn check(&self, req: &Request) -> Result<(), Status> {
        use Operation::*;
        let tid_of = |t: &str| (!t.is_empty()).then(|| t.to_string());
        match req {
            // The transactional id first, then the topic, as Kafka checks them.
            Request::Produce(p) => {
                // A batch that does not parse is the produce path's to refuse.
                let producer_id = BatchHeader::parse(&p.records).map_or(-1, |h| h.producer_id);
                match &p.transactional_id {
                    Some(t) => self.transaction(t, producer_id)?,
                    None => self.producer_id(None, producer_id)?,
                }
                self.topic(Write, &p.topic)
            }
            Request::Fetch(f) => self.topic(Read, &f.topic),
            Request::Metadata(m) if m.topics.is_empty() => self.cluster(Describe),
            Request::Metadata(m) => m.topics.iter().try_for_each(|t| {
                self.topic(Describe, t)?;
                if m.allow_auto_create
                    && !self.authorizer.authorize(
                        self.principal,
                        self.host,
                        Create,
                        ResourceType::Cluster,
                        CLUSTER_NAME,
                    )
                {
                    // Kafka creates a missing topic only for a caller that may create it.
                    self.topic(Create, t)?;
                }
                Ok(())
            }),
            Request::CreateTopic(c) => {
                if self.cluster(Create).is_ok() {
                    return Ok(());
                }
                self.topic(Create, &c.name)
            }
            Request::DeleteTopic(d) => self.topic(Delete, &d.name),
            Request::CreatePartitions(c) => self.topic(Alter, &c.name),
            Request::ElectLeader(_) | Request::Reassign(_) => self.cluster(Alter),
            Request::ListReassignments(_) => self.cluster(Describe),
            Request::DeleteRecords(d) => self.topic(Delete, &d.topic),
            Request::AlterConfigs(a) => self.topic(AlterConfigs, &a.topic),
            Request::Describe => self.cluster(Describe),
            Request::InitProducerId(i) => {
                if i.principal != self.principal {
                    return Err(Status::new(
                        ErrorCode::ClusterAuthorizationFailed,
                        format!(
                            "InitProducerId asks for principal '{}' on a connection logged in as {}: a producer id is \
                             granted to the principal that logged in",
                            i.principal, self.principal
                        ),
                    ));
                }
                match init_producer_id_refusal(
                    self.authorizer,
                    self.principal,
                    self.host,
                    i.transactional_id.as_deref(),
                ) {
                    Some(refused) => Err(refused),
                    None => Ok(()),
                }
            }
            Request::EndTxn(e) => self.transaction(&e.transactional_id, e.producer_id),
            Request::AddPartition(a) => {
                match tid_of(&a.transactional_id) {
                    Some(t) => self.transaction(&t, a.producer_id)?,
                    None => self.producer_id(None, a.producer_id)?,
                }
                self.topic(Write, &a.topic)
            }
            Request::AddOffsets(a) => {
                self.transaction(&a.txn.transactional_id, a.txn.producer_id)?;
                self.group(Read, &a.group)
            }
            Request::JoinGroup(j) => self.group(Read, &j.group),
            Request::SyncGroup(s) => self.group(Read, &s.member.group),
            Request::GroupHeartbeat(h) => self.group(Read, &h.member.group),
            Request::ConsumerHeartbeat(h) => self.group(Read, &h.group),
            Request::LeaveGroup(l) => self.group(Read, &l.group),
            Request::OffsetCommit(c) => {
                if let Some(t) = &c.txn {
                    self.transaction(&t.transactional_id, t.producer_id)?;
                }
                self.group(Read, &c.member.group)?;
                c.offsets.iter().try_for_each(|o| self.topic(Read, &o.topic))
            }
            Request::OffsetFetch(f) => {
                self.group(Describe, &f.group)?;
                match &f.partitions {
                    Some(partitions) => partitions.iter().try_for_each(|(t, _)| self.topic(Describe, t)),
                    // Every topic's offsets: where Kafka leaves out the topics the principal may not
                    // describe, the own protocol asks DESCRIBE on the cluster.
                    None => self.cluster(Describe),
                }
            }
            Request::DescribeGroups(d) => d.groups.iter().try_for_each(|g| self.group(Describe, g)),
            Request::DeleteGroups(d) => d.groups.iter().try_for_each(|g| self.group(Delete, g)),
            Request::OffsetDelete(d) => {
                self.group(Delete, &d.group)?;
                d.partitions.iter().try_for_each(|(t, _)| self.topic(Read, t))
            }
            Request::Acls(a) if a.create.is_empty() && a.delete.is_empty() => self.cluster(Describe),
            Request::Acls(_) => self.cluster(Alter),
            Request::ScramCredentials(c) if c.upserts.is_empty() && c.deletions.is_empty() => self.cluster(Describe),
            Request::ScramCredentials(_) => self.cluster(Alter),
            // Logins and membership proofs are answered before any of this.
            Request::AuthBegin(_) | Request::AuthProve(_) | Request::SaslLogin(_) => Ok(()),
            Request::Replicate(_) | Request::WriteMarker(_) | Request::AlterPartition(_) | Request::Heartbeat(_) => {
                Err(Status::new(
                    ErrorCode::ClusterAuthorizationFailed,
                    format!(
                        "{:?} is a cluster member's request; members prove it with the cluster secret, and no ACL \
                         grants it to a client",
                        req.api_key()
                    ),
                ))
            }
        }
    }
}

/// Why `principal`, connected from `host`, may not send the own-protocol request `req` under
/// `authorizer` (with `binder`, the producer-id rule), if it may not (see the module). With
/// the authorizer off, nothing is refused.
pub fn own_refusal(
    authorizer: &Authorizer,
    binder: Option<&ProducerIdBinder>,
    principal: &str,
    host: &str,
    req: &Request,
) -> Option<Status> {
    if !authorizer.enabled() {
        return None;
    }
    Asker { authorizer, binder, principal, host }.check(req).err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{AclBinding, Authorization, PatternType, Permission};
    use crate::auth::ClusterSecret;
    use crate::batch::{build_batch, ProducerStamp};
    use crate::{EndTxnRequest, FetchRequest, InitProducerIdRequest, MetadataRequest, ProduceRequest};
    use bytes::Bytes;

    const ALICE: &str = "User:alice";
    const MALLORY: &str = "User:mallory";

    fn allow(resource_type: ResourceType, name: &str, operation: Operation) -> AclBinding {
        AclBinding {
            resource_type,
            name: name.into(),
            pattern: PatternType::Literal,
            principal: ALICE.into(),
            host: "*".into(),
            operation,
            permission: Permission::Allow,
        }
    }

    fn authorizer(acls: Vec<AclBinding>) -> Authorizer {
        Authorizer::new(Authorization {
            enabled: true,
            super_users: vec!["User:admin".into()],
            acls,
            ..Default::default()
        })
    }

    fn produce(tid: Option<&str>, producer_id: i64) -> Request {
        let stamp = ProducerStamp { producer_id, producer_epoch: 0, base_sequence: 0 };
        Request::Produce(ProduceRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: -1,
            acks: -1,
            transactional_id: tid.map(str::to_string),
            records: build_batch(stamp, tid.is_some(), 0, &[Bytes::from_static(b"v")]),
        })
    }

    #[test]
    fn each_request_asks_its_resource_with_kafkas_error() {
        let a = authorizer(vec![allow(ResourceType::Topic, "t", Operation::Read)]);
        let code = |principal: &str, req: &Request| own_refusal(&a, None, principal, "10.0.0.1", req).map(|s| s.code);
        let fetch = Request::Fetch(FetchRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: -1,
            offset: 0,
            max_bytes: 1,
            isolation: 0,
        });
        assert_eq!(code(ALICE, &fetch), None);
        assert_eq!(code(MALLORY, &fetch), Some(ErrorCode::TopicAuthorizationFailed));
        assert_eq!(code("User:admin", &fetch), None, "a super user");
        assert_eq!(code(ALICE, &produce(None, -1)), Some(ErrorCode::TopicAuthorizationFailed), "READ is not WRITE");
        assert_eq!(code(ALICE, &Request::Describe), Some(ErrorCode::ClusterAuthorizationFailed));
        let all_topics = Request::Metadata(MetadataRequest { topics: vec![], allow_auto_create: false });
        assert_eq!(code(ALICE, &all_topics), Some(ErrorCode::ClusterAuthorizationFailed));
        let named = Request::Metadata(MetadataRequest { topics: vec!["t".into()], allow_auto_create: false });
        assert_eq!(code(ALICE, &named), None, "READ implies DESCRIBE");
        let creating = Request::Metadata(MetadataRequest { topics: vec!["t".into()], allow_auto_create: true });
        assert_eq!(code(ALICE, &creating), Some(ErrorCode::TopicAuthorizationFailed), "auto-creation needs CREATE");
        let end = Request::EndTxn(EndTxnRequest {
            transactional_id: "payments".into(),
            producer_id: 1,
            producer_epoch: 0,
            commit: true,
            bump_epoch: true,
        });
        assert_eq!(code(ALICE, &end), Some(ErrorCode::TransactionalIdAuthorizationFailed));
        let init = |tid: Option<&str>, principal: &str| {
            Request::InitProducerId(InitProducerIdRequest {
                transactional_id: tid.map(str::to_string),
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
                principal: principal.into(),
            })
        };
        assert_eq!(code(ALICE, &init(Some("payments"), ALICE)), Some(ErrorCode::TransactionalIdAuthorizationFailed));
        assert_eq!(code(ALICE, &init(None, ALICE)), Some(ErrorCode::ClusterAuthorizationFailed), "no WRITE anywhere");
        assert_eq!(code(MALLORY, &init(None, ALICE)), Some(ErrorCode::ClusterAuthorizationFailed), "another's name");
        // Kafka's order: the transactional id before the topic.
        assert_eq!(code(MALLORY, &produce(Some("payments"), -1)), Some(ErrorCode::TransactionalIdAuthorizationFailed));
        let offsets = |partitions: Option<Vec<(String, i32)>>| {
            Request::OffsetFetch(crate::OffsetFetchRequest { group: "g".into(), partitions, require_stable: false })
        };
        let a = authorizer(vec![
            allow(ResourceType::Topic, "t", Operation::Read),
            allow(ResourceType::Group, "g", Operation::Describe),
        ]);
        let code = |req: &Request| own_refusal(&a, None, ALICE, "h", req).map(|s| s.code);
        assert_eq!(code(&offsets(Some(vec![("t".into(), 0)]))), None);
        assert_eq!(code(&offsets(Some(vec![("u".into(), 0)]))), Some(ErrorCode::TopicAuthorizationFailed));
        assert_eq!(code(&offsets(None)), Some(ErrorCode::ClusterAuthorizationFailed), "every topic's offsets");
        let off = Authorizer::new(Authorization::default());
        assert_eq!(own_refusal(&off, None, MALLORY, "h", &Request::Describe), None, "the authorizer off");
    }

    #[test]
    fn deleting_a_group_or_its_offsets_needs_delete_on_the_group_and_read_on_the_topics() {
        let a = authorizer(vec![
            allow(ResourceType::Topic, "t", Operation::Read),
            allow(ResourceType::Group, "g", Operation::Delete),
            allow(ResourceType::Group, "h", Operation::Read),
        ]);
        let code = |req: &Request| own_refusal(&a, None, ALICE, "h", req).map(|s| s.code);
        let groups = |names: &[&str]| {
            Request::DeleteGroups(crate::DeleteGroupsRequest { groups: names.iter().map(|n| n.to_string()).collect() })
        };
        assert_eq!(code(&groups(&["g"])), None);
        assert_eq!(code(&groups(&["g", "h"])), Some(ErrorCode::GroupAuthorizationFailed), "READ is not DELETE");
        let offsets = |group: &str, topic: &str| {
            Request::OffsetDelete(crate::OffsetDeleteRequest {
                group: group.into(),
                partitions: vec![(topic.into(), 0)],
            })
        };
        assert_eq!(code(&offsets("g", "t")), None);
        assert_eq!(code(&offsets("h", "t")), Some(ErrorCode::GroupAuthorizationFailed));
        assert_eq!(code(&offsets("g", "u")), Some(ErrorCode::TopicAuthorizationFailed));
        assert_eq!(
            own_refusal(&a, None, MALLORY, "h", &groups(&["g"])).map(|s| s.code),
            Some(ErrorCode::GroupAuthorizationFailed)
        );
    }

    #[test]
    fn deleting_records_needs_delete_on_the_topic() {
        let a = authorizer(vec![
            allow(ResourceType::Topic, "t", Operation::Delete),
            allow(ResourceType::Topic, "u", Operation::Write),
        ]);
        let delete = |topic: &str| {
            Request::DeleteRecords(crate::DeleteRecordsRequest {
                topic: topic.into(),
                partition: 0,
                offset: 3,
                timeout_ms: 1_000,
            })
        };
        assert_eq!(own_refusal(&a, None, ALICE, "h", &delete("t")).map(|s| s.code), None);
        assert_eq!(
            own_refusal(&a, None, ALICE, "h", &delete("u")).map(|s| s.code),
            Some(ErrorCode::TopicAuthorizationFailed),
            "WRITE is not DELETE"
        );
        assert!(delete("t").is_internal(), "the cluster secret's without the authorizer");
    }

    #[test]
    fn altering_a_topics_configs_needs_alter_configs_on_it() {
        let a = authorizer(vec![
            allow(ResourceType::Topic, "t", Operation::AlterConfigs),
            allow(ResourceType::Topic, "u", Operation::Alter),
        ]);
        let alter = |topic: &str| {
            Request::AlterConfigs(crate::AlterConfigsRequest {
                topic: topic.into(),
                changes: vec![crate::ConfigChange::Set("retention.ms".into(), "1".into())],
                replace: false,
                validate_only: false,
            })
        };
        assert_eq!(own_refusal(&a, None, ALICE, "h", &alter("t")).map(|s| s.code), None);
        assert_eq!(
            own_refusal(&a, None, ALICE, "h", &alter("u")).map(|s| s.code),
            Some(ErrorCode::TopicAuthorizationFailed),
            "ALTER is not ALTER_CONFIGS"
        );
        assert!(alter("t").is_internal(), "the cluster secret's without the authorizer");
    }

    #[test]
    fn moving_replicas_needs_alter_and_listing_moves_describe_on_the_cluster() {
        let a = authorizer(vec![allow(ResourceType::Cluster, CLUSTER_NAME, Operation::Describe)]);
        let move_it = Request::Reassign(crate::ReassignRequest {
            topic: "t".into(),
            partition: 0,
            replicas: Some(vec![2, 3]),
            allow_replication_factor_change: true,
        });
        let list = Request::ListReassignments(crate::ListReassignmentsRequest { topics: None });
        assert_eq!(own_refusal(&a, None, ALICE, "h", &list).map(|s| s.code), None);
        assert_eq!(
            own_refusal(&a, None, ALICE, "h", &move_it).map(|s| s.code),
            Some(ErrorCode::ClusterAuthorizationFailed),
            "DESCRIBE is not ALTER"
        );
        let b = authorizer(vec![allow(ResourceType::Cluster, CLUSTER_NAME, Operation::Alter)]);
        assert_eq!(own_refusal(&b, None, ALICE, "h", &move_it).map(|s| s.code), None);
        assert!(move_it.is_internal(), "the cluster secret's without the authorizer");
        assert!(!list.is_internal());
    }

    #[test]
    fn a_write_under_anothers_producer_id_is_refused() {
        let secret = ClusterSecret::new(vec![7; 32]).unwrap();
        let binder = ProducerIdBinder::new(&secret);
        let a = Authorizer::new(Authorization {
            enabled: true,
            acls: [ALICE, MALLORY]
                .into_iter()
                .flat_map(|p| {
                    [
                        AclBinding { principal: p.into(), ..allow(ResourceType::Topic, "t", Operation::Write) },
                        AclBinding {
                            principal: p.into(),
                            ..allow(ResourceType::TransactionalId, "*", Operation::Write)
                        },
                    ]
                })
                .collect(),
            ..Default::default()
        });
        let payments = binder.bind(1, PidOwner::TransactionalId("payments"));
        let idempotent = binder.bind(2, PidOwner::Principal(ALICE));
        let code = |principal: &str, req: &Request| own_refusal(&a, Some(&binder), principal, "h", req).map(|s| s.code);
        assert_eq!(code(ALICE, &produce(Some("payments"), payments)), None);
        assert_eq!(
            code(MALLORY, &produce(Some("mallory-own"), payments)),
            Some(ErrorCode::TransactionalIdAuthorizationFailed),
            "payments' producer id under another transactional id"
        );
        assert_eq!(code(MALLORY, &produce(None, payments)), Some(ErrorCode::TransactionalIdAuthorizationFailed));
        assert_eq!(code(ALICE, &produce(None, idempotent)), None);
        assert_eq!(code(MALLORY, &produce(None, idempotent)), Some(ErrorCode::ClusterAuthorizationFailed));
    }
}
