//! The fault injector and crashes: the coordinator's timers, which pause, cut, restart and
//! elect, and what a restart of a broker or of the coordinator keeps and loses.

use super::*;
use broker::storage::Storage;

/// How often (per mille of controller ticks, while faults run) an operator loses every in-sync
/// replica of a partition and elects uncleanly, with [`Config::unclean_elections`].
const UNCLEAN_PER_MILLE: u64 = 10;

/// How often (per mille of controller ticks, while faults run) an operator deletes the topic
/// while a leader of it is paused, with [`Config::topic_deletions`].
const DELETION_PER_MILLE: u64 = 4;

impl Sim {
    /// The coordinator's timers and the fault injector.
    pub(crate) fn controller_tick(&mut self) {
        if self.cfg.unclean_elections {
            self.unclean_election();
        }
        if self.cfg.topic_deletions {
            self.topic_deletion();
        }
        if self.faulty() {
            if self.rng.chance(5) {
                // The classic stale leader: the leader stalls (a long GC pause), often past its
                // lease, and the coordinator moves the leadership while it sleeps.
                let partition = self.rng.below(self.cfg.partitions as u64) as i32;
                let (id, _) = self.leader_at_index(partition);
                if id > 0 {
                    let until = self.now + 100 + self.rng.below(800);
                    self.brokers.get_mut(&id).expect("broker").paused_until = until;
                    self.fault("leader paused");
                    self.trace(|| format!("leader {id} paused until {until}"));
                }
            }
            if self.rng.chance(8) && self.coord_paused_until <= self.now {
                // An operator asks for an election (`admin elect`): a new leader epoch.
                let now = self.clock(COORD);
                let partition = self.rng.below(self.cfg.partitions as u64) as i32;
                if let Ok(entries) = self.cluster.handle_elect_leader(now, TOPIC, partition, protocol::Election::Again)
                {
                    self.fault("leader election asked");
                    self.journal_cluster(entries, "elected (asked)");
                }
            }
            if self.now >= self.cut_until && !self.cut.is_empty() {
                self.cut.clear();
            }
            if self.cut.is_empty() && self.rng.chance(8) {
                let mut hosts: Vec<usize> = vec![COORD, 1, 2, 3];
                hosts.extend((0..self.producers.len()).map(producer_host));
                let a = hosts[self.rng.below(hosts.len() as u64) as usize];
                let b = hosts[self.rng.below(hosts.len() as u64) as usize];
                if a != b {
                    self.cut.insert((a, b));
                    self.cut_until = self.now + 50 + self.rng.below(300);
                    self.fault("network partition");
                    self.trace(|| format!("network: hosts {a} and {b} cut off"));
                }
            }
            if self.rng.chance(6) {
                let id = BROKERS[self.rng.below(3) as usize];
                let until = self.now + 50 + self.rng.below(400);
                self.brokers.get_mut(&id).expect("broker").paused_until = until;
                self.fault("broker paused");
                self.trace(|| format!("broker {id} paused until {until}"));
            }
            if self.rng.chance(4) {
                let id = BROKERS[self.rng.below(3) as usize];
                self.restart_broker(id);
            }
            if self.rng.chance(1) {
                // Every broker at once (a power cut of the whole cluster): each comes back with
                // its logs intact, since replicas acknowledge only what they synced.
                for id in BROKERS {
                    self.restart_broker(id);
                }
                self.fault("whole cluster crashed and restarted");
            }
            if self.rng.chance(2) {
                // A broker's disk is replaced: it restarts with empty logs and another directory
                // id. Only where another in-sync or eligible replica is left, and while no other
                // lost disk is unknown to the coordinator: one lost disk must not lose committed
                // records, and the coordinator must never elect the empty one.
                let id = BROKERS[self.rng.below(3) as usize];
                // A disk replaced earlier whose broker has not registered since still looks in
                // sync to the coordinator: it holds nothing.
                let emptied = |b: i32| self.unreported_loss(b);
                let sole = (0..self.cfg.partitions).any(|p| {
                    let isr = self.cluster.isr_of(TOPIC, p).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
                    let elr = self.cluster.elr_of(TOPIC, p).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
                    isr.iter().chain(&elr).all(|b| *b == id || emptied(*b))
                });
                // One lost disk at a time (until the coordinator has heard of it): three replicas
                // with min.insync.replicas 2 tolerate one.
                let another = BROKERS.iter().any(|b| *b != id && emptied(*b));
                if !sole && !another {
                    self.replace_disk(id);
                }
            }
            if self.rng.chance(3) {
                self.restart_coordinator();
            }
            if self.rng.chance(8) {
                let until = self.now + 100 + self.rng.below(800);
                self.coord_paused_until = self.coord_paused_until.max(until);
                self.fault("coordinator paused");
                self.trace(|| format!("coordinator paused until {until}"));
            }
            if self.rng.chance(5) {
                // A clock jumps ahead (a VM resumed, a suspended host woke): on the coordinator
                // every lease looks expired at once; on a leader every follower looks lagging.
                let host = [COORD, 1, 2, 3][self.rng.below(4) as usize];
                let jump = 50 + self.rng.below(600);
                self.clocks.entry(host).or_default().1 += jump;
                self.fault("clock jumped");
                self.trace(|| format!("host {host}: clock jumps {jump} ahead"));
            }
            if self.rng.chance(10) {
                let p = self.rng.below(self.producers.len() as u64) as usize;
                let until = self.now + 100 + self.rng.below(600);
                self.producers[p].paused_until = until;
                self.fault("producer paused");
                self.trace(|| format!("producer {p} paused until {until}"));
            }
        } else {
            self.cut.clear();
        }
        self.schedule(10, Event::ControllerTick);
        if self.coord_paused_until > self.now {
            return;
        }
        // The lease check, as the coordinator's tick loop runs it: only once a lease has passed
        // since it started, so that the brokers have heartbeated meanwhile.
        let now = self.clock(COORD);
        if now >= LEASE_TICKS {
            self.coord_timeouts();
            if self.cfg.expiry {
                self.coord_expiry();
            }
            let entries = self.cluster.handle_tick(now);
            self.journal_cluster(entries, "elected (lease expired)");
        }
        // Markers not confirmed are re-sent to whoever leads now.
        let now = self.now;
        let mut resend = Vec::new();
        for (tid, pi) in self.pending_inits.iter_mut() {
            for (target, sent) in pi.targets.iter_mut() {
                if now.saturating_sub(*sent) > 100 {
                    *sent = now;
                    resend.push((tid.clone(), target.clone(), pi.commit));
                }
            }
        }
        for (tid, target, commit) in resend {
            self.send_marker(&tid, &target, commit);
        }
    }

