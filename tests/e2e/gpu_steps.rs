//! Issue 19: the run's step reports (`<request file>.steps`) through the built binary,
//! with the fake NVML library as the device and `scripts/steps_writer.py` as the run: it
//! writes the documented format from a scripted allocator, fails at the step whose peak
//! does not fit (an exception entry and exit 1) and stops at the first request (an ack and
//! exit 0). The asserts are on steps, never on times.

use std::process::Output;

use serde_json::Value;

use crate::gpu::build_fake;
use crate::support::*;

const UUID: &str = "GPU-5a1b0000-1111-2222-3333-444444444444";

/// One run of `steps_writer.py SHAPE ARGS` under `watchdog run` on an 8 GiB fake GPU,
/// where PID 1 holds 2 GiB (so the allocator can have 6 GiB) and the writer 512 MiB (its
/// CUDA context: all of it inside what it reports as reserved).
struct StepsRun {
    out: Output,
    /// What the script says happened: `{"what": "request" | "oom" | "done", "step": N, ...}`.
    outcome: Value,
    events: Vec<Value>,
    scene: Scene,
}

impl StepsRun {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn alerts(&self) -> Vec<&Value> {
        of_kind(&self.events, "alert")
    }
}

fn steps_writer() -> String {
    repo()
        .join("tests/e2e/scripts/steps_writer.py")
        .display()
        .to_string()
}

