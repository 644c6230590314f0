//! Parsing step-peak traces: what the Python client reports per step (the `.steps` file,
//! `docs/recording.md`), with the device's figures beside it, one step a line.
//!
//! A CSV whose header names at least `time`, `phase`, `step`, `pass`, `allocated`,
//! `reserved`, `peak`, `retries`, `ooms`, `total`, `others` and `outside`, and optionally
//! `duration` and `folded` (other columns, e.g. `tokens`, are ignored):
//!
//! ```text
//! time,phase,step,pass,duration,allocated,reserved,peak,retries,ooms,total,others,outside,folded
//! 12.50,train,120,1,0.05,2147483648,3221225472,2952790016,0,0,25769803776,0,536870912,1
//! ```
//!
//! `time` and `duration` are seconds; the figures are bytes (or sizes with a unit,
//! `3 GiB`); `total` is the device's memory, `others` what other processes hold on it and
//! `outside` what the process holds outside its allocator (its NVML usage minus
//! `reserved`). Comments, `# key: value` metadata, blank lines and the bounds (a line of
//! at most [`MAX_LINE_BYTES`], times within [`MAX_ABS_TIME_S`]) are as in
//! [`crate::trace`], and so are the errors.

use std::str::FromStr;

use watchdog_types::Phase;
use watchdog_types::quote::quote_value;

use crate::trace::{
    MAX_ABS_TIME_S, MAX_LINE_BYTES, TraceError, line_too_long, meta_comment, parse_amount,
};

/// One step of a step-peak trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRow {
    /// When the step ended, seconds.
    pub t_s: f64,
    /// Training, evaluation or other.
    pub phase: Phase,
    /// The caller's step.
    pub step: u64,
    /// The pass of the phase, from 1.
    pub pass: u64,
    /// How long the step took, when known.
    pub duration_s: Option<f64>,
    /// `allocated_bytes.all.current` at the step's end.
    pub allocated: u64,
    /// `reserved_bytes.all.current` at the step's end.
    pub reserved: u64,
    /// `allocated_bytes.all.peak` over the step.
    pub peak: u64,
    /// `num_alloc_retries` so far.
    pub retries: u64,
    /// `num_ooms` so far.
    pub ooms: u64,
    /// Steps the line stands for (1 unless folded).
    pub folded: u32,
    /// The device's total memory.
    pub total: u64,
    /// What other processes hold on the device.
    pub others: u64,
    /// What the process holds outside its allocator.
    pub outside: u64,
}

impl StepRow {
    /// What NVML shows the device using: the process's reserve and what it holds outside
    /// the allocator, and the other processes'.
    pub fn device_used(&self) -> u64 {
        self.reserved
            .saturating_add(self.outside)
            .saturating_add(self.others)
    }
}

/// A parsed step-peak trace.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTrace {
    /// The steps, in file order.
    pub rows: Vec<StepRow>,
    /// `# key: value` comments, in file order.
    pub meta: Vec<(String, String)>,
}

impl StepTrace {
    /// The value of the first `# key: value` comment with this key.
    pub fn meta(&self, key: &str) -> Option<&str> {
        crate::trace::meta_value(&self.meta, key)
    }
}

const REQUIRED: [&str; 12] = [
    "time",
    "phase",
    "step",
    "pass",
    "allocated",
    "reserved",
    "peak",
    "retries",
    "ooms",
    "total",
    "others",
    "outside",
];

/// Whether `text`'s header (its first line that is neither blank nor a comment) is a
/// step-peak trace's: it names `peak` and `reserved`.
pub fn is_step_trace(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|header| {
            let mut names = header.split(',').map(|c| c.trim().trim_matches('"'));
            let (mut peak, mut reserved) = (false, false);
            for n in &mut names {
                peak |= n.eq_ignore_ascii_case("peak");
                reserved |= n.eq_ignore_ascii_case("reserved");
            }
            peak && reserved
        })
}

