//! Comparing two recordings' environments and limits (`watchdog diff A B`): pure.
//!
//! Each recording's [`Environment`] is flattened into named facts (`limit tree_memory`,
//! `package torch`, `host RAM`, ...); a fact whose value differs is a [`Difference`].
//! Times, PIDs and usage are not facts. A limit's source (a cgroup's path, which differs
//! from run to run) is shown but not compared; a runtime cap from a deadline or a SLURM
//! end time is compared by its source only (its length depends on when the run started).
//! Watched disks are paired by the mount point of their filesystem (`limit disk on /data`,
//! its size with its type), their paths shown as detail: two runs from two directories on
//! one filesystem watch one disk. When either record lacks the mount points (an older
//! recording), disks are paired by path (`limit disk:/data/x`) as before.
//!
//! The differences are ranked so the likely culprit comes first: a limit that one run's
//! peak reached (90% or more) and the other's did not, then a changed framework version
//! (torch, its CUDA build, tensorflow, ...), then other limits, the platform and the GPUs,
//! the host, and last the definitions of the figures (a different watchdog version).
//!
//! A recording without an environment record (written by an older watchdog) still has its
//! `limit` events: its limits are compared, and what is unknown is said in
//! [`Diff::unknown`]. The same holds for a run whose client did not report its Python side.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use watchdog_types::Unit;
use watchdog_types::environment::{DiskFact, Environment, LimitFact, RuntimeSource, hide_homes};
use watchdog_types::units::printable;

use crate::recording::{EventKind, Recording};
use crate::render::axis::format_value;

/// Share of a limit a peak must reach to count as having hit it.
pub const REACHED: f64 = 0.9;

/// How likely a difference is to explain why one run died and the other did not; the
/// lower, the likelier (the order differences are listed in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// A limit one run's peak reached and the other's did not.
    LimitReached,
    /// A framework version or torch's CUDA build.
    Framework,
    /// Another limit, the runtime cap, `/dev/shm`, a disk's size.
    Limit,
    /// The platform or the GPUs.
    Platform,
    /// The host: kernel, CPU, RAM, the interpreter.
    Host,
    /// Which definition a figure uses (a different watchdog version).
    Definition,
}

/// One named fact that differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The fact's name (`limit tree_memory`, `package torch`).
    pub field: String,
    /// Its value in the first run (`absent` when it has none).
    pub a: String,
    /// Its value in the second run.
    pub b: String,
    /// Why it may matter (the peaks against the limits), when known.
    pub note: Option<String>,
    /// Its rank.
    pub rank: Rank,
}

/// The comparison of two recordings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Diff {
    /// The differences, likeliest culprit first.
    pub differences: Vec<Difference>,
    /// What could not be compared, one sentence each.
    pub unknown: Vec<String>,
    /// Each run's verdict and summary, when recorded.
    pub verdicts: [Option<(String, Option<String>)>; 2],
}

/// One fact: the value compared, the value shown, where it came from (shown when the
/// two runs' sources differ), its rank, and for a limit the resource it is the limit of
/// (whose peaks the note compares; a disk paired by its mount point has a name in each run).
struct Fact {
    compared: String,
    shown: String,
    source: Option<String>,
    rank: Rank,
    resource: Option<String>,
}

fn fact(value: String, rank: Rank) -> Fact {
    Fact {
        compared: value.clone(),
        shown: value,
        source: None,
        rank,
        resource: None,
    }
}

impl Fact {
    /// The value as shown, with its source when the two runs' sources differ.
    fn show(&self, sources_differ: bool) -> String {
        match &self.source {
            Some(source) if sources_differ => format!("{} ({source})", self.shown),
            _ => self.shown.clone(),
        }
    }
}

/// Whether the two runs' disks are paired by their mount points: both records give every
/// disk's mount point (a recording from before they were recorded is paired by path).
fn disks_by_mount(a: &Environment, b: &Environment) -> bool {
    let has_mounts =
        |e: &Environment| !e.disks.is_empty() && e.disks.iter().all(|d| d.mount_point.is_some());
    has_mounts(a) && has_mounts(b)
}

/// How a watched filesystem is named in the facts: by its mount point when the disks are
/// paired by mount point (`limit disk on /data`), else by its path as before
/// (`limit disk:/data/x`, `disk size /data/x`).
struct DiskName<'e> {
    /// The disk as recorded.
    disk: &'e DiskFact,
    /// Its mount point, when the disks are paired by it.
    mount: Option<&'e str>,
}

