//! The watchdog against real exhaustion: a leak in a memory cgroup until the kernel's
//! OOM kill, a leak against `--mem-limit`, checkpoints filling a tmpfs, a runtime
//! limit, a harmless saw-tooth, and a process without a handler.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

#[test]
fn cgroup_leak_is_checkpointed_before_the_oom_kill() {
    if !require(is_root(), "root (to create a memory cgroup)") {
        return;
    }
    let Some(cg) = need(MemoryCgroup::create(256 * MIB), "a memory cgroup") else {
        return;
    };
    let scene = Scene::new();
    let (dir, events, req, rep) = (&scene.dir, &scene.events, &scene.req, &scene.rep);
    // The leaker moves itself into the cgroup, then execs Python, which grows ~80 MiB/s
    // until the kernel kills it.
    let procs = cg.procs();
    let mut leaker = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$0\" && exec python3 \"$@\"",
            procs.to_str().unwrap(),
        ])
        .args([
            &hog(),
            rep.to_str().unwrap(),
            "leak",
            "--step-mib",
            "4",
            "--every",
            "0.05",
        ])
        .args(["--dir", dir.path().to_str().unwrap()])
        .env("WATCHDOG_REQUEST_FILE", req)
        .env("WATCHDOG_SIGNAL", "SIGUSR1")
        .spawn()
        .unwrap();
    let pid = leaker.id();
    cg.wait_holds(pid);
    let watchdog = scene
        .watchdog()
        .args(["--lead", "1s", "--pid", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = leaker.wait().unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        status.signal(),
        Some(9),
        "the kernel's OOM killer should end it (cgroup {}); {stderr}",
        cg.version()
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(events);
    let alerts = of_kind(&ev, "alert");
    assert!(!alerts.is_empty(), "no alert: {stderr}");
    assert_eq!(alerts[0]["resource"], "cgroup_memory", "{ev:?}");
    assert_eq!(alerts[0]["signalled"], serde_json::json!([pid]));
    let r = report(rep);
    let ckpt = report_events(&r, "checkpoint");
    assert_eq!(ckpt.len(), 1, "checkpoint saved once: {r}");
    assert_eq!(ckpt[0]["resource"], "cgroup_memory");
    assert!(std::path::Path::new(ckpt[0]["path"].as_str().unwrap()).exists());
    assert!(
        !of_kind(&ev, "ack").is_empty(),
        "the acknowledgment was not seen: {ev:?}"
    );
    let exit = of_kind(&ev, "exit");
    assert_eq!(exit[0]["verdict"], "oom_kill", "{exit:?}");
    assert!(stderr.contains("OOM killer"), "{stderr}");
    // The flight recording was written to the state directory, named in the summary,
    // and replays.
    let recording = crate::support::summary_recording(&stderr);
    assert!(
        recording.starts_with(std::env::temp_dir().join("wd-e2e-state/watchdog")),
        "{}",
        recording.display()
    );
    let text = std::fs::read_to_string(&recording).expect("recording written at exit");
    assert!(text.starts_with("# watchdog recording v1"));
    assert!(
        text.contains("\"verdict\":\"oom_kill\""),
        "exit event in the recording"
    );
    let replay = run(&["replay", recording.to_str().unwrap(), "--lead", "1s"]);
    assert_eq!(replay.status.code(), Some(0));
    let lines = String::from_utf8_lossy(&replay.stdout);
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"alert\"") && l.contains("cgroup_memory")),
        "{lines}"
    );
    // The report of that real recording renders in a browser with the verdict as title.
    let html = dir.path().join("report.html");
    let made = run(&[
        "report",
        recording.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(
        made.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let svg = dir.path().join("report.svg");
    let made = run(&[
        "report",
        recording.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(made.status.code(), Some(0));
    if let Some(dom) = chromium_dom(&html) {
        assert!(dom.contains("id=\"watchdog-report\""), "no plot in the DOM");
        assert!(
            dom.contains("data-resource=\"cgroup_memory\""),
            "no cgroup panel"
        );
        assert!(dom.contains("class=\"alert\""), "no alert marker");
        assert!(
            dom.to_lowercase().contains("oom killer"),
            "verdict title missing"
        );
    }
}

#[test]
fn mem_limit_leak_is_checkpointed_and_acknowledged() {
    let scene = Scene::new();
    let (dir, events, req, rep) = (&scene.dir, &scene.events, &scene.req, &scene.rep);
    let out = scene.run_hog(
        &["--lead", "1s", "--mem-limit", "300MiB"],
        &[
            "leak",
            "--step-mib",
            "4",
            "--every",
            "0.04",
            "--max-mib",
            "280",
            "--seconds",
            "20",
            "--stop-after-checkpoint",
            "--dir",
            dir.path().to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(events);
    let alerts = of_kind(&ev, "alert");
    assert!(!alerts.is_empty(), "no alert: {stderr}");
    assert_eq!(alerts[0]["resource"], "tree_memory");
    let r = report(rep);
    let ckpt = report_events(&r, "checkpoint");
    assert_eq!(ckpt.len(), 1, "{r}");
    let held = ckpt[0]["held_mib"].as_f64().unwrap();
    assert!(held < 300.0, "checkpoint came after the limit: {held} MiB");
    assert!(!of_kind(&ev, "ack").is_empty(), "ack not recorded: {ev:?}");
    let request: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(req).unwrap()).unwrap();
    assert_eq!(request["resource"], "tree_memory");
    assert!(request["limit"].as_u64().unwrap() == 300 * MIB);
}

#[test]
fn checkpoints_filling_a_tmpfs_are_stopped_before_it_is_full() {
    if !require(is_root(), "root (to mount a tmpfs)") {
        return;
    }
    let Some(fs) = need(Tmpfs::mount("64m"), "a tmpfs mount") else {
        return;
    };
    let scene = Scene::new();
    let (events, rep) = (&scene.events, &scene.rep);
    let out = scene.run_hog(
        &["--lead", "2s", "--disk", fs.path().to_str().unwrap()],
        &[
            "write",
            "--step-mib",
            "4",
            "--every",
            "0.1",
            "--seconds",
            "30",
            "--dir",
            fs.path().to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The writer keeps writing after its checkpoint until ENOSPC kills it (status 1).
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let ev = read_events(events);
    assert_eq!(of_kind(&ev, "exit")[0]["verdict"], "disk_full", "{ev:?}");
    let r = report(rep);
    let ckpt = report_events(&r, "checkpoint");
    let full = report_events(&r, "enospc");
    assert!(!ckpt.is_empty(), "never asked to checkpoint: {r} {stderr}");
    assert!(
        ckpt[0]["resource"].as_str().unwrap().starts_with("disk:"),
        "{r}"
    );
    if let Some(full) = full.first() {
        assert!(
            ckpt[0]["t"].as_f64().unwrap() < full["t"].as_f64().unwrap(),
            "signal came after ENOSPC: {r}"
        );
    }
}

#[test]
fn max_runtime_fires_lead_seconds_before_the_limit() {
    let scene = Scene::new();
    let (events, rep) = (&scene.events, &scene.rep);
    let watchdog = scene
        .watchdog()
        .args([
            "--lead",
            "2s",
            "--max-runtime",
            "5s",
            "run",
            "--",
            "python3",
            &hog(),
        ])
        .args([
            rep.to_str().unwrap(),
            "wait",
            "--seconds",
            "30",
            "--every",
            "0.02",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Play the platform: end the session once the 5 s limit has passed.
    assert!(wait_for(Duration::from_secs(10), || rep.exists()));
    let pid = report(rep)["pid"].as_u64().unwrap();
    let started = started_at(pid);
    std::thread::sleep(Duration::from_millis(5_300));
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 15), "{stderr}");
    let r = report(rep);
    let ckpt = report_events(&r, "checkpoint");
    assert_eq!(ckpt.len(), 1, "{r} {stderr}");
    assert_eq!(ckpt[0]["resource"], "runtime");
    // The runtime counts from the process's start (read from /proc, not from the
    // watchdog's start event, which a busy machine can delay by most of a second); the
    // limit is 5 s, the lead 2 s, so the alert comes about 3 s in: never before, and well
    // before the limit even when a busy machine wakes the watchdog late.
    let ev = read_events(events);
    let alert = of_kind(&ev, "alert")[0]["time"]
        .as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .unwrap();
    let t = alert.duration_since(started).as_secs_f64();
    assert!(
        (2.9..=4.5).contains(&t),
        "alert {t:.2}s after the process started, expected about 3s: {ev:?}"
    );
    assert_eq!(
        of_kind(&ev, "exit")[0]["verdict"],
        "runtime_limit",
        "{ev:?}"
    );
}

#[test]
fn a_stable_sawtooth_under_the_limit_raises_no_alert() {
    let scene = Scene::new();
    let (events, req) = (&scene.events, &scene.req);
    let out = scene.run_hog(
        &["--lead", "5s", "--mem-limit", "400MiB"],
        &[
            "sawtooth",
            "--step-mib",
            "16",
            "--every",
            "0.03",
            "--max-mib",
            "240",
            "--seconds",
            "8",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(events);
    assert!(of_kind(&ev, "alert").is_empty(), "false alarm: {ev:?}");
    let exit = of_kind(&ev, "exit");
    assert_eq!(exit[0]["verdict"], "exited", "{exit:?}");
    assert_eq!(exit[0]["code"], 0);
    assert!(!req.exists(), "a request file was written");
}

#[test]
fn a_process_without_a_handler_is_not_signalled_and_survives() {
    let scene = Scene::new();
    let (dir, events, req, rep) = (&scene.dir, &scene.events, &scene.req, &scene.rep);
    let hook_out = dir.path().join("hook.txt");
    let out = scene.run_hog(
        &[
            "--lead",
            "1s",
            "--mem-limit",
            "200MiB",
            "--on-alert",
            &format!("echo \"$WATCHDOG_RESOURCE\" > {}", hook_out.display()),
        ],
        &[
            "leak",
            "--no-handler",
            "--step-mib",
            "4",
            "--every",
            "0.04",
            "--max-mib",
            "180",
            "--seconds",
            "5",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // It ran to its end: a SIGUSR1 would have killed it (status 138).
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(events);
    let alerts = of_kind(&ev, "alert");
    assert!(!alerts.is_empty(), "{stderr}");
    assert_eq!(alerts[0]["signalled"], serde_json::json!([]));
    assert!(
        stderr.contains("install"),
        "the warning should say how to install a handler: {stderr}"
    );
    assert!(req.exists(), "the request file is still written");
    assert!(
        wait_for(Duration::from_secs(5), || hook_out.exists()),
        "hook not run"
    );
    assert_eq!(
        std::fs::read_to_string(&hook_out).unwrap().trim(),
        "tree_memory"
    );
    assert!(report_events(&report(rep), "done").len() == 1);
}

#[test]
fn dry_run_sends_and_writes_nothing() {
    let scene = Scene::new();
    let (events, req, rep) = (&scene.events, &scene.req, &scene.rep);
    let out = scene.run_hog(
        &["--dry-run", "--lead", "1s", "--mem-limit", "200MiB"],
        &[
            "leak",
            "--step-mib",
            "4",
            "--every",
            "0.04",
            "--max-mib",
            "180",
            "--seconds",
            "5",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(events);
    let alerts = of_kind(&ev, "alert");
    assert!(!alerts.is_empty(), "{stderr}");
    assert_eq!(alerts[0]["dry_run"], true);
    assert!(!req.exists());
    assert!(report_events(&report(rep), "checkpoint").is_empty());
}

/// Issue 9.1: a second leak right after a checkpoint. Three 50 MiB/s leaks in a 600 MiB
/// cgroup, the second 0 s and the third 0.5 s after the freeing, `--lead 3s`, the
/// client acknowledging in between: every one is warned at least 2 s before the
/// cgroup is full.
#[test]
fn leaks_right_after_a_checkpoint_are_each_warned_in_time() {
    if !require(is_root(), "root (to create a memory cgroup)") {
        return;
    }
    let Some(cg) = need(MemoryCgroup::create(600 * MIB), "a memory cgroup") else {
        return;
    };
    let scene = Scene::new();
    let go = scene.dir.path().join("go");
    let script = repo().join("tests/e2e/scripts/releak.py");
    let mut leaker = Command::new("sh")
        .args(["-c", "echo $$ > \"$0\" && exec python3 \"$@\""])
        .arg(cg.procs())
        .arg(&script)
        .arg(&scene.rep)
        .arg(&cg.dir)
        .arg(&go)
        .args(["--rate-mib", "50", "--gaps", "0,0.5"])
        .env("WATCHDOG_REQUEST_FILE", &scene.req)
        .env("WATCHDOG_SIGNAL", "SIGUSR1")
        .spawn()
        .unwrap();
    let pid = leaker.id();
    cg.wait_holds(pid);
    let watchdog = scene
        .watchdog()
        .args(["--lead", "3s", "--pid", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Leak only once the watchdog is watching (its start event is written).
    assert!(wait_for(Duration::from_secs(20), || {
        !of_kind(&read_events(&scene.events), "limit").is_empty()
    }));
    std::fs::write(&go, "").unwrap();
    let status = leaker.wait().unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "the leaker failed ({status}): {stderr}");
    let r = report(&scene.rep);
    let leaks = r["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 3, "{r}\n{stderr}");
    let ev = read_events(&scene.events);
    let alerts = of_kind(&ev, "alert");
    assert_eq!(alerts.len(), 3, "one alert per leak: {ev:?}");
    for (i, (leak, alert)) in leaks.iter().zip(&alerts).enumerate() {
        assert_eq!(
            leak["warned"], true,
            "leak {i} was not warned: {r}\n{stderr}"
        );
        assert_eq!(leak["request"]["resource"], "cgroup_memory", "{r}");
        // In time by the cgroup's own figure when the watchdog alerted, at the leak's
        // rate. (What the leaker noted when it saw the request also counts its own
        // reaction, which a starved leaker on a saturated machine delays.)
        let used = alert["used"].as_f64().unwrap();
        let limit = alert["limit"].as_f64().unwrap();
        let left = (limit - used) / (50.0 * MIB as f64);
        assert!(
            left >= 2.0,
            "leak {i} alerted only {left:.2}s before the cgroup was full (the leaker saw \
             {:.2}s left): {alert}\n{r}\n{stderr}",
            leak["seconds_left"].as_f64().unwrap_or(f64::NAN)
        );
    }
    assert!(of_kind(&ev, "ack").len() >= 3, "{ev:?}");
}

/// A watchdog frozen (SIGSTOP) for a second while sampling every 100 ms counts the
/// deadlines it missed in its summary, and does not catch up on them: the same loop and
/// the same count as the service's (`daemon::a_frozen_daemon_counts_the_ticks_it_missed_in_the_runs_summary`).
#[test]
fn a_frozen_watchdog_counts_the_ticks_it_missed_in_the_summary() {
    let scene = Scene::new();
    let gate = Gate::new(scene.dir.path(), "gate");
    let stderr = scene.dir.path().join("stderr");
    let mut watchdog = bin()
        .args(["--gpu", "off", "--interval", "100ms", "--events"])
        .arg(&scene.events)
        .arg("--request-file")
        .arg(&scene.req)
        .args(["run", "--", "sh", "-c"])
        .arg(format!("read _ < '{}'", gate.path().display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start the watchdog");
    let started = wait_for(Duration::from_secs(20), || {
        of_kind(&read_events(&scene.events), "start").len() == 1
    });
    assert!(started, "the watch never started");
    let pid = watchdog.id().to_string();
    let kill = |sig: &str| {
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig} {pid}");
    };
    kill("-STOP");
    std::thread::sleep(Duration::from_secs(1));
    kill("-CONT");
    // A few samples after the thaw, so the late one is counted before the run ends.
    std::thread::sleep(Duration::from_millis(500));
    gate.release();
    assert!(watchdog.wait().unwrap().success());
    let text = std::fs::read_to_string(&stderr).unwrap();
    let late = summary_late_ticks(&text, "Sampled ");
    assert!(late >= 1, "no tick counted late: {text}");
}

/// `watchdog_runtime_seconds` is there for every run, a runtime limit or not
/// (docs/metrics.md: "Wall time since the run started"): `--pid` of a process started
/// before the watchdog counts from that process's start.
#[test]
fn the_runtime_is_a_metric_without_a_limit_too() {
    use watchdog_testsupport::prometheus;
    let mut target = Command::new("sleep").arg("60").spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], prometheus::free_port()));
    let mut watchdog = bin()
        .args(["--gpu", "off", "--no-notify", "-q", "--metrics"])
        .arg(addr.to_string())
        .args(["--pid", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seconds = None;
    wait_for(Duration::from_secs(30), || {
        let body =
            std::panic::catch_unwind(|| prometheus::get(addr, "/metrics").body).unwrap_or_default();
        seconds = body
            .lines()
            .find(|l| {
                l.starts_with("watchdog_runtime_seconds{") && l.contains("resource=\"runtime\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok());
        seconds.is_some()
    });
    let _ = watchdog.kill();
    let _ = watchdog.wait();
    let _ = target.kill();
    let _ = target.wait();
    let seconds = seconds.expect("no watchdog_runtime_seconds series");
    assert!(
        seconds >= 2.0,
        "counted from the watch, not the process: {seconds}"
    );
}

/// A `run` command that ends before the cgroup is first read is read in the memory cgroup
/// it was forked in, the watchdog's: an exited process's `/proc/PID/cgroup` names the root
/// on v1, whose figures (the whole machine's page cache) are not the run's.
#[test]
fn a_command_that_ends_at_once_is_read_in_the_cgroup_it_was_forked_in() {
    let Some(cg) = need(MemoryCgroup::create(256 * MIB), "a memory cgroup") else {
        return;
    };
    let dir = scratch();
    let name = cg.dir.file_name().unwrap().to_string_lossy().into_owned();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > '{}' && exec \"$0\" --gpu off --no-notify run -- true",
            cg.procs().display()
        ))
        .arg(env!("CARGO_BIN_EXE_watchdog"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("watching cgroup_memory") && l.contains(&name)),
        "not read in {name}: {text}"
    );
}
