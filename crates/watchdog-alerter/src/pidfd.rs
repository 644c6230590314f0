//! A process handle that cannot be confused with a later process reusing its PID.
//!
//! [`PidFd`] wraps `pidfd_open(2)`: the file descriptor refers to one process for its
//! whole life, so `pidfd_send_signal(2)` on it fails with `ESRCH` once that process
//! is gone instead of hitting whatever process got the PID next. The descriptor
//! becomes readable when the process exits (`poll(2)`), which gives a race-free
//! [`PidFd::is_exited`] and [`PidFd::wait_exit`]. Needs Linux 5.3 or later.
//!
//! Once the process's parent has reaped it, Linux 6.15 and later keep its wait status for
//! whoever holds a pidfd (`PIDFD_GET_INFO` with `PIDFD_INFO_EXIT`): [`PidFd::exit_status`]
//! reads it, so a watchdog that is not the parent (`--pid`, the service) can still tell an
//! exit code from a kill.
//!
//! A watch of a recorded tree (`WATCHDOG_ROOT`, the test seam) holds a stand-in for its
//! target ([`PidFd::stand_in`]: readable once the recorded process's directory is gone)
//! and calls [`refuse_signals`] first: the recorded PIDs name no process of this machine,
//! so from then on every [`PidFd::send_signal`] fails with [`PidFdError::Refused`], which
//! says what was not sent.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::ioctl::{Opcode, Updater, opcode};
use rustix::process::{Pid, PidfdFlags, Signal};

/// What can go wrong with a pidfd.
#[derive(Debug, thiserror::Error)]
pub enum PidFdError {
    /// The PID is not a valid process id (0 or larger than `i32::MAX`).
    #[error("invalid pid {0}: expected a positive process id")]
    InvalidPid(u32),
    /// `pidfd_open` failed (`ESRCH`: no such process; `EINVAL`: a thread id, not a process).
    #[error("cannot open a pidfd for pid {pid}: {source}")]
    Open {
        /// The PID.
        pid: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The signal number is not one this process can send.
    #[error("unsupported signal {0}: expected a standard signal (1-31) or a real-time signal")]
    UnsupportedSignal(i32),
    /// `pidfd_send_signal` failed (`ESRCH`: the process has exited; `EPERM`: not allowed).
    #[error("cannot send {signal} to pid {pid}: {source}")]
    Signal {
        /// The PID.
        pid: u32,
        /// The signal's name.
        signal: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Not sent: the watchdog reads a recorded tree ([`refuse_signals`]).
    #[error(
        "not sent {signal} to pid {pid}: the watchdog reads a recorded tree (WATCHDOG_ROOT), whose PIDs name no process of this machine"
    )]
    Refused {
        /// The PID.
        pid: u32,
        /// The signal's name.
        signal: String,
    },
    /// `poll` on the pidfd failed.
    #[error("cannot poll the pidfd of pid {pid}: {source}")]
    Poll {
        /// The PID.
        pid: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl PidFdError {
    /// Whether the error says the process no longer exists (`ESRCH`).
    pub fn is_gone(&self) -> bool {
        match self {
            PidFdError::Open { source, .. } | PidFdError::Signal { source, .. } => {
                source.raw_os_error() == Some(libc::ESRCH)
            }
            _ => false,
        }
    }
}

/// `struct pidfd_info` of `<linux/pidfd.h>`: its first 64 bytes (`PIDFD_INFO_SIZE_VER0`,
/// Linux 6.13), where 6.15 made `exit_code` of a spare field.
#[repr(C)]
#[derive(Debug, Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

/// `PIDFD_INFO_EXIT`: asks for, and says the kernel gave, the wait status (Linux 6.15).
const PIDFD_INFO_EXIT: u64 = 1 << 3;

/// `PIDFD_GET_INFO`: `_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: Opcode = opcode::read_write::<PidfdInfo>(0xFF, 11);

/// Set by [`refuse_signals`]: no signal leaves this process any more.
static SIGNALS_REFUSED: AtomicBool = AtomicBool::new(false);

/// Refuses every signal sent through a [`PidFd`] from now on, for the rest of this
/// process: called when the watchdog reads a recorded tree (`WATCHDOG_ROOT`), so that no
/// decision made from recorded files reaches a real process that happens to hold a
/// recorded PID. Cannot be undone.
pub fn refuse_signals() {
    SIGNALS_REFUSED.store(true, Ordering::SeqCst);
}

/// Whether [`refuse_signals`] was called.
pub fn signals_refused() -> bool {
    SIGNALS_REFUSED.load(Ordering::SeqCst)
}

/// An open pidfd for one process.
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: u32,
}

/// Converts a signal number to rustix's `Signal`, refusing numbers the C library reserves.
pub fn to_signal(sig: i32) -> Result<Signal, PidFdError> {
    if let Some(s) = Signal::from_named_raw(sig) {
        return Ok(s);
    }
    if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig) {
        // SAFETY: `sig` is non-zero and inside the C library's SIGRTMIN..=SIGRTMAX range, so it is
        // a valid signal number that the library hands out to applications (it does not fall in
        // the reserved 32..SIGRTMIN range glibc uses internally). We only send it to another process.
        return Ok(unsafe { Signal::from_raw_unchecked(sig) });
    }
    Err(PidFdError::UnsupportedSignal(sig))
}

