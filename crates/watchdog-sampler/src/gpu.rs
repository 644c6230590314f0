//! GPU memory through NVML, kept off the host-memory hot path.
//!
//! [`GpuWatch::start`] loads `libnvidia-ml.so.1` through `nvml-wrapper`, or says
//! in one sentence why GPU memory is not watched ([`Unwatched`]). When it
//! starts, it registers one [`ResourceKind::GpuMemory`] resource per visible
//! device (`gpu0`, `gpu1`, ... by NVML index, with the device's name and UUID
//! as the resource's source) and leaves a dedicated thread polling NVML:
//!
//! - device memory (`nvmlDeviceGetMemoryInfo_v2`, about 12 µs a device on real
//!   hardware) every `max(interval, 50 ms)`;
//! - the compute and graphics process lists (about 4.5 ms a call, holding the
//!   driver's lock) every 2 s.
//!
//! Each period also stretches to 100 times what the last round of calls took,
//! so a slow driver never sees more than 1% of our time. The thread publishes
//! each device's latest figure through a per-device seqlock of atomics;
//! [`GpuWatch`]'s [`Source::sample`] on the poll thread only reads them, never
//! blocking on NVML and never allocating. A device yields a sample only when a
//! new reading arrived since the last tick, timed when NVML was read.
//!
//! Usage is the device's used memory, not the watched processes' share, since
//! another process on the same GPU can push the run into CUDA OOM. The limit is
//! total minus reserved memory (`_v2` reports reserved memory apart from used,
//! and CUDA can never allocate it). Which devices: before any process of the
//! watched tree shows up in NVML's process lists, every device the target may
//! see (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`); from then on, only
//! the devices the tree holds memory on (sticky: a device stays watched once
//! the tree used it). NVML lists host PIDs; inside a container they are mapped
//! to the tree through `NSpid:` in `/proc/PID/status` where the host's PIDs are
//! visible, and otherwise every visible device stays watched, said once.
//!
//! Per-process figures are kept so [`GpuHandle::top_grower`] can tell which
//! process grows when an alert fires. A device whose NVML calls fail is logged
//! once and skipped from then on (after ten failures in a row, or at once when
//! the GPU fell off the bus); the others keep being watched.

pub mod holders;
mod parse;

pub use parse::{
    DeviceSelector, VisibleDevices, parse_cuda_visible_devices, parse_nvidia_visible_devices,
};

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use watchdog_procfs::ProcRoot;
use watchdog_types::{ResourceId, ResourceKind, Sample};

use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// Environment variable naming the NVML library to load instead of searching
/// for `libnvidia-ml.so.1` (read by [`GpuConfig::new`]; used by tests to load a fake).
pub const NVML_LIB_ENV: &str = "WATCHDOG_NVML_LIB";

/// The library file NVML is searched as by default.
pub const NVML_LIB_NAME: &str = "libnvidia-ml.so.1";

/// `/proc/self/ns/pid` of the initial PID namespace (`PROC_PID_INIT_INO`, 0xEFFFFFFC).
const INIT_PID_NS: &str = "pid:[4026531836]";

/// Most PIDs of the watched tree handed to the GPU thread; a bigger tree is truncated.
const TREE_CAPACITY: usize = 4096;

/// Process-list observations kept per process for its growth rate.
const HISTORY: usize = 8;

/// Failures in a row after which a device is dropped even for a non-fatal error.
const MAX_FAILURES: u32 = 10;

/// `--gpu auto|off|required`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuMode {
    /// Watch GPU memory when NVML works; otherwise say why once and watch the rest.
    #[default]
    Auto,
    /// Do not load NVML.
    Off,
    /// Fail (exit status 2) when GPU memory cannot be watched.
    Required,
}

impl FromStr for GpuMode {
    type Err = ParseGpuModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(GpuMode::Auto),
            "off" => Ok(GpuMode::Off),
            "required" => Ok(GpuMode::Required),
            other => Err(ParseGpuModeError(other.to_string())),
        }
    }
}

impl fmt::Display for GpuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuMode::Auto => "auto",
            GpuMode::Off => "off",
            GpuMode::Required => "required",
        })
    }
}

/// A `--gpu` value that is not one of the three modes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU mode '{0}': expected auto, off or required")]
pub struct ParseGpuModeError(pub String);

