//! Throughput of `ResourcePredictor::observe` on one core.
//!
//!     cargo bench -p watchdog-predictor --bench observe
//!
//! `observe_100hz_24h` replays 24 hours of 100 Hz samples (8.64 million) of a
//! leak under a saw-tooth through one predictor; divan reports the time per
//! replay, and the items/s counter is samples per second. `observe_batch` runs
//! the same shape over 1 million samples for a steadier samples/s figure.
//! Parsing and replaying trace text is measured in `watchdog-engine`'s `replay` bench.
#![allow(clippy::unwrap_used)]

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use watchdog_predictor::{PredictorConfig, ResourcePredictor};
use watchdog_types::ResourceKind;

fn main() {
    divan::main();
}

#[path = "support/leak.rs"]
mod leak;
use leak::{LIMIT, samples};

fn replay(kind: ResourceKind, data: &[(f64, u64)]) -> u32 {
    let mut p = ResourcePredictor::new(kind, PredictorConfig::default());
    let mut alerts = 0;
    for &(t, used) in data {
        let o = p.observe(t, used, LIMIT);
        if o.decision != watchdog_predictor::Decision::Quiet {
            alerts += 1;
        }
    }
    alerts
}

#[divan::bench(sample_count = 10)]
fn observe_100hz_24h(bencher: Bencher) {
    let data = samples(24 * 3600 * 100);
    bencher
        .counter(ItemsCount::new(data.len()))
        .bench(|| replay(ResourceKind::CgroupMemory, black_box(&data)));
}

#[divan::bench(args = [ResourceKind::CgroupMemory, ResourceKind::DiskBytes, ResourceKind::Runtime])]
fn observe_batch(bencher: Bencher, kind: ResourceKind) {
    let data = samples(1_000_000);
    bencher
        .counter(ItemsCount::new(data.len()))
        .bench(|| replay(kind, black_box(&data)));
}
