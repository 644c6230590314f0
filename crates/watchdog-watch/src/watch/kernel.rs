//! The kernel's wake-ups for one run (`docs/kernel-wake.md`): what can be armed is armed at
//! start, what cannot is said once with the reason, and that run is polled as before.
//!
//! - Cgroup v1 usage thresholds on the target's memory cgroup when it has a limit, each on
//!   its own eventfd, in `memory.usage_in_bytes` terms (which count page cache:
//!   `cgroup_memory` does not, so the cgroup's cache is added to each level):
//!   - the *line*: the usage from which the next sample alerts at once
//!     ([`alert_level`](watchdog_engine::Engine::alert_level)), moved only when the line
//!     itself moves (the limit, the largest step, the cache);
//!   - the *high*: the engine's [`wake_at`](watchdog_engine::Engine::wake_at) (a new
//!     high) while that lies below the line, so a leak starting between two samples wakes
//!     the loop.
//!
//!   Both are moved without waiting (`CgroupV1Threshold::move_to`): registering a
//!   threshold waits for an RCU grace period in the kernel (8-20 ms seen here), which must
//!   not sit between a crossing and its signal, so a worker thread registers it while the
//!   old level stays armed. The engine is told the resource has a kernel wake
//!   (`set_kernel_wake`) while they are armed. While cache keeps usage within
//!   [`NEAR_LIMIT`] of the limit a threshold there would fire at every reclaim: both are
//!   disarmed, the engine told, and the cgroup polled until usage falls back.
//! - A cgroup v2 `memory.events` watch (the `high`, `max` and OOM counters).
//! - A PSI trigger as a fallback wake: the cgroup's `memory.pressure` on v2, else
//!   system-wide `/proc/pressure/memory`.
//!
//! Nothing is armed on a recorded tree (`WATCHDOG_ROOT`): no kernel writes its files, and
//! arming a PSI trigger would write into one; each source is said unarmed, with that reason.
//!
//! Nothing here waits: the loop polls [`KernelWake::each_fd`] beside its own descriptors
//! and calls [`KernelWake::consume`] when one is ready, then samples the run.

use std::os::fd::BorrowedFd;
use std::path::Path;

use watchdog_engine::Engine;
use watchdog_kernel_wake::{
    CgroupV1Threshold, CgroupV2Events, PollFlags, PsiSpec, PsiTrigger, Settled, Unarmable,
};
use watchdog_procfs::ProcRoot;
use watchdog_procfs::roots::PRESSURE_MEMORY;
use watchdog_sampler::cgroup::{CgroupLocation, CgroupVersion};
use watchdog_types::{ResourceId, WatchedBy};

/// The target's memory cgroup as its source found it.
#[derive(Debug, Clone)]
pub struct CgroupWake {
    /// Where it is.
    pub location: CgroupLocation,
    /// The `cgroup_memory` resource.
    pub id: ResourceId,
    /// The `cgroup_cache` resource (its page cache).
    pub cache: Option<ResourceId>,
    /// The effective limit at start (`u64::MAX`: none).
    pub limit: u64,
}

/// Usage this close to the limit (a fraction of it, at least [`MIN_MARGIN`]) with page
/// cache in it: the v1 threshold is disarmed and the cgroup polled.
const NEAR_LIMIT: u64 = 64;
/// The smallest band below the limit counted as near it.
const MIN_MARGIN: u64 = 1 << 20;

/// The name of the v1 threshold in `wake_sources`.
const V1: &str = "cgroup_v1_threshold";
/// The name of the v2 watch in `wake_sources`.
const V2: &str = "cgroup_v2_events";

/// One v1 threshold on its own eventfd: the level armed, and the level it is being moved
/// to (registered on a worker thread, not waited for: see `CgroupV1Threshold::move_to`).
#[derive(Debug)]
struct Level {
    threshold: CgroupV1Threshold,
    at: Option<u64>,
    moving_to: Option<u64>,
}

impl Level {
    fn new(threshold: CgroupV1Threshold) -> Level {
        Level {
            threshold,
            at: None,
            moving_to: None,
        }
    }

    /// The level armed or being armed.
    fn wanted(&self) -> Option<u64> {
        self.moving_to.or(self.at)
    }

    /// Starts moving the threshold to `level`, without waiting.
    fn move_to(&mut self, level: u64) -> Result<(), Unarmable> {
        self.threshold.move_to(level)?;
        self.moving_to = Some(level);
        Ok(())
    }

    /// Takes the outcome of a move that finished.
    fn settle(&mut self) -> Result<(), Unarmable> {
        match self.threshold.settle() {
            Settled::Nothing => Ok(()),
            Settled::Armed(level) => {
                self.at = Some(level);
                self.moving_to = None;
                Ok(())
            }
            Settled::Failed(e) => {
                self.moving_to = None;
                Err(e)
            }
        }
    }

