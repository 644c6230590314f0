//! The watched process tree (the target and all its descendants) and its memory.
//!
//! DataLoader workers, launcher children and shell pipelines all count against the run's
//! memory, so the watchdog watches the target's whole tree. Scanning every `/proc/N/stat` to
//! find descendants costs 630-750 us per tick here (94 processes) and grows with the machine;
//! [`ProcessTree`] instead walks down from the target through
//! `/proc/PID/task/TID/children` (<https://docs.kernel.org/filesystems/proc.html#proc-pid-task-tid-children-information-about-task-children>),
//! which lists the processes each *thread* forked. Threads can be parents (a Python
//! `subprocess` call from a worker thread makes the child a child of that thread), so every
//! task's `children` file is read, not only the main thread's: the task directory is
//! re-listed with `getdents64` on a kept-open descriptor and each task's `children` file is
//! kept open too. Measured here (`cargo bench -p watchdog-sampler`): a refresh costs ~0.9 us
//! per single-threaded process (9.6 us for 10, 48 us for 50) and ~0.3 us more per thread (20
//! us for one 64-thread process), against 630-750 us for a full `/proc` scan. That is 0.1% of
//! a core at 100 Hz for 10 processes, so the [`Sampler`](crate::Sampler) refreshes the tree
//! every tick by default, and
//! [`Sampler::set_tree_refresh_every`](crate::Sampler::set_tree_refresh_every) trades that for
//! a delay in noticing new children. A child that exited stays in the tree as a zombie until
//! its parent reaps it (it holds no memory).
//!
//! A process whose parent exits is re-parented to init or the nearest child subreaper, so it
//! is no longer a descendant of the target. Two options keep such processes of the run:
//! [`ProcessTree::adopt_orphans_of`] (`watchdog run`, where the watchdog is a subreaper) also
//! walks the adopter's children other than the target and those a filter leaves out (its
//! hooks), so the tree is the target, its descendants and the orphans the watchdog adopted,
//! minus the hooks; [`ProcessTree::keep_survivors`] (`--pid`) keeps, once the target exited,
//! the processes the last walks listed (and what they start) until each exits, following
//! them through the descriptors opened while they were in the tree. Without either, a
//! process whose parent exits leaves the tree.
//!
//! Most ticks nothing has forked or exited anywhere, and even the walk above (about 40
//! syscalls for 10 processes) is wasted. [`ProcessTree::refresh_if_changed`] first re-reads
//! `/proc/loadavg` (one `pread`), whose last two fields are the number of threads on the
//! system and the last PID allocated in this PID namespace
//! (<https://docs.kernel.org/filesystems/proc.html#kernel-data>): a fork or clone anywhere
//! changes the second, a reaped process or an exited thread the first. When both are as they
//! were before the last walk, no process or thread can have joined or left the tree, and the
//! walk is skipped. The one change it cannot see is a process in the tree that exited and is
//! not reaped yet, whose children were reparented out: they stay counted (an overestimate,
//! never a missed child) until the next full [`refresh`](ProcessTree::refresh), which the
//! [`Sampler`](crate::Sampler) does at least once a second. New children, where memory
//! growth comes from, are never delayed. A tree of the target alone has no such child: it
//! is walked only when the last PID moved (a fork or a clone anywhere), never in full on
//! the clock, so a target at rest costs one `pread` of `/proc/loadavg` a tick.
//!
//! Descriptors opened under `/proc/PID/` stay bound to that process: after it exits they
//! fail (`ESRCH`) even if the PID is reused, so a recycled PID never joins the tree by
//! accident. Descriptors of exited processes are closed on the next refresh.
//!
//! The watchdog itself may run inside its target's tree: Python's `attach()` starts
//! `watchdog --pid <the notebook kernel>` as a child of the kernel. Its own memory and its
//! hook children (`sh -c ...`) are not the run's, and it must never signal itself, so the walk
//! skips one excluded process and everything below it: by default the watchdog's own PID
//! ([`ProcessTree::new`]), changed with [`ProcessTree::exclude_subtree_of`]. The target itself
//! is never excluded.
//!
//! [`TreeMemory`] sums RSS (`resident` of `/proc/PID/statm`, in pages) over the tree against
//! `--mem-limit`. RSS counts shared pages once per process (forked workers share their
//! parent's pages copy-on-write), so the sum overestimates; PSS from `smaps_rollup` would be
//! exact but costs 52 us per process against 0.9 us.
//!
//! The other facts about the target (its start, its working directory, its UIDs and
//! environment, whether it is alive) are read through [`watchdog_procfs::ProcRoot`], which
//! also holds the parsers of the files walked here.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{RawDir, SeekFrom};
use watchdog_types::{ResourceId, ResourceKind, Sample};

