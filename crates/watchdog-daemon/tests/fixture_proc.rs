//! One fixture `/proc`, given as a [`ProcRoot`] to every reader of processes (discovery,
//! the status server's registration check, the sampler's cgroup lookup, the GPU's
//! visible devices, the target's label, the alerter's signal decision): each says what the
//! fixture says, never what the host's `/proc` says about the same PID.
//!
//! The PID is a real child (`sleep`), so the alerter has a process to signal; the fixture
//! (recorded from a `sleep` on this project's CI machine, `crates/watchdog-procfs/fixtures/sleep`)
//! gives it another owner, command line, cgroup, environment and caught-signal mask.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use watchdog_daemon::discovery::Scanner;
use watchdog_procfs::ProcRoot;
use watchdog_sampler::cgroup::{CgroupMounts, locate_for_pid};
use watchdog_status::server::{Peer, may_register};

/// The owner the fixture gives the process (no account on the host has it).
const FIXTURE_UID: u32 = 4242;
/// The memory cgroup of the recorded process.
const FIXTURE_CGROUP: &str = "/process_api/3c2f0c3dd8c1406faa1af32c403512e8";

fn recorded(name: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../watchdog-procfs/fixtures/sleep");
    fs::read_to_string(dir.join(name)).unwrap()
}

/// A proc root holding the recorded `sleep` as `pid`, owned by [`FIXTURE_UID`], running
/// `fixture-train --from-fixture` with `CUDA_VISIBLE_DEVICES=7`, catching SIGUSR1.
fn fixture_proc(pid: u32) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(pid.to_string());
    fs::create_dir(&dir).unwrap();
    let stat = recorded("stat");
    let (_, rest) = stat.split_once(' ').unwrap();
    fs::write(dir.join("stat"), format!("{pid} {rest}")).unwrap();
    let status: String = recorded("status")
        .lines()
        .map(|line| match line.split_once(':') {
            Some(("Tgid" | "Pid" | "NSpid" | "NStgid", _)) => {
                format!("{}:\t{pid}", &line[..line.find(':').unwrap()])
            }
            Some(("Uid", _)) => {
                format!("Uid:\t{FIXTURE_UID}\t{FIXTURE_UID}\t{FIXTURE_UID}\t{FIXTURE_UID}")
            }
            Some(("SigCgt", _)) => format!("SigCgt:\t{:016x}", 1u64 << (libc::SIGUSR1 - 1)),
            _ => line.to_string(),
        })
        .map(|l| l + "\n")
        .collect();
    fs::write(dir.join("status"), status).unwrap();
    fs::write(dir.join("cmdline"), "fixture-train\0--from-fixture\0").unwrap();
    fs::write(dir.join("comm"), recorded("comm")).unwrap();
    fs::write(
        dir.join("environ"),
        recorded("environ") + "CUDA_VISIBLE_DEVICES=7\0",
    )
    .unwrap();
    fs::write(dir.join("cgroup"), recorded("cgroup")).unwrap();
    fs::create_dir(root.path().join("self")).unwrap();
    fs::write(root.path().join("self/mountinfo"), recorded("mountinfo")).unwrap();
    fs::write(root.path().join("loadavg"), "0.00 0.00 0.00 1/1 1\n").unwrap();
    fs::write(root.path().join("uptime"), "19054.35 15524.75\n").unwrap();
    root
}

/// A child ended and reaped when dropped, so a failed assertion leaves no `sleep` behind.
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper() -> Sleeper {
    Sleeper(Command::new("sleep").arg("60").spawn().unwrap())
}

/// Waits (at most 10 s) for `child` to end; its terminating signal, if any.
fn ended_by(child: &mut Child) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(status) = child.try_wait().unwrap() {
            return status.signal();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn every_reader_of_processes_reads_the_given_proc_root_only() {
    let mut child = sleeper();
    let pid = child.0.id();
    let fixture = fixture_proc(pid);
    let root = ProcRoot::new(fixture.path());

    // Discovery: the one process of the fixture, with the fixture's facts.
    let found = Scanner::with_excluded(fixture.path(), None).scan(|_| false);
    let pids: Vec<u32> = found.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [pid], "the host's processes are not in the fixture");
    let p = &found[0];
    assert_eq!(p.uid, FIXTURE_UID);
    assert_eq!(p.command, "fixture-train --from-fixture");
    assert_eq!(p.cgroup, FIXTURE_CGROUP);
    assert_eq!(p.env_var("CUDA_VISIBLE_DEVICES"), Some("7"));

    // The status server: the fixture's owner may register it, no one else.
    let peer = |uid| Peer { pid, uid, gid: 0 };
    may_register(&root, &peer(FIXTURE_UID), pid).unwrap();
    let refused = may_register(&root, &peer(FIXTURE_UID + 1), pid).unwrap_err();
    assert!(
        refused.contains(&format!("belongs to uid {FIXTURE_UID}")),
        "{refused}"
    );

    // The sampler: the fixture's mounts and memory cgroup.
    let mounts = CgroupMounts::read(fixture.path()).unwrap();
    let v1 = mounts.v1_memory.clone().unwrap();
    assert_eq!(v1.mount_point, PathBuf::from("/sys/fs/cgroup/memory"));
    let location = locate_for_pid(fixture.path(), pid, &mounts).unwrap();
    assert_eq!(
        location.dir,
        PathBuf::from(format!("/sys/fs/cgroup/memory{FIXTURE_CGROUP}"))
    );

    // The GPU: the target's visible devices from the fixture's environment.
    #[cfg(feature = "gpu")]
    assert_eq!(
        watchdog_sampler::gpu::VisibleDevices::of_process(&root, pid)
            .cuda
            .as_deref(),
        Some("7")
    );

    // The target's label (status readers, metrics).
    let label = watchdog_watch::target::label(&root, pid);
    assert_eq!(label.uid, FIXTURE_UID);
    assert_eq!(label.command, "fixture-train --from-fixture");

    // The alerter: the host says `sleep` does not catch SIGUSR1 (it would be left alone);
    // the fixture says it does, so it is signalled, and SIGUSR1's default action ends it.
    let report = watchdog_alerter::signal_tree(&root, &[pid], pid, libc::SIGUSR1);
    assert_eq!(report.sent, [pid], "{report:?}");
    assert_eq!(ended_by(&mut child.0), Some(libc::SIGUSR1));
}
