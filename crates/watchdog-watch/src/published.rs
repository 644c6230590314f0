//! The status the watch loop publishes for outside readers (the status socket, the
//! Prometheus endpoint): replaced whole by the loop, read on the readers' own schedule, so
//! a slow scrape never holds up sampling.
//!
//! The single run renews it on its own schedule. The service builds it only when a reader
//! asks ([`Published::fresh`]): a reader finding it older than [`FRESH_FOR`] asks, wakes
//! the loop and waits for the next one (at most [`ASK_WAIT`]), since building every run's
//! status four times a second for nobody was a sixth of the service's time with 100 runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use watchdog_types::status::{TargetStatus, WatchStatus};

use crate::wake::Waker;

/// A status this young is served as it is: readers in a burst (a scrape of several
/// endpoints, `watchdog status` and Prometheus together) share one.
pub const FRESH_FOR: Duration = Duration::from_millis(250);
/// The longest a reader waits for the loop to build a fresh status; then it is served the
/// latest (the loop is busy, or frozen).
pub const ASK_WAIT: Duration = Duration::from_secs(1);

/// The latest [`WatchStatus`], shared between the loop and its readers.
#[derive(Debug, Default)]
pub struct Published {
    /// The status and when it was set (`None`: never).
    latest: Mutex<(Arc<WatchStatus>, Option<Instant>)>,
    /// Signalled at each new status.
    renewed: Condvar,
    /// A reader wants a newer status than the latest.
    asked: AtomicBool,
    /// Wakes the loop to build one; `None`: the loop renews it on its own schedule.
    waker: Option<Waker>,
}

impl Published {
    /// An empty status for a watchdog in `mode` (`"single"` or `"daemon"`) sampling every
    /// `interval_s`, renewed on the loop's own schedule.
    pub fn new(mode: &str, interval_s: f64) -> Published {
        Published {
            latest: Mutex::new((
                Arc::new(WatchStatus {
                    watchdog_pid: std::process::id(),
                    mode: mode.to_string(),
                    interval_s,
                    ..WatchStatus::default()
                }),
                None,
            )),
            ..Published::default()
        }
    }

    /// The same, built only when a reader asks: `waker` wakes the loop, which then sees
    /// [`asked`](Self::asked).
    pub fn on_demand(mode: &str, interval_s: f64, waker: Waker) -> Published {
        Published {
            waker: Some(waker),
            ..Published::new(mode, interval_s)
        }
    }

    /// Replaces the targets, stamping the time, and wakes the readers waiting for it.
    pub fn set_targets(&self, targets: Vec<TargetStatus>) {
        let Ok(mut latest) = self.latest.lock() else {
            return;
        };
        let mut next = WatchStatus::clone(&latest.0);
        next.targets = targets;
        next.time_unix = watchdog_alerter::events::unix_time_s(std::time::SystemTime::now());
        *latest = (Arc::new(next), Some(Instant::now()));
        self.renewed.notify_all();
    }

    /// For the loop: whether a reader asked for a new status since the last call.
    pub fn asked(&self) -> bool {
        self.asked.swap(false, Ordering::AcqRel)
    }

    /// The latest status (a cheap shared copy), however old.
    pub fn get(&self) -> Arc<WatchStatus> {
        match self.latest.lock() {
            Ok(latest) => Arc::clone(&latest.0),
            Err(poisoned) => Arc::clone(&poisoned.into_inner().0),
        }
    }

    /// A status at most [`FRESH_FOR`] old: on demand, one the loop builds now when the
    /// latest is older (waiting at most [`ASK_WAIT`] for it); otherwise the latest.
    pub fn fresh(&self) -> Arc<WatchStatus> {
        let Some(waker) = &self.waker else {
            return self.get();
        };
        let Ok(latest) = self.latest.lock() else {
            return self.get();
        };
        if latest.1.is_some_and(|at| at.elapsed() <= FRESH_FOR) {
            return Arc::clone(&latest.0);
        }
        let stale = Arc::clone(&latest.0);
        self.asked.store(true, Ordering::Release);
        waker.wake();
        match self
            .renewed
            .wait_timeout_while(latest, ASK_WAIT, |l| Arc::ptr_eq(&l.0, &stale))
        {
            Ok((latest, _)) => Arc::clone(&latest.0),
            Err(poisoned) => Arc::clone(&poisoned.into_inner().0.0),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wake::Wake;

    /// A reader's ask wakes the loop, which builds the status; the reader gets that one,
    /// and a second reader right after shares it without asking.
    #[test]
    fn a_reader_asks_the_loop_and_gets_what_it_builds() {
        let wake = Wake::new().unwrap();
        let published = Arc::new(Published::on_demand("daemon", 0.1, wake.waker()));
        let reader = {
            let p = Arc::clone(&published);
            std::thread::spawn(move || p.fresh())
        };
        // The loop: woken by the ask, it builds the status.
        let woke = wake.wait(None, Duration::from_secs(10)).unwrap();
        assert_ne!(woke, crate::wake::Woken::Timeout, "the ask woke the loop");
        assert!(published.asked());
        assert!(!published.asked(), "one ask, taken once");
        let target = TargetStatus {
            pid: 42,
            ..TargetStatus::default()
        };
        published.set_targets(vec![target]);
        let got = reader.join().unwrap();
        assert_eq!(got.targets.len(), 1);
        assert_eq!(got.targets[0].pid, 42);
        assert!(
            Arc::ptr_eq(&published.fresh(), &got),
            "fresh: served as it is"
        );
        assert!(!published.asked());
    }

    /// A loop that never answers (frozen): the reader gets the latest after `ASK_WAIT`.
    #[test]
    fn a_reader_gets_the_latest_when_the_loop_does_not_answer() {
        let wake = Wake::new().unwrap();
        let published = Published::on_demand("daemon", 0.1, wake.waker());
        let t0 = Instant::now();
        let got = published.fresh();
        assert!(t0.elapsed() >= ASK_WAIT);
        assert!(got.targets.is_empty());
        assert_eq!(got.mode, "daemon");
    }

    /// Renewed on the loop's own schedule (the single run): served as it is, never asked.
    #[test]
    fn without_a_waker_the_latest_is_served_at_once() {
        let published = Published::new("single", 0.1);
        assert!(published.fresh().targets.is_empty());
        assert!(!published.asked());
    }
}
