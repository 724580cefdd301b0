//! `--mode kip848`: what KIP-848 consumer groups cost the coordinator (issue 30's measurements;
//! docs/BENCHMARKS.md, "KIP-848 consumer groups").
//!
//! - **Heartbeats per second**: an in-process cluster (one broker with a Kafka listener, the
//!   coordinator journaling locally), a topic of 10 partitions, and 1,000 members in
//!   100 groups of 10, each subscribed to the topic (so each member owns one partition). The
//!   members join and reconcile until every group is stable; then `--clients` Kafka connections
//!   send the members' steady ConsumerGroupHeartbeats (each connection one at a time, as a
//!   librdkafka member's own connection would) for `--duration-ms`: heartbeats answered per
//!   second and their latency. A steady heartbeat changes nothing the journal holds, so it is
//!   answered without a write; the joins' and reconciliations' writes are timed apart.
//! - **From a member's death to its partitions' new owner**: a group of two members; one stops
//!   heartbeating (dead: no leave) while the other heartbeats at the coordinator's interval; the
//!   time from the last heartbeat of the dead member to the answer that gives the live one the
//!   dead one's partitions (from then on it consumes them), `--repeat` times, under a session
//!   timeout of 3,000 ms and a heartbeat interval of 300 ms (Kafka's defaults are 45,000 and
//!   5,000: the time scales with them).

use std::time::{Duration, Instant};

use epochfence::{LocalCluster, LocalOptions};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use producer::kafka::KafkaConnection;

use super::Args;

const GROUPS: usize = 100;
const MEMBERS_PER_GROUP: usize = 10;
const PARTITIONS: i32 = 10;
const T: Duration = Duration::from_secs(30);

/// One simulated member: its group, id, epoch and owned partitions.
#[derive(Clone)]
struct Member {
    group: String,
    id: String,
    epoch: i32,
    /// What it owns, as its heartbeats list it.
    owned: Vec<TopicPartitions>,
}

impl Member {
    fn partitions(&self) -> usize {
        self.owned.iter().map(|t| t.partitions.len()).sum()
    }
}

fn request(m: &Member, full: bool) -> ConsumerGroupHeartbeatRequest {
    let by_topic = m.owned.clone();
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(m.group.clone())))
        .with_member_id(StrBytes::from_string(m.id.clone()))
        .with_member_epoch(m.epoch)
        .with_rebalance_timeout_ms(if full { 300_000 } else { -1 });
    if full {
        req.with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("in"))]))
            .with_topic_partitions(Some(by_topic))
    } else {
        req
    }
}

/// Take an answer: the epoch, and the assignment when it carries one (the member gives up what
/// it lost and takes what it got at once, as a member that commits nothing does).
fn take(m: &mut Member, r: &ConsumerGroupHeartbeatResponse) -> Result<bool, String> {
    if r.error_code != 0 {
        return Err(format!("member {} of {}: error {}", m.id, m.group, r.error_code));
    }
    let mut changed = r.member_epoch != m.epoch;
    m.epoch = r.member_epoch;
    if let Some(a) = &r.assignment {
        let owned: Vec<TopicPartitions> = a
            .topic_partitions
            .iter()
            .map(|t| TopicPartitions::default().with_topic_id(t.topic_id).with_partitions(t.partitions.clone()))
            .collect();
        changed |= owned != m.owned;
        m.owned = owned;
    }
    Ok(changed)
}

