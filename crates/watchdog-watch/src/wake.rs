//! Waking a sleeping loop at once: the watch loop and the service's loop sleep until their
//! next tick (as long as `--interval`, a minute if asked), and a stop or reload signal, or
//! a registration on the status socket, must not wait for it.
//!
//! A [`Wake`] is a socket pair: the loop polls the reading end (with the target's pidfd
//! when it has one) instead of sleeping, and a signal handler (signal-hook's
//! `low_level::pipe`, async-signal-safe) or any thread ([`Waker::wake`]) writes a byte to
//! the other end. Signals registered here are registered after the flags the loop reads,
//! and signal-hook runs a signal's actions in registration order, so the flag is set when
//! the loop wakes.

use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// The reading end the loop waits on.
#[derive(Debug)]
pub struct Wake {
    read: UnixStream,
    write: Arc<UnixStream>,
}

/// A handle any thread may use to wake the loop.
#[derive(Debug, Clone)]
pub struct Waker(Arc<UnixStream>);

/// What ended a [`Wake::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The timeout passed.
    Timeout,
    /// A signal or a [`Waker`].
    Woken,
    /// The other descriptor became readable (a pidfd: the process exited).
    Other,
}

impl Wake {
    /// A new, non-blocking pair.
    pub fn new() -> io::Result<Wake> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok(Wake {
            read,
            write: Arc::new(write),
        })
    }

    /// A handle that wakes this loop from another thread.
    pub fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.write))
    }

    /// Wakes the loop on each of `signals` (register the loop's own flags first).
    pub fn on_signals(&self, signals: &[i32]) -> io::Result<()> {
        for &sig in signals {
            signal_hook::low_level::pipe::register(sig, self.write.try_clone()?)?;
        }
        Ok(())
    }

    /// Sleeps for `timeout` or until woken, or until `other` is readable; drains the
    /// wake-ups so the next wait sleeps again.
    pub fn wait(&self, other: Option<BorrowedFd<'_>>, timeout: Duration) -> io::Result<Woken> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ts = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [
                PollFd::new(&self.read, PollFlags::IN),
                PollFd::from_borrowed_fd(other.unwrap_or(self.read.as_fd()), PollFlags::IN),
            ];
            let n = if other.is_some() { 2 } else { 1 };
            match poll(&mut fds[..n], Some(&ts)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let ready = |f: &PollFd<'_>| {
                f.revents()
                    .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
            };
            if n == 2 && ready(&fds[1]) {
                self.drain();
                return Ok(Woken::Other);
            }
            if ready(&fds[0]) {
                self.drain();
                return Ok(Woken::Woken);
            }
            if Instant::now() >= deadline {
                return Ok(Woken::Timeout);
            }
        }
    }

    /// Reads every byte written so far.
    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.read).read(&mut buf), Ok(n) if n > 0) {}
    }
}

impl Waker {
    /// Wakes the loop (a full buffer already means it will wake).
    pub fn wake(&self) {
        let _ = (&*self.0).write(&[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waker_ends_the_wait_at_once_and_the_next_wait_sleeps_again() {
        let wake = Wake::new().expect("pair");
        let waker = wake.waker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            waker.wake();
            waker.wake();
        });
        let start = Instant::now();
        assert_eq!(
            wake.wait(None, Duration::from_secs(60)).ok(),
            Some(Woken::Woken)
        );
        assert!(start.elapsed() < Duration::from_secs(30));
        t.join().expect("thread");
        std::thread::sleep(Duration::from_millis(20));
        let _ = wake.wait(None, Duration::ZERO);
        assert_eq!(
            wake.wait(None, Duration::from_millis(30)).ok(),
            Some(Woken::Timeout)
        );
    }

    #[test]
    fn a_signal_ends_the_wait() {
        let wake = Wake::new().expect("pair");
        wake.on_signals(&[libc::SIGUSR1]).expect("register");
        let start = Instant::now();
        // SAFETY: raise only queues a signal for this process; the handler above takes it.
        unsafe { libc::raise(libc::SIGUSR1) };
        assert_eq!(
            wake.wait(None, Duration::from_secs(60)).ok(),
            Some(Woken::Woken)
        );
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn the_other_descriptor_ends_the_wait() {
        let wake = Wake::new().expect("pair");
        let (a, b) = UnixStream::pair().expect("pair");
        drop(b);
        assert_eq!(
            wake.wait(Some(a.as_fd()), Duration::from_secs(60)).ok(),
            Some(Woken::Other)
        );
    }
}
