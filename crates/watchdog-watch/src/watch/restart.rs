//! `watchdog run --restart N`: one run, several attempts. When an attempt ends with a
//! verdict listed in `restart_on`, the same command is started again in the same directory
//! and environment, told `WATCHDOG_RESTART`, `WATCHDOG_LAST_VERDICT` and, when the run
//! acknowledged a checkpoint that is still there unchanged, `WATCHDOG_RESUME_FROM`.
//!
//! This module owns the decisions ([`decide`], [`no_progress`], pure and table-tested) and
//! the checkpoints the run acknowledged ([`Ledger`], [`AckReader`]); `lifecycle` carries
//! them out, phase by phase. The watch itself knows only that it is one attempt of several
//! ([`Attempting`]): it reads every acknowledgment, ends what a failed attempt left running,
//! and lets a hook finish before the next attempt is judged. See docs/restart.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use watchdog_alerter::request::{Ack, RequestPlace};
use watchdog_engine::verdict::ResourceEnd;
use watchdog_types::units::{format_bytes, signal_name};
use watchdog_types::{ResourceKind, VerdictKind};

use super::Watch;
use crate::target::TargetExit;

/// Largest acknowledgment read (as the alerter reads it).
const MAX_ACK_BYTES: u64 = 64 * 1024;
/// Most directory entries looked at to measure a checkpoint directory.
const MAX_ENTRIES: usize = 100_000;
/// Longest a checkpoint directory is walked to measure it (on the loop's thread).
const MAX_MEASURE: Duration = Duration::from_millis(500);
/// How long the processes a failed attempt left running get between SIGTERM and SIGKILL.
pub(super) const SURVIVOR_GRACE: Duration = Duration::from_secs(5);
/// Most attempts whose outputs are checked at start (`--restart` takes any count).
pub(super) const MAX_PLANNED: u32 = 1000;
/// How often a stop signal is looked for while the hooks of a failed attempt finish
/// (each hook's end wakes the wait at once).
const STOP_LOOKED_AT_EVERY: Duration = Duration::from_millis(100);
/// One hour, for `restart_per_hour`.
pub(super) const HOUR: Duration = Duration::from_secs(3600);

/// What a watch that is one attempt of a `run --restart` keeps besides a plain watch.
#[derive(Debug, Default)]
pub(super) struct Attempting {
    /// 1 for the first attempt.
    pub(super) attempt: u32,
    /// When the failed target's leftover processes are sent SIGTERM, then SIGKILL.
    pub(super) end_survivors: Option<(Instant, bool)>,
    /// The last SIGINT, SIGTERM or SIGHUP the watchdog received (0: none).
    pub(super) stop: Option<Arc<AtomicUsize>>,
}

/// One acknowledged checkpoint, as it was when the acknowledgment came.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The file or directory, absolute.
    pub path: PathBuf,
    /// The step it holds, when the client said.
    pub step: Option<u64>,
    /// When the save returned (the acknowledgment's `time_unix`).
    pub time_unix: f64,
    /// Bytes: the file's size, or the sum of the directory's files.
    pub size: u64,
    /// Newest modification time inside it, nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl Checkpoint {
    /// The record's checkpoint a requeued run resumes from (its size and time unknown).
    pub(super) fn from_record(r: &super::record::Resume) -> Checkpoint {
        Checkpoint {
            path: r.path.clone(),
            step: r.step,
            time_unix: 0.0,
            size: 0,
            mtime_ns: 0,
        }
    }
}

