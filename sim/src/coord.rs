//! The coordinator: grants, transaction ends and their markers, timeouts, and the journal
//! of the real `ProducerTable` and `Cluster` decisions.

use super::*;

impl Sim {
    /// Journal the coordinator's cluster decisions (leaderships, ISRs, incarnations).
    pub(crate) fn journal_cluster(&mut self, entries: Vec<Entry>, why: &'static str) {
        for e in &entries {
            if let Entry::LeaderChanged { partition, leader_id, leader_epoch, isr, elr, .. } = e {
                self.out.elections += 1;
                *self.out.decisions.entry(why).or_default() += 1;
                let (p, l, le, isr, elr) = (*partition, *leader_id, *leader_epoch, isr.clone(), elr.clone());
                self.trace(|| {
                    format!(
                        "coordinator: {why}: broker {l} leads partition {p} at epoch {le}, ISR {isr:?}, ELR {elr:?}"
                    )
                });
            }
        }
        self.journal.extend(entries);
    }

    /// Send a transaction marker to whoever leads now (if anyone: else it is resent later),
    /// where the coordinator's rule sends it (`Cluster::marker_route`).
    pub(crate) fn send_marker(&mut self, tid: &str, target: &FenceTarget, commit: bool) {
        let now = self.clock(COORD);
        let (leader, leader_epoch) = match self.cluster.marker_route(target, now) {
            MarkerRoute::Leader { leader_id, leader_epoch, .. } => (leader_id, leader_epoch),
            // The partition's topic was deleted, and a broker may still serve its old replica:
            // resent (and asked again) later.
            MarkerRoute::WaitForDrop => return,
            // Deleted, and no broker can serve the old replica any more: none is owed.
            MarkerRoute::NotNeeded => {
                let (epoch, producer_id, partition) = (target.marker_epoch, target.producer_id, target.partition);
                self.trace(|| format!("coordinator: marker for {tid} to deleted partition {partition} no longer owed"));
                let topic_id = target.topic_id;
                let msg = Msg::MarkerResp { tid: tid.to_string(), epoch, producer_id, partition, topic_id, ok: true };
                let incarnation = self.incarnations.get(&COORD).copied().unwrap_or(0);
                return self.schedule(1, Event::Deliver { to: COORD, from: COORD, incarnation, msg });
            }
        };
        if leader > 0 {
            let m = Msg::Marker { tid: tid.to_string(), target: target.clone(), leader_epoch, commit };
            self.send(COORD, leader as usize, m);
        }
    }

    pub(crate) fn coord_init(&mut self, prod: usize) {
        let tid = self.producers[prod].tid.clone();
        match self.table.handle_init(Some(&tid), TXN_TIMEOUT_TICKS as i32, None) {
            InitDecision::Grant { producer_id, epoch, fence, entries } => {
                self.journal.extend(entries);
                self.owner.insert(producer_id, tid.clone());
                self.trace(|| {
                    format!("coordinator: '{tid}' granted pid {producer_id} epoch {epoch}, {} fences", fence.len())
                });
                if fence.is_empty() {
                    self.finish_grant(&tid, Some(prod), producer_id, epoch);
                } else {
                    let now = self.now;
                    for t in &fence {
                        self.send_marker(&tid, t, false);
                    }
                    let targets = fence.into_iter().map(|t| (t, now)).collect();
                    let pi = PendingInit {
                        prod: Some(prod),
                        commit: false,
                        end: false,
                        asked_txn: 0,
                        producer_id,
                        epoch,
                        targets,
                    };
                    self.pending_inits.insert(tid, pi);
                }
            }
            InitDecision::Refuse { .. } => {
                self.send(COORD, producer_host(prod), Msg::InitResp { prod, granted: None });
            }
        }
    }

    pub(crate) fn finish_grant(&mut self, tid: &str, prod: Option<usize>, producer_id: i64, epoch: i16) {
        if self.granted_again(tid, (producer_id, epoch)) {
            self.violate(format!(
                "'{tid}' granted producer id {producer_id} epoch {epoch} after {:?}",
                self.finished_grant.get(tid)
            ));
        }
        if self.finished_grant.get(tid) != Some(&(producer_id, epoch)) {
            self.finished_grant.insert(tid.to_string(), (producer_id, epoch));
            self.record_grant(tid, (producer_id, epoch));
        }
        if let Some(prod) = prod {
            self.send(COORD, producer_host(prod), Msg::InitResp { prod, granted: Some((producer_id, epoch)) });
        }
    }

    /// Whether an EndTxn bumps the epoch: under transaction version 2 (KIP-890), unless the
    /// mutation switches it off.
    pub(crate) fn bumps(&self) -> bool {
        self.cfg.transaction_version >= 2 && self.cfg.mutation != Mutation::NoBumpPerTransaction
    }

