//! The metadata servers' answers, parsed: pure functions from a body (and, where the
//! provider gives no time, the moment it was read) to a notice or none. The expected bodies
//! are the ones each provider documents; anything else is an [`AnswerError`] quoting it.
//!
//! - GCE `instance/preempted`: `TRUE` or `FALSE`; a preempted spot VM gets 30 s between the
//!   ACPI soft-off and the power-off ("Preemption process", cloud.google.com/compute/docs/
//!   instances/spot), so the deadline is the moment `TRUE` is first read plus 30 s.
//! - GCE `instance/maintenance-event`: `NONE`, `MIGRATE_ON_HOST_MAINTENANCE` (a live
//!   migration: the VM lives on, no notice) or `TERMINATE_ON_HOST_MAINTENANCE` (the VM is
//!   stopped, 60 s after the value changes for VMs that cannot migrate, e.g. with GPUs:
//!   "Get live migration notices", cloud.google.com/compute/docs/metadata/getting-live-migration-notice).
//! - AWS `spot/instance-action`: 404 while nothing is planned (handled by the caller), else
//!   `{"action": "terminate"|"stop"|"hibernate", "time": "2017-09-18T08:22:00Z"}`, `time`
//!   being when the action starts ("Spot Instance interruption notices",
//!   docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
//! - Azure scheduled events: `{"DocumentIncarnation": N, "Events": [{"EventId", "EventType",
//!   "ResourceType", "Resources", "EventStatus", "NotBefore", "Description", "EventSource",
//!   "DurationInSeconds"}]}`; a spot eviction is `EventType` `Preempt`, `NotBefore` an RFC 1123
//!   date (`Mon, 19 Sep 2016 18:29:47 GMT`), empty once the event has started
//!   ("Azure Metadata Service: Scheduled Events for Linux VMs",
//!   learn.microsoft.com/azure/virtual-machines/linux/scheduled-events).

use std::time::Duration;

use serde::Deserialize;

use crate::dmi::Provider;

/// What a GCE spot VM is given between `preempted` turning `TRUE` and its power-off.
pub const GCE_PREEMPT_NOTICE: Duration = Duration::from_secs(30);
/// How long before a host maintenance that terminates the VM `maintenance-event` changes.
pub const GCE_MAINTENANCE_NOTICE: Duration = Duration::from_secs(60);

/// The most characters of an unexpected answer quoted in an error.
const QUOTED_CHARS: usize = 200;

/// A provider's notice of the VM's end.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// Who announced it.
    pub provider: Provider,
    /// When the end comes, in unix seconds.
    pub deadline_unix: f64,
    /// What the provider said, for a person.
    pub detail: String,
    /// What makes this notice the same one when it is read again (the provider's event,
    /// not the time it was read): a notice is said once per `id`.
    pub id: String,
}

/// An answer that is not what the provider documents.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} answered {answer:?}, expected {expected}")]
pub struct AnswerError {
    /// Which answer (`GCE instance/preempted`, ...).
    pub what: &'static str,
    /// The body, cut to 200 characters.
    pub answer: String,
    /// What was expected.
    pub expected: &'static str,
}

impl AnswerError {
    pub(crate) fn new(what: &'static str, body: &str, expected: &'static str) -> AnswerError {
        AnswerError {
            what,
            answer: body.chars().take(QUOTED_CHARS).collect(),
            expected,
        }
    }
}

/// GCE `instance/preempted`: a notice when `TRUE`, with the deadline `now_unix` + 30 s.
pub fn parse_gce_preempted(body: &str, now_unix: f64) -> Result<Option<Notice>, AnswerError> {
    match body.trim() {
        "TRUE" => Ok(Some(Notice {
            provider: Provider::Gce,
            deadline_unix: now_unix + GCE_PREEMPT_NOTICE.as_secs_f64(),
            detail: "GCE: instance/preempted is TRUE: the VM is powered off 30 s after the notice"
                .into(),
            id: "gce:preempted".into(),
        })),
        "FALSE" => Ok(None),
        _ => Err(AnswerError::new(
            "GCE instance/preempted",
            body,
            "TRUE or FALSE",
        )),
    }
}

