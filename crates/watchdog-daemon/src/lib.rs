//! `watchdog daemon`: finds training runs by rules and watches each with its own settings.

pub mod service;
