//! Property tests of `watchdog report` on whole files of any bytes (not UTF-8 included): it
//! never panics, every rejection is one line, and a recording that parses is drawn. The
//! recording reader's own properties sit beside it, in
//! `crates/watchdog-formats/tests/prop_parsers.rs`. See `docs/testing.md` for the long run.

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_bytes, check_message, config};
use proptest::prelude::*;

/// `cannot read recording PATH: not UTF-8 text (line N): expected ...` with a temporary path.
const FIXED: usize = 260;

proptest! {
    #![proptest_config(config())]

    /// Whole files as `watchdog report` reads them, not UTF-8 included; a recording that
    /// parses is also drawn.
    #[test]
    fn prop_recording_file_arbitrary_bytes(bytes in arbitrary_bytes()) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("r.csv");
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let out = dir.path().join("r.svg");
        if let Err(e) = watchdog_report::write_report(&path, &out) {
            let text = String::from_utf8_lossy(&bytes);
            check_message(&e.to_string(), &text, FIXED + path.as_os_str().len())?;
        }
    }
}