/// GCE `instance/maintenance-event`: a notice for `TERMINATE_ON_HOST_MAINTENANCE`, with the
/// deadline `now_unix` + 60 s; none for `NONE`, a live migration or a value not documented
/// yet (one upper-case word).
pub fn parse_gce_maintenance_event(
    body: &str,
    now_unix: f64,
) -> Result<Option<Notice>, AnswerError> {
    let value = body.trim();
    match value {
        "TERMINATE_ON_HOST_MAINTENANCE" => Ok(Some(Notice {
            provider: Provider::Gce,
            deadline_unix: now_unix + GCE_MAINTENANCE_NOTICE.as_secs_f64(),
            detail: "GCE: instance/maintenance-event is TERMINATE_ON_HOST_MAINTENANCE: the VM is \
                     stopped for host maintenance 60 s after the notice"
                .into(),
            id: "gce:maintenance:TERMINATE_ON_HOST_MAINTENANCE".into(),
        })),
        "NONE" | "MIGRATE_ON_HOST_MAINTENANCE" => Ok(None),
        _ if !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()) =>
        {
            Ok(None)
        }
        _ => Err(AnswerError::new(
            "GCE instance/maintenance-event",
            body,
            "NONE, MIGRATE_ON_HOST_MAINTENANCE or TERMINATE_ON_HOST_MAINTENANCE",
        )),
    }
}

#[derive(Deserialize)]
struct InstanceAction {
    action: String,
    time: String,
}

