//! The target's memory cgroup: what it holds that cannot be reclaimed (usage minus page
//! cache) against the smallest limit above it, and its page cache beside it.
//!
//! Containers, SLURM and notebook platforms enforce memory through cgroups, and the kernel's
//! OOM killer fires on the cgroup's limit long before the host runs out. This module finds
//! the target's memory cgroup and reads it; it owns everything cgroup-specific.
//!
//! Finding the cgroup: `/proc/PID/cgroup` (<https://man7.org/linux/man-pages/man7/cgroups.7.html>)
//! names it, one line per hierarchy: `0::/path` for the unified (v2) hierarchy,
//! `N:memory:/path` (controllers comma-separated) for the v1 memory controller. Where those
//! hierarchies are mounted comes from `/proc/self/mountinfo`
//! (<https://docs.kernel.org/filesystems/proc.html#proc-pid-mountinfo-information-about-mounts>),
//! with the mount's root subtracted from the path (a container sees its own cgroup as `/`),
//! or from the standard layout under a given root ([`CgroupMounts::standard`]) for fixture
//! trees. On a hybrid host (v1 controllers plus an empty v2 tree at `/sys/fs/cgroup/unified`,
//! like this one) the v1 memory controller wins: the v2 tree only counts memory when its
//! `cgroup.controllers` lists `memory`.
//!
//! Reading it: the figure is what the cgroup holds that the kernel cannot drop to make
//! room, usage minus **all** file-backed LRU pages (page cache, active and inactive). A
//! training run reads its data set every epoch and writes checkpoints; the page cache
//! this leaves behind is charged to the cgroup and fills it to the limit, yet the kernel
//! reclaims clean cache (and writes back and reclaims dirty cache) before it OOM-kills
//! anything. kubelet's working set (usage minus only *inactive* file) counts cache as
//! used once it has been read twice, when the kernel moves it to the active list: a run
//! re-reading a 370 MiB data set in a 400 MiB cgroup looked 99.9% full at its second
//! epoch while its processes held 25 MiB. Shared memory and tmpfs pages (`shmem`) are
//! swap-backed, live on the anon LRU lists and stay counted: without swap nothing can
//! reclaim them, and a run filling a tmpfs inside its cgroup is OOM-killed like a leak.
//!
//! - v2 (<https://docs.kernel.org/admin-guide/cgroup-v2.html#memory-interface-files>):
//!   `memory.current` minus `active_file` and `inactive_file` of `memory.stat`, bytes (not
//!   minus `file`, which includes `shmem`); the limit is the smallest `memory.max` (`max` =
//!   none) of the cgroup and every ancestor up to the mount root. `memory.high` throttles
//!   instead of killing and is not treated as a limit.
//! - v1 (<https://docs.kernel.org/admin-guide/cgroup-v1/memory.html>): `memory.usage_in_bytes`
//!   minus `total_active_file` and `total_inactive_file` of `memory.stat` (the hierarchical
//!   counts, which include the descendants as the usage does), bytes; the limit is
//!   `hierarchical_memory_limit` of `memory.stat` (already the smallest over the ancestors),
//!   falling back to `memory.limit_in_bytes`. Values of 2^62 and above mean "no limit" (the
//!   kernel writes `PAGE_COUNTER_MAX` pages, 9223372036854771712 on 4 KiB pages). `memsw`
//!   limits are ignored. `memory.usage_in_bytes` runs ahead of the exact charge by the
//!   per-CPU charge batches (a few hundred KiB per CPU), the same figure the OOM decision
//!   uses.
//!
//! The page cache left out stays visible: the same `memory.stat` read gives a second
//! resource, `cgroup_cache` (kind [`ResourceKind::CgroupCache`], `active_file +
//! inactive_file`, limit `u64::MAX`), which is recorded and reported like every resource
//! but never predicted against nor alerted on.
//!
//! Following a move: a job scheduler, systemd or a user may move the target to another cgroup
//! mid-run (`echo PID > .../cgroup.procs`). The old cgroup then either keeps existing (and
//! its numbers no longer include the target) or is removed (and reading it fails). A source
//! made by [`CgroupMemory::for_pid`] keeps `/proc/PID/cgroup` open and re-reads it (one
//! `pread`, compared with the text it was located from) at most once a second and whenever a
//! read fails; when it names another cgroup, [`CgroupMemory::relocate`] reopens the source
//! there and logs the move once. The registered resource keeps its id and its description
//! (resource descriptions are fixed at registration).
//!
//! With no limit anywhere the resource still exists, with limit `u64::MAX`, so its peak is
//! reported; the predictor does not predict against it. The OOM-kill counter, for diagnosing
//! a death afterwards, is read separately through [`OomKillCounter`].

