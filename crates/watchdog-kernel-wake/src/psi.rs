//! PSI triggers: the kernel wakes a `poll()` with `POLLPRI` when tasks stalled on memory
//! for longer than a threshold within a time window (Documentation/accounting/psi.rst,
//! "Monitoring for pressure thresholds").
//!
//! A trigger `some|full <stall us> <window us>` is written to `/proc/pressure/memory`
//! (system-wide) or a cgroup v2 `memory.pressure`, and lives as long as the descriptor it
//! was written to: one trigger per descriptor. Without `CAP_SYS_RESOURCE` (the service
//! lacks it) the window must be a multiple of 2 s on Linux 6.4 and later, and the trigger is
//! then checked by the 2 s averaging work rather than a real-time poller; before 6.4
//! `/proc/pressure/*` could not be written at all without it. [`PsiSpec::DEFAULT`]'s 2 s
//! window works both ways.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::Duration;

use rustix::event::PollFlags;
use rustix::io::Errno;

use crate::{Reason, Unarmable, cgroupfs_reason};

/// Which stall a trigger measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Some task was stalled on memory.
    Some,
    /// Every non-idle task was stalled on memory at once.
    Full,
}

impl Stall {
    /// The kernel's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stall::Some => "some",
            Stall::Full => "full",
        }
    }
}

/// A PSI trigger: wake when `stall` time in any `window` exceeds `threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsiSpec {
    /// Which stall is measured.
    pub stall: Stall,
    /// How much stall time within the window wakes.
    pub threshold: Duration,
    /// The moving window it is measured over.
    pub window: Duration,
}

impl PsiSpec {
    /// 200 ms of `some` stall within 2 s: a window every kernel since 5.2 takes, with or
    /// without `CAP_SYS_RESOURCE` (a multiple of 2 s).
    pub const DEFAULT: PsiSpec = PsiSpec {
        stall: Stall::Some,
        threshold: Duration::from_millis(200),
        window: Duration::from_secs(2),
    };

    /// The smallest window every kernel takes (6.4 removed this lower bound).
    pub const MIN_WINDOW: Duration = Duration::from_millis(500);
    /// The largest window the kernel takes.
    pub const MAX_WINDOW: Duration = Duration::from_secs(10);
    /// Without `CAP_SYS_RESOURCE` the window must be a multiple of this (Linux 6.4+).
    pub const UNPRIVILEGED_WINDOW_STEP: Duration = Duration::from_secs(2);

    /// Checks the bounds the kernel checks, with a message naming the bad value: a window
    /// of 500 ms to 10 s in whole microseconds, a threshold above zero and at most the window.
    pub fn check(&self) -> Result<(), String> {
        let ms = |d: Duration| format!("{} ms", d.as_secs_f64() * 1000.0);
        if self.window < Self::MIN_WINDOW || self.window > Self::MAX_WINDOW {
            return Err(format!(
                "PSI window {}: expected 500 ms to 10 s",
                ms(self.window)
            ));
        }
        if !self.window.subsec_nanos().is_multiple_of(1000)
            || !self.threshold.subsec_nanos().is_multiple_of(1000)
        {
            return Err(format!(
                "PSI window {} or threshold {}: expected whole microseconds",
                ms(self.window),
                ms(self.threshold)
            ));
        }
        if self.threshold.is_zero() || self.threshold > self.window {
            return Err(format!(
                "PSI threshold {}: expected more than 0 and at most the window ({})",
                ms(self.threshold),
                ms(self.window)
            ));
        }
        Ok(())
    }

    /// The line written to the pressure file: `some 200000 2000000`.
    pub fn line(&self) -> String {
        format!(
            "{} {} {}",
            self.stall.as_str(),
            self.threshold.as_micros(),
            self.window.as_micros()
        )
    }

    /// Whether a process without `CAP_SYS_RESOURCE` can arm it on Linux 6.4 and later.
    pub fn unprivileged_ok(&self) -> bool {
        self.window
            .as_micros()
            .is_multiple_of(Self::UNPRIVILEGED_WINDOW_STEP.as_micros())
    }
}

