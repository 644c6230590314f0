//! Property tests of the recording reader behind `watchdog report` (JSON lines, the CSV
//! table, plain traces, non-UTF-8 files) on arbitrary and near-valid recordings: it never
//! panics, and every rejection is one line. See `docs/testing.md` for the long run.

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_bytes, arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_report::recording;

/// `cannot read recording PATH: not UTF-8 text (line N): expected ...` with a temporary path.
const FIXED: usize = 260;

const RECORDINGS: &[&str] = &[
    "# watchdog recording v1\n\
     #{\"meta\":{\"pid\":4242,\"command\":\"python train.py\",\"start\":\"2026-11-23T08:00:00Z\",\"start_unix\":1.8e9,\"interval_s\":0.1,\"lead_s\":30}}\n\
     #{\"resource\":{\"name\":\"cgroup_memory\",\"kind\":\"cgroup_memory\",\"unit\":\"bytes\",\"source\":\"/sys/fs/cgroup/memory/x\"}}\n\
     #{\"resource\":{\"name\":\"runtime\",\"unit\":\"millis\"}}\n\
     #{\"event\":\"alert\",\"t\":1.5,\"resource\":\"cgroup_memory\",\"reason\":\"trend\",\"used\":900,\"limit\":1000}\n\
     #{\"event\":\"ack\",\"t\":2.0}\n\
     #{\"event\":\"exit\",\"t\":3.0,\"verdict\":\"completed\",\"summary\":\"ok\"}\n\
     time,resource,used,limit\n\
     0.000,cgroup_memory,100,1000\n\
     0.100,runtime,5,100\n",
    "time,used,limit\n0,1,10\n1,2,\n",
    "0,1,10\n1,2,10,swap\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234 MiB, 16384 MiB\n",
    "# watchdog recording v1\n#{\"event\":\"oom\",\"t\":1}\n",
];

fn check(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = recording::parse(text) {
        check_message(&e.to_string(), text, FIXED)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_recording_arbitrary_text(text in arbitrary_text()) {
        check(&text)?;
    }

    #[test]
    fn prop_recording_near_valid(text in near_valid(RECORDINGS)) {
        check(&text)?;
    }

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

/// An event or resource name with `\n` in its JSON string made a two-line error.
#[test]
fn a_line_break_in_a_json_string_is_escaped_in_the_message() {
    for text in [
        "#{\"event\":\"a\\nb\"}\n",
        "#{\"event\":\"a\\nb\",\"t\":\"x\"}\n",
        "#{\"resource\":{\"name\":\"a\\nb\",\"unit\":\"furlongs\\r\"}}\n",
        "#{\"resource\":{\"name\":\"a\\u2028b\"}}\n#{\"resource\":{\"name\":\"a\\u2028b\"}}\n",
    ] {
        let e = recording::parse(text).expect_err("malformed").to_string();
        assert!(!e.contains(['\n', '\r', '\u{2028}']), "{e:?}");
    }
}