impl DiskName<'_> {
    /// The name of the fact `what` (`limit disk`, `disk size`) about this disk.
    fn name(&self, what: &str) -> String {
        match self.mount {
            Some(m) => format!("{what} on {m}"),
            None => format!("{what} {}", self.disk.path),
        }
    }

    /// The value shown for a size: with the filesystem type when paired by mount point.
    fn with_type(&self, value: String) -> String {
        match (self.mount, &self.disk.fs_type) {
            (Some(_), Some(t)) => format!("{value} {t}"),
            _ => value,
        }
    }
}

/// Each disk's name by its `disk:PATH` resource, paired by mount point when `by_mount`
/// (a second disk on an already named mount point keeps its path).
fn disk_names(env: &Environment, by_mount: bool) -> BTreeMap<String, DiskName<'_>> {
    let mut out = BTreeMap::new();
    let mut mounts = std::collections::BTreeSet::new();
    for d in &env.disks {
        let mount = d
            .mount_point
            .as_deref()
            .filter(|m| by_mount && mounts.insert(*m));
        out.insert(format!("disk:{}", d.path), DiskName { disk: d, mount });
    }
    out
}

const FRAMEWORKS: &[&str] = &[
    "torch",
    "tensorflow",
    "keras",
    "jax",
    "lightning",
    "pytorch-lightning",
    "transformers",
];

fn show_limit(l: &LimitFact) -> String {
    match l.limit {
        Some(v) => format_value(l.unit, v),
        None => "none".to_string(),
    }
}

