//! Parsing recorded usage traces, purely from text.
//!
//! Two formats, told apart by the header line:
//!
//! 1. A CSV whose header names at least `time`, `used` and `limit`, and
//!    optionally `resource` (other columns are ignored). `time` is seconds as
//!    a number or an RFC 3339 timestamp (`2024-01-15T10:23:45.123Z`,
//!    `+02:00` offsets too); `used` and `limit` are plain numbers in the
//!    resource's unit or sizes with a unit (`1234 MiB`); an empty limit, `inf`
//!    or `max` means unlimited.
//! 2. What `nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total
//!    --format=csv` writes: header `timestamp, index, memory.used [MiB],
//!    memory.total [MiB]`, timestamps like `2024/01/15 10:23:45.123`, values
//!    like `1234 MiB` (or bare numbers with `nounits`, scaled by the header's
//!    unit). The resource of each row is `gpu<index>`.
//!
//! Blank lines are skipped. Lines starting with `#` are comments; a comment
//! of the form `# key: value` is kept as metadata (the trace corpus uses it
//! to record the true exhaustion time). A malformed line gives a
//! [`TraceError`] with its 1-based line number and what was expected, quoting at
//! most 80 characters of the bad value. A line longer than [`MAX_LINE_BYTES`] is an
//! error: no sample needs it, and readers of trace files stop there rather than
//! hold a runaway line (`/dev/zero`) in memory.

use watchdog_types::quote::quote_value;
use watchdog_types::units::{parse_size, printable};

/// Longest line a trace or recording may have, in bytes (64 KiB).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Most resources one trace may name (a watchdog recording has a few: memory, the
/// cgroup, a disk or two, the GPUs); more is refused at the first one past it, so a
/// hostile trace cannot make `replay` keep or `report` draw one panel per line.
pub const MAX_RESOURCES: usize = 256;

/// Largest time, in seconds either side of 0, a trace may hold: about year 33,700 as a
/// Unix time, beyond any timestamp (year 9999 is 2.5e11 s). Keeps every difference of
/// two times finite, so the report's coordinates are numbers.
pub const MAX_ABS_TIME_S: f64 = 1e12;

/// The message for a line longer than [`MAX_LINE_BYTES`].
pub fn line_too_long(line: usize) -> TraceError {
    TraceError::Malformed {
        line,
        message: format!(
            "longer than {} KiB: expected one sample per line",
            MAX_LINE_BYTES / 1024
        ),
    }
}

/// One row of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceSample {
    /// Index into [`Trace::resources`].
    pub resource: usize,
    /// Time in seconds: as written when numeric, else seconds since 1970 (UTC when the
    /// timestamp carries an offset; nvidia-smi's local-time stamps are taken as UTC).
    pub t_s: f64,
    /// Usage, in the resource's unit (bytes for sizes).
    pub used: u64,
    /// Limit, in the resource's unit; `u64::MAX` when unlimited.
    pub limit: u64,
}

/// Which format the trace was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Generic CSV with `time`, `used`, `limit` (and optionally `resource`) columns.
    Csv,
    /// `nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv`.
    NvidiaSmi,
}

/// A parsed trace: the resources in order of first appearance and every sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The format detected from the header.
    pub format: TraceFormat,
    /// Resource names, in order of first appearance.
    pub resources: Vec<String>,
    /// The samples, in file order.
    pub samples: Vec<TraceSample>,
    /// `# key: value` comments, in file order.
    pub meta: Vec<(String, String)>,
}

impl Trace {
    /// The value of the first `# key: value` comment with this key.
    pub fn meta(&self, key: &str) -> Option<&str> {
        meta_value(&self.meta, key)
    }

    /// Time of the first sample (the origin of replay times), 0 when empty.
    pub fn start_s(&self) -> f64 {
        self.samples.first().map_or(0.0, |s| s.t_s)
    }
}

/// The `(key, value)` of a `# key: value` comment (given without its `#`); `None` for any
/// other comment.
pub(crate) fn meta_comment(comment: &str) -> Option<(String, String)> {
    let (k, v) = comment.split_once(':')?;
    let k = k.trim();
    (!k.is_empty() && !k.contains(' ')).then(|| (k.to_string(), v.trim().to_string()))
}

/// The value of the first `(key, value)` of `meta` with this key.
pub fn meta_value<'m>(meta: &'m [(String, String)], key: &str) -> Option<&'m str> {
    meta.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Why a trace could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// No header line at all.
    #[error(
        "empty trace: expected a CSV header naming time, used and limit (or nvidia-smi's timestamp, index, memory.used, memory.total)"
    )]
    Empty,
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

struct Columns {
    time: usize,
    used: usize,
    limit: usize,
    resource: Option<usize>,
    index: Option<usize>,
    /// Multiplier for unit-less values (nvidia-smi's `nounits`: `[MiB]` in the header).
    used_scale: f64,
    limit_scale: f64,
    width: usize,
}

fn unit_scale(header: &str) -> f64 {
    match header.find('[').and_then(|i| {
        let rest = header.get(i + 1..)?;
        rest.find(']').and_then(|j| rest.get(..j))
    }) {
        Some(u) => parse_size(&format!("1{}", u.trim())).map_or(1.0, |v| v as f64),
        None => 1.0,
    }
}

