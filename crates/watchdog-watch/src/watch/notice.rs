//! Announced ends, each a save. SIGTERM to `watchdog run` is a notice: docker, Kubernetes, systemd and SLURM send it,
//! then SIGKILL after a grace. The signal thread holds the first SIGTERM
//! (`target::ForwardTo::notice`); the loop asks the run to save (a request of kind
//! `notice`, reason `terminating`, with the deadline) and passes SIGTERM on when the save
//! is acknowledged or `--term-grace` has passed, at once when no process of the run
//! catches the checkpoint signal. A second SIGTERM, SIGINT and SIGHUP are not held. A
//! cloud's preemption notice (`watchdog_notice`, polled on its own thread) asks for the
//! save at once with the provider's deadline, and makes the verdict `preempted`. See
//! docs/notices.md.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use watchdog_config::Settings;
use watchdog_engine::verdict::SchedulerEnd;
use watchdog_notice::{Mode, News, NoticePoller, NoticeSettings};
use watchdog_types::units::format_duration_s;
use watchdog_types::{AlertReason, EventBody, VerdictKind};

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

/// A cloud's preemption notice, taken.
#[derive(Debug, Clone)]
pub(super) struct Preemption {
    provider: &'static str,
    deadline_unix: f64,
    detail: String,
    /// The request asking for the save.
    seq: u64,
    /// Whether its save was said (acknowledged, or at the end, not).
    saved: bool,
}

/// A watch's announced ends: the SIGTERM cell `run`'s signal thread sets, the notice
/// taken from it, the cloud's poller and the preemption it announced.
#[derive(Default)]
pub(super) struct Notices {
    /// When `run` received the first SIGTERM, unix milliseconds (0: not yet), when SIGTERM
    /// is a notice (`--term-grace`).
    pub(super) term: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// The notice taken from it: the save asked, SIGTERM held until it is acknowledged.
    pub(super) notice: Option<Notice>,
    /// The cloud's preemption notice, polled (`run` and `--pid`).
    pub(super) cloud: Option<NoticePoller>,
    /// The preemption it announced, once it did.
    pub(super) preemption: Option<Preemption>,
    /// Whether saves longer than the SIGTERM grace were said.
    pub(super) grace_said: bool,
}

impl Notices {
    /// Whether a SIGTERM is held, or has just come and waits to be taken.
    pub(super) fn pending(&self) -> bool {
        match (&self.term, &self.notice) {
            (_, Some(n)) => !n.done,
            (Some(cell), None) => cell.load(Ordering::Relaxed) != 0,
            (None, None) => false,
        }
    }

    /// Whether an end was announced whose save a checkpoint acknowledgment answers.
    pub(super) fn any(&self) -> bool {
        self.notice.is_some() || self.preemption.is_some()
    }
}

/// The poller of the cloud's notice `settings` ask for (`None`: off, or no provider).
pub(super) fn cloud_poller(settings: &Settings) -> Option<NoticePoller> {
    let mode = settings.notice.parse::<Mode>().ok()?;
    NoticeSettings {
        mode,
        endpoint: settings.notice_endpoint.clone(),
        interval: settings.notice_interval,
    }
    .start(&settings.host.dmi_root)
}

impl Watch {
    /// Takes the cloud's news: a preemption notice asks the run to save at once.
    pub(super) fn follow_cloud(&mut self) {
        let Some(poller) = &self.notices.cloud else {
            return;
        };
        let provider = poller.provider().as_str();
        for news in poller.news() {
            match news {
                News::Notice {
                    deadline_unix,
                    detail,
                    ..
                } if self.notices.preemption.is_none() => {
                    self.take_preemption(provider, deadline_unix, detail)
                }
                News::Notice { .. } => {}
                News::Unanswered(reason) => {
                    tracing::warn!("{}", watchdog_types::units::printable(&reason));
                    self.emit(EventBody::Unwatched {
                        resource: "notice".into(),
                        reason,
                    });
                }
                News::Answered => self.emit(EventBody::Resumed {
                    resource: "notice".into(),
                }),
            }
        }
        self.note_preemption_saved();
    }

    /// At the run's end: whether the preemption's save was acknowledged (read now, the run
    /// may have exited right after it) or not, said once, as for a held SIGTERM.
    pub(super) fn conclude_preemption(&mut self) {
        self.note_preemption_saved();
        if self.notices.preemption.as_ref().is_some_and(|p| !p.saved) {
            self.say_preemption_save(false);
        }
    }

    /// Says that the preemption's save was acknowledged, once: at the tick that reads the
    /// acknowledgment, or at the run's end.
    fn note_preemption_saved(&mut self) {
        let acked = self.replies.acks.seq;
        if self
            .notices
            .preemption
            .as_ref()
            .is_some_and(|p| !p.saved && acked >= p.seq)
        {
            if let Some(book) = &mut self.series.record {
                book.set_verdict(VerdictKind::Preempted.as_str());
            }
            self.say_preemption_save(true);
        }
    }

    /// The preemption's second `notice` event, its `saved` whether the acknowledgment
    /// came (`acknowledged`) before the provider's deadline; marks it said.
    fn say_preemption_save(&mut self, acknowledged: bool) {
        let Some(p) = &mut self.notices.preemption else {
            return;
        };
        p.saved = true;
        let (provider, deadline_unix, seq) = (p.provider, p.deadline_unix, p.seq);
        let in_time = watchdog_alerter::events::unix_time_s(SystemTime::now()) <= deadline_unix;
        self.emit(EventBody::Notice {
            source: provider.into(),
            deadline_unix,
            saved: Some(acknowledged && in_time),
            seq: Some(seq),
        });
    }