use watchdog_procfs::{
    ProcRoot, page_size, parse_children, parse_loadavg_change_key, parse_statm_resident_pages,
    parse_u32,
};

use crate::procfile::{KeptOpenFile, read_error};
use crate::shared::{Reads, TickFile};
use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// One process being tracked: its task directory and each task's `children` file.
#[derive(Debug)]
struct Tracked {
    pid: u32,
    task_dir: OwnedFd,
    task_dir_path: PathBuf,
    /// `(tid, children file)`, sorted by tid.
    tasks: Vec<(u32, KeptOpenFile)>,
    seen: bool,
}

/// Buffer for one `getdents64` batch: enough for ~200 tasks per syscall.
const DIRBUF_BYTES: usize = 8192;

/// Says whether a child of the adopter is left out of the tree (a hook of the watchdog's).
pub type AdoptionFilter = Box<dyn Fn(u32) -> bool + Send + Sync>;

/// The process that adopts the run's orphans (the watchdog as a child subreaper), and
/// which of its children are not the run's.
struct Adopter {
    pid: u32,
    leave_out: AdoptionFilter,
    /// Every child of the adopter at the last walk but the target, left out or not.
    children: Vec<u32>,
}

impl std::fmt::Debug for Adopter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopter")
            .field("pid", &self.pid)
            .field("children", &self.children)
            .finish()
    }
}

/// The target and its descendants, found by following `children` files down from the target.
#[derive(Debug)]
pub struct ProcessTree {
    proc_root: ProcRoot,
    target: u32,
    /// A process whose subtree the walk skips (the watchdog itself by default); never the target.
    excluded: Option<u32>,
    pids: Vec<u32>,
    /// Sorted by pid.
    procs: Vec<Tracked>,
    dirbuf: Vec<MaybeUninit<u8>>,
    tids: Vec<u32>,
    target_alive: bool,
    /// `/proc/loadavg`, the change gate of [`refresh_if_changed`](Self::refresh_if_changed);
    /// `None` when it cannot be opened (a fixture tree): then every refresh walks.
    loadavg: Option<TickFile>,
    /// `(threads on the system, last PID allocated)` read just before the last walk.
    walked_at: Option<(u64, u64)>,
    walks: u64,
    /// Orphans re-parented to this process are the run's too (see [`Self::adopt_orphans_of`]).
    adopter: Option<Adopter>,
    /// Whether the tree's other processes stay watched after the target exits.
    keep_survivors: bool,
    /// After the target exited: the processes it left running (and theirs), each followed
    /// through the descriptor opened while it was in the tree, never reopened by PID.
    survivors: Vec<u32>,
    /// The previous walk's `pids`, where the survivors are taken from.
    previous: Vec<u32>,
    /// Scratch list of the adopter's children.
    scratch: Vec<u32>,
}

impl ProcessTree {
    /// Starts tracking `target` under `proc_root` and does a first refresh, leaving out the
    /// calling process (`std::process::id()`) and its descendants when they are in the
    /// target's tree: the watchdog and its hooks are not part of the run it watches.
    ///
    /// Fails when the target's task directory cannot be opened (no such process, or `/proc`
    /// mounted with `hidepid`).
    pub fn new(proc_root: &Path, target: u32) -> Result<Self, SourceError> {
        Self::with_excluded(proc_root, target, Some(std::process::id()))
    }

