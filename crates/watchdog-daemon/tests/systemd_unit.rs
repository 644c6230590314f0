//! The systemd units in `systemd/`, checked with systemd's own tools: `systemd-analyze
//! verify` accepts them with `ExecStart=` pointing at the built binary, `systemd-analyze
//! security --offline=true` rates the sandbox, and the capability bounding set of
//! training-watchdog.service is both enough and needed for each job (run for real as root
//! under `setpriv --bounding-set`, against a process and a 0700 directory of `nobody`).
//!
//! Needs `systemd-analyze` (Debian package `systemd`) and, for the capability test, root and
//! `setpriv` (util-linux): missing, the tests fail under CI=true and are skipped otherwise.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use watchdog_testsupport::{is_root, need, require, scratch};

/// Where the units are installed from.
fn unit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../systemd")
}

/// The `ExecStart=` binary the units name.
const INSTALLED_BIN: &str = "/usr/local/bin/watchdog";

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn systemd_analyze() -> Option<PathBuf> {
    need(
        find_in_path("systemd-analyze"),
        "systemd-analyze (Debian package systemd)",
    )
}

/// The `watchdog` binary of this build: beside this test's directory
/// (`target/debug/deps/systemd_unit-*` → `target/debug/watchdog`). `cargo test` of this
/// crate does not build another crate's binary, so it is built here when missing.
fn built_watchdog() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("watchdog");
    if !bin.is_file() {
        let target_dir = profile_dir.parent().unwrap();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        eprintln!("building {} (cargo build -p watchdog)", bin.display());
        let status = Command::new(cargo)
            .args(["build", "-p", "watchdog", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", target_dir)
            .status()
            .unwrap();
        assert!(status.success(), "cargo build -p watchdog failed: {status}");
    }
    assert!(
        bin.is_file(),
        "{} is missing after the build",
        bin.display()
    );
    bin
}

/// A copy of `unit` (named `as_name`) in `dir` whose `ExecStart=` runs `bin`.
fn copy_unit(unit: &str, as_name: &str, dir: &Path, bin: &Path) -> PathBuf {
    let text = std::fs::read_to_string(unit_dir().join(unit)).unwrap();
    let exec = format!("ExecStart={INSTALLED_BIN} ");
    assert!(
        text.contains(&exec),
        "{unit}: no line starting with {exec:?}"
    );
    let text = text.replace(&exec, &format!("ExecStart={} ", bin.display()));
    let path = dir.join(as_name);
    std::fs::write(&path, text).unwrap();
    path
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What `systemd-analyze verify` says about a copy of `unit` named `as_name` that runs the
/// built binary, after `edit`: whether it exited 0, the lines naming the unit, everything.
fn verify(
    unit: &str,
    as_name: &str,
    edit: impl Fn(String) -> String,
) -> Option<(bool, Vec<String>, String)> {
    let analyze = systemd_analyze()?;
    let bin = built_watchdog();
    let dir = scratch();
    let path = copy_unit(unit, as_name, dir.path(), &bin);
    std::fs::write(&path, edit(std::fs::read_to_string(&path).unwrap())).unwrap();
    let out = run(Command::new(analyze).arg("verify").arg(&path));
    let said = text(&out);
    let about = said
        .lines()
        .filter(|l| l.contains(as_name))
        .map(str::to_string)
        .collect();
    Some((out.status.success(), about, said))
}

/// `systemd-analyze verify` exits 0 even when it ignores a bad line ("Unknown key",
/// "Failed to parse"): it must also say nothing about the unit.
fn assert_verifies(unit: &str, as_name: &str) {
    if let Some((ok, about, said)) = verify(unit, as_name, |t| t) {
        assert!(
            ok && about.is_empty(),
            "systemd-analyze verify {as_name}:\n{said}"
        );
    }
}

/// The overall exposure `systemd-analyze security --offline=true` gives, and its table.
fn exposure(analyze: &Path, unit: &Path) -> (f64, String) {
    let out = run(Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit));
    let table = text(&out);
    assert!(out.status.success(), "{}\n{table}", out.status);
    let value = table
        .lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")?
                .1
                .split_once(": ")
        })
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{table}"));
    (value, table)
}

#[test]
fn verify_accepts_training_watchdog_service_running_the_built_binary() {
    assert_verifies("training-watchdog.service", "training-watchdog.service");
}