    /// Closes the eventfd (and drops a move going on), which removes its threshold
    /// without waiting.
    fn close(&mut self) {
        if self.wanted().is_none() {
            return;
        }
        self.at = None;
        self.moving_to = None;
        if let Err(e) = self.threshold.rearm(&[]) {
            tracing::debug!("{V1}: {e}");
        }
    }

    /// Calls `f` with each eventfd to poll while a level is armed or being armed.
    fn each_fd(&self, f: &mut impl FnMut(BorrowedFd<'_>, PollFlags)) {
        if self.wanted().is_some() {
            self.threshold.each_fd(|fd| f(fd, CgroupV1Threshold::POLL));
        }
    }
}

/// The v1 thresholds of a cgroup and where they stand.
#[derive(Debug)]
struct V1Thresholds {
    /// At the alert line: always armed, moved only when the line moves.
    line: Level,
    /// At a new high, while the resource is sampled slowly.
    high: Level,
    id: ResourceId,
    limit: u64,
    /// Disarmed while page cache keeps usage near the limit.
    disarmed: bool,
    /// The usage (`cgroup_memory` plus cache) of the last sample: a line notice after one
    /// at or past the line was a fall through it.
    last_usage: u64,
}

/// Which v1 level's crossing woke a tick; ordered, so the line outranks the high when both
/// were crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Crossed {
    /// No crossing woke it.
    #[default]
    Neither,
    /// The high: a new high was reached.
    High,
    /// The alert line.
    Line,
}

/// What woke the loop, from [`KernelWake::consume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Woke {
    /// A cgroup source (a v1 threshold, v2 `memory.events`) signalled: the cgroup moved.
    pub cgroup: bool,
}

/// The kernel sources of one run.
#[derive(Debug, Default)]
pub struct KernelWake {
    v1: Option<V1Thresholds>,
    v2: Option<CgroupV2Events>,
    psi: Option<PsiTrigger>,
    /// What is armed, by name, for the start event.
    armed: Vec<String>,
    /// `(source, reason)` for each one that could not be armed.
    unarmed: Vec<(String, String)>,
    /// Wake-ups so far: from a cgroup source, from PSI.
    woken: (u64, u64),
    /// `cgroup_memory` and `cgroup_cache`, whose samples move the v1 threshold.
    ids: Option<(ResourceId, Option<ResourceId>)>,
    /// The hierarchy of the watched memory cgroup.
    version: Option<CgroupVersion>,
    /// This tick's `cgroup_memory` and its limit, when sampled, for the threshold moved
    /// at the end of the tick.
    tick_memory: Option<(u64, u64)>,
    /// This tick's page cache of the cgroup (0: not sampled).
    tick_cache: u64,
    /// A v1 crossing woke the loop this tick: the `cgroup.event_control` writes begun by
    /// then, and those in flight then (see [`alerted`](Self::alerted)).
    crossing: Option<(u64, u64)>,
    /// `cgroup.event_control` writes between a crossing and its alert, over the run.
    writes_before_signal: u32,
    /// The v1 crossing that woke this tick: the high is left where it is until a tick
    /// that was not woken by one, and the line is armed again when its crossing found the
    /// sample under the alert level (see [`after_tick`](Self::after_tick)).
    woken_by: Crossed,
}

impl KernelWake {
    /// Arms what can be armed for a run in `cgroup` (`None`: its memory cgroup is not
    /// watched), PSI's system-wide file under `proc`; says once what cannot be and why.
    pub fn arm(cgroup: Option<&CgroupWake>, proc: &ProcRoot) -> KernelWake {
        let mut k = KernelWake {
            ids: cgroup.map(|c| (c.id, c.cache)),
            version: cgroup.map(|c| c.location.version),
            ..KernelWake::default()
        };
        let mut psi_path = proc.file(PRESSURE_MEMORY);
        if proc.is_recorded() {
            const RECORDED: &str =
                "the files are a recorded tree's (WATCHDOG_ROOT): no kernel writes them";
            if let Some(cg) = cgroup {
                let (source, dir) = (&cg.location.version, &cg.location.dir);
                match source {
                    CgroupVersion::V1 => k.refused(V1, RECORDED.into()),
                    CgroupVersion::V2 => {
                        k.refused(V2, RECORDED.into());
                        psi_path = dir.join("memory.pressure");
                    }
                }
            }
            k.refused(&format!("psi:{}", psi_path.display()), RECORDED.into());
            return k;
        }
        if let Some(cg) = cgroup {
            let dir = &cg.location.dir;
            match cg.location.version {
                CgroupVersion::V1 if cg.limit == u64::MAX => k.refused(
                    V1,
                    "the memory cgroup has no limit: there is nothing to wake before".into(),
                ),
                CgroupVersion::V1 => match arm_v1(dir, cg) {
                    Ok(v1) => {
                        k.armed.push(V1.into());
                        k.v1 = Some(v1);
                    }
                    Err(e) => k.refused(V1, e.to_string()),
                },
                CgroupVersion::V2 => {
                    match CgroupV2Events::watch(dir) {
                        Ok(w) => {
                            k.armed.push(V2.into());
                            k.v2 = Some(w);
                        }
                        Err(e) => k.refused(V2, e.to_string()),
                    }
                    psi_path = dir.join("memory.pressure");
                }
            }
        }
        let psi_name = format!("psi:{}", psi_path.display());
        match PsiTrigger::arm(&psi_path, PsiSpec::DEFAULT) {
            Ok(t) => {
                k.armed.push(psi_name);
                k.psi = Some(t);
            }
            Err(e) => k.refused(&psi_name, reason_only(&e)),
        }
        k
    }

