//! Free space and free inodes of one filesystem, from `fstatvfs` on a kept-open descriptor.
//!
//! Checkpoints fill disks; a full `/dev/shm` kills DataLoader workers with "bus error". The
//! [`Filesystem`] source watches the filesystem holding one path and reports `disk:<path>`
//! (bytes) and `inodes:<path>` (count; not registered when the filesystem reports no inodes,
//! as btrfs and some FUSE filesystems do). See statvfs(3)
//! (<https://man7.org/linux/man-pages/man3/statvfs.3.html>).
//!
//! Which figure counts depends on who the target is. ext4 reserves blocks (5% by default) for
//! root: here `/` shows 234 GB free (`f_bfree`) but 73 GB available to others (`f_bavail`).
//! For a non-root target the limit is `used + f_bavail` (it hits ENOSPC when `f_bavail`
//! reaches 0); for a root target (effective UID 0) it is `used + f_bfree`, i.e. `f_blocks`.
//! The same goes for inodes with `f_favail`/`f_ffree`. `used` is `f_blocks - f_bfree` either
//! way, so the series does not jump when the rule changes. Byte figures are counted in
//! `f_frsize` units.
//!
//! The descriptor is opened with `O_PATH`, which needs no read permission and keeps no data
//! open, but does keep the mount busy: `umount` (without `-l`) of a watched filesystem fails
//! with EBUSY until the watchdog drops the source.

use std::path::{Path, PathBuf};

use rustix::fs::StatVfs;
use watchdog_types::{ResourceId, ResourceKind, Sample};

use crate::shared::{Reads, TickFilesystem};
use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// The statvfs fields the figures come from (a plain copy, so tables can test the arithmetic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VfsFigures {
    /// Fragment size: the unit of the block counts, bytes.
    pub frsize: u64,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks, including those reserved for root.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes (0 when the filesystem does not have a fixed number).
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Free inodes available to unprivileged users.
    pub favail: u64,
}

impl From<&StatVfs> for VfsFigures {
    fn from(s: &StatVfs) -> Self {
        Self {
            frsize: s.f_frsize,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            favail: s.f_favail,
        }
    }
}

/// `(used, limit)` for a total, its free count and the free count the target may use. Pure.
pub fn used_and_limit(total: u64, free: u64, available: u64, target_is_root: bool) -> (u64, u64) {
    let used = total.saturating_sub(free);
    let usable = if target_is_root { free } else { available };
    // Available never exceeds free; clamp in case a filesystem reports otherwise.
    (used, used.saturating_add(usable.min(free)))
}

impl VfsFigures {
    /// `(used, limit)` in bytes for a root or non-root target.
    pub fn bytes(&self, target_is_root: bool) -> (u64, u64) {
        let (used, limit) = used_and_limit(self.blocks, self.bfree, self.bavail, target_is_root);
        (
            used.saturating_mul(self.frsize),
            limit.saturating_mul(self.frsize),
        )
    }

    /// `(used, limit)` in inodes; `None` when the filesystem reports no inodes.
    pub fn inodes(&self, target_is_root: bool) -> Option<(u64, u64)> {
        (self.files > 0)
            .then(|| used_and_limit(self.files, self.ffree, self.favail, target_is_root))
    }
}

/// The `disk:<path>` and `inodes:<path>` source.
#[derive(Debug)]
pub struct Filesystem {
    fs: TickFilesystem,
    name: String,
    target_is_root: bool,
    bytes: ResourceId,
    inodes: Option<ResourceId>,
}

impl Filesystem {
    /// Opens `path` (a directory or any file on the filesystem), reads it once and registers
    /// its resources. `target_is_root`: whether the target's effective UID is 0.
    pub fn new(
        path: &Path,
        target_is_root: bool,
        table: &mut ResourceTable,
    ) -> Result<Self, SourceError> {
        Self::with_aliases(path, &[], target_is_root, &Reads::Own, table)
    }

