//! What one poll costs the poller's thread: CPU time (CLOCK_THREAD_CPUTIME_ID of the asking
//! thread, which does exactly what the poller's thread does) and wall time, per provider,
//! against the local test server of `tests/server` on 127.0.0.1, which closes every
//! connection (so each poll includes a TCP connect; a metadata server that keeps the
//! connection open costs less).
//!
//! `cargo run -p watchdog-notice --release --example poll_cost [-- POLLS]`

#![allow(clippy::print_stdout)] // A measuring tool: its output is the point.

#[path = "../tests/server/mod.rs"]
mod server;

use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};
use watchdog_notice::{Asker, Provider};

fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn main() {
    let polls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    println!("{polls} polls per row, after 50 unmeasured; per poll: median, p90, max");
    for provider in Provider::ALL {
        for announced in [false, true] {
            let server = server::serve(provider);
            if announced {
                server.announce(2_000_000_000.0);
            }
            let mut asker = Asker::new(provider, &server.base_url());
            for _ in 0..50 {
                asker.ask().expect("the local server answers");
            }
            let mut cpu = Vec::with_capacity(polls);
            let mut wall = Vec::with_capacity(polls);
            for _ in 0..polls {
                let (c0, w0) = (thread_cpu(), Instant::now());
                let answer = asker.ask().expect("the local server answers");
                cpu.push(thread_cpu().saturating_sub(c0));
                wall.push(w0.elapsed());
                assert_eq!(answer.is_some(), announced);
            }
            cpu.sort();
            wall.sort();
            println!(
                "{:<5} {:<9} cpu {:>6.1} {:>6.1} {:>7.1} us   wall {:>6.1} {:>6.1} {:>7.1} us",
                provider.as_str(),
                if announced { "notice" } else { "no notice" },
                quantile(&cpu, 0.5).as_secs_f64() * 1e6,
                quantile(&cpu, 0.9).as_secs_f64() * 1e6,
                quantile(&cpu, 1.0).as_secs_f64() * 1e6,
                quantile(&wall, 0.5).as_secs_f64() * 1e6,
                quantile(&wall, 0.9).as_secs_f64() * 1e6,
                quantile(&wall, 1.0).as_secs_f64() * 1e6,
            );
        }
    }
}
