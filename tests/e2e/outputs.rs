//! Outputs never destroy files: every output (request file, its `.ack`, events file,
//! recording) refuses a symlink and a file not of its own kind, no two share a path,
//! every location is checked writable at start, later failures are an error line and an
//! `output_error` event, a deleted working directory falls back to the state directory,
//! and the default recording goes to the state directory under a per-run name.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{
    Tmpfs, bin, is_root, need, of_kind, read_events, require, scratch, summary_recording, wait_for,
};

const PRECIOUS: &str = "print('my training script')\n";

/// Files in `dir`, sorted by name.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs the watchdog with `args` plus `run -- true`, expecting exit 2 with `fragment`.
fn assert_refused(args: &[&str], fragment: &str) {
    let out = bin()
        .args(["--gpu", "off"])
        .args(args)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(fragment), "{args:?}: {stderr}");
}

#[test]
fn an_output_never_replaces_a_file_of_another_kind_or_a_symlink() {
    let dir = scratch();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("train.py"), PRECIOUS).unwrap();
    std::os::unix::fs::symlink(p("train.py"), p("link")).unwrap();
    std::fs::write(p("req.json.ack"), PRECIOUS).unwrap();
    for (args, fragment) in [
        (
            vec!["--record", &p("train.py")],
            "it exists and is not a watchdog recording",
        ),
        (
            vec!["--events", &p("train.py")],
            "it exists and is not a watchdog events file",
        ),
        (vec!["--record", &p("link")], "it is a symbolic link"),
        (vec!["--events", &p("link")], "it is a symbolic link"),
        (vec!["--request-file", &p("link")], "it is a symbolic link"),
        (
            vec!["--request-file", &p("req.json")],
            "as the acknowledgment file (the request file + .ack): it exists and is not a watchdog acknowledgment",
        ),
    ] {
        assert_refused(&args, fragment);
    }
    for name in ["train.py", "req.json.ack"] {
        assert_eq!(
            std::fs::read_to_string(p(name)).unwrap(),
            PRECIOUS,
            "{name}"
        );
    }
    assert_eq!(names_in(dir.path()), ["link", "req.json.ack", "train.py"]);
}

#[test]
fn two_outputs_on_one_path_are_refused() {
    let dir = scratch();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    for args in [
        vec!["--events", &p("x"), "--request-file", &p("x")],
        vec!["--record", &p("x"), "--events", &p("sub/../x")],
        vec!["--record", &p("x"), "--request-file", &p("x")],
        vec!["--events", &p("r.json.ack"), "--request-file", &p("r.json")],
        vec!["--record", &p("r.json.ack"), "--request-file", &p("r.json")],
    ] {
        assert_refused(&args, "are the same file");
    }
    assert_eq!(names_in(dir.path()), ["sub"], "nothing written");
}

