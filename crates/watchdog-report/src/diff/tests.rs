use super::*;
use crate::recording::{Meta, parse, write};
use watchdog_types::environment::{DiskFact, HostFacts, PythonFacts, RuntimeCap};
use watchdog_types::{Resource, ResourceId, ResourceKind};

const MIB: u64 = 1 << 20;

fn limit(resource: &str, kind: ResourceKind, limit: Option<u64>, source: &str) -> LimitFact {
    LimitFact {
        resource: resource.into(),
        kind,
        limit,
        unit: kind.unit(),
        source: source.into(),
    }
}

fn base_env() -> Environment {
    Environment {
        host: Some(HostFacts {
            kernel: Some("6.1.0".into()),
            cpu_cores: Some(2),
            mem_total_bytes: Some(16 << 30),
            ..HostFacts::default()
        }),
        limits: vec![
            limit(
                "cgroup_memory",
                ResourceKind::CgroupMemory,
                None,
                "/sys/fs/cgroup/memory/a",
            ),
            limit(
                "tree_memory",
                ResourceKind::TreeMemory,
                Some(1024 * MIB),
                "--mem-limit",
            ),
        ],
        definitions: watchdog_types::environment::definitions(),
        ..Environment::default()
    }
}

/// A recording of `env` (written as the watchdog writes it, then read back) whose
/// tree_memory peaked at `tree_peak`; `env: None` writes only `limit` events (an older
/// recording).
fn recording(env: Option<Environment>, tree_peak: u64, verdict: &str) -> Recording {
    let resources: Vec<Resource> = [
        ("cgroup_memory", ResourceKind::CgroupMemory),
        ("tree_memory", ResourceKind::TreeMemory),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(name, kind))| Resource {
        id: ResourceId(i as u16),
        kind,
        name: name.into(),
        source: "s".into(),
    })
    .collect();
    let limits = env
        .as_ref()
        .map_or_else(|| base_env().limits, |e| e.limits.clone());
    let mut events: Vec<(f64, serde_json::Value)> = limits
        .iter()
        .map(|l| {
            let mut v = serde_json::to_value(l).unwrap();
            v["event"] = "limit".into();
            (0.0, v)
        })
        .collect();
    events.push((
        2.0,
        serde_json::json!({"event": "exit", "verdict": verdict, "summary": format!("it {verdict}"), "peaks": {}}),
    ));
    let rows = [
        (0, 1, 10 * MIB),
        (1000, 1, tree_peak),
        (1000, 0, 2 * tree_peak),
    ]
    .map(|(t_ms, resource, used)| write::Row {
        t_ms,
        resource,
        used,
        limit: u64::MAX,
    });
    let meta = Meta {
        pid: Some(7),
        environment: env,
        ..Meta::default()
    };
    parse(&write::render(&meta, &resources, &events, rows.into_iter())).unwrap()
}

#[test]
fn identical_environments_have_no_differences_whatever_the_usage_and_pids() {
    let a = recording(Some(base_env()), 100 * MIB, "exited");
    let mut other = base_env();
    // The cgroup's path differs from run to run: a source, not a difference.
    other.limits[0].source = "/sys/fs/cgroup/memory/b".into();
    let b = recording(Some(other), 900 * MIB, "oom_kill");
    let d = diff(&a, &b);
    assert_eq!(d.differences, vec![], "{d:?}");
    assert!(d.unknown.is_empty(), "{:?}", d.unknown);
    let text = render_text(&d, ["a.rec", "b.rec"]);
    assert!(
        text.contains("The environments and limits match."),
        "{text}"
    );
    assert!(text.contains("A: exited: it exited"), "{text}");
    assert!(text.contains("B: oom_kill: it oom_kill"), "{text}");
}

#[test]
fn a_limit_one_run_reached_comes_first_with_the_peaks() {
    let mut small = base_env();
    small.limits[1].limit = Some(400 * MIB);
    small.host.as_mut().unwrap().kernel = Some("6.2.0".into());
    small.python = Some(PythonFacts {
        packages: [("torch".to_owned(), "2.4.0".to_owned())].into(),
        ..PythonFacts::default()
    });
    let mut big = base_env();
    big.python = Some(PythonFacts {
        packages: [("torch".to_owned(), "2.3.0".to_owned())].into(),
        ..PythonFacts::default()
    });
    let a = recording(Some(small), 395 * MIB, "oom_kill");
    let b = recording(Some(big), 395 * MIB, "exited");
    let d = diff(&a, &b);
    let fields: Vec<_> = d.differences.iter().map(|x| x.field.as_str()).collect();
    assert_eq!(
        fields,
        ["limit tree_memory", "package torch", "host kernel"]
    );
    let first = &d.differences[0];
    assert_eq!(first.rank, Rank::LimitReached);
    assert_eq!(
        (first.a.as_str(), first.b.as_str()),
        ("400.00 MiB", "1.00 GiB")
    );
    assert_eq!(
        first.note.as_deref(),
        Some("A's peak 395.00 MiB reached its limit; B's peak 395.00 MiB did not")
    );
    let text = render_text(&d, ["a", "b"]);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(
        lines[3], "  limit tree_memory: A 400.00 MiB | B 1.00 GiB",
        "{text}"
    );
}

