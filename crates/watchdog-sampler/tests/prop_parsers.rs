//! Property tests of the `/proc` and cgroup parsers on arbitrary bytes (meminfo,
//! `/proc/PID/{stat,statm,status,environ,cgroup,mountinfo}`, `/proc/stat`, `/proc/loadavg`,
//! `memory.stat`, v1 and v2 limit files, the GPU variables and `NSpid`): none may panic.
//! And through the sources and the [`Sampler`]: a file that turns malformed is a source
//! failure, handed out once by `take_new_failures` (which the binary turns into an
//! `unwatched` event), with a one-line reason. See `docs/testing.md` for the long run.
#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use std::path::{Path, PathBuf};

use prop_support::{arbitrary_bytes, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_procfs::{
    cgroup_lines, command_line, parse_children, parse_environ, parse_loadavg_change_key,
    parse_mountinfo, parse_stat, parse_statm_resident_pages, parse_status, parse_uptime,
};
use watchdog_sampler::cgroup::{
    CgroupMemory, CgroupMounts, locate, normalize_v1_limit, parse_proc_cgroup, parse_v2_limit,
    stat_value,
};
use watchdog_sampler::meminfo::{HostMemory, parse_meminfo};
use watchdog_sampler::procfile::{key_value_lines, parse_u64};
use watchdog_sampler::shared::Reads;
use watchdog_sampler::{ResourceTable, Sampler, Source, SourceError};
use watchdog_testsupport::copy_tree;

/// `unexpected contents in PATH: ...` with a temporary path, without what it quotes.
const FIXED: usize = 200;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn captured(rel: &str) -> String {
    std::fs::read_to_string(fixtures().join(rel)).unwrap()
}

/// Every pure parser of a kernel file, on the same bytes.
fn parse_everything(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let info = parse_meminfo(bytes);
    let _ = (info.host_memory(), info.swap());
    if let Some(stat) = parse_stat(bytes) {
        assert!(stat.comm.len() < bytes.len());
    }
    parse_children(bytes, |_| {});
    let _ = parse_statm_resident_pages(bytes);
    let _ = parse_status(bytes);
    let _ = parse_environ(bytes);
    let _ = command_line(bytes);
    let _ = cgroup_lines(&text).count();
    let _ = parse_mountinfo(&text);
    let _ = parse_uptime(bytes);
    let _ = parse_loadavg_change_key(bytes);
    let _ = parse_u64(bytes);
    let _ = key_value_lines(bytes).count();
    for key in [
        "total_inactive_file",
        "inactive_file",
        "hierarchical_memory_limit",
        "",
    ] {
        let _ = stat_value(bytes, key);
    }
    let _ = parse_v2_limit(bytes).map(normalize_v1_limit);
    let proc_cgroup = parse_proc_cgroup(&text);
    let mounts = CgroupMounts::from_mountinfo(&text);
    for v2 in [false, true] {
        let _ = locate(&proc_cgroup, &mounts, v2);
        let _ = locate(
            &proc_cgroup,
            &CgroupMounts::standard(Path::new("/sys/fs/cgroup")),
            v2,
        );
    }
    #[cfg(feature = "gpu")]
    {
        use watchdog_sampler::gpu::{
            VisibleDevices, parse_cuda_visible_devices, parse_nvidia_visible_devices,
        };
        let _ = parse_cuda_visible_devices(&text);
        let _ = parse_nvidia_visible_devices(&text);
        let devices = VisibleDevices {
            cuda: Some(text.to_string()),
            nvidia: Some(text.to_string()),
        };
        let _ = devices.select(&["GPU-0a1b", "GPU-ffff", "MIG-1"]);
        let _ = devices.describe();
    }
}

/// Real files as the kernel writes them, to mutate.
fn kernel_files() -> Vec<String> {
    let v1 = "v1/sys/fs/cgroup/memory/process_api/49e997277498700c6d5edf8dd24f987d/wd-cap/job/";
    vec![
        captured("meminfo.txt"),
        captured("v1/proc/4242/cgroup"),
        captured("v1/proc/4242/mountinfo"),
        captured("v2/proc/4242/mountinfo"),
        captured(&format!("{v1}memory.stat")),
        "4242 (python3) S 1 4242 4242 0 -1 4194560 2181 0 0 0 6 1 0 0 20 0 1 0 352 14090240 2303 18446744073709551615 1 1 0 0 0 0 0 16781312 1266777851 0 0 0 17 1 0 0 0 0 0\n".into(),
        "4242 (a) Z 1 2) S 1 4242 4242 0 -1 4194560 2181 0 0 0 6 1 0 0 20 0 3 0 352 14090240\n".into(),
        "3433 2303 1573 1 0 387 0\n".into(),
        "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t1\nSigCgt:\t0000000180000200\n".into(),
        "0.86 1.30 0.95 2/102 15967\n".into(),
        "350735.47 234388.90\n".into(),
        "max\n".into(),
        "PATH=/usr/bin\0CUDA_VISIBLE_DEVICES=1,GPU-0a1b,MIG-1\0NVIDIA_VISIBLE_DEVICES=all\0".into(),
    ]
}

/// `kernel_files` with 0-5 hostile edits.
fn near_kernel_file() -> impl Strategy<Value = Vec<u8>> {
    let files: &'static [&'static str] = Box::leak(
        kernel_files()
            .into_iter()
            .map(|f| &*Box::leak(f.into_boxed_str()))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    near_valid(files).prop_map(String::into_bytes)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_proc_and_cgroup_parsers_arbitrary_bytes(bytes in arbitrary_bytes()) {
        parse_everything(&bytes);
    }

    #[test]
    fn prop_proc_and_cgroup_parsers_near_valid(bytes in near_kernel_file()) {
        parse_everything(&bytes);
    }

    /// Whatever meminfo turns into, the source samples or fails with a one-line reason.
    #[test]
    fn prop_meminfo_source_on_any_file(bytes in prop_oneof![arbitrary_bytes(), near_kernel_file()]) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), captured("meminfo.txt")).unwrap();
        let mut table = ResourceTable::default();
        let mut source = HostMemory::new(dir.path(), &Reads::Own, &mut table).unwrap();
        std::fs::write(dir.path().join("meminfo"), &bytes).unwrap();
        let sampled = source.sample(&tick(), &mut |_| {});
        if let Err(e) = sampled {
            check_message(&e.to_string(), &String::from_utf8_lossy(&bytes), FIXED + dir.path().as_os_str().len())?;
        }
        if let Err(e) = HostMemory::new(dir.path(), &Reads::Own, &mut table) {
            check_message(&e.to_string(), &String::from_utf8_lossy(&bytes), FIXED + dir.path().as_os_str().len())?;
        }
    }

    /// Whatever a v1 cgroup's usage, stat or limit file turns into, the source samples or
    /// fails with a one-line reason.
    #[test]
    fn prop_cgroup_source_on_any_file(
        which in proptest::sample::select(&["memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes"][..]),
        bytes in prop_oneof![arbitrary_bytes(), near_kernel_file()],
    ) {
        // One copy per test thread; the file is put back after each case.
        thread_local! {
            static V1: std::cell::RefCell<(tempfile::TempDir, CgroupMemory)> =
                std::cell::RefCell::new(v1_cgroup_copy());
        }
        V1.with_borrow_mut(|(dir, source)| {
            let file = job_dir(dir.path()).join(which);
            let good = std::fs::read(&file).unwrap();
            std::fs::write(&file, &bytes).unwrap();
            let sampled = source.sample(&tick(), &mut |_| {});
            std::fs::write(&file, good).unwrap();
            match sampled {
                Err(e) => check_message(&e.to_string(), &String::from_utf8_lossy(&bytes), FIXED + dir.path().as_os_str().len()),
                Ok(_) => Ok(()),
            }
        })?;
    }
}

