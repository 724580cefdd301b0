//! The simulator's own guarantees: the real build survives many seeds, every fence check
//! switched off is caught, and a seed replays exactly.

use sim::{run, Config, Mutation};

/// Seeds the real build runs in CI, in two halves that run in parallel
/// (`cargo run -p sim --release -- --seeds 100000` for more).
const SEEDS: u64 = 200;

fn clean(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        assert!(out.acked > 0, "seed {seed}: the workload acknowledged nothing (a stub would pass)");
        assert!(out.consumed > 0, "seed {seed}: the consumer read nothing");
        assert!(out.fenced > 0 || out.elections > 1, "seed {seed}: nothing was fenced and no leader changed");
    }
}

#[test]
fn transactions_commit_and_abort_across_partitions_and_the_consumer_skips_the_aborted() {
    let (mut committed, mut aborted, mut skipped, mut spanning) = (0, 0, 0, 0);
    for seed in 0..20 {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        (committed, aborted, skipped) =
            (committed + out.txns_committed, aborted + out.txns_aborted, skipped + out.aborted_skipped);
        spanning += out.txns_spanning;
    }
    assert!(committed > 0 && aborted > 0, "{committed} committed, {aborted} aborted");
    assert!(spanning > 0, "no committed transaction spanned two partitions");
    assert!(skipped > 0, "the consumer never had an aborted batch to skip: invariant 5 proves nothing");
}

#[test]
fn the_real_build_breaks_no_invariant_first_half() {
    clean(0..SEEDS / 2);
}

#[test]
fn the_real_build_breaks_no_invariant_second_half() {
    clean(SEEDS / 2..SEEDS);
}

/// Run `seeds` under `cfg`, each without a violation, and count the faults of `kind` they had.
fn clean_counting(seeds: std::ops::Range<u64>, cfg: Config, kind: &str) -> u64 {
    seeds
        .map(|seed| {
            let out = run(seed, cfg.clone());
            assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
            out.faults.get(kind).copied().unwrap_or(0)
        })
        .sum()
}

/// The first seed below 1,000 at which the simulator catches `mutation`.
fn caught(mutation: Mutation) -> Option<(u64, String)> {
    (0..1_000).find_map(|seed| run(seed, Config { mutation, ..Config::default() }).violation.map(|v| (seed, v)))
}

#[test]
fn a_gate_that_ignores_producer_epochs_is_caught() {
    let (seed, v) = caught(Mutation::NoProducerFencing).expect("the zombie write is found");
    assert!(v.contains("zombie write committed"), "seed {seed}: {v}");
}

#[test]
fn followers_that_ignore_leader_epochs_are_caught() {
    let (seed, v) = caught(Mutation::NoLeaderEpochChecks).expect("the stale leader's damage is found");
    assert!(v.contains("committed") || v.contains("lost"), "seed {seed}: {v}");
}

#[test]
fn commits_before_the_disk_has_them_are_caught() {
    let (seed, v) = caught(Mutation::UnsyncedCommits).expect("a power loss takes committed records");
    assert!(
        v.contains("committed") || v.contains("lost") || v.contains("fewer than min.insync.replicas"),
        "seed {seed}: {v}"
    );
}

#[test]
fn a_broker_serving_uncommitted_data_to_read_committed_is_caught() {
    let (seed, v) = caught(Mutation::ReadUncommitted).expect("an open or aborted transaction is read");
    assert!(v.contains("not committed"), "seed {seed}: {v}");
}

#[test]
fn isr_changes_without_partition_epochs_are_caught() {
    // Most seeds that catch it stall first (a leader holding a wrong ISR below the minimum
    // commits nothing more, so the run does not converge); some reach the safety violation.
    let found = (0..1_000).find_map(|seed| {
        let v = run(seed, Config { mutation: Mutation::UnversionedIsr, ..Config::default() }).violation?;
        (v.contains("which the coordinator holds in sync") || v.contains("lost")).then_some(seed)
    });
    assert!(found.is_some(), "no seed below 1,000 shows a leader committing without an in-sync replica");
}

#[test]
fn leaders_that_ignore_min_insync_replicas_are_caught() {
    let (seed, v) = caught(Mutation::NoMinIsr).expect("an acks=all write acknowledged on one replica");
    // Or the replicas that left an ISR of one as it shrank are eligible without every record.
    assert!(
        v.contains("fewer than min.insync.replicas") || v.contains("lost") || v.contains("holds only up to"),
        "seed {seed}: {v}"
    );
}

#[test]
fn a_coordinator_that_trusts_every_restart_is_caught() {
    let (seed, v) = caught(Mutation::TrustRestarts).expect("a replica with a replaced disk stays in sync");
    assert!(v.contains("holds only up to") || v.contains("lost") || v.contains("disagree"), "seed {seed}: {v}");
}

