//! One watched run ([`Watch`]): its target, its sources, its engine and its outputs. Each
//! tick the sampler pushes one sample per resource into the ring buffer, the predictors
//! read them, and the watch acts on their decisions. Signals and the request file are
//! sent from the loop's thread (they take microseconds and must not wait); hooks and
//! desktop notifications go to a helper thread so a slow hook or a hung bus never delays
//! the next sample. The loop itself is [`crate::schedule`]'s: `single` runs one watch on
//! it for `--pid` and `run`, the service runs many.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use watchdog_alerter::beneath::UserDirs;
use watchdog_alerter::events::EventLog;
use watchdog_alerter::hook::HookUser;
use watchdog_alerter::request::RequestPlace;
use watchdog_engine::verdict::{self, ExitFacts};
use watchdog_engine::{Ending, Engine};
use watchdog_sampler::shared::Reads;
use watchdog_sampler::{ResourceTable, Sampler};
use watchdog_types::EventBody;
use watchdog_types::fs::Owner;
use watchdog_types::units::{format_duration_s, signal_name};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::outputs::{self, Outputs};
use crate::recorder::{self, FlightRecorder, Recorders};
use crate::target::{self, Target, TargetExit};
use crate::terminal;
use crate::wake::Wake;
use crate::{Failure, Published};
use lineage::Waiting;
use watchdog_config::Settings;

mod actions;
mod clock;
mod courier;
mod deliver;
mod evidence;
mod kernel;
mod kmsg;
mod lifecycle;
mod lineage;
mod notice;
mod output;
mod record;
mod replies;
mod restart;
mod series;
mod single;
mod slurm;
mod sources;
mod steps_intake;

/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Ring buffer capacity in samples: seconds of every resource at 100 Hz; the recorder
/// thread is asked to drain it when three quarters full.
pub const RING_CAPACITY: usize = 4096;
/// How far back "just before the exit" reaches for the verdict.
const RECENT_MS: u32 = 3_000;

/// `watchdog --pid PID`: watch a running process until it exits.
/// `published` receives its status for `--metrics`.
pub fn attach(
    pid: u32,
    settings: Settings,
    published: Option<Arc<Published>>,
) -> Result<ExitCode, Failure> {
    // Signals first: from here on, SIGUSR2 and a stop request are ours to handle.
    let record_now = catch_record_signal();
    let stop = Arc::new(AtomicUsize::new(0));
    let stops = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    for sig in stops {
        if let Err(e) = signal_hook::flag::register_usize(sig, stop.clone(), sig as usize) {
            tracing::debug!("cannot catch signal {sig}: {e}");
        }
    }
    // After the flag: a stop wakes the loop at once, not at the next tick.
    let wake = new_wake()?;
    wake.on_signals(&stops)
        .map_err(|e| Failure::Runtime(format!("cannot catch the stop signals: {e}")))?;
    let target = Target::attach(&settings.host.proc, pid)?;
    let cwd = outputs::live_cwd(&settings.host, pid);
    let outputs = Outputs::plan(&settings, pid, cwd.as_deref())?;
    let prepared = Prepared::new(&settings, Some(pid))?;
    let recorders = Recorders::start().map_err(Failure::Runtime)?;
    // The record is the run's user's: kept only when that user is the watchdog's.
    let own_user = settings
        .host
        .proc
        .uids(pid)
        .is_ok_and(|u| u.effective == rustix::process::geteuid().as_raw());
    let book = match (&cwd, own_user) {
        (Some(cwd), true) => {
            let env = settings.host.proc.environ(pid).unwrap_or_default();
            let key = record::run_key(&env);
            Some(record::Book::new(
                settings.checkpoint_record.as_deref(),
                cwd,
                key,
                1,
            ))
        }
        _ => None,
    };
    let mut watch = Watch::new(target, settings, prepared, outputs, record_now, &recorders)?;
    watch.series.record = book;
    watch.notices.cloud = notice::cloud_poller(&watch.settings);
    // Stopping the watchdog (Ctrl-C, kill) ends the watch with a summary, not silently.
    let waiting = Waiting {
        wake: Some(&wake),
        stop: Some(&stop),
    };
    match single::watch_one(&mut watch, waiting, published) {
        Ended::Target(_) => Ok(ExitCode::SUCCESS),
        Ended::Stopped(sig) => Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
    }
}

