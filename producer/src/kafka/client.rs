//! The cluster as a Kafka client sees it: bootstrap brokers, Metadata (brokers, partition
//! leaders and leader epochs), connections by broker, and the transaction coordinator.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, FindCoordinatorRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{KafkaConnection, KafkaError};
use crate::client::ClientConfig;
use crate::error::ClientError;

/// Metadata versions this client speaks.
const METADATA_VERSIONS: (i16, i16) = (1, 12);
/// FindCoordinator versions (from 1: the key type; not 4's batched keys).
const FIND_COORDINATOR_VERSIONS: (i16, i16) = (1, 3);
/// CreateTopics versions (from 2, as Kafka 4 serves it).
const CREATE_TOPICS_VERSIONS: (i16, i16) = (2, 7);
/// Kafka's TOPIC_ALREADY_EXISTS.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;

/// A partition's leader as Metadata last gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    /// Broker id (-1: none now).
    pub leader_id: i32,
    /// Leader epoch (-1 if the broker did not say).
    pub leader_epoch: i32,
}

/// Connections and cached metadata.
pub struct KafkaClient {
    bootstrap: Vec<String>,
    config: ClientConfig,
    connections: HashMap<String, KafkaConnection>,
    brokers: HashMap<i32, String>,
    /// The broker Metadata named as controller (where CreateTopics goes), if any.
    controller: Option<i32>,
    topics: HashMap<String, Vec<PartitionLeader>>,
    /// Topic ids Metadata gave (v10 and later), by name.
    topic_ids: HashMap<String, u128>,
    /// Transactional id -> its coordinator's address.
    /// Coordinator addresses by `"{key type}/{key}"`.
    coordinators: HashMap<String, String>,
}

impl KafkaClient {
    /// A client bootstrapping from `bootstrap`: one or more brokers' Kafka addresses, comma
    /// separated.
    pub fn new(bootstrap: &str, config: ClientConfig) -> KafkaClient {
        KafkaClient {
            bootstrap: bootstrap.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            config,
            connections: HashMap::new(),
            brokers: HashMap::new(),
            controller: None,
            topics: HashMap::new(),
            topic_ids: HashMap::new(),
            coordinators: HashMap::new(),
        }
    }

