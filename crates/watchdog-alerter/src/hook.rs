//! The `--on-alert` hook: a user command run through `sh -c` on every alert.
//!
//! [`Hooks::run`] spawns the command and returns at once: a background thread waits for
//! it and logs its exit status and how long it took, so a slow hook never delays sampling
//! or the next alert. The command gets the watchdog's environment plus the `WATCHDOG_*`
//! variables built by [`hook_env`]. Its stdin is `/dev/null`; stdout and stderr are
//! inherited.
//!
//! Each hook runs in a process group of its own (`setpgid(0, 0)` before `exec`), so the
//! hook and everything it starts can be ended together, and it runs under a timeout
//! (`--hook-timeout`): a group still there when the timeout passes, even after the `sh`
//! itself exited (a hook that left `cmd &` behind), is sent SIGTERM, then SIGKILL after a
//! grace period. [`Hooks::end_all`] does the same to every hook still running when the
//! watchdog exits, so no hook outlives it. [`Hooks::is_hook`] tells the process tree which
//! processes are hooks.
//!
//! ## Keepers: what a hook detaches never joins the run
//! The watchdog in `run` mode is a child subreaper, so it adopts every orphan below it.
//! There (and only where the watchdog is a subreaper: elsewhere orphans go to init and a
//! keeper would be a copy of the watchdog's memory for nothing) a hook is not the
//! watchdog's child directly: each hook's `sh` is started by a *keeper*, the process `Command::spawn` forks, which makes itself a child subreaper, forks
//! the hook, and then only reaps until it has no child left (see [`split_off_keeper`]).
//! Whatever the hook detaches (`setsid cmd &`, a double fork, `nohup`, a process group or
//! session of its own) is re-parented to the keeper, never to the watchdog, so it is never
//! taken for a process of the run. The keeper reports the hook's PID and exit status over a
//! socket pair; it is not in the hook's process group and ignores the signals that end
//! one, so ending a hook never ends its keeper. It holds no descriptor of the watchdog's.
//!
//! ## As the target's user
//! The daemon runs as root and watches other users' runs: a [`Hooks`] built with a
//! [`HookUser`] ([`Hooks::with_user`]) runs each hook as that user. In the child, after the
//! process group is made and before `exec`, it calls `setgroups` (the user's groups from
//! the group database), `setgid`, then `setuid` (that order: once the UID is not root the
//! others are no longer allowed), then `chdir`s to the user's home as the user (to `/` when
//! that fails). Before that it sets its `oom_score_adj` to 0, so a user's hook does not
//! inherit the service's protection from the OOM killer (`OOMScoreAdjust=-900`). The
//! environment is reset to exactly `PATH=/usr/local/bin:/usr/bin:/bin`,
//! `HOME`, `USER`, `LOGNAME`, `SHELL` and the `WATCHDOG_*` variables: nothing of the
//! daemon's own environment reaches a user's command. The command is `/bin/sh -c`, not a
//! `sh` found on a path. A hook runs as root only when the target is root's.
//!
//! `WATCHDOG_PID` means the same everywhere: the watchdog's own PID, in a hook as in the
//! environment `watchdog run` gives its command. The watched process is
//! `WATCHDOG_TARGET_PID` (hooks only; the `run` command is the target itself).

use std::ffi::{CStr, CString};
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::pidfd::PidFd;
use watchdog_types::defaults::DEFAULT_HOOK_TIMEOUT;
use watchdog_types::request::SentRequest;

/// The variables `run --restart` and a requeue set for a restarted command
/// (docs/restart.md), and the checkpoint record `run` names to its command: only the
/// watchdog sets them, so what it inherited of them is passed on to nothing it starts
/// (the command, a hook).
pub const RESTART_VARS: [&str; 4] = [
    "WATCHDOG_RESTART",
    "WATCHDOG_LAST_VERDICT",
    "WATCHDOG_RESUME_FROM",
    "WATCHDOG_CHECKPOINT_RECORD",
];