/// The loop's [`Wake`] (the calling thread is the loop's), or why there is none.
fn new_wake() -> Result<Wake, Failure> {
    Wake::for_this_loop()
        .map_err(|e| Failure::Runtime(format!("cannot create the loop's wake-up socket: {e}")))
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
/// `published` receives its status for `--metrics`.
pub fn run_command(
    argv: &[std::ffi::OsString],
    settings: Settings,
    published: Option<Arc<Published>>,
) -> Result<ExitCode, Failure> {
    if settings.restart > 0 {
        return lifecycle::run(argv, settings, published);
    }
    // The command starts in our working directory, which may have been deleted.
    let own = std::process::id();
    let mut session = Session::open()?;
    let cwd = outputs::live_cwd(&settings.host, own);
    let outputs = Outputs::plan(&settings, own, cwd.as_deref())?;
    let start = record::RunStart::new(&settings, cwd.as_deref());
    start.announce();
    start.check_requeue(settings.requeue);
    let mut watch = session.attempt(argv, settings, outputs, &start.env())?;
    start.fit(&mut watch, 1, start.resume.as_ref().and_then(|r| r.step));
    match single::watch_one(&mut watch, session.waiting(), published) {
        Ended::Target(exit) => Ok(ExitCode::from(exit.shell_status())),
        Ended::Stopped(sig) => Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
    }
}

/// What `run` sets up once for all its attempts: the signals it catches and forwards, the
/// loop's wake-up, the recorder thread.
struct Session {
    record_now: Arc<AtomicBool>,
    /// The forwarded signals until the first command starts, then where they go.
    forwarded: Option<target::Forwarded>,
    forward_to: Option<target::ForwardTo>,
    /// The thread forwarding them, stopped with the session.
    forwarding: Option<target::Forwarding>,
    unforwarded: Arc<AtomicUsize>,
    wake: Wake,
    recorders: Option<Recorders>,
    subreaper: bool,
}

impl Session {
    /// Catches the signals, first, so none can kill the watchdog between a spawn and its watch.
    fn open() -> Result<Session, Failure> {
        let record_now = catch_record_signal();
        let forwarded = target::catch_forwarded_signals()?;
        Ok(Session {
            record_now,
            forwarded: Some(forwarded),
            forward_to: None,
            forwarding: None,
            unforwarded: Arc::new(AtomicUsize::new(0)),
            wake: new_wake()?,
            recorders: None,
            subreaper: false,
        })
    }

    /// Starts the command once more with the `extra` environment and watches it.
    fn attempt(
        &mut self,
        argv: &[std::ffi::OsString],
        settings: Settings,
        outputs: Outputs,
        extra: &[(String, String)],
    ) -> Result<Watch, Failure> {
        let prepared = Prepared::new(&settings, None)?;
        let mut env = target::child_env(settings.signal, &outputs.request_file, settings.interval);
        env.extend(extra.iter().cloned());
        // Before the spawn, so nothing the command backgrounds can leave the watch.
        if !self.subreaper {
            lineage::become_subreaper()?;
            self.subreaper = true;
        }
        let target = Target::spawn(&settings.host.proc, argv, &env)?;
        let pidfd = target.pidfd.clone();
        let forwarding = match (&self.forward_to, self.forwarded.take()) {
            (Some(to), _) => {
                to.retarget(pidfd.clone());
                Ok(())
            }
            (None, Some(signals)) => {
                let notice = !settings.dry_run && !settings.term_grace.is_zero();
                let to = target::ForwardTo::new(pidfd.clone(), notice);
                self.forward_to = Some(to.clone());
                target::forward_signals(
                    signals,
                    to,
                    self.unforwarded.clone(),
                    self.wake.waker(),
                    settings.host.proc.clone(),
                )
                .map(|f| self.forwarding = Some(f))
            }
            (None, None) => Ok(()),
        };
        let recorders = match self.recorders.take() {
            Some(r) => Ok(r),
            None => Recorders::start().map_err(Failure::Runtime),
        };
        let built = forwarding.and(recorders).and_then(|r| {
            let watch = Watch::new(
                target,
                settings,
                prepared,
                outputs,
                self.record_now.clone(),
                &r,
            );
            self.recorders = Some(r);
            watch
        });
        match built {
            Ok(mut w) => {
                w.run.unforwarded = Some(self.unforwarded.clone());
                w.notices.cloud = notice::cloud_poller(&w.settings);
                w.notices.term = self.forward_to.as_ref().and_then(|to| to.notice.clone());
                Ok(w)
            }
            Err(e) => {
                // Never leave the command running unwatched.
                let _ = pidfd.send_signal(libc::SIGKILL);
                Err(e)
            }
        }
    }

    /// What an attempt's watch waits on between ticks: the wake-up (a signal `run` could
    /// not forward wakes it); no stop flag, the stop signals go to the command.
    fn waiting(&self) -> Waiting<'_> {
        Waiting {
            wake: Some(&self.wake),
            stop: None,
        }
    }

    /// The last SIGINT, SIGTERM or SIGHUP the watchdog received (0: none).
    fn received_stop(&self) -> usize {
        self.forward_to
            .as_ref()
            .map_or(0, |to| to.received.load(Ordering::Relaxed))
    }
}

/// What is set up before the target is started, so bad input fails before a child runs.
pub struct Prepared {
    events: Option<EventLog>,
    table: ResourceTable,
    gpu: sources::GpuSetup,
}

