//! Signal every process of the watched tree that catches the signal, and no other.
//!
//! [`signal_tree_with_target`] is the entry point while watching: it takes the target's
//! pidfd, opened when the watch started, and signals the target only through it.
//! [`signal_tree`] does the same after opening a pidfd for the target PID now.
//!
//! What is guaranteed:
//! - **The target** (root of the tree) is signalled only through the pidfd it is given.
//!   With [`signal_tree_with_target`] that pidfd was opened when the watch began, so once
//!   the target has exited a process that got its PID later is never signalled, however
//!   long the watch ran. (With [`signal_tree`] the pidfd is opened at call time: it pins
//!   whatever process has the PID then.)
//! - **Each descendant** is pinned at signal time. For each PID of the tree:
//!   1. a pidfd is opened first, which pins the process: from then on a signal through it
//!      can only reach that process, even if the PID is recycled;
//!   2. `<proc_root>/PID/status` is read for `Tgid`, `PPid` and `SigCgt`;
//!   3. the pidfd is checked: the process has not exited. The pidfd was opened before the
//!      read and a PID is not freed before its process exits, so a process still alive
//!      after the read is the one whose status we read;
//!   4. the pure [`decide`] sends only when the process catches the signal (SIGUSR1's
//!      default action terminates, so a process without a handler would be killed by the
//!      warning), when it is a process (not a thread), and when its parent is in the
//!      tree. The parent check catches a PID recycled between the caller's listing of the
//!      tree and our `pidfd_open`: a stranger's parent is not in the tree. The target's PID
//!      counts as a parent only while the target's pidfd says it is alive (checked after
//!      the status read), so children of a process that reused the target's PID are not
//!      taken for the target's;
//!   5. the signal is sent through the pidfd.
//!
//!   So a descendant is signalled only if it is alive at signal time and its parent is a
//!   PID of the tree; the guarantee rests on the tree listing being recent (the caller
//!   lists it every tick), not on a handle held since the start.
//! - **The calling process** (`std::process::id()`) is never signalled, even when it is in
//!   the tree: the watchdog can be a descendant of its target (Python's `attach()` starts
//!   it as a child of the training process).
//!
//! Nothing outside `tree` (plus the target) is ever signalled, and when no process catches
//! the signal nothing is sent; the caller logs [`no_handler_warning`].

use std::collections::BTreeSet;

use crate::pidfd::PidFd;
use crate::sigcgt::catches;
use watchdog_procfs::{ProcRoot, ProcStatus};
use watchdog_types::units::signal_name;

/// What [`signal_tree_with_target`] (or [`signal_tree`]) did, per PID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalReport {
    /// PIDs the signal was sent to.
    pub sent: Vec<u32>,
    /// PIDs that do not catch the signal (its default action is in force), so were spared.
    pub not_catching: Vec<u32>,
    /// PIDs that ignore the signal (`SIG_IGN`), so were spared.
    pub ignoring: Vec<u32>,
    /// PIDs that could not be checked or signalled, with the reason.
    pub failed: Vec<(u32, String)>,
    /// PIDs that had exited (or whose PID now belongs to a process outside the tree) before we could signal them.
    pub gone: Vec<u32>,
}

impl SignalReport {
    /// Whether no process in the tree catches the signal (nothing sent, nothing failed).
    pub fn none_catching(&self) -> bool {
        self.sent.is_empty() && self.failed.is_empty()
    }
}

/// The decision for one PID, from its status text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It catches the signal: send.
    Send,
    /// It does not catch the signal: spare it.
    NotCatching,
    /// It ignores the signal (`SIG_IGN`): spare it, the signal would be lost.
    Ignores,
    /// The PID is a thread, or its parent is outside the tree (recycled PID): leave it alone.
    NotInTree(String),
    /// The status text could not be understood.
    Unreadable(String),
}

