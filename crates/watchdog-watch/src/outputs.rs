//! The files the watchdog writes, decided and checked once at start: the request file,
//! its `.ack` (written by the client, removed by the watchdog at start), the events file
//! and the flight recording. A watchdog may signal processes and write into other
//! people's directories, so before anything runs:
//!
//! - every output refuses a symbolic link and any existing file that is not of its own
//!   kind (an old request, an ack, JSON lines of watchdog events or an empty file, a
//!   recording by its `# watchdog recording v1` header or an empty file);
//! - no output goes on procfs, sysfs or another of the kernel's pseudo-filesystems
//!   ([`watchdog_types::fs::kernel_filesystem`]), where a written line is lost or refused;
//! - no two outputs share a path (the canonical directory plus the name, or the same
//!   inode), the derived `.ack` and the default recording included;
//! - every output's directory is checked writable by creating and removing the very
//!   temporary name its atomic write uses (so a name too long for it fails at start);
//! - a target whose working directory was deleted gets the private default location
//!   instead of a directory that merely has the name `/proc/PID/cwd` shows.
//!
//! The default recording goes to the state directory (`$XDG_STATE_HOME/watchdog`, else
//! `~/.local/state/watchdog`, created 0700) as `watchdog-PID-YYYYMMDDTHHMMSSZ.recording.csv`,
//! reserved with `O_EXCL` so two watchdogs never share one, and the directory is pruned
//! to the newest [`KEEP_RECORDINGS`] files and [`KEEP_RECORDING_BYTES`] at start and exit
//! (only files with the recording header: a look-alike name of the user's is kept).
//! A write that fails later is an error line and an `output_error` event
//! ([`write_failed`]), never a silent loss.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use watchdog_alerter::request::{ack_path, is_request_file, read_ack};
use watchdog_types::fs::{open_plain, parent_dir};
use watchdog_types::quote::quote_path;

use crate::Failure;
use watchdog_config::Host;
use watchdog_config::Settings;

/// Most default recordings kept in the state directory.
pub const KEEP_RECORDINGS: usize = 50;
/// Most bytes of default recordings kept in the state directory (200 MiB).
pub const KEEP_RECORDING_BYTES: u64 = 200 << 20;
/// The first line of every recording (docs/recording.md).
const RECORDING_MAGIC: &[u8] = b"# watchdog recording v1\n";
/// Longest first line read to recognise an events file.
const MAX_EVENT_LINE: u64 = 64 * 1024;

/// Where this watch writes, checked.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// The request file.
    pub request_file: PathBuf,
    /// The flight recording; `None` in a dry run without `--record`.
    pub recording: Option<PathBuf>,
    /// The state directory when the recording is the default one there (pruned at exit).
    pub state_dir: Option<PathBuf>,
}

/// One output's role, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Request,
    Ack,
    Events,
    Recording,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Request => "the request file",
            Kind::Ack => "the acknowledgment file (the request file + .ack)",
            Kind::Events => "the events file",
            Kind::Recording => "the recording",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Request => "a new path or an old watchdog request file",
            Kind::Ack => "a new path or an old watchdog acknowledgment",
            Kind::Events => "a new path, an empty file or a watchdog events file to append to",
            Kind::Recording => "a new path, an empty file or an old watchdog recording",
        }
    }
}