fn tick() -> watchdog_sampler::Tick<'static> {
    watchdog_sampler::Tick {
        now_ns: 1,
        tree: &[],
    }
}

fn job_dir(root: &Path) -> PathBuf {
    root.join("sys/fs/cgroup/memory/process_api/49e997277498700c6d5edf8dd24f987d/wd-cap/job")
}

/// The captured v1 fixture copied to a temporary tree (so it may be broken), and the
/// cgroup source opened on it. The job's own limit file is the one read (the fixture's
/// `hierarchical_memory_limit` is removed from its `memory.stat`).
fn v1_cgroup_copy() -> (tempfile::TempDir, CgroupMemory) {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("v1"), dir.path());
    let stat = job_dir(dir.path()).join("memory.stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("hierarchical_memory_limit"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&stat, kept).unwrap();
    let mounts = CgroupMounts::standard(&dir.path().join("sys/fs/cgroup"));
    let mut table = ResourceTable::default();
    let source = CgroupMemory::for_pid(
        &dir.path().join("proc"),
        4242,
        &mounts,
        &Reads::Own,
        &mut table,
    )
    .unwrap();
    (dir, source)
}

/// A sampler over this test's own process tree with `sources`; every tick's new failures.
fn sampler_with(sources: Vec<Box<dyn Source>>) -> Sampler {
    let (sampler, _reader) =
        Sampler::for_target(Path::new("/proc"), std::process::id(), sources, 64).unwrap();
    sampler
}

