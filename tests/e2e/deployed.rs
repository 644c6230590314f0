//! The service as systemd deploys it: the daemon as root under the unit's `UMask=0077`
//! (and under `0000`), with an empty `/run/watchdog` and the default socket and request
//! directory, as every boot leaves them. A `useradd` user's run, found by a rule, finds
//! its request file with no environment variable and acknowledges, and the daemon logs
//! the save time. A base left `0700` by an older version is repaired with one warning.
//! And `--pid` as root (`watchdog@.service`) under `UMask=0077`: the run's user reads its
//! request file.
//!
//! These tests own `/run/watchdog` while they run: they fail when a daemon answers there.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use watchdog_testsupport::public_scratch;

use crate::daemon::{Run, TempUser, public_client};
use crate::support::{bin, is_root, require, wait_for};

const RUN_DIR: &str = "/run/watchdog";
const SOCKET: &str = "/run/watchdog/daemon.sock";
const USERS: &str = "/run/watchdog/users";

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Empties `/run/watchdog` as a boot does, unless a daemon answers on its socket.
fn empty_run_dir() {
    if std::os::unix::net::UnixStream::connect(SOCKET).is_ok() {
        panic!("a watchdog daemon answers on {SOCKET}: stop it before running this test");
    }
    match std::fs::remove_dir_all(RUN_DIR) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{RUN_DIR}: {e}"),
        _ => {}
    }
}

/// `watchdog daemon --config conf` started with `umask`, its log in `log`; returns once its
/// socket is bound at the default path.
fn start_daemon_with_umask(conf: &Path, log: &Path, umask: u32) -> Run {
    let mut cmd = bin();
    cmd.arg("daemon")
        .arg("--config")
        .arg(conf)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()));
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
    let daemon = Run(cmd.spawn().expect("start the daemon"));
    assert!(
        wait_for(Duration::from_secs(20), || Path::new(SOCKET).exists()),
        "the daemon never bound {SOCKET}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    daemon
}

/// A Python run of `user`, found by the rule on its command line (`umask_train.py`): it
/// polls `checkpoint_requested()` with no `WATCHDOG_*` variable, acknowledges, then writes
/// the acknowledged sequence number to its stdout.
fn user_run(user: &TempUser, package: &Path) -> (Run, std::process::ChildStdout) {
    let script = format!(
        "import sys, time\n\
         sys.path.insert(0, {package:?})\n\
         import training_watchdog as tw\n\
         while not tw.checkpoint_requested(): time.sleep(0.05)\n\
         print('acknowledged', tw.acknowledge(), flush=True)\n\
         time.sleep(60)\n",
        package = package.display().to_string(),
    );
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .arg("umask_train.py")
        .env_remove("WATCHDOG_REQUEST_FILE")
        .env_remove("WATCHDOG_DAEMON_DIR");
    spawn_as(user, cmd)
}

/// `cmd` started as `user` in `/`, with no daemon socket of the test's, its stdout piped.
fn spawn_as(user: &TempUser, mut cmd: Command) -> (Run, std::process::ChildStdout) {
    let mut child = cmd
        .env_remove("WATCHDOG_SOCKET")
        .current_dir("/")
        .uid(user.uid)
        .gid(user.uid)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let out = child.stdout.take().unwrap();
    (Run(child), out)
}

/// The first line `out` gives within 30 s (empty when none came).
fn first_line(out: std::process::ChildStdout) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default()
}

/// The daemon under `umask`: the modes it gives, and a user's run saving through the
/// client's request-file path.
fn deployment_under(umask: u32, user: &TempUser, package: &Path, dir: &Path) {
    empty_run_dir();
    let conf = dir.join(format!("daemon-{umask:03o}.toml"));
    std::fs::write(
        &conf,
        format!(
            r#"interval = "100ms"
scan_interval = "200ms"
state_dir = "{state}"

[[rule]]
name = "umask"
[rule.match]
user = "{user}"
command = "umask_train\\.py"
[rule.watch]
max_runtime = "4s"
lead = "2s"
notify = false
"#,
            state = dir.join(format!("state-{umask:03o}")).display(),
            user = user.name,
        ),
    )
    .unwrap();
    let log = dir.join(format!("daemon-{umask:03o}.log"));
    let daemon = start_daemon_with_umask(&conf, &log, umask);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let (run, out) = user_run(user, package);
    let pid = run.0.id();
    let said = first_line(out);
    let request = Path::new(USERS).join(format!("{}/{pid}.request.json", user.uid));
    assert!(
        said.starts_with("acknowledged ") && said.trim() != "acknowledged None",
        "under umask {umask:04o} the run did not acknowledge its request ({said:?}); {}: {:?}; log: {}",
        request.display(),
        std::fs::symlink_metadata(&request).map(|m| m.mode()),
        log_text()
    );
    assert!(
        wait_for(Duration::from_secs(10), || log_text()
            .contains("checkpoint acknowledged (request 1), saved in")),
        "under umask {umask:04o} the daemon did not log the save time: {}",
        log_text()
    );
    assert_eq!(mode(Path::new(RUN_DIR)), 0o755, "{RUN_DIR}");
    assert_eq!(mode(Path::new(USERS)), 0o755, "{USERS}");
    let own = Path::new(USERS).join(user.uid.to_string());
    assert_eq!(mode(&own), 0o700, "{}", own.display());
    assert_eq!(std::fs::metadata(&own).unwrap().uid(), user.uid);
    assert_eq!(mode(&request), 0o600, "{}", request.display());
    assert_eq!(std::fs::metadata(&request).unwrap().uid(), user.uid);
    assert_eq!(mode(Path::new(SOCKET)), 0o666, "{SOCKET}");
    drop(run);
    drop(daemon);
}

