//! A run's events file (docs/EVENTS.md) drawn as a timeline: a lane per coordinator replica,
//! per broker, per producer instance (its transactional id, producer id and client, with its
//! epochs as bands) and per group member (its generations as bands), each event a mark on the
//! lane it concerns. Plain data in, a page out: no I/O.

use std::collections::HashMap;

use serde_json::Value;
use timeline::{LaneId, MarkKind, Page, Timeline};

fn s<'a>(e: &'a Value, k: &str) -> &'a str {
    e.get(k).and_then(Value::as_str).unwrap_or("")
}

fn i(e: &Value, k: &str) -> i64 {
    e.get(k).and_then(Value::as_i64).unwrap_or(-1)
}

fn b(e: &Value, k: &str) -> bool {
    e.get(k).and_then(Value::as_bool).unwrap_or(false)
}

/// Every field but the three every line has, as `k=v` words: a mark's whole story.
fn story(e: &Value) -> String {
    let mut out = format!("{}: {}", s(e, "process"), s(e, "event"));
    if let Some(map) = e.as_object() {
        for (k, v) in map {
            if matches!(k.as_str(), "ts_ms" | "process" | "event") {
                continue;
            }
            match v {
                Value::String(t) if t.is_empty() => {}
                Value::String(t) => out.push_str(&format!(" {k}={t}")),
                other => out.push_str(&format!(" {k}={other}")),
            }
        }
    }
    out
}

/// The lanes as they are made, and which producer instance holds which (id, epoch).
struct Lanes {
    t: Timeline,
    /// (producer id, epoch) -> the producer instance's lane.
    instances: HashMap<(i64, i64), LaneId>,
    /// transactional id -> its latest instance's lane.
    latest: HashMap<String, LaneId>,
    members: HashMap<(String, String), (LaneId, i64)>,
}

impl Lanes {
    fn process(&mut self, name: &str) -> LaneId {
        self.t.lane_named(name)
    }

    fn instance(&self, e: &Value) -> Option<LaneId> {
        self.instances.get(&(i(e, "producer_id"), i(e, "producer_epoch"))).copied()
    }
}

