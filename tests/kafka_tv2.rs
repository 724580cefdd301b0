//! Transaction version 2 on the Kafka listener (KIP-890 part 2, issue 31), over real TCP with
//! the producer crate's Kafka client and raw Kafka requests: what the listener offers under each
//! `--transaction-version`, transactions in a row that bump the epoch, and the two holes of
//! version 1 (a delayed write or a delayed EndTxn of transaction N landing in N+1), each held by
//! the test and released after N+1 began: refused under version 2, and shown landing under
//! version 1, so that the tests can fail.

mod common;

use common::kafka::{connect, name, tid, wait_ready};

use std::time::Duration;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use producer::kafka::{KafkaConnection, KafkaConsumer, KafkaProducer};
use producer::{ClientError, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};

const T: Duration = Duration::from_secs(10);

/// A one-broker cluster whose coordinator offers `transaction_version`, with topic "t" of one
/// partition led by the broker, once its Kafka listener offers that version.
async fn cluster(transaction_version: i16) -> LocalCluster {
    cluster_with(transaction_version, true).await
}

/// [`cluster`], with producer fencing on or off.
async fn cluster_with(transaction_version: i16, fencing: bool) -> LocalCluster {
    let opts = LocalOptions { kafka: true, transaction_version, fencing, ..LocalOptions::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    wait_ready(&c.kafka_addrs[0], "t", 1, Some(transaction_version)).await;
    c
}

/// A transactional produce request of one batch (`value`) at (producer id, epoch, sequence).
fn txn_produce(transactional_id: &str, (pid, epoch): (i64, i16), seq: i32, value: &'static str) -> ProduceRequest {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let stamp = ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
    let batch = build_batch(stamp, true, now, &[Bytes::from_static(value.as_bytes())]);
    ProduceRequest::default()
        .with_transactional_id(Some(tid(transactional_id)))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("t"))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))])])
}

fn produce_code(r: &ProduceResponse) -> i16 {
    r.responses[0].partition_responses[0].error_code
}

/// What a read_committed consumer reads of t-0, in order.
async fn committed(c: &LocalCluster) -> Vec<String> {
    let mut consumer = KafkaConsumer::read_committed(&c.kafka_bootstrap(), c.client_config());
    let records = consumer.read_to_end("t", 0, 0).await.unwrap();
    records.into_iter().map(|r| String::from_utf8(r.value.to_vec()).unwrap()).collect()
}

async fn producer(c: &LocalCluster, id: &str, transaction_version_max: i16) -> KafkaProducer {
    let mut p = KafkaProducer::init(&c.kafka_bootstrap(), ProducerConfig::transactional(id)).await.unwrap();
    p.set_transaction_version_max(transaction_version_max);
    p
}

/// Under version 2 the listener finalizes `transaction.version` 2 with Produce v12, EndTxn v5
/// and TxnOffsetCommit v5; under version 1 it offers none of them, and a request of one closes
/// the connection, as Kafka does with a version it does not serve.
#[tokio::test]
async fn the_listener_offers_the_coordinators_transaction_version() {
    let max = |conn: &KafkaConnection, key: ApiKey| {
        conn.api_versions().iter().find(|(k, ..)| *k == key as i16).map(|(_, _, max)| *max).unwrap()
    };
    let two = cluster(2).await;
    let conn = connect(&two).await;
    assert_eq!(conn.transaction_version(), 2);
    assert_eq!(
        (max(&conn, ApiKey::Produce), max(&conn, ApiKey::EndTxn), max(&conn, ApiKey::TxnOffsetCommit)),
        (12, 5, 5)
    );
    let features = conn.call(&ApiVersionsRequest::default(), 4).await.unwrap();
    assert!(features.finalized_features_epoch >= 1, "{features:?}");
    assert_eq!(features.supported_features[0].max_version, 2);
    two.shutdown().await;

    let one = cluster(1).await;
    let conn = connect(&one).await;
    assert_eq!(conn.transaction_version(), 1);
    assert_eq!(
        (max(&conn, ApiKey::Produce), max(&conn, ApiKey::EndTxn), max(&conn, ApiKey::TxnOffsetCommit)),
        (10, 4, 3)
    );
    let refused = conn.call(&txn_produce("x", (0, 0), 0, "v"), 12).await;
    assert!(refused.is_err(), "a Produce v12 under version 1 closes the connection: {refused:?}");
    let mut p = producer(&one, "one", 2).await;
    assert_eq!(p.transaction_version(), 1, "the client follows what is offered");
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"a")).await.unwrap();
    let epoch = p.epoch();
    p.commit().await.unwrap();
    assert_eq!(p.epoch(), epoch, "no bump under version 1");
    one.shutdown().await;
}

