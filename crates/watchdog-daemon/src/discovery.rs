//! Discovery: which processes appeared since the last look, and the facts the rules match on.
//!
//! Public API:
//! - [`Scanner::new`] (`/proc` or a fixture tree; the daemon's own subtree left out),
//!   [`Scanner::with_excluded`], and [`Scanner::scan`]: the processes not seen by earlier
//!   scans, parents before children, as [`ProcessFacts`].
//! - [`Scanner::facts`]: one process read again (when it registers, or enters the GPU set),
//!   and [`Scanner::inside_watched_tree`].
//! - [`judge`]: of one scan's processes, those a matcher takes, those below one it took (a
//!   launcher's workers are part of its run, not runs of their own) and those it does not
//!   take; [`topmost`]: the taken ones only.
//!
//! A process is identified by its PID and its start time (`starttime` of `/proc/PID/stat`, in
//! clock ticks after boot), so a reused PID is a new process. What it runs is recognised by
//! its image: its command name (`comm`) and the layout of its memory that `stat` shows
//! (`startcode`, `endcode`, `startstack`, `arg_start`, `arg_end`, `env_start`, `env_end`:
//! fields 26-28 and 48-51 of proc(5), <https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html>).
//! `exec` builds a new memory map, so the layout changes even when the name does not
//! (`python` execing `python`): with address-space randomisation (the default,
//! `kernel.randomize_va_space=2`) the stack moves at every `exec`, and without it the
//! arguments' span still moves unless the new command line and environment have the same
//! lengths as the old. A process whose image changed is returned again by the next scan, to
//! be judged on what it runs now: a process seen between `fork` and `exec` (its parent's
//! command line) is judged again once it ran `exec`. The kernel shows the layout only to a
//! reader allowed to ptrace-read the process (the daemon: root with `CAP_SYS_PTRACE`);
//! another reader sees zeros and only a change of name.
//!
//! Each scan lists `/proc` (`getdents64` on a kept-open descriptor) and reads the `stat` of
//! every process not seen before (one `openat` + `read` through that descriptor). A process
//! seen before keeps its identity unless its PID was freed and allocated again, which can
//! only happen to a PID the kernel allocated since the last scan: `/proc/loadavg`'s last field
//! is the last PID allocated in this PID namespace
//! (<https://docs.kernel.org/filesystems/proc.html#kernel-data>), read before each listing,
//! and PIDs are allocated in increasing order, wrapping at `pid_max`. So only the known PIDs
//! in the window since the last scan's value are read again, and the young ones (to see their
//! `exec`): those that started less than [`YOUNG_FOR`] ago or were first seen in the last
//! [`YOUNG_SCANS`] scans. Every [`SWEEP_EVERY`] a scan reads the `stat` of every known process
//! outside the watched runs, so an `exec` later in a process's life (a setup script that ends
//! in `exec python train.py`) is seen within that long. A process inside a watched run is
//! read only when its PID was allocated since (it is part of the run whatever it `exec`s).
//! Reading a `stat` costs 2.6 us here (a sweep of 300 processes: 1.1 ms); the window brings
//! a scan down to the listing (46 us for 300). The window assumes PIDs did
//! not wrap around twice between two scans (`pid_max` forks in at most a second); without a
//! readable `loadavg` (a fixture tree) every `stat` is read on every scan. When no PID was
//! allocated at all since the last listing and no sweep is due, no new process can exist:
//! the scan lists nothing (a listing of 1,000 processes costs ~1.5 ms) and reads only the
//! young processes' `stat`, if any. When PIDs were allocated but did not wrap and no sweep is
//! due, the scan lists only the PIDs above the last one: `/proc` lists processes in PID order
//! and its directory offset of PID `p` is `p` + 258 (`TGID_OFFSET` in `fs/proc/base.c`), so
//! a seek there skips every older process, and a scan costs what the new processes cost, not
//! what the machine runs. The offset is checked once against the daemon's own PID; where the
//! check fails (another kernel, a fixture tree) every such scan lists all of `/proc`. A
//! process that exited is then forgotten at the next full listing (a sweep). The parents remembered for the ancestor walk below are
//! those of the last `stat` read, and a process re-parented since (its parent exited) keeps
//! its old parent there: the walk then stops at the exited PID.
//!
//! Processes left out, and remembered as seen (never
//! returned later): kernel threads (`kthreadd`, the process with parent 0 other than init,
//! and its children), processes with an empty command line (zombies), and every process whose
//! ancestor chain (itself included) holds a watched PID or the excluded PID (the daemon
//! itself: its hooks are not runs). A new process is then read through a descriptor of its
//! `/proc/PID` directory, so every file describes the same process even if it exits and its
//! PID is reused meanwhile: `stat` again, `cmdline` (arguments joined by spaces, at most
//! [`COMMAND_MAX_BYTES`]), `status` (the real UID), `cgroup`
//! (<https://man7.org/linux/man-pages/man7/cgroups.7.html>; the v1 memory controller's path
//! when there is one, else the unified path). The environment
//! (<https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html>) is read only when a rule
//! asks, through the same descriptor. Every file is read up to a cap. Every process left out
//! is named in a debug line with the reason (a kernel thread, inside a watched run, exited
//! or a zombie, a file that cannot be read or parsed). Exited processes are forgotten at the
//! next scan.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{RawDir, SeekFrom};
use rustix::io::Errno;
pub use watchdog_procfs::{COMMAND_MAX_BYTES, command_line};
use watchdog_procfs::{
    ProcRoot, ProcStat, clock_ticks_per_second, fields_after_comm, parse_environ,
    parse_loadavg_change_key, parse_proc_cgroup, parse_stat, parse_status, parse_u32, parse_u64,
    read_capped_at,
};