/// How long a hook's group has between SIGTERM and SIGKILL.
pub const HOOK_GRACE: Duration = Duration::from_secs(2);
/// The same as the watchdog exits: short, so a stopped watchdog is gone within a second
/// (systemd's stop timeout, a user's Ctrl-C) even when a hook ignores SIGTERM.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long the exiting watchdog waits for the hooks' threads to log their ends.
const EXIT_LOG_WAIT: Duration = Duration::from_millis(200);
/// How often a hook's lingering process group is checked.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Spawning the hook failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot run the --on-alert hook `{cmd}` through sh -c: {source}")]
pub struct HookError {
    /// The command.
    pub cmd: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// The `PATH` a hook run as a user gets.
pub const USER_HOOK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The user a hook runs as, from the passwd and group databases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookUser {
    /// User ID.
    pub uid: u32,
    /// Primary group ID.
    pub gid: u32,
    /// Every group the user is in (the primary one included), as `getgrouplist` says.
    pub groups: Vec<u32>,
    /// Login name (`USER`, `LOGNAME`).
    pub name: String,
    /// Home directory (`HOME`, and the working directory when it can be entered).
    pub home: PathBuf,
    /// Login shell (`SHELL`; `/bin/sh` when the database leaves it empty). The hook itself
    /// always runs through `/bin/sh -c`.
    pub shell: PathBuf,
}

/// Largest buffer tried for one passwd entry.
const MAX_PASSWD_BUF: usize = 1 << 20;
/// Most groups asked for one user.
const MAX_GROUPS: usize = 1 << 16;

impl HookUser {
    /// The user with ID `uid`, from `getpwuid_r` and `getgrouplist`. `NotFound` when the
    /// passwd database has no such user.
    pub fn of_uid(uid: u32) -> io::Result<HookUser> {
        let mut buf = vec![0u8; 1024];
        loop {
            // SAFETY: an all-zero passwd is a valid value (null pointers, zero IDs); it is
            // only read after getpwuid_r filled it.
            let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
            let mut found: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: every pointer is valid for the call and `buf.len()` is its size; the
            // strings it sets point into `buf`, which outlives their use below.
            let rc = unsafe {
                libc::getpwuid_r(
                    uid,
                    &mut pwd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut found,
                )
            };
            if rc == libc::ERANGE && buf.len() < MAX_PASSWD_BUF {
                buf.resize(buf.len() * 2, 0);
                continue;
            }
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            if found.is_null() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no user with UID {uid} in the passwd database"),
                ));
            }
            let text = |p: *const libc::c_char| -> Vec<u8> {
                if p.is_null() {
                    return Vec::new();
                }
                // SAFETY: getpwuid_r set it to a NUL-terminated string inside `buf`.
                unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()
            };
            let name_c = text(pwd.pw_name);
            let name = String::from_utf8_lossy(&name_c).into_owned();
            let home = PathBuf::from(std::ffi::OsStr::from_bytes(&text(pwd.pw_dir)));
            let shell = match text(pwd.pw_shell) {
                s if s.is_empty() => PathBuf::from("/bin/sh"),
                s => PathBuf::from(std::ffi::OsStr::from_bytes(&s)),
            };
            let groups = group_list(&name_c, pwd.pw_gid)?;
            return Ok(HookUser {
                uid,
                gid: pwd.pw_gid,
                groups,
                name,
                home,
                shell,
            });
        }
    }

    /// Sets up `command` to run as this user: the environment reset to
    /// [`USER_HOOK_PATH`], `HOME`, `USER`, `LOGNAME`, `SHELL` plus `env`; in the child
    /// `setgroups`, `setgid`, `setuid`, then `chdir` to the home (else `/`).
    fn prepare(&self, command: &mut Command, env: &[(String, String)]) -> io::Result<()> {
        let invalid = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("user {} ({}): {what}", self.name, self.uid),
            )
        };
        let home = CString::new(self.home.as_os_str().as_bytes())
            .map_err(|_| invalid("its home holds a NUL byte"))?;
        let me = rustix::process::geteuid().as_raw();
        let switch = me == 0;
        if !switch && self.uid != me {
            return Err(invalid(&format!(
                "cannot run a hook as this user: the watchdog runs as UID {me}, not root"
            )));
        }
        command
            .env_clear()
            .env("PATH", USER_HOOK_PATH)
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name)
            .env("SHELL", &self.shell)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let groups: Vec<libc::gid_t> = self.groups.clone();
        let (uid, gid) = (self.uid, self.gid);
        let root = c"/";
        let oom_score_adj = watchdog_procfs::roots::OWN_OOM_SCORE_ADJ;
        // SAFETY: the closure runs in the child between fork and exec. It only makes
        // system calls (async-signal-safe) on values prepared before the fork, and
        // allocates nothing; errors come from errno.
        unsafe {
            command.pre_exec(move || {
                if switch {
                    // Not the service's OOM protection (OOMScoreAdjust=-900): the kernel's
                    // default. Best effort; raising the value needs no privilege.
                    let fd = libc::open(oom_score_adj.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd >= 0 {
                        let _ = libc::write(fd, b"0".as_ptr().cast(), 1);
                        libc::close(fd);
                    }
                }
                if switch
                    && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0)
                {
                    return Err(io::Error::last_os_error());
                }
                if libc::chdir(home.as_ptr()) != 0 && libc::chdir(root.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }
}

/// The groups of user `name` (NUL-free bytes) whose primary group is `gid`.
fn group_list(name: &[u8], gid: u32) -> io::Result<Vec<u32>> {
    let name = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a user name holds a NUL byte"))?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = libc::c_int::try_from(groups.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `groups` has room for `n` entries; getgrouplist writes at most that many
        // and sets `n` to how many there are.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        let n = usize::try_from(n).unwrap_or(0);
        if rc >= 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        if n <= groups.len() || n > MAX_GROUPS {
            return Err(io::Error::other(format!(
                "cannot list the groups of user {}",
                name.to_string_lossy()
            )));
        }
        groups.resize(n, 0);
    }
}

/// How a hook ended, for the log and the `hook` event.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutcome {
    /// The command.
    pub cmd: String,
    /// The PID of its `sh` (also its process group ID).
    pub pid: u32,
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Seconds from the start until the `sh` exited (or until its group ended, when the
    /// group was ended).
    pub duration_s: f64,
    /// Whether it was ended because it ran past the timeout.
    pub timed_out: bool,
    /// Whether it was ended because the watchdog was exiting.
    pub ended_at_exit: bool,
}

impl HookOutcome {
    /// Its status in words: `exited 0`, `exited 3`, `killed by SIGTERM`.
    pub fn status_text(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited {c}"),
            (None, Some(s)) => format!("killed by {}", watchdog_types::units::signal_name(s)),
            (None, None) => "status unknown".to_string(),
        }
    }
}

