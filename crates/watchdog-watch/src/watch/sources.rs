//! Chooses and opens the sources for one target: host memory and swap, its memory
//! cgroup, its process tree, its filesystems, its runtime limit and its GPUs. A source
//! that cannot be opened is reported once, with the reason, and the others go on.

use std::path::PathBuf;
use std::time::SystemTime;

use watchdog_sampler::cgroup::{CgroupMemory, CgroupMounts, OomKillCounter};
use watchdog_sampler::disk::{Filesystem, is_tmpfs, one_per_filesystem};
use watchdog_sampler::meminfo::HostMemory;
use watchdog_sampler::runtime::{Runtime, runtime_limit};
use watchdog_sampler::shared::Reads;
use watchdog_sampler::tree::TreeMemory;
use watchdog_sampler::{ResourceTable, Source};

use crate::Failure;
use crate::target::Target;
use watchdog_config::Settings;
use watchdog_config::options::GpuMode;

/// The sources opened for a target, and the resources that could not be watched.
pub struct Built {
    /// Sources in sampling order.
    pub sources: Vec<Box<dyn Source>>,
    /// `(resource, reason)` for each resource that is not watched.
    pub unwatched: Vec<(String, String)>,
    /// The memory cgroup's OOM-kill counter, for the verdict.
    pub oom_counter: Option<OomKillCounter>,
    /// The GPUs watched, for the environment record.
    pub gpus: Vec<watchdog_types::environment::GpuFact>,
    /// NVML's view for the run's step reports.
    pub gpu_view: crate::steps::GpuView,
    /// The memory cgroup, for the kernel's wake-ups.
    pub cgroup: Option<super::kernel::CgroupWake>,
    /// The SLURM job the target's environment names (not looked at for the service).
    pub job: Option<watchdog_slurm::Job>,
    /// The job's end as the controller says it, when the runtime limit follows it.
    pub slurm: Option<super::slurm::SlurmEnd>,
}

/// Which SLURM job's end is asked of the controller, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmAsk {
    /// The job the target's environment names (`run`, `--pid`), with the user's `squeue`.
    FromEnvironment,
    /// The job the run's cgroup path names (the service: never the user's environment),
    /// with `/usr/bin/squeue` and an empty environment.
    FromCgroup(u64),
    /// None.
    No,
}