    /// A partition registration (a version 1 client's AddPartitionsToTxn, or a leader's
    /// verification of a write) by the real rules, journaled. `txn`: the transaction of the
    /// request, remembered if it opens the coordinator's transaction ([`Sim::txn_opened_by`]).
    pub(crate) fn coord_register(&mut self, reg: &Registration<'_>, txn: Option<u64>) -> RegisterDecision {
        let now = self.clock(COORD);
        let tid = self.owner.get(&reg.producer_id).cloned();
        let open = |sim: &Sim| tid.as_deref().and_then(|t| sim.table.state(t)) == Some(TxnState::Ongoing);
        let was_open = open(self);
        let decision = self.table.handle_register(reg, now);
        if let RegisterDecision::Accept { entries, .. } = &decision {
            self.journal.extend(entries.iter().cloned());
            if let (Some(tid), Some(txn), false, true) = (&tid, txn, was_open, open(self)) {
                self.txn_opened_by.insert(tid.clone(), txn);
            }
        }
        decision
    }

    /// EndTxn at the coordinator: commit or abort, write the markers, then answer the new epoch.
    /// The transaction it ends must be the one `txn` opened: nothing of transaction N (here its
    /// EndTxn, delayed or duplicated) lands in transaction N+1.
    pub(crate) fn coord_end(&mut self, (prod, txn): (usize, u64), producer_id: i64, epoch: i16, commit: bool) {
        let tid = self.producers[prod].tid.clone();
        match self.table.handle_end_txn(&tid, producer_id, epoch, commit, self.bumps()) {
            EndDecision::Markers { producer_id: pid, epoch: new_epoch, commit, entries, markers } => {
                self.journal.extend(entries);
                let opened_by = self.txn_opened_by.remove(&tid);
                if opened_by.is_some_and(|o| o != txn) {
                    let o = opened_by.unwrap_or_default();
                    let what = format!(
                        "the EndTxn of transaction {txn} of '{tid}' (producer id {producer_id} epoch {epoch}) ended \
                         the transaction a request of transaction {o} opened"
                    );
                    if self.cfg.transaction_version >= 2 {
                        return self.violate(what);
                    }
                    *self
                        .out
                        .decisions
                        .entry("transaction ended by an earlier one's EndTxn (version 1)")
                        .or_default() += 1;
                    self.trace(|| format!("coordinator: {what} (version 1's known hole)"));
                }
                if commit {
                    // Decided (journaled): the transaction of this producer id and epoch commits.
                    self.txn_committed.insert((producer_id, epoch, txn));
                    if let Some(o) = opened_by {
                        self.txn_committed.insert((producer_id, epoch, o));
                    }
                    self.out.txns_committed += 1;
                    let partitions: HashSet<i32> = markers.iter().map(|t| t.partition).collect();
                    self.out.txns_spanning += u64::from(partitions.len() > 1);
                } else {
                    self.out.txns_aborted += 1;
                }
                let what = if commit { "commits" } else { "aborts" };
                self.trace(|| {
                    format!("coordinator: '{tid}' {what} pid {producer_id} epoch {epoch}, next epoch {new_epoch}")
                });
                self.write_end_markers(tid, Some((prod, txn)), (pid, new_epoch), commit, markers);
            }
            EndDecision::Done { producer_id, epoch: now_epoch } => {
                let granted = Some((producer_id, now_epoch));
                let resp = Msg::EndTxnResp { prod, txn, granted, retry: false };
                self.send(COORD, producer_host(prod), resp);
            }
            EndDecision::Refuse { status, .. } => {
                let retry = status.code == protocol::ErrorCode::ConcurrentTransactions;
                let resp = Msg::EndTxnResp { prod, txn, granted: None, retry };
                self.send(COORD, producer_host(prod), resp);
            }
        }
    }

    /// Write a transaction's commit or abort markers; once all are confirmed the bump to
    /// `next` (producer id, epoch) is final and `asked` (who sent the EndTxn, with its epoch),
    /// if anyone, is answered.
    pub(crate) fn write_end_markers(
        &mut self,
        tid: String,
        asked: Option<(usize, u64)>,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        markers: Vec<FenceTarget>,
    ) {
        if markers.is_empty() {
            return self.finish_end(&tid, asked, producer_id, epoch);
        }
        for t in &markers {
            self.send_marker(&tid, t, commit);
        }
        let now = self.now;
        let targets = markers.into_iter().map(|t| (t, now)).collect();
        let (prod, asked_txn) = match asked {
            Some((p, t)) => (Some(p), t),
            None => (None, 0),
        };
        let pi = PendingInit { prod, commit, end: true, asked_txn, producer_id, epoch, targets };
        self.pending_inits.insert(tid, pi);
    }

