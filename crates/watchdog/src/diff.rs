//! `watchdog diff A B`: reads two recordings, compares them
//! ([`watchdog_report::diff`]) and prints the differences. Exit status as `diff`'s: 0
//! when the environments and limits match, 1 when they differ, 2 on an error.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use watchdog_report::Recording;

use watchdog_watch::Failure;

/// Reads `path` as a watchdog recording (a plain CSV trace is not one: it has no limits
/// or environment to compare).
fn read(path: &Path) -> Result<Recording, Failure> {
    let rec = watchdog_report::read_recording(path).map_err(|e| Failure::Usage(e.to_string()))?;
    if rec.meta.version.is_none() {
        return Err(Failure::Usage(format!(
            "{}: not a watchdog recording: expected a file starting with '{}1' (written by --record)",
            path.display(),
            watchdog_formats::recording::MAGIC
        )));
    }
    Ok(rec)
}

/// Compares the recordings at `a` and `b` and prints the result.
pub fn run(a: &Path, b: &Path) -> Result<ExitCode, Failure> {
    let (ra, rb) = (read(a)?, read(b)?);
    let d = watchdog_report::diff::diff(&ra, &rb);
    let text = watchdog_report::diff::render_text(
        &d,
        [&a.display().to_string(), &b.display().to_string()],
    );
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| Failure::Usage(format!("cannot write to stdout: {e}")))?;
    Ok(if d.differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
