//! Running the engine over a recorded trace: exactly what a live watch runs.
//!
//! Pure: text in, a [`ReplayReport`] out. One [`Engine`] in a dry run, a resource for
//! each of the trace's (its kind taken from the resource's name, see
//! [`ResourceKind::of_resource_name`]), fed every sample in file order with times
//! relative to the trace's first sample; after each sample the engine decides, as a
//! live watch does after each tick, and the run's acknowledgments (`# ack_after_s:`)
//! reach it as they would. `watchdog replay` prints [`ReplayReport::to_json_lines`].
//!
//! A step-peak trace (the client's step reports with the device's figures, see
//! [`watchdog_formats::step_trace`]) goes to the step-peak predictor instead, one report a
//! line ([`run_steps`]).

use std::fmt::Write as _;

use watchdog_types::{AlertReason, EventBody, Resource, ResourceId, ResourceKind, Sample};

use watchdog_formats::step_trace::{self, StepRow};
use watchdog_formats::trace::{self, Trace, TraceError, TraceSample};
use watchdog_predictor::step_peak::{
    Capacity, StepPeakAlert, StepPeakConfig, StepPeakPredictor, StepReport,
};
use watchdog_predictor::{Decision, Observation};

use crate::{Action, Delivery, Engine, EngineSettings, StepPeak};

/// One alert raised during the replay.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRecord {
    /// Resource name as in the trace.
    pub resource: String,
    /// The resource's kind.
    pub kind: ResourceKind,
    /// Why it fired.
    pub reason: AlertReason,
    /// Seconds from the trace's first sample.
    pub time_s: f64,
    /// Predicted seconds to exhaustion at the alert (None when only the floor or step rule fired).
    pub predicted_s: Option<f64>,
    /// Usage at the alert.
    pub used: u64,
    /// Limit at the alert.
    pub limit: u64,
    /// Growth rate the prediction rested on, units per second.
    pub rate_per_s: f64,
    /// Confidence in [0, 1].
    pub confidence: f64,
    /// For a step-peak trace: the phase, the step and the predicted peak (`used` is then
    /// the step's peak and `limit` what the allocator could have).
    pub step_peak: Option<StepPeak>,
}

/// Per-resource totals.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSummary {
    /// Resource name as in the trace.
    pub resource: String,
    /// The resource's kind.
    pub kind: ResourceKind,
    /// Samples seen.
    pub samples: usize,
    /// Largest usage seen.
    pub peak_used: u64,
    /// The last limit seen.
    pub limit: u64,
    /// Alerts raised.
    pub alerts: usize,
    /// Re-arms (ends of alert episodes).
    pub rearms: usize,
    /// Seconds from the trace start when usage first reached the limit.
    pub exhausted_at_s: Option<f64>,
}

impl ResourceSummary {
    /// A resource nothing was seen of yet.
    fn new(resource: String, kind: ResourceKind) -> ResourceSummary {
        ResourceSummary {
            resource,
            kind,
            samples: 0,
            peak_used: 0,
            limit: 0,
            alerts: 0,
            rearms: 0,
            exhausted_at_s: None,
        }
    }
}

/// Everything a replay found.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Alerts, in time order.
    pub alerts: Vec<AlertRecord>,
    /// One summary per resource, in order of first appearance.
    pub resources: Vec<ResourceSummary>,
    /// Samples replayed.
    pub samples: usize,
    /// Seconds from the first to the last sample.
    pub duration_s: f64,
    /// Lead time used, seconds.
    pub lead_s: f64,
    /// Sampling interval used, seconds.
    pub interval_s: f64,
    /// Samples skipped because their time was before an earlier sample's.
    pub time_went_back: Option<TimeWentBack>,
}

/// Where a trace's time first went backwards; such samples are skipped (a predictor
/// fed a time before its last one would see a negative interval).
#[derive(Debug, Clone, PartialEq)]
pub struct TimeWentBack {
    /// The 1-based line of the first such sample (`None` for a trace parsed before).
    pub line: Option<usize>,
    /// Its time, seconds from the trace's first sample.
    pub t_s: f64,
    /// The latest time before it, seconds from the trace's first sample.
    pub after_s: f64,
    /// How many samples were skipped in all.
    pub skipped: usize,
}