/// How to start the GPU source.
#[derive(Clone, Debug)]
pub struct GpuConfig {
    /// `--gpu`.
    pub mode: GpuMode,
    /// The NVML library to load; `None` searches for `libnvidia-ml.so.1` the way
    /// the dynamic loader does (`LD_LIBRARY_PATH`, the ld.so cache).
    pub lib_path: Option<PathBuf>,
    /// Which devices the target may use.
    pub visible: VisibleDevices,
    /// How often device memory is read (stretched to 100x the time the reads take).
    pub memory_period: Duration,
    /// How often the process lists are read (stretched to 100x the time they take).
    pub process_period: Duration,
    /// Where procfs is (`/proc`), to map NVML's host PIDs through `NSpid:`; point it
    /// at the host's procfs (`/host/proc`) when the watchdog runs in a container that has it.
    pub proc_root: ProcRoot,
}

impl GpuConfig {
    /// Shortest period between two device memory reads.
    pub const MIN_MEMORY_PERIOD: Duration = Duration::from_millis(50);
    /// Default period between two process-list reads.
    pub const PROCESS_PERIOD: Duration = Duration::from_secs(2);

    /// The defaults for a watchdog sampling every `interval`: memory every
    /// `max(interval, 50 ms)`, process lists every 2 s, `/proc`, no visibility
    /// filter, and the library named by `WATCHDOG_NVML_LIB` when that is set.
    pub fn new(mode: GpuMode, interval: Duration) -> GpuConfig {
        GpuConfig {
            mode,
            lib_path: std::env::var_os(NVML_LIB_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            visible: VisibleDevices::default(),
            memory_period: interval.max(Self::MIN_MEMORY_PERIOD),
            process_period: Self::PROCESS_PERIOD,
            proc_root: ProcRoot::default(),
        }
    }
}

/// Why GPU memory is not watched, in categories a caller can match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwatchedCause {
    /// `--gpu off`.
    Off,
    /// `libnvidia-ml.so.1` is not there.
    LibraryNotFound,
    /// The library is there but cannot be loaded or lacks NVML's entry points.
    LibraryUnusable,
    /// NVML says the NVIDIA kernel driver is not loaded.
    DriverNotLoaded,
    /// NVML may not talk to the driver.
    NoPermission,
    /// The library and the kernel driver are of different versions.
    DriverMismatch,
    /// No NVIDIA GPU, or none that answers.
    NoGpu,
    /// GPUs exist, but the target may use none of them.
    NoVisibleGpu,
    /// NVML failed to start for another reason.
    InitFailed,
}

/// GPU memory is not watched, and why, in one sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("GPU memory is not watched: {reason}")]
pub struct Unwatched {
    /// The category.
    pub cause: UnwatchedCause,
    /// The reason, as a clause: `the NVIDIA driver is not loaded`.
    pub reason: String,
}

impl Unwatched {
    fn new(cause: UnwatchedCause, reason: impl Into<String>) -> Unwatched {
        Unwatched {
            cause,
            reason: reason.into(),
        }
    }
}

/// `--gpu required` and GPU memory cannot be watched; the binary exits 2 on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--gpu required, but {}", .0.reason)]
pub struct GpuRequiredError(pub Unwatched);

/// What [`GpuWatch::start`] produced.
#[derive(Debug)]
pub enum GpuStart {
    /// GPU memory is watched; add the source to the sampler.
    Watching(GpuWatch),
    /// It is not; log the reason once (not for [`UnwatchedCause::Off`]) and watch the rest.
    Unwatched(Unwatched),
}

/// One device as the GPU source sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDevice {
    /// NVML index (as `nvidia-smi` numbers it).
    pub index: u32,
    /// Its resource (`gpu<index>`).
    pub resource: ResourceId,
    /// Product name (`NVIDIA A100-SXM4-80GB`).
    pub name: String,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// Whether samples are emitted for it now (visible, and used by the tree once the tree shows up).
    pub watched: bool,
    /// Whether it was dropped after NVML failures (fell off the bus).
    pub lost: bool,
    /// NVML calls on it that failed so far.
    pub nvml_errors: u64,
}