use std::path::{Component, Path, PathBuf};

use watchdog_types::{ResourceId, ResourceKind, Sample};

/// What `/proc/PID/cgroup` says about memory, as [`locate`] takes it.
pub use watchdog_procfs::{ProcCgroup, parse_proc_cgroup};
use watchdog_procfs::{ProcRoot, parse_stat};

use crate::procfile::{KeptOpenFile, key_value_lines, parse_u64};
use crate::shared::{Reads, TickFile};
use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// v1 limits at or above this are "unlimited" (the kernel's `PAGE_COUNTER_MAX` pages is just below 2^63).
pub const V1_UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// Which cgroup hierarchy the memory controller is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The legacy per-controller hierarchy (`/sys/fs/cgroup/memory`).
    V1,
    /// The unified hierarchy (`/sys/fs/cgroup`).
    V2,
}

/// Where one cgroup hierarchy is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The mount point (`/sys/fs/cgroup/memory`).
    pub mount_point: PathBuf,
    /// The cgroup path shown as the mount's root (`/` unless a container bind-mounted a subtree).
    pub root: String,
}

/// The mounts of the hierarchies that can hold the memory controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// The v1 hierarchy with the `memory` controller.
    pub v1_memory: Option<CgroupMount>,
    /// The unified (v2) hierarchy.
    pub v2: Option<CgroupMount>,
}

impl CgroupMounts {
    /// Finds the cgroup mounts in the text of `/proc/PID/mountinfo`; the first of each kind wins.
    pub fn from_mountinfo(text: &str) -> Self {
        let mut out = Self::default();
        for m in watchdog_procfs::parse_mountinfo(text) {
            let memory = m.super_options.split(',').any(|o| o == "memory");
            let mount = CgroupMount {
                mount_point: m.mount_point,
                root: m.root,
            };
            match m.fs_type.as_str() {
                "cgroup2" if out.v2.is_none() => out.v2 = Some(mount),
                "cgroup" if out.v1_memory.is_none() && memory => out.v1_memory = Some(mount),
                _ => {}
            }
        }
        out
    }

    /// Reads `<proc_root>/self/mountinfo`: the mounts as this process (the watchdog) sees them.
    pub fn read(proc_root: &Path) -> Result<Self, SourceError> {
        let text = ProcRoot::from(proc_root).own_mountinfo_text()?;
        Ok(Self::from_mountinfo(&text))
    }

    /// The same mounts under the directory of a recorded tree (their mount points are the
    /// ones the recorded kernel named, such as `/sys/fs/cgroup`).
    pub fn under(self, recorded: &Path) -> Self {
        let rebase = |m: CgroupMount| CgroupMount {
            mount_point: watchdog_procfs::roots::rerooted(recorded, &m.mount_point),
            root: m.root,
        };
        Self {
            v1_memory: self.v1_memory.map(rebase),
            v2: self.v2.map(rebase),
        }
    }

    /// The standard layouts under `cgroup_root` (normally `/sys/fs/cgroup`): v1 memory at
    /// `<root>/memory`, v2 at `<root>` (pure v2) or `<root>/unified` (hybrid), each when it exists.
    pub fn standard(cgroup_root: &Path) -> Self {
        let mount = |p: PathBuf| CgroupMount {
            mount_point: p,
            root: "/".into(),
        };
        let v1 = cgroup_root.join("memory");
        let v2 = if cgroup_root.join("cgroup.controllers").exists() {
            Some(cgroup_root.to_path_buf())
        } else if cgroup_root.join("unified/cgroup.controllers").exists() {
            Some(cgroup_root.join("unified"))
        } else {
            None
        };
        Self {
            v1_memory: v1.is_dir().then(|| mount(v1)),
            v2: v2.map(mount),
        }
    }
}

/// A memory cgroup found for a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLocation {
    /// Which hierarchy.
    pub version: CgroupVersion,
    /// The cgroup's directory.
    pub dir: PathBuf,
    /// The hierarchy's mount point: the last ancestor whose limit counts.
    pub mount_point: PathBuf,
}

impl CgroupLocation {
    /// The cgroup's directory and its ancestors up to the mount point, innermost first.
    pub fn ancestors(&self) -> impl Iterator<Item = &Path> {
        let mount = self.mount_point.as_path();
        let mut done = false;
        self.dir.ancestors().take_while(move |p| {
            if done {
                return false;
            }
            done = *p == mount;
            p.starts_with(mount)
        })
    }
}

