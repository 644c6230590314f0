//! Parsers for the human units on the command line and in the config file:
//! durations (`10ms`, `5s`, `2m`, `12h`, `1h30m`), sizes (`512MiB`, `1.5G`,
//! `1000000`) and signals (`USR1`, `SIGUSR1`, `10`, `RTMIN+2`), with error messages
//! that quote the bad value and say what was expected.

use std::borrow::Cow;
use std::time::Duration;

/// A value that did not parse; the message is one line, fit to show a user.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {what} {}: expected {expected}", crate::quote::quote_value(.value))]
pub struct UnitError {
    /// What was being parsed (`duration`, `size`, `signal`).
    pub what: &'static str,
    /// The text as given.
    pub value: String,
    /// What would have been accepted.
    pub expected: Cow<'static, str>,
}

/// `text` with its control characters and line or paragraph separators escaped (`\n`
/// becomes `\\n`), so that a message quoting a bad value stays on one line.
pub fn printable(text: &str) -> Cow<'_, str> {
    let escape = crate::quote::needs_escape;
    if !text.contains(escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

const DURATION_EXPECTED: &str =
    "a number with a unit (ms, s, m, h, d), e.g. 10ms, 5s, 2m, 12h or 1h30m";
const DURATION_TOO_LARGE: &str =
    "a duration of at most 1000000000000s (about 31,700 years); this one is too large";
const SIZE_EXPECTED: &str = "a number of bytes with an optional unit (B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB), e.g. 512MiB, 1.5G or 1000000";
const SIZE_TOO_LARGE: &str =
    "a size below 16 EiB (at most 18446744073709551615 bytes); this one is too large";
const SIZE_WHOLE_BYTES_EXPECTED: &str =
    "a whole number of bytes, or a unit such as 1.5GiB for a fraction";

/// Parses a duration such as `10ms`, `1.5s`, `2m`, `12h` or `1h30m`; a bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError {
        what: "duration",
        value: text.to_string(),
        expected: Cow::Borrowed(DURATION_EXPECTED),
    };
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    let too_large = || UnitError {
        expected: Cow::Borrowed(DURATION_TOO_LARGE),
        ..err()
    };
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (num, tail) = rest.split_at(num_end);
        let value: f64 = num.parse().map_err(|_| err())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit.trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "d" => 86400.0,
            _ => return Err(err()),
        };
        total += value * scale;
        rest = tail;
    }
    // Every part parsed, so a sum that is not finite or beyond 1e12 s is a number too large.
    if !total.is_finite() || total > 1e12 {
        return Err(too_large());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Parses a size such as `512MiB`, `2GiB`, `1.5G` or `1000000` (bytes); `K`/`M`/`G`/`T` alone are powers of 1024.
///
/// Exact: the number is parsed as decimal digits, never through `f64`, so every `u64`
/// is representable and a value that does not fit in one is refused as too large. A
/// fraction needs a unit (`1.5G`) and is rounded to whole bytes (half up); a fractional
/// number of plain bytes (`1.5`, `1.5B`) is refused.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = |expected: &'static str| UnitError {
        what: "size",
        value: text.to_string(),
        expected: Cow::Borrowed(expected),
    };
    let s = text.trim();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(num_end);
    let (int_digits, frac_digits) = num.split_once('.').unwrap_or((num, ""));
    if int_digits.is_empty() && frac_digits.is_empty() || frac_digits.contains('.') {
        return Err(err(SIZE_EXPECTED));
    }
    let scale: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "kiB" => 1 << 10,
        "KB" | "kB" => 1_000,
        "M" | "MiB" => 1 << 20,
        "MB" => 1_000_000,
        "G" | "GiB" => 1 << 30,
        "GB" => 1_000_000_000,
        "T" | "TiB" => 1 << 40,
        "TB" => 1_000_000_000_000,
        _ => return Err(err(SIZE_EXPECTED)),
    };
    let fraction_bytes = rounded_fraction(frac_digits, scale);
    if scale == 1 && frac_digits.bytes().any(|b| b != b'0') {
        return Err(err(SIZE_WHOLE_BYTES_EXPECTED));
    }
    // Only digits remain in `int_digits`, so parsing fails only on overflow.
    let int: u64 = if int_digits.is_empty() {
        0
    } else {
        int_digits.parse().map_err(|_| err(SIZE_TOO_LARGE))?
    };
    int.checked_mul(scale)
        .and_then(|b| b.checked_add(fraction_bytes))
        .ok_or_else(|| err(SIZE_TOO_LARGE))
}

