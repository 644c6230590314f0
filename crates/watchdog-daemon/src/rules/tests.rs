use super::*;

const EXAMPLE: &str = include_str!("../../../../config/daemon.toml");

/// Every key of the daemon's file (top level, `[[rule]]`, `[rule.match]`).
const KEYS: &[&str] = &[
    "interval",
    "scan_interval",
    "tree_interval",
    "socket",
    "request_dir",
    "state_dir",
    "metrics",
    "name",
    "command",
    "user",
    "cgroup",
    "slice",
    "gpu",
    "env",
    "registered",
];

fn path() -> &'static Path {
    Path::new("d.toml")
}

fn parse(text: &str) -> Result<DaemonConfig, String> {
    DaemonConfig::parse(text, path())
}

fn err(text: &str) -> String {
    parse(text).unwrap_err()
}

/// A config with one rule matching `match_body`, and a `[rule.watch]` of `watch_body`.
fn one_rule(match_body: &str, watch_body: &str) -> String {
    format!("[[rule]]\nname = \"r\"\n[rule.match]\n{match_body}\n[rule.watch]\n{watch_body}\n")
}

use watchdog_testsupport::is_config_key as is_key;

fn example_uncommented() -> String {
    watchdog_testsupport::example_uncommented(EXAMPLE)
}

fn process(pid: u32) -> ProcessFacts {
    ProcessFacts::new(pid)
}

#[test]
fn example_config_parses_as_shipped_and_uncommented_and_documents_every_key() {
    let shipped = DaemonConfig::parse(EXAMPLE, Path::new("config/daemon.toml")).unwrap();
    let names: Vec<&str> = shipped.rules.iter().map(Rule::name).collect();
    assert_eq!(names, ["registered", "opted-in"]);
    assert_eq!(shipped.interval, DEFAULT_INTERVAL);
    assert_eq!(shipped.scan_interval, DEFAULT_SCAN_INTERVAL);
    assert_eq!(shipped.tree_interval, DEFAULT_TREE_INTERVAL);
    assert_eq!(shipped.socket, Path::new(DEFAULT_SOCKET));
    assert_eq!(shipped.metrics, None);

    let text = example_uncommented();
    let mut documented: Vec<&str> = Vec::new();
    for key in text
        .lines()
        .filter_map(|l| l.split_once(" = ").map(|(k, _)| k))
        .filter(|k| is_key(k) && KEYS.contains(k))
    {
        if !documented.contains(&key) {
            documented.push(key);
        }
    }
    documented.sort_unstable();
    let mut keys = KEYS.to_vec();
    keys.sort_unstable();
    assert_eq!(documented, keys, "config/daemon.toml drifted from KEYS");
    let full = DaemonConfig::parse(&text, Path::new("config/daemon.toml")).unwrap();
    assert_eq!(full.rules.len(), 3);
    assert_eq!(full.metrics, Some("127.0.0.1:9187".parse().unwrap()));
    for (key, _) in REFUSED_WATCH_KEYS {
        assert!(EXAMPLE.contains(key), "{key} not documented as refused");
        assert!(watchdog_config::KEYS.contains(key), "{key} is no watch key");
    }
}

/// The `metrics` key takes what `--metrics` takes (docs/metrics.md: PORT, :PORT,
/// HOST:PORT): a bare port is 127.0.0.1's.
#[test]
fn the_metrics_key_takes_the_flags_forms() {
    let rule = "[[rule]]\nname = \"a\"\n[rule.match]\ngpu = true\n";
    let local = Some("127.0.0.1:9187".parse().unwrap());
    for value in ["9187", ":9187", "127.0.0.1:9187", "localhost:9187"] {
        let c = parse(&format!("metrics = \"{value}\"\n{rule}")).unwrap();
        if value.starts_with("localhost") {
            assert!(c.metrics.is_some_and(|a| a.ip().is_loopback()), "{value}");
        } else {
            assert_eq!(c.metrics, local, "{value}");
        }
    }
}

#[test]
fn defaults_and_durations() {
    let c = parse("interval = \"10ms\"\nscan_interval = \"1s\"\n[[rule]]\nname = \"a\"\n[rule.match]\ngpu = true\n").unwrap();
    assert_eq!(c.interval, Duration::from_millis(10));
    assert_eq!(c.scan_interval, Duration::from_secs(1));
    assert_eq!(c.request_dir, Path::new(DEFAULT_REQUEST_DIR));
    assert_eq!(c.state_dir, Path::new(DEFAULT_STATE_DIR));
}

