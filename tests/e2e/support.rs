//! Helpers for the end-to-end tests: the binary, scratch directories, a memory cgroup
//! and a tmpfs that clean up after themselves, and readers for the files the watchdog
//! and the test processes write.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
pub use watchdog_testsupport::{Chromium, RunnableCopy, is_root, need, require};

/// The watchdog binary under test.
pub fn bin() -> Command {
    command(Path::new(env!("CARGO_BIN_EXE_watchdog")))
}

/// `program` with the environment every end-to-end run gets.
fn command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    // Default request files land in the working directory: not the repo. Default
    // recordings go to the state directory: a shared scratch one, not the tester's.
    cmd.current_dir(std::env::temp_dir())
        .env("XDG_STATE_HOME", std::env::temp_dir().join("wd-e2e-state"))
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("WATCHDOG_LOG")
        // No cloud's notice is asked unless a test says so, whatever machine runs them.
        .env(
            "WATCHDOG_DMI_ROOT",
            repo().join("crates/watchdog-notice/tests/fixtures/dmi/none"),
        );
    cmd
}

/// Runs the watchdog with `args` to completion.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run watchdog")
}

/// Fails the test unless `out` exited 0, showing `what` ran and its stderr.
#[track_caller]
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// When process `pid` started, on the wall clock: its start in `/proc/PID/stat` (clock
/// ticks since boot; USER_HZ is 100 on Linux x86_64) against `/proc/uptime` read beside
/// the clock. Good to about 20 ms, and independent of when anyone noticed the start.
pub fn started_at(pid: u64) -> jiff::Timestamp {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let after_comm = &stat[stat.rfind(')').expect("a comm in stat") + 2..];
    // The fields after the comm start at field 3 (state); starttime is field 22.
    let ticks: f64 = after_comm.split(' ').nth(19).unwrap().parse().unwrap();
    let now = jiff::Timestamp::now();
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    now - jiff::SignedDuration::from_secs_f64(uptime - ticks / 100.0)
}

/// A named pipe a test process waits on (`read _ < PATH` in sh) until the test
/// [`release`](Gate::release)s it: the test, not a sleep, decides when the process goes on.
pub struct Gate {
    path: PathBuf,
}

impl Gate {
    /// Makes the pipe `dir/name`.
    pub fn new(dir: &Path, name: &str) -> Gate {
        let path = dir.join(name);
        let out = Command::new("mkfifo")
            .arg(&path)
            .output()
            .expect("run mkfifo");
        assert_success(&out, "mkfifo");
        Gate { path }
    }

    /// The pipe's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one line once the waiting process has the pipe open (within 20 s).
    pub fn release(&self) {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut writer = None;
        let opened = wait_for(Duration::from_secs(20), || {
            // Non-blocking: ENXIO until a reader has it open, so a reader that never comes
            // fails the test instead of hanging it.
            writer = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path)
                .ok();
            writer.is_some()
        });
        assert!(
            opened,
            "nobody opened {} to wait on it",
            self.path.display()
        );
        if let Some(mut w) = writer {
            w.write_all(b"go\n").expect("write to the gate");
        }
    }
}

/// The repo root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test process script.
pub fn hog() -> String {
    repo()
        .join("tests/e2e/scripts/hog.py")
        .display()
        .to_string()
}

/// A scratch directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wd-e2e-")
        .tempdir()
        .expect("tempdir")
}

/// One watched run's scratch directory and the files the watchdog and hog.py write there.
pub struct Scene {
    pub dir: tempfile::TempDir,
    pub events: PathBuf,
    pub req: PathBuf,
    pub rep: PathBuf,
}

impl Scene {
    pub fn new() -> Scene {
        let dir = scratch();
        Scene {
            events: dir.path().join("events.jsonl"),
            req: dir.path().join("req.json"),
            rep: dir.path().join("report.json"),
            dir,
        }
    }

    /// Runs `watchdog FLAGS run -- python3 hog.py REPORT HOG_ARGS` to completion.
    pub fn run_hog(&self, flags: &[&str], hog_args: &[&str]) -> Output {
        self.watchdog()
            .args(flags)
            .args(["run", "--", "python3"])
            .arg(hog())
            .arg(&self.rep)
            .args(hog_args)
            .output()
            .expect("run watchdog")
    }

    /// The watchdog with the common flags: fast sampling, no GPU, this scene's files.
    pub fn watchdog(&self) -> Command {
        let mut cmd = bin();
        cmd.args(["--gpu", "off", "--interval", "20ms", "--events"])
            .arg(&self.events)
            .arg("--request-file")
            .arg(&self.req);
        cmd
    }
}

/// The recording path the closing summary names (`Recording: PATH.`).
pub fn summary_recording(stderr: &str) -> PathBuf {
    let at = stderr
        .rfind("Recording: ")
        .unwrap_or_else(|| panic!("no recording in the summary: {stderr}"));
    let rest = &stderr[at + "Recording: ".len()..];
    let end = rest
        .find(".\n")
        .or_else(|| rest.rfind('.'))
        .unwrap_or(rest.len());
    PathBuf::from(&rest[..end])
}

