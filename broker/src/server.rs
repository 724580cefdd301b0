//! The broker's tokio shell. Decisions live in [`crate::partition`] and the rule modules; this
//! file moves requests to them, asks the coordinator to verify producers, and heartbeats.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use net::{Connection, ServerLimits};
use protocol::batch::{build_marker, verify_crc, BatchError, BatchHeader, MarkerKind};
use protocol::{
    AddPartitionRequest, ErrorCode, FetchRequest, FetchResponse, HeartbeatRequest, ProduceRequest, ProduceResponse,
    Request, Response, Status, WriteMarkerRequest, WriteMarkerResponse,
};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::leader::{LeaderEpochError, Leadership};
use crate::partition::{AppendError, Appended, FetchError, Partition, PartitionRef};
use crate::producer_state::GateError;

/// Broker settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Broker id.
    pub id: i32,
    /// Directory holding one sub-directory per partition.
    pub data_dir: PathBuf,
    /// Coordinator address.
    pub coordinator: String,
    /// Address given to clients; defaults to the listener's address.
    pub advertised_addr: Option<String>,
    /// Producer fencing on (the default). Off only to demonstrate and measure what it prevents.
    pub fencing: bool,
    /// Interval between heartbeats, in milliseconds.
    pub heartbeat_ms: u64,
    /// Deadline for a verification call to the coordinator, in milliseconds.
    pub verify_timeout_ms: u64,
    /// Connection limits.
    pub limits: ServerLimits,
}

