//! Files kept open and re-read in place: the hot path of every reader of `/proc` and cgroupfs.
//!
//! Opening, reading and closing `/proc/meminfo` costs 8.9 us here; re-reading a descriptor
//! kept open with `pread` at offset 0 costs 5.5 us and returns fresh contents, because procfs,
//! sysfs and cgroupfs regenerate a file's text on every read from offset 0. A [`KeptOpenFile`]
//! opens its file once, owns a buffer that grows (by doubling) only when the file outgrows it,
//! and hands out the bytes of the latest read: once warm, a read is one syscall and no
//! allocation. The roots hand them out ([`ProcRoot::keep_open`](crate::ProcRoot::keep_open),
//! [`ProcRoot::keep_open_pid`](crate::ProcRoot::keep_open_pid), and
//! [`KeptOpenFile::with_capacity`] for a file of a cgroup directory found under the roots).
//!
//! A read shorter than the buffer is taken as the whole file. That holds for these
//! pseudo-files: the kernel fills the caller's buffer from a `seq_file` or a sysfs page
//! until either the buffer or the text runs out. When a read fills the buffer, the buffer is
//! doubled and the file read again from offset 0, so the result is always one consistent
//! snapshot, never two halves of different generations.
//!
//! A descriptor under `/proc/PID/` is bound to that process, not to its number: once the
//! process is gone, reads fail with `ESRCH` (or return nothing) even when the PID has been
//! reused, so a kept-open file never silently starts describing another process.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::Error;

/// Initial buffer size: enough for `/proc/meminfo` (~1.5 KiB) and a v2 `memory.stat` (~1.6 KiB).
const INITIAL_CAPACITY: usize = 4096;
/// Refuse to grow past this: no pseudo-file we read comes close, and a runaway file must not eat memory.
const MAX_CAPACITY: usize = 1 << 22;

/// A file opened once and re-read with `pread` at offset 0 into a reusable buffer.
#[derive(Debug)]
pub struct KeptOpenFile {
    fd: OwnedFd,
    path: PathBuf,
    buf: Vec<u8>,
    len: usize,
}

impl KeptOpenFile {
    /// Opens `path` read-only (close-on-exec) with the default 4 KiB buffer.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, Error> {
        Self::with_capacity(path, INITIAL_CAPACITY)
    }

    /// Opens `path` with a buffer of `capacity` bytes (for files known to be small or large).
    pub fn with_capacity(path: impl Into<PathBuf>, capacity: usize) -> Result<Self, Error> {
        let path = path.into();
        let fd = rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| read_error(&path, e))?;
        Ok(Self {
            fd,
            path,
            buf: vec![0; capacity.clamp(16, MAX_CAPACITY)],
            len: 0,
        })
    }

    /// Reads the whole file again from offset 0 and returns its bytes.
    ///
    /// Allocates only when the file has grown past the buffer (the buffer is then doubled and
    /// kept for later reads).
    pub fn read(&mut self) -> Result<&[u8], Error> {
        loop {
            let n = rustix::io::pread(&self.fd, &mut self.buf[..], 0)
                .map_err(|e| read_error(&self.path, e))?;
            if n < self.buf.len() {
                self.len = n;
                return Ok(&self.buf[..n]);
            }
            if self.buf.len() >= MAX_CAPACITY {
                return Err(Error::Parse {
                    path: self.path.clone(),
                    what: format!("file is larger than {MAX_CAPACITY} bytes"),
                });
            }
            let doubled = self.buf.len() * 2;
            self.buf.resize(doubled, 0);
        }
    }

    /// The bytes of the latest successful [`read`](Self::read) (empty before the first).
    pub fn last(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The path this file was opened from, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current buffer capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
}

impl AsFd for KeptOpenFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Builds the [`Error::Read`] for `path` from a rustix error.
pub fn read_error(path: &Path, e: rustix::io::Errno) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        source: std::io::Error::from(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rereads_fresh_contents_without_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "first\n").unwrap();
        let mut f = KeptOpenFile::open(&path).unwrap();
        assert_eq!(f.read().unwrap(), b"first\n");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all(b"SECOND\n")
            .unwrap();
        assert_eq!(f.read().unwrap(), b"SECOND\n");
        assert_eq!(f.last(), b"SECOND\n");
    }

    #[test]
    fn grows_past_the_initial_buffer_and_keeps_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let text: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(&path, &text).unwrap();
        let mut f = KeptOpenFile::with_capacity(&path, 16).unwrap();
        assert_eq!(f.read().unwrap(), &text[..]);
        assert!(f.capacity() > text.len());
    }

    #[test]
    fn reads_real_procfs_files() {
        let mut f = KeptOpenFile::open("/proc/self/statm").unwrap();
        let a = f.read().unwrap().to_vec();
        assert!(!a.is_empty());
        let mut m = KeptOpenFile::open("/proc/meminfo").unwrap();
        assert!(m.read().unwrap().starts_with(b"MemTotal:"));
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = KeptOpenFile::open("/nonexistent/wd-file").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/wd-file"), "{err}");
    }
}
