//! The invariants, checked after every step and at the end of a run.

use super::*;

impl Sim {
    /// What a leader has committed is on every replica the coordinator holds in sync, since
    /// the coordinator elects the next leader from them.
    pub(crate) fn check_isr_holds_committed(&mut self, partition: i32) {
        let (leader, leader_epoch) = self.leader(partition);
        if leader < 0 || !self.holds(leader, partition) {
            return;
        }
        let index = self.index(partition);
        let part = &self.rep(leader, partition).part;
        let l = part.leadership();
        if !l.is_leader || l.leader_epoch != leader_epoch {
            return;
        }
        let (_, hw) = part.progress();
        let counted = part.counted_replicas().unwrap_or_default();
        let isr = self.cluster.isr_of(TOPIC, index).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
        if let Some(m) = isr.iter().find(|m| !counted.contains(m)) {
            return self.violate(format!(
                "leader {leader} of partition {partition} at epoch {leader_epoch} commits without broker {m}, which \
                 the coordinator holds in sync (ISR {isr:?}); the leader waits for {counted:?}"
            ));
        }
        // The eligible leader replicas (KIP-966) may be elected too, when no ISR member is live.
        let elr = self.cluster.elr_of(TOPIC, index).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
        for (m, role) in isr.iter().map(|m| (*m, "in sync")).chain(elr.iter().map(|m| (*m, "eligible"))) {
            // A broker whose disk was replaced holds nothing until its first heartbeat tells the
            // coordinator, which then takes it out; until then that process cannot act on a
            // leadership (it learns one only from that heartbeat's answer).
            let incarnation = self.incarnations.get(&(m as usize)).copied().unwrap_or(0) as i64;
            let registered = self.cluster.registration_of(m).map(|(i, _)| i);
            if self.brokers[&m].log_dir_id != i64::from(m) && registered != Some(incarnation) {
                continue;
            }
            // A replica of a topic created anew that its broker has not created yet (it learns
            // of the topic from its next heartbeat's answer) holds nothing.
            let Some(r) = self.brokers[&m].replicas.get(&partition) else {
                if hw > 0 {
                    return self.violate(format!(
                        "leader {leader} of partition {partition} at epoch {leader_epoch} has committed up to {hw}, but \
                         broker {m}, {role} at the coordinator, has no replica of it yet"
                    ));
                }
                continue;
            };
            // So does a replica whose log came back damaged (reported lost by that heartbeat).
            if r.part.lost().is_some() && registered != Some(incarnation) {
                continue;
            }
            let part = &r.part;
            let (leo, _) = part.progress();
            // On disk, not only written: a power loss must not take it either.
            if leo < hw || !part.is_durable(hw) {
                return self.violate(format!(
                    "leader {leader} of partition {partition} at epoch {leader_epoch} has committed up to {hw}, but \
                     broker {m}, {role} at the coordinator (ISR {isr:?}, ELR {elr:?}), holds only up to {leo} or has \
                     not synced it: electing it would lose committed records"
                ));
            }
        }
    }

    /// An acks=all acknowledgement (and a marker's confirmation) is given only while the batch
    /// is on `min.insync.replicas` replicas' disks at least (a disk replaced since the batch was
    /// appended may have held it when its replica acknowledged).
    pub(crate) fn check_acknowledged_on_min_isr(
        &mut self,
        leader: i32,
        partition: i32,
        base_offset: i64,
        end_offset: i64,
    ) {
        if !self.is_live(partition) {
            // Acknowledged into a topic deleted since (a write that raced the deletion, as in
            // Kafka): gone with it.
            return;
        }
        let min_isr = self.cluster.elr_of(TOPIC, self.index(partition)).map_or(1, |(_, m)| m);
        // The batch as the acknowledging leader stores it (a duplicate's is its original's).
        let Some(leader_epoch) = self.rep(leader, partition).part.stored_epoch_at(base_offset) else {
            return self
                .violate(format!("leader {leader} acknowledged {partition}/{base_offset}, which it does not hold"));
        };
        if self.before_unclean(partition, leader_epoch) {
            // A stale leader's acknowledgement after an unclean election elected a replica
            // outside its ISR: that ISR may still commit at its old epoch until it learns of
            // the election, and its followers then cut what it confirmed (what an unclean
            // election costs; the fence does not depend on it, see the verifications).
            return;
        }
        let appended_at = self.first_appended.get(&(partition, base_offset, leader_epoch)).copied().unwrap_or(0);
        let holding: Vec<i32> = BROKERS
            .iter()
            .copied()
            .filter(|b| {
                let r = self.brokers[b].replicas.get(&partition);
                r.is_some_and(|r| r.part.holds_durably(base_offset, end_offset, leader_epoch))
                    || self.brokers[b].disk_replaced_at.is_some_and(|t| t >= appended_at)
                    || r.is_some_and(|r| r.damaged_at.is_some_and(|t| t >= appended_at))
            })
            .collect();
        if (holding.len() as i32) < min_isr {
            self.violate(format!(
                "the batch at {partition}/{base_offset} (leader epoch {leader_epoch}) was acknowledged on {holding:?} \
                 only, fewer than min.insync.replicas {min_isr}"
            ));
        }
    }

