//! Log lines through `tracing` on stderr (text or JSON); each first erases the live
//! status line ([`watchdog_watch::terminal`]) so the two never interleave.

use std::io::{IsTerminal, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use watchdog_config::Settings;
use watchdog_config::options::LogFormat;

use watchdog_watch::terminal::{clear_status, set_json};

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
    set_json(settings.log_format == LogFormat::Json);
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
