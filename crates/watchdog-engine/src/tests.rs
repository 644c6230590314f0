//! The engine driven by scripted samples: no processes, no files, no clock.
#![allow(clippy::unwrap_used)]

use super::*;
use verdict::VerdictKind;
use watchdog_types::{ResourceId, ResourceKind};

const MIB: u64 = 1 << 20;
const SIGUSR1: i32 = 10;

fn resource(id: u16, kind: ResourceKind, name: &str) -> Resource {
    Resource {
        id: ResourceId(id),
        kind,
        name: name.to_string(),
        source: "test".to_string(),
    }
}

fn settings() -> EngineSettings {
    EngineSettings {
        lead_s: 3.0,
        interval_s: 0.1,
        floor_percent: 5.0,
        signal: SIGUSR1,
        dry_run: false,
        hook: false,
        ..EngineSettings::default()
    }
}

fn sample(id: u16, t_s: f64, used: u64, limit: u64) -> Sample {
    Sample {
        resource: ResourceId(id),
        t_ns: (t_s * 1e9) as u64,
        used,
        limit,
    }
}

/// An engine over `cgroup_memory` (0) and `disk:/data` (1).
fn two() -> Engine {
    Engine::new(
        &[
            resource(0, ResourceKind::CgroupMemory, "cgroup_memory"),
            resource(1, ResourceKind::DiskBytes, "disk:/data"),
        ],
        settings(),
    )
}

fn events(actions: &[Action]) -> Vec<&EventBody> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// Feeds `f(t) -> used` for resource `id` every 0.1 s from `t0` to `t1`; returns the
/// plans decided and every action.
fn drive(
    e: &mut Engine,
    id: u16,
    limit: u64,
    t0: f64,
    t1: f64,
    f: impl Fn(f64) -> u64,
) -> (Vec<(f64, AlertPlan)>, Vec<Action>) {
    let mut plans = Vec::new();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let t = t0 + i as f64 * 0.1;
        if t > t1 {
            break;
        }
        e.observe(&sample(id, t, f(t), limit), &mut out);
        if let Some(p) = e.decide() {
            plans.push((t, p));
        }
        i += 1;
    }
    (plans, out)
}

/// 50 MiB/s from 25 MiB in a 600 MiB limit: full at 11.5 s after `t0`.
fn leak(t0: f64) -> impl Fn(f64) -> u64 {
    move |t| 25 * MIB + ((t - t0).max(0.0) * 50.0 * MIB as f64) as u64
}

#[test]
fn the_first_sample_announces_the_limit_once() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, MIB, 600 * MIB), &mut out);
    e.observe(&sample(0, 0.1, MIB, 600 * MIB), &mut out);
    let ev = events(&out);
    assert_eq!(ev.len(), 1);
    assert!(matches!(ev[0], EventBody::Limit { limit: Some(l), .. } if *l == 600 * MIB));
}

#[test]
fn a_changed_limit_is_announced_again() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, MIB, 600 * MIB), &mut out);
    e.observe(&sample(0, 0.1, MIB, 300 * MIB), &mut out);
    assert_eq!(events(&out).len(), 2);
    assert!(out.iter().any(
        |a| matches!(a, Action::Log(_, l) if l.starts_with("limit changed for cgroup_memory"))
    ));
}

#[test]
fn an_unlimited_resource_is_announced_with_no_limit_and_never_alerts() {
    let mut e = two();
    let (plans, out) = drive(&mut e, 0, u64::MAX, 0.0, 20.0, |t| (t * 1e9) as u64);
    assert!(plans.is_empty());
    assert!(matches!(
        events(&out)[0],
        EventBody::Limit { limit: None, .. }
    ));
}

#[test]
fn a_leak_is_planned_a_lead_before_the_limit() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 11.4, leak(0.0));
    assert_eq!(plans.len(), 1);
    let (t, plan) = &plans[0];
    assert!(11.5 - t >= 3.0, "planned at {t}");
    assert_eq!(plan.request.seq, 1);
    assert_eq!(plan.request.resource, "cgroup_memory");
    assert_eq!(plan.request.reason, AlertReason::Trend);
}

