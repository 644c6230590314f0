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

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
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

/// The kernel's pseudo-filesystems, by `statfs` magic (linux/magic.h): a file there is
/// an interface to the kernel, where a write is taken as a command, lost or refused, and
/// no directory of the watchdog's can be made. A new file on mqueue is a message queue,
/// and hugetlbfs files are only mapped: both take an open, then fail every write.
const KERNEL_FILESYSTEMS: &[(i64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2fs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpffs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0x6265_6570, "configfs"),
    (0x1980_0202, "mqueue"),
    (0x9584_58f6, "hugetlbfs"),
];

/// The name of the kernel pseudo-filesystem whose `statfs` magic is `f_type`, or None
/// for a filesystem that holds files (ext4, tmpfs, ...). `f_type` is an `i64` on x86_64
/// and a narrower integer on other targets.
pub fn kernel_filesystem(f_type: impl Into<i64>) -> Option<&'static str> {
    let f_type = f_type.into();
    KERNEL_FILESYSTEMS
        .iter()
        .find(|(magic, _)| *magic == f_type)
        .map(|(_, name)| *name)
}

/// Why a filesystem that reports no size cannot be watched: said by the config's check of
/// `disks` and by the sampler's disk source, each after its own `statvfs`.
pub const NO_SIZE: &str = "the filesystem reports no size (statvfs f_blocks is 0), as /proc and /sys do: there is nothing to run out of";

/// The directory a file path is in: its parent, or `.` for a bare file name.
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Longest file name Linux filesystems take, in bytes (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// The temporary name [`write_atomic`] writes before renaming it over `path`:
/// `.NAME.tmp.PID.N` beside it, with NAME cut so the whole stays within 255 bytes (a
/// 254-byte destination name still gets a temporary name the filesystem takes).
pub fn temp_path(path: &Path) -> Result<PathBuf, WriteError> {
    let name = path.file_name().ok_or_else(|| WriteError::NoFileName {
        path: path.to_path_buf(),
    })?;
    let suffix = format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let room = NAME_MAX - 1 - suffix.len();
    let bytes = name.as_encoded_bytes();
    let mut tmp_name = OsString::from(".");
    // A Unix file name is bytes: any prefix of one is a name.
    tmp_name.push(OsStr::from_bytes(&bytes[..bytes.len().min(room)]));
    tmp_name.push(suffix);
    Ok(parent_dir(path).join(tmp_name))
}

/// Creates and removes the temporary name a write of `path` would use (see
/// [`temp_path`]), so a start check proves the write can happen: the directory takes
/// new files and the name is not too long.
pub fn probe_write(path: &Path) -> Result<(), WriteError> {
    let tmp = temp_path(path)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(&tmp)
        .map_err(|source| WriteError::Write {
            path: tmp.clone(),
            source,
        })?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

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
    let tmp = temp_path(path)?;
    let dir = parent_dir(path);

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
/// left as they are; a symlink among the new ones' parents is followed as `mkdir` does;
/// `dir` being anything but a directory (or a symlink to one) is an error.
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
    if std::fs::metadata(dir)?.is_dir() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "it exists and is not a directory",
        ))
    }
}

/// A word for a file type that is not a regular file, for messages: `directory`, `FIFO`...
pub fn file_kind(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading when it is a regular file, without following a symlink or
/// blocking on a FIFO: for looking at what an output would replace.
pub fn open_plain(path: &Path) -> Option<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
}

/// How much of an input file [`read_input`] takes before refusing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// Most bytes in the file.
    pub max_bytes: u64,
    /// Most bytes in one line (its `\n` not counted), when lines are capped.
    pub max_line: Option<usize>,
}

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Looking at, opening or reading it failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// It is a FIFO, a device, a directory...: reading one could block forever or never end.
    #[error("it is a {kind}, not a regular file")]
    NotAFile {
        /// What it is (see [`file_kind`]).
        kind: &'static str,
    },
    /// It holds more than [`InputLimits::max_bytes`].
    #[error("it is larger than {}", size_words(*max_bytes))]
    TooLarge {
        /// The limit.
        max_bytes: u64,
    },
    /// A line is longer than [`InputLimits::max_line`].
    #[error("line {line} is longer than {}", size_words(*max_line as u64))]
    LineTooLong {
        /// 1-based line number.
        line: usize,
        /// The limit.
        max_line: usize,
    },
    /// The bytes are not UTF-8.
    #[error("not UTF-8 text (line {line})")]
    NotText {
        /// 1-based line of the first invalid byte.
        line: usize,
    },
}