impl Outputs {
    /// Decides and checks every output. `name_pid` names the default files
    /// (`watchdog-PID.*`: the target's PID with `--pid`, the watchdog's own with `run`);
    /// `cwd` is the target's working directory when it still exists.
    pub fn plan(
        settings: &Settings,
        name_pid: u32,
        cwd: Option<&Path>,
    ) -> Result<Outputs, Failure> {
        let request_file = match &settings.request_file {
            Some(p) => p.clone(),
            None => default_request_file(&settings.host, name_pid, cwd)?,
        };
        let state_dir = match (&settings.record, settings.dry_run) {
            (None, false) => Some(state_dir(&settings.host).map_err(Failure::Usage)?),
            _ => None,
        };
        let default_recording = state_dir
            .as_ref()
            .map(|dir| dir.join(recording_name(name_pid, 0)));
        let recording = settings.record.clone().or(default_recording);
        let ack = ack_path(&request_file);
        let mut all = vec![
            (Kind::Request, request_file.as_path()),
            (Kind::Ack, ack.as_path()),
        ];
        if let Some(events) = &settings.events {
            all.push((Kind::Events, events));
        }
        if let Some(rec) = &recording {
            all.push((Kind::Recording, rec));
        }
        for (kind, path) in &all {
            check_kind(*kind, path).map_err(|why| refuse(*kind, path, &why))?;
        }
        check_distinct(&all)?;
        if !settings.dry_run {
            probe_dir(Kind::Request, &request_file)?;
        }
        let recording = match (&settings.record, &state_dir) {
            (Some(rec), _) => {
                probe_dir(Kind::Recording, rec)?;
                Some(rec.clone())
            }
            (None, Some(dir)) => {
                let rec = reserve_recording(dir, name_pid)?;
                prune_recordings(dir, &rec);
                Some(rec)
            }
            (None, None) => None,
        };
        Ok(Outputs {
            request_file,
            recording,
            state_dir,
        })
    }

    /// The outputs of a run the service watches: its request file (in the user's own
    /// directory, made by the service) and a recording reserved in the service's
    /// `state_dir` (root's; pruned like the single-run default).
    pub fn for_service(
        request_file: PathBuf,
        pid: u32,
        state_dir: &Path,
        dry_run: bool,
    ) -> Result<Outputs, Failure> {
        if dry_run {
            return Ok(Outputs {
                request_file,
                recording: None,
                state_dir: None,
            });
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|e| {
                Failure::Runtime(format!(
                    "cannot make the state directory {}: {e}",
                    state_dir.display()
                ))
            })?;
        let rec = reserve_recording(state_dir, pid)?;
        prune_recordings(state_dir, &rec);
        Ok(Outputs {
            request_file,
            recording: Some(rec),
            state_dir: Some(state_dir.to_path_buf()),
        })
    }

    /// Prunes the state directory (at exit, after the last recording was written).
    pub fn prune(&self) {
        if let (Some(dir), Some(rec)) = (&self.state_dir, &self.recording) {
            prune_recordings(dir, rec);
        }
    }
}

/// The working directory of `pid` if it still exists ([`ProcRoot::live_cwd`]).
///
/// [`ProcRoot::live_cwd`]: watchdog_procfs::ProcRoot::live_cwd
pub fn live_cwd(host: &Host, pid: u32) -> Option<PathBuf> {
    host.proc.live_cwd(pid)
}

/// The request file's default place: `$XDG_RUNTIME_DIR` (a tmpfs that a full data disk
/// cannot block) when set, else the target's working directory, else (deleted or
/// unreadable) the state directory.
fn default_request_file(host: &Host, pid: u32, cwd: Option<&Path>) -> Result<PathBuf, Failure> {
    let name = format!("watchdog-{pid}.request.json");
    match &host.runtime_dir {
        Some(dir) if dir.is_dir() => Ok(dir.join(name)),
        _ => match cwd {
            Some(dir) => Ok(dir.join(name)),
            None => Ok(state_dir(host).map_err(Failure::Usage)?.join(name)),
        },
    }
}

/// The watchdog's state directory, created (0700) when missing:
/// `$XDG_STATE_HOME/watchdog`, else `$HOME/.local/state/watchdog`.
pub fn state_dir(host: &Host) -> Result<PathBuf, String> {
    let base = host.state_home.clone().ok_or_else(|| {
            "cannot find the state directory for the default recording: neither XDG_STATE_HOME nor HOME is set to an absolute path; expected one of them, or --record PATH".to_string()
        })?;
    let dir = base.join("watchdog");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            format!(
                "cannot create the state directory '{}' for the default recording: {e}; expected a writable $XDG_STATE_HOME or home directory, or --record PATH",
                dir.display()
            )
        })?;
    Ok(dir)
}

