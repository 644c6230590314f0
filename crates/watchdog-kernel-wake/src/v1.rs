//! Cgroup v1 memory thresholds: an eventfd the kernel signals when `memory.usage_in_bytes`
//! crosses a value (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds").
//!
//! Arming writes `"<eventfd> <fd of memory.usage_in_bytes> <threshold>"` to the cgroup's
//! `cgroup.event_control`. The kernel signals a crossing in either direction, checked every
//! 128 page charges or uncharges per CPU (`THRESHOLDS_EVENTS_TARGET` in mm/memcontrol.c,
//! mm/memcontrol-v1.c since 6.11), so a crossing is seen within about 512 KiB per CPU of
//! it. A threshold cannot be removed but by closing its eventfd: re-arming registers the new
//! thresholds on a new eventfd, then closes the old one (the kernel removes it later, from a
//! work queue: closing does not wait). Registering waits for an RCU grace period
//! (`synchronize_rcu` in `__mem_cgroup_usage_register_event`; 8-20 ms seen here on a busy
//! machine): [`CgroupV1Threshold::move_to`] does it on a worker thread while the old
//! threshold stays armed, so a loop never waits for it. `memory.usage_in_bytes` counts page
//! cache (which the sampler's `cgroup_memory` does not): while cache keeps usage near the
//! limit a threshold there fires again and again, and the caller should poll instead.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use rustix::event::{EventfdFlags, PollFlags, eventfd};
use rustix::io::Errno;

use crate::{Reason, Unarmable, cgroupfs_reason, pread_text};

/// Thresholds on a cgroup v1 memory cgroup's `memory.usage_in_bytes`, signalled through one
/// eventfd.
#[derive(Debug)]
pub struct CgroupV1Threshold {
    files: Arc<Files>,
    eventfd: OwnedFd,
    /// A registration going on on the worker thread ([`move_to`](Self::move_to)).
    pending: Option<Arc<Registration>>,
    /// The worker thread, from the first move on: shared by every threshold of the
    /// process, stopped when the last one is dropped.
    worker: Option<Arc<Worker>>,
    text: Vec<u8>,
}

/// The cgroup's files a registration needs.
#[derive(Debug)]
struct Files {
    /// `cgroup.event_control`, kept open for re-arming.
    control: File,
    control_path: PathBuf,
    /// `memory.usage_in_bytes`, kept open: the kernel wants its descriptor, and
    /// [`CgroupV1Threshold::usage_bytes`] re-reads it.
    usage: File,
    /// The writes to `cgroup.event_control` begun and finished, from any thread.
    writes: Writes,
}

/// A count of `cgroup.event_control` writes, begun and finished (see
/// [`CgroupV1Threshold::control_writes`]).
#[derive(Debug, Default)]
struct Writes {
    begun: AtomicU64,
    done: AtomicU64,
}

/// One threshold being registered on the worker thread, on its own eventfd.
#[derive(Debug)]
struct Registration {
    files: Arc<Files>,
    eventfd: OwnedFd,
    level: u64,
    /// [`PENDING`], [`ARMED`] or [`FAILED`].
    state: AtomicU8,
    failure: Mutex<Option<Unarmable>>,
}

const PENDING: u8 = 0;
const ARMED: u8 = 1;
const FAILED: u8 = 2;

/// What became of a [`CgroupV1Threshold::move_to`], from [`CgroupV1Threshold::settle`].
#[derive(Debug)]
pub enum Settled {
    /// None going on, or not finished yet.
    Nothing,
    /// The new level is armed (the old one removed).
    Armed(u64),
    /// The kernel refused it; the old level stays armed.
    Failed(Unarmable),
}

impl CgroupV1Threshold {
    /// The flag the eventfd becomes ready with: a threshold was crossed.
    pub const POLL: PollFlags = PollFlags::IN;

    /// Arms `thresholds` (bytes of `memory.usage_in_bytes`) on the v1 memory cgroup
    /// directory `dir`. An empty list arms nothing but still opens `cgroup.event_control`
    /// for writing, so a read-only cgroupfs or a permission is found (not whether the kernel
    /// takes thresholds: that shows at the first one).
    pub fn arm(dir: &Path, thresholds: &[u64]) -> Result<CgroupV1Threshold, Unarmable> {
        let control_path = dir.join("cgroup.event_control");
        let usage_path = dir.join("memory.usage_in_bytes");
        if !control_path.exists() || !usage_path.exists() {
            let v2 = dir.join("memory.events").exists();
            let reason = if v2 {
                Reason::V2NoThreshold
            } else {
                Reason::NotV1Memory
            };
            return Err(Unarmable::new(dir, reason));
        }
        let usage = OpenOptions::new()
            .read(true)
            .open(&usage_path)
            .map_err(|e| Unarmable::io(&usage_path, e, cgroupfs_reason))?;
        let control = OpenOptions::new()
            .write(true)
            .open(&control_path)
            .map_err(|e| Unarmable::io(&control_path, e, cgroupfs_reason))?;
        let files = Arc::new(Files {
            control,
            control_path,
            usage,
            writes: Writes::default(),
        });
        let eventfd = fresh_eventfd(&files.control_path)?;
        register(&files, &eventfd, thresholds)?;
        Ok(CgroupV1Threshold {
            files,
            eventfd,
            pending: None,
            worker: None,
            text: Vec::with_capacity(32),
        })
    }