impl TimeWentBack {
    /// Counts a sample at `t_s` (from `line`) that came after one at `last_s`, times from
    /// the trace's start `start_s`, in `slot` (the first such sample is the one named).
    fn note(
        slot: &mut Option<TimeWentBack>,
        line: Option<usize>,
        t_s: f64,
        last_s: f64,
        start_s: f64,
    ) {
        slot.get_or_insert(TimeWentBack {
            line,
            t_s: t_s - start_s,
            after_s: last_s - start_s,
            skipped: 0,
        })
        .skipped += 1;
    }

    /// One line for people.
    pub fn warning(&self) -> String {
        let at = match self.line {
            Some(line) => format!("line {line}"),
            None => "a sample".to_string(),
        };
        format!(
            "time goes backwards at {at} ({}s after {}s); {} sample(s) earlier than one before them were skipped",
            json_f64(self.t_s, 3),
            json_f64(self.after_s, 3),
            self.skipped
        )
    }
}

/// Parses `text` and replays it with the given lead and interval (seconds; the
/// floor stays at its default).
///
/// The samples go to the predictors as they are parsed, never all held at
/// once; the report is the one [`run_trace`] gives for [`trace::parse`]'s trace.
pub fn run(text: &str, settings: &EngineSettings) -> Result<ReplayReport, TraceError> {
    if step_trace::is_step_trace(text) {
        return run_steps(text, settings);
    }
    let mut replayer = Replayer::new(settings, |_: &TraceSample, _: f64, _: &Observation| {})
        .acknowledging(leading_meta(text, "ack_after_s").and_then(|v| v.parse().ok()));
    trace::parse_into(text, true, &mut replayer)?;
    Ok(replayer.finish())
}

/// The value of a `# key: value` line among the comment lines that open `text`.
fn leading_meta<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| {
            l.trim_start_matches('#')
                .trim()
                .strip_prefix(key)?
                .strip_prefix(':')
        })
        .map(str::trim)
}

/// Replays a parsed trace with `config`; a `# ack_after_s: S` header makes the run
/// acknowledge every request S seconds after it.
pub fn run_trace(trace: &Trace, config: &EngineSettings) -> ReplayReport {
    run_trace_with(trace, config, |_, _, _| {})
}

/// Replays a parsed trace, calling `inspect(sample, seconds_from_start, observation)`
/// after every sample (the accuracy tools use it to read every forecast).
pub fn run_trace_with<F>(trace: &Trace, config: &EngineSettings, inspect: F) -> ReplayReport
where
    F: FnMut(&TraceSample, f64, &Observation),
{
    let mut replayer = Replayer::new(config, inspect)
        .acknowledging(trace.meta("ack_after_s").and_then(|v| v.parse().ok()));
    replayer.add_resources(&trace.resources);
    for &s in &trace.samples {
        replayer.observe(s, None);
    }
    replayer.finish()
}

/// How an adaptive replay samples: each resource when its rate policy says (see
/// [`watchdog_predictor::sample_rate`]), not every sample of the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// `max_interval`, seconds (clamped as the engine clamps it).
    pub max_interval_s: f64,
    /// Model a cgroup v1 usage threshold for every cgroup memory resource: besides when it
    /// is due, it is sampled at the first sample of the trace whose usage reaches the
    /// level the policy armed ([`Engine::wake_at`]).
    pub kernel_wake: bool,
}

/// How one resource was sampled in an adaptive replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateSummary {
    /// Resource name as in the trace.
    pub resource: String,
    /// Samples the trace had of it.
    pub offered: usize,
    /// Samples taken.
    pub taken: usize,
    /// Of those, taken only because the modelled kernel threshold was crossed.
    pub woken: usize,
    /// Seconds spent sampling slowly (far from the limit), and the samples that ended them.
    pub slow_s: f64,
    /// Samples taken while slow.
    pub slow_samples: usize,
    /// Seconds spent sampling at `interval` (approaching).
    pub fast_s: f64,
    /// Samples taken while fast.
    pub fast_samples: usize,
}

impl RateSummary {
    /// Samples a second while slow (`None` when it never was).
    pub fn slow_rate(&self) -> Option<f64> {
        (self.slow_s > 0.0).then(|| self.slow_samples as f64 / self.slow_s)
    }

    /// Samples a second while fast (`None` when it never was).
    pub fn fast_rate(&self) -> Option<f64> {
        (self.fast_s > 0.0).then(|| self.fast_samples as f64 / self.fast_s)
    }
}