#[test]
fn a_limit_neither_run_reached_is_a_plain_limit_difference() {
    let mut small = base_env();
    small.limits[1].limit = Some(2048 * MIB);
    let d = diff(
        &recording(Some(small), 10 * MIB, "exited"),
        &recording(Some(base_env()), 10 * MIB, "exited"),
    );
    assert_eq!(d.differences.len(), 1);
    assert_eq!(d.differences[0].rank, Rank::Limit);
    assert_eq!(
        d.differences[0].note.as_deref(),
        Some("peaks: A 10.00 MiB, B 10.00 MiB")
    );
}

#[test]
fn an_older_recording_compares_its_limits_and_says_what_is_unknown() {
    let mut small = base_env();
    small.limits[1].limit = Some(400 * MIB);
    let d = diff(
        &recording(None, 500 * MIB, "oom_kill"),
        &recording(Some(small), 500 * MIB, "oom_kill"),
    );
    // The host facts only B knows are not differences.
    let fields: Vec<_> = d.differences.iter().map(|x| x.field.as_str()).collect();
    assert_eq!(fields, ["limit tree_memory"]);
    assert!(
        d.unknown[0].starts_with("A has no environment record"),
        "{:?}",
        d.unknown
    );
    let same = diff(&recording(None, 1, "exited"), &recording(None, 2, "exited"));
    assert!(same.differences.is_empty());
}

#[test]
fn a_missing_python_report_is_unknown_not_a_difference() {
    let mut with = base_env();
    with.python = Some(PythonFacts {
        packages: [("numpy".to_owned(), "1.26.4".to_owned())].into(),
        ..PythonFacts::default()
    });
    let d = diff(
        &recording(Some(with.clone()), 1, "exited"),
        &recording(Some(base_env()), 1, "exited"),
    );
    assert!(d.differences.is_empty(), "{:?}", d.differences);
    assert!(d.unknown[0].starts_with("B has no report of its Python side"));
    // With both reports, a package installed in one run only is a difference.
    let mut without = base_env();
    without.python = Some(PythonFacts::default());
    let d = diff(
        &recording(Some(with), 1, "exited"),
        &recording(Some(without), 1, "exited"),
    );
    assert_eq!(d.differences[0].field, "package numpy");
    assert_eq!(
        (d.differences[0].a.as_str(), d.differences[0].b.as_str()),
        ("1.26.4", "absent")
    );
}

#[test]
fn runtime_caps_from_deadlines_compare_by_source_only() {
    let with_cap = |limit_s, source| {
        let mut e = base_env();
        e.runtime = Some(RuntimeCap {
            limit_s,
            source,
            detail: String::new(),
        });
        recording(Some(e), 1, "exited")
    };
    let d = diff(
        &with_cap(100.0, RuntimeSource::Deadline),
        &with_cap(200.0, RuntimeSource::Deadline),
    );
    assert!(d.differences.is_empty());
    let d = diff(
        &with_cap(3600.0, RuntimeSource::MaxRuntime),
        &with_cap(7200.0, RuntimeSource::MaxRuntime),
    );
    assert_eq!(d.differences[0].field, "runtime cap");
    let d = diff(
        &with_cap(43200.0, RuntimeSource::Colab),
        &with_cap(100.0, RuntimeSource::Deadline),
    );
    assert_eq!(d.differences.len(), 1);
}

/// Less RAM (Colab's 12.7 GB against 25 GB) is the host_memory limit when it is watched,
/// named once.
#[test]
fn less_ram_is_named_once_as_the_host_memory_limit() {
    let with_ram = |gib: u64| {
        let mut e = base_env();
        e.host.as_mut().unwrap().mem_total_bytes = Some(gib << 30);
        e.limits.push(limit(
            "host_memory",
            ResourceKind::HostMemory,
            Some(gib << 30),
            "/proc/meminfo",
        ));
        e
    };
    let d = diff(
        &recording(Some(with_ram(12)), 1, "oom_kill"),
        &recording(Some(with_ram(25)), 1, "exited"),
    );
    let fields: Vec<_> = d.differences.iter().map(|x| x.field.as_str()).collect();
    assert_eq!(fields, ["limit host_memory"]);
    // Without the host_memory resource, RAM is a host fact.
    let mut a = base_env();
    a.host.as_mut().unwrap().mem_total_bytes = Some(12 << 30);
    let d = diff(
        &recording(Some(a), 1, "exited"),
        &recording(Some(base_env()), 1, "exited"),
    );
    assert_eq!(d.differences[0].field, "host RAM");
}