/// Maps a cgroup path from `/proc/PID/cgroup` into a mount, subtracting the mount's root.
fn dir_in_mount(mount: &CgroupMount, cgroup_path: &str) -> PathBuf {
    let path = Path::new(cgroup_path);
    let relative = path.strip_prefix(&mount.root).unwrap_or(path);
    let mut dir = mount.mount_point.clone();
    for c in relative.components() {
        // Only plain names: a hostile `..` must not walk out of the mount.
        if let Component::Normal(name) = c {
            dir.push(name);
        }
    }
    dir
}

/// Picks the memory cgroup from `/proc/PID/cgroup` and the mounts: v1 memory when the process
/// has a v1 memory line and that hierarchy is mounted, else v2 when `v2_has_memory` says the
/// unified hierarchy carries the memory controller. Pure.
pub fn locate(
    proc_cgroup: &ProcCgroup,
    mounts: &CgroupMounts,
    v2_has_memory: bool,
) -> Option<CgroupLocation> {
    if let (Some(path), Some(mount)) = (&proc_cgroup.v1_memory, &mounts.v1_memory) {
        return Some(CgroupLocation {
            version: CgroupVersion::V1,
            dir: dir_in_mount(mount, path),
            mount_point: mount.mount_point.clone(),
        });
    }
    if let (Some(path), Some(mount), true) = (&proc_cgroup.v2, &mounts.v2, v2_has_memory) {
        return Some(CgroupLocation {
            version: CgroupVersion::V2,
            dir: dir_in_mount(mount, path),
            mount_point: mount.mount_point.clone(),
        });
    }
    None
}

/// Finds the memory cgroup of `pid` from `<proc_root>/PID/cgroup` and `mounts`.
pub fn locate_for_pid(
    proc_root: &Path,
    pid: u32,
    mounts: &CgroupMounts,
) -> Result<CgroupLocation, SourceError> {
    let root = ProcRoot::from(proc_root);
    let text = root.cgroup_text(pid)?;
    locate_from_text(&text, &root.pid_file(pid, "cgroup"), pid, mounts)
}

/// [`locate`] on the text of `/proc/PID/cgroup` (read from `path`), asking the unified
/// hierarchy whether it carries the memory controller.
fn locate_from_text(
    text: &str,
    path: &Path,
    pid: u32,
    mounts: &CgroupMounts,
) -> Result<CgroupLocation, SourceError> {
    let proc_cgroup = parse_proc_cgroup(text);
    let v2_has_memory = match &mounts.v2 {
        Some(m) => watchdog_procfs::read_small(&m.mount_point.join("cgroup.controllers"))
            .map(|t| t.split_whitespace().any(|c| c == "memory"))
            .unwrap_or(false),
        None => false,
    };
    locate(&proc_cgroup, mounts, v2_has_memory).ok_or_else(|| {
        SourceError::Gone(format!(
            "process {pid} has no memory cgroup: {} names no mounted hierarchy with the memory controller",
            path.display()
        ))
    })
}

/// Value of `key` in a flat-keyed file (`memory.stat`, `memory.events`, `memory.oom_control`).
pub fn stat_value(text: &[u8], key: &str) -> Option<u64> {
    key_value_lines(text).find_map(|(k, v)| (k == key.as_bytes()).then(|| parse_u64(v))?)
}

/// Parses a v2 `memory.max`: bytes, or `u64::MAX` for `max`.
pub fn parse_v2_limit(text: &[u8]) -> Option<u64> {
    let t = text.trim_ascii();
    if t == b"max" {
        Some(u64::MAX)
    } else {
        parse_u64(t)
    }
}

/// Normalizes a v1 limit: at or above 2^62 is "unlimited" (`u64::MAX`).
pub fn normalize_v1_limit(bytes: u64) -> u64 {
    if bytes >= V1_UNLIMITED_THRESHOLD {
        u64::MAX
    } else {
        bytes
    }
}

/// What the cgroup figure needs from one `memory.stat`, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFigures {
    /// `active_file` (v2) or `total_active_file` (v1): page cache read or written more than once.
    pub active_file: u64,
    /// `inactive_file` (v2) or `total_inactive_file` (v1): page cache touched once.
    pub inactive_file: u64,
    /// v1 `hierarchical_memory_limit`, normalized by [`normalize_v1_limit`]; `None` on v2 or
    /// when the line is missing.
    pub hierarchical_limit: Option<u64>,
}

