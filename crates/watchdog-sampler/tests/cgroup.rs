//! The cgroup source on fixture trees (v1 captured on this machine, v2 written to the
//! kernel's documented format) and on a real v1 or v2 memory cgroup made for the test.
//! `tests/fixtures/README.md` says where each fixture came from.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use watchdog_sampler::cgroup::{
    CgroupLocation, CgroupMemory, CgroupMounts, CgroupVersion, OomKillCounter, locate_for_pid,
};
use watchdog_sampler::shared::{Reads, SharedReads};
use watchdog_sampler::{ResourceTable, Source, Tick};
use watchdog_testsupport::{is_root, require};
use watchdog_types::ResourceKind;

fn fixture(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version)
}

/// `(used, limit)` of `cgroup_memory`, checking that `cgroup_cache` came with it.
fn sample_once(src: &mut CgroupMemory) -> (u64, u64) {
    let (memory, cache) = sample_both(src);
    assert_eq!(cache.1, u64::MAX, "cgroup_cache has no limit");
    memory
}

/// `(used, limit)` of `cgroup_memory` and of `cgroup_cache`, in that order.
fn sample_both(src: &mut CgroupMemory) -> ((u64, u64), (u64, u64)) {
    let mut got = Vec::new();
    src.sample(
        &Tick {
            now_ns: 1,
            tree: &[],
        },
        &mut |s| got.push(s),
    )
    .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(Some(got[0].resource), src.id());
    assert_eq!(Some(got[1].resource), src.cache_id());
    ((got[0].used, got[0].limit), (got[1].used, got[1].limit))
}

#[test]
fn v1_fixture_captured_here_limit_from_an_ancestor() {
    let root = fixture("v1");
    let mounts = CgroupMounts::standard(&root.join("sys/fs/cgroup"));
    let mut table = ResourceTable::default();
    let mut src =
        CgroupMemory::for_pid(&root.join("proc"), 4242, &mounts, &Reads::Own, &mut table).unwrap();
    assert_eq!(src.location().version, CgroupVersion::V1);
    assert!(
        src.location().dir.ends_with("wd-cap/job"),
        "{:?}",
        src.location().dir
    );
    // memory.usage_in_bytes 116383744 - total_inactive_file 31457280 - total_active_file 0;
    // the 512 MiB limit is on the parent (wd-cap), seen through hierarchical_memory_limit.
    assert_eq!(sample_once(&mut src), (116383744 - 31457280, 536870912));
    let r = table.all();
    assert_eq!(r[0].name, "cgroup_memory");
    assert!(r[0].source.contains("wd-cap/job"), "{}", r[0].source);
    assert_eq!(r[1].name, "cgroup_cache");
    assert_eq!(r[1].kind, ResourceKind::CgroupCache);
    let mut oom = src.oom_kill_counter().unwrap();
    assert_eq!(oom.read().unwrap(), 0);
}

#[test]
fn v1_root_cgroup_has_no_limit_and_still_reports() {
    let root = fixture("v1");
    let loc = CgroupLocation {
        version: CgroupVersion::V1,
        dir: root.join("sys/fs/cgroup/memory"),
        mount_point: root.join("sys/fs/cgroup/memory"),
    };
    let mut src = CgroupMemory::open(loc, &Reads::Own).unwrap();
    let mut table = ResourceTable::default();
    src.register(&mut table).unwrap();
    let (used, limit) = sample_once(&mut src);
    assert!(used > 0);
    assert_eq!(limit, u64::MAX);
    assert!(
        table.all()[0].source.contains("no memory limit"),
        "{}",
        table.all()[0].source
    );
}