/// A running hook. Dropping it is fine: the background thread still reaps the process
/// and logs its status.
#[derive(Debug)]
pub struct HookHandle {
    /// The PID of the `sh` process (also its process group ID).
    pub pid: u32,
    reaper: JoinHandle<io::Result<ExitStatus>>,
}

impl HookHandle {
    /// Blocks until the hook exits and returns its status (for tests and for a final flush at exit).
    pub fn wait(self) -> io::Result<ExitStatus> {
        self.reaper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the hook reaper thread panicked")))
    }
}

/// Runs hooks, each in its own process group under a timeout, and keeps the groups of
/// those still running so that the tree can leave them out and the exit can end them.
/// Clones share the same hooks.
#[derive(Debug, Clone)]
pub struct Hooks {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    timeout: Duration,
    grace: Duration,
    /// Process group IDs (= the PID of each hook's `sh`) of the hooks not finished.
    groups: Mutex<Vec<u32>>,
    /// The PIDs of the hooks' keepers not reaped yet (the watchdog's children; see
    /// [`split_off_keeper`]). Taken after `groups` when both are held.
    keepers: Mutex<Vec<u32>>,
    /// Set by [`Hooks::end_all`]: the watchdog is exiting.
    ending: AtomicBool,
    /// Whom the hooks run as; `None`: as the watchdog, with its environment.
    user: Option<HookUser>,
    outcomes: Mutex<Option<mpsc::Sender<HookOutcome>>>,
}

impl Hooks {
    /// Hooks that may run for `timeout` each, with [`HOOK_GRACE`] between SIGTERM and SIGKILL.
    pub fn new(timeout: Duration) -> Hooks {
        Hooks::with_grace(timeout, HOOK_GRACE)
    }

    /// Like [`new`](Self::new) with another grace period.
    pub fn with_grace(timeout: Duration, grace: Duration) -> Hooks {
        Hooks::with_user(timeout, grace, None)
    }

