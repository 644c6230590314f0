//! The status socket of a running watchdog: `watchdog status` asks what is watched, and
//! `training_watchdog.install()` registers a run with the daemon. One JSON line in, one
//! JSON line out; the peer's credentials decide what it may see and register.