/// `watchdog-PID-YYYYMMDDTHHMMSSZ[-N].recording.csv`.
fn recording_name(pid: u32, n: u32) -> String {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
    if n == 0 {
        format!("watchdog-{pid}-{stamp}.recording.csv")
    } else {
        format!("watchdog-{pid}-{stamp}-{n}.recording.csv")
    }
}

/// Creates this run's recording in `dir` under a name no other watchdog holds
/// (`O_EXCL`), with the recording header, so the name is taken and the directory
/// proved writable before the target starts.
fn reserve_recording(dir: &Path, pid: u32) -> Result<PathBuf, Failure> {
    let cannot = |e: std::io::Error| {
        Failure::Usage(format!(
            "cannot write the recording in '{}': {e}; expected a writable directory, or --record PATH",
            dir.display()
        ))
    };
    let mut last_err = None;
    for n in 0..100 {
        let path = dir.join(recording_name(pid, n));
        match create_new_private(&path) {
            Ok(mut f) => return f.write_all(RECORDING_MAGIC).map(|()| path).map_err(cannot),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(cannot(e)),
        }
    }
    Err(Failure::Usage(format!(
        "cannot find a free recording name in '{}': {}; expected fewer watchdogs starting at once",
        dir.display(),
        last_err.map_or_else(String::new, |e| e.to_string())
    )))
}

/// Removes the oldest default recordings in `dir` beyond [`KEEP_RECORDINGS`] files or
/// [`KEEP_RECORDING_BYTES`], never `keep` (this run's) and never anything but a regular
/// file named `watchdog-*.recording.csv` that starts with the recording header.
pub fn prune_recordings(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("watchdog-") && name.ends_with(".recording.csv")
        })
        .filter_map(|e| {
            let meta = e.metadata().ok()?; // does not follow a symlink
            // Only what the watchdog wrote: a user's file with a look-alike name stays.
            if !meta.is_file() || !is_recording_file(&e.path()) {
                return None;
            }
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    // Newest first; this run's recording counts first whatever its time.
    found.sort_by(|a, b| (b.2 == keep).cmp(&(a.2 == keep)).then(b.0.cmp(&a.0)));
    let (mut count, mut bytes, mut removed) = (0usize, 0u64, 0usize);
    for (_, len, path) in found {
        count += 1;
        bytes = bytes.saturating_add(len);
        if path == keep || (count <= KEEP_RECORDINGS && bytes <= KEEP_RECORDING_BYTES) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) => tracing::debug!("cannot remove old recording {}: {e}", path.display()),
        }
    }
    if removed > 0 {
        tracing::debug!(
            "removed {removed} old recording(s) from {} (keeping {KEEP_RECORDINGS} files, 200 MiB)",
            dir.display()
        );
    }
}

fn refuse(kind: Kind, path: &Path, why: &str) -> Failure {
    Failure::Usage(format!(
        "refusing to use {} as {}: {why}; expected {}",
        quote_path(path),
        kind.what(),
        kind.expected()
    ))
}

/// Whether what is at `path` may be replaced (or appended to) as a `kind` output: `Err`
/// says why not.
fn check_kind(kind: Kind, path: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return pseudo_filesystem(path);
        }
        Err(e) => return Err(format!("cannot look at it ({e})")),
    };
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link".into());
    }
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    pseudo_filesystem(path)?;
    let ok = match kind {
        Kind::Request => is_request_file(path),
        Kind::Ack => meta.len() <= MAX_EVENT_LINE && read_ack(path).is_some(),
        Kind::Events => meta.len() == 0 || is_events_file(path),
        Kind::Recording => meta.len() == 0 || is_recording_file(path),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "it exists and is not {}",
            match kind {
                Kind::Request => "a watchdog request",
                Kind::Ack => "a watchdog acknowledgment",
                Kind::Events => "a watchdog events file",
                Kind::Recording => "a watchdog recording",
            }
        ))
    }
}

