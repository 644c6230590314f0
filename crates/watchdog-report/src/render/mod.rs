//! Drawing a [`Recording`] as one SVG image, or a self-contained HTML page around it.
//!
//! The image has a header (the verdict's summary as the title, the run's facts and
//! the evidence) and one panel per resource: usage over time (a step line over a
//! light area), the limit as a dashed line, each alert as a vertical line with a
//! marker and a dashed projection to the predicted exhaustion point
//! (`t + predicted_s`, at the limit), acknowledgments and the exit as vertical
//! lines, each labelled in a band above the plot so labels never cover the data.
//! All panels share the time axis, so events line up across them.
//!
//! # Why the `svg` crate and not `plotters`
//!
//! `plotters` (with `default-features = false, features = ["svg_backend",
//! "line_series"]`) was checked first: its SVG backend writes bare `<polyline>`,
//! `<rect>` and `<text>` elements with no way to set an `id`, a `class`, a `data-`
//! attribute, a `<title>` tooltip or a `stroke-dasharray` (its dashed series are
//! many short segments). The report's elements must be findable by tests, by a
//! user's CSS and by tools (`<g class="panel" data-resource="cgroup_memory">`,
//! `<line class="alert">`), so it would have needed post-processing of its output.
//! The `svg` crate is a small element builder with no dependencies that escapes
//! text and attribute values; the layout (scales, ticks, downsampling) is ours and
//! small. Element ids and classes are part of the output's contract: see
//! [`crate`]'s docs.

pub(crate) mod axis;
pub mod compare;
mod path;

use std::fmt::Write as _;

use svg::Document;
use svg::node::element::{
    Circle, ClipPath, Definitions, Group, Line, Path as SvgPath, Rectangle, TSpan, Text, Title,
};
use watchdog_types::{Unit, VerdictKind};

use crate::recording::{EventKind, Recording, UNLIMITED};
use axis::Scale;
use path::StepPath;

/// Width of the image in pixels.
const WIDTH: f64 = 1100.0;
/// Left margin (value labels).
const LEFT: f64 = 86.0;
/// Right margin.
const RIGHT: f64 = 28.0;
/// Height of a panel's plot area.
const PLOT_H: f64 = 200.0;
/// Panel title line.
const PANEL_TITLE_H: f64 = 24.0;
/// One row of event labels above the plot.
const LABEL_ROW_H: f64 = 14.0;
/// Time labels under the plot.
const X_AXIS_H: f64 = 30.0;
/// Panels in reading order: resources that alerted first, then the fullest; ties keep
/// the recording's order.
fn panel_order(rec: &Recording) -> Vec<usize> {
    let alerted = |i: usize| {
        rec.events.iter().any(|e| match &e.kind {
            EventKind::Alert(a) => rec.resource_index(&a.resource) == Some(i),
            _ => false,
        })
    };
    let fullest = |i: usize| {
        rec.series.get(i).map_or(0.0, |points| {
            points
                .iter()
                .filter(|p| p.limit != crate::recording::UNLIMITED && p.limit > 0)
                .map(|p| p.used as f64 / p.limit as f64)
                .fold(0.0, f64::max)
        })
    };
    let mut order: Vec<usize> = (0..rec.resources.len()).collect();
    order.sort_by(|&a, &b| {
        alerted(b)
            .cmp(&alerted(a))
            .then(fullest(b).total_cmp(&fullest(a)))
    });
    order
}

/// Space between panels.
const PANEL_GAP: f64 = 14.0;
/// At most this many rows of event labels; more labels share the last row.
const MAX_LABEL_ROWS: usize = 4;
/// A projection may widen the time axis by at most this fraction of the data's span.
const MAX_PROJECTION_FRACTION: f64 = 0.35;

const FONT: &str = "DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif";
const COLOR_TEXT: &str = "#1f2328";
const COLOR_MUTED: &str = "#57606a";
const COLOR_GRID: &str = "#e4e7eb";
const COLOR_USAGE: &str = "#1f6feb";
const COLOR_LIMIT: &str = "#b42318";
const COLOR_ALERT: &str = "#d9480f";
const COLOR_ACK: &str = "#2b8a3e";
const COLOR_EXIT: &str = "#343a40";

/// The title of a report: the verdict's summary, else its name, else "watchdog recording".
pub fn title(rec: &Recording) -> String {
    if let Some(summary) = rec
        .verdict_summary
        .as_deref()
        .filter(|s| !s.trim().is_empty())
    {
        return summary.trim().to_string();
    }
    let Some(name) = rec.verdict.as_deref() else {
        return "watchdog recording".to_string();
    };
    match name.parse::<VerdictKind>() {
        Ok(VerdictKind::Exited) => "the target exited normally".to_string(),
        Ok(VerdictKind::OomKill) => "the target was killed by the kernel's OOM killer".to_string(),
        Ok(VerdictKind::Signal) => "the target was killed by a signal".to_string(),
        Ok(VerdictKind::DiskFull) => "the disk was full when the target exited".to_string(),
        Ok(VerdictKind::RuntimeLimit) => "the target reached its runtime limit".to_string(),
        Ok(VerdictKind::GpuOom) => {
            "the GPU was at its memory limit when the target exited (a likely CUDA out-of-memory)"
                .to_string()
        }
        Ok(VerdictKind::Cancelled) => "the scheduler cancelled the job (scancel)".to_string(),
        Ok(VerdictKind::Preempted) => "the job was preempted".to_string(),
        Ok(VerdictKind::Unknown) => {
            "the target exited for a reason the watchdog cannot tell".to_string()
        }
        Ok(VerdictKind::Crash | VerdictKind::WatchdogSignal) | Err(_) => format!("verdict: {name}"),
    }
}

