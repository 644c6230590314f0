//! The run's step reports: `<request file>.steps`, what PyTorch's caching allocator knew
//! at each step, written by the Python client (format in `docs/recording.md`, "What the
//! run writes back"), and where its device is in NVML. Each of several ranks (which share
//! the request file) writes `<request file>.steps.<pid>` instead.
//!
//! [`StepsIntake`] looks at each file once per tick with one `stat` (the ranks' files:
//! one per PID of the tree, at most [`MAX_RANK_FILES`]; until reports came, only when the
//! directory shows a file may have been created: [`StepsIntake::check_ranks_due`]) and
//! parses it only when it changed; it is read without following a symlink, only as a regular file of at most
//! [`MAX_STEPS_FILE_BYTES`], taken only when the writing PID is the target or in its tree
//! (a rank's file: the PID its name carries), renamed aside and removed once taken (not
//! in a dry run), and its entries deduplicated by writer and `n`. A bad file is warned
//! about once. [`parse_steps`] is pure and tested with fixtures; [`GpuView`] maps the report's device (UUID, else the one the writer holds memory on,
//! else the index) to an NVML device and reads who holds what on it.

use std::time::{Duration, Instant};

use serde::Deserialize;
use watchdog_alerter::request::{FileStamp, RequestPlace};
use watchdog_engine::GpuUse;
use watchdog_engine::step_peaks::StepReport;
use watchdog_engine::verdict::CudaOom;
use watchdog_types::{Phase, ResourceId};

/// Largest step-report file read: 256 entries are about 60 KiB.
pub const MAX_STEPS_FILE_BYTES: u64 = 128 * 1024;
/// Most entries one file may hold (older ones are folded by the client).
pub const MAX_ENTRIES: usize = 256;
/// Longest exception message kept, in characters.
pub const MAX_MESSAGE_CHARS: usize = 1000;
/// Writers remembered for deduplication (the ranks of one run on one machine).
const MAX_WRITERS: usize = 64;
/// Longest device UUID kept, in bytes.
const MAX_UUID_BYTES: usize = 96;

/// The path of the step reports: `<request file>.steps`.
pub fn steps_file(request: &RequestPlace) -> RequestPlace {
    request.sibling(".steps")
}

/// Where a step-report file is renamed to be read and removed (see `Watched::look`).
const TAKING_SUFFIX: &str = ".taking";

/// The step reports at `place`, when there and `accept` takes its writer's PID: read
/// without following a symlink, only a regular file of at most [`MAX_STEPS_FILE_BYTES`].
fn read_steps_at(
    place: &RequestPlace,
    accept: &mut impl FnMut(u32) -> Result<(), String>,
) -> Result<Option<StepsFile>, String> {
    let file = match place.read_capped(MAX_STEPS_FILE_BYTES) {
        Ok(None) => return Ok(None),
        Ok(Some(bytes)) => parse_steps(&bytes)?,
        Err(e) => return Err(e.to_string()),
    };
    accept(file.pid)?;
    Ok(Some(file))
}

/// The CUDA device the client names: `torch.cuda.current_device()` and its UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DeviceRef {
    /// CUDA's index (relative to `CUDA_VISIBLE_DEVICES`).
    pub index: Option<u32>,
    /// `GPU-...`, when torch gives one.
    pub uuid: Option<String>,
}

/// One file, parsed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct StepsFile {
    /// The writer's PID.
    pub pid: u32,
    /// Its device.
    pub device: DeviceRef,
    /// The entries, as written (oldest first).
    pub steps: Vec<StepEntry>,
    /// The CUDA out-of-memory error raised inside a step, once the client saw one.
    pub exception: Option<CudaOom>,
    /// When the exception was seen, seconds since the epoch (to take it once).
    pub exception_unix: Option<f64>,
}

/// One entry: the report, and the client's count of reports of its phase so far.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEntry {
    /// The report as the predictor takes it.
    pub report: StepReport,
    /// `phase_n`: the reports of this phase so far, this one included (a folded entry:
    /// its last one's); absent from older clients.
    pub phase_n: Option<u64>,
}

#[derive(Deserialize)]
struct RawFile {
    pid: u32,
    #[serde(default)]
    device: Option<DeviceRef>,
    #[serde(default)]
    steps: Option<Vec<RawEntry>>,
    #[serde(default)]
    exception: Option<RawException>,
}

#[derive(Deserialize)]
struct RawEntry {
    n: u64,
    step: u64,
    phase: Phase,
    #[serde(default)]
    pass: Option<u64>,
    time_unix: f64,
    #[serde(default)]
    duration_s: Option<f64>,
    allocated: u64,
    reserved: u64,
    peak: u64,
    #[serde(default)]
    retries: Option<u64>,
    #[serde(default)]
    ooms: Option<u64>,
    #[serde(default)]
    folded: Option<u32>,
    #[serde(default)]
    phase_n: Option<u64>,
}

#[derive(Deserialize)]
struct RawException {
    kind: String,
    #[serde(default)]
    step: Option<u64>,
    #[serde(default)]
    phase: Option<Phase>,
    #[serde(default)]
    time_unix: Option<f64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    allocated: Option<u64>,
    #[serde(default)]
    reserved: Option<u64>,
    #[serde(default)]
    peak: Option<u64>,
}

/// The client's step reports from their JSON (see `docs/recording.md`); an error names
/// what is wrong. Unknown fields are ignored; an exception of another kind than
/// `cuda_oom` is dropped. Pure.
pub fn parse_steps(bytes: &[u8]) -> Result<StepsFile, String> {
    let raw: RawFile =
        serde_json::from_slice(bytes).map_err(|e| format!("not the client's step reports: {e}"))?;
    let entries = raw.steps.unwrap_or_default();
    if entries.len() > MAX_ENTRIES {
        return Err(format!(
            "{} entries: expected at most {MAX_ENTRIES}",
            entries.len()
        ));
    }
    let mut steps = Vec::with_capacity(entries.len());
    for e in entries {
        if e.n == 0 || !e.time_unix.is_finite() {
            return Err(format!(
                "entry n={} time_unix={}: expected n from 1 and a finite time",
                e.n, e.time_unix
            ));
        }
        let report = StepReport {
            n: e.n,
            step: e.step,
            phase: e.phase,
            pass: e.pass.unwrap_or(1).max(1),
            t_s: e.time_unix,
            duration_s: e.duration_s.filter(|d| d.is_finite() && *d >= 0.0),
            allocated: e.allocated,
            reserved: e.reserved,
            peak: e.peak,
            retries: e.retries.unwrap_or(0),
            ooms: e.ooms.unwrap_or(0),
            folded: e.folded.unwrap_or(1).max(1),
        };
        steps.push(StepEntry {
            report,
            phase_n: e.phase_n,
        });
    }
    let mut device = raw.device.unwrap_or_default();
    if let Some(u) = &mut device.uuid {
        u.truncate(u.floor_char_boundary(MAX_UUID_BYTES));
    }
    let (exception, exception_unix) = match raw.exception {
        Some(x) if x.kind == "cuda_oom" => {
            let message = x
                .message
                .map(|m| m.chars().take(MAX_MESSAGE_CHARS).collect());
            let oom = CudaOom {
                step: x.step,
                phase: x.phase,
                message,
                allocated: x.allocated,
                reserved: x.reserved,
                peak: x.peak,
                ..CudaOom::default()
            };
            (Some(oom), x.time_unix.filter(|t| t.is_finite()))
        }
        _ => (None, None),
    };
    Ok(StepsFile {
        pid: raw.pid,
        device,
        steps,
        exception,
        exception_unix,
    })
}

