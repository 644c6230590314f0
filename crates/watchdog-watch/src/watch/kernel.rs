//! The kernel's wake-ups for one run (`docs/kernel-wake.md`): what can be armed is armed at
//! start, what cannot is said once with the reason, and that run is polled as before.
//!
//! - A cgroup v1 usage threshold on the target's memory cgroup when it has a limit: placed at
//!   the engine's [`wake_at`](watchdog_engine::Engine::wake_at) plus the cgroup's page cache
//!   (`memory.usage_in_bytes` counts cache, `cgroup_memory` does not), re-armed after a
//!   sample moved it. The only source the engine is told of (`set_kernel_wake`): the
//!   others wake the loop but place no level. While cache keeps usage within
//!   [`NEAR_LIMIT`] of the limit the threshold would fire at every reclaim: it is disarmed,
//!   the engine told, and the cgroup polled until usage falls back.
//! - A cgroup v2 `memory.events` watch (the `high`, `max` and OOM counters).
//! - A PSI trigger as a fallback wake: the cgroup's `memory.pressure` on v2, else
//!   system-wide `/proc/pressure/memory`.
//!
//! Nothing here waits: the loop polls [`KernelWake::each_fd`] beside its own descriptors
//! and calls [`KernelWake::consume`] when one is ready, then samples the run.

use std::os::fd::BorrowedFd;
use std::path::Path;

use watchdog_engine::Engine;
use watchdog_kernel_wake::{
    CgroupV1Threshold, CgroupV2Events, PollFlags, PsiSpec, PsiTrigger, Unarmable,
};
use watchdog_sampler::cgroup::{CgroupLocation, CgroupVersion};
use watchdog_types::ResourceId;

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

/// A v1 threshold and where it stands.
#[derive(Debug)]
struct V1Threshold {
    threshold: CgroupV1Threshold,
    id: ResourceId,
    limit: u64,
    /// The level armed; `None` while disarmed (cache near the limit).
    armed_at: Option<u64>,
}

/// The kernel sources of one run.
#[derive(Debug, Default)]
pub struct KernelWake {
    v1: Option<V1Threshold>,
    v2: Option<CgroupV2Events>,
    psi: Option<PsiTrigger>,
    /// What is armed, by name, for the start event.
    armed: Vec<String>,
    /// `(source, reason)` for each one that could not be armed.
    unarmed: Vec<(String, String)>,
}

