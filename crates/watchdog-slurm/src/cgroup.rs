//! The SLURM job a cgroup belongs to, from its path alone: the service trusts nothing a
//! user can set (the environment of a job's processes is the user's). Pure.
//!
//! The layouts (`doc/html/cgroup_v2.shtml`, `cgroup.conf(5)` of SchedMD/slurm; the v1 one
//! seen on the test cluster, SLURM 22.05):
//! - cgroup v1: `/slurm_<node>/uid_<U>/job_<J>/step_<S>/task_<T>` (or `/slurm/...`);
//! - cgroup v2: `/system.slice/slurmstepd.scope/job_<J>/step_<S>/user/task_<T>`.
//!
//! SLURM 26.05 names job folders by an internal ID unless `CgroupJobIdPaths=yes`: a job
//! folder that is not `job_` and digits is not taken, since its name is not the job's ID.

/// A job's cgroup, as its path names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCgroup {
    /// The job's ID.
    pub job: u64,
    /// The step (`batch`, `extern`, `0`, `1`, ...), when the path goes that deep.
    pub step: Option<String>,
    /// The job owner's UID, where the path says it (v1).
    pub uid: Option<u32>,
}

/// The job of cgroup `path` (as `/proc/PID/cgroup` names it), or `None` outside SLURM.
pub fn job_of_path(path: &str) -> Option<JobCgroup> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let digits = |s: &str| {
        (!s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    let step_name = |s: &str| {
        let name = s.strip_prefix("step_")?;
        (!name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then(|| name.to_string())
    };
    // v1: slurm or slurm_<node>, uid_<U>, job_<J>.
    if let Some(i) = parts
        .iter()
        .position(|p| *p == "slurm" || p.starts_with("slurm_"))
    {
        let uid = digits(parts.get(i + 1)?.strip_prefix("uid_")?)?;
        let job = digits(parts.get(i + 2)?.strip_prefix("job_")?)?;
        return Some(JobCgroup {
            job,
            step: parts.get(i + 3).and_then(|s| step_name(s)),
            uid: u32::try_from(uid).ok(),
        });
    }
    // v2: slurmstepd.scope, job_<J>.
    let i = parts.iter().position(|p| *p == "slurmstepd.scope")?;
    let job = digits(parts.get(i + 1)?.strip_prefix("job_")?)?;
    Some(JobCgroup {
        job,
        step: parts.get(i + 2).and_then(|s| step_name(s)),
        uid: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v1_layout_seen_on_the_test_cluster() {
        assert_eq!(
            job_of_path("/slurm_vm/uid_1001/job_12/step_batch/task_0"),
            Some(JobCgroup {
                job: 12,
                step: Some("batch".into()),
                uid: Some(1001)
            })
        );
        assert_eq!(
            job_of_path("/slurm/uid_0/job_3/step_0"),
            Some(JobCgroup {
                job: 3,
                step: Some("0".into()),
                uid: Some(0)
            })
        );
        assert_eq!(
            job_of_path("/slurm_n1/uid_5/job_8").map(|j| j.step),
            Some(None)
        );
    }

    #[test]
    fn the_v2_layout_of_the_slurm_documentation() {
        assert_eq!(
            job_of_path("/system.slice/slurmstepd.scope/job_4242/step_1/user/task_0"),
            Some(JobCgroup {
                job: 4242,
                step: Some("1".into()),
                uid: None
            })
        );
    }

    #[test]
    fn other_paths_and_internal_or_forged_names_are_not_jobs() {
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/slurmstepd.scope/system",
            // Slurm 26.05 without CgroupJobIdPaths=yes: an internal name, not the job ID.
            "/system.slice/slurmstepd.scope/job_a1b2c3/step_0",
            "/slurm_vm/uid_1001/job_12x/step_batch",
            "/slurm_vm/uid_x/job_12/step_batch",
            "/slurm_vm/uid_1/job_99999999999999999999999",
            "/docker/slurm/job_1",
        ] {
            assert_eq!(job_of_path(path), None, "{path}");
        }
    }
}
