//! Per-topic configs: the Kafka topic configs epochfence applies, their values checked, and the
//! ones Kafka knows that epochfence does not apply, refused by name (never accepted silently).
//!
//! A topic holds only the configs set on it (its overrides); a broker applies each over its own
//! flags, which are the defaults ([`TopicConfig`]). Pure functions: the coordinator checks a
//! change with them before it journals it, the Kafka listener and the CLI name the same keys.

use std::collections::BTreeMap;

/// `min.insync.replicas`: kept by the coordinator as the topic's own field (the high watermark
/// and the ISR rules read it), and listed among its configs.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// `retention.ms`.
pub const RETENTION_MS: &str = "retention.ms";
/// `retention.bytes`.
pub const RETENTION_BYTES: &str = "retention.bytes";
/// `segment.bytes`.
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// `segment.ms`.
pub const SEGMENT_MS: &str = "segment.ms";
/// `max.message.bytes`.
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
/// `message.timestamp.type`.
pub const TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// `message.timestamp.before.max.ms`.
pub const TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
/// `message.timestamp.after.max.ms`.
pub const TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";
/// `cleanup.policy` (`delete` only).
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// `compression.type` (`producer` only).
pub const COMPRESSION_TYPE: &str = "compression.type";

/// The smallest `segment.bytes` taken: a segment must hold a batch header and some records.
pub const SEGMENT_BYTES_MIN: i64 = 1024;

/// What a value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer at least this (Kafka's LONG and INT; -1 for "no limit" where that is the min).
    Int(i64, i64),
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// One config epochfence applies per topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Kafka's topic config name.
    pub name: &'static str,
    /// The broker setting it overrides, as Kafka names it (DescribeConfigs' synonym).
    pub broker_synonym: &'static str,
    /// Its values.
    pub kind: Kind,
    /// Kafka's config type for DescribeConfigs (2 STRING, 3 INT, 5 LONG, 7 LIST).
    pub config_type: i8,
    /// What it does here.
    pub doc: &'static str,
}

/// Every config a topic may set.
pub const KEYS: &[Key] = &[
    Key {
        name: MIN_INSYNC_REPLICAS,
        broker_synonym: "min.insync.replicas",
        kind: Kind::Int(1, i32::MAX as i64),
        config_type: 3,
        doc: "An acks=all write needs this many in-sync replicas; the high watermark does not move while the ISR \
              is smaller (at most the replication factor).",
    },
    Key {
        name: RETENTION_MS,
        broker_synonym: "log.retention.ms",
        kind: Kind::Int(-1, i64::MAX),
        config_type: 5,
        doc: "Closed segments whose newest record is older than this are deleted (-1: kept whatever their age).",
    },
    Key {
        name: RETENTION_BYTES,
        broker_synonym: "log.retention.bytes",
        kind: Kind::Int(-1, i64::MAX),
        config_type: 5,
        doc: "The oldest closed segments are deleted while the log stays at least this big without them (-1: no \
              limit).",
    },
    Key {
        name: SEGMENT_BYTES,
        broker_synonym: "log.segment.bytes",
        kind: Kind::Int(SEGMENT_BYTES_MIN, i32::MAX as i64),
        config_type: 3,
        doc: "A segment rolls when the next batch would take it past this many bytes.",
    },
    Key {
        name: SEGMENT_MS,
        broker_synonym: "log.roll.ms",
        kind: Kind::Int(1, i64::MAX),
        config_type: 5,
        doc: "A segment rolls at the next append once its first batch is this old (by the broker's clock), so that \
              retention by time can delete it.",
    },
    Key {
        name: MAX_MESSAGE_BYTES,
        broker_synonym: "message.max.bytes",
        kind: Kind::Int(0, i32::MAX as i64),
        config_type: 3,
        doc: "The largest record batch a producer may write, in bytes (MESSAGE_TOO_LARGE above it).",
    },
    Key {
        name: TIMESTAMP_TYPE,
        broker_synonym: "log.message.timestamp.type",
        kind: Kind::OneOf(&["CreateTime", "LogAppendTime"]),
        config_type: 2,
        doc: "CreateTime keeps the producer's timestamps (checked against the before/after limits); LogAppendTime \
              stamps each batch with the broker's clock when it is appended.",
    },
    Key {
        name: TIMESTAMP_BEFORE_MAX_MS,
        broker_synonym: "log.message.timestamp.before.max.ms",
        kind: Kind::Int(0, i64::MAX),
        config_type: 5,
        doc: "With CreateTime: a record timestamped more than this before the broker's clock is refused \
              (INVALID_TIMESTAMP).",
    },
    Key {
        name: TIMESTAMP_AFTER_MAX_MS,
        broker_synonym: "log.message.timestamp.after.max.ms",
        kind: Kind::Int(0, i64::MAX),
        config_type: 5,
        doc: "With CreateTime: a record timestamped more than this after the broker's clock is refused \
              (INVALID_TIMESTAMP).",
    },
    Key {
        name: CLEANUP_POLICY,
        broker_synonym: "log.cleanup.policy",
        kind: Kind::OneOf(&["delete"]),
        config_type: 7,
        doc: "delete: old segments go by retention. Log compaction (compact) is not served.",
    },
    Key {
        name: COMPRESSION_TYPE,
        broker_synonym: "compression.type",
        kind: Kind::OneOf(&["producer"]),
        config_type: 2,
        doc: "producer: batches are stored as the producer compressed them (the broker does not recompress).",
    },
];