#[test]
fn under_the_units_umask_a_users_run_finds_its_request_file_and_the_daemon_learns_the_save() {
    if !require(
        is_root(),
        "root (useradd, /run/watchdog, a root daemon under its unit's umask)",
    ) {
        return;
    }
    let dir = public_scratch("wd-umask");
    let package = public_client(dir.path());
    let user = TempUser::create("umask");
    for umask in [0o077, 0o000] {
        deployment_under(umask, &user, &package, dir.path());
    }

    // A base left 0700 by an earlier version (kept across restarts by
    // RuntimeDirectoryPreserve=yes) is put back to 0755, with one warning line.
    empty_run_dir();
    std::fs::create_dir_all(USERS).unwrap();
    std::fs::set_permissions(RUN_DIR, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(USERS, std::fs::Permissions::from_mode(0o700)).unwrap();
    let conf = dir.path().join("daemon-077.toml");
    let log = dir.path().join("daemon-repair.log");
    let daemon = start_daemon_with_umask(&conf, &log, 0o077);
    let (run, out) = user_run(&user, &package);
    let said = first_line(out);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.starts_with("acknowledged 1"),
        "after the repair the run did not acknowledge ({said:?}): {log_text}"
    );
    assert_eq!(mode(Path::new(USERS)), 0o755);
    assert_eq!(
        log_text.matches("had mode 0700: made it 0755").count(),
        1,
        "{log_text}"
    );
    drop(run);
    drop(daemon);

    // Writable by others: refused as before, and left alone.
    empty_run_dir();
    std::fs::create_dir_all(USERS).unwrap();
    std::fs::set_permissions(USERS, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = bin()
        .args(["daemon", "--config"])
        .arg(&conf)
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a 0777 base was accepted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("group or others may write to it"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(Path::new(USERS)), 0o777);
    empty_run_dir();
}

/// `--pid` as root for another user's run, as `watchdog@.service` starts it (with the
/// request file in root's `/run/watchdog`) but under `UMask=0077`: the file is given to
/// the run's user, so the run still reads its request.
#[test]
fn root_watching_a_users_run_by_pid_under_umask_0077_leaves_the_request_readable_by_the_run() {
    if !require(is_root(), "root (useradd, --pid of another user's run)") {
        return;
    }
    let dir = public_scratch("wd-pidumask");
    let package = public_client(dir.path());
    let user = TempUser::create("pidumask");
    // Root's own directory in /run, as RuntimeDirectory= makes it (not /run/watchdog: the
    // test above owns that one).
    let run_tmp = tempfile::Builder::new()
        .prefix("wd-pidumask")
        .tempdir_in("/run")
        .unwrap();
    let run_dir = run_tmp.path().to_path_buf();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "import sys, time\n\
         sys.path.insert(0, {package:?})\n\
         import training_watchdog as tw\n\
         while not tw.checkpoint_requested(): time.sleep(0.05)\n\
         print('seen', tw.request()['seq'], flush=True)\n\
         time.sleep(60)\n",
        package = package.display().to_string(),
    );
    // The client of a run started before its watchdog is told where to look.
    let request = run_dir.join("run.request.json");
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .env("WATCHDOG_REQUEST_FILE", &request);
    let (run, out) = spawn_as(&user, cmd);
    let pid = run.0.id();
    let mut cmd = bin();
    cmd.args([
        "--pid",
        &pid.to_string(),
        "--max-runtime",
        "4s",
        "--lead",
        "2s",
    ])
    .args(["--no-status", "--interval", "100ms", "--request-file"])
    .arg(&request)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    let watchdog = Run(cmd.spawn().expect("start watchdog --pid"));
    let said = first_line(out);
    let meta = std::fs::metadata(&request);
    drop(watchdog);
    drop(run);
    assert_eq!(said.trim(), "seen 1", "the run did not read its request");
    let meta = meta.unwrap();
    assert_eq!(
        meta.uid(),
        user.uid,
        "the request file is not the run's user's"
    );
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
}