/// The named facts of an environment, its disks paired by mount point when `by_mount`.
fn facts(env: &Environment, by_mount: bool) -> BTreeMap<String, Fact> {
    let mut out = BTreeMap::new();
    let disks = disk_names(env, by_mount);
    for l in &env.limits {
        let compared = l.limit.map_or_else(|| "none".into(), |v| v.to_string());
        // A disk paired by its mount point: its limit and type compared, its path the source.
        let (bytes, inodes) = (
            disks.get(&l.resource),
            l.resource
                .strip_prefix("inodes:")
                .and_then(|p| disks.get(&format!("disk:{p}"))),
        );
        let (name, compared, shown, source) = match (bytes, inodes) {
            (Some(d @ DiskName { mount: Some(_), .. }), _) => (
                d.name("limit disk"),
                d.with_type(compared),
                d.with_type(show_limit(l)),
                d.disk.path.clone(),
            ),
            (_, Some(d @ DiskName { mount: Some(_), .. })) => (
                d.name("limit inodes"),
                compared,
                show_limit(l),
                d.disk.path.clone(),
            ),
            _ => (
                format!("limit {}", l.resource),
                compared,
                show_limit(l),
                l.source.clone(),
            ),
        };
        out.insert(
            name,
            Fact {
                compared,
                shown,
                source: Some(source),
                rank: Rank::Limit,
                resource: Some(l.resource.clone()),
            },
        );
    }
    let has_limit = |name: &str| env.limits.iter().any(|l| l.resource == name);
    if let Some(h) = &env.host {
        let mut put = |name: &str, v: Option<String>| {
            if let Some(v) = v {
                out.insert(format!("host {name}"), fact(v, Rank::Host));
            }
        };
        put("kernel", h.kernel.clone());
        put("arch", h.arch.clone());
        put("CPU", h.cpu_model.clone());
        put("CPUs", h.cpu_cores.map(|c| c.to_string()));
        // RAM and swap are the limits of host_memory and swap, compared as limits when watched.
        if !has_limit("host_memory") {
            put(
                "RAM",
                h.mem_total_bytes.map(|b| format_value(Unit::Bytes, b)),
            );
        }
        if !has_limit("swap") {
            put(
                "swap",
                h.swap_total_bytes.map(|b| format_value(Unit::Bytes, b)),
            );
        }
    }
    for p in &env.platform {
        let name = serde_json::to_value(p.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.insert(
            format!("platform {name}"),
            fact(
                p.detail.clone().unwrap_or_else(|| "yes".into()),
                Rank::Platform,
            ),
        );
    }
    // A disk's size is its limit, already compared, unless it has none.
    for (resource, d) in &disks {
        if has_limit(resource) {
            continue;
        }
        if let Some(size) = d.disk.size_bytes {
            let name = d.name("disk size");
            let mut f = fact(d.with_type(format_value(Unit::Bytes, size)), Rank::Limit);
            f.source = d.mount.map(|_| d.disk.path.clone());
            out.insert(name, f);
        }
    }
    if let Some(size) = env.shm.as_ref().and_then(|s| s.size_bytes) {
        out.insert(
            "/dev/shm size".into(),
            fact(format_value(Unit::Bytes, size), Rank::Limit),
        );
    }
    if let Some(r) = &env.runtime {
        let source = serde_json::to_value(r.source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let length = format_value(Unit::Millis, (r.limit_s * 1e3) as u64);
        out.insert(
            "runtime cap".into(),
            Fact {
                compared: match r.source {
                    RuntimeSource::Deadline | RuntimeSource::Slurm => source.clone(),
                    _ => format!("{source} {length}"),
                },
                shown: length,
                source: Some(source),
                rank: Rank::Limit,
                resource: None,
            },
        );
    }
    for g in &env.gpus {
        let mut put = |name: &str, v: Option<String>, rank| {
            if let Some(v) = v {
                out.insert(format!("gpu{} {name}", g.index), fact(v, rank));
            }
        };
        put("model", Some(g.model.clone()), Rank::Platform);
        // A watched GPU's memory is its limit, compared as a limit.
        if !has_limit(&format!("gpu{}", g.index)) {
            put(
                "memory",
                g.memory_bytes.map(|b| format_value(Unit::Bytes, b)),
                Rank::Limit,
            );
        }
        put("driver", g.driver.clone(), Rank::Platform);
        put("CUDA driver", g.cuda_driver.clone(), Rank::Framework);
    }
    if let Some(py) = &env.python {
        for (name, v) in &py.packages {
            let rank = if FRAMEWORKS.contains(&name.as_str()) || name == "numpy" {
                Rank::Framework
            } else {
                Rank::Host
            };
            out.insert(format!("package {name}"), fact(v.clone(), rank));
        }
        // Absent packages are facts too once the client reported: `absent`.
        for name in FRAMEWORKS.iter().chain(&["numpy"]) {
            out.entry(format!("package {name}"))
                .or_insert_with(|| fact("absent".into(), Rank::Framework));
        }
        if let Some(v) = &py.torch_cuda {
            out.insert("torch CUDA build".into(), fact(v.clone(), Rank::Framework));
        }
        if let Some(v) = &py.version {
            let imp = py.implementation.clone().unwrap_or_default();
            out.insert(
                "Python".into(),
                fact(format!("{imp} {v}").trim().to_string(), Rank::Host),
            );
        }
    }
    for (kind, definition) in &env.definitions {
        out.insert(
            format!("definition {kind}"),
            fact(definition.clone(), Rank::Definition),
        );
    }
    out
}

/// The run's environment: its record, else one built from its `limit` events (an older
/// recording), and whether the record was there.
fn environment_of(rec: &Recording) -> (Environment, bool) {
    if let Some(env) = &rec.meta.environment {
        return (env.clone(), true);
    }
    let mut env = Environment::default();
    for e in &rec.events {
        if let EventKind::Other(name) = &e.kind
            && name == "limit"
            && let Ok(l) = serde_json::from_value::<LimitFact>(e.raw.clone())
        {
            match env.limits.iter_mut().find(|x| x.resource == l.resource) {
                Some(x) => *x = l,
                None => env.limits.push(l),
            }
        }
    }
    (env, false)
}

/// The highest usage of each resource: the exit event's peaks, and the rows recorded.
pub fn peaks(rec: &Recording) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for (r, series) in rec.resources.iter().zip(&rec.series) {
        if let Some(max) = series.iter().map(|p| p.used).max() {
            out.insert(r.name.clone(), max);
        }
    }
    for e in &rec.events {
        if let EventKind::Exit(_) = e.kind
            && let Some(map) = e.raw.get("peaks").and_then(|p| p.as_object())
        {
            for (name, v) in map {
                if let Some(used) = v.get("used").and_then(serde_json::Value::as_u64) {
                    let slot = out.entry(name.clone()).or_default();
                    *slot = (*slot).max(used);
                }
            }
        }
    }
    out
}

/// Whether `peak` reached [`REACHED`] of `limit`.
fn reached(peak: Option<u64>, limit: Option<u64>) -> Option<bool> {
    match (peak, limit) {
        (Some(p), Some(l)) => Some(p as f64 >= REACHED * l as f64),
        (Some(_), None) => Some(false),
        _ => None,
    }
}

/// The named facts of both environments, their disks paired alike.
fn both_facts(a: &Environment, b: &Environment) -> [BTreeMap<String, Fact>; 2] {
    let by_mount = disks_by_mount(a, b);
    [facts(a, by_mount), facts(b, by_mount)]
}

/// The facts the two runs share, by name, with their values as shown in A and in B
/// (the same value, each with its source when the sources differ: two directories on
/// one disk): what the comparison page folds away under "the same in both runs". Pure.
pub fn same_facts(a: &Recording, b: &Recording) -> Vec<(String, String, String)> {
    let [fa, fb] = both_facts(&environment_of(a).0, &environment_of(b).0);
    fa.into_iter()
        .filter_map(|(k, f)| {
            let g = fb.get(&k).filter(|g| g.compared == f.compared)?;
            let differ = f.source != g.source;
            Some((k, f.show(differ), g.show(differ)))
        })
        .collect()
}

/// The recording's resource that the environment record names `name`: the record writes
/// each home directory `~` ([`hide_homes`]: `disk:~/runs` for `disk:/home/NAME/runs`);
/// `None` when no resource, or more than one, is written so.
fn resource_of(rec: &Recording, name: &str) -> Option<String> {
    if rec.resource_index(name).is_some() {
        return Some(name.to_string());
    }
    let mut found = rec
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .filter(|r| hide_homes(r) == name);
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one.to_string()),
        _ => None,
    }
}

