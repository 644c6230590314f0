//! Time to exhaustion, and when to alert, as pure functions of the samples.
//!
//! No I/O and no clock: the caller passes each sample's time. One
//! [`ResourcePredictor`] per resource keeps the recent history it needs in
//! fixed-size buffers (no allocation per sample) and returns, for every
//! sample, a [`Forecast`] and a [`Decision`].
//!
//! How it predicts (the reasoning and the measurements are in
//! `docs/prediction.md`): usage is folded into buckets one eighth of the lead
//! time wide; a least-squares line is fitted to the bucket *maxima* (the upper
//! envelope, so a saw-tooth is judged by its peaks) over three windows (1, 4
//! and 16 lead times); windows whose growth is not credible (insignificant,
//! already levelled off, one jump, or only recovering an old peak) are
//! dropped, and the most pessimistic of the rest gives the time left. Every
//! resource also learns the size and rhythm of the steps it grows by (a
//! regular staircase gets its own forecast), and resources that grow in steps
//! (disks, GPU memory) alert when the next step will not fit. The runtime resource grows at exactly
//! 1000 ms per second, so its forecast is exact.
//!
//! The [`trace`] module parses recorded traces and [`replay`] runs this
//! predictor over them.
#![deny(missing_docs)]

mod envelope;
pub mod replay;
mod steps;
pub mod trace;

use envelope::{BUCKETS_PER_LEAD, Envelope};
use steps::StepLearner;
use watchdog_types::{AlertReason, Forecast, ResourceKind};

/// Default safety factor applied to a measured checkpoint duration (see
/// [`ResourcePredictor::note_checkpoint_duration`]).
pub const DEFAULT_CHECKPOINT_SAFETY: f64 = 1.5;

/// A step is confirmed this many bucket widths after it lands, at most.
const STEP_CONFIRM_BUCKETS: f64 = 3.0;

/// The step forecast replaces the envelope trend when the trend is at most this
/// multiple of the staircase's own rate (step size / step interval).
const STEP_EXPLAINS: f64 = 1.5;

/// Confidence reported for a forecast that rests on the learned staircase.
const STEP_CONFIDENCE: f64 = 0.75;

/// Settings shared by every resource's predictor.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictorConfig {
    /// Alert when the predicted time to exhaustion falls below this many seconds.
    pub lead_s: f64,
    /// Sampling interval in seconds (the predictor's time resolution).
    pub interval_s: f64,
    /// Alert whatever the trend when headroom falls below this percentage of the limit.
    pub floor_percent: f64,
}

impl Default for PredictorConfig {
    fn default() -> Self {
        PredictorConfig {
            lead_s: 30.0,
            interval_s: 0.1,
            floor_percent: 5.0,
        }
    }
}

impl PredictorConfig {
    /// Bucket width in seconds: an eighth of the lead, and at least four sampling intervals.
    pub fn bucket_width_s(&self) -> f64 {
        let lead = if self.lead_s.is_finite() && self.lead_s > 0.0 {
            self.lead_s
        } else {
            30.0
        };
        let interval = if self.interval_s.is_finite() && self.interval_s > 0.0 {
            self.interval_s
        } else {
            0.0
        };
        (lead / BUCKETS_PER_LEAD).max(4.0 * interval)
    }
}

/// What the alert policy decided on one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do.
    Quiet,
    /// Start of an alert episode: ask the target to checkpoint.
    Alert(AlertReason),
    /// The episode is over; the next crossing alerts again.
    Rearm,
}

/// The predictor's answer for one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// The forecast after this sample.
    pub forecast: Forecast,
    /// What to do about it.
    pub decision: Decision,
}

/// Prediction state for one resource.
///
/// Fixed size (a few kilobytes): [`observe`](Self::observe) never allocates.
#[derive(Debug, Clone)]
pub struct ResourcePredictor {
    kind: ResourceKind,
    config: PredictorConfig,
    env: Envelope,
    steps: StepLearner,
    armed: bool,
    /// Since when the re-arm condition has held (during an episode).
    clear_since: Option<f64>,
    checkpoint_s: f64,
    checkpoint_safety: f64,
}

