//! Kafka's reads: Fetch (with long polling), ListOffsets and OffsetForLeaderEpoch, on the same
//! partitions the own protocol reads; and DeleteRecords, which moves where they start.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset as LeaderEpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};
use net::Handled;
use protocol::kafka::KafkaAnswer;
use protocol::{ErrorCode, Status, READ_COMMITTED, READ_UNCOMMITTED};

use super::super::{delete_records as delete_records_here, leader_status, partition, Shared, FETCH_BYTES_MAX};
use super::authz::Caller;
use super::kafka_code;
use protocol::acl::{Operation, ResourceType};

/// The topics of `names` that `caller` may not `op` (none while the authorizer is off).
fn denied<'a>(
    caller: &Caller,
    op: Operation,
    names: impl Iterator<Item = &'a str>,
) -> std::collections::HashSet<String> {
    if !caller.enabled() {
        return Default::default();
    }
    names.filter(|n| !caller.may(op, ResourceType::Topic, n)).map(str::to_string).collect()
}

fn topic_refusal(topic: &str, op: Operation) -> Status {
    Status::new(ErrorCode::TopicAuthorizationFailed, format!("{op} on topic `{topic}` is not authorized"))
}
use crate::partition::{FetchError, TIMESTAMP_MAX};

/// The longest a Fetch waits for `min_bytes`, whatever it asks, in milliseconds (a consumer
/// asks for 500 by default).
const FETCH_WAIT_MS_MAX: i32 = 30_000;

/// Kafka's FETCH_SESSION_ID_NOT_FOUND.
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;

/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// KIP-405's first offset of the local log (v8): without tiered storage, the log start.
const EARLIEST_LOCAL: i64 = -4;
/// KIP-1005's last offset in tiered storage (v9): without it, none (-1), as Kafka answers.
const LATEST_TIERED: i64 = -5;

/// Fetch: read every partition asked; if that is less than `min_bytes` and `max_wait_ms` is
/// not over, wait until one of them changes (an append, a new high watermark, a marker, a
/// leadership change) or the time is up, and read again. Nothing is changed, so later requests
/// on the connection go ahead while it waits.
pub(super) fn fetch(shared: &Arc<Shared>, caller: &Caller, r: FetchRequest, version: i16) -> Handled<KafkaAnswer> {
    let shared = shared.clone();
    let at = std::time::Instant::now();
    // READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
    let denied = denied(caller, Operation::Read, r.topics.iter().map(|t| t.topic.as_str()));
    Handled::Applied(Box::pin(async move {
        let answer = fetch_waiting(&shared, r, &denied, version).await;
        shared.control.stats.metrics.fetch_latency.observe(at.elapsed().as_secs_f64());
        answer
    }))
}

/// [`fetch`]: read, and wait up to `max_wait_ms` for `min_bytes`.
async fn fetch_waiting(
    shared: &Arc<Shared>,
    r: FetchRequest,
    denied: &std::collections::HashSet<String>,
    version: i16,
) -> KafkaAnswer {
    {
        if r.session_id != 0 {
            // This broker never creates a fetch session (it answers session id 0), so a client
            // naming one has it from elsewhere.
            let resp = FetchResponse::default().with_error_code(FETCH_SESSION_ID_NOT_FOUND);
            return KafkaAnswer::Reply(ResponseKind::Fetch(resp));
        }
        let isolation = if r.isolation_level == READ_COMMITTED { READ_COMMITTED } else { READ_UNCOMMITTED };
        let wait = Duration::from_millis(r.max_wait_ms.clamp(0, FETCH_WAIT_MS_MAX) as u64);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Subscribed before reading, so that a change between the read and the wait wakes it.
            let mut watchers: Vec<_> = r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.to_string(), p.partition)))
                .filter(|(topic, _)| !denied.contains(topic))
                .filter_map(|key| shared.partitions.get(&key).map(|p| p.subscribe()))
                .collect();
            let (resp, bytes, failed) = fetch_once(shared, &r, denied, isolation, version);
            let enough = bytes >= r.min_bytes.max(1) as usize;
            if enough || failed || watchers.is_empty() || tokio::time::Instant::now() >= deadline {
                return KafkaAnswer::Reply(ResponseKind::Fetch(resp));
            }
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let (resp, ..) = fetch_once(shared, &r, denied, isolation, version);
                return KafkaAnswer::Reply(ResponseKind::Fetch(resp));
            }
        }
    }
}

