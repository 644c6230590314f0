//! The accuracy table of `docs/prediction.md`: every trace of `tests/traces/`
//! replayed through this crate's predictor and through a plain
//! `predict_linear`-style least-squares fit over the last 4 lead times of raw
//! samples, side by side.
//!
//!     cargo run -p watchdog-engine --example accuracy --release              # print
//!     cargo run -p watchdog-engine --example accuracy --release -- --update-doc
//!
//! `--update-doc` rewrites the block between `<!-- accuracy:begin -->` and
//! `<!-- accuracy:end -->` in `docs/prediction.md`, and the step-peak table (the traces of
//! `tests/traces/steps/`: the step-peak predictor beside today's NVML-total policy, the
//! predictor above over the device's used memory the same trace implies) between
//! `<!-- step-accuracy:begin -->` and `<!-- step-accuracy:end -->`, and the adaptive-rate
//! table (every trace at the fixed rate and at adaptive rates, see
//! `watchdog_predictor::sample_rate`) between `<!-- adaptive-accuracy:begin -->` and
//! `<!-- adaptive-accuracy:end -->`.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::PathBuf;

use watchdog_engine::replay;
use watchdog_formats::step_trace;
use watchdog_formats::trace::{self, Trace, TraceFormat, TraceSample};
use watchdog_predictor::{Decision, PredictorConfig};
use watchdog_types::AlertReason;

/// What one method did on one trace.
#[derive(Default)]
struct Outcome {
    first_alert: Option<f64>,
    /// (time, exempt from the "too early" rule: floor crossed or the next step does not fit).
    alerts: Vec<(f64, bool)>,
    /// (time, predicted seconds left) for every sample.
    forecasts: Vec<(f64, Option<f64>)>,
}

impl Outcome {
    /// Leaves out the alerts before `t` (earlier episodes of the trace).
    fn scored_from(mut self, t: f64) -> Outcome {
        self.alerts.retain(|a| a.0 >= t);
        self.first_alert = self.alerts.first().map(|a| a.0);
        self
    }
}

/// Prometheus' `predict_linear(used[N], lead) >= limit` over the last `window_s` seconds.
struct LinearBaseline {
    window_s: f64,
    points: VecDeque<(f64, f64)>,
}

impl LinearBaseline {
    fn seconds_left(&mut self, t: f64, used: f64, limit: f64) -> Option<f64> {
        self.points.push_back((t, used));
        while self
            .points
            .front()
            .is_some_and(|&(t0, _)| t0 < t - self.window_s)
        {
            self.points.pop_front();
        }
        let n = self.points.len() as f64;
        if n < 2.0 {
            return None;
        }
        let (mx, my) = self
            .points
            .iter()
            .fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n));
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for &(x, y) in &self.points {
            sxx += (x - mx) * (x - mx);
            sxy += (x - mx) * (y - my);
        }
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        if slope <= 0.0 {
            return None;
        }
        let fitted_now = my + slope * (t - mx);
        Some(((limit - fitted_now) / slope).max(0.0))
    }
}

/// What a trace's headers say, for a replay at `interval` seconds.
struct Scoring {
    lead: f64,
    exhausts: Option<f64>,
    /// Alerts of earlier, freed episodes (before `# scored_from:`) are not scored.
    scored_from: f64,
    cfg: PredictorConfig,
}

fn scoring(t: &Trace, interval: f64) -> Scoring {
    let lead: f64 = t.meta("lead_s").unwrap().parse().unwrap();
    Scoring {
        lead,
        exhausts: t.meta("exhausts_at").and_then(|v| v.parse::<f64>().ok()),
        scored_from: t
            .meta("scored_from")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NEG_INFINITY),
        cfg: PredictorConfig {
            lead_s: lead,
            interval_s: interval,
            ..PredictorConfig::default()
        },
    }
}

/// Records an alert of our predictor at `time` on sample `s`.
fn note_alert(
    o: &mut Outcome,
    s: &TraceSample,
    time: f64,
    reason: AlertReason,
    floor_percent: f64,
) {
    let below_floor =
        (s.limit.saturating_sub(s.used) as f64) < s.limit as f64 * floor_percent / 100.0;
    o.alerts
        .push((time, below_floor || reason == AlertReason::NextStep));
    o.first_alert.get_or_insert(time);
}

