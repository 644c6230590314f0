//! Property tests of the predictor's invariants: a flat or falling series never
//! alerts (except the floor once it is crossed), scaling time or size does not
//! change any decision, and the forecast is monotone in the leak rate.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use watchdog_predictor::{Decision, PredictorConfig, ResourcePredictor};
use watchdog_types::{AlertReason, ResourceKind};

const KINDS: [ResourceKind; 5] = [
    ResourceKind::CgroupMemory,
    ResourceKind::HostMemory,
    ResourceKind::DiskBytes,
    ResourceKind::GpuMemory,
    ResourceKind::DiskInodes,
];

fn xorshift(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

fn config(lead_s: f64, interval_s: f64) -> PredictorConfig {
    PredictorConfig {
        lead_s,
        interval_s,
        ..PredictorConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn flat_or_falling_never_alerts(
        kind in 0usize..KINDS.len(),
        level in 0.05f64..0.9,
        noise in 0.0f64..0.4,
        fall_per_sample in 0.0f64..2e-4,
        dt in prop::sample::select(vec![0.01, 0.1, 1.0]),
        lead in 1.0f64..120.0,
        n in 100usize..4000,
        seed in 1u64..u64::MAX,
    ) {
        let limit: u64 = 1 << 36;
        let mut p = ResourcePredictor::new(KINDS[kind], config(lead, dt));
        let mut rng = seed;
        for i in 0..n {
            let t = i as f64 * dt;
            let frac = (level - fall_per_sample * i as f64 + noise * (xorshift(&mut rng) - 0.5))
                .clamp(0.0, 1.0);
            let used = (frac * limit as f64) as u64;
            let o = p.observe(t, used, limit);
            if let Decision::Alert(reason) = o.decision {
                let headroom = (limit - used) as f64;
                prop_assert_eq!(reason, AlertReason::HeadroomFloor, "at {} used {}", t, frac);
                prop_assert!(headroom < 0.05 * limit as f64);
            }
        }
    }

    #[test]
    fn scaling_time_or_size_keeps_decisions(
        kind in 0usize..KINDS.len(),
        segments in prop::collection::vec((-3e-3f64..6e-3, 20usize..400), 1..6),
        noise in 0.0f64..0.05,
        start in 0.0f64..0.6,
        size_shift in 0u32..10,
        time_shift in -4i32..5,
        dt in prop::sample::select(vec![0.01, 0.1, 1.0]),
        lead in prop::sample::select(vec![2.0, 10.0, 30.0]),
        seed in 1u64..u64::MAX,
    ) {
        let limit: u64 = 1 << 32;
        let k = (2.0f64).powi(time_shift);
        let mut a = ResourcePredictor::new(KINDS[kind], config(lead, dt));
        let mut b = ResourcePredictor::new(KINDS[kind], config(lead * k, dt * k));
        let mut rng = seed;
        let mut frac = start;
        let mut i = 0u64;
        for (slope, len) in segments {
            for _ in 0..len {
                frac = (frac + slope + noise * (xorshift(&mut rng) - 0.5)).clamp(0.0, 1.0);
                let used = (frac * limit as f64) as u64;
                let t = i as f64 * dt;
                let oa = a.observe(t, used, limit);
                let ob = b.observe(t * k, used << size_shift, limit << size_shift);
                prop_assert_eq!(oa.decision, ob.decision, "sample {}", i);
                i += 1;
            }
        }
    }

    #[test]
    fn forecast_is_monotone_in_leak_rate(
        kind in 0usize..KINDS.len(),
        base in 0.0f64..0.5,
        r1 in 1e-4f64..1e-2,
        factor in 1.0f64..4.0,
        dt in prop::sample::select(vec![0.1, 1.0]),
        lead in prop::sample::select(vec![5.0, 30.0]),
    ) {
        let limit: u64 = 1 << 40;
        let r2 = r1 * factor;
        let mut slow = ResourcePredictor::new(KINDS[kind], config(lead, dt));
        let mut fast = ResourcePredictor::new(KINDS[kind], config(lead, dt));
        let lf = limit as f64;
        for i in 0..3000u64 {
            let t = i as f64 * dt;
            // Rates are fractions of the limit per second.
            let u1 = ((base + r1 * t).min(1.0) * lf) as u64;
            let u2 = ((base + r2 * t).min(1.0) * lf) as u64;
            if u2 >= limit {
                break;
            }
            let s = slow.observe(t, u1, limit).forecast.seconds_left.unwrap_or(f64::INFINITY);
            let f = fast.observe(t, u2, limit).forecast.seconds_left.unwrap_or(f64::INFINITY);
            prop_assert!(f <= s * (1.0 + 1e-9), "at {}: fast {} > slow {}", t, f, s);
        }
    }
}