fn parse_header(line: &str, lineno: usize) -> Result<(Columns, TraceFormat), TraceError> {
    let raw: Vec<&str> = line
        .split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect();
    let names: Vec<String> = raw.iter().map(|c| c.to_ascii_lowercase()).collect();
    let find = |pred: &dyn Fn(&str) -> bool| names.iter().position(|n| pred(n));
    let nvidia = names.iter().any(|n| n.starts_with("memory.used"));
    let time = find(&|n| matches!(n, "time" | "t" | "t_s" | "time_s" | "timestamp"));
    let used = find(&|n| n == "used" || n.starts_with("used ") || n.starts_with("memory.used"));
    let limit = find(&|n| {
        n == "limit" || n.starts_with("limit ") || n.starts_with("memory.total") || n == "total"
    });
    let resource = find(&|n| n == "resource" || n == "name");
    let index = find(&|n| n == "index");
    let expected = "expected a header naming time, used and limit (optionally resource), or nvidia-smi's 'timestamp, index, memory.used [MiB], memory.total [MiB]'";
    match (time, used, limit) {
        (Some(time), Some(used), Some(limit)) => {
            let used_scale = raw.get(used).map_or(1.0, |n| unit_scale(n));
            let limit_scale = raw.get(limit).map_or(1.0, |n| unit_scale(n));
            Ok((
                Columns {
                    time,
                    used,
                    limit,
                    resource,
                    index: if nvidia { index } else { None },
                    used_scale,
                    limit_scale,
                    width: names.len(),
                },
                if nvidia {
                    TraceFormat::NvidiaSmi
                } else {
                    TraceFormat::Csv
                },
            ))
        }
        _ => Err(TraceError::Malformed {
            line: lineno,
            message: format!("found header {}: {expected}", quote_value(line.trim())),
        }),
    }
}

/// Parses a trace in either format.
///
/// Data lines of the common shapes (unquoted fields; plain decimal seconds or
/// timestamps; plain integers, sizes or an empty limit) take a fast path that
/// reads each byte about once and allocates nothing; comments, blank lines and
/// any line the fast path is not sure of go through the general line parser,
/// which defines what is accepted and words every error.
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    parse_with(text, true)
}

/// [`parse`] with the fast path for data lines on or off (the tests check that
/// both give the same trace or the same error).
pub(crate) fn parse_with(text: &str, fast: bool) -> Result<Trace, TraceError> {
    let mut samples = Vec::new();
    let Parsed {
        format,
        resources,
        meta,
    } = parse_into(text, fast, &mut samples)?;
    if samples.capacity() / 2 > samples.len() {
        samples.shrink_to_fit();
    }
    Ok(Trace {
        format,
        resources,
        samples,
        meta,
    })
}

/// Where [`parse_into`] puts the samples, in file order.
pub trait Sink {
    /// About `n` samples are to come (a hint, from the text's length).
    fn expect(&mut self, _n: usize) {}
    /// The next sample, from 1-based `line`; `resources` are the resource names so far,
    /// the sample's among them.
    fn sample(&mut self, sample: TraceSample, resources: &[String], line: usize);
}

impl Sink for Vec<TraceSample> {
    fn expect(&mut self, n: usize) {
        self.reserve(n);
    }
    fn sample(&mut self, sample: TraceSample, _resources: &[String], _line: usize) {
        self.push(sample);
    }
}

/// A [`Trace`] without its samples.
pub struct Parsed {
    /// The format detected from the header.
    pub format: TraceFormat,
    /// Resource names, in order of first appearance.
    pub resources: Vec<String>,
    /// `# key: value` comments, in file order.
    pub meta: Vec<(String, String)>,
}

/// Parses `text`, handing every sample to `sink` as it is read (`fast`: whether data
/// lines take the fast path [`parse`] describes); what `watchdog replay` streams through
/// its predictors.
pub fn parse_into<S: Sink>(text: &str, fast: bool, sink: &mut S) -> Result<Parsed, TraceError> {
    let bytes = text.as_bytes();
    let mut rec = Records::default();
    let mut header: Option<(Columns, TraceFormat, Vec<Role>)> = None;
    let mut pos = 0usize;
    let mut lineno = 0usize;
    // Lines as `str::lines` splits them: at `\n`, a last line without one included.
    while pos < bytes.len() {
        lineno += 1;
        if fast && let Some((cols, _, roles)) = &header {
            if bytes.get(pos) == Some(&b'\n') {
                pos += 1;
                continue;
            }
            if let Some((sample, next)) = fast_record(text, pos, cols, roles, &mut rec)
                && next - pos <= MAX_LINE_BYTES
            {
                sink.sample(sample, &rec.resources, lineno);
                pos = next;
                continue;
            }
        }
        let end = line_end(text, pos);
        if end - pos > MAX_LINE_BYTES {
            return Err(line_too_long(lineno));
        }
        // `trim` also drops the `\r` of a `\r\n` ending.
        let line = text.get(pos..end).unwrap_or("").trim();
        pos = end + 1;
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(kv) = meta_comment(comment) {
                rec.meta.push(kv);
                // The default resource may come from this comment.
                rec.default = None;
            }
            continue;
        }
        let Some((cols, _, _)) = &header else {
            let (cols, format) = parse_header(line, lineno)?;
            let roles = roles(&cols);
            // About as many samples as lines like the next one fit in the rest.
            let next_len = line_end(text, pos).saturating_sub(pos) + 1;
            sink.expect(bytes.len().saturating_sub(pos) / next_len.max(16));
            header = Some((cols, format, roles));
            continue;
        };
        let sample = parse_record(line, lineno, cols, &mut rec)?;
        sink.sample(sample, &rec.resources, lineno);
    }
    let Some((_, format, _)) = header else {
        return Err(TraceError::Empty);
    };
    Ok(Parsed {
        format,
        resources: rec.resources,
        meta: rec.meta,
    })
}

