//! `watchdog-predictor`: time to exhaustion and when to alert, pure functions of samples.
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
//! Traces are parsed by `watchdog_formats::trace`, and `watchdog_engine::replay` runs
//! this predictor over them.
#![deny(missing_docs)]

mod envelope;
pub mod sample_rate;
pub mod step_peak;
mod steps;

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

/// Headroom, as a fraction of the limit, that always counts as "well away from the limit"
/// at the least when an episode ends by a drop (so a floor of 0 does not make any fall count).
const MIN_AWAY_FRACTION: f64 = 0.1;

/// Buckets looked at for usage's own swing when telling a drop from a saw-tooth's trough.
const SWING_BUCKETS: usize = 16;

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
    /// The alert that started the current episode (while not armed).
    episode: Option<EpisodeStart>,
    /// Since when the calm condition has held (see [`Self::decide`]).
    calm_since: Option<f64>,
    /// Set when an episode that the floor started ended by a drop: the floor stays quiet
    /// until calm has held for a lead (a saw-tooth whose every peak enters the floor is
    /// one episode, not one per tooth).
    floor_needs_calm: bool,
    /// After a drop, the history restarts at the lowest sample of the fall: until
    /// `fall_until`, a sample below `fall_low` restarts it again.
    fall_low: f64,
    fall_until: f64,
    fall_ceiling: Option<f64>,
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
            episode: None,
            calm_since: None,
            floor_needs_calm: false,
            fall_low: f64::INFINITY,
            fall_until: f64::NEG_INFINITY,
            fall_ceiling: None,
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
        self.note_acknowledged();
        if secs.is_finite() && secs >= 0.0 {
            self.checkpoint_s = self.checkpoint_s.max(secs);
        }
    }

    /// Records that the run acknowledged a checkpoint request. When the episode then ends
    /// by a drop, the history restarts there: what follows is a new run of the workload
    /// (the cell run again, the next job), judged as on a fresh start. Without an
    /// acknowledgment a drop keeps the history, whose old peaks tell a slow saw-tooth's
    /// next tooth from a new leak.
    ///
    /// An acknowledgment read just after the drop (the run saved, freed, and the watchdog
    /// saw the drop before the acknowledgment file) lifts the ceiling the drop kept.
    pub fn note_acknowledged(&mut self) {
        match &mut self.episode {
            Some(episode) => episode.acknowledged = true,
            None => {
                self.env.lift_ceiling();
                self.fall_ceiling = None;
            }
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

    /// The headroom floor for `limit`, in the resource's unit: `floor_percent` of it (none
    /// for runtime).
    pub fn floor(&self, limit: u64) -> f64 {
        if self.kind == ResourceKind::Runtime {
            0.0
        } else {
            limit as f64 * self.config.floor_percent.max(0.0) / 100.0
        }
    }

    /// The headroom under which the next sample alerts at once, for `limit`: the floor
    /// (`HeadroomFloor`), or the learned step plus the usage's jitter (`NextStep`),
    /// whichever is larger.
    pub fn alert_headroom(&self, limit: u64) -> u64 {
        let step = self.steps.learned();
        let next_step = if self.kind.grows_in_steps() && step > 0.0 {
            (step + self.steps.slack(step)).ceil() as u64
        } else {
            0
        };
        (self.floor(limit) as u64).max(next_step)
    }

    /// When the current bucket closes: the first sample from then on refits the trend, so
    /// a forecast can change there whatever the usage does. `None` before any sample.
    pub fn next_bucket_close(&self) -> Option<f64> {
        self.env.next_edge()
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
        if t_s < self.fall_until && (used as f64) < self.fall_low {
            // Still falling just after a drop ended an episode: start the history lower.
            self.restart_history(t_s, used as f64, self.fall_until - t_s, self.fall_ceiling);
        }
        let mut forecast = if self.kind == ResourceKind::Runtime {
            runtime_forecast(headroom, limited)
        } else {
            self.trend_forecast(t_s, used, limit, limited, headroom)
        };
        let decision = if limited {
            self.decide(t_s, &forecast, used, limit)
        } else {
            Decision::Quiet
        };
        if decision == Decision::Rearm && self.fall_low == used as f64 && self.fall_until > t_s {
            // The history restarted at this sample: the forecast made from the old one is gone.
            forecast.seconds_left = (limited && headroom == 0).then_some(0.0);
            forecast.rate_per_s = 0.0;
            forecast.confidence = 0.0;
        }
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

    /// The alert policy: one alert per episode.
    ///
    /// While armed, alert on the first of: a credible forecast under the lead (`Trend`),
    /// a learned step that no longer fits, or would land within the usage's jitter of the
    /// limit (`NextStep`), headroom under the floor
    /// (`HeadroomFloor`). The episode then ends in one of two ways, whichever comes first:
    ///
    /// - **a drop**: usage falls well away from the limit: the headroom is at least twice
    ///   the floor, twice the learned step and a tenth of the limit, and usage fell from
    ///   the episode's peak by at least half the headroom it alerted at (a dip of a leak
    ///   that goes on is no drop), a tenth of the limit and 1.5 times the largest swing
    ///   within a bucket (nor is a saw-tooth's trough). It re-arms
    ///   on that very sample and the history restarts there, so the forecast no longer
    ///   rests on the peak that is gone. When the run acknowledged the request, a leak that
    ///   follows is judged exactly as on a fresh start, however soon it comes; without an
    ///   acknowledgment the old peak is kept as a ceiling that growth must pass to count,
    ///   so the next tooth of a slow saw-tooth does not alert again;
    /// - **calm**: headroom above twice the floor and twice the step, and no forecast under
    ///   twice the lead, held for a whole lead (a leak that stopped short of the limit,
    ///   then resumes).
    ///
    /// A staircase that pauses near the limit does neither: it neither falls nor is calm
    /// long enough, and is one episode.
    fn decide(&mut self, t_s: f64, fc: &Forecast, used: u64, limit: u64) -> Decision {
        let lead = self.effective_lead();
        let limitf = limit as f64;
        let usedf = used as f64;
        let headroom = limit.saturating_sub(used) as f64;
        let runtime = self.kind == ResourceKind::Runtime;
        let floor = self.floor(limit);
        let has_trend = runtime || self.env.trend.is_some() || fc.confidence == STEP_CONFIDENCE;
        let step = if self.kind.grows_in_steps() {
            self.steps.learned()
        } else {
            0.0
        };
        let calm_now = headroom >= 2.0 * floor
            && fc.seconds_left.is_none_or(|s| s > 2.0 * lead)
            && (step <= 0.0 || headroom >= 2.0 * step);
        self.calm_since = match (calm_now, self.calm_since) {
            (false, _) => None,
            (true, None) => Some(t_s),
            (true, since) => since,
        };
        let calm_held = self.calm_since.is_some_and(|since| t_s - since >= lead);
        if self.armed {
            if calm_held {
                self.floor_needs_calm = false;
            }
            // One interval of margin: by the next sample it would already be under the lead.
            let trigger = lead + self.config.interval_s.max(0.0);
            let reason = if has_trend && fc.seconds_left.is_some_and(|s| s < trigger) {
                Some(AlertReason::Trend)
            } else if step > 0.0 && headroom < step + self.steps.slack(step) {
                Some(AlertReason::NextStep)
            } else if headroom < floor && !self.floor_needs_calm {
                Some(AlertReason::HeadroomFloor)
            } else {
                None
            };
            let Some(reason) = reason else {
                return Decision::Quiet;
            };
            self.armed = false;
            self.calm_since = None;
            self.episode = Some(EpisodeStart {
                peak: usedf,
                headroom,
                reason,
                acknowledged: false,
            });
            return Decision::Alert(reason);
        }
        let episode = self.episode.get_or_insert(EpisodeStart {
            peak: usedf,
            headroom,
            reason: AlertReason::Trend,
            acknowledged: false,
        });
        episode.peak = episode.peak.max(usedf);
        let episode = *episode;
        let away = (2.0 * floor)
            .max(2.0 * step)
            .max(MIN_AWAY_FRACTION * limitf);
        let drop = (0.5 * episode.headroom)
            .max(MIN_AWAY_FRACTION * limitf)
            .max(1.5 * self.env.largest_span(SWING_BUCKETS));
        if !runtime && headroom >= away && episode.peak - usedf >= drop {
            self.rearm();
            self.floor_needs_calm = episode.reason == AlertReason::HeadroomFloor;
            let ceiling = (!episode.acknowledged).then_some(episode.peak);
            self.restart_history(t_s, usedf, lead, ceiling);
            return Decision::Rearm;
        }
        if calm_held {
            self.rearm();
            self.floor_needs_calm = false;
            return Decision::Rearm;
        }
        Decision::Quiet
    }

    fn rearm(&mut self) {
        self.armed = true;
        self.episode = None;
        self.calm_since = None;
    }

    /// Forgets everything before this sample (after a drop): the trend windows, the
    /// learned steps. For one lead after, a lower sample restarts it again, so a fall
    /// spread over a few samples starts the history at its bottom.
    fn restart_history(&mut self, t_s: f64, used: f64, lead: f64, ceiling: Option<f64>) {
        self.env.restart(t_s, used, ceiling);
        self.steps = StepLearner::default();
        self.fall_low = used;
        self.fall_until = t_s + lead;
        self.fall_ceiling = ceiling;
    }
}

/// What the alert that started an episode saw.
#[derive(Debug, Clone, Copy, PartialEq)]
struct EpisodeStart {
    /// The highest usage since the alert.
    peak: f64,
    headroom: f64,
    reason: AlertReason,
    /// Whether the run acknowledged a checkpoint since the alert.
    acknowledged: bool,
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
