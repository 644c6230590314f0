//! The upper envelope of one resource's usage and the trend fitted to it.
//!
//! Samples are folded into fixed-width time buckets (a fixed ring of
//! [`RING`] buckets, no allocation); each bucket keeps its maximum, its
//! minimum and when the maximum happened. Whenever a bucket closes, a
//! least-squares line is fitted to the bucket *maxima* over three windows
//! (the last 8, 32 and 128 buckets), each window is checked for credibility
//! (enough data, a significant slope, growth still visible in the recent
//! half, growth not concentrated in one jump, new highs rather than the
//! recovery of an old peak), and the most pessimistic credible window wins.
//! The per-sample cost is a few comparisons; the fit is amortised over the
//! samples of a bucket.

/// Number of buckets kept (the longest window).
pub(crate) const RING: usize = 128;

/// The fit windows, in buckets; the shortest one spans the lead time.
pub(crate) const WINDOWS: [usize; 3] = [8, 32, 128];

/// Buckets per lead time: a bucket is `lead / BUCKETS_PER_LEAD` seconds wide.
pub(crate) const BUCKETS_PER_LEAD: f64 = 8.0;

/// Growth over the last quarter of a window, relative to the window's slope, below which
/// the window is taken to be levelling off.
const RECENT_GROWTH: f64 = 0.75;

/// A window is fitted once this fraction of its buckets hold samples ...
const MIN_FILL_NUM: usize = 1;
const MIN_FILL_DEN: usize = 2;
/// ... and at least this many (four noisy maxima pass a t-test too easily).
const MIN_POINTS: usize = 6;

/// Minimum t-statistic of a window's slope for it to count as a trend.
const MIN_T_STAT: f64 = 3.0;

/// One closed (or the current) bucket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    /// Largest usage seen in the bucket.
    pub max: f64,
    /// Smallest usage seen in the bucket.
    pub min: f64,
    /// Time (seconds, caller's clock) of the largest usage.
    pub t_max: f64,
    /// Whether any sample fell in the bucket (false in a gap).
    pub filled: bool,
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        max: 0.0,
        min: 0.0,
        t_max: 0.0,
        filled: false,
    };

    fn add(&mut self, t: f64, v: f64) {
        if !self.filled {
            *self = Bucket {
                max: v,
                min: v,
                t_max: t,
                filled: true,
            };
            return;
        }
        if v >= self.max {
            self.max = v;
            self.t_max = t;
        }
        if v < self.min {
            self.min = v;
        }
    }
}

/// The trend chosen at the last bucket close: usage follows the upper line
/// `anchor + slope * (t - t_ref)`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Trend {
    /// Growth rate, units per second (positive: only credible growth is kept).
    pub slope: f64,
    /// Envelope level at `t_ref`.
    pub anchor: f64,
    /// Reference time of the anchor (seconds, caller's clock).
    pub t_ref: f64,
    /// Confidence in [0, 1].
    pub confidence: f64,
    /// Window length in buckets that produced it.
    pub window: usize,
}

impl Trend {
    /// Envelope level projected to time `t`.
    #[inline]
    pub fn level_at(&self, t: f64) -> f64 {
        self.anchor + self.slope * (t - self.t_ref)
    }
}

/// Result of fitting one window (kept for diagnostics and tests).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WindowFit {
    pub slope: f64,
    pub credible: bool,
    pub trend: Trend,
}

/// Bucketed upper envelope with a fixed ring.
#[derive(Clone, Debug)]
pub(crate) struct Envelope {
    width: f64,
    inv_width: f64,
    origin: f64,
    started: bool,
    cur_idx: i64,
    /// Start time of the next bucket: samples before it go in the current one.
    next_edge: f64,
    cur: Bucket,
    ring: [Bucket; RING],
    /// Index in `ring` where the next closed bucket goes.
    head: usize,
    /// Number of ring slots written (saturates at RING).
    len: usize,
    /// The trend in force (slope 0 when none is credible).
    pub trend: Option<Trend>,
    /// Slope of the shortest window with enough data (may be negative, may be not credible).
    pub short_slope: f64,
    /// A peak from before a restart that growth must pass to count as new highs, and the
    /// bucket index until which it does (as long as the ring would have held it).
    ceiling: f64,
    ceiling_until: i64,
}

impl Envelope {
    pub fn new(width: f64) -> Self {
        let width = if width.is_finite() && width > 0.0 {
            width
        } else {
            1.0
        };
        Envelope {
            width,
            inv_width: 1.0 / width,
            origin: 0.0,
            started: false,
            cur_idx: 0,
            next_edge: f64::NEG_INFINITY,
            cur: Bucket::EMPTY,
            ring: [Bucket::EMPTY; RING],
            head: 0,
            len: 0,
            trend: None,
            short_slope: 0.0,
            ceiling: f64::NEG_INFINITY,
            ceiling_until: 0,
        }
    }

