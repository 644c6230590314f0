//! `watchdog-engine`: every decision about a run, pure: the engine the loop turns each tick.
//!
//! The watch engine: everything that decides, for one target, as a pure step function in
//! earlyoom's style. Samples and the clock go in; [`Action`]s come out (write the request
//! file and signal, run the hook, notify, emit an event, log, flush the recording). It
//! owns each resource's predictor, the choice among resources, episodes and re-arming,
//! the lead raised from acknowledgments, peaks, the summary and the verdict. No I/O: the
//! binary reads the sources, carries out the actions and reports back what happened
//! ([`Engine::alerted`]), so a live watch, `replay` and the service run the same code.
//!
//! One tick, as the binary drives it:
//!
//! 1. [`Engine::observe`] for every sample of the tick (limit changes, re-arms and
//!    alert decisions; alerts wait until the tick is complete);
//! 2. [`Engine::decide`]: the most urgent of this tick's alerts, if any, as an
//!    [`AlertPlan`] (one request and one signal per tick, however many resources);
//! 3. the binary writes the request file and signals the tree, then calls
//!    [`Engine::alerted`] with what it did, which returns the events, log lines, hook,
//!    notification and recording flush that follow;
//! 4. [`Engine::acknowledged`] when the run acknowledges a request.
#![deny(missing_docs)]

pub mod replay;
pub mod step_peaks;
pub mod text;
pub mod verdict;

pub use step_peaks::{Acknowledgment, GpuUse, StepBatch};
pub use watchdog_types::request::{Delivery, Request, StepPeak};

use std::time::Duration;

use watchdog_predictor::sample_rate::{self, NextSample, RateInput, SampleRate};
use watchdog_predictor::{Decision, Observation, PredictorConfig, ResourcePredictor};
use watchdog_types::status::ResourceStatus;
use watchdog_types::units::format_duration_s;
use watchdog_types::{
    AlertReason, EventBody, Forecast, Resource, ResourceId, ResourceKind, Sample, Unit,
};

use text::{alert_sentence, format_amount};
use verdict::{ExitFacts, ResourceEnd, Verdict};

/// How the target ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetExit {
    /// Exited with this status code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Gone, but not our child, so its status is not ours to read.
    Unknown,
}

impl TargetExit {
    /// The status `watchdog run` exits with: the code, or 128+N for signal N.
    pub fn shell_status(self) -> u8 {
        match self {
            TargetExit::Code(c) => (c & 0xff) as u8,
            TargetExit::Signal(s) => (128 + s).clamp(0, 255) as u8,
            TargetExit::Unknown => 0,
        }
    }

    /// `(code, signal)` as the `exit` event writes them.
    pub fn code_and_signal(self) -> (Option<i32>, Option<i32>) {
        match self {
            TargetExit::Code(c) => (Some(c), None),
            TargetExit::Signal(s) => (None, Some(s)),
            TargetExit::Unknown => (None, None),
        }
    }
}

/// The settings the engine decides with (the binary's flags and config, resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// Alert this many seconds before a resource runs out.
    pub lead_s: f64,
    /// Sampling interval, seconds.
    pub interval_s: f64,
    /// Alert whatever the trend when headroom is below this percentage of the limit.
    pub floor_percent: f64,
    /// The checkpoint signal (for messages and the verdict).
    pub signal: i32,
    /// Predict and log, but send and write nothing.
    pub dry_run: bool,
    /// Whether an `--on-alert` hook is configured.
    pub hook: bool,
    /// The fastest each kind of resource can fill (`fill_rate`): at rest a resource is read
    /// no later than its headroom to the alert line would last at that rate.
    pub fill_rate: FillRates,
}

/// The fastest each kind of resource can fill, bytes a second (the `[fill_rate]` table).
/// The defaults and how they were measured are in `docs/prediction.md` ("Fill rates").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FillRates {
    /// Host memory (and swap, and a tree's RSS): a process faulting in new pages.
    pub host_memory: f64,
    /// A memory cgroup's usage: the same, charged to the cgroup.
    pub cgroup_memory: f64,
    /// A filesystem's bytes: a checkpoint written through the page cache.
    pub disk: f64,
    /// One GPU's memory: data copied from the host (an allocation on the device is
    /// instant, and no rate of reading sees it coming).
    pub gpu_memory: f64,
}

