//! `watchdog-procfs`: the one reader of /proc, a typed root and pure parsers of its files.
//!
//! Every part of the watchdog that looks at processes (the sampler's tree and cgroup
//! sources, the alerter's signal decision, the status server's registration check, the
//! service's discovery, the target's facts, the GPU's namespace mapping) reads `/proc`
//! through a [`ProcRoot`]: a typed root directory, `/proc` on a real host and a temp tree
//! of recorded files in tests, built once from the settings and passed down. Parsing is
//! pure and separate from reading: each file has one parser over bytes ([`status`],
//! [`stat`], [`cgroup`], [`mountinfo`], [`cmdline`]), tested against text recorded from a
//! real `/proc` (`fixtures/`) and hostile inputs. The parsers the sampler calls on every
//! tick borrow from the caller's buffer and never allocate; the convenience readers on
//! [`ProcRoot`] allocate and are for the cold paths (attaching, alerting, registering).
//!
//! The roots themselves are declared once, in [`roots`]: the host's `/proc`,
//! `/sys/fs/cgroup` and `/sys/class/dmi/id`, or a recorded tree's (`WATCHDOG_ROOT`). The
//! hot path stays one `pread`: the roots hand out [`KeptOpenFile`]s ([`kept`]), opened
//! once and re-read at offset 0.
//!
//! The kernel's description of every file read here:
//! <https://docs.kernel.org/filesystems/proc.html> and `proc(5)`.

#![deny(missing_docs)]

pub mod cgroup;
pub mod cmdline;
pub mod kept;
pub mod mountinfo;
pub mod parse;
pub mod roots;
pub mod stat;
pub mod status;

use std::fs;
use std::io::{self, Read as _};
use std::ops::Deref;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

pub use cgroup::{CgroupLine, ProcCgroup, cgroup_lines, parse_proc_cgroup};
pub use cmdline::{COMMAND_MAX_BYTES, command_line, parse_environ};
pub use kept::{KeptOpenFile, read_error};
pub use mountinfo::{Mount, mount_of, parse_mountinfo};
pub use parse::{key_value_lines, parse_u32, parse_u64};
pub use roots::{KernelRoots, dmi_string, read_small};
pub use stat::{
    PF_EXITING, PF_KTHREAD, ProcStat, clock_ticks_per_second, fields_after_comm, page_size,
    parse_children, parse_loadavg_change_key, parse_stat, parse_statm_resident_pages, parse_uptime,
    start_time_from,
};
pub use status::{ProcStatus, Uids, parse_status};

/// Most bytes read of one `/proc/PID/status` by [`ProcRoot::status`]: a few KiB in practice;
/// `Groups:` grows with the supplementary groups (at most 65,536 of 11 characters).
pub const STATUS_MAX_BYTES: u64 = 1 << 20;

/// What went wrong reading a file under the proc root; the path is in the message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file was read but does not say what it should.
    #[error("unexpected contents in {}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: String,
    },
}

impl Error {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Read { path, .. } | Error::Parse { path, .. } => path,
        }
    }

    /// Whether the process is gone: its directory or file does not exist (`ENOENT`), or it
    /// exited while a descriptor of it was open (`ESRCH`).
    pub fn is_gone(&self) -> bool {
        match self {
            Error::Read { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
                    || source.raw_os_error() == Some(libc::ESRCH)
            }
            Error::Parse { .. } => false,
        }
    }
}

/// A procfs mount: `/proc` by default, a directory of recorded files in tests.
///
/// Dereferences to its [`Path`], so code that joins a file name onto it keeps working; the
/// methods are the readers, one per file, each naming the file in its error. A recorded
/// one ([`ProcRoot::recorded`], a `WATCHDOG_ROOT` tree) holds PIDs that name no process
/// of this machine: its users must not signal them or open pidfds for them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcRoot {
    path: PathBuf,
    recorded: bool,
}

impl Default for ProcRoot {
    /// The host's `/proc`.
    fn default() -> ProcRoot {
        KernelRoots::host().proc().clone()
    }
}

