//! The courier: what carries an alert off the loop's thread. Hooks (`--on-alert`) run as
//! their own process groups, desktop notifications go through the action thread
//! ([`super::actions`]); each hook's end comes back as an outcome the watch records as a
//! `hook` event.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use watchdog_alerter::hook::{HookOutcome, HookUser, Hooks};

use super::actions::Actions;

/// Hooks and notifications of one watch, and the hooks' outcomes not recorded yet.
pub(super) struct Courier {
    /// The action thread's queue.
    pub(super) actions: Actions,
    /// The hooks, run as `user` when the service runs them for a user.
    pub(super) hooks: Hooks,
    /// Each finished hook's outcome.
    outcomes: Receiver<HookOutcome>,
    /// Outcomes taken off the channel while waiting, not recorded yet.
    held: Vec<HookOutcome>,
}

impl Courier {
    /// The courier `settings` ask for (no notification in a dry run); hooks run as `user`
    /// when given.
    pub(super) fn of(settings: &watchdog_config::Settings, user: Option<HookUser>) -> Courier {
        let notify = settings.notify && !settings.dry_run;
        Courier::new(settings.hook_timeout, notify, user)
    }

    /// A courier whose hooks may run `hook_timeout` each, as `user` when given, and which
    /// sends desktop notifications when `notify`.
    pub(super) fn new(hook_timeout: Duration, notify: bool, user: Option<HookUser>) -> Courier {
        let hooks = Hooks::with_user(hook_timeout, watchdog_alerter::hook::HOOK_GRACE, user);
        let (tx, outcomes) = std::sync::mpsc::channel();
        hooks.report_to(tx);
        Courier {
            actions: Actions::new(notify, hooks.clone()),
            hooks,
            outcomes,
            held: Vec::new(),
        }
    }

    /// The outcomes of the hooks that finished since the last call, oldest first.
    pub(super) fn finished(&mut self) -> Vec<HookOutcome> {
        let mut done = std::mem::take(&mut self.held);
        done.extend(self.outcomes.try_iter());
        done
    }

    /// Waits until no hook runs, `until` passes or `stopped` says so, whichever is first;
    /// woken by each hook's end (its outcome is held for [`finished`](Self::finished)),
    /// looking at `stopped` at least every `look_every`. A hook's outcome comes just before
    /// its process group is let go: what it left running is looked at every 20 ms.
    pub(super) fn wait_for_hooks(
        &mut self,
        until: Instant,
        look_every: Duration,
        mut stopped: impl FnMut() -> bool,
    ) {
        loop {
            let running = self.hooks.running();
            let now = Instant::now();
            if running.is_empty() || now >= until || stopped() {
                return;
            }
            let unreported = running
                .iter()
                .any(|&pid| !self.held.iter().any(|o| o.pid == pid));
            let wait = if unreported {
                look_every
            } else {
                look_every.min(LEFTOVERS_LOOKED_AT_EVERY)
            };
            match self.outcomes.recv_timeout((until - now).min(wait)) {
                Ok(outcome) => self.held.push(outcome),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// How often a hook that reported its end is looked at until its process group is gone.
const LEFTOVERS_LOOKED_AT_EVERY: Duration = Duration::from_millis(20);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn courier() -> Courier {
        Courier::new(Duration::from_secs(60), false, None)
    }

    #[test]
    fn a_hooks_end_wakes_the_wait_and_its_outcome_is_kept() {
        let mut courier = courier();
        courier
            .hooks
            .run("sleep 0.2", &[])
            .expect("the hook starts");
        let t = Instant::now();
        courier.wait_for_hooks(t + Duration::from_secs(20), Duration::from_secs(5), || {
            false
        });
        // Woken by the end, not by the 5 s look at the stop flag.
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        let done = courier.finished();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].cmd, "sleep 0.2");
        assert_eq!(done[0].code, Some(0));
        assert!(courier.finished().is_empty());
    }

    #[test]
    fn the_wait_ends_when_told_to_stop() {
        let mut courier = courier();
        courier.hooks.run("sleep 30", &[]).expect("the hook starts");
        let t = Instant::now();
        courier.wait_for_hooks(
            t + Duration::from_secs(60),
            Duration::from_millis(20),
            || t.elapsed() > Duration::from_millis(100),
        );
        assert!(t.elapsed() < Duration::from_secs(10));
        let ended = courier.hooks.end_all(|| {});
        assert_eq!(ended.len(), 1);
    }
}
