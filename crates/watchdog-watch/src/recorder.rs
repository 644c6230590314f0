//! The flight recorder: the last minutes of every resource at full rate, kept in
//! memory and written as a recording (docs/recording.md) on every alert, at exit and on
//! SIGUSR2. Rows are kept only when a figure changes (and once a second regardless), so
//! flat resources cost nothing; the window is bounded in time and in rows, so memory is
//! bounded whatever the run does. The text is written by `watchdog_formats::recording::write`,
//! next to the reader of the format.
//!
//! The recorders live on their own thread ([`Recorders`]), one thread for every target of
//! the process. The sampling loop never waits for them: each sampler pushes its samples into
//! its lock-free ring as it reads them, and this thread drains every ring when asked: when
//! a ring is three quarters full ([`RecorderLink::ask_drain`], at most one request
//! outstanding per ring) and before it carries out any command (a write, an edit, taking the
//! recorder back). It sleeps otherwise, so a watch at 10 Hz wakes it about once a minute,
//! not four times a second. When it falls so far behind that a ring fills, the sampler
//! drops samples and counts them (the summary and the metrics say how many).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use watchdog_sampler::ring::SampleReader;

pub use watchdog_formats::recording::Meta;
use watchdog_formats::recording::write;
use watchdog_types::{Resource, Sample};

/// Most rows kept in memory (24 bytes each: 3 MiB).
pub const MAX_ROWS: usize = 131_072;
/// A row is written at least this often per resource, even when nothing changed.
const HEARTBEAT_NS: u64 = 1_000_000_000;
/// Most events kept.
const MAX_EVENTS: usize = 1_000;

/// One kept row; `t_ms` counts from the recorder's `base_ms`, so it fits 32 bits.
#[derive(Clone, Copy, Debug)]
struct Row {
    t_ms: u32,
    resource: u16,
    used: u64,
    limit: u64,
}

/// The in-memory window.
pub struct FlightRecorder {
    window_ms: u32,
    /// Milliseconds since the start that row times count from; moved forward (and the
    /// rows with it) before 32 bits run out, after about 24 days.
    base_ms: u64,
    rows: VecDeque<Row>,
    last: Vec<Option<(u64, u64, u64)>>,
    events: VecDeque<(f64, serde_json::Value)>,
    resources: Vec<Resource>,
    meta: Meta,
}

/// A copy of the window, to be written away from the poll loop.
#[derive(Clone)]
pub struct Snapshot {
    base_ms: u64,
    rows: Vec<Row>,
    events: Vec<(f64, serde_json::Value)>,
    resources: Vec<Resource>,
    meta: Meta,
}

impl FlightRecorder {
    /// A recorder keeping `window_s` seconds of `resources`.
    pub fn new(resources: Vec<Resource>, meta: Meta, window_s: f64) -> FlightRecorder {
        let window_ms = (window_s * 1e3).clamp(1_000.0, u32::MAX as f64 / 2.0) as u32;
        FlightRecorder {
            window_ms,
            base_ms: 0,
            // Reserved up front so the poll loop never reallocates; pages are only
            // touched as rows arrive.
            rows: VecDeque::with_capacity(MAX_ROWS),
            last: vec![None; resources.len()],
            events: VecDeque::new(),
            resources,
            meta,
        }
    }

    /// Keeps `s` if its figures changed or its heartbeat is due.
    pub fn observe(&mut self, s: &Sample) {
        let idx = s.resource.0 as usize;
        let Some(last) = self.last.get_mut(idx) else {
            return;
        };
        if let Some((used, limit, t)) = *last
            && used == s.used
            && limit == s.limit
            && s.t_ns.saturating_sub(t) < HEARTBEAT_NS
        {
            return;
        }
        *last = Some((s.used, s.limit, s.t_ns));
        let abs_ms = s.t_ns / 1_000_000;
        if abs_ms.saturating_sub(self.base_ms) > u64::from(u32::MAX / 2) {
            self.rebase(abs_ms);
        }
        let t_ms = abs_ms.saturating_sub(self.base_ms) as u32;
        while self.rows.len() >= MAX_ROWS
            || self
                .rows
                .front()
                .is_some_and(|r| t_ms.saturating_sub(r.t_ms) > self.window_ms)
        {
            self.rows.pop_front();
        }
        self.rows.push_back(Row {
            t_ms,
            resource: s.resource.0,
            used: s.used,
            limit: s.limit,
        });
    }

    /// Moves `base_ms` to the start of the window ending at `now_ms`, dropping older rows.
    fn rebase(&mut self, now_ms: u64) {
        let new_base = now_ms.saturating_sub(u64::from(self.window_ms));
        let shift = new_base.saturating_sub(self.base_ms);
        self.rows.retain(|r| u64::from(r.t_ms) >= shift);
        for r in &mut self.rows {
            r.t_ms -= shift as u32;
        }
        self.base_ms = new_base;
    }

