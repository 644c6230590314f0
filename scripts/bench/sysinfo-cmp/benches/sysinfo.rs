//! sysinfo's cost for what one watchdog tick reads (host memory, the cgroup, a 10-process
//! tree's RSS, two filesystems), to compare with `cargo bench -p watchdog-sampler`.
//! Run: `cd scripts/bench/sysinfo-cmp && cargo bench`.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::process::{Child, Command, Stdio};

use divan::Bencher;
use sysinfo::{Disks, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

fn main() {
    divan::main();
}

/// `sh` with 9 `sleep` children: a 10-process tree, killed on drop.
struct Tree(Child, Vec<Pid>);

impl Tree {
    fn spawn() -> Self {
        let mut child = Command::new("sh")
            .args(["-c", "for i in 1 2 3 4 5 6 7 8 9; do sleep 600 & done; echo ready; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut buf = [0u8; 6];
        std::io::Read::read_exact(&mut child.stdout.take().expect("stdout"), &mut buf)
            .expect("ready");
        let mut sys = System::new().expect("sysinfo::System::new");
        sys.refresh_processes_specifics(ProcessesToUpdate::All, true, ProcessRefreshKind::nothing());
        let root = Pid::from_u32(child.id());
        let pids = descendants(&sys, root);
        assert_eq!(pids.len(), 10, "{pids:?}");
        Self(child, pids)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for p in &self.1 {
            let _ = Command::new("kill").arg(p.to_string()).status();
        }
        let _ = self.0.wait();
    }
}

/// The root and all its descendants, by parent links of the last full refresh.
fn descendants(sys: &System, root: Pid) -> Vec<Pid> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for (pid, proc_) in sys.processes() {
            if proc_.parent() == Some(p) && !out.contains(pid) {
                out.push(*pid);
            }
        }
        i += 1;
    }
    out
}

#[divan::bench]
fn refresh_memory(b: Bencher) {
    let mut sys = System::new().expect("sysinfo::System::new");
    b.bench_local(|| {
        sys.refresh_memory();
        black_box(sys.available_memory())
    });
}

#[divan::bench]
fn cgroup_limits(b: Bencher) {
    let mut sys = System::new().expect("sysinfo::System::new");
    sys.refresh_memory();
    b.bench_local(|| black_box(sys.cgroup_limits()));
}

/// The tree's RSS when its members are known (no new children are found this way).
#[divan::bench]
fn tree_rss_known_pids(b: Bencher) {
    let t = Tree::spawn();
    let mut sys = System::new().expect("sysinfo::System::new");
    let kind = ProcessRefreshKind::nothing().with_memory();
    b.bench_local(|| {
        sys.refresh_processes_specifics(ProcessesToUpdate::Some(&t.1), false, kind);
        black_box(t.1.iter().filter_map(|p| sys.process(*p)).map(|p| p.memory()).sum::<u64>())
    });
}

/// The tree found again and its RSS: every process on the machine refreshed.
#[divan::bench]
fn tree_rss_rescan_all(b: Bencher) {
    let t = Tree::spawn();
    let root = t.1[0];
    let mut sys = System::new().expect("sysinfo::System::new");
    let kind = ProcessRefreshKind::nothing().with_memory();
    b.bench_local(|| {
        sys.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
        let pids = descendants(&sys, root);
        black_box(pids.iter().filter_map(|p| sys.process(*p)).map(|p| p.memory()).sum::<u64>())
    });
}

/// Both filesystems (sysinfo refreshes every mounted disk it lists).
#[divan::bench]
fn disks_refresh(b: Bencher) {
    let mut disks = Disks::new_with_refreshed_list().expect("sysinfo::Disks");
    b.bench_local(|| {
        disks.refresh(true);
        black_box(disks.iter().map(|d| d.available_space()).sum::<u64>())
    });
}

/// Only the two filesystems the watchdog watches (`/` and `/dev/shm`), each `Disk::refresh`ed.
#[divan::bench]
fn two_disks_refresh(b: Bencher) {
    let mut disks = Disks::new_with_refreshed_list().expect("sysinfo::Disks");
    let want = [std::path::Path::new("/"), std::path::Path::new("/dev/shm")];
    b.bench_local(|| {
        let mut n = 0u64;
        for d in disks.iter_mut() {
            if want.contains(&d.mount_point()) {
                d.refresh();
                n += d.available_space();
            }
        }
        black_box(n)
    });
}

/// One tick's worth: memory, cgroup, the tree rescanned, disks.
#[divan::bench]
fn whole_tick(b: Bencher) {
    let t = Tree::spawn();
    let root = t.1[0];
    let mut sys = System::new().expect("sysinfo::System::new");
    let mut disks = Disks::new_with_refreshed_list().expect("sysinfo::Disks");
    let kind = ProcessRefreshKind::nothing().with_memory();
    b.bench_local(|| {
        sys.refresh_memory();
        black_box(sys.cgroup_limits());
        sys.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
        let pids = descendants(&sys, root);
        black_box(pids.iter().filter_map(|p| sys.process(*p)).map(|p| p.memory()).sum::<u64>());
        disks.refresh(true);
        black_box(disks.len())
    });
}
