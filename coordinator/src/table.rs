//! The producer table: producer ids, epochs, partition registrations, transactions and fences.
//!
//! Plain synchronous rules, no I/O, time passed in: every `handle_*` method decides, returns
//! the journal entries that make its decision durable, and applies them to itself. The caller
//! persists the entries (in order) and answers only once they are durable.
//! [`ProducerTable::apply`] is also how the journal is replayed after a restart.
//!
//! ## How an epoch bump fences
//! A partition is registered here under `(producer id, epoch)` before the first write of that
//! epoch to it ([`ProducerTable::handle_register`], by the partition's leader and, for
//! transactions, by the producer), and registration is refused for any epoch but the current
//! one. Every bump (an init by a new instance, the end of a transaction, a transaction timeout)
//! lists every partition registered under the epoch it ends; the caller writes a marker at the
//! new epoch to each (abort for an init or a timeout, commit or abort for an EndTxn) before
//! answering. So once a new epoch is answered, every partition the old epoch could write to holds
//! a marker that fences it, and every other partition refuses to register the old epoch.
//!
//! ## Transactions
//! Empty -> Ongoing (first transactional registration) -> PrepareCommit / PrepareAbort (EndTxn
//! or timeout: epoch bumped, markers pending) -> CompleteCommit / CompleteAbort (markers
//! written). An init while Ongoing aborts the transaction with markers at the bumped epoch.

use std::collections::{BTreeSet, HashMap, VecDeque};

use protocol::auth::{PidOwner, ProducerIdBinder};
use protocol::{ErrorCode, Status};

use crate::entry::{Entry, FenceTarget, TxnSnapshot};

/// The highest epoch ever granted; i16::MAX is kept for the rollover fence.
pub const EPOCH_GRANT_MAX: i16 = i16::MAX - 1;
/// The epoch of the marker that fences a producer id retired at exhaustion.
pub const EPOCH_RETIRED: i16 = i16::MAX;
/// Epoch bumps remembered per transactional id, to explain a refusal.
pub const BUMPS_REMEMBERED: usize = 16;

/// Limits of the table.
#[derive(Debug, Clone)]
pub struct TableConfig {
    /// Largest transaction timeout a producer may ask for, in milliseconds.
    pub transaction_timeout_ms_max: i32,
    /// A transactional id with no transaction open and no marker owed that sees no request for
    /// this long is forgotten (Kafka's `transactional.id.expiration.ms`, 7 days).
    pub transactional_id_expiration_ms: u64,
    /// Transactional ids the table holds; an init of a new one beyond is refused
    /// POLICY_VIOLATION.
    pub transactional_ids_max: usize,
    /// Tell a forgotten transactional id's producer ids (odd) from idempotent producers'
    /// (even). Off only for the simulator's `expired-ids-taken-for-idempotent` mutation.
    pub producer_id_kinds: bool,
    /// Under the authorizer: hand out producer ids bound to their owner (a transactional id,
    /// or an idempotent producer's principal), which brokers check every write against
    /// (`protocol::auth::ProducerIdBinder`).
    pub pid_binder: Option<protocol::auth::ProducerIdBinder>,
}

/// Default [`TableConfig::transactional_id_expiration_ms`]: 7 days, as Kafka's.
pub const TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT: u64 = 7 * 24 * 60 * 60 * 1000;
/// Default [`TableConfig::transactional_ids_max`].
pub const TRANSACTIONAL_IDS_MAX_DEFAULT: usize = 100_000;
/// Names one [`Entry::TxnIdsExpired`] or [`Entry::GroupsExpired`] carries at most (bounds its
/// journal record).
pub const EXPIRED_PER_ENTRY_MAX: usize = 1_000;

/// One expiry sweep's look at an idle clock (`since`: when a sweep first found the thing idle,
/// `None` while it is not, or since something was applied to it): a busy thing's clock stops,
/// an idle one's starts at `now_ms` if stopped. Returns whether it has been idle for
/// `expiration_ms`.
pub(crate) fn idle_past(since: &mut Option<u64>, idle: bool, now_ms: u64, expiration_ms: u64) -> bool {
    match *since {
        _ if !idle => *since = None,
        None => *since = Some(now_ms),
        Some(t) => return now_ms.saturating_sub(t) >= expiration_ms,
    }
    false
}

/// `names` in records of at most [`EXPIRED_PER_ENTRY_MAX`], made by `entry`.
pub(crate) fn expiry_entries(names: &[String], entry: impl Fn(Vec<String>) -> Entry) -> Vec<Entry> {
    names.chunks(EXPIRED_PER_ENTRY_MAX).map(|chunk| entry(chunk.to_vec())).collect()
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            transaction_timeout_ms_max: 15 * 60 * 1000,
            transactional_id_expiration_ms: TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
            transactional_ids_max: TRANSACTIONAL_IDS_MAX_DEFAULT,
            producer_id_kinds: true,
            pid_binder: None,
        }
    }
}

/// Where a transactional id's transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// No transaction yet.
    Empty,
    /// A transaction is open.
    Ongoing,
    /// Ending with commit; markers being written.
    PrepareCommit,
    /// Ending with abort (or fencing); markers being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted (or the last epoch was fenced).
    CompleteAbort,
}

impl TxnState {
    /// The name `admin describe` shows.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }
}

/// Why an epoch was bumped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bump {
    NewInstance,
    Ended {
        commit: bool,
    },
    TimedOut {
        timeout_ms: i32,
    },
    /// Fenced by the expiry sweep before the id was forgotten.
    Expired,
}

#[derive(Debug, Clone)]
struct TxnEntry {
    producer_id: i64,
    epoch: i16,
    requested_by: Option<(i64, i16)>,
    transaction_timeout_ms: i32,
    /// Partitions registered under `epoch`: (topic, partition, topic id).
    registered: BTreeSet<(String, i32, u128)>,
    /// When the open transaction began (volatile: reset to the restart time after a replay).
    txn_started_ms: Option<u64>,
    /// Markers of the bump to `epoch` not yet confirmed written, and their kind.
    pending: Vec<FenceTarget>,
    pending_commit: bool,
    /// The outcome of the last completed bump's markers.
    last_result: Option<bool>,
    /// The transaction the last EndTxn ended: ((producer id, epoch), commit), for retries.
    last_end: Option<((i64, i16), bool)>,
    /// Recent bumps: (epoch bumped to, why).
    bumps: VecDeque<(i16, Bump)>,
    /// The marker sequence the next end or fence gets ([`FenceTarget::marker_sequence`]).
    next_marker_sequence: i32,
    /// Since when the id has seen no request, as the expiry sweep first found it so (volatile:
    /// every applied entry clears it, and a replay starts it afresh, so a restart can only
    /// lengthen an id's life).
    idle_since_ms: Option<u64>,
    /// The transaction version of the open (or last) transaction ([`TxnSummary`]).
    transaction_version: i16,
}

impl TxnEntry {
    fn state(&self) -> TxnState {
        if !self.pending.is_empty() {
            return if self.pending_commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        }
        if self.txn_started_ms.is_some() {
            return TxnState::Ongoing;
        }
        match self.last_result {
            Some(true) => TxnState::CompleteCommit,
            Some(false) => TxnState::CompleteAbort,
            None => TxnState::Empty,
        }
    }

    /// CONCURRENT_TRANSACTIONS while the markers of the bump to the current epoch are written.
    fn markers_pending(&self, tid: &str) -> Option<Status> {
        (!self.pending.is_empty()).then(|| {
            Status::new(
                ErrorCode::ConcurrentTransactions,
                format!(
                    "transactional id '{tid}': markers of epoch {} are still being written to {} partition(s); retry shortly",
                    self.epoch,
                    self.pending.len()
                ),
            )
        })
    }

    /// Why `held` is no longer current, in words a user can act on.
    fn fenced_message(&self, tid: &str, held: i16) -> String {
        let current = self.epoch;
        let why = self.bumps.iter().find(|(to, _)| *to > held).map(|(_, b)| *b);
        match why {
            Some(Bump::TimedOut { timeout_ms }) => format!(
                "fenced: the transaction of '{tid}' at epoch {held} outlived its timeout of {timeout_ms} ms and the \
                 coordinator aborted it; transactional id '{tid}' is at epoch {current}, this producer holds epoch {held}. \
                 Start a new producer, or raise transaction_timeout_ms"
            ),
            Some(Bump::Expired) => format!(
                "fenced: transactional id '{tid}' sat idle past its expiration with epoch {held} still able to write, \
                 so the coordinator fenced that epoch (it is at epoch {current}) and forgets the id; stop this producer"
            ),
            Some(Bump::Ended { commit }) => format!(
                "fenced: epoch {held} of '{tid}' ended when its transaction was {}; transactional id '{tid}' is at \
                 epoch {current}, this producer holds epoch {held} (a delayed request from an ended transaction)",
                if commit { "committed" } else { "aborted" }
            ),
            _ => format!(
                "fenced: transactional id '{tid}' is at epoch {current}, this producer holds epoch {held}; another \
                 instance initialised with the same transactional id, so stop this one"
            ),
        }
    }
}

/// What an init decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// Persist `entries`, write every `fence` marker (abort), then answer `(producer_id, epoch)`.
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

/// What an expiry sweep decided ([`ProducerTable::handle_expiry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiry {
    /// Transactional ids forgotten (already applied): persist them.
    pub forgotten: Vec<Entry>,
    /// Idle ids whose epoch is fenced before they are forgotten: persist each decision's
    /// entries, then write its markers, as for a timeout.
    pub fences: Vec<(String, EndDecision)>,
}

