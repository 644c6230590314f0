//! `watchdog diff A B` on real recordings: runs that differ in a limit, in the target's
//! own `/dev/shm`, or not at all, and files that are not recordings. Also checks that the
//! recording carries the environment record and the Python client's report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// A Python run that installs the client, holds ~60 MiB for a second, and exits.
const SIXTY_MIB: &str = "import sys, time, training_watchdog as tw; tw.install(); \
                         x = b'x' * (60 << 20); time.sleep(1.0)";

/// Runs `watchdog FLAGS --record REC run -- python3 -c SIXTY_MIB` in `dir`.
fn record(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let rec = dir.join(name);
    let out = bin()
        .current_dir(dir)
        .args([
            "--gpu",
            "off",
            "--interval",
            "20ms",
            "--dry-run",
            "--record",
        ])
        .arg(&rec)
        .args(flags)
        .args(["run", "--", "python3", "-c", SIXTY_MIB])
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rec
}

fn diff(a: &Path, b: &Path) -> Output {
    bin().arg("diff").arg(a).arg(b).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The recording's `meta` line.
fn meta(rec: &Path) -> Value {
    let text = std::fs::read_to_string(rec).unwrap();
    let line = text.lines().nth(1).unwrap();
    serde_json::from_str::<Value>(&line[1..]).unwrap()["meta"].clone()
}

#[test]
fn diff_names_the_memory_limit_one_run_exceeded_first() {
    let dir = scratch();
    let a = record(dir.path(), "small.rec", &["--mem-limit", "40MiB"]);
    let b = record(dir.path(), "big.rec", &["--mem-limit", "1GiB"]);

    // The recording holds the environment: host, limits, and the client's Python side.
    let env = &meta(&a)["environment"];
    assert!(env["host"]["cpu_cores"].as_u64().unwrap() >= 1, "{env}");
    assert!(env["host"]["kernel"].is_string(), "{env}");
    let tree = env["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["resource"] == "tree_memory")
        .unwrap_or_else(|| panic!("no tree_memory limit in {env}"));
    assert_eq!(tree["limit"], 40 << 20);
    assert_eq!(
        env["python"]["version"]
            .as_str()
            .unwrap()
            .split('.')
            .count(),
        3,
        "{env}"
    );
    assert_eq!(
        env["definitions"]["cgroup_memory"],
        "usage - active_file - inactive_file"
    );
    let text = std::fs::read_to_string(&a).unwrap();
    assert!(
        text.lines().any(|l| l.contains(r#""event":"environment""#)),
        "no environment event in {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(r#""event":"start""#) && l.contains(r#""environment""#)),
        "no environment in the start event: {text}"
    );

    let out = diff(&a, &b);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[2].contains("difference"), "{text}");
    assert!(
        lines[3].starts_with("  limit tree_memory: A 40.00 MiB | B 1.00 GiB"),
        "{text}"
    );
    assert!(
        lines[4].contains("A's peak") && lines[4].contains("reached its limit"),
        "{text}"
    );
    assert!(text.contains("Verdicts:\n  A: exited"), "{text}");
}

#[test]
fn diff_of_identical_runs_exits_0() {
    let dir = scratch();
    let a = record(dir.path(), "one.rec", &["--mem-limit", "1GiB"]);
    let b = record(dir.path(), "two.rec", &["--mem-limit", "1GiB"]);
    for (x, y) in [(&a, &b), (&a, &a)] {
        let out = diff(x, y);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            text.contains("The environments and limits match."),
            "{text}"
        );
    }
}

#[test]
fn diff_of_a_bad_file_exits_2_with_one_line() {
    let dir = scratch();
    let good = record(dir.path(), "good.rec", &[]);
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "time,used,limit\n0,1,10\n1,2,10\n").unwrap();
    let garbage = dir.path().join("garbage.rec");
    std::fs::write(
        &garbage,
        "# watchdog recording v1\n#{\"meta\": [1,2]}\nnot a table\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.rec");
    for (bad, says) in [
        (&missing, "cannot read recording"),
        (&trace, "not a watchdog recording"),
        (&garbage, "line 2"),
    ] {
        for out in [diff(&good, bad), diff(bad, &good)] {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(says), "{err}");
            assert!(out.stdout.is_empty());
        }
    }
}

/// Starts `sh -c SCRIPT` (which touches `$0` when ready, then sleeps), waits until it is
/// ready, and attaches a recording watchdog to it until it exits.
fn attach_and_record(dir: &Path, name: &str, prefix: &[&str], script: &str) -> PathBuf {
    let ready = dir.join(format!("{name}.ready"));
    let mut target = Command::new(prefix[0])
        .args(&prefix[1..])
        .args(["sh", "-c", script])
        .arg(&ready)
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || ready.exists()),
        "{script} did not get ready"
    );
    let rec = dir.join(name);
    let out = bin()
        .current_dir(dir)
        .args(["--gpu", "off", "--interval", "20ms", "--record"])
        .arg(&rec)
        .args(["--pid", &target.id().to_string()])
        .output()
        .unwrap();
    let _ = target.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rec
}

#[test]
fn diff_names_a_different_dev_shm_in_the_target_mount_namespace() {
    if !require(
        is_root() && Path::new("/usr/bin/unshare").exists(),
        "root and unshare(1), for a private /dev/shm",
    ) {
        return;
    }
    let dir = scratch();
    let plain = attach_and_record(
        dir.path(),
        "plain.rec",
        &["env"],
        "touch \"$0\" && exec sleep 1.5",
    );
    let small = attach_and_record(
        dir.path(),
        "small-shm.rec",
        &["unshare", "-m", "--propagation", "private"],
        "mount -t tmpfs -o size=64m tmpfs /dev/shm && touch \"$0\" && exec sleep 1.5",
    );
    let shm = &meta(&small)["environment"]["shm"];
    assert_eq!(shm["size_bytes"], 64 << 20, "{shm}");
    assert_eq!(shm["same_as_host"], false, "{shm}");
    let out = diff(&plain, &small);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let first = text.lines().nth(3).unwrap_or_default();
    assert!(
        first.starts_with("  /dev/shm size: A ") && first.ends_with("| B 64.00 MiB"),
        "{text}"
    );
}
