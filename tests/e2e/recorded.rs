//! The whole binary driven by a recorded tree (`WATCHDOG_ROOT`, the test seam of
//! `docs/design.md`): `tests/recorded/v2-job`, a `sleep` recorded on a real machine in a
//! cgroup v2 job layout (its `README.md` says where each file came from). The watch reads
//! the recorded host memory and cgroup limits, never signals anything (the recorded PID is
//! no process here), ends as a target that exited once `DIR/proc/PID` is removed; the
//! service refuses to start on a recorded tree.

use std::process::{Child, Stdio};
use std::time::Duration;

use watchdog_testsupport::copy_tree;

use crate::support::{bin, of_kind, read_events, repo, scratch, wait_for};

/// The PID of the recorded `sleep`.
const RECORDED_PID: &str = "22161";

/// A watchdog killed when dropped.
struct Watching(Child);

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_recorded_tree_drives_the_watch_until_its_process_directory_is_gone() {
    let dir = scratch();
    let root = dir.path().join("root");
    copy_tree(&repo().join("tests/recorded/v2-job"), &root);
    // The recorded process catches SIGUSR1: the alert would signal it on a real host.
    let status = root.join(format!("proc/{RECORDED_PID}/status"));
    let text = std::fs::read_to_string(&status).unwrap();
    let caught: String = text
        .lines()
        .map(|l| match l.starts_with("SigCgt:") {
            true => "SigCgt:\t0000000000000200\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&status, caught).unwrap();
    let events = dir.path().join("events.jsonl");
    let request = dir.path().join("request.json");
    let err = dir.path().join("err.log");
    let mut watchdog = Watching(
        bin()
            .env("WATCHDOG_ROOT", &root)
            // The recorded tree's own DMI strings (a QEMU machine: no cloud to ask).
            .env_remove("WATCHDOG_DMI_ROOT")
            .args(["--pid", RECORDED_PID, "--interval", "100ms", "--gpu", "off"])
            .args(["--no-notify", "--mem-limit", "1MiB", "--events"])
            .arg(&events)
            .arg("--request-file")
            .arg(&request)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&err).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(30), || !of_kind(
            &read_events(&events),
            "alert"
        )
        .is_empty()),
        "no alert: {}",
        log()
    );

    let all = read_events(&events);
    let limit = |resource: &str| {
        let found = of_kind(&all, "limit");
        let e = found
            .iter()
            .find(|e| e["resource"] == resource)
            .unwrap_or_else(|| panic!("no limit event for {resource}: {all:?}"));
        (
            e["limit"].as_u64(),
            e["source"].as_str().unwrap().to_string(),
        )
    };
    // MemTotal of the recorded meminfo, 24684092 kB.
    let (host, source) = limit("host_memory");
    assert_eq!(host, Some(24_684_092 * 1024));
    assert_eq!(source, root.join("proc/meminfo").display().to_string());
    // The recorded job's parent slice holds the 8 GiB limit; the mount point the recorded
    // mountinfo names (/sys/fs/cgroup) is found under the root.
    let (cgroup, source) = limit("cgroup_memory");
    assert_eq!(cgroup, Some(8 << 30));
    let job = root.join("sys/fs/cgroup/train.slice/job-17.scope");
    assert!(source.starts_with(&job.display().to_string()), "{source}");
    let start = &of_kind(&all, "start")[0];
    assert_eq!(start["pid"], 22161);
    assert_eq!(
        start["environment"]["host"]["kernel"], "6.18.44-fc-v657",
        "{start}"
    );
    assert_eq!(
        start["environment"]["host"]["mem_total_bytes"],
        24_684_092u64 * 1024
    );

    // The alert wrote the request file and signalled nothing, and said what it did not send.
    let alert = &of_kind(&all, "alert")[0];
    assert_eq!(alert["signalled"], serde_json::json!([]), "{alert}");
    assert!(request.exists(), "no request file: {}", log());
    assert!(
        log().contains(
            "not sent SIGUSR1 to pid 22161: the watchdog reads a recorded tree (WATCHDOG_ROOT)"
        ),
        "{}",
        log()
    );

    // Alive while its directory exists; gone with it.
    assert!(watchdog.0.try_wait().unwrap().is_none(), "{}", log());
    std::fs::remove_dir_all(root.join(format!("proc/{RECORDED_PID}"))).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || watchdog
            .0
            .try_wait()
            .unwrap()
            .is_some()),
        "the watch did not end when the recorded process's directory went: {}",
        log()
    );
    assert!(
        log().contains("watchdog: PID 22161 (sleep) exited"),
        "{}",
        log()
    );
    let exit = read_events(&events);
    let exit = of_kind(&exit, "exit");
    assert_eq!(exit.len(), 1, "{exit:?}");
    assert_eq!(exit[0]["code"], serde_json::Value::Null);
}

#[test]
fn the_service_refuses_a_recorded_tree_with_exit_2() {
    let dir = scratch();
    let out = bin()
        .env("WATCHDOG_ROOT", dir.path())
        .args(["daemon", "--config"])
        .arg(dir.path().join("absent.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "WATCHDOG_ROOT is set ({}): the service watches this machine's real processes",
            dir.path().display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_pid_the_recorded_tree_lacks_is_a_usage_error() {
    let dir = scratch();
    let out = bin()
        .env("WATCHDOG_ROOT", dir.path())
        .args(["--pid", RECORDED_PID, "--gpu", "off"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no process with PID 22161 in the recorded tree: expected a directory {}",
            dir.path().join("proc/22161").display()
        )),
        "{stderr}"
    );
}

#[test]
fn run_under_a_recorded_tree_is_a_usage_error_and_its_command_is_not_left_running() {
    let dir = scratch();
    let root = dir.path().join("root");
    copy_tree(&repo().join("tests/recorded/v2-job"), &root);
    let marker = dir.path().join("ran-on");
    let out = bin()
        .env("WATCHDOG_ROOT", &root)
        .args(["--gpu", "off", "run", "--", "sh", "-c"])
        .arg(format!("sleep 2; touch {}", marker.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("WATCHDOG_ROOT is set: expected a PID of the recorded tree"),
        "{stderr}"
    );
    // Killed, not left to run on unwatched.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !marker.exists(),
        "the command ran on after the watch failed"
    );
}
