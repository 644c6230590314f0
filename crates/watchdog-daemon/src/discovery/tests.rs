//! Fixture `/proc` trees in temp dirs. The `stat` and `status` files follow ones captured on
//! this machine (Linux 6.18, `cat /proc/self/stat`, `head /proc/self/status`), with the PID,
//! name, state, parent and start time substituted.
use super::*;

use std::path::Path;

/// `/proc/PID/cgroup` on this machine (cgroup v1 with an empty unified hierarchy: the hybrid
/// layout), captured from a process of this sandbox.
const CGROUP_V1: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n\
    4:memory:/process_api/505795ba22cd43c3815958f6a835523f\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";
/// cgroup v2 only: one `0::$PATH` line, written from the kernel's documentation
/// (`Documentation/admin-guide/cgroup-v2.rst`, "Processes": `0::/test-cgroup/test-cgroup-nested`).
const CGROUP_V2: &str = "0::/test-cgroup/test-cgroup-nested\n";

struct Proc<'a> {
    pid: u32,
    ppid: u32,
    comm: &'a str,
    state: char,
    start: u64,
    cmdline: &'a [&'a str],
    uid: u32,
    cgroup: &'a str,
    environ: &'a [&'a str],
    /// Where its stack starts (field 28 of `stat`; the arguments and environment follow):
    /// what an `exec` moves.
    stack: u64,
}

impl Default for Proc<'_> {
    fn default() -> Self {
        Proc {
            pid: 100,
            ppid: 1,
            comm: "python3",
            state: 'S',
            start: 1000,
            cmdline: &["python3", "train.py"],
            uid: 1000,
            cgroup: CGROUP_V2,
            environ: &["HOME=/home/alice"],
            stack: 140721751821056,
        }
    }
}

fn stat_line(p: &Proc) -> String {
    let Proc {
        pid,
        comm,
        state,
        ppid,
        start,
        stack,
        ..
    } = *p;
    let (args, env, env_end) = (stack + 4064, stack + 4084, stack + 5355);
    format!(
        "{pid} ({comm}) {state} {ppid} {ppid} 31949 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 {start} \
         3133440 384 18446744073709551615 94630498893824 94630498913705 {stack} 0 0 0 0 0 \
         0 0 0 0 17 1 0 0 0 0 0 94630498929712 94630498931328 94630565371904 {args} \
         {env} {env} {env_end} 0\n"
    )
}

fn write(root: &Path, p: &Proc) {
    let dir = root.join(p.pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stat"), stat_line(p)).unwrap();
    let mut cmdline = Vec::new();
    for arg in p.cmdline {
        cmdline.extend_from_slice(arg.as_bytes());
        cmdline.push(0);
    }
    std::fs::write(dir.join("cmdline"), cmdline).unwrap();
    std::fs::write(
        dir.join("status"),
        format!(
            "Name:\t{}\nUmask:\t0022\nState:\t{} (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\n\
             PPid:\t{}\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n\
             FDSize:\t256\nGroups:\t \n",
            p.comm,
            p.state,
            p.ppid,
            pid = p.pid,
            uid = p.uid
        ),
    )
    .unwrap();
    std::fs::write(dir.join("cgroup"), p.cgroup).unwrap();
    let mut environ = Vec::new();
    for var in p.environ {
        environ.extend_from_slice(var.as_bytes());
        environ.push(0);
    }
    std::fs::write(dir.join("environ"), environ).unwrap();
}

/// A machine: init, kthreadd and two kernel threads, a shell, and a zombie.
fn machine() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(
        r,
        &Proc {
            pid: 1,
            ppid: 0,
            comm: "systemd",
            start: 1,
            cmdline: &["/sbin/init"],
            uid: 0,
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 2,
            ppid: 0,
            comm: "kthreadd",
            start: 1,
            cmdline: &[],
            uid: 0,
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 3,
            ppid: 2,
            comm: "rcu_gp",
            start: 1,
            cmdline: &[],
            uid: 0,
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 4,
            ppid: 2,
            comm: "kworker/0:0",
            start: 2,
            cmdline: &[],
            uid: 0,
            ..Default::default()
        },
    );
    // Left out as a child of kthreadd, whatever its command line says.
    write(
        r,
        &Proc {
            pid: 5,
            ppid: 2,
            comm: "odd",
            start: 2,
            cmdline: &["odd"],
            uid: 0,
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 50,
            ppid: 1,
            comm: "bash",
            start: 500,
            cmdline: &["-bash"],
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 60,
            ppid: 50,
            comm: "defunct",
            state: 'Z',
            start: 600,
            cmdline: &[],
            ..Default::default()
        },
    );
    root
}

