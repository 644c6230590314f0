//! Table tests of the predictor on synthetic shapes.
#![allow(clippy::unwrap_used)]

use super::*;

const L: u64 = 1 << 30;

/// Tiny deterministic noise in [-1, 1].
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

struct Run {
    alerts: Vec<(f64, AlertReason, Option<f64>)>,
    rearms: Vec<f64>,
    last: Option<Observation>,
}

fn run(
    kind: ResourceKind,
    cfg: PredictorConfig,
    dt: f64,
    end: f64,
    mut f: impl FnMut(f64) -> Option<(f64, u64)>,
) -> Run {
    let mut p = ResourcePredictor::new(kind, cfg);
    let mut out = Run {
        alerts: vec![],
        rearms: vec![],
        last: None,
    };
    let mut i = 0u64;
    loop {
        let t = i as f64 * dt;
        if t > end {
            break;
        }
        i += 1;
        let Some((used, limit)) = f(t) else { continue };
        let used = used.clamp(0.0, limit as f64) as u64;
        let o = p.observe(t, used, limit);
        match o.decision {
            Decision::Alert(r) => out.alerts.push((t, r, o.forecast.seconds_left)),
            Decision::Rearm => out.rearms.push(t),
            Decision::Quiet => {}
        }
        out.last = Some(o);
        if used >= limit {
            break;
        }
    }
    out
}

fn cfg(lead: f64, interval: f64) -> PredictorConfig {
    PredictorConfig {
        lead_s: lead,
        interval_s: interval,
        ..PredictorConfig::default()
    }
}

fn assert_timely(r: &Run, exhaust_at: f64, lead: f64) {
    assert!(
        !r.alerts.is_empty(),
        "no alert before exhaustion at {exhaust_at}"
    );
    let (t, reason, _) = r.alerts[0];
    let before = exhaust_at - t;
    assert!(
        before >= lead,
        "alert at {t} only {before:.1}s before exhaustion ({reason:?})"
    );
    if reason == AlertReason::Trend {
        assert!(
            before <= 3.0 * lead + 30.0,
            "alert at {t} absurdly early: {before:.1}s before exhaustion"
        );
    }
}

#[test]
fn steady_leak_alerts_lead_before_exhaustion() {
    for (dt, rate) in [(1.0, 2e6), (0.1, 3e6), (0.01, 1e7)] {
        let start = 0.2 * L as f64;
        let exhaust = (L as f64 - start) / rate;
        let r = run(
            ResourceKind::CgroupMemory,
            cfg(30.0, dt),
            dt,
            exhaust + 10.0,
            |t| Some((start + rate * t, L)),
        );
        assert_timely(&r, exhaust, 30.0);
        assert_eq!(r.alerts[0].1, AlertReason::Trend);
        assert_eq!(r.alerts.len(), 1, "{:?}", r.alerts);
        let (t, _, pred) = r.alerts[0];
        let truth = exhaust - t;
        assert!(
            (pred.unwrap() - truth).abs() < 0.05 * truth + 1.0,
            "{pred:?} vs {truth}"
        );
    }
}

#[test]
fn leak_under_sawtooth() {
    let rate = 0.3e6;
    let base = 0.3 * L as f64;
    let amp = 0.2 * L as f64;
    // Peaks reach the limit when base + amp + rate t = L.
    let exhaust = (L as f64 - base - amp) / rate;
    let r = run(
        ResourceKind::CgroupMemory,
        cfg(30.0, 0.1),
        0.1,
        exhaust + 20.0,
        |t| {
            let phase = (t % 5.0) / 5.0;
            Some((base + rate * t + amp * phase, L))
        },
    );
    assert_timely(&r, exhaust, 30.0);
}

#[test]
fn stable_sawtooth_near_limit_never_alerts() {
    // The first rising edge of a slow saw-tooth cannot be told from a leak (it would
    // reach the limit within the lead): only later periods must stay quiet.
    for period in [1.0, 7.0, 40.0, 200.0] {
        let r = run(
            ResourceKind::CgroupMemory,
            cfg(30.0, 0.1),
            0.1,
            3600.0,
            |t| {
                let phase = (t % period) / period;
                Some((0.5 * L as f64 + 0.4 * L as f64 * phase, L))
            },
        );
        let late: Vec<_> = r.alerts.iter().filter(|a| a.0 > period).collect();
        assert!(late.is_empty(), "period {period}: {:?}", r.alerts);
    }
}

