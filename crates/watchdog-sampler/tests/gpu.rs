//! The GPU source through the real `nvml-wrapper` code, against the fake
//! `libnvidia-ml.so.1` in `tests/fake-nvml/` (built here with `cc`).
//!
//! Every test copies the fake library into its own temp directory next to its
//! own `fake-nvml.script`: copies at different paths load as separate
//! instances, so the tests run in parallel without sharing the fake's state.
#![cfg(feature = "gpu")]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use watchdog_sampler::gpu::{
    GpuConfig, GpuHandle, GpuMode, GpuProcess, GpuStart, GpuWatch, UnwatchedCause, VisibleDevices,
};
use watchdog_sampler::{Outcome, ResourceTable, Source, SourceError, Tick};
use watchdog_types::{ResourceId, ResourceKind, Sample};

const MIB: u64 = 1024 * 1024;

/// How long a test waits for the GPU thread (a late poll pushes the next 100x as far).
const DEADLINE: Duration = Duration::from_secs(30);

/// Builds the fake library once per test run.
fn fake_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        assert!(
            std::env::var_os("FAKE_NVML_SCRIPT").is_none(),
            "unset FAKE_NVML_SCRIPT: these tests give each fake its own script"
        );
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fake-nvml/fake_nvml.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        std::fs::create_dir_all(&dir).expect("create the fake's build dir");
        let tmp = dir.join(format!("libnvidia-ml.so.1.{}", std::process::id()));
        let status = std::process::Command::new(std::env::var("CC").unwrap_or("cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg("-ldl")
            .status()
            .expect("run cc");
        assert!(status.success(), "cc failed on {}", src.display());
        let lib = dir.join("libnvidia-ml.so.1");
        std::fs::rename(&tmp, &lib).expect("install the fake");
        lib
    })
}

/// A fake NVML with this script, in its own directory (kept alive by the returned TempDir).
fn fake(script: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake_lib(), &lib).expect("copy the fake");
    std::fs::write(dir.path().join("fake-nvml.script"), script).expect("write the script");
    (dir, lib)
}

/// A procfs stand-in: `self/ns/pid` says which PID namespace the watchdog is in.
fn proc_root(container: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("self/ns")).expect("mkdir");
    let ns = if container {
        "pid:[4026532100]"
    } else {
        "pid:[4026531836]"
    };
    std::os::unix::fs::symlink(ns, dir.path().join("self/ns/pid")).expect("symlink");
    dir
}

fn config(lib: &Path, proc_root: &Path) -> GpuConfig {
    let mut c = GpuConfig::new(GpuMode::Required, Duration::from_millis(10));
    c.lib_path = Some(lib.to_path_buf());
    c.memory_period = Duration::from_millis(20);
    c.process_period = Duration::from_millis(50);
    c.proc_root = proc_root.into();
    c.visible = VisibleDevices::default();
    c
}

fn start(config: &GpuConfig, table: &mut ResourceTable) -> GpuWatch {
    match GpuWatch::start(config, table) {
        Ok(GpuStart::Watching(w)) => w,
        Ok(GpuStart::Unwatched(u)) => panic!("not watching: {u}"),
        Err(e) => panic!("{e}"),
    }
}

/// Polls `done` every 10 ms until it holds; fails the test after [`DEADLINE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < DEADLINE, "waited {DEADLINE:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Ticks the source every 10 ms with this tree until `done` holds of the samples; returns them.
fn run_until(
    watch: &mut GpuWatch,
    tree: &[u32],
    what: &str,
    mut done: impl FnMut(&[Sample]) -> bool,
) -> Vec<Sample> {
    let t0 = Instant::now();
    let mut samples = Vec::new();
    wait_until(what, || {
        let tick = Tick {
            now_ns: t0.elapsed().as_nanos() as u64,
            tree,
        };
        let _ = watch.sample(&tick, &mut |s| samples.push(s));
        done(&samples)
    });
    samples
}

/// The memory the latest process list gave `pid` on the device behind `res` (0: not listed).
fn listed(handle: &GpuHandle, res: ResourceId, pid: u32) -> u64 {
    handle
        .processes(res)
        .iter()
        .find(|p| p.pid == pid)
        .map_or(0, |p| p.used_bytes)
}

