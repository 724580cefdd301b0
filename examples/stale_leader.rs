//! The stale leader, told twice: a partition leader freezes (a long GC pause), the coordinator
//! elects a replacement under a higher leader epoch, and the old leader wakes still believing
//! it leads. With leader-epoch checks its replication and its acknowledgements are refused and
//! it converges on the new leader's log; without them a follower takes its stale traffic and the
//! replicas diverge. Three brokers and a coordinator in this process, on loopback TCP.
//!
//! `cargo run --release --example stale_leader` exits 0 only if both outcomes were seen.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use net::Connection;
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{ProduceRequest, Request, Response, ACKS_ALL};
use timeline::{LaneId, MarkKind, Page, Timeline};

const TOPIC: &str = "ledger";

fn say(line: impl AsRef<str>) {
    println!("{}", line.as_ref());
}

type Error = Box<dyn std::error::Error>;

struct Outcome {
    /// Attempts by the woken leader to replicate that followers refused by epoch.
    refused: u64,
    /// Whether the woken leader acknowledged the write it took at its old epoch.
    stale_acknowledged: bool,
    /// Whether every replica ended with the same committed log.
    converged: bool,
    /// Whether a follower's log stopped matching the new leader's acknowledged records.
    diverged: bool,
}

async fn story(epoch_checks: bool, t: &mut Timeline) -> Result<Outcome, Error> {
    let brokers: Vec<LaneId> = (1..=3).map(|b| t.lane(format!("broker {b}"))).collect();
    let coordinator = t.lane("coordinator");
    let client = t.lane("client with old metadata");
    let lane = |b: i32| brokers[(b - 1) as usize];
    let c = LocalCluster::start(LocalOptions {
        brokers: 3,
        broker_lease_ms: 500,
        leader_epoch_checks: epoch_checks,
        ..Default::default()
    })
    .await?;
    c.create_topic_replicated(TOPIC, 1, 3).await?;
    let mut writer = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("ledger-writer")).await?;
    for i in 0..4 {
        writer.send(TOPIC, 0, Bytes::from(format!("entry-{i}"))).await?;
    }
    let d = c.wait_for("a leader", Duration::from_secs(5), |d| d.partitions[0].leader_id > 0).await?;
    let (old, old_epoch) = (d.partitions[0].leader_id, d.partitions[0].leader_epoch);
    t.band(lane(old), format!("leads at leader epoch {old_epoch}"));
    t.mark(lane(old), MarkKind::Write, "entries 0-3", "appends entry-0 .. entry-3 (acks=all: every replica has them)");
    say(format!("  1. {TOPIC}-0 has replicas on brokers 1, 2 and 3; broker {old} leads at leader epoch {old_epoch}."));
    say("     4 entries written with acks=all: every in-sync replica has them.");

    c.switches[(old - 1) as usize].freeze();
    say(format!("  2. broker {old} freezes (a long GC pause). Its lease runs out..."));
    t.mark(lane(old), MarkKind::Pause, "freezes", format!("broker {old} freezes (a long GC pause)"));
    let d = c
        .wait_for("a new leader", Duration::from_secs(10), |d| {
            d.partitions[0].leader_id > 0 && d.partitions[0].leader_id != old
        })
        .await?;
    let (new, new_epoch) = (d.partitions[0].leader_id, d.partitions[0].leader_epoch);
    let follower = (1..=3).find(|b| *b != old && *b != new).expect("three brokers");
    say(format!(
        "     ...and the coordinator elects broker {new} at leader epoch {new_epoch} (ISR now {:?}).",
        d.partitions[0].isr
    ));
    t.mark(
        coordinator,
        MarkKind::Election,
        format!("broker {new} at epoch {new_epoch}"),
        format!("broker {old}'s lease ran out: elects broker {new} at leader epoch {new_epoch}"),
    );
    t.band(lane(new), format!("leads at leader epoch {new_epoch}"));
    let mut fresh = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("ledger-writer-2")).await?;
    for i in 4..7 {
        let m = fresh.send(TOPIC, 0, Bytes::from(format!("entry-{i}"))).await?;
        say(format!("     entry-{i} acknowledged by broker {new} at offset {} (acks=all)", m.base_offset));
        t.mark(
            lane(new),
            MarkKind::Write,
            format!("entry-{i}: offset {}", m.base_offset),
            format!(
                "appends entry-{i} at offset {} at leader epoch {new_epoch}, acknowledged (acks=all)",
                m.base_offset
            ),
        );
    }

    say(format!("  3. broker {old} wakes. Before it hears from the coordinator it acts on what it knew:"));
    let stale = Connection::connect(&c.broker_addrs[(old - 1) as usize]).await?;
    let batch = build_batch(
        ProducerStamp { producer_id: writer.producer_id(), producer_epoch: writer.epoch(), base_sequence: 4 },
        false,
        0,
        &[Bytes::from_static(b"stale-entry")],
    );
    let req = Request::Produce(ProduceRequest {
        transactional_id: None,
        topic: TOPIC.into(),
        partition: 0,
        leader_epoch: old_epoch,
        acks: ACKS_ALL,
        records: batch,
    });
    c.switches[(old - 1) as usize].wake_without_heartbeats();
    let pending = tokio::spawn(async move { stale.call(req).await });
    t.mark(lane(old), MarkKind::Pause, "wakes", format!("broker {old} wakes, not yet heard from the coordinator"));
    t.mark(
        client,
        MarkKind::Write,
        format!("stale-entry at epoch {old_epoch}"),
        format!("writes stale-entry to broker {old} at leader epoch {old_epoch}"),
    );
    t.mark(
        lane(old),
        MarkKind::Write,
        "appends stale-entry",
        format!("appends stale-entry at leader epoch {old_epoch} and replicates it to its followers"),
    );
    say(format!("     a client with old metadata writes \"stale-entry\" to broker {old} at leader epoch {old_epoch};"));
    say(format!("     broker {old} appends it and pushes its log to its followers at epoch {old_epoch}."));
    let stats = c.switches[(old - 1) as usize].stats.clone();
    let mut diverged = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !epoch_checks {
            let acked_end = 7;
            if c.replica_bytes(follower, TOPIC, 0, acked_end) != c.replica_bytes(new, TOPIC, 0, acked_end) {
                diverged = true;
                break;
            }
        } else if stats.replication_refused_by_epoch.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    let refused = stats.replication_refused_by_epoch.load(Ordering::Relaxed);
    if epoch_checks {
        t.mark(
            lane(follower),
            MarkKind::Refused,
            format!("REFUSED epoch {old_epoch}"),
            format!(
                "refused {refused} replication attempt(s) from broker {old} at leader epoch {old_epoch} with \
                 FENCED_LEADER_EPOCH: it knows epoch {new_epoch}"
            ),
        );
        say(format!(
            "     its followers refused {refused} replication attempt(s) with FENCED_LEADER_EPOCH: they know epoch {new_epoch}."
        ));
    } else {
        let theirs = c.replica_records(follower, TOPIC, 0);
        t.mark(
            lane(follower),
            MarkKind::Write,
            "took stale log",
            format!("took broker {old}'s replication at leader epoch {old_epoch}: its log now ends with stale-entry"),
        );
        say(format!("     broker {follower} took the stale leader's traffic; its log now reads:"));
        for (o, v) in &theirs {
            say(format!("       offset {o}: {v}"));
        }
    }
    if diverged {
        say(format!(
            "     broker {follower} no longer holds entries 4..6 that broker {new} acknowledged: the replicas diverge,"
        ));
        say(format!("     and if broker {new} failed now those acknowledged entries would be lost."));
    }

    say(format!(
        "  4. broker {old}'s heartbeats resume: it learns epoch {new_epoch} and that it follows broker {new}."
    ));
    c.switches[(old - 1) as usize].thaw();
    t.band(lane(old), format!("follows broker {new} at epoch {new_epoch}"));
    let answer = pending.await?;
    match &answer {
        Ok(Response::Produce(r)) if r.status.is_ok() => t.mark(
            client,
            MarkKind::Write,
            "stale write ACKNOWLEDGED",
            format!("the stale write was acknowledged at offset {}", r.base_offset),
        ),
        Ok(other) => t.mark(
            client,
            MarkKind::Refused,
            "stale write REFUSED",
            format!("the stale write was never acknowledged: {}", other.status()),
        ),
        Err(e) => t.mark(client, MarkKind::Refused, "no answer", format!("the stale write got no answer ({e})")),
    }
    let stale_acknowledged = match answer {
        Ok(Response::Produce(r)) if r.status.is_ok() => {
            say(format!("     the stale write was ACKNOWLEDGED at offset {}", r.base_offset));
            true
        }
        Ok(Response::Produce(r)) => {
            say(format!("     the stale write was never acknowledged: {}", r.status.code));
            false
        }
        Ok(other) => {
            say(format!("     the stale write got {}", other.status()));
            false
        }
        Err(e) => {
            say(format!("     the stale write got no answer ({e})"));
            false
        }
    };
    let converged = c
        .wait_for("convergence", Duration::from_secs(10), |d| {
            let p = &d.partitions[0];
            p.isr.len() == 3
                && p.progress.len() == 3
                && p.progress.iter().all(|g| g.log_end_offset == 7 && g.high_watermark == 7)
        })
        .await
        .is_ok()
        && (1..=3).all(|b| c.replica_bytes(b, TOPIC, 0, 7) == c.replica_bytes(new, TOPIC, 0, 7));
    if converged && !epoch_checks {
        say(format!(
            "  5. broker {new} later re-replicated entries 4..6 to broker {follower}, but for that window the only"
        ));
        say("     other copy of acknowledged entries was gone: one more failure and they were lost for good.");
    } else if converged {
        t.mark(
            lane(old),
            MarkKind::Marker,
            "cuts stale-entry",
            "cuts stale-entry from its log and catches up: all three replicas hold the same 7 entries",
        );
        say(format!(
            "  5. broker {old} cut \"stale-entry\" from its log and caught up: all three replicas hold the same"
        ));
        say("     7 committed entries, byte for byte.");
        let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
        let values: Vec<String> = consumer
            .read_to_end(TOPIC, 0, 0)
            .await?
            .iter()
            .map(|r| String::from_utf8_lossy(&r.value).into_owned())
            .collect();
        say(format!("     a consumer reads: {}", values.join(", ")));
    } else {
        say("  5. the replicas did not converge on one committed log.");
    }
    c.shutdown().await;
    Ok(Outcome { refused, stale_acknowledged, converged, diverged })
}

