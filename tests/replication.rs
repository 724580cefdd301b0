//! Replication over real TCP with three in-process brokers: acks=all, convergence, and a
//! frozen (paused) leader that wakes after its replacement was elected.

use std::sync::atomic::Ordering;
use std::time::Duration;

use broker::storage::{OsStorage, Storage, StoredFile};
use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use net::Connection;
use producer::{Admin, ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{DescribeResponse, ErrorCode, ProduceRequest, Request, Response, ACKS_ALL, ACKS_LEADER};

async fn describe(admin: &mut Admin) -> DescribeResponse {
    admin.describe().await.unwrap()
}

async fn until(c: &LocalCluster, what: &str, ok: impl Fn(&DescribeResponse) -> bool) -> DescribeResponse {
    c.wait_for(what, Duration::from_secs(10), ok).await.unwrap()
}

fn committed_bytes(c: &LocalCluster, broker: i32, hw: i64) -> Vec<u8> {
    c.replica_bytes(broker, "t", 0, hw)
}

/// A produce of "stale" by `p` at sequence `seq`, addressed to a leader of `leader_epoch`.
fn stale_produce(p: &Producer, seq: i32, leader_epoch: i32) -> Request {
    let batch = build_batch(
        ProducerStamp { producer_id: p.producer_id(), producer_epoch: p.epoch(), base_sequence: seq },
        false,
        0,
        &[Bytes::from_static(b"stale")],
    );
    Request::Produce(ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch,
        acks: ACKS_ALL,
        records: batch,
    })
}

async fn values(c: &LocalCluster) -> Vec<String> {
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    consumer
        .read_to_end("t", 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

#[tokio::test]
async fn acks_all_replicates_to_every_isr_member_and_replicas_are_identical() {
    let c = LocalCluster::start(LocalOptions { brokers: 3, ..Default::default() }).await.unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("r")).await.unwrap();
    for i in 0..30 {
        p.send("t", 0, Bytes::from(format!("v{i}"))).await.unwrap();
    }
    let d = until(&c, "every replica at 30", |d| {
        let p = &d.partitions[0];
        p.progress.len() == 3 && p.progress.iter().all(|g| g.log_end_offset == 30 && g.high_watermark == 30)
    })
    .await;
    assert_eq!(d.partitions[0].isr.len(), 3);
    let leader = d.partitions[0].leader_id;
    let stats = &c.switches[(leader - 1) as usize].stats;
    assert!(
        stats.replicate_requests_from_memory.load(Ordering::Relaxed) > 0,
        "a leader in step with its followers sends what it just appended from memory"
    );
    let reference = committed_bytes(&c, leader, 30);
    assert!(!reference.is_empty());
    for b in 1..=3 {
        assert_eq!(committed_bytes(&c, b, 30), reference, "broker {b} differs from the leader");
    }
    assert_eq!(values(&c).await.len(), 30);
    c.shutdown().await;
}

#[tokio::test]
async fn frozen_leader_wakes_fenced_by_epoch_and_converges() {
    let c = LocalCluster::start(LocalOptions { brokers: 3, broker_lease_ms: 400, ..Default::default() }).await.unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("r")).await.unwrap();
    for i in 0..5 {
        p.send("t", 0, Bytes::from(format!("before-{i}"))).await.unwrap();
    }
    let mut admin = c.admin();
    let d = describe(&mut admin).await;
    let old = d.partitions[0].leader_id;
    let old_epoch = d.partitions[0].leader_epoch;

    // The leader freezes (a long GC pause): its lease runs out and a new leader is elected.
    c.switches[(old - 1) as usize].freeze();
    let d = until(&c, "a new leader", |d| d.partitions[0].leader_id != old && d.partitions[0].leader_id > 0).await;
    let new_epoch = d.partitions[0].leader_epoch;
    assert!(new_epoch > old_epoch);
    assert!(!d.partitions[0].isr.contains(&old), "the frozen leader left the ISR");
    // A client that looks the leader up now finds the new one (p's cached metadata still
    // points at the frozen broker, where a send would wait for the pause to end).
    let mut q = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("q")).await.unwrap();
    for i in 0..5 {
        q.send("t", 0, Bytes::from(format!("after-{i}"))).await.unwrap();
    }

    // The old leader wakes and, before it hears from the coordinator, acts on what it knew:
    // it replicates (refused by epoch) and takes a produce at its old epoch (never acknowledged).
    let stale = Connection::connect(&c.broker_addrs[(old - 1) as usize]).await.unwrap();
    let req = stale_produce(&p, 5, old_epoch);
    c.switches[(old - 1) as usize].wake_without_heartbeats();
    let pending = tokio::spawn(async move { stale.call(req).await });
    let stats = c.switches[(old - 1) as usize].stats.clone();
    for _ in 0..200 {
        if stats.replication_refused_by_epoch.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        stats.replication_refused_by_epoch.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "followers refused the stale leader"
    );
    c.switches[(old - 1) as usize].thaw();
    match pending.await.unwrap().unwrap() {
        Response::Produce(r) => {
            assert!(
                matches!(r.status.code, ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch),
                "the stale leader must not acknowledge: {}",
                r.status
            );
        }
        other => panic!("{other:?}"),
    }

    // It becomes a follower, cuts its stale batch, and converges on the new leader's log.
    let d = until(&c, "the old leader back in sync", |d| {
        let p = &d.partitions[0];
        p.isr.contains(&old)
            && p.progress.len() == 3
            && p.progress.iter().all(|g| g.log_end_offset == 10 && g.high_watermark == 10)
    })
    .await;
    let new_leader = d.partitions[0].leader_id;
    assert_eq!(committed_bytes(&c, old, 10), committed_bytes(&c, new_leader, 10));
    let v = values(&c).await;
    assert_eq!(v.len(), 10);
    assert!(!v.iter().any(|v| v == "stale"));
    c.shutdown().await;
}