/// One read of every partition: the response, the bytes of records in it, and whether any
/// partition answered an error (the client acts on it at once rather than after the wait).
fn fetch_once(
    shared: &Shared,
    r: &FetchRequest,
    denied: &std::collections::HashSet<String>,
    isolation: i8,
    version: i16,
) -> (FetchResponse, usize, bool) {
    let mut room = (r.max_bytes.max(0) as usize).min(FETCH_BYTES_MAX);
    let mut total = 0;
    let mut failed = false;
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut out = PartitionData::default().with_partition_index(p.partition);
            let refused = denied.contains(t.topic.as_str());
            if version >= 12 && p.last_fetched_epoch >= 0 && !refused {
                if let Some(diverging) = divergence(shared, &t.topic, p.partition, p.last_fetched_epoch, p.fetch_offset)
                {
                    // The consumer's log diverges from this leader's: tell it where, no records.
                    partitions.push(out.with_diverging_epoch(diverging));
                    continue;
                }
            }
            // At least one batch while nothing is in the answer yet, however large; after that
            // only what fits in the room left (the partition's offsets are answered either way).
            let partition_max = p.partition_max_bytes.max(0) as usize;
            let take = partition_max > 0 && (total == 0 || room > 0);
            let read = if refused {
                Err(FetchFailure::Status(topic_refusal(&t.topic, Operation::Read)))
            } else {
                partition(shared, &t.topic, p.partition).map_err(FetchFailure::Status).and_then(|part| {
                    part.fetch(p.fetch_offset, partition_max.min(room), p.current_leader_epoch, isolation)
                        .map_err(FetchFailure::Fetch)
                })
            };
            match read {
                Ok(f) => {
                    let records = if take { f.records } else { Bytes::new() };
                    total += records.len();
                    room = room.saturating_sub(records.len());
                    out = out
                        .with_high_watermark(f.high_watermark)
                        .with_last_stable_offset(f.last_stable_offset)
                        .with_records(Some(records));
                    if version >= 5 {
                        out = out.with_log_start_offset(f.log_start_offset);
                    }
                    out = out.with_aborted_transactions((isolation == READ_COMMITTED).then(|| {
                        f.aborted
                            .iter()
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(a.producer_id.into())
                                    .with_first_offset(a.first_offset)
                            })
                            .collect()
                    }));
                }
                Err(failure) => {
                    failed = true;
                    let status = failure.status(shared, &t.topic, p.partition);
                    out = out
                        .with_error_code(kafka_code(status.code, ApiKey::Fetch, version))
                        .with_high_watermark(-1)
                        .with_records(Some(Bytes::new()))
                        .with_aborted_transactions(None);
                }
            }
            partitions.push(out);
        }
        topics.push(FetchableTopicResponse::default().with_topic(t.topic.clone()).with_partitions(partitions));
    }
    (FetchResponse::default().with_session_id(0).with_responses(topics), total, failed)
}

/// Why one partition of a fetch was not read.
enum FetchFailure {
    Status(Status),
    Fetch(FetchError),
}

impl FetchFailure {
    fn status(self, shared: &Shared, topic: &str, index: i32) -> Status {
        match self {
            FetchFailure::Status(s) => s,
            FetchFailure::Fetch(e) => fetch_status(shared, topic, index, &e),
        }
    }
}

fn fetch_status(shared: &Shared, topic: &str, index: i32, e: &FetchError) -> Status {
    match e {
        FetchError::Leader(e) => leader_status(shared, topic, index, e),
        e @ FetchError::OutOfRange { .. } => Status::new(ErrorCode::OffsetOutOfRange, e.to_string()),
        e @ FetchError::Io(_) => Status::new(ErrorCode::KafkaStorageError, e.to_string()),
    }
}

