//! The command line: `watchdog [OPTIONS] --pid PID`, `watchdog [OPTIONS] run -- CMD...`
//! and `watchdog replay TRACE`. Values are parsed here with the shared unit parsers so
//! a bad value is reported with the flag, the value and what was expected.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, Parser, Subcommand};
use watchdog_config::options::{WatchOptions, parse_pid};

/// Watches a training run's memory, disk, GPU memory and runtime, predicts when each
/// runs out, and asks the run to checkpoint while there is still time.
#[derive(Debug, Parser)]
#[command(name = "watchdog", version, about, long_about = None)]
pub struct Cli {
    /// Watch this running process and all its descendants.
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    pub pid: Option<u32>,

    /// Once watching has begun, write one JSON line to this inherited descriptor and
    /// close it (for programs that start the watchdog in the background).
    #[arg(long, value_name = "FD", value_parser = watchdog_watch::ready::parse_fd, global = true)]
    pub ready_fd: Option<i32>,

    /// Serve Prometheus metrics at http://ADDR/metrics (PORT, HOST:PORT or [IPv6]:PORT;
    /// a port alone means 127.0.0.1). Metrics show every watched run: keep them local.
    #[arg(long, value_name = "ADDR", value_parser = parse_metrics_addr, global = true)]
    pub metrics: Option<String>,

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
        /// The command to run, after `--` (any bytes: passed through unchanged).
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD",
            value_parser = clap::value_parser!(OsString)
        )]
        command: Vec<OsString>,
    },
    /// Draw a recording as a self-contained HTML page or SVG image; with two
    /// recordings, compare them: what differs first, then both runs on one time axis.
    Report {
        /// A recording written by the watchdog (or any CSV trace); a second one to compare with.
        #[arg(value_name = "RECORDING", required = true, num_args = 1..=2)]
        recordings: Vec<PathBuf>,
        /// Output file: FILE.html or FILE.svg.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Compare two recordings' environments and limits (exit 0: they match, 1: they differ, 2: error).
    ///
    /// Lists what differs, the likeliest culprit first (a limit one run's peak reached and
    /// the other's did not, a changed framework version), then both runs' verdicts.
    Diff {
        /// The first recording.
        #[arg(value_name = "A")]
        a: PathBuf,
        /// The second recording.
        #[arg(value_name = "B")]
        b: PathBuf,
    },
    /// Run as the workstation service: find training runs by the config's rules and watch
    /// each with its own settings (see docs/service.md). Stops on SIGTERM with exit 0,
    /// leaving every run running; reloads the config on SIGHUP. `--config FILE` names the
    /// service's config (its socket, directories and `[[rule]]`s)
    /// [default: /etc/watchdog/daemon.toml].
    Daemon,
    /// Show what a running `watchdog daemon` watches: per run and resource, usage, limit,
    /// trend, time left and alerts (your own runs; root sees all).
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
        /// The service's socket.
        #[arg(long, value_name = "PATH", default_value = "/run/watchdog/daemon.sock")]
        socket: PathBuf,
    },
    /// Run the predictor and alert policy over a recorded trace and print the alerts as JSON lines.
    ///
    /// It runs the engine of a live watch with the same settings: `--lead`, `--interval`
    /// (the interval the trace was recorded at), `--floor` and `--config` as for a watch.
    Replay {
        /// A CSV trace (time,used,limit[,resource]), nvidia-smi CSV, or a watchdog recording.
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
    },
}

/// Checks a `--metrics` address now, so a bad one is a usage error before anything starts.
fn parse_metrics_addr(s: &str) -> Result<String, String> {
    watchdog_metrics::server::parse_addr(s).map(|_| s.to_string())
}

/// The logging flags, which apply to every subcommand.
const ANYWHERE: [&str; 3] = ["log_format", "verbose", "quiet"];

/// An error naming the first flag given with a subcommand it does nothing for (`--lead`
/// with `daemon`, whose settings are its rules'); `None` when every flag given applies.
/// `run` and `--pid` take every flag.
pub fn flag_that_does_not_apply(matches: &ArgMatches) -> Option<String> {
    let (sub, takes, expected): (&str, &[&str], &str) = match matches.subcommand_name()? {
        "daemon" => (
            "daemon",
            &["config", "metrics", "ready_fd"],
            "the runs to watch and their settings in the config's [[rule]] tables (see config/daemon.toml)",
        ),
        "status" => ("status", &[], "only --json and --socket"),
        "diff" => ("diff", &[], "only the two recordings"),
        "report" => ("report", &[], "only the recordings and --output"),
        "replay" => (
            "replay",
            &[
                "config", "interval", "lead", "floor", "signal", "dry_run", "on_alert",
            ],
            "a trace and the engine's settings (--lead, --interval, --floor, --signal, --config)",
        ),
        _ => return None,
    };
    let applies = |id: &str| ANYWHERE.contains(&id) || takes.contains(&id);
    Cli::command()
        .get_arguments()
        .filter(|arg| !arg.is_positional())
        .map(|arg| {
            (
                arg.get_id().as_str().to_string(),
                arg.get_long().map(str::to_string),
            )
        })
        .filter(|(id, _)| !applies(id))
        .find(|(id, _)| {
            matches!(
                matches
                    .try_contains_id(id)
                    .ok()
                    .and_then(|_| matches.value_source(id)),
                Some(ValueSource::CommandLine)
            )
        })
        .map(|(id, long)| {
            format!(
                "--{} cannot be used with {sub}: expected {expected}",
                long.unwrap_or(id)
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
