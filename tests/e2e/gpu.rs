//! GPU memory through the real NVML code: against a fake `libnvidia-ml.so.1` built by
//! the test from `tests/fake-nvml/`, and, for real, the machine's own missing driver.

use std::process::Command;

use crate::support::*;

/// Builds the fake NVML library into `dir` and returns its path.
pub(crate) fn build_fake(dir: &std::path::Path) -> std::path::PathBuf {
    let status = Command::new("bash")
        .arg(repo().join("tests/fake-nvml/build.sh"))
        .arg(dir)
        .status()
        .expect("run tests/fake-nvml/build.sh");
    assert!(status.success(), "building the fake NVML library failed");
    dir.join("libnvidia-ml.so.1")
}

/// Runs `hog.py wait` under the watchdog against the fake NVML library, whose script is
/// `devices` followed by `process 0 pidfile:<the hog's PID file> <process>`.
fn run_on_fake_gpu(
    scene: &Scene,
    devices: &str,
    process: &str,
    flags: &[&str],
    hog_args: &[&str],
) -> std::process::Output {
    let dir = scene.dir.path();
    let lib = build_fake(dir);
    let pidfile = dir.join("train.pid");
    let script = dir.join("nvml.script");
    let text = format!(
        "{devices}\nprocess 0 pidfile:{} {process}\n",
        pidfile.display()
    );
    std::fs::write(&script, text).unwrap();
    bin()
        .env("WATCHDOG_NVML_LIB", &lib)
        .env("FAKE_NVML_SCRIPT", &script)
        .args(["--gpu", "required", "--interval", "20ms", "--events"])
        .arg(&scene.events)
        .arg("--request-file")
        .arg(&scene.req)
        .args(flags)
        .args(["run", "--", "python3", &hog()])
        .arg(&scene.rep)
        .args(["wait", "--pidfile", pidfile.to_str().unwrap()])
        .args(hog_args)
        .output()
        .unwrap()
}

#[test]
fn a_growing_gpu_is_checkpointed_before_it_is_full() {
    let scene = Scene::new();
    // One 1 GiB device (64 MiB reserved); the training process holds 400 MiB growing
    // 100 MiB/s, so the device is full about 5.6 s after NVML is initialised.
    let out = run_on_fake_gpu(
        &scene,
        "device Fake_A100 GPU-00000000-1111-2222-3333-444444444444 1024 0 0 64",
        "400 100",
        &["--lead", "2s"],
        &[
            "--seconds",
            "15",
            "--every",
            "0.02",
            "--stop-after-checkpoint",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(&scene.events);
    let limits = of_kind(&ev, "limit");
    let gpu_limit = limits
        .iter()
        .find(|e| e["resource"] == "gpu0")
        .expect("gpu0 limit event");
    assert!(
        gpu_limit["source"]
            .as_str()
            .unwrap()
            .contains("GPU-00000000-1111"),
        "{gpu_limit}"
    );
    let alerts = of_kind(&ev, "alert");
    assert!(!alerts.is_empty(), "no alert: {stderr}");
    assert_eq!(alerts[0]["resource"], "gpu0", "{alerts:?}");
    let r = report(&scene.rep);
    let ckpt = report_events(&r, "checkpoint");
    assert_eq!(ckpt.len(), 1, "{r}");
    assert_eq!(ckpt[0]["resource"], "gpu0");
    let t = ckpt[0]["t"].as_f64().unwrap();
    assert!(
        t < 5.0,
        "checkpoint at {t:.2}s is too late for a device full at ~5.6s"
    );
}

#[test]
fn a_run_that_fails_with_its_gpu_full_gets_the_gpu_oom_verdict() {
    let scene = Scene::new();
    // 1 GiB device, the process at 900 MiB growing 200 MiB/s: full within a second; the
    // process then fails (status 1), as a CUDA out-of-memory error would make it.
    let out = run_on_fake_gpu(
        &scene,
        "device Fake_GPU GPU-aaaaaaaa-1111-2222-3333-444444444444 1024 0 0 0",
        "900 200",
        &["--lead", "1s"],
        &["--seconds", "2.5", "--no-handler", "--exit-code", "1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let ev = read_events(&scene.events);
    let exit = of_kind(&ev, "exit");
    assert_eq!(exit[0]["verdict"], "gpu_oom", "{exit:?}");
    assert!(stderr.contains("CUDA out-of-memory"), "{stderr}");
    // The start event's environment names the GPU, its memory and the driver.
    let gpus = &of_kind(&ev, "start")[0]["environment"]["gpus"];
    assert_eq!(gpus[0]["model"], "Fake GPU", "{gpus}");
    assert_eq!(gpus[0]["memory_bytes"], 1024u64 << 20, "{gpus}");
    assert_eq!(gpus[0]["driver"], "999.99.fake", "{gpus}");
}

#[test]
fn without_a_driver_auto_says_why_once_and_required_exits_2() {
    // This machine has no NVIDIA driver: the real default library search fails.
    let dir = scratch();
    let events = dir.path().join("events.jsonl");
    let out = bin()
        .env_remove("WATCHDOG_NVML_LIB")
        .args(["--events", events.to_str().unwrap(), "run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let gpu_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("GPU") || l.contains("gpu"))
        .collect();
    assert_eq!(gpu_lines.len(), 1, "one line about the GPU: {stderr}");
    assert!(gpu_lines[0].contains("not watched"), "{stderr}");
    let ev = read_events(&events);
    assert_eq!(
        of_kind(&ev, "unwatched")
            .iter()
            .filter(|e| e["resource"] == "gpu")
            .count(),
        1
    );

    let out = bin()
        .env_remove("WATCHDOG_NVML_LIB")
        .args(["--gpu", "required", "run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("libnvidia-ml.so.1"), "{stderr}");
}
