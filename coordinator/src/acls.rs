//! The ACLs the coordinator keeps (`--authorizer`): plain state changed only by journal
//! entries, and the decisions of an [`AclsRequest`] as the entries that carry them out.
//!
//! Each change is one [`Entry::Acls`] (the bindings created and deleted); a snapshot is one
//! such entry creating every binding. Brokers receive [`Authorization`] in heartbeat answers
//! under a version that is new at every coordinator start and one higher at every change, so a
//! broker that holds another version (or none) is sent the whole set.

use std::collections::BTreeSet;

use protocol::acl::{AclBinding, Authorization};
use protocol::{AclsRequest, AclsResponse, ErrorCode, Status};

use crate::entry::Entry;

/// Most bindings the coordinator keeps: each one travels to every broker in heartbeat answers,
/// so the set is bounded (a client with Cluster ALTER cannot grow it without limit).
pub const ACLS_MAX: usize = 10_000;

/// The authorizer's settings (coordinator flags, not journaled: each start says them again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals that may do anything (`--super-users`).
    pub super_users: Vec<String>,
    /// What a resource no binding names allows (`--allow-everyone-if-no-acl-found`).
    pub allow_everyone_if_no_acl_found: bool,
}

/// Every binding, as the journal built them.
#[derive(Debug, Default)]
pub struct AclStore {
    bindings: BTreeSet<AclBinding>,
    /// Changes applied since this process started (part of the version brokers see).
    changes: i64,
}

impl AclStore {
    /// Apply a journal entry (only [`Entry::Acls`] changes anything).
    pub fn apply(&mut self, entry: &Entry) {
        if let Entry::Acls { created, deleted } = entry {
            for d in deleted {
                self.bindings.remove(d);
            }
            self.bindings.extend(created.iter().cloned());
            self.changes += 1;
        }
    }

    /// The entries that rebuild this state (none when there are no bindings).
    pub fn snapshot(&self) -> Vec<Entry> {
        if self.bindings.is_empty() {
            return Vec::new();
        }
        vec![Entry::Acls { created: self.bindings.iter().cloned().collect(), deleted: Vec::new() }]
    }

