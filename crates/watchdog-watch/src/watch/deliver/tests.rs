//! Delivery with fixtures: a real request file in a temp directory (a full tmpfs for the
//! failed write), real processes that catch the signal or do not, an engine fed scripted
//! samples, and an [`Outlet`] that keeps what it is given.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use watchdog_alerter::request::{Ack, AckWatcher, RequestPlace, write_ack_at};
use watchdog_engine::{Action, AlertPlan, Engine, EngineSettings};
use watchdog_procfs::ProcRoot;
use watchdog_sampler::tree::ProcessTree;
use watchdog_types::request::SentRequest;
use watchdog_types::{AlertReason, EventBody, Resource, ResourceId, ResourceKind, Sample};

use super::{Courier, Outlet, acknowledgment, deliver, perform};

/// A target that catches SIGUSR1 (each signal adds its PID to `$F`) and has a child,
/// `sleep`, that does not; prints the child's PID (the trap is set by then).
const CATCHER: &str = r#"trap 'echo $$ >> "$F"' USR1; sleep 600 & echo $!; while :; do wait; done"#;

/// A target that catches nothing and starts a catcher (the script in `$C`) only when told
/// to, on its standard input.
const LATE_CATCHER: &str = r#"read go; sh -c "$C" & wait"#;

/// A run of `sh -c SCRIPT` in its own process group, killed with its group when dropped.
struct Run {
    child: Child,
    pid: u32,
    /// `$F`: one line per signal a catcher heard, its PID.
    heard: PathBuf,
    out: BufReader<ChildStdout>,
    stdin: Option<ChildStdin>,
}