impl Expiry {
    /// Nothing forgotten, nothing fenced.
    pub fn is_empty(&self) -> bool {
        self.forgotten.is_empty() && self.fences.is_empty()
    }
}

/// What an EndTxn (or a timeout) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// Persist `entries`, write every marker (commit or abort), then answer the new epoch.
    Markers {
        /// Producer id to continue with.
        producer_id: i64,
        /// Epoch to continue with.
        epoch: i16,
        /// Commit or abort.
        commit: bool,
        /// To persist.
        entries: Vec<Entry>,
        /// Markers to write.
        markers: Vec<FenceTarget>,
    },
    /// Nothing to write (no transaction open, or a retry of an end that completed): wait for
    /// what is queued to be durable, then answer `(producer_id, epoch)`.
    Done {
        /// Producer id.
        producer_id: i64,
        /// Epoch.
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

/// A partition registration or verification ([`ProducerTable::handle_register`]).
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    /// Producer id.
    pub producer_id: i64,
    /// The epoch that is to write.
    pub epoch: i16,
    /// Topic.
    pub topic: &'a str,
    /// Partition index.
    pub partition: i32,
    /// The topic's id, as the coordinator knows it now: a marker owed to the partition goes to
    /// this topic, never to one created later under the name.
    pub topic_id: u128,
    /// A transactional write (opens the transaction if none is open).
    pub transactional: bool,
    /// Only check that the partition is in the open transaction; register nothing.
    pub verify_only: bool,
    /// The transaction version the request comes under, recorded with the transaction (0:
    /// the request tells nothing).
    pub transaction_version: i16,
}

impl<'a> Registration<'a> {
    /// A registration (not verify-only) of `topic-partition` under `(producer_id, epoch)`, of
    /// the topic with id `topic_id`.
    pub fn new(
        producer_id: i64,
        epoch: i16,
        (topic, topic_id): (&'a str, u128),
        partition: i32,
        transactional: bool,
    ) -> Self {
        Registration {
            producer_id,
            epoch,
            topic,
            partition,
            topic_id,
            transactional,
            verify_only: false,
            transaction_version: 2,
        }
    }
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
    /// Transaction state.
    pub state: TxnState,
    /// Milliseconds since the open transaction began, if one is open.
    pub age_ms: Option<u64>,
    /// The transaction timeout asked for, in milliseconds.
    pub transaction_timeout_ms: i32,
    /// The transaction version the open transaction (or, none being open, the last) runs
    /// under: 1 or 2 (KIP-890), 0 if no request has told yet (or a journal from before told
    /// nothing).
    pub transaction_version: i16,
}

/// Producer ids, epochs, registrations, transactions and fences. See the module docs.
#[derive(Debug, Default)]
pub struct ProducerTable {
    config: TableConfig,
    next_producer_id: i64,
    by_tid: HashMap<String, TxnEntry>,
    /// Producer id -> owning transactional id, for every id bound to one and not expired.
    owner: HashMap<i64, String>,
    /// From this producer id on, transactional ids get odd producer ids and idempotent
    /// producers even ones (None: not recorded yet; a journal from before holds ids of either
    /// kind below it). So a producer id bound to no transactional id but odd had one, which
    /// expired: its writes are refused, where an idempotent producer's are accepted.
    parity_from: Option<i64>,
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

    /// After a replay: open transactions' clocks start now (their start times are not durable,
    /// so a restart can only lengthen a transaction's life, never shorten it).
    pub fn restart_clocks(&mut self, now_ms: u64) {
        for e in self.by_tid.values_mut() {
            if e.txn_started_ms.is_some() {
                e.txn_started_ms = Some(now_ms);
            }
        }
    }

    /// The next producer id of a kind: odd for a transactional id, even for an idempotent
    /// producer (`parity_from`). Never one handed out before: the next producer id only grows.
    fn new_producer_id(&self, owner: PidOwner) -> i64 {
        let transactional = matches!(owner, PidOwner::TransactionalId(_));
        let next = self.next_producer_id;
        let counter = if (next % 2 == 1) == transactional { next } else { next + 1 };
        match &self.config.pid_binder {
            Some(binder) => binder.bind(counter, owner),
            None => counter,
        }
    }

    /// The refusal of an init once bound producer ids have run out (`PID_COUNTER_MAX`).
    fn out_of_producer_ids(&self) -> Option<InitDecision> {
        (self.config.pid_binder.is_some() && self.next_producer_id + 1 >= protocol::auth::PID_COUNTER_MAX).then(|| {
            InitDecision::Refuse {
                status: Status::new(
                    ErrorCode::PolicyViolation,
                    format!(
                        "the coordinator has handed out every producer id a bound id can hold ({}); \
                         no new producer can start",
                        protocol::auth::PID_COUNTER_MAX
                    ),
                ),
                epoch: -1,
            }
        })
    }

    /// Whether `producer_id`, bound to no transactional id, was one's (its id expired).
    fn had_transactional_id(&self, producer_id: i64) -> bool {
        let counter = ProducerIdBinder::counter(producer_id);
        self.config.producer_id_kinds
            && self.parity_from.is_some_and(|from| counter >= from)
            && counter % 2 == 1
            && counter < self.next_producer_id
    }

    /// The entry recording `parity_from` if it is not recorded yet (applied here): the
    /// first entry of a decision that hands out producer ids.
    fn parity_mark(&mut self) -> Vec<Entry> {
        if self.parity_from.is_some() {
            return Vec::new();
        }
        let entry = Entry::ProducerIdParity { from: self.next_producer_id };
        self.apply(&entry);
        vec![entry]
    }

    /// The next (producer id, epoch, marker epoch) after `e`: epoch + 1, or a fresh producer id
    /// at epoch 0 at exhaustion (the old id then fenced at [`EPOCH_RETIRED`]), and so when ids
    /// are bound ([`TableConfig::pid_binder`]) and `e`'s is not bound to `tid` (granted before
    /// the authorizer was turned on, or under another cluster secret), which brokers would
    /// refuse every write under.
    fn next_epoch(&self, tid: &str, e: &TxnEntry) -> (i64, i16, i16) {
        let unbound =
            self.config.pid_binder.as_ref().is_some_and(|b| !b.bound_to(e.producer_id, PidOwner::TransactionalId(tid)));
        if e.epoch >= EPOCH_GRANT_MAX || unbound {
            (self.new_producer_id(PidOwner::TransactionalId(tid)), 0, EPOCH_RETIRED)
        } else {
            (e.producer_id, e.epoch + 1, e.epoch + 1)
        }
    }

    fn targets(e: &TxnEntry, marker_epoch: i16) -> Vec<FenceTarget> {
        e.registered
            .iter()
            .map(|(topic, partition, topic_id)| FenceTarget {
                producer_id: e.producer_id,
                marker_epoch,
                marker_sequence: e.next_marker_sequence,
                topic: topic.clone(),
                partition: *partition,
                topic_id: *topic_id,
            })
            .collect()
    }

    /// InitProducerId. `current` is the caller's (producer id, epoch), if it has one (KIP-360).
    pub fn handle_init(
        &mut self,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> InitDecision {
        self.handle_init_as(transactional_id, transaction_timeout_ms, current, "")
    }

    /// [`ProducerTable::handle_init`] for `principal` (`User:alice`, as the broker that relays
    /// the init authenticated it): an idempotent producer's id is bound to it when ids are
    /// bound ([`TableConfig::pid_binder`]).
    pub fn handle_init_as(
        &mut self,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
        principal: &str,
    ) -> InitDecision {
        let refuse = |code, msg: String, epoch| InitDecision::Refuse { status: Status::new(code, msg), epoch };
        if let Some(refused) = self.out_of_producer_ids() {
            return refused;
        }
        let Some(tid) = transactional_id else {
            let mut entries = self.parity_mark();
            let producer_id = self.new_producer_id(PidOwner::Principal(principal));
            let entry = Entry::Grant {
                transactional_id: None,
                producer_id,
                epoch: 0,
                requested_by: None,
                transaction_timeout_ms: 0,
                fence: Vec::new(),
            };
            self.apply(&entry);
            entries.push(entry);
            return InitDecision::Grant { producer_id, epoch: 0, entries, fence: Vec::new() };
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
            if self.by_tid.len() >= self.config.transactional_ids_max {
                return refuse(
                    ErrorCode::PolicyViolation,
                    format!(
                        "the coordinator holds transactional_ids_max {} transactional ids, so it takes no new one \
                         ('{tid}'); reuse an existing transactional id, wait for idle ones to expire \
                         (transactional_id_expiration_ms {}), or raise --transactional-ids-max",
                        self.config.transactional_ids_max, self.config.transactional_id_expiration_ms
                    ),
                    -1,
                );
            }
            let producer_id = self.new_producer_id(PidOwner::TransactionalId(tid));
            return self.grant(tid, producer_id, 0, None, transaction_timeout_ms, Vec::new());
        };
        if let Some(status) = e.markers_pending(tid) {
            return InitDecision::Refuse { status, epoch: -1 };
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
                if !self.owner.contains_key(&pid) && self.had_transactional_id(pid) {
                    // Granted once, now bound to no transactional id: its own expired (a
                    // producer that slept through it), and this id has a newer instance.
                    return refuse(
                        ErrorCode::ProducerFenced,
                        format!(
                            "fenced: producer id {pid} belongs to no transactional id any more (its transactional id \
                             expired after transactional_id_expiration_ms {} idle); transactional id '{tid}' is now \
                             producer id {} at epoch {}: stop this producer",
                            self.config.transactional_id_expiration_ms, e.producer_id, e.epoch
                        ),
                        e.epoch,
                    );
                }
                return if ours && (pid != e.producer_id || epoch < e.epoch) {
                    refuse(ErrorCode::ProducerFenced, e.fenced_message(tid, epoch), e.epoch)
                } else {
                    refuse(
                        ErrorCode::InvalidProducerIdMapping,
                        format!("producer id {pid} epoch {epoch} was never granted to transactional id '{tid}'"),
                        e.epoch,
                    )
                };
            }
        }
        let (producer_id, epoch, marker_epoch) = self.next_epoch(tid, e);
        // Everything registered under the old epoch gets an abort marker at the new one: an open
        // transaction is aborted, and the old epoch is fenced there.
        let fence = Self::targets(e, marker_epoch);
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
        let mut entries = self.parity_mark();
        let entry = Entry::Grant {
            transactional_id: Some(tid.to_string()),
            producer_id,
            epoch,
            requested_by,
            transaction_timeout_ms,
            fence: fence.clone(),
        };
        self.apply(&entry);
        entries.push(entry);
        InitDecision::Grant { producer_id, epoch, entries, fence }
    }