    /// Hooks run as `user` (see the module documentation); `None`: as the watchdog, with
    /// its environment plus the `WATCHDOG_*` variables.
    pub fn with_user(timeout: Duration, grace: Duration, user: Option<HookUser>) -> Hooks {
        Hooks {
            inner: Arc::new(Inner {
                timeout,
                grace,
                groups: Mutex::new(Vec::new()),
                keepers: Mutex::new(Vec::new()),
                ending: AtomicBool::new(false),
                user,
                outcomes: Mutex::new(None),
            }),
        }
    }

    /// Sends every hook's outcome to `tx` from now on (for the `hook` event).
    pub fn report_to(&self, tx: mpsc::Sender<HookOutcome>) {
        *lock(&self.inner.outcomes) = Some(tx);
    }

    /// The process groups of the hooks not finished yet.
    pub fn running(&self) -> Vec<u32> {
        lock(&self.inner.groups).clone()
    }

    /// Whether `pid` belongs to a hook: it is in the process group of a hook not finished
    /// yet. A process that is gone counts as a hook (there is nothing to watch).
    ///
    /// Holds the same lock as [`run`](Self::run) holds from before the fork until the
    /// hook's group is registered, so a hook is never seen between its fork and its
    /// `setpgid`.
    pub fn is_hook(&self, pid: u32) -> bool {
        let groups = lock(&self.inner.groups);
        if lock(&self.inner.keepers).contains(&pid) {
            return true;
        }
        match to_pid(pid).and_then(|p| rustix::process::getpgid(Some(p)).ok()) {
            Some(pgid) => groups.contains(&pgid.as_raw_pid().unsigned_abs()),
            None => true,
        }
    }

    /// Runs `f` while no hook can start, with whether `pid` is a hook's keeper (the
    /// watchdog's child, whose status is a hook thread's to collect) or the `sh` of a hook
    /// not finished yet.
    pub fn while_no_hook_starts<R>(&self, pid: u32, f: impl FnOnce(bool) -> R) -> R {
        let groups = lock(&self.inner.groups);
        let keeper = lock(&self.inner.keepers).contains(&pid);
        f(keeper || groups.contains(&pid))
    }

    /// The user the hooks run as, when one was given.
    pub fn user(&self) -> Option<&HookUser> {
        self.inner.user.as_ref()
    }

    /// Starts `sh -c cmd` with `env` added to the environment, in its own process group,
    /// and returns without waiting. A background thread ends it when it runs past the
    /// timeout and logs its exit status (info when 0, warn otherwise). With a
    /// [`HookUser`], runs it as that user with only `env` and the user's variables.
    pub fn run(&self, cmd: &str, env: &[(String, String)]) -> Result<HookHandle, HookError> {
        let err = |source| HookError {
            cmd: cmd.to_string(),
            source,
        };
        // A keeper only where orphans would come to the watchdog (see the module docs).
        let (report, report_w) = if adopts_orphans() {
            let (r, w) = UnixStream::pair().map_err(err)?;
            (Some(r), Some(w))
        } else {
            (None, None)
        };
        let mut command = Command::new(match &self.inner.user {
            None => "sh",
            Some(_) => "/bin/sh",
        });
        match &report_w {
            Some(w) => {
                let fd = w.as_raw_fd();
                // SAFETY: the closure runs in the child between fork and exec and makes
                // only async-signal-safe calls (see `split_off_keeper`); it is registered
                // before the user's, so only the hook (not its keeper) becomes the user.
                unsafe {
                    command.pre_exec(move || split_off_keeper(fd));
                }
            }
            None => {
                command.process_group(0);
            }
        }
        match &self.inner.user {
            None => {
                // What the watchdog itself inherited of a restart is not the hook's.
                for var in RESTART_VARS {
                    command.env_remove(var);
                }
                command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            }
            Some(user) => user.prepare(&mut command, env).map_err(err)?,
        }
        command.arg("-c").arg(cmd).stdin(Stdio::null());
        let mut groups = lock(&self.inner.groups);
        let child = command.spawn().map_err(err)?;
        drop(report_w);
        let pid = match &report {
            None => child.id(),
            // The keeper writes the hook's PID right after its fork, before the hook runs.
            Some(r) => match read_report(r, Some(REPORT_WAIT)) {
                Report::Value(pid) => {
                    lock(&self.inner.keepers).push(child.id());
                    pid
                }
                Report::TimedOut | Report::Closed => {
                    drop(groups);
                    lock(&self.inner.keepers).push(child.id());
                    reap_in_background(child, self.clone());
                    return Err(err(io::Error::other(
                        "the hook's keeper process did not report the hook's PID",
                    )));
                }
            },
        };
        groups.push(pid);
        drop(groups);
        let me = self.clone();
        let cmd_owned = cmd.to_string();
        let started = Started { child, report, pid };
        let reaper = std::thread::Builder::new()
            .name("watchdog-hook".to_string())
            .spawn(move || me.watch(started, cmd_owned))
            .map_err(|e| {
                // Without its thread nobody would end it: end it now.
                self.end_group(pid, self.inner.grace);
                self.forget(pid);
                err(e)
            })?;
        Ok(HookHandle { pid, reaper })
    }

