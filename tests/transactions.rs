//! Transactions over real TCP: zombies' open transactions aborted, timeouts that fence,
//! delayed EndTxn, read_committed isolation, and a coordinator killed in PrepareCommit.

mod common;

use std::time::Duration;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use net::Connection;
use producer::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig};
use protocol::{EndTxnRequest, ErrorCode, Request, Response};

fn v(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

async fn committed(addr: &str, topic: &str, partition: i32) -> Vec<String> {
    let mut c = Consumer::read_committed(addr, ClientConfig::default());
    c.read_to_end(topic, partition, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

async fn uncommitted(addr: &str, topic: &str, partition: i32) -> Vec<String> {
    let mut c = Consumer::new(addr, ClientConfig::default());
    c.read_to_end(topic, partition, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

async fn txn_state(c: &LocalCluster, tid: &str) -> (String, i16) {
    let d = c.admin().describe().await.unwrap();
    let t = d.transactional_ids.iter().find(|t| t.transactional_id == tid).unwrap();
    (t.state.clone(), t.producer_epoch)
}

/// Whether some transactional id at the coordinator on `addr` reaches `state` within about
/// 20 s (the coordinator may be down or restarting meanwhile: describe errors are retried).
async fn reaches_state(addr: &str, state: &str) -> bool {
    let mut admin = producer::Admin::new(addr, ClientConfig::default());
    for _ in 0..1_500 {
        if let Ok(d) = admin.describe().await {
            if d.transactional_ids.iter().any(|t| t.state == state) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    false
}

/// A send inside a transaction that times out may still land (the broker was only slow), so the
/// transaction holds an unknown subset of its records: commit must refuse, abort must work, and
/// the next transaction starts clean (Kafka's abortable error state).
#[tokio::test]
async fn a_transaction_with_a_failed_send_can_only_abort() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let mut config = ProducerConfig::transactional("abortable");
    config.delivery_timeout_ms = 800;
    config.client.request_timeout_ms = 300;
    let mut p = Producer::init(&c.coordinator_addr, config).await.unwrap();
    p.begin().unwrap();
    p.send("t", 0, v("first")).await.unwrap();
    // The broker stalls: the send gives up, although the batch waits in the broker's queue.
    c.switches[0].freeze();
    let late = p.send("t", 0, v("late")).await.unwrap_err();
    assert!(matches!(late, ClientError::Timeout { .. }), "{late}");
    c.switches[0].thaw();
    // Whatever reached the log, the transaction may not commit.
    let refused = p.commit().await.unwrap_err();
    assert!(matches!(refused, ClientError::Abortable(_)), "{refused}");
    assert!(refused.to_string().contains("abort it"), "{refused}");
    assert!(p.send("t", 0, v("more")).await.is_err(), "no more sends into a failed transaction");
    p.abort().await.unwrap();
    p.begin().unwrap();
    p.send("t", 0, v("clean")).await.unwrap();
    p.commit().await.unwrap();
    assert_eq!(committed(&c.coordinator_addr, "t", 0).await, ["clean"]);
}

/// A partition whose follower is frozen cannot commit a marker (its ISR waits for the follower),
/// but a commit that needs only other partitions on the same broker must not wait behind it:
/// markers to different partitions proceed independently.
#[tokio::test]
async fn a_stuck_marker_on_one_partition_does_not_hold_up_commits_on_another() {
    // A marker not answered is dialled again only after a minute: y's marker must not be queued
    // behind x's on one connection (the broker answers a connection's requests in order) at all.
    let opts =
        LocalOptions { brokers: 3, replica_lag_ms: 120_000, marker_timeout_ms: 60_000, ..LocalOptions::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.wait_for("three live brokers", Duration::from_secs(10), |d| d.brokers.iter().filter(|b| b.alive).count() == 3)
        .await
        .unwrap();
    c.create_topic_replicated("x", 3, 2).await.unwrap();
    c.create_topic_replicated("y", 1, 1).await.unwrap();
    let d = c.admin().describe().await.unwrap();
    let y = d.partitions.iter().find(|p| p.topic == "y").unwrap().leader_id;
    let x =
        d.partitions.iter().find(|p| p.topic == "x" && p.leader_id == y).expect("x has a partition led by y's leader");
    let follower = *x.replicas.iter().find(|r| **r != y).unwrap();
    let xp = x.partition;

    let mut a = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("slow")).await.unwrap();
    a.begin().unwrap();
    a.send("x", xp, v("a")).await.unwrap();
    let mut b = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("fast")).await.unwrap();
    b.begin().unwrap();
    b.send("y", 0, v("b")).await.unwrap();

    // x's follower freezes: x's commit marker cannot be committed while it stays in the ISR.
    c.switches[(follower - 1) as usize].freeze();
    let slow = tokio::spawn(async move { a.commit().await });
    assert!(reaches_state(&c.coordinator_addr, "PrepareCommit").await, "the slow commit is writing its markers");
    // y's commit on the same broker: its marker is not queued behind x's.
    let conn = Connection::connect(&c.coordinator_addr).await.unwrap();
    let req = Request::EndTxn(EndTxnRequest {
        transactional_id: "fast".into(),
        producer_id: b.producer_id(),
        producer_epoch: b.epoch(),
        commit: true,
        bump_epoch: true,
    });
    let Response::EndTxn(r) = conn.call(req).await.unwrap() else { panic!("wrong answer") };
    assert!(r.status.is_ok(), "the commit on y waited for x's marker: {}", r.status);
    assert!(!slow.is_finished(), "x's commit is still waiting for its frozen follower");
    assert_eq!(committed(&c.coordinator_addr, "y", 0).await, ["b"]);

    c.switches[(follower - 1) as usize].thaw();
    slow.await.unwrap().unwrap();
    assert_eq!(committed(&c.coordinator_addr, "x", xp).await, ["a"]);
}

#[tokio::test]
async fn zombies_open_transaction_is_aborted_when_its_successor_inits() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 2).await.unwrap();
    let mut a = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("eos")).await.unwrap();
    a.begin().unwrap();
    a.send("t", 0, v("A-0")).await.unwrap();
    a.send("t", 1, v("A-1")).await.unwrap();
    assert_eq!(txn_state(&c, "eos").await.0, "Ongoing");
    assert!(committed(&c.coordinator_addr, "t", 0).await.is_empty(), "an open transaction is not visible");

    // A pauses mid-transaction; B takes over.
    let mut b = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("eos")).await.unwrap();
    assert_eq!(txn_state(&c, "eos").await, ("CompleteAbort".to_string(), 1));
    for p in 0..2 {
        assert!(committed(&c.coordinator_addr, "t", p).await.is_empty(), "the zombie's transaction never shows");
    }
    assert_eq!(uncommitted(&c.coordinator_addr, "t", 0).await, ["A-0"]);

    // A wakes: its writes and its commit are refused.
    assert!(a.send("t", 0, v("A-late")).await.unwrap_err().is_fenced());
    match a.commit().await {
        Err(ClientError::Fenced { current_epoch, detail, .. }) => {
            assert_eq!(current_epoch, 1);
            assert!(detail.contains("another instance"), "{detail}");
        }
        other => panic!("the zombie's late commit must be refused, got {other:?}"),
    }
    b.begin().unwrap();
    b.send("t", 0, v("B-0")).await.unwrap();
    b.commit().await.unwrap();
    assert_eq!(committed(&c.coordinator_addr, "t", 0).await, ["B-0"]);
    assert_eq!(committed(&c.coordinator_addr, "t", 1).await, Vec::<String>::new());
    c.shutdown().await;
}

#[tokio::test]
async fn a_transaction_that_times_out_is_aborted_and_its_producer_fenced_naming_the_timeout() {
    let c = LocalCluster::start(LocalOptions { broker_lease_ms: 300, ..Default::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let mut config = ProducerConfig::transactional("slow");
    config.transaction_timeout_ms = 400;
    let mut a = Producer::init(&c.coordinator_addr, config).await.unwrap();
    a.begin().unwrap();
    a.send("t", 0, v("slow-0")).await.unwrap();
    // The coordinator aborts it once it outlives its timeout.
    c.wait_for("the timeout abort", Duration::from_secs(10), |d| {
        d.transactional_ids.iter().any(|t| t.transactional_id == "slow" && t.state == "CompleteAbort")
    })
    .await
    .unwrap();
    match a.send("t", 0, v("slow-1")).await {
        Err(ClientError::Fenced { detail, .. }) => {
            assert!(detail.contains("outlived its timeout of 400 ms"), "the error names the timeout: {detail}")
        }
        other => panic!("expected fenced, got {other:?}"),
    }
    match a.commit().await {
        Err(ClientError::Fenced { detail, .. }) => assert!(detail.contains("timeout"), "{detail}"),
        other => panic!("expected fenced, got {other:?}"),
    }
    assert!(committed(&c.coordinator_addr, "t", 0).await.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn a_delayed_end_txn_of_an_earlier_transaction_does_not_touch_a_later_one() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let mut a = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("jepsen")).await.unwrap();
    let (pid, e0) = (a.producer_id(), a.epoch());
    a.begin().unwrap();
    a.send("t", 0, v("txn1")).await.unwrap();
    a.commit().await.unwrap();
    assert_eq!(a.epoch(), e0 + 1, "every end bumps the epoch");
    a.begin().unwrap();
    a.send("t", 0, v("txn2")).await.unwrap();

    // The first transaction's EndTxn arrives again, late, on another connection, both ways.
    let conn = Connection::connect(&c.coordinator_addr).await.unwrap();
    for commit in [true, false] {
        let req = Request::EndTxn(EndTxnRequest {
            transactional_id: "jepsen".into(),
            producer_id: pid,
            producer_epoch: e0,
            commit,
            bump_epoch: true,
        });
        let Response::EndTxn(r) = conn.call(req).await.unwrap() else { panic!("wrong answer") };
        if !commit {
            assert_eq!(r.status.code, ErrorCode::ProducerFenced, "{}", r.status);
        }
        assert_eq!(
            txn_state(&c, "jepsen").await,
            ("Ongoing".to_string(), e0 + 1),
            "the later transaction is untouched"
        );
    }
    assert_eq!(committed(&c.coordinator_addr, "t", 0).await, ["txn1"]);
    a.abort().await.unwrap();
    assert_eq!(committed(&c.coordinator_addr, "t", 0).await, ["txn1"]);
    assert_eq!(uncommitted(&c.coordinator_addr, "t", 0).await, ["txn1", "txn2"]);
    c.shutdown().await;
}

#[tokio::test]
async fn mixed_committed_and_aborted_transactions_across_three_partitions() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 3).await.unwrap();
    let mut tx = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("mixed")).await.unwrap();
    let mut plain = Producer::init(&c.coordinator_addr, ProducerConfig::idempotent()).await.unwrap();
    let mut expected_committed = vec![Vec::new(); 3];
    let mut expected_all = vec![Vec::new(); 3];
    for t in 0..6 {
        let commit = t % 3 != 1;
        tx.begin().unwrap();
        for p in 0..3 {
            for i in 0..2 {
                let value = format!("txn{t}-p{p}-{i}");
                tx.send("t", p, v(&value)).await.unwrap();
                expected_all[p as usize].push(value.clone());
                if commit {
                    expected_committed[p as usize].push(value);
                }
            }
            // A non-transactional writer interleaves; its records are always visible.
            let value = format!("plain{t}-p{p}");
            plain.send("t", p, v(&value)).await.unwrap();
            expected_all[p as usize].push(value.clone());
            expected_committed[p as usize].push(value);
        }
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.abort().await.unwrap();
        }
    }
    for p in 0..3 {
        let got = committed(&c.coordinator_addr, "t", p).await;
        // read_committed returns records in log order: the plain record of a transaction's
        // round lands before the transaction's commit, so compare as sequences of log order.
        let mut want: Vec<String> = expected_committed[p as usize].clone();
        want.sort_by_key(|v| expected_all[p as usize].iter().position(|x| x == v));
        assert_eq!(got, want, "partition {p}: read_committed");
        assert_eq!(
            uncommitted(&c.coordinator_addr, "t", p).await,
            expected_all[p as usize],
            "partition {p}: read_uncommitted"
        );
    }
    c.shutdown().await;
}