    /// Drops the ceiling kept by [`restart`](Self::restart).
    pub fn lift_ceiling(&mut self) {
        self.ceiling = f64::NEG_INFINITY;
    }

    /// Forgets every bucket and starts again at this sample. With a `ceiling`, growth
    /// must still pass that old peak to count as new highs, for as long as the ring would
    /// have kept it.
    pub fn restart(&mut self, t: f64, v: f64, ceiling: Option<f64>) {
        *self = Envelope::new(self.width);
        self.push(t, v);
        if let Some(c) = ceiling {
            self.ceiling = c;
            self.ceiling_until = RING as i64;
        }
    }

    /// Bucket width in seconds.
    pub fn width(&self) -> f64 {
        self.width
    }

    /// When the current bucket closes (the next sample from then on refits); `None`
    /// before the first sample.
    pub fn next_edge(&self) -> Option<f64> {
        (self.started && self.next_edge.is_finite()).then_some(self.next_edge)
    }

    /// Adds one sample; returns true when at least one bucket closed (the caller then refits).
    #[inline]
    pub fn push(&mut self, t: f64, v: f64) -> bool {
        // Fast path: still inside the current bucket (or a clock that went backwards).
        if t < self.next_edge {
            self.cur.add(t, v);
            return false;
        }
        if !self.started {
            if !t.is_finite() {
                return false;
            }
            self.started = true;
            self.origin = t;
            self.cur_idx = 0;
            self.next_edge = t + self.width;
            self.cur.add(t, v);
            return false;
        }
        let idx = ((t - self.origin) * self.inv_width).floor();
        // NaN or a clock that went backwards: count the sample in the current bucket.
        let idx = if idx.is_finite() {
            idx as i64
        } else {
            self.cur_idx
        };
        if idx <= self.cur_idx {
            self.cur.add(t, v);
            return false;
        }
        self.close_current();
        let missing = (idx - self.cur_idx - 1).min(RING as i64);
        for _ in 0..missing {
            self.store(Bucket::EMPTY);
        }
        self.cur_idx = idx;
        self.next_edge = self.origin + idx.saturating_add(1) as f64 * self.width;
        self.cur = Bucket::EMPTY;
        self.cur.add(t, v);
        true
    }

    fn close_current(&mut self) {
        let b = self.cur;
        self.store(b);
    }

    fn store(&mut self, b: Bucket) {
        self.ring[self.head] = b;
        self.head = (self.head + 1) % RING;
        if self.len < RING {
            self.len += 1;
        }
    }

    /// The `k`-th most recent closed bucket (k = 0 is the latest), if stored.
    #[inline]
    pub fn recent(&self, k: usize) -> Option<&Bucket> {
        if k >= self.len {
            return None;
        }
        let i = (self.head + RING - 1 - k) % RING;
        self.ring.get(i)
    }

    /// The largest max-min over the last `n` closed buckets: how far usage swings on its
    /// own (a saw-tooth's amplitude, when its period is under a bucket).
    pub fn largest_span(&self, n: usize) -> f64 {
        let mut span = 0.0f64;
        for k in 0..n.min(self.len) {
            if let Some(b) = self.recent(k)
                && b.filled
            {
                span = span.max(b.max - b.min);
            }
        }
        span
    }

    /// Upper quartile of max-min over the last `n` filled closed buckets: the usage's own jitter.
    /// None until at least 4 such buckets exist.
    pub fn noise(&self, n: usize) -> Option<f64> {
        let mut spans = [0.0f64; 16];
        let mut count = 0usize;
        let mut k = 0usize;
        while count < n.min(16) && k < self.len {
            if let Some(b) = self.recent(k)
                && b.filled
                && let Some(slot) = spans.get_mut(count)
            {
                *slot = b.max - b.min;
                count += 1;
            }
            k += 1;
        }
        if count < 4 {
            return None;
        }
        let s = spans.get_mut(..count)?;
        s.sort_unstable_by(f64::total_cmp);
        s.get(count * 3 / 4).copied()
    }

    /// Refits every window and picks the most pessimistic credible trend against `limit`.
    pub fn refit(&mut self, limit: f64) {
        let mut best: Option<Trend> = None;
        let mut best_left = f64::INFINITY;
        self.short_slope = 0.0;
        let mut short_done = false;
        for &w in WINDOWS.iter() {
            let Some(fit) = self.fit_window(w) else {
                continue;
            };
            if !short_done {
                self.short_slope = fit.slope;
                short_done = true;
            }
            if !fit.credible {
                continue;
            }
            let t = fit.trend;
            let left = (limit - t.level_at(t.t_ref)) / t.slope;
            if best.is_none() || left < best_left {
                best_left = left;
                best = Some(t);
            }
        }
        self.trend = best;
    }