impl FillRates {
    /// The defaults: host and cgroup memory 6 GiB/s, disk 8 GiB/s, GPU memory 64 GB/s.
    pub const DEFAULT: FillRates = FillRates {
        host_memory: (6u64 << 30) as f64,
        cgroup_memory: (6u64 << 30) as f64,
        disk: (8u64 << 30) as f64,
        gpu_memory: 64e9,
    };

    /// The fastest `kind`'s usage can rise, in its unit a second; 0 (no bound) for the
    /// kinds without one (the page cache, notices: never alerted on). The runtime's clock
    /// fills at 1,000 ms a second; inodes at [`INODES_FILL_RATE`].
    pub fn of(&self, kind: ResourceKind) -> f64 {
        match kind {
            ResourceKind::HostMemory | ResourceKind::Swap | ResourceKind::TreeMemory => {
                self.host_memory
            }
            ResourceKind::CgroupMemory => self.cgroup_memory,
            ResourceKind::DiskBytes => self.disk,
            ResourceKind::GpuMemory => self.gpu_memory,
            ResourceKind::Runtime => 1000.0,
            ResourceKind::DiskInodes => INODES_FILL_RATE,
            ResourceKind::CgroupCache | ResourceKind::Notice => 0.0,
        }
    }
}

/// The fastest a filesystem's inodes fill, files a second: one writer creating empty files
/// made 22,800 a second on a tmpfs here and 29,000 on ext4 (docs/prediction.md, "Fill
/// rates"), about seven times that for several writers.
pub const INODES_FILL_RATE: f64 = 200_000.0;

impl Default for FillRates {
    fn default() -> Self {
        FillRates::DEFAULT
    }
}

impl Default for EngineSettings {
    /// The defaults of a watch: the predictor's lead, interval and floor
    /// ([`PredictorConfig::default`], the one place they are written), SIGUSR1.
    fn default() -> Self {
        let p = PredictorConfig::default();
        EngineSettings {
            lead_s: p.lead_s,
            interval_s: p.interval_s,
            floor_percent: p.floor_percent,
            signal: libc::SIGUSR1,
            dry_run: false,
            hook: false,
            fill_rate: FillRates::DEFAULT,
        }
    }
}

impl EngineSettings {
    /// The predictor configuration these settings give.
    pub fn predictor(&self) -> PredictorConfig {
        PredictorConfig {
            lead_s: self.lead_s,
            interval_s: self.interval_s,
            floor_percent: self.floor_percent,
        }
    }
}

/// What the closing summary says besides what the engine knows.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// How the target ended.
    pub exit: TargetExit,
    /// Why.
    pub verdict: &'a Verdict,
    /// The target's PID.
    pub pid: u32,
    /// Its name.
    pub name: &'a str,
    /// How long the watch lasted, seconds.
    pub elapsed_s: f64,
    /// Said right after the duration (the processes the run left behind).
    pub after_duration: &'a str,
    /// Said at the end (the sampling figures, where the recording is).
    pub tail: &'a str,
}

/// How important a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Normal operation.
    Info,
    /// Something the user should look at.
    Warn,
}

/// What the binary is to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Log a line.
    Log(Level, String),
    /// Append this event to the events file and the recording.
    Emit(EventBody),
    /// Run the `--on-alert` hook for the request just made.
    RunHook,
    /// Show a desktop notification.
    Notify {
        /// Its title.
        title: String,
        /// Its text.
        body: String,
    },
    /// Write the flight recording now (in the background), for this reason.
    FlushRecording(&'static str),
}

/// This tick's alerts, the most urgent first, and the request to make for it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertPlan {
    /// The request to make: what ran out (the request file adds how it was sent, see
    /// [`watchdog_types::request::SentRequest`]).
    pub request: Request,
    alerts: Vec<Pending>,
}

/// An alert decided this tick.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pending {
    id: usize,
    sample: Sample,
    forecast: Forecast,
    reason: AlertReason,
    /// The step-peak alert behind it, for a reason from the run's step reports.
    step: Option<watchdog_predictor::step_peak::StepPeakAlert>,
}

