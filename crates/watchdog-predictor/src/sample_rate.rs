//! How often to sample one resource: as often as its forecast needs.
//!
//! A resource whose limit is far (no forecast, or one many leads away; headroom well
//! above the floor and above the largest step learned) is sampled slowly, every
//! `max_interval`; one that comes near is sampled at `interval`. Pure and per resource:
//! the latest forecast, headroom, floor and step go in, the time until the next sample
//! (and, for a resource the kernel can wake the loop for, the usage whose crossing should
//! wake it) come out. Going fast is immediate; going slow again waits until the resource
//! has been far for a whole lead, so a forecast that comes and goes does not flap.
//!
//! At rest a resource without a kernel wake is next read no later than its headroom to the
//! alert line would last at the fastest rate it can fill (`fill_rate`, [`RateInput`]), and
//! a rise from one sample to the next keeps it fast only when that headroom could be gone
//! before the next slow read: a read skipped because the headroom could not have run out
//! is free (earlyoom sleeps the same way, its headroom over 6,000 MiB/s).
//!
//! `max_interval` is clamped to `[interval, bucket / 4]` ([`clamp_max_interval`]): the
//! predictor folds usage into buckets an eighth of a lead wide (at least four intervals),
//! and every bucket must hold four samples, as at the fixed rate, for the trend windows to
//! stay filled and a bucket's span to measure the usage's jitter (with one sample a
//! bucket a saw-tooth's troughs were learned as steps). The rule and its measurements are
//! in `docs/prediction.md` ("Sampling rates").

use watchdog_types::defaults::DEFAULT_MAX_INTERVAL_S;

/// Samples every bucket gets at the least, as at the fixed rate (a bucket is at least
/// four intervals wide): its span is the usage's jitter the step learner and the trend's
/// noise check measure, and a bucket of one sample has none.
const SAMPLES_PER_BUCKET: f64 = 4.0;

/// Approaching: a forecast under this many leads makes the resource fast ...
const NEAR_LEADS: f64 = 4.0;
/// ... and it may go slow again only with none under this many.
const FAR_LEADS: f64 = 6.0;
/// Approaching: headroom under this many floors (without a kernel wake) ...
const NEAR_FLOORS: f64 = 2.0;
/// ... far again from this many.
const FAR_FLOORS: f64 = 3.0;
/// Approaching: headroom under the floor plus this many largest steps ...
const NEAR_STEPS: f64 = 4.0;
/// ... far again from the floor plus this many.
const FAR_STEPS: f64 = 6.0;

/// The longest interval allowed: `max_interval_s` clamped to `[interval_s, min(bucket_s / 4,
/// lead_s / 8)]` (the bucket is at least lead / 8); [`DEFAULT_MAX_INTERVAL_S`] when it is
/// not a positive number.
pub fn clamp_max_interval(interval_s: f64, max_interval_s: f64, lead_s: f64, bucket_s: f64) -> f64 {
    let interval = if interval_s.is_finite() && interval_s > 0.0 {
        interval_s
    } else {
        0.0
    };
    let wanted = if max_interval_s.is_finite() && max_interval_s > 0.0 {
        max_interval_s
    } else {
        DEFAULT_MAX_INTERVAL_S
    };
    let mut high = wanted;
    if bucket_s.is_finite() && bucket_s > 0.0 {
        high = high.min(bucket_s / SAMPLES_PER_BUCKET);
    }
    if lead_s.is_finite() && lead_s > 0.0 {
        high = high.min(lead_s / 8.0);
    }
    high.max(interval)
}