/// `0.<digits>` times `scale`, rounded half up to an integer, computed exactly for any
/// number of digits (0 when there are none).
///
/// Horner's rule from the last digit, with floor division at every step (nested floor
/// divisions by integers equal one floor division), gives `floor(x)` and `floor(2x)`;
/// `round(x) = floor(2x) - floor(x)`.
fn rounded_fraction(digits: &str, scale: u64) -> u64 {
    let floor_times = |m: u128| {
        digits
            .bytes()
            .rev()
            .fold(0u128, |acc, d| (u128::from(d - b'0') * m + acc) / 10)
    };
    let m = u128::from(scale);
    let rounded = floor_times(2 * m) - floor_times(m);
    // rounded <= scale, so it fits; saturating keeps an impossible overflow an error for the caller.
    u64::try_from(rounded).unwrap_or(u64::MAX)
}

/// The standard signals by their number on Linux, all named; [`parse_signal`] refuses KILL and STOP.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// Signals whose handlers are crash or abort paths: Python's `faulthandler`, C and C++
/// runtimes and debuggers catch them to dump state and end the process, so sending one to
/// ask for a checkpoint would kill the run it protects. [`parse_signal`] refuses them.
pub const CRASH_SIGNALS: &[i32] = &[
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGQUIT,
    libc::SIGXCPU,
    libc::SIGXFSZ,
];

/// Whether `num` is a signal a process can catch and the C library lets applications use:
/// a standard signal but KILL and STOP, or a real-time one in `SIGRTMIN()..=SIGRTMAX()`
/// (glibc keeps 32 and 33 for itself, so `SIGRTMIN()` is 34 there; it is read at run time).
fn is_usable_signal(num: i32) -> bool {
    let standard = SIGNALS.iter().any(|(_, n)| *n == num);
    (standard && num != libc::SIGKILL && num != libc::SIGSTOP)
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&num)
}

fn signal_expected() -> String {
    let names: Vec<&str> = SIGNALS
        .iter()
        .filter(|(_, n)| is_usable_signal(*n) && !CRASH_SIGNALS.contains(n))
        .map(|(name, _)| *name)
        .collect();
    format!(
        "a signal name or number that can be caught, e.g. USR1, SIGUSR1, 10 or RTMIN+2 \
         ({}, RTMIN, RTMIN+n, RTMAX-n, RTMAX; or their numbers, {}-{} for the real-time ones; \
         KILL and STOP cannot be caught)",
        names.join(" "),
        libc::SIGRTMIN(),
        libc::SIGRTMAX()
    )
}

fn crash_signal_expected(num: i32) -> String {
    let names: Vec<String> = CRASH_SIGNALS
        .iter()
        .map(|n| signal_name(*n).trim_start_matches("SIG").to_string())
        .collect();
    format!(
        "a signal that only asks for a checkpoint, e.g. USR1, USR2 or RTMIN+2; {} is a crash signal \
         (Python's faulthandler and C runtimes catch it to dump state and end the process), \
         as are {}",
        signal_name(num),
        names.join(" ")
    )
}