    /// Notes `source` as unarmed for `reason`, in one log line.
    fn refused(&mut self, source: &str, reason: String) {
        tracing::info!("{source} not armed, polling instead: {reason}");
        self.unarmed.push((source.to_string(), reason));
    }

    /// The sources armed, by name.
    pub fn armed(&self) -> &[String] {
        &self.armed
    }

    /// `(source, reason)` for each source that could not be armed.
    pub fn unarmed(&self) -> &[(String, String)] {
        &self.unarmed
    }

    /// The wake-ups so far: `(from a cgroup source, from PSI)`.
    pub fn wake_ups(&self) -> (u64, u64) {
        self.woken
    }

    /// The resource a v1 threshold wakes the loop for, while it is armed.
    pub fn covered(&self) -> Option<ResourceId> {
        let v1 = self.v1.as_ref()?;
        (!v1.disarmed).then_some(v1.id)
    }

    /// What watches `resource` between its samples, and why, in one line (the `start`
    /// event's `rates`): the kernel only where a level is armed at its alert line (the v1
    /// usage threshold of `cgroup_memory`); v2 `memory.events` and PSI wake the loop but
    /// place no level, so they do not count.
    pub fn watched_by(&self, resource: ResourceId) -> (WatchedBy, String) {
        const NO_LEVEL: &str = "no kernel level at the alert line";
        let Some((memory, cache)) = self.ids else {
            return (WatchedBy::Poll, NO_LEVEL.into());
        };
        if cache == Some(resource) {
            return (
                WatchedBy::Poll,
                "no limit, never alerted: read with cgroup_memory".into(),
            );
        }
        if resource != memory {
            return (WatchedBy::Poll, NO_LEVEL.into());
        }
        if self.covered().is_some() {
            return (
                WatchedBy::Kernel,
                "a cgroup v1 usage threshold at the alert line (cgroup.event_control)".into(),
            );
        }
        let unarmed = |source: &str| {
            self.unarmed
                .iter()
                .find(|(s, _)| s == source)
                .map(|(_, reason)| reason.clone())
        };
        let why = match self.version {
            Some(CgroupVersion::V2) => {
                "cgroup v2: memory.events and PSI place no level at the alert line".into()
            }
            _ => unarmed(V1).unwrap_or_else(|| {
                "the cgroup v1 usage threshold is disarmed (page cache near the limit)".into()
            }),
        };
        (WatchedBy::Poll, why)
    }