/// AWS `spot/instance-action` when it answers 200: the notice, its deadline the `time` given.
pub fn parse_aws_instance_action(body: &str) -> Result<Notice, AnswerError> {
    const WHAT: &str = "AWS spot/instance-action";
    const EXPECTED: &str = r#"{"action": "terminate|stop|hibernate", "time": "<RFC 3339 UTC>"}"#;
    let parsed: InstanceAction =
        serde_json::from_str(body).map_err(|_| AnswerError::new(WHAT, body, EXPECTED))?;
    let deadline = parsed
        .time
        .parse::<jiff::Timestamp>()
        .map_err(|_| AnswerError::new(WHAT, body, EXPECTED))?;
    if parsed.action.is_empty() {
        return Err(AnswerError::new(WHAT, body, EXPECTED));
    }
    Ok(Notice {
        provider: Provider::Aws,
        deadline_unix: unix_seconds(deadline),
        detail: format!(
            "AWS: spot/instance-action says {} at {}",
            parsed.action, parsed.time
        ),
        id: format!("aws:{}:{}", parsed.action, parsed.time),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ScheduledEvents {
    #[allow(dead_code)] // Read to check the document's shape; the events are what count.
    document_incarnation: u64,
    events: Vec<ScheduledEvent>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ScheduledEvent {
    event_id: String,
    event_type: String,
    #[serde(default)]
    event_status: String,
    #[serde(default)]
    not_before: String,
}

/// Azure scheduled events: a notice for the earliest `Preempt` event, its deadline the
/// event's `NotBefore`, or `now_unix` when that is empty (the event has started).
/// Other event types (`Reboot`, `Redeploy`, `Freeze`, `Terminate`) are not a preemption.
pub fn parse_azure_scheduled_events(
    body: &str,
    now_unix: f64,
) -> Result<Option<Notice>, AnswerError> {
    const WHAT: &str = "Azure scheduledevents";
    const EXPECTED: &str =
        r#"{"DocumentIncarnation": N, "Events": [...]} with RFC 1123 NotBefore dates"#;
    let doc: ScheduledEvents =
        serde_json::from_str(body).map_err(|_| AnswerError::new(WHAT, body, EXPECTED))?;
    let mut earliest: Option<Notice> = None;
    for event in doc.events.iter().filter(|e| e.event_type == "Preempt") {
        let deadline_unix = if event.not_before.trim().is_empty() {
            now_unix
        } else {
            let at = jiff::fmt::rfc2822::parse(event.not_before.trim())
                .map_err(|_| AnswerError::new(WHAT, body, EXPECTED))?;
            unix_seconds(at.timestamp())
        };
        let notice = Notice {
            provider: Provider::Azure,
            deadline_unix,
            detail: format!(
                "Azure: scheduled event {} Preempt ({}), not before {}",
                event.event_id,
                if event.event_status.is_empty() {
                    "no status"
                } else {
                    &event.event_status
                },
                if event.not_before.is_empty() {
                    "now (started)"
                } else {
                    &event.not_before
                },
            ),
            id: format!("azure:{}", event.event_id),
        };
        if earliest
            .as_ref()
            .is_none_or(|e| notice.deadline_unix < e.deadline_unix)
        {
            earliest = Some(notice);
        }
    }
    Ok(earliest)
}

fn unix_seconds(t: jiff::Timestamp) -> f64 {
    t.as_second() as f64 + f64::from(t.subsec_nanosecond()) / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_795_000_000.0;

    #[test]
    fn gce_preempted_true_is_a_notice_thirty_seconds_ahead() {
        let n = parse_gce_preempted("TRUE", NOW)
            .expect("documented")
            .expect("a notice");
        assert_eq!(n.provider, Provider::Gce);
        assert_eq!(n.deadline_unix, NOW + 30.0);
        assert_eq!(n.id, "gce:preempted");
        assert_eq!(parse_gce_preempted("FALSE\n", NOW), Ok(None));
        let err = parse_gce_preempted("<html>captive portal</html>", NOW).expect_err("not GCE");
        assert_eq!(
            err.to_string(),
            r#"GCE instance/preempted answered "<html>captive portal</html>", expected TRUE or FALSE"#
        );
    }

    #[test]
    fn gce_maintenance_event_terminate_is_a_notice_and_migrate_is_not() {
        let n = parse_gce_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE", NOW)
            .expect("documented")
            .expect("a notice");
        assert_eq!(n.deadline_unix, NOW + 60.0);
        assert_eq!(parse_gce_maintenance_event("NONE", NOW), Ok(None));
        assert_eq!(
            parse_gce_maintenance_event("MIGRATE_ON_HOST_MAINTENANCE", NOW),
            Ok(None)
        );
        assert_eq!(
            parse_gce_maintenance_event("SOME_FUTURE_VALUE", NOW),
            Ok(None)
        );
        assert!(parse_gce_maintenance_event("", NOW).is_err());
        assert!(parse_gce_maintenance_event("{\"x\":1}", NOW).is_err());
    }

    #[test]
    fn aws_instance_action_gives_its_time_as_the_deadline() {
        // The example of the AWS EC2 user guide, and the brief's.
        let n = parse_aws_instance_action(r#"{"action": "stop", "time": "2017-09-18T08:22:00Z"}"#)
            .expect("documented");
        assert_eq!(n.deadline_unix, 1_505_722_920.0);
        assert_eq!(n.id, "aws:stop:2017-09-18T08:22:00Z");
        let n =
            parse_aws_instance_action(r#"{"action":"terminate","time":"2026-11-28T12:00:00Z"}"#)
                .expect("documented");
        assert_eq!(n.deadline_unix, 1_795_867_200.0);
        assert!(n.detail.contains("terminate"));
        for bad in [
            "",
            "<?xml version=\"1.0\"?><html>404 - Not Found</html>",
            r#"{"action":"terminate"}"#,
            r#"{"action":"terminate","time":"tomorrow"}"#,
            r#"{"action":"","time":"2026-11-28T12:00:00Z"}"#,
        ] {
            assert!(parse_aws_instance_action(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn azure_preempt_events_give_their_not_before_and_others_are_ignored() {
        // The shape of Microsoft's documented example, with a Preempt and a Reboot.
        let body = r#"{
            "DocumentIncarnation": 2,
            "Events": [
                {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled",
                 "EventType": "Reboot", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
                 "NotBefore": "Mon, 19 Sep 2016 18:00:00 GMT", "Description": "",
                 "EventSource": "Platform", "DurationInSeconds": 5},
                {"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventStatus": "Scheduled",
                 "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
                 "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "",
                 "EventSource": "Platform", "DurationInSeconds": -1}
            ]
        }"#;
        let n = parse_azure_scheduled_events(body, NOW)
            .expect("documented")
            .expect("a notice");
        assert_eq!(n.deadline_unix, 1_474_309_787.0);
        assert_eq!(n.id, "azure:602d9444-d2cd-49c7-8624-8643e7171297");
        assert_eq!(
            parse_azure_scheduled_events(r#"{"DocumentIncarnation":1,"Events":[]}"#, NOW),
            Ok(None)
        );
        let started = r#"{"DocumentIncarnation":3,"Events":[{"EventId":"e","EventType":"Preempt",
            "EventStatus":"Started","NotBefore":""}]}"#;
        assert_eq!(
            parse_azure_scheduled_events(started, NOW)
                .expect("documented")
                .map(|n| n.deadline_unix),
            Some(NOW)
        );
        for bad in [
            "",
            "[]",
            r#"{"Events":[]}"#,
            r#"{"DocumentIncarnation":1,"Events":[{"EventId":"e","EventType":"Preempt","NotBefore":"soon"}]}"#,
        ] {
            assert!(parse_azure_scheduled_events(bad, NOW).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_long_unexpected_answer_is_cut_in_the_error() {
        let body = "x".repeat(10_000);
        let err = parse_gce_preempted(&body, NOW).expect_err("not documented");
        assert_eq!(err.answer.len(), 200);
    }
}
