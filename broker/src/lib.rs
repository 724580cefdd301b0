//! The epochfence broker: partitions, their logs and their fencing state.
//!
//! - [`producer_state`]: the per-partition producer gate (rules, no I/O).
//! - [`leader`]: leader-epoch checks (rules, no I/O).
//! - [`log`]: the partition log's segments, their indexes, recovery scan and retention.
//! - [`log_dir`]: the data directory's id and whether its logs are intact after a restart.
//! - [`snapshot`]: producer-state snapshots, so that recovery replays only the log's tail.
//! - [`storage`]: the file system under logs and snapshots, and an in-memory one that loses
//!   unsynced writes (for the simulator and crash tests).
//! - [`replication`]: the leader's follower progress, ISR wishes and high watermark (rules, no I/O).
//! - [`partition`]: log + gate + leadership + replication state behind one lock: the one write path.
//! - [`txn_index`]: open and aborted transactions, the last stable offset (rules, no I/O).
//! - [`server`]: the tokio shell: requests, heartbeats, verification with the coordinator.

pub mod cli;
pub mod leader;
pub mod log;
pub mod log_dir;
pub mod metrics;
pub mod partition;
pub mod producer_state;
pub mod replication;
pub mod server;
pub mod snapshot;
pub mod storage;
pub mod txn_index;

pub use server::{run, BrokerConfig, BrokerError};
