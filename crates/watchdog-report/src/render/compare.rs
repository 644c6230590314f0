//! Two recordings side by side: `watchdog report A B -o compare.html|compare.svg`.
//!
//! A person comparing a run that died with one that did not looks first for what was
//! different about them, then at how each ended, then at the curves. So the page is,
//! in that order: the facts that differ between the runs (the rest folded away), the
//! two verdicts, and one panel per resource named in either run with both runs'
//! usage and limit on one time axis from their starts (run A and run B each in its
//! own colour, each limit dashed in its run's colour, alerts marked). A limit that
//! only one run hit then shows as one dashed line crossed by that run's curve.
//!
//! [`model`] is the pure part (which facts, which panels, which limits), tested on
//! its own; the environment's differences are [`crate::diff::diff`]'s, the same
//! comparison `watchdog diff` prints; the drawing reuses the single report's axes, paths and panel title
//! (`plot_frame`, `series_paths`, `panel_title` in the parent module).
//!
//! # Elements a reader or test can rely on
//!
//! - `<table class="differences">` (HTML) with one `<tr data-field="NAME">` per fact
//!   that differs, and `<details class="same">` holding the facts that do not;
//! - `<table class="verdicts">` with `<tr data-run="a|b">`;
//! - `<svg id="watchdog-compare">`, with per resource `<g class="panel"
//!   data-resource="NAME">` (and `data-resource-b="NAME"`, run B's name, for a disk run B
//!   watched from another directory on the same mount point) and in it per run present
//!   `<g class="run" data-run="a|b">`
//!   holding `<path class="usage">`, `<path class="limit">` (absent when unlimited),
//!   `<line class="alert">` with `<circle class="alert-marker">`, and `<line class="exit">`.

use std::fmt::Write as _;

use svg::node::element::{Definitions, Group, Title};
use watchdog_types::Unit;

use super::axis::{self, Scale};
use super::{
    COLOR_MUTED, COLOR_TEXT, LABEL_ROW_H, LEFT, LegendItem, PANEL_GAP, PANEL_TITLE_H, PLOT_H,
    RIGHT, WIDTH, X_AXIS_H, alert_marker, document, esc, legend_row, panel_title, plot_clip,
    plot_frame, px, series_paths, text, title, top_value, vline,
};
use crate::recording::{EventKind, Recording, UNLIMITED};

/// Run A's colour (usage, limit, alerts).
const COLOR_A: &str = "#1f6feb";
/// Run B's colour: far from A's in hue and in lightness, so it reads in grey too.
const COLOR_B: &str = "#c2410c";

/// One fact about a run that the comparison puts side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    /// What it is (`limit tree_memory`, `package torch`, `lead`).
    pub name: String,
    /// Run A's value, `None` when its recording does not say.
    pub a: Option<String>,
    /// Run B's value, `None` when its recording does not say.
    pub b: Option<String>,
    /// Why it may matter (the peaks against the limits), when known.
    pub note: Option<String>,
}

impl Fact {
    fn new(name: &str, a: Option<String>, b: Option<String>) -> Fact {
        Fact {
            name: name.to_string(),
            a,
            b,
            note: None,
        }
    }
}

/// How one run ended, from its last `exit` event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunVerdict {
    /// The verdict's name (`exited`, `oom_kill`, ...), `None` when no exit was recorded.
    pub verdict: Option<String>,
    /// A sentence for a person: the exit's summary, else [`title`]'s.
    pub summary: String,
}

/// One run's part of a resource's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSeries {
    /// Index of the resource in that run's [`Recording::resources`].
    pub index: usize,
    /// The resource's unit in that run.
    pub unit: Unit,
    /// Highest usage in the series.
    pub peak: u64,
    /// The limits the series had, in order of first appearance, unlimited left out.
    pub limits: Vec<u64>,
    /// Whether usage reached the limit in force at some row.
    pub reached_limit: bool,
    /// Times of the alerts on this resource, seconds since the run's start.
    pub alerts: Vec<f64>,
}

/// One panel: a resource named in either run.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The resource's name.
    pub resource: String,
    /// Run B's name for it, when it differs: a disk on the same mount point watched from
    /// another directory ([`crate::diff::paired_disks`]).
    pub resource_b: Option<String>,
    /// Run A's series of it, `None` when run A did not watch it.
    pub a: Option<RunSeries>,
    /// Run B's series of it, `None` when run B did not watch it.
    pub b: Option<RunSeries>,
}

