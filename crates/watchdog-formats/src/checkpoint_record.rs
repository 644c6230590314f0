//! The checkpoint record: what the watchdog knows of the checkpoints a run acknowledged,
//! kept beside the run (`.watchdog-checkpoints.json` in its working directory, or
//! `--checkpoint-record PATH`) so that it outlives the job, the node and the watchdog. A
//! requeued job, a `--restart` and a rerun by hand resume from it; the Python client
//! (`training_watchdog.record`) reads the same file.
//!
//! ```json
//! {"version":1,"entries":[{"key":"slurm-12","path":"ckpt/step-40.pt","step":40,
//!   "size":1234,"mtime_ns":1795864321123456789,"time_unix":1795864321.5,"attempt":1,
//!   "verdict":"runtime_limit"}]}
//! ```
//!
//! Entries are oldest first, at most [`MAX_ENTRIES`] and [`MAX_BYTES`] (the oldest are
//! dropped); `path` is relative to the record's directory where it lies beneath it; `key`
//! names the run (`WATCHDOG_RUN_KEY`, else `slurm-<SLURM_JOB_ID>`, else `default`), so two
//! runs sharing a directory never take each other's checkpoints. An entry is complete while
//! its checkpoint has the `size` and newest `mtime_ns` it had when acknowledged. The record
//! is read without following a symlink and written through a temporary file and a rename.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's name in the run's working directory.
pub const DEFAULT_NAME: &str = ".watchdog-checkpoints.json";
/// Most entries kept.
pub const MAX_ENTRIES: usize = 100;
/// Largest record, in bytes, written or read.
pub const MAX_BYTES: usize = 64 * 1024;
/// The format's version.
pub const VERSION: u32 = 1;

/// One acknowledged checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The run it belongs to.
    pub key: String,
    /// The checkpoint, relative to the record's directory where it can be.
    pub path: String,
    /// The training step it holds, when the client said.
    pub step: Option<u64>,
    /// Bytes: the file's size, or the sum of a directory's files.
    pub size: u64,
    /// Newest modification time in it, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// When the save returned (the acknowledgment's `time_unix`).
    pub time_unix: f64,
    /// The attempt that saved it: `SLURM_RESTART_COUNT` plus restarts in the allocation,
    /// plus one (1 for a first run).
    pub attempt: u32,
    /// How that attempt ended, once known (`runtime_limit`, `oom_kill`, ...).
    pub verdict: Option<String>,
}

/// The whole record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// [`VERSION`].
    pub version: u32,
    /// Oldest first.
    pub entries: Vec<Entry>,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            version: VERSION,
            entries: Vec::new(),
        }
    }
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Opening or reading failed (a symlink is refused here: `O_NOFOLLOW`).
    #[error("cannot read the checkpoint record {path}: {source}")]
    Io {
        /// The record.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a regular file, is too large, or is not a record.
    #[error("the checkpoint record {path} {why}")]
    Invalid {
        /// The record.
        path: PathBuf,
        /// What is wrong, as a predicate (`is not JSON ...`).
        why: String,
    },
}

impl Record {
    /// Parses a record's bytes; `Err` says what is wrong (as a predicate).
    pub fn parse(bytes: &[u8]) -> Result<Record, String> {
        if bytes.len() > MAX_BYTES {
            return Err(format!("is larger than {} KiB", MAX_BYTES / 1024));
        }
        let record: Record = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "is not a checkpoint record ({e}); expected {{\"version\":1,\"entries\":[...]}}"
            )
        })?;
        if record.version != VERSION {
            return Err(format!(
                "has version {}, expected {VERSION}",
                record.version
            ));
        }
        Ok(record)
    }

    /// Reads the record at `path`: `Ok(None)` when there is none; never follows a symlink
    /// or blocks on a FIFO.
    pub fn read(path: &Path) -> Result<Option<Record>, RecordError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let invalid = |why: String| RecordError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(invalid("is not a regular file".into()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        Record::parse(&bytes).map(Some).map_err(invalid)
    }

    /// Adds an entry, dropping the oldest beyond [`MAX_ENTRIES`] or [`MAX_BYTES`].
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
        let excess = self.entries.len().saturating_sub(MAX_ENTRIES);
        self.entries.drain(..excess);
        while self.entries.len() > 1 && self.to_bytes().len() > MAX_BYTES {
            self.entries.remove(0);
        }
    }

    /// The record as written: one JSON object and a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The entries of run `key`, newest first.
    pub fn of_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries.iter().rev().filter(move |e| e.key == key)
    }
}

