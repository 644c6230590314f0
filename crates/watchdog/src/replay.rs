//! `watchdog replay TRACE`: the engine of a live watch, with the same settings (flags,
//! config file and defaults resolved the same way), run over a recorded trace as fast as
//! the machine allows, one JSON line per alert on stdout and a summary line last.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use watchdog_config::Settings;
use watchdog_watch::Failure;

/// Replays `trace` and prints the alerts and the summary as JSON lines.
pub fn run(trace: &Path, settings: &Settings) -> Result<ExitCode, Failure> {
    // Bounded as it is read (watchdog_formats::text): a FIFO or a device is refused
    // without blocking, a file over 2 GiB or a line over 64 KiB stops the read.
    let text = watchdog_formats::text::read_trace_for_replay(trace).map_err(|e| {
        Failure::Usage(format!(
            "cannot read trace '{}': {e}; expected a CSV trace (a regular file of at most {} GiB)",
            trace.display(),
            watchdog_formats::text::MAX_REPLAY_BYTES >> 30
        ))
    })?;
    let report = watchdog_engine::replay::run(&text, &settings.engine())
        .map_err(|e| Failure::Usage(format!("trace {}: {e}", trace.display())))?;
    if let Some(back) = &report.time_went_back {
        watchdog_watch::terminal::warning_line(&format!(
            "trace {}: {}",
            trace.display(),
            back.warning()
        ));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(report.to_json_lines().as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::Runtime(format!("cannot write to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