/// Kafka topic configs epochfence knows and does not apply: refused by name.
pub const NOT_APPLIED: &[&str] = &[
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.difference.max.ms",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "segment.index.bytes",
    "segment.jitter.ms",
    "unclean.leader.election.enable",
];

/// The config `name`, if a topic may set it.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Check one config: `Ok` with the value as it is stored (integers in their canonical form), or
/// why it is refused (INVALID_CONFIG), naming it.
pub fn check(name: &str, value: &str) -> Result<String, String> {
    let Some(k) = key(name) else {
        if NOT_APPLIED.contains(&name) {
            return Err(format!(
                "topic config '{name}' is a Kafka config epochfence does not apply; leave it out (the configs a \
                 topic may set: {})",
                names()
            ));
        }
        return Err(format!("'{name}' is not a topic config; the configs a topic may set: {}", names()));
    };
    match k.kind {
        Kind::Int(min, max) => match value.trim().parse::<i64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(v.to_string()),
            _ => Err(format!("{name}={value:?}: give an integer from {min} to {max}")),
        },
        Kind::OneOf(words) if words.contains(&value.trim()) => Ok(value.trim().to_string()),
        Kind::OneOf(words) => Err(match name {
            CLEANUP_POLICY => format!("{name}={value:?}: only delete is served (log compaction is not)"),
            COMPRESSION_TYPE => {
                format!("{name}={value:?}: only producer is served (the broker stores batches as compressed)")
            }
            _ => format!("{name}={value:?}: give one of {}", words.join(", ")),
        }),
    }
}

fn names() -> String {
    KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

/// Check a whole set (each config once), as stored: `min.insync.replicas` at most
/// `replication_factor`.
pub fn check_all(configs: &[(String, String)], replication_factor: i32) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, value) in configs {
        let value = check(name, value)?;
        if name == MIN_INSYNC_REPLICAS && value.parse::<i64>().is_ok_and(|v| v > i64::from(replication_factor)) {
            return Err(format!(
                "min.insync.replicas {value} is above the replication factor {replication_factor}: every acks=all \
                 write would be refused"
            ));
        }
        if out.insert(name.clone(), value).is_some() {
            return Err(format!("topic config '{name}' is given twice"));
        }
    }
    Ok(out)
}

/// What a change to a topic's configs does to one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set it to this value.
    Set(String),
    /// Remove it: the broker's default applies again.
    Delete,
}

/// A topic's configs after `ops` (in order) on `current`, checked: the whole set with
/// `replace` (Kafka's AlterConfigs: what is not named goes back to its default), else only the
/// configs named change (IncrementalAlterConfigs).
pub fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[(String, ConfigOp)],
    replace: bool,
    replication_factor: i32,
) -> Result<BTreeMap<String, String>, String> {
    let mut next = if replace { BTreeMap::new() } else { current.clone() };
    for (name, op) in ops {
        match op {
            ConfigOp::Set(value) => {
                next.insert(name.clone(), check(name, value)?);
            }
            ConfigOp::Delete => {
                if key(name).is_none() {
                    // Deleting what cannot be set is a mistake worth naming, as setting it is.
                    check(name, "")?;
                }
                next.remove(name);
            }
        }
    }
    let pairs: Vec<(String, String)> = next.into_iter().collect();
    check_all(&pairs, replication_factor)
}

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's timestamps.
    #[default]
    CreateTime,
    /// The broker's clock at append.
    LogAppendTime,
}

