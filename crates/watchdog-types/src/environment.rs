//! The environment record: what the watchdog knows about where a run runs, written in
//! the `start` event and the flight recording's `meta` line so that two runs can be
//! compared ("why does it work here and not there").
//!
//! Every field is optional or may be empty, so a record the watchdog could only partly
//! read, or one written by an older or newer watchdog, still parses; what could not be
//! read is said in [`Environment::unknown`] (one sentence each). Nothing secret goes in:
//! no environment variable values beyond the few named facts below (a Colab release tag,
//! a Kaggle run type, a SLURM partition), no home paths, no PIDs or times.
//!
//! The watchdog gathers the host part at start (`crates/watchdog/src/environment.rs`),
//! fills [`Environment::limits`] from its resource table, and [`Environment::python`] from
//! the file the Python client writes beside the request file. Which of these fields are
//! differences between two runs (and which come first) is decided by the report crate's
//! comparison.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ResourceKind, Unit};

/// The environment of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// The machine: kernel, CPU, RAM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostFacts>,
    /// The platforms detected (a SLURM job may run in a container), in a fixed order:
    /// Colab, Kaggle, SLURM, container. Empty on a plain machine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub platform: Vec<Platform>,
    /// Every resource the watchdog watches, with its limit and where the limit came from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitFact>,
    /// The filesystems watched, with their sizes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskFact>,
    /// The target's own `/dev/shm`, read through `/proc/PID/root/dev/shm` (a container or
    /// a private mount namespace has its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm: Option<ShmFact>,
    /// The runtime cap and where it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeCap>,
    /// The GPUs NVML sees (empty without NVML: then [`Environment::unknown`] says why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuFact>,
    /// Which definition of each figure the recording uses, by resource kind
    /// (`cgroup_memory` → `usage - active_file - inactive_file`), so a change of a
    /// figure's definition between watchdog versions is not taken for a difference
    /// between the runs' environments.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub definitions: BTreeMap<String, String>,
    /// The run's Python side, from the client's `environment` file (absent until the
    /// client writes it, and for runs that do not use the client).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonFacts>,
    /// What could not be read, one sentence each (`/dev/shm of PID 12: permission denied`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// The machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostFacts {
    /// Kernel release (`uname -r`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Machine architecture (`uname -m`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// CPU model name (`model name` of `/proc/cpuinfo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Logical CPUs (`processor` entries of `/proc/cpuinfo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<u32>,
    /// `MemTotal` of `/proc/meminfo`, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<u64>,
    /// `SwapTotal` of `/proc/meminfo`, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_total_bytes: Option<u64>,
}

/// A platform the run is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlatformKind {
    /// Google Colab (`COLAB_RELEASE_TAG` or `COLAB_GPU` set).
    Colab,
    /// A Kaggle notebook (`KAGGLE_KERNEL_RUN_TYPE` set).
    Kaggle,
    /// A SLURM job (`SLURM_JOB_ID` set).
    Slurm,
    /// A container (`/.dockerenv`, `/run/.containerenv`, or a container's cgroup path in
    /// `/proc/1/cgroup`).
    Container,
}

/// One detected platform, with the one named fact that tells its versions apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// Which platform.
    pub kind: PlatformKind,
    /// Colab: the release tag; Kaggle: the run type; SLURM: the partition; container: the
    /// runtime (`docker`, `podman`, `kubernetes`, `lxc`, ...) when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Container: the Kubernetes pod's UID, from the target's cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// Container: the container's ID, from the target's cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

/// One watched resource and its limit, as the `limit` event reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitFact {
    /// Resource name (`cgroup_memory`, `disk:/data`).
    pub resource: String,
    /// Its kind.
    pub kind: ResourceKind,
    /// The limit in the resource's unit; `None` (null) when it has none.
    #[serde(default)]
    pub limit: Option<u64>,
    /// The resource's unit.
    pub unit: Unit,
    /// Where the figure and the limit come from (a cgroup file, `--mem-limit`, a mount).
    #[serde(default)]
    pub source: String,
}

/// One watched filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskFact {
    /// The path watched, as given (`/dev/shm`, `--disk` paths).
    pub path: String,
    /// Its size in bytes (`f_blocks * f_frsize` of statvfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Its inodes (`f_files` of statvfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Where the filesystem holding the path is mounted (`/`, `/data`), from
    /// `/proc/self/mountinfo`: two runs' disks are compared by it, so that two
    /// directories on one filesystem are one disk. Absent in older recordings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_point: Option<String>,
    /// The filesystem's type (`ext4`, `tmpfs`), from the same line of mountinfo.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_type: Option<String>,
}

/// The target's own `/dev/shm`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShmFact {
    /// Its size in bytes (statvfs of `/proc/PID/root/dev/shm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Whether it is the host's own `/dev/shm` (same device), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_as_host: Option<bool>,
}

/// Where a runtime cap comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeSource {
    /// `--max-runtime`.
    MaxRuntime,
    /// `--deadline` (the cap depends on when the run started).
    Deadline,
    /// `SLURM_JOB_END_TIME` (the cap depends on when the run started in the job).
    Slurm,
    /// Google Colab's session cap.
    Colab,
    /// Kaggle's session cap.
    Kaggle,
}

/// The runtime cap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeCap {
    /// Seconds from the target's start.
    pub limit_s: f64,
    /// Where it came from.
    pub source: RuntimeSource,
    /// The description the `runtime` resource carries.
    #[serde(default)]
    pub detail: String,
}

/// One GPU, from NVML.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuFact {
    /// NVML index.
    pub index: u32,
    /// Product name (`Tesla T4`).
    pub model: String,
    /// The memory CUDA can allocate (total minus what the driver reserves), bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Driver version (`535.104.05`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The CUDA version the driver supports (`12.2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_driver: Option<String>,
}

