//! Measures how much earlier (or later) a cgroup v1 memory threshold wakes `poll()` than the
//! allocating process itself can see the crossing, by reading `memory.usage_in_bytes`
//! after every chunk it allocates. Run as root on a machine with cgroup v1's memory
//! controller: `cargo run --release -p watchdog-kernel-wake --example v1_wake_latency [TRIALS]`.
//!
//! Each trial: a fresh memory cgroup (1 GiB), this program re-run as the allocator and moved
//! into it, a threshold 64 MiB above its usage, then the allocator touches 256 KiB chunks
//! and notes `CLOCK_MONOTONIC` when it first reads a usage at or past the threshold (going
//! on 8 MiB more, as a leak would), while
//! this process notes the same clock when the eventfd wakes it. A positive lead means the
//! kernel woke the watcher first.

#![allow(clippy::print_stdout, reason = "an example prints its measurement")]

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::event::{PollFd, Timespec, poll};
use rustix::time::{ClockId, clock_gettime};
use watchdog_kernel_wake::CgroupV1Threshold;

const MIB: u64 = 1 << 20;
const CHUNK: usize = 256 << 10;
/// How far the allocator goes past the threshold.
const AFTER: u64 = 8 * MIB;

fn now_ns() -> i128 {
    let t = clock_gettime(ClockId::Monotonic);
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// The allocator: allocates until it reads `threshold` in `usage`, prints the time it saw
/// it, and waits to be killed.
fn allocate(usage: &Path, threshold: u64) -> Result<(), String> {
    let file = std::fs::File::open(usage).map_err(|e| format!("{}: {e}", usage.display()))?;
    let mut keep: Vec<Vec<u8>> = Vec::new();
    let mut buf = [0u8; 32];
    let mut seen = None;
    let started = now_ns();
    // A leak goes on past the threshold: the kernel checks thresholds every 128 page
    // charges per CPU, so an allocator that stopped right at the crossing could stop
    // before the check that sees it.
    loop {
        keep.push(vec![1u8; CHUNK]);
        let n = file.read_at(&mut buf, 0).map_err(|e| e.to_string())?;
        let used: u64 = String::from_utf8_lossy(&buf[..n])
            .trim()
            .parse()
            .map_err(|_| "usage not a number".to_string())?;
        if used >= threshold && seen.is_none() {
            seen = Some(now_ns());
        }
        if used >= threshold + AFTER {
            break;
        }
        if keep.len() * CHUNK > 900 * MIB as usize {
            return Err("never reached the threshold".into());
        }
    }
    let took = (now_ns() - started).max(1) as f64 / 1e9;
    let rate = (keep.len() * CHUNK) as f64 / MIB as f64 / took;
    println!("{} {rate:.0}", seen.unwrap_or_default());
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

/// One trial: the lead of the kernel's wake-up over the allocator's own read, in ns, and the
/// allocator's rate in MiB/s.
fn trial(n: usize) -> Result<(i128, f64), String> {
    let dir = PathBuf::from(format!(
        "/sys/fs/cgroup/memory/wd-wake-latency-{}-{n}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = trial_in(&dir);
    for _ in 0..50 {
        if std::fs::remove_dir(&dir).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    result
}

fn trial_in(dir: &Path) -> Result<(i128, f64), String> {
    std::fs::write(dir.join("memory.limit_in_bytes"), (1024 * MIB).to_string())
        .map_err(|e| e.to_string())?;
    let usage_path = dir.join("memory.usage_in_bytes");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let read_usage = || -> Result<u64, String> {
        std::fs::read_to_string(&usage_path)
            .map_err(|e| e.to_string())?
            .trim()
            .parse()
            .map_err(|_| "usage not a number".to_string())
    };
    // The threshold is chosen after the move, from the usage then: the allocator learns it
    // on stdin, which also starts it.
    let mut child = Command::new(&exe)
        .arg("alloc")
        .arg(&usage_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let outcome = (|| {
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string())
            .map_err(|e| e.to_string())?;
        let threshold_at = read_usage()? + 64 * MIB;
        let threshold = CgroupV1Threshold::arm(dir, &[threshold_at]).map_err(|e| e.to_string())?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        writeln!(stdin, "{threshold_at}").map_err(|e| e.to_string())?;
        let mut fds = [PollFd::from_borrowed_fd(
            threshold.fd(),
            CgroupV1Threshold::POLL,
        )];
        let timeout = Timespec {
            tv_sec: 30,
            tv_nsec: 0,
        };
        let ready = poll(&mut fds, Some(&timeout)).map_err(|e| e.to_string())?;
        let woke = now_ns();
        if ready == 0 {
            return Err("no wake-up within 30 s".to_string());
        }
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        let said = || format!("allocator said {line:?}");
        let mut words = line.split_whitespace();
        let seen: i128 = words.next().and_then(|w| w.parse().ok()).ok_or_else(said)?;
        let rate: f64 = words.next().and_then(|w| w.parse().ok()).ok_or_else(said)?;
        Ok((seen - woke, rate))
    })();
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("alloc") {
        // The threshold comes on stdin (after arming), the usage file on the command line.
        let usage = PathBuf::from(args.get(2).cloned().unwrap_or_default());
        let mut line = String::new();
        let threshold = match std::io::stdin().lock().read_line(&mut line) {
            Ok(_) => line.trim().parse().unwrap_or(u64::MAX),
            Err(_) => u64::MAX,
        };
        return match allocate(&usage, threshold) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("allocator: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let trials: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut leads = Vec::new();
    let mut rates = Vec::new();
    for n in 0..trials {
        match trial(n) {
            Ok((lead, rate)) => {
                leads.push(lead);
                rates.push(rate);
            }
            Err(e) => {
                eprintln!("trial {n}: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    leads.sort_unstable();
    rates.sort_by(f64::total_cmp);
    let ms = |ns: i128| ns as f64 / 1e6;
    let at = |q: f64| leads[((leads.len() - 1) as f64 * q).round() as usize];
    println!(
        "kernel wake-up ahead of the allocator's own read, {} trials: median {:.3} ms, p10 {:.3} ms, p90 {:.3} ms, min {:.3} ms, max {:.3} ms (positive: the kernel first)",
        leads.len(),
        ms(at(0.5)),
        ms(at(0.1)),
        ms(at(0.9)),
        ms(leads[0]),
        ms(leads[leads.len() - 1]),
    );
    println!(
        "allocation rate: median {:.0} MiB/s (min {:.0}, max {:.0})",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1]
    );
    std::process::ExitCode::SUCCESS
}
