//! `watchdog-config`: the settings, each declared once, and the host's paths.
//!
//! The settings, from defaults, the TOML config file and the command line, in that
//! order of precedence (flags win). The file is strict: an unknown key or a bad value is
//! an error naming the file, the line and what was expected. Every key is documented in
//! `config/watchdog.toml`, which a test keeps in step with [`KEYS`]. Each setting is
//! declared once, in the table of `settings.rs`, which yields its flag, its key, its default
//! and the merge.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use watchdog_engine::EngineSettings;
use watchdog_procfs::{KernelRoots, ProcRoot};

use serde::{Deserialize, Deserializer};
use watchdog_types::VerdictKind;
use watchdog_types::units;

mod fill_rate;
pub mod options;
mod settings;

use crate::options::WatchOptions;
pub use crate::settings::{FileConfig, KEYS, Settings};

/// The host as the watchdog sees it: where the kernel's interfaces are, and what the
/// environment says. Built once, here (the only place that reads environment variables),
/// from the roots `watchdog-procfs` declares ([`KernelRoots`]), and passed down, so tests
/// can point it elsewhere.
///
/// `WATCHDOG_ROOT=DIR`, a test seam, points every kernel root at a recorded tree:
/// `DIR/proc`, `DIR/sys/fs/cgroup`, `DIR/sys/class/dmi/id` (see `docs/design.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Where `sys/class/dmi/id` is read for the cloud provider: the root, or the fixture
    /// tree a test names in `WATCHDOG_DMI_ROOT`.
    pub dmi_root: PathBuf,
    /// The root directory (`/`, or `WATCHDOG_ROOT`), where container markers
    /// (`/.dockerenv`) are looked for.
    pub root: PathBuf,
    /// procfs (`/proc`, or `WATCHDOG_ROOT/proc`, recorded), the root every `/proc` reader
    /// is given.
    pub proc: ProcRoot,
    /// The cgroup mount root (`/sys/fs/cgroup`), used when mountinfo cannot be read.
    pub cgroup: PathBuf,
    /// The shared-memory tmpfs (`/dev/shm`), watched by default.
    pub shm: PathBuf,
    /// The kernel log (`/dev/kmsg`), read for the OOM killer's line.
    pub kmsg: PathBuf,
    /// `$XDG_RUNTIME_DIR`: the request file's default place.
    pub runtime_dir: Option<PathBuf>,
    /// `$XDG_STATE_HOME`, else `$HOME/.local/state`: where recordings are kept.
    pub state_home: Option<PathBuf>,
    /// `$CUDA_VISIBLE_DEVICES` of the watchdog (a `run` target inherits it).
    pub cuda_visible_devices: Option<String>,
    /// `$NVIDIA_VISIBLE_DEVICES` of the watchdog (set by container runtimes).
    pub nvidia_visible_devices: Option<String>,
    /// `$NOTIFY_SOCKET`: systemd's notification socket (a path, or `@name` for an
    /// abstract socket), set when the service runs as `Type=notify`.
    pub notify_socket: Option<OsString>,
    /// `$WATCHDOG_USEC`: systemd's `WatchdogSec=` in microseconds.
    pub watchdog_usec: Option<String>,
    /// `$WATCHDOG_PID`: the process the watchdog keep-alive is expected from.
    pub watchdog_pid: Option<String>,
}

impl Host {
    /// The real host and this process's environment.
    pub fn from_env() -> Host {
        let kernel = match recorded_root() {
            Some(dir) => KernelRoots::recorded(dir),
            None => KernelRoots::host(),
        };
        Host {
            root: kernel.root().to_path_buf(),
            proc: kernel.proc().clone(),
            cgroup: kernel.cgroup().to_path_buf(),
            shm: PathBuf::from("/dev/shm"),
            kmsg: PathBuf::from("/dev/kmsg"),
            dmi_root: env_path("WATCHDOG_DMI_ROOT").unwrap_or_else(|| kernel.root().to_path_buf()),
            runtime_dir: env_path("XDG_RUNTIME_DIR"),
            state_home: env_path("XDG_STATE_HOME")
                .or_else(|| env_path("HOME").map(|h| h.join(".local/state"))),
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            nvidia_visible_devices: std::env::var("NVIDIA_VISIBLE_DEVICES").ok(),
            notify_socket: std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
            watchdog_usec: std::env::var("WATCHDOG_USEC").ok(),
            watchdog_pid: std::env::var("WATCHDOG_PID").ok(),
        }
    }

    /// `PROC/PID/NAME`.
    pub fn proc_file(&self, pid: u32, name: &str) -> PathBuf {
        self.proc.pid_file(pid, name)
    }

