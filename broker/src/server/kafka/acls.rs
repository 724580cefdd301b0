//! Kafka's ACL APIs: CreateAcls and DeleteAcls (ALTER on the cluster; relayed to the
//! coordinator, which keeps the ACLs, as one [`protocol::AclsRequest`] each) and DescribeAcls
//! (DESCRIBE on the cluster; answered from this broker's copy, which a change relayed through
//! this broker updates at once and a change through another reaches within a heartbeat).
//! Without the authorizer every one is answered SECURITY_DISABLED, as Kafka answers them
//! without an authorizer.

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use protocol::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType, FILTER_ANY,
    REQUEST_ITEMS_MAX,
};
use protocol::kafka::KafkaAnswer;
use protocol::{AclsRequest, ErrorCode, Request, Response, Status};

use super::KafkaConn;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A Kafka binding as the own protocol's, or why it is not one (INVALID_REQUEST, as Kafka
/// answers an unknown or ANY type, operation, pattern or permission in a creation).
fn binding(
    resource_type: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, Status> {
    let bad = |what: &str, code: i8| {
        Status::new(ErrorCode::InvalidRequest, format!("{what} {code} is not one an ACL can have"))
    };
    Ok(AclBinding {
        resource_type: ResourceType::from_code(resource_type).ok_or_else(|| bad("resource type", resource_type))?,
        name: name.to_string(),
        pattern: PatternType::from_code(pattern).ok_or_else(|| bad("pattern type", pattern))?,
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(operation).ok_or_else(|| bad("operation", operation))?,
        permission: Permission::from_code(permission).ok_or_else(|| bad("permission", permission))?,
    })
}

/// A Kafka filter as the own protocol's, or why it is not one.
fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, Status> {
    let bad = |what: &str, code: i8| Status::new(ErrorCode::InvalidRequest, format!("{what} filter {code} is unknown"));
    fn any<T>(code: i8, f: impl Fn(i8) -> Option<T>) -> Option<Option<T>> {
        if code == FILTER_ANY {
            Some(None)
        } else {
            f(code).map(Some)
        }
    }
    Ok(AclFilter {
        resource_type: any(resource_type, ResourceType::from_code)
            .ok_or_else(|| bad("resource type", resource_type))?,
        name: name.map(|n| n.to_string()),
        pattern: PatternFilter::from_code(pattern).ok_or_else(|| bad("pattern type", pattern))?,
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation: any(operation, Operation::from_code).ok_or_else(|| bad("operation", operation))?,
        permission: any(permission, Permission::from_code).ok_or_else(|| bad("permission", permission))?,
    })
}

/// The refusal of a request of more than [`REQUEST_ITEMS_MAX`] items.
fn too_many(items: usize) -> Option<Status> {
    (items > REQUEST_ITEMS_MAX).then(|| {
        Status::new(
            ErrorCode::InvalidRequest,
            format!("{items} items in one ACL request; at most {REQUEST_ITEMS_MAX}: send several"),
        )
    })
}

impl KafkaConn {
    /// Why the caller may not `operation` the cluster's ACLs, if it may not (SECURITY_DISABLED
    /// without the authorizer, CLUSTER_AUTHORIZATION_FAILED without the ACL).
    fn acl_refusal(&self, operation: Operation) -> Option<Status> {
        let caller = self.caller();
        if !caller.enabled() {
            return Some(Status::new(
                ErrorCode::SecurityDisabled,
                "no authorizer is configured: start the coordinator with --authorizer (and --cluster-secret-file)",
            ));
        }
        caller.cluster_refusal(operation)
    }

    /// Relay ACL changes to the coordinator; its answer's authorization is taken at once.
    async fn relay_acls(self: &Arc<Self>, req: AclsRequest) -> Result<protocol::AclsResponse, Status> {
        match self.relay(Request::Acls(req)).await {
            Response::Acls(a) if a.status.is_ok() => {
                self.shared.authorization.replace_if_newer(a.authorization.clone());
                Ok(a)
            }
            other => Err(other.status().clone()),
        }
    }

    pub(super) async fn create_acls(self: &Arc<Self>, r: CreateAclsRequest) -> KafkaAnswer {
        let result = |status: &Status| {
            let out = AclCreationResult::default().with_error_code(status.code.code());
            if status.is_ok() {
                out
            } else {
                out.with_error_message(Some(s(status.message.clone())))
            }
        };
        let reply =
            |results| KafkaAnswer::Reply(ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results)));
        if let Some(status) = self.acl_refusal(Operation::Alter).or_else(|| too_many(r.creations.len())) {
            return reply(r.creations.iter().map(|_| result(&status)).collect());
        }
        let parsed: Vec<Result<AclBinding, Status>> = r
            .creations
            .iter()
            .map(|c| {
                binding(
                    c.resource_type,
                    &c.resource_name,
                    c.resource_pattern_type,
                    &c.principal,
                    &c.host,
                    c.operation,
                    c.permission_type,
                )
            })
            .collect();
        let create: Vec<AclBinding> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
        let answered = if create.is_empty() {
            Ok(Vec::new())
        } else {
            self.relay_acls(AclsRequest { create, delete: Vec::new() }).await.map(|a| a.created)
        };
        let mut created = answered.as_ref().map(|c| c.iter()).ok();
        let results = parsed
            .iter()
            .map(|p| match (p, &answered, created.as_mut()) {
                (Err(status), ..) => result(status),
                (Ok(_), Err(status), _) => result(status),
                (Ok(_), Ok(_), Some(next)) => {
                    result(next.next().unwrap_or(&Status::new(ErrorCode::UnknownServerError, "no answer")))
                }
                (Ok(_), Ok(_), None) => result(&Status::new(ErrorCode::UnknownServerError, "no answer")),
            })
            .collect();
        reply(results)
    }

    pub(super) async fn delete_acls(self: &Arc<Self>, r: DeleteAclsRequest) -> KafkaAnswer {
        let failed = |status: &Status| {
            DeleteAclsFilterResult::default()
                .with_error_code(status.code.code())
                .with_error_message(Some(s(status.message.clone())))
        };
        let reply = |results| {
            KafkaAnswer::Reply(ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results)))
        };
        if let Some(status) = self.acl_refusal(Operation::Alter).or_else(|| too_many(r.filters.len())) {
            return reply(r.filters.iter().map(|_| failed(&status)).collect());
        }
        let parsed: Vec<Result<AclFilter, Status>> = r
            .filters
            .iter()
            .map(|f| {
                filter(
                    f.resource_type_filter,
                    f.resource_name_filter.as_ref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_ref(),
                    f.host_filter.as_ref(),
                    f.operation,
                    f.permission_type,
                )
            })
            .collect();
        let delete: Vec<AclFilter> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
        let answered = if delete.is_empty() {
            Ok(Vec::new())
        } else {
            self.relay_acls(AclsRequest { create: Vec::new(), delete }).await.map(|a| a.deleted)
        };
        let mut deleted = answered.as_ref().map(|d| d.iter()).ok();
        let results = parsed
            .iter()
            .map(|p| match (p, &answered, deleted.as_mut()) {
                (Err(status), ..) | (Ok(_), Err(status), _) => failed(status),
                (Ok(_), Ok(_), Some(next)) => {
                    let matching = next
                        .next()
                        .into_iter()
                        .flatten()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type.code())
                                .with_resource_name(s(b.name.clone()))
                                .with_pattern_type(b.pattern.code())
                                .with_principal(s(b.principal.clone()))
                                .with_host(s(b.host.clone()))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code())
                        })
                        .collect();
                    DeleteAclsFilterResult::default().with_matching_acls(matching)
                }
                (Ok(_), Ok(_), None) => failed(&Status::new(ErrorCode::UnknownServerError, "no answer")),
            })
            .collect();
        reply(results)
    }

    pub(super) fn describe_acls(&self, r: DescribeAclsRequest) -> KafkaAnswer {
        let reply = |resp: DescribeAclsResponse| KafkaAnswer::Reply(ResponseKind::DescribeAcls(resp));
        if let Some(status) = self.acl_refusal(Operation::Describe) {
            return reply(
                DescribeAclsResponse::default()
                    .with_error_code(status.code.code())
                    .with_error_message(Some(s(status.message))),
            );
        }
        let f = match filter(
            r.resource_type_filter,
            r.resource_name_filter.as_ref(),
            r.pattern_type_filter,
            r.principal_filter.as_ref(),
            r.host_filter.as_ref(),
            r.operation,
            r.permission_type,
        ) {
            Ok(f) => f,
            Err(status) => {
                return reply(
                    DescribeAclsResponse::default()
                        .with_error_code(status.code.code())
                        .with_error_message(Some(s(status.message))),
                )
            }
        };
        let authorizer = self.shared.authorization.current();
        // By resource, as Kafka groups them.
        let mut resources: Vec<DescribeAclsResource> = Vec::new();
        for b in authorizer.settings().acls.iter().filter(|b| f.matches(b)) {
            let acl = AclDescription::default()
                .with_principal(s(b.principal.clone()))
                .with_host(s(b.host.clone()))
                .with_operation(b.operation.code())
                .with_permission_type(b.permission.code());
            let same = |r: &&mut DescribeAclsResource| {
                r.resource_type == b.resource_type.code()
                    && r.resource_name.as_str() == b.name
                    && r.pattern_type == b.pattern.code()
            };
            match resources.iter_mut().find(|r| same(r)) {
                Some(r) => r.acls.push(acl),
                None => resources.push(
                    DescribeAclsResource::default()
                        .with_resource_type(b.resource_type.code())
                        .with_resource_name(s(b.name.clone()))
                        .with_pattern_type(b.pattern.code())
                        .with_acls(vec![acl]),
                ),
            }
        }
        reply(DescribeAclsResponse::default().with_resources(resources))
    }
}