impl Panel {
    fn runs(&self) -> [(Run, Option<&RunSeries>); 2] {
        [(Run::A, self.a.as_ref()), (Run::B, self.b.as_ref())]
    }

    fn unit(&self) -> Unit {
        self.a
            .as_ref()
            .or(self.b.as_ref())
            .map_or(Unit::Bytes, |s| s.unit)
    }
}

/// What the comparison page shows, worked out before any drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The facts that differ: the environment and limits as [`crate::diff::diff`] ranks
    /// them (likeliest culprit first), then the watchdog's settings.
    pub differences: Vec<Fact>,
    /// The facts that are the same in both runs.
    pub same: Vec<Fact>,
    /// What could not be compared, one sentence each ([`crate::diff::Diff::unknown`]).
    pub unknown: Vec<String>,
    /// Run A's and run B's verdicts.
    pub verdicts: [RunVerdict; 2],
    /// The panels in reading order: resources where a run reached its limit or alerted,
    /// then the ones whose limit differs (or that only one run watched), then the rest, each group in order of first
    /// appearance (A's resources, then B's others).
    pub panels: Vec<Panel>,
}

/// Which run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    A,
    B,
}

impl Run {
    fn id(self) -> &'static str {
        match self {
            Run::A => "a",
            Run::B => "b",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Run::A => "run A",
            Run::B => "run B",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Run::A => COLOR_A,
            Run::B => COLOR_B,
        }
    }
}

/// The facts of the two runs: the environment and limits compared by
/// [`crate::diff`], and the watchdog's own settings from the `meta` line (the command,
/// the sampling interval, the lead, the watchdog's version). Returns the differences,
/// the facts that are the same, and what is unknown.
fn facts(a: &Recording, b: &Recording) -> (Vec<Fact>, Vec<Fact>, Vec<String>) {
    let d = crate::diff::diff(a, b);
    let mut differences: Vec<Fact> = d
        .differences
        .into_iter()
        .map(|x| Fact {
            name: x.field,
            a: Some(x.a),
            b: Some(x.b),
            note: x.note,
        })
        .collect();
    let mut same: Vec<Fact> = crate::diff::same_facts(a, b)
        .into_iter()
        .map(|(name, va, vb)| Fact::new(&name, Some(va), Some(vb)))
        .collect();
    let settings = |rec: &Recording| {
        let m = &rec.meta;
        [
            ("command", m.command.clone()),
            ("sampling interval", m.interval_s.map(axis::format_seconds)),
            ("lead", m.lead_s.map(axis::format_seconds)),
            ("watchdog version", m.watchdog_version.clone()),
        ]
    };
    for ((name, va), (_, vb)) in settings(a).into_iter().zip(settings(b)) {
        let f = Fact::new(name, va, vb);
        if f.a == f.b {
            same.push(f);
        } else {
            differences.push(f);
        }
    }
    (differences, same, d.unknown)
}

fn verdict_of(rec: &Recording) -> RunVerdict {
    RunVerdict {
        verdict: rec.verdict.clone(),
        summary: title(rec),
    }
}

fn run_series(rec: &Recording, resource: &str) -> Option<RunSeries> {
    let index = rec.resource_index(resource)?;
    let res = rec.resources.get(index)?;
    let series = rec.series.get(index).map_or(&[][..], Vec::as_slice);
    let mut limits = Vec::new();
    for p in series {
        if p.limit != UNLIMITED && !limits.contains(&p.limit) {
            limits.push(p.limit);
        }
    }
    let alerts = rec
        .events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Alert(a) if a.resource == resource))
        .map(|e| e.t_s)
        .collect();
    Some(RunSeries {
        index,
        unit: res.unit,
        peak: series.iter().map(|p| p.used).max().unwrap_or(0),
        limits,
        reached_limit: series
            .iter()
            .any(|p| p.limit != UNLIMITED && p.used >= p.limit),
        alerts,
    })
}

