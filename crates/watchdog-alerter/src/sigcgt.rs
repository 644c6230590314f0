//! Which signals a process catches, from the `SigCgt:` line of `/proc/PID/status`.
//!
//! `SigCgt` is a 64-bit mask in hexadecimal; bit `N-1` set means the process has
//! installed a handler for signal `N` (see `proc_pid_status(5)` and
//! <https://docs.kernel.org/filesystems/proc.html>, table 1-2). The watchdog reads it
//! before every signal it sends: SIGUSR1's default action terminates the process,
//! so a process that does not catch the signal must never get it (util-linux
//! `kill --require-handler` and procps `pkill -H` do the same check).
//!
//! Parsing is pure ([`parse_sigcgt`], [`parse_status`]); [`read_status`] is the only
//! I/O and takes the proc root as a parameter so tests can point it at a temp tree.

use std::io;
use std::path::{Path, PathBuf};

/// The few fields of `/proc/PID/status` the alerter needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatusFields {
    /// `Tgid:` the thread-group (process) id; equals the pid for a process.
    pub tgid: Option<u32>,
    /// `PPid:` the parent's pid (0 for init and for a process whose parent is outside our pid namespace).
    pub ppid: Option<u32>,
    /// `SigCgt:` the mask of caught signals; bit `N-1` is signal `N`.
    pub sigcgt: Option<u64>,
    /// `SigIgn:` the mask of ignored signals (`SIG_IGN`), same layout.
    pub sigign: Option<u64>,
}

/// Parses the `SigCgt:` mask from the text of `/proc/PID/status`.
///
/// Returns `None` when the line is missing or is not hexadecimal. Only a line that
/// *starts* with `SigCgt:` counts: the kernel escapes newlines in the `Name:` field,
/// so a hostile process name cannot forge the line.
pub fn parse_sigcgt(status_text: &str) -> Option<u64> {
    parse_status(status_text).sigcgt
}

/// A signal mask: the kernel prints exactly 16 hex digits; refuse anything longer rather than guess.
fn parse_mask(value: &str) -> Option<u64> {
    if value.is_empty() || value.len() > 16 {
        None
    } else {
        u64::from_str_radix(value, 16).ok()
    }
}

/// Parses `Tgid:`, `PPid:`, `SigIgn:` and `SigCgt:` from the text of `/proc/PID/status`.
pub fn parse_status(status_text: &str) -> StatusFields {
    let mut out = StatusFields::default();
    for line in status_text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Tgid" => out.tgid = value.parse().ok(),
            "PPid" => out.ppid = value.parse().ok(),
            "SigIgn" => out.sigign = parse_mask(value),
            "SigCgt" => {
                out.sigcgt = parse_mask(value);
                // SigCgt comes after Tgid and PPid; nothing later is needed.
                break;
            }
            _ => {}
        }
    }
    out
}

/// Whether `mask` (a `SigCgt` value) says signal `sig` is caught. Signals outside 1..=64 are never caught.
pub fn catches(mask: u64, sig: i32) -> bool {
    (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0
}

/// The path of `/proc/PID/status` under `proc_root`.
pub fn status_path(proc_root: &Path, pid: u32) -> PathBuf {
    proc_root.join(pid.to_string()).join("status")
}

/// Reads the text of `<proc_root>/<pid>/status`.
pub fn read_status(proc_root: &Path, pid: u32) -> io::Result<String> {
    std::fs::read_to_string(status_path(proc_root, pid))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Captured from `python3 -c 'import signal,time; signal.signal(signal.SIGUSR1, lambda *a: 0); time.sleep(99)'`
    /// (Linux 6.18): Python catches SIGINT (2) and the handler adds SIGUSR1 (10).
    const PYTHON_WITH_HANDLER: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4200\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0 \nThreads:\t1\nSigQ:\t0/63422\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000100000202\nCapInh:\t0000000000000000\n";

    /// A plain `sleep 99`: catches nothing.
    const SLEEP: &str = "Name:\tsleep\nState:\tS (sleeping)\nTgid:\t77\nPid:\t77\nPPid:\t1\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n";

    #[test]
    fn parse_table() {
        let table: &[(&str, Option<u64>)] = &[
            (PYTHON_WITH_HANDLER, Some(0x0000_0001_0000_0202)),
            (SLEEP, Some(0)),
            ("SigCgt:\tffffffffffffffff\n", Some(u64::MAX)),
            ("SigCgt:\t0000000000000200", Some(0x200)), // no trailing newline
            ("Name:\tx\n", None),                       // missing
            ("SigCgt:\t\n", None),                      // empty
            ("SigCgt:\tzz00000000000000\n", None),      // not hex
            ("SigCgt:\t10000000000000000\n", None),     // 17 digits: overflow
            // A process named "x\nSigCgt: ffff..." shows up escaped, so only the real line counts.
            (
                "Name:\tx\\nSigCgt:\\tffffffffffffffff\nSigCgt:\t0000000000000000\n",
                Some(0),
            ),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_sigcgt(text), *want, "status text {text:?}");
        }
    }

    #[test]
    fn parse_status_fields() {
        let f = parse_status(PYTHON_WITH_HANDLER);
        assert_eq!(f.tgid, Some(4242));
        assert_eq!(f.ppid, Some(4200));
        assert!(catches(f.sigcgt.unwrap_or(0), libc::SIGUSR1));
        assert_eq!(f.sigign, Some(0x0100_1000)); // SIGPIPE (13) and SIGXFSZ (25)
    }

    #[test]
    fn catches_table() {
        let mask = 0x0000_0001_0000_0202u64;
        let table: &[(i32, bool)] = &[
            (libc::SIGINT, true),
            (libc::SIGUSR1, true),
            (libc::SIGUSR2, false),
            (libc::SIGTERM, false),
            (33, true), // bit 32
            (0, false),
            (-1, false),
            (65, false),
        ];
        for (sig, want) in table {
            assert_eq!(catches(mask, *sig), *want, "signal {sig}");
        }
        assert!(catches(u64::MAX, 64));
        assert!(!catches(0, libc::SIGUSR1));
    }
}
