//! Crash loops with real processes: a broker killed with SIGKILL at pseudo-random moments while
//! a producer streams, and restarted; every acknowledged record must survive exactly once, in
//! order, with valid CRCs, and nothing else may sit between them.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{broker_with, coordinator, create_topic};
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};

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
    let mut consumer = Consumer::new(&c.addr, ClientConfig::default());
    let log: Vec<(i64, String)> = consumer
        .read_to_end("t", 0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned()))
        .collect();
    assert_eq!(log, acked, "the log holds exactly the acknowledged records, once each, in order");
    let segments = broker::log::segment_files(&common::log_path(dir.path(), 1, "t", 0)).unwrap().len();
    assert!(segments > 3, "the stream rolled segments ({segments})");
}