/// One process holding memory on a device, from the latest process list.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuProcess {
    /// PID as NVML reports it (a host PID).
    pub pid: u32,
    /// The same process's PID in the watched tree, when it belongs to the tree.
    pub tree_pid: Option<u32>,
    /// Whether it has a graphics (rather than compute) context.
    pub graphics: bool,
    /// GPU memory it holds, in bytes (0 when NVML does not say, as under WDDM).
    pub used_bytes: u64,
    /// Its growth over the last few process lists, in bytes per second (0 with one list).
    pub growth_bytes_per_s: f64,
}

/// Per-device figures, published by the GPU thread through a seqlock of atomics.
#[derive(Default)]
struct Slot {
    seq: AtomicU64,
    used: AtomicU64,
    limit: AtomicU64,
    read_ns: AtomicU64,
    lost: AtomicBool,
    in_tree: AtomicBool,
    errors: AtomicU64,
}

#[derive(Clone, Copy)]
struct Reading {
    seq: u64,
    used: u64,
    limit: u64,
    read_ns: u64,
}

impl Slot {
    /// Single writer: the GPU thread.
    fn publish(&self, used: u64, limit: u64, read_ns: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.used.store(used, Ordering::Relaxed);
        self.limit.store(limit, Ordering::Relaxed);
        self.read_ns.store(read_ns, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Never blocks: gives up after a few torn reads (the writer is mid-update).
    fn read(&self) -> Option<Reading> {
        for _ in 0..4 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let used = self.used.load(Ordering::Relaxed);
            let limit = self.limit.load(Ordering::Relaxed);
            let read_ns = self.read_ns.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return Some(Reading {
                    seq: s1,
                    used,
                    limit,
                    read_ns,
                });
            }
        }
        None
    }
}

/// The watched tree's PIDs, handed from the poll thread to the GPU thread (seqlock).
struct TreeSlot {
    seq: AtomicU64,
    len: AtomicUsize,
    pids: Box<[AtomicU32]>,
}

impl TreeSlot {
    fn new() -> TreeSlot {
        TreeSlot {
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            pids: (0..TREE_CAPACITY).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn publish(&self, tree: &[u32]) {
        let tree = &tree[..tree.len().min(TREE_CAPACITY)];
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.len.store(tree.len(), Ordering::Relaxed);
        for (slot, pid) in self.pids.iter().zip(tree) {
            slot.store(*pid, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    fn read_into(&self, out: &mut Vec<u32>) -> bool {
        for _ in 0..100 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            out.clear();
            let len = self.len.load(Ordering::Relaxed).min(TREE_CAPACITY);
            out.extend(self.pids[..len].iter().map(|p| p.load(Ordering::Relaxed)));
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return true;
            }
        }
        false
    }
}

struct DeviceMeta {
    index: u32,
    resource: ResourceId,
    name: String,
    uuid: String,
    /// What CUDA can allocate (total minus reserved), bytes, at start.
    memory: u64,
}

impl DeviceMeta {
    fn label(&self) -> String {
        format!("gpu{} ({}, {})", self.index, self.name, self.uuid)
    }
}

struct Shared {
    epoch: Instant,
    devices: Vec<DeviceMeta>,
    slots: Box<[Slot]>,
    tree: TreeSlot,
    /// Some process of the tree was seen on some device: emit only the tree's devices.
    tree_seen: AtomicBool,
    /// NVML's PIDs could not be mapped to the tree: device-level figures for every visible device.
    fallback: AtomicBool,
    processes: Mutex<Vec<Vec<GpuProcess>>>,
    stop: AtomicBool,
    /// The driver's version and the CUDA version it supports (`12.2`), when NVML says.
    driver: (Option<String>, Option<String>),
}

impl Shared {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The GPU source: add it to the sampler's sources. Dropping it stops the GPU thread.
pub struct GpuWatch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    last_seq: Vec<u64>,
    tree_hash: u64,
    gone_reported: bool,
}

impl fmt::Debug for GpuWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuWatch")
            .field("devices", &self.shared.devices.len())
            .finish_non_exhaustive()
    }
}

/// A cheap, cloneable view of a running [`GpuWatch`] for the alert path and logs.
#[derive(Clone)]
pub struct GpuHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for GpuHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuHandle").finish_non_exhaustive()
    }
}

/// Loads and initialises NVML from `lib` (else the system's library) and counts its devices.
fn load_nvml(lib: Option<&Path>) -> Result<(Nvml, u32), Unwatched> {
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = builder.init().map_err(|e| init_failure(&e, lib))?;
    let count = nvml.device_count().map_err(|e| {
        Unwatched::new(
            UnwatchedCause::NoGpu,
            format!("NVIDIA GPUs could not be counted ({e})"),
        )
    })?;
    Ok((nvml, count))
}

