//! Reading a trace or recording file: the shared bounded reader
//! ([`watchdog_types::fs::read_input`]) with this format's caps. A trace or recording is
//! at most [`MAX_INPUT_BYTES`] (64 MiB) with every line at most [`MAX_LINE_BYTES`]
//! (64 KiB), and must be a regular file: a FIFO or a device (`/dev/zero`,
//! `/dev/urandom`) is refused before it is read, so `watchdog report`, `watchdog
//! replay` and `watchdog diff` never block on an open or fill memory.

use std::path::Path;

pub use crate::trace::MAX_LINE_BYTES;
use watchdog_types::fs::InputLimits;
pub use watchdog_types::fs::ReadError as TextError;

/// Largest trace or recording read, in bytes (64 MiB): ten times the largest recording
/// the flight recorder writes (131,072 rows of about 40 bytes, plus its events), and
/// about a day of one resource at 10 Hz as a plain trace. Under a 1 GiB address-space
/// limit a file of this size is still read, parsed and drawn.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// The caps a trace or recording is read with.
pub const LIMITS: InputLimits = InputLimits {
    max_bytes: MAX_INPUT_BYTES,
    max_line: Some(MAX_LINE_BYTES),
};

/// Reads `path` as UTF-8 text within [`LIMITS`].
pub fn read_capped(path: &Path) -> Result<String, TextError> {
    watchdog_types::fs::read_input(path, LIMITS)
}

/// Largest trace `watchdog replay` reads, in bytes (2 GiB): a day of 100 Hz samples of
/// four resources (one is 403 MB, and replays in about a second: docs/prediction.md).
/// Replay keeps no sample, only the text, so its memory is about the file's size; what
/// draws every row (`report`, `diff`) keeps [`MAX_INPUT_BYTES`].
pub const MAX_REPLAY_BYTES: u64 = 2 << 30;

/// Reads the trace at `path` for `watchdog replay`: [`LIMITS`], but up to
/// [`MAX_REPLAY_BYTES`].
pub fn read_trace_for_replay(path: &Path) -> Result<String, TextError> {
    watchdog_types::fs::read_input(
        path,
        InputLimits {
            max_bytes: MAX_REPLAY_BYTES,
            ..LIMITS
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn devices_are_refused_at_once() {
        let start = std::time::Instant::now();
        for dev in ["/dev/zero", "/dev/urandom"] {
            let e = read_capped(Path::new(dev)).unwrap_err();
            assert!(matches!(e, TextError::NotAFile { .. }), "{e}");
        }
        assert!(start.elapsed().as_secs() < 5);
    }
}
