//! The flight recording format (`docs/recording.md`): parsing it into a [`Recording`],
//! and writing it ([`write::render`], what the watchdog's flight recorder writes).
//!
//! A recording is `#` comment lines followed by a CSV table. Comment lines of the
//! form `#{...}` are JSON objects: the `meta` line, one `resource` line per
//! resource, and the events (`alert`, `ack`, `exit`, ...) with `t` in seconds since
//! the recording's start. The table is the same trace format `watchdog replay`
//! reads, so it is parsed by [`trace::parse`](crate::trace::parse): columns are found
//! by their header names in any order (the doc's prose says `time,used,limit,resource`
//! while its example writes `time,resource,used,limit`; both are read).
//!
//! So that any trace can be plotted, a plain CSV trace without JSON lines is read
//! too: with a header (`time,used,limit[,resource]`, nvidia-smi's CSV, RFC 3339
//! times), or without one when the first row starts with a number, in which case
//! the columns are `time,used,limit[,resource]`. A plain trace with wall-clock
//! timestamps is shifted so that its first row is at 0 s.
//!
//! Readers hold the last value between rows (a row is written only on change), so
//! each resource's series is a step function; [`Recording::series`] keeps the rows
//! as written, sorted by time.
//!
//! Every error carries the 1-based line number and says what was expected.

use serde::{Deserialize, Serialize};
use watchdog_types::{ResourceKind, Unit};

use crate::trace::{self, TraceError};
use watchdog_types::quote::quote_value;
use watchdog_types::units::printable;

pub mod write;

/// The first line a recording starts with, before its version (the version may grow).
pub const MAGIC: &str = "# watchdog recording v";

/// The version this watchdog writes and reads.
pub const VERSION: u32 = 1;

/// `limit` value meaning "unlimited".
pub const UNLIMITED: u64 = u64::MAX;

/// Most table rows a recording read for `report` or `diff` may have: 8 times what the
/// flight recorder keeps (`MAX_ROWS`, 131,072), so every recording the watchdog wrote
/// fits, and a hostile one cannot make the report hold and sort tens of millions.
pub const MAX_ROWS: usize = 1 << 20;

/// Most events a recording may hold: 10 times what the flight recorder keeps (1,000).
pub const MAX_EVENTS: usize = 10_000;

/// Why a recording could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// Nothing to plot: no table, no JSON lines.
    #[error(
        "empty recording: expected '# watchdog recording v1' with JSON lines and a CSV table, or a CSV trace with time,used,limit[,resource]"
    )]
    Empty,
    /// The header and nothing else: the name a watchdog reserves at its start, before it
    /// writes the recording (at its exit, on SIGUSR2) or when it could not write it.
    #[error(
        "it holds only the recording header: the watchdog that reserved it has not written it yet (it does at its exit and on SIGUSR2) or could not (its log says why, e.g. a nearly full filesystem)"
    )]
    HeaderOnly,
    /// A line that does not have the expected shape (control characters it quotes are
    /// escaped, so the message stays on one line).
    #[error("line {line}: {}", printable(message))]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What was found and what was expected.
        message: String,
    },
}

fn malformed(line: usize, message: impl Into<String>) -> ParseError {
    ParseError::Malformed {
        line,
        message: message.into(),
    }
}

/// The recording's `meta` line, as written and as read. Every field is optional so
/// that partial or older recordings still render (and absent fields are not written);
/// unknown fields are kept in [`Meta::extra`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// The recording format version from the first line (`1` for `v1`), if present.
    #[serde(skip)]
    pub version: Option<u32>,
    /// The target's PID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u64>,
    /// The target's command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Wall-clock start, RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// Wall-clock start, seconds since 1970.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_unix: Option<f64>,
    /// Sampling interval in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// Lead time in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lead_s: Option<f64>,
    /// Version of the watchdog that wrote the recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watchdog_version: Option<String>,
    /// The run's environment and limits (absent from older recordings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<watchdog_types::environment::Environment>,
    /// The run a `run --restart` attempt belongs to: the same for every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Which attempt of that run this recording is (1 for the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Any other fields, as written.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One watched resource, from its `resource` line (or inferred from its name in a plain trace).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    /// Name as users see it and as the table's `resource` column writes it (`cgroup_memory`, `disk:/data`).
    pub name: String,
    /// Kind (`cgroup_memory`, `disk_bytes`, `runtime`, ...), as written.
    pub kind: String,
    /// Unit of `used` and `limit`.
    pub unit: Unit,
    /// Where the limit comes from (a cgroup path, a mount point), when known.
    pub source: Option<String>,
}