    /// [`Filesystem::new`] for `path`, whose filesystem was also given as each of `aliases`
    /// (see [`one_per_filesystem`]); the resource is named after `path` and its source
    /// names them all. The filesystem is opened and read through `reads`. Refuses a
    /// filesystem that reports no size (`/proc`, `/sys`).
    pub fn with_aliases(
        path: &Path,
        aliases: &[PathBuf],
        target_is_root: bool,
        reads: &Reads,
        table: &mut ResourceTable,
    ) -> Result<Self, SourceError> {
        let mut fs = reads.filesystem(path)?;
        let figures = fs.figures()?;
        if figures.blocks == 0 {
            return Err(SourceError::Parse {
                path: path.display().to_string(),
                what: watchdog_types::fs::NO_SIZE.to_string(),
            });
        }
        let shown = path.display().to_string();
        let who = if target_is_root {
            "free blocks including root's reserve, as the target runs as root"
        } else {
            "blocks available to non-root users, as the target does not run as root"
        };
        let also = if aliases.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = aliases.iter().map(|a| a.display().to_string()).collect();
            format!("; also given as {}", names.join(", "))
        };
        let bytes = table.register(
            ResourceKind::DiskBytes,
            format!("disk:{shown}"),
            format!("statvfs({shown}): {who}{also}"),
        );
        let inodes = figures.inodes(target_is_root).map(|_| {
            table.register(
                ResourceKind::DiskInodes,
                format!("inodes:{shown}"),
                format!("statvfs({shown}){also}"),
            )
        });
        Ok(Self {
            fs,
            name: format!("disk:{shown}"),
            target_is_root,
            bytes,
            inodes,
        })
    }

    /// The `disk:` resource's id.
    pub fn bytes_id(&self) -> ResourceId {
        self.bytes
    }

    /// The `inodes:` resource's id, when the filesystem has inodes.
    pub fn inodes_id(&self) -> Option<ResourceId> {
        self.inodes
    }

    /// The figures of this tick: one `fstatvfs` of the kept-open descriptor, or of the
    /// shared one (see [`Reads`]).
    pub fn figures(&mut self) -> Result<VfsFigures, SourceError> {
        self.fs.figures()
    }
}

impl Source for Filesystem {
    fn name(&self) -> &str {
        &self.name
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        let f = self.figures()?;
        let (used, limit) = f.bytes(self.target_is_root);
        out(Sample {
            resource: self.bytes,
            t_ns: tick.now_ns,
            used,
            limit,
        });
        if let (Some(id), Some((used, limit))) = (self.inodes, f.inodes(self.target_is_root)) {
            out(Sample {
                resource: id,
                t_ns: tick.now_ns,
                used,
                limit,
            });
        }
        Ok(Outcome::Sampled)
    }
}

