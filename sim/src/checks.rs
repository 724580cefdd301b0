//! The invariants, checked after every step and at the end of a run.

use super::*;

impl Sim {
    /// What a leader has committed is on every replica the coordinator holds in sync, since
    /// the coordinator elects the next leader from them.
    pub(crate) fn check_isr_holds_committed(&mut self, partition: i32) {
        let (leader, leader_epoch) = self.leader(partition);
        if leader < 0 {
            return;
        }
        let part = &self.rep(leader, partition).part;
        let l = part.leadership();
        if !l.is_leader || l.leader_epoch != leader_epoch {
            return;
        }
        let (_, hw) = part.progress();
        let counted = part.counted_replicas().unwrap_or_default();
        let isr = self.cluster.isr_of(TOPIC, partition).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
        if let Some(m) = isr.iter().find(|m| !counted.contains(m)) {
            return self.violate(format!(
                "leader {leader} of partition {partition} at epoch {leader_epoch} commits without broker {m}, which \
                 the coordinator holds in sync (ISR {isr:?}); the leader waits for {counted:?}"
            ));
        }
        // The eligible leader replicas (KIP-966) may be elected too, when no ISR member is live.
        let elr = self.cluster.elr_of(TOPIC, partition).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
        for (m, role) in isr.iter().map(|m| (*m, "in sync")).chain(elr.iter().map(|m| (*m, "eligible"))) {
            // A broker whose disk was replaced holds nothing until its first heartbeat tells the
            // coordinator, which then takes it out; until then that process cannot act on a
            // leadership (it learns one only from that heartbeat's answer).
            let incarnation = self.incarnations.get(&(m as usize)).copied().unwrap_or(0) as i64;
            let registered = self.cluster.registration_of(m).map(|(i, _)| i);
            if self.brokers[&m].log_dir_id != i64::from(m) && registered != Some(incarnation) {
                continue;
            }
            // So does a replica whose log came back damaged (reported lost by that heartbeat).
            if self.rep(m, partition).part.lost().is_some() && registered != Some(incarnation) {
                continue;
            }
            let part = &self.rep(m, partition).part;
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
        let min_isr = self.cluster.elr_of(TOPIC, partition).map_or(1, |(_, m)| m);
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
                self.rep(*b, partition).part.holds_durably(base_offset, end_offset, leader_epoch)
                    || self.brokers[b].disk_replaced_at.is_some_and(|t| t >= appended_at)
                    || self.rep(*b, partition).damaged_at.is_some_and(|t| t >= appended_at)
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
            if !h.is_control() && self.zombie_appends.contains(&(partition, h.base_offset, seen)) {
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

    /// After the settle phase: replicas converged, every acknowledged record present once.
    pub(crate) fn finish(&mut self) {
        let mut count: HashMap<BatchId, Vec<i64>> = HashMap::new();
        for partition in 0..self.cfg.partitions {
            let mut logs = Vec::new();
            for (id, b) in &self.brokers {
                let part = &b.replicas[partition as usize].part;
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
            let pos = self.consumers[partition as usize].position;
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
