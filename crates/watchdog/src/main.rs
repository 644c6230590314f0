//! `watchdog`: the binary: parses the command line, hands over to the crate doing the work.
//!
//! `main` parses the command line, resolves the settings, sets up logging, and hands over
//! to the watch (`--pid`, `run`: `watchdog_watch`), the service (`daemon`:
//! `watchdog_daemon`), [`replay`], `report`, [`diff`] or the status client (`status`).
//! Every error that is the user's to fix ends here as one line on stderr and exit status 2.

mod cli;
mod diff;
mod logging;
mod replay;

use std::process::ExitCode;

use std::sync::Arc;

use clap::FromArgMatches as _;
use watchdog_metrics::server::{MetricsHandle, MetricsServer};
use watchdog_watch::Published;

use watchdog_watch::{EXIT_USAGE, Failure, ready, terminal};

use crate::cli::{Cli, Command};
use watchdog_config::Settings;

/// The service's config when `--config` does not name one.
const DAEMON_CONFIG: &str = "/etc/watchdog/daemon.toml";

fn main() -> ExitCode {
    let command = cli::command();
    let args = cli::join_negative_values(&command, std::env::args_os());
    let matches = match command.try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => return clap_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    if let Some(e) = cli::flag_that_does_not_apply(&matches) {
        terminal::error_line(&e);
        return ExitCode::from(EXIT_USAGE);
    }
    match run(cli) {
        Ok(code) => code,
        Err(failure) => {
            terminal::error_line(&failure.to_string());
            ExitCode::from(failure.exit_code())
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    // Before any file is opened, so the number cannot name one of ours.
    if let Some(fd) = cli.ready_fd {
        ready::take(fd).map_err(Failure::Usage)?;
    }
    match cli.command {
        Some(Command::Replay { trace }) => {
            let settings = Settings::resolve(&cli.options).map_err(Failure::Usage)?;
            replay::run(&trace, &settings)
        }
        Some(Command::Diff { a, b }) => diff::run(&a, &b),
        Some(Command::Daemon) => {
            // `--config` names the service's file; the watch settings come from its rules.
            let mut options = cli.options.clone();
            let config = options
                .config
                .take()
                .unwrap_or_else(|| DAEMON_CONFIG.into());
            let settings = Settings::resolve(&options).map_err(Failure::Usage)?;
            logging::init(&settings);
            watchdog_daemon::run::run(&config, settings.host, cli.metrics)
        }
        Some(Command::Status { json, socket }) => status(&socket, json),
        Some(Command::Report { recordings, output }) => {
            match recordings.as_slice() {
                [_, _, ..] if watchdog_report::are_attempts(&recordings) => {
                    watchdog_report::write_attempts(&recordings, &output)
                }
                [a, b] => watchdog_report::write_comparison(a, b, &output),
                [_, _, ..] => watchdog_report::write_attempts(&recordings, &output),
                [one] => watchdog_report::write_report(one, &output),
                [] => Ok(()),
            }
            .map_err(|e| Failure::Usage(e.to_string()))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Run { command }) => {
            if cli.pid.is_some() {
                return Err(Failure::Usage(
                    "--pid cannot be used with run: expected either --pid PID or run -- CMD".into(),
                ));
            }
            if let Some(flag) = command
                .first()
                .filter(|c| c.as_encoded_bytes().starts_with(b"-"))
            {
                return Err(Failure::Usage(format!(
                    "unexpected option '{}' after run: expected watchdog's options before `run` and the command after `--`",
                    flag.to_string_lossy()
                )));
            }
            let settings = Settings::resolve(&cli.options).map_err(Failure::Usage)?;
            // Given on the command line, they ask for restarts that would never come.
            let without_restart = [
                ("--restart-on", cli.options.restart_on.is_some()),
                ("--restart-per-hour", cli.options.restart_per_hour.is_some()),
            ]
            .into_iter()
            .find_map(|(flag, given)| (given && settings.restart == 0).then_some(flag));
            if let Some(flag) = without_restart {
                return Err(Failure::Usage(format!(
                    "{flag} takes effect only with --restart N: expected watchdog run --restart N {flag} ... -- CMD, or no {flag} (see docs/restart.md)"
                )));
            }
            if settings.requeue {
                requeue_allowed()?;
            }
            logging::init(&settings);
            let (published, _metrics) = serve_metrics(cli.metrics.as_deref(), &settings)?;
            watchdog_watch::run_command(&command, settings, published)
        }
        None => match cli.pid {
            Some(pid) => {
                let settings = Settings::resolve(&cli.options).map_err(Failure::Usage)?;
                // A restart option on the command line, or `restart` in the config file.
                let restart_flag = [
                    ("--restart", cli.options.restart.is_some_and(|n| n > 0)),
                    ("--restart-on", cli.options.restart_on.is_some()),
                    ("--restart-per-hour", cli.options.restart_per_hour.is_some()),
                ]
                .into_iter()
                .find_map(|(flag, given)| given.then_some(flag))
                .or((settings.restart > 0).then_some("restart (in the config file)"));
                if let Some(what) = restart_flag {
                    return Err(Failure::Usage(format!(
                        "{what} cannot be used with --pid: the watchdog did not start PID and cannot start it again; expected watchdog run --restart N -- CMD (see docs/restart.md)"
                    )));
                }
                if settings.requeue {
                    return Err(Failure::Usage(
                        "--requeue cannot be used with --pid: only the watchdog that runs the job's command knows the save before the end is its own; expected exec watchdog --requeue run -- CMD in the sbatch script (see docs/slurm.md)".into(),
                    ));
                }
                logging::init(&settings);
                let (published, _metrics) = serve_metrics(cli.metrics.as_deref(), &settings)?;
                watchdog_watch::attach(pid, settings, published)
            }
            None => Err(Failure::Usage(
                "nothing to watch: expected --pid PID or run -- CMD [ARGS...] (see --help)".into(),
            )),
        },
    }
}

/// `--requeue` needs to run inside a SLURM job that is not heterogeneous (its environment,
/// which the command inherits, says so).
fn requeue_allowed() -> Result<(), Failure> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    match watchdog_slurm::Job::from_env(&env) {
        None => Err(Failure::Usage(
            "--requeue needs a SLURM job, and SLURM_JOB_ID is not set to a job ID; expected exec watchdog --requeue run -- CMD inside an sbatch script (see docs/slurm.md)".into(),
        )),
        Some(job) if job.heterogeneous => Err(Failure::Usage(format!(
            "--requeue cannot requeue job {}: it is one component of a heterogeneous job (SLURM_HET_SIZE or SLURM_PACK_SIZE is set), which is requeued as a whole; expected a plain batch job (see docs/slurm.md)",
            job.id
        ))),
        Some(_) => Ok(()),
    }
}

/// `watchdog status`: asks the service's socket and prints the answer.
fn status(socket: &std::path::Path, json: bool) -> Result<ExitCode, Failure> {
    use watchdog_status::protocol::{Request, Response};
    if let Some(e) = watchdog_status::client::not_a_socket(socket) {
        return Err(Failure::Usage(e));
    }
    match watchdog_status::client::query(socket, &Request::Status).map_err(Failure::Runtime)? {
        Response::Status(status) => {
            let text = if json {
                watchdog_status::render::json(&status)
            } else {
                watchdog_status::render::text(&status)
            };
            let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
            Ok(ExitCode::SUCCESS)
        }
        Response::Error(e) => Err(Failure::Runtime(format!("the service refused: {e}"))),
        Response::Registered(_) => Err(Failure::Runtime(
            "the service answered something else than a status".into(),
        )),
    }
}

/// Starts the Prometheus endpoint of a single-run watch when `--metrics` asks for one.
fn serve_metrics(
    addr: Option<&str>,
    settings: &Settings,
) -> Result<(Option<Arc<Published>>, Option<MetricsHandle>), Failure> {
    let Some(addr) = addr else {
        return Ok((None, None));
    };
    let server = MetricsServer::bind(addr).map_err(Failure::Usage)?;
    let published = Arc::new(Published::new("single", settings.interval.as_secs_f64()));
    let source = Arc::clone(&published);
    let handle = server.serve(Arc::new(move || (*source.get()).clone()));
    tracing::info!("metrics at http://{}/metrics", handle.local_addr());
    Ok((Some(published), Some(handle)))
}

/// Prints a clap error as one line (help and version as clap renders them).
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = e.render().to_string();
            let mut parts: Vec<&str> = Vec::new();
            for line in rendered.lines() {
                let line = line.trim();
                if line.starts_with("Usage:") || line.starts_with("For more information") {
                    break;
                }
                if !line.is_empty() {
                    parts.push(line.trim_start_matches("error: "));
                }
            }
            terminal::error_line(&parts.join(" "));
            ExitCode::from(EXIT_USAGE)
        }
    }
}