impl BrokerConfig {
    /// Defaults for broker `id` with data in `data_dir`, registering with `coordinator`.
    pub fn new(id: i32, data_dir: impl Into<PathBuf>, coordinator: impl Into<String>) -> Self {
        BrokerConfig {
            id,
            data_dir: data_dir.into(),
            coordinator: coordinator.into(),
            advertised_addr: None,
            fencing: true,
            heartbeat_ms: 300,
            verify_timeout_ms: 5_000,
            limits: ServerLimits::default(),
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {detail}")]
    DataDir {
        /// Directory.
        path: String,
        /// OS error.
        detail: String,
    },
    /// The listener's address could not be read.
    #[error("listener: {0}")]
    Listener(String),
}

struct Shared {
    config: BrokerConfig,
    addr: String,
    partitions: DashMap<(String, i32), PartitionRef>,
    /// Cached connection to the coordinator; never held across an `.await`.
    coordinator: Mutex<Option<Connection>>,
    /// Wakes the heartbeat loop early (a request showed this broker is behind).
    refresh: Notify,
    started: Instant,
}

/// Serve on `listener` until `shutdown`, heartbeating to the coordinator meanwhile.
pub async fn run(
    listener: TcpListener,
    config: BrokerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), BrokerError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| BrokerError::DataDir { path: config.data_dir.display().to_string(), detail: e.to_string() })?;
    let local = listener.local_addr().map_err(|e| BrokerError::Listener(e.to_string()))?;
    let addr = config.advertised_addr.clone().unwrap_or_else(|| local.to_string());
    tracing::info!(broker_id = config.id, %addr, fencing = config.fencing, "broker starting");
    let shared = Arc::new(Shared {
        addr,
        partitions: DashMap::new(),
        coordinator: Mutex::new(None),
        refresh: Notify::new(),
        started: Instant::now(),
        config: config.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let heartbeats = tokio::spawn(heartbeat_loop(shared.clone(), stop_rx));
    let handler_shared = shared.clone();
    let handler: net::Handler = Arc::new(move |req| {
        let shared = handler_shared.clone();
        Box::pin(async move { handle(&shared, req).await })
    });
    net::serve(listener, handler, config.limits.clone(), shutdown).await;
    let _ = stop_tx.send(true);
    let _ = heartbeats.await;
    Ok(())
}

async fn coordinator(shared: &Shared) -> Result<Connection, net::NetError> {
    let cached = shared.coordinator.lock().unwrap_or_else(|p| p.into_inner()).clone().filter(|c| !c.is_closed());
    if let Some(c) = cached {
        return Ok(c);
    }
    let c = Connection::connect(&shared.config.coordinator).await?;
    *shared.coordinator.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
    Ok(c)
}

async fn heartbeat_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let interval = Duration::from_millis(shared.config.heartbeat_ms);
    loop {
        if let Err(e) = heartbeat(&shared).await {
            tracing::warn!(error = %e, "heartbeat to the coordinator failed; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shared.refresh.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn heartbeat(shared: &Shared) -> Result<(), String> {
    let conn = coordinator(shared).await.map_err(|e| e.to_string())?;
    let req = Request::Heartbeat(HeartbeatRequest { broker_id: shared.config.id, addr: shared.addr.clone() });
    let resp = conn
        .call_timeout(req, Duration::from_millis(shared.config.heartbeat_ms * 10))
        .await
        .map_err(|e| e.to_string())?;
    let Response::Heartbeat(hb) = resp else {
        return Err(format!("unexpected answer to a heartbeat: {}", resp.status()));
    };
    let mut leading = std::collections::HashSet::new();
    for a in hb.leaderships {
        let key = (a.topic.clone(), a.partition);
        leading.insert(key.clone());
        if let Some(p) = shared.partitions.get(&key) {
            p.learn(true, a.leader_epoch);
            continue;
        }
        let dir = shared.config.data_dir.join(format!("{}-{}", a.topic, a.partition));
        let leadership = Leadership { is_leader: true, leader_epoch: a.leader_epoch };
        match Partition::open(&dir, &a.topic, a.partition, shared.config.fencing, leadership) {
            Ok(p) => {
                shared.partitions.insert(key, Arc::new(p));
            }
            Err(e) => {
                tracing::error!(topic = %a.topic, partition = a.partition, error = %e, "cannot open partition")
            }
        }
    }
    for entry in shared.partitions.iter() {
        if !leading.contains(entry.key()) {
            let l = entry.value().leadership();
            entry.value().learn(false, l.leader_epoch);
        }
    }
    Ok(())
}

fn uptime_ms(shared: &Shared) -> i64 {
    shared.started.elapsed().as_millis() as i64
}

async fn handle(shared: &Arc<Shared>, req: Request) -> Response {
    match req {
        Request::Produce(r) => Response::Produce(produce(shared, r).await),
        Request::Fetch(r) => Response::Fetch(fetch(shared, r)),
        Request::WriteMarker(r) => Response::WriteMarker(write_marker(shared, r)),
        other => Response::Error(Status::new(
            ErrorCode::InvalidRequest,
            format!("a broker does not serve {:?}; send it to the coordinator", other.api_key()),
        )),
    }
}

fn partition(shared: &Shared, topic: &str, index: i32) -> Result<PartitionRef, Status> {
    match shared.partitions.get(&(topic.to_string(), index)) {
        Some(p) => Ok(p.clone()),
        None => {
            shared.refresh.notify_one();
            Err(Status::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker {} does not lead {topic}-{index} (or has not learnt it yet); refresh metadata and retry",
                    shared.config.id
                ),
            ))
        }
    }
}

fn batch_status(e: &BatchError) -> Status {
    let code = match e {
        BatchError::UnsupportedMagic(_) | BatchError::Compressed(_) => ErrorCode::UnsupportedForMessageFormat,
        _ => ErrorCode::CorruptMessage,
    };
    Status::new(code, format!("record batch rejected: {e}"))
}

fn leader_status(shared: &Shared, topic: &str, index: i32, e: &LeaderEpochError) -> Status {
    if matches!(e, LeaderEpochError::Unknown { .. }) {
        shared.refresh.notify_one();
    }
    Status::new(e.code(), format!("{topic}-{index} on broker {}: {e}", shared.config.id))
}

fn produce_error(status: Status, producer_epoch: i16, leader_epoch: i32) -> ProduceResponse {
    ProduceResponse {
        status,
        base_offset: -1,
        log_end_offset: -1,
        current_producer_epoch: producer_epoch,
        current_leader_epoch: leader_epoch,
    }
}

async fn produce(shared: &Shared, r: ProduceRequest) -> ProduceResponse {
    let header = match BatchHeader::parse(&r.records).and_then(|h| verify_crc(&r.records, &h).map(|_| h)) {
        Ok(h) if h.is_control() => {
            return produce_error(
                Status::new(ErrorCode::InvalidRequest, "control batches are written by the coordinator only"),
                -1,
                -1,
            )
        }
        Ok(h) => h,
        Err(e) => return produce_error(batch_status(&e), -1, -1),
    };
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return produce_error(s, -1, -1),
    };
    // At most one verification round: after it the gate decides with the coordinator's answer.
    for _ in 0..2 {
        let leader_epoch = part.leadership().leader_epoch;
        match part.append(&r.records, &header, r.leader_epoch) {
            Ok(Appended::New { base_offset, log_end_offset } | Appended::Duplicate { base_offset, log_end_offset }) => {
                return ProduceResponse {
                    status: Status::ok(),
                    base_offset,
                    log_end_offset,
                    current_producer_epoch: header.producer_epoch,
                    current_leader_epoch: leader_epoch,
                };
            }
            Err(AppendError::NeedsVerification { producer_id, epoch }) => {
                if let Err((status, current)) = verify(shared, producer_id, epoch, &r.topic, r.partition).await {
                    return produce_error(status, current, leader_epoch);
                }
                part.mark_verified(producer_id, epoch);
            }
            Err(AppendError::Leader(e)) => return produce_error(leader_status(shared, &r.topic, r.partition, &e), -1, leader_epoch),
            Err(AppendError::Gate(GateError::StaleEpoch { producer_id, current, got })) => {
                return produce_error(
                    Status::new(
                        ErrorCode::InvalidProducerEpoch,
                        format!(
                            "fenced: {}-{} holds epoch {current} for producer id {producer_id}, this batch carries epoch {got}; \
                             a newer instance with the same transactional id has initialised, so stop this producer",
                            r.topic, r.partition
                        ),
                    ),
                    current,
                    leader_epoch,
                )
            }
            Err(AppendError::Gate(e @ GateError::OutOfOrder { .. })) => {
                return produce_error(Status::new(ErrorCode::OutOfOrderSequenceNumber, e.to_string()), header.producer_epoch, leader_epoch)
            }
            Err(AppendError::Storage(e)) => {
                return produce_error(Status::new(ErrorCode::KafkaStorageError, e.to_string()), -1, leader_epoch)
            }
        }
    }
    produce_error(
        Status::new(ErrorCode::CoordinatorNotAvailable, "producer verification did not settle; retry"),
        -1,
        -1,
    )
}

/// Ask the coordinator to register `topic-partition` under `(producer_id, epoch)`.
/// On refusal returns the status to answer with and the current epoch.
async fn verify(
    shared: &Shared,
    producer_id: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
) -> Result<(), (Status, i16)> {
    let unavailable = |detail: String| {
        (
            Status::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("cannot verify producer id {producer_id} with the coordinator: {detail}; retry"),
            ),
            -1,
        )
    };
    let conn = coordinator(shared).await.map_err(|e| unavailable(e.to_string()))?;
    let req = Request::AddPartition(AddPartitionRequest {
        producer_id,
        producer_epoch: epoch,
        topic: topic.to_string(),
        partition,
    });
    let resp = conn
        .call_timeout(req, Duration::from_millis(shared.config.verify_timeout_ms))
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let Response::AddPartition(a) = resp else {
        return Err(unavailable(format!("unexpected answer: {}", resp.status())));
    };
    match a.status.code {
        ErrorCode::None => Ok(()),
        // The partition leader answers a stale producer epoch with INVALID_PRODUCER_EPOCH,
        // passing on the coordinator's explanation and current epoch.
        ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch => {
            Err((Status::new(ErrorCode::InvalidProducerEpoch, a.status.message), a.current_epoch))
        }
        code if code.is_retriable() => Err((a.status, a.current_epoch)),
        _ => Err((a.status, a.current_epoch)),
    }
}

