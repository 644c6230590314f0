//! The Prometheus text exposition format (version 0.0.4) of one [`WatchStatus`].
//!
//! Written by hand rather than through `prometheus-client`: that crate encodes OpenMetrics
//! 1.0 (its own content type, a `# EOF` trailer) and is built around live metric objects
//! updated in place, while the watch loop hands us a finished snapshot to print once per
//! scrape. Printing a snapshot is a loop per family; what needs care is here in one place:
//! base units (bytes, seconds), `_total` on counters, a `# HELP` and `# TYPE` for every family,
//! every series of a family printed together, and label values escaped (users choose their
//! paths and user names, and a `"` or newline must not break the scrape).
//!
//! The families and why each has its name, unit and labels are listed in `docs/metrics.md`.

use std::fmt::Write as _;

use watchdog_types::Unit;
use watchdog_types::status::{ResourceStatus, TargetStatus, WatchStatus};

/// The content type of what [`render`] returns, for the HTTP `Content-Type` header.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text exposition of `status`: one family per figure, every series labelled
/// with the target's `pid`, `user` and `rule` (empty in single-run mode), and a resource's
/// series also with `resource` (its name) and `kind`.
pub fn render(status: &WatchStatus) -> String {
    let mut out = Exposition::default();
    out.family(
        "watchdog_build_info",
        "gauge",
        "Always 1; the version of the watchdog serving these metrics.",
    );
    out.sample(
        "watchdog_build_info",
        &[("version", env!("CARGO_PKG_VERSION").to_string())],
        1.0,
    );
    out.family("watchdog_targets", "gauge", "Runs being watched.");
    out.sample("watchdog_targets", &[], status.targets.len() as f64);
    out.family(
        "watchdog_sampling_interval_seconds",
        "gauge",
        "Period at which the watchdog samples every resource.",
    );
    out.sample("watchdog_sampling_interval_seconds", &[], status.interval_s);

    let targets = &status.targets;
    out.per_target(
        targets,
        "watchdog_target_start_time_seconds",
        "gauge",
        "Unix time the watch of the run began.",
        |t| Some(t.since_unix),
    );
    out.per_target(
        targets,
        "watchdog_target_lead_seconds",
        "gauge",
        "How long before predicted exhaustion the run is asked to checkpoint (raised by slow checkpoints).",
        |t| Some(t.lead_s),
    );
    out.per_target(
        targets,
        "watchdog_alerts_total",
        "counter",
        "Checkpoint requests (alerts) sent to the run.",
        |t| Some(t.alerts_sent as f64),
    );
    out.per_target(
        targets,
        "watchdog_checkpoints_acknowledged_total",
        "counter",
        "Checkpoints the run acknowledged.",
        |t| Some(t.checkpoints_acknowledged as f64),
    );
    out.per_target(
        targets,
        "watchdog_samples_dropped_total",
        "counter",
        "Samples the sampler dropped because the watch loop fell behind.",
        |t| Some(t.samples_dropped as f64),
    );
    // A summary without quantiles: only `_sum` and `_count`, so `rate(_sum) / rate(_count)`
    // gives the mean checkpoint duration over any window.
    let summary = "watchdog_checkpoint_duration_seconds";
    out.family(
        summary,
        "summary",
        "Time from a checkpoint request to its acknowledgment.",
    );
    for t in targets {
        let labels = target_labels(t);
        out.sample(
            &format!("{summary}_sum"),
            &labels,
            t.checkpoint_seconds_total,
        );
        out.sample(
            &format!("{summary}_count"),
            &labels,
            t.checkpoints_acknowledged as f64,
        );
    }

    for (unit, used, limit, help_what) in [
        (
            Unit::Bytes,
            "watchdog_resource_used_bytes",
            "watchdog_resource_limit_bytes",
            "bytes",
        ),
        (
            Unit::Count,
            "watchdog_resource_used_inodes",
            "watchdog_resource_limit_inodes",
            "inodes",
        ),
        (
            Unit::Millis,
            "watchdog_runtime_seconds",
            "watchdog_runtime_limit_seconds",
            "wall-clock seconds",
        ),
    ] {
        out.per_resource(
            targets,
            used,
            "gauge",
            &format!("Last reading of a resource counted in {help_what}."),
            |r| (r.unit == unit).then(|| in_base_unit(r.unit, r.used as f64)),
        );
        out.per_resource(
            targets,
            limit,
            "gauge",
            &format!("Limit of a resource counted in {help_what}; absent when unlimited."),
            |r| {
                r.limit
                    .filter(|_| r.unit == unit)
                    .map(|l| in_base_unit(r.unit, l as f64))
            },
        );
    }
    // Runtime grows one second per second by definition: no growth family for it.
    for (unit, name, help_what) in [
        (
            Unit::Bytes,
            "watchdog_resource_growth_bytes_per_second",
            "bytes",
        ),
        (
            Unit::Count,
            "watchdog_resource_growth_inodes_per_second",
            "inodes",
        ),
    ] {
        out.per_resource(
            targets,
            name,
            "gauge",
            &format!(
                "Growth of a resource counted in {help_what} that the prediction rests on (negative when falling)."
            ),
            |r| (r.unit == unit).then_some(r.trend_per_s),
        );
    }
    out.per_resource(
        targets,
        "watchdog_resource_exhaustion_seconds",
        "gauge",
        "Predicted seconds until the resource reaches its limit; absent when the trend does not reach it.",
        |r| r.seconds_left.filter(|s| s.is_finite()),
    );
    out.per_resource(
        targets,
        "watchdog_resource_alerts_total",
        "counter",
        "Alerts this resource raised.",
        |r| Some(r.alerts as f64),
    );
    out.per_resource(
        targets,
        "watchdog_resource_sample_rate_hz",
        "gauge",
        "Rate the resource is sampled at now, samples per second (1 / interval while it approaches its limit, down to 1 / max_interval while far).",
        |r| r.sample_rate_hz,
    );
    out.per_resource(
        targets,
        "watchdog_resource_samples_total",
        "counter",
        "Samples taken of the resource.",
        |r| Some(r.samples as f64),
    );
    out.text
}