#[tokio::test]
async fn without_leader_epoch_checks_a_stale_leader_makes_replicas_diverge() {
    // The negative case: followers that ignore leader epochs take the woken leader's traffic.
    let c = LocalCluster::start(LocalOptions {
        brokers: 3,
        broker_lease_ms: 400,
        leader_epoch_checks: false,
        ..Default::default()
    })
    .await
    .unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("r")).await.unwrap();
    for i in 0..3 {
        p.send("t", 0, Bytes::from(format!("before-{i}"))).await.unwrap();
    }
    let mut admin = c.admin();
    let before = describe(&mut admin).await;
    let (old, old_epoch) = (before.partitions[0].leader_id, before.partitions[0].leader_epoch);
    c.switches[(old - 1) as usize].freeze();
    let d = until(&c, "a new leader", |d| d.partitions[0].leader_id != old && d.partitions[0].leader_id > 0).await;
    let new_leader = d.partitions[0].leader_id;
    let mut q = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("q")).await.unwrap();
    for i in 0..3 {
        q.send("t", 0, Bytes::from(format!("acked-{i}"))).await.unwrap();
    }
    let follower = (1..=3).find(|b| *b != old && *b != new_leader).unwrap();
    assert_eq!(
        committed_bytes(&c, follower, 6),
        committed_bytes(&c, new_leader, 6),
        "acks=all: in step before the wake"
    );
    // Wake the old leader without letting it hear from the coordinator, and hand it a write
    // at its old leader epoch: it appends it at offset 3 and pushes it to the followers.
    let stale = Connection::connect(&c.broker_addrs[(old - 1) as usize]).await.unwrap();
    let req = stale_produce(&p, 3, old_epoch);
    c.switches[(old - 1) as usize].wake_without_heartbeats();
    let _pending = tokio::spawn(async move { stale.call(req).await });
    let mut diverged = false;
    for _ in 0..200 {
        let leader_log = committed_bytes(&c, new_leader, 6);
        let follower_log = committed_bytes(&c, follower, 6);
        if follower_log != leader_log {
            diverged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(diverged, "without epoch checks the stale leader rewrote a follower's acknowledged records");
    c.shutdown().await;
}

/// A produce of one record `value` by `p` at sequence `seq`, with `acks`.
fn produce_at(p: &Producer, seq: i32, value: &str, acks: i8) -> Request {
    let batch = build_batch(
        ProducerStamp { producer_id: p.producer_id(), producer_epoch: p.epoch(), base_sequence: seq },
        false,
        0,
        &[Bytes::from(value.to_string())],
    );
    Request::Produce(ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch: -1,
        acks,
        records: batch,
    })
}

fn produced(answer: Result<Response, net::NetError>) -> protocol::ProduceResponse {
    match answer.unwrap() {
        Response::Produce(r) => r,
        other => panic!("wrong answer {other:?}"),
    }
}

