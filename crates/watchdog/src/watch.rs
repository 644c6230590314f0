//! The poll loop: one thread that wakes at each deadline, has the sampler push one
//! sample per resource into the ring buffer, drains the ring through the predictors,
//! and acts on their decisions. Signals and the request file are sent from this
//! thread (they take microseconds and must not wait); hooks and desktop
//! notifications go to a helper thread so a slow hook or a hung bus never delays
//! the next sample.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use watchdog_alerter::events::EventLog;
use watchdog_alerter::request::{AckWatcher, AlertRequest};
use watchdog_predictor::{Decision, PredictorConfig, ResourcePredictor};
use watchdog_sampler::ring::SampleReader;
use watchdog_sampler::{ResourceTable, Sampler};
use watchdog_types::units::{format_bytes, format_duration_s, signal_name};
use watchdog_types::{AlertReason, Event, EventBody, Forecast, Resource, Sample, Unit};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use watchdog_sampler::cgroup::OomKillCounter;

use crate::Failure;
use crate::config::Settings;
use crate::logging;
use crate::outputs::{self, Outputs};
use crate::recorder::{self, FlightRecorder};
use crate::target::{self, Target, TargetExit};
use crate::verdict::{self, ExitFacts, ResourceEnd};

mod actions;
mod kmsg;
mod lineage;
mod sources;

/// How often the acknowledgment file is checked while an alert is outstanding.
const ACK_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Ring buffer capacity in samples: enough for many ticks of every resource.
const RING_CAPACITY: usize = 4096;
/// How far back "just before the exit" reaches for the verdict.
const RECENT_MS: u32 = 3_000;

/// `watchdog --pid PID`: watch a running process until it exits.
pub fn attach(pid: u32, settings: Settings) -> Result<ExitCode, Failure> {
    // Signals first: from here on, SIGUSR2 and a stop request are ours to handle.
    let record_now = catch_record_signal();
    let stop = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        if let Err(e) = signal_hook::flag::register_usize(sig, stop.clone(), sig as usize) {
            tracing::debug!("cannot catch signal {sig}: {e}");
        }
    }
    let target = Target::attach(pid)?;
    let outputs = Outputs::plan(&settings, pid, outputs::live_cwd(pid).as_deref())?;
    let prepared = Prepared::new(&settings, Some(pid))?;
    let mut watch = Watch::new(target, settings, prepared, outputs, record_now)?;
    // Stopping the watchdog (Ctrl-C, kill) ends the watch with a summary, not silently.
    watch.stop = Some(stop);
    match watch.run() {
        Ended::Target(_) => Ok(ExitCode::SUCCESS),
        Ended::Stopped(sig) => Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
    }
}

/// Registers SIGUSR2 as "write the recording now".
fn catch_record_signal() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(libc::SIGUSR2, flag.clone()) {
        tracing::debug!("SIGUSR2 will not write the recording: {e}");
    }
    flag
}

/// Why the watch ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// The target exited.
    Target(TargetExit),
    /// The watchdog was asked to stop by this signal; the target runs on.
    Stopped(i32),
}

/// `watchdog run -- CMD`: start CMD, watch it, exit with its status.
pub fn run_command(argv: &[std::ffi::OsString], settings: Settings) -> Result<ExitCode, Failure> {
    // Signals first, so none can kill the watchdog between the spawn and the watch.
    let record_now = catch_record_signal();
    let forwarded = target::catch_forwarded_signals()?;
    // The command starts in our working directory, which may have been deleted.
    let own = std::process::id();
    let outputs = Outputs::plan(&settings, own, outputs::live_cwd(own).as_deref())?;
    let prepared = Prepared::new(&settings, None)?;
    let env = target::child_env(settings.signal, &outputs.request_file);
    // Before the spawn, so nothing the command backgrounds can leave the watch.
    lineage::become_subreaper()?;
    let target = Target::spawn(argv, &env)?;
    let unforwarded = Arc::new(AtomicUsize::new(0));
    target::forward_signals(forwarded, target.pidfd.clone(), unforwarded.clone())?;
    let pidfd = target.pidfd.clone();
    let mut watch = match Watch::new(target, settings, prepared, outputs, record_now) {
        Ok(mut w) => {
            w.unforwarded = Some(unforwarded);
            w
        }
        Err(e) => {
            // Never leave the command running unwatched.
            let _ = pidfd.send_signal(libc::SIGKILL);
            return Err(e);
        }
    };
    match watch.run() {
        Ended::Target(exit) => Ok(ExitCode::from(exit.shell_status())),
        Ended::Stopped(sig) => Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
    }
}

