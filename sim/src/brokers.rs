//! The brokers: ticks, flushes, heartbeats and ISR changes, markers and produce groups,
//! driving the real `broker::partition::Partition`.

use super::*;
use broker::storage::Storage;

impl Sim {
    /// The flusher: start an fdatasync of each log's unsynced writes, if any (one at a time
    /// per log).
    pub(crate) fn flush_start(&mut self, id: i32) {
        self.schedule(10, Event::FlushStart(id));
        if self.brokers[&id].paused_until > self.now {
            return;
        }
        for partition in self.slots(id) {
            let r = self.rep(id, partition);
            if r.flushing {
                continue;
            }
            let Some((end, file, generation)) = r.part.sync_target() else { continue };
            let delay = if self.faulty() && self.rng.chance(30) {
                self.fault("slow disk");
                50 + self.rng.below(250)
            } else {
                1 + self.rng.below(10)
            };
            let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
            self.rep_mut(id, partition).flushing = true;
            self.schedule(delay, Event::FlushDone { id, partition, incarnation, end, generation, file });
        }
    }

    /// The fdatasync finished: what it covered is durable; held answers that waited for it go.
    pub(crate) fn flush_done(&mut self, id: i32, partition: i32, end: i64, generation: u64, file: Arc<dyn StoredFile>) {
        let r = self.rep_mut(id, partition);
        r.flushing = false;
        if let Err(e) = file.sync_data() {
            return self.violate(format!("broker {id}: the simulated disk failed a sync: {e}"));
        }
        r.part.mark_durable(end, generation);
        let (mut ready, mut voided) = (Vec::new(), 0);
        let part = &r.part;
        r.unsynced_acks.retain(|(to, msg, end, generation)| match part.durable_at(*end, *generation) {
            Some(true) => {
                ready.push((*to, msg.clone()));
                false
            }
            Some(false) => true,
            None => {
                voided += 1; // cut meanwhile: not sent, the leader resends
                false
            }
        });
        if voided > 0 {
            *self.out.decisions.entry("held Replicate answers voided by a cut").or_default() += voided;
            self.trace(|| format!("broker {id}: {voided} held answers of partition {partition} voided by a cut"));
        }
        for (to, msg) in ready {
            self.send(id as usize, to, msg);
        }
        self.after_broker_step(id);
    }

