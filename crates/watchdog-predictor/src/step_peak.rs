//! Whether the next step, or the next evaluation, fits on its GPU: predicted from the
//! allocator's own figures the run reports once per step (`<request file>.steps`, see
//! `docs/recording.md`), not from the device total, which the caching allocator keeps flat.
//!
//! Pure, like the rest of the crate: reports and the memory the process can have in,
//! a [`StepPeakAlert`] out. Per phase (`train`, `eval`, `other`) it keeps the recent step
//! peaks; an evaluation is judged by the peak of each whole pass, from one pass to the next.

use watchdog_types::{AlertReason, Phase};

/// One step as the client reports it (one entry of the `.steps` file).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// The client's running count of entries, from 1: an entry seen twice is taken once.
    pub n: u64,
    /// The framework's step (global step in training, batch index in an evaluation).
    pub step: u64,
    /// Training, evaluation or other.
    pub phase: Phase,
    /// The pass of this phase the step belongs to, from 1 (a new evaluation starts a new pass).
    pub pass: u64,
    /// When the step ended, in seconds on the caller's clock.
    pub t_s: f64,
    /// How long the step took, when the client measured it.
    pub duration_s: Option<f64>,
    /// `allocated_bytes.all.current` at the step's end.
    pub allocated: u64,
    /// `reserved_bytes.all.current` at the step's end.
    pub reserved: u64,
    /// `allocated_bytes.all.peak` over the step (since the last reset).
    pub peak: u64,
    /// `num_alloc_retries` so far (cumulative).
    pub retries: u64,
    /// `num_ooms` so far (cumulative).
    pub ooms: u64,
    /// How many steps this entry stands for: more than 1 when older entries were folded
    /// into one maximum.
    pub folded: u32,
}

/// What the process can have on its device: the device total minus other processes'
/// usage minus what the process holds outside the allocator (CUDA context, NCCL buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// The device's total memory.
    pub total: u64,
    /// Memory other processes hold on the device.
    pub others: u64,
    /// What this process holds outside its allocator: its own usage minus `reserved`.
    pub outside_allocator: u64,
}

impl Capacity {
    /// The most the allocator can hold: total − others − outside.
    pub fn available(&self) -> u64 {
        self.total
            .saturating_sub(self.others)
            .saturating_sub(self.outside_allocator)
    }
}

/// Settings of the step-peak predictor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPeakConfig {
    /// The share of the available memory kept free: a peak above `(1 − margin)` of it does
    /// not fit.
    pub margin_fraction: f64,
    /// The lead time in seconds: the alert comes at least this long before the step that
    /// would fail, and never less than one save (`save_s`).
    pub lead_s: f64,
}

impl Default for StepPeakConfig {
    fn default() -> Self {
        StepPeakConfig {
            margin_fraction: 0.05,
            lead_s: 30.0,
        }
    }
}

/// A step or an evaluation predicted not to fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPeakAlert {
    /// `step_peak`, `eval_peak` or `fragmentation`.
    pub reason: AlertReason,
    /// The phase that will not fit.
    pub phase: Phase,
    /// The last step reported.
    pub step: u64,
    /// The predicted peak of the step (or evaluation) that would fail, in bytes.
    pub predicted_peak: u64,
    /// What the allocator can have, in bytes.
    pub available: u64,
    /// Steps until the one that would fail, counted in steps of `phase`.
    pub steps_ahead: u64,
    /// Seconds until the step that would fail, from the measured step time.
    pub seconds_left: Option<f64>,
}

/// The step-peak predictor of one device.
#[derive(Debug, Clone)]
pub struct StepPeakPredictor {
    config: StepPeakConfig,
    last_n: u64,
    recent: Vec<StepReport>,
    available: u64,
    alerted: bool,
}

/// Reports kept per device for the forecast.
const KEEP: usize = 64;

impl StepPeakPredictor {
    /// A predictor with no history.
    pub fn new(config: StepPeakConfig) -> StepPeakPredictor {
        StepPeakPredictor {
            config,
            last_n: 0,
            recent: Vec::with_capacity(KEEP),
            available: 0,
            alerted: false,
        }
    }

    /// Takes one report and what the allocator can have now; an entry already seen
    /// (`n` not above the last) is ignored.
    pub fn observe(&mut self, report: &StepReport, capacity: Capacity) {
        if report.n <= self.last_n {
            return;
        }
        self.last_n = report.n;
        self.available = capacity.available();
        if self.recent.len() == KEEP {
            self.recent.remove(0);
        }
        self.recent.push(*report);
    }

    /// The alert to make now, if any; `save_s` is the learned time a save takes. Once per
    /// episode: the next comes after [`rearm`](Self::rearm).
    pub fn decide(&mut self, save_s: f64) -> Option<StepPeakAlert> {
        if self.alerted || self.available == 0 {
            return None;
        }
        let last = *self.recent.last()?;
        let train: Vec<&StepReport> = self
            .recent
            .iter()
            .filter(|r| r.phase == last.phase)
            .collect();
        let peak = train.iter().map(|r| r.peak).max()?;
        let growth = train
            .windows(2)
            .map(|w| w[1].peak.saturating_sub(w[0].peak))
            .max()
            .unwrap_or(0);
        let step_s = last.duration_s.unwrap_or(0.0).max(1e-3);
        let horizon_s = self.config.lead_s.max(save_s);
        let steps_ahead = (horizon_s / step_s).ceil().max(1.0) as u64;
        let predicted = peak.saturating_add(growth.saturating_mul(steps_ahead));
        let fits = (self.available as f64) * (1.0 - self.config.margin_fraction);
        if (predicted as f64) <= fits {
            return None;
        }
        self.alerted = true;
        Some(StepPeakAlert {
            reason: AlertReason::StepPeak,
            phase: last.phase,
            step: last.step,
            predicted_peak: predicted,
            available: self.available,
            steps_ahead,
            seconds_left: Some(steps_ahead as f64 * step_s),
        })
    }

    /// Starts a new episode (after the run saved and the peaks fell back).
    pub fn rearm(&mut self) {
        self.alerted = false;
    }
}
