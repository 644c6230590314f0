//! The [`Sampler`]: one tick reads every source and pushes their samples into the ring.
//!
//! It owns the sources, the [`ProcessTree`] and the ring's writing end. A tick refreshes the
//! tree (every tick by default: a walk only when `/proc/loadavg` says a process or thread was
//! created or reaped, and in full at least once a second), then asks each enabled source for
//! its samples. A source that fails is logged once, in one sentence with the reason, and
//! disabled; the others go on.
//! The binary collects the failures with [`Sampler::take_new_failures`] to emit one
//! "unwatched" event each. Nothing in a tick allocates once the tree and the files are warm.

use std::path::Path;

use crate::ring::{SampleReader, SampleRing, SampleWriter};
use crate::tree::ProcessTree;
use crate::{Outcome, Source, SourceError, Tick};

struct Slot {
    source: Box<dyn Source>,
    error: Option<SourceError>,
    reported: bool,
}

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Samples pushed into the ring.
    pub pushed: u32,
    /// Samples dropped because the ring was full.
    pub dropped: u32,
    /// Sources disabled during this tick.
    pub newly_failed: u32,
    /// Whether the target was alive at this tick's tree refresh (or the last one).
    pub target_alive: bool,
    /// Whether the ring is at least three quarters full: wake the reader.
    pub wake_reader: bool,
}

/// Reads every source once per tick into the ring.
pub struct Sampler {
    slots: Vec<Slot>,
    tree: ProcessTree,
    writer: SampleWriter,
    ticks: u64,
    tree_refresh_every: u32,
    /// When the tree was last walked in full, ignoring the change gate.
    last_full_refresh_ns: Option<u64>,
}

/// The longest a tree refresh relies on the `/proc/loadavg` change gate
/// ([`ProcessTree::refresh_if_changed`]) before walking in full anyway.
pub const TREE_FULL_REFRESH_NS: u64 = 1_000_000_000;

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field(
                "sources",
                &self
                    .slots
                    .iter()
                    .map(|s| s.source.name())
                    .collect::<Vec<_>>(),
            )
            .field("tree", &self.tree.pids())
            .field("ticks", &self.ticks)
            .finish()
    }
}

impl Sampler {
    /// A sampler over `tree` writing into `writer`, with no sources yet.
    pub fn new(tree: ProcessTree, writer: SampleWriter) -> Self {
        Self {
            slots: Vec::new(),
            tree,
            writer,
            ticks: 0,
            tree_refresh_every: 1,
            last_full_refresh_ns: None,
        }
    }

    /// The usual setup in one call: tracks `target`'s tree under `proc_root`, makes a ring of
    /// `ring_capacity` samples, and adds `sources`. Returns the sampler and the ring's reader.
    pub fn for_target(
        proc_root: &Path,
        target: u32,
        sources: Vec<Box<dyn Source>>,
        ring_capacity: usize,
    ) -> Result<(Self, SampleReader), SourceError> {
        let tree = ProcessTree::new(proc_root, target)?;
        let (writer, reader) = SampleRing::new(ring_capacity);
        let mut me = Self::new(tree, writer);
        for s in sources {
            me.add_source(s);
        }
        Ok((me, reader))
    }

    /// Adds a source; it is read from the next tick on.
    pub fn add_source(&mut self, source: Box<dyn Source>) {
        self.slots.push(Slot {
            source,
            error: None,
            reported: false,
        });
    }

    /// Refreshes the process tree every `n` ticks (1 = every tick, the default; 0 is taken as 1).
    pub fn set_tree_refresh_every(&mut self, n: u32) {
        self.tree_refresh_every = n.max(1);
    }