    /// Asks the run to save before the provider's deadline, and says so.
    fn take_preemption(&mut self, provider: &'static str, deadline_unix: f64, detail: String) {
        let now_unix = watchdog_alerter::events::unix_time_s(SystemTime::now());
        tracing::warn!(
            "{}",
            watchdog_types::units::printable(&format!(
                "{provider} announced the machine's preemption ({detail}): it ends in {}",
                format_duration_s((deadline_unix - now_unix).max(0.0))
            ))
        );
        self.check_save_fits(deadline_unix - now_unix, "the provider's notice");
        let plan = self
            .engine
            .notice(AlertReason::Preemption, deadline_unix, now_unix);
        let seq = plan.request.seq;
        let _ = self.act(plan);
        self.notices.preemption = Some(Preemption {
            provider,
            deadline_unix,
            detail,
            seq,
            saved: false,
        });
        // The machine may be gone before the exit is seen: the verdict is written now.
        if let Some(book) = &mut self.series.record {
            book.set_verdict(VerdictKind::Preempted.as_str());
        }
        self.emit(EventBody::Notice {
            source: provider.into(),
            deadline_unix,
            saved: None,
            seq: Some(seq),
        });
    }

    /// The verdict's evidence of a preemption the provider announced.
    pub(super) fn preempted(&self) -> Option<SchedulerEnd> {
        let p = self.notices.preemption.as_ref()?;
        Some(SchedulerEnd {
            kind: VerdictKind::Preempted,
            said: format!(
                "{} announced the machine's preemption ({}), the end due at unix time {:.0}",
                p.provider,
                watchdog_types::units::printable(&p.detail),
                p.deadline_unix
            ),
            announced: true,
        })
    }

    /// Says once, ahead of any notice, when the saves so far take longer on average than
    /// the SIGTERM grace (`--term-grace`): the notice's save would not fit.
    pub(super) fn say_if_saves_outlast_the_grace(&mut self) {
        if self.notices.grace_said || self.notices.term.is_none() {
            return;
        }
        let grace = self.settings.term_grace.as_secs_f64();
        let (count, total_s) = self.engine.checkpoints();
        if count > 0 && total_s / count as f64 > grace {
            self.notices.grace_said = true;
            self.check_save_fits(grace, "SIGTERM grace (--term-grace)");
        }
    }

    /// Says when the saves so far took longer than the time an announced end leaves.
    fn check_save_fits(&self, left_s: f64, what: &str) {
        let (count, total_s) = self.engine.checkpoints();
        if count > 0 && total_s / count as f64 > left_s {
            tracing::warn!(
                "saving took {} on average here, longer than the {} {what} leaves: the save may not finish; give the platform a longer grace (docker stop --time, terminationGracePeriodSeconds, SLURM's --signal=B:USR1@...) and a longer --term-grace, or save less",
                format_duration_s(total_s / count as f64),
                format_duration_s(left_s.max(0.0))
            );
        }
    }

    /// Whether a SIGTERM is held, or has just come and waits to be taken.
    pub(super) fn notice_pending(&self) -> bool {
        self.notices.pending()
    }

    /// Takes a SIGTERM that came (asks for the save), and passes it on once the save is
    /// acknowledged or the grace is over.
    pub(super) fn follow_notice(&mut self) {
        let Some(cell) = &self.notices.term else {
            return;
        };
        let at_ms = cell.load(Ordering::Relaxed);
        if at_ms == 0 {
            return;
        }
        if self.notices.notice.is_none() {
            self.take_notice(at_ms);
        }
        let Some(n) = self.notices.notice.clone() else {
            return;
        };
        if n.done {
            return;
        }
        self.check_ack();
        self.check_checkpoints();
        let saved = n.seq.is_some_and(|seq| self.replies.acks.seq >= seq);
        if saved || Instant::now() >= n.deadline || self.run.exit.is_some() {
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
        self.check_save_fits(grace.as_secs_f64(), "SIGTERM grace (--term-grace)");
        let plan = self
            .engine
            .notice(AlertReason::Terminating, deadline_unix, now_unix);
        let seq = plan.request.seq;
        let signalled = self.act(plan);
        self.notices.notice = Some(Notice {
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
        let Some(n) = &mut self.notices.notice else {
            return;
        };
        n.done = true;
        let (deadline_unix, seq) = (n.deadline_unix, n.seq);
        match self.run.target.pidfd.send_signal(libc::SIGTERM) {
            Ok(()) => tracing::info!(
                "forwarded SIGTERM to PID {} {}",
                self.run.target.pid,
                if saved {
                    "after the run acknowledged its save"
                } else if seq.is_some() {
                    "at the end of the grace, the save not acknowledged"
                } else {
                    "(nothing to save)"
                }
            ),
            Err(e) if e.is_gone() => {
                if let Some(flag) = &self.run.unforwarded {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_sigterm_is_pending_from_its_arrival_until_it_is_passed_on() {
        let mut notices = Notices::default();
        assert!(!notices.pending(), "SIGTERM is not a notice here");
        let cell = Arc::new(AtomicU64::new(0));
        notices.term = Some(cell.clone());
        assert!(!notices.pending(), "no SIGTERM came");
        cell.store(1_700_000_000_000, Ordering::Relaxed);
        assert!(notices.pending(), "came, not taken yet");
        notices.notice = Some(Notice {
            deadline: Instant::now(),
            deadline_unix: 0.0,
            seq: Some(1),
            done: false,
        });
        assert!(notices.pending() && notices.any(), "held for the save");
        if let Some(n) = &mut notices.notice {
            n.done = true;
        }
        assert!(!notices.pending(), "passed on");
    }
}
