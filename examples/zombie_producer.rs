//! The zombie producer, told twice: once against a broker that fences, once against one that
//! does not. Real coordinator and broker servers on loopback TCP, in this one process.
//!
//! `cargo run --release --example zombie_producer` exits 0 only if both outcomes were seen:
//! with fencing the zombie's write is rejected and B's data stays; without it the zombie's
//! stale write lands after B's. With `--timeline FILE.html` it also writes a picture of both
//! runs: a lane per producer instance, the broker and the coordinator, epochs as bands, every
//! write, fence and refusal as a mark.

use std::process::ExitCode;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig};
use timeline::{LaneId, MarkKind, Page, Timeline};

const TOPIC: &str = "accounts";
const TID: &str = "balance-writer";

struct Outcome {
    zombie_rejected: bool,
    zombie_rejected_elsewhere: bool,
    final_value: String,
}

fn say(line: impl AsRef<str>) {
    println!("{}", line.as_ref());
}

/// The lanes of one story's timeline.
struct Lanes {
    a: LaneId,
    b: LaneId,
    broker: LaneId,
    coordinator: LaneId,
}

async fn story(fencing: bool, t: &mut Timeline) -> Result<Outcome, Box<dyn std::error::Error>> {
    let lanes = Lanes {
        a: t.lane("producer A"),
        b: t.lane("producer B"),
        broker: t.lane("broker 1 (accounts-0)"),
        coordinator: t.lane("coordinator"),
    };
    let cluster = LocalCluster::start(LocalOptions { fencing, ..Default::default() }).await?;
    cluster.create_topic(TOPIC, 2).await?;
    say(format!(
        "  coordinator on {}, broker 1 on {} (producer fencing {}); topic '{TOPIC}' has 2 partitions",
        cluster.coordinator_addr,
        cluster.broker_addrs[0],
        if fencing { "ON" } else { "OFF" }
    ));
    let bootstrap = cluster.coordinator_addr.clone();

    // 1. A starts and writes.
    let mut a = Producer::init(&bootstrap, ProducerConfig::transactional(TID)).await?;
    say(format!(
        "  1. producer A starts with transactional id '{TID}': producer id {}, epoch {}",
        a.producer_id(),
        a.epoch()
    ));
    t.mark(
        lanes.coordinator,
        MarkKind::Grant,
        format!("A: epoch {}", a.epoch()),
        format!("grants A producer id {} epoch {}", a.producer_id(), a.epoch()),
    );
    t.band(lanes.a, format!("A holds epoch {}", a.epoch()));
    t.band(lanes.broker, "accepts epoch 0 and up");
    let m = a.send(TOPIC, 0, Bytes::from_static(b"balance=100 (written by A)")).await?;
    say(format!("     A writes \"balance=100\" to {TOPIC}-0              -> offset {}", m.base_offset));
    t.mark(
        lanes.a,
        MarkKind::Write,
        "writes balance=100",
        format!("A writes balance=100 at epoch {}: offset {}", a.epoch(), m.base_offset),
    );
    t.mark(
        lanes.broker,
        MarkKind::Write,
        format!("offset {}: A", m.base_offset),
        format!("appends A's balance=100 at offset {}", m.base_offset),
    );

    // 2. A freezes. Nothing runs: a GC pause, a stopped VM, a partition that heals later.
    say("  2. A freezes (a long GC pause). Its supervisor gives up on it and starts a replacement.");
    t.mark(lanes.a, MarkKind::Pause, "freezes", "A freezes (a long GC pause)");

    // 3. B takes over with the same transactional id.
    let mut b = Producer::init(&bootstrap, ProducerConfig::transactional(TID)).await?;
    say(format!(
        "  3. producer B starts with the same transactional id: producer id {}, epoch {}",
        b.producer_id(),
        b.epoch()
    ));
    if fencing {
        t.mark(
            lanes.broker,
            MarkKind::Fence,
            format!("fence at epoch {}", b.epoch()),
            format!("fence marker at epoch {} (written before B is answered)", b.epoch()),
        );
        t.band(lanes.broker, format!("refuses epoch < {}", b.epoch()));
    }
    t.mark(
        lanes.coordinator,
        MarkKind::Grant,
        format!("B: epoch {}", b.epoch()),
        format!("grants B producer id {} epoch {}", b.producer_id(), b.epoch()),
    );
    t.band(lanes.b, format!("B holds epoch {}", b.epoch()));
    if fencing {
        say("     (before answering B, the coordinator wrote a fence marker at epoch 1 to every partition");
        say("      A had registered - accounts-0 - and it refuses epoch 0 for any other partition)");
    } else {
        say("     (this broker never registers producers with the coordinator, so nothing is fenced)");
    }
    let m = b.send(TOPIC, 0, Bytes::from_static(b"balance=150 (written by B)")).await?;
    say(format!("     B writes \"balance=150\" to {TOPIC}-0              -> offset {}", m.base_offset));
    t.mark(
        lanes.b,
        MarkKind::Write,
        "writes balance=150",
        format!("B writes balance=150 at epoch {}: offset {}", b.epoch(), m.base_offset),
    );
    t.mark(
        lanes.broker,
        MarkKind::Write,
        format!("offset {}: B", m.base_offset),
        format!("appends B's balance=150 at offset {}", m.base_offset),
    );

    // 4. A wakes up, unaware, and carries on.
    say("  4. A wakes up. It still believes it is the writer and carries on:");
    t.mark(lanes.a, MarkKind::Pause, "wakes up", "A wakes up, unaware that B replaced it");
    let late = a.send(TOPIC, 0, Bytes::from_static(b"balance=90 (written by A, stale)")).await;
    picture(t, &lanes, &late, a.epoch(), "accounts-0");
    let zombie_rejected = report(late, "A writes \"balance=90\"  to accounts-0");
    let late = a.send(TOPIC, 1, Bytes::from_static(b"balance=90 (written by A, stale)")).await;
    picture(t, &lanes, &late, a.epoch(), "accounts-1 (never touched)");
    let zombie_rejected_elsewhere = report(late, "A writes \"balance=90\"  to accounts-1 (never touched)");

    // 5. Replay the partition the way any reader would.
    let mut consumer = Consumer::new(&bootstrap, ClientConfig::default());
    let records = consumer.read_to_end(TOPIC, 0, 0).await?;
    say(format!("  5. replaying {TOPIC}-0 (what every reader and every rebuilt cache sees):"));
    for r in &records {
        say(format!("       offset {}  epoch {}  {}", r.offset, r.producer_epoch, String::from_utf8_lossy(&r.value)));
    }
    if fencing {
        say("       (offset 1 is the fence marker: a control batch, never shown as a record)");
    }
    let final_value = records.last().map(|r| String::from_utf8_lossy(&r.value).into_owned()).unwrap_or_default();
    say(format!("     the balance a replay ends with: {final_value}"));
    cluster.shutdown().await;
    Ok(Outcome { zombie_rejected, zombie_rejected_elsewhere, final_value })
}

