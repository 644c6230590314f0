//! The real binary over a few hundred generated hostile command lines: bad and near-valid
//! values for every flag (signs, huge numbers, unicode, control characters, very long
//! strings, non-UTF-8 bytes), unknown flags, hostile config files, traces and recordings,
//! and inputs or outputs that are not regular files (a FIFO, devices, procfs files).
//! Whatever it is given, the watchdog never panics (no `panicked`, never status 101 or a
//! signal), and when it exits 2 its stderr is exactly one line.
//!
//! No generated line can start a long watch: `run` only ever runs `true` (with
//! `--dry-run`), `--pid` only names PIDs that do not exist, and each run is killed (and
//! the test failed) after 30 s. The count is fixed (300) so the test costs seconds; see
//! `docs/testing.md`.

#[path = "../prop_support.rs"]
mod prop_support;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use self::prop_support::{arbitrary_text, near_valid};
use crate::support::{bin, scratch};

/// Flags that take a value, with valid values to mutate.
const VALUED: &[(&str, &[&str])] = &[
    ("--interval", &["100ms", "1ms", "60s", "0", "1h30m"]),
    ("--lead", &["30s", "3s", "0", "12h"]),
    (
        "--signal",
        &["USR1", "SIGUSR2", "10", "RTMIN+2", "SEGV", "KILL"],
    ),
    ("--mem-limit", &["512MiB", "1.5G", "1000000", "0"]),
    ("--max-runtime", &["12h", "1s", "0"]),
    (
        "--deadline",
        &[
            "2099-01-01T00:00:00Z",
            "9999-12-31T00:00:00Z",
            "2020-01-01T00:00:00+25:00",
        ],
    ),
    ("--floor", &["5", "2.5%", "100", "0"]),
    ("--record-window", &["10m", "1s"]),
    ("--hook-timeout", &["60s", "0", "1ms"]),
    // Only descriptors that are refused (0-2) or surely closed: an open one would be written to.
    ("--ready-fd", &["0", "2", "-1", "999999", "x"]),
    ("--gpu", &["auto", "off", "required"]),
    ("--log-format", &["text", "json"]),
    ("--on-alert", &["echo hi", "true"]),
    ("--disk", &["/tmp", "/proc", "/nonexistent", "/tmp/."]),
    ("--request-file", &["/nonexistent/r.json", "/proc/r.json"]),
    (
        "--events",
        &[
            "/nonexistent/e.jsonl",
            "/dev/null",
            "/proc/self/comm",
            "/proc/self/status",
        ],
    ),
    ("--record", &["/nonexistent/r.csv", "/proc/self/comm"]),
    (
        "--pid",
        &[
            "4194304",
            "0",
            "-1",
            "+4194304",
            "2147483648",
            "99999999999999999999",
            "abc",
        ],
    ),
];

const SWITCHES: &[&str] = &[
    "--dry-run",
    "--no-notify",
    "--no-status",
    "-v",
    "-vv",
    "-q",
    "--bogus",
    "-Z",
    "--",
    "-",
    "--pid",
    "--interval",
    "--help",
    "--version",
    "run",
    "replay",
    "report",
];

/// Config files, traces and recordings the generated lines may name.
const FILES: &[&str] = &[
    "interval = \"100ms\"\nlead = \"3s\"\nsignal = \"USR1\"\nmem_limit = \"8GiB\"\n",
    "floor = 100\ndeadline = 9999-12-31T00:00:00Z\ngpu = \"maybe\"\n",
    "time,used,limit\n0,1,10\n1,2,10\n-5,9,10\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234 MiB, 16384 MiB\n",
    "# watchdog recording v1\n#{\"resource\":{\"name\":\"cgroup_memory\"}}\n#{\"event\":\"alert\",\"t\":1,\"resource\":\"cgroup_memory\"}\ntime,resource,used,limit\n0,cgroup_memory,1,10\n",
];

/// One piece of a command line.
#[derive(Debug, Clone)]
enum Piece {
    Valued(usize, String, bool),
    Switch(&'static str),
    Config(String),
    Raw(Vec<u8>),
}

fn piece() -> impl Strategy<Value = Piece> {
    let valued = (0..VALUED.len()).prop_flat_map(|i| {
        let value = prop_oneof![3 => near_valid(VALUED[i].1), 1 => arbitrary_text()];
        (Just(i), value, any::<bool>()).prop_map(|(i, v, eq)| Piece::Valued(i, v, eq))
    });
    prop_oneof![
        6 => valued,
        2 => proptest::sample::select(SWITCHES).prop_map(Piece::Switch),
        1 => near_valid(FILES).prop_map(Piece::Config),
        1 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(Piece::Raw),
    ]
}

/// How the line ends.
#[derive(Debug, Clone)]
enum Tail {
    DryRunTrue,
    Replay(String, Vec<Piece>),
    Report(String),
    /// `replay`, `report`, `diff` or `--config` of a file that is not a regular one.
    Special(&'static str, &'static str),
    Nothing,
}

/// Inputs that are not regular files: a FIFO (made in the case's directory), devices.
const SPECIAL: &[&str] = &["fifo", "/dev/urandom", "/dev/zero", "/dev/null", "."];

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        3 => Just(Tail::DryRunTrue),
        2 => (near_valid(FILES), proptest::collection::vec(piece(), 0..3)).prop_map(|(f, p)| Tail::Replay(f, p)),
        2 => near_valid(FILES).prop_map(Tail::Report),
        1 => (
            proptest::sample::select(&["replay", "report", "diff", "--config"][..]),
            proptest::sample::select(SPECIAL)
        )
            .prop_map(|(command, input)| Tail::Special(command, input)),
        1 => Just(Tail::Nothing),
    ]
}