#[test]
fn v2_fixture_limit_from_an_ancestor_and_oom_kills() {
    let root = fixture("v2");
    let mounts = CgroupMounts::standard(&root.join("sys/fs/cgroup"));
    assert!(mounts.v1_memory.is_none());
    let mut table = ResourceTable::default();
    let mut src =
        CgroupMemory::for_pid(&root.join("proc"), 4242, &mounts, &Reads::Own, &mut table).unwrap();
    assert_eq!(src.location().version, CgroupVersion::V2);
    // memory.current 6174015488 - inactive_file 1744830464 - active_file 536870912 (not
    // `file` 2550136832, which includes shmem 268435456); memory.max is "max" on the job
    // and 8 GiB on train.slice.
    assert_eq!(
        sample_both(&mut src),
        (
            (6174015488 - 1744830464 - 536870912, 8 << 30),
            (1744830464 + 536870912, u64::MAX)
        )
    );
    let source = &table.all()[0].source;
    assert!(
        source.contains("limit set on ancestor") && source.ends_with("train.slice)"),
        "{source}"
    );
    assert_eq!(src.oom_kill_counter().unwrap().read().unwrap(), 1);
}

/// Opens a flat fixture cgroup directory (its own mount point: no ancestors).
fn open_flat(name: &str, version: CgroupVersion) -> (CgroupMemory, ResourceTable) {
    let dir = fixture(name);
    let mut src = CgroupMemory::open(
        CgroupLocation {
            version,
            dir: dir.clone(),
            mount_point: dir,
        },
        &Reads::Own,
    )
    .unwrap();
    let mut table = ResourceTable::default();
    src.register(&mut table).unwrap();
    (src, table)
}

/// Regression: active page cache (a data set read twice) counted as used memory and raised
/// false alarms; shmem (a tmpfs) must stay counted. v1 captured live here.
#[test]
fn v1_page_cache_is_left_out_and_shmem_stays() {
    let (mut src, table) = open_flat("cache-v1", CgroupVersion::V1);
    // usage 236785664 - total_active_file 102461440 - total_inactive_file 62869504: the 24 MiB
    // process, its 32 MiB of tmpfs (total_shmem 33554432) and kernel memory.
    let ((used, limit), (cache, cache_limit)) = sample_both(&mut src);
    assert_eq!((used, limit), (71454720, 400 << 20));
    assert!(used >= 33554432 + (24 << 20));
    assert_eq!((cache, cache_limit), (165330944, u64::MAX));
    let names: Vec<_> = table
        .all()
        .iter()
        .map(|r| (r.name.as_str(), r.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("cgroup_memory", ResourceKind::CgroupMemory),
            ("cgroup_cache", ResourceKind::CgroupCache)
        ]
    );
}

/// The same on v2, from a fixture written to the kernel's documented format: the figure is
/// memory.current - active_file - inactive_file, keeping the 64 MiB of shmem that `file`
/// would have taken out.
#[test]
fn v2_page_cache_is_left_out_and_shmem_stays() {
    let (mut src, _table) = open_flat("cache-v2", CgroupVersion::V2);
    let ((used, limit), (cache, cache_limit)) = sample_both(&mut src);
    assert_eq!(limit, 400 << 20);
    assert_eq!(used, (25 + 64 + 2) << 20, "anon + shmem + kernel");
    assert_eq!((cache, cache_limit), (308 << 20, u64::MAX));
    assert_eq!(src.oom_kill_counter().unwrap().read().unwrap(), 0);
}

#[test]
fn v2_fixture_mountinfo_parses_to_the_standard_mount() {
    let text = std::fs::read_to_string(fixture("v2").join("proc/4242/mountinfo")).unwrap();
    let mounts = CgroupMounts::from_mountinfo(&text);
    assert_eq!(mounts.v2.unwrap().mount_point, Path::new("/sys/fs/cgroup"));
    assert!(mounts.v1_memory.is_none());
    let text = std::fs::read_to_string(fixture("v1").join("proc/4242/mountinfo")).unwrap();
    let mounts = CgroupMounts::from_mountinfo(&text);
    assert_eq!(
        mounts.v1_memory.unwrap().mount_point,
        Path::new("/sys/fs/cgroup/memory")
    );
    assert_eq!(
        mounts.v2.unwrap().mount_point,
        Path::new("/sys/fs/cgroup/unified")
    );
}