/// The sentence for a failed `nvmlInit`.
fn init_failure(err: &NvmlError, lib: Option<&Path>) -> Unwatched {
    use UnwatchedCause as C;
    let shown = match lib {
        Some(p) => format!("'{}'", p.display()),
        None => NVML_LIB_NAME.to_string(),
    };
    match err {
        NvmlError::LibloadingError(e) => {
            let text = e.to_string();
            let missing = match lib {
                Some(p) => !p.exists(),
                None => text.contains("cannot open shared object file"),
            };
            if missing {
                Unwatched::new(
                    C::LibraryNotFound,
                    format!("the NVIDIA management library {shown} was not found"),
                )
            } else {
                Unwatched::new(
                    C::LibraryUnusable,
                    format!("the NVIDIA management library {shown} could not be loaded ({text})"),
                )
            }
        }
        NvmlError::FailedToLoadSymbol(e) => Unwatched::new(
            C::LibraryUnusable,
            format!("{shown} is not a usable NVIDIA management library ({e})"),
        ),
        NvmlError::DriverNotLoaded => {
            Unwatched::new(C::DriverNotLoaded, "the NVIDIA driver is not loaded")
        }
        NvmlError::NoPermission => Unwatched::new(
            C::NoPermission,
            "the NVIDIA management library has no permission to talk to the driver",
        ),
        NvmlError::LibRmVersionMismatch => Unwatched::new(
            C::DriverMismatch,
            "the NVIDIA management library does not match the loaded driver's version (reload the driver or reboot after an upgrade)",
        ),
        // NVML_ERROR_GPU_NOT_FOUND (28), which nvml-wrapper 0.13 does not name.
        NvmlError::UnexpectedVariant(28) => Unwatched::new(C::NoGpu, "no NVIDIA GPU was found"),
        other => Unwatched::new(
            C::InitFailed,
            format!("the NVIDIA management library failed to start ({other})"),
        ),
    }
}

/// Whether an NVML error means the device is gone for good.
fn is_fatal(err: &NvmlError) -> bool {
    matches!(
        err,
        NvmlError::GpuLost
            | NvmlError::ResetRequired
            | NvmlError::Uninitialized
            | NvmlError::InvalidArg
            | NvmlError::NotFound
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::LibloadingError(_)
    )
}

/// Reads a device's memory: (used, limit) in bytes, the limit being what CUDA can allocate.
fn read_memory(device: &Device<'_>) -> Result<(u64, u64), NvmlError> {
    let m = device.memory_info()?;
    Ok((m.used, m.total.saturating_sub(m.reserved)))
}

impl GpuWatch {
    /// Loads NVML, registers one resource per device the target may use, and starts
    /// the GPU thread. With [`GpuMode::Auto`] and [`GpuMode::Off`] a failure is
    /// `Ok(GpuStart::Unwatched)`; with [`GpuMode::Required`] it is an error.
    /// Takes about 0.2 ms when there is no library.
    pub fn start(
        config: &GpuConfig,
        table: &mut ResourceTable,
    ) -> Result<GpuStart, GpuRequiredError> {
        match Self::try_start(config, table) {
            Ok(watch) => Ok(GpuStart::Watching(watch)),
            Err(why) if config.mode == GpuMode::Required => Err(GpuRequiredError(why)),
            Err(why) => Ok(GpuStart::Unwatched(why)),
        }
    }