/// What the policy knows of one resource after a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateInput {
    /// The sample's time, seconds (the caller's clock).
    pub t_s: f64,
    /// The forecast's seconds to exhaustion (`None`: no credible forecast, or no limit).
    pub seconds_left: Option<f64>,
    /// The sample's usage.
    pub used: u64,
    /// The limit (0 or `u64::MAX`: none).
    pub limit: u64,
    /// The floor in the resource's unit (`floor_percent` of the limit; 0 for runtime).
    pub floor: f64,
    /// The largest step learned, in the resource's unit (0 before any).
    pub step: f64,
    /// Whether an alert episode is going on (the predictor is not armed).
    pub alerting: bool,
    /// The lead in force, seconds.
    pub lead_s: f64,
    /// The sampling interval (the fast rate), seconds.
    pub interval_s: f64,
    /// The longest interval, seconds, already clamped by [`clamp_max_interval`].
    pub max_interval_s: f64,
    /// Whether a kernel source wakes the loop when usage crosses a level armed for it.
    pub kernel_wake: bool,
    /// When the predictor's current bucket closes (its trend is refitted at the first
    /// sample from then on), seconds; `None` when unknown.
    pub bucket_close_s: Option<f64>,
    /// The fastest the usage can rise, in the resource's unit a second (`fill_rate`; a
    /// hog's page faults, a checkpoint writer); 0 or not finite: unknown, no bound.
    pub fill_rate: f64,
    /// The headroom under which the next sample alerts at once, in the resource's unit
    /// (the floor, or the learned step and the usage's jitter); the floor when smaller.
    pub alert_headroom: f64,
}

/// When to sample next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NextSample {
    /// Seconds after this sample.
    pub after_s: f64,
    /// For a resource with a kernel wake: sample as soon as usage reaches this level
    /// (the loop arms the kernel's threshold there); `None` otherwise.
    pub wake_at: Option<u64>,
    /// Whether the resource is sampled slowly (far from its limit).
    pub slow: bool,
}

/// The policy's state for one resource: fixed size, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SampleRate {
    slow: bool,
    started: bool,
    /// Whether it has been near since the watch began.
    was_near: bool,
    /// Since when the resource has been far (while fast).
    far_since: Option<f64>,
    /// What the samples showed since `window_start`, and in the window before.
    recent: Recent,
    before: Recent,
    window_start: f64,
    /// The last sample's usage and time.
    last_used: u64,
    last_t: f64,
    /// Whether the last sample was in an alert episode.
    alerting: bool,
}

/// What one window of [`MEMORY_LEADS`] leads showed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Recent {
    /// The highest usage.
    high: u64,
    /// The largest rise from one sample to the next: a step not learned yet (the
    /// predictor learns a step size from the second on).
    jump: u64,
    /// The fastest rise from one sample to the next, a second.
    rise_rate: f64,
}

/// A rise from one sample to the next of this fraction of the limit or more keeps the
/// resource fast while it is remembered (the step learner's smallest step).
const MIN_JUMP: f64 = 0.005;

/// A jump whose rise, kept up, would take the headroom to the alert line within this many
/// leads keeps the resource fast even when the headroom outlasts a slow read at the fill
/// rate (a saw-tooth's tooth rising 6.7% of the limit a second at a 10 s lead: sampled
/// slowly, its peak was missed and its trend fitted at 109 s left instead of 10 s).
const RISE_LEADS: f64 = 2.0;

/// The highest usage and the largest jump are remembered for one to two windows this many
/// leads long.
const MEMORY_LEADS: f64 = 4.0;

impl SampleRate {
    /// A resource not sampled yet.
    pub const fn new() -> SampleRate {
        SampleRate {
            slow: false,
            started: false,
            was_near: false,
            far_since: None,
            recent: Recent {
                high: 0,
                jump: 0,
                rise_rate: 0.0,
            },
            before: Recent {
                high: 0,
                jump: 0,
                rise_rate: 0.0,
            },
            window_start: 0.0,
            last_used: 0,
            last_t: 0.0,
            alerting: false,
        }
    }

    /// Whether the resource is sampled slowly now.
    pub fn is_slow(&self) -> bool {
        self.slow
    }

