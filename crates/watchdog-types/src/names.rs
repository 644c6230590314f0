//! The one owner of every word the watchdog writes for its enums: resource kinds, units,
//! alert reasons, verdicts and what watches a resource.
//!
//! Each enum has `as_str` (the snake_case name serde writes in events, recordings and the
//! request file), `FromStr` (its inverse, an [`UnknownName`] error otherwise) and
//! `Display` (the same name). These names are a contract with readers of those files:
//! the tests check that they are exactly what serde writes and reads.

use std::fmt;
use std::str::FromStr;

use crate::quote::quote_value;
use crate::{AlertReason, Phase, ResourceKind, Unit, VerdictKind, WatchedBy};

/// A name that is none of an enum's names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {}: expected {}", quote_value(found), expected.join(", "))]
pub struct UnknownName {
    /// What was being named (`unit`, `resource kind`, ...).
    pub what: &'static str,
    /// The name found.
    pub found: String,
    /// The names it could have been.
    pub expected: &'static [&'static str],
}

/// `as_str`, `ALL`, `NAMES`, `FromStr` and `Display` of a fieldless enum, from one table.
macro_rules! names {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
            /// Every name, in the order of [`ALL`](Self::ALL).
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The name, as serde writes it in events, recordings and the request file.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(UnknownName {
                        what: $what,
                        found: s.to_string(),
                        expected: $ty::NAMES,
                    }),
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names!(ResourceKind, "resource kind", {
    HostMemory => "host_memory",
    Swap => "swap",
    CgroupMemory => "cgroup_memory",
    TreeMemory => "tree_memory",
    CgroupCache => "cgroup_cache",
    DiskBytes => "disk_bytes",
    DiskInodes => "disk_inodes",
    Runtime => "runtime",
    GpuMemory => "gpu_memory",
    Notice => "notice",
});

names!(Unit, "unit", {
    Bytes => "bytes",
    Count => "count",
    Millis => "millis",
});

names!(AlertReason, "alert reason", {
    Trend => "trend",
    HeadroomFloor => "headroom_floor",
    NextStep => "next_step",
    StepPeak => "step_peak",
    EvalPeak => "eval_peak",
    Fragmentation => "fragmentation",
    Terminating => "terminating",
    Preemption => "preemption",
});

names!(Phase, "phase", {
    Train => "train",
    Eval => "eval",
    Other => "other",
});

names!(WatchedBy, "watcher", {
    Kernel => "kernel",
    Poll => "poll",
});

names!(VerdictKind, "verdict", {
    Exited => "exited",
    OomKill => "oom_kill",
    Signal => "signal",
    Crash => "crash",
    WatchdogSignal => "watchdog_signal",
    DiskFull => "disk_full",
    RuntimeLimit => "runtime_limit",
    GpuOom => "gpu_oom",
    Cancelled => "cancelled",
    Preempted => "preempted",
    Unknown => "unknown",
});

impl ResourceKind {
    /// The kind a resource's name (as users see it, see [`Resource::name`](crate::Resource::name))
    /// stands for: `host_memory`, `swap`, `cgroup_memory`, `cgroup_cache`, `tree_memory`,
    /// `disk:/path` (also `tmpfs...`, `shm...`), `inodes:/path`, `runtime`, `gpu0`; by
    /// prefix, case-insensitive; anything else is taken as cgroup memory. What traces and
    /// recordings without a `kind` are read with.
    pub fn of_resource_name(name: &str) -> ResourceKind {
        let n = name.trim().to_ascii_lowercase();
        let prefixed = |prefixes: &[&str]| prefixes.iter().any(|p| n.starts_with(p));
        if prefixed(&["gpu"]) {
            ResourceKind::GpuMemory
        } else if prefixed(&["disk", "tmpfs", "shm"]) {
            ResourceKind::DiskBytes
        } else if prefixed(&["inode"]) {
            ResourceKind::DiskInodes
        } else if prefixed(&["runtime"]) {
            ResourceKind::Runtime
        } else if prefixed(&["swap"]) {
            ResourceKind::Swap
        } else if prefixed(&["host"]) {
            ResourceKind::HostMemory
        } else if prefixed(&["tree"]) {
            ResourceKind::TreeMemory
        } else if prefixed(&["cgroup_cache"]) {
            ResourceKind::CgroupCache
        } else {
            ResourceKind::CgroupMemory
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    /// Each name is serde's, both ways, and parses back to its value.
    fn check<T>(all: &[T], as_str: fn(T) -> &'static str)
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + Serialize + DeserializeOwned + FromStr,
        <T as FromStr>::Err: fmt::Debug,
    {
        for &v in all {
            let name = as_str(v);
            assert_eq!(serde_json::to_value(v).unwrap(), name, "{v:?}");
            let back: T = serde_json::from_value(serde_json::Value::from(name)).unwrap();
            assert_eq!(back, v);
            assert_eq!(name.parse::<T>().unwrap(), v);
            assert_eq!(v.to_string(), name);
        }
    }

    #[test]
    fn names_are_serdes() {
        check(ResourceKind::ALL, ResourceKind::as_str);
        check(Unit::ALL, Unit::as_str);
        check(AlertReason::ALL, AlertReason::as_str);
        check(VerdictKind::ALL, VerdictKind::as_str);
        check(WatchedBy::ALL, WatchedBy::as_str);
        assert_eq!(ResourceKind::ALL.len(), 10);
        assert_eq!(VerdictKind::ALL.len(), 11);
    }

    #[test]
    fn unknown_names_say_what_was_expected() {
        let e = "litres".parse::<Unit>().unwrap_err().to_string();
        assert_eq!(e, "unknown unit 'litres': expected bytes, count, millis");
        assert!("Bytes".parse::<Unit>().is_err(), "names are case-sensitive");
    }

    #[test]
    fn resource_names_give_their_kind() {
        use ResourceKind as K;
        for (name, kind) in [
            ("gpu3", K::GpuMemory),
            ("disk:/mnt/x", K::DiskBytes),
            ("inodes:/", K::DiskInodes),
            ("runtime", K::Runtime),
            ("cgroup_memory", K::CgroupMemory),
            ("cgroup_cache", K::CgroupCache),
            ("host_memory", K::HostMemory),
            ("swap", K::Swap),
            ("tree_memory", K::TreeMemory),
            ("whatever", K::CgroupMemory),
        ] {
            assert_eq!(ResourceKind::of_resource_name(name), kind, "{name}");
        }
    }
}