/// Transactions in a row under version 2: every EndTxn bumps the epoch and answers it, the next
/// transaction's sequences start at 0, no AddPartitionsToTxn is sent (Produce v12 adds the
/// partition), and read_committed shows exactly the committed records. A zombie of the
/// transactional id is fenced at its next EndTxn.
#[tokio::test]
async fn transactions_in_a_row_under_version_2_bump_the_epoch() {
    let c = cluster(2).await;
    let mut p = producer(&c, "row", 2).await;
    assert_eq!(p.transaction_version(), 2);
    let (pid, first) = (p.producer_id(), p.epoch());
    let mut want = Vec::new();
    for txn in 0..5i16 {
        p.begin().unwrap();
        for i in 0..3 {
            let v = format!("{txn}-{i}");
            p.send("t", 0, Bytes::from(v.clone())).await.unwrap();
            if txn != 2 {
                want.push(v);
            }
        }
        if txn == 2 {
            p.abort().await.unwrap();
        } else {
            p.commit().await.unwrap();
        }
        assert_eq!((p.producer_id(), p.epoch()), (pid, first + txn + 1), "one bump per transaction");
    }
    assert_eq!(committed(&c).await, want);

    // A zombie: a new instance initialises the id; the old one's EndTxn is fenced.
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"zombie")).await.unwrap();
    let _new = producer(&c, "row", 2).await;
    match p.commit().await {
        Err(ClientError::Fenced { .. }) => {}
        other => panic!("the zombie's EndTxn is fenced, got {other:?}"),
    }
    assert_eq!(committed(&c).await, want, "nothing of the zombie's transaction is committed");
    c.shutdown().await;
}

/// A write of transaction N that the network held until N+1 began (the test holds it): under
/// version 2 it carries the epoch N ended at, older than N+1's, and is refused; under version 1
/// N and N+1 share the epoch, and it lands in N+1 and is committed with it (KAFKA-17754). Under
/// version 2 on a broker with fencing off it lands too (the broker's gate is what refuses it),
/// while the transactions themselves still end (the partition is added all the same).
#[tokio::test]
async fn a_delayed_write_of_one_transaction_never_lands_in_the_next_under_version_2() {
    for (version, fencing) in [(2, true), (1, true), (2, false)] {
        let c = cluster_with(version, fencing).await;
        let conn = connect(&c).await;
        let mut p = producer(&c, "late", version).await;
        let ids = (p.producer_id(), p.epoch());
        // Transaction N writes "a" (sequence 0); its second write "late" (sequence 1) is held.
        p.begin().unwrap();
        p.send("t", 0, Bytes::from_static(b"a")).await.unwrap();
        let held = txn_produce("late", ids, 1, "late");
        p.commit().await.unwrap();
        // Transaction N+1 begins on the partition; then the held write arrives.
        p.begin().unwrap();
        let produce_version = if version == 2 {
            p.send("t", 0, Bytes::from_static(b"b")).await.unwrap();
            12
        } else {
            // As a version 1 client adds the partition before its first write there.
            let add = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid("late"))
                .with_v3_and_below_producer_id(ids.0.into())
                .with_v3_and_below_producer_epoch(ids.1)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![0])]);
            let r = conn.call(&add, 3).await.unwrap();
            assert_eq!(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, 0);
            10
        };
        let code = produce_code(&conn.call(&held, produce_version).await.unwrap());
        if version == 1 {
            p.set_next_sequence("t", 0, 2);
            p.send("t", 0, Bytes::from_static(b"b")).await.unwrap();
        }
        p.commit().await.unwrap();
        let read = committed(&c).await;
        if !fencing {
            assert_eq!(code, 0, "fencing off: the held write of N is taken");
            assert_eq!(read, ["a", "b", "late"], "fencing off: N's late write is committed with N+1");
        } else if version == 2 {
            assert_eq!(code, ErrorCodeNum::INVALID_PRODUCER_EPOCH, "the held write of N is fenced");
            assert_eq!(read, ["a", "b"]);
        } else {
            assert_eq!(code, 0, "version 1: the held write of N is taken into N+1");
            assert_eq!(read, ["a", "late", "b"], "version 1: N's late write is committed with N+1");
        }
        c.shutdown().await;
    }
}

