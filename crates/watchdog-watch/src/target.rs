//! The process being watched: attached to by PID or started by `run`, held through a
//! pidfd from the first moment so its exit is seen at once and its PID is never
//! confused with a later process's.
//!
//! A process of a recorded tree (`WATCHDOG_ROOT`, the test seam) is no process of this
//! machine: no pidfd can be opened for it. It is held through a stand-in that becomes
//! readable once `DIR/proc/PID` is gone (it is alive while that directory exists), and
//! every signal is refused from then on ([`watchdog_alerter::pidfd::refuse_signals`]):
//! the request file is still written, the log says what was not sent, and the alert
//! event lists no process signalled.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use watchdog_alerter::pidfd::PidFd;
use watchdog_procfs::{PF_KTHREAD, ProcRoot, parse_stat};

use crate::Failure;

pub use watchdog_engine::TargetExit;

/// The watched process.
pub struct Target {
    /// Its PID.
    pub pid: u32,
    /// Its pidfd, shared with the signal-forwarding thread.
    pub pidfd: Arc<PidFd>,
    /// Its command name (`comm`), for messages.
    pub name: String,
    child: Option<Child>,
    /// The working directory it started in, when the watchdog started it (it inherits ours).
    pub(crate) start_cwd: Option<PathBuf>,
    /// procfs, where its working directory is read.
    proc: ProcRoot,
}

impl Target {
    /// Attaches to a running process, or explains in one line why it cannot be watched.
    pub fn attach(proc: &ProcRoot, pid: u32) -> Result<Target, Failure> {
        if proc.is_recorded() {
            return Target::attach_recorded(proc, pid);
        }
        if pid == std::process::id() {
            return Err(Failure::Usage(format!(
                "invalid PID {pid}: that is the watchdog itself; expected the PID of the training process"
            )));
        }
        if let Ok(stat) = proc.read(pid, "stat")
            && is_kernel_thread(&stat)
        {
            return Err(Failure::Usage(format!(
                "invalid PID {pid}: it is a kernel thread ({}), not a program; expected the PID of the training process",
                comm(proc, pid)
            )));
        }
        let pidfd = PidFd::open(pid).map_err(|e| {
            if e.is_gone() {
                Failure::Usage(format!(
                    "no process with PID {pid}: expected the PID of a running process"
                ))
            } else {
                Failure::Usage(format!(
                    "cannot watch PID {pid}: {e}; expected the PID of a process (not a thread) you may signal"
                ))
            }
        })?;
        check_may_signal(pid)?;
        let name = comm(proc, pid);
        Ok(Target {
            pid,
            pidfd: Arc::new(pidfd),
            name,
            child: None,
            start_cwd: None,
            proc: proc.clone(),
        })
    }

    /// Attaches to process `pid` of a recorded tree: alive while `PROC/PID` exists, never
    /// signalled (see the module documentation).
    fn attach_recorded(proc: &ProcRoot, pid: u32) -> Result<Target, Failure> {
        if !proc.has_pid(pid) {
            return Err(Failure::Usage(format!(
                "no process with PID {pid} in the recorded tree: expected a directory {}",
                proc.pid_dir(pid).display()
            )));
        }
        watchdog_alerter::pidfd::refuse_signals();
        tracing::info!(
            "reading the recorded tree {} (WATCHDOG_ROOT): PID {pid} is alive while its directory exists; no signal will be sent",
            proc.display()
        );
        let exit = proc.exit_fd(pid).map_err(|e| {
            Failure::Runtime(format!(
                "cannot watch the recorded PID {pid} for its end: {e}"
            ))
        })?;
        Ok(Target {
            pid,
            pidfd: Arc::new(PidFd::stand_in(exit, pid)),
            name: comm(proc, pid),
            child: None,
            start_cwd: None,
            proc: proc.clone(),
        })
    }