/// What is set up before the target is started, so bad input fails before a child runs.
pub struct Prepared {
    events: Option<EventLog>,
    table: ResourceTable,
    gpu: sources::GpuSetup,
}

impl Prepared {
    fn new(settings: &Settings, pid: Option<u32>) -> Result<Prepared, Failure> {
        let events = match &settings.events {
            Some(path) => Some(EventLog::open(path).map_err(|e| {
                Failure::Usage(format!(
                    "cannot open events file '{}': {e}; expected a writable file path",
                    path.display()
                ))
            })?),
            None => None,
        };
        let mut table = ResourceTable::default();
        let gpu = sources::GpuSetup::start(settings, &mut table, pid)?;
        Ok(Prepared { events, table, gpu })
    }
}

/// What the watchdog knows about one resource.
struct ResourceState {
    resource: Resource,
    predictor: ResourcePredictor,
    last: Option<Sample>,
    forecast: Forecast,
    peak: u64,
    peak_limit: u64,
}

/// One alert sent, for the summary.
struct AlertRecord {
    resource: String,
    at: Instant,
    signalled: usize,
}

/// An alert decided this tick, acted on after the ring is drained.
struct PendingAlert {
    id: usize,
    sample: Sample,
    forecast: Forecast,
    reason: AlertReason,
}

struct Watch {
    settings: Settings,
    target: Target,
    sampler: Sampler,
    reader: Option<SampleReader>,
    states: Vec<ResourceState>,
    events: Option<EventLog>,
    request_file: PathBuf,
    outputs: Outputs,
    ack: AckWatcher,
    actions: actions::Actions,
    alerts: Vec<AlertRecord>,
    pending: Vec<PendingAlert>,
    seq: u64,
    start: Instant,
    ticks: u64,
    late_ticks: u64,
    lead_s: f64,
    last_alert_at: Option<SystemTime>,
    recorder: FlightRecorder,
    record_path: Option<PathBuf>,
    record_now: Arc<AtomicBool>,
    oom_counter: Option<(OomKillCounter, u64)>,
    kmsg: Option<kmsg::Kmsg>,
    stop: Option<Arc<AtomicUsize>>,
    /// The target's status, once it exited (the watch goes on while the run's other
    /// processes remain; see `lineage`).
    target_exit: Option<TargetExit>,
    /// When the target exited leaving processes of the run behind.
    survivors_since: Option<Instant>,
    /// A signal `run` could not forward to the exited command (for the survivors).
    unforwarded: Option<Arc<AtomicUsize>>,
    hooks: watchdog_alerter::hook::Hooks,
    hook_outcomes: std::sync::mpsc::Receiver<watchdog_alerter::hook::HookOutcome>,
    /// The checkpoint signal, once it was sent to the target itself (for the verdict).
    signalled_target: Option<i32>,
}

