//! The wire format of the status socket, its one owner: one JSON line in (a [`Request`]),
//! one JSON line out (a [`Response`]), then the server closes the connection.
//!
//! Requests are parsed strictly (no unknown, missing, duplicate or extra fields; a PID in
//! `1..=`[`MAX_PID`]) because any local user may write to the socket; every rejection is
//! one line that quotes at most [`MAX_QUOTED_CHARS`](watchdog_types::quote::MAX_QUOTED_CHARS)
//! characters of the bad value. See `docs/status.md`.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use watchdog_types::quote::{clip_quoted, quote_value};
use watchdog_types::status::WatchStatus;

/// Longest request line the server reads, in bytes (the newline included).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Highest PID Linux hands out (`/proc/sys/kernel/pid_max` is at most 2^22).
pub const MAX_PID: u32 = 4_194_303;

/// The error for a request line that does not end within [`MAX_REQUEST_BYTES`].
pub const TOO_LONG: &str = "request longer than 64 KiB";

/// What the two requests look like, for error messages.
const EXPECTED: &str = r#"expected one JSON line: {"op":"status"} or {"op":"register","pid":N}"#;

/// One request to the status socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `{"op":"status"}`: what is watched (filtered by the peer's uid).
    Status,
    /// `{"op":"register","pid":N}`: watch the run whose root process is `pid`.
    Register {
        /// The run's root process, `1..=`[`MAX_PID`].
        pid: u32,
    },
}

impl Request {
    /// Parses one request line (a trailing newline is allowed). Strict: see the module docs.
    pub fn parse(bytes: &[u8]) -> Result<Request, String> {
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(TOO_LONG.to_string());
        }
        let fields = match serde_json::from_slice::<Fields>(bytes) {
            Ok(f) => f.0,
            Err(e) if e.is_data() && e.to_string().starts_with(DUPLICATE) => {
                let name = e.to_string();
                let name = name
                    .strip_prefix(DUPLICATE)
                    .and_then(|rest| rest.rsplit_once(" at line "))
                    .map_or("", |(name, _)| name);
                return Err(format!("duplicate field {name} in the request"));
            }
            Err(_) => {
                let text = String::from_utf8_lossy(bytes);
                let text = text.trim_end_matches(['\n', '\r']);
                return Err(format!("invalid request {}: {EXPECTED}", quote_value(text)));
            }
        };
        let mut op = None;
        let mut pid = None;
        for (name, value) in fields {
            match name.as_str() {
                "op" => op = Some(value),
                "pid" => pid = Some(value),
                _ => {
                    return Err(format!(
                        "unknown field {} in the request: {EXPECTED}",
                        quote_value(&name)
                    ));
                }
            }
        }
        let op = match op {
            Some(Value::String(op)) => op,
            Some(other) => {
                return Err(format!(
                    "invalid op {}: expected \"status\" or \"register\"",
                    quote_value(&other.to_string())
                ));
            }
            None => return Err(format!("the request has no \"op\": {EXPECTED}")),
        };
        match (op.as_str(), pid) {
            ("status", None) => Ok(Request::Status),
            ("status", Some(_)) => Err("op \"status\" takes no \"pid\"".to_string()),
            ("register", Some(pid)) => parse_pid(&pid).map(|pid| Request::Register { pid }),
            ("register", None) => Err("op \"register\" needs a \"pid\"".to_string()),
            (other, _) => Err(format!(
                "unknown op {}: expected \"status\" or \"register\"",
                quote_value(other)
            )),
        }
    }

    /// The request as one JSON line, without the newline.
    pub fn encode(&self) -> String {
        match self {
            Request::Status => r#"{"op":"status"}"#.to_string(),
            Request::Register { pid } => format!(r#"{{"op":"register","pid":{pid}}}"#),
        }
    }
}

