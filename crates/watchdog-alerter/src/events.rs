//! The `--events` log: one JSON object per line, appended, plus the wall-clock helpers.
//!
//! [`EventLog`] opens the file with `O_APPEND|O_CREAT` and writes each [`Event`] as one
//! line with a single `write(2)`, so lines from concurrent writers never interleave and
//! a reader never sees half a line (short of a full disk). The parent directory must
//! exist: it is not created, and the error says so.
//!
//! The log may be opened with more privileges than the user who chose its path, so it is
//! opened with `O_NOFOLLOW` (a symlink planted at the path is refused, not written
//! through) and `O_NONBLOCK` (opening a FIFO cannot hang), and whatever was opened must be
//! a regular file (checked with `fstat` on the open descriptor, so it cannot be swapped
//! after the check); a directory, FIFO or device is refused.
//!
//! [`format_rfc3339_ms`] turns a `SystemTime` into `2026-11-22T20:31:05.123Z` with the
//! civil-from-days algorithm (Howard Hinnant, <https://howardhinnant.github.io/date_algorithms.html>).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use watchdog_types::fs::file_kind;
use watchdog_types::{Event, EventBody};

/// What can go wrong with the event log.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    /// The directory that should hold the log does not exist.
    #[error(
        "cannot open event log {path}: directory {dir} does not exist (create it or choose another --events path)"
    )]
    NoDir {
        /// The log path.
        path: PathBuf,
        /// The missing directory.
        dir: PathBuf,
    },
    /// The path is a symbolic link; the log is never written through one.
    #[error(
        "refusing to open event log {path}: it is a symbolic link (remove it or choose another --events path)"
    )]
    Symlink {
        /// The log path.
        path: PathBuf,
    },
    /// The path exists and is not a regular file (a directory, a FIFO, a device...).
    #[error(
        "refusing to open event log {path}: it is a {kind}, expected a regular file (or a path that does not exist yet)"
    )]
    NotAFile {
        /// The log path.
        path: PathBuf,
        /// What it is instead: `directory`, `FIFO`, `socket`, `character device`, `block device`.
        kind: &'static str,
    },
    /// Opening failed for another reason.
    #[error("cannot open event log {path}: {source}")]
    Open {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Writing a line failed or was short.
    #[error("cannot append to event log {path}: {source}")]
    Write {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The log was removed while the watchdog ran and has been created again at its
    /// path; the event was written there. An `Err` so the caller reports the loss of what
    /// the removed file held (an error line and an `output_error` event).
    #[error(
        "event log {path} was removed while the watchdog ran: created it again (the earlier events went with the removed file)"
    )]
    Recreated {
        /// The log path.
        path: PathBuf,
    },
    /// Another file took the log's path while the watchdog ran; it is not written to.
    #[error(
        "cannot append to event log {path}: another file replaced it while the watchdog ran; expected the file opened at the start (events are not written to the replacement)"
    )]
    Replaced {
        /// The log path.
        path: PathBuf,
    },
    /// Serialization failed.
    #[error("cannot serialize an event: {0}")]
    Json(#[from] serde_json::Error),
}

/// An open `--events` file.
#[derive(Debug)]
pub struct EventLog {
    file: File,
    path: PathBuf,
}

