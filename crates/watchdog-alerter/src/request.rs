//! The request file: what the watchdog asks for, written atomically, and the client's acknowledgment.
//!
//! On every alert the watchdog writes an [`AlertRequest`] as JSON to the request file
//! (`--request-file`). The write is atomic: a temp file in the same directory, created
//! with `O_CREAT|O_EXCL|O_NOFOLLOW` (never following a symlink, never reusing a file
//! someone planted), then renamed over the destination ([`Durability::Visible`]): a
//! reader sees the old request or the new one, whole, never a torn one. It is not
//! fsynced: the file matters only while the run lives, and an fsync on ext4 delayed the
//! signal by milliseconds; after a machine crash the request may be lost, which is
//! harmless. `rename(2)` replaces a directory entry and does not follow a symlink at the
//! destination, but a symlink there means someone expects us to write through it, so
//! [`write_request_file`] refuses it.
//!
//! ## Acknowledgment protocol
//! After saving its checkpoint, the client writes `<request file>.ack` atomically (temp +
//! rename) with `{"seq": N, "time_unix": T}`: `N` is the `seq` of the request it
//! handled, `T` the time the checkpoint was done (seconds since the epoch). The watchdog
//! polls it with an [`AckWatcher`] (one `stat` per call; the file is parsed only when it
//! changed). A request is pending for the client while there is no ack with the same
//! `seq` and a `time_unix` at or after the request's `time_unix` (so an ack left by an
//! earlier watchdog run does not count). The watchdog should call [`clear_request_files`]
//! when it starts, so a stale request does not look like a new one, after checking with
//! [`is_request_file`] that what is there is a request (and not a file the user pointed
//! `--request-file` at by mistake).

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use watchdog_types::fs::{Durability, WriteError, write_atomic, write_atomic_with};

/// The JSON document written to the request file on every alert.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertRequest {
    /// Sequence number, increasing by one per alert within a watchdog run (first alert: 1).
    pub seq: u64,
    /// Resource name, e.g. `cgroup_memory`, `disk:/data`, `runtime`.
    pub resource: String,
    /// Resource kind, e.g. `cgroup_memory`, `disk_bytes` (the snake_case `ResourceKind`).
    pub kind: String,
    /// Why: `trend`, `headroom_floor` or `next_step`.
    pub reason: String,
    /// Usage at the alert, in `unit`.
    pub used: u64,
    /// Limit, in `unit`.
    pub limit: u64,
    /// `bytes`, `count` or `millis`.
    pub unit: String,
    /// Predicted seconds until the limit is reached (absent when the headroom floor fired on a flat trend).
    pub predicted_s: Option<f64>,
    /// When, RFC 3339 UTC with milliseconds: `2026-11-22T20:31:05.123Z`.
    pub time: String,
    /// When, seconds since the Unix epoch.
    pub time_unix: f64,
    /// The target PID (root of the watched tree).
    pub pid: u32,
    /// The signal the watchdog sends, e.g. `SIGUSR1` (sent only to processes that catch it).
    pub signal: String,
    /// The watchdog's own PID.
    pub watchdog_pid: u32,
}

/// The client's acknowledgment, read from `<request file>.ack`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// The `seq` of the request that was handled.
    pub seq: u64,
    /// When the checkpoint was done, seconds since the Unix epoch.
    pub time_unix: f64,
}

/// What can go wrong writing the request file.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The atomic write failed (a symlink or a non-file in the way, an I/O error).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// JSON serialization failed.
    #[error("cannot serialize the request: {0}")]
    Json(#[from] serde_json::Error),
}

/// The acknowledgment path for a request file: `<request_file>.ack`.
pub fn ack_path(request_file: &Path) -> PathBuf {
    let mut s = OsString::from(request_file.as_os_str());
    s.push(".ack");
    PathBuf::from(s)
}

/// Writes `req` to `path` atomically, never following a symlink. See the module documentation.
pub fn write_request_file(path: &Path, req: &AlertRequest) -> Result<(), RequestError> {
    let mut json = serde_json::to_vec_pretty(req)?;
    json.push(b'\n');
    Ok(write_atomic_with(path, &json, Durability::Visible)?)
}