/// A reading in the base unit of its family: milliseconds become seconds.
fn in_base_unit(unit: Unit, value: f64) -> f64 {
    match unit {
        Unit::Millis => value / 1000.0,
        Unit::Bytes | Unit::Count => value,
    }
}

/// The labels of every series about target `t`; empty `rule` in single-run mode; a run in
/// a SLURM job (the service) also has `slurm_job_id`, the cluster-wide name of its job.
fn target_labels(t: &TargetStatus) -> Vec<(&'static str, String)> {
    let mut labels = vec![
        ("pid", t.pid.to_string()),
        ("user", t.user.clone()),
        ("rule", t.rule.clone().unwrap_or_default()),
    ];
    if let Some(job) = t.slurm_job_id {
        labels.push(("slurm_job_id", job.to_string()));
    }
    labels
}

/// The text being built.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// The `# HELP` and `# TYPE` lines of a family.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample line: `name{key="value",...} value`.
    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        self.text.push_str(name);
        for (i, (key, value)) in labels.iter().enumerate() {
            let sep = if i == 0 { '{' } else { ',' };
            let _ = write!(self.text, "{sep}{key}=\"{}\"", escape_label_value(value));
        }
        if !labels.is_empty() {
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", format_value(value));
    }

    /// A family with one series per target, for the targets where `value` has one.
    fn per_target(
        &mut self,
        targets: &[TargetStatus],
        name: &str,
        kind: &str,
        help: &str,
        value: impl Fn(&TargetStatus) -> Option<f64>,
    ) {
        self.family(name, kind, help);
        for t in targets {
            if let Some(v) = value(t) {
                self.sample(name, &target_labels(t), v);
            }
        }
    }

    /// A family with one series per resource of every target, for the resources where
    /// `value` has one.
    fn per_resource(
        &mut self,
        targets: &[TargetStatus],
        name: &str,
        kind: &str,
        help: &str,
        value: impl Fn(&ResourceStatus) -> Option<f64>,
    ) {
        self.family(name, kind, help);
        for t in targets {
            for r in &t.resources {
                if let Some(v) = value(r) {
                    let mut labels = target_labels(t);
                    labels.push(("resource", r.name.clone()));
                    labels.push(("kind", r.kind.as_str().to_string()));
                    self.sample(name, &labels, v);
                }
            }
        }
    }
}

/// A sample value as Prometheus reads it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Rust's shortest round-trip form, which never uses an exponent.
        format!("{v}")
    }
}