#[test]
fn existing_outputs_of_their_own_kind_are_reused_and_events_appended() {
    let dir = scratch();
    let events = dir.path().join("ev.jsonl");
    let rec = dir.path().join("rec.csv");
    let req = dir.path().join("req.json");
    for _ in 0..2 {
        let out = bin()
            .args(["--gpu", "off", "--events"])
            .arg(&events)
            .arg("--record")
            .arg(&rec)
            .arg("--request-file")
            .arg(&req)
            .args(["run", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(summary_recording(&stderr), rec);
    }
    // Appended, never truncated: two runs, two starts.
    assert_eq!(of_kind(&read_events(&events), "start").len(), 2);
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.starts_with("# watchdog recording v1\n"), "{text}");
}

/// Mounts a read-only tmpfs, or None (after `require`) when that is impossible here.
fn read_only_dir() -> Option<Tmpfs> {
    if !require(is_root(), "root (to mount a read-only tmpfs)") {
        return None;
    }
    let fs = Tmpfs::mount("1m")?;
    let ok = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(fs.path())
        .status()
        .is_ok_and(|s| s.success());
    require(ok, "a read-only tmpfs remount").then_some(fs)
}

#[test]
fn an_unwritable_output_location_is_refused_at_start() {
    let Some(ro) = read_only_dir() else { return };
    let in_ro = ro.path().join("x");
    let in_ro = in_ro.to_str().unwrap();
    for flag in ["--request-file", "--record", "--events"] {
        assert_refused(&[flag, in_ro], "Read-only file system");
    }
    // The default recording's state directory, too.
    let out = bin()
        .env("XDG_STATE_HOME", ro.path())
        .args(["--gpu", "off", "run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("state directory"), "{stderr}");
    assert!(stderr.contains("--record PATH"), "{stderr}");
}

#[test]
fn a_later_write_failure_is_an_error_line_and_an_event() {
    let dir = scratch();
    let events = dir.path().join("ev.jsonl");
    let req = dir.path().join("req.json");
    let rec = dir.path().join("rec.csv");
    // A runtime alert about 1 s in; the request and recording paths are taken by
    // directories after the start checks passed.
    let watchdog = bin()
        .args([
            "--gpu",
            "off",
            "--interval",
            "20ms",
            "--lead",
            "2s",
            "--max-runtime",
            "3s",
        ])
        .arg("--events")
        .arg(&events)
        .arg("--request-file")
        .arg(&req)
        .arg("--record")
        .arg(&rec)
        .args(["run", "--", "sleep", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || events.exists()));
    std::fs::create_dir(&req).unwrap();
    std::fs::create_dir(&rec).unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = read_events(&events);
    assert!(!of_kind(&ev, "alert").is_empty(), "no alert: {stderr}");
    let errors = of_kind(&ev, "output_error");
    let outputs: Vec<&str> = errors
        .iter()
        .map(|e| e["output"].as_str().unwrap())
        .collect();
    assert!(outputs.contains(&"request_file"), "{ev:?}");
    assert!(outputs.contains(&"recording"), "{ev:?}");
    assert!(
        stderr.contains("ERROR") && stderr.contains("cannot write the request file"),
        "{stderr}"
    );
    assert!(stderr.contains("cannot write the recording"), "{stderr}");
}

/// Spawns `sleep 4` in `dir/d`, then deletes `dir/d` and makes an unrelated `dir/d (deleted)`.
fn target_in_deleted_dir(dir: &Path) -> (std::process::Child, PathBuf) {
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    let target = Command::new("sleep")
        .arg("4")
        .current_dir(&d)
        .spawn()
        .unwrap();
    std::fs::remove_dir(&d).unwrap();
    let decoy = dir.join("d (deleted)");
    std::fs::create_dir(&decoy).unwrap();
    (target, decoy)
}

#[test]
fn a_deleted_working_directory_falls_back_to_the_state_directory() {
    let dir = scratch();
    let state = dir.path().join("state");
    let (mut target, decoy) = target_in_deleted_dir(dir.path());
    let pid = target.id().to_string();
    // An alert about 1 s in writes the request file.
    let out = bin()
        .env("XDG_STATE_HOME", &state)
        .args([
            "--gpu",
            "off",
            "--lead",
            "3s",
            "--max-runtime",
            "4s",
            "--pid",
            &pid,
        ])
        .output()
        .unwrap();
    target.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("ALERT"), "{stderr}");
    assert!(names_in(&decoy).is_empty(), "{:?}", names_in(&decoy));
    let state = state.join("watchdog");
    // Created private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&state).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(
        state.join(format!("watchdog-{pid}.request.json")).exists(),
        "{stderr}"
    );
    assert!(summary_recording(&stderr).starts_with(&state), "{stderr}");

    // `run` from a deleted directory: the command runs, outputs go to the state directory.
    let gone = dir.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && rmdir \"$1\" && exec \"$0\" --gpu off run -- true")
        .arg(bin().get_program())
        .arg(&gone)
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("request file {}", state.display())),
        "{stderr}"
    );
}

