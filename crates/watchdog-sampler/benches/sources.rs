//! One sample of each source against the raw floor (a single `pread` of the same file from a
//! descriptor already open), plus the process tree at 1/10/50 processes, the ring and a whole
//! tick. Run: `cargo bench -p watchdog-sampler --bench sources`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use divan::Bencher;
use rustix::fs::{Mode, OFlags};
use watchdog_sampler::cgroup::{CgroupMemory, CgroupMounts, locate_for_pid};
use watchdog_sampler::disk::Filesystem;
use watchdog_sampler::meminfo::HostMemory;
use watchdog_sampler::procfile::KeptOpenFile;
use watchdog_sampler::ring::SampleRing;
use watchdog_sampler::runtime::Runtime;
use watchdog_sampler::shared::Reads;
use watchdog_sampler::tree::{ProcessTree, TreeMemory};
use watchdog_sampler::{ResourceTable, Sampler, Source, Tick};
use watchdog_types::{ResourceId, Sample};

fn main() {
    divan::main();
}

const PROC: &str = "/proc";

fn fixtures(v: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(v)
}

fn sample(src: &mut dyn Source) {
    let tick = Tick {
        now_ns: 1,
        tree: &[],
    };
    src.sample(&tick, &mut |s| {
        black_box(s);
    })
    .unwrap();
}

/// A single `pread` at offset 0 from an open descriptor: the floor every source sits on.
fn floor(bencher: Bencher, path: &Path) {
    let fd: OwnedFd = rustix::fs::open(path, OFlags::RDONLY, Mode::empty()).unwrap();
    let mut buf = vec![0u8; 4096];
    bencher.bench_local(|| rustix::io::pread(&fd, &mut buf[..], 0).unwrap());
}

mod floor {
    use super::*;

    #[divan::bench]
    fn meminfo(b: Bencher) {
        floor(b, Path::new("/proc/meminfo"));
    }

    #[divan::bench]
    fn statm(b: Bencher) {
        floor(b, Path::new("/proc/self/statm"));
    }

    #[divan::bench]
    fn task_children(b: Bencher) {
        floor(
            b,
            &PathBuf::from(format!("/proc/self/task/{}/children", std::process::id())),
        );
    }

    #[divan::bench]
    fn cgroup_real_usage(b: Bencher) {
        floor(b, &real_cgroup_dir().join(usage_file()));
    }

    #[divan::bench]
    fn cgroup_real_stat(b: Bencher) {
        floor(b, &real_cgroup_dir().join("memory.stat"));
    }

    #[divan::bench]
    fn fstatvfs(b: Bencher) {
        let fd = rustix::fs::open("/", OFlags::PATH, Mode::empty()).unwrap();
        b.bench_local(|| rustix::fs::fstatvfs(&fd).unwrap());
    }
}

fn real_mounts() -> CgroupMounts {
    CgroupMounts::read(Path::new(PROC)).unwrap()
}

fn real_cgroup_dir() -> PathBuf {
    locate_for_pid(Path::new(PROC), std::process::id(), &real_mounts())
        .unwrap()
        .dir
}

fn usage_file() -> &'static str {
    if real_mounts().v1_memory.is_some() {
        "memory.usage_in_bytes"
    } else {
        "memory.current"
    }
}

mod source {
    use super::*;

    #[divan::bench]
    fn meminfo(b: Bencher) {
        let mut src =
            HostMemory::new(Path::new(PROC), &Reads::Own, &mut ResourceTable::default()).unwrap();
        b.bench_local(|| sample(&mut src));
    }

    #[divan::bench(args = ["v1", "v2"])]
    fn cgroup_fixture(b: Bencher, v: &str) {
        let root = fixtures(v);
        let mounts = CgroupMounts::standard(&root.join("sys/fs/cgroup"));
        let mut src = CgroupMemory::for_pid(
            &root.join("proc"),
            4242,
            &mounts,
            &Reads::Own,
            &mut ResourceTable::default(),
        )
        .unwrap();
        b.bench_local(|| sample(&mut src));
    }

    #[divan::bench]
    fn cgroup_real(b: Bencher) {
        let mut src = CgroupMemory::for_pid(
            Path::new(PROC),
            std::process::id(),
            &real_mounts(),
            &Reads::Own,
            &mut ResourceTable::default(),
        )
        .unwrap();
        b.bench_local(|| sample(&mut src));
    }

    #[divan::bench]
    fn statvfs(b: Bencher) {
        let mut src =
            Filesystem::new(Path::new("/"), false, &mut ResourceTable::default()).unwrap();
        b.bench_local(|| sample(&mut src));
    }

