//! `watchdog-sampler`: everything the loop samples from the machine, behind one [`Source`].
//!
//! Each source reads its files through descriptors kept open and re-read with
//! `pread` at offset 0, parses them with pure functions, and pushes one
//! [`Sample`] per resource into the ring buffer, never allocating once warm.
//! Every reader takes its root (`/proc`, `/sys/fs/cgroup`) so tests run it on
//! fixture trees of real captured files.
//!
//! Modules: [`procfile`] (the kept-open file), [`meminfo`] (host memory and swap),
//! [`cgroup`] (the target's memory cgroup, v1 and v2), [`tree`] (the process tree, its RSS,
//! and facts about the target), [`disk`] (filesystems), [`runtime`] (wall time against the
//! runtime limit), [`shared`] (files read once per tick for all the runs of a service), [`ring`] (the SPSC ring of samples) and [`fake`] (a scripted source for
//! tests). [`Sampler`] ties them together: one [`Sampler::tick_into`] per wake that has a source due.
#![deny(missing_docs)]

pub mod cgroup;
pub mod disk;
pub mod fake;
pub mod meminfo;
/// The parser of `/proc/PID/mountinfo`, where the cgroup source finds its hierarchies.
pub use watchdog_procfs::mountinfo;
pub mod procfile;
pub mod ring;
pub mod runtime;
mod sampler;
pub mod shared;
pub mod tree;

pub use sampler::{Sampler, TickReport};

/// GPU memory through NVML, polled on its own thread (feature `gpu`).
#[cfg(feature = "gpu")]
pub mod gpu;

use watchdog_types::{Resource, ResourceId, ResourceKind, Sample};

/// The resources known to one watchdog, indexed by [`ResourceId`].
#[derive(Debug, Default)]
pub struct ResourceTable {
    resources: Vec<Resource>,
}

impl ResourceTable {
    /// Registers a resource and returns its id.
    pub fn register(&mut self, kind: ResourceKind, name: String, source: String) -> ResourceId {
        let id = ResourceId(self.resources.len() as u16);
        self.resources.push(Resource {
            id,
            kind,
            name,
            source,
        });
        id
    }

    /// The resource with this id.
    pub fn get(&self, id: ResourceId) -> Option<&Resource> {
        self.resources.get(id.0 as usize)
    }

    /// All resources, in id order.
    pub fn all(&self) -> &[Resource] {
        &self.resources
    }
}

/// What the sources need to know about the current tick.
#[derive(Debug, Clone, Copy)]
pub struct Tick<'a> {
    /// Monotonic nanoseconds since the watchdog started.
    pub now_ns: u64,
    /// PIDs of the watched process tree (target first), as of this tick.
    pub tree: &'a [u32],
}

/// What one read of a source produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Samples were pushed.
    Sampled,
    /// Nothing new this time (rate-limited or not yet due); not an error.
    Idle,
}

/// A source that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file's contents were not what the kernel documents.
    #[error("unexpected contents in {path}: {what}")]
    Parse {
        /// The file.
        path: String,
        /// What was wrong.
        what: String,
    },
    /// The resource is gone for good (a device fell off the bus, a filesystem was unmounted).
    #[error("{0}")]
    Gone(String),
}

impl From<watchdog_procfs::Error> for SourceError {
    fn from(e: watchdog_procfs::Error) -> SourceError {
        match e {
            watchdog_procfs::Error::Read { path, source } => SourceError::Read {
                path: path.display().to_string(),
                source,
            },
            watchdog_procfs::Error::Parse { path, what } => SourceError::Parse {
                path: path.display().to_string(),
                what,
            },
        }
    }
}

/// One thing the watchdog reads every tick.
pub trait Source: Send {
    /// A short name for logs (`meminfo`, `cgroup`, `tree`, `disk:/data`, `nvml`).
    fn name(&self) -> &str;
    /// Reads once and passes one sample per resource to `out`; must not allocate once warm.
    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError>;
}
