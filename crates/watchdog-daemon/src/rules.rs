//! The daemon's config file (`/etc/watchdog/daemon.toml`, documented in `config/daemon.toml`):
//! the daemon's own settings and the rules that say which processes are training runs and how
//! each is watched. It owns the file's format, its checks and the matching of a process
//! against the rules; the facts matched on are read by [`crate::discovery`].
//!
//! Public API:
//! - [`DaemonConfig::load`] / [`DaemonConfig::parse`]: the strict file, every error one line
//!   naming the file, the line and what was expected (the same helpers, size cap and message
//!   shape as `config/watchdog.toml`'s, from `watchdog-config`).
//! - [`DaemonConfig::rule_for`]: the first rule whose `[rule.match]` matches a process.
//! - [`Rule::settings`]: the watch settings of a rule's run: the defaults with its
//!   `[rule.watch]` on top (the keys of `config/watchdog.toml`), sampled at the daemon's
//!   interval. [`Rule::name`], [`Rule::uses_gpu`], [`Rule::uses_registration`].
//! - [`REFUSED_WATCH_KEYS`]: the keys of `config/watchdog.toml` a rule may not set, and why.
//!
//! Matching: every key given in `[rule.match]` must hold (AND), and a rule must give at least
//! one. `command` is a regex searched (not anchored) in the command line, arguments joined by
//! spaces; `user` a name (resolved to a UID when the file is loaded) or UID, or a list of
//! them, compared with the process's real UID; `cgroup` a path prefix of the process's cgroup
//! (whole components: `/a/b` holds `/a/b/c`, not `/a/bc`), where the cgroup is the v1 memory
//! controller's path when the memory controller is on v1, else the unified path; `slice` any
//! component of that path; `gpu` whether the process holds GPU memory; `env` `NAME=VALUE`
//! (exactly) or `NAME` (set and non-empty) in the environment the process was started with;
//! `registered` whether it registered itself through the client's `install()`; `slurm`
//! whether its cgroup lies under a SLURM job's (`watchdog_slurm::cgroup`: the job ID comes
//! from the path alone, never from the environment a user controls). `gpu` and
//! `registered` change during a process's life (CUDA allocates seconds after start): the
//! daemon re-evaluates a process when it enters the GPU set or registers.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use toml::Spanned;
use watchdog_config::{FileConfig, Host, MIN_INTERVAL, Settings};
use watchdog_types::quote::quote_value;
use watchdog_types::units;

use crate::discovery::ProcessFacts;

