//! The service, on the loop `watchdog --pid` runs too ([`schedule::drive`]): wake at each
//! deadline, step every watched run (sample, decide, act), find new runs every scan
//! interval, take registrations from the socket, publish the status for the socket and the
//! metrics, tell systemd it is alive. [`Service`] has one method per phase.
//! Everything slow (hooks, notifications, recordings, socket and HTTP clients) happens on
//! other threads, so one run's trouble never delays another's sample.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use watchdog_alerter::beneath::{BeneathError, UserDirs};
use watchdog_config::Host;
use watchdog_metrics::server::{MetricsHandle, MetricsServer};
use watchdog_sampler::shared::{Reads, SharedReads};
use watchdog_status::protocol::{Registration, Request, Response};
use watchdog_status::server::{Peer, ServerHandle, StatusServer, may_register, visible_to};
use watchdog_types::quote::quote_value;
use watchdog_watch::recorder::Recorders;
use watchdog_watch::schedule::{self, Driven, Loop, Waited};
use watchdog_watch::wake::{WaitSet, Wake, Waker, Woken};
use watchdog_watch::{Failure, Published, ServiceRun, Watch};

use crate::discovery::{ProcessFacts, Scanner, Verdict, judge};
use crate::gpu::GpuSet;
use crate::rules::{DaemonConfig, Rule};
use crate::service::ServiceNotifier;

/// How long an ended run's parent is given to reap it before its exit status is called
/// unknown (a shell or a notebook server does it at once).
const REAP_GRACE: Duration = Duration::from_secs(1);
/// How long a registration waits for the loop's answer.
const REGISTER_WAIT: Duration = Duration::from_secs(2);

/// A registration waiting for the loop: the PID and where to answer.
struct Pending {
    pid: u32,
    reply: mpsc::Sender<Response>,
}

/// One watched run and what the loop keeps about it.
struct Run {
    watch: Watch,
    since_unix: f64,
    /// When the run was seen to end, while its parent has yet to reap it.
    ended: Option<Instant>,
}

/// `watchdog daemon --config PATH [--metrics ADDR]`: runs until SIGTERM or SIGINT (exit 0,
/// every run left running), reloading the config on SIGHUP. `metrics`, from the command
/// line, wins over the config's `metrics`. Refused (exit 2) when `WATCHDOG_ROOT` names a
/// recorded tree: that test seam is for `watch` and `run`, and the service acts on the
/// host's real processes.
pub fn run(config_path: &Path, host: Host, metrics: Option<String>) -> Result<ExitCode, Failure> {
    if let Some(dir) = host.recorded_root() {
        return Err(Failure::Usage(format!(
            "{} is set ({}): the service watches this machine's real processes and cannot read a recorded tree; expected {} unset (it is a test seam for watch and run)",
            watchdog_config::WATCHDOG_ROOT,
            dir.display(),
            watchdog_config::WATCHDOG_ROOT,
        )));
    }
    let mut service = Service::setup(config_path, host, metrics)?;
    let interval = service.config.interval;
    if let Driven::Stopped(sig) = schedule::drive(&mut service, interval) {
        service.shut_down(sig);
    }
    Ok(ExitCode::SUCCESS)
}

/// The signals the service acts on, caught before anything else is set up.
struct Signals {
    /// The last SIGINT or SIGTERM (0: none).
    stop: Arc<AtomicUsize>,
    /// SIGHUP: read the config again.
    reload: Arc<AtomicBool>,
    /// SIGUSR2: write every run's recording now.
    record_now: Arc<AtomicBool>,
    /// Woken by SIGINT, SIGTERM and SIGHUP, whatever the interval.
    wake: Wake,
}

