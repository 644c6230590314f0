//! The kernel's wake-ups on a real memory cgroup (`docs/kernel-wake.md`): with a v1 usage
//! threshold armed, a leak is sampled between the ticks of a slow `--interval`; with the
//! cgroup filesystem read-only (as under systemd's `ProtectControlGroups=yes`) the threshold
//! is listed unarmed with the reason and the run is still watched by polling.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

/// Waits for `GATE` to exist, then allocates `CHUNKS` chunks of `MIB` MiB (touched), one
/// every `PERIOD` seconds, holds them a second and exits 0. The checkpoint signal is
/// ignored: what is tested is when the watchdog looks, not what the run does.
const LEAK: &str = r#"
import os, signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
gate, chunks, mib, period = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
while not os.path.exists(gate):
    time.sleep(0.02)
held = []
for _ in range(chunks):
    held.append(bytearray(b"x" * (mib << 20)))
    time.sleep(period)
time.sleep(1)
"#;

/// A v1 memory cgroup of `limit` bytes, or None (after saying why) when this test cannot run.
fn v1_cgroup(limit: u64) -> Option<MemoryCgroup> {
    if !require(is_root(), "root (to create a memory cgroup)") {
        return None;
    }
    let cg = need(MemoryCgroup::create(limit), "a memory cgroup")?;
    require(
        !cg.v2,
        "a cgroup v1 memory controller (thresholds are v1 only)",
    )
    .then_some(cg)
}

/// Starts the leak inside `cg`, waiting for `gate`, and waits until it is in.
fn leak_in(cg: &MemoryCgroup, gate: &std::path::Path, chunks: u32, mib: u32) -> Child {
    let procs = cg.procs();
    let child = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$0\" && exec python3 -c \"$@\"",
            procs.to_str().unwrap(),
        ])
        .arg(LEAK)
        .arg(gate)
        .args([chunks.to_string(), mib.to_string(), "0.1".to_string()])
        .spawn()
        .unwrap();
    cg.wait_holds(child.id());
    child
}

/// Opens the gate once the watchdog's `start` event is written, so the leak starts while
/// it watches; returns that event.
fn start_event_then_open(scene: &Scene, gate: &std::path::Path) -> Value {
    wait_for_start(&scene.events);
    std::fs::write(gate, "").unwrap();
    of_kind(&read_events(&scene.events), "start")[0].clone()
}

/// The watchdog's arguments in both tests: `--pid` on `pid` at `interval`, `--lead 10s`,
/// events and request file in `scene`.
fn watch_args(scene: &Scene, interval: &str, pid: u32) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> =
        ["--gpu", "off", "--interval", interval, "--lead", "10s"]
            .into_iter()
            .map(Into::into)
            .collect();
    args.extend([
        "--events".into(),
        scene.events.clone().into_os_string(),
        "--request-file".into(),
        scene.req.clone().into_os_string(),
        "--pid".into(),
        pid.to_string().into(),
    ]);
    args
}

