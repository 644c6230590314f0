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

/// The watchdog, in `dir`, sampling fast, recording to `rec`.
fn recording_watchdog(dir: &Path, rec: &Path) -> Command {
    let mut cmd = bin();
    cmd.current_dir(dir)
        .args(["--gpu", "off", "--interval", "20ms", "--record"])
        .arg(rec);
    cmd
}

/// Runs `watchdog FLAGS --record REC run -- python3 -c SCRIPT` in `dir`, the client
/// importable, and checks that it succeeded.
fn run_python(dir: &Path, rec: &Path, flags: &[&str], script: &str) {
    let out = recording_watchdog(dir, rec)
        .args(flags)
        .args(["run", "--", "python3", "-c", script])
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    assert_success(&out, "watchdog");
}

/// Records `python3 -c SIXTY_MIB` with `--dry-run` and `flags` to `dir/name`.
fn record(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let rec = dir.join(name);
    run_python(dir, &rec, &[&["--dry-run"], flags].concat(), SIXTY_MIB);
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
    let out = recording_watchdog(dir, &rec)
        .args(["--pid", &target.id().to_string()])
        .output()
        .unwrap();
    let _ = target.wait();
    assert_success(&out, "watchdog");
    rec
}

/// Whether a test may give a process its own /dev/shm (root and unshare(1)); in CI it must.
fn can_make_a_private_shm() -> bool {
    require(
        is_root() && Path::new("/usr/bin/unshare").exists(),
        "root and unshare(1), for a private /dev/shm",
    )
}

#[test]
fn diff_names_a_different_dev_shm_in_the_target_mount_namespace() {
    if !can_make_a_private_shm() {
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

/// Runs a Python process in a fresh memory cgroup of `limit_mib` that waits for a go
/// file, then holds 480 MiB for a second (the issue's pair: OOM-killed in 400 MiB, fits in 1 GiB); a watchdog attached with `--pid` records it.
fn record_in_cgroup(dir: &Path, name: &str, limit_mib: u64) -> Option<PathBuf> {
    let cg = need(MemoryCgroup::create(limit_mib << 20), "a memory cgroup")?;
    let go = dir.join(format!("{name}.go"));
    let script = "import os, sys, time\n\
                  while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n\
                  chunks = []\n\
                  for _ in range(48):\n    chunks.append(b'x' * (10 << 20)); time.sleep(0.05)\n\
                  time.sleep(1.0)\n";
    let mut target = Command::new("sh")
        .args(["-c", "echo $$ > \"$0\" && exec python3 -c \"$1\" \"$2\""])
        .arg(cg.procs())
        .arg(script)
        .arg(&go)
        .spawn()
        .unwrap();
    let pid = target.id();
    cg.wait_holds(pid);
    let rec = dir.join(name);
    let events = dir.join(format!("{name}.events"));
    let watchdog = recording_watchdog(dir, &rec)
        .arg("--dry-run")
        .arg("--events")
        .arg(&events)
        .args(["--pid", &pid.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(&events).is_ok_and(|t| t.contains("\"cgroup_memory\""))
    }));
    std::fs::write(&go, "").unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let _ = target.wait();
    assert_success(&out, "watchdog");
    Some(rec)
}

#[test]
fn diff_names_the_cgroup_limit_of_the_run_that_was_oom_killed() {
    if !require(is_root(), "root, for memory cgroups") {
        return;
    }
    let dir = scratch();
    let Some(killed) = record_in_cgroup(dir.path(), "killed.rec", 400) else {
        return;
    };
    let Some(fine) = record_in_cgroup(dir.path(), "fine.rec", 1024) else {
        return;
    };
    let out = diff(&killed, &fine);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[3].starts_with("  limit cgroup_memory: A 400.00 MiB")
            && lines[3].contains("| B 1.00 GiB"),
        "{text}"
    );
    assert!(
        lines[4].contains("A's peak") && lines[4].contains("reached its limit"),
        "{text}"
    );
    assert!(text.contains("  A: oom_kill"), "{text}");
    // Attached with --pid, the watchdog cannot see B's exit status: not an OOM kill.
    assert!(text.contains("  B: unknown: exited"), "{text}");
}