    /// A broker process crashes and restarts: everything in memory is gone (pending
    /// acknowledgements, verifications, leadership); the partition reopens from its log.
    /// An operator loses every in-sync and eligible replica of a partition (here: they pause
    /// past their leases) and asks for an unclean election, which makes the one replica left,
    /// outside them, lead. See [`Config::unclean_elections`].
    fn unclean_election(&mut self) {
        if let Some((partition, chosen, give_up)) = self.unclean_plan {
            if self.now > give_up {
                self.unclean_plan = None;
                return;
            }
            if self.coord_paused_until > self.now {
                return;
            }
            let now = self.clock(COORD);
            let live = self.cluster.live_brokers(now);
            let isr = self.cluster.isr_of(TOPIC, partition).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
            let elr = self.cluster.elr_of(TOPIC, partition).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
            if isr.iter().chain(&elr).any(|b| live.contains(b)) || !live.contains(&chosen) {
                return; // their leases have not lapsed yet (or the chosen one is gone too)
            }
            if self.elect_uncleanly(partition) {
                self.unclean_plan = None;
            }
            return;
        }
        // A partition an unclean election left with one in-sync replica that then lost its log
        // (a restart that was not intact) has none left: the operator elects uncleanly again.
        if self.coord_paused_until <= self.now && self.live_gen.is_some() {
            for partition in 0..self.cfg.partitions {
                let isr = self.cluster.isr_of(TOPIC, partition).map(|(isr, _)| isr.len()).unwrap_or(0);
                let elr = self.cluster.elr_of(TOPIC, partition).map(|(elr, _)| elr.len()).unwrap_or(0);
                if isr + elr == 0 {
                    self.elect_uncleanly(partition);
                }
            }
        }
        if !self.faulty() || !self.rng.chance(UNCLEAN_PER_MILLE) {
            return;
        }
        let partition = self.rng.below(self.cfg.partitions as u64) as i32;
        let isr = self.cluster.isr_of(TOPIC, partition).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
        let elr = self.cluster.elr_of(TOPIC, partition).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
        let replicas = self.cluster.replicas_of(TOPIC, partition).map(<[i32]>::to_vec).unwrap_or_default();
        let outside: Vec<i32> = replicas
            .into_iter()
            .filter(|b| !isr.contains(b) && !elr.contains(b) && self.brokers[b].paused_until <= self.now)
            .collect();
        if outside.is_empty() {
            return;
        }
        // A replica that still believes it leads (a stale leader, paused or cut off while another
        // was elected) is the one an operator finds alive most often, and the one whose
        // verifications and log hold what no fence reached: chosen first.
        let slot = self.live_slot(partition);
        let leads = |b: i32| {
            slot.and_then(|s| self.brokers[&b].replicas.get(&s)).is_some_and(|r| r.part.leadership().is_leader)
        };
        let stale: Vec<i32> = outside.iter().copied().filter(|b| leads(*b)).collect();
        let pool = if stale.is_empty() { &outside } else { &stale };
        let chosen = pool[self.rng.below(pool.len() as u64) as usize];
        let until = self.now + LEASE_TICKS + 100 + self.rng.below(300);
        for b in BROKERS.into_iter().filter(|b| *b != chosen) {
            let host = self.brokers.get_mut(&b).expect("broker");
            host.paused_until = host.paused_until.max(until);
        }
        self.unclean_plan = Some((partition, chosen, until));
        self.fault("every in-sync replica lost");
        self.trace(|| {
            format!("operator: every broker but {chosen} lost until {until}, to elect it for partition {partition}")
        });
    }

