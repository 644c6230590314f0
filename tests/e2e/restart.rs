//! `watchdog run --restart`: real attempts of a small Python loop (tests/e2e/scripts/
//! restartable.py) that saves and acknowledges checkpoints, killed by the kernel's OOM
//! killer in a real memory cgroup, by SIGKILL in the middle of a save, or by a full tmpfs.
//! The watchdog runs in the cgroup with the loop, so the cgroup is the loop's from its
//! first instruction; the loop raises its own oom_score_adj to 1000, so the OOM killer
//! picks it and not the watchdog.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

/// The script, its log and checkpoint directory, and the watchdog's files.
struct Loop {
    scene: Scene,
    log: std::path::PathBuf,
    ckpt: std::path::PathBuf,
}

impl Loop {
    fn new() -> Loop {
        let scene = Scene::new();
        let log = scene.dir.path().join("attempts.jsonl");
        let ckpt = scene.dir.path().join("ckpt");
        std::fs::create_dir(&ckpt).unwrap();
        Loop { scene, log, ckpt }
    }

    /// `watchdog FLAGS run -- python3 restartable.py LOG CKPT ARGS`, in `cg` when given.
    fn run(&self, cg: Option<&MemoryCgroup>, flags: &[&str], args: &[&str]) -> Output {
        let mut wd = self.scene.watchdog();
        if !flags.contains(&"--lead") {
            wd.args(["--lead", "300ms"]);
        }
        wd.arg("--no-notify")
            .args(flags)
            .args(["run", "--", "python3"])
            .arg(repo().join("tests/e2e/scripts/restartable.py"))
            .arg(&self.log)
            .arg(&self.ckpt)
            .args(args);
        let Some(cg) = cg else {
            return wd.output().unwrap();
        };
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
            .arg(cg.procs())
            .arg(wd.get_program())
            .args(wd.get_args());
        for (k, v) in wd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        if let Some(dir) = wd.get_current_dir() {
            sh.current_dir(dir);
        }
        sh.output().unwrap()
    }

