//! The series both benchmarks feed: a leak under a saw-tooth, at 100 Hz (shared by
//! this crate's `observe` and `watchdog-engine`'s `replay` benches).

/// The limit of every sample.
pub const LIMIT: u64 = 64 << 30;

/// A leak of 64 KiB/s under a 1 s saw-tooth of 256 MiB, sampled at 100 Hz.
pub fn samples(n: usize) -> Vec<(f64, u64)> {
    (0..n)
        .map(|i| {
            let t = i as f64 * 0.01;
            let saw = ((i % 100) as u64) * (256 << 20) / 100;
            (t, (8u64 << 30) + (t * 65536.0) as u64 + saw)
        })
        .collect()
}