#[test]
fn nothing_is_planned_for_a_flat_series() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 60.0, |_| 300 * MIB);
    assert!(plans.is_empty());
    assert!(e.decide().is_none());
}

#[test]
fn of_two_resources_alerting_in_one_tick_the_sooner_is_requested() {
    let mut e = two();
    let mut out = Vec::new();
    // Both past the floor in the same tick: the disk has less time left (none predicted
    // for either, so the floor decides; both are 0 s left by the floor's measure) ...
    e.observe(&sample(0, 0.0, 590 * MIB, 600 * MIB), &mut out);
    e.observe(&sample(1, 0.0, 999 * MIB, 1000 * MIB), &mut out);
    let plan = e.decide().unwrap();
    assert_eq!(plan.alerts.len(), 2, "one event per resource");
    // ... one request, one sequence number.
    assert_eq!(plan.request.seq, 1);
    let acts = e.alerted(plan, &Delivery::default(), 0.0);
    assert_eq!(
        events(&acts)
            .iter()
            .filter(|e| matches!(e, EventBody::Alert { .. }))
            .count(),
        2
    );
    assert_eq!(e.alerts_sent(), 2);
}

#[test]
fn the_resource_with_fewer_seconds_left_comes_first() {
    let mut e = two();
    let mut out = Vec::new();
    // Memory leaks (a trend alert, about a lead left); on the tick it alerts, the disk
    // jumps into its floor (no forecast: counted as no time left).
    for i in 0..400 {
        let t = i as f64 * 0.1;
        e.observe(&sample(0, t, leak(0.0)(t), 600 * MIB), &mut out);
        if let Some(plan) = e.decide() {
            panic!("memory alone planned at {t}: {:?}", plan.request);
        }
        let next = t + 0.1;
        if leak(0.0)(next) > 440 * MIB {
            e.observe(&sample(0, next, leak(0.0)(next), 600 * MIB), &mut out);
            e.observe(&sample(1, next, 999 * MIB, 1000 * MIB), &mut out);
            let plan = e.decide().unwrap();
            assert_eq!(plan.alerts.len(), 2);
            assert_eq!(plan.request.resource, "disk:/data");
            assert_eq!(plan.request.reason, AlertReason::HeadroomFloor);
            return;
        }
    }
    panic!("no plan");
}

#[test]
fn one_alert_per_episode() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 11.4, leak(0.0));
    let (later, _) = drive(&mut e, 0, 600 * MIB, 11.5, 30.0, |_| 595 * MIB);
    assert_eq!(plans.len(), 1);
    assert!(
        later.is_empty(),
        "staying near the limit is the same episode"
    );
}

#[test]
fn an_acknowledged_episode_freed_rearms_and_the_next_leak_is_warned_in_time() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let (_, plan) = plans.into_iter().next().unwrap();
    let _ = e.alerted(plan, &Delivery::default(), 1000.0);
    let acts = e.acknowledged(1, 1000.5);
    assert!(
        events(&acts)
            .iter()
            .any(|e| matches!(e, EventBody::Ack { .. }))
    );
    // Freed at once, then the same leak again from 9.1 s.
    let (again, out) = drive(&mut e, 0, 600 * MIB, 9.1, 20.5, leak(9.1));
    assert!(
        events(&out)
            .iter()
            .any(|e| matches!(e, EventBody::Rearm { resource } if resource == "cgroup_memory")),
        "the drop ends the episode"
    );
    assert_eq!(again.len(), 1);
    let (t, plan) = &again[0];
    assert!(9.1 + 11.5 - t >= 3.0, "second leak planned at {t}");
    assert_eq!(plan.request.seq, 2);
}

#[test]
fn a_slow_checkpoint_raises_the_lead() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let (_, plan) = plans.into_iter().next().unwrap();
    let _ = e.alerted(plan, &Delivery::default(), 1000.0);
    let acts = e.acknowledged(1, 1004.0);
    // 4 s x 1.5 + one interval.
    assert!((e.lead_s() - 6.1).abs() < 1e-9, "{}", e.lead_s());
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Log(_, l) if l.contains("lead raised to")))
    );
    assert!(events(&acts).iter().any(
        |e| matches!(e, EventBody::Ack { checkpoint_s: Some(d), lead_s, .. } if (*d - 4.0).abs() < 1e-9 && (*lead_s - 6.1).abs() < 1e-9)
    ));
}