    /// Calls `f` with each descriptor to poll and the flag it becomes ready with.
    pub fn each_fd(&self, mut f: impl FnMut(BorrowedFd<'_>, PollFlags)) {
        if let Some(v1) = &self.v1 {
            v1.line.each_fd(&mut f);
            v1.high.each_fd(&mut f);
        }
        if let Some(v2) = &self.v2 {
            f(v2.fd(), CgroupV2Events::POLL);
        }
        if let Some(psi) = &self.psi {
            f(psi.fd(), PsiTrigger::POLL);
        }
    }

    /// After one of the descriptors was ready: reads what each signalled so none stays
    /// ready (a PSI trigger is reset by the poll itself), drops a PSI trigger whose cgroup
    /// is gone (`POLLERR`), which would otherwise be ready for ever, and says whether a
    /// cgroup source was among them (else it was PSI: memory is short somewhere).
    pub fn consume(&mut self) -> Woke {
        let mut woke = Woke::default();
        if let Some(v1) = &self.v1 {
            let mut crossed = Crossed::Neither;
            for (level, which) in [(&v1.line, Crossed::Line), (&v1.high, Crossed::High)] {
                if level.wanted().is_none() {
                    continue;
                }
                match level.threshold.consume() {
                    Ok(n) if n > 0 => crossed = crossed.max(which),
                    Ok(_) => {}
                    Err(e) => tracing::debug!("{V1}: {e}"),
                }
            }
            if crossed != Crossed::Neither {
                tracing::debug!(
                    "{V1}: crossed (line at {:?}, high at {:?})",
                    v1.line.wanted(),
                    v1.high.wanted()
                );
                let (begun, done) = v1.control_writes();
                // Read one after the other: a write may finish between the two loads.
                self.crossing = Some((begun, begun.saturating_sub(done)));
                self.woken_by = self.woken_by.max(crossed);
                woke.cgroup = true;
            }
        }
        if let Some(v2) = &mut self.v2 {
            match v2.on_wake() {
                Ok(wake) => woke.cgroup |= wake.grown.any(),
                Err(e) => tracing::debug!("{V2}: {e}"),
            }
        }
        let gone = self.psi.as_ref().is_some_and(|psi| {
            let mut fds = [rustix::event::PollFd::from_borrowed_fd(
                psi.fd(),
                PsiTrigger::POLL,
            )];
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            rustix::event::poll(&mut fds, Some(&zero)).is_ok()
                && fds[0]
                    .revents()
                    .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL)
        });
        if gone {
            tracing::info!("the PSI trigger's cgroup is gone: polling instead");
            self.psi = None;
        }
        if woke.cgroup {
            self.woken.0 += 1;
        } else {
            self.woken.1 += 1;
        }
        woke
    }

    /// The resources a cgroup wake-up makes due: `cgroup_memory` and its page cache (`None`:
    /// no cgroup is watched, every source is).
    pub fn cgroup_resources(&self) -> Option<[ResourceId; 2]> {
        self.ids
            .map(|(memory, cache)| [memory, cache.unwrap_or(memory)])
    }

    /// Notes what a sample of a tick says of the cgroup, for [`after_tick`](Self::after_tick).
    pub fn note(&mut self, sample: &watchdog_types::Sample) {
        let Some((memory, cache)) = self.ids else {
            return;
        };
        if sample.resource == memory {
            self.tick_memory = Some((sample.used, sample.limit));
        } else if Some(sample.resource) == cache {
            self.tick_cache = sample.used;
        }
    }

    /// The alert of this tick was sent (its request written, its signal sent): counts the
    /// `cgroup.event_control` writes since a v1 crossing woke the loop for it, if one did
    /// (those begun since, and one in flight then).
    pub fn alerted(&mut self) {
        let (Some((begun, in_flight)), Some(v1)) = (self.crossing.take(), &self.v1) else {
            return;
        };
        let since = v1.control_writes().0.saturating_sub(begun) + in_flight;
        if since > 0 {
            tracing::debug!("{V1}: {since} cgroup.event_control write(s) before the signal");
        }
        self.writes_before_signal = self
            .writes_before_signal
            .saturating_add(u32::try_from(since).unwrap_or(u32::MAX));
    }

    /// `cgroup.event_control` writes between a crossing waking the loop and the alert sent
    /// for it, over the run (the `exit` event's `event_control_writes_before_signal`).
    pub fn writes_before_signal(&self) -> u32 {
        self.writes_before_signal
    }

    /// At the end of a tick whose samples were [`note`](Self::note)d: moves the v1
    /// thresholds from the cgroup's figures, if it was sampled. A crossing that woke the
    /// tick and brought no alert is forgotten.
    ///
    /// On a tick a crossing woke, the high is not moved: a crossing is what comes before
    /// an alert, and registering a level (a `cgroup.event_control` write, 8-20 ms in the
    /// kernel on the worker thread) would then be going on when the line is crossed and
    /// the signal sent. It follows at the next tick no crossing woke; meanwhile the
    /// resource is sampled as the engine plans (at `interval` while it rises) and the line
    /// stays armed.
    ///
    /// A line crossing whose sample is under the alert level arms the line again at once:
    /// the kernel counts the line as crossed and says nothing when usage rises through it
    /// again, but its usage moves without it looking (the per-CPU charge batches drained,
    /// page cache grown), so the sample read after the notice can be a page under the line.
    /// A fresh registration looks at usage as it is (and one that finds usage already past
    /// it wakes the loop at once). A notice after a sample past the line was a fall, which
    /// the kernel saw: the line is left where it is.
    pub fn after_tick(&mut self, engine: &mut Engine) {
        self.crossing = None;
        let woken_by = std::mem::take(&mut self.woken_by);
        let cache = std::mem::take(&mut self.tick_cache);
        if let Some((used, limit)) = self.tick_memory.take() {
            self.after_sample(engine, used, cache, limit, woken_by);
        }
    }