    /// The hook's thread: waits for the `sh` under the timeout, then for the rest of its
    /// group, ending whatever is still there when the timeout passes.
    fn watch(&self, started: Started, cmd: String) -> io::Result<ExitStatus> {
        let pid = started.pid;
        let start = Instant::now();
        let deadline = start + self.inner.timeout;
        let (status, timed_out) = match started.report {
            Some(report) => self.wait_through_keeper(started.child, &report, pid),
            None => self.wait_child(started.child, pid),
        };
        let duration_s = start.elapsed().as_secs_f64();
        let ended_at_exit = !timed_out && self.inner.ending.load(Ordering::Relaxed);
        let outcome = match &status {
            Ok(s) => HookOutcome {
                cmd: cmd.clone(),
                pid,
                code: s.code(),
                signal: s.signal(),
                duration_s,
                timed_out,
                ended_at_exit,
            },
            Err(e) => {
                tracing::warn!(pid, "cannot wait for --on-alert hook `{cmd}`: {e}");
                self.finish_group(pid, deadline);
                return status;
            }
        };
        self.log(&outcome);
        if let Some(tx) = lock(&self.inner.outcomes).as_ref() {
            let _ = tx.send(outcome);
        }
        self.finish_group(pid, deadline);
        status
    }

    /// Waits for the hook `child` (our child) under the timeout, ending its group past it;
    /// its status, and whether it timed out.
    fn wait_child(&self, mut child: Child, pid: u32) -> (io::Result<ExitStatus>, bool) {
        let mut timed_out = false;
        // The child is not reaped yet, so its PID cannot name another process.
        if let Ok(fd) = PidFd::open(pid)
            && !fd.wait_exit(Some(self.inner.timeout)).unwrap_or(true)
        {
            timed_out = true;
            self.end_group(pid, self.inner.grace);
        }
        (child.wait(), timed_out)
    }

    /// Waits for the hook `pid` under the timeout through its keeper's report, ending its
    /// group past it; the keeper is reaped on a thread of its own once what the hook
    /// detached has exited too.
    fn wait_through_keeper(
        &self,
        mut keeper: Child,
        report: &UnixStream,
        pid: u32,
    ) -> (io::Result<ExitStatus>, bool) {
        let mut timed_out = false;
        let mut got = read_report(report, Some(self.inner.timeout));
        if got == Report::TimedOut {
            timed_out = true;
            self.end_group(pid, self.inner.grace);
            got = read_report(report, None);
        }
        let status = match got {
            Report::Value(raw) => {
                reap_in_background(keeper, self.clone());
                Ok(ExitStatus::from_raw(raw as i32))
            }
            // The keeper is gone without a word (killed): its own status is all there is.
            Report::TimedOut | Report::Closed => {
                let status = keeper.wait();
                self.forget_keeper(keeper.id());
                status
            }
        };
        (status, timed_out)
    }

    fn forget_keeper(&self, pid: u32) {
        lock(&self.inner.keepers).retain(|&k| k != pid);
    }

    fn log(&self, o: &HookOutcome) {
        let took = watchdog_types::units::format_duration_s(o.duration_s);
        let (cmd, pid, status) = (&o.cmd, o.pid, o.status_text());
        if o.timed_out {
            tracing::warn!(
                pid,
                "--on-alert hook `{cmd}` ran past --hook-timeout {}: its process group was ended ({status})",
                watchdog_types::units::format_duration_s(self.inner.timeout.as_secs_f64())
            );
        } else if o.ended_at_exit {
            tracing::warn!(
                pid,
                "--on-alert hook `{cmd}` was ended as the watchdog exits, after {took} ({status})"
            );
        } else if o.code == Some(0) {
            tracing::info!(pid, "--on-alert hook `{cmd}` exited 0 after {took}");
        } else {
            tracing::warn!(pid, "--on-alert hook `{cmd}` failed after {took}: {status}");
        }
    }

