//! `watchdog-slurm`: what the watchdog knows of a SLURM job, and the two questions it asks
//! the controller.
//!
//! A run is in a SLURM job when its environment says so ([`Job::from_env`]) or, for the
//! service, when its memory cgroup lies under a job's ([`cgroup::job_of_path`], the only
//! source the service trusts). The job's end comes from `SLURM_JOB_END_TIME` where SLURM
//! sets it (23.02 and later), else from one `squeue` of that job alone ([`Controller::view`],
//! parsed by [`parse_view`]); the requeue after a save is one `scontrol requeue`
//! ([`Controller::requeue`]). Parsing is pure and tested with the text a real SLURM 22.05
//! printed; the commands run with a timeout, and a controller that does not answer is an
//! error the caller reports once, never a wait. [`EndPoller`] asks on a thread of its own.
//!
//! SLURM's documentation of what is read here: `man squeue` (`%e`, `%T`, `%r`,
//! `SLURM_TIME_FORMAT`), `man scontrol` (`requeue`, `show job`), `man sbatch` (the
//! environment), <https://slurm.schedmd.com/cgroup_v2.html> (the cgroup layout).

#![deny(missing_docs)]

pub mod cgroup;
mod controller;
mod job;
mod poll;
mod view;

pub use controller::{Controller, ControllerError, is_controller_command};
pub use job::Job;
pub use poll::{EndPoller, EndReading, News};
pub use view::{JobEnd, JobFacts, JobView, parse_facts, parse_view};
