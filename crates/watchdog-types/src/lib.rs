//! `watchdog-types`: the small vocabulary every `watchdog` crate shares.
//!
//! A [`Sample`] is one reading of one resource (`used` against `limit`) at one
//! instant; it is `Copy`, fixed-size and allocation-free so the sampler can push
//! it into the ring buffer on the hot path. A [`Resource`] describes what a
//! [`ResourceId`] stands for (its kind, its name as users see it, its unit).
//! A [`Forecast`] is what the predictor says about one resource, and an
//! [`Event`] is one line of the `--events` JSON log. The unit parsers for the
//! command line and the config file live in [`units`]; the names of the enums (as
//! serde writes them) in [`names`]; the
//! atomic file write every output uses in [`fs`]; the checkpoint request, from the
//! engine's decision to the request file's JSON, in [`request`]; the defaults of settings
//! a crate below the config needs too, in [`defaults`].
#![deny(missing_docs)]

pub mod defaults;
pub mod environment;
pub mod fs;
pub mod names;
pub mod outage;
pub mod quote;
pub mod request;
pub mod status;
pub mod units;

use serde::{Deserialize, Serialize};

/// Index of a resource in the watchdog's resource table; cheap to copy into every sample.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct ResourceId(pub u16);

/// What kind of thing a resource is; decides its unit and how it is predicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// Host memory: used = MemTotal - MemAvailable, limit = MemTotal (bytes).
    HostMemory,
    /// Host swap: used = SwapTotal - SwapFree, limit = SwapTotal (bytes).
    Swap,
    /// The target's memory cgroup usage minus its page cache (all file-backed LRU pages)
    /// against its smallest limit (bytes).
    CgroupMemory,
    /// Sum of RSS over the watched process tree against `--mem-limit` (bytes).
    TreeMemory,
    /// The page cache (active + inactive file) charged to the target's memory cgroup, left
    /// out of [`CgroupMemory`](Self::CgroupMemory); no limit: recorded, never alerted (bytes).
    CgroupCache,
    /// Bytes used on a filesystem against the bytes the target may use (bytes).
    DiskBytes,
    /// Inodes used on a filesystem against the inodes the target may use (count).
    DiskInodes,
    /// Wall time since the target started against its runtime limit (milliseconds).
    Runtime,
    /// Memory used on one GPU against its total memory (bytes).
    GpuMemory,
    /// An announced end (SIGTERM with its grace, a cloud's preemption notice): no usage,
    /// a deadline (milliseconds; `used` and `limit` 0). Never sampled.
    Notice,
}

/// The unit a resource's `used` and `limit` are counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// A plain count (inodes).
    Count,
    /// Milliseconds.
    Millis,
}

impl ResourceKind {
    /// The unit this kind's samples are counted in.
    pub fn unit(self) -> Unit {
        match self {
            ResourceKind::DiskInodes => Unit::Count,
            ResourceKind::Runtime | ResourceKind::Notice => Unit::Millis,
            _ => Unit::Bytes,
        }
    }

    /// Whether usage can jump in large discrete steps (a checkpoint file, an epoch's allocation).
    pub fn grows_in_steps(self) -> bool {
        matches!(
            self,
            ResourceKind::DiskBytes | ResourceKind::DiskInodes | ResourceKind::GpuMemory
        )
    }
}

/// Description of one watched resource, fixed when the resource is discovered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// Its index in the resource table.
    pub id: ResourceId,
    /// What it is.
    pub kind: ResourceKind,
    /// Name as users see it: `host_memory`, `swap`, `cgroup_memory`, `cgroup_cache`, `tree_memory`,
    /// `disk:/path`, `inodes:/path`, `runtime`, `gpu0`.
    pub name: String,
    /// Where the figure and its limit come from, in a few words (`/sys/fs/cgroup/memory/x`,
    /// `SLURM_JOB_END_TIME`, `NVIDIA A100 (GPU-uuid)`), for logs and events.
    pub source: String,
}

/// One reading of one resource; fixed-size and `Copy` so it can go through the ring buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// Which resource.
    pub resource: ResourceId,
    /// Monotonic time of the reading, in nanoseconds since the watchdog started.
    pub t_ns: u64,
    /// Amount in use, in the resource's unit.
    pub used: u64,
    /// Amount at which the resource is exhausted, in the resource's unit; `u64::MAX` when unlimited.
    pub limit: u64,
}