/// `Err` when `path` (a file, or the directory a new file would go in) is on one of the
/// kernel's pseudo-filesystems ([`watchdog_types::fs::kernel_filesystem`]): `--events /proc/self/comm` is a regular, empty file
/// that swallows every line.
fn pseudo_filesystem(path: &Path) -> Result<(), String> {
    match watchdog_sampler::disk::kernel_filesystem_at(path) {
        Some(name) => Err(format!(
            "it is on {name}, a kernel interface where written lines are lost or refused"
        )),
        None => Ok(()),
    }
}

/// Whether a recording may be written at `path` now (see [`check_kind`]).
pub fn check_recording(path: &Path) -> Result<(), String> {
    check_kind(Kind::Recording, path).map_err(|why| format!("refusing to replace it: {why}"))
}

/// Whether `path` starts with the recording header.
pub fn is_recording_file(path: &Path) -> bool {
    let Some(f) = open_plain(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(RECORDING_MAGIC.len());
    f.take(RECORDING_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .is_ok()
        && head == RECORDING_MAGIC
}

/// Whether the first line of `path` is a watchdog event: a JSON object with an `event`
/// and a `time` string (every events file starts with the `start` event).
fn is_events_file(path: &Path) -> bool {
    let Some(f) = open_plain(path) else {
        return false;
    };
    let mut line = Vec::new();
    if BufReader::new(f.take(MAX_EVENT_LINE))
        .read_until(b'\n', &mut line)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&line).is_ok_and(|v| {
        v.get("event").is_some_and(serde_json::Value::is_string)
            && v.get("time").is_some_and(serde_json::Value::is_string)
    })
}

/// Refuses two outputs on one file: the same name in the same (canonical) directory,
/// or the same inode under two names.
fn check_distinct(all: &[(Kind, &Path)]) -> Result<(), Failure> {
    let key = |p: &Path| {
        let dir = parent_dir(p);
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        (dir, p.file_name().map(|n| n.to_os_string()))
    };
    let inode = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    for (i, (ka, a)) in all.iter().enumerate() {
        for (kb, b) in &all[i + 1..] {
            let same = key(a) == key(b) || inode(a).is_some_and(|x| Some(x) == inode(b));
            if same {
                return Err(Failure::Usage(format!(
                    "{} and {} are the same file {}: expected a different path for each output (--request-file, --events, --record)",
                    ka.what(),
                    kb.what(),
                    quote_path(b)
                )));
            }
        }
    }
    Ok(())
}

/// Creates `path` (mode 0600), failing on any existing entry, a symlink included.
fn create_new_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(path)
}

/// Creates and removes the temporary file a write of `path` goes through (its real
/// name, so a name too long once `.tmp.PID.N` is added fails here): the directory must
/// take new files.
fn probe_dir(kind: Kind, path: &Path) -> Result<(), Failure> {
    let dir = parent_dir(path);
    match watchdog_types::fs::probe_write(path) {
        Ok(()) => Ok(()),
        Err(e) => Err(Failure::Usage(format!(
            "cannot write {} {}: {} in {}; expected a directory the watchdog may create files in",
            kind.what(),
            quote_path(path),
            match &e {
                watchdog_types::fs::WriteError::Write { source, .. } => source.to_string(),
                other => other.to_string(),
            },
            quote_path(dir)
        ))),
    }
}

/// A write that failed after the start, for the `output_error` event.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFailure {
    /// Which output: `request_file`, `events`, `recording`.
    pub output: &'static str,
    /// Its path.
    pub path: String,
    /// The error.
    pub error: String,
}