    /// Takes what one sample showed and says when to sample next.
    ///
    /// Approaching (any of: an alert episode; a forecast under 4 leads; without a kernel
    /// wake, headroom under twice the floor; headroom under the floor plus 4 largest
    /// steps, learned or seen from one sample to the next; a rise of 0.5% of the limit or
    /// more from one sample to the next, over the last 4 to 8 leads, unless the headroom
    /// to the alert line outlasts a slow read at the fill rate) makes it fast at once.
    /// Far (none of those, no forecast under 6 leads, headroom at least three floors
    /// (with a kernel wake: above the floor) and the floor plus 6 steps) held for a lead
    /// makes it slow; from the start until it is first near, held for a bucket (an eighth
    /// of a lead) when the headroom to the alert line outlasts a slow read at the fill
    /// rate; a resource starts fast. While slow, without a kernel wake, the next read comes
    /// no later than the headroom to the alert line lasts at the fill rate.
    pub fn update(&mut self, input: &RateInput) -> NextSample {
        let lead = if input.lead_s.is_finite() && input.lead_s > 0.0 {
            input.lead_s
        } else {
            0.0
        };
        self.remember(input, lead);
        let limited = input.limit != 0 && input.limit != u64::MAX;
        let headroom = if limited {
            input.limit.saturating_sub(input.used) as f64
        } else {
            f64::INFINITY
        };
        let floor = input.floor.max(0.0);
        let jump = self.recent.jump.max(self.before.jump) as f64;
        let step = input.step.max(jump).max(0.0);
        let left = input.seconds_left.filter(|_| limited);
        let floors = |n: f64| {
            if input.kernel_wake {
                headroom <= floor
            } else {
                headroom < n * floor
            }
        };
        let max = input.max_interval_s.max(input.interval_s);
        // How long the headroom to the alert line lasts at the fastest fill, seconds.
        let lasts = fill_lasts(input, headroom, floor);
        // A jump the step learner could take for a step: usage moves in steps, whose
        // timing the staircase forecast rests on; seen late, it is extrapolated late. It
        // counts when the headroom could be gone before the next slow read at the fastest
        // fill ...
        let outlasts = lasts.is_some_and(|s| s >= max);
        // ... or a rise that, kept up, would reach the line within 2 leads: a leak fast
        // enough to show between two slow reads, whose trend a slow read fits late.
        let rise_rate = self.recent.rise_rate.max(self.before.rise_rate);
        let line = floor.max(input.alert_headroom).max(0.0);
        let rising = rise_rate > 0.0 && headroom - line < RISE_LEADS * lead * rise_rate;
        let jumped = limited && jump >= MIN_JUMP * input.limit as f64 && (!outlasts || rising);
        let near = input.alerting
            || jumped
            || left.is_some_and(|s| s < NEAR_LEADS * lead)
            || floors(NEAR_FLOORS)
            || (step > 0.0 && headroom < floor + NEAR_STEPS * step);
        let far = !input.alerting
            && !jumped
            && left.is_none_or(|s| s >= FAR_LEADS * lead)
            && !floors(FAR_FLOORS)
            && headroom >= floor + FAR_STEPS * step;
        self.started = true;
        if near {
            self.was_near = true;
            self.slow = false;
            self.far_since = None;
        } else if !self.slow {
            if far {
                // Far for a lead, so that a forecast that comes and goes does not flap the
                // rate; for a bucket (an eighth of a lead) from the start until it is
                // first near, when the headroom outlasts a slow read at the fastest fill
                // (slow from the first sample, a saw-tooth starting at once was aliased
                // into an alert the fixed rate never had; a bucket after a leak's free,
                // the trend fitted later over buckets of four samples came up to 0.19 s
                // past the bound).
                let hold = if outlasts && !self.was_near {
                    lead / 8.0
                } else {
                    lead
                };
                let since = *self.far_since.get_or_insert(input.t_s);
                if input.t_s - since >= hold {
                    self.slow = true;
                    self.far_since = None;
                }
            } else {
                self.far_since = None;
            }
        }
        let after_s = if self.slow {
            // A bucket closing before the next poll: sample within an interval of its
            // close instead, where the fixed rate refits too (a trend that appears there,
            // already under the lead, is then not one `max_interval` late). Kept when the
            // headroom outlasts the poll: without it, and slow from the first sample, a
            // leak's first alert came 1.6 s after the fixed rate's at a 30 s lead.
            let to_close = input
                .bucket_close_s
                .map(|c| c - input.t_s + input.interval_s)
                .filter(|d| *d > 0.0 && d.is_finite());
            // Without a kernel wake: no later than the headroom could run out (the kernel
            // wakes the loop at the alert line itself).
            let until_gone = lasts
                .filter(|_| !input.kernel_wake)
                .map_or(max, |s| s.max(input.interval_s));
            to_close.map_or(max, |d| d.min(max)).min(until_gone)
        } else {
            input.interval_s
        };
        let high = self.recent.high.max(self.before.high);
        NextSample {
            after_s,
            wake_at: input
                .kernel_wake
                .then(|| wake_level(input, high, headroom, floor, lead)),
            slow: self.slow,
        }
    }