#[test]
fn default_recordings_go_to_the_state_directory_never_collide_and_are_pruned() {
    let dir = scratch();
    let state = dir.path().join("state");
    let recordings = state.join("watchdog");
    std::fs::create_dir_all(&recordings).unwrap();
    // 60 old recordings of earlier runs.
    let old = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for i in 0..60u64 {
        let p = recordings.join(format!("watchdog-{i}-20200101T000000Z.recording.csv"));
        std::fs::write(&p, "# watchdog recording v1\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old + Duration::from_secs(i))
            .unwrap();
    }
    // A user's file with a name like ours, older than them all: not a recording, kept.
    let mine = recordings.join("watchdog-mine.recording.csv");
    std::fs::write(&mine, PRECIOUS).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&mine)
        .unwrap()
        .set_modified(old - Duration::from_secs(3600))
        .unwrap();
    // Two watchdogs in one directory at once, each with its own request file.
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let start = |name: &str| {
        bin()
            .current_dir(&work)
            .env("XDG_STATE_HOME", &state)
            .args([
                "--gpu",
                "off",
                "--request-file",
                name,
                "run",
                "--",
                "sleep",
                "1",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start("a.json"), start("b.json"));
    let mut paths = Vec::new();
    for w in [a, b] {
        let out = w.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let rec = summary_recording(&stderr);
        assert_eq!(rec.parent(), Some(recordings.as_path()), "{stderr}");
        let name = rec.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("watchdog-") && name.ends_with(".recording.csv"),
            "{name}"
        );
        let text = std::fs::read_to_string(&rec).unwrap();
        assert!(text.contains("\"event\":\"exit\""), "{text}");
        paths.push(rec);
    }
    assert_ne!(paths[0], paths[1]);
    assert!(names_in(&work).is_empty(), "{:?}", names_in(&work));
    let left = names_in(&recordings);
    assert_eq!(left.len(), 51, "{left:?}");
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), PRECIOUS);
    assert!(!left.contains(&"watchdog-0-20200101T000000Z.recording.csv".to_string()));
}

/// `--events /proc/self/comm` was taken and every event lost; `/proc/self/status`
/// failed at every write.
#[test]
fn outputs_on_procfs_or_sysfs_are_refused_at_start() {
    for (flag, path) in [
        ("--events", "/proc/self/comm"),
        ("--events", "/proc/self/status"),
        ("--record", "/proc/self/comm"),
        ("--request-file", "/sys/kernel/watchdog-request.json"),
    ] {
        assert_refused(
            &[flag, path],
            "a kernel interface where written lines are lost or refused",
        );
    }
}

/// A kernel filesystem of `fstype` mounted on a scratch directory, unmounted on drop.
struct KernelFs(tempfile::TempDir);

impl KernelFs {
    fn mount(fstype: &str) -> Option<KernelFs> {
        let dir = scratch();
        let ok = Command::new("mount")
            .args(["-t", fstype, fstype])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(KernelFs(dir))
    }
}

impl Drop for KernelFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// `--events /dev/mqueue/run.jsonl` (a new file there is a POSIX message queue) and an
/// events file or recording on hugetlbfs passed the start check, then every write failed
/// with `Invalid argument`: they are refused at start like procfs and sysfs.
#[test]
fn outputs_on_mqueue_or_hugetlbfs_are_refused_at_start() {
    if !require(is_root(), "root (to mount mqueue and hugetlbfs)") {
        return;
    }
    for fstype in ["mqueue", "hugetlbfs"] {
        let Some(fs) = need(KernelFs::mount(fstype), "a kernel filesystem mount") else {
            return;
        };
        for (flag, name) in [("--events", "run.jsonl"), ("--record", "run.recording.csv")] {
            let path = fs.0.path().join(name);
            // Queues outlive the mount (they belong to the IPC namespace): start clean.
            let _ = std::fs::remove_file(&path);
            assert_refused(
                &[flag, path.to_str().unwrap()],
                &format!("it is on {fstype}, a kernel interface"),
            );
            assert!(!path.exists(), "{flag} left {path:?} on {fstype}");
        }
    }
}

/// An events file removed mid-run lost every later event without a word.
#[test]
fn a_removed_events_file_is_created_again_and_the_loss_reported() {
    let dir = scratch();
    let events = dir.path().join("ev.jsonl");
    let watchdog = bin()
        .args(["--gpu", "off", "--events"])
        .arg(&events)
        .args(["run", "--", "sleep", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        events.exists() && !read_events(&events).is_empty()
    }));
    std::fs::remove_file(&events).unwrap();
    let out = watchdog.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("cannot write the events") && stderr.contains("was removed"),
        "{stderr}"
    );
    let ev = read_events(&events);
    assert_eq!(of_kind(&ev, "exit").len(), 1, "{ev:?}");
    let errors = of_kind(&ev, "output_error");
    assert!(errors.iter().any(|e| e["output"] == "events"), "{ev:?}");
}

/// A 254-byte `--record` name passed the start check, then every write failed: its
/// temporary name was longer than 255 bytes.
#[test]
fn a_recording_with_a_254_byte_name_is_written() {
    let dir = scratch();
    let rec = dir.path().join(format!("{}.csv", "r".repeat(250)));
    let out = bin()
        .args(["--gpu", "off", "--record"])
        .arg(&rec)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("cannot write"), "{stderr}");
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.starts_with("# watchdog recording v1\n"), "{text}");
    assert_eq!(names_in(dir.path()).len(), 1, "{:?}", names_in(dir.path()));
}

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../watchdog-report/tests/fixtures/cgroup_oom.rec"
);