    /// After a sample of the cgroup (`used` is `cgroup_memory`, `cache` its page cache,
    /// `limit` the limit it was read with): moves the line to the engine's alert level plus
    /// the cache when that moved, or when its crossing (`woken_by`) found `used` under the
    /// alert level, and the high to its wake level, or disarms both while cache keeps usage
    /// near the limit (and arms them again once usage falls back), telling the engine either
    /// way; the high is left where it is when a crossing woke this tick (see
    /// [`after_tick`](Self::after_tick)).
    pub fn after_sample(
        &mut self,
        engine: &mut Engine,
        used: u64,
        cache: u64,
        limit: u64,
        woken_by: Crossed,
    ) {
        let Some(v1) = &mut self.v1 else {
            return;
        };
        if let Err(e) = v1.follow(engine, used, cache, limit, woken_by) {
            // Said once: the thresholds are dropped, the engine told, the cgroup polled.
            tracing::info!("{V1} cannot be moved, polling instead: {e}");
            engine.set_kernel_wake(v1.id, false);
            self.v1 = None;
        }
    }
}

impl V1Thresholds {
    /// `cgroup.event_control` writes for both thresholds: `(begun, finished)`.
    fn control_writes(&self) -> (u64, u64) {
        let (a, b) = self.line.threshold.control_writes();
        let (c, d) = self.high.threshold.control_writes();
        (a + c, b + d)
    }

    /// [`KernelWake::after_sample`] for the v1 thresholds; an error when the kernel refused
    /// a level (the thresholds are then of no use).
    fn follow(
        &mut self,
        engine: &mut Engine,
        used: u64,
        cache: u64,
        limit: u64,
        woken_by: Crossed,
    ) -> Result<(), Unarmable> {
        let hold_high = woken_by != Crossed::Neither;
        if limit != 0 && limit != u64::MAX {
            self.limit = limit;
        }
        let usage = used.saturating_add(cache);
        let last_usage = std::mem::replace(&mut self.last_usage, usage);
        let margin = (self.limit / NEAR_LIMIT).max(MIN_MARGIN);
        let near = self.limit.saturating_sub(margin);
        if cache >= margin && usage >= near {
            if !self.disarmed {
                tracing::debug!(
                    "{V1}: page cache keeps usage near the limit, disarmed (polling instead)"
                );
                self.disarmed = true;
                engine.set_kernel_wake(self.id, false);
                self.line.close();
                self.high.close();
            }
            return Ok(());
        }
        if self.disarmed {
            // Armed again only once usage fell well back (or the cache went).
            if cache >= margin && usage >= near.saturating_sub(2 * margin) {
                return Ok(());
            }
            tracing::debug!("{V1}: usage fell back from the limit, armed again");
            self.disarmed = false;
            engine.set_kernel_wake(self.id, true);
        }
        self.line.settle()?;
        self.high.settle()?;
        let slack = (self.limit / 1024).max(1);
        let line = engine
            .alert_level(self.id)
            .map(|at| at.saturating_add(cache));
        if let Some(target) = line {
            // Late by more than the slack, or crossed (a wake-up before the line, cache
            // having grown) while the line is still ahead: moved.
            let stale = self.line.wanted().is_none_or(|at| {
                at > target.saturating_add(slack) || (at <= usage && target > usage)
            });
            // A rise through the line the sample does not show: the kernel will not say it
            // again. (A fall through it, from a sample past it, it will.)
            let unheard = woken_by == Crossed::Line
                && usage < target
                && self.line.wanted().is_some_and(|at| last_usage < at);
            if stale || unheard {
                let why = if stale {
                    ""
                } else {
                    "; crossed, the sample under it"
                };
                tracing::debug!(
                    "{V1}: line moved from {:?} to {target} (usage {usage}, cache {cache}){why}",
                    self.line.wanted()
                );
                self.line.move_to(target)?;
            }
        }
        // The high: a new high below the line, kept while it lies a little below the
        // level wanted (waking early).
        let wanted = engine
            .wake_at(self.id)
            .map(|at| at.saturating_add(cache))
            .filter(|at| line.is_none_or(|l| *at < l));
        match wanted {
            None => self.high.close(),
            Some(at)
                if hold_high
                    || self.high.wanted().is_some_and(|was| {
                        was > usage && was <= at && at.saturating_sub(was) < margin
                    }) => {}
            Some(at) => {
                tracing::debug!(
                    "{V1}: high moved from {:?} to {at} (usage {usage}, cache {cache})",
                    self.high.wanted()
                );
                self.high.move_to(at)?
            }
        }
        Ok(())
    }
}

