//! The roots of the kernel's file systems the watchdog reads, declared once: procfs at
//! `/proc`, the cgroup mount root at `/sys/fs/cgroup` and the DMI strings at
//! `/sys/class/dmi/id`, or the same under a directory of recorded files.
//!
//! A recorded tree (`WATCHDOG_ROOT=DIR`, read by `watchdog_config::Host`) is the test
//! seam that drives the whole binary from files copied off a real machine: `DIR/proc`,
//! `DIR/sys/fs/cgroup`, `DIR/sys/class/dmi/id`. A path the kernel itself names (a mount
//! point in `mountinfo`) is re-rooted under `DIR` by [`KernelRoots::kernel_path`]. In a
//! recorded tree a process is alive while `DIR/proc/PID` exists
//! ([`ProcRoot::exit_fd`](crate::ProcRoot::exit_fd)); its PIDs name no process of this
//! machine, so nothing may be signalled because of one (the watch refuses every signal).
//!
//! The small files read once (a cgroup's `cgroup.controllers`, a DMI string) are read
//! here too, capped, with the path in the error.

use std::ffi::CStr;
use std::fs;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use crate::{Error, ProcRoot};

/// The host's root directory.
pub const HOST_ROOT: &str = "/";
/// procfs, under the root.
pub const PROC_DIR: &str = "proc";
/// The cgroup mount root, under the root: the hierarchies are found from `mountinfo`; this
/// is where they are looked for when it cannot be read.
pub const CGROUP_DIR: &str = "sys/fs/cgroup";
/// The DMI strings (`product_name`, `sys_vendor`, ...), under the root
/// (<https://docs.kernel.org/admin-guide/abi-testing.html>, `/sys/class/dmi/id`).
pub const DMI_ID_DIR: &str = "sys/class/dmi/id";
/// The system-wide memory pressure (PSI) file, under procfs
/// (<https://docs.kernel.org/accounting/psi.html>).
pub const PRESSURE_MEMORY: &str = "pressure/memory";
/// Where a process sets its own OOM score adjustment (`proc(5)`): always the host's, since
/// the process writing it (a hook, between fork and exec) is a real one. A C string, for
/// the async-signal-safe `open(2)` of a `pre_exec` closure.
pub const OWN_OOM_SCORE_ADJ: &CStr = c"/proc/self/oom_score_adj";

/// Most bytes read of one DMI string or one small cgroup file.
pub const SMALL_FILE_MAX_BYTES: u64 = 4096;

/// Where procfs, the cgroup mounts and the DMI strings are: the host's, or a recorded tree's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoots {
    root: PathBuf,
    proc: ProcRoot,
    cgroup: PathBuf,
    dmi_id: PathBuf,
}

impl Default for KernelRoots {
    /// The host's.
    fn default() -> KernelRoots {
        KernelRoots::host()
    }
}

impl KernelRoots {
    /// The host's: `/proc`, `/sys/fs/cgroup`, `/sys/class/dmi/id`.
    pub fn host() -> KernelRoots {
        let root = PathBuf::from(HOST_ROOT);
        KernelRoots {
            proc: ProcRoot::new(root.join(PROC_DIR)),
            cgroup: root.join(CGROUP_DIR),
            dmi_id: root.join(DMI_ID_DIR),
            root,
        }
    }

    /// A recorded tree under `dir`: `DIR/proc`, `DIR/sys/fs/cgroup`, `DIR/sys/class/dmi/id`.
    pub fn recorded(dir: impl Into<PathBuf>) -> KernelRoots {
        let root = dir.into();
        KernelRoots {
            proc: ProcRoot::recorded(root.join(PROC_DIR)),
            cgroup: root.join(CGROUP_DIR),
            dmi_id: root.join(DMI_ID_DIR),
            root,
        }
    }

    /// Whether these are a recorded tree's.
    pub fn is_recorded(&self) -> bool {
        self.proc.is_recorded()
    }

    /// The root directory (`/`, or the recorded tree's directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// procfs.
    pub fn proc(&self) -> &ProcRoot {
        &self.proc
    }

    /// The cgroup mount root.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// The directory of the DMI strings.
    pub fn dmi_id(&self) -> &Path {
        &self.dmi_id
    }

    /// A path the kernel names (a mount point in `mountinfo`): itself on the host, the same
    /// path under the recorded tree's directory otherwise (only plain names are kept: a
    /// recorded `..` does not walk out of it).
    pub fn kernel_path(&self, path: &Path) -> PathBuf {
        if self.is_recorded() {
            rerooted(&self.root, path)
        } else {
            path.to_path_buf()
        }
    }
}

/// `path`, a path the kernel names, under the directory `root` of a recorded tree; only
/// plain names are kept, so a recorded `..` does not walk out of it.
pub fn rerooted(root: &Path, path: &Path) -> PathBuf {
    let mut out = root.to_path_buf();
    for c in path.components() {
        if let Component::Normal(name) = c {
            out.push(name);
        }
    }
    out
}

/// The text of a small file of sysfs or cgroupfs (`cgroup.controllers`), at most
/// [`SMALL_FILE_MAX_BYTES`].
pub fn read_small(path: &Path) -> Result<String, Error> {
    let mut text = String::new();
    fs::File::open(path)
        .and_then(|f| f.take(SMALL_FILE_MAX_BYTES).read_to_string(&mut text))
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(text)
}

/// The DMI string `name` (`product_name`, `sys_vendor`, `chassis_asset_tag`) under
/// `dmi_id`; empty when it cannot be read: a machine without DMI names nothing.
pub fn dmi_string(dmi_id: &Path, name: &str) -> String {
    read_small(&dmi_id.join(name)).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_host_roots_are_the_kernels_paths() {
        let host = KernelRoots::host();
        assert!(!host.is_recorded());
        assert_eq!(host.proc().path(), Path::new("/proc"));
        assert_eq!(host.cgroup(), Path::new("/sys/fs/cgroup"));
        assert_eq!(host.dmi_id(), Path::new("/sys/class/dmi/id"));
        assert_eq!(
            host.kernel_path(Path::new("/sys/fs/cgroup/memory")),
            Path::new("/sys/fs/cgroup/memory")
        );
    }

    #[test]
    fn a_recorded_tree_reroots_every_path_under_its_directory() {
        let rec = KernelRoots::recorded("/tmp/rec");
        assert!(rec.is_recorded() && rec.proc().is_recorded());
        assert_eq!(rec.proc().path(), Path::new("/tmp/rec/proc"));
        assert_eq!(rec.cgroup(), Path::new("/tmp/rec/sys/fs/cgroup"));
        assert_eq!(rec.dmi_id(), Path::new("/tmp/rec/sys/class/dmi/id"));
        assert_eq!(
            rec.kernel_path(Path::new("/sys/fs/cgroup/../../etc")),
            Path::new("/tmp/rec/sys/fs/cgroup/etc")
        );
    }

    #[test]
    fn small_files_are_capped_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("product_name"), "Google Compute Engine\n").unwrap();
        fs::write(dir.path().join("big"), vec![b'x'; 10_000]).unwrap();
        assert_eq!(
            dmi_string(dir.path(), "product_name"),
            "Google Compute Engine\n"
        );
        assert_eq!(dmi_string(dir.path(), "absent"), "");
        assert_eq!(
            read_small(&dir.path().join("big")).unwrap().len() as u64,
            SMALL_FILE_MAX_BYTES
        );
        let err = read_small(&dir.path().join("absent")).unwrap_err();
        assert!(err.to_string().contains("absent") && err.is_gone(), "{err}");
    }
}