/// One row of a resource's series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds since the recording's start.
    pub t_s: f64,
    /// Usage in the resource's unit.
    pub used: u64,
    /// Limit in the resource's unit; [`UNLIMITED`] when there is none.
    pub limit: u64,
}

/// An `alert` event: the watchdog asked the target to checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Alert {
    /// The resource that is running out.
    pub resource: String,
    /// Why (`trend`, `headroom_floor`, `next_step`).
    pub reason: Option<String>,
    /// Usage at the alert.
    pub used: Option<u64>,
    /// Limit at the alert.
    pub limit: Option<u64>,
    /// Predicted seconds to exhaustion from the alert.
    pub predicted_s: Option<f64>,
    /// Growth rate in units per second.
    pub rate_per_s: Option<f64>,
    /// Whether nothing was sent (`--dry-run`).
    pub dry_run: bool,
}

/// An `ack` event: the target acknowledged a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Ack {
    /// Seconds from the alert to the acknowledgment.
    pub checkpoint_s: Option<f64>,
    /// Lead time now in force, in seconds.
    pub lead_s: Option<f64>,
}

/// An `exit` event: the target exited, with the watchdog's verdict.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Exit {
    /// `exited`, `oom_kill`, `signal`, `disk_full`, `runtime_limit`, `gpu_oom` or `unknown`.
    pub verdict: Option<String>,
    /// One-paragraph summary.
    pub summary: Option<String>,
    /// Sentences with the figures and times behind the verdict.
    pub evidence: Vec<String>,
    /// Exit code, for a normal exit.
    pub code: Option<i64>,
    /// Signal (a number or a name), when killed by one.
    pub signal: Option<serde_json::Value>,
}

/// What an event is.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// See [`Alert`].
    Alert(Alert),
    /// See [`Ack`].
    Ack(Ack),
    /// See [`Exit`].
    Exit(Exit),
    /// Any other event (`start`, `limit`, `rearm`, ...), by its name; the fields are in [`Event::raw`].
    Other(String),
}

/// One event line.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the recording's start.
    pub t_s: f64,
    /// 1-based line number in the recording.
    pub line: usize,
    /// The typed event.
    pub kind: EventKind,
    /// The whole JSON object, as written.
    pub raw: serde_json::Value,
}

impl Event {
    /// The event's name (`alert`, `ack`, `exit`, ...).
    pub fn name(&self) -> &str {
        match &self.kind {
            EventKind::Alert(_) => "alert",
            EventKind::Ack(_) => "ack",
            EventKind::Exit(_) => "exit",
            EventKind::Other(name) => name,
        }
    }
}

/// A parsed recording.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// The `meta` line (default when absent, as in a plain trace).
    pub meta: Meta,
    /// The resources: those with a `resource` line in file order, then any others
    /// named only in the table, in order of first appearance.
    pub resources: Vec<ResourceInfo>,
    /// Per resource (same index as [`Recording::resources`]), its rows sorted by time.
    pub series: Vec<Vec<Point>>,
    /// The events in file order.
    pub events: Vec<Event>,
    /// The last `exit` event's verdict.
    pub verdict: Option<String>,
    /// The last `exit` event's summary.
    pub verdict_summary: Option<String>,
    /// `# key: value` comments (plain traces use them), in file order.
    pub comments: Vec<(String, String)>,
}

impl Recording {
    /// The last `exit` event, if any.
    pub fn exit(&self) -> Option<&Exit> {
        self.events.iter().rev().find_map(|e| match &e.kind {
            EventKind::Exit(x) => Some(x),
            _ => None,
        })
    }

    /// Index of the resource with this name.
    pub fn resource_index(&self, name: &str) -> Option<usize> {
        self.resources.iter().position(|r| r.name == name)
    }

    /// The earliest and latest time of any row or event, if there is any.
    pub fn time_range(&self) -> Option<(f64, f64)> {
        let times = self
            .series
            .iter()
            .flat_map(|s| [s.first(), s.last()])
            .flatten()
            .map(|p| p.t_s)
            .chain(self.events.iter().map(|e| e.t_s));
        times.fold(None, |acc, t| match acc {
            None => Some((t, t)),
            Some((lo, hi)) => Some((f64::min(lo, t), f64::max(hi, t))),
        })
    }
}

#[derive(Deserialize)]
struct MetaLine {
    meta: Meta,
}

#[derive(Deserialize)]
struct ResourceLine {
    name: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    source: Option<String>,
}

fn unit_for_name(name: &str) -> Unit {
    ResourceKind::of_resource_name(name).unit()
}