/// Decides whether `pid` gets signal `sig`, from its `/proc/PID/status`.
///
/// `tree` is the set of watched PIDs; `target_pid` is the root of the tree, whose parent
/// is not checked (it is outside the tree by definition).
pub fn decide(
    pid: u32,
    target_pid: u32,
    f: &ProcStatus,
    tree: &BTreeSet<u32>,
    sig: i32,
) -> Decision {
    let Some(mask) = f.sigcgt else {
        return Decision::Unreadable("no SigCgt line in /proc/PID/status".to_string());
    };
    match f.tgid {
        Some(tgid) if tgid == pid => {}
        Some(tgid) => {
            return Decision::NotInTree(format!("{pid} is a thread of process {tgid}"));
        }
        None => return Decision::Unreadable("no Tgid line in /proc/PID/status".to_string()),
    }
    if pid != target_pid {
        match f.ppid {
            Some(ppid) if tree.contains(&ppid) => {}
            Some(ppid) => {
                return Decision::NotInTree(format!(
                    "its parent {ppid} is not in the watched tree (the PID was reused?)"
                ));
            }
            None => return Decision::Unreadable("no PPid line in /proc/PID/status".to_string()),
        }
    }
    if catches(mask, sig) {
        Decision::Send
    } else if f.sigign.is_some_and(|ign| catches(ign, sig)) {
        Decision::Ignores
    } else {
        Decision::NotCatching
    }
}

