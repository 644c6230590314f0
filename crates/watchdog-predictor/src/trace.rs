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
//! [`TraceError`] with its 1-based line number and what was expected.

use watchdog_types::ResourceKind;
use watchdog_types::units::parse_size;

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
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Time of the first sample (the origin of replay times), 0 when empty.
    pub fn start_s(&self) -> f64 {
        self.samples.first().map_or(0.0, |s| s.t_s)
    }
}

/// Why a trace could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// No header line at all.
    #[error(
        "empty trace: expected a CSV header naming time, used and limit (or nvidia-smi's timestamp, index, memory.used, memory.total)"
    )]
    Empty,
    /// A line that does not have the expected shape.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What was found and what was expected.
        message: String,
    },
}

/// The resource kind a trace's resource name stands for, from the names the
/// watchdog uses (`host_memory`, `swap`, `cgroup_memory`, `tree_memory`,
/// `disk:/path`, `inodes:/path`, `runtime`, `gpu0`); anything else is taken as
/// cgroup memory.
pub fn kind_for_name(name: &str) -> ResourceKind {
    let n = name.trim().to_ascii_lowercase();
    if n.starts_with("gpu") {
        ResourceKind::GpuMemory
    } else if n.starts_with("disk") || n.starts_with("tmpfs") || n.starts_with("shm") {
        ResourceKind::DiskBytes
    } else if n.starts_with("inode") {
        ResourceKind::DiskInodes
    } else if n.starts_with("runtime") {
        ResourceKind::Runtime
    } else if n.starts_with("swap") {
        ResourceKind::Swap
    } else if n.starts_with("host") {
        ResourceKind::HostMemory
    } else if n.starts_with("tree") {
        ResourceKind::TreeMemory
    } else {
        ResourceKind::CgroupMemory
    }
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
            message: format!("found header '{}': {expected}", line.trim()),
        }),
    }
}

/// Parses a trace in either format.
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    let mut meta = Vec::new();
    let mut header: Option<(Columns, TraceFormat)> = None;
    let mut resources: Vec<String> = Vec::new();
    let mut samples = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some((k, v)) = comment.split_once(':') {
                let k = k.trim();
                if !k.is_empty() && !k.contains(' ') {
                    meta.push((k.to_string(), v.trim().to_string()));
                }
            }
            continue;
        }
        let Some((cols, _)) = &header else {
            header = Some(parse_header(line, lineno)?);
            continue;
        };
        // Up to MAX_FIELDS fields on the stack: no allocation per line.
        let mut fields = [""; MAX_FIELDS];
        let mut n_fields = 0usize;
        for f in line.split(',') {
            if let Some(slot) = fields.get_mut(n_fields) {
                *slot = f.trim().trim_matches('"');
            }
            n_fields += 1;
        }
        if n_fields < cols.width {
            return Err(TraceError::Malformed {
                line: lineno,
                message: format!(
                    "found {n_fields} fields in '{line}': expected {} as in the header",
                    cols.width
                ),
            });
        }
        let field = |c: usize| fields.get(c).copied().unwrap_or("");
        let t_s = parse_time(field(cols.time)).ok_or_else(|| TraceError::Malformed {
            line: lineno,
            message: format!(
                "invalid time '{}': expected seconds (e.g. 12.5) or a timestamp like 2024-01-15T10:23:45.123Z or 2024/01/15 10:23:45.123",
                field(cols.time)
            ),
        })?;
        let used =
            parse_amount(field(cols.used), cols.used_scale).ok_or_else(|| TraceError::Malformed {
                line: lineno,
                message: format!(
                    "invalid used '{}': expected a non-negative number with an optional unit (e.g. 1234 or 1234 MiB)",
                    field(cols.used)
                ),
            })?;
        let limit = parse_limit(field(cols.limit), cols.limit_scale).ok_or_else(|| {
            TraceError::Malformed {
                line: lineno,
                message: format!(
                    "invalid limit '{}': expected a non-negative number with an optional unit, or empty/inf/max for unlimited",
                    field(cols.limit)
                ),
            }
        })?;
        let resource = if let Some(ix) = cols.index {
            let idx = field(ix);
            if idx.is_empty() || !idx.chars().all(|c| c.is_ascii_digit()) {
                return Err(TraceError::Malformed {
                    line: lineno,
                    message: format!("invalid GPU index '{idx}': expected a number like 0"),
                });
            }
            intern(
                &mut resources,
                |r| r.strip_prefix("gpu") == Some(idx),
                || format!("gpu{idx}"),
            )
        } else if let Some(rc) = cols.resource {
            let r = field(rc);
            if r.is_empty() {
                return Err(TraceError::Malformed {
                    line: lineno,
                    message: "empty resource: expected a name like cgroup_memory or disk:/data"
                        .to_string(),
                });
            }
            intern(&mut resources, |x| x == r, || r.to_string())
        } else {
            let default = meta
                .iter()
                .find(|(k, _)| k == "resource")
                .map_or("memory", |(_, v)| v.as_str());
            intern(&mut resources, |x| x == default, || default.to_string())
        };
        samples.push(TraceSample {
            resource,
            t_s,
            used,
            limit,
        });
    }
    let Some((_, format)) = header else {
        return Err(TraceError::Empty);
    };
    Ok(Trace {
        format,
        resources,
        samples,
        meta,
    })
}