/// The "K late" of the closing summary line that contains `line_with` in `text`.
pub fn summary_late_ticks(text: &str, line_with: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(line_with))
        .unwrap_or_else(|| panic!("no summary with {line_with:?} in {text}"));
    line.split_once(" late, ")
        .and_then(|(before, _)| before.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no late count in the summary {line:?}"))
}

/// Reads a JSON-lines events file.
pub fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l:?}: {e}")))
        .collect()
}

/// The events of one kind.
pub fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// Reads a hog.py report.
pub fn report(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("no report at {}: {e}", path.display())),
    )
    .expect("report json")
}

/// The report's events of one kind.
pub fn report_events<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["events"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["kind"] == kind).collect())
        .unwrap_or_default()
}

/// Waits up to 30 s for the `start` event in the events file `events`, and fails the test
/// without it. A `--pid` watch writes it after installing its signal handlers and taking
/// hold of the target, so a signal sent from then on is the watchdog's to handle however
/// slowly a loaded machine started it (no sleep guesses when that is).
#[track_caller]
pub fn wait_for_start(events: &Path) {
    let started =
        || std::fs::read_to_string(events).is_ok_and(|t| t.contains("\"event\":\"start\""));
    assert!(
        wait_for(Duration::from_secs(30), started),
        "the watch never started: no start event in {}",
        events.display()
    );
}

/// Waits until `f` holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A child started in a process group of its own (`Command::process_group(0)`), and
/// everything it started there: killed whole when dropped, waiting until none is left. A
/// SIGKILLed watchdog leaves its run running, as it must for a user; a test must not.
pub struct Group(pub Child);

impl std::ops::Deref for Group {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Group {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SAFETY: kill has no memory preconditions; the group is the child's own.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.0.wait();
        wait_for(Duration::from_secs(10), || {
            // SAFETY: as above; signal 0 only checks that a member exists.
            unsafe { libc::kill(-pgid, 0) != 0 }
        });
    }
}

/// A memory cgroup with a limit, removed on drop (v1 or v2, whichever is mounted).
pub struct MemoryCgroup {
    pub dir: PathBuf,
    /// Whether it is a cgroup v2 group (else v1).
    pub v2: bool,
}

impl MemoryCgroup {
    /// Creates a fresh memory cgroup with `limit` bytes, or None when impossible here.
    pub fn create(limit: u64) -> Option<MemoryCgroup> {
        let name = format!("wd-e2e-{}-{}", std::process::id(), rand_suffix());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), false)
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (Path::new("/sys/fs/cgroup").join(&name), true)
        } else {
            return None;
        };
        std::fs::create_dir(&dir).ok()?;
        let cg = MemoryCgroup { dir, v2 };
        let ok = if v2 {
            std::fs::write(cg.dir.join("memory.max"), limit.to_string()).is_ok()
                && std::fs::write(cg.dir.join("memory.swap.max"), "0").is_ok()
        } else {
            std::fs::write(cg.dir.join("memory.limit_in_bytes"), limit.to_string()).is_ok()
                // Without swap accounting this file is absent; the limit then still holds RAM.
                && (std::fs::write(cg.dir.join("memory.memsw.limit_in_bytes"), limit.to_string())
                    .is_ok()
                    || !cg.dir.join("memory.memsw.limit_in_bytes").exists())
        };
        ok.then_some(cg)
    }

    /// The file a process's PID is written to, to move it in.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Which cgroup version, for messages.
    pub fn version(&self) -> &'static str {
        if self.v2 { "v2" } else { "v1" }
    }

    /// Waits up to 10 s until process `pid` is in this cgroup (its `/proc/PID/cgroup` names
    /// it), and fails the test if it never gets there.
    pub fn wait_holds(&self, pid: u32) {
        let name = self.dir.file_name().unwrap().to_str().unwrap();
        assert!(
            wait_for(Duration::from_secs(20), || {
                std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|c| c.contains(name))
            }),
            "PID {pid} never entered {}",
            self.dir.display()
        );
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A tmpfs of a given size mounted on a scratch directory, unmounted on drop.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. "64m"), or None when mounting is impossible here.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = scratch();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// Headless Chromium's DOM of `page` (a file path), or None when Chromium is missing
/// (see [`require`]).
pub fn chromium_dom(page: &Path) -> Option<String> {
    Chromium::find().map(|chromium| chromium.dom(page))
}

/// The watchdog binary copied where user `nobody` can reach it (the build directory may
/// sit in a private home or a `mktemp -d`), and a command that runs that copy as `nobody`
/// with [`bin`]'s environment. Keep the copy until the command has finished.
pub fn bin_as_nobody() -> (RunnableCopy, Command) {
    use std::os::unix::process::CommandExt as _;
    let copy = RunnableCopy::of(Path::new(env!("CARGO_BIN_EXE_watchdog")));
    let mut cmd = command(copy.path());
    cmd.uid(65534).gid(65534);
    (copy, cmd)
}
