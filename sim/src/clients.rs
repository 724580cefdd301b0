//! The producers and the consumer: what they send, and what they make of the answers.

use super::*;

impl Sim {
    pub(crate) fn consumer_tick(&mut self) {
        self.schedule(10, Event::ConsumerTick);
        if self.consumer_paused_until > self.now {
            return;
        }
        if self.faulty() && self.rng.chance(5) {
            self.consumer_paused_until = self.now + 100 + self.rng.below(400);
            self.fault("consumer paused");
            return;
        }
        for index in 0..self.cfg.partitions {
            let now = self.now;
            let Some(partition) = self.live_slot(index) else { continue };
            let leader = self.leader(partition);
            let c = &mut self.consumers[index as usize];
            if c.slot != partition {
                // The topic was deleted and created again: a new topic, read from its start.
                (c.slot, c.position, c.leader, c.sent) = (partition, 0, (-1, -1), None);
            }
            if c.sent.is_some_and(|t| now.saturating_sub(t) < 100) {
                continue;
            }
            if c.leader.0 < 0 {
                c.leader = leader;
            }
            let (leader, leader_epoch) = c.leader;
            if leader < 0 {
                continue; // no leader for now: ask the metadata again next time
            }
            c.sent = Some(now);
            let offset = c.position;
            self.send(CONSUMER, leader as usize, Msg::Fetch { partition, offset, leader_epoch });
        }
    }

