//! The step-peak predictor on synthetic runs: tables of shapes (steady, leak, growing
//! evaluations, fragmentation, folded entries, episodes) and properties (a steady run
//! never alerts; a leak is warned at least one save ahead of the step that fails).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use watchdog_predictor::step_peak::{
    Capacity, FRAGMENTATION_ADVICE, StepPeakAlert, StepPeakConfig, StepPeakPredictor, StepReport,
};
use watchdog_types::{AlertReason, Phase};

const GIB: u64 = 1 << 30;
const TOTAL: u64 = 24 * GIB;

fn capacity() -> Capacity {
    Capacity {
        total: TOTAL,
        others: 0,
        outside_allocator: GIB / 2,
    }
}

/// What fits with the default margin.
fn fits() -> f64 {
    capacity().available() as f64 * 0.95
}

fn xorshift(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// A run fed report by report; every alert is kept with the time it came.
struct Sim {
    p: StepPeakPredictor,
    n: u64,
    t: f64,
    step: u64,
    save_s: f64,
    alerts: Vec<(f64, StepPeakAlert)>,
}

impl Sim {
    fn new(lead_s: f64, save_s: f64) -> Sim {
        Sim {
            p: StepPeakPredictor::new(StepPeakConfig {
                lead_s,
                ..StepPeakConfig::default()
            }),
            n: 0,
            t: 0.0,
            step: 0,
            save_s,
            alerts: vec![],
        }
    }

    /// One report of `folded` steps of `dt` seconds each.
    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        phase: Phase,
        pass: u64,
        dt: f64,
        peak: u64,
        reserved: u64,
        retries: u64,
        folded: u32,
        cap: Capacity,
    ) {
        self.n += 1;
        self.t += dt * f64::from(folded);
        self.step += u64::from(folded);
        let r = StepReport {
            n: self.n,
            step: self.step,
            phase,
            pass,
            t_s: self.t,
            duration_s: Some(dt),
            allocated: peak / 2,
            reserved: reserved.max(peak),
            peak,
            retries,
            ooms: 0,
            folded,
        };
        self.p.observe(&r, cap);
        if let Some(a) = self.p.decide(self.save_s) {
            self.alerts.push((self.t, a));
        }
    }

    fn train(&mut self, dt: f64, peak: u64) {
        self.report(Phase::Train, 1, dt, peak, peak, 0, 1, capacity());
    }
}

#[test]
fn steady_noisy_training_with_steady_evaluations_never_alerts() {
    let mut sim = Sim::new(30.0, 10.0);
    let mut rng = 7u64;
    for i in 0..20_000u64 {
        // Batch shapes: peaks anywhere between 55% and 88% of what fits.
        let peak = (fits() * (0.55 + 0.33 * xorshift(&mut rng))) as u64;
        sim.train(0.05, peak);
        if i % 1000 == 999 {
            for _ in 0..50 {
                let peak = (fits() * (0.9 + 0.02 * xorshift(&mut rng))) as u64;
                sim.report(
                    Phase::Eval,
                    i / 1000 + 1,
                    0.02,
                    peak,
                    peak,
                    0,
                    1,
                    capacity(),
                );
            }
        }
    }
    assert!(sim.alerts.is_empty(), "{:?}", sim.alerts.first());
}

#[test]
fn a_leak_per_step_is_warned_the_lead_ahead() {
    // Table: (step time, lead, save time, growth per step as a fraction of what fits).
    for &(dt, lead, save, growth) in &[
        (0.05, 30.0, 10.0, 2e-5),
        (0.5, 30.0, 60.0, 1e-4),
        (2.0, 30.0, 10.0, 1e-3),
        (0.2, 5.0, 2.0, 5e-4),
    ] {
        let mut sim = Sim::new(lead, save);
        let mut rng = 3u64;
        let (mut failed_at, mut crossed) = (None, None);
        for i in 0..2_000_000u64 {
            let peak = fits() * (0.4 + growth * i as f64) + 0.01 * fits() * xorshift(&mut rng);
            if peak > fits() {
                crossed.get_or_insert(sim.t);
            }
            if peak > capacity().available() as f64 {
                failed_at = Some(sim.t);
                break;
            }
            sim.train(dt, peak as u64);
        }
        let failed_at = failed_at.unwrap();
        let (t, a) = sim.alerts.first().copied().unwrap_or_else(|| {
            panic!("dt {dt} lead {lead}: no alert before the failure at {failed_at}")
        });
        assert_eq!(a.reason, AlertReason::StepPeak);
        assert_eq!(a.phase, Phase::Train);
        let ahead = failed_at - t;
        assert!(
            ahead >= lead.max(save),
            "dt {dt} lead {lead} save {save}: warned {ahead:.1}s ahead ({a:?})"
        );
        // Early by the margin (the peak crosses what fits before it fails), and not by
        // much more than the horizon before that.
        let early = crossed.unwrap() - t;
        assert!(early <= 3.0 * lead.max(save) + 30.0, "too early: {early}");
        assert_eq!(sim.alerts.len(), 1, "one alert per episode");
    }
}