/// Size and newest modification time of a checkpoint file or directory, not following
/// symbolic links inside it; `None` when it cannot be measured whole: missing, neither a
/// regular file nor a directory (a FIFO, a device: never a checkpoint), or a directory of
/// more than [`MAX_ENTRIES`] entries or [`MAX_MEASURE`] of walking (a change past the
/// bound would go unseen, so it is never offered as complete). A `path` that is itself a
/// link is measured through it, the link's own time counting too (pointed elsewhere:
/// changed).
pub fn measure(path: &Path) -> Option<(u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let stamp =
        |m: &std::fs::Metadata| i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    let link = std::fs::symlink_metadata(path).ok()?;
    let top = if link.file_type().is_symlink() {
        std::fs::metadata(path).ok()?
    } else {
        link.clone()
    };
    let linked = stamp(&link).max(stamp(&top));
    if top.is_file() {
        return Some((top.len(), linked));
    }
    if !top.is_dir() {
        return None;
    }
    let started = std::time::Instant::now();
    let (mut size, mut newest) = (0u64, linked);
    let mut dirs = vec![path.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).ok()?;
        for entry in entries {
            let entry = entry.ok()?;
            seen += 1;
            if seen > MAX_ENTRIES || started.elapsed() > MAX_MEASURE {
                return None;
            }
            let m = entry.path().symlink_metadata().ok()?;
            newest = newest.max(stamp(&m));
            if m.is_dir() {
                dirs.push(entry.path());
            } else {
                size = size.saturating_add(m.len());
            }
        }
    }
    Some((size, newest))
}

/// Reads `<request file>.ack` for checkpoints: every new content with a `path` is one.
#[derive(Debug, Default)]
pub(super) struct AckReader {
    last: Option<Vec<u8>>,
    /// The checkpoints acknowledged so far, oldest first.
    pub(super) found: Vec<Checkpoint>,
    /// Every acknowledged step with its time (`time_unix`), with a path or not.
    pub(super) steps: Vec<(f64, u64)>,
    /// The highest request `seq` acknowledged.
    pub(super) seq: u64,
}

impl AckReader {
    /// Looks at the acknowledgment once: a new one is returned, with whether its
    /// checkpoint was recorded (it has a path, relative ones from `cwd`, that is there).
    pub(super) fn check(&mut self, place: &RequestPlace, cwd: &Path) -> Option<(Ack, bool)> {
        let bytes = place.read_capped(MAX_ACK_BYTES).ok()??;
        if self.last.as_deref() == Some(bytes.as_slice()) {
            return None;
        }
        let ack: Ack = serde_json::from_slice(&bytes).ok()?;
        // Remembered once it parsed: a half-written file is read again.
        self.last = Some(bytes);
        self.seq = self.seq.max(ack.seq);
        if let Some(step) = ack.step {
            self.steps.push((ack.time_unix, step));
        }
        let Some(path) = ack.path.as_deref().map(|p| cwd.join(p)) else {
            return Some((ack, false));
        };
        let Some((size, mtime_ns)) = measure(&path) else {
            return Some((ack, false));
        };
        self.found.push(Checkpoint {
            path,
            step: ack.step,
            time_unix: ack.time_unix,
            size,
            mtime_ns,
        });
        Some((ack, true))
    }
}

/// Every checkpoint the run acknowledged, over all its attempts.
#[derive(Debug, Default)]
pub struct Ledger {
    all: Vec<Checkpoint>,
}

impl Ledger {
    /// Adds an attempt's checkpoints.
    pub fn extend(&mut self, found: Vec<Checkpoint>) {
        self.all.extend(found);
    }

    /// The newest checkpoint that is still there as it was acknowledged: same size, same
    /// newest modification time. One being rewritten, or deleted, is passed over.
    pub fn resume_from(&self) -> Option<&Checkpoint> {
        self.all
            .iter()
            .rev()
            .find(|c| measure(&c.path) == Some((c.size, c.mtime_ns)))
    }

    /// The newest checkpoint's size (what the next save will likely need).
    pub(super) fn last_size(&self) -> Option<u64> {
        self.all.last().map(|c| c.size)
    }
}

