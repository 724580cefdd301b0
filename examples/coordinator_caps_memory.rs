//! The coordinator's memory holding each cap's worth of state (issue 27, item 4): the default
//! `--transactional-ids-max` transactional ids, `--groups-max` groups, and one group at
//! `--group-offsets-max` offsets with the largest metadata a commit may carry.
//!
//! `cargo run --release --example coordinator_caps_memory` fills the coordinator's own rules
//! (the producer table and the group table, as the server holds them) in this process and
//! prints the growth of its resident memory for each. Each transactional id has one partition
//! registered (a transaction's worth of bookkeeping); each group holds one offset.
//! docs/BENCHMARKS.md records the result.

use coordinator::groups::{GroupConfig, GroupTable};
use coordinator::table::{InitDecision, ProducerTable, Registration, TableConfig};
use protocol::{GroupMember, PartitionOffset};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn report(what: &str, count: usize, before: u64) {
    let grown = rss_kib().saturating_sub(before);
    println!(
        "{what:<58} {count:>7}: {:>7.1} MiB ({:>6} bytes each)",
        grown as f64 / 1024.0,
        grown * 1024 / count.max(1) as u64
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table_config = TableConfig::default();
    let group_config = GroupConfig::default();

    let before = rss_kib();
    let mut table = ProducerTable::new(table_config.clone());
    for i in 0..table_config.transactional_ids_max {
        let tid = format!("orders-service-instance-{i:06}");
        let InitDecision::Grant { producer_id, epoch, .. } = table.handle_init(Some(&tid), 60_000, None) else {
            return Err(format!("init {i} refused").into());
        };
        table.handle_register(&Registration::new(producer_id, epoch, ("orders", 7), (i % 64) as i32, true), 0);
    }
    report("transactional ids (--transactional-ids-max)", table.transactional_ids().0, before);

    let before = rss_kib();
    let mut groups = GroupTable::new(group_config.clone(), 1);
    for i in 0..group_config.groups_max {
        let who = GroupMember {
            group: format!("consumer-group-{i:06}"),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
        };
        let offset =
            PartitionOffset { topic: "orders".into(), partition: 0, offset: 42, leader_epoch: 3, metadata: None };
        groups.handle_commit(&who, &[offset]).map_err(|s| s.to_string())?;
        let _ = groups.take_effects();
    }
    report("groups with one offset each (--groups-max)", groups.counts().groups.0, before);

    let before = rss_kib();
    let mut full = GroupTable::new(group_config.clone(), 2);
    let who = GroupMember { group: "full".into(), generation: -1, member_id: String::new(), instance_id: None };
    let metadata = "m".repeat(group_config.offset_metadata_bytes_max);
    let per_commit = group_config.offsets_per_commit_max;
    for chunk in 0..group_config.group_offsets_max.div_ceil(per_commit) {
        let offsets: Vec<PartitionOffset> = (0..per_commit)
            .map(|j| PartitionOffset {
                topic: format!("topic-{}", (chunk * per_commit + j) / 100),
                partition: ((chunk * per_commit + j) % 100) as i32,
                offset: 42,
                leader_epoch: 3,
                metadata: Some(metadata.clone()),
            })
            .collect();
        full.handle_commit(&who, &offsets).map_err(|s| s.to_string())?;
        let _ = full.take_effects();
    }
    report(
        "offsets of 4 KiB metadata in one group (--group-offsets-max)",
        full.counts().fullest_group_offsets.0,
        before,
    );
    Ok(())
}