/// Two brokers, topic `t` with one partition on both, and a producer for `tid` whose first
/// batch ("v0", which needs the coordinator's verification, so it goes through whole) both
/// replicas hold: the cluster, the producer, the leader and the follower.
async fn two_replicas_in_sync(opts: LocalOptions, tid: &str) -> (LocalCluster, Producer, i32, i32) {
    assert_eq!(opts.brokers, 2);
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic_replicated("t", 1, 2).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional(tid)).await.unwrap();
    p.send("t", 0, Bytes::from_static(b"v0")).await.unwrap();
    let d = until(&c, "both replicas in sync at 1", |d| {
        let p = &d.partitions[0];
        p.isr.len() == 2 && p.progress.len() == 2 && p.progress.iter().all(|g| g.log_end_offset == 1)
    })
    .await;
    let leader = d.partitions[0].leader_id;
    (c, p, leader, 3 - leader)
}

#[tokio::test]
async fn pipelined_acks_all_batches_are_appended_while_earlier_ones_wait_for_the_replicas() {
    // Long lease and lag: the frozen follower stays in the ISR, so nothing commits until it wakes.
    let opts = LocalOptions { brokers: 2, broker_lease_ms: 60_000, replica_lag_ms: 60_000, ..Default::default() };
    let (c, p, leader, follower) = two_replicas_in_sync(opts, "pipe").await;
    c.switches[(follower - 1) as usize].freeze();

    // Two acks=all batches pipelined on one connection: neither can commit while the follower
    // sleeps, yet both must be in the leader's log.
    let conn = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    let first = conn.submit(produce_at(&p, 1, "v1", ACKS_ALL)).await.unwrap();
    let second = conn.submit(produce_at(&p, 2, "v2", ACKS_ALL)).await.unwrap();
    // The proof: the next sequence, sent with acks=1 on another connection, is accepted only
    // once both are appended (before, it is out of order). A broker that handled the first
    // connection's requests one whole request at a time would refuse it until the follower woke.
    let probe = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    let mut accepted = None;
    for _ in 0..1_000 {
        let r = produced(probe.call(produce_at(&p, 3, "v3", ACKS_LEADER)).await);
        match r.status.code {
            ErrorCode::None => {
                accepted = Some(r);
                break;
            }
            ErrorCode::OutOfOrderSequenceNumber => tokio::time::sleep(Duration::from_millis(10)).await,
            _ => panic!("probe refused: {}", r.status),
        }
    }
    let accepted = accepted.expect("the pipelined batches were appended while the first waited for the follower");
    assert_eq!(accepted.base_offset, 3);

    c.switches[(follower - 1) as usize].thaw();
    let (first, second) = (produced(first.await), produced(second.await));
    assert!(first.status.is_ok() && second.status.is_ok(), "{} / {}", first.status, second.status);
    assert_eq!((first.base_offset, second.base_offset), (1, 2), "answered in order, at the offsets sent");
    // The probe was acks=1: it is committed once the follower has it too.
    until(&c, "every replica at 4", |d| {
        let p = &d.partitions[0];
        p.progress.len() == 2 && p.progress.iter().all(|g| g.log_end_offset == 4 && g.high_watermark == 4)
    })
    .await;
    assert_eq!(values(&c).await, ["v0", "v1", "v2", "v3"]);
    c.shutdown().await;
}

/// A follower further behind than the batches its leader keeps in memory
/// (`replication_cache_bytes_max`, 1 MiB) is served from the leader's log file, and ends with
/// the leader's bytes all the same.
#[tokio::test]
async fn a_follower_behind_the_kept_batches_catches_up_from_the_file() {
    let opts = LocalOptions { brokers: 2, broker_lease_ms: 60_000, replica_lag_ms: 60_000, ..Default::default() };
    assert!(opts.replication_inflight_max <= 4, "the sums below assume at most 4 requests in flight");
    let (c, p, leader, follower) = two_replicas_in_sync(opts, "behind").await;
    let stats = &c.switches[(leader - 1) as usize].stats;
    c.switches[(follower - 1) as usize].freeze();
    // 20 batches of 300 KiB with acks=1. At most 12 of them go out while the follower is frozen
    // (4 requests in flight of at most 1 MiB each); the rest stay unsent until it answers, and
    // by then the leader keeps only the newest megabyte of them.
    let conn = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    for seq in 1..=20 {
        let value = format!("{seq:02}").repeat(150 * 1024);
        let r = produced(conn.call(produce_at(&p, seq, &value, ACKS_LEADER)).await);
        assert!(r.status.is_ok(), "{}", r.status);
    }
    let from_file = stats.replicate_requests_from_file.load(Ordering::Relaxed);
    c.switches[(follower - 1) as usize].thaw();
    until(&c, "both replicas at 21", |d| {
        let p = &d.partitions[0];
        p.progress.len() == 2 && p.progress.iter().all(|g| g.log_end_offset == 21 && g.high_watermark == 21)
    })
    .await;
    assert!(
        stats.replicate_requests_from_file.load(Ordering::Relaxed) > from_file,
        "the batches no longer kept were read from the file"
    );
    assert!(stats.replicate_requests_from_memory.load(Ordering::Relaxed) > 0);
    assert_eq!(committed_bytes(&c, follower, 21), committed_bytes(&c, leader, 21));
    c.shutdown().await;
}