/// The engine's settings for this predictor configuration.
fn engine_settings(cfg: &PredictorConfig) -> watchdog_engine::EngineSettings {
    watchdog_engine::EngineSettings {
        lead_s: cfg.lead_s,
        interval_s: cfg.interval_s,
        floor_percent: cfg.floor_percent,
        ..watchdog_engine::EngineSettings::default()
    }
}

fn run_ours(t: &Trace, cfg: &PredictorConfig) -> Outcome {
    let mut o = Outcome::default();
    replay::run_trace_with(t, &engine_settings(cfg), |s, time, obs| {
        if s.resource == 0 {
            o.forecasts.push((time, obs.forecast.seconds_left));
        }
        if let Decision::Alert(reason) = obs.decision {
            note_alert(&mut o, s, time, reason, cfg.floor_percent);
        }
    });
    o
}

/// The same as [`run_ours`], sampled at adaptive rates; and how each resource was sampled.
fn run_adaptive(
    t: &Trace,
    cfg: &PredictorConfig,
    adaptive: replay::Adaptive,
) -> (Outcome, Vec<replay::RateSummary>) {
    let mut o = Outcome::default();
    let settings = engine_settings(cfg);
    let (_, rates) = replay::run_trace_adaptive(t, &settings, adaptive, |s, time, obs| {
        if let Decision::Alert(reason) = obs.decision {
            note_alert(&mut o, s, time, reason, cfg.floor_percent);
        }
    });
    (o, rates)
}

/// Samples a second as "1.0/s", "-" when never in that mode.
fn fmt_rate(rate: Option<f64>) -> String {
    rate.map_or("-".to_string(), |r| format!("{r:.2}/s"))
}

/// The adaptive-rate table: every trace at the fixed rate beside adaptive rates with
/// `max_interval` at its largest (lead / 8), without and with a modelled kernel wake for
/// cgroup memory.
fn adaptive_table(root: &std::path::Path) -> String {
    let paths = csv_files(&root.join("tests/traces"));
    let mut table = String::from(
        "| trace | interval / max | fixed: lead achieved | fixed: false alarms | adaptive: lead achieved | adaptive: later than fixed | adaptive: false alarms | samples/s far / approaching / overall (fixed) | with kernel wake: lead achieved | with kernel wake: later than fixed | with kernel wake: false alarms | with kernel wake: samples/s far / approaching / overall (woken) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut totals = [(0usize, 0usize, 0usize); 2];
    let (mut far_n, mut far_s, mut fixed_false) = (0usize, 0.0f64, 0usize);
    let mut variants = Vec::new();
    for p in &paths {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        let t = trace::parse(&text).unwrap();
        let interval: f64 = t.meta("interval_s").unwrap().parse().unwrap();
        if interval >= 0.5 {
            // Sampled once a second, as slowly as the 30 s lead allows already: the same
            // usage at a tenth of the interval (linear between the trace's samples) too.
            variants.push((format!("{name} (x10)"), upsample(&t, 10), interval / 10.0));
        }
        variants.push((name, t, interval));
    }
    variants.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, t, interval) in &variants {
        let interval = *interval;
        let Scoring {
            lead,
            exhausts,
            scored_from,
            cfg,
        } = scoring(t, interval);
        let fixed = run_ours(t, &cfg).scored_from(scored_from);
        fixed_false += false_alarms(&fixed, exhausts, lead);
        let max_interval = watchdog_predictor::sample_rate::clamp_max_interval(
            interval,
            lead / 8.0,
            lead,
            cfg.bucket_width_s(),
        );
        let mut cells = Vec::new();
        for (k, kernel_wake) in [false, true].into_iter().enumerate() {
            let adaptive = replay::Adaptive {
                max_interval_s: max_interval,
                kernel_wake,
            };
            let (o, rates) = run_adaptive(t, &cfg, adaptive);
            let o = o.scored_from(scored_from);
            let late = exhausts.is_some_and(|e| o.first_alert.is_none_or(|a| e - a < lead));
            let later = match (fixed.first_alert, o.first_alert) {
                (Some(f), Some(a)) => format!("{:+.1} s", a - f),
                (None, None) => "-".to_string(),
                _ => "**differs**".to_string(),
            };
            let falses = false_alarms(&o, exhausts, lead);
            // A false alarm the fixed rate did not have, or a missed alert.
            let extra = falses.saturating_sub(false_alarms(&fixed, exhausts, lead))
                + usize::from(o.alerts.len() != fixed.alerts.len());
            totals[k].0 += usize::from(late);
            totals[k].1 += falses;
            totals[k].2 += extra;
            let r = &rates[0];
            if !kernel_wake {
                far_n += r.slow_samples;
                far_s += r.slow_s;
            }
            let overall = (r.slow_samples + r.fast_samples) as f64 / (r.slow_s + r.fast_s);
            let fixed_rate = (r.offered.saturating_sub(1)) as f64 / (r.slow_s + r.fast_s);
            let tail = if kernel_wake {
                format!("{} woken", r.woken)
            } else {
                format!("{fixed_rate:.2}/s")
            };
            cells.push(format!(
                "{} | {later} | {falses} | {} / {} / {overall:.2}/s ({tail})",
                fmt_lead(&o, exhausts),
                fmt_rate(r.slow_rate()),
                fmt_rate(r.fast_rate()),
            ));
        }
        let _ = writeln!(
            table,
            "| {name} | {interval} s / {max_interval} s | {} | {} | {} | {} |",
            fmt_lead(&fixed, exhausts),
            false_alarms(&fixed, exhausts, lead),
            cells[0],
            cells[1],
        );
    }
    let _ = writeln!(
        table,
        "\nTotals over {} rows: the fixed rate {} false alarms; adaptive {} late or missed, {} false alarms, {} alerts the fixed rate did not have or had and it did not; with kernel wake {} late or missed, {} false alarms, {} such differences. Without a kernel wake, while far from its limit the first resource was sampled {:.2} times a second on average over all rows (whatever their interval).",
        variants.len(),
        fixed_false,
        totals[0].0,
        totals[0].1,
        totals[0].2,
        totals[1].0,
        totals[1].1,
        totals[1].2,
        far_n as f64 / far_s.max(1e-9),
    );
    table
}