impl Prepared {
    /// Opens the events file and starts GPU watching for a target (`pid`: `None` for a
    /// command not started yet).
    pub fn new(settings: &Settings, pid: Option<u32>) -> Result<Prepared, Failure> {
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

/// One watched run: its target, sources, engine and outputs. The loop is outside it
/// ([`crate::schedule`]): the single-run watchdog drives one, the service many, one
/// [`Watch::step`] each per tick.
pub struct Watch {
    /// The watch's settings, resolved.
    settings: Settings,
    /// The target, what it leaves running, and who it belongs to.
    run: lineage::Run,
    /// The run's sources, read into the ring buffer.
    sampler: Sampler,
    /// Every decision about the run: samples in, a plan out.
    engine: Engine,
    /// The kernel's wake-ups armed for this run.
    kernel: kernel::KernelWake,
    /// What the watch writes: the events file, the request file, the recording.
    out: output::Output,
    /// What carries an alert off the loop's thread: hooks and notifications.
    courier: courier::Courier,
    /// What the run writes back: acknowledgments, step reports, its environment.
    replies: replies::Replies,
    /// What the verdict looks at besides the samples: OOM kills, the kernel's log.
    evidence: evidence::Evidence,
    /// The attempts this run is one of: a restart attempt, the checkpoint record, the
    /// SLURM job.
    series: series::Series,
    /// Announced ends: SIGTERM held for a save, the cloud's preemption notice.
    notices: notice::Notices,
    /// When the watch started, and its ticks.
    clock: clock::Clock,
}

/// What a watch is started with besides its target and settings.
struct Parts {
    prepared: Prepared,
    outputs: Outputs,
    record_now: Arc<AtomicBool>,
    request: RequestPlace,
    hook_user: Option<HookUser>,
    reads: Reads,
    slurm: sources::SlurmAsk,
}

/// What the service knows of a run it starts watching.
pub struct ServiceRun<'a> {
    /// The owner's uid.
    pub uid: u32,
    /// The command line, as discovery read it.
    pub command: String,
    /// The rule that matched it.
    pub rule: String,
    /// The per-user request directories.
    pub user_dirs: &'a UserDirs,
    /// Where recordings are kept.
    pub state_dir: &'a Path,
    /// The SLURM job its cgroup lies under (taken from the path alone), if any.
    pub slurm: Option<watchdog_slurm::cgroup::JobCgroup>,
    /// The service's shared reads: host-wide files read once per tick for all runs.
    pub reads: &'a Reads,
}

/// What status readers show of a run besides its figures.
#[derive(Debug, Clone, Default)]
pub struct Label {
    /// The owner's uid.
    pub uid: u32,
    /// The owner's name (the uid as text when it has none).
    pub user: String,
    /// The command line, clipped.
    pub command: String,
    /// The service's rule that matched it.
    pub rule: Option<String>,
    /// The SLURM job its cgroup lies under (the service).
    pub slurm: Option<watchdog_slurm::cgroup::JobCgroup>,
}

/// The run's user when root watches another user's run (`--pid` under
/// `watchdog@.service`) and writes its request file in root's own directory: the file is
/// given to them whatever root's umask. Never where a user could steer the path (a
/// directory or parent of theirs, or writable by others): a file given to a user there
/// could be one root was tricked into making anywhere.
fn given_to(proc: &watchdog_procfs::ProcRoot, pid: u32, request_file: &Path) -> Option<Owner> {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let dir = watchdog_types::fs::parent_dir(request_file);
    let roots_own = |d: &Path| {
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0)
    };
    if !dir.is_absolute() || !dir.ancestors().all(roots_own) {
        return None;
    }
    // /proc/PID belongs to the process's effective UID and GID.
    let (uid, gid) = proc.owner(pid).ok()?;
    (uid != 0).then_some(Owner { uid, gid })
}

impl Watch {
    /// Starts watching `target`: sources, engine, recorder (on `recorders`' thread), the
    /// start event. `record_now` is the flag SIGUSR2 sets.
    pub fn new(
        target: Target,
        settings: Settings,
        prepared: Prepared,
        outputs: Outputs,
        record_now: Arc<AtomicBool>,
        recorders: &Recorders,
    ) -> Result<Watch, Failure> {
        let path = outputs.request_file.clone();
        let request = match given_to(&settings.host.proc, target.pid, &path) {
            Some(owner) => RequestPlace::Given { path, owner },
            None => RequestPlace::Path(path),
        };
        let parts = Parts {
            prepared,
            outputs,
            record_now,
            request,
            hook_user: None,
            reads: Reads::Own,
            slurm: sources::SlurmAsk::FromEnvironment,
        };
        Watch::start(target, settings, parts, recorders)
    }

