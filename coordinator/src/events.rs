//! The coordinator's decisions as events, read off the journal entries they queue, so that every
//! decision is told once, in journal order, whichever request or timer made it. Grants and
//! refusals are told where they are answered (`server`, target `epochfence::fencing`), with what
//! only the answer knows.
//!
//! These use the target `epochfence::decisions`: the rare ones (elections, ISR changes, brokers
//! registered, topics, ACL changes, idle ids fenced) at info, the ones as frequent as transactions
//! (transaction ends, group generations) at debug, so a busy coordinator's stderr stays quiet
//! (`RUST_LOG=epochfence::decisions=debug` shows them); the events file takes them all.

use crate::entry::{Entry, FenceTarget};

fn ints(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn partitions(markers: &[FenceTarget]) -> String {
    markers.iter().map(|m| format!("{}-{}", m.topic, m.partition)).collect::<Vec<_>>().join(",")
}

/// Tell the decisions in `entries` (queued for the journal).
pub fn record(entries: &[Entry]) {
    for e in entries {
        match e {
            Entry::EndTxn { transactional_id, producer_id, epoch, prev, expired: true, markers, .. } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    transactional_id = transactional_id.as_str(),
                    producer_id = prev.0,
                    producer_epoch = prev.1,
                    next_producer_id = *producer_id,
                    epoch = *epoch,
                    markers = markers.len() as u64,
                    partitions = partitions(markers),
                    "idle transactional id fenced"
                );
            }
            Entry::EndTxn { transactional_id, producer_id, epoch, prev, commit, timed_out, markers, .. } => {
                tracing::debug!(
                    target: "epochfence::decisions",
                    transactional_id = transactional_id.as_str(),
                    producer_id = prev.0,
                    producer_epoch = prev.1,
                    next_producer_id = *producer_id,
                    epoch = *epoch,
                    commit = *commit,
                    timed_out = *timed_out,
                    markers = markers.len() as u64,
                    partitions = partitions(markers),
                    "transaction ended"
                );
            }
            Entry::LeaderChanged { topic, partition, leader_id, leader_epoch, isr, .. } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    topic = topic.as_str(),
                    partition = *partition,
                    leader = *leader_id,
                    leader_epoch = *leader_epoch,
                    isr = ints(isr),
                    "leader elected"
                );
            }
            Entry::ReplicasChanged {
                topic,
                partition,
                replicas,
                adding,
                removing,
                leader_id,
                leader_epoch,
                isr,
                ..
            } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    topic = topic.as_str(),
                    partition = *partition,
                    replicas = ints(replicas),
                    adding = ints(adding),
                    removing = ints(removing),
                    leader = *leader_id,
                    leader_epoch = *leader_epoch,
                    isr = ints(isr),
                    "replicas changed"
                );
            }
            Entry::UncleanLeader { topic, partition, leader_epoch } => {
                tracing::warn!(
                    target: "epochfence::decisions",
                    topic = topic.as_str(),
                    partition = *partition,
                    leader_epoch = *leader_epoch,
                    "unclean election"
                );
            }
            Entry::IsrChanged { topic, partition, leader_epoch, isr, .. } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    topic = topic.as_str(),
                    partition = *partition,
                    leader_epoch = *leader_epoch,
                    isr = ints(isr),
                    "isr changed"
                );
            }
            Entry::BrokerIncarnation { broker_id, broker_epoch, .. } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    broker_id = *broker_id,
                    broker_epoch = *broker_epoch,
                    "broker registered"
                );
            }
            Entry::TopicCreated { name, replicas, .. } => {
                tracing::info!(
                    target: "epochfence::decisions",
                    topic = name.as_str(),
                    partitions = replicas.len() as u64,
                    replicas = replicas.first().map_or(0, Vec::len) as u64,
                    // Each partition's first leader, partition 0 first.
                    leaders = replicas.iter().map(|r| r.first().copied().unwrap_or(-1).to_string()).collect::<Vec<_>>().join(","),
                    "topic created"
                );
            }
            Entry::TopicDeleted { name, .. } => {
                tracing::info!(target: "epochfence::decisions", topic = name.as_str(), "topic deleted");
            }
            Entry::Acls { created, deleted } => {
                let list =
                    |v: &[protocol::acl::AclBinding]| v.iter().map(|b| b.to_string()).collect::<Vec<_>>().join("; ");
                tracing::info!(
                    target: "epochfence::decisions",
                    created = list(created),
                    deleted = list(deleted),
                    "acls changed"
                );
            }
            Entry::GroupGeneration(g) => {
                for m in &g.members {
                    tracing::debug!(
                        target: "epochfence::decisions",
                        group = g.group.as_str(),
                        generation = g.generation,
                        stable = g.stable,
                        member_id = m.member_id.as_str(),
                        instance_id = m.instance_id.as_deref().unwrap_or(""),
                        client_id = m.client_id.as_str(),
                        client_host = m.client_host.as_str(),
                        leader = m.member_id == g.leader,
                        members = g.members.len() as u64,
                        "group generation"
                    );
                }
                if g.members.is_empty() {
                    tracing::debug!(
                        target: "epochfence::decisions",
                        group = g.group.as_str(),
                        generation = g.generation,
                        stable = g.stable,
                        members = 0u64,
                        "group generation"
                    );
                }
            }
            _ => {}
        }
    }
}
