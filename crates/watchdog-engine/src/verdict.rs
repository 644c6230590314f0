//! Why the run ended: a pure function from what the watchdog saw (the exit status, the
//! cgroup's OOM-kill counter, the kernel's log, each resource's last figures) to a
//! verdict with its evidence. It never guesses: without evidence it says so.

use watchdog_types::ResourceKind;
pub use watchdog_types::VerdictKind;
use watchdog_types::units::{format_bytes, format_duration_s, signal_name};

use crate::TargetExit;

/// The last figures of one resource before the exit.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceEnd {
    /// Resource name (`cgroup_memory`, `disk:/data`, `gpu0`).
    pub name: String,
    /// Its kind.
    pub kind: ResourceKind,
    /// Highest usage in the last few seconds before the exit.
    pub recent_peak: u64,
    /// Usage at the last sample.
    pub last_used: u64,
    /// Limit at the last sample (`u64::MAX`: none).
    pub limit: u64,
    /// Seconds before the exit that the last sample was taken.
    pub age_s: f64,
}

impl ResourceEnd {
    fn fraction(&self, used: u64) -> f64 {
        if self.limit == 0 || self.limit == u64::MAX {
            0.0
        } else {
            used as f64 / self.limit as f64
        }
    }
}

/// Everything the diagnosis looks at.
#[derive(Debug, Clone, Default)]
pub struct ExitFacts {
    /// How the target ended (`None`: not known).
    pub exit: Option<TargetExit>,
    /// The memory cgroup's OOM-kill counter at the start and at the end.
    pub oom_kills: Option<(u64, u64)>,
    /// A kernel log line about an OOM kill of a process of the tree.
    pub kernel_oom_line: Option<String>,
    /// Each resource's last figures.
    pub resources: Vec<ResourceEnd>,
    /// The signal the watchdog sent the target itself, if it sent one.
    pub sent_signal: Option<i32>,
    /// How the scheduler says the job ended, when it says (the SLURM controller).
    pub scheduler: Option<SchedulerEnd>,
}

/// The end of a job as its scheduler reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerEnd {
    /// `RuntimeLimit`, `Cancelled` or `Preempted`.
    pub kind: VerdictKind,
    /// What it said, for the evidence (`the SLURM controller reports job 12 TIMEOUT
    /// (TimeLimit)`).
    pub said: String,
    /// Announced ahead (a cloud provider's preemption notice): the verdict even when the
    /// run then exits 0, since it ended of the notice; a controller's word after the exit
    /// yields to a clean exit.
    pub announced: bool,
}

/// A CUDA out-of-memory error as the run's client reported it, with what the watchdog
/// knew of the device then.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CudaOom {
    /// The step that failed.
    pub step: Option<u64>,
    /// Its phase.
    pub phase: Option<watchdog_types::Phase>,
    /// The error's message (cut by the client).
    pub message: Option<String>,
    /// The allocator's allocated bytes then.
    pub allocated: Option<u64>,
    /// The allocator's reserved bytes then.
    pub reserved: Option<u64>,
    /// The allocator's peak bytes in the step.
    pub peak: Option<u64>,
    /// What the allocator could have on the device (total − others − outside the
    /// allocator), from the last step report the watchdog took.
    pub available: Option<u64>,
    /// The GPU resource of the device (`gpu0`), when NVML lists it.
    pub resource: Option<String>,
    /// The last-chance checkpoint, when the client acknowledged one.
    pub saved_path: Option<String>,
    /// The step that checkpoint holds.
    pub saved_step: Option<u64>,
    /// Whether a last-chance save was acknowledged (with or without a path).
    pub saved: bool,
}

impl CudaOom {
    /// `CUDA out of memory at step 121 (training) on gpu0: peak 2.95 GiB, 3.00 GiB
    /// reserved, 3.50 GiB available`, with what is known.
    pub fn sentence(&self) -> String {
        let mut s = "CUDA out of memory".to_string();
        if let Some(step) = self.step {
            s.push_str(&format!(" at step {step}"));
        }
        if let Some(phase) = self.phase {
            s.push_str(match phase {
                watchdog_types::Phase::Train => " (training)",
                watchdog_types::Phase::Eval => " (evaluation)",
                watchdog_types::Phase::Other => "",
            });
        }
        if let Some(r) = &self.resource {
            s.push_str(&format!(" on {r}"));
        }
        let figures: Vec<String> = [
            self.peak.map(|b| format!("peak {}", format_bytes(b))),
            self.reserved
                .map(|b| format!("{} reserved", format_bytes(b))),
            self.available
                .map(|b| format!("{} available", format_bytes(b))),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !figures.is_empty() {
            s.push_str(": ");
            s.push_str(&figures.join(", "));
        }
        s
    }
}

/// The diagnosis.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What ended the run.
    pub kind: VerdictKind,
    /// One sentence for people.
    pub summary: String,
    /// The figures and times behind it.
    pub evidence: Vec<String>,
}

