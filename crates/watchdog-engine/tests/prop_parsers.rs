//! Property tests of `watchdog replay` on arbitrary and near-valid traces: it never panics on
//! what the trace parser accepts, and every rejection is one line. The parser's own
//! properties sit beside it, in `crates/watchdog-formats/tests/prop_parsers.rs`. See
//! `docs/testing.md` for the long run.

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{TRACES, arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_engine::replay;

/// `line N: found header '...': expected ...` is the longest fixed part.
const FIXED: usize = 260;

fn check(text: &str) -> Result<(), TestCaseError> {
    // What replay reads after `--lead`/`--interval` (both positive durations).
    if let Err(e) = replay::run(text, &settings(3.0)) {
        check_message(&e.to_string(), text, FIXED)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_replay_arbitrary_text(text in arbitrary_text()) {
        check(&text)?;
    }

    #[test]
    fn prop_replay_near_valid(text in near_valid(TRACES)) {
        check(&text)?;
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
