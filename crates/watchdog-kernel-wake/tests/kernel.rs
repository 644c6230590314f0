//! The kernel wake sources against the real kernel where this machine has them (cgroup v1
//! memory thresholds, `/proc/pressure/memory`), and against fixture files where it does not
//! (cgroup v2 `memory.events`). Root tests fail under `CI` instead of skipping
//! (`watchdog-testsupport`). PSI firing is measured by the benchmark, not asserted here.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use watchdog_kernel_wake::{
    CgroupV1Threshold, CgroupV2Events, PsiSpec, PsiTrigger, Reason, Settled, Stall, Unarmable,
};
use watchdog_testsupport::{is_root, kernel_at_least, require, scratch};

const MIB: u64 = 1 << 20;
const V1_MEMORY: &str = "/sys/fs/cgroup/memory";
const PROC_PSI_MEMORY: &str = "/proc/pressure/memory";
/// Generous: a wake-up is a promise of "eventually", not of a time, on a busy 2-core CI box.
const WAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `fd` becomes ready with `flags` within `timeout`.
fn ready(fd: BorrowedFd<'_>, flags: PollFlags, timeout: Duration) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
    let timeout = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(n) => n > 0 && fds[0].revents().intersects(flags),
        Err(e) => panic!("poll: {e}"),
    }
}

/// What an arm that must fail gave, as its reason (panics when it armed).
fn refused<T: std::fmt::Debug>(armed: Result<T, Unarmable>) -> Unarmable {
    match armed {
        Ok(t) => panic!("armed where it should be refused: {t:?}"),
        Err(e) => e,
    }
}

/// A fresh cgroup v1 memory cgroup with a limit, removed on drop; `None` after
/// [`require`] when this machine cannot make one.
struct V1Cgroup {
    dir: PathBuf,
}

impl V1Cgroup {
    fn create(limit: u64) -> Option<V1Cgroup> {
        let here = is_root() && Path::new(V1_MEMORY).join("memory.limit_in_bytes").exists();
        if !require(
            here,
            "root and cgroup v1's memory controller (to make a memory cgroup)",
        ) {
            return None;
        }
        let dir = Path::new(V1_MEMORY).join(
            format!(
                "wd-kwake-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            )
            .replace(['(', ')'], ""),
        );
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        let cg = V1Cgroup { dir };
        std::fs::write(cg.dir.join("memory.limit_in_bytes"), limit.to_string())
            .unwrap_or_else(|e| panic!("cannot set the limit of {}: {e}", cg.dir.display()));
        Some(cg)
    }

    fn usage(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no usage in {}", self.dir.display()))
    }
}

impl V1Cgroup {
    /// A `memory.stat` line's value (`rss`, `cache`: bytes, this cgroup only).
    fn stat(&self, name: &str) -> u64 {
        let text = std::fs::read_to_string(self.dir.join("memory.stat"))
            .unwrap_or_else(|e| panic!("no memory.stat in {}: {e}", self.dir.display()));
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in memory.stat"))
    }
}

impl Drop for V1Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A python3 process that, line by line, allocates (and touches) the MiB it is told
/// (`alloc N`), frees all it allocated (`free`), or writes a file of N MiB through the page
/// cache from a 1 MiB buffer (`write N PATH`).
struct Allocator {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Allocator {
    const SCRIPT: &str = "import sys\nkeep = []\nprint('ready', flush=True)\n\
        for line in sys.stdin:\n\
        \x20   cmd = line.split()\n\
        \x20   if cmd[0] == 'alloc':\n\
        \x20       keep.append(b'\\x01' * (int(cmd[1]) << 20))\n\
        \x20   elif cmd[0] == 'free':\n\
        \x20       keep.clear()\n\
        \x20   elif cmd[0] == 'write':\n\
        \x20       chunk = b'\\x02' * (1 << 20)\n\
        \x20       with open(cmd[2], 'wb') as f:\n\
        \x20           for _ in range(int(cmd[1])):\n\
        \x20               f.write(chunk)\n\
        \x20   print('ok', flush=True)\n";

