//! Files kept open and re-read in place: the sampler's only way of reading `/proc` and
//! cgroupfs, handed out by `watchdog-procfs`'s roots (the one reader of those files).
//!
//! [`KeptOpenFile`] lives in `watchdog_procfs::kept`, where its cost is explained: opened
//! once, re-read with one `pread` at offset 0 into a buffer that grows only when the file
//! outgrows it. It is re-exported here with the number and line helpers every parser of the
//! sampler uses.

use std::path::Path;

use crate::SourceError;

pub use watchdog_procfs::{KeptOpenFile, key_value_lines, parse_u64};

/// Builds the [`SourceError::Read`] for `path` from a rustix error.
pub(crate) fn read_error(path: &Path, e: rustix::io::Errno) -> SourceError {
    watchdog_procfs::read_error(path, e).into()
}