    /// Replaces the armed thresholds by `thresholds` (typically one above and one below the
    /// current usage). The new ones are registered before the old eventfd is closed, so no
    /// crossing goes unseen; on failure the old ones stay armed.
    /// A registration in flight is dropped (its eventfd closed once the worker is done).
    pub fn rearm(&mut self, thresholds: &[u64]) -> Result<(), Unarmable> {
        let fresh = fresh_eventfd(&self.files.control_path)?;
        register(&self.files, &fresh, thresholds)?;
        self.pending = None;
        // Closing the old eventfd is what removes its thresholds in the kernel.
        drop(std::mem::replace(&mut self.eventfd, fresh));
        Ok(())
    }

    /// Moves the threshold to `level` without waiting: the level is registered on a fresh
    /// eventfd by a worker thread while the old one stays armed; both are polled
    /// ([`each_fd`](Self::each_fd)) until [`settle`](Self::settle) swaps them. Usage already
    /// at or past `level` once it is registered signals the new eventfd at once (no
    /// crossing would). A move still going on is replaced.
    pub fn move_to(&mut self, level: u64) -> Result<(), Unarmable> {
        let registration = Arc::new(Registration {
            files: Arc::clone(&self.files),
            eventfd: fresh_eventfd(&self.files.control_path)?,
            level,
            state: AtomicU8::new(PENDING),
            failure: Mutex::new(None),
        });
        self.pending = Some(Arc::clone(&registration));
        self.worker.get_or_insert_with(worker).send(registration);
        Ok(())
    }

    /// Whether a [`move_to`](Self::move_to) is going on.
    pub fn moving(&self) -> bool {
        self.pending.is_some()
    }

    /// Takes the outcome of a finished [`move_to`](Self::move_to): the new eventfd replaces
    /// the old (whose threshold the kernel then removes), or the old one stays.
    pub fn settle(&mut self) -> Settled {
        let state = self
            .pending
            .as_ref()
            .map_or(PENDING, |p| p.state.load(Ordering::Acquire));
        let Some(done) = self.pending.take_if(|_| state != PENDING) else {
            return Settled::Nothing;
        };
        if state != ARMED {
            let failure = done.failure.lock().ok().and_then(|mut f| f.take());
            return Settled::Failed(
                failure.unwrap_or_else(|| Unarmable::new(&self.files.control_path, Reason::Other)),
            );
        }
        // The worker may still hold its registration (and its descriptor) for a moment.
        match dup_eventfd(&done.eventfd) {
            Ok(fd) => {
                // A crossing signalled on the old eventfd since is not lost: the caller
                // consumed it, or polls the new one, at or past the level.
                drop(std::mem::replace(&mut self.eventfd, fd));
                Settled::Armed(done.level)
            }
            Err(e) => Settled::Failed(Unarmable::io(&self.files.control_path, e.into(), |_| None)),
        }
    }

    /// The eventfd to poll for [`Self::POLL`] (without the one of a move going on: see
    /// [`each_fd`](Self::each_fd)).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }

    /// Calls `f` with each eventfd to poll: the armed one and that of a move going on.
    pub fn each_fd(&self, mut f: impl FnMut(BorrowedFd<'_>)) {
        f(self.eventfd.as_fd());
        if let Some(p) = &self.pending {
            f(p.eventfd.as_fd());
        }
    }

    /// How many crossings were signalled since the last call (0 when none), on the armed
    /// eventfd and that of a move going on: reading an eventfd resets it, so it stops
    /// being ready.
    pub fn consume(&self) -> std::io::Result<u64> {
        let pending = match &self.pending {
            Some(p) => read_count(&p.eventfd)?,
            None => 0,
        };
        Ok(read_count(&self.eventfd)? + pending)
    }

    /// The writes to the cgroup's `cgroup.event_control` made for this threshold so far,
    /// from this thread or the worker's: `(begun, finished)`. A write in flight (begun, not
    /// finished) is one waiting for the kernel's RCU grace period.
    pub fn control_writes(&self) -> (u64, u64) {
        let w = &self.files.writes;
        (
            w.begun.load(Ordering::Acquire),
            w.done.load(Ordering::Acquire),
        )
    }

    /// The cgroup's `memory.usage_in_bytes` now, in bytes (page cache included), to place
    /// the next thresholds around.
    pub fn usage_bytes(&mut self) -> std::io::Result<u64> {
        read_usage(&self.files.usage, &mut self.text)
    }
}

/// `memory.usage_in_bytes` read through `usage`, in bytes.
fn read_usage(usage: &File, text: &mut Vec<u8>) -> std::io::Result<u64> {
    pread_text(usage, text)?;
    let words = String::from_utf8_lossy(text);
    words.trim().parse().map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "memory.usage_in_bytes {:?}: expected a number",
                words.trim()
            ),
        )
    })
}

