//! The run's checkpoint record (`watchdog_formats::checkpoint_record`): every checkpoint
//! the run acknowledged with a path is added as it is acknowledged, the attempt's verdict
//! when it ends, and a requeued or restarted run is told the newest one still complete.
//! Written only by `watchdog run` (the run's own user) and by `--pid` watching a process
//! of its own user; the service never touches it.

use std::path::{Path, PathBuf};

use watchdog_formats::checkpoint_record::{self, Entry, Record};
use watchdog_types::fs::{Durability, write_atomic_with};

use super::restart::{Checkpoint, measure};

/// The record of one run: where it is, the run's key, and the attempt writing.
#[derive(Debug, Clone)]
pub struct Book {
    path: PathBuf,
    key: String,
    attempt: u32,
    /// A record that could not be read is said once, and one that could not be written.
    said_read: std::cell::Cell<bool>,
    said_write: std::cell::Cell<bool>,
}

/// The run key of `env`: `WATCHDOG_RUN_KEY`, else `slurm-<SLURM_JOB_ID>`, else `default`.
pub fn run_key(env: &[(String, String)]) -> String {
    let get = |k: &str| {
        env.iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    if let Some(key) = get("WATCHDOG_RUN_KEY").filter(|k| key_is_plain(k)) {
        return key.to_string();
    }
    match watchdog_slurm::Job::from_env(env) {
        Some(job) => job.key(),
        None => "default".to_string(),
    }
}

/// Warns `what` unless `said` says it was already (a reading's and a writing's failure
/// are each said once: the first must not silence the second).
fn say_once(said: &std::cell::Cell<bool>, what: &str) {
    if !said.replace(true) {
        tracing::warn!("{}", watchdog_types::units::printable(what));
    }
}

/// A key of at most 200 printable characters (it is written in the record and logged).
fn key_is_plain(key: &str) -> bool {
    !key.is_empty() && key.len() <= 200 && key.chars().all(|c| !c.is_control())
}

/// A checkpoint of the record that is still as it was acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// The checkpoint, absolute.
    pub path: PathBuf,
    /// Its step.
    pub step: Option<u64>,
    /// The verdict of the attempt that saved it, when known.
    pub verdict: Option<String>,
    /// That attempt.
    pub attempt: u32,
}

impl Book {
    /// The record at `path` (`None`: `.watchdog-checkpoints.json` in `cwd`) for run `key`,
    /// written by attempt `attempt`.
    pub fn new(path: Option<&Path>, cwd: &Path, key: String, attempt: u32) -> Book {
        let path = match path {
            Some(p) if p.is_absolute() => p.to_path_buf(),
            Some(p) => cwd.join(p),
            None => cwd.join(checkpoint_record::DEFAULT_NAME),
        };
        Book {
            path,
            key,
            attempt,
            said_read: std::cell::Cell::new(false),
            said_write: std::cell::Cell::new(false),
        }
    }

    /// Where the record is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record's directory, which relative entries are relative to.
    fn dir(&self) -> &Path {
        watchdog_types::fs::parent_dir(&self.path)
    }

    /// Reads the record; one that cannot be read is said once and taken as empty.
    fn load(&self) -> Record {
        match Record::read(&self.path) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                say_once(&self.said_read, &format!("{e}; it is started anew"));
                Record::default()
            }
        }
    }

    fn store(&self, record: &Record) {
        if let Err(e) = write_atomic_with(&self.path, &record.to_bytes(), Durability::Durable) {
            say_once(
                &self.said_write,
                &format!(
                    "cannot write the checkpoint record {}: {e}",
                    self.path.display()
                ),
            );
        }
    }

    /// Adds an acknowledged checkpoint.
    pub fn add(&mut self, c: &Checkpoint) {
        let mut record = self.load();
        record.push(Entry {
            key: self.key.clone(),
            path: checkpoint_record::relative_to(self.dir(), &c.path),
            step: c.step,
            size: c.size,
            mtime_ns: i64::try_from(c.mtime_ns).unwrap_or(i64::MAX),
            time_unix: c.time_unix,
            attempt: self.attempt,
            verdict: None,
        });
        self.store(&record);
    }

    /// Writes `verdict` into this attempt's entries that have none.
    pub fn set_verdict(&mut self, verdict: &str) {
        let mut record = self.load();
        let mut changed = false;
        for e in record
            .entries
            .iter_mut()
            .filter(|e| e.key == self.key && e.attempt == self.attempt && e.verdict.is_none())
        {
            e.verdict = Some(verdict.to_string());
            changed = true;
        }
        if changed {
            self.store(&record);
        }
    }

    /// This run's newest checkpoint that is still complete (as acknowledged: same size,
    /// same newest modification time), if any.
    pub fn resume(&self) -> Option<Resume> {
        let record = self.load();
        let dir = self.dir().to_path_buf();
        record.of_key(&self.key).find_map(|e| {
            let path = checkpoint_record::resolve(&dir, e);
            let (size, mtime_ns) = measure(&path)?;
            (size == e.size && i64::try_from(mtime_ns).ok() == Some(e.mtime_ns)).then(|| Resume {
                path,
                step: e.step,
                verdict: e.verdict.clone(),
                attempt: e.attempt,
            })
        })
    }

    /// The verdict of this run's newest entry, if one was written.
    pub fn last_verdict(&self) -> Option<String> {
        let record = self.load();
        record.of_key(&self.key).find_map(|e| e.verdict.clone())
    }
}

