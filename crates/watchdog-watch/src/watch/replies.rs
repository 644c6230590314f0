//! What the run writes back to the watch, and when each is next looked at: the
//! acknowledgment of a save (`<request file>.ack`), its checkpoints, the step reports
//! (`<request file>.steps`), the Python client's environment file; and the steps the run
//! reached, which a restart's progress rule and a requeue compare.

use std::time::Instant;

use watchdog_alerter::request::{AckWatcher, RequestPlace};

use super::restart::AckReader;
use crate::steps::{GpuView, StepsIntake};

/// The run's replies, and what the watch made of them so far.
pub(super) struct Replies {
    /// The acknowledgment, for the engine (what a save took).
    pub(super) ack: AckWatcher,
    /// Every checkpoint acknowledged with a path, and every acknowledged step.
    pub(super) acks: AckReader,
    /// The Python client's environment file, until it was read (see `environment`).
    pub(super) python_file: Option<RequestPlace>,
    /// The run's step reports (see `steps`).
    pub(super) steps: StepsIntake,
    /// NVML's view of the step reports' device.
    pub(super) gpu_view: GpuView,
    /// Whether a step report's device NVML does not list was said.
    pub(super) steps_unmatched_said: bool,
    /// When the acknowledgment is next looked at.
    pub(super) next_ack: Instant,
    /// When the Python client's environment file is next looked for.
    pub(super) next_python: Instant,
    /// The highest training step the run reported (acknowledgments, step reports).
    pub(super) max_step: Option<u64>,
    /// Seconds from the watch's start to the first step the run reported.
    pub(super) first_step_s: Option<f64>,
}

impl Replies {
    /// The replies of a run whose requests go to `request`; each looked at from `now`.
    pub(super) fn new(
        request: &RequestPlace,
        dry_run: bool,
        gpu_view: GpuView,
        now: Instant,
    ) -> Replies {
        Replies {
            ack: AckWatcher::at(request),
            acks: AckReader::default(),
            python_file: Some(crate::environment::python_file(request)),
            steps: StepsIntake::new(request, dry_run),
            gpu_view,
            steps_unmatched_said: false,
            next_ack: now,
            next_python: now,
            max_step: None,
            first_step_s: None,
        }
    }

    /// The run reported reaching training step `step`, `elapsed_s` into the watch: the
    /// highest is the step reached; the first one's time is kept.
    pub(super) fn saw_step(&mut self, step: u64, elapsed_s: f64) {
        self.max_step = Some(self.max_step.map_or(step, |s| s.max(step)));
        if self.first_step_s.is_none() {
            self.first_step_s = Some(elapsed_s);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_step_is_kept_and_the_first_ones_time() {
        let dir = tempfile::tempdir().unwrap();
        let place = RequestPlace::Path(dir.path().join("r.json"));
        let mut replies = Replies::new(&place, true, GpuView::default(), Instant::now());
        assert_eq!(replies.max_step, None);
        replies.saw_step(40, 2.5);
        replies.saw_step(12, 3.0);
        replies.saw_step(41, 4.0);
        assert_eq!(replies.max_step, Some(41));
        assert_eq!(replies.first_step_s, Some(2.5));
    }
}