#[test]
fn a_quick_checkpoint_keeps_the_lead() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let _ = e.alerted(
        plans.into_iter().next().unwrap().1,
        &Delivery::default(),
        1000.0,
    );
    let acts = e.acknowledged(1, 1000.5);
    assert_eq!(e.lead_s(), 3.0);
    assert!(
        !acts
            .iter()
            .any(|a| matches!(a, Action::Log(_, l) if l.contains("lead raised")))
    );
}

#[test]
fn an_acknowledgment_before_any_alert_measures_nothing() {
    let mut e = two();
    let acts = e.acknowledged(7, 1000.0);
    assert!(events(&acts).iter().any(|e| matches!(
        e,
        EventBody::Ack {
            checkpoint_s: None,
            ..
        }
    )));
    assert_eq!(e.lead_s(), 3.0);
}

#[test]
fn an_alert_runs_the_hook_notifies_and_flushes_the_recording() {
    let mut e = Engine::new(
        &[resource(0, ResourceKind::CgroupMemory, "cgroup_memory")],
        EngineSettings {
            hook: true,
            ..settings()
        },
    );
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 599 * MIB, 600 * MIB), &mut out);
    let plan = e.decide().unwrap();
    let delivery = Delivery {
        request_file: Some("/run/req.json".into()),
        signalled: vec![42, 43],
        target_signalled: true,
    };
    let acts = e.alerted(plan, &delivery, 0.0);
    assert!(acts.contains(&Action::RunHook));
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Notify { title, .. } if title.contains("cgroup_memory")))
    );
    assert_eq!(acts.last(), Some(&Action::FlushRecording("alert")));
    assert!(acts.iter().any(
        |a| matches!(a, Action::Log(Level::Warn, l) if l.contains("sent SIGUSR1 to PID 42, 43"))
    ));
    let EventBody::Alert {
        signalled,
        signal,
        request_file,
        reason,
        ..
    } = events(&acts)[0]
    else {
        panic!("no alert event");
    };
    assert_eq!(signalled, &vec![42, 43]);
    assert_eq!(signal.as_deref(), Some("SIGUSR1"));
    assert_eq!(request_file.as_deref(), Some("/run/req.json"));
    assert_eq!(*reason, AlertReason::HeadroomFloor);
}

#[test]
fn a_dry_run_runs_no_hook_and_says_nothing_was_sent() {
    let mut e = Engine::new(
        &[resource(0, ResourceKind::CgroupMemory, "cgroup_memory")],
        EngineSettings {
            hook: true,
            dry_run: true,
            ..settings()
        },
    );
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 599 * MIB, 600 * MIB), &mut out);
    let acts = e.alerted(e.clone().decide().unwrap(), &Delivery::default(), 0.0);
    assert!(!acts.contains(&Action::RunHook));
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Log(_, l) if l.contains("(dry run); nothing sent")))
    );
    assert!(matches!(
        events(&acts)[0],
        EventBody::Alert { dry_run: true, .. }
    ));
}

#[test]
fn no_process_catching_the_signal_is_said() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 599 * MIB, 600 * MIB), &mut out);
    let acts = e.alerted(e.clone().decide().unwrap(), &Delivery::default(), 0.0);
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Log(_, l) if l.ends_with("no process signalled")))
    );
}

#[test]
fn pending_alerts_of_a_target_that_is_gone_are_dropped() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 599 * MIB, 600 * MIB), &mut out);
    e.discard_pending();
    assert!(e.decide().is_none());
    assert_eq!(e.alerts_sent(), 0);
}

#[test]
fn the_status_line_puts_the_most_urgent_first() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 60 * MIB, 600 * MIB), &mut out);
    e.observe(&sample(1, 0.0, 900 * MIB, 1000 * MIB), &mut out);
    let line = e.status_line();
    assert!(line.starts_with("disk:/data 90%"), "{line}");
    assert!(line.contains(" | cgroup_memory 10%"), "{line}");
}

