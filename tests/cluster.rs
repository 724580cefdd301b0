//! The `cluster` binary as a user runs it: `cluster up` in one process, faults from others,
//! the events file and its timeline, `cluster down`; a taken port; `cluster` killed with
//! SIGKILL. The scenario with an unmodified Kafka client through every fault is
//! `tests/kafka_clients/test_cluster.py` (run by tests/kafka_clients.rs).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CLUSTER: &str = env!("CARGO_BIN_EXE_cluster");

/// `cluster up ARGS --json` started; its JSON line read.
fn up(args: &[&str], log: &Path) -> (Child, serde_json::Value) {
    let stderr = std::fs::File::create(log).unwrap();
    let mut child = Command::new(CLUSTER)
        .arg("up")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start cluster up");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let json: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!("cluster up printed {line:?} ({e}); its stderr: {}", std::fs::read_to_string(log).unwrap())
    });
    (child, json)
}

fn cluster(args: &[&str]) -> Output {
    Command::new(CLUSTER).args(args).output().expect("run cluster")
}

fn ok(args: &[&str]) -> String {
    let out = cluster(args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "cluster {args:?} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn pids(json: &serde_json::Value) -> Vec<u32> {
    json["processes"].as_array().unwrap().iter().filter_map(|p| p["pid"].as_u64()).map(|p| p as u32).collect()
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// The processes whose command line mentions `dir`.
fn processes_of(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
                && alive(*pid)
        })
        .collect()
}