/// The same usage sampled `factor` times as often: linear between each resource's
/// samples.
fn upsample(t: &Trace, factor: usize) -> Trace {
    let mut samples = Vec::new();
    let mut last: Vec<Option<TraceSample>> = vec![None; t.resources.len()];
    for &s in &t.samples {
        if let Some(Some(prev)) = last.get(s.resource) {
            for k in 1..factor {
                let f = k as f64 / factor as f64;
                samples.push(TraceSample {
                    t_s: prev.t_s + f * (s.t_s - prev.t_s),
                    used: (prev.used as f64 + f * (s.used as f64 - prev.used as f64)) as u64,
                    ..*prev
                });
            }
        }
        samples.push(s);
        if let Some(slot) = last.get_mut(s.resource) {
            *slot = Some(s);
        }
    }
    samples.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    Trace {
        samples,
        ..t.clone()
    }
}

fn run_baseline(t: &Trace, cfg: &PredictorConfig) -> Outcome {
    let mut o = Outcome::default();
    let start = t.start_s();
    let mut b = LinearBaseline {
        window_s: 4.0 * cfg.lead_s,
        points: VecDeque::new(),
    };
    let mut armed = true;
    for s in t.samples.iter().filter(|s| s.resource == 0) {
        let time = s.t_s - start;
        let left = b.seconds_left(time, s.used as f64, s.limit as f64);
        o.forecasts.push((time, left));
        let trigger = cfg.lead_s + cfg.interval_s;
        if armed && left.is_some_and(|l| l < trigger) {
            armed = false;
            o.alerts.push((time, false));
            o.first_alert.get_or_insert(time);
        } else if !armed && left.is_none_or(|l| l > 2.0 * cfg.lead_s) {
            armed = true;
        }
    }
    o
}

fn fmt_err(o: &Outcome, exhausts: f64) -> String {
    let mut parts = Vec::new();
    for frac in [0.25, 0.5, 0.75] {
        let at = frac * exhausts;
        let f = o.forecasts.iter().rev().find(|(t, _)| *t <= at);
        parts.push(match f {
            Some(&(t, Some(pred))) => {
                let truth = exhausts - t;
                format!("{:+.0}%", 100.0 * (pred - truth) / truth)
            }
            _ => "none".to_string(),
        });
    }
    parts.join(" / ")
}

fn fmt_lead(o: &Outcome, exhausts: Option<f64>) -> String {
    match (exhausts, o.first_alert) {
        (Some(e), Some(a)) if a <= e => format!("{:.1} s", e - a),
        (Some(_), _) => "**missed**".to_string(),
        (None, _) => "-".to_string(),
    }
}

