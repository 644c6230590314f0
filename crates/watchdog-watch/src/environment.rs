//! Gathering the run's [`Environment`] (see `watchdog_types::environment`): the host, the
//! platform, the target's own `/dev/shm`, the watched disks' sizes, and later the limits
//! (from the engine's `limit` events) and the Python side (from the client's file).
//!
//! I/O stays at the edge ([`gather`], [`read_python`]): every path comes from
//! [`Host`]; the parsing ([`parse_cpuinfo`], [`detect_platforms`], [`container_runtime`],
//! [`runtime_source`], [`parse_python`]) is pure and tested with captured text. Nothing
//! secret is kept: of the target's environment only the named facts of
//! [`detect_platforms`] are read.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use watchdog_types::environment::{
    DiskFact, Environment, HostFacts, LimitFact, Platform, PlatformKind, PythonFacts, RuntimeCap,
    RuntimeSource, ShmFact, definitions,
};
use watchdog_types::{Resource, ResourceKind};

use watchdog_alerter::request::RequestPlace;
use watchdog_config::Host;
use watchdog_procfs::mount_of;

/// Largest Python environment file read (the client writes well under 4 KiB).
pub const MAX_PYTHON_FILE_BYTES: u64 = 64 * 1024;

/// The path of the client's environment file: `<request file>.environment`.
pub fn python_file(request: &RequestPlace) -> RequestPlace {
    request.sibling(".environment")
}

/// CPU model (`model name`, else `Model`/`cpu model` of other architectures) and logical
/// CPU count (`processor` lines) from `/proc/cpuinfo`
/// (<https://docs.kernel.org/filesystems/proc.html>). Pure.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, Option<u32>) {
    let mut model = None;
    let mut cores = 0u32;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => cores += 1,
            "model name" | "Model" | "cpu model" if model.is_none() && !value.is_empty() => {
                model = Some(value.to_string());
            }
            _ => {}
        }
    }
    (model, (cores > 0).then_some(cores))
}

/// The container runtime a cgroup file (`/proc/1/cgroup`) names, if any. Pure.
pub fn container_runtime(cgroup: &str) -> Option<&'static str> {
    let paths = cgroup.lines().filter_map(|l| l.splitn(3, ':').nth(2));
    for path in paths {
        for (needle, name) in [
            ("kubepods", "kubernetes"),
            ("docker", "docker"),
            ("libpod", "podman"),
            ("containerd", "containerd"),
            ("lxc", "lxc"),
        ] {
            if path.contains(needle) {
                return Some(name);
            }
        }
    }
    None
}

/// What marks a container on the host: files at the root and PID 1's cgroup file.
#[derive(Debug, Clone, Default)]
pub struct ContainerMarkers {
    /// `/.dockerenv` exists.
    pub dockerenv: bool,
    /// `/run/.containerenv` exists (podman).
    pub containerenv: bool,
    /// The text of `/proc/1/cgroup`.
    pub pid1_cgroup: String,
    /// The text of the target's `/proc/PID/cgroup`.
    pub target_cgroup: String,
}

/// The platforms the target runs on, from its environment and the container markers. Only
/// the named facts are kept: Colab's release tag, Kaggle's run type, SLURM's partition.
/// Pure.
pub fn detect_platforms(env: &[(String, String)], markers: &ContainerMarkers) -> Vec<Platform> {
    let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let mut out = Vec::new();
    if get("COLAB_RELEASE_TAG").is_some() || get("COLAB_GPU").is_some() {
        out.push(Platform {
            kind: PlatformKind::Colab,
            detail: get("COLAB_RELEASE_TAG"),
            pod_uid: None,
            container_id: None,
        });
    }
    if let Some(kind) = get("KAGGLE_KERNEL_RUN_TYPE") {
        out.push(Platform {
            kind: PlatformKind::Kaggle,
            detail: Some(kind),
            pod_uid: None,
            container_id: None,
        });
    }
    if get("SLURM_JOB_ID").is_some() {
        out.push(Platform {
            kind: PlatformKind::Slurm,
            detail: get("SLURM_JOB_PARTITION"),
            pod_uid: None,
            container_id: None,
        });
    }
    let runtime = container_runtime(&markers.pid1_cgroup)
        .or(markers.dockerenv.then_some("docker"))
        .or(markers.containerenv.then_some("podman"));
    if runtime.is_some() || get("container").is_some() {
        let (pod_uid, container_id) = container_of(&markers.target_cgroup);
        out.push(Platform {
            kind: PlatformKind::Container,
            detail: runtime.map(str::to_string).or_else(|| get("container")),
            pod_uid,
            container_id,
        });
    }
    out
}

