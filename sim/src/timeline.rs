//! A seed's timeline: the trace of one run ([`crate::Outcome::trace`], recorded with
//! `Config::verbose`) drawn as [`timeline::Timeline`] lanes, one per process (coordinator,
//! brokers, producers) and one for the network and clocks, in the trace's order. Producer
//! epochs and leaderships are bands; grants, appends, markers, refusals, fences, elections,
//! crashes and pauses are marks. Routine lines (log ends learnt, catching-up retries) are left
//! out.

use timeline::{MarkKind, Timeline};

/// What one trace line becomes: (lane, kind, caption), and the (lane, label) of a band it starts.
type Drawn = (String, MarkKind, String, Option<(String, String)>);

/// What one trace line becomes, if anything.
fn classify(line: &str) -> Option<Drawn> {
    let (actor, rest) = match line.split_once(": ") {
        Some((a, r)) if !a.contains(' ') || a.split(' ').count() == 2 => (a.to_string(), r),
        _ => (String::new(), line),
    };
    // Faults are written as "broker 1 crashed; ...", "leader 2 paused until 90", ...
    let words: Vec<&str> = line.split(' ').collect();
    let process = |kind: &str, id: &str| format!("{kind} {id}");
    if words.len() >= 3 && ["broker", "leader", "producer", "coordinator"].contains(&words[0]) {
        let (lane, verb) = match words[0] {
            "coordinator" => ("coordinator".to_string(), words[1]),
            "leader" => (process("broker", words[1]), words[2]),
            w => (process(w, words[1]), words[2]),
        };
        let kind = match verb {
            "crashed" | "crashed;" | "loses" => Some((MarkKind::Crash, "crash")),
            "paused" => Some((MarkKind::Pause, "pause")),
            _ => None,
        };
        if let Some((kind, caption)) = kind {
            return Some((lane, kind, caption.to_string(), None));
        }
    }
    if actor == "network" || actor.starts_with("host") {
        let caption = if rest.contains("clock") { "clock jump" } else { "network fault" };
        return Some(("network and clocks".to_string(), MarkKind::Pause, caption.to_string(), None));
    }
    if actor.is_empty() {
        return None;
    }
    if actor == "coordinator" {
        if rest.starts_with("elected") {
            // "elected (why): broker B leads partition P at epoch E, ..."
            let after = rest.split_once("): ")?.1.strip_prefix("broker ")?;
            let broker = after.split(' ').next()?;
            let partition = after.split("partition ").nth(1)?.split(' ').next()?;
            let epoch = after.split("at epoch ").nth(1)?.split(',').next()?;
            let band = (format!("broker {broker}"), format!("leads p{partition} at leader epoch {epoch}"));
            return Some((actor, MarkKind::Election, format!("p{partition}: broker {broker}"), Some(band)));
        }
        if rest.contains(" granted pid ") {
            let caption = rest.split(" granted ").nth(1)?.split(',').next()?.to_string();
            return Some((actor, MarkKind::Grant, caption, None));
        }
        if rest.contains("timed out") {
            return Some((actor, MarkKind::Fence, "txn timed out".to_string(), None));
        }
        if rest.contains(" commits pid ") || rest.contains(" aborts pid ") {
            let verb = if rest.contains(" commits ") { "commit" } else { "abort" };
            return Some((actor, MarkKind::Marker, verb.to_string(), None));
        }
        return None;
    }
    if actor.starts_with("broker") {
        if rest.starts_with("appended") {
            let offset = rest.split("at offset ").nth(1).unwrap_or("?");
            return Some((actor, MarkKind::Write, format!("offset {offset}"), None));
        }
        if rest.starts_with("marker") {
            return Some((actor, MarkKind::Marker, "marker".to_string(), None));
        }
        if rest.starts_with("refused producer") {
            return Some((actor, MarkKind::Refused, "REFUSED producer".to_string(), None));
        }
        return None;
    }
    if actor.starts_with("producer") {
        if let Some(granted) = rest
            .strip_prefix("init answered Some((")
            .or_else(|| rest.strip_prefix("transaction ended, continuing with Some(("))
        {
            let (pid, epoch) = granted.trim_end_matches("))").split_once(", ")?;
            let band = (actor.clone(), format!("pid {pid} epoch {epoch}"));
            return Some((actor, MarkKind::Grant, format!("epoch {epoch}"), Some(band)));
        }
        if rest.starts_with("fenced") {
            return Some((actor, MarkKind::Refused, "FENCED".to_string(), None));
        }
        if rest.starts_with("EndTxn") {
            return Some((actor, MarkKind::Marker, "EndTxn".to_string(), None));
        }
        if rest.starts_with("restart") {
            return Some((actor, MarkKind::Crash, "restart".to_string(), None));
        }
        return None;
    }
    None
}

/// Seed `seed`'s run drawn from its trace (lines `[tick] what`).
pub fn timeline_of(seed: u64, trace: &str) -> Timeline {
    let mut t = Timeline::new(format!("sim seed {seed}"));
    // Lanes in a fixed order: the coordinator, brokers, producers, then the network.
    let mut names: Vec<String> = Vec::new();
    let mut events = Vec::new();
    for raw in trace.lines() {
        let Some((tick, line)) = raw.strip_prefix('[').and_then(|r| r.split_once("] ")) else { continue };
        if let Some(e) = classify(line) {
            if !names.contains(&e.0) {
                names.push(e.0.clone());
            }
            events.push((tick.trim().to_string(), line.to_string(), e));
        }
    }
    let rank = |n: &str| match n.split(' ').next() {
        Some("coordinator") => 0,
        Some("broker") => 1,
        Some("producer") => 2,
        _ => 3,
    };
    names.sort_by_key(|n| (rank(n), n.clone()));
    for n in &names {
        t.lane(n);
    }
    for (tick, line, (lane, kind, caption, band)) in events {
        if let Some((band_lane, label)) = band {
            let l = t.lane_named(&band_lane);
            t.band(l, label);
        }
        let l = t.lane_named(&lane);
        t.mark(l, kind, caption, format!("tick {tick}: {line}"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{run, Config};

    /// The lines the issue names: crashes, pauses and elections.
    fn is_fault(line: &str) -> bool {
        line.contains(" crashed")
            || line.contains("loses power")
            || line.contains(" paused until")
            || line.contains("elected (")
    }

    #[test]
    fn a_seeds_timeline_shows_its_faults_in_the_traces_order() {
        let out = run(32, Config { verbose: true, ..Config::default() });
        let t = timeline_of(32, &out.trace);
        let count = |kind: MarkKind| t.events().iter().filter(|e| e.1 == kind).count();
        assert!(count(MarkKind::Crash) > 0 && count(MarkKind::Pause) > 0 && count(MarkKind::Election) > 0);
        // Every crash, pause and election line of the trace is a mark, in the trace's order.
        let wanted: Vec<String> = out
            .trace
            .lines()
            .filter(|l| is_fault(l))
            .map(|l| {
                let (tick, line) = l.strip_prefix('[').unwrap().split_once("] ").unwrap();
                format!("tick {}: {line}", tick.trim())
            })
            .collect();
        let drawn: Vec<String> = t.events().iter().map(|e| e.2.to_string()).filter(|l| is_fault(l)).collect();
        assert!(!wanted.is_empty());
        assert_eq!(drawn, wanted);
        assert!(count(MarkKind::Refused) > 0, "fenced writes are refusals");
    }
}
