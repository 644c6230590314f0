//! The [`Sampler`]: one tick reads every source and pushes their samples into the ring.
//!
//! It owns the sources, the [`ProcessTree`] and the ring's writing end. A tick refreshes the
//! tree (every tick by default: a walk only when `/proc/loadavg` says a process or thread was
//! created or reaped, and in full at least once a second), then asks each enabled source for
//! its samples; the others go on when one fails.
//!
//! A failed read is usually transient (`EINTR`, a cgroup being migrated, a network filesystem
//! briefly unreachable), so a failing source is not given up: it is logged once, in one
//! sentence with the reason, skipped, and tried again after 1 s, 2 s, 4 s ... at most 60 s
//! apart ([`retry_delay_ns`]); the first read that works again logs one "watching X again"
//! line. Only [`SourceError::Gone`] (a device fell off the bus, a filesystem was unmounted)
//! stops a source for good. The binary collects each failure once with
//! [`Sampler::take_new_failures`] to emit one "unwatched" event, and each recovery with
//! [`Sampler::take_recoveries`]. Nothing in a tick allocates once the tree and the files are
//! warm (a retry allocates only what the failing source does to build its error).
//!
//! Each source is read only when it is due. It remembers the resources it emitted; after a
//! tick, [`Sampler::plan`] sets its next read at the tick plus the shortest delay the
//! caller gives for any of them (the engine's `next_due`: `interval` while a resource
//! approaches its limit, up to `max_interval` while it is far), and
//! [`Sampler::next_due_ns`] says when the first source is due. A tick also reads every
//! slow source (planned at the slow delay) due within half that delay
//! ([`SLACK_DIVISOR`]) that no other tick would read before it is due: reading early costs no accuracy, and slow sources whose
//! due times drifted apart (each resource's bucket closes on its own, up to half a period
//! apart) then share one wake instead of waking the loop each. Without `plan` every
//! source is read at every tick, as before rates were adaptive.

use std::path::Path;

use crate::ring::{SampleReader, SampleRing, SampleWriter};
use crate::tree::ProcessTree;
use crate::{Outcome, Source, SourceError, Tick};
use watchdog_types::{ResourceId, Sample};

/// Most resources a source's due time follows; a source emitting more is read every tick.
pub const SLOT_RESOURCES: usize = 16;

struct Slot {
    source: Box<dyn Source>,
    /// The latest error while the source fails; `None` while it works.
    error: Option<SourceError>,
    /// Whether the current failure was handed out by `take_new_failures`.
    reported: bool,
    /// Whether a recovery from a reported failure waits for `take_recoveries`.
    recovered: bool,
    /// The source said [`SourceError::Gone`]: never read again.
    gone: bool,
    /// Failed reads in a row (0 while it works).
    failures: u32,
    /// While failing, when to try again (the tick's monotonic nanoseconds).
    retry_at_ns: u64,
    /// The resources this source emitted so far (the first `n_ids`).
    ids: [ResourceId; SLOT_RESOURCES],
    n_ids: usize,
    /// It emitted more resources than `ids` holds: read at every tick.
    ids_overflow: bool,
    /// When it was last read (or tried); `None` before its first read.
    read_ns: Option<u64>,
    /// When it is next to be read (0: at the next tick).
    due_ns: u64,
    /// The delay `plan` gave it after its last read (0: due at every tick).
    delay_ns: u64,
    /// How early a tick may read it: half that delay when it is the slow one, else 0.
    slack_ns: u64,
}

impl Slot {
    /// Whether the source is due at `now_ns` (or, failing, its retry is).
    fn due(&self, now_ns: u64) -> bool {
        self.readable(now_ns) && now_ns >= self.due_ns
    }

    /// Whether the source is not due at `now_ns` but will be within its slack.
    fn due_within_slack(&self, now_ns: u64) -> bool {
        self.readable(now_ns)
            && now_ns < self.due_ns
            && now_ns.saturating_add(self.slack_ns) >= self.due_ns
    }

    /// Whether the source may be read at `now_ns` at all: not gone, and not failing
    /// before its retry.
    fn readable(&self, now_ns: u64) -> bool {
        !self.gone && (self.error.is_none() || now_ns >= self.retry_at_ns)
    }

