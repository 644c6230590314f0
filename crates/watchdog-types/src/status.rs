//! What a running watchdog tells outside readers about its targets: the `watchdog status`
//! command and the Prometheus endpoint both render a [`WatchStatus`], which the watch loop
//! publishes after each tick and readers take on their own schedule.

use serde::{Deserialize, Serialize};

use crate::{ResourceKind, Unit};

/// Everything watched by one watchdog (single-run or daemon) at one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchStatus {
    /// The watchdog's own PID.
    pub watchdog_pid: u32,
    /// `"single"` (`--pid`, `run`) or `"daemon"`.
    pub mode: String,
    /// Unix time the status was taken, seconds.
    pub time_unix: f64,
    /// Sampling period, seconds.
    pub interval_s: f64,
    /// Every target being watched.
    pub targets: Vec<TargetStatus>,
}

/// One watched run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetStatus {
    /// The run's root process.
    pub pid: u32,
    /// Its owner's uid (decides who may see it).
    pub uid: u32,
    /// Its owner's name, or the uid as text when it has none.
    pub user: String,
    /// Its command line, clipped.
    pub command: String,
    /// The daemon rule that matched it (`None` in single-run mode).
    pub rule: Option<String>,
    /// The SLURM job its cgroup lies under (the service; from the cgroup path alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<u64>,
    /// That job's step (`batch`, `0`, ...), when the path names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_step: Option<String>,
    /// Unix time the watch began, seconds.
    pub since_unix: f64,
    /// Lead in force (raised by slow checkpoints), seconds.
    pub lead_s: f64,
    /// Where its checkpoint requests are written.
    pub request_file: String,
    /// Alerts sent to it so far.
    pub alerts_sent: u64,
    /// Checkpoints it acknowledged so far.
    pub checkpoints_acknowledged: u64,
    /// Sum of the acknowledged checkpoints' durations (alert to acknowledgment), seconds.
    pub checkpoint_seconds_total: f64,
    /// Samples the sampler dropped because a reader fell behind.
    pub samples_dropped: u64,
    /// Each sampled resource.
    pub resources: Vec<ResourceStatus>,
}

/// One resource of one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceStatus {
    /// Its name (`cgroup_memory`, `disk:/data`, `gpu0`).
    pub name: String,
    /// Its kind.
    pub kind: ResourceKind,
    /// Its unit.
    pub unit: Unit,
    /// Last reading.
    pub used: u64,
    /// Its limit; `None` when unlimited.
    pub limit: Option<u64>,
    /// Growth the prediction rests on, units per second.
    pub trend_per_s: f64,
    /// Predicted seconds to exhaustion; `None` when the trend does not reach the limit.
    pub seconds_left: Option<f64>,
    /// Alerts this resource raised.
    pub alerts: u64,
    /// Samples taken of it so far (absent from older watchdogs' status).
    #[serde(default)]
    pub samples: u64,
    /// The rate it is sampled at now, samples per second: 1 / `interval` while it
    /// approaches its limit, down to 1 / `max_interval` while far (absent from older
    /// watchdogs' status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_rate_hz: Option<f64>,
}

impl ResourceStatus {
    /// A reading of `used` against `limit` (`None`: unlimited), with no trend, prediction or
    /// alert yet.
    pub fn reading(
        name: &str,
        kind: ResourceKind,
        used: u64,
        limit: Option<u64>,
    ) -> ResourceStatus {
        ResourceStatus {
            name: name.to_string(),
            kind,
            unit: kind.unit(),
            used,
            limit,
            trend_per_s: 0.0,
            seconds_left: None,
            alerts: 0,
            samples: 0,
            sample_rate_hz: None,
        }
    }
}