fn pids(found: &[ProcessFacts]) -> Vec<u32> {
    found.iter().map(|p| p.pid).collect()
}

fn never(_: u32) -> bool {
    false
}

#[test]
fn first_scan_reads_user_processes_and_leaves_out_kernel_threads_and_zombies() {
    let root = machine();
    write(
        root.path(),
        &Proc {
            pid: 70,
            ppid: 50,
            cgroup: CGROUP_V1,
            cmdline: &["python3", "-u", "train.py", "--lr", "0.1"],
            ..Default::default()
        },
    );
    let mut scanner = Scanner::with_excluded(root.path(), None);
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [1, 50, 70]);
    let p = &found[2];
    assert_eq!((p.ppid, p.uid, p.start_ticks), (50, 1000, 1000));
    assert_eq!(p.comm, "python3");
    assert_eq!(p.command, "python3 -u train.py --lr 0.1");
    assert_eq!(
        p.cgroup, "/process_api/505795ba22cd43c3815958f6a835523f",
        "the v1 memory path"
    );
    assert_eq!(
        found[1].cgroup, "/test-cgroup/test-cgroup-nested",
        "the unified path"
    );
    assert_eq!(found[0].uid, 0);
    assert!(scanner.scan(never).is_empty(), "nothing new");
}

#[test]
fn a_new_process_a_reused_pid_and_an_exec_are_new_and_an_exited_one_is_forgotten() {
    let root = machine();
    let r = root.path();
    let mut scanner = Scanner::with_excluded(r, None);
    scanner.scan(never);

    write(
        r,
        &Proc {
            pid: 80,
            ppid: 50,
            ..Default::default()
        },
    );
    assert_eq!(pids(&scanner.scan(never)), [80]);
    assert!(scanner.scan(never).is_empty());

    // PID 80 exits and is reused by a process that started later.
    write(
        r,
        &Proc {
            pid: 80,
            ppid: 50,
            start: 2000,
            ..Default::default()
        },
    );
    assert_eq!(
        pids(&scanner.scan(never)),
        [80],
        "a reused PID is a new process"
    );

    // The shell (PID 50) was seen before it exec'd: its name changed.
    write(
        r,
        &Proc {
            pid: 50,
            ppid: 1,
            comm: "python3",
            start: 500,
            cmdline: &["python3", "x.py"],
            ..Default::default()
        },
    );
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [50], "an exec is seen again");
    assert_eq!(found[0].command, "python3 x.py");

    std::fs::remove_dir_all(r.join("80")).unwrap();
    assert!(scanner.scan(never).is_empty());
    write(
        r,
        &Proc {
            pid: 80,
            ppid: 50,
            start: 2000,
            ..Default::default()
        },
    );
    assert_eq!(
        pids(&scanner.scan(never)),
        [80],
        "an exited process was forgotten"
    );
}

#[test]
fn processes_inside_a_watched_or_excluded_tree_are_not_new_targets() {
    let root = machine();
    let r = root.path();
    write(
        r,
        &Proc {
            pid: 100,
            ppid: 50,
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 101,
            ppid: 100,
            comm: "pt_data_worker",
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 102,
            ppid: 101,
            comm: "sh",
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 200,
            ppid: 50,
            comm: "watchdog",
            ..Default::default()
        },
    );
    write(
        r,
        &Proc {
            pid: 201,
            ppid: 200,
            comm: "sh",
            ..Default::default()
        },
    );
    let mut scanner = Scanner::with_excluded(r, Some(200));
    let found = scanner.scan(|pid| pid == 100);
    assert_eq!(pids(&found), [1, 50]);
    // They were seen: once the watch ends they are not new either.
    assert!(scanner.scan(never).is_empty());
    assert!(scanner.inside_watched_tree(102, |pid| pid == 100));
    assert!(!scanner.inside_watched_tree(50, |pid| pid == 100));
    assert!(
        scanner.inside_watched_tree(201, never),
        "below the excluded PID"
    );
}