    /// Connection settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// A connection to `addr` (reused while open and its login's session is not near its end).
    pub async fn connection(&mut self, addr: &str) -> Result<KafkaConnection, KafkaError> {
        if let Some(c) = self.connections.get(addr).filter(|c| !c.is_closed() && !c.renewing()) {
            return Ok(c.clone());
        }
        let c = KafkaConnection::connect(addr, self.config.tls.as_ref(), self.timeout()).await?;
        if let Some(login) = &self.config.sasl {
            c.authenticate(login, self.timeout()).await?;
        }
        self.connections.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// A connection to any broker: a known one, else a bootstrap address (the first that
    /// answers).
    pub async fn any(&mut self) -> Result<KafkaConnection, KafkaError> {
        if let Some(c) = self.connections.values().find(|c| !c.is_closed() && !c.renewing()) {
            return Ok(c.clone());
        }
        let mut addrs: Vec<String> = self.brokers.values().cloned().collect();
        addrs.extend(self.bootstrap.iter().cloned());
        let mut last = KafkaError::Connect { addr: String::new(), detail: "no bootstrap address".into() };
        for addr in addrs {
            match self.connection(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Forget a broken connection, so the next call dials again.
    pub fn forget(&mut self, addr: &str) {
        self.connections.remove(addr);
    }

    /// Forget what is known of `topic`'s leaders (after a leadership error).
    pub fn invalidate(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// Ask Metadata for `topics` (creating them if the broker auto-creates).
    pub async fn refresh_metadata(&mut self, topics: &[&str], allow_auto_create: bool) -> Result<(), ClientError> {
        let conn = self.any().await?;
        let version = conn.version(ApiKey::Metadata, METADATA_VERSIONS)?;
        let req = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(allow_auto_create);
        let resp = match conn.call(&req, version).await {
            Ok(r) => r,
            Err(e) => {
                self.forget(conn.addr());
                return Err(e.into());
            }
        };
        for b in &resp.brokers {
            self.brokers.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        self.controller = Some(resp.controller_id.0).filter(|id| *id >= 0);
        for t in resp.topics {
            let Some(name) = t.name.map(|n| n.to_string()) else { continue };
            if t.error_code != 0 {
                self.topics.remove(&name);
                let code = protocol::ErrorCode::from_code(t.error_code);
                if !code.is_retriable() {
                    return Err(ClientError::Refused {
                        what: format!("metadata of '{name}'"),
                        status: protocol::Status::new(code, format!("error {}", t.error_code)),
                    });
                }
                continue;
            }
            if !t.topic_id.is_nil() {
                self.topic_ids.insert(name.clone(), t.topic_id.as_u128());
            }
            let mut partitions = t.partitions;
            partitions.sort_by_key(|p| p.partition_index);
            let leaders = partitions
                .iter()
                .map(|p| PartitionLeader {
                    leader_id: if p.error_code == 0 { p.leader_id.0 } else { -1 },
                    leader_epoch: p.leader_epoch,
                })
                .collect();
            self.topics.insert(name, leaders);
        }
        Ok(())
    }

    /// How many partitions `topic` has (asking Metadata, and retrying while it is being
    /// created, until the request timeout).
    pub async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        let deadline = tokio::time::Instant::now() + self.timeout();
        let mut attempt = 0;
        loop {
            if let Some(p) = self.topics.get(topic).filter(|p| !p.is_empty()) {
                return Ok(p.len());
            }
            let last = match self.refresh_metadata(&[topic], true).await {
                Ok(()) if self.topics.get(topic).is_some_and(|p| !p.is_empty()) => continue,
                Ok(()) => format!("topic '{topic}' has no partitions yet"),
                Err(e @ ClientError::Refused { .. }) => return Err(e),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Timeout {
                    what: format!("metadata of '{topic}'"),
                    timeout_ms: self.config.request_timeout_ms,
                    last_error: last,
                });
            }
            tokio::time::sleep(self.backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// The id Metadata last gave `topic` (none before Metadata v10, or if it was not asked).
    pub fn topic_id(&self, topic: &str) -> Option<u128> {
        self.topic_ids.get(topic).copied()
    }

    /// The topic Metadata last gave id `id`.
    pub fn topic_named(&self, id: u128) -> Option<&str> {
        self.topic_ids.iter().find(|(_, v)| **v == id).map(|(k, _)| k.as_str())
    }

    /// How many partitions Metadata last gave `topic` (none if it did not list the topic).
    pub fn known_partitions(&self, topic: &str) -> Option<usize> {
        self.topics.get(topic).map(Vec::len)
    }

    /// The brokers Metadata last named, by id.
    pub fn brokers(&self) -> &HashMap<i32, String> {
        &self.brokers
    }

    /// Create `topic` with CreateTopics at the controller Metadata names (any broker if it
    /// names none). A topic that exists already is refused with [`TOPIC_ALREADY_EXISTS`]; the
    /// topic may have no leaders yet when this returns.
    pub async fn create_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), ClientError> {
        self.refresh_metadata(&[], false).await?;
        let conn = match self.controller.and_then(|id| self.brokers.get(&id).cloned()) {
            Some(addr) => self.connection(&addr).await?,
            None => self.any().await?,
        };
        let version = conn.version(ApiKey::CreateTopics, CREATE_TOPICS_VERSIONS)?;
        let timeout_ms = i32::try_from(self.config.request_timeout_ms).unwrap_or(i32::MAX);
        let req =
            CreateTopicsRequest::default().with_timeout_ms(timeout_ms).with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(replication_factor)]);
        let resp = conn.call(&req, version).await?;
        match resp.topics.first() {
            Some(t) if t.error_code == 0 => Ok(()),
            Some(t) => Err(KafkaError::Refused {
                what: format!("CreateTopics '{topic}'"),
                code: t.error_code,
                message: t.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default(),
            }
            .into()),
            None => Err(ClientError::Protocol(format!("CreateTopics '{topic}': an answer without the topic"))),
        }
    }

    /// The leader of `topic-partition` and a connection to it (asking Metadata if unknown).
    pub async fn leader(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<(KafkaConnection, PartitionLeader), ClientError> {
        let known = self.topics.get(topic).and_then(|p| p.get(usize::try_from(partition).ok()?)).copied();
        let leader = match known.filter(|l| l.leader_id >= 0) {
            Some(l) => l,
            None => {
                self.refresh_metadata(&[topic], true).await?;
                self.topics
                    .get(topic)
                    .and_then(|p| p.get(usize::try_from(partition).ok()?))
                    .copied()
                    .filter(|l| l.leader_id >= 0)
                    .ok_or_else(|| ClientError::Protocol(format!("{topic}-{partition} has no leader now")))?
            }
        };
        let addr = self
            .brokers
            .get(&leader.leader_id)
            .cloned()
            .ok_or_else(|| ClientError::Protocol(format!("no address for broker {}", leader.leader_id)))?;
        match self.connection(&addr).await {
            Ok(c) => Ok((c, leader)),
            Err(e) => {
                self.invalidate(topic);
                Err(e.into())
            }
        }
    }

    /// The transaction coordinator of `transactional_id` (FindCoordinator, key type 1).
    pub async fn transaction_coordinator(&mut self, transactional_id: &str) -> Result<KafkaConnection, ClientError> {
        self.coordinator(1, transactional_id).await
    }

    /// The group coordinator of `group` (FindCoordinator, key type 0).
    pub async fn group_coordinator(&mut self, group: &str) -> Result<KafkaConnection, ClientError> {
        self.coordinator(0, group).await
    }

    async fn coordinator(&mut self, key_type: i8, key: &str) -> Result<KafkaConnection, ClientError> {
        let cached = format!("{key_type}/{key}");
        if let Some(addr) = self.coordinators.get(&cached).cloned() {
            if let Ok(c) = self.connection(&addr).await {
                return Ok(c);
            }
            self.coordinators.remove(&cached);
        }
        let conn = self.any().await?;
        let version = conn.version(ApiKey::FindCoordinator, FIND_COORDINATOR_VERSIONS)?;
        let req =
            FindCoordinatorRequest::default().with_key(StrBytes::from_string(key.to_string())).with_key_type(key_type);
        let resp = conn.call(&req, version).await?;
        if resp.error_code != 0 {
            return Err(KafkaError::Refused {
                what: format!("FindCoordinator for '{key}'"),
                code: resp.error_code,
                message: resp.error_message.map(|m| m.to_string()).unwrap_or_default(),
            }
            .into());
        }
        let addr = format!("{}:{}", resp.host.as_str(), resp.port);
        self.coordinators.insert(cached, addr.clone());
        Ok(self.connection(&addr).await?)
    }

    /// Forget the coordinator of `transactional_id` (after NOT_COORDINATOR or a broken
    /// connection).
    pub fn forget_coordinator(&mut self, transactional_id: &str) {
        self.forget_cached_coordinator(&format!("1/{transactional_id}"));
    }

    /// Forget the coordinator of `group`.
    pub fn forget_group_coordinator(&mut self, group: &str) {
        self.forget_cached_coordinator(&format!("0/{group}"));
    }

    fn forget_cached_coordinator(&mut self, cached: &str) {
        if let Some(addr) = self.coordinators.remove(cached) {
            self.forget(&addr);
        }
    }

    /// The pause before retry `attempt` (doubling from `retry_backoff_ms`).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ms = self.config.retry_backoff_ms.saturating_mul(1 << attempt.min(16));
        Duration::from_millis(ms.min(self.config.retry_backoff_max_ms))
    }
}