#[test]
fn memory_staircase_is_a_trend() {
    let step = 0.05 * L as f64;
    // 10% to start, a step every 20 s: full after 18 steps.
    let r = run(
        ResourceKind::CgroupMemory,
        cfg(30.0, 0.5),
        0.5,
        400.0,
        |t| Some((0.1 * L as f64 + step * (t / 20.0).floor(), L)),
    );
    assert_timely(&r, 360.0, 30.0);
}

#[test]
fn warmup_then_plateau_never_alerts() {
    for plateau in [0.7, 0.85, 0.93] {
        let r = run(
            ResourceKind::CgroupMemory,
            cfg(30.0, 0.1),
            0.1,
            1800.0,
            |t| Some((L as f64 * plateau * (1.0 - (-t / 60.0).exp()), L)),
        );
        assert!(r.alerts.is_empty(), "plateau {plateau}: {:?}", r.alerts);
    }
}

#[test]
fn single_step_alerts_only_when_it_crosses_the_floor() {
    for kind in [
        ResourceKind::CgroupMemory,
        ResourceKind::DiskBytes,
        ResourceKind::GpuMemory,
    ] {
        let r = run(kind, cfg(30.0, 0.1), 0.1, 900.0, |t| {
            Some((if t < 300.0 { 0.3 } else { 0.8 } * L as f64, L))
        });
        assert!(r.alerts.is_empty(), "{kind:?}: {:?}", r.alerts);
        let r = run(kind, cfg(30.0, 0.1), 0.1, 900.0, |t| {
            Some((if t < 300.0 { 0.3 } else { 0.97 } * L as f64, L))
        });
        assert_eq!(r.alerts.len(), 1, "{kind:?}: {:?}", r.alerts);
        assert_eq!(r.alerts[0].1, AlertReason::HeadroomFloor);
        assert!((r.alerts[0].0 - 300.0).abs() < 0.2);
    }
}

#[test]
fn noisy_flat_and_falling_never_alert() {
    for kind in [ResourceKind::CgroupMemory, ResourceKind::DiskBytes] {
        let mut rng = Lcg(7);
        let r = run(kind, cfg(30.0, 0.1), 0.1, 3600.0, |_| {
            Some((0.6 * L as f64 + 0.25 * L as f64 * rng.next(), L))
        });
        assert!(r.alerts.is_empty(), "{kind:?} noisy flat: {:?}", r.alerts);
        let mut rng = Lcg(9);
        let r = run(kind, cfg(30.0, 0.1), 0.1, 3600.0, |t| {
            Some((0.9 * L as f64 - 2e5 * t + 0.02 * L as f64 * rng.next(), L))
        });
        assert!(r.alerts.is_empty(), "{kind:?} falling: {:?}", r.alerts);
        assert!(r.last.unwrap().forecast.seconds_left.is_none());
    }
}

#[test]
fn gaps_in_samples() {
    let rate = 1e6;
    let start = 0.1 * L as f64;
    let exhaust = (L as f64 - start) / rate;
    // Nothing between 300 s and 420 s, then again nothing for 5 s out of every 10.
    let r = run(
        ResourceKind::CgroupMemory,
        cfg(30.0, 0.1),
        0.1,
        exhaust + 5.0,
        |t| {
            if (300.0..420.0).contains(&t) || (t > 500.0 && t % 10.0 < 5.0) {
                None
            } else {
                Some((start + rate * t, L))
            }
        },
    );
    assert_timely(&r, exhaust, 30.0);
}

#[test]
fn limit_shrinking_mid_run() {
    let rate = 1e6;
    // Limit cut from L to L/2 at 200 s: exhaustion moves to (L/2)/rate.
    let exhaust = (L / 2) as f64 / rate;
    let r = run(
        ResourceKind::CgroupMemory,
        cfg(30.0, 0.1),
        0.1,
        exhaust + 5.0,
        |t| Some((rate * t, if t < 200.0 { L } else { L / 2 })),
    );
    assert_timely(&r, exhaust, 30.0);
}

