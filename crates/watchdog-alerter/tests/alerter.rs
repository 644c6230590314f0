//! Integration tests with real processes: who gets the signal, the request file under
//! concurrent readers, the hook, the event log and the notification timeout.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use watchdog_alerter::*;
use watchdog_procfs::ProcRoot;
use watchdog_types::request::{Request, Sent, SentRequest};
use watchdog_types::{AlertReason, Event, EventBody, ResourceKind, Unit};

/// Installs a SIGUSR1 handler that appends to argv[1], then publishes its pid in argv[2].
const WITH_HANDLER: &str = r#"
import os, signal, sys, time
marker, ready = sys.argv[1], sys.argv[2]
def on_usr1(signum, frame):
    with open(marker, "a") as f:
        f.write("got %d\n" % signum)
signal.signal(signal.SIGUSR1, on_usr1)
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
while True:
    time.sleep(0.02)
"#;

/// No SIGUSR1 handler (default action: terminate); publishes its pid in argv[1].
const WITHOUT_HANDLER: &str = r#"
import os, sys, time
ready = sys.argv[1]
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
while True:
    time.sleep(0.02)
"#;

/// A parent without a handler that starts a child with one (argv: marker, child_ready, parent_ready).
const PARENT_OF_HANDLER: &str = r#"
import os, subprocess, sys, time
marker, child_ready, ready = sys.argv[1], sys.argv[2], sys.argv[3]
child = subprocess.Popen([sys.executable, "-c", sys.argv[4], marker, child_ready])
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
child.wait()
"#;