/// How often [`ProcRoot::exit_fd`] looks whether a recorded process's directory is gone.
pub const RECORDED_EXIT_POLL: std::time::Duration = std::time::Duration::from_millis(10);

impl Deref for ProcRoot {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ProcRoot {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl From<PathBuf> for ProcRoot {
    fn from(path: PathBuf) -> ProcRoot {
        ProcRoot::new(path)
    }
}

impl From<&Path> for ProcRoot {
    fn from(path: &Path) -> ProcRoot {
        ProcRoot::new(path)
    }
}

impl ProcRoot {
    /// The procfs mounted (or recorded) at `path`.
    pub fn new(path: impl Into<PathBuf>) -> ProcRoot {
        ProcRoot {
            path: path.into(),
            recorded: false,
        }
    }

    /// A recorded procfs at `path` (a `WATCHDOG_ROOT` tree's `proc`): its processes are
    /// alive while their directories exist, and are no processes of this machine.
    pub fn recorded(path: impl Into<PathBuf>) -> ProcRoot {
        ProcRoot {
            path: path.into(),
            recorded: true,
        }
    }

    /// Whether this is a recorded tree, not the kernel's procfs.
    pub fn is_recorded(&self) -> bool {
        self.recorded
    }

    /// Opens `ROOT/NAME` (`meminfo`, `loadavg`) to be re-read every tick with `pread`.
    pub fn keep_open(&self, name: &str, capacity: usize) -> Result<KeptOpenFile, Error> {
        KeptOpenFile::with_capacity(self.file(name), capacity)
    }

    /// Opens `ROOT/PID/NAME` (`statm`, `cgroup`, `stat`) to be re-read with `pread`: the
    /// descriptor stays bound to that process (see [`kept`]).
    pub fn keep_open_pid(
        &self,
        pid: u32,
        name: &str,
        capacity: usize,
    ) -> Result<KeptOpenFile, Error> {
        KeptOpenFile::with_capacity(self.pid_file(pid, name), capacity)
    }

    /// Opens `ROOT/PID/task`, the directory of the process's threads (listed with
    /// `getdents` to find their `children`), and returns it with its path for messages.
    pub fn open_task_dir(&self, pid: u32) -> Result<(OwnedFd, PathBuf), Error> {
        let path = self.pid_file(pid, "task");
        match open_dir(&path) {
            Ok(fd) => Ok((fd, path)),
            Err(e) => Err(read_error(&path, e)),
        }
    }

    /// The bytes of a host-wide file `ROOT/NAME` (`sys/kernel/osrelease`, `cpuinfo`).
    pub fn read_host(&self, name: &str) -> Result<Vec<u8>, Error> {
        read_file(&self.file(name))
    }

    /// The effective UID and GID of `pid`: the owner of `ROOT/PID`.
    pub fn owner(&self, pid: u32) -> Result<(u32, u32), Error> {
        use std::os::unix::fs::MetadataExt as _;
        let path = self.pid_dir(pid);
        match fs::metadata(&path) {
            Ok(m) => Ok((m.uid(), m.gid())),
            Err(source) => Err(Error::Read { path, source }),
        }
    }

    /// Whether `ROOT/PID` exists: in a recorded tree, whether the process is alive.
    pub fn has_pid(&self, pid: u32) -> bool {
        self.pid_dir(pid).is_dir()
    }

