//! Replication bookkeeping on a leader: plain rules, no I/O, time passed in.
//!
//! For one partition led at one leader epoch: where each follower's log ends (as it last
//! acknowledged), where to send from next, when it was last caught up, the ISR, and the high
//! watermark: the offset below which every ISR member holds the leader's log. The high
//! watermark never goes backwards; an acks=all produce is answered once it passes the batch.
//! It does not move while the ISR (as the coordinator confirmed it) has fewer members than the
//! topic's `min.insync.replicas` (KIP-966's strict rule, as Kafka since 3.7): so a committed
//! record is on that many replicas at least, and the members that left the ISR as it shrank
//! below the minimum hold everything committed (the coordinator may elect them).

use std::collections::BTreeMap;

/// One follower's progress as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end offset as last acknowledged (-1 before its first answer).
    pub log_end_offset: i64,
    /// Where the next Replicate starts.
    pub next_offset: i64,
    /// When the follower last had everything the leader had, in ms.
    pub caught_up_at_ms: u64,
    /// The follower's log start offset as it last reported it, on disk there (-1 before its
    /// first report): DeleteRecords is answered once every counted replica's is past the offset.
    pub log_start_offset: i64,
}

/// What a Replicate request was taken against: the leader's log end then, and when (ms). A
/// follower that acknowledges that end was caught up at that time, however much the leader
/// appended while the request travelled (Kafka's `lastCaughtUpTimeMs` rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The leader's log end offset when the request was taken.
    pub leader_leo: i64,
    /// When it was taken, in ms.
    pub at_ms: u64,
}

/// The leader's view of its replicas for one leader epoch.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    leader_id: i32,
    isr: Vec<i32>,
    /// The coordinator's partition epoch of `isr`: an ISR is taken only from a newer one, so
    /// an answer or heartbeat read late cannot undo a change this leader already counts on.
    partition_epoch: i32,
    /// An ISR asked of the coordinator and not answered yet. Until it is, the high watermark
    /// counts its members too (KIP-841): a follower being added must not miss a record that
    /// becomes committed while the change is in flight, since it may be elected from the new ISR.
    /// It is asked again until an answer settles it: the coordinator applies it at most once,
    /// since it is based on `partition_epoch`.
    proposed: Option<Vec<i32>>,
    followers: BTreeMap<i32, FollowerProgress>,
    high_watermark: i64,
    /// The topic's `min.insync.replicas`, at most the number of replicas (1: no minimum).
    min_isr: usize,
}

impl ReplicaSet {
    /// A new leadership: followers are assumed to continue at the leader's log end (a wrong
    /// guess is corrected by their first answer), and count as caught up now. `leader_end` is
    /// what the leader counts of its own log in the high watermark (its end, or only what is
    /// on disk).
    pub fn new(
        leader_id: i32,
        replicas: &[i32],
        isr: (&[i32], i32),
        ends: (i64, i64),
        high_watermark: i64,
        now_ms: u64,
    ) -> Self {
        Self::with_min_isr(leader_id, replicas, isr, ends, high_watermark, now_ms, 1)
    }

