//! `bench`: a producer performance tool in the spirit of kafka-producer-perf-test.
//!
//! In one run it drives the same load (record size, batch size, batches in flight, producers,
//! partitions, acks) against three targets on loopback and reports each with records/s, MB/s
//! and HDR-histogram latency percentiles:
//! - `loopback`: a trivial server speaking the same framing that acknowledges every request
//!   without doing anything else: the ceiling of this machine for this load;
//! - `fenced`: an in-process cluster with producer fencing on (the real broker);
//! - `unfenced`: the same cluster with fencing off, so the gate's cost is a ratio.
//!
//! Other modes: `replication` (acks=all on three replicas against acks=leader on one broker,
//! alternating, as paired ratios), `inits` (durable InitProducerId grants per second) and
//! `recovery` (how fast a partition reopens), `authorizer` (idempotent producers over SASL through
//! the Kafka listener with the coordinator's authorizer on and `--acls` ACLs in place, against
//! the authorizer off, alternating, as paired ratios), `logins` (SCRAM logins per second, producers
//! during a storm of failing logins, the time a removed ACL takes to refuse: `bench/logins.rs`),
//! `reassign` (an online move of a partition holding `--log-mib`, and the produce throughput
//! meanwhile: `bench/reassign.rs`).
//! `--protocol kafka` drives the fenced cluster
//! through its Kafka listener (the producer crate's Kafka client) instead of the own protocol,
//! `--protocol both` drives it both ways in the same run, alternating, and reports the Kafka
//! path's throughput as a fraction of the own path's.
//!
//! `cargo run --release --bin bench -- --help`; docs/BENCHMARKS.md records runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use epochfence::{LocalCluster, LocalOptions};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use hdrhistogram::Histogram;
use net::{Connection, ServerLimits};
use producer::kafka::KafkaConnection;
use producer::{Client, ClientConfig, Producer, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{ProduceRequest, ProduceResponse, Request, Response, Status, ACKS_ALL, ACKS_LEADER};

#[path = "bench/kip848.rs"]
mod kip848;
#[path = "bench/logins.rs"]
mod logins;
#[path = "bench/reassign.rs"]
mod reassign;

/// glibc's allocator hands large freed buffers back to the kernel and faults them in again on
/// the next frame (worst when one thread frees what another allocated), which slowed and
/// scattered the figures; mimalloc keeps them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug, Clone)]
#[command(about = "Producer throughput and latency against a loopback ceiling, with and without fencing")]
struct Args {
    /// Which targets to run: all (loopback, fenced, unfenced), one of them, `inits`
    /// (InitProducerId grants/s from `--clients` concurrent clients, each grant fsynced), or
    /// `recovery` (how long a partition with `--log-mib` of log takes to open after a crash, after
    /// a clean shutdown, and with no snapshots or indexes), or `replication` (acks=all on 3
    /// brokers with 3 replicas against acks=leader on 1, fenced, alternating, as paired ratios).
    /// `logins`: SCRAM-SHA-512 logins per second from `--clients` clients, idempotent producers'
    /// throughput during a storm of failing logins from `--storm` clients against none (paired
    /// runs, `--repeat`), and the time a removed ACL takes to refuse writes. `reassign`: the
    /// time an online move of a partition holding `--log-mib` takes, and the produce throughput
    /// before and during it (`bench/reassign.rs`). `kip848`: steady ConsumerGroupHeartbeats per
    /// second from 1,000 members in 100 groups over `--clients` connections, and the time from a
    /// member's death to its partitions' new owner, `--repeat` times (`bench/kip848.rs`).
    #[arg(long, default_value = "all", value_parser = ["all", "loopback", "fenced", "unfenced", "inits", "recovery", "replication", "authorizer", "logins", "reassign", "kip848"])]
    mode: String,
    /// Clients failing logins in `--mode logins`'s storms.
    #[arg(long, default_value_t = 32)]
    storm: usize,
    /// The brokers' `--sasl-plain-checks-per-s-max` in `--mode logins` and `authorizer` (a large
    /// value: no budget, to see what it saves).
    #[arg(long, default_value_t = protocol::sasl::PLAIN_CHECKS_PER_S_MAX_DEFAULT)]
    plain_checks_per_s_max: u32,
    /// ACLs in place for `--mode authorizer` (the producers' own two among them; the others
    /// name other principals and topics, literal and prefixed, as a shared cluster's would).
    #[arg(long, default_value_t = 1_000)]
    acls: usize,
    /// Log size for `--mode recovery` and `--mode reassign`, in MiB.
    #[arg(long, default_value_t = 1024)]
    log_mib: u64,
    /// Segment size for `--mode recovery`, in bytes.
    #[arg(long, default_value_t = broker::log::SEGMENT_BYTES_DEFAULT)]
    segment_bytes: u64,
    /// The brokers' disk-block reservation ahead of each active segment's end, in bytes (0:
    /// off), as the broker's `--preallocate-bytes`.
    #[arg(long, default_value_t = broker::log::PREALLOCATE_BYTES_DEFAULT)]
    preallocate_bytes: u64,
    /// Replicate requests in flight to one follower for one partition, as the broker's
    /// `--replication-inflight-max`.
    #[arg(long, default_value_t = broker::server::REPLICATION_INFLIGHT_MAX_DEFAULT as u64, value_parser = clap::value_parser!(u64).range(1..1025))]
    replication_inflight_max: u64,
    /// Bytes of each partition's newest batches a leader keeps in memory to replicate from,
    /// as the broker's `--replication-cache-bytes-max` (0: read the log file back).
    #[arg(long, default_value_t = broker::log::REPLICATION_CACHE_BYTES_MAX_DEFAULT)]
    replication_cache_bytes_max: usize,
    /// Directory for `--mode recovery`'s log, on the disk to measure (default: a temporary
    /// directory under the system's).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// `--mode recovery`: drop the page cache before each open (needs root), so the log is read
    /// from disk.
    #[arg(long)]
    drop_caches: bool,
    /// Concurrent clients for `--mode inits` (and Kafka connections for `--mode kip848`).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Grants per client for `--mode inits`.
    #[arg(long, default_value_t = 500)]
    inits_per_client: usize,
    /// `--mode inits`: also measure a coordinator replica on this etcd (client URLs), after the
    /// local journal, in the same run. Needs `--features etcd`.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// Records per target (over all producers).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Run each target for this long instead of a record count (0: use --records).
    #[arg(long, default_value_t = 0)]
    duration_ms: u64,
    /// Records per batch.
    #[arg(long, default_value_t = 500)]
    batch_records: usize,
    /// Batches each producer keeps in flight (pipelined on its connection).
    #[arg(long, default_value_t = 8)]
    inflight: usize,
    /// Run the producers on a runtime of their own with this many threads, apart from the
    /// brokers' (as kafka-producer-perf-test is a process apart); 0: on the brokers' runtime.
    /// On this VM a client thread of its own makes round trips slower (a cross-thread wake-up
    /// per answer) and large batches no faster: docs/BENCHMARKS.md, "A client thread of its own".
    #[arg(long, default_value_t = 0)]
    client_threads: usize,
    /// Concurrent producers.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Partitions (each producer writes to all of them, round-robin by batch).
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Brokers in the cluster.
    #[arg(long, default_value_t = 1)]
    brokers: usize,
    /// Replicas per partition.
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// all or leader.
    #[arg(long, default_value = "leader", value_parser = ["all", "leader"])]
    acks: String,
    /// The brokers' fsync policy: always, never or interval-ms=N.
    #[arg(long, default_value = "never")]
    fsync: broker::server::FsyncPolicy,
    /// Transactional producers: commit a transaction every N batches (0: idempotent only).
    #[arg(long, default_value_t = 0)]
    txn_batches: u64,
    /// Offered load in records/s over all producers (0: as fast as acknowledgements allow).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// With `--rate`: how long a batch waits for more records before it goes anyway, in ms
    /// (Kafka's `linger.ms`). Records arrive evenly at the rate, so each batch holds what
    /// arrives in that time (at most `--batch-records`), and latency counts from the arrival of
    /// a batch's first record, the wait included (as if each batch went when its linger ran
    /// out). Without it a batch waits until it is full and latency counts from its send.
    #[arg(long, requires = "rate")]
    linger_ms: Option<u64>,
    /// Repeat the run this many times, alternating which of fenced and unfenced goes first, and
    /// report per target the run with the median throughput and the median fenced/unfenced ratio.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Which wire the fenced cluster is driven over: `own` (epochfence's protocol), `kafka`
    /// (the brokers' Kafka listener, Produce v9), or `both`, alternating in each repeat, with
    /// the Kafka path's throughput reported as a fraction of the own path's.
    #[arg(long, default_value = "own", value_parser = ["own", "kafka", "both"])]
    protocol: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Figures {
    records: u64,
    seconds: f64,
    records_per_s: f64,
    mb_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    /// The machine's CPU busy over the run, of all its cores, kernel threads (softirq, writeback)
    /// and anything else running on the machine included: near 100 a run is bound by CPU, well
    /// below it by waiting. `None` where `/proc/stat` cannot be read or the run was shorter
    /// than its tick.
    cpu_busy_pct: Option<f64>,
    /// The machine's CPU time per record acknowledged, in ns: all cores x `cpu_busy_pct` /
    /// records per second. When a run is bound by CPU, throughput is the inverse of this.
    cpu_ns_per_record: Option<f64>,
}

/// Jiffies the machine's cores spent busy and in all, from `/proc/stat`'s first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

impl CpuTimes {
    /// Parse `/proc/stat`: busy is user, nice, system, irq and softirq; the total adds idle,
    /// iowait and steal (time the hypervisor gave to others).
    fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().next()?;
        let mut fields = line.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let v: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
        let [user, nice, system, idle, iowait, irq, softirq, steal] = v.try_into().ok()?;
        let sum = |xs: &[u64]| xs.iter().try_fold(0u64, |a, x| a.checked_add(*x));
        let busy = sum(&[user, nice, system, irq, softirq])?;
        Some(CpuTimes { busy, total: sum(&[busy, idle, iowait, steal])? })
    }

    fn now() -> Option<CpuTimes> {
        CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Percent busy between `self` and `later`, at most 100 (a kernel's iowait count may go
    /// backwards between two reads).
    fn busy_pct(self, later: CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|t| *t > 0)?;
        Some((100.0 * later.busy.saturating_sub(self.busy) as f64 / total as f64).min(100.0))
    }
}

/// Records in a batch that lingers `linger_ms` for records arriving evenly at `--rate` over all
/// producers: those that arrive meanwhile, its first one included, at most `--batch-records`.
fn lingered_batch_records(args: &Args, linger_ms: u64) -> usize {
    let per_producer = args.rate as f64 / args.producers.max(1) as f64;
    let arrived = (per_producer * linger_ms as f64 / 1000.0).floor() as usize + 1;
    arrived.clamp(1, args.batch_records.max(1))
}

/// A template batch whose producer fields, sequence and CRC are patched per send.
struct BatchTemplate {
    bytes: Vec<u8>,
    records: i32,
}

impl BatchTemplate {
    fn new(record_bytes: usize, records: usize, transactional: bool) -> BatchTemplate {
        let values: Vec<Bytes> = (0..records).map(|_| Bytes::from(vec![b'x'; record_bytes])).collect();
        let b = build_batch(
            ProducerStamp { producer_id: 0, producer_epoch: 0, base_sequence: 0 },
            transactional,
            0,
            &values,
        );
        BatchTemplate { bytes: b.to_vec(), records: records as i32 }
    }

    fn stamp(&self, producer_id: i64, epoch: i16, sequence: i32) -> Bytes {
        let mut b = self.bytes.clone();
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&sequence.to_be_bytes());
        let crc = crc32c_of(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }
}

fn crc32c_of(b: &[u8]) -> u32 {
    // The batch module's CRC is the same CRC32C the broker checks.
    protocol::batch::crc32c(b)
}

/// A connection to a partition's leader, over one of the two wires.
#[derive(Clone)]
enum Wire {
    Own(Connection),
    /// With the Produce version agreed on.
    Kafka(KafkaConnection, i16),
}

/// One producer's route to a partition: the connection to its leader and its leader epoch.
#[derive(Clone)]
struct Route {
    wire: Wire,
    leader_epoch: i32,
}

/// A produce request's answer, to await: success, or why not.
type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

impl Route {
    /// Queue a produce of `batch` to `partition` now (requests go out in the order queued) and
    /// return its answer to await later.
    async fn submit(&self, partition: i32, acks: i8, batch: Bytes) -> Result<Answer, String> {
        match &self.wire {
            Wire::Own(conn) => {
                let req = Request::Produce(ProduceRequest {
                    transactional_id: None,
                    topic: "bench".into(),
                    partition,
                    leader_epoch: self.leader_epoch,
                    acks,
                    records: batch,
                });
                let answer = conn.submit(req).await.map_err(|e| format!("produce failed: {e}"))?;
                Ok(Box::pin(async move {
                    match answer.await {
                        Ok(Response::Produce(r)) if r.status.is_ok() => Ok(()),
                        Ok(other) => Err(format!("produce refused: {}", other.status())),
                        Err(e) => Err(format!("produce failed: {e}")),
                    }
                }))
            }
            Wire::Kafka(conn, version) => {
                use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
                let req = kafka_protocol::messages::ProduceRequest::default()
                    .with_acks(i16::from(acks))
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(kafka_protocol::messages::TopicName(
                            kafka_protocol::protocol::StrBytes::from_static_str("bench"),
                        ))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch))])]);
                let answer = conn.submit(&req, *version).await.map_err(|e| format!("produce failed: {e}"))?;
                Ok(Box::pin(async move {
                    let r = answer.await.map_err(|e| format!("produce failed: {e}"))?;
                    let code =
                        r.responses.first().and_then(|t| t.partition_responses.first()).map_or(-1, |p| p.error_code);
                    if code == 0 {
                        Ok(())
                    } else {
                        Err(format!("produce refused: Kafka error {code}"))
                    }
                }))
            }
        }
    }
}

