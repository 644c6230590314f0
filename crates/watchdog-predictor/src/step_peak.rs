//! Whether the next step, or the next evaluation, fits on its GPU: predicted from the
//! allocator's own figures the run reports once per step (`<request file>.steps`, see
//! `docs/recording.md`), not from the device total, which the caching allocator keeps flat.
//!
//! Pure, like the rest of the crate: reports and the memory the process can have in,
//! a [`StepPeakAlert`] out, no clock and no allocation per report. Training (and other)
//! steps are judged by the envelope of their recent peaks and a per-step growth trend
//! when one is credible, looked ahead the lead in steps; an evaluation by the peak of
//! each whole pass, from one pass to the next; the cache by its retries and by a reserve
//! growing past the peaks (fragmentation). The method, its tests and its accuracy on the
//! step-peak traces are in `docs/prediction.md`, "Step peaks".

use watchdog_types::{AlertReason, Phase};

/// One step as the client reports it (one entry of the `.steps` file).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// The client's running count of entries, from 1: an entry seen twice is taken once.
    pub n: u64,
    /// The framework's step (global step in training, batch index in an evaluation).
    pub step: u64,
    /// Training, evaluation or other.
    pub phase: Phase,
    /// The pass of this phase the step belongs to, from 1 (a new evaluation starts a new pass).
    pub pass: u64,
    /// When the step ended, in seconds on the caller's clock.
    pub t_s: f64,
    /// How long the step took, when the client measured it.
    pub duration_s: Option<f64>,
    /// `allocated_bytes.all.current` at the step's end.
    pub allocated: u64,
    /// `reserved_bytes.all.current` at the step's end.
    pub reserved: u64,
    /// `allocated_bytes.all.peak` over the step (since the last reset).
    pub peak: u64,
    /// `num_alloc_retries` so far (cumulative).
    pub retries: u64,
    /// `num_ooms` so far (cumulative).
    pub ooms: u64,
    /// How many steps this entry stands for: more than 1 when older entries were folded
    /// into one maximum.
    pub folded: u32,
}

/// What the process can have on its device: the device total minus other processes'
/// usage minus what the process holds outside the allocator (CUDA context, NCCL buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// The device's total memory.
    pub total: u64,
    /// Memory other processes hold on the device.
    pub others: u64,
    /// What this process holds outside its allocator: its own usage minus `reserved`.
    pub outside_allocator: u64,
}

impl Capacity {
    /// The most the allocator can hold: total − others − outside.
    pub fn available(&self) -> u64 {
        self.total
            .saturating_sub(self.others)
            .saturating_sub(self.outside_allocator)
    }
}

/// Settings of the step-peak predictor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPeakConfig {
    /// The share of the available memory kept free: a peak above `(1 − margin)` of it does
    /// not fit.
    pub margin_fraction: f64,
    /// The lead time in seconds: the alert comes at least this long before the step that
    /// would fail, and never less than one save (`save_s`).
    pub lead_s: f64,
}

impl Default for StepPeakConfig {
    fn default() -> Self {
        StepPeakConfig {
            margin_fraction: 0.05,
            lead_s: 30.0,
        }
    }
}

/// A step or an evaluation predicted not to fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPeakAlert {
    /// `step_peak`, `eval_peak` or `fragmentation`.
    pub reason: AlertReason,
    /// The phase that will not fit.
    pub phase: Phase,
    /// The last step reported.
    pub step: u64,
    /// The predicted peak of the step (or evaluation) that would fail, in bytes.
    pub predicted_peak: u64,
    /// What the allocator can have, in bytes.
    pub available: u64,
    /// Steps until the one that would fail, counted in steps of `phase`.
    pub steps_ahead: u64,
    /// Seconds until the step that would fail, from the measured step time.
    pub seconds_left: Option<f64>,
}

/// The allocator setting that helps a fragmented cache, for the log and the request of a
/// [`AlertReason::Fragmentation`] alert.
pub const FRAGMENTATION_ADVICE: &str = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";

