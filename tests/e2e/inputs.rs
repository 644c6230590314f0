//! Unbounded input: a config file, a trace or a recording is read with a cap (1 MiB
//! for the config; 64 MiB, 64 KiB per line, 256 resources for a trace), must be a
//! regular file (a FIFO or a device is refused without blocking), and an error quotes at
//! most 80 characters of a bad value. Each command runs under a 1 GiB address-space
//! limit (`prlimit --as`), so reading without a cap ends in an allocation failure (not
//! exit 2) instead of passing slowly, and is killed after 60 s, so a hang fails the test
//! instead of stopping the suite.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{bin, scratch};

/// The address-space cap every command here runs under (1 GiB).
const AS_LIMIT: &str = "--as=1073741824";

/// Runs the watchdog with `args` under [`AS_LIMIT`] (killed after 60 s) and returns
/// its output and time.
fn run_capped(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = std::process::Command::new("timeout")
        .args(["-s", "KILL", "60", "prlimit", AS_LIMIT, "--"])
        .arg(bin().get_program())
        .args(args)
        .current_dir(std::env::temp_dir())
        .env("XDG_STATE_HOME", std::env::temp_dir().join("wd-e2e-state"))
        .output()
        .expect("run watchdog under timeout and prlimit");
    (out, start.elapsed())
}

/// A FIFO with no writer at `dir/name`.
fn fifo(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    path.to_str().unwrap().to_string()
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
        "cannot read config file '/dev/zero': it is a character device, not a regular file",
    );
    let dir = scratch();
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    assert_short_usage_error(
        &["--config", big.to_str().unwrap(), "--pid", "1"],
        "is larger than 1 MiB",
    );
}

#[test]
fn replay_dev_zero_fails_fast_with_one_line() {
    assert_short_usage_error(
        &["replay", "/dev/zero"],
        "cannot read trace '/dev/zero': it is a character device, not a regular file",
    );
}

#[test]
fn report_of_dev_zero_fails_fast_with_one_line() {
    let dir = scratch();
    let out = dir.path().join("r.svg");
    assert_short_usage_error(
        &["report", "/dev/zero", "-o", out.to_str().unwrap()],
        "it is a character device, not a regular file",
    );
}

/// `replay /dev/urandom` grew without bound (an allocation abort under a 1 GiB cap);
/// a FIFO blocked `--config`, `replay`, `report` and `diff` forever on the open.
#[test]
fn devices_and_fifos_are_refused_at_once_under_a_1_gib_cap() {
    let dir = scratch();
    let rec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../watchdog-report/tests/fixtures/cgroup_oom.rec"
    );
    let out = dir.path().join("r.html");
    let out = out.to_str().unwrap();
    assert_short_usage_error(
        &["replay", "/dev/urandom"],
        "cannot read trace '/dev/urandom': it is a character device, not a regular file",
    );
    let f = fifo(dir.path(), "f.csv");
    let why = "it is a FIFO, not a regular file";
    assert_short_usage_error(&["replay", &f], why);
    assert_short_usage_error(&["report", &f, "-o", out], why);
    assert_short_usage_error(&["report", rec, &f, "-o", out], why);
    assert_short_usage_error(&["diff", rec, &f], why);
    assert_short_usage_error(&["diff", &f, rec], why);
    assert_short_usage_error(&["--config", &f, "--pid", "1"], why);
    // An endless valid trace through a FIFO, a writer attached: refused all the same.
    let mut writer = std::process::Command::new("sh")
        .arg("-c")
        .arg("printf 'time,used,limit\\n' > \"$0\" && yes 1,2,3 > \"$0\"")
        .arg(&f)
        .spawn()
        .unwrap();
    assert_short_usage_error(&["replay", &f], why);
    let _ = writer.kill();
    let _ = writer.wait();
    assert!(!Path::new(out).exists());
}

/// A sparse 4 GiB file is refused by its size (replay's cap is 2 GiB, the readers that
/// draw every row 64 MiB); a valid trace near the 64 MiB cap is replayed and drawn under
/// the 1 GiB cap.
#[test]
fn inputs_are_bounded_by_size_and_the_largest_allowed_fits_in_1_gib() {
    let dir = scratch();
    let big = dir.path().join("big.csv");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let big = big.to_str().unwrap();
    let out = dir.path().join("r.svg");
    let out = out.to_str().unwrap();
    assert_short_usage_error(&["replay", big], "it is larger than 2 GiB");
    assert_short_usage_error(&["report", big, "-o", out], "it is larger than 64 MiB");
    assert_short_usage_error(&["diff", big, big], "it is larger than 64 MiB");

    // About 60 MiB: a million rows (the report's cap) of four resources.
    let trace = dir.path().join("long.csv");
    let mut text = String::with_capacity(62 << 20);
    text.push_str("time,resource,used,limit,note\n");
    let pad = "x".repeat(22);
    for i in 0..1_000_000u64 {
        let r = i % 4;
        let used = 1_000_000_000 + (i / 4) * 1000;
        text.push_str(&format!(
            "{}.{:03},gpu{r},{used},80000000000,{pad}\n",
            i / 40,
            (i % 40) * 25
        ));
    }
    assert!(
        text.len() < 64 << 20 && text.len() > 56 << 20,
        "{}",
        text.len()
    );
    std::fs::write(&trace, &text).unwrap();
    drop(text);
    let trace = trace.to_str().unwrap();
    for args in [vec!["replay", trace], vec!["report", trace, "-o", out]] {
        let (o, took) = run_capped(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?} ({took:?}): {stderr}");
    }
    let svg = std::fs::read_to_string(out).unwrap();
    assert!(svg.len() < 4 << 20, "{} bytes", svg.len());
}

