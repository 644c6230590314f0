//! Writing the watchdog's files: one atomic replace for the request file, its
//! acknowledgment and the flight recording, and the directory a path is in.
//!
//! It lives in the types crate because every crate that writes a file needs it (the
//! alerter for the request file, the binary for recordings and output checks) and it
//! needs nothing but `std::fs` and `libc`'s open flags: no I/O crate. The write is a
//! temp file in the same directory created with `O_CREAT|O_EXCL|O_NOFOLLOW` (never
//! following a symlink, never reusing a file someone planted), then renamed over the
//! destination, so a reader sees the old file or the new one, whole. A symlink or
//! anything but a regular file at the destination is refused.
//!
//! Modes that must hold whatever the umask (the service's directories, a request file
//! given to another user) are set with `fchmod` on the open descriptor after creating:
//! the mode given to `mkdir`/`open` is only an upper bound the umask takes bits from.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What can go wrong replacing a file atomically.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The destination is a symlink; we refuse to write through or replace it.
    #[error("refusing to write {path}: it is a symbolic link (remove it or choose another path)")]
    Symlink {
        /// The destination.
        path: PathBuf,
    },
    /// The destination exists and is not a regular file.
    #[error("refusing to write {path}: it exists and is not a regular file")]
    NotAFile {
        /// The destination.
        path: PathBuf,
    },
    /// The path has no file name.
    #[error("invalid path {path}: expected a path to a file")]
    NoFileName {
        /// The destination.
        path: PathBuf,
    },
    /// Creating, writing or syncing the temp file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The temp file or destination.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Renaming the temp file over the destination failed.
    #[error("cannot rename {from} to {to}: {source}")]
    Rename {
        /// The temp file.
        from: PathBuf,
        /// The destination.
        to: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The directory a file path is in: its parent, or `.` for a bare file name.
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether a write must survive a crash of the machine (fsync) or only be seen whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Seen whole by readers (rename), without waiting for the disk: the request file,
    /// which matters only while the run lives and must not delay the signal (an fsync
    /// on ext4 costs milliseconds).
    Visible,
    /// Also on disk before returning (fsync of the file and its directory): recordings.
    Durable,
}

/// Atomic replace of `path` with `data`: temp file (O_EXCL|O_NOFOLLOW) + fsync + rename + fsync of the directory.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), WriteError> {
    write_atomic_with(path, data, Durability::Durable)
}

/// Atomic replace of `path` with `data`, fsynced or not as `durability` says.
pub fn write_atomic_with(
    path: &Path,
    data: &[u8],
    durability: Durability,
) -> Result<(), WriteError> {
    write_atomic_owned(path, data, durability, None)
}

/// The user a file is written for when the writer (root) is not that user: the file is
/// given to `uid:gid` with `fchown` and made `0600` with `fchmod`, whatever the umask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The user's ID.
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

/// [`write_atomic_with`], the file given to `owner` (mode `0600`) before it is renamed
/// into place; with `None` it is created `0644` less the umask, as the writer's own.
pub fn write_atomic_owned(
    path: &Path,
    data: &[u8],
    durability: Durability,
    owner: Option<Owner>,
) -> Result<(), WriteError> {
    let durable = durability == Durability::Durable;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(WriteError::Symlink {
                path: path.to_path_buf(),
            });
        }
        Ok(m) if !m.file_type().is_file() => {
            return Err(WriteError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        _ => {}
    }
    let name = path.file_name().ok_or_else(|| WriteError::NoFileName {
        path: path.to_path_buf(),
    })?;
    let dir = parent_dir(path);
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(&tmp_name);

    let write_err = |source| WriteError::Write {
        path: tmp.clone(),
        source,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true) // O_CREAT|O_EXCL: fails on any existing entry, symlinks included
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(&tmp)
        .map_err(write_err)?;
    let written = give(&f, owner)
        .and_then(|()| f.write_all(data))
        .and_then(|()| if durable { f.sync_all() } else { Ok(()) });
    drop(f);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(write_err(e));
    }
    if let Err(source) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(WriteError::Rename {
            from: tmp,
            to: path.to_path_buf(),
            source,
        });
    }
    // Make the rename itself durable; failure here does not undo the write, so it is not an error.
    if durable && let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Gives the open file `f` to `owner`, mode `0600` (nothing when `None`).
fn give(f: &File, owner: Option<Owner>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(owner) = owner else { return Ok(()) };
    std::os::unix::fs::fchown(f, Some(owner.uid), Some(owner.gid))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
}

/// Creates `dir` and its missing parents, each new one with exactly `mode` (set with
/// `fchmod` after `mkdir`, so the umask cannot take bits away). Existing directories are
/// left as they are; a symlink among the new ones' parents is followed as `mkdir` does.
pub fn create_dir_all_mode(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let missing: Vec<&Path> = dir
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .collect();
    for new in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(mode).create(new) {
            Ok(()) => {
                let d = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(new)?;
                d.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            // Made by someone else meanwhile: theirs, left alone.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_a_bare_name_is_the_current_directory() {
        assert_eq!(parent_dir(Path::new("rec.csv")), Path::new("."));
        assert_eq!(parent_dir(Path::new("/tmp/x/rec.csv")), Path::new("/tmp/x"));
    }

    #[test]
    fn replaces_whole_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("watchdog-types-fs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out");
        for (data, durability) in [
            (&b"one"[..], Durability::Durable),
            (b"two", Durability::Visible),
        ] {
            write_atomic_with(&p, data, durability).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), data);
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::os::unix::fs::symlink(&p, dir.join("link")).unwrap();
        let err = write_atomic(&dir.join("link"), b"x").unwrap_err();
        assert!(matches!(err, WriteError::Symlink { .. }), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
