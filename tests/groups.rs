//! Consumer groups with the bundled CLIs, against real processes: `consumer --kafka --group`
//! reads the partitions its group assigns from the committed offsets and commits what it
//! printed; two members share a topic; `admin describe` lists the groups (text and `--json`).
//! The real clients' group tests are in tests/kafka_clients/test_groups.py.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use common::Proc;
use producer::kafka::KafkaProducer;
use producer::ProducerConfig;

const PARTITIONS: i32 = 4;

/// A coordinator whose groups form at once and accept short sessions (and serves /metrics),
/// and one broker with a Kafka listener; returns them and the Kafka address.
fn cluster(dir: &std::path::Path) -> (Proc, Proc, String) {
    let c = common::coordinator_with(
        dir,
        &[
            "--group-initial-rebalance-delay-ms",
            "0",
            "--group-min-session-timeout-ms",
            "1000",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let mut b = common::broker_with(1, &c.addr, dir, &["--kafka-listen", "127.0.0.1:0"]);
    let kafka = b.next_line().rsplit(' ').next().unwrap().to_string();
    common::create_topic(&c.addr, "in", PARTITIONS);
    (c, b, kafka)
}

async fn produce(kafka: &str, from: usize, to: usize) {
    let mut p = KafkaProducer::init(kafka, ProducerConfig::idempotent()).await.unwrap();
    for i in from..to {
        p.send("in", i as i32 % PARTITIONS, Bytes::from(i.to_string())).await.unwrap();
    }
}

/// The values a `consumer --json` printed, and its stderr.
fn group_read(kafka: &str, group: &str) -> (Vec<(i32, u64)>, String) {
    let out = common::run("consumer", &["--kafka", "--bootstrap", kafka, "--topic", "in", "--group", group, "--json"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["partition"].as_i64().unwrap() as i32, v["value"].as_str().unwrap().parse().unwrap())
        })
        .collect();
    (lines, err)
}

fn describe_groups(coordinator: &str) -> serde_json::Value {
    let out = common::run("admin", &["--bootstrap", coordinator, "describe", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["groups"].clone()
}

#[tokio::test]
async fn a_group_member_reads_from_the_committed_offsets_and_commits_what_it_printed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _b, kafka) = cluster(dir.path());
    produce(&kafka, 0, 40).await;
    let (read, err) = group_read(&kafka, "g");
    let mut values: Vec<u64> = read.iter().map(|(_, v)| *v).collect();
    values.sort();
    assert_eq!(values, (0..40).collect::<Vec<u64>>(), "{err}");
    assert!(read.iter().all(|(p, v)| *p == (*v % 4) as i32), "lines carry their partition");
    assert!(err.contains("joined group g as ") && err.contains("partitions [in-0,in-1,in-2,in-3]"), "{err}");
    // It left: the group is empty, with every partition committed at its end.
    let groups = describe_groups(&c.addr);
    assert_eq!(groups[0]["group"], "g");
    assert_eq!(groups[0]["state"], "Empty", "{groups}");
    let committed: Vec<(i64, i64)> = groups[0]["committed_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["partition"].as_i64().unwrap(), o["offset"].as_i64().unwrap()))
        .collect();
    assert_eq!(committed, [(0, 10), (1, 10), (2, 10), (3, 10)]);
    // The coordinator counted the member's generation and its commits; nothing refused.
    let metrics_addr = common::metrics_addr(&mut c, 0);
    let metrics = common::scrape(&metrics_addr);
    assert!(common::sample(&metrics, "epochfence_coordinator_group_rebalances_total") >= 1.0, "{metrics}");
    assert!(common::sample(&metrics, "epochfence_coordinator_group_offset_commits_total") >= 1.0, "{metrics}");
    assert!(!metrics.contains("epochfence_coordinator_group_offset_commits_refused_total{"), "{metrics}");
    // Read again: only what came after the committed offsets.
    produce(&kafka, 40, 44).await;
    let (read, err) = group_read(&kafka, "g");
    let mut values: Vec<u64> = read.iter().map(|(_, v)| *v).collect();
    values.sort();
    assert_eq!(values, [40, 41, 42, 43], "{err}");
    // Another group has its own offsets.
    assert_eq!(group_read(&kafka, "other").0.len(), 44);
    let text = common::run("admin", &["--bootstrap", &c.addr, "describe"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("groups:\n  g state=Empty") && text.contains("committed [in-0=11 in-1=11 in-2=11 in-3=11]"),
        "{text}"
    );
    // `admin delete-group` (issue 32, item 3): g goes with its offsets, so a member of g reads
    // everything again; a group that does not exist is not deleted (exit 1, and says why).
    let out = common::run("admin", &["--bootstrap", &c.addr, "delete-group", "g"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "deleted group 'g'\n");
    let out = common::run("admin", &["--bootstrap", &c.addr, "delete-group", "g", "other"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "deleted group 'other'\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: group 'g' not deleted: GROUP_ID_NOT_FOUND"), "{err}");
    assert_eq!(describe_groups(&c.addr), serde_json::json!([]));
    assert_eq!(group_read(&kafka, "g").0.len(), 44, "a deleted group's member starts over");
    let metrics = common::scrape(&metrics_addr);
    assert_eq!(common::sample(&metrics, "epochfence_coordinator_groups_deleted_total"), 2.0, "{metrics}");
}

/// A `consumer --group --follow` whose stderr lines arrive on a channel.
fn member(kafka: &str, group: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(common::bin("consumer"))
        .args([
            "--kafka",
            "--bootstrap",
            kafka,
            "--topic",
            "in",
            "--group",
            group,
            "--follow",
            "--session-timeout-ms",
            "2000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The next `joined group` line with `n` partitions.
fn joined_with(rx: &mpsc::Receiver<String>, n: usize) -> String {
    loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).expect("a joined line within 60 s");
        if let Some(parts) = line.split_once("partitions [").map(|(_, p)| p.trim_end_matches(']')) {
            if parts.split(',').filter(|p| !p.is_empty()).count() == n {
                return line;
            }
        }
    }
}

#[tokio::test]
async fn two_members_share_the_partitions_and_one_takes_all_when_the_other_dies() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _b, kafka) = cluster(dir.path());
    produce(&kafka, 0, 8).await;
    let (mut a, a_lines) = member(&kafka, "shared");
    joined_with(&a_lines, 4);
    let (mut b, b_lines) = member(&kafka, "shared");
    joined_with(&b_lines, 2);
    joined_with(&a_lines, 2);
    let groups = describe_groups(&c.addr);
    let members = groups[0]["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{groups}");
    let mut assigned: Vec<String> =
        members.iter().flat_map(|m| m["assignment"].as_array().unwrap().iter().map(|p| p.to_string())).collect();
    assigned.sort();
    assert_eq!(assigned, ["\"in-0\"", "\"in-1\"", "\"in-2\"", "\"in-3\""], "each partition to one member");
    // b is killed (no LeaveGroup): once its session lapses, a owns every partition again.
    b.kill().unwrap();
    b.wait().unwrap();
    joined_with(&a_lines, 4);
    a.kill().unwrap();
    a.wait().unwrap();
}

/// Issue 27: offsets for partitions that do not exist are refused UNKNOWN_TOPIC_OR_PARTITION,
/// each, as Kafka refuses them, so no client can grow a group's offsets with names; the real
/// partitions of the same commit are committed.
#[tokio::test]
async fn offsets_of_partitions_that_do_not_exist_are_refused_and_the_others_committed() {
    use protocol::{
        ErrorCode, GroupMember, OffsetCommitRequest, OffsetFetchRequest, PartitionOffset, Request, Response,
    };
    let dir = tempfile::tempdir().unwrap();
    let (c, _b, _kafka) = cluster(dir.path());
    let conn = net::Connection::connect(&c.addr).await.unwrap();
    let offset = |topic: &str, partition, offset| PartitionOffset {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some("m".repeat(4096)),
    };
    let member = GroupMember { group: "g".into(), generation: -1, member_id: String::new(), instance_id: None };
    let offsets = vec![offset("in", 0, 5), offset("ghost", 0, 7), offset("in", PARTITIONS, 3)];
    let Response::OffsetCommit(r) = conn
        .call(Request::OffsetCommit(OffsetCommitRequest { member: member.clone(), txn: None, offsets }))
        .await
        .unwrap()
    else {
        panic!("wrong answer")
    };
    let codes: Vec<ErrorCode> = r.partitions.iter().map(|(_, s)| s.code).collect();
    assert_eq!(codes, [ErrorCode::None, ErrorCode::UnknownTopicOrPartition, ErrorCode::UnknownTopicOrPartition]);
    assert!(r.partitions[1].1.message.contains("no such partition: ghost-0, in-4;"), "{}", r.partitions[1].1);
    // Only names that do not exist: nothing is committed, and the whole commit says why.
    let Response::OffsetCommit(r) = conn
        .call(Request::OffsetCommit(OffsetCommitRequest {
            member,
            txn: None,
            offsets: (0..1000).map(|i| offset(&format!("ghost-{i}"), 0, 1)).collect(),
        }))
        .await
        .unwrap()
    else {
        panic!("wrong answer")
    };
    assert_eq!(r.status.code, ErrorCode::UnknownTopicOrPartition, "{}", r.status);
    let Response::OffsetFetch(f) = conn
        .call(Request::OffsetFetch(OffsetFetchRequest { group: "g".into(), partitions: None, require_stable: false }))
        .await
        .unwrap()
    else {
        panic!("wrong answer")
    };
    let held: Vec<(String, i32, i64)> =
        f.partitions.iter().map(|(o, _)| (o.topic.clone(), o.partition, o.offset)).collect();
    assert_eq!(held, [("in".to_string(), 0, 5)], "only the real partition's offset is kept");
}