/// What parsing has gathered so far.
#[derive(Default)]
struct Records {
    meta: Vec<(String, String)>,
    resources: Vec<String>,
    /// The resource of the previous data line, tried first.
    last: Option<usize>,
    /// The resource of lines without a resource column, once looked up.
    default: Option<usize>,
    /// The last timestamp the fast path parsed: where it is in the text, and its seconds.
    last_time: Option<(usize, usize, f64)>,
}

impl Records {
    /// Index of the resource `is` matches (the previous line's first), adding
    /// `make()` when there is none; `None` when that would be more than [`MAX_RESOURCES`].
    fn intern(
        &mut self,
        is: impl Fn(&str) -> bool,
        make: impl FnOnce() -> String,
    ) -> Option<usize> {
        if let Some(i) = self.last
            && self.resources.get(i).is_some_and(|r| is(r))
        {
            return Some(i);
        }
        let i = match self.resources.iter().position(|r| is(r)) {
            Some(i) => i,
            None => self.push(make())?,
        };
        self.last = Some(i);
        Some(i)
    }

    /// Adds a resource, unless there are [`MAX_RESOURCES`] already.
    fn push(&mut self, name: String) -> Option<usize> {
        if self.resources.len() >= MAX_RESOURCES {
            return None;
        }
        self.resources.push(name);
        Some(self.resources.len() - 1)
    }

    /// When the field at `i` is the previous data line's resource name (ending
    /// the field but for spaces), where the field ends.
    fn same_as_last(&self, b: &[u8], i: usize) -> Option<usize> {
        let name = self.resources.get(self.last?)?.as_bytes();
        let after = i.checked_add(name.len())?;
        if b.get(i..after)? != name {
            return None;
        }
        let end = skip_spaces(b, after);
        at_field_end(b, end).then_some(end)
    }

    /// The resource of lines without a resource column: the first `# resource:`
    /// comment so far, else `memory`.
    fn default_resource(&mut self) -> Option<usize> {
        if let Some(i) = self.default {
            return Some(i);
        }
        let name = self
            .meta
            .iter()
            .find(|(k, _)| k == "resource")
            .map_or("memory", |(_, v)| v.as_str());
        let i = match self.resources.iter().position(|r| r == name) {
            Some(i) => i,
            None => self.push(name.to_string())?,
        };
        self.default = Some(i);
        Some(i)
    }
}

/// Index of the `\n` ending the line that starts at `pos` (the text's length when none does).
fn line_end(text: &str, pos: usize) -> usize {
    text.get(pos..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |k| pos + k)
}

/// The general parser of one data line (trimmed, not blank, not a comment).
fn parse_record(
    line: &str,
    lineno: usize,
    cols: &Columns,
    rec: &mut Records,
) -> Result<TraceSample, TraceError> {
    // Only the fields in use are kept: no allocation, any number of fields.
    let resource_col = cols.index.or(cols.resource);
    let (mut time, mut used, mut limit, mut name) = ("", "", "", "");
    let mut n_fields = 0usize;
    for (c, f) in line.split(',').enumerate() {
        let f = f.trim().trim_matches('"');
        if c == cols.time {
            time = f;
        } else if c == cols.used {
            used = f;
        } else if c == cols.limit {
            limit = f;
        } else if Some(c) == resource_col {
            name = f;
        }
        n_fields += 1;
    }
    if n_fields < cols.width {
        return Err(TraceError::Malformed {
            line: lineno,
            message: format!(
                "found {n_fields} fields in {}: expected {} as in the header",
                quote_value(line),
                cols.width
            ),
        });
    }
    let t_s = parse_time(time).ok_or_else(|| TraceError::Malformed {
        line: lineno,
        message: format!(
            "invalid time {}: expected seconds (e.g. 12.5, at most 1e12 either side of 0) or a timestamp like 2024-01-15T10:23:45.123Z or 2024/01/15 10:23:45.123",
            quote_value(time)
        ),
    })?;
    let used = parse_amount(used, cols.used_scale).ok_or_else(|| TraceError::Malformed {
        line: lineno,
        message: format!(
            "invalid used {}: expected a non-negative number with an optional unit (e.g. 1234 or 1234 MiB)",
            quote_value(used)
        ),
    })?;
    let limit = parse_limit(limit, cols.limit_scale).ok_or_else(|| TraceError::Malformed {
        line: lineno,
        message: format!(
            "invalid limit {}: expected a non-negative number with an optional unit, or empty/inf/max for unlimited",
            quote_value(limit)
        ),
    })?;
    let resource = if cols.index.is_some() {
        let idx = name;
        if idx.is_empty() || !idx.chars().all(|c| c.is_ascii_digit()) {
            return Err(TraceError::Malformed {
                line: lineno,
                message: format!(
                    "invalid GPU index {}: expected a number like 0",
                    quote_value(idx)
                ),
            });
        }
        rec.intern(
            |r| r.strip_prefix("gpu") == Some(idx),
            || format!("gpu{idx}"),
        )
    } else if cols.resource.is_some() {
        let r = name;
        if r.is_empty() {
            return Err(TraceError::Malformed {
                line: lineno,
                message: "empty resource: expected a name like cgroup_memory or disk:/data"
                    .to_string(),
            });
        }
        rec.intern(|x| x == r, || r.to_string())
    } else {
        rec.default_resource()
    };
    let resource = resource.ok_or_else(|| TraceError::Malformed {
        line: lineno,
        message: format!(
            "resource {} is one too many: expected at most {MAX_RESOURCES} resources in one trace",
            quote_value(name)
        ),
    })?;
    Ok(TraceSample {
        resource,
        t_s,
        used,
        limit,
    })
}

