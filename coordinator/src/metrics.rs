//! The coordinator's Prometheus metrics, in a registry of its own (`epochfence_coordinator_*`).
//! The counters are read off the journal entries the coordinator's decisions queue
//! ([`CoordinatorMetrics::count`]): every grant, bump, fence, transaction end, election and
//! ISR change is one, so one place counts them all; so are a group's rebalances and offset
//! commits. Refused offset commits, which write nothing, are counted where they are refused
//! ([`CoordinatorMetrics::offset_commit_refused`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::entry::Entry;

/// A coordinator's metrics.
pub struct CoordinatorMetrics {
    registry: Registry,
    grants: Counter,
    epoch_bumps: Counter,
    fences_written: Counter,
    committed: Counter,
    aborted: Counter,
    timed_out: Counter,
    elections: Counter,
    isr_changes: Counter,
    live_brokers: Gauge,
    rebalances: Counter,
    offset_commits: Counter,
    txn_offset_commits: Counter,
    offset_commits_refused: Family<ReasonLabels, Counter>,
    held: Family<KindLabels, Gauge>,
    held_max: Family<KindLabels, Gauge>,
    txn_ids_expired: Counter,
    groups_expired: Counter,
    groups_deleted: Counter,
}

/// The `kind` label of `epochfence_coordinator_state_held` and `_state_held_max`:
/// `transactional_ids`, `groups`, `group_offsets` (the fullest group's), `offsets` (all groups').
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The `reason` label of `epochfence_coordinator_group_offset_commits_refused_total`: `generation`
/// (ILLEGAL_GENERATION), `member` (UNKNOWN_MEMBER_ID), `instance` (FENCED_INSTANCE_ID), `other`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

impl std::fmt::Debug for CoordinatorMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorMetrics").finish_non_exhaustive()
    }
}

impl CoordinatorMetrics {
    /// Fresh metrics; `journal_latency` is the journal's own append histogram.
    pub fn new(journal_latency: Histogram) -> CoordinatorMetrics {
        let mut registry = Registry::with_prefix("epochfence_coordinator");
        let m = CoordinatorMetrics {
            registry: Registry::default(),
            grants: Counter::default(),
            epoch_bumps: Counter::default(),
            fences_written: Counter::default(),
            committed: Counter::default(),
            aborted: Counter::default(),
            timed_out: Counter::default(),
            elections: Counter::default(),
            isr_changes: Counter::default(),
            live_brokers: Gauge::default(),
            rebalances: Counter::default(),
            offset_commits: Counter::default(),
            txn_offset_commits: Counter::default(),
            offset_commits_refused: Family::default(),
            held: Family::default(),
            held_max: Family::default(),
            txn_ids_expired: Counter::default(),
            groups_expired: Counter::default(),
            groups_deleted: Counter::default(),
        };
        registry.register(
            "init_producer_id_grants",
            "Producer ids and epochs granted (InitProducerId)",
            m.grants.clone(),
        );
        registry.register(
            "epoch_bumps",
            "Epochs of a transactional id moved up (an init fencing an earlier instance, a bumping EndTxn, a timeout)",
            m.epoch_bumps.clone(),
        );
        registry.register(
            "fences_written",
            "Fence markers (one per partition) a grant or a transaction timeout wrote at a bumped epoch",
            m.fences_written.clone(),
        );
        registry.register("transactions_committed", "Transactions committed", m.committed.clone());
        registry.register("transactions_aborted", "Transactions aborted (timed-out ones included)", m.aborted.clone());
        registry.register(
            "transactions_timed_out",
            "Transactions aborted because they outlived their timeout",
            m.timed_out.clone(),
        );
        registry.register("elections", "Partition leaderships changed under a new leader epoch", m.elections.clone());
        registry.register("isr_changes", "ISR changes", m.isr_changes.clone());
        registry.register("live_brokers", "Brokers whose lease holds", m.live_brokers.clone());
        registry.register("group_rebalances", "Consumer-group generations formed", m.rebalances.clone());
        registry.register("group_offset_commits", "Offset commits (OffsetCommit) journaled", m.offset_commits.clone());
        registry.register(
            "group_txn_offset_commits",
            "Transactional offset commits (TxnOffsetCommit) staged",
            m.txn_offset_commits.clone(),
        );
        registry.register(
            "group_offset_commits_refused",
            "Offset commits refused for a stale generation, an unknown member or a replaced static instance \
             (KIP-447: a zombie worker's), or another reason",
            m.offset_commits_refused.clone(),
        );
        registry.register(
            "state_held",
            "State the coordinator holds, by kind: transactional ids, groups, the committed offsets of the fullest \
             group, and of all groups",
            m.held.clone(),
        );
        registry.register(
            "state_held_max",
            "The cap of each kind of state_held (--transactional-ids-max, --groups-max, --group-offsets-max, --offsets-max)",
            m.held_max.clone(),
        );
        registry.register(
            "transactional_ids_expired",
            "Transactional ids forgotten after --transactional-id-expiration-ms idle",
            m.txn_ids_expired.clone(),
        );
        registry.register(
            "groups_expired",
            "Groups without members forgotten with their offsets after --offsets-retention-minutes without a commit",
            m.groups_expired.clone(),
        );
        registry.register(
            "groups_deleted",
            "Groups an admin deleted with their offsets (DeleteGroups)",
            m.groups_deleted.clone(),
        );
        registry.register_with_unit(
            "journal_append_latency",
            "Journal appends, from queueing to on disk",
            Unit::Seconds,
            journal_latency,
        );
        CoordinatorMetrics { registry, ..m }
    }