/// Commit the open transaction of `tid`; returns the (producer id, epoch) to continue with.
async fn commit(coordinator: &Connection, tid: &str, producer_id: i64, epoch: i16) -> Result<(i64, i16), String> {
    let req = Request::EndTxn(protocol::EndTxnRequest {
        transactional_id: tid.to_string(),
        producer_id,
        producer_epoch: epoch,
        commit: true,
        bump_epoch: true,
    });
    match coordinator.call(req).await {
        Ok(Response::EndTxn(r)) if r.status.is_ok() => Ok((r.producer_id, r.producer_epoch)),
        other => Err(format!("commit failed: {other:?}")),
    }
}

async fn drive(
    args: &Args,
    routes: Vec<Vec<Route>>,
    ids: Vec<(i64, i16)>,
    txns: Vec<Option<(Connection, String)>>,
    template: Arc<BatchTemplate>,
) -> Result<Figures, String> {
    let acks = if args.acks == "all" { ACKS_ALL } else { ACKS_LEADER };
    let batches_total = args.records.div_ceil(args.batch_records as u64);
    // With a linger, how long a batch's first record waited for its last one.
    let filling = match (args.linger_ms, args.rate) {
        (Some(_), rate) if rate > 0 => {
            Duration::from_secs_f64((template.records - 1) as f64 * args.producers as f64 / rate as f64)
        }
        _ => Duration::ZERO,
    };
    // A bar on a terminal (plain lines otherwise), nothing with --json.
    let total = (args.duration_ms == 0).then_some(args.records);
    let progress = Arc::new(net::progress::Progress::new("bench", total, "records", args.json));
    let started = Instant::now();
    let cpu_before = CpuTimes::now();
    // With a duration, producers send until it is over rather than a fixed count.
    let deadline = (args.duration_ms > 0).then(|| started + Duration::from_millis(args.duration_ms));
    let per_producer = if deadline.is_some() { u64::MAX } else { batches_total.div_ceil(args.producers as u64) };
    let mut tasks = Vec::new();
    for (p, routes) in routes.into_iter().enumerate() {
        let (mut producer_id, mut epoch) = ids[p];
        let txn = txns.get(p).cloned().flatten();
        let txn_batches = args.txn_batches;
        let template = template.clone();
        let inflight = args.inflight;
        // With an offered rate, batch i of this producer is due at start + i * interval.
        let interval = (args.rate > 0)
            .then(|| Duration::from_secs_f64(template.records as f64 * args.producers as f64 / args.rate as f64));
        let start = Instant::now();
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
            let mut sequences = vec![0i32; routes.len()];
            let mut window = FuturesOrdered::new();
            let mut sent = 0u64;
            let mut records = 0u64;
            let mut committed_at: Vec<u64> = Vec::new();
            loop {
                while sent < per_producer && window.len() < inflight && deadline.is_none_or(|d| Instant::now() < d) {
                    // A transaction boundary: every answer in, then commit, then a new epoch.
                    if let Some((coordinator, tid)) = &txn {
                        if sent > 0 && sent.is_multiple_of(txn_batches) && !committed_at.contains(&sent) {
                            if !window.is_empty() {
                                break;
                            }
                            (producer_id, epoch) = commit(coordinator, tid, producer_id, epoch).await?;
                            sequences.iter_mut().for_each(|s| *s = 0);
                            committed_at.push(sent);
                        }
                    }
                    if let Some(due) = interval.map(|interval| start + interval * sent as u32) {
                        if due > Instant::now() {
                            if window.is_empty() {
                                tokio::time::sleep_until(due.into()).await;
                            } else {
                                break; // collect an answer first; come back when it is due
                            }
                        }
                    }
                    let part = (sent as usize) % routes.len();
                    let route = routes[part].clone();
                    let batch = template.stamp(producer_id, epoch, sequences[part]);
                    sequences[part] += template.records;
                    // Latency counts from the send; with a linger, from when the batch's first
                    // record arrived had the batch gone when its linger ran out (this tool's
                    // timer wakes up to a millisecond late, which is not the broker's doing).
                    let now = Instant::now();
                    let at = now.checked_sub(filling).unwrap_or(now);
                    // Queue it now, so batches go out in sequence order; await answers later.
                    let answer = route.submit(part as i32, acks, batch).await?;
                    window.push_back(async move { (at, answer.await) });
                    sent += 1;
                }
                let Some((at, answer)) = window.next().await else {
                    if let Some((coordinator, tid)) = &txn {
                        commit(coordinator, tid, producer_id, epoch).await?;
                    }
                    break;
                };
                answer?;
                hist.record(at.elapsed().as_micros() as u64).expect("in range");
                records += template.records as u64;
                progress.inc(template.records as u64);
            }
            Ok::<_, String>((hist, records))
        }));
    }
    let mut hist = Histogram::<u64>::new(3).expect("valid");
    let mut records = 0;
    for t in tasks {
        let (h, r) = t.await.map_err(|e| e.to_string())??;
        hist.add(h).map_err(|e| e.to_string())?;
        records += r;
    }
    let seconds = started.elapsed().as_secs_f64();
    progress.finish();
    let cpu_busy_pct = cpu_before.zip(CpuTimes::now()).and_then(|(before, after)| before.busy_pct(after));
    let records_per_s = records as f64 / seconds;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_ns_per_record =
        cpu_busy_pct.filter(|_| records_per_s > 0.0).map(|pct| cores * pct / 100.0 / records_per_s * 1e9);
    Ok(Figures {
        records,
        seconds,
        records_per_s,
        mb_per_s: (records as f64 * args.record_bytes as f64) / seconds / 1e6,
        p50_us: hist.value_at_quantile(0.50),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        cpu_busy_pct,
        cpu_ns_per_record,
    })
}

