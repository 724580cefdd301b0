//! The broker's Prometheus metrics: one registry per broker (so the brokers of an in-process
//! cluster keep their own counts), encoded for `--metrics-listen`'s `/metrics`.
//!
//! Counters and histograms move where the events happen (the produce path, the flusher,
//! replication); gauges are set from the partitions by [`BrokerMetrics::refresh`], which the
//! heartbeat loop calls.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Why a write was refused: the `reason` label of `epochfence_broker_writes_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A producer epoch older than the partition's (a zombie producer).
    ProducerEpoch,
    /// A leader epoch older than the partition's (a stale leader, or a client with old
    /// metadata).
    LeaderEpoch,
    /// A sequence that does not follow the last one.
    Sequence,
    /// The coordinator's verification refused the producer (fenced, or not in a transaction).
    Coordinator,
    /// This broker does not lead the partition (or hosts no replica of it, or has not learnt
    /// the leadership the request names yet).
    NotLeader,
    /// Fewer in-sync replicas than `min.insync.replicas`.
    NotEnoughReplicas,
    /// The log cannot take writes (a failed disk).
    Storage,
    /// A marker from a deposed coordinator replica (an older coordinator epoch).
    CoordinatorEpoch,
}

impl Refusal {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ProducerEpoch => "producer_epoch",
            Refusal::LeaderEpoch => "leader_epoch",
            Refusal::Sequence => "sequence",
            Refusal::Coordinator => "coordinator",
            Refusal::NotLeader => "not_leader",
            Refusal::NotEnoughReplicas => "not_enough_replicas",
            Refusal::Storage => "storage",
            Refusal::CoordinatorEpoch => "coordinator_epoch",
        }
    }
}

/// How a SASL login on the Kafka listener ended: the `outcome` label of
/// `epochfence_broker_kafka_logins_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginOutcome {
    /// A connection's first login succeeded.
    Authenticated,
    /// A logged-in connection logged in again (KIP-368).
    Reauthenticated,
    /// A login or re-authentication failed (a wrong password, an unknown user, a malformed
    /// message, another user or mechanism on re-authentication).
    Failed,
    /// A connection was closed because its session ended without a re-authentication.
    SessionEnded,
}

impl LoginOutcome {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            LoginOutcome::Authenticated => "authenticated",
            LoginOutcome::Reauthenticated => "reauthenticated",
            LoginOutcome::Failed => "failed",
            LoginOutcome::SessionEnded => "session_ended",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Latency buckets, in seconds: 50 µs to about 1.6 s, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 16)
}

/// What a gauge refresh reads off one hosted partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionReading {
    /// This broker leads it.
    pub leading: bool,
    /// It leads it with fewer in-sync replicas than replicas.
    pub under_replicated: bool,
    /// The most records a follower is behind the leader's log end (0 if not leading).
    pub replication_lag_records: i64,
    /// Truncations of its log since it was opened.
    pub truncations: u64,
    /// Producer ids whose state it holds.
    pub producer_ids: usize,
}

