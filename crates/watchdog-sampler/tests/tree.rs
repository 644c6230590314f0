//! The process tree and its memory, on real processes.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use watchdog_procfs::{ProcRoot, parse_stat};
use watchdog_sampler::tree::{ProcessTree, TreeMemory};
use watchdog_sampler::{ResourceTable, Source, Tick};

const PROC: &str = "/proc";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // Kill the whole process group the script made.
        let pid = self.0.id() as i32;
        // SAFETY: kill has no memory preconditions; the group is ours (setsid in the script).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a Python script in its own session that prints "ready" when its children are up.
fn python(script: &str) -> Killed {
    let mut child = Command::new("setsid")
        .args(["python3", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "script did not start");
    Killed(child)
}

fn wait_for(tree: &mut ProcessTree, want: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tree.refresh();
        if tree.pids().len() == want || Instant::now() > deadline {
            return tree.pids().to_vec();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn finds_children_grandchildren_and_children_of_threads() {
    // main -> 2 sleeps; a worker thread -> 1 sleep; a child shell -> 1 grandchild sleep.
    let target = python(
        r#"
import subprocess, threading, time, sys
kids = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
kids.append(subprocess.Popen(["sh", "-c", "sleep 60 & wait"]))
def worker():
    kids.append(subprocess.Popen(["sleep", "60"]))
    time.sleep(60)
threading.Thread(target=worker, daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
time.sleep(60)
"#,
    );
    let pid = target.0.id();
    let mut tree = ProcessTree::new(Path::new(PROC), pid).unwrap();
    let pids = wait_for(&mut tree, 6);
    assert_eq!(pids[0], pid, "target first");
    assert_eq!(pids.len(), 6, "{pids:?}");
    // The thread's child is not in the main thread's children file: reading only that one
    // would miss it.
    let main_children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    assert_eq!(
        main_children.split_whitespace().count(),
        3,
        "{main_children}"
    );

    let mut table = ResourceTable::default();
    let mut mem = TreeMemory::new(Path::new(PROC), Some(1 << 30), &mut table);
    let mut got = Vec::new();
    mem.sample(
        &Tick {
            now_ns: 5,
            tree: tree.pids(),
        },
        &mut |s| got.push(s),
    )
    .unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].used > 4 << 20,
        "python alone has more than 4 MiB resident"
    );
    assert_eq!(got[0].limit, 1 << 30);
    let (_, counted) = mem.rss_sum(tree.pids());
    assert_eq!(counted, 6);

    // Kill the grandchild (found last, under the shell): the shell reaps it and exits, so it
    // leaves the tree and its statm descriptor is closed. The shell stays, a zombie python
    // has not reaped.
    let victim = pids[5];
    // SAFETY: kill has no memory preconditions; victim is our own grandchild.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let pids = wait_for(&mut tree, 5);
    assert!(!pids.contains(&victim), "{pids:?}");
    let (_, counted) = mem.rss_sum(tree.pids());
    assert_eq!(counted, 5);

    drop(target);
    let deadline = Instant::now() + Duration::from_secs(5);
    while tree.refresh() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!tree.target_alive());
    assert!(tree.pids().is_empty());
    assert!(!ProcRoot::default().is_alive(pid));
    got.clear();
    let outcome = mem
        .sample(
            &Tick {
                now_ns: 6,
                tree: tree.pids(),
            },
            &mut |s| got.push(s),
        )
        .unwrap();
    assert_eq!(outcome, watchdog_sampler::Outcome::Idle);
}

/// Regression: a watchdog started inside its target (`attach()` in a notebook kernel runs
/// `watchdog --pid <kernel>`) counted itself and its hook children in `tree_memory` and
/// could signal them.
#[test]
fn a_watchdog_inside_its_target_leaves_itself_and_its_hooks_out_of_the_tree() {
    // target -> sibling sleep, and the "watchdog" shell -> its "hook" sleep.
    let target = python(
        r#"
import subprocess, time
sibling = subprocess.Popen(["sleep", "60"])
dog = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE)
dog.stdout.readline()  # the hook is forked
print("ready", flush=True)
time.sleep(60)
"#,
    );
    let pid = target.0.id();
    // The sibling is the `sleep` child, the dog the `sh` child.
    let children: Vec<u32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let comm = |p: u32| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .unwrap()
            .trim()
            .to_string()
    };
    let sibling = *children.iter().find(|&&p| comm(p) == "sleep").unwrap();
    let dog = *children.iter().find(|&&p| comm(p) == "sh").unwrap();
    let hook: u32 = std::fs::read_to_string(format!("/proc/{dog}/task/{dog}/children"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let mut everything = ProcessTree::with_excluded(Path::new(PROC), pid, None).unwrap();
    let all = wait_for(&mut everything, 4);
    assert_eq!(all.len(), 4, "{all:?}");

    let mut tree = ProcessTree::with_excluded(Path::new(PROC), pid, Some(dog)).unwrap();
    assert_eq!(tree.excluded(), Some(dog));
    assert!(tree.refresh());
    assert_eq!(tree.pids(), &[pid, sibling], "dog {dog}, hook {hook}");

    // Changing the exclusion takes effect at once; the target is never excluded.
    everything.exclude_subtree_of(Some(dog));
    assert_eq!(everything.pids(), &[pid, sibling]);
    everything.exclude_subtree_of(Some(pid));
    assert_eq!(everything.excluded(), None);
    assert_eq!(everything.pids().len(), 4, "{:?}", everything.pids());

    // Its memory is not counted either.
    let mut table = ResourceTable::default();
    let mut mem = TreeMemory::new(Path::new(PROC), None, &mut table);
    assert_eq!(mem.rss_sum(tree.pids()).1, 2);
}

/// The default: the calling process (the watchdog) is left out of a target that contains it.
#[test]
fn new_leaves_the_calling_process_out_of_a_target_that_contains_it() {
    let me = std::process::id();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    let mut tree = ProcessTree::new(Path::new(PROC), parent).unwrap();
    assert_eq!(tree.excluded(), Some(me));
    assert!(tree.refresh());
    assert_eq!(tree.pids()[0], parent);
    assert!(!tree.pids().contains(&me), "{:?}", tree.pids());
    let mut with_me = ProcessTree::with_excluded(Path::new(PROC), parent, None).unwrap();
    assert!(with_me.refresh());
    assert!(with_me.pids().contains(&me), "{:?}", with_me.pids());
    // The target itself is never left out.
    let own = ProcessTree::new(Path::new(PROC), me).unwrap();
    assert_eq!((own.excluded(), own.pids()[0]), (None, me));
}

#[test]
fn hostile_process_name_parses_and_helpers_work() {
    let target = python(
        r#"
import time
open("/proc/self/comm", "w").write("foo) Z ")
print("ready", flush=True)
time.sleep(60)
"#,
    );
    let pid = target.0.id();
    let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    let parsed = parse_stat(&stat).unwrap();
    assert_eq!(parsed.comm, b"foo) Z ");
    // Running or about to sleep: the print races the sleep.
    assert!(
        matches!(parsed.state, b'S' | b'R'),
        "{}",
        parsed.state as char
    );
    assert!(ProcRoot::default().is_alive(pid));
    let started = ProcRoot::default().start_time(pid).unwrap();
    let age = std::time::SystemTime::now()
        .duration_since(started)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(30), "{age:?}");
}

