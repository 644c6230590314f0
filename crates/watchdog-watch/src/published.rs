//! The status the watch loop publishes for outside readers (the status socket, the
//! Prometheus endpoint): replaced whole every few ticks, read on the readers' own
//! schedule, so a slow scrape never holds up sampling.

use std::sync::{Arc, Mutex};

use watchdog_types::status::{TargetStatus, WatchStatus};

/// The latest [`WatchStatus`], shared between the loop and its readers.
#[derive(Debug, Default)]
pub struct Published {
    latest: Mutex<Arc<WatchStatus>>,
}

impl Published {
    /// An empty status for a watchdog in `mode` (`"single"` or `"daemon"`) sampling every
    /// `interval_s`.
    pub fn new(mode: &str, interval_s: f64) -> Published {
        Published {
            latest: Mutex::new(Arc::new(WatchStatus {
                watchdog_pid: std::process::id(),
                mode: mode.to_string(),
                interval_s,
                ..WatchStatus::default()
            })),
        }
    }

    /// Replaces the targets, stamping the time.
    pub fn set_targets(&self, targets: Vec<TargetStatus>) {
        let Ok(mut latest) = self.latest.lock() else {
            return;
        };
        let mut next = WatchStatus::clone(&latest);
        next.targets = targets;
        next.time_unix = watchdog_alerter::events::unix_time_s(std::time::SystemTime::now());
        *latest = Arc::new(next);
    }

    /// The latest status (a cheap shared copy).
    pub fn get(&self) -> Arc<WatchStatus> {
        match self.latest.lock() {
            Ok(latest) => Arc::clone(&latest),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}