impl Signals {
    /// Registers the flags, then the wake-up (after them, so a woken loop sees the flag).
    fn catch() -> Result<Signals, Failure> {
        let stop = Arc::new(AtomicUsize::new(0));
        for sig in [libc::SIGINT, libc::SIGTERM] {
            signal_hook::flag::register_usize(sig, stop.clone(), sig as usize)
                .map_err(|e| Failure::Runtime(format!("cannot catch signal {sig}: {e}")))?;
        }
        let reload = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(libc::SIGHUP, reload.clone())
            .map_err(|e| Failure::Runtime(format!("cannot catch SIGHUP: {e}")))?;
        let record_now = Arc::new(AtomicBool::new(false));
        let _ = signal_hook::flag::register(libc::SIGUSR2, record_now.clone());
        let wake = Wake::for_this_loop()
            .and_then(|w| {
                w.on_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
                    .map(|()| w)
            })
            .map_err(|e| Failure::Runtime(format!("cannot set up the loop's wake-up: {e}")))?;
        Ok(Signals {
            stop,
            reload,
            record_now,
            wake,
        })
    }
}

/// The service between its start and its stop: what it was set up with, the runs it
/// watches, and when each of its chores next falls due.
struct Service<'a> {
    config_path: &'a Path,
    config: DaemonConfig,
    /// Whether `--metrics` was given (a reload does not change its address).
    metrics_flag: bool,
    stop: Arc<AtomicUsize>,
    reload: Arc<AtomicBool>,
    wake: Wake,
    starter: Starter,
    shared: Arc<SharedReads>,
    published: Arc<Published>,
    register_rx: mpsc::Receiver<Pending>,
    socket: ServerHandle,
    metrics: Option<MetricsHandle>,
    notifier: ServiceNotifier,
    scanner: Scanner,
    runs: Vec<Run>,
    /// Started once a rule matches on `gpu` (now or after a reload).
    gpu: Option<GpuSet>,
    gpu_generation: u64,
    gpu_pids: HashSet<u32>,
    next_scan: Instant,
    /// The number of runs systemd was last told of.
    last_count: usize,
    /// What the wait polls besides the wake-up socket: every run's kernel descriptors and
    /// its target's pidfd until it exits, refilled before each wait (no allocation once
    /// warm) ...
    wait_set: WaitSet,
    /// ... the run each belongs to, and whether it is that run's pidfd.
    wait_owners: Vec<(usize, bool)>,
}

