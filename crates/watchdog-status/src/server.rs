//! The listening side of the status socket: binding it safely, the accept loop, and the
//! two decisions that depend on who is asking ([`visible_to`], [`may_register`]).
//!
//! Any local user may connect (the socket is 0666); the peer's credentials, read with
//! `SO_PEERCRED` (the kernel's, not anything the client says), decide what it sees and
//! what it may register. Each connection sends one request line (at most
//! [`MAX_REQUEST_BYTES`], within [`REQUEST_TIMEOUT`]), gets one answer and is closed.
//! Request lines are read by the accept loop for every connection at once, without
//! blocking ([`crate::intake`]), and only a complete one is answered on a thread of its
//! own (at most [`MAX_CONNECTIONS`] at once): a client that connects and says nothing
//! holds no thread and delays nobody. At most [`MAX_WAITING`] connections wait for their
//! line at once; a new one beyond that closes the oldest silent connection of the uid
//! holding the most, so hundreds of idle connections neither exhaust the daemon's file
//! descriptors nor keep anyone else out.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use watchdog_procfs::{ProcRoot, ProcStatus};
use watchdog_types::status::WatchStatus;

use crate::intake::{Arrived, Intake};
use crate::protocol::{MAX_REQUEST_BYTES, Request, Response, TOO_LONG};

/// How long a connection may take to send its request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Requests answered at once (each on its own thread); more complete requests wait for a
/// free thread. Connections still sending theirs do not count: see [`MAX_WAITING`].
pub const MAX_CONNECTIONS: usize = 16;

/// How often the accept loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Longest chain of parents walked looking for an ancestor (a chain is far shorter; this
/// only bounds the walk if `/proc` changes under it).
const MAX_ANCESTRY: usize = 4096;

/// Who is on the other end of a connection, as the kernel says (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The peer's PID when it connected; 0 when it is outside our PID namespace.
    pub pid: u32,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

/// What answers each request: called on the connection's thread.
pub type Handler = Arc<dyn Fn(&Peer, Request) -> Response + Send + Sync>;

/// The socket file this server bound; removed when the server or its handle is dropped,
/// unless another socket has replaced it since.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(meta) = fs::symlink_metadata(&self.path)
            && meta.file_type().is_socket()
            && meta.dev() == self.dev
            && meta.ino() == self.ino
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A bound, not yet serving, status socket.
#[derive(Debug)]
pub struct StatusServer {
    listener: UnixListener,
    file: SocketFile,
}

/// The running accept loop; [`stop`](ServerHandle::stop) or drop it to stop the loop and
/// remove the socket file.
#[derive(Debug)]
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    file: Option<SocketFile>,
}

impl StatusServer {
    /// Binds the socket at `path`.
    ///
    /// Creates the parent directory (0755, whatever the umask) when missing. An existing socket there is
    /// replaced when nobody answers on it, and refused when a server does; anything else
    /// at `path` (a regular file, a directory, a symlink, which is never followed) is an
    /// error and is left alone. The socket is made 0666: any local user may connect.
    pub fn bind(path: &Path) -> Result<StatusServer, String> {
        let shown = path.display();
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            watchdog_types::fs::create_dir_all_mode(parent, 0o755)
                .map_err(|e| format!("cannot create the directory {}: {e}", parent.display()))?;
        }
        remove_stale(path)?;
        let listener =
            UnixListener::bind(path).map_err(|e| format!("cannot listen on {shown}: {e}"))?;
        let meta = fs::symlink_metadata(path)
            .map_err(|e| format!("cannot stat {shown} after binding it: {e}"))?;
        // Dropping it removes the file again if anything below fails.
        let file = SocketFile {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        };
        if !meta.file_type().is_socket() {
            return Err(format!("{shown} is no longer a socket after binding it"));
        }
        // chmod follows symlinks and fchmod on a socket changes the socket, not the file:
        // this relies on the directory being writable only by the daemon (root's 0755
        // `/run/watchdog`), so nobody can swap the file between the lstat above and here.
        fs::set_permissions(path, fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot make {shown} 0666: {e}"))?;
        Ok(StatusServer { listener, file })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Runs the accept loop on its own thread, answering each request with `handler`.
    pub fn serve(self, handler: Handler) -> ServerHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let StatusServer { listener, file } = self;
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("status-socket".into())
            .spawn(move || accept_loop(&listener, &handler, &flag));
        ServerHandle {
            stop,
            // Without a thread nothing is served; the client then times out and says so.
            thread: thread.ok(),
            file: Some(file),
        }
    }
}