/// Replays a parsed trace as a live watch with adaptive rates would sample it: the trace
/// stands for the continuous usage (at its own resolution, the watch's `interval`), and
/// each resource is sampled at the latest sample of the trace not after it is due
/// ([`Engine::due_at_s`]), or when the modelled kernel threshold wakes it. `inspect` sees
/// the samples taken. Returns the report and how each resource was sampled.
pub fn run_trace_adaptive<F>(
    trace: &Trace,
    config: &EngineSettings,
    adaptive: Adaptive,
    inspect: F,
) -> (ReplayReport, Vec<RateSummary>)
where
    F: FnMut(&TraceSample, f64, &Observation),
{
    let mut replayer = Replayer::new(config, inspect)
        .acknowledging(trace.meta("ack_after_s").and_then(|v| v.parse().ok()));
    replayer.engine.set_max_interval(adaptive.max_interval_s);
    replayer.add_resources(&trace.resources);
    let mut rates: Vec<RateSummary> = trace
        .resources
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if adaptive.kernel_wake && replayer.resources[i].kind == ResourceKind::CgroupMemory {
                replayer.engine.set_kernel_wake(resource_id(i), true);
            }
            RateSummary {
                resource: name.clone(),
                ..RateSummary::default()
            }
        })
        .collect();
    // The time of the next sample of the same resource, for every sample.
    let mut next_t = vec![None; trace.samples.len()];
    let mut seen: Vec<Option<f64>> = vec![None; trace.resources.len()];
    for (i, s) in trace.samples.iter().enumerate().rev() {
        if let Some(slot) = seen.get_mut(s.resource) {
            next_t[i] = *slot;
            *slot = Some(s.t_s);
        }
    }
    let start = trace.samples.first().map_or(0.0, |s| s.t_s);
    // Per resource: the last sample taken (relative time) and whether it left it slow.
    let mut last: Vec<Option<(f64, bool)>> = vec![None; trace.resources.len()];
    for (i, &s) in trace.samples.iter().enumerate() {
        let (Some(rate), Some(prev)) = (rates.get_mut(s.resource), last.get_mut(s.resource)) else {
            replayer.observe(s, None);
            continue;
        };
        rate.offered += 1;
        let id = resource_id(s.resource);
        let t = s.t_s - start;
        let eps = 1e-9 * t.abs().max(1.0);
        let due = replayer
            .engine
            .due_at_s(id)
            .is_none_or(|due| t + eps >= due || next_t[i].is_none_or(|n| n - start > due + eps));
        let woken = !due && replayer.engine.wake_at(id).is_some_and(|w| s.used >= w);
        if !due && !woken {
            continue;
        }
        let before = replayer.samples;
        replayer.observe(s, None);
        if replayer.samples == before {
            continue;
        }
        rate.taken += 1;
        rate.woken += usize::from(woken);
        if let Some((t0, slow)) = *prev {
            if slow {
                rate.slow_s += t - t0;
                rate.slow_samples += 1;
            } else {
                rate.fast_s += t - t0;
                rate.fast_samples += 1;
            }
        }
        *prev = Some((t, replayer.engine.is_slow(id)));
    }
    (replayer.finish(), rates)
}

/// The engine's id of the trace's `i`-th resource.
fn resource_id(i: usize) -> ResourceId {
    ResourceId(i.min(u16::MAX as usize) as u16)
}

/// The engine and one summary per resource, fed sample by sample.
struct Replayer<'c, F> {
    config: &'c EngineSettings,
    inspect: F,
    engine: Engine,
    resources: Vec<ResourceSummary>,
    alerts: Vec<AlertRecord>,
    samples: usize,
    /// Time of the first sample, the origin of replay times.
    start: Option<f64>,
    last_t: f64,
    time_went_back: Option<TimeWentBack>,
    /// The run acknowledges every request this many seconds after it (`# ack_after_s:`).
    ack_after_s: Option<f64>,
    /// When the next acknowledgment is due (replay time).
    ack_due: Option<f64>,
}