    /// EndTxn: commit or abort the transaction of `(producer_id, epoch)`. With `bump` the
    /// epoch moves on with it (epochfence's own clients, transaction version 2); without, the
    /// transaction ends at its epoch and the next runs at the same one (Kafka clients,
    /// transaction version 1).
    pub fn handle_end_txn(&mut self, tid: &str, producer_id: i64, epoch: i16, commit: bool, bump: bool) -> EndDecision {
        let refuse = |code, msg: String, epoch| EndDecision::Refuse { status: Status::new(code, msg), epoch };
        let Some(e) = self.by_tid.get(tid) else {
            return refuse(
                ErrorCode::InvalidProducerIdMapping,
                format!("transactional id '{tid}' is unknown; call InitProducerId first"),
                -1,
            );
        };
        // Only a bumping end can be told from the next transaction's: without a bump both end
        // the same (producer id, epoch).
        let is_retry = bump && e.last_end == Some(((producer_id, epoch), commit));
        if let Some(status) = e.markers_pending(tid) {
            return EndDecision::Refuse { status, epoch: -1 };
        }
        if is_retry {
            // The end of this transaction completed and its answer was lost.
            return EndDecision::Done { producer_id: e.producer_id, epoch: e.epoch };
        }
        let ended_otherwise = e.last_end.is_some_and(|(ids, c)| ids == (producer_id, epoch) && c != commit);
        if bump && ended_otherwise && e.txn_started_ms.is_none() {
            // Kafka's rule for the transaction that just ended (KIP-890): the other end of it
            // is not a retry, and nothing is open to end.
            let (ended, asked) = if commit { ("aborted", "commit") } else { ("committed", "abort") };
            return refuse(
                ErrorCode::InvalidTxnState,
                format!(
                    "the transaction of '{tid}' at producer id {producer_id} epoch {epoch} {ended}, and no other is \
                     open: this EndTxn asks to {asked} it"
                ),
                e.epoch,
            );
        }
        let ours = self.owner.get(&producer_id).is_some_and(|t| t == tid);
        if !ours {
            return refuse(
                ErrorCode::InvalidProducerIdMapping,
                format!("producer id {producer_id} does not belong to transactional id '{tid}'"),
                e.epoch,
            );
        }
        if producer_id != e.producer_id || epoch < e.epoch {
            return refuse(ErrorCode::ProducerFenced, e.fenced_message(tid, epoch), e.epoch);
        }
        if epoch > e.epoch {
            return refuse(
                ErrorCode::InvalidProducerEpoch,
                format!("epoch {epoch} of '{tid}' was never granted (current is {})", e.epoch),
                e.epoch,
            );
        }
        if e.txn_started_ms.is_none() {
            if bump {
                // No transaction is open (nothing transactional was written): nothing to end.
                return EndDecision::Done { producer_id: e.producer_id, epoch: e.epoch };
            }
            // Kafka's rules: ending the transaction that just ended the same way is a retry
            // whose answer was lost; anything else has no transaction to end.
            return match (e.state(), commit) {
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                    EndDecision::Done { producer_id: e.producer_id, epoch: e.epoch }
                }
                (state, _) => refuse(
                    ErrorCode::InvalidTxnState,
                    format!(
                        "transactional id '{tid}' has no open transaction to {} (its state is {}): add a partition \
                         to a transaction (AddPartitionsToTxn) before ending it",
                        if commit { "commit" } else { "abort" },
                        state.name()
                    ),
                    e.epoch,
                ),
            };
        }
        let entry = self.end_entry(tid, commit, false, bump);
        self.end(entry)
    }

    fn end_entry(&self, tid: &str, commit: bool, timed_out: bool, bump: bool) -> Entry {
        self.end_entry_as(tid, commit, timed_out, false, bump)
    }

    fn end_entry_as(&self, tid: &str, commit: bool, timed_out: bool, expired: bool, bump: bool) -> Entry {
        let e = &self.by_tid[tid];
        let (producer_id, epoch, marker_epoch) =
            if bump { self.next_epoch(tid, e) } else { (e.producer_id, e.epoch, e.epoch) };
        Entry::EndTxn {
            transactional_id: tid.to_string(),
            producer_id,
            epoch,
            prev: (e.producer_id, e.epoch),
            commit,
            timed_out,
            expired,
            markers: Self::targets(e, marker_epoch),
        }
    }

    fn end(&mut self, entry: Entry) -> EndDecision {
        let mut entries = self.parity_mark();
        self.apply(&entry);
        let Entry::EndTxn { producer_id, epoch, commit, ref markers, .. } = entry else {
            unreachable!("end() takes EndTxn entries")
        };
        let markers = markers.clone();
        entries.push(entry);
        EndDecision::Markers { producer_id, epoch, commit, entries, markers }
    }

    /// Abort every open transaction older than its timeout, bumping its epoch so the slow
    /// producer is fenced. Returns `(transactional id, decision)` per aborted transaction.
    pub fn handle_timeouts(&mut self, now_ms: u64) -> Vec<(String, EndDecision)> {
        let expired: Vec<String> = self
            .by_tid
            .iter()
            .filter(|(_, e)| {
                e.pending.is_empty()
                    && e.txn_started_ms.is_some_and(|t| now_ms.saturating_sub(t) > e.transaction_timeout_ms as u64)
            })
            .map(|(t, _)| t.clone())
            .collect();
        expired
            .into_iter()
            .map(|tid| {
                // A timeout fences the slow producer: always with a bump, as Kafka does.
                let entry = self.end_entry(&tid, false, true, true);
                (tid, self.end(entry))
            })
            .collect()
    }

    /// The markers of the bump to `epoch` for `tid` are all written. Returns the entry
    /// recording it (persisting it is an optimisation, not a promise).
    pub fn handle_fence_done(&mut self, tid: &str, epoch: i16) -> Option<Entry> {
        let e = self.by_tid.get(tid)?;
        if e.epoch != epoch || e.pending.is_empty() {
            return None;
        }
        let entry = Entry::FenceDone { transactional_id: tid.to_string(), epoch };
        self.apply(&entry);
        Some(entry)
    }

    /// Every bump whose markers are not confirmed yet, as `(transactional id, epoch, commit,
    /// targets)`, in transactional id order: after a restart the caller resumes writing them.
    pub fn pending_fences(&self) -> Vec<(String, i16, bool, Vec<FenceTarget>)> {
        let mut pending: Vec<_> = self
            .by_tid
            .iter()
            .filter(|(_, e)| !e.pending.is_empty())
            .map(|(t, e)| (t.clone(), e.epoch, e.pending_commit, e.pending.clone()))
            .collect();
        // The same state resumes in the same order (the simulator replays a seed exactly).
        pending.sort_by(|a, b| a.0.cmp(&b.0));
        pending
    }

    /// The expiry sweep, run every so often: a transactional id first found idle (no entry
    /// applied to it since the last sweep) starts its idle clock at `now_ms`; one idle for
    /// `transactional_id_expiration_ms` with no transaction open and no marker owed is
    /// forgotten, with its producer ids, at most [`EXPIRED_PER_ENTRY_MAX`] ids per entry.
    ///
    /// The fence holds across it. An id whose current epoch has partitions registered (writes
    /// outside a transaction, which partitions admit on a verification they keep) is not
    /// forgotten yet: its epoch is fenced first, with abort markers at the next epoch on those
    /// partitions, as a timeout's are (returned in `fences`, to be written once durable); it is
    /// forgotten a whole expiration later. Every other partition its epochs wrote to holds a
    /// marker at its last epoch already. After that, a partition that forgot the producer id
    /// (its own expiry) asks here again, and a forgotten id's producer id (odd, see
    /// `parity_from`) is refused every write ([`ProducerTable::handle_register`]) and every
    /// KIP-360 init as fenced. A new instance of the id gets a new producer id.
    pub fn handle_expiry(&mut self, now_ms: u64) -> Expiry {
        let expiration = self.config.transactional_id_expiration_ms;
        let (mut expired, mut to_fence) = (Vec::new(), Vec::new());
        for (tid, e) in self.by_tid.iter_mut() {
            let quiet = e.pending.is_empty() && e.txn_started_ms.is_none();
            if idle_past(&mut e.idle_since_ms, quiet, now_ms, expiration) {
                if e.registered.is_empty() {
                    expired.push(tid.clone());
                } else {
                    to_fence.push(tid.clone());
                }
            }
        }
        expired.sort();
        to_fence.sort();
        let forgotten = expiry_entries(&expired, |transactional_ids| Entry::TxnIdsExpired { transactional_ids });
        for entry in &forgotten {
            self.apply(entry);
        }
        let fences = to_fence
            .into_iter()
            .map(|tid| {
                let entry = self.end_entry_as(&tid, false, false, true, true);
                (tid, self.end(entry))
            })
            .collect();
        Expiry { forgotten, fences }
    }