/// What a column of a data line holds, for the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Ignored,
    Time,
    Used,
    Limit,
    Resource,
    GpuIndex,
}

/// The role of every column of the header.
fn roles(cols: &Columns) -> Vec<Role> {
    let mut roles = vec![Role::Ignored; cols.width];
    let resource = match cols.index {
        Some(ix) => Some((ix, Role::GpuIndex)),
        None => cols.resource.map(|c| (c, Role::Resource)),
    };
    for (c, role) in [
        (cols.time, Role::Time),
        (cols.used, Role::Used),
        (cols.limit, Role::Limit),
    ]
    .into_iter()
    .chain(resource)
    {
        if let Some(slot) = roles.get_mut(c) {
            *slot = role;
        }
    }
    roles
}

/// The fast path for the data line starting at `start`: the sample and where the
/// next line starts, or `None` to leave the line to [`parse_record`] (which then
/// accepts it the same way or words the error).
///
/// Fields are cut at `,` and trimmed of ASCII spaces, tabs and `\r`; a field
/// then counts only when it is empty or starts and ends with a printable ASCII
/// character other than `"`, where `trim().trim_matches('"')` would leave it
/// as is. Numbers are read as the bytes go by; anything else is handed to the
/// same field parsers as the general path uses.
fn fast_record(
    text: &str,
    start: usize,
    cols: &Columns,
    roles: &[Role],
    rec: &mut Records,
) -> Option<(TraceSample, usize)> {
    let b = text.as_bytes();
    // Not blank, not a comment, nothing for `trim` to take off the front.
    if !b.get(start).is_some_and(|&c| plain(c) && c != b'#') {
        return None;
    }
    let (mut t_s, mut used, mut limit) = (0.0, 0, u64::MAX);
    let mut name = "";
    // The resource column holds the previous line's name.
    let mut same = false;
    let mut i = start;
    let last = roles.len().checked_sub(1)?;
    for (c, role) in roles.iter().enumerate() {
        i = match role {
            Role::Ignored => field_end(b, i),
            Role::Time => {
                let (v, end) = time_field(text, i, &mut rec.last_time)?;
                t_s = v;
                end
            }
            Role::Used => {
                let (v, end) = amount_field(text, i, cols.used_scale, false)?;
                used = v;
                end
            }
            Role::Limit => {
                let (v, end) = amount_field(text, i, cols.limit_scale, true)?;
                limit = v;
                end
            }
            Role::Resource => match rec.same_as_last(b, i) {
                Some(end) => {
                    same = true;
                    end
                }
                None => {
                    let end = field_end(b, i);
                    name = trimmed(text, i, end)?;
                    end
                }
            },
            Role::GpuIndex => {
                let end = field_end(b, i);
                name = trimmed(text, i, end)?;
                end
            }
        };
        // `i` is at the `,` or `\n` ending the field, or at the end of the text.
        if b.get(i) != Some(&b',') {
            if c < last {
                return None; // too few fields
            }
            break;
        }
        i += 1;
        if c == last {
            i = line_end(text, i); // more fields than the header: not looked at
        }
    }
    let resource = match roles.get(cols.index.or(cols.resource).unwrap_or(usize::MAX)) {
        Some(Role::GpuIndex) => {
            if name.is_empty() || !name.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            rec.intern(
                |r| r.strip_prefix("gpu") == Some(name),
                || format!("gpu{name}"),
            )?
        }
        Some(Role::Resource) if same => rec.last.unwrap_or(0),
        Some(Role::Resource) => {
            if name.is_empty() {
                return None;
            }
            rec.intern(|x| x == name, || name.to_string())?
        }
        _ => rec.default_resource()?,
    };
    Some((
        TraceSample {
            resource,
            t_s,
            used,
            limit,
        },
        i + 1,
    ))
}

/// A byte `trim().trim_matches('"')` keeps at the end of a field.
fn plain(c: u8) -> bool {
    c.is_ascii_graphic() && c != b'"'
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r')
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while b.get(i).copied().is_some_and(is_space) {
        i += 1;
    }
    i
}

/// Whether a field ends at `i`.
fn at_field_end(b: &[u8], i: usize) -> bool {
    matches!(b.get(i), None | Some(b',' | b'\n'))
}

/// Index of the `,` or `\n` ending the field at `i` (the text's length when none does).
fn field_end(b: &[u8], mut i: usize) -> usize {
    while let Some(&c) = b.get(i) {
        if c == b',' || c == b'\n' {
            break;
        }
        i += 1;
    }
    i
}

/// The field `start..end` as `trim().trim_matches('"')` leaves it, when trimming
/// ASCII spaces gives the same; `None` otherwise.
fn trimmed(text: &str, start: usize, end: usize) -> Option<&str> {
    let (s, e) = trimmed_range(text, start, end)?;
    text.get(s..e)
}

/// Where [`trimmed`]'s field starts and ends.
fn trimmed_range(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let s = skip_spaces(b, start).min(end);
    let mut e = end;
    while e > s && b.get(e - 1).copied().is_some_and(is_space) {
        e -= 1;
    }
    let f = text.get(s..e)?;
    match (f.as_bytes().first(), f.as_bytes().last()) {
        (Some(&x), Some(&y)) if !(plain(x) && plain(y)) => None,
        _ => Some((s, e)),
    }
}