/// One attempt as it ended.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// 1 for the first.
    pub n: u32,
    /// Its verdict.
    pub verdict: VerdictKind,
    /// How its command ended.
    pub exit: TargetExit,
    /// The highest step seen (acknowledgments, step reports), at least the one it
    /// resumed from.
    pub step: Option<u64>,
    /// The same without the acknowledgments of the last lead before the failure: the step
    /// the progress rule compares (a save just before the failure is not progress).
    pub progress_step: Option<u64>,
    /// The step it was started from (`WATCHDOG_RESUME_FROM`'s), when known.
    pub resumed_from: Option<u64>,
    /// Whether it was told a checkpoint to resume from.
    pub resumed: bool,
    /// Whether it acknowledged a checkpoint more than one lead before its end.
    pub saved_before_lead: bool,
    /// Its resources as they ended.
    pub ends: Vec<ResourceEnd>,
}

/// What `--restart`, `--restart-on` and `--restart-per-hour` allow.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Restarts allowed in all.
    pub restart: u32,
    /// Verdicts that restart.
    pub restart_on: Vec<VerdictKind>,
    /// Restarts allowed in any hour.
    pub per_hour: u32,
}

/// What follows an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Start the command again.
    Restart,
    /// The run is over: it succeeded, or its failure does not restart (the reason, for
    /// the summary; `None`: nothing to say).
    Stop(Option<String>),
}

/// How far apart two steps may be and still be "the same step": max(10 steps, 1%).
pub fn step_tolerance(step: u64) -> u64 {
    (step / 100).max(10)
}

/// Whether `this` attempt failed the way `prev` did at about the same point: the same
/// verdict, `this` one's step without its saves of the last lead within
/// [`step_tolerance`] of the step `prev` reached (where it failed) or, with no step known,
/// without a checkpoint saved more than one lead before the failure (one saved just
/// before it, as the watchdog asks, is not progress).
pub fn no_progress(prev: &Attempt, this: &Attempt) -> bool {
    if prev.verdict != this.verdict {
        return false;
    }
    match (prev.step, this.progress_step) {
        (Some(a), Some(b)) => a.abs_diff(b) <= step_tolerance(a),
        _ => !this.saved_before_lead,
    }
}

/// The step an attempt reached, and the one the progress rule compares: the highest of
/// `floor` (its step reports, the step it resumed from) and its acknowledged steps
/// (`(time_unix, step)`), the second without those acknowledged after `lead_start` (one
/// lead before the failure). Pure.
pub fn steps_reached(
    acked: &[(f64, u64)],
    lead_start: f64,
    floor: Option<u64>,
) -> (Option<u64>, Option<u64>) {
    let all = acked.iter().map(|a| a.1).max();
    let before = acked.iter().filter(|a| a.0 < lead_start).map(|a| a.1).max();
    (all.max(floor), before.max(floor))
}

/// Decides what follows the last of `attempts`; `restarts_last_hour` counts the restarts
/// of the last hour, `stopped_by` a SIGINT/SIGTERM/SIGHUP the watchdog received. Pure.
pub fn decide(
    policy: &Policy,
    attempts: &[Attempt],
    restarts_last_hour: u32,
    stopped_by: Option<i32>,
) -> Next {
    let Some(this) = attempts.last() else {
        return Next::Stop(None);
    };
    if matches!(this.exit, TargetExit::Code(0)) {
        return Next::Stop(None);
    }
    if let Some(sig) = stopped_by {
        return Next::Stop(Some(format!(
            "not restarted: the watchdog was told to stop ({})",
            signal_name(sig)
        )));
    }
    if !policy.restart_on.contains(&this.verdict) {
        let listed: Vec<&str> = policy.restart_on.iter().map(|k| k.as_str()).collect();
        return Next::Stop(Some(format!(
            "not restarted: its verdict {} is not in restart-on ({})",
            this.verdict,
            listed.join(",")
        )));
    }
    if let [.., prev, _] = attempts
        && no_progress(prev, this)
    {
        return Next::Stop(Some(deterministic(prev, this)));
    }
    let used = attempts.len().saturating_sub(1) as u32;
    if used >= policy.restart {
        return Next::Stop(Some(format!(
            "not restarted: all {} restart(s) are spent",
            policy.restart
        )));
    }
    if restarts_last_hour >= policy.per_hour {
        return Next::Stop(Some(format!(
            "not restarted: {restarts_last_hour} restarts in the last hour reach restart-per-hour ({}); the run fails too often to be left to restart",
            policy.per_hour
        )));
    }
    Next::Restart
}

