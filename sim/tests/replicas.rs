//! The coordinator-replica simulation (`sim --coordinators`): replicas paused past their lease,
//! crashed and cut off from the store never get a write in once deposed, epochs only go up,
//! every transactional id is granted again once faults stop; with writes not guarded, a deposed
//! replica's write is found.

use sim::replicas::{run_replicas, ReplicasConfig};

#[test]
fn no_write_of_a_deposed_replica_lands() {
    let (mut refused, mut takeovers, mut mid_grant) = (0, 0, 0);
    for seed in 0..100 {
        let out = run_replicas(seed, ReplicasConfig::default());
        assert!(out.violation.is_none(), "seed {seed}: {}", out.violation.unwrap());
        assert!(out.grants > 0, "seed {seed}: nothing granted (a stub would pass)");
        refused += out.deposed_writes_refused;
        takeovers += out.takeovers;
        mid_grant += out.faults.get("replica paused mid-grant").copied().unwrap_or(0);
    }
    assert!(refused > 0, "no deposed replica ever tried a write: the runs never met the guard");
    assert!(takeovers > 100 && mid_grant > 0, "{takeovers} takeovers, {mid_grant} pauses mid-grant");
}

#[test]
fn writes_without_the_leader_guard_are_caught() {
    let config = ReplicasConfig { guarded: false, ..ReplicasConfig::default() };
    let found = (0..100).find_map(|seed| run_replicas(seed, config.clone()).violation.map(|v| (seed, v)));
    let (seed, v) = found.expect("a deposed replica's write lands below seed 100");
    assert!(v.contains("after it was deposed") || v.contains("already had"), "seed {seed}: {v}");
}

#[test]
fn a_seed_replays_exactly() {
    let config = ReplicasConfig { verbose: true, ..ReplicasConfig::default() };
    let (a, b) = (run_replicas(3, config.clone()), run_replicas(3, config));
    assert!(!a.trace.is_empty());
    assert_eq!(a.trace, b.trace);
}
