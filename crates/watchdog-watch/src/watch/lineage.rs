//! The run beyond its first process: what a launcher backgrounds, what a double fork
//! leaves behind, and what the target leaves running when it exits.
//!
//! In `run` mode the watchdog is a child subreaper (`PR_SET_CHILD_SUBREAPER`,
//! <https://man7.org/linux/man-pages/man2/PR_SET_CHILD_SUBREAPER.2const.html>), set before
//! the command starts: a process of the run whose parent exits is re-parented to the
//! watchdog instead of init, and the process tree watches the watchdog's children other
//! than the target, its hooks and the SLURM controller's commands it runs
//! ([`ProcessTree::adopt_orphans_of`]). The watchdog reaps
//! those adopted processes itself, each by its own PID (`waitid(P_PID, pid, WNOHANG)`),
//! never with `waitpid(-1)`, which would steal the status of the command or of a hook.
//!
//! With `--pid` the watchdog is nobody's parent: when the target exits, the processes of
//! its tree that run on (re-parented to init or another subreaper) stay watched through
//! the descriptors the tree opened while they were in it ([`ProcessTree::keep_survivors`]).
//!
//! Either way, when the target exits while processes of the run remain, the watchdog says
//! which (log line and `survivors` event), watches them like the target (memory, alerts,
//! signals), and ends the watch when the last one exits, with the target's status. They
//! are signalled through pidfds opened and checked here ([`Watch::roots`]): their parent
//! is not in the tree, so the alerter's parent check cannot vouch for them.

use std::os::fd::AsFd as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::process::{Pid, WaitId, WaitIdOptions};
use watchdog_alerter::hook::Hooks;
use watchdog_alerter::pidfd::PidFd;
use watchdog_sampler::tree::ProcessTree;
use watchdog_types::EventBody;
use watchdog_types::units::{format_duration_s, signal_name};

use super::Watch;
use crate::Failure;
use crate::schedule::Waited;
use crate::target::{TargetExit, comm};
use crate::wake::Woken;

/// What the single-run loop sleeps on between ticks: the wake-up, so a signal wakes it at
/// once, and the stop flag of `--pid` (SIGINT, SIGTERM, SIGHUP). The service waits on its
/// own and asks with neither, never blocking.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Waiting<'a> {
    pub(super) wake: Option<&'a crate::wake::Wake>,
    pub(super) stop: Option<&'a std::sync::atomic::AtomicUsize>,
}

impl Waiting<'_> {
    /// The signal the watchdog was told to stop by, if it was.
    pub(super) fn stop_signal(&self) -> Option<i32> {
        let sig = self.stop?.load(Ordering::Relaxed);
        (sig != 0).then_some(sig as i32)
    }
}

/// The target, what it leaves running, and who it belongs to.
pub(super) struct Run {
    /// The process watched (started by `run`, or found by PID).
    pub(super) target: crate::target::Target,
    /// The target's status, once it exited (the watch goes on while the run's other
    /// processes remain).
    pub(super) exit: Option<TargetExit>,
    /// When the target exited leaving processes of the run behind.
    pub(super) survivors_since: Option<Instant>,
    /// Set once nothing of the run is left to watch.
    pub(super) over: bool,
    /// A signal `run` could not forward to the exited command (for the survivors).
    pub(super) unforwarded: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// Who the run belongs to and what it is, for status readers.
    pub(super) label: crate::Label,
    /// What a single run's wait polls: its pidfd and kernel descriptors, kept warm.
    pub(super) wait_set: crate::wake::WaitSet,
}

impl Run {
    /// The run of `target`, not exited.
    pub(super) fn of(target: crate::target::Target) -> Run {
        Run {
            target,
            exit: None,
            survivors_since: None,
            over: false,
            unforwarded: None,
            label: crate::Label::default(),
            wait_set: crate::wake::WaitSet::default(),
        }
    }

    /// Whether the target's command failed (exited other than with 0), once it exited.
    pub(super) fn failed(&self) -> bool {
        !matches!(self.exit, None | Some(TargetExit::Code(0)))
    }
}

/// How often the processes a run left running are looked at between samples.
const SURVIVORS_EVERY: Duration = Duration::from_millis(100);

/// The processes of `tree` whose parent is not in it, but the `target`, each pinned by a
/// pidfd checked to be the process the tree tracks: orphans the watchdog adopted, or what
/// the target left running.
pub(super) fn roots(tree: &mut ProcessTree, target: u32) -> Vec<PidFd> {
    let mut candidates: Vec<u32> = tree.survivors().to_vec();
    let adopted = tree.adopter_children();
    candidates.extend(tree.pids().iter().filter(|p| adopted.contains(p)));
    candidates.sort_unstable();
    candidates.dedup();
    candidates
        .into_iter()
        .filter(|&p| p != target)
        .filter_map(|pid| {
            let fd = PidFd::open(pid).ok()?;
            // Opened first, checked after: alive now means the pidfd is the tracked one.
            tree.still_tracked(pid).then_some(fd)
        })
        .collect()
}

