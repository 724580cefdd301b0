//! Exactly once through a worker replacement: a read-process-write loop consumes orders,
//! transforms them and produces the results inside a transaction. The worker is paused
//! mid-transaction and replaced; the replacement's init aborts the paused worker's open
//! transaction, the paused worker's late writes and commit are refused, and the output topic,
//! read committed, holds each input exactly once.
//!
//! `cargo run --release --example exactly_once` exits 0 only if all of that was seen.

use std::process::ExitCode;

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig};
use timeline::{LaneId, MarkKind, Page, Timeline};

const INPUT: &str = "orders";
const OUTPUT: &str = "invoices";
const TID: &str = "invoicer";
const ORDERS: i64 = 9;
const PER_TXN: usize = 3;

type Error = Box<dyn std::error::Error>;

fn say(line: impl AsRef<str>) {
    println!("{}", line.as_ref());
}

/// A worker: reads orders (read_committed) and writes invoices transactionally. Each invoice
/// names the order offset it came from, so a new worker resumes after the last committed one.
struct Worker {
    name: &'static str,
    lane: LaneId,
    producer: Producer,
    input: Consumer,
    output: Consumer,
}

impl Worker {
    async fn start(name: &'static str, bootstrap: &str, t: &mut Timeline, lanes: &Lanes) -> Result<Worker, Error> {
        let producer = Producer::init(bootstrap, ProducerConfig::transactional(TID)).await?;
        let lane = t.lane_named(name);
        t.mark(
            lanes.coordinator,
            MarkKind::Grant,
            format!("{name}: epoch {}", producer.epoch()),
            format!("grants {name} producer id {} epoch {}", producer.producer_id(), producer.epoch()),
        );
        t.band(lane, format!("{name} holds epoch {}", producer.epoch()));
        say(format!(
            "  {name} starts with transactional id '{TID}': producer id {}, epoch {}",
            producer.producer_id(),
            producer.epoch()
        ));
        Ok(Worker {
            name,
            lane,
            producer,
            input: Consumer::read_committed(bootstrap, ClientConfig::default()),
            output: Consumer::read_committed(bootstrap, ClientConfig::default()),
        })
    }

    /// The first order offset not yet invoiced, from the committed output.
    async fn resume_point(&mut self) -> Result<i64, Error> {
        let done = self.output.read_to_end(OUTPUT, 0, 0).await?;
        Ok(done
            .iter()
            .filter_map(|r| String::from_utf8_lossy(&r.value).rsplit("from=").next()?.parse::<i64>().ok())
            .max()
            .map_or(0, |o| o + 1))
    }

    /// Read up to `n` orders from `from` and write their invoices in the open transaction.
    async fn process(&mut self, from: i64, n: usize, t: &mut Timeline) -> Result<i64, ClientError> {
        let orders = self.input.read_to_end(INPUT, 0, from).await?;
        let mut next = from;
        for order in orders.iter().take(n) {
            let invoice = format!("INVOICE for {}|from={}", String::from_utf8_lossy(&order.value), order.offset);
            let sent = self.producer.send(OUTPUT, 0, Bytes::from(invoice.clone())).await;
            let name = String::from_utf8_lossy(&order.value).into_owned();
            match &sent {
                Ok(m) => t.mark(
                    self.lane,
                    MarkKind::Write,
                    format!("invoice {name}"),
                    format!(
                        "{} writes \"{invoice}\" at epoch {}: offset {}",
                        self.name,
                        self.producer.epoch(),
                        m.base_offset
                    ),
                ),
                Err(e) => t.mark(
                    self.lane,
                    MarkKind::Refused,
                    format!("REFUSED: epoch {}", self.producer.epoch()),
                    format!("{}'s invoice for {name} at epoch {} REFUSED: {e}", self.name, self.producer.epoch()),
                ),
            }
            sent?;
            say(format!("    {} wrote \"{invoice}\"", self.name));
            next = order.offset + 1;
        }
        Ok(next)
    }
}

/// The lanes every worker's marks share.
struct Lanes {
    broker: LaneId,
    coordinator: LaneId,
}

/// A commit on the timeline: the worker's, and the marker on the broker.
fn committed(t: &mut Timeline, lanes: &Lanes, w: &Worker, orders: String) {
    t.mark(w.lane, MarkKind::Marker, "commit", format!("{} commits {orders}", w.name));
    t.mark(lanes.broker, MarkKind::Marker, "commit marker", format!("commit marker at epoch {}", w.producer.epoch()));
}