/// Usage at or above this fraction of the limit counts as "at the limit".
const AT_LIMIT: f64 = 0.95;
/// Headroom below this fraction of a filesystem counts as full (or below 1 MiB).
const DISK_FULL: f64 = 0.005;

/// Decides why the run ended.
pub fn diagnose(f: &ExitFacts) -> Verdict {
    diagnose_with(f, None)
}

/// Decides why the run ended, with the CUDA out-of-memory error the run's client reported
/// (its step reports' `exception`, or an acknowledgment with the cause `cuda_oom`), if any.
pub fn diagnose_with(f: &ExitFacts, cuda_oom: Option<&CudaOom>) -> Verdict {
    let mut evidence = Vec::new();
    let killed_by = match f.exit {
        Some(TargetExit::Signal(s)) => Some(s),
        _ => None,
    };
    let sigkill = killed_by == Some(libc::SIGKILL);
    let status_unknown = matches!(f.exit, None | Some(TargetExit::Unknown));

    // 1. The kernel's OOM killer: its own counter or its log line is proof.
    let oom_rose = f.oom_kills.filter(|(a, b)| b > a);
    if let Some((a, b)) = oom_rose {
        evidence.push(format!(
            "the memory cgroup's oom_kill counter rose from {a} to {b} during the run"
        ));
    }
    if let Some(line) = &f.kernel_oom_line {
        evidence.push(format!("kernel log: {line}"));
    }
    let memory_at_limit: Vec<&ResourceEnd> = f
        .resources
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                ResourceKind::CgroupMemory | ResourceKind::HostMemory
            ) && r.fraction(r.recent_peak) >= AT_LIMIT
        })
        .collect();
    for r in &memory_at_limit {
        evidence.push(format!(
            "{} was at {} of its {} limit ({:.0}%) {} before the exit",
            r.name,
            format_bytes(r.recent_peak),
            format_bytes(r.limit),
            r.fraction(r.recent_peak) * 100.0,
            format_duration_s(r.age_s)
        ));
    }
    let proof = oom_rose.is_some() || f.kernel_oom_line.is_some();
    if (sigkill || status_unknown) && proof
        || sigkill && !memory_at_limit.is_empty() && f.oom_kills.is_none()
    {
        if sigkill {
            evidence.push("the process was killed by SIGKILL".to_string());
        }
        let summary = if proof {
            "killed by the kernel's OOM killer".to_string()
        } else {
            "killed by SIGKILL with memory at its limit: most likely the kernel's OOM killer"
                .to_string()
        };
        return Verdict {
            kind: VerdictKind::OomKill,
            summary,
            evidence,
        };
    }
    evidence.clear();

    // 2. The watchdog's own signal: it did not save the run, it ended it.
    if let Some(s) = killed_by.filter(|s| f.sent_signal == Some(*s)) {
        let name = signal_name(s);
        return Verdict {
            kind: VerdictKind::WatchdogSignal,
            summary: format!(
                "killed by {name}, the checkpoint signal the watchdog sent it: its handler for {name} was gone or ended the process"
            ),
            evidence: vec![
                format!("the watchdog sent {name} to the target on an alert"),
                format!("terminated by signal {s} ({name})"),
            ],
        };
    }
    let crash = killed_by.and_then(crash_cause);

    // 2b. The run's client saw a CUDA out-of-memory error and the run failed: its own
    // word, with the step and the allocator's figures (a run that caught the error and
    // went on to exit 0 did not end of it).
    if let Some(oom) = cuda_oom
        && !matches!(f.exit, Some(TargetExit::Code(0)))
    {
        let mut evidence = vec![match oom.step {
            Some(s) => format!("the run's client reported a CUDA out-of-memory error at step {s}"),
            None => "the run's client reported a CUDA out-of-memory error".to_string(),
        }];
        // The message and the path are the run's own text: escaped, so that they cannot
        // forge a line of the summary or of a service's log.
        let printable = watchdog_types::units::printable;
        if let Some(m) = &oom.message {
            evidence.push(format!("the error: {}", printable(m)));
        }
        let figures: Vec<String> = [
            oom.allocated
                .map(|b| format!("{} allocated", format_bytes(b))),
            oom.reserved
                .map(|b| format!("{} reserved", format_bytes(b))),
            oom.peak
                .map(|b| format!("a peak of {} in the step", format_bytes(b))),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !figures.is_empty() {
            evidence.push(format!("the allocator had {}", figures.join(", ")));
        }
        if let Some(a) = oom.available {
            evidence.push(format!(
                "{} was what the allocator could have on {} (total less other processes and memory outside it)",
                format_bytes(a),
                oom.resource.as_deref().unwrap_or("the GPU")
            ));
        }
        if oom.saved {
            let path = oom
                .saved_path
                .as_deref()
                .map(watchdog_types::quote::quote_value);
            evidence.push(match (path, oom.saved_step) {
                (Some(p), Some(s)) => format!("the last-chance checkpoint {p} holds step {s}"),
                (Some(p), None) => format!("the last-chance checkpoint is {p}"),
                (None, Some(s)) => format!("a last-chance checkpoint of step {s} was saved"),
                (None, None) => "a last-chance checkpoint was saved".to_string(),
            });
        }
        push_status(&mut evidence, f.exit);
        return Verdict {
            kind: VerdictKind::GpuOom,
            summary: oom.sentence(),
            evidence,
        };
    }

    // 3. The scheduler's own word: its time limit, a cancel, a preemption.
    let clean_exit = matches!(f.exit, Some(TargetExit::Code(0)));
    if let Some(end) = &f.scheduler
        && (!clean_exit || end.announced)
        && crash.is_none()
    {
        evidence.push(end.said.clone());
        if let Some(r) = f
            .resources
            .iter()
            .find(|r| r.kind == ResourceKind::Runtime && r.limit != u64::MAX && r.limit > 0)
        {
            evidence.push(format!(
                "it had run {} of its {} limit",
                format_duration_s(r.last_used as f64 / 1e3),
                format_duration_s(r.limit as f64 / 1e3)
            ));
        }
        push_status(&mut evidence, f.exit);
        let summary = match end.kind {
            VerdictKind::Cancelled => "the job was cancelled (scancel)",
            VerdictKind::Preempted => "the job was preempted",
            _ => "the runtime limit was reached",
        };
        return Verdict {
            kind: end.kind,
            summary: summary.to_string(),
            evidence,
        };
    }

    // 4. The runtime limit.
    // A run that exits 0 past its limit ended on its own; one killed (or gone without a
    // status) at the limit was ended by the platform.
    if let Some(r) = f.resources.iter().find(|r| {
        r.kind == ResourceKind::Runtime
            && r.limit != u64::MAX
            && r.limit > 0
            && r.last_used.saturating_add(1000) >= r.limit
    }) && !clean_exit
        && crash.is_none()
    {
        evidence.push(format!(
            "it had run {} of its {} limit",
            format_duration_s(r.last_used as f64 / 1e3),
            format_duration_s(r.limit as f64 / 1e3)
        ));
        push_status(&mut evidence, f.exit);
        return Verdict {
            kind: VerdictKind::RuntimeLimit,
            summary: "the runtime limit was reached".to_string(),
            evidence,
        };
    }

    let failed = !matches!(f.exit, Some(TargetExit::Code(0)));

    // 5. A full filesystem (a full /dev/shm ends DataLoader workers with SIGBUS).
    let full: Vec<&ResourceEnd> = f
        .resources
        .iter()
        .filter(|r| {
            matches!(r.kind, ResourceKind::DiskBytes | ResourceKind::DiskInodes)
                && r.limit != u64::MAX
                && r.limit > 0
                && {
                    let free = r.limit.saturating_sub(r.recent_peak);
                    (free as f64) < r.limit as f64 * DISK_FULL
                        || (r.kind == ResourceKind::DiskBytes && free < 1 << 20)
                }
        })
        .collect();
    if failed && !full.is_empty() {
        for r in &full {
            let free = r.limit.saturating_sub(r.recent_peak);
            evidence.push(if r.kind == ResourceKind::DiskBytes {
                format!("{} had {} free at the end", r.name, format_bytes(free))
            } else {
                format!("{} had {free} inodes free at the end", r.name)
            });
        }
        push_status(&mut evidence, f.exit);
        return Verdict {
            kind: VerdictKind::DiskFull,
            summary: format!("the disk was full ({})", full[0].name),
            evidence,
        };
    }

    // 6. A GPU at its memory limit just before a failed exit: a likely CUDA OOM.
    if failed
        && let Some(r) = f
            .resources
            .iter()
            .find(|r| r.kind == ResourceKind::GpuMemory && r.fraction(r.recent_peak) >= AT_LIMIT)
    {
        evidence.push(format!(
            "{} was at {} of {} ({:.0}%) just before the exit",
            r.name,
            format_bytes(r.recent_peak),
            format_bytes(r.limit),
            r.fraction(r.recent_peak) * 100.0
        ));
        push_status(&mut evidence, f.exit);
        return Verdict {
            kind: VerdictKind::GpuOom,
            summary: format!(
                "{} was out of memory: most likely a CUDA out-of-memory error",
                r.name
            ),
            evidence,
        };
    }

    // 7. A fault or abort of its own, which no other process sends.
    if let (Some(s), Some(cause)) = (killed_by, crash) {
        return Verdict {
            kind: VerdictKind::Crash,
            summary: format!("crashed ({}: {cause})", signal_name(s)),
            evidence: vec![
                format!("terminated by signal {s} ({})", signal_name(s)),
                "the watchdog did not send it, and no watched resource was exhausted".to_string(),
            ],
        };
    }

    // 8. No resource explains it.
    match f.exit {
        Some(TargetExit::Code(c)) => Verdict {
            kind: VerdictKind::Exited,
            summary: if c == 0 {
                "exited normally (status 0)".to_string()
            } else {
                format!("exited with status {c}; no watched resource was exhausted")
            },
            evidence: vec![format!("exit status {c}")],
        },
        Some(TargetExit::Signal(s)) => Verdict {
            kind: VerdictKind::Signal,
            summary: format!(
                "killed by {}; no watched resource was exhausted, so another process or the user sent it",
                signal_name(s)
            ),
            evidence: vec![format!("terminated by signal {s} ({})", signal_name(s))],
        },
        Some(TargetExit::Unknown) | None => Verdict {
            kind: VerdictKind::Unknown,
            summary: "exited; its exit status could not be read (the watchdog did not start it, and its parent did not reap it in time or the kernel is older than 6.15), and no watched resource was exhausted"
                .to_string(),
            evidence: Vec::new(),
        },
    }
}