impl Watch {
    fn new(
        target: Target,
        settings: Settings,
        prepared: Prepared,
        outputs: Outputs,
        record_now: Arc<AtomicBool>,
    ) -> Result<Watch, Failure> {
        let request_file = outputs.request_file.clone();
        let start = Instant::now();
        let Prepared {
            events,
            mut table,
            gpu,
        } = prepared;
        let built = sources::build(&target, &settings, &mut table, gpu);
        let (mut sampler, reader) =
            Sampler::for_target(Path::new("/proc"), target.pid, built.sources, RING_CAPACITY)
                .map_err(|e| Failure::Usage(format!("cannot watch PID {}: {e}", target.pid)))?;
        let hooks = watchdog_alerter::hook::Hooks::new(settings.hook_timeout);
        let (hook_tx, hook_outcomes) = std::sync::mpsc::channel();
        hooks.report_to(hook_tx);
        lineage::follow_the_run(sampler.tree_mut(), &hooks, target.is_child());
        let config = PredictorConfig {
            lead_s: settings.lead.as_secs_f64(),
            interval_s: settings.interval.as_secs_f64(),
            floor_percent: settings.floor_percent,
        };
        let start_wall = SystemTime::now();
        let recorder = FlightRecorder::new(
            table.all().to_vec(),
            recorder::Meta {
                pid: Some(target.pid.into()),
                command: Some(target.name.clone()),
                start: Some(watchdog_alerter::events::format_rfc3339_ms(start_wall)),
                start_unix: Some(watchdog_alerter::events::unix_time_s(start_wall)),
                interval_s: Some(settings.interval.as_secs_f64()),
                lead_s: Some(settings.lead.as_secs_f64()),
                watchdog_version: Some(env!("CARGO_PKG_VERSION").to_string()),
                ..recorder::Meta::default()
            },
            settings.record_window.as_secs_f64(),
        );
        // In a dry run nothing is written unless a recording was asked for by name.
        let record_path = outputs.recording.clone();
        let oom_counter = built
            .oom_counter
            .and_then(|mut c| c.read().ok().map(|n| (c, n)));
        let states = table
            .all()
            .iter()
            .map(|r| ResourceState {
                resource: r.clone(),
                predictor: ResourcePredictor::new(r.kind, config.clone()),
                last: None,
                forecast: Forecast::default(),
                peak: 0,
                peak_limit: 0,
            })
            .collect();
        let mut watch = Watch {
            ack: AckWatcher::new(&request_file),
            lead_s: settings.lead.as_secs_f64(),
            actions: actions::Actions::start(settings.notify && !settings.dry_run, hooks.clone()),
            settings,
            target,
            sampler,
            reader: Some(reader),
            states,
            events,
            request_file,
            outputs,
            alerts: Vec::new(),
            pending: Vec::new(),
            seq: 0,
            start,
            ticks: 0,
            late_ticks: 0,
            last_alert_at: None,
            recorder,
            record_path,
            record_now,
            oom_counter,
            kmsg: kmsg::Kmsg::open_at_end(),
            stop: None,
            target_exit: None,
            survivors_since: None,
            unforwarded: None,
            hooks,
            hook_outcomes,
            signalled_target: None,
        };
        if !watch.settings.dry_run
            && let Err(e) = watchdog_alerter::request::clear_request_files(&watch.request_file)
        {
            tracing::warn!("cannot remove an old request file: {e}");
        }
        watch.announce_start(&built.unwatched);
        Ok(watch)
    }

    fn announce_start(&mut self, unwatched: &[(String, String)]) {
        let s = &self.settings;
        tracing::info!(
            "watching PID {} ({}) every {} with a {} lead; request file {}{}",
            self.target.pid,
            self.target.name,
            format_duration_s(s.interval.as_secs_f64()),
            format_duration_s(s.lead.as_secs_f64()),
            self.request_file.display(),
            if s.dry_run {
                " (dry run: nothing will be sent or written)"
            } else {
                ""
            }
        );
        if let Some(caution) = watchdog_types::units::signal_caution(s.signal) {
            tracing::warn!("{caution}");
        }
        self.emit(EventBody::Start {
            pid: self.target.pid,
            watchdog_pid: std::process::id(),
            interval_s: s.interval.as_secs_f64(),
            lead_s: s.lead.as_secs_f64(),
            dry_run: s.dry_run,
        });
        for (resource, reason) in unwatched {
            if resource == "gpu" {
                tracing::info!("GPU memory is not watched: {reason}");
            } else {
                tracing::warn!("{resource} is not watched: {reason}");
            }
            self.emit(EventBody::Unwatched {
                resource: resource.clone(),
                reason: reason.clone(),
            });
        }
        crate::ready::notify(
            self.target.pid,
            &self.request_file,
            self.record_path.as_deref(),
        );
    }