fn kind_name(name: &str) -> String {
    ResourceKind::of_resource_name(name).as_str().to_string()
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn typed<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    line: usize,
    what: &str,
) -> Result<T, ParseError> {
    serde_json::from_value(value).map_err(|e| {
        // serde quotes the offending value whole; keep 80 characters of it.
        let e = watchdog_types::quote::clip_quoted(&e.to_string());
        malformed(line, format!("invalid {what}: {e}"))
    })
}

/// Parses one `#{...}` line into the recording.
fn parse_json_line(rec: &mut Recording, json: &str, line: usize) -> Result<(), ParseError> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| {
        malformed(
            line,
            format!("invalid JSON ({e}): expected one JSON object after '#'"),
        )
    })?;
    let Some(obj) = value.as_object() else {
        return Err(malformed(
            line,
            format!(
                "found {} after '#': expected a JSON object with meta, resource or event",
                json_type(&value)
            ),
        ));
    };
    if let Some(name) = obj.get("event") {
        let Some(name) = name.as_str() else {
            return Err(malformed(
                line,
                format!("event is {}: expected a string", json_type(name)),
            ));
        };
        let t_s = match obj.get("t") {
            Some(t) => t
                .as_f64()
                .filter(|t| t.abs() <= trace::MAX_ABS_TIME_S)
                .ok_or_else(|| {
                    malformed(
                        line,
                        format!(
                            "{} event's t is {}: expected seconds since the start as a number, at most 1e12 either side of 0",
                            quote_value(name),
                            quote_value(&t.to_string())
                        ),
                    )
                })?,
            None => {
                return Err(malformed(
                    line,
                    format!(
                        "{name} event has no t: expected seconds since the start, as in \"t\":12.345"
                    ),
                ));
            }
        };
        let kind = match name {
            "alert" => {
                let a: Alert = typed(value.clone(), line, "alert event")?;
                if a.resource.is_empty() {
                    return Err(malformed(
                        line,
                        "alert event has no resource: expected \"resource\":\"<name>\"",
                    ));
                }
                EventKind::Alert(a)
            }
            "ack" => EventKind::Ack(typed(value.clone(), line, "ack event")?),
            "exit" => {
                let x: Exit = typed(value.clone(), line, "exit event")?;
                rec.verdict = x.verdict.clone();
                rec.verdict_summary = x.summary.clone();
                EventKind::Exit(x)
            }
            other => EventKind::Other(other.to_string()),
        };
        if rec.events.len() >= MAX_EVENTS {
            return Err(malformed(
                line,
                format!("more than {MAX_EVENTS} events: expected a recording the watchdog wrote"),
            ));
        }
        rec.events.push(Event {
            t_s,
            line,
            kind,
            raw: value,
        });
    } else if obj.contains_key("meta") {
        let version = rec.meta.version;
        let m: MetaLine = typed(value, line, "meta line")?;
        rec.meta = Meta { version, ..m.meta };
    } else if let Some(r) = obj.get("resource") {
        let r: ResourceLine = typed(r.clone(), line, "resource line")?;
        let unit = match r.unit.as_deref() {
            None => unit_for_name(&r.name),
            Some(u) => u.parse::<Unit>().map_err(|_| {
                malformed(
                    line,
                    format!(
                        "invalid unit {} of {}: expected bytes, count or millis",
                        quote_value(u),
                        quote_value(&r.name)
                    ),
                )
            })?,
        };
        if rec.resources.len() >= trace::MAX_RESOURCES {
            return Err(malformed(
                line,
                format!(
                    "resource {} is one too many: expected at most {} resources in one recording",
                    quote_value(&r.name),
                    trace::MAX_RESOURCES
                ),
            ));
        }
        if rec.resource_index(&r.name).is_some() {
            return Err(malformed(
                line,
                format!(
                    "resource {} declared twice: expected one resource line per resource",
                    quote_value(&r.name)
                ),
            ));
        }
        rec.resources.push(ResourceInfo {
            kind: r.kind.unwrap_or_else(|| kind_name(&r.name)),
            name: r.name,
            unit,
            source: r.source,
        });
        rec.series.push(Vec::new());
    } else {
        return Err(malformed(
            line,
            "JSON object with none of meta, resource or event: expected one of them as its key",
        ));
    }
    Ok(())
}

