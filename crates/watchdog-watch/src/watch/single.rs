//! One target on the loop of [`crate::schedule`]: `watchdog --pid`, `run`, and each
//! attempt of a `run --restart`. What is its own beside the service's: it samples its one
//! watch at every deadline, redraws the terminal's status line and publishes its status
//! (for `--metrics`) every `STATUS_EVERY` after a sample, and waits on the target's pidfd,
//! so its exit ends the loop at once.

use std::sync::Arc;
use std::time::Instant;

use super::lineage::Waiting;
use super::{Ended, STATUS_EVERY, Watch};
use crate::schedule::{self, Driven, Loop, Waited};
use crate::{Published, terminal};

/// The single-run mode as the loop sees it.
struct SingleRun<'a> {
    watch: &'a mut Watch,
    waiting: Waiting<'a>,
    published: Option<Arc<Published>>,
    show_status: bool,
    next_status: Instant,
}

/// Watches `watch` until its run ends (concluded: summary, exit event, recording) or the
/// watchdog is told to stop (the run left running); `published` receives its status.
pub(super) fn watch_one(
    watch: &mut Watch,
    waiting: Waiting<'_>,
    published: Option<Arc<Published>>,
) -> Ended {
    if published.is_some() {
        watch.label_from_proc();
    }
    let interval = watch.settings.interval;
    let show_status = terminal::status_wanted(&watch.settings);
    let mut single = SingleRun {
        watch,
        waiting,
        published,
        show_status,
        next_status: Instant::now() + STATUS_EVERY,
    };
    match schedule::drive(&mut single, interval) {
        Driven::Stopped(sig) => single.watch.stopped(sig),
        Driven::Over => {
            terminal::clear_status();
            Ended::Target(single.watch.conclude())
        }
    }
}

impl Loop for SingleRun<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn stop(&mut self) -> Option<i32> {
        self.waiting.stop_signal()
    }

    fn sample(&mut self, now: Instant) {
        self.watch.tick(now);
        self.watch.read_from_the_run(now);
    }

    fn after_sample(&mut self, now: Instant) {
        if now < self.next_status {
            return;
        }
        if self.show_status {
            terminal::draw_status(&self.watch.engine.status_line());
        }
        if let Some(published) = &self.published {
            published.set_targets(vec![self.watch.status(self.watch.clock.start_unix)]);
        }
        self.next_status = now + STATUS_EVERY;
    }

    fn late(&mut self, ticks: u64) {
        self.watch.count_late(ticks);
    }

    fn next_sample(&self) -> Option<Instant> {
        self.watch.next_sample_at()
    }

    /// Waits until `until`; while a SIGTERM is held (docs/notices.md), in short steps
    /// that look for the save's acknowledgment and the grace's end, whatever the interval.
    fn wait(&mut self, until: Instant) -> Waited {
        loop {
            let end = if self.watch.notice_pending() {
                until.min(Instant::now() + super::notice::HELD_CHECK_EVERY)
            } else {
                until
            };
            let timeout = end.saturating_duration_since(Instant::now());
            let waited = self.watch.wait_for_the_run(&self.waiting, timeout);
            self.watch.follow_notice();
            match waited {
                Waited::Deadline if Instant::now() < until && self.watch.notice_pending() => {}
                w => return w,
            }
        }
    }

    fn kernel_sample(&mut self, now: Instant) {
        self.watch.kernel_woke(now);
    }
}
