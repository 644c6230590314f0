//! The binary's parsers of durations, sizes and signals against the table of cases the
//! Python client is tested with too (`tests/cases/units.json`, the one statement of what
//! each text means). Every case goes through the parser itself (`watchdog_types::units`),
//! through the flag that uses it (`--interval`, `--mem-limit`, `--signal`, parsed by clap as
//! the binary parses [`WatchOptions`]), and through the config file's key (`interval`,
//! `mem_limit`, `signal`), so the three agree with each other and with the client.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;
use watchdog_config::options::WatchOptions;
use watchdog_config::{Host, Settings, parse_file};
use watchdog_types::units;

const CASES: &str = include_str!("../../../tests/cases/units.json");

/// The flags alone, as the binary flattens them into its command line.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    options: WatchOptions,
}

/// One row of the table: the text, and the value it means or `None` for an error.
struct Case<T> {
    text: String,
    want: Option<T>,
}

fn cases<T>(section: &str, field: &str, value: impl Fn(&Value) -> Option<T>) -> Vec<Case<T>> {
    let table: Value = serde_json::from_str(CASES).unwrap();
    let rows = table[section].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r.get("error").is_some())
            && rows.iter().any(|r| r.get(field).is_some()),
        "{section}: the table needs values and errors"
    );
    rows.iter()
        .map(|row| {
            let text = row["text"].as_str().unwrap().to_string();
            let want = match (row.get(field), row.get("error")) {
                (Some(v), None) => {
                    Some(value(v).unwrap_or_else(|| panic!("{section} {text:?}: bad {field}")))
                }
                (None, Some(_)) => None,
                _ => panic!("{section} {text:?}: expected exactly one of {field} and error"),
            };
            Case { text, want }
        })
        .collect()
}

fn flag(name: &str, text: &str) -> Result<WatchOptions, String> {
    Flags::try_parse_from(["watchdog".to_string(), format!("--{name}={text}")])
        .map(|f| f.options)
        .map_err(|e| e.to_string())
}

/// `key = "text"` in a config file, read as the binary reads one.
fn file(key: &str, text: &str) -> Result<Settings, String> {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => quoted.extend(['\\', c]),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    parse_file(&format!("{key} = {quoted}\n"), Path::new("units.toml"))
        .map(|f| Settings::from_file(Host::from_env(), &f))
}

/// Checks each way of parsing a case; returns one line per disagreement.
fn check<T: PartialEq + std::fmt::Debug>(
    case: &Case<T>,
    same: impl Fn(&T, &T) -> bool,
    ways: [(&str, Result<T, String>); 3],
) -> Vec<String> {
    ways.into_iter()
        .filter_map(|(way, got)| {
            let ok = match (&case.want, &got) {
                (Some(want), Ok(got)) => same(want, got),
                (None, Err(_)) => true,
                _ => false,
            };
            (!ok).then(|| {
                format!(
                    "{:?} by {way}: expected {:?}, got {got:?}",
                    case.text, case.want
                )
            })
        })
        .collect()
}

fn assert_none(section: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{section}: the binary disagrees with tests/cases/units.json:\n{}",
        failures.join("\n")
    );
}

#[test]
fn durations_parse_as_the_table_says() {
    let close = |want: &Duration, got: &Duration| {
        let (w, g) = (want.as_secs_f64(), got.as_secs_f64());
        (w - g).abs() <= 1e-9 * w.max(1.0)
    };
    let mut failures = Vec::new();
    for case in cases("durations", "seconds", |v| {
        v.as_f64().map(Duration::from_secs_f64)
    }) {
        let t = case.text.as_str();
        failures.extend(check(
            &case,
            close,
            [
                (
                    "units::parse_duration",
                    units::parse_duration(t).map_err(|e| e.to_string()),
                ),
                (
                    "--interval",
                    flag("interval", t).map(|o| o.interval.unwrap()),
                ),
                (
                    "the file's interval",
                    file("interval", t).map(|s| s.interval),
                ),
            ],
        ));
    }
    assert_none("durations", failures);
}

#[test]
fn sizes_parse_as_the_table_says() {
    let mut failures = Vec::new();
    for case in cases("sizes", "bytes", Value::as_u64) {
        let t = case.text.as_str();
        failures.extend(check(
            &case,
            PartialEq::eq,
            [
                (
                    "units::parse_size",
                    units::parse_size(t).map_err(|e| e.to_string()),
                ),
                (
                    "--mem-limit",
                    flag("mem-limit", t).map(|o| o.mem_limit.unwrap()),
                ),
                (
                    "the file's mem_limit",
                    file("mem_limit", t).map(|s| s.mem_limit.unwrap()),
                ),
            ],
        ));
    }
    assert_none("sizes", failures);
}

#[test]
fn signals_parse_as_the_table_says() {
    // The table's real-time numbers are glibc's; a C library with other bounds needs its own.
    assert_eq!(
        (libc_rtmin(), libc_rtmax()),
        (34, 64),
        "the table assumes glibc's SIGRTMIN and SIGRTMAX"
    );
    let mut failures = Vec::new();
    for case in cases("signals", "number", |v| {
        v.as_i64().and_then(|n| i32::try_from(n).ok())
    }) {
        let t = case.text.as_str();
        failures.extend(check(
            &case,
            PartialEq::eq,
            [
                (
                    "units::parse_signal",
                    units::parse_signal(t).map_err(|e| e.to_string()),
                ),
                ("--signal", flag("signal", t).map(|o| o.signal.unwrap())),
                ("the file's signal", file("signal", t).map(|s| s.signal)),
            ],
        ));
    }
    assert_none("signals", failures);
}

/// SIGRTMIN and SIGRTMAX as the parser computes them (from the names it resolves).
fn libc_rtmin() -> i32 {
    units::parse_signal("RTMIN").unwrap()
}

fn libc_rtmax() -> i32 {
    units::parse_signal("RTMAX").unwrap()
}