/// Failures not yet turned into events, and the last error per output (so a full disk
/// gives one line, not one per sample).
struct Failures {
    queue: Vec<OutputFailure>,
    last: Vec<(&'static str, String)>,
}

static FAILURES: Mutex<Failures> = Mutex::new(Failures {
    queue: Vec::new(),
    last: Vec::new(),
});

/// Reports a failed write of `output` at `path`: an error line and a queued
/// `output_error` event, unless the same output last failed with the same error.
pub fn write_failed(output: &'static str, path: &Path, error: &str) {
    let Ok(mut guard) = FAILURES.lock() else {
        tracing::error!("cannot write the {output} {}: {error}", path.display());
        return;
    };
    let Failures { queue, last } = &mut *guard;
    if last.iter().any(|(o, e)| *o == output && e == error) {
        return;
    }
    last.retain(|(o, _)| *o != output);
    last.push((output, error.to_string()));
    tracing::error!(
        "cannot write the {} {}: {error}",
        output.replace('_', " "),
        path.display()
    );
    queue.push(OutputFailure {
        output,
        path: path.display().to_string(),
        error: error.to_string(),
    });
}

/// Notes a successful write of `output`: its next failure is reported again.
pub fn write_ok(output: &'static str) {
    if let Ok(mut guard) = FAILURES.lock()
        && !guard.last.is_empty()
    {
        guard.last.retain(|(o, _)| *o != output);
    }
}

/// The failures reported since the last call, to be emitted as events.
pub fn take_failures() -> Vec<OutputFailure> {
    FAILURES
        .lock()
        .map(|mut g| std::mem::take(&mut g.queue))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kinds_are_recognised_and_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(p("script.py"), "print(1)\n").unwrap();
        std::fs::write(p("empty"), "").unwrap();
        std::fs::write(
            p("ev.jsonl"),
            "{\"time\":\"2026-01-01T00:00:00.000Z\",\"event\":\"start\"}\n",
        )
        .unwrap();
        std::fs::write(
            p("rec.csv"),
            "# watchdog recording v1\ntime,resource,used,limit\n",
        )
        .unwrap();
        std::fs::write(p("x.ack"), "{\"seq\":1,\"time_unix\":2.0}\n").unwrap();
        std::os::unix::fs::symlink(p("rec.csv"), p("link.csv")).unwrap();
        for kind in [Kind::Request, Kind::Ack, Kind::Events, Kind::Recording] {
            assert!(check_kind(kind, &p("script.py")).is_err(), "{kind:?}");
            assert!(check_kind(kind, &p("missing")).is_ok(), "{kind:?}");
            assert_eq!(
                check_kind(kind, &p("link.csv")).unwrap_err(),
                "it is a symbolic link"
            );
            assert_eq!(
                check_kind(kind, dir.path()).unwrap_err(),
                "it is not a regular file"
            );
        }
        assert!(check_kind(Kind::Events, &p("ev.jsonl")).is_ok());
        assert!(check_kind(Kind::Events, &p("empty")).is_ok());
        assert!(check_kind(Kind::Events, &p("rec.csv")).is_err());
        assert!(check_kind(Kind::Recording, &p("rec.csv")).is_ok());
        assert!(check_kind(Kind::Recording, &p("empty")).is_ok());
        assert!(check_kind(Kind::Recording, &p("ev.jsonl")).is_err());
        assert!(check_kind(Kind::Ack, &p("x.ack")).is_ok());
        assert!(check_kind(Kind::Request, &p("empty")).is_err());
    }