fn fetch(shared: &Shared, r: FetchRequest) -> FetchResponse {
    let err = |status| FetchResponse { status, high_watermark: -1, current_leader_epoch: -1, records: Bytes::new() };
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return err(s),
    };
    match part.fetch(r.offset, r.max_bytes.max(0) as usize, r.leader_epoch) {
        Ok(f) => FetchResponse {
            status: Status::ok(),
            high_watermark: f.high_watermark,
            current_leader_epoch: f.leader_epoch,
            records: f.records,
        },
        Err(FetchError::Leader(e)) => err(leader_status(shared, &r.topic, r.partition, &e)),
        Err(e @ FetchError::OutOfRange { .. }) => err(Status::new(ErrorCode::OffsetOutOfRange, e.to_string())),
        Err(e @ FetchError::Io(_)) => err(Status::new(ErrorCode::KafkaStorageError, e.to_string())),
    }
}

fn write_marker(shared: &Shared, r: WriteMarkerRequest) -> WriteMarkerResponse {
    let err = |status, current| WriteMarkerResponse { status, offset: -1, current_producer_epoch: current };
    let part = match partition(shared, &r.topic, r.partition) {
        Ok(p) => p,
        Err(s) => return err(s, -1),
    };
    let kind = if r.commit { MarkerKind::Commit } else { MarkerKind::Abort };
    let marker = build_marker(r.producer_id, r.producer_epoch, kind, 0, uptime_ms(shared));
    let header = BatchHeader::parse(&marker).expect("a marker we built parses");
    match part.append(&marker, &header, -1) {
        Ok(Appended::New { base_offset, .. } | Appended::Duplicate { base_offset, .. }) => {
            tracing::info!(topic = %r.topic, partition = r.partition, producer_id = r.producer_id, epoch = r.producer_epoch, offset = base_offset, "marker written");
            WriteMarkerResponse { status: Status::ok(), offset: base_offset, current_producer_epoch: r.producer_epoch }
        }
        Err(AppendError::Gate(GateError::StaleEpoch { current, .. })) => err(
            Status::new(
                ErrorCode::InvalidProducerEpoch,
                format!("marker at epoch {} is older than the partition's {current}", r.producer_epoch),
            ),
            current,
        ),
        Err(AppendError::Leader(e)) => err(leader_status(shared, &r.topic, r.partition, &e), -1),
        Err(e) => err(
            Status::new(ErrorCode::KafkaStorageError, e.to_string()),
            part.producer_epoch(r.producer_id).unwrap_or(-1),
        ),
    }
}
