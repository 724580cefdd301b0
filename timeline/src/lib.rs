//! A picture of a run: one lane per participant (producer instance, broker, coordinator),
//! epochs and leader epochs as bands along a lane, and every write, marker, fence, refusal
//! (red, with its reason), election and crash as a mark on its lane. [`Page::render`] makes
//! one self-contained HTML page with inline SVG: no script, style sheet, font or image is
//! loaded from anywhere.
//!
//! Plain data, no I/O: the caller records what it saw, in order, and writes the string.

use std::fmt::Write as _;

/// What a mark on a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// A write that landed.
    Write,
    /// A write refused (drawn red, with its reason).
    Refused,
    /// A producer id and epoch granted.
    Grant,
    /// A fence: markers at a bumped epoch written before a grant is answered.
    Fence,
    /// A transaction marker (commit or abort).
    Marker,
    /// A leader elected.
    Election,
    /// A process crashed or was killed.
    Crash,
    /// A process paused (or froze).
    Pause,
    /// A read of the log.
    Read,
}

impl MarkKind {
    fn class(self) -> &'static str {
        match self {
            MarkKind::Write => "write",
            MarkKind::Refused => "refused",
            MarkKind::Grant => "grant",
            MarkKind::Fence => "fence",
            MarkKind::Marker => "marker",
            MarkKind::Election => "election",
            MarkKind::Crash => "crash",
            MarkKind::Pause => "pause",
            MarkKind::Read => "read",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            MarkKind::Write => "#2e7d32",
            MarkKind::Refused => "#d32f2f",
            MarkKind::Grant => "#1565c0",
            MarkKind::Fence => "#6a1b9a",
            MarkKind::Marker => "#8e24aa",
            MarkKind::Election => "#ef6c00",
            MarkKind::Crash => "#212121",
            MarkKind::Pause => "#757575",
            MarkKind::Read => "#00838f",
        }
    }
}

/// A participant's row.
#[derive(Debug, Clone)]
struct Lane {
    name: String,
    bands: Vec<Band>,
    marks: Vec<Mark>,
}

#[derive(Debug, Clone)]
struct Band {
    from: u32,
    to: Option<u32>,
    label: String,
}

#[derive(Debug, Clone)]
struct Mark {
    at: u32,
    kind: MarkKind,
    /// A few words under (or over) the mark.
    caption: String,
    /// The whole story: the mark's tooltip, and its line in the list below the picture.
    label: String,
}

/// One run's picture: lanes, and a clock of steps (each recorded event takes the next step).
#[derive(Debug, Clone)]
pub struct Timeline {
    title: String,
    lanes: Vec<Lane>,
    now: u32,
}

/// A lane's handle, from [`Timeline::lane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneId(usize);

impl Timeline {
    /// An empty timeline called `title`.
    pub fn new(title: impl Into<String>) -> Timeline {
        Timeline { title: title.into(), lanes: Vec::new(), now: 0 }
    }

    /// Add a lane (a producer instance, a broker, the coordinator), drawn in the order added.
    pub fn lane(&mut self, name: impl Into<String>) -> LaneId {
        self.lanes.push(Lane { name: name.into(), bands: Vec::new(), marks: Vec::new() });
        LaneId(self.lanes.len() - 1)
    }

    /// A mark on `lane` at the next step: `caption` (a few words) is drawn by it, `label`
    /// (the whole story: epochs, offsets, the error) is its tooltip and its line in the list
    /// below the picture.
    pub fn mark(&mut self, lane: LaneId, kind: MarkKind, caption: impl Into<String>, label: impl Into<String>) {
        self.now += 1;
        let at = self.now;
        self.lanes[lane.0].marks.push(Mark { at, kind, caption: caption.into(), label: label.into() });
    }

    /// From the next step on, `lane` holds `label` (an epoch, a leader epoch): the band before
    /// it on the lane ends here.
    pub fn band(&mut self, lane: LaneId, label: impl Into<String>) {
        let at = self.now + 1;
        let bands = &mut self.lanes[lane.0].bands;
        if let Some(last) = bands.last_mut().filter(|b| b.to.is_none()) {
            last.to = Some(at);
        }
        bands.push(Band { from: at, to: None, label: label.into() });
    }

    /// Every mark in the order recorded: (lane, kind, label).
    pub fn events(&self) -> Vec<(&str, MarkKind, &str)> {
        let mut all: Vec<(u32, &str, MarkKind, &str)> = self
            .lanes
            .iter()
            .flat_map(|l| l.marks.iter().map(move |m| (m.at, l.name.as_str(), m.kind, m.label.as_str())))
            .collect();
        all.sort_by_key(|e| e.0);
        all.into_iter().map(|(_, lane, kind, label)| (lane, kind, label)).collect()
    }