/// The Kubernetes pod UID and the container ID a cgroup file (`/proc/PID/cgroup`) names,
/// each when it does. Pure. The layouts (kubernetes `pkg/kubelet/cm/cgroup_manager_linux.go`):
/// the systemd driver's `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with
/// _>.slice/cri-containerd-<id>.scope` (guaranteed pods have no QoS level), cgroupfs's
/// `kubepods/<qos>/pod<uid>/<id>`; docker's `docker-<id>.scope` or `docker/<id>`. A cgroup
/// namespace that shows `0::/` names neither.
pub fn container_of(cgroup: &str) -> (Option<String>, Option<String>) {
    let hex_id = |s: &str| {
        (s.len() >= 12 && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| s.to_string())
    };
    let uid_chars = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_')
    };
    let (mut pod, mut id) = (None, None);
    for path in cgroup.lines().filter_map(|l| l.splitn(3, ':').nth(2)) {
        for part in path.split('/') {
            let name = part
                .strip_suffix(".slice")
                .or_else(|| part.strip_suffix(".scope"))
                .unwrap_or(part);
            if let Some(i) = name.rfind("pod")
                && (name.starts_with("kubepods") || i == 0)
                && uid_chars(&name[i + 3..])
            {
                pod = Some(name[i + 3..].replace('_', "-"));
            }
            let tail = name.rsplit('-').next().unwrap_or(name);
            if let Some(found) = hex_id(tail).filter(|_| part != name || !name.contains("pod")) {
                id = Some(found);
            }
        }
    }
    (pod, id)
}

/// Where a `runtime` resource's limit came from, from its description (the one
/// `watchdog_sampler::runtime::runtime_limit` writes). Pure.
pub fn runtime_source(description: &str) -> Option<RuntimeSource> {
    [
        ("--max-runtime", RuntimeSource::MaxRuntime),
        ("--deadline", RuntimeSource::Deadline),
        ("SLURM_JOB_END_TIME", RuntimeSource::Slurm),
        ("Google Colab", RuntimeSource::Colab),
        ("Kaggle", RuntimeSource::Kaggle),
    ]
    .into_iter()
    .find(|(prefix, _)| description.starts_with(prefix))
    .map(|(_, s)| s)
}

/// Records a limit the engine reported (the latest value of a resource wins), and the
/// runtime cap when it is the `runtime` resource.
pub fn note_limit(env: &mut Environment, mut fact: LimitFact) {
    fact.resource = hide_homes(&fact.resource);
    fact.source = hide_homes(&fact.source);
    if fact.kind == ResourceKind::Runtime
        && let (Some(ms), Some(source)) = (fact.limit, runtime_source(&fact.source))
    {
        env.runtime = Some(RuntimeCap {
            limit_s: ms as f64 / 1e3,
            source,
            detail: fact.source.clone(),
        });
    }
    match env.limits.iter_mut().find(|l| l.resource == fact.resource) {
        Some(l) => *l = fact,
        None => env.limits.push(fact),
    }
}

pub use watchdog_types::environment::hide_homes;

/// The client's report: the PID of the process that wrote it (so a file left by an
/// earlier run is not taken for this run's) and the Python side.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct PythonReport {
    /// The writer's PID.
    pub pid: Option<u32>,
    /// The interpreter and the packages.
    #[serde(flatten)]
    pub facts: PythonFacts,
}