/// PIDs wrap: a child may have a smaller PID than its parent.
#[test]
fn parents_come_before_children_and_topmost_takes_the_top_of_each_matching_tree() {
    let root = machine();
    let r = root.path();
    let rank0: &[&str] = &["python3", "train.py", "--rank", "0"];
    let rank1: &[&str] = &["python3", "train.py", "--rank", "1"];
    let procs: &[(u32, u32, &str, &[&str], u64)] = &[
        (900, 50, "torchrun", &["torchrun", "train.py"], 700),
        (30, 900, "python3", rank0, 700),
        (31, 900, "python3", rank1, 701),
        (20, 30, "pt_data_worker", rank0, 702),
        (40, 50, "python3", &["python3", "eval.py"], 703),
    ];
    for &(pid, ppid, comm, cmdline, start) in procs {
        write(
            r,
            &Proc {
                pid,
                ppid,
                comm,
                cmdline,
                start,
                ..Default::default()
            },
        );
    }
    let mut scanner = Scanner::with_excluded(r, None);
    let found = scanner.scan(never);
    let order = pids(&found);
    let at = |pid: u32| order.iter().position(|&p| p == pid).unwrap();
    for (parent, child) in [(1, 50), (50, 900), (900, 30), (900, 31), (30, 20), (50, 40)] {
        assert!(
            at(parent) < at(child),
            "{parent} before {child} in {order:?}"
        );
    }
    let taken = topmost(&found, |p| p.command.contains("train.py").then_some(p.pid));
    assert_eq!(taken.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [900]);
    let taken = topmost(&found, |p| p.command.starts_with("python3").then_some(()));
    let mut took: Vec<u32> = taken.iter().map(|(p, _)| p.pid).collect();
    took.sort_unstable();
    assert_eq!(took, [30, 31, 40], "the worker 20 is below the rank 30");
}

#[test]
fn hostile_and_malformed_files_skip_the_process_never_panic() {
    let root = machine();
    let r = root.path();
    // A name with ") Z 1 2" in it, a long command line with an empty argument.
    let long = "x".repeat(3 * COMMAND_MAX_BYTES);
    write(
        r,
        &Proc {
            pid: 70,
            comm: "evil) Z 1 2",
            cmdline: &["a", "", &long],
            ..Default::default()
        },
    );
    // Malformed stat, status without a Uid line, a directory with no files (vanished).
    write(
        r,
        &Proc {
            pid: 71,
            ..Default::default()
        },
    );
    std::fs::write(r.join("71/stat"), "71 (x\n").unwrap();
    write(
        r,
        &Proc {
            pid: 72,
            ..Default::default()
        },
    );
    std::fs::write(r.join("72/status"), "Name:\tx\n").unwrap();
    std::fs::create_dir(r.join("73")).unwrap();
    write(
        r,
        &Proc {
            pid: 74,
            ..Default::default()
        },
    );
    std::fs::remove_file(r.join("74/cgroup")).unwrap();
    // Not processes.
    std::fs::create_dir(r.join("self")).unwrap();
    std::fs::write(r.join("99999999999"), "").unwrap();
    let mut scanner = Scanner::with_excluded(r, None);
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [1, 50, 70]);
    let p = &found[2];
    assert_eq!(p.comm, "evil) Z 1 2");
    assert_eq!(p.ppid, 1);
    assert_eq!(p.command.len(), COMMAND_MAX_BYTES);
    assert!(p.command.starts_with("a  xxx"), "{}", &p.command[..10]);
}