/// An armed PSI trigger: the open pressure file it was written to.
#[derive(Debug)]
pub struct PsiTrigger {
    file: File,
    spec: PsiSpec,
}

impl PsiTrigger {
    /// The flag the descriptor becomes ready with: the threshold was exceeded. `POLLERR`
    /// with it means the trigger is gone (its cgroup was removed).
    pub const POLL: PollFlags = PollFlags::PRI;

    /// Arms `spec` on the pressure file `path` (`/proc/pressure/memory`, or a cgroup v2
    /// directory's `memory.pressure`).
    pub fn arm(path: &Path, spec: PsiSpec) -> Result<PsiTrigger, Unarmable> {
        spec.check()
            .map_err(|m| Unarmable::new(path, Reason::BadTrigger(m)))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| {
                Unarmable::io(path, e, |errno| match errno {
                    Errno::NOENT => Some(Reason::NoPsi),
                    // /proc/pressure/* refuses writers without CAP_SYS_RESOURCE before 6.4.
                    Errno::PERM => Some(Reason::PsiNeedsPrivilege),
                    other => cgroupfs_reason(other),
                })
            })?;
        // The kernel overwrites the last byte written with a NUL before parsing
        // (kernel/sched/psi.c, `psi_write`): the line must carry its own terminator.
        let mut line = spec.line().into_bytes();
        line.push(0);
        (&file).write_all(&line).map_err(|e| {
            Unarmable::io(path, e, |errno| match errno {
                Errno::OPNOTSUPP => Some(Reason::PsiDisabled),
                // The bounds were checked above: what is left is the unprivileged rule.
                Errno::INVAL if !spec.unprivileged_ok() => Some(Reason::PsiUnprivilegedWindow),
                Errno::INVAL => Some(Reason::BadTrigger(format!(
                    "the kernel refused the PSI trigger {:?}",
                    spec.line()
                ))),
                other => cgroupfs_reason(other),
            })
        })?;
        Ok(PsiTrigger { file, spec })
    }

    /// The descriptor to poll for [`Self::POLL`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The trigger armed.
    pub fn spec(&self) -> PsiSpec {
        self.spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(threshold_ms: u64, window_ms: u64) -> PsiSpec {
        PsiSpec {
            stall: Stall::Some,
            threshold: Duration::from_millis(threshold_ms),
            window: Duration::from_millis(window_ms),
        }
    }

    #[test]
    fn the_default_is_a_line_the_kernel_reads_with_or_without_privilege() {
        assert_eq!(PsiSpec::DEFAULT.line(), "some 200000 2000000");
        assert_eq!(PsiSpec::DEFAULT.check(), Ok(()));
        assert!(PsiSpec::DEFAULT.unprivileged_ok());
        let full = PsiSpec {
            stall: Stall::Full,
            ..spec(700, 1000)
        };
        assert_eq!(full.line(), "full 700000 1000000");
        assert!(!full.unprivileged_ok());
    }

    #[test]
    fn windows_and_thresholds_out_of_the_kernels_bounds_are_named() {
        for (s, says) in [
            (spec(50, 100), "PSI window 100 ms: expected 500 ms to 10 s"),
            (
                spec(50, 20_000),
                "PSI window 20000 ms: expected 500 ms to 10 s",
            ),
            (spec(0, 1000), "PSI threshold 0 ms: expected more than 0"),
            (
                spec(3000, 2000),
                "PSI threshold 3000 ms: expected more than 0 and at most the window (2000 ms)",
            ),
            (
                PsiSpec {
                    window: Duration::from_nanos(1_000_000_500),
                    ..spec(100, 0)
                },
                "expected whole microseconds",
            ),
        ] {
            let got = s.check();
            assert!(
                got.as_ref().is_err_and(|m| m.contains(says)),
                "{s:?}: {got:?}"
            );
        }
        for ok in [spec(1, 500), spec(10_000, 10_000), spec(150, 1000)] {
            assert_eq!(ok.check(), Ok(()), "{ok:?}");
        }
    }
}