/// The disks the two runs watched on one mount point under different paths, as pairs of
/// run A's and run B's resource names (`disk:` and `inodes:`), when the disks are paired
/// by mount point; the comparison page draws each pair as one panel. Pure.
pub fn paired_disks(a: &Recording, b: &Recording) -> Vec<(String, String)> {
    let (env_a, env_b) = (environment_of(a).0, environment_of(b).0);
    if !disks_by_mount(&env_a, &env_b) {
        return Vec::new();
    }
    let (names_a, names_b) = (disk_names(&env_a, true), disk_names(&env_b, true));
    let mut out = Vec::new();
    for (ra, da) in &names_a {
        let Some(mount) = da.mount else { continue };
        let Some((rb, _)) = names_b.iter().find(|(_, db)| db.mount == Some(mount)) else {
            continue;
        };
        let inodes = |r: &str| r.replacen("disk:", "inodes:", 1);
        for (ra, rb) in [(ra.clone(), rb.clone()), (inodes(ra), inodes(rb))] {
            if let (Some(ra), Some(rb)) = (resource_of(a, &ra), resource_of(b, &rb))
                && ra != rb
            {
                out.push((ra, rb));
            }
        }
    }
    out
}

/// Compares two recordings. Pure.
pub fn diff(a: &Recording, b: &Recording) -> Diff {
    let ((env_a, full_a), (env_b, full_b)) = (environment_of(a), environment_of(b));
    let mut out = Diff::default();
    for (name, full, env) in [("A", full_a, &env_a), ("B", full_b, &env_b)] {
        if !full {
            out.unknown.push(format!(
                "{name} has no environment record (a recording from an older watchdog): only its limits are compared"
            ));
        } else {
            out.unknown
                .extend(env.unknown.iter().map(|u| format!("{name}: {u}")));
        }
    }
    if full_a && full_b && env_a.python.is_some() != env_b.python.is_some() {
        let which = if env_a.python.is_none() { "A" } else { "B" };
        out.unknown.push(format!(
            "{which} has no report of its Python side (it did not use training_watchdog's install() or attach())"
        ));
    }
    let [facts_a, facts_b] = both_facts(&env_a, &env_b);
    let both_python = env_a.python.is_some() && env_b.python.is_some();
    let (peaks_a, peaks_b) = (peaks(a), peaks(b));
    let limits =
        |env: &Environment, name: &str| env.limits.iter().find(|l| l.resource == name).cloned();
    let keys: std::collections::BTreeSet<&String> = facts_a.keys().chain(facts_b.keys()).collect();
    for key in keys {
        let (fa, fb) = (facts_a.get(key), facts_b.get(key));
        // A fact only one side could know is unknown, not a difference.
        let one_sided_unknown =
            !key.starts_with("limit ") && ((fa.is_none() && !full_a) || (fb.is_none() && !full_b));
        let python_fact =
            key.starts_with("package ") || key == "torch CUDA build" || key == "Python";
        if one_sided_unknown || (python_fact && !both_python) {
            continue;
        }
        if fa.map(|f| &f.compared) == fb.map(|f| &f.compared) {
            continue;
        }
        let rank = fa.or(fb).map_or(Rank::Host, |f| f.rank);
        let sources_differ = fa.map(|f| &f.source) != fb.map(|f| &f.source);
        let show = |f: Option<&Fact>| f.map_or_else(|| "absent".into(), |f| f.show(sources_differ));
        let mut d = Difference {
            field: key.clone(),
            a: show(fa),
            b: show(fb),
            note: None,
            rank,
        };
        if key.starts_with("limit ") {
            // Each run's own resource: a disk paired by mount point has a path in each.
            // A run without this fact has no peak or limit in it, even when it watched a
            // disk of the same name on another filesystem (its own row says so).
            let (name_a, name_b) = (
                fa.and_then(|f| f.resource.clone()),
                fb.and_then(|f| f.resource.clone()),
            );
            let limit_of = |env: &Environment, name: &Option<String>| {
                name.as_deref().and_then(|n| limits(env, n))
            };
            let (la, lb) = (limit_of(&env_a, &name_a), limit_of(&env_b, &name_b));
            // The peaks are the recording's, under the resource's own name (not `~`).
            let peak_of = |rec, peaks: &BTreeMap<String, u64>, name: &Option<String>| {
                let name = name.as_deref()?;
                peaks
                    .get(&resource_of(rec, name).unwrap_or_else(|| name.to_string()))
                    .copied()
            };
            let (pa, pb) = (peak_of(a, &peaks_a, &name_a), peak_of(b, &peaks_b, &name_b));
            let ra = reached(pa, la.as_ref().and_then(|l| l.limit));
            let rb = reached(pb, lb.as_ref().and_then(|l| l.limit));
            let unit = la.as_ref().or(lb.as_ref()).map_or(Unit::Bytes, |l| l.unit);
            let peak =
                |p: Option<u64>| p.map_or_else(|| "unknown".into(), |p| format_value(unit, p));
            if let (Some(ra), Some(rb)) = (ra, rb)
                && ra != rb
            {
                d.rank = Rank::LimitReached;
                let (hit, hp, other, op) = if ra {
                    ("A", pa, "B", pb)
                } else {
                    ("B", pb, "A", pa)
                };
                d.note = Some(format!(
                    "{hit}'s peak {} reached its limit; {other}'s peak {} did not",
                    peak(hp),
                    peak(op)
                ));
            } else {
                d.note = Some(format!("peaks: A {}, B {}", peak(pa), peak(pb)));
            }
        }
        out.differences.push(d);
    }
    out.differences
        .sort_by(|x, y| x.rank.cmp(&y.rank).then(x.field.cmp(&y.field)));
    out.verdicts = [a, b].map(|r| r.verdict.clone().map(|v| (v, r.verdict_summary.clone())));
    out
}

