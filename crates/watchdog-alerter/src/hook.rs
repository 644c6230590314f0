//! The `--on-alert` hook: a user command run through `sh -c` on every alert.
//!
//! [`run_hook`] spawns the command and returns at once: a background thread waits for
//! it and logs its exit status, so a slow hook never delays sampling or the next alert.
//! The command gets the watchdog's environment plus the `WATCHDOG_*` variables built
//! by [`hook_env`]. Its stdin is `/dev/null`; stdout and stderr are inherited.
//!
//! `WATCHDOG_PID` means the same everywhere: the watchdog's own PID, in a hook as in the
//! environment `watchdog run` gives its command. The watched process is
//! `WATCHDOG_TARGET_PID` (hooks only; the `run` command is the target itself).

use std::io;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use crate::request::AlertRequest;

/// Spawning the hook failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot run the --on-alert hook `{cmd}` through sh -c: {source}")]
pub struct HookError {
    /// The command.
    pub cmd: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// A running hook. Dropping it is fine: the background thread still reaps the process and logs its status.
#[derive(Debug)]
pub struct HookHandle {
    /// The PID of the `sh` process.
    pub pid: u32,
    reaper: JoinHandle<io::Result<ExitStatus>>,
}

impl HookHandle {
    /// Blocks until the hook exits and returns its status (for tests and for a final flush at exit).
    pub fn wait(self) -> io::Result<ExitStatus> {
        self.reaper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the hook reaper thread panicked")))
    }
}

/// The `WATCHDOG_*` variables describing an alert: `WATCHDOG_RESOURCE`, `WATCHDOG_REASON`,
/// `WATCHDOG_USED`, `WATCHDOG_LIMIT`, `WATCHDOG_PREDICTED_S` (empty when unknown),
/// `WATCHDOG_PID` (the watchdog's own PID, `std::process::id()`, as in `watchdog run`'s
/// child), `WATCHDOG_TARGET_PID` (the watched target's PID, `req.pid`),
/// `WATCHDOG_REQUEST_FILE` (empty when none was written), `WATCHDOG_SIGNAL`, plus
/// `WATCHDOG_KIND`, `WATCHDOG_UNIT` and `WATCHDOG_SEQ`.
pub fn hook_env(req: &AlertRequest, request_file: Option<&Path>) -> Vec<(String, String)> {
    let v = |k: &str, val: String| (k.to_string(), val);
    vec![
        v("WATCHDOG_RESOURCE", req.resource.clone()),
        v("WATCHDOG_KIND", req.kind.clone()),
        v("WATCHDOG_REASON", req.reason.clone()),
        v("WATCHDOG_USED", req.used.to_string()),
        v("WATCHDOG_LIMIT", req.limit.to_string()),
        v("WATCHDOG_UNIT", req.unit.clone()),
        v(
            "WATCHDOG_PREDICTED_S",
            req.predicted_s
                .map(|s| format!("{s:.3}"))
                .unwrap_or_default(),
        ),
        v("WATCHDOG_PID", std::process::id().to_string()),
        v("WATCHDOG_TARGET_PID", req.pid.to_string()),
        v(
            "WATCHDOG_REQUEST_FILE",
            request_file
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
        v("WATCHDOG_SIGNAL", req.signal.clone()),
        v("WATCHDOG_SEQ", req.seq.to_string()),
    ]
}

/// Starts `sh -c cmd` with `env` added to the environment and returns without waiting.
/// The exit status is logged (info when 0, warn otherwise) by a background thread.
pub fn run_hook(cmd: &str, env: &[(String, String)]) -> Result<HookHandle, HookError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| HookError {
            cmd: cmd.to_string(),
            source,
        })?;
    let pid = child.id();
    let cmd_owned = cmd.to_string();
    let reaper = std::thread::Builder::new()
        .name("watchdog-hook".to_string())
        .spawn(move || {
            let status = child.wait();
            match &status {
                Ok(s) if s.success() => {
                    tracing::info!(pid, "--on-alert hook `{cmd_owned}` exited 0")
                }
                Ok(s) => tracing::warn!(pid, "--on-alert hook `{cmd_owned}` failed: {s}"),
                Err(e) => tracing::warn!(pid, "cannot wait for --on-alert hook `{cmd_owned}`: {e}"),
            }
            status
        })
        .map_err(|source| HookError {
            cmd: cmd.to_string(),
            source,
        })?;
    Ok(HookHandle { pid, reaper })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `WATCHDOG_PID` was the target's PID in hooks but the watchdog's PID in the `run`
    /// child's environment; hooks now agree with `run` and get the target separately.
    #[test]
    fn watchdog_pid_is_the_watchdogs_in_hooks_too() {
        let req = AlertRequest {
            seq: 4,
            resource: "disk:/data".into(),
            kind: "disk_bytes".into(),
            reason: "trend".into(),
            used: 9,
            limit: 10,
            unit: "bytes".into(),
            predicted_s: None,
            time: "2026-11-22T20:31:05.123Z".into(),
            time_unix: 1.0,
            pid: 4242,
            signal: "SIGUSR1".into(),
            watchdog_pid: 4141,
        };
        let env = hook_env(&req, None);
        assert_eq!(
            get(&env, "WATCHDOG_PID"),
            Some(std::process::id().to_string().as_str())
        );
        assert_eq!(get(&env, "WATCHDOG_TARGET_PID"), Some("4242"));
        assert_eq!(get(&env, "WATCHDOG_PREDICTED_S"), Some(""));
        assert_eq!(get(&env, "WATCHDOG_REQUEST_FILE"), Some(""));
        assert_eq!(get(&env, "WATCHDOG_SEQ"), Some("4"));
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }
}