fn run_steps(shape: &str, args: &[&str], flags: &[&str]) -> StepsRun {
    let scene = Scene::new();
    let dir = scene.dir.path();
    let lib = build_fake(dir);
    let pidfile = dir.join("train.pid");
    let script = dir.join("nvml.script");
    std::fs::write(
        &script,
        format!(
            "device Fake_GPU {UUID} 8192 0 0 0\nprocess 0 1 2048 0\nprocess 0 pidfile:{} 512 0\n",
            pidfile.display()
        ),
    )
    .unwrap();
    let outcome_path = dir.join("outcome.json");
    let out = bin()
        .env("WATCHDOG_NVML_LIB", &lib)
        .env("FAKE_NVML_SCRIPT", &script)
        .args(["--gpu", "required", "--interval", "20ms", "--lead", "3s"])
        .arg("--events")
        .arg(&scene.events)
        .arg("--request-file")
        .arg(&scene.req)
        .args(flags)
        .args(["run", "--", "python3", &steps_writer()])
        .arg(&outcome_path)
        .arg(shape)
        .args(["--pidfile", pidfile.to_str().unwrap(), "--uuid", UUID])
        .args(args)
        .output()
        .unwrap();
    let outcome = std::fs::read_to_string(&outcome_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let events = read_events(&scene.events);
    StepsRun {
        out,
        outcome,
        events,
        scene,
    }
}

/// A leak of 8 MiB a step from 2 GiB fails at the step whose peak passes the 6 GiB the
/// allocator can have (step 513): the request comes before it, for `step_peak`.
#[test]
fn a_per_step_leak_is_requested_before_the_failing_step() {
    let r = run_steps("leak", &["--capacity-mib", "6144"], &[]);
    let stderr = r.stderr();
    assert_eq!(r.outcome["what"], "request", "{}: {stderr}", r.outcome);
    assert_eq!(r.out.status.code(), Some(0), "{stderr}");
    assert_eq!(r.outcome["reason"], "step_peak", "{}", r.outcome);
    let at = r.outcome["step"].as_u64().unwrap();
    assert!(
        at < 513,
        "the request came at step {at}, the failing step is 513"
    );
    let alerts = r.alerts();
    let a = alerts[0];
    assert_eq!(a["resource"], "gpu0", "{a}");
    assert_eq!(a["reason"], "step_peak", "{a}");
    assert_eq!(a["phase"], "train", "{a}");
    let predicted = a["predicted_peak"].as_u64().unwrap();
    assert!(predicted > 2048 << 20, "{a}");
    // The request carries the same fields.
    assert_eq!(r.outcome["request_step"], a["step"], "{}", r.outcome);
    assert!(
        stderr.contains("will not fit") && stderr.contains("available to the allocator"),
        "{stderr}"
    );
}

/// Evaluations every 50 training steps whose peak grows 600 MiB from one to the next:
/// the seventh would not fit (2 GiB + 4200 MiB). The request comes before it starts.
#[test]
fn a_growing_evaluation_peak_is_requested_before_the_evaluation_that_would_fail() {
    let r = run_steps(
        "eval",
        &["--capacity-mib", "6144", "--grow-mib", "600"],
        &[],
    );
    let stderr = r.stderr();
    assert_eq!(r.outcome["what"], "request", "{}: {stderr}", r.outcome);
    assert_eq!(r.outcome["reason"], "eval_peak", "{}", r.outcome);
    let at = r.outcome["step"].as_u64().unwrap();
    // Cycles of 50 training and 10 evaluation steps: the seventh evaluation starts at 410.
    assert!(at < 410, "the request came at step {at}");
    assert_eq!(r.alerts()[0]["phase"], "eval", "{:?}", r.alerts());
}

/// Allocation retries and reserved-but-unallocated memory growing while the peaks stay
/// flat: fragmentation, said with the allocator setting that helps.
#[test]
fn growing_retries_are_fragmentation() {
    let r = run_steps("frag", &["--grow-mib", "4", "--steps", "600"], &[]);
    let stderr = r.stderr();
    assert_eq!(r.outcome["what"], "request", "{}: {stderr}", r.outcome);
    assert_eq!(r.outcome["reason"], "fragmentation", "{}", r.outcome);
    assert!(
        stderr.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{stderr}"
    );
}

#[test]
fn a_steady_run_never_alerts() {
    let r = run_steps("steady", &["--steps", "300"], &[]);
    let stderr = r.stderr();
    assert_eq!(r.outcome["what"], "done", "{}: {stderr}", r.outcome);
    assert_eq!(r.out.status.code(), Some(0), "{stderr}");
    assert!(r.alerts().is_empty(), "{:?}", r.alerts());
    // Every report was taken: the file was removed once read.
    assert!(!r.scene.req.with_extension("json.steps").exists());
}

/// The client's exception entry and its last-chance acknowledgment: the verdict is
/// gpu_oom, said as CUDA out of memory with the step and the figures.
#[test]
fn a_reported_cuda_oom_is_the_verdict_with_its_step_and_figures() {
    let r = run_steps("oom", &["--oom-at", "60", "--capacity-mib", "6144"], &[]);
    let stderr = r.stderr();
    assert_eq!(r.out.status.code(), Some(1), "{stderr}");
    assert_eq!(r.outcome["what"], "oom", "{}", r.outcome);
    let exit = of_kind(&r.events, "exit");
    let exit = exit[0];
    assert_eq!(exit["verdict"], "gpu_oom", "{exit}");
    let summary = exit["summary"].as_str().unwrap();
    assert!(
        summary.contains("CUDA out of memory at step 60 (training) on gpu0"),
        "{summary}"
    );
    assert!(summary.contains("available"), "{summary}");
    let evidence = exit["evidence"].to_string();
    assert!(evidence.contains("ckpt/last-chance"), "{evidence}");
    assert!(evidence.contains("Tried to allocate"), "{evidence}");
    assert!(stderr.contains("CUDA out of memory at step 60"), "{stderr}");
    let oom = of_kind(&r.events, "cuda_oom");
    assert_eq!(oom.len(), 1, "{oom:?}");
    assert_eq!(oom[0]["step"], 60);
    assert_eq!(oom[0]["resource"], "gpu0");
    let acks = of_kind(&r.events, "ack");
    assert!(
        acks.iter()
            .any(|a| a["cause"] == "cuda_oom" && a["seq"] == 0 && a["path"] == "ckpt/last-chance"),
        "{acks:?}"
    );
}

/// The same leak, written where the watchdog must not take it: by a PID outside the
/// tree, through a symlink, or over 128 KiB. Nothing is predicted, one warning is said,
/// and the file is left alone.
#[test]
fn a_file_from_outside_the_tree_a_symlink_or_an_oversized_file_is_ignored() {
    for (what, extra) in [
        ("outside the tree", &["--writer-pid", "1"][..]),
        ("a symlink", &["--symlink"][..]),
        ("oversized", &["--oversize"][..]),
    ] {
        let mut args = vec!["--grow-mib", "16", "--steps", "300"];
        args.extend_from_slice(extra);
        let r = run_steps("leak", &args, &[]);
        let stderr = r.stderr();
        assert_eq!(r.outcome["what"], "done", "{what}: {}: {stderr}", r.outcome);
        assert!(r.alerts().is_empty(), "{what}: {:?}", r.alerts());
        let warned = stderr
            .lines()
            .filter(|l| l.contains("step reports") && l.contains("not used"))
            .count();
        assert_eq!(warned, 1, "{what}: one warning: {stderr}");
        assert!(
            std::fs::symlink_metadata(r.scene.req.with_extension("json.steps")).is_ok(),
            "{what}: left alone"
        );
    }
}

/// `watchdog run` tells the client its interval, so it writes at most once a tick.
#[test]
fn run_sets_watchdog_interval() {
    let dir = scratch();
    let out = bin()
        .args(["--gpu", "off", "--interval", "250ms", "--request-file"])
        .arg(dir.path().join("req.json"))
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo \"interval=$WATCHDOG_INTERVAL\"",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("interval=0.25"), "{stdout}");
}