    /// After the `sh` exited: waits for what it left in its group until `deadline`, ends
    /// what is left then, and forgets the group.
    fn finish_group(&self, pgid: u32, deadline: Instant) {
        while group_exists(pgid) && !self.inner.ending.load(Ordering::Relaxed) {
            if Instant::now() >= deadline {
                tracing::warn!(
                    pid = pgid,
                    "processes left by an --on-alert hook ran past --hook-timeout: ending its process group {pgid}"
                );
                self.end_group(pgid, self.inner.grace);
                break;
            }
            std::thread::sleep(GROUP_POLL);
        }
        if !self.inner.ending.load(Ordering::Relaxed) {
            self.forget(pgid);
        }
    }

    fn forget(&self, pgid: u32) {
        lock(&self.inner.groups).retain(|&g| g != pgid);
    }

    /// SIGTERM to the group, then SIGKILL once `grace` has passed with it still there.
    fn end_group(&self, pgid: u32, grace: Duration) {
        signal_group(pgid, Signal::TERM);
        let until = Instant::now() + grace;
        while group_exists(pgid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if group_exists(pgid) {
            signal_group(pgid, Signal::KILL);
        }
    }

    /// Ends every hook still running, as the watchdog exits: SIGTERM to each group, then
    /// SIGKILL to those still there after the grace period (at most [`EXIT_GRACE`]). `between` is called while
    /// waiting (the caller reaps what it adopted there, since a zombie keeps its group).
    /// Returns the process groups that were ended; waits a little for their threads to log
    /// the statuses.
    pub fn end_all(&self, mut between: impl FnMut()) -> Vec<u32> {
        self.inner.ending.store(true, Ordering::Relaxed);
        let groups = self.running();
        let live: Vec<u32> = groups
            .iter()
            .copied()
            .filter(|&g| group_exists(g))
            .collect();
        for &g in &live {
            tracing::info!(
                pid = g,
                "ending --on-alert hook process group {g} as the watchdog exits"
            );
            signal_group(g, Signal::TERM);
        }
        let until = Instant::now() + self.inner.grace.min(EXIT_GRACE);
        while live.iter().any(|&g| group_exists(g)) && Instant::now() < until {
            between();
            std::thread::sleep(Duration::from_millis(10));
        }
        for &g in &live {
            if group_exists(g) {
                tracing::warn!(
                    pid = g,
                    "hook process group {g} ignored SIGTERM: sending SIGKILL"
                );
                signal_group(g, Signal::KILL);
            }
        }
        // Their threads reap the `sh`s and log; a short wait lets the lines out.
        let until = Instant::now() + EXIT_LOG_WAIT;
        while Instant::now() < until && live.iter().any(|&g| group_exists(g)) {
            between();
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(20));
        live
    }
}

/// Starts `sh -c cmd` with [`DEFAULT_HOOK_TIMEOUT`] and no registry shared with anyone:
/// [`Hooks::run`] on a fresh [`Hooks`].
pub fn run_hook(cmd: &str, env: &[(String, String)]) -> Result<HookHandle, HookError> {
    Hooks::new(DEFAULT_HOOK_TIMEOUT).run(cmd, env)
}

/// How long the keeper has to report the hook's PID (it does so right after its fork).
const REPORT_WAIT: Duration = Duration::from_secs(10);

/// A hook just started: the watchdog's child (the hook's keeper when there is a report
/// socket, else the hook itself), the keeper's report socket and the hook's PID.
struct Started {
    child: Child,
    report: Option<UnixStream>,
    pid: u32,
}

/// Whether orphans below this process come to it (it is a child subreaper, as in `run`
/// mode), so that hooks need keepers.
fn adopts_orphans() -> bool {
    rustix::process::child_subreaper().is_ok_and(|p| p.is_some())
}

/// What the keeper's report socket gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    Value(u32),
    TimedOut,
    Closed,
}