    /// Runs until the target exits; returns how it ended.
    fn run(&mut self) -> Ended {
        let interval = self.settings.interval;
        let show_status = logging::status_wanted(&self.settings);
        let mut deadline = Instant::now();
        let mut next_ack = deadline;
        let mut next_status = deadline + STATUS_EVERY;
        loop {
            if let Some(sig) = self.stop.as_ref().map(|s| s.load(Ordering::Relaxed))
                && sig != 0
            {
                return self.stopped(sig as i32);
            }
            let now = Instant::now();
            self.tick(now);
            if !self.alerts.is_empty() && now >= next_ack {
                self.check_ack();
                next_ack = now + ACK_CHECK_EVERY;
            }
            if show_status && now >= next_status {
                logging::draw_status(&self.status_line());
                next_status = now + STATUS_EVERY;
            }
            deadline += interval;
            let after = Instant::now();
            if deadline < after {
                // The tick overran one or more deadlines: count them, do not try to catch up.
                let behind = after.duration_since(deadline);
                self.late_ticks += 1 + (behind.as_nanos() / interval.as_nanos().max(1)) as u64;
                deadline = after;
            }
            if self.wait_for_the_run(deadline.saturating_duration_since(after)) {
                break;
            }
        }
        logging::clear_status();
        // One last look for the verdict: a full disk stays full after the writer died.
        // Nothing is acted on: the target is gone.
        self.sample(Instant::now());
        self.pending.clear();
        if !self.alerts.is_empty() {
            // A target that acknowledges and exits at once must still have its ack recorded.
            self.check_ack();
        }
        let exit = self.target.reap();
        self.finish(exit);
        Ended::Target(exit)
    }

    /// Ends the watch on the watchdog's own SIGINT/SIGTERM/SIGHUP, the target still running.
    fn stopped(&mut self, sig: i32) -> Ended {
        logging::clear_status();
        self.end_hooks();
        let alerts = self.alerts.len();
        logging::summary(&format!(
            "watchdog: stopped by {} after {}; PID {} ({}) is still running. {alerts} alert(s) sent.{}",
            signal_name(sig),
            format_duration_s(self.start.elapsed().as_secs_f64()),
            self.target.pid,
            self.target.name,
            self.recording_note(),
        ));
        self.emit(EventBody::Stop { signal: sig });
        self.close();
        Ended::Stopped(sig)
    }

    /// The last of a watch: let queued hooks and notifications finish, then write the
    /// final recording.
    fn close(&mut self) {
        self.actions.finish(Duration::from_secs(3));
        if let Some(path) = &self.record_path {
            match recorder::write(path, &self.recorder.snapshot()) {
                Ok(()) => tracing::info!("recording written to {}", path.display()),
                Err(e) => outputs::write_failed("recording", path, &e),
            }
        }
        // Failures of the last writes still reach the events file.
        self.emit_output_failures();
        self.outputs.prune();
    }

    /// Emits an `output_error` event for each write that failed since the last call.
    fn emit_output_failures(&mut self) {
        for f in outputs::take_failures() {
            self.emit(EventBody::OutputError {
                output: f.output.to_string(),
                path: f.path,
                error: f.error,
            });
        }
    }

    /// ` Recording: PATH.` for the summary, when one is written.
    fn recording_note(&self) -> String {
        self.record_path
            .as_ref()
            .map(|p| format!(" Recording: {}.", p.display()))
            .unwrap_or_default()
    }

    /// One sampling period: sample, predict, act.
    fn tick(&mut self, now: Instant) {
        self.reap_adopted();
        self.record_hook_outcomes();
        self.sample(now);
        if !self.pending.is_empty() {
            self.act();
            self.save_recording_in_background("alert");
        }
        if self.record_now.swap(false, Ordering::Relaxed) {
            self.save_recording_in_background("SIGUSR2");
        }
        self.emit_output_failures();
    }

    /// Samples every source and runs the predictors; decisions wait in `pending`.
    fn sample(&mut self, now: Instant) {
        let t_ns = now.duration_since(self.start).as_nanos() as u64;
        self.ticks += 1;
        self.sampler.tick(t_ns);
        let mut failures = Vec::new();
        self.sampler
            .take_new_failures(|name, e| failures.push((name.to_string(), e.to_string())));
        for (resource, reason) in failures {
            self.emit(EventBody::Unwatched { resource, reason });
        }
        let mut recovered = Vec::new();
        self.sampler
            .take_recoveries(|name| recovered.push(name.to_string()));
        for resource in recovered {
            self.emit(EventBody::Resumed { resource });
        }
        if let Some(mut reader) = self.reader.take() {
            reader.drain(|s| self.on_sample(s));
            self.reader = Some(reader);
        }
    }

    /// Hands a copy of the flight recorder to the action thread to write.
    fn save_recording_in_background(&mut self, why: &str) {
        match &self.record_path {
            Some(path) => {
                tracing::debug!("writing the recording {} ({why})", path.display());
                self.actions.record(path.clone(), self.recorder.snapshot());
            }
            None if why == "SIGUSR2" => {
                tracing::info!("dry run: no recording written (give --record PATH to have one)")
            }
            None => {}
        }
    }