/// What one look at the file brought: the entries not seen before, and the exception
/// the first time it is seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// The writer's PID.
    pub pid: u32,
    /// Its device.
    pub device: DeviceRef,
    /// The new entries, oldest first.
    pub new: Vec<StepReport>,
    /// The CUDA out-of-memory error, the first time it is in the file.
    pub exception: Option<CudaOom>,
}

/// Most PIDs of the tree whose `.steps.<pid>` is looked for at each look (one `stat` each).
pub const MAX_RANK_FILES: usize = 256;

/// How often the ranks' files are looked for while none has been taken.
pub const RANK_LOOK_EVERY: Duration = Duration::from_secs(1);
/// A file looked for at most every `every` until something is taken from it, then at every
/// look.
#[derive(Debug, Clone, Copy)]
struct UntilTaken {
    every: Duration,
    next: Option<Instant>,
    taken: bool,
}

impl UntilTaken {
    fn every(every: Duration) -> UntilTaken {
        UntilTaken {
            every,
            next: None,
            taken: false,
        }
    }

    /// Whether to look at `now`; a look that is due sets the next one.
    fn due(&mut self, now: Instant) -> bool {
        if !self.taken && self.next.is_some_and(|at| now < at) {
            return false;
        }
        self.next = Some(now + self.every);
        true
    }

    /// The look found something (from then on every look is due) or not.
    fn saw(&mut self, taken: bool) {
        self.taken |= taken;
    }
}

/// Until reports came in them, a look at the shared file or the ranks' files is skipped
/// when their directory shows no file created since the last full look: each full look at
/// most this long apart.
pub const FULL_LOOK_EVERY: Duration = Duration::from_secs(10);

/// How far the directory's last change must be behind the clock at a full look for a same
/// `mtime` later to prove nothing was created since: file systems keep whole seconds
/// (ext3) or two (FAT), and the kernel stamps with a coarse clock.
const DIR_MTIME_SETTLED_NS: i128 = 3_000_000_000;

/// What a full look saw of the directory.
#[derive(Debug, Clone, Copy)]
struct DirLook {
    /// The directory's stamp then.
    stamp: FileStamp,
    /// The clock then, nanoseconds since the Unix epoch.
    unix_ns: i128,
    /// When it was.
    at: Instant,
}

impl DirLook {
    /// Whether no file can have been created in the directory since this look, given its
    /// stamp `now_stamp` at `now`: the same stamp, a change settled before the look (see
    /// [`DIR_MTIME_SETTLED_NS`]), and the look recent enough.
    fn nothing_created(&self, now_stamp: Option<FileStamp>, now: Instant) -> bool {
        now_stamp == Some(self.stamp)
            && self.unix_ns - self.stamp.mtime_ns() >= DIR_MTIME_SETTLED_NS
            && now.duration_since(self.at) < FULL_LOOK_EVERY
    }
}

/// Skips a slow look for a file of the client (the shared step reports, the ranks', the
/// acknowledgment) while its directory shows no file created since the last full look:
/// the client writes each by an atomic rename, which changes the directory's `mtime`.
#[derive(Debug, Default)]
pub(crate) struct DirGate(Option<DirLook>);

impl DirGate {
    /// Whether the look at `now` is skipped, the directory stamped `dir` then: nothing can
    /// have been created since the last full look, and `nothing_else` (what else would
    /// make a look worth it) holds. Otherwise it is a full look, remembered from now.
    pub(crate) fn skips(
        &mut self,
        dir: Option<FileStamp>,
        now: Instant,
        nothing_else: impl FnOnce() -> bool,
    ) -> bool {
        if self.0.is_some_and(|d| d.nothing_created(dir, now)) && nothing_else() {
            return true;
        }
        self.0 = dir.map(|stamp| DirLook {
            stamp,
            unix_ns: unix_ns_now(),
            at: now,
        });
        false
    }
}

/// The clock, nanoseconds since the Unix epoch (0 before it).
fn unix_ns_now() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// How often the shared step reports file is looked for until reports come in it.
pub const SHARED_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The path of one rank's step reports: `<request file>.steps.<pid>`.
pub fn rank_steps_file(request: &RequestPlace, pid: u32) -> RequestPlace {
    request.sibling(&format!(".steps.{pid}"))
}

/// One file the intake looks at, and the version of it last read.
#[derive(Debug)]
struct Watched {
    place: RequestPlace,
    stamp: Option<FileStamp>,
}

impl Watched {
    fn new(place: RequestPlace) -> Watched {
        Watched { place, stamp: None }
    }

    /// The file, parsed, when it changed since the last look and `accept` takes its
    /// writer's PID. When `remove`, it is then renamed to `<file>.taking` and that is read
    /// and removed: the client takes a missing file for read, so the version taken must be
    /// the one that went, where a read then an unlink could remove a newer version written
    /// in between. `Ok(None)` when missing or unchanged; `Err` says why it is not used.
    fn look(
        &mut self,
        remove: bool,
        mut accept: impl FnMut(u32) -> Result<(), String>,
    ) -> Result<Option<StepsFile>, String> {
        let Some(stamp) = self.place.stamp() else {
            return Ok(None);
        };
        if self.stamp == Some(stamp) {
            return Ok(None);
        }
        self.stamp = Some(stamp);
        let Some(file) = read_steps_at(&self.place, &mut accept)? else {
            return Ok(None);
        };
        if !remove {
            return Ok(Some(file));
        }
        let taking = match self.place.rename_to_sibling(TAKING_SUFFIX) {
            Ok(Some(taking)) => taking,
            // Gone already, or it cannot be removed: what was read is taken (the client
            // rewrites an unremoved file with these entries, taken once by `n`).
            Ok(None) => return Ok(Some(file)),
            Err(e) => {
                tracing::debug!("cannot remove {}: {e}", self.place.path().display());
                return Ok(Some(file));
            }
        };
        let last = read_steps_at(&taking, &mut accept);
        if let Err(e) = taking.remove() {
            tracing::debug!("cannot remove {}: {e}", taking.path().display());
        }
        // The version renamed is the newer one; if it cannot be used (replaced by something
        // else in between), what was read before stands.
        Ok(Some(last.ok().flatten().unwrap_or(file)))
    }

