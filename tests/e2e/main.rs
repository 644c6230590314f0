//! End-to-end tests: the built `watchdog` binary against real processes, a real memory
//! cgroup, a real tmpfs and real signals. Tests that need root, cgroups, tmpfs or Chromium
//! go through `watchdog_testsupport::require`: they fail when `CI` is set (to anything but
//! empty, `false` or `0`) and the facility is missing, and skip with a printed reason elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod compare;
mod compare_page;
mod daemon;
mod deployed;
mod exec_chains;
mod gpu;
mod gpu_steps;
mod hooks;
mod hostile;
mod inputs;
mod kernel_wake;
mod launchers;
mod notice;
mod notify;
mod outputs;
mod page_cache;
mod prompt_stop;
mod recorded;
mod restart;
mod slurm;
mod support;
mod watching;