    /// Starts watching a run the service found: requests beneath its user's own directory
    /// (made by the service), hooks as that user, the recording in the service's state
    /// directory.
    pub fn for_service(
        pid: u32,
        mut settings: Settings,
        run: ServiceRun<'_>,
        recorders: &Recorders,
        record_now: Arc<AtomicBool>,
    ) -> Result<Watch, Failure> {
        let target = Target::attach(&settings.host.proc, pid)?;
        let uid = run.uid;
        let user = HookUser::of_uid(uid)
            .map_err(|e| Failure::Runtime(format!("user {uid} of PID {pid}: {e}")))?;
        let dir = run.user_dirs.for_user(uid, user.gid).map_err(|e| {
            Failure::Runtime(format!(
                "cannot make the request directory of user {uid}: {e}"
            ))
        })?;
        let request = RequestPlace::beneath(Arc::new(dir), format!("{pid}.request.json"))
            .map_err(|e| Failure::Runtime(e.to_string()))?;
        settings.request_file = Some(request.path());
        let outputs = Outputs::for_service(request.path(), pid, run.state_dir, settings.dry_run)?;
        let prepared = Prepared::new(&settings, Some(pid))?;
        let label = Label {
            uid,
            user: user.name.clone(),
            command: run.command,
            rule: Some(run.rule),
            slurm: run.slurm.clone(),
        };
        let parts = Parts {
            prepared,
            outputs,
            record_now,
            request,
            hook_user: Some(user),
            reads: run.reads.clone(),
            slurm: match &run.slurm {
                Some(job) => sources::SlurmAsk::FromCgroup(job.job),
                None => sources::SlurmAsk::No,
            },
        };
        let mut watch = Watch::start(target, settings, parts, recorders)?;
        watch.run.label = label;
        Ok(watch)
    }

    /// Builds the parts of a watch of `target` and announces its start.
    fn start(
        target: Target,
        settings: Settings,
        parts: Parts,
        recorders: &Recorders,
    ) -> Result<Watch, Failure> {
        let clock = clock::Clock::started();
        let Prepared {
            events,
            mut table,
            gpu,
        } = parts.prepared;
        let reads = &parts.reads;
        let mut built = sources::build(&target, &settings, &mut table, gpu, reads, parts.slurm);
        let (mut sampler, reader) = sampler_for(&target, &settings, &mut built, reads)?;
        let courier = courier::Courier::of(&settings, parts.hook_user);
        lineage::follow_the_run(sampler.tree_mut(), &courier.hooks, target.is_child());
        let kernel = kernel::KernelWake::arm(built.cgroup.as_ref(), &settings.host.proc);
        let engine = engine_for(&settings, &table, &kernel);
        let flight = flight_recorder(&target, &settings, &table, &mut built, &clock);
        let start_environment = flight.environment().cloned();
        let gpu_view = std::mem::take(&mut built.gpu_view);
        let replies =
            replies::Replies::new(&parts.request, settings.dry_run, gpu_view, clock.start);
        let kmsg = kmsg::Kmsg::open_at_end(&settings.host.kmsg);
        let out = output::Output {
            events,
            request: parts.request,
            plan: parts.outputs,
            recording: output::Recording::Live(recorders.add(flight, reader)),
            record_now: parts.record_now,
        };
        let mut watch = Watch {
            settings,
            run: lineage::Run::of(target),
            sampler,
            engine,
            kernel,
            out,
            courier,
            replies,
            evidence: evidence::Evidence::at_start(built.oom_counter.take(), kmsg),
            series: series::Series::in_job(built.job.take(), built.slurm.take()),
            notices: notice::Notices::default(),
            clock,
        };
        watch.clear_old_request();
        watch.announce_start(&built.unwatched, start_environment);
        Ok(watch)
    }

    /// Removes a request file an earlier run left (not in a dry run).
    fn clear_old_request(&self) {
        if !self.settings.dry_run
            && let Err(e) = watchdog_alerter::request::clear_request(&self.out.request)
        {
            tracing::warn!("cannot remove an old request file: {e}");
        }
    }

    fn announce_start(
        &mut self,
        unwatched: &[(String, String)],
        environment: Option<watchdog_types::environment::Environment>,
    ) {
        let (interval_s, max_interval_s) = (
            self.settings.interval.as_secs_f64(),
            self.engine.max_interval_s(),
        );
        let rates = self
            .engine
            .resources()
            .map(|r| {
                let (watched_by, why) = self.kernel.watched_by(r.id);
                watchdog_types::ResourceRate {
                    resource: r.name.clone(),
                    interval_s,
                    max_interval_s,
                    watched_by,
                    why,
                }
            })
            .collect();
        let s = &self.settings;
        tracing::info!(
            "watching PID {} ({}) every {} with a {} lead; request file {}{}",
            self.run.target.pid,
            self.run.target.name,
            format_duration_s(s.interval.as_secs_f64()),
            format_duration_s(s.lead.as_secs_f64()),
            self.out.plan.request_file.display(),
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
            pid: self.run.target.pid,
            watchdog_pid: std::process::id(),
            interval_s: s.interval.as_secs_f64(),
            lead_s: s.lead.as_secs_f64(),
            dry_run: s.dry_run,
            environment: environment.map(Box::new),
            rates,
            wake_sources: std::iter::once("pidfd".to_string())
                .chain(self.kernel.armed().iter().cloned())
                .collect(),
            unarmed: self
                .kernel
                .unarmed()
                .iter()
                .map(|(source, reason)| watchdog_types::Unarmed {
                    source: source.clone(),
                    reason: reason.clone(),
                })
                .collect(),
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
            self.run.target.pid,
            &self.out.plan.request_file,
            self.out.plan.recording.as_deref(),
        );
    }