    /// Keeps an event (`t_s`: seconds since the start).
    pub fn event(&mut self, t_s: f64, event: serde_json::Value) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((t_s, event));
    }

    /// The highest usage of resource `idx` in the last `within_ms` before `now_ms`.
    pub fn recent_peak(&self, idx: usize, now_ms: u64, within_ms: u32) -> Option<u64> {
        let now_ms = now_ms.saturating_sub(self.base_ms).min(u64::from(u32::MAX)) as u32;
        self.rows
            .iter()
            .rev()
            .take_while(|r| now_ms.saturating_sub(r.t_ms) <= within_ms)
            .filter(|r| r.resource as usize == idx)
            .map(|r| r.used)
            .max()
    }

    /// The run's environment, as the recording's `meta` line will hold it.
    pub fn environment(&self) -> Option<&watchdog_types::environment::Environment> {
        self.meta.environment.as_ref()
    }

    /// The run's environment, to add what is learnt after the start (limits, the Python side).
    pub fn environment_mut(&mut self) -> Option<&mut watchdog_types::environment::Environment> {
        self.meta.environment.as_mut()
    }

    /// The recording's first lines, to add what is known after the start (the run id of
    /// a `run --restart` attempt).
    pub fn meta_mut(&mut self) -> &mut Meta {
        &mut self.meta
    }

    /// A copy of the window for writing.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            base_ms: self.base_ms,
            rows: self.rows.iter().copied().collect(),
            events: self.events.iter().cloned().collect(),
            resources: self.resources.clone(),
            meta: self.meta.clone(),
        }
    }
}

impl Snapshot {
    /// The recording's text.
    pub fn render(&self) -> String {
        let rows = self.rows.iter().map(|r| write::Row {
            t_ms: self.base_ms + u64::from(r.t_ms),
            resource: usize::from(r.resource),
            used: r.used,
            limit: r.limit,
        });
        write::render(&self.meta, &self.resources, &self.events, rows)
    }
}

/// Writes `snapshot` to `path` atomically, unless [`unwritable`] says why not. The error
/// is the reason alone (the caller names the file).
pub fn write(path: &Path, snapshot: &Snapshot) -> Result<(), String> {
    match unwritable(path) {
        Some(why) => Err(why),
        None => write_checked(path, snapshot),
    }
}

/// Writes `snapshot` to `path` atomically, [`unwritable`] having been asked already.
pub fn write_checked(path: &Path, snapshot: &Snapshot) -> Result<(), String> {
    watchdog_types::fs::write_atomic(path, snapshot.render().as_bytes()).map_err(|e| e.to_string())
}

/// Why a recording would not be written at `path` now: its filesystem is nearly full, or
/// something other than a recording took the path since the start.
pub fn unwritable(path: &Path) -> Option<String> {
    if let Err(why) = crate::outputs::check_recording(path) {
        return Some(why);
    }
    let vfs = rustix::fs::statvfs(watchdog_types::fs::parent_dir(path)).ok()?;
    let total = vfs.f_blocks.saturating_mul(vfs.f_frsize);
    let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
    (free < kept_free(total)).then(|| {
        format!(
            "its filesystem is nearly full ({} free); skipped so the recorder never fills the disk it watches",
            watchdog_types::units::format_bytes(free)
        )
    })
}

/// The space a recording leaves free on a filesystem of `total` bytes: 5% of it up to
/// 256 MiB, and 64 MiB or a quarter of it if that is more. A recording is a few MiB and
/// tells why a run died, a full disk included: 5% of a 250 GB disk (12.5 GB) skipped it on
/// a disk with 10 GB free, and 1 GiB in a notebook on a disk with 1.2 GB free.
fn kept_free(total: u64) -> u64 {
    (total / 20).min(256 << 20).max((64 << 20).min(total / 4))
}

/// A change to one target's recorder, made on the recorder thread.
type Edit = Box<dyn FnOnce(&mut FlightRecorder) + Send>;

enum Command {
    Add(u64, Box<FlightRecorder>, SampleReader, Arc<AtomicBool>),
    Drain,
    Edit(u64, Edit),
    Write(u64, PathBuf),
    Take(u64, mpsc::Sender<FlightRecorder>),
}

/// The recorder thread: owns every target's [`FlightRecorder`] and the reading end of its
/// sample ring.
pub struct Recorders {
    tx: mpsc::Sender<Command>,
    next: AtomicU64,
}

