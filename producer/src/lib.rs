//! The epochfence client library: [`Producer`], [`Consumer`] and [`Admin`], over a shared
//! [`Client`] that holds the coordinator connection, broker connections and cached metadata.
//!
//! `--bootstrap` is always the coordinator's address; partition leaders are found through its
//! Metadata answer. [`kafka`] is the same over the Kafka protocol, for any Kafka-compatible
//! broker (epochfence's Kafka listener among them), bootstrapping from brokers' addresses.

pub mod admin;
pub mod client;
pub mod consumer;
pub mod error;
pub mod kafka;
pub mod producer;
mod session;

pub use admin::Admin;
pub use client::{Client, ClientConfig, SaslArgs, SaslLogin};
pub use consumer::Consumer;
pub use error::ClientError;
pub use producer::{Producer, ProducerConfig, RecordMetadata};
