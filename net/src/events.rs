//! The fencing events file: every `tracing` event under the target `epochfence::fencing` (at
//! info or above) or `epochfence::decisions` (any level) appended as one JSON object per line,
//! for `cluster timeline` and any tool that reads a run.
//!
//! Each line is `{"ts_ms": <Unix time in ms>, "process": "<who>", "event": "<message>", ...}`
//! with the event's fields beside those three (keys in no particular order): integers and
//! booleans as JSON numbers and booleans, everything else as strings. The file is opened for appending, and each line is one
//! `write` of a whole line, so several processes (a cluster's coordinator, its brokers, the
//! `cluster` supervisor) can share one file: the kernel places each append at the end. The
//! format is documented in docs/EVENTS.md.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// The target of every fencing event (fences, grants, refusals), written at info or above.
pub const TARGET: &str = "epochfence::fencing";
/// The target of the coordinator's other decisions (transaction ends, elections, ISR changes,
/// group generations), written at every level: the frequent ones are at debug, to keep a busy
/// process's stderr quiet, and belong in the file all the same.
pub const DECISIONS: &str = "epochfence::decisions";

/// Whether an event of `metadata` goes to the file: the filter the file's layer is given (a
/// filter of its own, so that the other layers still see every other event).
pub fn wanted(metadata: &tracing::Metadata<'_>) -> bool {
    // Fences and decisions are at info or above; the retriable refusals a producer may meet
    // many times in a row (not the leader, not enough replicas) are at debug, and stay out.
    (metadata.target() == TARGET && *metadata.level() <= tracing::Level::INFO) || metadata.target() == DECISIONS
}

/// A `tracing` layer that appends fencing events to a file.
pub struct EventsFile {
    process: String,
    file: Mutex<std::fs::File>,
}

impl EventsFile {
    /// Open `path` for appending (created if missing); `process` names the writer in every
    /// line ("coordinator", "broker 2").
    pub fn open(path: &Path, process: &str) -> std::io::Result<EventsFile> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventsFile { process: process.to_string(), file: Mutex::new(file) })
    }

    /// Append one event made of `event` and `fields` (written as [`line`] writes them).
    pub fn append(&self, event: &str, fields: serde_json::Map<String, serde_json::Value>) {
        let text = line(&self.process, event, fields);
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // A lost event must not stop a server: the file is a record, not a duty.
        let _ = file.write_all(text.as_bytes());
    }
}

/// One event as its line: `ts_ms`, `process` and `event`, and `fields` (none of which may
/// replace those three), then `\n`.
pub fn line(process: &str, event: &str, fields: serde_json::Map<String, serde_json::Value>) -> String {
    let ts_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut map = serde_json::Map::new();
    map.insert("ts_ms".into(), ts_ms.into());
    map.insert("process".into(), process.into());
    map.insert("event".into(), event.into());
    for (k, v) in fields {
        if !map.contains_key(&k) {
            map.insert(k, v);
        }
    }
    let mut text = serde_json::Value::Object(map).to_string();
    text.push('\n');
    text
}

#[derive(Default)]
struct Fields {
    message: String,
    map: serde_json::Map<String, serde_json::Value>,
}

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.map.insert(field.name().into(), value.into());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.map.insert(field.name().into(), format!("{value:?}").into());
        }
    }
}

impl EventsFile {
    /// This file as a layer with its own filter ([`wanted`]).
    pub fn layer<S>(self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        self.with_filter(tracing_subscriber::filter::filter_fn(wanted))
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for EventsFile {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        // Fences and decisions are at info or above; the retriable refusals a producer may
        // meet many times in a row (a sequence gap, a leader moving) are at debug, and stay out.
        metadata.target() == TARGET && *metadata.level() <= tracing::Level::INFO
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !wanted(event.metadata()) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.append(&fields.message, fields.map);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    struct Counter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn fencing_events_at_info_or_above_are_appended_as_json_lines_and_others_are_not() {
        let dir = std::env::temp_dir().join(format!("epochfence-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&path);
        // Beside it, a layer counting every event: the file's filter must not hide any from it.
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Counter(seen.clone());
        let subscriber =
            tracing_subscriber::registry().with(EventsFile::open(&path, "broker 2").unwrap().layer()).with(counter);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "epochfence::fencing", topic = "t", partition = 1, producer_epoch = 3i16, fenced = true, error = %"stale", "write refused");
            tracing::info!(target: "epochfence::other", "not a fencing event");
            tracing::debug!(target: "epochfence::fencing", reason = "sequence", "write refused");
            tracing::warn!(target: "epochfence::fencing", reason = "leader_epoch", "refused replication from a stale leader");
            tracing::debug!(target: "epochfence::decisions", commit = true, "transaction ended");
        });
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 5, "every event reaches the other layers");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0]["process"], "broker 2");
        assert_eq!(lines[0]["event"], "write refused");
        assert_eq!(lines[0]["topic"], "t");
        assert_eq!(lines[0]["partition"], 1);
        assert_eq!(lines[0]["producer_epoch"], 3);
        assert_eq!(lines[0]["fenced"], true);
        assert_eq!(lines[0]["error"], "stale");
        assert!(lines[0]["ts_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(lines[1]["reason"], "leader_epoch");
        assert_eq!(lines[1]["event"], "refused replication from a stale leader");
        assert_eq!(lines[2]["event"], "transaction ended", "decisions at debug are written too");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