#[tokio::main]
async fn main() -> ExitCode {
    say("epochfence: how a stale leader is fenced by its leader epoch");
    say("=============================================================");
    say("Every leadership change bumps the partition's leader epoch. Replicas refuse replication from an");
    say("older epoch, and the coordinator refuses ISR changes from one, so a leader that slept through its");
    say("replacement cannot get a write onto any replica that knows better, nor acknowledge it.");
    say("");
    let timeline_path = match epochfence::timeline_flag() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut with = Timeline::new("With leader-epoch checks: the woken leader's replication bounces off the new epoch");
    let mut without =
        Timeline::new("Without them: a follower takes the stale leader's log and drops acknowledged entries");
    say("With leader-epoch checks:");
    let fenced = match story(true, &mut with).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("the fenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    say("");
    say("Without leader-epoch checks on the followers:");
    let unfenced = match story(false, &mut without).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("the unfenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    say("");
    say("Summary");
    say(format!(
        "  checks ON : replication refused by epoch = {}, stale write acknowledged = {}, replicas converged = {}",
        fenced.refused > 0,
        fenced.stale_acknowledged,
        fenced.converged
    ));
    say(format!(
        "  checks OFF: replicas diverged (acknowledged entries missing on a follower) = {}",
        unfenced.diverged
    ));
    if let Some(path) = timeline_path {
        let mut page = Page::new(
            "epochfence: a stale leader, fenced by its leader epoch and not",
            "Broker leads, freezes, and is replaced; then it wakes and acts on what it knew. Each row is a \
             participant; bands are the leader epochs held; red crosses are refused writes.",
        );
        page.push(with);
        page.push(without);
        if let Err(e) = std::fs::write(&path, page.render()) {
            eprintln!("cannot write the timeline to {path}: {e}");
            return ExitCode::FAILURE;
        }
        say(format!("timeline written to {path}"));
    }
    if fenced.refused > 0 && !fenced.stale_acknowledged && fenced.converged && unfenced.diverged {
        say("Both outcomes seen: the leader epoch is what keeps a woken leader from rewriting history.");
        ExitCode::SUCCESS
    } else {
        say("UNEXPECTED: the outcomes above are not the ones leader epochs promise.");
        ExitCode::FAILURE
    }
}
