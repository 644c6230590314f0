//! Scales, tick choices and tick labels for the report's axes.
//!
//! Time is seconds since the recording's start, labelled in seconds for short
//! recordings and `m:ss` (or `h:mm:ss`) for long ones. Values are labelled in the
//! resource's unit the way people read it: bytes with binary units on steps that
//! are powers of two (`256 MiB`, `1 GiB`), runtime in minutes, counts with `k`/`M`.

use watchdog_types::Unit;

/// A linear map from a data interval onto a pixel interval.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Scale {
    /// Maps `[d0, d1]` onto `[r0, r1]` (a zero-width domain is widened to 1).
    pub(crate) fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> Self {
        let d1 = if d1 - d0 > 1e-12 { d1 } else { d0 + 1.0 };
        Scale { d0, d1, r0, r1 }
    }

    pub(crate) fn map(&self, v: f64) -> f64 {
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }

    pub(crate) fn domain(&self) -> (f64, f64) {
        (self.d0, self.d1)
    }

    /// The pixel interval `(r0, r1)` it maps onto.
    pub(crate) fn range(&self) -> (f64, f64) {
        (self.r0, self.r1)
    }
}

/// Tick positions (in data units) of the time axis over `[t0, t1]`, and their step.
pub(crate) fn time_ticks(t0: f64, t1: f64, max_ticks: usize) -> (Vec<f64>, f64) {
    const STEPS: &[f64] = &[
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0,
        600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
    ];
    let span = (t1 - t0).max(1e-9);
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span / s <= max_ticks as f64)
        .unwrap_or(span / max_ticks as f64);
    (ticks_from(t0, t1, step), step)
}

/// Multiples of `step` within `[lo, hi]`.
fn ticks_from(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut k = (lo / step).ceil();
    // Guard against a float step that never reaches `hi`.
    while out.len() < 1000 {
        let v = k * step;
        if v > hi + step * 1e-9 {
            break;
        }
        out.push(v);
        k += 1.0;
    }
    out
}

/// Formats a time tick: seconds when the axis is short, `m:ss` or `h:mm:ss` when long.
pub(crate) fn format_time_tick(t: f64, step: f64, t_max: f64) -> String {
    if t_max.abs() < 120.0 || step < 1.0 {
        let decimals = if step >= 1.0 {
            0
        } else if step >= 0.1 {
            1
        } else {
            2
        };
        return format!("{t:.decimals$} s");
    }
    let neg = t < 0.0;
    let total = t.abs().round() as u64;
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    let sign = if neg { "-" } else { "" };
    if t_max.abs() >= 3600.0 {
        format!("{sign}{h}:{m:02}:{s:02}")
    } else {
        format!("{sign}{}:{s:02}", total / 60)
    }
}

/// Value ticks over `[0, top]` for the unit, at most about `max_ticks` of them.
pub(crate) fn value_ticks(unit: Unit, top: f64, max_ticks: usize) -> Vec<f64> {
    let top = top.max(1.0);
    let fits = |s: f64| top / s <= max_ticks as f64;
    let step = match unit {
        Unit::Bytes => {
            // Powers of two: 0, 256 MiB, 512 MiB, 768 MiB, 1 GiB.
            let mut s = 1.0f64;
            while !fits(s) {
                s *= 2.0;
            }
            s
        }
        Unit::Millis => {
            const STEPS_MS: &[f64] = &[
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 1.5e4,
                3e4, 6e4, 1.2e5, 3e5, 6e5, 9e5, 1.8e6, 3.6e6, 7.2e6, 1.44e7, 2.88e7, 8.64e7,
            ];
            STEPS_MS
                .iter()
                .copied()
                .find(|&s| fits(s))
                .unwrap_or(top / max_ticks as f64)
        }
        Unit::Count => {
            let mut s = 1.0f64;
            loop {
                if let Some(m) = [1.0, 2.0, 5.0].iter().map(|m| m * s).find(|&v| fits(v)) {
                    break m;
                }
                s *= 10.0;
            }
        }
    };
    ticks_from(0.0, top, step)
}

