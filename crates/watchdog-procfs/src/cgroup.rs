//! `/proc/PID/cgroup` (`cgroups(7)`,
//! <https://docs.kernel.org/admin-guide/cgroup-v2.html#processes>): one line per hierarchy,
//! `HIERARCHY-ID:CONTROLLERS:PATH`, where the unified (v2) hierarchy is `0::PATH` and a v1
//! hierarchy lists its controllers (`4:memory:/docker/abc`). The sampler finds the memory
//! cgroup it reads from [`parse_proc_cgroup`]; the service's discovery matches rules on it.

/// One line of `/proc/PID/cgroup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLine<'a> {
    /// The hierarchy ID, as text (`0` for the unified hierarchy).
    pub hierarchy_id: &'a str,
    /// The controllers bound to the hierarchy, comma-separated (empty for the unified one).
    pub controllers: &'a str,
    /// The cgroup's path from the hierarchy's root; may contain `:`.
    pub path: &'a str,
}

impl CgroupLine<'_> {
    /// Whether this is the unified (v2) hierarchy's line (`0::PATH`).
    pub fn is_unified(&self) -> bool {
        self.hierarchy_id == "0" && self.controllers.is_empty()
    }

    /// Whether `controller` (`memory`) is one of this hierarchy's.
    pub fn has_controller(&self, controller: &str) -> bool {
        self.controllers.split(',').any(|c| c == controller)
    }
}

/// The lines of `/proc/PID/cgroup`; lines without three fields are skipped.
pub fn cgroup_lines(text: &str) -> impl Iterator<Item = CgroupLine<'_>> {
    text.lines().filter_map(|line| {
        let mut parts = line.splitn(3, ':');
        Some(CgroupLine {
            hierarchy_id: parts.next()?,
            controllers: parts.next()?,
            path: parts.next()?,
        })
    })
}

/// What `/proc/PID/cgroup` says about memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcCgroup {
    /// Path in the v1 hierarchy holding the `memory` controller (`N:...memory...:/path`).
    pub v1_memory: Option<String>,
    /// Path in the unified hierarchy (`0::/path`).
    pub v2: Option<String>,
}

/// Parses `/proc/PID/cgroup` for the memory cgroup. Lines it cannot read are skipped.
pub fn parse_proc_cgroup(text: &str) -> ProcCgroup {
    let mut out = ProcCgroup::default();
    for line in cgroup_lines(text) {
        if line.is_unified() {
            out.v2 = Some(line.path.to_string());
        } else if line.has_controller("memory") {
            out.v1_memory = Some(line.path.to_string());
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Recorded from `/proc/PID/cgroup` of a `sleep` on Linux 6.18 (this project's CI
    /// machine: cgroup v1 with every controller, the process in a memory cgroup of its own).
    const RECORDED: &str = include_str!("../fixtures/sleep/cgroup");

    #[test]
    fn recorded_cgroup() {
        let lines: Vec<_> = cgroup_lines(RECORDED).collect();
        assert_eq!(lines.len(), 10);
        assert_eq!(
            lines[5],
            CgroupLine {
                hierarchy_id: "4",
                controllers: "memory",
                path: "/process_api/3c2f0c3dd8c1406faa1af32c403512e8"
            }
        );
        assert!(lines[9].is_unified());
        let memory = parse_proc_cgroup(RECORDED);
        assert_eq!(
            memory.v1_memory.as_deref(),
            Some("/process_api/3c2f0c3dd8c1406faa1af32c403512e8")
        );
        assert_eq!(memory.v2.as_deref(), Some("/"));
    }

    #[test]
    fn proc_cgroup_table() {
        let cases: &[(&str, Option<&str>, Option<&str>)] = &[
            (
                "0::/user.slice/session-3.scope\n",
                None,
                Some("/user.slice/session-3.scope"),
            ),
            (
                "4:memory:/docker/abc\n0::/\n",
                Some("/docker/abc"),
                Some("/"),
            ),
            ("7:cpu,cpuacct:/x\n3:memory,hugetlb:/y\n", Some("/y"), None),
            ("2:name=systemd:/a\n", None, None),
            ("garbage\n\n1:memory\n", None, None),
            // A path may contain ':' (only the first two separate fields).
            ("0::/odd:name\n", None, Some("/odd:name")),
        ];
        for (text, v1, v2) in cases {
            let got = parse_proc_cgroup(text);
            assert_eq!(got.v1_memory.as_deref(), *v1, "{text:?}");
            assert_eq!(got.v2.as_deref(), *v2, "{text:?}");
        }
    }
}
