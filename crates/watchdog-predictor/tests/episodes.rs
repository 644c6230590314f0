//! Episodes: every leak is warned with its full lead however soon it follows the last
//! episode, and each episode is warned once.
//!
//! The trace generator, not the predictor, says where episodes begin: a trace is a chain
//! of segments (leak, staircase, saw-tooth, plateau) joined by flat gaps of 0 to 3 leads.
//! A leak or a staircase runs until the limit is reached and is then freed (usage drops
//! to a new base well below the limit): each of those is one episode, and must be alerted
//! exactly once, before it runs out; a leak at least a full lead before, at the same
//! moment (within one interval) as a fresh predictor started at the free would alert. A
//! saw-tooth well below the limit, a plateau and the gaps are no episode: no alert.
//! The run acknowledges each request, as the Python client does; without
//! acknowledgments a drop keeps the old peak as a ceiling (see the last tests).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use watchdog_predictor::{Decision, PredictorConfig, ResourcePredictor};
use watchdog_types::ResourceKind;

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{GEN_DT as DT, GEN_LIMIT as LIMIT, GenTrace, episode_segment, generate_usage};

/// The generated trace of the episodes: leaks without noise, nothing after the last part.
fn generate(
    lead: f64,
    first_base: f64,
    parts: &[(f64, prop_support::Segment)],
    seed: u64,
) -> GenTrace {
    generate_usage(lead, first_base, parts, false, 0.0, seed)
}

fn config(lead_s: f64) -> PredictorConfig {
    PredictorConfig {
        lead_s,
        interval_s: DT,
        ..PredictorConfig::default()
    }
}

/// Alert times (sample indices) of a predictor run over `samples`; the run acknowledges
/// each request `ack_after` samples after it (as the Python client does), or never.
fn alerts_acked(lead: f64, samples: &[(f64, f64)], ack_after: Option<usize>) -> Vec<usize> {
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, config(lead));
    let mut out: Vec<usize> = Vec::new();
    for (i, &(t, v)) in samples.iter().enumerate() {
        if let (Some(&last), Some(after)) = (out.last(), ack_after)
            && i == last + after
        {
            // Late enough, this is read after the drop: it lifts the ceiling then.
            p.note_acknowledged();
        }
        if let Decision::Alert(_) = p.observe(t, v as u64, LIMIT as u64).decision {
            out.push(i);
        }
    }
    out
}

/// `teeth` saw-tooth periods of `period_s`, each rising linearly from `base` to
/// `base + amp` (fractions of the limit), sampled every DT.
fn sawtooth(teeth: usize, period_s: f64, base: f64, amp: f64) -> Vec<(f64, f64)> {
    let mut samples = Vec::new();
    let mut t = 0.0;
    for _ in 0..teeth {
        let t0 = t;
        while t < t0 + period_s {
            samples.push((t, (base + amp * (t - t0) / period_s) * LIMIT));
            t += DT;
        }
    }
    samples
}

/// Asserts that exactly `n` alerts came, naming their times when not.
fn assert_alert_count(n: usize, got: &[usize], samples: &[(f64, f64)]) {
    assert_eq!(
        got.len(),
        n,
        "alerts at {:?}",
        got.iter().map(|&i| samples[i].0).collect::<Vec<_>>()
    );
}

/// Alert times of a run that acknowledges every request one sample later.
fn alerts(lead: f64, samples: &[(f64, f64)]) -> Vec<usize> {
    alerts_acked(lead, samples, Some(1))
}

/// An acknowledgment read only after the drop was seen counts as well.
#[test]
fn an_acknowledgment_read_after_the_drop_counts() {
    let lead = 3.0;
    let mut samples = Vec::new();
    let mut t = 0.0;
    let mut exhausted = Vec::new();
    for _ in 0..2 {
        let t0 = t;
        let mut v = 0.05;
        // Freed at 90%, soon after the alert.
        while v < 0.9 {
            samples.push((t, v * LIMIT));
            t += DT;
            v = 0.05 + 0.05 * (t - t0);
        }
        exhausted.push(t0 + 0.95 / 0.05);
    }
    let first = alerts_acked(lead, &samples, None)[0];
    let drop = samples
        .iter()
        .position(|s| s.1 < 0.1 * LIMIT && s.0 > 1.0)
        .unwrap();
    let got = alerts_acked(lead, &samples, Some(drop - first + 2));
    assert_eq!(got.len(), 2);
    assert!(exhausted[1] - samples[got[1]].0 >= lead - 1e-6);
}

