//! Adaptive sampling rates keep the promise of the fixed rate: over generated traces
//! (leaks fast and slow, staircases, saw-tooths of short and long periods, sudden jumps,
//! plateaus, with noise and frees between them), replayed at the fixed rate and at adaptive
//! rates, every alert of the fixed rate comes at adaptive rates too, no later than one
//! `max_interval` after it, a floor alert within one `interval` where a kernel wake is
//! modelled for cgroup memory, and there is no alert the fixed rate did not have.
//!
//! "The fixed rate" is the fixed rate over [`DRAWS`] noise draws of the same shape: near
//! the edge of alerting its own alert times spread over seconds with the noise, and an
//! adaptive replay sees other samples of the same usage. `ADAPTIVE_EXCESS=1` prints every
//! replay's excess instead of asserting (the long run is in `docs/prediction.md`).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use watchdog_engine::replay::{self, Adaptive, AlertRecord};
use watchdog_engine::{EngineSettings, FillRates};
use watchdog_formats::trace::{Trace, TraceFormat, TraceSample};
use watchdog_predictor::PredictorConfig;
use watchdog_predictor::sample_rate::clamp_max_interval;
use watchdog_types::AlertReason;

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{GEN_DT as DT, GEN_LIMIT as LIMIT, Segment, generate_usage, rate_segment};

/// The usage of `parts` from `first_base` (noise on every sample, a lead flat at the
/// end) as one resource's trace; `ack`: the run acknowledges each request after 1 s.
fn generate(
    name: &str,
    lead: f64,
    first_base: f64,
    parts: &[(f64, Segment)],
    ack: bool,
    seed: u64,
) -> Trace {
    let usage = generate_usage(lead, first_base, parts, true, 1.0, seed);
    let samples = usage
        .samples
        .iter()
        .map(|&(t_s, used)| TraceSample {
            resource: 0,
            t_s,
            used: used as u64,
            limit: LIMIT as u64,
        })
        .collect();
    let mut meta = vec![("lead_s".to_string(), lead.to_string())];
    if ack {
        meta.push(("ack_after_s".to_string(), "1".to_string()));
    }
    Trace {
        format: TraceFormat::Csv,
        resources: vec![name.to_string()],
        samples,
        meta,
    }
}

/// One generated case: its noise draw `k` (0 is the case's own) has the same shape.
struct Case<'a> {
    name: &'a str,
    lead: f64,
    first_base: f64,
    parts: &'a [(f64, Segment)],
    ack: bool,
    seed: u64,
}

impl Case<'_> {
    fn draw(&self, k: u64) -> Trace {
        let seed = self.seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        generate(
            self.name,
            self.lead,
            self.first_base,
            self.parts,
            self.ack,
            seed,
        )
    }
}

fn settings(lead: f64) -> EngineSettings {
    EngineSettings {
        lead_s: lead,
        interval_s: DT,
        ..EngineSettings::default()
    }
}

/// [`settings`] where a 1 GiB resource takes 8 s to fill ([`LIMIT`] / 8 a second): its
/// headroom outlasts a slow read, so the fill rate leaves the rates as the policy sets
/// them far from the limit (at the default 6 GiB/s it is read at `interval` throughout).
fn calm(lead: f64) -> EngineSettings {
    let fill = LIMIT / 8.0;
    EngineSettings {
        fill_rate: every_kind_at(fill),
        ..settings(lead)
    }
}

/// The same fill rate, `fill` a second, for every kind of resource.
fn every_kind_at(fill: f64) -> FillRates {
    FillRates {
        host_memory: fill,
        cgroup_memory: fill,
        disk: fill,
        gpu_memory: fill,
    }
}

/// `max_interval` at its largest for this lead: a quarter bucket.
fn max_interval(lead: f64) -> f64 {
    let cfg = PredictorConfig {
        lead_s: lead,
        interval_s: DT,
        ..PredictorConfig::default()
    };
    clamp_max_interval(DT, lead, lead, cfg.bucket_width_s())
}

/// `s` with the fill rate at its tightest for a one-resource trace: its own fastest rise
/// from one sample to the next, so that the fill bound lets the resource rest wherever this
/// usage allows (issue 31).
fn at_fill(s: &EngineSettings, trace: &Trace) -> EngineSettings {
    let fill = trace
        .samples
        .windows(2)
        .map(|w| (w[1].used as f64 - w[0].used as f64) / (w[1].t_s - w[0].t_s))
        .fold(0.0, f64::max);
    EngineSettings {
        fill_rate: every_kind_at(fill),
        ..s.clone()
    }
}