#[test]
fn disk_steps_alert_before_the_step_that_does_not_fit() {
    // A 10% checkpoint every 60 s, written in 0.2 s; starts at 5%.
    let step = 0.1 * L as f64;
    let r = run(ResourceKind::DiskBytes, cfg(5.0, 0.1), 0.1, 600.0, |t| {
        let n = (t / 60.0).floor();
        let within = ((t % 60.0) / 0.2).min(1.0);
        Some((0.05 * L as f64 + step * (n + within), L))
    });
    // The 10th checkpoint (written at 540 s) does not fit after the 9th (at 480 s: 95% used).
    assert!(!r.alerts.is_empty());
    let (t, reason, _) = r.alerts[0];
    assert!(t < 540.0, "alert at {t}");
    assert!(t > 420.0, "too early: {t}");
    assert!(
        matches!(reason, AlertReason::NextStep | AlertReason::Trend),
        "{reason:?}"
    );
}

#[test]
fn disk_steps_next_step_reason_with_long_lead_gap() {
    // Steps 30% apart in time (600 s) with a short lead: the trend says minutes, the step says now.
    let step = 0.2 * L as f64;
    let mut p = ResourcePredictor::new(ResourceKind::DiskBytes, cfg(5.0, 0.1));
    let mut first = None;
    for i in 0..(3000 * 10) {
        let t = i as f64 * 0.1;
        let n = (t / 600.0).floor();
        let used = (0.05 * L as f64 + step * n) as u64;
        if let Decision::Alert(r) = p.observe(t, used.min(L), L).decision {
            first = Some((t, r));
            break;
        }
    }
    let (t, r) = first.unwrap();
    assert_eq!(r, AlertReason::NextStep);
    // After the step at 1800 s the disk is at 65%: the next 20% still fits; after 2400 s (85%) it
    // does not, and the step is confirmed within three buckets (1.9 s).
    assert!((2400.0..2402.0).contains(&t), "{t}");
}

#[test]
fn runtime_forecast_is_exact() {
    let mut p = ResourcePredictor::new(ResourceKind::Runtime, cfg(30.0, 0.1));
    let limit = 3_600_000;
    for i in 0..36_000u64 {
        let t = i as f64 * 0.1;
        let used = i * 100;
        let o = p.observe(t, used, limit);
        let left = o.forecast.seconds_left.unwrap();
        assert_eq!(left, (limit - used) as f64 / 1000.0);
        if let Decision::Alert(r) = o.decision {
            assert_eq!(r, AlertReason::Trend);
            assert!((29.99..30.1).contains(&left), "{left}");
            return;
        }
    }
    panic!("no runtime alert");
}

#[test]
fn rearms_once_with_hysteresis_then_alerts_again() {
    let rate = 4e6;
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(30.0, 0.1));
    let mut events = vec![];
    // Leak to 90%, free back to 20%, stay a while, leak again.
    let mut used = 0.2 * L as f64;
    for i in 0..20_000 {
        let t = i as f64 * 0.1;
        if t < 200.0 {
            used = 0.2 * L as f64 + rate * t;
        } else if t < 500.0 {
            used = 0.2 * L as f64;
        } else {
            used += rate * 0.1;
        }
        if used >= L as f64 {
            break;
        }
        match p.observe(t, used as u64, L).decision {
            Decision::Quiet => {}
            d => events.push((t, d)),
        }
    }
    let kinds: Vec<Decision> = events.iter().map(|e| e.1).collect();
    assert_eq!(
        kinds,
        vec![
            Decision::Alert(AlertReason::Trend),
            Decision::Rearm,
            Decision::Alert(AlertReason::Trend)
        ],
        "{events:?}"
    );
}

#[test]
fn unlimited_never_alerts() {
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(30.0, 0.1));
    for i in 0..10_000u64 {
        let o = p.observe(i as f64 * 0.1, i * 1_000_000, u64::MAX);
        assert_eq!(o.decision, Decision::Quiet);
        assert_eq!(o.forecast.seconds_left, None);
        let o = p.observe(i as f64 * 0.1, i * 1_000_000, 0);
        assert_eq!(o.decision, Decision::Quiet);
    }
}

#[test]
fn effective_lead_follows_checkpoint_duration() {
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(30.0, 0.1));
    assert_eq!(p.effective_lead(), 30.0);
    p.note_checkpoint_duration(10.0);
    assert_eq!(
        p.effective_lead(),
        30.0,
        "10 s * 1.5 + 0.1 is below the lead"
    );
    p.note_checkpoint_duration(40.0);
    assert!((p.effective_lead() - 60.1).abs() < 1e-9);
    p.note_checkpoint_duration(5.0);
    assert!(
        (p.effective_lead() - 60.1).abs() < 1e-9,
        "the longest duration counts"
    );
    p.note_checkpoint_duration(f64::NAN);
    p.note_checkpoint_duration(-1.0);
    assert!((p.effective_lead() - 60.1).abs() < 1e-9);
    p.set_checkpoint_safety(2.0);
    assert!((p.effective_lead() - 80.1).abs() < 1e-9);
    p.set_lead(100.0);
    assert_eq!(p.effective_lead(), 100.0);
}