    /// Due at the next tick, with no planned delay that would let that tick read other
    /// sources early on its account (a wake-up's tick reads what it was woken for).
    fn due_now(&mut self) {
        self.due_ns = 0;
        self.delay_ns = 0;
        self.slack_ns = 0;
    }

    /// When it is next due, as of now (a failing source: at its retry).
    fn next_ns(&self) -> u64 {
        if self.error.is_some() {
            self.due_ns.max(self.retry_at_ns)
        } else {
            self.due_ns
        }
    }
}

/// A source is read up to this fraction of its planned delay early, at a tick that comes
/// then when no other tick would come before it is due: slow sources whose due times
/// drifted apart (each resource's bucket closes on its own) share one wake instead of
/// waking the loop each.
pub const SLACK_DIVISOR: u64 = 2;

/// The first retry of a failed source comes this long after the failure ...
pub const RETRY_FIRST_NS: u64 = 1_000_000_000;
/// ... each later one twice as long after the previous, but never more than this.
pub const RETRY_MAX_NS: u64 = 60_000_000_000;

/// How long to wait before the next read of a source that has failed `failures` times in a
/// row (1 s, 2 s, 4 s ... capped at 60 s). Pure.
pub fn retry_delay_ns(failures: u32) -> u64 {
    let mut delay = RETRY_FIRST_NS;
    for _ in 1..failures {
        delay = delay.saturating_mul(2);
        if delay >= RETRY_MAX_NS {
            break;
        }
    }
    delay.min(RETRY_MAX_NS)
}

