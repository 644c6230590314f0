//! Time to exhaustion, and when to alert, as pure functions of the samples.
//!
//! No I/O and no clock: the caller passes each sample's time. One
//! [`ResourcePredictor`] per resource keeps the recent history it needs and
//! returns, for every sample, a [`Forecast`] and a [`Decision`].
#![deny(missing_docs)]

use watchdog_types::{AlertReason, Forecast, ResourceKind};

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
#[derive(Debug, Clone)]
pub struct ResourcePredictor {
    kind: ResourceKind,
    config: PredictorConfig,
}

impl ResourcePredictor {
    /// A predictor for one resource of this kind.
    pub fn new(kind: ResourceKind, config: PredictorConfig) -> Self {
        ResourcePredictor { kind, config }
    }

    /// Raises (or lowers) the lead time, e.g. after a measured slow checkpoint.
    pub fn set_lead(&mut self, lead_s: f64) {
        self.config.lead_s = lead_s;
    }

    /// Takes one sample (time in seconds, usage and limit in the resource's unit) and decides.
    pub fn observe(&mut self, t_s: f64, used: u64, limit: u64) -> Observation {
        let _ = (t_s, self.kind);
        let headroom = limit.saturating_sub(used);
        Observation {
            forecast: Forecast {
                seconds_left: None,
                rate_per_s: 0.0,
                confidence: 0.0,
                headroom,
            },
            decision: Decision::Quiet,
        }
    }
}