/// No argument may hold NUL (the kernel cannot pass it), and `--pid` must name no process.
fn arg(bytes: Vec<u8>) -> OsString {
    OsString::from_vec(bytes.into_iter().filter(|b| *b != 0).collect())
}

fn safe_pid(value: &str) -> String {
    let digits: String = value.chars().filter(char::is_ascii_digit).collect();
    match digits.parse::<u32>() {
        Ok(n) if Path::new(&format!("/proc/{n}")).exists() => "4194304".to_string(),
        _ => value.to_string(),
    }
}

fn command_line(dir: &Path, pieces: &[Piece], tail: &Tail) -> Vec<OsString> {
    let mut args = Vec::new();
    let files = std::cell::Cell::new(0);
    let file = |text: &str| {
        files.set(files.get() + 1);
        let path = dir.join(format!("f{}", files.get()));
        std::fs::write(&path, text).expect("write");
        path.into_os_string()
    };
    let push = |args: &mut Vec<OsString>, p: &Piece| match p {
        Piece::Valued(i, v, eq) => {
            let (flag, _) = VALUED[*i];
            let v = if flag == "--pid" {
                safe_pid(v)
            } else {
                v.clone()
            };
            if *eq {
                args.push(arg(format!("{flag}={v}").into_bytes()));
            } else {
                args.push(flag.into());
                args.push(arg(v.into_bytes()));
            }
        }
        Piece::Switch(s) => args.push((*s).into()),
        Piece::Config(text) => {
            args.push("--config".into());
            args.push(file(text));
        }
        Piece::Raw(b) => args.push(arg(b.clone())),
    };
    for p in pieces {
        push(&mut args, p);
    }
    match tail {
        Tail::DryRunTrue => {
            args.extend(["--dry-run", "run", "--", "true"].map(OsString::from));
        }
        Tail::Replay(text, more) => {
            args.push("replay".into());
            args.push(file(text));
            for p in more {
                push(&mut args, p);
            }
        }
        Tail::Report(text) => {
            args.push("report".into());
            args.push(file(text));
            args.push("-o".into());
            args.push(dir.join("out.svg").into_os_string());
        }
        Tail::Special(command, input) => {
            let input = if *input == "fifo" {
                let fifo = dir.join("fifo");
                if !fifo.exists() {
                    let _ = std::process::Command::new("mkfifo").arg(&fifo).status();
                }
                fifo.into_os_string()
            } else {
                input.into()
            };
            args.push((*command).into());
            args.push(input.clone());
            match *command {
                "report" => args.extend(["-o".into(), dir.join("out.svg").into_os_string()]),
                "diff" => args.push(input),
                "--config" => args.extend(["--dry-run", "run", "--", "true"].map(OsString::from)),
                _ => {}
            }
        }
        Tail::Nothing => {}
    }
    // Whatever the pieces did, `run` may only start `true`: a stray `run` or `--` among
    // them is cut off by making the line end there.
    if let Some(i) = args.iter().position(|a| a == "run")
        && args.get(i + 1..) != Some(&["--".into(), "true".into()][..])
    {
        args.truncate(i);
        args.push("--interval=5x".into());
    }
    args
}

/// Runs the watchdog on `args`, killing it after 30 s.
fn run_checked(dir: &Path, args: &[OsString]) -> Result<(), TestCaseError> {
    let mut child = bin()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TestCaseError::fail(format!("spawn: {e}")))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| TestCaseError::fail(e.to_string()))?
        {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestCaseError::fail(format!(
                "still running after 30 s: {args:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read;
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        stderr = String::from_utf8_lossy(&bytes).into_owned();
    }
    prop_assert!(!stderr.contains("panicked"), "{:?}: {}", args, stderr);
    prop_assert!(
        status.signal().is_none(),
        "{:?}: killed by signal {:?}: {}",
        args,
        status.signal(),
        stderr
    );
    prop_assert_ne!(status.code(), Some(101), "{:?}: {}", args, stderr);
    if status.code() == Some(2) {
        let lines: Vec<&str> = stderr.split('\n').filter(|l| !l.is_empty()).collect();
        prop_assert_eq!(lines.len(), 1, "{:?}: exit 2 with {:?}", args, stderr);
        prop_assert!(
            stderr.ends_with('\n') && !stderr.contains('\r'),
            "{:?}: {:?}",
            args,
            stderr
        );
        prop_assert!(
            lines[0].starts_with("watchdog: error: "),
            "{:?}: {:?}",
            args,
            stderr
        );
    }
    Ok(())
}

#[test]
fn hostile_command_lines_never_panic_and_exit_2_with_one_line() {
    let dir = scratch();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (proptest::collection::vec(piece(), 0..5), tail());
    runner
        .run(&strategy, |(pieces, tail)| {
            let args = command_line(dir.path(), &pieces, &tail);
            run_checked(dir.path(), &args)
        })
        .unwrap();
}

/// clap quoted a value with a bare `\r` raw (`invalid value '\r1' for '--interval <DUR>'`),
/// which split the error line on a terminal.
#[test]
fn a_carriage_return_in_a_flag_value_stays_on_one_line() {
    let out = bin()
        .args(["--interval", "\r1", "--pid", "4194304"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        !stderr.contains('\r') && stderr.matches('\n').count() == 1,
        "{stderr:?}"
    );
    assert!(stderr.contains("invalid duration '\\r1'"), "{stderr:?}");
}