    /// [`ReplicaSet::new`] for a topic with `min.insync.replicas` `min_isr`: the high watermark
    /// it starts from does not move while the ISR is smaller.
    pub fn with_min_isr(
        leader_id: i32,
        replicas: &[i32],
        (isr, partition_epoch): (&[i32], i32),
        (leader_leo, leader_end): (i64, i64),
        high_watermark: i64,
        now_ms: u64,
        min_isr: i32,
    ) -> Self {
        let followers = replicas
            .iter()
            .filter(|r| **r != leader_id)
            .map(|r| {
                (
                    *r,
                    FollowerProgress {
                        log_end_offset: -1,
                        next_offset: leader_leo,
                        caught_up_at_ms: now_ms,
                        log_start_offset: -1,
                    },
                )
            })
            .collect();
        let min_isr = usize::try_from(min_isr).unwrap_or(1).clamp(1, replicas.len().max(1));
        let mut s = ReplicaSet {
            leader_id,
            isr: isr.to_vec(),
            partition_epoch,
            proposed: None,
            followers,
            high_watermark,
            min_isr,
        };
        s.recompute(leader_end);
        s
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// The ISR as this leader knows it.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// The replicas the high watermark waits for: the ISR and any proposed members. Every
    /// replica the coordinator holds in sync must be among them, or a record could be
    /// committed without a replica the coordinator may elect next.
    pub fn counted(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.isr.iter().chain(self.proposed.iter().flatten()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The partition epoch of [`ReplicaSet::isr`].
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    /// A follower's progress.
    pub fn follower(&self, id: i32) -> Option<FollowerProgress> {
        self.followers.get(&id).copied()
    }

    /// Follower ids.
    pub fn follower_ids(&self) -> Vec<i32> {
        self.followers.keys().copied().collect()
    }

    /// The lowest offset an in-sync follower is to be sent next (`None`: no follower is in
    /// sync). Below it, only a follower out of the ISR or one an answer moves back wants
    /// anything.
    pub fn slowest_in_sync_next_offset(&self) -> Option<i64> {
        self.isr
            .iter()
            .filter(|id| **id != self.leader_id)
            .filter_map(|id| self.followers.get(id))
            .map(|f| f.next_offset)
            .min()
    }

    /// The topic's `min.insync.replicas` (capped by the number of replicas); returns whether
    /// the high watermark moved (a lower minimum may let it).
    pub fn set_min_isr(&mut self, min_isr: i32, leader_leo: i64) -> bool {
        let replicas = self.followers.len() + 1;
        self.min_isr = usize::try_from(min_isr).unwrap_or(1).clamp(1, replicas);
        self.recompute(leader_leo)
    }

    /// The ISR's size falls short of `min.insync.replicas`: (the ISR, the minimum).
    pub fn below_min_isr(&self) -> Option<(Vec<i32>, usize)> {
        (self.isr.len() < self.min_isr).then(|| (self.isr.clone(), self.min_isr))
    }

    /// The replicas the high watermark waits for fall short of `min.insync.replicas` (the ISR
    /// shrank while a write waited to be committed): (those replicas, the minimum).
    pub fn counted_below_min_isr(&self) -> Option<(Vec<i32>, usize)> {
        let counted = self.counted();
        (counted.len() < self.min_isr).then_some((counted, self.min_isr))
    }

    fn recompute(&mut self, leader_leo: i64) -> bool {
        if self.isr.len() < self.min_isr {
            // Under the minimum nothing is committed: what is, is on min_isr replicas at least.
            return false;
        }
        let mut hw = leader_leo;
        for id in self.isr.iter().chain(self.proposed.iter().flatten()) {
            if *id == self.leader_id {
                continue;
            }
            match self.followers.get(id) {
                Some(f) => hw = hw.min(f.log_end_offset),
                None => return false,
            }
        }
        if hw > self.high_watermark {
            self.high_watermark = hw;
            true
        } else {
            false
        }
    }

    /// The leader appended; returns whether the high watermark moved.
    pub fn on_leader_append(&mut self, leader_leo: i64) -> bool {
        self.recompute(leader_leo)
    }

    /// A follower answered a Replicate taken as `sent`: its log now ends at `log_end_offset`,
    /// equal to the leader's up to there. Returns whether the high watermark moved.
    /// `leader_leo` is what the leader counts of its own log now (its end, or under `--fsync
    /// always` its synced end). A follower that reached the leader's end as of `sent` was
    /// caught up then: measured against the end at the answer instead, a follower under a
    /// steady stream of appends would never count as caught up and would leave the ISR.
    pub fn on_ack(&mut self, follower: i32, log_end_offset: i64, leader_leo: i64, sent: Sent) -> bool {
        let Some(f) = self.followers.get_mut(&follower) else { return false };
        f.log_end_offset = log_end_offset;
        f.next_offset = log_end_offset;
        if log_end_offset >= sent.leader_leo {
            f.caught_up_at_ms = f.caught_up_at_ms.max(sent.at_ms);
        }
        self.recompute(leader_leo)
    }

    /// A follower reported its log start offset (durable there); it never moves back. Returns
    /// whether it moved.
    pub fn on_log_start(&mut self, follower: i32, log_start_offset: i64) -> bool {
        match self.followers.get_mut(&follower) {
            Some(f) if log_start_offset > f.log_start_offset => {
                f.log_start_offset = log_start_offset;
                true
            }
            _ => false,
        }
    }

    /// Kafka's low watermark: the lowest log start offset among the leader's (`leader_start`)
    /// and the counted replicas' (-1 for one that has not reported its own). DeleteRecords up
    /// to an offset is done when this reaches it: every replica the coordinator may elect
    /// keeps the records below it hidden.
    pub fn low_watermark(&self, leader_start: i64) -> i64 {
        self.counted()
            .iter()
            .filter(|id| **id != self.leader_id)
            .map(|id| self.followers.get(id).map_or(-1, |f| f.log_start_offset))
            .fold(leader_start, i64::min)
    }

    /// A follower's log diverges before `next_offset`: resend from `hint` (always earlier).
    pub fn on_mismatch(&mut self, follower: i32, hint: i64) {
        if let Some(f) = self.followers.get_mut(&follower) {
            f.next_offset = hint.clamp(0, (f.next_offset - 1).max(0));
        }
    }

    /// The ISR this leader should ask for, if it differs: followers not caught up for
    /// `lag_ms` leave, followers holding everything up to the high watermark come back. A
    /// proposal not settled yet is asked again as it is.
    pub fn wanted_isr(&self, now_ms: u64, lag_ms: u64) -> Option<Vec<i32>> {
        if let Some(p) = &self.proposed {
            return Some(p.clone());
        }
        let mut wanted = vec![self.leader_id];
        for (id, f) in &self.followers {
            let in_isr = self.isr.contains(id);
            let lagging = now_ms.saturating_sub(f.caught_up_at_ms) > lag_ms;
            let has_committed = f.log_end_offset >= self.high_watermark && f.log_end_offset >= 0;
            if !lagging && (in_isr || has_committed) {
                wanted.push(*id);
            }
        }
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = wanted.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(wanted)
    }

    /// An ISR change is being asked of the coordinator: count its members from now on.
    pub fn propose_isr(&mut self, isr: &[i32]) {
        self.proposed = Some(isr.to_vec());
    }

    /// The proposed change was refused or not answered; returns whether the high watermark moved.
    pub fn drop_proposal(&mut self, leader_leo: i64) -> bool {
        self.proposed = None;
        self.recompute(leader_leo)
    }

    /// The coordinator's ISR at `partition_epoch` (an answer to a change, or a heartbeat):
    /// taken only if newer than the one held, which also settles any proposal (it was applied,
    /// or can no longer be). Returns whether it was newer and whether the high watermark moved.
    ///
    /// A follower it leaves out is forgotten as far as it acknowledged: only an answer taken
    /// from now on can bring it back (Kafka's KIP-903 case). The coordinator takes a broker out
    /// of every ISR when it restarts; under `--fsync never` the restarted log may have lost
    /// what the old process acknowledged, and an ISR built on those old acknowledgements could
    /// elect it and lose committed records.
    pub fn learn_isr(&mut self, partition_epoch: i32, isr: &[i32], leader_leo: i64) -> (bool, bool) {
        if partition_epoch <= self.partition_epoch {
            return (false, false);
        }
        self.isr = isr.to_vec();
        self.partition_epoch = partition_epoch;
        self.proposed = None;
        for (id, f) in self.followers.iter_mut() {
            if !self.isr.contains(id) {
                f.log_end_offset = -1;
            }
        }
        (true, self.recompute(leader_leo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(leader_leo: i64, at_ms: u64) -> Sent {
        Sent { leader_leo, at_ms }
    }

    #[test]
    fn high_watermark_waits_for_every_isr_member() {
        let mut r = ReplicaSet::new(1, &[1, 2, 3], (&[1, 2, 3], 0), (0, 0), 0, 0);
        assert!(!r.on_leader_append(10));
        assert!(!r.on_ack(2, 10, 10, sent(10, 1)), "3 has not answered");
        assert!(r.on_ack(3, 7, 10, sent(10, 1)));
        assert_eq!(r.high_watermark(), 7);
        assert!(r.on_ack(3, 10, 10, sent(10, 2)));
        assert_eq!(r.high_watermark(), 10);
    }

    /// KIP-966: under min.insync.replicas the high watermark stops, so what is committed is on
    /// that many replicas, and a member leaving the ISR then holds everything committed.
    #[test]
    fn high_watermark_does_not_move_while_the_isr_is_below_the_minimum() {
        let mut r = ReplicaSet::new(1, &[1, 2, 3], (&[1, 2, 3], 0), (0, 0), 0, 0);
        r.set_min_isr(2, 0);
        r.on_ack(2, 5, 5, sent(5, 1));
        assert!(r.on_ack(3, 5, 5, sent(5, 1)));
        assert_eq!(r.high_watermark(), 5);
        // Followers drop out: the ISR is the leader alone.
        r.learn_isr(1, &[1], 9);
        assert_eq!(r.below_min_isr(), Some((vec![1], 2)));
        assert!(!r.on_leader_append(9), "alone, the leader commits nothing");
        assert_eq!(r.high_watermark(), 5);
        // One follower is back: two members, the minimum.
        r.on_ack(2, 9, 9, sent(9, 2));
        r.learn_isr(2, &[1, 2], 9);
        assert_eq!(r.below_min_isr(), None);
        assert_eq!(r.high_watermark(), 9);
        // A minimum above the replica count is capped by it.
        let mut solo = ReplicaSet::new(1, &[1], (&[1], 0), (0, 0), 0, 0);
        solo.set_min_isr(3, 4);
        assert_eq!(solo.high_watermark(), 4);
    }

    #[test]
    fn high_watermark_never_goes_back() {
        let mut r = ReplicaSet::new(1, &[1, 2], (&[1, 2], 0), (10, 10), 10, 0);
        r.on_ack(2, 4, 10, sent(10, 0));
        assert_eq!(r.high_watermark(), 10);
    }

    #[test]
    fn single_replica_commits_on_append() {
        let mut r = ReplicaSet::new(1, &[1], (&[1], 0), (0, 0), 0, 0);
        assert!(r.on_leader_append(3));
        assert_eq!(r.high_watermark(), 3);
    }

    #[test]
    fn lagging_follower_leaves_the_isr_and_returns_once_caught_up() {
        let mut r = ReplicaSet::new(1, &[1, 2, 3], (&[1, 2, 3], 0), (0, 0), 0, 0);
        r.on_leader_append(5);
        r.on_ack(2, 5, 5, sent(5, 100));
        assert_eq!(r.wanted_isr(500, 1000), None);
        assert_eq!(r.wanted_isr(1500, 1000), Some(vec![1]), "both lag");
        r.on_ack(2, 5, 5, sent(5, 1400));
        assert_eq!(r.wanted_isr(1500, 1000), Some(vec![1, 2]));
        assert_eq!(r.learn_isr(1, &[1, 2], 5), (true, true), "dropping the laggard lets the high watermark move");
        assert_eq!(r.high_watermark(), 5);
        r.on_ack(3, 5, 5, sent(5, 1600));
        assert_eq!(r.wanted_isr(1700, 1000), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_follower_being_added_holds_the_high_watermark_until_the_change_is_answered() {
        let mut r = ReplicaSet::new(1, &[1, 2], (&[1], 0), (0, 0), 0, 0);
        r.on_ack(2, 3, 5, sent(5, 10)); // 2 is behind: it has 3 of the leader's 5
        r.on_leader_append(5);
        assert_eq!(r.high_watermark(), 5, "alone in the ISR, the leader commits its log");
        r.on_ack(2, 5, 5, sent(5, 20));
        r.propose_isr(&[1, 2]);
        r.on_leader_append(8);
        assert_eq!(r.high_watermark(), 5, "2 does not have 5..8 yet and may be in the ISR already");
        r.on_ack(2, 8, 8, sent(8, 30));
        assert_eq!(r.high_watermark(), 8);
        assert!(!r.drop_proposal(8));
    }

    /// The simulator's find: a heartbeat answered before the coordinator applied this leader's
    /// change, and read after, must not take the ISR back and drop the proposed follower.
    #[test]
    fn an_older_isr_read_late_does_not_undo_a_newer_one() {
        let mut r = ReplicaSet::new(1, &[1, 2], (&[1], 3), (5, 5), 5, 0);
        r.on_ack(2, 5, 5, sent(5, 10));
        r.propose_isr(&[1, 2]);
        assert_eq!(r.wanted_isr(20, 1000), Some(vec![1, 2]), "asked again until settled");
        assert_eq!(r.learn_isr(3, &[1], 5), (false, false), "the ISR it was based on: no news");
        r.on_leader_append(8);
        assert_eq!(r.high_watermark(), 5, "2 is still counted");
        assert_eq!(r.learn_isr(4, &[1, 2], 8), (true, false));
        assert_eq!(r.isr(), &[1, 2]);
        assert_eq!(r.learn_isr(3, &[1], 8), (false, false), "an older ISR is ignored");
        assert_eq!(r.isr(), &[1, 2]);
        assert_eq!(r.partition_epoch(), 4);
    }

    /// Under a steady stream of appends the leader's end has always moved on by the time an
    /// answer arrives. A follower that keeps acknowledging everything it was sent is caught up
    /// as of each send, and stays in the ISR.
    #[test]
    fn a_follower_that_keeps_up_with_a_stream_of_appends_stays_in_sync() {
        let mut r = ReplicaSet::new(1, &[1, 2], (&[1, 2], 0), (0, 0), 0, 0);
        let mut leo = 0;
        for t in 1..=100u64 {
            let taken = sent(leo, t * 100);
            leo += 10; // appended while the request travelled
            r.on_leader_append(leo);
            r.on_ack(2, taken.leader_leo, leo, taken);
        }
        assert_eq!(r.follower(2).unwrap().caught_up_at_ms, 100 * 100);
        r.on_ack(2, leo - 10, leo, sent(leo - 10, 50));
        assert_eq!(
            r.follower(2).unwrap().caught_up_at_ms,
            100 * 100,
            "an older request's answer does not move it back"
        );
        assert_eq!(r.wanted_isr(100 * 100 + 500, 1000), None, "2 stays");
        let taken = sent(leo, 20_000);
        r.on_ack(2, leo - 1, leo, taken);
        assert_eq!(r.follower(2).unwrap().caught_up_at_ms, 100 * 100, "short of the end it was sent: not caught up");
        assert_eq!(r.wanted_isr(20_000, 1000), Some(vec![1]));
    }

    /// KIP-903's case: broker 3 acknowledged up to 10, then restarted and lost its unsynced
    /// tail (`--fsync never`), and the coordinator took it out of the ISR. Its acknowledgement
    /// from before must not bring it back; only answers since can.
    #[test]
    fn a_follower_taken_out_of_the_isr_comes_back_only_on_answers_given_since() {
        let mut r = ReplicaSet::new(1, &[1, 2, 3], (&[1, 2, 3], 0), (0, 0), 0, 0);
        r.on_leader_append(10);
        r.on_ack(2, 10, 10, sent(10, 100));
        r.on_ack(3, 10, 10, sent(10, 100));
        assert_eq!(r.high_watermark(), 10);
        assert_eq!(r.learn_isr(1, &[1, 2], 10), (true, false));
        assert_eq!(r.follower(3).unwrap().log_end_offset, -1);
        assert_eq!(r.wanted_isr(200, 1000), None, "3 stays out: nothing it said since");
        r.on_ack(3, 4, 10, sent(10, 300)); // it lost 4..10 and is catching up
        assert_eq!(r.wanted_isr(300, 1000), None);
        r.on_ack(3, 10, 10, sent(10, 400));
        assert_eq!(r.wanted_isr(400, 1000), Some(vec![1, 2, 3]), "back once it holds the committed records");
    }

    #[test]
    fn mismatch_moves_the_next_offset_back() {
        let mut r = ReplicaSet::new(1, &[1, 2], (&[1, 2], 0), (10, 10), 0, 0);
        r.on_mismatch(2, 4);
        assert_eq!(r.follower(2).unwrap().next_offset, 4);
        r.on_mismatch(2, 40);
        assert_eq!(r.follower(2).unwrap().next_offset, 3, "always earlier");
    }
}
