//! Crash loops with real processes: a broker killed with SIGKILL at pseudo-random moments while
//! a producer streams, and restarted; every acknowledged record must survive exactly once, in
//! order, with valid CRCs, and nothing else may sit between them.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{broker_with, coordinator, create_topic, Proc};
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};

/// Every record of `t-0` from offset 0 to the end, as (offset, value), read at `addr`.
async fn log_of_t0(addr: &str) -> Vec<(i64, String)> {
    let mut consumer = Consumer::new(addr, ClientConfig::default());
    let records = consumer.read_to_end("t", 0, 0).await.unwrap();
    records.into_iter().map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned())).collect()
}

#[tokio::test]
async fn broker_killed_twenty_times_mid_stream_keeps_every_acknowledged_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    // Small segments, so that the crashes also land around rolls, index and snapshot writes.
    let flags = ["--segment-bytes", "4096"];
    let mut b = broker_with(1, &c.addr, dir.path(), &flags);
    create_topic(&c.addr, "t", 1);

    let stop = Arc::new(AtomicBool::new(false));
    let (addr, stop_writer) = (c.addr.clone(), stop.clone());
    let writer = tokio::spawn(async move {
        let mut config = ProducerConfig::transactional("crash-loop");
        config.delivery_timeout_ms = 60_000;
        config.client.request_timeout_ms = 1_000;
        let mut p = Producer::init(&addr, config).await.unwrap();
        let mut acked = Vec::new();
        let mut i = 0;
        while !stop_writer.load(Ordering::Relaxed) {
            let value = format!("v{i}");
            let m = p.send("t", 0, Bytes::from(value.clone())).await.expect("every record is eventually acknowledged");
            acked.push((m.base_offset, value));
            i += 1;
        }
        acked
    });

    // Kill at pseudo-random moments (a fixed LCG, so a failure replays), restart each time.
    let mut seed: u64 = 0x5eed;
    for _ in 0..20 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        tokio::time::sleep(Duration::from_millis(20 + (seed >> 33) % 150)).await;
        b.kill9();
        b = broker_with(1, &c.addr, dir.path(), &flags);
    }
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(acked.len() > 20, "the stream made progress through the crashes ({} records)", acked.len());

    // Everything in the log is exactly the acknowledged records, at their acknowledged offsets.
    let log = log_of_t0(&c.addr).await;
    assert_eq!(log, acked, "the log holds exactly the acknowledged records, once each, in order");
    let segments = broker::log::segment_files(&common::log_path(dir.path(), 1, "t", 0)).unwrap().len();
    assert!(segments > 3, "the stream rolled segments ({segments})");
}

/// The disk fills up under a broker (every file it writes is capped by RLIMIT_FSIZE, so a log
/// write fails with EFBIG midway through a batch): produces fail with a storage error, every
/// acknowledged record stays readable, nothing half-written is served, and once there is room
/// again (a restart without the cap) the log takes writes after exactly the acknowledged records.
#[tokio::test]
async fn a_full_disk_fails_produces_cleanly_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let data = dir.path().join("broker-1");
    let args = |data: &std::path::Path| -> Vec<String> {
        ["--id", "1", "--listen", "127.0.0.1:0", "--coordinator", &c.addr, "--data-dir", data.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .chain(["--heartbeat-ms", "50"].map(String::from))
            .collect()
    };
    let argv = args(&data);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut b = Proc::start_with_file_limit("broker", &argv, &dir.path().join("broker-1.log"), 256);
    create_topic(&c.addr, "t", 1);

    let mut config = ProducerConfig::idempotent();
    config.delivery_timeout_ms = 1_500;
    let mut p = Producer::init(&c.addr, config).await.unwrap();
    let mut acked = Vec::new();
    let error = loop {
        let value = format!("{:0>1000}", acked.len());
        match p.send("t", 0, Bytes::from(value.clone())).await {
            Ok(m) => acked.push((m.base_offset, value)),
            Err(e) => break e.to_string(),
        }
        assert!(acked.len() < 10_000, "the file-size cap never bit");
    };
    assert!(acked.len() > 10, "some records fit before the disk filled ({})", acked.len());
    assert!(error.contains("KAFKA_STORAGE_ERROR") && error.contains("write failed"), "{error}");

    // Reads go on, and serve exactly what was acknowledged.
    assert_eq!(log_of_t0(&c.addr).await, acked);

    // Room again: the restarted broker continues right after the acknowledged records.
    b.kill9();
    let _b = common::broker(1, &c.addr, dir.path());
    let mut q = Producer::init(&c.addr, ProducerConfig::idempotent()).await.unwrap();
    let m = q.send("t", 0, Bytes::from_static(b"after")).await.unwrap();
    assert_eq!(m.base_offset, acked.len() as i64, "no gap and no leftover of the failed writes");
    acked.push((m.base_offset, "after".into()));
    assert_eq!(log_of_t0(&c.addr).await, acked);
}

/// SIGTERM stops a broker cleanly: every log synced, the active segment indexed and the
/// producer state snapshotted at the log end, so the restart reads no segment and replays no
/// batch, and serves exactly what was acknowledged.
#[tokio::test]
async fn a_clean_stop_leaves_nothing_to_recover() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path());
    let flags = ["--segment-bytes", "4096"];
    let mut b = broker_with(1, &c.addr, dir.path(), &flags);
    create_topic(&c.addr, "t", 1);
    let mut p = Producer::init(&c.addr, ProducerConfig::idempotent()).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..100 {
        let value = format!("v{i}");
        let m = p.send("t", 0, Bytes::from(value.clone())).await.unwrap();
        acked.push((m.base_offset, value));
    }
    common::signal(&b, "TERM");
    let status = b.child.wait().unwrap();
    assert!(status.success(), "a clean stop exits 0: {status}");

    let part = common::log_path(dir.path(), 1, "t", 0);
    let segments = broker::log::segment_files(&part).unwrap();
    assert!(segments.len() > 1);
    let active = &segments.last().unwrap().1;
    assert!(active.with_extension("index").exists(), "the active segment is indexed");
    let end = acked.last().unwrap().0 + 1;
    assert!(part.join(broker::log::offset_file_name(end, "snapshot")).exists(), "a snapshot at the log end");

    let _b = broker_with(1, &c.addr, dir.path(), &flags);
    let log = log_of_t0(&c.addr).await;
    assert_eq!(log, acked);
    let broker_log = std::fs::read_to_string(dir.path().join("broker-1.log")).unwrap();
    let opened: Vec<&str> = broker_log.lines().filter(|l| l.contains("partition opened")).collect();
    assert!(opened.last().is_some_and(|l| l.contains("scanned_bytes=0")), "{opened:?}");
}