fn new_failures(sampler: &mut Sampler, now_ns: u64) -> Vec<(String, String, bool)> {
    sampler.tick(now_ns);
    let mut failures = Vec::new();
    sampler.take_new_failures(|name, e| {
        failures.push((
            name.to_string(),
            e.to_string(),
            matches!(e, SourceError::Parse { .. }),
        ))
    });
    failures
}

/// A meminfo that loses its MemAvailable line mid-run is one failure of `meminfo` (the
/// binary's `unwatched` event), reported once, then a recovery when it is back.
#[test]
fn a_malformed_meminfo_is_one_source_failure_through_the_sampler() {
    let dir = tempfile::tempdir().unwrap();
    let meminfo = dir.path().join("meminfo");
    std::fs::write(&meminfo, captured("meminfo.txt")).unwrap();
    let mut table = ResourceTable::default();
    let host = HostMemory::new(dir.path(), &Reads::Own, &mut table).unwrap();
    let mut sampler = sampler_with(vec![Box::new(host)]);
    assert_eq!(new_failures(&mut sampler, 1), vec![]);
    std::fs::write(&meminfo, "MemTotal: lots\nMemAvailable:\n\0\u{1b}garbage").unwrap();
    let failures = new_failures(&mut sampler, 2);
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (name, reason, parse) = &failures[0];
    assert_eq!(name, "meminfo");
    assert!(parse, "{reason}");
    assert!(
        reason.contains(&meminfo.display().to_string()) && !reason.contains('\n'),
        "{reason}"
    );
    assert_eq!(new_failures(&mut sampler, 3), vec![], "reported once");
    std::fs::write(&meminfo, captured("meminfo.txt")).unwrap();
    sampler.tick(5_000_000_000);
    let mut recovered = Vec::new();
    sampler.take_recoveries(|name| recovered.push(name.to_string()));
    assert_eq!(recovered, ["meminfo"]);
}

/// A cgroup usage file that is not a number is one failure of `cgroup`, whose reason
/// quotes what was found on one line (it used to quote it raw, line breaks and all).
#[test]
fn a_malformed_cgroup_file_is_one_source_failure_with_a_one_line_reason() {
    let (dir, source) = v1_cgroup_copy();
    let mut sampler = sampler_with(vec![Box::new(source)]);
    assert_eq!(new_failures(&mut sampler, 1), vec![]);
    std::fs::write(
        job_dir(dir.path()).join("memory.usage_in_bytes"),
        "12\n34 \u{1b}[2J\n",
    )
    .unwrap();
    let failures = new_failures(&mut sampler, 2);
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (name, reason, parse) = &failures[0];
    assert_eq!(name, "cgroup");
    assert!(parse, "{reason}");
    assert!(reason.contains("memory.usage_in_bytes"), "{reason}");
    assert!(!reason.contains(['\n', '\u{1b}']), "{reason:?}");
    assert!(reason.contains("found '12\\n34 \\u{1b}[2J'"), "{reason:?}");
}