/// A caution about `sig` as the checkpoint signal, for a warning at start: SIGINT is
/// accepted, but Python raises `KeyboardInterrupt` on it, also under the client's
/// `install()`, which keeps the previous handler so that Ctrl-C still stops the run.
pub fn signal_caution(sig: i32) -> Option<String> {
    (sig == libc::SIGINT).then(|| {
        "SIGINT is the checkpoint signal: Python raises KeyboardInterrupt on it, which ends most \
         training loops, also after training_watchdog.install() (it keeps Ctrl-C working); use SIGUSR1"
            .to_string()
    })
}

/// Parses a signal given as `USR1`, `SIGUSR1`, `sigusr1`, `10`, `RTMIN+2` or `SIGRTMAX-1`; returns its number.
///
/// Refuses what a training process cannot catch or the C library reserves: 0, KILL (9),
/// STOP (19), 32 up to `SIGRTMIN()-1`, and anything above `SIGRTMAX()`; and the
/// [`CRASH_SIGNALS`], whose handlers end the process. `IOT` is `ABRT`. The real-time
/// names are computed from `SIGRTMIN()`/`SIGRTMAX()` at run time.
pub fn parse_signal(text: &str) -> Result<i32, UnitError> {
    let err = || UnitError {
        what: "signal",
        value: text.to_string(),
        expected: Cow::Owned(signal_expected()),
    };
    let s = text.trim();
    let num = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<i32>().map_err(|_| err())?
    } else {
        let upper = s.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        let name = if name == "IOT" { "ABRT" } else { name };
        let offset = |rest: &str| -> Option<i32> {
            if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            rest.parse().ok()
        };
        if name == "RTMIN" {
            libc::SIGRTMIN()
        } else if name == "RTMAX" {
            libc::SIGRTMAX()
        } else if let Some(rest) = name.strip_prefix("RTMIN+") {
            offset(rest)
                .and_then(|n| libc::SIGRTMIN().checked_add(n))
                .ok_or_else(err)?
        } else if let Some(rest) = name.strip_prefix("RTMAX-") {
            offset(rest)
                .and_then(|n| libc::SIGRTMAX().checked_sub(n))
                .ok_or_else(err)?
        } else {
            SIGNALS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, num)| *num)
                .ok_or_else(err)?
        }
    };
    if !is_usable_signal(num) {
        Err(err())
    } else if CRASH_SIGNALS.contains(&num) {
        Err(UnitError {
            expected: Cow::Owned(crash_signal_expected(num)),
            ..err()
        })
    } else {
        Ok(num)
    }
}

/// The conventional name of a signal number: `SIGUSR1`, `SIGKILL`, `SIGRTMIN` and
/// `SIGRTMIN+n` for real-time signals (from `SIGRTMIN()` at run time), `SIG<n>` for others.
pub fn signal_name(num: i32) -> String {
    let rtmin = libc::SIGRTMIN();
    match SIGNALS.iter().find(|(_, n)| *n == num) {
        Some((name, _)) => format!("SIG{name}"),
        None if num == rtmin => "SIGRTMIN".to_string(),
        None if (rtmin..=libc::SIGRTMAX()).contains(&num) => format!("SIGRTMIN+{}", num - rtmin),
        None => format!("SIG{num}"),
    }
}

/// The one size scale: `bytes` in the largest binary unit (`B`, `KiB`, ... `EiB`) that
/// keeps it at 1 or more, and that unit. [`format_bytes`] and the report's axis ticks
/// both print through it.
pub fn binary_size(bytes: f64) -> (f64, &'static str) {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    (v, UNITS.get(i).copied().unwrap_or("B"))
}

/// Formats bytes for people: `1.50 GiB`, `512.00 MiB`, `900 B`.
pub fn format_bytes(bytes: u64) -> String {
    match binary_size(bytes as f64) {
        (_, "B") => format!("{bytes} B"),
        (v, unit) => format!("{v:.2} {unit}"),
    }
}

