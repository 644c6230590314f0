//! Cgroup v2 `memory.events`: counters of `memory.high`/`memory.max` hits and OOMs, whose
//! changes the kernel announces as a file modification (kernfs raises inotify `IN_MODIFY`,
//! and `POLLPRI` to pollers of the file itself).
//!
//! The file (Documentation/admin-guide/cgroup-v2.rst, "memory.events") holds one `name count`
//! line per event: `low`, `high`, `max`, `oom`, `oom_kill`, and on newer kernels
//! `oom_group_kill` and `sock_throttled`. It counts what happened in the cgroup and its
//! descendants (`memory.events.local` only the cgroup itself). These fire at `memory.high`
//! and `memory.max` at the earliest: v2 has no threshold below them. Watching needs only
//! read access, so it works where cgroupfs is read-only.

use std::fs::File;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::event::PollFlags;
use rustix::fs::inotify;
use rustix::io::Errno;

use crate::{Reason, Unarmable, cgroupfs_reason, pread_text};

/// The counters of a cgroup v2 `memory.events` file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    /// Times usage was below `memory.low` but reclaimed anyway (memory was short elsewhere).
    pub low: u64,
    /// Times usage went over `memory.high` and the cgroup's tasks were throttled.
    pub high: u64,
    /// Times usage was about to go over `memory.max` (reclaim forced, maybe an OOM next).
    pub max: u64,
    /// Times the cgroup hit its limit and reclaim failed (an OOM).
    pub oom: u64,
    /// Processes in the cgroup killed by the OOM killer.
    pub oom_kill: u64,
    /// Times the whole cgroup was OOM-killed as a group (`memory.oom.group`), 0 on kernels
    /// without the line.
    pub oom_group_kill: u64,
}

/// The counter names, in the kernel's order, and each one's place in a [`Grown`] set.
const NAMES: [&str; 6] = ["low", "high", "max", "oom", "oom_kill", "oom_group_kill"];

/// Lines every kernel with `memory.events` writes (`oom_kill` since 4.13).
const REQUIRED: usize = 5;

impl MemoryEvents {
    /// The counters in the order of `NAMES`.
    fn counts(&self) -> [u64; 6] {
        [
            self.low,
            self.high,
            self.max,
            self.oom,
            self.oom_kill,
            self.oom_group_kill,
        ]
    }

    /// The counter named `name`, for the parser.
    fn slot(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "low" => &mut self.low,
            "high" => &mut self.high,
            "max" => &mut self.max,
            "oom" => &mut self.oom,
            "oom_kill" => &mut self.oom_kill,
            "oom_group_kill" => &mut self.oom_group_kill,
            _ => return None,
        })
    }

    /// Which counters are higher than in `earlier`.
    pub fn grown_since(&self, earlier: &MemoryEvents) -> Grown {
        let mut bits = 0u8;
        for (i, (now, then)) in self.counts().iter().zip(earlier.counts()).enumerate() {
            if *now > then {
                bits |= 1 << i;
            }
        }
        Grown(bits)
    }
}

/// A set of `memory.events` counters that grew.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grown(u8);

impl Grown {
    /// Whether any counter grew.
    pub fn any(self) -> bool {
        self.0 != 0
    }

    /// Whether the counter `name` (`"max"`, `"oom_kill"`, ...) grew.
    pub fn contains(self, name: &str) -> bool {
        NAMES
            .iter()
            .position(|n| *n == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// The names of the counters that grew, in the kernel's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        NAMES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
    }
}

/// A `memory.events` text that is not `name count` lines with the five counters every
/// kernel writes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("memory.events {0}")]
pub struct ParseError(String);

/// Parses a cgroup v2 `memory.events` text. Lines with names this version does not know
/// (`sock_throttled`, later additions) are skipped; `low`, `high`, `max`, `oom` and
/// `oom_kill` must all be there, so a file read half-written or empty is an error rather
/// than counters gone back to zero.
pub fn parse_memory_events(text: &str) -> Result<MemoryEvents, ParseError> {
    let mut events = MemoryEvents::default();
    let mut seen = 0u8;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(ParseError(format!(
                "line {line:?}: expected a name and a count"
            )));
        };
        let count: u64 = count.parse().map_err(|_| {
            ParseError(format!(
                "line {line:?}: expected a whole number after {name}"
            ))
        })?;
        if let Some(slot) = events.slot(name) {
            *slot = count;
            if let Some(i) = NAMES.iter().position(|n| *n == name) {
                seen |= 1 << i;
            }
        }
    }
    let required = (1u8 << REQUIRED) - 1;
    if seen & required != required {
        let missing: Vec<&str> = NAMES[..REQUIRED]
            .iter()
            .enumerate()
            .filter(|(i, _)| seen & (1 << i) == 0)
            .map(|(_, n)| *n)
            .collect();
        return Err(ParseError(format!(
            "lacks {}: expected low, high, max, oom and oom_kill lines",
            missing.join(", ")
        )));
    }
    Ok(events)
}

/// What a wake-up of [`CgroupV2Events`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wake {
    /// The counters now.
    pub now: MemoryEvents,
    /// Those that grew since the previous read.
    pub grown: Grown,
}

/// An inotify `IN_MODIFY` watch on a cgroup v2 `memory.events`, and its last counters.
#[derive(Debug)]
pub struct CgroupV2Events {
    inotify: OwnedFd,
    file: File,
    path: PathBuf,
    last: MemoryEvents,
    text: Vec<u8>,
}