/// Works out what the comparison of `a` and `b` shows.
pub fn model(a: &Recording, b: &Recording) -> Comparison {
    // Disks paired by mount point under two names: one panel each.
    let pairs = crate::diff::paired_disks(a, b);
    let b_name = |name: &str| {
        pairs
            .iter()
            .find(|(ra, _)| ra == name)
            .map(|(_, rb)| rb.clone())
    };
    let mut names: Vec<&str> = a.resources.iter().map(|r| r.name.as_str()).collect();
    for r in &b.resources {
        if !names.contains(&r.name.as_str()) && !pairs.iter().any(|(_, rb)| *rb == r.name) {
            names.push(&r.name);
        }
    }
    let mut panels: Vec<Panel> = names
        .into_iter()
        .map(|name| {
            let resource_b = b_name(name);
            Panel {
                resource: name.to_string(),
                a: run_series(a, name),
                b: run_series(b, resource_b.as_deref().unwrap_or(name)),
                resource_b,
            }
        })
        .collect();
    let rank = |p: &Panel| {
        let hot = p
            .runs()
            .iter()
            .any(|(_, s)| s.is_some_and(|s| s.reached_limit || !s.alerts.is_empty()));
        let limits = |s: Option<&RunSeries>| s.map(|s| s.limits.clone());
        let differ = limits(p.a.as_ref()) != limits(p.b.as_ref());
        match (hot, differ) {
            (true, _) => 0,
            (false, true) => 1,
            (false, false) => 2,
        }
    };
    panels.sort_by_key(rank);
    let (differences, same, unknown) = facts(a, b);
    Comparison {
        differences,
        same,
        unknown,
        verdicts: [verdict_of(a), verdict_of(b)],
        panels,
    }
}

/// The panel's height: title, a row for the per-run summary, the plot and its time axis.
const COMPARE_PANEL_H: f64 = PANEL_TITLE_H + LABEL_ROW_H + 4.0 + PLOT_H + X_AXIS_H;

/// One line about a run's series: peak against its limit(s), alerts.
fn run_summary(run: Run, s: Option<&RunSeries>) -> String {
    let Some(s) = s else {
        return format!("{}: not watched", run.name());
    };
    let mut out = format!(
        "{}: peak {}",
        run.name(),
        axis::format_value(s.unit, s.peak)
    );
    match s.limits.as_slice() {
        [] => out.push_str(", no limit"),
        limits => {
            let l: Vec<String> = limits
                .iter()
                .map(|&l| axis::format_value(s.unit, l))
                .collect();
            let _ = write!(out, " of {}", l.join(" → "));
        }
    }
    if s.reached_limit {
        out.push_str(", reached its limit");
    }
    if !s.alerts.is_empty() {
        let _ = write!(
            out,
            ", {} alert{}",
            s.alerts.len(),
            if s.alerts.len() == 1 { "" } else { "s" }
        );
    }
    out
}

/// Draws one panel with its top at `top`.
fn draw_panel(
    runs: [&Recording; 2],
    panel: &Panel,
    n: usize,
    xs: &Scale,
    top: f64,
) -> (Group, svg::node::element::ClipPath) {
    let unit = panel.unit();
    let plot_top = top + PANEL_TITLE_H + LABEL_ROW_H + 4.0;
    let plot_bottom = plot_top + PLOT_H;
    let vmax = panel
        .runs()
        .iter()
        .filter_map(|(_, s)| *s)
        .flat_map(|s| s.limits.iter().copied().chain([s.peak]))
        .max()
        .unwrap_or(0);
    let top_value = top_value(unit, vmax);
    let ys = Scale::new(0.0, top_value, plot_bottom, plot_top);
    let mut g = Group::new()
        .set("class", "panel")
        .set("data-resource", panel.resource.as_str())
        .set("data-unit", unit.as_str());
    let info = match &panel.resource_b {
        Some(b) => {
            g = g.set("data-resource-b", b.as_str());
            format!("{}; in run B {b}", unit.as_str())
        }
        None => unit.as_str().to_string(),
    };
    g = g.add(panel_title(top, &panel.resource, &info));
    // Each run's summary on its own half of the row under the title, in its colour.
    for (k, (run, s)) in panel.runs().into_iter().enumerate() {
        g = g.add(
            text(
                "run-summary",
                24.0 + k as f64 * (WIDTH - LEFT) / 2.0,
                top + PANEL_TITLE_H + LABEL_ROW_H - 3.0,
                run_summary(run, s),
            )
            .set("data-run", run.id())
            .set("font-size", 12)
            .set("fill", run.color()),
        );
    }
    let (area, yaxis, xaxis) = plot_frame(unit, top_value, xs, &ys, "time since each run's start");
    g = g.add(area).add(yaxis).add(xaxis);
    let clip_id = format!("wd-compare-clip-{n}");
    let clip = plot_clip(&clip_id, xs, &ys);
    let mut data = Group::new()
        .set("class", "data")
        .set("clip-path", format!("url(#{clip_id})"));
    for ((run, s), rec) in panel.runs().into_iter().zip(runs) {
        let Some(s) = s else { continue };
        let series = rec.series.get(s.index).map_or(&[][..], Vec::as_slice);
        let end = rec.time_range().map_or(0.0, |(_, hi)| hi);
        let mut rg = Group::new().set("class", "run").set("data-run", run.id());
        // Run A's lines are wider and drawn first, so where the runs coincide A shows
        // as a border around B's instead of vanishing under it.
        let width = if run == Run::A { 3.2 } else { 1.8 };
        for path in series_paths(series, xs, &ys, end, run.color(), run.color(), false) {
            rg = rg.add(path.set("data-run", run.id()).set("stroke-width", width));
        }
        for &t in &s.alerts {
            let x = xs.map(t);
            rg = rg.add(
                vline("alert", x, plot_top, plot_bottom, run.color())
                    .set("stroke-dasharray", "2 3")
                    .set("data-t", px(t * 100.0) / 100.0)
                    .add(Title::new(format!(
                        "{}: alert at {}",
                        run.name(),
                        axis::format_seconds(t)
                    ))),
            );
            let i = series.partition_point(|p| p.t_s <= t);
            if let Some(p) = i.checked_sub(1).and_then(|i| series.get(i)) {
                rg = rg.add(alert_marker(x, ys.map(p.used as f64), run.color()));
            }
        }
        if let Some(exit) = rec
            .events
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::Exit(_)))
        {
            rg = rg.add(
                vline("exit", xs.map(exit.t_s), plot_top, plot_bottom, run.color())
                    .set("stroke-width", 1)
                    .set("stroke-dasharray", "1 3")
                    .set("data-t", px(exit.t_s * 100.0) / 100.0)
                    .add(Title::new(format!(
                        "{}: exit at {} ({})",
                        run.name(),
                        axis::format_seconds(exit.t_s),
                        rec.verdict.as_deref().unwrap_or("no verdict")
                    ))),
            );
        }
        data = data.add(rg);
    }
    (g.add(data), clip)
}

