//! The defaults of settings that a crate below the config uses too. The config
//! (`watchdog-config`) sets every default, but the crate that acts on a setting cannot
//! depend on the config, which is built on it: such a default is declared here, once, and
//! both import it.

use std::time::Duration;

/// How long a hook may run by default (`--hook-timeout`); the alerter's
/// `run_hook` starts a hook with it.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// The default longest interval between two samples of a far resource, seconds
/// (`max_interval`); the predictor's sampling rate falls back to it.
pub const DEFAULT_MAX_INTERVAL_S: f64 = 1.0;
