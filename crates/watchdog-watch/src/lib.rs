//! `watchdog-watch`: one watched run (its sources, engine, outputs) and the loop driving it.
//!
//! The live watch: a running target, its sources, the engine's decisions carried out
//! (request file, signals, hooks, notifications, events, the flight recording), and the
//! `--pid` / `run` lifecycle. The binary parses the command line and calls [`attach`] or
//! [`run_command`]; the service runs many targets through the same parts and the same
//! loop ([`schedule`]).

pub mod environment;
pub mod outputs;
mod published;
pub mod ready;
pub mod recorder;
pub mod schedule;
pub mod steps;
pub mod target;
pub mod terminal;
pub mod wake;
mod watch;

pub use published::Published;
pub use watch::{Label, Prepared, RING_CAPACITY, ServiceRun, Watch, attach, run_command};

/// Exit status for bad usage or input.
pub const EXIT_USAGE: u8 = 2;

/// Why the watchdog could not do its job.
#[derive(Debug)]
pub enum Failure {
    /// The user's input is wrong (exit 2).
    Usage(String),
    /// Something outside the user's input failed (exit 1).
    Runtime(String),
    /// The command given to `run` could not be started (exit 127 not found, 126 otherwise).
    Spawn(String, u8),
}

impl Failure {
    /// The exit status it ends the watchdog with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Runtime(_) => 1,
            Failure::Spawn(_, code) => *code,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Runtime(m) | Failure::Spawn(m, _) => f.write_str(m),
        }
    }
}
