//! A short scheduler slice for the loop's thread, so that a wake-up reaches it at once on a
//! busy machine.
//!
//! A kernel notice is raised in the context of the process that crossed the line, and the
//! woken loop is queued on that process's CPU. With every CPU busy, EEVDF (Linux 6.6 and
//! later) lets the running task finish its slice before the woken one runs: up to a
//! scheduler tick (4 ms at `HZ=250`), traced in docs/performance.md. A thread with a
//! shorter slice than the running task's preempts it at once when it wakes eligible
//! (`PREEMPT_SHORT`, Linux 6.12 and later, where `sched_runtime` sets a `SCHED_OTHER`
//! thread's slice without privilege). Only the calling thread's slice changes; its nice
//! value and policy are kept, and `SCHED_FLAG_RESET_ON_FORK` gives the threads and
//! processes it starts (the target of `watchdog run`, hooks) the defaults again.

use std::io;
use std::time::Duration;

/// The slice asked for: the shortest the kernel takes.
pub const SHORT_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` up to `sched_util_max` (`SCHED_ATTR_SIZE_VER1`).
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

const SCHED_OTHER: u32 = 0;
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// What asking for the short slice did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceAsked {
    /// The calling thread's slice is [`SHORT_SLICE`] (a kernel before 6.12 takes the
    /// request and ignores the slice).
    Set,
    /// The thread runs under another policy than `SCHED_OTHER` (its number): left as it is.
    OtherPolicy(u32),
}

/// Asks the kernel for a [`SHORT_SLICE`] on the calling thread, keeping its nice value.
pub fn ask_for_a_short_slice() -> io::Result<SliceAsked> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes into `attr`, a `#[repr(C)]` struct
    // of that size; pid 0 is the calling thread.
    let got = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr, size, 0) };
    if got != 0 {
        return Err(io::Error::last_os_error());
    }
    if attr.sched_policy != SCHED_OTHER {
        return Ok(SliceAsked::OtherPolicy(attr.sched_policy));
    }
    let want = SchedAttr {
        size,
        sched_policy: SCHED_OTHER,
        sched_flags: SCHED_FLAG_RESET_ON_FORK,
        sched_nice: attr.sched_nice,
        sched_runtime: SHORT_SLICE.as_nanos() as u64,
        ..SchedAttr::default()
    };
    // SAFETY: sched_setattr reads `want.size` bytes of a `#[repr(C)]` struct of that size.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &want, 0) };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SliceAsked::Set)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The `se.slice` of a thread as `/proc/self/task/TID/sched` shows it, in ns.
    fn slice_of(tid: i32) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
        let line = text.lines().find(|l| l.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    fn gettid() -> i32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    /// On a thread of its own: the slice is the short one, the nice value is kept, and a
    /// thread started afterwards has the default slice again (reset on fork).
    #[test]
    fn the_calling_thread_gets_the_short_slice_and_its_children_the_default() {
        std::thread::spawn(|| {
            // SAFETY: setpriority on the calling thread (who 0) has no memory preconditions.
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 3) }, 0);
            let before = slice_of(gettid());
            assert_eq!(ask_for_a_short_slice().unwrap(), SliceAsked::Set);
            // SAFETY: as above.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            assert_eq!(nice, 3, "the nice value is kept");
            // /proc shows the slice only on kernels that keep one per task (EEVDF).
            if let Some(before) = before {
                assert_eq!(slice_of(gettid()), Some(SHORT_SLICE.as_nanos() as u64));
                let child = std::thread::spawn(|| slice_of(gettid())).join().unwrap();
                assert_eq!(
                    child,
                    Some(before),
                    "a thread started after has the default"
                );
            }
        })
        .join()
        .unwrap();
    }
}
