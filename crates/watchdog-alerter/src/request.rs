//! The request file: what the watchdog asks for, written atomically, and the client's acknowledgment.
//!
//! On every alert the watchdog writes a [`SentRequest`] (the one request type, see
//! [`watchdog_types::request`]) as JSON to the request file (`--request-file`). The write is atomic: a temp file in the same directory, created
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
//!
//! ## Two places, one format
//! A [`RequestPlace`] is where the request lives: a path (`watchdog run`, `--pid`: the
//! watchdog runs as the user) or a name in a user's directory the root daemon holds open
//! ([`crate::beneath::UserDir`]: nothing is resolved by path, files are given to the
//! user). [`write_request`], [`AckWatcher::at`], [`clear_request`] and
//! [`RequestPlace::is_request`] take either; the `&Path` functions are the same ones on a
//! path. Whatever is read back (a request, an ack) is read without following a symlink and
//! capped at 64 KiB.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use watchdog_types::fs::{Durability, Owner, WriteError, write_atomic_owned};
use watchdog_types::request::SentRequest;

use crate::beneath::{BeneathError, UserDir, read_path_capped};

/// The client's acknowledgment, read from `<request file>.ack` (fields in `docs/recording.md`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// The `seq` of the request that was handled; 0 for a save no request asked for (a
    /// last-chance save after a CUDA out-of-memory error).
    pub seq: u64,
    /// When the checkpoint was done, seconds since the Unix epoch.
    pub time_unix: f64,
    /// The checkpoint written (a file or a directory), when the client knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The training step the checkpoint holds (the global step of the framework).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Why the client saved without a request: `cuda_oom` for the last-chance save.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// What can go wrong writing the request file.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The atomic write failed (a symlink or a non-file in the way, an I/O error).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The write beneath a user's directory failed.
    #[error(transparent)]
    Beneath(#[from] BeneathError),
    /// JSON serialization failed.
    #[error("cannot serialize the request: {0}")]
    Json(#[from] serde_json::Error),
}

/// The acknowledgment path for a request file: `<request_file>.ack`.
pub fn ack_path(request_file: &Path) -> PathBuf {
    suffixed(request_file, ACK_SUFFIX)
}

/// What the acknowledgment's name adds to the request file's.
pub const ACK_SUFFIX: &str = ".ack";

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

/// Where a request file (and its `.ack` beside it) lives: a path the single-run watchdog
/// was given, or a name in a user's directory the daemon holds open ([`UserDir`]), where
/// nothing is resolved by path. Every function of this module works on either; the
/// `&Path` functions are the same ones on [`RequestPlace::Path`].
#[derive(Clone, Debug)]
pub enum RequestPlace {
    /// A path, written and read as the user who gave it (`watchdog run`, `--pid`).
    Path(PathBuf),
    /// A path root writes for another user's run (`--pid` under `watchdog@.service`):
    /// each file is given to the run's user, `0600`, whatever the umask, so the run can
    /// read its request.
    Given {
        /// The request file.
        path: PathBuf,
        /// The run's user.
        owner: Owner,
    },
    /// A single file name in a user's directory (`watchdog daemon`, as root).
    Beneath {
        /// The user's directory, open.
        dir: Arc<UserDir>,
        /// One path component, e.g. `1234.request.json`.
        name: String,
    },
}

impl RequestPlace {
    /// `name` in `dir`; refused unless `name` is one path component.
    pub fn beneath(dir: Arc<UserDir>, name: impl Into<String>) -> Result<Self, BeneathError> {
        let name = name.into();
        if !crate::beneath::is_component(&name) {
            return Err(BeneathError::Name { name });
        }
        Ok(RequestPlace::Beneath { dir, name })
    }

    /// Its path, for messages and for the `WATCHDOG_REQUEST_FILE` a hook or client is told.
    pub fn path(&self) -> PathBuf {
        match self {
            RequestPlace::Path(p) | RequestPlace::Given { path: p, .. } => p.clone(),
            RequestPlace::Beneath { dir, name } => dir.path_of(name),
        }
    }

    /// The file beside it whose name adds `suffix` (no `/` in it): `.ack`, `.environment`.
    pub fn sibling(&self, suffix: &str) -> RequestPlace {
        match self {
            RequestPlace::Path(p) => RequestPlace::Path(suffixed(p, suffix)),
            RequestPlace::Given { path, owner } => RequestPlace::Given {
                path: suffixed(path, suffix),
                owner: *owner,
            },
            RequestPlace::Beneath { dir, name } => RequestPlace::Beneath {
                dir: Arc::clone(dir),
                name: format!("{name}{suffix}"),
            },
        }
    }

    /// Its acknowledgment: `<request file>.ack`.
    pub fn ack(&self) -> RequestPlace {
        self.sibling(ACK_SUFFIX)
    }

    /// Replaces it with `bytes` atomically; refuses a symlink at a path, replaces one
    /// beneath a user's directory (see [`UserDir::write_atomic`]).
    pub fn write(&self, bytes: &[u8], durability: Durability) -> Result<(), RequestError> {
        match self {
            RequestPlace::Path(p) => Ok(write_atomic_owned(p, bytes, durability, None)?),
            RequestPlace::Given { path, owner } => {
                Ok(write_atomic_owned(path, bytes, durability, Some(*owner))?)
            }
            RequestPlace::Beneath { dir, name } => Ok(dir.write_atomic(name, bytes)?),
        }
    }

    /// Its content, at most `cap` bytes: `Ok(None)` when missing; an error for a symlink,
    /// anything but a regular file, a larger file (and, beneath a user's directory, a file
    /// the user does not own).
    pub fn read_capped(&self, cap: u64) -> io::Result<Option<Vec<u8>>> {
        match self {
            RequestPlace::Path(p) | RequestPlace::Given { path: p, .. } => read_path_capped(p, cap),
            RequestPlace::Beneath { dir, name } => dir.read_capped(name, cap),
        }
    }

    /// Removes it (a symlink itself); missing is fine.
    pub fn remove(&self) -> io::Result<()> {
        match self {
            RequestPlace::Path(p) | RequestPlace::Given { path: p, .. } => {
                match std::fs::remove_file(p) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            }
            RequestPlace::Beneath { dir, name } => dir.remove(name),
        }
    }

    /// Renames it to [`sibling(suffix)`](Self::sibling) (a symlink itself, never what it
    /// points to) and returns that place; `None` when it is missing. The version that was
    /// here at that instant is then there, whatever is written here after: read there, it
    /// is taken whole, where a read then a remove here could remove a newer version.
    pub fn rename_to_sibling(&self, suffix: &str) -> io::Result<Option<RequestPlace>> {
        let to = self.sibling(suffix);
        let renamed = match (self, &to) {
            (RequestPlace::Beneath { dir, name }, RequestPlace::Beneath { name: new, .. }) => {
                dir.rename(name, new)?
            }
            _ => match std::fs::rename(self.path(), to.path()) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(e),
            },
        };
        Ok(renamed.then_some(to))
    }

    /// Whether it is a regular file whose content parses as a [`SentRequest`]; see
    /// [`is_request_file`].
    pub fn is_request(&self) -> bool {
        matches!(
            self.read_capped(MAX_REQUEST_BYTES),
            Ok(Some(bytes)) if serde_json::from_slice::<SentRequest>(&bytes).is_ok()
        )
    }

    /// Its acknowledgment parsed: `None` when missing, malformed or refused.
    fn read_ack(&self) -> Option<Ack> {
        self.parse_ack()?.ok()
    }

    /// The acknowledgment here: `None` when missing, why not when it cannot be taken (not a
    /// regular file, over its cap, not an acknowledgment).
    fn parse_ack(&self) -> Option<Result<Ack, String>> {
        let bytes = match self.read_capped(MAX_REQUEST_BYTES) {
            Ok(bytes) => bytes?,
            Err(e) => return Some(Err(e.to_string())),
        };
        Some(serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    }

    /// The identity of its current version (not following a symlink); `None` when missing.
    /// One `stat`: compare two stamps to parse a file only when it changed.
    pub fn stamp(&self) -> Option<FileStamp> {
        match self {
            RequestPlace::Path(p) | RequestPlace::Given { path: p, .. } => {
                std::fs::symlink_metadata(p).ok().map(|m| FileStamp::of(&m))
            }
            RequestPlace::Beneath { dir, name } => {
                dir.stat(name).ok()?.map(|st| FileStamp::of_stat(&st))
            }
        }
    }

    /// The identity of the directory it is in, and its last change: a file created,
    /// renamed or removed in it gives the directory a new `mtime`. One `stat` of the
    /// directory at a path, an `fstat` of the kept descriptor beneath; `None` when that
    /// fails.
    pub fn dir_stamp(&self) -> Option<FileStamp> {
        match self {
            RequestPlace::Path(p) | RequestPlace::Given { path: p, .. } => {
                let dir = p
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                std::fs::metadata(dir).ok().map(|m| FileStamp::of(&m))
            }
            RequestPlace::Beneath { dir, .. } => {
                dir.stat_self().ok().map(|st| FileStamp::of_stat(&st))
            }
        }
    }
}

/// The request as the file holds it: pretty JSON and a newline.
fn request_bytes(req: &SentRequest) -> Result<Vec<u8>, RequestError> {
    let mut json = serde_json::to_vec_pretty(req)?;
    json.push(b'\n');
    Ok(json)
}

/// Writes `req` to `place` atomically, never following a symlink. See the module documentation.
pub fn write_request(place: &RequestPlace, req: &SentRequest) -> Result<(), RequestError> {
    place.write(&request_bytes(req)?, Durability::Visible)
}

/// Writes `req` to `path` atomically, never following a symlink: [`write_request`] at a path.
pub fn write_request_file(path: &Path, req: &SentRequest) -> Result<(), RequestError> {
    write_request(&RequestPlace::Path(path.to_path_buf()), req)
}

/// Writes an acknowledgment of the request at `place` atomically (what the Python client
/// does; for tests and other clients).
pub fn write_ack_at(place: &RequestPlace, ack: &Ack) -> Result<(), RequestError> {
    let mut json = serde_json::to_vec(ack)?;
    json.push(b'\n');
    place.ack().write(&json, Durability::Durable)
}

/// Writes an acknowledgment to `<request_file>.ack` atomically: [`write_ack_at`] at a path.
pub fn write_ack(request_file: &Path, ack: &Ack) -> Result<(), RequestError> {
    write_ack_at(&RequestPlace::Path(request_file.to_path_buf()), ack)
}

/// Largest request or acknowledgment read; a request is well under 1 KiB.
const MAX_REQUEST_BYTES: u64 = crate::beneath::MAX_USER_FILE_BYTES;

/// Whether `path` is an existing regular file whose content parses as a [`SentRequest`]
/// (a request left by an earlier run, safe to delete). `false` when it is missing, a
/// symlink (not followed, even to a request), a directory, FIFO or device, larger than
/// 64 KiB, unreadable, or anything but a request's JSON.
pub fn is_request_file(path: &Path) -> bool {
    RequestPlace::Path(path.to_path_buf()).is_request()
}

/// Removes a stale request and its `.ack` (call when the watchdog starts). Missing files
/// are fine. A symlink is removed itself (`unlink` does not follow it).
pub fn clear_request(place: &RequestPlace) -> io::Result<()> {
    place.remove()?;
    place.ack().remove()
}

/// [`clear_request`] at a path.
pub fn clear_request_files(request_file: &Path) -> io::Result<()> {
    clear_request(&RequestPlace::Path(request_file.to_path_buf()))
}

/// Reads and parses an acknowledgment file; `None` when it is missing, malformed, a
/// symlink or over 64 KiB.
pub fn read_ack(path: &Path) -> Option<Ack> {
    RequestPlace::Path(path.to_path_buf()).read_ack()
}

/// Identity of a file version: an atomic rename gives a new inode, an in-place write a new mtime or size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    ino: u64,
    mtime_ns: i128,
    size: u64,
}

