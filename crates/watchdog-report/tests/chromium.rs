//! Loads rendered reports in headless Chromium (Debian's `chromium` package) and
//! checks what the browser made of them: the DOM it dumps has the plot's elements
//! and the verdict title, the standalone SVG parses as XML, and a screenshot is a
//! real picture of the right size.
//!
//! Without Chromium the tests fail when `CI=true` (CI installs it) and are skipped
//! with a printed reason otherwise.
#![allow(clippy::unwrap_used)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cgroup_oom.rec");
const TITLE: &str =
    "Killed by the kernel's OOM killer at 27.6 s: the memory cgroup reached its 512 MiB limit.";
/// Chromium's first start on a busy 2-core machine can take a while; a hang is killed.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The Chromium binary, or `None` (and why) when it is not installed.
fn chromium() -> Option<PathBuf> {
    let candidates = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
    if let Some(p) = candidates.iter().map(Path::new).find(|p| p.exists()) {
        return Some(p.to_path_buf());
    }
    let reason = "headless Chromium not found at /usr/bin/chromium (apt-get install chromium)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{reason}; CI must install it");
    }
    eprintln!("skipped: {reason}");
    None
}

struct Run {
    stdout: String,
    stderr: String,
}

/// Runs Chromium headless on `url` with `extra` arguments and a fresh profile.
fn run_chromium(bin: &Path, profile: &Path, extra: &[String], url: &str) -> Run {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let run = Run {
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}; stderr:\n{}",
        run.stderr
    );
    run
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[test]
fn html_report_renders_in_chromium() {
    let Some(bin) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    watchdog_report::write_report(Path::new(FIXTURE), &html).unwrap();

    // The DOM after parsing: the plot's elements and the verdict title.
    let profile = tempfile::tempdir().unwrap();
    let dom = run_chromium(
        &bin,
        profile.path(),
        &["--dump-dom".into()],
        &file_url(&html),
    )
    .stdout;
    assert!(dom.contains(&format!("<title>{TITLE}</title>")), "{dom}");
    assert!(dom.contains("id=\"watchdog-report\""), "{dom}");
    assert_eq!(dom.matches("class=\"panel\"").count(), 3, "{dom}");
    for resource in ["cgroup_memory", "host_memory", "disk:/scratch"] {
        assert!(
            dom.contains(&format!("data-resource=\"{resource}\"")),
            "no panel {resource}"
        );
    }
    for class in [
        "usage",
        "limit",
        "alert",
        "ack",
        "exit",
        "projection",
        "exhaustion",
        "verdict",
    ] {
        assert!(
            dom.contains(&format!("class=\"{class}\"")),
            "no {class} in the DOM"
        );
    }
    // The title text survived parsing (the apostrophe is plain text in the DOM).
    assert!(dom.contains("Killed by the kernel's OOM killer at 27.6 s"));
    assert!(dom.contains("predicted exhaustion at 29.1 s"));

    // A screenshot: a PNG of the window's size with real content in it.
    let profile = tempfile::tempdir().unwrap();
    let shot = dir.path().join("shot.png");
    run_chromium(
        &bin,
        profile.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,900".into(),
        ],
        &file_url(&html),
    );
    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be32 = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    // IHDR is the first chunk: width and height follow its type.
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!((be32(16), be32(20)), (1200, 900));
    // A blank page compresses to a few KiB; lines, text and fills do not.
    assert!(png.len() > 30_000, "screenshot only {} bytes", png.len());
    if let Ok(keep) = std::env::var("WATCHDOG_REPORT_SHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn svg_report_parses_as_xml_in_chromium() {
    let Some(bin) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("report.svg");
    watchdog_report::write_report(Path::new(FIXTURE), &svg).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let dom = run_chromium(
        &bin,
        profile.path(),
        &["--dump-dom".into()],
        &file_url(&svg),
    )
    .stdout;
    // An XML error shows as a <parsererror> element instead of the drawing.
    assert!(!dom.contains("parsererror"), "{dom}");
    assert!(dom.contains("id=\"watchdog-report\""), "{dom}");
    assert!(dom.contains("class=\"usage\""));
    assert!(dom.contains("class=\"verdict\""));
}