/// Issue 27: a byte flips in a restarting broker's log. Recovery cuts the damage and reports
/// the replica lost; a coordinator that trusts damaged logs (brokers never report them) keeps it
/// in sync and elects it, and the healthy replicas cut acknowledged records to match it.
#[test]
fn brokers_that_trust_damaged_logs_are_caught() {
    let (seed, v) = caught(Mutation::TrustDamagedLogs).expect("a damaged replica leads and the others cut to it");
    // Or the partition stalls: a follower holding committed records the damaged leader lacks
    // refuses to cut them (issue 27), so they are not lost; the coordinator then moves the
    // leadership, and with no eligible replica the partition waits for an operator.
    let stalled = v.contains("no convergence") && v.contains("leader");
    assert!(
        v.contains("lost") || v.contains("holds only up to") || v.contains("disagree") || stalled,
        "seed {seed}: {v}"
    );
}

/// Issue 27: transactional ids the coordinator hears nothing from are fenced (when they wrote
/// outside a transaction) and forgotten, and partitions forget idle producer ids, under every
/// fault; the fence holds and nothing acknowledged is lost or doubled.
#[test]
fn transactional_and_producer_ids_expire_and_the_fence_holds() {
    let (mut ids, mut producer_ids) = (0, 0);
    for seed in 0..40 {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        ids += out.txn_ids_expired;
        producer_ids += out.producer_ids_expired;
    }
    assert!(ids > 0 && producer_ids > 0, "{ids} transactional ids and {producer_ids} producer ids expired");
}

/// Issue 27: a coordinator that takes a forgotten transactional id's producer id for an
/// idempotent producer's lets a zombie whose partitions forgot it too write at its old epoch.
#[test]
fn expired_ids_taken_for_idempotent_producers_are_caught() {
    let (seed, v) = caught(Mutation::ExpiredIdsTakenForIdempotent).expect("the zombie of an expired id writes");
    assert!(v.contains("zombie write committed"), "seed {seed}: {v}");
}

#[test]
fn flipped_bytes_in_logs_happen_and_lose_nothing() {
    let flipped = clean_counting(0..60, Config::default(), "a byte of a log flipped");
    assert!(flipped > 0, "no byte ever flipped");
}

/// Whole-cluster crashes and replaced disks happen, and the restarts the coordinator sees
/// include heartbeats of processes that were superseded (refused by broker epoch).
#[test]
fn whole_cluster_crashes_and_replaced_disks_under_broker_epochs() {
    let (mut faults, mut decisions) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
    for seed in 0..60 {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        for (k, v) in out.faults {
            *faults.entry(k).or_insert(0) += v;
        }
        for (k, v) in out.decisions {
            *decisions.entry(k).or_insert(0) += v;
        }
    }
    for kind in ["whole cluster crashed and restarted", "disk replaced"] {
        assert!(faults.get(kind).copied().unwrap_or(0) > 0, "never {kind}: {faults:?}");
    }
    let refused = decisions.get("heartbeat of a superseded process refused").copied().unwrap_or(0);
    assert!(refused > 0, "no late heartbeat was refused: {decisions:?}");
}

/// The coordinator's real rules run: leases expire (clock jumps and pauses included), restarts
/// move leaderships, leaders change ISRs, and transactions that outlive their timeout are
/// aborted; and followers drop answers their log was cut under.
#[test]
fn leases_expire_and_isrs_change_under_the_coordinators_rules() {
    let mut decisions = std::collections::BTreeMap::new();
    let (mut jumps, mut timed_out) = (0, 0);
    for seed in 0..30 {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        for (k, v) in out.decisions {
            *decisions.entry(k).or_insert(0) += v;
        }
        jumps += out.faults.get("clock jumped").copied().unwrap_or(0);
        timed_out += out.txns_timed_out;
    }
    assert!(jumps > 0, "no clock ever jumped");
    assert!(timed_out > 0, "no transaction ever timed out");
    let kinds = [
        "elected (lease expired)",
        "elected (broker restarted)",
        "ISR changed",
        "ISR change refused: stale partition epoch",
    ];
    // Not "held Replicate answers voided by a cut": a follower's log cut while its sync is
    // pending takes a rare alignment (a few seeds in a thousand), so 30 seeds see it only by
    // luck. `a_cut_voids_an_acknowledgement_waiting_for_the_disk` (broker/src/partition.rs) pins
    // the rule; the long runs in docs/TESTING.md count the simulator's voided answers.
    for kind in kinds {
        assert!(decisions.get(kind).copied().unwrap_or(0) > 0, "never {kind}: {decisions:?}");
    }
}