    /// Like [`new`](Self::new), leaving out `excluded` and its descendants instead of the
    /// calling process (`None`: leave out nothing, e.g. on a fixture tree whose PIDs are not
    /// this system's). The target is never left out, even when it is `excluded`.
    pub fn with_excluded(
        proc_root: &Path,
        target: u32,
        excluded: Option<u32>,
    ) -> Result<Self, SourceError> {
        let mut me = Self {
            proc_root: ProcRoot::from(proc_root),
            target,
            excluded: excluded.filter(|&p| p != target),
            pids: Vec::with_capacity(64),
            procs: Vec::with_capacity(64),
            dirbuf: vec![MaybeUninit::uninit(); DIRBUF_BYTES],
            tids: Vec::with_capacity(256),
            target_alive: true,
            loadavg: Reads::Own.file(proc_root.join("loadavg"), 128).ok(),
            walked_at: None,
            walks: 0,
            adopter: None,
            keep_survivors: false,
            survivors: Vec::new(),
            previous: Vec::with_capacity(64),
            scratch: Vec::new(),
        };
        let first = me.open_tracked(target)?;
        me.procs.push(first);
        me.refresh();
        Ok(me)
    }

    /// The target's PID.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// The process whose subtree the walk leaves out, if any.
    pub fn excluded(&self) -> Option<u32> {
        self.excluded
    }

    /// Leaves `pid` and its descendants out of the tree from now on (`None`: leave out
    /// nothing), replacing the previous exclusion, and walks the tree again. Excluding the
    /// target has no effect: the target is always watched.
    pub fn exclude_subtree_of(&mut self, pid: Option<u32>) {
        self.excluded = pid.filter(|&p| p != self.target);
        self.refresh();
    }

    /// Also watches the children of `adopter` (the watchdog, made a child subreaper with
    /// `PR_SET_CHILD_SUBREAPER`) and their descendants, except those `leave_out` names (its
    /// hooks) and the target itself. When a process of the run exits, the kernel re-parents
    /// its children to the nearest subreaper: they are no longer the target's descendants,
    /// but they are still the run's. Walks the tree again.
    pub fn adopt_orphans_of(&mut self, adopter: u32, leave_out: AdoptionFilter) {
        self.adopter = Some(Adopter {
            pid: adopter,
            leave_out,
            children: Vec::with_capacity(8),
        });
        self.refresh();
    }

    /// Every child of the adopter at the last walk except the target, including those left
    /// out (hooks and what they started): the processes the adopter must reap. Empty when no
    /// adopter is set.
    pub fn adopter_children(&self) -> &[u32] {
        self.adopter.as_ref().map_or(&[], |a| a.children.as_slice())
    }

    /// Keeps watching the processes of the tree after the target exits (`--pid`): the ones
    /// listed at the last walk before the exit, followed through the descriptors opened
    /// while they were in the tree (so a reused PID is never taken for one of them), and
    /// whatever they start, until each exits.
    pub fn keep_survivors(&mut self, keep: bool) {
        self.keep_survivors = keep;
    }

    /// The tree as of the last refresh: the target first (while it lives), then the
    /// processes adopted from the run and the survivors, then descendants breadth-first.
    /// Once the target has exited this holds only the survivors and the adopted
    /// processes: empty unless [`keep_survivors`](Self::keep_survivors) or
    /// [`adopt_orphans_of`](Self::adopt_orphans_of) was asked for.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The processes the target left running when it exited (and what they started), when
    /// [`keep_survivors`](Self::keep_survivors) is on; empty while the target lives.
    pub fn survivors(&self) -> &[u32] {
        &self.survivors
    }

    /// Whether the process the tree tracks as `pid` (through the descriptor it opened when
    /// the process joined the tree) is still there. After a caller opens a pidfd for `pid`,
    /// `true` here means that pidfd is the tracked process: a PID is not reused while its
    /// process exists.
    pub fn still_tracked(&mut self, pid: u32) -> bool {
        match self.procs.binary_search_by_key(&pid, |p| p.pid) {
            Ok(idx) => Self::list_tasks(&self.procs[idx], &mut self.dirbuf, &mut self.tids).is_ok(),
            Err(_) => false,
        }
    }

    /// Whether the tree watches anything beyond the target once it exited.
    fn follows_beyond_target(&self) -> bool {
        self.keep_survivors || self.adopter.is_some()
    }

    /// Whether the target was there at the last refresh. An exited target that its parent has
    /// not reaped yet (a zombie) still counts as there: use [`ProcRoot::is_alive`](watchdog_procfs::ProcRoot::is_alive) to tell.
    pub fn target_alive(&self) -> bool {
        self.target_alive
    }