/// Groups `paths` by the filesystem holding them (the device id of `stat`), in order of
/// first appearance: `/data` and `/data/.` are one filesystem, watched once. A path that
/// cannot be read stays in a group of its own, so opening it reports why.
pub fn one_per_filesystem(paths: &[PathBuf]) -> Vec<Vec<PathBuf>> {
    use std::os::unix::fs::MetadataExt;
    let mut groups: Vec<(Option<u64>, Vec<PathBuf>)> = Vec::new();
    for path in paths {
        let dev = std::fs::metadata(path).ok().map(|m| m.dev());
        match groups.iter_mut().find(|(d, _)| d.is_some() && *d == dev) {
            Some((_, group)) => {
                // As spelled: `Path` equality takes `/data/.` for `/data`, and both are named.
                if !group.iter().any(|g| g.as_os_str() == path.as_os_str()) {
                    group.push(path.clone());
                }
            }
            None => groups.push((dev, vec![path.clone()])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// `TMPFS_MAGIC` from `<linux/magic.h>`.
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Whether `path` is on a tmpfs (`statfs` `f_type == TMPFS_MAGIC`); false when it cannot be read.
// `f_type` is i64 on 64-bit targets and i32 on 32-bit ones.
#[allow(clippy::useless_conversion)]
pub fn is_tmpfs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| i64::from(s.f_type) == TMPFS_MAGIC)
}

/// The kernel pseudo-filesystem (procfs, sysfs, ...: `watchdog_types::fs::kernel_filesystem`)
/// `path` is on, or would be made on (that of its nearest ancestor that exists): no file
/// or directory of ours belongs there.
pub fn kernel_filesystem_at(path: &Path) -> Option<&'static str> {
    // A relative path's last ancestor is "": the working directory.
    path.ancestors()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find_map(|p| rustix::fs::statfs(p).ok())
        .and_then(|fs| watchdog_types::fs::kernel_filesystem(fs.f_type))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn figure_choice_table() {
        // (blocks, bfree, bavail, root?) -> (used, limit) in blocks
        let cases = [
            // The shape measured on / here: much free, less of it available to non-root.
            (1000, 600, 200, false, (400, 600)),
            (1000, 600, 200, true, (400, 1000)),
            // Full for non-root, root still has its reserve.
            (1000, 50, 0, false, (950, 950)),
            (1000, 50, 0, true, (950, 1000)),
            // Nothing reserved (tmpfs): both the same.
            (1000, 300, 300, false, (700, 1000)),
            // Inconsistent counts never underflow.
            (10, 20, 30, false, (0, 20)),
        ];
        for (total, free, avail, root, want) in cases {
            assert_eq!(
                used_and_limit(total, free, avail, root),
                want,
                "{total} {free} {avail} {root}"
            );
        }
    }

    #[test]
    fn bytes_scale_by_frsize_and_zero_inodes_mean_none() {
        let f = VfsFigures {
            frsize: 4096,
            blocks: 100,
            bfree: 40,
            bavail: 30,
            files: 0,
            ffree: 0,
            favail: 0,
        };
        assert_eq!(f.bytes(false), (60 * 4096, 90 * 4096));
        assert_eq!(f.inodes(false), None);
        let f = VfsFigures {
            files: 50,
            ffree: 20,
            favail: 10,
            ..f
        };
        assert_eq!(f.inodes(false), Some((30, 40)));
        assert_eq!(f.inodes(true), Some((30, 50)));
    }

    #[test]
    fn source_on_a_temp_dir() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = ResourceTable::default();
        let mut fs = Filesystem::new(dir.path(), false, &mut table).unwrap();
        let name = &table.get(fs.bytes_id()).unwrap().name;
        assert_eq!(name, &format!("disk:{}", dir.path().display()));
        let mut got = Vec::new();
        fs.sample(
            &Tick {
                now_ns: 1,
                tree: &[],
            },
            &mut |s| got.push(s),
        )
        .unwrap();
        assert!(got[0].used <= got[0].limit && got[0].limit > 0);
        assert_eq!(got.len(), 1 + usize::from(fs.inodes_id().is_some()));
    }

    #[test]
    fn missing_path_names_it() {
        let err = Filesystem::new(
            Path::new("/nonexistent/wd"),
            false,
            &mut ResourceTable::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/wd"), "{err}");
    }

    /// `--disk /proc` was watched as "limit 0 B".
    #[test]
    fn a_filesystem_with_no_size_is_refused() {
        let err = Filesystem::new(Path::new("/proc"), false, &mut ResourceTable::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/proc") && err.contains("reports no size"),
            "{err}"
        );
    }

    /// `--disk P --disk P/.` watched one filesystem several times.
    #[test]
    fn paths_on_one_filesystem_are_grouped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_path_buf();
        let dot = p.join(".");
        let sub = p.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let groups = one_per_filesystem(&[
            p.clone(),
            PathBuf::from("/proc"),
            dot.clone(),
            PathBuf::from("/nonexistent/a"),
            sub.clone(),
            p.clone(),
            PathBuf::from("/nonexistent/b"),
        ]);
        assert_eq!(
            groups,
            vec![
                vec![p.clone(), dot.clone(), sub.clone()],
                vec![PathBuf::from("/proc")],
                vec![PathBuf::from("/nonexistent/a")],
                vec![PathBuf::from("/nonexistent/b")],
            ]
        );
        let mut table = ResourceTable::default();
        Filesystem::with_aliases(
            &p,
            std::slice::from_ref(&dot),
            false,
            &Reads::Own,
            &mut table,
        )
        .unwrap();
        let source = &table.all()[0].source;
        assert!(
            source.ends_with(&format!("also given as {}", dot.display())),
            "{source}"
        );
    }

    #[test]
    fn dev_shm_is_tmpfs_here_and_a_file_path_is_not() {
        if Path::new("/dev/shm").exists() {
            assert!(is_tmpfs(Path::new("/dev/shm")));
        }
        assert!(!is_tmpfs(Path::new("/proc")));
        assert!(!is_tmpfs(Path::new("/nonexistent/wd")));
    }
}