/// The verdict text of a failure that will only repeat: what failed, where, the limit and
/// the peak, and what would change it.
fn deterministic(prev: &Attempt, this: &Attempt) -> String {
    let at = match (prev.step, this.progress_step) {
        (Some(a), Some(b)) => format!(
            "at step {b} (attempt {}: step {a}, within max(10 steps, 1%))",
            prev.n
        ),
        _ => "before saving any checkpoint more than one lead before the failure, as the attempt before it"
            .to_string(),
    };
    let kinds: &[ResourceKind] = match this.verdict {
        VerdictKind::OomKill => &[
            ResourceKind::CgroupMemory,
            ResourceKind::HostMemory,
            ResourceKind::TreeMemory,
        ],
        VerdictKind::GpuOom => &[ResourceKind::GpuMemory],
        VerdictKind::DiskFull => &[ResourceKind::DiskBytes, ResourceKind::DiskInodes],
        _ => &[],
    };
    let peak = this
        .ends
        .iter()
        .filter(|r| kinds.contains(&r.kind) && r.limit != u64::MAX && r.limit > 0)
        .max_by(|a, b| {
            let f = |r: &ResourceEnd| r.recent_peak as f64 / r.limit as f64;
            f(a).total_cmp(&f(b))
        })
        .map(|r| {
            let show = |v: u64| match r.kind {
                ResourceKind::DiskInodes => format!("{v} inodes"),
                _ => format_bytes(v),
            };
            format!(
                "; {} peaked at {} of its {} limit",
                r.name,
                show(r.recent_peak),
                show(r.limit)
            )
        })
        .unwrap_or_default();
    let advice = match this.verdict {
        VerdictKind::OomKill => {
            "lower what that step needs (a smaller batch, shorter sequences, fewer DataLoader workers) or raise the memory limit"
        }
        VerdictKind::GpuOom => {
            "lower what that step needs on the GPU (a smaller batch, shorter sequences, gradient checkpointing), or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when the cache is fragmented"
        }
        VerdictKind::DiskFull => {
            "free space, or write checkpoints to a larger filesystem and keep fewer of them"
        }
        _ => "fix what ends it there (see the verdict above)",
    };
    format!(
        "not restarted: the failure is deterministic: attempt {} ended as attempt {} did ({}) {at}{peak}. Another attempt would fail the same way: {advice}",
        this.n, prev.n, this.verdict
    )
}

/// For a disk-full restart: whether the space the failed save needed is free again on
/// every filesystem that was full (`Ok`: what is free now; `Err`: what is still missing).
/// The save is taken to need the last checkpoint's size, else the verdict's own measure
/// of "full" (1 MiB, or 0.5% of the filesystem).
pub(super) fn space_back(this: &Attempt, needed: Option<u64>) -> Result<String, String> {
    let mut said = Vec::new();
    for end in &this.ends {
        if end.kind == ResourceKind::DiskInodes
            && let Some(path) = end.name.strip_prefix("inodes:")
            && end.limit != u64::MAX
            && end.limit.saturating_sub(end.recent_peak) < (end.limit / 200).max(1)
        {
            let figures = rustix::fs::statvfs(path)
                .map(|s| watchdog_sampler::disk::VfsFigures::from(&s))
                .map_err(|e| format!("cannot read the free inodes of {path}: {e}"))?;
            let root = rustix::process::geteuid().is_root();
            if let Some((used, limit)) = figures.inodes(root)
                && limit.saturating_sub(used) < (limit / 200).max(1)
            {
                return Err(format!(
                    "not restarted: {path} still has only {} inodes free",
                    limit.saturating_sub(used)
                ));
            }
        }
        if end.kind != ResourceKind::DiskBytes {
            continue;
        }
        let Some(path) = end.name.strip_prefix("disk:") else {
            continue;
        };
        let full_at = (end.limit / 200).max(1 << 20);
        if end.limit.saturating_sub(end.recent_peak) >= full_at {
            continue;
        }
        let figures = rustix::fs::statvfs(path)
            .map(|s| watchdog_sampler::disk::VfsFigures::from(&s))
            .map_err(|e| format!("cannot read the free space of {path}: {e}"))?;
        let (used, limit) = figures.bytes(rustix::process::geteuid().is_root());
        let free = limit.saturating_sub(used);
        let want = needed.unwrap_or(full_at).max(full_at);
        let what = match needed {
            Some(_) => "the size of the last checkpoint",
            None => "what no longer counts as full",
        };
        if free < want {
            return Err(format!(
                "not restarted: {path} has {} free, less than the {} a save needs ({what})",
                format_bytes(free),
                format_bytes(want)
            ));
        }
        said.push(format!(
            "{path} has {} free again, at least the {} a save needs ({what})",
            format_bytes(free),
            format_bytes(want)
        ));
    }
    Ok(said.join("; "))
}

