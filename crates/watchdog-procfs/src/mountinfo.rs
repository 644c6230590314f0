//! `/proc/PID/mountinfo` (<https://docs.kernel.org/filesystems/proc.html#proc-pid-mountinfo-information-about-mounts>):
//! the one parser of it. The sampler's cgroup source finds its hierarchies here; the
//! environment record finds each watched path's mount point and filesystem type
//! ([`mount_of`]).
//!
//! A line is `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
//! SUPER_OPTIONS`; the root, the mount point and the source escape a space, tab, newline
//! and backslash as `\040`, `\011`, `\012`, `\134`.

use std::path::{Path, PathBuf};

/// One line of mountinfo, the fields the watchdog uses, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path in the filesystem that is the mount's root (`/` unless a subtree was bind-mounted).
    pub root: String,
    /// Where it is mounted (`/data`).
    pub mount_point: PathBuf,
    /// The filesystem type (`ext4`, `tmpfs`, `cgroup2`).
    pub fs_type: String,
    /// The filesystem's super-block options (`rw,memory`).
    pub super_options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = u32::from(oct[0] - b'0') * 64
                    + u32::from(oct[1] - b'0') * 8
                    + u32::from(oct[2] - b'0');
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts in the text of `/proc/PID/mountinfo`, in its order (later mounts over
/// earlier ones). Lines it cannot read are skipped. Pure.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if dash < 5 || fields.len() < dash + 3 {
            continue;
        }
        out.push(Mount {
            root: unescape(fields[3]),
            mount_point: PathBuf::from(unescape(fields[4])),
            fs_type: fields[dash + 1].to_string(),
            super_options: fields[dash + 3..].join(" "),
        });
    }
    out
}

/// The mount holding the absolute, symlink-free `path`: the one with the longest mount
/// point that contains it, the last mounted when several are mounted at the same point
/// (as `findmnt -T` finds it). Pure.
pub fn mount_of<'m>(mounts: &'m [Mount], path: &Path) -> Option<&'m Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts.iter().filter(|m| path.starts_with(&m.mount_point)) {
        // `>=`: a later mount at the same point hides the earlier one.
        if best.is_none_or(|b| {
            m.mount_point.components().count() >= b.mount_point.components().count()
        }) {
            best = Some(m);
        }
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TEXT: &str = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
        30 22 0:25 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw\n\
        40 22 0:40 / /data/my\\040runs rw - tmpfs none rw,size=65536k\n\
        41 40 254:0 /srv /data/my\\040runs rw - ext4 /dev/vda rw\n\
        garbage line\n";

    /// Recorded from `/proc/PID/mountinfo` of a `sleep` on Linux 6.18 (this project's CI
    /// machine: cgroup v1 hierarchies, the unified one at `/sys/fs/cgroup/unified`).
    const RECORDED: &str = include_str!("../fixtures/sleep/mountinfo");

    #[test]
    fn recorded_mountinfo() {
        let mounts = parse_mountinfo(RECORDED);
        assert_eq!(mounts.len(), RECORDED.lines().count());
        let proc = mount_of(&mounts, Path::new("/proc/1/status")).unwrap();
        assert_eq!((proc.fs_type.as_str(), proc.root.as_str()), ("proc", "/"));
        let memory = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == "memory"))
            .unwrap();
        assert_eq!(memory.mount_point, Path::new("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn the_longest_and_latest_mount_point_holds_a_path() {
        let mounts = parse_mountinfo(TEXT);
        assert_eq!(mounts.len(), 4);
        let at = |p: &str| mount_of(&mounts, Path::new(p)).cloned();
        let root = at("/home/x").unwrap();
        assert_eq!(
            (root.mount_point.to_str(), root.fs_type.as_str()),
            (Some("/"), "ext4")
        );
        assert_eq!(at("/dev/shm").unwrap().fs_type, "tmpfs");
        assert_eq!(at("/dev/shmx").unwrap().mount_point, Path::new("/"));
        // Two mounts at one (escaped) point: the later one, a bind mount of /srv, is seen.
        let runs = at("/data/my runs/a").unwrap();
        assert_eq!(runs.mount_point, Path::new("/data/my runs"));
        assert_eq!(
            (runs.fs_type.as_str(), runs.root.as_str()),
            ("ext4", "/srv")
        );
        assert_eq!(mount_of(&[], Path::new("/")), None);
    }
}