    /// Folds the sample into the recent highs and jumps; an episode's start or end (a
    /// drop) forgets them.
    fn remember(&mut self, input: &RateInput, lead: f64) {
        let episode_changed = self.alerting != input.alerting;
        if !self.started || episode_changed || input.t_s - self.window_start >= MEMORY_LEADS * lead
        {
            let keep = self.started && !episode_changed;
            self.before = if keep { self.recent } else { Recent::default() };
            self.recent = Recent::default();
            self.window_start = input.t_s;
        }
        if self.started && !episode_changed {
            let rise = input.used.saturating_sub(self.last_used);
            self.recent.jump = self.recent.jump.max(rise);
            // Over a slow read at the least: a burst within one (a step, or 1% of the
            // host faulted in 0.1 s) is what the fill rate bounds, a leak shows over it.
            let dt = (input.t_s - self.last_t).max(input.max_interval_s);
            if dt > 0.0 {
                self.recent.rise_rate = self.recent.rise_rate.max(rise as f64 / dt);
            }
        }
        self.recent.high = self.recent.high.max(input.used);
        self.last_used = input.used;
        self.last_t = input.t_s;
        self.alerting = input.alerting;
    }
}

/// How long resource `input`'s headroom to the alert line (the floor, or the alert
/// headroom when larger) lasts at its fill rate, seconds: for ever without a limit (there
/// is no line), and where the kernel wakes the loop at the line and at new highs (an armed
/// threshold stands in for polling); `None` without a fill rate.
fn fill_lasts(input: &RateInput, headroom: f64, floor: f64) -> Option<f64> {
    if !headroom.is_finite() || input.kernel_wake {
        return Some(f64::INFINITY);
    }
    let rate = input.fill_rate;
    if !rate.is_finite() || rate <= 0.0 {
        return None;
    }
    let line = floor.max(input.alert_headroom).max(0.0);
    Some((headroom - line).max(0.0) / rate)
}