    fn open_tracked(&self, pid: u32) -> Result<Tracked, SourceError> {
        let (task_dir, path) = self.proc_root.open_task_dir(pid)?;
        Ok(Tracked {
            pid,
            task_dir,
            task_dir_path: path,
            tasks: Vec::with_capacity(8),
            seen: false,
        })
    }

    /// Reads `/proc/loadavg`, the change gate, through `reads` from now on: a service's runs
    /// share one read per tick.
    pub fn read_loadavg_through(&mut self, reads: &Reads) {
        self.loadavg = reads.file(self.proc_root.join("loadavg"), 128).ok();
    }

    /// Whether the tree is the target alone, alive: no descendant, no survivor, no child
    /// of the adopter (an orphan, a hook) but the target. Only a fork or a clone (the last
    /// PID allocated moving) can change such a tree, and nothing in it can be missed by the
    /// change gate: there is no child whose parent could exit unreaped.
    pub fn is_single_process(&self) -> bool {
        self.target_alive
            && self.pids.len() == 1
            && self.survivors.is_empty()
            && self.adopter.as_ref().is_none_or(|a| a.children.is_empty())
    }

    /// How many times the tree has been walked (skipped refreshes do not count).
    pub fn walks(&self) -> u64 {
        self.walks
    }

    /// `(threads on the system, last PID allocated)` now, or `None` when unknown.
    fn change_key(&mut self) -> Option<(u64, u64)> {
        let file = self.loadavg.as_mut()?;
        parse_loadavg_change_key(file.read().ok()?)
    }

    /// Re-reads the tree from the target down. Returns whether the target is still there.
    ///
    /// Allocates only when processes or threads appeared since the last refresh (to open their
    /// files), never for a stable tree.
    pub fn refresh(&mut self) -> bool {
        if !self.target_alive && !self.follows_beyond_target() {
            // Once gone, the target's PID may name another process: never look again.
            return false;
        }
        // Read before the walk: a fork during the walk shows at the next check.
        self.walked_at = self.change_key();
        self.walk()
    }

    /// Like [`refresh`](Self::refresh), but skips the walk when no process or thread has been
    /// created or reaped on the system since the last walk (see the module documentation for
    /// the one change this misses until the next full refresh). For a tree of the target
    /// alone ([`is_single_process`](Self::is_single_process)) only a creation counts: a
    /// process or thread reaped elsewhere cannot change it, and it has no child to lose.
    pub fn refresh_if_changed(&mut self) -> bool {
        if !self.target_alive && !self.follows_beyond_target() {
            return false;
        }
        let key = self.change_key();
        let unchanged = match (key, self.walked_at) {
            (Some(now), Some(then)) => now == then || (now.1 == then.1 && self.is_single_process()),
            _ => false,
        };
        if unchanged {
            return true;
        }
        self.walked_at = key;
        self.walk()
    }

    fn walk(&mut self) -> bool {
        self.walks += 1;
        std::mem::swap(&mut self.pids, &mut self.previous);
        self.pids.clear();
        for p in &mut self.procs {
            p.seen = false;
        }
        if self.target_alive {
            // Once gone, the target's PID may name another process: never look again.
            self.pids.push(self.target);
        }
        for &pid in &self.survivors {
            if !self.pids.contains(&pid) {
                self.pids.push(pid);
            }
        }
        self.adopt();
        let mut i = 0;
        while i < self.pids.len() {
            let pid = self.pids[i];
            // The target and the survivors are followed only through the descriptors
            // opened while they were in the tree: nothing lists them under a live parent.
            let pinned = pid == self.target || self.survivors.contains(&pid);
            if self.visit(pid, !pinned).is_err() {
                // Exited (for a descendant: between its parent's listing and now).
                self.pids.remove(i);
                if pid == self.target {
                    self.target_alive = false;
                    if self.keep_survivors {
                        self.take_survivors();
                    }
                }
                continue;
            }
            i += 1;
        }
        if self.keep_survivors && !self.target_alive {
            // Whatever the survivors start stays watched when its parent exits, too.
            self.survivors.clear();
            self.survivors.extend_from_slice(&self.pids);
        }
        // While the target lives, a process that left the tree at this walk keeps its
        // descriptors one walk more: if the target turns out to have exited before this
        // walk, [`mark_target_exited`](Self::mark_target_exited) keeps it as a survivor.
        let keep_previous = self.keep_survivors && self.target_alive;
        let previous = &self.previous;
        self.procs
            .retain(|p| p.seen || (keep_previous && previous.contains(&p.pid)));
        self.target_alive
    }