/// The summary's list of attempts: verdict, step reached, step resumed from, work lost.
pub fn attempts_table(attempts: &[Attempt]) -> String {
    let step = |s: Option<u64>| s.map_or("?".to_string(), |s| s.to_string());
    let mut lines = vec![format!(
        "watchdog: {} attempt(s) of this run:",
        attempts.len()
    )];
    for (i, a) in attempts.iter().enumerate() {
        let from = match (a.resumed, a.resumed_from) {
            (false, _) => "from the start".to_string(),
            (true, Some(s)) => format!("resumed from step {s}"),
            (true, None) => "resumed from a checkpoint".to_string(),
        };
        let lost = match (attempts.get(i + 1), matches!(a.exit, TargetExit::Code(0))) {
            (_, true) => String::new(),
            (Some(next), false) => match (a.step, next.resumed, next.resumed_from) {
                (Some(reached), true, Some(r)) => {
                    format!(", {} step(s) lost", reached.saturating_sub(r))
                }
                (Some(reached), false, _) => format!(", {reached} step(s) lost"),
                _ => ", work lost unknown".to_string(),
            },
            (None, false) => String::new(),
        };
        lines.push(format!(
            "  attempt {}: {}, step reached {}, {from}{lost}",
            a.n,
            a.verdict,
            step(a.step)
        ));
    }
    lines.join("\n")
}

/// A run id: the watchdog's PID and its start time, unique on this host.
pub(super) fn run_id() -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", std::process::id(), now.as_millis())
}

/// The recording of attempt `n` (from 2) when `--record PATH` names one:
/// `NAME.attemptN.EXT` beside it (`train.recording.csv` → `train.attempt2.recording.csv`).
pub fn attempt_recording(path: &Path, n: u32) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = match name.split_once('.') {
        Some((stem, rest)) => format!("{stem}.attempt{n}.{rest}"),
        None => format!("{name}.attempt{n}"),
    };
    path.with_file_name(named)
}

impl Watch {
    /// In a `run --restart` attempt: reads the acknowledgment for checkpoints (each with a
    /// path is recorded, with its size and modification time now).
    pub(super) fn check_checkpoints(&mut self) {
        if !self.series.keeps_checkpoints() && !self.notices.any() {
            return;
        }
        let cwd = self.run.target.start_cwd.clone().unwrap_or_default();
        let Some((ack, recorded)) = self.replies.acks.check(&self.out.request.ack(), &cwd) else {
            return;
        };
        self.slurm_acknowledged(ack.seq, ack.path.clone(), ack.step);
        if recorded
            && let (Some(book), Some(c)) = (&mut self.series.record, self.replies.acks.found.last())
        {
            book.add(c);
        }
        match (&ack.path, self.replies.acks.found.last()) {
            (Some(_), Some(c)) if recorded => tracing::info!(
                "checkpoint {} acknowledged{} ({})",
                watchdog_types::quote::quote_path(&c.path),
                c.step.map_or(String::new(), |s| format!(" at step {s}")),
                format_bytes(c.size)
            ),
            // The path is the run's own text: escaped, so it cannot forge a log line.
            (Some(path), _) => tracing::warn!(
                "the acknowledged checkpoint {} cannot be measured whole (missing, not a regular file or directory, or more than {MAX_ENTRIES} entries): a restart will not resume from it",
                watchdog_types::quote::quote_value(path)
            ),
            (None, _) => {}
        }
    }