/// Writes an acknowledgment to `<request_file>.ack` atomically (what the Python client does; for tests and other clients).
pub fn write_ack(request_file: &Path, ack: &Ack) -> Result<(), RequestError> {
    let mut json = serde_json::to_vec(ack)?;
    json.push(b'\n');
    Ok(write_atomic(&ack_path(request_file), &json)?)
}

/// Largest file [`is_request_file`] reads; a request is well under 1 KiB.
const MAX_REQUEST_BYTES: u64 = 64 * 1024;

/// Whether `path` is an existing regular file whose content parses as an [`AlertRequest`]
/// (a request left by an earlier run, safe to delete). `false` when it is missing, a
/// symlink (not followed, even to a request), a directory, FIFO or device, larger than
/// 64 KiB, unreadable, or anything but a request's JSON.
pub fn is_request_file(path: &Path) -> bool {
    // O_NOFOLLOW refuses a symlink; O_NONBLOCK keeps a FIFO from blocking the open.
    let Ok(f) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    else {
        return false;
    };
    match f.metadata() {
        Ok(m) if m.file_type().is_file() && m.len() <= MAX_REQUEST_BYTES => {}
        _ => return false,
    }
    let mut bytes = Vec::new();
    if io::Read::take(f, MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<AlertRequest>(&bytes).is_ok()
}

/// Removes a stale request file and its `.ack` (call when the watchdog starts). Missing files are fine.
/// A symlink is removed itself (`unlink` does not follow it).
pub fn clear_request_files(request_file: &Path) -> io::Result<()> {
    for p in [request_file.to_path_buf(), ack_path(request_file)] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads and parses an acknowledgment file; `None` when it is missing or malformed.
pub fn read_ack(path: &Path) -> Option<Ack> {
    // An ack is a few dozen bytes; read no more than a request's cap whatever is there.
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Identity of a file version: an atomic rename gives a new inode, an in-place write a new mtime or size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    mtime_ns: i128,
    size: u64,
}

/// Watches `<request file>.ack` cheaply enough to call every 100 ms: one `stat`, a parse only on change.
#[derive(Debug)]
pub struct AckWatcher {
    path: PathBuf,
    last: Option<FileStamp>,
    last_seq: Option<u64>,
}

impl AckWatcher {
    /// Watches the ack of `request_file`. An ack file that already exists now is taken as
    /// seen and not reported (it belongs to an earlier run).
    pub fn new(request_file: &Path) -> Self {
        let path = ack_path(request_file);
        let last = stamp(&path);
        AckWatcher {
            path,
            last,
            last_seq: None,
        }
    }

    /// The path watched (`<request file>.ack`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns a new acknowledgment when the file changed since the last call and holds a
    /// `seq` not reported before; `None` otherwise (including when it is missing or malformed).
    pub fn check(&mut self) -> Option<Ack> {
        let now = stamp(&self.path)?;
        if self.last == Some(now) {
            return None;
        }
        let ack = read_ack(&self.path)?;
        // Only remember the stamp once the content parsed, so a half-written file (a client
        // that does not rename) is read again on the next call.
        self.last = Some(now);
        if self.last_seq == Some(ack.seq) {
            return None;
        }
        self.last_seq = Some(ack.seq);
        Some(ack)
    }
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        ino: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        size: m.size(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> AlertRequest {
        AlertRequest {
            seq: 1,
            resource: "cgroup_memory".into(),
            kind: "cgroup_memory".into(),
            reason: "trend".into(),
            used: 900,
            limit: 1000,
            unit: "bytes".into(),
            predicted_s: Some(12.5),
            time: "2026-11-22T20:31:05.123Z".into(),
            time_unix: 1_795_379_465.123,
            pid: 42,
            signal: "SIGUSR1".into(),
            watchdog_pid: 41,
        }
    }

    #[test]
    fn ack_path_appends() {
        assert_eq!(
            ack_path(Path::new("/tmp/x/req.json")),
            PathBuf::from("/tmp/x/req.json.ack")
        );
    }

    #[test]
    fn request_round_trip_and_fields() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("req.json");
        write_request_file(&p, &sample()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        for k in [
            "seq",
            "resource",
            "kind",
            "reason",
            "used",
            "limit",
            "unit",
            "predicted_s",
            "time",
            "time_unix",
            "pid",
            "signal",
            "watchdog_pid",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {v}");
        }
        let back: AlertRequest = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample());
        // Overwrite works and leaves no temp files behind.
        let mut r = sample();
        r.seq = 2;
        write_request_file(&p, &r).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("req.json")]);
    }

    #[test]
    fn refuses_symlink_destination() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let p = dir.path().join("req.json");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let err = write_request_file(&p, &sample()).unwrap_err();
        assert!(
            matches!(err, RequestError::Write(WriteError::Symlink { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // A dangling symlink is refused as well.
        let p2 = dir.path().join("req2.json");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &p2).unwrap();
        assert!(matches!(
            write_request_file(&p2, &sample()),
            Err(RequestError::Write(WriteError::Symlink { .. }))
        ));
        assert!(!dir.path().join("nowhere").exists());
    }

    #[test]
    fn refuses_directory_and_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            write_request_file(dir.path(), &sample()),
            Err(RequestError::Write(WriteError::NotAFile { .. }))
        ));
        let err = write_request_file(&dir.path().join("no/such/req.json"), &sample()).unwrap_err();
        assert!(err.to_string().contains("no/such"), "{err}");
    }

    #[test]
    fn ack_watcher_reports_each_new_ack_once() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        // A stale ack from an earlier run is not reported.
        write_ack(
            &req,
            &Ack {
                seq: 7,
                time_unix: 1.0,
            },
        )
        .unwrap();
        let mut w = AckWatcher::new(&req);
        assert_eq!(w.check(), None);
        std::fs::remove_file(ack_path(&req)).unwrap();
        assert_eq!(w.check(), None);
        write_ack(
            &req,
            &Ack {
                seq: 1,
                time_unix: 2.0,
            },
        )
        .unwrap();
        assert_eq!(
            w.check(),
            Some(Ack {
                seq: 1,
                time_unix: 2.0
            })
        );
        assert_eq!(w.check(), None);
        // Same seq written again: not a new ack.
        write_ack(
            &req,
            &Ack {
                seq: 1,
                time_unix: 3.0,
            },
        )
        .unwrap();
        assert_eq!(w.check(), None);
        write_ack(
            &req,
            &Ack {
                seq: 2,
                time_unix: 4.0,
            },
        )
        .unwrap();
        assert_eq!(w.check().map(|a| a.seq), Some(2));
        // Malformed content is ignored until it parses.
        std::fs::write(ack_path(&req), "{\"seq\": 3, \"time_").unwrap();
        assert_eq!(w.check(), None);
        std::fs::write(ack_path(&req), "{\"seq\": 3, \"time_unix\": 5.5}").unwrap();
        assert_eq!(w.check().map(|a| a.seq), Some(3));
    }

    /// The binary deleted whatever `--request-file` named at start, even a file that was
    /// not a request (a typo could point it at a dataset or a checkpoint).
    #[test]
    fn is_request_file_only_for_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        assert!(!is_request_file(&req), "missing");
        write_request_file(&req, &sample()).unwrap();
        assert!(is_request_file(&req));

        let table: &[(&str, &[u8])] = &[
            ("empty", b""),
            ("text", b"epoch 3 loss 0.2\n"),
            ("other json", b"{\"seq\": 1, \"time_unix\": 2.0}\n"), // an ack
            ("array", b"[1, 2, 3]"),
            ("binary", &[0u8, 159, 146, 150, 255]),
        ];
        for (what, content) in table {
            let p = dir.path().join(what);
            std::fs::write(&p, content).unwrap();
            assert!(!is_request_file(&p), "{what}");
        }
        // A request padded past the size limit is not read.
        let big = dir.path().join("big.json");
        let mut json = serde_json::to_vec(&sample()).unwrap();
        json.resize(usize::try_from(MAX_REQUEST_BYTES).unwrap() + 10, b' ');
        std::fs::write(&big, &json).unwrap();
        assert!(!is_request_file(&big));

        // Not followed: a symlink, even to a request; not a regular file: a directory, a FIFO.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&req, &link).unwrap();
        assert!(!is_request_file(&link));
        assert!(!is_request_file(dir.path()));
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert!(!is_request_file(&fifo));
    }

    #[test]
    fn clear_removes_both() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        clear_request_files(&req).unwrap();
        write_request_file(&req, &sample()).unwrap();
        write_ack(
            &req,
            &Ack {
                seq: 1,
                time_unix: 1.0,
            },
        )
        .unwrap();
        clear_request_files(&req).unwrap();
        assert!(!req.exists() && !ack_path(&req).exists());
    }
}
