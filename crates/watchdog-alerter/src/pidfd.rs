//! A process handle that cannot be confused with a later process reusing its PID.
//!
//! [`PidFd`] wraps `pidfd_open(2)`: the file descriptor refers to one process for its
//! whole life, so `pidfd_send_signal(2)` on it fails with `ESRCH` once that process
//! is gone instead of hitting whatever process got the PID next. The descriptor
//! becomes readable when the process exits (`poll(2)`), which gives a race-free
//! [`PidFd::is_exited`] and [`PidFd::wait_exit`]. Needs Linux 5.3 or later.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
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

    /// The PID the descriptor was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends signal number `sig` to the process, never to a process that reused its PID.
    pub fn send_signal(&self, sig: i32) -> Result<(), PidFdError> {
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
    use std::process::Command;

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

    #[test]
    fn exit_is_seen_and_signal_after_reap_fails() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        assert!(!fd.is_exited().unwrap());
        let t = Instant::now();
        assert!(fd.wait_exit(Some(Duration::from_secs(10))).unwrap());
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(fd.is_exited().unwrap());
        child.wait().unwrap();
        let err = fd.send_signal(libc::SIGTERM).err();
        assert!(err.as_ref().is_some_and(PidFdError::is_gone), "{err:?}");
    }

    #[test]
    fn sends_a_signal() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        fd.send_signal(libc::SIGTERM).unwrap();
        assert!(fd.wait_exit(Some(Duration::from_secs(10))).unwrap());
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