impl FileStamp {
    /// The stamp of what `m` describes.
    fn of(m: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            size: m.size(),
        }
    }

    /// The stamp of what `st` (a `stat` through a descriptor) describes.
    fn of_stat(st: &rustix::fs::Stat) -> FileStamp {
        FileStamp {
            ino: st.st_ino,
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            size: u64::try_from(st.st_size).unwrap_or(0),
        }
    }

    /// Its modification time, nanoseconds since the Unix epoch.
    pub fn mtime_ns(&self) -> i128 {
        self.mtime_ns
    }
}

/// Watches `<request file>.ack` cheaply enough to call every 100 ms: one `stat`, a parse only on change.
#[derive(Debug)]
pub struct AckWatcher {
    ack: RequestPlace,
    path: PathBuf,
    last: Option<FileStamp>,
    last_seq: Option<u64>,
    /// The `time_unix` bits of the last acknowledgment with a `cause` reported.
    last_cause: Option<u64>,
    /// Whether an acknowledgment that could not be taken was said.
    refusal_said: bool,
}

impl AckWatcher {
    /// Watches the ack of `request_file`. An ack file that already exists now is taken as
    /// seen and not reported (it belongs to an earlier run).
    pub fn new(request_file: &Path) -> Self {
        AckWatcher::at(&RequestPlace::Path(request_file.to_path_buf()))
    }