fn trim_decimals(v: f64, max_decimals: usize) -> String {
    let s = format!("{v:.max_decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Formats a value tick in the unit (binary units for bytes, minutes for runtime).
pub(crate) fn format_value_tick(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Bytes => format_bytes_short(v),
        Unit::Millis => format!("{} min", trim_decimals(v / 60_000.0, 2)),
        Unit::Count => format_count(v),
    }
}

/// Bytes with the largest binary unit that keeps the number at least 1: `768 MiB`, `1.25 GiB`.
pub(crate) fn format_bytes_short(v: f64) -> String {
    if v <= 0.0 {
        return "0".to_string();
    }
    let (x, unit) = watchdog_types::units::binary_size(v);
    format!("{} {unit}", trim_decimals(x, 2))
}

fn format_count(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{}M", trim_decimals(v / 1e6, 2))
    } else if v.abs() >= 1e3 {
        format!("{}k", trim_decimals(v / 1e3, 2))
    } else {
        trim_decimals(v, 2)
    }
}

/// Formats a value for text (panel headers, labels): `1.50 GiB`, `12.5 min`, `1234`.
pub(crate) fn format_value(unit: Unit, v: u64) -> String {
    match unit {
        Unit::Bytes => watchdog_types::units::format_bytes(v),
        Unit::Millis => format!("{} min", trim_decimals(v as f64 / 60_000.0, 1)),
        Unit::Count => v.to_string(),
    }
}

/// Formats seconds for labels: `0.66 s`, `29.1 s`, `4m05s`.
pub(crate) fn format_seconds(s: f64) -> String {
    if s.abs() < 10.0 {
        format!("{} s", trim_decimals(s, 2))
    } else if s.abs() < 120.0 {
        format!("{s:.1} s")
    } else {
        watchdog_types::units::format_duration_s(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ticks_are_binary() {
        let gib = 1024.0 * 1024.0 * 1024.0;
        let ticks = value_ticks(Unit::Bytes, 1.08 * gib, 6);
        let labels: Vec<String> = ticks
            .iter()
            .map(|&v| format_value_tick(Unit::Bytes, v))
            .collect();
        assert_eq!(labels, ["0", "256 MiB", "512 MiB", "768 MiB", "1 GiB"]);
        let ticks = value_ticks(Unit::Bytes, 1.08 * 384.0 * 1024.0 * 1024.0, 6);
        assert_eq!(
            format_value_tick(Unit::Bytes, *ticks.last().unwrap_or(&0.0)),
            "384 MiB"
        );
    }

    #[test]
    fn runtime_ticks_are_minutes() {
        let ticks = value_ticks(Unit::Millis, 16.0 * 60_000.0, 6);
        let labels: Vec<String> = ticks
            .iter()
            .map(|&v| format_value_tick(Unit::Millis, v))
            .collect();
        assert_eq!(labels, ["0 min", "5 min", "10 min", "15 min"]);
        assert_eq!(format_value_tick(Unit::Millis, 30_000.0), "0.5 min");
    }

    #[test]
    fn count_ticks() {
        let labels: Vec<String> = value_ticks(Unit::Count, 12_000.0, 5)
            .iter()
            .map(|&v| format_value_tick(Unit::Count, v))
            .collect();
        assert_eq!(labels, ["0", "5k", "10k"]);
    }

    #[test]
    fn time_labels() {
        let (ticks, step) = time_ticks(0.0, 40.0, 10);
        assert_eq!(step, 5.0);
        assert_eq!(ticks.len(), 9);
        assert_eq!(format_time_tick(35.0, step, 40.0), "35 s");
        let (_, step) = time_ticks(0.0, 600.0, 10);
        assert_eq!(step, 60.0);
        assert_eq!(format_time_tick(300.0, step, 600.0), "5:00");
        assert_eq!(format_time_tick(7260.0, 600.0, 7800.0), "2:01:00");
        assert_eq!(format_time_tick(0.5, 0.1, 1.0), "0.5 s");
    }

    #[test]
    fn scale_maps_and_widens_empty_domain() {
        let s = Scale::new(10.0, 20.0, 0.0, 100.0);
        assert_eq!(s.map(15.0), 50.0);
        let s = Scale::new(5.0, 5.0, 0.0, 100.0);
        assert_eq!(s.map(5.5), 50.0);
    }
}