    /// The directory of the recorded tree the kernel's files are read from
    /// (`WATCHDOG_ROOT`), or `None` on a real host.
    pub fn recorded_root(&self) -> Option<&Path> {
        self.proc.is_recorded().then_some(self.root.as_path())
    }
}

/// The name of the test seam's environment variable: a directory of recorded kernel files.
pub const WATCHDOG_ROOT: &str = "WATCHDOG_ROOT";

/// `$WATCHDOG_ROOT` when set and not empty, made absolute (against the working directory).
fn recorded_root() -> Option<PathBuf> {
    let dir = std::env::var_os(WATCHDOG_ROOT).filter(|d| !d.is_empty())?;
    Some(std::path::absolute(&dir).unwrap_or_else(|_| PathBuf::from(dir)))
}

/// An environment variable holding an absolute path.
pub(crate) fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Shortest supported sampling interval.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// Shortest `slurm_poll`: each poll is one request to the SLURM controller.
pub const MIN_SLURM_POLL: Duration = Duration::from_secs(30);

impl Settings {
    /// How often the tree is walked and its RSS summed when that is less often than every
    /// tick: the service's `tree_interval`, for a run with no `mem_limit` (none to predict).
    pub fn slow_tree_interval(&self) -> Option<Duration> {
        self.tree_interval.filter(|_| self.mem_limit.is_none())
    }

    /// The longest interval between two samples of a far resource as asked: `max_interval`,
    /// else 1 s or the interval when that is longer (the engine clamps it further).
    pub fn max_interval(&self) -> Duration {
        self.max_interval.unwrap_or_else(|| {
            Duration::from_secs_f64(watchdog_types::defaults::DEFAULT_MAX_INTERVAL_S)
                .max(self.interval)
        })
    }

    /// What the engine decides with.
    pub fn engine(&self) -> EngineSettings {
        EngineSettings {
            lead_s: self.lead.as_secs_f64(),
            interval_s: self.interval.as_secs_f64(),
            floor_percent: self.floor,
            signal: self.signal,
            dry_run: self.dry_run,
            hook: self.on_alert.is_some(),
            fill_rate: self.fill_rate,
        }
    }

    /// Merges defaults, the config file named by the flags (if any) and the flags.
    pub fn resolve(flags: &WatchOptions) -> Result<Settings, String> {
        let file = match &flags.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let settings = Settings::merge(Host::from_env(), flags, file);
        settings.validate().map_err(|(key, msg)| {
            // A bad value from the file is reported at its line there.
            let from_flag = flags.gives(key);
            match (&flags.config, from_flag) {
                (Some(path), false) => {
                    let text = read_capped(path).unwrap_or_default();
                    let msg = named_by_key(&msg, key, key);
                    match key_line(&text, key) {
                        Some(line) => format!("config file {}:{line}: {msg}", path.display()),
                        None => format!("config file {}: {msg}", path.display()),
                    }
                }
                _ => msg,
            }
        })?;
        Ok(settings)
    }

    /// The defaults with `file` on top, no flags: the settings of a daemon rule's
    /// `[rule.watch]` table. Not validated: [`Settings::validate`] says what cannot be used.
    pub fn from_file(host: Host, file: &FileConfig) -> Settings {
        Settings::merge(host, &WatchOptions::default(), file.clone())
    }