/// Parses a recording or a plain CSV trace (see the module doc).
pub fn parse(text: &str) -> Result<Recording, ParseError> {
    let mut rec = Recording::default();
    let mut table_line: Option<usize> = None; // 0-based index of the first table line
    let mut json_lines = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        let Some(comment) = trimmed.strip_prefix('#') else {
            // The table: `# ...` lines after it are still comments to the trace parser,
            // but JSON lines belong before it.
            table_line.get_or_insert(i);
            continue;
        };
        let comment = comment.trim_start();
        if let Some(rest) = trimmed.strip_prefix(MAGIC) {
            if line != 1 {
                return Err(malformed(
                    line,
                    "'# watchdog recording v1' found after the first line: expected it only on line 1",
                ));
            }
            let version: u32 = rest.trim().parse().map_err(|_| {
                malformed(
                    line,
                    format!(
                        "invalid version in {}: expected '# watchdog recording v1'",
                        quote_value(trimmed)
                    ),
                )
            })?;
            if version != VERSION {
                return Err(malformed(
                    line,
                    format!(
                        "unsupported recording version v{version}: expected v1 (a newer watchdog wrote it)"
                    ),
                ));
            }
            rec.meta.version = Some(version);
        } else if comment.starts_with('{') {
            if table_line.is_some() {
                return Err(malformed(
                    line,
                    "JSON line after the CSV table: expected every '#{...}' line before the table",
                ));
            }
            json_lines += 1;
            parse_json_line(&mut rec, comment, line)?;
        } else if let Some((k, v)) = comment.split_once(':') {
            let k = k.trim();
            if !k.is_empty() && !k.contains(' ') {
                rec.comments.push((k.to_string(), v.trim().to_string()));
            }
        }
    }
    let Some(first) = table_line else {
        return if json_lines > 0 {
            Ok(rec)
        } else if rec.meta.version.is_some() {
            Err(ParseError::HeaderOnly)
        } else {
            Err(ParseError::Empty)
        };
    };
    parse_table(&mut rec, text, first)?;
    let is_recording = rec.meta.version.is_some() || json_lines > 0;
    if !is_recording {
        rebase_wall_clock(&mut rec);
    }
    Ok(rec)
}

/// Parses the CSV table (whose first line is the 0-based `first`) into `rec.series`.
fn parse_table(rec: &mut Recording, text: &str, first: usize) -> Result<(), ParseError> {
    // Counted before parsing, so a table of tens of millions of rows is never held.
    let lines = text
        .lines()
        .skip(first + 1)
        .filter(|l| !l.trim().is_empty());
    if lines.count() > MAX_ROWS {
        return Err(malformed(
            first + 1,
            format!(
                "the table has more than {MAX_ROWS} rows: expected at most that many (8 times what the flight recorder keeps)"
            ),
        ));
    }
    let header = text.lines().nth(first).unwrap_or("").trim();
    let first_field = header.split(',').next().unwrap_or("").trim();
    let headerless = first_field.parse::<f64>().is_ok();
    let (parsed, shift) = if headerless {
        let fields = header.split(',').count();
        let synthetic = match fields {
            3 => "time,used,limit",
            4 => "time,used,limit,resource",
            n => {
                return Err(malformed(
                    first + 1,
                    format!(
                        "found {n} fields in {} and no header: expected time,used,limit[,resource] or a header line naming them",
                        quote_value(header)
                    ),
                ));
            }
        };
        (trace::parse(&format!("{synthetic}\n{text}")), 1)
    } else {
        (trace::parse(text), 0)
    };
    let parsed = parsed.map_err(|e| match e {
        TraceError::Empty => ParseError::Empty,
        TraceError::Malformed { line, message } => {
            malformed(line.saturating_sub(shift).max(1), message)
        }
    })?;
    let mut index_of: Vec<usize> = Vec::with_capacity(parsed.resources.len());
    for name in &parsed.resources {
        let ix = match rec.resource_index(name) {
            Some(ix) => ix,
            None => {
                rec.resources.push(ResourceInfo {
                    name: name.clone(),
                    kind: kind_name(name),
                    unit: unit_for_name(name),
                    source: None,
                });
                rec.series.push(Vec::new());
                rec.resources.len() - 1
            }
        };
        index_of.push(ix);
    }
    for s in &parsed.samples {
        if let Some(series) = index_of
            .get(s.resource)
            .and_then(|&ix| rec.series.get_mut(ix))
        {
            series.push(Point {
                t_s: s.t_s,
                used: s.used,
                limit: s.limit,
            });
        }
    }
    for series in &mut rec.series {
        // Rows of one resource are written in time order; sort (stably) in case a
        // hand-made trace is not.
        series.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    }
    Ok(())
}

/// Shifts a plain trace with wall-clock timestamps (seconds since 1970) to start at 0 s.
fn rebase_wall_clock(rec: &mut Recording) {
    let Some((t0, _)) = rec.time_range() else {
        return;
    };
    // 1e8 s is 1973: a relative time that large is not plausible, a timestamp is.
    if t0 > 1e8 {
        for p in rec.series.iter_mut().flatten() {
            p.t_s -= t0;
        }
        rec.meta.start_unix = Some(t0);
    }
}

#[cfg(test)]
mod tests;