    /// Least squares on the bucket maxima of the last `w` closed buckets, with the credibility checks.
    pub(crate) fn fit_window(&self, w: usize) -> Option<WindowFit> {
        if self.len < (w * MIN_FILL_NUM / MIN_FILL_DEN).max(MIN_POINTS) {
            return None;
        }
        let latest = self.recent(0)?;
        // Times relative to the newest closed bucket's maximum keep the sums well conditioned.
        let t_ref = if latest.filled {
            latest.t_max
        } else {
            self.origin + (self.cur_idx as f64) * self.width
        };
        let (mut n, mut sx, mut sy, mut sxx, mut sxy, mut syy) = (0.0f64, 0.0, 0.0, 0.0, 0.0, 0.0);
        let quarter = (w / 4).max(1);
        let (mut m3, mut m4) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        let mut first_y: Option<f64> = None;
        let mut cummax = f64::NEG_INFINITY;
        let mut largest_inc = 0.0f64;
        let mut spans = [0.0f64; RING];
        let mut n_spans = 0usize;
        // Oldest to newest.
        for k in (0..w).rev() {
            let Some(b) = self.recent(k) else { continue };
            if !b.filled {
                continue;
            }
            let x = b.t_max - t_ref;
            let y = b.max;
            if let Some(slot) = spans.get_mut(n_spans) {
                *slot = b.max - b.min;
                n_spans += 1;
            }
            n += 1.0;
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
            syy += y * y;
            if k < quarter {
                m4 = m4.max(y);
            } else if k < 2 * quarter {
                m3 = m3.max(y);
            }
            match first_y {
                None => {
                    first_y = Some(y);
                    cummax = y;
                }
                Some(_) => {
                    if y > cummax {
                        largest_inc = largest_inc.max(y - cummax);
                        cummax = y;
                    }
                }
            }
        }
        let min_n = (w * MIN_FILL_NUM / MIN_FILL_DEN).max(MIN_POINTS) as f64;
        if n < min_n {
            return None;
        }
        let mx = sx / n;
        let my = sy / n;
        let vxx = sxx - n * mx * mx;
        if vxx <= 0.0 {
            return None;
        }
        let cov = sxy - n * mx * my;
        let slope = cov / vxx;
        let vyy = (syy - n * my * my).max(0.0);
        let sse = (vyy - slope * cov).max(0.0);
        let r2 = if vyy > 0.0 {
            (slope * cov / vyy).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let mut fit = WindowFit {
            slope,
            credible: false,
            trend: Trend::default(),
        };
        if slope <= 0.0 || !slope.is_finite() {
            return Some(fit);
        }
        // Significance: t = slope / stderr(slope).
        let se2 = sse / ((n - 2.0).max(1.0) * vxx);
        let significant = se2 <= 0.0 || slope * slope >= MIN_T_STAT * MIN_T_STAT * se2;
        let span = w as f64 * self.width;
        // Growth still visible in the last quarter, at 3/4 of the window's rate at least
        // (a warm-up that is levelling off fails).
        let recent_growth = m4 - m3 >= RECENT_GROWTH * slope * span * 0.25;
        // Growth spread over the window, not one jump (a single step fails).
        let rise = first_y.map_or(0.0, |f| cummax - f);
        let spread = rise > 0.0 && largest_inc <= 0.5 * rise * (1.0 + 1e-9);
        // New highs: the window ends above every peak stored before it (a saw-tooth's
        // rising edge only recovers an old peak and fails).
        let mut prev_peak = if self.cur_idx < self.ceiling_until {
            self.ceiling
        } else {
            f64::NEG_INFINITY
        };
        for k in w..self.len {
            if let Some(b) = self.recent(k)
                && b.filled
            {
                prev_peak = prev_peak.max(b.max);
            }
        }
        let new_highs = prev_peak == f64::NEG_INFINITY || cummax - prev_peak >= 0.5 * slope * span;
        // The drift over the window must stand out of the usage's own jitter inside a
        // bucket (median span): random noise fails, and so does a leak smaller than
        // the saw-tooth it hides under, in the windows too short to see it.
        let jitter = spans
            .get_mut(..n_spans)
            .and_then(|sp| {
                let mid = sp.len() / 2;
                sp.select_nth_unstable_by(mid, f64::total_cmp);
                sp.get(mid).copied()
            })
            .unwrap_or(0.0);
        let above_jitter = slope * span >= jitter;
        fit.credible = significant && recent_growth && spread && new_highs && above_jitter;
        if !fit.credible {
            return Some(fit);
        }
        // Upper line of this slope through the peaks of the window's last quarter.
        let mut anchor = f64::NEG_INFINITY;
        for k in 0..quarter {
            if let Some(b) = self.recent(k)
                && b.filled
            {
                anchor = anchor.max(b.max - slope * (b.t_max - t_ref));
            }
        }
        let coverage = n / w as f64;
        fit.trend = Trend {
            slope,
            anchor,
            t_ref,
            confidence: (r2 * coverage).clamp(0.0, 1.0),
            window: w,
        };
        Some(fit)
    }
}