#[test]
fn errors_name_file_line_key_and_expectation() {
    let cases: &[(&str, &str)] = &[
        (
            "",
            "config file d.toml: no [[rule]]: expected at least one [[rule]]",
        ),
        (
            "tree_interval = \"0s\"\n",
            "config file d.toml:1: tree_interval: invalid tree_interval '0s': expected from 1ms to 60s",
        ),
        (
            "scan_interval = \"2s\"\n",
            "config file d.toml:1: scan_interval: invalid scan_interval '2s': expected from 10ms to 1s",
        ),
        (
            "\ninterval = \"0ms\"\n",
            "config file d.toml:2: interval: invalid interval '0ms': expected from 1ms to 60s",
        ),
        (
            "socket = \"run/x.sock\"\n",
            "config file d.toml:1: socket: invalid path 'run/x.sock': expected an absolute path",
        ),
        (
            "metrics = \"localhost\"\n",
            "config file d.toml:1: metrics: invalid metrics address \"localhost\": ",
        ),
        (
            "intervall = \"1s\"\n",
            "config file d.toml:1: unknown field `intervall`",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\ncommand = \"python(\"\n",
            "config file d.toml:4: rule[0].match.command: invalid regex 'python(': unclosed group; expected a regular expression",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\nuser = \"no-such-user-xyz\"\n",
            "config file d.toml:4: rule[0].match.user: unknown user 'no-such-user-xyz': expected a user name of this machine",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\nuser = []\n",
            "config file d.toml:4: rule[0].match.user: invalid user []: expected at least one",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\nuser = -1\n",
            "config file d.toml:4: rule[0].match.user: invalid UID -1",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\ncgroup = \"user.slice\"\n",
            "config file d.toml:4: rule[0].match.cgroup: invalid cgroup 'user.slice': expected a cgroup path starting with '/'",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\nslice = \"a/b\"\n",
            "config file d.toml:4: rule[0].match.slice: invalid slice 'a/b': expected one cgroup path component",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\nenv = \"=1\"\n",
            "config file d.toml:4: rule[0].match.env: invalid env '=1': expected NAME=VALUE",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\ncomand = \"x\"\n",
            "config file d.toml:4: rule[0].match: unknown field `comand`, expected one of `command`",
        ),
        (
            "[[rule]]\nname = \"a\"\n\n[rule.match]\n",
            "config file d.toml:4: rule 'a': [rule.match] is empty: expected at least one of command",
        ),
        (
            "[[rule]]\nname = \"a\"\n",
            "config file d.toml:1: rule[0]: missing field `match`",
        ),
        (
            "[[rule]]\nname = \"a b\"\n[rule.match]\ngpu = true\n",
            "config file d.toml:2: invalid rule name 'a b': expected 1 to 64 letters",
        ),
        (
            "[[rule]]\nname = \"a\"\n[rule.match]\ngpu = true\n[[rule]]\nname = \"a\"\n[rule.match]\ngpu = false\n",
            "config file d.toml:6: rule name 'a' is used twice",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with(want), "{text:?}:\n got {e}\nwant {want}");
        assert!(!e.contains('\n'), "{e:?}");
    }
}

#[test]
fn watch_keys_the_daemon_decides_are_refused_with_a_reason_at_their_line() {
    for (key, why) in REFUSED_WATCH_KEYS {
        let value = match *key {
            "status" => "true",
            "log_format" => "\"json\"",
            "interval" => "\"1s\"",
            "restart" | "restart_per_hour" => "2",
            "restart_on" => "[\"oom_kill\"]",
            "requeue" => "true",
            "term_grace" | "notice_interval" => "\"5s\"",
            "notice" => "\"gce\"",
            "notice_endpoint" => "\"http://127.0.0.1:1\"",
            _ => "\"/tmp/x\"",
        };
        // A second rule before, so the line is the one in this rule's table.
        let text = format!(
            "[[rule]]\nname = \"first\"\n[rule.match]\ngpu = true\n[rule.watch]\nlead = \"5s\"\n\n{}",
            one_rule("gpu = false", &format!("lead = \"9s\"\n{key} = {value}"))
        );
        let e = err(&text);
        assert_eq!(
            e,
            format!(
                "config file d.toml:14: rule 'r': rule[1].watch.{key}: a rule cannot set {key}: {why}"
            )
        );
    }
    // An inline table: the table's line.
    let e = err("[[rule]]\nname = \"r\"\nmatch = { gpu = true }\nwatch = { status = true }\n");
    assert!(
        e.starts_with(
            "config file d.toml:4: rule 'r': rule[0].watch.status: a rule cannot set status"
        ),
        "{e}"
    );
}

