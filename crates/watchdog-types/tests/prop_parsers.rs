//! Property tests of the unit parsers (`--interval`, `--lead`, `--mem-limit`, `--signal` and
//! the same keys in the config file) on arbitrary and near-valid text: they never panic,
//! and every rejection is a one-line message. See `docs/testing.md` for the long run.
#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_types::units::{parse_duration, parse_signal, parse_size, signal_name};

/// The fixed part of a unit error: `invalid signal '': expected ` and the longest list of
/// what is accepted (the signal one, which lists every name).
const FIXED: usize = 420;

const DURATIONS: &[&str] = &[
    "10ms", "5s", "2m", "12h", "1h30m", "1.5s", "0", "250us", "1d", "3 min",
];
const SIZES: &[&str] = &[
    "512MiB",
    "2GiB",
    "1.5G",
    "1000000",
    "1GB",
    "0.4K",
    "16777215T",
    "12.",
    ".5KB",
];
const SIGNALS: &[&str] = &[
    "USR1",
    "SIGUSR1",
    "sigusr2",
    "10",
    "RTMIN+2",
    "SIGRTMAX-1",
    "TERM",
    "HUP",
];

fn check_all(text: &str) -> Result<(), TestCaseError> {
    match parse_duration(text) {
        Ok(d) => prop_assert!(d.as_secs_f64() <= 1e12, "{:?} -> {:?}", text, d),
        Err(e) => check_message(&e.to_string(), text, FIXED)?,
    }
    if let Err(e) = parse_size(text) {
        check_message(&e.to_string(), text, FIXED)?;
    }
    match parse_signal(text) {
        Ok(n) => prop_assert_eq!(parse_signal(&signal_name(n)), Ok(n)),
        Err(e) => check_message(&e.to_string(), text, FIXED)?,
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_units_arbitrary_text(text in arbitrary_text()) {
        check_all(&text)?;
    }

    #[test]
    fn prop_durations_near_valid(text in near_valid(DURATIONS)) {
        check_all(&text)?;
    }

    #[test]
    fn prop_sizes_near_valid(text in near_valid(SIZES)) {
        check_all(&text)?;
    }

    #[test]
    fn prop_signals_near_valid(text in near_valid(SIGNALS)) {
        check_all(&text)?;
    }

    /// Every u64 written in digits, with or without `B`, is itself.
    #[test]
    fn prop_sizes_any_u64_exact(n in any::<u64>(), unit in proptest::sample::select(&["", "B", " B", "b"][..])) {
        prop_assert_eq!(parse_size(&format!("{n}{unit}")), Ok(n));
    }
}

/// A value with a line break was quoted raw: `--mem-limit $'12\nXB'` printed two lines.
#[test]
fn a_line_break_in_a_bad_value_is_escaped_in_the_message() {
    for bad in ["12\nXB", "5\rx", "US\u{2028}R1", "1\u{1b}[31ms"] {
        for msg in [
            parse_size(bad).unwrap_err().to_string(),
            parse_duration(bad).unwrap_err().to_string(),
            parse_signal(bad).unwrap_err().to_string(),
        ] {
            assert!(!msg.contains(['\n', '\r', '\u{2028}', '\u{1b}']), "{msg:?}");
        }
    }
    assert!(
        parse_size("12\nXB")
            .unwrap_err()
            .to_string()
            .starts_with("invalid size '12\\nXB': expected ")
    );
}