    /// Starts `argv` with the extra environment and holds it as the target.
    pub fn spawn(
        proc: &ProcRoot,
        argv: &[std::ffi::OsString],
        env: &[(String, String)],
    ) -> Result<Target, Failure> {
        let (program, args) = argv.split_first().ok_or_else(|| {
            Failure::Usage("run needs a command: expected run -- CMD [ARGS...]".into())
        })?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        // Only `run --restart` tells a command it was restarted (in `env`): never pass on
        // what the watchdog itself inherited.
        for var in RESTART_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| {
            Failure::Spawn(
                format!("cannot run '{}': {e}", program.to_string_lossy()),
                if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                },
            )
        })?;
        let pid = child.id();
        let pidfd = PidFd::open(pid).map_err(|e| {
            Failure::Runtime(format!("cannot open a pidfd for the child {pid}: {e}"))
        })?;
        Ok(Target {
            pid,
            pidfd: Arc::new(pidfd),
            name: program.to_string_lossy().into_owned(),
            child: Some(child),
            start_cwd: std::env::current_dir().ok(),
            proc: proc.clone(),
        })
    }

    /// Whether the watchdog started it (`run`), so that it is the watchdog's child.
    pub fn is_child(&self) -> bool {
        self.child.is_some()
    }

    /// Its working directory: the one it was started in (`run`), else `/proc/PID/cwd`.
    pub fn cwd(&self) -> std::io::Result<PathBuf> {
        match &self.start_cwd {
            Some(dir) => Ok(dir.clone()),
            None => self.proc.cwd(self.pid).map_err(|e| match e {
                watchdog_procfs::Error::Read { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            }),
        }
    }

    /// Collects the exit status once the pidfd says the target is gone: by waiting for our
    /// child, or, for another's, from the pidfd once its parent has reaped it (Linux 6.15
    /// and later; waited for up to `wait`, else unknown).
    pub fn reap_within(&mut self, wait: Duration) -> TargetExit {
        use std::os::unix::process::ExitStatusExt;
        match self.child.as_mut().map(Child::wait) {
            Some(Ok(status)) => exit_from_wait_status(status.into_raw()),
            Some(Err(_)) => TargetExit::Unknown,
            None => self
                .pidfd
                .wait_exit_status(wait)
                .map_or(TargetExit::Unknown, exit_from_wait_status),
        }
    }

    /// [`reap_within`](Self::reap_within) [`REAPED_WITHIN`].
    pub fn reap(&mut self) -> TargetExit {
        self.reap_within(REAPED_WITHIN)
    }

    /// Whether [`reap_within`](Self::reap_within) would not wait: the target is our child,
    /// its parent has reaped it, or the kernel keeps no status to wait for. Never blocks.
    pub fn status_ready(&self) -> bool {
        self.child.is_some() || !matches!(self.pidfd.exit_status(), Ok(None))
    }
}

/// How long a target that is not the watchdog's child is given to be reaped by its parent
/// (a shell or a kernel does it at once) before its exit status is called unknown.
pub const REAPED_WITHIN: Duration = Duration::from_millis(100);

/// A `waitpid(2)` status as an exit code or a signal.
fn exit_from_wait_status(status: i32) -> TargetExit {
    if libc::WIFEXITED(status) {
        TargetExit::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        TargetExit::Signal(libc::WTERMSIG(status))
    } else {
        TargetExit::Unknown
    }
}

/// Whether `/proc/PID/stat` text is a kernel thread's: `PF_KTHREAD` in its flags (field 9,
/// <https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html>). A kernel thread has no
/// memory of its own, no `/proc/PID/exe`, and ignores the checkpoint signal. The fields
/// are counted after the *last* `)`, since a command name may hold `) `.
fn is_kernel_thread(stat: &[u8]) -> bool {
    parse_stat(stat).is_some_and(|s| s.flags & PF_KTHREAD != 0)
}

/// Refuses a PID we may not signal (another user's process, when not root).
fn check_may_signal(pid: u32) -> Result<(), Failure> {
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
        return Err(Failure::Usage(format!(
            "invalid PID {pid}: expected a positive process ID"
        )));
    };
    match rustix::process::test_kill_process(p) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::PERM) => Err(Failure::Usage(format!(
            "not permitted to signal PID {pid}: expected a process of your own user (or run the watchdog as root)"
        ))),
        Err(rustix::io::Errno::SRCH) => Err(Failure::Usage(format!(
            "no process with PID {pid}: expected the PID of a running process"
        ))),
        Err(e) => Err(Failure::Usage(format!("cannot check PID {pid}: {e}"))),
    }
}

/// The owner (its name from the user database, the uid as text when it has none) and
/// command line of `pid` as status readers show them.
pub fn label(proc: &ProcRoot, pid: u32) -> crate::Label {
    let uid = proc.uids(pid).map(|u| u.real).unwrap_or(u32::MAX);
    let user = watchdog_alerter::hook::HookUser::of_uid(uid)
        .map(|u| u.name)
        .unwrap_or_else(|_| uid.to_string());
    crate::Label {
        uid,
        user,
        command: command_line_of(proc, pid),
        rule: None,
        slurm: None,
    }
}

/// The command line of `pid` as status readers show it: at most 200 characters.
fn command_line_of(proc: &ProcRoot, pid: u32) -> String {
    let command = proc.cmdline(pid).unwrap_or_default();
    command.trim().chars().take(200).collect()
}