/// Where a consumer that last fetched `last_fetched_epoch` and is at `fetch_offset` diverges
/// from this leader's log, if it does (KIP-320): the largest epoch of this log at or below
/// its, and where that ends here.
fn divergence(
    shared: &Shared,
    topic: &str,
    index: i32,
    last_fetched_epoch: i32,
    fetch_offset: i64,
) -> Option<EpochEndOffset> {
    let part = shared.partitions.get(&(topic.to_string(), index))?.clone();
    let (epoch, end) = part.epoch_end_offset(-1, last_fetched_epoch).ok()?;
    (epoch != last_fetched_epoch || end < fetch_offset)
        .then(|| EpochEndOffset::default().with_epoch(epoch).with_end_offset(end))
}

/// ListOffsets: the earliest offset (-2, and -4: the local log is the whole log), the latest
/// (-1: the high watermark, the last stable offset under read_committed), the record with the
/// largest timestamp (-3), none in tiered storage (-5: there is none), or the first at or after
/// a time. Version 10's `timeout_ms` is moot: every answer is at hand.
pub(super) fn list_offsets(
    shared: &Arc<Shared>,
    caller: &Caller,
    r: ListOffsetsRequest,
    version: i16,
) -> Handled<KafkaAnswer> {
    let isolation = if r.isolation_level == READ_COMMITTED { READ_COMMITTED } else { READ_UNCOMMITTED };
    // DESCRIBE on each topic.
    let denied = denied(caller, Operation::Describe, r.topics.iter().map(|t| t.name.as_str()));
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let out = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
                    let found = if denied.contains(t.name.as_str()) {
                        Err(topic_refusal(&t.name, Operation::Describe))
                    } else {
                        list_offset(shared, &t.name, p.partition_index, p.current_leader_epoch, p.timestamp, isolation)
                    };
                    match found {
                        Ok((timestamp, offset, epoch)) => {
                            let out = out.with_timestamp(timestamp).with_offset(offset);
                            if version >= 4 {
                                out.with_leader_epoch(epoch)
                            } else {
                                out
                            }
                        }
                        Err(status) => out
                            .with_error_code(kafka_code(status.code, ApiKey::ListOffsets, version))
                            .with_timestamp(-1)
                            .with_offset(-1),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    Handled::answer(KafkaAnswer::Reply(ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))))
}

/// DeleteRecords (KIP-107) of the partitions this broker leads, all at once: each answered with
/// its low watermark once its in-sync replicas hide the records too ([`delete_records_here`]),
/// or its error. DELETE on each topic; without the authorizer, on a cluster with a secret, it
/// is the secret's (a Kafka client cannot prove it: epochfence's `admin delete-records` can).
pub(super) fn delete_records(
    shared: &Arc<Shared>,
    caller: &Caller,
    r: DeleteRecordsRequest,
    version: i16,
) -> Handled<KafkaAnswer> {
    let denied = denied(caller, Operation::Delete, r.topics.iter().map(|t| t.name.as_str()));
    let secret_only = !caller.enabled() && shared.config.limits.cluster_secret.is_some();
    let timeout_ms = r.timeout_ms;
    let calls: Vec<_> = r
        .topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name.to_string();
            let refused = if denied.contains(&name) {
                Some(topic_refusal(&name, Operation::Delete))
            } else if secret_only {
                Some(Status::new(
                    ErrorCode::TopicAuthorizationFailed,
                    format!(
                        "deleting records of `{name}` needs the cluster secret on this cluster, which a Kafka client \
                         cannot prove: use epochfence's admin delete-records with --cluster-secret-file"
                    ),
                ))
            } else {
                None
            };
            let shared = shared.clone();
            t.partitions.into_iter().map(move |p| {
                let (shared, name, refused) = (shared.clone(), name.clone(), refused.clone());
                async move {
                    let index = p.partition_index;
                    let result = match refused {
                        Some(status) => Err(status),
                        None => delete_records_here(&shared, &name, index, p.offset, timeout_ms).await,
                    };
                    (name, index, result)
                }
            })
        })
        .collect();
    Handled::Applied(Box::pin(async move {
        let mut topics: Vec<DeleteRecordsTopicResult> = Vec::new();
        for (name, index, result) in futures::future::join_all(calls).await {
            let out = DeleteRecordsPartitionResult::default().with_partition_index(index);
            let out = match result {
                Ok(low) => out.with_low_watermark(low),
                Err(status) => {
                    out.with_low_watermark(-1).with_error_code(kafka_code(status.code, ApiKey::DeleteRecords, version))
                }
            };
            match topics.iter_mut().find(|t| t.name.as_str() == name) {
                Some(t) => t.partitions.push(out),
                None => topics.push(
                    DeleteRecordsTopicResult::default()
                        .with_name(kafka_protocol::messages::TopicName(
                            kafka_protocol::protocol::StrBytes::from_string(name),
                        ))
                        .with_partitions(vec![out]),
                ),
            }
        }
        KafkaAnswer::Reply(ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics)))
    }))
}