/// Ticks until `n` more process lists were read, seen by `pid`'s usage growing on `res`.
fn run_lists(
    watch: &mut GpuWatch,
    tree: &[u32],
    handle: &GpuHandle,
    (res, pid): (ResourceId, u32),
    n: usize,
) -> Vec<Sample> {
    let mut last = listed(handle, res, pid);
    let mut lists = 0;
    run_until(watch, tree, "more process lists", |_| {
        let now = listed(handle, res, pid);
        if now > last {
            last = now;
            lists += 1;
        }
        lists >= n
    })
}

/// While it lives, the fake's process-list calls hang (its `stall` file exists).
struct Stall(PathBuf);

impl Stall {
    fn begin(path: &Path) -> Stall {
        std::fs::write(path, "").expect("write the stall file");
        Stall(path.to_path_buf())
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn id(table: &ResourceTable, name: &str) -> ResourceId {
    table
        .all()
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no resource {name}"))
        .id
}

// ---- log capture: a minimal global tracing subscriber ----

static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        LOGS.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
            "{} {}",
            event.metadata().level(),
            m.0
        ));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = tracing::subscriber::set_global_default(Capture);
    });
}

fn logs_containing(needle: &str) -> Vec<String> {
    LOGS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}

// ---- tests ----

#[test]
fn growth_is_seen_with_the_limit_cuda_can_reach() {
    // Room for 100 s of growth: the wait below never runs into the cap.
    let (_dir, lib) = fake(
        "# one GPU growing by 200 MiB/s, 10 MiB reserved\n\
         device Fake_A100 GPU-11111111-growth 20000 100 200 10\n",
    );
    let procfs = proc_root(false);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);

    let res = &table.all()[0];
    assert_eq!(res.kind, ResourceKind::GpuMemory);
    assert_eq!(res.name, "gpu0");
    assert_eq!(res.source, "Fake A100 (GPU-11111111-growth)");

    // Ten readings by the GPU thread over at least a second, however late it polls
    // (the first sample is the one `start` read, timed no earlier than the first tick).
    let samples = run_until(&mut watch, &[1], "10 readings over 1 s", |s| {
        s.len() >= 11 && s[s.len() - 1].t_ns.saturating_sub(s[1].t_ns) >= 1_000_000_000
    });
    assert!(
        samples
            .iter()
            .all(|s| s.resource == res.id && s.limit == 19_990 * MIB)
    );
    // One sample per new NVML reading: strictly increasing time and usage.
    for w in samples.windows(2) {
        assert!(w[1].t_ns > w[0].t_ns && w[1].used > w[0].used, "{w:?}");
    }
    let (a, b) = (samples[1], samples[samples.len() - 1]);
    let rate = (b.used - a.used) as f64 / MIB as f64 / ((b.t_ns - a.t_ns) as f64 / 1e9);
    assert!((150.0..250.0).contains(&rate), "rate {rate} MiB/s");
}

#[test]
fn two_processes_map_to_the_tree_and_the_grower_is_named() {
    let (_dir, lib) = fake(
        "device GPU_zero GPU-22222222-a 8000 500 0\n\
         device GPU_one GPU-22222222-b 8000 500 0\n\
         process 0 4242 1000 100   # ours, growing\n\
         process 0 5555 2000 0     # someone else's, flat\n\
         process 1 999999 3000 0   # someone else's, on the other GPU\n",
    );
    let procfs = proc_root(false);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    let handle = watch.handle();
    let (gpu0, gpu1) = (id(&table, "gpu0"), id(&table, "gpu1"));

    // Before any process list: every visible device (the first tick).
    let tree = [4242, 4243];
    let first = run_until(&mut watch, &tree, "a first sample", |s| !s.is_empty());
    let firsts: Vec<_> = first.iter().map(|s| s.resource).collect();
    assert!(
        firsts.contains(&gpu0) && firsts.contains(&gpu1),
        "{firsts:?}"
    );

    // A process list that maps ours to the tree, read 0.8 s or more into its growth
    // (1000 MiB + 100 MiB/s): by then the growth history spans eight lists at least
    // 50 ms apart, or goes back to the first list.
    let mapped_late =
        |p: &GpuProcess| p.pid == 4242 && p.tree_pid.is_some() && p.used_bytes >= 1080 * MIB;
    let _ = run_until(&mut watch, &tree, "4242 in the tree at 1080 MiB", |_| {
        handle.processes(gpu0).iter().any(mapped_late)
    });
    let later = run_until(&mut watch, &tree, "a sample after", |s| !s.is_empty());
    assert!(later.iter().all(|s| s.resource == gpu0), "{later:?}");
    // Device usage counts everybody on the GPU: 500 + 1000+ + 2000 MiB.
    assert!(later.iter().all(|s| s.used >= 3500 * MIB));

    let devices = handle.devices();
    assert!(devices[0].watched && !devices[1].watched, "{devices:?}");
    assert!(!handle.device_level_fallback());

    let top = handle.top_grower(gpu0).expect("a grower on gpu0");
    assert_eq!(
        (top.pid, top.tree_pid, top.graphics),
        (4242, Some(4242), false)
    );
    let rate = top.growth_bytes_per_s / MIB as f64;
    assert!((50.0..150.0).contains(&rate), "rate {rate} MiB/s");

    let procs = handle.processes(gpu0);
    assert_eq!(procs.len(), 2);
    assert_eq!((procs[0].pid, procs[0].tree_pid), (5555, None));
    assert_eq!(procs[0].used_bytes, 2000 * MIB);
    assert_eq!(handle.top_grower(gpu1), None);
    assert_eq!(handle.processes(gpu1)[0].pid, 999999);
}

