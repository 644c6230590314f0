//! Files the root daemon keeps for each user, opened beneath one directory descriptor.
//!
//! `watchdog daemon` runs as root and watches the training runs of every user of the
//! machine. It writes each run's request file where that run's user can read it and
//! write the acknowledgment, and reads back what the user wrote (the `.ack`, the Python
//! client's `.environment`). Nothing a user does there may make root write, read or
//! remove anything outside that user's own directory, or read another user's file.
//!
//! - [`UserDirs::open`] opens the base (`/run/watchdog/users` by default), creating it
//!   `0755` when missing, and refuses it when it is a symlink, not owned by the daemon's
//!   user (root) or writable by group or others: only root adds entries there. Another
//!   mode of root's (`0700`, made under `UMask=0077`) is put back to `0755`.
//!
//! Every mode here holds whatever the daemon's umask (the unit sets `UMask=0077`): each
//! directory and file is `fchmod`ed on its descriptor after it is made.
//! - [`UserDirs::for_user`] opens `base/UID` with `mkdirat` + `openat(O_DIRECTORY |
//!   O_NOFOLLOW)` relative to the base's descriptor, owned `UID:GID`, mode `0700`. An
//!   existing directory owned by someone else is refused (a UID reused after a user was
//!   deleted); anything but a directory (only root could have put it there) is unlinked
//!   and replaced.
//! - [`UserDir`] keeps that directory's descriptor and does everything relative to it with
//!   single path components (no `/`, not `.` or `..`): [`UserDir::write_atomic`] creates a
//!   temp file `O_CREAT|O_EXCL|O_NOFOLLOW`, `0600`, `fchown`s it to the user and
//!   `renameat`s it over the name (a symlink planted there is replaced, never followed);
//!   [`UserDir::read_capped`] opens `O_NOFOLLOW|O_NONBLOCK`, refuses anything but a
//!   regular file owned by the user (so a hard link to a file of root's or another
//!   user's is not read) and reads at most the cap; [`UserDir::remove`] unlinks and
//!   [`UserDir::rename`] renames one name to another.
//!
//! The user owns the directory and may rename or delete anything in it at any time; that
//! is harmless, because root acts only on descriptors it opened itself and never
//! resolves a path the user can change. Every descriptor is close-on-exec, so no hook
//! inherits one. See `docs/isolation.md`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Stat, Uid};
use rustix::io::Errno;

/// Where the daemon keeps the users' directories by default.
pub const DEFAULT_USERS_DIR: &str = "/run/watchdog/users";

/// The most the daemon reads of a file a user wrote (an ack, the Python environment file).
pub const MAX_USER_FILE_BYTES: u64 = 64 * 1024;

/// What can go wrong opening or writing beneath the users' directory.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The base or a user's directory is unfit: a symlink, the wrong owner, too open.
    #[error("refusing {path}: {reason}")]
    Refused {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it, e.g. `it is a symbolic link`.
        reason: String,
    },
    /// A file name that is not a single path component.
    #[error("invalid file name {name:?}: expected one path component (no '/', not '.' or '..')")]
    Name {
        /// The name given.
        name: String,
    },
    /// A system call failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path, e: impl Into<io::Error>) -> BeneathError {
    BeneathError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// The base's mode: every user passes through it to their own directory.
const BASE_MODE: u32 = 0o755;

/// Says once when the base's parent keeps users out (no search bit for others): the
/// daemon does not change a directory it did not make, but nobody would reach their file.
fn warn_unreachable_parent(base: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Some(parent) = base.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return;
    };
    if let Ok(m) = std::fs::metadata(parent)
        && m.permissions().mode() & 0o001 == 0
    {
        tracing::warn!(
            "{} has mode {:04o}: users cannot reach their request files beneath it (expected 0755)",
            parent.display(),
            m.permissions().mode() & 0o7777
        );
    }
}

/// The base directory of the users' directories, open.
#[derive(Debug)]
pub struct UserDirs {
    path: PathBuf,
    fd: OwnedFd,
}

/// Flags for opening a directory that must not be a symlink.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

fn permissions(st: &Stat) -> u32 {
    st.st_mode & 0o7777
}

