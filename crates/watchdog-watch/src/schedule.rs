//! The one loop both modes run: `watchdog --pid` and `run` drive it with one target, the
//! service with every run it watches. [`Schedule`] owns the sampling deadline and the
//! late-tick accounting (a sample that overruns one or more deadlines counts them and does
//! not try to catch up); [`drive`] wakes for the next sample or the earliest chore,
//! whichever comes first, and asks a [`Loop`] for what differs between the modes: the stop
//! check, the chores around a sample, sampling every run, and waiting (on the wake-up
//! socket, and the target's pidfd when there is one). Tests drive it with a scripted clock.
//!
//! Rates are adaptive: the mode says when its first resource is due ([`Loop::next_sample`],
//! the earliest over its sources and runs), and a sample comes then, but never sooner than
//! one `interval` after the deadline of the last one. A tick is late when it finishes more
//! than one interval after the deadline it was due at, so a slow resource sampled on time
//! once a second counts nothing. A wake for a chore also samples when the mode has
//! something due soon ([`Loop::due_soon`]): the service's runs, each on its own phase,
//! then share the wakes its chores make instead of waking the loop each.

use std::time::{Duration, Instant};

/// The sampling deadline (the earliest the next sample may come) and the ticks that came late.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Duration,
    next: Instant,
    late: u64,
}

impl Schedule {
    /// A schedule sampling every `interval`, the first sample due at `start`.
    pub fn new(interval: Duration, start: Instant) -> Schedule {
        Schedule {
            interval,
            next: start,
            late: 0,
        }
    }

    /// Whether a sample is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// When the next sample is due.
    pub fn next(&self) -> Instant {
        self.next
    }

    /// When the next sample is due when the mode wants it at `wanted` (`None`: as soon as
    /// the interval allows): `wanted`, never sooner than [`next`](Self::next).
    pub fn deadline(&self, wanted: Option<Instant>) -> Instant {
        wanted.map_or(self.next, |w| w.max(self.next))
    }

    /// Moves the deadline one interval on after a sample that finished at `after`; returns
    /// how many deadlines it overran (0: on time). An overrun is counted, not caught up on:
    /// the next sample is due at once, then every interval from there.
    pub fn advance(&mut self, after: Instant) -> u64 {
        self.advance_from(self.next, after)
    }

    /// [`advance`](Self::advance) for a sample that was due at `due_at` (its
    /// [`deadline`](Self::deadline)): late when it finished more than one interval after that.
    pub fn advance_from(&mut self, due_at: Instant, after: Instant) -> u64 {
        self.next = due_at + self.interval;
        if self.next >= after {
            return 0;
        }
        let behind = after.duration_since(self.next);
        let late = 1 + (behind.as_nanos() / self.interval.as_nanos().max(1)) as u64;
        self.late += late;
        self.next = after;
        late
    }

    /// The ticks that came late so far.
    pub fn late_ticks(&self) -> u64 {
        self.late
    }

    /// When to wake: the next sample, or `chore` when it falls earlier.
    pub fn wake_at(&self, chore: Option<Instant>) -> Instant {
        self.wake_for(None, chore)
    }

    /// When to wake: the next sample as the mode wants it ([`deadline`](Self::deadline)),
    /// or `chore` when it falls earlier.
    pub fn wake_for(&self, wanted: Option<Instant>, chore: Option<Instant>) -> Instant {
        let next = self.deadline(wanted);
        chore.map_or(next, |c| c.min(next))
    }
}

/// How a [`Loop::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// At its deadline, or woken for a chore or a signal.
    Deadline,
    /// A kernel source said a resource moved: the loop samples it now
    /// ([`Loop::kernel_sample`]).
    Kernel,
    /// The loop is over (the one run ended).
    Over,
}

/// What the loop asks of the mode it runs: one target, or the service's many.
pub trait Loop {
    /// The time now (a scripted clock in tests).
    fn now(&self) -> Instant;
    /// The signal the watchdog was told to stop by, if it was.
    fn stop(&mut self) -> Option<i32>;
    /// The chores of every wake that come before the sample (reload, registrations, scans).
    fn before_sample(&mut self, _now: Instant) {}
    /// Samples every run once: the deadline came.
    fn sample(&mut self, now: Instant);
    /// The chores of every wake that come after the sample (status, publishing, keep-alive).
    fn after_sample(&mut self, _now: Instant) {}
    /// The last sample overran `ticks` deadlines (at least 1): every run watched counts them.
    fn late(&mut self, ticks: u64);
    /// When the mode's first resource is next due (`None`: every interval).
    fn next_sample(&self) -> Option<Instant> {
        None
    }
    /// Whether a sample at `now`, before [`next_sample`](Self::next_sample), would read
    /// something due soon enough to be read early: a wake a chore made then samples too,
    /// instead of the loop waking again for it shortly after.
    fn due_soon(&self, _now: Instant) -> bool {
        false
    }
    /// When the earliest chore falls due after `now` (`None`: only samples wake the loop).
    fn next_chore(&self, _now: Instant) -> Option<Instant> {
        None
    }
    /// Sleeps until `until` or a wake-up, and says which.
    fn wait(&mut self, until: Instant) -> Waited;
    /// Samples what the kernel wake-up the last [`wait`](Self::wait) ended with said moved
    /// (and only that: the path from the kernel to the signal is kept short).
    fn kernel_sample(&mut self, _now: Instant) {}
}

