//! Replays every trace of the corpus in `tests/traces/` (generated and
//! recorded) and checks the alert timing against the true exhaustion time
//! each trace carries in its `# exhausts_at:` header.
//!
//! - A trace that exhausts: the first alert comes at least the lead before the
//!   exhaustion (never late), and a trend alert no earlier than 3x the lead
//!   plus 30 s (floor and next-step alerts fire on what the headroom is now,
//!   not on a forecast, and are exempt when the headroom was below the floor
//!   or the learned step).
//! - A trace that never exhausts: no alert at all.
//! - A trace with `# scored_from: T` holds earlier episodes, freed before T: the alerts
//!   before T must number `# alerts_before:` (one per episode), and only the ones after
//!   are scored as above (`# ack_after_s:` replays the run's acknowledgments).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::PathBuf;

use watchdog_engine::EngineSettings;
use watchdog_engine::replay::{self, ReplayReport};
use watchdog_formats::trace::{self, Trace};
use watchdog_types::AlertReason;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/traces")
}

/// The `.csv` files of `dir`, sorted.
fn csv_files(dir: PathBuf) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    paths.sort();
    paths
}

fn corpus() -> Vec<(String, Trace)> {
    let mut out = Vec::new();
    for p in csv_files(corpus_dir()) {
        let text = std::fs::read_to_string(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let trace = trace::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, trace));
    }
    out
}

fn meta_f64(name: &str, t: &Trace, key: &str) -> f64 {
    t.meta(key)
        .unwrap_or_else(|| panic!("{name}: no '# {key}:' header"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: bad {key}: {e}"))
}

fn replay_trace(name: &str, t: &Trace) -> (ReplayReport, Option<f64>, f64) {
    let lead = meta_f64(name, t, "lead_s");
    let interval = meta_f64(name, t, "interval_s");
    let exhausts = match t.meta("exhausts_at") {
        Some("never") => None,
        Some(v) => Some(v.parse::<f64>().unwrap()),
        None => panic!("{name}: no '# exhausts_at:' header"),
    };
    let cfg = EngineSettings {
        lead_s: lead,
        interval_s: interval,
        ..EngineSettings::default()
    };
    (replay::run_trace(t, &cfg), exhausts, lead)
}

#[test]
fn corpus_is_not_empty_and_covers_both_outcomes() {
    let c = corpus();
    assert!(c.len() >= 14, "only {} traces", c.len());
    let exhausting = c
        .iter()
        .filter(|(_, t)| t.meta("exhausts_at") != Some("never"))
        .count();
    assert!(exhausting >= 5 && exhausting < c.len());
}

#[test]
fn alerts_come_in_time_and_only_when_needed() {
    let mut failures = Vec::new();
    for (name, t) in corpus() {
        let (mut report, exhausts, lead) = replay_trace(&name, &t);
        let floor = EngineSettings::default().floor_percent / 100.0;
        // Earlier, freed episodes: each alerted once, and not scored against the exhaustion.
        let scored_from = t
            .meta("scored_from")
            .map_or(f64::NEG_INFINITY, |_| meta_f64(&name, &t, "scored_from"));
        let earlier = report
            .alerts
            .iter()
            .take_while(|a| a.time_s < scored_from)
            .count();
        let want = t
            .meta("alerts_before")
            .map_or(0, |_| meta_f64(&name, &t, "alerts_before") as usize);
        if earlier != want {
            failures.push(format!(
                "{name}: {earlier} alert(s) before {scored_from}s, expected {want}"
            ));
        }
        report.alerts.drain(..earlier);
        match exhausts {
            None => {
                if !report.alerts.is_empty() {
                    failures.push(format!("{name}: false alarm {:?}", report.alerts[0]));
                }
            }
            Some(at) => {
                let Some(first) = report.alerts.first() else {
                    failures.push(format!("{name}: no alert before exhaustion at {at}"));
                    continue;
                };
                let before = at - first.time_s;
                println!(
                    "{name}: {:?} alert {before:.1}s before exhaustion (lead {lead})",
                    first.reason
                );
                if before < lead {
                    failures.push(format!(
                        "{name}: alert only {before:.1}s before exhaustion at {at} (lead {lead}): {first:?}"
                    ));
                }
                let headroom = first.limit.saturating_sub(first.used) as f64;
                let floor_crossed = headroom < floor * first.limit as f64;
                if first.reason == AlertReason::Trend
                    && !floor_crossed
                    && before > 3.0 * lead + 30.0
                {
                    failures.push(format!(
                        "{name}: alert absurdly early, {before:.1}s before exhaustion at {at}: {first:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn replay_of_every_trace_renders_json_lines() {
    for (name, t) in corpus() {
        let (report, _, _) = replay_trace(&name, &t);
        let text = report.to_json_lines();
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("{\"event\":\"summary\""), "{name}: {last}");
        assert_eq!(text.lines().count(), report.alerts.len() + 1);
    }
}

/// The step-peak traces of `tests/traces/steps/`: (file name, text, parsed).
fn step_corpus() -> Vec<(String, String, watchdog_formats::step_trace::StepTrace)> {
    csv_files(corpus_dir().join("steps"))
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let t = watchdog_formats::step_trace::parse(&text)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, text, t)
        })
        .collect()
}

/// Every step-peak trace that fails is warned at least one save (`# save_s:`) before the
/// failing step (or evaluation) starts, and no more than 3 horizons and 5 minutes before
/// it, by the step-peak predictor through `replay`; a trace that never fails is never
/// warned.
#[test]
fn step_peak_traces_are_warned_a_save_ahead_and_steady_ones_never() {
    let traces = step_corpus();
    assert!(traces.len() >= 5, "only {} step-peak traces", traces.len());
    let mut failures = Vec::new();
    for (name, text, t) in &traces {
        let lead: f64 = t.meta("lead_s").unwrap().parse().unwrap();
        let save: f64 = t.meta("save_s").unwrap().parse().unwrap();
        let settings = EngineSettings {
            lead_s: lead,
            ..EngineSettings::default()
        };
        let report = replay::run(text, &settings).unwrap();
        match t.meta("exhausts_at").unwrap() {
            "never" => {
                if let Some(a) = report.alerts.first() {
                    failures.push(format!("{name}: false alarm {a:?}"));
                }
            }
            at => {
                let at: f64 = at.parse().unwrap();
                let Some(first) = report.alerts.first() else {
                    failures.push(format!("{name}: no alert before the failing step at {at}"));
                    continue;
                };
                let ahead = at - first.time_s;
                println!(
                    "{name}: {:?} alert {ahead:.1}s ahead (save {save})",
                    first.reason
                );
                if ahead < save {
                    failures.push(format!(
                        "{name}: alert only {ahead:.1}s before the failing step at {at} (save {save}): {first:?}"
                    ));
                }
                // Early by the margin (5% of the card can be minutes of growth) and the
                // horizon, not by a whole run.
                if ahead > 3.0 * lead.max(save) + 300.0 {
                    failures.push(format!(
                        "{name}: alert absurdly early, {ahead:.1}s before the failing step at {at}: {first:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