impl UserDirs {
    /// Opens `base`, creating it (and its missing parents) `0755` when missing, whatever
    /// the umask. Refuses it when it is a symlink, not a directory, not owned by the user
    /// this process runs as (root, for the daemon) or writable by group or others; puts
    /// any other mode back to `0755`, with a warning.
    pub fn open(base: &Path) -> Result<UserDirs, BeneathError> {
        let refused = |reason: String| BeneathError::Refused {
            path: base.to_path_buf(),
            reason,
        };
        match std::fs::symlink_metadata(base) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                watchdog_types::fs::create_dir_all_mode(base, BASE_MODE)
                    .map_err(|e| io_err(base, e))?;
            }
            Err(e) => return Err(io_err(base, e)),
        }
        let fd = match rustix::fs::open(base, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // O_DIRECTORY|O_NOFOLLOW on a symlink fails ENOTDIR (or ELOOP): say which it was.
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let link = std::fs::symlink_metadata(base).is_ok_and(|m| m.is_symlink());
                return Err(refused(
                    if link {
                        "it is a symbolic link"
                    } else {
                        "it is not a directory"
                    }
                    .to_string(),
                ));
            }
            Err(e) => return Err(io_err(base, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err(base, e))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(refused(format!(
                "it is owned by UID {}, expected {me} (the daemon's own)",
                st.st_uid
            )));
        }
        if permissions(&st) & 0o022 != 0 {
            return Err(refused(format!(
                "its mode is {:04o}: group or others may write to it (expected 0755)",
                permissions(&st)
            )));
        }
        // `/sys/kernel` or `/proc/1` is root's and 0755 or 0555, but no user directory can
        // be made there: every run would go unwatched.
        let fs = rustix::fs::fstatfs(&fd).map_err(|e| io_err(base, e))?;
        if let Some(name) = watchdog_types::fs::kernel_filesystem(fs.f_type) {
            return Err(refused(format!(
                "it is on {name}, a kernel interface where no directory or file of users can be made"
            )));
        }
        if permissions(&st) != BASE_MODE {
            // Root's own directory with too few bits, e.g. made under `UMask=0077` by an
            // earlier version and kept by `RuntimeDirectoryPreserve=yes`: users could not
            // reach their files through it. Said once it is done, not before.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(BASE_MODE)).map_err(|e| io_err(base, e))?;
            tracing::warn!(
                "{} had mode {:04o}: made it 0755 so each user reaches their own directory in it",
                base.display(),
                permissions(&st)
            );
        }
        warn_unreachable_parent(base);
        Ok(UserDirs {
            path: base.to_path_buf(),
            fd,
        })
    }

    /// The base's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens (creating it when missing) the directory of user `uid`: `base/UID`, mode
    /// `0700`, owned `uid:gid`. See the module documentation for what is refused.
    pub fn for_user(&self, uid: u32, gid: u32) -> Result<UserDir, BeneathError> {
        let name = uid.to_string();
        let path = self.path.join(&name);
        let refused = |reason: String| BeneathError::Refused {
            path: path.clone(),
            reason,
        };
        let mut created = false;
        let fd = loop {
            match rustix::fs::mkdirat(&self.fd, &name, Mode::from_raw_mode(0o700)) {
                Ok(()) => created = true,
                Err(Errno::EXIST) => {}
                Err(e) => return Err(io_err(&path, e)),
            }
            match rustix::fs::openat(&self.fd, &name, dir_flags(), Mode::empty()) {
                Ok(fd) => break fd,
                // A symlink or a file: only root writes in the base, so it is a leftover
                // of ours or an administrator's mistake. Unlink it (never followed) and retry.
                Err(Errno::LOOP | Errno::NOTDIR) if !created => {
                    tracing::warn!(
                        "{} is not a directory: replacing it with the user's directory",
                        path.display()
                    );
                    rustix::fs::unlinkat(&self.fd, &name, AtFlags::empty())
                        .map_err(|e| io_err(&path, e))?;
                }
                Err(e) => return Err(io_err(&path, e)),
            }
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err(&path, e))?;
        if !created && st.st_uid != uid {
            return Err(refused(format!(
                "it is owned by UID {}, not by UID {uid} whose directory it is (remove it)",
                st.st_uid
            )));
        }
        if st.st_uid != uid || st.st_gid != gid {
            rustix::fs::fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(|e| io_err(&path, e))?;
        }
        if permissions(&st) != 0o700 {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(|e| io_err(&path, e))?;
        }
        Ok(UserDir { path, fd, uid, gid })
    }
}

