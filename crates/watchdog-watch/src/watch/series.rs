//! The attempts a run is one of: a `run --restart` attempt, the checkpoint record that
//! outlives the job (`.watchdog-checkpoints.json`), the SLURM job that requeues it. Each
//! is optional; a plain `--pid` watch has none.

use super::record::Book;
use super::restart::Attempting;
use super::slurm::{SlurmEnd, SlurmRun};

/// The run's place among its attempts.
#[derive(Default)]
pub(super) struct Series {
    /// When this watch is one attempt of a `run --restart`.
    pub(super) attempting: Option<Attempting>,
    /// The run's checkpoint record (`run`, and `--pid` of a process of our own user).
    pub(super) record: Option<Book>,
    /// The SLURM job the run is in, when it is in one.
    pub(super) slurm: Option<SlurmRun>,
}

impl Series {
    /// A run's series when it is in SLURM `job` (`end`: the job's end as the controller
    /// says it, when the runtime limit follows it).
    pub(super) fn in_job(job: Option<watchdog_slurm::Job>, end: Option<SlurmEnd>) -> Series {
        Series {
            slurm: job.map(|job| SlurmRun::new(job, end, false)),
            ..Series::default()
        }
    }

    /// Whether acknowledged checkpoints are kept: a later attempt, the record or a requeue
    /// may resume from them.
    pub(super) fn keeps_checkpoints(&self) -> bool {
        self.attempting.is_some() || self.record.is_some() || self.slurm.is_some()
    }

    /// This watch's attempt number (1 unless it is a later attempt of a `run --restart`).
    pub(super) fn attempt(&self) -> Option<u32> {
        self.attempting.as_ref().map(|a| a.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_watch_keeps_no_checkpoints() {
        let mut series = Series::default();
        assert!(!series.keeps_checkpoints());
        assert_eq!(series.attempt(), None);
        series.attempting = Some(Attempting {
            attempt: 3,
            ..Attempting::default()
        });
        assert!(series.keeps_checkpoints());
        assert_eq!(series.attempt(), Some(3));
    }
}
