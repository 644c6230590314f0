//! `watchdog-report`: the reports people read (`watchdog report`, `diff`), from recordings.
//!
//! It reads a watchdog flight recording and renders it as a report a person can read.
//!
//! `watchdog report RECORDING -o report.html|report.svg` is [`write_report`]: it
//! parses the recording ([`recording::parse`], the format of `docs/recording.md`,
//! or any plain `time,used,limit[,resource]` CSV trace) and draws, per resource,
//! usage and limit over time, each alert with its projection to the predicted
//! exhaustion point, acknowledgments and the exit, under the verdict as the title
//! ([`render::render_svg`], [`render::render_html`]).
//!
//! The output is one self-contained file: the HTML page has its SVG and CSS inline
//! and no scripts, so it can be attached to a bug report or shown in a notebook
//! (`IPython.display.HTML(open("report.html").read())` or
//! `IPython.display.SVG("report.svg")`).
//!
//! # Elements a reader or test can rely on
//!
//! - `<svg id="watchdog-report">`, whose first `<text class="verdict">` is the title;
//! - per resource `<g class="panel" data-resource="NAME" data-unit="bytes|count|millis">`
//!   holding `<path class="usage">` (and `usage-area`), `<path class="limit">` (dashed;
//!   absent when unlimited), `<line class="alert">`, `<circle class="alert-marker">`,
//!   `<line class="projection">`, `<circle class="exhaustion">`, `<line class="ack">`,
//!   `<line class="exit">` (the lines carry `data-t`, seconds since the start), and
//!   labels `alert-label`, `ack-label`, `exit-label`, `exhaustion-label`;
//! - in the HTML page, `<table class="events">` and `<ul class="evidence">`.
//!
//! `watchdog report A B -o compare.html|compare.svg` is [`write_comparison`]: two runs
//! side by side, what differs between them first ([`render::compare`], whose docs
//! list its elements).
//!
//! `watchdog report A1 A2 ... -o run.html` with recordings of one `run --restart` (the
//! same `run_id`) is [`write_attempts`]: the attempts merged onto one time axis
//! ([`attempts::merge`]), each restart a `<line class="restart">`.
#![deny(missing_docs)]

pub mod attempts;
pub mod diff;
pub mod render;

// The formats it reads, from their own crate (the paths `watchdog_report::trace` and the
// rest stay for the renderer's code).
pub use watchdog_formats::{recording, step_trace, text, trace};

use std::path::{Path, PathBuf};

pub use recording::{ParseError, Recording};
pub use render::compare::{render_compare_html, render_compare_svg};
pub use render::{render_html, render_svg};

/// What a report is written as, from the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A standalone SVG image.
    Svg,
    /// A self-contained HTML page.
    Html,
}