    /// One tick of the service's loop: sample, decide, act, read what the run wrote back;
    /// `true` once the run has ended (call [`conclude`](Self::conclude) then). Never blocks.
    /// The target's exit is the caller's to see through [`exit_fd`](Self::exit_fd) (then
    /// [`look_for_the_end`](Self::look_for_the_end)); once it was taken, the processes it
    /// left are looked at here.
    pub fn step(&mut self, now: Instant) -> bool {
        self.tick(now);
        self.read_from_the_run(now);
        if self.exit_fd().is_some() {
            return self.run.over;
        }
        self.look_for_the_end()
    }

    /// When this run's first source is next due (`None`: none left to read).
    pub fn next_sample_at(&self) -> Option<Instant> {
        self.sampler
            .next_due_ns()
            .map(|ns| self.clock.start + Duration::from_nanos(ns))
    }

    /// Whether a source of this run is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next_sample_at().is_some_and(|at| now >= at)
    }

    /// Whether a step at `now` would read a source of this run: one is due, or one is due
    /// soon enough to be read early rather than wake the loop on its own, the caller's
    /// next wake (`next_wake`) coming after it is due ([`Sampler::due_soon`]).
    pub fn due_soon(&self, now: Instant, next_wake: Option<Instant>) -> bool {
        let ns = |t: Instant| t.saturating_duration_since(self.clock.start).as_nanos() as u64;
        self.sampler
            .due_soon(ns(now), next_wake.map_or(u64::MAX, ns))
    }

    /// Calls `f` with each kernel descriptor of this run to poll, and its poll flag
    /// ([`kernel_woke`](Self::kernel_woke) when one is ready).
    pub fn each_kernel_fd(
        &self,
        f: impl FnMut(std::os::fd::BorrowedFd<'_>, watchdog_kernel_wake::PollFlags),
    ) {
        self.kernel.each_fd(f);
    }

    /// The target's pidfd, readable once it exits, while its exit has not been taken: a
    /// loop that polls it beside the kernel descriptors need not
    /// [`look_for_the_end`](Self::look_for_the_end) of a run at every wake.
    pub fn exit_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.run
            .exit
            .is_none()
            .then(|| std::os::fd::AsFd::as_fd(&*self.run.target.pidfd))
    }

    /// A kernel source of this run woke the loop: reads what it signalled (so it does not
    /// stay ready) and samples at once what it said moved: the cgroup's source for a cgroup
    /// source, every source for PSI (memory is short somewhere).
    pub fn kernel_woke(&mut self, now: Instant) {
        let woke = self.kernel.consume();
        match self.kernel.cgroup_resources() {
            Some(ids) if woke.cgroup => self.sampler.make_due(&ids),
            _ => self.sampler.all_due(),
        }
        self.tick(now);
        self.read_from_the_run(now);
    }

    /// Looks, without waiting, whether the run ended (collecting the target's status, and
    /// the processes it left running, as [`step`](Self::step) does); then [`ended`](Self::ended).
    pub fn look_for_the_end(&mut self) -> bool {
        if !self.run.over {
            self.wait_for_the_run(&Waiting::default(), Duration::ZERO);
        }
        self.run.over
    }

    /// Whether the run ended: its target exited and no process of the run is left, as of
    /// the last [`step`](Self::step) or [`look_for_the_end`](Self::look_for_the_end).
    pub fn ended(&self) -> bool {
        self.run.over
    }

    /// Counts `ticks` deadlines the loop's last sample overran while this run was watched
    /// (the summary's "K late").
    pub fn count_late(&mut self, ticks: u64) {
        self.clock.late_ticks += ticks;
    }

    /// The end of a run: one last look for the verdict (a full disk stays full after the
    /// writer died; nothing is acted on, the target is gone), the summary, the exit event
    /// and the last recording. Waits up to `target::REAPED_WITHIN` for the exit status of
    /// a target that is not the watchdog's child.
    pub fn conclude(&mut self) -> TargetExit {
        self.conclude_within(crate::target::REAPED_WITHIN)
    }

    /// Whether the ended run's exit status can be had without waiting (see
    /// [`Target::status_ready`](crate::target::Target::status_ready)). Never blocks.
    pub fn exit_status_ready(&self) -> bool {
        self.run.target.status_ready()
    }

    /// [`conclude`](Self::conclude), waiting at most `wait` for the exit status.
    pub fn conclude_within(&mut self, wait: Duration) -> TargetExit {
        // The last look reads every source, due or not.
        self.sampler.all_due();
        self.sample(Instant::now());
        self.check_python_environment();
        self.read_last_steps_and_saves();
        self.engine.discard_pending();
        if self.engine.alerts_sent() > 0 {
            // A target that acknowledges and exits at once must still have its ack recorded.
            self.check_ack();
        }
        self.check_checkpoints();
        self.conclude_preemption();
        let exit = self.run.target.reap_within(wait);
        self.finish(exit);
        exit
    }

    /// Stops watching a run that goes on (the watchdog was told to stop by `sig`).
    pub fn leave(&mut self, sig: i32) {
        let _ = self.stopped(sig);
    }

    /// The target's PID.
    pub fn pid(&self) -> u32 {
        self.run.target.pid
    }

    /// Labels the status with the target's owner and command line, for `--metrics`.
    fn label_from_proc(&mut self) {
        self.run.label = crate::target::label(&self.settings.host.proc, self.run.target.pid);
    }

    /// Sets what status readers show of the run besides its figures.
    pub fn set_label(&mut self, label: Label) {
        self.run.label = label;
    }

    /// The watched tree as of the last refresh, target first.
    pub fn tree_pids(&self) -> impl Iterator<Item = u32> + '_ {
        let tree = self.sampler.tree_pids();
        let target = (!tree.contains(&self.run.target.pid)).then_some(self.run.target.pid);
        tree.iter().copied().chain(target)
    }

    /// The checkpoint signal.
    pub fn signal(&self) -> i32 {
        self.settings.signal
    }

    /// Where this run's checkpoint requests are written.
    pub fn request_file(&self) -> &Path {
        &self.out.plan.request_file
    }

    /// The run as status readers see it.
    pub fn status(&self, since_unix: f64) -> watchdog_types::status::TargetStatus {
        let (acks, checkpoint_s) = self.engine.checkpoints();
        watchdog_types::status::TargetStatus {
            pid: self.run.target.pid,
            uid: self.run.label.uid,
            user: self.run.label.user.clone(),
            command: self.run.label.command.clone(),
            rule: self.run.label.rule.clone(),
            slurm_job_id: self.run.label.slurm.as_ref().map(|j| j.job),
            slurm_step: self.run.label.slurm.as_ref().and_then(|j| j.step.clone()),
            since_unix,
            lead_s: self.engine.lead_s(),
            request_file: self.out.plan.request_file.display().to_string(),
            alerts_sent: self.engine.alerts_sent() as u64,
            checkpoints_acknowledged: acks,
            checkpoint_seconds_total: checkpoint_s,
            samples_dropped: self.sampler.dropped(),
            resources: self.with_runtime(self.engine.resource_status()),
        }
    }

    /// `resources` with the run's wall time since its target started, as `runtime`
    /// without a limit when no runtime limit made it a watched resource (docs/metrics.md:
    /// `watchdog_runtime_seconds` is there for every run).
    fn with_runtime(
        &self,
        mut resources: Vec<watchdog_types::status::ResourceStatus>,
    ) -> Vec<watchdog_types::status::ResourceStatus> {
        use watchdog_types::ResourceKind;
        if resources.iter().any(|r| r.kind == ResourceKind::Runtime) {
            return resources;
        }
        let since_start = self
            .settings
            .host
            .proc
            .start_time(self.run.target.pid)
            .ok()
            .and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
        let used_ms = since_start.map_or(self.clock.elapsed_ms(), |d| {
            d.as_millis().min(u128::from(u64::MAX)) as u64
        });
        resources.push(watchdog_types::status::ResourceStatus::reading(
            "runtime",
            ResourceKind::Runtime,
            used_ms,
            None,
        ));
        resources
    }

    /// Reads what the run writes back, each on its own schedule (see `replies`): the
    /// acknowledgment, the Python client's environment until it came.
    fn read_from_the_run(&mut self, now: Instant) {
        self.look_at_the_ack(now);
        if self.replies.python_due(now) {
            self.check_python_environment();
        }
    }

    /// One look at the acknowledgment when one is due: a `stat`, and only when the file
    /// changed, the run's environment (a client wrote it), then the acknowledgment for the
    /// engine and for the checkpoints.
    fn look_at_the_ack(&mut self, now: Instant) {
        let requested = self.engine.alerts_sent() > 0;
        if !self.replies.ack_due(now, requested) || !self.replies.ack_changed() {
            return;
        }
        self.replies.client_showed(now);
        if self.replies.python_due(now) {
            self.check_python_environment();
        }
        self.check_ack();
        self.check_checkpoints();
    }

    /// Ends the watch on the watchdog's own SIGINT/SIGTERM/SIGHUP, the target still running.
    fn stopped(&mut self, sig: i32) -> Ended {
        terminal::clear_status();
        self.end_hooks();
        let alerts = self.engine.alerts_sent();
        let last = self.out.last_recording();
        terminal::summary(&format!(
            "watchdog: stopped by {} after {}; PID {} ({}) is still running. {alerts} alert(s) sent.{}",
            signal_name(sig),
            format_duration_s(self.clock.start.elapsed().as_secs_f64()),
            self.run.target.pid,
            self.run.target.name,
            output::recording_note(&last),
        ));
        self.emit(EventBody::Stop { signal: sig });
        self.close(last);
        Ended::Stopped(sig)
    }

    /// The last of a watch: let queued hooks and notifications finish, then write the
    /// final recording unless `last` says it is skipped.
    fn close(&mut self, last: Option<(PathBuf, Option<String>)>) {
        self.courier.actions.finish(Duration::from_secs(3));
        self.out.write_last(last);
        // Failures of the last writes still reach the events file.
        self.emit_output_failures();
        self.out.plan.prune();
    }

    /// The summary's rates: each resource's samples a second on average over the watch,
    /// its samples, and how many came at the interval (the others came slowly, far from
    /// its limit); then the kernel's wake-ups by source, if any. Empty before any sample.
    fn rates_note(&self) -> String {
        let elapsed_s = self.clock.start.elapsed().as_secs_f64();
        let interval = format_duration_s(self.settings.interval.as_secs_f64());
        let parts: Vec<String> = self
            .engine
            .sample_counts()
            .map(|(name, n, fast)| {
                format!(
                    "{name} {:.1}/s ({n} samples, {fast} at {interval})",
                    per_second(n, elapsed_s)
                )
            })
            .collect();
        if parts.is_empty() {
            return String::new();
        }
        let (cgroup, psi) = self.kernel.wake_ups();
        let woken = if cgroup + psi > 0 {
            format!(" Kernel wake-ups: {cgroup} from the cgroup, {psi} from PSI.")
        } else {
            String::new()
        };
        format!(" Rates: {}.{woken}", parts.join(", "))
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

    /// One sampling period: sample, predict, act.
    fn tick(&mut self, now: Instant) {
        self.reap_adopted();
        self.record_hook_outcomes();
        self.follow_slurm();
        self.follow_notice();
        self.follow_cloud();
        self.sample(now);
        self.read_steps_and_saves(now);
        self.maybe_requeue();
        if let Some(plan) = self.engine.decide() {
            let _ = self.act(plan);
        }
        // After the alert is sent: the v1 thresholds move from this sample's figures.
        self.kernel.after_tick(&mut self.engine);
        if self.out.record_now.swap(false, Ordering::Relaxed) {
            self.out.save_in_background("SIGUSR2");
        }
        self.emit_output_failures();
    }

    /// Samples every source and runs the predictors; decisions wait in `pending`.
    fn sample(&mut self, now: Instant) {
        let t_ns = self.clock.ns_at(now);
        self.clock.ticks += 1;
        let mut actions = Vec::new();
        let engine = &mut self.engine;
        let kernel = &mut self.kernel;
        let report = self.sampler.tick_into(t_ns, &mut |s| {
            kernel.note(s);
            let _ = engine.observe(s, &mut actions);
        });
        // Each source next when the first of its resources is due (adaptive rates).
        let engine = &self.engine;
        let idle = Duration::from_secs_f64(engine.max_interval_s());
        self.sampler.plan(&|id| engine.next_due(id), idle);
        if report.wake_reader {
            self.out.recording.ask_drain();
        }
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
        self.perform(actions, None);
    }

    /// Reads the Python client's environment file once it appears: an `environment`
    /// event, and the recording's environment.
    fn check_python_environment(&mut self) {
        let Some(place) = &self.replies.python_file else {
            return;
        };
        match crate::environment::read_python(place) {
            Ok(None) => {}
            // Left by an earlier run (or another process): wait for this run's.
            Ok(Some(report))
                if !report.pid.is_some_and(|pid| {
                    pid == self.run.target.pid || self.sampler.tree_pids().contains(&pid)
                }) => {}
            Ok(Some(report)) => {
                if !self.settings.dry_run {
                    // Consumed: leave nothing behind beside the request file.
                    let _ = place.remove();
                }
                self.replies.python_file = None;
                let python = report.facts;
                // The run is set up by now: read its /dev/shm again (a `run` target may
                // have mounted its own after the start).
                let shm = crate::environment::target_shm(&self.settings.host, self.run.target.pid);
                let recorded = python.clone();
                self.out.recording.edit(move |r| {
                    if let Some(env) = r.environment_mut() {
                        env.python = Some(recorded);
                        if let Ok(shm) = shm {
                            env.shm = Some(shm);
                        }
                    }
                });
                self.emit(EventBody::Environment { python });
            }
            Err(e) => {
                self.replies.python_file = None;
                tracing::warn!("the Python environment file is not used: {e}");
            }
        }
    }

    /// Writes `body` as an event: the events file, the recording.
    fn emit(&mut self, body: EventBody) {
        self.out.emit(body, self.clock.elapsed_s());
    }

    /// Gathers what the verdict looks at and decides.
    fn diagnose(&mut self, exit: TargetExit) -> verdict::Verdict {
        let now_ms = self.clock.elapsed_ms();
        let recorder = self.out.recording.take_back();
        let resources = self.engine.resource_ends(now_ms as f64 / 1e3, |i| {
            recorder.and_then(|r| r.recent_peak(i, now_ms, RECENT_MS))
        });
        let oom_kills = self.evidence.oom_kills();
        let mut pids = self.sampler.tree_pids().to_vec();
        pids.push(self.run.target.pid);
        let ends = resources.clone();
        let kernel_oom_line = self.evidence.kernel_oom_line(&pids);
        let verdict = self.engine.verdict(ExitFacts {
            exit: match exit {
                TargetExit::Unknown => None,
                known => Some(known),
            },
            oom_kills,
            kernel_oom_line,
            resources,
            sent_signal: None,
            // An announced preemption is the verdict however the run ended (it may have
            // saved and exited 0 at the notice); the controller's end, only for a failure.
            scheduler: match exit {
                TargetExit::Code(0) => self.preempted(),
                _ => self.preempted().or_else(|| self.scheduler_end()),
            },
        });
        if let Some(book) = &mut self.series.record {
            book.set_verdict(verdict.kind.as_str());
        }
        self.evidence.last_verdict = Some((verdict.clone(), ends));
        verdict
    }

    fn finish(&mut self, exit: TargetExit) {
        self.let_hooks_finish();
        self.end_hooks();
        let verdict = self.diagnose(exit);
        let last = self.out.last_recording();
        let late = format!(
            " Sampled {} times every {} ({} late, {} samples dropped).{}{}",
            self.clock.ticks,
            format_duration_s(self.settings.interval.as_secs_f64()),
            self.clock.late_ticks,
            self.sampler.dropped(),
            self.rates_note(),
            output::recording_note(&last),
        );
        let survivors = self.survivors_note();
        let (text, event) = self.engine.closing(&Ending {
            exit,
            verdict: &verdict,
            pid: self.run.target.pid,
            name: &self.run.target.name,
            elapsed_s: self.clock.start.elapsed().as_secs_f64(),
            after_duration: &survivors,
            tail: &late,
        });
        terminal::summary(&text);
        let mut event = event;
        if let EventBody::Exit {
            attempt,
            event_control_writes_before_signal,
            ..
        } = &mut event
        {
            *attempt = self.series.attempt();
            *event_control_writes_before_signal = self.kernel.writes_before_signal();
        }
        self.emit(event);
        self.close(last);
    }
}