/// Kills the processes it holds when the test ends, whatever happened.
struct Procs {
    children: Vec<Child>,
    extra: Vec<u32>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for pid in &self.extra {
            if let Ok(fd) = PidFd::open(*pid) {
                let _ = fd.send_signal(libc::SIGKILL);
            }
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How long a test waits for something another process or thread must do: a deadline
/// for a slow, busy machine, never a speed (a correct run waits only as long as it takes).
const DEADLINE: Duration = Duration::from_secs(30);

fn wait_for_file(p: &Path) -> String {
    wait_for_content(p, |_| true)
}

/// Polls `p` until it exists and `complete` says its content is whole (a writer may
/// have created the file and not yet written to it), for up to [`DEADLINE`].
fn wait_for_content(p: &Path, complete: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    let mut last = None;
    while t.elapsed() < DEADLINE {
        if let Ok(s) = std::fs::read_to_string(p) {
            if complete(&s) {
                return s;
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "{} was not complete within {DEADLINE:?}; last read: {last:?}",
        p.display()
    );
}

/// Whether `s` holds `n` whole lines (each ended by its newline).
fn lines_done(s: &str, n: usize) -> bool {
    s.ends_with('\n') && s.lines().count() >= n
}

fn python(args: &[&str]) -> Child {
    Command::new("python3")
        .arg("-c")
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn pid_in(p: &Path) -> u32 {
    wait_for_file(p).trim().parse().unwrap()
}

fn p(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The tree: parent (no handler) -> child (handler). An outsider with a handler is not in the tree.
#[test]
fn signals_only_handlers_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (marker, child_ready, parent_ready) = (p(d, "marker"), p(d, "child"), p(d, "parent"));
    let (out_marker, out_ready) = (p(d, "outsider_marker"), p(d, "outsider"));
    let mut procs = Procs {
        children: vec![],
        extra: vec![],
    };
    procs.children.push(python(&[
        PARENT_OF_HANDLER,
        s(&marker),
        s(&child_ready),
        s(&parent_ready),
        WITH_HANDLER,
    ]));
    procs
        .children
        .push(python(&[WITH_HANDLER, s(&out_marker), s(&out_ready)]));
    let parent = pid_in(&parent_ready);
    let child = pid_in(&child_ready);
    procs.extra.push(child);
    let outsider = pid_in(&out_ready);
    assert_eq!(parent, procs.children[0].id());

    let report = signal_tree(
        &ProcRoot::default(),
        &[parent, child],
        parent,
        libc::SIGUSR1,
    );
    assert_eq!(report.sent, vec![child], "{report:?}");
    assert_eq!(report.not_catching, vec![parent], "{report:?}");
    assert!(
        report.failed.is_empty() && report.gone.is_empty(),
        "{report:?}"
    );

    // The handler opens the marker (creating it) before it writes: wait for the line.
    assert_eq!(
        wait_for_content(&marker, |s| lines_done(s, 1)),
        format!("got {}\n", libc::SIGUSR1)
    );
    std::thread::sleep(Duration::from_millis(300));
    // The parent without a handler was spared and is alive; the outsider got nothing.
    assert!(procs.children[0].try_wait().unwrap().is_none());
    assert!(!PidFd::open(parent).unwrap().is_exited().unwrap());
    assert!(!PidFd::open(child).unwrap().is_exited().unwrap());
    assert!(
        !out_marker.exists(),
        "the outsider {outsider} was signalled"
    );

    // A second alert reaches the child again (the handler stays installed).
    let report = signal_tree(
        &ProcRoot::default(),
        &[child, parent],
        parent,
        libc::SIGUSR1,
    );
    assert_eq!(report.sent, vec![child]);
    assert_eq!(
        wait_for_content(&marker, |s| lines_done(s, 2)),
        format!("got {0}\ngot {0}\n", libc::SIGUSR1)
    );
}

/// When nothing catches the signal, nothing is sent and the process survives.
#[test]
fn no_handler_nothing_sent_process_survives() {
    let dir = tempfile::tempdir().unwrap();
    let ready = p(dir.path(), "ready");
    let mut procs = Procs {
        children: vec![python(&[WITHOUT_HANDLER, s(&ready)])],
        extra: vec![],
    };
    let pid = pid_in(&ready);
    let report = signal_tree(&ProcRoot::default(), &[pid], pid, libc::SIGUSR1);
    assert!(report.sent.is_empty(), "{report:?}");
    assert_eq!(report.not_catching, vec![pid]);
    assert!(report.none_catching());
    std::thread::sleep(Duration::from_millis(300));
    assert!(procs.children[0].try_wait().unwrap().is_none(), "it died");
    // SIGUSR2 is not caught either.
    let report = signal_tree(&ProcRoot::default(), &[pid], pid, libc::SIGUSR2);
    assert!(report.sent.is_empty());
    std::thread::sleep(Duration::from_millis(100));
    assert!(procs.children[0].try_wait().unwrap().is_none(), "it died");
}

/// A child whose parent is not in the list (the caller's tree is stale or the PID was reused) is left alone.
#[test]
fn pid_whose_parent_is_outside_the_tree_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (marker, ready) = (p(dir.path(), "marker"), p(dir.path(), "ready"));
    let _procs = Procs {
        children: vec![python(&[WITH_HANDLER, s(&marker), s(&ready)])],
        extra: vec![],
    };
    let pid = pid_in(&ready);
    // Claim the tree is rooted at pid 1: our handler process's parent (this test) is not in it.
    let report = signal_tree(&ProcRoot::default(), &[1, pid], 1, libc::SIGUSR1);
    assert!(!report.sent.contains(&pid), "{report:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists());
}

/// A process that exited before the alert is reported gone, not failed.
#[test]
fn exited_process_is_gone() {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    let report = signal_tree(&ProcRoot::default(), &[pid], pid, libc::SIGUSR1);
    assert!(report.sent.is_empty());
    assert!(report.failed.is_empty(), "{report:?}");
}

fn request(seq: u64) -> SentRequest {
    SentRequest {
        request: Request {
            seq,
            resource: "tree_memory".into(),
            kind: ResourceKind::TreeMemory,
            reason: AlertReason::Trend,
            used: 1 << 30,
            limit: 2 << 30,
            predicted_s: Some(21.5),
            step_peak: None,
            deadline_unix: None,
        },
        sent: Sent {
            time: now_rfc3339(),
            time_unix: unix_time_s(std::time::SystemTime::now()),
            pid: 1234,
            signal: "SIGUSR1".into(),
            watchdog_pid: std::process::id(),
        },
    }
}

/// A reader polling the file while it is rewritten always sees a whole document.
/// The writer keeps rewriting until the reader has read [`READS`] times, however late
/// the reader thread gets to run, so the reads overlap the writes.
#[test]
fn request_file_is_atomic_under_concurrent_readers() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const READS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("request.json");
    write_request_file(&path, &request(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (path, stop, reads) = (path.clone(), stop.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let bytes = std::fs::read(&path).unwrap();
                let r: SentRequest = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("partial read: {e}: {bytes:?}"));
                assert!(r.request.seq >= last);
                last = r.request.seq;
                reads.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let t = Instant::now();
    let mut seq = 0;
    // At least 200 rewrites, and on until the reader has read enough (or failed).
    while seq < 200 || (reads.load(Ordering::Relaxed) < READS && !reader.is_finished()) {
        assert!(
            t.elapsed() < DEADLINE,
            "the reader read {} times in {DEADLINE:?}",
            reads.load(Ordering::Relaxed)
        );
        seq += 1;
        write_request_file(&path, &request(seq)).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    // A torn or out-of-order read panicked the reader: this unwrap fails the test.
    reader.join().unwrap();
    assert!(reads.load(Ordering::Relaxed) >= READS);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "temp files left behind");
}

#[test]
fn request_file_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("etc-passwd");
    std::fs::write(&target, "root:x:0:0").unwrap();
    let path = dir.path().join("request.json");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let err = write_request_file(&path, &request(1)).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:x:0:0");
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn hook_runs_with_env_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hook.out");
    let req = request(3);
    let reqfile = dir.path().join("request.json");
    let mut env = hook_env(&req, Some(&reqfile));
    let go = dir.path().join("go");
    env.push(("OUT".into(), out.display().to_string()));
    env.push(("GO".into(), go.display().to_string()));
    // The hook cannot finish before the test creates GO, which it does only once
    // `run_hook` returned: a `run_hook` that waited for the hook would never see GO (the
    // hook gives up after some 3000 polls, at least 30 s, and exits 7, not 3).
    let cmd = r#"i=0; while [ ! -e "$GO" ]; do i=$((i+1)); [ "$i" -gt 3000 ] && exit 7; sleep 0.01; done; printf '%s|%s|%s|%s|%s|%s|%s|%s|%s' "$WATCHDOG_RESOURCE" "$WATCHDOG_REASON" "$WATCHDOG_USED" "$WATCHDOG_LIMIT" "$WATCHDOG_PREDICTED_S" "$WATCHDOG_PID" "$WATCHDOG_REQUEST_FILE" "$WATCHDOG_SIGNAL" "$WATCHDOG_TARGET_PID" > "$OUT"; exit 3"#;
    let h = run_hook(cmd, &env).unwrap();
    // The hook, held by a pidfd; it is gone (ESRCH) only if `run_hook` waited and reaped it.
    let fd = PidFd::open(h.pid).unwrap_or_else(|e| panic!("run_hook waited for the hook: {e}"));
    assert!(!fd.is_exited().unwrap(), "run_hook waited for the hook");
    assert!(!out.exists(), "the hook ran to its end before GO");
    std::fs::write(&go, "").unwrap();
    assert!(
        fd.wait_exit(Some(DEADLINE)).unwrap(),
        "the hook did not end within {DEADLINE:?} of GO"
    );
    let status = h.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!(
            "tree_memory|trend|{}|{}|21.500|{}|{}|SIGUSR1|1234",
            1u64 << 30,
            2u64 << 30,
            std::process::id(),
            reqfile.display()
        )
    );
    // A hook killed by a signal is reported, not a panic.
    let h = run_hook("kill -9 $$", &[]).unwrap();
    assert_eq!(h.wait().unwrap().signal(), Some(9));
}

#[test]
fn event_log_lines_parse_with_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut log = EventLog::open(&path).unwrap();
                for i in 0..200u64 {
                    log.append_now(EventBody::Alert {
                        resource: format!("disk:/w{w}"),
                        reason: AlertReason::HeadroomFloor,
                        used: i,
                        limit: 1000,
                        unit: Unit::Bytes,
                        predicted_s: None,
                        rate_per_s: 0.0,
                        signalled: vec![1, 2, 3],
                        signal: Some("SIGUSR1".into()),
                        request_file: Some("/tmp/r \"quoted\"\n.json".into()),
                        dry_run: false,
                        phase: None,
                        step: None,
                        predicted_peak: None,
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 400);
    for l in lines {
        let e: Event = serde_json::from_str(l).unwrap();
        assert_eq!(e.time.len(), 24);
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["event"], "alert");
        assert_eq!(v["reason"], "headroom_floor");
    }
}

/// Runs one test in a child copy of this test binary, so its environment
/// (DBUS_SESSION_BUS_ADDRESS) or its process state (a child subreaper) is set without
/// touching this process's.
fn run_self(test: &str, env: &[(&str, &str)], remove: &[&str]) -> (bool, Duration, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--include-ignored"])
        .env("WATCHDOG_ALERTER_CHILD_TEST", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in remove {
        cmd.env_remove(k);
    }
    let t = Instant::now();
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), t.elapsed(), text)
}

/// A bus that accepts connections and never answers: the notification gives up at its timeout.
#[test]
#[cfg(feature = "notify")]
fn notification_times_out_on_a_silent_bus() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("bus");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        let mut held = vec![];
        for c in listener.incoming() {
            held.push(c); // accept, keep open, never answer
        }
    });
    let addr = format!("unix:path={}", sock.display());
    let (ok, took, out) = run_self(
        "child_notify_silent_bus",
        &[("DBUS_SESSION_BUS_ADDRESS", &addr)],
        &[],
    );
    assert!(ok, "{out}");
    assert!(out.contains("timed out"), "{out}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
#[ignore = "run by notification_times_out_on_a_silent_bus in a child process"]
fn child_notify_silent_bus() {
    if std::env::var_os("WATCHDOG_ALERTER_CHILD_TEST").is_none() {
        return;
    }
    let t = Instant::now();
    let r = notify::notify_desktop_blocking("watchdog", "test", Duration::from_millis(300));
    let took = t.elapsed();
    eprintln!("result: {r:?} after {took:?}");
    assert!(matches!(r, Err(NotifyError::Timeout(_))), "{r:?}");
    eprintln!("timed out as expected");
    // It does not hang: the timeout ended it (a wide bound for a busy machine, not a speed).
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// Headless (no bus address, no /run/user/UID/bus): skipped, quickly.
#[test]
#[cfg(feature = "notify")]
fn notification_skipped_without_bus() {
    let (ok, _, out) = run_self("child_notify_no_bus", &[], &["DBUS_SESSION_BUS_ADDRESS"]);
    assert!(ok, "{out}");
}

#[test]
#[ignore = "run by notification_skipped_without_bus in a child process"]
fn child_notify_no_bus() {
    if std::env::var_os("WATCHDOG_ALERTER_CHILD_TEST").is_none() {
        return;
    }
    let uid = rustix::process::getuid().as_raw();
    if Path::new(&format!("/run/user/{uid}/bus")).exists() {
        return; // a real session bus: nothing to check here
    }
    let r = notify::notify_desktop_blocking("watchdog", "test", Duration::from_millis(300));
    assert!(matches!(r, Ok(NotifyOutcome::NoBus)), "{r:?}");
}

/// The whole protocol against the real Python client: request file first, then the signal
/// through `signal_tree`; the client saves at its next step and acknowledges; `AckWatcher` sees it.
#[test]
fn python_client_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let reqfile = dir.path().join("request.json");
    let ready = dir.path().join("ready");
    let saved = dir.path().join("saved");
    let python_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let script = r#"
import os, sys, time
import training_watchdog as tw
tw.install()
ready, saved = sys.argv[1], sys.argv[2]
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
deadline = time.time() + 30
while time.time() < deadline:
    time.sleep(0.01)  # one training step
    if tw.checkpoint_requested():
        with open(saved, "w") as f:
            f.write(tw.request()["resource"])
        tw.acknowledge()
        break
"#;
    let mut procs = Procs {
        children: vec![
            Command::new("python3")
                .args(["-c", script, s(&ready), s(&saved)])
                .env("PYTHONPATH", &python_dir)
                .env("WATCHDOG_SIGNAL", "SIGUSR1")
                .env("WATCHDOG_REQUEST_FILE", &reqfile)
                .spawn()
                .unwrap(),
        ],
        extra: vec![],
    };
    let pid = pid_in(&ready);
    let mut acks = AckWatcher::new(&reqfile);
    assert_eq!(acks.check(), None);
    let mut req = request(1);
    req.sent.pid = pid;
    write_request_file(&reqfile, &req).unwrap();
    let report = signal_tree(&ProcRoot::default(), &[pid], pid, libc::SIGUSR1);
    assert_eq!(report.sent, vec![pid], "{report:?}");
    let t = Instant::now();
    let ack = loop {
        if let Some(a) = acks.check() {
            break a;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no ack");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(ack.seq, 1);
    assert!(ack.time_unix >= req.sent.time_unix);
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), "tree_memory");
    assert!(procs.children[0].wait().unwrap().success());
}

/// In a child subreaper (the watchdog in `run` mode), what a hook detaches goes to the
/// hook's keeper, never to the watchdog, and the hook's own status still comes back.
#[test]
fn a_subreapers_hooks_leave_what_they_detach_to_a_keeper() {
    let (ok, _, out) = run_self("child_keeper", &[], &[]);
    assert!(ok, "{out}");
}

#[test]
#[ignore = "run by a_subreapers_hooks_leave_what_they_detach_to_a_keeper in a child process"]
fn child_keeper() {
    if std::env::var_os("WATCHDOG_ALERTER_CHILD_TEST").is_none() {
        return;
    }
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("detached");
    let hooks = hook::Hooks::new(Duration::from_secs(20));
    let cmd = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 20' >/dev/null 2>&1 & exit 3",
        file.display()
    );
    let handle = hooks.run(&cmd, &[]).unwrap();
    assert_eq!(handle.wait().unwrap().code(), Some(3));
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the hook never detached");
        std::thread::sleep(Duration::from_millis(10));
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ppid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let keeper_comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap_or_default();
    let _ = Command::new("kill").arg(pid.to_string()).status();
    assert_ne!(ppid, std::process::id(), "the detached process came to us");
    assert!(
        hooks.is_hook(ppid),
        "its parent {ppid} is not the hook's keeper"
    );
    // Named for what it is in `ps`, not a second `watchdog` (read before the kill above
    // let it exit).
    assert_eq!(keeper_comm.trim(), "wd-hook-keeper");
}
