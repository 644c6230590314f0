//! A run inside a SLURM job: the job's end, asked of the controller, as the runtime limit
//! (moved when the controller moves it), the check before acting on it, the requeue after
//! the save before it ([`requeue_decision`], pure), and the controller's word on how the
//! job ended, for the verdict. See docs/slurm.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use watchdog_engine::verdict::SchedulerEnd;
use watchdog_sampler::runtime::{Runtime, human_duration};
use watchdog_sampler::{ResourceTable, Source};
use watchdog_slurm::{Controller, EndPoller, Job, JobEnd, News};
use watchdog_types::{EventBody, ResourceId, VerdictKind};

use super::Watch;
use super::restart::step_tolerance;

/// How long a command to the controller may take.
pub const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(10);
/// An end older than this is asked again before a requeue acts on it.
pub const FRESH: Duration = Duration::from_secs(10);
/// Where the service runs `squeue` from, by absolute path.
pub const SERVICE_BIN_DIR: &str = "/usr/bin";
/// How long the start waits for the controller's first answer.
const FIRST_ANSWER: Duration = Duration::from_secs(2);
/// Near the end the controller is asked this often (the window: the lead plus this).
const NEAR_END_ASK_EVERY: Duration = Duration::from_secs(5);

/// Whether this watchdog requeued its job (once per allocation, whatever the attempts).
static REQUEUED: AtomicBool = AtomicBool::new(false);

/// The job's end for the runtime source, kept fresh by the controller.
pub(super) struct SlurmEnd {
    pub(super) job: Job,
    pub(super) poller: EndPoller,
    pub(super) end_ms: Arc<AtomicU64>,
    pub(super) runtime: ResourceId,
}

/// `slurm controller: EndTime=2026-11-28T11:45:00Z`, or what is known instead.
fn source_text(job: u64, end: Option<Option<u64>>) -> String {
    match end {
        Some(Some(secs)) => {
            let at = jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(i64::MAX))
                .map_or_else(|_| secs.to_string(), |t| t.to_string());
            format!("slurm controller: EndTime={at}")
        }
        Some(None) => format!("slurm controller: job {job} has no time limit"),
        None => format!("slurm controller: job {job}, no answer yet"),
    }
}

/// Opens the runtime source of a job whose environment has no end: asks the controller
/// (waiting up to two seconds for its first answer) and follows its answers.
pub(super) fn runtime_source(
    job: Job,
    target_start: SystemTime,
    poll: Duration,
    service: bool,
    table: &mut ResourceTable,
) -> (Box<dyn Source>, SlurmEnd) {
    let poller = EndPoller::start(controller(service, CONTROLLER_TIMEOUT), job.id, poll);
    // The service's loop never waits for the controller.
    let waited = Instant::now();
    while !service && poller.latest().is_none() && waited.elapsed() < FIRST_ANSWER {
        std::thread::sleep(Duration::from_millis(10));
    }
    let end = poller.latest().map(|r| r.view.end_unix);
    let end_ms = Arc::new(AtomicU64::new(
        end.flatten().map_or(u64::MAX, |s| s.saturating_mul(1000)),
    ));
    let source = Runtime::until(
        target_start,
        end_ms.clone(),
        source_text(job.id, end),
        table,
    );
    let runtime = source.id();
    (
        Box::new(source),
        SlurmEnd {
            job,
            poller,
            end_ms,
            runtime,
        },
    )
}

/// What the requeue looks at once the save before the end was acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct RequeueFacts {
    /// Seconds from now to the job's end, as last read; `None`: unknown.
    pub end_in_s: Option<f64>,
    /// The lead in force (with the learned save time).
    pub lead_s: f64,
    /// Whether that end was read within [`FRESH`].
    pub fresh: bool,
    /// Whether this task leads the job (`SLURM_PROCID` 0).
    pub leads: bool,
    /// Whether the job was requeued in this allocation already.
    pub requeued: bool,
    /// `SLURM_RESTART_COUNT`.
    pub restart_count: u32,
    /// The step this allocation resumed from, when it resumed from one.
    pub resumed_step: Option<u64>,
    /// The highest step acknowledged in this allocation.
    pub acked_step: Option<u64>,
}

