//! The checkpoint request, one typed value from the engine's decision to the wire.
//!
//! The engine decides a [`Request`] (what is running out, why, how soon). Delivering it
//! adds how it was sent ([`Sent`]: when, to which process, with which signal), and the
//! two together, a [`SentRequest`], are the request file's document: its JSON is their
//! serialization, field for field and in the order the Python client and older watchdogs
//! know (`docs/recording.md`). The `alert` event is made from the same request by
//! [`Request::alert_event`], with what the delivery did ([`Delivery`]). Kinds, reasons,
//! units and phases stay typed all the way; only serde spells them.

use serde::{Deserialize, Serialize};

use crate::{AlertReason, EventBody, Phase, ResourceKind, Unit};

/// One checkpoint request: what ran out, as the engine decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Sequence number, increasing by one per alert within a watchdog run (first: 1).
    pub seq: u64,
    /// The resource's name, e.g. `cgroup_memory`, `disk:/data`, `runtime`.
    pub resource: String,
    /// Its kind (its unit follows from it).
    pub kind: ResourceKind,
    /// Why it alerted.
    pub reason: AlertReason,
    /// Usage when it alerted, in the kind's unit.
    pub used: u64,
    /// The limit, in the kind's unit.
    pub limit: u64,
    /// Predicted seconds left, when there is a forecast (absent when the headroom floor
    /// fired on a flat trend).
    pub predicted_s: Option<f64>,
    /// What a step-peak alert adds (`step_peak`, `eval_peak`, `fragmentation`); `None` otherwise.
    pub step_peak: Option<StepPeak>,
    /// When an announced end comes (a notice), seconds since the epoch.
    pub deadline_unix: Option<f64>,
}

/// The request fields of an alert from the run's step reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPeak {
    /// The phase whose peak will not fit.
    pub phase: Phase,
    /// The last step reported.
    pub step: u64,
    /// The predicted peak, in bytes.
    pub predicted_peak: u64,
}

/// How a request was sent: when, to and by whom, with which signal.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// When, RFC 3339 UTC with milliseconds: `2026-11-22T20:31:05.123Z`.
    pub time: String,
    /// When, seconds since the Unix epoch.
    pub time_unix: f64,
    /// The target's PID (the root of the watched tree).
    pub pid: u32,
    /// The signal's name, e.g. `SIGUSR1` (sent only to processes that catch it).
    pub signal: String,
    /// The watchdog's own PID.
    pub watchdog_pid: u32,
}

/// The request file's document: a request and how it was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "RequestJson", try_from = "RequestJson")]
pub struct SentRequest {
    /// What ran out.
    pub request: Request,
    /// How it was sent.
    pub sent: Sent,
}

impl SentRequest {
    /// The request of the documentation's example (a cgroup at 900 of 1000 bytes, 12.5 s
    /// left): what tests of its readers and writers start from.
    pub fn example() -> SentRequest {
        SentRequest {
            request: Request {
                seq: 1,
                resource: "cgroup_memory".into(),
                kind: ResourceKind::CgroupMemory,
                reason: AlertReason::Trend,
                used: 900,
                limit: 1000,
                predicted_s: Some(12.5),
                step_peak: None,
                deadline_unix: None,
            },
            sent: Sent {
                time: "2026-11-22T20:31:05.123Z".into(),
                time_unix: 1_795_379_465.123,
                pid: 42,
                signal: "SIGUSR1".into(),
                watchdog_pid: 41,
            },
        }
    }
}

/// What the binary did about a request: the file written, the processes signalled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// The request file written, if it was.
    pub request_file: Option<String>,
    /// The PIDs that were sent the signal.
    pub signalled: Vec<u32>,
    /// Whether the target itself was among them.
    pub target_signalled: bool,
}

impl Request {
    /// The `alert` event of this request: `rate_per_s` is the growth its forecast rested
    /// on, `signal` the checkpoint signal (named only when a process was sent it).
    pub fn alert_event(
        &self,
        rate_per_s: f64,
        delivery: &Delivery,
        signal: i32,
        dry_run: bool,
    ) -> EventBody {
        EventBody::Alert {
            resource: self.resource.clone(),
            reason: self.reason,
            used: self.used,
            limit: self.limit,
            unit: self.kind.unit(),
            predicted_s: self.predicted_s,
            rate_per_s,
            signalled: delivery.signalled.clone(),
            signal: (!delivery.signalled.is_empty()).then(|| crate::units::signal_name(signal)),
            request_file: delivery.request_file.clone(),
            dry_run,
            phase: self.step_peak.map(|p| p.phase),
            step: self.step_peak.map(|p| p.step),
            predicted_peak: self.step_peak.map(|p| p.predicted_peak),
        }
    }
}

/// The request file's JSON, field for field; the order is the file's.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RequestJson {
    seq: u64,
    resource: String,
    kind: ResourceKind,
    reason: AlertReason,
    used: u64,
    limit: u64,
    unit: Unit,
    predicted_s: Option<f64>,
    time: String,
    time_unix: f64,
    pid: u32,
    signal: String,
    watchdog_pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    predicted_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline_unix: Option<f64>,
}

impl From<SentRequest> for RequestJson {
    fn from(
        SentRequest {
            request: r,
            sent: s,
        }: SentRequest,
    ) -> RequestJson {
        RequestJson {
            seq: r.seq,
            unit: r.kind.unit(),
            resource: r.resource,
            kind: r.kind,
            reason: r.reason,
            used: r.used,
            limit: r.limit,
            predicted_s: r.predicted_s,
            time: s.time,
            time_unix: s.time_unix,
            pid: s.pid,
            signal: s.signal,
            watchdog_pid: s.watchdog_pid,
            phase: r.step_peak.map(|p| p.phase),
            step: r.step_peak.map(|p| p.step),
            predicted_peak: r.step_peak.map(|p| p.predicted_peak),
            deadline_unix: r.deadline_unix,
        }
    }
}

