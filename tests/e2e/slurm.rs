//! `run` inside a SLURM job, against a controller this test plays: a `squeue` on `PATH`
//! that answers slowly. The real cluster's tests are `tests/slurm` (docs/slurm.md).

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// The watchdog's own `squeue`, still running when the command exits, is not a process of
/// the run: the watch ends with the command, and the summary names no survivor.
#[test]
fn the_controllers_command_is_not_a_process_of_the_run() {
    let dir = scratch();
    let squeue = dir.path().join("squeue");
    std::fs::write(
        &squeue,
        "#!/bin/sh\nsleep 6\necho \"$(( $(date +%s) + 3600 )) RUNNING None\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_watchdog"))
        .current_dir(dir.path())
        .env("PATH", path)
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_PROCID", "0")
        .args([
            "--gpu",
            "off",
            "--no-notify",
            "run",
            "--",
            "sh",
            "-c",
            "sleep 2",
        ])
        .output()
        .unwrap();
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        !text.contains("(squeue)"),
        "squeue taken for the run's: {text}"
    );
    assert!(!text.contains("still running"), "{text}");
    // The command ran 2 s; the slow squeue runs 6 s from the start and was not waited for.
    assert!(
        took < Duration::from_secs(5),
        "the watch waited {took:?} for its own squeue: {text}"
    );
}

/// `run` never dies of a signal whose default would end it (docs/slurm.md, "Signals the
/// scheduler sends"): sent to the watchdog, each is passed to a command that catches it,
/// and said and not passed to one that does not; the run goes on to its own end.
#[test]
fn run_never_dies_of_a_signal_it_does_not_use() {
    let child = Command::new(env!("CARGO_BIN_EXE_watchdog"))
        .args(["--gpu", "off", "--no-notify", "run", "--", "sleep", "5"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once its handlers are in (SigCgt has SIGSTKFLT), however busy the machine.
    let caught = wait_for(Duration::from_secs(20), || {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (libc::SIGSTKFLT - 1)) != 0)
    });
    assert!(caught, "the watchdog never caught SIGSTKFLT");
    for sig in ["STKFLT", "PWR", "VTALRM", "RTMIN+3"] {
        let sent = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "{sig}");
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for sig in ["SIGSTKFLT", "SIGPWR", "SIGVTALRM"] {
        assert!(
            text.contains(&format!("received {sig}: not forwarded")),
            "{sig}: {text}"
        );
    }
}
