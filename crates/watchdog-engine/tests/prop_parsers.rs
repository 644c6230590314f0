//! Property tests of the trace parser behind `watchdog replay` (generic CSV, RFC 3339 and
//! nvidia-smi timestamps, watchdog recordings) on arbitrary and near-valid traces: it never
//! panics, replay never panics on what it parses, and every rejection is one line. See
//! `docs/testing.md` for the long run.

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_engine::replay;
use watchdog_formats::trace;

/// `line N: found header '...': expected ...` is the longest fixed part.
const FIXED: usize = 260;

const TRACES: &[&str] = &[
    "time,used,limit\n0,100,1000\n0.5,200,1000\n1,300,\n",
    "# lead_s: 30\n# resource: swap\ntime,used,limit,resource\n0,1 MiB,max,cgroup_memory\n1.5,2 MiB,inf,disk:/data\n",
    "resource,time,used,limit\ncgroup_memory,2024-01-15T10:23:45.123Z,8589934592,68719476736\ncgroup_memory,2024-01-15T10:23:45.5+02:00,8592619601,68719476736\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234 MiB, 16384 MiB\n2024/01/15 10:23:46.123, 1, 2000 MiB, 16384 MiB\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234, 16384\n",
    "# watchdog recording v1\n#{\"meta\":{\"pid\":1}}\n#{\"resource\":{\"name\":\"cgroup_memory\",\"unit\":\"bytes\"}}\ntime,resource,used,limit\n0.000,cgroup_memory,100,1000\n0.100,cgroup_memory,200,1000\n",
];

fn check(text: &str) -> Result<(), TestCaseError> {
    match trace::parse(text) {
        Ok(t) => {
            for s in &t.samples {
                prop_assert!(s.resource < t.resources.len());
                prop_assert!(!s.t_s.is_nan(), "{:?}", text);
            }
        }
        Err(e) => check_message(&e.to_string(), text, FIXED)?,
    }
    // What replay reads after `--lead`/`--interval` (both positive durations).
    if let Err(e) = replay::run(text, &settings(3.0)) {
        check_message(&e.to_string(), text, FIXED)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_trace_arbitrary_text(text in arbitrary_text()) {
        check(&text)?;
    }

    #[test]
    fn prop_trace_near_valid(text in near_valid(TRACES)) {
        check(&text)?;
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
        check(&text)?;
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

proptest! {
    #![proptest_config(config())]

    /// Any text of trace-like pieces parses or errors, and a replay's JSON lines end closed.
    #[test]
    fn any_text_parses_or_errors_without_panicking(
        body in prop::collection::vec(
            prop::sample::select(vec![
                "0", "1.5", "-2", "12 MiB", "", "x", ",", "#", "# k: v", "\"", "inf",
                "2024-01-15T10:23:45Z", "2024/01/15 10:23:45.1", "gpu0", "9999999999999999999999",
                "\n", " ", "\u{e9}", "[MiB]", "memory.used", ".", "1e400",
            ]),
            0..200,
        ),
        header in prop::sample::select(vec![
            "time,used,limit\n",
            "resource,time,used,limit\n",
            "timestamp, index, memory.used [MiB], memory.total [MiB]\n",
            "",
        ]),
    ) {
        let text = format!("{header}{}", body.concat());
        if let Ok(report) = watchdog_engine::replay::run(&text, &settings(30.0)) {
            let out = report.to_json_lines();
            let ok = out.ends_with("]}\n");
            prop_assert!(ok, "summary line not closed");
        }
    }
}

/// A lead of `lead_s` at the default interval.
fn settings(lead_s: f64) -> watchdog_engine::EngineSettings {
    watchdog_engine::EngineSettings {
        lead_s,
        ..watchdog_engine::EngineSettings::default()
    }
}