#[test]
fn leaders_append_produce_requests_in_groups_with_zombies_and_duplicates_among_them() {
    let mut faults = std::collections::BTreeMap::new();
    for seed in 0..30 {
        let out = run(seed, Config::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        for (k, v) in out.faults {
            *faults.entry(k).or_insert(0) += v;
        }
    }
    // A group's batches are checked one after another against the state the earlier ones
    // staged: a zombie beside the instance that fenced it, and a retry beside the original.
    for kind in [
        "produce requests appended as a group",
        "produce group with two epochs of one producer id",
        "produce group with one batch twice",
    ] {
        assert!(faults.get(kind).copied().unwrap_or(0) > 0, "never {kind}: {faults:?}");
    }
}

#[test]
fn power_losses_tear_unsynced_writes_in_the_real_build() {
    let torn = clean_counting(0..50, Config::default(), "power loss with unsynced writes");
    assert!(torn > 0, "no power loss ever found unsynced writes to lose: the fault proves nothing");
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = Config { verbose: true, ..Config::default() };
    for seed in [7, 11, 30] {
        let (a, b) = (run(seed, cfg.clone()), run(seed, cfg.clone()));
        assert_eq!(a.steps, b.steps, "seed {seed}");
        assert!(a.trace == b.trace, "seed {seed}: the two traces differ");
        assert_eq!(a.faults, b.faults, "seed {seed}");
        assert!(a.faults.values().sum::<u64>() > 0, "faults were injected");
    }
}

/// Issue 28: an operator loses every in-sync replica of a partition and elects one outside them
/// (`--unclean-elections`). Records and markers only the lost ones held may go with them; the
/// fence must hold all the same, and what is written from the unclean leadership on is held to
/// every check.
#[test]
fn unclean_elections_happen_and_the_fence_holds() {
    let unclean = clean_counting(0..40, Config { unclean_elections: true, ..Config::default() }, "unclean election");
    assert!(unclean > 0, "no unclean election in 40 seeds");
}

/// Issue 28: a replica an unclean election makes lead keeps a zombie's batch it appended as a
/// stale leader, after the fence marker went to the leader of the time, and commits it, unless
/// it cuts what it holds from before the election above its high watermark. The random runs
/// reach it rarely since messages can be held for long (issue 31): this seed was found with
/// `sim --seeds 3000 --unclean-elections --mutation unclean-leaders-keep-their-logs` (the one
/// of the 3,000) and is pinned; a change to the simulator that moves it needs that search
/// again. The same seed is clean on the real build.
#[test]
fn unclean_leaders_that_keep_their_logs_are_caught() {
    const SEED: u64 = 1_708;
    let unclean = Config { unclean_elections: true, ..Config::default() };
    let v = run(SEED, Config { mutation: Mutation::UncleanLeadersKeepTheirLogs, ..unclean.clone() })
        .violation
        .expect("a stale leader's zombie batch is committed (search again if the simulator changed)");
    assert!(v.contains("zombie write committed"), "seed {SEED}: {v}");
    let real = run(SEED, unclean);
    assert!(real.violation.is_none(), "seed {SEED}: {}", real.violation.unwrap());
}

/// Issue 28: a replica that keeps the verifications it made when it led before takes a
/// zombie's write once an unclean election makes it lead without the fence marker. The random
/// runs reach that path rarely (a zombie verified on a replica that then misses the marker, is
/// elected uncleanly, and is written to again before anything else fences the zombie there):
/// this seed was found with `sim --seeds 12000 --unclean-elections --mutation keep-verifications`
/// and is pinned; a change to the simulator that moves it needs that search again. The same
/// seed is clean on the real build. It runs without expiry (`--no-expiry`): with it, 20,000
/// seeds never reach the path, since a verification outside a transaction now ages out after
/// two producer-id sweeps anyway, and producers give long-paused batches up; and without messages
/// held for long (`--no-held-messages`, the network before issue 31): with them, 20,000 seeds
/// never reach it either.
/// (`tests/kafka_clients/test_side_doors.py` runs the path on purpose, with real clients.)
#[test]
fn replicas_that_keep_verifications_across_an_unclean_election_are_caught() {
    const SEED: u64 = 11_713;
    let unclean = Config { unclean_elections: true, expiry: false, held_messages: false, ..Config::default() };
    let v = run(SEED, Config { mutation: Mutation::KeepVerifications, ..unclean.clone() })
        .violation
        .expect("the zombie verified before the unclean election writes again (search again if the simulator changed)");
    assert!(v.contains("zombie write committed"), "seed {SEED}: {v}");
    let real = run(SEED, unclean);
    assert!(real.violation.is_none(), "seed {SEED}: {}", real.violation.unwrap());
}

/// Issue 28: an operator deletes the topic while a leader of it is paused (under its lease) and
/// creates it again (with one, two or three replicas) as soon as the coordinator lets it, while
/// the producer writing to the paused leader is taken over by its sibling. What was written
/// into the deleted topic goes with it; the fence holds there too, and the new topic is held to
/// every check.
#[test]
fn topics_deleted_and_created_again_while_leaders_pause_and_the_fence_holds() {
    let (mut deleted, mut created) = (0, 0);
    for seed in 0..60 {
        let out = run(seed, Config { topic_deletions: true, ..Config::default() });
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        deleted += out.faults.get("topic deleted while a leader is paused").copied().unwrap_or(0);
        created += out.faults.get("topic created again").copied().unwrap_or(0);
    }
    assert!(deleted >= 20, "{deleted} deletions in 60 seeds");
    assert!(created >= deleted - 3, "{deleted} deletions but {created} creations after them");
}

/// Issue 28: a coordinator that knows partitions by name (a marker owed to a deleted topic's
/// partition goes to the topic created under the name, which is created at once) answers a
/// fence while the paused leader of the old replica still holds the zombie's verification; the
/// zombie's next write lands there. Either half alone is covered by the other (markers by name
/// after waiting for the old replicas to go reach no one who could take a zombie's write; a name
/// created at once gets no marker meant for the old topic): the mutation removes both.
#[test]
fn coordinators_that_know_topics_by_name_are_caught() {
    let cfg = Config { topic_deletions: true, mutation: Mutation::TopicsByName, ..Config::default() };
    let (seed, v) = (0..300)
        .find_map(|seed| run(seed, cfg.clone()).violation.map(|v| (seed, v)))
        .expect("a zombie writes to the old replica after its fence was answered");
    assert!(v.contains("zombie write landed in a deleted topic"), "seed {seed}: {v}");
}

/// Issue 31: the transactional producers under transaction version 1, as librdkafka and
/// kafka-python speak it (AddPartitionsToTxn before a partition's first write, leaders that only
/// verify, no bump at EndTxn, sequences across transactions): every invariant holds, except the
/// one version 1 cannot keep, which is counted rather than failed.
#[test]
fn transaction_version_1_producers_keep_every_invariant_but_its_known_hole() {
    let v1 = Config { transaction_version: 1, ..Config::default() };
    let (mut committed, mut aborted) = (0, 0);
    for seed in 0..20 {
        let out = run(seed, v1.clone());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        (committed, aborted) = (committed + out.txns_committed, aborted + out.aborted_skipped);
    }
    assert!(committed > 20 && aborted > 0, "{committed} transactions committed, {aborted} aborted batches skipped");
}

/// Issue 31: the hole itself, at a seed found with `sim --seeds 1000 --transaction-version 1`
/// (the first of five; a change to the simulator that moves it needs that search again): an
/// EndTxn of one transaction, held in the network while its producer resent it, was answered
/// and began the next, arrives and ends that next one. Under version 2 the same seed ends
/// nothing it should not: the held EndTxn carries an epoch the bump retired.
#[test]
fn a_delayed_end_txn_ends_the_next_transaction_under_version_1_only() {
    const SEED: u64 = 243;
    const HOLE: &str = "transaction ended by an earlier one's EndTxn (version 1)";
    let v1 = run(SEED, Config { transaction_version: 1, ..Config::default() });
    assert!(v1.violation.is_none(), "seed {SEED}: {}", v1.violation.unwrap());
    assert!(v1.decisions.get(HOLE).is_some_and(|n| *n > 0), "seed {SEED} (search again if the simulator changed)");
    let v2 = run(SEED, Config::default());
    assert!(v2.violation.is_none(), "seed {SEED}: {}", v2.violation.unwrap());
    assert_eq!(v2.decisions.get(HOLE), None);
}

/// Issue 31: a coordinator that ends version 2 transactions without the bump (as version 1
/// does) is caught by the invariant that nothing of transaction N lands in N+1. Found with
/// `sim --seeds 3000 --mutation no-bump-per-transaction` (the first of 19; a change to the
/// simulator that moves it needs that search again); the same seed is clean on the real build.
#[test]
fn a_coordinator_that_skips_the_bump_per_transaction_is_caught() {
    const SEED: u64 = 122;
    let v = run(SEED, Config { mutation: Mutation::NoBumpPerTransaction, ..Config::default() })
        .violation
        .expect("a delayed EndTxn ends the next transaction (search again if the simulator changed)");
    assert!(v.contains("ended the transaction a request of transaction"), "seed {SEED}: {v}");
    let real = run(SEED, Config::default());
    assert!(real.violation.is_none(), "seed {SEED}: {}", real.violation.unwrap());
}