#[test]
fn v2_without_memory_controller_or_in_the_root_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("sys/fs/cgroup");
    std::fs::create_dir_all(cg.join("a")).unwrap();
    std::fs::write(cg.join("cgroup.controllers"), "cpu io pids\n").unwrap();
    std::fs::create_dir_all(dir.path().join("proc/7")).unwrap();
    std::fs::write(dir.path().join("proc/7/cgroup"), "0::/a\n").unwrap();
    let mounts = CgroupMounts::standard(&cg);
    let err = locate_for_pid(&dir.path().join("proc"), 7, &mounts).unwrap_err();
    assert!(err.to_string().contains("no memory cgroup"), "{err}");
    // With the controller but the target in the root cgroup: no memory.current there.
    std::fs::write(cg.join("cgroup.controllers"), "cpu memory\n").unwrap();
    std::fs::write(dir.path().join("proc/7/cgroup"), "0::/\n").unwrap();
    let err = CgroupMemory::for_pid(
        &dir.path().join("proc"),
        7,
        &mounts,
        &Reads::Own,
        &mut ResourceTable::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("root cgroup"), "{err}");
    let err = locate_for_pid(&dir.path().join("proc"), 8, &mounts).unwrap_err();
    assert!(err.to_string().contains("proc/8/cgroup"), "{err}");
}