impl TryFrom<RequestJson> for SentRequest {
    type Error = String;

    /// Refuses a unit that is not its kind's, and step-peak fields given in part.
    fn try_from(j: RequestJson) -> Result<SentRequest, String> {
        if j.unit != j.kind.unit() {
            return Err(format!(
                "unit '{}' for kind '{}': expected '{}'",
                j.unit,
                j.kind,
                j.kind.unit()
            ));
        }
        let step_peak = match (j.phase, j.step, j.predicted_peak) {
            (Some(phase), Some(step), Some(predicted_peak)) => Some(StepPeak {
                phase,
                step,
                predicted_peak,
            }),
            (None, None, None) => None,
            _ => return Err("expected phase, step and predicted_peak together".to_string()),
        };
        Ok(SentRequest {
            request: Request {
                seq: j.seq,
                resource: j.resource,
                kind: j.kind,
                reason: j.reason,
                used: j.used,
                limit: j.limit,
                predicted_s: j.predicted_s,
                step_peak,
                deadline_unix: j.deadline_unix,
            },
            sent: Sent {
                time: j.time,
                time_unix: j.time_unix,
                pid: j.pid,
                signal: j.signal,
                watchdog_pid: j.watchdog_pid,
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The bytes the stringly `AlertRequest` wrote before the request became one type:
    /// the same fields, values and order.
    #[test]
    fn the_file_is_what_it_was() {
        let want = r#"{
  "seq": 1,
  "resource": "cgroup_memory",
  "kind": "cgroup_memory",
  "reason": "trend",
  "used": 900,
  "limit": 1000,
  "unit": "bytes",
  "predicted_s": 12.5,
  "time": "2026-11-22T20:31:05.123Z",
  "time_unix": 1795379465.123,
  "pid": 42,
  "signal": "SIGUSR1",
  "watchdog_pid": 41
}"#;
        assert_eq!(
            serde_json::to_string_pretty(&SentRequest::example()).unwrap(),
            want
        );
        assert_eq!(
            serde_json::from_str::<SentRequest>(want).unwrap(),
            SentRequest::example()
        );

        let mut peak = SentRequest::example();
        peak.request.kind = ResourceKind::GpuMemory;
        peak.request.reason = AlertReason::EvalPeak;
        peak.request.predicted_s = None;
        peak.request.step_peak = Some(StepPeak {
            phase: Phase::Eval,
            step: 7,
            predicted_peak: 123,
        });
        let want = r#"{
  "seq": 1,
  "resource": "cgroup_memory",
  "kind": "gpu_memory",
  "reason": "eval_peak",
  "used": 900,
  "limit": 1000,
  "unit": "bytes",
  "predicted_s": null,
  "time": "2026-11-22T20:31:05.123Z",
  "time_unix": 1795379465.123,
  "pid": 42,
  "signal": "SIGUSR1",
  "watchdog_pid": 41,
  "phase": "eval",
  "step": 7,
  "predicted_peak": 123
}"#;
        assert_eq!(serde_json::to_string_pretty(&peak).unwrap(), want);
        assert_eq!(serde_json::from_str::<SentRequest>(want).unwrap(), peak);
    }

    #[test]
    fn a_document_that_contradicts_itself_is_no_request() {
        let json = serde_json::to_string(&SentRequest::example()).unwrap();
        let table = [
            (
                "\"bytes\"",
                "\"millis\"",
                "unit 'millis' for kind 'cgroup_memory'",
            ),
            ("\"trend\"", "\"hunch\"", "unknown variant"),
            (
                "\"watchdog_pid\":41",
                "\"watchdog_pid\":41,\"step\":3",
                "phase, step and predicted_peak together",
            ),
        ];
        for (from, to, why) in table {
            let bad = json.replace(from, to);
            let err = serde_json::from_str::<SentRequest>(&bad).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn the_alert_event_is_the_requests() {
        let mut r = SentRequest::example().request;
        r.step_peak = Some(StepPeak {
            phase: Phase::Train,
            step: 9,
            predicted_peak: 950,
        });
        let sent = Delivery {
            request_file: Some("/run/r.json".into()),
            signalled: vec![7, 8],
            target_signalled: true,
        };
        let event = r.alert_event(2.5, &sent, libc::SIGUSR1, false);
        assert_eq!(
            event,
            EventBody::Alert {
                resource: "cgroup_memory".into(),
                reason: AlertReason::Trend,
                used: 900,
                limit: 1000,
                unit: Unit::Bytes,
                predicted_s: Some(12.5),
                rate_per_s: 2.5,
                signalled: vec![7, 8],
                signal: Some("SIGUSR1".into()),
                request_file: Some("/run/r.json".into()),
                dry_run: false,
                phase: Some(Phase::Train),
                step: Some(9),
                predicted_peak: Some(950),
            }
        );
        // Nothing signalled: no signal named.
        let none = r.alert_event(0.0, &Delivery::default(), libc::SIGUSR1, true);
        assert!(
            matches!(
                none,
                EventBody::Alert {
                    signal: None,
                    request_file: None,
                    dry_run: true,
                    ..
                }
            ),
            "{none:?}"
        );
    }
}
