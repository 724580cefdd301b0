//! Producer fencing over real TCP, against an in-process coordinator and broker.

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use net::Connection;
use producer::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{ErrorCode, InitProducerIdRequest, ProduceRequest, Request, Response, ACKS_ALL};

async fn cluster(partitions: i32) -> LocalCluster {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", partitions).await.unwrap();
    c
}

async fn producer(c: &LocalCluster, tid: &str) -> Producer {
    Producer::init(&c.coordinator_addr, ProducerConfig::transactional(tid)).await.unwrap()
}

async fn values(c: &LocalCluster, partition: i32) -> Vec<String> {
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    let records = consumer.read_to_end("t", partition, 0).await.unwrap();
    records.iter().map(|r| String::from_utf8_lossy(&r.value).into_owned()).collect()
}

fn v(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

fn assert_fenced(r: Result<producer::RecordMetadata, ClientError>, own: i16, current: i16) {
    match r {
        Err(ClientError::Fenced { own_epoch, current_epoch, .. }) => {
            assert_eq!((own_epoch, current_epoch), (own, current));
        }
        other => panic!("expected the zombie to be fenced, got {other:?}"),
    }
}

#[tokio::test]
async fn zombie_write_rejected_after_new_init() {
    let c = cluster(1).await;
    let mut a = producer(&c, "orders").await;
    a.send("t", 0, v("A-0")).await.unwrap();
    // A pauses; B starts with the same transactional id and writes.
    let mut b = producer(&c, "orders").await;
    assert_eq!((b.producer_id(), b.epoch()), (a.producer_id(), a.epoch() + 1));
    b.send("t", 0, v("B-0")).await.unwrap();
    // A resumes.
    assert_fenced(a.send("t", 0, v("A-1")).await, 0, 1);
    assert_eq!(values(&c, 0).await, vec!["A-0", "B-0"], "B's data intact, nothing of A after B");
    // B carries on undisturbed.
    b.send("t", 0, v("B-1")).await.unwrap();
    assert_eq!(values(&c, 0).await, vec!["A-0", "B-0", "B-1"]);
    c.shutdown().await;
}

#[tokio::test]
async fn zombie_rejected_before_the_new_instance_writes_anywhere() {
    let c = cluster(1).await;
    let mut a = producer(&c, "orders").await;
    a.send("t", 0, v("A-0")).await.unwrap();
    let _b = producer(&c, "orders").await; // initialised, has not written
    assert_fenced(a.send("t", 0, v("A-1")).await, 0, 1);
    assert_eq!(values(&c, 0).await, vec!["A-0"]);
    c.shutdown().await;
}

#[tokio::test]
async fn zombie_rejected_on_a_partition_it_never_touched() {
    let c = cluster(3).await;
    let mut a = producer(&c, "orders").await;
    a.send("t", 0, v("A-0")).await.unwrap();
    let mut b = producer(&c, "orders").await;
    b.send("t", 2, v("B-0")).await.unwrap();
    // Partition 1 has seen neither A nor B: it has never heard of epoch 1.
    assert_fenced(a.send("t", 1, v("A-1")).await, 0, 1);
    assert!(values(&c, 1).await.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn zombie_that_never_wrote_is_rejected_everywhere() {
    let c = cluster(2).await;
    let mut a = producer(&c, "orders").await;
    let _b = producer(&c, "orders").await;
    assert_fenced(a.send("t", 0, v("A-0")).await, 0, 1);
    assert_fenced(a.send("t", 1, v("A-0")).await, 0, 1);
    assert!(values(&c, 0).await.is_empty() && values(&c, 1).await.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn without_fencing_the_zombie_wins() {
    // The negative case: the same story against a broker that ignores epochs.
    let c = LocalCluster::start(LocalOptions { fencing: false, ..Default::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let mut a = producer(&c, "orders").await;
    a.send("t", 0, v("A-0")).await.unwrap();
    let mut b = producer(&c, "orders").await;
    b.send("t", 0, v("B-0")).await.unwrap();
    a.send("t", 0, v("A-stale")).await.expect("an unfenced broker takes the zombie's write");
    assert_eq!(values(&c, 0).await.last().map(String::as_str), Some("A-stale"));
    c.shutdown().await;
}

#[tokio::test]
async fn same_instance_writes_many_times_at_one_epoch() {
    let c = cluster(2).await;
    let mut a = producer(&c, "orders").await;
    let mut last = [-1i64; 2];
    for i in 0..200 {
        let p = i % 2;
        let m = a.send("t", p, v(&format!("A-{i}"))).await.unwrap();
        assert_eq!(m.producer_epoch, 0);
        assert!(m.base_offset > last[p as usize]);
        last[p as usize] = m.base_offset;
    }
    assert_eq!(values(&c, 0).await.len(), 100);
    assert_eq!(values(&c, 1).await.len(), 100);
    c.shutdown().await;
}

#[tokio::test]
async fn epochs_strictly_increase_over_1000_inits() {
    let c = cluster(1).await;
    let conn = Connection::connect(&c.coordinator_addr).await.unwrap();
    let mut last = (-1i64, -1i16);
    for _ in 0..1000 {
        let req = Request::InitProducerId(InitProducerIdRequest {
            transactional_id: Some("hot".into()),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            principal: String::new(),
        });
        let Response::InitProducerId(r) = conn.call(req).await.unwrap() else { panic!("wrong answer") };
        assert!(r.status.is_ok(), "{}", r.status);
        assert!((r.producer_id, r.producer_epoch) > last, "{:?} after {last:?}", (r.producer_id, r.producer_epoch));
        last = (r.producer_id, r.producer_epoch);
    }
    assert_eq!(last.1, 999);
    c.shutdown().await;
}

#[tokio::test]
async fn concurrent_inits_of_one_id_all_get_distinct_epochs() {
    let c = cluster(1).await;
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let addr = c.coordinator_addr.clone();
        tasks.push(tokio::spawn(async move {
            Producer::init(&addr, ProducerConfig::transactional("shared")).await.unwrap().epoch()
        }));
    }
    let mut epochs = Vec::new();
    for t in tasks {
        epochs.push(t.await.unwrap());
    }
    epochs.sort();
    epochs.dedup();
    assert_eq!(epochs.len(), 64, "no epoch handed out twice");
    c.shutdown().await;
}

fn raw_batch(pid: i64, epoch: i16, seq: i32, value: &str) -> Bytes {
    build_batch(ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq }, false, 0, &[v(value)])
}

async fn raw_produce(conn: &Connection, leader_epoch: i32, records: Bytes) -> protocol::ProduceResponse {
    let req = Request::Produce(ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch,
        acks: ACKS_ALL,
        records,
    });
    match conn.call(req).await.unwrap() {
        Response::Produce(r) => r,
        other => panic!("wrong answer {other:?}"),
    }
}

/// Produce until the broker has learnt the partition at `leader_epoch` (it learns through
/// heartbeats): answers other than NOT_LEADER / UNKNOWN_LEADER_EPOCH end the wait.
async fn produce_when_ready(conn: &Connection, leader_epoch: i32, records: Bytes) -> protocol::ProduceResponse {
    for _ in 0..500 {
        let r = raw_produce(conn, leader_epoch, records.clone()).await;
        if !matches!(r.status.code, ErrorCode::NotLeaderOrFollower | ErrorCode::UnknownLeaderEpoch) {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let r = raw_produce(conn, leader_epoch, records).await;
    panic!("broker never learnt leader epoch {leader_epoch}: {}", r.status);
}

#[tokio::test]
async fn duplicate_batch_is_answered_with_its_original_offset() {
    let c = cluster(1).await;
    let p = producer(&c, "dup").await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    let first = raw_batch(p.producer_id(), p.epoch(), 0, "once");
    let r1 = produce_when_ready(&conn, 0, first.clone()).await;
    assert!(r1.status.is_ok(), "{}", r1.status);
    let r2 = raw_produce(&conn, 0, first).await;
    assert!(r2.status.is_ok(), "{}", r2.status);
    assert_eq!(r2.base_offset, r1.base_offset);
    let r3 = raw_produce(&conn, 0, raw_batch(p.producer_id(), p.epoch(), 1, "next")).await;
    assert_eq!(r3.base_offset, r1.base_offset + 1, "the duplicate took no offset");
    // A gap is refused, not appended.
    let r4 = raw_produce(&conn, 0, raw_batch(p.producer_id(), p.epoch(), 5, "gap")).await;
    assert_eq!(r4.status.code, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(values(&c, 0).await, vec!["once", "next"]);
    c.shutdown().await;
}

#[tokio::test]
async fn never_granted_producer_id_is_refused() {
    let c = cluster(1).await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    let r = produce_when_ready(&conn, 0, raw_batch(4242, 0, 0, "forged")).await;
    assert_eq!(r.status.code, ErrorCode::UnknownProducerId, "{}", r.status);
    assert!(values(&c, 0).await.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn stale_leader_epoch_on_produce_is_fenced_leader_epoch() {
    let c = cluster(1).await;
    let p = producer(&c, "le").await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    let r = produce_when_ready(&conn, 0, raw_batch(p.producer_id(), p.epoch(), 0, "at-0")).await;
    assert!(r.status.is_ok(), "{}", r.status);
    let (_, epoch) = c.admin().elect_leader("t", 0).await.unwrap();
    assert_eq!(epoch, 1);
    // Once the broker has learnt epoch 1, epoch 0 is stale and epoch 2 is from the future.
    let r = produce_when_ready(&conn, 1, raw_batch(p.producer_id(), p.epoch(), 1, "at-1")).await;
    assert!(r.status.is_ok(), "{}", r.status);
    assert_eq!(r.current_leader_epoch, 1);
    let r = raw_produce(&conn, 0, raw_batch(p.producer_id(), p.epoch(), 2, "stale-leader")).await;
    assert_eq!(r.status.code, ErrorCode::FencedLeaderEpoch, "{}", r.status);
    let r = raw_produce(&conn, 2, raw_batch(p.producer_id(), p.epoch(), 2, "future-leader")).await;
    assert_eq!(r.status.code, ErrorCode::UnknownLeaderEpoch, "{}", r.status);
    assert_eq!(values(&c, 0).await, vec!["at-0", "at-1"]);
    // The stored batches carry the leader epoch they were appended under.
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    let epochs: Vec<i32> = consumer.read_to_end("t", 0, 0).await.unwrap().iter().map(|r| r.leader_epoch).collect();
    assert_eq!(epochs, vec![0, 1]);
    c.shutdown().await;
}

#[tokio::test]
async fn corrupt_batch_is_refused_and_nothing_is_stored() {
    let c = cluster(1).await;
    let p = producer(&c, "crc").await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    let mut bad = raw_batch(p.producer_id(), p.epoch(), 0, "flipped").to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let r = produce_when_ready(&conn, 0, Bytes::from(bad)).await;
    assert_eq!(r.status.code, ErrorCode::CorruptMessage, "{}", r.status);
    assert!(r.status.message.contains("CRC32C"), "{}", r.status.message);
    assert!(values(&c, 0).await.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn pipelined_batches_on_one_connection_are_appended_in_the_order_sent() {
    let c = cluster(1).await;
    let p = producer(&c, "pipe").await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    // Wait until the broker leads the partition, then send 50 batches without waiting.
    let first = produce_when_ready(&conn, 0, raw_batch(p.producer_id(), p.epoch(), 0, "b0")).await;
    assert!(first.status.is_ok(), "{}", first.status);
    let calls: Vec<_> = (1..50)
        .map(|seq| {
            let conn = conn.clone();
            let records = raw_batch(p.producer_id(), p.epoch(), seq, &format!("b{seq}"));
            tokio::spawn(async move {
                let req = Request::Produce(ProduceRequest {
                    transactional_id: None,
                    topic: "t".into(),
                    partition: 0,
                    leader_epoch: 0,
                    acks: ACKS_ALL,
                    records,
                });
                conn.call(req).await
            })
        })
        .collect();
    let mut offsets = vec![first.base_offset];
    for call in calls {
        let Response::Produce(r) = call.await.unwrap().unwrap() else { panic!("wrong answer") };
        assert!(r.status.is_ok(), "a pipelined batch was refused: {}", r.status);
        offsets.push(r.base_offset);
    }
    assert_eq!(offsets, (0..50).collect::<Vec<i64>>(), "appended in the order sent");
    c.shutdown().await;
}

/// Issue 28: a produce to one of Kafka's internal names is refused INVALID_TOPIC_EXCEPTION
/// before any partition is looked up (a topic of that name left in a data directory from before
/// they were reserved takes no writes), and one to an ordinary unknown name is not.
#[tokio::test]
async fn a_produce_to_a_reserved_name_is_refused_as_an_invalid_topic() {
    let c = cluster(1).await;
    let conn = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    let batch = build_batch(
        ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
        false,
        0,
        &[Bytes::from_static(b"x")],
    );
    let produce = |topic: &str| {
        Request::Produce(ProduceRequest {
            transactional_id: None,
            topic: topic.into(),
            partition: 0,
            leader_epoch: -1,
            acks: ACKS_ALL,
            records: batch.clone(),
        })
    };
    let Response::Produce(r) = conn.call(produce("__consumer_offsets")).await.unwrap() else { panic!("wrong answer") };
    assert_eq!(r.status.code, ErrorCode::InvalidTopicException, "{}", r.status);
    assert!(r.status.message.contains("reserved"), "{}", r.status);
    let Response::Produce(r) = conn.call(produce("no-such-topic")).await.unwrap() else { panic!("wrong answer") };
    assert_ne!(r.status.code, ErrorCode::InvalidTopicException, "{}", r.status);
}