#[test]
fn the_environment_is_read_lazily_through_the_process_directory() {
    let root = machine();
    let r = root.path();
    write(
        r,
        &Proc {
            pid: 70,
            environ: &["A=1", "WATCHDOG_WATCH=1", "EMPTY=", "=junk", "NOEQUALS"],
            ..Default::default()
        },
    );
    let mut scanner = Scanner::with_excluded(r, None);
    let found = scanner.scan(never);
    let p = found.iter().find(|p| p.pid == 70).unwrap();
    assert!(!p.environ_read());
    assert_eq!(p.env_var("WATCHDOG_WATCH"), Some("1"));
    assert_eq!(p.env_var("EMPTY"), Some(""));
    assert_eq!(p.env_var("NOEQUALS"), None);
    assert!(p.environ_read());

    // An environment past the cap: the variables before it are seen, the cut one is not.
    let big = format!("BIG={}", "y".repeat(ENVIRON_MAX_BYTES));
    write(
        r,
        &Proc {
            pid: 71,
            environ: &["FIRST=1", &big],
            ..Default::default()
        },
    );
    let p = scanner.facts(71).unwrap();
    assert_eq!(p.env_var("FIRST"), Some("1"));
    assert_eq!(p.env_var("BIG"), None);
}

#[test]
fn facts_reads_one_process_again_and_none_when_it_is_gone() {
    let root = machine();
    let r = root.path();
    let mut scanner = Scanner::with_excluded(r, None);
    scanner.scan(never);
    let p = scanner.facts(50).unwrap();
    assert_eq!(p.command, "-bash");
    assert!(scanner.facts(60).is_none(), "a zombie");
    assert!(
        scanner.facts(3).is_none(),
        "a kernel thread: empty command line"
    );
    assert!(scanner.facts(12345).is_none());
}

/// Regression (CI, under load): a registration right after `spawn` returned found the
/// child inside its exec, with no command line yet, and answered "PID is gone".
#[test]
fn facts_reads_a_process_caught_inside_its_exec_again_until_its_command_line_is_there() {
    let root = machine();
    let r = root.path();
    let in_exec = Proc {
        pid: 70,
        cmdline: &[],
        ..Proc::default()
    };
    write(r, &in_exec);
    let mut scanner = Scanner::with_excluded(r, None);
    // The exec completes during the second wait: the command line appears, whole, by rename.
    let mut waits = 0;
    let facts = scanner.facts_waiting(70, || {
        waits += 1;
        if waits == 2 {
            let dir = r.join("70");
            std::fs::write(dir.join("cmdline.new"), b"python3\0train.py\0").unwrap();
            std::fs::rename(dir.join("cmdline.new"), dir.join("cmdline")).unwrap();
        }
        true
    });
    assert_eq!(
        waits, 2,
        "read again after each wait, and no more once it is there"
    );
    assert_eq!(
        facts.map(|f| f.command).as_deref(),
        Some("python3 train.py")
    );

    // An exec that never completes within the wait: `None`, after the wait said stop.
    write(r, &in_exec);
    let mut waits = 0;
    let facts = scanner.facts_waiting(70, || {
        waits += 1;
        waits < 5
    });
    assert!(facts.is_none());
    assert_eq!(waits, 5);
}

#[test]
fn a_proc_root_that_cannot_be_listed_gives_nothing() {
    let mut scanner = Scanner::with_excluded(Path::new("/no/such/proc"), None);
    assert!(scanner.scan(never).is_empty());
}

fn set_last_pid(root: &Path, pid: u32) {
    std::fs::write(
        root.join("loadavg"),
        format!("0.86 1.30 0.95 2/102 {pid}\n"),
    )
    .unwrap();
}

#[test]
fn the_allocation_window_wraps_at_pid_max() {
    let cases: &[(u32, (u32, u32), bool)] = &[
        (5, (4, 6), true),
        (4, (4, 6), false),
        (6, (4, 6), true),
        (7, (4, 6), false),
        (5, (5, 5), false),
        (3, (4000, 10), true),
        (4001, (4000, 10), true),
        (11, (4000, 10), false),
        (4000, (4000, 10), false),
    ];
    for &(pid, window, want) in cases {
        assert_eq!(allocated_since(pid, window), want, "{pid} in {window:?}");
    }
}

