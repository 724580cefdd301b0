//! The real binaries as separate processes: kill -9 and restart, exit codes, output lines.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use bytes::Bytes;
use common::{broker, coordinator, coordinator_with, create_topic, run};
use net::Connection;
use producer::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig};
use protocol::{ErrorCode, InitProducerIdRequest, Request, Response};

async fn init(conn: &Connection, tid: Option<&str>) -> Option<(i64, i16)> {
    let req = Request::InitProducerId(InitProducerIdRequest {
        transactional_id: tid.map(str::to_string),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        principal: String::new(),
    });
    match conn.call(req).await {
        Ok(Response::InitProducerId(r)) if r.status.is_ok() => Some((r.producer_id, r.producer_epoch)),
        _ => None,
    }
}

#[tokio::test]
async fn coordinator_killed_and_restarted_never_reissues_an_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut max_epoch = -1i16;
    let mut max_pid = -1i64;
    for round in 0..5 {
        // Small snapshot interval: the kills land before, during and after journal rotations.
        let mut c = coordinator_with(dir.path(), &["--snapshot-every-entries", "200"]);
        let conn = Connection::connect(&c.addr).await.unwrap();
        // After the restart, the first grant is above everything acknowledged before it.
        let (_, e) = init(&conn, Some("orders")).await.unwrap();
        assert!(e > max_epoch, "round {round}: epoch {e} reissued (max acknowledged {max_epoch})");
        let (pid, _) = init(&conn, None).await.unwrap();
        assert!(pid > max_pid, "round {round}: producer id {pid} reissued (max acknowledged {max_pid})");
        max_epoch = e;
        max_pid = pid;
        // Inits in flight from many connections while the process is killed.
        let mut tasks = Vec::new();
        for i in 0..16 {
            let addr = c.addr.clone();
            tasks.push(tokio::spawn(async move {
                let conn = Connection::connect(&addr).await.ok()?;
                let mut acked = Vec::new();
                loop {
                    let tid = if i % 4 == 0 { None } else { Some("orders") };
                    match init(&conn, tid).await {
                        Some(grant) => acked.push((tid.is_some(), grant)),
                        None => return Some(acked),
                    }
                }
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(30 + 20 * round)).await;
        c.kill9();
        for t in tasks {
            for (transactional, (pid, epoch)) in t.await.unwrap().unwrap_or_default() {
                max_pid = max_pid.max(pid);
                if transactional {
                    max_epoch = max_epoch.max(epoch);
                }
            }
        }
    }
    assert!(max_epoch > 5, "the kill rounds acknowledged grants ({max_epoch})");
    let generations = std::fs::read_dir(dir.path().join("coordinator").join("journal"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("journal-"))
        .count();
    assert!(generations <= 2, "old journal generations are removed ({generations} left)");
}

/// A power loss can leave the journal's newest file ending in zeros (or a record header whose
/// length runs past the end): a torn tail, never answered. The coordinator cuts it and starts,
/// and the next grant is above every one answered before.
#[tokio::test]
async fn a_zero_filled_journal_tail_is_cut_and_epochs_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let conn = Connection::connect(&c.addr).await.unwrap();
    let mut last = -1;
    for _ in 0..3 {
        last = init(&conn, Some("orders")).await.unwrap().1;
    }
    c.kill9();
    let journal_dir = dir.path().join("coordinator").join("journal");
    let newest = std::fs::read_dir(&journal_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("journal-"))
        .max()
        .expect("a journal file");
    let mut f = std::fs::OpenOptions::new().append(true).open(&newest).unwrap();
    std::io::Write::write_all(&mut f, &[0u8; 4096]).unwrap();
    drop(f);
    let c = coordinator(dir.path());
    let conn = Connection::connect(&c.addr).await.unwrap();
    let (_, next) = init(&conn, Some("orders")).await.expect("the restarted coordinator grants");
    assert!(next > last, "epoch {next} after a restart, {last} answered before");
}

#[tokio::test]
async fn producer_binary_prints_acks_and_exits_3_when_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let _b = broker(1, &c.addr, dir.path());
    create_topic(&c.addr, "orders", 2);

    let mut a = Command::new(common::bin("producer"))
        .args([
            "--bootstrap",
            &c.addr,
            "--topic",
            "orders",
            "--transactional-id",
            "payments",
            "--count",
            "100000",
            "--interval-ms",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut a_out = BufReader::new(a.stdout.take().unwrap());
    let mut first = String::new();
    a_out.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("acked partition=0 offset=0 producer_id=") && first.contains(" epoch=0 value=payments-0"),
        "{first}"
    );

    // B takes over the transactional id.
    let b = run(
        "producer",
        &[
            "--bootstrap",
            &c.addr,
            "--topic",
            "orders",
            "--transactional-id",
            "payments",
            "--count",
            "2",
            "--value",
            "B",
        ],
    );
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let b_out = String::from_utf8_lossy(&b.stdout);
    assert_eq!(b_out.lines().count(), 2);
    assert!(b_out.lines().all(|l| l.contains(" epoch=1 ")), "{b_out}");

    // A is fenced on its next write and exits 3 with a line naming both epochs.
    let status = a.wait().unwrap();
    let mut a_err = String::new();
    std::io::Read::read_to_string(&mut a.stderr.take().unwrap(), &mut a_err).unwrap();
    assert_eq!(status.code(), Some(3), "stderr: {a_err}");
    let fenced_line = a_err.lines().find(|l| l.contains("fenced")).unwrap_or_else(|| panic!("no fenced line: {a_err}"));
    assert!(
        fenced_line.contains("transactional id 'payments' is at epoch 1, this producer holds epoch 0"),
        "{fenced_line}"
    );

    // The consumer sees no epoch-0 record after the first epoch-1 record, on either partition.
    for p in ["0", "1"] {
        let out = run("consumer", &["--bootstrap", &c.addr, "--topic", "orders", "--partition", p, "--json"]);
        assert!(out.status.success());
        let epochs: Vec<i64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["producer_epoch"].as_i64().unwrap())
            .collect();
        assert!(epochs.contains(&1), "partition {p}: B's record is there");
        let first_new = epochs.iter().position(|e| *e == 1).unwrap();
        assert!(epochs[first_new..].iter().all(|e| *e == 1), "partition {p}: a zombie write after B's: {epochs:?}");
    }

    // describe shows the transactional id at epoch 1, in text and JSON.
    let out = run("admin", &["--bootstrap", &c.addr, "describe", "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["transactional_ids"][0]["transactional_id"], "payments");
    assert_eq!(d["transactional_ids"][0]["producer_epoch"], 1);
    assert_eq!(d["partitions"].as_array().unwrap().len(), 2);
    let text = String::from_utf8_lossy(&run("admin", &["--bootstrap", &c.addr, "describe"]).stdout).into_owned();
    assert!(text.contains("orders-0 leader=1 leader_epoch=0") && text.contains("payments producer_id="), "{text}");
}

#[tokio::test]
async fn broker_killed_and_restarted_keeps_records_and_fences() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let mut b = broker(1, &c.addr, dir.path());
    create_topic(&c.addr, "t", 1);

    let mut a = Producer::init(&c.addr, ProducerConfig::transactional("orders")).await.unwrap();
    for i in 0..3 {
        a.send("t", 0, Bytes::from(format!("A-{i}"))).await.unwrap();
    }
    let mut newer = Producer::init(&c.addr, ProducerConfig::transactional("orders")).await.unwrap();
    b.kill9();
    let _b = broker(1, &c.addr, dir.path());

    // After the restart the fence is rebuilt from the log: A stays fenced, B writes.
    match a.send("t", 0, Bytes::from_static(b"A-zombie")).await {
        Err(ClientError::Fenced { own_epoch: 0, current_epoch: 1, .. }) => {}
        other => panic!("expected fenced, got {other:?}"),
    }
    newer.send("t", 0, Bytes::from_static(b"B-0")).await.unwrap();
    let mut consumer = Consumer::new(&c.addr, ClientConfig::default());
    let values: Vec<String> = consumer
        .read_to_end("t", 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    assert_eq!(values, vec!["A-0", "A-1", "A-2", "B-0"]);
}

#[tokio::test]
async fn init_waits_for_the_fence_while_a_leader_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator_with(dir.path(), &["--fence-wait-ms", "200"]);
    let mut b = broker(1, &c.addr, dir.path());
    create_topic(&c.addr, "t", 1);
    let mut a = Producer::init(&c.addr, ProducerConfig::transactional("orders")).await.unwrap();
    a.send("t", 0, Bytes::from_static(b"A-0")).await.unwrap();
    b.kill9();

    // The fence marker cannot reach t-0: the init is not granted, it is told to retry.
    let conn = Connection::connect(&c.addr).await.unwrap();
    let req = Request::InitProducerId(InitProducerIdRequest {
        transactional_id: Some("orders".into()),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        principal: String::new(),
    });
    let Response::InitProducerId(r) = conn.call(req.clone()).await.unwrap() else { panic!("wrong answer") };
    assert_eq!(r.status.code, ErrorCode::ConcurrentTransactions, "{}", r.status);
    let Response::InitProducerId(r) = conn.call(req).await.unwrap() else { panic!("wrong answer") };
    assert_eq!(r.status.code, ErrorCode::ConcurrentTransactions, "still fencing: {}", r.status);

    // The broker comes back; the marker lands; the next init is granted a higher epoch.
    let _b = broker(1, &c.addr, dir.path());
    let mut newer = Producer::init(&c.addr, ProducerConfig::transactional("orders")).await.unwrap();
    assert!(newer.epoch() >= 2, "epoch 1 was fenced for but never handed out; got {}", newer.epoch());
    match a.send("t", 0, Bytes::from_static(b"A-zombie")).await {
        Err(ClientError::Fenced { own_epoch: 0, .. }) => {}
        other => panic!("expected fenced, got {other:?}"),
    }
    newer.send("t", 0, Bytes::from_static(b"B-0")).await.unwrap();
}

/// A broker's Kafka listener serves only once the broker has registered with the coordinator,
/// as a Kafka broker enables request processing once registered: before, its Metadata would
/// list no broker and a CreateTopics would find none to place a replica on (a client started
/// beside a new broker, such as fencecheck, then failed).
#[tokio::test]
async fn the_kafka_listener_serves_once_the_broker_has_registered() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use producer::kafka::KafkaConnection;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    // The coordinator's address, with nothing listening there yet.
    let coordinator_addr = format!("127.0.0.1:{}", common::spare_port());
    let mut b = common::broker_with(1, &coordinator_addr, dir.path(), &["--kafka-listen", "127.0.0.1:0"]);
    let kafka = b.next_line().rsplit(' ').next().unwrap().to_string();
    // ApiVersions is answered at once (connect asks it); Metadata waits for the registration.
    let t = Duration::from_secs(30);
    let early = KafkaConnection::connect(&kafka, None, t).await.unwrap();
    let metadata = early.submit(&MetadataRequest::default().with_topics(None), 4).await.unwrap();
    let mut metadata = Box::pin(metadata);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut metadata).await.is_err(),
        "an unregistered broker answered Metadata"
    );
    let data = dir.path().join("coordinator");
    let args = ["--listen", &coordinator_addr, "--data-dir", data.to_str().unwrap()];
    let _c = common::Proc::start("coordinator", &args, &dir.path().join("coordinator.log"));
    let m = tokio::time::timeout(t, metadata).await.expect("Metadata answered once registered").unwrap();
    assert_eq!(m.brokers.iter().map(|b| b.node_id.0).collect::<Vec<_>>(), [1], "{m:?}");
    let req = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("t")))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    let r = early.call(&req, 4).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
}