/// Reads the file LRU counts (and on v1 the hierarchical limit) from `memory.stat` in one
/// pass. A missing file LRU line is an error (the kernel always writes both): counting the
/// cache as used instead would raise false alarms.
pub fn parse_memory_stat(text: &[u8], version: CgroupVersion) -> Result<StatFigures, String> {
    let (active_key, inactive_key): (&[u8], &[u8]) = match version {
        CgroupVersion::V1 => (b"total_active_file", b"total_inactive_file"),
        CgroupVersion::V2 => (b"active_file", b"inactive_file"),
    };
    let (mut active, mut inactive, mut limit) = (None, None, None);
    for (k, v) in key_value_lines(text) {
        if k == active_key {
            active = parse_u64(v);
        } else if k == inactive_key {
            inactive = parse_u64(v);
        } else if version == CgroupVersion::V1 && k == b"hierarchical_memory_limit" {
            limit = parse_u64(v).map(normalize_v1_limit);
        }
    }
    let need = |value: Option<u64>, key: &[u8]| {
        value.ok_or_else(|| format!("expected a line '{} BYTES'", String::from_utf8_lossy(key)))
    };
    Ok(StatFigures {
        active_file: need(active, active_key)?,
        inactive_file: need(inactive, inactive_key)?,
        hierarchical_limit: limit,
    })
}

/// Usage minus the file-backed LRU pages (saturating at 0): the memory the kernel cannot
/// reclaim without swap. Shared memory and tmpfs (`shmem`) are not file LRU pages and stay in.
pub fn unreclaimable(usage: u64, active_file: u64, inactive_file: u64) -> u64 {
    usage
        .saturating_sub(active_file)
        .saturating_sub(inactive_file)
}

/// One reading of a memory cgroup, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupReading {
    /// `memory.current` (v2) or `memory.usage_in_bytes` (v1).
    pub usage: u64,
    /// `active_file` (v2) or `total_active_file` (v1) of `memory.stat`.
    pub active_file: u64,
    /// `inactive_file` (v2) or `total_inactive_file` (v1) of `memory.stat`.
    pub inactive_file: u64,
    /// The smallest limit over the cgroup and its ancestors; `u64::MAX` when none.
    pub limit: u64,
}

impl CgroupReading {
    /// A reading from `usage`, the counts of one `memory.stat` and the effective limit.
    pub fn new(usage: u64, stat: &StatFigures, limit: u64) -> Self {
        Self {
            usage,
            active_file: stat.active_file,
            inactive_file: stat.inactive_file,
            limit,
        }
    }

    /// The `cgroup_memory` figure: usage minus all file-backed page cache.
    pub fn used(&self) -> u64 {
        unreclaimable(self.usage, self.active_file, self.inactive_file)
    }

    /// The `cgroup_cache` figure: active plus inactive file-backed page cache.
    pub fn file_cache(&self) -> u64 {
        self.active_file.saturating_add(self.inactive_file)
    }
}

/// How often a [`CgroupMemory`] made for a PID re-reads `/proc/PID/cgroup` to notice a move
/// (it also does on every failed read).
pub const RELOCATE_CHECK_NS: u64 = 1_000_000_000;

/// What a [`CgroupMemory`] needs to follow its process to another cgroup.
#[derive(Debug)]
struct Follow {
    pid: u32,
    mounts: CgroupMounts,
    /// `/proc/PID/cgroup`, kept open: bound to the process, it fails once the process is gone.
    file: KeptOpenFile,
    /// `/proc/PID/stat`, kept open, to tell a move from an exit (see [`is_exiting`]); `None`
    /// where it cannot be opened (recorded fixtures hold only the `cgroup` file).
    stat: Option<KeptOpenFile>,
    /// Its text when the current location was found.
    known: Vec<u8>,
    next_check_ns: u64,
}

/// The `cgroup_memory` source.
#[derive(Debug)]
pub struct CgroupMemory {
    location: CgroupLocation,
    /// How the cgroup's files are opened (again after a move): alone, or shared by the runs
    /// of a service that live in the same cgroup.
    reads: Reads,
    usage: TickFile,
    stat: TickFile,
    /// v2: `memory.max` of the cgroup and each ancestor that has one; v1: `memory.limit_in_bytes`
    /// only when `memory.stat` lacks `hierarchical_memory_limit`.
    limits: Vec<TickFile>,
    id: Option<ResourceId>,
    /// The `cgroup_cache` resource, registered with `cgroup_memory`.
    cache_id: Option<ResourceId>,
    /// Set by [`for_pid`](Self::for_pid): the process to follow when it changes cgroups.
    follow: Option<Follow>,
}