    /// Count the decisions in `entries` (queued for the journal).
    pub fn count(&self, entries: &[Entry]) {
        for e in entries {
            match e {
                Entry::Grant { transactional_id, epoch, fence, .. } => {
                    self.grants.inc();
                    if transactional_id.is_some() && *epoch > 0 {
                        self.epoch_bumps.inc();
                    }
                    self.fences_written.inc_by(fence.len() as u64);
                }
                Entry::EndTxn { epoch, prev, expired: true, markers, .. } => {
                    // No transaction ended: an idle id's epoch was fenced before it is forgotten.
                    self.fences_written.inc_by(markers.len() as u64);
                    if *epoch != prev.1 {
                        self.epoch_bumps.inc();
                    }
                }
                Entry::EndTxn { epoch, prev, commit, timed_out, markers, .. } => {
                    if *commit {
                        self.committed.inc();
                    } else {
                        self.aborted.inc();
                    }
                    if *timed_out {
                        self.timed_out.inc();
                        self.fences_written.inc_by(markers.len() as u64);
                    }
                    if *epoch != prev.1 {
                        self.epoch_bumps.inc();
                    }
                }
                Entry::LeaderChanged { .. } | Entry::ReplicasChanged { .. } => {
                    self.elections.inc();
                }
                Entry::IsrChanged { .. } => {
                    self.isr_changes.inc();
                }
                Entry::GroupGeneration(g) if !g.stable => {
                    self.rebalances.inc();
                }
                Entry::OffsetsCommitted { .. } => {
                    self.offset_commits.inc();
                }
                Entry::TxnOffsetsStaged { .. } => {
                    self.txn_offset_commits.inc();
                }
                Entry::TxnIdsExpired { transactional_ids } => {
                    self.txn_ids_expired.inc_by(transactional_ids.len() as u64);
                }
                Entry::GroupsExpired { groups } => {
                    self.groups_expired.inc_by(groups.len() as u64);
                }
                Entry::GroupsDeleted { groups } => {
                    self.groups_deleted.inc_by(groups.len() as u64);
                }
                _ => {}
            }
        }
    }

