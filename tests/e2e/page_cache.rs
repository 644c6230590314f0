//! Page cache against the cgroup memory figure, on real memory cgroups: a data set re-read
//! every epoch and checkpoints written to disk fill the cgroup with page cache the kernel
//! reclaims, and must raise no alert; tmpfs files (shmem, charged to the cgroup and not
//! reclaimable without swap) must be warned before the cgroup is full, with no OOM kill.
//! The page cache itself stays visible as the unlimited `cgroup_cache` resource.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

/// The workload script.
fn cache_py() -> String {
    repo()
        .join("tests/e2e/scripts/cache.py")
        .display()
        .to_string()
}

/// A memory cgroup of `limit` bytes, or None (after saying why) when this test cannot run.
fn cgroup(limit: u64) -> Option<MemoryCgroup> {
    if !require(is_root(), "root (to create a memory cgroup)") {
        return None;
    }
    need(
        MemoryCgroup::create(limit),
        "a memory cgroup (cgroup v1 or v2 memory controller)",
    )
}

/// A scratch directory on a real disk: page cache is what is tested, and a tmpfs's pages
/// are shmem, not page cache.
fn disk_scratch() -> Option<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("wd-e2e-cache-")
        .tempdir_in("/var/tmp")
        .expect("tempdir in /var/tmp");
    let fstype = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir.path())
        .output()
        .expect("stat -f");
    let fstype = String::from_utf8_lossy(&fstype.stdout).trim().to_string();
    require(
        fstype != "tmpfs" && fstype != "ramfs",
        &format!("/var/tmp on a disk filesystem (it is {fstype})"),
    )
    .then_some(dir)
}

/// Bytes an unprivileged user may still write on the filesystem of `path`: what the flight
/// recorder counts as free (`f_bavail` blocks of `f_frsize`).
fn available_bytes(path: &Path) -> u64 {
    let vfs = rustix::fs::statvfs(path).expect("statvfs of the scratch directory");
    vfs.f_bavail.saturating_mul(vfs.f_frsize)
}

/// The cgroup's OOM-kill count (v1 `memory.oom_control`, v2 `memory.events`).
fn oom_kills(cg: &MemoryCgroup) -> u64 {
    let file = if cg.v2 {
        "memory.events"
    } else {
        "memory.oom_control"
    };
    let text = std::fs::read_to_string(cg.dir.join(file)).expect("read the OOM counter");
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no oom_kill line in {file}: {text}"))
}

/// Starts `python3 cache.py REPORT ARGS` inside `cg` (it moves itself in before Python
/// starts, so everything it touches is charged there) and waits until it is in.
fn start_in(cg: &MemoryCgroup, scene: &Scene, args: &[&str]) -> Child {
    let procs = cg.procs();
    let child = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$0\" && exec python3 \"$@\"",
            procs.to_str().unwrap(),
        ])
        .arg(cache_py())
        .arg(&scene.rep)
        .args(args)
        .env("WATCHDOG_REQUEST_FILE", &scene.req)
        .env("WATCHDOG_SIGNAL", "SIGUSR1")
        .spawn()
        .unwrap();
    cg.wait_holds(child.id());
    child
}

/// Runs the workload in `cg` under `watchdog --lead 3s --pid` to its end: its exit
/// status, the watchdog's output and its events.
fn watch(
    cg: &MemoryCgroup,
    scene: &Scene,
    disk: &Path,
    args: &[&str],
) -> (i32, Output, Vec<Value>) {
    let mut workload = start_in(cg, scene, args);
    let pid = workload.id();
    let watchdog = scene
        .watchdog()
        .args(["--lead", "3s", "--disk"])
        .arg(disk)
        .args(["--pid", &pid.to_string()])
        .arg("--record")
        .arg(recording(scene))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = workload.wait().unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "watchdog: {stderr}");
    let code = status.code().unwrap_or_else(|| {
        panic!(
            "the workload was killed by signal {:?} (cgroup {}); watchdog: {stderr}",
            status.signal(),
            cg.version()
        )
    });
    (code, out, read_events(&scene.events))
}

/// Where [`watch`] has the flight recording written.
fn recording(scene: &Scene) -> std::path::PathBuf {
    scene.dir.path().join("recording.csv")
}

/// Peak `used` of `resource` in the exit event.
fn peak(events: &[Value], resource: &str) -> u64 {
    let exit = of_kind(events, "exit");
    exit[0]["peaks"][resource]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no peak for {resource}: {exit:?}"))
}

