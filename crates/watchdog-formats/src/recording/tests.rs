#![allow(clippy::unwrap_used)]

use super::*;

const GOOD: &str = r#"# watchdog recording v1
#{"meta":{"pid":1234,"command":"python3","start":"2026-11-22T20:31:05.123Z","start_unix":1795465865.123,"interval_s":0.1,"lead_s":30.0,"watchdog_version":"0.1.0"}}
#{"resource":{"name":"cgroup_memory","kind":"cgroup_memory","unit":"bytes","source":"/sys/fs/cgroup/memory/x"}}
#{"resource":{"name":"runtime","kind":"runtime","unit":"millis","source":"--max-runtime"}}
#{"t":12.345,"event":"alert","resource":"cgroup_memory","reason":"trend","used":1,"limit":2,"predicted_s":29.1,"unit":"bytes","signalled":[1234],"dry_run":false}
#{"t":13.001,"event":"ack","checkpoint_s":0.656,"lead_s":30.0,"time":"2026-11-22T20:31:18.124Z"}
#{"t":20.500,"event":"exit","verdict":"oom_kill","summary":"killed by the kernel's OOM killer","evidence":["oom_kill rose 0 -> 1"],"signal":9}
time,resource,used,limit
0.000,host_memory,1234567,25274793984
0.000,cgroup_memory,123456,1073741824
0.100,cgroup_memory,133456,1073741824
0.050,runtime,50,3600000
"#;

fn err(text: &str) -> (usize, String) {
    match parse(text).unwrap_err() {
        ParseError::Malformed { line, message } => (line, message),
        ParseError::Empty => (0, "empty".into()),
        ParseError::HeaderOnly => (0, "header only".into()),
    }
}

#[test]
fn parses_the_documented_example() {
    let rec = parse(GOOD).unwrap();
    assert_eq!(rec.meta.version, Some(1));
    assert_eq!(rec.meta.pid, Some(1234));
    assert_eq!(rec.meta.command.as_deref(), Some("python3"));
    assert_eq!(rec.meta.interval_s, Some(0.1));
    let names: Vec<&str> = rec.resources.iter().map(|r| r.name.as_str()).collect();
    // Declared resources first, then those only in the table.
    assert_eq!(names, ["cgroup_memory", "runtime", "host_memory"]);
    assert_eq!(rec.resources[1].unit, Unit::Millis);
    assert_eq!(rec.resources[2].unit, Unit::Bytes);
    assert_eq!(rec.resources[2].kind, "host_memory");
    assert_eq!(
        rec.resources[0].source.as_deref(),
        Some("/sys/fs/cgroup/memory/x")
    );
    assert_eq!(
        rec.series[0],
        [
            Point {
                t_s: 0.0,
                used: 123456,
                limit: 1073741824
            },
            Point {
                t_s: 0.1,
                used: 133456,
                limit: 1073741824
            },
        ]
    );
    assert_eq!(rec.series[1].len(), 1);
    assert_eq!(rec.events.len(), 3);
    assert_eq!(rec.events[0].line, 5);
    match &rec.events[0].kind {
        EventKind::Alert(a) => {
            assert_eq!(a.resource, "cgroup_memory");
            assert_eq!(a.predicted_s, Some(29.1));
            assert_eq!(a.used, Some(1));
        }
        other => panic!("{other:?}"),
    }
    match &rec.events[1].kind {
        EventKind::Ack(a) => assert_eq!(a.checkpoint_s, Some(0.656)),
        other => panic!("{other:?}"),
    }
    assert_eq!(rec.verdict.as_deref(), Some("oom_kill"));
    assert_eq!(
        rec.verdict_summary.as_deref(),
        Some("killed by the kernel's OOM killer")
    );
    assert_eq!(rec.exit().unwrap().evidence, ["oom_kill rose 0 -> 1"]);
    assert_eq!(rec.time_range(), Some((0.0, 20.5)));
}

