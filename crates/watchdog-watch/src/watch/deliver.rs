//! Carrying out the engine's plan: the one path from an [`AlertPlan`] to the run.
//!
//! [`deliver`] looks at the run's processes again, writes the request file, signals the
//! processes of the tree that catch the signal, and tells the engine what it did
//! ([`Engine::alerted`]), which answers with what follows: events, log lines, the hook, the
//! notification, a flush of the recording. [`perform`] carries those out through an
//! [`Outlet`] (the watch's event log, recorder and action thread). The request is one
//! typed [`SentRequest`] from the plan to the file's JSON, the hook's environment and the
//! `alert` event (see [`watchdog_types::request`]).
//!
//! The order is chosen: the tree is refreshed before the request is written, so the
//! signal follows the file as closely as it can (a run that reads, saves and acknowledges
//! between the write and a late signal would take that signal for a new request). When the
//! request cannot be written, an earlier request is removed before the signal goes out:
//! the client must not take the signal for that request's, acknowledged already.
//!
//! Everything here takes what it touches as arguments ([`Courier`]), so the unit tests
//! below drive it with real files and real processes and no whole [`Watch`].

use std::path::Path;
use std::time::SystemTime;

use watchdog_alerter::pidfd::PidFd;
use watchdog_alerter::request::{AckWatcher, RequestPlace};
use watchdog_engine::{Action, AlertPlan, Delivery, Engine, Level};
use watchdog_procfs::ProcRoot;
use watchdog_sampler::tree::ProcessTree;
use watchdog_types::EventBody;
use watchdog_types::request::{Sent, SentRequest};
use watchdog_types::units::signal_name;

use super::{Watch, lineage};
use crate::outputs;

/// What a plan is delivered with, besides the engine.
pub(crate) struct Courier<'a> {
    /// Where the request is written.
    pub place: &'a RequestPlace,
    /// The run's processes, refreshed before the request is written.
    pub tree: &'a mut ProcessTree,
    /// The target, signalled through its pidfd.
    pub target: &'a PidFd,
    /// procfs, where each process's caught signals are read.
    pub proc: &'a ProcRoot,
    /// The checkpoint signal.
    pub signal: i32,
    /// Write and signal nothing.
    pub dry_run: bool,
}

/// A plan carried out: the request as it was sent, the file written (if it was), and the
/// engine's actions that follow, for [`perform`].
pub(crate) struct Delivered {
    /// The request, as written (or as it would have been).
    pub request: SentRequest,
    /// The request file's path, when it was written.
    pub written: Option<String>,
    /// What the engine says follows.
    pub actions: Vec<Action>,
    /// The processes sent the signal.
    pub signalled: Vec<u32>,
}