/// The zombie's late write on the timeline: refused in red with the reason, or landed.
fn picture(
    t: &mut Timeline,
    lanes: &Lanes,
    result: &Result<producer::RecordMetadata, ClientError>,
    epoch: i16,
    partition: &str,
) {
    match result {
        Ok(m) => {
            t.mark(
                lanes.a,
                MarkKind::Write,
                "stale write LANDED",
                format!("A's stale write at epoch {epoch} to {partition} LANDED: offset {}", m.base_offset),
            );
            if partition == "accounts-0" {
                t.mark(
                    lanes.broker,
                    MarkKind::Write,
                    format!("offset {}: A (stale)", m.base_offset),
                    format!("appends A's stale balance=90 at offset {}", m.base_offset),
                );
            }
        }
        Err(e) => t.mark(
            lanes.a,
            MarkKind::Refused,
            format!("REFUSED: epoch {epoch}"),
            format!("A's write at epoch {epoch} to {partition} REFUSED: {e}"),
        ),
    }
}

fn report(result: Result<producer::RecordMetadata, ClientError>, what: &str) -> bool {
    match result {
        Ok(m) => {
            say(format!("     {what} -> LANDED at offset {}", m.base_offset));
            false
        }
        Err(e @ ClientError::Fenced { .. }) => {
            say(format!("     {what} -> REJECTED"));
            say(format!("        {e}"));
            true
        }
        Err(e) => {
            say(format!("     {what} -> failed for another reason: {e}"));
            false
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    say("epochfence: how a zombie producer is fenced");
    say("===========================================");
    say("A producer that pauses and comes back still thinks it owns its transactional id. Every");
    say("InitProducerId bumps the id's epoch; brokers refuse writes carrying an older epoch.");
    say("");
    let timeline_path = match epochfence::timeline_flag() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut with = Timeline::new("With fencing: the zombie's writes bounce off epoch 1");
    let mut without = Timeline::new("Without fencing (--no-fencing): the zombie's stale write lands after B's");
    say("With fencing (the normal broker):");
    let fenced = match story(true, &mut with).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("the fenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    say("");
    say("Without fencing (a broker that ignores producer epochs):");
    let unfenced = match story(false, &mut without).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("the unfenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    say("");
    let kept = fenced.zombie_rejected && fenced.zombie_rejected_elsewhere && fenced.final_value.contains("by B");
    let corrupted = !unfenced.zombie_rejected && unfenced.final_value.contains("by A, stale");
    say("Summary");
    say(format!(
        "  fencing ON : zombie rejected on both partitions = {}, replay ends with B's value = {}",
        fenced.zombie_rejected && fenced.zombie_rejected_elsewhere,
        fenced.final_value.contains("by B")
    ));
    say(format!(
        "  fencing OFF: zombie's stale write landed after B's = {}, replay ends with A's stale value = {}",
        !unfenced.zombie_rejected,
        unfenced.final_value.contains("by A, stale")
    ));
    if let Some(path) = timeline_path {
        let mut page = Page::new(
            "epochfence: a zombie producer, fenced and not",
            "Producer A writes, freezes, and is replaced by B with the same transactional id; then A wakes and \
             writes again. Each row is a participant; bands are the epochs held; red crosses are refused writes.",
        );
        page.push(with);
        page.push(without);
        if let Err(e) = std::fs::write(&path, page.render()) {
            eprintln!("cannot write the timeline to {path}: {e}");
            return ExitCode::FAILURE;
        }
        say(format!("timeline written to {path}"));
    }
    if kept && corrupted {
        say("Both outcomes seen: the epoch check is what stands between B's data and the zombie.");
        ExitCode::SUCCESS
    } else {
        say("UNEXPECTED: the outcomes above are not the ones fencing promises.");
        ExitCode::FAILURE
    }
}