    /// Checks values that parse but cannot be used; the error names the config key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let interval = watchdog_types::units::format_duration_s(self.interval.as_secs_f64());
        if self.interval < MIN_INTERVAL {
            return Err((
                "interval",
                format!("invalid interval '{interval}': expected at least 1ms"),
            ));
        }
        if self.interval > Duration::from_secs(60) {
            return Err((
                "interval",
                format!(
                    "invalid interval '{interval}': expected at most 60s (the watchdog must sample to predict)"
                ),
            ));
        }
        if let Some(max) = self.max_interval.filter(|m| *m < self.interval) {
            let max = watchdog_types::units::format_duration_s(max.as_secs_f64());
            return Err((
                "max_interval",
                format!(
                    "invalid max-interval '{max}': expected at least the interval ({interval})"
                ),
            ));
        }
        if self.mem_limit == Some(0) {
            return Err((
                "mem_limit",
                "invalid mem-limit '0': expected a positive size such as 8GiB".into(),
            ));
        }
        // Paths are quoted through quote_value: a long one is cut to 80 characters here,
        // where a quote in it ("it's") would defeat the error line's later clipping.
        let quoted = watchdog_types::quote::quote_path;
        for disk in &self.disks {
            if let Err(e) = std::fs::metadata(disk) {
                return Err((
                    "disks",
                    format!(
                        "cannot watch disk {}: {e}; expected an existing path on the filesystem to watch",
                        quoted(disk)
                    ),
                ));
            }
            if let Err(why) = check_sized(disk) {
                return Err((
                    "disks",
                    format!("cannot watch disk {}: {why}", quoted(disk)),
                ));
            }
        }
        for (key, what, path) in [
            ("request_file", "request file", &self.request_file),
            ("events", "events file", &self.events),
            ("record", "recording", &self.record),
        ] {
            if let Some(path) = path {
                let dir = watchdog_types::fs::parent_dir(path);
                if path.as_os_str().is_empty() || path.file_name().is_none() || !dir.is_dir() {
                    return Err((
                        key,
                        format!(
                            "invalid {what} {}: expected a file path in an existing directory",
                            quoted(path)
                        ),
                    ));
                }
            }
        }
        if self.hook_timeout.is_zero() {
            return Err((
                "hook_timeout",
                "invalid hook-timeout '0': expected a positive duration such as 60s".into(),
            ));
        }
        if self.max_runtime == Some(Duration::ZERO) {
            return Err((
                "max_runtime",
                "invalid max-runtime '0': expected a positive duration such as 12h".into(),
            ));
        }
        if self.restart_per_hour == 0 {
            return Err((
                "restart_per_hour",
                "invalid restart-per-hour '0': expected at least 1".into(),
            ));
        }
        if self.slurm_poll < MIN_SLURM_POLL {
            let poll = watchdog_types::units::format_duration_s(self.slurm_poll.as_secs_f64());
            return Err((
                "slurm_poll",
                format!(
                    "invalid slurm-poll '{poll}': expected at least 30s (each poll is a request to the SLURM controller)"
                ),
            ));
        }
        if let Err(e) = self.notice.parse::<watchdog_notice::Mode>() {
            return Err(("notice", e.to_string()));
        }
        if let Some(url) = &self.notice_endpoint
            && let Err(e) = watchdog_notice::parse_endpoint(url)
        {
            return Err(("notice_endpoint", e.to_string()));
        }
        if self.notice_interval < std::time::Duration::from_millis(100) {
            let every =
                watchdog_types::units::format_duration_s(self.notice_interval.as_secs_f64());
            return Err((
                "notice_interval",
                format!(
                    "invalid notice-interval '{every}': expected at least 100ms (each is a request to the metadata server)"
                ),
            ));
        }
        if let Some(path) = &self.checkpoint_record {
            let dir = watchdog_types::fs::parent_dir(path);
            // Written by a rename over it: anything there but a regular file (a directory,
            // a device, a FIFO, a symlink) would never take a write.
            let not_a_file =
                std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file());
            if path.file_name().is_none() || !dir.is_dir() || not_a_file {
                return Err((
                    "checkpoint_record",
                    format!(
                        "invalid checkpoint record {}: expected a regular file, or none yet, in an existing directory",
                        quoted(path)
                    ),
                ));
            }
        }
        if let Some(deadline) = self.deadline
            && deadline <= jiff::Timestamp::now()
        {
            return Err((
                "deadline",
                format!(
                    "invalid deadline '{deadline}': it has passed; expected a time in the future"
                ),
            ));
        }
        Ok(())
    }
}

