//! The producer table: producer ids, epochs, partition registrations and fences.
//!
//! Plain synchronous rules, no I/O: every `handle_*` method decides, returns the journal
//! entries that make its decision durable, and applies them to itself. The caller persists the
//! entries (in order) and answers only once they are durable. [`ProducerTable::apply`] is also
//! how the journal is replayed after a restart.
//!
//! ## How an init fences
//! A partition leader registers `(producer id, epoch, partition)` here before the first write
//! of that epoch to that partition ([`ProducerTable::handle_register`]), and is refused for any
//! epoch older than the current one. An init that bumps the epoch lists every partition
//! registered under older epochs in its grant ([`Entry::Grant::fence`]); the caller writes a
//! marker at the new epoch to each of them before answering. So when the new epoch is
//! answered, every partition the old epoch could write to holds a fence, and every other
//! partition will refuse to register the old epoch.

use std::collections::{BTreeSet, HashMap};

use protocol::{ErrorCode, Status};

use crate::entry::{Entry, FenceTarget};

/// The highest epoch ever granted; i16::MAX is kept for the rollover fence.
pub const EPOCH_GRANT_MAX: i16 = i16::MAX - 1;
/// The epoch of the marker that fences a producer id retired at exhaustion.
pub const EPOCH_RETIRED: i16 = i16::MAX;

/// Limits of the table.
#[derive(Debug, Clone)]
pub struct TableConfig {
    /// Largest transaction timeout a producer may ask for, in milliseconds.
    pub transaction_timeout_ms_max: i32,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig { transaction_timeout_ms_max: 15 * 60 * 1000 }
    }
}

#[derive(Debug, Clone)]
struct TxnEntry {
    producer_id: i64,
    epoch: i16,
    requested_by: Option<(i64, i16)>,
    transaction_timeout_ms: i32,
    /// Partitions registered under `epoch`.
    registered: BTreeSet<(String, i32)>,
    /// Markers of the grant at `epoch` not yet confirmed written.
    pending_fence: Vec<FenceTarget>,
}

/// What an init decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// Persist `entries`, write every `fence` marker, then answer `(producer_id, epoch)`.
    Grant {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// To persist before anything else.
        entries: Vec<Entry>,
        /// Markers to write before answering (empty for a new transactional id).
        fence: Vec<FenceTarget>,
    },
    /// Answer with this status (and `epoch` as the current epoch) without granting.
    Refuse {
        /// Why.
        status: Status,
        /// The transactional id's current epoch, -1 if none.
        epoch: i16,
    },
}

/// What a registration decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterDecision {
    /// Registered: persist `entries` (possibly none: then wait for what is already queued),
    /// then answer success.
    Accept {
        /// To persist.
        entries: Vec<Entry>,
        /// The producer id's current epoch.
        epoch: i16,
    },
    /// Refused.
    Refuse {
        /// Why.
        status: Status,
        /// The current epoch, -1 if unknown.
        epoch: i16,
    },
}

/// A transactional id as `admin describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnSummary {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Epoch.
    pub epoch: i16,
    /// Partitions registered under the epoch, as `topic-partition`.
    pub partitions: Vec<String>,
    /// Whether the grant's fence markers are still being written.
    pub fencing: bool,
}

/// Producer ids, epochs, registrations and fences. See the module docs.
#[derive(Debug, Default)]
pub struct ProducerTable {
    config: TableConfig,
    next_producer_id: i64,
    by_tid: HashMap<String, TxnEntry>,
    /// Producer id -> owning transactional id, for every id ever bound to one.
    owner: HashMap<i64, String>,
}

fn fenced_message(tid: &str, current: i16, held: i16) -> String {
    format!(
        "fenced: transactional id '{tid}' is at epoch {current}, this producer holds epoch {held}; \
         another instance initialised with the same transactional id, so stop this one"
    )
}

impl ProducerTable {
    /// An empty table.
    pub fn new(config: TableConfig) -> Self {
        ProducerTable { config, ..Default::default() }
    }