    /// What the consumer read must be committed: every batch matches what the replicas
    /// committed at that offset, and none is a zombie write.
    pub(crate) fn consumer_answer(
        &mut self,
        partition: i32,
        offset: i64,
        records: Option<Bytes>,
        aborted: Vec<protocol::AbortedTxn>,
    ) {
        let p = self.index(partition) as usize;
        if self.consumers[p].slot != partition || offset != self.consumers[p].position {
            return;
        }
        self.consumers[p].sent = None;
        let Some(records) = records else {
            self.consumers[p].leader = self.leader(partition);
            return;
        };
        // read_committed as a Kafka consumer does it: a producer id is skipped from the first
        // offset of one of its aborted transactions to its abort marker.
        let mut aborted = aborted;
        aborted.sort_by_key(|a| a.first_offset);
        let mut aborted = aborted.into_iter().peekable();
        let mut skipped: HashSet<i64> = HashSet::new();
        for item in protocol::batch::BatchIter::new(records) {
            let (h, bytes) = match item {
                Ok(hb) => hb,
                Err(e) => {
                    return self.violate(format!("consumer got an unreadable batch at {partition}/{offset}: {e}"))
                }
            };
            while let Some(a) = aborted.next_if(|a| a.first_offset <= h.base_offset) {
                skipped.insert(a.producer_id);
            }
            if h.is_control() {
                if protocol::batch::marker_kind(&bytes) == Some(MarkerKind::Abort) {
                    skipped.remove(&h.producer_id);
                }
            } else if self.before_unclean(partition, h.partition_leader_epoch) {
                // Written before an unclean election: its transaction's marker may have been
                // lost with the replicas that held it (what an unclean election costs).
            } else if h.is_transactional() {
                let committed = self.txn_committed(partition, &h);
                if skipped.contains(&h.producer_id) {
                    if committed {
                        let (pid, e) = (h.producer_id, h.producer_epoch);
                        return self.violate(format!(
                            "read_committed skipped offset {partition}/{} of producer id {pid} epoch {e}, a committed \
                             transaction",
                            h.base_offset
                        ));
                    }
                    self.out.aborted_skipped += 1;
                } else if !committed {
                    // Invariant 5: read_committed returns only committed transactions.
                    let (pid, e) = (h.producer_id, h.producer_epoch);
                    return self.violate(format!(
                        "read_committed returned offset {partition}/{} of producer id {pid} epoch {e}, a transaction \
                         not committed",
                        h.base_offset
                    ));
                }
            }
            if h.base_offset != self.consumers[p].position {
                let want = self.consumers[p].position;
                return self
                    .violate(format!("consumer asked for {partition}/{want} and got a batch at {}", h.base_offset));
            }
            let seen = (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch);
            if !h.is_control() && self.zombie_appends.contains(&(partition, h.base_offset, seen)) {
                return self.violate(format!(
                    "consumer read a zombie write at offset {partition}/{}: {seen:?}",
                    h.base_offset
                ));
            }
            let before_unclean = self.before_unclean(partition, h.partition_leader_epoch);
            match self.committed.get(&(partition, h.base_offset)) {
                _ if before_unclean => {}
                Some(c) if *c != seen => {
                    let c = *c;
                    return self.violate(format!(
                        "consumer read {seen:?} at offset {partition}/{}, where {c:?} is committed",
                        h.base_offset
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed.insert((partition, h.base_offset), seen);
                }
            }
            self.consumers[p].position = h.base_offset + i64::from(h.last_offset_delta) + 1;
            self.out.consumed += 1;
        }
    }

    /// Whether the coordinator decided to commit the transaction a batch was made in.
    fn txn_committed(&self, partition: i32, h: &BatchHeader) -> bool {
        let key = (self.index(partition), h.producer_id, h.producer_epoch, h.base_sequence);
        self.txn_of.get(&key).is_some_and(|txn| self.txn_committed.contains(&(h.producer_id, h.producer_epoch, *txn)))
    }

    pub(crate) fn producer_tick(&mut self, p: usize) {
        let next = 5 + self.rng.below(10);
        self.schedule(next, Event::ProducerTick(p));
        let writing = self.now < self.cfg.fault_ticks + self.cfg.settle_ticks / 3;
        let pr = &self.producers[p];
        if pr.paused_until > self.now || pr.dead_until > self.now {
            return;
        }
        let Some((producer_id, epoch)) = pr.ids else {
            let waiting = pr.init_sent.is_some_and(|t| self.now.saturating_sub(t) < 200);
            // A transactional producer inits after the writing too: its init aborts a
            // transaction a previous instance left open, which would hold the LSO back.
            if !waiting && (writing || pr.transactional) {
                self.producers[p].init_sent = Some(self.now);
                self.trace(|| format!("producer {p}: init"));
                self.send(producer_host(p), COORD, Msg::InitReq { prod: p });
            }
            return;
        };
        if self.faulty() && self.rng.chance(3) {
            // A restart: a second instance takes over the transactional id, fencing this one's
            // sibling (and this one's old epoch).
            self.restart_producer(p);
            return;
        }
        let pr = &mut self.producers[p];
        if pr.transactional {
            // End the transaction once it holds its batches (or the writing is over).
            let due = pr.inflight.is_none() && (pr.txn_acked >= pr.txn_size || (!writing && pr.txn_acked > 0));
            let resend_end = pr.ending.is_some_and(|(_, sent)| self.now.saturating_sub(sent) > 200);
            if (due && pr.ending.is_none()) || resend_end {
                let commit = match pr.ending {
                    Some((commit, _)) => commit,
                    None => !self.rng.chance(300),
                };
                let pr = &mut self.producers[p];
                pr.ending = Some((commit, self.now));
                let txn = pr.txn;
                self.trace(|| format!("producer {p}: EndTxn of transaction {txn} commit={commit} at epoch {epoch}"));
                self.send(producer_host(p), COORD, Msg::EndTxn { prod: p, txn, producer_id, epoch, commit });
                return;
            }
            if pr.ending.is_some() {
                return;
            }
        }
        if let Some((_, _, header, _)) = self.producers[p].inflight.as_ref().filter(|_| self.cfg.expiry) {
            // The batch's own timestamp is when it was made: past the delivery timeout (a pause
            // counts, as a real client's clock runs through one) it is given up, and the producer
            // starts over, since it cannot know whether the batch was written.
            if self.now.saturating_sub(header.max_timestamp as u64) > DELIVERY_TIMEOUT_TICKS {
                self.trace(|| format!("producer {p}: a batch outlived the delivery timeout; initialising again"));
                let pr = &mut self.producers[p];
                pr.ids = None;
                pr.inflight = None;
                pr.ending = None;
                pr.txn_acked = 0;
                return;
            }
        }
        let resend = match &self.producers[p].inflight {
            Some((.., sent)) => self.now.saturating_sub(*sent) > 120,
            None => false,
        };
        if self.producers[p].inflight.is_none() && writing {
            // Each batch goes to any partition: a transaction may span them.
            let partition = self.rng.below(self.cfg.partitions as u64) as i32;
            let pr = &mut self.producers[p];
            let seq = pr.next_seq[partition as usize];
            let stamp = ProducerStamp { producer_id, producer_epoch: epoch, base_sequence: seq };
            let value = Bytes::from(format!("{p}-{producer_id}-{epoch}-{partition}-{seq}"));
            let batch = build_batch(stamp, pr.transactional, self.now as i64, &[value]);
            let header = BatchHeader::parse_prefix(&batch).expect("a batch we built parses");
            pr.inflight = Some((partition, batch, header, self.now));
            if pr.transactional {
                self.txn_of.insert((partition, producer_id, epoch, seq), pr.txn);
            }
        } else if !resend {
            return;
        }
        let Some((partition, ..)) = self.producers[p].inflight else { return };
        let pr = &mut self.producers[p];
        if self.cfg.transaction_version < 2 && pr.transactional && !pr.added.contains(&partition) {
            // Version 1: the partition joins the transaction (AddPartitionsToTxn) before the
            // first write there; the write waits for the answer.
            if pr.adding.is_none_or(|(_, sent)| self.now.saturating_sub(sent) > 120) {
                pr.adding = Some((partition, self.now));
                let (txn, index) = (pr.txn, partition);
                self.trace(|| format!("producer {p}: AddPartitionsToTxn {index} in transaction {txn}"));
                let msg = Msg::AddPartitions { prod: p, txn, producer_id, epoch, index };
                self.send(producer_host(p), COORD, msg);
            }
            return;
        }
        let leader = self.leader_at_index(partition);
        let pr = &mut self.producers[p];
        let Some((_, batch, header, sent)) = pr.inflight.as_mut() else { return };
        *sent = self.now;
        let known = &mut pr.leader[partition as usize];
        if known.0 < 0 {
            *known = leader;
        }
        let (leader, leader_epoch) = *known;
        if leader < 0 {
            return;
        }
        let msg = Msg::Produce { prod: p, index: partition, batch: batch.clone(), header: *header, leader_epoch };
        self.send(producer_host(p), leader as usize, msg);
    }

    /// A version 1 producer's AddPartitionsToTxn answered.
    pub(crate) fn added_partition(&mut self, prod: usize, txn: u64, index: i32, ok: bool, fenced: bool) {
        let now = self.now;
        let pr = &mut self.producers[prod];
        if pr.txn != txn || pr.adding.map(|(i, _)| i) != Some(index) || pr.ids.is_none() {
            return; // late, or duplicated
        }
        pr.adding = None;
        if ok {
            pr.added.insert(index);
            if let Some((.., sent)) = pr.inflight.as_mut() {
                *sent = 0; // the write goes out on the next tick
            }
        } else if fenced {
            // PRODUCER_FENCED or INVALID_PRODUCER_EPOCH: this instance is done.
            pr.ids = None;
            pr.inflight = None;
            pr.ending = None;
            pr.txn_acked = 0;
            pr.dead_until = now + 200;
            self.trace(|| format!("producer {prod}: AddPartitionsToTxn refused, fenced"));
        }
    }

    /// Producer `p` restarts: a new instance, which initialises the transactional id again.
    pub(crate) fn restart_producer(&mut self, p: usize) {
        self.fault("producer restarted");
        let pr = &mut self.producers[p];
        pr.ids = None;
        pr.inflight = None;
        pr.init_sent = None;
        pr.ending = None;
        pr.txn_acked = 0;
    }

    pub(crate) fn producer_answer(&mut self, prod: usize, batch: BatchId, result: ProduceResult) {
        let now = self.now;
        let Some((partition, _, header, _)) = self.producers[prod].inflight.as_ref() else { return };
        let id = (*partition, header.producer_id, header.producer_epoch, header.base_sequence);
        if id != (self.index(batch.0), batch.1, batch.2, batch.3) {
            // An answer to an earlier batch (delayed or duplicated): already handled.
            return;
        }
        let leader = self.leader_at_index(id.0);
        let pr = &mut self.producers[prod];
        match result {
            ProduceResult::Acked { base_offset, leader_epoch } => {
                pr.inflight = None;
                pr.next_seq[id.0 as usize] += 1;
                pr.txn_acked += u32::from(pr.transactional);
                // Where it landed: a write by name may land in a deleted topic's replica.
                self.acked.push((batch, base_offset, leader_epoch));
                self.out.acked += 1;
                self.trace(|| {
                    format!(
                        "producer {prod}: acknowledged epoch {} seq {} at offset {}/{base_offset}",
                        id.2, id.3, batch.0
                    )
                });
            }
            ProduceResult::Fenced => {
                pr.ids = None;
                pr.inflight = None;
                pr.ending = None;
                pr.txn_acked = 0;
                pr.dead_until = now + 200;
                self.trace(|| format!("producer {prod}: fenced at epoch {}", id.2));
            }
            ProduceResult::StartOver => {
                pr.ids = None;
                pr.inflight = None;
                pr.ending = None;
                pr.txn_acked = 0;
                self.trace(|| format!("producer {prod}: unknown to the partition; initialising again"));
            }
            ProduceResult::Retry => {
                // Metadata refresh; resend on the next tick.
                pr.leader[id.0 as usize] = leader;
                if let Some((.., sent)) = pr.inflight.as_mut() {
                    *sent = 0;
                }
            }
        }
    }
}