/// Formats seconds for people: `850ms`, `42.0s`, `3m05s`, `2h10m`.
pub fn format_duration_s(secs: f64) -> String {
    if !secs.is_finite() {
        return "never".to_string();
    }
    if secs < 1.0 {
        format!("{:.0}ms", secs * 1e3)
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", (secs / 60.0) as u64, (secs % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (secs / 3600.0) as u64,
            ((secs % 3600.0) / 60.0) as u64
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_on_one_binary_scale() {
        assert_eq!(format_bytes(900), "900 B");
        assert_eq!(format_bytes(1536 << 20), "1.50 GiB");
        assert_eq!(format_bytes(512 << 20), "512.00 MiB");
        assert_eq!(format_bytes(3 << 50), "3.00 PiB");
        assert_eq!(binary_size(1024.0), (1.0, "KiB"));
        assert_eq!(binary_size(u64::MAX as f64).1, "EiB");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "5x", "ms", "-1s", "1..2s", "s5"] {
            assert!(parse_duration(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn duration_error_names_value_and_expectation() {
        let e = parse_duration("5x").expect_err("bad");
        assert_eq!(
            e.to_string(),
            format!("invalid duration '5x': expected {DURATION_EXPECTED}")
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1000000"), Ok(1_000_000));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        for bad in ["", "12XB", "GiB", "-5M", "1e3"] {
            assert!(parse_size(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn signals_parse() {
        let rtmin = libc::SIGRTMIN();
        assert_eq!(parse_signal("USR1"), Ok(10));
        assert_eq!(parse_signal("SIGUSR1"), Ok(10));
        assert_eq!(parse_signal("sigusr2"), Ok(12));
        assert_eq!(parse_signal("10"), Ok(10));
        assert_eq!(parse_signal("SIGRTMIN+2"), Ok(rtmin + 2));
        for bad in [
            "",
            "KILL",
            "9",
            "0",
            "65",
            "USR3",
            "+10",
            "-1",
            "SIG",
            "99999999999",
        ] {
            assert!(parse_signal(bad).is_err(), "{bad} should not parse");
        }
        assert_eq!(signal_name(10), "SIGUSR1");
    }

    /// 32 and 33 (up to SIGRTMIN()-1) belong to glibc's threading; sending one to a
    /// training process would break it, and numbers were once accepted up to 64 blindly.
    #[test]
    fn signals_reserved_by_glibc_are_refused() {
        for n in 32..libc::SIGRTMIN() {
            let e = parse_signal(&n.to_string()).expect_err("reserved");
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid signal '{n}': expected "))
            );
        }
        for n in [0, 9, 19, libc::SIGRTMAX() + 1, 1000, -3] {
            assert!(
                parse_signal(&n.to_string()).is_err(),
                "{n} should not parse"
            );
        }
        assert_eq!(
            parse_signal(&libc::SIGRTMIN().to_string()),
            Ok(libc::SIGRTMIN())
        );
        assert_eq!(
            parse_signal(&libc::SIGRTMAX().to_string()),
            Ok(libc::SIGRTMAX())
        );
    }

    /// RTMIN+n used to be computed from a hard-coded 34 and RTMAX-n was not accepted.
    #[test]
    fn realtime_signal_names_follow_sigrtmin_at_run_time() {
        let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        let table: &[(&str, i32)] = &[
            ("RTMIN", lo),
            ("SIGRTMIN", lo),
            ("sigrtmin+0", lo),
            ("rtmin+3", lo + 3),
            ("SIGRTMAX", hi),
            ("RTMAX-0", hi),
            ("SigRtMax-2", hi - 2),
        ];
        for (text, want) in table {
            assert_eq!(parse_signal(text), Ok(*want), "{text}");
        }
        let span = hi - lo;
        for bad in [
            format!("RTMIN+{}", span + 1),
            format!("RTMAX-{}", span + 1),
            "RTMIN-1".to_string(),
            "RTMAX+1".to_string(),
            "RTMIN+".to_string(),
            "RTMIN+-1".to_string(),
            "RTMIN+ 1".to_string(),
            "RTMIN+99999999999".to_string(),
        ] {
            assert!(parse_signal(&bad).is_err(), "{bad} should not parse");
        }
        assert_eq!(signal_name(lo), "SIGRTMIN");
        assert_eq!(signal_name(lo + 2), "SIGRTMIN+2");
        assert_eq!(signal_name(hi), format!("SIGRTMIN+{span}"));
        // Every usable number names itself in a way that parses back.
        for n in (1..32).chain(lo..=hi) {
            if n == libc::SIGKILL || n == libc::SIGSTOP || CRASH_SIGNALS.contains(&n) {
                continue;
            }
            assert_eq!(parse_signal(&signal_name(n)), Ok(n), "{n}");
        }
        assert_eq!(signal_name(32), "SIG32");
        assert_eq!(signal_name(0), "SIG0");
    }

    /// Only nine standard signals had names; SEGV, CHLD, PIPE... came out as `SIG11`.
    #[test]
    fn every_standard_signal_is_named() {
        let names = [
            "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
            "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN",
            "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
        ];
        for (i, name) in names.iter().enumerate() {
            let n = i32::try_from(i).unwrap() + 1;
            assert_eq!(signal_name(n), format!("SIG{name}"));
            if *name != "KILL" && *name != "STOP" && !CRASH_SIGNALS.contains(&n) {
                assert_eq!(parse_signal(name), Ok(n), "{name}");
                assert_eq!(parse_signal(&format!("sig{name}")), Ok(n), "{name}");
            }
        }
    }

    /// KILL and STOP cannot be caught, so they can never ask for a checkpoint.
    #[test]
    fn kill_and_stop_are_refused_with_one_line_message() {
        for bad in ["KILL", "SIGKILL", "sigstop", "STOP", "9", "19"] {
            let e = parse_signal(bad).expect_err("uncatchable").to_string();
            assert!(
                e.starts_with(&format!("invalid signal '{bad}': expected ")),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("KILL and STOP cannot be caught"), "{e}");
        }
    }

    /// `--signal SEGV` was accepted: Python's faulthandler catches SIGSEGV, so the
    /// "checkpoint request" dumped a traceback and killed the run it was to protect.
    #[test]
    fn crash_signals_are_refused_as_the_checkpoint_signal() {
        let table: &[(&str, i32)] = &[
            ("SEGV", libc::SIGSEGV),
            ("sigbus", libc::SIGBUS),
            ("FPE", libc::SIGFPE),
            ("ILL", libc::SIGILL),
            ("ABRT", libc::SIGABRT),
            ("IOT", libc::SIGABRT),
            ("SIGIOT", libc::SIGABRT),
            ("TRAP", libc::SIGTRAP),
            ("SYS", libc::SIGSYS),
            ("QUIT", libc::SIGQUIT),
            ("XCPU", libc::SIGXCPU),
            ("XFSZ", libc::SIGXFSZ),
            ("11", libc::SIGSEGV),
            ("6", libc::SIGABRT),
        ];
        for (text, num) in table {
            let e = parse_signal(text).expect_err("a crash signal").to_string();
            assert!(
                e.starts_with(&format!(
                    "invalid signal '{text}': expected a signal that only asks for a checkpoint"
                )),
                "{e}"
            );
            assert!(
                e.contains(&format!("{} is a crash signal", signal_name(*num))),
                "{e}"
            );
            assert!(e.contains("faulthandler") && !e.contains('\n'), "{e}");
        }
        // The list of accepted names no longer offers them.
        let e = parse_signal("USR3").expect_err("unknown").to_string();
        for crash in [" SEGV ", " ABRT ", " QUIT "] {
            assert!(!e.contains(crash), "{e}");
        }
        assert_eq!(parse_signal("INT"), Ok(libc::SIGINT));
    }

    /// SIGINT is accepted but cautioned: Python raises KeyboardInterrupt on it by default.
    #[test]
    fn sigint_is_accepted_with_a_caution() {
        let c = signal_caution(libc::SIGINT).expect("a caution for SIGINT");
        assert!(c.contains("KeyboardInterrupt"), "{c}");
        assert_eq!(signal_caution(libc::SIGUSR1), None);
    }

    /// `99999999999999999999h` said "expected a number with a unit", as if the syntax were wrong.
    #[test]
    fn duration_overflow_says_too_large() {
        let huge = format!("1{}s", "0".repeat(400)); // f64 infinity
        for big in [
            "99999999999999999999h",
            "1000000000001s",
            &huge,
            "99999999999999999999d1s",
        ] {
            let e = parse_duration(big).expect_err("too large").to_string();
            assert_eq!(
                e,
                format!(
                    "invalid duration {}: expected {DURATION_TOO_LARGE}",
                    crate::quote::quote_value(big)
                )
            );
        }
        assert_eq!(
            parse_duration("1000000000000s"),
            Ok(Duration::from_secs(1_000_000_000_000))
        );
    }

    /// Plain integers went through f64 and were rounded above 2^53.
    #[test]
    fn plain_integers_above_2_pow_53_parse_exactly() {
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("18446744073709551615B"), Ok(u64::MAX));
        assert_eq!(parse_size("16777215T"), Ok(16_777_215 << 40));
        assert_eq!(
            parse_size("9007199254740993K"),
            Ok(9_007_199_254_740_993 << 10)
        );
        assert_eq!(
            parse_size("18014398509481984K"), // 2^54 KiB = 2^64 bytes
            Err(too_large("18014398509481984K"))
        );
    }

    fn too_large(value: &str) -> UnitError {
        UnitError {
            what: "size",
            value: value.to_string(),
            expected: Cow::Borrowed(SIZE_TOO_LARGE),
        }
    }

    /// A size that did not fit in u64 used to say only "expected a number...", as if the syntax were wrong.
    #[test]
    fn size_overflow_says_too_large() {
        for big in [
            "18446744073709551616",
            "16777216T",
            "16777216TiB",
            "99999999999999999999999",
            "18446744073709551615.5K",
        ] {
            let e = parse_size(big).expect_err("too large");
            assert_eq!(e, too_large(big));
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid size '{big}': expected ")),
                "{msg}"
            );
            assert!(msg.contains("16 EiB") && msg.contains("too large"), "{msg}");
        }
    }

    /// `1.5` bytes was silently rounded to 2 and `0.4` to 0.
    #[test]
    fn fractional_plain_bytes_are_refused() {
        for bad in ["1.5", "0.4", "1.5B", ".5", "1.05b"] {
            let e = parse_size(bad).expect_err("fractional bytes").to_string();
            assert_eq!(
                e,
                format!("invalid size '{bad}': expected {SIZE_WHOLE_BYTES_EXPECTED}")
            );
            assert!(e.contains("1.5GiB"), "{e}");
        }
        // A zero fraction is still a whole number of bytes.
        assert_eq!(parse_size("12.0"), Ok(12));
        assert_eq!(parse_size("12."), Ok(12));
    }

    #[test]
    fn fractional_sizes_with_unit_round_to_whole_bytes() {
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.4K"), Ok(410)); // 409.6
        assert_eq!(parse_size("0.0001K"), Ok(0)); // 0.1024
        assert_eq!(parse_size("0.00048828125K"), Ok(1)); // exactly 0.5: half up
        assert_eq!(parse_size("0.000488281249999999999999K"), Ok(0)); // just under 0.5
        assert_eq!(parse_size(".5KB"), Ok(500));
        assert_eq!(
            parse_size("1.999999999999999999999999999999999999999999G"),
            Ok(2 << 30)
        );
        assert_eq!(parse_size("2.5TB"), Ok(2_500_000_000_000));
        for bad in [".", "1.2.3G", "..5G", "1.5XB"] {
            assert!(parse_size(bad).is_err(), "{bad} should not parse");
        }
    }
}