/// With `/proc/loadavg`, a known process is read again only when its PID was allocated since
/// the last scan, or while it is young; the fixture changes a `stat` behind the scanner's
/// back to show which reads happen.
#[test]
fn a_known_pid_is_read_again_only_when_allocated_since_or_young() {
    let root = machine();
    let r = root.path();
    set_last_pid(r, 100);
    let mut scanner = Scanner::with_excluded(r, None);
    for _ in 0..=YOUNG_SCANS {
        scanner.scan(never);
    }
    // PID 50 "reused" without any PID allocated: not looked at.
    write(
        r,
        &Proc {
            pid: 50,
            comm: "bash",
            start: 7000,
            cmdline: &["bash"],
            ..Default::default()
        },
    );
    assert!(
        scanner.scan(never).is_empty(),
        "no PID was allocated since the last scan"
    );
    // PIDs wrapped past 50: it is read again and found to be a new process.
    set_last_pid(r, 60);
    assert_eq!(pids(&scanner.scan(never)), [50]);

    // A new process execs one scan after it was first seen, nothing else allocated.
    set_last_pid(r, 80);
    write(
        r,
        &Proc {
            pid: 80,
            ppid: 50,
            comm: "bash",
            cmdline: &["bash"],
            ..Default::default()
        },
    );
    assert_eq!(pids(&scanner.scan(never)), [80]);
    write(
        r,
        &Proc {
            pid: 80,
            ppid: 50,
            comm: "python3",
            cmdline: &["python3", "t.py"],
            ..Default::default()
        },
    );
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [80], "a young process is read on every scan");
    assert_eq!(found[0].command, "python3 t.py");
    // Exited processes are still forgotten.
    std::fs::remove_dir_all(r.join("80")).unwrap();
    scanner.scan(never);
    assert!(
        !scanner.inside_watched_tree(80, |pid| pid == 50),
        "80 is forgotten"
    );
}

/// With no PID allocated since the last listing and no young process, `/proc` is not listed
/// at all; an allocation or a young process brings the listing back.
#[test]
fn a_scan_lists_nothing_while_no_pid_was_allocated_and_nothing_is_young() {
    let root = machine();
    let r = root.path();
    set_last_pid(r, 100);
    let mut scanner = Scanner::with_excluded(r, None);
    let first = scanner.scan(never);
    assert!(!first.is_empty());
    // Young processes (all of the first scan's) keep the listing going ...
    for _ in 1..YOUNG_SCANS {
        scanner.scan(never);
        assert_eq!(scanner.skipped(), 0);
    }
    // ... then nothing is listed while loadavg's last PID stays.
    scanner.scan(never);
    assert_eq!(scanner.skipped(), 1);
    // Shown by a process that appears without an allocation (only a fixture can): unseen.
    let new = Proc {
        pid: 101,
        comm: "python3",
        cmdline: &["python3", "train.py"],
        ..Default::default()
    };
    write(r, &new);
    assert!(scanner.scan(never).is_empty());
    assert_eq!(scanner.skipped(), 2);
    // An allocation: listed, found, and young for the next scans.
    set_last_pid(r, 101);
    assert_eq!(pids(&scanner.scan(never)), [101]);
    scanner.scan(never);
    assert_eq!(scanner.skipped(), 2, "101 is young: listed again");
    // Without loadavg (unknown), every scan lists.
    std::fs::remove_file(r.join("loadavg")).unwrap();
    for _ in 0..=YOUNG_SCANS {
        scanner.scan(never);
    }
    assert_eq!(scanner.skipped(), 2);
}

/// The layout fields of a `stat` line captured here, and of hostile or short ones.
#[test]
fn the_memory_layout_is_read_from_stat_fields_26_to_28_and_48_to_51() {
    let line = stat_line(&Proc {
        comm: "a) b 7 8 9",
        ..Default::default()
    });
    let s = 140721751821056;
    assert_eq!(
        stat_layout(line.as_bytes()),
        [
            94630498893824,
            94630498913705,
            s,
            s + 4064,
            s + 4084,
            s + 4084,
            s + 5355
        ]
    );
    // Before Linux 3.5 the line ends at field 44; a reader without the right to ptrace-read
    // the process sees zeros.
    let short: String = line.split(' ').take(44).collect::<Vec<_>>().join(" ");
    assert_eq!(
        stat_layout(short.as_bytes()),
        [94630498893824, 94630498913705, s, 0, 0, 0, 0]
    );
    assert_eq!(stat_layout(b"1 (x"), [0; 7]);
}

