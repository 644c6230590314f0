//! `observe` never allocates: a counting global allocator watches a long run of
//! every resource kind through leaks, gaps, steps and alerts.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

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
        for p in predictors.iter_mut() {
            if p.observe(t, used, limit).decision != watchdog_predictor::Decision::Quiet {
                alerts += 1;
            }
        }
    }
    WATCHED.with(|w| w.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0, "observe allocated");
    assert!(alerts > 0, "the run should have exercised the alert path");
}