impl Run {
    fn start(dir: &Path, script: &str) -> Run {
        let heard = dir.join("heard");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("F", &heard)
            .env("C", CATCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take();
        Run {
            pid: child.id(),
            child,
            heard,
            out,
            stdin,
        }
    }

    /// The PID of the `sleep` the run prints, once it runs `sleep` (a shell's child runs
    /// the shell's handlers until its `exec`).
    fn sleeper(&mut self) -> u32 {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let pid = line
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let until = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n"
        {
            assert!(Instant::now() < until, "PID {pid} never ran sleep");
            std::thread::sleep(Duration::from_millis(5));
        }
        pid
    }

    fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The PIDs that heard a signal so far.
    fn heard(&self) -> Vec<u32> {
        std::fs::read_to_string(&self.heard)
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }

    /// Waits (at most 10 s) until `n` signals were heard; returns who heard them.
    fn wait_heard(&self, n: usize) -> Vec<u32> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let heard = self.heard();
            if heard.len() >= n || Instant::now() > until {
                return heard;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the group is the run's own.
        unsafe { libc::kill(-(self.pid as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Whether `pid` runs (not gone, not a zombie).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Keeps what a delivery hands on.
#[derive(Default)]
struct Kept {
    events: Vec<EventBody>,
    flushes: Vec<&'static str>,
    hooks: Vec<Vec<(String, String)>>,
    notes: Vec<(String, String)>,
}

impl Outlet for Kept {
    fn emit(&mut self, body: EventBody) {
        self.events.push(body);
    }
    fn flush_recording(&mut self, why: &'static str) {
        self.flushes.push(why);
    }
    fn run_hook(&mut self, env: Vec<(String, String)>) {
        self.hooks.push(env);
    }
    fn notify(&mut self, title: String, body: String) {
        self.notes.push((title, body));
    }
}

impl Kept {
    fn alerts(&self) -> Vec<&EventBody> {
        self.events
            .iter()
            .filter(|e| matches!(e, EventBody::Alert { .. }))
            .collect()
    }
}

fn env<'a>(env: &'a [(String, String)], key: &str) -> &'a str {
    env.iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// An engine over `tree_memory` (0) and `disk:/data` (1), with a hook.
fn engine(dry_run: bool) -> Engine {
    let resource = |id, kind, name: &str| Resource {
        id: ResourceId(id),
        kind,
        name: name.to_string(),
        source: "test".to_string(),
    };
    Engine::new(
        &[
            resource(0, ResourceKind::TreeMemory, "tree_memory"),
            resource(1, ResourceKind::DiskBytes, "disk:/data"),
        ],
        EngineSettings {
            signal: libc::SIGUSR1,
            dry_run,
            hook: true,
            ..EngineSettings::default()
        },
    )
}

/// The plan of resource `id` at 99% of its limit (under the headroom floor).
fn plan(e: &mut Engine, id: u16) -> AlertPlan {
    let mut out = Vec::new();
    let s = Sample {
        resource: ResourceId(id),
        t_ns: u64::from(id) * 1_000_000_000,
        used: 990,
        limit: 1000,
    };
    e.observe(&s, &mut out);
    e.decide().unwrap()
}

/// What a delivery is given, for the run's target.
struct Fixture {
    place: RequestPlace,
    proc: ProcRoot,
    tree: ProcessTree,
    target: watchdog_alerter::pidfd::PidFd,
}

impl Fixture {
    fn new(request_file: PathBuf, target: u32) -> Fixture {
        Fixture {
            place: RequestPlace::Path(request_file),
            proc: ProcRoot::default(),
            tree: ProcessTree::new(&ProcRoot::default(), target).unwrap(),
            target: watchdog_alerter::pidfd::PidFd::open(target).unwrap(),
        }
    }

    fn courier(&mut self, dry_run: bool) -> Courier<'_> {
        Courier {
            place: &self.place,
            tree: &mut self.tree,
            target: &self.target,
            proc: &self.proc,
            signal: libc::SIGUSR1,
            dry_run,
        }
    }
}

/// Delivers `plan` and performs what follows into `kept`; the request as sent.
fn carry_out(
    plan: AlertPlan,
    e: &mut Engine,
    courier: Courier<'_>,
    kept: &mut Kept,
) -> SentRequest {
    let done = deliver(plan, e, courier, SystemTime::now());
    perform(
        done.actions,
        Some((&done.request, done.written.as_deref())),
        kept,
    );
    done.request
}

#[test]
fn the_request_is_written_then_only_the_processes_that_catch_the_signal_are_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), CATCHER);
    let sleeper = run.sleeper();
    let path = dir.path().join("req.json");
    let mut fx = Fixture::new(path.clone(), run.pid);
    let mut e = engine(false);
    let mut kept = Kept::default();

    let sent = carry_out(plan(&mut e, 0), &mut e, fx.courier(false), &mut kept);

    // The file is the request, typed fields and all: its serialization, byte for byte.
    let bytes = std::fs::read(&path).unwrap();
    let mut want = serde_json::to_vec_pretty(&sent).unwrap();
    want.push(b'\n');
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&want)
    );
    let file: SentRequest = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(file.request, sent.request);
    assert_eq!(file.request.seq, 1);
    assert_eq!(file.request.resource, "tree_memory");
    assert_eq!(file.request.kind, ResourceKind::TreeMemory);
    assert_eq!(file.request.reason, AlertReason::HeadroomFloor);
    assert_eq!(file.sent.pid, run.pid);
    assert_eq!(file.sent.signal, "SIGUSR1");
    assert_eq!(file.sent.watchdog_pid, std::process::id());
    // The catcher heard it; its child that does not catch it was looked at and spared.
    assert_eq!(run.wait_heard(1), vec![run.pid]);
    assert!(fx.tree.pids().contains(&sleeper), "{:?}", fx.tree.pids());
    assert!(
        runs(sleeper),
        "the sleep that does not catch SIGUSR1 was sent it"
    );
    // What follows: the alert event of what was done, the hook told of the file, one
    // notification, the recording flushed.
    let alerts = kept.alerts();
    assert_eq!(alerts.len(), 1, "{:?}", kept.events);
    let EventBody::Alert {
        resource,
        reason,
        signalled,
        signal,
        request_file,
        dry_run,
        ..
    } = alerts[0]
    else {
        unreachable!()
    };
    assert_eq!(resource, "tree_memory");
    assert_eq!(*reason, AlertReason::HeadroomFloor);
    assert_eq!(signalled, &vec![run.pid]);
    assert_eq!(signal.as_deref(), Some("SIGUSR1"));
    assert_eq!(request_file.as_deref(), Some(path.to_str().unwrap()));
    assert!(!dry_run);
    assert_eq!(kept.hooks.len(), 1);
    let hook = &kept.hooks[0];
    assert_eq!(env(hook, "WATCHDOG_REQUEST_FILE"), path.to_str().unwrap());
    assert_eq!(env(hook, "WATCHDOG_SEQ"), "1");
    assert_eq!(env(hook, "WATCHDOG_KIND"), "tree_memory");
    assert_eq!(env(hook, "WATCHDOG_UNIT"), "bytes");
    assert_eq!(env(hook, "WATCHDOG_TARGET_PID"), run.pid.to_string());
    assert_eq!(kept.notes.len(), 1);
    assert_eq!(kept.flushes, vec!["alert"]);
}

