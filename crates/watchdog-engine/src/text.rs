//! The sentences the engine says about resources: amounts in their unit, and what an
//! alert means in words.

use watchdog_types::units::{format_bytes, format_duration_s};
use watchdog_types::{AlertReason, Forecast, Resource, Sample, Unit};

/// `name will run out in about 12s: 380.00 MiB of 400.00 MiB used`.
pub fn alert_sentence(
    resource: &Resource,
    sample: &Sample,
    forecast: Forecast,
    reason: AlertReason,
) -> String {
    let unit = resource.kind.unit();
    let what = match reason {
        AlertReason::Trend => "will run out",
        AlertReason::HeadroomFloor => "is nearly exhausted",
        AlertReason::NextStep => "cannot take the next step",
        AlertReason::StepPeak => "will not fit the next step's peak",
        AlertReason::EvalPeak => "will not fit the next evaluation's peak",
        AlertReason::Fragmentation => "is fragmented",
        AlertReason::Terminating => "ends: the watchdog was sent SIGTERM",
        AlertReason::Preemption => "ends: the machine is being preempted",
    };
    let when = match forecast.seconds_left {
        Some(s) => format!(" in about {}", format_duration_s(s)),
        None => String::new(),
    };
    format!(
        "{} {what}{when}: {} of {} used",
        resource.name,
        format_amount(sample.used, unit),
        format_amount(sample.limit, unit)
    )
}

/// An amount in its unit: bytes as `1.50 GiB`, inodes as `12 inodes`, time as `1m30s`.
pub fn format_amount(v: u64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => format_bytes(v),
        Unit::Count => format!("{v} inodes"),
        Unit::Millis => format_duration_s(v as f64 / 1e3),
    }
}