#[test]
fn verify_accepts_the_per_pid_template_and_an_instance_of_it() {
    assert_verifies("watchdog@.service", "watchdog@.service");
    assert_verifies("watchdog@.service", "watchdog@4242.service");
}

#[test]
fn verify_would_catch_a_bad_line() {
    // The check above is only worth something if a typo fails it.
    let bad = |t: String| t.replace("WatchdogSec=30s", "WatchdogSec=30 furlongs");
    if let Some((_, about, said)) = verify(
        "training-watchdog.service",
        "training-watchdog.service",
        bad,
    ) {
        assert!(
            !about.is_empty(),
            "a bad WatchdogSec= went unreported:\n{said}"
        );
    }
}

/// `unit`, installed as `as_name`, rates at most `max` (the table is printed otherwise).
fn assert_exposure_at_most(unit: &str, as_name: &str, max: f64) {
    let Some(analyze) = systemd_analyze() else {
        return;
    };
    let dir = scratch();
    let unit = copy_unit(unit, as_name, dir.path(), Path::new(INSTALLED_BIN));
    let (value, table) = exposure(&analyze, &unit);
    assert!(value <= max, "exposure {value} > {max}:\n{table}");
}

#[test]
fn training_watchdog_service_exposure_is_at_most_3() {
    assert_exposure_at_most(
        "training-watchdog.service",
        "training-watchdog.service",
        3.0,
    );
}

#[test]
fn per_pid_template_exposure_is_at_most_2() {
    assert_exposure_at_most("watchdog@.service", "watchdog@4242.service", 2.0);
}

#[test]
fn training_watchdog_service_runs_the_documented_command() {
    let text = std::fs::read_to_string(unit_dir().join("training-watchdog.service")).unwrap();
    assert!(
        text.lines()
            .any(|l| l
                == "ExecStart=/usr/local/bin/watchdog daemon --config /etc/watchdog/daemon.toml"),
        "ExecStart changed: update docs/service.md"
    );
    for line in [
        "Type=notify",
        "NotifyAccess=main",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectProc=ptraceable",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} is gone");
    }
}

/// The capabilities a unit's `CapabilityBoundingSet=` names, lower case without `CAP_`.
fn bounding_set(unit: &str) -> Vec<String> {
    let text = std::fs::read_to_string(unit_dir().join(unit)).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .flat_map(|v| v.split_whitespace())
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect()
}

/// One job of the daemon, as a shell command run as root with a bounding set, and the
/// capabilities it needs (each is dropped in turn: the job must then fail).
struct Job {
    what: &'static str,
    needs: &'static [&'static str],
    script: String,
}

/// Runs `script` as root with only `caps` in the bounding set (and so in the permitted
/// set after exec), the way systemd starts the daemon.
fn with_caps(setpriv: &Path, caps: &[String], script: &str) -> Output {
    let set: String = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    run(Command::new(setpriv)
        .arg(format!("--bounding-set={set}"))
        .args(["sh", "-c", script]))
}