/// Where the keys are documented (named by an unknown key's error).
pub const DOCUMENTED_IN: &str = "config/daemon.toml";
/// Default sampling period of the one loop that samples every target.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
/// Longest sampling period (the same bound as `watchdog --interval`).
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Default discovery period.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_millis(250);
/// Shortest discovery period: a scan reads every process's `stat` (see [`crate::discovery`]).
pub const MIN_SCAN_INTERVAL: Duration = Duration::from_millis(10);
/// Longest discovery period: a run is found within a second of its start.
pub const MAX_SCAN_INTERVAL: Duration = Duration::from_secs(1);
/// Default period of a run's tree RSS sum when its rule sets no `mem_limit`.
pub const DEFAULT_TREE_INTERVAL: Duration = Duration::from_secs(1);
/// Default control socket.
pub const DEFAULT_SOCKET: &str = "/run/watchdog/daemon.sock";
/// Default directory of per-user request files (`DIR/UID/PID.request.json`).
pub const DEFAULT_REQUEST_DIR: &str = "/run/watchdog/users";
/// Default directory of recordings.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/watchdog";
/// Most bytes a compiled `command` regex may take (the regex crate's own default is 10 MiB).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Keys of `config/watchdog.toml` that a rule's `[rule.watch]` may not set, with the reason.
pub const REFUSED_WATCH_KEYS: &[(&str, &str)] = &[
    (
        "interval",
        "the daemon samples every target in one loop; set the top-level interval",
    ),
    (
        "request_file",
        "the daemon writes each run's request file under request_dir/UID/, where its user can read it",
    ),
    (
        "record",
        "the daemon writes one recording per run under state_dir; a fixed path would be shared by every run of the rule",
    ),
    (
        "status",
        "the daemon has no terminal; its status is served on its socket",
    ),
    ("log_format", "the daemon's log format is its own"),
    (
        "restart",
        "the daemon did not start the run and cannot start it again; restart it with `watchdog run --restart N` (see docs/restart.md)",
    ),
    (
        "restart_on",
        "the daemon does not restart runs (see docs/restart.md)",
    ),
    (
        "restart_per_hour",
        "the daemon does not restart runs (see docs/restart.md)",
    ),
    (
        "requeue",
        "the daemon does not requeue SLURM jobs; run the job's command under `watchdog --requeue run` (see docs/slurm.md)",
    ),
    (
        "term_grace",
        "the daemon did not start the run: a SIGTERM to the daemon stops the daemon, never the runs; give the run's own `watchdog run` a --term-grace (see docs/notices.md)",
    ),
    (
        "notice",
        "the daemon does not ask the cloud's preemption notice; run the job under `watchdog run`, which does (see docs/notices.md)",
    ),
    (
        "notice_endpoint",
        "the daemon does not ask the cloud's preemption notice (see docs/notices.md)",
    ),
    (
        "notice_interval",
        "the daemon does not ask the cloud's preemption notice (see docs/notices.md)",
    ),
    (
        "checkpoint_record",
        "the daemon never reads or writes a run's checkpoint record (see docs/slurm.md)",
    ),
];

/// The daemon's config: its own settings and its rules, in file order.
#[derive(Debug)]
pub struct DaemonConfig {
    /// Sampling period of the one loop that samples every target.
    pub interval: Duration,
    /// Discovery period (at most 1 s).
    pub scan_interval: Duration,
    /// How often a run's tree RSS is summed when its rule sets no `mem_limit`.
    pub tree_interval: Duration,
    /// The control socket (status, registrations).
    pub socket: PathBuf,
    /// Per-user request files: `request_dir/UID/PID.request.json`.
    pub request_dir: PathBuf,
    /// Where recordings are written.
    pub state_dir: PathBuf,
    /// Address of the Prometheus endpoint; `None`: off.
    pub metrics: Option<SocketAddr>,
    /// The rules, first match wins; never empty.
    pub rules: Vec<Rule>,
}

/// One rule: which processes it takes and how they are watched.
#[derive(Debug)]
pub struct Rule {
    name: String,
    matcher: Match,
    watch: FileConfig,
}

/// `[rule.match]`: every key given must hold.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Match {
    #[serde(deserialize_with = "de_regex")]
    command: Option<Regex>,
    #[serde(deserialize_with = "de_users")]
    user: Option<Vec<u32>>,
    #[serde(deserialize_with = "de_cgroup")]
    cgroup: Option<String>,
    #[serde(deserialize_with = "de_slice")]
    slice: Option<String>,
    gpu: Option<bool>,
    #[serde(deserialize_with = "de_env")]
    env: Option<EnvMatch>,
    registered: Option<bool>,
    slurm: Option<bool>,
}

/// `env = "NAME=VALUE"` or `env = "NAME"`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EnvMatch {
    name: String,
    /// `None`: set and non-empty.
    value: Option<String>,
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default, deserialize_with = "de_interval")]
    interval: Option<Duration>,
    #[serde(default, deserialize_with = "de_scan_interval")]
    scan_interval: Option<Duration>,
    #[serde(default, deserialize_with = "de_tree_interval")]
    tree_interval: Option<Duration>,
    #[serde(default, deserialize_with = "de_socket")]
    socket: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_absolute")]
    request_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_absolute")]
    state_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_metrics")]
    metrics: Option<SocketAddr>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Spanned<String>,
    #[serde(rename = "match")]
    matcher: Spanned<Match>,
    #[serde(default)]
    watch: Option<Spanned<FileConfig>>,
}