    /// The target just exited: the processes of the previous walk become survivors, to be
    /// walked next (they are appended to `pids`).
    fn take_survivors(&mut self) {
        for &pid in &self.previous {
            if pid != self.target && !self.pids.contains(&pid) {
                self.pids.push(pid);
                self.survivors.push(pid);
            }
        }
    }

    /// Tells the tree the target has exited, as its pidfd said, even if it is still there as
    /// a zombie its parent has not reaped (a zombie lists no children: the ones it had are
    /// re-parented already). With [`keep_survivors`](Self::keep_survivors) on, the
    /// processes of the last two walks become survivors. Walks the tree again.
    pub fn mark_target_exited(&mut self) {
        if self.target_alive {
            self.target_alive = false;
            if self.keep_survivors {
                // The last walk may have come after the exit, when the children had left.
                for i in 0..self.pids.len() + self.previous.len() {
                    let pid = match self.pids.get(i) {
                        Some(&p) => p,
                        None => self.previous[i - self.pids.len()],
                    };
                    if pid != self.target && !self.survivors.contains(&pid) {
                        self.survivors.push(pid);
                    }
                }
            }
        }
        self.refresh();
    }

    /// Appends the adopter's children to `pids`, but for the target and those it leaves
    /// out, and keeps the full list for [`adopter_children`](Self::adopter_children).
    fn adopt(&mut self) {
        let Some(adopter) = self.adopter.as_ref().map(|a| a.pid) else {
            return;
        };
        let mut children = std::mem::take(&mut self.scratch);
        children.clear();
        // The adopter is this process: it is alive, and its PID cannot be reused.
        if self.visit_into(adopter, true, &mut children).is_err() {
            children.clear();
        }
        let target = self.target_alive.then_some(self.target);
        children.retain(|&c| Some(c) != target);
        if let Some(a) = &mut self.adopter {
            for &child in &children {
                if !self.pids.contains(&child) && !(a.leave_out)(child) {
                    self.pids.push(child);
                }
            }
            std::mem::swap(&mut a.children, &mut children);
        }
        self.scratch = children;
    }

    /// Lists the task IDs of `tracked` into `tids`, sorted, through its kept-open directory.
    /// Fails when the process has exited (no tasks left).
    fn list_tasks(
        tracked: &Tracked,
        dirbuf: &mut [MaybeUninit<u8>],
        tids: &mut Vec<u32>,
    ) -> Result<(), SourceError> {
        tids.clear();
        rustix::fs::seek(&tracked.task_dir, SeekFrom::Start(0))
            .map_err(|e| read_error(&tracked.task_dir_path, e))?;
        let mut dir = RawDir::new(&tracked.task_dir, dirbuf);
        while let Some(entry) = dir.next() {
            let entry = entry.map_err(|e| read_error(&tracked.task_dir_path, e))?;
            if let Some(tid) = parse_u32(entry.file_name().to_bytes()) {
                tids.push(tid);
            }
        }
        if tids.is_empty() {
            return Err(SourceError::Gone(format!(
                "{} lists no tasks: the process exited",
                tracked.task_dir_path.display()
            )));
        }
        tids.sort_unstable();
        Ok(())
    }

    /// Lists `pid`'s tasks, reads each task's children and appends new ones to `pids`.
    /// `reopen`: whether `pid` may be opened afresh (it was just listed by a live parent).
    fn visit(&mut self, pid: u32, reopen: bool) -> Result<(), SourceError> {
        let mut out = std::mem::take(&mut self.pids);
        let result = self.visit_into(pid, reopen, &mut out);
        self.pids = out;
        result
    }