/// The legend: each run's usage and limit in its colour.
fn legend(y: f64, names: [&str; 2]) -> (Group, f64) {
    let a_used = format!("run A used ({})", names[0]);
    let b_used = format!("run B used ({})", names[1]);
    legend_row(
        y,
        &[
            LegendItem::line(COLOR_A, None, &a_used).with_class("run-a"),
            LegendItem::line(COLOR_A, Some("7 4"), "run A limit"),
            LegendItem::line(COLOR_B, None, &b_used).with_class("run-b"),
            LegendItem::line(COLOR_B, Some("7 4"), "run B limit"),
            LegendItem::line(COLOR_MUTED, Some("2 3"), "alert"),
        ],
    )
}

/// The comparison as an SVG image. With `header`, the image stands alone: it starts
/// with the differences and the verdicts as text; without, the HTML page shows them
/// as tables above it.
fn svg(runs: [&Recording; 2], m: &Comparison, names: [&str; 2], header: bool) -> String {
    let mut head = Group::new().set("class", "header");
    let mut y = 30.0;
    if header {
        head = head.add(
            text("compare-title", 24.0, y, "Two runs compared")
                .set("font-size", 20)
                .set("font-weight", "bold")
                .set("fill", COLOR_TEXT),
        );
        let differing = &m.differences;
        y += 24.0;
        head = head.add(
            text(
                "differences-title",
                24.0,
                y,
                if differing.is_empty() {
                    "No differences in settings or limits.".to_string()
                } else {
                    format!("{} differences in settings or limits:", differing.len())
                },
            )
            .set("font-size", 13)
            .set("fill", COLOR_MUTED),
        );
        for f in differing {
            y += 17.0;
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
            head = head.add(
                text(
                    "difference",
                    38.0,
                    y,
                    match &f.note {
                        Some(note) => format!(
                            "{}: run A {}, run B {} ({note})",
                            f.name,
                            show(&f.a),
                            show(&f.b)
                        ),
                        None => format!("{}: run A {}, run B {}", f.name, show(&f.a), show(&f.b)),
                    },
                )
                .set("data-field", f.name.as_str())
                .set("font-size", 12)
                .set("fill", COLOR_TEXT),
            );
        }
        for u in &m.unknown {
            y += 17.0;
            head = head.add(
                text("unknown", 38.0, y, format!("Unknown: {u}"))
                    .set("font-size", 12)
                    .set("fill", COLOR_MUTED),
            );
        }
        y += 8.0;
        for (run, v) in [Run::A, Run::B].into_iter().zip(&m.verdicts) {
            y += 17.0;
            head = head.add(
                text(
                    "run-verdict",
                    24.0,
                    y,
                    format!("{}: {}", run.name(), v.summary),
                )
                .set("data-run", run.id())
                .set("font-size", 13)
                .set("fill", run.color()),
            );
        }
        y += 14.0;
    }
    let (legend, h) = legend(y, names);
    head = head.add(legend);
    y += h + 10.0;

    let t_end = runs
        .iter()
        .filter_map(|r| r.time_range().map(|(_, hi)| hi))
        .fold(1.0, f64::max);
    let xs = Scale::new(0.0, t_end * 1.015, LEFT, WIDTH - RIGHT);
    let mut defs = Definitions::new();
    let mut body = Group::new().set("class", "panels");
    for (n, p) in m.panels.iter().enumerate() {
        let (g, clip) = draw_panel(runs, p, n, &xs, y);
        body = body.add(g);
        defs = defs.add(clip);
        y += COMPARE_PANEL_H + PANEL_GAP;
    }
    if m.panels.is_empty() {
        body = body.add(
            text(
                "no-data",
                24.0,
                y + 20.0,
                "no resources in either recording",
            )
            .set("font-size", 13)
            .set("fill", COLOR_MUTED),
        );
        y += 40.0;
    }
    let height = (y + 6.0).ceil();
    let label = format!("run A ({}) and run B ({}) compared", names[0], names[1]);
    document("watchdog-compare", height, &label, defs)
        .add(head)
        .add(body)
        .to_string()
}