/// What a `run` starts with in its environment (the watchdog's own, which the command
/// inherits): its checkpoint record and, in a requeued SLURM job, where it resumes.
#[derive(Debug, Clone)]
pub(super) struct RunStart {
    /// The record, when the working directory is known.
    pub(super) book: Option<Book>,
    /// The SLURM job, when the run is in one.
    pub(super) job: Option<watchdog_slurm::Job>,
    /// After a requeue: the newest complete checkpoint of the record and the verdict of the
    /// allocation before.
    pub(super) resume: Option<Resume>,
    pub(super) last_verdict: Option<String>,
}

impl RunStart {
    /// Reads the environment and, after a requeue, the record.
    pub(super) fn new(settings: &watchdog_config::Settings, cwd: Option<&Path>) -> RunStart {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let job = watchdog_slurm::Job::from_env(&env);
        let mut book =
            cwd.map(|cwd| Book::new(settings.checkpoint_record.as_deref(), cwd, run_key(&env), 1));
        let requeued = job.as_ref().is_some_and(|j| j.restart_count > 0);
        let (resume, last_verdict) = match (&mut book, requeued) {
            (Some(b), true) => (b.resume(), b.last_verdict()),
            _ => (None, None),
        };
        RunStart {
            book,
            job,
            resume,
            last_verdict,
        }
    }

    /// Says, after a requeue, where the run resumes from.
    pub(super) fn announce(&self) {
        let (Some(job), n) = (&self.job, self.requeues()) else {
            return;
        };
        if n == 0 {
            return;
        }
        let from = match &self.resume {
            Some(r) => format!(
                "resuming from {}{}",
                watchdog_types::quote::quote_path(&r.path),
                r.step.map_or(String::new(), |s| format!(" (step {s})"))
            ),
            None => "from the start: the checkpoint record has no complete checkpoint of this job"
                .to_string(),
        };
        crate::terminal::summary(&format!(
            "watchdog: job {} was requeued (restart {n}): {from}",
            job.id
        ));
    }