/// Reads one 4-byte value from the keeper, waiting at most `timeout` (`None`: as long as
/// it takes).
fn read_report(report: &UnixStream, timeout: Option<Duration>) -> Report {
    let timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
    if report.set_read_timeout(timeout).is_err() {
        return Report::Closed;
    }
    let mut buf = [0u8; 4];
    match (&*report).read_exact(&mut buf) {
        Ok(()) => Report::Value(u32::from_le_bytes(buf)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Report::TimedOut
        }
        Err(_) => Report::Closed,
    }
}

/// Reaps a hook's keeper on a thread of its own: it lives as long as anything the hook
/// detached, which may be long after the hook.
fn reap_in_background(mut keeper: Child, hooks: Hooks) {
    let pid = keeper.id();
    let spawned = std::thread::Builder::new()
        .name("watchdog-hook-keeper".to_string())
        .spawn(move || {
            let _ = keeper.wait();
            hooks.forget_keeper(pid);
        });
    if let Err(e) = spawned {
        tracing::warn!(
            pid,
            "cannot start a thread to reap the hook keeper {pid}: {e}"
        );
    }
}

/// Runs in the child `Command::spawn` forked for a hook, before `exec`: that child becomes
/// the hook's keeper, and a child of its own goes on to `exec` the hook.
///
/// Why: in `run` mode the watchdog is a child subreaper, so a process whose parent exits is
/// re-parented to it and counted as the run's. A hook that detaches something (`setsid cmd
/// &`, a double fork, `nohup`) would leave it to the watchdog when the hook's `sh` exits,
/// and the run would be watched (and waited for) as long as it lives. The keeper is itself
/// a child subreaper (set before its fork, so no orphan can slip past it) that outlives
/// everything the hook started, reaping it: whatever the hook does, its processes are
/// re-parented to the keeper, never to the watchdog. The keeper ignores the terminal's and
/// the hook timeout's signals (it is not in the hook's process group, which the hook gets
/// with `setpgid` as before), reports the hook's PID and then its wait status on `report`,
/// and exits once it has no child left. Only async-signal-safe calls are made here: the
/// watchdog has other threads, of which the forked child has no copy.
fn split_off_keeper(report: RawFd) -> io::Result<()> {
    // SAFETY: prctl, fork and setpgid are async-signal-safe system calls with no pointer
    // arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let hook = libc::fork();
        if hook < 0 {
            return Err(io::Error::last_os_error());
        }
        if hook == 0 {
            // The hook: its own process group, so it and what it starts end together.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(());
        }
        keep(hook, report)
    }
}

