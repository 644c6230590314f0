//! Wall time since the target started, against the runtime limit the platform imposes.
//!
//! Free notebook runtimes end after 12 hours, SLURM kills a job at its end time: a run that
//! does not checkpoint before then loses its work. [`runtime_limit`] decides the limit from
//! the command line or the target's environment (pure, table-tested), and the [`Runtime`]
//! source reports `runtime`: used = now - the target's start time, limit = that limit, both in
//! milliseconds. Time is measured from the target's own start (`starttime` of
//! `/proc/PID/stat`), so attaching late still counts right.
//!
//! Order of precedence: `--max-runtime`, then `--deadline`, then `SLURM_JOB_END_TIME` (unix
//! seconds, set by Slurm in every job's environment), then the known notebook platforms:
//! Google Colab (`COLAB_RELEASE_TAG` or `COLAB_GPU` set; the free tier's session cap is 12 h
//! from the runtime's start) and Kaggle (`KAGGLE_KERNEL_RUN_TYPE` set; 12 h per session). For
//! the platforms the runtime's start is taken to be the target's start: a kernel restarted
//! inside an older runtime makes that an overestimate of the time left, which is why the
//! description says where the limit came from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use watchdog_types::{ResourceId, ResourceKind, Sample};

use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// Session cap of Google Colab's free tier and of Kaggle notebooks.
pub const NOTEBOOK_SESSION_CAP: Duration = Duration::from_secs(12 * 3600);

fn env_get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Formats a duration as `3h12m`, `4m05s` or `12s` for descriptions.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// Time from `start` to `end`, zero when `end` is earlier.
fn since(start: SystemTime, end: SystemTime) -> Duration {
    end.duration_since(start).unwrap_or(Duration::ZERO)
}

/// The runtime limit, measured from `target_start`, and where it came from. Pure.
///
/// `env` is the *target's* environment ([`process_environ`](crate::tree::process_environ)).
/// `now` only feeds the description (`ends in 3h12m`). A deadline or end time already
/// before the target's start gives a zero limit, which alerts at once.
pub fn runtime_limit(
    env: &[(String, String)],
    now: SystemTime,
    target_start: SystemTime,
    explicit_max_runtime: Option<Duration>,
    explicit_deadline: Option<SystemTime>,
) -> Option<(Duration, String)> {
    if let Some(max) = explicit_max_runtime {
        return Some((max, format!("--max-runtime {}", human_duration(max))));
    }
    if let Some(deadline) = explicit_deadline {
        return Some((
            since(target_start, deadline),
            format!("--deadline (in {})", human_duration(since(now, deadline))),
        ));
    }
    if let Some(secs) =
        env_get(env, "SLURM_JOB_END_TIME").and_then(|raw| raw.trim().parse::<u64>().ok())
    {
        let end = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        return Some((
            since(target_start, end),
            format!(
                "SLURM_JOB_END_TIME={secs} (the job ends in {})",
                human_duration(since(now, end))
            ),
        ));
    }
    for var in ["COLAB_RELEASE_TAG", "COLAB_GPU"] {
        if env_get(env, var).is_some() {
            return Some((
                NOTEBOOK_SESSION_CAP,
                format!("Google Colab free-tier 12 h session cap ({var} set)"),
            ));
        }
    }
    if let Some(kind) = env_get(env, "KAGGLE_KERNEL_RUN_TYPE") {
        return Some((
            NOTEBOOK_SESSION_CAP,
            format!("Kaggle 12 h session cap (KAGGLE_KERNEL_RUN_TYPE={kind})"),
        ));
    }
    None
}

/// The limit of a `runtime` source: fixed, or an end someone else keeps up to date.
#[derive(Debug)]
enum Limit {
    /// Milliseconds from the target's start.
    Fixed(u64),
    /// The end in unix milliseconds (`u64::MAX`: none known), and the target's start.
    Until {
        end_unix_ms: Arc<AtomicU64>,
        start_unix_ms: u64,
    },
}