/// Where the actions that follow an alert go: the watch's events, recording, hook and
/// desktop notification.
pub(crate) trait Outlet {
    /// Appends an event to the events file and the recording.
    fn emit(&mut self, body: EventBody);
    /// Writes the recording now, in the background, for this reason.
    fn flush_recording(&mut self, why: &'static str);
    /// Runs the `--on-alert` hook (when there is one) with this environment.
    fn run_hook(&mut self, env: Vec<(String, String)>);
    /// Shows a desktop notification (when they are on).
    fn notify(&mut self, title: String, body: String);
}

/// Carries out `plan` at `now`: the request file and one signal to the tree (nothing in a
/// dry run), then asks the engine what follows. See the module documentation for the order.
pub(crate) fn deliver(
    plan: AlertPlan,
    engine: &mut Engine,
    courier: Courier<'_>,
    now: SystemTime,
) -> Delivered {
    let Courier {
        place,
        tree,
        target,
        proc,
        signal,
        dry_run,
    } = courier;
    let request = SentRequest {
        request: plan.request.clone(),
        sent: Sent {
            time: watchdog_alerter::events::format_rfc3339_ms(now),
            time_unix: watchdog_alerter::events::unix_time_s(now),
            pid: target.pid(),
            signal: signal_name(signal),
            watchdog_pid: std::process::id(),
        },
    };
    let mut delivery = Delivery::default();
    if dry_run {
        tracing::info!(
            "dry run: would write {} and signal the tree",
            place.path().display()
        );
    } else {
        // The tree may be refreshed less often than every tick (a service's run with no
        // mem_limit): look again before the request is written, and signal right after.
        tree.refresh();
        let pids: Vec<u32> = tree.pids().to_vec();
        write_or_clear(place, &request, &mut delivery);
        let roots = lineage::roots(tree, target.pid());
        let report =
            watchdog_alerter::signal::signal_tree_with_roots(proc, &pids, target, &roots, signal);
        for (pid, why) in &report.failed {
            tracing::warn!("could not signal PID {pid}: {why}");
        }
        if report.none_catching() {
            tracing::warn!(
                "{}",
                watchdog_alerter::signal::no_handler_warning(signal, &report)
            );
        }
        delivery.target_signalled = report.sent.contains(&target.pid());
        delivery.signalled = report.sent;
    }
    let written = delivery.request_file.clone();
    let actions = engine.alerted(plan, &delivery, request.sent.time_unix);
    Delivered {
        request,
        written,
        actions,
        signalled: delivery.signalled,
    }
}

/// Writes the request; when it cannot be written, removes the earlier one (a full disk
/// still lets a file be removed), so the signal does not arrive beside a request the
/// client acknowledged already.
fn write_or_clear(place: &RequestPlace, request: &SentRequest, delivery: &mut Delivery) {
    let path = place.path();
    match watchdog_alerter::request::write_request(place, request) {
        Ok(()) => {
            outputs::write_ok("request_file");
            delivery.request_file = Some(path.display().to_string());
        }
        Err(e) => {
            outputs::write_failed("request_file", &path, &e.to_string());
            if let Err(e) = place.remove() {
                tracing::warn!(
                    "could not remove the earlier request {}: {e}",
                    path.display()
                );
            }
        }
    }
}

/// Carries out `actions` through `outlet`; `request` is the request just made and where it
/// was written (for the hook's environment), `None` for actions no request caused.
pub(crate) fn perform(
    actions: Vec<Action>,
    request: Option<(&SentRequest, Option<&str>)>,
    outlet: &mut impl Outlet,
) {
    for action in actions {
        match action {
            Action::Log(Level::Info, line) => tracing::info!("{line}"),
            Action::Log(Level::Warn, line) => tracing::warn!("{line}"),
            Action::Emit(body) => outlet.emit(body),
            Action::RunHook => {
                if let Some((req, written)) = request {
                    outlet.run_hook(watchdog_alerter::hook::hook_env(
                        req,
                        written.map(Path::new),
                    ));
                }
            }
            Action::Notify { title, body } => outlet.notify(title, body),
            Action::FlushRecording(why) => outlet.flush_recording(why),
        }
    }
}

/// Reads the acknowledgment file and tells the engine of a new one; the actions that follow.
pub(crate) fn acknowledgment(ack: &mut AckWatcher, engine: &mut Engine) -> Vec<Action> {
    let Some(ack) = ack.check() else {
        return Vec::new();
    };
    // Only a save no request asked for is taken before the first request.
    if ack.cause.is_none() && engine.alerts_sent() == 0 {
        return Vec::new();
    }
    engine.acknowledged_with(&watchdog_engine::Acknowledgment {
        seq: ack.seq,
        time_unix: ack.time_unix,
        path: ack.path,
        step: ack.step,
        cause: ack.cause,
    })
}

impl Watch {
    /// Carries out this tick's alert (see [`deliver`]); returns the processes signalled.
    pub(super) fn act(&mut self, plan: AlertPlan) -> Vec<u32> {
        let runtime = (plan.request.kind == watchdog_types::ResourceKind::Runtime)
            .then_some(plan.request.seq);
        let courier = Courier {
            place: &self.out.request,
            tree: self.sampler.tree_mut(),
            target: &self.run.target.pidfd,
            proc: &self.settings.host.proc,
            signal: self.settings.signal,
            dry_run: self.settings.dry_run,
        };
        let done = deliver(plan, &mut self.engine, courier, SystemTime::now());
        self.kernel.alerted();
        if let Some(seq) = runtime {
            self.slurm_asked(seq);
        }
        perform(
            done.actions,
            Some((&done.request, done.written.as_deref())),
            self,
        );
        done.signalled
    }

    /// Carries out what the engine decided (see [`perform`]).
    pub(super) fn perform(
        &mut self,
        actions: Vec<Action>,
        request: Option<(&SentRequest, Option<&str>)>,
    ) {
        perform(actions, request, self);
    }

    /// Reads the acknowledgment file and carries out what a new one brings.
    pub(super) fn check_ack(&mut self) {
        let actions = acknowledgment(&mut self.replies.ack, &mut self.engine);
        let acked = !actions.is_empty();
        self.perform(actions, None);
        if acked {
            self.say_if_saves_outlast_the_grace();
        }
    }
}

impl Outlet for Watch {
    fn emit(&mut self, body: EventBody) {
        Watch::emit(self, body);
    }

    fn flush_recording(&mut self, why: &'static str) {
        self.out.save_in_background(why);
    }

    fn run_hook(&mut self, env: Vec<(String, String)>) {
        if let Some(cmd) = &self.settings.on_alert {
            self.courier.actions.hook(cmd.clone(), env);
        }
    }

    fn notify(&mut self, title: String, body: String) {
        self.courier.actions.notify(title, body);
    }
}

#[cfg(test)]
mod tests;