/// One target's way to its recorder on the recorder thread.
pub struct RecorderLink {
    key: u64,
    tx: mpsc::Sender<Command>,
    /// Set by [`ask_drain`](Self::ask_drain), cleared by the thread once it drained.
    drain_asked: Arc<AtomicBool>,
}

impl Recorders {
    /// Starts the recorder thread.
    pub fn start() -> Result<Recorders, String> {
        let (tx, rx) = mpsc::channel();
        // Detached: it ends when the last sender (this and every link) is gone.
        std::thread::Builder::new()
            .name("watchdog-recorder".into())
            .spawn(move || serve(rx))
            .map_err(|e| format!("cannot start the recorder thread: {e}"))?;
        Ok(Recorders {
            tx,
            next: AtomicU64::new(0),
        })
    }

    /// Hands a target's recorder and the reading end of its sample ring to the thread.
    pub fn add(&self, recorder: FlightRecorder, reader: SampleReader) -> RecorderLink {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let drain_asked = Arc::new(AtomicBool::new(false));
        let _ = self.tx.send(Command::Add(
            key,
            Box::new(recorder),
            reader,
            Arc::clone(&drain_asked),
        ));
        RecorderLink {
            key,
            tx: self.tx.clone(),
            drain_asked,
        }
    }
}

impl RecorderLink {
    /// Asks the thread to drain the rings (the sampler found this one nearly full); does
    /// nothing while an earlier request is still outstanding. Never blocks.
    pub fn ask_drain(&self) {
        if !self.drain_asked.swap(true, Ordering::AcqRel) {
            let _ = self.tx.send(Command::Drain);
        }
    }

    /// Changes the recorder on its thread (an event, the environment learnt later).
    pub fn edit(&self, f: impl FnOnce(&mut FlightRecorder) + Send + 'static) {
        let _ = self.tx.send(Command::Edit(self.key, Box::new(f)));
    }

    /// Writes the recording to `path` on the recorder thread, with every sample up to now.
    pub fn write(&self, path: PathBuf) {
        let _ = self.tx.send(Command::Write(self.key, path));
    }

    /// Takes the recorder back, every sample pushed so far drained into it; `None` when the
    /// recorder thread is gone.
    pub fn take(self) -> Option<FlightRecorder> {
        let (tx, rx) = mpsc::channel();
        self.tx.send(Command::Take(self.key, tx)).ok()?;
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }
}

/// One target's recorder, the reading end of its ring and its drain request.
type Entry = (u64, Box<FlightRecorder>, SampleReader, Arc<AtomicBool>);