/// Runs the producers' side of a measurement: with `threads` > 0 on a runtime of its own, on
/// threads of its own (one thread: a current-thread runtime), as kafka-producer-perf-test is a
/// process apart from the brokers; with 0 on the brokers' runtime, where the scheduler puts a
/// client task and the server task it talks to on one worker thread or on two by chance.
async fn on_client<T: Send + 'static>(
    threads: usize,
    work: impl std::future::Future<Output = Result<T, String>> + Send + 'static,
) -> Result<T, String> {
    if threads == 0 {
        return work.await;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || {
            let runtime = if threads == 1 {
                tokio::runtime::Builder::new_current_thread().enable_all().build()
            } else {
                tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
            };
            let out = match runtime {
                Ok(runtime) => runtime.block_on(work),
                Err(e) => Err(format!("client runtime: {e}")),
            };
            let _ = tx.send(out);
        })
        .map_err(|e| format!("client thread: {e}"))?;
    rx.await.map_err(|_| "the client thread panicked".to_string())?
}

/// The ceiling: a server with the same framing that acknowledges every produce at once.
async fn loopback(args: &Args, template: Arc<BatchTemplate>) -> Result<Figures, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    let handler: net::Handler = Arc::new(|_req| {
        net::Handled::answer(Response::Produce(ProduceResponse {
            status: Status::ok(),
            base_offset: 0,
            log_end_offset: 0,
            current_producer_epoch: 0,
            current_leader_epoch: 0,
            log_append_time_ms: -1,
        }))
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(net::serve(listener, handler, ServerLimits::default(), async {
        let _ = stopped.await;
    }));
    let client_args = args.clone();
    let figures = on_client(args.client_threads, async move {
        let args = &client_args;
        let mut routes = Vec::new();
        for _ in 0..args.producers {
            let conn = Connection::connect(&addr).await.map_err(|e| e.to_string())?;
            routes
                .push((0..args.partitions).map(|_| Route { wire: Wire::Own(conn.clone()), leader_epoch: 0 }).collect());
        }
        let ids = (0..args.producers).map(|p| (p as i64, 0)).collect();
        drive(args, routes, ids, Vec::new(), template).await
    })
    .await;
    let _ = stop.send(());
    let _ = server.await;
    figures
}

/// The real broker, with producer fencing on or off, driven over the own protocol or (`kafka`)
/// its Kafka listener.
async fn cluster(args: &Args, template: Arc<BatchTemplate>, fencing: bool, kafka: bool) -> Result<Figures, String> {
    let log = broker::log::LogConfig {
        preallocate_bytes: args.preallocate_bytes,
        replication_cache_bytes_max: args.replication_cache_bytes_max,
        ..Default::default()
    };
    let opts = LocalOptions {
        brokers: args.brokers,
        fencing,
        fsync: args.fsync,
        secured: false,
        log,
        replication_inflight_max: args.replication_inflight_max as usize,
        kafka,
        ..Default::default()
    };
    let c = LocalCluster::start(opts).await.map_err(|e| e.to_string())?;
    let kafka_addrs = c.kafka_addrs.clone();
    c.create_topic_replicated("bench", args.partitions, args.replicas).await.map_err(|e| e.to_string())?;
    let coordinator = c.coordinator_addr.clone();
    let client_args = args.clone();
    let figures = on_client(args.client_threads, async move {
        let args = &client_args;
        let mut routes = Vec::new();
        let mut ids = Vec::new();
        let mut txns = Vec::new();
        let mut client = Client::new(&coordinator, ClientConfig::default());
        for p in 0..args.producers {
            let producer = Producer::init(&coordinator, ProducerConfig::transactional(format!("bench-{p}")))
                .await
                .map_err(|e| e.to_string())?;
            ids.push((producer.producer_id(), producer.epoch()));
            txns.push(if args.txn_batches > 0 {
                Some((Connection::connect(&coordinator).await.map_err(|e| e.to_string())?, format!("bench-{p}")))
            } else {
                None
            });
            let mut mine = Vec::new();
            let mut conns: std::collections::HashMap<String, Wire> = Default::default();
            for part in 0..args.partitions {
                let leader = loop {
                    // Leaders are learnt through heartbeats: wait (bounded) until each partition has one.
                    match client.leader_or_refresh("bench", part).await {
                        Ok(l) if l.broker_id > 0 => break l,
                        _ => {
                            client.invalidate("bench");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                };
                let wire = match conns.get(&leader.addr) {
                    Some(w) => w.clone(),
                    None => {
                        let w = if kafka {
                            let addr = &kafka_addrs[(leader.broker_id - 1) as usize];
                            let c = KafkaConnection::connect(addr, None, Duration::from_secs(10))
                                .await
                                .map_err(|e| e.to_string())?;
                            let version = c
                                .version(kafka_protocol::messages::ApiKey::Produce, (3, 9))
                                .map_err(|e| e.to_string())?;
                            Wire::Kafka(c, version)
                        } else {
                            Wire::Own(Connection::connect(&leader.addr).await.map_err(|e| e.to_string())?)
                        };
                        conns.insert(leader.addr.clone(), w.clone());
                        w
                    }
                };
                mine.push(Route { wire, leader_epoch: leader.leader_epoch });
            }
            routes.push(mine);
        }
        // The broker learns its leaderships through heartbeats; one small write per partition
        // waits for that, outside the measurement.
        warm_up(&routes, &ids, args.record_bytes).await?;
        drive(args, routes, ids, txns, template).await
    })
    .await;
    c.shutdown().await;
    figures
}

/// One `--mode authorizer` run: a cluster whose Kafka listeners take SCRAM-SHA-512 logins
/// (SASL_PLAINTEXT), with the coordinator's authorizer on and `--acls` ACLs in place, or off;
/// idempotent producers (`User:bench`) through the Kafka listener, their producer ids bound to
/// the principal when it is on. With `storm`, `--storm` clients fail logins on other connections
/// to the first broker meanwhile (`--mode logins`); also returns how many they failed.
async fn authorizer_cluster(
    args: &Args,
    template: Arc<BatchTemplate>,
    on: bool,
    storm: Option<logins::Storm>,
) -> Result<(Figures, u64), String> {
    use producer::kafka::{KafkaClient, KafkaProducer};
    use protocol::acl::{AclBinding, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};
    let log = broker::log::LogConfig { preallocate_bytes: args.preallocate_bytes, ..Default::default() };
    let opts = LocalOptions {
        brokers: args.brokers,
        fencing: true,
        fsync: args.fsync,
        secured: true,
        log,
        kafka: true,
        sasl_users: vec![("bench".into(), "bench-pw".into())],
        sasl_plain_checks_per_s_max: args.plain_checks_per_s_max,
        authorizer: on.then(coordinator::acls::AuthorizerConfig::default),
        ..Default::default()
    };
    let c = LocalCluster::start(opts).await.map_err(|e| e.to_string())?;
    c.create_topic_replicated("bench", args.partitions, args.replicas).await.map_err(|e| e.to_string())?;
    if on {
        let acl = |principal: String, resource_type, name: String, pattern, operation| AclBinding {
            resource_type,
            name,
            pattern,
            principal,
            host: "*".into(),
            operation,
            permission: Permission::Allow,
        };
        let mut create = vec![
            acl("User:bench".into(), ResourceType::Topic, "bench".into(), PatternType::Literal, Operation::Write),
            acl(
                "User:bench".into(),
                ResourceType::Cluster,
                CLUSTER_NAME.into(),
                PatternType::Literal,
                Operation::IdempotentWrite,
            ),
        ];
        for i in 0..args.acls.saturating_sub(2) {
            let pattern = if i % 2 == 0 { PatternType::Literal } else { PatternType::Prefixed };
            create.push(acl(
                format!("User:u{i}"),
                ResourceType::Topic,
                format!("other-{i}"),
                pattern,
                Operation::Write,
            ));
        }
        let r =
            c.admin().acls(protocol::AclsRequest { create, delete: Vec::new() }).await.map_err(|e| e.to_string())?;
        if let Some(s) = r.created.iter().find(|s| !s.is_ok()) {
            return Err(format!("an ACL was refused: {s}"));
        }
    }
    let login = producer::SaslLogin {
        mechanism: protocol::sasl::Mechanism::Scram(protocol::sasl::ScramMechanism::Sha512),
        user: "bench".into(),
        password: "bench-pw".into(),
    };
    let config = ClientConfig { sasl: Some(login), ..c.client_config() };
    let bootstrap = c.kafka_bootstrap();
    let storm_addr = c.kafka_addrs[0].clone();
    let client_args = args.clone();
    let figures = on_client(args.client_threads, async move {
        let args = &client_args;
        let mut routes = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..args.producers {
            // The brokers hear of the ACLs within a heartbeat: an init refused until then.
            let mut tries = 0;
            let p = loop {
                let pc = ProducerConfig { client: config.clone(), ..ProducerConfig::idempotent() };
                match KafkaProducer::init(&bootstrap, pc).await {
                    Ok(p) => break p,
                    Err(e) if tries < 500 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => return Err(format!("no producer id: {e}")),
                }
            };
            ids.push((p.producer_id(), p.epoch()));
            let mut client = KafkaClient::new(&bootstrap, config.clone());
            let mut mine = Vec::new();
            for part in 0..args.partitions {
                let (conn, leader) = client.leader("bench", part).await.map_err(|e| e.to_string())?;
                let version =
                    conn.version(kafka_protocol::messages::ApiKey::Produce, (3, 9)).map_err(|e| e.to_string())?;
                mine.push(Route { wire: Wire::Kafka(conn, version), leader_epoch: leader.leader_epoch });
            }
            routes.push(mine);
        }
        warm_up(&routes, &ids, args.record_bytes).await?;
        let txns = vec![None; args.producers];
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let attempts = storm.map(|kind| logins::start_storm(storm_addr, kind, args.storm, stop.clone()));
        let figures = drive(args, routes, ids, txns, template).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        figures.map(|f| (f, attempts.map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))))
    })
    .await;
    c.shutdown().await;
    figures
}

/// `--mode authorizer`: the authorizer off and on, alternating which goes first, `--repeat`
/// times; the median run of each and the median of the paired on/off ratios.
async fn authorizer(args: &Args) -> Result<(), String> {
    // Idempotent batches: the producer ids are idempotent producers' (no transactional id).
    let template = Arc::new(BatchTemplate::new(args.record_bytes, args.batch_records, false));
    let mut off_runs = Vec::new();
    let mut on_runs = Vec::new();
    let mut ratios = Vec::new();
    for rep in 0..args.repeat.max(1) {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        let mut pair = [None, None];
        for on in order {
            let (f, _) = authorizer_cluster(args, template.clone(), on, None).await?;
            pair[usize::from(on)] = Some(f);
        }
        let [Some(off), Some(on)] = pair else { unreachable!("both ran") };
        ratios.push(on.records_per_s / off.records_per_s);
        off_runs.push(off);
        on_runs.push(on);
    }
    let (off, on) = (median_run(off_runs).expect("runs"), median_run(on_runs).expect("runs"));
    let ratio = median_ratio(&mut ratios.clone());
    if args.json {
        let v = serde_json::json!({
            "config": {"record_bytes": args.record_bytes, "records": args.records, "batch_records": args.batch_records,
                       "inflight": args.inflight, "producers": args.producers, "partitions": args.partitions,
                       "acks": args.acks, "fsync": format!("{:?}", args.fsync), "acls": args.acls},
            "authorizer_off": off, "authorizer_on": on,
            "on_over_off": ratio, "on_over_off_each_repeat": ratios,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json serialises"));
    } else {
        println!("SASL_PLAINTEXT (SCRAM-SHA-512), Kafka listener, idempotent producers, {} ACLs when on", args.acls);
        println!("{}", row("authorizer off", &off, None));
        println!("{}", row("authorizer on", &on, None));
        if let Some(r) = ratio {
            println!(
                "authorizer on / off: {:.1}% (median of {} paired runs: {:?})",
                r * 100.0,
                ratios.len(),
                ratios.iter().map(|r| format!("{:.1}%", r * 100.0)).collect::<Vec<_>>()
            );
        }
    }
    Ok(())
}

async fn warm_up(routes: &[Vec<Route>], ids: &[(i64, i16)], record_bytes: usize) -> Result<(), String> {
    let _ = record_bytes;
    for (p, rs) in routes.iter().enumerate() {
        for (part, route) in rs.iter().enumerate() {
            for _ in 0..500 {
                // An empty-producer batch: no sequence to disturb.
                let probe = build_batch(
                    ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
                    false,
                    0,
                    &[Bytes::from_static(b"warm-up")],
                );
                let answered = match route.submit(part as i32, ACKS_LEADER, probe).await {
                    Ok(answer) => answer.await,
                    Err(e) => Err(e),
                };
                match answered {
                    Ok(()) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
            let _ = ids[p];
        }
    }
    Ok(())
}

fn row(name: &str, f: &Figures, ceiling: Option<&Figures>) -> String {
    let vs = ceiling.map_or("-".to_string(), |c| format!("{:.1}%", 100.0 * f.records_per_s / c.records_per_s));
    let cpu = f.cpu_busy_pct.map_or("-".to_string(), |c| format!("{c:.0}"));
    let ns = f.cpu_ns_per_record.map_or("-".to_string(), |n| format!("{n:.0}"));
    format!(
        "{name:<10} {:>12.0} {:>8.1} {:>8} {:>8} {:>9} {:>8} {:>5} {:>9} {:>12}",
        f.records_per_s, f.mb_per_s, f.p50_us, f.p99_us, f.p999_us, f.max_us, cpu, ns, vs
    )
}

/// InitProducerId throughput: `clients` connections, each granting `per_client` epochs to its
/// own transactional id, one after another; every grant is in the journal (fsynced, or in etcd)
/// before it is answered, and concurrent grants share flushes (one etcd txn per group commit).
/// With `--etcd-endpoints`, the local journal first, then a coordinator replica on etcd.
async fn inits(args: &Args) -> Result<(), String> {
    if !args.etcd_endpoints.is_empty() && !cfg!(feature = "etcd") {
        return Err("--etcd-endpoints needs a bench built with `--features etcd` (scripts/etcd installs protoc)".into());
    }
    let c = LocalCluster::start(LocalOptions { brokers: 0, secured: false, ..Default::default() })
        .await
        .map_err(|e| e.to_string())?;
    let local = grant_load(&c.coordinator_addr, args).await?;
    c.shutdown().await;
    report("local journal", args, &local);
    #[cfg(feature = "etcd")]
    if !args.etcd_endpoints.is_empty() {
        let (addr, stop, _dir) = etcd_replica(&args.etcd_endpoints).await?;
        let on_etcd = grant_load(&addr, args).await?;
        let _ = stop.send(());
        report("etcd", args, &on_etcd);
        if args.json {
            let both = serde_json::json!({ "local": local, "etcd": on_etcd });
            println!("{}", serde_json::to_string_pretty(&both).expect("json serialises"));
        }
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&local).expect("json serialises"));
    }
    Ok(())
}

/// Run `--clients` x `--inits-per-client` grants against the coordinator at `addr`.
async fn grant_load(addr: &str, args: &Args) -> Result<serde_json::Value, String> {
    let mut tasks = Vec::new();
    let started = Instant::now();
    for client in 0..args.clients {
        let addr = addr.to_string();
        let per_client = args.inits_per_client;
        tasks.push(tokio::spawn(async move {
            let conn = Connection::connect(&addr).await.map_err(|e| e.to_string())?;
            let mut hist = Histogram::<u64>::new(3).expect("valid");
            for _ in 0..per_client {
                let req = Request::InitProducerId(protocol::InitProducerIdRequest {
                    transactional_id: Some(format!("bench-{client}")),
                    transaction_timeout_ms: 60_000,
                    producer_id: -1,
                    producer_epoch: -1,
                    principal: String::new(),
                });
                let at = Instant::now();
                match conn.call(req).await {
                    Ok(Response::InitProducerId(r)) if r.status.is_ok() => {
                        hist.record(at.elapsed().as_micros() as u64).expect("in range")
                    }
                    other => return Err(format!("init failed: {other:?}")),
                }
            }
            Ok::<_, String>(hist)
        }));
    }
    let mut hist = Histogram::<u64>::new(3).expect("valid");
    for t in tasks {
        hist.add(t.await.map_err(|e| e.to_string())??).map_err(|e| e.to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let grants = (args.clients * args.inits_per_client) as f64;
    Ok(serde_json::json!({
        "clients": args.clients, "grants": grants, "seconds": seconds, "grants_per_s": grants / seconds,
        "p50_us": hist.value_at_quantile(0.5), "p99_us": hist.value_at_quantile(0.99), "max_us": hist.max(),
    }))
}

fn report(backend: &str, args: &Args, v: &serde_json::Value) {
    if args.json {
        return;
    }
    println!(
        "InitProducerId ({backend}): {} clients, {:.0} grants in {:.2} s = {:.0} grants/s; latency p50 {} us, p99 {} us, max {} us",
        args.clients,
        v["grants"].as_f64().unwrap_or(0.0),
        v["seconds"].as_f64().unwrap_or(0.0),
        v["grants_per_s"].as_f64().unwrap_or(0.0),
        v["p50_us"], v["p99_us"], v["max_us"]
    );
}

/// A coordinator replica on `endpoints` in this process, under a prefix of its own, once it
/// is active: its address, its stop, and its (unused) data directory.
#[cfg(feature = "etcd")]
async fn etcd_replica(
    endpoints: &[String],
) -> Result<(String, tokio::sync::oneshot::Sender<()>, tempfile::TempDir), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = coordinator::CoordinatorConfig::new(dir.path().join("coordinator"));
    let mut etcd = coordinator::etcd::EtcdConfig::new(endpoints.to_vec());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    etcd.prefix = format!("/epochfence-bench-{}-{nanos}", std::process::id());
    etcd.announce = false;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(coordinator::etcd::run_replica(listener, None, config, etcd, async {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = Request::Metadata(protocol::MetadataRequest { topics: Vec::new(), allow_auto_create: false });
        if let Ok(conn) = Connection::connect(&addr).await {
            if let Ok(Response::Metadata(_)) = conn.call(probe).await {
                return Ok((addr, stop, dir));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("the coordinator replica on etcd at {} did not become active", endpoints.join(",")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Recovery time of one partition: write `--log-mib` of idempotent batches from `--producers`
/// producers (as a follower does, through `apply_replicated`), then time `Partition::open`
/// after a crash (no shutdown: snapshots from the rolls, the active segment scanned), after a
/// clean shutdown (snapshot at the end), and with every snapshot and index removed (a full scan
/// and replay, what a single-file log needed).
fn recovery(args: &Args) -> Result<serde_json::Value, String> {
    use broker::partition::Partition;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = args.data_dir.clone().unwrap_or_else(|| tmp.path().join("bench-0"));
    let config = broker::log::LogConfig { segment_bytes: args.segment_bytes, ..Default::default() };
    let open = || {
        Partition::open_with(std::sync::Arc::new(broker::storage::OsStorage), &dir, config, "bench", 0, 1, true)
            .map_err(|e| e.to_string())
    };
    let producers = args.producers.max(1) as i64;
    let template = BatchTemplate::new(args.record_bytes, args.batch_records, false);
    let target = args.log_mib * 1024 * 1024;
    let p = open()?;
    p.learn(2, 1, 0, &[1, 2], &[1, 2], 0);
    let started = Instant::now();
    let (mut offset, mut written, mut round) = (p.progress().0, 0u64, 0i32);
    while written < target {
        // About 1 MiB of batches per push, each producer in turn.
        let mut chunk = Vec::with_capacity(1 << 21);
        let from = offset;
        while chunk.len() < 1 << 20 {
            let pid = round as i64 % producers;
            let seq = (round as i64 / producers) as i32 * template.records;
            let mut b = template.stamp(pid, 0, seq).to_vec();
            protocol::batch::set_base_offset(&mut b, offset);
            protocol::batch::set_partition_leader_epoch(&mut b, 1);
            offset += i64::from(template.records);
            chunk.extend_from_slice(&b);
            round += 1;
        }
        written += chunk.len() as u64;
        let req = protocol::ReplicateRequest {
            topic: "bench".into(),
            partition: 0,
            topic_id: 0,
            leader_epoch: 1,
            leader_id: 2,
            from_offset: from,
            prev_epoch: if from == 0 { -1 } else { 1 },
            high_watermark: from,
            log_start_offset: 0,
            low_watermark: 0,
            producer_state: bytes::Bytes::new(),
            records: Bytes::from(chunk).into(),
        };
        p.apply_replicated(&req, true).map_err(|e| e.to_string())?;
    }
    let write_s = started.elapsed().as_secs_f64();
    let (_, segments, bytes) = p.log_shape();
    drop(p); // a crash: no checkpoint, the active segment unsynced
    let drop_caches = || {
        if args.drop_caches {
            let synced = std::process::Command::new("sync").status().is_ok_and(|s| s.success());
            std::fs::write("/proc/sys/vm/drop_caches", "3")
                .map_err(|e| format!("--drop-caches: cannot write /proc/sys/vm/drop_caches: {e}"))
                .and_then(|()| if synced { Ok(()) } else { Err("sync failed".into()) })
        } else {
            Ok(())
        }
    };
    let timed_open = || -> Result<(f64, Partition), String> {
        drop_caches()?;
        let at = Instant::now();
        let p = open()?;
        Ok((at.elapsed().as_secs_f64(), p))
    };
    let (after_crash_s, p) = timed_open()?;
    if p.progress().0 != offset || p.producer_epoch(producers - 1) != Some(0) {
        return Err(format!("recovered log ends at {} where {offset} was written", p.progress().0));
    }
    p.checkpoint().map_err(|e| e.to_string())?;
    drop(p);
    let (after_clean_shutdown_s, p) = timed_open()?;
    drop(p);
    for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "snapshot" || e == "index") {
            std::fs::remove_file(&path).map_err(|e| e.to_string())?;
        }
    }
    let (full_scan_s, p) = timed_open()?;
    if p.progress().0 != offset {
        return Err(format!("a full scan ends at {} where {offset} was written", p.progress().0));
    }
    Ok(serde_json::json!({
        "log_bytes": bytes, "segments": segments, "segment_bytes": args.segment_bytes, "batches": round,
        "producers": producers, "write_s": write_s, "cold_cache": args.drop_caches,
        "open_after_crash_s": after_crash_s, "open_after_clean_shutdown_s": after_clean_shutdown_s,
        "open_full_scan_s": full_scan_s,
    }))
}

/// The run with the median throughput, if any.
fn median_run(mut runs: Vec<Figures>) -> Option<Figures> {
    runs.sort_by(|a, b| a.records_per_s.total_cmp(&b.records_per_s));
    runs.get(runs.len() / 2).cloned()
}

/// Sort `ratios` (so that they print in order) and return the middle one, if any.
fn median_ratio(ratios: &mut [f64]) -> Option<f64> {
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied()
}

/// The cost of replication as a ratio: the same load against one broker with acks=leader and
/// against three brokers holding three replicas with acks=all, fenced, `--repeat` times with
/// the order alternating; reports each side's median run and the median of the paired ratios.
async fn replication(args: &Args, template: Arc<BatchTemplate>) -> Result<(), String> {
    let leader = Args { brokers: 1, replicas: 1, acks: "leader".into(), ..args.clone() };
    let all = Args { brokers: 3, replicas: 3, acks: "all".into(), ..args.clone() };
    let (mut leaders, mut alls, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..args.repeat.max(1) {
        let kafka = args.protocol == "kafka";
        let (l, a) = if rep % 2 == 0 {
            let l = cluster(&leader, template.clone(), true, kafka).await?;
            (l, cluster(&all, template.clone(), true, kafka).await?)
        } else {
            let a = cluster(&all, template.clone(), true, kafka).await?;
            (cluster(&leader, template.clone(), true, kafka).await?, a)
        };
        ratios.push(a.records_per_s / l.records_per_s);
        leaders.push(l);
        alls.push(a);
    }
    let runs_made = "at least one run";
    let (l, a) = (median_run(leaders).expect(runs_made), median_run(alls).expect(runs_made));
    let ratio = median_ratio(&mut ratios).expect(runs_made);
    if args.json {
        let value = serde_json::json!({
            "config": {
                "record_bytes": args.record_bytes, "records": args.records, "batch_records": args.batch_records,
                "inflight": args.inflight, "producers": args.producers, "partitions": args.partitions, "client_threads": args.client_threads, "fsync": format!("{:?}", args.fsync),
            },
            "acks_leader": l, "acks_all_3_replicas": a,
            "all_over_leader": ratio, "all_over_leader_each_repeat": ratios,
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("json serialises"));
    } else {
        println!(
            "{} records of {} bytes, {} per batch, {} in flight, {} producer(s), {} partition(s), fenced, fsync={:?}",
            args.records,
            args.record_bytes,
            args.batch_records,
            args.inflight,
            args.producers,
            args.partitions,
            args.fsync
        );
        println!(
            "{:<10} {:>12} {:>8} {:>8} {:>8} {:>9} {:>8} {:>5} {:>9} {:>12}",
            "target", "records/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "max_us", "cpu%", "cpu_ns/r", ""
        );
        println!("{}", row("leader", &l, None));
        println!("{}", row("all (3)", &a, None));
        println!(
            "replication: acks=all with 3 replicas is {:.1}% of acks=leader (median of {} paired runs: {})",
            100.0 * ratio,
            ratios.len(),
            ratios.iter().map(|r| format!("{:.3}", r)).collect::<Vec<_>>().join(" ")
        );
        if let (Some(leader_ns), Some(all_ns)) = (l.cpu_ns_per_record, a.cpu_ns_per_record) {
            println!(
                "CPU per record: acks=leader {leader_ns:.0} ns, acks=all {all_ns:.0} ns ({:.2}x); where both keep the \
                 machine busy, the throughput ratio is about the inverse of this (docs/BENCHMARKS.md, \
                 \"What bounds acks=all\")",
                all_ns / leader_ns
            );
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    if let Some(linger_ms) = args.linger_ms {
        args.batch_records = lingered_batch_records(&args, linger_ms);
    }
    if args.mode == "recovery" {
        let a = args.clone();
        return match tokio::task::spawn_blocking(move || recovery(&a)).await.map_err(|e| e.to_string()).and_then(|r| r)
        {
            Ok(v) if args.json => {
                println!("{}", serde_json::to_string_pretty(&v).expect("json serialises"));
                std::process::ExitCode::SUCCESS
            }
            Ok(v) => {
                println!(
                    "recovery of {:.0} MiB in {} segments ({} producers, {} cache): after a crash {:.3} s, after a clean shutdown {:.3} s, with no snapshots or indexes {:.3} s",
                    v["log_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                    v["segments"],
                    v["producers"],
                    if args.drop_caches { "cold" } else { "warm" },
                    v["open_after_crash_s"].as_f64().unwrap_or(0.0),
                    v["open_after_clean_shutdown_s"].as_f64().unwrap_or(0.0),
                    v["open_full_scan_s"].as_f64().unwrap_or(0.0),
                );
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("bench recovery: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.mode == "inits" {
        return match inits(&args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench inits: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.mode == "logins" {
        return match logins::logins(&args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench logins: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.mode == "kip848" {
        return match kip848::kip848(&args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench kip848: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.mode == "reassign" {
        return match reassign::reassign(&args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench reassign: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.mode == "authorizer" {
        return match authorizer(&args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench authorizer: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let template = Arc::new(BatchTemplate::new(args.record_bytes, args.batch_records, args.txn_batches > 0));
    if args.mode == "replication" {
        return match replication(&args, template).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench replication: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    // The own protocol's targets, and "kafka": the fenced cluster through its Kafka listener.
    let run = |m: &str| match (m, args.protocol.as_str()) {
        ("kafka", "own") => false,
        ("kafka", _) => args.mode == "all" || args.mode == "fenced",
        ("fenced" | "unfenced", "kafka") => false,
        (m, _) => args.mode == "all" || args.mode == m,
    };
    let mut results: Vec<(&str, Figures)> = Vec::new();
    let mut all: Vec<(&str, Figures)> = Vec::new();
    let mut ratios: Vec<f64> = Vec::new();
    let mut kafka_ratios: Vec<f64> = Vec::new();
    for rep in 0..args.repeat.max(1) {
        // Alternate which cluster runs first: order effects (page cache, allocator, CPU clocks)
        // would otherwise pass for fencing overhead (or for the Kafka listener's cost).
        let order: [&str; 4] = if rep % 2 == 0 {
            ["loopback", "fenced", "kafka", "unfenced"]
        } else {
            ["loopback", "unfenced", "kafka", "fenced"]
        };
        let mut this: Vec<(&str, Figures)> = Vec::new();
        for name in order {
            if !run(name) {
                continue;
            }
            let out = match name {
                "loopback" => loopback(&args, template.clone()).await,
                "fenced" => cluster(&args, template.clone(), true, false).await,
                "kafka" => cluster(&args, template.clone(), true, true).await,
                _ => cluster(&args, template.clone(), false, false).await,
            };
            match out {
                Ok(f) => this.push((name, f)),
                Err(e) => {
                    eprintln!("bench {name}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        let rate = |n: &str| this.iter().find(|(m, _)| *m == n).map(|(_, f)| f.records_per_s);
        if let (Some(f), Some(u)) = (rate("fenced"), rate("unfenced")) {
            ratios.push(f / u);
        }
        if let (Some(k), Some(f)) = (rate("kafka"), rate("fenced")) {
            kafka_ratios.push(k / f);
        }
        all.extend(this);
    }
    // Per target, the run with the median throughput.
    for name in ["loopback", "fenced", "kafka", "unfenced"] {
        let runs: Vec<Figures> = all.iter().filter(|(n, _)| *n == name).map(|(_, f)| f.clone()).collect();
        if let Some(median) = median_run(runs) {
            results.push((name, median));
        }
    }
    let get = |n: &str| results.iter().find(|(m, _)| *m == n).map(|(_, f)| f.clone());
    let ceiling = get("loopback");
    let overhead = median_ratio(&mut ratios);
    let kafka_share = median_ratio(&mut kafka_ratios);
    if args.json {
        let value = serde_json::json!({
            "config": {
                "record_bytes": args.record_bytes, "records": args.records, "duration_ms": args.duration_ms, "batch_records": args.batch_records,
                "rate": args.rate, "linger_ms": args.linger_ms,
                "inflight": args.inflight, "producers": args.producers, "partitions": args.partitions, "client_threads": args.client_threads,
                "brokers": args.brokers, "replicas": args.replicas, "acks": args.acks, "fsync": format!("{:?}", args.fsync),
                "protocol": args.protocol,
            },
            "results": results.iter().map(|(n, f)| (n.to_string(), serde_json::to_value(f).expect("plain struct"))).collect::<serde_json::Map<_, _>>(),
            "fraction_of_loopback": ceiling.as_ref().map(|c| results.iter().map(|(n, f)| (n.to_string(), serde_json::json!(f.records_per_s / c.records_per_s))).collect::<serde_json::Map<_, _>>()),
            "fenced_over_unfenced": overhead,
            "fenced_over_unfenced_each_repeat": ratios,
            "kafka_over_own": kafka_share,
            "kafka_over_own_each_repeat": kafka_ratios,
        });
        println!("{}", serde_json::to_string_pretty(&value).expect("json serialises"));
    } else {
        let amount = if args.duration_ms > 0 {
            format!("{} ms of records", args.duration_ms)
        } else {
            format!("{} records", args.records)
        };
        let linger = args.linger_ms.map(|l| format!(" (linger {l} ms at {} records/s)", args.rate)).unwrap_or_default();
        println!(
            "{amount} of {} bytes, {} per batch{linger}, {} in flight, {} producer(s), {} partition(s), {} broker(s), {} replica(s), acks={}, fsync={:?}",
            args.record_bytes, args.batch_records, args.inflight, args.producers, args.partitions, args.brokers, args.replicas, args.acks, args.fsync
        );
        println!(
            "{:<10} {:>12} {:>8} {:>8} {:>8} {:>9} {:>8} {:>5} {:>9} {:>12}",
            "target", "records/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "max_us", "cpu%", "cpu_ns/r", "of loopback"
        );
        for (name, f) in &results {
            println!("{}", row(name, f, ceiling.as_ref()));
        }
        if let Some(o) = overhead {
            println!(
                "fencing overhead: fenced throughput is {:.1}% of unfenced (median of {} paired runs: {})",
                100.0 * o,
                ratios.len(),
                ratios.iter().map(|r| format!("{:.3}", r)).collect::<Vec<_>>().join(" ")
            );
        }
        if let Some(k) = kafka_share {
            println!(
                "Kafka listener: its throughput is {:.1}% of the own protocol's (median of {} paired runs: {})",
                100.0 * k,
                kafka_ratios.len(),
                kafka_ratios.iter().map(|r| format!("{:.3}", r)).collect::<Vec<_>>().join(" ")
            );
        }
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::CpuTimes;

    #[test]
    fn cpu_busy_counts_user_system_and_interrupts_against_everything_including_iowait_and_steal() {
        let before = CpuTimes::parse("cpu  100 0 50 800 10 5 5 30 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n").unwrap();
        assert_eq!(before, CpuTimes { busy: 160, total: 1000 });
        // 60 busy (40 user, 10 system, 10 softirq) of 200: 30%.
        let after = CpuTimes::parse("cpu  140 0 60 900 20 5 15 60 0 0\n").unwrap();
        assert_eq!(before.busy_pct(after), Some(30.0));
        assert_eq!(before.busy_pct(before), None, "no tick passed");
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
        assert_eq!(CpuTimes::parse("cpu 1 2\n"), None, "too few fields");
        assert_eq!(CpuTimes::parse(&format!("cpu {} 1 0 0 0 0 0 0\n", u64::MAX)), None, "overflow");
        // iowait went backwards: the total moved less than the busy time.
        let later = CpuTimes { busy: before.busy + 50, total: before.total + 40 };
        assert_eq!(before.busy_pct(later), Some(100.0));
    }
}
