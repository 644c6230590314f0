//! `watchdog daemon` finds runs that reach their command through a `fork` and an `exec`
//! (issue 18): 200 runs of `python3 train.py`, launched in 20 batches at random offsets
//! from the ready line through five chains, while the launcher forks other processes
//! around them. Each run sleeps 30 s, so a run is missed only if discovery never takes it;
//! the test ends as soon as every run was taken (about 10 s here). The chains, in
//! `scripts/bench/fork_exec_launch.py`: python execing python through a `preexec_fn` of
//! 0-300 ms (the name never changes), `sh -c 'exec python3 train.py'`, a plain `Popen`,
//! `python3 -> setpriv --reuid USER -> python3 train.py` to a user made with `useradd` for
//! the test, and a subshell that sleeps 50 ms, then execs.
//!
//! Discovery latency is measured by `scripts/bench/daemon.sh` (`MODE=fork-exec`), not here.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use watchdog_testsupport::public_scratch;

use crate::daemon::{TempUser, start_daemon, write_config};
use crate::support::{Group, is_root, need, require, wait_for};

/// The launcher, shared with `scripts/bench/daemon.sh` (`MODE=fork-exec`).
const LAUNCHER: &str = include_str!("../../scripts/bench/fork_exec_launch.py");

/// How long each run lives.
const RUN_LIFE_S: u64 = 30;

/// One run the launcher started.
struct Launched {
    run: u32,
    chain: String,
    pid: u32,
}

/// A python3 that another user can run (not a version manager's shim under /root).
fn system_python() -> Option<PathBuf> {
    ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn setpriv() -> Option<PathBuf> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn read_launched(path: &Path) -> (Vec<Launched>, bool) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut runs = Vec::new();
    let mut done = false;
    for line in text.lines() {
        if line == "done" {
            done = true;
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        if let [run, chain, pid, _launched] = f[..] {
            runs.push(Launched {
                run: run.parse().unwrap(),
                chain: chain.to_string(),
                pid: pid.parse().unwrap(),
            });
        }
    }
    (runs, done)
}

/// `(pid, uid)` of every `rule "chains" matched PID P of user U` line of the log.
fn matched(log: &str) -> Vec<(u32, u32)> {
    log.lines()
        .filter_map(|l| {
            let rest = l.split("rule \"chains\" matched PID ").nth(1)?;
            let mut words = rest.split(' ');
            let pid = words.next()?.parse().ok()?;
            let uid = words.nth(2)?.parse().ok()?;
            Some((pid, uid))
        })
        .collect()
}

#[test]
fn every_run_reached_through_a_fork_and_an_exec_is_taken_by_its_rule() {
    if !require(
        is_root(),
        "root (useradd, setpriv to another user, a root daemon)",
    ) {
        return;
    }
    let Some(python) = need(
        system_python(),
        "a python3 outside /root (/usr/bin/python3)",
    ) else {
        return;
    };
    let Some(setpriv) = need(setpriv(), "setpriv (util-linux)") else {
        return;
    };
    let dir = public_scratch("wd-exec-chains-");
    let user = TempUser::create("exec");
    let train = dir.path().join("train.py");
    std::fs::write(&train, format!("import time\ntime.sleep({RUN_LIFE_S})\n")).unwrap();
    let launcher = dir.path().join("launch.py");
    std::fs::write(&launcher, LAUNCHER).unwrap();
    let conf = write_config(
        dir.path(),
        r#"
[[rule]]
name = "chains"
[rule.match]
command = '^\S*python3\S* \S*/train\.py --run [0-9]+$'
[rule.watch]
max_runtime = "1h"
notify = false
"#,
    );
    let log = dir.path().join("daemon.log");
    let _daemon = start_daemon(
        &conf,
        &log,
        &[("WATCHDOG_LOG", "info,watchdog_daemon=debug".as_ref())],
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Ready: the launcher starts at once, its batches at random offsets within 5 s.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let out = dir.path().join("launched.txt");
    // Every run and the launcher itself, killed when dropped, waiting until none is left
    // (the test's user cannot be deleted while it has processes).
    let group = Group(
        Command::new(&python)
            .arg(&launcher)
            .arg(&python)
            .arg(&train)
            .arg(&setpriv)
            .arg(user.uid.to_string())
            .arg(user.uid.to_string())
            .arg(seed.to_string())
            .arg(&out)
            .process_group(0)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the launcher"),
    );
    let launched_by = Instant::now() + Duration::from_secs(60);
    while !read_launched(&out).1 {
        assert!(
            Instant::now() < launched_by,
            "the launcher (seed {seed}) did not launch its 200 runs in 60 s: {:?}",
            std::fs::read_to_string(&out)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let last_launch = Instant::now();
    let (runs, _) = read_launched(&out);
    assert_eq!(runs.len(), 200, "seed {seed}");

    // Every run taken, for as long as the runs live.
    let all_taken = || {
        let taken = matched(&log_text());
        runs.iter()
            .all(|r| taken.iter().any(|&(pid, _)| pid == r.pid))
    };
    let lived = Duration::from_secs(RUN_LIFE_S - 2);
    wait_for(lived.saturating_sub(last_launch.elapsed()), all_taken);
    let text = log_text();
    let taken = matched(&text);
    let missed: Vec<String> = runs
        .iter()
        .filter(|r| !taken.iter().any(|&(pid, _)| pid == r.pid))
        .map(|r| {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", r.pid))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_else(|_| "(exited)".into());
            let said: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(&format!("PID {} ", r.pid)))
                .collect();
            format!(
                "run {} ({}) PID {} now {cmdline:?}; the log on it: {said:?}",
                r.run, r.chain, r.pid
            )
        })
        .collect();
    assert!(
        missed.is_empty(),
        "{} of 200 runs missed (seed {seed}):\n{}",
        missed.len(),
        missed.join("\n")
    );

    // Taken once each, as the user who ran them, and nothing else taken.
    for r in &runs {
        let uids: Vec<u32> = taken
            .iter()
            .filter(|&&(pid, _)| pid == r.pid)
            .map(|&(_, uid)| uid)
            .collect();
        let want = if r.chain == "setpriv" { user.uid } else { 0 };
        assert_eq!(uids, [want], "run {} ({}) PID {}", r.run, r.chain, r.pid);
    }
    assert_eq!(taken.len(), 200, "only the runs are taken: {taken:?}");
    // The launcher, judged and not taken, is named in the debug log with the reason.
    let launcher_pid = group.0.id();
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("PID {launcher_pid} of user 0 ("))
                && l.ends_with("skipped: no rule matches")),
        "the debug log does not name the launcher (PID {launcher_pid}) as skipped"
    );
    drop(group);
}
