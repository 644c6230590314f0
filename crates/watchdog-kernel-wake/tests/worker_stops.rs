//! The v1 thresholds' worker thread stops with the last threshold that moved: alone in its
//! own test binary, so no other test's threshold keeps the process's one worker alive.
//! Needs root and cgroup v1's memory controller; fails under `CI` without them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use watchdog_kernel_wake::{CgroupV1Threshold, Settled};
use watchdog_testsupport::{is_root, require};

const V1_MEMORY: &str = "/sys/fs/cgroup/memory";

/// The threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

/// The threads named `name` once the count is `n` or 10 s passed (a new thread names
/// itself once it runs).
fn threads_named_once(name: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = threads_named(name);
        if now == n || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A memory cgroup removed on drop.
struct Cgroup(PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn the_worker_thread_stops_when_the_last_threshold_that_moved_is_dropped() {
    let here = is_root() && Path::new(V1_MEMORY).join("memory.limit_in_bytes").exists();
    if !require(
        here,
        "root and cgroup v1's memory controller (to make a memory cgroup)",
    ) {
        return;
    }
    let cg = Cgroup(Path::new(V1_MEMORY).join(format!("wd-kwake-worker-{}", std::process::id())));
    std::fs::create_dir(&cg.0).unwrap_or_else(|e| panic!("cannot make {}: {e}", cg.0.display()));
    std::fs::write(
        cg.0.join("memory.limit_in_bytes"),
        (256u64 << 20).to_string(),
    )
    .unwrap_or_else(|e| panic!("cannot set the limit: {e}"));
    let arm = || CgroupV1Threshold::arm(&cg.0, &[128 << 20]).unwrap_or_else(|e| panic!("{e}"));
    let (mut a, mut b) = (arm(), arm());
    assert_eq!(threads_named("v1-thresholds"), 0, "started before any move");
    a.move_to(64 << 20).unwrap_or_else(|e| panic!("{e}"));
    b.move_to(96 << 20).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        threads_named_once("v1-thresholds", 1),
        1,
        "one worker for the process"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(a.settle(), Settled::Armed(_)) {
        assert!(Instant::now() < deadline, "the move did not settle");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(a);
    assert_eq!(
        threads_named("v1-thresholds"),
        1,
        "b still holds the worker"
    );
    drop(b);
    // Joined in the drop (its task entry goes a moment after the join).
    assert_eq!(
        threads_named_once("v1-thresholds", 0),
        0,
        "the worker outlived its last threshold"
    );
    // A later move starts it again.
    let mut c = arm();
    c.move_to(32 << 20).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(threads_named_once("v1-thresholds", 1), 1);
    drop(c);
    assert_eq!(threads_named_once("v1-thresholds", 0), 0);
}