    fn try_start(config: &GpuConfig, table: &mut ResourceTable) -> Result<GpuWatch, Unwatched> {
        use UnwatchedCause as C;
        if config.mode == GpuMode::Off {
            return Err(Unwatched::new(C::Off, "--gpu off was given"));
        }
        let (nvml, count) = load_nvml(config.lib_path.as_deref())?;
        if count == 0 {
            return Err(Unwatched::new(C::NoGpu, "no NVIDIA GPU was found"));
        }
        // `Device` borrows `Nvml`, and the devices move to the GPU thread for the
        // rest of the process: keep NVML loaded for good (nvmlShutdown is never called).
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));

        struct Found {
            device: Device<'static>,
            index: u32,
            name: String,
            uuid: String,
            used: u64,
            limit: u64,
        }
        let epoch = Instant::now();
        let mut found = Vec::new();
        let mut first_error = None;
        for index in 0..count {
            let read = nvml.device_by_index(index).and_then(|device| {
                let name = device.name()?;
                let uuid = device.uuid()?;
                let (used, limit) = read_memory(&device)?;
                Ok(Found {
                    device,
                    index,
                    name,
                    uuid,
                    used,
                    limit,
                })
            });
            match read {
                Ok(f) => found.push(f),
                Err(e) => {
                    tracing::warn!("gpu{index} is not watched: NVML cannot read it ({e})");
                    first_error.get_or_insert(e);
                }
            }
        }
        if found.is_empty() {
            let e = first_error.map(|e| e.to_string()).unwrap_or_default();
            return Err(Unwatched::new(
                C::NoGpu,
                format!("none of the {count} NVIDIA GPUs could be read ({e})"),
            ));
        }
        let uuids: Vec<&str> = found.iter().map(|f| f.uuid.as_str()).collect();
        let visible = config.visible.select(&uuids);
        if visible.is_empty() {
            return Err(Unwatched::new(
                C::NoVisibleGpu,
                format!(
                    "none of the {} NVIDIA GPUs is visible to the target ({})",
                    found.len(),
                    config.visible.describe()
                ),
            ));
        }
        let mut keep: Vec<Found> = found
            .into_iter()
            .enumerate()
            .filter(|(i, _)| visible.contains(i))
            .map(|(_, f)| f)
            .collect();
        keep.truncate(u16::MAX as usize);

        let read_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut metas = Vec::with_capacity(keep.len());
        let mut devices = Vec::with_capacity(keep.len());
        let slots: Box<[Slot]> = keep.iter().map(|_| Slot::default()).collect();
        for (f, slot) in keep.into_iter().zip(slots.iter()) {
            let resource = table.register(
                ResourceKind::GpuMemory,
                format!("gpu{}", f.index),
                format!("{} ({})", f.name, f.uuid),
            );
            slot.publish(f.used, f.limit, read_ns);
            metas.push(DeviceMeta {
                index: f.index,
                resource,
                name: f.name,
                uuid: f.uuid,
                memory: f.limit,
            });
            devices.push(f.device);
        }
        let n = metas.len();
        let shared = Arc::new(Shared {
            epoch,
            devices: metas,
            slots,
            tree: TreeSlot::new(),
            tree_seen: AtomicBool::new(false),
            fallback: AtomicBool::new(false),
            processes: Mutex::new(vec![Vec::new(); n]),
            stop: AtomicBool::new(false),
            driver: (
                nvml.sys_driver_version().ok(),
                nvml.sys_cuda_driver_version().ok().map(|v| {
                    format!(
                        "{}.{}",
                        nvml_wrapper::cuda_driver_version_major(v),
                        nvml_wrapper::cuda_driver_version_minor(v)
                    )
                }),
            ),
        });
        let poller = Poller::new(shared.clone(), devices, config);
        let thread = std::thread::Builder::new()
            .name("watchdog-nvml".into())
            .spawn(move || poller.run())
            .map_err(|e| {
                Unwatched::new(
                    C::InitFailed,
                    format!("the GPU thread could not be started ({e})"),
                )
            })?;
        Ok(GpuWatch {
            shared,
            thread: Some(thread),
            last_seq: vec![u64::MAX; n],
            tree_hash: 0,
            gone_reported: false,
        })
    }

    /// The devices watched, for the run's environment record: model, the memory CUDA
    /// can allocate, the driver's version and the CUDA version it supports.
    pub fn environment(&self) -> Vec<watchdog_types::environment::GpuFact> {
        let (driver, cuda) = &self.shared.driver;
        self.shared
            .devices
            .iter()
            .map(|d| watchdog_types::environment::GpuFact {
                index: d.index,
                model: d.name.clone(),
                memory_bytes: Some(d.memory),
                driver: driver.clone(),
                cuda_driver: cuda.clone(),
            })
            .collect()
    }

    /// A handle for the alert path: device list, per-process figures, top grower.
    pub fn handle(&self) -> GpuHandle {
        GpuHandle {
            shared: self.shared.clone(),
        }
    }

    /// Hands the tree to the GPU thread when it changed (FNV-1a over the PIDs).
    fn publish_tree(&mut self, tree: &[u32]) {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ tree.len() as u64;
        for pid in tree {
            h = (h ^ u64::from(*pid)).wrapping_mul(0x0100_0000_01b3);
        }
        if h != self.tree_hash {
            self.tree_hash = h;
            self.shared.tree.publish(tree);
        }
    }
}

