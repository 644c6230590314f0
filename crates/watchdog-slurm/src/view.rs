//! What the controller says of one job: `squeue -h -j ID -o '%e %T %r'` with
//! `SLURM_TIME_FORMAT=%s` ([`parse_view`]) and `scontrol show job -o ID` ([`parse_facts`]).
//! Pure.

/// One job as `squeue` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    /// The job's end, unix seconds; `None` when it has no time limit (`UNLIMITED`, or an
    /// end squeue does not know).
    pub end_unix: Option<u64>,
    /// `%T`: `RUNNING`, `PENDING`, `COMPLETING`, `TIMEOUT`, `CANCELLED`, `PREEMPTED`, ...
    pub state: String,
    /// `%r`: why the job is in that state (`None`, `TimeLimit`, `BeginTime`, ...).
    pub reason: String,
}

/// How the controller says a job ended (or is ending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// Its time limit (`TIMEOUT`, or `Reason=TimeLimit`).
    TimeLimit,
    /// `scancel` (`CANCELLED`).
    Cancelled,
    /// Preempted by a job of higher priority (`PREEMPTED`).
    Preempted,
}

impl JobView {
    /// The end the state or reason shows, if any.
    pub fn end(&self) -> Option<JobEnd> {
        let state = self.state.to_ascii_uppercase();
        if state.starts_with("TIMEOUT") || self.reason.eq_ignore_ascii_case("TimeLimit") {
            Some(JobEnd::TimeLimit)
        } else if state.starts_with("PREEMPT") {
            Some(JobEnd::Preempted)
        } else if state.starts_with("CANCEL") {
            Some(JobEnd::Cancelled)
        } else {
            None
        }
    }
}

/// Parses the one line `squeue -h -j ID -o '%e %T %r'` printed with
/// `SLURM_TIME_FORMAT=%s`; `None` for anything else (no line, several jobs, a forged
/// state).
pub fn parse_view(output: &str) -> Option<JobView> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    let mut fields = line.split_whitespace();
    let end = fields.next()?;
    let state = fields.next()?;
    let reason = fields.collect::<Vec<_>>().join(" ");
    if !word(state) || !(reason.is_empty() || reason.split(' ').all(word)) {
        return None;
    }
    let end_unix = match end.parse::<u64>() {
        Ok(0) => None,
        Ok(secs) => Some(secs),
        // UNLIMITED, Unknown, N/A, NONE: no end.
        _ if end.bytes().all(|b| b.is_ascii_alphabetic() || b == b'/') => None,
        _ => return None,
    };
    Some(JobView {
        end_unix,
        state: state.to_string(),
        reason,
    })
}

/// A state or reason as SLURM spells them (`RUNNING`, `TimeLimit`, `QOSMaxWallDurationPerJobLimit`):
/// anything else printed there is not trusted.
fn word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-:,()".contains(&b))
}

/// What `scontrol show job -o` says that decides whether a requeue can work.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct JobFacts {
    /// `Requeue=1`: the job may be requeued.
    pub requeue: Option<bool>,
    /// `BatchFlag=1`: a batch job (only those can be requeued).
    pub batch: Option<bool>,
    /// `Restarts=N`.
    pub restarts: Option<u32>,
    /// `JobState=`: `RUNNING`, `COMPLETING`, `TIMEOUT`, `CANCELLED`, `PREEMPTED`, ...
    pub state: Option<String>,
    /// `Reason=`: `None`, `TimeLimit`, `BeginTime`, ...
    pub reason: Option<String>,
}

impl JobFacts {
    /// Whether the job was requeued since the allocation `restart_count` began.
    pub fn requeued(&self, restart_count: u32) -> bool {
        self.restarts.is_some_and(|r| r > restart_count)
    }

    /// How the job is ending, for a job whose process was just ended by SIGTERM and which
    /// was in its allocation `restart_count`. Measured on SLURM 22.05 from inside the job
    /// during `KillWait`: a time limit shows `COMPLETING` with `Reason=TimeLimit`, a
    /// `scancel` `COMPLETING` with `Reason=None`, a requeue the same with `Restarts` one
    /// higher; once complete the state is `TIMEOUT`, `CANCELLED` or `PREEMPTED`.
    pub fn ending(&self, restart_count: u32) -> Option<JobEnd> {
        let state = self.state.as_deref().unwrap_or("").to_ascii_uppercase();
        let reason = self.reason.as_deref().unwrap_or("");
        if state.starts_with("TIMEOUT") || reason.eq_ignore_ascii_case("TimeLimit") {
            return Some(JobEnd::TimeLimit);
        }
        if state.starts_with("PREEMPT") || reason.to_ascii_lowercase().contains("preempt") {
            return Some(JobEnd::Preempted);
        }
        if self.requeued(restart_count) {
            // Requeued (by `scontrol requeue`): the job comes back; not an end.
            return None;
        }
        if state.starts_with("CANCEL") || state.starts_with("COMPLETING") {
            return Some(JobEnd::Cancelled);
        }
        None
    }
}

