//! Authorization on the Kafka listener: the coordinator's ACLs as this broker last heard them
//! ([`AuthorizationCache`], refreshed by heartbeat answers), and the caller of one request
//! ([`Caller`]: its principal and address) asking them. Every handler asks before it acts, as
//! `../shared/reference/kafka-security.md` lists per API; the rules are `protocol::acl`'s.

use std::sync::{Arc, RwLock};

use protocol::acl::{Authorization, Authorizer, Operation, ResourceType, CLUSTER_NAME};
use protocol::auth::ProducerIdBinder;
use protocol::{ErrorCode, Status};

/// The authorizer's settings and ACLs as the coordinator last sent them (off until it says).
#[derive(Debug, Default)]
pub(crate) struct AuthorizationCache(RwLock<Arc<Authorizer>>);

impl AuthorizationCache {
    /// The version held (0 before any).
    pub(crate) fn version(&self) -> i64 {
        self.current().settings().version
    }

    /// What is held now.
    pub(crate) fn current(&self) -> Arc<Authorizer> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Hold `authorization` from now on if it is newer than what is held
    /// ([`newer_version`]); whether it was taken.
    pub(crate) fn replace_if_newer(&self, authorization: Authorization) -> bool {
        if !newer_version(self.version(), authorization.version) {
            return false;
        }
        self.replace(authorization);
        true
    }

    /// Hold `authorization` from now on.
    fn replace(&self, authorization: Authorization) {
        tracing::info!(
            enabled = authorization.enabled,
            acls = authorization.acls.len(),
            version = authorization.version,
            "authorization received from the coordinator"
        );
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Authorizer::new(authorization));
    }
}

/// Whether a set of version `got` (ACLs or credentials) is newer than one of version `held`:
/// the coordinator's versions hold its process's random base in their high 32 bits and its
/// changes since in the low ones, so within one process the higher is newer, and a set of
/// another process (a coordinator restart or takeover) is taken. A heartbeat's or a relay's
/// answer that was overtaken by a newer one changes nothing.
pub(crate) fn newer_version(held: i64, got: i64) -> bool {
    (got >> 32) != (held >> 32) || got > held
}

/// Who sent a request: its principal (`User:ANONYMOUS` without SASL) and address, with the
/// ACLs of the moment it arrived.
pub(super) struct Caller {
    authorizer: Arc<Authorizer>,
    principal: Arc<str>,
    host: Arc<str>,
}

impl Caller {
    pub(super) fn new(authorizer: Arc<Authorizer>, principal: Arc<str>, host: Arc<str>) -> Caller {
        Caller { authorizer, principal, host }
    }

    /// Whether the authorizer is on.
    pub(super) fn enabled(&self) -> bool {
        self.authorizer.enabled()
    }

    /// The caller's principal.
    pub(super) fn principal(&self) -> &str {
        &self.principal
    }

    /// Whether the caller may do `operation` on `(resource_type, name)`.
    pub(super) fn may(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        let allowed = self.authorizer.authorize(&self.principal, &self.host, operation, resource_type, name);
        if !allowed {
            tracing::info!(
                target: "epochfence::fencing",
                principal = %self.principal,
                host = %self.host,
                %operation,
                %resource_type,
                resource = name,
                "kafka request not authorized"
            );
        }
        allowed
    }

    /// [`Caller::may`] without logging a refusal: for what only filters or narrows an answer
    /// (an all-topics Metadata, ListGroups, a Metadata's topic creation), as Kafka does.
    pub(super) fn may_quietly(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        self.authorizer.authorize(&self.principal, &self.host, operation, resource_type, name)
    }

    /// Whether the caller may do `operation` on the cluster.
    pub(super) fn may_cluster(&self, operation: Operation) -> bool {
        self.may(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Why the caller may not use `producer_id` (under transactional id `tid`, if any), if it
    /// may not ([`protocol::authorize::producer_id_refusal`], the rule both listeners share);
    /// a refusal is logged.
    pub(super) fn producer_id_refusal(
        &self,
        binder: Option<&ProducerIdBinder>,
        tid: Option<&str>,
        producer_id: i64,
    ) -> Option<Status> {
        let refused =
            protocol::authorize::producer_id_refusal(&self.authorizer, binder, &self.principal, tid, producer_id)?;
        tracing::info!(
            target: "epochfence::fencing",
            principal = %self.principal,
            host = %self.host,
            producer_id,
            transactional_id = tid.unwrap_or(""),
            reason = refused.code.name(),
            "kafka request under another's producer id refused"
        );
        Some(refused)
    }

    /// Why the caller may not call InitProducerId for `tid` (or, without one, for an
    /// idempotent producer id), if it may not ([`protocol::authorize::init_producer_id_refusal`]).
    pub(super) fn init_producer_id_refusal(&self, tid: Option<&str>) -> Option<Status> {
        protocol::authorize::init_producer_id_refusal(&self.authorizer, &self.principal, &self.host, tid)
    }

    /// CLUSTER_AUTHORIZATION_FAILED, unless the caller may `operation` the cluster.
    pub(super) fn cluster_refusal(&self, operation: Operation) -> Option<Status> {
        (!self.may_cluster(operation)).then(|| {
            self.refusal(ErrorCode::ClusterAuthorizationFailed, operation, ResourceType::Cluster, CLUSTER_NAME)
        })
    }

    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, unless the caller may WRITE transactional id `tid`
    /// and `producer_id` is that id's ([`Caller::producer_id_refusal`]): what every request of a
    /// transaction needs.
    pub(super) fn transactional_refusal(
        &self,
        binder: Option<&ProducerIdBinder>,
        tid: &str,
        producer_id: i64,
    ) -> Option<Status> {
        if !self.may(Operation::Write, ResourceType::TransactionalId, tid) {
            let code = ErrorCode::TransactionalIdAuthorizationFailed;
            return Some(self.refusal(code, Operation::Write, ResourceType::TransactionalId, tid));
        }
        self.producer_id_refusal(binder, Some(tid), producer_id)
    }

    /// The refusal of `operation` on a resource, with what to do about it.
    pub(super) fn refusal(
        &self,
        code: ErrorCode,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Status {
        protocol::authorize::refusal(&self.principal, code, operation, resource_type, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_overtaken_by_a_newer_one_is_not_taken() {
        let base = 7i64 << 32;
        assert!(newer_version(0, base), "the first set");
        assert!(newer_version(base + 1, base + 2));
        assert!(!newer_version(base + 2, base + 1), "an older answer of the same process");
        assert!(!newer_version(base + 2, base + 2));
        assert!(newer_version(base + 9, (3i64 << 32) + 1), "another coordinator process's");
        let cache = AuthorizationCache::default();
        assert!(cache.replace_if_newer(Authorization { version: base + 2, ..Default::default() }));
        assert!(!cache.replace_if_newer(Authorization { version: base + 1, enabled: true, ..Default::default() }));
        assert!(!cache.current().enabled(), "the older set was not taken");
    }
}
