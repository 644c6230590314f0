//! The engine's side of the run's step reports (`<request file>.steps`): each batch of
//! new reports goes to a [`StepPeakPredictor`] per GPU and writing process, with what
//! the allocator can have on that GPU; an alert becomes a pending alert on the GPU's
//! resource, chosen by [`Engine::decide`] like any other. A CUDA out-of-memory error the
//! run reports is kept for the verdict and said once.
//!
//! No I/O: the binary reads the file, maps its device to an NVML device and reads NVML's
//! per-process figures; this module only decides.

pub use watchdog_predictor::step_peak::StepReport;
use watchdog_predictor::step_peak::{Capacity, StepPeakAlert, StepPeakConfig, StepPeakPredictor};
use watchdog_types::units::{format_bytes, format_duration_s};
use watchdog_types::{AlertReason, EventBody, Forecast, Phase, ResourceId, Sample};

use crate::verdict::CudaOom;
use crate::{Action, Engine, Level, Pending};

/// What NVML shows on one device besides the writer's allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuUse {
    /// Memory the other processes on the device hold, bytes (NVML's process lists).
    pub others: u64,
    /// The writing process's own NVML usage, bytes, when NVML lists it.
    pub own: Option<u64>,
}

/// One read of the run's step reports, mapped to a GPU.
#[derive(Debug, Clone, Copy)]
pub struct StepBatch<'a> {
    /// The GPU resource of the reports' device; `None` when NVML lists no such device
    /// (the reports are then only kept for nothing: there is no capacity to judge by).
    pub resource: Option<ResourceId>,
    /// The PID that wrote them.
    pub writer: u32,
    /// The entries not seen before, oldest first.
    pub reports: &'a [StepReport],
    /// NVML's figures on the device now.
    pub gpu: GpuUse,
}

/// A client's acknowledgment, as the engine takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acknowledgment {
    /// The request handled; 0 for a save no request asked for.
    pub seq: u64,
    /// When the save returned, seconds since the epoch.
    pub time_unix: f64,
    /// The checkpoint written, when the client said.
    pub path: Option<String>,
    /// The step it holds, when the client said.
    pub step: Option<u64>,
    /// Why the client saved without a request (`cuda_oom`).
    pub cause: Option<String>,
}

/// The cause of a last-chance save after a CUDA out-of-memory error.
pub const CAUSE_CUDA_OOM: &str = "cuda_oom";

/// One device's step-peak predictor, for one writing process.
#[derive(Debug, Clone)]
pub(crate) struct StepPeakState {
    resource: ResourceId,
    writer: u32,
    predictor: StepPeakPredictor,
    capacity: Option<Capacity>,
    /// The highest peak reported when it alerted, while its episode lasts.
    alerted_peak: Option<u64>,
    /// The run saved since the alert: a peak below `alerted_peak` starts a new episode.
    saved_since: bool,
    /// The writer's last report taken (its `n`).
    last_n: u64,
}

