//! How the watchdog tells a training run to checkpoint.
#![deny(missing_docs)]