/// `report -o OUT` wrote `OUT.tmpPID` with a plain write (through a symlink planted
/// there), replaced a hand-written page and its own input.
#[test]
fn report_outputs_follow_the_rules_of_every_other_output() {
    use std::io::Write as _;
    let dir = scratch();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("victim"), PRECIOUS).unwrap();
    // The shell's PID becomes the watchdog's at `exec`: plant symlinks at every
    // temporary name that PID could use, old and new, then let it go.
    let mut report = Command::new("sh")
        .arg("-c")
        .arg("read go && exec \"$0\" report \"$1\" -o \"$2\"")
        .arg(bin().get_program())
        .arg(RECORDING)
        .arg(p("out.html"))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = report.id();
    std::os::unix::fs::symlink(p("victim"), p(&format!("out.html.tmp{pid}"))).unwrap();
    for n in 0..4 {
        std::os::unix::fs::symlink(p("victim"), p(&format!(".out.html.tmp.{pid}.{n}"))).unwrap();
    }
    report.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = report.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::fs::read_to_string(p("victim")).unwrap(),
        PRECIOUS,
        "{stderr}"
    );
    if out.status.code() == Some(0) {
        assert!(
            std::fs::read_to_string(p("out.html"))
                .unwrap()
                .contains("watchdog-report")
        );
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        // The name that is taken is said: `cannot write report out.html: File exists`
        // named only a file that did not exist.
        assert!(
            stderr.contains(&format!(
                "its temporary file {}",
                p(".out.html.tmp.").display()
            )),
            "{stderr}"
        );
    }

    std::fs::write(p("mine.html"), PRECIOUS).unwrap();
    std::fs::copy(RECORDING, p("rec.html")).unwrap();
    let run = |args: &[&Path]| {
        let out = bin().arg("report").args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let rec_html = p("rec.html");
    let o = Path::new("-o");
    for (args, why) in [
        (
            vec![Path::new(RECORDING), o, &p("mine.html")],
            "it exists and is not a watchdog report",
        ),
        (
            vec![&rec_html, o, &rec_html],
            "it is the recording being read",
        ),
        (
            vec![Path::new(RECORDING), &rec_html, o, &rec_html],
            "it is the recording being read",
        ),
        (
            vec![Path::new(RECORDING), o, &p("victim.svg")],
            "it is a symbolic link",
        ),
    ] {
        if why.contains("symbolic") {
            let _ = std::os::unix::fs::symlink(p("victim"), p("victim.svg"));
        }
        let (code, stderr) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(p("mine.html")).unwrap(), PRECIOUS);
    assert_eq!(
        std::fs::read(&rec_html).unwrap(),
        std::fs::read(RECORDING).unwrap()
    );
    assert_eq!(std::fs::read_to_string(p("victim")).unwrap(), PRECIOUS);
    // An old report is replaced.
    for _ in 0..2 {
        let (code, stderr) = run(&[Path::new(RECORDING), o, &p("again.svg")]);
        assert_eq!(code, Some(0), "{stderr}");
    }
}

/// On a nearly full filesystem the recording is skipped (an error line says so), and the
/// summary no longer names it as written: it said `Recording: PATH.` before the write
/// was skipped, naming a file that never came.
#[test]
fn a_skipped_recording_is_not_named_in_the_summary() {
    if !require(is_root(), "root (to mount a small tmpfs)") {
        return;
    }
    let Some(fs) = Tmpfs::mount("4m") else {
        require(false, "a tmpfs mount");
        return;
    };
    // 3.5 of 4 MiB taken: less free than a quarter of it, so the recorder skips.
    std::fs::write(fs.path().join("fill"), vec![1u8; 3584 * 1024]).unwrap();
    let rec = fs.path().join("run.rec");
    let out = bin()
        .args(["--gpu", "off", "--record"])
        .arg(&rec)
        .args(["run", "--", "sleep", "0.3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("nearly full"), "{stderr}");
    assert!(!rec.exists(), "{stderr}");
    assert!(!stderr.contains("Recording:"), "{stderr}");
}