/// The process's command name from `/proc/PID/comm` (any process may name itself with a
/// newline or an escape sequence: those are escaped), or `?`.
pub fn comm(proc: &ProcRoot, pid: u32) -> String {
    proc.comm(pid)
        .map(|s| watchdog_types::units::printable(s.trim_end()).into_owned())
        .unwrap_or_else(|_| "?".to_string())
}

/// The signals `run` forwards, caught before the command starts.
pub type Forwarded =
    signal_hook::iterator::SignalsInfo<signal_hook::iterator::exfiltrator::WithOrigin>;

/// The signals that stop the run: forwarded whether or not the command catches them.
const STOPS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The other signals a scheduler or a person may send the watchdog for the run (SLURM's
/// `--signal=B:USR1@120`, submitit's USR2, a time limit's SIGXCPU): forwarded to a command
/// that catches them, never the watchdog's death. SIGUSR2 also writes the recording.
fn passed_on() -> Vec<i32> {
    let mut signals = vec![
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGQUIT,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSTKFLT,
    ];
    signals.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    signals
}

/// Catches the stop signals and the ones passed on (to forward them once the command runs).
pub fn catch_forwarded_signals() -> Result<Forwarded, Failure> {
    let mut all = STOPS.to_vec();
    all.extend(passed_on());
    Forwarded::new(all)
        .map_err(|e| Failure::Runtime(format!("cannot install signal handlers: {e}")))
}

/// Forwards SIGINT, SIGTERM and SIGHUP sent to the watchdog by another process to the
/// target. Signals the kernel sends for a terminal (Ctrl-C, hangup) already reach the
/// target, which shares the terminal's process group, so they are not sent twice. A
/// signal the exited target can no longer take is left in `unforwarded`, for the
/// processes the command left running, and `waker` wakes the loop to send it to them at
/// once.
///
/// The other signals ([`passed_on`]) go to the command only when it catches them, as the
/// watchdog's own signal does: one it does not catch would end it.
pub fn forward_signals(
    mut signals: Forwarded,
    to: ForwardTo,
    unforwarded: Arc<std::sync::atomic::AtomicUsize>,
    waker: crate::wake::Waker,
    proc: ProcRoot,
) -> Result<Forwarding, Failure> {
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("watchdog-signals".into())
        .spawn(move || {
            for info in signals.forever() {
                let pidfd = to.current();
                if !STOPS.contains(&info.signal) {
                    pass_on(&proc, &pidfd, info.signal);
                    continue;
                }
                to.received
                    .store(info.signal as usize, std::sync::atomic::Ordering::Relaxed);
                if info.signal == libc::SIGTERM
                    && let Some(cell) = &to.notice
                    && cell.load(std::sync::atomic::Ordering::Relaxed) == 0
                {
                    // The first SIGTERM: the loop asks for a save, then passes it on.
                    let now_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(1, |d| d.as_millis().max(1) as u64);
                    cell.store(now_ms, std::sync::atomic::Ordering::Relaxed);
                    tracing::info!("received SIGTERM: asking the run to save before passing it on");
                    waker.wake();
                    continue;
                }
                let from_kernel = info.process.is_none();
                if from_kernel && rustix::termios::isatty(std::io::stdin()) {
                    tracing::debug!(
                        signal = info.signal,
                        "terminal signal already reached the target"
                    );
                    continue;
                }
                let name = watchdog_types::units::signal_name(info.signal);
                match pidfd.send_signal(info.signal) {
                    Ok(()) => tracing::info!("forwarded {name} to PID {}", pidfd.pid()),
                    Err(e) => {
                        tracing::debug!("could not forward {name}: {e}");
                        if e.is_gone() {
                            unforwarded
                                .store(info.signal as usize, std::sync::atomic::Ordering::Relaxed);
                            waker.wake();
                        }
                    }
                }
            }
        })
        .map_err(|e| Failure::Runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(Forwarding {
        handle,
        thread: Some(thread),
    })
}

/// The signal thread of [`forward_signals`]: stopped and joined when dropped (the
/// watchdog's own handlers stay, so a signal from then on is not lost but not forwarded).
pub struct Forwarding {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sends `sig` to the command if it catches it; says what happened.
fn pass_on(proc: &ProcRoot, pidfd: &PidFd, sig: i32) {
    let name = watchdog_types::units::signal_name(sig);
    let report = watchdog_alerter::signal::signal_tree_with_target(proc, &[], pidfd, sig);
    if report.sent.contains(&pidfd.pid()) {
        tracing::info!("forwarded {name} to PID {}", pidfd.pid());
    } else if sig != libc::SIGUSR2 {
        tracing::info!(
            "received {name}: not forwarded to PID {}, which does not catch it (it would end it)",
            pidfd.pid()
        );
    }
}

pub use watchdog_alerter::hook::RESTART_VARS;

/// Where `run` forwards the signals it gets: the current attempt's command (`run
/// --restart` starts another), and the last stop signal the watchdog received at all
/// (forwarded or not: a terminal's Ctrl-C reaches the command by itself).
#[derive(Clone)]
pub struct ForwardTo {
    target: Arc<std::sync::Mutex<Arc<PidFd>>>,
    /// The last SIGINT, SIGTERM or SIGHUP received (0: none).
    pub received: Arc<std::sync::atomic::AtomicUsize>,
    /// When the first SIGTERM came, unix milliseconds (0: none yet), when a SIGTERM is a
    /// notice (`--term-grace`): it is held for the loop, which asks the run to save and
    /// passes it on; `None`: SIGTERM is forwarded at once.
    pub notice: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl ForwardTo {
    /// Forwarding to `pidfd`; `notice`: the first SIGTERM is held for the loop.
    pub fn new(pidfd: Arc<PidFd>, notice: bool) -> ForwardTo {
        ForwardTo {
            target: Arc::new(std::sync::Mutex::new(pidfd)),
            received: Arc::default(),
            notice: notice.then(Arc::default),
        }
    }

    /// Forwards to `pidfd` from now on.
    pub fn retarget(&self, pidfd: Arc<PidFd>) {
        let mut slot = self.target.lock().unwrap_or_else(|p| p.into_inner());
        *slot = pidfd;
    }

    fn current(&self) -> Arc<PidFd> {
        Arc::clone(&self.target.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The environment a target needs to talk back: `WATCHDOG_SIGNAL`, `WATCHDOG_REQUEST_FILE`, `WATCHDOG_PID`.
pub fn child_env(
    signal: i32,
    request_file: &std::path::Path,
    interval: std::time::Duration,
) -> Vec<(String, String)> {
    vec![
        (
            "WATCHDOG_SIGNAL".into(),
            watchdog_types::units::signal_name(signal),
        ),
        (
            "WATCHDOG_REQUEST_FILE".into(),
            request_file.to_string_lossy().into_owned(),
        ),
        ("WATCHDOG_PID".into(), std::process::id().to_string()),
        // And `WATCHDOG_INTERVAL`, in seconds: how often the client may write its step
        // reports (docs/recording.md).
        (
            "WATCHDOG_INTERVAL".into(),
            interval.as_secs_f64().to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process named with an escape sequence and a newline (`prctl(PR_SET_NAME)` allows
    /// any bytes) cannot rewrite the terminal or forge a log line.
    #[test]
    fn a_hostile_command_name_is_escaped() {
        let proc = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(proc.path().join("42")).expect("mkdir");
        std::fs::write(proc.path().join("42/comm"), "a\x1b[2J\nWARN x\n").expect("write");
        let root = ProcRoot::new(proc.path());
        assert_eq!(comm(&root, 42), "a\\u{1b}[2J\\nWARN x");
        assert_eq!(comm(&root, 43), "?");
    }

    /// `--pid 2` (kthreadd) and kworkers were accepted as targets.
    #[test]
    fn kernel_threads_are_recognised_by_pf_kthread() {
        let kworker =
            b"57 (kworker/0:1H-kblockd) I 2 0 0 0 -1 69238880 0 0 0 0 0 1 0 0 0 -20 1 0 12 0 0";
        let python =
            b"4242 (python3) S 1 4242 4242 34816 4242 4194560 913 0 0 0 5 1 0 0 20 0 1 0 99 0 0";
        let hostile =
            b"77 (x) I 2 0 0 0 -1 69238880 ) S 1 1 1 0 1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 9";
        assert!(is_kernel_thread(kworker));
        assert!(!is_kernel_thread(python));
        assert!(!is_kernel_thread(hostile), "a name may not forge the flags");
        assert!(!is_kernel_thread(b"garbage"));
        let proc = watchdog_config::Host::from_env().proc;
        if let Ok(stat) = std::fs::read(proc.join("2/stat"))
            && comm(&proc, 2) == "kthreadd"
        {
            assert!(is_kernel_thread(&stat));
        }
        assert!(!is_kernel_thread(
            &std::fs::read(proc.join("self/stat")).unwrap_or_default()
        ));
    }
}