/// The page of `events` (a run's lines, in the file's order), called `title`.
pub fn page(events: &[Value], title: &str, intro: &str) -> Page {
    // Who each producer instance is: what the Kafka listener saw of the client it answered.
    let mut clients: HashMap<(i64, i64), String> = HashMap::new();
    for e in events.iter().filter(|e| s(e, "event") == "kafka producer initialised") {
        clients.insert(
            (i(e, "producer_id"), i(e, "epoch")),
            format!("client {} at {}", s(e, "client_id"), s(e, "client_address")),
        );
    }
    let mut lanes =
        Lanes { t: Timeline::new(title), instances: HashMap::new(), latest: HashMap::new(), members: HashMap::new() };
    // Process lanes first, coordinators before brokers (by id), so the page reads top down:
    // every process that wrote an event, and every broker an event names.
    let mut processes: Vec<String> = Vec::new();
    for e in events {
        processes.push(s(e, "process").to_string());
        match s(e, "event") {
            "broker registered" => processes.push(format!("broker {}", i(e, "broker_id"))),
            "leader elected" if i(e, "leader") >= 0 => processes.push(format!("broker {}", i(e, "leader"))),
            "fault" => processes.extend(s(e, "target").split(',').filter(|t| !t.is_empty()).map(str::to_string)),
            _ => {}
        }
    }
    processes.retain(|p| !p.is_empty() && p != "cluster");
    processes.sort_by(|a, b| {
        let key = |p: &String| (!p.starts_with("coordinator"), p.trim_start_matches("broker ").parse::<i64>().ok());
        key(a).cmp(&key(b)).then_with(|| a.cmp(b))
    });
    processes.dedup();
    for p in &processes {
        lanes.process(p);
    }
    for e in events {
        let process = s(e, "process");
        let label = story(e);
        match s(e, "event") {
            "granted" => {
                let (tid, pid, epoch) = (s(e, "transactional_id"), i(e, "producer_id"), i(e, "epoch"));
                let transactional = !tid.is_empty() && tid != "-";
                let who =
                    if !transactional { format!("producer id {pid}") } else { format!("{tid} (producer id {pid})") };
                let name = match clients.get(&(pid, epoch)) {
                    Some(c) => format!("{who}, {c}"),
                    None => who,
                };
                let fenced = i(e, "fenced_partitions");
                if let Some(old) = lanes.latest.get(tid).copied().filter(|_| transactional && fenced > 0) {
                    lanes.t.mark(old, MarkKind::Fence, format!("fenced by epoch {epoch}"), label.clone());
                }
                let lane = lanes.t.lane(name);
                lanes.t.band(lane, format!("epoch {epoch}"));
                lanes.t.mark(lane, MarkKind::Grant, format!("granted epoch {epoch}"), label);
                lanes.instances.insert((pid, epoch), lane);
                if transactional {
                    lanes.latest.insert(tid.to_string(), lane);
                }
            }
            "transaction ended" | "idle transactional id fenced" => {
                let lane = lanes.instance(e).unwrap_or_else(|| lanes.process(process));
                let caption = if s(e, "event") != "transaction ended" {
                    "fenced while idle".to_string()
                } else if b(e, "timed_out") {
                    "timed out: aborted".to_string()
                } else if b(e, "commit") {
                    format!("commit ({} markers)", i(e, "markers"))
                } else {
                    format!("abort ({} markers)", i(e, "markers"))
                };
                lanes.t.mark(lane, MarkKind::Marker, caption, label);
                let next = (i(e, "next_producer_id"), i(e, "epoch"));
                if next != (i(e, "producer_id"), i(e, "producer_epoch")) {
                    lanes.t.band(lane, format!("epoch {}", next.1));
                    lanes.instances.insert(next, lane);
                }
            }
            "write refused" | "refused by the coordinator" | "kafka init refused" => {
                let lane = lanes.instance(e).unwrap_or_else(|| lanes.process(process));
                let reason = match s(e, "reason") {
                    "" => "refused",
                    r => r,
                };
                lanes.t.mark(lane, MarkKind::Refused, reason.to_string(), label);
            }
            "refused replication from a stale leader" => {
                let lane = lanes.process(process);
                lanes.t.mark(lane, MarkKind::Refused, format!("stale leader {}", i(e, "sender")), label);
            }
            "leader elected" => {
                let (topic, partition, leader) = (s(e, "topic"), i(e, "partition"), i(e, "leader"));
                let (lane, caption) = if leader >= 0 {
                    (lanes.process(&format!("broker {leader}")), format!("leads {topic}-{partition}"))
                } else {
                    (lanes.process(process), format!("{topic}-{partition} offline"))
                };
                // A mark, not a band: a broker leads many partitions, each at its own epoch.
                lanes.t.mark(lane, MarkKind::Election, format!("{caption} (epoch {})", i(e, "leader_epoch")), label);
            }
            "unclean election" => {
                let lane = lanes.process(process);
                lanes.t.mark(lane, MarkKind::Election, "unclean election", label);
            }
            "isr changed" => {
                let lane = lanes.process(process);
                let caption = format!("ISR {}-{}: {}", s(e, "topic"), i(e, "partition"), s(e, "isr"));
                lanes.t.mark(lane, MarkKind::Election, caption, label);
            }
            "broker registered" => {
                let lane = lanes.process(&format!("broker {}", i(e, "broker_id")));
                lanes.t.mark(lane, MarkKind::Grant, format!("registered (epoch {})", i(e, "broker_epoch")), label);
            }
            "group generation" => {
                let (group, member) = (s(e, "group").to_string(), s(e, "member_id").to_string());
                if member.is_empty() {
                    continue;
                }
                let generation = i(e, "generation");
                let key = (group.clone(), member.clone());
                let lane = match lanes.members.get(&key) {
                    Some((lane, _)) => *lane,
                    None => {
                        let client = s(e, "client_id");
                        let lane = lanes.t.lane(format!("member {member} of {group} (client {client})"));
                        lanes.members.insert(key.clone(), (lane, -1));
                        lane
                    }
                };
                let seen = lanes.members.get(&key).map_or(-1, |(_, g)| *g);
                if seen != generation {
                    lanes.t.band(lane, format!("generation {generation}"));
                    lanes.t.mark(lane, MarkKind::Grant, format!("joined generation {generation}"), label);
                    lanes.members.insert(key, (lane, generation));
                }
            }
            "refused by the group coordinator" => {
                let key = (s(e, "group").to_string(), s(e, "member_id").to_string());
                let lane = lanes.members.get(&key).map(|(l, _)| *l).unwrap_or_else(|| lanes.process(process));
                lanes.t.mark(lane, MarkKind::Refused, s(e, "reason").to_string(), label);
            }
            "fault" => {
                let target = s(e, "target");
                let action = s(e, "action");
                let kind = match action {
                    "kill" | "restart" | "exited" => MarkKind::Crash,
                    _ => MarkKind::Pause,
                };
                if target.is_empty() {
                    continue;
                }
                for t in target.split(',') {
                    let lane = lanes.process(t);
                    lanes.t.mark(lane, kind, action.to_string(), label.clone());
                }
            }
            "topic created" | "topic deleted" => {
                let lane = lanes.process(process);
                lanes.t.mark(lane, MarkKind::Election, format!("{} {}", s(e, "event"), s(e, "topic")), label);
            }
            _ => {}
        }
    }
    let mut page = Page::new(title, intro);
    page.push(lanes.t);
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_zombie_run_draws_its_instances_fences_refusals_elections_and_faults() {
        let events = vec![
            json!({"ts_ms": 1, "process": "coordinator", "event": "broker registered", "broker_id": 1, "broker_epoch": 3}),
            json!({"ts_ms": 2, "process": "coordinator", "event": "leader elected", "topic": "t", "partition": 0, "leader": 1, "leader_epoch": 0, "isr": "1,2"}),
            json!({"ts_ms": 3, "process": "coordinator", "event": "granted", "transactional_id": "app", "producer_id": 5, "epoch": 0, "fenced_partitions": 0}),
            json!({"ts_ms": 3, "process": "broker 1", "event": "kafka producer initialised", "transactional_id": "app", "producer_id": 5, "epoch": 0, "client_id": "rdkafka", "client_address": "127.0.0.1:5000"}),
            json!({"ts_ms": 4, "process": "coordinator", "event": "transaction ended", "transactional_id": "app", "producer_id": 5, "producer_epoch": 0, "next_producer_id": 5, "epoch": 1, "commit": true, "markers": 1}),
            json!({"ts_ms": 5, "process": "cluster", "event": "fault", "action": "pause", "target": "broker 1"}),
            json!({"ts_ms": 6, "process": "coordinator", "event": "granted", "transactional_id": "app", "producer_id": 5, "epoch": 2, "fenced_partitions": 1}),
            json!({"ts_ms": 7, "process": "broker 1", "event": "write refused", "reason": "producer_epoch", "topic": "t", "partition": 0, "producer_id": 5, "producer_epoch": 1}),
            json!({"ts_ms": 8, "process": "coordinator", "event": "group generation", "group": "g", "generation": 1, "member_id": "m-1", "client_id": "c"}),
            json!({"ts_ms": 9, "process": "coordinator", "event": "refused by the group coordinator", "group": "g", "member_id": "m-1", "reason": "ILLEGAL_GENERATION"}),
        ];
        let page = page(&events, "run", "intro");
        let html = page.render();
        // The first instance: its client, its commit, the fence, and the zombie's refused write
        // (carrying the epoch its commit bumped to) on its own lane.
        assert!(html.contains("app (producer id 5), client rdkafka at 127.0.0.1:5000"), "{html}");
        assert!(html.contains("fenced by epoch 2"));
        assert!(html.contains("commit (1 markers)"));
        assert!(html.contains("member m-1 of g (client c)"));
        assert!(html.contains("leads t-0"));
        let html2 = super::page(&events, "run", "intro").render();
        assert_eq!(html, html2, "the same events draw the same page");
        for (needle, what) in [
            ("class=\"refused\"", "refused marks"),
            ("class=\"fence\"", "a fence"),
            ("class=\"pause\"", "the pause"),
            ("class=\"election\"", "the election"),
        ] {
            assert!(html.contains(needle), "{what} missing: {html}");
        }
        // The zombie's refusal is on the first instance's lane, not on the broker's.
        let list = &html[html.find("<ol class=\"events\">").unwrap()..];
        assert!(
            list.contains("<b>app (producer id 5), client rdkafka at 127.0.0.1:5000</b>: broker 1: write refused"),
            "{list}"
        );
    }
}
