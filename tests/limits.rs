//! Resource limits with real processes: thousands of held connections, a connection limit
//! that refuses cleanly, and a slow-loris client disconnected after the idle timeout.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::Proc;
use futures::StreamExt;
use producer::{Producer, ProducerConfig};
use protocol::codec::ClientCodec;
use protocol::ErrorCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn start(dir: &std::path::Path, extra_broker: &[&str], extra_coordinator: &[&str]) -> (Proc, Proc) {
    let c = common::coordinator_with(dir, extra_coordinator);
    let data = dir.join("broker-1");
    let mut args = vec![
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--coordinator",
        &c.addr,
        "--data-dir",
        data.to_str().unwrap(),
        "--heartbeat-ms",
        "50",
    ];
    args.extend_from_slice(extra_broker);
    let b = Proc::start("broker", &args, &dir.join("broker-1.log"));
    common::create_topic(&c.addr, "t", 1);
    (c, b)
}

/// Bound on the broker's resident memory while it holds the connections, in KiB. The debug
/// broker holds about 90 MB with them (22 MB before the first); connections that started with
/// an 8 KiB write buffer as well as their read buffer, as tokio-util's `Framed` makes them,
/// took it to 130 MB.
const HELD_RSS_KIB_MAX: u64 = 112 * 1024;

#[tokio::test]
async fn five_thousand_held_connections_stay_within_bounds_and_a_producer_gets_through() {
    let dir = tempfile::tempdir().unwrap();
    let (c, b) = start(dir.path(), &["--connections-max", "8000"], &[]);
    let mut held = Vec::with_capacity(5_000);
    for _ in 0..5_000 {
        held.push(TcpStream::connect(&b.addr).await.unwrap());
    }
    let mut p = Producer::init(&c.addr, ProducerConfig::transactional("through")).await.unwrap();
    p.send("t", 0, Bytes::from_static(b"made it")).await.unwrap();
    let rss = rss_kib(b.child.id());
    eprintln!("broker RSS with 5000 held connections: {rss} KiB");
    assert!(rss < HELD_RSS_KIB_MAX, "broker RSS {rss} KiB exceeds {HELD_RSS_KIB_MAX} KiB");
    drop(held);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _b) = start(dir.path(), &[], &["--connections-max", "100"]);
    let mut conns = Vec::new();
    for _ in 0..150 {
        conns.push(TcpStream::connect(&c.addr).await.unwrap());
    }
    // A refused connection gets one error frame and is closed at once; an accepted one stays
    // silent. Look at all of them at once.
    let verdicts = futures::future::join_all(conns.into_iter().map(|s| async move {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(3_000), s.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                let mut frames = FramedRead::new(s, ClientCodec::new(1 << 16));
                let (_, resp) = frames.next().await.unwrap().unwrap();
                assert_eq!(resp.status().code, ErrorCode::BrokerNotAvailable);
                assert!(resp.status().message.contains("connections_max is 100"), "{}", resp.status());
                None
            }
            _ => Some(s),
        }
    }))
    .await;
    let refused = verdicts.iter().filter(|v| v.is_none()).count();
    let held: Vec<TcpStream> = verdicts.into_iter().flatten().collect();
    // The broker's heartbeat connection holds one slot too.
    assert!(held.len() <= 100, "the limit holds: {} served", held.len());
    assert!(refused >= 50, "everything beyond the limit is refused: {refused} refused");
    assert_eq!(held.len() + refused, 150);
    // A producer is refused clearly while the limit is reached...
    let mut config = ProducerConfig::transactional("late");
    config.delivery_timeout_ms = 300;
    let err = match Producer::init(&c.addr, config).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the limit let a connection through"),
    };
    assert!(err.contains("too many connections"), "{err}");
    // ...and gets through once slots are free.
    drop(held);
    let mut p = Producer::init(&c.addr, ProducerConfig::transactional("late")).await.unwrap();
    p.send("t", 0, Bytes::from_static(b"later")).await.unwrap();
}

