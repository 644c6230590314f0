//! The life of a `watchdog run --restart N`, in named phases: [`Restarts::plan`] checks
//! every attempt's outputs before the first starts; then, per attempt,
//! [`Restarts::start_attempt`] clears what the last one left and starts the command,
//! [`Restarts::judge`] turns the ended watch into an [`Attempt`], [`Restarts::decide`]
//! applies the policy (and the space a full disk needs, and the job's end), and
//! [`Restarts::prepare_restart`] says what the next attempt is told. The decisions
//! themselves are `restart`'s, pure and table-tested.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use watchdog_alerter::request::RequestPlace;
use watchdog_config::Settings;
use watchdog_types::{EventBody, VerdictKind};

use super::record::RunStart;
use super::restart::{
    Attempt, Attempting, Checkpoint, HOUR, Ledger, MAX_PLANNED, Next, Policy, attempt_recording,
    attempts_table, decide, space_back, steps_reached,
};
use super::{Ended, Session, Watch};
use crate::outputs::{self, Outputs};
use crate::target::TargetExit;
use crate::{Failure, Published, terminal};

/// `watchdog run --restart N -- CMD`: attempts until one succeeds or no restart is due.
pub(super) fn run(
    argv: &[std::ffi::OsString],
    settings: Settings,
    published: Option<Arc<Published>>,
) -> Result<ExitCode, Failure> {
    let mut restarts = Restarts::plan(settings)?;
    loop {
        if let Some(code) = restarts.stopped_between_attempts() {
            return Ok(code);
        }
        let mut watch = restarts.start_attempt(argv)?;
        // Each attempt runs on the same loop as a single run.
        let ended =
            super::single::watch_one(&mut watch, restarts.session.waiting(), published.clone());
        let exit = match ended {
            Ended::Target(exit) => exit,
            Ended::Stopped(sig) => return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
        };
        restarts.judge(watch, exit);
        match restarts.decide() {
            Next::Restart => restarts.prepare_restart(),
            Next::Stop(why) => return Ok(restarts.stop(why, exit)),
        }
    }
}

/// What a `run --restart` keeps from one attempt to the next.
struct Restarts {
    settings: Settings,
    policy: Policy,
    session: Session,
    /// The run's start: its record, a requeue's resume, the job's end.
    start: RunStart,
    /// The watchdog's working directory (the command's), if it still exists.
    cwd: Option<PathBuf>,
    /// The recordings' `run_id`.
    id: String,
    first_start: Instant,
    /// Every checkpoint the attempts acknowledged.
    ledger: Ledger,
    attempts: Vec<Attempt>,
    /// When each restart of the last hour was made.
    restarts: Vec<Instant>,
    /// What the next attempt is told besides the watchdog's own variables.
    env: Vec<(String, String)>,
    /// The checkpoint the next attempt resumes from.
    resume: Option<Checkpoint>,
    /// What the last attempt left at the watchdog's own paths (its request, acknowledgment
    /// and step reports): removed, never followed, before the next attempt's are checked.
    left_behind: Option<RequestPlace>,
    /// What the last attempt needed before the job's end to be worth another: its lead
    /// with the learned save time, and its time to the first step, in seconds.
    needs_s: f64,
}