    #[divan::bench]
    fn kept_open_read_meminfo(b: Bencher) {
        let mut f = KeptOpenFile::open("/proc/meminfo").unwrap();
        b.bench_local(|| black_box(f.read().unwrap().len()));
    }
}

/// A target with `n - 1` descendants (`sh` and its `sleep`s), killed on drop.
struct Tree(Child);

impl Tree {
    fn spawn(n: usize) -> Self {
        let script = format!(
            "for i in $(seq 1 {}); do sleep 600 & done; echo ready; wait",
            n - 1
        );
        let mut child = Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut buf = [0u8; 6];
        std::io::Read::read_exact(&mut out, &mut buf).unwrap();
        let me = Self(child);
        let mut tree = ProcessTree::new(Path::new(PROC), me.0.id()).unwrap();
        for _ in 0..500 {
            if tree.refresh() && tree.pids().len() == n {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(tree.pids().len(), n);
        me
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the group is the one setsid made.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

mod tree {
    use super::*;

    #[divan::bench(args = [1, 10, 50])]
    fn refresh(b: Bencher, n: usize) {
        let t = Tree::spawn(n);
        let mut tree = ProcessTree::new(Path::new(PROC), t.0.id()).unwrap();
        b.bench_local(|| tree.refresh());
        assert_eq!(tree.pids().len(), n);
    }

    #[divan::bench(args = [1, 10, 50])]
    fn rss_sum(b: Bencher, n: usize) {
        let t = Tree::spawn(n);
        let tree = ProcessTree::new(Path::new(PROC), t.0.id()).unwrap();
        let mut mem = TreeMemory::new(Path::new(PROC), None, &mut ResourceTable::default());
        let pids = tree.pids().to_vec();
        b.bench_local(|| black_box(mem.rss_sum(&pids)));
    }

    /// The refresh of a single process with many threads (a PyTorch trainer has dozens).
    #[divan::bench(args = [1, 16, 64])]
    fn refresh_threads(b: Bencher, threads: usize) {
        let mut child = Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import threading, time\n\
                     for _ in range({}): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n\
                     print('ready', flush=True)\ntime.sleep(600)",
                    threads - 1
                ),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut buf = [0u8; 6];
        std::io::Read::read_exact(&mut child.stdout.take().unwrap(), &mut buf).unwrap();
        let mut tree = ProcessTree::new(Path::new(PROC), child.id()).unwrap();
        b.bench_local(|| tree.refresh());
        let _ = child.kill();
        let _ = child.wait();
    }
}

mod ring {
    use super::*;

    #[divan::bench]
    fn push_and_drain_one(b: Bencher) {
        let (mut w, mut r) = SampleRing::new(1024);
        let s = Sample {
            resource: ResourceId(1),
            t_ns: 1,
            used: 2,
            limit: 3,
        };
        b.bench_local(|| {
            w.push(black_box(s));
            r.drain(|x| {
                black_box(x);
            })
        });
    }

    #[divan::bench]
    fn push_and_drain_eight(b: Bencher) {
        let (mut w, mut r) = SampleRing::new(1024);
        let s = Sample::default();
        b.bench_local(|| {
            for _ in 0..8 {
                w.push(black_box(s));
            }
            r.drain(|x| {
                black_box(x);
            })
        });
    }
}

/// The issue-6 configuration: host memory + the real cgroup + a 10-process tree + 2
/// filesystems + runtime, one whole `Sampler::tick` and drain.
#[divan::bench]
fn whole_tick(b: Bencher) {
    let t = Tree::spawn(10);
    let proc = Path::new(PROC);
    let mut table = ResourceTable::default();
    let tree = ProcessTree::new(proc, t.0.id()).unwrap();
    let (w, mut r) = SampleRing::new(4096);
    let mut sampler = Sampler::new(tree, w);
    sampler.add_source(Box::new(
        HostMemory::new(proc, &Reads::Own, &mut table).unwrap(),
    ));
    sampler.add_source(Box::new(
        CgroupMemory::for_pid(
            proc,
            std::process::id(),
            &real_mounts(),
            &Reads::Own,
            &mut table,
        )
        .unwrap(),
    ));
    sampler.add_source(Box::new(TreeMemory::new(proc, None, &mut table)));
    for p in ["/", "/dev/shm"] {
        sampler.add_source(Box::new(
            Filesystem::new(Path::new(p), false, &mut table).unwrap(),
        ));
    }
    sampler.add_source(Box::new(Runtime::new(
        SystemTime::now(),
        Duration::from_secs(3600),
        "bench".into(),
        &mut table,
    )));
    let mut now = 0;
    b.bench_local(|| {
        now += 1;
        sampler.tick(now);
        r.drain(|s| {
            black_box(s);
        })
    });
    assert_eq!(sampler.tree_pids().len(), 10);
}
