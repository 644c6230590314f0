//! The controller's two commands, run with a timeout: `squeue` of one job, and
//! `scontrol requeue` / `scontrol show job` of one job. Never a query of all jobs.

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt as _;

use crate::view::{JobFacts, JobView, parse_facts, parse_view};

/// Most bytes of a command's output read.
const MAX_OUTPUT: u64 = 64 * 1024;

/// The PIDs of the controller's commands running now, for
/// [`is_controller_command`]. Held while one is spawned, so that no caller sees its PID
/// before it is listed.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Whether `pid` is one of the controller's commands this process started and has not
/// reaped yet: a `run` watchdog, which adopts its own children as the run's, leaves these
/// out (and never reaps them: their status is this crate's).
pub fn is_controller_command(pid: u32) -> bool {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&pid)
}

/// Why the controller gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command ran past the timeout and was killed.
    #[error("{command} did not answer within {timeout:?}")]
    Timeout {
        /// The command.
        command: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The command failed (the job is gone, the controller is down).
    #[error("{command} failed: {message}")]
    Failed {
        /// The command.
        command: String,
        /// Its first line on stderr, or its exit status.
        message: String,
    },
    /// The command's output was not what it prints.
    #[error("{command} printed {output:?}, expected one line '<end> <state> <reason>'")]
    Unreadable {
        /// The command.
        command: String,
        /// What it printed (cut).
        output: String,
    },
}

/// How the SLURM commands are found and run.
#[derive(Clone, Debug)]
pub struct Controller {
    squeue: PathBuf,
    scontrol: PathBuf,
    /// `None`: the watchdog's own environment (a user's `SLURM_CONF` reaches the command);
    /// `Some`: exactly these variables.
    env: Option<Vec<(OsString, OsString)>>,
    timeout: Duration,
}

impl Controller {
    /// The commands as the user's shell finds them (`PATH`), with the watchdog's own
    /// environment; `/usr/bin` when `PATH` has none.
    pub fn of_user(timeout: Duration) -> Controller {
        Controller {
            squeue: on_path("squeue"),
            scontrol: on_path("scontrol"),
            env: None,
            timeout,
        }
    }

    /// The commands in `bin_dir` by absolute path, with an empty environment but the
    /// watchdog's own `SLURM_CONF`, if it has one (the service: no user's variable reaches
    /// them; the administrator's unit may name the cluster's configuration).
    pub fn in_dir(bin_dir: &Path, timeout: Duration) -> Controller {
        let conf = std::env::var_os("SLURM_CONF").map(|v| (OsString::from("SLURM_CONF"), v));
        Controller {
            squeue: bin_dir.join("squeue"),
            scontrol: bin_dir.join("scontrol"),
            env: Some(conf.into_iter().collect()),
            timeout,
        }
    }

    /// Job `id` as `squeue -h -j ID -o '%e %T %r'` shows it, times as unix seconds.
    pub fn view(&self, id: u64) -> Result<JobView, ControllerError> {
        let id = id.to_string();
        let args = ["-h", "-j", id.as_str(), "-o", "%e %T %r"];
        let (command, out) = self.run(&self.squeue, &args)?;
        parse_view(&out).ok_or_else(|| ControllerError::Unreadable {
            command,
            output: out.chars().take(200).collect(),
        })
    }

    /// What `scontrol show job -o ID` says of requeueing job `id`.
    pub fn facts(&self, id: u64) -> Result<JobFacts, ControllerError> {
        let id = id.to_string();
        let (_, out) = self.run(&self.scontrol, &["show", "job", "-o", id.as_str()])?;
        Ok(parse_facts(&out))
    }

    /// `scontrol requeue ID`: the job is ended and put back in the queue with its ID.
    pub fn requeue(&self, id: u64) -> Result<(), ControllerError> {
        let id = id.to_string();
        self.run(&self.scontrol, &["requeue", id.as_str()])
            .map(|_| ())
    }

    /// Runs `program args`, returning the command as text and its standard output.
    fn run(&self, program: &Path, args: &[&str]) -> Result<(String, String), ControllerError> {
        let command = format!("{} {}", program.display(), args.join(" "));
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("SLURM_TIME_FORMAT", "%s")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(env) = &self.env {
            cmd.env_clear().envs(env.iter().cloned());
            cmd.env("SLURM_TIME_FORMAT", "%s");
        }
        let mut child = {
            let mut running = RUNNING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let child = cmd.spawn().map_err(|source| ControllerError::Spawn {
                command: command.clone(),
                source,
            })?;
            running.push(child.id());
            child
        };
        let pid = child.id();
        let reaped = || {
            RUNNING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|&p| p != pid);
        };
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                if let Some(pipe) = pipe {
                    let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut text);
                }
                String::from_utf8_lossy(&text).into_owned()
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
        let status = match child.wait_timeout(self.timeout) {
            Ok(Some(status)) => {
                reaped();
                status
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                reaped();
                return Err(ControllerError::Timeout {
                    command,
                    timeout: self.timeout,
                });
            }
        };
        let out = stdout.join().unwrap_or_default();
        let err = stderr.join().unwrap_or_default();
        if !status.success() {
            let message = err
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().chars().take(200).collect())
                .unwrap_or_else(|| status.to_string());
            return Err(ControllerError::Failed { command, message });
        }
        Ok((command, out))
    }
}

/// `name` in a directory of `PATH`, else in `/usr/bin`.
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| Path::new("/usr/bin").join(name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A directory with a fake `squeue` and `scontrol` running `body` (a shell script's body).
    fn fake(body: &str) -> (tempfile::TempDir, Controller) {
        let dir = watchdog_testsupport::scratch();
        for name in ["squeue", "scontrol"] {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let c = Controller::in_dir(dir.path(), Duration::from_millis(500));
        (dir, c)
    }

    #[test]
    fn the_view_is_asked_of_one_job_with_unix_times_and_no_user_environment() {
        // The fake prints its arguments and what it was given, as squeue's one line.
        let (_d, c) = fake(
            r#"[ "$*" = "-h -j 42 -o %e %T %r" ] && [ "$SLURM_TIME_FORMAT" = "%s" ] && [ -z "$HOME" ] && echo "1795864321 RUNNING None""#,
        );
        let v = c.view(42).unwrap();
        assert_eq!(v.end_unix, Some(1_795_864_321));
    }

    #[test]
    fn a_controller_that_does_not_answer_is_an_error_within_the_timeout() {
        let (_d, c) = fake("exec sleep 30");
        let t = std::time::Instant::now();
        let e = c.view(1).unwrap_err();
        assert!(matches!(e, ControllerError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_gone_job_says_what_squeue_said() {
        let (_d, c) = fake("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
        let e = c.view(7).unwrap_err().to_string();
        assert!(e.contains("Invalid job id specified"), "{e}");
        let (_d, c) = fake("echo 'garbage'");
        assert!(matches!(c.view(7), Err(ControllerError::Unreadable { .. })));
    }

    #[test]
    fn a_missing_command_is_an_error_not_a_panic() {
        let c = Controller::in_dir(Path::new("/nonexistent"), Duration::from_secs(1));
        assert!(matches!(c.view(1), Err(ControllerError::Spawn { .. })));
        assert!(c.requeue(1).is_err());
    }
}