/// Clears what attempt `attempt` left at one of the watchdog's own paths: a file, a
/// symlink or a FIFO is removed (never followed); a directory is moved aside to
/// `<name>.left-by-attempt<N>`, whole, so that nothing the run made is lost and the next
/// attempt's outputs can still be checked.
fn clear_left_behind(place: &RequestPlace, attempt: u32) {
    let shown = |p: &RequestPlace| watchdog_types::quote::quote_path(&p.path());
    let Err(e) = place.remove() else {
        return;
    };
    let is_dir = std::fs::symlink_metadata(place.path()).is_ok_and(|m| m.is_dir());
    if !is_dir {
        tracing::warn!("cannot remove {}: {e}", shown(place));
        return;
    }
    match place.rename_to_sibling(&format!(".left-by-attempt{attempt}")) {
        Ok(Some(aside)) => tracing::warn!(
            "attempt {attempt} left a directory at {}: moved aside to {}",
            shown(place),
            shown(&aside)
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!("cannot move {} aside: {e}", shown(place)),
    }
}

impl Restarts {
    /// Phase 1: the run's start announced, and every attempt's outputs checked before the
    /// first starts (a user's own file at an attempt's recording is refused now, not after
    /// attempt 1 ran).
    fn plan(settings: Settings) -> Result<Restarts, Failure> {
        let own = std::process::id();
        let cwd = outputs::live_cwd(&settings.host, own);
        let session = Session::open()?;
        let start = RunStart::new(&settings, cwd.as_deref());
        start.announce();
        start.check_requeue(settings.requeue);
        for n in 2..=settings.restart.saturating_add(1).min(MAX_PLANNED) {
            if let Some(rec) = &settings.record {
                let mut later = settings.clone();
                later.record = Some(attempt_recording(rec, n));
                Outputs::plan(&later, own, cwd.as_deref())?;
            }
        }
        // After a requeue, the first attempt resumes from the record's checkpoint.
        let resume = start.resume.as_ref().map(Checkpoint::from_record);
        Ok(Restarts {
            policy: Policy {
                restart: settings.restart,
                restart_on: settings.restart_on.clone(),
                per_hour: settings.restart_per_hour,
            },
            env: start.env(),
            settings,
            session,
            start,
            cwd,
            id: super::restart::run_id(),
            first_start: Instant::now(),
            ledger: Ledger::default(),
            attempts: Vec::new(),
            restarts: Vec::new(),
            resume,
            left_behind: None,
            needs_s: 0.0,
        })
    }

    /// Told to stop between two attempts: the signal found no command to reach; the last
    /// attempt's status.
    fn stopped_between_attempts(&self) -> Option<ExitCode> {
        let last = self.attempts.last()?;
        if self.session.received_stop() == 0 {
            return None;
        }
        terminal::summary("watchdog: not restarted: the watchdog was told to stop.");
        Some(ExitCode::from(last.exit.shell_status()))
    }

    /// Phase 2: the next attempt's settings, what the last one left removed, its command
    /// started and watched, its recording named, its restart said.
    fn start_attempt(&mut self, argv: &[std::ffi::OsString]) -> Result<Watch, Failure> {
        let n = self.attempts.len() as u32 + 1;
        let settings = self.attempt_settings(n);
        if let Some(request) = self.left_behind.take().filter(|_| !self.settings.dry_run) {
            // The new attempt must not save at its first step for the old one's request.
            for place in [request.clone(), request.ack(), request.sibling(".steps")] {
                clear_left_behind(&place, n - 1);
            }
            // Its recording's path was checked before the first attempt: whatever is there
            // now an earlier attempt put there.
            if let Some(rec) = settings.record.as_ref().filter(|_| n > 1) {
                clear_left_behind(&RequestPlace::Path(rec.clone()), n - 1);
            }
        }
        let outputs = Outputs::plan(&settings, std::process::id(), self.cwd.as_deref())?;
        self.left_behind = Some(RequestPlace::Path(outputs.request_file.clone()));
        let mut watch = self.session.attempt(argv, settings, outputs, &self.env)?;
        watch.series.attempting = Some(Attempting {
            attempt: n,
            stop: self
                .session
                .forward_to
                .as_ref()
                .map(|to| to.received.clone()),
            ..Attempting::default()
        });
        let (run_id, attempt) = (self.id.clone(), n);
        watch.out.recording.edit(move |r| {
            let meta = r.meta_mut();
            meta.run_id = Some(run_id);
            meta.attempt = Some(attempt);
        });
        let resumed_step = self.resume.as_ref().and_then(|c| c.step);
        self.start.fit(&mut watch, n, resumed_step);
        if let Some(prev) = self.attempts.last() {
            watch.emit(EventBody::Restart {
                attempt: n,
                verdict: prev.verdict.to_string(),
                resume_from: self.resume.as_ref().map(|c| c.path.display().to_string()),
                step: resumed_step,
            });
        }
        Ok(watch)
    }

    /// Attempt `n`'s settings: its own recording, and what is left of `--max-runtime` (the
    /// run's, not each attempt's).
    fn attempt_settings(&self, n: u32) -> Settings {
        let mut settings = self.settings.clone();
        if n > 1 {
            if let Some(rec) = &self.settings.record {
                settings.record = Some(attempt_recording(rec, n));
            }
            settings.max_runtime = self
                .settings
                .max_runtime
                .map(|max| max.saturating_sub(self.first_start.elapsed()));
        }
        settings
    }

    /// Phase 3: the ended attempt as the policy sees it: its verdict, the steps it reached,
    /// whether it saved, and its checkpoints into the ledger.
    fn judge(&mut self, mut watch: Watch, exit: TargetExit) {
        let lead_s = watch.settings.lead.as_secs_f64();
        self.needs_s = watch.engine.lead_s() + watch.replies.first_step_s.unwrap_or(0.0);
        let ended_unix = watchdog_alerter::events::unix_time_s(SystemTime::now());
        watch.series.attempting.take();
        let acks = std::mem::take(&mut watch.replies.acks);
        let (found, acked) = (acks.found, acks.steps);
        let saved_before_lead = found.iter().any(|c| c.time_unix < ended_unix - lead_s);
        let resumed_at = self.resume.as_ref().and_then(|c| c.step);
        let (step, progress_step) = steps_reached(
            &acked,
            ended_unix - lead_s,
            watch.replies.max_step.max(resumed_at),
        );
        self.ledger.extend(found);
        let (verdict, ends) = watch
            .evidence
            .last_verdict
            .take()
            .map(|(v, e)| (v.kind, e))
            .unwrap_or((VerdictKind::Unknown, Vec::new()));
        self.attempts.push(Attempt {
            n: self.attempts.len() as u32 + 1,
            verdict,
            exit,
            step,
            progress_step,
            resumed_from: resumed_at,
            resumed: self.resume.is_some(),
            saved_before_lead,
            ends,
        });
    }

    /// Phase 4: restart or stop, by the policy; a full disk restarts only once the space
    /// the last save needs is back, and no attempt starts that the job's end would cut short.
    fn decide(&mut self) -> Next {
        let now = Instant::now();
        self.restarts.retain(|t| now.duration_since(*t) < HOUR);
        let stopped_by = match self.session.received_stop() {
            0 => None,
            sig => Some(sig as i32),
        };
        let mut next = decide(
            &self.policy,
            &self.attempts,
            self.restarts.len() as u32,
            stopped_by,
        );
        if next == Next::Restart
            && let Some(this) = self.attempts.last()
            && this.verdict == VerdictKind::DiskFull
        {
            match space_back(this, self.ledger.last_size()) {
                Ok(said) if !said.is_empty() => terminal::summary(&format!("watchdog: {said}")),
                Ok(_) => {}
                Err(why) => next = Next::Stop(Some(why)),
            }
        }
        if next == Next::Restart
            && let Some(why) = self.start.too_late_for_another_attempt(self.needs_s)
        {
            next = Next::Stop(Some(why));
        }
        if next == Next::Restart {
            self.restarts.push(now);
        }
        next
    }

    /// Phase 5: what the next attempt is told: the checkpoint it resumes from, the restart
    /// count and the last verdict; said in one line.
    fn prepare_restart(&mut self) {
        let n = self.attempts.len() as u32;
        self.resume = self
            .ledger
            .resume_from()
            .cloned()
            .or_else(|| self.start.resume.as_ref().map(Checkpoint::from_record));
        let verdict = self
            .attempts
            .last()
            .map_or(VerdictKind::Unknown, |a| a.verdict);
        self.env = self.start.record_env();
        self.env.extend([
            (
                "WATCHDOG_RESTART".into(),
                (self.start.requeues() + n).to_string(),
            ),
            ("WATCHDOG_LAST_VERDICT".into(), verdict.to_string()),
        ]);
        if let Some(c) = &self.resume {
            self.env.push((
                "WATCHDOG_RESUME_FROM".into(),
                c.path.to_string_lossy().into_owned(),
            ));
        }
        terminal::summary(&format!(
            "watchdog: restarting (attempt {} of at most {}) after {verdict}, {}",
            n + 1,
            u64::from(self.policy.restart) + 1,
            match &self.resume {
                Some(c) => format!(
                    "resuming from {}{}",
                    watchdog_types::quote::quote_path(&c.path),
                    c.step.map_or(String::new(), |s| format!(" (step {s})"))
                ),
                None => "from the start: no acknowledged checkpoint is there unchanged".to_string(),
            }
        ));
    }

    /// The end: why no restart (when there is a reason), the attempts' table, the last
    /// attempt's status.
    fn stop(&self, why: Option<String>, exit: TargetExit) -> ExitCode {
        if let Some(why) = why {
            terminal::summary(&format!("watchdog: {why}."));
        }
        if self.attempts.len() > 1 {
            terminal::summary(&attempts_table(&self.attempts));
        }
        ExitCode::from(exit.shell_status())
    }
}
