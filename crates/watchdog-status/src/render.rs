//! What `watchdog status` prints: [`text`] for people, [`json`] for programs (`--json`,
//! pretty-printed). Pure: the status carries its own clock (`time_unix`), so the same
//! status always renders the same way.
//!
//! One block per run: a line saying whose run it is and how its watch is going, then one
//! row per resource, the most urgent first (soonest to run out, then fullest). Every text
//! that came from a process (command, user, resource name) is printed with its control
//! characters escaped, so a hostile command line cannot rewrite the terminal.

use std::cmp::Ordering;
use std::fmt::Write as _;

use watchdog_types::Unit;
use watchdog_types::status::{ResourceStatus, TargetStatus, WatchStatus};
use watchdog_types::units::{format_bytes, format_duration_s, printable};

/// The status as people read it, each line ending in a newline.
pub fn text(status: &WatchStatus) -> String {
    let mut out = format!(
        "watchdog PID {} ({}), sampling every {}: ",
        status.watchdog_pid,
        printable(&status.mode),
        format_duration_s(status.interval_s)
    );
    match status.targets.len() {
        0 => out.push_str("no runs are watched\n"),
        1 => out.push_str("1 run watched\n"),
        n => {
            let _ = writeln!(out, "{n} runs watched");
        }
    }
    for target in &status.targets {
        out.push('\n');
        target_block(&mut out, target, status.time_unix);
    }
    out
}

/// The status as pretty-printed JSON (the [`WatchStatus`] fields, as the socket sends
/// them), ending in a newline.
pub fn json(status: &WatchStatus) -> String {
    let mut out = serde_json::to_string_pretty(status).unwrap_or_else(|e| {
        // Plain strings and numbers cannot fail to serialize; say so rather than panic.
        format!("{{\"error\": {:?}}}", e.to_string())
    });
    out.push('\n');
    out
}