/// A PID: a JSON integer in `1..=MAX_PID` (not `4.0`, not `"4"`).
fn parse_pid(value: &Value) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| (1..=MAX_PID).contains(p))
        .ok_or_else(|| {
            format!(
                "invalid pid {}: expected a process id from 1 to {MAX_PID}",
                quote_value(&value.to_string())
            )
        })
}

/// How serde reports a repeated field in [`Fields`].
const DUPLICATE: &str = "duplicate field ";

/// A JSON object's fields in order, refusing a repeated name (serde_json's `Map` keeps
/// the last one silently, so `{"op":"status","op":"register"}` would be ambiguous).
struct Fields(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut out: Vec<(String, Value)> = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, Value>()? {
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!(
                            "{DUPLICATE}{}",
                            quote_value(&name)
                        )));
                    }
                    out.push((name, value));
                }
                Ok(Fields(out))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// What a successful registration tells the run: where its checkpoint requests will be
/// written and which signal announces them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The registered PID.
    pub pid: u32,
    /// The request file the daemon writes before signalling.
    pub request_file: String,
    /// The signal's name (`SIGUSR1`).
    pub signal: String,
}

/// One answer of the status socket.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// `{"ok":true,"status":{...}}`.
    Status(WatchStatus),
    /// `{"ok":true,"registered":{...}}`.
    Registered(Registration),
    /// `{"ok":false,"error":"one line"}`; build it with [`Response::error`].
    Error(String),
}

/// The JSON shape of a [`Response`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<WatchStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    registered: Option<Registration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Response {
    /// An error answer; `message` is made one line (control characters escaped, long
    /// quoted runs clipped).
    pub fn error(message: &str) -> Response {
        Response::Error(clip_quoted(message))
    }

    /// The answer as one JSON line, without the newline. JSON has no NaN or infinity:
    /// a non-finite `seconds_left` is sent as `null` (does not run out), any other
    /// non-finite number as 0.
    pub fn encode(&self) -> String {
        let wire = match self {
            Response::Status(status) => Wire {
                ok: true,
                status: Some(finite(status)),
                registered: None,
                error: None,
            },
            Response::Registered(r) => Wire {
                ok: true,
                status: None,
                registered: Some(r.clone()),
                error: None,
            },
            Response::Error(e) => Wire {
                ok: false,
                status: None,
                registered: None,
                error: Some(e.clone()),
            },
        };
        // Serializing plain structs of strings and numbers into a String cannot fail;
        // fall back to a fixed error line rather than panic.
        let line = serde_json::to_string(&wire).unwrap_or_else(|_| {
            r#"{"ok":false,"error":"the watchdog could not encode its answer"}"#.to_string()
        });
        // JSON allows U+0085, U+2028 and U+2029 raw inside strings, but line readers that
        // split on every Unicode line break (Python's `str.splitlines`) would cut the
        // answer there; they can only occur inside strings, where the escape means the same.
        if line.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
            line.replace('\u{85}', "\\u0085")
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029")
        } else {
            line
        }
    }

    /// Parses one answer line (a trailing newline is allowed).
    pub fn decode(bytes: &[u8]) -> Result<Response, String> {
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| {
            clip_quoted(&format!(
                "expected one JSON line like {{\"ok\":true,\"status\":{{...}}}}: {e}"
            ))
        })?;
        match wire {
            Wire {
                ok: true,
                status: Some(s),
                registered: None,
                error: None,
            } => Ok(Response::Status(s)),
            Wire {
                ok: true,
                status: None,
                registered: Some(r),
                error: None,
            } => Ok(Response::Registered(r)),
            Wire {
                ok: false,
                status: None,
                registered: None,
                error: Some(e),
            } => Ok(Response::Error(e)),
            _ => Err(
                "expected \"ok\":true with one of \"status\" or \"registered\", or \"ok\":false with \"error\""
                    .to_string(),
            ),
        }
    }
}