/// Raft's pipelined AppendEntries: a batch appended while an earlier Replicate is unanswered
/// goes to the follower at once instead of waiting for that answer. With the follower frozen
/// nothing is answered, so each append must still send a request of its own; a leader that
/// waited for answers would send nothing more until the follower woke.
#[tokio::test]
async fn batches_are_replicated_while_earlier_replicate_requests_are_unanswered() {
    let opts = LocalOptions { brokers: 2, broker_lease_ms: 60_000, replica_lag_ms: 60_000, ..Default::default() };
    assert!(opts.replication_inflight_max >= 3, "one empty request, then one per batch");
    let (c, p, leader, follower) = two_replicas_in_sync(opts, "pipe").await;
    c.switches[(follower - 1) as usize].freeze();
    let sent = &c.switches[(leader - 1) as usize].stats.replicate_requests_sent;

    let conn = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    for (seq, value) in [(1, "v1"), (2, "v2")] {
        let before = sent.load(Ordering::Relaxed);
        let r = produced(conn.call(produce_at(&p, seq, value, ACKS_LEADER)).await);
        assert!(r.status.is_ok(), "{}", r.status);
        // At most one request without batches was in flight when the follower froze (the
        // leader sends those only when nothing else is), so each batch gets a request of its own.
        let mut waited = 0;
        while sent.load(Ordering::Relaxed) == before {
            waited += 1;
            assert!(waited < 1_000, "batch {seq} was not sent while earlier requests were unanswered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    c.switches[(follower - 1) as usize].thaw();
    until(&c, "every replica at 3", |d| {
        let p = &d.partitions[0];
        p.progress.len() == 2 && p.progress.iter().all(|g| g.log_end_offset == 3 && g.high_watermark == 3)
    })
    .await;
    assert_eq!(values(&c).await, ["v0", "v1", "v2"]);
    // Each pipelined request started where the one before it ended: the follower never had to
    // say that a request did not continue its log.
    let diverged = c.switches[(leader - 1) as usize].stats.replicate_answers_diverged.load(Ordering::Relaxed);
    assert_eq!(diverged, 0, "a pipelined request started somewhere the follower's log does not end");
    c.shutdown().await;
}

/// A disk whose fdatasync of the files under one directory waits until released (or fails),
/// the other calls going straight to the operating system's files.
#[derive(Debug, Default)]
struct SlowDisk {
    held: std::sync::Mutex<Option<std::path::PathBuf>>,
    /// fdatasync of files under this directory fails (an I/O error).
    failing: std::sync::Mutex<Option<std::path::PathBuf>>,
    released: std::sync::Condvar,
    /// The file of every log write, in order.
    writes: std::sync::Mutex<Vec<std::path::PathBuf>>,
}

impl SlowDisk {
    fn hold(&self, dir: std::path::PathBuf) {
        *self.held.lock().unwrap() = Some(dir);
    }

    fn fail(&self, dir: std::path::PathBuf) {
        *self.failing.lock().unwrap() = Some(dir);
    }

    fn release(&self) {
        *self.held.lock().unwrap() = None;
        self.released.notify_all();
    }

    /// How many log writes went to files under `dir`.
    fn writes_under(&self, dir: &std::path::Path) -> usize {
        self.writes.lock().unwrap().iter().filter(|p| p.starts_with(dir)).count()
    }

    fn wait(&self, path: &std::path::Path) {
        let mut held = self.held.lock().unwrap();
        while held.as_ref().is_some_and(|d| path.starts_with(d)) {
            held = self.released.wait(held).unwrap();
        }
    }
}

#[derive(Debug)]
struct SlowStorage(std::sync::Arc<SlowDisk>);

#[derive(Debug)]
struct SlowFile {
    file: std::sync::Arc<dyn StoredFile>,
    path: std::path::PathBuf,
    disk: std::sync::Arc<SlowDisk>,
}

impl Storage for SlowStorage {
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        OsStorage.create_dir_all(dir)
    }
    fn exists(&self, path: &std::path::Path) -> bool {
        OsStorage.exists(path)
    }
    fn list(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        OsStorage.list(dir)
    }
    fn open(&self, path: &std::path::Path, create: bool) -> std::io::Result<std::sync::Arc<dyn StoredFile>> {
        let file = OsStorage.open(path, create)?;
        Ok(std::sync::Arc::new(SlowFile { file, path: path.to_path_buf(), disk: self.0.clone() }))
    }
    fn read(&self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
        OsStorage.read(path)
    }
    fn write_file_atomically(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        OsStorage.write_file_atomically(path, bytes)
    }
    fn remove(&self, path: &std::path::Path) -> std::io::Result<()> {
        OsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &std::path::Path) {
        OsStorage.sync_dir(dir)
    }
}

impl StoredFile for SlowFile {
    fn append(&self, pieces: &[&[u8]]) -> std::io::Result<()> {
        self.disk.writes.lock().unwrap().push(self.path.clone());
        self.file.append(pieces)
    }
    fn read_at(&self, pos: u64, len: usize) -> std::io::Result<Bytes> {
        self.file.read_at(pos, len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.disk.wait(&self.path);
        if self.disk.failing.lock().unwrap().as_ref().is_some_and(|d| self.path.starts_with(d)) {
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        self.file.sync_data()
    }
}

/// `--fsync always` with acks=1: the leader answers once the batch is on its disk. If it was
/// deposed while the write went to disk, the new leader may already have cut the batch, so the
/// old one must not acknowledge it: NOT_LEADER_OR_FOLLOWER, and the producer retries at the
/// new leader.
#[tokio::test]
async fn a_leader_deposed_while_an_acks_1_batch_goes_to_disk_does_not_acknowledge_it() {
    let disk = std::sync::Arc::new(SlowDisk::default());
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(SlowStorage(disk.clone()));
    let opts = LocalOptions { brokers: 2, broker_lease_ms: 400, storage: Some(storage), ..Default::default() };
    assert_eq!(opts.fsync, broker::server::FsyncPolicy::Always);
    let (c, p, leader, follower) = two_replicas_in_sync(opts, "slow").await;

    // The leader's disk stalls; an acks=1 batch is appended and waits for it.
    disk.hold(c.dir.path().join(format!("broker-{leader}")));
    let conn = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    let mut answer = Box::pin(conn.submit(produce_at(&p, 1, "v1", ACKS_LEADER)).await.unwrap());
    until(&c, "the follower holds v1", |d| {
        d.partitions[0].progress.iter().any(|g| g.broker_id == follower && g.log_end_offset == 2)
    })
    .await;
    assert!(futures::FutureExt::now_or_never(&mut answer).is_none(), "answered before its disk had the batch");

    // Its heartbeats stop: its lease runs out and the follower is elected.
    c.switches[(leader - 1) as usize].freeze();
    c.switches[(leader - 1) as usize].wake_without_heartbeats();
    until(&c, "the follower elected", |d| d.partitions[0].leader_id == follower).await;
    c.switches[(leader - 1) as usize].thaw();
    // The old leader learns it from its next heartbeat: it then refuses reads as a leader.
    let probe = Connection::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    let mut learnt = false;
    for _ in 0..1_000 {
        let fetch = protocol::FetchRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: -1,
            offset: 0,
            max_bytes: 1024,
            isolation: protocol::READ_UNCOMMITTED,
        };
        match probe.call(Request::Fetch(fetch)).await.unwrap() {
            Response::Fetch(f) if f.status.code == ErrorCode::NotLeaderOrFollower => {
                learnt = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    assert!(learnt, "the old leader learnt it was deposed");

    // Now its disk has the batch, but it no longer leads.
    disk.release();
    let r = produced(answer.await);
    assert_eq!(r.status.code, ErrorCode::NotLeaderOrFollower, "a deposed leader acknowledged: {}", r.status);
    c.shutdown().await;
}

/// Pipelined produce requests that reach the leader in one read are appended as a group: each
/// passes the gate in turn, all land in order, and the leader's log takes them in one write
/// (the follower, in one write per Replicate).
#[tokio::test]
async fn batches_that_arrive_together_are_appended_in_one_write() {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    use tokio_util::codec::{Encoder, FramedRead};
    let disk = std::sync::Arc::new(SlowDisk::default());
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(SlowStorage(disk.clone()));
    let opts = LocalOptions { brokers: 2, storage: Some(storage), ..Default::default() };
    // "v0" went through alone: the producer is verified on the partition.
    let (c, p, leader, _) = two_replicas_in_sync(opts, "group").await;
    let leader_dir = c.dir.path().join(format!("broker-{leader}"));
    let before = disk.writes_under(&leader_dir);

    // Eight batches, sequences 1..=8, in one write to the socket.
    let mut codec = protocol::codec::ClientCodec::new(1 << 20);
    let mut frames = bytes::BytesMut::new();
    for seq in 1..=8 {
        codec.encode((seq, produce_at(&p, seq, &format!("v{seq}"), ACKS_ALL)), &mut frames).unwrap();
    }
    let mut socket = tokio::net::TcpStream::connect(&c.broker_addrs[(leader - 1) as usize]).await.unwrap();
    socket.write_all(&frames).await.unwrap();
    let mut answers = FramedRead::new(socket, protocol::codec::ClientCodec::new(1 << 20));
    for seq in 1..=8 {
        let (id, resp) = answers.next().await.unwrap().unwrap();
        let Response::Produce(r) = resp else { panic!("wrong answer {resp:?}") };
        assert_eq!((id, r.status.code, r.base_offset), (seq, ErrorCode::None, i64::from(seq)), "{r:?}");
    }
    let writes = disk.writes_under(&leader_dir) - before;
    assert!(writes <= 2, "8 batches that arrived together took {writes} writes on the leader");
    assert_eq!(values(&c).await, (0..=8).map(|s| format!("v{s}")).collect::<Vec<_>>());
    c.shutdown().await;
}

/// KIP-112: a leader whose fdatasync fails on a partition's log reports the replica offline in
/// its heartbeats; the coordinator moves the leadership to a healthy in-sync replica and takes
/// the failed one out of the ISR, so the producer's retry lands there. (The partition used to
/// answer KAFKA_STORAGE_ERROR for good while healthy followers could lead.)
#[tokio::test]
async fn a_leader_whose_disk_failed_gives_up_its_leadership_to_a_healthy_replica() {
    let disk = std::sync::Arc::new(SlowDisk::default());
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(SlowStorage(disk.clone()));
    let opts = LocalOptions { brokers: 3, storage: Some(storage), kafka: true, ..Default::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.wait_for("three live brokers", Duration::from_secs(10), |d| d.brokers.iter().filter(|b| b.alive).count() == 3)
        .await
        .unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await.unwrap();
    p.send("t", 0, Bytes::from_static(b"before")).await.unwrap();
    let d = c.wait_for("all in sync", Duration::from_secs(10), |d| d.partitions[0].isr.len() == 3).await.unwrap();
    let failed = d.partitions[0].leader_id;
    disk.fail(c.replica_dir(failed, "t", 0));
    p.send("t", 0, Bytes::from_static(b"after")).await.expect("the retry lands on a healthy leader");
    let d = c
        .wait_for("the failed replica out of the ISR", Duration::from_secs(10), |d| {
            !d.partitions[0].isr.contains(&failed)
        })
        .await
        .unwrap();
    assert_ne!(d.partitions[0].leader_id, failed);
    assert_eq!(values(&c).await, ["before", "after"]);
    // Issue 32, item 4: Kafka's DescribeLogDirs shows the failed broker's log directory offline
    // (KAFKA_STORAGE_ERROR, no replicas), a healthy one's with the replica's real size.
    let describe = |id: i32| {
        let addr = c.kafka_addrs[(id - 1) as usize].clone();
        async move {
            let conn = producer::kafka::KafkaConnection::connect(&addr, None, Duration::from_secs(10)).await.unwrap();
            let req = kafka_protocol::messages::DescribeLogDirsRequest::default().with_topics(None);
            conn.call(&req, 4).await.unwrap().results.remove(0)
        }
    };
    let offline = describe(failed).await;
    assert_eq!((offline.error_code, offline.topics.len()), (56, 0), "{offline:?}");
    let healthy = describe(d.partitions[0].leader_id).await;
    assert_eq!(healthy.error_code, 0);
    let size = healthy.topics[0].partitions[0].partition_size;
    let on_disk: u64 = broker::log::segment_files(&c.replica_dir(d.partitions[0].leader_id, "t", 0))
        .unwrap()
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(size as u64, on_disk, "{healthy:?}");
    c.shutdown().await;
}