impl EventLog {
    /// Opens (creating when missing, mode 0644) `path` for appending.
    ///
    /// Refuses a symlink ([`EventLogError::Symlink`]) and anything that is not a regular
    /// file ([`EventLogError::NotAFile`]); see the module documentation.
    pub fn open(path: &Path) -> Result<Self, EventLogError> {
        let opened = OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .mode(0o644)
            .open(path);
        let file = match opened {
            Ok(f) => f,
            Err(source) => return Err(open_error(path, source)),
        };
        let open_err = |source: io::Error| EventLogError::Open {
            path: path.to_path_buf(),
            source,
        };
        let ft = file.metadata().map_err(open_err)?.file_type();
        if !ft.is_file() {
            return Err(EventLogError::NotAFile {
                path: path.to_path_buf(),
                kind: file_kind(ft),
            });
        }
        // O_NONBLOCK was only for the open; appends to a regular file should block as usual.
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| open_err(e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| open_err(e.into()))?;
        Ok(EventLog {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `event` as one JSON line with one `write(2)`. A log removed since the last
    /// append is created again first (and the event written there) with
    /// [`EventLogError::Recreated`] returned, so the loss is reported; a log replaced by
    /// another file is not written ([`EventLogError::Replaced`]).
    pub fn append(&mut self, event: &Event) -> Result<(), EventLogError> {
        let recreated = self.follow_path()?;
        let mut line = serde_json::to_vec(event)?;
        line.push(b'\n');
        let write_err = |source| EventLogError::Write {
            path: self.path.clone(),
            source,
        };
        let n = self.file.write(&line).map_err(write_err)?;
        if n != line.len() {
            return Err(write_err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes (disk full?)", line.len()),
            )));
        }
        if recreated {
            return Err(EventLogError::Recreated {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Checks that the path still names the open file: `Ok(true)` when it was removed and
    /// a new file was created there (`O_EXCL|O_NOFOLLOW`: never through a symlink).
    fn follow_path(&mut self) -> Result<bool, EventLogError> {
        use std::os::unix::fs::MetadataExt;
        let write_err = |source| EventLogError::Write {
            path: self.path.clone(),
            source,
        };
        let open = self.file.metadata().map_err(write_err)?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.dev() == open.dev() && m.ino() == open.ino() => Ok(false),
            Ok(_) => Err(EventLogError::Replaced {
                path: self.path.clone(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.file = OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                    .mode(0o644)
                    .open(&self.path)
                    .map_err(|source| open_error(&self.path, source))?;
                Ok(true)
            }
            Err(e) => Err(write_err(e)),
        }
    }

    /// Waits until what was appended is on disk (before an act that ends the watchdog).
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Appends an event stamped with the current time.
    pub fn append_now(&mut self, body: EventBody) -> Result<(), EventLogError> {
        self.append(&Event {
            time: now_rfc3339(),
            body,
        })
    }
}

/// Explains a failed `open` of the log: a symlink (`ELOOP` from `O_NOFOLLOW`), something
/// that is not a file (`EISDIR`, `ENXIO` for a FIFO without a reader), a missing directory.
fn open_error(path: &Path, source: io::Error) -> EventLogError {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let ft = m.file_type();
        if ft.is_symlink() {
            return EventLogError::Symlink {
                path: path.to_path_buf(),
            };
        }
        if !ft.is_file() {
            return EventLogError::NotAFile {
                path: path.to_path_buf(),
                kind: file_kind(ft),
            };
        }
    }
    let dir = watchdog_types::fs::parent_dir(path);
    if source.kind() == io::ErrorKind::NotFound && !dir.exists() {
        EventLogError::NoDir {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        }
    } else {
        EventLogError::Open {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The current time as RFC 3339 UTC with milliseconds: `2026-11-22T20:31:05.123Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339_ms(SystemTime::now())
}

/// Seconds since the Unix epoch as `f64` (negative before 1970).
pub fn unix_time_s(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Formats `t` as RFC 3339 UTC with milliseconds (truncated toward 1970):
/// `2026-11-22T20:31:05.123Z`, through jiff's calendar. Times beyond jiff's range (years
/// -9999 to 9999) are written as its first or last instant.
pub fn format_rfc3339_ms(t: SystemTime) -> String {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let ms = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    };
    let ts = jiff::Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    format!("{ts:.3}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_table() {
        let table: &[(i64, &str)] = &[
            (0, "1970-01-01T00:00:00.000Z"),
            (1_795_379_465_123, "2026-11-22T20:31:05.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"), // leap day, century divisible by 400
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"), // 2100 is not a leap year
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (1_700_000_000_000, "2023-11-14T22:13:20.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
        ];
        for (ms, want) in table {
            let t = if *ms >= 0 {
                UNIX_EPOCH + Duration::from_millis(*ms as u64)
            } else {
                UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
            };
            assert_eq!(format_rfc3339_ms(t), *want, "{ms} ms");
        }
    }

    #[test]
    fn now_has_the_shape() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 24, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
    }

    #[test]
    fn missing_dir_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = EventLog::open(&dir.path().join("nope/events.jsonl")).unwrap_err();
        assert!(matches!(err, EventLogError::NoDir { .. }), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    /// The log followed a symlink planted at its path and appended to the file it pointed at.
    #[test]
    fn symlink_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let p = dir.path().join("events.jsonl");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let err = EventLog::open(&p).unwrap_err();
        assert!(matches!(err, EventLogError::Symlink { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("symbolic link") && msg.contains(&*p.to_string_lossy()),
            "{msg}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // A dangling symlink is not followed to create its target either.
        let p2 = dir.path().join("dangling.jsonl");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &p2).unwrap();
        assert!(matches!(
            EventLog::open(&p2),
            Err(EventLogError::Symlink { .. })
        ));
        assert!(!dir.path().join("nowhere").exists());
    }

    /// A directory or FIFO at the path was accepted (or, for a FIFO, hung the open).
    #[test]
    fn directory_and_fifo_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = EventLog::open(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                EventLogError::NotAFile {
                    kind: "directory",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("expected a regular file"), "{err}");

        let fifo = dir.path().join("events.fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        // Without a reader (ENXIO on open).
        let err = EventLog::open(&fifo).unwrap_err();
        assert!(
            matches!(err, EventLogError::NotAFile { kind: "FIFO", .. }),
            "{err}"
        );
        // With a reader the open succeeds; fstat must still refuse it.
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let err = EventLog::open(&fifo).unwrap_err();
        assert!(
            matches!(err, EventLogError::NotAFile { kind: "FIFO", .. }),
            "{err}"
        );
    }

    #[test]
    fn regular_file_appends_and_blocks_normally() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.jsonl");
        std::fs::write(&p, "old\n").unwrap();
        let log = EventLog::open(&p).unwrap();
        let flags = rustix::fs::fcntl_getfl(&log.file).unwrap();
        assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
        assert!(flags.contains(rustix::fs::OFlags::APPEND));
        drop(log);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
    }

    /// Every event after the log was removed mid-run went to the removed file, unseen.
    #[test]
    fn a_removed_log_is_created_again_and_the_loss_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&p).unwrap();
        let event = |n: u32| Event {
            time: now_rfc3339(),
            body: EventBody::Resumed {
                resource: format!("r{n}"),
            },
        };
        log.append(&event(1)).unwrap();
        std::fs::remove_file(&p).unwrap();
        let err = log.append(&event(2)).unwrap_err();
        assert!(matches!(err, EventLogError::Recreated { .. }), "{err}");
        log.append(&event(3)).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("r2") && text.contains("r3") && !text.contains("r1"),
            "{text}"
        );
        // Replaced by someone else's file: not written into.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "mine\n").unwrap();
        let err = log.append(&event(4)).unwrap_err();
        assert!(matches!(err, EventLogError::Replaced { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "mine\n");
    }
}