impl<'a> Service<'a> {
    /// Catches the signals, loads the config, opens the directories, serves the socket and
    /// the metrics, and tells systemd it is ready.
    fn setup(
        config_path: &'a Path,
        host: Host,
        metrics: Option<String>,
    ) -> Result<Service<'a>, Failure> {
        let Signals {
            stop,
            reload,
            record_now,
            wake,
        } = Signals::catch()?;
        let config = DaemonConfig::load(config_path).map_err(Failure::Usage)?;
        let user_dirs = UserDirs::open(&config.request_dir).map_err(|e| request_dir_failure(&e))?;
        check_state_dir(&config.state_dir).map_err(Failure::Usage)?;
        let recorders = Recorders::start().map_err(Failure::Runtime)?;
        let published = Arc::new(Published::on_demand(
            "daemon",
            config.interval.as_secs_f64(),
            wake.waker(),
        ));
        let (register_tx, register_rx) = mpsc::channel::<Pending>();
        let socket = serve_socket(&config.socket, &host, &published, register_tx, wake.waker())?;
        // The flag's address stays whatever a reload says.
        let metrics_flag = metrics.is_some();
        let metrics = serve_metrics(
            metrics.or_else(|| config.metrics.map(|a| a.to_string())),
            &published,
        )?;
        let notifier = ServiceNotifier::from_host(&host).unwrap_or_else(|e| {
            tracing::warn!("systemd will not hear from the service: {e}");
            ServiceNotifier::disabled()
        });
        let scanner = Scanner::with_excluded(&host.proc, Some(std::process::id()));
        // Host-wide files and filesystems, read once per tick for all runs.
        let shared = SharedReads::new();
        let starter = Starter {
            reads: Reads::Shared(Arc::clone(&shared)),
            host,
            user_dirs,
            recorders,
            record_now,
        };
        tracing::info!(
            "watching for training runs: {} rule(s), sampling every {}, status on {}",
            config.rules.len(),
            watchdog_types::units::format_duration_s(config.interval.as_secs_f64()),
            config.socket.display()
        );
        let _ = notifier.ready("watching 0 runs");
        watchdog_watch::ready::notify_service(&config.socket);
        let now = Instant::now();
        Ok(Service {
            config_path,
            config,
            metrics_flag,
            stop,
            reload,
            wake,
            starter,
            shared,
            published,
            register_rx,
            socket,
            metrics,
            notifier,
            scanner,
            runs: Vec::new(),
            gpu: None,
            gpu_generation: 0,
            gpu_pids: HashSet::new(),
            next_scan: now,
            last_count: usize::MAX,
            wait_set: WaitSet::default(),
            wait_owners: Vec::new(),
        })
    }

    /// Loads the config again after a SIGHUP; a bad one is refused and the old one stays.
    fn reload(&mut self) {
        let _ = self.notifier.reloading();
        let loaded = DaemonConfig::load(self.config_path)
            .and_then(|new| check_state_dir(&new.state_dir).map(|()| new));
        match loaded {
            Ok(new) => {
                let config = &self.config;
                if new.socket != config.socket
                    || new.request_dir != config.request_dir
                    || (new.metrics != config.metrics && !self.metrics_flag)
                    || new.interval != config.interval
                {
                    tracing::warn!(
                        "reload: socket, request_dir, metrics and interval take effect at the next restart"
                    );
                }
                tracing::info!(
                    "config reloaded from {}: {} rule(s); runs already watched keep their settings",
                    self.config_path.display(),
                    new.rules.len()
                );
                self.config = DaemonConfig {
                    socket: config.socket.clone(),
                    request_dir: config.request_dir.clone(),
                    metrics: config.metrics,
                    interval: config.interval,
                    ..new
                };
            }
            Err(e) => tracing::error!("reload refused, the previous config stays: {e}"),
        }
        // systemd waits for READY=1 after RELOADING=1, whatever the outcome.
        let _ = self
            .notifier
            .ready(&format!("watching {} runs", self.runs.len()));
    }

    /// Answers the registrations the socket passed on.
    fn take_registrations(&mut self) {
        while let Ok(p) = self.register_rx.try_recv() {
            let answer = register(
                p.pid,
                &self.gpu_pids,
                &self.starter,
                &mut self.scanner,
                &self.config,
                &mut self.runs,
            );
            let _ = p.reply.send(answer);
        }
    }

    /// Starts GPU watching once a rule needs it, and looks again at the processes that
    /// came to hold GPU memory since they were found.
    fn follow_gpu(&mut self) {
        if self.gpu.is_none() && self.config.rules.iter().any(Rule::uses_gpu) {
            self.gpu = Some(GpuSet::start(self.config.gpu_library(&self.starter.host)));
        }
        let Some((generation, pids)) = self
            .gpu
            .as_ref()
            .and_then(|g| g.newer_than(self.gpu_generation))
        else {
            return;
        };
        self.gpu_generation = generation;
        // A process found before it held GPU memory is looked at again now.
        let inside = self.watched();
        let new: Vec<u32> = pids
            .difference(&self.gpu_pids)
            .copied()
            .filter(|&pid| {
                !self
                    .scanner
                    .inside_watched_tree(pid, |p| inside.contains(&p))
            })
            .collect();
        let mut entered: Vec<ProcessFacts> = new
            .into_iter()
            .filter_map(|pid| self.scanner.facts(pid))
            .collect();
        entered.sort_by_key(|f| f.pid);
        self.gpu_pids = pids;
        self.start_matching(&entered);
    }

    /// Finds the new processes and starts watching those a rule takes.
    fn scan(&mut self, now: Instant) {
        // Built only when the scan looks at a process: most scans find no new PID and
        // return before (with 100 runs, building it every scan was a tenth of the service).
        let (runs, inside) = (&self.runs, std::cell::OnceCell::new());
        let found = self
            .scanner
            .scan(|pid| inside.get_or_init(|| watched(runs)).contains(&pid));
        self.start_matching(&found);
        self.next_scan = now + self.config.scan_interval;
    }

    /// Starts a run for each process of `found` a rule takes (see [`start_matching`]).
    fn start_matching(&mut self, found: &[ProcessFacts]) {
        start_matching(
            found,
            &self.gpu_pids,
            &self.starter,
            &self.config,
            &mut self.runs,
        );
    }

    /// Every PID of every watched run.
    fn watched(&self) -> HashSet<u32> {
        watched(&self.runs)
    }

    /// Steps every run once, and concludes each that ended and was reaped.
    fn step_runs(&mut self, now: Instant) {
        let next_wake = self.next_chore_wake(now);
        let mut i = 0;
        while i < self.runs.len() {
            let run = &mut self.runs[i];
            // A run none of whose sources is due only has the processes its exited target
            // left looked at (its target's exit wakes the wait: `kernel_woke`); one due
            // soon is stepped now, so that the runs share this wake instead of each waking
            // the loop on its own.
            if run.ended.is_none() {
                let ended = if run.watch.due_soon(now, next_wake) {
                    run.watch.step(now)
                } else if run.watch.exit_fd().is_none() {
                    run.watch.look_for_the_end()
                } else {
                    false
                };
                if ended {
                    run.ended = Some(now);
                }
            }
            // An ended run waits, unsampled, for its parent to reap it (its exit status
            // comes from its pidfd then), for at most REAP_GRACE: the loop never blocks on it.
            let done = run.ended.is_some_and(|since| {
                run.watch.exit_status_ready() || now.duration_since(since) >= REAP_GRACE
            });
            if done {
                let mut run = self.runs.swap_remove(i);
                run.watch.conclude_within(Duration::ZERO);
            } else {
                i += 1;
            }
        }
    }

    /// When a chore wakes the loop next after the one at `now` (a scan due now is done
    /// before the sample, and next due a scan period on): a run due soon is stepped early
    /// only when it is due before that.
    fn next_chore_wake(&self, now: Instant) -> Option<Instant> {
        let scan = if self.next_scan > now {
            self.next_scan
        } else {
            now + self.config.scan_interval
        };
        [
            Some(scan),
            self.notifier.next_keepalive(now).filter(|&t| t > now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A kernel source of some runs woke the loop: each of those runs is sampled at once
    /// (its shared reads read afresh); a run whose target exited has its end looked for.
    fn kernel_woke(&mut self, now: Instant) {
        self.shared.next_tick();
        let mut last = None;
        for (slot, &(i, exit)) in self.wait_owners.iter().enumerate() {
            if !self.wait_set.is_ready(slot) {
                continue;
            }
            let Some(run) = self.runs.get_mut(i) else {
                continue;
            };
            if exit {
                // Its target exited: taken now, so its pidfd leaves the wait set.
                if run.ended.is_none() && run.watch.look_for_the_end() {
                    run.ended = Some(now);
                }
            } else if last != Some(i) {
                last = Some(i);
                run.watch.kernel_woke(now);
            }
        }
    }

    /// Builds the status the socket and the metrics serve when a reader asked for it, and
    /// tells systemd how many runs are watched when that changed.
    fn publish(&mut self) {
        let runs = &self.runs;
        if self.published.asked() {
            self.published
                .set_targets(runs.iter().map(|r| r.watch.status(r.since_unix)).collect());
        }
        if runs.len() != self.last_count {
            self.last_count = runs.len();
            let _ = self
                .notifier
                .status(&format!("watching {} runs", runs.len()));
        }
    }

    /// Tells systemd's watchdog the service is alive, when that is due.
    fn keep_alive(&mut self, now: Instant) {
        if self.notifier.keepalive_due(now) {
            let _ = self.notifier.keepalive(now);
        }
    }

    /// Stops on `sig`: concludes the runs that ended, leaves the others running unwatched.
    fn shut_down(self, sig: i32) {
        let Service {
            notifier,
            runs,
            socket,
            metrics,
            gpu,
            ..
        } = self;
        let _ = notifier.stopping();
        // A run that has ended (waiting to be reaped) is concluded, not left running.
        let (ended, mut going): (Vec<Run>, Vec<Run>) =
            runs.into_iter().partition(|run| run.ended.is_some());
        for mut run in ended {
            run.watch.conclude_within(Duration::ZERO);
        }
        for run in &mut going {
            run.watch.leave(sig);
        }
        tracing::info!(
            "stopped by signal {sig}; {} run(s) left running unwatched",
            going.len()
        );
        drop(socket);
        drop(metrics);
        drop(gpu);
    }
}

/// The service on the loop of [`schedule`]: every run sampled at each deadline, and woken
/// between samples for a signal, a registration, a scan, a publish or a keep-alive that
/// falls due before the next sample (`interval` may be a minute).
impl Loop for Service<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn stop(&mut self) -> Option<i32> {
        let sig = self.stop.load(Ordering::Relaxed);
        (sig != 0).then_some(sig as i32)
    }

    fn before_sample(&mut self, now: Instant) {
        if self.reload.swap(false, Ordering::Relaxed) {
            self.reload();
        }
        self.shared.next_tick();
        self.take_registrations();
        self.follow_gpu();
        if now >= self.next_scan {
            self.scan(now);
        }
    }

    fn sample(&mut self, now: Instant) {
        self.step_runs(now);
    }

    fn after_sample(&mut self, now: Instant) {
        self.publish();
        self.keep_alive(now);
    }

    fn late(&mut self, ticks: u64) {
        for run in &mut self.runs {
            run.watch.count_late(ticks);
        }
    }

    fn next_sample(&self) -> Option<Instant> {
        // An ended run waiting for its reap is looked at every interval.
        if self.runs.iter().any(|r| r.ended.is_some()) {
            return None;
        }
        // The earliest over the runs; with none, nothing to sample before the next scan
        // (a registration wakes the loop, and a new run is due at once).
        self.runs
            .iter()
            .filter_map(|r| r.watch.next_sample_at())
            .min()
            .or(Some(self.next_scan))
    }

    fn due_soon(&self, now: Instant) -> bool {
        let next_wake = self.next_chore_wake(now);
        self.runs
            .iter()
            .any(|r| r.ended.is_none() && r.watch.due_soon(now, next_wake))
    }

    fn next_chore(&self, now: Instant) -> Option<Instant> {
        [Some(self.next_scan), self.notifier.next_keepalive(now)]
            .into_iter()
            .flatten()
            .min()
    }

    fn wait(&mut self, until: Instant) -> Waited {
        let left = until.saturating_duration_since(Instant::now());
        let (set, owners) = (&mut self.wait_set, &mut self.wait_owners);
        set.clear();
        owners.clear();
        for (i, run) in self.runs.iter().enumerate() {
            if run.ended.is_none() {
                run.watch.each_kernel_fd(|fd, flags| {
                    set.push(fd, flags);
                    owners.push((i, false));
                });
                if let Some(fd) = run.watch.exit_fd() {
                    set.push(fd, watchdog_watch::wake::PollFlags::IN);
                    owners.push((i, true));
                }
            }
        }
        match self.wake.wait_set(set, left) {
            Ok(Woken::Ready) => Waited::Kernel,
            Ok(_) => Waited::Deadline,
            Err(e) => {
                tracing::warn!("cannot wait for the next tick: {e}");
                std::thread::sleep(left);
                Waited::Deadline
            }
        }
    }

    fn kernel_sample(&mut self, now: Instant) {
        self.kernel_woke(now);
    }
}

/// Every PID of every run in `runs`.
fn watched(runs: &[Run]) -> HashSet<u32> {
    runs.iter().flat_map(|r| r.watch.tree_pids()).collect()
}

/// Starts a run for each topmost process of `found` a rule takes, and names each of the
/// others in a debug line with the reason. A process that registered is started at once
/// (`register`), so none of these has: they are matched as unregistered.
fn start_matching(
    found: &[ProcessFacts],
    gpu_pids: &HashSet<u32>,
    starter: &Starter,
    config: &DaemonConfig,
    runs: &mut Vec<Run>,
) {
    for (facts, verdict) in judge(found, |p| config.rule_for(p, gpu_pids, false)) {
        let why = match verdict {
            Verdict::Taken(rule) => match starter.start(facts, rule, config) {
                Ok(run) => {
                    runs.push(run);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("PID {} is not watched: {}", facts.pid, e);
                    continue;
                }
            },
            Verdict::Inside(top) => format!("part of the run of PID {top}, found with it"),
            Verdict::NoMatch => "no rule matches".to_string(),
        };
        tracing::debug!(
            "PID {} of user {} ({}) skipped: {why}",
            facts.pid,
            facts.uid,
            quote_value(&facts.command)
        );
    }
}

/// What starting a run needs besides the run and its rule.
struct Starter {
    host: Host,
    user_dirs: UserDirs,
    recorders: Recorders,
    record_now: Arc<AtomicBool>,
    reads: Reads,
}

impl Starter {
    /// Starts watching the run `facts` describes under `rule`.
    fn start(
        &self,
        facts: &ProcessFacts,
        rule: &Rule,
        config: &DaemonConfig,
    ) -> Result<Run, Failure> {
        let settings = rule.settings(&self.host, config.interval, config.tree_interval);
        let run = ServiceRun {
            uid: facts.uid,
            command: facts.command.clone(),
            rule: rule.name().to_string(),
            user_dirs: &self.user_dirs,
            state_dir: &config.state_dir,
            reads: &self.reads,
            slurm: watchdog_slurm::cgroup::job_of_path(&facts.cgroup),
        };
        let watch = Watch::for_service(
            facts.pid,
            settings,
            run,
            &self.recorders,
            self.record_now.clone(),
        )?;
        tracing::info!(
            "rule \"{}\" matched PID {} of user {} ({}): watching it",
            rule.name(),
            facts.pid,
            facts.uid,
            quote_value(&facts.command)
        );
        Ok(Run {
            ended: None,
            watch,
            since_unix: watchdog_alerter::events::unix_time_s(SystemTime::now()),
        })
    }
}

/// Takes a registration the socket accepted: a run already watched is told where its
/// requests go; another is watched when a rule takes registered runs.
fn register(
    pid: u32,
    gpu_pids: &HashSet<u32>,
    starter: &Starter,
    scanner: &mut Scanner,
    config: &DaemonConfig,
    runs: &mut Vec<Run>,
) -> Response {
    let answer = |w: &Watch| {
        Response::Registered(Registration {
            pid: w.pid(),
            request_file: w.request_file().display().to_string(),
            signal: watchdog_types::units::signal_name(w.signal()),
        })
    };
    if let Some(run) = runs.iter().find(|r| r.watch.tree_pids().any(|p| p == pid)) {
        return answer(&run.watch);
    }
    let Some(facts) = scanner.facts(pid) else {
        return Response::error(&format!("PID {pid} is gone"));
    };
    let Some(rule) = config.rule_for(&facts, gpu_pids, true) else {
        return Response::error(&format!(
            "no rule of the daemon takes PID {pid} ({}): ask the administrator for a rule with `registered = true`",
            quote_value(&facts.command)
        ));
    };
    match starter.start(&facts, rule, config) {
        Ok(run) => {
            let registered = answer(&run.watch);
            runs.push(run);
            registered
        }
        Err(e) => Response::error(&e.to_string()),
    }
}

/// Why the request directory cannot be used. An unsafe one (a symlink, another owner,
/// writable by group or others, on procfs or sysfs) is the config's to fix: exit 2, so that systemd's
/// `RestartPreventExitStatus=2` stops there instead of restarting every 5 s for ever.
fn request_dir_failure(e: &BeneathError) -> Failure {
    match e {
        BeneathError::Refused { path, reason } => Failure::Usage(format!(
            "unsafe request_dir {}: {reason}; request_dir must be a directory (not a \
             symlink, not on a kernel filesystem) owned by the daemon's user and not writable \
             by group or others",
            path.display()
        )),
        // Below a file (`/etc/passwd/users`): also the config's to fix.
        BeneathError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotADirectory => {
            Failure::Usage(format!("cannot use request_dir: {e}"))
        }
        e => Failure::Runtime(format!("cannot use request_dir: {e}")),
    }
}

/// Refuses a `state_dir` on a kernel filesystem or [`unsafe_state_dir`], at start and at
/// a reload alike.
fn check_state_dir(dir: &Path) -> Result<(), String> {
    if let Some(name) = watchdog_sampler::disk::kernel_filesystem_at(dir) {
        return Err(format!(
            "state_dir {}: it is on {name}, a kernel interface where no recording can be \
             written; expected a directory on a filesystem that holds files, such as {}",
            dir.display(),
            crate::rules::DEFAULT_STATE_DIR
        ));
    }
    match unsafe_state_dir(dir) {
        Some(why) => Err(format!(
            "unsafe state_dir {}: {why}; expected root's own directory, not writable by \
             group or others (the default {} is made 0700)",
            dir.display(),
            crate::rules::DEFAULT_STATE_DIR
        )),
        None => Ok(()),
    }
}

/// Why an existing `state_dir` is unfit for the recordings of every user's runs (their
/// command lines and environments): not a directory (no run could be watched), another
/// user's, or one others may write to, where they could read those or plant files for
/// root to prune. `None` when fit or missing.
fn unsafe_state_dir(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    // Followed: a symlink to root's own directory elsewhere is fine.
    let m = std::fs::metadata(dir).ok()?;
    if !m.is_dir() {
        return Some("it is not a directory".to_string());
    }
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me {
        return Some(format!("it is owned by UID {}", m.uid()));
    }
    (m.mode() & 0o022 != 0).then(|| {
        format!(
            "its mode is {:04o}: group or others may write to it",
            m.mode() & 0o7777
        )
    })
}

/// Whether something other than a socket is at `path`, or its parent is no directory: a
/// socket path the config must change (exit 2, as for [`request_dir_failure`]).
fn not_a_socket_path(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    let parent_no_dir = path
        .parent()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| !m.is_dir());
    parent_no_dir || std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_socket())
}