#[tokio::test]
async fn a_slow_loris_client_is_disconnected_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (c, b) = start(dir.path(), &["--idle-ms", "300"], &[]);
    let mut slow = TcpStream::connect(&b.addr).await.unwrap();
    // A frame announcing 100 bytes, sent one byte every 50 ms: never complete in time.
    slow.write_all(&100u32.to_be_bytes()).await.unwrap();
    let mut closed = false;
    for _ in 0..200 {
        if slow.write_all(&[0]).await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 16];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(50), slow.read(&mut buf)).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "the slow client still holds its slot");
    let mut p = Producer::init(&c.addr, ProducerConfig::transactional("quick")).await.unwrap();
    p.send("t", 0, Bytes::from_static(b"quick")).await.unwrap();
}

/// Issue 27, item 5: a restarted coordinator whose client connections are all taken (a flood
/// of clients, or the relays of Kafka connections) still hears from every broker, in the room
/// kept for members, so no leader lease lapses. With no room kept (`--member-connections-max
/// 0`, the old behaviour), the brokers cannot reconnect and leaderships move.
#[tokio::test]
async fn a_restarted_coordinator_at_its_client_limit_still_hears_from_every_broker() {
    assert_eq!(members_heard_after_a_flood(None).await, (3.0, 0.0), "every broker heard, no leadership moved");
}

#[tokio::test]
async fn without_room_for_members_a_client_flood_costs_the_brokers_their_leaderships() {
    let (live, elections) = members_heard_after_a_flood(Some("0")).await;
    assert!(live < 3.0 && elections > 0.0, "the flood kept brokers out: {live} live, {elections} elections");
}

/// Restart the coordinator of a three-broker cluster while the brokers are paused, take every
/// client connection it serves, wake the brokers; then (live brokers, elections) once every
/// broker is heard (or, with `member_room`, once an election shows they were not).
async fn members_heard_after_a_flood(member_room: Option<&str>) -> (f64, f64) {
    const CLIENTS_MAX: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let clients_max = CLIENTS_MAX.to_string();
    let mut flags =
        vec!["--connections-max", &clients_max, "--broker-lease-ms", "4000", "--metrics-listen", "127.0.0.1:0"];
    if let Some(room) = member_room {
        flags.extend_from_slice(&["--member-connections-max", room]);
    }
    let mut c = common::coordinator_with(dir.path(), &flags);
    let addr = c.addr.clone();
    let brokers: Vec<Proc> = (1..=3).map(|id| common::broker(id, &addr, dir.path())).collect();
    common::create_topic_replicated(&addr, "t", 3, Some(3));
    let mut p = Producer::init(&addr, ProducerConfig::transactional("before")).await.unwrap();
    for partition in 0..3 {
        p.send("t", partition, Bytes::from_static(b"led")).await.unwrap();
    }
    drop(p);
    for b in &brokers {
        common::signal(b, "STOP");
    }
    c.kill9();
    let data = dir.path().join("coordinator");
    let mut args = vec!["--listen", addr.as_str(), "--data-dir", data.to_str().unwrap()];
    args.extend_from_slice(&flags);
    let mut c = Proc::start("coordinator", &args, &dir.path().join("coordinator.log"));
    let metrics = common::metrics_addr(&mut c, 0);
    // Every client connection taken, each proven served by an answer...
    let mut flood = Vec::new();
    for _ in 0..CLIENTS_MAX {
        let conn = net::Connection::connect(&addr).await.unwrap();
        let r = conn.call(protocol::Request::Describe).await.unwrap();
        assert!(r.status().is_ok(), "{}", r.status());
        flood.push(conn);
    }
    // ...and the next client refused (it found the members' room, and is not a member).
    let late = net::Connection::connect(&addr).await.unwrap();
    let refused = late.call(protocol::Request::Describe).await;
    assert!(
        refused.as_ref().map_or(true, |r| r.status().code == ErrorCode::BrokerNotAvailable),
        "a client beyond connections_max was served: {refused:?}"
    );
    for b in &brokers {
        common::signal(b, "CONT");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = common::scrape(&metrics);
        let live = common::sample(&text, "epochfence_coordinator_live_brokers");
        let elections = common::sample(&text, "epochfence_coordinator_elections_total");
        let done = if member_room.is_none() { live == 3.0 } else { elections > 0.0 };
        if done || std::time::Instant::now() > deadline {
            drop(flood);
            return (live, elections);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