    /// With [`Config::topic_deletions`]: an operator deletes the topic while a leader of it is
    /// paused (under its lease, so that it goes on leading the old replica as far as it knows,
    /// and its producers go on writing to it by the name), the producers writing there are
    /// fenced by their siblings meanwhile, and the operator creates the topic again as soon as
    /// the coordinator lets it (CreateTopics answers LEADER_NOT_AVAILABLE while a broker may
    /// still serve the old replicas).
    fn topic_deletion(&mut self) {
        if self.coord_paused_until > self.now {
            return;
        }
        let now = self.clock(COORD);
        let partitions = self.cfg.partitions;
        let Some(generation) = self.live_gen else {
            // min.insync.replicas 2 where there are two replicas or more, as the topic was first
            // created with: then losing one replica loses nothing (the checks of replaced disks
            // and damaged logs rely on it), and a replica leaving a too-small ISR stays eligible.
            let min_isr = self.recreate_rf.min(2);
            match self.cluster.handle_create_topic(now, TOPIC, partitions, self.recreate_rf, min_isr) {
                Ok(entry) => {
                    self.journal.push(entry);
                    self.topic_ids.push(self.cluster.topic_id(TOPIC).unwrap_or(0));
                    let generation = self.topic_ids.len() as i32 - 1;
                    self.live_gen = Some(generation);
                    self.out.elections += partitions as u64;
                    self.fault("topic created again");
                    let rf = self.recreate_rf;
                    self.trace(|| format!("operator: topic created again (generation {generation}, {rf} replicas)"));
                }
                Err(status) => {
                    *self.out.decisions.entry("topic creation refused").or_default() += 1;
                    self.trace(|| format!("operator: creating the topic again refused: {status}"));
                }
            }
            return;
        };
        if !self.faulty() {
            return;
        }
        if !self.deletion_due {
            self.deletion_due = self.rng.chance(DELETION_PER_MILLE);
            return;
        }
        // A producer writing again to a partition it wrote to at this epoch (verified there),
        // and the leader it writes to: that one pauses.
        let writing: Vec<(usize, i32)> = (0..self.producers.len())
            .filter_map(|p| {
                let pr = &self.producers[p];
                let (index, ..) = pr.inflight.as_ref()?;
                (pr.ids.is_some() && pr.next_seq[*index as usize] > 0).then_some((p, *index))
            })
            .collect();
        if writing.is_empty() {
            return;
        }
        let (zombie, index) = writing[self.rng.below(writing.len() as u64) as usize];
        let (leader, _) = self.leader_at_index(index);
        if leader < 0 || self.producers[zombie].leader[index as usize].0 != leader {
            return;
        }
        // Under its lease (which its last heartbeat, at most one interval ago, renewed).
        let until = self.now + 150 + self.rng.below(LEASE_TICKS - HEARTBEAT_TICKS - 160);
        let host = self.brokers.get_mut(&leader).expect("broker");
        host.paused_until = host.paused_until.max(until);
        let epochs: Vec<(i32, i32)> = (0..partitions).map(|i| (i, self.leader_at_index(i).1)).collect();
        let entry = match self.cluster.handle_delete_topic(TOPIC, 0) {
            Ok(entry) => entry,
            Err(status) => return self.violate(format!("the topic cannot be deleted: {status}")),
        };
        self.journal.push(entry);
        self.live_gen = None;
        self.deletion_due = false;
        self.recreate_rf = 1 + self.rng.below(3) as i32;
        for (i, epoch) in epochs {
            self.final_epoch.insert(generation * partitions + i, epoch);
        }
        self.fault("topic deleted while a leader is paused");
        self.trace(|| format!("operator: broker {leader} paused until {until}; topic deleted"));
        // The producer writing to the paused leader is taken over by its sibling: a zombie.
        self.trace(|| format!("producer {}: takes the transactional id over from {zombie}", zombie ^ 1));
        self.restart_producer(zombie ^ 1);
    }

