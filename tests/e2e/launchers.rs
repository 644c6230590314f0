//! Runs that leave their first process: a launcher that backgrounds the run and exits
//! (`sh -c 'python3 train.py & exit 0'`), a double fork, and a `--pid` target that exits
//! while what it started runs on. Each leaks against `--mem-limit` with `--lead 3s` and
//! must be warned (SIGUSR1 caught, request file written) at least 2 s before its own RSS,
//! measured by the leaker, reaches the limit; the watchdog exits with the first process's
//! status once the leaker has exited.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::*;

const LIMIT_MIB: &str = "250";

fn leaker() -> String {
    repo()
        .join("tests/e2e/scripts/orphan_leak.py")
        .display()
        .to_string()
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Checks the leaker's report: warned by signal and by request file at least 2 s before
/// it reached the limit, and the watchdog (which just returned) waited for it.
fn assert_warned_in_time(scene: &Scene, returned_at: f64, stderr: &str) -> Value {
    let r = report(&scene.rep);
    let limit_t = r["limit_t"].as_f64().unwrap();
    let signal_t = r["signal_t"]
        .as_f64()
        .unwrap_or_else(|| panic!("the leaker never got SIGUSR1: {r}\n{stderr}"));
    let request_t = r["request_t"]
        .as_f64()
        .unwrap_or_else(|| panic!("the leaker never saw the request file: {r}\n{stderr}"));
    assert!(
        limit_t - signal_t >= 2.0,
        "signalled only {:.2} s before the limit: {r}\n{stderr}",
        limit_t - signal_t
    );
    assert!(
        limit_t - request_t >= 2.0,
        "request file only {:.2} s before the limit: {r}\n{stderr}",
        limit_t - request_t
    );
    let end_t = r["end_t"].as_f64().unwrap();
    assert!(
        returned_at >= end_t && returned_at - end_t < 5.0,
        "the watchdog returned {:.2} s after the leaker ended: {r}\n{stderr}",
        returned_at - end_t
    );
    let events = read_events(&scene.events);
    let survivors = of_kind(&events, "survivors");
    assert_eq!(survivors.len(), 1, "{events:?}");
    let pid = r["pid"].as_u64().unwrap();
    assert!(
        survivors[0]["pids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_u64() == Some(pid)),
        "the leaker {pid} is not among the survivors: {}",
        survivors[0]
    );
    assert!(stderr.contains("still running"), "{stderr}");
    assert!(stderr.contains(&format!("PID {pid}")), "{stderr}");
    let alerts = of_kind(&events, "alert");
    assert!(!alerts.is_empty(), "no alert: {stderr}");
    assert_eq!(alerts[0]["resource"], "tree_memory");
    assert!(
        alerts[0]["signalled"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_u64() == Some(pid)),
        "the alert did not signal the leaker {pid}: {}",
        alerts[0]
    );
    r
}

fn run_leak(scene: &Scene, command: &[&str]) -> (std::process::Output, f64) {
    let out = scene
        .watchdog()
        .args(["--lead", "3s", "--mem-limit", &format!("{LIMIT_MIB}MiB")])
        .arg("run")
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    (out, now_s())
}

#[test]
fn a_run_backgrounded_by_its_launcher_stays_watched_and_is_warned_in_time() {
    let scene = Scene::new();
    let script = format!(
        "python3 {} {} --limit-mib {LIMIT_MIB} & exit 5",
        leaker(),
        scene.rep.display()
    );
    let (out, returned_at) = run_leak(&scene, &["sh", "-c", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let r = assert_warned_in_time(&scene, returned_at, &stderr);
    let events = read_events(&scene.events);
    let start = &of_kind(&events, "start")[0];
    // Re-parented to the watchdog (a child subreaper), not to init.
    assert_eq!(r["ppid_at_end"], start["watchdog_pid"], "{r}");
    let exit = &of_kind(&events, "exit")[0];
    assert_eq!(exit["code"], 5, "{exit}");
}

#[test]
fn a_double_forked_run_stays_watched_and_is_warned_in_time() {
    let scene = Scene::new();
    let rep = scene.rep.display().to_string();
    let (out, returned_at) = run_leak(
        &scene,
        &[
            "python3",
            &leaker(),
            &rep,
            "--limit-mib",
            LIMIT_MIB,
            "--double-fork",
            "--exit-code",
            "7",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    let r = assert_warned_in_time(&scene, returned_at, &stderr);
    let events = read_events(&scene.events);
    assert_eq!(
        r["ppid_at_end"],
        of_kind(&events, "start")[0]["watchdog_pid"],
        "{r}"
    );
}

#[test]
fn with_pid_what_the_target_left_running_stays_watched_and_is_warned_in_time() {
    let scene = Scene::new();
    let script = format!(
        "python3 {} {} --limit-mib {LIMIT_MIB} & sleep 1; exit 0",
        leaker(),
        scene.rep.display()
    );
    let mut target = Command::new("sh")
        .args(["-c", &script])
        .env("WATCHDOG_REQUEST_FILE", &scene.req)
        .spawn()
        .unwrap();
    let out = scene
        .watchdog()
        .args(["--lead", "3s", "--mem-limit", &format!("{LIMIT_MIB}MiB")])
        .args(["--pid", &target.id().to_string()])
        .output()
        .unwrap();
    let returned_at = now_s();
    let _ = target.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_warned_in_time(&scene, returned_at, &stderr);
}

/// A command that leaves nothing running ends the watch at once, with no `survivors` event.
#[test]
fn a_run_that_leaves_nothing_behind_ends_at_once() {
    let scene = Scene::new();
    let t = std::time::Instant::now();
    let out = scene
        .watchdog()
        .args(["run", "--", "sh", "-c", "exit 4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(of_kind(&read_events(&scene.events), "survivors").is_empty());
}