impl<'c, F> Replayer<'c, F>
where
    F: FnMut(&TraceSample, f64, &Observation),
{
    fn new(config: &'c EngineSettings, inspect: F) -> Self {
        // Nothing is sent or written in a replay: the engine's dry run.
        let settings = EngineSettings {
            dry_run: true,
            hook: false,
            ..config.clone()
        };
        Self {
            config,
            inspect,
            engine: Engine::new(&[], settings),
            resources: Vec::new(),
            alerts: Vec::new(),
            samples: 0,
            start: None,
            last_t: 0.0,
            time_went_back: None,
            ack_after_s: None,
            ack_due: None,
        }
    }

    /// Replays acknowledgments: `after_s` seconds after each alert, every predictor
    /// hears that the run saved (as the watchdog tells them when the ack file appears).
    fn acknowledging(mut self, after_s: Option<f64>) -> Self {
        self.ack_after_s = after_s.filter(|a| a.is_finite() && *a >= 0.0);
        self
    }

    /// A resource and a summary for each of `names` past the ones already there.
    fn add_resources(&mut self, names: &[String]) {
        for name in names.iter().skip(self.resources.len()) {
            let kind = ResourceKind::of_resource_name(name);
            self.engine.add_resource(Resource {
                id: resource_id(self.resources.len()),
                kind,
                name: name.clone(),
                source: "trace".to_string(),
            });
            self.resources
                .push(ResourceSummary::new(name.clone(), kind));
        }
    }

    /// Feeds one sample (from `line`, when known) to its resource's predictor.
    fn observe(&mut self, s: TraceSample, line: Option<usize>) {
        if self.start.is_some() && s.t_s < self.last_t {
            let start = self.start.unwrap_or(0.0);
            TimeWentBack::note(&mut self.time_went_back, line, s.t_s, self.last_t, start);
            return;
        }
        self.samples += 1;
        let start = match self.start {
            Some(start) => start,
            None => {
                self.start = Some(s.t_s);
                self.last_t = s.t_s;
                s.t_s
            }
        };
        if s.resource >= self.resources.len() || s.resource > u16::MAX as usize {
            return;
        }
        let t = s.t_s - start;
        self.last_t = self.last_t.max(s.t_s);
        if self.ack_due.is_some_and(|due| t >= due) {
            self.ack_due = None;
            let _ = self.engine.acknowledged(self.engine.last_request(), t);
        }
        let sample = Sample {
            resource: ResourceId(s.resource as u16),
            t_ns: (t.max(0.0) * 1e9) as u64,
            used: s.used,
            limit: s.limit,
        };
        let mut actions = Vec::new();
        let observed = self.engine.observe(&sample, &mut actions);
        if let Some(plan) = self.engine.decide() {
            // What a live watch does next, with nothing sent: the time is the replay's.
            actions.extend(self.engine.alerted(plan, &Delivery::default(), t));
            self.ack_due = self.ack_after_s.map(|a| t + a);
        }
        let Some(sum) = self.resources.get_mut(s.resource) else {
            return;
        };
        if actions
            .iter()
            .any(|a| matches!(a, Action::Emit(EventBody::Rearm { .. })))
        {
            sum.rearms += 1;
        }
        sum.samples += 1;
        sum.peak_used = sum.peak_used.max(s.used);
        sum.limit = s.limit;
        let limited = s.limit != 0 && s.limit != u64::MAX;
        if limited && s.used >= s.limit && sum.exhausted_at_s.is_none() {
            sum.exhausted_at_s = Some(t);
        }
        let Some(obs) = observed else {
            return;
        };
        match obs.decision {
            Decision::Alert(reason) => {
                sum.alerts += 1;
                self.alerts.push(AlertRecord {
                    resource: sum.resource.clone(),
                    kind: sum.kind,
                    reason,
                    time_s: t,
                    predicted_s: obs.forecast.seconds_left,
                    used: s.used,
                    limit: s.limit,
                    rate_per_s: obs.forecast.rate_per_s,
                    confidence: obs.forecast.confidence,
                    step_peak: None,
                });
            }
            Decision::Rearm | Decision::Quiet => {}
        }
        (self.inspect)(&s, t, &obs);
    }

    fn finish(self) -> ReplayReport {
        let start = self.start.unwrap_or(0.0);
        ReplayReport {
            alerts: self.alerts,
            resources: self.resources,
            samples: self.samples,
            duration_s: self.last_t - start,
            lead_s: self.config.lead_s,
            interval_s: self.config.interval_s,
            time_went_back: self.time_went_back,
        }
    }
}

impl<F> trace::Sink for Replayer<'_, F>
where
    F: FnMut(&TraceSample, f64, &Observation),
{
    fn sample(&mut self, sample: TraceSample, resources: &[String], line: usize) {
        if self.resources.len() < resources.len() {
            self.add_resources(resources);
        }
        self.observe(sample, Some(line));
    }
}