impl ServerHandle {
    /// The socket's path.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Stops accepting, waits for the accept loop to end and removes the socket file.
    /// Connections already accepted finish on their own threads within [`REQUEST_TIMEOUT`].
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.file.take();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Clears the way for binding `path`: nothing there, or a socket nobody answers on (which
/// is removed). Never follows a symlink.
fn remove_stale(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot stat {shown}: {e}")),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_symlink() {
            "a symlink"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_file() {
            "a regular file"
        } else {
            "not a socket"
        };
        return Err(format!(
            "{shown} exists and is {what}: expected a socket or nothing; remove it or choose another socket path"
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(format!("another watchdog daemon is listening on {shown}")),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => fs::remove_file(path)
            .map_err(|e| format!("cannot remove the stale socket {shown}: {e}")),
        Err(e) => Err(format!("cannot tell whether {shown} is in use: {e}")),
    }
}

/// Accepts until `stop` is set, polling so the flag is seen within [`STOP_POLL`]. Requests
/// are read here, for every connection at once ([`Intake`]); each complete one is answered
/// on a thread of its own, at most [`MAX_CONNECTIONS`] at a time.
fn accept_loop(listener: &UnixListener, handler: &Handler, stop: &AtomicBool) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let active = Arc::new(AtomicUsize::new(0));
    let mut intake: Intake<UnixStream> =
        Intake::new(MAX_WAITING, MAX_REQUEST_BYTES, REQUEST_TIMEOUT, end_of_line);
    // Complete requests waiting for a free thread, oldest first.
    let mut ready: VecDeque<(UnixStream, Received)> = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        let (listener_ready, arrived) = match intake.wait(listener.as_fd(), STOP_POLL) {
            Ok(r) => r,
            Err(_) => {
                // Out of memory, most likely: try again after a pause rather than spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        for a in arrived {
            let (stream, request) = match a {
                Arrived::Complete(s, bytes) | Arrived::Closed(s, bytes) => (s, Ok(bytes)),
                Arrived::TooLong(s) => (s, Err(TOO_LONG.to_string())),
                Arrived::TimedOut(s) => (s, Err(timeout_message())),
            };
            if ready.len() >= MAX_WAITING {
                ready.pop_front();
            }
            ready.push_back((stream, request));
        }
        while active.load(Ordering::Acquire) < MAX_CONNECTIONS
            && let Some((stream, request)) = ready.pop_front()
        {
            dispatch(stream, request, handler, &active);
        }
        if listener_ready {
            accept_all(listener, &mut intake);
        }
    }
}

/// A request's bytes, or the one-line error that answers a connection that sent none.
type Received = Result<Vec<u8>, String>;

/// Connections waiting for their request line at once; beyond it the oldest silent one of
/// the uid holding the most is closed ([`Intake`]).
pub const MAX_WAITING: usize = 128;

/// Where a request ends: after its first newline.
fn end_of_line(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n').map(|i| i + 1)
}

/// Takes every connection the listener has queued into `intake`.
fn accept_all(listener: &UnixListener, intake: &mut Intake<UnixStream>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                // A connection whose credentials cannot be read counts as root's: it is
                // answered with the error, and evicted last among equals.
                let owner = peer_credentials(&stream).map_or(0, |p| p.uid);
                drop(intake.add(stream, owner));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // Out of file descriptors, most likely: serve what is open first.
                return;
            }
        }
    }
}

/// Gives up one of the [`MAX_CONNECTIONS`] slots when dropped (also on a panic).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers `request` on `stream` on a new thread holding one of the slots.
fn dispatch(stream: UnixStream, request: Received, handler: &Handler, active: &Arc<AtomicUsize>) {
    active.fetch_add(1, Ordering::AcqRel);
    let slot = Slot(Arc::clone(active));
    let handler = Arc::clone(handler);
    // If the thread cannot start, the closure (and the slot) is dropped with the stream.
    let _ = std::thread::Builder::new()
        .name("status-conn".into())
        .spawn(move || {
            let _slot = slot;
            handle(stream, request, &handler);
        });
}

