//! Parsers for the human units on the command line and in the config file:
//! durations (`10ms`, `5s`, `2m`, `12h`, `1h30m`), sizes (`512MiB`, `1.5G`,
//! `1000000`) and signals (`USR1`, `SIGUSR1`, `10`), with error messages that
//! quote the bad value and say what was expected.

use std::time::Duration;

/// A value that did not parse; the message is one line, fit to show a user.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {what} '{value}': expected {expected}")]
pub struct UnitError {
    /// What was being parsed (`duration`, `size`, `signal`).
    pub what: &'static str,
    /// The text as given.
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

const DURATION_EXPECTED: &str =
    "a number with a unit (ms, s, m, h, d), e.g. 10ms, 5s, 2m, 12h or 1h30m";
const SIZE_EXPECTED: &str = "a number of bytes with an optional unit (B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB), e.g. 512MiB, 1.5G or 1000000";
const SIGNAL_EXPECTED: &str = "a signal name or number, e.g. USR1, SIGUSR1, 10 (one of HUP INT QUIT USR1 USR2 TERM ALRM CONT WINCH, or 1-64)";

/// Parses a duration such as `10ms`, `1.5s`, `2m`, `12h` or `1h30m`; a bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError {
        what: "duration",
        value: text.to_string(),
        expected: DURATION_EXPECTED,
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
    if !total.is_finite() || total > 1e12 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Parses a size such as `512MiB`, `2GiB`, `1.5G` or `1000000` (bytes); `K`/`M`/`G` alone are powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError {
        what: "size",
        value: text.to_string(),
        expected: SIZE_EXPECTED,
    };
    let s = text.trim();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(num_end);
    if num.is_empty() {
        return Err(err());
    }
    let value: f64 = num.parse().map_err(|_| err())?;
    let scale: f64 = match unit.trim() {
        "" | "B" | "b" => 1.0,
        "K" | "k" | "KiB" | "kiB" => 1024.0,
        "KB" | "kB" => 1e3,
        "M" | "MiB" => 1024.0 * 1024.0,
        "MB" => 1e6,
        "G" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "GB" => 1e9,
        "T" | "TiB" => 1024f64.powi(4),
        "TB" => 1e12,
        _ => return Err(err()),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(err());
    }
    Ok(bytes.round() as u64)
}

const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("WINCH", 28),
];

/// Parses a signal given as `USR1`, `SIGUSR1`, `sigusr1` or `10`; returns its number.
pub fn parse_signal(text: &str) -> Result<i32, UnitError> {
    let err = || UnitError {
        what: "signal",
        value: text.to_string(),
        expected: SIGNAL_EXPECTED,
    };
    let s = text.trim();
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) && n != 9 && n != 19 {
            Ok(n)
        } else {
            Err(err())
        };
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(rest) = name.strip_prefix("RTMIN+") {
        let n: i32 = rest.parse().map_err(|_| err())?;
        return if (0..=30).contains(&n) {
            Ok(34 + n)
        } else {
            Err(err())
        };
    }
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, num)| *num)
        .ok_or_else(err)
}

/// The conventional name of a signal number (`SIGUSR1`), or `SIG<n>` for others.
pub fn signal_name(num: i32) -> String {
    match SIGNALS.iter().find(|(_, n)| *n == num) {
        Some((name, _)) => format!("SIG{name}"),
        None if num == 9 => "SIGKILL".to_string(),
        None if (34..=64).contains(&num) => format!("SIGRTMIN+{}", num - 34),
        None => format!("SIG{num}"),
    }
}

/// Formats bytes for people: `1.50 GiB`, `512.0 MiB`, `900 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
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
mod tests {
    use super::*;

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
        assert_eq!(parse_signal("USR1"), Ok(10));
        assert_eq!(parse_signal("SIGUSR1"), Ok(10));
        assert_eq!(parse_signal("sigusr2"), Ok(12));
        assert_eq!(parse_signal("10"), Ok(10));
        assert_eq!(parse_signal("SIGRTMIN+2"), Ok(36));
        for bad in ["", "KILL", "9", "0", "65", "USR3"] {
            assert!(parse_signal(bad).is_err(), "{bad} should not parse");
        }
        assert_eq!(signal_name(10), "SIGUSR1");
    }
}