    fn on_sample(&mut self, s: Sample) {
        let Some(st) = self.states.get_mut(s.resource.0 as usize) else {
            return;
        };
        if s.used >= st.peak {
            st.peak = s.used;
            st.peak_limit = s.limit;
        }
        self.recorder.observe(&s);
        let previous = st.last.replace(s);
        if previous.map(|p| p.limit) != Some(s.limit) {
            let resource = st.resource.clone();
            self.announce_limit(&resource, s.limit, previous.is_none());
        }
        let Some(st) = self.states.get_mut(s.resource.0 as usize) else {
            return;
        };
        if !s.is_limited() {
            return;
        }
        let obs = st.predictor.observe(s.t_ns as f64 / 1e9, s.used, s.limit);
        st.forecast = obs.forecast;
        match obs.decision {
            Decision::Quiet => {}
            Decision::Alert(reason) => self.pending.push(PendingAlert {
                id: s.resource.0 as usize,
                sample: s,
                forecast: obs.forecast,
                reason,
            }),
            Decision::Rearm => {
                let name = st.resource.name.clone();
                tracing::info!("{name} is back to normal; the next crossing alerts again");
                self.emit(EventBody::Rearm { resource: name });
            }
        }
    }

    /// Logs and records a resource's limit when first seen and whenever it changes
    /// (`limit: null` in the event for a resource with no limit).
    fn announce_limit(&mut self, resource: &Resource, limit: u64, first: bool) {
        let unit = resource.kind.unit();
        let verb = if first {
            "watching"
        } else {
            "limit changed for"
        };
        if limit == u64::MAX {
            tracing::info!("{verb} {}: no limit ({})", resource.name, resource.source);
        } else {
            tracing::info!(
                "{verb} {}: limit {} ({})",
                resource.name,
                format_amount(limit, unit),
                resource.source
            );
        }
        self.emit(EventBody::Limit {
            resource: resource.name.clone(),
            kind: resource.kind,
            limit: (limit != u64::MAX).then_some(limit),
            unit,
            source: resource.source.clone(),
        });
    }

    /// Acts on this tick's alerts: one request file and one signal for the most urgent,
    /// one event and one log line for each.
    fn act(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by(|a, b| {
            let left = |p: &PendingAlert| p.forecast.seconds_left.unwrap_or(0.0);
            left(a).total_cmp(&left(b))
        });
        let tree: Vec<u32> = self.sampler.tree_pids().to_vec();
        let dry_run = self.settings.dry_run;
        let signal = self.settings.signal;
        let mut signalled: Vec<u32> = Vec::new();
        let mut request_written = None;
        if let Some(first) = pending.first() {
            self.seq += 1;
            let request = self.request_for(first);
            if dry_run {
                tracing::info!(
                    "dry run: would write {} and signal the tree",
                    self.request_file.display()
                );
            } else {
                match watchdog_alerter::request::write_request_file(&self.request_file, &request) {
                    Ok(()) => {
                        outputs::write_ok("request_file");
                        request_written = Some(self.request_file.display().to_string());
                    }
                    Err(e) => {
                        outputs::write_failed("request_file", &self.request_file, &e.to_string())
                    }
                }
                let roots = self.roots();
                let report = watchdog_alerter::signal::signal_tree_with_roots(
                    Path::new("/proc"),
                    &tree,
                    &self.target.pidfd,
                    &roots,
                    signal,
                );
                for (pid, why) in &report.failed {
                    tracing::warn!("could not signal PID {pid}: {why}");
                }
                if report.none_catching() {
                    tracing::warn!(
                        "{}",
                        watchdog_alerter::signal::no_handler_warning(signal, &report)
                    );
                }
                if report.sent.contains(&self.target.pid) {
                    self.signalled_target = Some(signal);
                }
                signalled = report.sent;
                if let Some(cmd) = &self.settings.on_alert {
                    self.actions.hook(
                        cmd.clone(),
                        watchdog_alerter::hook::hook_env(
                            &request,
                            request_written.as_ref().map(Path::new),
                        ),
                    );
                }
            }
            self.actions.notify(
                format!("watchdog: {} running out", request.resource),
                alert_sentence(&self.states[first.id].resource, first),
            );
            self.last_alert_at = Some(SystemTime::now());
        }
        for p in &pending {
            let st = &self.states[p.id];
            let unit = st.resource.kind.unit();
            tracing::warn!(
                "ALERT {}{}; {}",
                alert_sentence(&st.resource, p),
                if dry_run { " (dry run)" } else { "" },
                if dry_run {
                    "nothing sent".to_string()
                } else if signalled.is_empty() {
                    "no process signalled".to_string()
                } else {
                    format!(
                        "sent {} to PID {}",
                        signal_name(signal),
                        join_pids(&signalled)
                    )
                }
            );
            self.alerts.push(AlertRecord {
                resource: st.resource.name.clone(),
                at: Instant::now(),
                signalled: signalled.len(),
            });
            let body = EventBody::Alert {
                resource: st.resource.name.clone(),
                reason: p.reason,
                used: p.sample.used,
                limit: p.sample.limit,
                unit,
                predicted_s: p.forecast.seconds_left,
                rate_per_s: p.forecast.rate_per_s,
                signalled: signalled.clone(),
                signal: (!signalled.is_empty()).then(|| signal_name(signal)),
                request_file: request_written.clone(),
                dry_run,
            };
            self.emit(body);
        }
    }

