//! Signal every process of the watched tree that catches the signal, and no other.
//!
//! For each PID of the tree, [`signal_tree`]:
//! 1. opens a pidfd first, which pins the process: from then on a signal through it can
//!    only reach that process, even if the PID is recycled;
//! 2. reads `<proc_root>/PID/status` for `Tgid`, `PPid` and `SigCgt`;
//! 3. checks through the pidfd that the process has not exited. The pidfd was opened
//!    before the read and the PID is not freed before the process exits, so a process
//!    still alive after the read is the one whose status we read: a recycled PID cannot
//!    slip in between (the check would see the exit);
//! 4. decides with the pure [`decide`]: send only when the process catches the signal
//!    (SIGUSR1's default action terminates, so a process without a handler would be
//!    killed by the warning), when it is a process (not a thread), and — for any PID
//!    but the target — when its parent is in the tree. The parent check catches a PID
//!    that was recycled between the caller's listing of the tree and our `pidfd_open`;
//! 5. sends through the pidfd.
//!
//! Nothing outside `tree` is ever signalled, and when no process catches the signal
//! nothing is sent; the caller logs [`no_handler_warning`].

use std::collections::BTreeSet;
use std::path::Path;

use crate::pidfd::PidFd;
use crate::sigcgt::{catches, parse_status, read_status};
use watchdog_types::units::signal_name;

/// What [`signal_tree`] did, per PID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalReport {
    /// PIDs the signal was sent to.
    pub sent: Vec<u32>,
    /// PIDs that do not catch the signal, so were spared.
    pub not_catching: Vec<u32>,
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
    /// The PID is a thread, or its parent is outside the tree (recycled PID): leave it alone.
    NotInTree(String),
    /// The status text could not be understood.
    Unreadable(String),
}

/// Decides whether `pid` gets signal `sig`, from the text of its `/proc/PID/status`.
///
/// `tree` is the set of watched PIDs; `target_pid` is the root of the tree, whose parent
/// is not checked (it is outside the tree by definition).
pub fn decide(
    pid: u32,
    target_pid: u32,
    status_text: &str,
    tree: &BTreeSet<u32>,
    sig: i32,
) -> Decision {
    let f = parse_status(status_text);
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
    } else {
        Decision::NotCatching
    }
}

/// The warning to log when no process in the tree catches `sig`; says how to install a handler.
pub fn no_handler_warning(sig: i32) -> String {
    let name = signal_name(sig);
    let short = name.strip_prefix("SIG").unwrap_or(&name);
    format!(
        "no process in the watched tree catches {name}, so none was signalled (its default action may kill the process): \
         call training_watchdog.install() or signal.signal(signal.SIG{short}, handler) in the training process"
    )
}

/// Sends `sig` to every process in `tree` that catches it, through a pidfd, and to no other process.
///
/// `proc_root` is normally `/proc`. The target is handled first, then the others in the
/// order given; duplicates are ignored. See the module documentation for the checks.
pub fn signal_tree(proc_root: &Path, tree: &[u32], target_pid: u32, sig: i32) -> SignalReport {
    let set: BTreeSet<u32> = tree.iter().copied().collect();
    let mut order: Vec<u32> = Vec::with_capacity(set.len());
    if set.contains(&target_pid) {
        order.push(target_pid);
    }
    for &pid in tree {
        if !order.contains(&pid) {
            order.push(pid);
        }
    }

    let mut report = SignalReport::default();
    for pid in order {
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
        let text = match read_status(proc_root, pid) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                report.gone.push(pid);
                continue;
            }
            Err(e) => {
                report.failed.push((
                    pid,
                    format!(
                        "cannot read {}: {e}",
                        crate::sigcgt::status_path(proc_root, pid).display()
                    ),
                ));
                continue;
            }
        };
        // The status we read belongs to the pidfd's process only if that process was still alive after the read.
        match fd.is_exited() {
            Ok(false) => {}
            Ok(true) => {
                report.gone.push(pid);
                continue;
            }
            Err(e) => {
                report.failed.push((pid, e.to_string()));
                continue;
            }
        }
        match decide(pid, target_pid, &text, &set, sig) {
            Decision::Send => match fd.send_signal(sig) {
                Ok(()) => report.sent.push(pid),
                Err(e) if e.is_gone() => report.gone.push(pid),
                Err(e) => report.failed.push((pid, e.to_string())),
            },
            Decision::NotCatching => report.not_catching.push(pid),
            Decision::NotInTree(why) => {
                tracing::debug!(pid, "not signalling: {why}");
                report.gone.push(pid);
            }
            Decision::Unreadable(why) => report.failed.push((pid, why)),
        }
    }
    report
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
                decide(pid, 100, &text, &tree, libc::SIGUSR1),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn warning_says_how() {
        let w = no_handler_warning(libc::SIGUSR1);
        assert!(
            w.contains("no process in the watched tree catches SIGUSR1"),
            "{w}"
        );
        assert!(w.contains("training_watchdog.install()"), "{w}");
        assert!(w.contains("signal.signal(signal.SIGUSR1, handler)"), "{w}");
    }

    /// The status comes from the given proc root: a fake root saying our own test process
    /// does not catch SIGUSR1 must stop the send (which would otherwise kill the test).
    #[test]
    fn reads_status_from_proc_root() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        std::fs::create_dir(dir.path().join(me.to_string())).unwrap();
        std::fs::write(
            dir.path().join(me.to_string()).join("status"),
            status(me, 1, 0),
        )
        .unwrap();
        let r = signal_tree(dir.path(), &[me, me], me, libc::SIGUSR1);
        assert_eq!(r.not_catching, vec![me]);
        assert!(r.sent.is_empty() && r.failed.is_empty() && r.gone.is_empty());
        assert!(r.none_catching());

        // A PID missing from the fake root counts as gone.
        let r = signal_tree(dir.path(), &[1], 1, libc::SIGUSR1);
        assert!(r.sent.is_empty());
    }
}