/// An environment file left beside the request file by an earlier run (another PID) is
/// not taken for this run's; this run's own report is, and is removed once read.
#[test]
fn a_stale_python_report_is_not_this_runs() {
    let dir = scratch();
    let req = dir.path().join("run.request.json");
    let env_file = dir.path().join("run.request.json.environment");
    let stale = r#"{"pid":1,"version":"2.7.18","packages":{"torch":"0.4.0"}}"#;
    for (script, expect_python) in [("import time; time.sleep(0.5)", false), (SIXTY_MIB, true)] {
        std::fs::write(&env_file, stale).unwrap();
        let rec = dir.path().join("stale.rec");
        // Not a dry run: the report read is removed.
        run_python(
            dir.path(),
            &rec,
            &["--request-file", req.to_str().unwrap()],
            script,
        );
        let python = &meta(&rec)["environment"]["python"];
        if expect_python {
            assert_ne!(python["version"], "2.7.18", "{python}");
            assert!(python["version"].is_string(), "{python}");
            assert!(!env_file.exists(), "the report read is left behind");
        } else {
            assert!(python.is_null(), "the stale report was taken: {python}");
        }
    }
}

/// With `run`, a target that mounts its own /dev/shm after the start is read again when
/// the Python client reports: the recording has the target's size.
#[test]
fn a_run_targets_own_dev_shm_is_read_when_the_client_reports() {
    if !can_make_a_private_shm() {
        return;
    }
    let dir = scratch();
    let rec = dir.path().join("shm.rec");
    let out = recording_watchdog(dir.path(), &rec)
        .args([
            "--dry-run",
            "run",
            "--",
            "unshare",
            "-m",
            "--propagation",
            "private",
        ])
        .args([
            "sh",
            "-c",
            "mount -t tmpfs -o size=32m tmpfs /dev/shm && exec python3 -c \"$0\"",
        ])
        .arg(SIXTY_MIB)
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    assert_success(&out, "watchdog");
    let shm = &meta(&rec)["environment"]["shm"];
    assert_eq!(shm["size_bytes"], 32 << 20, "{shm}");
}

/// Records `python3 -c SIXTY_MIB` with `--dry-run` and `flags`, run from `cwd` (the
/// working directory is a watched disk), to `rec`.
fn record_from(cwd: &Path, rec: &Path, flags: &[&str]) {
    run_python(cwd, rec, &[&["--dry-run"], flags].concat(), SIXTY_MIB);
}

/// `watchdog report A B -o DIR/compare.html`: the page's text.
fn compare_page(dir: &Path, a: &Path, b: &Path) -> String {
    let page = dir.join("compare.html");
    let out = bin()
        .arg("report")
        .arg(a)
        .arg(b)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert_success(&out, "watchdog report A B");
    std::fs::read_to_string(&page).unwrap()
}

/// The page's table of differences.
pub fn differences_table(page: &str) -> &str {
    page.split("<table class=\"differences\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no difference table: {page}"))
}

/// The recording's watched disk at `path`: its mount point and filesystem type.
fn disk_mount(rec: &Path, path: &Path) -> (String, String) {
    let env = &meta(rec)["environment"];
    let disk = env["disks"]
        .as_array()
        .unwrap_or_else(|| panic!("no disks in {env}"))
        .iter()
        .find(|d| d["path"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("no disk {} in {env}", path.display()));
    let field = |f: &str| {
        disk[f]
            .as_str()
            .unwrap_or_else(|| panic!("no {f} in {disk}"))
            .to_string()
    };
    (field("mount_point"), field("fs_type"))
}

/// Issue 18: the same script under two memory limits, each run from its own directory
/// on one filesystem: `diff` and the comparison page name the memory limit and no disk
/// (the disks are paired by their mount point, the directories shown as detail).
#[test]
fn two_runs_from_two_directories_on_one_filesystem_differ_in_no_disk() {
    let dir = scratch();
    let (small, big) = (dir.path().join("small"), dir.path().join("big"));
    for d in [&small, &big] {
        std::fs::create_dir(d).unwrap();
    }
    let (a, b) = (dir.path().join("small.rec"), dir.path().join("big.rec"));
    record_from(&small, &a, &["--mem-limit", "40MiB"]);
    record_from(&big, &b, &["--mem-limit", "1GiB"]);
    let (mount, fs_type) = disk_mount(&a, &small);
    assert_eq!(disk_mount(&b, &big), (mount.clone(), fs_type.clone()));
    let canonical = std::fs::canonicalize(&small).unwrap();
    assert!(
        canonical.starts_with(&mount),
        "{mount} does not hold {small:?}"
    );
    assert!(!fs_type.is_empty());

    let out = diff(&a, &b);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("1 difference in environment and limits"),
        "{text}"
    );
    assert!(text.contains("  limit tree_memory: A 40.00 MiB"), "{text}");
    assert!(!text.contains("disk"), "{text}");

    let page = compare_page(dir.path(), &a, &b);
    let table = differences_table(&page);
    assert!(
        table.contains("data-field=\"limit tree_memory\""),
        "{table}"
    );
    assert!(!table.contains("disk"), "{table}");
    // The disk is among the facts the same in both runs, each with its directory.
    let same = page
        .split("<table class=\"same\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no same facts: {page}"));
    let row = same
        .lines()
        .find(|l| l.contains(&format!("data-field=\"limit disk on {mount}\"")))
        .unwrap_or_else(|| panic!("no disk on {mount} in {same}"));
    assert!(
        row.contains(small.to_str().unwrap()) && row.contains(big.to_str().unwrap()),
        "{row}"
    );
    // One panel for the disk, with both runs' curves.
    let panel = page
        .split("<g class=\"panel\"")
        .find(|p| p.contains(&format!("data-resource=\"disk:{}\"", small.display())))
        .unwrap_or_else(|| panic!("no panel of disk:{}: {page}", small.display()));
    assert!(
        panel.contains(&format!("data-resource-b=\"disk:{}\"", big.display())),
        "{panel}"
    );
    for run in ["a", "b"] {
        assert!(
            panel.contains(&format!("<g class=\"run\" data-run=\"{run}\"")),
            "{panel}"
        );
    }
    assert!(
        !page.contains(&format!("data-resource=\"disk:{}\"", big.display())),
        "run B's disk drawn apart"
    );
}

