//! The live watch: a running target, its sources, the engine's decisions carried out
//! (request file, signals, hooks, notifications, events, the flight recording), and the
//! `--pid` / `run` lifecycle. The binary parses the command line and calls [`attach`] or
//! [`run_command`]; the service runs many targets through the same parts.

pub mod environment;
pub mod outputs;
mod published;
pub mod ready;
pub mod recorder;
pub mod target;
pub mod terminal;
mod watch;

pub use published::Published;
pub use watch::{Label, Prepared, RING_CAPACITY, ServiceRun, Watch, attach, run_command};

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