/// Replays a step-peak trace through the step-peak predictor of one device (`# resource:`,
/// else `gpu0`), with the lead of `settings` and the save time of `# save_s:` (0 without
/// it): one report a line, the device's capacity from the same line, a decision after
/// each, as the watch decides after each read of the `.steps` file.
pub fn run_steps(text: &str, settings: &EngineSettings) -> Result<ReplayReport, TraceError> {
    let save_s = leading_meta(text, "save_s")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(0.0);
    let resource = leading_meta(text, "resource").unwrap_or("gpu0").to_string();
    let mut replay = StepReplay::new(settings, save_s, resource);
    step_trace::parse_into(text, |row, line| {
        replay.observe(&row, Some(line));
    })?;
    Ok(replay.finish(settings))
}

/// The step-peak predictor fed a step trace line by line, and what it did.
pub struct StepReplay {
    predictor: StepPeakPredictor,
    save_s: f64,
    n: u64,
    start: Option<f64>,
    last_t: f64,
    first_ooms: Option<u64>,
    time_went_back: Option<TimeWentBack>,
    summary: ResourceSummary,
    alerts: Vec<AlertRecord>,
}

impl StepReplay {
    /// A replay with the lead of `settings` and a save of `save_s` seconds, the device
    /// named `resource`.
    pub fn new(settings: &EngineSettings, save_s: f64, resource: String) -> StepReplay {
        StepReplay {
            predictor: StepPeakPredictor::new(StepPeakConfig {
                lead_s: settings.lead_s,
                ..StepPeakConfig::default()
            }),
            save_s,
            n: 0,
            start: None,
            last_t: 0.0,
            first_ooms: None,
            time_went_back: None,
            summary: ResourceSummary::new(resource, ResourceKind::GpuMemory),
            alerts: Vec::new(),
        }
    }

    /// Feeds one line of the trace (from `line`, when known); the alert it made, if any.
    pub fn observe(&mut self, row: &StepRow, line: Option<usize>) -> Option<StepPeakAlert> {
        let start = *self.start.get_or_insert(row.t_s);
        if row.t_s < self.last_t {
            TimeWentBack::note(&mut self.time_went_back, line, row.t_s, self.last_t, start);
            return None;
        }
        self.last_t = row.t_s;
        let t = row.t_s - start;
        self.n += 1;
        let report = StepReport {
            n: self.n,
            step: row.step,
            phase: row.phase,
            pass: row.pass,
            t_s: t,
            duration_s: row.duration_s,
            allocated: row.allocated,
            reserved: row.reserved,
            peak: row.peak,
            retries: row.retries,
            ooms: row.ooms,
            folded: row.folded,
        };
        let capacity = Capacity {
            total: row.total,
            others: row.others,
            outside_allocator: row.outside,
        };
        let was_alerted = self.predictor.alerted();
        self.predictor.observe(&report, capacity);
        let alert = self.predictor.decide(self.save_s);
        if was_alerted && !self.predictor.alerted() {
            self.summary.rearms += 1;
        }
        let sum = &mut self.summary;
        sum.samples += 1;
        sum.peak_used = sum.peak_used.max(row.peak);
        sum.limit = capacity.available();
        let first_ooms = *self.first_ooms.get_or_insert(row.ooms);
        if row.ooms > first_ooms && sum.exhausted_at_s.is_none() {
            sum.exhausted_at_s = Some(t);
        }
        if let Some(a) = alert {
            sum.alerts += 1;
            self.alerts.push(AlertRecord {
                resource: sum.resource.clone(),
                kind: sum.kind,
                reason: a.reason,
                time_s: t,
                predicted_s: a.seconds_left,
                used: row.peak,
                limit: a.available,
                rate_per_s: 0.0,
                confidence: 1.0,
                step_peak: Some(StepPeak {
                    phase: a.phase,
                    step: a.step,
                    predicted_peak: a.predicted_peak,
                }),
            });
        }
        alert
    }

    /// The report: every alert and the device's summary.
    pub fn finish(self, settings: &EngineSettings) -> ReplayReport {
        let start = self.start.unwrap_or(0.0);
        ReplayReport {
            alerts: self.alerts,
            samples: self.summary.samples,
            resources: vec![self.summary],
            duration_s: self.last_t - start,
            lead_s: settings.lead_s,
            interval_s: settings.interval_s,
            time_went_back: self.time_went_back,
        }
    }
}