#[test]
fn host_pids_map_through_nspid_inside_a_container() {
    let (_dir, lib) = fake(
        "device GPU_zero GPU-33333333-a 8000 0 0\n\
         device GPU_one GPU-33333333-b 8000 0 0\n\
         process 1 4242 1000 0 graphics\n\
         process 0 777 1000 0\n",
    );
    // The watchdog in a container's PID namespace, with the host's PIDs visible.
    let procfs = proc_root(true);
    let p = procfs.path().join("4242");
    std::fs::create_dir_all(p.join("ns")).expect("mkdir");
    std::os::unix::fs::symlink("pid:[4026532100]", p.join("ns/pid")).expect("symlink");
    std::fs::write(
        p.join("status"),
        "Name:\tpython\nPid:\t4242\nNSpid:\t4242\t17\n",
    )
    .expect("write");
    // 777 is in another container: same inner PID, other namespace.
    let q = procfs.path().join("777");
    std::fs::create_dir_all(q.join("ns")).expect("mkdir");
    std::os::unix::fs::symlink("pid:[4026532999]", q.join("ns/pid")).expect("symlink");
    std::fs::write(q.join("status"), "NSpid:\t777\t17\n").expect("write");

    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    let handle = watch.handle();
    let gpu1 = id(&table, "gpu1");
    let _ = run_until(&mut watch, &[17], "4242 mapped to the tree", |_| {
        handle.processes(gpu1).first().and_then(|p| p.tree_pid) == Some(17)
    });
    let later = run_until(&mut watch, &[17], "a sample after", |s| !s.is_empty());
    assert!(later.iter().all(|s| s.resource == gpu1), "{later:?}");
    let procs = handle.processes(gpu1);
    assert_eq!(
        (procs[0].pid, procs[0].tree_pid, procs[0].graphics),
        (4242, Some(17), true)
    );
    assert_eq!(handle.processes(id(&table, "gpu0"))[0].tree_pid, None);
}

#[test]
fn unmappable_host_pids_fall_back_to_device_level_and_say_so_once() {
    capture_logs();
    let (_dir, lib) = fake(
        "device GPU_zero GPU-44444444-fallback-a 8000 0 0\n\
         device GPU_one GPU-44444444-fallback-b 8000 0 0\n\
         process 0 4242 1000 10\n",
    );
    let procfs = proc_root(true);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    let handle = watch.handle();
    let (gpu0, gpu1) = (id(&table, "gpu0"), id(&table, "gpu1"));
    let _ = run_until(&mut watch, &[17], "the fallback", |_| {
        handle.device_level_fallback()
    });
    // Two more process lists (the second begun after the fallback was taken), for
    // a repeated notice to show, and both devices' readings after it.
    let _ = run_lists(&mut watch, &[17], &handle, (gpu0, 4242), 2);
    let _ = run_until(&mut watch, &[17], "readings of both devices", |s| {
        s.iter().any(|s| s.resource == gpu0) && s.iter().any(|s| s.resource == gpu1)
    });
    assert!(handle.device_level_fallback());
    assert!(handle.devices().iter().all(|d| d.watched));
    let said = logs_containing("GPU-44444444-fallback-a");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("by host PID"), "{said:?}");
}