/// Caps of the other files read: `stat` is ~300 bytes, `status` ~1.5 KiB, `cgroup` one line
/// per hierarchy.
const STAT_MAX_BYTES: usize = 4096;
const STATUS_MAX_BYTES: usize = 16 << 10;
const CGROUP_MAX_BYTES: usize = 64 << 10;
/// Most bytes of an environment read (the kernel's limit on arguments plus environment is
/// a quarter of the stack limit, 2 MiB by default); a variable past it is not seen.
const ENVIRON_MAX_BYTES: usize = 256 << 10;
/// Longest ancestor chain walked (a guard against a cycle in a fixture tree).
const MAX_DEPTH: usize = 4096;
/// Buffer for one `getdents64` batch of `/proc`: ~300 entries.
const DIRBUF_BYTES: usize = 16384;
/// For how many scans after it was first seen (or seen to `exec`) a process's `stat` is read
/// on every scan, to see an `exec` that followed its `fork` (a shell starting a program).
pub const YOUNG_SCANS: u64 = 4;
/// For how long after its start a process's `stat` is read on every scan: launchers `exec`
/// their workers within milliseconds to seconds of the `fork` (a `preexec_fn`, a shell
/// sourcing an environment).
pub const YOUNG_FOR: Duration = Duration::from_secs(10);
/// The `/proc` directory offset of PID 0: PID `p` is listed from offset `p` + this
/// (`TGID_OFFSET`, `FIRST_PROCESS_ENTRY` 256 plus `self` and `thread-self`, in the kernel's
/// `fs/proc/base.c`).
const TGID_OFFSET: u64 = 258;
/// How often every known process's `stat` is read, to see an `exec` after [`YOUNG_FOR`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The memory layout fields of `stat` that `exec` changes: 26-28 (`startcode`, `endcode`,
/// `startstack`) and 48-51 (`arg_start`, `arg_end`, `env_start`, `env_end`), as indexes
/// among the fields after the command name (field 3 is index 0).
const LAYOUT_FIELDS: [usize; 7] = [23, 24, 25, 45, 46, 47, 48];

/// What the rules match on, read once when the process is first seen.
#[derive(Debug, Clone)]
pub struct ProcessFacts {
    /// The PID.
    pub pid: u32,
    /// The parent's PID when read.
    pub ppid: u32,
    /// The real UID (the user who started it).
    pub uid: u32,
    /// Start time after boot in clock ticks: with the PID, the process's identity.
    pub start_ticks: u64,
    /// The command name (`comm`, at most 15 bytes).
    pub comm: String,
    /// The command line, arguments joined by spaces (NULs to spaces), clipped to
    /// [`COMMAND_MAX_BYTES`]; invalid UTF-8 replaced.
    pub command: String,
    /// The cgroup path: of the v1 memory controller when it has one, else the unified one;
    /// empty when neither is listed.
    pub cgroup: String,
    /// `/proc/PID`, to read the environment when asked; `None` in fixtures built by hand.
    dir: Option<Arc<OwnedFd>>,
    environ: OnceCell<Vec<(String, String)>>,
}

impl ProcessFacts {
    /// Facts with every field empty but the PID, and an empty environment (for tests and for
    /// callers that build facts themselves).
    pub fn new(pid: u32) -> ProcessFacts {
        ProcessFacts {
            pid,
            ppid: 0,
            uid: 0,
            start_ticks: 0,
            comm: String::new(),
            command: String::new(),
            cgroup: String::new(),
            dir: None,
            environ: OnceCell::new(),
        }
    }

    /// These facts with the given environment instead of the process's.
    pub fn with_environ(self, vars: Vec<(String, String)>) -> ProcessFacts {
        let environ = OnceCell::new();
        let _ = environ.set(vars);
        ProcessFacts {
            environ,
            dir: None,
            ..self
        }
    }

