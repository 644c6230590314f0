//! Learning the size of the discrete steps a resource grows by.
//!
//! A checkpoint file or an epoch's allocation shows up as a jump of the
//! bucket *minimum* (the level the usage settles at) between neighbouring
//! buckets, completed within at most [`MAX_STEP_BUCKETS`] buckets, large
//! against the usage's own jitter (the upper quartile of the bucket spans),
//! and still there one bucket later. Growth spread over
//! more buckets is a trend, not a step, and is left to the envelope fit. The
//! last [`KEPT`] step sizes are kept; the learned step is their maximum, once
//! at least two steps have been seen (one jump alone is not a staircase).

use crate::envelope::Envelope;

/// Step sizes kept.
const KEPT: usize = 4;
/// A rise spread over more buckets than this is a trend, not a step.
const MAX_STEP_BUCKETS: u32 = 3;
/// Smallest step worth learning, as a fraction of the limit.
pub(crate) const MIN_STEP_FRACTION: f64 = 0.005;
/// Buckets used for the jitter estimate.
const NOISE_BUCKETS: usize = 9;

/// Learns step sizes from closed buckets; fixed size, no allocation.
#[derive(Clone, Debug, Default)]
pub(crate) struct StepLearner {
    run_sum: f64,
    run_len: u32,
    run_slot: Option<usize>,
    sizes: [f64; KEPT],
    head: usize,
    count: u32,
}

impl StepLearner {
    /// Looks at the second newest closed bucket against the one before it, and
    /// keeps its rise only if the newest bucket stayed up (a step persists; noise
    /// falls back).
    pub fn on_close(&mut self, env: &Envelope, limit: f64) {
        let (Some(cur), Some(prev), Some(before)) = (env.recent(0), env.recent(1), env.recent(2))
        else {
            return;
        };
        if !cur.filled || !prev.filled || !before.filled {
            self.end_run();
            return;
        }
        let Some(noise) = env.noise(NOISE_BUCKETS) else {
            return;
        };
        let delta = prev.min - before.min;
        let small = (2.0 * noise).max(limit * 1e-3);
        if delta <= small || cur.min < prev.min - small {
            self.end_run();
            return;
        }
        self.run_sum += delta;
        self.run_len += 1;
        let big = (4.0 * noise).max(limit * MIN_STEP_FRACTION);
        if self.run_len > MAX_STEP_BUCKETS {
            // A ramp: take back what this run recorded.
            if let Some(slot) = self.run_slot.take()
                && let Some(s) = self.sizes.get_mut(slot)
            {
                *s = 0.0;
                self.count = self.count.saturating_sub(1);
            }
            return;
        }
        if self.run_sum >= big {
            let slot = match self.run_slot {
                Some(slot) => slot,
                None => {
                    let slot = self.head;
                    self.head = (self.head + 1) % KEPT;
                    self.count = self.count.saturating_add(1);
                    self.run_slot = Some(slot);
                    slot
                }
            };
            if let Some(s) = self.sizes.get_mut(slot) {
                *s = self.run_sum;
            }
        }
    }

    fn end_run(&mut self) {
        self.run_sum = 0.0;
        self.run_len = 0;
        self.run_slot = None;
    }

    /// Number of steps seen (saturating).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The step to expect next: the largest recent one, once two or more were seen; else 0.
    pub fn learned(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        self.sizes.iter().copied().fold(0.0, f64::max)
    }
}