impl ResourcePredictor {
    /// A predictor for one resource of this kind.
    pub fn new(kind: ResourceKind, config: PredictorConfig) -> Self {
        let env = Envelope::new(config.bucket_width_s());
        ResourcePredictor {
            kind,
            config,
            env,
            steps: StepLearner::default(),
            armed: true,
            clear_since: None,
            checkpoint_s: 0.0,
            checkpoint_safety: DEFAULT_CHECKPOINT_SAFETY,
        }
    }

    /// The kind this predictor was made for.
    pub fn kind(&self) -> ResourceKind {
        self.kind
    }

    /// The configuration in force (with the lead as last set by [`set_lead`](Self::set_lead)).
    pub fn config(&self) -> &PredictorConfig {
        &self.config
    }

    /// Raises (or lowers) the lead time, e.g. after a measured slow checkpoint.
    ///
    /// The bucket width stays the one chosen at construction, so the history is kept.
    pub fn set_lead(&mut self, lead_s: f64) {
        if lead_s.is_finite() && lead_s >= 0.0 {
            self.config.lead_s = lead_s;
        }
    }

    /// Records how long the target took to save a checkpoint (alert to acknowledgment).
    ///
    /// From then on the effective lead is never below the longest duration noted
    /// times the safety factor plus one sampling interval. Non-finite or negative
    /// durations are ignored.
    pub fn note_checkpoint_duration(&mut self, secs: f64) {
        if secs.is_finite() && secs >= 0.0 {
            self.checkpoint_s = self.checkpoint_s.max(secs);
        }
    }

    /// Sets the factor applied to noted checkpoint durations (default
    /// [`DEFAULT_CHECKPOINT_SAFETY`]); values below 1 or not finite are ignored.
    pub fn set_checkpoint_safety(&mut self, factor: f64) {
        if factor.is_finite() && factor >= 1.0 {
            self.checkpoint_safety = factor;
        }
    }

    /// The lead time actually used: the configured lead, raised to the noted
    /// checkpoint duration times the safety factor plus one interval.
    pub fn effective_lead(&self) -> f64 {
        let lead = self.config.lead_s;
        if self.checkpoint_s > 0.0 {
            let interval = self.config.interval_s.max(0.0);
            lead.max(self.checkpoint_s * self.checkpoint_safety + interval)
        } else {
            lead
        }
    }

    /// The step size learned so far (0 until two steps were seen). Every kind but
    /// runtime learns it; only kinds that grow in steps alert on it.
    pub fn learned_step(&self) -> u64 {
        let s = self.steps.learned();
        if s > 0.0 { s as u64 } else { 0 }
    }

    /// How many steps have been learned so far.
    pub fn steps_seen(&self) -> u32 {
        self.steps.count()
    }