    /// The environment the process started with, read (at most 256 KiB) on the first call;
    /// empty when it cannot be read (the process exited, or no permission).
    pub fn environ(&self) -> &[(String, String)] {
        self.environ.get_or_init(|| {
            let Some(dir) = &self.dir else {
                return Vec::new();
            };
            let mut buf = Vec::new();
            match read_capped_at(dir.as_fd(), "environ", ENVIRON_MAX_BYTES, &mut buf) {
                Ok(truncated) => {
                    if truncated {
                        // The last entry may be cut: drop it.
                        let keep = buf.iter().rposition(|&b| b == 0).unwrap_or(0);
                        buf.truncate(keep);
                    }
                    parse_environ(&buf)
                }
                Err(e) => {
                    tracing::debug!(pid = self.pid, "cannot read environ: {e}");
                    Vec::new()
                }
            }
        })
    }

    /// Whether the environment was read (or given) already.
    #[cfg(test)]
    pub(crate) fn environ_read(&self) -> bool {
        self.environ.get().is_some()
    }

    /// The value of environment variable `name`, if set.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.environ()
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A process seen by the last scan.
#[derive(Debug)]
struct Known {
    start_ticks: u64,
    ppid: u32,
    /// What it runs: its name and memory layout, as of the last `stat` read.
    image: Image,
    /// The scan that last listed it.
    generation: u64,
    /// The scan that first saw this identity, or saw its image change.
    first_seen: u64,
}

/// What a process runs, as `stat` shows it: changed by every `exec`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Image {
    comm: Vec<u8>,
    /// [`LAYOUT_FIELDS`]; zeros when the kernel hides them (no right to ptrace-read) or the
    /// kernel is older than 3.5.
    layout: [u64; LAYOUT_FIELDS.len()],
}

impl Image {
    /// Sets this image from `stat` (parsed from `text`), its layout parsed once, without
    /// allocating when the name's length is unchanged; returns whether it changed.
    fn update(&mut self, stat: &ProcStat<'_>, text: &[u8]) -> bool {
        let layout = stat_layout(text);
        if self.comm == stat.comm && self.layout == layout {
            return false;
        }
        self.comm.clear();
        self.comm.extend_from_slice(stat.comm);
        self.layout = layout;
        true
    }
}

/// Why a process was not read.
enum Skip {
    /// It exited (or is a zombie): said in a debug line.
    Gone(&'static str),
    /// It has no command line: exiting, or inside an `exec` (its new memory holds no
    /// arguments yet).
    NoCommandLine,
    /// A file could not be read or parsed: worth a debug line.
    Malformed(String),
}

/// How long [`Scanner::facts`] reads again a process with no command line yet ...
const EXEC_WAIT: Duration = Duration::from_millis(100);
/// ... and how long it waits between two reads.
const EXEC_RETRY_EVERY: Duration = Duration::from_millis(2);

/// Finds processes not seen before.
#[derive(Debug)]
pub struct Scanner {
    proc_root: ProcRoot,
    proc_dir: Option<OwnedFd>,
    /// Whether seeking `/proc` to [`TGID_OFFSET`] + PID lists from that PID (checked once,
    /// when `/proc` is first opened).
    lists_from_pid: Option<bool>,
    excluded: Option<u32>,
    known: HashMap<u32, Known>,
    generation: u64,
    dirbuf: Vec<MaybeUninit<u8>>,
    buf: Vec<u8>,
    path: String,
    fresh: Vec<u32>,
    /// The PIDs whose `stat` a scan reads.
    to_read: Vec<u32>,
    /// The last PID allocated, read before the last successful listing; `None`: unknown
    /// (every known process's `stat` is read again).
    last_pid: Option<u32>,
    /// The scan that first saw the most recently seen process (or image).
    youngest: u64,
    /// The latest start, in clock ticks after boot, of a process the last listing found
    /// young outside any watched run, or new.
    youngest_start: u64,
    /// When every known process's `stat` was last read.
    last_sweep: Option<Instant>,
    /// [`SWEEP_EVERY`], shorter in tests.
    sweep_every: Duration,
    /// `sysconf(_SC_CLK_TCK)`: the unit of `starttime`.
    ticks_per_second: u64,
    /// Listings skipped because nothing could have changed (see [`Scanner::scan`]).
    skipped: u64,
}

impl Scanner {
    /// A scanner of `proc_root` that leaves out this process and everything below it.
    pub fn new(proc_root: &Path) -> Scanner {
        Scanner::with_excluded(proc_root, Some(std::process::id()))
    }