/// One connection whose request was read: answer it, close.
fn handle(mut stream: UnixStream, request: Received, handler: &Handler) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let response = match (peer_credentials(&stream), request) {
        (Err(e), _) => Response::error(&format!("cannot read the peer's credentials: {e}")),
        (Ok(_), Err(m)) => Response::error(&m),
        (Ok(peer), Ok(line)) => match Request::parse(&line) {
            Err(e) => Response::error(&e),
            Ok(req) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&peer, req)))
                    .unwrap_or_else(|_| Response::error("the watchdog failed to answer (a bug)"))
            }
        },
    };
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.write_all(format!("{}\n", response.encode()).as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    discard_rest(&mut stream);
}

/// Reads and drops what the client sent beyond its request line (bounded in bytes and
/// time): closing a Unix socket with unread data makes the client's next read fail with
/// ECONNRESET, and it would never see the answer (`request longer than 64 KiB`).
fn discard_rest(stream: &mut UnixStream) {
    const MAX_DISCARD: usize = 1 << 20;
    const MAX_WAIT: Duration = Duration::from_millis(500);
    let deadline = Instant::now() + MAX_WAIT;
    let mut buf = [0u8; 8192];
    let mut dropped = 0usize;
    while dropped < MAX_DISCARD {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => dropped += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn timeout_message() -> String {
    format!("no request line within {}s", REQUEST_TIMEOUT.as_secs())
}

/// The peer's credentials from `SO_PEERCRED`.
fn peer_credentials(stream: &UnixStream) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `stream`; `cred` is a writable `ucred` and
    // `len` holds its exact size, which is what SO_PEERCRED writes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Peer {
        pid: u32::try_from(cred.pid).unwrap_or(0),
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// What a user with `uid` may see of `status`: root (0) everything, anyone else only the
/// targets it owns.
pub fn visible_to(status: &WatchStatus, uid: u32) -> WatchStatus {
    WatchStatus {
        watchdog_pid: status.watchdog_pid,
        mode: status.mode.clone(),
        time_unix: status.time_unix,
        interval_s: status.interval_s,
        targets: status
            .targets
            .iter()
            .filter(|t| uid == 0 || t.uid == uid)
            .cloned()
            .collect(),
    }
}

/// Whether `peer` may register `pid` for watching: root may register anything; anyone
/// else only its own process or one of its ancestors (walking `PPid:` in
/// `<proc_root>/P/status`), and only when `pid`'s real uid is the peer's uid. A one-line
/// reason otherwise.
pub fn may_register(proc_root: &ProcRoot, peer: &Peer, pid: u32) -> Result<(), String> {
    if peer.uid == 0 {
        return Ok(());
    }
    if peer.pid == 0 {
        return Err(
            "your process is outside the watchdog's PID namespace: only root may register a run from there"
                .to_string(),
        );
    }
    let mut current = peer.pid;
    let mut found = false;
    for _ in 0..MAX_ANCESTRY {
        if current == pid {
            found = true;
            break;
        }
        if current <= 1 {
            break;
        }
        current = read_proc_status(proc_root, current)?.ppid.ok_or_else(|| {
            format!(
                "cannot check the ancestry of PID {}: {} has no PPid line",
                peer.pid,
                proc_root.pid_file(current, "status").display()
            )
        })?;
    }
    if !found {
        return Err(format!(
            "PID {pid} is neither your process ({}) nor one of its ancestors: register from inside the run, or as root",
            peer.pid
        ));
    }
    let owner = read_proc_status(proc_root, pid)?
        .uids
        .ok_or_else(|| {
            format!(
                "cannot tell who owns PID {pid}: {} has no Uid line",
                proc_root.pid_file(pid, "status").display()
            )
        })?
        .real;
    if owner != peer.uid {
        return Err(format!(
            "PID {pid} belongs to uid {owner}, not to you (uid {})",
            peer.uid
        ));
    }
    Ok(())
}

/// The parsed `<proc_root>/<pid>/status`, or why it cannot be read.
fn read_proc_status(proc_root: &ProcRoot, pid: u32) -> Result<ProcStatus, String> {
    proc_root.status(pid).map_err(|e| match e {
        watchdog_procfs::Error::Read { path, source }
            if source.kind() == io::ErrorKind::NotFound =>
        {
            format!("PID {pid} does not exist (no {})", path.display())
        }
        e => e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_types::status::TargetStatus;

    fn target(pid: u32, uid: u32) -> TargetStatus {
        TargetStatus {
            pid,
            uid,
            user: format!("u{uid}"),
            ..TargetStatus::default()
        }
    }

    #[test]
    fn root_sees_every_target_and_others_only_their_own() {
        let status = WatchStatus {
            watchdog_pid: 1,
            mode: "daemon".into(),
            targets: vec![target(10, 1000), target(11, 1001), target(12, 1000)],
            ..WatchStatus::default()
        };
        let pids = |uid| -> Vec<u32> {
            visible_to(&status, uid)
                .targets
                .iter()
                .map(|t| t.pid)
                .collect()
        };
        assert_eq!(pids(0), vec![10, 11, 12]);
        assert_eq!(pids(1000), vec![10, 12]);
        assert_eq!(pids(1001), vec![11]);
        assert_eq!(pids(65534), Vec::<u32>::new());
        assert_eq!(visible_to(&status, 65534).mode, "daemon");
    }

    /// A fake `/proc` of `(pid, ppid, real uid)`.
    fn fake_proc(procs: &[(u32, u32, u32)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for &(pid, ppid, uid) in procs {
            let d = dir.path().join(pid.to_string());
            fs::create_dir(&d).unwrap();
            fs::write(
                d.join("status"),
                format!(
                    "Name:\tPPid:\t{uid}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t100\t100\t100\t100\n"
                ),
            )
            .unwrap();
        }
        dir
    }

    #[test]
    fn registration_table() {
        // 1 (root) -> 50 (root sshd) -> 100 (alice shell) -> 200 (alice python) -> 300 (alice worker)
        // 400 (bob) under 1; 500 (root, setuid helper) under 200 -> 600 (alice) under 500.
        let proc = fake_proc(&[
            (1, 0, 0),
            (50, 1, 0),
            (100, 50, 1000),
            (200, 100, 1000),
            (300, 200, 1000),
            (400, 1, 1001),
            (500, 200, 0),
            (600, 500, 1000),
        ]);
        let alice = |pid| Peer {
            pid,
            uid: 1000,
            gid: 100,
        };
        let root = Peer {
            pid: 50,
            uid: 0,
            gid: 0,
        };
        let table: &[(Peer, u32, Result<(), &str>)] = &[
            (alice(200), 200, Ok(())),                           // itself
            (alice(300), 200, Ok(())),                           // its parent
            (alice(300), 100, Ok(())),                           // its grandparent
            (alice(600), 200, Ok(())),                           // through a root-owned parent
            (alice(300), 50, Err("belongs to uid 0")),           // a root-owned ancestor
            (alice(600), 500, Err("belongs to uid 0")),          // a root-owned parent
            (alice(300), 1, Err("belongs to uid 0")),            // init
            (alice(200), 300, Err("nor one of its ancestors")),  // its child
            (alice(200), 400, Err("nor one of its ancestors")),  // someone else's
            (alice(200), 9999, Err("nor one of its ancestors")), // nobody
            (alice(9999), 9999, Err("PID 9999 does not exist")), // own, but gone
            (alice(9998), 200, Err("PID 9998 does not exist")),
            (alice(0), 200, Err("outside the watchdog's PID namespace")),
            (root, 400, Ok(())),
            (root, 9999, Ok(())),
        ];
        for (peer, pid, want) in table {
            let got = may_register(&ProcRoot::new(proc.path()), peer, *pid);
            match (want, &got) {
                (Ok(()), Ok(())) => {}
                (Err(w), Err(e)) => {
                    assert!(
                        e.contains(w),
                        "{peer:?} registering {pid}: {e:?}, want {w:?}"
                    );
                    assert!(!e.contains('\n'));
                }
                _ => panic!("{peer:?} registering {pid}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_cycle_in_a_fake_proc_ends_the_walk() {
        let proc = fake_proc(&[(10, 11, 1000), (11, 10, 1000)]);
        let peer = Peer {
            pid: 10,
            uid: 1000,
            gid: 1000,
        };
        let e = may_register(&ProcRoot::new(proc.path()), &peer, 12).unwrap_err();
        assert!(e.contains("nor one of its ancestors"), "{e}");
    }

    #[test]
    fn the_real_proc_agrees_for_this_process() {
        let me = std::process::id();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let peer = Peer {
            pid: me,
            uid,
            gid: 0,
        };
        let proc = ProcRoot::default();
        may_register(&proc, &peer, me).unwrap();
        let status = read_proc_status(&proc, me).unwrap();
        // SAFETY: getppid cannot fail.
        assert_eq!(status.ppid, Some(unsafe { libc::getppid() } as u32));
    }
}