/// An eventfd's count since its last read (0: none).
fn read_count(fd: &OwnedFd) -> std::io::Result<u64> {
    let mut count = [0u8; 8];
    match rustix::io::read(fd, &mut count) {
        Ok(8) => Ok(u64::from_ne_bytes(count)),
        Ok(n) => Err(std::io::Error::other(format!(
            "eventfd read {n} bytes, expected 8"
        ))),
        Err(Errno::AGAIN) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// A second descriptor of `fd` (the worker's registration keeps its own until it is done).
fn dup_eventfd(fd: &OwnedFd) -> rustix::io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// The worker thread registering moved thresholds, started at the first move; one per
/// process, serving every cgroup in turn; stopped and joined when the last threshold that
/// moved is dropped (its channel closed, the registration in flight finished first).
#[derive(Debug)]
struct Worker {
    tx: Mutex<Option<Sender<Arc<Registration>>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Worker {
    /// Queues `registration`; marked failed at once if the worker is gone.
    fn send(&self, registration: Arc<Registration>) {
        let sent = self.tx.lock().ok().and_then(|tx| {
            tx.as_ref()
                .and_then(|tx| tx.send(Arc::clone(&registration)).ok())
        });
        if sent.is_none() {
            registration.state.store(FAILED, Ordering::Release);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// The worker, started unless a threshold holds it already.
fn worker() -> Arc<Worker> {
    static WORKER: Mutex<std::sync::Weak<Worker>> = Mutex::new(std::sync::Weak::new());
    let mut shared = match WORKER.lock() {
        Ok(w) => w,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(w) = shared.upgrade() {
        return w;
    }
    let (tx, rx) = channel::<Arc<Registration>>();
    let spawned = std::thread::Builder::new()
        .name("v1-thresholds".into())
        .spawn(move || {
            let mut text = Vec::with_capacity(32);
            for r in rx {
                // Dropped by its owner meanwhile (moved again, or closed): skipped.
                if Arc::strong_count(&r) == 1 {
                    continue;
                }
                match register(&r.files, &r.eventfd, &[r.level]) {
                    Ok(()) => {
                        if read_usage(&r.files.usage, &mut text).is_ok_and(|u| u >= r.level) {
                            let _ = rustix::io::write(&r.eventfd, &1u64.to_ne_bytes());
                        }
                        r.state.store(ARMED, Ordering::Release);
                    }
                    Err(e) => {
                        if let Ok(mut f) = r.failure.lock() {
                            *f = Some(e);
                        }
                        r.state.store(FAILED, Ordering::Release);
                    }
                }
            }
        });
    // Not started: `rx` is gone, so every move fails (`Settled::Failed`) and the caller
    // polls instead.
    let worker = Arc::new(Worker {
        tx: Mutex::new(Some(tx)),
        thread: Mutex::new(spawned.ok()),
    });
    *shared = Arc::downgrade(&worker);
    worker
}

/// A fresh non-blocking eventfd.
fn fresh_eventfd(control_path: &Path) -> Result<OwnedFd, Unarmable> {
    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| Unarmable::io(control_path, e.into(), |_| None))
}

/// Registers `thresholds` on `efd` through the cgroup's `cgroup.event_control` (each waits
/// for an RCU grace period in the kernel).
fn register(files: &Files, efd: &OwnedFd, thresholds: &[u64]) -> Result<(), Unarmable> {
    for threshold in thresholds {
        let line = format!(
            "{} {} {threshold}",
            efd.as_raw_fd(),
            files.usage.as_raw_fd()
        );
        // One write per registration: cgroupfs takes the whole line or nothing.
        files.writes.begun.fetch_add(1, Ordering::AcqRel);
        let written = (&files.control).write_all(line.as_bytes());
        files.writes.done.fetch_add(1, Ordering::AcqRel);
        written.map_err(|e| {
            Unarmable::io(&files.control_path, e, |errno| match errno {
                Errno::OPNOTSUPP | Errno::INVAL => Some(Reason::V1Unsupported),
                other => cgroupfs_reason(other),
            })
        })?;
    }
    Ok(())
}
