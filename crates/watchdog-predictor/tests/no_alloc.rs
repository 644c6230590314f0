//! `observe` never allocates: a counting global allocator watches a long run of
//! every resource kind through leaks, gaps, steps and alerts (and the sampling-rate
//! policy decided after each sample).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use watchdog_predictor::sample_rate::{RateInput, SampleRate};
use watchdog_predictor::{PredictorConfig, ResourcePredictor};
use watchdog_types::ResourceKind;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Only this test's thread is watched: the harness allocates on its own threads.
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if WATCHED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is
// only an atomic increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn observe_does_not_allocate() {
    let kinds = [
        ResourceKind::CgroupMemory,
        ResourceKind::DiskBytes,
        ResourceKind::GpuMemory,
        ResourceKind::Runtime,
    ];
    let mut predictors: Vec<ResourcePredictor> = kinds
        .iter()
        .map(|&k| ResourcePredictor::new(k, PredictorConfig::default()))
        .collect();
    let limit: u64 = 1 << 30;
    let mut alerts = 0u32;
    let mut rates = [SampleRate::new(); 4];
    let mut slow = 0u32;
    WATCHED.with(|w| w.set(true));
    for i in 0..200_000u64 {
        let t = i as f64 * 0.01;
        if (50_000..60_000).contains(&i) {
            continue; // a gap
        }
        // Steps every 20 s plus a leak, a saw-tooth on top, back down at 1000 s.
        let base = if t < 1000.0 {
            (t / 20.0).floor() as u64 * (limit / 40)
        } else {
            0
        };
        let used = (base + i * 200 + (i % 100) * 100_000).min(limit);
        for (p, rate) in predictors.iter_mut().zip(rates.iter_mut()) {
            let obs = p.observe(t, used, limit);
            if obs.decision != watchdog_predictor::Decision::Quiet {
                alerts += 1;
            }
            let next = rate.update(&RateInput {
                t_s: t,
                seconds_left: obs.forecast.seconds_left,
                used,
                limit,
                floor: limit as f64 * 0.05,
                step: p.learned_step() as f64,
                alerting: !p.is_armed(),
                lead_s: 30.0,
                interval_s: 0.01,
                max_interval_s: 0.5,
                kernel_wake: i % 2 == 0,
                bucket_close_s: p.next_bucket_close(),
                fill_rate: limit as f64,
                alert_headroom: p.alert_headroom(limit) as f64,
            });
            slow += u32::from(next.slow);
        }
    }
    WATCHED.with(|w| w.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0, "observe allocated");
    assert!(alerts > 0, "the run should have exercised the alert path");
    assert!(slow > 0, "the run should have sampled slowly at times");
}

/// The step-peak predictor's `observe` and `decide` never allocate either: a leak, folded
/// entries, evaluations, retries and an alert and its re-arm.
#[test]
fn step_peak_observe_and_decide_do_not_allocate() {
    use watchdog_predictor::step_peak::{Capacity, StepPeakConfig, StepPeakPredictor, StepReport};
    use watchdog_types::Phase;
    let mut p = StepPeakPredictor::new(StepPeakConfig::default());
    let cap = Capacity {
        total: 24 << 30,
        others: 0,
        outside_allocator: 1 << 29,
    };
    let (mut alerts, mut t) = (0u32, 0.0);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHED.with(|w| w.set(true));
    for n in 1..50_000u64 {
        t += 0.05;
        let eval = n % 1000 >= 950;
        // A leak of 1 MiB a step, freed every 20,000 steps.
        let peak = ((10u64 << 30) + (n % 20_000) * (1 << 20)).min(23 << 30);
        let r = StepReport {
            n,
            step: n,
            phase: if eval { Phase::Eval } else { Phase::Train },
            pass: n / 1000 + 1,
            t_s: t,
            duration_s: Some(0.05),
            allocated: 6 << 30,
            reserved: peak,
            peak,
            retries: n / 5000,
            ooms: 0,
            folded: if n % 7 == 0 { 3 } else { 1 },
        };
        p.observe(&r, cap);
        if p.decide(20.0).is_some() {
            alerts += 1;
        }
    }
    WATCHED.with(|w| w.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), before, "allocated");
    assert!(
        alerts >= 2,
        "the run should have alerted, re-armed and alerted: {alerts}"
    );
}