    /// The run reported reaching training step `step` (a step report; an acknowledgment's
    /// step is kept with its time instead): the highest is the attempt's step reached,
    /// which the progress rule compares.
    pub fn saw_step(&mut self, step: u64) {
        self.replies.saw_step(step, self.clock.elapsed_s());
    }

    /// A failed attempt's command is gone but processes it started run on: they are ended
    /// (SIGTERM, then SIGKILL after [`SURVIVOR_GRACE`]) so the next attempt has their
    /// memory and GPUs. Called while the survivors are watched.
    pub(super) fn end_failed_survivors(&mut self) {
        let failed = self.run.failed();
        let Some(attempting) = &mut self.series.attempting else {
            return;
        };
        if !failed {
            return;
        }
        let now = Instant::now();
        let (sig, next) = match attempting.end_survivors {
            None => (libc::SIGTERM, Some((now + SURVIVOR_GRACE, false))),
            Some((at, false)) if now >= at => (libc::SIGKILL, Some((at, true))),
            _ => return,
        };
        attempting.end_survivors = next;
        for fd in self.roots() {
            match fd.send_signal(sig) {
                Ok(()) => tracing::info!(
                    "sent {} to PID {}, left running by the failed attempt",
                    signal_name(sig),
                    fd.pid()
                ),
                Err(e) => tracing::debug!("could not send {}: {e}", signal_name(sig)),
            }
        }
    }