#[test]
fn a_growing_evaluation_is_warned_once_the_pass_before_it_ended() {
    let mut sim = Sim::new(30.0, 10.0);
    let available = capacity().available() as f64;
    let mut pass_ends = vec![];
    let mut failing_start = None;
    'run: for e in 1..50u64 {
        for _ in 0..600 {
            sim.train(0.1, (0.5 * fits()) as u64);
        }
        // Each evaluation's peak 8% of the device above the last one's.
        let peak = available * (0.6 + 0.08 * e as f64);
        if peak >= available {
            failing_start = Some(sim.t);
            break 'run;
        }
        for _ in 0..40 {
            sim.report(
                Phase::Eval,
                e,
                0.05,
                peak as u64,
                peak as u64,
                0,
                1,
                capacity(),
            );
        }
        pass_ends.push(sim.t);
    }
    let start = failing_start.unwrap();
    let (t, a) = sim.alerts.first().copied().unwrap();
    assert_eq!(
        (a.reason, a.phase),
        (AlertReason::EvalPeak, Phase::Eval),
        "{a:?}"
    );
    assert_eq!(a.steps_ahead, 1, "{a:?} {start}");
    // The first training step after the last pass that fits.
    let last_end = *pass_ends.last().unwrap();
    assert!(
        t > last_end && t <= last_end + 0.11,
        "alert at {t}, pass ended {last_end}"
    );
    assert!(start - t >= 30.0, "{}", start - t);
    assert!(a.predicted_peak as f64 > fits());
    assert_eq!(sim.alerts.len(), 1);
}

#[test]
fn a_first_evaluation_that_would_fail_is_not_predicted_from_nothing() {
    let mut sim = Sim::new(30.0, 10.0);
    for _ in 0..3000 {
        sim.train(0.1, (0.5 * fits()) as u64);
    }
    // One pass close to the limit, but fitting: no alert from one pass.
    for _ in 0..40 {
        let peak = (0.94 * fits()) as u64;
        sim.report(Phase::Eval, 1, 0.05, peak, peak, 0, 1, capacity());
    }
    for _ in 0..300 {
        sim.train(0.1, (0.5 * fits()) as u64);
    }
    assert!(sim.alerts.is_empty(), "{:?}", sim.alerts);
}

#[test]
fn growing_retries_are_fragmentation_with_the_allocator_setting() {
    let mut sim = Sim::new(30.0, 10.0);
    let peak = (0.7 * fits()) as u64;
    let mut retries = 0;
    for i in 0..2000u64 {
        if i > 1500 && i % 20 == 0 {
            retries += 1;
        }
        sim.report(Phase::Train, 1, 0.1, peak, peak, retries, 1, capacity());
    }
    let (_, a) = sim.alerts.first().copied().unwrap();
    assert_eq!(a.reason, AlertReason::Fragmentation);
    assert_eq!(a.advice(), Some(FRAGMENTATION_ADVICE));
    assert_eq!(
        FRAGMENTATION_ADVICE,
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    );
    assert_eq!(sim.alerts.len(), 1);
    // One retry now and then is not growth.
    let mut sim = Sim::new(30.0, 10.0);
    for i in 0..5000u64 {
        sim.report(Phase::Train, 1, 0.1, peak, peak, i / 1000, 1, capacity());
    }
    assert!(sim.alerts.is_empty(), "{:?}", sim.alerts);
}