/// One user's directory, open: everything in it is reached through this descriptor.
#[derive(Debug)]
pub struct UserDir {
    path: PathBuf,
    fd: OwnedFd,
    uid: u32,
    gid: u32,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// `name` as a single path component, or the error naming it.
fn component(name: &str) -> Result<&str, BeneathError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(BeneathError::Name {
            name: name.to_string(),
        });
    }
    Ok(name)
}

fn invalid_name(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        BeneathError::Name {
            name: name.to_string(),
        },
    )
}

impl UserDir {
    /// The directory's path (for messages and for the `WATCHDOG_REQUEST_FILE` a hook gets;
    /// never opened by path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The UID owning it.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The GID it belongs to.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// The path of `name` in it (for messages).
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Replaces `name` with `bytes` atomically: a `0600` temp file created
    /// `O_CREAT|O_EXCL|O_NOFOLLOW`, given to the user, renamed over `name`. Not fsynced
    /// (the files matter only while the run lives).
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), BeneathError> {
        let name = component(name)?;
        let dest = self.path_of(name);
        let tmp = format!(
            ".{name}.tmp.{}.{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let flags =
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, &tmp, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| io_err(&self.path_of(&tmp), e))?;
        let written = (|| -> io::Result<()> {
            rustix::fs::fchown(
                &fd,
                Some(Uid::from_raw(self.uid)),
                Some(Gid::from_raw(self.gid)),
            )?;
            // The umask may have taken the owner's bits; the user must read it.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
            File::from(fd).write_all(bytes)?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
            Ok(())
        })();
        written.map_err(|e| {
            // The user may have renamed it already; whatever is there under the temp name
            // now is removed (unlink never follows).
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            io_err(&dest, e)
        })
    }

    /// Reads `name`: `Ok(None)` when it does not exist; an error for a symlink (not
    /// followed), anything but a regular file, a file not owned by the user, or one
    /// larger than `cap` bytes. Reads at most `cap` bytes.
    pub fn read_capped(&self, name: &str, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let name = component(name).map_err(|_| invalid_name(name))?;
        let opened = rustix::fs::openat(&self.fd, name, read_flags(), Mode::empty());
        read_opened(opened, cap, Some(self.uid), &self.path_of(name))
    }

    /// The status of `name`, not following a symlink; `None` when it is missing.
    pub fn stat(&self, name: &str) -> io::Result<Option<Stat>> {
        let name = component(name).map_err(|_| invalid_name(name))?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The directory's own status (`fstat` of the kept descriptor: nothing resolved).
    pub fn stat_self(&self) -> io::Result<Stat> {
        Ok(rustix::fs::fstat(&self.fd)?)
    }

    /// Renames `from` to `to` in it (a symlink itself, never what it points to; whatever
    /// `to` was is replaced); `Ok(false)` when `from` is missing.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<bool> {
        let from = component(from).map_err(|_| invalid_name(from))?;
        let to = component(to).map_err(|_| invalid_name(to))?;
        match rustix::fs::renameat(&self.fd, from, &self.fd, to) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes `name` (a symlink itself, never what it points to); missing is fine.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let name = component(name).map_err(|_| invalid_name(name))?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Reads an open file that must be a regular file (owned by `owner`, when given) of at
/// most `cap` bytes. `path` is for messages only.
pub(crate) fn read_regular_capped(
    fd: impl AsFd + Into<OwnedFd>,
    cap: u64,
    owner: Option<u32>,
    path: &Path,
) -> io::Result<Vec<u8>> {
    let st = rustix::fs::fstat(&fd)?;
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    if file_type(&st) != FileType::RegularFile {
        return Err(bad("not a regular file, not read".to_string()));
    }
    if let Some(uid) = owner
        && st.st_uid != uid
    {
        return Err(bad(format!(
            "owned by UID {}, not by UID {uid}: not read",
            st.st_uid
        )));
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > cap {
        return Err(bad(format!("{size} bytes, more than the {cap} read")));
    }
    let mut bytes = Vec::new();
    File::from(fd.into()).take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens `path` without following a symlink at its end and reads it as
/// [`UserDir::read_capped`] does (without the owner check): `Ok(None)` when it is missing.
pub fn read_path_capped(path: &Path, cap: u64) -> io::Result<Option<Vec<u8>>> {
    read_opened(
        rustix::fs::open(path, read_flags(), Mode::empty()),
        cap,
        None,
        path,
    )
}

/// How a file a user wrote is opened: never through a symlink; `O_NONBLOCK` so a FIFO
/// does not block the open; `O_NOCTTY` so a terminal is not adopted.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// The result of opening with [`read_flags`], read as [`read_regular_capped`] does:
/// `Ok(None)` when missing, an error naming `path` for a symlink.
fn read_opened(
    opened: rustix::io::Result<OwnedFd>,
    cap: u64,
    owner: Option<u32>,
    path: &Path,
) -> io::Result<Option<Vec<u8>>> {
    match opened {
        Ok(fd) => read_regular_capped(fd, cap, owner, path).map(Some),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: a symbolic link, not read", path.display()),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Whether `name` is a file name [`UserDir`] accepts (one path component).
pub fn is_component(name: &str) -> bool {
    component(name).is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn me() -> (u32, u32) {
        (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )
    }

    fn base() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("run/watchdog/users");
        (dir, base)
    }

    #[test]
    fn open_creates_the_base_0755() {
        let (_dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let m = std::fs::symlink_metadata(dirs.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        assert_eq!(m.uid(), me().0);
        // Opening it again is fine.
        UserDirs::open(&base).unwrap();
    }

    #[test]
    fn open_refuses_a_symlink_a_file_and_an_open_mode() {
        let (dir, base) = base();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(base.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&real, &base).unwrap();
        let err = UserDirs::open(&base).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");

        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let err = UserDirs::open(&file).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = UserDirs::open(&open).unwrap_err();
        assert!(err.to_string().contains("0777"), "{err}");
    }

    #[test]
    fn for_user_creates_0700_and_reopens() {
        let (_dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = me();
        let d = dirs.for_user(uid, gid).unwrap();
        assert_eq!(d.path(), base.join(uid.to_string()));
        let m = std::fs::symlink_metadata(d.path()).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
        assert_eq!((m.uid(), m.gid()), (uid, gid));
        // A user who opened it up gets it closed again.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let d2 = dirs.for_user(uid, gid).unwrap();
        let m = std::fs::symlink_metadata(d2.path()).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    }

    /// A symlink in the base where a user's directory belongs (only root can put one
    /// there) is replaced by a real directory; its target is left alone.
    #[test]
    fn for_user_replaces_a_symlink_without_following_it() {
        let (dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = me();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join(uid.to_string())).unwrap();
        let d = dirs.for_user(uid, gid).unwrap();
        assert!(
            std::fs::symlink_metadata(d.path())
                .unwrap()
                .file_type()
                .is_dir()
        );
        d.write_atomic("x", b"y").unwrap();
        assert!(!elsewhere.join("x").exists());
        assert_eq!(
            std::fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn write_read_remove_round_trip() {
        let (_dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = me();
        let d = dirs.for_user(uid, gid).unwrap();
        assert_eq!(d.read_capped("a.json", 100).unwrap(), None);
        d.write_atomic("a.json", b"{\"seq\":1}").unwrap();
        d.write_atomic("a.json", b"{\"seq\":2}").unwrap();
        assert_eq!(
            d.read_capped("a.json", 100).unwrap().as_deref(),
            Some(&b"{\"seq\":2}"[..])
        );
        let m = std::fs::symlink_metadata(d.path_of("a.json")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!((m.uid(), m.gid()), (uid, gid));
        // No temp file left behind.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.json")]);
        // Over the cap: refused, not truncated.
        let err = d.read_capped("a.json", 4).unwrap_err();
        assert!(err.to_string().contains("more than the 4"), "{err}");
        // Renamed within it (what the watchdog does to take a step-report file whole).
        assert!(d.rename("a.json", "a.json.taking").unwrap());
        assert!(!d.rename("a.json", "a.json.taking").unwrap(), "missing");
        assert_eq!(
            d.read_capped("a.json.taking", 100).unwrap().as_deref(),
            Some(&b"{\"seq\":2}"[..])
        );
        d.rename("a.json.taking", "a.json").unwrap();
        d.remove("a.json").unwrap();
        d.remove("a.json").unwrap();
        assert_eq!(d.read_capped("a.json", 100).unwrap(), None);
    }

    #[test]
    fn names_must_be_one_component() {
        let (_dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = me();
        let d = dirs.for_user(uid, gid).unwrap();
        for bad in ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\0b"] {
            let err = d.write_atomic(bad, b"x").unwrap_err();
            assert!(matches!(err, BeneathError::Name { .. }), "{bad:?}: {err}");
            assert!(d.read_capped(bad, 10).is_err(), "{bad:?}");
            assert!(d.remove(bad).is_err(), "{bad:?}");
            assert!(
                d.rename("x", bad).is_err() && d.rename(bad, "x").is_err(),
                "{bad:?}"
            );
            assert!(!is_component(bad), "{bad:?}");
        }
        assert!(is_component("123.request.json"));
    }

    /// A symlink the user planted at the destination is replaced, never written through;
    /// one at a name root reads is refused; a FIFO does not block the read.
    #[test]
    fn planted_symlinks_and_fifos_do_not_steer_root() {
        let (dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = me();
        let d = dirs.for_user(uid, gid).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.path_of("req.json")).unwrap();
        d.write_atomic("req.json", b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(
            std::fs::symlink_metadata(d.path_of("req.json"))
                .unwrap()
                .is_file()
        );

        std::os::unix::fs::symlink(&victim, d.path_of("req.json.ack")).unwrap();
        let err = d.read_capped("req.json.ack", 100).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        d.remove("req.json.ack").unwrap();
        assert!(victim.exists());

        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            d.path_of("fifo"),
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let err = d.read_capped("fifo", 100).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        // A directory at the destination makes the write fail, cleanly.
        std::fs::create_dir(d.path_of("dir")).unwrap();
        assert!(d.write_atomic("dir", b"x").is_err());
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn read_path_capped_refuses_what_read_capped_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert_eq!(read_path_capped(&p, 10).unwrap(), None);
        std::fs::write(&p, "12345").unwrap();
        assert_eq!(read_path_capped(&p, 10).unwrap().unwrap(), b"12345");
        assert!(read_path_capped(&p, 4).is_err());
        let l = dir.path().join("l");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(read_path_capped(&l, 10).is_err());
        assert!(read_path_capped(dir.path(), 10).is_err());
    }

    /// As root, for another user: the directory and the files are that user's; a
    /// directory of someone else's under their UID is refused; a file in it that the user
    /// does not own (a hard link to one of root's) is not read.
    #[test]
    fn as_root_files_belong_to_the_user_and_only_theirs_are_read() {
        if !watchdog_testsupport::require(
            watchdog_testsupport::is_root(),
            "root (to give files to another user)",
        ) {
            return;
        }
        let (_dir, base) = base();
        let dirs = UserDirs::open(&base).unwrap();
        let (uid, gid) = (65534, 65534);
        let d = dirs.for_user(uid, gid).unwrap();
        d.write_atomic("r.json", b"{}").unwrap();
        for p in [d.path().to_path_buf(), d.path_of("r.json")] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", p.display());
        }
        assert_eq!(d.read_capped("r.json", 10).unwrap().unwrap(), b"{}");

        let secret = base.parent().unwrap().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        std::fs::hard_link(&secret, d.path_of("r.json.ack")).unwrap();
        let err = d.read_capped("r.json.ack", 100).unwrap_err();
        assert!(err.to_string().contains("owned by UID 0"), "{err}");

        // UID 65533's name taken by a directory of 65534's: refused, left alone.
        std::fs::create_dir(base.join("65533")).unwrap();
        std::os::unix::fs::chown(base.join("65533"), Some(65534), Some(65534)).unwrap();
        let err = dirs.for_user(65533, 65533).unwrap_err();
        assert!(err.to_string().contains("owned by UID 65534"), "{err}");
        assert_eq!(std::fs::metadata(base.join("65533")).unwrap().uid(), 65534);

        // A base not owned by root is refused.
        std::os::unix::fs::chown(&base, Some(65534), None).unwrap();
        let err = UserDirs::open(&base).unwrap_err();
        assert!(err.to_string().contains("owned by UID 65534"), "{err}");
    }
}