impl CgroupMemory {
    /// Opens the cgroup at `location` through `reads` and reads it once, without registering
    /// a resource.
    pub fn open(location: CgroupLocation, reads: &Reads) -> Result<Self, SourceError> {
        let dir = &location.dir;
        let (usage_name, v2) = match location.version {
            CgroupVersion::V1 => ("memory.usage_in_bytes", false),
            CgroupVersion::V2 => ("memory.current", true),
        };
        let usage = reads.file(dir.join(usage_name), 64).map_err(|e| match e {
            SourceError::Read { path, source } if source.kind() == std::io::ErrorKind::NotFound => {
                SourceError::Gone(format!(
                    "{path} does not exist: the target is in the root cgroup or the memory controller is not enabled for its cgroup"
                ))
            }
            other => other,
        })?;
        let mut stat = reads.file(dir.join("memory.stat"), 4096)?;
        let mut limits = Vec::new();
        if v2 {
            for ancestor in location.ancestors() {
                match reads.file(ancestor.join("memory.max"), 64) {
                    Ok(f) => limits.push(f),
                    // The hierarchy's root has no memory.max; neither has a cgroup whose
                    // parent does not delegate the memory controller.
                    Err(SourceError::Read { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        } else if stat_value(stat.read()?, "hierarchical_memory_limit").is_none() {
            limits.push(reads.file(dir.join("memory.limit_in_bytes"), 64)?);
        }
        let mut me = Self {
            location,
            reads: reads.clone(),
            usage,
            stat,
            limits,
            id: None,
            cache_id: None,
            follow: None,
        };
        me.read()?;
        Ok(me)
    }

    /// Finds `pid`'s memory cgroup, opens it through `reads` and registers `cgroup_memory` in
    /// `table`. The source follows `pid` when it moves to another cgroup (see
    /// [`relocate`](Self::relocate)).
    pub fn for_pid(
        proc_root: &Path,
        pid: u32,
        mounts: &CgroupMounts,
        reads: &Reads,
        table: &mut ResourceTable,
    ) -> Result<Self, SourceError> {
        let root = ProcRoot::from(proc_root);
        let mut file = root.keep_open_pid(pid, "cgroup", 1024)?;
        let path = file.path().to_path_buf();
        let mut stat = root.keep_open_pid(pid, "stat", 512).ok();
        let mut known = file.read()?.to_vec();
        // A process that has exited already has left its cgroups (on v1 its file names the
        // root). A child of this watchdog (`run`'s command, ended within milliseconds) was
        // charged where it was forked: the watchdog's own memory cgroup.
        let own = std::process::id();
        let exited_child = stat.as_mut().is_some_and(|s| {
            s.read()
                .ok()
                .and_then(parse_stat)
                .is_some_and(|st| st.is_exiting() && st.ppid == own)
        });
        if exited_child
            && let Ok(mut mine) = root.keep_open_pid(own, "cgroup", 1024)
            && let Ok(text) = mine.read()
        {
            known = text.to_vec();
        }
        let location = locate_from_text(&String::from_utf8_lossy(&known), &path, pid, mounts)?;
        let mut me = Self::open(location, reads)?;
        me.follow = Some(Follow {
            pid,
            mounts: mounts.clone(),
            file,
            stat,
            known,
            next_check_ns: 0,
        });
        me.register(table)?;
        Ok(me)
    }

    /// Re-reads the followed process's `/proc/PID/cgroup` and, when it names another memory
    /// cgroup than the one being read, reopens this source there (same resource id) and logs
    /// the move once. Returns whether it moved.
    ///
    /// Nothing to do (`Ok(false)`) for a source made by [`open`](Self::open), which follows no
    /// process, when the text is unchanged (one `pread`, no allocation), or when the process
    /// is gone (its kept-open file fails) or exiting (an exiting task leaves its cgroups).
    /// Fails when the new cgroup cannot be opened; the move is then looked at again on the
    /// next call.
    pub fn relocate(&mut self) -> Result<bool, SourceError> {
        let Some(follow) = &mut self.follow else {
            return Ok(false);
        };
        let Ok(text) = follow.file.read() else {
            return Ok(false);
        };
        if text == follow.known.as_slice() {
            return Ok(false);
        }
        let text = text.to_vec();
        // An exiting task leaves its cgroups (on v1 its file then names the root): that is
        // no move, and its last cgroup stays the one that counts.
        if follow.stat.as_mut().is_some_and(is_exiting) {
            return Ok(false);
        }
        let location = locate_from_text(
            &String::from_utf8_lossy(&text),
            follow.file.path(),
            follow.pid,
            &follow.mounts,
        )?;
        if location == self.location {
            // Another hierarchy changed (cpu, pids ...): the memory cgroup is the same.
            follow.known = text;
            return Ok(false);
        }
        let pid = follow.pid;
        let fresh = Self::open(location, &self.reads)?;
        tracing::info!(
            "process {pid} moved from cgroup {} to {}: watching {} now",
            self.location.dir.display(),
            fresh.location.dir.display(),
            fresh.location.dir.display()
        );
        self.location = fresh.location;
        self.usage = fresh.usage;
        self.stat = fresh.stat;
        self.limits = fresh.limits;
        if let Some(follow) = &mut self.follow {
            follow.known = text;
        }
        Ok(true)
    }

    /// Registers the `cgroup_memory` resource, its source saying where the limit comes from,
    /// and beside it the unlimited `cgroup_cache` resource (the page cache left out of
    /// `cgroup_memory`, recorded and reported, never alerted on). Returns `cgroup_memory`'s id.
    pub fn register(&mut self, table: &mut ResourceTable) -> Result<ResourceId, SourceError> {
        let reading = self.read()?;
        let dir = self.location.dir.display();
        let source = if reading.limit == u64::MAX {
            format!("{dir} (no memory limit on it or its ancestors)")
        } else {
            match self.limit_origin() {
                Some(origin) if origin != self.location.dir => {
                    format!("{dir} (limit set on ancestor {})", origin.display())
                }
                _ => dir.to_string(),
            }
        };
        let id = table.register(ResourceKind::CgroupMemory, "cgroup_memory".into(), source);
        let cache_source =
            format!("{dir} (page cache: active + inactive file, not in cgroup_memory)");
        self.cache_id = Some(table.register(
            ResourceKind::CgroupCache,
            "cgroup_cache".into(),
            cache_source,
        ));
        self.id = Some(id);
        Ok(id)
    }

    /// Where the cgroup is (the one being read now, after any [`relocate`](Self::relocate)).
    pub fn location(&self) -> &CgroupLocation {
        &self.location
    }

    /// The registered `cgroup_memory` resource's id.
    pub fn id(&self) -> Option<ResourceId> {
        self.id
    }

    /// The registered `cgroup_cache` resource's id.
    pub fn cache_id(&self) -> Option<ResourceId> {
        self.cache_id
    }

    /// The directory of the (v2) cgroup whose `memory.max` is the smallest, as last read.
    fn limit_origin(&self) -> Option<PathBuf> {
        self.limits
            .iter()
            .filter_map(|f| Some((parse_v2_limit(f.last())?, f.path())))
            .min_by_key(|(v, _)| *v)
            .and_then(|(_, p)| p.parent().map(Path::to_path_buf))
    }

    /// Reads usage, the file cache and the effective limit once. Never allocates once warm.
    pub fn read(&mut self) -> Result<CgroupReading, SourceError> {
        let usage = parse_u64(self.usage.read()?).ok_or_else(|| parse_error(&self.usage))?;
        let version = self.location.version;
        let stat =
            parse_memory_stat(self.stat.read()?, version).map_err(|what| SourceError::Parse {
                path: self.stat.path().display().to_string(),
                what,
            })?;
        let v2 = version == CgroupVersion::V2;
        let mut limit = stat.hierarchical_limit.unwrap_or(u64::MAX);
        for f in &mut self.limits {
            let text = f.read()?;
            let value = if v2 {
                parse_v2_limit(text)
            } else {
                parse_u64(text).map(normalize_v1_limit)
            };
            limit = limit.min(value.ok_or_else(|| parse_error(f))?);
        }
        Ok(CgroupReading::new(usage, &stat, limit))
    }

    /// Opens this cgroup's OOM-kill counter.
    pub fn oom_kill_counter(&self) -> Result<OomKillCounter, SourceError> {
        OomKillCounter::open(&self.location)
    }
}

/// Whether the process of this `/proc/PID/stat` is exiting or gone. Read after its
/// `/proc/PID/cgroup`, a "no" means that text was read before the exit began.
fn is_exiting(stat: &mut KeptOpenFile) -> bool {
    match stat.read().ok().and_then(parse_stat) {
        Some(s) => s.is_exiting(),
        None => true,
    }
}

fn parse_error(f: &TickFile) -> SourceError {
    SourceError::Parse {
        path: f.path().display().to_string(),
        what: format!(
            "expected a number of bytes, found '{}'",
            watchdog_types::units::printable(String::from_utf8_lossy(f.last()).trim())
        ),
    }
}

impl Source for CgroupMemory {
    fn name(&self) -> &str {
        "cgroup"
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        let Some(id) = self.id else {
            return Ok(Outcome::Idle);
        };
        if let Some(follow) = &mut self.follow
            && tick.now_ns >= follow.next_check_ns
        {
            follow.next_check_ns = tick.now_ns.saturating_add(RELOCATE_CHECK_NS);
            self.relocate()?;
        }
        let r = match self.read() {
            Ok(r) => r,
            // The old cgroup may have been removed after the target moved out: look now.
            Err(e) => match self.relocate() {
                Ok(true) => self.read()?,
                Ok(false) | Err(_) => return Err(e),
            },
        };
        out(Sample {
            resource: id,
            t_ns: tick.now_ns,
            used: r.used(),
            limit: r.limit,
        });
        if let Some(cache) = self.cache_id {
            out(Sample {
                resource: cache,
                t_ns: tick.now_ns,
                used: r.file_cache(),
                limit: u64::MAX,
            });
        }
        Ok(Outcome::Sampled)
    }
}

/// The cgroup's count of processes killed by the OOM killer: v2 `oom_kill` of `memory.events`
/// (this cgroup and its descendants), v1 `oom_kill` of `memory.oom_control` (Linux 4.13+).
///
/// Cheap (one `pread` of a kept-open file); read it when the target dies to tell an OOM kill
/// from any other SIGKILL.
#[derive(Debug)]
pub struct OomKillCounter {
    file: KeptOpenFile,
}

impl OomKillCounter {
    /// Opens the counter file of the cgroup at `location`.
    pub fn open(location: &CgroupLocation) -> Result<Self, SourceError> {
        let name = match location.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let file = KeptOpenFile::with_capacity(location.dir.join(name), 256)?;
        Ok(Self { file })
    }

    /// The number of OOM kills so far.
    pub fn read(&mut self) -> Result<u64, SourceError> {
        let text = self.file.read()?;
        stat_value(text, "oom_kill").ok_or_else(|| SourceError::Parse {
            path: self.file.path().display().to_string(),
            what: "no oom_kill line (v1 needs Linux 4.13)".into(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_finds_hybrid_mounts_and_unescapes() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
36 31 0:33 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup cgroup rw,cpu\n\
41 31 0:38 /docker/a\\040b /sys/fs/cgroup/uni\\040fied rw - cgroup2 cgroup2 rw\n";
        let m = CgroupMounts::from_mountinfo(text);
        let v1 = m.v1_memory.unwrap();
        assert_eq!(v1.mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(v1.root, "/");
        let v2 = m.v2.unwrap();
        assert_eq!(v2.mount_point, Path::new("/sys/fs/cgroup/uni fied"));
        assert_eq!(v2.root, "/docker/a b");
    }

    #[test]
    fn locate_prefers_v1_memory_on_hybrid_and_strips_mount_root() {
        let mounts = CgroupMounts {
            v1_memory: Some(CgroupMount {
                mount_point: "/sys/fs/cgroup/memory".into(),
                root: "/docker/abc".into(),
            }),
            v2: Some(CgroupMount {
                mount_point: "/sys/fs/cgroup/unified".into(),
                root: "/".into(),
            }),
        };
        let pc = parse_proc_cgroup("4:memory:/docker/abc/inner\n0::/\n");
        let loc = locate(&pc, &mounts, false).unwrap();
        assert_eq!(loc.version, CgroupVersion::V1);
        assert_eq!(loc.dir, Path::new("/sys/fs/cgroup/memory/inner"));
        // Pure v2 without the memory controller: nothing.
        let pc = parse_proc_cgroup("0::/a\n");
        assert_eq!(locate(&pc, &mounts, false), None);
        let loc = locate(&pc, &mounts, true).unwrap();
        assert_eq!(loc.dir, Path::new("/sys/fs/cgroup/unified/a"));
        // `..` cannot escape the mount.
        let pc = parse_proc_cgroup("0::/../../etc\n");
        let loc = locate(&pc, &mounts, true).unwrap();
        assert_eq!(loc.dir, Path::new("/sys/fs/cgroup/unified/etc"));
    }

    #[test]
    fn ancestors_stop_at_the_mount_point() {
        let loc = CgroupLocation {
            version: CgroupVersion::V2,
            dir: "/sys/fs/cgroup/a/b".into(),
            mount_point: "/sys/fs/cgroup".into(),
        };
        let got: Vec<_> = loc.ancestors().collect();
        assert_eq!(
            got,
            vec![
                Path::new("/sys/fs/cgroup/a/b"),
                Path::new("/sys/fs/cgroup/a"),
                Path::new("/sys/fs/cgroup")
            ]
        );
    }

    /// `memory.stat` of a 400 MiB v1 cgroup captured live on this machine (kernel 6.18): a
    /// process holding 24 MiB, a 96 MiB file read three times (active cache), a 48 MiB file
    /// written once (inactive cache) and 32 MiB in a tmpfs (shmem).
    const V1_STAT: &[u8] = include_bytes!("../tests/fixtures/cache-v1/memory.stat");
    /// A v2 `memory.stat` written from the kernel documentation (this machine has no v2
    /// memory controller): 25 MiB anon, 64 MiB shmem, 300 MiB active and 8 MiB inactive file.
    const V2_STAT: &[u8] = include_bytes!("../tests/fixtures/cache-v2/memory.stat");

    #[test]
    fn memory_stat_file_lru_counts_v1_and_v2() {
        let v1 = parse_memory_stat(V1_STAT, CgroupVersion::V1).unwrap();
        // The hierarchical total_* lines, not the cgroup-local active_file/inactive_file.
        assert_eq!(
            v1,
            StatFigures {
                active_file: 102461440,
                inactive_file: 62869504,
                hierarchical_limit: Some(400 << 20),
            }
        );
        let v2 = parse_memory_stat(V2_STAT, CgroupVersion::V2).unwrap();
        assert_eq!(
            v2,
            StatFigures {
                active_file: 300 << 20,
                inactive_file: 8 << 20,
                hierarchical_limit: None,
            }
        );
        // v2's `file` (372 MiB) includes shmem: it must not be what is subtracted.
        assert_eq!(stat_value(V2_STAT, "file"), Some(372 << 20));
        assert_eq!(stat_value(V2_STAT, "shmem"), Some(64 << 20));
    }

    #[test]
    fn the_figure_leaves_out_page_cache_and_keeps_shmem() {
        // v1, captured: usage 236785664 = rss 33292288 + cache 198885376 (of which shmem
        // 33554432) + kernel memory; the figure keeps rss, shmem and kernel.
        let f = parse_memory_stat(V1_STAT, CgroupVersion::V1).unwrap();
        let r = CgroupReading::new(236785664, &f, 400 << 20);
        assert_eq!(r.used(), 71454720);
        assert!(
            r.used() >= 33292288 + 33554432,
            "rss and shmem stay counted"
        );
        assert_eq!(r.file_cache(), 165330944);
        // v2: memory.current 399 MiB = anon 25 + file 372 (shmem 64 in it) + kernel 2.
        let f = parse_memory_stat(V2_STAT, CgroupVersion::V2).unwrap();
        let r = CgroupReading::new(399 << 20, &f, 400 << 20);
        assert_eq!(r.used(), (25 + 64 + 2) << 20);
        assert_eq!(r.file_cache(), 308 << 20);
    }

    #[test]
    fn memory_stat_without_file_lru_lines_is_an_error() {
        let err = parse_memory_stat(b"anon 5\nfile 7\n", CgroupVersion::V2).unwrap_err();
        assert!(err.contains("active_file"), "{err}");
        let err = parse_memory_stat(b"total_active_file 1\ninactive_file 2\n", CgroupVersion::V1)
            .unwrap_err();
        assert!(err.contains("total_inactive_file"), "{err}");
        let err = parse_memory_stat(
            b"total_active_file x\ntotal_inactive_file 2\n",
            CgroupVersion::V1,
        )
        .unwrap_err();
        assert!(err.contains("total_active_file"), "{err}");
    }

    #[test]
    fn limit_and_figure_table() {
        assert_eq!(parse_v2_limit(b"max\n"), Some(u64::MAX));
        assert_eq!(parse_v2_limit(b"1073741824\n"), Some(1 << 30));
        assert_eq!(parse_v2_limit(b"lots"), None);
        assert_eq!(normalize_v1_limit(9223372036854771712), u64::MAX);
        assert_eq!(normalize_v1_limit(1 << 62), u64::MAX);
        assert_eq!(normalize_v1_limit((1 << 62) - 1), (1 << 62) - 1);
        assert_eq!(unreclaimable(100, 20, 30), 50);
        assert_eq!(unreclaimable(10, 20, 30), 0);
        assert_eq!(unreclaimable(u64::MAX, u64::MAX, u64::MAX), 0);
        assert_eq!(
            stat_value(b"file 5\ninactive_file 7\n", "inactive_file"),
            Some(7)
        );
        assert_eq!(
            stat_value(b"total_inactive_file 9\n", "inactive_file"),
            None
        );
    }
}