fn events(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn faults_on_demand_are_done_recorded_and_drawn_and_down_stops_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let d = dir.to_str().unwrap();
    let (mut up_proc, json) = up(
        &[
            "--brokers",
            "3",
            "--replicas",
            "2",
            "--kafka-port",
            "0",
            "--data-dir",
            d,
            "--coordinator-arg=--broker-lease-ms=1500",
        ],
        &tmp.path().join("up.log"),
    );
    let bootstrap = json["bootstrap_servers"].as_str().unwrap();
    assert_eq!(bootstrap.split(',').count(), 3, "{json}");
    let procs = pids(&json);
    assert_eq!(procs.len(), 4, "a coordinator and three brokers: {json}");

    // A topic created through the cluster without a replication factor gets `--replicas`.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client = producer::kafka::KafkaClient::new(bootstrap, producer::ClientConfig::default());
        client.create_topic("replicated", 1, -1).await.unwrap();
    });
    let created = events(&dir).into_iter().find(|e| e["event"] == "topic created" && e["topic"] == "replicated");
    assert_eq!(created.as_ref().map(|e| e["replicas"].clone()), Some(serde_json::json!(2)), "{created:?}");

    // `timeline --follow` rewrites the page as the run goes.
    let followed = tmp.path().join("follow.html");
    let mut follow = Command::new(CLUSTER)
        .args(["timeline", followed.to_str().unwrap(), "--follow", "--data-dir", d])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    // Each fault prints what it did and exits 0 (with --json, as one object).
    let paused: serde_json::Value =
        serde_json::from_str(&ok(&["pause", "broker", "2", "--data-dir", d, "--json"])).unwrap();
    assert_eq!(paused["ok"], true, "{paused}");
    assert!(paused["message"].as_str().unwrap().starts_with("paused broker 2 (pid "), "{paused}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&followed).is_ok_and(|h| h.contains("cluster: fault action=pause")) {
        assert!(Instant::now() < deadline, "the followed page never showed the pause");
        std::thread::sleep(Duration::from_millis(50));
    }
    follow.kill().unwrap();
    follow.wait().unwrap();
    let status = ok(&["status", "--data-dir", d]);
    assert!(status.lines().any(|l| l.starts_with("broker 2") && l.contains("paused")), "{status}");
    assert!(ok(&["resume", "broker", "2", "--data-dir", d]).starts_with("resumed broker 2"));
    assert!(ok(&["kill", "broker", "3", "--data-dir", d]).starts_with("killed broker 3"));
    let status = ok(&["status", "--data-dir", d]);
    assert!(status.lines().any(|l| l.starts_with("broker 3") && l.contains("stopped")), "{status}");
    assert!(ok(&["restart", "broker", "3", "--data-dir", d]).starts_with("started broker 3 again"));
    assert!(ok(&["restart", "coordinator", "--data-dir", d]).starts_with("restarted coordinator"));
    assert!(ok(&["isolate", "broker", "1", "--data-dir", d]).starts_with("isolated broker 1"));
    let status = ok(&["status", "--data-dir", d]);
    assert!(status.lines().any(|l| l.starts_with("broker 1") && l.contains("isolated")), "{status}");
    assert_eq!(ok(&["heal", "--data-dir", d]).trim(), "healed: broker 1 linked again");

    // A wrong process or action: a clear error, exit 1.
    let bad = cluster(&["pause", "broker", "7", "--data-dir", d]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("there is no broker 7"), "{bad:?}");
    let bad = cluster(&["isolate", "coordinator", "--data-dir", d]);
    assert_eq!(bad.status.code(), Some(1));

    // The processes' own logs keep their other lines beside the fencing events they also write
    // to the events file (its filter is its own).
    let log = std::fs::read_to_string(dir.join("logs/coordinator.log")).unwrap();
    assert!(log.contains("coordinator::cli: coordinator listening"), "{log}");

    // Every fault is an event, and the timeline draws each on its process's lane.
    let ev = events(&dir);
    let faults: Vec<(String, String)> = ev
        .iter()
        .filter(|e| e["event"] == "fault")
        .map(|e| (e["action"].as_str().unwrap().to_string(), e["target"].as_str().unwrap().to_string()))
        .collect();
    for want in [
        ("up", ""),
        ("pause", "broker 2"),
        ("resume", "broker 2"),
        ("kill", "broker 3"),
        ("restart", "broker 3"),
        ("restart", "coordinator"),
        ("isolate", "broker 1"),
        ("heal", "broker 1"),
    ] {
        assert!(faults.iter().any(|(a, t)| a == want.0 && t == want.1), "{want:?} not in {faults:?}");
    }
    // The servers' own events are there too: every broker registered (again, after restarts).
    let registered = ev.iter().filter(|e| e["event"] == "broker registered" && e["process"] == "coordinator").count();
    assert!(registered >= 3, "{ev:?}");
    let page = tmp.path().join("run.html");
    let out = ok(&["timeline", page.to_str().unwrap(), "--data-dir", d]);
    assert!(out.starts_with("wrote "), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    for lane in ["coordinator", "broker 1", "broker 2", "broker 3"] {
        assert!(html.contains(&format!("data-lane=\"{lane}\"")), "no lane {lane}");
    }
    assert!(html.contains("<li class=\"pause\"><b>broker 2</b>: cluster: fault action=pause"), "{html}");
    assert!(html.contains("<li class=\"crash\"><b>broker 3</b>: cluster: fault action=kill"), "{html}");
    for banned in ["<script", "<link", "<img", "url("] {
        assert!(!html.contains(banned), "the page loads nothing: {banned}");
    }
    // In a real browser: the lanes in order (coordinator, then brokers by id) and the marks.
    let dom = common::browser_dom(&page, tmp.path());
    let lanes: Vec<&str> =
        dom.split("<g class=\"lane\" data-lane=\"").skip(1).map(|l| &l[..l.find('"').unwrap()]).collect();
    assert_eq!(lanes, ["coordinator", "broker 1", "broker 2", "broker 3"], "{dom}");
    assert!(dom.matches("<g class=\"mark crash\">").count() >= 3, "kill, restart, restart: {dom}");

    // `down` stops every process, answers, and the `up` process exits 0 keeping --data-dir.
    assert!(ok(&["down", "--data-dir", d]).starts_with("stopped the cluster"));
    let status = up_proc.wait().unwrap();
    assert!(status.success(), "cluster up exited with {status}");
    let now: Vec<u32> = procs.iter().copied().filter(|p| alive(*p)).collect();
    assert!(now.is_empty(), "still running after down: {now:?}");
    assert!(processes_of(&dir).is_empty(), "processes of the cluster remain: {:?}", processes_of(&dir));
    assert!(dir.join("events.jsonl").exists(), "--data-dir is kept");
    assert!(!dir.join("cluster.sock").exists(), "the control socket is removed");
    let after = cluster(&["status", "--data-dir", d]);
    assert_eq!(after.status.code(), Some(1), "no cluster answers after down");
}