impl PidFd {
    /// Opens a pidfd for `pid` (a process, not a thread id).
    pub fn open(pid: u32) -> Result<Self, PidFdError> {
        let raw = i32::try_from(pid).map_err(|_| PidFdError::InvalidPid(pid))?;
        let p = Pid::from_raw(raw).ok_or(PidFdError::InvalidPid(pid))?;
        let fd =
            rustix::process::pidfd_open(p, PidfdFlags::empty()).map_err(|e| PidFdError::Open {
                pid,
                source: e.into(),
            })?;
        Ok(PidFd { fd, pid })
    }

    /// A stand-in for process `pid` of a recorded tree: `fd` becomes readable once the
    /// process is gone (`watchdog_procfs::ProcRoot::exit_fd`), as a pidfd does. It has no
    /// wait status ([`exit_status`](Self::exit_status) fails) and cannot be signalled.
    pub fn stand_in(fd: OwnedFd, pid: u32) -> Self {
        PidFd { fd, pid }
    }

    /// The PID the descriptor was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends signal number `sig` to the process, never to a process that reused its PID.
    pub fn send_signal(&self, sig: i32) -> Result<(), PidFdError> {
        if signals_refused() {
            return Err(PidFdError::Refused {
                pid: self.pid,
                signal: watchdog_types::units::signal_name(sig),
            });
        }
        let s = to_signal(sig)?;
        rustix::process::pidfd_send_signal(&self.fd, s).map_err(|e| PidFdError::Signal {
            pid: self.pid,
            signal: watchdog_types::units::signal_name(sig),
            source: e.into(),
        })
    }

    /// Whether the process has exited (it may still be an unreaped zombie). Never blocks.
    pub fn is_exited(&self) -> Result<bool, PidFdError> {
        self.poll_readable(Some(Duration::ZERO))
    }

