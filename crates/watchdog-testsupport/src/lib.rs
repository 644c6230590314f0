//! `watchdog-testsupport`: what the tests need from the machine, said one way (tests only).
//!
//! Some tests need root, a memory cgroup, a tmpfs or headless Chromium. The rule, the same
//! for every crate and for the Python tests (`python/tests/need.py`): when the facility is
//! missing, a test **fails** if `CI` is set to anything but empty, `false` or `0`, and is
//! **skipped** with a printed reason otherwise. Skips are also appended to the file named by
//! `WATCHDOG_TEST_SKIPS` (when set), so `scripts/test.sh` can list them at the end even
//! though the test harness hides the output of passing tests.
//!
//! [`Chromium`] is the one way the tests run a browser; [`RunnableCopy`] puts a binary where
//! another user (`nobody`) can run it, wherever the repository is cloned; [`prometheus`]
//! runs a real Prometheus server against an endpoint.

#![deny(missing_docs)]

pub mod prometheus;

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a value of `CI` demands that every test runs for real.
pub fn strict_value(ci: Option<&str>) -> bool {
    ci.is_some_and(|v| {
        let v = v.trim();
        !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
    })
}

/// Whether this environment demands that every test runs for real (`CI` is set).
pub fn strict() -> bool {
    strict_value(std::env::var("CI").ok().as_deref())
}

/// Returns `ok`. When it is false: panics under [`strict`], else prints why the test is
/// skipped (and records it in `WATCHDOG_TEST_SKIPS`). `what` names the missing facility
/// ("root (to create a memory cgroup)").
#[track_caller]
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if strict() {
        panic!(
            "{test} needs {what}, and CI={:?}: refusing to skip",
            std::env::var("CI").unwrap_or_default()
        );
    }
    eprintln!("SKIPPED: {test} needs {what}");
    if let Some(list) = std::env::var_os("WATCHDOG_TEST_SKIPS") {
        let line = format!("{test}: needs {what}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(list)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
    false
}

/// The value when there is one; else [`require`]`(false, what)` and `None`.
#[track_caller]
pub fn need<T>(value: Option<T>, what: &str) -> Option<T> {
    if value.is_none() {
        require(false, what);
    }
    value
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Raises this process's soft limit on open files to `at_least` (capped at the hard
/// limit), for a test that holds hundreds of connections.
pub fn raise_fd_limit(at_least: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one `rlimit` that lives on the stack.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < at_least {
            lim.rlim_cur = at_least.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Whether the running kernel is Linux `major.minor` or later (`/proc/sys/kernel/osrelease`),
/// for a test that asserts what a kernel feature gives where it exists and the fallback
/// where it does not.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// `(name, value)` pairs as the owned strings an environment is read into.
pub fn env_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A scratch directory under the system's temporary directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wd-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot make a scratch directory: {e}"))
}

/// Copies the directory tree `from` into `to` (made if missing): a recorded fixture tree a
/// test then changes in its copy.
pub fn copy_tree(from: &Path, to: &Path) {
    let fail = |what: &str, p: &Path, e: std::io::Error| -> ! {
        panic!("cannot {what} {}: {e}", p.display())
    };
    std::fs::create_dir_all(to).unwrap_or_else(|e| fail("make", to, e));
    let entries = std::fs::read_dir(from).unwrap_or_else(|e| fail("list", from, e));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| fail("list", from, e));
        let dest = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap_or_else(|e| fail("copy", &entry.path(), e));
        }
    }
}