/// The names in the start event's `wake_sources`.
fn wake_sources(start: &Value) -> Vec<String> {
    start["wake_sources"]
        .as_array()
        .unwrap_or_else(|| panic!("no wake_sources in {start}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The "Sampled N times" of the closing summary.
fn ticks(stderr: &str) -> u64 {
    let rest = stderr
        .split_once("Sampled ")
        .unwrap_or_else(|| panic!("no summary in {stderr}"))
        .1;
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn a_v1_threshold_samples_a_leak_between_the_ticks_of_a_slow_interval() {
    let Some(cg) = v1_cgroup(512 * MIB) else {
        return;
    };
    let scene = Scene::new();
    let gate = scene.dir.path().join("gate");
    // 240 MiB in 8 MiB chunks every 100 ms: the engine's wake level (a new high plus what a
    // leak running out within 4 leads rises in one interval, 25 MiB here) is crossed again
    // and again while the 2 s ticks would look two or three times.
    let mut leak = leak_in(&cg, &gate, 30, 8);
    let began = Instant::now();
    let watchdog = bin()
        .args(watch_args(&scene, "2s", leak.id()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = start_event_then_open(&scene, &gate);
    assert!(leak.wait().unwrap().success(), "the leak failed");
    let out = watchdog.wait_with_output().unwrap();
    let watched = began.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "watchdog: {stderr}");

    let sources = wake_sources(&start);
    assert!(
        sources.iter().any(|s| s == "pidfd") && sources.iter().any(|s| s == "cgroup_v1_threshold"),
        "wake_sources {sources:?}; start {start}"
    );
    // The cgroup is watched by the kernel (a level at its alert line), the rest polled.
    let rate = |name: &str| {
        start["rates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == name)
            .unwrap_or_else(|| panic!("no rate of {name} in {start}"))
            .clone()
    };
    assert_eq!(rate("cgroup_memory")["watched_by"], "kernel", "{start}");
    assert_eq!(rate("host_memory")["watched_by"], "poll", "{start}");
    assert_eq!(
        rate("host_memory")["why"],
        "no kernel level at the alert line",
        "{start}"
    );
    // Polling every 2 s gives at most one tick per 2 s of the whole time the watchdog ran,
    // the first one and the last look; the threshold's wake-ups are ticks beyond those.
    let polled_at_most = (watched / 2.0).floor() as u64 + 2;
    let n = ticks(&stderr);
    eprintln!("{n} ticks in {watched:.1} s at a 2 s interval (polling: at most {polled_at_most})");
    assert!(
        n >= polled_at_most + 2,
        "{n} ticks in {watched:.1} s at a 2 s interval: no more than polling ({polled_at_most}) \
         would give; the threshold did not wake the loop. watchdog: {stderr}"
    );
    // The summary says where the wake-ups came from.
    let from_cgroup: u64 = stderr
        .split_once("Kernel wake-ups: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kernel wake-ups in the summary: {stderr}"));
    assert!(
        from_cgroup >= 2,
        "{from_cgroup} wake-ups from the cgroup: {stderr}"
    );
}

#[test]
fn a_read_only_cgroup_filesystem_leaves_the_threshold_unarmed_and_the_run_polled() {
    let Some(cg) = v1_cgroup(256 * MIB) else {
        return;
    };
    let mount = cg.dir.parent().unwrap().to_path_buf();
    let scene = Scene::new();
    let gate = scene.dir.path().join("gate");
    // 200 MiB of 256 in 8 MiB chunks every 100 ms, seen by polling at 50 ms.
    let mut leak = leak_in(&cg, &gate, 25, 8);
    // The watchdog in its own mount namespace, the memory hierarchy remounted read-only
    // there, as systemd's ProtectControlGroups=yes does.
    let watchdog = Command::new("unshare")
        .current_dir(std::env::temp_dir())
        .env("XDG_STATE_HOME", std::env::temp_dir().join("wd-e2e-state"))
        .env_remove("WATCHDOG_LOG")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount -o remount,bind,ro \"$0\" && exec \"$@\"")
        .arg(&mount)
        .arg(bin().get_program())
        .args(watch_args(&scene, "50ms", leak.id()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = start_event_then_open(&scene, &gate);
    assert!(leak.wait().unwrap().success(), "the leak failed");
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "watchdog: {stderr}");

    let sources = wake_sources(&start);
    assert!(
        !sources.iter().any(|s| s == "cgroup_v1_threshold"),
        "armed on a read-only cgroupfs: {sources:?}"
    );
    let unarmed = start["unarmed"].as_array().expect("unarmed");
    let v1 = unarmed
        .iter()
        .find(|u| u["source"] == "cgroup_v1_threshold")
        .unwrap_or_else(|| panic!("the threshold not listed unarmed: {start}"));
    let reason = v1["reason"].as_str().unwrap();
    assert!(
        reason.contains("the cgroup filesystem is read-only here"),
        "{reason}"
    );
    assert!(
        stderr.contains("cgroup_v1_threshold not armed"),
        "no line saying so: {stderr}"
    );
    // The cgroup is polled, and the start event says why: the threshold's reason.
    let cgroup_rate = start["rates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "cgroup_memory")
        .unwrap_or_else(|| panic!("no cgroup_memory rate: {start}"));
    assert_eq!(cgroup_rate["watched_by"], "poll", "{start}");
    assert_eq!(cgroup_rate["why"].as_str(), Some(reason), "{start}");
    // Still watched, by polling: the leak was seen (the exit event's peak) over many ticks.
    let events = read_events(&scene.events);
    let exit = of_kind(&events, "exit");
    let peak = exit[0]["peaks"]["cgroup_memory"]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cgroup_memory peak: {exit:?}"));
    assert!(peak >= 150 * MIB, "peak {peak} B: the leak was not seen");
    assert!(ticks(&stderr) >= 10, "hardly sampled: {stderr}");
}

/// Waits for `GATE`, holds still 2 s, then, in one allocation (every page touched), takes the cgroup's usage (its
/// `memory.usage_in_bytes`, `USAGE`) to `TARGET` bytes, holds it a second and exits 0; the
/// checkpoint signal is ignored.
const JUMP: &str = r#"
import os, signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
gate, usage, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
while not os.path.exists(gate):
    time.sleep(0.02)
time.sleep(2)
now = int(open(usage).read())
n = max(target - now, 0)
held = bytearray(n)
held[::4096] = b"x" * len(range(0, n, 4096))
time.sleep(1)
"#;

#[test]
fn a_jump_past_the_alert_line_is_signalled_with_no_threshold_written_in_between() {
    let limit = 512 * MIB;
    let Some(cg) = v1_cgroup(limit) else {
        return;
    };
    let scene = Scene::new();
    let gate = scene.dir.path().join("gate");
    // The default 5% floor puts the alert line at 486.4 MiB: the jump ends 6 MiB past it,
    // under the limit.
    let target = limit / 20 * 19 + 6 * MIB;
    let procs = cg.procs();
    let mut jump = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$0\" && exec python3 -c \"$@\"",
            procs.to_str().unwrap(),
        ])
        .arg(JUMP)
        .arg(&gate)
        .arg(cg.dir.join("memory.usage_in_bytes"))
        .arg(target.to_string())
        .spawn()
        .unwrap();
    cg.wait_holds(jump.id());
    let watchdog = bin()
        .args(watch_args(&scene, "1s", jump.id()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = start_event_then_open(&scene, &gate);
    assert!(
        wake_sources(&start)
            .iter()
            .any(|s| s == "cgroup_v1_threshold"),
        "{start}"
    );
    assert!(jump.wait().unwrap().success(), "the jump failed");
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "watchdog: {stderr}");

    let events = read_events(&scene.events);
    let alerts = of_kind(&events, "alert");
    assert!(
        alerts.iter().any(|a| a["resource"] == "cgroup_memory"),
        "no cgroup_memory alert: {alerts:?}; watchdog: {stderr}"
    );
    let exit = &of_kind(&events, "exit")[0];
    assert_eq!(
        exit["event_control_writes_before_signal"], 0,
        "a threshold was written between the crossing and the signal: {exit}"
    );
}
