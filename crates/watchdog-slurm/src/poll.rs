//! Asks the controller for one job's end on a thread of its own: at start, then every
//! period, and on demand before the watchdog acts on the end. The loop never waits for
//! the controller; it reads the latest answer and what changed since it last looked.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use watchdog_types::outage::{Outage, Said};

use crate::controller::{Controller, ControllerError};
use crate::view::JobView;

/// One answer of the controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndReading {
    /// The job as squeue showed it.
    pub view: JobView,
    /// When it was read.
    pub at: Instant,
}

/// What changed since the last [`EndPoller::news`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum News {
    /// The end is known for the first time, or moved (`None`: no limit).
    End(Option<u64>),
    /// The controller did not answer (said once until it answers again).
    Unanswered(String),
    /// It answers again after not answering.
    Answered,
}

#[derive(Debug, Default)]
struct State {
    latest: Option<EndReading>,
    /// The end last reported by `news`; `None`: not yet reported.
    said_end: Option<Option<u64>>,
    /// Whether the controller answers, and what of it was said.
    outage: Outage,
}

/// The end of one job, kept fresh by a thread.
#[derive(Debug)]
pub struct EndPoller {
    job: u64,
    controller: Controller,
    state: Arc<Mutex<State>>,
    /// Nudges the thread; dropped, it ends the thread (after the question in flight).
    stop: Option<Sender<()>>,
}

impl EndPoller {
    /// Starts asking for job `job`'s end at once, then every `period`.
    pub fn start(controller: Controller, job: u64, period: Duration) -> EndPoller {
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = mpsc::channel::<()>();
        {
            let (controller, shared) = (controller.clone(), state.clone());
            let spawned = std::thread::Builder::new()
                .name("watchdog-slurm".into())
                .spawn(move || {
                    loop {
                        // Kept in the state; the loop reads it from there.
                        let _ = record(&shared, controller.view(job));
                        // A nudge asks at once; the poller dropped ends the thread.
                        match stopped.recv_timeout(period) {
                            Ok(()) | Err(RecvTimeoutError::Timeout) => continue,
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                });
            if let Err(e) = spawned {
                record_error(
                    &state,
                    format!("cannot start the thread that asks SLURM: {e}"),
                );
            }
        }
        EndPoller {
            job,
            controller,
            state,
            stop: Some(stop),
        }
    }

    /// The job's ID.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The latest answer.
    pub fn latest(&self) -> Option<EndReading> {
        self.lock().latest.clone()
    }

    /// Has the thread ask now, without waiting for its answer.
    pub fn nudge(&self) {
        if let Some(tx) = &self.stop {
            let _ = tx.send(());
        }
    }

    /// Asks now, on the caller's thread (before acting on the end).
    pub fn ask_now(&self) -> Result<EndReading, String> {
        record(&self.state, self.controller.view(self.job))
    }

    /// Asks now unless the latest answer is younger than `fresh`.
    pub fn fresh_within(&self, fresh: Duration) -> Result<EndReading, String> {
        match self.latest() {
            Some(r) if r.at.elapsed() <= fresh => Ok(r),
            _ => self.ask_now(),
        }
    }

    /// What changed since the last call, oldest first.
    pub fn news(&self) -> Vec<News> {
        let mut s = self.lock();
        let mut out: Vec<News> = s.outage.news().into_iter().map(News::from).collect();
        if let Some(r) = &s.latest {
            let end = r.view.end_unix;
            if s.said_end != Some(end) {
                s.said_end = Some(end);
                out.push(News::End(end));
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps one answer: the latest reading, or the error.
fn record(
    state: &Mutex<State>,
    answer: Result<JobView, ControllerError>,
) -> Result<EndReading, String> {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    match answer {
        Ok(mut view) => {
            // squeue's %e is the end only while the job runs: ending, it is the kill's time.
            if !view.state.eq_ignore_ascii_case("RUNNING")
                && let Some(before) = &s.latest
            {
                view.end_unix = before.view.end_unix;
            }
            let reading = EndReading {
                view,
                at: Instant::now(),
            };
            s.latest = Some(reading.clone());
            s.outage.answered();
            Ok(reading)
        }
        Err(e) => {
            drop(s);
            let text = e.to_string();
            record_error(state, text.clone());
            Err(text)
        }
    }
}

/// Keeps an error, to be said once.
fn record_error(state: &Mutex<State>, text: String) {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    s.outage.failed(text);
}

impl From<Said> for News {
    fn from(said: Said) -> News {
        match said {
            Said::Unanswered(why) => News::Unanswered(why),
            Said::Answered => News::Answered,
        }
    }
}

impl Drop for EndPoller {
    fn drop(&mut self) {
        // Not joined: a question in flight may take the controller's timeout.
        drop(self.stop.take());
    }
}
