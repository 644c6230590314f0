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
    /// When the current run started (seconds, at most one bucket early).
    run_start: f64,
    /// Usage level before the current run.
    run_base: f64,
    sizes: [f64; KEPT],
    /// When each kept step happened (seconds, caller's clock; at most one bucket early).
    times: [f64; KEPT],
    /// Usage level before each kept step (the lower bucket's minimum).
    bases: [f64; KEPT],
    /// Usage level each kept step settled at.
    tops: [f64; KEPT],
    head: usize,
    count: u32,
    /// Summary of the kept steps, refreshed at every bucket close.
    plan: Option<Plan>,
    /// The largest kept step once two were seen, else 0.
    learned: f64,
    /// The usage's own jitter at the last bucket close (see [`StepLearner::slack`]).
    jitter: f64,
}

/// What the kept steps say, for the per-sample forecast.
#[derive(Clone, Copy, Debug)]
struct Plan {
    last: f64,
    period: f64,
    size: f64,
    total: f64,
    oldest_base: f64,
    newest_top: f64,
    newest_size: f64,
    steps: usize,
}

impl StepLearner {
    /// Looks at the second newest closed bucket against the one before it, and
    /// keeps its rise only if the newest bucket stayed up (a step persists; noise
    /// falls back).
    pub fn on_close(&mut self, env: &Envelope, limit: f64) {
        self.update(env, limit);
        self.jitter = env.noise(NOISE_BUCKETS).unwrap_or(0.0);
        self.plan = self.make_plan();
        self.learned = if self.count < 2 {
            0.0
        } else {
            self.sizes.iter().copied().fold(0.0, f64::max)
        };
    }

    fn update(&mut self, env: &Envelope, limit: f64) {
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
        // The step landed inside `before` (its span holds most of it) or at its end; a
        // bucket's t_max is its last sample at the maximum, so step back one bucket to
        // stay at or before the real time (an early estimate only makes forecasts
        // pessimistic).
        let small = (2.0 * noise).max(limit * 1e-3);
        if delta <= small || cur.min < prev.min - small {
            self.end_run();
            return;
        }
        if self.run_len == 0 {
            let inside = before.max - before.min >= 0.5 * delta;
            self.run_start = if inside { before.t_max } else { prev.t_max } - env.width();
            self.run_base = before.min;
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
            if let (Some(t), Some(b)) = (self.times.get_mut(slot), self.bases.get_mut(slot)) {
                *t = self.run_start;
                *b = self.run_base;
            }
            if let Some(top) = self.tops.get_mut(slot) {
                *top = prev.min;
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

    /// The staircase summary the per-sample forecast works from, recomputed when a bucket closes.
    fn make_plan(&self) -> Option<Plan> {
        let mut newest: Option<f64> = None;
        let mut newest_top = 0.0f64;
        let mut newest_size = 0.0f64;
        let mut oldest_base = 0.0f64;
        let mut total = 0.0f64;
        let mut oldest = 0.0f64;
        let mut size = 0.0f64;
        let mut n = 0;
        for k in 1..=KEPT {
            let slot = (self.head + KEPT - k) % KEPT;
            let (Some(&s), Some(&t)) = (self.sizes.get(slot), self.times.get(slot)) else {
                continue;
            };
            if s <= 0.0 || !t.is_finite() {
                continue;
            }
            n += 1;
            size = size.max(s);
            total += s;
            if newest.is_none() {
                newest = Some(t);
                newest_top = self.tops.get(slot).copied().unwrap_or(0.0);
                newest_size = s;
            }
            oldest_base = self.bases.get(slot).copied().unwrap_or(0.0);
            oldest = t;
        }
        let last = newest?;
        // The mean interval: step times are known to a bucket, and averaging over the
        // kept steps divides that error instead of picking its worst case.
        let period = if n >= 2 {
            (last - oldest) / (n - 1) as f64
        } else {
            0.0
        };
        if n < 2 || !period.is_finite() || period <= 0.0 || size <= 0.0 {
            return None;
        }
        Some(Plan {
            last,
            period,
            size,
            total,
            oldest_base,
            newest_top,
            newest_size,
            steps: n,
        })
    }

    /// Time left until the step that will not fit, if steps come regularly: the last
    /// step time plus as many mean recent step intervals as the headroom holds of the
    /// largest recent step (a step landing within the usage's jitter of the limit, up to
    /// half a step, counts as reaching it). Returns `(seconds_left, units_per_second, steps_used)`;
    /// None with fewer than two steps, or when no step came for two intervals (the
    /// staircase stopped).
    ///
    /// `used` is the current usage and `lag` how late a step is confirmed (seconds): a
    /// step that already happened but is not learned yet counts as just taken, and a
    /// staircase whose usage did not keep (checkpoints deleted as new ones come) has no
    /// step forecast.
    #[inline]
    pub fn forecast(
        &self,
        now: f64,
        used: f64,
        headroom: f64,
        lag: f64,
    ) -> Option<(f64, f64, usize)> {
        let p = self.plan.as_ref()?;
        if used - p.oldest_base < 0.5 * p.total || used < p.newest_top - 0.5 * p.newest_size {
            // The steps did not add up, or usage fell below the last step's level: old
            // checkpoints are being deleted, this is not a staircase (any more).
            return None;
        }
        let mut last = p.last;
        if used >= p.newest_top + 0.5 * p.size {
            // Another step has landed and is not confirmed yet.
            last = last.max(now - lag);
        }
        if now - last > 2.0 * p.period {
            return None;
        }
        // A step that lands within the usage's jitter of the limit reaches it: the
        // headroom is read from one noisy sample and the step size from two bucket
        // minima, so a staircase ending at the limit would otherwise count one step more
        // or fewer with the noise (and with how many samples those buckets had).
        let steps = ((headroom - self.slack(p.size)) / p.size).ceil().max(1.0);
        let left = (last + steps * p.period - now).max(0.0);
        Some((left, p.size / p.period, p.steps))
    }

    /// How close to the limit a step of this size may land and still count as reaching it:
    /// the usage's jitter (upper quartile of the bucket spans), at most half the step.
    #[inline]
    pub fn slack(&self, step: f64) -> f64 {
        self.jitter.min(0.5 * step).max(0.0)
    }

    /// The step to expect next: the largest recent one, once two or more were seen; else 0.
    #[inline]
    pub fn learned(&self) -> f64 {
        self.learned
    }
}