impl StepPeakAlert {
    /// What the run can change so that it fits: [`FRAGMENTATION_ADVICE`] for a
    /// fragmentation alert, nothing otherwise.
    pub fn advice(&self) -> Option<&'static str> {
        (self.reason == AlertReason::Fragmentation).then_some(FRAGMENTATION_ADVICE)
    }
}

/// Steps folded into one block of the fine ring (64 blocks: the last 256 steps).
const FINE_STEPS: u64 = 4;
/// Steps folded into one block of the coarse ring (64 blocks: the last 4,096 steps).
const COARSE_STEPS: u64 = 64;
/// Blocks per ring.
const BLOCKS: usize = 64;
/// Fine blocks in the short window, and in the envelope of the recent peaks (64 steps).
const SHORT: usize = 16;
/// Blocks a trend needs before it can be believed.
const MIN_POINTS: usize = 16;
/// A trend's rise over its window must be this many times the scatter of the maxima
/// around it: noise from batch shapes that lines up by chance is not growth.
const SCATTER_RISES: f64 = 3.0;
/// A trend is extrapolated at most this many times the steps its window spans.
const REACH: f64 = 8.0;
/// The t-statistic a trend's slope needs.
const MIN_T: f64 = 3.0;
/// Step times kept for the median.
const TIMES: usize = 15;
/// Evaluation passes kept.
const PASSES: usize = 8;
/// Retries must have risen in this many separate reports...
const RETRY_RISES: usize = 3;
/// ...within this many steps to count as growing.
const RETRY_WINDOW: u64 = 256;
/// Reserved memory the peaks do not explain, as a fraction of what is available, that
/// makes a growing reserve fragmentation rather than the peak's own cache.
const FRAGMENTED_FRACTION: f64 = 0.10;
/// An episode ends when every prediction is this fraction of the available memory below
/// what fits.
const REARM_FRACTION: f64 = 0.10;
/// Steps or evaluations looked ahead at most.
const MAX_AHEAD: u64 = 1 << 20;

/// A credible growth: per step, from a level now, believed up to `reach` steps ahead.
#[derive(Debug, Clone, Copy)]
struct Trend {
    slope: f64,
    level: f64,
    reach: f64,
}

impl Trend {
    /// The predicted value `k` steps ahead.
    fn at(&self, k: u64) -> f64 {
        self.level + self.slope * (k as f64).min(self.reach)
    }

    /// The first step ahead whose value is above `fits` (at least 1), if within reach.
    fn first_above(&self, fits: f64) -> Option<u64> {
        let k = ((fits - self.level) / self.slope).floor().max(0.0) + 1.0;
        (k <= self.reach.max(1.0)).then_some(k as u64)
    }
}

/// A run of steps folded into one point: their largest and smallest value.
#[derive(Debug, Clone, Copy, Default)]
struct Block {
    max: u64,
    min: u64,
    /// The step count (over the series) at the block's last step.
    end: u64,
    /// Steps in the block.
    steps: u64,
}

/// The last [`BLOCKS`] blocks of `width` steps each, and the block being filled.
#[derive(Debug, Clone)]
struct Ring {
    width: u64,
    blocks: [Block; BLOCKS],
    /// Where the next closed block goes.
    head: usize,
    len: usize,
    open: Block,
}

impl Ring {
    fn new(width: u64) -> Ring {
        Ring {
            width,
            blocks: [Block::default(); BLOCKS],
            head: 0,
            len: 0,
            open: Block::default(),
        }
    }

    fn push(&mut self, value: u64, steps: u64, end: u64) {
        if self.open.steps == 0 {
            self.open = Block {
                max: value,
                min: value,
                end,
                steps,
            };
        } else {
            self.open.max = self.open.max.max(value);
            self.open.min = self.open.min.min(value);
            self.open.end = end;
            self.open.steps += steps;
        }
        if self.open.steps >= self.width {
            self.blocks[self.head] = self.open;
            self.head = (self.head + 1) % BLOCKS;
            self.len = (self.len + 1).min(BLOCKS);
            self.open = Block::default();
        }
    }

    /// Points held: the closed blocks and the open one when it has steps.
    fn points(&self) -> usize {
        self.len + usize::from(self.open.steps > 0)
    }