impl Source for GpuWatch {
    fn name(&self) -> &str {
        "nvml"
    }

    /// Emits the latest reading of each watched device that has a new one. Reads
    /// atomics only: no NVML call, no lock, no allocation (except the one-time
    /// [`SourceError::Gone`] when every device is lost; `Idle` after that).
    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        self.publish_tree(tick.tree);
        let shared = &*self.shared;
        let now_ns = shared.now_ns();
        let only_tree =
            shared.tree_seen.load(Ordering::Relaxed) && !shared.fallback.load(Ordering::Relaxed);
        let mut live = 0;
        let mut emitted = false;
        for (i, slot) in shared.slots.iter().enumerate() {
            if slot.lost.load(Ordering::Relaxed) {
                continue;
            }
            live += 1;
            if only_tree && !slot.in_tree.load(Ordering::Relaxed) {
                continue;
            }
            let Some(r) = slot.read() else { continue };
            let Some(last) = self.last_seq.get_mut(i) else {
                continue;
            };
            if *last == r.seq {
                continue;
            }
            *last = r.seq;
            let age = now_ns.saturating_sub(r.read_ns);
            out(Sample {
                resource: shared.devices[i].resource,
                t_ns: tick.now_ns.saturating_sub(age),
                used: r.used,
                limit: r.limit,
            });
            emitted = true;
        }
        if live == 0 && !self.gone_reported {
            self.gone_reported = true;
            return Err(SourceError::Gone(
                "every watched GPU stopped answering NVML; GPU memory is no longer watched".into(),
            ));
        }
        Ok(if emitted {
            Outcome::Sampled
        } else {
            Outcome::Idle
        })
    }
}

impl Drop for GpuWatch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A panic on the GPU thread has already been reported by the panic hook.
            let _ = t.join();
        }
    }
}

