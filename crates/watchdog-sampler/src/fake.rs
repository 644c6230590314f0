//! Stand-in sources for tests of the sampler, the predictor wiring and the binary:
//! [`ScriptedSource`] plays a list of outcomes, one per tick, and repeats the last one
//! forever; [`ReplaySource`] replays recorded samples by their timestamps.

use watchdog_types::{ResourceId, Sample};

use crate::{Outcome, Source, SourceError, Tick};

/// One scripted step.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// Push one sample `(resource, used, limit)` at the tick's time.
    Sample(ResourceId, u64, u64),
    /// Push nothing ([`Outcome::Idle`]).
    Idle,
    /// Fail for good with [`SourceError::Gone`] and this message.
    Fail(String),
    /// Fail once with a transient [`SourceError::Read`] (`EINTR`, path = the source's name)
    /// and this message: the sampler retries it.
    Error(String),
}

/// A source that plays a script.
#[derive(Debug)]
pub struct ScriptedSource {
    name: String,
    script: Vec<Scripted>,
    next: usize,
}

impl ScriptedSource {
    /// A source called `name` playing `script` (an empty script idles forever).
    pub fn new(name: &str, script: Vec<Scripted>) -> Self {
        Self {
            name: name.to_string(),
            script,
            next: 0,
        }
    }
}

impl Source for ScriptedSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        let Some(step) = self.script.get(self.next).or(self.script.last()) else {
            return Ok(Outcome::Idle);
        };
        self.next = (self.next + 1).min(self.script.len());
        match step {
            Scripted::Sample(resource, used, limit) => {
                out(Sample {
                    resource: *resource,
                    t_ns: tick.now_ns,
                    used: *used,
                    limit: *limit,
                });
                Ok(Outcome::Sampled)
            }
            Scripted::Idle => Ok(Outcome::Idle),
            Scripted::Fail(msg) => Err(SourceError::Gone(msg.clone())),
            Scripted::Error(msg) => Err(SourceError::Read {
                path: self.name.clone(),
                source: std::io::Error::new(std::io::ErrorKind::Interrupted, msg.clone()),
            }),
        }
    }
}

/// Replays recorded samples: each tick emits, stamped with the tick's time, every recorded
/// sample whose time (relative to the first tick) has come. Then idles.
#[derive(Debug)]
pub struct ReplaySource {
    name: String,
    /// Sorted by `t_ns`, relative to the start of the recording.
    samples: Vec<Sample>,
    next: usize,
    start_ns: Option<u64>,
}

impl ReplaySource {
    /// A source called `name` replaying `samples` (their `t_ns` relative to any origin).
    pub fn new(name: &str, mut samples: Vec<Sample>) -> Self {
        samples.sort_by_key(|s| s.t_ns);
        let origin = samples.first().map_or(0, |s| s.t_ns);
        for s in &mut samples {
            s.t_ns -= origin;
        }
        Self {
            name: name.to_string(),
            samples,
            next: 0,
            start_ns: None,
        }
    }

    /// Whether every recorded sample has been played.
    pub fn finished(&self) -> bool {
        self.next >= self.samples.len()
    }
}

impl Source for ReplaySource {
    fn name(&self) -> &str {
        &self.name
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        let start = *self.start_ns.get_or_insert(tick.now_ns);
        let elapsed = tick.now_ns.saturating_sub(start);
        let mut any = false;
        while let Some(s) = self.samples.get(self.next) {
            if s.t_ns > elapsed {
                break;
            }
            out(Sample {
                t_ns: tick.now_ns,
                ..*s
            });
            self.next += 1;
            any = true;
        }
        Ok(if any { Outcome::Sampled } else { Outcome::Idle })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn replay_plays_by_time_then_idles() {
        let rec = |t, used| Sample {
            resource: ResourceId(0),
            t_ns: t,
            used,
            limit: 100,
        };
        let mut src =
            ReplaySource::new("replay", vec![rec(1_020, 3), rec(1_000, 1), rec(1_010, 2)]);
        let mut got = Vec::new();
        let mut at = |src: &mut ReplaySource, now| {
            src.sample(
                &Tick {
                    now_ns: now,
                    tree: &[],
                },
                &mut |s| got.push((s.t_ns, s.used)),
            )
            .unwrap()
        };
        assert_eq!(at(&mut src, 500), Outcome::Sampled);
        assert_eq!(at(&mut src, 505), Outcome::Idle);
        assert_eq!(at(&mut src, 525), Outcome::Sampled);
        assert!(src.finished());
        assert_eq!(at(&mut src, 600), Outcome::Idle);
        assert_eq!(got, vec![(500, 1), (525, 2), (525, 3)]);
    }

    #[test]
    fn scripted_repeats_its_last_step() {
        let mut src = ScriptedSource::new(
            "s",
            vec![Scripted::Idle, Scripted::Sample(ResourceId(2), 5, 9)],
        );
        let tick = Tick {
            now_ns: 1,
            tree: &[],
        };
        let mut n = 0;
        assert_eq!(src.sample(&tick, &mut |_| n += 1).unwrap(), Outcome::Idle);
        for _ in 0..3 {
            assert_eq!(
                src.sample(&tick, &mut |_| n += 1).unwrap(),
                Outcome::Sampled
            );
        }
        assert_eq!(n, 3);
    }
}