/// The `runtime` source: milliseconds since the target started against the limit.
#[derive(Debug)]
pub struct Runtime {
    id: ResourceId,
    limit: Limit,
    /// Target's age when the source was made, and the monotonic instant of that reading:
    /// the age advances with the monotonic clock, immune to wall-clock steps.
    age_at_anchor: Duration,
    anchor: Instant,
}

impl Runtime {
    /// Registers `runtime` with `limit` measured from `target_start`; `source` says where the
    /// limit came from (the description from [`runtime_limit`]).
    pub fn new(
        target_start: SystemTime,
        limit: Duration,
        source: String,
        table: &mut ResourceTable,
    ) -> Self {
        let id = table.register(ResourceKind::Runtime, "runtime".into(), source);
        Self {
            id,
            limit: Limit::Fixed(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)),
            age_at_anchor: since(target_start, SystemTime::now()),
            anchor: Instant::now(),
        }
    }

    /// Registers `runtime` with the limit at `end_unix_ms` (unix milliseconds, `u64::MAX`
    /// while none is known), read at every sample: an end that a scheduler moves.
    pub fn until(
        target_start: SystemTime,
        end_unix_ms: Arc<AtomicU64>,
        source: String,
        table: &mut ResourceTable,
    ) -> Self {
        let id = table.register(ResourceKind::Runtime, "runtime".into(), source);
        let start_unix_ms = since(SystemTime::UNIX_EPOCH, target_start).as_millis();
        Self {
            id,
            limit: Limit::Until {
                end_unix_ms,
                start_unix_ms: u64::try_from(start_unix_ms).unwrap_or(u64::MAX),
            },
            age_at_anchor: since(target_start, SystemTime::now()),
            anchor: Instant::now(),
        }
    }

    /// The limit now, milliseconds from the target's start (`u64::MAX`: none).
    fn limit_ms(&self) -> u64 {
        match &self.limit {
            Limit::Fixed(ms) => *ms,
            Limit::Until {
                end_unix_ms,
                start_unix_ms,
            } => match end_unix_ms.load(Ordering::Relaxed) {
                u64::MAX => u64::MAX,
                // An end before the start alerts at once (0 is "unlimited" to the predictor).
                end => end.saturating_sub(*start_unix_ms).max(1),
            },
        }
    }

    /// The registered resource's id.
    pub fn id(&self) -> ResourceId {
        self.id
    }

    /// The target's age now.
    pub fn age(&self) -> Duration {
        self.age_at_anchor + self.anchor.elapsed()
    }
}