/// The sampler of `target`'s sources, and the ring buffer's reader; the tree reads the
/// service's shared load average, and is walked as often as its RSS is summed.
fn sampler_for(
    target: &Target,
    settings: &Settings,
    built: &mut sources::Built,
    reads: &Reads,
) -> Result<(Sampler, watchdog_sampler::ring::SampleReader), Failure> {
    let (mut sampler, reader) = Sampler::for_target(
        &settings.host.proc,
        target.pid,
        std::mem::take(&mut built.sources),
        RING_CAPACITY,
    )
    .map_err(|e| {
        let recorded = if settings.host.proc.is_recorded() {
            "; WATCHDOG_ROOT is set: expected a PID of the recorded tree (a directory DIR/proc/PID)"
        } else {
            ""
        };
        Failure::Usage(format!("cannot watch PID {}: {e}{recorded}", target.pid))
    })?;
    sampler.tree_mut().read_loadavg_through(reads);
    if let Some(period) = settings.slow_tree_interval() {
        // The tree's RSS is summed this often (see `sources::build`): walk it as often.
        let ticks = period.as_nanos() / settings.interval.as_nanos().max(1);
        sampler.set_tree_refresh_every(u32::try_from(ticks).unwrap_or(u32::MAX));
    }
    Ok((sampler, reader))
}