    /// A scanner of `proc_root` that leaves out `excluded` and everything below it.
    pub fn with_excluded(proc_root: &Path, excluded: Option<u32>) -> Scanner {
        Scanner {
            proc_root: ProcRoot::from(proc_root),
            proc_dir: None,
            excluded,
            lists_from_pid: None,
            known: HashMap::new(),
            generation: 0,
            dirbuf: vec![MaybeUninit::uninit(); DIRBUF_BYTES],
            buf: Vec::with_capacity(STAT_MAX_BYTES),
            path: String::with_capacity(32),
            fresh: Vec::new(),
            to_read: Vec::new(),
            last_pid: None,
            youngest: 0,
            youngest_start: 0,
            last_sweep: None,
            sweep_every: SWEEP_EVERY,
            ticks_per_second: clock_ticks_per_second(),
            skipped: 0,
        }
    }

    /// This scanner with sweeps every `every` instead of [`SWEEP_EVERY`].
    pub fn with_sweep_every(self, every: Duration) -> Scanner {
        Scanner {
            sweep_every: every,
            ..self
        }
    }

    /// How many scans were answered without reading anything (nothing could have changed).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The processes not seen by earlier scans (a reused PID is a new process) and those
    /// seen to `exec` since (their image changed), parents before children, leaving out
    /// kernel threads, zombies, and every process inside a watched tree (`is_watched` of
    /// itself or an ancestor) or the excluded one's; each left out is named in a debug line.
    /// Processes that exited since are forgotten. A `/proc` that cannot be listed gives
    /// nothing (logged at debug level).
    ///
    /// When no PID was allocated since the last listing and no sweep is due, no new process
    /// can exist and nothing is listed: only the young processes (their `exec` still
    /// awaited) are read, and the others that exited meanwhile are forgotten at the next
    /// listing.
    pub fn scan(&mut self, is_watched: impl Fn(u32) -> bool) -> Vec<ProcessFacts> {
        let last_pid = self.last_pid_now();
        let now_ticks = self.boot_ticks_now();
        let sweep = self
            .last_sweep
            .is_none_or(|at| at.elapsed() >= self.sweep_every);
        let young = (self.generation + 1).saturating_sub(self.youngest) < YOUNG_SCANS
            || self.started_lately(self.youngest_start, now_ticks);
        // No PID allocated: no new process, only the young ones' `exec` to look for.
        let unchanged = last_pid.is_some() && last_pid == self.last_pid && !sweep;
        if unchanged && !young {
            self.skipped += 1;
            return Vec::new();
        }
        self.generation += 1;
        self.fresh.clear();
        // PIDs allocated, none reused (no wrap): the new processes are those listed above
        // the last PID.
        let above = match (self.last_pid, last_pid) {
            (Some(prev), Some(cur)) if prev < cur && !sweep && self.lists_from_pid() => Some(prev),
            _ => None,
        };
        if unchanged {
            self.read_young(now_ticks, &is_watched);
        } else if let Some(prev) = above {
            self.read_young(now_ticks, &is_watched);
            if let Err(e) = self.list_above(prev, last_pid) {
                tracing::debug!("cannot list {}: {e}", self.proc_root.display());
                self.proc_dir = None; // Reopened next time.
                return Vec::new();
            }
        } else {
            if let Err(e) = self.list(last_pid, now_ticks, sweep, &is_watched) {
                tracing::debug!("cannot list {}: {e}", self.proc_root.display());
                self.proc_dir = None; // Reopened next time.
                return Vec::new();
            }
            if sweep {
                self.last_sweep = Some(Instant::now());
            }
            let generation = self.generation;
            self.known.retain(|_, k| k.generation == generation);
        }
        let fresh = std::mem::take(&mut self.fresh);
        let mut found = Vec::new();
        for &pid in &fresh {
            if let Some(why) = self.left_out(pid, &is_watched) {
                tracing::debug!("PID {pid} ({}) skipped: {why}", self.comm_of(pid));
                continue;
            }
            match self.read_facts(pid) {
                Ok((facts, image)) => {
                    // Read through the directory: if the PID was reused since the listing,
                    // this is the new process, remembered as seen.
                    if let Some(k) = self.known.get_mut(&pid) {
                        k.start_ticks = facts.start_ticks;
                        k.ppid = facts.ppid;
                        k.image = image;
                    }
                    found.push(facts);
                }
                Err(Skip::Gone(why)) => tracing::debug!("PID {pid} skipped: {why}"),
                Err(Skip::NoCommandLine) => {
                    tracing::debug!(
                        "PID {pid} skipped: an empty command line (exiting, or in an exec)"
                    );
                }
                Err(Skip::Malformed(why)) => tracing::debug!("PID {pid} skipped: {why}"),
            }
        }
        self.fresh = fresh;
        parents_first(&mut found);
        found
    }