impl Source for Runtime {
    fn name(&self) -> &str {
        "runtime"
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        out(Sample {
            resource: self.id,
            t_ns: tick.now_ns,
            used: u64::try_from(self.age().as_millis()).unwrap_or(u64::MAX),
            limit: self.limit_ms(),
        });
        Ok(Outcome::Sampled)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_testsupport::env_pairs as env;

    #[test]
    #[allow(clippy::type_complexity)]
    fn limit_discovery_table() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
        let now = t0 + Duration::from_secs(600);
        let h = |n: u64| Duration::from_secs(n * 3600);
        let slurm = env(&[("SLURM_JOB_END_TIME", "1790007200")]);
        let colab = env(&[("COLAB_RELEASE_TAG", "release-colab_20261101-060000_RC00")]);
        let cases: Vec<(
            &str,
            Vec<(String, String)>,
            Option<Duration>,
            Option<SystemTime>,
            Option<(Duration, &str)>,
        )> = vec![
            ("nothing known", env(&[("HOME", "/root")]), None, None, None),
            (
                "flag wins over slurm",
                slurm.clone(),
                Some(h(1)),
                None,
                Some((h(1), "--max-runtime 1h00m")),
            ),
            (
                "deadline wins over slurm",
                slurm.clone(),
                None,
                Some(t0 + h(3)),
                Some((h(3), "--deadline (in 2h50m)")),
            ),
            (
                "slurm",
                slurm.clone(),
                None,
                None,
                Some((
                    h(2),
                    "SLURM_JOB_END_TIME=1790007200 (the job ends in 1h50m)",
                )),
            ),
            (
                "bad slurm value falls through",
                env(&[("SLURM_JOB_END_TIME", "soon")]),
                None,
                None,
                None,
            ),
            (
                "colab",
                colab.clone(),
                None,
                None,
                Some((
                    h(12),
                    "Google Colab free-tier 12 h session cap (COLAB_RELEASE_TAG set)",
                )),
            ),
            (
                "colab gpu",
                env(&[("COLAB_GPU", "1")]),
                None,
                None,
                Some((
                    h(12),
                    "Google Colab free-tier 12 h session cap (COLAB_GPU set)",
                )),
            ),
            (
                "kaggle",
                env(&[("KAGGLE_KERNEL_RUN_TYPE", "Interactive")]),
                None,
                None,
                Some((
                    h(12),
                    "Kaggle 12 h session cap (KAGGLE_KERNEL_RUN_TYPE=Interactive)",
                )),
            ),
            (
                "slurm before colab",
                [slurm.clone(), colab.clone()].concat(),
                None,
                None,
                Some((
                    h(2),
                    "SLURM_JOB_END_TIME=1790007200 (the job ends in 1h50m)",
                )),
            ),
            (
                "deadline in the past is zero",
                vec![],
                None,
                Some(t0 - h(1)),
                Some((Duration::ZERO, "--deadline (in 0s)")),
            ),
        ];
        for (what, env, max, deadline, want) in cases {
            let got = runtime_limit(&env, now, t0, max, deadline);
            let want = want.map(|(d, s)| (d, s.to_string()));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(Duration::from_secs(12)), "12s");
        assert_eq!(human_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(human_duration(Duration::from_secs(3 * 3600 + 720)), "3h12m");
    }

    #[test]
    fn source_counts_from_the_target_start() {
        let mut table = ResourceTable::default();
        let start = SystemTime::now() - Duration::from_secs(60);
        let mut rt = Runtime::new(
            start,
            Duration::from_secs(120),
            "--max-runtime 2m".into(),
            &mut table,
        );
        let mut got = Vec::new();
        rt.sample(
            &Tick {
                now_ns: 0,
                tree: &[],
            },
            &mut |s| got.push(s),
        )
        .unwrap();
        assert_eq!(got[0].limit, 120_000);
        assert!((60_000..61_000).contains(&got[0].used), "{}", got[0].used);
        assert_eq!(table.get(rt.id()).unwrap().source, "--max-runtime 2m");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod until_tests {
    use super::*;

    fn sample(source: &mut Runtime) -> Sample {
        let mut got = None;
        let tick = Tick {
            now_ns: 1,
            tree: &[],
        };
        source.sample(&tick, &mut |s| got = Some(s)).unwrap();
        got.unwrap()
    }

    #[test]
    fn an_end_that_moves_is_the_limit_at_each_sample() {
        let mut table = ResourceTable::default();
        let start = SystemTime::now() - Duration::from_secs(60);
        let start_ms = start
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let end = Arc::new(AtomicU64::new(u64::MAX));
        let mut source = Runtime::until(start, end.clone(), "slurm".into(), &mut table);
        assert_eq!(sample(&mut source).limit, u64::MAX, "no end known yet");
        end.store(start_ms + 120_000, Ordering::Relaxed);
        let s = sample(&mut source);
        assert_eq!(s.limit, 120_000);
        assert!((59_000..65_000).contains(&s.used), "{}", s.used);
        end.store(start_ms + 90_000, Ordering::Relaxed);
        assert_eq!(sample(&mut source).limit, 90_000, "moved earlier");
        end.store(start_ms - 1, Ordering::Relaxed);
        assert_eq!(sample(&mut source).limit, 1, "already past: alerts at once");
    }
}