#[test]
fn a_device_that_falls_off_the_bus_is_skipped_and_logged_once() {
    capture_logs();
    let (_dir, lib) = fake(
        "device GPU_zero GPU-55555555-stays 8000 100 10\n\
         device GPU_one GPU-55555555-vanishes 8000 100 10\n\
         process 0 5151 100 10   # growing: tells one process list from the next\n\
         process 1 4242 100 0\n\
         vanish 1 0.3\n",
    );
    let procfs = proc_root(false);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    let handle = watch.handle();
    let (gpu0, gpu1) = (id(&table, "gpu0"), id(&table, "gpu1"));
    let _ = run_until(&mut watch, &[1], "gpu1 lost and said so", |_| {
        handle.devices()[1].lost && !logs_containing("GPU-55555555-vanishes").is_empty()
    });
    // Then rounds of both polls begun after the loss, for a repeated warning or a
    // reading of the lost device to show: two process lists, three memory readings.
    let mut later = run_lists(&mut watch, &[1], &handle, (gpu0, 5151), 2);
    later.extend(run_until(&mut watch, &[1], "3 readings of gpu0", |s| {
        s.iter().filter(|s| s.resource == gpu0).count() >= 3
    }));
    assert!(later.iter().all(|s| s.resource != gpu1), "{later:?}");
    let devices = handle.devices();
    assert!(!devices[0].lost && devices[1].lost, "{devices:?}");
    assert!(devices[1].nvml_errors >= 1);
    let said = logs_containing("GPU-55555555-vanishes");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("WARN") && said[0].contains("no longer watched"));
    assert!(said[0].contains("fell off the bus"), "{said:?}");
    assert!(logs_containing("GPU-55555555-stays").is_empty());
}

#[test]
fn when_every_device_is_lost_the_source_reports_gone_once() {
    let (_dir, lib) = fake("device GPU_zero GPU-66666666-a 8000 100 0\nvanish 0 0.1\n");
    let procfs = proc_root(false);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    let tick = Tick {
        now_ns: 1,
        tree: &[1],
    };
    let mut results = Vec::new();
    wait_until("the source to report gone", || {
        results.push(watch.sample(&tick, &mut |_| {}));
        results.last().is_some_and(Result::is_err)
    });
    let (gone, before) = results.split_last().expect("a result");
    assert!(matches!(gone, Err(SourceError::Gone(_))), "{gone:?}");
    assert!(before.iter().all(Result::is_ok), "{before:?}");
    // Every device is lost for good: nothing can change after, so a few ticks tell.
    let after: Vec<_> = (0..3).map(|_| watch.sample(&tick, &mut |_| {})).collect();
    assert!(
        after.iter().all(|r| matches!(r, Ok(Outcome::Idle))),
        "{after:?}"
    );
}

#[test]
fn init_errors_map_to_one_sentence_each() {
    let cases = [
        (
            "init_error 9\n",
            UnwatchedCause::DriverNotLoaded,
            "the NVIDIA driver is not loaded",
        ),
        (
            "init_error 4\n",
            UnwatchedCause::NoPermission,
            "the NVIDIA management library has no permission to talk to the driver",
        ),
        (
            "init_error 18\n",
            UnwatchedCause::DriverMismatch,
            "the NVIDIA management library does not match the loaded driver's version",
        ),
        (
            "init_error 28\n",
            UnwatchedCause::NoGpu,
            "no NVIDIA GPU was found",
        ),
        (
            "# no device\n",
            UnwatchedCause::NoGpu,
            "no NVIDIA GPU was found",
        ),
        (
            "init_error 999\n",
            UnwatchedCause::InitFailed,
            "the NVIDIA management library failed to start",
        ),
        (
            "device GPU_zero GPU-77777777-a 8000 0 0\nvanish 0 0\n",
            UnwatchedCause::NoGpu,
            "none of the 1 NVIDIA GPUs could be read",
        ),
    ];
    for (script, cause, reason) in cases {
        let (_dir, lib) = fake(script);
        let procfs = proc_root(false);
        let mut c = config(&lib, procfs.path());
        c.mode = GpuMode::Auto;
        let mut table = ResourceTable::default();
        match GpuWatch::start(&c, &mut table) {
            Ok(GpuStart::Unwatched(u)) => {
                assert_eq!(u.cause, cause, "{script}: {u}");
                assert!(u.reason.starts_with(reason), "{script}: {u}");
                assert!(!u.reason.contains('\n'));
                assert!(u.to_string().starts_with("GPU memory is not watched: "));
            }
            other => panic!("{script}: {other:?}"),
        }
        assert!(table.all().is_empty());
        c.mode = GpuMode::Required;
        let err = GpuWatch::start(&c, &mut table).expect_err("required must fail");
        assert!(err.to_string().starts_with("--gpu required, but "), "{err}");
        assert!(err.to_string().contains(reason), "{err}");
    }
}