    /// The `i`-th newest point (0: the open block when it has steps).
    fn newest(&self, i: usize) -> Block {
        let i = if self.open.steps > 0 {
            if i == 0 {
                return self.open;
            }
            i - 1
        } else {
            i
        };
        self.blocks[(self.head + BLOCKS - 1 - i % BLOCKS) % BLOCKS]
    }

    /// The largest value among the newest `n` points.
    fn max_of(&self, n: usize) -> u64 {
        (0..n.min(self.points()))
            .map(|i| self.newest(i).max)
            .max()
            .unwrap_or(0)
    }

    /// A credible growth over the newest `n` points, its level now on the upper line
    /// through the newest quarter's maxima. `now` is the series' count.
    fn trend(&self, n: usize, now: u64) -> Option<Trend> {
        let n = n.min(self.points());
        if n < MIN_POINTS {
            return None;
        }
        let Fit {
            slope,
            t,
            residuals,
            sse,
        } = fit(self, 0, n, now)?;
        if slope <= 0.0 || t < MIN_T {
            return None;
        }
        // Not levelling off: the newest half grows at half the window's rate or more.
        let recent = fit(self, 0, n / 2, now)?.slope;
        if recent < 0.5 * slope {
            return None;
        }
        let oldest = self.newest(n - 1).end;
        let newest = self.newest(0).end;
        let rise = slope * newest.saturating_sub(oldest) as f64;
        // Larger than the steps' own spread (batch shapes) and than the scatter of the
        // maxima: noise that lines up by chance is not growth. Blocks of many steps keep
        // the top of that spread, steady from block to block, so over them only the
        // scatter counts: a leak slower than the noise shows in their maxima.
        let mut spans = [0u64; BLOCKS + 1];
        for (i, s) in spans.iter_mut().enumerate().take(n) {
            let b = self.newest(i);
            *s = b.max - b.min;
        }
        let spans = &mut spans[..n];
        spans.sort_unstable();
        let spread = if self.width >= COARSE_STEPS {
            0.0
        } else {
            spans[n / 2] as f64
        };
        if rise < spread || rise < SCATTER_RISES * residuals {
            return None;
        }
        // Growth, not one jump (a warm-up, a longer batch that stays): the line fits the
        // maxima better than two levels split anywhere.
        if step_fits_better(self, n, sse) {
            return None;
        }
        // New highs: the newest quarter ends above every peak of the older half.
        let quarter = (n / 4).max(1);
        let new_high = self.max_of(quarter);
        let old_high = (n / 2..n).map(|i| self.newest(i).max).max().unwrap_or(0);
        if (new_high as f64) < old_high as f64 + 0.25 * rise {
            return None;
        }
        let level = (0..quarter)
            .map(|i| {
                let b = self.newest(i);
                b.max as f64 + slope * now.saturating_sub(b.end) as f64
            })
            .fold(0.0, f64::max);
        Some(Trend {
            slope,
            level,
            reach: REACH * newest.saturating_sub(oldest).max(1) as f64,
        })
    }
}

/// A least-squares line.
struct Fit {
    /// Per step.
    slope: f64,
    /// The slope's t-statistic (infinite for an exact line).
    t: f64,
    /// The range of the points around the line (largest residual minus smallest): how
    /// far the maxima scatter, which a rise must exceed to be growth.
    residuals: f64,
    /// The sum of the squared residuals.
    sse: f64,
}

/// Whether two levels (the newest `b` points at one, the older at another, for some
/// split `b`) fit the maxima of the newest `n` points at least as well as a line whose
/// squared residuals sum to `line_sse`: a jump, not growth.
fn step_fits_better(ring: &Ring, n: usize, line_sse: f64) -> bool {
    // Relative to the first point, so the sums stay small.
    let base = ring.newest(0).max as f64;
    let y = |i: usize| ring.newest(i).max as f64 - base;
    let (total, total_sq) = (0..n).fold((0.0, 0.0), |(s, q), i| (s + y(i), q + y(i) * y(i)));
    let (mut s, mut q) = (0.0, 0.0);
    for b in 1..n {
        s += y(b - 1);
        q += y(b - 1) * y(b - 1);
        let (n1, n2) = (b as f64, (n - b) as f64);
        let (s2, q2) = (total - s, total_sq - q);
        let sse = (q - s * s / n1) + (q2 - s2 * s2 / n2);
        if sse <= line_sse {
            return true;
        }
    }
    false
}

