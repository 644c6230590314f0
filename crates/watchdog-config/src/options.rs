//! The watch settings as flags: [`WatchOptions`] (shared by `--pid`, `run` and `replay`,
//! declared with the other forms of each setting in the settings table, `settings.rs`), the
//! types of their values, and the parsers that turn a flag's text into a value or a one-line
//! error naming the value and what was expected.

use std::ffi::OsStr;
use std::time::Duration;

use clap::ValueEnum;
use clap::builder::TypedValueParser;
use watchdog_types::VerdictKind;
use watchdog_types::quote::quote_value;
use watchdog_types::units;

/// How GPU memory is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// Watch GPUs when an NVIDIA driver is there; otherwise say why not, once, and go on.
    Auto,
    /// Do not watch GPUs.
    Off,
    /// Exit with status 2 when GPUs cannot be watched.
    Required,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

pub use crate::settings::WatchOptions;

/// The verdicts of a `--restart-on` list (a newtype: clap would take a `Vec` for a
/// repeated flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartOn(pub Vec<VerdictKind>);

/// The verdicts that restart a run unless `--restart-on` says otherwise.
pub const DEFAULT_RESTART_ON: &[VerdictKind] = &[
    VerdictKind::OomKill,
    VerdictKind::GpuOom,
    VerdictKind::DiskFull,
];

/// How many restarts an hour may hold unless `--restart-per-hour` says otherwise.
pub const DEFAULT_RESTART_PER_HOUR: u32 = 6;

/// The verdicts `--restart-on` may list.
const RESTARTABLE: &[VerdictKind] = &[
    VerdictKind::OomKill,
    VerdictKind::GpuOom,
    VerdictKind::DiskFull,
    VerdictKind::Crash,
    VerdictKind::Signal,
    VerdictKind::Exited,
];

/// A `--restart-on` list: verdict names separated by commas, each one a run can be
/// restarted after (never `runtime_limit`: the time is spent; never `watchdog_signal`:
/// the run's handler is broken, and a restart would end the same way).
pub fn parse_restart_on(s: &str) -> Result<RestartOn, String> {
    let expected = "expected a comma list of oom_kill, gpu_oom, disk_full, crash, signal, exited";
    let mut kinds = Vec::new();
    for name in s.split(',').map(str::trim) {
        let kind = match name.parse::<VerdictKind>() {
            Ok(kind) if RESTARTABLE.contains(&kind) => kind,
            Ok(VerdictKind::RuntimeLimit) => {
                return Err(format!(
                    "invalid restart-on 'runtime_limit': a run stopped at its runtime limit has no time left to restart; {expected}"
                ));
            }
            Ok(kind @ (VerdictKind::Cancelled | VerdictKind::Preempted)) => {
                return Err(format!(
                    "invalid restart-on '{kind}': a job the scheduler {} is not started again in its place; {expected}",
                    if kind == VerdictKind::Cancelled {
                        "cancelled was stopped on purpose and"
                    } else {
                        "preempted has lost its machine and"
                    }
                ));
            }
            Ok(VerdictKind::WatchdogSignal) => {
                return Err(format!(
                    "invalid restart-on 'watchdog_signal': a run its own checkpoint signal ended would end the same way; {expected}"
                ));
            }
            _ => {
                return Err(format!(
                    "invalid restart-on {}: {expected}",
                    quote_value(name)
                ));
            }
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(RestartOn(kinds))
}

/// A count such as `--restart 3`: a whole number from 0.
pub fn parse_count(s: &str) -> Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!(
            "invalid count {}: expected a whole number such as 3",
            quote_value(s)
        )
    })
}

/// A flag's `&str` parser that names the flag when the value is not UTF-8 (clap's own
/// error says only "invalid UTF-8 was detected in one or more arguments").
#[derive(Clone)]
pub struct Utf8<F>(pub F);