    /// One sampling pass at `now_ns` (monotonic nanoseconds since the watchdog started).
    pub fn tick(&mut self, now_ns: u64) -> TickReport {
        if self
            .ticks
            .is_multiple_of(u64::from(self.tree_refresh_every))
        {
            let full_due = self
                .last_full_refresh_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= TREE_FULL_REFRESH_NS);
            if full_due {
                self.tree.refresh();
                self.last_full_refresh_ns = Some(now_ns);
            } else {
                self.tree.refresh_if_changed();
            }
        }
        self.ticks += 1;
        let mut report = TickReport {
            target_alive: self.tree.target_alive(),
            ..TickReport::default()
        };
        let tick = Tick {
            now_ns,
            tree: self.tree.pids(),
        };
        let writer = &mut self.writer;
        let (mut pushed, mut dropped) = (0u32, 0u32);
        for slot in &mut self.slots {
            if slot.error.is_some() {
                continue;
            }
            let result = slot.source.sample(&tick, &mut |s| {
                if writer.push(s) {
                    pushed += 1;
                } else {
                    dropped += 1;
                }
            });
            match result {
                Ok(Outcome::Sampled | Outcome::Idle) => {}
                Err(e) => {
                    tracing::warn!(
                        source = slot.source.name(),
                        "stopped watching {}: {e}",
                        slot.source.name()
                    );
                    slot.error = Some(e);
                    report.newly_failed += 1;
                }
            }
        }
        report.pushed = pushed;
        report.dropped = dropped;
        report.wake_reader = self.writer.nearly_full();
        report
    }

    /// The watched tree as of the last refresh, target first; empty once the target exited.
    pub fn tree_pids(&self) -> &[u32] {
        self.tree.pids()
    }

    /// Whether the target was alive at the last tree refresh.
    pub fn target_alive(&self) -> bool {
        self.tree.target_alive()
    }

    /// The process tree, e.g. to refresh it outside a tick.
    pub fn tree_mut(&mut self) -> &mut ProcessTree {
        &mut self.tree
    }

    /// Every source with its error, `None` while it works.
    pub fn sources(&self) -> impl Iterator<Item = (&str, Option<&SourceError>)> {
        self.slots
            .iter()
            .map(|s| (s.source.name(), s.error.as_ref()))
    }

    /// Calls `f` once for each source that failed since the last call, with its error.
    pub fn take_new_failures(&mut self, mut f: impl FnMut(&str, &SourceError)) {
        for slot in &mut self.slots {
            if let (Some(e), false) = (&slot.error, slot.reported) {
                slot.reported = true;
                f(slot.source.name(), e);
            }
        }
    }

    /// Samples dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.writer.dropped()
    }

    /// Ticks done so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ResourceTable;
    use crate::fake::{Scripted, ScriptedSource};
    use watchdog_types::ResourceKind;

    #[test]
    fn a_failing_source_is_disabled_and_reported_once_while_others_go_on() {
        let mut table = ResourceTable::default();
        let a = table.register(ResourceKind::HostMemory, "a".into(), "test".into());
        let b = table.register(ResourceKind::HostMemory, "b".into(), "test".into());
        let tree = ProcessTree::new(Path::new("/proc"), std::process::id()).unwrap();
        let (w, mut r) = SampleRing::new(64);
        let mut sampler = Sampler::new(tree, w);
        sampler.add_source(Box::new(ScriptedSource::new(
            "good",
            vec![Scripted::Sample(a, 1, 10)],
        )));
        sampler.add_source(Box::new(ScriptedSource::new(
            "bad",
            vec![
                Scripted::Sample(b, 1, 10),
                Scripted::Fail("unplugged".into()),
                Scripted::Sample(b, 2, 10),
            ],
        )));
        assert_eq!(sampler.tree_pids()[0], std::process::id());
        let first = sampler.tick(1);
        assert_eq!(
            (first.pushed, first.newly_failed, first.target_alive),
            (2, 0, true)
        );
        let second = sampler.tick(2);
        assert_eq!((second.pushed, second.newly_failed), (1, 1));
        let third = sampler.tick(3);
        assert_eq!((third.pushed, third.newly_failed), (1, 0));
        let mut failures = Vec::new();
        sampler.take_new_failures(|name, e| failures.push(format!("{name}: {e}")));
        assert_eq!(failures, vec!["bad: unplugged".to_string()]);
        sampler.take_new_failures(|_, _| panic!("reported twice"));
        let states: Vec<_> = sampler
            .sources()
            .map(|(n, e)| (n.to_string(), e.is_some()))
            .collect();
        assert_eq!(states, vec![("good".into(), false), ("bad".into(), true)]);
        let mut n = 0;
        r.drain(|_| n += 1);
        assert_eq!(n, 4);
    }

    #[test]
    fn a_full_ring_counts_drops_in_the_report() {
        let mut table = ResourceTable::default();
        let a = table.register(ResourceKind::HostMemory, "a".into(), "test".into());
        let tree = ProcessTree::new(Path::new("/proc"), std::process::id()).unwrap();
        let (w, _r) = SampleRing::new(2);
        let mut sampler = Sampler::new(tree, w);
        sampler.add_source(Box::new(ScriptedSource::new(
            "a",
            vec![Scripted::Sample(a, 5, 10)],
        )));
        let reports: Vec<_> = (0..4).map(|t| sampler.tick(t)).collect();
        assert_eq!(reports.iter().map(|r| r.dropped).sum::<u32>(), 2);
        assert!(reports[3].wake_reader);
        assert_eq!(sampler.dropped(), 2);
    }
}