#[test]
fn the_verdict_uses_the_signal_the_engine_sent() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 0.0, 599 * MIB, 600 * MIB), &mut out);
    let plan = e.decide().unwrap();
    let _ = e.alerted(
        plan,
        &Delivery {
            target_signalled: true,
            signalled: vec![1],
            ..Delivery::default()
        },
        0.0,
    );
    let v = e.verdict(ExitFacts {
        exit: Some(TargetExit::Signal(SIGUSR1)),
        resources: e.resource_ends(1.0, |_| None),
        ..ExitFacts::default()
    });
    assert_eq!(v.kind, VerdictKind::WatchdogSignal);
}

#[test]
fn a_crash_the_engine_did_not_cause_is_a_crash() {
    let e = two();
    let v = e.verdict(ExitFacts {
        exit: Some(TargetExit::Signal(libc::SIGSEGV)),
        ..ExitFacts::default()
    });
    assert_eq!(v.kind, VerdictKind::Crash);
}

#[test]
fn resource_ends_take_the_recent_peak_and_the_age() {
    let mut e = two();
    let mut out = Vec::new();
    e.observe(&sample(0, 1.0, 100 * MIB, 600 * MIB), &mut out);
    let ends = e.resource_ends(3.0, |i| (i == 0).then_some(500 * MIB));
    assert_eq!(ends.len(), 1, "the disk was never sampled");
    assert_eq!(ends[0].recent_peak, 500 * MIB);
    assert_eq!(ends[0].last_used, 100 * MIB);
    assert!((ends[0].age_s - 2.0).abs() < 1e-9);
}

#[test]
fn the_closing_summary_names_peaks_alerts_and_verdict() {
    let mut e = two();
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let _ = e.alerted(
        plans.into_iter().next().unwrap().1,
        &Delivery {
            signalled: vec![7],
            ..Delivery::default()
        },
        0.0,
    );
    let v = e.verdict(ExitFacts {
        exit: Some(TargetExit::Code(0)),
        resources: e.resource_ends(9.0, |_| None),
        ..ExitFacts::default()
    });
    let (text, event) = e.closing(&Ending {
        exit: TargetExit::Code(0),
        verdict: &v,
        pid: 7,
        name: "python3",
        elapsed_s: 9.0,
        after_duration: "",
        tail: " Sampled.",
    });
    assert!(text.starts_with("watchdog: PID 7 (python3) "), "{text}");
    assert!(text.contains("Peak usage: cgroup_memory"), "{text}");
    assert!(text.contains("1 alert(s): cgroup_memory at +"), "{text}");
    assert!(text.ends_with(" Sampled."), "{text}");
    let EventBody::Exit {
        code,
        alerts,
        verdict,
        peaks,
        ..
    } = event
    else {
        panic!("not an exit event");
    };
    assert_eq!(code, Some(0));
    assert_eq!(alerts, 1);
    assert_eq!(verdict.as_deref(), Some("exited"));
    assert!(peaks.contains_key("cgroup_memory") && !peaks.contains_key("disk:/data"));
}

#[test]
fn shell_status_is_the_code_or_128_plus_the_signal() {
    assert_eq!(TargetExit::Code(3).shell_status(), 3);
    assert_eq!(TargetExit::Code(256 + 5).shell_status(), 5);
    assert_eq!(TargetExit::Signal(9).shell_status(), 137);
    assert_eq!(TargetExit::Unknown.shell_status(), 0);
    assert_eq!(TargetExit::Signal(9).code_and_signal(), (None, Some(9)));
}