/// A time field at `i`: its seconds and where it ends.
///
/// `last` is the previous timestamp read this way (its place in `text` and its
/// seconds), reused when this one reads the same.
fn time_field(
    text: &str,
    i: usize,
    last: &mut Option<(usize, usize, f64)>,
) -> Option<(f64, usize)> {
    let b = text.as_bytes();
    let s = skip_spaces(b, i);
    let (mut mantissa, mut digits, mut after) = digit_run(b, s);
    let mut frac = None;
    if b.get(after) == Some(&b'.') {
        let (f, n, a) = digit_run(b, after + 1);
        mantissa = mantissa
            .wrapping_mul(POW10_U64.get(n).copied().unwrap_or(0))
            .wrapping_add(f);
        digits += n;
        frac = Some(n);
        after = a;
    }
    let end = skip_spaces(b, after);
    if at_field_end(b, end)
        && let Some(v) = (Decimal {
            mantissa,
            digits,
            frac,
        })
        .value()
        && v <= MAX_ABS_TIME_S
    {
        return Some((v, end));
    }
    let end = field_end(b, after);
    let (s, e) = trimmed_range(text, i, end)?;
    let f = text.get(s..e)?;
    // Timestamps repeat on consecutive lines (nvidia-smi writes one per GPU).
    if let Some((ls, le, v)) = *last
        && text.get(ls..le) == Some(f)
    {
        return Some((v, end));
    }
    let v = parse_time(f)?;
    *last = Some((s, e, v));
    Some((v, end))
}

/// 10^n for n digits read at once.
const POW10_U64: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The run of ASCII digits at `i`: its value (wrapped past 19 digits), its length
/// and the index after it. Eight bytes at a time while eight remain.
fn digit_run(b: &[u8], start: usize) -> (u64, usize, usize) {
    let mut v = 0u64;
    let mut i = start;
    while let Some(&chunk) = b.get(i..).and_then(|r| r.first_chunk::<8>()) {
        let (w, n) = eight_digits(chunk);
        v = v
            .wrapping_mul(POW10_U64.get(n).copied().unwrap_or(0))
            .wrapping_add(w);
        i += n;
        if n < 8 {
            return (v, i - start, i);
        }
    }
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add(u64::from(d));
        i += 1;
    }
    (v, i - start, i)
}

/// The leading digits of 8 bytes: their value and how many (SWAR: one load, a
/// mask of the non-digit bytes, three multiplications).
fn eight_digits(chunk: [u8; 8]) -> (u64, usize) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Digits become their values 0..=9; any other byte gets a high nibble or a low one >= 10.
    let t = u64::from_le_bytes(chunk) ^ (ONES * b'0' as u64);
    let non_digit = (t & (ONES * 0xF0)) | (((t & (ONES * 0x0F)) + ONES * 0x06) & (ONES * 0x10));
    let n = (non_digit.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    // The n digits as the low end of an 8-digit number with leading zeros
    // (the first byte is the most significant digit).
    let v = t << (8 * (8 - n));
    let v = (v.wrapping_mul(10 << 8 | 1) >> 8) & 0x00FF_00FF_00FF_00FF;
    let v = (v.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_FFFF_0000_FFFF;
    (v.wrapping_mul(10_000 << 32 | 1) >> 32, n)
}

/// A used or limit field at `i`: its amount and where it ends.
fn amount_field(text: &str, i: usize, scale: f64, limit: bool) -> Option<(u64, usize)> {
    let b = text.as_bytes();
    let (v, n, j) = digit_run(b, skip_spaces(b, i));
    let end = skip_spaces(b, j);
    // Up to 19 digits always fit in a u64.
    if (1..=19).contains(&n) && at_field_end(b, end) {
        return Some((
            if scale == 1.0 {
                v
            } else {
                scaled(v as f64, scale)?
            },
            end,
        ));
    }
    // nvidia-smi's `1234 MiB`, as `parse_size` reads it.
    if (1..=19).contains(&n) && b.get(end..end + 3) == Some(b"MiB") {
        let after = skip_spaces(b, end + 3);
        if at_field_end(b, after) {
            return Some((v.checked_mul(1 << 20)?, after));
        }
    }
    let end = field_end(b, j);
    let f = trimmed(text, i, end)?;
    let v = if limit {
        parse_limit(f, scale)
    } else {
        parse_amount(f, scale)
    };
    Some((v?, end))
}

pub(crate) fn parse_amount(s: &str, scale: f64) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) && scale == 1.0 {
        return s.parse().ok();
    }
    if let Ok(v) = s.parse::<f64>() {
        return scaled(v, scale);
    }
    parse_size(s).ok()
}

/// `v * scale` rounded, when that is a u64.
fn scaled(v: f64, scale: f64) -> Option<u64> {
    let v = v * scale;
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then(|| v.round() as u64)
}

fn parse_limit(s: &str, scale: f64) -> Option<u64> {
    let t = s.trim();
    let unlimited = t.is_empty()
        || ["inf", "max", "unlimited", "none"]
            .iter()
            .any(|w| t.eq_ignore_ascii_case(w));
    if unlimited {
        Some(u64::MAX)
    } else {
        parse_amount(t, scale)
    }
}

/// Seconds from a number or a timestamp (see the module doc), `None` beyond
/// [`MAX_ABS_TIME_S`].
pub fn parse_time(s: &str) -> Option<f64> {
    parse_time_unbounded(s).filter(|t| t.abs() <= MAX_ABS_TIME_S)
}