/// Opens every source for `target`, the host-wide files through `reads`; `slurm` says
/// which SLURM job's end is the runtime limit, when no flag sets one.
pub fn build(
    target: &Target,
    settings: &Settings,
    table: &mut ResourceTable,
    gpu: GpuSetup,
    reads: &Reads,
    slurm_ask: SlurmAsk,
) -> Built {
    let proc_root = &settings.host.proc;
    let pid = target.pid;
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    let mut unwatched = Vec::new();

    match HostMemory::new(proc_root, reads, table) {
        Ok(s) => sources.push(Box::new(s)),
        Err(e) => unwatched.push(("host_memory".to_string(), e.to_string())),
    }

    let mounts = match (CgroupMounts::read(proc_root), settings.host.recorded_root()) {
        (Ok(recorded), Some(dir)) => recorded.under(dir),
        (Ok(mounts), None) => mounts,
        (Err(_), _) => CgroupMounts::standard(&settings.host.cgroup),
    };
    let mut oom_counter = None;
    let mut cgroup = None;
    match CgroupMemory::for_pid(proc_root, pid, &mounts, reads, table) {
        Ok(mut s) => {
            oom_counter = s.oom_kill_counter().ok();
            cgroup = s.id().map(|id| super::kernel::CgroupWake {
                location: s.location().clone(),
                id,
                cache: s.cache_id(),
                limit: s.read().map_or(u64::MAX, |r| r.limit),
            });
            sources.push(Box::new(s));
        }
        Err(e) => unwatched.push(("cgroup_memory".to_string(), e.to_string())),
    }

    let mut tree_memory = TreeMemory::new(proc_root, settings.mem_limit, table);
    if let Some(period) = settings.slow_tree_interval() {
        tree_memory.read_every(period);
    }
    sources.push(Box::new(tree_memory));

    let target_is_root = proc_root
        .uids(pid)
        .map(|u| u.effective == 0)
        .unwrap_or(false);
    // One source per filesystem, however many of the paths are on it.
    for group in one_per_filesystem(&disk_paths(settings, target, &mut unwatched)) {
        let Some((path, aliases)) = group.split_first() else {
            continue;
        };
        match Filesystem::with_aliases(path, aliases, target_is_root, reads, table) {
            Ok(s) => sources.push(Box::new(s)),
            Err(e) => unwatched.push((format!("disk:{}", path.display()), e.to_string())),
        }
    }

    let mut job = None;
    let mut slurm = None;
    match proc_root.start_time(pid) {
        Ok(start) => {
            // A command `run` started has the watchdog's environment (and WATCHDOG_*
            // variables): read from /proc right after the spawn, it can still be empty,
            // the exec not done yet.
            let env: Vec<(String, String)> = if target.is_child() {
                std::env::vars().collect()
            } else {
                proc_root.environ(pid).unwrap_or_default()
            };
            job = match slurm_ask {
                SlurmAsk::FromEnvironment => watchdog_slurm::Job::from_env(&env),
                SlurmAsk::FromCgroup(id) => Some(watchdog_slurm::Job::of_cgroup(id)),
                SlurmAsk::No => None,
            };
            let service = matches!(slurm_ask, SlurmAsk::FromCgroup(_));
            // Deadlines are checked to be in the future, so after 1970; one too far
            // ahead for the clock to hold is no limit at all.
            let deadline = settings.deadline.and_then(|d| {
                let secs = u64::try_from(d.as_second()).ok()?;
                SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
            });
            // With both --max-runtime and --deadline, the earlier limit wins.
            let now = SystemTime::now();
            let from_max = runtime_limit(&env, now, start, settings.max_runtime, None);
            let from_deadline =
                deadline.and_then(|d| runtime_limit(&env, now, start, None, Some(d)));
            let chosen = match (from_max, from_deadline) {
                (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
                (a, b) => a.or(b),
            };
            match (chosen, &job) {
                (Some((limit, origin)), _) => {
                    sources.push(Box::new(Runtime::new(start, limit, origin, table)));
                }
                // SLURM before 23.02 puts no end in the job's environment: ask the controller.
                (None, Some(j)) if j.end_time.is_none() => {
                    let (source, end) = super::slurm::runtime_source(
                        j.clone(),
                        start,
                        settings.slurm_poll,
                        service,
                        table,
                    );
                    sources.push(source);
                    slurm = Some(end);
                }
                (None, _) => {}
            }
        }
        Err(e) => unwatched.push(("runtime".to_string(), e.to_string())),
    }

    let (gpus, gpu_view) = gpu.add_to(&mut sources, &mut unwatched);
    Built {
        sources,
        unwatched,
        oom_counter,
        gpus,
        gpu_view,
        cgroup,
        job,
        slurm,
    }
}

/// The filesystems to watch: the configured ones, else the target's working directory
/// and `/dev/shm` when it is a tmpfs.
fn disk_paths(
    settings: &Settings,
    target: &Target,
    unwatched: &mut Vec<(String, String)>,
) -> Vec<PathBuf> {
    if !settings.disks.is_empty() {
        return settings.disks.clone();
    }
    let mut paths = Vec::new();
    match target.cwd() {
        Ok(cwd) => paths.push(cwd),
        Err(e) => unwatched.push((
            "disk:<working directory>".to_string(),
            format!("the target's working directory cannot be read: {e}"),
        )),
    }
    let shm = settings.host.shm.as_path();
    if is_tmpfs(shm) {
        paths.push(shm.to_path_buf());
    }
    paths
}

/// GPU watching, started before the target is spawned so `--gpu required` fails early.
pub struct GpuSetup {
    #[cfg(feature = "gpu")]
    watch: Option<watchdog_sampler::gpu::GpuWatch>,
    reason: Option<String>,
}

impl GpuSetup {
    /// Starts NVML per `--gpu`, registering GPU resources in `table`; `pid_for_visibility`
    /// is the target whose `CUDA_VISIBLE_DEVICES` counts (`None`: our own environment,
    /// which a `run` child inherits). `required` without a usable GPU is an error (exit 2).
    pub fn start(
        settings: &Settings,
        table: &mut ResourceTable,
        pid_for_visibility: Option<u32>,
    ) -> Result<GpuSetup, Failure> {
        if settings.gpu == GpuMode::Off {
            return Ok(GpuSetup {
                #[cfg(feature = "gpu")]
                watch: None,
                reason: None,
            });
        }
        #[cfg(feature = "gpu")]
        {
            use watchdog_sampler::gpu::{self, GpuConfig, GpuStart, GpuWatch, VisibleDevices};
            let mode = match settings.gpu {
                GpuMode::Required => gpu::GpuMode::Required,
                _ => gpu::GpuMode::Auto,
            };
            let mut config = GpuConfig::new(mode, settings.interval);
            if let Some(lib) = &settings.nvml_library {
                config.lib_path = Some(lib.clone());
            }
            config.visible = match pid_for_visibility {
                Some(pid) => VisibleDevices::of_process(&settings.host.proc, pid),
                None => VisibleDevices {
                    cuda: settings.host.cuda_visible_devices.clone(),
                    nvidia: settings.host.nvidia_visible_devices.clone(),
                },
            };
            match GpuWatch::start(&config, table) {
                Ok(GpuStart::Watching(watch)) => Ok(GpuSetup {
                    watch: Some(watch),
                    reason: None,
                }),
                Ok(GpuStart::Unwatched(u)) => Ok(GpuSetup {
                    watch: None,
                    reason: Some(u.reason),
                }),
                Err(e) => Err(Failure::Usage(format!(
                    "{e}; expected a working NVIDIA driver (or --gpu auto or off)"
                ))),
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (table, pid_for_visibility);
            let reason =
                "this watchdog was built without GPU support (the `gpu` feature)".to_string();
            if settings.gpu == GpuMode::Required {
                return Err(Failure::Usage(format!(
                    "--gpu required, but {reason}; expected a build with the gpu feature"
                )));
            }
            Ok(GpuSetup {
                reason: Some(reason),
            })
        }
    }

    /// Adds the GPU source, or says why there is none; returns the GPUs for the
    /// environment record and NVML's view for the step reports.
    fn add_to(
        self,
        sources: &mut Vec<Box<dyn Source>>,
        unwatched: &mut Vec<(String, String)>,
    ) -> (
        Vec<watchdog_types::environment::GpuFact>,
        crate::steps::GpuView,
    ) {
        if let Some(reason) = self.reason {
            unwatched.push(("gpu".to_string(), reason));
        }
        #[cfg(feature = "gpu")]
        if let Some(watch) = self.watch {
            let gpus = watch.environment();
            let view = crate::steps::GpuView::new(watch.handle());
            sources.push(Box::new(watch));
            return (gpus, view);
        }
        #[cfg(not(feature = "gpu"))]
        let _ = sources;
        (Vec::new(), crate::steps::GpuView::default())
    }
}