    /// Why `pid` is left out of a scan's processes, if it is: a kernel thread, or inside a
    /// watched or the excluded tree.
    fn left_out(&self, pid: u32, is_watched: impl Fn(u32) -> bool) -> Option<String> {
        if self.is_kernel_thread(pid) {
            return Some("a kernel thread".to_string());
        }
        let top = self.watched_ancestor(pid, is_watched)?;
        Some(if self.excluded == Some(top) {
            format!("below the daemon itself (PID {top})")
        } else {
            format!("inside the watched run of PID {top}")
        })
    }

    /// The command name of a known process, for a log line.
    fn comm_of(&self, pid: u32) -> String {
        self.known
            .get(&pid)
            .map(|k| String::from_utf8_lossy(&k.image.comm).into_owned())
            .unwrap_or_default()
    }

    /// The boot-time clock (`CLOCK_BOOTTIME`, which `starttime` counts from) in clock ticks.
    fn boot_ticks_now(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
        secs * self.ticks_per_second + nanos * self.ticks_per_second / 1_000_000_000
    }

    /// Whether a process that started at `start_ticks` is less than [`YOUNG_FOR`] old.
    fn started_lately(&self, start_ticks: u64, now_ticks: u64) -> bool {
        now_ticks.saturating_sub(start_ticks) < YOUNG_FOR.as_secs() * self.ticks_per_second
    }

    /// The facts of `pid` read now, whether or not a scan returned it before; `None` when
    /// it exited, is a zombie, or its files cannot be read.
    pub fn facts(&mut self, pid: u32) -> Option<ProcessFacts> {
        // Caught inside an `exec`: a launcher that registers the child it just spawned
        // asks as soon as `spawn` returns, which is when the exec began, before the new
        // command line is in place. Read again for up to 100 ms (once seen here under load).
        let give_up = Instant::now() + EXEC_WAIT;
        self.facts_waiting(pid, || {
            std::thread::sleep(EXEC_RETRY_EVERY);
            Instant::now() < give_up
        })
    }