/// The engine over `table`'s resources, told which one the kernel wakes the loop for.
fn engine_for(settings: &Settings, table: &ResourceTable, kernel: &kernel::KernelWake) -> Engine {
    let mut engine = Engine::new(table.all(), settings.engine());
    engine.set_max_interval(settings.max_interval().as_secs_f64());
    if let Some(id) = kernel.covered() {
        engine.set_kernel_wake(id, true);
    }
    engine
}

/// The flight recorder of a watch of `target`, its environment gathered now.
fn flight_recorder(
    target: &Target,
    settings: &Settings,
    table: &ResourceTable,
    built: &mut sources::Built,
    clock: &clock::Clock,
) -> FlightRecorder {
    let mut environment = crate::environment::gather(&settings.host, target.pid, table.all());
    environment.gpus = std::mem::take(&mut built.gpus);
    let start_wall = clock.start_wall();
    FlightRecorder::new(
        table.all().to_vec(),
        recorder::Meta {
            pid: Some(target.pid.into()),
            command: Some(target.name.clone()),
            start: Some(watchdog_alerter::events::format_rfc3339_ms(start_wall)),
            start_unix: Some(clock.start_unix),
            interval_s: Some(settings.interval.as_secs_f64()),
            lead_s: Some(settings.lead.as_secs_f64()),
            watchdog_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            environment: Some(environment),
            ..recorder::Meta::default()
        },
        settings.record_window.as_secs_f64(),
    )
}

/// `n` samples a second over `elapsed_s`, counted over at least a second: a watch shorter
/// than that (a target that exits at once) took its first sample and its last look, which
/// is not a rate.
fn per_second(n: u64, elapsed_s: f64) -> f64 {
    n as f64 / elapsed_s.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::per_second;

    #[test]
    fn a_rate_is_counted_over_at_least_a_second() {
        // A target gone after 3 ms: its first sample and the last look are 2 samples, not
        // 578.9 a second.
        assert_eq!(per_second(2, 0.003), 2.0);
        assert_eq!(per_second(650, 65.0), 10.0);
    }
}