    /// [`visit`](Self::visit) appending to `pids`.
    fn visit_into(
        &mut self,
        pid: u32,
        reopen: bool,
        pids: &mut Vec<u32>,
    ) -> Result<(), SourceError> {
        let (idx, fresh) = match self.procs.binary_search_by_key(&pid, |p| p.pid) {
            Ok(idx) => (idx, false),
            Err(_) if !reopen && pid != self.target => {
                return Err(SourceError::Gone(format!(
                    "process {pid} is no longer tracked"
                )));
            }
            Err(idx) => {
                let t = self.open_tracked(pid)?;
                self.procs.insert(idx, t);
                (idx, true)
            }
        };
        let mut listed = Self::list_tasks(&self.procs[idx], &mut self.dirbuf, &mut self.tids);
        if listed.is_err() && !fresh && reopen && pid != self.target {
            // The descriptor belongs to an earlier process with this PID, which exited and was
            // reaped; a live parent lists the PID again, so it names a new child: open it
            // afresh. (Never for the target: its PID, once gone, may name a stranger.)
            self.procs[idx] = self.open_tracked(pid)?;
            listed = Self::list_tasks(&self.procs[idx], &mut self.dirbuf, &mut self.tids);
        }
        listed?;
        let tracked = &mut self.procs[idx];
        tracked.seen = true;

        // Bring the kept-open children files in line with the task list.
        let tids = &self.tids;
        tracked
            .tasks
            .retain(|(tid, _)| tids.binary_search(tid).is_ok());
        for &tid in tids {
            if let Err(at) = tracked.tasks.binary_search_by_key(&tid, |(t, _)| *t) {
                let mut path = tracked.task_dir_path.clone();
                path.push(tid.to_string());
                path.push("children");
                // A thread that exited since the listing has nothing to say.
                if let Ok(f) = KeptOpenFile::with_capacity(path, 256) {
                    tracked.tasks.insert(at, (tid, f));
                }
            }
        }

        let excluded = self.excluded;
        for (_, file) in &mut tracked.tasks {
            if file.read().is_err() {
                // The thread exited (its children went to another thread), or the TID was
                // reused by a new thread since the listing: reopen once, rarely.
                match KeptOpenFile::with_capacity(file.path().to_path_buf(), 256) {
                    Ok(fresh) => *file = fresh,
                    Err(_) => continue,
                }
                if file.read().is_err() {
                    continue;
                }
            }
            parse_children(file.last(), |child| {
                // Not following the excluded process leaves its whole subtree out.
                if Some(child) != excluded && !pids.contains(&child) {
                    pids.push(child);
                }
            });
        }
        Ok(())
    }
}

/// The `tree_memory` source: summed RSS of the tree against `--mem-limit`.
#[derive(Debug)]
pub struct TreeMemory {
    proc_root: ProcRoot,
    id: ResourceId,
    limit: u64,
    page_size: u64,
    /// `(pid, statm, generation last used)`, sorted by pid.
    files: Vec<(u32, KeptOpenFile, u64)>,
    generation: u64,
    /// Sum at most this often (0: every tick), and when the next sum is due.
    every_ns: u64,
    next_ns: u64,
}

impl TreeMemory {
    /// Registers `tree_memory` with `limit` in bytes (`None`: no `--mem-limit`, reported as `u64::MAX`).
    pub fn new(proc_root: &Path, limit: Option<u64>, table: &mut ResourceTable) -> Self {
        let source = match limit {
            Some(_) => "RSS of the process tree against --mem-limit".to_string(),
            None => "RSS of the process tree (no --mem-limit)".to_string(),
        };
        let id = table.register(ResourceKind::TreeMemory, "tree_memory".into(), source);
        Self {
            proc_root: ProcRoot::from(proc_root),
            id,
            limit: limit.unwrap_or(u64::MAX),
            page_size: page_size(),
            files: Vec::with_capacity(64),
            generation: 0,
            every_ns: 0,
            next_ns: 0,
        }
    }

    /// Sums the RSS at most once per `period` instead of every tick (the ticks between are
    /// [`Outcome::Idle`]): one `statm` read per process is most of what a tick costs.
    pub fn read_every(&mut self, period: Duration) {
        self.every_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    }

    /// The registered resource's id.
    pub fn id(&self) -> ResourceId {
        self.id
    }

