//! Reads a watchdog flight recording and renders it as a report a person can read.
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
#![deny(missing_docs)]

pub mod diff;
pub mod recording;
pub mod render;
pub mod text;
pub mod trace;

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
    /// The recording could not be read.
    #[error("cannot read recording {}: {source}", path.display())]
    Read {
        /// The recording's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line of the recording is longer than [`text::MAX_LINE_BYTES`].
    #[error("invalid recording {}: line {line} is longer than {} KiB: expected a watchdog recording or a CSV trace", path.display(), text::MAX_LINE_BYTES / 1024)]
    LineTooLong {
        /// The recording's path.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// The recording is not valid UTF-8.
    #[error("cannot read recording {}: not UTF-8 text (line {line}): expected a watchdog recording or a CSV trace", path.display())]
    NotText {
        /// The recording's path.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
    },
    /// The recording is malformed.
    #[error("invalid recording {}: {source}", path.display())]
    Parse {
        /// The recording's path.
        path: PathBuf,
        /// What is wrong, with the line number.
        source: ParseError,
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
    let path_buf = path.to_path_buf();
    let text = text::read_capped(path).map_err(|e| match e {
        text::TextError::Io(source) => ReportError::Read {
            path: path_buf,
            source,
        },
        text::TextError::LineTooLong { line } => ReportError::LineTooLong {
            path: path_buf,
            line,
        },
        text::TextError::NotText { line } => ReportError::NotText {
            path: path_buf,
            line,
        },
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
    let rec = read_recording(recording_path)?;
    let body = match format {
        Format::Svg => render_svg(&rec),
        Format::Html => render_html(&rec),
    };
    write_atomically(out, &body)
}

/// Renders the comparison of the recordings at `a` and `b` to `out`, as SVG or HTML
/// by `out`'s extension, like [`write_report`]; the runs are named by their file names.
pub fn write_comparison(a: &Path, b: &Path, out: &Path) -> Result<(), ReportError> {
    let format = Format::from_path(out)?;
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

/// Writes `body` to a temporary name beside `out` and renames it, so a reader never
/// sees half a report.
fn write_atomically(out: &Path, body: &str) -> Result<(), ReportError> {
    let write_err = |source| ReportError::Write {
        path: out.to_path_buf(),
        source,
    };
    let mut tmp_name = out.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = out.with_file_name(tmp_name);
    std::fs::write(&tmp, body).map_err(write_err)?;
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_err(e)
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
            matches!(err, ReportError::LineTooLong { line: 1, .. }),
            "{err}"
        );

        let err =
            write_report(Path::new(FIXTURE), &dir.path().join("no/such/dir/r.svg")).unwrap_err();
        assert!(matches!(err, ReportError::Write { .. }), "{err}");
    }
}