    /// The coordinator's expiry sweep: an idle transactional id that wrote outside a transaction
    /// is fenced (its markers written as a timeout's), then forgotten; so is one without.
    pub(crate) fn coord_expiry(&mut self) {
        let now = self.clock(COORD);
        let expiry = self.table.handle_expiry(now);
        for e in &expiry.forgotten {
            if let Entry::TxnIdsExpired { transactional_ids } = e {
                self.out.txn_ids_expired += transactional_ids.len() as u64;
                *self.out.decisions.entry("transactional id forgotten").or_default() += transactional_ids.len() as u64;
                self.trace(|| format!("coordinator: transactional ids {transactional_ids:?} expired"));
            }
        }
        self.journal.extend(expiry.forgotten);
        for (tid, decision) in expiry.fences {
            if let EndDecision::Markers { producer_id, epoch, entries, markers, .. } = decision {
                self.journal.extend(entries);
                *self.out.decisions.entry("idle transactional id fenced").or_default() += 1;
                self.trace(|| format!("coordinator: '{tid}' idle; fencing it at epoch {epoch} before forgetting it"));
                self.write_end_markers(tid, None, (producer_id, epoch), false, markers);
            }
        }
    }

    /// The coordinator's transaction timer: abort every transaction open for longer than its
    /// timeout, bumping the epoch so that its (slow, paused) producer is fenced.
    pub(crate) fn coord_timeouts(&mut self) {
        let now = self.clock(COORD);
        for (tid, decision) in self.table.handle_timeouts(now) {
            if let EndDecision::Markers { producer_id, epoch, entries, markers, .. } = decision {
                self.journal.extend(entries);
                self.out.txns_timed_out += 1;
                self.trace(|| format!("coordinator: '{tid}' transaction timed out; aborting, next epoch {epoch}"));
                self.write_end_markers(tid, None, (producer_id, epoch), false, markers);
            }
        }
    }

    /// Whether finishing `ids` for `tid` would hand out an epoch older than, or (while every
    /// end bumps) the same as, one already finished. An end that does not bump (version 1;
    /// also when a coordinator restart resumes its markers, as a fence) finishes the epoch
    /// that was already granted.
    fn granted_again(&self, tid: &str, ids: (i64, i16)) -> bool {
        self.finished_grant.get(tid).is_some_and(|&old| old > ids || (old == ids && self.bumps()))
    }

    /// An EndTxn's markers are written: the epoch it bumped to is final (older ones are fenced
    /// wherever the transaction wrote), and the producer continues with it. An EndTxn that
    /// does not bump (version 1) granted nothing: its producer continues at its epoch.
    pub(crate) fn finish_end(&mut self, tid: &str, asked: Option<(usize, u64)>, producer_id: i64, epoch: i16) {
        if self.granted_again(tid, (producer_id, epoch)) {
            return self.violate(format!(
                "'{tid}' ended a transaction into producer id {producer_id} epoch {epoch} after {:?}",
                self.finished_grant.get(tid)
            ));
        }
        if self.finished_grant.get(tid) != Some(&(producer_id, epoch)) {
            self.finished_grant.insert(tid.to_string(), (producer_id, epoch));
            self.record_grant(tid, (producer_id, epoch));
        }
        if let Some((prod, txn)) = asked {
            let resp = Msg::EndTxnResp { prod, txn, granted: Some((producer_id, epoch)), retry: false };
            self.send(COORD, producer_host(prod), resp);
        }
    }

    /// A grant (or bump) of `tid` finished: remember which brokers the coordinator held alive
    /// then (see [`Sim::check_deleted_topic_fenced`]).
    fn record_grant(&mut self, tid: &str, granted: (i64, i16)) {
        let live = self.cluster.live_brokers(self.clock(COORD));
        self.grants.entry(tid.to_string()).or_default().push((granted, live));
    }

    pub(crate) fn coord_marker_done(
        &mut self,
        tid: String,
        epoch: i16,
        (producer_id, partition, topic_id): (i64, i32, u128),
        ok: bool,
    ) {
        if !ok {
            return;
        }
        let Some(pi) = self.pending_inits.get_mut(&tid) else { return };
        if pi.epoch != epoch {
            return;
        }
        pi.targets.retain(|(t, _)| (t.producer_id, t.partition, t.topic_id) != (producer_id, partition, topic_id));
        if pi.targets.is_empty() {
            let pi = self.pending_inits.remove(&tid).expect("pending init");
            self.journal.extend(self.table.handle_fence_done(&tid, epoch));
            if pi.end {
                self.finish_end(&tid, pi.prod.map(|p| (p, pi.asked_txn)), pi.producer_id, pi.epoch);
            } else {
                self.finish_grant(&tid, pi.prod, pi.producer_id, pi.epoch);
            }
        }
    }
}
