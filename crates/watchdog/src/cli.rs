//! The command line: `watchdog [OPTIONS] --pid PID`, `watchdog [OPTIONS] run -- CMD...`
//! and `watchdog replay TRACE`. Values are parsed here with the shared unit parsers so
//! a bad value is reported with the flag, the value and what was expected.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, Parser, Subcommand};
use watchdog_config::options::{Utf8, WatchOptions, parse_pid};

/// Watches a training run's memory, disk, GPU memory and runtime, predicts when each
/// runs out, and asks the run to checkpoint while there is still time.
#[derive(Debug, Parser)]
#[command(name = "watchdog", version, about, long_about = None)]
pub struct Cli {
    /// Watch this running process and all its descendants.
    #[arg(long, value_name = "PID", value_parser = Utf8(parse_pid))]
    pub pid: Option<u32>,

    /// Once watching has begun, write one JSON line to this inherited descriptor and
    /// close it (for programs that start the watchdog in the background).
    #[arg(
        long,
        value_name = "FD",
        value_parser = Utf8(watchdog_watch::ready::parse_fd),
        global = true
    )]
    pub ready_fd: Option<i32>,

    /// Serve Prometheus metrics at http://ADDR/metrics (PORT, HOST:PORT or [IPv6]:PORT;
    /// a port alone means 127.0.0.1). Metrics show every watched run: keep them local.
    #[arg(long, value_name = "ADDR", value_parser = Utf8(parse_metrics_addr), global = true)]
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
    /// recordings, compare them: what differs first, then both runs on one time axis;
    /// with the attempts of one `run --restart` (any number), draw them as one run on
    /// one time axis, each restart marked.
    Report {
        /// A recording written by the watchdog (or any CSV trace); a second one to compare
        /// with; or every attempt of one run.
        #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
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
        /// A CSV trace (time,used,limit[,resource]), nvidia-smi CSV, a step-peak trace (the
        /// client's step reports, replayed by the step-peak predictor), or a watchdog recording.
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
    },
}

/// `--interval -1s` as `--interval=-1s`. clap reads a value that starts with `-` as flags
/// (`unexpected argument '-1' found`, not naming `--interval`); joined, it reaches the
/// flag's parser, whose error names the flag, the value and what was expected. Only a
/// value of `-` then a digit or `.` is joined (no flag looks like that, so `--lead --pid 1`
/// still says `--lead` lacks a value), and nothing from `--` or `run` on, which is the
/// command's. Joining changes nothing else: `--flag=VALUE` is `--flag VALUE` to clap.
pub fn join_negative_values(
    cmd: &clap::Command,
    args: impl IntoIterator<Item = OsString>,
) -> Vec<OsString> {
    let takes_value = |long: &str| {
        cmd.get_arguments()
            .chain(cmd.get_subcommands().flat_map(|s| s.get_arguments()))
            .any(|a| a.get_long() == Some(long) && a.get_action().takes_values())
    };
    let negative = |value: &OsString| match value.as_encoded_bytes() {
        [b'-', next, ..] => next.is_ascii_digit() || *next == b'.',
        _ => false,
    };
    let mut args: Vec<OsString> = args.into_iter().collect();
    // argv[0] is the program.
    let mut i = 1;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" || arg == "run" {
            break;
        }
        let long = arg
            .to_str()
            .and_then(|a| a.strip_prefix("--"))
            .is_some_and(|long| !long.contains('=') && takes_value(long));
        if !long {
            i += 1;
            continue;
        }
        if args.get(i + 1).is_some_and(negative) {
            let value = args.remove(i + 1);
            args[i].push("=");
            args[i].push(value);
            i += 1;
        } else {
            // The flag's value, whatever it is, is not looked at as a flag or as `run`.
            i += 2;
        }
    }
    args
}

/// Checks a `--metrics` address now, so a bad one is a usage error before anything starts.
fn parse_metrics_addr(s: &str) -> Result<String, String> {
    watchdog_metrics::server::parse_addr(s).map(|_| s.to_string())
}

/// The logging flags, which apply to every subcommand.
const ANYWHERE: [&str; 3] = ["log_format", "verbose", "quiet"];