#[test]
fn column_order_follows_the_header() {
    let rec =
        parse("# watchdog recording v1\ntime,used,limit,resource\n1.5,10,20,disk:/data\n").unwrap();
    assert_eq!(rec.resources[0].name, "disk:/data");
    assert_eq!(rec.resources[0].kind, "disk_bytes");
    assert_eq!(
        rec.series[0],
        [Point {
            t_s: 1.5,
            used: 10,
            limit: 20
        }]
    );
}

#[test]
fn unlimited_limit_is_kept_as_max() {
    let rec = parse("time,used,limit\n0,5,18446744073709551615\n1,6,\n").unwrap();
    assert!(rec.series[0].iter().all(|p| p.limit == UNLIMITED));
}

#[test]
fn unknown_events_are_kept_and_fields_ignored() {
    let rec = parse(
        "# watchdog recording v1\n#{\"t\":1,\"event\":\"rearm\",\"resource\":\"x\"}\n#{\"meta\":{\"pid\":1,\"new_field\":true}}\ntime,used,limit\n0,1,2\n",
    )
    .unwrap();
    assert_eq!(rec.events[0].name(), "rearm");
    assert_eq!(
        rec.meta.extra.get("new_field"),
        Some(&serde_json::Value::Bool(true))
    );
}

#[test]
fn plain_trace_with_comments_and_no_json() {
    let rec = parse("# trace: oom_leak\n# resource: cgroup_memory\n# lead_s: 5\ntime,used,limit\n0.000,2359296,402653184\n0.020,5767168,402653184\n").unwrap();
    assert_eq!(rec.meta.version, None);
    assert_eq!(rec.resources[0].name, "cgroup_memory");
    assert_eq!(rec.series[0].len(), 2);
    assert!(
        rec.comments
            .contains(&("trace".to_string(), "oom_leak".to_string()))
    );
    assert!(rec.verdict.is_none());
}

#[test]
fn headerless_csv_is_time_used_limit_resource() {
    let rec = parse("0,1,10\n1,2,10\n").unwrap();
    assert_eq!(rec.resources[0].name, "memory");
    assert_eq!(rec.series[0].len(), 2);
    let rec = parse("0,1,10,runtime\n1,1000,600000,runtime\n").unwrap();
    assert_eq!(rec.resources[0].unit, Unit::Millis);
    // Error lines count from the file, not from the header we made up.
    assert_eq!(err("0,1,10\n1,x,10\n").0, 2);
    let (line, msg) = err("0,1\n");
    assert_eq!(line, 1);
    assert!(msg.contains("expected time,used,limit[,resource]"), "{msg}");
}

#[test]
fn wall_clock_traces_start_at_zero() {
    let rec =
        parse("time,used,limit\n2024-01-15T10:23:45.000Z,1,10\n2024-01-15T10:23:47.500Z,2,10\n")
            .unwrap();
    assert_eq!(rec.series[0][0].t_s, 0.0);
    assert!((rec.series[0][1].t_s - 2.5).abs() < 1e-6);
    assert!(rec.meta.start_unix.unwrap() > 1.7e9);
}

#[test]
fn nvidia_smi_csv_is_read() {
    let rec = parse("timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.000, 0, 4000 MiB, 24564 MiB\n").unwrap();
    assert_eq!(rec.resources[0].name, "gpu0");
    assert_eq!(rec.series[0][0].used, 4000 * 1024 * 1024);
}

#[test]
fn rows_are_sorted_by_time() {
    let rec = parse("time,used,limit\n2,3,10\n1,2,10\n").unwrap();
    assert_eq!(rec.series[0][0].t_s, 1.0);
}

#[test]
fn json_only_recording_has_no_series() {
    let rec = parse("# watchdog recording v1\n#{\"meta\":{\"pid\":3}}\n").unwrap();
    assert!(rec.series.is_empty());
}