    /// `admin elect-leader --unclean` for `partition`; true if it elected one.
    fn elect_uncleanly(&mut self, partition: i32) -> bool {
        let now = self.clock(COORD);
        let Ok(entries) = self.cluster.handle_elect_leader(now, TOPIC, partition, protocol::Election::AgainUnclean)
        else {
            return false;
        };
        let Some(Entry::LeaderChanged { leader_id, leader_epoch, .. }) = entries.first() else { return false };
        let (leader_id, leader_epoch) = (*leader_id, *leader_epoch);
        if !entries.iter().any(|e| matches!(e, Entry::UncleanLeader { .. })) {
            // An in-sync or eligible replica was live after all: a clean election.
            self.journal_cluster(entries, "elected (asked)");
            return true;
        }
        self.fault("unclean election");
        self.trace(|| {
            format!(
                "operator: unclean election of partition {partition}: broker {leader_id} leads at epoch {leader_epoch}"
            )
        });
        // What was written under earlier epochs may be lost from here on; what is written from
        // this leadership on is held to every check again.
        let slot = self.live_slot(partition).expect("an elected partition's topic exists");
        self.unclean_epoch.insert(slot, leader_epoch);
        self.committed.retain(|(p, _), seen| *p != slot || seen.3 >= leader_epoch);
        let c = &mut self.consumers[partition as usize];
        (c.slot, c.position, c.sent, c.leader) = (slot, 0, None, (-1, -1));
        self.journal_cluster(entries, "elected uncleanly (asked)");
        true
    }

