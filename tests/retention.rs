//! Segments and retention over real TCP, three in-process brokers: small segments roll, retention
//! deletes the oldest on every replica without losing the fencing state they carried, a consumer
//! below the log start gets a clear error, and a follower that was frozen while the leader's log
//! start moved past its end starts over at the leader's start and converges.

use std::time::Duration;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};

/// The first offset broker `id` still holds.
fn log_start(c: &LocalCluster, id: i32) -> i64 {
    broker::log::segment_files(&c.replica_dir(id, "t", 0)).unwrap().first().map_or(0, |(o, _)| *o)
}

/// Whether retention (2048 bytes) has done all it can on broker `id`: deleting the oldest
/// segment would leave less than 2048 bytes.
fn retention_done(c: &LocalCluster, id: i32) -> bool {
    let sizes: Vec<u64> = broker::log::segment_files(&c.replica_dir(id, "t", 0))
        .unwrap()
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    sizes.len() > 1 && sizes.iter().sum::<u64>() - sizes[0] < 2048
}

/// Wait (bounded) until `ok` holds of the brokers' files.
async fn until_files(what: &str, ok: impl Fn() -> bool) {
    for _ in 0..500 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Once all three replicas of t-0 end at `end`: its leader and one of its followers.
async fn leader_and_a_follower_at(c: &LocalCluster, end: i64) -> (i32, i32) {
    let d = c
        .wait_for(&format!("every replica at {end}"), Duration::from_secs(10), |d| {
            d.partitions[0].progress.iter().filter(|g| g.log_end_offset == end).count() == 3
        })
        .await
        .unwrap();
    let leader = d.partitions[0].leader_id;
    (leader, (1..=3).find(|b| *b != leader).unwrap())
}

#[tokio::test]
async fn retention_deletes_old_segments_and_a_frozen_follower_starts_over_at_the_leaders_start() {
    let log = broker::log::LogConfig { segment_bytes: 1024, retention_bytes: Some(2048), ..Default::default() };
    let opts = LocalOptions { brokers: 3, log, retention_check_ms: 20, replica_lag_ms: 300, ..Default::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut zombie = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("r")).await.unwrap();
    for i in 0..10 {
        zombie.send("t", 0, Bytes::from(format!("early-{i}"))).await.unwrap();
    }
    let (leader, frozen) = leader_and_a_follower_at(&c, 10).await;
    let in_sync = (1..=3).find(|b| *b != leader && *b != frozen).unwrap();

    // One follower freezes; the stream goes on without it (it leaves the ISR).
    c.switches[(frozen - 1) as usize].freeze();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("r")).await.unwrap();
    let total = 300;
    for i in 10..total {
        p.send("t", 0, Bytes::from(format!("v{i:04}"))).await.unwrap();
    }
    // The new instance's init fenced the first one with a marker at offset 10: one offset more.
    let end = total + 1;
    until_files("retention on the leader and the in-sync follower", || {
        retention_done(&c, leader) && retention_done(&c, in_sync)
    })
    .await;
    assert!(log_start(&c, leader) > 10 && log_start(&c, in_sync) > 10);

    // A consumer below the log start is told where the log starts now.
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    let err = consumer.read_to_end("t", 0, 0).await.unwrap_err().to_string();
    assert!(err.contains("OFFSET_OUT_OF_RANGE") && err.contains("fetch from"), "{err}");
    let start = log_start(&c, leader);
    let tail = consumer.read_to_end("t", 0, start).await.unwrap();
    assert_eq!(tail.len() as i64, end - start);
    assert_eq!(tail.last().map(|r| r.value.clone()), Some(Bytes::from(format!("v{:04}", total - 1))));

    // The segments that carried the first producer instance's writes are gone, its fence is not.
    let err = zombie.send("t", 0, Bytes::from_static(b"zombie")).await.unwrap_err().to_string();
    assert!(err.contains("fenced") || err.contains("FENCED") || err.contains("epoch"), "{err}");

    // The frozen follower wakes with a log that ends (10) before the leader's start: it starts
    // over there, catches up and rejoins the ISR.
    c.switches[(frozen - 1) as usize].thaw();
    c.wait_for("the frozen follower back in sync", Duration::from_secs(20), |d| {
        let part = &d.partitions[0];
        part.isr.contains(&frozen)
            && part.progress.len() == 3
            && part.progress.iter().all(|g| g.log_end_offset == end && g.high_watermark == end)
    })
    .await
    .unwrap();
    let common_start = log_start(&c, frozen).max(log_start(&c, leader));
    assert!(log_start(&c, frozen) > 10, "it did not keep its old prefix");
    let records =
        |id| c.replica_records(id, "t", 0).into_iter().filter(|(o, _)| *o >= common_start).collect::<Vec<_>>();
    assert_eq!(records(frozen), records(leader), "the replicas agree on every offset both hold");
    assert!(!records(frozen).is_empty());
    c.shutdown().await;
}

/// Issue 32, item 2: DeleteRecords is answered once every in-sync replica hides the records. A
/// frozen follower holds the answer back until it leaves the ISR; once thawed it catches up and
/// hides the same records on its disk. Without the cluster secret, refused.
#[tokio::test]
async fn delete_records_waits_for_the_in_sync_replicas_and_a_frozen_one_follows_later() {
    let opts = LocalOptions { brokers: 3, replica_lag_ms: 300, ..Default::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await.unwrap();
    for i in 0..10 {
        p.send("t", 0, Bytes::from(format!("v{i}"))).await.unwrap();
    }
    let mut outsider = producer::Admin::new(&c.coordinator_addr, c.client_config());
    let err = outsider.delete_records("t", 0, 3).await.unwrap_err().to_string();
    assert!(err.contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");
    let (_, frozen) = leader_and_a_follower_at(&c, 10).await;
    let start_file = |id: i32| {
        let text = std::fs::read_to_string(c.replica_dir(id, "t", 0).join(broker::log::LOG_START_FILE));
        text.ok().and_then(|t| t.lines().nth(1).and_then(|l| l.parse::<i64>().ok()))
    };
    c.switches[(frozen - 1) as usize].freeze();
    assert_eq!(c.admin().delete_records("t", 0, 6).await.unwrap(), 6);
    let d = c.admin().describe().await.unwrap();
    assert!(!d.partitions[0].isr.contains(&frozen), "answered only once the frozen follower left the ISR");
    assert_eq!(start_file(frozen), None);
    // Every replica in the ISR when the answer came has the start on its disk (one that left
    // the ISR meanwhile, a slow follower on a busy machine, may not yet).
    for id in d.partitions[0].isr.iter().copied() {
        assert_eq!(start_file(id), Some(6), "broker {id}");
    }
    c.switches[(frozen - 1) as usize].thaw();
    until_files("the thawed follower to hide the records too", || start_file(frozen) == Some(6)).await;
    p.send("t", 0, Bytes::from_static(b"after")).await.unwrap();
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    let values: Vec<String> = consumer
        .read_to_end("t", 0, 6)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    assert_eq!(values, ["v6", "v7", "v8", "v9", "after"]);
}
