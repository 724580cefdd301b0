//! Cluster metadata: brokers and their leases, topics, partitions, leaders and leader epochs.
//!
//! Plain synchronous rules; time is a millisecond count passed in by the caller. Leases are
//! bookkeeping (which brokers to place partitions on, what `describe` shows); no correctness
//! argument depends on them.

use std::collections::BTreeMap;

use protocol::{Assignment, BrokerInfo, BrokerState, ErrorCode, PartitionInfo, PartitionState, Status, TopicInfo};

use crate::entry::Entry;

/// Limits and defaults.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// How long a heartbeat keeps a broker alive, in milliseconds.
    pub broker_lease_ms: u64,
    /// Partitions of an auto-created topic.
    pub default_partitions: i32,
    /// Whether Metadata may create unknown topics.
    pub auto_create_topics: bool,
    /// Most partitions one topic may have.
    pub partitions_max: i32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            broker_lease_ms: 3_000,
            default_partitions: 1,
            auto_create_topics: true,
            partitions_max: 10_000,
        }
    }
}

#[derive(Debug, Clone)]
struct Broker {
    addr: String,
    lease_until_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Partition {
    leader_id: i32,
    leader_epoch: i32,
}

/// Brokers, topics and leaderships.
#[derive(Debug, Default)]
pub struct Cluster {
    config: ClusterConfig,
    brokers: BTreeMap<i32, Broker>,
    topics: BTreeMap<String, Vec<Partition>>,
    next_placement: usize,
}

impl Cluster {
    /// An empty cluster.
    pub fn new(config: ClusterConfig) -> Self {
        Cluster { config, ..Default::default() }
    }