#[test]
fn a_taken_kafka_port_fails_clearly_and_starts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let port = common::spare_port();
    // The second broker's port is taken.
    let _taken = std::net::TcpListener::bind(("127.0.0.1", port + 1)).unwrap();
    let out = Command::new(CLUSTER)
        .args(["up", "--brokers", "2", "--kafka-port", &port.to_string(), "--data-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "no bootstrap line: {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(
        stderr.contains(&format!("port {} (broker 2's Kafka listener) is taken", port + 1))
            && stderr.contains("--kafka-port 0"),
        "{stderr}"
    );
    assert!(processes_of(&dir).is_empty(), "no child left: {:?}", processes_of(&dir));
    assert!(!dir.join("cluster.sock").exists());
}

#[test]
fn a_cluster_killed_with_sigkill_leaves_no_orphan() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let (mut up_proc, json) =
        up(&["--brokers", "2", "--kafka-port", "0", "--data-dir", dir.to_str().unwrap()], &tmp.path().join("up.log"));
    let procs = pids(&json);
    assert_eq!(procs.len(), 3);
    // A paused child too: SIGKILL reaches a stopped process.
    ok(&["pause", "broker", "1", "--data-dir", dir.to_str().unwrap()]);
    up_proc.kill().unwrap();
    up_proc.wait().unwrap();
    // The children's parent-death signal is immediate; the bound is only against a hung test.
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "orphans: {:?}", procs.iter().filter(|p| alive(**p)).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(processes_of(&dir).is_empty());
}

#[test]
fn sigterm_stops_the_cluster_and_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let (mut up_proc, json) =
        up(&["--brokers", "2", "--kafka-port", "0", "--data-dir", dir.to_str().unwrap()], &tmp.path().join("up.log"));
    let procs = pids(&json);
    let term = Command::new("kill").args(["-TERM", &up_proc.id().to_string()]).status().unwrap();
    assert!(term.success());
    let status = up_proc.wait().unwrap();
    assert!(status.success(), "cluster up after SIGTERM: {status}");
    // Stopped before `up` exits: nothing to wait for.
    let left: Vec<u32> = procs.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still running: {left:?}");
    assert!(std::fs::read_to_string(tmp.path().join("up.log")).unwrap().contains("epochfence cluster stopped"));
}

#[test]
fn without_the_etcd_feature_coordinator_replicas_exit_2_naming_it() {
    let out = cluster(&["up", "--coordinators", "3", "--etcd-endpoints", "http://127.0.0.1:2379"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--etcd-endpoints"), "{out:?}");
}

/// Without `--json` the bootstrap line and the table; without `--data-dir` a temporary data
/// directory, found by the other commands as this user's most recent cluster, and removed at exit.
#[test]
fn the_bootstrap_line_and_the_most_recent_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    // Its own temporary directory: the "most recent cluster" pointer is kept there, apart from
    // the other tests' clusters.
    let temp = tmp.path().to_str().unwrap();
    let mut up = Command::new(CLUSTER)
        .args(["up", "--brokers", "1", "--kafka-port", "0"])
        .env("TMPDIR", temp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(up.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let servers = line.trim().strip_prefix("bootstrap.servers=127.0.0.1:").unwrap_or_else(|| panic!("{line:?}"));
    assert!(servers.parse::<u16>().is_ok(), "one broker: {line:?}");
    let status = Command::new(CLUSTER).arg("status").env("TMPDIR", temp).output().unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && table.lines().any(|l| l.starts_with("broker 1")), "{status:?}");
    let data_dir =
        table.lines().find(|l| l.starts_with("coordinator")).and_then(|l| l.split_whitespace().last()).unwrap();
    let data_dir = Path::new(data_dir).parent().and_then(Path::parent).unwrap().to_path_buf();
    assert!(data_dir.starts_with(tmp.path()), "the data directory is under TMPDIR: {}", data_dir.display());
    let down = Command::new(CLUSTER).arg("down").env("TMPDIR", temp).output().unwrap();
    assert!(down.status.success(), "{down:?}");
    assert!(up.wait().unwrap().success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut up.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("epochfence cluster up in ") && stderr.contains("broker 1"), "the table: {stderr}");
    assert!(!data_dir.exists(), "the temporary data directory is removed at exit");
    let after = Command::new(CLUSTER).arg("down").env("TMPDIR", temp).output().unwrap();
    assert_eq!(after.status.code(), Some(1), "no most recent cluster after down: {after:?}");
}