    pub(crate) fn restart_broker(&mut self, id: i32) {
        let down = 20 + self.rng.below(100);
        // Every other restart of a broker follows a clean stop (logs synced, active segments
        // indexed, producer state snapshotted); the others are a power loss: the disk keeps
        // what was synced and a torn prefix of the rest.
        let incarnation = self.incarnations.get(&(id as usize)).copied().unwrap_or(0);
        let disk = self.brokers[&id].disk.clone();
        if incarnation % 2 == 1 {
            for r in self.brokers[&id].replicas.values() {
                if let Err(e) = r.part.checkpoint() {
                    return self.violate(format!("broker {id} cannot checkpoint its log: {e}"));
                }
            }
        } else {
            let unsynced = disk.unsynced_bytes();
            let rng = &mut self.rng;
            disk.crash(|_, bytes| rng.below(bytes as u64 + 1) as usize);
            self.fault("power loss");
            if unsynced > 0 {
                self.fault("power loss with unsynced writes");
            }
            let lost = unsynced - disk.unsynced_bytes();
            self.trace(|| format!("broker {id} loses power with {unsynced} bytes unsynced ({lost} torn off)"));
        }
        if self.rng.chance(333) {
            self.damage_a_log(id);
        }
        let (mutation, partitions) = (self.cfg.mutation, self.cfg.partitions);
        let topic_ids = self.topic_ids.clone();
        let b = self.brokers.get_mut(&id).expect("broker");
        for (slot, r) in b.replicas.iter_mut() {
            match open_replica(&disk, &r.dir, slot % partitions, id, mutation) {
                Ok(part) => {
                    // As the broker reads it from the replica's directory.
                    part.set_topic_id(topic_ids.get((slot / partitions) as usize).copied().unwrap_or(0));
                    r.part = part;
                }
                Err(e) => return self.violate(format!("broker {id} cannot reopen its log: {e}")),
            }
            r.unsynced_acks.clear();
            r.flushing = false;
            r.pending.clear();
            r.refused.clear();
            r.checked_version = None;
            r.alter_call = None;
            r.inbox.clear();
            // It knows no leadership until its first heartbeat is answered.
            r.last_leader_epoch = -1;
        }
        b.heartbeat_call = None;
        // A clean stop synced everything; a power loss keeps what was synced, and a replica
        // acknowledges only that.
        b.intact = true;
        b.broker_epoch = -1;
        b.previous_broker_epoch = b.recorded_broker_epoch;
        b.paused_until = self.now + down;
        *self.incarnations.entry(id as usize).or_default() += 1;
        // A new process: its clock starts again from 0.
        self.clocks.insert(id as usize, (self.now + down, 0));
        self.fault("broker crashed and restarted");
        let back = self.now + down;
        self.trace(|| format!("broker {id} crashed; back at {back}"));
        // Its next heartbeat carries a new incarnation: the coordinator takes it out of the
        // ISRs and moves its leaderships under a new leader epoch.
    }

    /// Whether broker `b` holds less than the coordinator believes: its disk was replaced, or a
    /// replica's log came back damaged, and its process has not registered since to say so.
    fn unreported_loss(&self, b: i32) -> bool {
        let incarnation = self.incarnations.get(&(b as usize)).copied().unwrap_or(0) as i64;
        let registered = self.cluster.registration_of(b).map(|(i, _)| i) == Some(incarnation);
        !registered
            && (self.brokers[&b].disk_replaced_at.is_some()
                || self.brokers[&b].replicas.values().any(|r| r.part.lost().is_some()))
    }

    /// A byte of one of the broker's replicas flips while it is down (a bad sector, a stray
    /// write): in its active segment, inside a batch that has a whole batch after it, so that the
    /// damage cannot pass for a torn tail. Recovery must cut it and report the replica lost: the
    /// coordinator must neither keep it in sync nor elect it, nor let it make the others cut.
    fn damage_a_log(&mut self, id: i32) {
        let disk = self.brokers[&id].disk.clone();
        let partition = self.rng.below(self.cfg.partitions as u64) as usize;
        // A replica of the topic as it is now (one of a deleted topic is never read again).
        let Some(slot) = self.live_slot(partition as i32).filter(|s| self.holds(id, *s)) else { return };
        // As with replaced disks, one damaged replica at a time (until its broker has told the
        // coordinator), and never the last that holds every committed record: three replicas
        // with min.insync.replicas 2 tolerate one.
        let unreported = |b: i32| self.unreported_loss(b);
        let p = partition as i32;
        let isr = self.cluster.isr_of(TOPIC, p).map(|(isr, _)| isr.to_vec()).unwrap_or_default();
        let elr = self.cluster.elr_of(TOPIC, p).map(|(elr, _)| elr.to_vec()).unwrap_or_default();
        let sole = isr.iter().chain(&elr).all(|b| *b == id || unreported(*b));
        if sole || BROKERS.iter().any(|b| *b != id && unreported(*b)) {
            return;
        }
        let dir = self.rep(id, slot).dir.clone();
        let Some((_, path)) = broker::log::offset_files(disk.as_ref(), &dir, broker::log::SEGMENT_SUFFIX)
            .ok()
            .and_then(|files| files.last().cloned())
        else {
            return;
        };
        let Ok(mut raw) = disk.read(&path) else { return };
        let mut ends = Vec::new();
        for item in protocol::batch::BatchIter::new(bytes::Bytes::from(raw.clone())) {
            match item {
                Ok((_, b)) => ends.push(ends.last().copied().unwrap_or(0) + b.len()),
                Err(_) => break,
            }
        }
        if ends.len() < 2 {
            return;
        }
        // A byte its checksum covers (from its attributes on; its offset, length, leader epoch
        // and magic are checked otherwise) of any batch but the last.
        let k = self.rng.below(ends.len() as u64 - 1) as usize;
        let start = if k == 0 { 0 } else { ends[k - 1] };
        let at = start + 21 + self.rng.below((ends[k] - start - 21) as u64) as usize;
        raw[at] ^= 1 << self.rng.below(8);
        if disk.write_file_atomically(&path, &raw).is_err() {
            return;
        }
        // The segment's clean-shutdown index would describe the bytes as they were.
        let _ = disk.remove(&path.with_extension(broker::log::INDEX_SUFFIX));
        self.rep_mut(id, slot).damaged_at = Some(self.now);
        self.fault("a byte of a log flipped");
        self.trace(|| format!("broker {id}: byte {at} of {} flipped", path.display()));
    }