    /// A broker heartbeat: registers or renews it, and returns the lease and its leaderships.
    pub fn handle_heartbeat(&mut self, now_ms: u64, broker_id: i32, addr: &str) -> (u64, Vec<Assignment>) {
        let lease_until_ms = now_ms + self.config.broker_lease_ms;
        self.brokers.insert(broker_id, Broker { addr: addr.to_string(), lease_until_ms });
        let leaderships = self
            .topics
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter().enumerate().filter(|(_, p)| p.leader_id == broker_id).map(move |(i, p)| Assignment {
                    topic: t.clone(),
                    partition: i as i32,
                    leader_epoch: p.leader_epoch,
                })
            })
            .collect();
        (self.config.broker_lease_ms, leaderships)
    }

    fn live_brokers(&self, now_ms: u64) -> Vec<i32> {
        self.brokers.iter().filter(|(_, b)| b.lease_until_ms > now_ms).map(|(id, _)| *id).collect()
    }

    /// Create a topic; returns the entry to persist before answering.
    pub fn handle_create_topic(&mut self, now_ms: u64, name: &str, partitions: i32) -> Result<Entry, Status> {
        if let Err(why) = protocol::names::validate_topic(name) {
            return Err(Status::new(ErrorCode::InvalidTopicException, why));
        }
        if partitions < 1 || partitions > self.config.partitions_max {
            return Err(Status::new(
                ErrorCode::InvalidPartitions,
                format!("{partitions} partitions asked for topic '{name}'; allowed 1..={}", self.config.partitions_max),
            ));
        }
        if self.topics.contains_key(name) {
            return Err(Status::new(ErrorCode::TopicAlreadyExists, format!("topic '{name}' already exists")));
        }
        let live = self.live_brokers(now_ms);
        if live.is_empty() {
            return Err(Status::new(
                ErrorCode::BrokerNotAvailable,
                format!("no live broker to place topic '{name}' on; start a broker and retry"),
            ));
        }
        let leaders =
            (0..partitions as usize).map(|i| live[(self.next_placement + i) % live.len()]).collect::<Vec<_>>();
        self.next_placement = self.next_placement.wrapping_add(partitions as usize);
        let entry = Entry::TopicCreated { name: name.to_string(), leaders };
        self.apply(&entry);
        Ok(entry)
    }

    /// Elect a partition's leader again under the next leader epoch. With one replica per
    /// partition the only candidate is the current leader, which must hold a live lease; the
    /// election still bumps the epoch, as every Kafka election does.
    pub fn handle_elect_leader(&mut self, now_ms: u64, topic: &str, partition: i32) -> Result<Entry, Status> {
        let Some((leader_id, leader_epoch, _)) = self.leader_of(topic, partition) else {
            return Err(Status::new(ErrorCode::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")));
        };
        if !self.live_brokers(now_ms).contains(&leader_id) {
            return Err(Status::new(
                ErrorCode::LeaderNotAvailable,
                format!("broker {leader_id}, the only replica of {topic}-{partition}, holds no live lease; start it and retry"),
            ));
        }
        let entry =
            Entry::LeaderChanged { topic: topic.to_string(), partition, leader_id, leader_epoch: leader_epoch + 1 };
        self.apply(&entry);
        Ok(entry)
    }

    /// Metadata for `topics` (all if empty); unknown ones are created when asked and allowed.
    /// Returns the response parts and the entries to persist before answering.
    pub fn handle_metadata(
        &mut self,
        now_ms: u64,
        topics: &[String],
        allow_auto_create: bool,
    ) -> (Vec<BrokerInfo>, Vec<TopicInfo>, Vec<Entry>) {
        let mut entries = Vec::new();
        let names: Vec<String> =
            if topics.is_empty() { self.topics.keys().cloned().collect() } else { topics.to_vec() };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let mut status = Status::ok();
            if !self.topics.contains_key(&name) {
                if allow_auto_create && self.config.auto_create_topics {
                    match self.handle_create_topic(now_ms, &name, self.config.default_partitions) {
                        Ok(e) => entries.push(e),
                        Err(s) => status = s,
                    }
                } else {
                    status = Status::new(ErrorCode::UnknownTopicOrPartition, format!("topic '{name}' does not exist"));
                }
            }
            let partitions = self
                .topics
                .get(&name)
                .map(|ps| {
                    ps.iter()
                        .enumerate()
                        .map(|(i, p)| PartitionInfo {
                            partition: i as i32,
                            leader_id: p.leader_id,
                            leader_epoch: p.leader_epoch,
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push(TopicInfo { name, status, partitions });
        }
        let brokers = self.brokers.iter().map(|(id, b)| BrokerInfo { id: *id, addr: b.addr.clone() }).collect();
        (brokers, out, entries)
    }

    /// Which broker leads a partition, at which leader epoch, and at which address.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Option<(i32, i32, Option<String>)> {
        let p = self.topics.get(topic)?.get(usize::try_from(partition).ok()?)?;
        Some((p.leader_id, p.leader_epoch, self.brokers.get(&p.leader_id).map(|b| b.addr.clone())))
    }

    /// Brokers and partitions for `admin describe`.
    pub fn describe(&self, now_ms: u64) -> (Vec<BrokerState>, Vec<PartitionState>) {
        let brokers = self
            .brokers
            .iter()
            .map(|(id, b)| BrokerState { id: *id, addr: b.addr.clone(), alive: b.lease_until_ms > now_ms })
            .collect();
        let partitions = self
            .topics
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter().enumerate().map(move |(i, p)| PartitionState {
                    topic: t.clone(),
                    partition: i as i32,
                    leader_id: p.leader_id,
                    leader_epoch: p.leader_epoch,
                })
            })
            .collect();
        (brokers, partitions)
    }

    /// Apply a journal entry (topics only; other entries belong to the producer table).
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::TopicCreated { name, leaders } => {
                self.topics.insert(
                    name.clone(),
                    leaders.iter().map(|l| Partition { leader_id: *l, leader_epoch: 0 }).collect(),
                );
            }
            Entry::LeaderChanged { topic, partition, leader_id, leader_epoch } => {
                if let Some(p) = self.topics.get_mut(topic).and_then(|ps| ps.get_mut(*partition as usize)) {
                    if *leader_epoch > p.leader_epoch {
                        *p = Partition { leader_id: *leader_id, leader_epoch: *leader_epoch };
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_need_a_live_broker_and_spread_over_brokers() {
        let mut c = Cluster::new(ClusterConfig::default());
        assert_eq!(c.handle_create_topic(0, "t", 2).unwrap_err().code, ErrorCode::BrokerNotAvailable);
        c.handle_heartbeat(0, 1, "a:1");
        c.handle_heartbeat(0, 2, "a:2");
        c.handle_create_topic(10, "t", 4).unwrap();
        let (_, leaders) = c.handle_heartbeat(20, 1, "a:1");
        assert_eq!(leaders.len(), 2);
        assert!(leaders.iter().all(|a| a.leader_epoch == 0));
        assert_eq!(c.handle_create_topic(10, "t", 1).unwrap_err().code, ErrorCode::TopicAlreadyExists);
        assert_eq!(c.handle_create_topic(10, "bad name", 1).unwrap_err().code, ErrorCode::InvalidTopicException);
        assert_eq!(c.handle_create_topic(10, "u", 0).unwrap_err().code, ErrorCode::InvalidPartitions);
    }

    #[test]
    fn expired_lease_is_not_used_for_placement() {
        let mut c = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..Default::default() });
        c.handle_heartbeat(0, 1, "a:1");
        c.handle_heartbeat(150, 2, "a:2");
        c.handle_create_topic(160, "t", 3).unwrap();
        assert!((0..3).all(|p| c.leader_of("t", p).unwrap().0 == 2));
        let (brokers, _) = c.describe(160);
        assert!(!brokers[0].alive && brokers[1].alive);
    }

    #[test]
    fn election_bumps_the_leader_epoch_and_needs_a_live_leader() {
        let mut c = Cluster::new(ClusterConfig { broker_lease_ms: 100, ..Default::default() });
        c.handle_heartbeat(0, 1, "a:1");
        c.handle_create_topic(0, "t", 1).unwrap();
        c.handle_elect_leader(10, "t", 0).unwrap();
        assert_eq!(c.leader_of("t", 0).unwrap().1, 1);
        c.handle_elect_leader(10, "t", 0).unwrap();
        assert_eq!(c.leader_of("t", 0).unwrap().1, 2);
        let (_, leaderships) = c.handle_heartbeat(20, 1, "a:1");
        assert_eq!(leaderships[0].leader_epoch, 2);
        assert_eq!(c.handle_elect_leader(500, "t", 0).unwrap_err().code, ErrorCode::LeaderNotAvailable);
        assert_eq!(c.handle_elect_leader(10, "t", 5).unwrap_err().code, ErrorCode::UnknownTopicOrPartition);
    }

    #[test]
    fn metadata_auto_creates_only_when_asked() {
        let mut c = Cluster::new(ClusterConfig::default());
        c.handle_heartbeat(0, 1, "a:1");
        let (_, topics, entries) = c.handle_metadata(0, &["x".into()], false);
        assert_eq!(topics[0].status.code, ErrorCode::UnknownTopicOrPartition);
        assert!(entries.is_empty());
        let (brokers, topics, entries) = c.handle_metadata(0, &["x".into()], true);
        assert!(topics[0].status.is_ok());
        assert_eq!(topics[0].partitions.len(), 1);
        assert_eq!(entries.len(), 1);
        assert_eq!(brokers.len(), 1);
    }
}