const GIB: u64 = 1 << 30;

/// `base_env` with its cgroup limited to `cgroup_mib`, run from the directory `path`
/// (watched as `disk:PATH` and `inodes:PATH`) on a filesystem of `size` bytes, mounted
/// at `mount` with type `fs_type` (`None`: a recording from before mount points were
/// recorded).
fn env_on_disk(cgroup_mib: u64, path: &str, size: u64, mount: Option<(&str, &str)>) -> Environment {
    let mut e = base_env();
    e.limits[0].limit = Some(cgroup_mib * MIB);
    e.limits.push(limit(
        &format!("disk:{path}"),
        ResourceKind::DiskBytes,
        Some(size),
        &format!(
            "statvfs({path}): free blocks including root's reserve, as the target runs as root"
        ),
    ));
    e.limits.push(limit(
        &format!("inodes:{path}"),
        ResourceKind::DiskInodes,
        Some(size / 16384),
        &format!("statvfs({path})"),
    ));
    e.disks.push(DiskFact {
        path: path.into(),
        size_bytes: Some(size),
        inodes: Some(size / 16384),
        mount_point: mount.map(|(m, _)| m.into()),
        fs_type: mount.map(|(_, t)| t.into()),
    });
    e
}

fn fields(d: &Diff) -> Vec<&str> {
    d.differences.iter().map(|x| x.field.as_str()).collect()
}

/// Issue 18: the same script in a 400 MiB and a 1 GiB cgroup, each run from its own
/// directory on one ext4 filesystem, differ in the memory limit only; the disks are
/// paired by their mount point, their paths shown as detail.
#[test]
fn two_directories_on_one_filesystem_are_one_disk() {
    let ext4 = Some(("/data", "ext4"));
    let a = recording(
        Some(env_on_disk(400, "/data/x/small", 252 * GIB, ext4)),
        1,
        "oom_kill",
    );
    let b = recording(
        Some(env_on_disk(1024, "/data/x/big", 252 * GIB, ext4)),
        1,
        "exited",
    );
    let d = diff(&a, &b);
    assert_eq!(fields(&d), ["limit cgroup_memory"], "{d:?}");
    let same = same_facts(&a, &b);
    let disk = same
        .iter()
        .find(|(name, ..)| name == "limit disk on /data")
        .unwrap_or_else(|| panic!("{same:?}"));
    assert_eq!(disk.1, "252.00 GiB ext4 (/data/x/small)");
    assert_eq!(disk.2, "252.00 GiB ext4 (/data/x/big)");
    assert!(
        same.iter()
            .any(|(name, ..)| name == "limit inodes on /data")
    );
}

/// A run on another filesystem (a tmpfs mounted elsewhere, or one of another size and
/// type at the same mount point) still differs in its disk.
#[test]
fn a_disk_on_another_filesystem_still_differs() {
    let on = |path, size, mount, fs_type| {
        recording(
            Some(env_on_disk(1024, path, size, Some((mount, fs_type)))),
            1,
            "exited",
        )
    };
    let a = on("/data/x", 252 * GIB, "/data", "ext4");
    let elsewhere = on("/mnt/t/x", 64 * MIB, "/mnt/t", "tmpfs");
    let d = diff(&a, &elsewhere);
    assert_eq!(
        fields(&d),
        [
            "limit disk on /data",
            "limit disk on /mnt/t",
            "limit inodes on /data",
            "limit inodes on /mnt/t"
        ],
        "{d:?}"
    );
    assert_eq!(
        (d.differences[1].a.as_str(), d.differences[1].b.as_str()),
        ("absent", "64.00 MiB tmpfs (/mnt/t/x)")
    );
    let same_point = on("/data/y", 64 * MIB, "/data", "tmpfs");
    let d = diff(&a, &same_point);
    assert_eq!(
        fields(&d),
        ["limit disk on /data", "limit inodes on /data"],
        "{d:?}"
    );
    let text = render_text(&d, ["a", "b"]);
    assert!(
        text.contains(
            "  limit disk on /data: A 252.00 GiB ext4 (/data/x) | B 64.00 MiB tmpfs (/data/y)\n"
        ),
        "{text}"
    );
    // Of one size and another type only: still a difference.
    let xfs = on("/data/x", 252 * GIB, "/data", "xfs");
    assert_eq!(fields(&diff(&a, &xfs)), ["limit disk on /data"]);
}