/// Asserts no alert and no OOM kill, and that the page cache was announced as
/// `cgroup_cache` (limit null), reached at least `cache_at_least` bytes and is in the
/// flight recording.
fn assert_quiet_with_cache_seen(
    scene: &Scene,
    events: &[Value],
    out: &Output,
    oom_before: u64,
    cg: &MemoryCgroup,
    cache_at_least: u64,
) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let alerts = of_kind(events, "alert");
    assert!(
        alerts.is_empty(),
        "false alarm from page cache (cgroup {}): {alerts:?}\n{stderr}",
        cg.version()
    );
    assert_eq!(oom_kills(cg), oom_before, "an OOM kill happened: {stderr}");
    let limits = of_kind(events, "limit");
    let cache = limits
        .iter()
        .find(|e| e["resource"] == "cgroup_cache")
        .unwrap_or_else(|| panic!("cgroup_cache not announced: {limits:?}"));
    assert_eq!(cache["kind"], "cgroup_cache");
    assert!(
        cache["limit"].is_null(),
        "cgroup_cache has a limit: {cache}"
    );
    let cached = peak(events, "cgroup_cache");
    assert!(
        cached >= cache_at_least,
        "the page cache peaked at {} MiB, expected at least {} MiB: the test did not fill the cgroup with cache",
        cached / MIB,
        cache_at_least / MIB
    );
    let rec = std::fs::read_to_string(recording(scene)).expect("recording written at exit");
    // Rows are kept on change and once a second: a cache that filled and then held still
    // gives about one row a second of the run, so only a few are certain on a fast machine.
    let rows = rec.lines().filter(|l| l.contains(",cgroup_cache,")).count();
    assert!(rows >= 3, "{rows} cgroup_cache rows in the recording");
}

/// Reads a 370 MiB data set 4 times (through `read()`, or a mapping) in a 400 MiB cgroup
/// and checks nothing was alerted.
fn data_set_epochs(mmap: bool) {
    let Some(cg) = cgroup(400 * MIB) else { return };
    let Some(data) = disk_scratch() else { return };
    let scene = Scene::new();
    let oom_before = oom_kills(&cg);
    let file = data.path().join("dataset.bin");
    let mut args = vec![
        "epochs",
        "--file",
        file.to_str().unwrap(),
        "--mib",
        "370",
        "--epochs",
        "4",
        // Python and this: about 20 MiB, as in the report. The data set then just fits
        // beside it, and the second read moves all of it to the active list.
        "--hold-mib",
        "8",
    ];
    if mmap {
        args.push("--mmap");
    }
    let (code, out, events) = watch(&cg, &scene, data.path(), &args);
    let r = report(&scene.rep);
    assert_eq!(code, 0, "{r}");
    assert_eq!(report_events(&r, "epoch").len(), 4, "{r}");
    assert!(
        report_events(&r, "checkpoint").is_empty(),
        "asked to checkpoint: {r}"
    );
    assert_quiet_with_cache_seen(&scene, &events, &out, oom_before, &cg, 200 * MIB);
}

/// Regression: a run reading its 370 MiB data set once per epoch in a 400 MiB cgroup was
/// told cgroup_memory was nearly exhausted at its second epoch (the re-read moves the
/// cache to the active list, which usage - inactive_file counted as used).
#[test]
fn a_data_set_reread_every_epoch_raises_no_alert() {
    data_set_epochs(false);
}

/// The same data set read through a mapping, as `numpy.memmap` does.
#[test]
fn a_memory_mapped_data_set_reread_every_epoch_raises_no_alert() {
    data_set_epochs(true);
}