    /// The lines the script logged of one kind.
    fn logged(&self, kind: &str) -> Vec<Value> {
        read_events(&self.log)
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    fn events(&self, kind: &str) -> Vec<Value> {
        of_kind(&read_events(&self.scene.events), kind)
            .into_iter()
            .cloned()
            .collect()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn cgroup(limit: u64) -> Option<MemoryCgroup> {
    if !require(is_root(), "root, for memory cgroups") {
        return None;
    }
    need(MemoryCgroup::create(limit), "a memory cgroup")
}

/// The issue's first case: a leak only the first attempt has is OOM-killed, restarted with
/// WATCHDOG_RESTART=1 and the checkpoint it last acknowledged, resumes after it, finishes.
#[test]
fn a_leak_only_the_first_attempt_has_is_restarted_from_its_last_checkpoint() {
    let Some(cg) = cgroup(160 * MIB) else {
        return;
    };
    let l = Loop::new();
    let rec = l.scene.dir.path().join("train.recording.csv");
    let out = l.run(
        Some(&cg),
        &["--restart", "2", "--record", rec.to_str().unwrap()],
        &["--steps", "40", "--leak-mib", "8", "--leak-in", "first"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let starts = l.logged("start");
    assert_eq!(starts.len(), 2, "{starts:?}\n{err}");
    assert_eq!(starts[0]["restart"], Value::Null);
    assert_eq!(starts[1]["restart"], "1");
    assert_eq!(starts[1]["last_verdict"], "oom_kill", "{err}");
    // The newest checkpoint the first attempt acknowledged, and the step after it.
    let saved = l.logged("saved");
    let last = saved
        .iter()
        .take_while(|s| s["step"].as_u64() < starts[1]["first_step"].as_u64())
        .last()
        .unwrap_or_else(|| panic!("no save before the restart: {saved:?}"));
    assert_eq!(starts[1]["resume_from"], last["path"], "{err}");
    assert_eq!(
        starts[1]["first_step"].as_u64(),
        last["step"].as_u64().map(|s| s + 1)
    );
    assert_eq!(l.logged("done").len(), 1);
    let restarts = l.events("restart");
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0]["attempt"], 2);
    assert_eq!(restarts[0]["verdict"], "oom_kill");
    assert_eq!(restarts[0]["resume_from"], last["path"]);
    assert_eq!(restarts[0]["step"], last["step"]);
    let exits = l.events("exit");
    let attempts: Vec<&Value> = exits.iter().map(|e| &e["attempt"]).collect();
    assert_eq!(attempts, [1, 2], "{exits:?}");
    assert!(err.contains("2 attempt(s) of this run"), "{err}");
    // One recording per attempt, linked by the run id: one report draws both, the restart
    // marked; diff compares them.
    let rec2 = l.scene.dir.path().join("train.attempt2.recording.csv");
    let meta = |p: &Path| -> Value {
        let text = std::fs::read_to_string(p).unwrap();
        let line = text.lines().find(|l| l.contains("\"meta\"")).unwrap();
        serde_json::from_str::<Value>(line.trim_start_matches('#')).unwrap()["meta"].clone()
    };
    let (m1, m2) = (meta(&rec), meta(&rec2));
    assert_eq!(
        (m1["attempt"].clone(), m2["attempt"].clone()),
        (1.into(), 2.into())
    );
    assert!(
        m1["run_id"].is_string() && m1["run_id"] == m2["run_id"],
        "{m1} {m2}"
    );
    let svg = l.scene.dir.path().join("run.svg");
    let report = run(&[
        "report",
        rec.to_str().unwrap(),
        rec2.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_success(&report, "watchdog report A1 A2");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("class=\"restart\""), "no restart marker");
    assert!(
        drawn.matches("class=\"exit\"").count() >= 2,
        "not both exits"
    );
    let diff = run(&["diff", rec.to_str().unwrap(), rec2.to_str().unwrap()]);
    assert!(
        matches!(diff.status.code(), Some(0 | 1)),
        "{}",
        stderr(&diff)
    );
}

/// A failure tied to a global step (a batch that always needs more than the limit) ends
/// the run after its second failure: exit 137 and the deterministic verdict.
#[test]
fn a_failure_at_the_same_step_stops_after_the_second_attempt() {
    let Some(cg) = cgroup(160 * MIB) else {
        return;
    };
    let l = Loop::new();
    let out = l.run(
        Some(&cg),
        &["--restart", "5"],
        &["--steps", "40", "--spike-at", "22", "--spike-mib", "300"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert_eq!(l.logged("start").len(), 2, "{err}");
    assert!(
        err.contains("the failure is deterministic") && err.contains("at step 20"),
        "{err}"
    );
    assert!(err.contains("cgroup_memory peaked at"), "{err}");
}

/// The same, with a lead that holds many saves before the failure: the first attempt's
/// saves within the lead are not its progress, and the second attempt, resumed from the
/// last of them, failing at the same step is the second failure without progress (issue
/// 20's tester: it compared the first attempt's step without those saves against the
/// second's resumed from one of them, and took a third attempt to stop).
#[test]
fn a_failure_at_the_same_step_stops_after_the_second_attempt_whatever_the_lead() {
    let Some(cg) = cgroup(160 * MIB) else {
        return;
    };
    let l = Loop::new();
    let out = l.run(
        Some(&cg),
        &["--restart", "5", "--lead", "1500ms"],
        &[
            "--steps",
            "80",
            "--save-every",
            "1",
            "--spike-at",
            "60",
            "--spike-mib",
            "300",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert_eq!(l.logged("start").len(), 2, "{err}");
    assert!(
        err.contains("attempt 2 ended as attempt 1 did (oom_kill) at step 59"),
        "{err}"
    );
}

/// A leak that starts over in each process makes progress every attempt, and is restarted
/// until the restarts are spent.
#[test]
fn a_leak_in_every_attempt_makes_progress_until_the_restarts_are_spent() {
    let Some(cg) = cgroup(160 * MIB) else {
        return;
    };
    let l = Loop::new();
    let out = l.run(
        Some(&cg),
        &["--restart", "2"],
        &["--steps", "400", "--leak-mib", "4", "--leak-in", "all"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{err}");
    let starts = l.logged("start");
    assert_eq!(starts.len(), 3, "{err}");
    let firsts: Vec<u64> = starts
        .iter()
        .map(|s| s["first_step"].as_u64().unwrap())
        .collect();
    assert!(firsts[0] < firsts[1] && firsts[1] < firsts[2], "{firsts:?}");
    assert!(err.contains("all 2 restart(s) are spent"), "{err}");
}

/// SIGKILL in the middle of a save (`--restart-on signal`): the half-written checkpoint
/// was never acknowledged, and the next attempt resumes from the one before it.
#[test]
fn a_run_killed_in_the_middle_of_a_save_resumes_from_the_previous_complete_one() {
    let l = Loop::new();
    let out = l.run(
        None,
        &["--restart", "1", "--restart-on", "signal"],
        &[
            "--steps",
            "14",
            "--step-s",
            "0.02",
            "--die-mid-save-at",
            "12",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let starts = l.logged("start");
    assert_eq!(starts.len(), 2, "{err}");
    assert_eq!(starts[1]["last_verdict"], "signal");
    let ten = l.ckpt.join("ckpt-10");
    assert_eq!(starts[1]["resume_from"], ten.to_str().unwrap(), "{err}");
    assert!(l.ckpt.join("ckpt-12/weights").exists());
}

/// A checkpoint rewritten in place after its acknowledgment (the run died halfway through
/// the rewrite) is passed over for the one before it: each acknowledgment is measured when
/// it comes, not when the attempt ends (issue 20's tester: before any alert the watch
/// read the acknowledgment only at the exit, and so took the half-rewritten one).
#[test]
fn a_checkpoint_rewritten_after_its_acknowledgment_is_passed_over() {
    let l = Loop::new();
    let out = l.run(
        None,
        &["--restart", "1", "--restart-on", "signal"],
        &["--steps", "16", "--step-s", "0.1", "--rewrite-at", "14"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let starts = l.logged("start");
    assert_eq!(starts.len(), 2, "{err}");
    let five = l.ckpt.join("ckpt-5");
    assert_eq!(starts[1]["resume_from"], five.to_str().unwrap(), "{err}");
    assert_eq!(starts[1]["first_step"], 6, "{err}");
}

/// What a failed attempt left running (a child re-parented to the watchdog) is ended
/// before the next attempt starts, so its memory is free.
#[test]
fn what_a_failed_attempt_left_running_is_ended_before_the_next() {
    let l = Loop::new();
    let out = l.run(
        None,
        &["--restart", "1", "--restart-on", "signal"],
        &[
            "--steps",
            "8",
            "--step-s",
            "0.02",
            "--die-mid-save-at",
            "6",
            "--leave-child",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let starts = l.logged("start");
    assert_eq!(starts.len(), 2, "{err}");
    let child = starts[0]["child"].as_u64().unwrap();
    assert!(
        !Path::new(&format!("/proc/{child}")).exists(),
        "PID {child} left by the first attempt still runs"
    );
    assert!(err.contains("sent SIGTERM to PID"), "{err}");
}

/// A SIGTERM the watchdog forwarded ends the run: it is not restarted, even with
/// `--restart-on signal`.
#[test]
fn a_forwarded_sigterm_is_never_restarted() {
    let l = Loop::new();
    let mut wd = l.scene.watchdog();
    let child = wd
        .args(["--no-notify", "--restart", "3", "--restart-on", "signal"])
        .args(["run", "--", "python3"])
        .arg(repo().join("tests/e2e/scripts/restartable.py"))
        .arg(&l.log)
        .arg(&l.ckpt)
        .args(["--steps", "1000"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(std::time::Duration::from_secs(20), || {
        std::fs::read_to_string(&l.log).is_ok_and(|t| t.contains("\"start\""))
    }));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert_eq!(l.logged("start").len(), 1, "{err}");
    assert!(
        err.contains("the watchdog was told to stop (SIGTERM)"),
        "{err}"
    );
}

/// Without `--restart-on signal`, the same SIGKILL is not restarted: exit 137.
#[test]
fn a_signal_is_not_restarted_unless_listed() {
    let l = Loop::new();
    let out = l.run(
        None,
        &["--restart", "1"],
        &[
            "--steps",
            "14",
            "--step-s",
            "0.02",
            "--die-mid-save-at",
            "12",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert_eq!(l.logged("start").len(), 1);
    assert!(
        err.contains("not in restart-on (oom_kill,gpu_oom,disk_full)"),
        "{err}"
    );
}

/// Disk full on a small tmpfs: with a hook that frees the space (once the run has exited,
/// so the disk is full at the end) the run is restarted; without, it is not.
#[test]
fn a_full_disk_is_restarted_only_when_the_space_is_free_again() {
    if !require(is_root(), "root, for a tmpfs") {
        return;
    }
    for freed in [true, false] {
        let Some(fs) = need(Tmpfs::mount("4m"), "a tmpfs mount") else {
            return;
        };
        let l = Loop::new();
        let disk = fs.path().to_str().unwrap();
        let hook = format!(
            "while kill -0 $WATCHDOG_TARGET_PID 2>/dev/null; do sleep 0.05; done; rm -f {}",
            fs.path().join("ballast").display()
        );
        let mut flags = vec!["--restart", "1", "--disk", disk];
        if freed {
            flags.extend(["--on-alert", hook.as_str()]);
        }
        let ckpt = fs.path().join("ckpt");
        std::fs::create_dir(&ckpt).unwrap();
        let out = l.scene_run_in(&ckpt, &flags, disk);
        let err = stderr(&out);
        let starts = l.logged("start");
        if freed {
            assert_eq!(out.status.code(), Some(0), "{err}");
            assert_eq!(starts.len(), 2, "{err}");
            assert_eq!(starts[1]["last_verdict"], "disk_full", "{err}");
            assert!(err.contains("free again"), "{err}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert_eq!(starts.len(), 1, "{err}");
            assert!(
                err.contains("not restarted:") && err.contains("free, less than"),
                "{err}"
            );
        }
    }
}

impl Loop {
    /// The disk-full run: checkpoints of 1 MiB in `ckpt`, then ballast filling `fill`.
    fn scene_run_in(&self, ckpt: &Path, flags: &[&str], fill: &str) -> Output {
        let mut wd = self.scene.watchdog();
        wd.args(["--lead", "300ms", "--no-notify"])
            .args(flags)
            .args(["run", "--", "python3"])
            .arg(repo().join("tests/e2e/scripts/restartable.py"))
            .arg(&self.log)
            .arg(ckpt)
            .args(["--steps", "4", "--step-s", "0.02", "--save-every", "2"])
            .args(["--save-bytes", &MIB.to_string(), "--fill", fill]);
        wd.output().unwrap()
    }
}

/// What cannot restart a run is refused with exit 2 and one line naming it.
#[test]
fn restarts_that_cannot_work_are_refused() {
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("watchdog.toml");
    std::fs::write(&file, "restart = 2\n").unwrap();
    let file = file.to_str().unwrap();
    let cases: [(&[&str], &str); 11] = [
        (
            &["--restart", "1", "--pid", "1"],
            "--restart cannot be used with --pid",
        ),
        (
            &["--restart-on", "oom_kill", "--pid", "1"],
            "--restart-on cannot be used with --pid",
        ),
        (
            &["--restart-per-hour", "3", "--pid", "1"],
            "--restart-per-hour cannot be used with --pid",
        ),
        (
            &["--config", file, "--pid", "1"],
            "restart (in the config file) cannot be used with --pid",
        ),
        (
            &["--restart-on", "runtime_limit", "run", "--", "true"],
            "invalid restart-on 'runtime_limit'",
        ),
        (
            &[
                "--restart-on",
                "oom_kill,watchdog_signal",
                "run",
                "--",
                "true",
            ],
            "invalid restart-on 'watchdog_signal'",
        ),
        (
            &["--restart", "1", "daemon"],
            "--restart cannot be used with daemon",
        ),
        (
            &["--restart", "x", "run", "--", "true"],
            "invalid count 'x'",
        ),
        (
            &["--restart-on", "oom_kill", "run", "--", "true"],
            "--restart-on takes effect only with --restart N",
        ),
        (
            &[
                "--restart",
                "0",
                "--restart-on",
                "crash",
                "run",
                "--",
                "true",
            ],
            "--restart-on takes effect only with --restart N",
        ),
        (
            &["--restart-per-hour", "3", "run", "--", "true"],
            "--restart-per-hour takes effect only with --restart N",
        ),
    ];
    for (args, said) in cases {
        let out = run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// The largest `--restart` is a number like any other: the attempt count said between
/// attempts did not overflow (a panic in a debug build, "at most 0" in a release one).
#[test]
fn the_largest_restart_count_is_said_without_overflow() {
    let out = run(&[
        "--no-notify",
        "--restart",
        "4294967295",
        "--restart-on",
        "exited",
        "run",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("attempt 2 of at most 4294967296"), "{err}");
    assert!(err.contains("the failure is deterministic"), "{err}");
}

/// `--max-runtime` is the run's, not each attempt's: a restarted attempt is given what is
/// left of it (a job's time limit does not start again with the attempt).
#[test]
fn a_restarted_attempt_has_what_is_left_of_the_max_runtime() {
    let l = Loop::new();
    let out = l.run(
        None,
        &[
            "--restart",
            "1",
            "--restart-on",
            "signal",
            "--max-runtime",
            "1h",
        ],
        &["--steps", "8", "--step-s", "0.1", "--die-mid-save-at", "6"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let limits: Vec<u64> = l
        .events("limit")
        .iter()
        .filter(|e| e["resource"] == "runtime")
        .map(|e| e["limit"].as_u64().unwrap())
        .collect();
    assert_eq!(limits.len(), 2, "{limits:?}");
    assert_eq!(limits[0], 3_600_000);
    // The first attempt ran at least its 6 steps of 0.1 s.
    assert!(limits[1] <= 3_600_000 - 500, "{limits:?}");
}

/// A SIGINT while the watchdog lets a hook finish after a failed attempt (the pause before
/// the next) stops it at once, the hook ended: it waited out the whole hook timeout.
#[test]
fn a_sigint_while_a_hook_is_let_finish_between_attempts_stops_at_once() {
    let scene = Scene::new();
    let started = scene.dir.path().join("hook-started");
    let hook = format!("touch {}; sleep 120", started.display());
    let child = scene
        .watchdog()
        .args(["--no-notify", "--restart", "2", "--restart-on", "signal"])
        .args(["--mem-limit", "1MiB", "--hook-timeout", "120s"])
        .args(["--on-alert", &hook])
        .args(["run", "--", "sh", "-c", "sleep 1; kill -9 $$"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(std::time::Duration::from_secs(20), || started.exists()));
    // The command ends 1 s after its start; the hook runs on.
    std::thread::sleep(std::time::Duration::from_millis(2000));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let sent = std::time::Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    let err = stderr(&out);
    // Measured: about 0.1 s; the hook timeout is 120 s.
    assert!(took < std::time::Duration::from_secs(20), "{took:?}: {err}");
    assert!(
        err.contains("the watchdog was told to stop (SIGINT)"),
        "{err}"
    );
    assert!(!err.contains("restarting"), "{err}");
}

/// A checkpoint's name is the run's own text: a name with an escape sequence and a newline
/// is escaped and clipped in every line of stderr that names it (the acknowledgment, the
/// restart), never written raw (issue 29, item 3).
#[test]
fn a_checkpoint_name_never_forges_a_line_of_stderr() {
    let dir = scratch();
    let script = r#"
import json, os, sys, time
req = os.environ["WATCHDOG_REQUEST_FILE"]
name = "c\x1b[2J\nwatchdog: FORGED line" + "x" * 200
if os.environ.get("WATCHDOG_RESTART"):
    sys.exit(0)
open(name, "w").write("w")
with open(req + ".ack.tmp", "w") as f:
    json.dump({"seq": 0, "time_unix": time.time(), "path": os.path.abspath(name), "step": 10, "cause": "cuda_oom"}, f)
os.replace(req + ".ack.tmp", req + ".ack")
time.sleep(1)
sys.exit(1)
"#;
    let out = bin()
        .current_dir(dir.path())
        .args(["--gpu", "off", "--interval", "50ms", "--request-file"])
        .arg(dir.path().join("req.json"))
        .args([
            "--restart",
            "1",
            "--restart-on",
            "gpu_oom",
            "run",
            "--",
            "python3",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    let text = stderr(&out);
    assert!(text.contains("restarting (attempt 2"), "{text}");
    assert!(!text.contains('\u{1b}'), "a raw escape: {text}");
    assert!(
        !text.lines().any(|l| l.starts_with("watchdog: FORGED")),
        "a forged line: {text}"
    );
    assert!(
        !text.contains(&"x".repeat(200)),
        "the name was not clipped: {text}"
    );
}

/// An acknowledgment that cannot be taken (not JSON, a field of the wrong type, no
/// `time_unix`) is ignored with one warning that names it (docs/recording.md).
#[test]
fn a_malformed_acknowledgment_is_ignored_with_one_warning() {
    for content in [
        "garbage",
        r#"{"seq":1,"path":5,"time_unix":1.0}"#,
        r#"{"seq":1,"step":12}"#,
    ] {
        let dir = scratch();
        let req = dir.path().join("req.json");
        let script = format!(
            "sleep 0.3; printf '%s' '{content}' > '{}.ack'; sleep 4",
            req.display()
        );
        let out = bin()
            .args(["--gpu", "off", "--interval", "50ms", "--request-file"])
            .arg(&req)
            .args(["run", "--", "sh", "-c"])
            .arg(&script)
            .output()
            .unwrap();
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{content}: {text}");
        let said = text
            .lines()
            .filter(|l| l.contains("req.json.ack' is ignored") && l.contains("expected"))
            .count();
        assert_eq!(said, 1, "{content}: {text}");
    }
}

/// What an attempt leaves at the watchdog's own paths (a garbage acknowledgment, a
/// symlink, a FIFO, a directory; the same at the next attempt's recording) never stops
/// the next attempt, and a directory is moved aside, not emptied; a user's own file at a
/// later attempt's recording is refused before the first attempt runs (issue 29, item 1).
#[test]
fn what_an_attempt_leaves_behind_never_stops_the_restart() {
    for leave in [
        "echo garbage > \"$R.ack\"",
        "ln -sf /etc/hostname \"$R.ack\"",
        "mkfifo \"$R.ack\"",
        "echo garbage > \"$R\"",
        "mkdir \"$R.ack\"",
        "mkdir \"$R\"",
        "mkdir -p \"$R.ack/kept\"",
        "ln -s /etc/hostname \"$A\"",
        "mkdir \"$A\"",
        "echo garbage > \"$A\"",
    ] {
        let dir = scratch();
        let req = dir.path().join("req.json");
        let rec = dir.path().join("r.recording.csv");
        let script = format!(
            "[ -n \"$WATCHDOG_RESTART\" ] && exit 0; R='{}'; A='{}'; {leave}; exit 1",
            req.display(),
            dir.path().join("r.attempt2.recording.csv").display()
        );
        let out = bin()
            .args(["--gpu", "off", "--interval", "50ms", "--record"])
            .arg(&rec)
            .arg("--request-file")
            .arg(&req)
            .args([
                "--restart",
                "1",
                "--restart-on",
                "exited",
                "run",
                "--",
                "sh",
                "-c",
            ])
            .arg(&script)
            .output()
            .unwrap();
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{leave}: {text}");
        assert!(text.contains("2 attempt(s) of this run"), "{leave}: {text}");
        if leave.contains("kept") {
            let aside = dir.path().join("req.json.ack.left-by-attempt1/kept");
            assert!(aside.is_dir(), "{leave}: not moved aside: {text}");
        }
    }
    let dir = scratch();
    let mine = dir.path().join("train.attempt2.recording.csv");
    std::fs::write(&mine, "my own notes\n").unwrap();
    let out = bin()
        .args(["--gpu", "off", "--record"])
        .arg(dir.path().join("train.recording.csv"))
        .args(["--restart", "1", "run", "--", "sh", "-c"])
        .arg(format!("touch '{}/ran'", dir.path().display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        !dir.path().join("ran").exists(),
        "the command ran before the check"
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my own notes\n");
}