    pub(crate) fn check_replica(&mut self, id: i32, partition: i32) {
        let r = self.rep(id, partition);
        let epoch = r.part.leadership().leader_epoch;
        if epoch < r.last_leader_epoch {
            let last = r.last_leader_epoch;
            self.violate(format!("broker {id} leader epoch of partition {partition} went back from {last} to {epoch}"));
        }
        let r = self.rep_mut(id, partition);
        r.last_leader_epoch = epoch;
        let version = *r.part.subscribe().borrow();
        if r.checked_version == Some(version) {
            return;
        }
        r.checked_version = Some(version);
        let r = self.rep(id, partition);
        let (leo, hw) = r.part.progress();
        let l = r.part.leadership();
        self.trace(|| {
            format!(
                "broker {id}: partition {partition} log end {leo}, high watermark {hw}, leader {} at epoch {}",
                l.leader_id, l.leader_epoch
            )
        });
        let headers = match self.rep(id, partition).part.batch_headers() {
            Ok(h) => h,
            Err(e) => return self.violate(format!("broker {id} cannot read its log: {e}")),
        };
        // Below its high watermark a replica's log is committed: every replica agrees there. (A
        // replica outside the ISR may hold other, uncommitted batches above it, which it
        // truncates once it follows the leader again.)
        for (h, _) in headers.iter().filter(|(h, _)| h.base_offset < hw) {
            let seen = (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch);
            // In a deleted topic nothing is ever read: a stale leader of one (its lease lapsed, so
            // its replica's marker was no longer owed) may commit a zombie's write there until its
            // first heartbeat drops it (ARCHITECTURE, *Topic identity*); what must hold there is
            // checked where it is appended (`check_deleted_topic_fenced`).
            let live = self.is_live(partition);
            if live && !h.is_control() && self.zombie_appends.contains(&(partition, h.base_offset, seen)) {
                let tid = self.owner.get(&h.producer_id).cloned().unwrap_or_default();
                return self.violate(format!(
                    "zombie write committed: '{tid}' producer {} epoch {} seq {} at offset {partition}/{} on broker \
                     {id}, appended after a newer epoch was granted",
                    h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset
                ));
            }
            if self.before_unclean(partition, h.partition_leader_epoch) {
                // Written before an unclean election: it may be lost, or differ between replicas
                // until they follow the unclean leader.
                continue;
            }
            match self.committed.get(&(partition, h.base_offset)) {
                Some(c) if *c != seen => {
                    let c = *c;
                    return self.violate(format!(
                        "replicas disagree on a committed offset: offset {partition}/{} committed {c:?}, broker {id} \
                         holds {seen:?}",
                        h.base_offset
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed.insert((partition, h.base_offset), seen);
                }
            }
        }
    }

    /// A zombie batch (of `pair`, older than a finished grant of `tid`) was appended to
    /// broker `id`'s replica `slot` at leader epoch `leader_epoch`. On a deleted topic's
    /// partition nothing is ever read, so a stale leader's append there is harmless, as on a
    /// live one; but its last leadership (the one the coordinator would have sent the fence
    /// marker to) must not take the write on a broker the coordinator held alive when the grant
    /// that fenced `pair` finished: that grant waits until every broker that held the deleted
    /// topic has dropped it or lost its lease (see `Cluster::drop_pending`).
    pub(crate) fn check_deleted_topic_fenced(
        &mut self,
        id: i32,
        slot: i32,
        tid: &str,
        pair: (i64, i16),
        leader_epoch: i32,
    ) {
        if self.is_live(slot) {
            return;
        }
        if self.final_epoch.get(&slot) != Some(&leader_epoch) {
            *self.out.decisions.entry("zombie write in a deleted topic by a stale leadership").or_default() += 1;
            return;
        }
        let Some((granted, live)) = self.grants.get(tid).and_then(|g| g.iter().find(|(g, _)| pair < *g)) else {
            return;
        };
        if !live.contains(&id) {
            let what = "zombie write in a deleted topic by a broker whose lease lapsed before the fence";
            *self.out.decisions.entry(what).or_default() += 1;
        } else {
            let granted = *granted;
            self.violate(format!(
                "zombie write landed in a deleted topic: '{tid}' producer {} epoch {} appended to broker {id}'s replica \
                 of slot {slot} (leading at its last leader epoch {leader_epoch}) after the grant of {granted:?} \
                 finished while the coordinator held broker {id} alive: the fence did not wait for the old replica",
                pair.0, pair.1
            ));
        }
    }

    /// After the settle phase: replicas converged, every acknowledged record present once.
    pub(crate) fn finish(&mut self) {
        let mut count: HashMap<BatchId, Vec<i64>> = HashMap::new();
        for index in 0..self.cfg.partitions {
            let Some(partition) = self.live_slot(index) else {
                return self.violate("no convergence: the topic was deleted and not created again".into());
            };
            let mut logs = Vec::new();
            let replicas = self.cluster.replicas_of(TOPIC, index).map(<[i32]>::to_vec).unwrap_or_default();
            for (id, b) in &self.brokers {
                if let Some(old) = b.replicas.keys().find(|s| **s != partition && self.index(**s) == index) {
                    return self
                        .violate(format!("no convergence: broker {id} still holds slot {old} of a deleted topic"));
                }
                let Some(r) = b.replicas.get(&partition) else {
                    if replicas.contains(id) {
                        return self.violate(format!("no convergence: broker {id} has no replica of slot {partition}"));
                    }
                    continue;
                };
                let part = &r.part;
                let (leo, hw) = part.progress();
                let headers: Vec<_> = match part.batch_headers() {
                    Ok(h) => h
                        .into_iter()
                        .map(|(h, _)| (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence, h.is_control()))
                        .collect(),
                    Err(e) => return self.violate(format!("broker {id} cannot read its log: {e}")),
                };
                logs.push((*id, leo, hw, headers));
            }
            let (leader, _) = self.leader(partition);
            let Some((_, leo, hw, log)) = logs.iter().find(|(id, ..)| *id == leader).cloned() else {
                return self.violate(format!("no convergence: partition {partition} has no leader"));
            };
            if hw != leo {
                return self.violate(format!(
                    "no convergence: leader {leader} of partition {partition} has high watermark {hw} below its log \
                     end {leo}"
                ));
            }
            for (id, l, h, other) in &logs {
                if *l != leo || *h != hw || *other != log {
                    return self.violate(format!(
                        "no convergence: broker {id} has partition {partition} log end {l}, high watermark {h}; \
                         leader {leader} has {leo}, {hw}"
                    ));
                }
            }
            let c = &self.consumers[index as usize];
            if c.slot != partition {
                return self.violate(format!("no convergence: the consumer never read slot {partition}"));
            }
            let pos = c.position;
            let part = &self.rep(leader, partition).part;
            // A transaction open there before an unclean election, whose marker was lost with
            // the replicas that held it, stays open, and read_committed stops at it (a hanging
            // transaction, as in Kafka: what an unclean election costs).
            let hanging = pos < hw && part.stored_epoch_at(pos).is_some_and(|e| self.before_unclean(partition, e));
            if pos != hw && !hanging {
                return self.violate(format!(
                    "no convergence: the consumer is at {partition}/{pos}, the high watermark at {hw}"
                ));
            }
            for (offset, pid, epoch, seq, control) in &log {
                // A marker's base sequence counts transaction ends, not records.
                if *pid >= 0 && *seq >= 0 && !control {
                    count.entry((partition, *pid, *epoch, *seq)).or_default().push(*offset);
                }
            }
        }
        for (id, offset, leader_epoch) in self.acked.clone() {
            if self.before_unclean(id.0, leader_epoch) {
                continue; // acknowledged before an unclean election: it may be lost
            }
            if !self.is_live(id.0) {
                continue; // acknowledged into a topic deleted since: gone with it
            }
            match count.get(&id).map(Vec::as_slice) {
                None => return self.violate(format!("acknowledged record {id:?} at offset {offset} is lost")),
                Some([o]) if *o == offset => {}
                Some(found) => {
                    return self.violate(format!("acknowledged record {id:?} at offset {offset} found at {found:?}"))
                }
            }
        }
    }
}