    /// A broker's disk is replaced: the process restarts on an empty disk with another id. It
    /// reports its logs as not intact: the coordinator takes it out of every ISR and ELR.
    pub(crate) fn replace_disk(&mut self, id: i32) {
        let down = 20 + self.rng.below(100);
        let disk = Arc::new(MemStorage::new());
        let (mutation, partitions) = (self.cfg.mutation, self.cfg.partitions);
        let b = self.brokers.get_mut(&id).expect("broker");
        b.disk = disk.clone();
        if mutation != Mutation::TrustRestarts {
            b.log_dir_id += 100;
            b.intact = false;
        }
        b.disk_replaced_at = Some(self.now);
        b.broker_epoch = -1;
        b.previous_broker_epoch = -1;
        b.recorded_broker_epoch = -1;
        for (slot, r) in b.replicas.iter_mut() {
            match open_replica(&disk, &r.dir, slot % partitions, id, mutation) {
                Ok(part) => r.part = part,
                Err(e) => return self.violate(format!("broker {id} cannot open a log on a new disk: {e}")),
            }
            r.unsynced_acks.clear();
            r.flushing = false;
            r.pending.clear();
            r.refused.clear();
            r.checked_version = None;
            r.alter_call = None;
            r.inbox.clear();
            r.last_leader_epoch = -1;
        }
        b.heartbeat_call = None;
        b.paused_until = self.now + down;
        *self.incarnations.entry(id as usize).or_default() += 1;
        self.clocks.insert(id as usize, (self.now + down, 0));
        self.fault("disk replaced");
        self.trace(|| format!("broker {id}'s disk replaced (empty logs, another id)"));
    }

    /// The coordinator crashes and restarts: the table is rebuilt from its journal, and the
    /// fences it had not confirmed are written again (nobody is waiting for their answer).
    pub(crate) fn restart_coordinator(&mut self) {
        let mut table = ProducerTable::new(table_config(&self.cfg));
        // A new process: brokers it has not heard from may hold leases an earlier one granted.
        let mut cluster = new_cluster(&self.cfg, 0);
        for entry in &self.journal {
            table.apply(entry);
            cluster.apply(entry);
        }
        // A new process: its clock starts again from 0, and no broker holds a lease yet.
        self.clocks.insert(COORD, (self.now, 0));
        self.coord_paused_until = 0;
        table.restart_clocks(0);
        self.table = table;
        self.cluster = cluster;
        self.pending_inits.clear();
        *self.incarnations.entry(COORD).or_default() += 1;
        self.fault("coordinator crashed and restarted");
        let now = self.now;
        for (tid, epoch, commit, targets) in self.table.pending_fences() {
            let producer_id = self.table.current(&tid).map_or(-1, |(pid, _)| pid);
            for t in &targets {
                self.send_marker(&tid, t, commit);
            }
            let targets = targets.into_iter().map(|t| (t, now)).collect();
            let pi = PendingInit { prod: None, commit, end: commit, asked_txn: 0, producer_id, epoch, targets };
            self.pending_inits.insert(tid, pi);
        }
        let n = self.pending_inits.len();
        let entries = self.journal.len();
        self.trace(|| format!("coordinator crashed and restarted from {entries} journal entries, {n} fences resumed"));
    }
}