impl GpuHandle {
    /// Every device registered, with its state now.
    pub fn devices(&self) -> Vec<GpuDevice> {
        let s = &*self.shared;
        let only_tree = s.tree_seen.load(Ordering::Relaxed) && !s.fallback.load(Ordering::Relaxed);
        s.devices
            .iter()
            .zip(s.slots.iter())
            .map(|(d, slot)| {
                let lost = slot.lost.load(Ordering::Relaxed);
                GpuDevice {
                    index: d.index,
                    resource: d.resource,
                    name: d.name.clone(),
                    uuid: d.uuid.clone(),
                    watched: !lost && (!only_tree || slot.in_tree.load(Ordering::Relaxed)),
                    lost,
                    nvml_errors: slot.errors.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// The processes on the device behind `resource` at the latest process list,
    /// biggest first; empty for another resource or when NVML gives no process list.
    pub fn processes(&self, resource: ResourceId) -> Vec<GpuProcess> {
        let Some(i) = self
            .shared
            .devices
            .iter()
            .position(|d| d.resource == resource)
        else {
            return Vec::new();
        };
        let procs = match self.shared.processes.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        procs.get(i).cloned().unwrap_or_default()
    }

    /// The process whose GPU memory grows fastest on the device behind `resource`
    /// (over the last few process lists, 2 s apart by default), for the alert log;
    /// `None` when no process there grows.
    pub fn top_grower(&self, resource: ResourceId) -> Option<GpuProcess> {
        self.processes(resource)
            .into_iter()
            .filter(|p| p.growth_bytes_per_s > 0.0)
            .max_by(|a, b| a.growth_bytes_per_s.total_cmp(&b.growth_bytes_per_s))
    }

    /// Whether NVML's PIDs could not be mapped to the watched tree, so every
    /// visible device is watched by its device-level figures.
    pub fn device_level_fallback(&self) -> bool {
        self.shared.fallback.load(Ordering::Relaxed)
    }
}

/// State of one device's process list on the GPU thread.
#[derive(Default)]
struct DeviceState {
    failures: u32,
    warned: bool,
    lists_off: bool,
    history: HashMap<u32, VecDeque<(u64, u64)>>,
}

/// The GPU thread: owns the NVML devices, publishes figures into [`Shared`].
struct Poller {
    shared: Arc<Shared>,
    devices: Vec<Device<'static>>,
    state: Vec<DeviceState>,
    memory_period: Duration,
    process_period: Duration,
    proc_root: ProcRoot,
    tree: Vec<u32>,
    /// `Some(false)`: the watchdog is in a child PID namespace (a container).
    in_init_pid_ns: Option<bool>,
    own_pid_ns: Option<PathBuf>,
    fallback_said: bool,
}

impl Poller {
    fn new(shared: Arc<Shared>, devices: Vec<Device<'static>>, config: &GpuConfig) -> Poller {
        let own_pid_ns = config.proc_root.own_namespace("pid").ok();
        let in_init_pid_ns = own_pid_ns.as_ref().map(|l| l.as_os_str() == INIT_PID_NS);
        let n = devices.len();
        Poller {
            shared,
            devices,
            state: (0..n).map(|_| DeviceState::default()).collect(),
            memory_period: config.memory_period.max(Duration::from_millis(1)),
            process_period: config.process_period.max(Duration::from_millis(1)),
            proc_root: config.proc_root.clone(),
            tree: Vec::with_capacity(TREE_CAPACITY),
            in_init_pid_ns,
            own_pid_ns,
            fallback_said: false,
        }
    }

    fn run(mut self) {
        let start = Instant::now();
        let mut next_memory = start + self.memory_period;
        // The first process list after the first ticks have handed over the tree.
        let mut next_processes = start + self.memory_period.min(self.process_period);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_memory {
                self.poll_memory();
                let took = now.elapsed();
                next_memory = now + self.memory_period.max(took * 100);
            }
            let now = Instant::now();
            if now >= next_processes {
                self.poll_processes();
                let took = now.elapsed();
                next_processes = now + self.process_period.max(took * 100);
            }
            if self
                .shared
                .slots
                .iter()
                .all(|s| s.lost.load(Ordering::Relaxed))
            {
                break;
            }
            let wake = next_memory.min(next_processes);
            std::thread::park_timeout(wake.saturating_duration_since(Instant::now()));
        }
    }

    /// Counts a failed NVML call on device `i`; logs once and drops the device when
    /// the error is fatal or repeats. Returns whether the device is dropped.
    fn fail(&mut self, i: usize, what: &str, err: &NvmlError) -> bool {
        let (Some(slot), Some(meta), Some(st)) = (
            self.shared.slots.get(i),
            self.shared.devices.get(i),
            self.state.get_mut(i),
        ) else {
            return true;
        };
        slot.errors.fetch_add(1, Ordering::Relaxed);
        st.failures += 1;
        if is_fatal(err) || st.failures >= MAX_FAILURES {
            slot.lost.store(true, Ordering::Relaxed);
            let also = if st.warned { " again" } else { "" };
            tracing::warn!(
                resource = %format!("gpu{}", meta.index),
                "{} is no longer watched: NVML {what} failed{also} ({err})",
                meta.label()
            );
            true
        } else {
            if !st.warned {
                st.warned = true;
                tracing::warn!(
                    resource = %format!("gpu{}", meta.index),
                    "{}: NVML {what} failed ({err}); retrying",
                    meta.label()
                );
            }
            false
        }
    }

    fn poll_memory(&mut self) {
        for i in 0..self.devices.len() {
            if self.shared.slots[i].lost.load(Ordering::Relaxed) {
                continue;
            }
            match read_memory(&self.devices[i]) {
                Ok((used, limit)) => {
                    self.state[i].failures = 0;
                    let read_ns = self.shared.now_ns();
                    self.shared.slots[i].publish(used, limit, read_ns);
                }
                Err(e) => {
                    self.fail(i, "memory query", &e);
                }
            }
        }
    }

    /// Maps an NVML (host) PID to the watched tree: directly, or through the
    /// innermost `NSpid:` field when the watchdog is in a child PID namespace and
    /// `proc_root` shows the host's PIDs.
    fn tree_pid(&self, pid: u32) -> Option<u32> {
        if self.tree.contains(&pid) {
            return Some(pid);
        }
        if self.in_init_pid_ns != Some(false) {
            return None;
        }
        let ns = self.proc_root.namespace(pid, "pid").ok()?;
        if Some(&ns) != self.own_pid_ns.as_ref() {
            return None;
        }
        let inner = self.proc_root.status(pid).ok()?.nspid_innermost?;
        self.tree.contains(&inner).then_some(inner)
    }

    fn poll_processes(&mut self) {
        // A torn read keeps the previous tree; it is only a hint for attribution.
        let mut tree = std::mem::take(&mut self.tree);
        self.shared.tree.read_into(&mut tree);
        self.tree = tree;
        let now_ns = self.shared.now_ns();
        let mut lists = Vec::with_capacity(self.devices.len());
        let mut any_process = false;
        for i in 0..self.devices.len() {
            if self.shared.slots[i].lost.load(Ordering::Relaxed) || self.state[i].lists_off {
                lists.push(None);
                continue;
            }
            let device = &self.devices[i];
            let got = device.running_compute_processes().and_then(|c| {
                let g = device.running_graphics_processes()?;
                Ok((c, g))
            });
            let (compute, graphics) = match got {
                Ok(x) => x,
                Err(e @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_))) => {
                    self.state[i].lists_off = true;
                    let meta = &self.shared.devices[i];
                    tracing::info!(
                        resource = %format!("gpu{}", meta.index),
                        "{}: NVML gives no process list ({e}); watching its device-level figures only",
                        meta.label()
                    );
                    lists.push(None);
                    continue;
                }
                Err(e) => {
                    self.fail(i, "process list", &e);
                    lists.push(None);
                    continue;
                }
            };
            let mut merged: Vec<(u32, u64, bool)> = Vec::new();
            for (p, is_graphics) in compute
                .iter()
                .map(|p| (p, false))
                .chain(graphics.iter().map(|p| (p, true)))
            {
                let used = match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => b,
                    UsedGpuMemory::Unavailable => 0,
                };
                match merged.iter_mut().find(|m| m.0 == p.pid) {
                    Some(m) => m.1 = m.1.max(used),
                    None => merged.push((p.pid, used, is_graphics)),
                }
            }
            any_process |= !merged.is_empty();
            lists.push(Some(merged));
        }

        let mut published: Vec<Option<Vec<GpuProcess>>> = Vec::with_capacity(lists.len());
        let mut tree_here = false;
        for (i, list) in lists.into_iter().enumerate() {
            let Some(list) = list else {
                published.push(None);
                continue;
            };
            let mut procs = Vec::with_capacity(list.len());
            for (pid, used, graphics) in &list {
                let tree_pid = self.tree_pid(*pid);
                let hist = self.state[i].history.entry(*pid).or_default();
                if hist.len() == HISTORY {
                    hist.pop_front();
                }
                hist.push_back((now_ns, *used));
                let growth = match (hist.front(), hist.back()) {
                    (Some(a), Some(b)) if b.0 > a.0 => {
                        (b.1 as f64 - a.1 as f64) / ((b.0 - a.0) as f64 / 1e9)
                    }
                    _ => 0.0,
                };
                if tree_pid.is_some() {
                    tree_here = true;
                    self.shared.slots[i].in_tree.store(true, Ordering::Relaxed);
                }
                procs.push(GpuProcess {
                    pid: *pid,
                    tree_pid,
                    graphics: *graphics,
                    used_bytes: *used,
                    growth_bytes_per_s: growth,
                });
            }
            self.state[i]
                .history
                .retain(|pid, _| list.iter().any(|(p, _, _)| p == pid));
            procs.sort_by_key(|p| std::cmp::Reverse(p.used_bytes));
            published.push(Some(procs));
        }
        if tree_here {
            self.shared.tree_seen.store(true, Ordering::Relaxed);
            self.shared.fallback.store(false, Ordering::Relaxed);
        } else if any_process
            && self.in_init_pid_ns == Some(false)
            && !self.shared.tree_seen.load(Ordering::Relaxed)
            && !self.fallback_said
        {
            self.fallback_said = true;
            self.shared.fallback.store(true, Ordering::Relaxed);
            let labels: Vec<String> = self.shared.devices.iter().map(DeviceMeta::label).collect();
            tracing::info!(
                "NVML lists GPU processes by host PID, and none maps to the watched processes from this PID namespace (mount the host's /proc to map them): watching the device-level memory of every visible GPU: {}",
                labels.join(", ")
            );
        }
        let mut shared = match self.shared.processes.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (slot, new) in shared.iter_mut().zip(published) {
            if let Some(new) = new {
                *slot = new;
            }
        }
    }
}