/// `64 MiB`, `64 KiB`, or bytes.
fn size_words(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Reads the input file at `path` as UTF-8 text within `limits`: what `replay`, `report`,
/// `diff` and `--config` read. Anything but a regular file (after following symlinks) is
/// refused before it is opened, and the open is `O_NONBLOCK` and checked again with
/// `fstat`, so a FIFO or a device never blocks the watchdog or feeds it without end; a
/// file over the size cap is refused by its size, and one that grows while read stops
/// one byte past the cap.
pub fn read_input(path: &Path, limits: InputLimits) -> Result<String, ReadError> {
    let not_a_file = |m: &std::fs::Metadata| {
        (!m.is_file()).then(|| ReadError::NotAFile {
            kind: file_kind(m.file_type()),
        })
    };
    if let Some(e) = not_a_file(&std::fs::metadata(path)?) {
        return Err(e);
    }
    let file = OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO swapped in after the check opens at once (and is refused
        // below); on a regular file it changes nothing.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if let Some(e) = not_a_file(&meta) {
        return Err(e);
    }
    if meta.len() > limits.max_bytes {
        return Err(ReadError::TooLarge {
            max_bytes: limits.max_bytes,
        });
    }
    read_input_from(file, limits)
}

/// [`read_input`] from any reader (no file type or size to look at first).
pub fn read_input_from(reader: impl Read, limits: InputLimits) -> Result<String, ReadError> {
    use std::io::BufRead;
    let line_cap = limits.max_line.unwrap_or(usize::MAX);
    let mut reader = std::io::BufReader::with_capacity(
        line_cap.clamp(8 * 1024, 64 * 1024),
        reader.take(limits.max_bytes.saturating_add(1)),
    );
    let mut all = Vec::new();
    let mut line = 0usize;
    loop {
        line += 1;
        let n = (&mut reader)
            .take(line_cap.saturating_add(1) as u64)
            .read_until(b'\n', &mut all)?;
        if n == 0 {
            break;
        }
        if all.len() as u64 > limits.max_bytes {
            return Err(ReadError::TooLarge {
                max_bytes: limits.max_bytes,
            });
        }
        let content = if all.last() == Some(&b'\n') { n - 1 } else { n };
        if content > line_cap {
            return Err(ReadError::LineTooLong {
                line,
                max_line: line_cap,
            });
        }
    }
    String::from_utf8(all).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e
            .as_bytes()
            .get(..valid)
            .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
            + 1;
        ReadError::NotText { line }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn new_directories_get_their_mode_whatever_the_umask_and_a_file_in_the_way_is_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("watchdog-types-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // 0777 and 0701 are modes no usual umask (022, 077) leaves as they are: only the
        // fchmod gives them.
        for mode in [0o777, 0o701] {
            let leaf = dir.join(format!("{mode:o}/a/b"));
            create_dir_all_mode(&leaf, mode).unwrap();
            for d in [leaf.as_path(), leaf.parent().unwrap()] {
                let m = std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
                assert_eq!(m, mode, "{}", d.display());
            }
            // Existing ones are left alone.
            create_dir_all_mode(&leaf, 0o700).unwrap();
            let m = std::fs::metadata(&leaf).unwrap().permissions().mode() & 0o7777;
            assert_eq!(m, mode);
        }
        std::fs::write(dir.join("file"), "x").unwrap();
        assert!(create_dir_all_mode(&dir.join("file"), 0o755).is_err());
        assert!(create_dir_all_mode(&dir.join("file/sub"), 0o755).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

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

    const LIMITS: InputLimits = InputLimits {
        max_bytes: 1 << 20,
        max_line: Some(64 * 1024),
    };

    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("watchdog-types-in-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        for (path, kind) in [
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/urandom"), "character device"),
            (fifo.as_path(), "FIFO"),
            (dir.as_path(), "directory"),
        ] {
            let e = read_input(path, LIMITS).unwrap_err();
            assert_eq!(e.to_string(), format!("it is a {kind}, not a regular file"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn size_and_line_caps() {
        let fits = format!("a\n{}\nb", "x".repeat(64 * 1024));
        assert_eq!(read_input_from(fits.as_bytes(), LIMITS).unwrap(), fits);
        let crlf = format!("{}\r\n", "x".repeat(64 * 1024 - 1));
        assert_eq!(read_input_from(crlf.as_bytes(), LIMITS).unwrap(), crlf);
        let over = format!("a\nb\n{}\n", "x".repeat(64 * 1024 + 1));
        let e = read_input_from(over.as_bytes(), LIMITS).unwrap_err();
        assert_eq!(e.to_string(), "line 3 is longer than 64 KiB");
        let e = read_input_from(&b"a\nb\n\xff\n"[..], LIMITS).unwrap_err();
        assert!(matches!(e, ReadError::NotText { line: 3 }), "{e}");
        // Past the size cap: refused having read one byte more, whatever follows.
        let endless = std::io::repeat(b'\n');
        let e = read_input_from(endless, LIMITS).unwrap_err();
        assert_eq!(e.to_string(), "it is larger than 1 MiB");
        let big = "1\n".repeat(600 * 1024);
        let e = read_input_from(big.as_bytes(), LIMITS).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        let unlined = InputLimits {
            max_bytes: 10,
            max_line: None,
        };
        assert_eq!(
            read_input_from(&b"0123456789"[..], unlined).unwrap(),
            "0123456789"
        );
        assert!(read_input_from(&b"0123456789a"[..], unlined).is_err());
    }

    #[test]
    fn a_254_byte_name_gets_a_temporary_name_the_filesystem_takes() {
        let dir = std::env::temp_dir().join(format!("watchdog-types-long-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r".repeat(254));
        let tmp = temp_path(&p).unwrap();
        assert!(tmp.file_name().unwrap().len() <= 255, "{}", tmp.display());
        probe_write(&p).unwrap();
        write_atomic(&p, b"x").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