/// Alerts on a trace that never exhausts, and forecast alerts more than 3x the lead
/// plus 30 s before the exhaustion.
fn false_alarms(o: &Outcome, exhausts: Option<f64>, lead: f64) -> usize {
    match exhausts {
        None => o.alerts.len(),
        Some(e) => o
            .alerts
            .iter()
            .filter(|&&(t, exempt)| !exempt && e - t > 3.0 * lead + 30.0)
            .count(),
    }
}

/// How far ahead of the failing step the first alert came: "12.5 s, 50 steps (reason)",
/// "**late**: ..." when less than a save, "**missed**" without one.
fn fmt_ahead(first: Option<(f64, usize, AlertReason)>, fails: f64, save: f64) -> String {
    match first {
        Some((t, steps, reason)) if t <= fails => {
            let ahead = fails - t;
            let late = if ahead < save { "**late**: " } else { "" };
            format!("{late}{ahead:.1} s, {steps} steps (`{}`)", reason.as_str())
        }
        _ => "**missed**".to_string(),
    }
}

/// The step-peak table: every trace of `tests/traces/steps/` through the step-peak
/// predictor and through the NVML-total policy (the usage predictor over reserved +
/// outside + others against the device's total, sampled once a step).
fn step_table(root: &std::path::Path) -> String {
    let paths = csv_files(&root.join("tests/traces/steps"));
    let mut table = String::from(
        "| trace | lead / save | fails at | step peak: first alert ahead | step peak: false alarms | NVML total: first alert ahead | NVML total: false alarms |\n|---|---|---|---|---|---|---|\n",
    );
    let (mut ours_late, mut base_late, mut ours_false, mut base_false) = (0, 0, 0, 0);
    for p in &paths {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        let t = step_trace::parse(&text).unwrap();
        let lead: f64 = t.meta("lead_s").unwrap().parse().unwrap();
        let save: f64 = t.meta("save_s").unwrap().parse().unwrap();
        let fails = t.meta("exhausts_at").and_then(|v| v.parse::<f64>().ok());
        let start = t.rows.first().map_or(0.0, |r| r.t_s);
        // NVML is read once a step here: the interval is the median step.
        let mut dts: Vec<f64> = t.rows.windows(2).map(|w| w[1].t_s - w[0].t_s).collect();
        dts.sort_by(f64::total_cmp);
        let interval = dts.get(dts.len() / 2).copied().unwrap_or(1.0).max(1e-3);
        let settings = watchdog_engine::EngineSettings {
            lead_s: lead,
            interval_s: interval,
            ..watchdog_engine::EngineSettings::default()
        };
        // Steps still to come after an alert at `time`.
        let steps_after = |time: f64| t.rows.iter().filter(|r| r.t_s - start > time).count();
        let ours = replay::run_steps(&text, &settings).unwrap();
        let nvml = Trace {
            format: TraceFormat::Csv,
            resources: vec!["gpu0".to_string()],
            samples: t
                .rows
                .iter()
                .map(|r| TraceSample {
                    resource: 0,
                    t_s: r.t_s,
                    used: r.device_used(),
                    limit: r.total,
                })
                .collect(),
            meta: Vec::new(),
        };
        let base = replay::run_trace(&nvml, &settings);
        let first = |r: &replay::ReplayReport| {
            r.alerts
                .first()
                .map(|a| (a.time_s, steps_after(a.time_s), a.reason))
        };
        let (ours_first, base_first) = (first(&ours), first(&base));
        let (ours_cell, base_cell) = match fails {
            Some(f) => {
                for (first, late) in [(ours_first, &mut ours_late), (base_first, &mut base_late)] {
                    if first.is_none_or(|(t, _, _)| f - t < save) {
                        *late += 1;
                    }
                }
                (
                    fmt_ahead(ours_first, f, save),
                    fmt_ahead(base_first, f, save),
                )
            }
            None => {
                ours_false += ours.alerts.len();
                base_false += base.alerts.len();
                ("-".to_string(), "-".to_string())
            }
        };
        let count = |r: &replay::ReplayReport| {
            if fails.is_none() { r.alerts.len() } else { 0 }
        };
        let fails_cell = match fails {
            Some(f) => format!(
                "{f:.1} s (step {} of `{}`)",
                t.meta("fails_at_step").unwrap_or("?"),
                t.meta("fails_phase").unwrap_or("?")
            ),
            None => "never".to_string(),
        };
        let _ = writeln!(
            table,
            "| {name} | {lead} s / {save} s | {fails_cell} | {ours_cell} | {} | {base_cell} | {} |",
            count(&ours),
            count(&base),
        );
    }
    let _ = writeln!(
        table,
        "\nTotals over {} traces: step peak {} late or missed, {} false alarms; NVML total {} late or missed, {} false alarms.",
        paths.len(),
        ours_late,
        ours_false,
        base_late,
        base_false
    );
    table
}