/// The client's report from its JSON, keeping only the known fields (the packages'
/// names and versions are length-capped). Pure.
pub fn parse_python(bytes: &[u8]) -> Result<PythonReport, String> {
    let PythonReport { pid, mut facts } =
        serde_json::from_slice(bytes).map_err(|e| format!("not the client's JSON: {e}"))?;
    let cap = |s: &mut String| s.truncate(s.floor_char_boundary(64));
    facts.packages = facts
        .packages
        .into_iter()
        .take(32)
        .map(|(mut k, mut v)| {
            cap(&mut k);
            cap(&mut v);
            (k, v)
        })
        .collect();
    for s in [
        &mut facts.implementation,
        &mut facts.version,
        &mut facts.torch_cuda,
    ]
    .into_iter()
    .flatten()
    {
        cap(s);
    }
    Ok(PythonReport { pid, facts })
}

/// Reads the client's environment file: `Ok(None)` while it does not exist; an error
/// for a symlink (not followed), anything but a regular file, a file over
/// [`MAX_PYTHON_FILE_BYTES`], or bad JSON.
pub fn read_python(place: &RequestPlace) -> Result<Option<PythonReport>, String> {
    let name = place.path();
    match place.read_capped(MAX_PYTHON_FILE_BYTES) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => parse_python(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", name.display())),
        Err(e) => Err(format!("{}: {e}", name.display())),
    }
}

/// Size in bytes and inode count of the filesystem holding `path`.
fn vfs_size(path: &Path) -> Result<(u64, u64), String> {
    rustix::fs::statvfs(path)
        .map(|s| (s.f_blocks.saturating_mul(s.f_frsize), s.f_files))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The target's own `/dev/shm`, through `/proc/PID/root` (its mount namespace).
pub fn target_shm(host: &Host, pid: u32) -> Result<ShmFact, String> {
    let shm = host.proc_file(pid, "root").join("dev/shm");
    let (size, _) = vfs_size(&shm)?;
    let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| m.dev());
    Ok(ShmFact {
        size_bytes: Some(size),
        same_as_host: dev(&shm).zip(dev(&host.shm)).map(|(a, b)| a == b),
    })
}

