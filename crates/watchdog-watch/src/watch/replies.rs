//! What the run writes back to the watch, and when each is next looked at: the
//! acknowledgment of a save (`<request file>.ack`), its checkpoints, the step reports
//! (`<request file>.steps`), the Python client's environment file; and the steps the run
//! reached, which a restart's progress rule and a requeue compare.
//!
//! A look costs a wake system calls, so each file is looked at when it can have news
//! (docs/sample-path.md, "What a wake reads"): the acknowledgment every
//! [`ACK_CHECK_EVERY`] while a request was sent or a client showed itself, else every
//! [`ACK_SLOW_EVERY`] when its directory shows a file may have been created, with one
//! `stat` a look and a read only when it changed; the
//! environment file after a delay doubling from [`PYTHON_FIRST_LOOK`] to
//! [`PYTHON_LAST_LOOK`], and at once when an acknowledgment or a step report shows a
//! client. Both are looked at once more at the end.

use std::time::{Duration, Instant};

use watchdog_alerter::request::{AckWatcher, FileStamp, RequestPlace};

use super::restart::AckReader;
use crate::steps::{DirGate, GpuView, StepsIntake};

/// How often the acknowledgment file is looked at while a request was sent or a client
/// showed itself (an acknowledgment, a step report, its environment file).
pub(super) const ACK_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often it is looked at otherwise: a save no request asked for (the last-chance save)
/// is seen within this, and at the end.
pub(super) const ACK_SLOW_EVERY: Duration = Duration::from_secs(1);
/// The first delay before the Python client's environment file is looked for; it doubles
/// at each look that finds none, up to [`PYTHON_LAST_LOOK`].
pub(super) const PYTHON_FIRST_LOOK: Duration = Duration::from_secs(1);
/// The longest delay between two looks for the environment file.
pub(super) const PYTHON_LAST_LOOK: Duration = Duration::from_secs(30);

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
    /// The acknowledgment file, as stamped at the last look (one `stat`).
    ack_place: RequestPlace,
    ack_stamp: Option<FileStamp>,
    /// When the acknowledgment was last looked at (`None`: never).
    last_ack_look: Option<Instant>,
    /// Skips the looks at the acknowledgment while it is looked at every
    /// [`ACK_SLOW_EVERY`].
    ack_dir: DirGate,
    /// Whether the run showed a client: an acknowledgment, a step report, its environment.
    pub(super) client_seen: bool,
    /// When the Python client's environment file is next looked for.
    pub(super) next_python: Instant,
    /// The delay before the look after that.
    python_every: Duration,
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
            ack_place: request.ack(),
            ack_stamp: None,
            last_ack_look: None,
            ack_dir: DirGate::default(),
            client_seen: false,
            python_file: Some(crate::environment::python_file(request)),
            steps: StepsIntake::new(request, dry_run),
            gpu_view,
            steps_unmatched_said: false,
            next_python: now + PYTHON_FIRST_LOOK,
            python_every: PYTHON_FIRST_LOOK,
            max_step: None,
            first_step_s: None,
        }
    }

    /// Whether the acknowledgment is to be looked at `now`: every [`ACK_CHECK_EVERY`] when
    /// `requested` (a request was sent) or a client showed itself, else every
    /// [`ACK_SLOW_EVERY`] and then only when its directory shows a file may have been
    /// created (the client writes it by an atomic rename; see
    /// [`StepsIntake::check_ranks_due`]: a full look at least every
    /// [`FULL_LOOK_EVERY`](crate::steps::FULL_LOOK_EVERY)). A look that is due is counted
    /// as made.
    pub(super) fn ack_due(&mut self, now: Instant, requested: bool) -> bool {
        let fast = requested || self.client_seen;
        let every = if fast {
            ACK_CHECK_EVERY
        } else {
            ACK_SLOW_EVERY
        };
        if self.last_ack_look.is_some_and(|at| now < at + every) {
            return false;
        }
        self.last_ack_look = Some(now);
        if fast {
            self.ack_dir = DirGate::default();
            return true;
        }
        !self
            .ack_dir
            .skips(self.steps.dir_stamp_at(now), now, || true)
    }

    /// One `stat` of the acknowledgment file: whether it changed (appeared, was replaced or
    /// rewritten, went) since the last call. The first call says changed when it is there.
    pub(super) fn ack_changed(&mut self) -> bool {
        let stamp = self.ack_place.stamp();
        if stamp == self.ack_stamp {
            return false;
        }
        self.ack_stamp = stamp;
        stamp.is_some()
    }

    /// Whether the environment file is to be looked for at `now`; a look that is due
    /// sets the next one, after a delay twice as long (at most [`PYTHON_LAST_LOOK`]).
    pub(super) fn python_due(&mut self, now: Instant) -> bool {
        if self.python_file.is_none() || now < self.next_python {
            return false;
        }
        self.python_every = (self.python_every * 2).min(PYTHON_LAST_LOOK);
        self.next_python = now + self.python_every;
        true
    }

    /// The run showed a client (an acknowledgment, a step report): its environment file is
    /// looked for at the next look, and the acknowledgment every [`ACK_CHECK_EVERY`].
    pub(super) fn client_showed(&mut self, now: Instant) {
        self.client_seen = true;
        self.next_python = self.next_python.min(now);
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

    #[test]
    fn the_ack_is_looked_at_slowly_until_a_request_or_a_client_and_read_only_when_changed() {
        let dir = tempfile::tempdir().unwrap();
        let place = RequestPlace::Path(dir.path().join("r.json"));
        let t0 = Instant::now();
        let mut replies = Replies::new(&place, true, GpuView::default(), t0);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        assert!(replies.ack_due(ms(0), false), "the first look is due");
        assert!(!replies.ack_due(ms(500), false), "slow: every second");
        assert!(
            replies.ack_due(ms(500), true),
            "a request makes it due at 100 ms"
        );
        assert!(!replies.ack_due(ms(550), true));
        assert!(replies.ack_due(ms(600), true));
        assert!(!replies.ack_due(ms(700), false));
        replies.client_showed(ms(700));
        assert!(replies.ack_due(ms(700), false), "a client makes it fast");
        // Missing: nothing changed. Written: changed once. Rewritten: changed again.
        assert!(!replies.ack_changed());
        std::fs::write(dir.path().join("r.json.ack"), "{}").unwrap();
        assert!(replies.ack_changed());
        assert!(!replies.ack_changed());
        std::fs::write(dir.path().join("r.json.ack"), "{\"seq\": 1}").unwrap();
        assert!(replies.ack_changed());
        std::fs::remove_file(dir.path().join("r.json.ack")).unwrap();
        assert!(!replies.ack_changed(), "gone: nothing to read");
    }

    /// Looked at slowly, the acknowledgment is skipped while its directory shows no file
    /// created since the last full look (one rewritten in place is seen at the next full
    /// look); a request makes every look due again.
    #[test]
    fn the_slow_ack_look_is_skipped_while_the_directory_shows_nothing_created() {
        let dir = tempfile::tempdir().unwrap();
        let place = RequestPlace::Path(dir.path().join("r.json"));
        let ack = dir.path().join("r.json.ack");
        std::fs::write(&ack, "{}").unwrap();
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        let settle = || {
            std::fs::File::open(dir.path())
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        };
        settle();
        let t0 = Instant::now();
        let mut replies = Replies::new(&place, true, GpuView::default(), t0);
        let s = |n: u64| t0 + Duration::from_secs(n);
        assert!(replies.ack_due(s(0), false), "the first look is full");
        assert!(replies.ack_changed());
        std::fs::write(&ack, "{\"seq\": 1}").unwrap();
        assert!(!replies.ack_due(s(1), false), "nothing created: skipped");
        assert!(replies.ack_due(s(10), false), "a full look every 10 s");
        assert!(replies.ack_changed());
        assert!(replies.ack_due(s(11), true), "a request: every look");
        // Created in the directory: looked at at once.
        std::fs::write(dir.path().join("other"), "x").unwrap();
        settle();
        assert!(replies.ack_due(s(12), false));
        std::fs::write(dir.path().join("created"), "x").unwrap();
        assert!(replies.ack_due(s(13), false), "a file created");
    }

    #[test]
    fn the_environment_is_looked_for_less_often_until_a_client_shows() {
        let dir = tempfile::tempdir().unwrap();
        let place = RequestPlace::Path(dir.path().join("r.json"));
        let t0 = Instant::now();
        let mut replies = Replies::new(&place, true, GpuView::default(), t0);
        let s = |n: f64| t0 + Duration::from_secs_f64(n);
        assert!(!replies.python_due(s(0.5)));
        // Looks at 1, 3, 7, 15 s, then every 30 s.
        let looks: Vec<u64> = (0..200)
            .map(|i| f64::from(i) * 0.5)
            .filter(|&t| replies.python_due(s(t)))
            .map(|t| t as u64)
            .collect();
        assert_eq!(looks, vec![1, 3, 7, 15, 31, 61, 91]);
        replies.client_showed(s(95.0));
        assert!(replies.python_due(s(95.0)), "a client: looked for at once");
        replies.python_file = None;
        replies.client_showed(s(200.0));
        assert!(!replies.python_due(s(200.0)), "read already: never again");
    }
}