/// A documented config example (`config/watchdog.toml`, `config/daemon.toml`) with every
/// commented-out `# key = value` and `# [table]` line uncommented: what the tests keeping
/// the examples in step with the code parse.
pub fn example_uncommented(example: &str) -> String {
    example
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if (rest.starts_with('[') && rest.ends_with(']') && !rest.contains(' '))
                    || rest
                        .split_once(" = ")
                        .is_some_and(|(k, _)| is_config_key(k)) =>
            {
                rest.to_string()
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `k` looks like a config key (`snake_case`).
pub fn is_config_key(k: &str) -> bool {
    !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

/// Whether every directory from `/` down to `dir` lets other users through (`o+x`).
pub fn others_can_reach(dir: &Path) -> bool {
    dir.ancestors().all(|d| {
        d.as_os_str().is_empty()
            || std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
    })
}

/// A fresh 0755 directory every user can reach (for a socket or a binary another user
/// uses), under the temporary directory, or under `/tmp` when that is private.
pub fn public_scratch(prefix: &str) -> tempfile::TempDir {
    let tmp = std::env::temp_dir();
    let base = if others_can_reach(&tmp) {
        tmp
    } else {
        PathBuf::from("/tmp")
    };
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&base)
        .unwrap_or_else(|e| panic!("cannot make a directory in {}: {e}", base.display()));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", dir.path().display()));
    dir
}

/// A copy of a binary in a fresh 0755 directory that every user can reach, removed on drop.
///
/// The build directory sits wherever the repository was cloned, often in a 0700 home or a
/// `mktemp -d`: a test that runs the binary as another user must run this copy instead.
pub struct RunnableCopy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl RunnableCopy {
    /// Copies `bin` into a new directory under the temporary directory (or `/tmp` when
    /// that is private), both readable and executable by everyone.
    pub fn of(bin: &Path) -> RunnableCopy {
        let dir = public_scratch("wd-test-bin-");
        let name = bin.file_name().unwrap_or(bin.as_os_str());
        let path = dir.path().join(name);
        std::fs::copy(bin, &path)
            .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", bin.display(), path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
        assert!(
            others_can_reach(dir.path()),
            "{} is not reachable by other users",
            dir.path().display()
        );
        RunnableCopy { _dir: dir, path }
    }

    /// The copy's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Headless Chromium (Debian's `chromium` package), the one browser runner of the tests.
pub struct Chromium {
    bin: PathBuf,
}

/// What a Chromium run printed.
pub struct ChromiumOutput {
    /// Standard output (the DOM with `--dump-dom`).
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Chromium {
    /// Chromium's first start on a busy 2-core machine can take a while; a hang is killed.
    pub const TIMEOUT: Duration = Duration::from_secs(120);

    /// The flags that work headless, as root, without network: no sandbox (root), no GPU,
    /// no QUIC, no first-run, background, component-update or sync traffic.
    pub const FLAGS: [&'static str; 8] = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];

    /// The installed Chromium, or `None` after [`require`] said it is missing.
    #[track_caller]
    pub fn find() -> Option<Chromium> {
        let bin = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .map(Path::new)
            .find(|p| p.exists());
        let bin = need(
            bin,
            "headless Chromium (/usr/bin/chromium; Debian: apt-get install chromium)",
        )?;
        Some(Chromium {
            bin: bin.to_path_buf(),
        })
    }

    /// Runs Chromium on the file `page` with `extra` arguments and a new empty profile;
    /// panics when it fails or does not finish within [`Chromium::TIMEOUT`].
    pub fn run(&self, page: &Path, extra: &[String]) -> ChromiumOutput {
        let profile = scratch();
        let url = format!("file://{}", page.display());
        let mut child = Command::new(&self.bin)
            .args(Self::FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_string(&mut s);
                }
                s
            })
        };
        let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => panic!("cannot wait for chromium: {e}"),
            }
            if started.elapsed() > Self::TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "chromium did not finish within {:?} on {url}",
                    Self::TIMEOUT
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = ChromiumOutput {
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        };
        assert!(
            status.success(),
            "chromium failed ({status}) on {url}; stderr:\n{}",
            output.stderr
        );
        output
    }

    /// The DOM Chromium made of the file `page`.
    pub fn dom(&self, page: &Path) -> String {
        self.run(page, &["--dump-dom".to_string()]).stdout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_compare_by_major_then_minor() {
        assert!(kernel_at_least(0, 0));
        assert!(kernel_at_least(3, 10));
        assert!(!kernel_at_least(999, 0));
    }

    #[test]
    fn ci_is_strict_unless_empty_false_or_zero() {
        for (value, strict) in [
            (None, false),
            (Some(""), false),
            (Some("false"), false),
            (Some("FALSE"), false),
            (Some("0"), false),
            (Some("true"), true),
            (Some("1"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(strict_value(value), strict, "CI={value:?}");
        }
    }

    #[test]
    fn a_copy_is_reachable_by_others() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|e| panic!("{e}"));
        let bin = private.join("tool");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(!others_can_reach(&private));
        let copy = RunnableCopy::of(&bin);
        assert!(others_can_reach(
            copy.path().parent().unwrap_or(Path::new("/"))
        ));
        let mode = std::fs::metadata(copy.path())
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o755);
    }
}