/// A memory cgroup made for the test (`wd-test-PID` with a child `inner`), removed on drop.
struct TestCgroup {
    outer: PathBuf,
    inner: PathBuf,
    child: Option<Child>,
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for dir in [&self.inner, &self.outer] {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// Makes `wd-test-PID/inner` under the test's own memory cgroup with a limit on the outer one.
fn make_test_cgroup(limit: u64) -> Result<TestCgroup, String> {
    if !is_root() {
        return Err("root (to create a memory cgroup)".into());
    }
    let mounts = CgroupMounts::read(Path::new("/proc")).map_err(|e| e.to_string())?;
    let own = locate_for_pid(Path::new("/proc"), std::process::id(), &mounts)
        .map_err(|e| format!("a memory cgroup of its own: {e}"))?;
    let outer = match own.version {
        CgroupVersion::V1 => own.dir.join(format!("wd-test-{}", std::process::id())),
        // v2's no-internal-processes rule: make it beside the root, which delegates memory.
        CgroupVersion::V2 => own
            .mount_point
            .join(format!("wd-test-{}", std::process::id())),
    };
    let inner = outer.join("inner");
    std::fs::create_dir(&outer).map_err(|e| format!("mkdir {}: {e}", outer.display()))?;
    let cg = TestCgroup {
        outer: outer.clone(),
        inner: inner.clone(),
        child: None,
    };
    let (limit_file, value) = match own.version {
        CgroupVersion::V1 => ("memory.limit_in_bytes", limit.to_string()),
        CgroupVersion::V2 => {
            let _ = std::fs::write(outer.join("cgroup.subtree_control"), "+memory");
            ("memory.max", limit.to_string())
        }
    };
    std::fs::write(outer.join(limit_file), &value)
        .map_err(|e| format!("cannot set {limit_file}: {e}"))?;
    std::fs::create_dir(&inner).map_err(|e| format!("mkdir {}: {e}", inner.display()))?;
    Ok(cg)
}

/// Starts `sh -c script` held at a `read` until its stdin closes, moves it into the inner
/// cgroup, then releases it: everything it runs is charged to the cgroup from the start.
fn spawn_into(cg: &mut TestCgroup, script: &str) -> u32 {
    let mut child = Command::new("sh")
        .args(["-c", &format!("read _go; {script}")])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::fs::write(cg.inner.join("cgroup.procs"), pid.to_string()).unwrap();
    drop(child.stdin.take());
    cg.child = Some(child);
    pid
}

#[test]
fn real_memory_cgroup_limit_usage_and_oom_kill_counter() {
    const LIMIT: u64 = 128 << 20;
    let mut cg = match make_test_cgroup(LIMIT) {
        Ok(cg) => cg,
        Err(missing) => {
            require(false, &missing);
            return;
        }
    };
    // Touches 32 MiB, then waits.
    let pid = spawn_into(
        &mut cg,
        "exec python3 -c \"import time; x = b'x' * (32 << 20); time.sleep(60)\"",
    );
    let mounts = CgroupMounts::read(Path::new("/proc")).unwrap();
    let mut table = ResourceTable::default();
    let mut src =
        CgroupMemory::for_pid(Path::new("/proc"), pid, &mounts, &Reads::Own, &mut table).unwrap();
    assert_eq!(src.location().dir, cg.inner);
    let mut used = 0;
    for _ in 0..100 {
        let (u, limit) = sample_once(&mut src);
        assert_eq!(limit, LIMIT, "the limit sits on the parent cgroup");
        used = u;
        if used >= 32 << 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(used >= 32 << 20, "working set {used} never reached 32 MiB");
    if let Some(mut c) = cg.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }

    // Something that outgrows the limit: the kernel OOM-kills it and the counter moves.
    let mut oom: OomKillCounter = src.oom_kill_counter().unwrap();
    let before = oom.read().unwrap();
    spawn_into(&mut cg, "exec python3 -c \"x = b'x' * (512 << 20)\"");
    let status = cg.child.take().unwrap().wait().unwrap();
    if status.signal() == Some(libc::SIGKILL) {
        assert!(oom.read().unwrap() > before, "OOM kill not counted");
    } else {
        eprintln!("the hog was not OOM-killed ({status}); swap may have absorbed it");
    }
}

/// Two sibling memory cgroups `wd-move-PID-N/{a,b}` with different limits, and a process to
/// move between them; all removed on drop.
struct TwoCgroups {
    outer: PathBuf,
    a: PathBuf,
    b: PathBuf,
    child: Child,
}

impl Drop for TwoCgroups {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for dir in [&self.a, &self.b, &self.outer] {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn make_two_cgroups(limit_a: u64, limit_b: u64) -> Result<(TwoCgroups, CgroupVersion), String> {
    if !is_root() {
        return Err("root (to create memory cgroups)".into());
    }
    let mounts = CgroupMounts::read(Path::new("/proc")).map_err(|e| e.to_string())?;
    let own = locate_for_pid(Path::new("/proc"), std::process::id(), &mounts)
        .map_err(|e| format!("a memory cgroup of its own: {e}"))?;
    // One name per call: the tests of this binary run at once.
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("wd-move-{}-{n}", std::process::id());
    let (outer, limit_file) = match own.version {
        CgroupVersion::V1 => (own.dir.join(name), "memory.limit_in_bytes"),
        CgroupVersion::V2 => (own.mount_point.join(name), "memory.max"),
    };
    std::fs::create_dir(&outer).map_err(|e| format!("mkdir {}: {e}", outer.display()))?;
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let cgs = TwoCgroups {
        a: outer.join("a"),
        b: outer.join("b"),
        outer,
        child,
    };
    if own.version == CgroupVersion::V2 {
        let _ = std::fs::write(cgs.outer.join("cgroup.subtree_control"), "+memory");
    }
    for (dir, limit) in [(&cgs.a, limit_a), (&cgs.b, limit_b)] {
        std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        std::fs::write(dir.join(limit_file), limit.to_string())
            .map_err(|e| format!("cannot set {limit_file}: {e}"))?;
    }
    Ok((cgs, own.version))
}

/// The limit of `cgroup_memory` in one sample.
fn sample_at(src: &mut CgroupMemory, now_ns: u64) -> Result<u64, String> {
    let mut limit = None;
    let id = src.id();
    src.sample(&Tick { now_ns, tree: &[] }, &mut |s| {
        if Some(s.resource) == id {
            limit = Some(s.limit)
        }
    })
    .map_err(|e| e.to_string())?;
    limit.ok_or_else(|| "no sample".into())
}

/// Regression: a target moved to another cgroup mid-run went on being read in its old
/// cgroup, whose numbers no longer include it, or stopped being watched once the old one was
/// removed.
#[test]
fn a_target_moved_to_another_cgroup_is_watched_in_the_new_one() {
    moved_target(&Reads::Own, None);
}

/// The same through a service's shared reads, beside a second reader that stays in the old
/// cgroup: the moved one reopens its files at the new path, the other keeps the old one's.
#[test]
fn a_target_moved_to_another_cgroup_is_watched_in_the_new_one_through_shared_reads() {
    let shared = SharedReads::new();
    moved_target(&Reads::Shared(shared.clone()), Some(&shared));
}

fn moved_target(reads: &Reads, shared: Option<&SharedReads>) {
    const A: u64 = 256 << 20;
    const B: u64 = 128 << 20;
    const S: u64 = 1_000_000_000;
    let (cgs, version) = match make_two_cgroups(A, B) {
        Ok(c) => c,
        Err(missing) => {
            require(false, &missing);
            return;
        }
    };
    let pid = cgs.child.id();
    let move_to = |dir: &Path| {
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    };
    move_to(&cgs.a);
    let mounts = CgroupMounts::read(Path::new("/proc")).unwrap();
    let mut table = ResourceTable::default();
    let mut src =
        CgroupMemory::for_pid(Path::new("/proc"), pid, &mounts, reads, &mut table).unwrap();
    let id = src.id();
    assert_eq!(src.location().dir, cgs.a);
    let mut stay = shared.map(|_| {
        let mut stay = CgroupMemory::open(src.location().clone(), reads).unwrap();
        stay.register(&mut ResourceTable::default()).unwrap();
        stay
    });
    let sample_at = |src: &mut CgroupMemory, now_ns: u64| {
        if let Some(shared) = shared {
            shared.next_tick();
        }
        sample_at(src, now_ns)
    };
    assert_eq!(sample_at(&mut src, S), Ok(A));

    // Moved while A stays: noticed at the next check (at most a second later), not before.
    move_to(&cgs.b);
    assert_eq!(sample_at(&mut src, S + S / 2), Ok(A));
    assert_eq!(src.location().dir, cgs.a);
    assert_eq!(sample_at(&mut src, 2 * S), Ok(B));
    if let Some(stay) = &mut stay {
        // Same tick: the reader left in A still reads A's files.
        assert_eq!(self::sample_at(stay, 2 * S), Ok(A));
        assert_eq!(stay.location().dir, cgs.a);
    }
    assert_eq!(
        (src.location().dir.as_path(), src.id()),
        (cgs.b.as_path(), id)
    );
    assert_eq!(table.all().len(), 2, "no new resource");

    // Moved back and the old cgroup removed: the failed read looks again at once.
    move_to(&cgs.a);
    let mut removed = false;
    for _ in 0..50 {
        if std::fs::remove_dir(&cgs.b).is_ok() {
            removed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(removed, "cannot remove {}", cgs.b.display());
    let after_removal = sample_at(&mut src, 2 * S + 1);
    if version == CgroupVersion::V1 {
        // v1 fails reads of a removed cgroup's kept-open files (ENODEV): before the next
        // periodic check, the failure itself finds A again.
        assert_eq!(after_removal, Ok(A));
        assert_eq!(src.location().dir, cgs.a);
    }
    assert_eq!(sample_at(&mut src, 3 * S), Ok(A));
    assert_eq!(src.location().dir, cgs.a);
}

/// Regression: on cgroup v1 an exited process (a zombie until reaped) names the root memory
/// cgroup in `/proc/PID/cgroup`; that was taken for a move, so the run that had been
/// OOM-killed in its 400 MiB cgroup was recorded as having no memory limit.
#[test]
fn a_target_that_exits_is_not_moved_to_the_root_cgroup() {
    const A: u64 = 256 << 20;
    const S: u64 = 1_000_000_000;
    let (mut cgs, _) = match make_two_cgroups(A, A) {
        Ok(c) => c,
        Err(missing) => {
            require(false, &missing);
            return;
        }
    };
    let pid = cgs.child.id();
    std::fs::write(cgs.a.join("cgroup.procs"), pid.to_string()).unwrap();
    let mounts = CgroupMounts::read(Path::new("/proc")).unwrap();
    let mut table = ResourceTable::default();
    let mut src =
        CgroupMemory::for_pid(Path::new("/proc"), pid, &mounts, &Reads::Own, &mut table).unwrap();
    assert_eq!(sample_at(&mut src, S), Ok(A));

    // Killed and not reaped: a zombie, whose file still reads.
    cgs.child.kill().unwrap();
    let zombie = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|t| t.rsplit(") ").next().is_some_and(|f| f.starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !zombie() {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never became a zombie"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for k in 2..5 {
        assert_eq!(sample_at(&mut src, k * S), Ok(A));
        assert_eq!(src.location().dir, cgs.a);
    }
}
