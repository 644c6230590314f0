//! Throughput of parsing and replaying trace text on one core.
//!
//!     cargo bench -p watchdog-engine --bench replay
//!
//! `parse_*_1m` and `replay_generic_1m` parse 1 million lines of text (generic CSV
//! or nvidia-smi's CSV); their items/s is lines per second. `*_text_1h_100hz` is one
//! hour of 100 Hz samples (360 000 lines).
#![allow(clippy::unwrap_used)]

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};

fn main() {
    divan::main();
}

#[path = "../../watchdog-predictor/benches/support/leak.rs"]
mod leak;
use leak::{LIMIT, samples};

/// `replay::run` on the text of one hour of 100 Hz samples (360 000 CSV lines):
/// parsing plus prediction, what `watchdog replay` spends per trace hour.
#[divan::bench(sample_count = 10)]
fn replay_text_1h_100hz(bencher: Bencher) {
    let text = generic_csv(3600 * 100);
    bencher
        .counter(ItemsCount::new(3600usize * 100))
        .bench(|| watchdog_engine::replay::run(black_box(&text), &at_100hz()).unwrap());
}

/// `trace::parse` alone on the same hour of text.
#[divan::bench(sample_count = 10)]
fn parse_text_1h_100hz(bencher: Bencher) {
    let text = generic_csv(3600 * 100);
    bencher
        .counter(ItemsCount::new(3600usize * 100))
        .bench(|| watchdog_formats::trace::parse(black_box(&text)).unwrap());
}

/// 1 million lines of the generic CSV, as `watchdog record` writes them at 100 Hz.
fn generic_csv(lines: usize) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("time,used,limit,resource\n");
    for (t, used) in samples(lines) {
        let _ = writeln!(text, "{t:.2},{used},{LIMIT},cgroup_memory");
    }
    text
}

/// 1 million lines of `nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total
/// --format=csv -lms 100` on a 4-GPU host (250 000 timestamps, a leak on GPU 0).
fn nvidia_smi_csv(lines: usize) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("timestamp, index, memory.used [MiB], memory.total [MiB]\n");
    for i in 0..lines {
        let tick = i / 4;
        let gpu = i % 4;
        let ms = tick * 100;
        let (h, m, s, frac) = (
            10 + ms / 3_600_000,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000,
        );
        let used = if gpu == 0 { 1024 + tick / 10 } else { 4096 };
        let _ = writeln!(
            text,
            "2024/01/15 {h:02}:{m:02}:{s:02}.{frac:03}, {gpu}, {used} MiB, 81559 MiB"
        );
    }
    text
}

/// `trace::parse` of 1 M generic CSV lines; items/s is lines per second.
#[divan::bench(sample_count = 10)]
fn parse_generic_1m(bencher: Bencher) {
    let text = generic_csv(1_000_000);
    bencher
        .counter(ItemsCount::new(1_000_000usize))
        .bench(|| watchdog_formats::trace::parse(black_box(&text)).unwrap());
}

/// `trace::parse` of 1 M nvidia-smi CSV lines; items/s is lines per second.
#[divan::bench(sample_count = 10)]
fn parse_nvidia_smi_1m(bencher: Bencher) {
    let text = nvidia_smi_csv(1_000_000);
    bencher
        .counter(ItemsCount::new(1_000_000usize))
        .bench(|| watchdog_formats::trace::parse(black_box(&text)).unwrap());
}

/// `replay::run` (parse + predict, streamed) of the same 1 M generic CSV lines.
#[divan::bench(sample_count = 10)]
fn replay_generic_1m(bencher: Bencher) {
    let text = generic_csv(1_000_000);
    bencher
        .counter(ItemsCount::new(1_000_000usize))
        .bench(|| watchdog_engine::replay::run(black_box(&text), &at_100hz()).unwrap());
}

/// A 30 s lead at 100 Hz, the rest the defaults.
fn at_100hz() -> watchdog_engine::EngineSettings {
    watchdog_engine::EngineSettings {
        lead_s: 30.0,
        interval_s: 0.01,
        ..watchdog_engine::EngineSettings::default()
    }
}
