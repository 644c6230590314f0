//! Every watch setting, declared once. One row of the table at the bottom gives a setting's
//! config key and type, its default, how the file's value is read, and its flag as clap
//! declares it; [`settings!`] turns the table into the flags ([`WatchOptions`]), the file
//! ([`FileConfig`], [`KEYS`], [`FileConfig::is_set`]), the resolved [`Settings`] and the
//! merge of the three (defaults < file < flags).
//!
//! To add a setting: add its row where `config/watchdog.toml` documents it (the file's keys
//! are in table order, and so are the flags in `--help`, between `--config` and `-v`, `-q`),
//! then document it in
//! `config/watchdog.toml` and `docs/configuration.md`; tests fail until both list it. Checks
//! of a value that parses but cannot be used go in [`Settings::validate`].

use std::path::PathBuf;
use std::time::Duration;

use watchdog_engine::{EngineSettings, FillRates};
use watchdog_types::VerdictKind;

use crate::Host;
use crate::options::{self, GpuMode, LogFormat, RestartOn, Utf8};
use crate::options::{parse_count, parse_deadline, parse_percent, parse_restart_on};

/// Generates the settings' types from the table of rows below. A row:
///
/// ```text
/// /// What the setting is (the doc of its `Settings` field).
/// key: Type, default EXPR, file "de_fn";
/// flag {
///     /// The flag's --help text.
///     #[arg(long, value_name = "DUR", value_parser = ...)]
///     key: Option<Type> => |given| ...
/// }
/// ```
///
/// - `key` is the config key and the `Settings` field; the file's value is an
///   `Option<Type>`, read by `de_fn` when given (a `fn(D) -> Result<Option<Type>, D::Error>`),
///   else by `Type`'s own `Deserialize`.
/// - `default EXPR`: the value when neither file nor flag sets it, and the field is a
///   `Type`; without it the field is an `Option<Type>`, unset unless `unset EXPR` (an
///   `Option<Type>`) says where else to look.
/// - `flag { .. }` is the field of [`WatchOptions`] as clap takes it (`global = true` is
///   added). When it is not an `Option<Type>`, `=> f` turns it into one (`None`: not given).
///   A setting without a flag is set in the file only.
macro_rules! settings {
    ($(
        $(#[doc = $doc:tt])+
        $key:ident: $ty:ty $(, default $default:expr)? $(, unset $unset:expr)? $(, file $de:tt)?;
        $(flag {
            $(#[doc = $help:tt])*
            #[arg($($arg:tt)*)]
            $flag:ident: $flag_ty:ty $(=> $given:expr)? $(,)?
        })?
    )*) => {
        /// Every key the config file accepts, in the order `config/watchdog.toml` documents them.
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// The config file as written; every field optional, unknown keys rejected. The
        /// daemon's rules deserialize their `[rule.watch]` tables into it too.
        #[derive(Debug, Default, Clone, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct FileConfig {
            $(
                $(#[serde(deserialize_with = $de)])?
                pub(crate) $key: Option<$ty>,
            )*
        }

        impl FileConfig {
            /// Whether `key` (a config key such as `"request_file"`) is set; false for
            /// unknown keys.
            pub fn is_set(&self, key: &str) -> bool {
                match key {
                    $(stringify!($key) => self.$key.is_some(),)*
                    _ => false,
                }
            }
        }

        /// Options shared by `--pid` and `run`; every one but `--config`, `-v` and `-q` can
        /// also be set in the config file.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct WatchOptions {
            /// TOML config file with the same settings (flags override it).
            #[arg(long, value_name = "FILE", global = true)]
            pub config: Option<PathBuf>,
            $($(
                $(#[doc = $help])*
                #[arg($($arg)*)]
                #[arg(global = true)]
                pub $flag: $flag_ty,
            )?)*
            /// Log more (-v: debug, -vv: trace).
            #[arg(short, long, action = clap::ArgAction::Count, global = true)]
            pub verbose: u8,
            /// Log only warnings and errors.
            #[arg(short, long, global = true)]
            pub quiet: bool,
        }

        impl WatchOptions {
            /// The id (field name) of config key `key`'s flag; `None` for a key with no flag.
            pub fn flag_id(key: &str) -> Option<&'static str> {
                match key {
                    $($(stringify!($key) => Some(stringify!($flag)),)?)*
                    _ => None,
                }
            }

            /// Whether the flag of config key `key` was given (false for a key with no flag).
            pub fn gives(&self, key: &str) -> bool {
                match key {
                    $($(stringify!($key) => given!(self.$flag.clone() $(, $given)?).is_some(),)?)*
                    _ => false,
                }
            }
        }

        /// The settings in force for one watchdog, after defaults, file and flags.
        #[derive(Debug, Clone)]
        pub struct Settings {
            /// Where the host's kernel interfaces are, and what the environment said.
            pub host: Host,
            $(
                $(#[doc = $doc])+
                pub $key: setting_type!($ty $(, $default)?),
            )*
            /// Log verbosity: -1 quiet, 0 info, 1 debug, 2 trace.
            pub verbosity: i8,
            /// How often the tree's RSS is summed when there is no `mem_limit` (it is then
            /// recorded and shown, never alerted on); `None`: every tick. Only the service
            /// sets it.
            pub tree_interval: Option<Duration>,
        }

        impl Settings {
            /// Defaults, then `file`, then `flags`.
            pub(crate) fn merge(host: Host, flags: &WatchOptions, file: FileConfig) -> Settings {
                Settings {
                    host,
                    $(
                        $key: given!($(flags.$flag.clone() $(, $given)?)?)
                            .or(file.$key)
                            $(.or_else(|| $unset))?
                            $(.unwrap_or_else(|| $default))?,
                    )*
                    verbosity: if flags.quiet {
                        -1
                    } else {
                        flags.verbose.min(2) as i8
                    },
                    tree_interval: None,
                }
            }
        }
    };
}

/// A flag's value as an `Option` of its setting's type: as it is, or through the row's `=> f`;
/// `None` for a setting with no flag.
macro_rules! given {
    () => {
        None
    };
    ($value:expr) => {
        $value
    };
    ($value:expr, $given:expr) => {
        ($given)($value)
    };
}

/// A setting's field type: `Type` with a default, else `Option<Type>`.
macro_rules! setting_type {
    ($ty:ty, $default:expr) => { $ty };
    ($ty:ty) => { Option<$ty> };
}

/// The engine's defaults are the only ones: a live watch and `replay` share them.
fn engine() -> EngineSettings {
    EngineSettings::default()
}

settings! {
    /// Sampling period.
    interval: Duration, default Duration::from_secs_f64(engine().interval_s), file "crate::de_duration";
    flag {
        /// Sampling period [default: 100ms; from 1ms to 60s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        interval: Option<Duration>
    }

    /// Longest interval between two samples of a resource far from its limit; `None`: 1 s,
    /// or the interval when that is longer (see [`Settings::max_interval`]).
    max_interval: Duration, file "crate::de_duration";
    flag {
        /// Sample a resource far from its limit as seldom as this, at least every interval and
        /// at most a quarter of a predictor bucket (lead/32) [default: 1s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        max_interval: Option<Duration>
    }

    /// Lead time before predicted exhaustion.
    lead: Duration, default Duration::from_secs_f64(engine().lead_s), file "crate::de_duration";
    flag {
        /// Alert when the predicted time to exhaustion falls below this [default: 30s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        lead: Option<Duration>
    }

    /// Signal number to send.
    signal: i32, default engine().signal, file "crate::de_signal";
    flag {
        /// Signal sent to the processes that catch it; not a crash signal such as SEGV or ABRT
        /// [default: SIGUSR1].
        #[arg(long, value_name = "SIG", value_parser = Utf8(options::parse_signal))]
        signal: Option<i32>
    }

    /// Budget for the tree's RSS.
    mem_limit: u64, file "crate::de_size";
    flag {
        /// Memory budget for the watched process tree's total RSS (e.g. 512MiB, 2GiB, 1.5G).
        #[arg(long, value_name = "SIZE", value_parser = Utf8(options::parse_size))]
        mem_limit: Option<u64>
    }

    /// Filesystems to watch; empty means the defaults.
    disks: Vec<PathBuf>, default Vec::new();
    flag {
        /// Watch free space and inodes of the filesystem holding PATH (repeatable)
        /// [default: the target's working directory, plus /dev/shm when it is a tmpfs].
        #[arg(long = "disk", value_name = "PATH")]
        disks: Option<Vec<PathBuf>>
    }

    /// Runtime limit from the target's start.
    max_runtime: Duration, file "crate::de_duration";
    flag {
        /// Runtime limit, measured from the target's own start time.
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        max_runtime: Option<Duration>
    }

    /// Wall-clock deadline.
    deadline: jiff::Timestamp, file "crate::de_deadline";
    flag {
        /// Wall-clock deadline (RFC 3339, e.g. 2026-11-23T08:00:00Z).
        #[arg(long, value_name = "RFC3339", value_parser = Utf8(parse_deadline))]
        deadline: Option<jiff::Timestamp>
    }

    /// Where the request file goes; `None` means the default.
    request_file: PathBuf;
    flag {
        /// JSON file written on every alert [default: $XDG_RUNTIME_DIR/watchdog-PID.request.json,
        /// else watchdog-PID.request.json in the target's working directory].
        #[arg(long, value_name = "PATH")]
        request_file: Option<PathBuf>
    }

    /// Where events are appended.
    events: PathBuf;
    flag {
        /// Append one JSON line per event (start, limit, alert, ack, exit) to PATH.
        #[arg(long, value_name = "PATH")]
        events: Option<PathBuf>
    }

    /// Hook run on every alert.
    on_alert: String;
    flag {
        /// Run CMD through `sh -c` on every alert, with WATCHDOG_* variables describing it.
        #[arg(long, value_name = "CMD", value_parser = Utf8(options::text))]
        on_alert: Option<String>
    }

    /// How long a hook may run before it is ended.
    hook_timeout: Duration, default watchdog_types::defaults::DEFAULT_HOOK_TIMEOUT, file "crate::de_duration";
    flag {
        /// How long an --on-alert hook may run before its process group is ended (SIGTERM,
        /// then SIGKILL 2 s later) [default: 60s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        hook_timeout: Option<Duration>
    }

    /// Where the flight recording goes; `None` means the state directory.
    record: PathBuf;
    flag {
        /// Where the flight recording is written (on every alert, at exit, on SIGUSR2)
        /// [default: $XDG_STATE_HOME/watchdog/ or ~/.local/state/watchdog/,
        /// watchdog-PID-YYYYMMDDTHHMMSSZ.recording.csv; the newest 50 kept].
        #[arg(long, value_name = "PATH")]
        record: Option<PathBuf>
    }

    /// History the flight recorder keeps.
    record_window: Duration, default Duration::from_secs(600), file "crate::de_duration";
    flag {
        /// How much history the flight recorder keeps [default: 10m].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        record_window: Option<Duration>
    }

    /// Send and write nothing.
    dry_run: bool, default false;
    flag {
        /// Sample, predict and log what would be done; send and write nothing.
        #[arg(long)]
        dry_run: bool => |on: bool| on.then_some(true)
    }

    /// GPU watching mode.
    gpu: GpuMode, default GpuMode::Auto;
    flag {
        /// Watch GPU memory through NVML: auto, off or required [default: auto].
        #[arg(long, value_name = "MODE")]
        gpu: Option<GpuMode>
    }

    /// A specific libnvidia-ml.so to load (no flag: `WATCHDOG_NVML_LIB` in the environment).
    nvml_library: PathBuf, unset crate::env_path("WATCHDOG_NVML_LIB");

    /// Headroom floor in percent of the limit.
    floor: f64, default engine().floor_percent, file "crate::de_percent";
    flag {
        /// Alert whatever the trend when headroom falls below this percentage of a limit [default: 5].
        #[arg(long, value_name = "PERCENT", value_parser = Utf8(parse_percent))]
        floor: Option<f64>
    }

    /// Desktop notifications on alerts.
    notify: bool, default true;
    flag {
        /// Do not send desktop notifications.
        #[arg(long)]
        no_notify: bool => |off: bool| off.then_some(false)
    }

    /// Live status line on a terminal.
    status: bool, default true;
    flag {
        /// Never show the live status line, even on a terminal.
        #[arg(long)]
        no_status: bool => |off: bool| off.then_some(false)
    }

    /// Log format.
    log_format: LogFormat, default LogFormat::Text;
    flag {
        /// Log format on stderr [default: text].
        #[arg(long, value_name = "FORMAT")]
        log_format: Option<LogFormat>
    }

    /// How many times `run` starts the command again after a failure (0: never).
    restart: u32, default 0, file "crate::de_count";
    flag {
        /// `run` only: start the command again up to N times when it fails with a verdict of
        /// --restart-on, resuming from its last acknowledged checkpoint (see docs/restart.md)
        /// [default: 0].
        #[arg(long, value_name = "N", value_parser = Utf8(parse_count))]
        restart: Option<u32>
    }

    /// The verdicts that restart the command.
    restart_on: Vec<VerdictKind>, default options::DEFAULT_RESTART_ON.to_vec(), file "crate::de_restart_on";
    flag {
        /// The verdicts that restart: a comma list of oom_kill, gpu_oom, disk_full, crash,
        /// signal, exited [default: oom_kill,gpu_oom,disk_full].
        #[arg(long, value_name = "LIST", value_parser = Utf8(parse_restart_on))]
        restart_on: Option<RestartOn> => |list: Option<RestartOn>| list.map(|r| r.0)
    }

    /// At most this many restarts in any hour.
    restart_per_hour: u32, default options::DEFAULT_RESTART_PER_HOUR, file "crate::de_count";
    flag {
        /// At most N restarts in any hour: a run that fails faster is left stopped [default: 6].
        #[arg(long, value_name = "N", value_parser = Utf8(parse_count))]
        restart_per_hour: Option<u32>
    }

    /// How often the SLURM controller is asked for the job's end.
    slurm_poll: Duration, default Duration::from_secs(300), file "crate::de_duration";
    flag {
        /// In a SLURM job without SLURM_JOB_END_TIME, ask the controller for the job's end
        /// this often (one squeue of that job; at least 30s) [default: 5m].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        slurm_poll: Option<Duration>
    }

    /// Requeue the SLURM job after the save before its end.
    requeue: bool, default false;
    flag {
        /// `run` in a SLURM batch job only: once the save asked before the job's end is
        /// acknowledged, requeue the job (scontrol requeue), once per allocation (docs/slurm.md).
        #[arg(long)]
        requeue: bool => |on: bool| on.then_some(true)
    }

    /// Where the record of acknowledged checkpoints is kept; `None`: the run's working
    /// directory's `.watchdog-checkpoints.json`.
    checkpoint_record: PathBuf;
    flag {
        /// The record of acknowledged checkpoints that outlives the job
        /// [default: .watchdog-checkpoints.json in the run's working directory].
        #[arg(long, value_name = "PATH")]
        checkpoint_record: Option<PathBuf>
    }

    /// How long `run` holds a SIGTERM while the save it asks for is made (0: none).
    term_grace: Duration, default Duration::from_secs(5), file "crate::de_duration";
    flag {
        /// `run`: on SIGTERM, first ask the run to save, and pass SIGTERM on when the save is
        /// acknowledged or after DUR (0: at once; docs/notices.md) [default: 5s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        term_grace: Option<Duration>
    }

    /// Which cloud's preemption notice is asked: auto, gce, aws, azure or off.
    notice: String, default "auto".to_string();
    flag {
        /// Ask the cloud's metadata server for a preemption notice: auto (the provider the
        /// machine's DMI names, else none), gce, aws, azure or off (docs/notices.md) [default: auto].
        #[arg(long, value_name = "MODE", value_parser = Utf8(options::text))]
        notice: Option<String>
    }

    /// The metadata server's base URL; `None`: the provider's own.
    notice_endpoint: String;
    flag {
        /// The metadata server's base URL, e.g. http://127.0.0.1:8080 [default: the provider's,
        /// http://169.254.169.254].
        #[arg(long, value_name = "URL", value_parser = Utf8(options::text))]
        notice_endpoint: Option<String>
    }

    /// How often the preemption notice is asked.
    notice_interval: Duration, default watchdog_notice::DEFAULT_INTERVAL, file "crate::de_duration";
    flag {
        /// How often the cloud's preemption notice is asked [default: 5s].
        #[arg(long, value_name = "DUR", value_parser = Utf8(options::parse_duration))]
        notice_interval: Option<Duration>
    }

    /// The fastest each kind of resource can fill (the `[fill_rate]` table, a size a
    /// second): at rest a resource is read no later than its headroom to the alert line
    /// would last at that rate. Last: a TOML table ends the file's top-level keys.
    fill_rate: FillRates, default FillRates::DEFAULT, file "crate::fill_rate::de_fill_rate";
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::{CommandFactory, Parser};

    /// The flags alone, as the binary flattens them into its command line.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        options: WatchOptions,
    }

    fn flags(args: &[&str]) -> WatchOptions {
        Flags::try_parse_from(std::iter::once("watchdog").chain(args.iter().copied()))
            .unwrap()
            .options
    }

    fn file(text: &str) -> FileConfig {
        crate::parse_file(text, std::path::Path::new("w.toml")).unwrap()
    }

    fn merged(args: &[&str], text: &str) -> Settings {
        Settings::merge(Host::from_env(), &flags(args), file(text))
    }

    /// A value each flag takes, by its value name.
    fn sample(value_name: &str) -> &'static str {
        match value_name {
            "DUR" => "7s",
            "SIG" => "USR2",
            "SIZE" => "1GiB",
            "PATH" => "/tmp",
            "RFC3339" => "2099-01-01T00:00:00Z",
            "CMD" => "true",
            "MODE" => "off",
            "FORMAT" => "json",
            "PERCENT" => "7",
            "N" => "2",
            "LIST" => "crash",
            "URL" => "http://127.0.0.1:9",
            other => panic!("no sample value for a flag taking {other}: add one here"),
        }
    }

    /// `gives` and `flag_id` know every flag of the table by its config key.
    #[test]
    fn every_flag_is_known_by_its_config_key() {
        let command = Flags::command();
        let mut args: Vec<String> = Vec::new();
        for key in KEYS {
            let Some(id) = WatchOptions::flag_id(key) else {
                assert!(
                    ["nvml_library", "fill_rate"].contains(key),
                    "{key} has no flag"
                );
                continue;
            };
            let arg = command
                .get_arguments()
                .find(|a| a.get_id().as_str() == id)
                .unwrap();
            args.push(format!("--{}", arg.get_long().unwrap()));
            if arg.get_action().takes_values() {
                let name = arg.get_value_names().unwrap()[0].as_str();
                args.push(sample(name).to_string());
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let given = flags(&args);
        let none = WatchOptions::default();
        for key in KEYS {
            let has_flag = WatchOptions::flag_id(key).is_some();
            assert_eq!(given.gives(key), has_flag, "{key}");
            assert!(!none.gives(key), "{key}");
        }
        assert!(!given.gives("no_such_key"));
    }

    /// The rows whose flag is not an `Option` of the setting: defaults < file < flags.
    #[test]
    fn flags_override_the_file_and_the_file_the_defaults() {
        let defaults = merged(&[], "");
        assert!(!defaults.dry_run && defaults.notify && defaults.status);
        assert!(defaults.disks.is_empty());
        assert_eq!(defaults.restart_on, options::DEFAULT_RESTART_ON);
        assert_eq!(defaults.mem_limit, None);
        assert_eq!(
            defaults.term_grace,
            Duration::from_secs(5),
            "docs/notices.md"
        );

        let text = "dry_run = false\nnotify = true\nstatus = false\ndisks = [\"/\"]\n\
                    restart_on = [\"crash\"]\nmem_limit = \"1GiB\"\n";
        let from_file = merged(&[], text);
        assert!(!from_file.dry_run && from_file.notify && !from_file.status);
        assert_eq!(from_file.disks, [PathBuf::from("/")]);
        assert_eq!(from_file.restart_on, [VerdictKind::Crash]);
        assert_eq!(from_file.mem_limit, Some(1 << 30));

        let s = merged(
            &[
                "--dry-run",
                "--no-notify",
                "--disk",
                "/tmp",
                "--disk",
                "/dev/shm",
                "--restart-on",
                "oom_kill,signal",
                "--mem-limit",
                "2GiB",
            ],
            text,
        );
        assert!(s.dry_run && !s.notify && !s.status);
        assert_eq!(s.disks, [PathBuf::from("/tmp"), PathBuf::from("/dev/shm")]);
        assert_eq!(s.restart_on, [VerdictKind::OomKill, VerdictKind::Signal]);
        assert_eq!(s.mem_limit, Some(2 << 30));
        // A flag that can only turn a setting on (or off) leaves the file's value otherwise.
        assert!(merged(&[], "dry_run = true\n").dry_run);
        assert!(!merged(&[], "notify = false\n").notify);
        assert_eq!(
            merged(&[], "nvml_library = \"/x.so\"\n").nvml_library,
            Some(PathBuf::from("/x.so"))
        );
    }

    /// The options table of docs/configuration.md lists every key in the table's order,
    /// each with its flag.
    #[test]
    fn the_configuration_doc_lists_every_key_with_its_flag() {
        let doc = include_str!("../../../docs/configuration.md");
        let command = Flags::command();
        let rows: Vec<(&str, &str)> = doc
            .lines()
            .skip_while(|l| *l != "## Options")
            .skip(1)
            .take_while(|l| !l.starts_with("## "))
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let key = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((*cells.get(1)?, key))
            })
            .collect();
        let keys: Vec<&str> = rows.iter().map(|(_, key)| *key).collect();
        assert_eq!(keys, KEYS, "docs/configuration.md drifted from KEYS");
        for (flag, key) in rows {
            let long = WatchOptions::flag_id(key).map(|id| {
                let arg = command.get_arguments().find(|a| a.get_id() == id).unwrap();
                format!("`--{}", arg.get_long().unwrap())
            });
            match long {
                Some(long) => assert!(flag.starts_with(&long), "{key}: {flag} is not {long}"),
                None => assert!(!flag.starts_with("`--"), "{key} has no flag: {flag}"),
            }
        }
    }
}
