//! The cost of a discovery scan of the real `/proc` with about 300 processes: `sleep`s are
//! started to bring the machine's count up to [`TARGET_PROCESSES`] and ended afterwards.
//! The sleeps are left to age past [`YOUNG_FOR`] first. `steady` is the usual scan (every
//! process seen before: the listing, and the `stat` of PIDs allocated since); `sweep` reads
//! every `stat`, as a scan does every `SWEEP_EVERY`; `first` is the daemon's
//! first scan (every process new: its `cmdline`, `status` and `cgroup` read too). Run:
//! `cargo bench -p watchdog-daemon --bench scan`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use divan::Bencher;
use watchdog_daemon::discovery::{Scanner, YOUNG_FOR};

const TARGET_PROCESSES: usize = 300;

fn process_count() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter(|e| {
            e.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
        })
        .count()
}

fn main() {
    let extra = TARGET_PROCESSES.saturating_sub(process_count());
    let mut children: Vec<Child> = (0..extra)
        .map(|_| {
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eprintln!(
        "{} processes in /proc ({extra} sleeps started); waiting {} s for them to age",
        process_count(),
        YOUNG_FOR.as_secs()
    );
    std::thread::sleep(YOUNG_FOR);
    divan::main();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[divan::bench]
fn steady(bencher: Bencher) {
    // Not excluded: the sleeps are this process's children.
    let mut scanner = Scanner::with_excluded(Path::new("/proc"), None);
    scanner.scan(|_| false);
    bencher.bench_local(|| scanner.scan(|_| false));
}

#[divan::bench]
fn sweep(bencher: Bencher) {
    let mut scanner =
        Scanner::with_excluded(Path::new("/proc"), None).with_sweep_every(Duration::ZERO);
    scanner.scan(|_| false);
    bencher.bench_local(|| scanner.scan(|_| false));
}

#[divan::bench]
fn first(bencher: Bencher) {
    bencher.bench_local(|| Scanner::with_excluded(Path::new("/proc"), None).scan(|_| false));
}
