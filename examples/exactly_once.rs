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
    producer: Producer,
    input: Consumer,
    output: Consumer,
}

impl Worker {
    async fn start(name: &'static str, bootstrap: &str) -> Result<Worker, Error> {
        let producer = Producer::init(bootstrap, ProducerConfig::transactional(TID)).await?;
        say(format!(
            "  {name} starts with transactional id '{TID}': producer id {}, epoch {}",
            producer.producer_id(),
            producer.epoch()
        ));
        Ok(Worker {
            name,
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
    async fn process(&mut self, from: i64, n: usize) -> Result<i64, ClientError> {
        let orders = self.input.read_to_end(INPUT, 0, from).await?;
        let mut next = from;
        for order in orders.iter().take(n) {
            let invoice = format!("INVOICE for {}|from={}", String::from_utf8_lossy(&order.value), order.offset);
            self.producer.send(OUTPUT, 0, Bytes::from(invoice.clone())).await?;
            say(format!("    {} wrote \"{invoice}\"", self.name));
            next = order.offset + 1;
        }
        Ok(next)
    }
}

async fn run() -> Result<bool, Error> {
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
    let mut w1 = Worker::start("worker-1", &bootstrap).await?;
    let from = w1.resume_point().await?;
    w1.producer.begin()?;
    let next = w1.process(from, PER_TXN).await?;
    w1.producer.commit().await?;
    say(format!("  worker-1 commits its first transaction (orders {from}..{}).", next - 1));
    w1.producer.begin()?;
    let stalled_at = w1.process(next, 2).await?;
    say("  worker-1 freezes mid-transaction (a long GC pause): 2 invoices written, not committed.");
    say("  The scheduler gives up on it and starts a replacement.");

    // Worker 2 takes over: its init aborts worker-1's open transaction.
    let mut w2 = Worker::start("worker-2", &bootstrap).await?;
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
        let next = w2.process(from, PER_TXN).await?;
        w2.producer.commit().await?;
        say(format!("  worker-2 commits orders {from}..{}.", next - 1));
        from = next;
    }

    // Worker 1 wakes and carries on where it was.
    say("  worker-1 wakes and carries on with its transaction:");
    let late_write_refused = match w1.process(stalled_at, 1).await {
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
    let late_commit_refused = match w1.producer.commit().await {
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
    match run().await {
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