/// Whether to requeue now: `Ok`, or why not (`Err`, a sentence for the summary; `None`:
/// not yet, nothing to say). Pure.
pub fn requeue_decision(f: &RequeueFacts) -> Result<(), Option<String>> {
    if f.requeued || !f.leads {
        return Err(None);
    }
    if !f.fresh {
        return Err(None);
    }
    match f.end_in_s {
        Some(left) if left <= f.lead_s + NEAR_END_ASK_EVERY.as_secs_f64() => {}
        _ => return Err(None),
    }
    if let Some(from) = f.resumed_step {
        let beyond = from + step_tolerance(from);
        if f.acked_step.is_none_or(|s| s <= beyond) {
            return Err(Some(format!(
                "not requeued: no progress since requeue {} (resumed at step {from}, acknowledged {}; a requeue needs more than max(10 steps, 1%) past it)",
                f.restart_count,
                f.acked_step
                    .map_or("no step".to_string(), |s| format!("up to step {s}"))
            )));
        }
    }
    Ok(())
}

/// The SLURM side of one watch.
pub(super) struct SlurmRun {
    job: Job,
    /// The job's end from the controller (`None`: `SLURM_JOB_END_TIME` was in the
    /// environment, or another limit wins).
    end: Option<SlurmEnd>,
    /// `--requeue`, allowed here.
    requeue: bool,
    /// The step this allocation resumed from.
    resumed_step: Option<u64>,
    /// The runtime request's `seq`, once one was sent.
    asked: Option<u64>,
    /// The acknowledgment of it: its checkpoint and step.
    saved: Option<(Option<String>, Option<u64>)>,
    /// The highest step acknowledged in this allocation.
    acked_step: Option<u64>,
    /// When the controller was last nudged near the end.
    nudged: Option<Instant>,
    /// Why no requeue, said once.
    said: bool,
}

impl SlurmRun {
    /// The SLURM side of a watch of `job`.
    pub(super) fn new(job: Job, end: Option<SlurmEnd>, requeue: bool) -> SlurmRun {
        SlurmRun {
            job,
            end,
            requeue,
            resumed_step: None,
            asked: None,
            saved: None,
            acked_step: None,
            nudged: None,
            said: false,
        }
    }

    /// Turns `--requeue` on or off.
    pub(super) fn set_requeue(&mut self, on: bool) {
        self.requeue = on;
    }

    /// The step the allocation resumed from (for the progress rule).
    pub(super) fn resumed_from(&mut self, step: Option<u64>) {
        self.resumed_step = step;
    }
}

impl Watch {
    /// Takes the controller's news (a moved end, a controller that stopped or started
    /// answering) and, near the end, asks it again so the end acted on is fresh.
    pub(super) fn follow_slurm(&mut self) {
        let Some(end) = self.series.slurm.as_mut().and_then(|s| s.end.as_mut()) else {
            return;
        };
        let news = end.poller.news();
        let (job, runtime, cell) = (end.job.id, end.runtime, end.end_ms.clone());
        let poll = self.settings.slurm_poll;
        for n in news {
            match n {
                News::End(e) => {
                    self.engine.describe(runtime, source_text(job, Some(e)));
                    cell.store(
                        e.map_or(u64::MAX, |s| s.saturating_mul(1000)),
                        Ordering::Relaxed,
                    );
                }
                News::Unanswered(why) => {
                    let reason = format!(
                        "the SLURM controller did not answer for job {job}: {why}; asked again every {}",
                        human_duration(poll)
                    );
                    tracing::warn!("{}", watchdog_types::units::printable(&reason));
                    self.emit(EventBody::Unwatched {
                        resource: "runtime".into(),
                        reason,
                    });
                }
                News::Answered => self.emit(EventBody::Resumed {
                    resource: "runtime".into(),
                }),
            }
        }
        let lead_s = self.engine.lead_s();
        let Some(s) = self.series.slurm.as_mut() else {
            return;
        };
        let Some(end) = s.end.as_ref() else { return };
        let left = end_in_s(end.end_ms.load(Ordering::Relaxed));
        let near = left.is_some_and(|l| l <= lead_s + 3.0 * NEAR_END_ASK_EVERY.as_secs_f64());
        let stale = end
            .poller
            .latest()
            .is_none_or(|r| r.at.elapsed() >= NEAR_END_ASK_EVERY);
        if near && stale && s.nudged.is_none_or(|t| t.elapsed() >= NEAR_END_ASK_EVERY) {
            end.poller.nudge();
            s.nudged = Some(Instant::now());
        }
    }