fn times(alerts: &[AlertRecord]) -> Vec<f64> {
    alerts.iter().map(|a| a.time_s).collect()
}

/// Noise draws of the same shape the fixed rate is replayed over. With 8, 10,000 traces
/// held 2 whose adaptive alert came later than the fixed rate's latest by more than a
/// `max_interval` and earlier than the latest of 128 draws (the fixed rate's own spread).
const DRAWS: u64 = 32;

proptest! {
    // A fixed seed unless PROPTEST_RNG_SEED is set, so CI runs the same 64 cases; the long
    // run: PROPTEST_CASES=10000 PROPTEST_RNG_SEED=1 (docs/prediction.md).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        rng_seed: if std::env::var("PROPTEST_RNG_SEED").is_ok() {
            ProptestConfig::default().rng_seed
        } else {
            proptest::test_runner::RngSeed::Fixed(22)
        },
        ..ProptestConfig::default()
    })]

    #[test]
    fn adaptive_rates_warn_no_later_and_no_more(
        lead in prop::sample::select(vec![10.0, 30.0, 60.0]),
        name in prop::sample::select(vec!["cgroup_memory", "disk:/ckpt"]),
        first_base in 0.02f64..0.4,
        parts in prop::collection::vec((0.0f64..3.0, rate_segment()), 1..6),
        ack in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let s = settings(lead);
        let case = Case { name, lead, first_base, parts: &parts, ack, seed };
        let draw = |k: u64| case.draw(k);
        // The fixed rate over this noise draw (k = 0) and others of the same shape: near
        // the edge of alerting its own outcome depends on the noise (98 of 199 draws of
        // one saw-tooth tooth rising 36% of the limit in 20 s alert), and its alert times
        // move with it. Adaptive rates see other samples of the same usage.
        let fixed: Vec<Vec<f64>> = (0..DRAWS).map(|k| times(&replay::run_trace(&draw(k), &s).alerts)).collect();
        let trace = draw(0);
        let first = replay::run_trace(&trace, &s);
        let max = max_interval(lead);
        let at_fill = at_fill(&s, &trace);
        for kernel_wake in [false, true] {
            let adaptive = Adaptive { max_interval_s: max, kernel_wake };
            let (report, rates) = replay::run_trace_adaptive(&trace, &at_fill, adaptive, |_, _, _| {});
            prop_assert!(rates[0].taken <= rates[0].offered);
            let woken = kernel_wake && name == "cgroup_memory";
            let a = times(&report.alerts);
            let alike: Vec<&Vec<f64>> = fixed.iter().filter(|f| f.len() == a.len()).collect();
            // How much later than the latest alike alert of the fixed rate.
            let late = a
                .iter()
                .enumerate()
                .map(|(i, a)| a - alike.iter().filter_map(|f| f.get(i)).fold(f64::NEG_INFINITY, |m, f| m.max(*f)))
                .fold(0.0f64, f64::max);
            let bound = max;
            if std::env::var("ADAPTIVE_EXCESS").is_ok() {
                let staircase = parts.iter().any(|(_, p)| matches!(p, Segment::Staircase { .. }));
                eprintln!(
                    "EXCESS woken={woken} alike={} late={late:.3} bound={bound:.3} lead={lead} kind={name} staircase={staircase}",
                    !alike.is_empty()
                );
                if alike.is_empty() || late > bound + 1e-6 {
                    eprintln!("CASE {lead} {name} {first_base} {ack} {seed} {parts:?} fixed {fixed:?} adaptive {a:?}");
                }
                continue;
            }
            prop_assert!(
                !alike.is_empty(),
                "adaptive rates alert at {:?}, the fixed rate at {:?} on {} noise draws",
                a, fixed, DRAWS
            );
            prop_assert!(
                late <= bound + 1e-6,
                "kernel wake {}: adaptive rates alert at {:?}, {:.3} s later than the fixed rate's latest alike ({:?}); bound {:.3} s",
                kernel_wake, a, late, fixed, bound
            );
            // Where the kernel wakes the loop, an alert for crossing the floor comes within
            // one interval of the fixed rate's, on the same noise draw.
            if woken && first.alerts.len() == report.alerts.len() {
                for (f, a) in first.alerts.iter().zip(&report.alerts) {
                    if f.reason == AlertReason::HeadroomFloor {
                        prop_assert!(
                            a.time_s <= f.time_s + DT + 1e-6,
                            "floor alert at {:.2} woken, {:.2} at the fixed rate", a.time_s, f.time_s
                        );
                    }
                }
            }
        }
    }
}