#[test]
fn a_missing_target_is_an_error_naming_the_path() {
    let err = ProcessTree::new(Path::new(PROC), u32::MAX - 7).unwrap_err();
    assert!(err.to_string().contains("/task"), "{err}");
}

/// Builds a fake `/proc` with `/proc/PID/task/TID/children` files.
fn fake_proc(dir: &Path, entries: &[(u32, u32, &str)]) {
    for (pid, tid, children) in entries {
        let task = dir.join(format!("{pid}/task/{tid}"));
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("children"), children).unwrap();
    }
}

#[test]
fn fixture_tree_follows_thread_children_and_reopens_a_reused_pid() {
    let dir = tempfile::tempdir().unwrap();
    let proc = dir.path();
    // 100 has two threads; thread 101 forked 300; 200 forked 201.
    fake_proc(
        proc,
        &[
            (100, 100, "200 "),
            (100, 101, "300 "),
            (200, 200, "201 "),
            (201, 201, ""),
            (300, 300, ""),
        ],
    );
    // Fixture PIDs are not this system's: exclude nothing (the test's own PID could be 200).
    let mut tree = ProcessTree::with_excluded(proc, 100, None).unwrap();
    assert_eq!(tree.pids(), &[100, 200, 300, 201]);

    // 200 exits and is reaped (its directory goes away); later a new child of 100 gets PID
    // 200 again, with a child of its own. The stale descriptor must not hide it.
    std::fs::remove_dir_all(proc.join("200")).unwrap();
    std::fs::write(proc.join("100/task/100/children"), "").unwrap();
    assert!(tree.refresh());
    assert_eq!(tree.pids(), &[100, 300]);
    std::fs::write(proc.join("100/task/100/children"), "200 ").unwrap();
    assert!(tree.refresh());
    assert_eq!(tree.pids(), &[100, 300], "not yet created");
    fake_proc(proc, &[(200, 200, "202 "), (202, 202, "")]);
    assert!(tree.refresh());
    assert_eq!(tree.pids(), &[100, 200, 300, 202]);

    // Between two refreshes, 200 exits and a new process takes PID 200 under the same parent:
    // the kept descriptor is stale and must be replaced.
    std::fs::remove_dir_all(proc.join("200")).unwrap();
    fake_proc(proc, &[(200, 200, "203 "), (203, 203, "")]);
    assert!(tree.refresh());
    assert_eq!(tree.pids(), &[100, 200, 300, 203]);

    // The target goes: the tree empties and stays empty even if the PID comes back.
    std::fs::remove_dir_all(proc.join("100")).unwrap();
    assert!(!tree.refresh());
    assert!(tree.pids().is_empty());
    fake_proc(proc, &[(100, 100, "")]);
    assert!(!tree.refresh());
    assert!(tree.pids().is_empty());
}

/// The service sums an unlimited tree's RSS once per `read_every` period, not every tick.
#[test]
fn a_tree_read_every_second_is_idle_between() {
    use watchdog_sampler::{Outcome, Source, Tick};
    const S: u64 = 1_000_000_000;
    let me = [std::process::id()];
    let mut table = ResourceTable::default();
    let mut mem = TreeMemory::new(Path::new(PROC), None, &mut table);
    mem.read_every(std::time::Duration::from_secs(1));
    let mut at = |now_ns: u64| {
        let mut got = Vec::new();
        let outcome = mem
            .sample(&Tick { now_ns, tree: &me }, &mut |s| got.push(s.t_ns))
            .unwrap();
        (outcome, got)
    };
    assert_eq!(at(S), (Outcome::Sampled, vec![S]));
    assert_eq!(at(S + S / 10), (Outcome::Idle, vec![]));
    assert_eq!(at(2 * S - 1), (Outcome::Idle, vec![]));
    assert_eq!(at(2 * S), (Outcome::Sampled, vec![2 * S]));
    assert_eq!(at(2 * S + 1), (Outcome::Idle, vec![]));
}
