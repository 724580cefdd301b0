//! Progress of a long run on stderr: a bar with the count done and the rate when stderr is a
//! terminal (indicatif), plain lines at every tenth of the way otherwise, nothing when quiet
//! (`--json`, or a run too short to need it).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress of `total` things (`unit`: "seeds", "records"), or of a run of unknown length.
pub struct Progress {
    shown: Shown,
    done: AtomicU64,
    /// The next count at which a plain line is printed.
    next_line_at: AtomicU64,
    total: Option<u64>,
    unit: &'static str,
    label: &'static str,
    started: Instant,
}

enum Shown {
    Bar(ProgressBar),
    Lines,
    Nothing,
}

impl Progress {
    /// Progress of `label` (`sim`, `bench`): `total` of `unit`, or unknown. `quiet`: show
    /// nothing.
    pub fn new(label: &'static str, total: Option<u64>, unit: &'static str, quiet: bool) -> Progress {
        let shown = if quiet {
            Shown::Nothing
        } else if std::io::stderr().is_terminal() {
            let bar = match total {
                Some(t) => ProgressBar::new(t).with_style(
                    ProgressStyle::with_template(&format!(
                        "{label} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, {{eta}} left)"
                    ))
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::new_spinner().with_style(
                    ProgressStyle::with_template(&format!("{label} {{spinner}} {{human_pos}} {unit} ({{per_sec}})"))
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                ),
            };
            Shown::Bar(bar)
        } else if total.is_some() {
            Shown::Lines
        } else {
            Shown::Nothing
        };
        let step = total.map_or(u64::MAX, |t| t.div_ceil(10).max(1));
        Progress {
            shown,
            done: AtomicU64::new(0),
            next_line_at: AtomicU64::new(step),
            total,
            unit,
            label,
            started: Instant::now(),
        }
    }

    /// `n` more done.
    pub fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        self.show(done);
    }

    /// `done` done in all (for a count kept elsewhere).
    pub fn set(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
        self.show(done);
    }

    fn show(&self, done: u64) {
        match &self.shown {
            Shown::Bar(bar) => bar.set_position(done),
            Shown::Lines => {
                let Some(total) = self.total else { return };
                let at = self.next_line_at.load(Ordering::Relaxed);
                if done >= at && done < total {
                    let step = total.div_ceil(10).max(1);
                    if self
                        .next_line_at
                        .compare_exchange(at, done - done % step + step, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
                        eprintln!("{}: {done}/{total} {} ({rate:.0}/s)", self.label, self.unit);
                    }
                }
            }
            Shown::Nothing => {}
        }
    }

    /// The run is over: the bar is cleared (the run's own report follows).
    pub fn finish(&self) {
        if let Shown::Bar(bar) = &self.shown {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_come_at_each_tenth_and_not_at_the_end() {
        let p = Progress { shown: Shown::Lines, ..Progress::new("t", Some(100), "seeds", true) };
        for _ in 0..100 {
            p.inc(1);
        }
        // Nine lines (10 .. 90): the run's own report says 100.
        assert_eq!(p.next_line_at.load(Ordering::Relaxed), 100);
        assert_eq!(p.done.load(Ordering::Relaxed), 100);
    }
}