async fn beat(conn: &KafkaConnection, m: &mut Member, full: bool) -> Result<bool, String> {
    let r = conn.call(&request(m, full), 1).await.map_err(|e| e.to_string())?;
    take(m, &r)
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub(super) async fn kip848(args: &Args) -> Result<(), String> {
    let clients = args.clients.max(1);
    let duration = Duration::from_millis(if args.duration_ms > 0 { args.duration_ms } else { 10_000 });
    let opts = LocalOptions {
        kafka: true,
        secured: false,
        group_consumer: coordinator::consumer_group::ConsumerGroupConfig {
            session_timeout_ms: 3_000,
            heartbeat_interval_ms: 300,
            ..Default::default()
        },
        ..Default::default()
    };
    let c = LocalCluster::start(opts).await.map_err(|e| e.to_string())?;
    c.create_topic("in", PARTITIONS).await.map_err(|e| e.to_string())?;
    let connect =
        || async { KafkaConnection::connect(&c.kafka_addrs[0], None, T).await.map_err(|e| format!("connect: {e}")) };

    // Join: every member at epoch 0, then heartbeats until every group is stable (each member at
    // its group's epoch owning one partition). Each connection drives its share of the members.
    let mut members: Vec<Member> = (0..GROUPS * MEMBERS_PER_GROUP)
        .map(|i| Member {
            group: format!("g{}", i / MEMBERS_PER_GROUP),
            id: format!("m{i:04}"),
            epoch: 0,
            owned: Vec::new(),
        })
        .collect();
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(connect().await?);
    }
    let joined = Instant::now();
    let mut join_beats = 0u64;
    let shares: Vec<Vec<Member>> =
        (0..clients).map(|k| members.iter().skip(k).step_by(clients).cloned().collect()).collect();
    let results = futures::future::join_all(conns.iter().zip(shares).map(|(conn, mut share)| async move {
        let mut beats = 0u64;
        for m in &mut share {
            beat(conn, m, true).await?;
            beats += 1;
        }
        Ok::<_, String>((share, beats))
    }))
    .await;
    members.clear();
    for r in results {
        let (share, beats) = r?;
        members.extend(share);
        join_beats += beats;
    }
    // Reconcile: rounds of heartbeats (acknowledging what each gave up) until a round changes
    // nothing and every member owns a partition.
    let mut rounds = 0;
    loop {
        rounds += 1;
        let shares: Vec<Vec<Member>> =
            (0..clients).map(|k| members.iter().skip(k).step_by(clients).cloned().collect()).collect();
        let results = futures::future::join_all(conns.iter().zip(shares).map(|(conn, mut share)| async move {
            let mut changed = false;
            for m in &mut share {
                changed |= beat(conn, m, true).await?;
            }
            Ok::<_, String>((share, changed))
        }))
        .await;
        members.clear();
        let mut changed = false;
        for r in results {
            let (share, c) = r?;
            members.extend(share);
            changed |= c;
        }
        join_beats += members.len() as u64;
        if !changed && members.iter().all(|m| m.partitions() == 1) {
            break;
        }
        if rounds > 50 {
            return Err("the groups did not settle in 50 rounds of heartbeats".into());
        }
    }
    let settle = joined.elapsed();

    // Steady heartbeats for `duration`.
    let shares: Vec<Vec<Member>> =
        (0..clients).map(|k| members.iter().skip(k).step_by(clients).cloned().collect()).collect();
    let start = Instant::now();
    let results = futures::future::join_all(conns.iter().zip(shares).map(|(conn, mut share)| async move {
        let mut latencies = Vec::new();
        let mut i = 0;
        while start.elapsed() < duration {
            let n = share.len();
            let m = &mut share[i % n];
            let sent = Instant::now();
            let r = conn.call(&request(m, false), 1).await.map_err(|e| e.to_string())?;
            latencies.push(sent.elapsed().as_micros() as u64);
            if take(m, &r)? {
                return Err(format!("member {} of {} was told of a change in a steady group", m.id, m.group));
            }
            i += 1;
        }
        Ok::<_, String>(latencies)
    }))
    .await;
    let seconds = start.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    for r in results {
        latencies.extend(r?);
    }
    latencies.sort_unstable();
    let per_s = latencies.len() as f64 / seconds;

    // From a death to the new owner: group "death" of two members, `--repeat` times.
    let conn = connect().await?;
    let mut takeovers = Vec::new();
    for round in 0..args.repeat.max(1) {
        let group = format!("death-{round}");
        let mut live = Member { group: group.clone(), id: format!("live-{round}"), epoch: 0, owned: Vec::new() };
        let mut dead = Member { group, id: format!("dead-{round}"), epoch: 0, owned: Vec::new() };
        beat(&conn, &mut live, true).await?;
        beat(&conn, &mut dead, true).await?;
        // Settle: both own half.
        let deadline = Instant::now() + T;
        while live.partitions() + dead.partitions() != PARTITIONS as usize
            || live.partitions() == 0
            || dead.partitions() == 0
        {
            beat(&conn, &mut live, true).await?;
            beat(&conn, &mut dead, true).await?;
            if Instant::now() > deadline {
                return Err("the death group did not settle".into());
            }
        }
        // The dead member's last heartbeat; the live one beats at the coordinator's interval.
        beat(&conn, &mut dead, false).await?;
        let died = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            beat(&conn, &mut live, true).await?;
            if live.partitions() == PARTITIONS as usize {
                break;
            }
            if died.elapsed() > T {
                return Err("the dead member's partitions never moved".into());
            }
        }
        takeovers.push(died.elapsed().as_millis() as u64);
        // The live member leaves: the next round starts afresh.
        live.epoch = -1;
        let _ = conn.call(&request(&live, false), 1).await;
    }
    takeovers.sort_unstable();
    c.shutdown().await;

    if args.json {
        let value = serde_json::json!({
            "config": { "groups": GROUPS, "members_per_group": MEMBERS_PER_GROUP, "partitions": PARTITIONS,
                        "clients": clients,
                        "session_timeout_ms": 3000, "heartbeat_interval_ms": 300 },
            "join_and_settle_seconds": settle.as_secs_f64(), "join_heartbeats": join_beats, "settle_rounds": rounds,
            "steady_heartbeats_per_s": per_s, "steady_heartbeats": latencies.len(),
            "p50_us": percentile(&latencies, 0.5), "p99_us": percentile(&latencies, 0.99),
            "max_us": latencies.last().copied().unwrap_or(0),
            "death_to_new_owner_ms": takeovers,
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("json serialises"));
    } else {
        println!(
            "KIP-848: {} members in {GROUPS} groups of {MEMBERS_PER_GROUP} on a topic of {PARTITIONS} partitions, {clients} Kafka connections to one broker's listener",
            GROUPS * MEMBERS_PER_GROUP
        );
        println!(
            "join and settle: {:.2} s ({join_beats} heartbeats in {rounds} rounds after the joins, each change journaled)",
            settle.as_secs_f64()
        );
        println!(
            "steady heartbeats: {per_s:.0}/s over {seconds:.1} s; latency p50 {} us, p99 {} us, max {} us",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(0)
        );
        println!(
            "member death to its partitions' new owner (session 3000 ms, heartbeats every 300 ms), {} runs: min {} ms, median {} ms, max {} ms",
            takeovers.len(),
            takeovers.first().copied().unwrap_or(0),
            percentile(&takeovers, 0.5),
            takeovers.last().copied().unwrap_or(0)
        );
    }
    Ok(())
}