    /// Watches the ack of the request at `place`; see [`new`](Self::new).
    pub fn at(place: &RequestPlace) -> Self {
        let ack = place.ack();
        let last = ack.stamp();
        AckWatcher {
            path: ack.path(),
            ack,
            last,
            last_seq: None,
            last_cause: None,
            refusal_said: false,
        }
    }

    /// The path watched (`<request file>.ack`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns a new acknowledgment when the file changed since the last call and holds a
    /// `seq` not reported before, or a `cause` (a save no request asked for, `seq` 0 or the
    /// pending request's) with a `time_unix` not reported before; `None` otherwise
    /// (including when it is missing or malformed). An ack already there at the start
    /// is never reported, whatever it holds.
    pub fn check(&mut self) -> Option<Ack> {
        let now = self.ack.stamp()?;
        if self.last == Some(now) {
            return None;
        }
        let ack = match self.ack.parse_ack()? {
            Ok(ack) => ack,
            Err(why) => {
                // Said once a watch; read again at the next call (a client that does not
                // rename may have been half way through).
                if !self.refusal_said {
                    self.refusal_said = true;
                    tracing::warn!(
                        "the acknowledgment {} is ignored: {}; expected a regular file of at most {MAX_REQUEST_BYTES} bytes holding {{\"seq\": N, \"time_unix\": T, ...}} (docs/recording.md)",
                        watchdog_types::quote::quote_path(&self.path),
                        watchdog_types::units::printable(&why)
                    );
                }
                return None;
            }
        };
        // Only remember the stamp once the content parsed, so a half-written file (a client
        // that does not rename) is read again on the next call.
        self.last = Some(now);
        if ack.cause.is_some() {
            let time = ack.time_unix.to_bits();
            if self.last_cause == Some(time) {
                return None;
            }
            self.last_cause = Some(time);
        } else if self.last_seq == Some(ack.seq) {
            return None;
        }
        self.last_seq = Some(ack.seq);
        Some(ack)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> SentRequest {
        SentRequest::example()
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
        let back: SentRequest = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample());
        // Overwrite works and leaves no temp files behind.
        let mut r = sample();
        r.request.seq = 2;
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
                ..Ack::default()
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
                ..Ack::default()
            },
        )
        .unwrap();
        assert_eq!(
            w.check(),
            Some(Ack {
                seq: 1,
                time_unix: 2.0,
                ..Ack::default()
            })
        );
        assert_eq!(w.check(), None);
        // Same seq written again: not a new ack.
        write_ack(
            &req,
            &Ack {
                seq: 1,
                time_unix: 3.0,
                ..Ack::default()
            },
        )
        .unwrap();
        assert_eq!(w.check(), None);
        write_ack(
            &req,
            &Ack {
                seq: 2,
                time_unix: 4.0,
                ..Ack::default()
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
    /// Issue 19: a last-chance save is acknowledged with a cause and `seq` 0 (no request
    /// pending), or with the seq of a request already acknowledged: both are reported once,
    /// and a stale one from an earlier run still is not.
    #[test]
    fn ack_watcher_reports_an_ack_with_a_cause_even_without_a_new_seq() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let cause = |seq, time_unix| Ack {
            seq,
            time_unix,
            path: Some("ckpt/last".into()),
            step: Some(12),
            cause: Some("cuda_oom".into()),
        };
        write_ack(&req, &cause(0, 1.0)).unwrap();
        let mut w = AckWatcher::new(&req);
        assert_eq!(w.check(), None, "a stale cause ack is not reported");
        write_ack(&req, &cause(0, 2.0)).unwrap();
        assert_eq!(w.check(), Some(cause(0, 2.0)));
        assert_eq!(w.check(), None);
        // The same ack written again in place is not a new one.
        write_ack(&req, &cause(0, 2.0)).unwrap();
        assert_eq!(w.check(), None);
        write_ack(
            &req,
            &Ack {
                seq: 1,
                time_unix: 3.0,
                ..Ack::default()
            },
        )
        .unwrap();
        assert_eq!(w.check().map(|a| a.seq), Some(1));
        // A cause ack for the request already acknowledged still passes.
        write_ack(&req, &cause(1, 4.0)).unwrap();
        assert_eq!(w.check(), Some(cause(1, 4.0)));
    }

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
                ..Ack::default()
            },
        )
        .unwrap();
        clear_request_files(&req).unwrap();
        assert!(!req.exists() && !ack_path(&req).exists());
    }

    fn user_place(dir: &Path, name: &str) -> RequestPlace {
        let dirs = crate::beneath::UserDirs::open(&dir.join("users")).unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let user = Arc::new(dirs.for_user(uid, gid).unwrap());
        RequestPlace::beneath(user, name).unwrap()
    }

    /// The directory's stamp, at a path and through the user's directory descriptor: the
    /// same before and after a file is rewritten in place, new once one is created in it.
    #[test]
    fn the_directory_stamp_changes_when_a_file_is_created_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let beneath = user_place(dir.path(), "1.request.json");
        let at_path = RequestPlace::Path(dir.path().join("req.json"));
        for place in [beneath, at_path] {
            let parent = place.path().parent().unwrap().to_path_buf();
            let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
            let file = parent.join("present");
            std::fs::write(&file, "a").unwrap();
            std::fs::File::open(&parent)
                .unwrap()
                .set_modified(old)
                .unwrap();
            let before = place.dir_stamp().unwrap();
            std::fs::write(&file, "b").unwrap();
            assert_eq!(place.dir_stamp(), Some(before), "{}", parent.display());
            std::fs::write(parent.join("created"), "c").unwrap();
            assert_ne!(place.dir_stamp(), Some(before), "{}", parent.display());
        }
        assert_eq!(
            RequestPlace::Path("/nonexistent/x/req.json".into()).dir_stamp(),
            None
        );
    }

    /// The daemon's place: the same request bytes, the same ack protocol, through the
    /// user's directory descriptor.
    #[test]
    fn beneath_a_user_dir_same_format_and_ack_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let place = user_place(dir.path(), "42.request.json");
        let path = place.path();
        let uid = rustix::process::geteuid().as_raw();
        assert_eq!(
            path,
            dir.path().join(format!("users/{uid}/42.request.json"))
        );
        assert!(!place.is_request());
        write_request(&place, &sample()).unwrap();
        assert!(place.is_request());
        // One serialization: byte for byte what the path writer writes.
        let other = dir.path().join("req.json");
        write_request_file(&other, &sample()).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&other).unwrap()
        );

        let mut w = AckWatcher::at(&place);
        assert_eq!(w.path(), ack_path(&path));
        assert_eq!(w.check(), None);
        write_ack_at(
            &place,
            &Ack {
                seq: 1,
                time_unix: 2.0,
                ..Ack::default()
            },
        )
        .unwrap();
        assert_eq!(w.check().map(|a| a.seq), Some(1));
        assert_eq!(w.check(), None);
        // An ack as a symlink to a real ack elsewhere is not read.
        let elsewhere = dir.path().join("elsewhere.ack");
        std::fs::write(&elsewhere, "{\"seq\": 9, \"time_unix\": 9.0}").unwrap();
        std::fs::remove_file(ack_path(&path)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ack_path(&path)).unwrap();
        assert_eq!(w.check(), None);
        // An ack over the 64 KiB cap is not read.
        std::fs::remove_file(ack_path(&path)).unwrap();
        let mut big = b"{\"seq\": 5, \"time_unix\": 9.0}".to_vec();
        big.resize(usize::try_from(MAX_REQUEST_BYTES).unwrap() + 1, b' ');
        std::fs::write(ack_path(&path), &big).unwrap();
        assert_eq!(w.check(), None);

        clear_request(&place).unwrap();
        assert!(!path.exists() && !ack_path(&path).exists());
        assert!(std::fs::read_to_string(&elsewhere).unwrap().contains("9"));
        // Names with a slash are refused up front.
        let RequestPlace::Beneath { dir: user, .. } = &place else {
            panic!("not beneath")
        };
        assert!(RequestPlace::beneath(Arc::clone(user), "../x").is_err());
    }
}
