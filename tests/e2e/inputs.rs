//! Unbounded input: a config file, a trace or a recording is read with a cap (1 MiB
//! for the config, 64 KiB per trace line), and an error quotes at most 80 characters of
//! a bad value. Each command runs under a 512 MiB address-space limit, so reading
//! without a cap ends in an allocation failure (not exit 2) instead of passing slowly.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{bin, scratch};

/// Runs the watchdog with `args` under `ulimit -v` (512 MiB) and returns its output and time.
fn run_capped(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 524288 && exec \"$0\" \"$@\"")
        .arg(bin().get_program())
        .args(args)
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run watchdog");
    (out, start.elapsed())
}

/// Exit 2, quickly, one short line on stderr containing `fragment`.
fn assert_short_usage_error(args: &[&str], fragment: &str) {
    let (out, took) = run_capped(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: stderr {}",
        &stderr[..stderr.len().min(500)]
    );
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(
        stderr.len() < 600,
        "{args:?}: {} bytes of stderr",
        stderr.len()
    );
    assert!(stderr.contains(fragment), "{args:?}: {stderr}");
    assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
}

#[test]
fn config_dev_zero_fails_fast_with_one_line() {
    assert_short_usage_error(
        &["--config", "/dev/zero", "--pid", "1"],
        "config file '/dev/zero' is larger than 1 MiB",
    );
}

#[test]
fn replay_dev_zero_fails_fast_with_one_line() {
    assert_short_usage_error(&["replay", "/dev/zero"], "line 1 is longer than 64 KiB");
}

#[test]
fn report_of_dev_zero_fails_fast_with_one_line() {
    let dir = scratch();
    let out = dir.path().join("r.svg");
    assert_short_usage_error(
        &["report", "/dev/zero", "-o", out.to_str().unwrap()],
        "line 1 is longer than 64 KiB",
    );
}

#[test]
fn a_10_mb_csv_line_is_not_echoed_whole() {
    let dir = scratch();
    let trace = dir.path().join("huge.csv");
    let mut text = String::from("time,used,limit\n0,1,2\n1,");
    text.push_str(&"9".repeat(10_000_000));
    text.push_str("x,2\n");
    std::fs::write(&trace, &text).unwrap();
    assert_short_usage_error(&["replay", trace.to_str().unwrap()], "line 3");
    let out = dir.path().join("r.html");
    assert_short_usage_error(
        &[
            "report",
            trace.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        "line 3",
    );
}

#[test]
fn a_bad_value_under_the_line_cap_is_quoted_to_80_characters() {
    let dir = scratch();
    let trace = dir.path().join("wide.csv");
    let bad = "9".repeat(60_000) + "x";
    std::fs::write(&trace, format!("time,used,limit\n0,1,2\n1,{bad},2\n")).unwrap();
    let expected = format!("invalid used '{}…' (60001 characters)", "9".repeat(80));
    assert_short_usage_error(&["replay", trace.to_str().unwrap()], &expected);
    let config = dir.path().join("w.toml");
    std::fs::write(&config, format!("lead = \"{bad}\"\n")).unwrap();
    assert_short_usage_error(
        &["--config", config.to_str().unwrap(), "--pid", "1"],
        &format!("invalid duration '{}…' (60001 characters)", "9".repeat(80)),
    );
}

#[test]
fn a_huge_command_line_value_is_quoted_to_80_characters() {
    let bad = "9".repeat(100_000) + "x";
    assert_short_usage_error(&["--interval", &bad, "--pid", "1"], "invalid duration");
    assert_short_usage_error(&["--mem-limit", &bad, "--pid", "1"], "invalid size");
    assert_short_usage_error(&["--pid", &bad], "invalid PID");
}