/// What the engine knows about one resource.
#[derive(Debug, Clone)]
struct ResourceState {
    resource: Resource,
    predictor: ResourcePredictor,
    last: Option<Sample>,
    forecast: Forecast,
    peak: u64,
    peak_limit: u64,
    /// How often it is to be sampled (see [`Engine::next_due`]).
    rate: SampleRate,
    /// What the rate policy said after the last sample.
    next: Option<NextSample>,
    /// Whether a kernel source wakes the loop when its usage crosses a level.
    kernel_wake: bool,
    /// Samples taken, and how many of them came at `interval` (not slow).
    samples: u64,
    fast_samples: u64,
}

/// One alert sent, for the summary.
#[derive(Debug, Clone, PartialEq)]
struct AlertRecord {
    resource: String,
    t_s: f64,
    signalled: usize,
}

/// The decisions for one target.
#[derive(Debug, Clone)]
pub struct Engine {
    settings: EngineSettings,
    states: Vec<ResourceState>,
    pending: Vec<Pending>,
    alerts: Vec<AlertRecord>,
    seq: u64,
    lead_s: f64,
    last_alert_unix: Option<f64>,
    signalled_target: Option<i32>,
    acks: u64,
    checkpoint_seconds: f64,
    /// One step-peak predictor per GPU and writing process (see `step_peaks`).
    step_peaks: Vec<step_peaks::StepPeakState>,
    /// The longest requested save measured, seconds (0 before any).
    save_s: f64,
    /// The CUDA out-of-memory error the run reported, for the verdict.
    cuda_oom: Option<verdict::CudaOom>,
    /// The longest interval between two samples of a far resource, as asked (clamped
    /// when used, see [`Engine::max_interval_s`]).
    max_interval_s: f64,
    /// The time of the latest sample, seconds since the watch began.
    last_t_s: f64,
}

impl Engine {
    /// An engine for these resources (indexed by their [`watchdog_types::ResourceId`]).
    pub fn new(resources: &[Resource], settings: EngineSettings) -> Engine {
        let mut engine = Engine {
            lead_s: settings.lead_s,
            settings,
            states: Vec::new(),
            pending: Vec::new(),
            alerts: Vec::new(),
            seq: 0,
            last_alert_unix: None,
            signalled_target: None,
            acks: 0,
            checkpoint_seconds: 0.0,
            step_peaks: Vec::new(),
            save_s: 0.0,
            cuda_oom: None,
            max_interval_s: watchdog_types::defaults::DEFAULT_MAX_INTERVAL_S,
            last_t_s: 0.0,
        };
        for r in resources {
            engine.add_resource(r.clone());
        }
        engine
    }

    /// Watches one more resource; its samples carry the next [`watchdog_types::ResourceId`]
    /// (a trace names its resources as it goes).
    pub fn add_resource(&mut self, resource: Resource) {
        let predictor = ResourcePredictor::new(resource.kind, self.settings.predictor());
        self.states.push(ResourceState {
            resource,
            predictor,
            last: None,
            forecast: Forecast::default(),
            peak: 0,
            peak_limit: 0,
            rate: SampleRate::new(),
            next: None,
            kernel_wake: false,
            samples: 0,
            fast_samples: 0,
        });
    }

    /// Says where resource `id`'s figures and limit now come from: the `source` of the next
    /// `limit` event (a scheduler moved the end, say).
    pub fn describe(&mut self, id: ResourceId, source: String) {
        if let Some(st) = self.states.get_mut(id.0 as usize) {
            st.resource.source = source;
        }
    }

    /// Sets the longest interval between two samples of a far resource (`max_interval`);
    /// it is clamped when used ([`max_interval_s`](Self::max_interval_s)).
    pub fn set_max_interval(&mut self, max_interval_s: f64) {
        self.max_interval_s = max_interval_s;
    }

    /// The longest interval in force, seconds: `max_interval` clamped to `[interval,
    /// bucket / 4]` so every bucket of the trend windows gets four samples.
    pub fn max_interval_s(&self) -> f64 {
        let p = self.settings.predictor();
        sample_rate::clamp_max_interval(
            p.interval_s,
            self.max_interval_s,
            p.lead_s,
            p.bucket_width_s(),
        )
    }