    /// A runtime request `seq` went out.
    pub(super) fn slurm_asked(&mut self, seq: u64) {
        if let Some(s) = &mut self.series.slurm {
            s.asked = Some(seq);
        }
    }

    /// An acknowledgment came: of the runtime request (or a later one), it may requeue.
    pub(super) fn slurm_acknowledged(&mut self, seq: u64, path: Option<String>, step: Option<u64>) {
        let Some(s) = &mut self.series.slurm else {
            return;
        };
        if let Some(step) = step {
            s.acked_step = Some(s.acked_step.map_or(step, |a| a.max(step)));
        }
        if s.asked.is_some_and(|asked| seq >= asked) {
            s.saved = Some((path, step));
        }
    }

    /// Requeues the job once its save before the end was acknowledged and the end, read
    /// again, is still that near (see [`requeue_decision`]).
    pub(super) fn maybe_requeue(&mut self) {
        let lead_s = self.engine.lead_s();
        let Some(s) = &mut self.series.slurm else {
            return;
        };
        if !s.requeue || s.saved.is_none() || self.settings.dry_run {
            return;
        }
        let (end_in, fresh) = match &s.end {
            Some(end) => match end.poller.fresh_within(FRESH) {
                Ok(r) => (
                    r.view
                        .end_unix
                        .and_then(|e| end_in_s(e.saturating_mul(1000))),
                    true,
                ),
                Err(_) => (None, false),
            },
            None => (
                s.job
                    .end_time
                    .and_then(|e| end_in_s(e.saturating_mul(1000))),
                true,
            ),
        };
        let facts = RequeueFacts {
            end_in_s: end_in,
            lead_s,
            fresh,
            leads: s.job.leads(),
            requeued: REQUEUED.load(Ordering::Relaxed),
            restart_count: s.job.restart_count,
            resumed_step: s.resumed_step,
            acked_step: s.acked_step,
        };
        match requeue_decision(&facts) {
            Err(None) => {}
            Err(Some(why)) => {
                if !s.said {
                    s.said = true;
                    crate::terminal::summary(&format!("watchdog: {why}"));
                }
            }
            Ok(()) => {
                REQUEUED.store(true, Ordering::Relaxed);
                let (path, step) = s.saved.clone().unwrap_or_default();
                let (job_id, restart_count) = (s.job.id, s.job.restart_count);
                self.emit(EventBody::Requeue {
                    job_id,
                    restart_count,
                    path,
                    step,
                });
                if let Some(log) = &self.out.events {
                    let _ = log.sync();
                }
                if let Some(book) = &mut self.series.record {
                    book.set_verdict(VerdictKind::RuntimeLimit.as_str());
                }
                match Controller::of_user(CONTROLLER_TIMEOUT).requeue(job_id) {
                    Ok(()) => tracing::info!(
                        "requeued job {job_id} after the save before its end (restart {})",
                        restart_count + 1
                    ),
                    Err(e) => tracing::warn!(
                        "{}",
                        watchdog_types::units::printable(&format!(
                            "cannot requeue job {job_id}: {e}"
                        ))
                    ),
                }
            }
        }
    }