/// The recorder thread's loop: sleep until a command comes, drain every ring, then carry
/// the command out.
fn serve(rx: mpsc::Receiver<Command>) {
    let mut all: Vec<Entry> = Vec::new();
    while let Ok(command) = rx.recv() {
        for (_, recorder, reader, asked) in &mut all {
            asked.store(false, Ordering::Release);
            reader.drain(|s| recorder.observe(&s));
        }
        let find = |all: &mut Vec<Entry>, key: u64| all.iter().position(|e| e.0 == key);
        match command {
            Command::Drain => {}
            Command::Add(key, mut recorder, mut reader, asked) => {
                reader.drain(|s| recorder.observe(&s));
                all.push((key, recorder, reader, asked));
            }
            Command::Edit(key, f) => {
                if let Some(i) = find(&mut all, key) {
                    f(&mut all[i].1);
                }
            }
            Command::Write(key, path) => {
                if let Some(i) = find(&mut all, key) {
                    match write(&path, &all[i].1.snapshot()) {
                        Ok(()) => {
                            crate::outputs::write_ok("recording");
                            tracing::debug!("recording written to {}", path.display())
                        }
                        Err(e) => crate::outputs::write_failed("recording", &path, &e),
                    }
                }
            }
            Command::Take(key, reply) => {
                if let Some(i) = find(&mut all, key) {
                    let (_, recorder, _, _) = all.swap_remove(i);
                    let _ = reply.send(*recorder);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use watchdog_types::{ResourceId, ResourceKind};

    #[test]
    fn the_space_kept_free_is_5_percent_capped_at_256_mib_and_at_least_64_mib_or_a_quarter() {
        const MIB: u64 = 1 << 20;
        const GIB: u64 = 1 << 30;
        // The CI disks that skipped recordings: 252 GiB with 9.84 GiB free (every one, at
        // 5%), and 1.2 GB left of the 97.6 GB an unprivileged user sees (the notebook's).
        assert_eq!(kept_free(252 * GIB), 256 * MIB);
        assert!(kept_free(97_572_749_312) < 1_200_000_000 / 2);
        assert_eq!(kept_free(10 * GIB), 256 * MIB);
        assert_eq!(kept_free(4 * GIB), 4 * GIB / 20);
        assert_eq!(kept_free(GIB), 64 * MIB);
        assert_eq!(kept_free(4 * MIB), MIB);
    }

    fn recorder(window_s: f64) -> FlightRecorder {
        let resources = vec![Resource {
            id: ResourceId(0),
            kind: ResourceKind::CgroupMemory,
            name: "cgroup_memory".into(),
            source: "x".into(),
        }];
        let meta = Meta {
            pid: Some(1),
            command: Some("python3".into()),
            ..Meta::default()
        };
        FlightRecorder::new(resources, meta, window_s)
    }

    fn sample(t_ms: u64, used: u64) -> Sample {
        Sample {
            resource: ResourceId(0),
            t_ns: t_ms * 1_000_000,
            used,
            limit: 100,
        }
    }

    #[test]
    fn the_recorder_thread_takes_samples_from_the_ring_and_gives_the_recorder_back() {
        let (mut writer, reader) = watchdog_sampler::ring::SampleRing::new(64);
        let threads = Recorders::start().unwrap();
        let link = threads.add(recorder(600.0), reader);
        for t in 0..10 {
            assert!(writer.push(sample(t * 100, t)));
        }
        link.edit(|r| r.event(0.5, serde_json::json!({"event": "test"})));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.recording.csv");
        link.write(path.clone());
        let back = link.take().unwrap();
        // Every pushed sample reached the recorder, though the writer never waited for it.
        assert_eq!(back.recent_peak(0, 900, 10_000), Some(9));
        assert_eq!(back.events.len(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"event\":\"test\""), "{text}");
    }

    #[test]
    fn a_nearly_full_ring_is_drained_when_asked_and_only_then() {
        let (mut writer, reader) = watchdog_sampler::ring::SampleRing::new(64);
        let threads = Recorders::start().unwrap();
        let drained = |writer: &watchdog_sampler::ring::SampleWriter| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while writer.free_slots() < 64 {
                assert!(std::time::Instant::now() < deadline, "never drained");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // Adding the recorder drains its ring once: wait for that.
        assert!(writer.push(sample(0, 0)));
        let link = threads.add(recorder(600.0), reader);
        drained(&writer);
        let mut t = 1;
        for round in 0..5 {
            while !writer.nearly_full() {
                assert!(writer.push(sample(t * 100, t)), "round {round}: dropped");
                t += 1;
            }
            // Unasked, the thread sleeps: the samples stay in the ring.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(writer.free_slots(), 16, "round {round}");
            link.ask_drain();
            drained(&writer);
        }
        let back = link.take().unwrap();
        assert_eq!(writer.dropped(), 0);
        assert_eq!(back.recent_peak(0, t * 100, 1_000_000), Some(t - 1));
    }

    #[test]
    fn keeps_changes_and_heartbeats_only() {
        let mut r = recorder(600.0);
        for t in 0..50 {
            r.observe(&sample(t * 100, 10));
        }
        // 5 s of a flat series at 10 Hz: the first row plus one heartbeat a second.
        assert_eq!(r.rows.len(), 5);
        r.observe(&sample(5_000, 11));
        assert_eq!(r.rows.len(), 6);
    }

    #[test]
    fn window_is_bounded_in_time() {
        let mut r = recorder(2.0);
        for t in 0..100 {
            r.observe(&sample(t * 100, t));
        }
        let first = r.rows.front().unwrap().t_ms;
        assert!(first >= 9_900 - 2_000, "{first}");
        assert_eq!(r.recent_peak(0, 9_900, 500), Some(99));
    }

    #[test]
    fn times_past_49_days_do_not_wrap() {
        let mut r = recorder(60.0);
        let day_ms = 86_400_000u64;
        for t in [0, 30 * day_ms, 60 * day_ms, 60 * day_ms + 500] {
            r.observe(&sample(t, t));
        }
        let text = r.snapshot().render();
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            format!(
                "{}.500,cgroup_memory,{},100",
                60 * 86_400,
                60 * day_ms + 500
            )
        );
        assert_eq!(
            r.recent_peak(0, 60 * day_ms + 500, 1_000),
            Some(60 * day_ms + 500)
        );
    }

    #[test]
    fn recording_parses_as_a_trace() {
        let mut r = recorder(600.0);
        for t in 0..30 {
            r.observe(&sample(t * 100, t * 2));
        }
        r.event(
            1.5,
            serde_json::json!({"event": "alert", "resource": "cgroup_memory"}),
        );
        let text = r.snapshot().render();
        assert!(text.starts_with("# watchdog recording v1\n"));
        let trace = watchdog_formats::trace::parse(&text).unwrap();
        assert_eq!(trace.samples.len(), 30);
    }
}