/// Checks that the filesystem holding `path` has a size to watch (the disk source refuses
/// one that has none, later); the error says why not.
fn check_sized(path: &Path) -> Result<(), String> {
    match rustix::fs::statvfs(path) {
        Ok(s) if s.f_blocks == 0 => Err(watchdog_types::fs::NO_SIZE.to_string()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// A check's message about a value from a file: the value named by its key's dotted
/// `path` (`restart_per_hour`, `rule[0].watch.max_interval`), not by the flag `key` also
/// has (`invalid restart-per-hour '0'` becomes `invalid restart_per_hour '0'`).
pub fn named_by_key(msg: &str, key: &str, path: &str) -> String {
    let flag = format!("invalid {} ", key.replace('_', "-"));
    match msg.strip_prefix(&flag) {
        Some(rest) => format!("invalid {path} {rest}"),
        None => msg.to_string(),
    }
}

/// The 1-based line where `key` is set in config `text`, if it is.
fn key_line(text: &str, key: &str) -> Option<usize> {
    key_line_from(text, 0, key)
}

/// The 1-based line (counted from the start of `text`) of the first `key = ...` line at or
/// after byte `from`, if there is one: where a key of one table is set (the daemon's rules
/// pass the offset of their `[rule.watch]` table).
pub fn key_line_from(text: &str, from: usize, key: &str) -> Option<usize> {
    let from = text
        .get(..from.min(text.len()))
        .map_or(0, |before| before.rfind('\n').map_or(0, |i| i + 1));
    let skipped = text[..from].matches('\n').count();
    text[from..]
        .lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| skipped + i + 1)
}

/// `config file PATH:LINE: MESSAGE`, LINE being the line holding byte `offset` of `text`.
pub fn located(text: &str, path: &Path, offset: usize, message: &str) -> String {
    format!(
        "config file {}:{}: {message}",
        path.display(),
        line_of(text, offset)
    )
}

/// The 1-based line holding byte `offset` of `text` (the last line past its end).
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Largest config file read (1 MiB); the documented example is under 8 KiB.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads and parses a config file, with errors naming the file and line.
pub fn load_file(path: &Path) -> Result<FileConfig, String> {
    let text = read_capped(path)?;
    parse_file(&text, path)
}

/// Reads a config file as UTF-8 through the shared bounded reader: one over
/// [`MAX_CONFIG_BYTES`] is refused, and a FIFO or a device before it is opened
/// (`--config FIFO` never blocks, `--config /dev/zero` never fills memory).
pub fn read_capped(path: &Path) -> Result<String, String> {
    use watchdog_types::fs::{InputLimits, ReadError, read_input};
    let limits = InputLimits {
        max_bytes: MAX_CONFIG_BYTES,
        max_line: None,
    };
    read_input(path, limits).map_err(|e| match e {
        ReadError::TooLarge { .. } => format!(
            "config file '{}' is larger than 1 MiB: expected a TOML file of settings",
            path.display()
        ),
        ReadError::NotText { .. } => format!(
            "cannot read config file '{}': it is not UTF-8 text; expected a TOML file",
            path.display()
        ),
        e => format!(
            "cannot read config file '{}': {e}; expected a TOML file",
            path.display()
        ),
    })
}

/// Parses config text; `path` is only used in messages.
pub fn parse_file(text: &str, path: &Path) -> Result<FileConfig, String> {
    parse_toml(text, path, "config/watchdog.toml")
}

/// Parses strict TOML `text` into `T`, with the errors of [`parse_file`]: `config file
/// PATH:LINE: KEY: message`, one line, quoted values clipped, KEY being the full dotted
/// path of the key at fault (`rule[0].watch.lead`); an unknown key's error says the keys
/// are documented in `documented_in`. The daemon's config reuses it.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    documented_in: &str,
) -> Result<T, String> {
    let (e, key) = match toml::Deserializer::parse(text) {
        Ok(de) => match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(value) => return Ok(value),
            Err(e) => {
                let key = key_path(e.path());
                (e.into_inner(), key)
            }
        },
        // A syntax error: no key to name, but for a key given twice, which its span is.
        Err(e) => (e, String::new()),
    };
    let duplicate = (e.message() == "duplicate key")
        .then(|| e.span().and_then(|span| text.get(span)))
        .flatten()
        .map(|k| watchdog_types::quote::quote_value(k.trim().trim_matches(['"', '\''])));
    let start = e.span().map(|span| span.start.min(text.len()));
    let location = match start {
        Some(start) => format!("{}:{}", path.display(), line_of(text, start)),
        None => path.display().to_string(),
    };
    // toml and serde quote a bad value whole: keep 80 characters of it.
    let message = watchdog_types::quote::clip_quoted(&e.message().trim().replace('\n', " "))
        // In TOML's words: `interval.x = 1` makes `interval` a table.
        .replacen("invalid type: map,", "invalid type: table,", 1)
        .replacen("invalid type: sequence,", "invalid type: array,", 1)
        .replacen("expected a sequence", "expected an array", 1);
    let (key, message) = if let Some(duplicate) = duplicate {
        (
            key,
            format!("duplicate key {duplicate}: expected each key once in its table"),
        )
    } else if message.starts_with("unknown field") {
        // The path ends with the unknown key, which the message quotes: name its table.
        let table = key.rfind(['.', '[']).map_or("", |i| &key[..i]);
        (
            table.to_string(),
            format!("{message}; the keys are documented in {documented_in}"),
        )
    } else {
        (key, message)
    };
    Err(if key.is_empty() {
        format!("config file {location}: {message}")
    } else {
        format!("config file {location}: {key}: {message}")
    })
}

/// The dotted path of a key as TOML would spell it (`rule[0].watch.lead`), leaving out
/// the private fields through which `toml::Spanned` is deserialized; empty at the top.
fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if key.starts_with("$__serde_spanned_private") {
                    continue;
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// A value's text: a TOML string, or with `numbers` also an integer or a float (`mem_limit
/// = 8589934592`, `floor = 2.5`); anything else is an error saying `expected`.
struct Text {
    expected: &'static str,
    numbers: bool,
}

impl<'de> serde::de::Visitor<'de> for Text {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.expected)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        if self.numbers {
            Ok(v.to_string())
        } else {
            Err(E::invalid_type(serde::de::Unexpected::Signed(v), &self))
        }
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        if self.numbers {
            Ok(v.to_string())
        } else {
            Err(E::invalid_type(serde::de::Unexpected::Unsigned(v), &self))
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        if self.numbers {
            Ok(v.to_string())
        } else {
            Err(E::invalid_type(serde::de::Unexpected::Float(v), &self))
        }
    }
}

