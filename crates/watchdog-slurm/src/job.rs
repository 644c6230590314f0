//! The job a process belongs to, from its environment (`man sbatch`, OUTPUT ENVIRONMENT
//! VARIABLES). Pure.

/// A SLURM job as its environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// `SLURM_JOB_ID`: the job's own ID (an array task's own, not the array's).
    pub id: u64,
    /// `SLURM_JOB_END_TIME` (unix seconds), set by SLURM 23.02 and later.
    pub end_time: Option<u64>,
    /// `SLURM_PROCID`: the task's rank in its step (0 in a batch script).
    pub procid: Option<u32>,
    /// `SLURM_RESTART_COUNT`: how many times the job was requeued (0 when unset).
    pub restart_count: u32,
    /// Whether the job is one component of a heterogeneous job (`SLURM_HET_SIZE`).
    pub heterogeneous: bool,
}

impl Job {
    /// The job named by `env`, or `None` outside SLURM or when `SLURM_JOB_ID` is not a
    /// number.
    pub fn from_env(env: &[(String, String)]) -> Option<Job> {
        let get = |key: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.trim())
        };
        let id = get("SLURM_JOB_ID")?.parse::<u64>().ok()?;
        Some(Job {
            id,
            end_time: get("SLURM_JOB_END_TIME").and_then(|v| v.parse().ok()),
            procid: get("SLURM_PROCID").and_then(|v| v.parse().ok()),
            restart_count: get("SLURM_RESTART_COUNT")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            heterogeneous: get("SLURM_HET_SIZE").or(get("SLURM_PACK_SIZE")).is_some(),
        })
    }

    /// Job `id` as the service knows it: from its cgroup's path, nothing else.
    pub fn of_cgroup(id: u64) -> Job {
        Job {
            id,
            end_time: None,
            procid: None,
            restart_count: 0,
            heterogeneous: false,
        }
    }

    /// The run key of its checkpoint record and recordings: `slurm-<SLURM_JOB_ID>`.
    pub fn key(&self) -> String {
        format!("slurm-{}", self.id)
    }

    /// Whether this task leads the job (rank 0, or a batch script with no rank).
    pub fn leads(&self) -> bool {
        self.procid.unwrap_or(0) == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use watchdog_testsupport::env_pairs as env;

    #[test]
    fn a_batch_job_of_slurm_22_05_has_no_end_time() {
        // What a batch job's environment held on the test cluster (22.05.8), in part.
        let job = Job::from_env(&env(&[
            ("SLURM_JOB_ID", "17"),
            ("SLURM_PROCID", "0"),
            ("SLURM_MEM_PER_NODE", "400"),
        ]))
        .unwrap();
        assert_eq!(job.id, 17);
        assert_eq!(job.end_time, None);
        assert_eq!(job.restart_count, 0);
        assert!(job.leads() && !job.heterogeneous);
        assert_eq!(job.key(), "slurm-17");
    }

    #[test]
    fn requeued_ranked_heterogeneous_and_newer_jobs() {
        let job = Job::from_env(&env(&[
            ("SLURM_JOB_ID", "9"),
            ("SLURM_PROCID", "1"),
            ("SLURM_RESTART_COUNT", "2"),
            ("SLURM_JOB_END_TIME", "1790000000"),
            ("SLURM_HET_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(job.end_time, Some(1_790_000_000));
        assert_eq!(job.restart_count, 2);
        assert!(!job.leads() && job.heterogeneous);
    }

    #[test]
    fn no_job_outside_slurm_or_with_a_forged_id() {
        assert_eq!(Job::from_env(&env(&[("HOME", "/root")])), None);
        for bad in ["", "12;rm -rf /", "-1", "1 2", "abc"] {
            assert_eq!(
                Job::from_env(&env(&[("SLURM_JOB_ID", bad)])),
                None,
                "{bad:?}"
            );
        }
    }
}
