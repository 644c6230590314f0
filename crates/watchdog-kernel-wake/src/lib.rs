//! `watchdog-kernel-wake`: the kernel's notices that memory changed, to wake the loop.
//!
//! Each is armed or honestly refused. Each run arms them in `watchdog-watch` (`watch/kernel.rs`,
//! `docs/kernel-wake.md`).
//!
//! Polling a file at a fixed rate costs a wake-up every period and still misses what happens
//! in between. For memory the kernel can say itself when something changed:
//!
//! - [`CgroupV1Threshold`]: an eventfd signalled when a cgroup v1 memory cgroup's
//!   `memory.usage_in_bytes` crosses a threshold (`cgroup.event_control`). The only early
//!   warning: it can be placed anywhere below the limit.
//! - [`CgroupV2Events`]: an inotify `IN_MODIFY` on a cgroup v2 `memory.events`, raised when
//!   a counter there moves. Those count only `memory.high`/`memory.max` hits and OOMs:
//!   cgroup v2 has no early threshold.
//! - [`PsiTrigger`]: a PSI trigger on `/proc/pressure/memory` or a cgroup v2
//!   `memory.pressure`, woken (`POLLPRI`) when tasks stalled on memory for longer than a
//!   threshold within a window.
//!
//! Each one is armed or refused with an [`Unarmable`] whose [`Reason`] is one line a user
//! understands (cgroupfs read-only, permission, unsupported kernel, no PSI, ...), so the
//! caller can say once why it polls instead. Nothing here waits: each source hands out its
//! file descriptor and the poll flag it wakes with, and the caller's loop polls them all.
//! What can be armed where is written in `docs/kernel-wake.md`.
//!
//! [`ask_for_a_short_slice`] makes the woken loop run at once on a busy machine rather than
//! at the next scheduler tick.

#![deny(missing_docs)]

mod psi;
mod slice;
mod v1;
mod v2;

pub use psi::{PsiSpec, PsiTrigger, Stall};
pub use slice::{SHORT_SLICE, SliceAsked, ask_for_a_short_slice};
pub use v1::{CgroupV1Threshold, Settled};
pub use v2::{CgroupV2Events, Grown, MemoryEvents, ParseError, Wake, parse_memory_events};

use std::path::{Path, PathBuf};

pub use rustix::event::PollFlags;

/// A kernel notification that could not be armed: where, why in one line, and the system
/// error when there was one.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct Unarmable {
    /// The file the notification was to be armed on.
    pub path: PathBuf,
    /// Why, in words a user understands.
    pub reason: Reason,
    /// The system error behind it, when there was one.
    #[source]
    pub source: Option<std::io::Error>,
}

/// Why a kernel notification cannot be armed. Its `Display` is one plain line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// `EROFS`: the file system holding the file is mounted read-only.
    #[error(
        "the cgroup filesystem is read-only here (systemd's ProtectControlGroups=yes, or a container)"
    )]
    ReadOnly,
    /// `EACCES`/`EPERM` on a cgroup file.
    #[error("permission denied: this process may not arm a notification on this file")]
    Permission,
    /// `EOPNOTSUPP`/`EINVAL` from `cgroup.event_control`.
    #[error(
        "this kernel does not support cgroup v1 memory thresholds (PREEMPT_RT kernels refuse them)"
    )]
    V1Unsupported,
    /// The directory is not a cgroup v1 memory cgroup (no `memory.usage_in_bytes`).
    #[error("not a cgroup v1 memory cgroup (no memory.usage_in_bytes or cgroup.event_control)")]
    NotV1Memory,
    /// A cgroup v2 directory was given where an early threshold was asked for.
    #[error(
        "cgroup v2 has no early memory threshold: memory.events only changes at memory.high, memory.max and OOM"
    )]
    V2NoThreshold,
    /// No `memory.events` in the directory.
    #[error(
        "no memory.events: not a cgroup v2 directory, or its memory controller is not enabled (the parent's cgroup.subtree_control)"
    )]
    NoMemoryEvents,
    /// The inotify instance or watch limit is reached.
    #[error("inotify limit reached (fs.inotify.max_user_instances or fs.inotify.max_user_watches)")]
    InotifyLimit,
    /// The pressure file is missing.
    #[error("no PSI here: the kernel is built without CONFIG_PSI or booted with psi=0")]
    NoPsi,
    /// `EOPNOTSUPP` from a pressure file.
    #[error("PSI is disabled here (psi=0 at boot, or cgroup.pressure is 0 for this cgroup)")]
    PsiDisabled,
    /// `EPERM` opening `/proc/pressure/*` for writing.
    #[error("permission denied: before Linux 6.4 a PSI trigger needs CAP_SYS_RESOURCE")]
    PsiNeedsPrivilege,
    /// `EINVAL` for a window that is not a multiple of 2 s, written without
    /// `CAP_SYS_RESOURCE`.
    #[error(
        "without CAP_SYS_RESOURCE a PSI trigger's window must be a multiple of 2 s (Linux 6.4 and later)"
    )]
    PsiUnprivilegedWindow,
    /// The trigger asked for is out of the kernel's bounds (said before the kernel is asked).
    #[error("{0}")]
    BadTrigger(String),
    /// A file's text is not what the kernel documents.
    #[error("unexpected content: {0}")]
    BadContent(String),
    /// Any other system error.
    #[error("unexpected system error")]
    Other,
}

impl Unarmable {
    /// An `Unarmable` for `path` with `reason` and no system error.
    fn new(path: &Path, reason: Reason) -> Unarmable {
        Unarmable {
            path: path.to_path_buf(),
            reason,
            source: None,
        }
    }

    /// An `Unarmable` for `path` from the system error `source`, its reason chosen by
    /// `reason_of` (`None`: [`Reason::Other`]).
    fn io(
        path: &Path,
        source: std::io::Error,
        reason_of: impl FnOnce(rustix::io::Errno) -> Option<Reason>,
    ) -> Unarmable {
        let reason = rustix::io::Errno::from_io_error(&source)
            .and_then(reason_of)
            .unwrap_or(Reason::Other);
        Unarmable {
            path: path.to_path_buf(),
            reason,
            source: Some(source),
        }
    }
}

/// The reasons every cgroup file shares: read-only mount, permission.
fn cgroupfs_reason(errno: rustix::io::Errno) -> Option<Reason> {
    use rustix::io::Errno;
    match errno {
        Errno::ROFS => Some(Reason::ReadOnly),
        Errno::ACCESS | Errno::PERM => Some(Reason::Permission),
        _ => None,
    }
}

/// Reads the whole of `file` from offset 0 with `pread` (the file stays open, as the
/// kernel's cgroup and PSI files are meant to be re-read).
fn pread_text(file: &std::fs::File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    buf.clear();
    let mut chunk = [0u8; 512];
    loop {
        let n = file.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