#[tokio::test]
async fn coordinator_killed_in_prepare_commit_finishes_the_commit_after_restart() {
    use common::{broker, coordinator_with, create_topic, signal};
    let dir = tempfile::tempdir().unwrap();
    let mut coordinator = coordinator_with(dir.path(), &[]);
    let addr = coordinator.addr.clone();
    let b = broker(1, &addr, dir.path());
    create_topic(&addr, "t", 1);
    let mut p = Producer::init(&addr, ProducerConfig::transactional("prepared")).await.unwrap();
    p.begin().unwrap();
    for i in 0..3 {
        p.send("t", 0, v(&format!("r{i}"))).await.unwrap();
    }
    // The broker stops: the commit is prepared (durably) but its marker cannot be written.
    signal(&b, "STOP");
    let commit = tokio::spawn(async move { p.commit().await });
    assert!(reaches_state(&addr, "PrepareCommit").await, "the coordinator reached PrepareCommit");
    coordinator.kill9();
    commit.abort();
    signal(&b, "CONT");
    // Restart on the same address, from the same journal: it resumes writing the markers.
    let data = dir.path().join("coordinator");
    let _restarted = common::Proc::start(
        "coordinator",
        &["--listen", &addr, "--data-dir", data.to_str().unwrap()],
        &dir.path().join("coordinator-2.log"),
    );
    let logs = ["coordinator.log", "coordinator-2.log", "broker-1.log"].map(|f| dir.path().join(f));
    assert!(
        reaches_state(&addr, "CompleteCommit").await,
        "the prepared commit completed after the restart; logs:{}",
        common::log_tails(&logs.each_ref().map(|p| p.as_path()), 40)
    );
    assert_eq!(committed(&addr, "t", 0).await, ["r0", "r1", "r2"], "committed exactly once");
    drop(b);
}

#[tokio::test]
async fn producer_and_consumer_binaries_speak_transactions() {
    use common::{broker, coordinator, create_topic, run};
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let _b = broker(1, &c.addr, dir.path());
    create_topic(&c.addr, "t", 1);
    let out = run(
        "producer",
        &[
            "--bootstrap",
            &c.addr,
            "--topic",
            "t",
            "--transactional-id",
            "cli",
            "--transactional",
            "--txn-records",
            "2",
            "--abort-every",
            "2",
            "--count",
            "6",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("committed transaction=")).count(), 2, "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("aborted transaction=")).count(), 1, "{stdout}");
    let read = |isolation: &str| {
        let out =
            run("consumer", &["--bootstrap", &c.addr, "--topic", "t", "--partition", "0", "--isolation", isolation]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.rsplit("value=").next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(read("read_committed"), ["cli-0", "cli-1", "cli-4", "cli-5"]);
    assert_eq!(read("read_uncommitted").len(), 6);
    let text = String::from_utf8_lossy(&run("admin", &["--bootstrap", &c.addr, "describe"]).stdout).into_owned();
    assert!(text.contains("cli producer_id=") && text.contains("state=CompleteCommit"), "{text}");
}
