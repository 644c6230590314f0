//! Property tests of the two parsers of recorded data: the trace parser behind `watchdog
//! replay` (generic CSV, RFC 3339 and nvidia-smi timestamps, watchdog recordings) and the
//! recording reader behind `watchdog report` (JSON lines, the CSV table, plain traces), on
//! arbitrary and near-valid text: they never panic, and every rejection is one line. See
//! `docs/testing.md` for the long run.

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{TRACES, arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_formats::{recording, trace};

/// `line N: found header '...': expected ...` is the longest fixed part of a trace error.
const TRACE_FIXED: usize = 260;
/// `cannot read recording PATH: not UTF-8 text (line N): expected ...` with a temporary path.
const RECORDING_FIXED: usize = 260;

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

fn check_trace(text: &str) -> Result<(), TestCaseError> {
    match trace::parse(text) {
        Ok(t) => {
            for s in &t.samples {
                prop_assert!(s.resource < t.resources.len());
                prop_assert!(!s.t_s.is_nan(), "{:?}", text);
            }
        }
        Err(e) => check_message(&e.to_string(), text, TRACE_FIXED)?,
    }
    Ok(())
}

fn check_recording(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = recording::parse(text) {
        check_message(&e.to_string(), text, RECORDING_FIXED)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_trace_arbitrary_text(text in arbitrary_text()) {
        check_trace(&text)?;
    }

    #[test]
    fn prop_trace_near_valid(text in near_valid(TRACES)) {
        check_trace(&text)?;
    }

    /// Valid traces with hostile fields in every column.
    #[test]
    fn prop_trace_hostile_fields(
        header in proptest::sample::select(TRACES),
        rows in proptest::collection::vec(proptest::collection::vec(near_valid(FIELDS), 1..6), 0..8),
    ) {
        let mut text = header.lines().take_while(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n");
        text.push('\n');
        text.push_str(header.lines().find(|l| !l.starts_with('#')).unwrap_or(""));
        text.push('\n');
        for row in rows {
            text.push_str(&row.join(","));
            text.push('\n');
        }
        check_trace(&text)?;
    }

    #[test]
    fn prop_recording_arbitrary_text(text in arbitrary_text()) {
        check_recording(&text)?;
    }

    #[test]
    fn prop_recording_near_valid(text in near_valid(RECORDINGS)) {
        check_recording(&text)?;
    }
}

const FIELDS: &[&str] = &[
    "0",
    "12.5",
    "2024-01-15T10:23:45.123Z",
    "2024/01/15 10:23:45.123",
    "1234 MiB",
    "18446744073709551615",
    "max",
    "",
    "cgroup_memory",
    "gpu0",
    "0",
];

/// A bare `\r` or U+0085 inside a trace line was quoted raw: a two-line error.
#[test]
fn a_carriage_return_inside_a_trace_line_is_escaped_in_the_message() {
    for text in [
        "\0\r\0",
        "time,used,limit\n1\r2.5\n",
        "time,us\u{85}ed,limit\n",
    ] {
        let e = trace::parse(text).expect_err("malformed").to_string();
        assert!(
            e.starts_with("line ") && !e.contains(['\r', '\n', '\u{85}']),
            "{e:?}"
        );
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
