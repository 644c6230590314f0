//! The command-line contract: bad input gets one line naming the thing and what was
//! expected, with exit status 2; `run` passes the child's status and environment through.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{
    Gate, Group, bin, bin_as_nobody, is_root, of_kind, read_events, require, run, scratch,
    wait_for, wait_for_start,
};

/// `watchdog --gpu off --events EVENTS --pid PID` with its stderr piped, once its `start`
/// event says it watches PID (see [`wait_for_start`]).
#[track_caller]
fn watch_pid_started(events: &Path, pid: u32) -> std::process::Child {
    let watchdog = bin()
        .args(["--gpu", "off", "--events", events.to_str().unwrap()])
        .args(["--pid", &pid.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_start(events);
    watchdog
}

/// Asserts exit status 2 and a one-line stderr containing every fragment.
fn assert_usage_error(args: &[&str], fragments: &[&str]) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one line, got {stderr:?}"
    );
    for f in fragments {
        assert!(stderr.contains(f), "{args:?}: {stderr:?} lacks {f:?}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_values_are_one_line_errors_with_status_2() {
    let table: &[(&[&str], &[&str])] = &[
        (
            &["--pid", "4194303"],
            &["no process with PID 4194303", "expected"],
        ),
        (
            &["--pid", "abc"],
            &["invalid PID 'abc'", "expected a positive process ID"],
        ),
        (&["--pid", "0"], &["invalid PID '0'"]),
        (
            &["--max-interval", "50ms", "--pid", "1"],
            &[
                "invalid max-interval '50ms'",
                "expected at least the interval (100ms)",
            ],
        ),
        (
            &["--interval", "5x", "--pid", "1"],
            &["invalid duration '5x'", "expected"],
        ),
        (&["--lead=-3s", "--pid", "1"], &["invalid duration '-3s'"]),
        (
            &["--mem-limit", "12XB", "--pid", "1"],
            &["invalid size '12XB'", "expected"],
        ),
        (
            &["--signal", "KILL", "--pid", "1"],
            &["invalid signal 'KILL'", "expected"],
        ),
        (
            &["--deadline", "tomorrow", "--pid", "1"],
            &["invalid deadline 'tomorrow'", "RFC 3339"],
        ),
        (&["--gpu", "maybe", "--pid", "1"], &["maybe"]),
        (
            &["--disk", "/nonexistent/dir", "--pid", "1"],
            &["cannot watch disk '/nonexistent/dir'", "expected"],
        ),
        (
            &["--request-file", "/nonexistent/dir/r.json", "--pid", "1"],
            &["invalid request file", "expected"],
        ),
        (
            &["--events", "/nonexistent/dir/e.jsonl", "--pid", "1"],
            &["invalid events file", "expected"],
        ),
        (
            &["--notice-interval", "1ms", "run", "--", "true"],
            &["invalid notice-interval '1ms'", "expected at least 100ms"],
        ),
        (
            &["--notice-endpoint", "http://[::1", "run", "--", "true"],
            &[
                "invalid notice_endpoint 'http://[::1'",
                "expected a base URL",
            ],
        ),
        (
            &["--checkpoint-record", "/tmp", "run", "--", "true"],
            &[
                "invalid checkpoint record '/tmp'",
                "expected a regular file",
            ],
        ),
        (
            &["--checkpoint-record", "/dev/null", "run", "--", "true"],
            &[
                "invalid checkpoint record '/dev/null'",
                "expected a regular file",
            ],
        ),
        (&["run"], &["CMD"]),
        (
            &[],
            &["nothing to watch", "expected --pid PID or run -- CMD"],
        ),
        (
            &["--pid", "1", "run", "--", "true"],
            &["--pid cannot be used with run"],
        ),
        (
            &["replay", "/nonexistent/trace.csv"],
            &["cannot read trace '/nonexistent/trace.csv'"],
        ),
        // Flags a subcommand would silently ignore: the daemon's settings are its rules'.
        (
            &["--pid", "1", "daemon", "--config", "/nonexistent"],
            &["--pid cannot be used with daemon", "[[rule]]"],
        ),
        (
            &["daemon", "--lead", "5s", "--config", "/nonexistent"],
            &["--lead cannot be used with daemon", "config/daemon.toml"],
        ),
        (
            &["--disk", "/tmp", "daemon"],
            &["--disk cannot be used with daemon"],
        ),
        (
            &["status", "--mem-limit", "1GiB"],
            &[
                "--mem-limit cannot be used with status",
                "--json and --socket",
            ],
        ),
        (
            &["--metrics", "9187", "status"],
            &["--metrics cannot be used with status"],
        ),
        (
            &["--pid", "1", "diff", "a.csv", "b.csv"],
            &["--pid cannot be used with diff"],
        ),
        (
            &["--pid", "1", "replay", "trace.csv"],
            &["--pid cannot be used with replay", "--lead, --interval"],
        ),
        (
            &["replay", "trace.csv", "--metrics", "9187"],
            // It listed five of the seven flags replay takes (and its --help shows).
            &[
                "--metrics cannot be used with replay",
                "--dry-run, --on-alert",
            ],
        ),
        (
            &["--metrics", "1.2.3:9187", "--pid", "1"],
            &[
                "invalid metrics address",
                "\"1.2.3\" is not an IPv4 address",
            ],
        ),
    ];
    for (args, fragments) in table
        .iter()
        .chain(REGRESSIONS_ISSUE_9)
        .chain(REGRESSIONS_ISSUE_18)
    {
        assert_usage_error(args, fragments);
    }
}

/// Issue 18: a negative value was "unexpected argument '-1' found", naming no flag.
const REGRESSIONS_ISSUE_18: &[(&[&str], &[&str])] = &[
    (
        &["--interval", "-1s", "--pid", "1"],
        &["'--interval <DUR>'", "invalid duration '-1s'", "expected"],
    ),
    (
        &["--mem-limit", "-1", "--pid", "1"],
        &["'--mem-limit <SIZE>'", "invalid size '-1'", "expected"],
    ),
    (
        &["--signal", "-10", "--pid", "1"],
        &["'--signal <SIG>'", "invalid signal '-10'", "expected"],
    ),
    (
        &["--floor", "-1", "--pid", "1"],
        &["'--floor <PERCENT>'", "invalid percentage '-1'", "expected"],
    ),
    (
        &["--pid", "-1"],
        &["'--pid <PID>'", "invalid PID '-1'", "expected"],
    ),
    (
        &["--ready-fd", "-1", "--pid", "1"],
        &["'--ready-fd <FD>'", "invalid descriptor '-1'"],
    ),
    (
        &["replay", "trace.csv", "--lead", "-.5s"],
        &["'--lead <DUR>'", "invalid duration '-.5s'"],
    ),
    // A flag is still not taken as a missing value.
    (
        &["--lead", "--pid", "1"],
        &["a value is required for '--lead <DUR>'"],
    ),
];

/// Inputs of issue 9 that were accepted, or refused without saying why.
const REGRESSIONS_ISSUE_9: &[(&[&str], &[&str])] = &[
    // Crash signals killed the run they were to protect (faulthandler catches SIGSEGV).
    (
        &["--signal", "SEGV", "--pid", "1"],
        &["invalid signal 'SEGV'", "SIGSEGV is a crash signal", "USR1"],
    ),
    (
        &["--signal", "IOT", "--pid", "1"],
        &["invalid signal 'IOT'", "SIGABRT is a crash signal"],
    ),
    (
        &["--signal", "7", "--pid", "1"],
        &["SIGBUS is a crash signal"],
    ),
    (
        &["--signal", "sigxfsz", "--pid", "1"],
        &["SIGXFSZ is a crash signal"],
    ),
    (
        &["--interval", "99999999999999999999h", "--pid", "1"],
        &["invalid duration '99999999999999999999h'", "too large"],
    ),
    (
        &["--pid", "2147483648"],
        &["invalid PID '2147483648': too large", "4194303"],
    ),
    (&["--pid", "+5"], &["invalid PID '+5'", "digits only"]),
    (
        &["--floor", "100", "--pid", "1"],
        &[
            "invalid percentage '100'",
            "from 0 up to (not including) 100",
        ],
    ),
    (
        &["--deadline", "9999-12-31T00:00:00Z", "--pid", "1"],
        &[
            "invalid deadline '9999-12-31T00:00:00Z'",
            "too far in the future",
        ],
    ),
    (
        &["--deadline", "2099-01-01T00:00:00+25:00", "--pid", "1"],
        &["the offset '+25:00' is outside RFC 3339"],
    ),
    (
        &["--disk", "/proc", "--pid", "1"],
        &["cannot watch disk '/proc'", "reports no size"],
    ),
];

#[test]
fn kernel_threads_are_refused_as_targets() {
    let kthreadd = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    if !require(
        kthreadd.trim() == "kthreadd",
        "PID 2 to be kthreadd (no PID namespace)",
    ) {
        return;
    }
    assert_usage_error(
        &["--gpu", "off", "--pid", "2"],
        &[
            "invalid PID 2: it is a kernel thread (kthreadd)",
            "expected",
        ],
    );
}

/// A non-UTF-8 argument (legal on Linux) after `run --` was refused.
#[test]
fn run_passes_non_utf8_arguments_through_unchanged() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch();
    let out_file = dir.path().join("arg.bin");
    let arg = OsStr::from_bytes(b"caf\xe9-\xff\xfe");
    let out = bin()
        .args([
            "--gpu",
            "off",
            "run",
            "--",
            "sh",
            "-c",
            "printf %s \"$1\" > \"$2\"",
            "sh",
        ])
        .arg(arg)
        .arg(&out_file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&out_file).unwrap(), arg.as_bytes());
}