/// In the service: a run the daemon found writes its step reports beside the request
/// file in its user's directory, and its leak is requested there, for `step_peak`.
#[test]
fn the_service_takes_the_step_reports_of_a_run_it_found() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = watchdog_testsupport::public_scratch("wd-daemon-steps-");
    let lib = build_fake(dir.path());
    let pidfile = dir.path().join("train.pid");
    let script = dir.path().join("nvml.script");
    std::fs::write(
        &script,
        format!(
            "device Fake_GPU {UUID} 8192 0 0 0\nprocess 0 1 2048 0\nprocess 0 pidfile:{} 512 0\n",
            pidfile.display()
        ),
    )
    .unwrap();
    let conf = crate::daemon::write_config(
        dir.path(),
        r#"
[[rule]]
name = "steps"
[rule.match]
command = "steps_writer\\.py .*--tag service-steps"
[rule.watch]
lead = "3s"
notify = false
"#,
    );
    let log = dir.path().join("daemon.log");
    let _daemon = crate::daemon::start_daemon(
        &conf,
        &log,
        &[
            ("WATCHDOG_NVML_LIB", lib.as_os_str()),
            ("FAKE_NVML_SCRIPT", script.as_os_str()),
        ],
    );
    let outcome_path = dir.path().join("outcome.json");
    let out = std::process::Command::new("python3")
        .arg(steps_writer())
        .arg(&outcome_path)
        .arg("leak")
        .args(["--pidfile", pidfile.to_str().unwrap(), "--uuid", UUID])
        .args(["--capacity-mib", "6144", "--tag", "service-steps"])
        .arg("--service-dir")
        .arg(dir.path().join("run/users/0"))
        .output()
        .unwrap();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let outcome: Value =
        serde_json::from_str(&std::fs::read_to_string(&outcome_path).unwrap()).unwrap();
    assert_eq!(outcome["what"], "request", "{outcome}: {log_text}");
    assert_eq!(outcome["reason"], "step_peak", "{outcome}");
    assert!(outcome["step"].as_u64().unwrap() < 513, "{outcome}");
    assert_eq!(out.status.code(), Some(0));
}

/// The error's message and the last-chance checkpoint's path and cause are the run's own
/// text: a newline or an escape sequence in them is written escaped in the closing summary
/// and the log (a service's journal), never raw, so a run cannot forge a line of either.
#[test]
fn the_runs_own_text_is_escaped_in_the_summary_and_the_log() {
    let scene = Scene::new();
    let forged = "\u{1b}[31m\nwatchdog: PID 1 exited normally";
    let script = r#"
import json, os, sys, time
req = os.environ["WATCHDOG_REQUEST_FILE"]
forged = sys.argv[1]
def put(path, body):
    with open(path + ".tmp", "w") as f:
        json.dump(body, f)
    os.replace(path + ".tmp", path)
put(req + ".steps", {"pid": os.getpid(), "steps": [], "exception": {"kind": "cuda_oom", "step": 7,
    "time_unix": time.time(), "message": "CUDA out of memory." + forged}})
put(req + ".ack", {"seq": 0, "time_unix": time.time(), "path": "/ckpt" + forged, "step": 7, "cause": "cuda_oom"})
time.sleep(1)
sys.exit(1)
"#;
    let out = bin()
        .args(["--gpu", "off", "--interval", "50ms", "--events"])
        .arg(&scene.events)
        .arg("--request-file")
        .arg(&scene.req)
        .args(["run", "--", "python3", "-c", script, forged])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let exit = of_kind(&read_events(&scene.events), "exit")[0].clone();
    assert_eq!(exit["verdict"], "gpu_oom", "{exit}: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "an escape sequence went out raw: {stderr}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("watchdog: PID 1 exited normally")),
        "a line was forged: {stderr}"
    );
    assert!(
        stderr.contains(r"CUDA out of memory.\u{1b}[31m\nwatchdog: PID 1"),
        "{stderr}"
    );
    assert!(stderr.contains(r"/ckpt\u{1b}[31m\n"), "{stderr}");
}
