//! `/proc/PID/stat` (<https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html>),
//! `/proc/PID/statm`, `/proc/PID/task/TID/children`, `/proc/loadavg` and `/proc/uptime`
//! (<https://docs.kernel.org/filesystems/proc.html>): pure parsers over bytes that borrow
//! from the text and never allocate, so the sampler's tree walk and the service's scan call
//! them on every tick with buffers they keep.

use std::time::{Duration, SystemTime};

use crate::parse::parse_u64;

/// The fields of `/proc/PID/stat` the watchdog uses
/// (<https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat<'a> {
    /// Field 1, the PID.
    pub pid: u32,
    /// Field 2 without its parentheses: the command name, any bytes (may contain `) `).
    pub comm: &'a [u8],
    /// Field 3, the state letter (`R`, `S`, `D`, `Z`, ...).
    pub state: u8,
    /// Field 4, the parent's PID.
    pub ppid: u32,
    /// Field 5, the process group ID.
    pub pgid: u32,
    /// Field 9, the kernel's `PF_*` flags of the task (see [`PF_EXITING`]).
    pub flags: u64,
    /// Field 20, the number of threads.
    pub num_threads: u64,
    /// Field 22, start time after boot in clock ticks (`sysconf(_SC_CLK_TCK)`).
    pub starttime_ticks: u64,
}

/// `PF_EXITING` of `include/linux/sched.h`: set as the task starts to exit, before it leaves
/// its cgroups, and never cleared.
pub const PF_EXITING: u64 = 0x4;

/// `PF_KTHREAD` of `include/linux/sched.h`: the task is a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of `/proc/PID/stat` after the command name (index 0 is field 3, the state):
/// what follows the *last* `)`. `None` when there is no `)`.
pub fn fields_after_comm(text: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    let close = text.iter().rposition(|&b| b == b')')?;
    Some(crate::parse::fields(&text[close + 1..]))
}

/// Parses `/proc/PID/stat`. The command name is everything between the first `(` and the
/// *last* `)`, since a process may name itself `foo) Z 1 2`.
pub fn parse_stat(text: &[u8]) -> Option<ProcStat<'_>> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = parse_u64(&text[..open])?;
    let comm = &text[open + 1..close];
    // Fields 3.. follow the last ')'; index 0 here is field 3.
    let mut rest = fields_after_comm(text)?;
    let state = *rest.next()?.first()?;
    let ppid = parse_u64(rest.next()?)?;
    let pgid = parse_u64(rest.next()?)?;
    // Skip fields 6..=8 to reach field 9, then 10..=19 to reach field 20.
    let flags = parse_u64(rest.nth(3)?)?;
    let num_threads = parse_u64(rest.nth(10)?)?;
    // Field 21 is itrealvalue; field 22 is starttime.
    let starttime_ticks = parse_u64(rest.nth(1)?)?;
    Some(ProcStat {
        pid: u32::try_from(pid).ok()?,
        comm,
        state,
        ppid: u32::try_from(ppid).ok()?,
        pgid: u32::try_from(pgid).ok()?,
        flags,
        num_threads,
        starttime_ticks,
    })
}

impl ProcStat<'_> {
    /// Whether the process has exited (a zombie, `Z`, or dead, `X`): it only waits for its
    /// parent to reap it.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X')
    }

    /// Whether it is exiting ([`PF_EXITING`]) or has exited.
    pub fn is_exiting(&self) -> bool {
        self.flags & PF_EXITING != 0 || self.is_exited()
    }
}

/// Parses the `children` file of a task: space-separated PIDs. Calls `f` for each.
pub fn parse_children(text: &[u8], mut f: impl FnMut(u32)) {
    for field in text.split(|b| b.is_ascii_whitespace()) {
        if let Some(pid) = parse_u64(field).and_then(|p| u32::try_from(p).ok()) {
            f(pid);
        }
    }
}

/// Parses `/proc/PID/statm` and returns `resident`, in pages (field 2).
pub fn parse_statm_resident_pages(text: &[u8]) -> Option<u64> {
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    fields.next()?;
    parse_u64(fields.next()?)
}

/// `sysconf(_SC_PAGESIZE)` in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions and only reads a constant of the C library.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(v).unwrap_or(4096)
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `starttime` in `/proc/PID/stat`.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions and only reads a constant of the C library.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(v).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Parses `/proc/loadavg` (`0.86 1.30 0.95 2/102 15967`) into `(threads on the system, last
/// PID allocated)`, fields 4 (after the `/`) and 5.
pub fn parse_loadavg_change_key(text: &[u8]) -> Option<(u64, u64)> {
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let running_total = fields.nth(3)?;
    let slash = running_total.iter().position(|&b| b == b'/')?;
    let threads = parse_u64(&running_total[slash + 1..])?;
    let last_pid = parse_u64(fields.next()?)?;
    Some((threads, last_pid))
}

/// Parses the first field of `/proc/uptime` (seconds since boot, with a fraction, usually
/// hundredths) as a duration.
pub fn parse_uptime(text: &[u8]) -> Option<Duration> {
    let first = text.split(|b| b.is_ascii_whitespace()).next()?;
    let (whole, fraction) = match first.iter().position(|&b| b == b'.') {
        Some(dot) => (&first[..dot], &first[dot + 1..]),
        None => (first, &b""[..]),
    };
    let mut nanos: u64 = 0;
    for (i, &b) in fraction.iter().enumerate() {
        if !b.is_ascii_digit() {
            return None;
        }
        if i < 9 {
            nanos += u64::from(b - b'0') * 10u64.pow(8 - i as u32);
        }
    }
    Some(Duration::from_secs(parse_u64(whole)?) + Duration::from_nanos(nanos))
}