/// An EndTxn (abort) of transaction N held until N+1 began: under version 2 it carries N's
/// epoch and is refused, and N+1 commits; under version 1 it ends N+1 instead (its writes are
/// aborted, and the producer's own commit then finds no transaction open).
#[tokio::test]
async fn a_delayed_end_txn_never_ends_the_next_transaction_under_version_2() {
    for version in [2i16, 1] {
        let c = cluster(version).await;
        let conn = connect(&c).await;
        let mut p = producer(&c, "end", version).await;
        let ids = (p.producer_id(), p.epoch());
        p.begin().unwrap();
        p.send("t", 0, Bytes::from_static(b"a")).await.unwrap();
        let held = EndTxnRequest::default()
            .with_transactional_id(tid("end"))
            .with_producer_id(ids.0.into())
            .with_producer_epoch(ids.1)
            .with_committed(false);
        p.commit().await.unwrap();
        p.begin().unwrap();
        p.send("t", 0, Bytes::from_static(b"b")).await.unwrap();
        let end_version = if version == 2 { 5 } else { 3 };
        let code = conn.call(&held, end_version).await.unwrap().error_code;
        let own = p.commit().await;
        let read = committed(&c).await;
        if version == 2 {
            assert_eq!(code, ErrorCodeNum::PRODUCER_FENCED, "the held EndTxn of N is fenced");
            own.unwrap();
            assert_eq!(read, ["a", "b"]);
        } else {
            assert_eq!(code, 0, "version 1: the held EndTxn of N aborts N+1");
            assert!(own.is_err(), "version 1: N+1 was ended by N's EndTxn: {own:?}");
            assert_eq!(read, ["a"], "version 1: N+1's write is aborted");
        }
        c.shutdown().await;
    }
}

/// EndTxn v5's retry rules (KIP-890): the same end again at the epoch it ended (a retry whose
/// answer was lost) succeeds with the producer id and epoch the transaction ended into, and
/// moves nothing; the other end at that epoch is INVALID_TXN_STATE, as in Kafka; an end at an
/// epoch older than that is fenced.
#[tokio::test]
async fn a_retried_end_txn_v5_is_answered_with_the_epoch_it_ended_into() {
    let c = cluster(2).await;
    let conn = connect(&c).await;
    let mut p = producer(&c, "retry", 2).await;
    let ids = (p.producer_id(), p.epoch());
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"a")).await.unwrap();
    p.commit().await.unwrap();
    assert_eq!((p.producer_id(), p.epoch()), (ids.0, ids.1 + 1));
    let end = |epoch: i16, commit: bool| {
        EndTxnRequest::default()
            .with_transactional_id(tid("retry"))
            .with_producer_id(ids.0.into())
            .with_producer_epoch(epoch)
            .with_committed(commit)
    };
    let again = conn.call(&end(ids.1, true), 5).await.unwrap();
    assert_eq!((again.error_code, again.producer_id.0, again.producer_epoch), (0, ids.0, ids.1 + 1), "{again:?}");
    let other = conn.call(&end(ids.1, false), 5).await.unwrap();
    assert_eq!(other.error_code, ErrorCodeNum::INVALID_TXN_STATE, "the other end of the ended transaction: {other:?}");
    assert_eq!((other.producer_id.0, other.producer_epoch), (-1, -1), "no id or epoch on an error");
    // The producer goes on at the epoch it was answered: nothing moved it.
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"b")).await.unwrap();
    p.commit().await.unwrap();
    assert_eq!(p.epoch(), ids.1 + 2);
    // Now two ends behind: not a retry of the last end, an older epoch: fenced.
    let stale = conn.call(&end(ids.1, true), 5).await.unwrap();
    assert_eq!(stale.error_code, ErrorCodeNum::PRODUCER_FENCED, "{stale:?}");
    assert_eq!(committed(&c).await, ["a", "b"]);
    c.shutdown().await;
}