    /// Waits until the process exits or `timeout` passes (`None`: forever).
    /// Returns `true` when it exited. Retries on `EINTR`.
    pub fn wait_exit(&self, timeout: Option<Duration>) -> Result<bool, PidFdError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.poll_readable(left) {
                Err(PidFdError::Poll { source, .. })
                    if source.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return self.is_exited();
            }
        }
    }

    /// The process's wait status (as `waitpid(2)` gives it) once its parent has reaped it;
    /// `Ok(None)` while it runs or waits, a zombie, to be reaped. An error on kernels older
    /// than 6.15, which keep no status for a pidfd.
    pub fn exit_status(&self) -> io::Result<Option<i32>> {
        let mut info = PidfdInfo {
            mask: PIDFD_INFO_EXIT,
            ..PidfdInfo::default()
        };
        // SAFETY: PIDFD_GET_INFO reads and writes a `struct pidfd_info` in place; `PidfdInfo`
        // is its first version, field for field, and the opcode encodes its size, so the
        // kernel copies no more than that.
        unsafe {
            rustix::ioctl::ioctl(
                &self.fd,
                Updater::<PIDFD_GET_INFO, PidfdInfo>::new(&mut info),
            )
        }?;
        Ok((info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code))
    }

    /// [`exit_status`](Self::exit_status) of an exited process, waiting up to `timeout` for
    /// its parent to reap it; `None` when it was not reaped by then or the kernel keeps no
    /// status.
    pub fn wait_exit_status(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.exit_status() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                _ => return None,
            }
        }
    }

    fn poll_readable(&self, timeout: Option<Duration>) -> Result<bool, PidFdError> {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = timeout.map(|t| Timespec {
            tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        let n = rustix::event::poll(&mut fds, ts.as_ref()).map_err(|e| PidFdError::Poll {
            pid: self.pid,
            source: e.into(),
        })?;
        Ok(n > 0 && fds[0].revents().intersects(PollFlags::IN | PollFlags::HUP))
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn open_invalid_and_missing() {
        assert!(matches!(PidFd::open(0), Err(PidFdError::InvalidPid(0))));
        assert!(matches!(
            PidFd::open(u32::MAX),
            Err(PidFdError::InvalidPid(_))
        ));
        // pid_max is at most 4194304 (2^22), so this pid cannot exist.
        let err = PidFd::open(4_194_305).err();
        assert!(err.as_ref().is_some_and(PidFdError::is_gone), "{err:?}");
    }

    #[test]
    fn own_process_is_alive() {
        let fd = PidFd::open(std::process::id()).unwrap();
        assert!(!fd.is_exited().unwrap());
        assert!(!fd.wait_exit(Some(Duration::from_millis(20))).unwrap());
        // Signal 0 is not a signal rustix can name; refusing it is fine.
        assert!(matches!(
            fd.send_signal(0),
            Err(PidFdError::UnsupportedSignal(0))
        ));
    }

    /// `cat` on a pipe cannot exit before the test closes its stdin, however late the
    /// test runs; then `wait_exit` sees the exit as it happens, not at its timeout.
    #[test]
    fn exit_is_seen_and_signal_after_reap_fails() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        assert!(!fd.is_exited().unwrap());
        assert!(!fd.wait_exit(Some(Duration::from_millis(20))).unwrap());
        assert!(!fd.is_exited().unwrap());
        drop(child.stdin.take()); // EOF: `cat` exits
        let t = Instant::now();
        assert!(fd.wait_exit(Some(Duration::from_secs(120))).unwrap());
        // Far below the timeout: `wait_exit` returned at the exit, it did not sit out its
        // timeout (a hang check, not a speed).
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
        assert!(fd.is_exited().unwrap());
        child.wait().unwrap();
        let err = fd.send_signal(libc::SIGTERM).err();
        assert!(err.as_ref().is_some_and(PidFdError::is_gone), "{err:?}");
    }

    /// Linux 6.15 and later keep the wait status for the pidfd once the parent reaps:
    /// nothing while the process runs or is a zombie, its exit code or signal after. Older
    /// kernels keep none (unless it was backported), and `wait_exit_status` gives up.
    #[test]
    fn the_wait_status_is_kept_for_the_pidfd_once_the_parent_reaped() {
        let kept = watchdog_testsupport::kernel_at_least(6, 15);
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        assert!(fd.wait_exit(Some(Duration::from_secs(10))).unwrap());
        if kept {
            assert_eq!(fd.exit_status().unwrap(), None, "a zombie, not yet reaped");
        }
        child.wait().unwrap();
        let status = fd.exit_status();
        if kept {
            assert_eq!(status.unwrap(), Some(3 << 8));
        } else {
            assert!(
                matches!(status, Err(_) | Ok(None | Some(0x300))),
                "{status:?}"
            );
        }

        let mut killed = Command::new("sleep").arg("30").spawn().unwrap();
        let fd = PidFd::open(killed.id()).unwrap();
        assert_eq!(fd.exit_status().unwrap_or(None), None, "a running process");
        killed.kill().unwrap();
        killed.wait().unwrap();
        let status = fd.wait_exit_status(Duration::from_secs(1));
        if kept {
            assert_eq!(status, Some(libc::SIGKILL));
        } else {
            assert!(matches!(status, None | Some(libc::SIGKILL)), "{status:?}");
        }
    }

    #[test]
    fn sends_a_signal() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        fd.send_signal(libc::SIGTERM).unwrap();
        assert!(fd.wait_exit(Some(Duration::from_secs(30))).unwrap());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn realtime_signals_convert() {
        assert!(to_signal(libc::SIGRTMIN()).is_ok());
        assert!(to_signal(libc::SIGUSR1).is_ok());
        assert!(matches!(
            to_signal(32),
            Err(PidFdError::UnsupportedSignal(32))
        ));
    }
}
