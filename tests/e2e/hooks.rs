//! `--on-alert` hooks: each in its own process group, ended with that group when it runs
//! past `--hook-timeout` and when the watchdog exits, its status logged and a `hook` event.
//! The alert comes from `--max-runtime 2s --lead 1s` (about 1 s in), which needs no leak.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rfind(')')?;
            s[after + 1..].split_whitespace().next().map(str::to_string)
        })
        .is_some_and(|state| state != "Z" && state != "X")
}

fn read_pid(path: &Path) -> u32 {
    assert!(
        wait_for(Duration::from_secs(10), || std::fs::read_to_string(path)
            .is_ok_and(|s| s.trim().parse::<u32>().is_ok())),
        "{} never written",
        path.display()
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Runs a hog that waits `seconds` under a runtime alert 1 s in, with `flags`.
fn run_with_hook(scene: &Scene, flags: &[&str], seconds: &str) -> std::process::Output {
    let mut all = vec!["--max-runtime", "2s", "--lead", "1s"];
    all.extend_from_slice(flags);
    scene.run_hog(&all, &["wait", "--seconds", seconds])
}

#[test]
fn a_hook_and_what_it_started_are_gone_after_the_watchdog_exits() {
    let scene = Scene::new();
    let dir = scene.dir.path();
    let hook = format!(
        "sleep 100 & echo $! > {d}/grandchild; echo $$ > {d}/sh; sleep 100",
        d = dir.display()
    );
    let t = Instant::now();
    let out = run_with_hook(&scene, &["--on-alert", &hook], "3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Ended at exit (TERM, then KILL after 2 s at most), not after the 60 s timeout.
    assert!(t.elapsed() < Duration::from_secs(30), "{stderr}");
    let sh = read_pid(&dir.join("sh"));
    let grandchild = read_pid(&dir.join("grandchild"));
    assert!(
        wait_for(Duration::from_secs(5), || !alive(sh) && !alive(grandchild)),
        "hook processes outlived the watchdog: sh {sh} alive {}, grandchild {grandchild} alive {}\n{stderr}",
        alive(sh),
        alive(grandchild)
    );
    assert!(stderr.contains("as the watchdog exits"), "{stderr}");
    let events = read_events(&scene.events);
    let hooks = of_kind(&events, "hook");
    assert_eq!(hooks.len(), 1, "{events:?}");
    assert_eq!(hooks[0]["pid"], sh, "{}", hooks[0]);
    assert_eq!(hooks[0]["ended_at_exit"], true, "{}", hooks[0]);
    assert_eq!(hooks[0]["signal"], 15, "{}", hooks[0]);
}

#[test]
fn a_hook_past_its_timeout_is_ended_and_logged() {
    let scene = Scene::new();
    let dir = scene.dir.path();
    let hook = format!(
        "sleep 60 & echo $! > {d}/grandchild; sleep 60",
        d = dir.display()
    );
    let out = run_with_hook(&scene, &["--on-alert", &hook, "--hook-timeout", "1s"], "6");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("ran past --hook-timeout 1.0s"),
        "no timeout line: {stderr}"
    );
    let grandchild = read_pid(&dir.join("grandchild"));
    assert!(!alive(grandchild), "the hook's background sleep survived");
    let events = read_events(&scene.events);
    let hooks = of_kind(&events, "hook");
    assert_eq!(hooks.len(), 1, "{events:?}");
    assert_eq!(hooks[0]["timed_out"], true, "{}", hooks[0]);
    assert_eq!(hooks[0]["ended_at_exit"], false, "{}", hooks[0]);
    let took = hooks[0]["duration_s"].as_f64().unwrap();
    assert!((1.0..4.5).contains(&took), "{}", hooks[0]);
}

#[test]
fn a_hooks_exit_status_is_logged() {
    let scene = Scene::new();
    let out = run_with_hook(&scene, &["--on-alert", "exit 3"], "3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("--on-alert hook `exit 3` failed after") && stderr.contains("exited 3"),
        "{stderr}"
    );
    let events = read_events(&scene.events);
    let hooks = of_kind(&events, "hook");
    assert_eq!(hooks.len(), 1, "{events:?}");
    assert_eq!(hooks[0]["code"], 3, "{}", hooks[0]);
    assert_eq!(hooks[0]["timed_out"], false, "{}", hooks[0]);
}

#[test]
fn a_zero_hook_timeout_is_refused() {
    let out = run(&["--hook-timeout", "0", "run", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hook-timeout"), "{stderr}");
}

/// A hook that detaches a process (`setsid ... &`) used to leave it to the watchdog, a
/// child subreaper in `run` mode: the run was taken to go on while it lived (8 s here) and
/// it was reported as a survivor. Now the hook's keeper adopts it: the watch ends with the
/// command, and the detached process runs on, untouched.
#[test]
fn what_a_hook_detaches_is_never_part_of_the_run() {
    let scene = Scene::new();
    let dir = scene.dir.path();
    let hook = format!(
        "setsid sh -c 'echo $$ > {d}/detached; exec sleep 8' &",
        d = dir.display()
    );
    // Timed to the watchdog's exit, not to the end of its output, which the detached
    // process shares (it keeps the hook's stderr open).
    let log = dir.join("stderr");
    let t = Instant::now();
    let status = scene
        .watchdog()
        .args(["--max-runtime", "2s", "--lead", "1s", "--on-alert", &hook])
        .args(["run", "--", "python3"])
        .arg(hog())
        .arg(&scene.rep)
        .args(["wait", "--seconds", "2"])
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    let took = t.elapsed();
    let stderr = std::fs::read_to_string(&log).unwrap();
    let detached = read_pid(&dir.join("detached"));
    let alive_after = alive(detached);
    let _ = std::process::Command::new("kill")
        .arg(detached.to_string())
        .status();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("still running"),
        "the hook's detached process was taken for the run's: {stderr}"
    );
    let events = read_events(&scene.events);
    assert!(of_kind(&events, "survivors").is_empty(), "{events:?}");
    assert!(
        took < Duration::from_secs(7),
        "the watch waited {took:?} for the hook's detached process: {stderr}"
    );
    assert!(alive_after, "the detached process was ended: {stderr}");
}

/// The caller's `WATCHDOG_RESTART`, `WATCHDOG_LAST_VERDICT`, `WATCHDOG_RESUME_FROM` and
/// `WATCHDOG_CHECKPOINT_RECORD` are not the hook's: only the watchdog sets them (issue 29,
/// item 7).
#[test]
fn a_hook_never_sees_the_restart_variables_the_watchdog_inherited() {
    let scene = Scene::new();
    let seen = scene.dir.path().join("hook-env");
    let hook = format!("env > '{}'", seen.display());
    let out = scene
        .watchdog()
        .env("WATCHDOG_RESTART", "99")
        .env("WATCHDOG_LAST_VERDICT", "oom_kill")
        .env("WATCHDOG_RESUME_FROM", "/elsewhere/forged.pt")
        .env("WATCHDOG_CHECKPOINT_RECORD", "/elsewhere/forged.json")
        .args(["--max-runtime", "2s", "--lead", "1s", "--on-alert", &hook])
        .args(["run", "--", "python3", &hog()])
        .arg(&scene.rep)
        .args(["wait", "--seconds", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let env = std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert!(env.contains("WATCHDOG_RESOURCE=runtime"), "{env}");
    for var in [
        "WATCHDOG_RESTART=",
        "WATCHDOG_LAST_VERDICT=",
        "WATCHDOG_RESUME_FROM=",
        "WATCHDOG_CHECKPOINT_RECORD=",
    ] {
        assert!(
            !env.lines().any(|l| l.starts_with(var)),
            "{var} reached the hook: {env}"
        );
    }
}