    /// Removes what is left of it unless it changed since the last look (a writer still
    /// there): whether nothing is left to look at.
    fn remove_leftover(&self) -> bool {
        match self.place.stamp() {
            None => true,
            Some(now) if Some(now) == self.stamp => {
                if let Err(e) = self.place.remove() {
                    tracing::debug!("cannot remove {}: {e}", self.place.path().display());
                }
                true
            }
            Some(_) => false,
        }
    }
}

/// A rank's file: `<request file>.steps.<pid>`, and the look at which its PID was last
/// in the tree.
#[derive(Debug)]
struct RankFile {
    pid: u32,
    file: Watched,
    in_tree_at: u64,
}

/// Watches `<request file>.steps`, and `<request file>.steps.<pid>` of each PID of the
/// tree (the ranks of a run share the request file, so each writes its own); see the
/// module documentation.
#[derive(Debug)]
pub struct StepsIntake {
    request: RequestPlace,
    shared: Watched,
    /// The ranks' files, by PID.
    ranks: Vec<RankFile>,
    /// Looks at the ranks' files so far.
    looks: u64,
    /// When the ranks' files are looked for: every [`RANK_LOOK_EVERY`] until one is taken.
    rank_looks: UntilTaken,
    /// Skips their looks while no rank has reported.
    rank_dir: DirGate,
    /// Skips the looks at the shared file while it brought no reports.
    shared_dir: DirGate,
    /// The directory's stamp at the instant of the last look (one `stat` a tick).
    dir_now: Option<(Instant, Option<FileStamp>)>,
    /// When the shared file is looked at: every [`SHARED_LOOK_EVERY`] until reports come.
    shared_looks: UntilTaken,
    /// Each writer and what was taken from it.
    writers: Vec<Writer>,
    /// The exception taken: its writer and time (or step).
    exception: Option<(u32, u64)>,
    warned: bool,
    remove: bool,
}

impl StepsIntake {
    /// Watches the step reports of the request at `request`; in a dry run the files are
    /// left where they are.
    pub fn new(request: &RequestPlace, dry_run: bool) -> StepsIntake {
        StepsIntake {
            request: request.clone(),
            shared: Watched::new(steps_file(request)),
            ranks: Vec::new(),
            looks: 0,
            rank_looks: UntilTaken::every(RANK_LOOK_EVERY),
            rank_dir: DirGate::default(),
            shared_dir: DirGate::default(),
            dir_now: None,
            shared_looks: UntilTaken::every(SHARED_LOOK_EVERY),
            writers: Vec::new(),
            exception: None,
            warned: false,
            remove: !dry_run,
        }
    }

    /// Where the shared file is.
    pub fn place(&self) -> &RequestPlace {
        &self.shared.place
    }

    /// One look at `<request file>.steps`: `None` when the file is missing, unchanged,
    /// bad (warned once) or not the run's (`in_tree` says which PIDs are).
    pub fn check(&mut self, mut in_tree: impl FnMut(u32) -> bool) -> Option<Taken> {
        let looked = self.shared.look(self.remove, move |pid| {
            if in_tree(pid) {
                Ok(())
            } else {
                Err(format!(
                    "written by PID {pid}, which is not the watched process nor in its tree"
                ))
            }
        });
        let looked = looked.map_err(|why| (why, self.shared.place.path()));
        self.taken(looked)
    }

    /// [`check`](Self::check) every time once reports were taken from the shared file, else
    /// at most every [`SHARED_LOOK_EVERY`], and then only when a file may have appeared
    /// (as for the ranks' files: [`check_ranks_due`](Self::check_ranks_due)): a run that
    /// reports no steps costs a `stat` of the directory a tick at most, not one per tick
    /// for each file.
    pub fn check_due(&mut self, now: Instant, in_tree: impl FnMut(u32) -> bool) -> Option<Taken> {
        if !self.shared_looks.due(now) {
            return None;
        }
        if !self.shared_looks.taken {
            let dir = self.dir_stamp_at(now);
            if self.shared_dir.skips(dir, now, || true) {
                return None;
            }
        }
        let taken = self.check(in_tree);
        self.shared_looks.saw(taken.is_some());
        taken
    }

    /// The stamp of the request file's directory at `now`: one `stat` for every look made
    /// at the same instant.
    pub(crate) fn dir_stamp_at(&mut self, now: Instant) -> Option<FileStamp> {
        match self.dir_now {
            Some((at, stamp)) if at == now => stamp,
            _ => {
                let stamp = self.request.dir_stamp();
                self.dir_now = Some((now, stamp));
                stamp
            }
        }
    }

    /// [`check_ranks`](Self::check_ranks) every time once a rank's file was taken, else
    /// at most every [`RANK_LOOK_EVERY`], and then only when a file may have appeared: a
    /// run without ranks (most runs, and every run of a busy service) costs one `stat` of
    /// the directory a second, not one per process.
    ///
    /// A look is skipped when every PID of `tree` was looked for at the last full look and
    /// the directory has the stamp it had then, its last change settled before that look:
    /// creating or renaming a file into it would have changed its `mtime`. A full look
    /// comes at least every [`FULL_LOOK_EVERY`] whatever the directory shows (a file
    /// system whose clock or time stamps cannot be trusted costs at most that long).
    pub fn check_ranks_due(&mut self, tree: &[u32], now: Instant) -> Vec<Taken> {
        if !self.rank_looks.due(now) {
            return Vec::new();
        }
        if !self.rank_looks.taken {
            let dir = self.dir_stamp_at(now);
            let ranks = &self.ranks;
            let all_looked_for = || {
                tree.iter()
                    .take(MAX_RANK_FILES)
                    .all(|p| ranks.binary_search_by_key(p, |r| r.pid).is_ok())
            };
            if self.rank_dir.skips(dir, now, all_looked_for) {
                return Vec::new();
            }
        }
        let taken = self.check_ranks(tree);
        self.rank_looks.saw(!taken.is_empty());
        taken
    }