    /// Starts it and moves it into `cg` before it allocates anything.
    fn start_in(cg: &V1Cgroup) -> Allocator {
        let mut child = Command::new("python3")
            .args(["-c", Self::SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3: {e}"));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("python3 without pipes");
        };
        let mut alloc = Allocator {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        alloc.expect("ready");
        std::fs::write(cg.dir.join("cgroup.procs"), alloc.child.id().to_string())
            .unwrap_or_else(|e| panic!("cannot move python3 into {}: {e}", cg.dir.display()));
        alloc
    }

    fn expect(&mut self, word: &str) {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("python3: {e}"));
        assert_eq!(line.trim(), word, "python3 said {line:?}");
    }

    /// Sends one command and waits until it is done.
    fn say(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap_or_else(|e| panic!("python3: {e}"));
        self.expect("ok");
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_v1_threshold_wakes_when_a_child_allocates_past_it_and_rearms() {
    let Some(cg) = V1Cgroup::create(512 * MIB) else {
        return;
    };
    let mut alloc = Allocator::start_in(&cg);
    let mut threshold = CgroupV1Threshold::arm(&cg.dir, &[cg.usage() + 32 * MIB])
        .unwrap_or_else(|e| panic!("cannot arm: {e}"));
    say_and_wake(&mut alloc, "alloc 64", &threshold, "a threshold 32 MiB up");

    // Re-armed around the usage now: the old eventfd is closed, the new one fires.
    rearm_around(&mut threshold, 64 * MIB);
    say_and_wake(
        &mut alloc,
        "alloc 64",
        &threshold,
        "the re-armed threshold 32 MiB up",
    );

    // A crossing downwards wakes too: the band's lower threshold, when the child frees.
    rearm_around(&mut threshold, 128 * MIB);
    say_and_wake(&mut alloc, "free", &threshold, "the threshold 32 MiB down");
}

#[test]
fn a_v1_threshold_counts_page_cache() {
    let Some(cg) = V1Cgroup::create(512 * MIB) else {
        return;
    };
    let mut alloc = Allocator::start_in(&cg);
    let threshold = CgroupV1Threshold::arm(&cg.dir, &[cg.usage() + 32 * MIB])
        .unwrap_or_else(|e| panic!("cannot arm: {e}"));
    let rss_before = cg.stat("rss");
    // 64 MiB written to a disk file from a 1 MiB buffer: page cache, not the child's memory.
    let dir = scratch();
    let file = dir.path().join("cache");
    let command = format!("write 64 {}", file.display());
    say_and_wake(
        &mut alloc,
        &command,
        &threshold,
        "a threshold 32 MiB up, by a file",
    );
    let rss_growth = cg.stat("rss").saturating_sub(rss_before);
    assert!(
        rss_growth < 16 * MIB,
        "the child's own memory grew {rss_growth} bytes: the wake-up was not the page cache's"
    );
    assert!(cg.stat("cache") >= 32 * MIB, "cache {}", cg.stat("cache"));
}

#[test]
fn a_v1_threshold_moved_on_the_worker_thread_fires_there_and_settles() {
    let Some(cg) = V1Cgroup::create(512 * MIB) else {
        return;
    };
    let mut alloc = Allocator::start_in(&cg);
    let mut threshold = CgroupV1Threshold::arm(&cg.dir, &[cg.usage() + 256 * MIB])
        .unwrap_or_else(|e| panic!("cannot arm: {e}"));
    // Moved 32 MiB up: until settled, the old eventfd and the new one are both polled.
    threshold
        .move_to(cg.usage() + 32 * MIB)
        .unwrap_or_else(|e| panic!("cannot move: {e}"));
    assert!(threshold.moving());
    let mut fds = 0;
    threshold.each_fd(|_| fds += 1);
    assert_eq!(fds, 2, "the armed eventfd and the one being armed");
    alloc.say("alloc 64");
    let deadline = std::time::Instant::now() + WAKE_TIMEOUT;
    let woke = loop {
        let mut any = false;
        threshold.each_fd(|fd| any |= ready(fd, CgroupV1Threshold::POLL, Duration::ZERO));
        if any || std::time::Instant::now() >= deadline {
            break any;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        woke,
        "the moved threshold did not fire within {WAKE_TIMEOUT:?}"
    );
    assert!(threshold.consume().is_ok_and(|n| n >= 1));
    match threshold.settle() {
        Settled::Armed(level) => assert!(level < cg.usage(), "{level}"),
        other => panic!("a move that fired is armed, not {other:?}"),
    }
    assert!(!threshold.moving());
    // Moved to a level the usage already passed: no crossing, the worker signals it.
    threshold
        .move_to(cg.usage() - 16 * MIB)
        .unwrap_or_else(|e| panic!("cannot move: {e}"));
    let deadline = std::time::Instant::now() + WAKE_TIMEOUT;
    while !matches!(threshold.settle(), Settled::Armed(_)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the move did not settle within {WAKE_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        ready(threshold.fd(), CgroupV1Threshold::POLL, Duration::ZERO),
        "a level already passed is signalled by the worker"
    );
}

/// Re-arms `threshold` 32 MiB below and above the usage now, which must be at least `least`.
fn rearm_around(threshold: &mut CgroupV1Threshold, least: u64) {
    let usage = threshold.usage_bytes().unwrap_or_else(|e| panic!("{e}"));
    assert!(usage >= least, "usage {usage}, expected at least {least}");
    threshold
        .rearm(&[usage - 32 * MIB, usage + 32 * MIB])
        .unwrap_or_else(|e| panic!("cannot re-arm: {e}"));
}

/// Checks nothing was signalled yet, has `alloc` carry out `command`, and waits for the
/// wake-up of `threshold` (`what`), which consuming ends.
fn say_and_wake(alloc: &mut Allocator, command: &str, threshold: &CgroupV1Threshold, what: &str) {
    assert_eq!(
        threshold.consume().ok(),
        Some(0),
        "{what}: signalled before {command:?}"
    );
    alloc.say(command);
    assert!(
        ready(threshold.fd(), CgroupV1Threshold::POLL, WAKE_TIMEOUT),
        "{what}: no wake-up within {WAKE_TIMEOUT:?} after {command:?}"
    );
    assert!(threshold.consume().is_ok_and(|n| n >= 1), "{what}");
    assert!(
        !ready(threshold.fd(), CgroupV1Threshold::POLL, Duration::ZERO),
        "{what}: still ready after consuming"
    );
}

/// Unmounts a bind mount on drop.
struct BindMount(PathBuf);

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn run(args: &[&str], at: &Path) {
    let status = Command::new(args[0])
        .args(&args[1..])
        .arg(at)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(status.success(), "{args:?} {}: {status}", at.display());
}

#[test]
fn a_v1_threshold_on_a_read_only_cgroupfs_is_refused_as_read_only() {
    let Some(cg) = V1Cgroup::create(512 * MIB) else {
        return;
    };
    // What systemd's ProtectControlGroups=yes does: the same cgroup, mounted read-only.
    let scratch = scratch();
    let ro = scratch.path().join("cgroup");
    std::fs::create_dir(&ro).unwrap_or_else(|e| panic!("{e}"));
    let status = Command::new("mount")
        .arg("--bind")
        .arg(&cg.dir)
        .arg(&ro)
        .status()
        .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
    assert!(status.success(), "mount --bind: {status}");
    let _mounted = BindMount(ro.clone());
    run(&["mount", "-o", "remount,bind,ro"], &ro);

    let err = refused(CgroupV1Threshold::arm(&ro, &[1 << 30]));
    assert_eq!(err.reason, Reason::ReadOnly, "{err}");
    let line = err.to_string();
    assert!(
        line.contains("cgroup.event_control") && line.contains("read-only") && !line.contains('\n'),
        "{line}"
    );
    // The same cgroup through its writable path arms: read-only was the reason.
    CgroupV1Threshold::arm(&cg.dir, &[1 << 30]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_v1_threshold_where_there_is_no_v1_memory_cgroup_says_what_is_there() {
    let dir = scratch();
    let err = refused(CgroupV1Threshold::arm(dir.path(), &[MIB]));
    assert_eq!(err.reason, Reason::NotV1Memory, "{err}");

    // A cgroup v2 directory: memory.events but no cgroup.event_control.
    std::fs::write(dir.path().join("memory.events"), V2_FIXTURE_QUIET)
        .unwrap_or_else(|e| panic!("{e}"));
    let err = refused(CgroupV1Threshold::arm(dir.path(), &[MIB]));
    assert_eq!(err.reason, Reason::V2NoThreshold, "{err}");
    assert!(
        err.to_string()
            .contains("cgroup v2 has no early memory threshold"),
        "{err}"
    );
}

/// A cgroup v2 `memory.events` as the kernel writes it: the names and their order are
/// Documentation/admin-guide/cgroup-v2.rst's "memory.events" list (Linux 6.x, which adds
/// `oom_group_kill` and `sock_throttled`); the counts are made up.
const V2_FIXTURE_QUIET: &str =
    "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\nsock_throttled 0\n";
/// The same file after the cgroup hit memory.max and lost a process to the OOM killer.
const V2_FIXTURE_OOM: &str =
    "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 0\n";

#[test]
fn v2_memory_events_wake_on_modify_and_say_which_counters_grew() {
    let dir = scratch();
    let file = dir.path().join("memory.events");
    std::fs::write(&file, V2_FIXTURE_QUIET).unwrap_or_else(|e| panic!("{e}"));
    let mut events = CgroupV2Events::watch(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events.last().max, 0);
    assert!(
        !ready(events.fd(), CgroupV2Events::POLL, Duration::ZERO),
        "nothing changed yet"
    );
    let idle = events.on_wake().unwrap_or_else(|e| panic!("{e}"));
    assert!(!idle.grown.any(), "{idle:?}");

    // kernfs raises IN_MODIFY when a counter moves; rewriting the fixture raises the same.
    std::fs::write(&file, V2_FIXTURE_OOM).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ready(events.fd(), CgroupV2Events::POLL, WAKE_TIMEOUT),
        "no IN_MODIFY within {WAKE_TIMEOUT:?}"
    );
    let wake = events.on_wake().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        wake.grown.names().collect::<Vec<_>>(),
        ["max", "oom", "oom_kill"]
    );
    assert_eq!((wake.now.max, wake.now.oom_kill), (7, 1));
    assert!(
        !ready(events.fd(), CgroupV2Events::POLL, Duration::ZERO),
        "drained"
    );

    // The same counters again: a wake-up with nothing grown.
    std::fs::write(&file, V2_FIXTURE_OOM).unwrap_or_else(|e| panic!("{e}"));
    assert!(ready(events.fd(), CgroupV2Events::POLL, WAKE_TIMEOUT));
    assert!(
        !events
            .on_wake()
            .unwrap_or_else(|e| panic!("{e}"))
            .grown
            .any()
    );
}

#[test]
fn v2_memory_events_missing_or_garbled_are_refused_with_a_reason() {
    let dir = scratch();
    let err = refused(CgroupV2Events::watch(dir.path()));
    assert_eq!(err.reason, Reason::NoMemoryEvents, "{err}");

    std::fs::write(dir.path().join("memory.events"), "low 0\nhigh 0\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = refused(CgroupV2Events::watch(dir.path()));
    assert!(
        matches!(&err.reason, Reason::BadContent(m) if m.contains("lacks max, oom, oom_kill")),
        "{err}"
    );
}

#[test]
fn a_psi_trigger_arms_on_proc_pressure_memory_as_root() {
    let here = is_root() && Path::new(PROC_PSI_MEMORY).exists();
    if !require(here, "root and /proc/pressure/memory (a kernel with PSI)") {
        return;
    }
    let default = PsiTrigger::arm(Path::new(PROC_PSI_MEMORY), PsiSpec::DEFAULT)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(default.spec(), PsiSpec::DEFAULT);
    // A window that is no multiple of 2 s needs CAP_SYS_RESOURCE, which root need not hold:
    // this machine's root lacks it (CapEff), as the service does.
    let lmkd_like = PsiSpec {
        stall: Stall::Full,
        threshold: Duration::from_millis(700),
        window: Duration::from_secs(1),
    };
    let fast = PsiTrigger::arm(Path::new(PROC_PSI_MEMORY), lmkd_like);
    if has_cap_sys_resource() || !kernel_at_least(6, 4) {
        fast.as_ref().map(|_| ()).unwrap_or_else(|e| panic!("{e}"));
    } else {
        let err = fast.as_ref().err().map(|e| &e.reason);
        assert_eq!(err, Some(&Reason::PsiUnprivilegedWindow));
    }
    let fast = fast.ok();
    // Armed and pollable; whether it fires is the benchmark's to measure.
    for trigger in std::iter::once(&default).chain(fast.as_ref()) {
        let _ = ready(trigger.fd(), PsiTrigger::POLL, Duration::ZERO);
    }
}

#[test]
fn a_psi_window_out_of_bounds_is_refused_before_the_kernel_is_asked() {
    let path = Path::new(PROC_PSI_MEMORY);
    let spec = PsiSpec {
        window: Duration::from_millis(100),
        threshold: Duration::from_millis(50),
        ..PsiSpec::DEFAULT
    };
    let err = refused(PsiTrigger::arm(path, spec));
    assert_eq!(
        err.to_string(),
        "/proc/pressure/memory: PSI window 100 ms: expected 500 ms to 10 s"
    );
    assert!(err.source.is_none());
}

#[test]
fn a_psi_file_that_is_missing_says_there_is_no_psi() {
    let dir = scratch();
    let err = refused(PsiTrigger::arm(
        &dir.path().join("memory.pressure"),
        PsiSpec::DEFAULT,
    ));
    assert_eq!(err.reason, Reason::NoPsi, "{err}");
    assert!(err.to_string().contains("CONFIG_PSI"), "{err}");
}

/// The `CAP_SYS_RESOURCE` bit (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this thread's effective set holds `CAP_SYS_RESOURCE` (`CapEff` in
/// /proc/thread-self/status).
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|eff| eff & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Drops `CAP_SYS_RESOURCE` from the calling thread's effective set only (capabilities are
/// per thread; the raw syscall does not broadcast to the other threads as glibc's
/// setuid wrappers do), as the service runs without it.
fn drop_sys_resource_in_this_thread() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget fills two `Data` for a version-3 header; both live on this stack.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(got, 0, "capget: {}", std::io::Error::last_os_error());
    data[0].effective &= !(1 << CAP_SYS_RESOURCE);
    // SAFETY: as above; capset only narrows this thread's effective set.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(set, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
fn without_cap_sys_resource_a_psi_trigger_takes_only_windows_of_2_s() {
    let here = is_root() && Path::new(PROC_PSI_MEMORY).exists() && kernel_at_least(6, 4);
    if !require(here, "root, /proc/pressure/memory and Linux 6.4 or later") {
        return;
    }
    let outcome = std::thread::spawn(|| {
        drop_sys_resource_in_this_thread();
        assert!(!has_cap_sys_resource());
        let path = Path::new(PROC_PSI_MEMORY);
        let one_second = PsiSpec {
            window: Duration::from_secs(1),
            threshold: Duration::from_millis(100),
            ..PsiSpec::DEFAULT
        };
        let refused = PsiTrigger::arm(path, one_second).err().map(|e| e.reason);
        let default = PsiTrigger::arm(path, PsiSpec::DEFAULT)
            .map(|_| ())
            .map_err(|e| e.to_string());
        (refused, default)
    })
    .join()
    .unwrap_or_else(|_| panic!("the unprivileged thread panicked"));
    assert_eq!(outcome.0, Some(Reason::PsiUnprivilegedWindow));
    assert_eq!(
        outcome.1,
        Ok(()),
        "the default 2 s window must arm without the capability"
    );
}