/// Parses a whole step-peak trace.
pub fn parse(text: &str) -> Result<StepTrace, TraceError> {
    let mut rows = Vec::new();
    let meta = parse_into(text, |row, _| rows.push(row))?;
    Ok(StepTrace { rows, meta })
}

/// Where each column is: [`REQUIRED`] in order, then `duration` and `folded`.
struct Columns {
    at: [usize; 12],
    duration: Option<usize>,
    folded: Option<usize>,
    width: usize,
}

fn header(line: &str, lineno: usize) -> Result<Columns, TraceError> {
    let names: Vec<String> = line
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_ascii_lowercase())
        .collect();
    let find = |name: &str| names.iter().position(|n| n == name);
    let mut at = [0usize; 12];
    for (slot, name) in at.iter_mut().zip(REQUIRED) {
        *slot = find(name).ok_or_else(|| TraceError::Malformed {
            line: lineno,
            message: format!(
                "found step-trace header {} without '{name}': expected the columns {}",
                quote_value(line),
                REQUIRED.join(",")
            ),
        })?;
    }
    Ok(Columns {
        at,
        duration: find("duration"),
        folded: find("folded"),
        width: names.len(),
    })
}

/// Parses `text`, handing every step and its 1-based line to `sink` as it is read;
/// returns the `# key: value` metadata.
pub fn parse_into(
    text: &str,
    mut sink: impl FnMut(StepRow, usize),
) -> Result<Vec<(String, String)>, TraceError> {
    let mut meta = Vec::new();
    let mut cols: Option<Columns> = None;
    let mut fields: Vec<&str> = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let lineno = i + 1;
        if raw.len() > MAX_LINE_BYTES {
            return Err(line_too_long(lineno));
        }
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            meta.extend(meta_comment(comment));
            continue;
        }
        let Some(c) = &cols else {
            cols = Some(header(line, lineno)?);
            continue;
        };
        fields.clear();
        fields.extend(line.split(',').map(|f| f.trim().trim_matches('"')));
        sink(row(&fields, c, line, lineno)?, lineno);
    }
    if cols.is_none() {
        return Err(TraceError::Empty);
    }
    Ok(meta)
}