/// A coordinator restarted from its journal knows no broker until each heartbeats again, yet
/// still knows the topics and their leaders. Meanwhile a broker's Kafka Metadata names the
/// broker answering it: librdkafka forgets every broker an answer leaves out, its bootstrap
/// ones too, and then has nothing left to ask (a consumer started then never found its group).
#[tokio::test]
async fn kafka_metadata_names_its_broker_while_a_restarted_coordinator_has_not_heard_from_it() {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use producer::kafka::KafkaConnection;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    // The broker heartbeats once a minute (the lease outlasts that), so the restarted
    // coordinator goes on without hearing from it for the whole test.
    let mut c = coordinator_with(dir.path(), &["--broker-lease-ms", "300000"]);
    let coordinator_addr = c.addr.clone();
    let mut b = common::broker_with(
        1,
        &coordinator_addr,
        dir.path(),
        &["--kafka-listen", "127.0.0.1:0", "--heartbeat-ms", "60000"],
    );
    let kafka = b.next_line().rsplit(' ').next().unwrap().to_string();
    common::create_topic(&coordinator_addr, "t", 1);
    c.kill9();
    let data = dir.path().join("coordinator");
    let args = ["--listen", coordinator_addr.as_str(), "--data-dir", data.to_str().unwrap()];
    let _c = common::Proc::start("coordinator", &args, &dir.path().join("coordinator.log"));
    let t = Duration::from_secs(30);
    let conn = KafkaConnection::connect(&kafka, None, t).await.unwrap();
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("t"))))
    ]));
    // Until the broker's relay reaches the restarted coordinator, it answers from itself alone
    // (the topic not available yet); then from the coordinator, which names t-0's leader.
    let deadline = Instant::now() + t;
    let m = loop {
        let m = conn.call(&req, 12).await.unwrap();
        if m.topics.first().is_some_and(|t| t.error_code == 0) {
            break m;
        }
        assert!(Instant::now() < deadline, "the restarted coordinator never answered the relayed Metadata: {m:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let p = &m.topics[0].partitions[0];
    assert_eq!(p.leader_id.0, 1, "the coordinator's answer: {m:?}");
    assert!(p.offline_replicas.is_empty(), "the answering broker is not offline: {m:?}");
    let listed: Vec<(i32, String)> =
        m.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
    assert_eq!(listed, [(1, kafka)], "the answering broker is listed: {m:?}");
}

/// The KIP-848 flags' contract: a `consumer --group-protocol consumer` takes its session timeout
/// from the coordinator, so `--session-timeout-ms` is refused with it (exit 2, naming the
/// coordinator's flag); a coordinator whose heartbeat interval is not below its session timeout
/// is refused likewise.
#[test]
fn kip848_flags_that_cannot_hold_exit_2_naming_what_to_do() {
    let out = Command::new(common::bin("consumer"))
        .args(["--kafka", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--group", "g"])
        .args(["--group-protocol", "consumer", "--session-timeout-ms", "5000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--group-consumer-session-timeout-ms"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::bin("coordinator"))
        .args(["--listen", "127.0.0.1:0", "--data-dir", dir.path().join("c").to_str().unwrap()])
        .args(["--group-consumer-session-timeout-ms", "1000", "--group-consumer-heartbeat-interval-ms", "1000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--group-consumer-heartbeat-interval-ms 1000 is not below"), "{err}");
    assert!(out.stdout.is_empty(), "it never listened: {}", String::from_utf8_lossy(&out.stdout));
}

/// A coordinator built without the `etcd` feature refuses `--etcd-endpoints`, naming the
/// feature, rather than run on its local journal as if it were one of several replicas.
#[cfg(not(feature = "etcd"))]
#[test]
fn etcd_endpoints_without_the_etcd_feature_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("c");
    let out = Command::new(common::bin("coordinator"))
        .args(["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()])
        .args(["--etcd-endpoints", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("feature") && err.contains("etcd") && err.contains("--features coordinator/etcd"), "{err}");
    assert!(out.stdout.is_empty(), "it never listened: {}", String::from_utf8_lossy(&out.stdout));
}

/// A `producer` process writing to `partition` of `topic` as transactional id `tid` until
/// stopped, and its first acknowledgement's producer id (its output, read on).
fn endless_producer(bootstrap: &str, topic: &str, tid: &str, partition: i32) -> (std::process::Child, i64) {
    let mut p = Command::new(common::bin("producer"))
        .args(["--bootstrap", bootstrap, "--topic", topic, "--transactional-id", tid])
        .args(["--partition", &partition.to_string(), "--interval-ms", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(p.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let pid = field(&first, "producer_id").unwrap_or_else(|| panic!("not an ack: {first}"));
    // Keep reading its acknowledgements so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (p, pid)
}

/// `key=N` of an output line.
fn field(line: &str, key: &str) -> Option<i64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).and_then(|v| v.parse().ok())
}

fn kill(child: &std::process::Child, sig: &str) {
    let status = Command::new("kill").args([format!("-{sig}"), child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

/// Wait (bounded) until the `/metrics` sample at `metrics` reaches `at_least`.
fn await_metric(metrics: &str, sample: &str, at_least: f64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while common::sample(&common::scrape(metrics), sample) < at_least {
        assert!(std::time::Instant::now() < deadline, "{sample} never reached {at_least}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The zombie wakes: it must exit fenced (3) on its next write, and nothing of its epoch lands
/// on `partition` after a record of another producer or epoch there.
fn zombie_exits_fenced_and_nothing_of_it_lands_after(
    mut zombie: std::process::Child,
    zombie_pid: i64,
    bootstrap: &str,
    partition: i32,
) -> String {
    kill(&zombie, "CONT");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = zombie.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = zombie.kill();
            panic!("the zombie was never fenced: it kept writing for 30 s after it woke");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut zombie.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(3), "the zombie was not fenced: {err}");
    let out =
        run("consumer", &["--bootstrap", bootstrap, "--topic", "t", "--partition", &partition.to_string(), "--json"]);
    assert!(out.status.success());
    let records: Vec<(i64, i64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["producer_id"].as_i64().unwrap(), v["producer_epoch"].as_i64().unwrap())
        })
        .collect();
    let zombie_epoch = records.iter().find(|r| r.0 == zombie_pid).expect("the zombie wrote before it froze").1;
    let last_zombie = records.iter().rposition(|r| *r == (zombie_pid, zombie_epoch)).unwrap();
    let first_other = records.iter().position(|r| *r != (zombie_pid, zombie_epoch));
    assert!(
        first_other.is_none_or(|f| f > last_zombie),
        "a write of the zombie's epoch landed after a newer one: {records:?}"
    );
    assert!(err.contains("fenced"), "{err}");
    err
}

/// Issue 27, item 4: transactional id z expires while its producer A is frozen; a new
/// instance B initialises z (a new producer id); A wakes and is refused. A wrote outside
/// transactions, so its partition admitted it on a kept verification: the coordinator fences
/// that epoch before forgetting the id.
#[tokio::test]
async fn a_producer_frozen_across_its_transactional_ids_expiry_is_refused_when_it_wakes() {
    frozen_across_the_transactional_ids_expiry(false).await;
}

/// The same, and the partition forgets the producer id too (its own expiry) before the zombie
/// wakes: nothing there refuses it any more, so its write is checked with the coordinator,
/// which no longer binds the producer id to any transactional id. The id is odd, so the
/// coordinator knows it was a transactional id's and refuses it (an idempotent producer's even
/// id would be accepted at any epoch).
#[tokio::test]
async fn a_producer_frozen_across_both_expiries_is_refused_when_it_wakes() {
    frozen_across_the_transactional_ids_expiry(true).await;
}

async fn frozen_across_the_transactional_ids_expiry(partition_forgets: bool) {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--transactional-id-expiration-ms",
        "1000",
        "--expiry-check-interval-ms",
        "100",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let mut c = coordinator_with(dir.path(), &flags);
    let metrics = common::metrics_addr(&mut c, 0);
    let broker_flags: &[&str] = if partition_forgets {
        &[
            "--producer-id-expiration-ms",
            "300",
            "--producer-id-expiration-check-interval-ms",
            "100",
            "--metrics-listen",
            "127.0.0.1:0",
        ]
    } else {
        &[]
    };
    let mut broker = common::broker_with(1, &c.addr, dir.path(), broker_flags);
    let broker_metrics = partition_forgets.then(|| common::metrics_addr(&mut broker, 0));
    create_topic(&c.addr, "t", 1);
    let (a, a_pid) = endless_producer(&c.addr, "t", "z", 0);
    let held = "epochfence_coordinator_state_held{kind=\"transactional_ids\"}";
    assert_eq!(common::sample(&common::scrape(&metrics), held), 1.0, "z is held");
    kill(&a, "STOP");
    await_metric(&metrics, "epochfence_coordinator_transactional_ids_expired_total", 1.0);
    let out = run("admin", &["--bootstrap", &c.addr, "describe", "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["transactional_ids"].as_array().unwrap().len(), 0, "z is forgotten: {d}");
    assert_eq!(d["held"][0]["kind"], "transactional_ids");
    assert_eq!(d["held"][0]["count"], 0);
    // The metrics show the count beside its cap too (z was held before: the gauge moved).
    let text = common::scrape(&metrics);
    assert_eq!(common::sample(&text, held), 0.0, "{text}");
    assert_eq!(common::sample(&text, "epochfence_coordinator_state_held_max{kind=\"transactional_ids\"}"), 100_000.0);
    let b = run("producer", &["--bootstrap", &c.addr, "--topic", "t", "--transactional-id", "z", "--count", "2"]);
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let b_pid = field(String::from_utf8_lossy(&b.stdout).lines().next().unwrap(), "producer_id").unwrap();
    assert!(b_pid > a_pid, "a new producer id for the new instance: {b_pid} after {a_pid}");
    if let Some(m) = &broker_metrics {
        // The partition forgets A's producer id (once before the fence marker, once after it)
        // and B's.
        await_metric(m, "epochfence_broker_producer_ids_expired_total", 3.0);
    }
    let err = zombie_exits_fenced_and_nothing_of_it_lands_after(a, a_pid, &c.addr, 0);
    if partition_forgets {
        assert!(err.contains("belonged to a transactional id that expired"), "refused by the coordinator: {err}");
    }
}

/// Issue 27, item 4: a new instance B fences A's epoch on partition 0 (its marker), then
/// writes only to partition 1; partition 0 forgets the producer id after
/// `--producer-id-expiration-ms`; A, frozen all along, wakes: with nothing here to refuse it,
/// its write is checked with the coordinator, which refuses the old epoch.
#[tokio::test]
async fn a_producer_frozen_across_its_producer_ids_expiry_on_a_partition_is_refused_when_it_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let flags = [
        "--producer-id-expiration-ms",
        "500",
        "--producer-id-expiration-check-interval-ms",
        "100",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let mut b = common::broker_with(1, &c.addr, dir.path(), &flags);
    let metrics = common::metrics_addr(&mut b, 0);
    create_topic(&c.addr, "t", 2);
    let (a, a_pid) = endless_producer(&c.addr, "t", "z", 0);
    kill(&a, "STOP");
    let out = run(
        "producer",
        &["--bootstrap", &c.addr, "--topic", "t", "--transactional-id", "z", "--count", "2", "--partition", "1"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The same producer id at the next epoch: the fence marker is on partition 0.
    let first = String::from_utf8_lossy(&out.stdout).lines().next().unwrap().to_string();
    assert_eq!((field(&first, "producer_id"), field(&first, "epoch")), (Some(a_pid), Some(1)), "{first}");
    // Both partitions forget the producer id (0 after its marker, 1 after B's writes).
    await_metric(&metrics, "epochfence_broker_producer_ids_expired_total", 2.0);
    zombie_exits_fenced_and_nothing_of_it_lands_after(a, a_pid, &c.addr, 0);
}

/// The other side of the same rule: a producer writing outside transactions for several
/// expirations is not taken for idle. Its partition asks the coordinator again every two
/// producer-id sweeps (here within 200 ms), and the coordinator counts each answer as activity,
/// so an id expiring after 2 s of silence is never fenced while its producer writes (before,
/// nothing reached the coordinator after the first write, and the id was fenced under it).
#[tokio::test]
async fn a_producer_writing_outside_transactions_keeps_its_transactional_id_alive() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator_with(
        dir.path(),
        &["--transactional-id-expiration-ms", "2000", "--expiry-check-interval-ms", "100"],
    );
    let flags = ["--producer-id-expiration-check-interval-ms", "100", "--fsync", "never"];
    let _b = common::broker_with(1, &c.addr, dir.path(), &flags);
    create_topic(&c.addr, "t", 1);
    let out = run(
        "producer",
        &["--bootstrap", &c.addr, "--topic", "t", "--transactional-id", "busy", "--count", "200", "--interval-ms", "5"],
    );
    assert!(out.status.success(), "the busy producer was fenced: {}", String::from_utf8_lossy(&out.stderr));
    let acked = String::from_utf8_lossy(&out.stdout);
    assert_eq!(acked.lines().count(), 200);
    assert!(acked.lines().all(|l| l.contains(" epoch=0 ")), "one epoch throughout");
}

/// Issue 32, item 2: `admin delete-records` against three broker processes. A transactional
/// producer commits one transaction and aborts the next; the log start moves into the committed
/// one: the line names it, and every replica has it on disk. Past the high watermark, on a topic
/// that does not exist and below -1: refused, with exit 1 (2 for the usage error). After every
/// broker is killed with -9 and restarted, a read below the start is out of range and a read from
/// it gets the rest (read_committed without the aborted records); the producer carries on.
#[tokio::test]
async fn admin_delete_records_moves_the_log_start_on_every_replica_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let mut brokers: Vec<_> = (1..=3).map(|id| broker(id, &c.addr, dir.path())).collect();
    common::create_topic_replicated(&c.addr, "t", 1, Some(3));
    let mut p = Producer::init(&c.addr, ProducerConfig::transactional("deleting")).await.unwrap();
    p.begin().unwrap();
    for i in 0..6 {
        p.send("t", 0, Bytes::from(format!("c{i}"))).await.unwrap(); // offsets 0-5, the marker at 6
    }
    p.commit().await.unwrap();
    p.begin().unwrap();
    for i in 0..3 {
        p.send("t", 0, Bytes::from(format!("a{i}"))).await.unwrap(); // offsets 7-9, the marker at 10
    }
    p.abort().await.unwrap();

    let delete = |args: &[&str]| {
        let mut all = vec!["--bootstrap", c.addr.as_str(), "delete-records"];
        all.extend_from_slice(args);
        run("admin", &all)
    };
    let out = delete(&["t", "--partition", "0", "--before", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "t-0: log start offset 4\n");
    for id in 1..=3 {
        let file = common::log_path(dir.path(), id, "t", 0).join(broker::log::LOG_START_FILE);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert_eq!(text.lines().nth(1), Some("4"), "broker {id}: {text:?}");
    }
    for (args, code, says) in [
        (&["t", "--before", "999"][..], 1, "OFFSET_OUT_OF_RANGE"),
        (&["nope", "--before", "1"][..], 1, "UNKNOWN_TOPIC_OR_PARTITION"),
        (&["t", "--partition", "1", "--before", "1"][..], 1, "has 1 partitions"),
        (&["t", "--before", "-2"][..], 2, "-2"),
    ] {
        let out = delete(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    for b in &mut brokers {
        b.kill9();
    }
    let _brokers: Vec<_> = (1..=3).map(|id| broker(id, &c.addr, dir.path())).collect();
    let mut consumer = Consumer::new(&c.addr, ClientConfig::default());
    let below = consumer.read_to_end("t", 0, 0).await.unwrap_err().to_string();
    assert!(below.contains("OFFSET_OUT_OF_RANGE") && below.contains("[4,"), "{below}");
    let mut committed = Consumer::read_committed(&c.addr, ClientConfig::default());
    let values = |records: Vec<protocol::batch::ConsumedRecord>| -> Vec<String> {
        records.iter().map(|r| String::from_utf8_lossy(&r.value).into_owned()).collect()
    };
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"after")).await.unwrap();
    p.commit().await.unwrap();
    // The restarted leader's high watermark moves once its followers answer: read until it has.
    let mut read = Vec::new();
    for _ in 0..200 {
        read = values(committed.read_to_end("t", 0, 4).await.unwrap());
        if read.last().map(String::as_str) == Some("after") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(read, ["c4", "c5", "after"]);
}

/// Issue 32, item 1: `admin create-topic --config` and `admin alter-config` against processes.
/// The configs are set (a Kafka config epochfence does not apply is refused, naming it, exit
/// 1; a bad `K=V`, exit 2), changed (the line names each change), survive a kill -9 of the
/// coordinator (journaled), and are applied by the broker: a batch above the topic's
/// max.message.bytes is MESSAGE_TOO_LARGE.
#[tokio::test]
async fn admin_topic_configs_are_set_changed_and_survive_a_coordinator_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::spare_port();
    let listen = format!("127.0.0.1:{port}");
    let data = dir.path().join("coordinator");
    let coordinator_args = ["--listen", listen.as_str(), "--data-dir", data.to_str().unwrap()];
    let mut c = common::Proc::start("coordinator", &coordinator_args, &dir.path().join("coordinator.log"));
    let mut b = common::broker_with(1, &c.addr, dir.path(), &["--kafka-listen", "127.0.0.1:0"]);
    let kafka = b.next_line().rsplit(' ').next().unwrap().to_string();
    let admin = |args: &[&str]| {
        let mut all = vec!["--bootstrap", listen.as_str()];
        all.extend_from_slice(args);
        run("admin", &all)
    };
    assert_eq!(admin(&["create-topic", "t", "--config", "no-equals"]).status.code(), Some(2));
    let mut created = None;
    for _ in 0..200 {
        let out = admin(&["create-topic", "t", "--config", "max.message.bytes=300", "--config", "segment.bytes=4096"]);
        if out.status.success() {
            created = Some(out);
            break;
        }
        assert!(String::from_utf8_lossy(&out.stderr).contains("BROKER_NOT_AVAILABLE"));
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(String::from_utf8_lossy(&created.unwrap().stdout), "created topic 't' with 1 partitions\n");
    let refused = admin(&["create-topic", "u", "--config", "flush.ms=5"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("INVALID_CONFIG") && err.contains("'flush.ms'"), "{err}");
    let out = admin(&["alter-config", "--topic", "t", "--set", "retention.ms=60000", "--delete", "segment.bytes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "altered topic 't': retention.ms=60000, segment.bytes deleted\n");
    let bad = admin(&["alter-config", "--topic", "t", "--set", "cleanup.policy=compact"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("only delete"));
    assert_eq!(admin(&["alter-config", "--topic", "nope", "--set", "retention.ms=1"]).status.code(), Some(1));
    assert_eq!(admin(&["alter-config", "--topic", "t"]).status.code(), Some(2), "nothing to change");

    c.kill9();
    let _c = common::Proc::start("coordinator", &coordinator_args, &dir.path().join("coordinator.log"));
    let describe = kafka_protocol::messages::DescribeConfigsRequest::default().with_resources(vec![
        kafka_protocol::messages::describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(kafka_protocol::protocol::StrBytes::from_static_str("t"))
            .with_configuration_keys(None),
    ]);
    let conn =
        producer::kafka::KafkaConnection::connect(&kafka, None, std::time::Duration::from_secs(10)).await.unwrap();
    let mut configs = Vec::new();
    for _ in 0..200 {
        let r = conn.call(&describe, 4).await.unwrap();
        if r.results[0].error_code == 0 {
            configs = r.results[0]
                .configs
                .iter()
                .filter(|c| c.config_source == 1)
                .map(|c| format!("{}={}", c.name.as_str(), c.value.as_deref().unwrap_or_default()))
                .collect();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(configs, ["min.insync.replicas=1", "retention.ms=60000", "max.message.bytes=300"]);
    let mut p = Producer::init(&listen, ProducerConfig::idempotent()).await.unwrap();
    match p.send("t", 0, Bytes::from(vec![b'x'; 400])).await {
        Err(e) => {
            assert!(e.to_string().contains("MESSAGE_TOO_LARGE") && e.to_string().contains("max.message.bytes"), "{e}")
        }
        Ok(m) => panic!("a batch above max.message.bytes landed: {m:?}"),
    }
    p.send("t", 0, Bytes::from_static(b"small")).await.unwrap();
}

/// Issue 32, item 4: `admin reassign` moves a partition's two replicas to the two other brokers
/// (so its leadership moves too) while a transactional producer commits and aborts and a
/// read_committed consumer reads. The move's lines and exit codes; the removed replicas' files
/// are dropped; nothing acknowledged is lost (every committed record read once, in order, no
/// aborted one) and fencing holds across it: a new instance initialised after the move fences
/// the old one, whose next transaction is refused and lands nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reassign_moves_a_partition_online_under_a_transactional_producer() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let _brokers: Vec<_> = (1..=4).map(|id| broker(id, &c.addr, dir.path())).collect();
    common::create_topic_replicated(&c.addr, "t", 1, Some(2));
    let mut admin = producer::Admin::new(&c.addr, ClientConfig::default());
    let replicas_now = |d: &protocol::DescribeResponse| {
        let p = d.partitions.iter().find(|p| p.topic == "t").unwrap();
        (p.replicas.clone(), p.leader_id)
    };
    let (original, _) = replicas_now(&admin.describe().await.unwrap());
    let target: Vec<i32> = (1..=4).filter(|b| !original.contains(b)).collect();
    let admin_cmd = |args: Vec<String>| {
        let mut all = vec!["--bootstrap".to_string(), c.addr.clone()];
        all.extend(args);
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            run("admin", &args)
        })
    };
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();

    // Refusals: a broker that does not exist, nothing to cancel (exit 1); no replicas (exit 2).
    for (a, code, says) in [
        ("reassign t --replicas 1,9", 1, "INVALID_REPLICA_ASSIGNMENT"),
        ("reassign t --cancel", 1, "NO_REASSIGNMENT_IN_PROGRESS"),
        ("reassign t", 2, "--replicas"),
    ] {
        let out = admin_cmd(args(a)).await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{a}: {err}");
        assert!(err.contains(says), "{a}: {err}");
    }

    // Some data first, so the new replicas have something to catch up on.
    let mut p = Producer::init(&c.addr, ProducerConfig::transactional("mover")).await.unwrap();
    p.begin().unwrap();
    for i in 0..2_000 {
        p.send("t", 0, Bytes::from(format!("pre{i:05}-{}", "x".repeat(200)))).await.unwrap();
    }
    p.commit().await.unwrap();
    let mut committed: Vec<String> = (0..2_000).map(|i| format!("pre{i:05}-{}", "x".repeat(200))).collect();

    // The producer runs through the move: every third transaction aborted.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                p.begin().unwrap();
                let values: Vec<String> = (0..5).map(|i| format!("txn{n:04}-{i}")).collect();
                for v in &values {
                    p.send("t", 0, Bytes::from(v.clone())).await.unwrap();
                }
                if n % 3 == 2 {
                    p.abort().await.unwrap();
                } else {
                    p.commit().await.unwrap();
                    acked.extend(values);
                }
                n += 1;
            }
            (p, acked)
        })
    };
    // A read_committed consumer reads throughout (on a thread of its own: its futures are
    // not Send).
    let reader = {
        let (addr, stop) = (c.addr.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let mut consumer = Consumer::read_committed(&addr, ClientConfig::default());
                let (mut read, mut next) = (Vec::new(), 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Retriable failures (the leadership moving) are read again.
                    if let Ok(records) = consumer.read_to_end("t", 0, next).await {
                        if let Some(last) = records.last() {
                            next = last.offset + 1;
                        }
                        read.extend(records.into_iter().map(|r| String::from_utf8_lossy(&r.value).into_owned()));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                read
            })
        })
    };

    let replicas = target.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    let out = admin_cmd(args(&format!("reassign t --partition 0 --replicas {replicas}"))).await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    assert!(
        lines[0] == format!("t-0: moving to replicas {target:?} (adding {target:?}, removing {original:?})")
            || lines[0] == format!("t-0: moved to replicas {target:?}"),
        "{said}"
    );
    assert!(lines[1].starts_with(&format!("t-0: replicas {target:?}, leader {}", target[0])), "{said}");
    let (replicas_after, leader) = replicas_now(&admin.describe().await.unwrap());
    assert_eq!((replicas_after, leader), (target.clone(), target[0]));
    assert!(admin.reassignments(None).await.unwrap().is_empty());
    // The removed replicas' brokers drop them (at their next heartbeat).
    for b in &original {
        let path = common::log_path(dir.path(), *b, "t", 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while path.exists() {
            assert!(std::time::Instant::now() < deadline, "broker {b} kept its removed replica");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    for b in &target {
        assert!(common::log_path(dir.path(), *b, "t", 0).exists(), "broker {b}");
    }

    // Some transactions after the move, then a new instance fences the old one.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut zombie, acked) = writer.await.unwrap();
    let read_during = reader.join().unwrap();
    assert!(acked.len() >= 10, "the producer committed through the move: {}", acked.len());
    committed.extend(acked);
    let mut newer = Producer::init(&c.addr, ProducerConfig::transactional("mover")).await.unwrap();
    zombie.begin().unwrap();
    let refused = match zombie.send("t", 0, Bytes::from_static(b"zombie")).await {
        Err(e) => e,
        Ok(_) => zombie.commit().await.unwrap_err(),
    };
    assert!(matches!(refused, ClientError::Fenced { .. }), "{refused}");
    newer.begin().unwrap();
    newer.send("t", 0, Bytes::from_static(b"newer")).await.unwrap();
    newer.commit().await.unwrap();
    committed.push("newer".to_string());

    // Everything committed, once, in order; nothing aborted, nothing of the zombie.
    let mut consumer = Consumer::read_committed(&c.addr, ClientConfig::default());
    let all: Vec<String> = consumer
        .read_to_end("t", 0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    assert_eq!(all.len(), committed.len(), "records lost or duplicated across the move");
    assert!(all == committed, "the committed records, in order");
    assert!(committed.starts_with(&read_during), "what was read during the move is a prefix of the committed");
}