/// Opens the v1 thresholds on `dir`; the line is armed at the first sample, the high
/// when the resource is slow.
fn arm_v1(dir: &Path, cg: &CgroupWake) -> Result<V1Thresholds, Unarmable> {
    let line = CgroupV1Threshold::arm(dir, &[])?;
    let mut high = CgroupV1Threshold::arm(dir, &[])?;
    // Registers one threshold now, so a kernel that refuses them is found at start.
    let usage = high.usage_bytes().map_err(|e| Unarmable {
        path: dir.join("memory.usage_in_bytes"),
        reason: watchdog_kernel_wake::Reason::BadContent(e.to_string()),
        source: None,
    })?;
    let headroom = cg.limit.saturating_sub(usage);
    high.rearm(&[usage.saturating_add((headroom / 16).max(MIN_MARGIN))])?;
    high.rearm(&[])?;
    Ok(V1Thresholds {
        line: Level::new(line),
        high: Level::new(high),
        id: cg.id,
        limit: cg.limit,
        disarmed: false,
        last_usage: 0,
    })
}

/// An unarmable source's reason line, without the path (the source's name says it).
fn reason_only(e: &Unarmable) -> String {
    e.reason.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_a_cgroup_arms_at_most_system_wide_psi() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = KernelWake::arm(None, &ProcRoot::new(dir.path()));
        assert!(k.armed().is_empty());
        assert_eq!(k.unarmed().len(), 1);
        let (name, reason) = &k.unarmed()[0];
        assert_eq!(
            *name,
            format!("psi:{}", dir.path().join("pressure/memory").display())
        );
        assert!(reason.contains("no PSI here"), "{reason}");
        assert!(k.covered().is_none());
    }

    #[test]
    fn only_a_resource_with_a_level_at_its_alert_line_is_watched_by_the_kernel() {
        let dir = tempfile::tempdir().expect("tempdir");
        let proc = ProcRoot::new(dir.path());
        let cgroup = |version, limit| CgroupWake {
            location: CgroupLocation {
                version,
                dir: dir.path().to_path_buf(),
                mount_point: dir.path().to_path_buf(),
            },
            id: ResourceId(1),
            cache: Some(ResourceId(2)),
            limit,
        };
        let no_cgroup = KernelWake::arm(None, &proc);
        assert_eq!(
            no_cgroup.watched_by(ResourceId(0)),
            (WatchedBy::Poll, "no kernel level at the alert line".into())
        );
        // v1 without a limit: the unarming reason.
        let v1 = KernelWake::arm(Some(&cgroup(CgroupVersion::V1, u64::MAX)), &proc);
        let (by, why) = v1.watched_by(ResourceId(1));
        assert_eq!(by, WatchedBy::Poll);
        assert!(why.contains("has no limit"), "{why}");
        assert_eq!(v1.watched_by(ResourceId(0)).0, WatchedBy::Poll);
        assert!(v1.watched_by(ResourceId(2)).1.contains("never alerted"));
        // v1 where the files are not a memory cgroup's: the kernel's refusal, named.
        let v1 = KernelWake::arm(Some(&cgroup(CgroupVersion::V1, 1 << 30)), &proc);
        let (by, why) = v1.watched_by(ResourceId(1));
        assert_eq!(by, WatchedBy::Poll);
        assert_eq!(why, v1.unarmed()[0].1, "{:?}", v1.unarmed());
        // v2, whatever is armed there: no level.
        let v2 = KernelWake::arm(Some(&cgroup(CgroupVersion::V2, 1 << 30)), &proc);
        let (by, why) = v2.watched_by(ResourceId(1));
        assert_eq!(by, WatchedBy::Poll);
        assert!(
            why.contains("memory.events and PSI place no level"),
            "{why}"
        );
    }

    #[test]
    fn an_armed_v1_threshold_makes_cgroup_memory_kernel_watched() {
        let Some((_cg, k)) = armed_cgroup("watched-by", 64 * MIB) else {
            return;
        };
        let (by, why) = k.watched_by(ResourceId(0));
        assert_eq!(by, WatchedBy::Kernel, "{why}");
        assert!(why.contains("cgroup v1 usage threshold"), "{why}");
    }

    /// An engine watching one resource, `cgroup_memory` (id 0), with the default floor.
    fn cgroup_engine() -> Engine {
        let resource = watchdog_types::Resource {
            id: ResourceId(0),
            kind: watchdog_types::ResourceKind::CgroupMemory,
            name: "cgroup_memory".into(),
            source: "test".into(),
        };
        Engine::new(&[resource], watchdog_engine::EngineSettings::default())
    }

    /// Has `engine` take one sample of `cgroup_memory`.
    fn observe(engine: &mut Engine, used: u64, limit: u64) {
        let s = watchdog_types::Sample {
            resource: ResourceId(0),
            t_ns: 0,
            used,
            limit,
        };
        engine.observe(&s, &mut Vec::new());
    }

    /// A fresh v1 memory cgroup of `limit` bytes, removed on drop.
    struct Cgroup(std::path::PathBuf);
    impl Drop for Cgroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    const MIB: u64 = 1 << 20;

    /// A fresh v1 memory cgroup of `limit` bytes and its threshold's wake-ups armed;
    /// `None` where the test cannot run (it fails under CI=true).
    fn armed_cgroup(name: &str, limit: u64) -> Option<(Cgroup, KernelWake)> {
        use watchdog_testsupport::{is_root, require};
        let mount = Path::new("/sys/fs/cgroup/memory");
        if !require(is_root(), "root (to create a memory cgroup)")
            || !require(
                mount.join("memory.limit_in_bytes").exists(),
                "a cgroup v1 memory hierarchy",
            )
        {
            return None;
        }
        let dir = mount.join(format!("wd-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the cgroup");
        let cg = Cgroup(dir);
        std::fs::write(cg.0.join("memory.limit_in_bytes"), limit.to_string()).expect("limit");
        let wake = CgroupWake {
            location: CgroupLocation {
                version: CgroupVersion::V1,
                dir: cg.0.clone(),
                mount_point: mount.to_path_buf(),
            },
            id: ResourceId(0),
            cache: None,
            limit,
        };
        let k = KernelWake::arm(Some(&wake), &ProcRoot::default());
        assert_eq!(k.covered(), Some(ResourceId(0)), "{:?}", k.unarmed());
        assert!(k.armed().iter().any(|a| a == V1));
        Some((cg, k))
    }

    #[test]
    fn page_cache_near_the_limit_disarms_the_threshold_and_usage_falling_back_arms_it() {
        let limit = 256 * MIB;
        let Some((_cg, mut k)) = armed_cgroup("kernel-wake", limit) else {
            return;
        };
        let mut engine = cgroup_engine();
        let fds = |k: &KernelWake| {
            let mut n = 0;
            k.each_fd(|_, _| n += 1);
            n
        };
        let unarmed_fds = fds(&k);
        observe(&mut engine, 10 * MIB, limit);
        k.after_sample(&mut engine, 10 * MIB, 0, limit, Crossed::Neither);
        assert!(
            fds(&k) > unarmed_fds,
            "the line is armed at the first sample"
        );
        // 253 MiB of usage, 200 of it page cache: within a 64th of the limit.
        observe(&mut engine, 53 * MIB, limit);
        k.after_sample(&mut engine, 53 * MIB, 200 * MIB, limit, Crossed::Neither);
        assert_eq!(k.covered(), None, "cache near the limit must disarm");
        assert_eq!(fds(&k), unarmed_fds, "a disarmed threshold is not polled");
        // Still there: stays disarmed.
        k.after_sample(&mut engine, 53 * MIB, 199 * MIB, limit, Crossed::Neither);
        assert_eq!(k.covered(), None);
        // The cache reclaimed: armed again.
        k.after_sample(&mut engine, 53 * MIB, 10 * MIB, limit, Crossed::Neither);
        assert_eq!(k.covered(), Some(ResourceId(0)));
        assert!(fds(&k) > unarmed_fds);
    }

    /// Whether the line's eventfds (the armed one, and the one being armed) are ready within
    /// `ms`: PSI, also armed, is left out.
    fn line_ready(k: &KernelWake, ms: i32) -> bool {
        use std::os::fd::AsFd as _;
        let mut fds = Vec::new();
        let v1 = k.v1.as_ref().expect("v1 thresholds");
        v1.line.each_fd(&mut |fd: BorrowedFd<'_>, flags| {
            fds.push((fd.try_clone_to_owned().expect("dup"), flags));
        });
        assert!(!fds.is_empty(), "the line is not armed");
        let mut polled: Vec<_> = fds
            .iter()
            .map(|(fd, flags)| rustix::event::PollFd::from_borrowed_fd(fd.as_fd(), *flags))
            .collect();
        let timeout = rustix::event::Timespec {
            tv_sec: i64::from(ms / 1000),
            tv_nsec: i64::from(ms % 1000) * 1_000_000,
        };
        rustix::event::poll(&mut polled, Some(&timeout)).expect("poll") > 0
    }

    /// A process holding memory, killed and reaped on drop (before its cgroup is removed).
    struct Held(std::process::Child);
    impl Drop for Held {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A process in `cg` touching memory a MiB at a time until the cgroup's usage is at
    /// least `usage`, then sleeping. (A fixed size crossed a level by 1-6 MiB, as much as
    /// the interpreter's own pages happened to be charged here: not always.)
    fn hold_usage_at(cg: &Cgroup, usage: u64) -> Held {
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && exec python3 -c 'import sys, time; b = [bytearray(1 << 20) \
                 for _ in iter(lambda: int(open(sys.argv[1]).read()) < {usage}, False)]; \
                 time.sleep(60)' {}",
                cg.0.join("tasks").display(),
                cg.0.join("memory.usage_in_bytes").display()
            ))
            .spawn()
            .expect("spawn the allocating process");
        Held(child)
    }

    /// The limit of [`cgroup_with_its_line`]'s cgroup.
    const LINE_CGROUP_LIMIT: u64 = 256 * MIB;

    /// A cgroup of [`LINE_CGROUP_LIMIT`] whose line is armed from a first sample, and the line.
    fn cgroup_with_its_line(name: &str) -> Option<(Cgroup, KernelWake, Engine, u64)> {
        let limit = LINE_CGROUP_LIMIT;
        let (cg, mut k) = armed_cgroup(name, limit)?;
        let mut engine = cgroup_engine();
        observe(&mut engine, 0, limit);
        k.after_sample(&mut engine, 0, 0, limit, Crossed::Neither);
        let line = engine.alert_level(ResourceId(0)).expect("an alert level");
        assert!(line > 240 * MIB && line < 245 * MIB, "{line}");
        until_the_line_settles(&mut k, &mut engine, 0, Crossed::Neither);
        assert_eq!(k.v1.as_ref().and_then(|v1| v1.line.at), Some(line));
        assert!(!line_ready(&k, 0), "nothing crossed the line yet");
        Some((cg, k, engine, line))
    }

    /// Samples `used` (woken by `woken_by`) every 5 ms until the line's move, registered on
    /// the worker thread, is taken; fails after 30 s.
    fn until_the_line_settles(
        k: &mut KernelWake,
        engine: &mut Engine,
        used: u64,
        woken_by: Crossed,
    ) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while k.v1.as_ref().is_some_and(|v1| v1.line.moving_to.is_some()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the line's move not taken in 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
            k.after_sample(engine, used, 0, LINE_CGROUP_LIMIT, woken_by);
        }
    }

    #[test]
    fn a_process_crossing_the_alert_line_signals_the_line_at_once() {
        let Some((cg, mut k, _engine, line)) = cgroup_with_its_line("kernel-line") else {
            return;
        };
        let _held = hold_usage_at(&cg, line + 2 * MIB);
        assert!(
            line_ready(&k, 20_000),
            "no wake-up from the line within 20 s"
        );
        assert!(k.consume().cgroup, "the wake-up is the cgroup's");
        assert_eq!(k.woken_by, Crossed::Line);
    }

    #[test]
    fn a_line_crossing_whose_sample_is_under_the_line_arms_it_again_and_is_heard_again() {
        let Some((cg, mut k, mut engine, line)) = cgroup_with_its_line("kernel-again") else {
            return;
        };
        let limit = LINE_CGROUP_LIMIT;
        let _held = hold_usage_at(&cg, line + 2 * MIB);
        let moving = |k: &KernelWake| k.v1.as_ref().and_then(|v1| v1.line.moving_to);
        assert!(
            line_ready(&k, 20_000),
            "no wake-up from the line within 20 s"
        );
        assert!(k.consume().cgroup);
        // The kernel counts the line as crossed from here: usage holds past it and no notice
        // comes again.
        assert!(!line_ready(&k, 0));
        // The crossing's sample is a page under the line (the per-CPU charge batches
        // drained, page cache grown), the last one was under it too: a rise the sample does
        // not show. Armed again, and usage already past the line is heard.
        k.after_sample(&mut engine, line - 4096, 0, limit, Crossed::Line);
        assert_eq!(
            moving(&k),
            Some(line),
            "the line is armed again where it was"
        );
        assert!(
            line_ready(&k, 20_000),
            "usage past the line armed again woke no one within 20 s"
        );
        assert!(k.consume().cgroup);
        // A crossing whose sample is past the line (it alerts): left where it is.
        until_the_line_settles(&mut k, &mut engine, line + MIB, Crossed::Line);
        k.after_sample(&mut engine, line + MIB, 0, limit, Crossed::Line);
        assert_eq!(
            moving(&k),
            None,
            "a crossing the sample shows is not armed again"
        );
        // A notice whose sample is under the line after one past it: a fall through the
        // line, which the kernel said and will say again when usage rises: left too.
        k.after_sample(&mut engine, line - 4096, 0, limit, Crossed::Line);
        assert_eq!(
            moving(&k),
            None,
            "a fall through the line is not armed again"
        );
    }
}