/// Regression: writing 1.5 GB of checkpoints to disk inside a 400 MiB cgroup raised the
/// same false alarm (dirty cache that reclaim cannot write back is activated, and
/// usage - inactive_file counted it as used). The last 8 files are kept (512 MiB, more
/// than the cgroup holds), as a trainer's `save_total_limit` does: the test needs no more
/// of the machine's disk than that.
#[test]
fn writing_four_times_the_limit_to_disk_raises_no_alert() {
    let Some(cg) = cgroup(400 * MIB) else { return };
    let Some(data) = disk_scratch() else { return };
    // What the kept files take, and the 256 MiB the flight recorder leaves free on a big
    // filesystem (docs/recording.md) with 100 MiB to spare.
    let wanted = (8 * 64 + 256 + 100) * MIB;
    let free = available_bytes(data.path());
    assert!(
        free >= wanted,
        "{} has {} MiB available; this test needs {} MiB",
        data.path().display(),
        free / MIB,
        wanted / MIB
    );
    let scene = Scene::new();
    let oom_before = oom_kills(&cg);
    let (code, out, events) = watch(
        &cg,
        &scene,
        data.path(),
        &[
            "write",
            "--dir",
            data.path().to_str().unwrap(),
            "--mib",
            "1600",
            "--file-mib",
            "64",
            "--hold-mib",
            "8",
            // As torch.save does: no fsync. Reclaim in the cgroup cannot write dirty
            // pages back itself and moves them to the active list.
            "--no-fsync",
            "--keep",
            "8",
        ],
    );
    let r = report(&scene.rep);
    assert_eq!(code, 0, "{r}");
    assert_eq!(report_events(&r, "written")[0]["mib"], 1600, "{r}");
    assert_quiet_with_cache_seen(&scene, &events, &out, oom_before, &cg, 200 * MIB);
}

/// tmpfs pages are shmem: charged to the cgroup and not reclaimable without swap, so they
/// stay in the figure. Files written to a tmpfs inside the cgroup are warned at least 2 s
/// before the cgroup would be full (`--lead 3s`); the writer stops when asked and nothing is
/// OOM-killed.
#[test]
fn tmpfs_files_written_inside_the_cgroup_are_warned_before_it_is_full() {
    const LIMIT: u64 = 400 * MIB;
    let Some(cg) = cgroup(LIMIT) else { return };
    // Bigger than the cgroup: the cgroup, not the tmpfs, is what fills.
    let Some(fs) = need(Tmpfs::mount("1g"), "a tmpfs mount") else {
        return;
    };
    let scene = Scene::new();
    let oom_before = oom_kills(&cg);
    let (code, out, events) = watch(
        &cg,
        &scene,
        scene.dir.path(),
        &[
            "tmpfs",
            "--dir",
            fs.path().to_str().unwrap(),
            "--step-mib",
            "5",
            "--every",
            "0.1",
            "--mib",
            "800",
            "--linger",
            "2",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r = report(&scene.rep);
    assert_eq!(code, 0, "{r}\n{stderr}");
    assert_eq!(oom_kills(&cg), oom_before, "an OOM kill happened: {stderr}");
    let alerts = of_kind(&events, "alert");
    assert!(!alerts.is_empty(), "no alert: {r}\n{stderr}");
    let alert = alerts[0];
    assert_eq!(alert["resource"], "cgroup_memory", "{alerts:?}");
    assert_eq!(alert["limit"], LIMIT, "{alert}");
    let ckpt = report_events(&r, "checkpoint");
    assert_eq!(ckpt.len(), 1, "asked once, stopped: {r}");
    assert_eq!(ckpt[0]["resource"], "cgroup_memory");
    // The writer's own rate over its last steps (up to 4 s of them).
    let steps: Vec<(f64, f64)> = ckpt[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s[0].as_f64().unwrap(), s[1].as_f64().unwrap()))
        .collect();
    assert!(steps.len() >= 10, "too few steps before the request: {r}");
    let (first, last) = (steps[0], steps[steps.len() - 1]);
    let mib_per_s = (last.1 - first.1) / (last.0 - first.0);
    let headroom_mib = (LIMIT - alert["used"].as_u64().unwrap()) as f64 / MIB as f64;
    let ahead_s = headroom_mib / mib_per_s;
    eprintln!(
        "alert at {} MiB of {} MiB, writing {mib_per_s:.1} MiB/s: {ahead_s:.2} s before full",
        alert["used"].as_u64().unwrap() / MIB,
        LIMIT / MIB
    );
    assert!(
        ahead_s >= 2.0,
        "warned only {ahead_s:.2} s before the cgroup is full ({headroom_mib:.0} MiB left at {mib_per_s:.1} MiB/s): {alert}"
    );
    // What it wrote is still held (tmpfs keeps it), and it fit.
    let written = report_events(&r, "stopped")[0]["written_mib"]
        .as_u64()
        .unwrap();
    assert!(written * MIB < LIMIT, "{r}");
    assert!(
        peak(&events, "cgroup_memory") >= written * MIB,
        "the tmpfs pages were not counted in cgroup_memory: {r} {events:?}"
    );
}