    /// Says whether a kernel source wakes the loop when resource `id`'s usage crosses a
    /// level armed for it ([`wake_at`](Self::wake_at)); with one, the resource may sleep
    /// closer to its floor. Takes effect from its next sample.
    pub fn set_kernel_wake(&mut self, id: ResourceId, covered: bool) {
        if let Some(st) = self.states.get_mut(id.0 as usize) {
            st.kernel_wake = covered;
        }
    }

    /// How long after its last sample resource `id` is to be sampled again: `interval`
    /// while it approaches its limit, up to [`max_interval_s`](Self::max_interval_s) while
    /// it is far; zero before its first sample (and for an unknown resource).
    pub fn next_due(&self, id: ResourceId) -> Duration {
        self.states
            .get(id.0 as usize)
            .and_then(|st| st.next)
            .map_or(Duration::ZERO, |n| {
                Duration::from_secs_f64(n.after_s.max(0.0))
            })
    }

    /// When resource `id` is due, on the samples' clock (seconds): its last sample's time
    /// plus [`next_due`](Self::next_due); `None` before its first sample.
    pub fn due_at_s(&self, id: ResourceId) -> Option<f64> {
        let st = self.states.get(id.0 as usize)?;
        Some(st.last?.t_ns as f64 / 1e9 + st.next?.after_s)
    }

    /// For a resource with a kernel wake: the usage at which the kernel should wake the
    /// loop to sample it (re-armed after each sample); `None` without one.
    pub fn wake_at(&self, id: ResourceId) -> Option<u64> {
        self.states.get(id.0 as usize)?.next?.wake_at
    }

    /// The usage from which resource `id`'s next sample alerts at once by its headroom
    /// (under the floor, or under the largest step learned and the usage's jitter), as of
    /// its last sample's limit; `None` before a sample or without a limit.
    pub fn alert_level(&self, id: ResourceId) -> Option<u64> {
        let st = self.states.get(id.0 as usize)?;
        let last = st.last.as_ref().filter(|s| s.is_limited())?;
        let margin = st.predictor.alert_headroom(last.limit);
        Some(last.limit.saturating_sub(margin).saturating_add(1))
    }

    /// Whether resource `id` is sampled slowly now (far from its limit).
    pub fn is_slow(&self, id: ResourceId) -> bool {
        self.states
            .get(id.0 as usize)
            .and_then(|st| st.next)
            .is_some_and(|n| n.slow)
    }