/// Makes the watchdog a child subreaper, before `run` starts the command.
pub fn become_subreaper() -> Result<(), Failure> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(|e| {
        Failure::Runtime(format!(
            "cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): {e}; processes the command backgrounds could not be watched"
        ))
    })
}

/// Sets up the tree: in `run` mode (`adopting`) it follows the watchdog's own children but
/// the target and the hooks; with `--pid` it keeps what the target leaves running.
pub fn follow_the_run(tree: &mut ProcessTree, hooks: &Hooks, adopting: bool) {
    if adopting {
        let hooks = hooks.clone();
        tree.adopt_orphans_of(
            std::process::id(),
            Box::new(move |pid| hooks.is_hook(pid) || watchdog_slurm::is_controller_command(pid)),
        );
    } else {
        tree.keep_survivors(true);
    }
}

/// `PID N (name)` for each PID, joined by commas.
fn describe(pids: &[(u32, String)]) -> String {
    pids.iter()
        .map(|(pid, name)| format!("PID {pid} ({name})"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Watch {
    /// Waits until the next tick (at most `timeout`), or until a kernel source of the run
    /// is ready (the caller samples it: [`Watch::kernel_woke`]); [`Waited::Over`] when
    /// the target exited and no process of the run is left. A stop signal ends the wait
    /// at once (the loop then stops), and so does a signal `run` could not forward to the
    /// exited target (it goes to the processes left running, then the wait goes on).
    pub(super) fn wait_for_the_run(&mut self, waiting: &Waiting<'_>, timeout: Duration) -> Waited {
        let deadline = Instant::now() + timeout;
        if self.run.exit.is_none() {
            return match self.pause(waiting, deadline, true) {
                Woken::Other if self.take_the_exit() => {
                    self.run.over = true;
                    Waited::Over
                }
                Woken::Other | Woken::Woken | Woken::Timeout => Waited::Deadline,
                Woken::Ready => Waited::Kernel,
            };
        }
        // The processes left running have no pidfd to wait on: they are looked at every
        // SURVIVORS_EVERY, so the watch ends soon after the last one (a forwarded SIGTERM).
        loop {
            let next = deadline.min(Instant::now() + SURVIVORS_EVERY);
            self.pause(waiting, next, false);
            self.forward_to_survivors();
            self.end_failed_survivors();
            self.reap_adopted();
            // Walked again only when a process was created or reaped since the last walk.
            self.sampler.tree_mut().refresh_if_changed();
            if self.survivor_pids().next().is_none() {
                tracing::info!(
                    "the last process PID {} ({}) left running has exited",
                    self.run.target.pid,
                    self.run.target.name
                );
                self.run.over = true;
                return Waited::Over;
            }
            // A SIGTERM held for a save is the caller's to take now.
            if Instant::now() >= deadline
                || waiting.stop_signal().is_some()
                || self.notice_pending()
            {
                return Waited::Deadline;
            }
        }
    }

    /// Sleeps until `deadline`, a stop signal, or (`for_exit`) the target's exit
    /// ([`Woken::Other`]) or one of its kernel wake-ups ([`Woken::Ready`]).
    fn pause(&mut self, waiting: &Waiting<'_>, deadline: Instant, for_exit: bool) -> Woken {
        let pidfd = std::sync::Arc::clone(&self.run.target.pidfd);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let woken = match waiting.wake {
                Some(wake) => {
                    let set = &mut self.run.wait_set;
                    set.clear();
                    if for_exit {
                        // The pidfd first: its exit wins over a kernel wake-up.
                        set.push(pidfd.as_fd(), crate::wake::PollFlags::IN);
                        self.kernel.each_fd(|fd, flags| set.push(fd, flags));
                    }
                    wake.wait_set(set, left).map(|w| match w {
                        Woken::Ready if set.is_ready(0) => Woken::Other,
                        w => w,
                    })
                }
                None if for_exit => pidfd
                    .wait_exit(Some(left))
                    .map(|exited| if exited { Woken::Other } else { Woken::Timeout })
                    .map_err(std::io::Error::other),
                None => {
                    std::thread::sleep(left);
                    Ok(Woken::Timeout)
                }
            };
            match woken {
                Ok(Woken::Woken) if waiting.stop_signal().is_none() => {
                    self.forward_to_survivors();
                    // A SIGTERM held for a save: the caller takes it now.
                    if Instant::now() >= deadline || self.notice_pending() {
                        return Woken::Timeout;
                    }
                }
                Ok(w) => return w,
                Err(e) => {
                    tracing::warn!("cannot wait for the target: {e}");
                    std::thread::sleep(self.settings.interval.min(left));
                    return Woken::Timeout;
                }
            }
        }
    }

    /// The target just exited: collects its status and, when processes of the run remain,
    /// says which and keeps watching. Returns true when nothing is left to watch.
    fn take_the_exit(&mut self) -> bool {
        let exit = self.run.target.reap();
        self.run.exit = Some(exit);
        self.reap_adopted();
        self.sampler.tree_mut().mark_target_exited();
        let left = self.survivors_alive();
        if left.is_empty() {
            return true;
        }
        self.run.survivors_since = Some(std::time::Instant::now());
        let status = match exit {
            TargetExit::Code(c) => format!("exited with code {c}"),
            TargetExit::Signal(s) => format!("was killed by {}", signal_name(s)),
            TargetExit::Unknown => "exited".to_string(),
        };
        tracing::warn!(
            "PID {} ({}) {status}, but {} process(es) of the run it started are still running: {}; \
             watching them until the last one exits",
            self.run.target.pid,
            self.run.target.name,
            left.len(),
            describe(&left)
        );
        let (code, signal) = match exit {
            TargetExit::Code(c) => (Some(c), None),
            TargetExit::Signal(s) => (None, Some(s)),
            TargetExit::Unknown => (None, None),
        };
        self.emit(EventBody::Survivors {
            pid: self.run.target.pid,
            code,
            signal,
            pids: left.iter().map(|(p, _)| *p).collect(),
            names: left.into_iter().map(|(_, n)| n).collect(),
        });
        false
    }

    /// The processes of the tree other than the target that have not exited, with names.
    fn survivors_alive(&self) -> Vec<(u32, String)> {
        let proc = &self.settings.host.proc;
        self.survivor_pids().map(|p| (p, comm(proc, p))).collect()
    }

    /// The PIDs of [`survivors_alive`](Self::survivors_alive), without reading their names.
    fn survivor_pids(&self) -> impl Iterator<Item = u32> + '_ {
        let proc = &self.settings.host.proc;
        self.sampler
            .tree_pids()
            .iter()
            .copied()
            .filter(move |&p| p != self.run.target.pid && proc.is_alive(p))
    }

    /// Reaps the adopted processes that exited (`run` mode), each by its PID: never the
    /// target before its status is collected, never a hook's `sh` (its thread waits for it).
    pub(super) fn reap_adopted(&mut self) {
        let target = self.run.exit.is_none().then_some(self.run.target.pid);
        let children: Vec<u32> = self.sampler.tree_mut().adopter_children().to_vec();
        for pid in children {
            if Some(pid) == target {
                continue;
            }
            let Some(p) = Pid::from_raw(pid as i32) else {
                continue;
            };
            let reaped = self.courier.hooks.while_no_hook_starts(pid, |is_hook_sh| {
                if is_hook_sh {
                    return None;
                }
                rustix::process::waitid(
                    WaitId::Pid(p),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                )
                .ok()
                .flatten()
            });
            if let Some(status) = reaped {
                tracing::debug!(
                    pid,
                    "reaped adopted process {pid} (exit status {:?}, signal {:?})",
                    status.exit_status(),
                    status.terminating_signal()
                );
            }
        }
    }

    /// The processes of the tree whose parent is not in it (see [`roots`]).
    pub(super) fn roots(&mut self) -> Vec<PidFd> {
        roots(self.sampler.tree_mut(), self.run.target.pid)
    }

    /// In the survivors' time, a SIGINT/SIGTERM/SIGHUP that `run` could not forward to the
    /// exited command goes to the processes it left running.
    fn forward_to_survivors(&mut self) {
        let Some(flag) = &self.run.unforwarded else {
            return;
        };
        let sig = flag.swap(0, Ordering::Relaxed) as i32;
        if sig == 0 {
            return;
        }
        for fd in self.roots() {
            match fd.send_signal(sig) {
                Ok(()) => tracing::info!("forwarded {} to PID {}", signal_name(sig), fd.pid()),
                Err(e) => tracing::debug!("could not forward {}: {e}", signal_name(sig)),
            }
        }
    }

    /// Ends the hooks still running (the watchdog is exiting) and records how each ended.
    pub(super) fn end_hooks(&mut self) {
        let hooks = self.courier.hooks.clone();
        if !hooks.running().is_empty() {
            let ended = hooks.end_all(|| self.reap_adopted());
            if !ended.is_empty() {
                tracing::debug!("ended {} hook process group(s)", ended.len());
            }
        }
        self.record_hook_outcomes();
    }

    /// Emits a `hook` event for every hook that finished since the last call.
    pub(super) fn record_hook_outcomes(&mut self) {
        for o in self.courier.finished() {
            self.emit(EventBody::Hook {
                command: o.cmd,
                pid: o.pid,
                code: o.code,
                signal: o.signal,
                duration_s: o.duration_s,
                timed_out: o.timed_out,
                ended_at_exit: o.ended_at_exit,
            });
        }
    }

    /// How long the run's leftover processes were watched after the target exited, for
    /// the summary.
    pub(super) fn survivors_note(&self) -> String {
        match self.run.survivors_since {
            Some(t) => format!(
                " Processes it started ran on for {} after it exited, and were watched until the last one exited.",
                format_duration_s(t.elapsed().as_secs_f64())
            ),
            None => String::new(),
        }
    }
}