    /// A descriptor that becomes readable (`POLLIN`) once `ROOT/PID` is gone: a recorded
    /// process's stand-in for a pidfd, for the wait sets a pidfd sits in. A thread looks
    /// every [`RECORDED_EXIT_POLL`] and ends when the directory does.
    pub fn exit_fd(&self, pid: u32) -> io::Result<OwnedFd> {
        use std::io::Write as _;
        let (reader, mut writer) = io::pipe()?;
        let root = self.clone();
        std::thread::Builder::new()
            .name(format!("exit-of-{pid}"))
            .spawn(move || {
                while root.has_pid(pid) {
                    std::thread::sleep(RECORDED_EXIT_POLL);
                }
                // One byte: the read end stays readable for every later poll (the write
                // end then closes with the thread, which a poll reports as POLLHUP too).
                let _ = writer.write_all(b"x");
            })?;
        Ok(OwnedFd::from(reader))
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ROOT/NAME`: a host-wide file (`loadavg`, `meminfo`, `self/mountinfo`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// `ROOT/PID`.
    pub fn pid_dir(&self, pid: u32) -> PathBuf {
        let mut p = self.path.clone();
        p.push(pid.to_string());
        p
    }

    /// `ROOT/PID/NAME`.
    pub fn pid_file(&self, pid: u32, name: &str) -> PathBuf {
        let mut p = self.pid_dir(pid);
        p.push(name);
        p
    }

    /// The bytes of `ROOT/PID/NAME`.
    pub fn read(&self, pid: u32, name: &str) -> Result<Vec<u8>, Error> {
        read_file(&self.pid_file(pid, name))
    }

    /// The parsed `/proc/PID/status`.
    pub fn status(&self, pid: u32) -> Result<ProcStatus, Error> {
        let path = self.pid_file(pid, "status");
        let mut text = Vec::new();
        fs::File::open(&path)
            .and_then(|f| f.take(STATUS_MAX_BYTES).read_to_end(&mut text))
            .map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
        Ok(parse_status(&text))
    }

    /// The UIDs of `pid` (`Uid:` of its status); `.effective` is the one that matters for
    /// permissions.
    pub fn uids(&self, pid: u32) -> Result<Uids, Error> {
        self.status(pid)?.uids.ok_or_else(|| Error::Parse {
            path: self.pid_file(pid, "status"),
            what: "no 'Uid:' line with four numbers".into(),
        })
    }

    /// Reads `/proc/PID/stat` into `buf` (reused: no allocation once it is large enough)
    /// and parses it.
    pub fn stat_into<'b>(&self, pid: u32, buf: &'b mut Vec<u8>) -> Result<ProcStat<'b>, Error> {
        let path = self.pid_file(pid, "stat");
        buf.clear();
        fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(buf))
            .map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
        parse_stat(buf).ok_or_else(|| Error::Parse {
            path,
            what: "expected 'PID (comm) STATE PPID ...' with at least 22 fields".into(),
        })
    }

    /// Whether `pid` exists and has not exited (a zombie, `Z`, or dead, `X`, only waits
    /// for its parent to reap it).
    pub fn is_alive(&self, pid: u32) -> bool {
        let mut buf = Vec::new();
        self.stat_into(pid, &mut buf).is_ok_and(|s| !s.is_exited())
    }

    /// When `pid` started: `starttime` of its `stat` (clock ticks after boot) against the
    /// uptime in `ROOT/uptime`, read beside the wall clock. Precise to about 20 ms (both
    /// count hundredths); `btime` of `/proc/stat` counts whole seconds and made it up to a
    /// second early.
    pub fn start_time(&self, pid: u32) -> Result<SystemTime, Error> {
        let mut buf = Vec::new();
        let starttime_ticks = self.stat_into(pid, &mut buf)?.starttime_ticks;
        let uptime_path = self.file("uptime");
        let uptime = parse_uptime(&read_file(&uptime_path)?).ok_or_else(|| Error::Parse {
            path: uptime_path,
            what: "expected seconds since boot, such as '12345.67 23456.78'".into(),
        })?;
        Ok(start_time_from(
            SystemTime::now(),
            uptime,
            starttime_ticks,
            clock_ticks_per_second(),
        ))
    }

    /// The text of `/proc/PID/cgroup`.
    pub fn cgroup_text(&self, pid: u32) -> Result<String, Error> {
        read_to_string(&self.pid_file(pid, "cgroup"))
    }

    /// What `/proc/PID/cgroup` says about memory.
    pub fn cgroup(&self, pid: u32) -> Result<ProcCgroup, Error> {
        Ok(parse_proc_cgroup(&self.cgroup_text(pid)?))
    }

    /// The mounts as this process (the watchdog) sees them: `ROOT/self/mountinfo`.
    pub fn own_mountinfo(&self) -> Result<Vec<Mount>, Error> {
        Ok(parse_mountinfo(&self.own_mountinfo_text()?))
    }

    /// The text of `ROOT/self/mountinfo`.
    pub fn own_mountinfo_text(&self) -> Result<String, Error> {
        read_to_string(&self.file("self/mountinfo"))
    }

    /// The command line of `pid` ([`command_line`]); empty for a kernel thread or a zombie.
    pub fn cmdline(&self, pid: u32) -> Result<String, Error> {
        Ok(command_line(&self.read(pid, "cmdline")?))
    }

    /// The text of `/proc/PID/comm`, the command name as the process set it, with the
    /// kernel's newline (an error when it is not UTF-8).
    pub fn comm(&self, pid: u32) -> Result<String, Error> {
        read_to_string(&self.pid_file(pid, "comm"))
    }

    /// The environment `pid` started with (changes it made later with `setenv` are not
    /// visible). Needs the right to ptrace-read the process (same user, or root).
    pub fn environ(&self, pid: u32) -> Result<Vec<(String, String)>, Error> {
        Ok(parse_environ(&self.read(pid, "environ")?))
    }

    /// The working directory of `pid` (the `cwd` link).
    pub fn cwd(&self, pid: u32) -> Result<PathBuf, Error> {
        let path = self.pid_file(pid, "cwd");
        fs::read_link(&path).map_err(|source| Error::Read { path, source })
    }

    /// The working directory of `pid` if it still exists: `/proc/PID/cwd` names a deleted
    /// directory as `PATH (deleted)`, and that name may belong to another directory (or to
    /// none); only a path that is the very directory the process is in is returned.
    pub fn live_cwd(&self, pid: u32) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt as _;
        let link = self.pid_file(pid, "cwd");
        let path = fs::read_link(&link).ok()?;
        let real = fs::metadata(&link).ok()?;
        let named = fs::metadata(&path).ok()?;
        (named.is_dir() && real.dev() == named.dev() && real.ino() == named.ino()).then_some(path)
    }

    /// The namespace `pid` is in (`ns/KIND`, such as `ns/pid` or `ns/mnt`), as the link's
    /// target (`pid:[4026531836]`): equal for two processes in one namespace.
    pub fn namespace(&self, pid: u32, kind: &str) -> io::Result<PathBuf> {
        fs::read_link(self.pid_file(pid, &format!("ns/{kind}")))
    }

    /// The namespace of this process (`self/ns/KIND`).
    pub fn own_namespace(&self, kind: &str) -> io::Result<PathBuf> {
        fs::read_link(self.file(&format!("self/ns/{kind}")))
    }

    /// Opens the root directory itself, to list it or to read files under it with
    /// [`read_capped_at`].
    pub fn open_dir(&self) -> Result<OwnedFd, Errno> {
        open_dir(&self.path)
    }

    /// Opens `ROOT/PID`: files read through the descriptor ([`read_capped_at`]) are all of
    /// one process, even if its PID is reused meanwhile (they then fail with `ESRCH`).
    pub fn open_pid_dir(&self, pid: u32) -> Result<OwnedFd, Errno> {
        open_dir(&self.pid_dir(pid))
    }
}

/// Opens a directory read-only, close-on-exec.
fn open_dir(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Reads file `name` under directory `dir` into `buf`, at most `cap` bytes; true when the
/// file was longer (and `buf` holds its first `cap` bytes).
pub fn read_capped_at(
    dir: BorrowedFd<'_>,
    name: &str,
    cap: usize,
    buf: &mut Vec<u8>,
) -> Result<bool, Errno> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    buf.clear();
    fs::File::from(fd)
        .take(cap as u64 + 1)
        .read_to_end(buf)
        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    let truncated = buf.len() > cap;
    buf.truncate(cap);
    Ok(truncated)
}

fn read_file(path: &Path) -> Result<Vec<u8>, Error> {
    fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_to_string(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A proc root holding the recorded `sleep` as PID 21911 and an `uptime`.
    fn recorded_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("21911");
        fs::create_dir(&pid).unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sleep");
        for f in fs::read_dir(&fixtures).unwrap() {
            let f = f.unwrap();
            fs::copy(f.path(), pid.join(f.file_name())).unwrap();
        }
        fs::create_dir(dir.path().join("self")).unwrap();
        fs::copy(
            fixtures.join("mountinfo"),
            dir.path().join("self/mountinfo"),
        )
        .unwrap();
        // 20 s after the recorded sleep started (starttime 1903435 ticks at 100 Hz).
        fs::write(dir.path().join("uptime"), "19054.35 15524.75\n").unwrap();
        dir
    }

    #[test]
    fn readers_read_only_their_root() {
        let dir = recorded_root();
        let root = ProcRoot::new(dir.path());
        assert_eq!(root.status(21911).unwrap().ppid, Some(21910));
        assert_eq!(root.uids(21911).unwrap().real, 0);
        assert_eq!(root.cmdline(21911).unwrap(), "sleep 1000");
        assert_eq!(root.comm(21911).unwrap(), "sleep\n");
        assert_eq!(root.environ(21911).unwrap().len(), 3);
        assert!(root.cgroup(21911).unwrap().v1_memory.is_some());
        assert!(!root.own_mountinfo().unwrap().is_empty());
        assert!(root.is_alive(21911));
        if clock_ticks_per_second() == 100 {
            let age = SystemTime::now()
                .duration_since(root.start_time(21911).unwrap())
                .unwrap();
            assert!(age.abs_diff(Duration::from_millis(20_000)) < Duration::from_secs(2));
        }
        // Our own PID is not in the fixture tree, whatever the host's /proc holds.
        let me = std::process::id();
        let err = root.status(me).unwrap_err();
        assert!(err.is_gone(), "{err}");
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{err}"
        );
        assert!(!root.is_alive(me));
    }

    #[test]
    fn errors_name_the_file_and_what_was_expected() {
        let dir = recorded_root();
        let root = ProcRoot::new(dir.path());
        fs::write(dir.path().join("21911/stat"), "garbage").unwrap();
        let err = root.start_time(21911).unwrap_err();
        assert!(!err.is_gone());
        assert_eq!(
            err.to_string(),
            format!(
                "unexpected contents in {}: expected 'PID (comm) STATE PPID ...' with at least 22 fields",
                dir.path().join("21911/stat").display()
            )
        );
        fs::write(dir.path().join("21911/status"), "Name:\tx\n").unwrap();
        assert!(
            root.uids(21911)
                .unwrap_err()
                .to_string()
                .contains("no 'Uid:' line")
        );
    }

    #[test]
    fn the_host_proc_describes_this_process() {
        let root = ProcRoot::default();
        let me = std::process::id();
        assert!(root.is_alive(me));
        assert!(!root.is_alive(u32::MAX - 1));
        assert_eq!(root.cwd(me).unwrap(), std::env::current_dir().unwrap());
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(root.uids(me).unwrap().effective, euid);
        assert_eq!(root.status(me).unwrap().tgid, Some(me));
        let age = SystemTime::now()
            .duration_since(root.start_time(me).unwrap())
            .unwrap_or_default();
        assert!(age < Duration::from_secs(600), "{age:?}");
        assert!(root.environ(me).unwrap().iter().any(|(k, _)| k == "PATH"));
        // SAFETY: getegid has no preconditions.
        assert_eq!(root.owner(me).unwrap(), (euid, unsafe { libc::getegid() }));
        assert!(root.owner(u32::MAX - 1).unwrap_err().is_gone());
        assert_eq!(
            root.namespace(me, "pid").unwrap(),
            root.own_namespace("pid").unwrap()
        );
        let dir = root.open_pid_dir(me).unwrap();
        let mut buf = Vec::new();
        assert!(!read_capped_at(std::os::fd::AsFd::as_fd(&dir), "stat", 4096, &mut buf).unwrap());
        assert_eq!(parse_stat(&buf).unwrap().pid, me);
        assert!(read_capped_at(std::os::fd::AsFd::as_fd(&dir), "stat", 3, &mut buf).unwrap());
        assert_eq!(buf.len(), 3);
    }
}