/// Runs `watchdog --gpu off FLAGS --events E run -- COMMAND` to completion; its output and events.
fn run_with_events(
    flags: &[&str],
    command: &[&str],
) -> (std::process::Output, Vec<serde_json::Value>) {
    let dir = scratch();
    let events = dir.path().join("events.jsonl");
    let out = bin()
        .args(["--gpu", "off"])
        .args(flags)
        .arg("--events")
        .arg(&events)
        .args(["run", "--"])
        .args(command)
        .output()
        .unwrap();
    (out, crate::support::read_events(&events))
}

/// The `exit` event's verdict and summary.
fn verdict(events: &[serde_json::Value]) -> (String, String) {
    let exit = crate::support::of_kind(events, "exit");
    assert_eq!(exit.len(), 1, "{events:?}");
    let text = |k: &str| exit[0][k].as_str().unwrap_or_default().to_string();
    (text("verdict"), text("summary"))
}

#[test]
fn unlimited_resources_get_a_limit_event_with_null() {
    let (out, ev) = run_with_events(&[], &["true"]);
    assert_eq!(out.status.code(), Some(0));
    let tree = crate::support::of_kind(&ev, "limit")
        .into_iter()
        .find(|e| e["resource"] == "tree_memory")
        .cloned()
        .expect("a limit event for tree_memory");
    assert!(tree["limit"].is_null(), "{tree}");
}