    /// One look at `<request file>.steps.<pid>` of each PID in `tree` (the first
    /// [`MAX_RANK_FILES`]), and a last one at those of PIDs that left it since the last
    /// look, whose files are then removed (not in a dry run): at the end of the run, with
    /// the tree then, it reads the last ones and removes what the ranks left. A file is
    /// taken only when the PID in it is the one its name carries.
    pub fn check_ranks(&mut self, tree: &[u32]) -> Vec<Taken> {
        self.looks += 1;
        let look = self.looks;
        for &pid in tree.iter().take(MAX_RANK_FILES) {
            match self.ranks.binary_search_by_key(&pid, |r| r.pid) {
                Ok(i) => self.ranks[i].in_tree_at = look,
                Err(i) if self.ranks.len() < MAX_RANK_FILES => self.ranks.insert(
                    i,
                    RankFile {
                        pid,
                        file: Watched::new(rank_steps_file(&self.request, pid)),
                        in_tree_at: look,
                    },
                ),
                Err(_) => {}
            }
        }
        self.look_at_ranks(look)
    }

    /// Each rank's file; those whose PID was not in the tree at `look` are looked at one
    /// last time, their leftovers removed and forgotten.
    fn look_at_ranks(&mut self, look: u64) -> Vec<Taken> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.ranks.len() {
            let r = &mut self.ranks[i];
            let pid = r.pid;
            let looked = r.file.look(self.remove, |writer| {
                if writer == pid {
                    Ok(())
                } else {
                    Err(format!(
                        "written by PID {writer}, not by the PID its name carries"
                    ))
                }
            });
            let looked = looked.map_err(|why| (why, r.file.place.path()));
            let left = r.in_tree_at != look;
            if let Some(t) = self.taken(looked) {
                out.push(t);
            }
            if left && (!self.remove || self.ranks[i].file.remove_leftover()) {
                self.ranks.remove(i);
            } else {
                i += 1;
            }
        }
        out
    }

    /// What a look brought: its new entries, or why the file at the path is not used,
    /// warned once.
    fn taken(
        &mut self,
        looked: Result<Option<StepsFile>, (String, std::path::PathBuf)>,
    ) -> Option<Taken> {
        match looked {
            Ok(file) => file.map(|f| self.take(f)),
            Err((why, path)) => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!("the step reports {} are not used: {why}", path.display());
                }
                None
            }
        }
    }

    /// The entries of `file` not taken before, and its exception the first time.
    fn take(&mut self, file: StepsFile) -> Taken {
        let at = match self.writers.iter().position(|w| w.pid == file.pid) {
            Some(at) => at,
            None => {
                if self.writers.len() == MAX_WRITERS {
                    self.writers.remove(0);
                }
                self.writers.push(Writer {
                    pid: file.pid,
                    n: 0,
                    phase_n: [0; 3],
                });
                self.writers.len() - 1
            }
        };
        let writer = &mut self.writers[at];
        // A client counts up: each of its files ends at or after the last entry taken from
        // it. A file whose entries all come before that is a new client in the same PID (the
        // process exec'd itself), counting from 1 again.
        if file
            .steps
            .iter()
            .map(|e| e.report.n)
            .max()
            .is_some_and(|top| top < writer.n)
        {
            writer.n = 0;
            writer.phase_n = [0; 3];
        }
        let mut entries: Vec<StepEntry> = file
            .steps
            .into_iter()
            .filter(|e| e.report.n > writer.n)
            .collect();
        // In the order they were counted (folded entries carry their last `n`).
        entries.sort_by_key(|e| e.report.n);
        let new: Vec<StepReport> = entries.into_iter().map(|e| writer.fresh(e)).collect();
        if let Some(top) = new.last() {
            writer.n = top.n;
        }
        let exception = file.exception.and_then(|x| {
            let key = (
                file.pid,
                file.exception_unix
                    .map(f64::to_bits)
                    .or(x.step)
                    .unwrap_or(0),
            );
            (self.exception != Some(key)).then(|| {
                self.exception = Some(key);
                x
            })
        });
        Taken {
            pid: file.pid,
            device: file.device,
            new,
            exception,
        }
    }
}

/// One writer and what was taken from it: the highest `n`, and the highest `phase_n` of
/// each phase.
#[derive(Debug)]
struct Writer {
    pid: u32,
    n: u64,
    phase_n: [u64; 3],
}

impl Writer {
    /// `entry`'s report, standing for the steps not taken before: a file rewritten after
    /// it was read can fold entries already taken together with new ones into one entry
    /// of a later `n`, and its `phase_n` says how many of them are new.
    fn fresh(&mut self, entry: StepEntry) -> StepReport {
        let mut report = entry.report;
        if let Some(phase_n) = entry.phase_n {
            let last = &mut self.phase_n[report.phase as usize];
            if phase_n > *last {
                let new = u32::try_from(phase_n - *last).unwrap_or(u32::MAX);
                report.folded = report.folded.min(new);
                *last = phase_n;
            }
        }
        report
    }
}

/// NVML as the step reports need it: which device is the report's, and who holds what
/// on it. Empty without NVML (or a build without the `gpu` feature).
#[derive(Clone, Default)]
pub struct GpuView {
    #[cfg(feature = "gpu")]
    handle: Option<watchdog_sampler::gpu::GpuHandle>,
}

impl std::fmt::Debug for GpuView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuView").finish_non_exhaustive()
    }
}

/// `GPU-5A1B...` and `5a1b...` are one UUID (torch gives it without the prefix).
fn same_uuid(a: &str, b: &str) -> bool {
    let bare = |s: &str| {
        let s = s.trim();
        s.strip_prefix("GPU-")
            .or_else(|| s.strip_prefix("gpu-"))
            .unwrap_or(s)
            .to_ascii_lowercase()
    };
    !a.trim().is_empty() && bare(a) == bare(b)
}

/// One NVML device as [`locate`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlDevice {
    /// NVML's index.
    pub index: u32,
    /// Its GPU resource.
    pub resource: ResourceId,
    /// Its UUID.
    pub uuid: String,
    /// Whether the writer holds memory on it.
    pub writer_on_it: bool,
}