/// Far from its limit a resource is sampled every `max_interval`; a leak coming near is
/// sampled at `interval` from 4 leads before it runs out.
#[test]
fn far_is_sampled_slowly_and_approaching_fast() {
    let lead = 30.0;
    let parts = [(
        8.0,
        Segment::Leak {
            runway: 12.0,
            next_base: 0.2,
        },
    )];
    let trace = generate("disk:/ckpt", lead, 0.2, &parts, true, 7);
    let adaptive = Adaptive {
        max_interval_s: 1.0,
        kernel_wake: false,
    };
    let (report, rates) = replay::run_trace_adaptive(&trace, &calm(lead), adaptive, |_, _, _| {});
    assert_eq!(report.alerts.len(), 1, "{report:?}");
    let r = &rates[0];
    let slow = r.slow_rate().unwrap();
    let fast = r.fast_rate().unwrap();
    // 1 s is clamped to a quarter bucket (0.9375 s); on the trace's 0.1 s grid each poll
    // is the grid sample before it is due, and one more lands just after each bucket's
    // close: five samples a 3.75 s bucket.
    assert!((1.0..1.4).contains(&slow), "{r:?}");
    assert!((9.0..=10.5).contains(&fast), "{r:?}");
    // Slow from the first sample (the headroom outlasts a slow read at the fill rate), fast
    // from about 4 leads before the limit through the episode and a lead after it.
    assert!(r.fast_s > 3.5 * lead && r.fast_s < 5.5 * lead, "{r:?}");
}

/// The recorded 2 s saw-tooth under a 256 MiB limit, asked to be sampled every eighth of
/// the lead (one sample a bucket): the first policy, which took that and started slow, was
/// aliased (its troughs were learned as steps) and alerted at 6.9 s, where the fixed rate
/// never does. Now `max_interval` is clamped to a quarter bucket, and the saw-tooth's
/// rises keep it at `interval` anyway.
#[test]
fn a_recorded_sawtooth_sampled_slowly_does_not_alert() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/traces/rec_stable_sawtooth.csv"
    );
    let trace = watchdog_formats::trace::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let s = EngineSettings {
        lead_s: 5.0,
        interval_s: 0.02,
        ..EngineSettings::default()
    };
    for kernel_wake in [false, true] {
        let adaptive = Adaptive {
            max_interval_s: 5.0 / 8.0,
            kernel_wake,
        };
        let (report, rates) =
            replay::run_trace_adaptive(&trace, &at_fill(&s, &trace), adaptive, |_, _, _| {});
        assert!(report.alerts.is_empty(), "{:?}", report.alerts);
        assert!(rates[0].taken > 0);
    }
}

/// What the loop asks the engine: when each resource is due, and where a kernel source
/// should wake it.
#[test]
fn the_engine_says_when_each_resource_is_due() {
    use std::time::Duration;
    use watchdog_engine::Engine;
    use watchdog_types::{Resource, ResourceId, ResourceKind, Sample};
    let resource = |id: u16, kind: ResourceKind, name: &str| Resource {
        id: ResourceId(id),
        kind,
        name: name.to_string(),
        source: "test".to_string(),
    };
    let mut engine = Engine::new(
        &[
            resource(0, ResourceKind::CgroupMemory, "cgroup_memory"),
            resource(1, ResourceKind::DiskBytes, "disk:/"),
        ],
        calm(30.0),
    );
    engine.set_max_interval(10.0);
    assert_eq!(engine.max_interval_s(), 0.9375);
    engine.set_kernel_wake(ResourceId(0), true);
    assert_eq!(engine.next_due(ResourceId(0)), Duration::ZERO);
    let limit = 1u64 << 30;
    let mut out = Vec::new();
    let mut t = 0.0;
    while t <= 31.0 {
        for id in 0..2 {
            let s = Sample {
                resource: ResourceId(id),
                t_ns: (t * 1e9) as u64,
                used: limit / 5,
                limit,
            };
            engine.observe(&s, &mut out);
        }
        t += 0.1;
    }
    // Far for a lead: slow, and the cgroup woken by the kernel just above its usage.
    for id in [ResourceId(0), ResourceId(1)] {
        assert!(engine.is_slow(id));
        let due = engine.next_due(id).as_secs_f64();
        assert!(due > 0.1 && due <= 0.9375 + 1e-9, "{due}");
        let at = engine.due_at_s(id).unwrap();
        assert!((at - (t - 0.1) - due).abs() < 1e-6, "{at} {t} {due}");
    }
    // The next sample alerts at once from the floor line (no step learned).
    let floor = (limit as f64 * engine.settings().floor_percent / 100.0) as u64;
    assert_eq!(engine.alert_level(ResourceId(0)), Some(limit - floor + 1));
    let wake = engine.wake_at(ResourceId(0)).unwrap();
    assert!(wake > limit / 5 && wake < limit / 5 + limit / 100, "{wake}");
    assert_eq!(engine.wake_at(ResourceId(1)), None);
    // Near the floor: at `interval` again, at once.
    let s = Sample {
        resource: ResourceId(1),
        t_ns: (t * 1e9) as u64,
        used: limit - limit / 40,
        limit,
    };
    engine.observe(&s, &mut out);
    assert!(!engine.is_slow(ResourceId(1)));
    assert_eq!(engine.next_due(ResourceId(1)), Duration::from_secs_f64(0.1));
}