/// `replay` takes a trace past the 64 MiB the drawing readers keep to (issue 3: a day of
/// 100 Hz samples is 403 MB), under the 1 GiB address-space cap all the same.
#[test]
fn replay_takes_a_trace_past_64_mib() {
    let dir = scratch();
    let trace = dir.path().join("day.csv");
    let mut text = String::with_capacity(72 << 20);
    text.push_str("time,used,limit,resource\n");
    let mut i = 0u64;
    while text.len() < 70 << 20 {
        text.push_str(&format!(
            "{}.{:02},{},68719476736,cgroup_memory\n",
            i / 100,
            i % 100,
            1_000_000_000 + i * 10
        ));
        i += 1;
    }
    std::fs::write(&trace, &text).unwrap();
    drop(text);
    let (o, took) = run_capped(&["replay", trace.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "({took:?}): {stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("\"samples\":{i}")),
        "{}",
        stdout.lines().last().unwrap_or_default()
    );
}

#[test]
fn too_many_resources_are_refused_with_the_line() {
    let dir = scratch();
    let trace = dir.path().join("many.csv");
    let mut text = String::from("time,resource,used,limit\n");
    for i in 0..100_000 {
        text.push_str(&format!("{i},r{i},1,2\n"));
    }
    std::fs::write(&trace, text).unwrap();
    let trace = trace.to_str().unwrap();
    let out = dir.path().join("r.svg");
    let why = "line 258: resource 'r256' is one too many: expected at most 256 resources";
    assert_short_usage_error(&["replay", trace], why);
    assert_short_usage_error(&["report", trace, "-o", out.to_str().unwrap()], why);
}

/// `replay` printed U+2028 and U+2029 raw: a line break to JavaScript's line readers.
#[test]
fn replay_escapes_the_unicode_line_separators() {
    let dir = scratch();
    let trace = dir.path().join("u.csv");
    std::fs::write(
        &trace,
        "time,resource,used,limit\n0,a\u{2028}b\u{2029}c\u{85}d,1,10\n1,a\u{2028}b\u{2029}c\u{85}d,2,10\n",
    )
    .unwrap();
    let out = bin().arg("replay").arg(&trace).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !stdout.contains(['\u{2028}', '\u{2029}', '\u{85}']),
        "{stdout:?}"
    );
    assert!(stdout.contains("a\\u2028b\\u2029c\\u0085d"), "{stdout}");
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        summary["resources"][0]["resource"],
        "a\u{2028}b\u{2029}c\u{85}d"
    );
}

/// `--disk "/nonexistent/it's a a a ..."` printed a 40,143-character line: the quote in
/// the path paired with the message's own quotes.
#[test]
fn a_long_disk_path_with_a_quote_is_cut_to_80_characters() {
    let long = format!("/nonexistent/it's {}", "a ".repeat(20_000));
    assert_short_usage_error(
        &["--disk", &long, "run", "--", "true"],
        "cannot watch disk '/nonexistent/it's a a",
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

/// A long header of control characters was quoted with two lengths, `'a\u{0}ba…' (189
/// characters) (1200 characters)`: the message's backstop cut again the value
/// `quote_value` had cut, its escapes counted as characters.
#[test]
fn a_value_of_control_characters_is_cut_once_with_its_length() {
    let dir = scratch();
    let trace = dir.path().join("nul.csv");
    std::fs::write(&trace, format!("{}\n0,1,2\n", "a\0b".repeat(400))).unwrap();
    let out = bin()
        .args(["replay", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches(" characters)").count(), 1, "{stderr}");
    let shown = "a\\u{0}b".repeat(26);
    assert!(
        stderr.contains(&format!(
            "found header '{}a\\u{{0}}…' (1200 characters)",
            &shown
        )),
        "{stderr}"
    );
}

#[test]
fn a_huge_command_line_value_is_quoted_to_80_characters() {
    let bad = "9".repeat(100_000) + "x";
    assert_short_usage_error(&["--interval", &bad, "--pid", "1"], "invalid duration");
    assert_short_usage_error(&["--mem-limit", &bad, "--pid", "1"], "invalid size");
    assert_short_usage_error(&["--pid", &bad], "invalid PID");
}