#[test]
fn the_bounding_set_is_enough_for_every_job_and_each_capability_is_needed() {
    if !require(
        is_root(),
        "root (to run jobs under a capability bounding set)",
    ) {
        return;
    }
    let Some(setpriv) = need(find_in_path("setpriv"), "setpriv (util-linux)") else {
        return;
    };
    let caps = bounding_set("training-watchdog.service");
    assert!(!caps.is_empty(), "no CapabilityBoundingSet= in the unit");
    let nobody = "65534";

    // Another user's run, and its 0700 home with a checkpoint directory.
    let mut run_of_nobody = Command::new(&setpriv)
        .args(["--reuid", nobody, "--regid", nobody, "--clear-groups"])
        .args(["sleep", "600"])
        .env("SECRET_OF_THE_RUN", "42")
        .spawn()
        .unwrap();
    let pid = run_of_nobody.id();
    // `spawn` returns once setpriv runs, still as root: a root without `kill` may signal it
    // until it has become nobody and run `sleep` (seen in CI, under load).
    let status = format!("/proc/{pid}/status");
    let became_nobody = || {
        std::fs::read_to_string(&status).is_ok_and(|s| {
            s.contains("Name:\tsleep\n")
                && s.lines().any(|l| {
                    l.split_whitespace()
                        .eq(["Uid:", nobody, nobody, nobody, nobody])
                })
        })
    };
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !became_nobody() && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(became_nobody(), "{status}: never nobody's sleep");
    let dir = scratch();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let home = dir.path().join("home");
    let ckpt = home.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    let users = dir.path().join("users");
    std::fs::create_dir(&users).unwrap();
    let chowned = users.join("given");
    std::fs::create_dir(&chowned).unwrap();
    let userdir = users.join("65534");
    std::fs::create_dir(&userdir).unwrap();
    let ack = userdir.join("request.json.ack");
    std::fs::write(&ack, "ack 1\n").unwrap();
    std::fs::set_permissions(&ack, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for p in [&ckpt, &home, &chowned, &userdir, &ack] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    for p in [&home, &userdir] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let (ckpt, users, chowned, userdir) = (
        ckpt.display(),
        users.display(),
        chowned.display(),
        userdir.display(),
    );
    // /proc must show the process (the test may itself be under hidepid).
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    let kmsg_restricted =
        std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict").is_ok_and(|v| v.trim() == "1");
    let mut jobs = vec![
        Job {
            what: "signal another user's run",
            needs: &["kill"],
            script: format!("kill -0 {pid}"),
        },
        Job {
            what: "read another user's /proc/PID/environ",
            needs: &["sys_ptrace", "dac_override"],
            script: format!("grep -qa SECRET_OF_THE_RUN /proc/{pid}/environ"),
        },
        Job {
            what: "read another user's /proc/PID/cwd",
            needs: &["sys_ptrace"],
            script: format!("readlink /proc/{pid}/cwd >/dev/null"),
        },
        Job {
            what: "statvfs a checkpoint directory inside a 0700 home",
            needs: &["dac_override"],
            script: format!("stat -f {ckpt} >/dev/null"),
        },
        Job {
            what: "run a hook as the user (setgid, setgroups, setuid)",
            needs: &["setuid", "setgid"],
            script: format!(
                "setpriv --reuid {nobody} --regid {nobody} --clear-groups sh -c 'test $(id -u) = {nobody}'"
            ),
        },
        Job {
            what: "write a request file into the user's 0700 directory and give it to the user",
            needs: &["dac_override", "chown"],
            script: format!(
                "echo {{}} > {userdir}/.request.tmp && chown {nobody}:{nobody} {userdir}/.request.tmp \
                 && mv {userdir}/.request.tmp {userdir}/request.json"
            ),
        },
        Job {
            what: "read the user's acknowledgment in the user's 0700 directory",
            needs: &["dac_override"],
            script: format!("grep -q ack {userdir}/request.json.ack"),
        },
        Job {
            what: "give a per-user directory to its user",
            needs: &["chown"],
            script: format!("mkdir -p {users}/u && chown {nobody}:{nobody} {users}/u"),
        },
        Job {
            what: "repair the mode of a per-user directory the user owns",
            needs: &["fowner"],
            script: format!("chmod 0700 {chowned}"),
        },
    ];
    // Under kernel.dmesg_restrict=0 (not Debian's default) anyone may read /dev/kmsg.
    jobs.push(Job {
        what: "read the kernel log",
        needs: if kmsg_restricted { &["syslog"] } else { &[] },
        script: "dd if=/dev/kmsg of=/dev/null bs=8192 count=1 iflag=nonblock status=none"
            .to_string(),
    });

    let mut failures = Vec::new();
    for job in &jobs {
        let out = with_caps(&setpriv, &caps, &job.script);
        if !out.status.success() {
            failures.push(format!(
                "{} fails with {caps:?}: {}",
                job.what,
                text(&out).trim()
            ));
        }
        for need in job.needs {
            assert!(
                caps.iter().any(|c| c == need),
                "{}: needs {need}, not in the unit",
                job.what
            );
            let without: Vec<String> = caps.iter().filter(|c| c != need).cloned().collect();
            if with_caps(&setpriv, &without, &job.script).status.success() {
                failures.push(format!("{} works without {need}", job.what));
            }
        }
    }
    // Every capability in the unit is needed by some job.
    for cap in &caps {
        if cap == "syslog" && !kmsg_restricted {
            eprintln!("kernel.dmesg_restrict is not 1: not showing that syslog is needed");
            continue;
        }
        if !jobs.iter().any(|j| j.needs.contains(&cap.as_str())) {
            failures.push(format!("{cap} is in the unit but no job needs it"));
        }
    }
    run_of_nobody.kill().unwrap();
    run_of_nobody.wait().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