    /// How the controller says the job ended, for the verdict of a run that did not exit
    /// on its own: its state now, or the requeue this watchdog made.
    pub(super) fn scheduler_end(&self) -> Option<SchedulerEnd> {
        let s = self.series.slurm.as_ref()?;
        if REQUEUED.load(Ordering::Relaxed) {
            return Some(SchedulerEnd {
                kind: VerdictKind::RuntimeLimit,
                said: format!(
                    "the watchdog requeued job {} after the save before its time limit",
                    s.job.id
                ),
                announced: false,
            });
        }
        let service = self.run.label.slurm.is_some();
        let facts = controller(service, Duration::from_secs(3))
            .facts(s.job.id)
            .ok()?;
        if facts.requeued(s.job.restart_count) {
            // By another task's watchdog, a framework or a person: the time limit's doing
            // only when it was that near.
            let left = s
                .end
                .as_ref()
                .and_then(|e| end_in_s(e.end_ms.load(Ordering::Relaxed)))?;
            return (left <= self.engine.lead_s() + 60.0).then(|| SchedulerEnd {
                kind: VerdictKind::RuntimeLimit,
                said: format!(
                    "job {} was requeued (Restarts={}) {} before its time limit",
                    s.job.id,
                    facts.restarts.unwrap_or_default(),
                    watchdog_types::units::format_duration_s(left.max(0.0))
                ),
                announced: false,
            });
        }
        let kind = match facts.ending(s.job.restart_count)? {
            JobEnd::TimeLimit => VerdictKind::RuntimeLimit,
            JobEnd::Cancelled => VerdictKind::Cancelled,
            JobEnd::Preempted => VerdictKind::Preempted,
        };
        Some(SchedulerEnd {
            kind,
            said: format!(
                "the SLURM controller reports job {} JobState={} Reason={} as it ends",
                s.job.id,
                facts.state.as_deref().unwrap_or("?"),
                facts.reason.as_deref().unwrap_or("?")
            ),
            announced: false,
        })
    }
}

/// The controller as a watch asks it: the service's commands by absolute path with an
/// empty environment, or the user's.
fn controller(service: bool, timeout: Duration) -> Controller {
    if service {
        Controller::in_dir(std::path::Path::new(SERVICE_BIN_DIR), timeout)
    } else {
        Controller::of_user(timeout)
    }
}

/// Seconds from now to `end_ms` (unix milliseconds, `u64::MAX`: none).
fn end_in_s(end_ms: u64) -> Option<f64> {
    if end_ms == u64::MAX {
        return None;
    }
    Some(end_ms as f64 / 1e3 - watchdog_alerter::events::unix_time_s(SystemTime::now()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn facts() -> RequeueFacts {
        RequeueFacts {
            end_in_s: Some(20.0),
            lead_s: 30.0,
            fresh: true,
            leads: true,
            requeued: false,
            restart_count: 0,
            resumed_step: None,
            acked_step: Some(40),
        }
    }

    #[test]
    fn requeue_table() {
        let ok = facts();
        assert_eq!(requeue_decision(&ok), Ok(()));
        let cases: Vec<(&str, RequeueFacts, bool)> = vec![
            (
                "not rank 0",
                RequeueFacts {
                    leads: false,
                    ..facts()
                },
                false,
            ),
            (
                "twice in an allocation",
                RequeueFacts {
                    requeued: true,
                    ..facts()
                },
                false,
            ),
            (
                "end not read lately",
                RequeueFacts {
                    fresh: false,
                    ..facts()
                },
                false,
            ),
            (
                "end far",
                RequeueFacts {
                    end_in_s: Some(600.0),
                    ..facts()
                },
                false,
            ),
            (
                "no end",
                RequeueFacts {
                    end_in_s: None,
                    ..facts()
                },
                false,
            ),
            (
                "past the end",
                RequeueFacts {
                    end_in_s: Some(-3.0),
                    ..facts()
                },
                true,
            ),
            (
                "progress after a requeue",
                RequeueFacts {
                    restart_count: 1,
                    resumed_step: Some(40),
                    acked_step: Some(80),
                    ..facts()
                },
                true,
            ),
        ];
        for (what, f, want) in cases {
            assert_eq!(requeue_decision(&f).is_ok(), want, "{what}");
        }
    }

    #[test]
    fn no_progress_since_a_requeue_is_said() {
        let f = RequeueFacts {
            restart_count: 2,
            resumed_step: Some(40),
            acked_step: Some(45),
            ..facts()
        };
        let why = requeue_decision(&f).unwrap_err().unwrap_or_default();
        assert!(
            why.starts_with("not requeued: no progress since requeue 2"),
            "{why}"
        );
        let none = RequeueFacts {
            acked_step: None,
            ..f
        };
        assert!(requeue_decision(&none).is_err());
    }

    #[test]
    fn the_limit_source_names_the_controllers_end() {
        assert_eq!(
            source_text(7, Some(Some(1_795_864_321))),
            "slurm controller: EndTime=2026-11-28T11:12:01Z"
        );
        assert!(source_text(7, Some(None)).contains("no time limit"));
    }
}