fn parse_time_unbounded(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(v) = parse_plain_decimal(s) {
        return Some(v);
    }
    if s.bytes().all(|b| {
        b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'+' || b == b'e' || b == b'E'
    }) && let Ok(v) = s.parse::<f64>()
    {
        return v.is_finite().then_some(v);
    }
    parse_datetime(s)
}

/// Fast path for `123` / `123.456` (at most 15 significant digits): the digits as an
/// integer divided by a power of ten. Both are exact in f64, so the one division is
/// correctly rounded and equals what `str::parse::<f64>` returns.
fn parse_plain_decimal(s: &str) -> Option<f64> {
    match scan_decimal(s.as_bytes(), 0) {
        (d, end) if end == s.len() => d.value(),
        _ => None,
    }
}

/// A run of digits with at most one `.` among them.
struct Decimal {
    /// The digits as an integer (wrapped when there are more than 19).
    mantissa: u64,
    digits: usize,
    /// Digits after the `.`, when there is one.
    frac: Option<usize>,
}

impl Decimal {
    /// Its value, when it has 1 to 15 digits (see [`parse_plain_decimal`]).
    fn value(&self) -> Option<f64> {
        const POW10: [f64; 16] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
        ];
        if !(1..=15).contains(&self.digits) {
            return None;
        }
        Some(self.mantissa as f64 / POW10.get(self.frac.unwrap_or(0))?)
    }
}

/// The run of digits and one `.` from `i`, and where it stops.
fn scan_decimal(b: &[u8], mut i: usize) -> (Decimal, usize) {
    let mut d = Decimal {
        mantissa: 0,
        digits: 0,
        frac: None,
    };
    while let Some(&c) = b.get(i) {
        match c {
            b'0'..=b'9' => {
                d.mantissa = d
                    .mantissa
                    .wrapping_mul(10)
                    .wrapping_add(u64::from(c - b'0'));
                d.digits += 1;
                if let Some(f) = d.frac.as_mut() {
                    *f += 1;
                }
            }
            b'.' if d.frac.is_none() => d.frac = Some(0),
            _ => break,
        }
        i += 1;
    }
    (d, i)
}

fn digits(s: &str, n: usize) -> Option<(i64, &str)> {
    let head = s.get(..n)?;
    if !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, s.get(n..)?))
}