/// One partition of ListOffsets: (timestamp, offset, leader epoch).
fn list_offset(
    shared: &Shared,
    topic: &str,
    index: i32,
    current_leader_epoch: i32,
    timestamp: i64,
    isolation: i8,
) -> Result<(i64, i64, i32), Status> {
    let part = partition(shared, topic, index)?;
    let leader = |e| leader_status(shared, topic, index, &e);
    let offsets = part.offsets(current_leader_epoch).map_err(leader)?;
    let epoch_of = |offset: i64| part.stored_epoch_at(offset).unwrap_or(offsets.leader_epoch);
    match timestamp {
        LATEST => {
            let end = if isolation == READ_COMMITTED { offsets.last_stable_offset } else { offsets.high_watermark };
            Ok((-1, end, if end > offsets.log_start_offset { epoch_of(end - 1) } else { offsets.leader_epoch }))
        }
        EARLIEST | EARLIEST_LOCAL => Ok((-1, offsets.log_start_offset, epoch_of(offsets.log_start_offset))),
        LATEST_TIERED => Ok((-1, -1, -1)),
        t if t >= 0 || t == TIMESTAMP_MAX => match part.find_by_time(current_leader_epoch, t, isolation) {
            Ok(Some(found)) => Ok((found.timestamp_ms, found.offset, found.leader_epoch)),
            Ok(None) => Ok((-1, -1, -1)),
            Err(e) => Err(fetch_status(shared, topic, index, &e)),
        },
        t => Err(Status::new(
            ErrorCode::InvalidRequest,
            format!(
                "timestamp {t}: use -1 (latest), -2 (earliest), -3 (largest timestamp), -4 (earliest local), -5 \
                 (latest tiered) or a time in ms"
            ),
        )),
    }
}

/// OffsetForLeaderEpoch: where each asked epoch ends in this leader's log.
pub(super) fn offset_for_leader_epoch(
    shared: &Arc<Shared>,
    caller: &Caller,
    r: OffsetForLeaderEpochRequest,
    version: i16,
) -> Handled<KafkaAnswer> {
    // DESCRIBE on each topic.
    let denied = denied(caller, Operation::Describe, r.topics.iter().map(|t| t.topic.as_str()));
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let out = LeaderEpochEndOffset::default().with_partition(p.partition);
                    let found = if denied.contains(t.topic.as_str()) {
                        Err(topic_refusal(&t.topic, Operation::Describe))
                    } else {
                        partition(shared, &t.topic, p.partition).and_then(|part| {
                            part.epoch_end_offset(p.current_leader_epoch, p.leader_epoch)
                                .map_err(|e| leader_status(shared, &t.topic, p.partition, &e))
                        })
                    };
                    match found {
                        Ok((epoch, end)) => out.with_leader_epoch(epoch).with_end_offset(end),
                        Err(status) => out
                            .with_error_code(kafka_code(status.code, ApiKey::OffsetForLeaderEpoch, version))
                            .with_leader_epoch(-1)
                            .with_end_offset(-1),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions)
        })
        .collect();
    Handled::answer(KafkaAnswer::Reply(ResponseKind::OffsetForLeaderEpoch(
        OffsetForLeaderEpochResponse::default().with_topics(topics),
    )))
}