impl Sample {
    /// Whether the resource has a finite limit worth predicting against.
    pub fn is_limited(&self) -> bool {
        self.limit != u64::MAX && self.limit > 0
    }
}

/// The predictor's view of one resource after the latest sample.
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Forecast {
    /// Predicted seconds until `used` reaches `limit`; `None` when the trend does not reach it.
    pub seconds_left: Option<f64>,
    /// Growth rate the prediction rests on, in units per second (negative when falling).
    pub rate_per_s: f64,
    /// How sure the predictor is, from 0 (a guess) to 1 (a clean trend).
    pub confidence: f64,
    /// Bytes (or units) left before the limit.
    pub headroom: u64,
}

/// Why the run ended: the verdict of the `exit` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Exited on its own (any status) with no resource exhausted.
    Exited,
    /// Killed by the kernel's OOM killer.
    OomKill,
    /// Killed by a signal, no resource exhausted.
    Signal,
    /// Died of a fault or `abort()` of its own (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT).
    Crash,
    /// Died of the checkpoint signal the watchdog sent it.
    WatchdogSignal,
    /// A watched filesystem was full at the end.
    DiskFull,
    /// The runtime limit was reached.
    RuntimeLimit,
    /// A GPU was at its memory limit just before the exit.
    GpuOom,
    /// The scheduler cancelled the job (`scancel`): a person's decision, never restarted.
    Cancelled,
    /// The scheduler or the cloud preempted the job: never restarted in place.
    Preempted,
    /// Gone, with no status and no evidence.
    Unknown,
}

/// Why an alert fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertReason {
    /// The predicted time to exhaustion fell below the lead time.
    Trend,
    /// Headroom fell below the absolute floor, whatever the trend.
    HeadroomFloor,
    /// The next step (checkpoint file, epoch allocation) of the learned size will not fit.
    NextStep,
    /// The next training step's allocator peak, predicted from the run's step reports, will
    /// not fit on its GPU.
    StepPeak,
    /// The next evaluation's allocator peak, grown from one evaluation to the next, will not fit.
    EvalPeak,
    /// The allocator retries or needs memory that is reserved but unallocated: the cache is
    /// fragmented (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` helps).
    Fragmentation,
    /// The watchdog was sent SIGTERM: the run ends when the grace is over.
    Terminating,
    /// The cloud provider announced the machine's preemption.
    Preemption,
}

/// The phase of a training step, as the Python client reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A training step (forward, backward, optimizer).
    Train,
    /// A step of an evaluation (validation, test) pass.
    Eval,
    /// Anything else the caller reports.
    Other,
}

/// One line of the `--events` JSON log: `{"event": "<kind>", "time": "<RFC 3339>", ...}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Wall-clock time of the event, RFC 3339 with milliseconds, UTC.
    pub time: String,
    /// The kind of event and its fields.
    #[serde(flatten)]
    pub body: EventBody,
}

/// The sampling rates in force for one resource: every `interval_s` while it approaches
/// its limit, as seldom as every `max_interval_s` while it is far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceRate {
    /// Resource name.
    pub resource: String,
    /// Seconds between two samples while it approaches its limit.
    pub interval_s: f64,
    /// Longest seconds between two samples while it is far (`max_interval`, clamped).
    pub max_interval_s: f64,
    /// What watches it between samples: `kernel` where a level is armed at its alert line
    /// (the cgroup v1 usage threshold), `poll` otherwise; `poll` in older events.
    #[serde(default)]
    pub watched_by: WatchedBy,
    /// Why, in one line (the unarmed source's reason, or why no kernel level applies);
    /// empty in older events.
    #[serde(default)]
    pub why: String,
}

/// What watches a resource between its samples (the `start` event's `rates`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchedBy {
    /// A level armed in the kernel at the resource's alert line wakes the loop when it is
    /// crossed (`docs/kernel-wake.md`).
    Kernel,
    /// Only the watchdog's own samples see it.
    #[default]
    Poll,
}