    /// Count an offset commit refused with `code`.
    pub fn offset_commit_refused(&self, code: protocol::ErrorCode) {
        use protocol::ErrorCode as E;
        let reason = match code {
            E::IllegalGeneration => "generation",
            E::UnknownMemberId => "member",
            E::FencedInstanceId => "instance",
            _ => "other",
        };
        self.offset_commits_refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Set the live-broker gauge.
    pub fn set_live_brokers(&self, n: usize) {
        self.live_brokers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Set the held-state gauges: (kind, count, cap) each.
    pub fn set_held(&self, held: &[(&'static str, usize, usize)]) {
        for (kind, count, max) in held {
            let labels = KindLabels { kind };
            self.held.get_or_create(&labels).set(i64::try_from(*count).unwrap_or(i64::MAX));
            self.held_max.get_or_create(&labels).set(i64::try_from(*max).unwrap_or(i64::MAX));
        }
    }

    /// The registry as Prometheus (OpenMetrics) text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::FenceTarget;

    fn target(partition: i32) -> FenceTarget {
        FenceTarget { producer_id: 7, marker_epoch: 1, marker_sequence: 0, topic: "t".into(), partition, topic_id: 2 }
    }

    #[test]
    fn decisions_are_counted_off_their_entries() {
        let m = CoordinatorMetrics::new(Histogram::new([0.1]));
        let grant = |epoch, fence| Entry::Grant {
            transactional_id: Some("z".into()),
            producer_id: 7,
            epoch,
            requested_by: None,
            transaction_timeout_ms: 60_000,
            fence,
        };
        let end = |commit, timed_out, epoch| Entry::EndTxn {
            transactional_id: "z".into(),
            producer_id: 7,
            epoch,
            prev: (7, 1),
            commit,
            timed_out,
            expired: false,
            markers: vec![target(0)],
        };
        m.count(&[grant(0, vec![]), grant(1, vec![target(0), target(1)])]);
        m.count(&[end(true, false, 1), end(false, true, 2)]);
        let text = m.encode();
        for (sample, want) in [
            ("epochfence_coordinator_init_producer_id_grants_total", 2),
            // The second grant and the timeout's abort bump; the first grant and a TV1 commit do not.
            ("epochfence_coordinator_epoch_bumps_total", 2),
            ("epochfence_coordinator_fences_written_total", 3),
            ("epochfence_coordinator_transactions_committed_total", 1),
            ("epochfence_coordinator_transactions_aborted_total", 1),
            ("epochfence_coordinator_transactions_timed_out_total", 1),
        ] {
            assert!(text.contains(&format!("{sample} {want}\n")), "{sample} {want}: {text}");
        }
        let generation = |stable| {
            Entry::GroupGeneration(crate::entry::GroupRecord {
                group: "g".into(),
                generation: 1,
                protocol_type: "consumer".into(),
                protocol: "range".into(),
                leader: String::new(),
                stable,
                members: vec![],
            })
        };
        // A rebalance is journaled twice (formed, then stable with the assignment): counted once.
        m.count(&[generation(false), generation(true)]);
        m.count(&[Entry::OffsetsCommitted { group: "g".into(), offsets: vec![] }]);
        m.count(&[Entry::GroupsDeleted { groups: vec!["a".into(), "b".into()] }]);
        m.offset_commit_refused(protocol::ErrorCode::IllegalGeneration);
        m.offset_commit_refused(protocol::ErrorCode::IllegalGeneration);
        m.offset_commit_refused(protocol::ErrorCode::FencedInstanceId);
        let text = m.encode();
        for (sample, want) in [
            ("epochfence_coordinator_group_rebalances_total", 1),
            ("epochfence_coordinator_group_offset_commits_total", 1),
            ("epochfence_coordinator_groups_deleted_total", 2),
            ("epochfence_coordinator_group_offset_commits_refused_total{reason=\"generation\"}", 2),
            ("epochfence_coordinator_group_offset_commits_refused_total{reason=\"instance\"}", 1),
        ] {
            assert!(text.contains(&format!("{sample} {want}\n")), "{sample} {want}: {text}");
        }
    }
}