    #[test]
    fn outputs_on_the_kernels_pseudo_filesystems_are_refused() {
        for (kind, path) in [
            (Kind::Events, "/proc/self/comm"),
            (Kind::Events, "/proc/self/status"),
            (Kind::Recording, "/proc/new.csv"),
            (Kind::Request, "/sys/kernel/new.json"),
        ] {
            let why = check_kind(kind, Path::new(path)).unwrap_err();
            assert!(why.contains("kernel interface"), "{path}: {why}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(check_kind(Kind::Events, &dir.path().join("e.jsonl")).is_ok());
    }

    #[test]
    fn two_outputs_on_one_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("out.json");
        let same = dir.path().join("./sub/../out.json");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let ack = ack_path(&a);
        let other = dir.path().join("other.json");
        assert!(check_distinct(&[(Kind::Request, &a), (Kind::Events, &other)]).is_ok());
        let Err(Failure::Usage(msg)) =
            check_distinct(&[(Kind::Request, &a), (Kind::Events, &same)])
        else {
            panic!("not refused")
        };
        assert!(
            msg.starts_with("the request file and the events file are the same file"),
            "{msg}"
        );
        assert!(
            check_distinct(&[
                (Kind::Ack, &ack),
                (Kind::Recording, &dir.path().join("out.json.ack"))
            ])
            .is_err()
        );
        std::fs::write(&other, "").unwrap();
        std::fs::hard_link(&other, dir.path().join("hard")).unwrap();
        assert!(
            check_distinct(&[
                (Kind::Events, &other),
                (Kind::Recording, &dir.path().join("hard"))
            ])
            .is_err()
        );
    }

    #[test]
    fn reserved_recordings_never_collide_and_pruning_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let a = reserve_recording(dir.path(), 42).unwrap();
        let b = reserve_recording(dir.path(), 42).unwrap();
        assert_ne!(a, b);
        assert!(is_recording_file(&a) && is_recording_file(&b));
        let name = a.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("watchdog-42-") && name.ends_with(".recording.csv"),
            "{name}"
        );
        // 60 older recordings and an unrelated file: 50 recordings are left, this run's among them.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..60 {
            let p = dir
                .path()
                .join(format!("watchdog-{i}-20200101T000000Z.recording.csv"));
            std::fs::write(&p, "# watchdog recording v1\n").unwrap();
            let f = File::options().write(true).open(&p).unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i))
                .unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        // A name like ours on a file the watchdog did not write.
        let mine = dir.path().join("watchdog-mine.recording.csv");
        std::fs::write(&mine, "time,used,limit\n").unwrap();
        let f = File::options().write(true).open(&mine).unwrap();
        f.set_modified(old - std::time::Duration::from_secs(7200))
            .unwrap();
        let f = File::options().write(true).open(&a).unwrap();
        f.set_modified(old - std::time::Duration::from_secs(60))
            .unwrap();
        prune_recordings(dir.path(), &a);
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(left.len(), KEEP_RECORDINGS + 2, "{left:?}");
        assert!(left.contains(&"notes.txt".to_string()));
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "time,used,limit\n");
        assert!(a.exists() && b.exists());
        assert!(
            !dir.path()
                .join("watchdog-0-20200101T000000Z.recording.csv")
                .exists()
        );
        assert!(
            dir.path()
                .join("watchdog-59-20200101T000000Z.recording.csv")
                .exists()
        );
    }

    #[test]
    fn a_deleted_working_directory_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("d");
        std::fs::create_dir(&gone).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .current_dir(&gone)
            .spawn()
            .unwrap();
        assert_eq!(live_cwd(&Host::from_env(), child.id()), Some(gone.clone()));
        std::fs::remove_dir(&gone).unwrap();
        // A directory with the name /proc shows for the deleted one is not it.
        std::fs::create_dir(dir.path().join("d (deleted)")).unwrap();
        assert_eq!(live_cwd(&Host::from_env(), child.id()), None);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn repeated_failures_are_reported_once() {
        let p = Path::new("/nowhere/x");
        write_failed("recording", p, "disk full");
        write_failed("recording", p, "disk full");
        let got: Vec<_> = take_failures()
            .into_iter()
            .filter(|f| f.path == "/nowhere/x")
            .collect();
        assert_eq!(got.len(), 1);
        write_ok("recording");
        write_failed("recording", p, "disk full");
        assert_eq!(
            take_failures()
                .iter()
                .filter(|f| f.path == "/nowhere/x")
                .count(),
            1
        );
    }
}