/// What the watchdog knows at start about the target `pid` and the `resources` it watches
/// (the limits follow with the engine's `limit` events, see [`note_limit`]).
pub fn gather(host: &Host, pid: u32, resources: &[Resource]) -> Environment {
    let mut env = Environment {
        definitions: definitions(),
        ..Environment::default()
    };
    let mut facts = HostFacts {
        arch: Some(std::env::consts::ARCH.to_string()),
        ..HostFacts::default()
    };
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    match host.proc.read_host("sys/kernel/osrelease").map(text) {
        Ok(s) => facts.kernel = Some(s.trim().to_string()),
        Err(e) => env.unknown.push(format!("kernel release: {e}")),
    }
    match host.proc.read_host("cpuinfo").map(text) {
        Ok(s) => (facts.cpu_model, facts.cpu_cores) = parse_cpuinfo(&s),
        Err(e) => env.unknown.push(format!("CPU: {e}")),
    }
    match host.proc.read_host("meminfo") {
        Ok(b) => {
            let m = watchdog_sampler::meminfo::parse_meminfo(&b);
            (facts.mem_total_bytes, facts.swap_total_bytes) = (m.mem_total, m.swap_total);
        }
        Err(e) => env.unknown.push(format!("RAM: {e}")),
    }
    env.host = Some(facts);

    let target_env = host.proc.environ(pid).unwrap_or_else(|e| {
        env.unknown
            .push(format!("the target's environment (platform): {e}"));
        Vec::new()
    });
    let markers = ContainerMarkers {
        dockerenv: host.root.join(".dockerenv").exists(),
        containerenv: host.root.join("run/.containerenv").exists(),
        pid1_cgroup: host.proc.cgroup_text(1).unwrap_or_default(),
        target_cgroup: host.proc.cgroup_text(pid).unwrap_or_default(),
    };
    env.platform = detect_platforms(&target_env, &markers);
    if env.platform.iter().any(|p| {
        p.kind == PlatformKind::Container && p.pod_uid.is_none() && p.container_id.is_none()
    }) {
        env.unknown.push(
            "the container's ID and pod: its cgroup path does not name them (a cgroup namespace shows 0::/)".into(),
        );
    }

    match target_shm(host, pid) {
        Ok(shm) => env.shm = Some(shm),
        Err(e) => env.unknown.push(format!("the target's /dev/shm: {e}")),
    }

    let disks: Vec<&str> = resources
        .iter()
        .filter(|r| r.kind == ResourceKind::DiskBytes)
        .map(|r| r.name.strip_prefix("disk:").unwrap_or(&r.name))
        .collect();
    let mounts = if disks.is_empty() {
        Vec::new()
    } else {
        host.proc.own_mountinfo().unwrap_or_else(|e| {
            let why = match &e {
                watchdog_procfs::Error::Read { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            env.unknown
                .push(format!("the disks' mounts: {}: {why}", e.path().display()));
            Vec::new()
        })
    };
    for path in disks {
        match vfs_size(Path::new(path)) {
            Ok((size, inodes)) => {
                let mount = std::fs::canonicalize(path)
                    .ok()
                    .and_then(|p| mount_of(&mounts, &p).cloned());
                env.disks.push(DiskFact {
                    path: hide_homes(path),
                    size_bytes: Some(size),
                    inodes: (inodes > 0).then_some(inodes),
                    mount_point: mount
                        .as_ref()
                        .map(|m| hide_homes(&m.mount_point.to_string_lossy())),
                    fs_type: mount.map(|m| m.fs_type),
                })
            }
            Err(e) => env.unknown.push(format!("disk size: {e}")),
        }
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_testsupport::env_pairs as env;

    use std::time::{Duration, SystemTime};
    use watchdog_sampler::runtime::runtime_limit;
    use watchdog_types::Unit;

    const CPUINFO_X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t\t: fpu vme\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\n";
    const CPUINFO_ARM: &str = "processor\t: 0\nBogoMIPS\t: 108.00\n\nprocessor\t: 1\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";

    #[test]
    fn cpuinfo_gives_the_model_and_the_logical_cpus() {
        assert_eq!(
            parse_cpuinfo(CPUINFO_X86),
            (Some("Intel(R) Xeon(R) CPU @ 2.20GHz".into()), Some(2))
        );
        assert_eq!(
            parse_cpuinfo(CPUINFO_ARM),
            (Some("Raspberry Pi 4 Model B Rev 1.4".into()), Some(2))
        );
        assert_eq!(parse_cpuinfo(""), (None, None));
        assert_eq!(parse_cpuinfo("garbage\n: :\nmodel name:\n"), (None, None));
    }

    #[test]
    fn platforms_from_the_environment_and_the_markers() {
        let none = ContainerMarkers::default();
        let kinds =
            |e: &[(&str, &str)], m: &ContainerMarkers| -> Vec<(PlatformKind, Option<String>)> {
                detect_platforms(&env(e), m)
                    .into_iter()
                    .map(|p| (p.kind, p.detail))
                    .collect()
            };
        assert_eq!(kinds(&[("HOME", "/root")], &none), vec![]);
        assert_eq!(
            kinds(
                &[
                    ("COLAB_RELEASE_TAG", "release-colab_2024"),
                    ("COLAB_GPU", "1")
                ],
                &none
            ),
            vec![(PlatformKind::Colab, Some("release-colab_2024".into()))]
        );
        assert_eq!(
            kinds(&[("COLAB_GPU", "0")], &none),
            vec![(PlatformKind::Colab, None)]
        );
        assert_eq!(
            kinds(&[("KAGGLE_KERNEL_RUN_TYPE", "Interactive")], &none),
            vec![(PlatformKind::Kaggle, Some("Interactive".into()))]
        );
        let docker = ContainerMarkers {
            dockerenv: true,
            ..ContainerMarkers::default()
        };
        assert_eq!(
            kinds(
                &[("SLURM_JOB_ID", "77"), ("SLURM_JOB_PARTITION", "gpu")],
                &docker
            ),
            vec![
                (PlatformKind::Slurm, Some("gpu".into())),
                (PlatformKind::Container, Some("docker".into()))
            ]
        );
        let k8s = ContainerMarkers {
            pid1_cgroup: "12:memory:/kubepods/burstable/pod1/abc\n0::/\n".into(),
            ..ContainerMarkers::default()
        };
        assert_eq!(
            kinds(&[], &k8s),
            vec![(PlatformKind::Container, Some("kubernetes".into()))]
        );
        // A plain host's PID 1 (systemd) is no container.
        let host = ContainerMarkers {
            pid1_cgroup: "12:memory:/init.scope\n0::/init.scope\n".into(),
            ..ContainerMarkers::default()
        };
        assert_eq!(kinds(&[], &host), vec![]);
    }

    /// The runtime sources are told apart by the descriptions `runtime_limit` writes.
    #[test]
    fn runtime_sources_from_the_runtime_descriptions() {
        let now = SystemTime::now();
        let describe = |e: &[(&str, &str)], max, deadline| {
            runtime_limit(&env(e), now, now, max, deadline)
                .map(|(_, d)| d)
                .unwrap()
        };
        let cases = [
            (
                describe(&[], Some(Duration::from_secs(60)), None),
                RuntimeSource::MaxRuntime,
            ),
            (
                describe(&[], None, Some(now + Duration::from_secs(60))),
                RuntimeSource::Deadline,
            ),
            (
                describe(&[("SLURM_JOB_END_TIME", "99999999999")], None, None),
                RuntimeSource::Slurm,
            ),
            (
                describe(&[("COLAB_GPU", "1")], None, None),
                RuntimeSource::Colab,
            ),
            (
                describe(&[("KAGGLE_KERNEL_RUN_TYPE", "Batch")], None, None),
                RuntimeSource::Kaggle,
            ),
        ];
        for (description, source) in cases {
            assert_eq!(runtime_source(&description), Some(source), "{description}");
        }
        assert_eq!(runtime_source("something else"), None);
    }

    #[test]
    fn a_runtime_limit_gives_the_runtime_cap_and_later_limits_replace_earlier_ones() {
        let mut e = Environment::default();
        let fact = |limit| LimitFact {
            resource: "runtime".into(),
            kind: ResourceKind::Runtime,
            limit: Some(limit),
            unit: Unit::Millis,
            source: "--max-runtime 1m00s".into(),
        };
        note_limit(&mut e, fact(60_000));
        note_limit(&mut e, fact(30_000));
        assert_eq!(e.limits.len(), 1);
        assert_eq!(e.limits[0].limit, Some(30_000));
        let cap = e.runtime.unwrap();
        assert_eq!((cap.limit_s, cap.source), (30.0, RuntimeSource::MaxRuntime));
    }

    #[test]
    fn the_python_file_is_read_capped_and_never_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("req.environment");
        let at = |p: &Path| RequestPlace::Path(p.to_path_buf());
        assert_eq!(read_python(&at(&path)), Ok(None));
        std::fs::write(
            &path,
            r#"{"implementation":"CPython","version":"3.11.4","packages":{"numpy":"1.26.4"},"pid":12,"extra":1}"#,
        )
        .unwrap();
        let report = read_python(&at(&path)).unwrap().unwrap();
        assert_eq!(report.pid, Some(12));
        let facts = report.facts;
        assert_eq!(facts.version.as_deref(), Some("3.11.4"));
        assert_eq!(facts.packages["numpy"], "1.26.4");

        let link = dir.path().join("link.environment");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_python(&at(&link)).is_err());

        let big = dir.path().join("big.environment");
        std::fs::write(&big, vec![b' '; MAX_PYTHON_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_python(&at(&big)).is_err());

        std::fs::write(&path, "not json").unwrap();
        assert!(
            read_python(&at(&path))
                .unwrap_err()
                .contains("not the client's JSON")
        );
    }

    #[test]
    fn long_python_values_are_cut() {
        let long = "9".repeat(500);
        let json = format!(r#"{{"version":"{long}","packages":{{"torch":"{long}"}}}}"#);
        let facts = parse_python(json.as_bytes()).unwrap().facts;
        assert_eq!(facts.version.unwrap().len(), 64);
        assert_eq!(facts.packages["torch"].len(), 64);
    }

    /// Gathering on this machine: the kernel, the CPUs and the RAM are found, and the
    /// target's own /dev/shm is the host's.
    #[test]
    fn gathering_on_this_host() {
        let host = Host::from_env();
        let e = gather(&host, std::process::id(), &[]);
        let h = e.host.unwrap();
        assert!(h.kernel.is_some_and(|k| !k.is_empty()));
        assert!(h.cpu_cores.is_some_and(|c| c >= 1));
        assert!(h.mem_total_bytes.is_some_and(|m| m > 0));
        let shm = e.shm.unwrap();
        assert!(shm.size_bytes.is_some_and(|s| s > 0));
        assert_eq!(shm.same_as_host, Some(true));
        assert!(e.disks.is_empty());
        assert_eq!(
            e.definitions["cgroup_memory"],
            "usage - active_file - inactive_file"
        );
    }

    /// Issue 18: each watched disk's mount point and filesystem type are recorded, so
    /// that two directories on one filesystem compare as one disk.
    #[test]
    fn disks_are_recorded_with_their_mount_point_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let disk = |i: u16, path: &Path| Resource {
            id: watchdog_types::ResourceId(i),
            kind: ResourceKind::DiskBytes,
            name: format!("disk:{}", path.display()),
            source: "statvfs".into(),
        };
        let shm = Path::new("/dev/shm");
        let e = gather(
            &Host::from_env(),
            std::process::id(),
            &[disk(0, dir.path()), disk(1, shm)],
        );
        assert!(e.unknown.is_empty(), "{:?}", e.unknown);
        let (d, s) = (&e.disks[0], &e.disks[1]);
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        let mount = d.mount_point.as_deref().unwrap();
        assert!(canonical.starts_with(mount), "{d:?}");
        assert!(d.fs_type.as_deref().is_some_and(|t| !t.is_empty()), "{d:?}");
        if watchdog_sampler::disk::is_tmpfs(shm) {
            assert_eq!(s.mount_point.as_deref(), Some("/dev/shm"), "{s:?}");
            assert_eq!(s.fs_type.as_deref(), Some("tmpfs"), "{s:?}");
        }
    }
}

#[cfg(test)]
mod container_tests {
    use super::*;

    /// Paths in the layouts the kubelet and docker write (sources in [`container_of`]'s
    /// documentation); the IDs are made up in the real lengths.
    #[test]
    fn pods_and_containers_from_their_cgroup_paths() {
        let id = "a3f1c0ffee00112233445566778899aabbccddeeff00112233445566778899aa";
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c2d3e_4b5a_46c7_8d9e_0f1a2b3c4d5e.slice/cri-containerd-{id}.scope\n"
        );
        assert_eq!(
            container_of(&systemd),
            (
                Some("6f1c2d3e-4b5a-46c7-8d9e-0f1a2b3c4d5e".into()),
                Some(id.into())
            )
        );
        let guaranteed = format!(
            "0::/kubepods.slice/kubepods-pod6f1c2d3e_4b5a_46c7_8d9e_0f1a2b3c4d5e.slice/cri-containerd-{id}.scope\n"
        );
        assert_eq!(
            container_of(&guaranteed).0.as_deref(),
            Some("6f1c2d3e-4b5a-46c7-8d9e-0f1a2b3c4d5e")
        );
        let cgroupfs = format!(
            "12:memory:/kubepods/besteffort/pod6f1c2d3e-4b5a-46c7-8d9e-0f1a2b3c4d5e/{id}\n0::/\n"
        );
        assert_eq!(
            container_of(&cgroupfs),
            (
                Some("6f1c2d3e-4b5a-46c7-8d9e-0f1a2b3c4d5e".into()),
                Some(id.into())
            )
        );
        let docker = format!("0::/system.slice/docker-{id}.scope\n");
        assert_eq!(container_of(&docker), (None, Some(id.into())));
        assert_eq!(container_of("0::/\n"), (None, None), "a cgroup namespace");
        assert_eq!(
            container_of("0::/user.slice/user-1000.slice/session-3.scope\n"),
            (None, None)
        );
    }
}
