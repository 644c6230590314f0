//! End-to-end tests: real processes, cgroups, tmpfs and signals against the built `watchdog` binary.