impl DaemonConfig {
    /// Reads and parses the daemon's config file (at most 1 MiB).
    pub fn load(path: &Path) -> Result<DaemonConfig, String> {
        let text = watchdog_config::read_capped(path)?;
        DaemonConfig::parse(&text, path)
    }

    /// Parses config `text`; `path` is only used in messages. Checks each rule's watch
    /// settings as `watchdog` checks its own (disks exist, a deadline is ahead, ...).
    pub fn parse(text: &str, path: &Path) -> Result<DaemonConfig, String> {
        let raw: RawConfig = watchdog_config::parse_toml(text, path, DOCUMENTED_IN)?;
        let interval = raw.interval.unwrap_or(DEFAULT_INTERVAL);
        if raw.rule.is_empty() {
            return Err(format!(
                "config file {}: no [[rule]]: expected at least one [[rule]] with a name and a \
                 [rule.match] table (see {DOCUMENTED_IN})",
                path.display()
            ));
        }
        let host = Host::from_env();
        let mut names = HashSet::new();
        let mut rules = Vec::with_capacity(raw.rule.len());
        for (index, rule) in raw.rule.into_iter().enumerate() {
            let rule = rule.into_inner();
            let name_span = rule.name.span();
            let name = rule.name.into_inner();
            let at = |offset: usize, msg: &str| watchdog_config::located(text, path, offset, msg);
            if !valid_rule_name(&name) {
                return Err(at(
                    name_span.start,
                    &format!(
                        "invalid rule name {}: expected 1 to 64 letters, digits, '.', '_' or '-'",
                        quote_value(&name)
                    ),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(at(
                    name_span.start,
                    &format!("rule name '{name}' is used twice: expected a unique name per rule"),
                ));
            }
            let match_span = rule.matcher.span();
            let matcher = rule.matcher.into_inner();
            if matcher.is_empty() {
                return Err(at(
                    match_span.start,
                    &format!(
                        "rule '{name}': [rule.match] is empty: expected at least one of command, \
                         user, cgroup, slice, gpu, env, registered, slurm"
                    ),
                ));
            }
            let (watch, watch_span) = match rule.watch {
                Some(w) => {
                    let span = w.span();
                    (w.into_inner(), span)
                }
                None => (FileConfig::default(), match_span.clone()),
            };
            let key_at = |key: &str| table_key_line(text, watch_span.clone(), key);
            let rule_error = |key: &str, msg: &str| {
                format!(
                    "config file {}:{}: rule '{name}': {msg}",
                    path.display(),
                    key_at(key)
                )
            };
            if let Some((key, why)) = REFUSED_WATCH_KEYS.iter().find(|(k, _)| watch.is_set(k)) {
                return Err(rule_error(
                    key,
                    &format!("rule[{index}].watch.{key}: a rule cannot set {key}: {why}"),
                ));
            }
            let mut settings = Settings::from_file(host.clone(), &watch);
            settings.interval = interval;
            settings.validate().map_err(|(key, msg)| {
                let dotted = format!("rule[{index}].watch.{key}");
                rule_error(key, &watchdog_config::named_by_key(&msg, key, &dotted))
            })?;
            rules.push(Rule {
                name,
                matcher,
                watch,
            });
        }
        Ok(DaemonConfig {
            interval,
            scan_interval: raw.scan_interval.unwrap_or(DEFAULT_SCAN_INTERVAL),
            tree_interval: raw.tree_interval.unwrap_or(DEFAULT_TREE_INTERVAL),
            socket: raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into()),
            request_dir: raw
                .request_dir
                .unwrap_or_else(|| DEFAULT_REQUEST_DIR.into()),
            state_dir: raw.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into()),
            metrics: raw.metrics,
            rules,
        })
    }