/// `1 alert`, `2 alerts`.
fn count(n: u64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

fn target_block(out: &mut String, t: &TargetStatus, now_unix: f64) {
    let mut facts = Vec::new();
    if let Some(job) = t.slurm_job_id {
        facts.push(match &t.slurm_step {
            Some(step) => format!("slurm job {job} step {}", printable(step)),
            None => format!("slurm job {job}"),
        });
    }
    if let Some(rule) = &t.rule {
        facts.push(format!("rule \"{}\"", printable(rule)));
    }
    if t.since_unix > 0.0 {
        facts.push(format!(
            "watched {}",
            format_duration_s((now_unix - t.since_unix).max(0.0))
        ));
    }
    facts.push(format!("lead {}", format_duration_s(t.lead_s)));
    facts.push(count(t.alerts_sent, "alert"));
    facts.push(count(t.checkpoints_acknowledged, "checkpoint"));
    if t.samples_dropped > 0 {
        facts.push(format!("{} dropped", count(t.samples_dropped, "sample")));
    }
    let _ = writeln!(
        out,
        "PID {}  {}  {}  ({})",
        t.pid,
        printable(&t.user),
        printable(&t.command),
        facts.join(", ")
    );
    if t.resources.is_empty() {
        out.push_str("  no resources sampled yet\n");
        return;
    }
    let mut resources: Vec<&ResourceStatus> = t.resources.iter().collect();
    resources.sort_by(|a, b| urgency(a, b));
    let mut rows = vec![[
        "resource".to_string(),
        "used / limit".to_string(),
        "use".to_string(),
        "trend".to_string(),
        "left".to_string(),
        "alerts".to_string(),
    ]];
    rows.extend(resources.iter().map(|r| row(r)));
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::from(" ");
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            // Names left-aligned, numbers right-aligned.
            let _ = if i == 0 {
                write!(line, " {cell:<w$}")
            } else {
                write!(line, "  {cell:>w$}")
            };
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Most urgent first: the soonest predicted exhaustion, then the fullest, then by name.
fn urgency(a: &ResourceStatus, b: &ResourceStatus) -> Ordering {
    let left = |r: &ResourceStatus| {
        r.seconds_left
            .filter(|s| !s.is_nan())
            .unwrap_or(f64::INFINITY)
    };
    left(a)
        .total_cmp(&left(b))
        .then_with(|| fraction(b).total_cmp(&fraction(a)))
        .then_with(|| a.name.cmp(&b.name))
}

/// How full the resource is, 0 when it has no limit.
fn fraction(r: &ResourceStatus) -> f64 {
    match r.limit {
        Some(limit) if limit > 0 => r.used as f64 / limit as f64,
        _ => 0.0,
    }
}

/// An amount in the resource's unit: `1.50 GiB`, `12000 inodes`, `3m05s`.
fn amount(unit: Unit, v: u64) -> String {
    match unit {
        Unit::Bytes => format_bytes(v),
        Unit::Count => v.to_string(),
        Unit::Millis => format_duration_s(v as f64 / 1e3),
    }
}

/// A non-negative rate with two decimals, or in scientific notation when huge.
fn plain(v: f64) -> String {
    if v < 1e9 {
        format!("{v:.2}")
    } else {
        format!("{v:.2e}")
    }
}

fn row(r: &ResourceStatus) -> [String; 6] {
    let (limit, share) = match r.limit {
        Some(limit) => (
            amount(r.unit, limit),
            if limit > 0 {
                format!("{:.1}%", fraction(r) * 100.0)
            } else {
                "-".to_string()
            },
        ),
        None => ("unlimited".to_string(), "-".to_string()),
    };
    let trend = r.trend_per_s;
    let sign = if trend > 0.0 {
        "+"
    } else if trend < 0.0 {
        "-"
    } else {
        ""
    };
    let per_s = if !trend.is_finite() {
        "-".to_string()
    } else {
        match r.unit {
            // `as u64` saturates: a huge trend prints as 16 EiB/s, never wraps.
            Unit::Bytes => format!("{sign}{}/s", format_bytes(trend.abs() as u64)),
            Unit::Count => format!("{sign}{}/s", plain(trend.abs())),
            Unit::Millis => format!("{sign}{}s/s", plain(trend.abs() / 1e3)),
        }
    };
    let left = match r.seconds_left {
        Some(s) if s.is_finite() => format_duration_s(s.max(0.0)),
        _ => "-".to_string(),
    };
    [
        printable(&r.name).into_owned(),
        format!("{} / {limit}", amount(r.unit, r.used)),
        share,
        per_s,
        left,
        r.alerts.to_string(),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_types::ResourceKind;

    fn alice() -> TargetStatus {
        let mut mem = ResourceStatus::reading(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            3 << 30,
            Some(4 << 30),
        );
        mem.trend_per_s = 12.0 * 1024.0 * 1024.0;
        mem.seconds_left = Some(68.0);
        mem.alerts = 1;
        let mut disk = ResourceStatus::reading(
            "disk:/data",
            ResourceKind::DiskBytes,
            900 << 30,
            Some(1000 << 30),
        );
        disk.trend_per_s = -2048.0;
        let mut runtime =
            ResourceStatus::reading("runtime", ResourceKind::Runtime, 192_000, Some(3_600_000));
        runtime.trend_per_s = 1000.0;
        runtime.seconds_left = Some(3408.0);
        TargetStatus {
            pid: 4242,
            uid: 1000,
            user: "alice".into(),
            command: "python train.py".into(),
            rule: Some("training".into()),
            slurm_job_id: None,
            slurm_step: None,
            since_unix: 1_000.0,
            lead_s: 30.0,
            request_file: "/run/watchdog/4242.json".into(),
            alerts_sent: 1,
            checkpoints_acknowledged: 1,
            checkpoint_seconds_total: 12.0,
            samples_dropped: 0,
            resources: vec![
                disk,
                runtime,
                mem,
                ResourceStatus::reading("tree_memory", ResourceKind::TreeMemory, 900, None),
            ],
        }
    }

    fn status(targets: Vec<TargetStatus>) -> WatchStatus {
        WatchStatus {
            watchdog_pid: 812,
            mode: "daemon".into(),
            time_unix: 1_192.0,
            interval_s: 0.1,
            targets,
        }
    }

    #[test]
    fn a_run_renders_as_one_block_most_urgent_first() {
        let got = text(&status(vec![alice()]));
        let want = "\
watchdog PID 812 (daemon), sampling every 100ms: 1 run watched

PID 4242  alice  python train.py  (rule \"training\", watched 3m12s, lead 30.0s, 1 alert, 1 checkpoint)
  resource               used / limit    use       trend   left  alerts
  cgroup_memory     3.00 GiB / 4.00 GiB  75.0%  +12.00 MiB/s  1m08s       1
  runtime                 3m12s / 1h00m   5.3%     +1.00s/s  56m48s      0
  disk:/data        900.00 GiB / 1000.00 GiB  90.0%  -2.00 KiB/s      -       0
  tree_memory           900 B / unlimited      -         0 B/s      -       0
";
        // Column widths are computed per block; compare the cells, then the alignment.
        let cells = |s: &str| -> Vec<Vec<String>> {
            s.lines()
                .map(|l| {
                    l.split("  ")
                        .map(str::trim)
                        .filter(|c| !c.is_empty())
                        .map(String::from)
                        .collect()
                })
                .collect()
        };
        assert_eq!(cells(&got), cells(want), "\n{got}");
        let rows: Vec<&str> = got.lines().skip(3).collect();
        let width = rows[0].chars().count();
        assert!(rows.iter().all(|r| r.chars().count() == width), "\n{got}");
    }

    #[test]
    fn nothing_watched_says_so() {
        assert_eq!(
            text(&status(vec![])),
            "watchdog PID 812 (daemon), sampling every 100ms: no runs are watched\n"
        );
    }

    #[test]
    fn blocks_are_separated_and_counted() {
        let mut bob = alice();
        bob.pid = 5;
        bob.user = "bob".into();
        bob.rule = None;
        bob.alerts_sent = 2;
        bob.checkpoints_acknowledged = 0;
        bob.samples_dropped = 1;
        bob.resources.clear();
        let got = text(&status(vec![alice(), bob]));
        assert!(got.contains(": 2 runs watched\n"), "{got}");
        assert!(
            got.contains("\n\nPID 5  bob  python train.py  (watched 3m12s, lead 30.0s, 2 alerts, 0 checkpoints, 1 sample dropped)\n  no resources sampled yet\n"),
            "{got}"
        );
    }

    #[test]
    fn hostile_text_stays_on_its_line() {
        let mut t = alice();
        t.command = "python\n\u{1b}[2Jevil".into();
        t.user = "a\rb".into();
        t.resources[0].name = "disk:/x\ny".into();
        let got = text(&status(vec![t]));
        assert_eq!(got.lines().count(), 8, "{got}");
        assert!(!got.contains('\u{1b}') && !got.contains('\r'), "{got:?}");
        assert!(got.contains("python\\n\\u{1b}[2Jevil"), "{got}");
    }

    #[test]
    fn non_finite_and_extreme_numbers_render() {
        let mut t = alice();
        t.resources[0].trend_per_s = f64::NAN;
        t.resources[0].seconds_left = Some(f64::INFINITY);
        t.resources[0].trend_per_s = f64::MAX; // disk: bytes
        t.resources[1].trend_per_s = -f64::MAX; // runtime: milliseconds
        t.resources[1].limit = Some(0);
        t.resources[3].trend_per_s = f64::INFINITY;
        let got = text(&status(vec![t]));
        assert!(got.contains("+16.00 EiB/s"), "{got}");
        assert!(got.contains("-1.80e305s/s"), "{got}");
        assert!(got.lines().all(|l| l.len() < 160), "{got}");
    }

    #[test]
    fn json_is_the_status_pretty_printed() {
        let s = status(vec![alice()]);
        let out = json(&s);
        assert!(out.starts_with("{\n  \"watchdog_pid\": 812,"), "{out}");
        assert!(out.ends_with("}\n"));
        let back: WatchStatus = serde_json::from_str(&out).unwrap();
        assert_eq!(back, s);
    }
}
