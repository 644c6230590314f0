//! `watchdog daemon` for real, as root: two users made with `useradd`, their runs found
//! by the rules and only those, each warned with its own rule's settings, each user's hook
//! run as that user, `watchdog status` showing each user only their runs, a run that
//! registers through the Python client watched and its slow checkpoint raising its lead,
//! reload with a bad and a good config, SIGTERM leaving every run running, and what the
//! daemon tells systemd, on a notification socket the test owns; its ready line, and a real
//! Prometheus scraping the runs it found at its `--metrics` address.

use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use watchdog_testsupport::{prometheus, public_scratch};

use crate::support::{
    Gate, RunnableCopy, Tmpfs, assert_success, bin, is_root, require, summary_late_ticks, wait_for,
};

/// A user that exists until dropped.
pub(crate) struct TempUser {
    pub(crate) name: String,
    pub(crate) uid: u32,
}

impl TempUser {
    pub(crate) fn create(tag: &str) -> TempUser {
        let name = format!("wdd_{tag}_{:x}", std::process::id());
        let out = Command::new("useradd")
            .args(["--no-create-home", "--user-group", "--shell", "/bin/sh"])
            .args(["--home-dir", "/nonexistent"])
            .arg(&name)
            .output()
            .expect("run useradd");
        assert_success(&out, &format!("useradd {name}"));
        let id = Command::new("id").arg("-u").arg(&name).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        TempUser { name, uid }
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

/// A process that is killed when dropped.
pub(crate) struct Run(pub(crate) Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sleep SECONDS` as `user` (the number makes its command line unique to this test).
fn sleep_as(user: &TempUser, seconds: &str) -> Run {
    Run(Command::new("/bin/sleep")
        .arg(seconds)
        .current_dir("/")
        .uid(user.uid)
        .gid(user.uid)
        .spawn()
        .expect("spawn sleep"))
}

/// The daemon's own keys for a test in `dir`: 10 Hz, a scan every 200 ms, and everything it
/// writes under `dir` (the socket at `dir/run/daemon.sock`, where [`start_daemon`] waits).
fn daemon_keys(dir: &Path) -> String {
    format!(
        r#"interval = "100ms"
scan_interval = "200ms"
socket = "{dir}/run/daemon.sock"
request_dir = "{dir}/run/users"
state_dir = "{dir}/state"
"#,
        dir = dir.display()
    )
}

/// Writes `dir/daemon.toml`: the daemon's keys for a test in `dir` ([`daemon_keys`]), then
/// `rest` (more keys, then the rules); returns its path.
pub(crate) fn write_config(dir: &Path, rest: &str) -> PathBuf {
    let conf = dir.join("daemon.toml");
    std::fs::write(&conf, format!("{}{rest}", daemon_keys(dir))).unwrap();
    conf
}

fn config(dir: &Path, disk: &Path, a: &TempUser, b: &TempUser, extra_rule: &str) -> String {
    let hook = "id -u > \"$WATCHDOG_REQUEST_FILE.hook\"";
    format!(
        r#"{keys}
[[rule]]
name = "alice"
[rule.match]
user = "{a}"
command = "^/bin/sleep 7301$"
[rule.watch]
max_runtime = "4s"
lead = "2s"
disks = ["{disk}"]
on_alert = '{hook}'
notify = false

[[rule]]
name = "bob"
[rule.match]
user = "{b}"
command = "^/bin/sleep 7302$"
[rule.watch]
max_runtime = "5s"
lead = "2s"
disks = ["{disk}"]
on_alert = '{hook}'
notify = false

[[rule]]
name = "registered"
[rule.match]
registered = true
[rule.watch]
max_runtime = "6s"
lead = "2s"
disks = ["{disk}"]
notify = false
{extra_rule}"#,
        keys = daemon_keys(dir),
        disk = disk.display(),
        a = a.name,
        b = b.name,
    )
}

/// `watchdog status --json` through `program`, as `uid`.
fn status_as(program: &Path, socket: &Path, uid: u32) -> Value {
    let out = Command::new(program)
        .args(["status", "--json", "--socket"])
        .arg(socket)
        .uid(uid)
        .gid(uid)
        .output()
        .expect("run watchdog status");
    assert_success(&out, &format!("watchdog status as uid {uid}"));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

fn target_pids(status: &Value) -> Vec<u64> {
    let mut pids: Vec<u64> = status["targets"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["pid"].as_u64()).collect())
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn the_daemon_watches_each_users_runs_with_their_rules_and_shows_each_user_only_theirs() {
    if !require(
        is_root(),
        "root (useradd, runs of two users, a root daemon)",
    ) {
        return;
    }
    let dir = public_scratch("wd-daemon-");
    let a = TempUser::create("a");
    let b = TempUser::create("b");
    let conf = dir.path().join("daemon.toml");
    // The runs' disk: a tmpfs of the test's, not the machine's root filesystem (its
    // working directory), which a nearly full CI disk would have warned first.
    let disk = Tmpfs::mount("16m").expect("mount a tmpfs as root");
    std::fs::write(&conf, config(dir.path(), disk.path(), &a, &b, "")).unwrap();
    let socket = dir.path().join("run/daemon.sock");
    let log = dir.path().join("daemon.log");
    let notify = NotifySocket::bind(&dir.path().join("notify.sock"));
    let mut daemon = start_daemon(
        &conf,
        &log,
        &[
            ("NOTIFY_SOCKET", dir.path().join("notify.sock").as_os_str()),
            ("WATCHDOG_USEC", "1000000".as_ref()),
        ],
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // systemd hears READY=1 with the count, then keep-alives at half of WATCHDOG_USEC.
    assert!(
        notify.wait(Duration::from_secs(10), |m| m
            == "READY=1\nSTATUS=watching 0 runs"),
        "no READY=1: {:?}",
        notify.messages()
    );
    assert!(
        notify.wait(Duration::from_secs(10), |m| m == "WATCHDOG=1"),
        "no WATCHDOG=1: {:?}",
        notify.messages()
    );

    // Two matching runs and one of user a that no rule takes.
    let run_a = sleep_as(&a, "7301");
    let run_b = sleep_as(&b, "7302");
    let other = sleep_as(&a, "7303");
    let (pid_a, pid_b) = (run_a.0.id(), run_b.0.id());
    let copy = RunnableCopy::of(Path::new(env!("CARGO_BIN_EXE_watchdog")));
    // Found within a second of their start (scan every 200 ms; generous on a busy machine).
    let found = wait_for(Duration::from_secs(5), || {
        target_pids(&status_as(copy.path(), &socket, 0)) == {
            let mut v = vec![u64::from(pid_a), u64::from(pid_b)];
            v.sort_unstable();
            v
        }
    });
    assert!(
        found,
        "root's status never showed exactly the two runs: {}\n{}",
        status_as(copy.path(), &socket, 0),
        log_text()
    );
    assert_eq!(
        target_pids(&status_as(copy.path(), &socket, a.uid)),
        vec![u64::from(pid_a)],
        "user a must see only their run"
    );
    assert_eq!(
        target_pids(&status_as(copy.path(), &socket, b.uid)),
        vec![u64::from(pid_b)],
        "user b must see only their run"
    );
    let root_view = status_as(copy.path(), &socket, 0);
    for t in root_view["targets"].as_array().unwrap() {
        let want = if t["pid"] == u64::from(pid_a) {
            "alice"
        } else {
            "bob"
        };
        assert_eq!(t["rule"], want, "{t}");
    }

    assert!(
        notify.wait(Duration::from_secs(10), |m| m == "STATUS=watching 2 runs"),
        "STATUS never said 2 runs: {:?}",
        notify.messages()
    );

    // A run that registers through the client, as user a: watched by the "registered"
    // rule; its request comes 2 s before its 6 s runtime, it saves for 3 s, and the
    // acknowledgment raises its lead.
    let package = public_client(dir.path());
    let registered = registering_run(&a, &package, &socket, 3.0);
    let reg_pid = registered.0.id();
    assert!(
        wait_for(Duration::from_secs(10), || target_pids(&status_as(
            copy.path(),
            &socket,
            a.uid
        ))
        .contains(&u64::from(reg_pid))),
        "the registered run was not watched: {}",
        log_text()
    );
    let lead_of = |pid: u32| -> Option<f64> {
        status_as(copy.path(), &socket, a.uid)["targets"]
            .as_array()?
            .iter()
            .find(|t| t["pid"] == u64::from(pid))
            .and_then(|t| t["lead_s"].as_f64())
    };
    assert_eq!(lead_of(reg_pid), Some(2.0));

    // Each run is warned by its own rule: runtime 4 s (a) and 5 s (b) with a 2 s lead.
    let request = |user: &TempUser, pid: u32| -> PathBuf {
        dir.path()
            .join(format!("run/users/{}/{pid}.request.json", user.uid))
    };
    for (user, pid) in [(&a, pid_a), (&b, pid_b)] {
        let req = request(user, pid);
        assert!(
            wait_for(Duration::from_secs(15), || req.exists()),
            "no request for PID {pid}: {}",
            log_text()
        );
        let meta = std::fs::metadata(&req).unwrap();
        assert_eq!(meta.uid(), user.uid, "the request file belongs to its user");
        let body: Value = serde_json::from_str(&std::fs::read_to_string(&req).unwrap()).unwrap();
        assert_eq!(body["resource"], "runtime", "{body}");
        assert_eq!(body["pid"], pid, "{body}");
        let hook = PathBuf::from(format!("{}.hook", req.display()));
        assert!(
            wait_for(Duration::from_secs(10), || std::fs::read_to_string(&hook)
                .is_ok_and(|s| s.trim() == user.uid.to_string())),
            "the hook of PID {pid} did not run as uid {}: {:?}\n{}",
            user.uid,
            std::fs::read_to_string(&hook),
            log_text()
        );
    }
    assert!(
        !dir.path()
            .join(format!("run/users/{}/{}.request.json", a.uid, other.0.id()))
            .exists(),
        "a process no rule takes was warned"
    );
    let ack = request(&a, reg_pid).with_extension("json.ack");
    assert!(
        wait_for(Duration::from_secs(20), || ack.exists()),
        "the registered run never acknowledged: {}",
        log_text()
    );
    assert!(
        wait_for(Duration::from_secs(10), || lead_of(reg_pid)
            .is_some_and(|l| l >= 3.0)),
        "a 3 s checkpoint did not raise the 2 s lead: {:?}\n{}",
        lead_of(reg_pid),
        log_text()
    );
    assert!(log_text().contains("lead raised"), "{}", log_text());

    // Reload: a bad config is refused and the old one kept; a good one is taken.
    std::fs::write(&conf, "interval = \"fast\"\n").unwrap();
    let daemon_pid = daemon.0.id() as i32;
    send_signal(daemon_pid, libc::SIGHUP);
    assert!(
        wait_for(Duration::from_secs(10), || log_text()
            .contains("reload refused")),
        "a bad config was not refused: {}",
        log_text()
    );
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the daemon died on a bad reload"
    );
    std::fs::write(
        &conf,
        config(
            dir.path(),
            disk.path(),
            &a,
            &b,
            "\n[[rule]]\nname = \"late\"\n[rule.match]\ncommand = \"^/bin/sleep 7304$\"\n",
        ),
    )
    .unwrap();
    send_signal(daemon_pid, libc::SIGHUP);
    assert!(
        wait_for(Duration::from_secs(10), || log_text()
            .contains("config reloaded")),
        "a good config was not taken: {}",
        log_text()
    );
    // Each reload is RELOADING=1 (with the clock systemd asks for), then READY=1.
    let reloads = notify
        .messages()
        .iter()
        .filter(|m| m.starts_with("RELOADING=1\nMONOTONIC_USEC="))
        .count();
    assert_eq!(reloads, 2, "{:?}", notify.messages());
    let late = sleep_as(&b, "7304");
    assert!(
        wait_for(Duration::from_secs(5), || target_pids(&status_as(
            copy.path(),
            &socket,
            0
        ))
        .contains(&u64::from(late.0.id()))),
        "the reloaded rule found nothing: {}",
        log_text()
    );

    // SIGTERM: exit 0, every run still running.
    send_signal(daemon_pid, libc::SIGTERM);
    let mut status = None;
    wait_for(Duration::from_secs(15), || {
        status = daemon.0.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap_or_else(|| {
        let _ = daemon.0.kill();
        panic!("the daemon did not stop on SIGTERM: {}", log_text())
    });
    assert!(status.success(), "daemon exit {status}: {}", log_text());
    let told = notify.messages();
    assert_eq!(
        told.last().map(String::as_str),
        Some("STOPPING=1"),
        "{told:?}"
    );
    for pid in [pid_a, pid_b, reg_pid, late.0.id(), other.0.id()] {
        assert!(alive(pid), "PID {pid} did not survive the daemon's stop");
    }
    assert!(!socket.exists(), "the socket was left behind");
}

/// A Python run of `user` that registers with the daemon through the client's `install()`,
/// waits for its checkpoint request, takes `save_s` to "save", acknowledges and goes on.
fn registering_run(user: &TempUser, package: &Path, socket: &Path, save_s: f64) -> Run {
    let script = format!(
        "import sys, time\n\
         sys.path.insert(0, {package:?})\n\
         import training_watchdog as tw\n\
         tw.install()\n\
         while not tw.checkpoint_requested(): time.sleep(0.05)\n\
         time.sleep({save_s})\n\
         tw.acknowledge()\n\
         time.sleep(60)\n",
        package = package.display().to_string(),
    );
    Run(Command::new("python3")
        .arg("-c")
        .arg(script)
        .env_remove("WATCHDOG_REQUEST_FILE")
        .env("WATCHDOG_SOCKET", socket)
        .current_dir("/")
        .uid(user.uid)
        .gid(user.uid)
        .spawn()
        .expect("spawn python3"))
}

/// Copies the Python client into `dir` (the checkout may be private to root).
pub(crate) fn public_client(dir: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/training_watchdog");
    let to = dir.join("py/training_watchdog");
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    dir.join("py")
}

/// The notification socket the daemon is told of, read at once by a thread of its own as
/// systemd would (a full queue would make the daemon drop messages).
struct NotifySocket {
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl NotifySocket {
    fn bind(path: &Path) -> NotifySocket {
        let socket = UnixDatagram::bind(path).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&seen);
        // Ends with the test process.
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().unwrap().push(text);
            }
        });
        NotifySocket { seen }
    }

    /// Every message received so far, oldest first.
    fn messages(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Whether a message came that `pred` accepts, within `limit`.
    fn wait(&self, limit: Duration, pred: impl Fn(&str) -> bool) -> bool {
        wait_for(limit, || self.messages().iter().any(|m| pred(m)))
    }
}

/// Starts `watchdog daemon --config conf` with `env` (and no systemd variables of the
/// test's own), its log in `log`; returns once it has bound the socket `conf` names as
/// `<dir of conf>/run/daemon.sock`. Killed when dropped, so a failing test leaves no daemon.
pub(crate) fn start_daemon(conf: &Path, log: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Run {
    let daemon = Run(bin()
        .arg("daemon")
        .arg("--config")
        .arg(conf)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .expect("start the daemon"));
    let socket = conf.with_file_name("run/daemon.sock");
    assert!(
        wait_for(Duration::from_secs(20), || socket.exists()),
        "the daemon never bound its socket: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    daemon
}

/// Waits, 20 s at most, for the daemon's log at `log` to say `rule` took `pid`.
fn wait_for_match(log: &Path, rule: &str, pid: u32) {
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    let line = format!("rule \"{rule}\" matched PID {pid}");
    assert!(
        wait_for(Duration::from_secs(20), || text().contains(&line)),
        "no {line:?} in the log: {}",
        text()
    );
}

/// Sends `sig` to `pid` (a process this test started).
fn send_signal(pid: i32, sig: i32) {
    let out = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(out.success(), "kill -{sig} {pid}");
}

/// A rule with `gpu = true` takes a process once it holds GPU memory, though it held none
/// when it started (CUDA allocates seconds in), and never one that holds none: through the
/// real NVML code, against the fake library.
#[test]
fn a_gpu_rule_takes_a_process_once_it_holds_gpu_memory_and_only_it() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = public_scratch("wd-daemon-gpu-");
    let lib = crate::gpu::build_fake(dir.path());
    let pidfile = dir.path().join("holder.pid");
    let script = dir.path().join("nvml.script");
    std::fs::write(
        &script,
        format!(
            "device Fake_GPU GPU-fake 16000 0 0\nprocess 0 pidfile:{} 500 0\n",
            pidfile.display()
        ),
    )
    .unwrap();
    let conf = write_config(
        dir.path(),
        r#"
[[rule]]
name = "on-gpu"
[rule.match]
gpu = true
command = "^/bin/sleep 74"
[rule.watch]
notify = false
"#,
    );
    let socket = dir.path().join("run/daemon.sock");
    let log = dir.path().join("daemon.log");
    let _daemon = start_daemon(
        &conf,
        &log,
        &[
            ("WATCHDOG_NVML_LIB", lib.as_os_str()),
            ("FAKE_NVML_SCRIPT", script.as_os_str()),
        ],
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let holder = Run(Command::new("/bin/sleep").arg("7401").spawn().unwrap());
    let bystander = Run(Command::new("/bin/sleep").arg("7402").spawn().unwrap());
    let copy = RunnableCopy::of(Path::new(env!("CARGO_BIN_EXE_watchdog")));
    // Two scans and a GPU list later, neither holds GPU memory: neither is watched.
    assert!(
        wait_for(Duration::from_secs(10), || log_text()
            .contains("reading the process lists of 1 GPU(s)")),
        "{}",
        log_text()
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        target_pids(&status_as(copy.path(), &socket, 0)),
        Vec::<u64>::new()
    );

    std::fs::write(&pidfile, holder.0.id().to_string()).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || target_pids(&status_as(
            copy.path(),
            &socket,
            0
        )) == vec![u64::from(
            holder.0.id()
        )]),
        "the process holding GPU memory was not taken alone: {}\n{}",
        status_as(copy.path(), &socket, 0),
        log_text()
    );
    assert!(alive(bystander.0.id()));
}

/// A run whose tree the daemon reads only every 60 s (no mem_limit, `tree_interval = "60s"`)
/// still has a child started after its first read signalled: the tree is read again just
/// before the signal. The root shell does not catch SIGUSR1, so only that child can be.
#[test]
fn a_child_started_between_tree_reads_is_signalled() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = public_scratch("wd-daemon-tree-");
    let caught = dir.path().join("caught");
    let ready = dir.path().join("ready");
    let catcher = dir.path().join("catcher.py");
    std::fs::write(
        &catcher,
        "import pathlib, signal, sys, time\n\
         signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path(sys.argv[1]).write_text('caught'))\n\
         pathlib.Path(sys.argv[2]).write_text('ready')\n\
         deadline = time.monotonic() + 30\n\
         while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:\n    time.sleep(0.05)\n",
    )
    .unwrap();
    let conf = write_config(
        dir.path(),
        r#"tree_interval = "60s"

[[rule]]
name = "late-child"
[rule.match]
command = "^/bin/sh -c : 7303;"
[rule.watch]
max_runtime = "6s"
lead = "2s"
signal = "SIGUSR1"
notify = false
"#,
    );
    let log = dir.path().join("daemon.log");
    let _daemon = start_daemon(&conf, &log, &[]);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // The catcher starts only once the run was found (its tree read then holds the shell
    // alone), and is ready (even behind a slow pyenv shim on a busy machine) well before
    // the alert 4 s in. It exits once it has caught the signal.
    let gate = Gate::new(dir.path(), "gate");
    let script = format!(
        ": 7303; read _ < '{}'; python3 {} {} {}; true",
        gate.path().display(),
        catcher.display(),
        caught.display(),
        ready.display()
    );
    let mut run = Run(Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .spawn()
        .expect("start the run"));
    let pid = run.0.id();
    wait_for_match(&log, "late-child", pid);
    gate.release();
    assert!(
        wait_for(Duration::from_secs(20), || caught.exists()),
        "the child started after the tree's last read was not signalled (ready: {}): {}",
        ready.exists(),
        log_text()
    );
    // The root shell does not catch SIGUSR1: it was left alone, and ends as its script does.
    let status = run.0.wait().expect("wait for the run");
    assert!(
        status.success(),
        "the root shell ended with {status}: {}",
        log_text()
    );
}

/// `watchdog daemon --metrics ADDR --ready-fd 3` for real: the ready line names the socket
/// once it is bound, and a real Prometheus scraping the endpoint the flag asked for (the
/// config names none) returns the figures of the run the daemon found.
#[test]
fn a_real_prometheus_scrapes_the_runs_the_daemon_found_at_the_metrics_flags_address() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let Some(prometheus_bin) = prometheus::tool("prometheus") else {
        return;
    };
    let dir = public_scratch("wd-daemon-metrics-");
    let conf = write_config(
        dir.path(),
        r#"
[[rule]]
name = "scraped"
[rule.match]
command = "^/bin/sleep 7501$"
[rule.watch]
max_runtime = "1h"
notify = false
"#,
    );
    let ready = dir.path().join("ready.json");
    let log = dir.path().join("daemon.log");
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], prometheus::free_port()));
    // Descriptor 3 opened by the shell, as a parent that starts the service would leave it.
    let _daemon = Run(Command::new("/bin/sh")
        .args(["-c", "exec 3>\"$WD_READY\"; exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_watchdog"))
        .args(["daemon", "--ready-fd", "3", "--metrics"])
        .arg(metrics.to_string())
        .arg("--config")
        .arg(&conf)
        .env("WD_READY", &ready)
        .env_remove("NOTIFY_SOCKET")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("start the daemon"));
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let ready_line = || std::fs::read_to_string(&ready).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(20), || ready_line().ends_with('\n')),
        "no ready line: {}",
        log_text()
    );
    let line: Value = serde_json::from_str(&ready_line()).expect("the ready line is JSON");
    assert_eq!(line["ready"], true, "{line}");
    assert_eq!(
        line["socket"].as_str(),
        Some(dir.path().join("run/daemon.sock").to_str().unwrap()),
        "{line}"
    );
    assert!(dir.path().join("run/daemon.sock").exists());

    let run = Run(Command::new("/bin/sleep").arg("7501").spawn().unwrap());
    let pid = run.0.id().to_string();
    let mut server = prometheus::Prometheus::start(&prometheus_bin, dir.path(), metrics, &[]);
    // What a dashboard would ask: the run's runtime limit (1 h, in seconds) and its tree.
    let query = format!("watchdog_runtime_limit_seconds{{pid=\"{pid}\",rule=\"scraped\"}}");
    let body = server.wait_for_query(&query, |body| body.contains("\"3600\""));
    assert!(body.contains("\"user\":\"root\""), "{body}");
    let tree = format!("watchdog_resource_used_bytes{{pid=\"{pid}\",kind=\"tree_memory\"}} > 0");
    server.wait_for_query(&tree, |body| body.contains(&format!("\"pid\":\"{pid}\"")));
    server.wait_for_query("watchdog_targets", |body| body.contains("\"1\"]"));
    assert!(
        log_text().contains(&format!("metrics at http://{metrics}/metrics")),
        "{}",
        log_text()
    );
}

/// A run whose parent reaps it late (here 300 ms after it exited) still has its exit code
/// in the service's verdict: the service waits for the reap without stopping its loop
/// (Linux 6.15 and later keep the status for its pidfd; older kernels keep none).
#[test]
fn a_run_reaped_late_by_its_parent_still_gets_its_exit_code() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = public_scratch("wd-daemon-reap-");
    let conf = write_config(
        dir.path(),
        r#"
[[rule]]
name = "late-reap"
[rule.match]
command = "^/bin/sh -c : 7304;"
[rule.watch]
notify = false
"#,
    );
    let log = dir.path().join("daemon.log");
    let _daemon = start_daemon(&conf, &log, &[]);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let gate = Gate::new(dir.path(), "gate");
    let mut run = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            ": 7304; read _ < '{}'; exit 3",
            gate.path().display()
        ))
        .spawn()
        .expect("start the run");
    let pid = run.id();
    wait_for_match(&log, "late-reap", pid);
    gate.release();
    // A zombie first, as under a parent busy with something else; then reaped.
    let state = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().map(|r| r.starts_with('Z')))
            .unwrap_or(false)
    };
    assert!(wait_for(Duration::from_secs(10), state), "never a zombie");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(run.wait().unwrap().code(), Some(3));
    let summary = format!("PID {pid} (sh) exited with status 3");
    let unknown = format!("PID {pid} (sh) exited; its exit status could not be read");
    let want = if watchdog_testsupport::kernel_at_least(6, 15) {
        &summary
    } else {
        &unknown
    };
    assert!(
        wait_for(Duration::from_secs(10), || log_text()
            .contains(want.as_str())),
        "wanted {want:?} in the log: {}",
        log_text()
    );
}

/// The service counts the ticks that came late while a run was watched, in that run's
/// summary as the single-run mode does: it said "0 late" whatever happened. The daemon is
/// frozen (SIGSTOP) for a second while sampling every 100 ms, so about ten deadlines pass
/// unsampled; at least one must be counted.
#[test]
fn a_frozen_daemon_counts_the_ticks_it_missed_in_the_runs_summary() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = public_scratch("wd-daemon-late-");
    let conf = write_config(
        dir.path(),
        r#"
[[rule]]
name = "late-ticks"
[rule.match]
command = "^/bin/sh -c : 7306;"
[rule.watch]
notify = false
"#,
    );
    let log = dir.path().join("daemon.log");
    let daemon = start_daemon(&conf, &log, &[]);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let gate = Gate::new(dir.path(), "gate");
    let mut run = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(": 7306; read _ < '{}'", gate.path().display()))
        .spawn()
        .expect("start the run");
    let pid = run.id();
    wait_for_match(&log, "late-ticks", pid);
    let daemon_pid = daemon.0.id() as i32;
    send_signal(daemon_pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(1));
    send_signal(daemon_pid, libc::SIGCONT);
    // A few samples after the thaw, so the late one is counted before the run ends.
    std::thread::sleep(Duration::from_millis(500));
    gate.release();
    assert!(run.wait().unwrap().success());
    let summary = format!("PID {pid} (sh) exited");
    assert!(
        wait_for(Duration::from_secs(10), || log_text().contains(&summary)),
        "no summary for PID {pid}: {}",
        log_text()
    );
    let late = summary_late_ticks(&log_text(), &summary);
    assert!(late >= 1, "no tick counted late: {}", log_text());
}

/// A daemon sampling every 60 s was still running 40 s after SIGTERM, past the unit's
/// `TimeoutStopSec=30s`, and took as long to act on SIGHUP: both now wake its loop at once
/// (measured: the stop takes about 30 ms here; checked against 5 s for a busy machine).
/// The run still gets its summary and recording.
#[test]
fn sigterm_and_sighup_reach_a_daemon_sampling_every_minute_at_once() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    let dir = public_scratch("wd-daemon-slow-");
    let conf = dir.path().join("daemon.toml");
    let rules = r#"
[[rule]]
name = "slow"
[rule.match]
command = "^/bin/sleep 7311$"
[rule.watch]
notify = false
"#;
    let keys = daemon_keys(dir.path()).replace(r#"interval = "100ms""#, r#"interval = "60s""#);
    std::fs::write(&conf, format!("{keys}{rules}")).unwrap();
    let log = dir.path().join("daemon.log");
    let mut daemon = start_daemon(&conf, &log, &[]);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let run = Run(Command::new("/bin/sleep").arg("7311").spawn().unwrap());
    wait_for_match(&log, "slow", run.0.id());

    // SIGHUP: a bad config is refused at once (the log says so), not at the next sample.
    std::fs::write(&conf, format!("{keys}{rules}\nbogus = 1\n")).unwrap();
    send_signal(daemon.0.id() as i32, libc::SIGHUP);
    assert!(
        wait_for(Duration::from_secs(5), || log_text()
            .contains("reload refused")),
        "SIGHUP not acted on within 5 s: {}",
        log_text()
    );

    let t = std::time::Instant::now();
    send_signal(daemon.0.id() as i32, libc::SIGTERM);
    let mut status = None;
    wait_for(Duration::from_secs(90), || {
        status = daemon.0.try_wait().unwrap();
        status.is_some()
    });
    let took = t.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        log_text()
    );
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to stop: {}",
        log_text()
    );
    let pid = run.0.id();
    assert!(
        log_text().contains(&format!("PID {pid} (sleep) is still running")),
        "no summary for the run: {}",
        log_text()
    );
    let recordings = std::fs::read_dir(dir.path().join("state"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(recordings > 0, "no recording in state_dir: {}", log_text());
    assert!(alive(pid));
}

/// 100 idle connections to the status socket made `watchdog status` fail after 5 s and a
/// registration time out (the run went unwatched); 20 idle TCP connections made every
/// scrape answer 503. With 300 of each open, and the daemon sampling every minute (a
/// registration wakes its loop), status, a registration and a scrape are all answered.
#[test]
fn hundreds_of_idle_connections_keep_nobody_from_status_registration_or_scrapes() {
    if !require(is_root(), "root (the daemon reads every process)") {
        return;
    }
    watchdog_testsupport::raise_fd_limit(4096);
    let dir = public_scratch("wd-daemon-idle-");
    let keys = daemon_keys(dir.path()).replace(r#"interval = "100ms""#, r#"interval = "60s""#);
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], prometheus::free_port()));
    let conf = dir.path().join("daemon.toml");
    std::fs::write(
        &conf,
        format!(
            r#"{keys}metrics = "{metrics}"
[[rule]]
name = "registered"
[rule.match]
registered = true
[rule.watch]
notify = false
"#
        ),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    let _daemon = start_daemon(&conf, &log, &[]);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let socket = dir.path().join("run/daemon.sock");
    assert!(
        wait_for(Duration::from_secs(10), || std::net::TcpStream::connect(
            metrics
        )
        .is_ok()),
        "no metrics listener: {}",
        log_text()
    );
    let idle_unix: Vec<std::os::unix::net::UnixStream> = (0..300)
        .map(|_| std::os::unix::net::UnixStream::connect(&socket).unwrap())
        .collect();
    let idle_tcp: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(metrics).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));

    let out = bin()
        .args(["status", "--json", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_success(&out, "watchdog status behind 300 idle connections");

    let run = Run(Command::new("/bin/sleep").arg("7321").spawn().unwrap());
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    use std::io::{Read as _, Write as _};
    writeln!(stream, "{{\"op\":\"register\",\"pid\":{}}}", run.0.id()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(
        answer.contains("\"registered\""),
        "registration behind 300 idle connections: {answer:?}\n{}",
        log_text()
    );

    let scrape = prometheus::get(metrics, "/metrics");
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    let pid_label = format!("pid=\"{}\"", run.0.id());
    assert!(
        wait_for(Duration::from_secs(5), || prometheus::get(
            metrics, "/metrics"
        )
        .body
        .contains(&pid_label)),
        "the registered run is not in the scrape"
    );
    drop((idle_unix, idle_tcp));
}

/// A reload is held to the start's checks of `state_dir`: a new one writable by others
/// was taken by SIGHUP although the same config was refused at start.
#[test]
fn a_reload_with_an_unsafe_state_dir_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    if !require(is_root(), "root (a root daemon and its directories)") {
        return;
    }
    let dir = public_scratch("wd-reload-state-");
    let rule = "[[rule]]\nname = \"none\"\n[rule.match]\ncommand = \"^matches nothing$\"\n";
    let conf = write_config(dir.path(), rule);
    let log = dir.path().join("daemon.log");
    let daemon = start_daemon(&conf, &log, &[]);
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let text = std::fs::read_to_string(&conf).unwrap();
    let state = format!("state_dir = \"{}/state\"", dir.path().display());
    assert!(text.contains(&state), "{text}");
    std::fs::write(
        &conf,
        text.replace(&state, &format!("state_dir = \"{}\"", open.display())),
    )
    .unwrap();
    send_signal(daemon.0.id() as i32, libc::SIGHUP);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(10), || log_text().contains(
            "reload refused, the previous config stays: unsafe state_dir"
        )),
        "{}",
        log_text()
    );
}
