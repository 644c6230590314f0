//! Discovery and rules against real processes in the real `/proc`: `sleep`s started with and
//! without `WATCHDOG_WATCH=1` and a distinctive `argv[0]`, found (or not) by one scan.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use watchdog_daemon::discovery::{ProcessFacts, Scanner, topmost};
use watchdog_daemon::rules::DaemonConfig;

/// Children killed (with their process group) when the test ends, however it ends.
struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SAFETY: kill(2) with a negative PID signals that process group; no memory is involved.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

/// A distinctive name for this test run's processes.
fn tag(what: &str) -> String {
    format!("watchdog-discovery-test-{what}-{}", std::process::id())
}

/// `sleep 30` as `argv0`, in its own process group, with `env` added to its environment.
fn sleep_as(argv0: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new("sleep");
    cmd.arg0(argv0)
        .arg("30")
        .env_remove("WATCHDOG_WATCH")
        .process_group(0)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Waits until `pid`'s command name is `comm` (its `exec` is done).
fn wait_for_exec(pid: u32, comm: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        != comm
    {
        assert!(Instant::now() < deadline, "{pid} never became {comm}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rules(extra: &str) -> DaemonConfig {
    let text = format!(
        "[[rule]]\nname = \"by-env\"\n[rule.match]\nenv = \"WATCHDOG_WATCH=1\"\n\
         [[rule]]\nname = \"by-command\"\n[rule.match]\ncommand = '^{}'\n{extra}",
        tag("opted-in")
    );
    DaemonConfig::parse(&text, Path::new("test.toml")).unwrap()
}

fn find(found: &[ProcessFacts], pid: u32) -> Option<&ProcessFacts> {
    found.iter().find(|p| p.pid == pid)
}

#[test]
fn one_scan_finds_the_opted_in_sleep_by_env_and_by_command_and_not_the_other() {
    let mut kill = Kill(Vec::new());
    kill.0
        .push(sleep_as(&tag("opted-in"), &[("WATCHDOG_WATCH", "1")]));
    kill.0.push(sleep_as(&tag("plain"), &[]));
    let (yes, no) = (kill.0[0].id(), kill.0[1].id());
    wait_for_exec(yes, "sleep");
    wait_for_exec(no, "sleep");

    // The test is these sleeps' parent: do not leave out its subtree as the daemon's own.
    let mut scanner = Scanner::with_excluded(Path::new("/proc"), None);
    let found = scanner.scan(|_| false);
    let config = rules("");
    let gpu = HashSet::new();

    let p = find(&found, yes).expect("the opted-in sleep is new");
    assert_eq!(p.command, format!("{} 30", tag("opted-in")));
    assert_eq!(p.comm, "sleep");
    assert_eq!(p.ppid, std::process::id());
    assert_eq!(p.uid, rustix::process::getuid().as_raw());
    assert_eq!(
        config.rule_for(p, &gpu, false).map(|r| r.name()),
        Some("by-env")
    );
    assert!(config.rules[1].matches(p, &gpu, false), "by command too");

    let q = find(&found, no).expect("the plain sleep is new too");
    assert_eq!(config.rule_for(q, &gpu, false).map(|r| r.name()), None);

    let taken = topmost(&found, |p| {
        config.rule_for(p, &gpu, false).map(|r| r.name())
    });
    // Other tests run their own opted-in sleeps meanwhile: look at this test's only.
    let ours: Vec<u32> = taken
        .iter()
        .map(|(p, _)| p.pid)
        .filter(|pid| [yes, no].contains(pid))
        .collect();
    assert_eq!(ours, [yes]);

    // A process started after the first scan is found by the next, and only it.
    kill.0
        .push(sleep_as(&tag("later"), &[("WATCHDOG_WATCH", "1")]));
    let later = kill.0[2].id();
    wait_for_exec(later, "sleep");
    let found = scanner.scan(|_| false);
    let p = find(&found, later).expect("the later sleep is found by the next scan");
    assert_eq!(
        config.rule_for(p, &gpu, false).map(|r| r.name()),
        Some("by-env")
    );
    assert!(find(&found, yes).is_none() && find(&found, no).is_none());
}

#[test]
fn a_child_of_a_watched_pid_is_not_returned() {
    let mut kill = Kill(Vec::new());
    // A parent that starts an opted-in child and prints its PID.
    let mut parent = Command::new("bash");
    parent
        .arg("-c")
        .arg(format!("exec -a {} sleep 30 & echo $!; wait", tag("child")))
        .env("WATCHDOG_WATCH", "1")
        .process_group(0)
        .stdout(Stdio::piped());
    kill.0.push(parent.spawn().unwrap());
    let parent_pid = kill.0[0].id();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(kill.0[0].stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let child: u32 = line.trim().parse().unwrap();
    wait_for_exec(child, "sleep");

    let config = rules("");
    let gpu = HashSet::new();
    let mut scanner = Scanner::with_excluded(Path::new("/proc"), None);
    let found = scanner.scan(|pid| pid == parent_pid);
    assert!(
        find(&found, parent_pid).is_none(),
        "the watched process itself"
    );
    assert!(
        find(&found, child).is_none(),
        "a child of a watched process"
    );

    // Unwatched, a fresh scanner sees both; topmost takes the parent only.
    let mut scanner = Scanner::with_excluded(Path::new("/proc"), None);
    let found = scanner.scan(|_| false);
    let c = find(&found, child).expect("the child, unwatched");
    assert_eq!(c.ppid, parent_pid);
    assert!(
        config.rule_for(c, &gpu, false).is_some(),
        "the child matches by env"
    );
    let taken = topmost(&found, |p| config.rule_for(p, &gpu, false).map(|_| ()));
    let ours: Vec<u32> = taken
        .iter()
        .map(|(p, _)| p.pid)
        .filter(|pid| [parent_pid, child].contains(pid))
        .collect();
    assert_eq!(ours, [parent_pid]);
}

#[test]
fn the_daemons_own_subtree_is_left_out() {
    let mut kill = Kill(Vec::new());
    kill.0
        .push(sleep_as(&tag("own"), &[("WATCHDOG_WATCH", "1")]));
    let own = kill.0[0].id();
    wait_for_exec(own, "sleep");
    let mut scanner = Scanner::new(Path::new("/proc"));
    let found = scanner.scan(|_| false);
    assert!(find(&found, std::process::id()).is_none());
    assert!(
        find(&found, own).is_none(),
        "a child of the scanning process (its hooks)"
    );
    assert!(
        !found.is_empty(),
        "other processes of the machine are found"
    );
}