/// Most fields a data line may have (more are counted, not kept).
const MAX_FIELDS: usize = 32;

/// Index of the resource `is` matches, adding `make()` when there is none.
fn intern(
    resources: &mut Vec<String>,
    is: impl Fn(&str) -> bool,
    make: impl FnOnce() -> String,
) -> usize {
    if let Some(p) = resources.iter().position(|r| is(r)) {
        return p;
    }
    resources.push(make());
    resources.len() - 1
}

fn parse_amount(s: &str, scale: f64) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) && scale == 1.0 {
        return s.parse().ok();
    }
    if let Ok(v) = s.parse::<f64>() {
        let v = v * scale;
        return (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then(|| v.round() as u64);
    }
    parse_size(s).ok()
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

/// Seconds from a number or a timestamp (see the module doc).
pub fn parse_time(s: &str) -> Option<f64> {
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
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let mut mantissa: u64 = 0;
    let mut n_digits = 0usize;
    let mut frac_digits: Option<usize> = None;
    for b in s.bytes() {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                n_digits += 1;
                if let Some(f) = frac_digits.as_mut() {
                    *f += 1;
                }
            }
            b'.' if frac_digits.is_none() => frac_digits = Some(0),
            _ => return None,
        }
        if n_digits > 15 {
            return None;
        }
    }
    if n_digits == 0 {
        return None;
    }
    let scale = POW10.get(frac_digits.unwrap_or(0))?;
    Some(mantissa as f64 / scale)
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
        frac = format!("0.{ds}").parse().ok()?;
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
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Some(secs as f64 + frac)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
    fn datetime_edge_cases() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_time("1970-01-01T01:00:00+01:00"), Some(0.0));
        assert_eq!(parse_time("2000-03-01 00:00:00"), Some(951_868_800.0));
        assert_eq!(parse_time("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_time("2024-01-01T00:00:00Q"), None);
        assert_eq!(parse_time("12.25"), Some(12.25));
        for text in [
            "0.1",
            "0.30",
            "123456.789",
            "7",
            "1705314225.123",
            "99999999999999.9",
        ] {
            assert_eq!(parse_time(text), text.parse::<f64>().ok(), "{text}");
        }
        assert_eq!(parse_time("1.2.3"), None);
        assert_eq!(parse_time("."), None);
        assert_eq!(parse_time("-2.5"), Some(-2.5));
        assert_eq!(parse_time("1e3"), Some(1000.0));
    }

    #[test]
    fn kinds_from_names() {
        assert_eq!(kind_for_name("gpu3"), ResourceKind::GpuMemory);
        assert_eq!(kind_for_name("disk:/mnt/x"), ResourceKind::DiskBytes);
        assert_eq!(kind_for_name("inodes:/"), ResourceKind::DiskInodes);
        assert_eq!(kind_for_name("runtime"), ResourceKind::Runtime);
        assert_eq!(kind_for_name("cgroup_memory"), ResourceKind::CgroupMemory);
        assert_eq!(kind_for_name("whatever"), ResourceKind::CgroupMemory);
    }
}
