//! Host memory and swap from `/proc/meminfo`.
//!
//! File format: <https://docs.kernel.org/filesystems/proc.html#meminfo> (values in KiB,
//! written `kB`). The [`HostMemory`] source reports two resources:
//!
//! - `host_memory`: used = `MemTotal - MemAvailable`, limit = `MemTotal`, in bytes;
//! - `swap`: used = `SwapTotal - SwapFree`, limit = `SwapTotal`, in bytes; not registered at all
//!   when the host has no swap (`SwapTotal: 0 kB`).
//!
//! `MemAvailable` is the kernel's estimate of memory that can be handed out without swapping,
//! and it lags real allocation: measured here, the first ~86 MB a new process touched did not
//! show in it at all, then it moved in 7.8 MiB steps (per-CPU vmstat counters are folded into
//! the global figure in batches). That is why the cgroup working set and the tree's RSS are
//! sampled too: on a fast allocator, host memory is the last figure to notice.

use std::path::Path;

use watchdog_types::{ResourceId, ResourceKind, Sample};

use crate::procfile::parse_u64;
use crate::shared::{Reads, TickFile};
use crate::{Outcome, ResourceTable, Source, SourceError, Tick};

/// The `/proc/meminfo` fields the watchdog uses, converted to bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`, bytes.
    pub mem_total: Option<u64>,
    /// `MemFree`, bytes.
    pub mem_free: Option<u64>,
    /// `MemAvailable`, bytes (absent before Linux 3.14).
    pub mem_available: Option<u64>,
    /// `SwapTotal`, bytes.
    pub swap_total: Option<u64>,
    /// `SwapFree`, bytes.
    pub swap_free: Option<u64>,
}

impl MemInfo {
    /// `(used, limit)` of host memory in bytes, when `MemTotal` and `MemAvailable` are both there.
    pub fn host_memory(&self) -> Option<(u64, u64)> {
        let total = self.mem_total?;
        let available = self.mem_available?;
        Some((total.saturating_sub(available), total))
    }

    /// `(used, limit)` of swap in bytes; `None` without swap (or without the fields).
    pub fn swap(&self) -> Option<(u64, u64)> {
        let total = self.swap_total?;
        let free = self.swap_free?;
        (total > 0).then(|| (total.saturating_sub(free), total))
    }
}

/// Parses the text of `/proc/meminfo`; fields it does not know or cannot read are left `None`.
///
/// Never allocates. Values are `kB` in the file (KiB, really) and bytes in the result.
pub fn parse_meminfo(text: &[u8]) -> MemInfo {
    let mut info = MemInfo::default();
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let slot = match key {
            b"MemTotal" => &mut info.mem_total,
            b"MemFree" => &mut info.mem_free,
            b"MemAvailable" => &mut info.mem_available,
            b"SwapTotal" => &mut info.swap_total,
            b"SwapFree" => &mut info.swap_free,
            _ => continue,
        };
        let rest = rest.trim_ascii();
        let (number, multiplier) = match rest.strip_suffix(b"kB") {
            Some(n) => (n, 1024),
            None => (rest, 1),
        };
        *slot = parse_u64(number).and_then(|v| v.checked_mul(multiplier));
        if info.swap_free.is_some() && info.mem_available.is_some() {
            // SwapFree comes after the other four; the remaining ~40 lines are not needed.
            break;
        }
    }
    info
}

/// The host memory source: `host_memory` and, when the host has swap, `swap`.
#[derive(Debug)]
pub struct HostMemory {
    file: TickFile,
    memory: ResourceId,
    swap: Option<ResourceId>,
}

impl HostMemory {
    /// Opens `<proc_root>/meminfo` through `reads`, reads it once and registers its resources
    /// in `table`.
    ///
    /// Fails when the file cannot be read or lacks `MemTotal`/`MemAvailable`.
    pub fn new(
        proc_root: &Path,
        reads: &Reads,
        table: &mut ResourceTable,
    ) -> Result<Self, SourceError> {
        let mut file = reads.file(proc_root.join("meminfo"), 4096)?;
        let info = parse_meminfo(file.read()?);
        let source = file.path().display().to_string();
        if info.host_memory().is_none() {
            return Err(SourceError::Parse {
                path: source,
                what: "no MemTotal or MemAvailable line (MemAvailable needs Linux 3.14)".into(),
            });
        }
        let memory = table.register(
            ResourceKind::HostMemory,
            "host_memory".into(),
            source.clone(),
        );
        let swap = info
            .swap()
            .map(|_| table.register(ResourceKind::Swap, "swap".into(), source));
        Ok(Self { file, memory, swap })
    }