/// Malformed inputs: the line number and the words saying what was expected.
#[test]
fn malformed_inputs_name_the_line_and_what_was_expected() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "# watchdog recording v1\n#{\"meta\":\n",
            2,
            "expected one JSON object",
        ),
        (
            "# watchdog recording v1\n#{\"x\":1}\n",
            2,
            "none of meta, resource or event",
        ),
        (
            "# watchdog recording v1\n#{\"event\":\"ack\"}\n",
            2,
            "has no t",
        ),
        (
            "# watchdog recording v1\n#{\"event\":\"ack\",\"t\":\"soon\"}\n",
            2,
            "expected seconds since the start as a number",
        ),
        (
            "# watchdog recording v1\n#{\"event\":7,\"t\":1}\n",
            2,
            "expected a string",
        ),
        (
            "# watchdog recording v1\n\n#{\"event\":\"alert\",\"t\":1}\n",
            3,
            "has no resource",
        ),
        (
            "# watchdog recording v1\n#{\"event\":\"alert\",\"t\":1,\"resource\":\"m\",\"used\":\"lots\"}\n",
            2,
            "invalid alert event",
        ),
        (
            "# watchdog recording v1\n#{\"event\":\"exit\",\"t\":1,\"evidence\":\"one\"}\n",
            2,
            "invalid exit event",
        ),
        (
            "# watchdog recording v1\n#{\"meta\":{\"pid\":\"x\"}}\n",
            2,
            "invalid meta line",
        ),
        (
            "# watchdog recording v1\n#{\"resource\":{\"name\":\"m\",\"unit\":\"parsecs\"}}\n",
            2,
            "expected bytes, count or millis",
        ),
        (
            "# watchdog recording v1\n#{\"resource\":{\"kind\":\"x\"}}\n",
            2,
            "invalid resource line",
        ),
        (
            "# watchdog recording v1\n#{\"resource\":{\"name\":\"m\"}}\n#{\"resource\":{\"name\":\"m\"}}\n",
            3,
            "declared twice",
        ),
        ("# watchdog recording v2\n", 1, "expected v1"),
        (
            "# watchdog recording vX\n",
            1,
            "expected '# watchdog recording v1'",
        ),
        (
            "#{\"meta\":{}}\n# watchdog recording v1\n",
            2,
            "only on line 1",
        ),
        (
            "# watchdog recording v1\ntime,used,limit\n0,1,2\n#{\"event\":\"ack\",\"t\":1}\n",
            4,
            "before the table",
        ),
        (
            "# watchdog recording v1\nwhen,how,much\n0,1,2\n",
            2,
            "expected a header naming time, used and limit",
        ),
        (
            "# watchdog recording v1\ntime,used,limit\n0,1,2\n0.1,abc,2\n",
            4,
            "invalid used 'abc'",
        ),
        (
            "# watchdog recording v1\ntime,used,limit\n0,1,2\n0.1,1\n",
            4,
            "expected 3 as in the header",
        ),
        (
            "# watchdog recording v1\ntime,used,limit\nlater,1,2\n",
            3,
            "invalid time 'later'",
        ),
        (
            "# watchdog recording v1\ntime,resource,used,limit\n0,,1,2\n",
            3,
            "empty resource",
        ),
    ];
    for (text, line, expected) in cases {
        let (got_line, msg) = err(text);
        assert_eq!(got_line, *line, "{text:?}: {msg}");
        assert!(
            msg.contains(expected),
            "{text:?}: '{msg}' should contain '{expected}'"
        );
    }
}

#[test]
fn empty_input_is_an_error() {
    assert_eq!(parse(""), Err(ParseError::Empty));
    assert_eq!(parse("# just a comment\n\n"), Err(ParseError::Empty));
    let msg = ParseError::Empty.to_string();
    assert!(msg.contains("expected"), "{msg}");
}

/// What a watchdog reserves at its start: said as such, not as an empty file.
#[test]
fn a_reserved_recording_with_the_header_alone_says_so() {
    assert_eq!(
        parse("# watchdog recording v1\n"),
        Err(ParseError::HeaderOnly)
    );
    let msg = ParseError::HeaderOnly.to_string();
    assert!(
        msg.contains("not written it yet") && msg.contains("SIGUSR2"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
}
