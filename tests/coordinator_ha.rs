//! Coordinator replicas on a real etcd, as separate processes: a frozen active replica is
//! replaced and cannot decide anything when it wakes; a commit interrupted by a kill -9 of the
//! active replica finishes on the next; etcd losing its leader pauses grants, losing its quorum
//! stops them with a clear error, and nothing granted is lost or reissued; Kafka clients (the
//! Rust one, confluent-kafka and kafka-python) are served and fenced through takeovers.
//!
//! Needs etcd and etcdctl (`scripts/etcd` installs Debian's): `cargo test --features etcd --test
//! coordinator_ha`. `.ci/run` runs it.
#![cfg(feature = "etcd")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{broker, create_topic_replicated, log_tails, signal, spare_port, Lines, Proc};
use producer::{Admin, ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::{ErrorCode, InitProducerIdRequest, Request, Response, WriteMarkerRequest};

const WAIT: Duration = Duration::from_secs(30);

/// A loopback etcd cluster of `n` members, killed when dropped.
struct Etcd {
    dir: PathBuf,
    members: Vec<Option<Child>>,
    client: Vec<String>,
    peer: Vec<String>,
    /// The cluster id its members answer with (the first answer's).
    cluster_id: Option<serde_json::Value>,
}

impl Etcd {
    fn start(dir: &Path, n: usize) -> Etcd {
        assert!(
            Command::new("etcd").arg("--version").output().is_ok_and(|o| o.status.success()),
            "etcd is not installed: run scripts/etcd (it installs Debian's etcd-server, etcd-client and protobuf-compiler)"
        );
        // Not bind(0) (see `spare_port`): a member that cannot bind exits while its URL reaches
        // whoever took the port.
        let client = (0..n).map(|_| format!("http://127.0.0.1:{}", spare_port())).collect();
        let peer = (0..n).map(|_| format!("http://127.0.0.1:{}", spare_port())).collect();
        let mut etcd =
            Etcd { dir: dir.to_path_buf(), members: (0..n).map(|_| None).collect(), client, peer, cluster_id: None };
        for i in 0..n {
            etcd.start_member(i);
        }
        etcd.wait_healthy(&(0..n).collect::<Vec<_>>());
        etcd
    }

    /// Member `i`'s status, if it answers; panics if what answers on its URL is not a member of
    /// this cluster, or if its process has exited (its log says why).
    fn status(&mut self, i: usize) -> Option<serde_json::Value> {
        if let Some(child) = self.members[i].as_mut() {
            if let Ok(Some(exit)) = child.try_wait() {
                panic!(
                    "etcd member {i} exited ({exit}):\n{}",
                    log_tails(&[&self.dir.join(format!("etcd-{i}.log"))], 20)
                );
            }
        }
        let json = self.etcdctl(i, &["endpoint", "status", "-w", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let status = v[0]["Status"].clone();
        let id = status["header"]["cluster_id"].clone();
        let ours = self.cluster_id.get_or_insert_with(|| id.clone());
        assert_eq!(*ours, id, "what answers on member {i}'s URL {} is not of this etcd cluster", self.client[i]);
        Some(status)
    }

    /// Start (or restart, on its data) member `i`.
    fn start_member(&mut self, i: usize) {
        let cluster: Vec<String> = self.peer.iter().enumerate().map(|(j, p)| format!("m{j}={p}")).collect();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("etcd-{i}.log"))).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}"), "--data-dir", self.dir.join(format!("etcd-{i}")).to_str().unwrap()])
            .args(["--listen-client-urls", &self.client[i], "--advertise-client-urls", &self.client[i]])
            .args(["--listen-peer-urls", &self.peer[i], "--initial-advertise-peer-urls", &self.peer[i]])
            .args(["--initial-cluster", &cluster.join(","), "--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100", "--listen-metrics-urls", ""])
            .args(["--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start etcd");
        self.members[i] = Some(child);
    }

    /// Kill member `i`, which must be running.
    fn kill(&mut self, i: usize) {
        assert!(self.members[i].is_some(), "etcd member {i} is not running");
        // Panics if its process has exited, or if its URL reaches another cluster.
        let _ = self.status(i);
        self.stop(i);
    }

    fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn endpoints(&self) -> String {
        self.client.join(",")
    }

    fn etcdctl(&self, i: usize, args: &[&str]) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([&format!("--endpoints={}", self.client[i]), "--command-timeout=1s"])
            .args(args)
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn wait_healthy(&mut self, members: &[usize]) {
        let deadline = Instant::now() + WAIT;
        for &i in members {
            while self.etcdctl(i, &["endpoint", "health"]).is_none() || self.status(i).is_none() {
                assert!(Instant::now() < deadline, "etcd member {i} is not healthy");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The member that leads etcd's raft now.
    fn leader(&mut self) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            for i in 0..self.members.len() {
                if self.members[i].is_none() {
                    continue;
                }
                let Some(status) = self.status(i) else { continue };
                if status["header"]["member_id"] == status["leader"] {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "etcd has no leader");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}

/// A coordinator replica on `etcd`, its output watched.
fn replica(dir: &Path, name: &str, etcd: &Etcd, extra: &[&str]) -> (Proc, Lines) {
    let data = dir.join(name);
    let endpoints = etcd.endpoints();
    let mut args =
        vec!["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--etcd-endpoints", &endpoints];
    args.extend_from_slice(&["--etcd-lease-ms", "1000"]);
    args.extend_from_slice(extra);
    let mut p = Proc::start("coordinator", &args, &dir.join(format!("{name}.log")));
    let lines = p.watch();
    (p, lines)
}

fn producer_config(tid: &str, delivery_timeout_ms: u64) -> ProducerConfig {
    ProducerConfig { delivery_timeout_ms, ..ProducerConfig::transactional(tid) }
}

/// One request to `addr` on a fresh connection.
async fn call(addr: &str, req: Request) -> Result<Response, net::NetError> {
    let conn = net::Dialer::plain().dial(addr).await?;
    conn.call_timeout(req, Duration::from_secs(10)).await
}

fn init_request(tid: &str) -> Request {
    Request::InitProducerId(InitProducerIdRequest {
        transactional_id: Some(tid.into()),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        principal: String::new(),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_active_replica_is_replaced_and_decides_nothing_when_it_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::start(d, 1);
    let (a, a_lines) = replica(d, "a", &etcd, &[]);
    a_lines.wait_for("coordinator active", 1, WAIT).expect("the first replica takes over");
    let (b, b_lines) = replica(d, "b", &etcd, &[]);
    b_lines.wait_for("coordinator standby", 1, WAIT).expect("the second replica stands by");
    let both = format!("{},{}", a.addr, b.addr);
    let _brokers: Vec<Proc> = (1..=3).map(|id| broker(id, &both, d)).collect();
    create_topic_replicated(&both, "t", 3, Some(3));

    let mut old = Producer::init(&both, producer_config("z", 30_000)).await.unwrap();
    old.begin().unwrap();
    for p in 0..3 {
        old.send("t", p, "before".into()).await.unwrap();
    }
    old.commit().await.unwrap();
    let mut admin = Admin::new(&both, ClientConfig::default());
    let leaders_before: Vec<(i32, i32)> =
        admin.describe().await.unwrap().partitions.iter().map(|p| (p.leader_id, p.leader_epoch)).collect();

    // Freeze the active replica past its lease. An init sent to it now waits in its socket.
    signal(&a, "STOP");
    let frozen = Instant::now();
    let a_addr = a.addr.clone();
    let stale_init = tokio::spawn(async move { call(&a_addr, init_request("z")).await });
    let epoch_line = b_lines.wait_for("coordinator active", 1, WAIT).expect("the standby takes over");
    eprintln!("the standby took over {:?} after the freeze", frozen.elapsed());
    assert!(epoch_line.ends_with("(coordinator epoch 2)"), "{epoch_line}");

    // A new instance fences the old one through the new active replica.
    let mut new = Producer::init(&both, producer_config("z", 30_000)).await.unwrap();
    assert!(new.epoch() > old.epoch(), "epochs go up: {} then {}", old.epoch(), new.epoch());
    old.begin().unwrap();
    let zombie = old.send("t", 0, "zombie".into()).await;
    assert!(zombie.is_err(), "the old instance is fenced: {zombie:?}");
    new.begin().unwrap();
    new.send("t", 1, "after".into()).await.unwrap();
    new.commit().await.unwrap();

    // Wake the frozen replica: it steps down, and nothing it decides takes effect.
    signal(&a, "CONT");
    a_lines.wait_for("coordinator standby", 2, WAIT).expect("the woken replica steps down to standby");
    let answered = stale_init.await.unwrap();
    assert!(
        !matches!(&answered, Ok(Response::InitProducerId(r)) if r.status.is_ok()),
        "the woken replica granted an epoch: {answered:?}"
    );
    match call(&a.addr, init_request("z")).await {
        Err(net::NetError::Refused { status, .. }) => {
            assert_eq!(status.code, ErrorCode::NotCoordinator, "{status}");
            assert!(status.message.contains(&b.addr), "a standby names the active replica: {status}");
        }
        other => panic!("the deposed replica answered an init: {other:?}"),
    }
    // Its leader moves (every broker's lease looked expired to it when it woke) did not land.
    let leaders_after: Vec<(i32, i32)> =
        admin.describe().await.unwrap().partitions.iter().map(|p| (p.leader_id, p.leader_epoch)).collect();
    assert_eq!(leaders_after, leaders_before, "{}", log_tails(&[&d.join("a.log")], 30));
    // A marker carrying the deposed replica's coordinator epoch is refused by the brokers.
    let marker = Request::WriteMarker(WriteMarkerRequest {
        topic: "t".into(),
        partition: 0,
        producer_id: new.producer_id(),
        producer_epoch: new.epoch() + 5,
        marker_sequence: -1,
        commit: false,
        leader_epoch: leaders_after[0].1,
        coordinator_epoch: 1,
    });
    let leader_addr = {
        let d = admin.describe().await.unwrap();
        d.brokers.iter().find(|br| br.id == leaders_after[0].0).unwrap().addr.clone()
    };
    match call(&leader_addr, marker).await.unwrap() {
        Response::WriteMarker(r) => assert_eq!(r.status.code, ErrorCode::TransactionCoordinatorFenced, "{}", r.status),
        other => panic!("unexpected answer: {other:?}"),
    }
    // What the woken replica tried is not in etcd either: the active replica dies, the woken
    // one takes over from what etcd holds, and finds the leaders and epochs as they were.
    drop(b);
    let line = a_lines.wait_for("coordinator active", 2, WAIT).expect("the woken replica takes over again");
    assert!(line.ends_with("(coordinator epoch 3)"), "{line}");
    let mut admin = Admin::new(&both, ClientConfig::default());
    let leaders_now: Vec<(i32, i32)> =
        admin.describe().await.unwrap().partitions.iter().map(|p| (p.leader_id, p.leader_epoch)).collect();
    assert_eq!(leaders_now, leaders_before, "{}", log_tails(&[&d.join("a.log")], 30));
    // Epochs only go up: one more init, through whichever replica.
    let last = Producer::init(&both, producer_config("z", 30_000)).await.unwrap();
    assert!(last.epoch() > new.epoch());
    // Every committed record is there, the zombie's is not.
    let mut consumer = Consumer::read_committed(&both, ClientConfig::default());
    let mut values = Vec::new();
    for p in 0..3 {
        values.extend(consumer.read_to_end("t", p, 0).await.unwrap().into_iter().map(|r| r.value));
    }
    values.sort();
    assert_eq!(values, ["after", "before", "before", "before"].map(|v| bytes::Bytes::from_static(v.as_bytes())));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_interrupted_by_a_kill_9_of_the_active_replica_finishes_on_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::start(d, 1);
    let fast = ["--fence-wait-ms", "500"];
    let (mut a, a_lines) = replica(d, "a", &etcd, &fast);
    a_lines.wait_for("coordinator active", 1, WAIT).unwrap();
    let (b, b_lines) = replica(d, "b", &etcd, &fast);
    b_lines.wait_for("coordinator standby", 1, WAIT).unwrap();
    let both = format!("{},{}", a.addr, b.addr);
    let brokers: Vec<Proc> = (1..=3).map(|id| broker(id, &both, d)).collect();
    create_topic_replicated(&both, "m", 1, Some(1));
    let mut admin = Admin::new(&both, ClientConfig::default());
    let leader = admin.describe().await.unwrap().partitions[0].leader_id;

    let mut p = Producer::init(&both, producer_config("mid", 60_000)).await.unwrap();
    p.begin().unwrap();
    for i in 0..3 {
        p.send("m", 0, format!("r{i}").into()).await.unwrap();
    }
    // The partition's leader freezes: the commit is decided and journaled, its marker waits.
    signal(&brokers[leader as usize - 1], "STOP");
    let commit = tokio::spawn(async move { p.commit().await });
    let deadline = Instant::now() + WAIT;
    loop {
        let d = admin.describe().await.unwrap();
        if d.transactional_ids.iter().any(|t| t.transactional_id == "mid" && t.state == "PrepareCommit") {
            break;
        }
        assert!(Instant::now() < deadline, "the commit was never prepared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill9();
    signal(&brokers[leader as usize - 1], "CONT");
    b_lines.wait_for("coordinator active", 1, WAIT).expect("the standby takes over");
    commit.await.unwrap().expect("the commit finishes on the new active replica");
    let mut consumer = Consumer::read_committed(&both, ClientConfig::default());
    let values: Vec<_> = consumer.read_to_end("m", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
    assert_eq!(values, ["r0", "r1", "r2"].map(|v| bytes::Bytes::from_static(v.as_bytes())));
    // A new client: the old one's connection went with the killed replica.
    let state = Admin::new(&both, ClientConfig::default()).describe().await.unwrap();
    let mid = state.transactional_ids.iter().find(|t| t.transactional_id == "mid").unwrap();
    assert_eq!(mid.state, "CompleteCommit", "{}", log_tails(&[&d.join("b.log")], 30));
}

/// Inits of `tid` through `bootstrap` until one is granted within `timeout_ms`: its epoch.
async fn grant(bootstrap: &str, tid: &str, timeout_ms: u64) -> Result<i16, String> {
    Producer::init(bootstrap, producer_config(tid, timeout_ms)).await.map(|p| p.epoch()).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_losing_its_leader_pauses_grants_and_losing_its_quorum_stops_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut etcd = Etcd::start(d, 3);
    let (a, a_lines) = replica(d, "a", &etcd, &[]);
    a_lines.wait_for("coordinator active", 1, WAIT).unwrap();
    let (b, b_lines) = replica(d, "b", &etcd, &[]);
    b_lines.wait_for("coordinator standby", 1, WAIT).unwrap();
    let both = format!("{},{}", a.addr, b.addr);
    let mut epochs = Vec::new();
    for _ in 0..3 {
        epochs.push(grant(&both, "g", 30_000).await.unwrap());
    }
    // etcd's leader dies: grants pause (an election), then go on.
    let first = etcd.leader();
    etcd.kill(first);
    let paused = Instant::now();
    epochs.push(grant(&both, "g", 60_000).await.expect("grants go on after etcd elects a new leader"));
    eprintln!("the first grant after etcd lost its leader took {:?}", paused.elapsed());
    epochs.push(grant(&both, "g", 30_000).await.unwrap());
    // A second member dies: no quorum, no grants, and the refusal says why.
    let second = etcd.leader();
    etcd.kill(second);
    let refused = grant(&both, "g", 8_000).await.expect_err("no grant without etcd's quorum");
    assert!(
        refused.contains("NOT_COORDINATOR") || refused.contains("COORDINATOR_NOT_AVAILABLE"),
        "a clear refusal: {refused}"
    );
    assert!(refused.contains("etcd"), "the refusal names etcd: {refused}");
    // The quorum returns: nothing granted was lost, no epoch is handed out twice.
    etcd.start_member(first);
    etcd.start_member(second);
    etcd.wait_healthy(&[0, 1, 2]);
    let after = grant(&both, "g", 60_000).await.expect("grants resume with the quorum");
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "epochs only go up: {epochs:?}");
    assert!(after > *epochs.last().unwrap(), "{after} after {epochs:?}");
    drop((a, b));
}

/// A Kafka client talks to the brokers only; their relays follow the takeover for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_kafka_client_is_served_and_fenced_through_a_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::start(d, 1);
    let (a, a_lines) = replica(d, "a", &etcd, &[]);
    a_lines.wait_for("coordinator active", 1, WAIT).unwrap();
    let (b, b_lines) = replica(d, "b", &etcd, &[]);
    b_lines.wait_for("coordinator standby", 1, WAIT).unwrap();
    let both = format!("{},{}", a.addr, b.addr);
    let mut broker = common::broker_with(1, &both, d, &["--kafka-listen", "127.0.0.1:0"]);
    let kafka = broker.next_line().rsplit(' ').next().unwrap().to_string();
    create_topic_replicated(&both, "k", 1, Some(1));

    let config = || ProducerConfig { delivery_timeout_ms: 60_000, ..ProducerConfig::transactional("kz") };
    let mut old = producer::kafka::KafkaProducer::init(&kafka, config()).await.unwrap();
    old.begin().unwrap();
    old.send("k", 0, "before".into()).await.unwrap();
    old.commit().await.unwrap();
    signal(&a, "STOP");
    b_lines.wait_for("coordinator active", 1, WAIT).expect("the standby takes over");
    // Through the same broker, whose relay now reaches the new active replica.
    let mut new = producer::kafka::KafkaProducer::init(&kafka, config()).await.unwrap();
    assert!(new.epoch() > old.epoch(), "{} then {}", old.epoch(), new.epoch());
    new.begin().unwrap();
    new.send("k", 0, "after".into()).await.unwrap();
    new.commit().await.unwrap();
    old.begin().unwrap();
    let zombie = old.send("k", 0, "zombie".into()).await;
    assert!(zombie.is_err(), "the old instance is fenced: {zombie:?}");
    signal(&a, "CONT");
    a_lines.wait_for("coordinator standby", 2, WAIT).expect("the woken replica steps down");
    let mut consumer = Consumer::read_committed(&both, ClientConfig::default());
    let values: Vec<_> = consumer.read_to_end("k", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
    assert_eq!(values, ["before", "after"].map(|v| bytes::Bytes::from_static(v.as_bytes())));
}

/// Unmodified Kafka clients, confluent-kafka (librdkafka) then kafka-python, across a takeover
/// each (the active replica frozen, the other taking over; then back): a new instance of a
/// transactional id initialises while the takeover is under way, retrying what the brokers
/// answer meanwhile (COORDINATOR_NOT_AVAILABLE), commits through the new replica and fences the
/// old instance, whose next transaction is refused; what is read committed is exactly the two
/// committed transactions. The script is tests/kafka_clients/takeover.py.
#[tokio::test(flavor = "multi_thread")]
async fn unmodified_kafka_clients_are_served_and_fenced_through_takeovers() {
    use std::io::{BufRead, BufReader, Write};
    let python = common::kafka_clients_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka_clients/takeover.py");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::start(d, 1);
    let (a, a_lines) = replica(d, "a", &etcd, &[]);
    a_lines.wait_for("coordinator active", 1, WAIT).unwrap();
    let (b, b_lines) = replica(d, "b", &etcd, &[]);
    b_lines.wait_for("coordinator standby", 1, WAIT).unwrap();
    let both = format!("{},{}", a.addr, b.addr);
    let mut broker = common::broker_with(1, &both, d, &["--kafka-listen", "127.0.0.1:0"]);
    let kafka = broker.next_line().rsplit(' ').next().unwrap().to_string();
    // (client, the active replica frozen, its lines, the other's lines, the other's `active`
    // lines once it has taken over)
    let turns = [("confluent", &a, &a_lines, &b_lines, 1), ("kafka-python", &b, &b_lines, &a_lines, 2)];
    for (client, active, active_lines, other_lines, other_active) in turns {
        let topic = format!("k-{client}");
        create_topic_replicated(&both, &topic, 1, Some(1));
        let log = std::fs::File::create(d.join(format!("{client}.log"))).unwrap();
        let mut py = Command::new(&python)
            .arg(&script)
            .args([client, kafka.as_str(), topic.as_str()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("run {python} {}: {e}", script.display()));
        let (tx, said) = std::sync::mpsc::channel();
        let stdout = BufReader::new(py.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let logs = [d.join(format!("{client}.log")), d.join("a.log"), d.join("b.log"), d.join("broker-1.log")];
        let next = |what: &str| {
            said.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| {
                let logs: Vec<&Path> = logs.iter().map(PathBuf::as_path).collect();
                panic!("{client}: no `{what}` line\n{}", log_tails(&logs, 30))
            })
        };
        assert_eq!(next("committed before"), "committed before");
        signal(active, "STOP");
        writeln!(py.stdin.as_mut().unwrap(), "go").unwrap();
        assert_eq!(next("committed after"), "committed after", "{client}");
        let zombie = next("ZOMBIE");
        assert!(zombie.starts_with("ZOMBIE REFUSED"), "{client}: the old instance is fenced: {zombie}");
        assert!(py.wait().unwrap().success(), "{client}: the script failed");
        other_lines.wait_for("coordinator active", other_active, WAIT).expect("the standby took over");
        signal(active, "CONT");
        active_lines.wait_for("coordinator standby", 2, WAIT).expect("the woken replica steps down");
        let mut consumer = Consumer::read_committed(&both, ClientConfig::default());
        let values: Vec<_> = consumer.read_to_end(&topic, 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
        assert_eq!(values, ["before", "after"].map(|v| bytes::Bytes::from_static(v.as_bytes())), "{client}");
    }
}

/// `cluster up --etcd-endpoints E --coordinators 2`: two replicas, one active; `cluster kill
/// coordinator` kills the active one, the other takes over (its events say so), and a Kafka
/// client's new instance fences the old one through it. The timeline has a lane per replica.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_runs_coordinator_replicas_and_the_killed_active_one_is_replaced() {
    use producer::kafka::KafkaProducer;
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::start(d, 1);
    let cdir = d.join("cluster");
    let cd = cdir.to_str().unwrap();
    let exe = env!("CARGO_BIN_EXE_cluster");
    let mut up = Command::new(exe)
        .args(["up", "--brokers", "3", "--kafka-port", "0", "--data-dir", cd, "--json", "--coordinators", "2"])
        .args(["--etcd-endpoints", &etcd.endpoints(), "--coordinator-arg=--etcd-lease-ms=1000"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(d.join("up.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(up.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let json: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{line:?}: {e}; {}", std::fs::read_to_string(d.join("up.log")).unwrap()));
    let bootstrap = json["bootstrap_servers"].as_str().unwrap().to_string();
    let names: Vec<&str> = json["processes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["coordinator 1", "coordinator 2", "broker 1", "broker 2", "broker 3"]);
    let took_over = |n: usize| -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(cdir.join("events.jsonl")).unwrap();
            let seen: Vec<String> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|e| e["event"] == "coordinator took over")
                .map(|e| e["process"].as_str().unwrap().to_string())
                .collect();
            if seen.len() >= n {
                return seen;
            }
            assert!(Instant::now() < deadline, "{n} takeovers not seen: {seen:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = took_over(1)[0].clone();

    let config = ProducerConfig::transactional;
    let mut old = KafkaProducer::init(&bootstrap, config("ha-app")).await.unwrap();
    old.begin().unwrap();
    old.send("ha", 0, "before".into()).await.unwrap();
    old.commit().await.unwrap();

    let killed = Command::new(exe).args(["kill", "coordinator", "--data-dir", cd]).output().unwrap();
    let said = String::from_utf8_lossy(&killed.stdout);
    assert!(killed.status.success() && said.starts_with(&format!("killed {first} (pid ")), "{said}");
    let second = took_over(2)[1].clone();
    assert_ne!(first, second, "the other replica takes over");

    let mut new = KafkaProducer::init(&bootstrap, config("ha-app")).await.unwrap();
    assert!(new.epoch() > old.epoch(), "epochs go up across the takeover: {} then {}", old.epoch(), new.epoch());
    old.begin().unwrap();
    assert!(old.send("ha", 0, "zombie".into()).await.is_err(), "the old instance is fenced");
    new.begin().unwrap();
    new.send("ha", 0, "after".into()).await.unwrap();
    new.commit().await.unwrap();

    // `restart coordinator K` brings the killed replica back, as a standby.
    let k = first.trim_start_matches("coordinator ");
    let restarted = Command::new(exe).args(["restart", "coordinator", k, "--data-dir", cd]).output().unwrap();
    assert!(restarted.status.success(), "{restarted:?}");
    let page = d.join("run.html");
    let drawn = Command::new(exe).args(["timeline", page.to_str().unwrap(), "--data-dir", cd]).output().unwrap();
    assert!(drawn.status.success(), "{drawn:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    for lane in ["coordinator 1", "coordinator 2"] {
        assert!(html.contains(&format!("data-lane=\"{lane}\"")), "no lane {lane}");
    }
    assert!(Command::new(exe).args(["down", "--data-dir", cd]).status().unwrap().success());
    assert!(up.wait().unwrap().success());
}

/// confluent-kafka through `cluster` with two coordinator replicas: the active one killed
/// mid-transaction, the commit going through the one that takes over, the old instance fenced by
/// a new one there, read_committed exact. The script is tests/kafka_clients/cluster_takeover.py
/// (the README's pytest fixture's class, with `cluster up --etcd-endpoints --coordinators 2`).
#[test]
fn confluent_kafka_through_cluster_across_a_coordinator_takeover() {
    let python = common::kafka_clients_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka_clients/cluster_takeover.py");
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path(), 1);
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.path().join("cluster"))
        .arg(etcd.endpoints())
        .env("EPOCHFENCE_CLUSTER", env!("CARGO_BIN_EXE_cluster"))
        .output()
        .unwrap_or_else(|e| panic!("run {python} {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("OK"),
        "{}: {stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
