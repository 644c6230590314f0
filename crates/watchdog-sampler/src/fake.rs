//! A scripted [`Source`] for tests of the sampler and of the binary: it plays a list of
//! outcomes, one per tick, and repeats the last one forever.

use watchdog_types::{ResourceId, Sample};

use crate::{Outcome, Source, SourceError, Tick};

/// One scripted step.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// Push one sample `(resource, used, limit)` at the tick's time.
    Sample(ResourceId, u64, u64),
    /// Push nothing ([`Outcome::Idle`]).
    Idle,
    /// Fail with [`SourceError::Gone`] and this message.
    Fail(String),
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
        }
    }
}
