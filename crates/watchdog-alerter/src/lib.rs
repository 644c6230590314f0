//! `watchdog-alerter`: how an alert reaches the run, every way it is told to checkpoint.
//!
//! - [`signal`]: send the signal to every process of the watched tree that catches it,
//!   through a pidfd ([`pidfd`]), after reading its caught-signal mask ([`sigcgt`]);
//! - [`request`]: the JSON request file, written atomically, and the client's `.ack`;
//! - [`beneath`]: the daemon's per-user directories, where root writes and reads only
//!   through a directory descriptor and never follows a user's symlink;
//! - [`hook`]: the `--on-alert` command;
//! - [`notify`]: a desktop notification under a timeout (the `notify` feature, on by default);
//! - [`events`]: the `--events` JSON-lines log and the RFC 3339 clock.
//!
//! Decisions ([`sigcgt::catches`], [`signal::decide`]) are pure; `/proc` is read through
//! the [`watchdog_procfs::ProcRoot`] the caller passes.
#![deny(missing_docs)]

pub mod beneath;
pub mod events;
pub mod hook;
pub mod notify;
pub mod pidfd;
pub mod request;
pub mod sigcgt;
pub mod signal;

pub use beneath::{BeneathError, UserDir, UserDirs};
pub use events::{EventLog, EventLogError, format_rfc3339_ms, now_rfc3339, unix_time_s};
pub use hook::{HookError, HookHandle, HookOutcome, HookUser, Hooks, hook_env, run_hook};
#[cfg(feature = "notify")]
pub use notify::notify_desktop;
pub use notify::{Notifier, NotifyError, NotifyOutcome, spawn_notify};
pub use pidfd::{PidFd, PidFdError};
pub use request::{
    Ack, AckWatcher, RequestError, RequestPlace, ack_path, clear_request, clear_request_files,
    is_request_file, read_ack, write_ack, write_ack_at, write_request, write_request_file,
};
pub use sigcgt::catches;
pub use signal::{
    SignalReport, no_handler_warning, signal_tree, signal_tree_with_roots, signal_tree_with_target,
};
