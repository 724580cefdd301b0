//! The epochfence transaction coordinator and cluster metadata.
//!
//! - [`table`]: producer ids, epochs, partition registrations and fences (rules, no I/O).
//! - [`cluster`]: brokers, leases, topics and leaders (rules, no I/O).
//! - [`entry`]: the journal records both of them are rebuilt from.
//! - [`journal`]: the durable, group-committed journal.
//! - [`server`]: the tokio shell that wires them to the network.

pub mod cluster;
pub mod entry;
pub mod journal;
pub mod server;
pub mod table;

pub use server::{recover, run, CoordinatorConfig, CoordinatorError, Recovered};