/// The NVML device of a report's `device`: the UUID when given and known, else the one
/// device the writer holds memory on, else the same index. Pure.
pub fn locate(device: &DeviceRef, devices: &[NvmlDevice]) -> Option<ResourceId> {
    if let Some(uuid) = &device.uuid
        && let Some(d) = devices.iter().find(|d| same_uuid(uuid, &d.uuid))
    {
        return Some(d.resource);
    }
    let mut holding = devices.iter().filter(|d| d.writer_on_it);
    if let (Some(d), None) = (holding.next(), holding.next()) {
        return Some(d.resource);
    }
    let index = device.index?;
    devices
        .iter()
        .find(|d| d.index == index)
        .map(|d| d.resource)
}

impl GpuView {
    /// A view through the GPU source's handle.
    #[cfg(feature = "gpu")]
    pub fn new(handle: watchdog_sampler::gpu::GpuHandle) -> GpuView {
        GpuView {
            handle: Some(handle),
        }
    }

    /// The GPU resource of `device` and what NVML shows there besides `writer`'s
    /// allocator; `(None, _)` when NVML lists no such device.
    pub fn locate(&self, device: &DeviceRef, writer: u32) -> (Option<ResourceId>, GpuUse) {
        #[cfg(feature = "gpu")]
        if let Some(h) = &self.handle {
            let is_writer = |p: &watchdog_sampler::gpu::GpuProcess| {
                p.tree_pid == Some(writer) || p.pid == writer
            };
            let devices: Vec<NvmlDevice> = h
                .devices()
                .into_iter()
                .filter(|d| !d.lost)
                .map(|d| NvmlDevice {
                    index: d.index,
                    resource: d.resource,
                    writer_on_it: h.processes(d.resource).iter().any(is_writer),
                    uuid: d.uuid,
                })
                .collect();
            let Some(resource) = locate(device, &devices) else {
                return (None, GpuUse::default());
            };
            if h.device_level_fallback() {
                // NVML's PIDs cannot be told apart from ours: nobody's share is known.
                return (Some(resource), GpuUse::default());
            }
            let mut gpu = GpuUse::default();
            for p in h.processes(resource) {
                if is_writer(&p) {
                    gpu.own = Some(gpu.own.unwrap_or(0) + p.used_bytes);
                } else {
                    gpu.others += p.used_bytes;
                }
            }
            return (Some(resource), gpu);
        }
        let _ = (device, writer);
        (None, GpuUse::default())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::Path;

    const GOOD: &str = r#"{"pid": 1234, "device": {"index": 0, "uuid": "GPU-5a1b"},
 "steps": [
  {"n": 17, "step": 120, "phase": "train", "pass": 1, "time_unix": 1795465901.25,
   "duration_s": 0.051, "allocated": 2147483648, "reserved": 3221225472,
   "peak": 2952790016, "retries": 0, "ooms": 0, "batch_size": 32, "tokens": 4096, "folded": 1},
  {"n": 18, "step": 3, "phase": "eval", "pass": 2, "time_unix": 1795465901.30,
   "allocated": 2147483648, "reserved": 3221225472, "peak": 3000000000}
 ],
 "exception": {"kind": "cuda_oom", "step": 121, "phase": "train", "time_unix": 1795465901.31,
   "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
   "allocated": 2952790016, "reserved": 3221225472, "peak": 3170893824}}"#;