#[test]
fn watch_values_are_checked_as_watchdog_checks_them() {
    let e = err(&one_rule("gpu = true", "lead = \"5s\"\nmem_limit = 0"));
    assert_eq!(
        e,
        "config file d.toml:7: rule 'r': invalid rule[0].watch.mem_limit '0': expected a positive size such as 8GiB"
    );
    let e = err(&one_rule("gpu = true", "disks = [\"/no/such/dir\"]"));
    assert!(
        e.starts_with("config file d.toml:6: rule 'r': cannot watch disk '/no/such/dir'"),
        "{e}"
    );
    let e = err(&one_rule("gpu = true", "lead = \"5x\""));
    assert!(
        e.starts_with("config file d.toml:6: rule[0].watch.lead: invalid duration '5x'"),
        "{e}"
    );
    let e = err(&one_rule("gpu = true", "leed = \"5s\""));
    assert!(
        e.starts_with("config file d.toml:6: rule[0].watch: unknown field `leed`"),
        "{e}"
    );
}

#[test]
fn a_rules_settings_are_the_defaults_with_its_watch_table_at_the_daemon_interval() {
    let c = parse(&format!(
        "interval = \"20ms\"\n{}",
        one_rule(
            "gpu = true",
            "lead = \"45s\"\nmem_limit = \"16GiB\"\nsignal = \"USR2\""
        )
    ))
    .unwrap();
    let host = Host::from_env();
    let s = c.rules[0].settings(&host, c.interval, c.tree_interval);
    assert_eq!(s.interval, Duration::from_millis(20));
    assert_eq!(s.lead, Duration::from_secs(45));
    assert_eq!(s.mem_limit, Some(16 << 30));
    assert_eq!(s.signal, 12);
    assert_eq!(s.request_file, None);
    assert_eq!(s.record, None);
    assert_eq!(s.tree_interval, Some(DEFAULT_TREE_INTERVAL));
    // Unset keys are the single-run watchdog's defaults.
    let defaults = Settings::from_file(host.clone(), &FileConfig::default());
    assert_eq!(s.floor, defaults.floor);
    assert_eq!(s.hook_timeout, defaults.hook_timeout);
    assert_eq!(s.record_window, defaults.record_window);
}

#[test]
fn users_by_name_uid_or_list() {
    let c =
        parse("[[rule]]\nname = \"a\"\n[rule.match]\nuser = [\"root\", 1000, \"4242\"]\n").unwrap();
    assert_eq!(
        c.rules[0].matcher.user.as_deref(),
        Some(&[0, 1000, 4242][..])
    );
    let c = parse("[[rule]]\nname = \"a\"\n[rule.match]\nuser = \"daemon\"\n").unwrap();
    assert_eq!(
        c.rules[0].matcher.user.as_deref(),
        Some(&[1][..]),
        "daemon is UID 1 here (getent passwd)"
    );
}

/// A table of processes against one match each.
#[test]
fn match_table() {
    let gpu: HashSet<u32> = [7].into_iter().collect();
    let mut p = process(7).with_environ(vec![
        ("WATCHDOG_WATCH".into(), "1".into()),
        ("EMPTY".into(), String::new()),
    ]);
    p.uid = 1000;
    p.command = "/usr/bin/python3 -u train.py --epochs 3".into();
    p.cgroup = "/user.slice/user-1000.slice/session-3.scope/training.slice/run".into();
    let cases: &[(&str, bool, bool)] = &[
        // (match body, registered, expected)
        ("command = 'python.*train\\.py'", false, true),
        ("command = '^train\\.py'", false, false),
        ("command = 'epochs 3$'", false, true),
        ("user = 1000", false, true),
        ("user = [0, 1000]", false, true),
        ("user = 0", false, false),
        ("cgroup = '/user.slice'", false, true),
        ("cgroup = '/user.slice/'", false, true),
        ("cgroup = '/'", false, true),
        ("cgroup = '/user.slice/user-1000.slice'", false, true),
        ("cgroup = '/user.slice/user-100'", false, false),
        ("cgroup = '/system.slice'", false, false),
        ("slice = 'training.slice'", false, true),
        ("slice = 'training'", false, false),
        ("gpu = true", false, true),
        ("gpu = false", false, false),
        ("env = 'WATCHDOG_WATCH=1'", false, true),
        ("env = 'WATCHDOG_WATCH=10'", false, false),
        ("env = 'WATCHDOG_WATCH'", false, true),
        ("env = 'EMPTY'", false, false),
        ("env = 'EMPTY='", false, true),
        ("env = 'UNSET'", false, false),
        ("registered = true", true, true),
        ("registered = true", false, false),
        ("registered = false", false, true),
        (
            "user = 1000\ngpu = true\nenv = 'WATCHDOG_WATCH=1'",
            false,
            true,
        ),
        (
            "user = 1000\ngpu = true\nenv = 'WATCHDOG_WATCH=2'",
            false,
            false,
        ),
    ];
    for (body, registered, want) in cases {
        let c = parse(&format!("[[rule]]\nname = \"a\"\n[rule.match]\n{body}\n")).unwrap();
        assert_eq!(
            c.rule_for(&p, &gpu, *registered).is_some(),
            *want,
            "{body} registered={registered}"
        );
    }
}