/// What the summary and the status say of the rates: samples, how many at `interval`,
/// and the rate in force.
#[test]
fn the_engine_counts_each_resources_samples_and_says_its_rate() {
    use watchdog_engine::Engine;
    use watchdog_types::{Resource, ResourceId, ResourceKind, Sample};
    let mut engine = Engine::new(
        &[Resource {
            id: ResourceId(0),
            kind: ResourceKind::DiskBytes,
            name: "disk:/".to_string(),
            source: "test".to_string(),
        }],
        calm(30.0),
    );
    let limit = 1u64 << 30;
    let mut out = Vec::new();
    let status_rate = |e: &Engine| e.resource_status()[0].sample_rate_hz.unwrap();
    let mut t = 0.0;
    let mut n = 0u64;
    // Far, its headroom outlasting a slow read at the fill rate: at the interval for a
    // bucket (3.75 s), then sampled when due.
    while t <= 40.0 {
        engine.observe(
            &Sample {
                resource: ResourceId(0),
                t_ns: (t * 1e9) as u64,
                used: limit / 5,
                limit,
            },
            &mut out,
        );
        n += 1;
        if n == 1 {
            assert!((status_rate(&engine) - 10.0).abs() < 1e-9);
        }
        t += engine.next_due(ResourceId(0)).as_secs_f64();
    }
    let counts: Vec<_> = engine.sample_counts().collect();
    assert_eq!(counts.len(), 1);
    let (name, samples, fast) = counts[0];
    assert_eq!((name, samples), ("disk:/", n));
    assert!(
        (35..=45).contains(&fast) && fast < samples,
        "{fast} of {samples} at the interval"
    );
    assert!((status_rate(&engine) - 1.0 / 0.9375).abs() < 1e-6);
    assert_eq!(engine.resource_status()[0].samples, n);
}

/// One case of the long run: the first alert at adaptive rates (no kernel wake) comes no
/// later than one `max_interval` after the latest first alert of [`DRAWS`] draws at the
/// fixed rate.
fn first_alert_with_the_fixed_rate(case: &Case) {
    let lead = case.lead;
    let s = settings(lead);
    let draw = |k: u64| case.draw(k);
    let latest = (0..DRAWS)
        .filter_map(|k| {
            times(&replay::run_trace(&draw(k), &s).alerts)
                .first()
                .copied()
        })
        .fold(f64::NEG_INFINITY, f64::max);
    let max = max_interval(lead);
    let adaptive = Adaptive {
        max_interval_s: max,
        kernel_wake: false,
    };
    let trace = draw(0);
    let (report, _) =
        replay::run_trace_adaptive(&trace, &at_fill(&s, &trace), adaptive, |_, _, _| {});
    let a = times(&report.alerts);
    assert!(!a.is_empty() && latest.is_finite(), "{a:?} {latest}");
    assert!(
        a[0] <= latest + max + 1e-6,
        "adaptive alert at {:.1}, the fixed rate's latest at {latest:.1}",
        a[0]
    );
}

/// A staircase whose first step lands while the resource is sampled slowly (seed
/// 12220939433242691218 of the long run): the bucket before that step has 5 samples
/// instead of 37, its minimum sits higher in the noise, and the step is learned about
/// 0.03% of the limit too small. The staircase ends at the limit, so without the jitter
/// allowance in the step forecast `ceil(headroom / step)` counted one step more at
/// adaptive rates and alerted one step (7.2 s) later than the fixed rate's latest.
#[test]
fn a_staircase_first_seen_slowly_alerts_with_the_fixed_rate() {
    let parts = [
        (
            2.2966079441058733,
            Segment::Staircase {
                steps: 9,
                period: 0.3712745579172423,
                next_base: 0.24956639316187676,
            },
        ),
        (
            2.956308264536485,
            Segment::Plateau {
                len: 2.471509619976337,
            },
        ),
    ];
    first_alert_with_the_fixed_rate(&Case {
        name: "cgroup_memory",
        lead: 30.0,
        first_base: 0.26632372842466295,
        parts: &parts,
        ack: false,
        seed: 12_220_939_433_242_691_218,
    });
}

