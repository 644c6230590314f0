//! What a watch writes, and where: the events file, the request file's place (and the
//! acknowledgment and step reports beside it), the flight recording (on the recorder
//! thread while the watch runs, taken back for the verdict and the last write), and the
//! SIGUSR2 flag that asks for the recording now.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use watchdog_alerter::events::EventLog;
use watchdog_alerter::request::RequestPlace;
use watchdog_types::{Event, EventBody};

use crate::outputs::{self, Outputs};
use crate::recorder::{self, FlightRecorder, RecorderLink};

/// The outputs of one watch.
pub(super) struct Output {
    /// The events file, when one was asked for.
    pub(super) events: Option<EventLog>,
    /// Where requests are written: the request file's path, or beneath the user's
    /// directory for a run the service watches.
    pub(super) request: RequestPlace,
    /// The paths planned at the start (request file, recording).
    pub(super) plan: Outputs,
    /// The flight recorder, wherever it is.
    pub(super) recording: Recording,
    /// Set by SIGUSR2: write the recording now.
    pub(super) record_now: Arc<AtomicBool>,
}

impl Output {
    /// Writes `body` as an event `t_s` into the watch: to the recording (a `limit` is kept
    /// in its environment too) and to the events file.
    pub(super) fn emit(&mut self, body: EventBody, t_s: f64) {
        if let EventBody::Limit {
            resource,
            kind,
            limit,
            unit,
            source,
        } = &body
        {
            let fact = watchdog_types::environment::LimitFact {
                resource: resource.clone(),
                kind: *kind,
                limit: *limit,
                unit: *unit,
                source: source.clone(),
            };
            self.recording.edit(move |r| {
                if let Some(env) = r.environment_mut() {
                    crate::environment::note_limit(env, fact);
                }
            });
        }
        let event = Event {
            time: watchdog_alerter::events::now_rfc3339(),
            body,
        };
        if let Ok(json) = serde_json::to_value(&event) {
            self.recording.edit(move |r| r.event(t_s, json));
        }
        if let Some(log) = &mut self.events {
            match log.append(&event) {
                Ok(()) => outputs::write_ok("events"),
                // Reported next tick as an event, which the recording keeps.
                Err(e) => outputs::write_failed("events", log.path(), &e.to_string()),
            }
        }
    }

    /// Where the final recording goes, or why it is skipped, decided once before the
    /// summary names it (`None`: no recording).
    pub(super) fn last_recording(&self) -> Option<(PathBuf, Option<String>)> {
        let path = self.plan.recording.clone()?;
        let skipped = recorder::unwritable(&path);
        Some((path, skipped))
    }

    /// Writes the final recording unless `last` says it is skipped.
    pub(super) fn write_last(&mut self, last: Option<(PathBuf, Option<String>)>) {
        let recorder = self.recording.take_back();
        if let (Some((path, skipped)), Some(recorder)) = (last, recorder) {
            let written = match skipped {
                Some(why) => Err(why),
                None => recorder::write_checked(&path, &recorder.snapshot()),
            };
            match written {
                Ok(()) => tracing::info!("recording written to {}", path.display()),
                Err(e) => outputs::write_failed("recording", &path, &e),
            }
        }
    }

    /// Hands a copy of the flight recorder to its thread to write (`why`: for the log).
    pub(super) fn save_in_background(&mut self, why: &str) {
        match &self.plan.recording {
            Some(path) => {
                tracing::debug!("writing the recording {} ({why})", path.display());
                self.recording.write(path.clone());
            }
            None if why == "SIGUSR2" => {
                tracing::info!("dry run: no recording written (give --record PATH to have one)")
            }
            None => {}
        }
    }
}

/// ` Recording: PATH.` for the summary, when the final recording will be written.
pub(super) fn recording_note(last: &Option<(PathBuf, Option<String>)>) -> String {
    match last {
        Some((path, None)) => format!(" Recording: {}.", path.display()),
        _ => String::new(),
    }
}

/// The flight recorder as this watch reaches it: on the recorder thread while the watch
/// runs, taken back (with every sample drained into it) for the verdict and the last write.
pub(super) enum Recording {
    Live(RecorderLink),
    Back(Box<FlightRecorder>),
    Gone,
}

impl Recording {
    /// Asks the recorder thread to drain the ring (it is nearly full).
    pub(super) fn ask_drain(&self) {
        if let Recording::Live(link) = self {
            link.ask_drain();
        }
    }

    /// Changes the recorder wherever it is.
    pub(super) fn edit(&mut self, f: impl FnOnce(&mut FlightRecorder) + Send + 'static) {
        match self {
            Recording::Live(link) => link.edit(f),
            Recording::Back(r) => f(r),
            Recording::Gone => {}
        }
    }

    /// Writes the recording to `path` off the sampling thread.
    pub(super) fn write(&self, path: PathBuf) {
        match self {
            Recording::Live(link) => link.write(path),
            Recording::Back(r) => {
                if let Err(e) = recorder::write(&path, &r.snapshot()) {
                    outputs::write_failed("recording", &path, &e);
                }
            }
            Recording::Gone => {}
        }
    }

    /// The recorder, taken back from its thread on the first call.
    pub(super) fn take_back(&mut self) -> Option<&FlightRecorder> {
        if let Recording::Live(_) = self
            && let Recording::Live(link) = std::mem::replace(self, Recording::Gone)
            && let Some(r) = link.take()
        {
            *self = Recording::Back(Box::new(r));
        }
        match self {
            Recording::Back(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_a_recording_only_when_it_will_be_written() {
        let path = PathBuf::from("/tmp/run.jsonl");
        assert_eq!(
            recording_note(&Some((path.clone(), None))),
            " Recording: /tmp/run.jsonl."
        );
        assert_eq!(recording_note(&Some((path, Some("exists".into())))), "");
        assert_eq!(recording_note(&None), "");
    }

    #[test]
    fn a_recording_taken_back_is_edited_and_written_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let flight = FlightRecorder::new(Vec::new(), recorder::Meta::default(), 60.0);
        let mut recording = Recording::Back(Box::new(flight));
        recording.edit(|r| r.event(1.0, serde_json::json!({"event": "x"})));
        let path = dir.path().join("r.jsonl");
        recording.write(path.clone());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"event\":\"x\""), "{text}");
        assert!(recording.take_back().is_some());
        let mut gone = Recording::Gone;
        assert!(gone.take_back().is_none());
    }
}
