//! Kafka's ACLs and its authorizer's rules, as plain data and pure functions.
//!
//! An [`AclBinding`] allows or denies one principal, from one host, one operation on the
//! resources one pattern names (a LITERAL name, the literal `*` for every name, or a PREFIXED
//! prefix). [`Authorizer::authorize`] decides as Kafka's `StandardAuthorizer` does:
//!
//! 1. a super user (`--super-users`) may do anything;
//! 2. otherwise the bindings that apply are those whose pattern matches the resource, whose
//!    principal is the caller's or `User:*`, whose host is the caller's or `*`, and whose
//!    operation is the one asked, `ALL`, or (for ALLOW bindings only) one that implies it:
//!    READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS;
//! 3. any DENY that applies denies; else any ALLOW that applies allows;
//! 4. when no binding at all names a pattern matching the resource (whoever it is for),
//!    `allow_everyone_if_no_acl_found` decides (false by default); otherwise the answer is no.
//!
//! [`Authorization`] is what the coordinator hands brokers in heartbeat answers: whether the
//! authorizer is on, its super users and default, and every binding, under a version that
//! changes with each change. Nothing here touches a socket, a clock or a file.

use std::collections::HashMap;

use bytes::{BufMut, BytesMut};

use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// The name of the one Cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The principal of a client that did not authenticate (a PLAINTEXT or SSL listener).
pub const ANONYMOUS: &str = "User:ANONYMOUS";
/// The literal name (and principal `User:*`, host `*`) that matches every one.
pub const WILDCARD: &str = "*";
/// Longest resource name of a binding, in bytes (every binding goes to every broker).
pub const ACL_NAME_BYTES_MAX: usize = 512;
/// Longest principal or host of a binding, in bytes.
pub const ACL_PRINCIPAL_BYTES_MAX: usize = 256;
/// Most items (bindings to create, filters, users) one ACL or credential request may carry:
/// the work a request asks of a broker or the coordinator is bounded before any of it is done.
pub const REQUEST_ITEMS_MAX: usize = 1_000;

macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $( $(#[$vdoc:meta])* $variant:ident = $num:expr, $text:literal; )* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
        }

        impl $name {
            /// Every value, in code order.
            pub const ALL_VALUES: &'static [$name] = &[$( $name::$variant, )*];

            /// Kafka's code on the wire.
            pub fn code(self) -> i8 {
                match self { $( $name::$variant => $num, )* }
            }

            /// The value of a Kafka code, if it is one.
            pub fn from_code(code: i8) -> Option<$name> {
                match code { $( $num => Some($name::$variant), )* _ => None }
            }

            /// Kafka's upper-case name.
            pub fn name(self) -> &'static str {
                match self { $( $name::$variant => $text, )* }
            }

            /// The value of a name, in any case, `-` or `_` alike (`transactional-id`).
            pub fn parse(s: &str) -> Option<$name> {
                let wanted = s.trim().to_ascii_uppercase().replace('-', "_");
                Self::ALL_VALUES.iter().copied().find(|v| v.name() == wanted)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum! {
    /// What kind of thing a binding is about (Kafka's `ResourceType`).
    ResourceType {
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster (one resource, [`CLUSTER_NAME`]).
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token (kept for Kafka's tools; nothing here checks it).
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user (kept for Kafka's tools; nothing here checks it).
        User = 7, "USER";
    }
}

kafka_enum! {
    /// What a binding allows or denies (Kafka's `AclOperation`).
    Operation {
        /// Every operation.
        All = 2, "ALL";
        /// Read a topic, use a group.
        Read = 3, "READ";
        /// Write a topic, use a transactional id.
        Write = 4, "WRITE";
        /// Create topics.
        Create = 5, "CREATE";
        /// Delete topics or groups.
        Delete = 6, "DELETE";
        /// Change a topic, or the cluster (ACLs, elections).
        Alter = 7, "ALTER";
        /// See a resource exists.
        Describe = 8, "DESCRIBE";
        /// Brokers' own actions.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Read configs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Change configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Get an idempotent producer id.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
}

kafka_enum! {
    /// How a binding's name matches resources (Kafka's `PatternType`).
    PatternType {
        /// The name itself, or every name when it is `*`.
        Literal = 3, "LITERAL";
        /// Every name that starts with it.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// Whether a binding allows or denies.
    Permission {
        /// Denies, whatever else allows.
        Deny = 2, "DENY";
        /// Allows, unless something denies.
        Allow = 3, "ALLOW";
    }
}

/// Kafka's filter code for "any value" (resource type, operation, pattern, permission).
pub const FILTER_ANY: i8 = 1;
/// Kafka's pattern-type filter code MATCH: the bindings that would apply to the named resource.
pub const FILTER_MATCH: i8 = 2;

impl Operation {
    /// Whether an ALLOW binding for `self` allows `asked` (ALL allows everything; READ, WRITE,
    /// DELETE and ALTER allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS).
    pub fn allows(self, asked: Operation) -> bool {
        use Operation::*;
        self == asked
            || self == All
            || (asked == Describe && matches!(self, Read | Write | Delete | Alter))
            || (asked == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY binding for `self` denies `asked` (no implications: denying READ leaves
    /// DESCRIBE alone).
    pub fn denies(self, asked: Operation) -> bool {
        self == asked || self == Operation::All
    }
}

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// The name, or prefix, or `*`.
    pub name: String,
    /// How `name` matches.
    pub pattern: PatternType,
    /// `User:NAME`, or `User:*` for everyone.
    pub principal: String,
    /// The client's IP address, or `*` for any.
    pub host: String,
    /// What it is about.
    pub operation: Operation,
    /// Allow or deny.
    pub permission: Permission,
}

/// Why a binding cannot be created (Kafka answers INVALID_REQUEST with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl AclBinding {
    /// Whether this binding's pattern matches the resource `(resource_type, name)`.
    pub fn matches_resource(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
            }
    }

    /// Whether the binding is for `principal` at `host` (or for everyone, anywhere).
    pub fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == "User:*") && (self.host == host || self.host == WILDCARD)
    }

    /// Check what Kafka checks before creating a binding: a named resource (the cluster's is
    /// [`CLUSTER_NAME`]), a `Type:name` principal, a host.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        if self.name.is_empty() {
            return Err(InvalidAcl("the resource name is empty; name a resource, or `*` for every one".into()));
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Err(InvalidAcl(format!("the cluster resource is named `{CLUSTER_NAME}`, not `{}`", self.name)));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(InvalidAcl(format!(
                    "principal `{}` is not of the form Type:name (User:alice, or User:* for everyone)",
                    self.principal
                )))
            }
        }
        if self.host.is_empty() {
            return Err(InvalidAcl("the host is empty; give an IP address, or `*` for any".into()));
        }
        if self.name.len() > ACL_NAME_BYTES_MAX {
            return Err(InvalidAcl(format!(
                "the resource name is {} bytes; at most {ACL_NAME_BYTES_MAX}",
                self.name.len()
            )));
        }
        if self.principal.len() > ACL_PRINCIPAL_BYTES_MAX || self.host.len() > ACL_PRINCIPAL_BYTES_MAX {
            return Err(InvalidAcl(format!(
                "the principal and the host take at most {ACL_PRINCIPAL_BYTES_MAX} bytes each"
            )));
        }
        Ok(())
    }

    /// Encode on the own protocol and in journal entries.
    pub fn encode(&self, b: &mut BytesMut) {
        b.put_i8(self.resource_type.code());
        b.put_string(&self.name);
        b.put_i8(self.pattern.code());
        b.put_string(&self.principal);
        b.put_string(&self.host);
        b.put_i8(self.operation.code());
        b.put_i8(self.permission.code());
    }

    /// Decode what [`AclBinding::encode`] wrote.
    pub fn decode(r: &mut Reader) -> Result<AclBinding, DecodeError> {
        fn bad(field: &'static str, code: i8) -> DecodeError {
            DecodeError::InvalidValue { field, detail: format!("{code} is not a valid code") }
        }
        let t = r.i8("resource_type")?;
        let resource_type = ResourceType::from_code(t).ok_or_else(|| bad("resource_type", t))?;
        let name = r.string("resource_name")?;
        let p = r.i8("pattern_type")?;
        let pattern = PatternType::from_code(p).ok_or_else(|| bad("pattern_type", p))?;
        let principal = r.string("principal")?;
        let host = r.string("host")?;
        let o = r.i8("operation")?;
        let operation = Operation::from_code(o).ok_or_else(|| bad("operation", o))?;
        let m = r.i8("permission")?;
        let permission = Permission::from_code(m).ok_or_else(|| bad("permission", m))?;
        Ok(AclBinding { resource_type, name, pattern, principal, host, operation, permission })
    }

    /// The smallest encoding (for array length checks).
    pub const ENCODED_BYTES_MIN: usize = 4 + 3 * 2;
}

impl std::fmt::Display for AclBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} on {} {}:{} from host {}",
            self.permission, self.principal, self.operation, self.resource_type, self.pattern, self.name, self.host
        )
    }
}