/// The path an entry names, relative to `dir` (the record's directory) when beneath it.
pub fn relative_to(dir: &Path, checkpoint: &Path) -> String {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (dir, file) = (canon(dir), canon(checkpoint));
    match file.strip_prefix(&dir) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => file.to_string_lossy().into_owned(),
    }
}

/// The checkpoint an entry names, absolute (`dir`: the record's directory).
pub fn resolve(dir: &Path, entry: &Entry) -> PathBuf {
    dir.join(&entry.path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(key: &str, step: u64) -> Entry {
        Entry {
            key: key.into(),
            path: format!("ckpt/step-{step}.pt"),
            step: Some(step),
            size: 10,
            mtime_ns: 1_795_864_321_123_456_789,
            time_unix: 1_795_864_321.5,
            attempt: 1,
            verdict: None,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let mut r = Record::default();
        r.push(entry("slurm-12", 40));
        r.push(entry("default", 7));
        let back = Record::parse(&r.to_bytes()).unwrap();
        assert_eq!(back, r);
        let keys: Vec<u64> = back.of_key("slurm-12").filter_map(|e| e.step).collect();
        assert_eq!(keys, [40]);
    }

    #[test]
    fn the_oldest_entries_go_beyond_the_bounds() {
        let mut r = Record::default();
        for step in 0..150 {
            r.push(entry("k", step));
        }
        assert_eq!(r.entries.len(), MAX_ENTRIES);
        assert_eq!(r.entries[0].step, Some(50));
        let mut big = Record::default();
        for step in 0..100 {
            let mut e = entry("k", step);
            e.path = "x".repeat(2000);
            big.push(e);
        }
        assert!(big.to_bytes().len() <= MAX_BYTES);
        assert_eq!(big.entries.last().unwrap().step, Some(99));
    }

    #[test]
    fn anything_but_a_record_is_refused_with_what_was_expected() {
        for (bad, want) in [
            (&b"garbage"[..], "is not a checkpoint record"),
            (
                b"{\"version\":2,\"entries\":[]}",
                "has version 2, expected 1",
            ),
            (
                b"{\"version\":1,\"entries\":{}}",
                "is not a checkpoint record",
            ),
            (b"[]", "is not a checkpoint record"),
        ] {
            let e = Record::parse(bad).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        let e = Record::parse(&vec![b' '; MAX_BYTES + 1]).unwrap_err();
        assert!(e.contains("larger than 64 KiB"), "{e}");
    }

    #[test]
    fn a_symlink_or_a_fifo_is_never_read_through() {
        let dir = std::env::temp_dir().join(format!("wd-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let real = dir.join("real.json");
        std::fs::write(&real, Record::default().to_bytes()).unwrap();
        let link = dir.join("link.json");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(Record::read(&link).is_err());
        assert_eq!(Record::read(&real).unwrap(), Some(Record::default()));
        assert_eq!(Record::read(&dir.join("none.json")).unwrap(), None);
        let fifo = dir.join("fifo.json");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(Record::read(&fifo).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_beneath_the_record_are_relative() {
        let dir = std::env::temp_dir().join(format!("wd-record-rel-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("ckpt")).unwrap();
        std::fs::write(dir.join("ckpt/a.pt"), b"x").unwrap();
        assert_eq!(relative_to(&dir, &dir.join("ckpt/a.pt")), "ckpt/a.pt");
        assert_eq!(
            relative_to(&dir.join("ckpt"), Path::new("/etc/hostname")),
            "/etc/hostname"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