proptest! {
    // PROPTEST_CASES raises the count (docs/prediction.md gives the long run).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_episode_is_warned_once_and_in_time(
        lead in prop::sample::select(vec![2.0, 3.0, 10.0, 30.0]),
        first_base in 0.02f64..0.4,
        parts in prop::collection::vec((0.0f64..3.0, episode_segment()), 1..7),
        seed in any::<u64>(),
    ) {
        let trace = generate(lead, first_base, &parts, seed);
        let got = alerts(lead, &trace.samples);
        let mut claimed = vec![false; got.len()];
        for ep in &trace.episodes {
            let inside: Vec<usize> = got
                .iter()
                .enumerate()
                .filter(|(_, i)| **i >= ep.start && **i < ep.end)
                .map(|(k, _)| k)
                .collect();
            prop_assert_eq!(
                inside.len(), 1,
                "episode at t={:.1} (leak: {}) got alerts at {:?}",
                trace.samples[ep.start].0, ep.leak,
                inside.iter().map(|&k| trace.samples[got[k]].0).collect::<Vec<_>>()
            );
            let alert_t = trace.samples[got[inside[0]]].0;
            claimed[inside[0]] = true;
            prop_assert!(alert_t < ep.exhausted_at, "alert at {} after exhaustion at {}", alert_t, ep.exhausted_at);
            if ep.leak {
                prop_assert!(
                    ep.exhausted_at - alert_t >= lead - 1e-6,
                    "leak exhausting at {:.2} alerted at {:.2}: {:.6}s before, lead {}",
                    ep.exhausted_at, alert_t, ep.exhausted_at - alert_t, lead
                );
                if let Some(free) = ep.after_free {
                    // The same samples from the free on, to a predictor that starts there.
                    let fresh = alerts(lead, &trace.samples[free..ep.end]);
                    let fresh_t = fresh.first().map(|&i| trace.samples[free + i].0);
                    prop_assert!(
                        fresh_t.is_some_and(|f| (f - alert_t).abs() <= DT + 1e-9),
                        "alert at {:.2}, a fresh start at the free alerts at {:?}", alert_t, fresh_t
                    );
                }
            }
        }
        let stray: Vec<f64> = got
            .iter()
            .zip(&claimed)
            .filter(|(_, c)| !**c)
            .map(|(i, _)| trace.samples[*i].0)
            .collect();
        prop_assert!(stray.is_empty(), "alerts outside any episode at {:?}", stray);
    }
}

/// The notebook case of the issue: a leak is warned, freed, and run again at once (and
/// after 1 s and 8 s); every run is warned a full lead before the limit.
#[test]
fn a_leak_rerun_right_after_the_free_is_warned_in_time() {
    for pause in [0.0, 1.0, 8.0] {
        let lead = 3.0;
        let rate = 0.05; // of the limit per second: 20 s from empty to full
        let mut samples = Vec::new();
        let mut t = 0.0;
        let mut exhausted = Vec::new();
        for _ in 0..3 {
            let t0 = t;
            let mut v = 0.05;
            while v < 1.0 {
                samples.push((t, v * LIMIT));
                t += DT;
                v = 0.05 + rate * (t - t0);
            }
            exhausted.push(t0 + 0.95 / rate);
            let end = t + pause;
            loop {
                samples.push((t, 0.05 * LIMIT));
                t += DT;
                if t >= end {
                    break;
                }
            }
        }
        let got = alerts(lead, &samples);
        assert_eq!(got.len(), 3, "pause {pause}: alerts at {got:?}");
        for (a, ex) in got.iter().zip(&exhausted) {
            let before = ex - samples[*a].0;
            assert!(
                before >= lead - 1e-6,
                "pause {pause}: alerted {before:.6}s before"
            );
        }
    }
}

/// A staircase that pauses near the limit (shorter than a lead each time) is one episode.
#[test]
fn a_staircase_pausing_near_the_limit_alerts_once() {
    let lead = 10.0;
    let mut samples = Vec::new();
    let mut t = 0.0;
    let mut level = 0.3;
    while level < 1.0 {
        let end = t + 6.0;
        while t < end {
            samples.push((t, level * LIMIT));
            t += DT;
        }
        level += 0.07;
    }
    let got = alerts(lead, &samples);
    assert_alert_count(1, &got, &samples);
}

/// A saw-tooth whose every peak enters the floor, with troughs well away: one alert, not
/// one per tooth.
#[test]
fn a_sawtooth_into_the_floor_alerts_once() {
    let samples = sawtooth(40, 2.0, 0.5, 0.47);
    let got = alerts(30.0, &samples);
    assert_alert_count(1, &got, &samples);
}

/// Without acknowledgments, a drop keeps the old peak as a ceiling: the next tooth of a
/// slow saw-tooth (a rise that only recovers the old peak) is not alerted again ...
#[test]
fn without_acknowledgment_a_slow_sawtooth_alerts_once() {
    let samples = sawtooth(20, 40.0, 0.5, 0.4);
    let got = alerts_acked(30.0, &samples, None);
    assert_alert_count(1, &got, &samples);
}

/// ... and a leak that follows an unacknowledged episode is still warned: re-armed at
/// the drop, by the trend once it passes the old peak, or by the floor.
#[test]
fn without_acknowledgment_a_leak_after_the_free_is_still_warned() {
    let lead = 3.0;
    let mut samples = Vec::new();
    let mut t = 0.0;
    for _ in 0..2 {
        let t0 = t;
        let mut v = 0.05;
        while v < 1.0 {
            samples.push((t, v * LIMIT));
            t += DT;
            v = 0.05 + 0.05 * (t - t0);
        }
        samples.push((t, 0.05 * LIMIT));
        t += DT;
    }
    let got = alerts_acked(lead, &samples, None);
    assert_alert_count(2, &got, &samples);
}