    /// In a failed `run --restart` attempt, lets running hooks finish (up to the hook
    /// timeout, or until the watchdog is told to stop) before the attempt is judged: a
    /// hook may free the space a save needs.
    pub(super) fn let_hooks_finish(&mut self) {
        let failed = self.run.failed();
        let Some(attempting) = self.series.attempting.as_ref().filter(|_| failed) else {
            return;
        };
        let stop = attempting.stop.clone();
        let stopped = || {
            stop.as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed) != 0)
        };
        let until = Instant::now() + self.settings.hook_timeout;
        self.courier
            .wait_for_hooks(until, STOP_LOOKED_AT_EVERY, stopped);
        self.reap_adopted();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attempt(n: u32, verdict: VerdictKind, step: Option<u64>) -> Attempt {
        Attempt {
            n,
            verdict,
            exit: TargetExit::Signal(libc::SIGKILL),
            step,
            progress_step: step,
            resumed_from: None,
            resumed: n > 1,
            saved_before_lead: false,
            ends: Vec::new(),
        }
    }

    fn policy(restart: u32) -> Policy {
        Policy {
            restart,
            restart_on: watchdog_config::options::DEFAULT_RESTART_ON.to_vec(),
            per_hour: 6,
        }
    }

    #[test]
    fn the_same_verdict_at_about_the_same_step_is_no_progress() {
        use VerdictKind::*;
        // (previous, this, no progress)
        let table = [
            ((OomKill, Some(100)), (OomKill, Some(105)), true),
            ((OomKill, Some(100)), (OomKill, Some(111)), false),
            ((OomKill, Some(5000)), (OomKill, Some(5049)), true),
            ((OomKill, Some(5000)), (OomKill, Some(5051)), false),
            ((OomKill, Some(100)), (GpuOom, Some(100)), false),
            ((OomKill, None), (OomKill, None), true),
            ((OomKill, Some(100)), (OomKill, None), true),
        ];
        for ((pv, ps), (tv, ts), expected) in table {
            let (p, t) = (attempt(1, pv, ps), attempt(2, tv, ts));
            assert_eq!(no_progress(&p, &t), expected, "{pv:?} {ps:?} {tv:?} {ts:?}");
        }
        // The first attempt's saves of its last lead are where it failed: the second,
        // resumed from the last of them and failing there, made no progress.
        let mut first = attempt(1, OomKill, Some(59));
        first.progress_step = Some(29);
        assert!(no_progress(&first, &attempt(2, OomKill, Some(59))));
        // Without steps, a checkpoint saved more than one lead before the failure is progress.
        let mut t = attempt(2, OomKill, None);
        t.saved_before_lead = true;
        assert!(!no_progress(&attempt(1, OomKill, None), &t));
    }

    #[test]
    fn a_save_within_one_lead_of_the_failure_is_not_progress() {
        // Saves at steps 50 (t=100) and 98 (t=195), failure at t=200 with a 30 s lead.
        let acked = [(100.0, 50), (195.0, 98)];
        assert_eq!(steps_reached(&acked, 170.0, None), (Some(98), Some(50)));
        assert_eq!(steps_reached(&acked, 170.0, Some(60)), (Some(98), Some(60)));
        assert_eq!(steps_reached(&[], 170.0, Some(7)), (Some(7), Some(7)));
        assert_eq!(steps_reached(&[], 170.0, None), (None, None));
    }

    #[test]
    fn decisions() {
        use VerdictKind::*;
        let ok = Attempt {
            exit: TargetExit::Code(0),
            ..attempt(1, Exited, None)
        };
        assert_eq!(decide(&policy(3), &[ok], 0, None), Next::Stop(None));
        let oom = |n, s| attempt(n, OomKill, Some(s));
        assert_eq!(decide(&policy(3), &[oom(1, 50)], 0, None), Next::Restart);
        assert_eq!(
            decide(&policy(3), &[oom(1, 50), oom(2, 120)], 0, None),
            Next::Restart
        );
        let said = |n: Next| match n {
            Next::Stop(Some(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(said(decide(&policy(0), &[oom(1, 50)], 0, None)).contains("all 0 restart"));
        assert!(said(decide(&policy(3), &[oom(1, 50)], 6, None)).contains("restart-per-hour"));
        assert!(
            said(decide(&policy(3), &[oom(1, 50)], 0, Some(libc::SIGTERM))).contains("SIGTERM")
        );
        let same = said(decide(&policy(3), &[oom(1, 50), oom(2, 52)], 0, None));
        assert!(
            same.contains("deterministic") && same.contains("step 52"),
            "{same}"
        );
        let crash = attempt(1, Crash, Some(3));
        assert!(
            said(decide(&policy(3), std::slice::from_ref(&crash), 0, None))
                .contains("not in restart-on")
        );
        let mut with_crash = policy(3);
        with_crash.restart_on.push(Crash);
        assert_eq!(decide(&with_crash, &[crash], 0, None), Next::Restart);
    }

    #[test]
    fn the_deterministic_verdict_names_the_limit_and_the_peak() {
        let mut t = attempt(2, VerdictKind::OomKill, Some(30));
        t.ends.push(ResourceEnd {
            name: "cgroup_memory".into(),
            kind: ResourceKind::CgroupMemory,
            recent_peak: 200 << 20,
            last_used: 200 << 20,
            limit: 200 << 20,
            age_s: 0.1,
        });
        let text = deterministic(&attempt(1, VerdictKind::OomKill, Some(30)), &t);
        assert!(
            text.contains("cgroup_memory peaked at 200.00 MiB of its 200.00 MiB limit"),
            "{text}"
        );
        assert!(text.contains("smaller batch"), "{text}");
    }

    #[test]
    fn a_checkpoint_changed_or_gone_is_not_resumed_from() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.ckpt");
        let b = dir.path().join("b");
        std::fs::write(&a, b"one").unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("weights"), b"two").unwrap();
        let mut ledger = Ledger::default();
        for (p, step) in [(&a, 1), (&b, 2)] {
            let (size, mtime_ns) = measure(p).unwrap();
            ledger.extend(vec![Checkpoint {
                path: p.clone(),
                step: Some(step),
                time_unix: 0.0,
                size,
                mtime_ns,
            }]);
        }
        assert_eq!(ledger.resume_from().unwrap().path, b);
        // A file added to the directory after the acknowledgment: being written again.
        std::fs::write(b.join("optimizer"), b"half").unwrap();
        assert_eq!(ledger.resume_from().unwrap().path, a);
        std::fs::remove_file(&a).unwrap();
        assert_eq!(ledger.resume_from(), None);
    }

    /// A checkpoint acknowledged through a symbolic link (`last.ckpt -> step=10.ckpt`) is
    /// its target: rewritten in place behind the link, it is changed; so is the link
    /// pointed elsewhere.
    #[test]
    fn a_checkpoint_behind_a_symbolic_link_is_measured_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, link) = (
            dir.path().join("a.ckpt"),
            dir.path().join("b.ckpt"),
            dir.path().join("last.ckpt"),
        );
        std::fs::write(&a, b"complete").unwrap();
        std::fs::write(&b, b"other one").unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let ledger = |p: &Path| {
            let (size, mtime_ns) = measure(p).unwrap();
            let mut l = Ledger::default();
            l.extend(vec![Checkpoint {
                path: p.to_path_buf(),
                step: Some(10),
                time_unix: 0.0,
                size,
                mtime_ns,
            }]);
            l
        };
        let l = ledger(&link);
        assert_eq!(measure(&link).unwrap().0, 8, "the target's size");
        assert!(l.resume_from().is_some());
        std::fs::write(&a, b"half").unwrap();
        assert_eq!(l.resume_from(), None, "rewritten behind the link");
        let l = ledger(&link);
        std::thread::sleep(Duration::from_millis(20));
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&b, &link).unwrap();
        std::fs::write(&b, b"half").unwrap();
        assert_eq!(l.resume_from(), None, "the link pointed elsewhere");
    }

    #[test]
    fn attempts_recordings_are_named_beside_the_first() {
        assert_eq!(
            attempt_recording(Path::new("/r/train.recording.csv"), 2),
            PathBuf::from("/r/train.attempt2.recording.csv")
        );
        assert_eq!(
            attempt_recording(Path::new("/r/rec"), 3),
            PathBuf::from("/r/rec.attempt3")
        );
    }

    #[test]
    fn the_table_lists_every_attempt() {
        let mut a1 = attempt(1, VerdictKind::OomKill, Some(120));
        a1.resumed = false;
        let mut a2 = attempt(2, VerdictKind::Exited, Some(300));
        a2.exit = TargetExit::Code(0);
        a2.resumed_from = Some(100);
        let t = attempts_table(&[a1, a2]);
        assert!(
            t.contains("attempt 1: oom_kill, step reached 120, from the start, 20 step(s) lost"),
            "{t}"
        );
        assert!(
            t.contains("attempt 2: exited, step reached 300, resumed from step 100"),
            "{t}"
        );
    }

    /// A checkpoint is measured whole or not at all: a directory past the entry bound, with
    /// a change past it, is never offered; a FIFO or a device is no checkpoint (issue 29,
    /// item 2).
    #[test]
    fn only_what_is_measured_whole_is_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::create_dir(&big).unwrap();
        for i in 0..=MAX_ENTRIES {
            std::fs::File::create(big.join(format!("f{i}"))).unwrap();
        }
        assert_eq!(measure(&big), None, "more entries than the bound");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(measure(&fifo), None, "a FIFO");
        assert_eq!(measure(std::path::Path::new("/dev/zero")), None, "a device");
        let small = dir.path().join("small");
        std::fs::create_dir(&small).unwrap();
        std::fs::write(small.join("a"), b"abc").unwrap();
        assert_eq!(measure(&small).unwrap().0, 3);
    }
}
