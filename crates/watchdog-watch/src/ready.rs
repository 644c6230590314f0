//! `--ready-fd N`: tells whoever started the watchdog that it is watching.
//!
//! A parent that starts the watchdog in the background (the Python client's `attach()`)
//! needs to know when the watch has begun, or why it never will, without sleeping a
//! fixed time. It leaves the write end of a pipe open as descriptor N and passes
//! `--ready-fd N`. Once the target is found, the request file checked and the first
//! log line written, the watchdog writes one JSON line to N and closes it:
//!
//! ```text
//! {"ready":true,"pid":1234,"watchdog_pid":1240,"request_file":"/run/user/0/watchdog-1234.request.json","recording":"/root/.local/state/watchdog/watchdog-1234-20261123T101500Z.recording.csv"}
//! ```
//!
//! (`recording` is `null` when none will be written.) `watchdog daemon` writes
//! `{"ready":true,"watchdog_pid":1240,"socket":"/run/watchdog/daemon.sock"}` once its
//! socket is bound. When the watchdog exits before
//! that, the parent reads end-of-file with no line, and the reason is the error line
//! on stderr. The descriptor is taken at start and marked close-on-exec, so neither
//! the `run` command nor a hook inherits it (a child holding it would keep the parent
//! from ever seeing end-of-file).

use std::io::Write;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use watchdog_types::quote::quote_value;

/// The descriptor given with `--ready-fd`, until the ready line is written.
static READY: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// Parses `--ready-fd`: a descriptor number of 3 or more.
pub fn parse_fd(s: &str) -> Result<i32, String> {
    match s.trim().parse::<i32>() {
        Ok(fd) if fd >= 3 => Ok(fd),
        _ => Err(format!(
            "invalid descriptor {}: expected the number (3 or more) of a pipe or file \
             the parent left open; 0, 1 and 2 are stdin, stdout and stderr",
            quote_value(s)
        )),
    }
}

/// Takes ownership of descriptor `fd` at start, before this process opens any file of
/// its own (so the number cannot name one of ours), and marks it close-on-exec.
pub fn take(fd: i32) -> Result<(), String> {
    let closed = || {
        format!(
            "invalid --ready-fd '{fd}': descriptor {fd} is not open; expected a descriptor \
             the parent left open (e.g. the write end of a pipe)"
        )
    };
    // SAFETY: only borrowed for this one call; fcntl on a number that is not open fails
    // with EBADF and touches nothing.
    let flags = rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(fd) });
    if flags.is_err() {
        return Err(closed());
    }
    // SAFETY: the descriptor is open (checked just above) and nothing in this process
    // owns it: it was inherited, `take` runs once before any file is opened, and `parse_fd`
    // refused 0, 1 and 2.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Err(e) = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC) {
        tracing::debug!("cannot mark --ready-fd {fd} close-on-exec: {e}");
    }
    if let Ok(mut slot) = READY.lock() {
        *slot = Some(owned);
    }
    Ok(())
}

/// Writes the ready line of a watch and closes the descriptor (once; later calls do
/// nothing).
pub fn notify(pid: u32, request_file: &Path, recording: Option<&Path>) {
    send(&serde_json::json!({
        "ready": true,
        "pid": pid,
        "watchdog_pid": std::process::id(),
        "request_file": request_file.to_string_lossy(),
        "recording": recording.map(|p| p.to_string_lossy()),
    }));
}

/// Writes the service's ready line (`watchdog daemon`: its socket is bound and it is
/// looking for runs) and closes the descriptor, before any run's watch could write its own.
pub fn notify_service(socket: &Path) {
    send(&serde_json::json!({
        "ready": true,
        "watchdog_pid": std::process::id(),
        "socket": socket.to_string_lossy(),
    }));
}

/// Writes `line` to the descriptor and closes it, if it is still held.
fn send(line: &serde_json::Value) {
    let Some(fd) = READY.lock().ok().and_then(|mut slot| slot.take()) else {
        return;
    };
    let mut file = std::fs::File::from(fd);
    // One write, so a reader never sees half a line before the end of file.
    if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
        // The parent went away or closed its end: nothing to tell, keep watching.
        tracing::debug!("cannot write the ready line: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fd_refuses_standard_streams_and_garbage() {
        assert_eq!(parse_fd("3"), Ok(3));
        assert_eq!(parse_fd(" 17 "), Ok(17));
        for bad in ["0", "1", "2", "-1", "x", "", "3\n4"] {
            let e = parse_fd(bad).expect_err(bad);
            assert!(e.contains("expected the number (3 or more)"), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn take_refuses_a_descriptor_that_is_not_open() {
        // A high number no test opens.
        let e = take(987_654).expect_err("not open");
        assert!(e.contains("descriptor 987654 is not open"), "{e}");
    }
}