/// Which bindings a DescribeAcls or DeleteAcls names: `None` is any value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclFilter {
    /// The kind of resource.
    pub resource_type: Option<ResourceType>,
    /// The name (exactly, or as MATCH says).
    pub name: Option<String>,
    /// The pattern: LITERAL or PREFIXED exactly, [`PatternFilter::Any`] or [`PatternFilter::Match`].
    pub pattern: PatternFilter,
    /// The principal.
    pub principal: Option<String>,
    /// The host.
    pub host: Option<String>,
    /// The operation.
    pub operation: Option<Operation>,
    /// The permission.
    pub permission: Option<Permission>,
}

/// A filter's pattern type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PatternFilter {
    /// Any pattern type, the name compared as it is.
    #[default]
    Any,
    /// The bindings that would apply to the resource the filter names: its literal name, the
    /// literal `*`, and every prefix of it.
    Match,
    /// This pattern type exactly.
    Exactly(PatternType),
}

impl PatternFilter {
    /// Kafka's code.
    pub fn code(self) -> i8 {
        match self {
            PatternFilter::Any => FILTER_ANY,
            PatternFilter::Match => FILTER_MATCH,
            PatternFilter::Exactly(p) => p.code(),
        }
    }

    /// The filter of a Kafka code.
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            FILTER_ANY => Some(PatternFilter::Any),
            FILTER_MATCH => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Exactly),
        }
    }
}

impl AclFilter {
    /// Whether `b` is one of the bindings this filter names.
    pub fn matches(&self, b: &AclBinding) -> bool {
        let resource = self.resource_type.is_none_or(|t| t == b.resource_type)
            && match (self.pattern, &self.name) {
                (PatternFilter::Match, Some(name)) => match b.pattern {
                    PatternType::Literal => b.name == *name || b.name == WILDCARD,
                    PatternType::Prefixed => name.starts_with(b.name.as_str()),
                },
                (PatternFilter::Exactly(p), name) => p == b.pattern && name.as_ref().is_none_or(|n| *n == b.name),
                (_, name) => name.as_ref().is_none_or(|n| *n == b.name),
            };
        resource
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }

    /// Encode on the own protocol.
    pub fn encode(&self, b: &mut BytesMut) {
        b.put_i8(self.resource_type.map_or(FILTER_ANY, |t| t.code()));
        b.put_nullable_string(self.name.as_deref());
        b.put_i8(self.pattern.code());
        b.put_nullable_string(self.principal.as_deref());
        b.put_nullable_string(self.host.as_deref());
        b.put_i8(self.operation.map_or(FILTER_ANY, |o| o.code()));
        b.put_i8(self.permission.map_or(FILTER_ANY, |p| p.code()));
    }