/// A kernel wake-up source that could not be armed for a run (the `start` event's `unarmed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unarmed {
    /// The source, named as in `wake_sources`.
    pub source: String,
    /// Why, in one line.
    pub reason: String,
}

/// The kinds of events, each with its own fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventBody {
    /// The watchdog started watching a target.
    Start {
        /// The target's PID.
        pid: u32,
        /// The watchdog's own PID.
        watchdog_pid: u32,
        /// Sampling interval in seconds.
        interval_s: f64,
        /// Lead time in seconds.
        lead_s: f64,
        /// Whether `--dry-run` is on.
        dry_run: bool,
        /// What the watchdog knows of the run's environment at start (absent from older
        /// watchdogs' events).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<Box<environment::Environment>>,
        /// The sampling rates in force for each resource (absent from older watchdogs'
        /// events).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rates: Vec<ResourceRate>,
        /// What wakes the loop besides its ticks: `pidfd`, `cgroup_v1_threshold`,
        /// `cgroup_v2_events`, `psi:PATH` (`docs/kernel-wake.md`); empty from older watchdogs.
        #[serde(default)]
        wake_sources: Vec<String>,
        /// The kernel sources that could not be armed, and why: those are polled.
        #[serde(default)]
        unarmed: Vec<Unarmed>,
    },
    /// A resource and its limit were found.
    Limit {
        /// Resource name.
        resource: String,
        /// What kind of resource.
        kind: ResourceKind,
        /// The limit, in the resource's unit; `None` (null) when it has none.
        limit: Option<u64>,
        /// The resource's unit.
        unit: Unit,
        /// Where the figure and the limit come from.
        source: String,
    },
    /// The run's Python side, from the file the client writes beside the request file.
    Environment {
        /// The interpreter and the versions of the packages that decide how training behaves.
        python: environment::PythonFacts,
    },
    /// A resource could not be watched.
    Unwatched {
        /// Resource name or kind.
        resource: String,
        /// Why, in one sentence.
        reason: String,
    },
    /// A resource that could not be read is being read again.
    Resumed {
        /// Resource name or source name.
        resource: String,
    },
    /// The watchdog asked the target to checkpoint.
    Alert {
        /// Resource name.
        resource: String,
        /// Why.
        reason: AlertReason,
        /// Usage at the alert.
        used: u64,
        /// Limit at the alert.
        limit: u64,
        /// The resource's unit.
        unit: Unit,
        /// Predicted seconds left (absent when the floor fired on a flat trend).
        predicted_s: Option<f64>,
        /// Growth rate in units per second.
        rate_per_s: f64,
        /// PIDs signalled.
        signalled: Vec<u32>,
        /// Signal name sent (absent when none was sent).
        signal: Option<String>,
        /// The request file written (absent in dry-run).
        request_file: Option<String>,
        /// Whether this was a dry run (nothing sent or written).
        dry_run: bool,
        /// The phase whose step peak will not fit (`step_peak`, `eval_peak`,
        /// `fragmentation` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<Phase>,
        /// The last step the run reported (step-peak reasons only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
        /// The predicted allocator peak that will not fit, in bytes (step-peak reasons only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predicted_peak: Option<u64>,
    },
    /// A resource left its alert episode (usage fell back below the re-arm threshold).
    Rearm {
        /// Resource name.
        resource: String,
    },
    /// The target acknowledged a checkpoint.
    Ack {
        /// Seconds from the alert to the acknowledgment.
        checkpoint_s: Option<f64>,
        /// The lead time now in force, in seconds.
        lead_s: f64,
        /// The request acknowledged; 0 for a save no request asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        /// The checkpoint written, when the client said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// The training step the checkpoint holds, when the client said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
        /// Why the client saved without a request (`cuda_oom`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
    /// The run reported a CUDA out-of-memory error raised inside a step (the `exception`
    /// of its step reports).
    CudaOom {
        /// The GPU resource of the device, when NVML lists it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource: Option<String>,
        /// The step that failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
        /// Its phase.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<Phase>,
        /// The allocator's peak, in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peak: Option<u64>,
        /// The allocator's reserved memory, in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reserved: Option<u64>,
        /// What the allocator could have on the device, in bytes, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available: Option<u64>,
        /// The error's message, as the client cut it (at most 1,000 characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Writing one of the watchdog's outputs failed after the start (once per output
    /// and error, until it works again).
    OutputError {
        /// Which output: `request_file`, `events` or `recording`.
        output: String,
        /// Its path.
        path: String,
        /// The error, in one sentence.
        error: String,
    },
    /// The watchdog was stopped by a signal while the target runs on.
    Stop {
        /// The signal number.
        signal: i32,
    },
    /// The target exited, but processes of its tree run on (a launcher that backgrounded
    /// the run, a double fork): they stay watched until the last one exits.
    Survivors {
        /// The target's PID.
        pid: u32,
        /// The target's exit code, when known.
        code: Option<i32>,
        /// The signal that killed the target, when known.
        signal: Option<i32>,
        /// The processes still watched.
        pids: Vec<u32>,
        /// Their command names, in the order of `pids`.
        names: Vec<String>,
    },
    /// An `--on-alert` hook finished, or was ended.
    Hook {
        /// The command.
        command: String,
        /// The PID of its `sh` (also its process group ID).
        pid: u32,
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it, when one did.
        signal: Option<i32>,
        /// Seconds it ran.
        duration_s: f64,
        /// Whether its process group was ended for running past `--hook-timeout`.
        timed_out: bool,
        /// Whether its process group was ended because the watchdog was exiting.
        ended_at_exit: bool,
    },
    /// The target exited.
    Exit {
        /// Exit code, when it exited normally and the code is known.
        code: Option<i32>,
        /// Signal number, when it was killed by a signal.
        signal: Option<i32>,
        /// Peak usage per resource name.
        peaks: serde_json::Map<String, serde_json::Value>,
        /// Number of alerts sent.
        alerts: u32,
        /// Why the run ended: `exited`, `oom_kill`, `signal`, `disk_full`, `runtime_limit`,
        /// `gpu_oom` or `unknown`.
        #[serde(default)]
        verdict: Option<String>,
        /// The verdict in one sentence.
        #[serde(default)]
        summary: Option<String>,
        /// The figures and times behind the verdict.
        #[serde(default)]
        evidence: Vec<String>,
        /// Which attempt of a `run --restart` this was (1 for the first); absent without
        /// `--restart`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// `cgroup.event_control` writes (v1 thresholds armed or moved) made between a
        /// threshold's crossing waking the loop and the alert sent for it, summed over the
        /// run: 0 when no write stood between a crossing and its signal (`docs/kernel-wake.md`).
        #[serde(default)]
        event_control_writes_before_signal: u32,
    },
    /// `run --requeue` puts its SLURM job back in the queue after the save before its end
    /// (written and flushed before `scontrol requeue` runs).
    Requeue {
        /// The job's ID (`SLURM_JOB_ID`).
        job_id: u64,
        /// `SLURM_RESTART_COUNT` of the allocation requeueing: the requeued job runs with
        /// one more.
        restart_count: u32,
        /// The checkpoint acknowledged for the end, when the client named it.
        path: Option<String>,
        /// Its step, when known.
        step: Option<u64>,
    },
    /// An announced end: SIGTERM to `watchdog run`, or a provider's preemption notice. The
    /// run was asked to save (request `seq`) before `deadline_unix`.
    Notice {
        /// `sigterm`, `gce`, `aws` or `azure`.
        source: String,
        /// When the end comes, seconds since the epoch.
        deadline_unix: f64,
        /// Whether the acknowledgment came before the end was passed on (`None`: not yet
        /// known, the event written at the notice).
        saved: Option<bool>,
        /// The request's sequence number (`None` when no process could be asked).
        seq: Option<u64>,
    },
    /// `run --restart` starts the command again after a failed attempt.
    Restart {
        /// The attempt starting now (2 for the first restart).
        attempt: u32,
        /// The verdict of the attempt that failed.
        verdict: String,
        /// The complete checkpoint the new attempt is told to resume from
        /// (`WATCHDOG_RESUME_FROM`), when there is one.
        resume_from: Option<String>,
        /// The step of that checkpoint, when known.
        step: Option<u64>,
    },
}

/// Monotonic nanoseconds to seconds.
pub fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}