#[test]
fn reserved_growing_past_the_peaks_is_fragmentation_before_it_reaches_the_limit() {
    let mut sim = Sim::new(30.0, 10.0);
    let available = capacity().available() as f64;
    let peak = (0.6 * available) as u64;
    let mut reached = None;
    for i in 0..100_000u64 {
        let reserved = 0.65 * available + 2e-4 * available * i as f64;
        if reserved > available {
            reached = Some(sim.t);
            break;
        }
        sim.report(
            Phase::Train,
            1,
            0.1,
            peak,
            reserved as u64,
            0,
            1,
            capacity(),
        );
    }
    let (t, a) = sim.alerts.first().copied().unwrap();
    assert_eq!(a.reason, AlertReason::Fragmentation, "{a:?}");
    assert!(reached.unwrap() - t >= 30.0, "{}", reached.unwrap() - t);
    // The same reserve, flat near the limit: a cache that is full, not fragmenting.
    let mut sim = Sim::new(30.0, 10.0);
    for _ in 0..5000 {
        sim.report(
            Phase::Train,
            1,
            0.1,
            peak,
            (0.94 * available) as u64,
            0,
            1,
            capacity(),
        );
    }
    assert!(sim.alerts.is_empty(), "{:?}", sim.alerts);
}

#[test]
fn folded_entries_stand_for_their_steps() {
    // 0.05 s steps reported 20 at a time (one entry per second, folded into a maximum).
    let mut sim = Sim::new(30.0, 10.0);
    let growth = 2e-5;
    let (mut failed_at, mut crossed) = (None, None);
    for i in 0..100_000u64 {
        let last_step = (i + 1) * 20;
        let peak = fits() * (0.4 + growth * last_step as f64);
        if peak > fits() {
            crossed.get_or_insert(sim.t);
        }
        if peak > capacity().available() as f64 {
            failed_at = Some(sim.t);
            break;
        }
        sim.report(
            Phase::Train,
            1,
            0.05,
            peak as u64,
            peak as u64,
            0,
            20,
            capacity(),
        );
    }
    let (t, a) = sim.alerts.first().copied().unwrap();
    assert!(failed_at.unwrap() - t >= 30.0);
    let early = crossed.unwrap() - t;
    assert!((30.0..=31.0).contains(&early), "{early} {a:?}");
    // Counted in steps, not entries: about 20 steps a second.
    let secs = a.seconds_left.unwrap();
    assert!((a.steps_ahead as f64 / secs - 20.0).abs() < 1.0, "{a:?}");
}

#[test]
fn less_room_on_the_device_alerts_at_once_and_the_episode_ends_when_it_comes_back() {
    let mut sim = Sim::new(30.0, 10.0);
    let peak = (0.8 * fits()) as u64;
    for _ in 0..500 {
        sim.train(0.1, peak);
    }
    // Another process takes 6 GiB: the steady peak no longer fits.
    let crowded = Capacity {
        others: 6 * GIB,
        ..capacity()
    };
    for _ in 0..100 {
        sim.report(Phase::Train, 1, 0.1, peak, peak, 0, 1, crowded);
    }
    assert_eq!(sim.alerts.len(), 1);
    assert_eq!(sim.alerts[0].1.reason, AlertReason::StepPeak);
    assert_eq!(sim.alerts[0].1.steps_ahead, 1);
    // It leaves: re-armed (no alert), then the same again is a new episode.
    for _ in 0..100 {
        sim.train(0.1, peak);
    }
    for _ in 0..100 {
        sim.report(Phase::Train, 1, 0.1, peak, peak, 0, 1, crowded);
    }
    assert_eq!(sim.alerts.len(), 2, "{:?}", sim.alerts);
}