async fn run(t: &mut Timeline) -> Result<bool, Error> {
    t.lane("worker-1");
    t.lane("worker-2");
    let lanes = Lanes { broker: t.lane("broker 1 (invoices-0)"), coordinator: t.lane("coordinator") };
    let c = LocalCluster::start(LocalOptions::default()).await?;
    c.create_topic(INPUT, 1).await?;
    c.create_topic(OUTPUT, 1).await?;
    let bootstrap = c.coordinator_addr.clone();
    let mut seed = Producer::init(&bootstrap, ProducerConfig::idempotent()).await?;
    for i in 0..ORDERS {
        seed.send(INPUT, 0, Bytes::from(format!("order-{i}"))).await?;
    }
    say(format!("  {ORDERS} orders wait in '{INPUT}'."));

    // Worker 1: one committed transaction, then a pause in the middle of the second.
    let mut w1 = Worker::start("worker-1", &bootstrap, t, &lanes).await?;
    let from = w1.resume_point().await?;
    w1.producer.begin()?;
    let next = w1.process(from, PER_TXN, t).await?;
    w1.producer.commit().await?;
    committed(t, &lanes, &w1, format!("orders {from}..{}", next - 1));
    say(format!("  worker-1 commits its first transaction (orders {from}..{}).", next - 1));
    w1.producer.begin()?;
    let stalled_at = w1.process(next, 2, t).await?;
    t.mark(w1.lane, MarkKind::Pause, "freezes", "worker-1 freezes mid-transaction (2 invoices written, not committed)");
    say("  worker-1 freezes mid-transaction (a long GC pause): 2 invoices written, not committed.");
    say("  The scheduler gives up on it and starts a replacement.");

    // Worker 2 takes over: its init aborts worker-1's open transaction.
    t.mark(
        lanes.broker,
        MarkKind::Fence,
        "abort marker",
        "abort marker at the new epoch: worker-1's open transaction is aborted before worker-2 is answered",
    );
    t.band(lanes.broker, "refuses worker-1's epoch");
    let mut w2 = Worker::start("worker-2", &bootstrap, t, &lanes).await?;
    say("    (its init made the coordinator abort worker-1's open transaction with markers at the new epoch)");
    let d = c.admin().describe().await?;
    let state =
        d.transactional_ids.iter().find(|t| t.transactional_id == TID).map(|t| t.state.clone()).unwrap_or_default();
    let zombie_aborted = state == "CompleteAbort";
    say(format!("    transaction state of '{TID}': {state}"));
    let mut from = w2.resume_point().await?;
    say(format!("  worker-2 resumes after the last committed invoice: order offset {from}."));
    while from < ORDERS {
        w2.producer.begin()?;
        let next = w2.process(from, PER_TXN, t).await?;
        w2.producer.commit().await?;
        committed(t, &lanes, &w2, format!("orders {from}..{}", next - 1));
        say(format!("  worker-2 commits orders {from}..{}.", next - 1));
        from = next;
    }

    // Worker 1 wakes and carries on where it was.
    say("  worker-1 wakes and carries on with its transaction:");
    t.mark(w1.lane, MarkKind::Pause, "wakes", "worker-1 wakes and carries on with its transaction");
    let late_write_refused = match w1.process(stalled_at, 1, t).await {
        Err(e @ ClientError::Fenced { .. }) => {
            say(format!("    its next invoice is REFUSED: {e}"));
            true
        }
        Ok(_) => {
            say("    its next invoice LANDED");
            false
        }
        Err(e) => {
            say(format!("    its next invoice failed: {e}"));
            false
        }
    };
    let late_commit = w1.producer.commit().await;
    match &late_commit {
        Ok(()) => t.mark(w1.lane, MarkKind::Marker, "commit SUCCEEDED", "worker-1's late commit succeeded"),
        Err(e) => t.mark(w1.lane, MarkKind::Refused, "commit REFUSED", format!("worker-1's late commit REFUSED: {e}")),
    }
    let late_commit_refused = match late_commit {
        Err(e @ ClientError::Fenced { .. }) => {
            say(format!("    its commit is REFUSED: {e}"));
            true
        }
        Ok(()) => {
            say("    its commit SUCCEEDED");
            false
        }
        Err(e) => {
            say(format!("    its commit failed: {e}"));
            false
        }
    };

    let mut committed = Consumer::read_committed(&bootstrap, ClientConfig::default());
    let invoices: Vec<String> = committed
        .read_to_end(OUTPUT, 0, 0)
        .await?
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    let mut everything = Consumer::new(&bootstrap, ClientConfig::default());
    let all = everything.read_to_end(OUTPUT, 0, 0).await?;
    say(format!("  '{OUTPUT}' read_committed ({} invoices):", invoices.len()));
    for i in &invoices {
        say(format!("    {i}"));
    }
    say(format!(
        "  '{OUTPUT}' read_uncommitted holds {} records: worker-1's aborted invoices are in the log, never committed.",
        all.len()
    ));
    let expected: Vec<String> = (0..ORDERS).map(|i| format!("INVOICE for order-{i}|from={i}")).collect();
    let exactly_once = invoices == expected;
    say(format!("  each order invoiced exactly once: {exactly_once}"));
    c.shutdown().await;
    Ok(zombie_aborted && late_write_refused && late_commit_refused && exactly_once)
}

#[tokio::main]
async fn main() -> ExitCode {
    say("epochfence: exactly once through a worker replacement");
    say("====================================================");
    say("A read-process-write worker consumes orders and produces invoices inside transactions.");
    say("");
    let timeline_path = match epochfence::timeline_flag() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut t =
        Timeline::new("A worker replaced mid-transaction: its late invoice and commit bounce off the new epoch");
    let ran = run(&mut t).await;
    if let Some(path) = timeline_path {
        let mut page = Page::new(
            "epochfence: exactly once through a worker replacement",
            "A read-process-write worker freezes mid-transaction and is replaced; its open transaction is aborted \
             and its late writes refused. Each row is a participant; bands are the epochs held; red crosses are \
             refused writes.",
        );
        page.push(t);
        if let Err(e) = std::fs::write(&path, page.render()) {
            eprintln!("cannot write the timeline to {path}: {e}");
            return ExitCode::FAILURE;
        }
        say(format!("timeline written to {path}"));
    }
    match ran {
        Ok(true) => {
            say("");
            say("The zombie's transaction was aborted, its late commit refused, and every order invoiced once.");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            say("");
            say("UNEXPECTED: the outcomes above are not the ones transactions promise.");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("the run failed: {e}");
            ExitCode::FAILURE
        }
    }
}
