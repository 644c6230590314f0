//! Which signals a process catches, from the `SigCgt:` line of `/proc/PID/status`.
//!
//! `SigCgt` is a 64-bit mask in hexadecimal; bit `N-1` set means the process has
//! installed a handler for signal `N` (see `proc_pid_status(5)` and
//! <https://docs.kernel.org/filesystems/proc.html>, table 1-2). The watchdog reads it
//! before every signal it sends: SIGUSR1's default action terminates the process,
//! so a process that does not catch the signal must never get it (util-linux
//! `kill --require-handler` and procps `pkill -H` do the same check).
//!
//! The status is read and parsed by [`watchdog_procfs`] ([`ProcRoot::status`](watchdog_procfs::ProcRoot::status),
//! [`parse_status`](watchdog_procfs::parse_status)); [`catches`] reads the mask.

/// Whether `mask` (a `SigCgt` value) says signal `sig` is caught. Signals outside 1..=64 are never caught.
pub fn catches(mask: u64, sig: i32) -> bool {
    (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