#[test]
fn resource_status_gives_reading_trend_time_left_and_alerts() {
    let mut e = two();
    assert!(e.resource_status().is_empty(), "nothing sampled yet");
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let (_, plan) = plans.into_iter().next().unwrap();
    let _ = e.alerted(plan, &Delivery::default(), 1000.0);
    e.observe(&sample(1, 9.0, 10 * MIB, u64::MAX), &mut Vec::new());
    let status = e.resource_status();
    assert_eq!(status.len(), 2);
    let mem = &status[0];
    assert_eq!((mem.name.as_str(), mem.alerts), ("cgroup_memory", 1));
    assert_eq!(mem.limit, Some(600 * MIB));
    assert!(mem.trend_per_s > 40.0 * MIB as f64, "{}", mem.trend_per_s);
    assert!(
        mem.seconds_left.is_some_and(|s| s < 4.0),
        "{:?}",
        mem.seconds_left
    );
    let disk = &status[1];
    assert_eq!(
        (disk.limit, disk.seconds_left, disk.alerts),
        (None, None, 0)
    );
}

#[test]
fn acknowledged_checkpoints_are_counted_with_their_durations() {
    let mut e = two();
    assert_eq!(e.checkpoints(), (0, 0.0));
    let (plans, _) = drive(&mut e, 0, 600 * MIB, 0.0, 9.0, leak(0.0));
    let (_, plan) = plans.into_iter().next().unwrap();
    let _ = e.alerted(plan, &Delivery::default(), 1000.0);
    let _ = e.acknowledged(1, 1002.5);
    assert_eq!(e.checkpoints(), (1, 2.5));
}

mod step_peaks {
    //! Issue 19: the run's step reports through the engine, scripted.
    use super::*;
    use crate::step_peaks::{Acknowledgment, GpuUse, StepBatch};
    use watchdog_predictor::step_peak::StepReport;
    use watchdog_types::Phase;

    const GIB: u64 = 1 << 30;

    /// An engine over `gpu0` (0), an 8 GiB device sampled once.
    fn gpu() -> Engine {
        let mut e = Engine::new(&[resource(0, ResourceKind::GpuMemory, "gpu0")], settings());
        let mut out = Vec::new();
        e.observe(&sample(0, 0.0, 2 * GIB, 8 * GIB), &mut out);
        e
    }

    fn report(n: u64, peak: u64) -> StepReport {
        StepReport {
            n,
            step: n * 10,
            phase: Phase::Train,
            pass: 1,
            t_s: 1000.0 + n as f64 * 0.1,
            duration_s: Some(0.1),
            allocated: GIB,
            reserved: peak.max(GIB),
            peak,
            retries: 0,
            ooms: 0,
            folded: 1,
        }
    }

    /// Feeds the reports one per tick; returns the first plan and the step it came at.
    fn feed(
        e: &mut Engine,
        gpu: GpuUse,
        peaks: impl Iterator<Item = u64>,
    ) -> Option<(u64, AlertPlan)> {
        for (i, peak) in peaks.enumerate() {
            let r = [report(i as u64 + 1, peak)];
            let mut out = Vec::new();
            e.observe_steps(
                &StepBatch {
                    resource: Some(ResourceId(0)),
                    writer: 4242,
                    reports: &r,
                    gpu,
                },
                (i as u64 + 1) * 100_000_000,
                &mut out,
            );
            if let Some(plan) = e.decide() {
                return Some((r[0].step, plan));
            }
        }
        None
    }

    #[test]
    fn a_per_step_leak_is_requested_before_the_step_that_would_not_fit() {
        let mut e = gpu();
        // 2 GiB + 16 MiB a step on an 8 GiB device: step 384 would not fit.
        let leak = (0..400u64).map(|i| 2 * GIB + i * 16 * MIB);
        let (step, plan) = feed(&mut e, GpuUse::default(), leak).expect("an alert");
        let failing_step = 384 * 10;
        assert!(step < failing_step, "alerted at step {step}");
        let r = &plan.request;
        assert_eq!(r.resource, "gpu0");
        assert!(
            matches!(r.reason, AlertReason::StepPeak | AlertReason::Fragmentation),
            "{:?}",
            r.reason
        );
        let fields = r.step_peak.expect("the step-peak fields");
        assert_eq!(fields.phase, Phase::Train);
        assert_eq!(fields.step, step);
        assert!(fields.predicted_peak > 2 * GIB);
        let out = e.alerted(plan, &Delivery::default(), 1000.0);
        let alert = events(&out)
            .into_iter()
            .find_map(|e| match e {
                EventBody::Alert {
                    phase,
                    step,
                    predicted_peak,
                    ..
                } => Some((*phase, *step, *predicted_peak)),
                _ => None,
            })
            .expect("an alert event");
        assert_eq!(
            alert,
            (Some(Phase::Train), Some(step), Some(fields.predicted_peak))
        );
        assert!(
            out.iter().any(|a| matches!(a, Action::Log(Level::Warn, l)
                if l.contains("gpu0") && l.contains("will not fit") && l.contains("available to the allocator"))),
            "{out:?}"
        );
    }