/// Rough width of a text in pixels (no font metrics here; sans-serif averages ~0.56 em).
fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars().count() as f64 * font_size * 0.56
}

/// Splits `text` into lines of at most `max_chars` characters, at spaces.
fn wrap(text: &str, max_chars: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > max_chars {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `text` cut to at most `max` characters, ending in `…` when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn px(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn text(class: &str, x: f64, y: f64, content: impl Into<String>) -> Text {
    Text::new(content.into())
        .set("class", class)
        .set("x", px(x))
        .set("y", px(y))
}

/// A thin grid line from (x1, y1) to (x2, y2).
fn grid_line(x1: f64, x2: f64, y1: f64, y2: f64) -> Line {
    Line::new()
        .set("class", "grid")
        .set("x1", px(x1))
        .set("x2", px(x2))
        .set("y1", px(y1))
        .set("y2", px(y2))
        .set("stroke", COLOR_GRID)
}

fn vline(class: &str, x: f64, y0: f64, y1: f64, color: &str) -> Line {
    Line::new()
        .set("class", class)
        .set("x1", px(x))
        .set("x2", px(x))
        .set("y1", px(y0))
        .set("y2", px(y1))
        .set("stroke", color)
        .set("stroke-width", 1.5)
}

/// One labelled vertical marker (alert, ack, exit) in a panel.
struct Marker {
    class: &'static str,
    t_s: f64,
    color: &'static str,
    label: String,
    tooltip: String,
    /// A vertical line across the plot (events) or only a tick from the label down
    /// to this value (a predicted exhaustion point, at the limit).
    point_at: Option<u64>,
}

/// A placed label: its row in the band above the plot and its anchor.
struct PlacedLabel {
    row: usize,
    x: f64,
    anchor_end: bool,
}

/// Places labels in rows so that none overlaps another in the same row.
fn place_labels(markers: &[Marker], xs: &Scale, plot_right: f64) -> (Vec<PlacedLabel>, usize) {
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut placed = Vec::with_capacity(markers.len());
    for m in markers {
        let x = xs.map(m.t_s).min(plot_right);
        let w = text_width(&m.label, 11.0);
        let anchor_end = x + 4.0 + w > plot_right;
        let (lo, hi) = if anchor_end {
            (x - 4.0 - w, x)
        } else {
            (x, x + 4.0 + w)
        };
        let row = rows
            .iter()
            .position(|r| r.iter().all(|&(a, b)| hi + 6.0 < a || lo > b + 6.0))
            .unwrap_or_else(|| {
                if rows.len() < MAX_LABEL_ROWS {
                    rows.push(Vec::new());
                    rows.len() - 1
                } else {
                    MAX_LABEL_ROWS - 1
                }
            });
        if let Some(r) = rows.get_mut(row) {
            r.push((lo, hi));
        }
        placed.push(PlacedLabel {
            row,
            x: if anchor_end { x - 4.0 } else { x + 4.0 },
            anchor_end,
        });
    }
    let n = rows.len();
    (placed, n)
}

/// The shared time axis: the data's span, widened for predicted exhaustion points.
fn time_domain(rec: &Recording) -> (f64, f64) {
    let Some((t0, t1)) = rec.time_range() else {
        return (0.0, 1.0);
    };
    // A recording that starts within the first few percent of its span starts the axis at 0.
    let t0 = if t0 > 0.0 && t0 <= (t1 - t0) * 0.05 {
        0.0
    } else {
        t0
    };
    let span = (t1 - t0).max(1.0);
    let cap = t1 + span * MAX_PROJECTION_FRACTION;
    let mut hi = t1;
    for e in &rec.events {
        if let EventKind::Alert(a) = &e.kind
            && let Some(p) = a.predicted_s.filter(|p| p.is_finite() && *p > 0.0)
        {
            hi = hi.max((e.t_s + p).min(cap));
        }
    }
    if hi - t0 < 1.0 {
        hi = t0 + 1.0;
    }
    // A little room on the right so the last marker is not cut in half.
    (t0, hi + (hi - t0) * 0.015)
}

/// Everything about one panel that the layout needs before drawing.
struct PanelPlan {
    index: usize,
    markers: Vec<Marker>,
    labels: Vec<PlacedLabel>,
    label_rows: usize,
}

impl PanelPlan {
    fn height(&self) -> f64 {
        PANEL_TITLE_H + self.label_rows as f64 * LABEL_ROW_H + 4.0 + PLOT_H + X_AXIS_H
    }
}

fn markers_for(rec: &Recording, index: usize) -> Vec<Marker> {
    let Some(res) = rec.resources.get(index) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in &rec.events {
        match &e.kind {
            EventKind::Alert(a) if a.resource == res.name => {
                let reason = a.reason.as_deref().unwrap_or("alert");
                let mut tooltip = format!("alert at {} ({reason})", axis::format_seconds(e.t_s));
                if let (Some(u), Some(l)) = (a.used, a.limit) {
                    let _ = write!(
                        tooltip,
                        ": {} of {}",
                        axis::format_value(res.unit, u),
                        if l == UNLIMITED {
                            "no limit".to_string()
                        } else {
                            axis::format_value(res.unit, l)
                        }
                    );
                }
                if let Some(p) = a.predicted_s {
                    let _ = write!(
                        tooltip,
                        "; exhaustion predicted in {}",
                        axis::format_seconds(p)
                    );
                }
                out.push(Marker {
                    class: "alert",
                    t_s: e.t_s,
                    color: COLOR_ALERT,
                    label: if a.dry_run {
                        format!("alert ({reason}, dry run)")
                    } else {
                        format!("alert ({reason})")
                    },
                    tooltip,
                    point_at: None,
                });
                if let (Some(p), Some(l)) = (
                    a.predicted_s.filter(|p| p.is_finite() && *p >= 0.0),
                    a.limit.filter(|&l| l != UNLIMITED),
                ) {
                    let t = e.t_s + p;
                    out.push(Marker {
                        class: "exhaustion",
                        t_s: t,
                        color: COLOR_ALERT,
                        label: format!("predicted exhaustion at {}", axis::format_seconds(t)),
                        tooltip: format!(
                            "exhaustion predicted at {} (alert + {})",
                            axis::format_seconds(t),
                            axis::format_seconds(p)
                        ),
                        point_at: Some(l),
                    });
                }
            }
            EventKind::Ack(a) => {
                let label = match a.checkpoint_s {
                    Some(c) => format!("ack, checkpoint {}", axis::format_seconds(c)),
                    None => "ack".to_string(),
                };
                out.push(Marker {
                    class: "ack",
                    t_s: e.t_s,
                    color: COLOR_ACK,
                    tooltip: format!("checkpoint acknowledged at {}", axis::format_seconds(e.t_s)),
                    label,
                    point_at: None,
                });
            }
            EventKind::Other(name) if name == "restart" => {
                let attempt = e.raw["attempt"].as_u64().unwrap_or(0);
                let from = match e.raw["step"].as_u64() {
                    Some(step) => format!("resumed from step {step}"),
                    None if e.raw["resume_from"].is_string() => "resumed".to_string(),
                    None => "from the start".to_string(),
                };
                out.push(Marker {
                    class: "restart",
                    t_s: e.t_s,
                    color: COLOR_ACK,
                    label: format!("restart {attempt}: {from}"),
                    tooltip: format!(
                        "attempt {attempt} started at {} after {}, {from}",
                        axis::format_seconds(e.t_s),
                        e.raw["verdict"].as_str().unwrap_or("a failure")
                    ),
                    point_at: None,
                });
            }
            EventKind::Exit(x) => {
                let verdict = x.verdict.as_deref().unwrap_or("exit");
                out.push(Marker {
                    class: "exit",
                    t_s: e.t_s,
                    color: COLOR_EXIT,
                    label: format!("exit: {verdict}"),
                    tooltip: format!(
                        "the target exited at {}: {}",
                        axis::format_seconds(e.t_s),
                        x.summary.as_deref().unwrap_or(verdict)
                    ),
                    point_at: None,
                });
            }
            // A CUDA out-of-memory error the run reported, on its GPU's panel (or on
            // every GPU panel when the device was not known).
            EventKind::Other(name)
                if name == "cuda_oom"
                    && res.kind == "gpu_memory"
                    && e.raw["resource"].as_str().is_none_or(|r| r == res.name) =>
            {
                let step = e.raw["step"].as_u64();
                let mut tooltip = format!("CUDA out of memory at {}", axis::format_seconds(e.t_s));
                if let Some(s) = step {
                    let _ = write!(tooltip, ", step {s}");
                }
                for (field, what) in [
                    ("peak", "peak"),
                    ("reserved", "reserved"),
                    ("available", "available"),
                ] {
                    if let Some(b) = e.raw[field].as_u64() {
                        let _ = write!(tooltip, "; {what} {}", axis::format_value(res.unit, b));
                    }
                }
                out.push(Marker {
                    class: "cuda-oom",
                    t_s: e.t_s,
                    color: COLOR_ALERT,
                    label: match step {
                        Some(s) => format!("CUDA OOM at step {s}"),
                        None => "CUDA OOM".to_string(),
                    },
                    tooltip,
                    point_at: None,
                });
            }
            _ => {}
        }
    }
    out
}

/// The header: title (the verdict), one line of facts, and the evidence.
fn header(rec: &Recording) -> (Group, f64) {
    let mut g = Group::new().set("class", "header");
    let mut y = 34.0;
    let title_lines = wrap(&title(rec), 92);
    let mut t = Text::new("")
        .set("class", "verdict")
        .set("x", 24)
        .set("y", y)
        .set("font-size", 20)
        .set("font-weight", "bold")
        .set("fill", COLOR_TEXT);
    for (i, line) in title_lines.iter().enumerate() {
        t = t.add(
            TSpan::new(line.clone())
                .set("x", 24)
                .set("dy", if i == 0 { 0 } else { 25 }),
        );
    }
    g = g.add(t);
    y += 25.0 * (title_lines.len().max(1) - 1) as f64 + 24.0;

    let mut facts = Vec::new();
    if let Some(v) = &rec.verdict {
        facts.push(format!("verdict: {v}"));
    } else {
        facts.push("no exit recorded (written while the target ran)".to_string());
    }
    let m = &rec.meta;
    match (m.pid, m.command.as_deref()) {
        (Some(pid), Some(cmd)) => facts.push(format!("pid {pid} ({cmd})")),
        (Some(pid), None) => facts.push(format!("pid {pid}")),
        (None, Some(cmd)) => facts.push(cmd.to_string()),
        (None, None) => {}
    }
    if let Some(start) = &m.start {
        facts.push(format!("started {start}"));
    }
    if let Some(i) = m.interval_s {
        facts.push(format!("sampled every {}", axis::format_seconds(i)));
    }
    if let Some(l) = m.lead_s {
        facts.push(format!("lead {}", axis::format_seconds(l)));
    }
    if let Some(v) = &m.watchdog_version {
        facts.push(format!("watchdog {v}"));
    }
    g = g.add(
        text("subtitle", 24.0, y, facts.join("  ·  "))
            .set("font-size", 13)
            .set("fill", COLOR_MUTED),
    );
    y += 6.0;
    if let Some(exit) = rec.exit() {
        let mut ev = Group::new().set("class", "evidence");
        for sentence in &exit.evidence {
            for (i, line) in wrap(sentence, 150).into_iter().enumerate() {
                y += 17.0;
                let bullet = if i == 0 { "•" } else { "" };
                ev = ev
                    .add(
                        text("evidence-bullet", 26.0, y, bullet)
                            .set("font-size", 12)
                            .set("fill", COLOR_MUTED),
                    )
                    .add(
                        text("evidence-line", 38.0, y, line)
                            .set("font-size", 12)
                            .set("fill", COLOR_TEXT),
                    );
            }
        }
        g = g.add(ev);
    }
    y += 14.0;
    let (legend, h) = legend(y);
    g = g.add(legend);
    (g, y + h)
}

fn legend(y: f64) -> (Group, f64) {
    legend_row(
        y,
        &[
            LegendItem::line(COLOR_USAGE, None, "used"),
            LegendItem::line(COLOR_LIMIT, Some("7 4"), "limit"),
            LegendItem::line(
                COLOR_ALERT,
                Some("4 3"),
                "projection to predicted exhaustion",
            ),
            LegendItem::line(COLOR_ALERT, None, "alert"),
            LegendItem::line(COLOR_ACK, None, "ack"),
            LegendItem::line(COLOR_EXIT, None, "exit"),
        ],
    )
}

/// One entry of a legend: a short line in a colour (dashed or not) and its label.
pub(crate) struct LegendItem<'a> {
    color: &'a str,
    dash: Option<&'a str>,
    label: &'a str,
    class: Option<&'a str>,
}

impl<'a> LegendItem<'a> {
    pub(crate) fn line(color: &'a str, dash: Option<&'a str>, label: &'a str) -> Self {
        LegendItem {
            color,
            dash,
            label,
            class: None,
        }
    }

    /// The same, with a class on the label (`legend-label CLASS`).
    pub(crate) fn with_class(mut self, class: &'a str) -> Self {
        self.class = Some(class);
        self
    }
}

/// A legend on one row at `y`, and its height.
pub(crate) fn legend_row(y: f64, items: &[LegendItem<'_>]) -> (Group, f64) {
    let mut g = Group::new().set("class", "legend").set("font-size", 12);
    let mut x = 24.0;
    let y_mid = y + 8.0;
    for it in items {
        let mut swatch = Line::new()
            .set("x1", 0)
            .set("x2", 20)
            .set("y1", 0)
            .set("y2", 0)
            .set("stroke", it.color)
            .set("stroke-width", 2);
        if let Some(d) = it.dash {
            swatch = swatch.set("stroke-dasharray", d);
        }
        let class = match it.class {
            Some(c) => format!("legend-label {c}"),
            None => "legend-label".to_string(),
        };
        g = g
            .add(swatch.set("transform", format!("translate({},{})", px(x), px(y_mid))))
            .add(text(&class, x + 26.0, y_mid + 4.0, it.label).set("fill", COLOR_TEXT));
        x += 26.0 + text_width(it.label, 12.0) + 22.0;
    }
    (g, 22.0)
}

/// Draws one panel with its top at `top`.
fn panel(rec: &Recording, plan: &PanelPlan, xs_domain: (f64, f64), top: f64) -> (Group, ClipPath) {
    let i = plan.index;
    let Some(res) = rec.resources.get(i) else {
        return (Group::new(), ClipPath::new());
    };
    let empty = Vec::new();
    let series = rec.series.get(i).unwrap_or(&empty);
    let plot_left = LEFT;
    let plot_right = WIDTH - RIGHT;
    let plot_top = top + PANEL_TITLE_H + plan.label_rows as f64 * LABEL_ROW_H + 4.0;
    let plot_bottom = plot_top + PLOT_H;
    let xs = Scale::new(xs_domain.0, xs_domain.1, plot_left, plot_right);

    // Value range: 0 to the highest usage, limit or alert figure.
    let mut vmax = 0u64;
    let mut peak = 0u64;
    let mut last_limit = None;
    for p in series {
        vmax = vmax.max(p.used);
        peak = peak.max(p.used);
        if p.limit != UNLIMITED {
            vmax = vmax.max(p.limit);
        }
        last_limit = Some(p.limit);
    }
    for e in &rec.events {
        if let EventKind::Alert(a) = &e.kind
            && a.resource == res.name
        {
            vmax = vmax.max(a.used.unwrap_or(0));
            if let Some(l) = a.limit.filter(|&l| l != UNLIMITED) {
                vmax = vmax.max(l);
            }
        }
    }
    let top_value = top_value(res.unit, vmax);
    let ys = Scale::new(0.0, top_value, plot_bottom, plot_top);

    let mut g = Group::new()
        .set("class", "panel")
        .set("data-resource", res.name.as_str())
        .set("data-unit", res.unit.as_str())
        .add(Title::new(match &res.source {
            Some(src) => format!("{} ({}): {src}", res.name, res.kind),
            None => format!("{} ({})", res.name, res.kind),
        }));

    // Title line: name, kind, source, peak against the limit.
    let mut info = vec![res.kind.clone()];
    if let Some(s) = &res.source {
        // A long source (a cgroup path with a note) is cut to fit; the tooltip has all of it.
        info.push(truncate(s, 64));
    }
    if !series.is_empty() {
        let peak_text = match last_limit {
            Some(l) if l != UNLIMITED && l > 0 => format!(
                "peak {} of {} ({:.0}%)",
                axis::format_value(res.unit, peak),
                axis::format_value(res.unit, l),
                peak as f64 * 100.0 / l as f64
            ),
            Some(_) => format!("peak {}, no limit", axis::format_value(res.unit, peak)),
            None => String::new(),
        };
        info.push(peak_text);
    } else {
        info.push("no samples in this recording".to_string());
    }
    g = g.add(panel_title(top, &res.name, &info.join("  ·  ")));

    let (area, yaxis, xaxis) = plot_frame(
        res.unit,
        top_value,
        &xs,
        &ys,
        "time since the recording's start",
    );
    g = g.add(area).add(yaxis).add(xaxis);
    let t1 = xs.domain().1;

    // The data, clipped to the plot area.
    let clip_id = format!("wd-clip-{i}");
    let clip = plot_clip(&clip_id, &xs, &ys);
    let mut data = Group::new()
        .set("class", "data")
        .set("clip-path", format!("url(#{clip_id})"));
    let recording_end = rec.time_range().map_or(t1, |(_, hi)| hi);
    for path in series_paths(
        series,
        &xs,
        &ys,
        recording_end,
        COLOR_USAGE,
        COLOR_LIMIT,
        true,
    ) {
        data = data.add(path);
    }

    // Event lines, with their labels in the band above the plot.
    let mut labels = Group::new()
        .set("class", "event-labels")
        .set("font-size", 11);
    for (m, l) in plan.markers.iter().zip(&plan.labels) {
        let x = xs.map(m.t_s).min(plot_right);
        let label_y = top + PANEL_TITLE_H + (l.row as f64 + 1.0) * LABEL_ROW_H - 3.0;
        let tick_end = match m.point_at {
            None => {
                data = data.add(
                    vline(m.class, x, plot_top, plot_bottom, m.color)
                        .set("data-t", px(m.t_s * 100.0) / 100.0)
                        .add(Title::new(m.tooltip.clone())),
                );
                plot_top
            }
            Some(v) => ys.map(v as f64) - 5.0,
        };
        let beyond = xs.map(m.t_s) > plot_right + 0.5;
        let label = if beyond {
            format!("{} →", m.label)
        } else {
            m.label.clone()
        };
        labels = labels
            .add(
                vline(
                    &format!("{}-tick", m.class),
                    x,
                    label_y - 9.0,
                    tick_end,
                    m.color,
                )
                .set("stroke-width", 1)
                .set("stroke-dasharray", "2 2"),
            )
            .add(
                text(&format!("{}-label", m.class), l.x, label_y, label)
                    .set("fill", m.color)
                    .set("text-anchor", if l.anchor_end { "end" } else { "start" })
                    .add(Title::new(m.tooltip.clone())),
            );
    }

    // Alerts: where usage was, and the projection to the predicted exhaustion point.
    for e in &rec.events {
        let EventKind::Alert(a) = &e.kind else {
            continue;
        };
        if a.resource != res.name {
            continue;
        }
        let used = a.used.or_else(|| value_at(series, e.t_s).map(|p| p.0));
        let limit = a
            .limit
            .or_else(|| value_at(series, e.t_s).map(|p| p.1))
            .filter(|&l| l != UNLIMITED);
        let x = xs.map(e.t_s);
        if let Some(u) = used {
            data = data.add(alert_marker(x, ys.map(u as f64), COLOR_ALERT));
        }
        if let (Some(u), Some(l), Some(p)) = (
            used,
            limit,
            a.predicted_s.filter(|p| p.is_finite() && *p >= 0.0),
        ) {
            let t_x = e.t_s + p;
            let (ex, ey) = (xs.map(t_x), ys.map(l as f64));
            data = data
                .add(
                    Line::new()
                        .set("class", "projection")
                        .set("x1", px(x))
                        .set("y1", px(ys.map(u as f64)))
                        .set("x2", px(ex))
                        .set("y2", px(ey))
                        .set("stroke", COLOR_ALERT)
                        .set("stroke-width", 1.5)
                        .set("stroke-dasharray", "4 3"),
                )
                .add(
                    Circle::new()
                        .set("class", "exhaustion")
                        .set("cx", px(ex))
                        .set("cy", px(ey))
                        .set("r", 5)
                        .set("fill", "white")
                        .set("stroke", COLOR_ALERT)
                        .set("stroke-width", 2)
                        .set("data-t", px(t_x * 100.0) / 100.0)
                        .add(Title::new(format!(
                            "exhaustion predicted at {} (alert + {})",
                            axis::format_seconds(t_x),
                            axis::format_seconds(p)
                        ))),
                );
        }
    }
    if series.is_empty() {
        data = data.add(
            text(
                "no-data",
                (plot_left + plot_right) / 2.0,
                plot_top + PLOT_H / 2.0,
                "no samples in this recording",
            )
            .set("text-anchor", "middle")
            .set("font-size", 13)
            .set("fill", COLOR_MUTED),
        );
    }
    g = g.add(data).add(labels);
    (g, clip)
}

/// The value axis's top: a little above the highest figure `vmax`, and at least a
/// unit-dependent minimum so an idle resource does not draw a full-height line.
pub(crate) fn top_value(unit: Unit, vmax: u64) -> f64 {
    (vmax as f64 * 1.08).max(match unit {
        Unit::Bytes => 1024.0,
        Unit::Millis => 60_000.0,
        Unit::Count => 10.0,
    })
}

/// A panel's title line: the resource's name in bold, then `info`. One text element,
/// so the browser places the info after the name, whatever the font.
pub(crate) fn panel_title(top: f64, name: &str, info: &str) -> Text {
    Text::new("")
        .set("class", "panel-title")
        .set("x", 24)
        .set("y", px(top + 16.0))
        .add(
            TSpan::new(name)
                .set("class", "resource-name")
                .set("font-size", 15)
                .set("font-weight", "bold")
                .set("fill", COLOR_TEXT),
        )
        .add(
            TSpan::new(info)
                .set("class", "panel-info")
                .set("dx", 12)
                .set("font-size", 12)
                .set("fill", COLOR_MUTED),
        )
}

/// A plot's background, its value axis with grid lines, and its time axis with grid
/// lines and `x_title`, for the plot area that `xs` and `ys` map onto.
pub(crate) fn plot_frame(
    unit: Unit,
    top_value: f64,
    xs: &Scale,
    ys: &Scale,
    x_title: &str,
) -> (Rectangle, Group, Group) {
    let (plot_left, plot_right) = xs.range();
    let (plot_bottom, plot_top) = ys.range();
    let area = Rectangle::new()
        .set("class", "plot-area")
        .set("x", px(plot_left))
        .set("y", px(plot_top))
        .set("width", px(plot_right - plot_left))
        .set("height", px(plot_bottom - plot_top))
        .set("fill", "#fbfcfd")
        .set("stroke", "#c9ced6");
    let mut yaxis = Group::new()
        .set("class", "y-axis")
        .set("font-size", 11)
        .set("text-anchor", "end")
        .set("fill", COLOR_MUTED);
    for v in axis::value_ticks(unit, top_value, 5) {
        let y = ys.map(v);
        if v > 0.0 {
            yaxis = yaxis.add(grid_line(plot_left, plot_right, y, y));
        }
        yaxis = yaxis.add(text(
            "tick",
            plot_left - 6.0,
            y + 4.0,
            axis::format_value_tick(unit, v),
        ));
    }
    let (t0, t1) = xs.domain();
    let (ticks, step) = axis::time_ticks(t0, t1, 12);
    let mut xaxis = Group::new()
        .set("class", "x-axis")
        .set("font-size", 11)
        .set("text-anchor", "middle")
        .set("fill", COLOR_MUTED);
    for t in ticks {
        let x = xs.map(t);
        xaxis = xaxis.add(grid_line(x, x, plot_top, plot_bottom)).add(text(
            "tick",
            x,
            plot_bottom + 15.0,
            axis::format_time_tick(t, step, t1),
        ));
    }
    xaxis = xaxis.add(
        text("axis-title", plot_right, plot_bottom + 28.0, x_title)
            .set("text-anchor", "end")
            .set("font-size", 10),
    );
    (area, yaxis, xaxis)
}

/// The clip path of the plot area that `xs` and `ys` map onto (a pixel of slack
/// above and below so a line at the limit is not cut in half).
pub(crate) fn plot_clip(id: &str, xs: &Scale, ys: &Scale) -> ClipPath {
    let (plot_left, plot_right) = xs.range();
    let (plot_bottom, plot_top) = ys.range();
    ClipPath::new().set("id", id).add(
        Rectangle::new()
            .set("x", px(plot_left))
            .set("y", px(plot_top - 1.0))
            .set("width", px(plot_right - plot_left))
            .set("height", px(plot_bottom - plot_top + 2.0)),
    )
}

/// A series' usage (a step line, over a light area when `area`) and its limit (dashed,
/// absent where unlimited), as `<path class="usage-area">`, `<path class="usage">` and
/// `<path class="limit">`. Each value holds until the next row, the last one for up
/// to a second (rows come at least once a second) but not past `recording_end`.
pub(crate) fn series_paths(
    series: &[crate::recording::Point],
    xs: &Scale,
    ys: &Scale,
    recording_end: f64,
    usage_color: &str,
    limit_color: &str,
    area: bool,
) -> Vec<SvgPath> {
    let plot_bottom = ys.range().0;
    let series_end = series
        .last()
        .map(|p| (p.t_s + 1.0).min(recording_end).max(p.t_s));
    let mut usage = StepPath::new();
    let mut limit = StepPath::new();
    for p in series {
        let x = xs.map(p.t_s);
        usage.push(x, Some(ys.map(p.used as f64)));
        limit.push(x, (p.limit != UNLIMITED).then(|| ys.map(p.limit as f64)));
    }
    if let Some(end) = series_end {
        usage.extend_to(xs.map(end));
        limit.extend_to(xs.map(end));
    }
    let mut out = Vec::new();
    if let Some((d, fill)) = usage.finish_with_area(plot_bottom) {
        if let Some(fill) = fill.filter(|_| area) {
            out.push(
                SvgPath::new()
                    .set("class", "usage-area")
                    .set("d", fill)
                    .set("fill", usage_color)
                    .set("fill-opacity", 0.1)
                    .set("stroke", "none"),
            );
        }
        out.push(
            SvgPath::new()
                .set("class", "usage")
                .set("d", d)
                .set("fill", "none")
                .set("stroke", usage_color)
                .set("stroke-width", 1.8)
                .set("stroke-linejoin", "round"),
        );
    }
    if let Some(d) = limit.finish() {
        out.push(
            SvgPath::new()
                .set("class", "limit")
                .set("d", d)
                .set("fill", "none")
                .set("stroke", limit_color)
                .set("stroke-width", 1.8)
                .set("stroke-dasharray", "7 4"),
        );
    }
    out
}

/// The dot that marks where usage was at an alert.
pub(crate) fn alert_marker(x: f64, y: f64, color: &str) -> Circle {
    Circle::new()
        .set("class", "alert-marker")
        .set("cx", px(x))
        .set("cy", px(y))
        .set("r", 4)
        .set("fill", color)
        .set("stroke", "white")
        .set("stroke-width", 1.2)
}

/// The (used, limit) in force at `t`: the last row at or before it.
fn value_at(series: &[crate::recording::Point], t: f64) -> Option<(u64, u64)> {
    let i = series.partition_point(|p| p.t_s <= t);
    let p = series.get(i.checked_sub(1)?)?;
    Some((p.used, p.limit))
}

/// Renders the recording as a standalone SVG image (`<svg id="watchdog-report">`).
pub fn render_svg(rec: &Recording) -> String {
    let (header, mut y) = header(rec);
    let domain = time_domain(rec);
    let xs = Scale::new(domain.0, domain.1, LEFT, WIDTH - RIGHT);
    let plans: Vec<PanelPlan> = panel_order(rec)
        .into_iter()
        .map(|index| {
            let markers = markers_for(rec, index);
            let (labels, label_rows) = place_labels(&markers, &xs, WIDTH - RIGHT);
            PanelPlan {
                index,
                markers,
                labels,
                label_rows,
            }
        })
        .collect();
    let mut defs = Definitions::new();
    let mut body = Group::new().set("class", "panels");
    y += 10.0;
    for plan in &plans {
        let (g, clip) = panel(rec, plan, domain, y);
        body = body.add(g);
        defs = defs.add(clip);
        y += plan.height() + PANEL_GAP;
    }
    if plans.is_empty() {
        body = body.add(
            text("no-data", 24.0, y + 20.0, "no resources in this recording")
                .set("font-size", 13)
                .set("fill", COLOR_MUTED),
        );
        y += 40.0;
    }
    let height = (y + 6.0).ceil();
    let doc = document("watchdog-report", height, &title(rec), defs)
        .add(header)
        .add(body);
    doc.to_string()
}

/// An image `WIDTH` wide and `height` high with the element id `id`, `label` as its
/// accessible name and tooltip, `defs`, and a white background.
fn document(id: &str, height: f64, label: &str, defs: Definitions) -> Document {
    Document::new()
        .set("id", id)
        .set("width", WIDTH)
        .set("height", height)
        .set("viewBox", (0, 0, WIDTH, height))
        .set("font-family", FONT)
        .set("role", "img")
        .set("aria-label", label)
        .add(Title::new(label))
        .add(defs)
        .add(
            Rectangle::new()
                .set("class", "background")
                .set("width", "100%")
                .set("height", "100%")
                .set("fill", "white"),
        )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const CSS: &str = "
body { margin: 0; padding: 16px; background: #f3f5f7; color: #1f2328;
  font-family: DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; }
svg#watchdog-report { display: block; max-width: 100%; height: auto;
  background: white; border: 1px solid #d0d7de; border-radius: 6px; }
section.details { background: white; border: 1px solid #d0d7de; border-radius: 6px;
  margin-top: 16px; padding: 4px 20px 16px; font-size: 13px; }
section.details h2 { font-size: 15px; margin: 16px 0 8px; }
table { border-collapse: collapse; }
td, th { text-align: left; padding: 3px 12px 3px 0; vertical-align: top; }
th { color: #57606a; font-weight: normal; }
td.num { white-space: nowrap; text-align: right; font-variant-numeric: tabular-nums; }
code { font-family: DejaVu Sans Mono, monospace; font-size: 12px; }
footer { color: #57606a; font-size: 12px; margin-top: 10px; }
";

/// Renders the recording as a self-contained HTML page: the SVG inline, inline CSS,
/// the evidence and a table of events and facts; no scripts, no network fetches.
pub fn render_html(rec: &Recording) -> String {
    let title = title(rec);
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        esc(&title)
    );
    h.push_str(&render_svg(rec));
    h.push_str("\n<section class=\"details\">\n");
    if let Some(exit) = rec.exit()
        && !exit.evidence.is_empty()
    {
        h.push_str("<h2>Evidence</h2>\n<ul class=\"evidence\">\n");
        for e in &exit.evidence {
            let _ = writeln!(h, "<li>{}</li>", esc(e));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<h2>Events</h2>\n");
    if rec.events.is_empty() {
        h.push_str("<p>No events in this recording.</p>\n");
    } else {
        h.push_str("<table class=\"events\">\n<tr><th>t</th><th>event</th><th>details</th></tr>\n");
        for e in &rec.events {
            let details = event_details(e);
            let _ = writeln!(
                h,
                "<tr class=\"event-{}\"><td class=\"num\">{}</td><td>{}</td><td><code>{}</code></td></tr>",
                esc(e.name()),
                esc(&format!("{:.3} s", e.t_s)),
                esc(e.name()),
                esc(&details)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Resources</h2>\n<table class=\"resources\">\n<tr><th>resource</th><th>kind</th><th>unit</th><th>source</th><th>rows</th></tr>\n");
    for (i, r) in rec.resources.iter().enumerate() {
        let rows = rec.series.get(i).map_or(0, Vec::len);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td class=\"num\">{rows}</td></tr>",
            esc(&r.name),
            esc(&r.kind),
            r.unit.as_str(),
            esc(r.source.as_deref().unwrap_or("")),
        );
    }
    h.push_str("</table>\n<h2>Recording</h2>\n<table class=\"meta\">\n");
    let m = &rec.meta;
    let mut fact = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
        }
    };
    fact(
        "format",
        m.version.map(|v| format!("watchdog recording v{v}")),
    );
    fact("pid", m.pid.map(|p| p.to_string()));
    fact("command", m.command.clone());
    fact("start", m.start.clone());
    fact("start (unix)", m.start_unix.map(|s| format!("{s:.3}")));
    fact("interval", m.interval_s.map(axis::format_seconds));
    fact("lead", m.lead_s.map(axis::format_seconds));
    fact("watchdog version", m.watchdog_version.clone());
    for (k, v) in &m.extra {
        fact(k, Some(v.to_string()));
    }
    for (k, v) in &rec.comments {
        fact(k, Some(v.clone()));
    }
    h.push_str("</table>\n</section>\n");
    let _ = write!(
        h,
        "<footer>Rendered by watchdog-report {}; a self-contained page (no scripts, no network).</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    h
}

/// The event's fields other than `t`, `time` and `event`, as compact JSON.
fn event_details(e: &crate::recording::Event) -> String {
    match &e.raw {
        serde_json::Value::Object(obj) => {
            let mut o = obj.clone();
            for k in ["t", "time", "event"] {
                o.remove(k);
            }
            serde_json::Value::Object(o).to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
