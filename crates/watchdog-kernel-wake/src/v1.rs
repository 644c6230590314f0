//! Cgroup v1 memory thresholds: an eventfd the kernel signals when `memory.usage_in_bytes`
//! crosses a value (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds").
//!
//! Arming writes `"<eventfd> <fd of memory.usage_in_bytes> <threshold>"` to the cgroup's
//! `cgroup.event_control`. The kernel signals a crossing in either direction, checked every
//! 128 page charges or uncharges per CPU (`THRESHOLDS_EVENTS_TARGET` in mm/memcontrol.c,
//! mm/memcontrol-v1.c since 6.11), so a crossing is seen within about 512 KiB per CPU of
//! it. A threshold cannot be removed but by closing its eventfd: re-arming registers the new
//! thresholds on a new eventfd, then closes the old one. `memory.usage_in_bytes` counts page cache (which the sampler's
//! `cgroup_memory` does not): while cache keeps usage near the limit a threshold there
//! fires again and again, and the caller should poll instead.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::event::{EventfdFlags, PollFlags, eventfd};
use rustix::io::Errno;

use crate::{Reason, Unarmable, cgroupfs_reason, pread_text};

/// Thresholds on a cgroup v1 memory cgroup's `memory.usage_in_bytes`, signalled through one
/// eventfd.
#[derive(Debug)]
pub struct CgroupV1Threshold {
    /// `cgroup.event_control`, kept open for re-arming.
    control: File,
    control_path: PathBuf,
    /// `memory.usage_in_bytes`, kept open: the kernel wants its descriptor, and [`usage_bytes`]
    /// re-reads it.
    ///
    /// [`usage_bytes`]: CgroupV1Threshold::usage_bytes
    usage: File,
    eventfd: OwnedFd,
    text: Vec<u8>,
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
        let eventfd = register(&control, &control_path, &usage, thresholds)?;
        Ok(CgroupV1Threshold {
            control,
            control_path,
            usage,
            eventfd,
            text: Vec::with_capacity(32),
        })
    }

    /// Replaces the armed thresholds by `thresholds` (typically one above and one below the
    /// current usage). The new ones are registered before the old eventfd is closed, so no
    /// crossing goes unseen; on failure the old ones stay armed.
    pub fn rearm(&mut self, thresholds: &[u64]) -> Result<(), Unarmable> {
        let fresh = register(&self.control, &self.control_path, &self.usage, thresholds)?;
        // Closing the old eventfd is what removes its thresholds in the kernel.
        drop(std::mem::replace(&mut self.eventfd, fresh));
        Ok(())
    }

    /// The eventfd to poll for [`Self::POLL`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }

    /// How many crossings were signalled since the last call (0 when none): reading the
    /// eventfd resets it, so it stops being ready.
    pub fn consume(&self) -> std::io::Result<u64> {
        let mut count = [0u8; 8];
        match rustix::io::read(&self.eventfd, &mut count) {
            Ok(8) => Ok(u64::from_ne_bytes(count)),
            Ok(n) => Err(std::io::Error::other(format!(
                "eventfd read {n} bytes, expected 8"
            ))),
            Err(Errno::AGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// The cgroup's `memory.usage_in_bytes` now, in bytes (page cache included), to place
    /// the next thresholds around.
    pub fn usage_bytes(&mut self) -> std::io::Result<u64> {
        pread_text(&self.usage, &mut self.text)?;
        let text = String::from_utf8_lossy(&self.text);
        text.trim().parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("memory.usage_in_bytes {:?}: expected a number", text.trim()),
            )
        })
    }
}

/// A fresh eventfd with `thresholds` registered on it through `control`.
fn register(
    control: &File,
    control_path: &Path,
    usage: &File,
    thresholds: &[u64],
) -> Result<OwnedFd, Unarmable> {
    let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| Unarmable::io(control_path, e.into(), |_| None))?;
    for threshold in thresholds {
        let line = format!("{} {} {threshold}", efd.as_raw_fd(), usage.as_raw_fd());
        // One write per registration: cgroupfs takes the whole line or nothing.
        (&*control).write_all(line.as_bytes()).map_err(|e| {
            Unarmable::io(control_path, e, |errno| match errno {
                Errno::OPNOTSUPP | Errno::INVAL => Some(Reason::V1Unsupported),
                other => cgroupfs_reason(other),
            })
        })?;
    }
    Ok(efd)
}