    /// Decode what [`AclFilter::encode`] wrote.
    pub fn decode(r: &mut Reader) -> Result<AclFilter, DecodeError> {
        fn any_or<T>(code: i8, field: &'static str, f: impl Fn(i8) -> Option<T>) -> Result<Option<T>, DecodeError> {
            if code == FILTER_ANY {
                return Ok(None);
            }
            f(code)
                .map(Some)
                .ok_or_else(|| DecodeError::InvalidValue { field, detail: format!("{code} is not a valid code") })
        }
        let resource_type = any_or(r.i8("resource_type")?, "resource_type", ResourceType::from_code)?;
        let name = r.nullable_string("resource_name")?;
        let p = r.i8("pattern_type")?;
        let pattern = PatternFilter::from_code(p).ok_or_else(|| DecodeError::InvalidValue {
            field: "pattern_type",
            detail: format!("{p} is not a valid code"),
        })?;
        let principal = r.nullable_string("principal")?;
        let host = r.nullable_string("host")?;
        let operation = any_or(r.i8("operation")?, "operation", Operation::from_code)?;
        let permission = any_or(r.i8("permission")?, "permission", Permission::from_code)?;
        Ok(AclFilter { resource_type, name, pattern, principal, host, operation, permission })
    }
}

/// The authorizer's settings and every binding, as the coordinator hands them to brokers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Authorization {
    /// Changes with every change to what follows (0: a broker that has heard nothing yet).
    pub version: i64,
    /// Whether the authorizer is on (`--authorizer`); when off, everyone may do anything.
    pub enabled: bool,
    /// Principals that may do anything (`--super-users`).
    pub super_users: Vec<String>,
    /// What a resource no binding names allows (`--allow-everyone-if-no-acl-found`).
    pub allow_everyone_if_no_acl_found: bool,
    /// Every binding.
    pub acls: Vec<AclBinding>,
}

impl Authorization {
    /// Encode on the own protocol.
    pub fn encode(&self, b: &mut BytesMut) {
        b.put_i64(self.version);
        b.put_bool(self.enabled);
        b.put_i32(self.super_users.len() as i32);
        for s in &self.super_users {
            b.put_string(s);
        }
        b.put_bool(self.allow_everyone_if_no_acl_found);
        b.put_i32(self.acls.len() as i32);
        for a in &self.acls {
            a.encode(b);
        }
    }

    /// Decode what [`Authorization::encode`] wrote.
    pub fn decode(r: &mut Reader) -> Result<Authorization, DecodeError> {
        let version = r.i64("authorization_version")?;
        let enabled = r.bool("enabled")?;
        let n = r.array_len("super_users", 2)?;
        let super_users = (0..n).map(|_| r.string("super_user")).collect::<Result<_, _>>()?;
        let allow_everyone_if_no_acl_found = r.bool("allow_everyone_if_no_acl_found")?;
        let n = r.array_len("acls", AclBinding::ENCODED_BYTES_MIN)?;
        let acls = (0..n).map(|_| AclBinding::decode(r)).collect::<Result<_, _>>()?;
        Ok(Authorization { version, enabled, super_users, allow_everyone_if_no_acl_found, acls })
    }
}

/// The bindings of one resource type, indexed: literal names (with `*`) and prefixes.
#[derive(Debug, Default)]
struct TypeIndex {
    literal: HashMap<String, Vec<usize>>,
    prefixed: Vec<usize>,
}

/// [`Authorization`] indexed for its questions (what a broker holds).
#[derive(Debug, Default)]
pub struct Authorizer {
    settings: Authorization,
    by_type: HashMap<ResourceType, TypeIndex>,
}

impl Authorizer {
    /// Index `settings`.
    pub fn new(settings: Authorization) -> Authorizer {
        let mut by_type: HashMap<ResourceType, TypeIndex> = HashMap::new();
        for (i, a) in settings.acls.iter().enumerate() {
            let index = by_type.entry(a.resource_type).or_default();
            match a.pattern {
                PatternType::Literal => index.literal.entry(a.name.clone()).or_default().push(i),
                PatternType::Prefixed => index.prefixed.push(i),
            }
        }
        Authorizer { settings, by_type }
    }

