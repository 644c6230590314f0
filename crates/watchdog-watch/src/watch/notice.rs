//! SIGTERM to `watchdog run` is a notice: docker, Kubernetes, systemd and SLURM send it,
//! then SIGKILL after a grace. The signal thread holds the first SIGTERM
//! (`target::ForwardTo::notice`); the loop asks the run to save (a request of kind
//! `notice`, reason `terminating`, with the deadline) and passes SIGTERM on when the save
//! is acknowledged or `--term-grace` has passed, at once when no process of the run
//! catches the checkpoint signal. A second SIGTERM, SIGINT and SIGHUP are not held. See
//! docs/notices.md.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use watchdog_types::units::format_duration_s;
use watchdog_types::{AlertReason, EventBody};

use super::Watch;

/// How often acknowledgments are looked for while a SIGTERM is held.
pub(super) const HELD_CHECK_EVERY: Duration = Duration::from_millis(20);

/// A SIGTERM being held while the run saves.
#[derive(Debug, Clone)]
pub(super) struct Notice {
    /// When it is passed on whatever happens.
    deadline: Instant,
    deadline_unix: f64,
    /// The request asking for the save (`None`: nobody could be asked).
    seq: Option<u64>,
    /// Whether SIGTERM was passed on.
    done: bool,
}

impl Watch {
    /// Whether a SIGTERM is held, or has just come and waits to be taken.
    pub(super) fn notice_pending(&self) -> bool {
        match (&self.term_notice, &self.notice) {
            (_, Some(n)) => !n.done,
            (Some(cell), None) => cell.load(Ordering::Relaxed) != 0,
            (None, None) => false,
        }
    }

    /// Takes a SIGTERM that came (asks for the save), and passes it on once the save is
    /// acknowledged or the grace is over.
    pub(super) fn follow_notice(&mut self) {
        let Some(cell) = &self.term_notice else {
            return;
        };
        let at_ms = cell.load(Ordering::Relaxed);
        if at_ms == 0 {
            return;
        }
        if self.notice.is_none() {
            self.take_notice(at_ms);
        }
        let Some(n) = self.notice.clone() else { return };
        if n.done {
            return;
        }
        self.check_ack();
        self.check_checkpoints();
        let saved = n.seq.is_some_and(|seq| self.acks.seq >= seq);
        if saved || Instant::now() >= n.deadline || self.target_exit.is_some() {
            self.pass_on_sigterm(saved);
        }
    }

    /// Asks the run to save before `at_ms` + the grace.
    fn take_notice(&mut self, at_ms: u64) {
        let grace = self.settings.term_grace;
        let now = SystemTime::now();
        let now_unix = watchdog_alerter::events::unix_time_s(now);
        let deadline_unix = at_ms as f64 / 1e3 + grace.as_secs_f64();
        let left = Duration::from_secs_f64((deadline_unix - now_unix).max(0.0));
        let (count, total_s) = self.engine.checkpoints();
        if count > 0 && total_s / count as f64 > grace.as_secs_f64() {
            tracing::warn!(
                "saving took {} on average here, longer than the {} SIGTERM grace: the save may not finish; give the platform a longer grace (docker stop --time, terminationGracePeriodSeconds, SLURM's --signal=B:USR1@...) and a longer --term-grace, or save less",
                format_duration_s(total_s / count as f64),
                format_duration_s(grace.as_secs_f64())
            );
        }
        let plan = self
            .engine
            .notice(AlertReason::Terminating, deadline_unix, now_unix);
        let seq = plan.request.seq;
        let signalled = self.act(plan);
        self.notice = Some(Notice {
            deadline: Instant::now() + left,
            deadline_unix,
            seq: (!signalled.is_empty()).then_some(seq),
            done: false,
        });
        if signalled.is_empty() {
            tracing::info!(
                "no process of the run catches {}: passing SIGTERM on at once",
                watchdog_types::units::signal_name(self.settings.signal)
            );
            self.pass_on_sigterm(false);
        }
    }

    /// Sends the held SIGTERM to the run (or, its command gone, to what it left running)
    /// and says whether the save came first.
    fn pass_on_sigterm(&mut self, saved: bool) {
        let Some(n) = &mut self.notice else { return };
        n.done = true;
        let (deadline_unix, seq) = (n.deadline_unix, n.seq);
        match self.target.pidfd.send_signal(libc::SIGTERM) {
            Ok(()) => tracing::info!(
                "forwarded SIGTERM to PID {} {}",
                self.target.pid,
                if saved {
                    "after the run acknowledged its save"
                } else if seq.is_some() {
                    "at the end of the grace, the save not acknowledged"
                } else {
                    "(nothing to save)"
                }
            ),
            Err(e) if e.is_gone() => {
                if let Some(flag) = &self.unforwarded {
                    flag.store(libc::SIGTERM as usize, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::warn!("cannot forward SIGTERM: {e}"),
        }
        self.emit(EventBody::Notice {
            source: "sigterm".into(),
            deadline_unix,
            saved: Some(saved),
            seq,
        });
    }
}