    pub(crate) fn broker_tick(&mut self, id: i32) {
        self.schedule(5, Event::BrokerTick(id));
        if self.brokers[&id].paused_until > self.now {
            return;
        }
        if self.cfg.expiry {
            self.producer_states_expiry(id);
        }
        for partition in self.slots(id) {
            let l = self.rep(id, partition).part.leadership();
            if !l.is_leader {
                continue;
            }
            for f in BROKERS.into_iter().filter(|f| *f != id) {
                // A few requests back to back, unanswered, as the broker's pipelined loop sends
                // them (this over-approximates it: a new round every tick, no in-flight limit):
                // the first from the bookkeeping, each other one where the one before ended,
                // while the one before carried batches.
                let mut from = None;
                for _ in 0..REPLICATE_PIPELINE {
                    let now = self.clock(id as usize);
                    let work = self.rep(id, partition).part.replication_work(f, l.leader_epoch, (from, 16 * 1024), now);
                    match work {
                        Ok(Some(w)) => {
                            let more = !w.records.is_empty();
                            if more {
                                let source = if w.from_memory {
                                    "Replicate sent from memory"
                                } else {
                                    "Replicate read from the file"
                                };
                                *self.out.decisions.entry(source).or_default() += 1;
                            }
                            from = Some(w.end_offset);
                            let req = ReplicateRequest {
                                topic: TOPIC.into(),
                                partition: self.index(partition),
                                topic_id: self.rep(id, partition).part.topic_id(),
                                leader_epoch: l.leader_epoch,
                                leader_id: id,
                                from_offset: w.from_offset,
                                prev_epoch: w.prev_epoch,
                                high_watermark: w.high_watermark,
                                log_start_offset: w.log_start_offset,
                                low_watermark: w.low_watermark,
                                producer_state: w.producer_state,
                                records: w.records,
                            };
                            let msg = Msg::Replicate { req, sent: w.sent, from_slot: partition };
                            self.send(id as usize, f as usize, msg);
                            if !more {
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            self.violate(format!("broker {id} cannot read its own log: {e}"));
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The broker's heartbeat loop: heartbeat, then ask for the ISR its leaderships should
    /// have; calls wait for their answer, each given up on after a timeout.
    pub(crate) fn heartbeat(&mut self, id: i32) {
        self.schedule(HEARTBEAT_TICKS, Event::Heartbeat(id));
        let b = &self.brokers[&id];
        if b.paused_until > self.now {
            return;
        }
        let waiting = |call: Option<(u64, u64)>| call.is_some_and(|(_, sent)| self.now - sent < CALL_TIMEOUT_TICKS);
        if waiting(b.heartbeat_call) || b.replicas.values().any(|r| waiting(r.alter_call)) {
            return;
        }
        if b.heartbeat_call.is_some() {
            // The last heartbeat was never answered: the ISR round runs anyway.
            self.brokers.get_mut(&id).expect("broker").heartbeat_call = None;
            self.maintain_isr(id);
            if self.brokers[&id].replicas.values().any(|r| r.alter_call.is_some()) {
                return;
            }
        }
        let reports = self
            .slots(id)
            .into_iter()
            .map(|partition| {
                let part = &self.rep(id, partition).part;
                // As the broker's checkpoint loop does (here at every heartbeat). The in-memory
                // disk does not fail writes; a failure would only leave an older checkpoint.
                let _ = part.checkpoint_high_watermark();
                let (log_end_offset, high_watermark) = part.progress();
                let lost = part.lost().filter(|_| self.cfg.mutation != Mutation::TrustDamagedLogs);
                ReplicaReport {
                    topic: TOPIC.into(),
                    partition: self.index(partition),
                    log_end_offset,
                    high_watermark,
                    offline: false,
                    lost: lost.is_some(),
                    problem: lost.unwrap_or_default(),
                    topic_id: self.topic_id_of(partition),
                    refused_leader_epoch: part.refusing().map_or(-1, |(epoch, _)| epoch),
                    lost_reported_at: part.lost_reported_at(),
                }
            })
            .collect();
        let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0) as i64;
        let b = &self.brokers[&id];
        let start = BrokerStart {
            incarnation,
            broker_epoch: b.broker_epoch,
            previous_broker_epoch: b.previous_broker_epoch,
            log_dir_id: b.log_dir_id,
            intact: b.intact,
        };
        let call = self.next_call();
        self.brokers.get_mut(&id).expect("broker").heartbeat_call = Some((call, self.now));
        self.send(id as usize, COORD, Msg::Heartbeat { broker: id, call, start, reports });
    }

    /// A leader whose followers fell behind (or caught up) asks the coordinator for the ISR it
    /// wants, and counts the proposed members until the answer.
    pub(crate) fn maintain_isr(&mut self, id: i32) {
        let now = self.clock(id as usize);
        let at = self.now;
        for partition in self.slots(id) {
            let r = self.rep_mut(id, partition);
            match r.alter_call {
                Some((_, sent)) if at - sent < CALL_TIMEOUT_TICKS => continue,
                // Given up on: its answer, if it ever comes, is dropped.
                Some(_) => r.alter_call = None,
                None => {}
            }
            let Some((leader_epoch, partition_epoch, isr)) = r.part.propose_isr(now, REPLICA_LAG_TICKS) else {
                continue;
            };
            let call = self.next_call();
            self.rep_mut(id, partition).alter_call = Some((call, self.now));
            self.trace(|| {
                format!(
                    "broker {id}: asks for ISR {isr:?} of partition {partition} at leader epoch {leader_epoch}, \
                     partition epoch {partition_epoch}"
                )
            });
            let req = AlterPartitionRequest {
                broker_id: id,
                topic: TOPIC.into(),
                partition: self.index(partition),
                topic_id: self.rep(id, partition).part.topic_id(),
                leader_epoch,
                partition_epoch,
                isr,
            };
            self.send(id as usize, COORD, Msg::AlterIsr { call, req, slot: partition });
        }
    }

    /// The `unversioned-isr` mutation's coordinator: the change applies whatever it was based on.
    pub(crate) fn alter_isr_unversioned(
        &mut self,
        req: &AlterPartitionRequest,
    ) -> (Option<Entry>, AlterPartitionResponse) {
        let mut req = req.clone();
        req.partition_epoch = self.cluster.isr_of(TOPIC, req.partition).map_or(-1, |(_, epoch)| epoch);
        self.cluster.handle_alter_partition(&req)
    }

    /// Under `unversioned-isr`, every ISR a broker is told looks newer than the one it has.
    pub(crate) fn unversioned(&mut self, partition_epoch: i32) -> i32 {
        if self.cfg.mutation == Mutation::UnversionedIsr {
            1_000_000 + self.next_call() as i32
        } else {
            partition_epoch
        }
    }

    pub(crate) fn broker_marker(&mut self, id: i32, tid: String, target: FenceTarget, leader_epoch: i32, commit: bool) {
        let kind = if commit { MarkerKind::Commit } else { MarkerKind::Abort };
        let batch =
            build_marker(target.producer_id, target.marker_epoch, target.marker_sequence, kind, 0, self.now as i64);
        let header = BatchHeader::parse_prefix(&batch).expect("a marker we built parses");
        // A marker names its partition by name: it goes to the replica this broker holds under it.
        let held = self.held_slot(id, target.partition);
        let appended = held.and_then(|slot| {
            self.rep(id, slot).part.append(&batch, &header, leader_epoch, true).ok().map(|a| (slot, a))
        });
        match appended {
            Some((partition, a)) => {
                let (base_offset, end_offset, leader_epoch) = a.parts();
                if let Appended::New { .. } = a {
                    self.first_appended.insert((partition, base_offset, leader_epoch), self.now);
                }
                let r = self.rep_mut(id, partition);
                r.pending.push(Pending {
                    prod: None,
                    marker: Some((tid, target.marker_epoch, target.producer_id, target.topic_id)),
                    end_offset,
                    base_offset,
                    leader_epoch,
                });
                let (pid, e) = (target.producer_id, target.marker_epoch);
                self.trace(|| {
                    format!(
                        "broker {id}: marker for producer id {pid} at epoch {e} at offset {partition}/{base_offset}"
                    )
                });
            }
            None => {
                let (epoch, producer_id, partition) = (target.marker_epoch, target.producer_id, target.partition);
                let topic_id = target.topic_id;
                let resp = Msg::MarkerResp { tid, epoch, producer_id, partition, topic_id, ok: false };
                self.send(id as usize, COORD, resp);
            }
        }
        self.after_broker_step(id);
    }

    /// Append the produce requests a broker read for one partition, as one group.
    pub(crate) fn broker_produce_group(&mut self, id: i32, partition: i32, inbox: Vec<Inbound>) {
        let mut admitted = Vec::new();
        for (prod, batch, header, leader_epoch) in inbox {
            // A producer id and epoch the coordinator refused to verify is fenced here.
            if self.rep(id, partition).refused.contains(&(header.producer_id, header.producer_epoch)) {
                self.out.fenced += 1;
                let bid = (partition, header.producer_id, header.producer_epoch, header.base_sequence);
                self.send(
                    id as usize,
                    producer_host(prod),
                    Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Fenced },
                );
            } else {
                admitted.push((prod, batch, header, leader_epoch));
            }
        }
        let offers: Vec<Offer<'_>> = admitted
            .iter()
            .map(|(_, batch, header, leader_epoch)| Offer {
                batch,
                header,
                leader_epoch: *leader_epoch,
                acks_all: true,
            })
            .collect();
        let answers = self.rep(id, partition).part.append_group(&offers);
        drop(offers);
        // A group stops at a batch that needs the coordinator's verification; the broker starts
        // the requests behind it once that is answered. Here they go back to the inbox.
        let later = admitted.split_off(answers.len());
        if !later.is_empty() {
            self.rep_mut(id, partition).inbox.splice(0..0, later);
            let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
            let wait = self.rng.below(PRODUCE_GROUP_WAIT_TICKS_MAX + 1);
            self.schedule(wait, Event::ProduceGroup { id, partition, incarnation });
        }
        self.count_group(&admitted);
        for ((prod, _, header, _), answer) in admitted.into_iter().zip(answers) {
            self.broker_produced(id, prod, partition, header, answer);
        }
        self.after_broker_step(id);
    }

    /// Count what a group's batches checked against each other (those the partition looked at).
    pub(crate) fn count_group(&mut self, group: &[Inbound]) {
        if group.len() < 2 {
            return;
        }
        self.fault("produce requests appended as a group");
        // A zombie and the instance that fenced it, checked one after the other.
        let mixed = group.iter().any(|(_, _, a, _)| {
            group.iter().any(|(_, _, b, _)| a.producer_id == b.producer_id && a.producer_epoch != b.producer_epoch)
        });
        if mixed {
            self.fault("produce group with two epochs of one producer id");
        }
        // A duplicated request checked after its original.
        let twice = group.iter().enumerate().any(|(i, (_, _, a, _))| {
            group[..i].iter().any(|(_, _, b, _)| {
                (a.producer_id, a.producer_epoch, a.base_sequence) == (b.producer_id, b.producer_epoch, b.base_sequence)
            })
        });
        if twice {
            self.fault("produce group with one batch twice");
        }
    }

    /// The broker's producer-id sweep, every `PRODUCER_ID_SWEEP_TICKS` of its clock: each
    /// replica forgets producer ids idle for `PRODUCER_ID_EXPIRATION_TICKS` (not those with a
    /// transaction open there), and verifications outside transactions age out.
    pub(crate) fn producer_states_expiry(&mut self, id: i32) {
        let now = self.now;
        let b = self.brokers.get_mut(&id).expect("broker");
        if now < b.producer_sweep_at + PRODUCER_ID_SWEEP_TICKS {
            return;
        }
        b.producer_sweep_at = now;
        for partition in self.slots(id) {
            let n = self.rep(id, partition).part.expire_producers(now, PRODUCER_ID_EXPIRATION_TICKS);
            if n > 0 {
                self.out.producer_ids_expired += n as u64;
                *self.out.decisions.entry("producer id forgotten by a partition").or_default() += n as u64;
                self.trace(|| format!("broker {id}: partition {partition} forgot {n} idle producer id(s)"));
            }
        }
    }

    /// One produce request's answer from its group.
    pub(crate) fn broker_produced(
        &mut self,
        id: i32,
        prod: usize,
        partition: i32,
        header: BatchHeader,
        answer: Result<Appended, AppendError>,
    ) {
        let from = producer_host(prod);
        let bid = (partition, header.producer_id, header.producer_epoch, header.base_sequence);
        match answer {
            Ok(a) => {
                let (base_offset, end_offset, stored_epoch) = a.parts();
                if let Appended::New { .. } = a {
                    let tid = self.owner.get(&header.producer_id).cloned().unwrap_or_default();
                    if let Some(&granted) = self.finished_grant.get(&tid) {
                        if (header.producer_id, header.producer_epoch) < granted {
                            // Appended after the grant finished: a violation once committed.
                            let seen = (header.producer_id, header.producer_epoch, header.base_sequence, stored_epoch);
                            self.zombie_appends.insert((partition, base_offset, seen));
                            let pair = (header.producer_id, header.producer_epoch);
                            self.check_deleted_topic_fenced(id, partition, &tid, pair, stored_epoch);
                            let e = header.producer_epoch;
                            self.trace(|| {
                                format!(
                                    "broker {id}: zombie batch epoch {e} appended at {base_offset} (granted {granted:?})"
                                )
                            });
                        }
                    }
                }
                if let Appended::New { .. } = a {
                    self.trace(|| {
                        format!(
                            "broker {id}: appended producer {prod} epoch {} seq {} at offset {partition}/{base_offset}, \
                             leader epoch {stored_epoch}",
                            bid.2, bid.3
                        )
                    });
                }
                if let Appended::New { .. } = a {
                    self.first_appended.insert((partition, base_offset, stored_epoch), self.now);
                }
                self.rep_mut(id, partition).pending.push(Pending {
                    prod: Some((prod, bid)),
                    marker: None,
                    end_offset,
                    base_offset,
                    leader_epoch: stored_epoch,
                });
            }
            Err(AppendError::NeedsVerification { producer_id, epoch, guard }) => {
                let transactional = header.is_transactional();
                let key = (self.index(partition), producer_id, epoch, header.base_sequence);
                let txn = self.txn_of.get(&key).copied().filter(|_| transactional);
                // Version 1: the client added the partition; the leader only checks.
                let verify_only = transactional && self.cfg.transaction_version < 2;
                let verify =
                    Msg::Verify { broker: id, partition, producer_id, epoch, transactional, guard, txn, verify_only };
                self.send(id as usize, COORD, verify);
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Retry });
            }
            Err(AppendError::Gate(g)) => {
                use broker::producer_state::GateError;
                let fenced = matches!(g, GateError::StaleEpoch { .. });
                if fenced {
                    self.out.fenced += 1;
                    self.trace(|| format!("broker {id}: refused producer {prod}: {g}"));
                }
                let result = match g {
                    GateError::StaleEpoch { .. } => ProduceResult::Fenced,
                    // The partition forgot the producer id: it starts over, as a Kafka client
                    // does on UNKNOWN_PRODUCER_ID (here: a new instance).
                    GateError::UnknownProducer { .. } => ProduceResult::StartOver,
                    GateError::OutOfOrder { .. } => ProduceResult::Retry,
                };
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result });
            }
            Err(_) => {
                self.send(id as usize, from, Msg::ProduceResp { prod, batch: bid, result: ProduceResult::Retry });
            }
        }
    }

    /// The broker drops its replica `slot` (its topic was deleted, or the name now has another
    /// id): what waited on it fails (the producers refresh their metadata and retry, the
    /// coordinator resends its markers), and its files go.
    pub(crate) fn drop_replica(&mut self, id: i32, slot: i32) {
        let Some(r) = self.brokers.get_mut(&id).expect("broker").replicas.remove(&slot) else { return };
        for p in r.pending {
            if let Some((prod, batch)) = p.prod {
                self.send(
                    id as usize,
                    producer_host(prod),
                    Msg::ProduceResp { prod, batch, result: ProduceResult::Retry },
                );
            }
            if let Some((tid, epoch, producer_id, topic_id)) = p.marker {
                let partition = self.index(slot);
                let resp = Msg::MarkerResp { tid, epoch, producer_id, partition, topic_id, ok: false };
                self.send(id as usize, COORD, resp);
            }
        }
        for (prod, _, header, _) in r.inbox {
            let batch = (slot, header.producer_id, header.producer_epoch, header.base_sequence);
            self.send(id as usize, producer_host(prod), Msg::ProduceResp { prod, batch, result: ProduceResult::Retry });
        }
        let disk = self.brokers[&id].disk.clone();
        for file in disk.list(&r.dir).unwrap_or_default() {
            let _ = disk.remove(&file);
        }
        let _ = disk.remove_dir(&r.dir);
        *self.out.decisions.entry("replica of a deleted topic dropped").or_default() += 1;
        self.trace(|| format!("broker {id}: dropped its replica of slot {slot} (the topic was deleted)"));
    }

    /// Answer what became committed, fail what lost leadership, and check the replicas.
    pub(crate) fn after_broker_step(&mut self, id: i32) {
        for partition in self.slots(id) {
            let r = self.rep_mut(id, partition);
            let mut answers = Vec::new();
            let part = &r.part;
            r.pending.retain(|p| match part.committed(p.end_offset, p.leader_epoch) {
                Ok(Committed::Yes) => {
                    answers.push((p.prod, p.marker.clone(), Some((p.base_offset, p.end_offset, p.leader_epoch))));
                    false
                }
                Ok(Committed::NotYet) => true,
                // The ISR fell below the minimum (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or
                // leadership moved: the producer retries.
                Ok(Committed::BelowMinIsr { .. }) | Err(_) => {
                    answers.push((p.prod, p.marker.clone(), None));
                    false
                }
            });
            for (prod, marker, offset) in answers {
                if let Some((base_offset, end_offset, _)) = offset {
                    self.check_acknowledged_on_min_isr(id, partition, base_offset, end_offset);
                }
                if let Some((prod, batch)) = prod {
                    let result = match offset {
                        Some((base_offset, _, leader_epoch)) => ProduceResult::Acked { base_offset, leader_epoch },
                        None => ProduceResult::Retry,
                    };
                    self.send(id as usize, producer_host(prod), Msg::ProduceResp { prod, batch, result });
                }
                if let Some((tid, epoch, producer_id, topic_id)) = marker {
                    let ok = offset.is_some();
                    let partition = self.index(partition);
                    let resp = Msg::MarkerResp { tid, epoch, producer_id, partition, topic_id, ok };
                    self.send(id as usize, COORD, resp);
                }
            }
            self.check_replica(id, partition);
            self.check_isr_holds_committed(partition);
        }
    }
}
