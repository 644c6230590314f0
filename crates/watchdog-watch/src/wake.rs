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
use std::os::fd::{AsRawFd as _, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use rustix::event::PollFlags;

/// Asks for the short scheduler slice on the calling thread, the loop's, so that a kernel
/// notice or a signal reaches it at once on a busy machine
/// ([`watchdog_kernel_wake::ask_for_a_short_slice`]); says at debug level what came of it.
fn ask_for_prompt_wake_ups() {
    match watchdog_kernel_wake::ask_for_a_short_slice() {
        Ok(watchdog_kernel_wake::SliceAsked::Set) => tracing::debug!(
            "the loop's thread asked for a {:?} scheduler slice",
            watchdog_kernel_wake::SHORT_SLICE
        ),
        Ok(watchdog_kernel_wake::SliceAsked::OtherPolicy(policy)) => tracing::debug!(
            "the loop's thread runs under scheduling policy {policy}: its slice is left as it is"
        ),
        Err(e) => tracing::debug!("the loop's thread keeps the default scheduler slice: {e}"),
    }
}

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
    /// One of a [`WaitSet`]'s descriptors is ready (see [`WaitSet::is_ready`]).
    Ready,
}

/// Descriptors a loop waits on besides its wake-up socket: a run's pidfd, the kernel's
/// wake-ups of every run. Kept between waits and refilled before each, so a warm loop does
/// not allocate. Raw descriptors: the caller keeps them open while it waits (a closed one
/// is only reported `POLLNVAL` by the kernel, and counts as ready).
#[derive(Debug)]
pub struct WaitSet {
    /// Slot 0 is the wake-up socket, filled by [`Wake::wait_set`].
    fds: Vec<libc::pollfd>,
}

impl Default for WaitSet {
    fn default() -> WaitSet {
        WaitSet {
            fds: vec![pollfd(-1, PollFlags::IN)],
        }
    }
}

impl WaitSet {
    /// Empties the set (its memory kept).
    pub fn clear(&mut self) {
        self.fds.truncate(1);
    }

    /// Adds `fd`, to be woken with `flags`; its index is the number added before it.
    pub fn push(&mut self, fd: BorrowedFd<'_>, flags: PollFlags) {
        self.fds.push(pollfd(fd.as_raw_fd(), flags));
    }

    /// How many descriptors were added.
    pub fn len(&self) -> usize {
        self.fds.len() - 1
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether descriptor `i` was ready when the last wait ended.
    pub fn is_ready(&self, i: usize) -> bool {
        self.fds.get(i + 1).is_some_and(|f| f.revents != 0)
    }
}

/// A `pollfd` for `fd` asking for `flags`.
fn pollfd(fd: RawFd, flags: PollFlags) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: flags.bits() as libc::c_short,
        revents: 0,
    }
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

    /// The wake of the loop that runs on the calling thread, which asks for prompt
    /// wake-ups first.
    pub fn for_this_loop() -> io::Result<Wake> {
        ask_for_prompt_wake_ups();
        Wake::new()
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
        let mut fds = [
            pollfd(self.read.as_raw_fd(), PollFlags::IN),
            pollfd(other.map_or(-1, |o| o.as_raw_fd()), PollFlags::IN),
        ];
        let n = if other.is_some() { 2 } else { 1 };
        Ok(match self.poll_until(&mut fds[..n], timeout)? {
            Woken::Ready => Woken::Other,
            woken => woken,
        })
    }

    /// Sleeps for `timeout` or until woken, or until one of `set`'s descriptors is ready
    /// ([`Woken::Ready`]: see [`WaitSet::is_ready`]); drains the wake-ups. A descriptor
    /// ready wins over a wake-up: the caller looks at the stop flags anyway.
    pub fn wait_set(&self, set: &mut WaitSet, timeout: Duration) -> io::Result<Woken> {
        set.fds[0] = pollfd(self.read.as_raw_fd(), PollFlags::IN);
        self.poll_until(&mut set.fds, timeout)
    }

    /// Polls `fds` (the wake-up socket first) until one is ready or `timeout` passed.
    fn poll_until(&self, fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<Woken> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Rounded up, so the wait does not end a little early and spin.
            let ms = left.as_nanos().div_ceil(1_000_000);
            let ms = libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX);
            for f in fds.iter_mut() {
                f.revents = 0;
            }
            // SAFETY: `fds` is a valid slice of pollfd for its whole length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let woken = fds.first().is_some_and(|f| f.revents != 0);
            if woken {
                self.drain();
            }
            if fds.iter().skip(1).any(|f| f.revents != 0) {
                return Ok(Woken::Ready);
            }
            if woken {
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
    fn a_ready_descriptor_of_the_set_ends_the_wait_and_is_named() {
        use std::os::fd::AsFd as _;
        let wake = Wake::new().expect("pair");
        let (quiet, _quiet_peer) = UnixStream::pair().expect("pair");
        let (ready, ready_peer) = UnixStream::pair().expect("pair");
        let mut set = WaitSet::default();
        set.push(quiet.as_fd(), PollFlags::IN);
        set.push(ready.as_fd(), PollFlags::IN);
        assert_eq!(
            wake.wait_set(&mut set, Duration::from_millis(30)).ok(),
            Some(Woken::Timeout)
        );
        (&ready_peer).write_all(&[1]).expect("write");
        assert_eq!(
            wake.wait_set(&mut set, Duration::from_secs(60)).ok(),
            Some(Woken::Ready)
        );
        assert!(!set.is_ready(0));
        assert!(set.is_ready(1));
        // Refilled without allocating: the capacity stays.
        let capacity = set.fds.capacity();
        set.clear();
        assert!(set.is_empty());
        set.push(quiet.as_fd(), PollFlags::IN);
        set.push(ready.as_fd(), PollFlags::IN);
        assert_eq!(set.fds.capacity(), capacity);
    }

    #[test]
    fn the_other_descriptor_ends_the_wait() {
        let wake = Wake::new().expect("pair");
        use std::os::fd::AsFd as _;
        let (a, b) = UnixStream::pair().expect("pair");
        drop(b);
        assert_eq!(
            wake.wait(Some(a.as_fd()), Duration::from_secs(60)).ok(),
            Some(Woken::Other)
        );
    }
}