#[test]
fn the_first_matching_rule_wins() {
    let c = parse(
        "[[rule]]\nname = \"gpu\"\n[rule.match]\ngpu = true\n\
         [[rule]]\nname = \"python\"\n[rule.match]\ncommand = 'python'\n\
         [[rule]]\nname = \"any\"\n[rule.match]\ncgroup = '/'\n",
    )
    .unwrap();
    let mut p = process(5);
    p.command = "python x.py".into();
    let none = HashSet::new();
    let gpu: HashSet<u32> = [5].into_iter().collect();
    assert_eq!(c.rule_for(&p, &gpu, false).map(Rule::name), Some("gpu"));
    assert_eq!(c.rule_for(&p, &none, false).map(Rule::name), Some("python"));
    p.command = "bash".into();
    assert_eq!(c.rule_for(&p, &none, false).map(Rule::name), Some("any"));
    assert!(c.rules[0].uses_gpu() && !c.rules[1].uses_gpu());
    assert!(!c.rules[0].uses_registration());
}

/// The environment is not needed when an earlier key of the rule fails: a process whose
/// environ cannot be read (no `/proc` directory here) still matches other rules.
#[test]
fn env_is_only_consulted_after_the_other_keys_match() {
    let c = parse(
        "[[rule]]\nname = \"e\"\n[rule.match]\nuser = 1\nenv = 'X'\n\
         [[rule]]\nname = \"u\"\n[rule.match]\nuser = 0\n",
    )
    .unwrap();
    let p = process(9);
    assert_eq!(
        c.rule_for(&p, &HashSet::new(), false).map(Rule::name),
        Some("u")
    );
    assert!(
        !p.environ_read(),
        "environ was read for a rule whose user did not match"
    );
}

#[test]
fn a_config_file_over_1_mib_or_missing_is_refused() {
    let e = DaemonConfig::load(Path::new("/dev/zero")).unwrap_err();
    assert!(
        e.contains("it is a character device, not a regular file"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    let e = DaemonConfig::load(&big).unwrap_err();
    assert!(e.contains("larger than 1 MiB"), "{e}");
    let e = DaemonConfig::load(Path::new("/no/such/daemon.toml")).unwrap_err();
    assert!(
        e.starts_with("cannot read config file '/no/such/daemon.toml'"),
        "{e}"
    );
}

#[test]
fn a_regex_too_big_is_refused_not_compiled_forever() {
    let e = err("[[rule]]\nname = \"a\"\n[rule.match]\ncommand = 'a{1000}{1000}'\n");
    assert!(
        e.contains("invalid regex 'a{1000}{1000}': it compiles to more than"),
        "{e}"
    );
}

#[test]
fn a_rule_max_interval_shorter_than_the_loop_interval_is_refused_at_its_line() {
    let text = format!(
        "interval = \"200ms\"\n{}",
        one_rule("gpu = true", "lead = \"5s\"\nmax_interval = \"100ms\"")
    );
    assert_eq!(
        err(&text),
        "config file d.toml:8: rule 'r': invalid rule[0].watch.max_interval '100ms': expected at least the interval (200ms)"
    );
    let text = format!(
        "interval = \"200ms\"\n{}",
        one_rule("gpu = true", "max_interval = \"2s\"")
    );
    let config = parse(&text).unwrap();
    let s = config.rules[0].settings(&Host::from_env(), config.interval, config.tree_interval);
    assert_eq!(s.max_interval(), Duration::from_secs(2));
}
