//! Once warm, `Sampler::tick` allocates nothing: host memory, cgroup v1 and v2 fixtures, a
//! tree of real processes with its RSS, a filesystem and the runtime clock, counted by a
//! global allocator that counts allocations made on the sampling thread.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use watchdog_sampler::cgroup::{CgroupMemory, CgroupMounts};
use watchdog_sampler::disk::Filesystem;
use watchdog_sampler::meminfo::HostMemory;
use watchdog_sampler::ring::SampleRing;
use watchdog_sampler::runtime::Runtime;
use watchdog_sampler::shared::{Reads, SharedReads};
use watchdog_sampler::tree::{ProcessTree, TreeMemory};
use watchdog_sampler::{ResourceTable, Sampler};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // try_with: the thread-locals may be gone while a thread is torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

#[test]
fn tick_allocates_nothing_once_warm() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let proc = Path::new("/proc");
    // A target with four children, one of them with its own child.
    let mut child = Command::new("setsid")
        .args([
            "python3",
            "-c",
            "import subprocess, time\n\
             k = [subprocess.Popen(['sleep', '60']) for _ in range(3)]\n\
             sh = subprocess.Popen(['sh', '-c', 'sleep 60 & wait'])\n\
             kids = f'/proc/{sh.pid}/task/{sh.pid}/children'\n\
             give_up = time.monotonic() + 30\n\
             while not open(kids).read().strip() and time.monotonic() < give_up:\n\
             \x20   time.sleep(0.01)\n\
             print('ready', flush=True)\ntime.sleep(60)",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let target = child.id();

    let mut table = ResourceTable::default();
    let tree = ProcessTree::new(proc, target).unwrap();
    let (writer, mut reader) = SampleRing::new(1024);
    let mut sampler = Sampler::new(tree, writer);
    sampler.add_source(Box::new(
        HostMemory::new(proc, &Reads::Own, &mut table).unwrap(),
    ));
    for v in ["v1", "v2"] {
        let root = fixtures.join(v);
        let mounts = CgroupMounts::standard(&root.join("sys/fs/cgroup"));
        let cg = CgroupMemory::for_pid(&root.join("proc"), 4242, &mounts, &Reads::Own, &mut table)
            .unwrap();
        sampler.add_source(Box::new(cg));
    }
    sampler.add_source(Box::new(TreeMemory::new(proc, Some(1 << 30), &mut table)));
    let dir = tempfile::tempdir().unwrap();
    sampler.add_source(Box::new(
        Filesystem::new(dir.path(), false, &mut table).unwrap(),
    ));
    sampler.add_source(Box::new(Runtime::new(
        SystemTime::now() - Duration::from_secs(5),
        Duration::from_secs(3600),
        "--max-runtime 1h".into(),
        &mut table,
    )));
    // The same sources again, twice, read through a service's shared reads.
    let shared = SharedReads::new();
    let reads = Reads::Shared(shared.clone());
    for _ in 0..2 {
        sampler.add_source(Box::new(HostMemory::new(proc, &reads, &mut table).unwrap()));
        let root = fixtures.join("v2");
        let mounts = CgroupMounts::standard(&root.join("sys/fs/cgroup"));
        let cg = CgroupMemory::for_pid(&root.join("proc"), 4242, &mounts, &reads, &mut table);
        sampler.add_source(Box::new(cg.unwrap()));
        let fs = Filesystem::with_aliases(dir.path(), &[], false, &reads, &mut table);
        sampler.add_source(Box::new(fs.unwrap()));
    }
    sampler.tree_mut().read_loadavg_through(&reads);

    // The counter works: a Vec allocates.
    assert_eq!(
        allocations_during(|| drop(std::hint::black_box(vec![1u8; 3]))),
        1
    );

    let mut t = 0u64;
    let mut samples = 0usize;
    for _ in 0..5 {
        t += 10_000_000;
        shared.next_tick();
        sampler.tick(t);
        reader.drain(|_| samples += 1);
    }
    assert_eq!(sampler.tree_pids().len(), 6, "{:?}", sampler.tree_pids());
    let n = allocations_during(|| {
        for _ in 0..200 {
            t += 10_000_000;
            shared.next_tick();
            let report = sampler.tick(t);
            assert_eq!(report.newly_failed, 0);
            reader.drain(|_| samples += 1);
        }
    });
    // SAFETY: kill has no memory preconditions; the group is the one setsid made for the target.
    unsafe { libc::kill(-(target as i32), libc::SIGKILL) };
    let _ = child.wait();
    assert!(sampler.sources().all(|(_, e)| e.is_none()));
    assert!(samples > 200 * 6, "{samples} samples");
    assert_eq!(n, 0, "Sampler::tick allocated {n} times in 200 warm ticks");
}
