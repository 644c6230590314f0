//! What the verdict looks at besides the samples: the cgroup's OOM-kill counter as it
//! was at the start, and the kernel log from the start on (see [`super::kmsg`]); and the
//! verdict itself once the run ended, for a restart's decision.

use watchdog_engine::verdict::{self, ResourceEnd, Verdict};
use watchdog_sampler::cgroup::OomKillCounter;

use super::kmsg::Kmsg;

/// The evidence of one run's end.
#[derive(Default)]
pub(super) struct Evidence {
    /// The OOM-kill counter and its value at the start.
    oom_counter: Option<(OomKillCounter, u64)>,
    /// The kernel log, positioned at the start.
    kmsg: Option<Kmsg>,
    /// The verdict and the resources' ends, once the run ended.
    pub(super) last_verdict: Option<(Verdict, Vec<ResourceEnd>)>,
}

impl Evidence {
    /// Takes the counter's value now and the kernel log's end, as the start's.
    pub(super) fn at_start(counter: Option<OomKillCounter>, kmsg: Option<Kmsg>) -> Evidence {
        Evidence {
            oom_counter: counter.and_then(|mut c| c.read().ok().map(|n| (c, n))),
            kmsg,
            last_verdict: None,
        }
    }

    /// The OOM-kill counter at the start and now, when it can be read.
    pub(super) fn oom_kills(&mut self) -> Option<(u64, u64)> {
        let (counter, before) = self.oom_counter.as_mut()?;
        counter.read().ok().map(|after| (*before, after))
    }

    /// The kernel's OOM-kill line about one of `pids`, logged since the start.
    pub(super) fn kernel_oom_line(&mut self, pids: &[u32]) -> Option<String> {
        let records = self.kmsg.as_mut()?.read_new();
        verdict::find_oom_line(&records, pids)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn only_what_was_logged_after_the_start_is_evidence() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        let line = |pid: u32| {
            format!("3,100,5000,-;Memory cgroup out of memory: Killed process {pid} (python)\n")
        };
        std::fs::write(&log, line(41)).unwrap();
        let mut evidence = Evidence::at_start(None, Kmsg::open_at_end(&log));
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(line(42).as_bytes()).unwrap();
        // PID 41's kill was before the start; 42's is this run's.
        let found = evidence.kernel_oom_line(&[41, 42]).unwrap();
        assert!(found.contains("Killed process 42"), "{found}");
        assert_eq!(evidence.oom_kills(), None);
        assert!(Evidence::default().kernel_oom_line(&[42]).is_none());
    }
}