/// How [`drive`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driven {
    /// [`Loop::stop`] said this signal.
    Stopped(i32),
    /// [`Loop::wait`] said the loop is over.
    Over,
}

/// Runs `l` until it is stopped or over, sampling when it wants ([`Loop::next_sample`]) but
/// at most once every `interval`.
pub fn drive(l: &mut impl Loop, interval: Duration) -> Driven {
    let mut schedule = Schedule::new(interval, l.now());
    loop {
        if let Some(sig) = l.stop() {
            return Driven::Stopped(sig);
        }
        let now = l.now();
        l.before_sample(now);
        let deadline = schedule.deadline(l.next_sample());
        let due = now >= deadline;
        // Woken before the deadline (a chore), with something due soon: sampled now, as
        // if due now.
        let early = !due && schedule.due(now) && l.due_soon(now);
        if due || early {
            l.sample(now);
        }
        l.after_sample(now);
        let after = l.now();
        if due || early {
            let late = schedule.advance_from(deadline.min(now), after);
            if late > 0 {
                l.late(late);
            }
        }
        match l.wait(schedule.wake_for(l.next_sample(), l.next_chore(after))) {
            Waited::Over => return Driven::Over,
            Waited::Deadline => {}
            Waited::Kernel => {
                l.kernel_sample(l.now());
                // A kernel sample more than an interval after the deadline shows the loop
                // was late (frozen, starved): the deadlines it missed are counted, and
                // whatever else is due is sampled at once.
                let (at, deadline) = (l.now(), schedule.next());
                if at > deadline + interval {
                    l.late(schedule.advance_from(deadline, at));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn on_time_samples_advance_by_one_interval_and_count_nothing() {
        let t0 = Instant::now();
        let mut s = Schedule::new(100 * MS, t0);
        assert!(s.due(t0));
        assert_eq!(s.advance(t0 + 10 * MS), 0);
        assert_eq!(s.next(), t0 + 100 * MS);
        assert!(!s.due(t0 + 99 * MS));
        assert_eq!(
            s.advance(t0 + 100 * MS),
            0,
            "finishing at the deadline is on time"
        );
        assert_eq!(s.next(), t0 + 200 * MS);
        assert_eq!(s.late_ticks(), 0);
    }

    #[test]
    fn an_overrun_counts_each_deadline_missed_and_does_not_catch_up() {
        let t0 = Instant::now();
        let mut s = Schedule::new(100 * MS, t0);
        // Past the next deadline by 1 ms: one tick late, the next sample due at once.
        assert_eq!(s.advance(t0 + 101 * MS), 1);
        assert_eq!(s.next(), t0 + 101 * MS);
        // From there, past 3.5 deadlines: the one missed and three whole intervals.
        assert_eq!(s.advance(t0 + 101 * MS + 450 * MS), 4);
        assert_eq!(s.next(), t0 + 551 * MS);
        assert_eq!(s.late_ticks(), 5);
        // Back on time: the interval counts from where it was left.
        assert_eq!(s.advance(t0 + 560 * MS), 0);
        assert_eq!(s.next(), t0 + 651 * MS);
        assert_eq!(s.late_ticks(), 5);
    }

    #[test]
    fn the_wake_is_the_earlier_of_the_sample_and_the_chore() {
        let t0 = Instant::now();
        let s = Schedule::new(MS, t0 + 100 * MS);
        assert_eq!(s.wake_at(None), t0 + 100 * MS);
        assert_eq!(s.wake_at(Some(t0 + 30 * MS)), t0 + 30 * MS);
        assert_eq!(s.wake_at(Some(t0 + 300 * MS)), t0 + 100 * MS);
    }

    /// A mode scripted in time: each sample takes `cost(n)`, a chore falls due every
    /// `chore_every`, the run ends at `ends_at`, a stop comes after `stop_after` samples.
    struct Script {
        clock: Instant,
        t0: Instant,
        cost: fn(u64) -> Duration,
        chore_every: Option<Duration>,
        next_chore: Option<Instant>,
        ends_at: Option<Instant>,
        stop_after: Option<u64>,
        /// The mode wants its next sample this long after the last (`None`: every interval).
        every: Option<Duration>,
        /// From this time on, the mode wants a sample at once (a run was added).
        urgent_at: Option<Instant>,
        samples: Vec<Duration>,
        chores: Vec<Duration>,
        late: Vec<(u64, u64)>,
        wakes: u64,
        /// The wait with this number is frozen a second and then ends with a kernel
        /// wake-up at the thaw.
        frozen_wait: Option<u64>,
        /// The mode's next sample may come this early ([`Loop::due_soon`]).
        soon: Option<Duration>,
    }

    impl Script {
        fn new(cost: fn(u64) -> Duration) -> Script {
            let t0 = Instant::now();
            Script {
                clock: t0,
                t0,
                cost,
                chore_every: None,
                next_chore: None,
                ends_at: None,
                stop_after: None,
                every: None,
                urgent_at: None,
                samples: Vec::new(),
                chores: Vec::new(),
                late: Vec::new(),
                wakes: 0,
                frozen_wait: None,
                soon: None,
            }
        }
    }

    impl Loop for Script {
        fn now(&self) -> Instant {
            self.clock
        }
        fn stop(&mut self) -> Option<i32> {
            let stopped = self
                .stop_after
                .is_some_and(|n| self.samples.len() as u64 >= n);
            stopped.then_some(libc::SIGTERM)
        }
        fn sample(&mut self, now: Instant) {
            let n = self.samples.len() as u64;
            self.samples.push(now - self.t0);
            self.clock += (self.cost)(n);
        }
        fn after_sample(&mut self, now: Instant) {
            if let Some(every) = self.chore_every
                && self.next_chore.is_none_or(|at| now >= at)
            {
                self.chores.push(now - self.t0);
                self.next_chore = Some(now + every);
            }
        }
        fn late(&mut self, ticks: u64) {
            self.late.push((self.samples.len() as u64, ticks));
        }
        fn next_chore(&self, _now: Instant) -> Option<Instant> {
            self.next_chore
        }
        fn next_sample(&self) -> Option<Instant> {
            let last = self.samples.last().map(|&d| self.t0 + d);
            let slow = self.every.and_then(|e| last.map(|l| l + e));
            match (slow, self.urgent_at) {
                (Some(s), Some(u)) if self.clock >= u => Some(s.min(self.clock)),
                (s, _) => s,
            }
        }
        fn due_soon(&self, now: Instant) -> bool {
            let next = self.next_sample();
            self.soon
                .is_some_and(|soon| next.is_none_or(|at| now + soon >= at))
        }
        fn wait(&mut self, until: Instant) -> Waited {
            self.wakes += 1;
            assert!(self.wakes < 10_000, "the loop never ended");
            if let Some(end) = self.ends_at
                && end <= until
            {
                self.clock = self.clock.max(end);
                return Waited::Over;
            }
            if self.frozen_wait == Some(self.wakes) {
                self.clock += Duration::from_secs(1);
                return Waited::Kernel;
            }
            self.clock = self.clock.max(until);
            Waited::Deadline
        }
        fn kernel_sample(&mut self, now: Instant) {
            self.samples.push(now - self.t0);
        }
    }

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn samples_come_every_interval_and_the_run_ending_ends_the_loop() {
        let mut s = Script::new(|_| 5 * MS);
        s.ends_at = Some(s.t0 + 350 * MS);
        assert_eq!(drive(&mut s, 100 * MS), Driven::Over);
        assert_eq!(s.samples, ms(&[0, 100, 200, 300]));
        assert!(s.late.is_empty());
    }

    #[test]
    fn one_overrun_is_counted_once_and_the_next_sample_comes_at_once() {
        // The second sample takes 150 ms: the deadline at 200 ms passes during it.
        let mut s = Script::new(|n| if n == 1 { 150 * MS } else { MS });
        s.stop_after = Some(5);
        assert_eq!(drive(&mut s, 100 * MS), Driven::Stopped(libc::SIGTERM));
        assert_eq!(s.samples, ms(&[0, 100, 250, 350, 450]));
        assert_eq!(s.late, vec![(2, 1)]);
    }

    #[test]
    fn a_long_overrun_counts_every_deadline_it_missed() {
        // The first sample takes 420 ms: the deadlines at 100, 200, 300 and 400 ms pass.
        let mut s = Script::new(|n| if n == 0 { 420 * MS } else { MS });
        s.stop_after = Some(3);
        drive(&mut s, 100 * MS);
        assert_eq!(s.samples, ms(&[0, 420, 520]));
        assert_eq!(s.late, vec![(1, 4)]);
    }

    /// Frozen during its second wait, the loop's first sample at the thaw is the kernel
    /// wake-up's: it stands for the due one, and the deadlines the freeze passed are
    /// counted late, as the loop's own sample would have counted them.
    #[test]
    fn a_kernel_sample_after_a_freeze_counts_the_deadlines_missed() {
        let mut s = Script::new(|_| MS);
        s.every = Some(100 * MS);
        s.frozen_wait = Some(2);
        s.stop_after = Some(4);
        drive(&mut s, 100 * MS);
        // 0, 100, then the kernel's at 1.101 s (frozen from 101 ms), then every 100 ms.
        assert_eq!(s.samples, ms(&[0, 100, 1101, 1201]));
        assert_eq!(s.late, vec![(3, 9)]);
    }

    #[test]
    fn chores_wake_the_loop_between_samples_without_sampling() {
        let mut s = Script::new(|_| MS);
        s.chore_every = Some(250 * MS);
        s.ends_at = Some(s.t0 + 2500 * MS);
        drive(&mut s, 1000 * MS);
        assert_eq!(s.samples, ms(&[0, 1000, 2000]));
        assert_eq!(
            s.chores,
            ms(&[0, 250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2250])
        );
        assert!(s.late.is_empty());
    }

    #[test]
    fn a_stop_ends_the_loop_before_the_next_sample() {
        let mut s = Script::new(|_| MS);
        s.stop_after = Some(2);
        assert_eq!(drive(&mut s, 100 * MS), Driven::Stopped(libc::SIGTERM));
        assert_eq!(s.samples.len(), 2);
    }

    #[test]
    fn a_slow_mode_is_sampled_when_it_wants_and_an_on_time_slow_tick_is_not_late() {
        let mut s = Script::new(|_| 5 * MS);
        s.every = Some(1000 * MS);
        s.ends_at = Some(s.t0 + 3500 * MS);
        drive(&mut s, 100 * MS);
        assert_eq!(s.samples, ms(&[0, 1000, 2000, 3000]));
        assert!(s.late.is_empty(), "{:?}", s.late);
        // One wake a sample, and the one that saw the run end.
        assert_eq!(s.wakes, 4);
    }

    #[test]
    fn a_mode_wanting_samples_sooner_than_the_interval_gets_them_every_interval() {
        let mut s = Script::new(|_| MS);
        s.every = Some(10 * MS);
        s.ends_at = Some(s.t0 + 350 * MS);
        drive(&mut s, 100 * MS);
        assert_eq!(s.samples, ms(&[0, 100, 200, 300]));
        assert!(s.late.is_empty());
    }

    #[test]
    fn a_slow_tick_overrunning_one_interval_past_its_deadline_is_late() {
        // The sample due at 1000 ms takes 150 ms: it ends 50 ms past one interval.
        let mut s = Script::new(|n| if n == 1 { 150 * MS } else { MS });
        s.every = Some(1000 * MS);
        s.stop_after = Some(3);
        drive(&mut s, 100 * MS);
        // The mode counts its next sample from the last one's start, as the sampler does.
        assert_eq!(s.samples, ms(&[0, 1000, 2000]));
        assert_eq!(s.late, vec![(2, 1)]);
    }

    #[test]
    fn a_sample_wanted_sooner_is_taken_at_the_next_wake_the_interval_allows() {
        // Slow, then a run added at 450 ms wants a sample at once: it comes at the next
        // wake (the chore at 500 ms), not at the slow deadline of 1 s; then every interval
        // while it stays urgent.
        let mut s = Script::new(|_| MS);
        s.every = Some(1000 * MS);
        s.chore_every = Some(250 * MS);
        s.urgent_at = Some(s.t0 + 450 * MS);
        s.stop_after = Some(3);
        drive(&mut s, 100 * MS);
        assert_eq!(s.samples, ms(&[0, 500, 600]));
    }

    /// Regression: the service's runs, each due on its own phase, woke the loop each
    /// between the wakes its chores made (up to 100 wakes a second for 100 runs at rest).
    #[test]
    fn a_chore_wake_samples_what_is_due_soon_instead_of_waking_again_for_it() {
        let mut s = Script::new(|_| MS);
        s.every = Some(1000 * MS);
        s.chore_every = Some(300 * MS);
        s.soon = Some(250 * MS);
        s.ends_at = Some(s.t0 + 3000 * MS);
        drive(&mut s, 100 * MS);
        // Each sample at the chore wake before its deadline, within 250 ms of it.
        assert_eq!(s.samples, ms(&[0, 900, 1800, 2700]));
        assert!(s.late.is_empty(), "{:?}", s.late);
        // Only the chores woke the loop (0 is not a wake): 300, 600 ... 2700, and the end.
        assert_eq!(s.wakes, 10);
    }
}
