//! Pure parsers for the GPU source: which devices a process may use
//! (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`) and the `NSpid:` line of
//! `/proc/PID/status` that maps PIDs across PID namespaces.

use watchdog_procfs::ProcRoot;

/// One entry of a `CUDA_VISIBLE_DEVICES` or `NVIDIA_VISIBLE_DEVICES` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// A device index (`0`, `3`).
    Index(u32),
    /// A GPU UUID or a unique prefix of one, with its `GPU-` prefix (`GPU-8f3a`).
    Uuid(String),
    /// A MIG instance (`MIG-...` or `MIG-GPU-.../1/0`): the GPU it lives on is
    /// not resolved, so a list holding one selects every device.
    Mig(String),
}

/// Parses `CUDA_VISIBLE_DEVICES` as the CUDA runtime does: a comma-separated
/// list of indices and `GPU-`/`MIG-` UUIDs, where the first entry that is not
/// valid (`-1`, `foo`) ends the list and hides everything after it. An empty
/// value hides every device.
pub fn parse_cuda_visible_devices(value: &str) -> Vec<DeviceSelector> {
    let mut out = Vec::new();
    for entry in value.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            break;
        }
        if let Ok(i) = entry.parse::<u32>() {
            out.push(DeviceSelector::Index(i));
        } else if entry.starts_with("GPU-") {
            out.push(DeviceSelector::Uuid(entry.to_string()));
        } else if entry.starts_with("MIG-") {
            out.push(DeviceSelector::Mig(entry.to_string()));
        } else {
            break;
        }
    }
    out
}

/// Parses `NVIDIA_VISIBLE_DEVICES` as the NVIDIA container runtime does:
/// `all` selects every device (`None`: no filter), `none`, `void` and the empty
/// value select none, anything else is a list of indices and UUIDs.
pub fn parse_nvidia_visible_devices(value: &str) -> Option<Vec<DeviceSelector>> {
    match value.trim() {
        "all" => None,
        "none" | "void" | "" => Some(Vec::new()),
        list => Some(
            list.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(|e| match e.parse::<u32>() {
                    Ok(i) => DeviceSelector::Index(i),
                    Err(_) if e.starts_with("MIG-") => DeviceSelector::Mig(e.to_string()),
                    Err(_) => DeviceSelector::Uuid(e.to_string()),
                })
                .collect(),
        ),
    }
}

/// The device-visibility settings of the watched process.
///
/// Indices are read as NVML indices (PCI bus order, as `nvidia-smi` numbers
/// GPUs). CUDA numbers devices fastest-first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`,
/// so on a machine with mixed GPU models an index may name another GPU than
/// CUDA's; UUIDs are always exact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VisibleDevices {
    /// The target's `CUDA_VISIBLE_DEVICES`, if set.
    pub cuda: Option<String>,
    /// The target's `NVIDIA_VISIBLE_DEVICES`, if set and not already applied
    /// by a container runtime to the NVML this watchdog sees (see [`VisibleDevices::of_process`]).
    pub nvidia: Option<String>,
}

impl VisibleDevices {
    /// Reads the two variables from `<proc_root>/<pid>/environ`. `NVIDIA_VISIBLE_DEVICES`
    /// is kept only when the target runs in another mount namespace than the watchdog
    /// (the watchdog outside the target's container): inside the same container the
    /// runtime has already hidden the other GPUs from NVML and renumbered the rest.
    /// An unreadable environment gives no filter.
    pub fn of_process(proc_root: &ProcRoot, pid: u32) -> VisibleDevices {
        let Ok(environ) = proc_root.environ(pid) else {
            return VisibleDevices::default();
        };
        let mut cuda = None;
        let mut nvidia = None;
        for (key, value) in environ {
            match key.as_str() {
                "CUDA_VISIBLE_DEVICES" => cuda = Some(value),
                "NVIDIA_VISIBLE_DEVICES" => nvidia = Some(value),
                _ => {}
            }
        }
        let same_mnt_ns = match (
            proc_root.own_namespace("mnt"),
            proc_root.namespace(pid, "mnt"),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => true,
        };
        if same_mnt_ns {
            nvidia = None;
        }
        VisibleDevices { cuda, nvidia }
    }

    /// Which of `devices` (their UUIDs, in NVML index order) the target may use,
    /// as positions into `devices`, in NVML order.
    pub fn select(&self, uuids: &[&str]) -> Vec<usize> {
        let mut current: Vec<usize> = (0..uuids.len()).collect();
        if let Some(list) = self
            .nvidia
            .as_deref()
            .and_then(parse_nvidia_visible_devices)
        {
            current = apply(&list, &current, uuids);
        }
        if let Some(value) = &self.cuda {
            current = apply(&parse_cuda_visible_devices(value), &current, uuids);
        }
        current.sort_unstable();
        current.dedup();
        current
    }

