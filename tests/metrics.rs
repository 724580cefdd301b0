//! The `/metrics` endpoints of real coordinator and broker processes: after a zombie producer
//! is fenced and a leader is killed, the counters moved by exactly the right amounts (writes
//! refused by reason, grants, epoch bumps, fences, elections), and both endpoints parse as
//! OpenMetrics text with Prometheus's own Python parser.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::Connection;
use producer::{ClientError, Producer, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{ErrorCode, ProduceRequest, Request, Response, ACKS_ALL};

use common::{metrics_addr, sample as value, scrape};

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn leader(coordinator: &str) -> (i64, i64) {
    let out = common::run("admin", &["--bootstrap", coordinator, "describe", "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &d["partitions"][0];
    (p["leader"].as_i64().unwrap(), p["leader_epoch"].as_i64().unwrap())
}

/// Parse `text` with prometheus_client's OpenMetrics parser (in the pinned clients' venv).
fn parses_as_openmetrics(text: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = Command::new(root.join("scripts/kafka-clients-venv")).current_dir(root).output().unwrap();
    assert!(venv.status.success(), "{}", String::from_utf8_lossy(&venv.stderr));
    let python = String::from_utf8_lossy(&venv.stdout).lines().last().unwrap().trim().to_string();
    let mut child = Command::new(python)
        .args([
            "-c",
            "import sys; from prometheus_client.openmetrics.parser import text_string_to_metric_families as p; \
             print(len(list(p(sys.stdin.read()))))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not OpenMetrics text: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let families: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(families >= 9, "{families} metric families");
}

#[tokio::test]
async fn metrics_count_the_fence_and_the_failover() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::coordinator_with(dir.path(), &["--metrics-listen", "127.0.0.1:0", "--broker-lease-ms", "1000"]);
    let c_metrics = metrics_addr(&mut c, 0);
    let mut brokers = Vec::new();
    let mut b_metrics = Vec::new();
    for id in 1..=3 {
        let mut b = common::broker_with(id, &c.addr, dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
        b_metrics.push(metrics_addr(&mut b, 0));
        brokers.push(b);
    }
    common::create_topic_replicated(&c.addr, "t", 1, Some(3));
    let before = scrape(&c_metrics);

    // The zombie: A writes, B inits the same transactional id, A's next write is refused.
    let mut a = Producer::init(&c.addr, ProducerConfig::transactional("z")).await.unwrap();
    a.send("t", 0, Bytes::from_static(b"A")).await.unwrap();
    let mut b = Producer::init(&c.addr, ProducerConfig::transactional("z")).await.unwrap();
    match a.send("t", 0, Bytes::from_static(b"A late")).await {
        Err(ClientError::Fenced { .. }) => {}
        other => panic!("the zombie was not fenced: {other:?}"),
    }
    let (old_leader, old_epoch) = leader(&c.addr);
    let at = |id: i64| usize::try_from(id - 1).unwrap();
    for (i, m) in b_metrics.iter().enumerate() {
        let refused = value(&scrape(m), "epochfence_broker_writes_refused_total{reason=\"producer_epoch\"}");
        assert_eq!(refused, if i == at(old_leader) { 1.0 } else { 0.0 }, "broker {}", i + 1);
    }
    let after = scrape(&c_metrics);
    let delta = |name: &str| value(&after, name) - value(&before, name);
    assert_eq!(delta("epochfence_coordinator_init_producer_id_grants_total"), 2.0);
    assert_eq!(delta("epochfence_coordinator_epoch_bumps_total"), 1.0);
    assert_eq!(delta("epochfence_coordinator_fences_written_total"), 1.0, "one fence marker, on t-0");
    assert_eq!(delta("epochfence_coordinator_elections_total"), 0.0);
    assert_eq!(value(&after, "epochfence_coordinator_live_brokers"), 3.0);

    // The failover: the leader is killed; one election moves t-0 to another replica.
    brokers[at(old_leader)].kill9();
    wait_for("a new leader", || leader(&c.addr).0 != old_leader && leader(&c.addr).0 > 0);
    let (new_leader, _) = leader(&c.addr);
    let failed_over = scrape(&c_metrics);
    assert_eq!(value(&failed_over, "epochfence_coordinator_elections_total"), 1.0);
    b.send("t", 0, Bytes::from_static(b"B")).await.unwrap();
    // A write carrying the old leader epoch is refused by the new leader (B's client may have
    // met that refusal too, before it learnt the new epoch: counted from here).
    let new = &b_metrics[at(new_leader)];
    let stale_sample = "epochfence_broker_writes_refused_total{reason=\"leader_epoch\"}";
    let refused_before = value(&scrape(new), stale_sample);
    let conn = Connection::connect(&brokers[at(new_leader)].addr).await.unwrap();
    let stamp = ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
    let records = build_batch(stamp, false, 0, &[Bytes::from_static(b"stale")]);
    let req = ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch: old_epoch as i32,
        acks: ACKS_ALL,
        records,
    };
    match conn.call(Request::Produce(req)).await.unwrap() {
        Response::Produce(r) => assert_eq!(r.status.code, ErrorCode::FencedLeaderEpoch, "{}", r.status),
        other => panic!("{other:?}"),
    }
    wait_for("the new leader's gauge", || value(&scrape(new), "epochfence_broker_partitions_led") == 1.0);
    let text = scrape(new);
    assert_eq!(value(&text, stale_sample) - refused_before, 1.0, "{text}");
    assert!(value(&text, "epochfence_broker_records_appended_total") >= 1.0, "B's record: {text}");

    // A write to the replica that follows is refused as not the leader's.
    let (_, new_epoch) = leader(&c.addr);
    let follower = (1..=3).find(|b| *b != old_leader && *b != new_leader).unwrap();
    let conn = Connection::connect(&brokers[at(follower)].addr).await.unwrap();
    let records = build_batch(stamp, false, 0, &[Bytes::from_static(b"to a follower")]);
    let req = ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch: new_epoch as i32,
        acks: ACKS_ALL,
        records,
    };
    match conn.call(Request::Produce(req)).await.unwrap() {
        Response::Produce(r) => assert_eq!(r.status.code, ErrorCode::NotLeaderOrFollower, "{}", r.status),
        other => panic!("{other:?}"),
    }
    let not_leader = "epochfence_broker_writes_refused_total{reason=\"not_leader\"}";
    assert_eq!(value(&scrape(&b_metrics[at(follower)]), not_leader), 1.0);

    parses_as_openmetrics(&text);
    parses_as_openmetrics(&scrape(&c_metrics));
}