/// `status` with its non-finite numbers replaced (see [`Response::encode`]).
fn finite(status: &WatchStatus) -> WatchStatus {
    let fix = |v: f64| if v.is_finite() { v } else { 0.0 };
    let mut s = status.clone();
    s.time_unix = fix(s.time_unix);
    s.interval_s = fix(s.interval_s);
    for t in &mut s.targets {
        t.since_unix = fix(t.since_unix);
        t.lead_s = fix(t.lead_s);
        t.checkpoint_seconds_total = fix(t.checkpoint_seconds_total);
        for r in &mut t.resources {
            r.trend_per_s = fix(r.trend_per_s);
            r.seconds_left = r.seconds_left.filter(|v| v.is_finite());
        }
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_types::status::{ResourceStatus, TargetStatus};
    use watchdog_types::{ResourceKind, Unit};

    #[test]
    fn valid_requests_parse() {
        let table: &[(&str, Request)] = &[
            (r#"{"op":"status"}"#, Request::Status),
            ("{\"op\":\"status\"}\n", Request::Status),
            (" { \"op\" : \"status\" } \r\n", Request::Status),
            (
                r#"{"op":"register","pid":4242}"#,
                Request::Register { pid: 4242 },
            ),
            (r#"{"pid":1,"op":"register"}"#, Request::Register { pid: 1 }),
            (
                r#"{"op":"register","pid":4194303}"#,
                Request::Register { pid: MAX_PID },
            ),
        ];
        for (text, want) in table {
            assert_eq!(Request::parse(text.as_bytes()), Ok(*want), "{text:?}");
        }
    }

    #[test]
    fn bad_requests_are_one_line_errors_naming_the_problem() {
        let table: &[(&[u8], &str)] = &[
            (b"", "invalid request '': expected one JSON line"),
            (b"status", "invalid request 'status'"),
            (b"\xff\xfe", "invalid request"),
            (b"[1]", "invalid request '[1]'"),
            (
                b"{\"op\":\"status\"}\n{\"op\":\"status\"}",
                "invalid request",
            ),
            (br#"{}"#, "the request has no \"op\""),
            (
                br#"{"op":"stats"}"#,
                "unknown op 'stats': expected \"status\" or \"register\"",
            ),
            (br#"{"op":7}"#, "invalid op '7'"),
            (
                br#"{"op":"status","pid":3}"#,
                "op \"status\" takes no \"pid\"",
            ),
            (
                br#"{"op":"status","x":1}"#,
                "unknown field 'x' in the request",
            ),
            (br#"{"op":"register"}"#, "op \"register\" needs a \"pid\""),
            (
                br#"{"op":"register","pid":0}"#,
                "invalid pid '0': expected a process id from 1 to 4194303",
            ),
            (
                br#"{"op":"register","pid":4194304}"#,
                "invalid pid '4194304'",
            ),
            (br#"{"op":"register","pid":-1}"#, "invalid pid '-1'"),
            (br#"{"op":"register","pid":4.0}"#, "invalid pid '4.0'"),
            (br#"{"op":"register","pid":"4"}"#, "invalid pid '\"4\"'"),
            (br#"{"op":"register","pid":null}"#, "invalid pid 'null'"),
            (
                br#"{"op":"status","op":"status"}"#,
                "duplicate field 'op' in the request",
            ),
        ];
        for (input, want) in table {
            let err = Request::parse(input).unwrap_err();
            assert!(
                err.contains(want),
                "{:?}: got {err:?}",
                String::from_utf8_lossy(input)
            );
            assert!(!err.contains('\n'), "{err:?}");
        }
    }

    #[test]
    fn a_long_bad_value_is_quoted_clipped() {
        let long = "x".repeat(10_000);
        let err = Request::parse(format!(r#"{{"op":"{long}"}}"#).as_bytes()).unwrap_err();
        assert!(err.chars().count() < 260, "{err}");
        assert!(err.contains("(10000 characters)"), "{err}");
        let err =
            Request::parse(format!(r#"{{"op":"status","{long}":1}}"#).as_bytes()).unwrap_err();
        assert!(err.chars().count() < 260, "{err}");
    }

    #[test]
    fn requests_over_64_kib_are_refused_by_length() {
        let mut big = br#"{"op":"status"}"#.to_vec();
        big.resize(MAX_REQUEST_BYTES + 1, b' ');
        assert_eq!(Request::parse(&big).unwrap_err(), TOO_LONG);
        big.truncate(MAX_REQUEST_BYTES);
        assert_eq!(Request::parse(&big), Ok(Request::Status));
    }

    #[test]
    fn requests_encode_to_what_parses_back() {
        for r in [Request::Status, Request::Register { pid: 77 }] {
            assert_eq!(Request::parse(r.encode().as_bytes()), Ok(r));
        }
        assert_eq!(
            Request::Register { pid: 9 }.encode(),
            r#"{"op":"register","pid":9}"#
        );
    }

    fn sample_status() -> WatchStatus {
        WatchStatus {
            watchdog_pid: 10,
            mode: "daemon".into(),
            time_unix: 1.7e9,
            interval_s: 0.1,
            targets: vec![TargetStatus {
                pid: 4242,
                uid: 1000,
                user: "alice".into(),
                command: "python train.py".into(),
                rule: Some("training".into()),
                resources: vec![ResourceStatus {
                    name: "cgroup_memory".into(),
                    kind: ResourceKind::CgroupMemory,
                    unit: Unit::Bytes,
                    used: 1 << 30,
                    limit: Some(4 << 30),
                    trend_per_s: f64::NAN,
                    seconds_left: Some(f64::INFINITY),
                    alerts: 0,
                    samples: 0,
                    sample_rate_hz: None,
                }],
                ..TargetStatus::default()
            }],
        }
    }

    #[test]
    fn responses_have_the_documented_shapes() {
        let e = Response::error("bad\nthing").encode();
        assert_eq!(e, r#"{"ok":false,"error":"bad\\nthing"}"#);
        let r = Response::Registered(Registration {
            pid: 5,
            request_file: "/run/x.json".into(),
            signal: "SIGUSR1".into(),
        });
        assert_eq!(
            r.encode(),
            r#"{"ok":true,"registered":{"pid":5,"request_file":"/run/x.json","signal":"SIGUSR1"}}"#
        );
        assert_eq!(Response::decode(r.encode().as_bytes()), Ok(r));
        let s = Response::Status(sample_status()).encode();
        assert!(
            s.starts_with(r#"{"ok":true,"status":{"watchdog_pid":10,"#),
            "{s}"
        );
    }

    #[test]
    fn unicode_line_breaks_are_escaped_so_every_reader_sees_one_line() {
        let r = Response::Registered(Registration {
            pid: 5,
            request_file: "/tmp/a\u{2028}b\u{85}c\u{2029}".into(),
            signal: "SIGUSR1".into(),
        });
        let line = r.encode();
        assert!(line.contains(r"/tmp/a\u2028b\u0085c\u2029"), "{line}");
        assert_eq!(line.lines().count(), 1);
        assert_eq!(Response::decode(line.as_bytes()), Ok(r));
    }

    #[test]
    fn non_finite_numbers_are_sent_as_what_they_mean() {
        let line = Response::Status(sample_status()).encode();
        let Response::Status(back) = Response::decode(line.as_bytes()).unwrap() else {
            panic!("not a status: {line}");
        };
        let r = &back.targets[0].resources[0];
        assert_eq!(r.trend_per_s, 0.0);
        assert_eq!(r.seconds_left, None);
    }

    #[test]
    fn malformed_responses_are_refused() {
        for bad in [
            &br#"{"ok":true}"#[..],
            br#"{"ok":false}"#,
            br#"{"ok":true,"error":"x"}"#,
            br#"{"ok":false,"error":"x","extra":1}"#,
            b"",
            b"garbage",
        ] {
            let err = Response::decode(bad).unwrap_err();
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