    /// The documented example parses into the predictor's reports and the verdict's
    /// exception.
    #[test]
    fn the_documented_file_parses() {
        let f = parse_steps(GOOD.as_bytes()).unwrap();
        assert_eq!(f.pid, 1234);
        assert_eq!(f.device.uuid.as_deref(), Some("GPU-5a1b"));
        assert_eq!(f.steps.len(), 2);
        let a = &f.steps[0].report;
        assert_eq!((a.n, a.step, a.phase, a.pass), (17, 120, Phase::Train, 1));
        assert_eq!(a.duration_s, Some(0.051));
        assert_eq!(a.peak, 2_952_790_016);
        let b = &f.steps[1].report;
        // Optional figures may be null.
        let nulls = br#"{"pid": 1, "device": null, "steps": [{"n": 1, "step": 1, "phase": "other", "pass": null, "time_unix": 1, "duration_s": null, "allocated": 1, "reserved": 1, "peak": 1, "retries": null, "ooms": null, "batch_size": null, "tokens": null, "folded": null}], "exception": null}"#;
        let n = parse_steps(nulls).unwrap();
        assert_eq!(
            (
                n.steps[0].report.pass,
                n.steps[0].report.folded,
                n.steps[0].report.retries
            ),
            (1, 1, 0)
        );
        assert_eq!(
            (b.phase, b.pass, b.duration_s, b.folded),
            (Phase::Eval, 2, None, 1)
        );
        let x = f.exception.unwrap();
        assert_eq!((x.step, x.phase), (Some(121), Some(Phase::Train)));
        assert_eq!(x.peak, Some(3_170_893_824));
        assert!(x.message.unwrap().starts_with("CUDA out of memory"));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let cases: &[(&str, &str)] = &[
            ("not json", "not the client's step reports"),
            (r#"{"steps": []}"#, "missing field `pid`"),
            (
                r#"{"pid": 1, "steps": [{"n": 1, "step": 1, "phase": "warmup", "time_unix": 1, "allocated": 1, "reserved": 1, "peak": 1}]}"#,
                "unknown variant `warmup`",
            ),
            (
                r#"{"pid": 1, "steps": [{"n": 0, "step": 1, "phase": "train", "time_unix": 1, "allocated": 1, "reserved": 1, "peak": 1}]}"#,
                "expected n from 1",
            ),
            (
                r#"{"pid": 1, "steps": [{"n": 1, "step": 1, "phase": "train", "time_unix": 1, "allocated": -1, "reserved": 1, "peak": 1}]}"#,
                "not the client's step reports",
            ),
        ];
        for (text, want) in cases {
            let e = parse_steps(text.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        let entry = r#"{"n": 1, "step": 1, "phase": "train", "time_unix": 1, "allocated": 1, "reserved": 1, "peak": 1}"#;
        let many = format!(r#"{{"pid": 1, "steps": [{}]}}"#, vec![entry; 257].join(","));
        assert!(
            parse_steps(many.as_bytes())
                .unwrap_err()
                .contains("at most 256")
        );
    }

    #[test]
    fn long_messages_are_cut_and_other_exceptions_dropped() {
        let long = "x".repeat(5000);
        let f = parse_steps(
            format!(r#"{{"pid": 1, "exception": {{"kind": "cuda_oom", "message": "{long}"}}}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(f.exception.unwrap().message.unwrap().chars().count(), 1000);
        let f = parse_steps(br#"{"pid": 1, "exception": {"kind": "value_error"}}"#).unwrap();
        assert_eq!(f.exception, None);
    }

    fn at(p: &Path) -> RequestPlace {
        RequestPlace::Path(p.to_path_buf())
    }

    fn entries(pid: u32, ns: std::ops::RangeInclusive<u64>) -> String {
        let e: Vec<String> = ns
            .map(|n| format!(r#"{{"n": {n}, "step": {n}, "phase": "train", "time_unix": {n}, "allocated": 1, "reserved": 2, "peak": 3}}"#))
            .collect();
        format!(r#"{{"pid": {pid}, "steps": [{}]}}"#, e.join(","))
    }

    /// The race the CI met with two ranks: the client saw its file still there, the
    /// watchdog took it, and the client's rewrite folded the entries taken with new ones
    /// into one entry of a later `n`. Its `phase_n` makes it count only the new steps.
    #[test]
    fn a_folded_entry_holding_steps_already_taken_counts_only_the_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let steps = dir.path().join("req.json.steps");
        let mut intake = StepsIntake::new(&at(&req), false);
        let entry = |n: u64, phase: &str, phase_n: u64, folded: u64| {
            format!(
                r#"{{"n": {n}, "step": {n}, "phase": "{phase}", "phase_n": {phase_n}, "time_unix": {n}, "allocated": 1, "reserved": 2, "peak": 3, "folded": {folded}}}"#
            )
        };
        let file = |es: &[String]| format!(r#"{{"pid": 7, "steps": [{}]}}"#, es.join(","));
        // 90 training steps then 3 of evaluation, taken.
        let mut first: Vec<String> = (1..=90).map(|n| entry(n, "train", n, 1)).collect();
        first.extend((91..=93).map(|n| entry(n, "eval", n - 90, 1)));
        std::fs::write(&steps, file(&first)).unwrap();
        let t = intake.check(|p| p == 7).unwrap();
        assert_eq!(t.new.iter().map(|r| u64::from(r.folded)).sum::<u64>(), 93);
        // The rewrite: training steps 1-150 folded into n=153 (60 of them new), evaluation
        // 1-3 folded into n=93 (all taken), then two new entries.
        std::fs::write(
            &steps,
            file(&[
                entry(93, "eval", 3, 3),
                entry(153, "train", 150, 150),
                entry(154, "eval", 4, 1),
                entry(155, "train", 151, 1),
            ]),
        )
        .unwrap();
        let t = intake.check(|p| p == 7).unwrap();
        let got: Vec<(u64, u32)> = t.new.iter().map(|r| (r.n, r.folded)).collect();
        assert_eq!(got, vec![(153, 60), (154, 1), (155, 1)]);
        // An older client without `phase_n`: its entries are taken as they say.
        std::fs::write(&steps, entries(7, 156..=157)).unwrap();
        let t = intake.check(|p| p == 7).unwrap();
        assert_eq!(
            t.new.iter().map(|r| r.folded).collect::<Vec<_>>(),
            vec![1, 1]
        );
    }

    /// Taken from the tree only, removed once read, each `n` once.
    #[test]
    fn the_intake_takes_each_entry_once_from_the_tree_and_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let steps = dir.path().join("req.json.steps");
        let mut intake = StepsIntake::new(&at(&req), false);
        let tree = |pid| pid == 7;
        assert_eq!(intake.check(tree), None);
        std::fs::write(&steps, entries(7, 1..=3)).unwrap();
        let t = intake.check(tree).unwrap();
        assert_eq!(t.new.iter().map(|r| r.n).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(!steps.exists(), "removed once read");
        // The client rewrote old entries with new ones: the old are not taken again.
        std::fs::write(&steps, entries(7, 2..=5)).unwrap();
        let t = intake.check(tree).unwrap();
        assert_eq!(t.new.iter().map(|r| r.n).collect::<Vec<_>>(), vec![4, 5]);
        // Two ranks share the file: each one's entries are taken once.
        std::fs::write(&steps, entries(9, 1..=2)).unwrap();
        assert_eq!(intake.check(|p| p == 7 || p == 9).unwrap().new.len(), 2);
        std::fs::write(&steps, entries(7, 4..=6)).unwrap();
        let t = intake.check(tree).unwrap();
        assert_eq!(t.new.iter().map(|r| r.n).collect::<Vec<_>>(), vec![6]);
        // Another process's file is left alone.
        std::fs::write(&steps, entries(8, 1..=2)).unwrap();
        assert_eq!(intake.check(tree), None);
        assert!(steps.exists());
        // A dry run reads and leaves it.
        let mut dry = StepsIntake::new(&at(&req), true);
        std::fs::write(&steps, entries(7, 1..=1)).unwrap();
        assert!(dry.check(tree).is_some());
        assert!(steps.exists());
        assert_eq!(dry.check(tree), None, "unchanged: not parsed again");
    }

    /// A process that execs itself keeps its PID and starts a new client, counting from 1
    /// again: its entries were all taken for old ones until the count passed the old one.
    #[test]
    fn a_writer_whose_count_starts_again_is_read_from_its_new_start() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let steps = dir.path().join("req.json.steps");
        let mut intake = StepsIntake::new(&at(&req), false);
        let tree = |pid| pid == 7;
        std::fs::write(&steps, entries(7, 1..=200)).unwrap();
        assert_eq!(intake.check(tree).unwrap().new.len(), 200);
        std::fs::write(&steps, entries(7, 1..=5)).unwrap();
        let t = intake.check(tree).unwrap();
        assert_eq!(
            t.new.iter().map(|r| r.n).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        std::fs::write(&steps, entries(7, 6..=7)).unwrap();
        let t = intake.check(tree).unwrap();
        assert_eq!(t.new.iter().map(|r| r.n).collect::<Vec<_>>(), vec![6, 7]);
        // A file rewritten with the entries already taken (and an exception) is not a new start.
        std::fs::write(&steps, entries(7, 6..=7)).unwrap();
        assert!(intake.check(tree).unwrap().new.is_empty());
    }

    /// Two ranks of one run share the request file: each writes `.steps.<pid>`, and each
    /// one's entries are taken, where one shared file kept only the last writer's.
    #[test]
    fn two_ranks_files_are_each_taken() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let (a, b) = (
            dir.path().join("req.json.steps.7"),
            dir.path().join("req.json.steps.9"),
        );
        let mut intake = StepsIntake::new(&at(&req), false);
        let tree = [1, 7, 9];
        assert!(intake.check_ranks(&tree).is_empty());
        std::fs::write(&a, entries(7, 1..=3)).unwrap();
        std::fs::write(&b, entries(9, 1..=2)).unwrap();
        let mut t = intake.check_ranks(&tree);
        t.sort_by_key(|t| t.pid);
        let got: Vec<(u32, Vec<u64>)> = t
            .iter()
            .map(|t| (t.pid, t.new.iter().map(|r| r.n).collect()))
            .collect();
        assert_eq!(got, vec![(7, vec![1, 2, 3]), (9, vec![1, 2])]);
        assert!(!a.exists() && !b.exists(), "removed once read");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "nothing left aside: {left:?}");
        // Each rank rewrites its unread entries with new ones: each `n` is taken once per writer.
        std::fs::write(&a, entries(7, 3..=4)).unwrap();
        std::fs::write(&b, entries(9, 1..=3)).unwrap();
        let t = intake.check_ranks(&tree);
        let n: usize = t.iter().map(|t| t.new.len()).sum();
        assert_eq!(n, 2, "{t:?}");
        // The shared file is still read beside them (a single process of the same run).
        std::fs::write(dir.path().join("req.json.steps"), entries(1, 1..=1)).unwrap();
        assert_eq!(intake.check(|p| tree.contains(&p)).unwrap().new.len(), 1);
    }

    /// Until reports came in the shared file it is looked for every 100 ms, not every
    /// tick; then every time.
    #[test]
    fn the_shared_file_is_looked_for_every_100_ms_until_reports_come() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let shared = dir.path().join("req.json.steps");
        let mut intake = StepsIntake::new(&at(&req), false);
        let t0 = Instant::now();
        assert!(intake.check_due(t0, |_| true).is_none());
        std::fs::write(&shared, entries(1, 1..=2)).unwrap();
        let soon = t0 + SHARED_LOOK_EVERY / 2;
        assert!(intake.check_due(soon, |_| true).is_none(), "not due yet");
        let due = t0 + SHARED_LOOK_EVERY;
        assert_eq!(intake.check_due(due, |_| true).unwrap().new.len(), 2);
        std::fs::write(&shared, entries(1, 3..=3)).unwrap();
        let next = due + Duration::from_millis(1);
        assert_eq!(
            intake.check_due(next, |_| true).unwrap().new.len(),
            1,
            "every look now"
        );
    }

    /// Until a rank's file was taken they are looked for once a second (a run without
    /// ranks, most runs, costs a stat per process a second, not per tick); then every time.
    #[test]
    fn ranks_files_are_looked_for_once_a_second_until_one_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let a = dir.path().join("req.json.steps.7");
        let mut intake = StepsIntake::new(&at(&req), false);
        let tree = [1, 7];
        let t0 = Instant::now();
        assert!(intake.check_ranks_due(&tree, t0).is_empty());
        std::fs::write(&a, entries(7, 1..=2)).unwrap();
        let soon = t0 + RANK_LOOK_EVERY / 2;
        assert!(
            intake.check_ranks_due(&tree, soon).is_empty(),
            "not due yet"
        );
        assert!(a.exists(), "left for the next look");
        let due = t0 + RANK_LOOK_EVERY;
        assert_eq!(intake.check_ranks_due(&tree, due).len(), 1);
        std::fs::write(&a, entries(7, 3..=3)).unwrap();
        let next = due + Duration::from_millis(1);
        assert_eq!(
            intake.check_ranks_due(&tree, next).len(),
            1,
            "every look now"
        );
    }

    /// Sets `dir`'s modification time an hour back, as a directory nothing was created in
    /// lately.
    fn settle(dir: &Path) {
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }

    /// While no rank has reported, a look is skipped when every PID of the tree was looked
    /// for and their directory shows no file created since: a file rewritten in place (the
    /// directory unchanged) is seen at the next full look, one created at once, and a new
    /// PID of the tree at once.
    #[test]
    fn ranks_files_are_looked_for_only_when_their_directory_shows_one_created() {
        for next in ["created", "full", "new_pid"] {
            let dir = tempfile::tempdir().unwrap();
            let req = dir.path().join("req.json");
            let a = dir.path().join("req.json.steps.7");
            // A file under 7's name that 8 wrote: refused, left where it is.
            std::fs::write(&a, entries(8, 1..=2)).unwrap();
            settle(dir.path());
            let mut intake = StepsIntake::new(&at(&req), false);
            let t0 = Instant::now();
            assert!(intake.check_ranks_due(&[1, 7], t0).is_empty());
            // 7 writes it in place: the directory does not change.
            std::fs::write(&a, entries(7, 1..=2)).unwrap();
            let t1 = t0 + RANK_LOOK_EVERY;
            assert!(
                intake.check_ranks_due(&[1, 7], t1).is_empty(),
                "{next}: skipped, nothing created"
            );
            let (tree, t2): (&[u32], _) = match next {
                "created" => {
                    std::fs::write(dir.path().join("other"), "x").unwrap();
                    (&[1, 7], t1 + RANK_LOOK_EVERY)
                }
                "full" => (&[1, 7], t0 + FULL_LOOK_EVERY),
                _ => (&[1, 7, 9], t1 + RANK_LOOK_EVERY),
            };
            let taken = intake.check_ranks_due(tree, t2);
            assert_eq!(taken.len(), 1, "{next}");
            assert_eq!(taken[0].new.len(), 2, "{next}");
        }
    }

    /// Until reports come in it, a look at the shared file is skipped while the directory
    /// shows no file created since the last full look; one comes at least every
    /// [`FULL_LOOK_EVERY`], and at once when a file is created.
    #[test]
    fn the_shared_file_is_looked_for_only_when_its_directory_shows_one_created() {
        for next in ["created", "full"] {
            let dir = tempfile::tempdir().unwrap();
            let req = dir.path().join("req.json");
            let shared = dir.path().join("req.json.steps");
            let tree = |pid| pid == 7;
            // Written by 8, outside the tree: refused.
            std::fs::write(&shared, entries(8, 1..=2)).unwrap();
            settle(dir.path());
            let mut intake = StepsIntake::new(&at(&req), false);
            let t0 = Instant::now();
            assert!(intake.check_due(t0, tree).is_none());
            // 7 writes it in place: the directory does not change.
            std::fs::write(&shared, entries(7, 1..=2)).unwrap();
            let t1 = t0 + SHARED_LOOK_EVERY;
            assert!(intake.check_due(t1, tree).is_none(), "{next}: skipped");
            let t2 = if next == "created" {
                std::fs::write(dir.path().join("other"), "x").unwrap();
                t1 + SHARED_LOOK_EVERY
            } else {
                t0 + FULL_LOOK_EVERY
            };
            let taken = intake.check_due(t2, tree);
            assert_eq!(taken.map(|t| t.new.len()), Some(2), "{next}");
        }
    }

    /// A rank's file is taken only when written by the PID its name carries; a PID that
    /// left the tree has its last file read and its leftovers removed; a dry run removes
    /// nothing.
    #[test]
    fn a_ranks_file_is_its_pids_and_is_read_last_when_the_pid_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let a = dir.path().join("req.json.steps.7");
        let b = dir.path().join("req.json.steps.9");
        let mut intake = StepsIntake::new(&at(&req), false);
        std::fs::write(&b, entries(7, 1..=2)).unwrap();
        assert!(intake.check_ranks(&[7, 9]).is_empty());
        assert!(b.exists(), "another PID's entries under 9's name are left");
        // 7 wrote its last entries and exited before the next look.
        std::fs::write(&a, entries(7, 1..=4)).unwrap();
        let t = intake.check_ranks(&[9]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].new.len(), 4);
        assert!(!a.exists());
        // At the end of the run 9 is gone too: its leftover is removed.
        assert!(intake.check_ranks(&[]).is_empty());
        assert!(!b.exists(), "the leftover of a PID that left is removed");
        // A PID outside the tree is never looked at.
        std::fs::write(&a, entries(7, 5..=6)).unwrap();
        assert!(intake.check_ranks(&[9]).is_empty());
        assert!(a.exists());
        let mut dry = StepsIntake::new(&at(&req), true);
        assert_eq!(dry.check_ranks(&[7]).len(), 1);
        assert!(dry.check_ranks(&[]).is_empty());
        assert!(a.exists(), "a dry run removes nothing");
    }

    /// What looking for the ranks' files costs a tick when there are none (each PID of the
    /// tree one `stat` of a missing file): `cargo test -p watchdog-watch -- --ignored
    /// the_cost_of_looking --nocapture` prints the figures in docs/performance.md.
    #[test]
    #[ignore = "a measurement, not a check"]
    #[allow(clippy::print_stdout)]
    fn the_cost_of_looking_for_the_ranks_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut intake = StepsIntake::new(&at(&dir.path().join("req.json")), false);
        for n in [1u32, 8, 64, 256] {
            let tree: Vec<u32> = (1000..1000 + n).collect();
            intake.check_ranks(&tree);
            let mut per_look: Vec<f64> = (0..200)
                .map(|_| {
                    let t = std::time::Instant::now();
                    for _ in 0..10 {
                        assert!(intake.check_ranks(&tree).is_empty());
                    }
                    t.elapsed().as_secs_f64() * 1e6 / 10.0
                })
                .collect();
            per_look.sort_by(f64::total_cmp);
            println!(
                "{n} PIDs: median {:.1} us a look ({:.2} us a PID), fastest {:.1}, p99 {:.1}",
                per_look[100],
                per_look[100] / f64::from(n),
                per_look[0],
                per_look[198]
            );
        }
    }

    #[test]
    fn a_symlink_a_directory_or_an_oversized_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let tree = |pid| pid == 7;
        let real = dir.path().join("real");
        std::fs::write(&real, entries(7, 1..=1)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, dir.path().join("link.json.steps")).unwrap();
        assert_eq!(StepsIntake::new(&at(&link), false).check(tree), None);
        assert!(real.exists());
        // A rank's file the same.
        std::os::unix::fs::symlink(&real, dir.path().join("link.json.steps.7")).unwrap();
        assert!(
            StepsIntake::new(&at(&link), false)
                .check_ranks(&[7])
                .is_empty()
        );
        assert!(real.exists());
        let d = dir.path().join("d.json");
        std::fs::create_dir(dir.path().join("d.json.steps")).unwrap();
        assert_eq!(StepsIntake::new(&at(&d), false).check(tree), None);
        let big = dir.path().join("big.json");
        let mut text = entries(7, 1..=1).into_bytes();
        text.resize(MAX_STEPS_FILE_BYTES as usize + 1, b' ');
        std::fs::write(dir.path().join("big.json.steps"), text).unwrap();
        assert_eq!(StepsIntake::new(&at(&big), false).check(tree), None);
    }

    #[test]
    fn the_exception_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let req = dir.path().join("req.json");
        let steps = dir.path().join("req.json.steps");
        let mut intake = StepsIntake::new(&at(&req), false);
        let text = r#"{"pid": 7, "exception": {"kind": "cuda_oom", "step": 9, "time_unix": 5.0}}"#;
        std::fs::write(&steps, text).unwrap();
        assert_eq!(
            intake.check(|_| true).unwrap().exception.unwrap().step,
            Some(9)
        );
        std::fs::write(&steps, text).unwrap();
        assert_eq!(intake.check(|_| true).unwrap().exception, None);
    }

    #[test]
    fn the_device_is_found_by_uuid_then_by_the_writer_then_by_index() {
        let dev = |index, uuid: &str, writer_on_it| NvmlDevice {
            index,
            resource: ResourceId(index as u16 + 10),
            uuid: uuid.into(),
            writer_on_it,
        };
        let devices = [
            dev(0, "GPU-aaaa", false),
            dev(1, "GPU-BBBB", true),
            dev(2, "GPU-cccc", false),
        ];
        let by = |index, uuid: Option<&str>| DeviceRef {
            index,
            uuid: uuid.map(str::to_string),
        };
        // torch gives the UUID without the prefix, in lower case.
        assert_eq!(
            locate(&by(Some(0), Some("cccc")), &devices),
            Some(ResourceId(12))
        );
        assert_eq!(
            locate(&by(Some(0), Some("GPU-bbbb")), &devices),
            Some(ResourceId(11))
        );
        // CUDA_VISIBLE_DEVICES=1 makes it CUDA's device 0: the writer's device wins.
        assert_eq!(locate(&by(Some(0), None), &devices), Some(ResourceId(11)));
        let nobody = [dev(0, "GPU-aaaa", false), dev(1, "GPU-BBBB", false)];
        assert_eq!(
            locate(&by(Some(1), Some("GPU-zzzz")), &nobody),
            Some(ResourceId(11))
        );
        assert_eq!(locate(&by(None, None), &nobody), None);
        assert_eq!(locate(&by(Some(5), None), &nobody), None);
    }
}