impl KernelWake {
    /// Arms what can be armed for a run in `cgroup` (`None`: its memory cgroup is not
    /// watched), PSI's system-wide file under `proc_root`; says once what cannot be and why.
    pub fn arm(cgroup: Option<&CgroupWake>, proc_root: &Path) -> KernelWake {
        let mut k = KernelWake::default();
        let mut psi_path = proc_root.join("pressure/memory");
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

    /// The resource a v1 threshold wakes the loop for, while it is armed.
    pub fn covered(&self) -> Option<ResourceId> {
        let v1 = self.v1.as_ref()?;
        v1.armed_at.map(|_| v1.id)
    }

    /// Calls `f` with each descriptor to poll and the flag it becomes ready with.
    pub fn each_fd(&self, mut f: impl FnMut(BorrowedFd<'_>, PollFlags)) {
        if let Some(v1) = &self.v1
            && v1.armed_at.is_some()
        {
            f(v1.threshold.fd(), CgroupV1Threshold::POLL);
        }
        if let Some(v2) = &self.v2 {
            f(v2.fd(), CgroupV2Events::POLL);
        }
        if let Some(psi) = &self.psi {
            f(psi.fd(), PsiTrigger::POLL);
        }
    }

    /// After one of the descriptors was ready: reads what each signalled so none stays
    /// ready (a PSI trigger is reset by the poll itself), and drops a PSI trigger whose
    /// cgroup is gone (`POLLERR`), which would otherwise be ready for ever.
    pub fn consume(&mut self) {
        if let Some(v1) = &self.v1
            && let Err(e) = v1.threshold.consume()
        {
            tracing::debug!("{V1}: {e}");
        }
        if let Some(v2) = &mut self.v2
            && let Err(e) = v2.on_wake()
        {
            tracing::debug!("{V2}: {e}");
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
    }

    /// After a sample of the cgroup (`used` is `cgroup_memory`, `cache` its page cache,
    /// `limit` the limit it was read with):
    /// moves the v1 threshold to the engine's wake level plus the cache when that changed,
    /// or disarms it while cache keeps usage near the limit (and arms it again once usage
    /// falls back), telling the engine either way.
    pub fn after_sample(&mut self, engine: &mut Engine, used: u64, cache: u64, limit: u64) {
        let Some(v1) = &mut self.v1 else {
            return;
        };
        if limit != 0 && limit != u64::MAX {
            v1.limit = limit;
        }
        let usage = used.saturating_add(cache);
        let margin = (v1.limit / NEAR_LIMIT).max(MIN_MARGIN);
        let near = v1.limit.saturating_sub(margin);
        let level = match (v1.armed_at, engine.wake_at(v1.id)) {
            (None, _) if usage >= near.saturating_sub(2 * margin) && cache >= margin => return,
            // Usage fell back: armed again, just above it until the next sample's level.
            (None, _) => {
                engine.set_kernel_wake(v1.id, true);
                tracing::debug!("{V1}: usage fell back from the limit, armed again");
                just_above(usage, v1.limit)
            }
            (Some(_), Some(at)) => at.saturating_add(cache),
            (Some(_), None) => just_above(usage, v1.limit),
        };
        if (usage >= near || level >= near) && cache >= margin {
            if v1.armed_at.is_some() {
                tracing::debug!(
                    "{V1}: page cache keeps usage near the limit, disarmed (polling instead)"
                );
                engine.set_kernel_wake(v1.id, false);
                v1.armed_at = None;
                if let Err(e) = v1.threshold.rearm(&[]) {
                    tracing::debug!("{V1}: {e}");
                }
            }
            return;
        }
        // Registering a threshold waits for an RCU grace period in the kernel: one still
        // above the usage and not above the level (by more than a 1024th of the limit) is
        // kept while it lies within `margin` below the level, waking a little early.
        let slack = (v1.limit / 1024).max(1);
        if v1.armed_at.is_some_and(|at| {
            at > usage && at <= level.saturating_add(slack) && level.saturating_sub(at) < margin
        }) {
            return;
        }
        match v1.threshold.rearm(&[level]) {
            Ok(()) => {
                v1.armed_at = Some(level);
                // Usage that passed the level between the sample and now makes no crossing
                // the kernel would signal: signal it ourselves, so the loop samples again.
                if v1
                    .threshold
                    .usage_bytes()
                    .is_ok_and(|now| now >= level.saturating_add(slack))
                {
                    let _ = rustix::io::write(v1.threshold.fd(), &1u64.to_ne_bytes());
                }
            }
            Err(e) => {
                tracing::info!("{V1} cannot be moved, polling instead: {e}");
                engine.set_kernel_wake(v1.id, false);
                v1.armed_at = None;
            }
        }
    }
}

/// Opens the v1 threshold on `dir` and arms it just above the usage now.
fn arm_v1(dir: &Path, cg: &CgroupWake) -> Result<V1Threshold, Unarmable> {
    let mut threshold = CgroupV1Threshold::arm(dir, &[])?;
    let usage = threshold.usage_bytes().map_err(|e| Unarmable {
        path: dir.join("memory.usage_in_bytes"),
        reason: watchdog_kernel_wake::Reason::BadContent(e.to_string()),
        source: None,
    })?;
    let level = just_above(usage, cg.limit);
    threshold.rearm(&[level])?;
    Ok(V1Threshold {
        threshold,
        id: cg.id,
        limit: cg.limit,
        armed_at: Some(level),
    })
}

/// A level just above `usage` for the time before the engine gives one: a sixteenth of
/// the headroom above it, at least 1 MiB.
fn just_above(usage: u64, limit: u64) -> u64 {
    let headroom = limit.saturating_sub(usage);
    usage.saturating_add((headroom / 16).max(MIN_MARGIN))
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
        let k = KernelWake::arm(None, dir.path());
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

    /// A fresh v1 memory cgroup of `limit` bytes, removed on drop.
    struct Cgroup(std::path::PathBuf);
    impl Drop for Cgroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn page_cache_near_the_limit_disarms_the_threshold_and_usage_falling_back_arms_it() {
        use watchdog_testsupport::{is_root, require};
        let mount = Path::new("/sys/fs/cgroup/memory");
        if !require(is_root(), "root (to create a memory cgroup)")
            || !require(
                mount.join("memory.limit_in_bytes").exists(),
                "a cgroup v1 memory hierarchy",
            )
        {
            return;
        }
        const MIB: u64 = 1 << 20;
        let dir = mount.join(format!("wd-kernel-wake-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the cgroup");
        let cg = Cgroup(dir);
        let limit = 256 * MIB;
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
        let mut k = KernelWake::arm(Some(&wake), Path::new("/proc"));
        assert_eq!(k.covered(), Some(ResourceId(0)), "{:?}", k.unarmed());
        assert!(k.armed().iter().any(|a| a == V1));
        let mut engine = Engine::new(&[], watchdog_engine::EngineSettings::default());
        let fds = |k: &KernelWake| {
            let mut n = 0;
            k.each_fd(|_, _| n += 1);
            n
        };
        let armed_fds = fds(&k);
        // 253 MiB of usage, 200 of it page cache: within a 64th of the limit.
        k.after_sample(&mut engine, 53 * MIB, 200 * MIB, limit);
        assert_eq!(k.covered(), None, "cache near the limit must disarm");
        assert_eq!(fds(&k), armed_fds - 1, "a disarmed threshold is not polled");
        // Still there: stays disarmed.
        k.after_sample(&mut engine, 53 * MIB, 199 * MIB, limit);
        assert_eq!(k.covered(), None);
        // The cache reclaimed: armed again.
        k.after_sample(&mut engine, 53 * MIB, 10 * MIB, limit);
        assert_eq!(k.covered(), Some(ResourceId(0)));
        assert_eq!(fds(&k), armed_fds);
    }

    #[test]
    fn the_level_before_a_forecast_is_a_sixteenth_of_the_headroom_above() {
        assert_eq!(just_above(0, 1600 << 20), 100 << 20);
        assert_eq!(just_above(1000, 1000), 1000 + MIN_MARGIN);
    }
}