impl<T, F> TypedValueParser for Utf8<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        if value.to_str().is_some() {
            return self.0.parse_ref(cmd, arg, value);
        }
        let flag = arg.map_or_else(|| "...".to_string(), ToString::to_string);
        Err(clap::Error::raw(
            clap::error::ErrorKind::InvalidUtf8,
            format!(
                "invalid value {} for '{flag}': expected UTF-8 text\n",
                quote_value(&value.to_string_lossy())
            ),
        )
        .with_cmd(cmd))
    }
}

/// Any UTF-8 text (`--on-alert`).
pub(crate) fn text(s: &str) -> Result<String, String> {
    Ok(s.to_string())
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_signal(s: &str) -> Result<i32, String> {
    units::parse_signal(s).map_err(|e| e.to_string())
}

/// The largest PID Linux hands out: PIDs stay below `pid_max`, which is at most
/// `PID_MAX_LIMIT` (4194304, 2^22) on 64-bit systems.
const PID_MAX: u32 = 4_194_303;

pub fn parse_pid(s: &str) -> Result<u32, String> {
    let q = quote_value(s);
    let t = s.trim();
    // Digits only: `+5` and ` 5 ` are not PIDs a user meant to type, and `u32::from_str` takes `+`.
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid PID {q}: expected a positive process ID (digits only)"
        ));
    }
    match t.parse::<u64>() {
        Ok(0) => Err(format!("invalid PID {q}: expected a positive process ID")),
        Ok(pid) if pid <= u64::from(PID_MAX) => Ok(pid as u32),
        _ => Err(format!(
            "invalid PID {q}: too large; expected a process ID from 1 to {PID_MAX} \
             (Linux PIDs stay below pid_max, at most 4194304)"
        )),
    }
}

const DEADLINE_EXPECTED: &str = "expected an RFC 3339 time such as 2026-11-23T08:00:00Z";

/// Parses an RFC 3339 timestamp for `--deadline`.
///
/// Refuses an offset outside RFC 3339's `-23:59..=+23:59` (jiff takes up to 25:59), and
/// says so when a well-formed time is beyond what the clock can represent.
pub fn parse_deadline(s: &str) -> Result<jiff::Timestamp, String> {
    let q = quote_value(s);
    let t = s.trim();
    let (datetime, offset) = split_offset(t);
    if let Some((hours, minutes)) = offset_fields(offset)
        && (hours > 23 || minutes > 59)
    {
        return Err(format!(
            "invalid deadline {q}: {DEADLINE_EXPECTED}; the offset '{offset}' is outside RFC 3339's -23:59 to +23:59"
        ));
    }
    t.parse::<jiff::Timestamp>().map_err(|_| {
        // A valid calendar date and time that is no timestamp is out of the clock's range.
        let calendar_ok = datetime.parse::<jiff::civil::DateTime>().is_ok();
        if calendar_ok && offset.is_empty() {
            format!("invalid deadline {q}: {DEADLINE_EXPECTED}, with an offset such as Z or +01:00")
        } else if calendar_ok {
            format!(
                "invalid deadline {q}: too far in the future; expected a time before {}, the latest the clock can represent",
                jiff::Timestamp::from_second(jiff::Timestamp::MAX.as_second())
                    .unwrap_or(jiff::Timestamp::MAX)
            )
        } else {
            format!("invalid deadline {q}: {DEADLINE_EXPECTED}")
        }
    })
}

/// Splits `2026-11-23T08:00:00+01:00` into the date-time and its offset (`Z`, `+01:00`, or `""`).
fn split_offset(t: &str) -> (&str, &str) {
    if let Some(rest) = t.strip_suffix(['Z', 'z']) {
        return (rest, &t[rest.len()..]);
    }
    // The offset's sign comes after the date (`YYYY-MM-DD`, 10 bytes).
    match t.get(10..).and_then(|time| time.rfind(['+', '-'])) {
        Some(i) => t.split_at(10 + i),
        None => (t, ""),
    }
}