    /// [`Scanner::facts`], calling `wait` while `pid` has no command line yet and reading
    /// again until `wait` returns false.
    fn facts_waiting(&mut self, pid: u32, mut wait: impl FnMut() -> bool) -> Option<ProcessFacts> {
        loop {
            match self.read_facts(pid) {
                Ok((facts, _)) => return Some(facts),
                Err(Skip::NoCommandLine) if wait() => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether `pid`, or an ancestor of it as of the last scan, is watched or excluded.
    pub fn inside_watched_tree(&self, pid: u32, is_watched: impl Fn(u32) -> bool) -> bool {
        self.watched_ancestor(pid, is_watched).is_some()
    }

    /// The nearest of `pid` and its ancestors (as of the last scan) that is watched or
    /// excluded.
    fn watched_ancestor(&self, pid: u32, is_watched: impl Fn(u32) -> bool) -> Option<u32> {
        watched_ancestor(&self.known, self.excluded, pid, is_watched)
    }

    /// `kthreadd` (parent 0, not init) and its children.
    fn is_kernel_thread(&self, pid: u32) -> bool {
        let kthreadd = |p: u32| p != 1 && self.known.get(&p).is_some_and(|k| k.ppid == 0);
        kthreadd(pid) || self.known.get(&pid).is_some_and(|k| kthreadd(k.ppid))
    }

    /// The last PID allocated in this PID namespace, from `loadavg`; `None` when unknown.
    /// Read before a listing: a PID allocated after this is in the next scan's window.
    fn last_pid_now(&mut self) -> Option<u32> {
        self.open_proc_dir().ok()?;
        let proc_dir = self.proc_dir.as_ref()?;
        read_capped_at(proc_dir.as_fd(), "loadavg", 256, &mut self.buf)
            .ok()
            .and_then(|_| parse_loadavg_change_key(&self.buf))
            .and_then(|(_, pid)| u32::try_from(pid).ok())
    }

    /// Opens the kept-open descriptor of `/proc` unless it is open.
    fn open_proc_dir(&mut self) -> Result<(), Errno> {
        if self.proc_dir.is_none() {
            self.proc_dir = Some(self.proc_root.open_dir()?);
        }
        Ok(())
    }

    /// Whether seeking the kept-open `/proc` to [`TGID_OFFSET`] + PID lists from that PID:
    /// the first entry listed from the daemon's own PID must be that PID.
    fn lists_from_pid(&mut self) -> bool {
        if let Some(yes) = self.lists_from_pid {
            return yes;
        }
        let Some(proc_dir) = &self.proc_dir else {
            return false;
        };
        let own = std::process::id();
        let first = rustix::fs::seek(proc_dir, SeekFrom::Start(TGID_OFFSET + u64::from(own)))
            .ok()
            .and_then(|_| {
                let mut dir = RawDir::new(proc_dir, &mut self.dirbuf);
                dir.next()
                    .and_then(Result::ok)
                    .and_then(|e| parse_u32(e.file_name().to_bytes()))
            });
        let yes = first == Some(own);
        if !yes {
            tracing::debug!(
                "{} does not list from a PID's offset: each scan lists it all",
                self.proc_root.display()
            );
        }
        self.lists_from_pid = Some(yes);
        yes
    }

    /// Lists only the processes above PID `prev` (all allocated since the last listing,
    /// which saw `prev` last) and reads their `stat`; known processes are left as they are.
    fn list_above(&mut self, prev: u32, last_pid: Option<u32>) -> Result<(), Errno> {
        let Some(proc_dir) = &self.proc_dir else {
            return Err(Errno::BADF);
        };
        self.to_read.clear();
        rustix::fs::seek(proc_dir, SeekFrom::Start(TGID_OFFSET + u64::from(prev) + 1))?;
        let mut dir = RawDir::new(proc_dir, &mut self.dirbuf);
        while let Some(entry) = dir.next() {
            if let Some(pid) = parse_u32(entry?.file_name().to_bytes()).filter(|&p| p > prev) {
                self.to_read.push(pid);
            }
        }
        self.youngest_start = self.youngest_start.max(self.read_listed());
        self.last_pid = last_pid;
        Ok(())
    }

    /// Lists `/proc`, refreshing `known` and collecting new processes (and those whose
    /// image changed) in `fresh`; `last_pid` was read just before. A sweep reads every
    /// known process's `stat`. A process inside a watched run is not read for its youth or
    /// at a sweep: it is part of the run whatever it `exec`s.
    fn list(
        &mut self,
        last_pid: Option<u32>,
        now_ticks: u64,
        sweep: bool,
        is_watched: &impl Fn(u32) -> bool,
    ) -> Result<(), Errno> {
        self.open_proc_dir()?;
        let Some(proc_dir) = &self.proc_dir else {
            return Err(Errno::BADF);
        };
        let window = self.last_pid.zip(last_pid);
        let generation = self.generation;
        let young_ticks = YOUNG_FOR.as_secs() * self.ticks_per_second;
        // The latest start of a process listed that is young outside any watched run.
        let mut youngest_start = 0;
        self.to_read.clear();
        rustix::fs::seek(proc_dir, SeekFrom::Start(0))?;
        let mut dir = RawDir::new(proc_dir, &mut self.dirbuf);
        while let Some(entry) = dir.next() {
            let entry = entry?;
            let Some(pid) = parse_u32(entry.file_name().to_bytes()) else {
                continue;
            };
            if let Some(k) = self.known.get(&pid) {
                let lately = now_ticks.saturating_sub(k.start_ticks) < young_ticks;
                // Read for its `exec`: young or at a sweep, and outside every watched run.
                let exec_check = (lately || sweep)
                    && watched_ancestor(&self.known, self.excluded, pid, is_watched).is_none();
                if lately && exec_check {
                    youngest_start = youngest_start.max(k.start_ticks);
                }
                let read = exec_check
                    || generation - k.first_seen < YOUNG_SCANS
                    || window.is_none_or(|w| allocated_since(pid, w));
                if !read {
                    if let Some(k) = self.known.get_mut(&pid) {
                        k.generation = generation;
                    }
                    continue;
                }
            }
            self.to_read.push(pid);
        }
        self.youngest_start = youngest_start.max(self.read_listed());
        self.last_pid = last_pid;
        Ok(())
    }

    /// Reads the `stat` of each PID of `to_read` ([`read_stat`](Self::read_stat)); returns
    /// the latest start of those seen for the first time (0: none).
    fn read_listed(&mut self) -> u64 {
        let to_read = std::mem::take(&mut self.to_read);
        let latest = to_read
            .iter()
            .filter_map(|&pid| self.read_stat(pid))
            .max()
            .unwrap_or(0);
        self.to_read = to_read;
        latest
    }

    /// Reads the `stat` of the young processes outside watched runs, without listing
    /// `/proc` (no PID was allocated, so no other process can be new): those whose image
    /// changed go to `fresh`, those gone are forgotten.
    fn read_young(&mut self, now_ticks: u64, is_watched: &impl Fn(u32) -> bool) {
        let young_ticks = YOUNG_FOR.as_secs() * self.ticks_per_second;
        let generation = self.generation;
        let mut youngest_start = 0;
        self.to_read.clear();
        for (&pid, k) in &self.known {
            let lately = now_ticks.saturating_sub(k.start_ticks) < young_ticks;
            if (lately || generation - k.first_seen < YOUNG_SCANS)
                && watched_ancestor(&self.known, self.excluded, pid, is_watched).is_none()
            {
                if lately {
                    youngest_start = youngest_start.max(k.start_ticks);
                }
                self.to_read.push(pid);
            }
        }
        let to_read = std::mem::take(&mut self.to_read);
        for &pid in &to_read {
            if self.read_stat(pid).is_none()
                && self
                    .known
                    .get(&pid)
                    .is_some_and(|k| k.generation != generation)
            {
                self.known.remove(&pid);
            }
        }
        self.to_read = to_read;
        self.youngest_start = youngest_start;
    }

    /// Reads the `stat` of `pid` through the kept-open `/proc` and records it in `known` for
    /// this scan: a new process (or a reused PID) or a changed image goes to `fresh`.
    /// Returns the start of a process seen for the first time; `None` otherwise, and when
    /// it is gone or its `stat` cannot be read (then it is left as it was).
    fn read_stat(&mut self, pid: u32) -> Option<u64> {
        let proc_dir = self.proc_dir.as_ref()?;
        let generation = self.generation;
        self.path.clear();
        let _ = write!(self.path, "{pid}/stat");
        match read_capped_at(proc_dir.as_fd(), &self.path, STAT_MAX_BYTES, &mut self.buf) {
            Ok(_) => {}
            Err(e) if gone(e) => return None,
            Err(e) => {
                tracing::debug!("PID {pid} skipped: cannot read stat: {e}");
                return None;
            }
        }
        let Some(stat) = parse_stat(&self.buf) else {
            tracing::debug!("PID {pid} skipped: malformed stat");
            return None;
        };
        match self.known.get_mut(&pid) {
            Some(k) if k.start_ticks == stat.starttime_ticks => {
                k.ppid = stat.ppid;
                k.generation = generation;
                if k.image.update(&stat, &self.buf) {
                    // An `exec`: judged again, and young again.
                    k.first_seen = generation;
                    self.youngest = generation;
                    self.fresh.push(pid);
                }
                None
            }
            _ => {
                let mut image = Image::default();
                image.update(&stat, &self.buf);
                self.known.insert(
                    pid,
                    Known {
                        start_ticks: stat.starttime_ticks,
                        ppid: stat.ppid,
                        image,
                        generation,
                        first_seen: generation,
                    },
                );
                self.youngest = generation;
                self.fresh.push(pid);
                Some(stat.starttime_ticks)
            }
        }
    }

    /// Reads every fact of `pid`, and its image, through one descriptor of its `/proc/PID`
    /// directory.
    fn read_facts(&mut self, pid: u32) -> Result<(ProcessFacts, Image), Skip> {
        let path = self.proc_root.pid_dir(pid);
        let dir = self
            .proc_root
            .open_pid_dir(pid)
            .map_err(|e| skip(e, &path))?;
        let buf = &mut self.buf;
        let read = |name: &str, cap: usize, buf: &mut Vec<u8>| {
            read_capped_at(dir.as_fd(), name, cap, buf).map_err(|e| skip(e, &path.join(name)))
        };
        let malformed = |name: &str, what: &str| {
            Skip::Malformed(format!("{}: {what}", path.join(name).display()))
        };

        read("stat", STAT_MAX_BYTES, buf)?;
        let stat = parse_stat(buf).ok_or_else(|| {
            malformed(
                "stat",
                "expected 'PID (comm) STATE PPID ...' with 22 fields",
            )
        })?;
        if matches!(stat.state, b'Z' | b'X') {
            return Err(Skip::Gone("a zombie"));
        }
        let (ppid, start_ticks) = (stat.ppid, stat.starttime_ticks);
        let comm = String::from_utf8_lossy(stat.comm).into_owned();
        let mut image = Image::default();
        image.update(&stat, buf);

        read("cmdline", COMMAND_MAX_BYTES, buf)?;
        // Zombies and kernel threads have an empty command line, and so has a process in the
        // middle of an `exec` (its new memory holds no arguments yet): its image changes
        // once the `exec` is done, and it is judged then.
        if buf.iter().all(|&b| b == 0) {
            return Err(Skip::NoCommandLine);
        }
        let command = command_line(buf);

        read("status", STATUS_MAX_BYTES, buf)?;
        let uid = parse_status(buf)
            .uids
            .ok_or_else(|| malformed("status", "no 'Uid:' line with four numbers"))?
            .real;

        read("cgroup", CGROUP_MAX_BYTES, buf)?;
        let cgroups = parse_proc_cgroup(&String::from_utf8_lossy(buf));
        let cgroup = cgroups.v1_memory.or(cgroups.v2).unwrap_or_default();

        let facts = ProcessFacts {
            pid,
            ppid,
            uid,
            start_ticks,
            comm,
            command,
            cgroup,
            dir: Some(Arc::new(dir)),
            environ: OnceCell::new(),
        };
        Ok((facts, image))
    }
}

/// What [`judge`] made of one process of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// The matcher took it, and returned this.
    Taken(T),
    /// Below a process taken in the same scan (the PID given): part of that run.
    Inside(u32),
    /// The matcher did not take it.
    NoMatch,
}

/// Of one scan's processes (parents before children, as [`Scanner::scan`] returns them),
/// what `matcher` makes of each: taken (with what it returned), below a process taken (a
/// launcher's workers are part of its run, not runs of their own), or not matched. The
/// daemon calls it with `|p| config.rule_for(p, &gpu_pids, registered(p.pid))`.
pub fn judge<T>(
    facts: &[ProcessFacts],
    mut matcher: impl FnMut(&ProcessFacts) -> Option<T>,
) -> Vec<(&ProcessFacts, Verdict<T>)> {
    // The taken process each PID is below (or is).
    let mut inside: HashMap<u32, u32> = HashMap::new();
    let mut judged = Vec::with_capacity(facts.len());
    for p in facts {
        let verdict = if let Some(&top) = inside.get(&p.ppid) {
            inside.insert(p.pid, top);
            Verdict::Inside(top)
        } else if let Some(t) = matcher(p) {
            inside.insert(p.pid, p.pid);
            Verdict::Taken(t)
        } else {
            Verdict::NoMatch
        };
        judged.push((p, verdict));
    }
    judged
}

/// The processes of one scan that [`judge`] finds taken: the topmost matching process of a
/// tree is the run, its matching children are part of it.
pub fn topmost<T>(
    facts: &[ProcessFacts],
    matcher: impl FnMut(&ProcessFacts) -> Option<T>,
) -> Vec<(&ProcessFacts, T)> {
    judge(facts, matcher)
        .into_iter()
        .filter_map(|(p, v)| match v {
            Verdict::Taken(t) => Some((p, t)),
            Verdict::Inside(_) | Verdict::NoMatch => None,
        })
        .collect()
}

/// Sorts `found` so that a parent comes before its children: by depth below the processes
/// not in `found`, then start time, then PID.
fn parents_first(found: &mut [ProcessFacts]) {
    let parent: HashMap<u32, u32> = found.iter().map(|p| (p.pid, p.ppid)).collect();
    let depth = |pid: u32| {
        let mut d = 0usize;
        let mut cur = pid;
        while let Some(&pp) = parent.get(&cur) {
            if d >= MAX_DEPTH || pp == cur {
                break;
            }
            d += 1;
            cur = pp;
        }
        d
    };
    let depths: HashMap<u32, usize> = found.iter().map(|p| (p.pid, depth(p.pid))).collect();
    found.sort_by_key(|p| (depths.get(&p.pid).copied(), p.start_ticks, p.pid));
}

/// The nearest of `pid` and its ancestors in `known` that is watched or `excluded`.
fn watched_ancestor(
    known: &HashMap<u32, Known>,
    excluded: Option<u32>,
    pid: u32,
    is_watched: impl Fn(u32) -> bool,
) -> Option<u32> {
    let mut cur = pid;
    for _ in 0..MAX_DEPTH {
        if excluded == Some(cur) || is_watched(cur) {
            return Some(cur);
        }
        match known.get(&cur) {
            Some(k) if k.ppid != 0 && k.ppid != cur => cur = k.ppid,
            _ => return None,
        }
    }
    None
}

/// Whether `pid` may have been allocated after `prev` was the last PID allocated and up to
/// when `cur` was: the window `(prev, cur]`, wrapping at `pid_max`.
fn allocated_since(pid: u32, (prev, cur): (u32, u32)) -> bool {
    if prev <= cur {
        prev < pid && pid <= cur
    } else {
        pid > prev || pid <= cur
    }
}

/// [`LAYOUT_FIELDS`] of a `stat` text; zeros for fields missing or not numbers.
fn stat_layout(text: &[u8]) -> [u64; LAYOUT_FIELDS.len()] {
    let mut layout = [0; LAYOUT_FIELDS.len()];
    let Some(fields) = fields_after_comm(text) else {
        return layout;
    };
    let mut fields = fields.enumerate();
    for (slot, &index) in layout.iter_mut().zip(&LAYOUT_FIELDS) {
        if let Some((_, field)) = fields.find(|&(i, _)| i == index) {
            *slot = parse_u64(field).unwrap_or(0);
        }
    }
    layout
}

/// Whether a read failed because the process is gone.
fn gone(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::SRCH)
}

fn skip(e: Errno, path: &Path) -> Skip {
    if gone(e) {
        Skip::Gone("it exited before it was read")
    } else {
        Skip::Malformed(format!("cannot read {}: {e}", path.display()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