/// The keeper's whole life (see [`split_off_keeper`]); never returns.
///
/// # Safety
/// Only in a child forked from this process, before `exec`, with `report` open.
unsafe fn keep(hook: libc::pid_t, report: RawFd) -> ! {
    // SAFETY: signal, prctl, close, write, waitpid and _exit are async-signal-safe system
    // calls; the buffers passed live on this stack for the call, the name is static.
    unsafe {
        for sig in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Named for what it is in `ps` and `top` (a copy of the watchdog, which outlives it
        // while a detached process of the hook lives).
        libc::prctl(libc::PR_SET_NAME, c"wd-hook-keeper".as_ptr(), 0, 0, 0);
        // Nothing of the watchdog's stays open here: not spawn's error pipe (the watchdog
        // would wait for it to close), nor its stdout or sockets.
        close_all_but(report);
        send(report, hook as u32);
        let mut status = 0;
        while libc::waitpid(hook, &mut status, 0) < 0 && interrupted() {}
        send(report, status as u32);
        libc::close(report);
        while libc::waitpid(-1, std::ptr::null_mut(), 0) >= 0 || interrupted() {}
        libc::_exit(0)
    }
}

/// Whether the last system call failed with EINTR (reads errno; allocates nothing).
fn interrupted() -> bool {
    io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Writes `value` (4 bytes) to `fd`, best effort.
///
/// # Safety
/// `fd` must be open.
unsafe fn send(fd: RawFd, value: u32) {
    let bytes = value.to_le_bytes();
    // SAFETY: `bytes` lives for the call; 4 bytes into a socket are written at once or not.
    unsafe { while libc::write(fd, bytes.as_ptr().cast(), bytes.len()) < 0 && interrupted() {} }
}

/// Closes every descriptor but `keep`.
///
/// # Safety
/// Only in a forked child that owns nothing else.
unsafe fn close_all_but(keep: RawFd) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range takes no pointers; closing descriptors this process alone uses.
    unsafe {
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0) == 0;
        if !(below && above) {
            // Before Linux 5.9: one by one, as far as descriptors usually go.
            for fd in 0..65_536 {
                if fd != keep as RawFd {
                    libc::close(fd);
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn to_pid(pid: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Whether process group `pgid` still has a member (a zombie counts until it is reaped).
pub fn group_exists(pgid: u32) -> bool {
    match to_pid(pgid) {
        Some(p) => !matches!(
            rustix::process::test_kill_process_group(p),
            Err(rustix::io::Errno::SRCH)
        ),
        None => false,
    }
}

fn signal_group(pgid: u32, sig: Signal) {
    if let Some(p) = to_pid(pgid)
        && let Err(e) = rustix::process::kill_process_group(p, sig)
        && e != rustix::io::Errno::SRCH
    {
        tracing::warn!(pid = pgid, "cannot signal hook process group {pgid}: {e}");
    }
}

/// The `WATCHDOG_*` variables describing an alert: `WATCHDOG_RESOURCE`, `WATCHDOG_REASON`,
/// `WATCHDOG_USED`, `WATCHDOG_LIMIT`, `WATCHDOG_PREDICTED_S` (empty when unknown),
/// `WATCHDOG_PID` (the watchdog's own PID, `std::process::id()`, as in `watchdog run`'s
/// child), `WATCHDOG_TARGET_PID` (the watched target's PID, `sent.pid`),
/// `WATCHDOG_REQUEST_FILE` (empty when none was written), `WATCHDOG_SIGNAL`, plus
/// `WATCHDOG_KIND`, `WATCHDOG_UNIT` and `WATCHDOG_SEQ`.
pub fn hook_env(sent: &SentRequest, request_file: Option<&Path>) -> Vec<(String, String)> {
    let req = &sent.request;
    let v = |k: &str, val: String| (k.to_string(), val);
    vec![
        v("WATCHDOG_RESOURCE", req.resource.clone()),
        v("WATCHDOG_KIND", req.kind.to_string()),
        v("WATCHDOG_REASON", req.reason.to_string()),
        v("WATCHDOG_USED", req.used.to_string()),
        v("WATCHDOG_LIMIT", req.limit.to_string()),
        v("WATCHDOG_UNIT", req.kind.unit().to_string()),
        v(
            "WATCHDOG_PREDICTED_S",
            req.predicted_s
                .map(|s| format!("{s:.3}"))
                .unwrap_or_default(),
        ),
        v("WATCHDOG_PID", std::process::id().to_string()),
        v("WATCHDOG_TARGET_PID", sent.sent.pid.to_string()),
        v(
            "WATCHDOG_REQUEST_FILE",
            request_file
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
        v("WATCHDOG_SIGNAL", sent.sent.signal.clone()),
        v("WATCHDOG_SEQ", req.seq.to_string()),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `WATCHDOG_PID` was the target's PID in hooks but the watchdog's PID in the `run`
    /// child's environment; hooks now agree with `run` and get the target separately.
    #[test]
    fn watchdog_pid_is_the_watchdogs_in_hooks_too() {
        let mut req = crate::request::tests::sample();
        req.request.seq = 4;
        req.request.predicted_s = None;
        req.sent.pid = 4242;
        let env = hook_env(&req, None);
        assert_eq!(
            get(&env, "WATCHDOG_PID"),
            Some(std::process::id().to_string().as_str())
        );
        assert_eq!(get(&env, "WATCHDOG_TARGET_PID"), Some("4242"));
        assert_eq!(get(&env, "WATCHDOG_PREDICTED_S"), Some(""));
        assert_eq!(get(&env, "WATCHDOG_REQUEST_FILE"), Some(""));
        assert_eq!(get(&env, "WATCHDOG_SEQ"), Some("4"));
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }

    #[test]
    fn hook_user_of_uid_reads_the_passwd_database() {
        let root = HookUser::of_uid(0).unwrap();
        assert_eq!(root.name, "root");
        assert_eq!(root.gid, 0);
        assert!(root.groups.contains(&0), "{root:?}");
        assert!(root.home.is_absolute(), "{root:?}");
        // A UID nobody has (the passwd database on these machines stops far below).
        let err = HookUser::of_uid(3_999_999_999).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("3999999999"), "{err}");
    }
}