impl Engine {
    /// Takes a batch of new step reports: each goes to the predictor of its device and
    /// writer with what the allocator can have there (total − others − the writer's
    /// NVML usage outside the allocator), and an alert the predictor decides waits in
    /// this tick's alerts for [`decide`](Self::decide). `t_ns` is the tick's time.
    pub fn observe_steps(&mut self, batch: &StepBatch<'_>, t_ns: u64, out: &mut Vec<Action>) {
        let Some(resource) = batch.resource else {
            return;
        };
        let Some(last) = batch.reports.last() else {
            return;
        };
        // The device's total as CUDA can allocate it: the GPU resource's limit.
        let Some(total) = self
            .states
            .get(resource.0 as usize)
            .and_then(|st| st.last)
            .map(|s| s.limit)
        else {
            return;
        };
        let config = StepPeakConfig {
            lead_s: self.lead_s,
            ..StepPeakConfig::default()
        };
        let i = match self
            .step_peaks
            .iter()
            .position(|p| p.resource == resource && p.writer == batch.writer)
        {
            Some(i) => i,
            None => {
                self.step_peaks.push(StepPeakState {
                    resource,
                    writer: batch.writer,
                    predictor: StepPeakPredictor::new(config),
                    capacity: None,
                    alerted_peak: None,
                    saved_since: false,
                    last_n: 0,
                });
                self.step_peaks.len() - 1
            }
        };
        let save_s = self.save_s;
        let Some(state) = self.step_peaks.get_mut(i) else {
            return;
        };
        // Only reports not taken before come here: one numbered at or before the last is
        // from a new client in the same PID (the process exec'd itself), a new program.
        if batch.reports.first().is_some_and(|r| r.n <= state.last_n) {
            state.predictor = StepPeakPredictor::new(config);
            state.alerted_peak = None;
            state.saved_since = false;
        }
        state.last_n = last.n;
        for r in batch.reports {
            let capacity = Capacity {
                total,
                others: batch.gpu.others,
                outside_allocator: batch.gpu.own.unwrap_or(0).saturating_sub(r.reserved),
            };
            state.predictor.observe(r, capacity);
            state.capacity = Some(capacity);
        }
        if let Some(alerted) = state.alerted_peak
            && state.saved_since
            && batch.reports.iter().map(|r| r.peak).max() < Some(alerted)
        {
            // The run saved and its peaks fell back: the next crossing alerts again.
            state.predictor.rearm();
            state.alerted_peak = None;
            state.saved_since = false;
            if let Some(st) = self.states.get(resource.0 as usize) {
                out.push(Action::Log(
                    Level::Info,
                    format!(
                        "{}: the step peaks fell back after the save; the next one that will not fit alerts again",
                        st.resource.name
                    ),
                ));
            }
        }
        let Some(alert) = state.predictor.decide(save_s) else {
            return;
        };
        state.alerted_peak = batch.reports.iter().map(|r| r.peak).max();
        let Some(st) = self.states.get(resource.0 as usize) else {
            return;
        };
        let sample = match st.last {
            Some(s) => Sample { t_ns, ..s },
            None => Sample {
                resource,
                t_ns,
                used: 0,
                limit: total,
            },
        };
        self.pending.push(Pending {
            id: resource.0 as usize,
            sample,
            forecast: Forecast {
                seconds_left: alert.seconds_left,
                rate_per_s: 0.0,
                confidence: 1.0,
                headroom: alert.available.saturating_sub(last.peak),
            },
            reason: alert.reason,
            step: Some(alert),
        });
    }

    /// The run's client reported a CUDA out-of-memory error (its step reports'
    /// `exception`) on the device of `resource`: kept for the verdict (with what the
    /// allocator could have there, from the last reports), said in the log and as a
    /// `cuda_oom` event.
    pub fn cuda_oom_reported(
        &mut self,
        mut oom: CudaOom,
        resource: Option<ResourceId>,
    ) -> Vec<Action> {
        if let Some(id) = resource {
            oom.resource = self
                .states
                .get(id.0 as usize)
                .map(|st| st.resource.name.clone());
            oom.available = self
                .step_peaks
                .iter()
                .filter(|p| p.resource == id)
                .find_map(|p| p.capacity.map(|c| c.available()));
        }
        if let Some(known) = &self.cuda_oom {
            // The save's acknowledgment may have come first: keep what it said.
            oom.saved = known.saved;
            oom.saved_path = oom.saved_path.or(known.saved_path.clone());
            oom.saved_step = oom.saved_step.or(known.saved_step);
        }
        let out = vec![
            Action::Log(Level::Warn, format!("the run reported {}", oom.sentence())),
            Action::Emit(EventBody::CudaOom {
                resource: oom.resource.clone(),
                step: oom.step,
                phase: oom.phase,
                peak: oom.peak,
                reserved: oom.reserved,
                available: oom.available,
                message: oom.message.clone(),
            }),
        ];
        self.cuda_oom = Some(oom);
        out
    }

