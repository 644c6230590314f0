//! The watch's side of the run's step reports (see `crate::steps`): each look takes the
//! new entries, maps their device to NVML and hands them to the engine, and hands on a
//! CUDA out-of-memory error the client reported.

use std::time::Instant;

use watchdog_engine::StepBatch;
use watchdog_types::Phase;

use super::Watch;

impl Watch {
    /// Each tick, before the decision: the step reports, and the acknowledgment when a
    /// look is due (a save no request asked for, the last-chance save, and a checkpoint a
    /// restart may resume from, measured now rather than at the exit, when it may be half
    /// rewritten).
    pub(super) fn read_steps_and_saves(&mut self, now: Instant) {
        self.check_steps(now, false);
        self.look_at_the_ack(now);
    }

    /// At the exit: the client writes a CUDA out-of-memory error's entry, and
    /// acknowledges its last-chance save, right before it.
    pub(super) fn read_last_steps_and_saves(&mut self) {
        self.check_steps(Instant::now(), true);
        if self.engine.alerts_sent() == 0 {
            self.check_ack();
        }
    }

    /// One look at `<request file>.steps` and at each rank's `<request file>.steps.<pid>`
    /// at `now`: the new reports to the engine (their alerts wait for the next decision),
    /// the exception for the verdict. The ranks' files are looked for on their own
    /// schedule (`StepsIntake::check_ranks_due`), and all of them at the `last` look.
    fn check_steps(&mut self, now: Instant, last: bool) {
        let target = self.run.target.pid;
        let sampler = &mut self.sampler;
        let in_tree = |pid| {
            if pid == target || sampler.tree_pids().contains(&pid) {
                return true;
            }
            // A process started since the tree was last read (a worker a launcher just
            // spawned) is looked for once more before its file is refused.
            sampler.tree_mut().refresh_if_changed();
            sampler.tree_pids().contains(&pid)
        };
        let shared = if last {
            self.replies.steps.check(in_tree)
        } else {
            self.replies.steps.check_due(now, in_tree)
        };
        if let Some(taken) = shared {
            self.take_steps(taken, now);
        }
        let ranks = if last {
            self.replies.steps.check_ranks(self.sampler.tree_pids())
        } else {
            self.replies
                .steps
                .check_ranks_due(self.sampler.tree_pids(), now)
        };
        for taken in ranks {
            self.take_steps(taken, now);
        }
    }

    /// One writer's new reports to the engine, and its exception; a client showed itself.
    fn take_steps(&mut self, taken: crate::steps::Taken, now: Instant) {
        self.replies.client_showed(now);
        let (resource, gpu) = self.replies.gpu_view.locate(&taken.device, taken.pid);
        if resource.is_none() && !self.replies.steps_unmatched_said && !taken.new.is_empty() {
            self.replies.steps_unmatched_said = true;
            tracing::info!(
                "the step reports' device ({}) is not a GPU NVML lists: its peaks are not predicted",
                describe(&taken.device)
            );
        }
        tracing::debug!(
            "step reports: {} new from PID {} ({} steps)",
            taken.new.len(),
            taken.pid,
            taken.new.iter().map(|r| u64::from(r.folded)).sum::<u64>()
        );
        // A training step counts towards the step the attempt reached (the restart's
        // progress rule); an evaluation's batch index is not a training step.
        for r in taken.new.iter().filter(|r| r.phase == Phase::Train) {
            self.saw_step(r.step);
        }
        let t_ns = now.duration_since(self.clock.start).as_nanos() as u64;
        let mut actions = Vec::new();
        self.engine.observe_steps(
            &StepBatch {
                resource,
                writer: taken.pid,
                reports: &taken.new,
                gpu,
            },
            t_ns,
            &mut actions,
        );
        if let Some(oom) = taken.exception {
            actions.extend(self.engine.cuda_oom_reported(oom, resource));
        }
        self.perform(actions, None);
    }
}

/// `index 0, GPU-5a1b...` for the log.
fn describe(d: &crate::steps::DeviceRef) -> String {
    let parts: Vec<String> = [
        d.index.map(|i| format!("index {i}")),
        d.uuid
            .as_ref()
            .map(|u| watchdog_types::quote::quote_value(u)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "none named".to_string()
    } else {
        parts.join(", ")
    }
}