/// The warning to log when no process in the tree catches `sig` (`report` says which
/// ignore it and which have its default action); says how to install a handler.
pub fn no_handler_warning(sig: i32, report: &SignalReport) -> String {
    let name = signal_name(sig);
    let short = name.strip_prefix("SIG").unwrap_or(&name);
    let default = match sig {
        libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH => "its default action ignores it",
        libc::SIGCONT => "its default action only resumes a stopped process",
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => {
            "its default action would stop the process"
        }
        _ => "its default action would end the process",
    };
    let why = match (report.ignoring.as_slice(), report.not_catching.is_empty()) {
        ([], _) => default.to_string(),
        (ignoring, true) => format!(
            "PID {} ignores it (SIG_IGN), so it would be lost",
            join(ignoring)
        ),
        (ignoring, false) => format!(
            "PID {} ignores it (SIG_IGN); for PID {} {default}",
            join(ignoring),
            join(&report.not_catching)
        ),
    };
    format!(
        "no process in the watched tree catches {name}, so none was signalled ({why}): \
         call training_watchdog.install() or signal.signal(signal.SIG{short}, handler) in the training process"
    )
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sends `sig` to every process in `tree` that catches it, through a pidfd, and to no other process.
///
/// Opens a pidfd for `target_pid` now and calls [`signal_tree_with_target`]; prefer that
/// function with the pidfd opened when the watch started. If the target's pidfd cannot be
/// opened, the target is reported gone (or failed) and the rest of the tree is handled
/// without counting the target's PID as a parent.
pub fn signal_tree(proc_root: &ProcRoot, tree: &[u32], target_pid: u32, sig: i32) -> SignalReport {
    match PidFd::open(target_pid) {
        Ok(fd) => signal_tree_with_target(proc_root, tree, &fd, sig),
        Err(e) => {
            let mut report = SignalReport::default();
            if target_pid == std::process::id() {
                tracing::debug!(target_pid, "not signalling the watchdog itself");
            } else if e.is_gone() {
                report.gone.push(target_pid);
            } else {
                report.failed.push((target_pid, e.to_string()));
            }
            let done = [target_pid].into_iter().collect();
            signal_descendants(proc_root, tree, target_pid, None, &done, sig, &mut report);
            report
        }
    }
}

/// Sends `sig` to every process of the tree that catches it: the target through `target`,
/// the pidfd the caller has held since the watch started, and every other PID of `tree`
/// through a pidfd opened now. Never signals the calling process.
///
/// `proc_root` is normally `/proc`. The target is handled first (whether or not `tree`
/// lists it), then the others in the order given; duplicates are ignored. See the module
/// documentation for what is guaranteed.
pub fn signal_tree_with_target(
    proc_root: &ProcRoot,
    tree: &[u32],
    target: &PidFd,
    sig: i32,
) -> SignalReport {
    signal_tree_with_roots(proc_root, tree, target, &[], sig)
}

/// Like [`signal_tree_with_target`], with more roots: processes of the tree whose parent
/// is not in it (orphans of the run that the watchdog adopted as a child subreaper, or
/// what the target left running when it exited), each given as a pidfd the caller opened
/// and checked to be the process the tree lists. A root is signalled through its pidfd
/// with no parent check, like the target; the rest of the tree as before.
pub fn signal_tree_with_roots(
    proc_root: &ProcRoot,
    tree: &[u32],
    target: &PidFd,
    roots: &[PidFd],
    sig: i32,
) -> SignalReport {
    let target_pid = target.pid();
    let me = std::process::id();
    let mut report = SignalReport::default();
    let mut parents: BTreeSet<u32> = tree.iter().copied().collect();
    parents.insert(target_pid);
    if target_pid == me {
        tracing::debug!(target_pid, "not signalling the watchdog itself");
    } else {
        signal_one(proc_root, target, target_pid, &parents, sig, &mut report);
    }
    let mut done: BTreeSet<u32> = [target_pid, me].into_iter().collect();
    for root in roots {
        if done.insert(root.pid()) {
            signal_one(proc_root, root, root.pid(), &parents, sig, &mut report);
        }
    }
    signal_descendants(
        proc_root,
        tree,
        target_pid,
        Some(target),
        &done,
        sig,
        &mut report,
    );
    report
}

/// Handles every PID of `tree` but those in `done` (the target and the roots already
/// handled) and the calling process. `target` is the target's pidfd; `None` means it could
/// not be opened, so its PID is not a valid parent.
fn signal_descendants(
    proc_root: &ProcRoot,
    tree: &[u32],
    target_pid: u32,
    target: Option<&PidFd>,
    done: &BTreeSet<u32>,
    sig: i32,
    report: &mut SignalReport,
) {
    let me = std::process::id();
    let mut parents: BTreeSet<u32> = tree.iter().copied().collect();
    parents.insert(target_pid);
    let mut target_alive = target.is_some();
    let mut done = done.clone();
    for &pid in tree {
        if !done.insert(pid) {
            continue;
        }
        if pid == me {
            tracing::debug!(pid, "not signalling the watchdog itself");
            continue;
        }
        let fd = match PidFd::open(pid) {
            Ok(fd) => fd,
            Err(e) if e.is_gone() => {
                report.gone.push(pid);
                continue;
            }
            Err(e) => {
                report.failed.push((pid, e.to_string()));
                continue;
            }
        };
        let Some(status) = read_status_checked(proc_root, &fd, pid, report) else {
            continue;
        };
        // The status was read before this check: if the target is alive now, a PPid equal
        // to its PID in that status meant the target, not a process that reused its PID.
        if target_alive {
            target_alive = target.is_some_and(|t| matches!(t.is_exited(), Ok(false)));
            if !target_alive {
                parents.remove(&target_pid);
            }
        }
        act(&fd, pid, target_pid, &status, &parents, sig, report);
    }
}

/// Reads, checks, decides and sends for one process already pinned by `fd`.
fn signal_one(
    proc_root: &ProcRoot,
    fd: &PidFd,
    target_pid: u32,
    parents: &BTreeSet<u32>,
    sig: i32,
    report: &mut SignalReport,
) {
    let pid = fd.pid();
    if let Some(status) = read_status_checked(proc_root, fd, pid, report) {
        act(fd, pid, target_pid, &status, parents, sig, report);
    }
}

/// The status of `pid`, or `None` (with the report updated) when it cannot be read
/// or the pidfd's process exited before the read was done.
fn read_status_checked(
    proc_root: &ProcRoot,
    fd: &PidFd,
    pid: u32,
    report: &mut SignalReport,
) -> Option<ProcStatus> {
    let status = match proc_root.status(pid) {
        Ok(s) => s,
        Err(watchdog_procfs::Error::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            report.gone.push(pid);
            return None;
        }
        Err(e) => {
            report.failed.push((pid, e.to_string()));
            return None;
        }
    };
    // The status we read belongs to the pidfd's process only if that process was still alive after the read.
    match fd.is_exited() {
        Ok(false) => Some(status),
        Ok(true) => {
            report.gone.push(pid);
            None
        }
        Err(e) => {
            report.failed.push((pid, e.to_string()));
            None
        }
    }
}

/// Decides from the status and sends through `fd` when [`decide`] says so.
fn act(
    fd: &PidFd,
    pid: u32,
    target_pid: u32,
    status: &ProcStatus,
    parents: &BTreeSet<u32>,
    sig: i32,
    report: &mut SignalReport,
) {
    match decide(pid, target_pid, status, parents, sig) {
        Decision::Send => match fd.send_signal(sig) {
            Ok(()) => report.sent.push(pid),
            Err(e) if e.is_gone() => report.gone.push(pid),
            Err(e) => report.failed.push((pid, e.to_string())),
        },
        Decision::NotCatching => report.not_catching.push(pid),
        Decision::Ignores => report.ignoring.push(pid),
        Decision::NotInTree(why) => {
            tracing::debug!(pid, "not signalling: {why}");
            report.gone.push(pid);
        }
        Decision::Unreadable(why) => report.failed.push((pid, why)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_procfs::parse_status;

    fn status(tgid: u32, ppid: u32, sigcgt: u64) -> String {
        format!(
            "Name:\tpython3\nTgid:\t{tgid}\nPid:\t{tgid}\nPPid:\t{ppid}\nSigCgt:\t{sigcgt:016x}\n"
        )
    }

    #[test]
    fn decide_table() {
        let tree: BTreeSet<u32> = [100, 101, 102].into_iter().collect();
        let usr1 = 1u64 << (libc::SIGUSR1 - 1);
        let table: Vec<(u32, String, Decision)> = vec![
            (100, status(100, 1, usr1), Decision::Send), // target: parent not checked
            (100, status(100, 1, 0), Decision::NotCatching),
            (101, status(101, 100, usr1 | 2), Decision::Send),
            (102, status(102, 101, 1 << 1), Decision::NotCatching), // catches SIGINT only
            (
                101,
                status(101, 555, usr1),
                Decision::NotInTree(
                    "its parent 555 is not in the watched tree (the PID was reused?)".into(),
                ),
            ),
            (
                101,
                status(100, 100, usr1),
                Decision::NotInTree("101 is a thread of process 100".into()),
            ),
            (
                101,
                "Name:\tx\nTgid:\t101\n".into(),
                Decision::Unreadable("no SigCgt line in /proc/PID/status".into()),
            ),
        ];
        for (pid, text, want) in table {
            assert_eq!(
                decide(
                    pid,
                    100,
                    &parse_status(text.as_bytes()),
                    &tree,
                    libc::SIGUSR1
                ),
                want,
                "{text:?}"
            );
        }
    }

    /// A process that ignores the signal (SIG_IGN) was warned about as if the default
    /// action might kill it.
    #[test]
    fn an_ignored_signal_is_not_said_to_kill() {
        let tree: BTreeSet<u32> = [100].into_iter().collect();
        let usr1 = 1u64 << (libc::SIGUSR1 - 1);
        let ignoring =
            status(100, 1, 0).replace("SigCgt", &format!("SigIgn:\t{usr1:016x}\nSigCgt"));
        assert_eq!(
            decide(
                100,
                100,
                &parse_status(ignoring.as_bytes()),
                &tree,
                libc::SIGUSR1
            ),
            Decision::Ignores
        );
        let report = SignalReport {
            ignoring: vec![100],
            ..SignalReport::default()
        };
        let w = no_handler_warning(libc::SIGUSR1, &report);
        assert!(
            w.contains("PID 100 ignores it (SIG_IGN), so it would be lost"),
            "{w}"
        );
        assert!(!w.contains("default action"), "{w}");
        let mixed = SignalReport {
            ignoring: vec![100],
            not_catching: vec![101],
            ..SignalReport::default()
        };
        let w = no_handler_warning(libc::SIGUSR1, &mixed);
        assert!(
            w.contains(
                "PID 100 ignores it (SIG_IGN); for PID 101 its default action would end the process"
            ),
            "{w}"
        );
        let w = no_handler_warning(libc::SIGWINCH, &SignalReport::default());
        assert!(w.contains("its default action ignores it"), "{w}");
    }

    #[test]
    fn warning_says_how() {
        let w = no_handler_warning(
            libc::SIGUSR1,
            &SignalReport {
                not_catching: vec![7],
                ..SignalReport::default()
            },
        );
        assert!(
            w.contains("its default action would end the process"),
            "{w}"
        );
        assert!(
            w.contains("no process in the watched tree catches SIGUSR1"),
            "{w}"
        );
        assert!(w.contains("training_watchdog.install()"), "{w}");
        assert!(w.contains("signal.signal(signal.SIGUSR1, handler)"), "{w}");
    }

    /// A fake proc root holding a `status` file per (pid, ppid, sigcgt).
    fn fake_proc(entries: &[(u32, u32, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for &(pid, ppid, mask) in entries {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("status"), status(pid, ppid, mask)).unwrap();
        }
        dir
    }

    fn usr1() -> u64 {
        1u64 << (libc::SIGUSR1 - 1)
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

    /// How long a `sleep` that was sent SIGUSR1 has to die: a deadline for a slow, busy
    /// machine, not a speed; a correct run waits only as long as the death takes.
    const DIES_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

    /// How long a `sleep` that must not have been signalled is watched for its death.
    /// Short is safe: a late death could only make the test pass wrongly, never fail.
    const WATCHED_FOR: std::time::Duration = std::time::Duration::from_millis(200);

    /// `sleep` has no SIGUSR1 handler, so a signal that reached it kills it: the signal
    /// it died of when it ends within `within`, else `None`.
    fn killed_by(child: &mut std::process::Child, within: std::time::Duration) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let fd = PidFd::open(child.id()).ok()?;
        if fd.wait_exit(Some(within)).unwrap() {
            child.wait().unwrap().signal()
        } else {
            None
        }
    }

    fn stop(mut child: std::process::Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The status comes from the given proc root: a fake root saying a live child does
    /// not catch SIGUSR1 must stop the send (which would otherwise kill it).
    #[test]
    fn reads_status_from_proc_root() {
        let mut child = sleeper();
        let pid = child.id();
        let root = fake_proc(&[(pid, 1, 0)]);
        let r = signal_tree(&ProcRoot::new(root.path()), &[pid, pid], pid, libc::SIGUSR1);
        assert_eq!(r.not_catching, vec![pid]);
        assert!(r.sent.is_empty() && r.failed.is_empty() && r.gone.is_empty());
        assert!(r.none_catching());
        assert_eq!(killed_by(&mut child, WATCHED_FOR), None);
        stop(child);

        // A PID missing from the fake root counts as gone.
        let r = signal_tree(&ProcRoot::new(root.path()), &[1], 1, libc::SIGUSR1);
        assert!(r.sent.is_empty());
    }

    #[test]
    fn signals_target_through_held_pidfd() {
        let mut child = sleeper();
        let pid = child.id();
        let fd = PidFd::open(pid).unwrap();
        let root = fake_proc(&[(pid, 1, usr1())]);
        let r = signal_tree_with_target(&ProcRoot::new(root.path()), &[pid], &fd, libc::SIGUSR1);
        assert_eq!(r.sent, vec![pid], "{r:?}");
        assert_eq!(killed_by(&mut child, DIES_WITHIN), Some(libc::SIGUSR1));
    }

    /// The target's PID was resolved again at every alert, so after the target exited
    /// a process that reused its PID (and that process's children) could be signalled.
    #[test]
    fn recycled_target_pid_is_never_signalled() {
        // The target: exited and reaped, its pidfd held since "the watch started".
        let mut target = std::process::Command::new("true").spawn().unwrap();
        let target_pid = target.id();
        let held = PidFd::open(target_pid).unwrap();
        target.wait().unwrap();
        // A live process posing as a child of whatever now has the target's PID.
        let mut orphan = sleeper();
        let opid = orphan.id();
        let root = fake_proc(&[(target_pid, 1, usr1()), (opid, target_pid, usr1())]);
        let r = signal_tree_with_target(
            &ProcRoot::new(root.path()),
            &[target_pid, opid],
            &held,
            libc::SIGUSR1,
        );
        assert!(r.sent.is_empty(), "{r:?}");
        assert!(
            r.gone.contains(&target_pid) && r.gone.contains(&opid),
            "{r:?}"
        );
        assert_eq!(killed_by(&mut orphan, WATCHED_FOR), None);
        stop(orphan);
    }

    /// While the target is alive, its children are signalled as before.
    #[test]
    fn children_of_live_target_are_signalled() {
        let target = sleeper();
        let mut kid = sleeper();
        let (tpid, kpid) = (target.id(), kid.id());
        let held = PidFd::open(tpid).unwrap();
        let root = fake_proc(&[(tpid, 1, 0), (kpid, tpid, usr1())]);
        let r = signal_tree_with_target(
            &ProcRoot::new(root.path()),
            &[tpid, kpid],
            &held,
            libc::SIGUSR1,
        );
        assert_eq!(r.sent, vec![kpid], "{r:?}");
        assert_eq!(r.not_catching, vec![tpid], "{r:?}");
        assert_eq!(killed_by(&mut kid, DIES_WITHIN), Some(libc::SIGUSR1));
        stop(target);
    }

    /// The watchdog started by Python's `attach()` is a child of its target, so it is in
    /// the tree; it signalled itself (SIGUSR1's default action would kill it).
    #[test]
    fn never_signals_the_calling_process() {
        let me = std::process::id();
        let target = sleeper();
        let tpid = target.id();
        let held = PidFd::open(tpid).unwrap();
        // Our fake status says we catch SIGUSR1 and are the target's child; if we were
        // signalled, the default action would end this test binary.
        let root = fake_proc(&[(tpid, 1, 0), (me, tpid, usr1())]);
        let r = signal_tree_with_target(
            &ProcRoot::new(root.path()),
            &[tpid, me],
            &held,
            libc::SIGUSR1,
        );
        assert!(!r.sent.contains(&me), "{r:?}");
        assert!(r.none_catching(), "{r:?}");
        assert_eq!(r.not_catching, vec![tpid]);
        assert!(!r.gone.contains(&me) && !r.not_catching.contains(&me));
        stop(target);

        // As the target itself, through either entry point.
        let root = fake_proc(&[(me, 1, usr1())]);
        let mine = PidFd::open(me).unwrap();
        assert_eq!(
            signal_tree_with_target(&ProcRoot::new(root.path()), &[me], &mine, libc::SIGUSR1),
            SignalReport::default()
        );
        assert_eq!(
            signal_tree(&ProcRoot::new(root.path()), &[me], me, libc::SIGUSR1),
            SignalReport::default()
        );
    }
}
