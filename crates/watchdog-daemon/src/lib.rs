//! `watchdog-daemon`: the service (`watchdog daemon`): finds runs by rules and watches each.
//!
//! It finds training runs by rules and watches each with its own settings, on the loop
//! `watchdog --pid` runs too.
//!
//! - [`rules`]: the strict `daemon.toml` (the service's own settings and `[[rule]]`s).
//! - [`discovery`]: the `/proc` scanner that finds new processes and what rules match on.
//! - [`gpu`]: the processes holding GPU memory, for `gpu` rules (NVML, on its own thread).
//! - [`run`]: the one loop that watches every run found.
//! - [`service`]: the systemd notify protocol (ready, status, keep-alives, reload, stop).

pub mod discovery;
pub mod gpu;
pub mod rules;
pub mod run;
pub mod service;