    /// After the run saved, a peak below the one it alerted at ends the episode.
    #[test]
    fn a_save_and_a_fallen_peak_end_the_episode() {
        let mut e = gpu();
        let leak = (0..400u64).map(|i| 2 * GIB + i * 16 * MIB);
        let (step, plan) = feed(&mut e, GpuUse::default(), leak).expect("an alert");
        let _ = e.alerted(plan, &Delivery::default(), 1000.0);
        let fallen = |e: &mut Engine, n: u64| {
            let r = [report(step / 10 + n, GIB)];
            let mut out = Vec::new();
            e.observe_steps(
                &StepBatch {
                    resource: Some(ResourceId(0)),
                    writer: 4242,
                    reports: &r,
                    gpu: GpuUse::default(),
                },
                1,
                &mut out,
            );
            out.iter()
                .any(|a| matches!(a, Action::Log(_, l) if l.contains("fell back")))
        };
        assert!(!fallen(&mut e, 1), "not before the run saved");
        let _ = e.acknowledged(1, 1002.0);
        assert!(fallen(&mut e, 2));
    }

    #[test]
    fn a_steady_run_never_alerts() {
        let mut e = gpu();
        let steady = (0..500u64).map(|i| 5 * GIB + (i % 3) * MIB);
        assert!(feed(&mut e, GpuUse::default(), steady).is_none());
    }

    /// What the others hold, and what the writer holds outside its allocator, is not
    /// the allocator's: a flat 5 GiB peak fits 8 GiB alone, not beside 3.5 GiB more.
    #[test]
    fn other_processes_and_memory_outside_the_allocator_leave_less_room() {
        let flat = || (0..100u64).map(|_| 5 * GIB);
        assert!(feed(&mut gpu(), GpuUse::default(), flat()).is_none());
        let others = GpuUse {
            others: 3 * GIB + GIB / 2,
            own: None,
        };
        assert!(feed(&mut gpu(), others, flat()).is_some());
        // The writer's NVML usage is its 5 GiB reserved plus 3.5 GiB of context and buffers.
        let outside = GpuUse {
            others: 0,
            own: Some(5 * GIB + 3 * GIB + GIB / 2),
        };
        assert!(feed(&mut gpu(), outside, flat()).is_some());
    }

    /// A process that execs itself keeps its PID and starts counting its reports from 1
    /// again: the new program's leak is predicted on its own, not dropped as old entries.
    #[test]
    fn a_writer_that_starts_counting_again_is_a_new_run_of_reports() {
        let mut e = gpu();
        assert!(feed(&mut e, GpuUse::default(), (0..200u64).map(|_| 3 * GIB)).is_none());
        let leak = (0..200u64).map(|i| 2 * GIB + i * 64 * MIB);
        assert!(feed(&mut e, GpuUse::default(), leak).is_some());
    }

    #[test]
    fn reports_of_a_device_nvml_does_not_list_are_not_judged() {
        let mut e = gpu();
        let r = [report(1, 100 * GIB)];
        let mut out = Vec::new();
        e.observe_steps(
            &StepBatch {
                resource: None,
                writer: 1,
                reports: &r,
                gpu: GpuUse::default(),
            },
            1,
            &mut out,
        );
        assert!(e.decide().is_none());
    }