/// Binds the status socket: status for anyone (their own runs; root sees all), and
/// registrations passed to the loop.
fn serve_socket(
    path: &Path,
    host: &Host,
    published: &Arc<Published>,
    register: mpsc::Sender<Pending>,
    waker: Waker,
) -> Result<ServerHandle, Failure> {
    if let Some(name) = watchdog_sampler::disk::kernel_filesystem_at(path) {
        return Err(Failure::Usage(format!(
            "cannot listen on {}: it is on {name}, a kernel interface where no socket can be \
             made; expected a path such as /run/watchdog/daemon.sock",
            path.display()
        )));
    }
    let server = StatusServer::bind(path).map_err(|e| {
        if not_a_socket_path(path) {
            Failure::Usage(e)
        } else {
            Failure::Runtime(e)
        }
    })?;
    let published = Arc::clone(published);
    let proc = host.proc.clone();
    let register = std::sync::Mutex::new(register);
    let handler = move |peer: &Peer, request: Request| match request {
        Request::Status => Response::Status(visible_to(&published.fresh(), peer.uid)),
        Request::Register { pid } => {
            if let Err(e) = may_register(&proc, peer, pid) {
                return Response::error(&e.to_string());
            }
            let (tx, rx) = mpsc::channel();
            let sent = register
                .lock()
                .map(|r| r.send(Pending { pid, reply: tx }).is_ok())
                .unwrap_or(false);
            if !sent {
                return Response::error("the daemon is stopping");
            }
            waker.wake();
            rx.recv_timeout(REGISTER_WAIT)
                .unwrap_or_else(|_| Response::error("the daemon did not answer in time"))
        }
    };
    Ok(server.serve(Arc::new(handler)))
}

/// Starts the Prometheus endpoint when the config names an address.
fn serve_metrics(
    addr: Option<String>,
    published: &Arc<Published>,
) -> Result<Option<MetricsHandle>, Failure> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let server = MetricsServer::bind(&addr).map_err(Failure::Usage)?;
    let source = Arc::clone(published);
    let handle = server.serve(Arc::new(move || (*source.fresh()).clone()));
    tracing::info!("metrics at http://{}/metrics", handle.local_addr());
    Ok(Some(handle))
}