impl Format {
    /// The format for `path`'s extension (`.svg`, `.html` or `.htm`, any case).
    pub fn from_path(path: &Path) -> Result<Format, ReportError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("html" | "htm") => Ok(Format::Html),
            _ => Err(ReportError::UnsupportedOutput {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output's extension is neither `.html` nor `.svg`.
    #[error("cannot write a report to '{}': expected -o FILE.html or FILE.svg", path.display())]
    UnsupportedOutput {
        /// The output path given.
        path: PathBuf,
    },
    /// The recording could not be read: missing, not a regular file, too large, a line
    /// too long, not text ([`text::TextError`]).
    #[error("cannot read recording {}: {source}; expected a watchdog recording or a CSV trace (a regular file of at most {} MiB)", path.display(), text::MAX_INPUT_BYTES >> 20)]
    Read {
        /// The recording's path.
        path: PathBuf,
        /// What went wrong.
        source: text::TextError,
    },
    /// The output may not be written: a symlink, a file of another kind, an input.
    #[error("refusing to write report {}: {why}; expected a new path, an empty file or an old watchdog report (not a recording being read)", path.display())]
    Refused {
        /// The output path.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// The recording is malformed.
    #[error("invalid recording {}: {source}", path.display())]
    Parse {
        /// The recording's path.
        path: PathBuf,
        /// What is wrong, with the line number.
        source: ParseError,
    },
    /// Several recordings were given that are not the attempts of one run.
    #[error("{why}")]
    NotOneRun {
        /// Why not.
        why: String,
    },
    /// The report could not be written.
    #[error("cannot write report {}: {source}", path.display())]
    Write {
        /// The output path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Reads and parses the recording at `path`.
pub fn read_recording(path: &Path) -> Result<Recording, ReportError> {
    let text = text::read_capped(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    recording::parse(&text).map_err(|source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Renders the recording at `recording_path` to `out`, as SVG or HTML by `out`'s
/// extension (anything else is [`ReportError::UnsupportedOutput`], checked before
/// the recording is read). The file is written to a temporary name beside `out`
/// and renamed, so a reader never sees half a report.
pub fn write_report(recording_path: &Path, out: &Path) -> Result<(), ReportError> {
    let format = Format::from_path(out)?;
    check_output(out, &[recording_path])?;
    let rec = read_recording(recording_path)?;
    let body = match format {
        Format::Svg => render_svg(&rec),
        Format::Html => render_html(&rec),
    };
    write_atomically(out, &body)
}

/// Renders the attempts of one `run --restart` (recordings sharing a run id) as one
/// report on one time axis, each restart marked, like [`write_report`].
pub fn write_attempts(paths: &[PathBuf], out: &Path) -> Result<(), ReportError> {
    let format = Format::from_path(out)?;
    let inputs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    check_output(out, &inputs)?;
    let recs = paths
        .iter()
        .map(|p| read_recording(p))
        .collect::<Result<Vec<_>, _>>()?;
    let rec = attempts::merge(recs).map_err(|why| ReportError::NotOneRun { why })?;
    let body = match format {
        Format::Svg => render_svg(&rec),
        Format::Html => render_html(&rec),
    };
    write_atomically(out, &body)
}

/// Whether the recordings at `paths` are attempts of one run (see [`attempts::one_run`]);
/// `false` when one cannot be read.
pub fn are_attempts(paths: &[PathBuf]) -> bool {
    let recs: Result<Vec<_>, _> = paths.iter().map(|p| read_recording(p)).collect();
    recs.is_ok_and(|r| attempts::one_run(&r))
}

/// Renders the comparison of the recordings at `a` and `b` to `out`, as SVG or HTML
/// by `out`'s extension, like [`write_report`]; the runs are named by their file names.
pub fn write_comparison(a: &Path, b: &Path, out: &Path) -> Result<(), ReportError> {
    let format = Format::from_path(out)?;
    check_output(out, &[a, b])?;
    let (rec_a, rec_b) = (read_recording(a)?, read_recording(b)?);
    let name = |p: &Path| {
        p.file_name()
            .unwrap_or(p.as_os_str())
            .to_string_lossy()
            .into_owned()
    };
    let (name_a, name_b) = (name(a), name(b));
    let names = [name_a.as_str(), name_b.as_str()];
    let body = match format {
        Format::Svg => render_compare_svg(&rec_a, &rec_b, names),
        Format::Html => render_compare_html(&rec_a, &rec_b, names),
    };
    write_atomically(out, &body)
}

/// How much of an existing file is looked at to recognise a report.
const REPORT_HEAD_BYTES: u64 = 64 * 1024;

/// Whether `path` holds a report this crate wrote: an SVG or HTML page whose first
/// 64 KiB carry the report's or the comparison's `id`.
fn is_report_file(path: &Path) -> bool {
    use std::io::Read as _;
    let Some(f) = watchdog_types::fs::open_plain(path) else {
        return false;
    };
    let mut head = Vec::new();
    if f.take(REPORT_HEAD_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    (head.starts_with("<!DOCTYPE html>") || head.starts_with("<svg"))
        && (head.contains("id=\"watchdog-report\"") || head.contains("id=\"watchdog-compare\""))
}

/// Checks that `out` may be written as a report of `inputs`, the rules of every other
/// output (`docs/recording.md`): not a symlink, not anything but a regular file, not a
/// file other than an empty one or an old report, and not one of the inputs.
fn check_output(out: &Path, inputs: &[&Path]) -> Result<(), ReportError> {
    use std::os::unix::fs::MetadataExt as _;
    let refuse = |why: &str| ReportError::Refused {
        path: out.to_path_buf(),
        why: why.to_string(),
    };
    let meta = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(&format!("cannot look at it ({e})"))),
    };
    if meta.file_type().is_symlink() {
        return Err(refuse("it is a symbolic link"));
    }
    if !meta.is_file() {
        return Err(refuse(&format!(
            "it is a {}, not a regular file",
            watchdog_types::fs::file_kind(meta.file_type())
        )));
    }
    for input in inputs {
        if std::fs::metadata(input).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino()) {
            return Err(refuse("it is the recording being read"));
        }
    }
    if meta.len() > 0 && !is_report_file(out) {
        return Err(refuse("it exists and is not a watchdog report"));
    }
    Ok(())
}

/// Writes `body` through [`watchdog_types::fs::write_atomic`]: a temporary name beside
/// `out` created `O_EXCL|O_NOFOLLOW`, renamed over it, so a reader never sees half a
/// report and a symlink planted at the temporary name is never written through.
fn write_atomically(out: &Path, body: &str) -> Result<(), ReportError> {
    use watchdog_types::fs::WriteError;
    watchdog_types::fs::write_atomic(out, body.as_bytes()).map_err(|e| match e {
        // The temporary file's own error names it: `File exists` is its name being taken
        // (a symlink or file planted there), not OUT.
        WriteError::Write { path, source } if path != out => ReportError::Write {
            path: out.to_path_buf(),
            source: std::io::Error::new(
                source.kind(),
                format!("its temporary file {}: {source}", path.display()),
            ),
        },
        WriteError::Write { source, .. } | WriteError::Rename { source, .. } => {
            ReportError::Write {
                path: out.to_path_buf(),
                source,
            }
        }
        other => ReportError::Refused {
            path: out.to_path_buf(),
            why: other.to_string(),
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cgroup_oom.rec");

    #[test]
    fn writes_svg_and_html_by_extension() {
        let dir = tempfile::tempdir().unwrap();
        for (name, start) in [
            ("r.svg", "<svg"),
            ("r.html", "<!DOCTYPE html>"),
            ("R.HTM", "<!DOCTYPE html>"),
        ] {
            let out = dir.path().join(name);
            write_report(Path::new(FIXTURE), &out).unwrap();
            let text = std::fs::read_to_string(&out).unwrap();
            assert!(text.starts_with(start), "{name}");
        }
        // Only the reports: no temporary files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }

    #[test]
    fn other_extensions_are_refused_before_reading() {
        let err = write_report(Path::new("/nonexistent.rec"), Path::new("out.png")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot write a report to 'out.png': expected -o FILE.html or FILE.svg"
        );
        assert!(matches!(
            write_report(Path::new(FIXTURE), Path::new("report")),
            Err(ReportError::UnsupportedOutput { .. })
        ));
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.svg");
        let err = write_report(&dir.path().join("missing.rec"), &out).unwrap_err();
        assert!(matches!(err, ReportError::Read { .. }));
        assert!(err.to_string().contains("missing.rec"), "{err}");

        let bad = dir.path().join("bad.rec");
        std::fs::write(
            &bad,
            "# watchdog recording v1\ntime,used,limit\n0,1,2\n1,lots,2\n",
        )
        .unwrap();
        let err = write_report(&bad, &out).unwrap_err().to_string();
        assert!(
            err.contains("bad.rec: line 4: invalid used 'lots'"),
            "{err}"
        );
        assert!(!out.exists(), "no report from a bad recording");

        std::fs::write(&bad, b"time,used,limit\n0,1,2\n\xff\n").unwrap();
        let err = write_report(&bad, &out).unwrap_err().to_string();
        assert!(err.contains("not UTF-8 text (line 3)"), "{err}");

        let err = write_report(Path::new("/dev/zero"), &out).unwrap_err();
        assert!(
            err.to_string()
                .contains("/dev/zero: it is a character device, not a regular file; expected"),
            "{err}"
        );
        std::fs::write(&bad, "x".repeat(text::MAX_LINE_BYTES + 1)).unwrap();
        let err = write_report(&bad, &out).unwrap_err().to_string();
        assert!(err.contains("line 1 is longer than 64 KiB"), "{err}");

        let err =
            write_report(Path::new(FIXTURE), &dir.path().join("no/such/dir/r.svg")).unwrap_err();
        assert!(matches!(err, ReportError::Write { .. }), "{err}");
    }

    /// A symlink at the temporary name was written through; a hand-written page and the
    /// report's own input were replaced.
    #[test]
    fn the_output_follows_the_rules_of_every_other_output() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(p("victim"), "keep").unwrap();
        // Every temporary name this process could pick for the next few writes.
        for n in 0..64 {
            let tmp = format!(".r.html.tmp.{}.{n}", std::process::id());
            std::os::unix::fs::symlink(p("victim"), p(&tmp)).unwrap();
            let tmp = format!("r.html.tmp{}", std::process::id());
            let _ = std::os::unix::fs::symlink(p("victim"), p(&tmp));
        }
        // Written or refused, never through the symlink.
        let _ = write_report(Path::new(FIXTURE), &p("r.html"));
        assert_eq!(std::fs::read_to_string(p("victim")).unwrap(), "keep");

        std::fs::write(p("mine.html"), "<html>my page</html>").unwrap();
        std::os::unix::fs::symlink(p("victim"), p("link.svg")).unwrap();
        std::fs::copy(FIXTURE, p("rec.html")).unwrap();
        std::fs::hard_link(p("rec.html"), p("also.svg")).unwrap();
        for (out, why) in [
            ("mine.html", "it exists and is not a watchdog report"),
            ("link.svg", "it is a symbolic link"),
            ("rec.html", "it is the recording being read"),
            ("also.svg", "it is the recording being read"),
        ] {
            let input = p("rec.html");
            let err = write_report(&input, &p(out)).unwrap_err().to_string();
            assert!(err.contains(why), "{out}: {err}");
        }
        assert_eq!(
            std::fs::read_to_string(p("mine.html")).unwrap(),
            "<html>my page</html>"
        );
        assert_eq!(
            std::fs::read_to_string(p("rec.html")).unwrap(),
            std::fs::read_to_string(FIXTURE).unwrap()
        );
        let err = write_comparison(Path::new(FIXTURE), &p("rec.html"), &p("rec.html")).unwrap_err();
        assert!(
            err.to_string().contains("it is the recording being read"),
            "{err}"
        );
        // An old report and an empty file are replaced.
        std::fs::write(p("empty.svg"), "").unwrap();
        for out in ["new.svg", "new.svg", "empty.svg"] {
            write_report(Path::new(FIXTURE), &p(out)).unwrap();
        }
        write_comparison(Path::new(FIXTURE), Path::new(FIXTURE), &p("c.html")).unwrap();
        write_comparison(Path::new(FIXTURE), Path::new(FIXTURE), &p("c.html")).unwrap();
    }

    /// Times of 1e300 gave NaN coordinates; 100,000 resources took 73 s and 306 MB.
    #[test]
    fn extreme_times_and_too_many_resources_are_refused_and_the_largest_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let (input, out) = (dir.path().join("t.csv"), dir.path().join("r.svg"));
        for t in ["1e300", "-1e300", "1e13"] {
            std::fs::write(&input, format!("time,used,limit\n0,1,2\n{t},1,2\n")).unwrap();
            let err = write_report(&input, &out).unwrap_err().to_string();
            assert!(
                err.contains(&format!("line 3: invalid time '{t}'")),
                "{err}"
            );
        }
        std::fs::write(&input, "time,used,limit\n-1e12,1,2\n1e12,1,2\n").unwrap();
        write_report(&input, &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(!svg.contains("NaN") && !svg.contains("=\"inf"), "{svg}");
        let rec =
            "# watchdog recording v1\n#{\"event\":\"alert\",\"t\":1e300}\ntime,used,limit\n0,1,2\n";
        std::fs::write(&input, rec).unwrap();
        let err = write_report(&input, &out).unwrap_err().to_string();
        assert!(
            err.contains("line 2: 'alert' event's t is '1e+300'"),
            "{err}"
        );

        let mut many = String::from("time,resource,used,limit\n");
        for i in 0..=trace::MAX_RESOURCES {
            many.push_str(&format!("{i},r{i},1,2\n"));
        }
        std::fs::write(&input, &many).unwrap();
        let err = write_report(&input, &out).unwrap_err().to_string();
        assert!(
            err.contains("line 258: resource 'r256' is one too many: expected at most 256"),
            "{err}"
        );
        // The most resources allowed are drawn quickly and in a bounded size.
        let at_cap: String = many
            .lines()
            .take(trace::MAX_RESOURCES + 1)
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&input, at_cap).unwrap();
        let start = std::time::Instant::now();
        write_report(&input, &out).unwrap();
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
        let size = std::fs::metadata(&out).unwrap().len();
        assert!(size < 20 << 20, "{size} bytes");
    }

    #[test]
    fn a_table_over_the_row_cap_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let (input, out) = (dir.path().join("t.csv"), dir.path().join("r.svg"));
        let rows = "0,1,2\n".repeat(recording::MAX_ROWS + 1);
        std::fs::write(&input, format!("time,used,limit\n{rows}")).unwrap();
        let err = write_report(&input, &out).unwrap_err().to_string();
        assert!(
            err.contains("line 1: the table has more than 1048576 rows"),
            "{err}"
        );
    }
}