/// A broker's metrics.
pub struct BrokerMetrics {
    registry: Registry,
    writes_refused: Family<ReasonLabels, Counter>,
    kafka_logins: Family<OutcomeLabels, Counter>,
    /// Retried batches answered with their original offset, nothing written.
    pub duplicates_answered: Counter,
    /// Records appended as leader.
    pub records_appended: Counter,
    /// Bytes of batches appended as leader.
    pub bytes_appended: Counter,
    /// Transaction markers appended.
    pub markers_written: Counter,
    /// From a produce request's arrival at the gate to its answer.
    pub produce_latency: Histogram,
    /// Fetch requests, to their answer (long polls included).
    pub fetch_latency: Histogram,
    /// One fdatasync of a partition's active segment.
    pub fsync_latency: Histogram,
    /// ISR changes this broker proposed as leader that the coordinator accepted, by direction.
    pub isr_shrinks: Counter,
    /// See [`BrokerMetrics::isr_shrinks`].
    pub isr_expands: Counter,
    /// Replications a follower refused because they would cut its log below its high watermark
    /// (committed records) outside an unclean election.
    pub cut_refusals: Counter,
    /// Producer ids a partition forgot after `producer_id_expiration_ms` idle.
    pub producer_ids_expired: Counter,
    producer_ids: Gauge,
    truncations: Counter,
    partitions_led: Gauge,
    under_replicated: Gauge,
    replication_lag: Gauge,
    /// Truncations seen per partition at the last refresh.
    seen_truncations: Mutex<HashMap<(String, i32), u64>>,
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerMetrics").finish_non_exhaustive()
    }
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    /// Fresh metrics in a registry of their own, named `epochfence_broker_*`.
    pub fn new() -> BrokerMetrics {
        let mut registry = Registry::with_prefix("epochfence_broker");
        let m = BrokerMetrics {
            registry: Registry::default(),
            writes_refused: Family::default(),
            kafka_logins: Family::default(),
            duplicates_answered: Counter::default(),
            records_appended: Counter::default(),
            bytes_appended: Counter::default(),
            markers_written: Counter::default(),
            produce_latency: Histogram::new(latency_buckets()),
            fetch_latency: Histogram::new(latency_buckets()),
            fsync_latency: Histogram::new(latency_buckets()),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            cut_refusals: Counter::default(),
            producer_ids_expired: Counter::default(),
            producer_ids: Gauge::default(),
            truncations: Counter::default(),
            partitions_led: Gauge::default(),
            under_replicated: Gauge::default(),
            replication_lag: Gauge::default(),
            seen_truncations: Mutex::new(HashMap::new()),
        };
        registry.register(
            "writes_refused",
            "Writes refused, by reason: producer_epoch, leader_epoch, sequence, coordinator, not_leader, not_enough_replicas, storage",
            m.writes_refused.clone(),
        );
        registry.register(
            "kafka_logins",
            "SASL logins on the Kafka listener, by outcome: authenticated, reauthenticated, failed, session_ended",
            m.kafka_logins.clone(),
        );
        registry.register(
            "duplicates_answered",
            "Retried batches answered with their original offset",
            m.duplicates_answered.clone(),
        );
        registry.register("records_appended", "Records appended as leader", m.records_appended.clone());
        registry.register_with_unit(
            "appended",
            "Bytes of batches appended as leader",
            Unit::Bytes,
            m.bytes_appended.clone(),
        );
        registry.register("markers_written", "Transaction markers appended", m.markers_written.clone());
        registry.register_with_unit(
            "produce_latency",
            "Produce requests, from the gate to the answer",
            Unit::Seconds,
            m.produce_latency.clone(),
        );
        registry.register_with_unit(
            "fetch_latency",
            "Fetch requests, to the answer (long polls included)",
            Unit::Seconds,
            m.fetch_latency.clone(),
        );
        registry.register_with_unit(
            "fsync_latency",
            "One fdatasync of a partition's active segment",
            Unit::Seconds,
            m.fsync_latency.clone(),
        );
        registry.register(
            "isr_shrinks",
            "ISR shrinks this broker proposed as leader and the coordinator accepted",
            m.isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "ISR expansions this broker proposed as leader and the coordinator accepted",
            m.isr_expands.clone(),
        );
        registry.register(
            "replication_cut_refusals",
            "Replications refused because following would cut committed records (the leader lacks them)",
            m.cut_refusals.clone(),
        );
        registry.register(
            "producer_ids_expired",
            "Producer ids a partition forgot after --producer-id-expiration-ms without a write",
            m.producer_ids_expired.clone(),
        );
        registry.register(
            "producer_ids",
            "Producer ids whose state the hosted partitions hold (summed over partitions)",
            m.producer_ids.clone(),
        );
        registry.register(
            "truncations",
            "Log truncations (a follower cutting its log to its leader's)",
            m.truncations.clone(),
        );
        registry.register("partitions_led", "Partitions this broker leads", m.partitions_led.clone());
        registry.register(
            "under_replicated_partitions",
            "Partitions this broker leads with fewer in-sync replicas than replicas",
            m.under_replicated.clone(),
        );
        registry.register(
            "replication_lag_records",
            "The most records any follower of a partition this broker leads is behind",
            m.replication_lag.clone(),
        );
        BrokerMetrics { registry, ..m }
    }

    /// Count a refused write.
    pub fn refused(&self, why: Refusal) {
        self.writes_refused.get_or_create(&ReasonLabels { reason: why.label() }).inc();
    }

    /// Writes refused for `why` so far.
    pub fn refused_count(&self, why: Refusal) -> u64 {
        self.writes_refused.get_or_create(&ReasonLabels { reason: why.label() }).get()
    }

    /// Count a SASL login's outcome.
    pub fn login(&self, outcome: LoginOutcome) {
        self.kafka_logins.get_or_create(&OutcomeLabels { outcome: outcome.label() }).inc();
    }

    /// SASL logins with `outcome` so far.
    pub fn login_count(&self, outcome: LoginOutcome) -> u64 {
        self.kafka_logins.get_or_create(&OutcomeLabels { outcome: outcome.label() }).get()
    }

    /// Set the gauges from the hosted partitions, and count truncations since the last refresh.
    pub fn refresh(&self, partitions: impl IntoIterator<Item = ((String, i32), PartitionReading)>) {
        let (mut led, mut under, mut lag, mut producer_ids) = (0, 0, 0, 0);
        let mut seen = self.seen_truncations.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = HashMap::new();
        for (key, r) in partitions {
            led += i64::from(r.leading);
            under += i64::from(r.under_replicated);
            lag = lag.max(r.replication_lag_records);
            producer_ids += r.producer_ids;
            // A partition opened again counts from 0: nothing new until it passes what was seen.
            let before = seen.get(&key).copied().unwrap_or(0);
            if r.truncations > before {
                self.truncations.inc_by(r.truncations - before);
            }
            now.insert(key, r.truncations);
        }
        *seen = now;
        self.partitions_led.set(led);
        self.under_replicated.set(under);
        self.replication_lag.set(lag);
        self.producer_ids.set(i64::try_from(producer_ids).unwrap_or(i64::MAX));
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

    #[test]
    fn the_fixed_names_are_as_dashboards_expect() {
        let m = BrokerMetrics::new();
        m.refused(Refusal::ProducerEpoch);
        m.refused(Refusal::ProducerEpoch);
        m.refused(Refusal::LeaderEpoch);
        let text = m.encode();
        assert!(text.contains("epochfence_broker_writes_refused_total{reason=\"producer_epoch\"} 2"), "{text}");
        assert!(text.contains("epochfence_broker_writes_refused_total{reason=\"leader_epoch\"} 1"), "{text}");
        assert!(text.contains("# TYPE epochfence_broker_produce_latency_seconds histogram"), "{text}");
        assert!(text.contains("epochfence_broker_appended_bytes_total 0"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn truncations_count_once_and_a_reopened_partition_starts_again() {
        let m = BrokerMetrics::new();
        let reading = |truncations| PartitionReading {
            leading: true,
            under_replicated: false,
            replication_lag_records: 3,
            truncations,
            producer_ids: 0,
        };
        let key = ("t".to_string(), 0);
        m.refresh([(key.clone(), reading(2))]);
        m.refresh([(key.clone(), reading(2))]);
        m.refresh([(key.clone(), reading(0))]);
        m.refresh([(key, reading(1))]);
        let text = m.encode();
        assert!(text.contains("epochfence_broker_truncations_total 3"), "{text}");
        assert!(text.contains("epochfence_broker_partitions_led 1"), "{text}");
        assert!(text.contains("epochfence_broker_replication_lag_records 3"), "{text}");
    }
}