/// What a crash signal says about the process that died of it; `None` for other signals.
fn crash_cause(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGSEGV => "a fault in the process itself, an invalid memory access",
        libc::SIGBUS => "a bus error in the process itself, such as a truncated memory-mapped file",
        libc::SIGFPE => {
            "an arithmetic fault in the process itself, such as an integer division by zero"
        }
        libc::SIGILL => "an illegal instruction in the process itself",
        libc::SIGABRT => {
            "the process called abort(), as a failed assertion or an uncaught C++ exception does"
        }
        _ => return None,
    })
}

fn push_status(evidence: &mut Vec<String>, exit: Option<TargetExit>) {
    match exit {
        Some(TargetExit::Code(c)) => evidence.push(format!("exit status {c}")),
        Some(TargetExit::Signal(s)) => {
            evidence.push(format!("terminated by signal {s} ({})", signal_name(s)))
        }
        _ => {}
    }
}

/// Finds a kernel log line about an OOM kill of one of `pids` in `/dev/kmsg` records.
pub fn find_oom_line(records: &str, pids: &[u32]) -> Option<String> {
    records.lines().find_map(|record| {
        // A /dev/kmsg record is "prio,seq,usec,flags;message".
        let msg = record.split_once(';').map_or(record, |(_, m)| m).trim();
        let lower = msg.to_ascii_lowercase();
        let about_oom = lower.contains("killed process") || lower.contains("oom-kill");
        let names_pid = pids.iter().any(|p| {
            msg.contains(&format!("Killed process {p} ")) || msg.contains(&format!(",pid={p},"))
        });
        (about_oom && names_pid).then(|| msg.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn res(name: &str, kind: ResourceKind, used: u64, limit: u64) -> ResourceEnd {
        ResourceEnd {
            name: name.into(),
            kind,
            recent_peak: used,
            last_used: used,
            limit,
            age_s: 0.05,
        }
    }

    fn facts(exit: Option<TargetExit>, resources: Vec<ResourceEnd>) -> ExitFacts {
        ExitFacts {
            exit,
            oom_kills: Some((0, 0)),
            kernel_oom_line: None,
            resources,
            sent_signal: None,
            scheduler: None,
        }
    }

    /// The SLURM controller's word decides between a time limit, a cancel and a
    /// preemption; a clean exit or a crash is the run's own end whatever it says; an OOM
    /// kill stays one. A provider's notice is the end of a clean exit too.
    #[test]
    fn the_schedulers_word_on_how_the_job_ended() {
        let said = |kind| SchedulerEnd {
            kind,
            said: "the SLURM controller reports job 7 X".into(),
            announced: false,
        };
        let runtime = res("runtime", ResourceKind::Runtime, 78_000, 60_000);
        let term = Some(TargetExit::Signal(libc::SIGTERM));
        for kind in [
            VerdictKind::RuntimeLimit,
            VerdictKind::Cancelled,
            VerdictKind::Preempted,
        ] {
            let v = diagnose(&ExitFacts {
                scheduler: Some(said(kind)),
                ..facts(term, vec![runtime.clone()])
            });
            assert_eq!(v.kind, kind);
            assert!(
                v.evidence[0].contains("SLURM controller"),
                "{:?}",
                v.evidence
            );
        }
        let cancelled = Some(said(VerdictKind::Cancelled));
        let clean = diagnose(&ExitFacts {
            scheduler: cancelled.clone(),
            ..facts(Some(TargetExit::Code(0)), vec![])
        });
        assert_eq!(clean.kind, VerdictKind::Exited);
        let crash = diagnose(&ExitFacts {
            scheduler: cancelled.clone(),
            ..facts(Some(TargetExit::Signal(libc::SIGSEGV)), vec![])
        });
        assert_eq!(crash.kind, VerdictKind::Crash);
        let oom = diagnose(&ExitFacts {
            scheduler: cancelled,
            oom_kills: Some((0, 1)),
            ..facts(Some(TargetExit::Signal(libc::SIGKILL)), vec![])
        });
        assert_eq!(oom.kind, VerdictKind::OomKill);
        // A provider's notice came before the exit: a clean exit is still its end.
        let noticed = diagnose(&ExitFacts {
            scheduler: Some(SchedulerEnd {
                announced: true,
                ..said(VerdictKind::Preempted)
            }),
            ..facts(Some(TargetExit::Code(0)), vec![])
        });
        assert_eq!(noticed.kind, VerdictKind::Preempted);
    }

    #[test]
    fn table() {
        let cg_full = res(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            254 * MIB,
            256 * MIB,
        );
        let cg_low = res(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            20 * MIB,
            256 * MIB,
        );
        let disk_full = res(
            "disk:/ckpt",
            ResourceKind::DiskBytes,
            64 * MIB - 4096,
            64 * MIB,
        );
        let gpu_full = res("gpu0", ResourceKind::GpuMemory, 959 * MIB, 960 * MIB);
        let runtime_done = res("runtime", ResourceKind::Runtime, 5_000, 5_000);
        let kill = Some(TargetExit::Signal(libc::SIGKILL));
        let cases: Vec<(&str, ExitFacts, VerdictKind)> = vec![
            (
                "normal",
                facts(Some(TargetExit::Code(0)), vec![cg_low.clone()]),
                VerdictKind::Exited,
            ),
            (
                "failed, no cause",
                facts(Some(TargetExit::Code(1)), vec![cg_low.clone()]),
                VerdictKind::Exited,
            ),
            (
                "oom counter rose",
                ExitFacts {
                    oom_kills: Some((0, 1)),
                    ..facts(kill, vec![cg_full.clone()])
                },
                VerdictKind::OomKill,
            ),
            (
                "SIGKILL but counter flat and memory low",
                facts(kill, vec![cg_low.clone()]),
                VerdictKind::Signal,
            ),
            (
                "SIGKILL at the limit, no counter to read",
                ExitFacts {
                    oom_kills: None,
                    ..facts(kill, vec![cg_full.clone()])
                },
                VerdictKind::OomKill,
            ),
            (
                "attached, kernel log names the pid",
                ExitFacts {
                    kernel_oom_line: Some("Killed process 42 (python3)".into()),
                    ..facts(None, vec![cg_low.clone()])
                },
                VerdictKind::OomKill,
            ),
            (
                "disk full",
                facts(Some(TargetExit::Code(1)), vec![disk_full.clone()]),
                VerdictKind::DiskFull,
            ),
            (
                "disk full but exited 0",
                facts(Some(TargetExit::Code(0)), vec![disk_full]),
                VerdictKind::Exited,
            ),
            (
                "gpu full",
                facts(Some(TargetExit::Code(1)), vec![gpu_full]),
                VerdictKind::GpuOom,
            ),
            (
                "runtime passed but exited 0 on its own",
                facts(Some(TargetExit::Code(0)), vec![runtime_done.clone()]),
                VerdictKind::Exited,
            ),
            (
                "runtime",
                facts(Some(TargetExit::Signal(libc::SIGTERM)), vec![runtime_done]),
                VerdictKind::RuntimeLimit,
            ),
            (
                "SIGTERM",
                facts(Some(TargetExit::Signal(libc::SIGTERM)), vec![cg_low]),
                VerdictKind::Signal,
            ),
            (
                "attached, no evidence",
                facts(None, vec![]),
                VerdictKind::Unknown,
            ),
        ];
        let cases = cases.into_iter().chain(crash_cases());
        for (name, f, want) in cases {
            let v = diagnose(&f);
            assert_eq!(v.kind, want, "{name}: {v:?}");
            assert!(!v.summary.is_empty());
        }
    }

    /// A run that died of SIGSEGV was "killed by SIGSEGV; ... another process or the user
    /// sent it"; one the watchdog's own signal ended was blamed on the runtime limit.
    fn crash_cases() -> Vec<(&'static str, ExitFacts, VerdictKind)> {
        let sig = |s| Some(TargetExit::Signal(s));
        let cg_low = res(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            20 * MIB,
            256 * MIB,
        );
        let runtime_done = res("runtime", ResourceKind::Runtime, 5_000, 5_000);
        let shm_full = res("disk:/dev/shm", ResourceKind::DiskBytes, 64 * MIB, 64 * MIB);
        let sent = |s, f: ExitFacts| ExitFacts {
            sent_signal: Some(s),
            ..f
        };
        let mut cases = Vec::new();
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGABRT,
        ] {
            cases.push((
                "crash signal",
                facts(sig(s), vec![cg_low.clone()]),
                VerdictKind::Crash,
            ));
            cases.push((
                "crash signal at the runtime limit",
                facts(sig(s), vec![runtime_done.clone()]),
                VerdictKind::Crash,
            ));
            cases.push((
                "crash signal the watchdog sent",
                sent(s, facts(sig(s), vec![cg_low.clone()])),
                VerdictKind::WatchdogSignal,
            ));
        }
        cases.extend([
            (
                "SIGBUS with /dev/shm full",
                facts(sig(libc::SIGBUS), vec![shm_full]),
                VerdictKind::DiskFull,
            ),
            (
                "SIGTERM is not a crash",
                facts(sig(libc::SIGTERM), vec![cg_low.clone()]),
                VerdictKind::Signal,
            ),
            (
                "SIGQUIT is not a crash of its own",
                facts(sig(libc::SIGQUIT), vec![cg_low.clone()]),
                VerdictKind::Signal,
            ),
            (
                "the watchdog's SIGUSR1 ended it at the runtime limit",
                sent(
                    libc::SIGUSR1,
                    facts(sig(libc::SIGUSR1), vec![runtime_done.clone()]),
                ),
                VerdictKind::WatchdogSignal,
            ),
            (
                "the watchdog sent SIGUSR1, the run died of SIGTERM at the limit",
                sent(libc::SIGUSR1, facts(sig(libc::SIGTERM), vec![runtime_done])),
                VerdictKind::RuntimeLimit,
            ),
            (
                "the watchdog sent SIGUSR1, the run exited 0",
                sent(
                    libc::SIGUSR1,
                    facts(Some(TargetExit::Code(0)), vec![cg_low]),
                ),
                VerdictKind::Exited,
            ),
        ]);
        cases
    }

    /// Issue 19: the client's report of a CUDA OOM is the verdict when the run failed.
    #[test]
    fn reported_cuda_oom_table() {
        let gpu_low = res("gpu0", ResourceKind::GpuMemory, 300 * MIB, 960 * MIB);
        let cg_full = res(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            254 * MIB,
            256 * MIB,
        );
        let cases: Vec<(&str, ExitFacts, VerdictKind)> = vec![
            (
                "GPU far from full",
                facts(Some(TargetExit::Code(1)), vec![gpu_low.clone()]),
                VerdictKind::GpuOom,
            ),
            ("attached", facts(None, vec![]), VerdictKind::GpuOom),
            (
                "the run caught it and exited 0",
                facts(Some(TargetExit::Code(0)), vec![gpu_low]),
                VerdictKind::Exited,
            ),
            (
                "then the kernel's OOM killer",
                ExitFacts {
                    oom_kills: Some((0, 1)),
                    ..facts(Some(TargetExit::Signal(libc::SIGKILL)), vec![cg_full])
                },
                VerdictKind::OomKill,
            ),
        ];
        for (name, f, want) in cases {
            let v = diagnose_with(&f, Some(&oom()));
            assert_eq!(v.kind, want, "{name}: {v:?}");
        }
    }

    fn oom() -> CudaOom {
        CudaOom {
            step: Some(121),
            phase: Some(watchdog_types::Phase::Train),
            message: Some("CUDA out of memory. Tried to allocate 2.00 GiB".into()),
            allocated: Some(700 * MIB),
            reserved: Some(900 * MIB),
            peak: Some(950 * MIB),
            available: Some(920 * MIB),
            resource: Some("gpu0".into()),
            saved_path: Some("ckpt/last".into()),
            saved_step: Some(120),
            saved: true,
        }
    }

    /// Issue 19: the client's report of a CUDA OOM gives the step and the figures.
    #[test]
    fn a_reported_cuda_oom_says_the_step_and_the_figures() {
        let v = diagnose_with(&facts(Some(TargetExit::Code(1)), vec![]), Some(&oom()));
        assert_eq!(v.kind, VerdictKind::GpuOom);
        assert_eq!(
            v.summary,
            "CUDA out of memory at step 121 (training) on gpu0: peak 950.00 MiB, 900.00 MiB reserved, 920.00 MiB available"
        );
        let all = v.evidence.join("; ");
        for want in [
            "Tried to allocate 2.00 GiB",
            "the allocator had 700.00 MiB allocated, 900.00 MiB reserved, a peak of 950.00 MiB",
            "920.00 MiB was what the allocator could have on gpu0",
            "ckpt/last' holds step 120",
            "exit status 1",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
        // Only what is known is said.
        let bare = CudaOom::default();
        assert_eq!(bare.sentence(), "CUDA out of memory");
    }

    #[test]
    fn crash_and_watchdog_signal_summaries_say_what_happened() {
        let v = diagnose(&facts(Some(TargetExit::Signal(libc::SIGSEGV)), vec![]));
        assert_eq!(v.kind.as_str(), "crash");
        assert!(
            v.summary
                .starts_with("crashed (SIGSEGV: a fault in the process itself"),
            "{}",
            v.summary
        );
        assert!(!v.summary.contains("another process"), "{}", v.summary);
        let v = diagnose(&ExitFacts {
            sent_signal: Some(libc::SIGUSR1),
            ..facts(Some(TargetExit::Signal(libc::SIGUSR1)), vec![])
        });
        assert_eq!(v.kind.as_str(), "watchdog_signal");
        assert!(
            v.summary
                .contains("the checkpoint signal the watchdog sent it"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn kernel_oom_line_must_name_a_pid_of_the_tree() {
        let kmsg = "6,1234,5678,-;Memory cgroup out of memory: Killed process 77 (python3) total-vm:1kB\n\
                    6,1235,5679,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/x,task_memcg=/x,task=python3,pid=42,uid=0\n";
        assert_eq!(find_oom_line(kmsg, &[5]), None);
        assert!(find_oom_line(kmsg, &[77]).is_some_and(|l| l.contains("Killed process 77")));
        assert!(find_oom_line(kmsg, &[42]).is_some_and(|l| l.contains("pid=42,")));
    }
}