/// A missing library is an answer at once, not something to wait or retry for.
#[test]
fn a_missing_library_is_not_found_without_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nowhere/libnvidia-ml.so.1");
    let mut c = GpuConfig::new(GpuMode::Auto, Duration::from_millis(100));
    c.lib_path = Some(missing.clone());
    let mut table = ResourceTable::default();
    let t = Instant::now();
    let got = GpuWatch::start(&c, &mut table);
    let took = t.elapsed();
    match got {
        Ok(GpuStart::Unwatched(u)) => {
            assert_eq!(u.cause, UnwatchedCause::LibraryNotFound);
            assert_eq!(
                u.reason,
                format!(
                    "the NVIDIA management library '{}' was not found",
                    missing.display()
                )
            );
        }
        other => panic!("{other:?}"),
    }
    // Only catches a wait or a retry (dlopen fails in microseconds); not a speed measure.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    c.mode = GpuMode::Required;
    let err = GpuWatch::start(&c, &mut table).expect_err("required");
    assert!(err.to_string().contains("was not found"), "{err}");
}

/// This machine has no NVIDIA driver: the real default search finds nothing.
#[test]
fn the_default_search_finds_no_library_on_this_machine() {
    let mut c = GpuConfig::new(GpuMode::Auto, Duration::from_millis(100));
    c.lib_path = None;
    let mut table = ResourceTable::default();
    let t = Instant::now();
    let got = GpuWatch::start(&c, &mut table);
    let took = t.elapsed();
    match got {
        Ok(GpuStart::Unwatched(u)) => {
            assert_eq!(u.cause, UnwatchedCause::LibraryNotFound, "{u}");
            assert_eq!(
                u.reason,
                "the NVIDIA management library libnvidia-ml.so.1 was not found"
            );
        }
        Ok(GpuStart::Watching(_)) => panic!("found an NVIDIA library: is this a GPU machine?"),
        Err(e) => panic!("{e}"),
    }
    // Only catches a wait or a retry (dlopen fails in microseconds); not a speed measure.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    c.mode = GpuMode::Required;
    let err = GpuWatch::start(&c, &mut table).expect_err("required");
    assert_eq!(
        err.to_string(),
        "--gpu required, but the NVIDIA management library libnvidia-ml.so.1 was not found"
    );
    c.mode = GpuMode::Off;
    match GpuWatch::start(&c, &mut table) {
        Ok(GpuStart::Unwatched(u)) => assert_eq!(u.cause, UnwatchedCause::Off),
        other => panic!("{other:?}"),
    }
    assert!(table.all().is_empty());
}