    /// The NVIDIA management library for the GPU holder set: the first `gpu` rule's
    /// `nvml_library`, else `WATCHDOG_NVML_LIB`, else the system's (`None`).
    pub fn gpu_library(&self, host: &Host) -> Option<PathBuf> {
        self.rules.iter().filter(|r| r.uses_gpu()).find_map(|r| {
            r.settings(host, self.interval, self.tree_interval)
                .nvml_library
        })
    }

    /// The first rule matching `process`, given the PIDs holding GPU memory and whether the
    /// process registered itself. The environment is read only when a rule gets to its `env`
    /// key (every other key of that rule matched).
    pub fn rule_for(
        &self,
        process: &ProcessFacts,
        gpu_pids: &HashSet<u32>,
        registered: bool,
    ) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.matcher.matches(process, gpu_pids, registered))
    }
}

impl Rule {
    /// The rule's unique name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The settings of a run this rule matched: the defaults with `[rule.watch]` on top,
    /// sampled every `daemon_interval`, the tree's RSS every `tree_interval` when the rule
    /// sets no `mem_limit`. The request file and recording are left unset (`None`): the
    /// daemon decides them per run.
    pub fn settings(
        &self,
        host: &Host,
        daemon_interval: Duration,
        tree_interval: Duration,
    ) -> Settings {
        let mut settings = Settings::from_file(host.clone(), &self.watch);
        settings.interval = daemon_interval;
        settings.tree_interval = Some(tree_interval);
        settings
    }

    /// Whether the rule matches on `gpu`: a process must be re-evaluated when it starts
    /// holding GPU memory (or stops).
    pub fn uses_gpu(&self) -> bool {
        self.matcher.gpu.is_some()
    }

    /// Whether the rule matches on `registered`: a process must be re-evaluated when it
    /// registers.
    pub fn uses_registration(&self) -> bool {
        self.matcher.registered.is_some()
    }

    /// Whether `process` matches this rule (see [`DaemonConfig::rule_for`]).
    pub fn matches(
        &self,
        process: &ProcessFacts,
        gpu_pids: &HashSet<u32>,
        registered: bool,
    ) -> bool {
        self.matcher.matches(process, gpu_pids, registered)
    }
}

impl Match {
    fn is_empty(&self) -> bool {
        self.command.is_none()
            && self.user.is_none()
            && self.cgroup.is_none()
            && self.slice.is_none()
            && self.gpu.is_none()
            && self.env.is_none()
            && self.registered.is_none()
            && self.slurm.is_none()
    }

    /// Cheap keys first; the environment (a file read) last.
    fn matches(&self, p: &ProcessFacts, gpu_pids: &HashSet<u32>, registered: bool) -> bool {
        self.registered.is_none_or(|r| r == registered)
            && self
                .slurm
                .is_none_or(|s| s == watchdog_slurm::cgroup::job_of_path(&p.cgroup).is_some())
            && self.user.as_ref().is_none_or(|uids| uids.contains(&p.uid))
            && self.gpu.is_none_or(|g| g == gpu_pids.contains(&p.pid))
            && self
                .cgroup
                .as_deref()
                .is_none_or(|prefix| cgroup_under(&p.cgroup, prefix))
            && self
                .slice
                .as_deref()
                .is_none_or(|slice| p.cgroup.split('/').any(|c| c == slice))
            && self
                .command
                .as_ref()
                .is_none_or(|re| re.is_match(&p.command))
            && self.env.as_ref().is_none_or(|env| env.matches(p))
    }
}

impl EnvMatch {
    fn matches(&self, p: &ProcessFacts) -> bool {
        match (p.env_var(&self.name), &self.value) {
            (Some(v), None) => !v.is_empty(),
            (Some(v), Some(want)) => v == want,
            (None, _) => false,
        }
    }
}