/// A string value, or an error of the wrong type saying `expected` (`invalid type: integer
/// `5`, expected a duration such as "5s"`) instead of serde's "expected a string".
pub fn de_text<'de, D: Deserializer<'de>>(
    d: D,
    expected: &'static str,
) -> Result<String, D::Error> {
    d.deserialize_any(Text {
        expected,
        numbers: false,
    })
}

/// [`de_text`], also taking a number as its text.
pub(crate) fn de_text_or_number<'de, D: Deserializer<'de>>(
    d: D,
    expected: &'static str,
) -> Result<String, D::Error> {
    d.deserialize_any(Text {
        expected,
        numbers: true,
    })
}

/// What a duration is, for a value of the wrong type.
pub const EXPECTED_DURATION: &str = "a duration such as \"5s\"";

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = de_text(d, EXPECTED_DURATION)?;
    units::parse_duration(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = de_text_or_number(d, "a size such as \"8GiB\" or a number of bytes")?;
    units::parse_size(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_signal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    let s = de_text_or_number(d, "a signal name such as \"USR1\" or a number")?;
    units::parse_signal(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_deadline<'de, D: Deserializer<'de>>(d: D) -> Result<Option<jiff::Timestamp>, D::Error> {
    // A quoted RFC 3339 string, or TOML's own (unquoted) offset date-time.
    let s = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s,
        toml::Value::Datetime(dt) => dt.to_string(),
        other => {
            return Err(serde::de::Error::custom(format!(
                "invalid deadline (a {}): expected an RFC 3339 time such as \"2026-11-23T08:00:00Z\"",
                other.type_str()
            )));
        }
    };
    crate::options::parse_deadline(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_restart_on<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<VerdictKind>>, D::Error> {
    const EXPECTED: &str = "expected a list of verdict names such as [\"oom_kill\", \"gpu_oom\"]";
    // A TOML list of names, or the flag's comma list as one string.
    let names = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s,
        // Refused, saying why: a list naming no verdict would make `restart` restart nothing.
        toml::Value::Array(items) if items.is_empty() => {
            return Err(serde::de::Error::custom(
                "an empty list would let no failure restart; expected at least one verdict such as [\"oom_kill\"], or restart = 0 for no restarts",
            ));
        }
        toml::Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().ok_or_else(|| serde::de::Error::custom(EXPECTED)))
            .collect::<Result<Vec<_>, D::Error>>()?
            .join(","),
        _ => return Err(serde::de::Error::custom(EXPECTED)),
    };
    crate::options::parse_restart_on(&names)
        .map(|r| Some(r.0))
        .map_err(serde::de::Error::custom)
}

fn de_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let s = de_text_or_number(d, "a whole number such as 3")?;
    crate::options::parse_count(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_percent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = de_text_or_number(d, "a percentage such as 5 or \"2.5%\"")?;
    crate::options::parse_percent(&v)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const EXAMPLE: &str = include_str!("../../../config/watchdog.toml");

    use watchdog_testsupport::is_config_key as is_key;

    fn example_uncommented() -> String {
        watchdog_testsupport::example_uncommented(EXAMPLE)
    }

    #[test]
    fn example_config_documents_every_key_and_parses() {
        let text = example_uncommented();
        // A `[table]` is one key; the keys under it are its own.
        let mut in_table = false;
        let documented: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                if let Some(table) = l.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    in_table = true;
                    return Some(table);
                }
                l.split_once(" = ").map(|(k, _)| k).filter(|_| !in_table)
            })
            .filter(|k| is_key(k))
            .collect();
        assert_eq!(documented, KEYS, "config/watchdog.toml drifted from KEYS");
        let file = parse_file(&text, Path::new("config/watchdog.toml")).unwrap();
        for key in KEYS {
            assert!(file.is_set(key), "{key} is documented but not read");
        }
    }

    #[test]
    fn unknown_key_names_file_and_line() {
        let e = parse_file("lead = \"5s\"\nintervall = \"1s\"\n", Path::new("w.toml")).unwrap_err();
        assert!(
            e.starts_with("config file w.toml:2: unknown field `intervall`"),
            "{e}"
        );
    }

    #[test]
    fn bad_value_names_file_line_and_expectation() {
        let e = parse_file("\n\nlead = \"5x\"\n", Path::new("w.toml")).unwrap_err();
        assert!(
            e.starts_with("config file w.toml:3: lead: invalid duration '5x': expected"),
            "{e}"
        );
        let e = parse_file("mem_limit = \"12XB\"\n", Path::new("w.toml")).unwrap_err();
        assert!(e.contains("invalid size '12XB'"), "{e}");
        let e = parse_file("gpu = \"maybe\"\n", Path::new("w.toml")).unwrap_err();
        assert!(e.starts_with("config file w.toml:1:"), "{e}");
    }

    /// `interval = 5` named the line but not the key.
    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let e = parse_file("lead = \"5s\"\ninterval = 5\n", Path::new("w.toml")).unwrap_err();
        assert!(
            e.starts_with("config file w.toml:2: interval: invalid type: integer `5`"),
            "{e}"
        );
        let e = parse_file("dry_run = \"yes\"\n", Path::new("w.toml")).unwrap_err();
        assert!(
            e.starts_with("config file w.toml:1: dry_run: invalid type"),
            "{e}"
        );
        let e = parse_file("disks = [\n  \"/a\",\n  5,\n]\n", Path::new("w.toml")).unwrap_err();
        assert!(
            e.starts_with("config file w.toml:3: disks[1]: invalid type"),
            "{e}"
        );
    }

    #[test]
    fn a_value_that_fails_validation_names_its_line_and_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(&path, "lead = \"5s\"\n\nmem_limit = 0\n").unwrap();
        let flags = WatchOptions {
            config: Some(path.clone()),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert_eq!(
            e,
            format!(
                "config file {}:3: invalid mem_limit '0': expected a positive size such as 8GiB",
                path.display()
            )
        );
        // The flag's spelling stays for a value the flag gave.
        let flags = WatchOptions {
            mem_limit: Some(0),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert!(e.starts_with("invalid mem-limit '0'"), "{e}");
        assert_eq!(
            named_by_key(
                "invalid max-interval '1ms': x",
                "max_interval",
                "rule[2].watch.max_interval"
            ),
            "invalid rule[2].watch.max_interval '1ms': x"
        );
        std::fs::write(&path, "restart = 1\nrestart_on = []\n").unwrap();
        let flags = WatchOptions {
            config: Some(path.clone()),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert!(
            e.contains("restart_on: an empty list would let no failure restart"),
            "{e}"
        );
    }

    #[test]
    fn a_config_file_over_1_mib_is_refused_after_reading_1_mib() {
        let e = load_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            e,
            "cannot read config file '/dev/zero': it is a character device, not a regular file; expected a TOML file"
        );
        let dir = tempfile::tempdir().unwrap();
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo.toml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = load_file(&fifo).unwrap_err();
        assert!(e.contains("it is a FIFO, not a regular file"), "{e}");
        let path = dir.path().join("big.toml");
        let mut text = "lead = \"5s\"\n".to_string();
        text.push_str(&"#".repeat(MAX_CONFIG_BYTES as usize - text.len()));
        std::fs::write(&path, &text).unwrap();
        assert!(load_file(&path).is_ok(), "exactly 1 MiB is read");
        text.push('\n');
        std::fs::write(&path, &text).unwrap();
        assert!(load_file(&path).unwrap_err().contains("larger than 1 MiB"));
    }

    /// `--disk /proc` was watched as "limit 0 B": a filesystem with no size is refused when
    /// the settings are checked, and the root filesystem has one.
    #[test]
    fn a_disk_with_no_size_is_refused() {
        let flags = WatchOptions {
            disks: Some(vec!["/proc".into()]),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert_eq!(
            e,
            format!("cannot watch disk '/proc': {}", watchdog_types::fs::NO_SIZE)
        );
        assert_eq!(check_sized(Path::new("/")), Ok(()));
    }

    /// A quote in the path paired with the message's own quotes, so the clipping of
    /// quoted runs let 40,000 characters through.
    #[test]
    fn a_long_disk_path_with_a_quote_is_cut_to_80_characters() {
        let long = format!("/nonexistent/it's {}", "a ".repeat(20_000));
        let flags = WatchOptions {
            disks: Some(vec![long.clone().into()]),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..300]);
        assert!(
            e.starts_with("cannot watch disk '/nonexistent/it's a a"),
            "{e}"
        );
        assert!(e.contains("(40018 characters)"), "{e}");
        let flags = WatchOptions {
            events: Some(format!("{long}/e.jsonl").into()),
            ..Default::default()
        };
        let e = Settings::resolve(&flags).unwrap_err();
        assert!(e.len() < 400, "{} bytes", e.len());
    }

    #[test]
    fn a_huge_bad_value_in_the_config_is_quoted_to_80_characters() {
        let big = "9".repeat(500_000);
        for text in [
            format!("lead = \"{big}x\"\n"),
            format!("mem_limit = \"{big}x\"\n"),
            format!("dry_run = \"{big}\"\n"),
        ] {
            let e = parse_file(&text, Path::new("w.toml")).unwrap_err();
            assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..300]);
        }
    }

    /// Issue 18: `"interval" = 5` (a quoted key) was reported as `lead: invalid type`, the
    /// key on the line before; `interval.x = 1` named no key.
    #[test]
    fn a_bad_value_is_named_by_its_key_however_the_key_is_written() {
        let table: &[(&str, &str)] = &[
            (
                "lead = \"30s\"\n\"interval\" = 5\n",
                "config file w.toml:2: interval: invalid type: integer `5`, expected a duration such as \"5s\"",
            ),
            (
                "lead = \"30s\"\ninterval.x = 1\n",
                "config file w.toml:2: interval: invalid type: table, expected a duration such as \"5s\"",
            ),
            (
                "[interval]\nx = 1\n",
                "config file w.toml:1: interval: invalid type: table, expected a duration such as \"5s\"",
            ),
            (
                "lead = \"30s\"\nmem_limit = true\n",
                "config file w.toml:2: mem_limit: invalid type: boolean `true`, expected a size such as \"8GiB\" or a number of bytes",
            ),
            (
                "floor = [5]\n",
                "config file w.toml:1: floor: invalid type: array, expected a percentage such as 5 or \"2.5%\"",
            ),
        ];
        for (text, want) in table {
            let e = parse_file(text, Path::new("w.toml")).unwrap_err();
            assert_eq!(&e, want, "{text:?}");
        }
        // Numbers are still taken where a number means something.
        let c = parse_file(
            "mem_limit = 1024\nsignal = 12\nfloor = 2.5\n",
            Path::new("w.toml"),
        )
        .unwrap();
        assert_eq!(
            (c.mem_limit, c.signal, c.floor),
            (Some(1024), Some(12), Some(2.5))
        );
    }

    /// Issue 18: a `[[rule]]` without a name was reported as `state_dir: missing field
    /// `name``, the key on the line before. Errors in nested tables name the full path.
    #[test]
    fn an_error_in_a_nested_table_names_its_full_path() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Rule {
            #[allow(dead_code)]
            name: toml::Spanned<String>,
            #[allow(dead_code)]
            watch: Option<toml::Spanned<FileConfig>>,
        }
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Top {
            #[allow(dead_code)]
            state_dir: Option<String>,
            #[allow(dead_code)]
            rule: Vec<toml::Spanned<Rule>>,
        }
        let parse =
            |text: &str| parse_toml::<Top>(text, Path::new("d.toml"), "d.toml").unwrap_err();
        assert_eq!(
            parse("state_dir = \"/tmp\"\n[[rule]]\nwatch = {}\n"),
            "config file d.toml:2: rule[0]: missing field `name`"
        );
        assert_eq!(
            parse("[[rule]]\nname = \"a\"\n[[rule]]\nname = \"b\"\n[rule.watch]\nlead = 5\n"),
            "config file d.toml:6: rule[1].watch.lead: invalid type: integer `5`, expected a duration such as \"5s\""
        );
        let e = parse("[[rule]]\nname = \"a\"\n[rule.watch]\nleed = \"5s\"\n");
        assert!(
            e.starts_with(
                "config file d.toml:4: rule[0].watch: unknown field `leed`, expected one of"
            ),
            "{e}"
        );
        assert!(e.ends_with("; the keys are documented in d.toml"), "{e}");
        assert_eq!(
            parse("rule = 5\n"),
            "config file d.toml:1: rule: invalid type: integer `5`, expected an array"
        );
    }

    #[test]
    fn deadline_may_be_a_toml_datetime() {
        let c = parse_file("deadline = 2099-01-01T00:00:00Z\n", Path::new("w.toml")).unwrap();
        assert!(c.deadline.is_some());
    }

    /// The daemon's rules build their settings from a `[rule.watch]` table this way.
    #[test]
    fn settings_from_a_file_table_are_the_defaults_with_the_table_on_top() {
        let file = parse_file(
            "lead = \"45s\"\nrequest_file = \"/tmp/r.json\"\n",
            Path::new("w.toml"),
        )
        .unwrap();
        assert!(file.is_set("lead") && file.is_set("request_file"));
        assert!(!file.is_set("interval") && !file.is_set("no_such_key"));
        let host = Host::from_env();
        let s = Settings::from_file(host.clone(), &file);
        assert_eq!(s.lead, Duration::from_secs(45));
        assert_eq!(s.request_file.as_deref(), Some(Path::new("/tmp/r.json")));
        let resolved = Settings::resolve(&WatchOptions::default()).unwrap();
        assert_eq!(s.interval, resolved.interval);
        assert_eq!(s.hook_timeout, resolved.hook_timeout);
        assert_eq!(s.host, host);
        assert!(s.validate().is_ok());
    }

    #[test]
    fn key_lines_from_an_offset_and_located_messages() {
        let text = "lead = \"1s\"\n[t]\nlead = \"2s\"\n";
        assert_eq!(key_line_from(text, 0, "lead"), Some(1));
        assert_eq!(
            key_line_from(text, text.find("[t]").unwrap(), "lead"),
            Some(3)
        );
        assert_eq!(key_line_from(text, text.len(), "lead"), None);
        assert_eq!(key_line_from(text, 9999, "lead"), None);
        assert_eq!(
            located(text, Path::new("d.toml"), text.find("[t]").unwrap(), "bad"),
            "config file d.toml:2: bad"
        );
    }

    #[test]
    fn max_interval_defaults_to_1s_or_the_interval_and_may_not_be_shorter_than_it() {
        let mut s = Settings::resolve(&WatchOptions::default()).unwrap();
        assert_eq!(s.max_interval(), Duration::from_secs(1));
        s.interval = Duration::from_secs(5);
        assert_eq!(s.max_interval(), Duration::from_secs(5));
        assert!(s.validate().is_ok());
        s.max_interval = Some(Duration::from_secs(2));
        let (key, msg) = s.validate().unwrap_err();
        assert_eq!(key, "max_interval");
        assert_eq!(
            msg,
            "invalid max-interval '2.0s': expected at least the interval (5.0s)"
        );
        s.max_interval = Some(Duration::from_secs(5));
        assert!(s.validate().is_ok());
        assert_eq!(s.max_interval(), Duration::from_secs(5));
    }

    #[test]
    fn flags_override_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(
            &path,
            "lead = \"5s\"\ninterval = \"50ms\"\nsignal = \"USR2\"\n",
        )
        .unwrap();
        let flags = WatchOptions {
            config: Some(path),
            lead: Some(Duration::from_secs(9)),
            ..Default::default()
        };
        let s = Settings::resolve(&flags).unwrap();
        assert_eq!(s.lead, Duration::from_secs(9));
        assert_eq!(s.interval, Duration::from_millis(50));
        assert_eq!(s.signal, 12, "SIGUSR2");
    }

    #[test]
    fn restart_keys_from_a_list_a_comma_string_or_the_defaults() {
        let file = |text: &str| parse_file(text, Path::new("w.toml"));
        let host = Host::from_env();
        let s = Settings::from_file(host.clone(), &FileConfig::default());
        assert_eq!((s.restart, s.restart_per_hour), (0, 6));
        assert_eq!(s.restart_on, options::DEFAULT_RESTART_ON);
        for text in [
            "restart = 3\nrestart_on = [\"oom_kill\", \"crash\"]\n",
            "restart = 3\nrestart_on = \"oom_kill, crash\"\n",
        ] {
            let s = Settings::from_file(host.clone(), &file(text).unwrap());
            assert_eq!(s.restart, 3);
            assert_eq!(s.restart_on, [VerdictKind::OomKill, VerdictKind::Crash]);
        }
        let e = file("restart_on = [\"runtime_limit\"]\n").unwrap_err();
        assert!(
            e.contains("w.toml:1") && e.contains("invalid restart-on 'runtime_limit'"),
            "{e}"
        );
        let e = file("restart_on = [\"oom\"]\n").unwrap_err();
        assert!(e.contains("expected a comma list of oom_kill"), "{e}");
        let e = file("restart = -1\n").unwrap_err();
        assert!(e.contains("w.toml:1"), "{e}");
        // Said as the flags say it, not as serde's "expected u32"; a count in quotes is
        // the flag's text.
        for (text, said) in [
            (
                "restart = -1\n",
                "invalid count '-1': expected a whole number such as 3",
            ),
            (
                "restart = 3.5\n",
                "invalid count '3.5': expected a whole number such as 3",
            ),
            (
                "restart_per_hour = 99999999999\n",
                "invalid count '99999999999'",
            ),
            ("restart = true\n", "expected a whole number such as 3"),
            ("restart_on = [1]\n", "expected a list of verdict names"),
        ] {
            let e = file(text).unwrap_err();
            assert!(e.contains(said) && !e.contains("u32"), "{text}: {e}");
        }
        assert_eq!(file("restart = \"3\"\n").unwrap().restart, Some(3));
    }
}