    /// The version [`AclStore::authorization`] gives under `base`.
    pub fn version(&self, base: i64) -> i64 {
        base.wrapping_add(self.changes)
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// What brokers are handed: `config` (`None`: the authorizer is off) and every binding,
    /// under `base` (new at each start) plus the changes applied since.
    pub fn authorization(&self, config: Option<&AuthorizerConfig>, base: i64) -> Authorization {
        Authorization {
            version: self.version(base),
            enabled: config.is_some(),
            super_users: config.map(|c| c.super_users.clone()).unwrap_or_default(),
            allow_everyone_if_no_acl_found: config.is_some_and(|c| c.allow_everyone_if_no_acl_found),
            acls: self.bindings.iter().cloned().collect(),
        }
    }

    /// Decide `req`: the entry that carries it out (none when nothing changes) and the answer's
    /// per-item parts (`created`, `deleted`), the answer's authorization left to the caller.
    /// A binding that exists already is answered NONE and not created twice; an invalid one is
    /// INVALID_REQUEST with why; one past [`ACLS_MAX`] is POLICY_VIOLATION. Deletions apply to
    /// the bindings as they stand before this request's creations, as Kafka's do.
    pub fn decide(&self, req: &AclsRequest) -> (Option<Entry>, Vec<Status>, Vec<Vec<AclBinding>>) {
        let items = req.create.len() + req.delete.len();
        if items > protocol::acl::REQUEST_ITEMS_MAX {
            let status = Status::new(
                ErrorCode::InvalidRequest,
                format!("{items} items in one ACL request; at most {}: send several", protocol::acl::REQUEST_ITEMS_MAX),
            );
            return (
                None,
                req.create.iter().map(|_| status.clone()).collect(),
                req.delete.iter().map(|_| Vec::new()).collect(),
            );
        }
        let mut deleted_all = BTreeSet::new();
        let deleted: Vec<Vec<AclBinding>> = req
            .delete
            .iter()
            .map(|f| {
                let hit: Vec<AclBinding> = self.bindings.iter().filter(|b| f.matches(b)).cloned().collect();
                deleted_all.extend(hit.iter().cloned());
                hit
            })
            .collect();
        let mut created_all = BTreeSet::new();
        let mut count = self.bindings.len() - deleted_all.len();
        let created = req
            .create
            .iter()
            .map(|b| {
                if let Err(e) = b.validate() {
                    return Status::new(ErrorCode::InvalidRequest, format!("ACL {b} refused: {e}"));
                }
                let exists = self.bindings.contains(b) && !deleted_all.contains(b);
                if !exists && !created_all.contains(b) {
                    if count >= ACLS_MAX {
                        return Status::new(
                            ErrorCode::PolicyViolation,
                            format!("ACL {b} refused: the cluster holds acls_max {ACLS_MAX} ACLs; delete some first"),
                        );
                    }
                    count += 1;
                    created_all.insert(b.clone());
                }
                Status::ok()
            })
            .collect();
        let entry = (!created_all.is_empty() || !deleted_all.is_empty()).then(|| Entry::Acls {
            created: created_all.into_iter().collect(),
            deleted: deleted_all.into_iter().collect(),
        });
        (entry, created, deleted)
    }

    /// The answer to an ACL request while the authorizer is off.
    pub fn disabled(req: &AclsRequest) -> AclsResponse {
        let status = Status::new(
            ErrorCode::SecurityDisabled,
            "the coordinator runs without --authorizer, so there are no ACLs; restart it with --authorizer",
        );
        AclsResponse {
            created: req.create.iter().map(|_| status.clone()).collect(),
            deleted: req.delete.iter().map(|_| Vec::new()).collect(),
            status,
            authorization: Authorization::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::acl::{AclFilter, Operation, PatternType, Permission, ResourceType};

    fn binding(principal: &str, name: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::TransactionalId,
            name: name.into(),
            pattern: PatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: Operation::Write,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn changes_are_entries_and_replay_and_snapshots_rebuild_them() {
        let mut store = AclStore::default();
        let req = AclsRequest {
            create: vec![binding("User:alice", "payments"), binding("User:alice", "payments"), binding("bad", "x")],
            delete: Vec::new(),
        };
        let (entry, created, _) = store.decide(&req);
        assert!(created[0].is_ok() && created[1].is_ok());
        assert_eq!(created[2].code, ErrorCode::InvalidRequest);
        let entry = entry.unwrap();
        assert_eq!(entry, Entry::Acls { created: vec![binding("User:alice", "payments")], deleted: Vec::new() });
        store.apply(&entry);
        let v1 = store.authorization(Some(&AuthorizerConfig::default()), 100).version;

        // Creating it again changes nothing: no entry.
        assert!(store
            .decide(&AclsRequest { create: vec![binding("User:alice", "payments")], delete: vec![] })
            .0
            .is_none());

        store.apply(&Entry::Acls { created: vec![binding("User:bob", "orders")], deleted: vec![] });
        let by_alice = AclFilter { principal: Some("User:alice".into()), ..Default::default() };
        let (entry, _, deleted) = store.decide(&AclsRequest { create: vec![], delete: vec![by_alice] });
        assert_eq!(deleted, vec![vec![binding("User:alice", "payments")]]);
        store.apply(&entry.unwrap());
        let a = store.authorization(Some(&AuthorizerConfig::default()), 100);
        assert_eq!(a.acls, vec![binding("User:bob", "orders")]);
        assert!(a.version > v1, "every change makes a new version");

        let mut rebuilt = AclStore::default();
        for e in store.snapshot() {
            rebuilt.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!(rebuilt.authorization(None, 0).acls, a.acls);
    }

    #[test]
    fn the_set_is_bounded() {
        let mut store = AclStore::default();
        let many = (0..ACLS_MAX).map(|i| binding("User:a", &format!("t{i}"))).collect();
        store.apply(&Entry::Acls { created: many, deleted: vec![] });
        let (entry, created, _) =
            store.decide(&AclsRequest { create: vec![binding("User:a", "one-more")], delete: vec![] });
        assert!(entry.is_none());
        assert_eq!(created[0].code, ErrorCode::PolicyViolation);
        // Deleting one in the same request makes room.
        let one = AclFilter { name: Some("t0".into()), ..Default::default() };
        let (entry, created, _) =
            store.decide(&AclsRequest { create: vec![binding("User:a", "one-more")], delete: vec![one] });
        assert!(created[0].is_ok() && entry.is_some());
    }
}