    /// The lane called `name`, added if there is none yet.
    pub fn lane_named(&mut self, name: &str) -> LaneId {
        match self.lanes.iter().position(|l| l.name == name) {
            Some(i) => LaneId(i),
            None => self.lane(name),
        }
    }

    /// Marks of `kind` so far, on every lane.
    pub fn count(&self, kind: MarkKind) -> usize {
        self.lanes.iter().flat_map(|l| &l.marks).filter(|m| m.kind == kind).count()
    }

    fn svg(&self, out: &mut String) {
        // Room for the longest lane name (bold 14px: about 8.5px a character), at least 170px.
        let longest = self.lanes.iter().map(|l| l.name.chars().count()).max().unwrap_or(0) as u32;
        let left: u32 = (longest * 17 / 2 + 20).max(170);
        const STEP: u32 = 76;
        const LANE: u32 = 96;
        const TOP: u32 = 30;
        let steps = self.now + 1;
        let width = left + STEP * steps + 40;
        let height = TOP + LANE * self.lanes.len() as u32 + 20;
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{}">"#,
            esc(&self.title)
        );
        let x = |step: u32| left + STEP * step;
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = TOP + LANE * i as u32;
            let mid = y + LANE / 2;
            let _ = write!(out, r#"<g class="lane" data-lane="{}">"#, esc(&lane.name));
            let _ = write!(
                out,
                r##"<text x="10" y="{}" class="lane-name">{}</text><line x1="{left}" y1="{mid}" x2="{}" y2="{mid}" stroke="#bbb"/>"##,
                mid + 5,
                esc(&lane.name),
                width - 20
            );
            for (j, b) in lane.bands.iter().enumerate() {
                let (x1, x2) = (x(b.from) - STEP / 2, x(b.to.unwrap_or(steps)) - STEP / 2);
                let fill = if j % 2 == 0 { "#e3f2fd" } else { "#fff3e0" };
                let _ = write!(
                    out,
                    r##"<g class="band"><rect x="{x1}" y="{}" width="{}" height="{}" fill="{fill}" stroke="#90a4ae"/><text x="{}" y="{}" class="band-label">{}</text></g>"##,
                    y + 6,
                    x2.saturating_sub(x1),
                    LANE - 12,
                    x1 + 4,
                    y + 18,
                    esc(&b.label)
                );
            }
            for m in &lane.marks {
                let cx = x(m.at);
                let colour = m.kind.colour();
                let _ = write!(out, r#"<g class="mark {}"><title>{}</title>"#, m.kind.class(), esc(&m.label));
                match m.kind {
                    MarkKind::Refused => {
                        let _ = write!(
                            out,
                            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="4"/><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="4"/>"#,
                            cx - 9,
                            mid - 9,
                            cx + 9,
                            mid + 9,
                            cx - 9,
                            mid + 9,
                            cx + 9,
                            mid - 9
                        );
                    }
                    MarkKind::Fence | MarkKind::Marker | MarkKind::Election => {
                        let _ = write!(
                            out,
                            r#"<polygon points="{cx},{} {},{mid} {cx},{} {},{mid}" fill="{colour}"/>"#,
                            mid - 10,
                            cx + 10,
                            mid + 10,
                            cx - 10
                        );
                    }
                    MarkKind::Crash | MarkKind::Pause => {
                        let _ = write!(
                            out,
                            r#"<rect x="{}" y="{}" width="16" height="16" fill="{colour}"/>"#,
                            cx - 8,
                            mid - 8
                        );
                    }
                    _ => {
                        let _ = write!(out, r#"<circle cx="{cx}" cy="{mid}" r="8" fill="{colour}"/>"#);
                    }
                }
                // Captions alternate below and above the lane, so that neighbours do not overlap.
                let y_caption = if m.at % 2 == 1 { mid + 26 } else { mid - 16 };
                let _ = write!(
                    out,
                    r#"<text x="{cx}" y="{y_caption}" text-anchor="middle" class="mark-label" fill="{colour}">{}</text></g>"#,
                    esc(&m.caption)
                );
            }
            out.push_str("</g>");
        }
        out.push_str("</svg>");
    }
}

/// A page of one or more timelines.
#[derive(Debug, Clone, Default)]
pub struct Page {
    title: String,
    intro: String,
    timelines: Vec<Timeline>,
}

impl Page {
    /// A page called `title`, opening with `intro` (plain text).
    pub fn new(title: impl Into<String>, intro: impl Into<String>) -> Page {
        Page { title: title.into(), intro: intro.into(), timelines: Vec::new() }
    }