/// `(hours, minutes)` of a numeric offset `+HH:MM`, `+HHMM` or `+HH`; `None` for any other text.
fn offset_fields(offset: &str) -> Option<(u32, u32)> {
    let digits = offset.strip_prefix(['+', '-'])?;
    let two = |d: &str| {
        (d.len() == 2 && d.bytes().all(|b| b.is_ascii_digit())).then(|| d.parse().ok())?
    };
    // `get`, not indexing: the text is the user's, and a multi-byte character is no digit.
    match digits.len() {
        2 => Some((two(digits)?, 0)),
        4 => Some((two(digits.get(..2)?)?, two(digits.get(2..)?)?)),
        5 if digits.as_bytes().get(2) == Some(&b':') => {
            Some((two(digits.get(..2)?)?, two(digits.get(3..)?)?))
        }
        _ => None,
    }
}

/// Parses a percentage for `--floor` and the config's `floor`: `5`, `2.5%`; at least 0 and below 100.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(v) if (0.0..100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid percentage {}: expected a number from 0 up to (not including) 100, e.g. 5 or 2.5%",
            quote_value(s)
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `--pid 2147483648` said "expected a positive process ID" and `--pid +5` was read as 5.
    #[test]
    fn pids_are_digits_up_to_the_linux_limit() {
        assert_eq!(parse_pid("1"), Ok(1));
        assert_eq!(parse_pid("4194303"), Ok(4_194_303));
        for big in ["4194304", "2147483648", "99999999999999999999999"] {
            let e = parse_pid(big).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid PID '{big}': too large")) && e.contains("4194303"),
                "{e}"
            );
        }
        for bad in ["+5", "-5", "5a", "", " ", "0x10", "0"] {
            let e = parse_pid(bad).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "invalid PID '{bad}': expected a positive process ID"
                )),
                "{e}"
            );
        }
    }

    /// `--floor 100` was refused with "expected a number from 0 to 100".
    #[test]
    fn floor_message_states_the_range_it_enforces() {
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert_eq!(parse_percent("99.9%"), Ok(99.9));
        for bad in ["100", "100%", "-1", "nan", "inf", "x"] {
            let e = parse_percent(bad).unwrap_err();
            assert!(e.contains("from 0 up to (not including) 100"), "{e}");
        }
    }

    /// `9999-12-31T00:00:00Z` was refused without a reason, and `+25:00` (outside RFC 3339) was taken.
    #[test]
    fn deadlines_out_of_range_or_with_bad_offsets_say_why() {
        let e = parse_deadline("9999-12-31T00:00:00Z").unwrap_err();
        assert!(
            e.contains("too far in the future") && e.contains("9999-12-30T22:00:00Z"),
            "{e}"
        );
        for bad in [
            "2026-11-23T08:00:00+25:00",
            "2026-11-23T08:00:00-24:00",
            "2026-11-23T08:00:00+0960",
        ] {
            let e = parse_deadline(bad).unwrap_err();
            assert!(e.contains("outside RFC 3339"), "{e}");
        }
        assert!(
            parse_deadline("2026-11-23T08:00:00")
                .unwrap_err()
                .contains("with an offset such as Z")
        );
        for bad in ["tomorrow", "2026-02-30T00:00:00Z"] {
            let e = parse_deadline(bad).unwrap_err();
            assert_eq!(e, format!("invalid deadline '{bad}': {DEADLINE_EXPECTED}"));
        }
        for good in [
            "2026-11-23T08:00:00Z",
            "2026-11-23T08:00:00+23:59",
            "2026-11-23T08:00:00-05:00",
            "2026-11-23t08:00:00z",
        ] {
            assert!(parse_deadline(good).is_ok(), "{good}");
        }
    }

    /// The property test found `--deadline` slicing an offset through a multi-byte
    /// character (a panic on "RTMIN+RTMIN+\u{2028}'").
    #[test]
    fn a_multibyte_character_in_a_deadline_offset_is_an_error_not_a_panic() {
        for bad in [
            "RTMIN+RTMIN+\u{2028}'",
            "2026-11-23T08:00:00+\u{e9}\u{e9}",
            "2026-11-23T08:00:00+1\u{e9}00",
        ] {
            let e = parse_deadline(bad).unwrap_err();
            assert!(e.starts_with("invalid deadline"), "{e}");
        }
    }
}
