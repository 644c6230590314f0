//! `watchdog-formats`: the file formats the watchdog records and reads back.
//!
//! The formats the watchdog records and reads back, parsed with bounds and no I/O beyond
//! the bounded read of one input (`text`): usage traces (`trace`: the watchdog's own
//! `time,resource,used,limit` and the common CSV exports), the step-peak traces of the
//! client's allocator reports (`step_trace`), and the flight recording (`recording`: its
//! one writer, `recording::write`, and its reader), as `docs/recording.md` and
//! `docs/prediction.md` describe them.
//!
//! The engine replays traces through these parsers, the live watch writes recordings
//! through them, and `watchdog-report` draws what they read. Each parser's property tests
//! sit beside it; those of a whole file read and drawn are `watchdog-report`'s.
#![deny(missing_docs)]

pub mod checkpoint_record;
pub mod recording;
pub mod step_trace;
pub mod text;
pub mod trace;
