//! `watchdog replay TRACE`: the same predictor and alert policy as a live watch, run
//! over a recorded trace as fast as the machine allows, one JSON line per alert on
//! stdout and a summary line last.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::Failure;

/// Replays `trace` and prints the alerts and the summary as JSON lines.
pub fn run(
    trace: &Path,
    lead: Option<Duration>,
    interval: Option<Duration>,
) -> Result<ExitCode, Failure> {
    // Lines are capped at 64 KiB as they are read: `replay /dev/zero` fails at once.
    let text = watchdog_report::text::read_capped(trace).map_err(|e| {
        Failure::Usage(format!(
            "cannot read trace '{}': {e}; expected a readable CSV file",
            trace.display()
        ))
    })?;
    let lead_s = lead.unwrap_or(Duration::from_secs(30)).as_secs_f64();
    // Without --interval, the watchdog's default sampling period.
    let interval_s = interval.map_or(0.1, |d| d.as_secs_f64());
    let report = watchdog_engine::replay::run(&text, lead_s, interval_s)
        .map_err(|e| Failure::Usage(format!("trace {}: {e}", trace.display())))?;
    if let Some(back) = &report.time_went_back {
        crate::logging::warning_line(&format!("trace {}: {}", trace.display(), back.warning()));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(report.to_json_lines().as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::Runtime(format!("cannot write to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