/// The latest change before this module: a request that cannot be written must not leave
/// the earlier one beside the signal (the client would take the signal for that request's,
/// acknowledged already); the signal still goes.
#[test]
fn a_request_that_cannot_be_written_removes_the_earlier_one_and_the_signal_still_goes() {
    use watchdog_testsupport::{is_root, require};
    if !require(is_root(), "root (to mount a small tmpfs and fill it)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&dir.path().join("fs"), "64k");
    let mut run = Run::start(dir.path(), CATCHER);
    let _sleeper = run.sleeper();
    let path = fs.0.join("req.json");
    let mut fx = Fixture::new(path.clone(), run.pid);
    let mut e = engine(false);
    let mut kept = Kept::default();

    carry_out(plan(&mut e, 0), &mut e, fx.courier(false), &mut kept);
    assert!(path.exists());
    assert_eq!(run.wait_heard(1).len(), 1);

    fs.fill();
    let sent = carry_out(plan(&mut e, 1), &mut e, fx.courier(false), &mut kept);
    assert_eq!(sent.request.seq, 2);
    assert!(
        !path.exists(),
        "the earlier request was left beside the signal"
    );
    assert_eq!(
        run.wait_heard(2),
        vec![run.pid, run.pid],
        "the signal did not go"
    );
    let names: Vec<_> = std::fs::read_dir(&fs.0)
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["filler".to_string()], "temp files left behind");
    let alerts = kept.alerts();
    assert!(
        matches!(
            alerts[1],
            EventBody::Alert { request_file: None, signalled, .. } if signalled == &vec![run.pid]
        ),
        "{:?}",
        alerts[1]
    );
    // The hook is told no file was written.
    assert_eq!(env(&kept.hooks[1], "WATCHDOG_REQUEST_FILE"), "");
}

#[test]
fn a_dry_run_writes_and_signals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), CATCHER);
    let sleeper = run.sleeper();
    let path = dir.path().join("req.json");
    let mut fx = Fixture::new(path.clone(), run.pid);
    let mut e = engine(true);
    let mut kept = Kept::default();

    let sent = carry_out(plan(&mut e, 0), &mut e, fx.courier(true), &mut kept);

    assert_eq!(sent.request.seq, 1);
    assert!(!path.exists());
    let alerts = kept.alerts();
    assert!(
        matches!(
            alerts[..],
            [EventBody::Alert {
                dry_run: true,
                request_file: None,
                signal: None,
                signalled,
                ..
            }] if signalled.is_empty()
        ),
        "{alerts:?}"
    );
    assert!(kept.hooks.is_empty(), "a dry run ran the hook");
    assert_eq!(kept.flushes, vec!["alert"]);
    // A signal sent would have been heard by now in all likelihood; none may be.
    std::thread::sleep(Duration::from_millis(200));
    assert!(run.heard().is_empty(), "{:?}", run.heard());
    assert!(runs(sleeper));
}

/// The tree may be refreshed less often than every tick: a process that joined the run
/// since the last refresh is still signalled.
#[test]
fn the_tree_is_looked_at_again_before_the_request_and_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), LATE_CATCHER);
    let path = dir.path().join("req.json");
    // The tree as the watch last saw it: the target alone.
    let mut fx = Fixture::new(path.clone(), run.pid);
    run.tell("go\n");
    let sleeper = run.sleeper();
    let catcher = std::fs::read_to_string(format!("/proc/{sleeper}/stat"))
        .unwrap()
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
        .unwrap();
    assert!(!fx.tree.pids().contains(&catcher));
    let mut e = engine(false);
    let mut kept = Kept::default();

    carry_out(plan(&mut e, 0), &mut e, fx.courier(false), &mut kept);

    assert_eq!(run.wait_heard(1), vec![catcher]);
    assert!(path.exists());
    assert!(
        matches!(kept.alerts()[..], [EventBody::Alert { signalled, .. }] if signalled == &vec![catcher]),
        "{:?}",
        kept.events
    );
}

#[test]
fn an_acknowledgment_reaches_the_engine_once_and_only_after_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let place = RequestPlace::Path(dir.path().join("req.json"));
    let mut ack = AckWatcher::at(&place);
    let mut e = engine(true);
    let write = |seq, time_unix| {
        write_ack_at(
            &place,
            &Ack {
                seq,
                time_unix,
                ..Ack::default()
            },
        )
        .unwrap()
    };
    // An ack before any request (a client's leftover) is not taken.
    write(0, 1.0);
    assert!(acknowledgment(&mut ack, &mut e).is_empty());

    let p = plan(&mut e, 0);
    let _ = e.alerted(p, &watchdog_engine::Delivery::default(), 10.0);
    write(1, 12.0);
    let actions = acknowledgment(&mut ack, &mut e);
    let acks: Vec<_> = actions
        .iter()
        .filter(|a| matches!(a, Action::Emit(EventBody::Ack { .. })))
        .collect();
    assert!(
        matches!(
            acks[..],
            [Action::Emit(EventBody::Ack { seq: Some(1), checkpoint_s: Some(s), .. })] if (s - 2.0).abs() < 1e-9
        ),
        "{actions:?}"
    );
    assert!(acknowledgment(&mut ack, &mut e).is_empty(), "taken twice");
}

/// A tmpfs of `size` mounted at a directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mount tmpfs at {}: {status}",
            at.display()
        );
        Tmpfs(at.to_path_buf())
    }

    /// Writes `filler` until the filesystem is full.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let page = [0u8; 4096];
        while f.write_all(&page).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