    /// With `--requeue`: says at start when SLURM will not requeue the job (`Requeue=0`,
    /// not a batch job); the run is still asked to save before the end.
    pub(super) fn check_requeue(&self, requeue: bool) {
        let Some(job) = self.job.as_ref().filter(|_| requeue) else {
            return;
        };
        let controller = watchdog_slurm::Controller::of_user(std::time::Duration::from_secs(3));
        let why = match controller.facts(job.id) {
            Ok(f) if f.batch == Some(false) => "it is not a batch job (sbatch)",
            Ok(f) if f.requeue == Some(false) => {
                "SLURM says Requeue=0 for it (sbatch --requeue, or JobRequeue=1 in slurm.conf)"
            }
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(
                    "{}",
                    watchdog_types::units::printable(&format!(
                        "cannot ask SLURM whether job {} can be requeued: {e}",
                        job.id
                    ))
                );
                return;
            }
        };
        tracing::warn!(
            "--requeue: job {} cannot be requeued: {why}; the run is still asked to save before its end",
            job.id
        );
    }

    /// In a SLURM job: why no attempt should start now, when the job ends (as the
    /// controller says now) before an attempt could reach its first step and save
    /// (`needs_s`: the lead with the learned save time, plus the time the last attempt took
    /// to its first step report).
    pub(super) fn too_late_for_another_attempt(&self, needs_s: f64) -> Option<String> {
        let job = self.job.as_ref()?;
        let end = match job.end_time {
            Some(end) => end,
            None => {
                watchdog_slurm::Controller::of_user(super::slurm::CONTROLLER_TIMEOUT)
                    .view(job.id)
                    .ok()?
                    .end_unix?
            }
        };
        let left = end as f64 - watchdog_alerter::events::unix_time_s(std::time::SystemTime::now());
        (left < needs_s).then(|| {
            format!(
                "not restarted: job {} ends in {}, less than the {} another attempt needs to reach its first step and save before the end",
                job.id,
                watchdog_types::units::format_duration_s(left.max(0.0)),
                watchdog_types::units::format_duration_s(needs_s)
            )
        })
    }

    /// Restarts before this allocation (`SLURM_RESTART_COUNT`).
    pub(super) fn requeues(&self) -> u32 {
        self.job.as_ref().map_or(0, |j| j.restart_count)
    }

    /// The run id of the recordings: `slurm-<SLURM_JOB_ID>` in a job, so the attempts of
    /// every allocation are drawn as one run.
    pub(super) fn run_id(&self) -> Option<String> {
        self.job.as_ref().map(watchdog_slurm::Job::key)
    }

    /// The environment of the first attempt: the record's path and, after a requeue,
    /// `WATCHDOG_RESTART`, `WATCHDOG_LAST_VERDICT` and `WATCHDOG_RESUME_FROM`.
    pub(super) fn env(&self) -> Vec<(String, String)> {
        let mut env = self.record_env();
        let n = self.requeues();
        if n > 0 {
            env.push(("WATCHDOG_RESTART".into(), n.to_string()));
            let verdict = self
                .last_verdict
                .clone()
                .unwrap_or_else(|| watchdog_types::VerdictKind::RuntimeLimit.to_string());
            env.push(("WATCHDOG_LAST_VERDICT".into(), verdict));
            if let Some(r) = &self.resume {
                env.push((
                    "WATCHDOG_RESUME_FROM".into(),
                    r.path.to_string_lossy().into_owned(),
                ));
            }
        }
        env
    }

    /// `WATCHDOG_CHECKPOINT_RECORD`, when there is a record.
    pub(super) fn record_env(&self) -> Vec<(String, String)> {
        self.book
            .as_ref()
            .map(|b| {
                (
                    "WATCHDOG_CHECKPOINT_RECORD".to_string(),
                    b.path().to_string_lossy().into_owned(),
                )
            })
            .into_iter()
            .collect()
    }

    /// Gives attempt `n` (1 for the first in this allocation) of a watch its record, its
    /// recordings' run id and, in a SLURM job, `--requeue` and the step it resumed from.
    pub(super) fn fit(&self, watch: &mut super::Watch, n: u32, resumed_step: Option<u64>) {
        let attempt = self.requeues() + n;
        watch.series.record = self.book.clone().map(|mut b| {
            b.attempt = attempt;
            b
        });
        if let Some(id) = self.run_id() {
            watch.out.recording.edit(move |r| {
                let meta = r.meta_mut();
                meta.run_id = Some(id);
                meta.attempt = Some(attempt);
            });
        }
        let requeue = watch.settings.requeue;
        if let Some(s) = &mut watch.series.slurm {
            s.set_requeue(requeue);
            s.resumed_from(resumed_step);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use watchdog_testsupport::env_pairs as env;

    #[test]
    fn the_key_is_the_users_then_the_jobs_then_default() {
        assert_eq!(run_key(&env(&[("WATCHDOG_RUN_KEY", "bert")])), "bert");
        assert_eq!(
            run_key(&env(&[("SLURM_JOB_ID", "12"), ("WATCHDOG_RUN_KEY", "")])),
            "slurm-12"
        );
        assert_eq!(run_key(&env(&[("WATCHDOG_RUN_KEY", "a\nb")])), "default");
        assert_eq!(run_key(&[]), "default");
    }

    fn checkpoint(path: &Path, step: u64) -> Checkpoint {
        let (size, mtime_ns) = measure(path).unwrap();
        Checkpoint {
            path: path.to_path_buf(),
            step: Some(step),
            time_unix: 1.0,
            size,
            mtime_ns,
        }
    }

    #[test]
    fn a_run_resumes_from_its_own_newest_complete_checkpoint_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, other) = (
            dir.path().join("a.pt"),
            dir.path().join("b.pt"),
            dir.path().join("o.pt"),
        );
        for p in [&a, &b, &other] {
            std::fs::write(p, b"weights").unwrap();
        }
        let mut mine = Book::new(None, dir.path(), "slurm-1".into(), 1);
        let mut theirs = Book::new(None, dir.path(), "slurm-2".into(), 1);
        mine.add(&checkpoint(&a, 10));
        mine.add(&checkpoint(&b, 20));
        theirs.add(&checkpoint(&other, 99));
        mine.set_verdict("runtime_limit");
        let text = std::fs::read_to_string(dir.path().join(".watchdog-checkpoints.json")).unwrap();
        assert!(text.contains("\"path\":\"b.pt\""), "relative: {text}");
        let r = mine.resume().unwrap();
        assert_eq!((r.path.clone(), r.step), (b.clone(), Some(20)));
        assert_eq!(r.verdict.as_deref(), Some("runtime_limit"));
        assert_eq!(theirs.resume().unwrap().step, Some(99));
        // A changed checkpoint is not offered: the one before it is.
        std::fs::write(&b, b"half-written").unwrap();
        assert_eq!(mine.resume().unwrap().path, a);
        std::fs::remove_file(&a).unwrap();
        assert_eq!(mine.resume(), None);
    }

    #[test]
    fn a_record_that_is_a_symlink_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"precious").unwrap();
        let record = dir.path().join(".watchdog-checkpoints.json");
        std::os::unix::fs::symlink(&target, &record).unwrap();
        let ckpt = dir.path().join("c.pt");
        std::fs::write(&ckpt, b"w").unwrap();
        let mut book = Book::new(None, dir.path(), "k".into(), 1);
        book.add(&checkpoint(&ckpt, 1));
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(
            std::fs::symlink_metadata(&record)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