    fn request_for(&self, p: &PendingAlert) -> AlertRequest {
        let st = &self.states[p.id];
        let now = SystemTime::now();
        AlertRequest {
            seq: self.seq,
            resource: st.resource.name.clone(),
            kind: st.resource.kind.to_string(),
            reason: p.reason.to_string(),
            used: p.sample.used,
            limit: p.sample.limit,
            unit: st.resource.kind.unit().to_string(),
            predicted_s: p.forecast.seconds_left,
            time: watchdog_alerter::events::format_rfc3339_ms(now),
            time_unix: watchdog_alerter::events::unix_time_s(now),
            pid: self.target.pid,
            signal: signal_name(self.settings.signal),
            watchdog_pid: std::process::id(),
        }
    }

    /// Reads the acknowledgment file and, on a new one, measures the checkpoint time.
    fn check_ack(&mut self) {
        let Some(ack) = self.ack.check() else {
            return;
        };
        // An acknowledged episode that ends by a drop starts the history afresh.
        for st in &mut self.states {
            st.predictor.note_acknowledged();
        }
        let checkpoint_s = self.last_alert_at.and_then(|wall| {
            let alert_unix = wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            let d = ack.time_unix - alert_unix;
            (d >= 0.0).then_some(d)
        });
        if let Some(d) = checkpoint_s {
            for st in &mut self.states {
                st.predictor.note_checkpoint_duration(d);
            }
            // The predictors own the rule (duration x safety + one interval); ask them.
            let needed = self
                .states
                .iter()
                .map(|st| st.predictor.effective_lead())
                .fold(self.settings.lead.as_secs_f64(), f64::max);
            if needed > self.lead_s {
                self.lead_s = needed;
                tracing::info!(
                    "checkpoint took {}: lead raised to {}",
                    format_duration_s(d),
                    format_duration_s(needed)
                );
            }
        }
        tracing::info!(
            "checkpoint acknowledged (request {}){}",
            ack.seq,
            checkpoint_s
                .map(|d| format!(", saved in {}", format_duration_s(d)))
                .unwrap_or_default()
        );
        self.emit(EventBody::Ack {
            checkpoint_s,
            lead_s: self.lead_s,
        });
    }

    fn emit(&mut self, body: EventBody) {
        let event = Event {
            time: watchdog_alerter::events::now_rfc3339(),
            body,
        };
        if let Ok(json) = serde_json::to_value(&event) {
            self.recorder
                .event(self.start.elapsed().as_secs_f64(), json);
        }
        if let Some(log) = &mut self.events {
            match log.append(&event) {
                Ok(()) => outputs::write_ok("events"),
                // Reported next tick as an event, which the recording keeps.
                Err(e) => outputs::write_failed("events", log.path(), &e.to_string()),
            }
        }
    }

