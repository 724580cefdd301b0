//! kcat, Debian's package (installed by scripts/kcat when missing), against a broker's Kafka
//! listener (issue 32, item 7): `-L` lists the topics, `-P` produces, `-C` reads with
//! `isolation.level=read_committed` (an aborted transaction's records are not read) and without,
//! `-Q` finds offsets by time, and `-X` logs in with SASL PLAIN (a wrong password gets nothing; its
//! SCRAM is refused, as Kafka 4 refuses it).

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::kafka::KafkaProducer;
use producer::ProducerConfig;

use common::kafka::wait_ready;

/// kcat with `args`, `stdin` written to it (on a blocking thread: the cluster runs on this
/// test's runtime).
async fn kcat(args: &[&str], stdin: &str) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(common::kcat())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kcat");
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn kcat_lists_produces_reads_committed_and_finds_offsets_by_time() {
    let c = LocalCluster::start(LocalOptions { kafka: true, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 2).await.unwrap();
    wait_ready(&c.kafka_addrs[0], "t", 2, None).await;
    let bs = c.kafka_bootstrap();

    let listed = kcat(&["-b", &bs, "-L", "-t", "t"], "").await;
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(text(&listed).contains("topic \"t\" with 2 partitions:"), "{}", text(&listed));

    let before = now_ms();
    let produced = kcat(&["-b", &bs, "-P", "-t", "t", "-p", "0"], "a\nb\nc\n").await;
    assert!(produced.status.success(), "{}", String::from_utf8_lossy(&produced.stderr));
    // A committed transaction, then an aborted one.
    let mut p = KafkaProducer::init(&bs, ProducerConfig::transactional("kcat")).await.unwrap();
    for (value, commit) in [("committed", true), ("aborted", false)] {
        p.begin().unwrap();
        p.send("t", 0, Bytes::from(value)).await.unwrap();
        if commit {
            p.commit().await.unwrap();
        } else {
            p.abort().await.unwrap();
        }
    }

    for (isolation, want) in [
        ("read_committed", &["a", "b", "c", "committed"][..]),
        ("read_uncommitted", &["a", "b", "c", "committed", "aborted"][..]), // the negative case
    ] {
        let isolation = format!("isolation.level={isolation}");
        let args = ["-b", &bs, "-C", "-t", "t", "-p", "0", "-o", "beginning", "-e", "-X", &isolation, "-f", "%s\n"];
        let out = kcat(&args, "").await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(text(&out).lines().collect::<Vec<_>>(), want, "{isolation}");
    }

    // Offsets by time: the first record at or after a time, none after the last one.
    let found = kcat(&["-b", &bs, "-Q", "-t", &format!("t:0:{before}")], "").await;
    assert!(found.status.success(), "{}", String::from_utf8_lossy(&found.stderr));
    assert!(text(&found).contains("t [0] offset 0"), "{}", text(&found));
    let later = now_ms() + 3_600_000;
    let none = kcat(&["-b", &bs, "-Q", "-t", &format!("t:0:{later}")], "").await;
    assert!(text(&none).contains("t [0] offset -1"), "{}", text(&none));
    c.shutdown().await;
}

/// `-X` with SASL: Debian's kcat (librdkafka 2.0.2) logs in only with a broker that lists
/// SaslHandshake from version 0, then uses version 1. With PLAIN; its SCRAM is refused, as Kafka
/// 4 refuses it: librdkafka before 2.6.1 repeats its nonce in the client-final message, which
/// RFC 5802's strict comparison refuses (librdkafka#4895).
#[tokio::test]
async fn kcat_logs_in_with_sasl_and_a_wrong_password_gets_nothing() {
    let users = vec![("alice".to_string(), "alice-pw".to_string())];
    let c =
        LocalCluster::start(LocalOptions { kafka: true, sasl_users: users, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let bs = c.kafka_bootstrap();
    for mechanism in ["PLAIN", "SCRAM-SHA-512"] {
        let login = |password: &str| {
            let args: Vec<String> = [
                "-b".to_string(),
                bs.clone(),
                "-L".into(),
                "-m".into(),
                "5".into(),
                "-X".into(),
                "security.protocol=SASL_PLAINTEXT".into(),
                "-X".into(),
                format!("sasl.mechanisms={mechanism}"),
                "-X".into(),
                "sasl.username=alice".into(),
                "-X".into(),
                format!("sasl.password={password}"),
            ]
            .to_vec();
            async move { kcat(&args.iter().map(String::as_str).collect::<Vec<_>>(), "").await }
        };
        let ok = login("alice-pw").await;
        if mechanism != "PLAIN" {
            assert!(!ok.status.success(), "this kcat's SCRAM nonce is refused, as Kafka 4 refuses it");
            continue;
        }
        assert!(ok.status.success(), "{mechanism}: {}", String::from_utf8_lossy(&ok.stderr));
        assert!(text(&ok).contains("topic \"t\" with 1 partitions:"), "{}", text(&ok));
        let refused = login("wrong").await;
        assert!(!refused.status.success(), "{mechanism}: {}", text(&refused));
        assert!(!text(&refused).contains("topic \"t\""), "{}", text(&refused));
    }
    c.shutdown().await;
}