/// A label value escaped as the text format requires: `\` as `\\`, `"` as `\"`, newline as `\n`.
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A `# HELP` text escaped as the text format requires: `\` as `\\`, newline as `\n`.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchdog_types::ResourceKind;

    fn target(pid: u32, user: &str, resources: Vec<ResourceStatus>) -> TargetStatus {
        TargetStatus {
            pid,
            uid: 1000,
            user: user.to_string(),
            command: "python3 train.py".to_string(),
            rule: None,
            slurm_job_id: None,
            slurm_step: None,
            since_unix: 1_700_000_000.0,
            lead_s: 60.0,
            request_file: "/tmp/req".to_string(),
            alerts_sent: 0,
            checkpoints_acknowledged: 0,
            checkpoint_seconds_total: 0.0,
            samples_dropped: 0,
            resources,
        }
    }

    fn status(targets: Vec<TargetStatus>) -> WatchStatus {
        WatchStatus {
            watchdog_pid: 1,
            mode: "daemon".to_string(),
            time_unix: 1_700_000_100.0,
            interval_s: 0.1,
            targets,
        }
    }

    /// The sample lines of `text` (no comments), in order.
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn empty_status_has_every_family_and_only_the_global_samples() {
        let text = render(&WatchStatus::default());
        assert_eq!(
            samples(&text),
            [
                format!(
                    "watchdog_build_info{{version=\"{}\"}} 1",
                    env!("CARGO_PKG_VERSION")
                ),
                "watchdog_targets 0".to_string(),
                "watchdog_sampling_interval_seconds 0".to_string(),
            ]
        );
        let help = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(help, types);
        for name in [
            "watchdog_resource_used_bytes",
            "watchdog_resource_exhaustion_seconds",
            "watchdog_checkpoint_duration_seconds",
            "watchdog_alerts_total",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
        }
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        let mut t = target(
            7,
            "o\"brien",
            vec![ResourceStatus::reading(
                "disk:/data/a\\b\n\"c\"",
                ResourceKind::DiskBytes,
                5,
                Some(10),
            )],
        );
        t.rule = Some("gpu\\jobs".to_string());
        let text = render(&status(vec![t]));
        let line = samples(&text)
            .into_iter()
            .find(|l| l.starts_with("watchdog_resource_used_bytes{"))
            .unwrap_or_else(|| panic!("no used_bytes sample in:\n{text}"));
        assert_eq!(
            line,
            "watchdog_resource_used_bytes{pid=\"7\",user=\"o\\\"brien\",rule=\"gpu\\\\jobs\",\
             resource=\"disk:/data/a\\\\b\\n\\\"c\\\"\",kind=\"disk_bytes\"} 5"
        );
        // The newline in the path did not split the sample line.
        assert!(
            text.lines()
                .all(|l| l.starts_with('#') || l.starts_with("watchdog_"))
        );
    }

    #[test]
    fn each_resource_says_its_sample_rate_and_samples() {
        let mut r = ResourceStatus::reading("host_memory", ResourceKind::HostMemory, 5, Some(10));
        r.samples = 42;
        r.sample_rate_hz = Some(1.0 / 0.9375);
        let unsampled = ResourceStatus::reading("gpu0", ResourceKind::GpuMemory, 0, Some(10));
        let text = render(&status(vec![target(7, "alice", vec![r, unsampled])]));
        let lines = samples(&text);
        let labels =
            "pid=\"7\",user=\"alice\",rule=\"\",resource=\"host_memory\",kind=\"host_memory\"";
        assert!(
            lines.contains(
                &format!("watchdog_resource_sample_rate_hz{{{labels}}} 1.0666666666666667")
                    .as_str()
            ),
            "{text}"
        );
        assert!(
            lines.contains(&format!("watchdog_resource_samples_total{{{labels}}} 42").as_str()),
            "{text}"
        );
        // No rate known: no sample, as for a forecast.
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("watchdog_resource_sample_rate_hz") && l.contains("gpu0"))
        );
    }

    #[test]
    fn units_are_base_units_runtime_in_seconds() {
        let mut runtime =
            ResourceStatus::reading("runtime", ResourceKind::Runtime, 90_500, Some(3_600_000));
        runtime.seconds_left = Some(3509.5);
        runtime.trend_per_s = 1000.0;
        let mut inodes =
            ResourceStatus::reading("inodes:/data", ResourceKind::DiskInodes, 1200, Some(5000));
        inodes.trend_per_s = 2.5;
        let mut mem = ResourceStatus::reading(
            "cgroup_memory",
            ResourceKind::CgroupMemory,
            1 << 30,
            Some(2 << 30),
        );
        mem.trend_per_s = -4096.0;
        mem.alerts = 2;
        let mut t = target(42, "alice", vec![runtime, inodes, mem]);
        t.checkpoints_acknowledged = 2;
        t.checkpoint_seconds_total = 12.25;
        t.alerts_sent = 3;
        let text = render(&status(vec![t]));
        let lines = samples(&text);
        let has = |want: &str| {
            assert!(lines.contains(&want), "missing {want:?} in:\n{text}");
        };
        let l = "pid=\"42\",user=\"alice\",rule=\"\"";
        has(&format!(
            "watchdog_runtime_seconds{{{l},resource=\"runtime\",kind=\"runtime\"}} 90.5"
        ));
        has(&format!(
            "watchdog_runtime_limit_seconds{{{l},resource=\"runtime\",kind=\"runtime\"}} 3600"
        ));
        has(&format!(
            "watchdog_resource_exhaustion_seconds{{{l},resource=\"runtime\",kind=\"runtime\"}} 3509.5"
        ));
        has(&format!(
            "watchdog_resource_used_inodes{{{l},resource=\"inodes:/data\",kind=\"disk_inodes\"}} 1200"
        ));
        has(&format!(
            "watchdog_resource_growth_inodes_per_second{{{l},resource=\"inodes:/data\",kind=\"disk_inodes\"}} 2.5"
        ));
        has(&format!(
            "watchdog_resource_used_bytes{{{l},resource=\"cgroup_memory\",kind=\"cgroup_memory\"}} 1073741824"
        ));
        has(&format!(
            "watchdog_resource_growth_bytes_per_second{{{l},resource=\"cgroup_memory\",kind=\"cgroup_memory\"}} -4096"
        ));
        has(&format!(
            "watchdog_resource_alerts_total{{{l},resource=\"cgroup_memory\",kind=\"cgroup_memory\"}} 2"
        ));
        has(&format!("watchdog_alerts_total{{{l}}} 3"));
        has(&format!(
            "watchdog_checkpoint_duration_seconds_sum{{{l}}} 12.25"
        ));
        has(&format!(
            "watchdog_checkpoint_duration_seconds_count{{{l}}} 2"
        ));
        has(&format!("watchdog_target_lead_seconds{{{l}}} 60"));
        // Milliseconds never reach a byte or inode family, nor bytes a seconds family.
        assert!(!text.contains(
            "watchdog_resource_used_bytes{pid=\"42\",user=\"alice\",rule=\"\",resource=\"runtime\""
        ));
        assert!(!text.contains("watchdog_runtime_seconds{pid=\"42\",user=\"alice\",rule=\"\",resource=\"cgroup_memory\""));
        // Runtime has no growth family: it grows one second per second.
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("growth") && l.contains("runtime"))
        );
    }

    #[test]
    fn absent_seconds_left_and_limit_are_omitted_not_zero() {
        let mut cache =
            ResourceStatus::reading("cgroup_cache", ResourceKind::CgroupCache, 100, None);
        cache.seconds_left = None;
        let mut odd =
            ResourceStatus::reading("tree_memory", ResourceKind::TreeMemory, 100, Some(200));
        odd.seconds_left = Some(f64::INFINITY);
        let text = render(&status(vec![target(9, "bob", vec![cache, odd])]));
        assert!(
            !samples(&text)
                .iter()
                .any(|l| l.starts_with("watchdog_resource_exhaustion_seconds")),
            "{text}"
        );
        let limits: Vec<_> = samples(&text)
            .into_iter()
            .filter(|l| l.starts_with("watchdog_resource_limit_bytes"))
            .collect();
        assert_eq!(limits.len(), 1, "{limits:?}");
        assert!(limits[0].contains("resource=\"tree_memory\""));
    }

    #[test]
    fn every_family_is_contiguous_with_help_before_type_before_samples() {
        let a = target(
            1,
            "a",
            vec![ResourceStatus::reading(
                "swap",
                ResourceKind::Swap,
                1,
                Some(2),
            )],
        );
        let b = target(
            2,
            "b",
            vec![ResourceStatus::reading(
                "swap",
                ResourceKind::Swap,
                3,
                Some(4),
            )],
        );
        let text = render(&status(vec![a, b]));
        let mut seen: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default().to_string();
                assert!(!seen.contains(&name), "{name} declared twice");
                seen.push(name.clone());
                current = name;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(rest.starts_with(&format!("{current} ")), "{line}");
            } else {
                let metric = line.split(['{', ' ']).next().unwrap_or_default();
                let family = metric
                    .strip_suffix("_sum")
                    .or_else(|| metric.strip_suffix("_count"))
                    .filter(|f| *f == current)
                    .unwrap_or(metric);
                assert_eq!(family, current, "{line} outside its family");
            }
        }
    }

    #[test]
    fn values_print_as_prometheus_reads_them() {
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.1), "0.1");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(
            format_value(18_446_744_073_709_551_615u64 as f64),
            "18446744073709552000"
        );
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }
}