impl ReplayReport {
    /// One JSON object per line: every alert
    /// (`{"event":"alert","resource":...,"time":...,"predicted_s":...,"used":...,"limit":...,...}`)
    /// then `{"event":"summary",...}`. Each line ends with `\n`.
    pub fn to_json_lines(&self) -> String {
        let mut out = String::new();
        for a in &self.alerts {
            out.push_str("{\"event\":\"alert\",\"resource\":");
            json_str(&mut out, &a.resource);
            let _ = write!(
                out,
                ",\"kind\":\"{}\",\"reason\":\"{}\",\"time\":{},\"predicted_s\":{},\"used\":{},\"limit\":{},\"rate_per_s\":{},\"confidence\":{}}}",
                a.kind.as_str(),
                a.reason.as_str(),
                json_f64(a.time_s, 3),
                a.predicted_s
                    .map_or_else(|| "null".to_string(), |p| json_f64(p, 3)),
                a.used,
                json_limit(a.limit),
                json_f64(a.rate_per_s, 3),
                json_f64(a.confidence, 3),
            );
            if let Some(p) = a.step_peak {
                out.pop();
                let _ = write!(
                    out,
                    ",\"phase\":\"{}\",\"step\":{},\"predicted_peak\":{}",
                    p.phase, p.step, p.predicted_peak
                );
                if a.reason == AlertReason::Fragmentation {
                    out.push_str(",\"advice\":");
                    json_str(
                        &mut out,
                        watchdog_predictor::step_peak::FRAGMENTATION_ADVICE,
                    );
                }
                out.push('}');
            }
            out.push('\n');
        }
        let _ = write!(
            out,
            "{{\"event\":\"summary\",\"samples\":{},\"duration_s\":{},\"lead_s\":{},\"interval_s\":{},\"alerts\":{},\"resources\":[",
            self.samples,
            json_f64(self.duration_s, 3),
            json_f64(self.lead_s, 3),
            json_f64(self.interval_s, 3),
            self.alerts.len(),
        );
        for (i, r) in self.resources.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"resource\":");
            json_str(&mut out, &r.resource);
            let _ = write!(
                out,
                ",\"kind\":\"{}\",\"samples\":{},\"peak_used\":{},\"limit\":{},\"alerts\":{},\"rearms\":{},\"exhausted_at\":{}}}",
                r.kind.as_str(),
                r.samples,
                r.peak_used,
                json_limit(r.limit),
                r.alerts,
                r.rearms,
                r.exhausted_at_s
                    .map_or_else(|| "null".to_string(), |t| json_f64(t, 3)),
            );
        }
        out.push_str("]}\n");
        out
    }
}

fn json_limit(limit: u64) -> String {
    if limit == u64::MAX {
        "null".to_string()
    } else {
        limit.to_string()
    }
}

