//! End-to-end tests: the built `watchdog` binary against real processes, a real memory
//! cgroup, a real tmpfs and real signals. Tests that need root or cgroups fail when
//! `CI=true` and the facility is missing, and skip with a printed reason elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod gpu;
mod hostile;
mod support;
mod watching;