    /// Add a timeline, drawn below the ones before it.
    pub fn push(&mut self, t: Timeline) {
        self.timelines.push(t);
    }

    /// The whole page: HTML with inline SVG and an inline style sheet, nothing loaded.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1><p>{}</p>",
            esc(&self.title),
            esc(&self.title),
            esc(&self.intro)
        );
        out.push_str(LEGEND);
        for t in &self.timelines {
            let _ = write!(out, "<section><h2>{}</h2>", esc(&t.title));
            t.svg(&mut out);
            out.push_str("<ol class=\"events\">");
            let mut events: Vec<(u32, &str, &Mark)> =
                t.lanes.iter().flat_map(|l| l.marks.iter().map(move |m| (m.at, l.name.as_str(), m))).collect();
            events.sort_by_key(|(at, ..)| *at);
            for (_, lane, m) in events {
                let _ = write!(out, "<li class=\"{}\"><b>{}</b>: {}</li>", m.kind.class(), esc(lane), esc(&m.label));
            }
            out.push_str("</ol></section>");
        }
        out.push_str("</body></html>\n");
        out
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}svg{border:1px solid #ddd;background:#fff}\
.lane-name{font-weight:bold;font-size:14px}.band-label{font-size:12px;fill:#37474f}\
.mark-label{font-size:11px}.legend span{display:inline-block;margin-right:14px}\
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}\
.events li.refused{color:#d32f2f;font-weight:bold}";

const LEGEND: &str = "<p class=\"legend\">\
<span><i style=\"background:#2e7d32\"></i>write landed</span>\
<span><i style=\"background:#d32f2f\"></i>write refused (with its reason)</span>\
<span><i style=\"background:#1565c0\"></i>epoch granted</span>\
<span><i style=\"background:#6a1b9a\"></i>fence / marker</span>\
<span><i style=\"background:#ef6c00\"></i>election</span>\
<span><i style=\"background:#212121\"></i>crash or pause</span>\
<span><i style=\"background:#e3f2fd;border:1px solid #90a4ae\"></i>epoch held (band)</span></p>";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zombie() -> Timeline {
        let mut t = Timeline::new("with fencing");
        let a = t.lane("producer A");
        let b = t.lane("producer B");
        let broker = t.lane("broker 1");
        t.band(a, "epoch 0");
        t.mark(a, MarkKind::Grant, "grant epoch 0", "A granted epoch 0");
        t.mark(broker, MarkKind::Write, "offset 0", "A's write at epoch 0 <offset 0>");
        t.band(b, "epoch 1");
        t.mark(broker, MarkKind::Fence, "fence @ 1", "fence marker at epoch 1");
        t.mark(a, MarkKind::Refused, "REFUSED", "refused: epoch 0 < 1");
        t
    }

    #[test]
    fn a_page_has_a_lane_per_participant_and_the_refusal_in_red() {
        let mut page = Page::new("zombie", "a zombie producer");
        page.push(zombie());
        let html = page.render();
        assert_eq!(html.matches("<g class=\"lane\"").count(), 3);
        assert!(html.contains("<g class=\"mark refused\"><title>refused: epoch 0 &lt; 1</title>"), "{html}");
        assert!(html.contains("stroke=\"#d32f2f\""));
        assert!(html.contains("&lt;offset 0&gt;"), "labels are escaped");
        assert_eq!(zombie().count(MarkKind::Refused), 1);
        // Nothing is loaded from anywhere: no script, no external style sheet, font or image.
        for banned in ["<script", "<link", "<img", "@import", "url(", "src="] {
            assert!(!html.contains(banned), "{banned}");
        }
    }

    #[test]
    fn a_new_band_ends_the_one_before_it() {
        let mut t = Timeline::new("bands");
        let l = t.lane("broker");
        t.band(l, "leader epoch 0");
        t.mark(l, MarkKind::Write, "w", "w");
        t.band(l, "leader epoch 1");
        t.mark(l, MarkKind::Election, "e", "e");
        let bands = &t.lanes[0].bands;
        assert_eq!((bands[0].from, bands[0].to, bands[1].from, bands[1].to), (1, Some(2), 2, None));
    }
}