/// Least squares of the maxima of points `from..to` (newest first) against their step
/// count.
fn fit(ring: &Ring, from: usize, to: usize, now: u64) -> Option<Fit> {
    let n = to.saturating_sub(from);
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let point = |i: usize| {
        let b = ring.newest(i);
        (-(now.saturating_sub(b.end) as f64), b.max as f64)
    };
    let (mut mx, mut my) = (0.0, 0.0);
    for i in from..to {
        let (x, y) = point(i);
        mx += x / nf;
        my += y / nf;
    }
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for i in from..to {
        let (x, y) = point(i);
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
        syy += (y - my) * (y - my);
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let resid = (syy - slope * sxy).max(0.0) / (nf - 2.0);
    let se = (resid / sxx).sqrt();
    let t = if se > 0.0 { slope / se } else { f64::INFINITY };
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in from..to {
        let (x, y) = point(i);
        let r = y - my - slope * (x - mx);
        low = low.min(r);
        high = high.max(r);
    }
    Some(Fit {
        slope,
        t,
        residuals: high - low,
        sse: resid * (nf - 2.0),
    })
}

/// One figure per step, folded at two resolutions.
#[derive(Debug, Clone)]
struct Series {
    fine: Ring,
    coarse: Ring,
    /// Steps seen (folded entries count for the steps they stand for).
    count: u64,
}

impl Series {
    fn new() -> Series {
        Series {
            fine: Ring::new(FINE_STEPS),
            coarse: Ring::new(COARSE_STEPS),
            count: 0,
        }
    }

    fn push(&mut self, value: u64, steps: u64) {
        self.count = self.count.saturating_add(steps);
        self.fine.push(value, steps, self.count);
        self.coarse.push(value, steps, self.count);
    }

    /// The largest value of the last 64 steps or so.
    fn envelope(&self) -> u64 {
        self.fine.max_of(SHORT)
    }

    /// The most pessimistic credible trend (64, 256 and 4,096 steps).
    fn trend(&self) -> Option<Trend> {
        let windows = [
            self.fine.trend(SHORT, self.count),
            (self.fine.points() > SHORT)
                .then(|| self.fine.trend(BLOCKS + 1, self.count))
                .flatten(),
            self.coarse.trend(BLOCKS + 1, self.count),
        ];
        windows
            .into_iter()
            .flatten()
            .fold(None, |best: Option<Trend>, w| match best {
                Some(b) if b.slope >= w.slope => Some(b),
                _ => Some(w),
            })
    }
}

/// The median of the last [`TIMES`] step times.
#[derive(Debug, Clone)]
struct StepTimes {
    times: [f64; TIMES],
    head: usize,
    len: usize,
}

impl StepTimes {
    fn new() -> StepTimes {
        StepTimes {
            times: [0.0; TIMES],
            head: 0,
            len: 0,
        }
    }

    fn note(&mut self, seconds: f64) {
        if seconds.is_finite() && seconds > 0.0 {
            self.times[self.head] = seconds;
            self.head = (self.head + 1) % TIMES;
            self.len = (self.len + 1).min(TIMES);
        }
    }

    fn median(&self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        let mut sorted = self.times;
        let sorted = &mut sorted[..self.len];
        sorted.sort_unstable_by(f64::total_cmp);
        Some(sorted[self.len / 2])
    }
}

/// A training (or other) phase: its step peaks and step times.
#[derive(Debug, Clone)]
struct StepPhase {
    peaks: Series,
    times: StepTimes,
    /// The last report's time and pass.
    last: Option<(f64, u64)>,
}

impl StepPhase {
    fn new() -> StepPhase {
        StepPhase {
            peaks: Series::new(),
            times: StepTimes::new(),
            last: None,
        }
    }

    fn observe(&mut self, r: &StepReport) {
        let steps = u64::from(r.folded.max(1));
        self.peaks.push(r.peak, steps);
        // A step's time: since the previous report of the same pass, per step stood for.
        let dt = match self.last {
            Some((t, pass)) if pass == r.pass => Some((r.t_s - t) / steps as f64),
            _ => r.duration_s.map(|d| d / steps as f64),
        };
        if let Some(dt) = dt {
            self.times.note(dt);
        }
        self.last = Some((r.t_s, r.pass));
    }

    /// The step that first will not fit within `horizon_s` (and one step more):
    /// (steps ahead, its predicted peak, seconds ahead), or the predicted peak at that
    /// horizon when every step fits.
    fn forecast(&self, horizon_s: f64, fits: f64) -> Outlook {
        let step_s = self.times.median();
        let ahead = steps_ahead(horizon_s, step_s);
        let envelope = self.peaks.envelope() as f64;
        let trend = self.peaks.trend();
        let at = |k: u64| trend.map_or(envelope, |t| envelope.max(t.at(k)));
        let peak = at(ahead);
        if peak <= fits {
            return Outlook::Fits { peak };
        }
        // The first step that does not fit.
        let k = match trend {
            Some(t) if envelope <= fits => t.first_above(fits).unwrap_or(ahead).min(ahead),
            _ => 1,
        };
        Outlook::Fails {
            ahead: k,
            peak: at(k),
            seconds: step_s.map(|s| s * k as f64),
        }
    }
}

/// The steps to look ahead: the horizon in steps of `step_s`, and one more (the next
/// step when the step time is not known yet).
fn steps_ahead(horizon_s: f64, step_s: Option<f64>) -> u64 {
    match step_s {
        Some(s) => ((horizon_s / s).ceil().clamp(0.0, MAX_AHEAD as f64) as u64) + 1,
        None => 1,
    }
}

/// What one prediction says.
#[derive(Debug, Clone, Copy)]
enum Outlook {
    /// Everything looked at fits; the largest peak predicted.
    Fits { peak: f64 },
    /// The step (or evaluation) `ahead` will not fit.
    Fails {
        ahead: u64,
        peak: f64,
        seconds: Option<f64>,
    },
}

impl Outlook {
    /// The peak, for the re-arm rule.
    fn peak(self) -> f64 {
        match self {
            Outlook::Fits { peak } | Outlook::Fails { peak, .. } => peak,
        }
    }
}

/// One evaluation pass: its peak, when its first step ended and when its last did.
#[derive(Debug, Clone, Copy, Default)]
struct Pass {
    peak: u64,
    start_s: f64,
    end_s: f64,
}

/// The evaluation passes: the one under way and the last [`PASSES`] that ended.
#[derive(Debug, Clone)]
struct Passes {
    current: Option<(u64, Pass)>,
    done: [Pass; PASSES],
    head: usize,
    len: usize,
}

impl Passes {
    fn new() -> Passes {
        Passes {
            current: None,
            done: [Pass::default(); PASSES],
            head: 0,
            len: 0,
        }
    }

    /// An evaluation step.
    fn observe(&mut self, r: &StepReport) {
        match &mut self.current {
            Some((pass, p)) if *pass == r.pass => {
                p.peak = p.peak.max(r.peak);
                p.end_s = r.t_s;
            }
            _ => {
                self.end();
                // A pass is timed from its first step's end: `duration_s` of that step
                // runs from the previous pass.
                self.current = Some((
                    r.pass,
                    Pass {
                        peak: r.peak,
                        start_s: r.t_s,
                        end_s: r.t_s,
                    },
                ));
            }
        }
    }

    /// The pass under way, if any, ended (a step of another phase came).
    fn end(&mut self) {
        if let Some((_, p)) = self.current.take() {
            self.done[self.head] = p;
            self.head = (self.head + 1) % PASSES;
            self.len = (self.len + 1).min(PASSES);
        }
    }

    /// The highest peak of the passes kept and the one under way.
    fn highest(&self) -> u64 {
        let current = self.current.map_or(0, |(_, p)| p.peak);
        (0..self.len)
            .map(|i| self.last(i).peak)
            .fold(current, u64::max)
    }

    fn last(&self, back: usize) -> Pass {
        self.done[(self.head + PASSES - 1 - back) % PASSES]
    }

    /// The next evaluations, judged once the last one ended: the first whose peak, grown
    /// as from the pass before to the last, will not fit, among the next one and every
    /// one after it that starts less than the horizon after the pass before it ends (no
    /// later look would come in time for those). `now_s` is the last report's time.
    /// `None` before two passes ended, and while a pass is under way unless `during`.
    fn forecast(&self, now_s: f64, horizon_s: f64, fits: f64, during: bool) -> Option<Outlook> {
        if (self.current.is_some() && !during) || self.len < 2 {
            return None;
        }
        let (last, before) = (self.last(0), self.last(1));
        // Growth from one pass to the next; with three passes or more, the smaller of the
        // last two rises (a pass that did not grow is no growth).
        let mut growth = last.peak.saturating_sub(before.peak) as f64;
        if self.len >= 3 {
            growth = growth.min(before.peak.saturating_sub(self.last(2).peak) as f64);
        }
        let period = last.start_s - before.start_s;
        let (to_next, ahead) = if period > 0.0 && period.is_finite() {
            let to_next = (last.start_s + period - now_s).max(0.0);
            // From a pass's end to the next one's start.
            let gap = (period - (last.end_s - last.start_s)).max(0.0);
            let more = ((horizon_s - gap).max(0.0) / period).ceil();
            // No further ahead than the passes seen.
            (Some(to_next), 1 + more.min(self.len as f64 - 1.0) as u64)
        } else {
            (None, 1)
        };
        let at = |j: u64| last.peak as f64 + growth * j as f64;
        if at(ahead) <= fits {
            return Some(Outlook::Fits { peak: at(ahead) });
        }
        let j = if growth > 0.0 {
            (((fits - last.peak as f64) / growth).floor().max(0.0) as u64 + 1).min(ahead)
        } else {
            1
        };
        Some(Outlook::Fails {
            ahead: j,
            peak: at(j),
            seconds: to_next.map(|t| t + period * (j - 1) as f64),
        })
    }
}

/// The step-peak predictor of one device.
///
/// Per phase: training and other steps are judged by their step peaks (the envelope of
/// the last 64 steps, and a growth trend when one is credible, looked ahead the lead in
/// steps); evaluations by the peak of each pass, from one pass to the next; the cache as
/// a whole by its retries and by reserved memory growing past what the peaks use. No
/// allocation and no clock: fixed rings, the times the reports carry.
#[derive(Debug, Clone)]
pub struct StepPeakPredictor {
    config: StepPeakConfig,
    last_n: u64,
    available: u64,
    alerted: bool,
    /// The last report's step, phase and time.
    last: Option<(u64, Phase, f64)>,
    train: StepPhase,
    other: StepPhase,
    evals: Passes,
    /// `reserved` at every report, over all phases.
    reserved: Series,
    /// The last report's reserved and peak.
    last_reserved: u64,
    /// `retries` at the last report, and the step counts (of `reserved`) where it rose.
    retries: Option<u64>,
    rises: [u64; RETRY_RISES],
    rise_count: usize,
}

impl StepPeakPredictor {
    /// A predictor with no history.
    pub fn new(config: StepPeakConfig) -> StepPeakPredictor {
        StepPeakPredictor {
            config,
            last_n: 0,
            available: 0,
            alerted: false,
            last: None,
            train: StepPhase::new(),
            other: StepPhase::new(),
            evals: Passes::new(),
            reserved: Series::new(),
            last_reserved: 0,
            retries: None,
            rises: [0; RETRY_RISES],
            rise_count: 0,
        }
    }

    /// Takes one report and what the allocator can have now; an entry already seen
    /// (`n` not above the last) is ignored.
    pub fn observe(&mut self, report: &StepReport, capacity: Capacity) {
        if report.n <= self.last_n {
            return;
        }
        self.last_n = report.n;
        self.available = capacity.available();
        match report.phase {
            Phase::Train => {
                self.evals.end();
                self.train.observe(report);
            }
            Phase::Other => {
                self.evals.end();
                self.other.observe(report);
            }
            Phase::Eval => self.evals.observe(report),
        }
        self.reserved
            .push(report.reserved, u64::from(report.folded.max(1)));
        self.last_reserved = report.reserved;
        if let Some(before) = self.retries
            && report.retries > before
        {
            self.rises[self.rise_count % RETRY_RISES] = self.reserved.count;
            self.rise_count += 1;
        }
        self.retries = Some(report.retries);
        self.last = Some((report.step, report.phase, report.t_s));
    }

    /// Whether the allocator's retries rose in [`RETRY_RISES`] separate reports within
    /// the last [`RETRY_WINDOW`] steps.
    pub fn retries_growing(&self) -> bool {
        self.rise_count >= RETRY_RISES
            && self
                .rises
                .iter()
                .all(|&at| self.reserved.count.saturating_sub(at) <= RETRY_WINDOW)
    }

    /// The alert to make now, if any; `save_s` is the learned time a save takes. Once per
    /// episode: an episode ends when every prediction (training and other steps at the
    /// lead, the next evaluations, a growing reserve) is at least 10% of the available
    /// memory below what fits and retries no longer grow, or at [`rearm`](Self::rearm).
    pub fn decide(&mut self, save_s: f64) -> Option<StepPeakAlert> {
        let (step, _, now_s) = self.last?;
        if self.available == 0 {
            return None;
        }
        let available = self.available as f64;
        let fits = available * (1.0 - self.config.margin_fraction.clamp(0.0, 1.0));
        let save_s = if save_s.is_finite() {
            save_s.max(0.0)
        } else {
            0.0
        };
        let lead_s = if self.config.lead_s.is_finite() {
            self.config.lead_s.max(0.0)
        } else {
            0.0
        };
        let horizon_s = lead_s.max(save_s);
        let train = self.train.forecast(horizon_s, fits);
        let other = self.other.forecast(horizon_s, fits);
        let reserve = self.reserve_forecast(horizon_s, fits);
        if self.alerted {
            // The next evaluations are judged from the passes that ended, also while one
            // is under way (whose own peak counts too).
            let calm = fits - REARM_FRACTION * available;
            let eval = self.evals.forecast(now_s, horizon_s, fits, true);
            let current = self.evals.current.map_or(0.0, |(_, p)| p.peak as f64);
            let peaks = [Some(train), Some(other), eval, reserve];
            if current > calm {
                return None;
            }
            if !self.retries_growing() && peaks.iter().flatten().all(|f| f.peak() <= calm) {
                self.alerted = false;
            }
            return None;
        }
        let alert = |reason, phase, ahead: u64, peak: f64, seconds: Option<f64>| StepPeakAlert {
            reason,
            phase,
            step,
            predicted_peak: peak.clamp(0.0, u64::MAX as f64) as u64,
            available: self.available,
            steps_ahead: ahead,
            seconds_left: seconds,
        };
        let eval = self.evals.forecast(now_s, horizon_s, fits, false);
        let step_fail = [(Phase::Train, train), (Phase::Other, other)]
            .into_iter()
            .find_map(|(phase, f)| match f {
                Outlook::Fails {
                    ahead,
                    peak,
                    seconds,
                } => Some((phase, ahead, peak, seconds)),
                Outlook::Fits { .. } => None,
            });
        let found = if self.retries_growing() {
            let (phase, ahead, peak, seconds) =
                step_fail.unwrap_or((Phase::Train, 1, train.peak(), self.train.times.median()));
            Some(alert(
                AlertReason::Fragmentation,
                phase,
                ahead,
                peak,
                seconds,
            ))
        } else if let Some((phase, ahead, peak, seconds)) = step_fail {
            Some(alert(AlertReason::StepPeak, phase, ahead, peak, seconds))
        } else if let Some(Outlook::Fails {
            ahead,
            peak,
            seconds,
        }) = eval
        {
            Some(alert(
                AlertReason::EvalPeak,
                Phase::Eval,
                ahead,
                peak,
                seconds,
            ))
        } else if let Some(Outlook::Fails {
            ahead,
            peak,
            seconds,
        }) = reserve
        {
            Some(alert(
                AlertReason::Fragmentation,
                Phase::Train,
                ahead,
                peak,
                seconds,
            ))
        } else {
            None
        };
        self.alerted = found.is_some();
        found
    }

    /// Reserved memory growing credibly past what the peaks use, toward what is
    /// available: the cache keeps memory it cannot reuse for the steps' blocks. `None`
    /// without such growth.
    fn reserve_forecast(&self, horizon_s: f64, fits: f64) -> Option<Outlook> {
        let trend = self.reserved.trend()?;
        let peak = self
            .train
            .peaks
            .envelope()
            .max(self.other.peaks.envelope())
            .max(self.evals.highest());
        let unexplained = self.last_reserved.saturating_sub(peak) as f64;
        if unexplained < FRAGMENTED_FRACTION * self.available as f64 {
            return None;
        }
        let step_s = self.train.times.median().or(self.other.times.median());
        let ahead = steps_ahead(horizon_s, step_s);
        let at = |k: u64| trend.at(k).max(self.last_reserved as f64);
        if at(ahead) <= fits {
            return Some(Outlook::Fits { peak: at(ahead) });
        }
        let k = trend.first_above(fits).unwrap_or(ahead).min(ahead);
        Some(Outlook::Fails {
            ahead: k,
            peak: at(k),
            seconds: step_s.map(|s| s * k as f64),
        })
    }

    /// Whether an episode is under way (an alert was made and not yet re-armed).
    pub fn alerted(&self) -> bool {
        self.alerted
    }

    /// Starts a new episode at once (the caller knows the run changed: it restarted, or
    /// saved and freed memory).
    pub fn rearm(&mut self) {
        self.alerted = false;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The look-ahead is `ceil(max(lead, save) / step) + 1` steps (the caller passes the
    /// larger of the two as the horizon), the next step while the step time is unknown.
    #[test]
    fn the_look_ahead_in_steps() {
        for (horizon, step, want) in [
            (30.0, Some(0.5), 61),
            (30.0, Some(0.7), 44),
            (0.0, Some(0.1), 1),
            (60.0, Some(1e-12), MAX_AHEAD + 1),
            (30.0, None, 1),
        ] {
            assert_eq!(steps_ahead(horizon, step), want, "{horizon} {step:?}");
        }
    }

    /// A trend is believed up to its reach and no further; the first step above a line.
    #[test]
    fn a_trend_reaches_so_far() {
        let t = Trend {
            slope: 2.0,
            level: 100.0,
            reach: 10.0,
        };
        assert_eq!(t.at(5), 110.0);
        assert_eq!(t.at(1000), 120.0);
        assert_eq!(t.first_above(105.0), Some(3));
        assert_eq!(t.first_above(99.0), Some(1));
        assert_eq!(t.first_above(150.0), None);
    }

    /// Blocks fold their steps; the newest point is the open block; a line through the
    /// maxima is found exactly, and two levels are told from a line.
    #[test]
    fn blocks_and_fits() {
        let mut r = Ring::new(4);
        for i in 0..40u64 {
            r.push(1000 + 10 * i, 1, i + 1);
        }
        assert_eq!((r.len, r.points()), (10, 10));
        assert_eq!(r.newest(0).max, 1390);
        assert_eq!(r.newest(9).max, 1030);
        let f = fit(&r, 0, 10, 40).unwrap();
        assert!((f.slope - 10.0).abs() < 1e-9 && f.residuals < 1e-6);
        assert!(!step_fits_better(&r, 10, f.sse + 1.0));
        let mut jump = Ring::new(1);
        for i in 0..20u64 {
            jump.push(if i < 10 { 1000 } else { 2000 }, 1, i + 1);
        }
        let f = fit(&jump, 0, 20, 20).unwrap();
        assert!(f.slope > 0.0);
        assert!(step_fits_better(&jump, 20, f.sse));
        assert!(jump.trend(20, 20).is_none(), "one jump is no trend");
    }
}