/// Renders the comparison of `a` and `b` (named `names`, e.g. their file names) as a
/// standalone SVG image (`<svg id="watchdog-compare">`).
pub fn render_compare_svg(a: &Recording, b: &Recording, names: [&str; 2]) -> String {
    svg([a, b], &model(a, b), names, true)
}

const CSS: &str = "
body { margin: 0; padding: 16px; background: #f3f5f7; color: #1f2328;
  font-family: DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; }
section { background: white; border: 1px solid #d0d7de; border-radius: 6px;
  margin-bottom: 16px; padding: 4px 20px 16px; font-size: 13px; }
h1 { font-size: 20px; } td.note, ul.unknown { color: #57606a; } h2 { font-size: 15px; margin: 16px 0 8px; }
svg#watchdog-compare { display: block; max-width: 100%; height: auto;
  background: white; border: 1px solid #d0d7de; border-radius: 6px; }
table { border-collapse: collapse; }
td, th { text-align: left; padding: 3px 12px 3px 0; vertical-align: top; }
th { color: #57606a; font-weight: normal; }
.run-a { color: #1f6feb; } .run-b { color: #c2410c; }
summary { cursor: pointer; color: #57606a; margin-top: 8px; }
footer { color: #57606a; font-size: 12px; margin-top: 10px; }
";

fn fact_rows(h: &mut String, facts: &[Fact]) {
    h.push_str("<tr><th>fact</th><th class=\"run-a\">run A</th><th class=\"run-b\">run B</th><th></th></tr>\n");
    let show = |v: &Option<String>| match v {
        Some(v) => esc(v),
        None => "<em>unknown</em>".to_string(),
    };
    for f in facts {
        let _ = writeln!(
            h,
            "<tr data-field=\"{}\"><th>{}</th><td>{}</td><td>{}</td><td class=\"note\">{}</td></tr>",
            esc(&f.name),
            esc(&f.name),
            show(&f.a),
            show(&f.b),
            esc(f.note.as_deref().unwrap_or(""))
        );
    }
}

/// Renders the comparison of `a` and `b` (named `names`) as a self-contained HTML page:
/// the differences, the rest folded in a `<details>`, the verdicts, then the panels.
pub fn render_compare_html(a: &Recording, b: &Recording, names: [&str; 2]) -> String {
    let m = model(a, b);
    let mut h = String::with_capacity(64 * 1024);
    let page_title = format!("run A ({}) and run B ({}) compared", names[0], names[1]);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n\
         <h1>Two runs compared: <span class=\"run-a\">run A</span> ({}) and \
         <span class=\"run-b\">run B</span> ({})</h1>\n",
        esc(&page_title),
        esc(names[0]),
        esc(names[1])
    );
    let (differ, same) = (&m.differences, &m.same);
    h.push_str("<section class=\"environment\">\n<h2>What differs</h2>\n");
    if differ.is_empty() {
        h.push_str(
            "<p class=\"no-differences\">The two runs have the same settings and limits.</p>\n",
        );
    } else {
        h.push_str("<table class=\"differences\">\n");
        fact_rows(&mut h, differ);
        h.push_str("</table>\n");
    }
    if !m.unknown.is_empty() {
        h.push_str("<ul class=\"unknown\">\n");
        for u in &m.unknown {
            let _ = writeln!(h, "<li>Unknown: {}</li>", esc(u));
        }
        h.push_str("</ul>\n");
    }
    if !same.is_empty() {
        let _ = writeln!(
            h,
            "<details class=\"same\">\n<summary>{} fact{} the same in both runs</summary>\n<table class=\"same\">",
            same.len(),
            if same.len() == 1 { "" } else { "s" }
        );
        fact_rows(&mut h, same);
        h.push_str("</table>\n</details>\n");
    }
    h.push_str("</section>\n<section class=\"verdicts\">\n<h2>How each run ended</h2>\n<table class=\"verdicts\">\n");
    for (run, v) in [Run::A, Run::B].into_iter().zip(&m.verdicts) {
        let _ = writeln!(
            h,
            "<tr data-run=\"{}\"><th class=\"run-{}\">{}</th><td><code>{}</code></td><td>{}</td></tr>",
            run.id(),
            run.id(),
            run.name(),
            esc(v.verdict.as_deref().unwrap_or("no exit recorded")),
            esc(&v.summary)
        );
    }
    h.push_str("</table>\n</section>\n");
    h.push_str(&svg([a, b], &m, names, false));
    let _ = write!(
        h,
        "\n<footer>Rendered by watchdog-report {}; a self-contained page (no scripts, no network).</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A recording with a `tree_memory` resource limited to `limit_mib` (by a `limit`
    /// event and the rows), growing 10 MiB a second to `peak_mib`, and an alert and a
    /// verdict when it got there.
    fn run(limit_mib: u64, peak_mib: u64, extra_resource: Option<&str>) -> Recording {
        let mib = 1u64 << 20;
        let mut text = format!(
            "# watchdog recording v1\n\
             #{{\"meta\":{{\"command\":\"python3\",\"interval_s\":0.1,\"lead_s\":30.0,\"watchdog_version\":\"0.1.0\"}}}}\n\
             #{{\"resource\":{{\"name\":\"tree_memory\",\"kind\":\"tree_memory\",\"unit\":\"bytes\"}}}}\n\
             #{{\"resource\":{{\"name\":\"host_memory\",\"kind\":\"host_memory\",\"unit\":\"bytes\"}}}}\n\
             #{{\"t\":0.0,\"event\":\"limit\",\"resource\":\"tree_memory\",\"kind\":\"tree_memory\",\"limit\":{},\"unit\":\"bytes\",\"source\":\"--mem-limit\"}}\n\
             #{{\"t\":0.0,\"event\":\"limit\",\"resource\":\"host_memory\",\"kind\":\"host_memory\",\"limit\":{},\"unit\":\"bytes\",\"source\":\"/proc/meminfo\"}}\n",
            limit_mib * mib,
            8192 * mib
        );
        if let Some(r) = extra_resource {
            let _ = writeln!(
                text,
                "#{{\"resource\":{{\"name\":\"{r}\",\"kind\":\"disk_bytes\",\"unit\":\"bytes\"}}}}"
            );
        }
        let hit = peak_mib >= limit_mib;
        if hit {
            let _ = writeln!(
                text,
                "#{{\"t\":{},\"event\":\"alert\",\"resource\":\"tree_memory\",\"reason\":\"trend\"}}",
                peak_mib / 10 - 1
            );
        }
        let _ = writeln!(
            text,
            "#{{\"t\":{},\"event\":\"exit\",\"verdict\":\"{}\"}}",
            peak_mib / 10,
            if hit { "signal" } else { "exited" }
        );
        text.push_str("time,resource,used,limit\n");
        for s in 0..=peak_mib / 10 {
            let _ = writeln!(text, "{s},tree_memory,{},{}", s * 10 * mib, limit_mib * mib);
            let _ = writeln!(text, "{s},host_memory,{},{}", mib, 8192 * mib);
            if let Some(r) = extra_resource {
                let _ = writeln!(text, "{s},{r},1,{UNLIMITED}");
            }
        }
        crate::recording::parse(&text).unwrap()
    }

    #[test]
    fn the_changed_limit_is_the_first_difference() {
        let (a, mut b) = (run(400, 300, None), run(200, 200, None));
        b.meta.lead_s = Some(3.0);
        let m = model(&a, &b);
        let names: Vec<&str> = m.differences.iter().map(|f| f.name.as_str()).collect();
        // The environment's differences as `diff` ranks them, then the settings.
        assert_eq!(names, ["limit tree_memory", "lead"], "{:?}", m.differences);
        let limit = &m.differences[0];
        assert_eq!(limit.a.as_deref(), Some("400.00 MiB"));
        assert_eq!(limit.b.as_deref(), Some("200.00 MiB"));
        // Run B's peak reached its limit and run A's did not: the note says so.
        assert!(
            limit
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("B's peak 200.00 MiB reached its limit")),
            "{limit:?}"
        );
        // What is the same is kept, to be folded away.
        for name in [
            "command",
            "sampling interval",
            "watchdog version",
            "limit host_memory",
        ] {
            assert!(m.same.iter().any(|f| f.name == name), "no {name}");
        }
        // Neither recording has an environment record: that is said, not guessed.
        assert_eq!(m.unknown.len(), 2, "{:?}", m.unknown);
        assert!(m.unknown[0].contains("no environment record"));
        assert_eq!(m.verdicts[0].verdict.as_deref(), Some("exited"));
        assert_eq!(m.verdicts[1].verdict.as_deref(), Some("signal"));
    }

    #[test]
    fn a_panel_per_resource_in_either_run_the_one_that_hit_its_limit_first() {
        let (a, b) = (
            run(400, 300, Some("disk:/a")),
            run(200, 200, Some("disk:/b")),
        );
        let m = model(&a, &b);
        let names: Vec<&str> = m.panels.iter().map(|p| p.resource.as_str()).collect();
        // The one that hit its limit, then those only one run watched, then the rest.
        assert_eq!(names, ["tree_memory", "disk:/a", "disk:/b", "host_memory"]);
        let tree = &m.panels[0];
        let (sa, sb) = (tree.a.as_ref().unwrap(), tree.b.as_ref().unwrap());
        assert_eq!(sa.limits, [400 << 20]);
        assert_eq!(sb.limits, [200 << 20]);
        assert!(!sa.reached_limit && sb.reached_limit);
        assert!(sa.alerts.is_empty());
        assert_eq!(sb.alerts, [19.0]);
        // A disk only one run watched: a panel with the other run absent, and unlimited.
        let disk_a = &m.panels[1];
        assert!(disk_a.b.is_none());
        assert!(disk_a.a.as_ref().unwrap().limits.is_empty());
        assert_eq!(run_summary(Run::B, disk_a.b.as_ref()), "run B: not watched");
        assert_eq!(
            run_summary(Run::B, Some(sb)),
            "run B: peak 200.00 MiB of 200.00 MiB, reached its limit, 1 alert"
        );
    }

    /// `run` watching the disk `path` (on a filesystem of 252 GiB of `fs_type` mounted at
    /// `mount`), with an environment record saying so.
    fn run_on_disk(
        limit_mib: u64,
        peak_mib: u64,
        path: &str,
        mount: &str,
        fs_type: &str,
    ) -> Recording {
        let mut rec = run(limit_mib, peak_mib, Some(&format!("disk:{path}")));
        // The record writes a home `~`, as the watchdog does; the resource keeps it.
        let recorded = path
            .strip_prefix("/home/alice")
            .map_or_else(|| path.to_string(), |rest| format!("~{rest}"));
        rec.meta.environment = Some(watchdog_types::environment::Environment {
            disks: vec![watchdog_types::environment::DiskFact {
                path: recorded,
                size_bytes: Some(252 << 30),
                mount_point: Some(mount.into()),
                fs_type: Some(fs_type.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        rec
    }

    /// Issue 18: two runs from two directories on one filesystem watch one disk: no
    /// difference, one panel with both runs, the paths as detail in the same facts.
    #[test]
    fn disks_on_one_mount_point_are_one_panel_and_no_difference() {
        let a = run_on_disk(400, 300, "/data/x/small", "/data", "ext4");
        let b = run_on_disk(200, 200, "/data/x/big", "/data", "ext4");
        let m = model(&a, &b);
        let names: Vec<&str> = m.differences.iter().map(|f| f.name.as_str()).collect();
        assert!(!names.iter().any(|n| n.contains("disk")), "{names:?}");
        let disk = m
            .same
            .iter()
            .find(|f| f.name == "disk size on /data")
            .unwrap_or_else(|| panic!("{:?}", m.same));
        assert_eq!(disk.a.as_deref(), Some("252.00 GiB ext4 (/data/x/small)"));
        assert_eq!(disk.b.as_deref(), Some("252.00 GiB ext4 (/data/x/big)"));
        let panels: Vec<&str> = m.panels.iter().map(|p| p.resource.as_str()).collect();
        assert_eq!(panels, ["tree_memory", "host_memory", "disk:/data/x/small"]);
        let p = &m.panels[2];
        assert_eq!(p.resource_b.as_deref(), Some("disk:/data/x/big"));
        assert!(p.a.is_some() && p.b.is_some(), "{p:?}");
        let html = render_compare_html(&a, &b, ["a.rec", "b.rec"]);
        assert!(html.contains("data-resource-b=\"disk:/data/x/big\""));

        // A disk on another filesystem is another disk, in the facts and the panels.
        let c = run_on_disk(200, 200, "/mnt/t/x", "/mnt/t", "tmpfs");
        let m = model(&a, &c);
        let names: Vec<&str> = m.differences.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["disk size on /data", "disk size on /mnt/t"]);
        assert_eq!(m.panels.len(), 4);
        assert!(m.panels.iter().all(|p| p.resource_b.is_none()));

        // Two directories in a home: the record says `~/exp1`, the resource keeps the
        // home's path; still one panel.
        let a = run_on_disk(400, 300, "/home/alice/exp1", "/home", "ext4");
        let b = run_on_disk(400, 300, "/home/alice/exp2", "/home", "ext4");
        let m = model(&a, &b);
        assert!(m.differences.is_empty(), "{:?}", m.differences);
        let p = m
            .panels
            .iter()
            .find(|p| p.resource == "disk:/home/alice/exp1")
            .unwrap_or_else(|| panic!("{:?}", m.panels));
        assert_eq!(p.resource_b.as_deref(), Some("disk:/home/alice/exp2"));
        assert_eq!(m.panels.len(), 3);
    }

    #[test]
    fn a_plain_trace_compared_with_itself_has_no_differences() {
        let plain = crate::recording::parse("time,used,limit\n0,1,100\n1,2,100\n").unwrap();
        let m = model(&plain, &plain);
        assert!(m.differences.is_empty(), "{:?}", m.differences);
        // Settings a plain trace does not record are unknown on both sides: no difference.
        let cmd = m.same.iter().find(|f| f.name == "command").unwrap();
        assert_eq!((cmd.a.as_ref(), cmd.b.as_ref()), (None, None));
        assert_eq!(m.panels.len(), 1);
        let html = render_compare_html(&plain, &plain, ["x.csv", "x.csv"]);
        assert!(html.contains("class=\"no-differences\""));
        assert!(html.contains("<ul class=\"unknown\">"));
    }

    #[test]
    fn pages_have_both_runs_in_two_colours() {
        let (a, b) = (run(400, 300, None), run(200, 200, None));
        let html = render_compare_html(&a, &b, ["a.rec", "b.rec"]);
        let diff_table = &html[html.find("<table class=\"differences\">").unwrap()..];
        let diff_table = &diff_table[..diff_table.find("</table>").unwrap()];
        assert!(
            diff_table.contains("data-field=\"limit tree_memory\""),
            "{diff_table}"
        );
        assert!(!diff_table.contains("host_memory"), "{diff_table}");
        assert!(html.contains("<details class=\"same\">"));
        let tree = &html[html.find("data-resource=\"tree_memory\"").unwrap()..];
        let tree = &tree[..tree.find("<g class=\"panel\"").unwrap_or(tree.len())];
        for run in ["a", "b"] {
            assert!(tree.contains(&format!("<g class=\"run\" data-run=\"{run}\"")));
        }
        assert_eq!(tree.matches("class=\"limit\"").count(), 2, "{tree}");
        assert!(tree.contains(&format!("stroke=\"{COLOR_A}\"")));
        assert!(tree.contains(&format!("stroke=\"{COLOR_B}\"")));
        assert_eq!(tree.matches("class=\"alert\"").count(), 1);
        let svg = render_compare_svg(&a, &b, ["a.rec", "b.rec"]);
        assert!(svg.starts_with("<svg"));
        assert!(
            svg.contains("limit tree_memory: run A 400.00 MiB, run B 200.00 MiB"),
            "{svg}"
        );
    }
}