    /// Every resource watched, in the order of their ids.
    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.states.iter().map(|st| &st.resource)
    }

    /// How each sampled resource was sampled: `(name, samples, samples at interval)`.
    pub fn sample_counts(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        self.states
            .iter()
            .filter(|st| st.samples > 0)
            .map(|st| (st.resource.name.as_str(), st.samples, st.fast_samples))
    }

    /// The settings in force.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// The lead in force (raised by slow checkpoints), seconds.
    pub fn lead_s(&self) -> f64 {
        self.lead_s
    }

    /// The sequence number of the last request made (0 before any).
    pub fn last_request(&self) -> u64 {
        self.seq
    }

    /// How many alerts were sent.
    pub fn alerts_sent(&self) -> usize {
        self.alerts.len()
    }

    /// Takes one sample: announces a new or changed limit, runs the predictor, and
    /// queues an alert for [`decide`](Self::decide). Returns the predictor's observation
    /// (none for an unknown or unlimited resource).
    pub fn observe(&mut self, s: &Sample, out: &mut Vec<Action>) -> Option<Observation> {
        let (lead_s, max_interval_s) = (self.lead_s, self.max_interval_s());
        let fill_rate = self.settings.fill_rate;
        self.last_t_s = self.last_t_s.max(s.t_ns as f64 / 1e9);
        let st = self.states.get_mut(s.resource.0 as usize)?;
        st.samples += 1;
        if !st.next.is_some_and(|n| n.slow) {
            st.fast_samples += 1;
        }
        if s.used >= st.peak {
            st.peak = s.used;
            st.peak_limit = s.limit;
        }
        let previous = st.last.replace(*s);
        if previous.map(|p| p.limit) != Some(s.limit) {
            announce_limit(&st.resource, s.limit, previous.is_none(), out);
        }
        if !s.is_limited() {
            let input = rate_input(st, s, None, lead_s, max_interval_s, fill_rate);
            st.next = Some(st.rate.update(&input));
            return None;
        }
        let obs = st.predictor.observe(s.t_ns as f64 / 1e9, s.used, s.limit);
        st.forecast = obs.forecast;
        let left = obs.forecast.seconds_left;
        let input = rate_input(st, s, left, lead_s, max_interval_s, fill_rate);
        st.next = Some(st.rate.update(&input));
        match obs.decision {
            Decision::Quiet => {}
            Decision::Alert(reason) => self.pending.push(Pending {
                id: s.resource.0 as usize,
                sample: *s,
                forecast: obs.forecast,
                reason,
                step: None,
            }),
            Decision::Rearm => {
                let name = st.resource.name.clone();
                out.push(Action::Log(
                    Level::Info,
                    format!("{name} is back to normal; the next crossing alerts again"),
                ));
                out.push(Action::Emit(EventBody::Rearm { resource: name }));
            }
        }
        Some(obs)
    }

    /// This tick's alerts as one plan, the most urgent (fewest seconds left) first; `None`
    /// when nothing alerted. The request's sequence number is taken now.
    pub fn decide(&mut self) -> Option<AlertPlan> {
        if self.pending.is_empty() {
            return None;
        }
        let mut alerts = std::mem::take(&mut self.pending);
        alerts.sort_by(|a, b| {
            let left = |p: &Pending| p.forecast.seconds_left.unwrap_or(0.0);
            left(a).total_cmp(&left(b))
        });
        let request = self.request_of(alerts.first()?, self.seq + 1)?;
        self.seq = request.seq;
        Some(AlertPlan { request, alerts })
    }

    /// The request an alert makes, numbered `seq`; `None` for an unknown resource.
    fn request_of(&self, p: &Pending, seq: u64) -> Option<Request> {
        let st = self.states.get(p.id)?;
        Some(Request {
            seq,
            resource: st.resource.name.clone(),
            kind: st.resource.kind,
            reason: p.reason,
            used: p.sample.used,
            limit: p.sample.limit,
            predicted_s: p.forecast.seconds_left,
            step_peak: p.step.map(|a| StepPeak {
                phase: a.phase,
                step: a.step,
                predicted_peak: a.predicted_peak,
            }),
            deadline_unix: None,
        })
    }

    /// An announced end at `deadline_unix` (SIGTERM with its grace, a provider's notice) as
    /// a request of its own, numbered next: `resource` and `kind` `notice`, `used` and
    /// `limit` 0, the seconds left from `now_unix` as `predicted_s`. Delivered like an
    /// alert's plan; [`alerted`](Self::alerted) counts it among the alerts.
    pub fn notice(&mut self, reason: AlertReason, deadline_unix: f64, now_unix: f64) -> AlertPlan {
        self.seq += 1;
        AlertPlan {
            request: Request {
                seq: self.seq,
                resource: ResourceKind::Notice.as_str().to_string(),
                kind: ResourceKind::Notice,
                reason,
                used: 0,
                limit: 0,
                predicted_s: Some((deadline_unix - now_unix).max(0.0)),
                step_peak: None,
                deadline_unix: Some(deadline_unix),
            },
            alerts: Vec::new(),
        }
    }

    /// Drops this tick's alerts unacted (the target is gone).
    pub fn discard_pending(&mut self) {
        self.pending.clear();
    }

    /// Records what was done about a plan at `now_unix` (seconds since the epoch) and
    /// returns what follows: the hook, the notification, one log line and one event per
    /// alert, and a flush of the recording.
    pub fn alerted(&mut self, plan: AlertPlan, delivery: &Delivery, now_unix: f64) -> Vec<Action> {
        let mut out = Vec::new();
        let dry_run = self.settings.dry_run;
        let signal = self.settings.signal;
        if delivery.target_signalled {
            self.signalled_target = Some(signal);
        }
        if !dry_run && self.settings.hook {
            out.push(Action::RunHook);
        }
        if let Some(first) = plan.alerts.first()
            && let Some(st) = self.states.get(first.id)
        {
            out.push(Action::Notify {
                title: format!("watchdog: {} running out", st.resource.name),
                body: sentence(st, first),
            });
        }
        self.last_alert_unix = Some(now_unix);
        let sent = if dry_run {
            "nothing sent".to_string()
        } else if delivery.signalled.is_empty() {
            "no process signalled".to_string()
        } else {
            format!(
                "sent {} to PID {}",
                watchdog_types::units::signal_name(signal),
                join_pids(&delivery.signalled)
            )
        };
        if plan.request.kind == ResourceKind::Notice {
            let left = plan.request.predicted_s.unwrap_or(0.0);
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "NOTICE the run {} in {}; asked to save: {sent}",
                    match plan.request.reason {
                        AlertReason::Preemption => "is preempted",
                        _ => "is being stopped (SIGTERM)",
                    },
                    format_duration_s(left)
                ),
            ));
            self.alerts.push(AlertRecord {
                resource: plan.request.resource.clone(),
                t_s: self.last_t_s,
                signalled: delivery.signalled.len(),
            });
        }
        for p in &plan.alerts {
            let Some(st) = self.states.get(p.id) else {
                continue;
            };
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "ALERT {}{}; {sent}",
                    sentence(st, p),
                    if dry_run { " (dry run)" } else { "" },
                ),
            ));
            self.alerts.push(AlertRecord {
                resource: st.resource.name.clone(),
                t_s: p.sample.t_ns as f64 / 1e9,
                signalled: delivery.signalled.len(),
            });
            if let Some(request) = self.request_of(p, plan.request.seq) {
                let event = request.alert_event(p.forecast.rate_per_s, delivery, signal, dry_run);
                out.push(Action::Emit(event));
            }
        }
        out.push(Action::FlushRecording("alert"));
        out
    }

    /// The run acknowledged request `seq` at `ack_unix`: the episodes learn it, the time
    /// since the alert is the checkpoint's duration, and the lead rises if saving takes
    /// longer than the lead allows (the predictors own that rule).
    pub fn acknowledged(&mut self, seq: u64, ack_unix: f64) -> Vec<Action> {
        let mut out = Vec::new();
        for st in &mut self.states {
            st.predictor.note_acknowledged();
        }
        let checkpoint_s = self
            .last_alert_unix
            .map(|alert| ack_unix - alert)
            .filter(|d| d.is_finite() && *d >= 0.0);
        self.acks += 1;
        self.checkpoint_seconds += checkpoint_s.unwrap_or(0.0);
        self.note_step_save(checkpoint_s);
        if let Some(d) = checkpoint_s {
            for st in &mut self.states {
                st.predictor.note_checkpoint_duration(d);
            }
            let needed = self
                .states
                .iter()
                .map(|st| st.predictor.effective_lead())
                .fold(self.settings.lead_s, f64::max);
            if needed > self.lead_s {
                self.lead_s = needed;
                out.push(Action::Log(
                    Level::Info,
                    format!(
                        "checkpoint took {}: lead raised to {}",
                        format_duration_s(d),
                        format_duration_s(needed)
                    ),
                ));
            }
        }
        out.push(Action::Log(
            Level::Info,
            format!(
                "checkpoint acknowledged (request {seq}){}",
                checkpoint_s
                    .map(|d| format!(", saved in {}", format_duration_s(d)))
                    .unwrap_or_default()
            ),
        ));
        out.push(Action::Emit(EventBody::Ack {
            checkpoint_s,
            lead_s: self.lead_s,
            seq: None,
            path: None,
            step: None,
            cause: None,
        }));
        out
    }

    /// Checkpoints acknowledged so far, and the sum of their durations in seconds.
    pub fn checkpoints(&self) -> (u64, f64) {
        (self.acks, self.checkpoint_seconds)
    }

    /// Every sampled resource's last reading, trend and time left, for status readers.
    pub fn resource_status(&self) -> Vec<ResourceStatus> {
        self.states
            .iter()
            .filter_map(|st| {
                let s = st.last?;
                let limit = s.is_limited().then_some(s.limit);
                let mut status =
                    ResourceStatus::reading(&st.resource.name, st.resource.kind, s.used, limit);
                status.trend_per_s = st.forecast.rate_per_s;
                status.seconds_left = st.forecast.seconds_left.filter(|_| limit.is_some());
                status.alerts = self
                    .alerts
                    .iter()
                    .filter(|a| a.resource == st.resource.name)
                    .count() as u64;
                status.samples = st.samples;
                let after_s = st.next.map_or(0.0, |n| n.after_s);
                let after_s = if after_s > 0.0 {
                    after_s
                } else {
                    self.settings.interval_s
                };
                status.sample_rate_hz = (after_s > 0.0).then(|| 1.0 / after_s);
                Some(status)
            })
            .collect()
    }

    /// The live status: every limited resource as `name used% [+rate/s] [time left]`, the
    /// most urgent first, so what matters survives a narrow terminal.
    pub fn status_line(&self) -> String {
        let mut rows: Vec<(f64, f64, String)> = Vec::new();
        for st in &self.states {
            let Some(s) = st.last else { continue };
            if !s.is_limited() {
                continue;
            }
            let unit = st.resource.kind.unit();
            let fraction = s.used as f64 / s.limit as f64;
            let mut part = format!("{} {:.0}%", st.resource.name, fraction * 100.0);
            if st.forecast.rate_per_s >= 1.0 && unit != Unit::Millis {
                part.push_str(&format!(
                    " +{}/s",
                    format_amount(st.forecast.rate_per_s as u64, unit)
                ));
            }
            let left = st.forecast.seconds_left.unwrap_or(f64::INFINITY);
            if left.is_finite() {
                part.push_str(&format!(" {} left", format_duration_s(left)));
            }
            rows.push((left, -fraction, part));
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        rows.into_iter()
            .map(|r| r.2)
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Each sampled resource's last figures at `now_s`, for the verdict; `recent_peak`
    /// gives the highest usage of resource `i` shortly before the exit, when known.
    pub fn resource_ends(
        &self,
        now_s: f64,
        recent_peak: impl Fn(usize) -> Option<u64>,
    ) -> Vec<ResourceEnd> {
        self.states
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                let last = st.last?;
                Some(ResourceEnd {
                    name: st.resource.name.clone(),
                    kind: st.resource.kind,
                    recent_peak: recent_peak(i).unwrap_or(last.used).max(last.used),
                    last_used: last.used,
                    limit: last.limit,
                    age_s: (now_s - last.t_ns as f64 / 1e9).max(0.0),
                })
            })
            .collect()
    }

    /// Why the run ended, from what the binary found out at the end and what the engine
    /// saw (its resources' last figures, the signal it had sent the target).
    pub fn verdict(&self, mut facts: ExitFacts) -> Verdict {
        facts.sent_signal = self.signalled_target;
        verdict::diagnose_with(&facts, self.cuda_oom.as_ref())
    }

    /// The closing summary sentence and the `exit` event.
    pub fn closing(&self, end: &Ending<'_>) -> (String, EventBody) {
        let Ending {
            exit,
            verdict,
            pid,
            name,
            elapsed_s,
            after_duration,
            tail,
        } = *end;
        let (peaks, peak_text) = self.peaks();
        let evidence =
            if verdict.evidence.is_empty() || verdict.kind == verdict::VerdictKind::Exited {
                String::new()
            } else {
                format!(" Evidence: {}.", verdict.evidence.join("; "))
            };
        let alerts = if self.alerts.is_empty() {
            "No alerts were sent.".to_string()
        } else {
            let list: Vec<String> = self
                .alerts
                .iter()
                .map(|a| {
                    format!(
                        "{} at +{} ({} signalled)",
                        a.resource,
                        format_duration_s(a.t_s),
                        a.signalled
                    )
                })
                .collect();
            format!("{} alert(s): {}.", self.alerts.len(), list.join(", "))
        };
        let text = format!(
            "watchdog: PID {pid} ({name}) {}, after {}.{after_duration}{evidence} Peak usage: {}. {alerts}{tail}",
            verdict.summary,
            format_duration_s(elapsed_s),
            if peak_text.is_empty() {
                "nothing sampled".to_string()
            } else {
                peak_text.join(", ")
            },
        );
        let (code, signal) = exit.code_and_signal();
        let event = EventBody::Exit {
            code,
            signal,
            peaks,
            alerts: self.alerts.len() as u32,
            verdict: Some(verdict.kind.to_string()),
            summary: Some(verdict.summary.clone()),
            evidence: verdict.evidence.clone(),
            attempt: None,
            event_control_writes_before_signal: 0,
        };
        (text, event)
    }

    /// Every sampled resource's peak: as the `exit` event's map, and as text.
    fn peaks(&self) -> (serde_json::Map<String, serde_json::Value>, Vec<String>) {
        let mut peaks = serde_json::Map::new();
        let mut text = Vec::new();
        for st in &self.states {
            if st.last.is_none() {
                continue;
            }
            let unit = st.resource.kind.unit();
            let mut entry = serde_json::Map::new();
            entry.insert("used".into(), st.peak.into());
            if st.peak_limit != u64::MAX {
                entry.insert("limit".into(), st.peak_limit.into());
            }
            entry.insert(
                "unit".into(),
                serde_json::to_value(unit).unwrap_or_default(),
            );
            peaks.insert(st.resource.name.clone(), entry.into());
            if st.peak_limit != u64::MAX && st.peak_limit > 0 {
                text.push(format!(
                    "{} {} of {} ({:.0}%)",
                    st.resource.name,
                    format_amount(st.peak, unit),
                    format_amount(st.peak_limit, unit),
                    st.peak as f64 * 100.0 / st.peak_limit as f64
                ));
            } else {
                text.push(format!(
                    "{} {}",
                    st.resource.name,
                    format_amount(st.peak, unit)
                ));
            }
        }
        (peaks, text)
    }
}