/// `--disk P --disk P/.` watched one filesystem several times.
#[test]
fn one_filesystem_given_twice_is_watched_once_naming_both_paths() {
    let dir = scratch();
    let p = dir.path().display().to_string();
    let dot = format!("{p}/.");
    let (out, ev) = run_with_events(&["--disk", &p, "--disk", &dot, "--disk", &p], &["true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let disks: Vec<_> = crate::support::of_kind(&ev, "limit")
        .into_iter()
        .filter(|e| e["kind"] == "disk_bytes")
        .collect();
    assert_eq!(disks.len(), 1, "{disks:?}");
    assert_eq!(disks[0]["resource"], format!("disk:{p}"));
    let source = disks[0]["source"].as_str().unwrap();
    assert!(
        source.ends_with(&format!("also given as {dot}")),
        "{source}"
    );
}

/// A run that segfaulted by itself was said to be killed by "another process or the user".
#[test]
fn a_segfault_is_a_crash_verdict() {
    // No core file: the working directory is not the place for one.
    let script = "import os,resource,signal\n\
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n\
        os.kill(os.getpid(), signal.SIGSEGV)\n";
    let (out, ev) = run_with_events(&[], &["python3", "-c", script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGSEGV), "{stderr}");
    let (kind, summary) = verdict(&ev);
    assert_eq!(kind, "crash", "{summary}");
    assert!(
        summary.starts_with("crashed (SIGSEGV: a fault in the process itself"),
        "{summary}"
    );
    assert!(stderr.contains("crashed (SIGSEGV"), "{stderr}");
}

/// When the checkpoint signal the watchdog sent ended the run, the verdict blamed
/// another process (or, near the limit, the runtime limit that raised the alert).
#[test]
fn a_run_ended_by_the_watchdogs_own_signal_is_told_so() {
    // The handler makes the process catch SIGUSR1 (so it is signalled), then dies of it.
    let script = "import os,signal,time\n\
        def h(n, f):\n    signal.signal(n, signal.SIG_DFL)\n    os.kill(os.getpid(), n)\n\
        signal.signal(signal.SIGUSR1, h)\ntime.sleep(30)\n";
    // The runtime alert comes about 3 s in: time enough for Python to start, however busy.
    let flags = ["--interval", "20ms", "--max-runtime", "8s", "--lead", "5s"];
    let (out, ev) = run_with_events(&flags, &["python3", "-c", script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGUSR1), "{stderr}");
    assert_eq!(crate::support::of_kind(&ev, "alert").len(), 1, "{ev:?}");
    let (kind, summary) = verdict(&ev);
    assert_eq!(kind, "watchdog_signal", "{summary}");
    assert!(
        summary.contains("the checkpoint signal the watchdog sent it"),
        "{summary}"
    );
}

/// SIGINT is accepted, with a warning: Python raises KeyboardInterrupt on it by default.
#[test]
fn sigint_as_the_checkpoint_signal_is_warned_about() {
    let out = run(&["--gpu", "off", "--signal", "INT", "run", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("KeyboardInterrupt"), "{stderr}");
}

/// A trace whose time went backwards was replayed silently, with an alert at `"time": -5`.
#[test]
fn replay_says_when_time_goes_backwards() {
    let dir = scratch();
    let trace = dir.path().join("back.csv");
    let mut csv = String::from("time,used,limit\n");
    for t in 10..40 {
        csv.push_str(&format!("{t},{},100\n", t * 3 - 20));
    }
    csv.push_str("5,99,100\n5.5,100,100\n");
    std::fs::write(&trace, csv).unwrap();
    let out = run(&[
        "replay",
        trace.to_str().unwrap(),
        "--lead",
        "30s",
        "--interval",
        "1s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("time goes backwards at line 32"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(t) = v["time"].as_f64() {
            assert!(t >= 0.0, "{line}");
        }
    }
}

#[test]
fn bad_config_names_file_line_and_expectation() {
    let dir = scratch();
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "lead = \"5s\"\nintervall = \"10ms\"\n").unwrap();
    let u = unknown.display().to_string();
    assert_usage_error(
        &["--config", &u, "--pid", "1"],
        &[&format!("{u}:2"), "unknown field `intervall`"],
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "# comment\nmem_limit = \"lots\"\n").unwrap();
    let b = bad.display().to_string();
    assert_usage_error(
        &["--config", &b, "--pid", "1"],
        &[&format!("{b}:2"), "invalid size 'lots'", "expected"],
    );
    // A value of the wrong type named the line only, not the key.
    let typed = dir.path().join("typed.toml");
    std::fs::write(&typed, "lead = \"5s\"\ninterval = 5\n").unwrap();
    let t = typed.display().to_string();
    assert_usage_error(
        &["--config", &t, "--pid", "1"],
        &[&format!("{t}:2: interval: invalid type: integer `5`")],
    );
    // Issue 18: a quoted key was reported under the key of the line before, and a
    // `[[rule]]` without a name under `state_dir`.
    std::fs::write(&typed, "lead = \"30s\"\n\"interval\" = 5\n").unwrap();
    assert_usage_error(
        &["--config", &t, "--pid", "1"],
        &[&format!(
            "{t}:2: interval: invalid type: integer `5`, expected a duration such as \"5s\""
        )],
    );
    let daemon = dir.path().join("daemon.toml");
    std::fs::write(
        &daemon,
        "state_dir = \"/tmp\"\n[[rule]]\n[rule.match]\ncommand = \"x\"\n",
    )
    .unwrap();
    let d = daemon.display().to_string();
    assert_usage_error(
        &["daemon", "--config", &d],
        &[&format!("{d}:2: rule[0]: missing field `name`")],
    );
    let crash = dir.path().join("crash.toml");
    std::fs::write(&crash, "signal = \"SEGV\"\n").unwrap();
    let c = crash.display().to_string();
    assert_usage_error(
        &["--config", &c, "--pid", "1"],
        &[
            &format!("{c}:1: signal: invalid signal 'SEGV'"),
            "crash signal",
        ],
    );
    assert_usage_error(
        &["--config", "/nonexistent.toml", "--pid", "1"],
        &["cannot read config file '/nonexistent.toml'"],
    );
}

/// `watchdog status --socket FILE` (a file, a FIFO, a directory: not a socket) exited 1
/// as if the daemon had failed; the path given is what is wrong.
#[test]
fn status_of_a_path_that_is_not_a_socket_is_a_usage_error() {
    let dir = scratch();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    for path in [
        file.as_path(),
        dir.path(),
        std::path::Path::new("/dev/null"),
    ] {
        let p = path.display().to_string();
        assert_usage_error(
            &["status", "--socket", &p],
            &[&format!(
                "cannot connect to {p}: not a socket; expected the socket"
            )],
        );
    }
}

/// A key set twice was `config file F:2: duplicate key`, naming no key.
#[test]
fn a_key_set_twice_is_named() {
    let dir = scratch();
    let twice = dir.path().join("twice.toml");
    std::fs::write(&twice, "lead = \"30s\"\n\"lead\" = \"10s\"\n").unwrap();
    let t = twice.display().to_string();
    assert_usage_error(
        &["--config", &t, "--pid", "1"],
        &[&format!(
            "{t}:2: duplicate key 'lead': expected each key once in its table"
        )],
    );
    std::fs::write(
        &twice,
        "[[rule]]\nname = \"a\"\nname = \"b\"\n[rule.match]\ncommand = \"x\"\n",
    )
    .unwrap();
    assert_usage_error(
        &["daemon", "--config", &t],
        &[&format!("{t}:3: duplicate key 'name'")],
    );
}

#[test]
fn documented_example_config_is_accepted() {
    let config = crate::support::repo().join("config/watchdog.toml");
    let out = bin()
        .args([
            "--config",
            &config.display().to_string(),
            "--gpu",
            "off",
            "run",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_pid_we_may_not_signal_is_refused() {
    if !require(is_root(), "root (to drop to user nobody)") {
        return;
    }
    // As user nobody, PID 1 (root's) may not be signalled. Nobody runs a copy of the
    // binary: the build directory may be private (a clone in a 0700 home).
    let (_copy, mut as_nobody) = bin_as_nobody();
    let out = as_nobody.args(["--pid", "1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not permitted to signal PID 1"), "{stderr}");
}

#[test]
fn run_exits_with_the_child_status() {
    let out = run(&["--gpu", "off", "run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = run(&["--gpu", "off", "run", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    let out = run(&["--gpu", "off", "run", "--", "/nonexistent/cmd"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run '/nonexistent/cmd'"));
}

#[test]
fn run_gives_the_child_its_environment() {
    let dir = scratch();
    let file = dir.path().join("env.txt");
    let script = format!(
        "echo \"$WATCHDOG_SIGNAL|$WATCHDOG_REQUEST_FILE|$WATCHDOG_PID\" > {}",
        file.display()
    );
    let req = dir.path().join("req.json");
    let mut child = bin()
        .args(["--gpu", "off", "--signal", "USR2", "--request-file"])
        .arg(&req)
        .args(["run", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let watchdog_pid = child.id();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text.trim(),
        format!("SIGUSR2|{}|{watchdog_pid}", req.display())
    );
}

#[test]
fn run_forwards_sigterm_to_the_child() {
    let dir = scratch();
    let marker = dir.path().join("got-term");
    let script = format!(
        "import signal,sys,time\nsignal.signal(signal.SIGTERM, lambda *a: (open({:?},'w').write('x'), sys.exit(7)))\nopen({:?},'w').write('ready')\ntime.sleep(30)\n",
        marker.display().to_string(),
        dir.path().join("ready").display().to_string(),
    );
    let mut child = bin()
        .args(["--gpu", "off", "run", "--", "python3", "-c", &script])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(crate::support::wait_for(
        std::time::Duration::from_secs(10),
        || dir.path().join("ready").exists()
    ));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(7));
    assert!(marker.exists(), "the child did not get SIGTERM");
}

#[test]
fn pid_mode_exits_0_with_a_summary_when_the_target_exits() {
    // The target ends when the test says, once it is watched: not after a second that a
    // loaded machine may spend starting the watchdog (it would attach to a finished run).
    let dir = scratch();
    let events = dir.path().join("events.jsonl");
    let gate = Gate::new(dir.path(), "end");
    let script = format!("read _ < '{}'", gate.path().display());
    // In a Group: a failed wait below does not leave it waiting on the gate for ever.
    let mut target = Group(
        Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let watchdog = watch_pid_started(&events, target.id());
    gate.release();
    let out = watchdog.wait_with_output().unwrap();
    target.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("PID {}", target.id())), "{stderr}");
    assert!(stderr.contains("Peak usage"), "{stderr}");
}

/// With `--pid` the watchdog is not the target's parent, yet it tells an exit code from a
/// kill: Linux 6.15 and later keep the status for its pidfd once the parent reaps. An older
/// kernel keeps none (the status is null) unless it has the feature backported.
#[test]
fn pid_mode_reads_the_exit_status_its_parent_reaped() {
    let kept = watchdog_testsupport::kernel_at_least(6, 15);
    let dir = scratch();
    for (end, field, want) in [("exit 3", "code", 3), ("kill -KILL $$", "signal", 9)] {
        let events = dir.path().join(format!("{field}.jsonl"));
        let gate = Gate::new(dir.path(), field);
        let script = format!("read _ < '{}'; {end}", gate.path().display());
        let mut target = Command::new("sh").args(["-c", &script]).spawn().unwrap();
        let pid = target.id();
        // The target ends once it is watched; its parent (this test) reaps it at once.
        let watchdog = watch_pid_started(&events, pid);
        gate.release();
        target.wait().unwrap();
        let out = watchdog.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let ev = read_events(&events);
        let exit = of_kind(&ev, "exit");
        assert_eq!(exit.len(), 1, "{ev:?}");
        if kept {
            assert_eq!(exit[0][field], want, "{end}: {:?}", exit[0]);
            assert_ne!(exit[0]["verdict"], "unknown", "{end}: {:?}", exit[0]);
        } else {
            assert!(
                exit[0][field].is_null() || exit[0][field] == want,
                "{end}: {:?}",
                exit[0]
            );
        }
    }
}

#[test]
fn sigusr2_writes_the_recording_on_demand() {
    let dir = scratch();
    let rec = dir.path().join("on-demand.csv");
    let events = dir.path().join("events.jsonl");
    // A target that outlives the test (killed at the end, or by its Group on a failure):
    // the only recording before its end can be the one SIGUSR2 asked for.
    let mut target = Group(
        Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let mut watchdog = Group(
        bin()
            .args(["--gpu", "off", "--record", rec.to_str().unwrap()])
            .args(["--events", events.to_str().unwrap()])
            .args(["--pid", &target.id().to_string()])
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    // Before the start event SIGUSR2 may find no handler yet, and end the watchdog.
    wait_for_start(&events);
    Command::new("kill")
        .args(["-USR2", &watchdog.id().to_string()])
        .status()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || rec.exists()),
        "no recording after SIGUSR2"
    );
    // Still watching its live target: the file came from SIGUSR2, not from an exit.
    assert!(
        watchdog.try_wait().unwrap().is_none(),
        "SIGUSR2 must not stop the watchdog"
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains("host_memory"), "{text}");
    target.kill().unwrap();
    target.wait().unwrap();
    assert!(watchdog.wait().unwrap().success());
}

#[test]
fn replay_prints_alerts_and_a_summary_as_json_lines() {
    let dir = scratch();
    let trace = dir.path().join("leak.csv");
    // 1 MiB/s into a 100 MiB limit from 10 MiB: exhausted at t = 90 s.
    let mut csv = String::from("time,used,limit,resource\n");
    for i in 0..=900 {
        let t = i as f64 * 0.1;
        csv.push_str(&format!(
            "{t:.1},{},{},cgroup_memory\n",
            (10.0 + t) as u64 * 1048576,
            100u64 << 20
        ));
    }
    std::fs::write(&trace, csv).unwrap();
    let out = run(&[
        "replay",
        trace.to_str().unwrap(),
        "--lead",
        "10s",
        "--interval",
        "100ms",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let alert = &lines[0];
    assert_eq!(alert["event"], "alert");
    assert_eq!(alert["resource"], "cgroup_memory");
    let t = alert["time"].as_f64().unwrap();
    assert!(
        (50.0..=80.0).contains(&t),
        "alert at {t}s for exhaustion at 90s with a 10s lead"
    );
    assert!(alert["predicted_s"].as_f64().unwrap() > 0.0);
    assert_eq!(lines.last().unwrap()["event"], "summary");

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "time,used,limit\n0,1,x\n").unwrap();
    let out = run(&["replay", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2") && stderr.contains("expected"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_a_pid_watch_with_a_summary_and_leaves_the_target() {
    let dir = scratch();
    let events = dir.path().join("events.jsonl");
    // Outlives any wait below; killed at the end, or by its Group on a failure.
    let mut target = Group(
        Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    // Before the start event SIGTERM may find no handler yet: killed, not stopped (143).
    let watchdog = watch_pid_started(&events, target.id());
    Command::new("kill")
        .args(["-TERM", &watchdog.id().to_string()])
        .status()
        .unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("still running"), "{stderr}");
    assert!(
        target.try_wait().unwrap().is_none(),
        "the target must be left alone"
    );
    let ev = read_events(&events);
    assert_eq!(of_kind(&ev, "stop").len(), 1, "{ev:?}");
    target.kill().unwrap();
    target.wait().unwrap();
}

#[test]
fn an_existing_file_that_is_not_a_request_is_never_used_or_removed() {
    let dir = scratch();
    let precious = dir.path().join("train.py");
    std::fs::write(&precious, "print('my training script')\n").unwrap();
    let out = run(&[
        "--request-file",
        precious.to_str().unwrap(),
        "run",
        "--",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refusing to use"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "print('my training script')\n"
    );
}

#[test]
fn a_closed_stderr_does_not_stop_the_watchdog() {
    let mut target = Command::new("sleep").arg("1.5").spawn().unwrap();
    let mut watchdog = bin()
        .args(["--gpu", "off", "--interval", "10ms", "-v"])
        .args(["--pid", &target.id().to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away at once, as `watchdog ... 2>&1 | head -1` would.
    drop(watchdog.stderr.take());
    target.wait().unwrap();
    let status = watchdog.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the watchdog died on a closed stderr"
    );
}

/// `replay` ignored `--floor` and the config file: it now resolves its settings as a live
/// watch does. A flat trace at 92% of its limit alerts with a 10% floor, from the flag or
/// the file, and not with the default 5%.
#[test]
fn replay_takes_the_floor_and_the_config_file_of_a_live_watch() {
    let dir = scratch();
    let trace = dir.path().join("flat.csv");
    let mut csv = String::from("time,used,limit,resource\n");
    for i in 0..=300 {
        csv.push_str(&format!("{:.1},92,100,cgroup_memory\n", i as f64 * 0.1));
    }
    std::fs::write(&trace, csv).unwrap();
    let config = dir.path().join("floor.toml");
    std::fs::write(&config, "floor = 10\n").unwrap();
    let alerts = |extra: &[&str]| {
        let mut args = vec!["replay", trace.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("\"event\":\"alert\""))
            .count()
    };
    assert_eq!(alerts(&[]), 0, "the default 5% floor is not crossed");
    assert_eq!(alerts(&["--floor", "10"]), 1);
    assert_eq!(alerts(&["--config", config.to_str().unwrap()]), 1);
}

/// Issue 18: the daemon exited 1 for a socket path or a `request_dir` it can never use, so
/// systemd's `RestartPreventExitStatus=2` did not apply and it was restarted every 5 s for
/// ever. Each is one line and exit status 2, and what was there is left alone.
#[test]
fn daemon_exits_2_for_a_socket_path_or_request_dir_it_cannot_use() {
    use std::os::unix::fs::PermissionsExt as _;
    if !require(is_root(), "root (a request_dir owned by another user)") {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    let at = |name: &str| d.join(name).display().to_string();
    std::fs::write(d.join("file.sock"), "keep").unwrap();
    std::fs::create_dir(d.join("dir.sock")).unwrap();
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("link.sock")).unwrap();
    let fifo = Command::new("mkfifo").arg(d.join("fifo.sock")).status();
    assert!(fifo.unwrap().success(), "mkfifo");
    std::fs::create_dir(d.join("real")).unwrap();
    std::os::unix::fs::symlink(d.join("real"), d.join("users-link")).unwrap();
    for (name, mode) in [
        ("users-nobody", 0o755),
        ("users-0775", 0o775),
        ("users-0777", 0o777),
    ] {
        let path = d.join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::os::unix::fs::chown(d.join("users-nobody"), Some(65534), None).unwrap();
    let long = format!("{}/{}.sock", d.display(), "s".repeat(120));
    let users = at("users");
    let cases: &[(String, String, &[&str])] = &[
        (
            at("file.sock"),
            users.clone(),
            &[
                "file.sock exists and is a regular file",
                "expected a socket or nothing",
            ],
        ),
        (
            at("dir.sock"),
            users.clone(),
            &["dir.sock exists and is a directory"],
        ),
        (
            at("link.sock"),
            users.clone(),
            &["link.sock exists and is a symlink"],
        ),
        (
            at("fifo.sock"),
            users.clone(),
            &["fifo.sock exists and is not a socket"],
        ),
        (
            format!("{}/d.sock", at("file.sock")),
            users.clone(),
            &["cannot create the directory", "file.sock"],
        ),
        (
            long.clone(),
            users.clone(),
            &["socket: invalid socket path", "expected at most 107 bytes"],
        ),
        (
            at("ok.sock"),
            at("users-link"),
            &["unsafe request_dir", "it is a symbolic link"],
        ),
        (
            at("ok.sock"),
            at("users-nobody"),
            &["unsafe request_dir", "owned by UID 65534"],
        ),
        (
            at("ok.sock"),
            at("users-0775"),
            &["unsafe request_dir", "0775"],
        ),
        (
            at("ok.sock"),
            at("users-0777"),
            &["unsafe request_dir", "0777"],
        ),
        (
            at("ok.sock"),
            format!("{}/users", at("file.sock")),
            &["cannot use request_dir", "Not a directory"],
        ),
    ];
    for (socket, request_dir, fragments) in cases {
        assert_daemon_refuses(d, socket, request_dir, &at("state"), fragments);
    }
    assert!(long.len() > 108, "{long}");
    assert_eq!(
        std::fs::read_to_string(d.join("file.sock")).unwrap(),
        "keep"
    );
    assert!(d.join("dir.sock").is_dir() && d.join("link.sock").is_symlink());
}

/// Starts `watchdog daemon` with a config of `socket`, `request_dir` and `state_dir` in
/// `d` and checks it exits 2 at once, with one line holding every one of `fragments`.
fn assert_daemon_refuses(
    d: &std::path::Path,
    socket: &str,
    request_dir: &str,
    state_dir: &str,
    fragments: &[&str],
) {
    let conf = d.join("daemon.toml");
    std::fs::write(
        &conf,
        format!(
            "socket = \"{socket}\"\nrequest_dir = \"{request_dir}\"\nstate_dir = \"{state_dir}\"\n\
             [[rule]]\nname = \"none\"\n[rule.match]\ncommand = \"^matches nothing$\"\n"
        ),
    )
    .unwrap();
    let mut child = bin()
        .args(["daemon", "--config", &conf.display().to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It fails before it watches anything; a daemon still running is the failure.
    let exited = wait_for(std::time::Duration::from_secs(20), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{socket} {request_dir} {state_dir}");
    assert!(exited, "{what}: the daemon started: {stderr}");
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: {stderr:?}");
    for f in fragments {
        assert!(stderr.contains(f), "{stderr:?} lacks {f:?}");
    }
}

/// A `request_dir`, `state_dir` or socket on procfs or sysfs was taken: the daemon
/// started, then watched no run (`PID N is not watched: cannot make the request directory
/// of user U: /sys/kernel/U: Operation not permitted`, or `cannot write the recording in
/// '/proc/self'`), or exited 1 for the socket. `request_dir = "/proc/1"` also logged that
/// it had made `/proc/1` 0755 before the change failed.
#[test]
fn daemon_exits_2_for_directories_on_a_kernel_filesystem() {
    if !require(is_root(), "root (the daemon's checks of its directories)") {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    let at = |name: &str| d.join(name).display().to_string();
    let (socket, users, state) = (at("ok.sock"), at("users"), at("state"));
    let cases: [(&str, &str, &str, &str); 5] = [
        (
            &socket,
            "/sys/kernel",
            &state,
            "unsafe request_dir /sys/kernel: it is on sysfs",
        ),
        (
            &socket,
            "/proc/1",
            &state,
            "unsafe request_dir /proc/1: it is on procfs",
        ),
        (
            &socket,
            &users,
            "/proc/self",
            "state_dir /proc/self: it is on procfs",
        ),
        (
            &socket,
            &users,
            "/sys/kernel/wd-state",
            "state_dir /sys/kernel/wd-state: it is on sysfs",
        ),
        (
            "/proc/self/d.sock",
            &users,
            &state,
            "/proc/self/d.sock: it is on procfs",
        ),
    ];
    for (socket, request_dir, state_dir, fragment) in cases {
        assert_daemon_refuses(d, socket, request_dir, state_dir, &[fragment]);
    }
    assert!(!std::path::Path::new("/sys/kernel/wd-state").exists());
}

/// A `state_dir` others may write to (`/tmp`-like, 1777) or of another user was taken:
/// root then wrote every user's command lines and environments where others read them,
/// and pruned a directory others plant files in. One that is not a directory watched
/// nothing.
#[test]
fn daemon_exits_2_for_a_state_dir_others_may_write_to_or_own() {
    use std::os::unix::fs::PermissionsExt as _;
    if !require(is_root(), "root (the daemon's checks of its directories)") {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    let at = |name: &str| d.join(name).display().to_string();
    let (socket, users) = (at("ok.sock"), at("users"));
    for (name, mode) in [("state-1777", 0o1777), ("state-0770", 0o770)] {
        std::fs::create_dir(d.join(name)).unwrap();
        std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::create_dir(d.join("state-nobody")).unwrap();
    std::os::unix::fs::chown(d.join("state-nobody"), Some(65534), Some(65534)).unwrap();
    // A regular file: every run would then go unwatched, each with a warning.
    std::fs::write(d.join("state-file"), "").unwrap();
    let cases = [
        (
            "state-1777",
            "its mode is 1777: group or others may write to it",
        ),
        ("state-0770", "its mode is 0770"),
        ("state-nobody", "it is owned by UID 65534"),
        ("state-file", "it is not a directory"),
    ];
    for (name, fragment) in cases {
        assert_daemon_refuses(
            d,
            &socket,
            &users,
            &at(name),
            &["unsafe state_dir", fragment],
        );
    }
}

/// Issue 18: a value that is not UTF-8 was "invalid UTF-8 was detected in one or more
/// arguments", naming no flag.
#[test]
fn a_value_that_is_not_utf8_names_its_flag() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let bad = OsStr::from_bytes(b"5\xffs");
    let mut joined = std::ffi::OsString::from("--interval=");
    joined.push(bad);
    let cases: &[(&[&OsStr], &str)] = &[
        (&[OsStr::new("--on-alert"), bad], "--on-alert <CMD>"),
        (&[OsStr::new("--interval"), bad], "--interval <DUR>"),
        (&[&joined], "--interval <DUR>"),
        (&[OsStr::new("--mem-limit"), bad], "--mem-limit <SIZE>"),
        (&[OsStr::new("--metrics"), bad], "--metrics <ADDR>"),
        (&[OsStr::new("--ready-fd"), bad], "--ready-fd <FD>"),
    ];
    for (args, flag) in cases {
        let out = bin().args(*args).args(["--pid", "1"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(
            stderr.contains(&format!(
                "invalid value '5\u{fffd}s' for '{flag}': expected UTF-8 text"
            )),
            "{args:?}: {stderr:?}"
        );
    }
    let out = bin()
        .arg("--pid")
        .arg(OsStr::from_bytes(b"\xff"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("for '--pid <PID>'"), "{stderr}");
}

/// The long flags a `--help` text lists.
fn flags_in_help(args: &[&str]) -> Vec<String> {
    let out = run(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim_start().split_once("--"))
        .filter(|(before, _)| before.is_empty() || before.ends_with(", "))
        .map(|(_, flag)| format!("--{}", flag.split([' ', '.']).next().unwrap_or_default()))
        .collect()
}

/// Issue 18: every subcommand's `--help` listed all the single-run flags, which all but
/// `run` refuse. Each lists the flags it takes, and a hidden flag is still refused by name.
#[test]
fn each_subcommands_help_lists_only_the_flags_it_takes() {
    let logging = ["--log-format", "--verbose", "--quiet", "--help"];
    let table: &[(&str, &[&str])] = &[
        ("status", &["--json", "--socket"]),
        ("diff", &[]),
        ("report", &["--output"]),
        (
            "replay",
            &[
                "--config",
                "--interval",
                "--lead",
                "--signal",
                "--on-alert",
                "--dry-run",
                "--floor",
            ],
        ),
        ("daemon", &["--ready-fd", "--metrics", "--config"]),
    ];
    for (sub, own) in table {
        let mut want: Vec<String> = own.iter().chain(&logging).map(|f| f.to_string()).collect();
        want.sort();
        for args in [vec![*sub, "--help"], vec!["help", sub]] {
            let mut got = flags_in_help(&args);
            got.sort();
            assert_eq!(got, want, "{args:?}");
        }
    }
    let run_flags = flags_in_help(&["run", "--help"]);
    for flag in [
        "--lead",
        "--mem-limit",
        "--disk",
        "--metrics",
        "--no-status",
    ] {
        assert!(
            run_flags.iter().any(|f| f == flag),
            "run lacks {flag}: {run_flags:?}"
        );
    }
    // Hidden, not gone: still refused by name, before or after the subcommand.
    assert_usage_error(
        &["status", "--lead", "5s"],
        &["--lead cannot be used with status"],
    );
    assert_usage_error(
        &["--lead", "5s", "diff", "a", "b"],
        &["--lead cannot be used with diff"],
    );
}

/// A step-peak trace (the client's step reports) is replayed by the step-peak predictor:
/// the fragmenting cache of the corpus is warned once, with the allocator setting, and a
/// bad line is one error line with status 2.
#[test]
fn replay_runs_a_step_peak_trace_through_the_step_peak_predictor() {
    let trace = crate::support::repo().join("tests/traces/steps/gen_step_fragmentation.csv");
    let out = run(&["replay", trace.to_str().unwrap(), "--lead", "30s"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let alert = &lines[0];
    assert_eq!(alert["reason"], "fragmentation");
    assert_eq!(alert["phase"], "train");
    assert_eq!(
        alert["advice"],
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    );
    // Before the failing step starts, less the save.
    let text = std::fs::read_to_string(&trace).unwrap();
    let header = |key: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        line[key.len()..].trim().parse().unwrap()
    };
    let fails = header("# exhausts_at:") - header("# save_s:");
    assert!(alert["time"].as_f64().unwrap() < fails, "{alert}");
    assert_eq!(lines[1]["resources"][0]["resource"], "gpu0");

    let dir = scratch();
    let bad = dir.path().join("steps.csv");
    std::fs::write(
        &bad,
        "time,phase,step,pass,allocated,reserved,peak,retries,ooms,total,others,outside\n1,walk,1,1,5,6,7,0,0,10,0,0\n",
    )
    .unwrap();
    assert_usage_error(
        &["replay", bad.to_str().unwrap()],
        &["line 2: invalid phase 'walk': expected train, eval or other"],
    );
}