    /// The next producer id to be handed out.
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    /// InitProducerId. `current` is the caller's (producer id, epoch), if it has one (KIP-360).
    pub fn handle_init(
        &mut self,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> InitDecision {
        let refuse = |code, msg: String, epoch| InitDecision::Refuse { status: Status::new(code, msg), epoch };
        let Some(tid) = transactional_id else {
            let producer_id = self.next_producer_id;
            let entry = Entry::Grant {
                transactional_id: None,
                producer_id,
                epoch: 0,
                requested_by: None,
                transaction_timeout_ms: 0,
                fence: Vec::new(),
            };
            self.apply(&entry);
            return InitDecision::Grant { producer_id, epoch: 0, entries: vec![entry], fence: Vec::new() };
        };
        if let Err(why) = protocol::names::validate_transactional_id(tid) {
            return refuse(ErrorCode::InvalidRequest, why, -1);
        }
        if transaction_timeout_ms <= 0 || transaction_timeout_ms > self.config.transaction_timeout_ms_max {
            return refuse(
                ErrorCode::InvalidTransactionTimeout,
                format!(
                    "transaction timeout {transaction_timeout_ms} ms is outside 1..={} ms",
                    self.config.transaction_timeout_ms_max
                ),
                -1,
            );
        }
        let Some(e) = self.by_tid.get(tid) else {
            if current.is_some() {
                return refuse(
                    ErrorCode::InvalidProducerIdMapping,
                    format!("transactional id '{tid}' has no producer id; init without one"),
                    -1,
                );
            }
            let producer_id = self.next_producer_id;
            return self.grant(tid, producer_id, 0, None, transaction_timeout_ms, Vec::new());
        };
        if !e.pending_fence.is_empty() {
            return refuse(
                ErrorCode::ConcurrentTransactions,
                format!(
                    "transactional id '{tid}': epoch {} is still fencing {} partition(s) of the previous epoch; retry shortly",
                    e.epoch,
                    e.pending_fence.len()
                ),
                e.epoch,
            );
        }
        if let Some((pid, epoch)) = current {
            if Some((pid, epoch)) == e.requested_by {
                // A retry of the init that produced the current epoch: its reply was lost.
                // Answer it again rather than fencing the caller (KIP-360).
                return InitDecision::Grant {
                    producer_id: e.producer_id,
                    epoch: e.epoch,
                    entries: Vec::new(),
                    fence: Vec::new(),
                };
            }
            if pid != e.producer_id || epoch != e.epoch {
                let ours = self.owner.get(&pid).is_some_and(|t| t == tid);
                return if ours && (pid != e.producer_id || epoch < e.epoch) {
                    refuse(ErrorCode::ProducerFenced, fenced_message(tid, e.epoch, epoch), e.epoch)
                } else {
                    refuse(
                        ErrorCode::InvalidProducerIdMapping,
                        format!("producer id {pid} epoch {epoch} was never granted to transactional id '{tid}'"),
                        e.epoch,
                    )
                };
            }
        }
        let e = e.clone();
        let (producer_id, epoch, marker_epoch) = if e.epoch >= EPOCH_GRANT_MAX {
            (self.next_producer_id, 0, EPOCH_RETIRED)
        } else {
            (e.producer_id, e.epoch + 1, e.epoch + 1)
        };
        let fence = e
            .registered
            .iter()
            .map(|(topic, partition)| FenceTarget {
                producer_id: e.producer_id,
                marker_epoch,
                topic: topic.clone(),
                partition: *partition,
            })
            .collect();
        self.grant(tid, producer_id, epoch, current, transaction_timeout_ms, fence)
    }

    fn grant(
        &mut self,
        tid: &str,
        producer_id: i64,
        epoch: i16,
        requested_by: Option<(i64, i16)>,
        transaction_timeout_ms: i32,
        fence: Vec<FenceTarget>,
    ) -> InitDecision {
        let entry = Entry::Grant {
            transactional_id: Some(tid.to_string()),
            producer_id,
            epoch,
            requested_by,
            transaction_timeout_ms,
            fence: fence.clone(),
        };
        self.apply(&entry);
        InitDecision::Grant { producer_id, epoch, entries: vec![entry], fence }
    }

    /// The fence markers of the grant at `epoch` for `tid` are all written.
    /// Returns the entry recording it (persisting it is an optimisation, not a promise).
    pub fn handle_fence_done(&mut self, tid: &str, epoch: i16) -> Option<Entry> {
        let e = self.by_tid.get(tid)?;
        if e.epoch != epoch || e.pending_fence.is_empty() {
            return None;
        }
        let entry = Entry::FenceDone { transactional_id: tid.to_string(), epoch };
        self.apply(&entry);
        Some(entry)
    }

    /// Every grant whose markers are not confirmed yet, as `(transactional id, epoch, targets)`:
    /// after a restart the caller resumes writing them.
    pub fn pending_fences(&self) -> Vec<(String, i16, Vec<FenceTarget>)> {
        self.by_tid
            .iter()
            .filter(|(_, e)| !e.pending_fence.is_empty())
            .map(|(t, e)| (t.clone(), e.epoch, e.pending_fence.clone()))
            .collect()
    }

    /// A partition leader asks whether `(producer_id, epoch)` may write to `topic-partition`.
    pub fn handle_register(&mut self, producer_id: i64, epoch: i16, topic: &str, partition: i32) -> RegisterDecision {
        let refuse = |code, msg: String, epoch| RegisterDecision::Refuse { status: Status::new(code, msg), epoch };
        let Some(tid) = self.owner.get(&producer_id) else {
            if producer_id < 0 || producer_id >= self.next_producer_id {
                return refuse(
                    ErrorCode::UnknownProducerId,
                    format!("producer id {producer_id} was never granted; call InitProducerId first"),
                    -1,
                );
            }
            // An idempotent-only producer: nothing can fence it, nothing to remember.
            if epoch != 0 {
                return refuse(
                    ErrorCode::InvalidProducerEpoch,
                    format!("producer id {producer_id} has no transactional id and only epoch 0; got {epoch}"),
                    0,
                );
            }
            return RegisterDecision::Accept { entries: Vec::new(), epoch: 0 };
        };
        let e = &self.by_tid[tid];
        if producer_id != e.producer_id {
            return refuse(
                ErrorCode::ProducerFenced,
                format!(
                    "fenced: producer id {producer_id} of transactional id '{tid}' was retired at epoch exhaustion; \
                     the transactional id now uses producer id {} at epoch {}",
                    e.producer_id, e.epoch
                ),
                EPOCH_RETIRED,
            );
        }
        if epoch < e.epoch {
            return refuse(ErrorCode::ProducerFenced, fenced_message(tid, e.epoch, epoch), e.epoch);
        }
        if epoch > e.epoch {
            return refuse(
                ErrorCode::InvalidProducerEpoch,
                format!("producer id {producer_id} epoch {epoch} was never granted (current is {})", e.epoch),
                e.epoch,
            );
        }
        let current = e.epoch;
        if e.registered.contains(&(topic.to_string(), partition)) {
            return RegisterDecision::Accept { entries: Vec::new(), epoch: current };
        }
        let entry = Entry::Register { producer_id, epoch, topic: topic.to_string(), partition };
        self.apply(&entry);
        RegisterDecision::Accept { entries: vec![entry], epoch: current }
    }

    /// Apply one entry: how decisions take effect, and how the journal is replayed.
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::Grant { transactional_id, producer_id, epoch, requested_by, transaction_timeout_ms, fence } => {
                self.next_producer_id = self.next_producer_id.max(producer_id + 1);
                let Some(tid) = transactional_id else { return };
                self.owner.insert(*producer_id, tid.clone());
                let e = self.by_tid.entry(tid.clone()).or_insert_with(|| TxnEntry {
                    producer_id: *producer_id,
                    epoch: *epoch,
                    requested_by: None,
                    transaction_timeout_ms: *transaction_timeout_ms,
                    registered: BTreeSet::new(),
                    pending_fence: Vec::new(),
                });
                e.producer_id = *producer_id;
                e.epoch = *epoch;
                e.requested_by = *requested_by;
                e.transaction_timeout_ms = *transaction_timeout_ms;
                e.registered.clear();
                e.pending_fence = fence.clone();
            }
            Entry::Register { producer_id, epoch, topic, partition } => {
                if let Some(e) = self.owner.get(producer_id).and_then(|t| self.by_tid.get_mut(t)) {
                    if e.producer_id == *producer_id && e.epoch == *epoch {
                        e.registered.insert((topic.clone(), *partition));
                    }
                }
            }
            Entry::FenceDone { transactional_id, epoch } => {
                if let Some(e) = self.by_tid.get_mut(transactional_id) {
                    if e.epoch == *epoch {
                        e.pending_fence.clear();
                    }
                }
            }
            Entry::TopicCreated { .. } | Entry::LeaderChanged { .. } | Entry::IsrChanged { .. } => {}
        }
    }

    /// Every transactional id, sorted.
    pub fn describe(&self) -> Vec<TxnSummary> {
        let mut out: Vec<TxnSummary> = self
            .by_tid
            .iter()
            .map(|(t, e)| TxnSummary {
                transactional_id: t.clone(),
                producer_id: e.producer_id,
                epoch: e.epoch,
                partitions: e.registered.iter().map(|(t, p)| format!("{t}-{p}")).collect(),
                fencing: !e.pending_fence.is_empty(),
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// The current (producer id, epoch) of a transactional id.
    pub fn current(&self, tid: &str) -> Option<(i64, i16)> {
        self.by_tid.get(tid).map(|e| (e.producer_id, e.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i32 = 60_000;

    fn grant(d: InitDecision) -> (i64, i16, Vec<FenceTarget>) {
        match d {
            InitDecision::Grant { producer_id, epoch, fence, .. } => (producer_id, epoch, fence),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn refused(d: InitDecision) -> (ErrorCode, i16) {
        match d {
            InitDecision::Refuse { status, epoch } => (status.code, epoch),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn new_and_idempotent_producers_get_fresh_ids_at_epoch_zero() {
        let mut t = ProducerTable::new(TableConfig::default());
        assert_eq!(grant(t.handle_init(None, 0, None)).0, 0);
        assert_eq!(grant(t.handle_init(None, 0, None)).0, 1);
        let (pid, epoch, fence) = grant(t.handle_init(Some("orders"), T, None));
        assert_eq!((pid, epoch), (2, 0));
        assert!(fence.is_empty());
    }

    #[test]
    fn known_transactional_id_bumps_epoch_on_same_producer_id() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("orders"), T, None));
        let (pid1, e1, _) = grant(t.handle_init(Some("orders"), T, None));
        assert_eq!((pid1, e1), (pid, e0 + 1));
    }

    #[test]
    fn epochs_strictly_increase_over_1000_inits() {
        let mut t = ProducerTable::new(TableConfig::default());
        let mut last = -1;
        for _ in 0..1000 {
            let (_, e, _) = grant(t.handle_init(Some("x"), T, None));
            assert!(e > last);
            last = e;
        }
    }

    #[test]
    fn bump_fences_every_partition_registered_under_the_old_epoch() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("orders"), T, None));
        assert!(matches!(t.handle_register(pid, e0, "t", 0), RegisterDecision::Accept { .. }));
        assert!(matches!(t.handle_register(pid, e0, "t", 1), RegisterDecision::Accept { .. }));
        let (_, e1, fence) = grant(t.handle_init(Some("orders"), T, None));
        assert_eq!(fence.len(), 2);
        assert!(fence.iter().all(|f| f.marker_epoch == e1 && f.producer_id == pid));
        // While the fence is being written, another init must wait.
        assert_eq!(refused(t.handle_init(Some("orders"), T, None)).0, ErrorCode::ConcurrentTransactions);
        assert!(t.handle_fence_done("orders", e1).is_some());
        let (_, e2, fence) = grant(t.handle_init(Some("orders"), T, None));
        assert_eq!(e2, e1 + 1);
        assert!(fence.is_empty(), "nothing registered under epoch {e1}");
    }

    #[test]
    fn stale_epoch_cannot_register_a_partition() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("orders"), T, None));
        grant(t.handle_init(Some("orders"), T, None));
        match t.handle_register(pid, e0, "never-touched", 7) {
            RegisterDecision::Refuse { status, epoch } => {
                assert_eq!(status.code, ErrorCode::ProducerFenced);
                assert_eq!(epoch, e0 + 1);
                assert!(
                    status.message.contains("'orders' is at epoch 1, this producer holds epoch 0"),
                    "{}",
                    status.message
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_producer_id_is_refused_and_idempotent_ids_are_accepted() {
        let mut t = ProducerTable::new(TableConfig::default());
        assert!(matches!(
            t.handle_register(5, 0, "t", 0),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::UnknownProducerId, .. }, .. }
        ));
        let (pid, _, _) = grant(t.handle_init(None, 0, None));
        assert!(matches!(t.handle_register(pid, 0, "t", 0), RegisterDecision::Accept { .. }));
    }

    #[test]
    fn retried_init_with_lost_reply_does_not_fence_its_caller() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("orders"), T, None));
        // The holder asks for a bump (KIP-360) and the reply is lost...
        let (_, e1, _) = grant(t.handle_init(Some("orders"), T, Some((pid, e0))));
        // ...so it retries with the same (pid, epoch) and gets the same grant.
        let (pid2, e1b, _) = grant(t.handle_init(Some("orders"), T, Some((pid, e0))));
        assert_eq!((pid2, e1b), (pid, e1));
        // A zombie presenting an older epoch that did not make the current grant is fenced.
        let (_, e2, _) = grant(t.handle_init(Some("orders"), T, None));
        let (code, cur) = refused(t.handle_init(Some("orders"), T, Some((pid, e1))));
        assert_eq!((code, cur), (ErrorCode::ProducerFenced, e2));
    }

    #[test]
    fn exhaustion_moves_to_a_new_producer_id_and_retires_the_old_one() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, _, _) = grant(t.handle_init(Some("x"), T, None));
        t.apply(&Entry::Grant {
            transactional_id: Some("x".into()),
            producer_id: pid,
            epoch: EPOCH_GRANT_MAX,
            requested_by: None,
            transaction_timeout_ms: T,
            fence: vec![],
        });
        assert!(matches!(t.handle_register(pid, EPOCH_GRANT_MAX, "t", 0), RegisterDecision::Accept { .. }));
        let (pid2, e, fence) = grant(t.handle_init(Some("x"), T, None));
        assert_ne!(pid2, pid);
        assert_eq!(e, 0);
        assert_eq!(
            fence,
            vec![FenceTarget { producer_id: pid, marker_epoch: EPOCH_RETIRED, topic: "t".into(), partition: 0 }]
        );
        t.handle_fence_done("x", 0);
        assert!(matches!(
            t.handle_register(pid, EPOCH_GRANT_MAX, "t", 1),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::ProducerFenced, .. }, .. }
        ));
    }

    #[test]
    fn replaying_the_entries_rebuilds_the_same_table() {
        let mut t = ProducerTable::new(TableConfig::default());
        let mut log = Vec::new();
        let push = |d: InitDecision, log: &mut Vec<Entry>| {
            if let InitDecision::Grant { entries, .. } = d {
                log.extend(entries);
            }
        };
        let d = t.handle_init(Some("a"), T, None);
        push(d, &mut log);
        let (pid, e) = t.current("a").unwrap();
        if let RegisterDecision::Accept { entries, .. } = t.handle_register(pid, e, "t", 0) {
            log.extend(entries);
        }
        let d = t.handle_init(Some("a"), T, None);
        push(d, &mut log);
        let d = t.handle_init(None, 0, None);
        push(d, &mut log);

        let mut r = ProducerTable::new(TableConfig::default());
        for e in &log {
            r.apply(e);
        }
        assert_eq!(r.describe(), t.describe());
        assert_eq!(r.next_producer_id(), t.next_producer_id());
        assert_eq!(r.pending_fences(), t.pending_fences());
    }

    #[test]
    fn invalid_timeouts_and_ids_are_refused() {
        let mut t = ProducerTable::new(TableConfig::default());
        assert_eq!(refused(t.handle_init(Some("a"), 0, None)).0, ErrorCode::InvalidTransactionTimeout);
        assert_eq!(refused(t.handle_init(Some("a"), i32::MAX, None)).0, ErrorCode::InvalidTransactionTimeout);
        assert_eq!(refused(t.handle_init(Some(""), T, None)).0, ErrorCode::InvalidRequest);
    }
}