#[test]
fn an_entry_seen_twice_is_taken_once_and_nothing_comes_before_a_capacity() {
    let mut p = StepPeakPredictor::new(StepPeakConfig::default());
    assert!(p.decide(10.0).is_none());
    let r = StepReport {
        n: 1,
        step: 1,
        phase: Phase::Train,
        pass: 1,
        t_s: 1.0,
        duration_s: Some(0.1),
        allocated: GIB,
        reserved: 2 * GIB,
        peak: 23 * GIB,
        retries: 0,
        ooms: 0,
        folded: 1,
    };
    let none = Capacity {
        total: 0,
        others: 0,
        outside_allocator: 0,
    };
    p.observe(&r, none);
    assert!(p.decide(10.0).is_none(), "no capacity known");
    p.observe(&r, capacity());
    assert!(p.decide(10.0).is_none(), "the same entry again is ignored");
    p.observe(&StepReport { n: 2, ..r }, capacity());
    assert_eq!(p.decide(10.0).unwrap().reason, AlertReason::StepPeak);
    assert!(p.decide(10.0).is_none(), "once per episode");
    p.rearm();
    assert!(p.decide(10.0).is_some(), "rearm starts a new episode");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Peaks that wander within a band that fits (batch shapes, folded entries, a first
    /// step lower than the rest, steady evaluations) never alert.
    #[test]
    fn a_steady_run_never_alerts(
        low in 0.05f64..0.8,
        width in 0.0f64..0.5,
        dt in prop::sample::select(vec![0.01, 0.05, 0.5, 3.0]),
        lead in 1.0f64..120.0,
        save in 0.0f64..300.0,
        fold in prop::sample::select(vec![1u32, 1, 5, 40]),
        eval_every in 200u64..3000,
        eval_level in 0.05f64..0.9,
        n in 500u64..8000,
        seed in 1u64..u64::MAX,
    ) {
        let high = (low + width).min(1.0);
        let mut sim = Sim::new(lead, save);
        let mut rng = seed;
        let warm = 1;
        for i in 0..n {
            let f = low + (high - low) * xorshift(&mut rng);
            let f = if i < warm { f * 0.5 } else { f };
            let peak = (fits() * f) as u64;
            sim.report(Phase::Train, 1, dt, peak, peak, 0, fold, capacity());
            if i % eval_every == eval_every - 1 {
                for _ in 0..20 {
                    let e = (fits() * eval_level * (0.98 + 0.02 * xorshift(&mut rng))) as u64;
                    sim.report(Phase::Eval, i / eval_every + 1, dt, e, e, 0, 1, capacity());
                }
            }
        }
        prop_assert!(sim.alerts.is_empty(), "{:?}", sim.alerts.first());
    }

    /// A leak per step from well under the limit, with noise, is warned at least one
    /// save (and the lead) ahead of the step that fails.
    #[test]
    fn a_linear_leak_is_warned_a_save_ahead(
        start in 0.1f64..0.5,
        noise in 0.0f64..0.05,
        dt in prop::sample::select(vec![0.02, 0.1, 0.5, 2.0]),
        lead in 1.0f64..60.0,
        save in 0.0f64..120.0,
        runway_leads in 4.0f64..40.0,
        seed in 1u64..u64::MAX,
    ) {
        let horizon = lead.max(save);
        // Steps from the start to the failure: enough for the trend to be believed.
        let steps = ((runway_leads * horizon / dt).max(200.0)) as u64;
        let available = capacity().available() as f64;
        let growth = (1.0 - start) * available / steps as f64;
        let mut sim = Sim::new(lead, save);
        let mut rng = seed;
        let mut failed_at = None;
        for i in 0..steps * 2 {
            let peak = start * available + growth * i as f64
                + noise * available * xorshift(&mut rng);
            if peak > available {
                failed_at = Some(sim.t);
                break;
            }
            sim.train(dt, peak as u64);
        }
        let failed_at = failed_at.unwrap();
        let first = sim.alerts.first().map(|a| a.0);
        prop_assert!(first.is_some(), "no alert before {}", failed_at);
        let ahead = failed_at - first.unwrap();
        prop_assert!(ahead >= horizon, "warned {:.2}s ahead, horizon {:.2}s: {:?}", ahead, horizon, sim.alerts[0]);
    }
}

/// An evaluation warned two passes ahead (by the margin) stays one episode through the
/// pass in between: while a pass is under way the next ones are still judged.
#[test]
fn a_growing_evaluation_is_one_episode_through_the_passes_until_it_fails() {
    let mut sim = Sim::new(30.0, 10.0);
    let available = capacity().available() as f64;
    for (e, level) in [0.80, 0.88, 0.96].into_iter().enumerate() {
        for _ in 0..600 {
            sim.train(0.1, (0.5 * fits()) as u64);
        }
        let peak = (available * level) as u64;
        for _ in 0..40 {
            sim.report(
                Phase::Eval,
                e as u64 + 1,
                0.05,
                peak,
                peak,
                0,
                1,
                capacity(),
            );
        }
    }
    for _ in 0..600 {
        sim.train(0.1, (0.5 * fits()) as u64);
    }
    // The fourth (1.04) would fail: warned once, after the second.
    assert_eq!(sim.alerts.len(), 1, "{:?}", sim.alerts);
    assert_eq!(sim.alerts[0].1.reason, AlertReason::EvalPeak);
}