/// What the rate policy is told of resource `st` after sample `s`.
fn rate_input(
    st: &ResourceState,
    s: &Sample,
    seconds_left: Option<f64>,
    lead_s: f64,
    max_interval_s: f64,
    fill_rate: FillRates,
) -> RateInput {
    let config = st.predictor.config();
    let (floor, alert_headroom) = if s.is_limited() {
        let alert = st.predictor.alert_headroom(s.limit) as f64;
        (st.predictor.floor(s.limit), alert)
    } else {
        (0.0, 0.0)
    };
    RateInput {
        t_s: s.t_ns as f64 / 1e9,
        seconds_left,
        used: s.used,
        limit: s.limit,
        floor,
        step: st.predictor.learned_step() as f64,
        alerting: !st.predictor.is_armed(),
        lead_s,
        interval_s: config.interval_s,
        max_interval_s,
        kernel_wake: st.kernel_wake,
        bucket_close_s: st.predictor.next_bucket_close(),
        fill_rate: fill_rate.of(st.resource.kind),
        alert_headroom,
    }
}

/// Logs and records a resource's limit when first seen and whenever it changes (`limit:
/// null` in the event for a resource with no limit).
fn announce_limit(resource: &Resource, limit: u64, first: bool, out: &mut Vec<Action>) {
    let unit = resource.kind.unit();
    let verb = if first {
        "watching"
    } else {
        "limit changed for"
    };
    let line = if limit == u64::MAX {
        format!("{verb} {}: no limit ({})", resource.name, resource.source)
    } else {
        format!(
            "{verb} {}: limit {} ({})",
            resource.name,
            format_amount(limit, unit),
            resource.source
        )
    };
    out.push(Action::Log(Level::Info, line));
    out.push(Action::Emit(EventBody::Limit {
        resource: resource.name.clone(),
        kind: resource.kind,
        limit: (limit != u64::MAX).then_some(limit),
        unit,
        source: resource.source.clone(),
    }));
}

/// What an alert says: the step-peak sentence for a reason from the step reports, the
/// resource's usage and trend otherwise.
fn sentence(st: &ResourceState, p: &Pending) -> String {
    match &p.step {
        Some(a) => step_peaks::step_sentence(&st.resource.name, a),
        None => alert_sentence(&st.resource, &p.sample, p.forecast, p.reason),
    }
}

fn join_pids(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