/// Version 1 and version 2 transactions of one transactional id, one after the other: each
/// ends under the rules of its own requests' versions (AddPartitionsToTxn and EndTxn v3 keep
/// the epoch, EndTxn v5 bumps it), the coordinator records each one's version (`admin
/// describe`), and everything committed is read once.
#[tokio::test]
async fn versions_1_and_2_mix_on_one_transactional_id() {
    let c = cluster(2).await;
    let mut p = producer(&c, "mixed", 2).await;
    let start = p.epoch();
    let mut want = Vec::new();
    for (i, version) in [2i16, 1, 1, 2, 1, 2].into_iter().enumerate() {
        p.set_transaction_version_max(version);
        assert_eq!(p.transaction_version(), version);
        let before = p.epoch();
        p.begin().unwrap();
        let v = format!("{i}-v{version}");
        p.send("t", 0, Bytes::from(v.clone())).await.unwrap();
        want.push(v);
        p.commit().await.unwrap();
        let bumped = if version == 2 { 1 } else { 0 };
        assert_eq!(p.epoch(), before + bumped, "transaction {i} under version {version}");
        // The coordinator recorded the version the transaction ran under.
        let state = producer::Admin::new(&c.coordinator_addr, producer::ClientConfig::default()).describe().await;
        let t = state.unwrap().transactional_ids.into_iter().find(|t| t.transactional_id == "mixed").unwrap();
        assert_eq!((t.transaction_version, t.state.as_str()), (version, "CompleteCommit"), "transaction {i}");
    }
    assert!(p.epoch() > start);
    assert_eq!(committed(&c).await, want);
    c.shutdown().await;
}

/// TxnOffsetCommit v5 adds the group's offsets to the transaction itself (no AddOffsetsToTxn),
/// and they are committed with it; a v3 commit without AddOffsetsToTxn is refused.
#[tokio::test]
async fn txn_offset_commit_v5_adds_the_offsets_itself() {
    let c = cluster(2).await;
    let conn = connect(&c).await;
    let mut p = producer(&c, "offsets", 2).await;
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"a")).await.unwrap();
    let ids = (p.producer_id(), p.epoch());
    let commit = |version: i16, offset: i64, (pid, epoch): (i64, i16)| {
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(tid("offsets"))
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("t")).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(offset),
            ])]);
        let conn = conn.clone();
        async move { conn.call(&req, version).await.unwrap().topics[0].partitions[0].error_code }
    };
    assert_ne!(commit(3, 7, ids).await, 0, "v3 needs AddOffsetsToTxn first");
    // The implicit add is the coordinator's registration: another producer id is refused, and
    // its offset is not committed (7 is, below).
    let stranger = commit(5, 9, (ids.0 + 1_000, 0)).await;
    assert_eq!(stranger, ErrorCodeNum::INVALID_PRODUCER_ID_MAPPING, "another producer id's v5 commit");
    assert_eq!(commit(5, 7, ids).await, 0, "v5 adds the offsets itself");
    p.commit().await.unwrap();
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopic::default()
            .with_name(name("t"))
            .with_partition_indexes(vec![0])]))
        .with_require_stable(true);
    let r = conn.call(&fetch, 7).await.unwrap();
    assert_eq!(r.topics[0].partitions[0].committed_offset, 7, "committed with the transaction: {r:?}");
    c.shutdown().await;
}

