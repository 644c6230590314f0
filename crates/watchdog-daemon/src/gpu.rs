//! The processes holding GPU memory, for rules with `gpu = true` (or `false`): a thread
//! of its own reads every device's NVML process lists every [`REFRESH`] (a list costs
//! milliseconds, too much for the sampling loop) and the loop takes the latest set. A
//! machine without NVML gives an empty set, said once in the log. Dropping the [`GpuSet`]
//! (the service stopping) ends the thread at once, between two reads, and joins it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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

/// The GPU holder set, renewed by its thread until it is dropped.
pub struct GpuSet {
    latest: Arc<Mutex<Latest>>,
    /// Dropped, it ends the thread's wait between two reads.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl GpuSet {
    /// Starts the thread, loading NVML from `lib` (else the system's library).
    pub fn start(lib: Option<PathBuf>) -> GpuSet {
        let latest = Arc::new(Mutex::new(Latest::default()));
        let shared = Arc::clone(&latest);
        let (stop, stopped) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("gpu-holders".into())
            .spawn(move || serve(lib, &shared, &stopped));
        let thread = match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("gpu rules match nothing: cannot start the GPU thread: {e}");
                None
            }
        };
        GpuSet {
            latest,
            stop: Some(stop),
            thread,
        }
    }

    /// The latest set with its generation (which changes at every read), when it is newer
    /// than `generation`; `None` otherwise, without copying the set (the loop asks every tick).
    pub fn newer_than(&self, generation: u64) -> Option<(u64, HashSet<u32>)> {
        let l = self.latest.lock().ok()?;
        (l.generation != generation).then(|| (l.generation, l.pids.clone()))
    }
}

impl Drop for GpuSet {
    /// Stops the thread and waits for it (at most the process-list read in flight).
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(feature = "gpu")]
fn serve(lib: Option<PathBuf>, latest: &Mutex<Latest>, stopped: &Receiver<()>) {
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
        // Nothing is sent: the wait ends with REFRESH, or at once when the set is dropped.
        if let Err(mpsc::RecvTimeoutError::Disconnected) = stopped.recv_timeout(REFRESH) {
            return;
        }
    }
}

#[cfg(not(feature = "gpu"))]
fn serve(_lib: Option<PathBuf>, _latest: &Mutex<Latest>, _stopped: &Receiver<()>) {
    tracing::warn!("gpu rules match nothing: this watchdog was built without GPU support");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Instant;

    /// Drops `set` and says how long that took and whether its thread is gone (the thread
    /// holds the other reference to the set's latest read until it ends).
    fn stop(set: GpuSet) -> (Duration, bool) {
        let latest = Arc::clone(&set.latest);
        let t = Instant::now();
        drop(set);
        (t.elapsed(), Arc::strong_count(&latest) == 1)
    }

    /// A machine without NVML (or a build without GPU support): the thread ends at once.
    #[test]
    fn without_nvml_the_thread_ends_and_is_joined() {
        let dir = tempfile::tempdir().unwrap();
        let set = GpuSet::start(Some(dir.path().join("libnvidia-ml.so.1")));
        let (took, gone) = stop(set);
        assert!(gone && took < REFRESH, "{took:?}");
    }

    /// The thread read the process lists every REFRESH for as long as the process lived:
    /// dropping the set (the service stopping) ends its wait at once and joins it.
    #[test]
    #[cfg(feature = "gpu")]
    fn the_reading_thread_stops_at_once_when_the_set_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let build =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fake-nvml/build.sh");
        let built = std::process::Command::new("sh")
            .arg(&build)
            .arg(dir.path())
            .output()
            .expect("run tests/fake-nvml/build.sh");
        assert!(built.status.success(), "{built:?}");
        // Read next to the library (FAKE_NVML_SCRIPT unset): one GPU, no process.
        std::fs::write(
            dir.path().join("fake-nvml.script"),
            "device Fake_GPU GPU-fake 16000 0 0\n",
        )
        .unwrap();
        let set = GpuSet::start(Some(dir.path().join("libnvidia-ml.so.1")));
        let until = Instant::now() + Duration::from_secs(10);
        while set.newer_than(0).is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            set.newer_than(0).is_some(),
            "the fake GPU's list was never read"
        );
        // Now in its wait of REFRESH (2 s) before the next read, most of it ahead: a drop
        // that waited it out would take over 1.5 s.
        let (took, gone) = stop(set);
        assert!(gone, "the thread still runs after the set was dropped");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