/// A disk jumping from 4% to 88% (learned as a step of 84%) then climbing a staircase
/// (seed 9529573408834060267 of the long run): on the first stair the headroom is that
/// same 84% within the noise. The jump's base bucket was sampled slowly, so its step was
/// learned a little smaller and, without the jitter allowance in `NextStep`, adaptive
/// rates alerted only at the next stair, 24 s after the fixed rate.
#[test]
fn a_jump_learned_as_a_step_alerts_with_the_fixed_rate() {
    let parts = [
        (
            1.6099601305389144,
            Segment::Jump {
                level: 0.879634447829837,
                len: 0.8188472811327383,
            },
        ),
        (
            0.5337154037604568,
            Segment::Staircase {
                steps: 8,
                period: 0.78784998609631,
                next_base: 0.3349788261055144,
            },
        ),
        (
            2.795639926820946,
            Segment::Staircase {
                steps: 5,
                period: 0.7331147163174321,
                next_base: 0.1293171001151752,
            },
        ),
        (
            2.5024550691139558,
            Segment::Jump {
                level: 0.8396916396298065,
                len: 0.7714297058371506,
            },
        ),
    ];
    first_alert_with_the_fixed_rate(&Case {
        name: "disk:/ckpt",
        lead: 60.0,
        first_base: 0.040470430307368,
        parts: &parts,
        ack: true,
        seed: 9_529_573_408_834_060_267,
    });
}

/// Host memory of a live 23.5 GiB machine with 22 GiB free, rising 0.5% of its limit every
/// 3 s (builds and editors starting), traced every 10 ms (a read lands within 10 ms of
/// when it is due, as in a live loop, not up to an interval early); from `fill_at` on
/// (when given), filling at 6 GB/s up to the limit.
fn live_host(seconds: f64, fill_at: Option<f64>) -> Trace {
    let limit = 23.5 * (1u64 << 30) as f64;
    let start = limit - 22.0 * (1u64 << 30) as f64;
    let mut samples = Vec::new();
    let mut t = 0.0f64;
    while t <= seconds {
        let resting = start + (t / 3.0).floor() * 0.005 * limit;
        let used = match fill_at {
            Some(f) if t >= f => {
                let at_fill = start + (f / 3.0).floor() * 0.005 * limit;
                (at_fill + (t - f) * 6e9).min(limit)
            }
            _ => resting,
        };
        samples.push(TraceSample {
            resource: 0,
            t_s: t,
            used: used as u64,
            limit: limit as u64,
        });
        t = ((t / 0.01).round() + 1.0) * 0.01;
    }
    Trace {
        format: TraceFormat::Csv,
        resources: vec!["host_memory".to_string()],
        samples,
        meta: Vec::new(),
    }
}

/// Issue 31: a rise of 0.5% of the limit kept host memory at `interval` for 4 to 8 leads,
/// and on a live machine host memory rises that much every few seconds. With 22 GiB free
/// no process fills the host before the next slow read (3.5 s at the default 6 GiB/s), so
/// the rises no longer keep it fast: read at most 1.2 times a second once the first bucket
/// (3.75 s) is over (more than 5 without a fill rate, as before: fast for the first lead
/// and after every rise). And a real 6 GB/s fill from the
/// same start is alerted as at the fixed rate.
#[test]
fn live_host_memory_rests_and_a_fast_fill_is_alerted_as_at_the_fixed_rate() {
    let lead = 30.0;
    let s = settings(lead);
    let adaptive = Adaptive {
        max_interval_s: 1.0,
        kernel_wake: false,
    };
    let reads_a_second = |s: &EngineSettings| {
        let mut reads = 0u32;
        let (report, _) =
            replay::run_trace_adaptive(&live_host(240.0, None), s, adaptive, |_, t, _| {
                reads += u32::from(t >= 10.0);
            });
        assert!(report.alerts.is_empty(), "{:?}", report.alerts);
        f64::from(reads) / 230.0
    };
    let rate = reads_a_second(&s);
    assert!(rate <= 1.2, "{rate} reads a second");
    let unbounded = EngineSettings {
        fill_rate: FillRates {
            host_memory: 0.0,
            ..FillRates::DEFAULT
        },
        ..s.clone()
    };
    let before = reads_a_second(&unbounded);
    assert!(before > 5.0, "{before} reads a second without a fill rate");

    let fill = live_host(120.0, Some(90.0));
    let fixed = replay::run_trace(&fill, &s);
    let (report, rates) = replay::run_trace_adaptive(&fill, &s, adaptive, |_, _, _| {});
    let (today, _) = replay::run_trace_adaptive(&fill, &unbounded, adaptive, |_, _, _| {});
    let first = |a: &[AlertRecord]| a.first().map(|a| (a.time_s, a.reason));
    let (f, reason) = first(&fixed.alerts).unwrap();
    let (a, _) = first(&report.alerts).unwrap();
    let (b, _) = first(&today.alerts).unwrap();
    assert!(f > 90.0, "the fixed rate alerts at {f} ({reason:?})");
    // The fixed rate reads every 10 ms sample of the trace; a watch reads every interval.
    assert!(
        a <= f + DT + 1e-6 && a <= b + DT + 1e-6,
        "alerted at {a:.2} s, the fixed rate at {f:.2} s ({reason:?}), before at {b:.2} s; {rates:?}"
    );
}