/// Kafka's error numbers the tests compare with.
struct ErrorCodeNum;

impl ErrorCodeNum {
    const INVALID_PRODUCER_EPOCH: i16 = 47;
    const INVALID_TXN_STATE: i16 = 48;
    const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    const PRODUCER_FENCED: i16 = 90;
}

/// Epoch exhaustion under version 2, with real processes: the coordinator's journal says the
/// transactional id's producer id is one epoch from the last (written before it starts, as no
/// test can run 32,766 transactions); the init takes it to the last, and the EndTxn v5 after it
/// moves the producer to a new producer id at epoch 0 (its markers fence the old id for good).
/// The producer goes on under the new id; a zombie of the old one is fenced.
#[test]
fn epoch_exhaustion_moves_a_version_2_producer_to_a_new_producer_id() {
    use coordinator::entry::Entry;
    use coordinator::table::EPOCH_GRANT_MAX;
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = coordinator::journal::Journal::open(dir.path().join("coordinator").join("journal")).unwrap();
        let grant = Entry::Grant {
            transactional_id: Some("worn".into()),
            producer_id: 1,
            epoch: EPOCH_GRANT_MAX - 1,
            requested_by: None,
            transaction_timeout_ms: 60_000,
            fence: vec![],
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(journal.append(vec![grant.encode()])).unwrap().unwrap();
    }
    let c = common::coordinator(dir.path());
    let mut b = common::broker_with(1, &c.addr, dir.path(), &["--kafka-listen", "127.0.0.1:0"]);
    let line = b.next_line();
    let kafka = line.rsplit(' ').next().unwrap().to_string();
    assert!(line.starts_with("broker 1 kafka listening on "), "{line}");
    common::create_topic(&c.addr, "t", 1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        wait_ready(&kafka, "t", 1, Some(2)).await;
        let config = |id: &str| ProducerConfig {
            client: producer::ClientConfig { request_timeout_ms: 10_000, ..Default::default() },
            ..ProducerConfig::transactional(id)
        };
        let mut p = KafkaProducer::init(&kafka, config("worn")).await.unwrap();
        assert_eq!((p.producer_id(), p.epoch(), p.transaction_version()), (1, EPOCH_GRANT_MAX, 2));
        p.begin().unwrap();
        p.send("t", 0, Bytes::from_static(b"last")).await.unwrap();
        p.commit().await.unwrap();
        let (pid, epoch) = (p.producer_id(), p.epoch());
        assert!(pid != 1 && epoch == 0, "a new producer id at epoch 0 after exhaustion: ({pid}, {epoch})");
        p.begin().unwrap();
        p.send("t", 0, Bytes::from_static(b"first")).await.unwrap();
        p.commit().await.unwrap();
        assert_eq!((p.producer_id(), p.epoch()), (pid, 1));
        // A write of the old producer id, at its last epoch, is fenced.
        let conn = KafkaConnection::connect(&kafka, None, T).await.unwrap();
        let code = produce_code(&conn.call(&txn_produce("worn", (1, EPOCH_GRANT_MAX), 1, "zombie"), 12).await.unwrap());
        assert_eq!(code, ErrorCodeNum::INVALID_PRODUCER_EPOCH, "the old producer id is fenced");
        let mut consumer = KafkaConsumer::read_committed(&kafka, producer::ClientConfig::default());
        let read: Vec<String> = consumer
            .read_to_end("t", 0, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
            .collect();
        assert_eq!(read, ["last", "first"]);
    });
}
