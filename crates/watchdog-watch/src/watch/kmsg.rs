//! The kernel log, read for the OOM killer's line about the target: `/dev/kmsg` is
//! opened at the start and positioned at its end, so only what the kernel logs during
//! the run is read at the exit. Without permission (not root) it is simply not used.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags, SeekFrom};

/// An open `/dev/kmsg` positioned after the records present at the start.
pub struct Kmsg {
    fd: OwnedFd,
}

impl Kmsg {
    /// Opens the kernel log (`/dev/kmsg`) at its end, or `None` when it cannot be read.
    pub fn open_at_end(path: &std::path::Path) -> Option<Kmsg> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        rustix::fs::seek(&fd, SeekFrom::End(0)).ok()?;
        Some(Kmsg { fd })
    }

    /// Every record logged since the last read, one per line.
    pub fn read_new(&mut self) -> String {
        let mut out = String::new();
        let mut buf = vec![0u8; 8192];
        // Each read returns one record; EAGAIN means none is left, EPIPE that records
        // were overwritten (the next read continues with the oldest kept one).
        for _ in 0..100_000 {
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    out.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if !out.ends_with('\n') {
                        out.push('\n');
                    }
                }
                Err(rustix::io::Errno::PIPE) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
        out
    }
}