/// The wall-clock instant `starttime_ticks` after boot, when at `now` the machine has been
/// up for `uptime`. Pure.
pub fn start_time_from(
    now: SystemTime,
    uptime: Duration,
    starttime_ticks: u64,
    ticks_per_s: u64,
) -> SystemTime {
    let ticks_per_s = ticks_per_s.max(1);
    let after_boot = Duration::from_secs(starttime_ticks / ticks_per_s)
        + Duration::from_nanos((starttime_ticks % ticks_per_s) * 1_000_000_000 / ticks_per_s);
    now.checked_sub(uptime.saturating_sub(after_boot))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Recorded from `env -i A=1 HOME=/root PATH=/usr/bin:/bin sleep 1000` on Linux
    /// 6.18 (this project's CI machine, as root, cgroup v1): `/proc/PID/stat` and `statm`.
    const SLEEP_STAT: &[u8] = include_bytes!("../fixtures/sleep/stat");
    const SLEEP_STATM: &[u8] = include_bytes!("../fixtures/sleep/statm");

    #[test]
    fn recorded_stat_and_statm() {
        let s = parse_stat(SLEEP_STAT).unwrap();
        assert_eq!(
            (s.pid, s.comm, s.state, s.ppid),
            (21911, &b"sleep"[..], b'S', 21910)
        );
        assert_eq!(
            (s.pgid, s.num_threads, s.starttime_ticks),
            (21907, 1, 1903435)
        );
        assert!(!s.is_exiting());
        assert_eq!(s.flags & PF_KTHREAD, 0);
        assert_eq!(parse_statm_resident_pages(SLEEP_STATM), Some(343));
        // `/proc/2/stat` (kthreadd) recorded on the same machine: a kernel thread.
        let k = parse_stat(include_bytes!("../fixtures/kthreadd/stat")).unwrap();
        assert_eq!((k.pid, k.comm, k.ppid), (2, &b"kthreadd"[..], 0));
        assert_ne!(k.flags & PF_KTHREAD, 0);
    }

    fn stat_line(comm: &str, state: char) -> String {
        // 52 fields as in Linux 6.x; field 9 flags = PF_EXITING | PF_FORKNOEXEC (0x44),
        // field 20 num_threads = 3, field 22 starttime = 12345.
        let mut fields: Vec<String> = vec![
            "4242".into(),
            format!("({comm})"),
            state.to_string(),
            "1".into(),
        ];
        for n in 5..=52 {
            fields.push(match n {
                9 => "68".into(),
                20 => "3".into(),
                22 => "12345".into(),
                _ => "0".into(),
            });
        }
        fields.join(" ") + "\n"
    }

    #[test]
    fn stat_with_hostile_names() {
        for comm in [
            "python3",
            "foo) Z ",
            "a (b) c",
            ")",
            "((",
            "x) R 1 2 3 4 5 6 7 8 9",
        ] {
            let text = stat_line(comm, 'S');
            let s = parse_stat(text.as_bytes()).unwrap();
            assert_eq!(s.comm, comm.as_bytes(), "{comm:?}");
            assert_eq!((s.pid, s.state, s.ppid), (4242, b'S', 1));
            assert_eq!((s.num_threads, s.starttime_ticks), (3, 12345));
            assert_eq!(s.flags & PF_EXITING, PF_EXITING);
        }
    }

    #[test]
    fn stat_truncated_or_garbage_is_none() {
        for text in [
            &b""[..],
            b"1 (x",
            b"1 (x) S",
            b"x (y) S 1",
            b"1 (x) S 1 2 3",
            b")(",
        ] {
            assert_eq!(
                parse_stat(text),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn stat_of_this_process() {
        let text = std::fs::read("/proc/self/stat").unwrap();
        let s = parse_stat(&text).unwrap();
        assert_eq!(s.pid, std::process::id());
        assert!(s.num_threads >= 1);
        assert_eq!(s.flags & PF_EXITING, 0, "this process is not exiting");
    }

    #[test]
    fn loadavg_change_key() {
        assert_eq!(
            parse_loadavg_change_key(b"0.86 1.30 0.95 2/102 15967\n"),
            Some((102, 15967))
        );
        assert_eq!(parse_loadavg_change_key(b"0.86 1.30 0.95 2/102\n"), None);
        assert_eq!(parse_loadavg_change_key(b"0.86 1.30 0.95 2-102 7\n"), None);
        assert_eq!(parse_loadavg_change_key(b""), None);
    }

    #[test]
    fn children_and_statm() {
        let mut got = Vec::new();
        parse_children(b"12 345 6789 ", |p| got.push(p));
        assert_eq!(got, vec![12, 345, 6789]);
        parse_children(b"", |_| panic!("no children"));
        assert_eq!(
            parse_statm_resident_pages(b"1000 250 30 1 0 400 0\n"),
            Some(250)
        );
        assert_eq!(parse_statm_resident_pages(b"1000"), None);
    }

    #[test]
    fn uptime_and_start_time() {
        assert_eq!(
            parse_uptime(b"350735.47 234388.90\n"),
            Some(Duration::from_millis(350_735_470))
        );
        assert_eq!(parse_uptime(b"12"), Some(Duration::from_secs(12)));
        assert_eq!(parse_uptime(b"1.5x 2"), None);
        assert_eq!(parse_uptime(b""), None);
        // Up 1,000 s at now; started 2.5 s after boot: 997.5 s ago.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t = start_time_from(now, Duration::from_secs(1000), 250, 100);
        assert_eq!(
            now.duration_since(t).unwrap(),
            Duration::from_millis(997_500)
        );
    }
}