/// A topic's configs as a broker applies them: `None` where the broker's own setting applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicConfig {
    /// `retention.ms` (`Some(None)`: -1, no limit).
    pub retention_ms: Option<Option<i64>>,
    /// `retention.bytes` (`Some(None)`: -1, no limit).
    pub retention_bytes: Option<Option<u64>>,
    /// `segment.bytes`.
    pub segment_bytes: Option<u64>,
    /// `segment.ms`.
    pub segment_ms: Option<i64>,
    /// `max.message.bytes`.
    pub max_message_bytes: Option<usize>,
    /// `message.timestamp.type`.
    pub timestamp_type: Option<TimestampType>,
    /// `message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: Option<u64>,
    /// `message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: Option<u64>,
}

impl TopicConfig {
    /// From a topic's configs (as [`check_all`] keeps them; anything else is ignored).
    pub fn from_configs<'a>(configs: impl IntoIterator<Item = (&'a str, &'a str)>) -> TopicConfig {
        let mut t = TopicConfig::default();
        for (name, value) in configs {
            let int = value.parse::<i64>().ok();
            let limit = |v: i64| (v >= 0).then_some(v);
            match name {
                RETENTION_MS => t.retention_ms = int.map(limit),
                RETENTION_BYTES => t.retention_bytes = int.map(|v| limit(v).map(|v| v as u64)),
                SEGMENT_BYTES => t.segment_bytes = int.and_then(|v| u64::try_from(v).ok()),
                SEGMENT_MS => t.segment_ms = int,
                MAX_MESSAGE_BYTES => t.max_message_bytes = int.and_then(|v| usize::try_from(v).ok()),
                TIMESTAMP_TYPE => {
                    t.timestamp_type = Some(if value == "LogAppendTime" {
                        TimestampType::LogAppendTime
                    } else {
                        TimestampType::CreateTime
                    })
                }
                TIMESTAMP_BEFORE_MAX_MS => t.timestamp_before_max_ms = int.and_then(|v| u64::try_from(v).ok()),
                TIMESTAMP_AFTER_MAX_MS => t.timestamp_after_max_ms = int.and_then(|v| u64::try_from(v).ok()),
                _ => {}
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn applied_configs_are_checked_and_unapplied_ones_refused_by_name() {
        assert_eq!(check(RETENTION_MS, " 60000 ").unwrap(), "60000");
        assert_eq!(check(RETENTION_BYTES, "-1").unwrap(), "-1");
        assert!(check(RETENTION_BYTES, "-2").unwrap_err().contains("from -1"));
        assert!(check(SEGMENT_BYTES, "100").unwrap_err().contains("from 1024"));
        assert!(check(MAX_MESSAGE_BYTES, "big").is_err());
        assert_eq!(check(TIMESTAMP_TYPE, "LogAppendTime").unwrap(), "LogAppendTime");
        assert!(check(CLEANUP_POLICY, "compact").unwrap_err().contains("only delete"));
        assert!(check(COMPRESSION_TYPE, "zstd").unwrap_err().contains("only producer"));
        let e = check("unclean.leader.election.enable", "true").unwrap_err();
        assert!(e.contains("'unclean.leader.election.enable'") && e.contains("does not apply"), "{e}");
        assert!(check("no.such.thing", "1").unwrap_err().contains("not a topic config"));
        assert!(check_all(&pairs(&[(MIN_INSYNC_REPLICAS, "3")]), 2).unwrap_err().contains("replication factor"));
        assert!(check_all(&pairs(&[(RETENTION_MS, "1"), (RETENTION_MS, "2")]), 1).unwrap_err().contains("twice"));
    }

    #[test]
    fn incremental_changes_keep_the_rest_and_a_replacement_does_not() {
        let current = check_all(&pairs(&[(RETENTION_MS, "1000"), (SEGMENT_BYTES, "2048")]), 3).unwrap();
        let ops = vec![
            (MAX_MESSAGE_BYTES.to_string(), ConfigOp::Set("512".into())),
            (RETENTION_MS.to_string(), ConfigOp::Delete),
        ];
        let next = apply_ops(&current, &ops, false, 3).unwrap();
        assert_eq!(next, check_all(&pairs(&[(SEGMENT_BYTES, "2048"), (MAX_MESSAGE_BYTES, "512")]), 3).unwrap());
        let replaced = apply_ops(&current, &ops[..1], true, 3).unwrap();
        assert_eq!(replaced.keys().collect::<Vec<_>>(), [MAX_MESSAGE_BYTES]);
        assert!(apply_ops(&current, &[("flush.ms".into(), ConfigOp::Delete)], false, 3).is_err());
        let t = TopicConfig::from_configs(next.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!((t.segment_bytes, t.max_message_bytes, t.retention_ms), (Some(2048), Some(512), None));
        let unlimited = TopicConfig::from_configs([(RETENTION_BYTES, "-1")]);
        assert_eq!(unlimited.retention_bytes, Some(None));
    }
}
