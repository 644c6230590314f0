//! The watch's clock: when it started (monotonic and wall), how many ticks it sampled and
//! how many of those came late. Every time the watch reports is measured from here.

use std::time::{Duration, Instant, SystemTime};

/// When a watch started, and its ticks.
#[derive(Debug, Clone)]
pub(super) struct Clock {
    /// The monotonic start: samples' times are nanoseconds since it.
    pub(super) start: Instant,
    /// The wall-clock start, unix seconds (status readers, the checkpoint record).
    pub(super) start_unix: f64,
    /// Ticks sampled.
    pub(super) ticks: u64,
    /// Ticks that came late while this run was watched (counted by the loop's schedule).
    pub(super) late_ticks: u64,
}

impl Clock {
    /// A clock started now.
    pub(super) fn started() -> Clock {
        let wall = SystemTime::now();
        Clock {
            start: Instant::now(),
            start_unix: watchdog_alerter::events::unix_time_s(wall),
            ticks: 0,
            late_ticks: 0,
        }
    }

    /// The wall-clock start as a `SystemTime`.
    pub(super) fn start_wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(self.start_unix.max(0.0))
    }

    /// Nanoseconds from the start to `now` (0 before it).
    pub(super) fn ns_at(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start)
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64
    }

    /// Seconds since the start.
    pub(super) fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Milliseconds since the start.
    pub(super) fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis().min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_measured_from_the_start_and_never_before_it() {
        let clock = Clock::started();
        assert_eq!(clock.ns_at(clock.start), 0);
        assert_eq!(
            clock.ns_at(clock.start + Duration::from_millis(3)),
            3_000_000
        );
        let before = clock.start.checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(clock.ns_at(before), 0);
        }
        let wall = clock
            .start_wall()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        assert!(
            (wall - clock.start_unix).abs() < 1e-3,
            "{wall} vs {}",
            clock.start_unix
        );
    }
}
