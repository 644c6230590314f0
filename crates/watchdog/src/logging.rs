//! Everything the watchdog writes to stderr: log lines through `tracing` (text or
//! JSON), the live one-line status on a terminal, and the closing summary. A log
//! line first erases the status line so the two never interleave.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use watchdog_config::Settings;
use watchdog_config::options::LogFormat;

/// Whether a status line is on screen (and must be erased before the next line).
static STATUS_SHOWN: AtomicBool = AtomicBool::new(false);
/// Whether logs are JSON lines.
static JSON: AtomicBool = AtomicBool::new(false);

/// Sets up the `tracing` subscriber on stderr.
pub fn init(settings: &Settings) {
    let level = match settings.verbosity {
        -1 => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("WATCHDOG_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{level},watchdog={level},watchdog_sampler={level},watchdog_alerter={level},zbus=warn"
        ))
    });
    JSON.store(settings.log_format == LogFormat::Json, Ordering::Relaxed);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(StderrWriter)
        .with_target(false)
        // A closed stderr (a pipe whose reader went away) must not stop the watchdog.
        .log_internal_errors(false);
    let _ = match settings.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Prints one error line (`watchdog: error: ...`) on stderr, any quoted value in it
/// cut to 80 characters (clap and serde quote what they were given whole).
pub fn error_line(msg: &str) {
    clear_status();
    let msg = watchdog_types::quote::clip_quoted(msg);
    let _ = writeln!(std::io::stderr(), "watchdog: error: {msg}");
}

/// Prints one warning line (`watchdog: warning: ...`) on stderr, before logging is set up.
pub fn warning_line(msg: &str) {
    let _ = writeln!(std::io::stderr(), "watchdog: warning: {msg}");
}

/// The closing summary: a paragraph for people, or one JSON log line under `--log-format json`.
pub fn summary(text: &str) {
    if JSON.load(Ordering::Relaxed) {
        tracing::info!(summary = true, "{text}");
    } else {
        clear_status();
        let _ = writeln!(std::io::stderr(), "{text}");
    }
}

/// Whether a live status line should be drawn.
pub fn status_wanted(settings: &Settings) -> bool {
    settings.status
        && settings.log_format == LogFormat::Text
        && settings.verbosity >= 0
        && std::io::stderr().is_terminal()
}

/// Redraws the status line in place, cut to the terminal's width.
pub fn draw_status(line: &str) {
    let width = terminal_width().saturating_sub(1).max(20);
    let cut: String = line.chars().take(width).collect();
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[K{cut}");
    let _ = err.flush();
    STATUS_SHOWN.store(true, Ordering::Relaxed);
}

/// Erases the status line if one is shown.
pub fn clear_status() {
    if STATUS_SHOWN.swap(false, Ordering::Relaxed) {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .map(|w| w.ws_col as usize)
        .ok()
        .filter(|w| *w > 0)
        .unwrap_or(100)
}

/// A stderr writer that erases the status line before each log line.
#[derive(Clone, Copy)]
struct StderrWriter;

impl<'a> MakeWriter<'a> for StderrWriter {
    type Writer = StderrLine;
    fn make_writer(&'a self) -> Self::Writer {
        clear_status();
        StderrLine
    }
}

/// One log line's writer.
struct StderrLine;

impl Write for StderrLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::io::stderr().write(buf) {
            // Nobody reads our stderr any more: drop the line and keep watching.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(buf.len()),
            other => other,
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