    /// Gathers what the verdict looks at and decides.
    fn diagnose(&mut self, exit: TargetExit) -> verdict::Verdict {
        let now_ms = self.start.elapsed().as_millis().min(u64::MAX as u128) as u64;
        let resources = self
            .states
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                let last = st.last?;
                Some(ResourceEnd {
                    name: st.resource.name.clone(),
                    kind: st.resource.kind,
                    recent_peak: self
                        .recorder
                        .recent_peak(i, now_ms, RECENT_MS)
                        .unwrap_or(last.used)
                        .max(last.used),
                    last_used: last.used,
                    limit: last.limit,
                    age_s: (now_ms as f64 / 1e3 - last.t_ns as f64 / 1e9).max(0.0),
                })
            })
            .collect();
        let oom_kills = self
            .oom_counter
            .as_mut()
            .and_then(|(c, before)| c.read().ok().map(|after| (*before, after)));
        let mut pids = self.sampler.tree_pids().to_vec();
        pids.push(self.target.pid);
        let kernel_oom_line = self
            .kmsg
            .as_mut()
            .and_then(|k| verdict::find_oom_line(&k.read_new(), &pids));
        verdict::diagnose(&ExitFacts {
            exit: match exit {
                TargetExit::Unknown => None,
                known => Some(known),
            },
            oom_kills,
            kernel_oom_line,
            resources,
            sent_signal: self.signalled_target,
        })
    }

    /// The live status: every limited resource as `name used% [+rate/s] [time left]`,
    /// the most urgent first, so what matters survives a narrow terminal.
    fn status_line(&self) -> String {
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

    fn finish(&mut self, exit: TargetExit) {
        self.end_hooks();
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut peaks = serde_json::Map::new();
        let mut peak_text = Vec::new();
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
                peak_text.push(format!(
                    "{} {} of {} ({:.0}%)",
                    st.resource.name,
                    format_amount(st.peak, unit),
                    format_amount(st.peak_limit, unit),
                    st.peak as f64 * 100.0 / st.peak_limit as f64
                ));
            } else {
                peak_text.push(format!(
                    "{} {}",
                    st.resource.name,
                    format_amount(st.peak, unit)
                ));
            }
        }
        let verdict = self.diagnose(exit);
        let how = verdict.summary.clone();
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
                        format_duration_s(a.at.duration_since(self.start).as_secs_f64()),
                        a.signalled
                    )
                })
                .collect();
            format!("{} alert(s): {}.", self.alerts.len(), list.join(", "))
        };
        let late = format!(
            " Sampled {} times every {} ({} late, {} samples dropped).",
            self.ticks,
            format_duration_s(self.settings.interval.as_secs_f64()),
            self.late_ticks,
            self.sampler.dropped()
        );
        logging::summary(&format!(
            "watchdog: PID {} ({}) {how}, after {}.{}{evidence} Peak usage: {}. {alerts}{late}{}",
            self.target.pid,
            self.target.name,
            format_duration_s(elapsed),
            self.survivors_note(),
            if peak_text.is_empty() {
                "nothing sampled".to_string()
            } else {
                peak_text.join(", ")
            },
            self.recording_note(),
        ));
        let (code, signal) = match exit {
            TargetExit::Code(c) => (Some(c), None),
            TargetExit::Signal(s) => (None, Some(s)),
            TargetExit::Unknown => (None, None),
        };
        self.emit(EventBody::Exit {
            code,
            signal,
            peaks,
            alerts: self.alerts.len() as u32,
            verdict: Some(verdict.kind.to_string()),
            summary: Some(verdict.summary.clone()),
            evidence: verdict.evidence.clone(),
        });
        self.close();
    }
}

fn alert_sentence(resource: &Resource, p: &PendingAlert) -> String {
    let unit = resource.kind.unit();
    let what = match p.reason {
        AlertReason::Trend => "will run out",
        AlertReason::HeadroomFloor => "is nearly exhausted",
        AlertReason::NextStep => "cannot take the next step",
    };
    let when = match p.forecast.seconds_left {
        Some(s) => format!(" in about {}", format_duration_s(s)),
        None => String::new(),
    };
    format!(
        "{} {what}{when}: {} of {} used",
        resource.name,
        format_amount(p.sample.used, unit),
        format_amount(p.sample.limit, unit)
    )
}

fn format_amount(v: u64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => format_bytes(v),
        Unit::Count => format!("{v} inodes"),
        Unit::Millis => format_duration_s(v as f64 / 1e3),
    }
}

fn join_pids(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
