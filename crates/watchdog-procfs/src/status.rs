//! `/proc/PID/status` (`proc_pid_status(5)`, <https://docs.kernel.org/filesystems/proc.html>,
//! table 1-2): the one parser of it, for every reader (the signal decision, the status
//! server's registration check, the service's discovery, the GPU's namespace mapping).
//!
//! Only a line that *starts* with a key counts: the kernel escapes newlines in the `Name:`
//! field, so a hostile process name cannot forge a line, and the first line with a key
//! wins. [`parse_status`] borrows nothing and allocates nothing.

use crate::parse::{fields, parse_u32};

/// The user IDs of a process, from the `Uid:` line of `/proc/PID/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uids {
    /// Real UID.
    pub real: u32,
    /// Effective UID: the one that decides whether root-reserved disk blocks are usable.
    pub effective: u32,
    /// Saved set-UID.
    pub saved: u32,
    /// Filesystem UID.
    pub filesystem: u32,
}

/// The fields of `/proc/PID/status` the watchdog uses; `None` for a line missing or
/// malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProcStatus {
    /// `Tgid:` the thread-group (process) id; equals the pid for a process.
    pub tgid: Option<u32>,
    /// `PPid:` the parent's pid (0 for init and for a process whose parent is outside our
    /// pid namespace).
    pub ppid: Option<u32>,
    /// `Uid:` real, effective, saved and filesystem UIDs (all four, or `None`).
    pub uids: Option<Uids>,
    /// The last field of `NSpid:` (Linux 4.1+): the process's PID in its own, innermost
    /// PID namespace (the first field is its PID in the namespace of this procfs mount).
    /// `None` when the line is missing, empty or holds anything but numbers.
    pub nspid_innermost: Option<u32>,
    /// `SigIgn:` the mask of ignored signals (`SIG_IGN`); bit `N-1` is signal `N`.
    pub sigign: Option<u64>,
    /// `SigCgt:` the mask of caught signals, same layout.
    pub sigcgt: Option<u64>,
}

/// A signal mask: the kernel prints exactly 16 hex digits; refuse anything longer rather than guess.
fn parse_mask(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

/// All four UIDs of a `Uid:` value.
fn parse_uids(value: &[u8]) -> Option<Uids> {
    let mut ids = fields(value).map(parse_u32);
    Some(Uids {
        real: ids.next()??,
        effective: ids.next()??,
        saved: ids.next()??,
        filesystem: ids.next()??,
    })
}

/// The last PID of an `NSpid:` value, when every field is a PID.
fn parse_nspid_innermost(value: &[u8]) -> Option<u32> {
    let mut last = None;
    for f in fields(value) {
        last = Some(parse_u32(f)?);
    }
    last
}

/// Parses the text of `/proc/PID/status`.
pub fn parse_status(text: &[u8]) -> ProcStatus {
    let mut out = ProcStatus::default();
    let (mut tgid, mut ppid, mut uid, mut nspid, mut sigign) = (false, false, false, false, false);
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        let first = |seen: &mut bool| !std::mem::replace(seen, true);
        match key {
            b"Tgid" if first(&mut tgid) => out.tgid = parse_u32(value),
            b"PPid" if first(&mut ppid) => out.ppid = parse_u32(value),
            b"Uid" if first(&mut uid) => out.uids = parse_uids(value),
            b"NSpid" if first(&mut nspid) => out.nspid_innermost = parse_nspid_innermost(value),
            b"SigIgn" if first(&mut sigign) => out.sigign = parse_mask(value),
            b"SigCgt" => {
                out.sigcgt = parse_mask(value);
                // SigCgt comes after every other line read here; nothing later is needed.
                break;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Recorded from `env -i A=1 HOME=/root PATH=/usr/bin:/bin sleep 1000` started from a
    /// shell (which ignores SIGINT and SIGQUIT for it) on Linux 6.18, as root.
    const SLEEP: &[u8] = include_bytes!("../fixtures/sleep/status");

    /// Captured from `python3 -c 'import signal,time; signal.signal(signal.SIGUSR1, lambda *a: 0); time.sleep(99)'`
    /// (Linux 6.18): Python catches SIGINT (2) and the handler adds SIGUSR1 (10).
    const PYTHON_WITH_HANDLER: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4200\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0 \nThreads:\t1\nSigQ:\t0/63422\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000100000202\nCapInh:\t0000000000000000\n";

    #[test]
    fn recorded_status() {
        let s = parse_status(SLEEP);
        let root = Uids {
            real: 0,
            effective: 0,
            saved: 0,
            filesystem: 0,
        };
        assert_eq!(
            s,
            ProcStatus {
                tgid: Some(21911),
                ppid: Some(21910),
                uids: Some(root),
                nspid_innermost: Some(21911),
                sigign: Some(0x6),
                sigcgt: Some(0),
            }
        );
        let p = parse_status(PYTHON_WITH_HANDLER.as_bytes());
        assert_eq!((p.tgid, p.ppid), (Some(4242), Some(4200)));
        assert_eq!(p.sigcgt, Some(0x0000_0001_0000_0202));
        assert_eq!(p.sigign, Some(0x0100_1000)); // SIGPIPE (13) and SIGXFSZ (25)
    }

    #[test]
    fn sigcgt_table() {
        let table: &[(&str, Option<u64>)] = &[
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
            assert_eq!(
                parse_status(text.as_bytes()).sigcgt,
                *want,
                "status text {text:?}"
            );
        }
    }

    #[test]
    fn ppid_and_uids_cannot_be_forged_by_the_name() {
        assert_eq!(parse_status(b"Name:\tPPid: 5\nPPid:\t7\n").ppid, Some(7));
        assert_eq!(parse_status(b"PPid:\t0\n").ppid, Some(0));
        assert_eq!(parse_status(b"PPid:\t99999999999\n").ppid, None);
        assert_eq!(parse_status(b"Name:\tx\n").ppid, None);
        let status = b"Name:\tUid: 0 0 0 0\nUmask:\t0022\nUid:\t1000\t1001\t1002\t1003\nGid:\t100\t100\t100\t100\n";
        assert_eq!(
            parse_status(status).uids,
            Some(Uids {
                real: 1000,
                effective: 1001,
                saved: 1002,
                filesystem: 1003
            })
        );
        assert_eq!(parse_status(b"Uid:\t1 2\n").uids, None);
    }

    #[test]
    fn nspid_host_container_and_hostile() {
        let inner = |t: &str| parse_status(t.as_bytes()).nspid_innermost;
        assert_eq!(
            inner("Name:\tpython\nPid:\t4242\nNSpid:\t4242\nNSpgid:\t4242\n"),
            Some(4242)
        );
        assert_eq!(
            inner("Name:\tpython\nNSpid:\t4242\t17\t3\nPPid:\t1\n"),
            Some(3)
        );
        assert_eq!(inner("Name:\tx\nPid:\t1\n"), None);
        assert_eq!(inner("NSpid:\t12\tx\n"), None);
        assert_eq!(inner("NSpid:\n"), None);
        // A process name cannot fake the line: the name field comes first and is its own line.
        assert_eq!(inner("Name:\tNSpid: 1\nNSpid:\t99\t5\n"), Some(5));
    }
}