    /// The settings as a short phrase for messages (`CUDA_VISIBLE_DEVICES='1'`).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = &self.cuda {
            parts.push(format!("CUDA_VISIBLE_DEVICES='{v}'"));
        }
        if let Some(v) = &self.nvidia {
            parts.push(format!("NVIDIA_VISIBLE_DEVICES='{v}'"));
        }
        if parts.is_empty() {
            "no visibility variables".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// Applies one list to the devices still visible: indices count within `current`.
fn apply(list: &[DeviceSelector], current: &[usize], uuids: &[&str]) -> Vec<usize> {
    if list.iter().any(|s| matches!(s, DeviceSelector::Mig(_))) {
        return current.to_vec();
    }
    let mut out = Vec::new();
    for sel in list {
        match sel {
            DeviceSelector::Index(i) => {
                if let Some(&d) = current.get(*i as usize) {
                    out.push(d);
                }
            }
            DeviceSelector::Uuid(prefix) => {
                let matching: Vec<usize> = current
                    .iter()
                    .copied()
                    .filter(|&d| uuids.get(d).is_some_and(|u| u.starts_with(prefix.as_str())))
                    .collect();
                // A prefix naming two GPUs is ambiguous; CUDA rejects it too.
                if let [d] = matching[..] {
                    out.push(d);
                }
            }
            DeviceSelector::Mig(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUIDS: [&str; 4] = [
        "GPU-aaaa1111-0000",
        "GPU-bbbb2222-0000",
        "GPU-cccc3333-0000",
        "GPU-cccc4444-0000",
    ];

    fn cuda(v: &str) -> Vec<usize> {
        VisibleDevices {
            cuda: Some(v.into()),
            nvidia: None,
        }
        .select(&UUIDS)
    }

    #[test]
    fn cuda_visible_devices_table() {
        assert_eq!(cuda("0,1,2,3"), vec![0, 1, 2, 3]);
        assert_eq!(cuda("2"), vec![2]);
        assert_eq!(cuda(" 3 , 1"), vec![1, 3]);
        assert_eq!(cuda(""), Vec::<usize>::new());
        assert_eq!(cuda("-1"), Vec::<usize>::new());
        // An invalid entry hides everything after it.
        assert_eq!(cuda("1,-1,2"), vec![1]);
        assert_eq!(cuda("1,foo,2"), vec![1]);
        assert_eq!(cuda("7"), Vec::<usize>::new());
        assert_eq!(cuda("GPU-bbbb2222-0000"), vec![1]);
        assert_eq!(cuda("GPU-bbbb"), vec![1]);
        // Ambiguous prefix: none.
        assert_eq!(cuda("GPU-cccc"), Vec::<usize>::new());
        assert_eq!(cuda("MIG-GPU-aaaa1111-0000/1/0"), vec![0, 1, 2, 3]);
        assert_eq!(
            parse_cuda_visible_devices("0,GPU-x,MIG-y"),
            vec![
                DeviceSelector::Index(0),
                DeviceSelector::Uuid("GPU-x".into()),
                DeviceSelector::Mig("MIG-y".into())
            ]
        );
    }

    #[test]
    fn nvidia_visible_devices_and_both() {
        assert_eq!(parse_nvidia_visible_devices("all"), None);
        assert_eq!(parse_nvidia_visible_devices("none"), Some(vec![]));
        assert_eq!(parse_nvidia_visible_devices("void"), Some(vec![]));
        let v = VisibleDevices {
            cuda: None,
            nvidia: Some("2,3".into()),
        };
        assert_eq!(v.select(&UUIDS), vec![2, 3]);
        // CUDA indices count within the devices the container runtime exposes.
        let v = VisibleDevices {
            cuda: Some("1".into()),
            nvidia: Some("2,3".into()),
        };
        assert_eq!(v.select(&UUIDS), vec![3]);
        let v = VisibleDevices {
            cuda: Some("0".into()),
            nvidia: Some("GPU-bbbb2222-0000".into()),
        };
        assert_eq!(v.select(&UUIDS), vec![1]);
        assert_eq!(VisibleDevices::default().select(&UUIDS), vec![0, 1, 2, 3]);
    }

    #[test]
    fn environ_of_a_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("77");
        std::fs::create_dir_all(p.join("ns")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("self/ns")).expect("mkdir");
        std::fs::write(
            p.join("environ"),
            b"PATH=/bin\0CUDA_VISIBLE_DEVICES=1,0\0NVIDIA_VISIBLE_DEVICES=all\0",
        )
        .expect("write");
        std::os::unix::fs::symlink("mnt:[1]", dir.path().join("self/ns/mnt")).expect("ln");
        std::os::unix::fs::symlink("mnt:[2]", p.join("ns/mnt")).expect("ln");
        let v = VisibleDevices::of_process(&ProcRoot::new(dir.path()), 77);
        assert_eq!(v.cuda.as_deref(), Some("1,0"));
        assert_eq!(v.nvidia.as_deref(), Some("all"));
        // Same mount namespace: the runtime already applied NVIDIA_VISIBLE_DEVICES.
        std::fs::remove_file(p.join("ns/mnt")).expect("rm");
        std::os::unix::fs::symlink("mnt:[1]", p.join("ns/mnt")).expect("ln");
        assert_eq!(
            VisibleDevices::of_process(&ProcRoot::new(dir.path()), 77).nvidia,
            None
        );
        assert_eq!(
            VisibleDevices::of_process(&ProcRoot::new(dir.path()), 78),
            VisibleDevices::default()
        );
    }
}