impl CgroupV2Events {
    /// The flag the inotify descriptor becomes ready with: the file was modified.
    pub const POLL: PollFlags = PollFlags::IN;

    /// Watches `memory.events` in the cgroup v2 directory `dir` and reads its counters.
    pub fn watch(dir: &Path) -> Result<CgroupV2Events, Unarmable> {
        Self::watch_file(&dir.join("memory.events"))
    }

    /// Watches the file `path` (a `memory.events`, or a fixture standing for one).
    pub fn watch_file(path: &Path) -> Result<CgroupV2Events, Unarmable> {
        let file = File::open(path).map_err(|e| {
            Unarmable::io(path, e, |errno| match errno {
                Errno::NOENT => Some(Reason::NoMemoryEvents),
                other => cgroupfs_reason(other),
            })
        })?;
        let inotify = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .map_err(|e| Unarmable::io(path, e.into(), inotify_reason))?;
        inotify::add_watch(&inotify, path, inotify::WatchFlags::MODIFY)
            .map_err(|e| Unarmable::io(path, e.into(), inotify_reason))?;
        let mut watch = CgroupV2Events {
            inotify,
            file,
            path: path.to_path_buf(),
            last: MemoryEvents::default(),
            text: Vec::with_capacity(256),
        };
        watch.last = watch
            .read()
            .map_err(|e| Unarmable::new(path, Reason::BadContent(e.to_string())))?;
        Ok(watch)
    }

    /// The inotify descriptor to poll for [`Self::POLL`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }

    /// The counters as last read.
    pub fn last(&self) -> MemoryEvents {
        self.last
    }

    /// After the descriptor was ready: drains the notifications, re-reads the counters and
    /// says which grew. Also safe to call when nothing was signalled (nothing grew then).
    pub fn on_wake(&mut self) -> std::io::Result<Wake> {
        let mut buf = [0u8; 1024];
        loop {
            match rustix::io::read(&self.inotify, &mut buf) {
                Ok(0) | Err(Errno::AGAIN) => break,
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let now = self.read()?;
        let grown = now.grown_since(&self.last);
        self.last = now;
        Ok(Wake { now, grown })
    }

    /// Reads and parses the file.
    fn read(&mut self) -> std::io::Result<MemoryEvents> {
        pread_text(&self.file, &mut self.text)?;
        parse_memory_events(&String::from_utf8_lossy(&self.text)).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", self.path.display()),
            )
        })
    }
}

/// `EMFILE`/`ENOSPC` from inotify are its limits.
fn inotify_reason(errno: Errno) -> Option<Reason> {
    match errno {
        Errno::MFILE | Errno::NOSPC => Some(Reason::InotifyLimit),
        other => cgroupfs_reason(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter names and their order are those of cgroup-v2.rst's "memory.events" and of
    /// mm/memcontrol.c's `__memory_events_show` (Linux 6.x, with `sock_throttled`); the
    /// counts are made up.
    const LINUX_6: &str =
        "low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 0\n";

    /// The five lines of a 4.19 kernel (cgroup-v2.rst of that version: no `oom_group_kill`).
    const LINUX_4_19: &str = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n";

    #[test]
    fn counters_of_a_recent_kernel_are_read_and_unknown_lines_skipped() {
        assert_eq!(
            parse_memory_events(LINUX_6),
            Ok(MemoryEvents {
                low: 0,
                high: 12,
                max: 3,
                oom: 1,
                oom_kill: 1,
                oom_group_kill: 0,
            })
        );
    }

    #[test]
    fn an_older_kernel_without_oom_group_kill_reads_it_as_zero() {
        assert_eq!(parse_memory_events(LINUX_4_19), Ok(MemoryEvents::default()));
    }

    #[test]
    fn an_empty_or_truncated_file_is_an_error_not_zeroes() {
        for text in ["", "\n", "low 0\nhigh 3\n"] {
            let err = parse_memory_events(text).err();
            assert!(
                err.as_ref()
                    .is_some_and(|e| e.to_string().contains("lacks")),
                "{text:?}: {err:?}"
            );
        }
    }

    #[test]
    fn a_malformed_line_is_named() {
        for (text, says) in [
            (
                "low 0\nhigh x\n",
                "\"high x\": expected a whole number after high",
            ),
            ("low 0 1\n", "\"low 0 1\": expected a name and a count"),
            ("low\n", "\"low\": expected a name and a count"),
            ("max -1\n", "expected a whole number after max"),
        ] {
            let err = parse_memory_events(text).map_err(|e| e.to_string());
            assert!(
                err.as_ref().is_err_and(|e| e.contains(says)),
                "{text:?}: {err:?}"
            );
        }
    }

    #[test]
    fn grown_names_the_counters_that_went_up() {
        let before = parse_memory_events(LINUX_4_19).unwrap_or_default();
        let after = parse_memory_events(LINUX_6).unwrap_or_default();
        let grown = after.grown_since(&before);
        assert!(grown.any());
        assert_eq!(
            grown.names().collect::<Vec<_>>(),
            ["high", "max", "oom", "oom_kill"]
        );
        assert!(grown.contains("max") && !grown.contains("low") && !grown.contains("nope"));
        assert!(
            !before.grown_since(&after).any(),
            "counters going down is no growth"
        );
        assert!(!after.grown_since(&after).any());
    }
}