fn expect_one_of<'a>(s: &'a str, seps: &[u8]) -> Option<&'a str> {
    let b = *s.as_bytes().first()?;
    seps.contains(&b).then(|| s.get(1..))?
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|±HH:MM]`, also with `/` between date parts.
fn parse_datetime(s: &str) -> Option<f64> {
    let (year, r) = digits(s, 4)?;
    let r = expect_one_of(r, b"-/")?;
    let (month, r) = digits(r, 2)?;
    let r = expect_one_of(r, b"-/")?;
    let (day, r) = digits(r, 2)?;
    let r = expect_one_of(r, b"Tt ")?;
    let (hour, r) = digits(r, 2)?;
    let r = expect_one_of(r, b":")?;
    let (minute, r) = digits(r, 2)?;
    let r = expect_one_of(r, b":")?;
    let (second, mut r) = digits(r, 2)?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut frac = 0.0;
    if let Some(rest) = r.strip_prefix('.').or_else(|| r.strip_prefix(',')) {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        let ds = rest.get(..end)?;
        // 0.<ds> as `str::parse` would read it, without building the string when exact.
        let (d, _) = scan_decimal(ds.as_bytes(), 0);
        frac = match (Decimal {
            frac: Some(d.digits),
            ..d
        })
        .value()
        {
            Some(v) => v,
            None => format!("0.{ds}").parse().ok()?,
        };
        r = rest.get(end..)?;
    }
    let r = r.trim();
    let offset_s: i64 = match r {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match r.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let rest = r.get(1..)?;
            let (oh, rest) = digits(rest, 2)?;
            let rest = rest.strip_prefix(':').unwrap_or(rest);
            let (om, rest) = digits(rest, 2)?;
            if !rest.is_empty() || oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    // The calendar is jiff's (it refuses a day the month does not have); a leap
    // second (:60) counts as the second after :59, as it did before.
    let time = jiff::civil::Time::new(
        i8::try_from(hour).ok()?,
        i8::try_from(minute).ok()?,
        i8::try_from(second.min(59)).ok()?,
        0,
    )
    .ok()?;
    let date = jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .ok()?;
    let offset = jiff::tz::Offset::from_seconds(i32::try_from(offset_s).ok()?).ok()?;
    let secs = offset
        .to_timestamp(date.to_datetime(time))
        .ok()?
        .as_second()
        + (second - 59).max(0);
    Some(secs as f64 + frac)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_generic_csv_with_seconds() {
        let t = parse("# exhausts_at: 12.5\ntime,used,limit\n0,10,100\n0.5,20,100\n").unwrap();
        assert_eq!(t.format, TraceFormat::Csv);
        assert_eq!(t.resources, vec!["memory".to_string()]);
        assert_eq!(t.samples.len(), 2);
        assert_eq!(t.samples[1].t_s, 0.5);
        assert_eq!(t.samples[1].used, 20);
        assert_eq!(t.meta("exhausts_at"), Some("12.5"));
    }

    #[test]
    fn parses_rfc3339_and_resources_and_units() {
        let text = "resource,time,used,limit,extra\n\
            disk:/data,2024-01-15T10:23:45.5Z,1 MiB,2GiB,x\n\
            gpu0,2024-01-15T12:23:46.5+02:00,3,,y\n";
        let t = parse(text).unwrap();
        assert_eq!(
            t.resources,
            vec!["disk:/data".to_string(), "gpu0".to_string()]
        );
        assert_eq!(t.samples[0].used, 1 << 20);
        assert_eq!(t.samples[0].limit, 2 << 30);
        assert_eq!(t.samples[1].limit, u64::MAX);
        assert!((t.samples[1].t_s - t.samples[0].t_s - 1.0).abs() < 1e-6);
        assert_eq!(t.samples[0].t_s.floor(), 1_705_314_225.0);
    }

    #[test]
    fn parses_nvidia_smi() {
        let text = "timestamp, index, memory.used [MiB], memory.total [MiB]\n\
            2024/01/15 10:23:45.123, 0, 1234 MiB, 24564 MiB\n\
            2024/01/15 10:23:45.123, 1, 10 MiB, 24564 MiB\n\
            2024/01/15 10:23:46.123, 0, 1300 MiB, 24564 MiB\n";
        let t = parse(text).unwrap();
        assert_eq!(t.format, TraceFormat::NvidiaSmi);
        assert_eq!(t.resources, vec!["gpu0".to_string(), "gpu1".to_string()]);
        assert_eq!(t.samples[0].used, 1234 << 20);
        assert_eq!(t.samples[0].limit, 24564 << 20);
        assert!((t.samples[2].t_s - t.samples[0].t_s - 1.0).abs() < 1e-6);
    }

    #[test]
    fn nvidia_smi_nounits_uses_header_unit() {
        let text = "timestamp, index, memory.used [MiB], memory.total [MiB]\n\
            2024/01/15 10:23:45.123, 0, 1234, 24564\n";
        let t = parse(text).unwrap();
        assert_eq!(t.samples[0].used, 1234 << 20);
    }

    #[test]
    fn errors_carry_line_and_expectation() {
        let err = parse("time,used,limit\n0,1,2\n\n1,abc,2\n").unwrap_err();
        assert_eq!(
            err,
            TraceError::Malformed {
                line: 4,
                message: "invalid used 'abc': expected a non-negative number with an optional unit (e.g. 1234 or 1234 MiB)".into()
            }
        );
        let err = parse("when,used,limit\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 1: found header 'when,used,limit'"),
            "{err}"
        );
        let err = parse("time,used,limit\n0,1\n").unwrap_err();
        assert!(
            err.to_string().starts_with("line 2: found 2 fields"),
            "{err}"
        );
        let err = parse("time,used,limit\nyesterday,1,2\n").unwrap_err();
        assert!(
            err.to_string().contains("invalid time 'yesterday'"),
            "{err}"
        );
        assert_eq!(
            parse("# only a comment\n\n").unwrap_err(),
            TraceError::Empty
        );
        let err = parse("timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45, x, 1 MiB, 2 MiB\n").unwrap_err();
        assert!(err.to_string().contains("invalid GPU index 'x'"), "{err}");
    }

    #[test]
    fn a_huge_bad_value_is_quoted_to_80_characters() {
        // Under the line cap, but far more than anyone should read in an error.
        let big = "9".repeat(60_000) + "x";
        for text in [
            format!("time,used,limit\n0,{big},2\n"),
            format!("time,used,limit\n{big},1,2\n"),
            format!("time,used,limit\n0,1,{big}\n"),
            format!("time,used,limit\n{big}\n"),
            format!("{big}\n"),
        ] {
            for fast in [true, false] {
                let e = parse_with(&text, fast).unwrap_err().to_string();
                assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..300]);
                assert!(e.contains("(60001 characters)"), "{e}");
            }
        }
    }

    #[test]
    fn a_line_over_64_kib_is_refused_without_echo() {
        let long = format!(
            "time,used,limit\n0,1,2\n1,{},2\n",
            "1".repeat(MAX_LINE_BYTES)
        );
        for fast in [true, false] {
            let e = parse_with(&long, fast).unwrap_err();
            assert_eq!(e, line_too_long(3));
            assert!(e.to_string().len() < 100, "{e}");
        }
        let mut fits = format!(
            "time,used,limit\n0,1,2\n1,1,2{}",
            " ".repeat(MAX_LINE_BYTES - 5)
        );
        fits.push('\n');
        assert_eq!(parse(&fits).unwrap().samples.len(), 2);
    }

    #[test]
    fn datetime_edge_cases() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_time("1970-01-01T01:00:00+01:00"), Some(0.0));
        assert_eq!(parse_time("2000-03-01 00:00:00"), Some(951_868_800.0));
        assert_eq!(parse_time("2024-13-01T00:00:00Z"), None);
        // jiff's calendar: leap days where they exist, none where they do not.
        assert_eq!(parse_time("2000-02-29T00:00:00Z"), Some(951_782_400.0));
        assert_eq!(parse_time("2100-02-29T00:00:00Z"), None);
        assert_eq!(parse_time("2024-04-31T00:00:00Z"), None);
        assert_eq!(parse_time("2016-12-31T23:59:60Z"), Some(1_483_228_800.0));
        assert_eq!(parse_time("2024-01-01T00:00:00Q"), None);
        assert_eq!(parse_time("12.25"), Some(12.25));
        for text in [
            "0.1",
            "0.30",
            "123456.789",
            "7",
            "1705314225.123",
            "999999999999.9",
        ] {
            assert_eq!(parse_time(text), text.parse::<f64>().ok(), "{text}");
        }
        // Beyond 1e12 s either way: refused, so no coordinate of the report is NaN.
        for text in ["99999999999999.9", "1e300", "-1e300", "1000000000001"] {
            assert_eq!(parse_time(text), None, "{text}");
        }
        assert_eq!(parse_time("1.2.3"), None);
        assert_eq!(parse_time("."), None);
        assert_eq!(parse_time("-2.5"), Some(-2.5));
        assert_eq!(parse_time("1e3"), Some(1000.0));
    }

    #[test]
    fn digit_runs_match_a_byte_loop() {
        for text in [
            "",
            "x",
            "0",
            "7,",
            "12345678",
            "123456789",
            "1234567890123456789",
            "98765432109876543210",
            "00000000000000000042 MiB",
            "4096 MiB",
            "86399.99,",
            "1705314225123",
            "12345678\n9",
            "1234567/",
            "12:",
        ] {
            let b = text.as_bytes();
            for start in 0..=b.len() {
                let n = b
                    .get(start..)
                    .unwrap()
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                let v = b[start..start + n].iter().fold(0u64, |v, &c| {
                    v.wrapping_mul(10).wrapping_add(u64::from(c - b'0'))
                });
                assert_eq!(
                    digit_run(b, start),
                    (v, n, start + n),
                    "{text:?} at {start}"
                );
            }
        }
    }

    /// Tokens for data fields: the shapes the fast path reads and the ones it must
    /// leave to the general parser.
    const FIELDS: &[&str] = &[
        "0",
        "12.5",
        "7",
        " 7 ",
        "\t8\r",
        "\"3\"",
        "1 MiB",
        "1234 MiB",
        "2GiB",
        "",
        " ",
        "inf",
        "MAX",
        "none",
        "-2",
        "1e3",
        "1.2.3",
        ".",
        "5.",
        ".5",
        "0.1234567890123456",
        "123456789012345",
        "1234567890123456",
        "18446744073709551615",
        "18446744073709551616",
        "000000000000000000000001",
        "2024-01-15T10:23:45.5Z",
        "2024-01-15T12:23:46.5+02:00",
        "2024/01/15 10:23:45.123",
        "2024/01/15 10:23:45.1234567890123456789",
        "gpu0",
        "disk:/data",
        " cgroup_memory ",
        "cgroup_memory",
        "cgroup_memory\"",
        "x",
        "\u{a0}5",
        "5\u{3000}",
        "é",
        "#",
        "0x10",
        "1_000",
    ];

    const HEADERS: &[&str] = &[
        "time,used,limit",
        "time,used,limit,resource",
        "resource,time,used,limit,extra",
        "t, used [MiB], limit [MiB], name",
        "timestamp, index, memory.used [MiB], memory.total [MiB]",
        "index,timestamp,memory.used [MiB],memory.total [MiB],name",
    ];

    fn text_from(header: usize, lines: &[(Vec<usize>, u8)]) -> String {
        let mut text = format!("# lead_s: 30\n{}\n", HEADERS[header % HEADERS.len()]);
        for (fields, shape) in lines {
            let line = fields
                .iter()
                .map(|&f| FIELDS[f % FIELDS.len()])
                .collect::<Vec<_>>()
                .join(",");
            match shape % 8 {
                0 => text.push('\n'),
                1 => text.push_str("# resource: swap\n"),
                2 => text.push_str(&format!("{line}\r\n")),
                3 => text.push_str(&format!("  {line}\n")),
                _ => text.push_str(&format!("{line}\n")),
            }
        }
        text
    }

    #[test]
    fn fast_path_agrees_on_common_lines() {
        let text = "resource,time,used,limit\n\
            cgroup_memory,0.00,8589934592,68719476736\n\
            cgroup_memory,0.01,8592619601,68719476736\r\n\
            \n\
            cgroup_memory ,0.02 , 8592619602,\n\
            swap,1.5,1 MiB,max\n\
            cgroup_memory,2024-01-15T10:23:45.5Z,3,4,extra,fields\n\
            cgroup_memory,3,4,5";
        let fast = parse_with(text, true).unwrap();
        assert_eq!(fast, parse_with(text, false).unwrap());
        assert_eq!(fast.samples.len(), 6);
        assert_eq!(fast.resources, vec!["cgroup_memory", "swap"]);
        assert_eq!(fast.samples[2].limit, u64::MAX);
        assert_eq!(fast.samples[3].used, 1 << 20);
        // More fields than the header has columns beyond 32 are fine too.
        let wide: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
        let mut text = wide.join(",").replace("c35", "time").replace("c36", "used");
        text = text.replace("c37", "limit") + "\n";
        let row: Vec<String> = (0..40).map(|i| (i * 10).to_string()).collect();
        text.push_str(&row.join(","));
        for fast in [true, false] {
            let t = parse_with(&text, fast).unwrap();
            assert_eq!(
                (t.samples[0].t_s, t.samples[0].used, t.samples[0].limit),
                (350.0, 360, 370)
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn fast_path_gives_the_general_parsers_trace_or_error(
            header in 0usize..64,
            lines in proptest::collection::vec(
                (proptest::collection::vec(0usize..1000, 1..7), 0u8..=255),
                0..12,
            ),
        ) {
            let text = text_from(header, &lines);
            proptest::prop_assert_eq!(parse_with(&text, true), parse_with(&text, false), "{:?}", text);
            // Each line on its own too, as the first error ends a parse.
            for line in &lines {
                let text = text_from(header, std::slice::from_ref(line));
                proptest::prop_assert_eq!(parse_with(&text, true), parse_with(&text, false), "{:?}", text);
            }
        }
    }
}