/// A finite number with at most `decimals` decimals (trailing zeros trimmed); `null` otherwise.
fn json_f64(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "null".to_string();
    }
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".to_string() } else { s }
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Control characters and U+2028/U+2029, which JSON allows raw but line
            // readers (JavaScript's among them) take as line breaks.
            c if watchdog_types::quote::needs_escape(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn settings(lead_s: f64, interval_s: f64) -> EngineSettings {
        EngineSettings {
            lead_s,
            interval_s,
            ..EngineSettings::default()
        }
    }

    fn leak_csv() -> String {
        // 1 unit/s from 0 toward 500, one sample a second.
        let mut s = String::from("time,used,limit,resource\n");
        for t in 0..500 {
            s.push_str(&format!("{t},{},500,cgroup_memory\n", t));
        }
        s
    }

    #[test]
    fn replay_alerts_once_before_exhaustion() {
        let r = run(&leak_csv(), &settings(30.0, 1.0)).unwrap();
        assert_eq!(r.alerts.len(), 1, "{r:?}");
        let a = &r.alerts[0];
        assert_eq!(a.reason, AlertReason::Trend);
        assert!((460.0..=470.0).contains(&a.time_s), "{a:?}");
        assert_eq!(r.samples, 500);
        let text = r.to_json_lines();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with(
            "{\"event\":\"alert\",\"resource\":\"cgroup_memory\",\"kind\":\"cgroup_memory\",\"reason\":\"trend\",\"time\":"
        ));
        assert!(
            lines[1].starts_with("{\"event\":\"summary\",\"samples\":500,"),
            "{}",
            lines[1]
        );
        assert!(
            lines[1].ends_with("\"exhausted_at\":null}]}"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn json_helpers() {
        assert_eq!(json_f64(1.5, 3), "1.5");
        assert_eq!(json_f64(2.0, 3), "2");
        assert_eq!(json_f64(-0.0001, 3), "0");
        assert_eq!(json_f64(f64::NAN, 3), "null");
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n\u{1}");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    /// A trace whose time went backwards was replayed without a word, with an alert at `"time": -5`.
    #[test]
    fn time_going_backwards_is_skipped_and_reported() {
        let mut text = String::from("time,used,limit\n");
        for t in 10..40 {
            text.push_str(&format!("{t},{},100\n", t * 3));
        }
        text.push_str("# a comment\n5,99,100\n6,99,100\n40,100,100\n");
        let r = run(&text, &settings(30.0, 1.0)).unwrap();
        let back = r.time_went_back.clone().expect("reported");
        assert_eq!(back.line, Some(33));
        assert_eq!(back.skipped, 2);
        assert_eq!(
            back.warning(),
            "time goes backwards at line 33 (-5s after 29s); 2 sample(s) earlier than one before them were skipped"
        );
        assert!(r.alerts.iter().all(|a| a.time_s >= 0.0), "{r:?}");
        assert!(!r.to_json_lines().contains(":-"), "{}", r.to_json_lines());
        assert_eq!((r.duration_s, r.samples), (30.0, 31));
        assert!(
            run(&leak_csv(), &settings(30.0, 1.0))
                .unwrap()
                .time_went_back
                .is_none()
        );
        // The parsed trace replays the same way, without line numbers.
        let parsed = run_trace(&trace::parse(&text).unwrap(), &settings(30.0, 1.0));
        assert_eq!(parsed.alerts, r.alerts);
        assert_eq!(parsed.time_went_back.map(|b| b.skipped), Some(2));
    }

    /// A step-peak trace: its own header, replayed by the step-peak predictor; the alert
    /// line says the phase, the step and the predicted peak.
    #[test]
    fn a_step_trace_is_replayed_by_the_step_peak_predictor() {
        let gib = 1u64 << 30;
        let mut text = String::from(
            "# save_s: 10\ntime,phase,step,pass,duration,allocated,reserved,peak,retries,ooms,total,others,outside\n",
        );
        // 4 MiB a step from 10 GiB on a 24 GiB card, 0.2 s steps.
        for step in 1..5000u64 {
            let peak = 10 * gib + step * (4 << 20);
            if peak > 23 * gib {
                break;
            }
            text.push_str(&format!(
                "{:.1},train,{step},1,0.2,{},{peak},{peak},0,0,{},0,{}\n",
                step as f64 * 0.2,
                6 * gib,
                24 * gib,
                gib / 2
            ));
        }
        let r = run(&text, &settings(30.0, 0.1)).unwrap();
        assert_eq!(r.alerts.len(), 1, "{r:?}");
        let a = &r.alerts[0];
        assert_eq!(a.reason, AlertReason::StepPeak);
        let fields = a.step_peak.unwrap();
        assert_eq!(fields.phase, watchdog_types::Phase::Train);
        assert!(fields.predicted_peak > a.used);
        assert_eq!(a.limit, 24 * gib - gib / 2);
        let json = r.to_json_lines();
        let first = json.lines().next().unwrap();
        assert!(
            first.contains(&format!(
                ",\"phase\":\"train\",\"step\":{},\"predicted_peak\":{}}}",
                fields.step, fields.predicted_peak
            )),
            "{first}"
        );
        assert_eq!(r.resources[0].resource, "gpu0");
        assert_eq!(r.resources[0].alerts, 1);
        // A malformed step line is an error with its line number.
        let bad = text.replace(",train,5,", ",walk,5,");
        assert!(matches!(
            run(&bad, &settings(30.0, 0.1)),
            Err(TraceError::Malformed { line: 7, .. })
        ));
    }

    #[test]
    fn malformed_trace_is_an_error() {
        assert!(matches!(
            run("time,used,limit\n0,x,1\n", &settings(30.0, 0.1)),
            Err(TraceError::Malformed { line: 2, .. })
        ));
    }
}
