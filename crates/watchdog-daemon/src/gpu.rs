//! The processes holding GPU memory, for rules with `gpu = true` (or `false`): a thread
//! of its own reads every device's NVML process lists every [`REFRESH`] (a list costs
//! milliseconds, too much for the sampling loop) and the loop takes the latest set. A
//! machine without NVML gives an empty set, said once in the log.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the process lists are read: a run that starts holding GPU memory is found
/// within this long (CUDA allocates seconds after a run starts anyway).
pub const REFRESH: Duration = Duration::from_secs(2);

/// The latest set and how many times it was read.
#[derive(Default)]
struct Latest {
    generation: u64,
    pids: HashSet<u32>,
}

/// The GPU holder set, renewed by its thread.
pub struct GpuSet {
    latest: Arc<Mutex<Latest>>,
}

impl GpuSet {
    /// Starts the thread, loading NVML from `lib` (else the system's library).
    pub fn start(lib: Option<PathBuf>) -> GpuSet {
        let latest = Arc::new(Mutex::new(Latest::default()));
        let shared = Arc::clone(&latest);
        let spawned = std::thread::Builder::new()
            .name("gpu-holders".into())
            .spawn(move || serve(lib, &shared));
        if let Err(e) = spawned {
            tracing::warn!("gpu rules match nothing: cannot start the GPU thread: {e}");
        }
        GpuSet { latest }
    }

    /// The latest set with its generation (which changes at every read), when it is newer
    /// than `generation`; `None` otherwise, without copying the set (the loop asks every tick).
    pub fn newer_than(&self, generation: u64) -> Option<(u64, HashSet<u32>)> {
        let l = self.latest.lock().ok()?;
        (l.generation != generation).then(|| (l.generation, l.pids.clone()))
    }
}

#[cfg(feature = "gpu")]
fn serve(lib: Option<PathBuf>, latest: &Mutex<Latest>) {
    use watchdog_sampler::gpu::holders::GpuHolders;
    let holders = match GpuHolders::open(lib.as_deref()) {
        Ok(h) => h,
        Err(why) => {
            tracing::warn!("gpu rules match nothing: {}", why.reason);
            return;
        }
    };
    tracing::info!(
        "gpu rules: reading the process lists of {} GPU(s) every {} s",
        holders.device_count(),
        REFRESH.as_secs()
    );
    loop {
        let pids = holders.pids();
        if let Ok(mut l) = latest.lock() {
            l.generation += 1;
            l.pids = pids;
        }
        std::thread::sleep(REFRESH);
    }
}

#[cfg(not(feature = "gpu"))]
fn serve(_lib: Option<PathBuf>, _latest: &Mutex<Latest>) {
    tracing::warn!("gpu rules match nothing: this watchdog was built without GPU support");
}