/// Parses `scontrol show job -o ID`'s one line (space-separated `Key=Value` fields; only
/// the single-word fields read here are trusted).
pub fn parse_facts(output: &str) -> JobFacts {
    let mut facts = JobFacts::default();
    for field in output.split_whitespace() {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        let flag = || match value {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        match key {
            "Requeue" => facts.requeue = flag(),
            "BatchFlag" => facts.batch = flag(),
            "Restarts" => facts.restarts = value.parse().ok(),
            "JobState" if word(value) => facts.state = Some(value.to_string()),
            "Reason" if word(value) => facts.reason = Some(value.to_string()),
            _ => {}
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_running_job_with_a_time_limit() {
        let v = parse_view("1795864321 RUNNING None\n").unwrap();
        assert_eq!(v.end_unix, Some(1_795_864_321));
        assert_eq!((v.state.as_str(), v.reason.as_str()), ("RUNNING", "None"));
        assert_eq!(v.end(), None);
    }

    #[test]
    fn ends_the_controller_reports() {
        let end = |s: &str| parse_view(s).unwrap().end();
        assert_eq!(end("1795864321 TIMEOUT TimeLimit"), Some(JobEnd::TimeLimit));
        assert_eq!(
            end("1795864321 COMPLETING TimeLimit"),
            Some(JobEnd::TimeLimit)
        );
        assert_eq!(end("1795864321 CANCELLED None"), Some(JobEnd::Cancelled));
        assert_eq!(end("1795864321 PREEMPTED None"), Some(JobEnd::Preempted));
        assert_eq!(end("1795864321 PENDING BeginTime"), None);
    }

    #[test]
    fn no_end_for_an_unlimited_job() {
        for end in ["UNLIMITED", "Unknown", "N/A", "NONE", "0"] {
            let v = parse_view(&format!("{end} RUNNING None")).unwrap();
            assert_eq!(v.end_unix, None, "{end}");
        }
    }

    #[test]
    fn anything_else_is_no_answer() {
        for bad in [
            "",
            "\n",
            "1795864321",
            "1795864321 RUNNING None\n1795864322 RUNNING None\n",
            "-5 RUNNING None",
            "17958x RUNNING None",
            "1795864321 RUN\x1b[2J None",
            "slurm_load_jobs error: Invalid job id specified",
        ] {
            assert_eq!(parse_view(bad), None, "{bad:?}");
        }
    }

    /// What `scontrol show job -o` said from inside jobs during `KillWait` on the test
    /// cluster (SLURM 22.05.8, docs/slurm.md), and after.
    #[test]
    fn how_a_job_is_ending() {
        let end = |line: &str, restarts: u32| parse_facts(line).ending(restarts);
        assert_eq!(
            end("JobState=COMPLETING Reason=TimeLimit Restarts=0", 0),
            Some(JobEnd::TimeLimit)
        );
        assert_eq!(
            end("JobState=TIMEOUT Reason=TimeLimit Restarts=0", 0),
            Some(JobEnd::TimeLimit)
        );
        assert_eq!(
            end("JobState=COMPLETING Reason=None Restarts=0", 0),
            Some(JobEnd::Cancelled)
        );
        assert_eq!(
            end("JobState=CANCELLED Reason=None Restarts=1", 1),
            Some(JobEnd::Cancelled)
        );
        assert_eq!(
            end("JobState=COMPLETING Reason=None Restarts=1", 0),
            None,
            "requeued"
        );
        assert_eq!(
            end("JobState=PREEMPTED Reason=None Restarts=0", 0),
            Some(JobEnd::Preempted)
        );
        assert_eq!(
            end("JobState=RUNNING Reason=None Restarts=0", 0),
            None,
            "a kill by hand"
        );
        assert_eq!(end("", 0), None);
    }

    #[test]
    fn facts_of_scontrol_show_job() {
        let line = "JobId=5 JobName=train UserId=wdslurm(1001) JobState=RUNNING Reason=None \
                    Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 \
                    Command=/tmp/a b/job.sh WorkDir=/tmp/a b";
        let f = parse_facts(line);
        assert_eq!(f.requeue, Some(true));
        assert_eq!(f.batch, Some(true));
        assert_eq!(f.restarts, Some(0));
        assert_eq!(f.state.as_deref(), Some("RUNNING"));
        assert_eq!(f.reason.as_deref(), Some("None"));
        let f = parse_facts("JobId=6 Requeue=0 BatchFlag=0 Restarts=x");
        assert_eq!(
            (f.requeue, f.batch, f.restarts),
            (Some(false), Some(false), None)
        );
        assert_eq!(parse_facts("garbage"), JobFacts::default());
    }
}