    /// Sums RSS in bytes over `pids`, skipping processes that exited. Returns the sum and how
    /// many processes were counted.
    pub fn rss_sum(&mut self, pids: &[u32]) -> (u64, usize) {
        self.generation += 1;
        let generation = self.generation;
        let mut sum: u64 = 0;
        let mut counted = 0;
        for &pid in pids {
            let idx = match self.files.binary_search_by_key(&pid, |(p, _, _)| *p) {
                Ok(idx) => idx,
                Err(idx) => {
                    let Ok(f) = self.proc_root.keep_open_pid(pid, "statm", 128) else {
                        continue;
                    };
                    self.files.insert(idx, (pid, f, generation));
                    idx
                }
            };
            let (_, file, used) = &mut self.files[idx];
            *used = generation;
            if file.read().is_err() {
                // Exited, or the descriptor belongs to an earlier process with this PID that
                // the tree has since replaced: reopen once.
                match KeptOpenFile::with_capacity(file.path().to_path_buf(), 128) {
                    Ok(fresh) => *file = fresh,
                    Err(_) => continue,
                }
                if file.read().is_err() {
                    continue;
                }
            }
            if let Some(pages) = parse_statm_resident_pages(file.last()) {
                sum = sum.saturating_add(pages.saturating_mul(self.page_size));
                counted += 1;
            }
        }
        // Close the files of processes that left the tree.
        self.files.retain(|(_, _, used)| *used == generation);
        (sum, counted)
    }
}