/// The run's Python side, as the client reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PythonFacts {
    /// `CPython`, `PyPy`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// The interpreter's version (`3.11.4`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Installed versions of the packages that decide how training behaves (`torch`,
    /// `tensorflow`, `keras`, `jax`, `lightning`, `transformers`, `numpy`), by name; a
    /// package not installed is absent.
    pub packages: BTreeMap<String, String>,
    /// The CUDA version torch was built with (`torch/version.py`'s `cuda`), when torch is
    /// installed with CUDA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_cuda: Option<String>,
}

/// The definition of the figure of each resource kind, as the recording uses it.
pub fn definition(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::HostMemory => "MemTotal - MemAvailable of /proc/meminfo",
        ResourceKind::Swap => "SwapTotal - SwapFree of /proc/meminfo",
        ResourceKind::CgroupMemory => "usage - active_file - inactive_file",
        ResourceKind::TreeMemory => "sum of RSS over the process tree",
        ResourceKind::CgroupCache => "active_file + inactive_file",
        ResourceKind::DiskBytes => "(f_blocks - f_bfree) * f_frsize of statvfs",
        ResourceKind::DiskInodes => "f_files - f_ffree of statvfs",
        ResourceKind::Runtime => "wall time since the target's start",
        ResourceKind::GpuMemory => "NVML used memory",
        ResourceKind::Notice => "an announced end: no figure, a deadline",
    }
}

/// The definitions of every kind, keyed by the kind's name.
pub fn definitions() -> BTreeMap<String, String> {
    crate::ResourceKind::ALL
        .iter()
        .map(|&k| (k.as_str().to_owned(), definition(k).to_owned()))
        .collect()
}

/// `text` with every home directory (`/home/NAME`, `/root`) in it written `~`: the
/// record says which filesystem, never whose home (`/home/alice/runs` -> `~/runs`).
pub fn hide_homes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('/') {
        // Only at the start of a path: at the start of the text, or after a space, a quote,
        // a bracket, `:`, `=` or `,` (the character before the `/`, in `out` or in `rest`).
        let before = rest[..i]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back());
        let at_path_start = before.is_none_or(|c| c.is_whitespace() || "('\"[:=,".contains(c));
        let tail = &rest[i..];
        let home_len = if !at_path_start {
            None
        } else if let Some(after) = tail.strip_prefix("/home/") {
            let name = after
                .find(['/', ' ', ')', '\'', '"', ','])
                .unwrap_or(after.len());
            (name > 0).then_some("/home/".len() + name)
        } else if tail == "/root" || tail.starts_with("/root/") || tail.starts_with("/root)") {
            Some("/root".len())
        } else {
            None
        };
        match home_len {
            Some(n) => {
                out.push_str(&rest[..i]);
                out.push('~');
                rest = &tail[n..];
            }
            None => {
                out.push_str(&rest[..=i]);
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Issue 13: "no home paths" in the record; the watched directory is often a home.
    #[test]
    fn home_directories_are_written_as_a_tilde() {
        assert_eq!(hide_homes("disk:/home/alice/runs"), "disk:~/runs");
        assert_eq!(hide_homes("/root"), "~");
        assert_eq!(
            hide_homes("statvfs(/root/x): free blocks"),
            "statvfs(~/x): free blocks"
        );
        assert_eq!(hide_homes("/home/bob"), "~");
        assert_eq!(hide_homes("/data/home/alice"), "/data/home/alice");
        // Only the home at the start of the path: a `home` directory inside it stays.
        assert_eq!(hide_homes("disk:/home/a/home/b"), "disk:~/home/b");
        assert_eq!(hide_homes("/rootfs/x"), "/rootfs/x");
        assert_eq!(hide_homes("--mem-limit"), "--mem-limit");
        assert_eq!(
            hide_homes("/sys/fs/cgroup/memory/x"),
            "/sys/fs/cgroup/memory/x"
        );
    }

    /// An empty record is written as `{}`, and `{}` (or unknown fields) reads back.
    #[test]
    fn an_empty_record_round_trips() {
        let env = Environment::default();
        assert_eq!(serde_json::to_string(&env).unwrap(), "{}");
        let back: Environment = serde_json::from_str(r#"{"future_field": 1}"#).unwrap();
        assert_eq!(back, env);
    }

    #[test]
    fn a_full_record_round_trips() {
        let env = Environment {
            host: Some(HostFacts {
                kernel: Some("6.1.0".into()),
                cpu_cores: Some(2),
                mem_total_bytes: Some(1 << 30),
                ..HostFacts::default()
            }),
            platform: vec![Platform {
                kind: PlatformKind::Colab,
                detail: Some("release-colab_20240101-060000_RC00".into()),
                pod_uid: None,
                container_id: None,
            }],
            limits: vec![LimitFact {
                resource: "tree_memory".into(),
                kind: ResourceKind::TreeMemory,
                limit: Some(400 << 20),
                unit: Unit::Bytes,
                source: "--mem-limit".into(),
            }],
            runtime: Some(RuntimeCap {
                limit_s: 43200.0,
                source: RuntimeSource::Colab,
                detail: "Google Colab".into(),
            }),
            definitions: definitions(),
            python: Some(PythonFacts {
                packages: [("torch".to_owned(), "2.3.0".to_owned())].into(),
                ..PythonFacts::default()
            }),
            ..Environment::default()
        };
        let text = serde_json::to_string(&env).unwrap();
        assert!(text.contains(r#""kind":"colab""#), "{text}");
        assert_eq!(serde_json::from_str::<Environment>(&text).unwrap(), env);
        assert_eq!(
            env.definitions["cgroup_memory"],
            "usage - active_file - inactive_file"
        );
    }
}
