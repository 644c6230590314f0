//! Loads rendered reports in headless Chromium (Debian's `chromium` package) and
//! checks what the browser made of them: the DOM it dumps has the plot's elements
//! and the verdict title, the standalone SVG parses as XML, and a screenshot is a
//! real picture of the right size.
//!
//! Chromium comes from `watchdog_testsupport::Chromium`: without it the tests fail when
//! `CI` is set (CI installs it) and are skipped with a printed reason otherwise.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use watchdog_testsupport::Chromium;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cgroup_oom.rec");
const TITLE: &str =
    "Killed by the kernel's OOM killer at 27.6 s: the memory cgroup reached its 512 MiB limit.";

#[test]
fn html_report_renders_in_chromium() {
    let Some(chromium) = Chromium::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    watchdog_report::write_report(Path::new(FIXTURE), &html).unwrap();

    // The DOM after parsing: the plot's elements and the verdict title.
    let dom = chromium.dom(&html);
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
    let shot = dir.path().join("shot.png");
    chromium.run(
        &html,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,900".into(),
            "--hide-scrollbars".into(),
        ],
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
    let Some(chromium) = Chromium::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("report.svg");
    watchdog_report::write_report(Path::new(FIXTURE), &svg).unwrap();
    let dom = chromium.dom(&svg);
    // An XML error shows as a <parsererror> element instead of the drawing.
    assert!(!dom.contains("parsererror"), "{dom}");
    assert!(dom.contains("id=\"watchdog-report\""), "{dom}");
    assert!(dom.contains("class=\"usage\""));
    assert!(dom.contains("class=\"verdict\""));
}