/// Regression (issue 18): `python` execing `python` kept the name, and the process judged
/// before its `exec` (its parent's command line) was never judged again.
#[test]
fn an_exec_that_keeps_the_name_is_returned_again_with_its_new_command_line() {
    let root = machine();
    let r = root.path();
    let mut scanner = Scanner::with_excluded(r, None);
    scanner.scan(never);
    let launcher = Proc {
        pid: 80,
        ppid: 50,
        cmdline: &["python3", "launch.py"],
        ..Default::default()
    };
    write(r, &launcher);
    assert_eq!(pids(&scanner.scan(never)), [80]);
    write(
        r,
        &Proc {
            cmdline: &["python3", "train.py"],
            stack: launcher.stack + 0x7000,
            ..launcher
        },
    );
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [80], "the exec is seen");
    assert_eq!(found[0].command, "python3 train.py");
    assert!(scanner.scan(never).is_empty(), "and judged once");
}

/// The clock tick of now on the boot-time clock, as `starttime` counts.
fn boot_ticks_now() -> u64 {
    Scanner::with_excluded(Path::new("/proc"), None).boot_ticks_now()
}

/// A process younger than [`YOUNG_FOR`] is read on every scan even after its first
/// [`YOUNG_SCANS`] scans and with no PID allocated; an older one only at a sweep.
#[test]
fn a_process_started_lately_is_read_until_it_is_old_and_the_others_at_each_sweep() {
    let root = machine();
    let r = root.path();
    set_last_pid(r, 100);
    let hz = clock_ticks_per_second();
    let lately = Proc {
        pid: 90,
        ppid: 50,
        comm: "sh",
        cmdline: &["sh", "setup.sh"],
        start: boot_ticks_now() - 2 * hz,
        ..Default::default()
    };
    write(r, &lately);
    let mut scanner = Scanner::with_excluded(r, None);
    scanner.scan(never);
    for _ in 0..YOUNG_SCANS {
        assert!(scanner.scan(never).is_empty());
    }
    write(
        r,
        &Proc {
            comm: "python3",
            cmdline: &["python3", "train.py"],
            stack: lately.stack + 0x1000,
            ..lately
        },
    );
    // A process that appears without an allocation (only a fixture can): no PID was
    // allocated, so the scan reads the young processes' `stat` without listing `/proc`.
    write(
        r,
        &Proc {
            pid: 91,
            ..Default::default()
        },
    );
    let found = scanner.scan(never);
    assert_eq!(
        pids(&found),
        [90],
        "an exec 2 s after the start, and no listing"
    );
    std::fs::remove_dir_all(r.join("91")).unwrap();

    // The shell, old and long known, execs with no PID allocated: unseen until a sweep.
    write(
        r,
        &Proc {
            pid: 50,
            comm: "python3",
            start: 500,
            cmdline: &["python3", "late.py"],
            ..Default::default()
        },
    );
    assert!(scanner.scan(never).is_empty(), "no sweep due");
    let mut scanner = scanner.with_sweep_every(Duration::ZERO);
    let found = scanner.scan(never);
    assert_eq!(pids(&found), [50], "a sweep reads every stat");
    assert_eq!(found[0].command, "python3 late.py");
}

/// On the real `/proc`, a scan after PIDs were allocated lists only the PIDs above the last
/// one (the offset checked against the daemon's own PID) and still finds each new process,
/// parents first, and the same process is not returned twice.
#[test]
fn on_the_real_proc_a_scan_lists_only_the_pids_above_the_last_and_finds_the_new() {
    // Not excluding the test itself (the daemon leaves out its own children).
    let mut scanner = Scanner::with_excluded(Path::new("/proc"), None);
    scanner.scan(never);
    assert!(
        scanner.lists_from_pid(),
        "this kernel lists /proc from a PID's offset"
    );
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut found = Vec::new();
    // Other processes of the machine may come first; the child is new in one of the
    // scans that follow its start.
    for _ in 0..3 {
        found.extend(pids(&scanner.scan(never)));
        if found.contains(&pid) {
            break;
        }
    }
    assert!(found.contains(&pid), "{pid} not in {found:?}");
    assert!(!pids(&scanner.scan(never)).contains(&pid), "returned once");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A fixture tree is a plain directory: its offsets are not PIDs, so every scan lists it
/// all (the tests above).
#[test]
fn a_fixture_tree_does_not_list_from_a_pid_offset() {
    let root = machine();
    let mut scanner = Scanner::new(root.path());
    scanner.scan(never);
    assert!(!scanner.lists_from_pid());
}
