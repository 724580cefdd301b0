//! The consumer-group simulation (`sim --groups`): read-process-write workers of one group on
//! the real group and producer rules never commit an input's output twice, every input's output
//! is committed in the end, and with the generation check off the duplicate is found; the same
//! with KIP-848 members (member epochs), where no partition is ever owned by two members.

use sim::groups::{run_groups, GroupsConfig};

#[test]
fn workers_commit_each_input_exactly_once_under_pauses_restarts_and_coordinator_crashes() {
    let (mut refused, mut paused, mut crashed) = (0, 0, 0);
    for seed in 0..100 {
        let out = run_groups(seed, GroupsConfig::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        assert!(out.committed > 0, "seed {seed}: nothing committed (a stub would pass)");
        refused += out.generation_refusals;
        paused += out.faults.get("worker paused").copied().unwrap_or(0);
        crashed += out.faults.get("coordinator crashed").copied().unwrap_or(0);
    }
    assert!(refused > 0, "no zombie's offset commit was ever refused: the runs never met the fence");
    assert!(paused > 0 && crashed > 0, "{paused} pauses, {crashed} coordinator crashes");
}

#[test]
fn offset_commits_without_the_generation_check_are_caught() {
    let config = GroupsConfig { generation_fencing: false, ..GroupsConfig::default() };
    let found = (0..200).find_map(|seed| run_groups(seed, config.clone()).violation.map(|v| (seed, v)));
    let (seed, v) = found.expect("a zombie worker's batch committed twice below seed 200");
    assert!(v.contains("committed 2 times"), "seed {seed}: {v}");
}

#[test]
fn a_seed_replays_exactly() {
    let config = GroupsConfig { verbose: true, ..GroupsConfig::default() };
    let (a, b) = (run_groups(7, config.clone()), run_groups(7, config));
    assert!(!a.trace.is_empty());
    assert_eq!(a.trace, b.trace);
}

#[test]
fn kip848_workers_commit_each_input_exactly_once_and_never_share_a_partition() {
    let config = GroupsConfig { kip848: true, ..GroupsConfig::default() };
    let (mut refused, mut paused, mut crashed, mut rebalances) = (0, 0, 0, 0);
    for seed in 0..100 {
        let out = run_groups(seed, config.clone());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        assert!(out.committed > 0, "seed {seed}: nothing committed (a stub would pass)");
        refused += out.generation_refusals;
        rebalances += out.generations;
        paused += out.faults.get("worker paused").copied().unwrap_or(0);
        crashed += out.faults.get("coordinator crashed").copied().unwrap_or(0);
    }
    assert!(refused > 0, "no zombie's offset commit was ever refused by its member epoch");
    assert!(
        rebalances > 100 && paused > 0 && crashed > 0,
        "{rebalances} rebalances, {paused} pauses, {crashed} crashes"
    );
}

#[test]
fn kip848_offset_commits_without_the_member_epoch_check_are_caught() {
    let config = GroupsConfig { kip848: true, generation_fencing: false, ..GroupsConfig::default() };
    let found = (0..200).find_map(|seed| run_groups(seed, config.clone()).violation.map(|v| (seed, v)));
    let (seed, v) = found.expect("a zombie member's batch committed twice below seed 200");
    assert!(v.contains("committed 2 times"), "seed {seed}: {v}");
}