/// A run from a tmpfs (another filesystem) against one from a directory elsewhere:
/// its disk differs, in `diff` and on the comparison page.
#[test]
fn a_run_from_a_tmpfs_differs_in_its_disk() {
    if !require(is_root(), "root (to mount a tmpfs)") {
        return;
    }
    let Some(fs) = need(Tmpfs::mount("64m"), "a tmpfs mount") else {
        return;
    };
    let dir = scratch();
    let (a, b) = (dir.path().join("plain.rec"), dir.path().join("tmpfs.rec"));
    record_from(dir.path(), &a, &["--mem-limit", "1GiB"]);
    record_from(fs.path(), &b, &["--mem-limit", "1GiB"]);
    let tmpfs = fs.path().to_str().unwrap();
    assert_eq!(
        disk_mount(&b, fs.path()),
        (tmpfs.to_string(), "tmpfs".to_string())
    );

    let out = diff(&a, &b);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "  limit disk on {tmpfs}: A absent | B 64.00 MiB tmpfs ({tmpfs})\n"
        )),
        "{text}"
    );
    assert!(!text.contains("limit tree_memory"), "{text}");

    let page = compare_page(dir.path(), &a, &b);
    let table = differences_table(&page);
    assert!(
        table.contains(&format!("data-field=\"limit disk on {tmpfs}\"")),
        "{table}"
    );
}

/// Two runs watching one path that is on another filesystem in each (the root filesystem,
/// then a tmpfs mounted over it): each disk row's note has only its own run's peak. The
/// note used to take a run's peak (and limit) by the other run's name, so the tmpfs row
/// said run A peaked at the root filesystem's many GiB on a disk A never watched.
#[test]
fn a_disk_one_run_did_not_watch_has_no_peak_of_that_run() {
    if !require(is_root(), "root (to mount a tmpfs)") {
        return;
    }
    let Some(fs) = need(Tmpfs::mount("64m"), "a tmpfs mount") else {
        return;
    };
    let dir = scratch();
    let (a, b) = (dir.path().join("plain.rec"), dir.path().join("tmpfs.rec"));
    record_from(fs.path(), &b, &["--mem-limit", "1GiB"]);
    let out = Command::new("umount").arg(fs.path()).output().unwrap();
    assert_success(&out, "umount");
    record_from(fs.path(), &a, &["--mem-limit", "1GiB"]);
    let path = fs.path().to_str().unwrap();
    let (root, _) = disk_mount(&a, fs.path());
    assert_ne!(root, path);

    let text = stdout(&diff(&a, &b));
    let note = |row: &str| {
        let mut lines = text.lines();
        lines
            .find(|l| l.starts_with(&format!("  limit disk on {row}: ")))
            .unwrap_or_else(|| panic!("no row of the disk on {row}: {text}"));
        lines.next().unwrap_or_default().trim().to_string()
    };
    let on_tmpfs = note(path);
    assert!(on_tmpfs.starts_with("peaks: A unknown, B "), "{text}");
    let on_root = note(&root);
    assert!(on_root.ends_with(", B unknown"), "{text}");
}