/// Whether cgroup `path` is `prefix` or below it, comparing whole components.
fn cgroup_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn valid_rule_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The line where `key` is set in the table at `span` of `text` (a `[rule.watch]` header or
/// an inline `{ ... }`), else the table's own line.
fn table_key_line(text: &str, span: Range<usize>, key: &str) -> usize {
    let start = span.start.min(text.len());
    let table_line = text[..start].matches('\n').count() + 1;
    let is_header = text[start..].starts_with('[');
    let end = if is_header {
        // Up to the next table header.
        let body = span.end.min(text.len());
        text[body..]
            .match_indices('\n')
            .map(|(i, _)| body + i + 1)
            .find(|&line| text[line..].trim_start().starts_with('['))
            .unwrap_or(text.len())
    } else {
        span.end.min(text.len())
    };
    let last_line = text[..end].matches('\n').count() + 1;
    watchdog_config::key_line_from(text, start, key)
        .filter(|&line| line <= last_line)
        .unwrap_or(table_line)
}

fn de_duration<'de, D: Deserializer<'de>>(
    d: D,
    key: &str,
    (min, max): (Duration, Duration),
    range: &str,
) -> Result<Option<Duration>, D::Error> {
    let s = watchdog_config::de_text(d, watchdog_config::EXPECTED_DURATION)?;
    let v = units::parse_duration(&s).map_err(de::Error::custom)?;
    if v < min || v > max {
        return Err(de::Error::custom(format!(
            "invalid {key} {}: expected {range}",
            quote_value(&s),
        )));
    }
    Ok(Some(v))
}

fn de_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(
        d,
        "interval",
        (MIN_INTERVAL, MAX_INTERVAL),
        "from 1ms to 60s",
    )
}

fn de_scan_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(
        d,
        "scan_interval",
        (MIN_SCAN_INTERVAL, MAX_SCAN_INTERVAL),
        "from 10ms to 1s",
    )
}

fn de_tree_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(
        d,
        "tree_interval",
        (MIN_INTERVAL, MAX_INTERVAL),
        "from 1ms to 60s",
    )
}

fn de_absolute<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let s = String::deserialize(d)?;
    if !s.starts_with('/') || s.contains('\0') {
        return Err(de::Error::custom(format!(
            "invalid path {}: expected an absolute path such as /run/watchdog/daemon.sock",
            quote_value(&s)
        )));
    }
    Ok(Some(PathBuf::from(s)))
}

/// The longest path a Unix socket can be bound at: `sun_path` holds 108 bytes with the
/// terminating NUL (unix(7)).
const MAX_SOCKET_PATH: usize = 107;

fn de_socket<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let path = de_absolute(d)?;
    let len = path.as_ref().map_or(0, |p| p.as_os_str().len());
    if len > MAX_SOCKET_PATH {
        return Err(de::Error::custom(format!(
            "invalid socket path {}: expected at most {MAX_SOCKET_PATH} bytes (the limit of \
             a Unix socket's path), not {len}",
            quote_value(&path.unwrap_or_default().to_string_lossy())
        )));
    }
    Ok(path)
}

/// The `metrics` key takes what `--metrics` takes (`PORT`, `:PORT`, `HOST:PORT`,
/// `[IPv6]:PORT`); a host with several addresses is served on its first.
fn de_metrics<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    let addrs = watchdog_metrics::server::parse_addr(&s).map_err(de::Error::custom)?;
    addrs.first().copied().map(Some).ok_or_else(|| {
        de::Error::custom(format!(
            "invalid metrics address {}: the host has no address",
            quote_value(&s)
        ))
    })
}

fn de_regex<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Regex>, D::Error> {
    let s = String::deserialize(d)?;
    regex::RegexBuilder::new(&s)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(Some)
        .map_err(|e| {
            de::Error::custom(format!(
                "invalid regex {}: {}; expected a regular expression (Rust regex syntax) \
                 searched in the command line",
                quote_value(&s),
                regex_reason(&e)
            ))
        })
}

/// The reason of a regex error in one line: the crate's syntax errors are a multi-line
/// picture ending in `error: REASON`.
fn regex_reason(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix("error: "))
            .unwrap_or("syntax error")
            .to_string(),
        regex::Error::CompiledTooBig(limit) => {
            format!("it compiles to more than {limit} bytes")
        }
        _ => "not a valid pattern".into(),
    }
}