/// A saw-tooth whose teeth rise 6.7% of the limit a second at a 10 s lead, then a staircase
/// (seed 10042747797000533518 of the long run, fill rate at the trace's fastest rise): its
/// headroom outlasted a slow read at that rate, so the first fill-rate rule let the rises
/// go by at slow reads; the tooth's peak was missed, its trend was fitted at 109 s left
/// instead of 10 s, and the fixed rate's alert at 32.5-33.1 s was missed. A rise that, kept
/// up, reaches the alert line within 2 leads now keeps the resource fast.
#[test]
fn a_tooth_rising_fast_far_from_the_limit_is_sampled_fast() {
    let parts = [
        (
            2.685487904942162,
            Segment::Sawtooth {
                amp: 0.31111199070368956,
                period: 0.4595359621955916,
                teeth: 2,
            },
        ),
        (
            2.451576635918757,
            Segment::Staircase {
                steps: 6,
                period: 0.6273986350116263,
                next_base: 0.3375202572864004,
            },
        ),
        (
            0.5840703017443606,
            Segment::Leak {
                runway: 1.3446277089571723,
                next_base: 0.20107394747796764,
            },
        ),
    ];
    first_alert_with_the_fixed_rate(&Case {
        name: "disk:/ckpt",
        lead: 10.0,
        first_base: 0.26816150322788995,
        parts: &parts,
        ack: false,
        seed: 10_042_747_797_000_533_518,
    });
}

/// One case of the long run as the property test checks it, at the trace's fastest rise
/// as the fill rate: `None` when it holds, without and with the kernel wake; else what
/// broke.
fn breaks_the_bound(
    name: &'static str,
    lead: f64,
    first_base: f64,
    ack: bool,
    seed: u64,
    parts: &[(f64, Segment)],
) -> Option<String> {
    let case = Case {
        name,
        lead,
        first_base,
        parts,
        ack,
        seed,
    };
    let s = settings(lead);
    let fixed: Vec<Vec<f64>> = (0..DRAWS)
        .map(|k| times(&replay::run_trace(&case.draw(k), &s).alerts))
        .collect();
    let trace = case.draw(0);
    let max = max_interval(lead);
    let mut out = None;
    for kernel_wake in [false, true] {
        let (report, _) = replay::run_trace_adaptive(
            &trace,
            &at_fill(&s, &trace),
            Adaptive {
                max_interval_s: max,
                kernel_wake,
            },
            |_, _, _| {},
        );
        let a = times(&report.alerts);
        let alike: Vec<&Vec<f64>> = fixed.iter().filter(|f| f.len() == a.len()).collect();
        let late = a
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a - alike
                    .iter()
                    .filter_map(|f| f.get(i))
                    .fold(f64::NEG_INFINITY, |m, f| m.max(*f))
            })
            .fold(0.0f64, f64::max);
        if alike.is_empty() || late > max + 1e-6 {
            out = Some(format!(
                "kernel wake {kernel_wake}: {a:?}, {late:.2} s late (bound {max:.2}); fixed {fixed:?}"
            ));
        }
    }
    out
}

