//! Property tests of the settings' parsers on arbitrary and near-valid input: `--pid`,
//! `--deadline`, `--floor` (and the config's `floor`), and the TOML config file. None may
//! panic; every rejection is one line. See `docs/testing.md` for the long run.

#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use std::path::Path;

use prop_support::{arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;

use watchdog_config::options::{parse_deadline, parse_percent, parse_pid};
use watchdog_config::parse_file;

/// The fixed part of these messages (`invalid deadline '': expected an RFC 3339 ...`, or
/// `config file w.toml:N: ` and TOML's or a unit parser's message). The longest is an
/// unknown key's, which lists every key of the file (31, about 480 characters of them).
const FIXED: usize = 640;

const PIDS: &[&str] = &["1", "4242", "2147483647", " 17 ", "4194304"];
const DEADLINES: &[&str] = &[
    "2026-11-23T08:00:00Z",
    "2099-01-01T00:00:00+02:00",
    "2030-02-28T23:59:59.999999999-05:30",
    "2030-06-01 12:00:00Z",
];
const PERCENTS: &[&str] = &["5", "2.5%", "0", "99.9", "100", " 7 %"];

/// Config files: every key with a valid value, and a few shapes TOML allows.
const CONFIGS: &[&str] = &[
    "interval = \"100ms\"\nlead = \"30s\"\nsignal = \"USR1\"\nmem_limit = \"8GiB\"\n",
    "disks = [\"/tmp\", \"/data\"]\nmax_runtime = \"12h\"\ndeadline = \"2099-01-01T00:00:00Z\"\n",
    "request_file = \"/tmp/r.json\"\nevents = \"/tmp/e.jsonl\"\non_alert = \"echo hi\"\nrecord = \"/tmp/r.csv\"\n",
    "record_window = \"10m\"\ndry_run = true\ngpu = \"auto\"\nnvml_library = \"/usr/lib/libnvidia-ml.so.1\"\n",
    "floor = 5\nnotify = false\nstatus = true\nlog_format = \"json\"\n",
    "mem_limit = 1073741824\nsignal = 10\nfloor = 2.5\ndeadline = 2099-01-01T00:00:00Z\n",
    "# a comment\n\n[table]\nkey = 'literal'\n",
    "lead = \"\"\"\n5s\"\"\"\n",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_pid_deadline_floor_arbitrary_text(text in arbitrary_text()) {
        check_pid_deadline_floor(&text)?;
    }

    #[test]
    fn prop_pid_near_valid(text in near_valid(PIDS)) {
        check_pid_deadline_floor(&text)?;
    }

    #[test]
    fn prop_deadline_near_valid(text in near_valid(DEADLINES)) {
        check_pid_deadline_floor(&text)?;
    }

    #[test]
    fn prop_floor_near_valid(text in near_valid(PERCENTS)) {
        check_pid_deadline_floor(&text)?;
    }

    #[test]
    fn prop_config_arbitrary_text(text in arbitrary_text()) {
        check_config(&text)?;
    }

    #[test]
    fn prop_config_near_valid(text in near_valid(CONFIGS)) {
        check_config(&text)?;
    }
}

fn check_pid_deadline_floor(text: &str) -> Result<(), TestCaseError> {
    match parse_pid(text) {
        Ok(pid) => prop_assert!(
            pid > 0 && i32::try_from(pid).is_ok(),
            "{:?} -> {}",
            text,
            pid
        ),
        Err(e) => check_message(&e, text, FIXED)?,
    }
    if let Err(e) = parse_deadline(text) {
        check_message(&e, text, FIXED)?;
    }
    match parse_percent(text) {
        Ok(v) => prop_assert!((0.0..=100.0).contains(&v), "{:?} -> {}", text, v),
        Err(e) => check_message(&e, text, FIXED)?,
    }
    Ok(())
}

fn check_config(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = parse_file(text, Path::new("w.toml")) {
        // A value is quoted as TOML decoded it: a 2-character escape (`\e`) becomes one
        // control character, quoted as up to 6 (`\u{1b}`); so up to 3 times the input.
        check_message(&e, &text.repeat(3), FIXED)?;
    }
    Ok(())
}

/// `--pid $'1\n2'`, `--deadline`, `--floor` quoted a line break raw: a two-line error.
#[test]
fn a_line_break_in_pid_deadline_or_floor_is_escaped() {
    for e in [
        parse_pid("1\n2").err(),
        parse_deadline("2099\n").err(),
        parse_percent("5\r\n%").err(),
    ] {
        let e = e.unwrap_or_default();
        assert!(
            e.starts_with("invalid ") && !e.contains(['\n', '\r']),
            "{e:?}"
        );
    }
}

/// TOML quoted a bad value raw: `gpu = "auto\u{85}"` (NEL) made a two-line config error.
#[test]
fn a_control_character_in_a_bad_config_value_is_escaped() {
    let e = parse_file("gpu = \"auto\u{85}\"\n", Path::new("w.toml")).unwrap_err();
    assert!(e.starts_with("config file w.toml:1: "), "{e:?}");
    assert!(!e.contains('\u{85}') && e.contains("auto\\u{85}"), "{e:?}");
}
