//! What the watchdog writes to stderr besides log lines: the live one-line status on a
//! terminal, the closing summary and the one-line errors. A log line first erases the
//! status line (the binary's log writer calls [`clear_status`]) so the two never interleave.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use watchdog_config::Settings;
use watchdog_config::options::LogFormat;

/// Whether a status line is on screen (and must be erased before the next line).
static STATUS_SHOWN: AtomicBool = AtomicBool::new(false);
/// Whether logs are JSON lines.
static JSON: AtomicBool = AtomicBool::new(false);

/// Says whether log lines are JSON (the summary then goes out as one log line).
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
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