impl Source for TreeMemory {
    fn name(&self) -> &str {
        "tree"
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        if tick.now_ns < self.next_ns {
            return Ok(Outcome::Idle);
        }
        self.next_ns = tick.now_ns.saturating_add(self.every_ns);
        let (used, counted) = self.rss_sum(tick.tree);
        if counted == 0 {
            return Ok(Outcome::Idle);
        }
        out(Sample {
            resource: self.id,
            t_ns: tick.now_ns,
            used,
            limit: self.limit,
        });
        Ok(Outcome::Sampled)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A fixture `PROC/PID/task/PID/children` holding `children`.
    fn write_task(proc: &Path, pid: u32, children: &str) {
        let d = proc.join(format!("{pid}/task/{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("children"), children).unwrap();
    }

    #[test]
    fn a_single_process_tree_is_walked_again_only_when_a_pid_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        let task = |pid: u32, children: &str| write_task(proc, pid, children);
        task(100, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/90 500\n").unwrap();
        let mut tree = ProcessTree::with_excluded(proc, 100, None).unwrap();
        assert!(tree.is_single_process());
        assert_eq!((tree.pids(), tree.walks()), (&[100][..], 1));
        // Threads exited or processes were reaped elsewhere: the target alone is unchanged.
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/85 500\n").unwrap();
        assert!(tree.refresh_if_changed());
        assert_eq!(tree.walks(), 1);
        // A fork: walked, the child found.
        task(100, "200 ");
        task(200, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/86 501\n").unwrap();
        assert!(tree.refresh_if_changed());
        assert_eq!((tree.pids(), tree.walks()), (&[100, 200][..], 2));
        assert!(!tree.is_single_process());
        // Two processes: a reap (thread count falling) is walked again, as before.
        std::fs::remove_dir_all(proc.join("200")).unwrap();
        task(100, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/85 501\n").unwrap();
        assert!(tree.refresh_if_changed());
        assert_eq!((tree.pids(), tree.walks()), (&[100][..], 3));
    }

    #[test]
    fn the_walk_is_skipped_only_while_loadavg_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        let task = |pid: u32, children: &str| write_task(proc, pid, children);
        task(100, "200 ");
        task(200, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/90 500\n").unwrap();
        let mut tree = ProcessTree::with_excluded(proc, 100, None).unwrap();
        assert_eq!((tree.pids(), tree.walks()), (&[100, 200][..], 1));

        // Nothing created or reaped: no walk, same tree.
        assert!(tree.refresh_if_changed());
        assert_eq!((tree.pids(), tree.walks()), (&[100, 200][..], 1));

        // A fork (last PID moves): the new child is found at once.
        task(200, "300 ");
        task(300, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/91 501\n").unwrap();
        assert!(tree.refresh_if_changed());
        assert_eq!((tree.pids(), tree.walks()), (&[100, 200, 300][..], 2));

        // A reap with no fork (thread count falls): 300 leaves.
        std::fs::remove_dir_all(proc.join("300")).unwrap();
        task(200, "");
        std::fs::write(proc.join("loadavg"), "0.00 0.00 0.00 1/90 501\n").unwrap();
        assert!(tree.refresh_if_changed());
        assert_eq!((tree.pids(), tree.walks()), (&[100, 200][..], 3));

        // A full refresh always walks; without a readable loadavg every refresh walks.
        assert!(tree.refresh());
        assert_eq!(tree.walks(), 4);
        std::fs::remove_file(proc.join("loadavg")).unwrap();
        let mut blind = ProcessTree::with_excluded(proc, 100, None).unwrap();
        assert!(blind.refresh_if_changed());
        assert_eq!(blind.walks(), 2);
    }

    fn fixture_task(proc: &Path, pid: u32, children: &str) {
        let d = proc.join(format!("{pid}/task/{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("children"), children).unwrap();
    }

    /// With --pid, what the target leaves running when it exits used to leave the watch
    /// with it; it now stays, through the descriptors opened while it was in the tree.
    #[test]
    fn survivors_of_the_target_stay_in_the_tree_until_they_exit() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        fixture_task(proc, 100, "200 ");
        fixture_task(proc, 200, "300 ");
        fixture_task(proc, 300, "");
        let mut tree = ProcessTree::with_excluded(proc, 100, None).unwrap();
        tree.keep_survivors(true);
        assert_eq!(tree.pids(), &[100, 200, 300]);

        // The target exits; its child is re-parented away (nobody lists 200 now).
        std::fs::remove_dir_all(proc.join("100")).unwrap();
        assert!(!tree.refresh());
        assert_eq!(tree.pids(), &[200, 300]);
        assert!(!tree.target_alive());

        // The middle one exits too: its child stays, followed through its own descriptor.
        std::fs::remove_dir_all(proc.join("200")).unwrap();
        tree.refresh();
        assert_eq!(tree.pids(), &[300]);

        // 300 exits and its PID is reused by a stranger: never taken for the survivor.
        std::fs::remove_dir_all(proc.join("300")).unwrap();
        fixture_task(proc, 300, "");
        tree.refresh();
        assert_eq!(tree.pids(), &[] as &[u32]);
    }

    /// A target that exited but is not reaped yet (a zombie) is marked gone by the caller;
    /// the processes of the last walks become survivors even if the last walk missed them.
    #[test]
    fn marking_the_target_exited_keeps_the_last_walks_processes() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        fixture_task(proc, 100, "200 ");
        fixture_task(proc, 200, "");
        let mut tree = ProcessTree::with_excluded(proc, 100, None).unwrap();
        tree.keep_survivors(true);
        // The zombie target lists no children any more.
        fixture_task(proc, 100, "");
        tree.refresh();
        assert_eq!(tree.pids(), &[100]);
        tree.mark_target_exited();
        assert_eq!(tree.pids(), &[200]);
    }

    /// Orphans re-parented to the watchdog (a child subreaper) are the run's: the tree
    /// takes the adopter's children but the target and those left out (hooks).
    #[test]
    fn the_adopters_children_but_its_hooks_join_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        fixture_task(proc, 50, "100 400 500 ");
        fixture_task(proc, 100, "");
        fixture_task(proc, 400, "410 ");
        fixture_task(proc, 410, "");
        fixture_task(proc, 500, "510 ");
        fixture_task(proc, 510, "");
        let mut tree = ProcessTree::with_excluded(proc, 100, Some(50)).unwrap();
        assert_eq!(tree.pids(), &[100]);
        tree.adopt_orphans_of(50, Box::new(|pid| pid == 500));
        assert_eq!(tree.pids(), &[100, 400, 410]);
        assert_eq!(tree.adopter_children(), &[400, 500]);

        // The target exits and is reaped: the adopted ones are still watched.
        std::fs::remove_dir_all(proc.join("100")).unwrap();
        fixture_task(proc, 50, "400 500 ");
        assert!(!tree.refresh());
        assert_eq!(tree.pids(), &[400, 410]);
    }

    #[test]
    fn a_real_child_is_found_through_the_gate() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x; sleep 5 & wait"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut tree = ProcessTree::new(Path::new("/proc"), child.id()).unwrap();
        assert_eq!(tree.pids(), &[child.id()]);
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
        let mut found = false;
        let give_up = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < give_up {
            tree.refresh_if_changed();
            if tree.pids().len() == 2 {
                found = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for &pid in tree.pids().iter().rev() {
            // SAFETY: kill has no memory preconditions; these are our child and grandchild.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = child.wait();
        assert!(found, "the sleep child never showed: {:?}", tree.pids());
    }
}