/// The top-level flags subcommand `sub` takes besides [`ANYWHERE`]'s, and what it expects
/// instead of the others (for the error); `None`: it takes every flag (`run`).
fn flags_of(sub: &str) -> Option<(&'static [&'static str], &'static str)> {
    Some(match sub {
        "daemon" => (
            &["config", "metrics", "ready_fd"],
            "the runs to watch and their settings in the config's [[rule]] tables (see config/daemon.toml)",
        ),
        "status" => (&[], "only --json and --socket"),
        "diff" => (&[], "only the two recordings"),
        "report" => (&[], "only the recordings and --output"),
        "replay" => (
            &[
                "config", "interval", "lead", "floor", "signal", "dry_run", "on_alert",
            ],
            "a trace and the engine's settings (--lead, --interval, --floor, --signal, --config, \
             --dry-run, --on-alert)",
        ),
        _ => return None,
    })
}

/// Whether subcommand `sub` takes the top-level flag `id`.
fn takes(sub: &str, id: &str) -> bool {
    flags_of(sub).is_none_or(|(takes, _)| ANYWHERE.contains(&id) || takes.contains(&id))
}

/// The command line as parsed: [`Cli`], with each subcommand's `--help` listing only the
/// flags it takes. The single-run flags are global, so that `watchdog replay --lead 5s`
/// and `watchdog --lead 5s replay` both work; a subcommand that refuses one
/// ([`flag_that_does_not_apply`]) has it hidden from its help.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .cloned()
        .collect();
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|sc| sc.get_name().to_string())
        .collect();
    for sub in subs {
        // A subcommand's own copy of a global flag is kept (clap copies the others into
        // it when it builds), and its value still reaches the top level's.
        for arg in globals
            .iter()
            .filter(|arg| !takes(&sub, arg.get_id().as_str()))
        {
            cmd = cmd.mut_subcommand(&sub, |sc| sc.arg(arg.clone().hide(true)));
        }
    }
    cmd
}

/// An error naming the first flag given with a subcommand it does nothing for (`--lead`
/// with `daemon`, whose settings are its rules'); `None` when every flag given applies.
/// `run` and `--pid` take every flag.
pub fn flag_that_does_not_apply(matches: &ArgMatches) -> Option<String> {
    let sub = matches.subcommand_name()?;
    let (_, expected) = flags_of(sub)?;
    Cli::command()
        .get_arguments()
        .filter(|arg| !arg.is_positional())
        .map(|arg| {
            (
                arg.get_id().as_str().to_string(),
                arg.get_long().map(str::to_string),
            )
        })
        .filter(|(id, _)| !takes(sub, id))
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

    fn joined(args: &[&str]) -> Vec<String> {
        let args = std::iter::once("watchdog")
            .chain(args.iter().copied())
            .map(OsString::from);
        join_negative_values(&command(), args)
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    /// Issue 18: `--interval -1s` was "unexpected argument '-1' found", naming no flag.
    #[test]
    fn a_negative_value_is_joined_to_its_flag_and_nothing_else_changes() {
        assert_eq!(
            joined(&["--interval", "-1s", "--pid", "1"]),
            ["--interval=-1s", "--pid", "1"]
        );
        assert_eq!(
            joined(&["replay", "t.csv", "--floor", "-.5"]),
            ["replay", "t.csv", "--floor=-.5"]
        );
        for unchanged in [
            &["--lead", "--pid", "1"][..],
            &["--lead", "-v", "--pid", "1"],
            &["--lead=-1s", "--pid", "1"],
            &["--dry-run", "-1", "--pid", "1"],
            &["run", "--", "echo", "--lead", "-1s"],
            &["--lead", "5s", "run", "echo", "--lead", "-1s"],
            &["--on-alert", "run", "--", "--lead", "-1s"],
        ] {
            assert_eq!(joined(unchanged), unchanged, "{unchanged:?}");
        }
        // The value of a flag is not taken for `run`.
        assert_eq!(
            joined(&["--on-alert", "run", "--lead", "-1s", "--pid", "1"]),
            ["--on-alert", "run", "--lead=-1s", "--pid", "1"]
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }
}