#[test]
fn slow_checkpoint_makes_the_alert_earlier() {
    let rate = 1e6;
    let exhaust = L as f64 / rate;
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(10.0, 0.1));
    p.note_checkpoint_duration(40.0);
    let mut at = None;
    for i in 0..20_000 {
        let t = i as f64 * 0.1;
        if let Decision::Alert(_) = p.observe(t, (rate * t) as u64, L).decision {
            at = Some(t);
            break;
        }
    }
    let before = exhaust - at.unwrap();
    assert!(before >= 60.1, "{before}");
}

#[test]
fn exhausted_flat_is_a_floor_alert_with_zero_left() {
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(30.0, 0.1));
    let o = p.observe(0.0, L, L);
    assert_eq!(o.forecast.seconds_left, Some(0.0));
    assert_eq!(o.decision, Decision::Alert(AlertReason::HeadroomFloor));
}

#[test]
fn bucket_width() {
    assert_eq!(cfg(30.0, 0.1).bucket_width_s(), 3.75);
    assert_eq!(cfg(1.0, 0.1).bucket_width_s(), 0.4);
    assert_eq!(cfg(f64::NAN, 0.1).bucket_width_s(), 3.75);
}

#[test]
fn hostile_inputs_do_not_panic() {
    for kind in [
        ResourceKind::CgroupMemory,
        ResourceKind::DiskBytes,
        ResourceKind::Runtime,
    ] {
        let mut p = ResourcePredictor::new(kind, cfg(30.0, 0.1));
        let times = [
            f64::NAN,
            0.0,
            -5.0,
            1.0,
            f64::INFINITY,
            1e300,
            f64::NEG_INFINITY,
            2.0,
            1e18,
            1e18 + 1.0,
            f64::MAX,
            f64::NAN,
        ];
        let values = [
            (0, 0),
            (u64::MAX, 1),
            (1, u64::MAX),
            (u64::MAX, u64::MAX),
            (5, 3),
        ];
        for (i, &t) in times.iter().enumerate() {
            for &(used, limit) in &values {
                let o = p.observe(t + i as f64, used, limit);
                if let Some(s) = o.forecast.seconds_left {
                    assert!(s >= 0.0, "{s}");
                }
                assert!((0.0..=1.0).contains(&o.forecast.confidence));
            }
        }
        // And it still works afterwards on a sane series (no panic is the point).
        for i in 0..1000u64 {
            let _ = p.observe(2e18 + i as f64, i, 1000);
        }
    }
    let mut p = ResourcePredictor::new(ResourceKind::CgroupMemory, cfg(f64::NAN, -1.0));
    p.set_lead(f64::INFINITY);
    p.set_lead(-3.0);
    p.note_checkpoint_duration(f64::INFINITY);
    for i in 0..100u64 {
        let _ = p.observe(i as f64, i, 100);
    }
}

#[test]
fn regular_disk_staircase_forecasts_the_failing_step() {
    // 8% every 60 s from 10%, written in 1 s: after the step at 600 s the disk is at 98%,
    // and the one at 660 s fills it a quarter of a second in.
    let mut p = ResourcePredictor::new(ResourceKind::DiskBytes, cfg(30.0, 0.5));
    let step = 0.08 * L as f64;
    let mut checked = 0;
    for i in 0..1440 {
        let t = i as f64 * 0.5;
        let n = (t / 60.0).floor();
        let within = ((t - 60.0 * n) / 1.0).min(1.0);
        let used = ((0.10 * L as f64 + step * (n + within)) as u64).min(L);
        let o = p.observe(t, used, L);
        if used >= L {
            break;
        }
        if t >= 250.0 && (t % 60.0) > 20.0 {
            let left = o.forecast.seconds_left.unwrap();
            let truth = 660.25 - t;
            // Never optimistic; pessimistic by at most one bucket and the confirmation lag.
            assert!(left <= truth + 0.5, "at {t}: {left} > {truth}");
            assert!(left >= truth - 8.0, "at {t}: {left} << {truth}");
            checked += 1;
        }
    }
    assert!(checked > 100);
}