    #[test]
    fn fragmentation_says_what_helps() {
        let a = watchdog_predictor::step_peak::StepPeakAlert {
            reason: AlertReason::Fragmentation,
            phase: Phase::Train,
            step: 120,
            predicted_peak: 7 * GIB,
            available: 6 * GIB,
            steps_ahead: 3,
            seconds_left: Some(1.5),
        };
        let line = crate::step_peaks::step_sentence("gpu0", &a);
        assert!(line.starts_with("gpu0 is fragmented"), "{line}");
        assert!(
            line.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
            "{line}"
        );
        assert!(
            line.contains("7.00 GiB") && line.contains("6.00 GiB"),
            "{line}"
        );
        let eval = watchdog_predictor::step_peak::StepPeakAlert {
            reason: AlertReason::EvalPeak,
            phase: Phase::Eval,
            ..a
        };
        let line = crate::step_peaks::step_sentence("gpu0", &eval);
        // Three evaluations ahead: not "the next evaluation's", and counted in evaluations.
        assert!(
            line.contains(
                "an evaluation's peak will not fit in about 1.5s (3 evaluation(s) ahead)"
            ),
            "{line}"
        );
        assert!(!line.contains("expandable_segments"), "{line}");
        let next = watchdog_predictor::step_peak::StepPeakAlert {
            steps_ahead: 1,
            ..eval
        };
        let line = crate::step_peaks::step_sentence("gpu0", &next);
        assert!(
            line.contains(
                "the next evaluation's peak will not fit in about 1.5s (1 evaluation(s) ahead)"
            ),
            "{line}"
        );
        // Growing retries with a peak that fits: the cache is fragmented, and the line
        // does not say that 1.50 GiB will not fit in 8.00 GiB.
        let retries = watchdog_predictor::step_peak::StepPeakAlert {
            predicted_peak: 3 * GIB / 2,
            available: 8 * GIB,
            ..a
        };
        let line = crate::step_peaks::step_sentence("gpu0", &retries);
        assert!(!line.contains("will not fit"), "{line}");
        assert!(
            line.starts_with("gpu0 is fragmented: the allocator retries allocations"),
            "{line}"
        );
        assert!(
            line.contains("1.50 GiB") && line.contains("8.00 GiB"),
            "{line}"
        );
        assert!(line.contains("expandable_segments:True"), "{line}");
    }

    /// The client's report of the error and its last-chance save make the verdict
    /// `gpu_oom` with the step and the figures; the ack event carries path, step, cause.
    #[test]
    fn a_reported_cuda_oom_and_its_save_give_the_gpu_oom_verdict() {
        let mut e = gpu();
        let _ = feed(&mut e, GpuUse::default(), (0..5u64).map(|_| 3 * GIB));
        let acts = e.acknowledged_with(&Acknowledgment {
            seq: 0,
            time_unix: 1001.0,
            path: Some("ckpt/last".into()),
            step: Some(49),
            cause: Some("cuda_oom".into()),
        });
        assert!(events(&acts).iter().any(|e| matches!(e,
            EventBody::Ack { seq: Some(0), path: Some(p), step: Some(49), cause: Some(c), checkpoint_s: None, .. }
                if p == "ckpt/last" && c == "cuda_oom")));
        let acts = e.cuda_oom_reported(
            verdict::CudaOom {
                step: Some(50),
                phase: Some(Phase::Train),
                peak: Some(7 * GIB),
                reserved: Some(7 * GIB),
                ..verdict::CudaOom::default()
            },
            Some(ResourceId(0)),
        );
        assert!(events(&acts).iter().any(|e| matches!(e,
            EventBody::CudaOom { resource: Some(r), step: Some(50), available: Some(a), .. }
                if r == "gpu0" && *a == 8 * GIB)));
        assert_eq!(
            e.checkpoints().0,
            0,
            "a save no request asked for is not counted"
        );
        let v = e.verdict(ExitFacts {
            exit: Some(TargetExit::Code(1)),
            ..ExitFacts::default()
        });
        assert_eq!(v.kind, VerdictKind::GpuOom);
        assert!(
            v.summary.contains("CUDA out of memory at step 50"),
            "{}",
            v.summary
        );
        assert!(v.summary.contains("8.00 GiB available"), "{}", v.summary);
        assert!(
            v.evidence
                .iter()
                .any(|l| l.contains("ckpt/last' holds step 49")),
            "{:?}",
            v.evidence
        );
    }
}