    /// The `host_memory` resource's id.
    pub fn memory_id(&self) -> ResourceId {
        self.memory
    }

    /// The `swap` resource's id, when the host has swap.
    pub fn swap_id(&self) -> Option<ResourceId> {
        self.swap
    }
}

impl Source for HostMemory {
    fn name(&self) -> &str {
        "meminfo"
    }

    fn sample(
        &mut self,
        tick: &Tick<'_>,
        out: &mut dyn FnMut(Sample),
    ) -> Result<Outcome, SourceError> {
        let info = parse_meminfo(self.file.read()?);
        let Some((used, limit)) = info.host_memory() else {
            return Err(SourceError::Parse {
                path: self.file.path().display().to_string(),
                what: "MemTotal or MemAvailable disappeared".into(),
            });
        };
        out(Sample {
            resource: self.memory,
            t_ns: tick.now_ns,
            used,
            limit,
        });
        if let (Some(id), Some((used, limit))) = (self.swap, info.swap()) {
            out(Sample {
                resource: id,
                t_ns: tick.now_ns,
                used,
                limit,
            });
        }
        Ok(Outcome::Sampled)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const CAPTURED: &[u8] = include_bytes!("../tests/fixtures/meminfo.txt");

    #[test]
    fn parses_meminfo_captured_on_this_machine() {
        let info = parse_meminfo(CAPTURED);
        let total = info.mem_total.unwrap();
        let avail = info.mem_available.unwrap();
        assert!(total > 0 && total.is_multiple_of(1024));
        assert!(avail <= total);
        assert_eq!(info.host_memory(), Some((total - avail, total)));
    }

    #[test]
    fn parses_units_and_swap() {
        let text = b"MemTotal:       16303056 kB\nMemFree:          513812 kB\n\
MemAvailable:    9054532 kB\nBuffers:          232408 kB\nSwapTotal:       2097148 kB\n\
SwapFree:        2000000 kB\nHugePages_Total:       0\n";
        let info = parse_meminfo(text);
        assert_eq!(info.mem_total, Some(16303056 * 1024));
        assert_eq!(info.mem_free, Some(513812 * 1024));
        assert_eq!(
            info.host_memory(),
            Some(((16303056 - 9054532) * 1024, 16303056 * 1024))
        );
        assert_eq!(
            info.swap(),
            Some(((2097148 - 2000000) * 1024, 2097148 * 1024))
        );
    }

    #[test]
    fn no_swap_means_no_swap_resource() {
        let info = parse_meminfo(
            b"MemTotal: 100 kB\nMemAvailable: 50 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
        );
        assert_eq!(info.swap(), None);
        assert_eq!(info.host_memory(), Some((50 * 1024, 100 * 1024)));
    }

    #[test]
    fn hostile_and_truncated_input_is_not_a_panic() {
        for text in [
            &b""[..],
            b"MemTotal",
            b"MemTotal:",
            b"MemTotal: kB",
            b"MemTotal: 99999999999999999999 kB",
            b"MemAvailable: -5 kB\n",
            b"\xff\xfe:\n:::",
        ] {
            let info = parse_meminfo(text);
            assert_eq!(
                info.host_memory(),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        // MemAvailable above MemTotal (racy reads) saturates instead of wrapping.
        let info = parse_meminfo(b"MemTotal: 10 kB\nMemAvailable: 20 kB\n");
        assert_eq!(info.host_memory(), Some((0, 10 * 1024)));
    }

    #[test]
    fn source_reads_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), CAPTURED).unwrap();
        let mut table = ResourceTable::default();
        let mut src = HostMemory::new(dir.path(), &Reads::Own, &mut table).unwrap();
        assert_eq!(table.get(src.memory_id()).unwrap().name, "host_memory");
        let mut got = Vec::new();
        let tick = Tick {
            now_ns: 7,
            tree: &[],
        };
        assert_eq!(
            src.sample(&tick, &mut |s| got.push(s)).unwrap(),
            Outcome::Sampled
        );
        let expected = parse_meminfo(CAPTURED).host_memory().unwrap();
        assert_eq!(
            (got[0].used, got[0].limit, got[0].t_ns),
            (expected.0, expected.1, 7)
        );
        assert_eq!(got.len(), 1 + usize::from(src.swap_id().is_some()));
    }

    #[test]
    fn source_without_memavailable_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), "MemTotal: 100 kB\n").unwrap();
        let err =
            HostMemory::new(dir.path(), &Reads::Own, &mut ResourceTable::default()).unwrap_err();
        assert!(err.to_string().contains("MemAvailable"), "{err}");
    }
}