/// The replays of 10,000 cases (`PROPTEST_RNG_SEED=1`) that broke the property test's
/// bound with the first fill-rate rules: a bucket's close without its read, slow from the
/// first sample, a kernel wake counted as outlasting any read (docs/prediction.md, "Fill
/// rates"). Each holds now.
#[test]
fn the_cases_the_first_fill_rate_rules_broke_hold() {
    use Segment::*;
    let r = [
        breaks_the_bound(
            "disk:/ckpt",
            10.0,
            0.04894667875809807,
            true,
            1641146792179013559,
            &[
                (
                    0.3074038145747762,
                    Staircase {
                        steps: 11,
                        period: 0.5122792540819681,
                        next_base: 0.32902849745377216,
                    },
                ),
                (
                    2.6105404247012034,
                    Plateau {
                        len: 2.6181702497834936,
                    },
                ),
                (
                    0.44547071038421177,
                    Staircase {
                        steps: 8,
                        period: 0.8606462370018613,
                        next_base: 0.08037690124081451,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "disk:/ckpt",
            30.0,
            0.12826000948550592,
            true,
            12764568886930896525,
            &[
                (
                    1.2301318172970324,
                    Leak {
                        runway: 1.8805201472227717,
                        next_base: 0.3343766234844434,
                    },
                ),
                (
                    0.48341148193261346,
                    Leak {
                        runway: 13.895068383810912,
                        next_base: 0.15778024506051416,
                    },
                ),
                (
                    1.5363673696333784,
                    Leak {
                        runway: 12.42509246362391,
                        next_base: 0.38122320855194614,
                    },
                ),
                (
                    0.751658704930329,
                    Leak {
                        runway: 7.525322328763544,
                        next_base: 0.3386152355858158,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "disk:/ckpt",
            30.0,
            0.286269746073394,
            false,
            370528863385341924,
            &[(
                1.1028759495594158,
                Sawtooth {
                    amp: 0.37007392901225594,
                    period: 0.27660182603418115,
                    teeth: 7,
                },
            )],
        ),
        breaks_the_bound(
            "cgroup_memory",
            60.0,
            0.1615823034593669,
            false,
            4770894661385312836,
            &[
                (
                    2.3919430080032575,
                    Leak {
                        runway: 9.719121756159137,
                        next_base: 0.24314906783163961,
                    },
                ),
                (
                    2.097301235967134,
                    Sawtooth {
                        amp: 0.04569790315375413,
                        period: 1.8189497406873296,
                        teeth: 1,
                    },
                ),
                (
                    2.011099552215162,
                    Staircase {
                        steps: 10,
                        period: 0.3087113395319874,
                        next_base: 0.3883449484941861,
                    },
                ),
                (
                    1.6016559288501957,
                    Sawtooth {
                        amp: 0.1592584077862796,
                        period: 2.8327808466529154,
                        teeth: 6,
                    },
                ),
                (
                    1.8736472714944516,
                    Leak {
                        runway: 8.61710833296266,
                        next_base: 0.07357017988232792,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "disk:/ckpt",
            60.0,
            0.054651711534906756,
            true,
            2743381591632179407,
            &[(
                0.20936265652095315,
                Sawtooth {
                    amp: 0.33239070481915284,
                    period: 0.5401796965956241,
                    teeth: 7,
                },
            )],
        ),
        breaks_the_bound(
            "cgroup_memory",
            60.0,
            0.19837112448444522,
            true,
            2056056251595643811,
            &[
                (
                    1.0245411882660287,
                    Leak {
                        runway: 3.9021077798503403,
                        next_base: 0.06338277496084335,
                    },
                ),
                (
                    0.3111769630790952,
                    Leak {
                        runway: 5.679941272535657,
                        next_base: 0.2788508859486874,
                    },
                ),
                (
                    1.5698867628242756,
                    Jump {
                        level: 0.9978106112867564,
                        len: 0.8105356397435379,
                    },
                ),
                (
                    1.1072644001246055,
                    Sawtooth {
                        amp: 0.3903709559227294,
                        period: 1.131685609683674,
                        teeth: 2,
                    },
                ),
                (
                    2.3567356688399888,
                    Sawtooth {
                        amp: 0.0750288107061082,
                        period: 0.8111985029660679,
                        teeth: 3,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "cgroup_memory",
            30.0,
            0.24805796493702217,
            true,
            8633783350564503982,
            &[
                (
                    1.885970567476219,
                    Jump {
                        level: 0.8065206228547688,
                        len: 0.651804847069401,
                    },
                ),
                (
                    0.49317569386733434,
                    Leak {
                        runway: 7.356594409549849,
                        next_base: 0.3854471950767608,
                    },
                ),
                (
                    0.9947734720033999,
                    Sawtooth {
                        amp: 0.3585075526292487,
                        period: 0.6895545039657297,
                        teeth: 2,
                    },
                ),
                (
                    1.5699153388769143,
                    Sawtooth {
                        amp: 0.15348703706425718,
                        period: 1.830669422783178,
                        teeth: 6,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "cgroup_memory",
            30.0,
            0.13731793011553597,
            false,
            15888617888430938440,
            &[
                (
                    0.2568446486262511,
                    Jump {
                        level: 0.9388414791276312,
                        len: 0.35979897761608587,
                    },
                ),
                (
                    1.567976853290253,
                    Jump {
                        level: 0.6954421253494615,
                        len: 0.3646770026087533,
                    },
                ),
                (
                    1.0003759559875418,
                    Staircase {
                        steps: 11,
                        period: 0.31574280574955377,
                        next_base: 0.26156964085986223,
                    },
                ),
                (
                    0.9331071226113489,
                    Sawtooth {
                        amp: 0.08063880437189024,
                        period: 1.8664435341293613,
                        teeth: 2,
                    },
                ),
                (
                    0.17728338530458165,
                    Leak {
                        runway: 10.138698784392156,
                        next_base: 0.14221722094766615,
                    },
                ),
            ],
        ),
    ];
    for (i, broke) in r.iter().enumerate() {
        assert!(broke.is_none(), "case {i}: {broke:?}");
    }
}

/// The replays of 10,000 cases (`PROPTEST_RNG_SEED=1`) that the fill-rate rules of the
/// last round broke by 0.1-0.19 s past the bound: a resource that had been near went slow
/// a bucket after it was far again (a leak's free), and the trend fitted later over those
/// buckets of four samples moved. Slow a whole lead after it was near, each holds.
#[test]
fn the_cases_a_bucket_hold_after_a_free_broke_hold() {
    use Segment::*;
    let r = [
        breaks_the_bound(
            "disk:/ckpt",
            10.0,
            0.06296702193585983,
            false,
            7649612221594863490,
            &[
                (
                    1.226752412331289,
                    Plateau {
                        len: 1.4212608206828112,
                    },
                ),
                (
                    2.337127729196025,
                    Leak {
                        runway: 1.0379792120744284,
                        next_base: 0.2590398799271856,
                    },
                ),
                (
                    0.7207011647378693,
                    Staircase {
                        steps: 5,
                        period: 0.9039297557742496,
                        next_base: 0.025350406964502088,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "disk:/ckpt",
            10.0,
            0.18226820314519818,
            false,
            15969329447242862489,
            &[
                (
                    1.2807934201025803,
                    Leak {
                        runway: 1.6645181497711636,
                        next_base: 0.047769838376152465,
                    },
                ),
                (
                    2.6389432503443504,
                    Leak {
                        runway: 8.09638305217484,
                        next_base: 0.03360039383752869,
                    },
                ),
                (
                    1.5569184195280676,
                    Staircase {
                        steps: 6,
                        period: 0.7004735081668026,
                        next_base: 0.3319527520631047,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "cgroup_memory",
            10.0,
            0.3665432700315454,
            false,
            7805775753272116996,
            &[
                (
                    2.7500798121655694,
                    Leak {
                        runway: 10.052652016372718,
                        next_base: 0.2083844434789538,
                    },
                ),
                (
                    1.760500399101438,
                    Staircase {
                        steps: 10,
                        period: 0.48744326402742055,
                        next_base: 0.3501469387573869,
                    },
                ),
                (
                    0.9482277951072643,
                    Leak {
                        runway: 1.1512049134304958,
                        next_base: 0.20600554379174923,
                    },
                ),
                (
                    2.6280509969206713,
                    Plateau {
                        len: 0.8214336622357539,
                    },
                ),
            ],
        ),
        breaks_the_bound(
            "cgroup_memory",
            30.0,
            0.23929501142405016,
            true,
            8421625407631876988,
            &[
                (
                    0.551696939559635,
                    Staircase {
                        steps: 10,
                        period: 0.5471989982416698,
                        next_base: 0.10361756723548596,
                    },
                ),
                (
                    1.0040054907300888,
                    Sawtooth {
                        amp: 0.34747628816880316,
                        period: 0.292736312120067,
                        teeth: 6,
                    },
                ),
                (
                    2.994207551351055,
                    Leak {
                        runway: 1.2118021785045703,
                        next_base: 0.036542252416713605,
                    },
                ),
                (
                    0.9894595706596159,
                    Leak {
                        runway: 14.66813375083775,
                        next_base: 0.3302249906161095,
                    },
                ),
                (
                    1.0359835762753151,
                    Leak {
                        runway: 8.600107781742855,
                        next_base: 0.03321375128444471,
                    },
                ),
            ],
        ),
    ];
    let broken: Vec<&String> = r.iter().flatten().collect();
    assert!(broken.is_empty(), "{broken:#?}");
}
