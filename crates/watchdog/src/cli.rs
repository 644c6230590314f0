//! The command line: `watchdog [OPTIONS] --pid PID`, `watchdog [OPTIONS] run -- CMD...`
//! and `watchdog replay TRACE`. Values are parsed here with the shared unit parsers so
//! a bad value is reported with the flag, the value and what was expected.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use watchdog_types::units;

/// Watches a training run's memory, disk, GPU memory and runtime, predicts when each
/// runs out, and asks the run to checkpoint while there is still time.
#[derive(Debug, Parser)]
#[command(name = "watchdog", version, about, long_about = None)]
pub struct Cli {
    /// Watch this running process and all its descendants.
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    pub pid: Option<u32>,

    #[command(flatten)]
    pub options: WatchOptions,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start CMD, watch it, forward SIGINT/SIGTERM/SIGHUP to it, exit with its status.
    Run {
        /// The command to run, after `--`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<String>,
    },
    /// Draw a recording as a self-contained HTML page or SVG image.
    Report {
        /// A recording written by the watchdog (or any CSV trace).
        #[arg(value_name = "RECORDING")]
        recording: PathBuf,
        /// Output file: FILE.html or FILE.svg.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Run the predictor and alert policy over a recorded trace and print the alerts as JSON lines.
    Replay {
        /// A CSV trace (time,used,limit[,resource]), nvidia-smi CSV, or a watchdog recording.
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
        /// Alert when the predicted time to exhaustion falls below this.
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        lead: Option<Duration>,
        /// The sampling interval the trace was recorded at (a hint for the predictor).
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        interval: Option<Duration>,
    },
}

/// How GPU memory is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// Watch GPUs when an NVIDIA driver is there; otherwise say why not, once, and go on.
    Auto,
    /// Do not watch GPUs.
    Off,
    /// Exit with status 2 when GPUs cannot be watched.
    Required,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Options shared by `--pid` and `run`; every one can also be set in the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct WatchOptions {
    /// TOML config file with the same settings (flags override it).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Sampling period [default: 100ms; down to 1ms].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, global = true)]
    pub interval: Option<Duration>,
    /// Alert when the predicted time to exhaustion falls below this [default: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, global = true)]
    pub lead: Option<Duration>,
    /// Signal sent to the processes that catch it [default: SIGUSR1].
    #[arg(long, value_name = "SIG", value_parser = parse_signal, global = true)]
    pub signal: Option<i32>,
    /// Memory budget for the watched process tree's total RSS (e.g. 512MiB, 2GiB, 1.5G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, global = true)]
    pub mem_limit: Option<u64>,
    /// Watch free space and inodes of the filesystem holding PATH (repeatable)
    /// [default: the target's working directory, plus /dev/shm when it is a tmpfs].
    #[arg(long = "disk", value_name = "PATH", global = true)]
    pub disks: Vec<PathBuf>,
    /// Runtime limit, measured from the target's own start time.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, global = true)]
    pub max_runtime: Option<Duration>,
    /// Wall-clock deadline (RFC 3339, e.g. 2026-11-23T08:00:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_deadline, global = true)]
    pub deadline: Option<jiff::Timestamp>,
    /// JSON file written on every alert [default: $XDG_RUNTIME_DIR/watchdog-PID.request.json,
    /// else watchdog-PID.request.json in the target's working directory].
    #[arg(long, value_name = "PATH", global = true)]
    pub request_file: Option<PathBuf>,
    /// Append one JSON line per event (start, limit, alert, ack, exit) to PATH.
    #[arg(long, value_name = "PATH", global = true)]
    pub events: Option<PathBuf>,
    /// Run CMD through `sh -c` on every alert, with WATCHDOG_* variables describing it.
    #[arg(long, value_name = "CMD", global = true)]
    pub on_alert: Option<String>,
    /// Where the flight recording is written (on every alert, at exit, on SIGUSR2)
    /// [default: beside the request file, watchdog-PID.recording.csv].
    #[arg(long, value_name = "PATH", global = true)]
    pub record: Option<PathBuf>,
    /// How much history the flight recorder keeps [default: 10m].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, global = true)]
    pub record_window: Option<Duration>,
    /// Sample, predict and log what would be done; send and write nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Watch GPU memory through NVML: auto, off or required [default: auto].
    #[arg(long, value_name = "MODE", global = true)]
    pub gpu: Option<GpuMode>,
    /// Log format on stderr [default: text].
    #[arg(long, value_name = "FORMAT", global = true)]
    pub log_format: Option<LogFormat>,
    /// Alert whatever the trend when headroom falls below this percentage of a limit [default: 5].
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent, global = true)]
    pub floor: Option<f64>,
    /// Do not send desktop notifications.
    #[arg(long, global = true)]
    pub no_notify: bool,
    /// Never show the live status line, even on a terminal.
    #[arg(long, global = true)]
    pub no_status: bool,
    /// Log more (-v: debug, -vv: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log only warnings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

fn parse_signal(s: &str) -> Result<i32, String> {
    units::parse_signal(s).map_err(|e| e.to_string())
}

fn parse_pid(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(pid) if pid > 0 && pid <= i32::MAX as u32 => Ok(pid),
        _ => Err(format!(
            "invalid PID '{}': expected a positive process ID",
            units::printable(s)
        )),
    }
}

/// Parses an RFC 3339 timestamp for `--deadline`.
pub fn parse_deadline(s: &str) -> Result<jiff::Timestamp, String> {
    s.trim().parse::<jiff::Timestamp>().map_err(|_| {
        format!(
            "invalid deadline '{}': expected an RFC 3339 time such as 2026-11-23T08:00:00Z",
            units::printable(s)
        )
    })
}

/// Parses a percentage for `--floor` and the config's `floor`: `5`, `2.5%`.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(v) if (0.0..100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid percentage '{}': expected a number from 0 to 100, e.g. 5 or 2.5%",
            units::printable(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
