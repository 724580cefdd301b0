//! The epochfence transaction coordinator and cluster metadata.
//!
//! - [`acls`]: the ACLs of `--authorizer` (rules, no I/O).
//! - [`credentials`]: the SCRAM credentials of SASL logins (rules, no I/O).
//! - [`table`]: producer ids, epochs, partition registrations and fences (rules, no I/O).
//! - [`cluster`]: brokers, leases, topics and leaders (rules, no I/O).
//! - [`groups`]: consumer groups, generations and committed offsets (rules, no I/O).
//! - [`entry`]: the journal records both of them are rebuilt from.
//! - [`journal`]: the durable, group-committed journal, on local files or on a [`kv_journal`].
//! - [`kv_journal`]: the journal in a guarded key-value store (etcd, or in memory).
//! - `etcd` (feature `etcd`): coordinator replicas on etcd, one active.
//! - [`metrics`]: the Prometheus metrics (`--metrics-listen`).
//! - [`server`]: the tokio shell that wires them to the network.

pub mod acls;
pub mod cli;
pub mod cluster;
pub mod consumer_group;
pub mod credentials;
pub mod entry;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod events;
pub mod groups;
pub mod journal;
pub mod kv_journal;
pub mod metrics;
pub mod server;
pub mod table;

pub use server::{recover, run, run_with_metrics, CoordinatorConfig, CoordinatorError, Recovered};