    /// Whether the next alert condition will start an episode (false during one).
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Takes one sample (time in seconds, usage and limit in the resource's unit) and decides.
    ///
    /// A limit of 0 or `u64::MAX` means unlimited: the trend is still tracked
    /// but nothing is predicted or alerted. Samples whose time goes backwards
    /// count in the current bucket; gaps leave empty buckets that the fit skips.
    pub fn observe(&mut self, t_s: f64, used: u64, limit: u64) -> Observation {
        let limited = limit != 0 && limit != u64::MAX;
        let headroom = limit.saturating_sub(used);
        let forecast = if self.kind == ResourceKind::Runtime {
            runtime_forecast(headroom, limited)
        } else {
            self.trend_forecast(t_s, used, limit, limited, headroom)
        };
        let decision = if limited {
            self.decide(t_s, &forecast, used, limit)
        } else {
            Decision::Quiet
        };
        Observation { forecast, decision }
    }

    #[inline]
    fn trend_forecast(
        &mut self,
        t_s: f64,
        used: u64,
        limit: u64,
        limited: bool,
        headroom: u64,
    ) -> Forecast {
        let usedf = used as f64;
        let limitf = if limited { limit as f64 } else { f64::MAX };
        if self.env.push(t_s, usedf) {
            self.env.refit(limitf);
            // Every kind learns its steps (memory that grows per epoch is a staircase
            // too); only kinds that grow in steps alert on `NextStep`.
            self.steps.on_close(&self.env, limitf);
        }
        let mut forecast = Forecast {
            seconds_left: None,
            rate_per_s: self.env.short_slope.min(0.0),
            confidence: 0.0,
            headroom,
        };
        if let Some(tr) = self.env.trend {
            forecast.rate_per_s = tr.slope;
            forecast.confidence = tr.confidence;
            if limited {
                let level = usedf.max(tr.level_at(t_s));
                forecast.seconds_left = Some((limitf - level).max(0.0) / tr.slope);
            }
        }
        if limited
            && let Some((left, rate, steps)) = self.steps.forecast(
                t_s,
                usedf,
                headroom as f64,
                STEP_CONFIRM_BUCKETS * self.env.width(),
            )
            && (forecast.seconds_left.is_none_or(|s| left < s)
                || (steps >= 3
                    && self
                        .env
                        .trend
                        .is_some_and(|tr| tr.slope <= STEP_EXPLAINS * rate)))
        {
            // A regular staircase: the step that will not fit comes sooner than the trend
            // says, or (three steps or more) the trend is nothing but the steps (the
            // envelope's upper line runs through the corners of the stairs and is a whole
            // step too pessimistic).
            forecast.seconds_left = Some(left);
            forecast.rate_per_s = rate;
            forecast.confidence = STEP_CONFIDENCE;
        }
        if limited && headroom == 0 {
            forecast.seconds_left = Some(0.0);
        }
        forecast
    }

    fn decide(&mut self, t_s: f64, fc: &Forecast, used: u64, limit: u64) -> Decision {
        let lead = self.effective_lead();
        let limitf = limit as f64;
        let headroom = limit.saturating_sub(used) as f64;
        let floor = limitf * self.config.floor_percent.max(0.0) / 100.0;
        let has_trend = self.kind == ResourceKind::Runtime
            || self.env.trend.is_some()
            || fc.confidence == STEP_CONFIDENCE;
        let step = if self.kind.grows_in_steps() {
            self.steps.learned()
        } else {
            0.0
        };
        // One interval of margin: by the next sample it would already be under the lead.
        let trigger = lead + self.config.interval_s.max(0.0);
        if self.armed {
            let reason = if has_trend && fc.seconds_left.is_some_and(|s| s < trigger) {
                Some(AlertReason::Trend)
            } else if step > 0.0 && headroom < step {
                Some(AlertReason::NextStep)
            } else if headroom < floor && self.kind != ResourceKind::Runtime {
                Some(AlertReason::HeadroomFloor)
            } else {
                None
            };
            match reason {
                Some(r) => {
                    self.armed = false;
                    Decision::Alert(r)
                }
                None => Decision::Quiet,
            }
        } else {
            let floor = if self.kind == ResourceKind::Runtime {
                0.0
            } else {
                floor
            };
            let clear = headroom >= 2.0 * floor
                && fc.seconds_left.is_none_or(|s| s > 2.0 * lead)
                && (step <= 0.0 || headroom >= 2.0 * step);
            // The all-clear must hold for a whole lead time: a staircase or a noisy
            // trend that flickers out of the alert zone for a moment does not re-arm.
            match (clear, self.clear_since) {
                (false, _) => {
                    self.clear_since = None;
                    Decision::Quiet
                }
                (true, None) => {
                    self.clear_since = Some(t_s);
                    Decision::Quiet
                }
                (true, Some(since)) if t_s - since >= lead => {
                    self.armed = true;
                    self.clear_since = None;
                    Decision::Rearm
                }
                (true, Some(_)) => Decision::Quiet,
            }
        }
    }
}

fn runtime_forecast(headroom: u64, limited: bool) -> Forecast {
    // Runtime is wall time in milliseconds: it grows by exactly 1000 per second.
    Forecast {
        seconds_left: limited.then_some(headroom as f64 / 1000.0),
        rate_per_s: 1000.0,
        confidence: 1.0,
        headroom,
    }
}

#[cfg(test)]
mod tests;
