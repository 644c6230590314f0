//! Property tests of the status socket's wire format: any local user can write to the
//! socket, so a request parser must survive arbitrary bytes and near-valid requests with
//! a one-line, bounded error; valid requests and every response must round-trip through
//! exactly one line. See `docs/testing.md` for the long run.
#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_bytes, arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;
use watchdog_status::protocol::{MAX_PID, MAX_REQUEST_BYTES, Registration, Request, Response};
use watchdog_types::ResourceKind;
use watchdog_types::status::{ResourceStatus, TargetStatus, WatchStatus};

/// Fixed characters a request error may add to what it quotes.
const FIXED: usize = 260;

const REQUESTS: &[&str] = &[
    r#"{"op":"status"}"#,
    "{\"op\":\"status\"}\n",
    r#"{"op":"register","pid":4242}"#,
    r#"{ "pid" : 1 , "op" : "register" }"#,
    r#"{"op":"register","pid":4194303}"#,
];

/// Lines a response must never contain raw (Python's `str.splitlines` splits on each).
const LINE_BREAKS: [char; 5] = ['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'];

fn check_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    match Request::parse(bytes) {
        Ok(req) => {
            prop_assert_eq!(Request::parse(req.encode().as_bytes()), Ok(req));
            if let Request::Register { pid } = req {
                prop_assert!((1..=MAX_PID).contains(&pid));
            }
        }
        Err(msg) => {
            let input = String::from_utf8_lossy(bytes);
            check_message(&msg, &input, FIXED)?;
            // The error goes back to the client as a response: still one line.
            let line = Response::error(&msg).encode();
            prop_assert!(!line.contains(LINE_BREAKS), "{:?}", line);
        }
    }
    Ok(())
}

fn finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

fn kind() -> impl Strategy<Value = ResourceKind> {
    proptest::sample::select(vec![
        ResourceKind::HostMemory,
        ResourceKind::Swap,
        ResourceKind::CgroupMemory,
        ResourceKind::TreeMemory,
        ResourceKind::CgroupCache,
        ResourceKind::DiskBytes,
        ResourceKind::DiskInodes,
        ResourceKind::Runtime,
        ResourceKind::GpuMemory,
    ])
}

fn resource() -> impl Strategy<Value = ResourceStatus> {
    (
        arbitrary_text(),
        kind(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        finite(),
        proptest::option::of(finite()),
        any::<u64>(),
    )
        .prop_map(
            |(name, kind, used, limit, trend_per_s, seconds_left, alerts)| ResourceStatus {
                name,
                kind,
                unit: kind.unit(),
                used,
                limit,
                trend_per_s,
                seconds_left,
                alerts,
                samples: alerts,
                sample_rate_hz: seconds_left.map(f64::abs),
            },
        )
}

fn target() -> impl Strategy<Value = TargetStatus> {
    (
        (
            any::<u32>(),
            any::<u32>(),
            arbitrary_text(),
            arbitrary_text(),
        ),
        (
            proptest::option::of(arbitrary_text()),
            finite(),
            finite(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(arbitrary_text()),
        ),
        (
            any::<String>(),
            any::<u64>(),
            any::<u64>(),
            finite(),
            any::<u64>(),
        ),
        proptest::collection::vec(resource(), 0..4),
    )
        .prop_map(
            |(
                (pid, uid, user, command),
                (rule, since_unix, lead_s, slurm_job_id, slurm_step),
                (request_file, alerts_sent, checkpoints_acknowledged, checkpoint_s, dropped),
                resources,
            )| TargetStatus {
                pid,
                uid,
                user,
                command,
                rule,
                slurm_job_id,
                slurm_step,
                since_unix,
                lead_s,
                request_file,
                alerts_sent,
                checkpoints_acknowledged,
                checkpoint_seconds_total: checkpoint_s,
                samples_dropped: dropped,
                resources,
            },
        )
}

fn status() -> impl Strategy<Value = WatchStatus> {
    (
        any::<u32>(),
        arbitrary_text(),
        finite(),
        finite(),
        proptest::collection::vec(target(), 0..4),
    )
        .prop_map(
            |(watchdog_pid, mode, time_unix, interval_s, targets)| WatchStatus {
                watchdog_pid,
                mode,
                time_unix,
                interval_s,
                targets,
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        status().prop_map(Response::Status),
        (any::<u32>(), arbitrary_text(), arbitrary_text()).prop_map(
            |(pid, request_file, signal)| {
                Response::Registered(Registration {
                    pid,
                    request_file,
                    signal,
                })
            }
        ),
        arbitrary_text().prop_map(|e| Response::error(&e)),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_request_arbitrary_bytes(bytes in arbitrary_bytes()) {
        check_parse(&bytes)?;
    }

    #[test]
    fn prop_request_near_valid(text in near_valid(REQUESTS)) {
        check_parse(text.as_bytes())?;
    }

    #[test]
    fn prop_request_any_pid_value(pid in any::<i64>(), spaces in "[ \t]{0,3}") {
        let line = format!(r#"{{"op":"register",{spaces}"pid":{spaces}{pid}{spaces}}}"#);
        let got = Request::parse(line.as_bytes());
        if (1..=i64::from(MAX_PID)).contains(&pid) {
            prop_assert_eq!(got, Ok(Request::Register { pid: pid as u32 }));
        } else {
            let msg = got.unwrap_err();
            prop_assert!(msg.starts_with(&format!("invalid pid '{pid}'")), "{}", msg);
        }
    }

    #[test]
    fn prop_valid_requests_round_trip(
        req in prop_oneof![
            Just(Request::Status),
            (1..=MAX_PID).prop_map(|pid| Request::Register { pid }),
        ],
        padding in 0usize..MAX_REQUEST_BYTES,
    ) {
        let line = req.encode();
        prop_assert!(!line.contains(LINE_BREAKS));
        prop_assert_eq!(Request::parse(line.as_bytes()), Ok(req));
        // Whitespace up to the cap is still the same request; one byte more is refused.
        let room = MAX_REQUEST_BYTES - line.len() - 1;
        let padded = format!("{line}{}\n", " ".repeat(padding.min(room)));
        prop_assert_eq!(Request::parse(padded.as_bytes()), Ok(req));
        let over = format!("{line}{}\n", " ".repeat(room + 1));
        prop_assert_eq!(Request::parse(over.as_bytes()).unwrap_err(), "request longer than 64 KiB");
    }

    #[test]
    fn prop_response_is_one_line_and_round_trips(resp in response()) {
        let line = resp.encode();
        prop_assert!(!line.contains(LINE_BREAKS), "{:?}", line);
        prop_assert_eq!(Response::decode(line.as_bytes()), Ok(resp.clone()));
        prop_assert_eq!(Response::decode(format!("{line}\n").as_bytes()), Ok(resp));
    }

    #[test]
    fn prop_response_decode_arbitrary_bytes(
        bytes in prop_oneof![
            arbitrary_bytes(),
            near_valid(&[
                r#"{"ok":true,"registered":{"pid":5,"request_file":"/r","signal":"SIGUSR1"}}"#,
                r#"{"ok":false,"error":"x"}"#,
                r#"{"ok":true,"status":{"watchdog_pid":1,"mode":"daemon","time_unix":1.0,"interval_s":0.1,"targets":[]}}"#,
            ]).prop_map(String::into_bytes),
        ],
    ) {
        if let Err(msg) = Response::decode(&bytes) {
            check_message(&msg, &String::from_utf8_lossy(&bytes), FIXED)?;
        }
    }
}
