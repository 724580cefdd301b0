//! DescribeLogDirs and AlterReplicaLogDirs: this broker's one log directory (its `--data-dir`),
//! the replicas in it with their real sizes and offset lag, and moves between directories, which
//! with one directory are answered honestly (already there, or no such directory).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use protocol::acl::Operation;
use protocol::kafka::KafkaAnswer;
use protocol::ErrorCode;

use super::super::Shared;
use super::authz::Caller;
use super::kafka_code;

/// The broker's log directory as Kafka names one: an absolute path.
fn log_dir(shared: &Shared) -> PathBuf {
    let dir = &shared.config.data_dir;
    std::fs::canonicalize(dir)
        .or_else(|_| std::env::current_dir().map(|cwd| cwd.join(dir)))
        .unwrap_or_else(|_| dir.clone())
}

/// The volume's size and free space for unprivileged writers, in bytes (-1, -1 if unknown).
fn volume_bytes(dir: &Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(v) => {
            let bytes = |blocks: u64| i64::try_from(blocks.saturating_mul(v.f_frsize)).unwrap_or(i64::MAX);
            (bytes(v.f_blocks), bytes(v.f_bavail))
        }
        Err(_) => (-1, -1),
    }
}

/// DescribeLogDirs: the one directory, and in it each replica asked (every one for a null topic
/// list; a partition not hosted here is left out, as Kafka does) with its log's size in bytes
/// and how far its end is behind the high watermark. A directory where a log failed (an
/// fdatasync error: the disk is suspect) is reported offline, KAFKA_STORAGE_ERROR with no
/// replicas, as Kafka reports an offline log directory. DESCRIBE on the cluster (from version 3
/// a top-level CLUSTER_AUTHORIZATION_FAILED; before, no directory).
pub(super) fn describe_log_dirs(
    shared: &Arc<Shared>,
    caller: &Caller,
    r: DescribeLogDirsRequest,
    version: i16,
) -> KafkaAnswer {
    let reply = |resp: DescribeLogDirsResponse| KafkaAnswer::Reply(ResponseKind::DescribeLogDirs(resp));
    if let Some(refused) = caller.cluster_refusal(Operation::Describe) {
        let resp = DescribeLogDirsResponse::default();
        return reply(if version >= 3 {
            resp.with_error_code(kafka_code(refused.code, ApiKey::DescribeLogDirs, version))
        } else {
            resp
        });
    }
    let asked = |topic: &str, index: i32| match &r.topics {
        None => true,
        Some(topics) => topics.iter().any(|t| t.topic.as_str() == topic && t.partitions.contains(&index)),
    };
    let mut parts: Vec<_> =
        shared.partitions.iter().filter(|p| asked(&p.topic, p.index)).map(|p| p.value().clone()).collect();
    parts.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    let dir = log_dir(shared);
    let offline = shared.partitions.iter().any(|p| p.log_failed());
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    if !offline {
        for p in parts {
            let (size, lag) = p.log_dir_stats();
            let out = DescribeLogDirsPartition::default()
                .with_partition_index(p.index)
                .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
                .with_offset_lag(lag);
            match topics.last_mut() {
                Some(t) if t.name.as_str() == p.topic => t.partitions.push(out),
                _ => topics.push(
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(p.topic.clone())))
                        .with_partitions(vec![out]),
                ),
            }
        }
    }
    let (total, usable) = volume_bytes(&dir);
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(total)
        .with_usable_bytes(usable);
    if offline {
        result = result.with_error_code(kafka_code(ErrorCode::KafkaStorageError, ApiKey::DescribeLogDirs, version));
    }
    reply(DescribeLogDirsResponse::default().with_results(vec![result]))
}

/// AlterReplicaLogDirs with one directory: a replica hosted here asked into it is already there
/// (NONE, nothing moves); any other path is LOG_DIR_NOT_FOUND; a partition this broker hosts no
/// replica of is REPLICA_NOT_AVAILABLE. ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED
/// per partition).
pub(super) fn alter_replica_log_dirs(
    shared: &Arc<Shared>,
    caller: &Caller,
    r: AlterReplicaLogDirsRequest,
    version: i16,
) -> KafkaAnswer {
    let refused = caller.cluster_refusal(Operation::Alter);
    let dir = log_dir(shared);
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for d in r.dirs {
        let same_dir = std::fs::canonicalize(d.path.as_str()).is_ok_and(|p| p == dir);
        for t in d.topics {
            let partitions =
                t.partitions.iter().map(|index| {
                    let code = if let Some(status) = &refused {
                        status.code
                    } else if !shared.partitions.contains_key(&(t.name.to_string(), *index)) {
                        ErrorCode::ReplicaNotAvailable
                    } else if !same_dir {
                        ErrorCode::LogDirNotFound
                    } else {
                        ErrorCode::None
                    };
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(*index)
                        .with_error_code(kafka_code(code, ApiKey::AlterReplicaLogDirs, version))
                });
            let partitions: Vec<_> = partitions.collect();
            match results.iter_mut().find(|x| x.topic_name == t.name) {
                Some(x) => x.partitions.extend(partitions),
                None => results
                    .push(AlterReplicaLogDirTopicResult::default().with_topic_name(t.name).with_partitions(partitions)),
            }
        }
    }
    KafkaAnswer::Reply(ResponseKind::AlterReplicaLogDirs(AlterReplicaLogDirsResponse::default().with_results(results)))
}