/// The usage whose crossing should wake the loop: the floor, or sooner a new high (above
/// the highest usage of the last lead or two, `high`) by the rise that a leak running out
/// within 4 leads makes in one interval. Such a leak is then sampled at least once an
/// interval however slow the poll, while a saw-tooth or noise that stays under its old
/// peaks does not wake it.
fn wake_level(input: &RateInput, high: u64, headroom: f64, floor: f64, lead: f64) -> u64 {
    if !headroom.is_finite() {
        return u64::MAX;
    }
    let at_floor = input.used as f64 + (headroom - floor).max(1.0);
    let rise = if lead > 0.0 {
        headroom * input.interval_s.max(0.0) / (NEAR_LEADS * lead)
    } else {
        0.0
    };
    let new_high = high.max(input.used) as f64 + rise.max(1.0);
    at_floor.min(new_high) as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LIMIT: u64 = 1000;

    fn input(t_s: f64, used: u64, seconds_left: Option<f64>) -> RateInput {
        RateInput {
            t_s,
            seconds_left,
            used,
            limit: LIMIT,
            floor: 50.0,
            step: 0.0,
            alerting: false,
            lead_s: 30.0,
            interval_s: 0.1,
            max_interval_s: 1.0,
            kernel_wake: false,
            bucket_close_s: None,
            fill_rate: 0.0,
            alert_headroom: 0.0,
        }
    }

    #[test]
    fn max_interval_is_clamped_to_the_interval_and_a_quarter_bucket() {
        assert_eq!(clamp_max_interval(0.1, 0.5, 30.0, 3.75), 0.5);
        assert_eq!(clamp_max_interval(0.1, 1.0, 30.0, 3.75), 0.9375);
        assert_eq!(clamp_max_interval(0.1, 10.0, 30.0, 3.75), 0.9375);
        assert_eq!(clamp_max_interval(0.1, 10.0, 3.0, 0.4), 0.1);
        assert_eq!(clamp_max_interval(0.01, 10.0, 3.0, 0.375), 0.09375);
        assert_eq!(clamp_max_interval(0.5, 0.1, 30.0, 3.75), 0.5);
        assert_eq!(clamp_max_interval(2.0, 10.0, 3.0, 8.0), 2.0);
        assert_eq!(clamp_max_interval(0.1, f64::NAN, 120.0, 15.0), 1.0);
    }

    /// The table of the rule: (used, seconds left, step, alerting, kernel) -> slow.
    #[test]
    fn far_is_slow_and_approaching_is_fast() {
        /// (used, seconds left, step, alerting, kernel wake, slow).
        type Case = (u64, Option<f64>, f64, bool, bool, bool);
        let cases: &[Case] = &[
            (200, None, 0.0, false, false, true),
            (200, Some(1000.0), 0.0, false, false, true),
            (200, Some(100.0), 0.0, false, false, false), // under 4 leads
            (200, None, 0.0, true, false, false),         // an episode
            (860, None, 0.0, false, false, false),        // under 3 floors: not far
            (860, None, 0.0, false, true, true),          // ... unless the kernel wakes
            (960, None, 0.0, false, true, false),         // within the floor
            (600, None, 150.0, false, false, false),      // under the floor + 4 steps
            (100, None, 100.0, false, false, true),       // the floor + 6 steps away
        ];
        for &(used, left, step, alerting, kernel, slow) in cases {
            let mut rate = SampleRate::new();
            let at = |t: f64| RateInput {
                step,
                alerting,
                kernel_wake: kernel,
                ..input(t, used, left)
            };
            // A resource starts fast, and goes slow once it has been far for a lead.
            assert!(!rate.update(&at(0.0)).slow);
            let next = rate.update(&at(30.0));
            assert_eq!(
                next.slow, slow,
                "{used} {left:?} {step} {alerting} {kernel}"
            );
            assert_eq!(next.after_s, if slow { 1.0 } else { 0.1 });
        }
    }

    #[test]
    fn a_jump_keeps_it_fast_while_remembered() {
        let mut rate = SampleRate::new();
        rate.update(&input(0.0, 100, None));
        assert!(rate.update(&input(30.0, 100, None)).slow);
        // 10% of the limit from one sample to the next, far from the limit all the same.
        assert!(!rate.update(&input(31.0, 200, None)).slow);
        assert!(!rate.update(&input(100.0, 200, None)).slow);
        // Forgotten after two windows of 4 leads; slow once far for a lead after that.
        assert!(!rate.update(&input(280.0, 200, None)).slow);
        assert!(!rate.update(&input(400.0, 200, None)).slow);
        assert!(rate.update(&input(430.0, 200, None)).slow);
    }

    /// A jump keeps it fast only when the headroom to the alert line could be gone before
    /// the next slow read at the fastest fill (issue 31): 750 left over the floor of 50
    /// lasts 7.5 s at 100 a second, 0.75 s at 1000; or when the rise, kept up, would reach
    /// the line within 2 leads (100 in 1 s: 7.5 s; 100 in 30 s: 225 s).
    #[test]
    fn a_jump_the_headroom_outlasts_at_the_fill_rate_does_not_make_it_fast() {
        // (fill rate, seconds the rise of 100 took, slow after it).
        let cases = [
            (100.0, 30.0, true),
            (100.0, 1.0, false),
            (1000.0, 30.0, false),
            (0.0, 30.0, false),
        ];
        for (fill_rate, dt, slow) in cases {
            let mut rate = SampleRate::new();
            let at = |t: f64, used: u64| RateInput {
                fill_rate,
                ..input(t, used, None)
            };
            rate.update(&at(0.0, 100));
            rate.update(&at(30.0, 100));
            assert!(rate.is_slow(), "{fill_rate}");
            // 10% of the limit from one sample to the next.
            let next = rate.update(&at(30.0 + dt, 200));
            assert_eq!(next.slow, slow, "{fill_rate} {dt}");
            assert_eq!(rate.update(&at(70.0, 200)).slow, slow, "{fill_rate} {dt}");
        }
    }

    /// Far from the start, with the headroom outlasting a slow read at the fill rate: slow
    /// once far for a bucket (an eighth of the 30 s lead), not a lead (issue 31); fast
    /// again at once when a forecast comes, and once it has been near, slow only a whole
    /// lead after it goes (a bucket's hold after a leak's free let the trend be fitted
    /// over buckets of four samples, up to 0.19 s past the property test's bound).
    #[test]
    fn a_headroom_that_outlasts_the_fill_goes_slow_after_a_bucket_until_first_near() {
        for (fill_rate, slow) in [(100.0, true), (1000.0, false), (0.0, false)] {
            let mut rate = SampleRate::new();
            let at = |t: f64, left: Option<f64>| RateInput {
                fill_rate,
                ..input(t, 100, left)
            };
            assert!(!rate.update(&at(0.0, None)).slow, "{fill_rate}");
            assert_eq!(rate.update(&at(4.0, None)).slow, slow, "{fill_rate}");
            assert!(!rate.update(&at(5.0, Some(60.0))).slow, "{fill_rate}");
            assert!(!rate.update(&at(6.0, None)).slow, "{fill_rate}");
            assert!(!rate.update(&at(10.0, None)).slow, "{fill_rate}");
            assert!(!rate.update(&at(35.0, None)).slow, "{fill_rate}");
            assert!(rate.update(&at(36.0, None)).slow, "{fill_rate}");
        }
    }

    /// While slow, without a kernel wake, the next read comes no later than the headroom
    /// to the alert line lasts at the fill rate, and no sooner than an interval.
    #[test]
    fn a_slow_read_comes_before_the_headroom_could_run_out() {
        // (fill rate, alert headroom, kernel wake, after).
        let cases = [
            (1000.0, 0.0, false, 0.75),   // (1000 - 200 - 50) / 1000
            (1000.0, 250.0, false, 0.55), // the alert line above the floor
            (1000.0, 0.0, true, 1.0),     // the kernel wakes the loop at the line
            (100.0, 0.0, false, 1.0),     // capped by max_interval
            (10000.0, 0.0, false, 0.1),   // never sooner than an interval
            (0.0, 0.0, false, 1.0),       // no fill rate: no bound
        ];
        for (fill_rate, alert_headroom, kernel_wake, after) in cases {
            let mut rate = SampleRate::new();
            let at = |t: f64| RateInput {
                fill_rate,
                alert_headroom,
                kernel_wake,
                ..input(t, 200, None)
            };
            rate.update(&at(0.0));
            let next = rate.update(&at(30.0));
            assert!(next.slow, "{fill_rate} {alert_headroom} {kernel_wake}");
            assert!(
                (next.after_s - after).abs() < 1e-9,
                "{fill_rate} {alert_headroom} {kernel_wake}: {next:?}"
            );
        }
    }

    #[test]
    fn the_kernel_wakes_only_above_the_recent_highs() {
        let mut rate = SampleRate::new();
        let at = |t: f64, used: u64| RateInput {
            kernel_wake: true,
            ..input(t, used, None)
        };
        rate.update(&at(0.0, 500));
        // A saw-tooth back at its trough: its next peak does not wake the loop.
        assert_eq!(rate.update(&at(1.0, 300)).wake_at, Some(501));
        // An episode's end (a drop after an alert) forgets the old highs.
        rate.update(&RateInput {
            alerting: true,
            ..at(2.0, 600)
        });
        assert_eq!(rate.update(&at(3.0, 100)).wake_at, Some(101));
    }

    #[test]
    fn a_slow_resource_is_sampled_just_after_a_bucket_closes() {
        let mut rate = SampleRate::new();
        let close = |t: f64, c: f64| RateInput {
            bucket_close_s: Some(c),
            ..input(t, 200, None)
        };
        assert_eq!(rate.update(&close(0.0, 3.75)).after_s, 0.1);
        assert_eq!(rate.update(&close(30.0, 33.75)).after_s, 1.0);
        let next = rate.update(&close(33.0, 33.75));
        assert!((next.after_s - 0.85).abs() < 1e-9, "{next:?}");
        assert_eq!(rate.update(&close(33.85, 37.5)).after_s, 1.0);
    }

    #[test]
    fn fast_at_once_and_slow_again_only_after_a_lead_far() {
        let mut rate = SampleRate::new();
        assert!(!rate.update(&input(0.0, 200, None)).slow);
        assert!(rate.update(&input(30.0, 200, None)).slow);
        assert!(!rate.update(&input(31.0, 200, Some(90.0))).slow);
        // Between the bands: stays fast.
        assert!(!rate.update(&input(32.0, 200, Some(150.0))).slow);
        // Far again, but not for a lead yet; a forecast that comes and goes restarts it.
        assert!(!rate.update(&input(33.0, 200, None)).slow);
        assert!(!rate.update(&input(50.0, 200, None)).slow);
        assert!(!rate.update(&input(51.0, 200, Some(150.0))).slow);
        assert!(!rate.update(&input(52.0, 200, None)).slow);
        assert!(!rate.update(&input(81.0, 200, None)).slow);
        assert!(rate.update(&input(82.0, 200, None)).slow);
        // Slow holds between the bands.
        assert!(rate.update(&input(83.0, 200, Some(150.0))).slow);
    }

    #[test]
    fn the_kernel_wakes_at_a_rise_a_fast_leak_makes_in_one_interval_or_at_the_floor() {
        let mut rate = SampleRate::new();
        let far = rate.update(&RateInput {
            kernel_wake: true,
            ..input(0.0, 200, None)
        });
        // Headroom 800 over 4 leads (120 s) is 6.67 a second, 0.67 an interval: 1 unit.
        assert_eq!(far.wake_at, Some(201));
        let big = RateInput {
            limit: 1 << 30,
            floor: (1u64 << 30) as f64 * 0.05,
            used: 1 << 29,
            kernel_wake: true,
            ..input(0.0, 0, None)
        };
        let next = rate.update(&big);
        let rise = next.wake_at.unwrap() - big.used;
        assert_eq!(rise, ((1u64 << 29) as f64 * 0.1 / 120.0) as u64);
        // Near the floor the floor itself wakes it.
        let near = rate.update(&RateInput {
            kernel_wake: true,
            ..input(0.0, 949, None)
        });
        assert_eq!(near.wake_at, Some(950));
        assert_eq!(rate.update(&input(0.0, 200, None)).wake_at, None);
    }
}