    /// What it was made from.
    pub fn settings(&self) -> &Authorization {
        &self.settings
    }

    /// Whether the authorizer is on.
    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Whether `principal` is a super user.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.settings.super_users.iter().any(|s| s == principal)
    }

    /// The bindings whose pattern matches `(resource_type, name)`.
    fn matching<'a>(&'a self, resource_type: ResourceType, name: &'a str) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let index = self.by_type.get(&resource_type);
        let literal = index.into_iter().flat_map(move |i| {
            let exact = i.literal.get(name).into_iter().flatten();
            let wildcard = (name != WILDCARD).then(|| i.literal.get(WILDCARD)).flatten().into_iter().flatten();
            exact.chain(wildcard)
        });
        let prefixed = index.into_iter().flat_map(|i| i.prefixed.iter());
        literal
            .chain(prefixed)
            .map(|&i| &self.settings.acls[i])
            .filter(move |a| a.matches_resource(resource_type, name))
    }

    /// Whether `principal`, connected from `host`, may do `operation` on the resource
    /// `(resource_type, name)` (the module's rules). Always yes when the authorizer is off.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.settings.enabled || self.is_super_user(principal) {
            return true;
        }
        let mut any = false;
        let mut allowed = false;
        for a in self.matching(resource_type, name) {
            any = true;
            if !a.applies_to(principal, host) {
                continue;
            }
            match a.permission {
                Permission::Deny if a.operation.denies(operation) => return false,
                Permission::Allow if a.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any && self.settings.allow_everyone_if_no_acl_found)
    }

    /// Whether `principal` may do `operation` on some resource of `resource_type` (Kafka's
    /// `authorizeByResourceType`, which InitProducerId without a transactional id asks for
    /// WRITE on any topic): as Kafka, first the resource named `hardcode` (so super users, a
    /// literal `*` and `allow_everyone_if_no_acl_found` allow as they would any name); then an
    /// ALLOW binding for the caller whose resources a DENY does not wholly cover (a DENY on the
    /// literal `*`, on the same literal name, or on a prefix of the name or prefix the ALLOW
    /// names).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.authorize(principal, host, operation, resource_type, "hardcode") {
            return true;
        }
        let Some(index) = self.by_type.get(&resource_type) else {
            return false;
        };
        let bindings = || {
            index
                .literal
                .values()
                .flatten()
                .chain(index.prefixed.iter())
                .map(|&i| &self.settings.acls[i])
                .filter(|a| a.applies_to(principal, host))
        };
        let denied = |allow: &AclBinding| {
            bindings().any(|d| {
                d.permission == Permission::Deny
                    && d.operation.denies(operation)
                    && match (d.pattern, allow.pattern) {
                        (PatternType::Literal, _) if d.name == WILDCARD => true,
                        (PatternType::Literal, PatternType::Literal) => d.name == allow.name,
                        (PatternType::Literal, PatternType::Prefixed) => false,
                        (PatternType::Prefixed, _) => allow.name.starts_with(d.name.as_str()),
                    }
            })
        };
        bindings().any(|a| a.permission == Permission::Allow && a.operation.allows(operation) && !denied(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn acl(
        t: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: t,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn authorizer(acls: Vec<AclBinding>) -> Authorizer {
        Authorizer::new(Authorization {
            version: 1,
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
            acls,
        })
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn literal_prefixed_and_wildcard_bindings_allow_and_deny_wins() {
        let a = authorizer(vec![
            acl(TransactionalId, "payments", Literal, "User:alice", Write, Allow),
            acl(Topic, "orders-", Prefixed, "User:alice", Write, Allow),
            acl(Topic, "orders-secret", Literal, "User:*", All, Deny),
            acl(Group, "*", Literal, "User:bob", Read, Allow),
        ]);
        assert!(a.authorize("User:alice", "10.0.0.1", Write, TransactionalId, "payments"));
        assert!(!a.authorize("User:mallory", "10.0.0.1", Write, TransactionalId, "payments"));
        assert!(!a.authorize("User:alice", "10.0.0.1", Write, TransactionalId, "payments2"), "literal is exact");
        assert!(a.authorize("User:alice", "h", Write, Topic, "orders-eu"));
        assert!(a.authorize("User:alice", "h", Describe, Topic, "orders-eu"), "WRITE implies DESCRIBE");
        assert!(!a.authorize("User:alice", "h", Read, Topic, "orders-eu"));
        assert!(!a.authorize("User:alice", "h", Write, Topic, "orders-secret"), "DENY wins over ALLOW");
        assert!(a.authorize("User:bob", "h", Read, Group, "any-group"), "the literal * names every group");
        assert!(a.authorize("User:admin", "h", Alter, Cluster, CLUSTER_NAME), "super users may do anything");
        // Nothing names this topic: the default (false) decides.
        assert!(!a.authorize("User:alice", "h", Write, Topic, "logs"));
    }

    #[test]
    fn deny_has_no_implications_and_allow_everyone_only_without_any_binding() {
        let mut s = authorizer(vec![
            acl(Topic, "t", Literal, "User:alice", Read, Deny),
            acl(Topic, "u", Literal, "User:bob", Read, Allow),
        ])
        .settings()
        .clone();
        s.allow_everyone_if_no_acl_found = true;
        let a = Authorizer::new(s);
        assert!(!a.authorize("User:alice", "h", Read, Topic, "t"));
        // DENY READ does not deny DESCRIBE; but a binding names `t`, so the default is out.
        assert!(!a.authorize("User:alice", "h", Describe, Topic, "t"));
        assert!(!a.authorize("User:carol", "h", Read, Topic, "u"), "u has a binding: no default for carol");
        assert!(a.authorize("User:carol", "h", Read, Topic, "v"), "v has none: allow everyone");
    }

    #[test]
    fn hosts_and_the_switch() {
        let mut one = acl(Topic, "t", Literal, "User:alice", Write, Allow);
        one.host = "10.0.0.1".into();
        let a = authorizer(vec![one]);
        assert!(a.authorize("User:alice", "10.0.0.1", Write, Topic, "t"));
        assert!(!a.authorize("User:alice", "10.0.0.2", Write, Topic, "t"));
        let off = Authorizer::new(Authorization::default());
        assert!(off.authorize("User:mallory", "h", Alter, Cluster, CLUSTER_NAME));
    }

    #[test]
    fn authorize_any_topic_as_kip_679_asks() {
        let a = authorizer(vec![acl(Topic, "logs", Literal, "User:alice", Write, Allow)]);
        assert!(a.authorize_any("User:alice", "h", Write, Topic));
        assert!(!a.authorize_any("User:bob", "h", Write, Topic));
        let denied = authorizer(vec![
            acl(Topic, "logs", Literal, "User:alice", Write, Allow),
            acl(Topic, "lo", Prefixed, "User:alice", Write, Deny),
        ]);
        assert!(!denied.authorize_any("User:alice", "h", Write, Topic));
        let partly = authorizer(vec![
            acl(Topic, "logs", Prefixed, "User:alice", Write, Allow),
            acl(Topic, "logs-secret", Literal, "User:alice", Write, Deny),
        ]);
        assert!(partly.authorize_any("User:alice", "h", Write, Topic), "the DENY covers one name of the prefix only");
        // allow.everyone.if.no.acl.found, with bindings of the type elsewhere: as for any name
        // no binding names.
        let mut s = authorizer(vec![acl(Topic, "logs", Literal, "User:bob", Write, Allow)]).settings().clone();
        s.allow_everyone_if_no_acl_found = true;
        assert!(Authorizer::new(s).authorize_any("User:alice", "h", Write, Topic));
        let wildcard_denied = authorizer(vec![
            acl(Topic, "logs", Literal, "User:alice", Write, Allow),
            acl(Topic, "*", Literal, "User:*", Write, Deny),
        ]);
        assert!(!wildcard_denied.authorize_any("User:alice", "h", Write, Topic));
    }

    #[test]
    fn filters_match_as_describe_and_delete_acls_do() {
        let lit = acl(Topic, "orders", Literal, "User:alice", Write, Allow);
        let star = acl(Topic, "*", Literal, "User:bob", Read, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:carol", Read, Deny);
        let other = acl(Group, "orders", Literal, "User:alice", Read, Allow);
        let all = [&lit, &star, &pre, &other];
        let names =
            |f: &AclFilter| all.iter().filter(|b| f.matches(b)).map(|b| b.principal.as_str()).collect::<Vec<_>>();
        let matching = AclFilter {
            resource_type: Some(Topic),
            name: Some("orders".into()),
            pattern: PatternFilter::Match,
            ..Default::default()
        };
        assert_eq!(names(&matching), ["User:alice", "User:bob", "User:carol"]);
        let exact = AclFilter { pattern: PatternFilter::Exactly(Literal), ..matching.clone() };
        assert_eq!(names(&exact), ["User:alice"]);
        let any = AclFilter::default();
        assert_eq!(names(&any).len(), 4);
        let denies = AclFilter { permission: Some(Deny), ..Default::default() };
        assert_eq!(names(&denies), ["User:carol"]);
    }

    #[test]
    fn validation_refuses_what_kafka_refuses() {
        let ok = acl(Cluster, CLUSTER_NAME, Literal, "User:alice", Alter, Allow);
        assert!(ok.validate().is_ok());
        assert!(AclBinding { name: "other".into(), ..ok.clone() }.validate().is_err());
        assert!(AclBinding { name: String::new(), resource_type: Topic, ..ok.clone() }.validate().is_err());
        assert!(AclBinding { principal: "alice".into(), ..ok.clone() }.validate().is_err());
        assert!(AclBinding { host: String::new(), ..ok }.validate().is_err());
    }

    #[test]
    fn bindings_filters_and_settings_round_trip() {
        let s = Authorization {
            version: 7,
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: true,
            acls: vec![acl(Topic, "t", Prefixed, "User:a", IdempotentWrite, Deny)],
        };
        let mut b = BytesMut::new();
        s.encode(&mut b);
        let f = AclFilter {
            resource_type: Some(Group),
            name: Some("g".into()),
            pattern: PatternFilter::Match,
            ..Default::default()
        };
        f.encode(&mut b);
        let mut r = Reader::new(b.freeze());
        assert_eq!(Authorization::decode(&mut r).unwrap(), s);
        assert_eq!(AclFilter::decode(&mut r).unwrap(), f);
        r.finish().unwrap();
        let mut bad = Reader::new(Bytes::from_static(&[9]));
        assert!(AclBinding::decode(&mut bad).is_err());
        assert_eq!(Operation::parse("idempotent-write"), Some(IdempotentWrite));
        assert_eq!(ResourceType::parse("transactional_id"), Some(TransactionalId));
    }

    /// Kafka's rule, stated as plainly as it can be: a scan of every binding.
    fn model(s: &Authorization, principal: &str, host: &str, op: Operation, t: ResourceType, name: &str) -> bool {
        if !s.enabled || s.super_users.iter().any(|u| u == principal) {
            return true;
        }
        let on_resource: Vec<&AclBinding> = s
            .acls
            .iter()
            .filter(|a| {
                a.resource_type == t
                    && match a.pattern {
                        Literal => a.name == name || a.name == "*",
                        Prefixed => name.starts_with(&a.name),
                    }
            })
            .collect();
        if on_resource.is_empty() {
            return s.allow_everyone_if_no_acl_found;
        }
        let mine = |a: &&&AclBinding| {
            (a.principal == principal || a.principal == "User:*") && (a.host == host || a.host == "*")
        };
        if on_resource.iter().filter(mine).any(|a| a.permission == Deny && (a.operation == op || a.operation == All)) {
            return false;
        }
        on_resource.iter().filter(mine).any(|a| a.permission == Allow && implies(a.operation, op))
    }

    /// Whether an ALLOW of `granted` allows `op` (Kafka's implications).
    fn implies(granted: Operation, op: Operation) -> bool {
        granted == op
            || granted == All
            || (op == Describe && [Read, Write, Delete, Alter].contains(&granted))
            || (op == DescribeConfigs && granted == AlterConfigs)
    }

    /// Kafka's `authorizeByResourceType` over the plain list: the resource `hardcode` as any
    /// other; else an ALLOW for the caller that no DENY for it wholly covers (a DENY of the
    /// literal `*`, of the same literal name, or of a prefix of the ALLOW's name or prefix).
    fn model_any(s: &Authorization, principal: &str, host: &str, op: Operation, t: ResourceType) -> bool {
        if model(s, principal, host, op, t, "hardcode") {
            return true;
        }
        let mine = |a: &&AclBinding| {
            a.resource_type == t
                && (a.principal == principal || a.principal == "User:*")
                && (a.host == host || a.host == "*")
        };
        let denies: Vec<&AclBinding> = s
            .acls
            .iter()
            .filter(mine)
            .filter(|a| a.permission == Deny && (a.operation == op || a.operation == All))
            .collect();
        s.acls.iter().filter(mine).filter(|a| a.permission == Allow && implies(a.operation, op)).any(|allow| {
            !denies.iter().any(|d| match (d.pattern, allow.pattern) {
                (Literal, _) if d.name == "*" => true,
                (Literal, Literal) => d.name == allow.name,
                (Literal, Prefixed) => false,
                (Prefixed, _) => allow.name.starts_with(&d.name),
            })
        })
    }

    proptest::proptest! {
        #[test]
        fn the_indexed_authorizer_decides_as_the_model(
            raw in proptest::collection::vec((0usize..3, 0usize..4, proptest::bool::ANY, 0usize..3, proptest::bool::ANY, 0usize..13, proptest::bool::ANY), 0..12),
            asks in proptest::collection::vec((0usize..3, proptest::bool::ANY, 0usize..13, 0usize..3, 0usize..5), 1..20),
            allow_default in proptest::bool::ANY,
            super_alice in proptest::bool::ANY,
        ) {
            let types = [Topic, Group, TransactionalId];
            let names = ["orders", "ord", "*", "payments"];
            let principals = ["User:alice", "User:bob", "User:*"];
            let acls = raw.iter().map(|&(t, n, prefixed, p, any_host, o, allow)| AclBinding {
                resource_type: types[t],
                name: names[n].into(),
                pattern: if prefixed { Prefixed } else { Literal },
                principal: principals[p].into(),
                host: if any_host { "*".into() } else { "10.0.0.1".into() },
                operation: Operation::ALL_VALUES[o],
                permission: if allow { Allow } else { Deny },
            }).collect();
            let s = Authorization {
                version: 1,
                enabled: true,
                super_users: if super_alice { vec!["User:alice".into()] } else { Vec::new() },
                allow_everyone_if_no_acl_found: allow_default,
                acls,
            };
            let a = Authorizer::new(s.clone());
            let asked_names = ["orders", "orders-eu", "payments", "ord", "x"];
            for (p, remote, o, t, n) in asks {
                let (principal, host) = (["User:alice", "User:bob", "User:carol"][p], if remote { "10.0.0.2" } else { "10.0.0.1" });
                let op = Operation::ALL_VALUES[o];
                let got = a.authorize(principal, host, op, types[t], asked_names[n]);
                proptest::prop_assert_eq!(got, model(&s, principal, host, op, types[t], asked_names[n]),
                    "{} from {} {} on {} {}", principal, host, op, types[t], asked_names[n]);
                let any = a.authorize_any(principal, host, op, types[t]);
                proptest::prop_assert_eq!(any, model_any(&s, principal, host, op, types[t]),
                    "{} from {} {} on any {}", principal, host, op, types[t]);
            }
        }
    }
}