fn row(fields: &[&str], c: &Columns, line: &str, lineno: usize) -> Result<StepRow, TraceError> {
    let bad = |what: &str, value: &str, expected: &str| TraceError::Malformed {
        line: lineno,
        message: format!("invalid {what} {}: expected {expected}", quote_value(value)),
    };
    if fields.len() < c.width {
        return Err(TraceError::Malformed {
            line: lineno,
            message: format!(
                "found {} fields in {}: expected {} as in the header",
                fields.len(),
                quote_value(line),
                c.width
            ),
        });
    }
    let field = |k: usize| fields.get(c.at[k]).copied().unwrap_or("");
    let seconds = |what: &str, v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && t.abs() <= MAX_ABS_TIME_S)
            .ok_or_else(|| {
                bad(
                    what,
                    v,
                    "seconds (e.g. 12.5, at most 1e12 either side of 0)",
                )
            })
    };
    let count = |what: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| bad(what, v, "a non-negative whole number"))
    };
    let bytes = |k: usize| {
        let v = field(k);
        parse_amount(v, 1.0).ok_or_else(|| {
            bad(
                REQUIRED[k],
                v,
                "a non-negative number of bytes with an optional unit (e.g. 1234 or 3 GiB)",
            )
        })
    };
    let phase =
        Phase::from_str(field(1)).map_err(|_| bad("phase", field(1), "train, eval or other"))?;
    let duration_s = match c.duration.map(|k| fields.get(k).copied().unwrap_or("")) {
        None | Some("") => None,
        Some(v) => Some(seconds("duration", v)?.max(0.0)),
    };
    let folded = match c.folded.map(|k| fields.get(k).copied().unwrap_or("")) {
        None | Some("") => 1,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|f| *f >= 1)
            .ok_or_else(|| bad("folded", v, "a whole number of steps, at least 1"))?,
    };
    Ok(StepRow {
        t_s: seconds("time", field(0))?,
        phase,
        step: count("step", field(2))?,
        pass: count("pass", field(3))?,
        duration_s,
        allocated: bytes(4)?,
        reserved: bytes(5)?,
        peak: bytes(6)?,
        retries: count("retries", field(7))?,
        ooms: count("ooms", field(8))?,
        folded,
        total: bytes(9)?,
        others: bytes(10)?,
        outside: bytes(11)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const HEADER: &str = "time,phase,step,pass,duration,allocated,reserved,peak,retries,ooms,total,others,outside,folded";

    #[test]
    fn a_step_trace_is_told_apart_and_read() {
        let text = format!(
            "# trace: x\n# save_s: 10\n{HEADER}\n\n1.5,train,1,1,0.05,1 GiB,2147483648,3 GiB,0,0,24 GiB,0,512 MiB,1\n2,eval,1,1,,5,6,7,1,0,100,10,20,\n"
        );
        assert!(is_step_trace(&text));
        assert!(!is_step_trace("# x\ntime,used,limit\n1,2,3\n"));
        let t = parse(&text).unwrap();
        assert_eq!(t.meta("save_s"), Some("10"));
        assert_eq!(t.rows.len(), 2);
        let r = t.rows[0];
        assert_eq!((r.phase, r.step, r.pass, r.folded), (Phase::Train, 1, 1, 1));
        assert_eq!((r.allocated, r.peak, r.total), (1 << 30, 3 << 30, 24 << 30));
        assert_eq!(r.device_used(), (2 << 30) + (512 << 20));
        let e = t.rows[1];
        assert_eq!((e.phase, e.duration_s, e.folded), (Phase::Eval, None, 1));
        assert_eq!(e.device_used(), 6 + 20 + 10);
    }

    #[test]
    fn bad_lines_name_the_line_and_what_was_expected() {
        let cases: [(&str, &str); 6] = [
            (
                "time,phase,step,pass,allocated,reserved,peak,retries,ooms,total,others\n",
                "line 1: found step-trace header 'time,phase,step,pass,allocated,reserved,peak,retries,ooms,total,others' without 'outside': expected the columns time,phase,step,pass,allocated,reserved,peak,retries,ooms,total,others,outside",
            ),
            (
                "1,walk,1,1,0.1,1,2,3,0,0,10,0,0,1\n",
                "line 2: invalid phase 'walk': expected train, eval or other",
            ),
            (
                "1,train,1,1,0.1,1,2,x,0,0,10,0,0,1\n",
                "line 2: invalid peak 'x': expected a non-negative number of bytes with an optional unit (e.g. 1234 or 3 GiB)",
            ),
            (
                "1,train,1,1,0.1,1,2,3,0,0,10,0,0,0\n",
                "line 2: invalid folded '0': expected a whole number of steps, at least 1",
            ),
            (
                "nan,train,1,1,0.1,1,2,3,0,0,10,0,0,1\n",
                "line 2: invalid time 'nan': expected seconds (e.g. 12.5, at most 1e12 either side of 0)",
            ),
            (
                "1,train,1,1,0.1,1,2,3\n",
                "line 2: found 8 fields in '1,train,1,1,0.1,1,2,3': expected 14 as in the header",
            ),
        ];
        for (body, want) in cases {
            let text = if body.starts_with("time") {
                body.to_string()
            } else {
                format!("{HEADER}\n{body}")
            };
            assert_eq!(parse(&text).unwrap_err().to_string(), want);
        }
        assert_eq!(parse("# only\n").unwrap_err(), TraceError::Empty);
        let long = format!("{HEADER}\n{}\n", "1".repeat(MAX_LINE_BYTES + 1));
        assert_eq!(parse(&long).unwrap_err(), line_too_long(2));
    }
}