/// The comparison as text for the terminal: the differences (likeliest culprit first),
/// what is unknown, then both verdicts. `names` are the two recordings' paths. Every
/// string from a recording (or a path) is printed with its control characters escaped
/// ([`printable`]): a recording's environment is the run's, and a newline or an escape
/// sequence in it must not forge lines or rewrite the terminal.
pub fn render_text(d: &Diff, names: [&str; 2]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A: {}\nB: {}",
        printable(names[0]),
        printable(names[1])
    );
    if d.differences.is_empty() {
        out.push_str("The environments and limits match.\n");
    } else {
        let _ = writeln!(
            out,
            "{} difference{} in environment and limits, likeliest culprit first:",
            d.differences.len(),
            if d.differences.len() == 1 { "" } else { "s" }
        );
        for x in &d.differences {
            let _ = writeln!(
                out,
                "  {}: A {} | B {}",
                printable(&x.field),
                printable(&x.a),
                printable(&x.b)
            );
            if let Some(note) = &x.note {
                let _ = writeln!(out, "      {}", printable(note));
            }
        }
    }
    for u in &d.unknown {
        let _ = writeln!(out, "Unknown: {}", printable(u));
    }
    out.push_str("Verdicts:\n");
    for (name, v) in ["A", "B"].iter().zip(&d.verdicts) {
        match v {
            Some((verdict, Some(summary))) => {
                let _ = writeln!(
                    out,
                    "  {name}: {}: {}",
                    printable(verdict),
                    printable(summary)
                );
            }
            Some((verdict, None)) => {
                let _ = writeln!(out, "  {name}: {}", printable(verdict));
            }
            None => {
                let _ = writeln!(out, "  {name}: none recorded (the run had not ended)");
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