/// The `.csv` files of `dir`, sorted.
fn csv_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    paths.sort();
    paths
}

/// Replaces what is between `begin` and `end` in `doc` with `table`.
fn splice(doc: &str, begin: &str, end: &str, table: &str) -> Option<String> {
    let (b, e) = (doc.find(begin)?, doc.find(end)?);
    Some(format!("{}{begin}\n{table}{}", &doc[..b], &doc[e..]))
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths = csv_files(&root.join("tests/traces"));
    let mut table = String::new();
    table.push_str(
        "| trace | lead | exhausts at | ours: lead achieved | ours: false alarms | ours: error at 25 / 50 / 75% | predict_linear: lead achieved | predict_linear: false alarms | predict_linear: error at 25 / 50 / 75% |\n",
    );
    table.push_str("|---|---|---|---|---|---|---|---|---|\n");
    let (mut ours_missed, mut base_missed, mut ours_false, mut base_false) = (0, 0, 0, 0);
    for p in &paths {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        let t = trace::parse(&text).unwrap();
        let interval: f64 = t.meta("interval_s").unwrap().parse().unwrap();
        let Scoring {
            lead,
            exhausts,
            scored_from,
            cfg,
        } = scoring(&t, interval);
        let ours = run_ours(&t, &cfg).scored_from(scored_from);
        let base = run_baseline(&t, &cfg).scored_from(scored_from);
        let err = |o: &Outcome| exhausts.map_or("-".to_string(), |e| fmt_err(o, e));
        for (o, missed) in [(&ours, &mut ours_missed), (&base, &mut base_missed)] {
            if exhausts.is_some_and(|e| o.first_alert.is_none_or(|a| e - a < lead)) {
                *missed += 1;
            }
        }
        ours_false += false_alarms(&ours, exhausts, lead);
        base_false += false_alarms(&base, exhausts, lead);
        let _ = writeln!(
            table,
            "| {name} | {lead} s | {} | {} | {} | {} | {} | {} | {} |",
            exhausts.map_or("never".to_string(), |e| format!("{e:.1} s")),
            fmt_lead(&ours, exhausts),
            false_alarms(&ours, exhausts, lead),
            err(&ours),
            fmt_lead(&base, exhausts),
            false_alarms(&base, exhausts, lead),
            err(&base),
        );
    }
    let _ = writeln!(
        table,
        "\nTotals over {} traces: ours {} late or missed, {} false alarms; predict_linear {} late or missed, {} false alarms.",
        paths.len(),
        ours_missed,
        ours_false,
        base_missed,
        base_false
    );
    print!("{table}");
    let steps = step_table(&root);
    print!("\n{steps}");
    let adaptive = adaptive_table(&root);
    print!("\n{adaptive}");
    if std::env::args().any(|a| a == "--update-doc") {
        let doc_path = root.join("docs/prediction.md");
        let doc = std::fs::read_to_string(&doc_path).unwrap();
        let updated = splice(
            &doc,
            "<!-- accuracy:begin -->",
            "<!-- accuracy:end -->",
            &table,
        )
        .and_then(|d| {
            splice(
                &d,
                "<!-- step-accuracy:begin -->",
                "<!-- step-accuracy:end -->",
                &steps,
            )
        })
        .and_then(|d| {
            splice(
                &d,
                "<!-- adaptive-accuracy:begin -->",
                "<!-- adaptive-accuracy:end -->",
                &adaptive,
            )
        });
        let Some(updated) = updated else {
            eprintln!("{}: no accuracy markers", doc_path.display());
            std::process::exit(2);
        };
        std::fs::write(&doc_path, updated).unwrap();
        eprintln!("updated {}", doc_path.display());
    }
}