/// When the tick after one at `now_ns` comes at the latest, as far as the sources not due
/// within their slack say: each source due now at now plus its last planned delay (which
/// `plan` will likely give again), each other at its due time. A source due within its
/// slack is read early only when it is due before that: otherwise that tick reads it.
fn horizon_ns(slots: &[Slot], now_ns: u64) -> u64 {
    slots
        .iter()
        .filter(|s| !s.gone && !s.due_within_slack(now_ns))
        .map(|s| {
            if s.due(now_ns) {
                now_ns.saturating_add(s.delay_ns)
            } else {
                s.next_ns()
            }
        })
        .min()
        .unwrap_or(u64::MAX)
}

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Samples pushed into the ring.
    pub pushed: u32,
    /// Samples dropped because the ring was full.
    pub dropped: u32,
    /// Sources that started failing during this tick (retried later unless gone for good).
    pub newly_failed: u32,
    /// Sources that read again during this tick after failing.
    pub recovered: u32,
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
            recovered: false,
            gone: false,
            failures: 0,
            retry_at_ns: 0,
            ids: [ResourceId(0); SLOT_RESOURCES],
            n_ids: 0,
            ids_overflow: false,
            read_ns: None,
            due_ns: 0,
            delay_ns: 0,
            slack_ns: 0,
        });
    }

    /// Refreshes the process tree every `n` ticks (1 = every tick, the default; 0 is taken as 1).
    pub fn set_tree_refresh_every(&mut self, n: u32) {
        self.tree_refresh_every = n.max(1);
    }

    /// One sampling pass at `now_ns` (monotonic nanoseconds since the watchdog started).
    pub fn tick(&mut self, now_ns: u64) -> TickReport {
        self.tick_into(now_ns, &mut |_| {})
    }

    /// One sampling pass that also hands each sample to `decide` as it is read, before it
    /// goes into the ring: the caller's decisions happen on this wake-up, while the ring's
    /// reader takes the samples on its own schedule.
    pub fn tick_into(&mut self, now_ns: u64, decide: &mut dyn FnMut(&Sample)) -> TickReport {
        if self
            .ticks
            .is_multiple_of(u64::from(self.tree_refresh_every))
        {
            // The target alone has no child to lose to the change gate: no full walk.
            let full_due = self
                .last_full_refresh_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= TREE_FULL_REFRESH_NS)
                && !self.tree.is_single_process();
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
        let horizon = horizon_ns(&self.slots, now_ns);
        let writer = &mut self.writer;
        let (mut pushed, mut dropped) = (0u32, 0u32);
        for slot in &mut self.slots {
            let failing = slot.error.is_some();
            let early = slot.due_within_slack(now_ns) && slot.due_ns < horizon;
            if !slot.due(now_ns) && !early {
                continue;
            }
            slot.read_ns = Some(now_ns);
            // Due again at once until `plan` says otherwise.
            slot.due_ns = now_ns;
            slot.delay_ns = 0;
            slot.slack_ns = 0;
            let (ids, n_ids, overflow) = (&mut slot.ids, &mut slot.n_ids, &mut slot.ids_overflow);
            let result = slot.source.sample(&tick, &mut |s| {
                if !ids[..*n_ids].contains(&s.resource) {
                    if *n_ids < SLOT_RESOURCES {
                        ids[*n_ids] = s.resource;
                        *n_ids += 1;
                    } else {
                        *overflow = true;
                    }
                }
                decide(&s);
                if writer.push(s) {
                    pushed += 1;
                } else {
                    dropped += 1;
                }
            });
            match result {
                Ok(Outcome::Sampled | Outcome::Idle) => {
                    if failing {
                        tracing::info!(
                            source = slot.source.name(),
                            "watching {} again (after {} failed reads)",
                            slot.source.name(),
                            slot.failures
                        );
                        slot.error = None;
                        slot.failures = 0;
                        // A failure nobody heard of needs no recovery announced.
                        slot.recovered = slot.reported;
                        slot.reported = false;
                        report.recovered += 1;
                    }
                }
                Err(e) => {
                    slot.failures = slot.failures.saturating_add(1);
                    let delay = retry_delay_ns(slot.failures);
                    slot.retry_at_ns = now_ns.saturating_add(delay);
                    slot.gone = matches!(e, SourceError::Gone(_));
                    let name = slot.source.name();
                    if slot.gone {
                        tracing::warn!(source = name, "stopped watching {name}: {e}");
                    } else if !failing {
                        tracing::warn!(
                            source = name,
                            "cannot read {name}, retrying in {} s and less often after that (at most every {} s): {e}",
                            delay / 1_000_000_000,
                            RETRY_MAX_NS / 1_000_000_000
                        );
                    } else {
                        tracing::debug!(source = name, "{name} still fails: {e}");
                    }
                    if !failing {
                        report.newly_failed += 1;
                        // Failed again before its recovery was collected: to the collector
                        // it never stopped failing, so there is nothing new to report.
                        slot.reported = std::mem::take(&mut slot.recovered);
                    }
                    slot.error = Some(e);
                }
            }
        }
        report.pushed = pushed;
        report.dropped = dropped;
        report.wake_reader = self.writer.nearly_full();
        report
    }

    /// Sets when each source read at the last tick is next due: that tick plus the shortest
    /// `after(id)` over the resources it emitted, or plus `idle` (the slow delay,
    /// `max_interval`) for a source that emitted none yet (a GPU nobody uses, a tree sum
    /// between its own periods). A source emitting more than [`SLOT_RESOURCES`] resources
    /// stays due at every tick. Only a source planned `idle` or later may be read early.
    pub fn plan(
        &mut self,
        after: &dyn Fn(ResourceId) -> std::time::Duration,
        idle: std::time::Duration,
    ) {
        for slot in &mut self.slots {
            let Some(read) = slot.read_ns else { continue };
            if slot.due_ns != read || slot.ids_overflow {
                continue;
            }
            let delay = slot.ids[..slot.n_ids]
                .iter()
                .map(|&id| after(id))
                .min()
                .unwrap_or(idle);
            slot.delay_ns = delay.as_nanos().min(u128::from(u64::MAX)) as u64;
            slot.due_ns = read.saturating_add(slot.delay_ns);
            // Sooner than the slow delay (a bucket closing, a resource approaching), the
            // engine wants the sample then: read early, it is only planned again for then.
            slot.slack_ns = if delay >= idle {
                slot.delay_ns / SLACK_DIVISOR
            } else {
                0
            };
        }
    }

    /// Makes every source due at the next tick (a last look before the end).
    pub fn all_due(&mut self) {
        for slot in &mut self.slots {
            slot.due_now();
        }
    }

    /// Makes the sources that emitted any of `ids` at their last read due at the next tick
    /// (a kernel wake-up said those resources moved).
    pub fn make_due(&mut self, ids: &[ResourceId]) {
        for slot in &mut self.slots {
            if slot.ids_overflow || slot.ids[..slot.n_ids].iter().any(|id| ids.contains(id)) {
                slot.due_now();
            }
        }
    }

    /// When the first source is next due (monotonic nanoseconds, as `tick`'s `now_ns`): a
    /// failing source at its retry; `None` when no source is left to read.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.slots
            .iter()
            .filter(|s| !s.gone)
            .map(Slot::next_ns)
            .min()
    }

    /// Whether a tick at `now_ns` would read a source: one is due, or one due within its
    /// slack would otherwise have a wake of its own, none coming before it is due from
    /// this sampler nor (the caller's next wake) at `next_wake_ns`. The service steps such
    /// a run at a wake another run or a chore made, so that its runs share wakes.
    pub fn due_soon(&self, now_ns: u64, next_wake_ns: u64) -> bool {
        let horizon = horizon_ns(&self.slots, now_ns).min(next_wake_ns);
        self.slots
            .iter()
            .any(|s| s.due(now_ns) || (s.due_within_slack(now_ns) && s.due_ns < horizon))
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

    /// Every source with its latest error while it fails (being retried, or gone for good when
    /// the error is [`SourceError::Gone`]), `None` while it works.
    pub fn sources(&self) -> impl Iterator<Item = (&str, Option<&SourceError>)> {
        self.slots
            .iter()
            .map(|s| (s.source.name(), s.error.as_ref()))
    }

    /// Calls `f` once for each source that started failing since the last call, with its
    /// error. A source that recovers and fails again is reported again; one that failed and
    /// recovered between two calls is not reported (its log lines remain).
    pub fn take_new_failures(&mut self, mut f: impl FnMut(&str, &SourceError)) {
        for slot in &mut self.slots {
            if let (Some(e), false) = (&slot.error, slot.reported) {
                slot.reported = true;
                f(slot.source.name(), e);
            }
        }
    }

    /// Calls `f` once for each source that reads again since the last call after a failure
    /// that [`take_new_failures`](Self::take_new_failures) reported.
    pub fn take_recoveries(&mut self, mut f: impl FnMut(&str)) {
        for slot in &mut self.slots {
            if std::mem::take(&mut slot.recovered) {
                f(slot.source.name());
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

    /// A sampler over this test process's tree reading the scripted `sources`, and the
    /// reader of its ring of `ring` samples.
    fn scripted(ring: usize, sources: Vec<(&str, Vec<Scripted>)>) -> (Sampler, SampleReader) {
        let sources = sources
            .into_iter()
            .map(|(name, script)| Box::new(ScriptedSource::new(name, script)) as Box<dyn Source>)
            .collect();
        Sampler::for_target(Path::new("/proc"), std::process::id(), sources, ring).unwrap()
    }

    /// One tick at `t`, then the plan after it (`after`, `idle`): the resources read.
    fn tick_and_plan(
        sampler: &mut Sampler,
        r: &mut SampleReader,
        t: u64,
        after: &dyn Fn(ResourceId) -> std::time::Duration,
        idle: std::time::Duration,
    ) -> Vec<u16> {
        let mut seen = Vec::new();
        sampler.tick_into(t, &mut |s| seen.push(s.resource.0));
        sampler.plan(after, idle);
        r.drain(|_| {});
        seen
    }

    #[test]
    fn each_source_is_read_when_its_resources_are_due_and_the_first_due_is_said() {
        use std::time::Duration;
        const MS: u64 = 1_000_000;
        let (fast, slow, two) = (ResourceId(0), ResourceId(1), ResourceId(2));
        let (mut sampler, mut r) = scripted(
            256,
            vec![
                ("fast", vec![Scripted::Sample(fast, 1, 10)]),
                ("slow", vec![Scripted::Sample(slow, 1, 10)]),
                // Emits the slow resource, then also the fast one: the fast one rules.
                (
                    "both",
                    vec![Scripted::Sample(slow, 1, 10), Scripted::Sample(two, 1, 10)],
                ),
                ("idle", vec![]),
            ],
        );
        // Without a plan every source is read at every tick, as before.
        sampler.tick(0);
        assert_eq!(sampler.next_due_ns(), Some(0));
        let after = |id: ResourceId| {
            Duration::from_millis(match id.0 {
                0 | 2 => 100,
                _ => 1000,
            })
        };
        let idle = Duration::from_millis(900);
        sampler.plan(&after, idle);
        // fast due at 100 ms, slow at 1 s, both at 1 s (it emitted only `slow` so far),
        // idle at 900 ms.
        assert_eq!(sampler.next_due_ns(), Some(100 * MS));
        let mut read =
            |sampler: &mut Sampler, t: u64| tick_and_plan(sampler, &mut r, t, &after, idle);
        assert_eq!(read(&mut sampler, 100 * MS), vec![0]);
        assert_eq!(sampler.next_due_ns(), Some(200 * MS));
        // (`fast` may be read from 150 ms on, half its delay early: see the next test.)
        assert_eq!(
            read(&mut sampler, 140 * MS),
            Vec::<u16>::new(),
            "nothing due"
        );
        assert_eq!(read(&mut sampler, 200 * MS), vec![0]);
        assert_eq!(read(&mut sampler, 1000 * MS), vec![0, 1, 2]);
        // `both` now emitted `two` too: due 100 ms on, with `fast`.
        assert_eq!(sampler.next_due_ns(), Some(1100 * MS));
        assert_eq!(read(&mut sampler, 1100 * MS), vec![0, 2]);
        assert_eq!(sampler.ticks(), 6);
    }

    /// Regression: slow sources whose due times drifted apart (each resource's bucket
    /// closes on its own) woke the loop each, about twice a second at rest.
    #[test]
    fn a_tick_reads_the_sources_due_within_half_their_delay_and_they_stay_together() {
        use std::time::Duration;
        const MS: u64 = 1_000_000;
        let (a, b, c) = (ResourceId(0), ResourceId(1), ResourceId(2));
        let (mut sampler, mut r) = scripted(
            256,
            vec![
                ("a", vec![Scripted::Sample(a, 1, 10)]),
                ("b", vec![Scripted::Sample(b, 1, 10)]),
                ("c", vec![Scripted::Sample(c, 1, 10)]),
            ],
        );
        let mut read = |sampler: &mut Sampler, t: u64, b_after_ms: u64| {
            let after =
                |id: ResourceId| Duration::from_millis(if id == b { b_after_ms } else { 1000 });
            tick_and_plan(sampler, &mut r, t, &after, Duration::from_secs(1))
        };
        // `b` is planned on a phase of its own: 200 ms after the others' first read.
        assert_eq!(read(&mut sampler, 0, 200), vec![0, 1, 2]);
        assert_eq!(read(&mut sampler, 200 * MS, 1000), vec![1]);
        assert_eq!(sampler.next_due_ns(), Some(1000 * MS));
        // `b` is due at 1.2 s, within half a second of the 1 s wake: read with the others,
        // and from then on all three are due together, one wake a second.
        assert_eq!(read(&mut sampler, 1000 * MS, 1000), vec![0, 1, 2]);
        assert_eq!(sampler.next_due_ns(), Some(2000 * MS));
        assert_eq!(read(&mut sampler, 2000 * MS, 1000), vec![0, 1, 2]);
        // Nothing is read more than half its delay early.
        assert_eq!(read(&mut sampler, 2490 * MS, 1000), Vec::<u16>::new());
        assert_eq!(read(&mut sampler, 2500 * MS, 1000), vec![0, 1, 2]);
    }

    /// A source due within its slack waits for a tick another source makes before it is
    /// due: it is read early only to spare a wake, not more often than that needs.
    #[test]
    fn a_source_is_read_early_only_when_no_other_tick_comes_before_it_is_due() {
        use std::time::Duration;
        const MS: u64 = 1_000_000;
        let (fast, slow) = (ResourceId(0), ResourceId(1));
        let (mut sampler, mut r) = scripted(
            256,
            vec![
                ("fast", vec![Scripted::Sample(fast, 1, 10)]),
                ("slow", vec![Scripted::Sample(slow, 1, 10)]),
            ],
        );
        let after = |id: ResourceId| Duration::from_millis(if id == fast { 100 } else { 1050 });
        let mut read = |sampler: &mut Sampler, t: u64| {
            tick_and_plan(sampler, &mut r, t, &after, Duration::from_secs(1))
        };
        assert_eq!(read(&mut sampler, 0), vec![0, 1]);
        // `slow` is due at 1.05 s, within its slack from 525 ms, but the fast ticks come
        // before it is due until the one at 1 s, which reads it (the next, at 1.1 s, would
        // be late).
        for t in 1..=9 {
            assert_eq!(read(&mut sampler, t * 100 * MS), vec![0], "{t}");
        }
        assert!(sampler.due_soon(1000 * MS, u64::MAX));
        assert_eq!(read(&mut sampler, 1000 * MS), vec![0, 1]);
        assert_eq!(read(&mut sampler, 1100 * MS), vec![0]);
        // Alone, `slow` is read at a tick within its slack: nothing else would come first.
        let (mut alone, _r) = scripted(16, vec![("slow", vec![Scripted::Sample(slow, 1, 10)])]);
        alone.tick(0);
        alone.plan(&after, Duration::from_secs(1));
        assert!(!alone.due_soon(520 * MS, u64::MAX));
        assert!(alone.due_soon(530 * MS, u64::MAX));
        // Not when the caller wakes again before it is due anyway.
        assert!(!alone.due_soon(530 * MS, 1000 * MS));
        assert!(alone.due_soon(530 * MS, 1060 * MS));
        let mut seen = 0;
        alone.tick_into(530 * MS, &mut |_| seen += 1);
        assert_eq!(seen, 1);
        // Planned sooner than the slow delay (a bucket closing), it is read when due: a
        // read before then would only be planned again for then.
        alone.plan(&|_| Duration::from_millis(300), Duration::from_secs(1));
        assert!(!alone.due_soon(820 * MS, u64::MAX));
        assert!(alone.due_soon(830 * MS, u64::MAX));
    }

    /// Regression: a source made due by a kernel wake-up kept its planned delay, so the
    /// wake-up's tick also read every slow source due within that delay's slack: work on
    /// the path from the kernel's wake-up to the signal.
    #[test]
    fn a_source_made_due_is_read_alone() {
        use std::time::Duration;
        const MS: u64 = 1_000_000;
        let (cgroup, disk) = (ResourceId(0), ResourceId(1));
        let (mut sampler, mut r) = scripted(
            256,
            vec![
                ("cgroup", vec![Scripted::Sample(cgroup, 1, 10)]),
                ("disk", vec![Scripted::Sample(disk, 1, 10)]),
            ],
        );
        let after = |id: ResourceId| Duration::from_millis(if id == cgroup { 1000 } else { 1200 });
        let mut read = |sampler: &mut Sampler, t: u64| {
            tick_and_plan(sampler, &mut r, t, &after, Duration::from_secs(1))
        };
        assert_eq!(read(&mut sampler, 0), vec![0, 1]);
        // At 700 ms `disk` (due at 1.2 s) is within its slack and before the cgroup's next
        // planned read: a tick then for the cgroup would have taken it too.
        sampler.make_due(&[cgroup]);
        assert_eq!(read(&mut sampler, 700 * MS), vec![0]);
        assert_eq!(sampler.next_due_ns(), Some(1200 * MS));
        sampler.all_due();
        assert_eq!(read(&mut sampler, 800 * MS), vec![0, 1]);
    }

    #[test]
    fn a_gone_source_is_stopped_for_good_and_reported_once_while_others_go_on() {
        let mut table = ResourceTable::default();
        let a = table.register(ResourceKind::HostMemory, "a".into(), "test".into());
        let b = table.register(ResourceKind::HostMemory, "b".into(), "test".into());
        let (mut sampler, mut r) = scripted(
            64,
            vec![
                ("good", vec![Scripted::Sample(a, 1, 10)]),
                (
                    "bad",
                    vec![
                        Scripted::Sample(b, 1, 10),
                        Scripted::Fail("unplugged".into()),
                        Scripted::Sample(b, 2, 10),
                    ],
                ),
            ],
        );
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
        let (mut sampler, _r) = scripted(2, vec![("a", vec![Scripted::Sample(a, 5, 10)])]);
        let reports: Vec<_> = (0..4).map(|t| sampler.tick(t)).collect();
        assert_eq!(reports.iter().map(|r| r.dropped).sum::<u32>(), 2);
        assert!(reports[3].wake_reader);
        assert_eq!(sampler.dropped(), 2);
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn retry_delays_double_from_one_second_up_to_a_minute() {
        for (failures, delay_s) in [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (6, 32),
            (7, 60),
            (8, 60),
            (100, 60),
            (u32::MAX, 60),
        ] {
            assert_eq!(retry_delay_ns(failures), delay_s * S, "{failures}");
        }
    }

    /// Regression: one transient read error (EINTR, a cgroup migration, a filesystem briefly
    /// unreachable) stopped watching the resource for the rest of the run.
    #[test]
    fn a_transient_read_error_no_longer_stops_the_source_for_the_rest_of_the_run() {
        let mut table = ResourceTable::default();
        let a = table.register(ResourceKind::HostMemory, "a".into(), "test".into());
        let b = table.register(ResourceKind::HostMemory, "b".into(), "test".into());
        let (mut sampler, mut r) = scripted(
            64,
            vec![
                ("good", vec![Scripted::Sample(a, 1, 10)]),
                (
                    "flaky",
                    vec![
                        Scripted::Error("interrupted".into()),
                        Scripted::Error("again".into()),
                        Scripted::Sample(b, 7, 10),
                    ],
                ),
            ],
        );
        let failed = sampler.tick(0);
        assert_eq!((failed.pushed, failed.newly_failed), (1, 1));
        let mut failures = Vec::new();
        sampler.take_new_failures(|name, e| failures.push(format!("{name}: {e}")));
        assert_eq!(failures, vec!["flaky: cannot read flaky: interrupted"]);
        sampler.take_recoveries(|_| panic!("nothing recovered yet"));

        // Not retried before 1 s; retried at 1 s, fails again: next try 2 s later.
        let t = sampler.tick(S / 2);
        assert_eq!((t.pushed, t.newly_failed, t.recovered), (1, 0, 0));
        let t = sampler.tick(S);
        assert_eq!((t.pushed, t.newly_failed, t.recovered), (1, 0, 0));
        let t = sampler.tick(3 * S - 1);
        assert_eq!((t.pushed, t.recovered), (1, 0));
        let e = sampler
            .sources()
            .nth(1)
            .and_then(|(_, e)| e.map(|e| e.to_string()));
        assert_eq!(e.as_deref(), Some("cannot read flaky: again"));
        sampler.take_new_failures(|_, _| panic!("one failure is reported once"));

        // Reads again at 3 s, and on every tick after that.
        let t = sampler.tick(3 * S);
        assert_eq!((t.pushed, t.newly_failed, t.recovered), (2, 0, 1));
        let mut recovered = Vec::new();
        sampler.take_recoveries(|name| recovered.push(name.to_string()));
        assert_eq!(recovered, vec!["flaky"]);
        sampler.take_recoveries(|_| panic!("one recovery is reported once"));
        let t = sampler.tick(3 * S + 1);
        assert_eq!((t.pushed, t.recovered), (2, 0));
        assert!(sampler.sources().all(|(_, e)| e.is_none()));
        let mut flaky = Vec::new();
        r.drain(|s| {
            if s.resource == b {
                flaky.push((s.t_ns, s.used));
            }
        });
        assert_eq!(flaky, vec![(3 * S, 7), (3 * S + 1, 7)]);
    }

    #[test]
    fn a_source_failing_again_after_recovering_is_reported_again_with_a_fresh_backoff() {
        let mut table = ResourceTable::default();
        let b = table.register(ResourceKind::HostMemory, "b".into(), "test".into());
        let (mut sampler, _r) = scripted(
            64,
            vec![(
                "flaky",
                vec![
                    Scripted::Error("one".into()),
                    Scripted::Sample(b, 1, 10),
                    Scripted::Error("two".into()),
                    Scripted::Sample(b, 2, 10),
                ],
            )],
        );
        let mut events = Vec::new();
        let collect = |sampler: &mut Sampler, events: &mut Vec<String>| {
            sampler.take_new_failures(|n, e| events.push(format!("failed {n}: {e}")));
            sampler.take_recoveries(|n| events.push(format!("back {n}")));
        };
        for t in [0, S, 2 * S, 3 * S] {
            sampler.tick(t);
            collect(&mut sampler, &mut events);
        }
        assert_eq!(
            events,
            vec![
                "failed flaky: cannot read flaky: one",
                "back flaky",
                "failed flaky: cannot read flaky: two",
                "back flaky",
            ]
        );

        // Failing and recovering between two collections reports nothing.
        let mut quiet = Sampler::new(
            ProcessTree::new(Path::new("/proc"), std::process::id()).unwrap(),
            SampleRing::new(8).0,
        );
        quiet.add_source(Box::new(ScriptedSource::new(
            "blip",
            vec![Scripted::Error("blip".into()), Scripted::Idle],
        )));
        assert_eq!(quiet.tick(0).newly_failed, 1);
        assert_eq!(quiet.tick(S).recovered, 1);
        quiet.take_new_failures(|_, _| panic!("recovered before it was collected"));
        quiet.take_recoveries(|_| panic!("its failure was never reported"));
    }
}