    /// An acknowledgment with its fields: a requested save (see
    /// [`acknowledged`](Self::acknowledged)), or a save no request asked for, which
    /// teaches nothing about how long a requested save takes; one with the cause
    /// `cuda_oom` is kept for the verdict.
    pub fn acknowledged_with(&mut self, ack: &Acknowledgment) -> Vec<Action> {
        if ack.cause.is_none() {
            let mut out = self.acknowledged(ack.seq, ack.time_unix);
            for a in &mut out {
                if let Action::Emit(EventBody::Ack {
                    seq, path, step, ..
                }) = a
                {
                    *seq = Some(ack.seq);
                    path.clone_from(&ack.path);
                    *step = ack.step;
                }
            }
            return out;
        }
        let cause = ack.cause.clone().unwrap_or_default();
        if cause == CAUSE_CUDA_OOM {
            let oom = self.cuda_oom.get_or_insert_with(CudaOom::default);
            oom.saved = true;
            oom.saved_path.clone_from(&ack.path);
            oom.saved_step = ack.step;
        }
        // The cause and the path are the run's own text: escaped, one line of the log.
        let printable = watchdog_types::units::printable;
        let mut line = format!(
            "the run saved a checkpoint on its own ({})",
            printable(&cause)
        );
        if let Some(p) = &ack.path {
            // A path is clipped too (issue 29): one quoting for every path a run hands over.
            line.push_str(&format!(": {}", watchdog_types::quote::quote_value(p)));
        }
        if let Some(s) = ack.step {
            line.push_str(&format!(" (step {s})"));
        }
        vec![
            Action::Log(Level::Info, line),
            Action::Emit(EventBody::Ack {
                checkpoint_s: None,
                lead_s: self.lead_s,
                seq: Some(ack.seq),
                path: ack.path.clone(),
                step: ack.step,
                cause: ack.cause.clone(),
            }),
        ]
    }

    /// The requested save was acknowledged after taking `seconds`: the step-peak
    /// predictors lead by at least that, and an alerted episode may end.
    pub(crate) fn note_step_save(&mut self, seconds: Option<f64>) {
        if let Some(d) = seconds {
            self.save_s = self.save_s.max(d);
        }
        for p in &mut self.step_peaks {
            if p.alerted_peak.is_some() {
                p.saved_since = true;
            }
        }
    }

    /// The CUDA out-of-memory error the run reported, if it did.
    pub fn cuda_oom(&self) -> Option<&CudaOom> {
        self.cuda_oom.as_ref()
    }
}

/// What a step-peak alert says: what will not fit, by how much, and for fragmentation
/// the allocator setting that helps.
pub(crate) fn step_sentence(name: &str, a: &StepPeakAlert) -> String {
    // An evaluation alert counts evaluations ahead, the others steps.
    let evaluation = a.reason == AlertReason::EvalPeak || a.phase == Phase::Eval;
    let what = match (evaluation, a.phase) {
        (true, _) if a.steps_ahead > 1 => "an evaluation's peak",
        (true, _) => "the next evaluation's peak",
        (_, Phase::Train) => "the next training step's peak",
        (_, _) => "the next step's peak",
    };
    let unit = if evaluation {
        "evaluation(s)"
    } else {
        "step(s)"
    };
    let when = match a.seconds_left {
        Some(s) => format!(
            " in about {} ({} {unit} ahead)",
            format_duration_s(s),
            a.steps_ahead
        ),
        None => format!(" {} {unit} ahead", a.steps_ahead),
    };
    let figures = format!(
        "{} after step {}, {} available to the allocator",
        format_bytes(a.predicted_peak),
        a.step,
        format_bytes(a.available)
    );
    let fits = format!("{what} will not fit{when}: predicted {figures}");
    if a.reason == AlertReason::Fragmentation {
        // Growing retries alert with a peak that fits what NVML shows: say what was seen.
        let seen = if a.predicted_peak <= a.available {
            format!("the allocator retries allocations with a peak of {figures}")
        } else {
            format!("{fits}; the allocator retries or needs reserved but unallocated memory")
        };
        format!(
            "{name} is fragmented: {seen}; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the next run"
        )
    } else {
        format!("{name}: {fits}")
    }
}