/// A recording from before mount points were recorded (its `disks` only have `path`,
/// `size_bytes` and `inodes`, as written then) pairs disks by path, as before, with a
/// recording of either kind.
#[test]
fn recordings_without_mount_points_pair_disks_by_path() {
    let old = |path: &str| {
        let json = format!(
            r#"{{"limits":[{{"resource":"disk:{path}","kind":"disk_bytes","limit":1000,"unit":"bytes","source":"statvfs({path})"}}],"disks":[{{"path":"{path}","size_bytes":1000}}]}}"#
        );
        serde_json::from_str::<Environment>(&json).unwrap()
    };
    let a = recording(Some(old("/data/x/small")), 1, "exited");
    let b = recording(Some(old("/data/x/big")), 1, "exited");
    let d = diff(&a, &b);
    assert_eq!(
        fields(&d),
        ["limit disk:/data/x/big", "limit disk:/data/x/small"],
        "{d:?}"
    );
    let new = recording(
        Some(env_on_disk(
            1024,
            "/data/x/big",
            1000,
            Some(("/data", "ext4")),
        )),
        1,
        "exited",
    );
    assert!(
        fields(&diff(&a, &new)).contains(&"limit disk:/data/x/small"),
        "{:?}",
        diff(&a, &new)
    );
    let same = diff(&b, &recording(Some(old("/data/x/big")), 1, "exited"));
    assert!(same.differences.is_empty(), "{same:?}");
}

/// Strings from a recording (its environment, its verdict's summary) are printed with
/// their control characters escaped: a newline cannot forge a line of the comparison,
/// an escape sequence cannot reach the terminal.
#[test]
fn control_characters_from_a_recording_are_escaped() {
    let mut a = base_env();
    a.host.as_mut().unwrap().kernel = Some("6.1\n  limit tree_memory: A 1 | B 2\u{1b}[2J".into());
    a.unknown.push("disk size: /x\ry: gone".into());
    let mut rec = recording(Some(a), 1, "exited");
    rec.verdict_summary = Some("it\u{7}exited\u{2028}".into());
    let text = render_text(
        &diff(&rec, &recording(Some(base_env()), 1, "exited")),
        ["a\nb", "c"],
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(!text.contains('\u{2028}'), "{text:?}");
    assert!(
        text.contains(r"  host kernel: A 6.1\n  limit tree_memory: A 1 | B 2\u{1b}[2J | B 6.1.0"),
        "{text}"
    );
    assert!(text.contains(r"A: a\nb"), "{text}");
    assert!(
        text.contains(r"Unknown: A: disk size: /x\ry: gone"),
        "{text}"
    );
    assert!(text.contains(r"A: exited: it\u{7}exited\u{2028}"), "{text}");
    // One line per difference, whatever the recording held.
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("limit tree_memory"))
            .count(),
        1,
        "{text}"
    );
}

/// The record writes a home `~` (`disk:~/exp`); the recording's resource and its peaks
/// keep the home's path (`disk:/home/alice/exp`): the note still finds the peaks.
#[test]
fn a_disk_in_a_home_has_its_peaks_in_the_note() {
    let rec = |size: u64| {
        let mut env = env_on_disk(1024, "~/exp", size, Some(("/home", "ext4")));
        env.limits.retain(|l| l.resource != "inodes:~/exp");
        let text = format!(
            "# watchdog recording v1\n#{}\n\
             #{{\"resource\":{{\"name\":\"disk:/home/alice/exp\",\"kind\":\"disk_bytes\",\"unit\":\"bytes\"}}}}\n\
             time,resource,used,limit\n0,disk:/home/alice/exp,{},{size}\n",
            serde_json::json!({"meta": {"environment": env}}),
            5 * MIB
        );
        parse(&text).unwrap()
    };
    assert_eq!(
        resource_of(&rec(GIB), "disk:~/exp").as_deref(),
        Some("disk:/home/alice/exp")
    );
    assert_eq!(resource_of(&rec(GIB), "disk:~/other"), None);
    let d = diff(&rec(GIB), &rec(2 * GIB));
    assert_eq!(fields(&d), ["limit disk on /home"], "{d:?}");
    assert_eq!(
        d.differences[0].note.as_deref(),
        Some("peaks: A 5.00 MiB, B 5.00 MiB")
    );
}