fn de_cgroup<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if !s.starts_with('/') {
        return Err(de::Error::custom(format!(
            "invalid cgroup {}: expected a cgroup path starting with '/', such as \
             /user.slice/user-1000.slice",
            quote_value(&s)
        )));
    }
    Ok(Some(s))
}

fn de_slice<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s.contains('/') {
        return Err(de::Error::custom(format!(
            "invalid slice {}: expected one cgroup path component such as training.slice \
             (use cgroup for a path)",
            quote_value(&s)
        )));
    }
    Ok(Some(s))
}

fn de_env<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EnvMatch>, D::Error> {
    let s = String::deserialize(d)?;
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (s.as_str(), None),
    };
    if name.is_empty() || name.contains('\0') || value.as_deref().is_some_and(|v| v.contains('\0'))
    {
        return Err(de::Error::custom(format!(
            "invalid env {}: expected NAME=VALUE, or NAME alone for set and non-empty",
            quote_value(&s)
        )));
    }
    Ok(Some(EnvMatch {
        name: name.to_string(),
        value,
    }))
}

/// One user: a name resolved to its UID, or a UID.
struct OneUid(u32);

struct UidVisitor;

impl<'de> Visitor<'de> for UidVisitor {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a user name or a numeric UID")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| {
            E::custom(format!(
                "invalid UID {v}: expected a user name or a UID from 0 to {}",
                u32::MAX
            ))
        })
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        self.visit_i64(i64::try_from(v).unwrap_or(-1))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        uid_of(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for OneUid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UidVisitor).map(OneUid)
    }
}

struct UsersVisitor;

impl<'de> Visitor<'de> for UsersVisitor {
    type Value = Vec<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a user name, a numeric UID, or a list of them")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<u32>, E> {
        UidVisitor.visit_i64(v).map(|u| vec![u])
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<u32>, E> {
        UidVisitor.visit_u64(v).map(|u| vec![u])
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u32>, E> {
        UidVisitor.visit_str(v).map(|u| vec![u])
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u32>, A::Error> {
        let mut uids = Vec::new();
        while let Some(OneUid(uid)) = seq.next_element()? {
            uids.push(uid);
        }
        if uids.is_empty() {
            return Err(de::Error::custom(
                "invalid user []: expected at least one user name or UID",
            ));
        }
        Ok(uids)
    }
}

fn de_users<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    d.deserialize_any(UsersVisitor).map(Some)
}

/// The UID of user `name` (through NSS, as `getent passwd` does), or `name` read as a UID
/// when no user has that name.
fn uid_of(name: &str) -> Result<u32, String> {
    match lookup_user(name) {
        Ok(Some(uid)) => Ok(uid),
        Ok(None) => {
            let t = name.trim();
            if !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_digit())
                && let Ok(uid) = t.parse::<u32>()
            {
                return Ok(uid);
            }
            Err(format!(
                "unknown user {}: expected a user name of this machine (getent passwd) or a \
                 numeric UID",
                quote_value(name)
            ))
        }
        Err(e) => Err(format!(
            "cannot look up user {}: {e}; expected a user name of this machine or a numeric UID",
            quote_value(name)
        )),
    }
}

/// `getpwnam_r(name)`: `Ok(None)` when there is no such user.
fn lookup_user(name: &str) -> std::io::Result<Option<u32>> {
    let Ok(cname) = std::ffi::CString::new(name) else {
        return Ok(None); // A NUL byte: no user has that name.
    };
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    loop {
        let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `cname` is NUL-terminated, `pwd` is
        // writable storage for one passwd, `buf` is writable for `buf.len()` bytes and
        // outlives the use of the strings it holds (none are read), `result` is writable.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                pwd.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            let doubled = buf.len() * 2;
            buf.resize(doubled, 0);
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Ok(None);
        }
        // SAFETY: on success with a non-null result, getpwnam_r initialized `pwd` and
        // `result` points to it.
        return Ok(Some(unsafe { (*result).pw_uid }));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
