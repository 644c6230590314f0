//! Which processes hold memory on any NVIDIA GPU of the machine, for the service's
//! `gpu = true` rules: every device's compute and graphics process lists (host PIDs).
//! A list costs milliseconds (about 4.5 ms on a real driver), so the caller reads it
//! seldom and off its sampling loop.

use std::collections::HashSet;
use std::path::Path;

use nvml_wrapper::{Device, Nvml};

use super::{Unwatched, load_nvml};

/// The devices of the machine, opened once.
pub struct GpuHolders {
    devices: Vec<Device<'static>>,
}

impl GpuHolders {
    /// Loads NVML (from `lib`, else the system's library) and opens every device.
    pub fn open(lib: Option<&Path>) -> Result<GpuHolders, Unwatched> {
        let (nvml, count) = load_nvml(lib)?;
        // Devices borrow `Nvml` for as long as the service runs: keep it loaded for good.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let devices = (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok())
            .collect();
        Ok(GpuHolders { devices })
    }

    /// How many devices were opened.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// The PIDs on any device's compute or graphics process list now. A device whose
    /// lists fail adds nothing (its processes are not known to hold memory).
    pub fn pids(&self) -> HashSet<u32> {
        let mut out = HashSet::new();
        for device in &self.devices {
            for list in [
                device.running_compute_processes(),
                device.running_graphics_processes(),
            ]
            .into_iter()
            .flatten()
            {
                out.extend(list.iter().map(|p| p.pid));
            }
        }
        out
    }
}