#[test]
fn a_file_that_is_not_nvml_is_unusable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("libnvidia-ml.so.1");
    std::fs::write(&junk, "not an ELF file").expect("write");
    let mut c = GpuConfig::new(GpuMode::Auto, Duration::from_millis(100));
    c.lib_path = Some(junk);
    match GpuWatch::start(&c, &mut ResourceTable::default()) {
        Ok(GpuStart::Unwatched(u)) => {
            assert_eq!(u.cause, UnwatchedCause::LibraryUnusable, "{u}");
            assert!(u.reason.contains("could not be loaded"), "{u}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn visible_devices_choose_what_is_registered() {
    let script = "device GPU_zero GPU-88888888-a 8000 0 0\n\
                  device GPU_one GPU-88888888-b 8000 0 0\n\
                  device GPU_two GPU-88888888-c 8000 0 0\n";
    let procfs = proc_root(false);
    let names = |cuda: &str, nvidia: Option<&str>| {
        let (_dir, lib) = fake(script);
        let mut c = config(&lib, procfs.path());
        c.mode = GpuMode::Auto;
        c.visible = VisibleDevices {
            cuda: Some(cuda.into()),
            nvidia: nvidia.map(Into::into),
        };
        let mut table = ResourceTable::default();
        match GpuWatch::start(&c, &mut table) {
            Ok(GpuStart::Watching(_)) => Ok(table.all().iter().map(|r| r.name.clone()).collect()),
            Ok(GpuStart::Unwatched(u)) => Err(u),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(
        names("2,0", None),
        Ok(vec!["gpu0".to_string(), "gpu2".to_string()])
    );
    assert_eq!(names("GPU-88888888-b", None), Ok(vec!["gpu1".to_string()]));
    assert_eq!(names("1", Some("0,2")), Ok(vec!["gpu2".to_string()]));
    let none = names("5", None).expect_err("no device visible");
    assert_eq!(none.cause, UnwatchedCause::NoVisibleGpu);
    assert_eq!(
        none.reason,
        "none of the 3 NVIDIA GPUs is visible to the target (CUDA_VISIBLE_DEVICES='5')"
    );
}

#[test]
fn gpu_mode_parses_and_rejects_with_the_expected_values() {
    assert_eq!("auto".parse(), Ok(GpuMode::Auto));
    assert_eq!("off".parse(), Ok(GpuMode::Off));
    assert_eq!("required".parse(), Ok(GpuMode::Required));
    let err = "on".parse::<GpuMode>().expect_err("bad mode");
    assert_eq!(
        err.to_string(),
        "invalid GPU mode 'on': expected auto, off or required"
    );
    assert_eq!(GpuMode::Required.to_string(), "required");
}

/// The poll thread's read never waits on NVML: while NVML hangs in a process
/// list (as a driver can), a tick still returns the latest readings at once.
#[test]
fn sampling_never_waits_for_nvml() {
    let stall_dir = tempfile::tempdir().expect("tempdir");
    let stall_file = stall_dir.path().join("stall");
    let mut script = format!("stall {} 30\n", stall_file.display());
    for i in 0..8 {
        script.push_str(&format!("device GPU_{i} GPU-99999999-{i} 8000 100 50\n"));
        for p in 0..8 {
            script.push_str(&format!("process {i} {} 100 1\n", 10_000 + i * 100 + p));
        }
    }
    let (_dir, lib) = fake(&script);
    let procfs = proc_root(false);
    let mut table = ResourceTable::default();
    let mut watch = start(&config(&lib, procfs.path()), &mut table);
    // Dropped before `watch`, so the GPU thread is let go before it is joined.
    let _stall = Stall::begin(&stall_file);
    let held = stall_dir.path().join("stall.held");
    wait_until("NVML to hang in a process list", || held.exists());

    // NVML now hangs for 30 s, and every other NVML call waits for it: ticks that
    // called NVML, or waited for the GPU thread, would take that long. The bound
    // only tells the two apart; what a tick costs is not measured here.
    let tree: Vec<u32> = (0..64).collect();
    let tick = Tick {
        now_ns: 1,
        tree: &tree,
    };
    let mut n = 0;
    let t = Instant::now();
    let first = watch.sample(&tick, &mut |_| n += 1);
    let second = watch.sample(&tick, &mut |_| n += 1);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "two ticks took {took:?}");
    // The readings from before the hang, one per device, then nothing new.
    assert!(matches!(first, Ok(Outcome::Sampled)), "{first:?}");
    assert!(matches!(second, Ok(Outcome::Idle)), "{second:?}");
    assert_eq!(n, 8);
}

/// The service's `gpu = true` rules: every process on any device's compute or graphics
/// list, read through the real nvml-wrapper calls.
#[test]
fn holders_are_the_processes_on_every_devices_lists() {
    let (_dir, lib) = fake(
        "device A_100 GPU-a 1000 0 0\n\
         device B_100 GPU-b 1000 0 0\n\
         process 0 4242 100 0\n\
         process 1 4343 100 0 graphics\n\
         process 1 4444 50 0\n",
    );
    let holders = watchdog_sampler::gpu::holders::GpuHolders::open(Some(&lib)).expect("open");
    assert_eq!(holders.device_count(), 2);
    let mut pids: Vec<u32> = holders.pids().into_iter().collect();
    pids.sort_unstable();
    assert_eq!(pids, vec![4242, 4343, 4444]);
}

#[test]
fn holders_without_a_library_say_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("libnvidia-ml.so.1");
    let err = match watchdog_sampler::gpu::holders::GpuHolders::open(Some(&missing)) {
        Ok(_) => panic!("opened a missing library"),
        Err(e) => e,
    };
    assert!(err.reason.contains("was not found"), "{}", err.reason);
}