    /// (Transactional ids held, `transactional_ids_max`.)
    pub fn transactional_ids(&self) -> (usize, usize) {
        (self.by_tid.len(), self.config.transactional_ids_max)
    }

    /// A partition is to be written by `(producer_id, epoch)`: register it (durably, so a later
    /// bump fences it), or refuse a stale epoch. A transactional registration opens a
    /// transaction if none is open. With `verify_only`, register nothing: accept only a
    /// partition already in the open transaction (a Kafka client's write, transaction version 1).
    pub fn handle_register(&mut self, r: &Registration<'_>, now_ms: u64) -> RegisterDecision {
        let d = self.register(r, now_ms);
        if let RegisterDecision::Accept { .. } = d {
            // A verification is activity too, journaled or not: a producer writing outside a
            // transaction is seen only through them (brokers ask again now and then,
            // `ProducerStates::expire`), so its id's idle clock starts again.
            if let Some(e) = self.owner.get(&r.producer_id).and_then(|t| self.by_tid.get_mut(t)) {
                e.idle_since_ms = None;
            }
        }
        d
    }

    fn register(&mut self, r: &Registration<'_>, now_ms: u64) -> RegisterDecision {
        let Registration { producer_id, epoch, topic, partition, topic_id, transactional, verify_only, .. } = *r;
        let refuse = |code, msg: String, epoch| RegisterDecision::Refuse { status: Status::new(code, msg), epoch };
        let Some(tid) = self.owner.get(&producer_id).cloned() else {
            if producer_id < 0 || ProducerIdBinder::counter(producer_id) >= self.next_producer_id {
                return refuse(
                    ErrorCode::UnknownProducerId,
                    format!("producer id {producer_id} was never granted; call InitProducerId first"),
                    -1,
                );
            }
            if self.had_transactional_id(producer_id) {
                // Odd: a transactional id's, which expired (a producer that slept through it). Its
                // partitions may have forgotten it too; here it stays refused, whatever it writes.
                return refuse(
                    ErrorCode::ProducerFenced,
                    format!(
                        "fenced: producer id {producer_id} belonged to a transactional id that expired (idle past \
                         transactional_id_expiration_ms {}); a new instance may hold that id now: stop this producer",
                        self.config.transactional_id_expiration_ms
                    ),
                    -1,
                );
            }
            // An idempotent-only producer: nothing can fence it, nothing to remember. Its epoch
            // is its own to raise (librdkafka bumps it after a sequence gap and starts again at
            // sequence 0; the partition checks that), so any epoch is accepted.
            if epoch < 0 {
                return refuse(
                    ErrorCode::InvalidProducerEpoch,
                    format!("producer id {producer_id}: epoch {epoch} is negative"),
                    -1,
                );
            }
            if transactional {
                return refuse(
                    ErrorCode::InvalidTxnState,
                    format!(
                        "producer id {producer_id} is an idempotent producer's, with no transactional id, so it \
                         cannot write transactionally; initialise the producer with a transactional id"
                    ),
                    0,
                );
            }
            return RegisterDecision::Accept { entries: Vec::new(), epoch };
        };
        let e = &self.by_tid[&tid];
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
            return refuse(ErrorCode::ProducerFenced, e.fenced_message(&tid, epoch), e.epoch);
        }
        if epoch > e.epoch {
            return refuse(
                ErrorCode::InvalidProducerEpoch,
                format!("producer id {producer_id} epoch {epoch} was never granted (current is {})", e.epoch),
                e.epoch,
            );
        }
        if let Some(status) = e.markers_pending(&tid) {
            return RegisterDecision::Refuse { status, epoch: -1 };
        }
        let current = e.epoch;
        let key = (topic.to_string(), partition, topic_id);
        if verify_only {
            let open = e.txn_started_ms.is_some();
            return if open && e.registered.contains(&key) {
                // Nothing new to persist: the caller waits for the registration it saw to be.
                RegisterDecision::Accept { entries: Vec::new(), epoch: current }
            } else {
                refuse(
                    ErrorCode::InvalidTxnState,
                    format!(
                        "{topic}-{partition} is not part of an open transaction of transactional id '{tid}' (producer id \
                         {producer_id}, epoch {epoch}): add it with AddPartitionsToTxn before writing; a write that \
                         arrives after its transaction ended is refused"
                    ),
                    current,
                )
            };
        }
        let opens_txn = transactional && e.txn_started_ms.is_none();
        let version = r.transaction_version;
        let new_version = transactional && version > 0 && version != e.transaction_version;
        if e.registered.contains(&key) && !opens_txn && !new_version {
            return RegisterDecision::Accept { entries: Vec::new(), epoch: current };
        }
        let entry = Entry::Register {
            producer_id,
            epoch,
            topic: topic.to_string(),
            partition,
            transactional,
            topic_id,
            transaction_version: version,
        };
        self.apply(&entry);
        if opens_txn {
            if let Some(e) = self.by_tid.get_mut(tid.as_str()) {
                e.txn_started_ms = Some(now_ms);
            }
        }
        RegisterDecision::Accept { entries: vec![entry], epoch: current }
    }

    /// Apply one entry: how decisions take effect, and how the journal is replayed.
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::Grant { transactional_id, producer_id, epoch, requested_by, transaction_timeout_ms, fence } => {
                self.next_producer_id = self.next_producer_id.max(ProducerIdBinder::counter(*producer_id) + 1);
                let Some(tid) = transactional_id else { return };
                self.owner.insert(*producer_id, tid.clone());
                let e = self.by_tid.entry(tid.clone()).or_insert_with(|| TxnEntry {
                    producer_id: *producer_id,
                    epoch: *epoch,
                    requested_by: None,
                    transaction_timeout_ms: *transaction_timeout_ms,
                    registered: BTreeSet::new(),
                    txn_started_ms: None,
                    pending: Vec::new(),
                    pending_commit: false,
                    last_result: None,
                    last_end: None,
                    bumps: VecDeque::new(),
                    next_marker_sequence: 0,
                    idle_since_ms: None,
                    transaction_version: 0,
                });
                e.idle_since_ms = None;
                let bumped = e.epoch != *epoch || e.producer_id != *producer_id;
                count_markers(e, fence);
                e.producer_id = *producer_id;
                e.epoch = *epoch;
                e.requested_by = *requested_by;
                e.transaction_timeout_ms = *transaction_timeout_ms;
                e.registered.clear();
                e.txn_started_ms = None;
                e.pending = fence.clone();
                e.pending_commit = false;
                // A new instance owns the id now: no earlier EndTxn may be taken as a retry.
                e.last_end = None;
                if bumped {
                    remember(&mut e.bumps, *epoch, Bump::NewInstance);
                }
            }
            Entry::Register { producer_id, epoch, topic, partition, transactional, topic_id, transaction_version } => {
                if let Some(e) = self.owner.get(producer_id).and_then(|t| self.by_tid.get_mut(t)) {
                    e.idle_since_ms = None;
                    if e.producer_id == *producer_id && e.epoch == *epoch {
                        e.registered.insert((topic.clone(), *partition, *topic_id));
                        if *transactional && *transaction_version > 0 {
                            e.transaction_version = *transaction_version;
                        }
                        if *transactional && e.txn_started_ms.is_none() {
                            // Time is not in the journal: the live path stamps `now` right
                            // after this, a replay stamps the restart time (`restart_clocks`).
                            e.txn_started_ms = Some(u64::MAX);
                        }
                    }
                }
            }
            Entry::EndTxn { transactional_id, producer_id, epoch, prev, commit, timed_out, expired, markers } => {
                self.next_producer_id = self.next_producer_id.max(ProducerIdBinder::counter(*producer_id) + 1);
                self.owner.insert(*producer_id, transactional_id.clone());
                if let Some(e) = self.by_tid.get_mut(transactional_id) {
                    e.idle_since_ms = None;
                    let timeout_ms = e.transaction_timeout_ms;
                    let bumped = (*producer_id, *epoch) != *prev;
                    e.producer_id = *producer_id;
                    e.epoch = *epoch;
                    e.requested_by = None;
                    e.registered.clear();
                    e.txn_started_ms = None;
                    e.pending = markers.clone();
                    e.pending_commit = *commit;
                    count_markers(e, markers);
                    // Only a bumping end can be recognised when retried (see handle_end_txn).
                    e.last_end = (!timed_out && !expired && bumped).then_some((*prev, *commit));
                    if !timed_out && !expired {
                        // A client's end says the version: version 2 bumps, version 1 does not.
                        e.transaction_version = if bumped { 2 } else { 1 };
                    }
                    if bumped {
                        let why = if *expired {
                            Bump::Expired
                        } else if *timed_out {
                            Bump::TimedOut { timeout_ms }
                        } else {
                            Bump::Ended { commit: *commit }
                        };
                        remember(&mut e.bumps, *epoch, why);
                    }
                }
            }
            Entry::FenceDone { transactional_id, epoch } => {
                if let Some(e) = self.by_tid.get_mut(transactional_id) {
                    e.idle_since_ms = None;
                    if e.epoch == *epoch && !e.pending.is_empty() {
                        e.pending.clear();
                        e.last_result = Some(e.pending_commit);
                    }
                }
            }
            Entry::TxnSnapshot(t) => {
                let bumps = t
                    .bumps
                    .iter()
                    .map(|(epoch, kind, timeout_ms)| {
                        let why = match kind {
                            1 => Bump::Ended { commit: true },
                            2 => Bump::Ended { commit: false },
                            3 => Bump::TimedOut { timeout_ms: *timeout_ms },
                            4 => Bump::Expired,
                            _ => Bump::NewInstance,
                        };
                        (*epoch, why)
                    })
                    .collect();
                self.by_tid.insert(
                    t.transactional_id.clone(),
                    TxnEntry {
                        producer_id: t.producer_id,
                        epoch: t.epoch,
                        requested_by: t.requested_by,
                        transaction_timeout_ms: t.transaction_timeout_ms,
                        registered: t.registered.iter().cloned().collect(),
                        // The start time is not recorded: restart_clocks stamps the restart time.
                        txn_started_ms: t.txn_open.then_some(u64::MAX),
                        pending: t.pending.clone(),
                        pending_commit: t.pending_commit,
                        last_result: t.last_result,
                        last_end: t.last_end,
                        bumps,
                        next_marker_sequence: t.next_marker_sequence,
                        idle_since_ms: None,
                        transaction_version: t.transaction_version,
                    },
                );
            }
            Entry::TxnIdsExpired { transactional_ids } => {
                let gone: std::collections::HashSet<&String> = transactional_ids.iter().collect();
                for tid in transactional_ids {
                    self.by_tid.remove(tid);
                }
                self.owner.retain(|_, t| !gone.contains(t));
            }
            Entry::ProducerIds { next_producer_id, owners } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
                self.owner.extend(owners.iter().cloned());
            }
            Entry::ProducerIdParity { from } => {
                self.parity_from.get_or_insert(*from);
            }
            Entry::TopicCreated { .. }
            | Entry::TopicConfigs { .. }
            | Entry::TopicDeleted { .. }
            | Entry::TransactionVersion { .. }
            | Entry::Acls { .. }
            | Entry::ScramCredentials { .. }
            | Entry::PartitionsAdded { .. }
            | Entry::GroupGeneration(_)
            | Entry::OffsetsCommitted { .. }
            | Entry::TxnOffsetsStaged { .. }
            | Entry::LeaderChanged { .. }
            | Entry::IsrChanged { .. }
            | Entry::UncleanLeader { .. }
            | Entry::ReplicasChanged { .. }
            | Entry::Reassigning { .. }
            | Entry::BrokerIncarnation { .. }
            | Entry::GroupsExpired { .. }
            | Entry::GroupsDeleted { .. }
            | Entry::ConsumerGroup(_)
            | Entry::ConsumerGroupsRemoved { .. }
            | Entry::OffsetsDeleted { .. }
            | Entry::TopicSnapshot { .. } => {}
        }
    }

    /// The whole table as journal entries: replaying them into an empty table rebuilds it.
    pub fn snapshot(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self.parity_from.map(|from| Entry::ProducerIdParity { from }).into_iter().collect();
        out.push(Entry::ProducerIds {
            next_producer_id: self.next_producer_id,
            owners: self.owner.iter().map(|(p, t)| (*p, t.clone())).collect(),
        });
        for (tid, e) in &self.by_tid {
            out.push(Entry::TxnSnapshot(TxnSnapshot {
                transactional_id: tid.clone(),
                producer_id: e.producer_id,
                epoch: e.epoch,
                requested_by: e.requested_by,
                transaction_timeout_ms: e.transaction_timeout_ms,
                registered: e.registered.iter().cloned().collect(),
                txn_open: e.txn_started_ms.is_some(),
                pending: e.pending.clone(),
                pending_commit: e.pending_commit,
                last_result: e.last_result,
                last_end: e.last_end,
                bumps: e
                    .bumps
                    .iter()
                    .map(|(epoch, why)| match why {
                        Bump::NewInstance => (*epoch, 0, 0),
                        Bump::Ended { commit: true } => (*epoch, 1, 0),
                        Bump::Ended { commit: false } => (*epoch, 2, 0),
                        Bump::TimedOut { timeout_ms } => (*epoch, 3, *timeout_ms),
                        Bump::Expired => (*epoch, 4, 0),
                    })
                    .collect(),
                next_marker_sequence: e.next_marker_sequence,
                transaction_version: e.transaction_version,
            }));
        }
        out
    }

    /// Every transactional id, sorted.
    pub fn describe(&self, now_ms: u64) -> Vec<TxnSummary> {
        let mut out: Vec<TxnSummary> = self
            .by_tid
            .iter()
            .map(|(t, e)| TxnSummary {
                transactional_id: t.clone(),
                producer_id: e.producer_id,
                epoch: e.epoch,
                partitions: e.registered.iter().map(|(t, p, _)| format!("{t}-{p}")).collect(),
                state: e.state(),
                age_ms: e.txn_started_ms.map(|s| now_ms.saturating_sub(s.min(now_ms))),
                transaction_timeout_ms: e.transaction_timeout_ms,
                transaction_version: e.transaction_version,
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// The current (producer id, epoch) of a transactional id.
    pub fn current(&self, tid: &str) -> Option<(i64, i16)> {
        self.by_tid.get(tid).map(|e| (e.producer_id, e.epoch))
    }

    /// The transaction state of a transactional id.
    pub fn state(&self, tid: &str) -> Option<TxnState> {
        self.by_tid.get(tid).map(TxnEntry::state)
    }
}

/// The markers of one end or fence were handed out: the next one gets the sequence after
/// theirs (wrapping from `i32::MAX` to 0, as record sequences do).
fn count_markers(e: &mut TxnEntry, targets: &[FenceTarget]) {
    if let Some(seq) = targets.first().map(|t| t.marker_sequence).filter(|s| *s >= 0) {
        e.next_marker_sequence = protocol::batch::increment_sequence(seq, 1);
    }
}

fn remember(bumps: &mut VecDeque<(i16, Bump)>, epoch: i16, why: Bump) {
    if bumps.len() == BUMPS_REMEMBERED {
        bumps.pop_front();
    }
    bumps.push_back((epoch, why));
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

    fn register_refused(t: &mut ProducerTable, pid: i64, epoch: i16, transactional: bool) -> ErrorCode {
        match t.handle_register(&Registration::new(pid, epoch, ("t", 9), 0, transactional), 0) {
            RegisterDecision::Refuse { status, .. } => status.code,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Issue 27, item 4: an idle transactional id is forgotten, and the producer that slept
    /// through it is refused everything when it wakes; the new instance gets a new producer id.
    #[test]
    fn an_expired_transactional_id_is_forgotten_and_its_sleeping_producer_stays_fenced() {
        let config = TableConfig { transactional_id_expiration_ms: 1_000, ..TableConfig::default() };
        let mut t = ProducerTable::new(config);
        let (old, e, _) = grant(t.handle_init(Some("z"), T, None));
        assert!(matches!(
            t.handle_register(&Registration::new(old, e, ("t", 9), 0, true), 0),
            RegisterDecision::Accept { .. }
        ));
        // An open transaction never expires (its timeout ends it first).
        assert!(t.handle_expiry(0).is_empty());
        assert!(t.handle_expiry(5_000).is_empty(), "open: not idle");
        assert!(matches!(t.handle_end_txn("z", old, e, true, false), EndDecision::Markers { .. }));
        t.handle_fence_done("z", e);
        assert!(t.handle_expiry(6_000).is_empty(), "the first sweep that finds it idle starts its clock");
        assert!(t.handle_expiry(6_999).is_empty(), "idle for less than the expiration");
        let expiry = t.handle_expiry(7_000);
        assert!(expiry.fences.is_empty(), "nothing registered outside a transaction: nothing to fence");
        assert_eq!(expiry.forgotten, vec![Entry::TxnIdsExpired { transactional_ids: vec!["z".into()] }]);
        assert_eq!(t.current("z"), None);
        assert_eq!(t.transactional_ids().0, 0);
        // The new instance gets a new producer id, never the old one.
        let (new, e_new, fence) = grant(t.handle_init(Some("z"), T, None));
        assert!(new > old && e_new == 0 && fence.is_empty(), "{new} {e_new}");
        // The sleeper wakes: its writes (in a transaction or not: a transactional id's producer
        // ids are odd, so the table knows it had one), its KIP-360 init and its EndTxn are refused.
        assert_eq!(old % 2, 1);
        assert_eq!(register_refused(&mut t, old, e, true), ErrorCode::ProducerFenced);
        assert_eq!(register_refused(&mut t, old, e, false), ErrorCode::ProducerFenced);
        assert_eq!(refused(t.handle_init(Some("z"), T, Some((old, e)))).0, ErrorCode::ProducerFenced);
        assert!(matches!(
            t.handle_end_txn("z", old, e, true, false),
            EndDecision::Refuse { status, .. } if status.code == ErrorCode::InvalidProducerIdMapping
        ));
        // A replay of the journal (with the expiry) rebuilds the same table.
        let mut replayed = ProducerTable::new(TableConfig::default());
        for entry in t.snapshot() {
            replayed.apply(&entry);
        }
        assert_eq!(replayed.current("z"), Some((new, 0)));
        assert_eq!(register_refused(&mut replayed, old, e, false), ErrorCode::ProducerFenced);
        // An idempotent producer's (even) id is still accepted at any epoch.
        let (idempotent, _, _) = grant(t.handle_init(None, 0, None));
        assert_eq!(idempotent % 2, 0);
        assert!(matches!(
            t.handle_register(&Registration::new(idempotent, 3, ("t", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        assert_eq!(register_refused(&mut t, idempotent, 3, true), ErrorCode::InvalidTxnState);
    }

    /// A journal from before the rule holds idempotent producers' ids of either parity: only
    /// ids from the recorded start of the rule on are judged by theirs.
    #[test]
    fn producer_ids_granted_before_the_parity_rule_are_not_judged_by_it() {
        let mut t = ProducerTable::new(TableConfig::default());
        let legacy = Entry::Grant {
            transactional_id: None,
            producer_id: 7,
            epoch: 0,
            requested_by: None,
            transaction_timeout_ms: 0,
            fence: Vec::new(),
        };
        t.apply(&legacy);
        let InitDecision::Grant { producer_id, entries, .. } = t.handle_init(Some("z"), T, None) else { panic!() };
        assert_eq!(entries[0], Entry::ProducerIdParity { from: 8 }, "recorded before the first id under the rule");
        assert_eq!(producer_id, 9);
        assert!(matches!(
            t.handle_register(&Registration::new(7, 0, ("t", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        let mut replayed = ProducerTable::new(TableConfig::default());
        for e in t.snapshot() {
            replayed.apply(&e);
        }
        assert_eq!(replayed.snapshot()[0], Entry::ProducerIdParity { from: 8 });
        assert_eq!(grant(replayed.handle_init(None, 0, None)).0, 10, "even, after every id handed out");
    }

    #[test]
    fn activity_restarts_the_idle_clock_and_pending_markers_keep_an_id() {
        let config = TableConfig { transactional_id_expiration_ms: 1_000, ..TableConfig::default() };
        let mut t = ProducerTable::new(config);
        let (pid, e, _) = grant(t.handle_init(Some("z"), T, None));
        assert!(t.handle_expiry(0).is_empty());
        // A new instance just before the expiration: its grant restarts the clock.
        let (_, e1, _) = grant(t.handle_init(Some("z"), T, None));
        assert!(e1 > e);
        assert!(t.handle_expiry(1_500).is_empty(), "touched since the last sweep");
        assert!(t.handle_expiry(2_000).is_empty());
        // A verification the table accepts without journaling anything counts as activity too
        // (a producer writing outside a transaction to partitions registered long ago).
        let (pid1, e_x, _) = grant(t.handle_init(Some("x"), T, None));
        let reg = Registration::new(pid1, e_x, ("t", 9), 0, false);
        assert!(matches!(t.handle_register(&reg, 0), RegisterDecision::Accept { .. }));
        assert!(matches!(t.handle_register(&reg, 0), RegisterDecision::Accept { entries, .. } if entries.is_empty()));
        assert_eq!(t.handle_expiry(2_500).forgotten.len(), 1, "z, idle since 1_500; not x");
        assert!(matches!(t.handle_register(&reg, 0), RegisterDecision::Accept { entries, .. } if entries.is_empty()));
        assert!(t.handle_expiry(4_000).is_empty(), "x was heard from since the last sweep");
        assert!(t.handle_expiry(4_500).is_empty());
        assert_eq!(t.handle_expiry(5_000).fences.len(), 1, "idle since 4_000, with a partition registered: fenced");
        // Markers owed keep an id whatever its age.
        let (pid2, e2, _) = grant(t.handle_init(Some("y"), T, None));
        assert!(matches!(
            t.handle_register(&Registration::new(pid2, e2, ("t", 9), 0, true), 0),
            RegisterDecision::Accept { .. }
        ));
        assert!(matches!(t.handle_end_txn("y", pid2, e2, false, false), EndDecision::Markers { .. }));
        assert!(t.handle_expiry(10_000).is_empty());
        assert!(t.handle_expiry(20_000).is_empty(), "markers still owed");
        assert!(pid2 > pid);
    }

    /// Writes outside a transaction are admitted on a verification the partition keeps until
    /// a marker of a newer epoch: forgetting such an id without a marker would leave its
    /// sleeping producer admitted there for good. So its epoch is fenced first.
    #[test]
    fn an_idle_id_with_writes_outside_transactions_is_fenced_before_it_is_forgotten() {
        let config = TableConfig { transactional_id_expiration_ms: 1_000, ..TableConfig::default() };
        let mut t = ProducerTable::new(config);
        let (pid, e, _) = grant(t.handle_init(Some("z"), T, None));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e, ("t", 9), 3, false), 0),
            RegisterDecision::Accept { .. }
        ));
        assert!(t.handle_expiry(0).is_empty());
        let expiry = t.handle_expiry(1_000);
        assert!(expiry.forgotten.is_empty(), "not forgotten before its fence");
        let [(tid, EndDecision::Markers { epoch, commit: false, markers, entries, .. })] = &expiry.fences[..] else {
            panic!("one fence: {expiry:?}")
        };
        assert_eq!((tid.as_str(), *epoch), ("z", e + 1));
        assert_eq!((markers[0].partition, markers[0].producer_id, markers[0].marker_epoch), (3, pid, e + 1));
        assert!(matches!(&entries[0], Entry::EndTxn { expired: true, .. }));
        // Until its markers are written it stays; then the sleeper's epoch is refused as fenced.
        assert!(t.handle_expiry(10_000).is_empty());
        t.handle_fence_done("z", e + 1);
        let InitDecision::Refuse { status, .. } = t.handle_init(Some("z"), T, Some((pid, e))) else { panic!() };
        assert_eq!(status.code, ErrorCode::ProducerFenced);
        assert!(status.message.contains("sat idle past its expiration"), "{status}");
        assert!(t.handle_expiry(11_000).is_empty());
        assert_eq!(t.handle_expiry(12_000).forgotten.len(), 1, "forgotten a whole expiration after its fence");
    }

    #[test]
    fn a_new_transactional_id_beyond_the_cap_is_a_policy_violation() {
        let config = TableConfig { transactional_ids_max: 2, ..TableConfig::default() };
        let mut t = ProducerTable::new(config);
        grant(t.handle_init(Some("a"), T, None));
        grant(t.handle_init(Some("b"), T, None));
        let InitDecision::Refuse { status, .. } = t.handle_init(Some("c"), T, None) else { panic!("over the cap") };
        assert_eq!(status.code, ErrorCode::PolicyViolation);
        assert!(status.message.contains("transactional_ids_max 2"), "{status}");
        // Existing ids go on; idempotent producers are not capped.
        grant(t.handle_init(Some("a"), T, None));
        grant(t.handle_init(None, 0, None));
        assert_eq!(t.transactional_ids(), (2, 2));
    }

    #[test]
    fn new_and_idempotent_producers_get_fresh_ids_at_epoch_zero() {
        let mut t = ProducerTable::new(TableConfig::default());
        // Idempotent producers get even ids, transactional ids odd ones, never one twice.
        assert_eq!(grant(t.handle_init(None, 0, None)).0, 0);
        assert_eq!(grant(t.handle_init(None, 0, None)).0, 2);
        let (pid, epoch, fence) = grant(t.handle_init(Some("orders"), T, None));
        assert_eq!((pid, epoch), (3, 0));
        assert_eq!(grant(t.handle_init(Some("payments"), T, None)).0, 5);
        assert_eq!(grant(t.handle_init(None, 0, None)).0, 6);
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
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e0, ("t", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e0, ("t", 9), 1, false), 0),
            RegisterDecision::Accept { .. }
        ));
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
        match t.handle_register(&Registration::new(pid, e0, ("never-touched", 9), 7, false), 0) {
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
            t.handle_register(&Registration::new(5, 0, ("t", 9), 0, false), 0),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::UnknownProducerId, .. }, .. }
        ));
        let (pid, _, _) = grant(t.handle_init(None, 0, None));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, 0, ("t", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
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
        assert!(matches!(
            t.handle_register(&Registration::new(pid, EPOCH_GRANT_MAX, ("t", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        let (pid2, e, fence) = grant(t.handle_init(Some("x"), T, None));
        assert_ne!(pid2, pid);
        assert_eq!(e, 0);
        assert_eq!(
            fence,
            vec![FenceTarget {
                producer_id: pid,
                marker_epoch: EPOCH_RETIRED,
                marker_sequence: 0,
                topic: "t".into(),
                partition: 0,
                topic_id: 9,
            }]
        );
        t.handle_fence_done("x", 0);
        assert!(matches!(
            t.handle_register(&Registration::new(pid, EPOCH_GRANT_MAX, ("t", 9), 1, false), 0),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::ProducerFenced, .. }, .. }
        ));
    }

    /// Issue 29: with bound producer ids, grants name their owner, and a transactional id whose
    /// producer id was granted unbound (before the authorizer) moves to a bound one at its next
    /// init, the old one retired; the watermark counts the counter, not the whole id.
    #[test]
    fn bound_producer_ids_name_their_owner_and_unbound_ones_are_replaced() {
        let secret = protocol::auth::ClusterSecret::new(vec![3; 32]).unwrap();
        let binder = ProducerIdBinder::new(&secret);
        let config = TableConfig { pid_binder: Some(binder.clone()), ..TableConfig::default() };
        let mut t = ProducerTable::new(config);
        // Granted before the authorizer: unbound.
        t.apply(&Entry::Grant {
            transactional_id: Some("x".into()),
            producer_id: 1,
            epoch: 3,
            requested_by: None,
            transaction_timeout_ms: T,
            fence: vec![],
        });
        let (pid, epoch, _) = grant(t.handle_init(Some("x"), T, None));
        assert!(binder.bound_to(pid, PidOwner::TransactionalId("x")), "{pid}");
        assert_eq!((ProducerIdBinder::counter(pid) % 2, epoch), (1, 0), "a new odd counter at epoch 0");
        // The next init bumps the bound id, as any.
        let (again, epoch, _) = grant(t.handle_init(Some("x"), T, None));
        assert_eq!((again, epoch), (pid, 1));
        let (idempotent, _, _) = grant(t.handle_init_as(None, T, None, "User:alice"));
        assert!(binder.bound_to(idempotent, PidOwner::Principal("User:alice")));
        assert!(!binder.bound_to(idempotent, PidOwner::Principal("User:mallory")));
        assert!(t.next_producer_id() < 100, "the watermark is the counter: {}", t.next_producer_id());
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
        if let RegisterDecision::Accept { entries, .. } =
            t.handle_register(&Registration::new(pid, e, ("t", 9), 0, false), 0)
        {
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
        assert_eq!(r.describe(0), t.describe(0));
        assert_eq!(r.next_producer_id(), t.next_producer_id());
        assert_eq!(r.pending_fences(), t.pending_fences());
    }

    #[test]
    fn a_snapshot_rebuilds_the_same_table() {
        let mut t = ProducerTable::new(TableConfig::default());
        grant(t.handle_init(None, 0, None));
        let (pid, e0, _) = grant(t.handle_init(Some("a"), T, None));
        register(&mut t, "a", "x", 0, 0);
        let (e1, _, _) = markers(t.handle_end_txn("a", pid, e0, true, true));
        t.handle_fence_done("a", e1);
        register(&mut t, "a", "x", 1, 3);
        grant(t.handle_init(Some("b"), T, None));
        let (_, _, _) = grant(t.handle_init(Some("b"), T, None));
        let mut r = ProducerTable::new(TableConfig::default());
        for e in t.snapshot() {
            r.apply(&Entry::decode(e.encode()).unwrap());
        }
        r.restart_clocks(3);
        assert_eq!(r.describe(3), t.describe(3));
        assert_eq!(r.next_producer_id(), t.next_producer_id());
        assert_eq!(r.pending_fences(), t.pending_fences());
        // The retry memory and the fencing reasons survive too.
        assert_eq!(r.handle_end_txn("a", pid, e0, true, true), EndDecision::Done { producer_id: pid, epoch: e1 });
    }

    #[test]
    fn invalid_timeouts_and_ids_are_refused() {
        let mut t = ProducerTable::new(TableConfig::default());
        assert_eq!(refused(t.handle_init(Some("a"), 0, None)).0, ErrorCode::InvalidTransactionTimeout);
        assert_eq!(refused(t.handle_init(Some("a"), i32::MAX, None)).0, ErrorCode::InvalidTransactionTimeout);
        assert_eq!(refused(t.handle_init(Some(""), T, None)).0, ErrorCode::InvalidRequest);
    }

    fn register(t: &mut ProducerTable, tid: &str, topic: &str, partition: i32, now: u64) {
        let (pid, e) = t.current(tid).unwrap();
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e, (topic, 9), partition, true), now),
            RegisterDecision::Accept { .. }
        ));
    }

    fn markers(d: EndDecision) -> (i16, bool, Vec<FenceTarget>) {
        match d {
            EndDecision::Markers { epoch, commit, markers, .. } => (epoch, commit, markers),
            other => panic!("expected markers, got {other:?}"),
        }
    }

    #[test]
    fn a_transaction_goes_ongoing_prepare_complete_and_bumps_the_epoch() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("tx"), T, None));
        assert_eq!(t.state("tx"), Some(TxnState::Empty));
        register(&mut t, "tx", "a", 0, 10);
        register(&mut t, "tx", "b", 1, 11);
        assert_eq!(t.state("tx"), Some(TxnState::Ongoing));
        assert_eq!(t.describe(15)[0].age_ms, Some(5));
        let (e1, commit, m) = markers(t.handle_end_txn("tx", pid, e0, true, true));
        assert_eq!((e1, commit, m.len()), (e0 + 1, true, 2));
        assert!(m.iter().all(|f| f.marker_epoch == e1));
        assert_eq!(t.state("tx"), Some(TxnState::PrepareCommit));
        t.handle_fence_done("tx", e1);
        assert_eq!(t.state("tx"), Some(TxnState::CompleteCommit));
        // The next transaction starts empty at the new epoch.
        let (_, abort, m) = {
            register(&mut t, "tx", "a", 0, 20);
            markers(t.handle_end_txn("tx", pid, e1, false, true))
        };
        assert!(!abort && m.len() == 1);
    }

    #[test]
    fn a_delayed_end_txn_of_an_earlier_transaction_cannot_end_a_later_one() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("tx"), T, None));
        register(&mut t, "tx", "a", 0, 0);
        let (e1, _, _) = markers(t.handle_end_txn("tx", pid, e0, true, true));
        t.handle_fence_done("tx", e1);
        register(&mut t, "tx", "a", 0, 5); // the next transaction is open at e1
                                           // The first EndTxn arrives again, late: it is recognised as a retry, touches nothing.
        assert_eq!(t.handle_end_txn("tx", pid, e0, true, true), EndDecision::Done { producer_id: pid, epoch: e1 });
        assert_eq!(t.state("tx"), Some(TxnState::Ongoing));
        // The same late request with the other outcome is refused.
        match t.handle_end_txn("tx", pid, e0, false, true) {
            EndDecision::Refuse { status, epoch } => {
                assert_eq!((status.code, epoch), (ErrorCode::ProducerFenced, e1));
                assert!(status.message.contains("committed"), "{}", status.message);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.state("tx"), Some(TxnState::Ongoing));
    }

    #[test]
    fn a_lost_commit_answer_retried_after_a_new_instance_inits_is_fenced_not_a_takeover() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("tx"), T, None));
        register(&mut t, "tx", "a", 0, 0);
        let (e1, _, _) = markers(t.handle_end_txn("tx", pid, e0, true, true));
        t.handle_fence_done("tx", e1);
        // A's answer was lost; meanwhile B initialises.
        let (_, e2, _) = grant(t.handle_init(Some("tx"), T, None));
        match t.handle_end_txn("tx", pid, e0, true, true) {
            EndDecision::Refuse { status, epoch } => assert_eq!((status.code, epoch), (ErrorCode::ProducerFenced, e2)),
            other => panic!("A must not be handed B's epoch: {other:?}"),
        }
    }

    #[test]
    fn nothing_to_end_without_a_transactional_write() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("tx"), T, None));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e0, ("a", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        assert_eq!(t.handle_end_txn("tx", pid, e0, true, true), EndDecision::Done { producer_id: pid, epoch: e0 });
    }

    #[test]
    fn registration_waits_while_the_new_epochs_markers_are_written() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("tx"), T, None));
        register(&mut t, "tx", "a", 0, 0);
        let (e1, _, _) = markers(t.handle_end_txn("tx", pid, e0, true, true));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e1, ("a", 9), 0, true), 1),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::ConcurrentTransactions, .. }, .. }
        ));
        t.handle_fence_done("tx", e1);
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e1, ("a", 9), 0, true), 2),
            RegisterDecision::Accept { .. }
        ));
    }

    #[test]
    fn init_aborts_the_open_transaction_of_the_previous_instance() {
        let mut t = ProducerTable::new(TableConfig::default());
        grant(t.handle_init(Some("tx"), T, None));
        register(&mut t, "tx", "a", 0, 0);
        let (_, e1, fence) = grant(t.handle_init(Some("tx"), T, None));
        assert_eq!(fence.len(), 1);
        assert_eq!(t.state("tx"), Some(TxnState::PrepareAbort));
        t.handle_fence_done("tx", e1);
        assert_eq!(t.state("tx"), Some(TxnState::CompleteAbort));
    }

    #[test]
    fn an_expired_transaction_is_aborted_and_its_producer_fenced_with_the_reason() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("slow"), 1_000, None));
        register(&mut t, "slow", "a", 0, 100);
        assert!(t.handle_timeouts(1_000).is_empty());
        let out = t.handle_timeouts(1_101);
        assert_eq!(out.len(), 1);
        let (e1, commit, m) = markers(out[0].1.clone());
        assert_eq!((e1, commit, m.len()), (e0 + 1, false, 1));
        t.handle_fence_done("slow", e1);
        match t.handle_register(&Registration::new(pid, e0, ("b", 9), 0, true), 1_200) {
            RegisterDecision::Refuse { status, .. } => {
                assert_eq!(status.code, ErrorCode::ProducerFenced);
                assert!(status.message.contains("outlived its timeout of 1000 ms"), "{}", status.message);
            }
            other => panic!("{other:?}"),
        }
        match t.handle_end_txn("slow", pid, e0, true, true) {
            EndDecision::Refuse { status, .. } => assert!(status.message.contains("timeout"), "{}", status.message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_transactional_registrations_open_no_transaction() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("plain"), 1_000, None));
        assert!(matches!(
            t.handle_register(&Registration::new(pid, e0, ("a", 9), 0, false), 0),
            RegisterDecision::Accept { .. }
        ));
        assert_eq!(t.state("plain"), Some(TxnState::Empty));
        assert!(t.handle_timeouts(10_000).is_empty(), "nothing to time out");
    }

    #[test]
    fn replay_rebuilds_transactions_and_pending_markers() {
        let mut t = ProducerTable::new(TableConfig::default());
        let mut log = Vec::new();
        if let InitDecision::Grant { entries, .. } = t.handle_init(Some("tx"), T, None) {
            log.extend(entries);
        }
        let (pid, e0) = t.current("tx").unwrap();
        if let RegisterDecision::Accept { entries, .. } =
            t.handle_register(&Registration::new(pid, e0, ("a", 9), 0, true), 5)
        {
            log.extend(entries);
        }
        if let EndDecision::Markers { entries, .. } = t.handle_end_txn("tx", pid, e0, true, true) {
            log.extend(entries);
        }
        let mut r = ProducerTable::new(TableConfig::default());
        for e in &log {
            r.apply(e);
        }
        assert_eq!(r.state("tx"), Some(TxnState::PrepareCommit));
        let pending = r.pending_fences();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].2, "the resumed markers are commit markers");
    }

    fn verify(t: &mut ProducerTable, pid: i64, epoch: i16, partition: i32) -> RegisterDecision {
        let r = Registration { verify_only: true, ..Registration::new(pid, epoch, ("a", 9), partition, true) };
        t.handle_register(&r, 0)
    }

    fn refused_end(d: EndDecision) -> ErrorCode {
        match d {
            EndDecision::Refuse { status, .. } => status.code,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Transaction version 1 (Kafka clients): transactions end at the producer's epoch, one
    /// after another; each end's markers get the next marker sequence.
    #[test]
    fn transactions_without_a_bump_end_at_one_epoch_with_counted_markers() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("k"), T, None));
        register(&mut t, "k", "a", 0, 0);
        register(&mut t, "k", "a", 1, 0);
        let (epoch, commit, m) = markers(t.handle_end_txn("k", pid, e0, true, false));
        assert_eq!((epoch, commit), (e0, true), "no bump");
        assert!(m.iter().all(|f| f.marker_epoch == e0 && f.marker_sequence == 0), "{m:?}");
        assert_eq!(t.state("k"), Some(TxnState::PrepareCommit));
        t.handle_fence_done("k", e0);
        assert_eq!(t.state("k"), Some(TxnState::CompleteCommit));
        assert_eq!(t.current("k"), Some((pid, e0)));
        // The next transaction at the same epoch.
        register(&mut t, "k", "a", 0, 5);
        let (_, commit, m) = markers(t.handle_end_txn("k", pid, e0, false, false));
        assert!(!commit);
        assert_eq!(m.iter().map(|f| (f.partition, f.marker_sequence)).collect::<Vec<_>>(), [(0, 1)]);
        t.handle_fence_done("k", e0);
        // A new instance fences at a bumped epoch, with the sequence after those.
        register(&mut t, "k", "a", 1, 6);
        let (_, e1, fence) = grant(t.handle_init(Some("k"), T, None));
        assert_eq!(e1, e0 + 1);
        assert_eq!(fence.iter().map(|f| (f.marker_epoch, f.marker_sequence)).collect::<Vec<_>>(), [(e1, 2)]);
        // The old instance's EndTxn is fenced, bump or not.
        t.handle_fence_done("k", e1);
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0, true, false)), ErrorCode::ProducerFenced);
        // The sequence survives a snapshot.
        let mut r = ProducerTable::new(TableConfig::default());
        for e in t.snapshot() {
            r.apply(&Entry::decode(e.encode()).unwrap());
        }
        register(&mut r, "k", "a", 0, 7);
        let (_, _, m) = markers(r.handle_end_txn("k", pid, e1, true, false));
        assert_eq!(m[0].marker_sequence, 3);
    }

    /// Issue 31: each transaction records the version it runs under, from the request that
    /// added a partition and from its end (a bumping end is version 2's), through a journal
    /// replay and a snapshot; a verification records nothing.
    #[test]
    fn a_transaction_records_the_version_it_runs_under() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("k"), T, None));
        let version = |t: &ProducerTable| t.describe(0)[0].transaction_version;
        assert_eq!(version(&t), 0, "nothing told yet");
        let mut journal = Vec::new();
        let mut add = |t: &mut ProducerTable, partition, epoch, v| {
            let r = Registration { transaction_version: v, ..Registration::new(pid, epoch, ("a", 9), partition, true) };
            match t.handle_register(&r, 0) {
                RegisterDecision::Accept { entries, .. } => journal.extend(entries),
                other => panic!("{other:?}"),
            }
        };
        add(&mut t, 0, e0, 1); // a Kafka client's AddPartitionsToTxn v0-3
        assert_eq!(version(&t), 1);
        assert!(matches!(verify(&mut t, pid, e0, 0), RegisterDecision::Accept { .. }));
        assert_eq!(version(&t), 1, "a verification tells nothing");
        let (_, _, _) = markers(t.handle_end_txn("k", pid, e0, true, false));
        assert_eq!(version(&t), 1, "ended without a bump");
        t.handle_fence_done("k", e0);
        add(&mut t, 0, e0, 2); // Produce v12's implicit add
        assert_eq!(version(&t), 2);
        add(&mut t, 1, e0, 1); // then version 1 again, within the one transaction: the last says
        assert_eq!(version(&t), 1);
        let (e1, _, _) = markers(t.handle_end_txn("k", pid, e0, true, true));
        assert_eq!(version(&t), 2, "EndTxn v5 bumps: version 2");
        t.handle_fence_done("k", e1);
        // A snapshot keeps it, and so does a replay of what the registrations journaled.
        let mut r = ProducerTable::new(TableConfig::default());
        for e in t.snapshot() {
            r.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!(version(&r), 2);
        let Some(Entry::Register { transaction_version, .. }) = journal.first() else { panic!("{journal:?}") };
        assert_eq!(*transaction_version, 1);
        let decoded = Entry::decode(journal[0].encode()).unwrap();
        assert_eq!(decoded, journal[0]);
    }

    /// Kafka's EndTxn v5 rules for the transaction that just ended (KIP-890): the same end again
    /// is a retry (its answer lost), the other end of it INVALID_TXN_STATE, an end two epochs
    /// behind fenced.
    #[test]
    fn the_other_end_of_a_bumped_transaction_is_an_invalid_state() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("k"), T, None));
        register(&mut t, "k", "a", 0, 0);
        let (e1, _, _) = markers(t.handle_end_txn("k", pid, e0, true, true));
        t.handle_fence_done("k", e1);
        assert_eq!(t.handle_end_txn("k", pid, e0, true, true), EndDecision::Done { producer_id: pid, epoch: e1 });
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0, false, true)), ErrorCode::InvalidTxnState);
        register(&mut t, "k", "a", 0, 1);
        let (e2, _, _) = markers(t.handle_end_txn("k", pid, e1, false, true));
        t.handle_fence_done("k", e2);
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e1, true, true)), ErrorCode::InvalidTxnState);
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0, false, true)), ErrorCode::ProducerFenced);
    }

    /// Kafka's EndTxn rules without a bump: ending the transaction that just ended the same way
    /// is a lost answer retried; any other end without an open transaction has nothing to end.
    #[test]
    fn an_end_without_an_open_transaction_is_a_retry_or_invalid() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("k"), T, None));
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0, true, false)), ErrorCode::InvalidTxnState, "Empty");
        register(&mut t, "k", "a", 0, 0);
        markers(t.handle_end_txn("k", pid, e0, true, false));
        assert_eq!(
            refused_end(t.handle_end_txn("k", pid, e0, true, false)),
            ErrorCode::ConcurrentTransactions,
            "markers still being written"
        );
        t.handle_fence_done("k", e0);
        assert_eq!(t.handle_end_txn("k", pid, e0, true, false), EndDecision::Done { producer_id: pid, epoch: e0 });
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0, false, false)), ErrorCode::InvalidTxnState);
        assert_eq!(refused_end(t.handle_end_txn("k", pid, e0 + 1, true, false)), ErrorCode::InvalidProducerEpoch);
        // A bumping client's retry rule never mistakes a same-epoch end for a retry.
        register(&mut t, "k", "a", 0, 1);
        let (_, commit, m) = markers(t.handle_end_txn("k", pid, e0, true, false));
        assert!(commit && m.len() == 1, "the second transaction is ended, not taken as a retry of the first");
    }

    /// A leader verifying a Kafka client's transactional write only checks: the partition must
    /// be in the open transaction, and nothing is registered.
    #[test]
    fn a_verify_only_registration_accepts_only_partitions_of_the_open_transaction() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, e0, _) = grant(t.handle_init(Some("k"), T, None));
        let code = |d: RegisterDecision| match d {
            RegisterDecision::Refuse { status, .. } => status.code,
            RegisterDecision::Accept { entries, .. } => {
                assert!(entries.is_empty(), "a verification registers nothing");
                ErrorCode::None
            }
        };
        assert_eq!(code(verify(&mut t, pid, e0, 0)), ErrorCode::InvalidTxnState, "no transaction open");
        register(&mut t, "k", "a", 0, 0);
        assert_eq!(code(verify(&mut t, pid, e0, 0)), ErrorCode::None);
        assert_eq!(code(verify(&mut t, pid, e0, 1)), ErrorCode::InvalidTxnState, "not added to the transaction");
        assert_eq!(t.describe(0)[0].partitions, ["a-0"]);
        markers(t.handle_end_txn("k", pid, e0, true, false));
        t.handle_fence_done("k", e0);
        assert_eq!(code(verify(&mut t, pid, e0, 0)), ErrorCode::InvalidTxnState, "a write after its transaction ended");
        grant(t.handle_init(Some("k"), T, None));
        assert_eq!(code(verify(&mut t, pid, e0, 0)), ErrorCode::ProducerFenced);
    }

    /// librdkafka's idempotent producer raises its own epoch; the coordinator lets it.
    #[test]
    fn an_idempotent_producer_id_registers_at_any_epoch() {
        let mut t = ProducerTable::new(TableConfig::default());
        let (pid, _, _) = grant(t.handle_init(None, 0, None));
        for epoch in [0, 1, 7] {
            assert!(matches!(
                t.handle_register(&Registration::new(pid, epoch, ("t", 9), 0, false), 0),
                RegisterDecision::Accept { epoch: e, .. } if e == epoch
            ));
        }
        assert!(matches!(
            t.handle_register(&Registration::new(pid, 1, ("t", 9), 0, true), 0),
            RegisterDecision::Refuse { status: Status { code: ErrorCode::InvalidTxnState, .. }, .. }
        ));
    }
}
