//! Once the watchdog reads a recorded tree (`WATCHDOG_ROOT`), no signal leaves it: its own
//! test binary, since `refuse_signals` holds for the rest of the process.

#![allow(clippy::unwrap_used)]

use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::Duration;

use watchdog_alerter::pidfd::{PidFd, PidFdError, refuse_signals, signals_refused};
use watchdog_procfs::ProcRoot;

#[test]
fn a_recorded_tree_refuses_every_signal_and_its_stand_in_sees_the_end() {
    // A real process that would die of SIGTERM: it must outlive the refused one.
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let real = PidFd::open(child.id()).unwrap();
    assert!(!signals_refused());
    real.send_signal(libc::SIGCONT).unwrap();

    refuse_signals();
    let err = real.send_signal(libc::SIGTERM).unwrap_err();
    assert!(matches!(err, PidFdError::Refused { .. }), "{err}");
    assert!(!err.is_gone());
    assert_eq!(
        err.to_string(),
        format!(
            "not sent SIGTERM to pid {}: the watchdog reads a recorded tree (WATCHDOG_ROOT), whose PIDs name no process of this machine",
            child.id()
        )
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the refused SIGTERM arrived"
    );
    let _ = child.kill();
    let _ = child.wait();

    // A recorded process: alive while its directory exists.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("4242")).unwrap();
    let proc = ProcRoot::recorded(dir.path());
    let exit: OwnedFd = proc.exit_fd(4242).unwrap();
    let stand_in = PidFd::stand_in(exit, 4242);
    assert!(!stand_in.is_exited().unwrap());
    assert!(!stand_in.wait_exit(Some(Duration::from_millis(50))).unwrap());
    assert!(matches!(
        stand_in.send_signal(libc::SIGUSR1),
        Err(PidFdError::Refused { pid: 4242, .. })
    ));
    std::fs::remove_dir(dir.path().join("4242")).unwrap();
    assert!(stand_in.wait_exit(Some(Duration::from_secs(5))).unwrap());
    assert!(stand_in.is_exited().unwrap());
    // No wait status for a recorded process.
    assert!(stand_in.exit_status().is_err());
}
