//! The status socket for real: a server on a temporary socket, clients in this process
//! (root) and in a Python process running as `nobody` (the language runs register from),
//! credentials from the kernel. Tests that need root say so through
//! `watchdog_testsupport::require`.
#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use watchdog_status::client::{query, query_within};
use watchdog_status::protocol::{Registration, Request, Response};
use watchdog_status::server::{
    Handler, Peer, REQUEST_TIMEOUT, StatusServer, may_register, visible_to,
};
use watchdog_testsupport::{is_root, need, public_scratch, require};
use watchdog_types::status::{TargetStatus, WatchStatus};

const NOBODY: u32 = 65534;
const PYTHON: &str = "/usr/bin/python3";

fn target(pid: u32, uid: u32) -> TargetStatus {
    TargetStatus {
        pid,
        uid,
        user: format!("user{uid}"),
        command: "python train.py".into(),
        ..TargetStatus::default()
    }
}

/// Three runs: root's, nobody's, uid 1000's.
fn three_runs() -> WatchStatus {
    WatchStatus {
        watchdog_pid: std::process::id(),
        mode: "daemon".into(),
        time_unix: 1.0,
        interval_s: 0.1,
        targets: vec![target(10, 0), target(11, NOBODY), target(12, 1000)],
    }
}

/// What a daemon would answer: the status filtered for the peer; registration by the
/// rule on the real `/proc`. Every peer is recorded.
fn daemon_handler(peers: Arc<Mutex<Vec<Peer>>>) -> Handler {
    let status = three_runs();
    Arc::new(move |peer: &Peer, req: Request| {
        peers.lock().unwrap().push(*peer);
        match req {
            Request::Status => Response::Status(visible_to(&status, peer.uid)),
            Request::Register { pid } => {
                match may_register(&watchdog_procfs::ProcRoot::default(), peer, pid) {
                    Ok(()) => Response::Registered(Registration {
                        pid,
                        request_file: format!("/run/watchdog/{pid}.json"),
                        signal: "SIGUSR1".into(),
                    }),
                    Err(e) => Response::error(&e),
                }
            }
        }
    })
}

/// Runs `/usr/bin/python3` as `nobody`, sending each of `requests` (JSON text, where
/// `SELF` and `PARENT` stand for its own PID and its parent's) on its own connection.
/// Returns its PID and the answer lines.
fn python_as_nobody(socket: &Path, requests: &[&str]) -> (u32, Vec<String>) {
    const CLIENT: &str = r#"
import os, socket, sys
path = sys.argv[1]
print(os.getpid(), flush=True)
for req in sys.argv[2:]:
    req = req.replace("SELF", str(os.getpid())).replace("PARENT", str(os.getppid()))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    s.sendall(req.encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    sys.stdout.write(data.decode())
"#;
    let out = Command::new(PYTHON)
        .arg("-I")
        .arg("-c")
        .arg(CLIENT)
        .arg(socket)
        .args(requests)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python client as nobody failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines().map(str::to_string);
    let pid = lines.next().unwrap().parse().unwrap();
    (pid, lines.collect())
}

fn can_run_as_nobody() -> bool {
    require(is_root(), "root (to run a client as nobody)")
        && need(
            Some(PYTHON).filter(|p| Path::new(p).exists()),
            "/usr/bin/python3 (the client run as nobody)",
        )
        .is_some()
}

fn decode(line: &str) -> Response {
    Response::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// Sends `bytes` (nothing: a silent client) on `stream` and reads the one answer line.
fn answer_to(mut stream: UnixStream, bytes: &[u8]) -> Response {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The server may stop reading (and answer) before the whole request is written.
    let _ = stream.write_all(bytes);
    let mut line = String::new();
    stream.read_to_string(&mut line).unwrap();
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    decode(line.trim_end())
}

fn serve(
    dir: &Path,
    peers: &Arc<Mutex<Vec<Peer>>>,
) -> (PathBuf, watchdog_status::server::ServerHandle) {
    let path = dir.join("run/watchdog/daemon.sock");
    let server = StatusServer::bind(&path).unwrap();
    (path, server.serve(daemon_handler(Arc::clone(peers))))
}

#[test]
fn status_is_filtered_by_the_peers_uid_from_the_kernel() {
    if !can_run_as_nobody() {
        return;
    }
    let dir = public_scratch("wd-status-");
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _server) = serve(dir.path(), &peers);

    let Response::Status(all) = query(&path, &Request::Status).unwrap() else {
        panic!("root got no status");
    };
    let pids: Vec<u32> = all.targets.iter().map(|t| t.pid).collect();
    assert_eq!(pids, vec![10, 11, 12], "root sees every run");

    let (child, answers) = python_as_nobody(&path, &[r#"{"op":"status"}"#]);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let Response::Status(mine) = decode(&answers[0]) else {
        panic!("nobody got no status: {answers:?}");
    };
    let pids: Vec<u32> = mine.targets.iter().map(|t| t.pid).collect();
    assert_eq!(pids, vec![11], "nobody sees only its own run");

    let peers = peers.lock().unwrap();
    assert_eq!(peers[0].uid, 0);
    assert_eq!(peers[0].pid, std::process::id());
    assert_eq!(
        peers[1],
        Peer {
            pid: child,
            uid: NOBODY,
            gid: NOBODY
        },
        "SO_PEERCRED names the python child"
    );
}

#[test]
fn registration_own_pid_allowed_root_pid_refused_for_non_root() {
    if !can_run_as_nobody() {
        return;
    }
    let dir = public_scratch("wd-status-");
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _server) = serve(dir.path(), &peers);

    let (child, answers) = python_as_nobody(
        &path,
        &[
            r#"{"op":"register","pid":SELF}"#,
            r#"{"op":"register","pid":PARENT}"#,
            r#"{"op":"register","pid":1}"#,
        ],
    );
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(
        decode(&answers[0]),
        Response::Registered(Registration {
            pid: child,
            request_file: format!("/run/watchdog/{child}.json"),
            signal: "SIGUSR1".into(),
        })
    );
    // Its parent is this test process, owned by root.
    let me = std::process::id();
    assert_eq!(
        decode(&answers[1]),
        Response::Error(format!(
            "PID {me} belongs to uid 0, not to you (uid {NOBODY})"
        ))
    );
    let Response::Error(e) = decode(&answers[2]) else {
        panic!("nobody registered init: {answers:?}");
    };
    assert!(e.contains("PID 1 belongs to uid 0"), "{e}");

    // Root may register anything.
    assert!(matches!(
        query(&path, &Request::Register { pid: 1 }).unwrap(),
        Response::Registered(Registration { pid: 1, .. })
    ));
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = watchdog_testsupport::scratch();
    let path = dir.path().join("daemon.sock");
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "the dropped listener leaves its file");
    let peers = Arc::new(Mutex::new(Vec::new()));
    let server = StatusServer::bind(&path)
        .unwrap()
        .serve(daemon_handler(peers));
    assert!(matches!(
        query(&path, &Request::Status).unwrap(),
        Response::Status(_)
    ));
    drop(server);
}

#[test]
fn a_live_server_is_not_replaced() {
    let dir = watchdog_testsupport::scratch();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _first) = serve(dir.path(), &peers);
    let e = StatusServer::bind(&path).unwrap_err();
    assert_eq!(
        e,
        format!("another watchdog daemon is listening on {}", path.display())
    );
    assert!(
        matches!(query(&path, &Request::Status).unwrap(), Response::Status(_)),
        "the first server still answers"
    );
}

#[test]
fn a_regular_file_or_directory_at_the_path_is_refused_and_left_untouched() {
    let dir = watchdog_testsupport::scratch();
    let file = dir.path().join("daemon.sock");
    std::fs::write(&file, "precious").unwrap();
    let e = StatusServer::bind(&file).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{} exists and is a regular file: expected a socket or nothing; remove it or choose another socket path",
            file.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");

    let sub = dir.path().join("sub.sock");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("inside"), "x").unwrap();
    let e = StatusServer::bind(&sub).unwrap_err();
    assert!(e.contains("is a directory"), "{e}");
    assert_eq!(std::fs::read_to_string(sub.join("inside")).unwrap(), "x");
}

#[test]
fn a_symlink_at_the_path_is_never_followed() {
    let dir = watchdog_testsupport::scratch();
    // A symlink to a stale socket: following it would remove the socket elsewhere.
    let elsewhere = dir.path().join("elsewhere.sock");
    drop(UnixListener::bind(&elsewhere).unwrap());
    let link = dir.path().join("daemon.sock");
    symlink(&elsewhere, &link).unwrap();
    let e = StatusServer::bind(&link).unwrap_err();
    assert!(e.contains("is a symlink"), "{e}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(&elsewhere).is_ok(),
        "the target was removed"
    );

    // A symlink to a file: neither is touched.
    let target = dir.path().join("file");
    std::fs::write(&target, "keep").unwrap();
    let link2 = dir.path().join("other.sock");
    symlink(&target, &link2).unwrap();
    assert!(
        StatusServer::bind(&link2)
            .unwrap_err()
            .contains("is a symlink")
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    // A dangling symlink is refused too (binding through it would create its target).
    let dangling = dir.path().join("dangling.sock");
    symlink(dir.path().join("nowhere"), &dangling).unwrap();
    assert!(
        StatusServer::bind(&dangling)
            .unwrap_err()
            .contains("is a symlink")
    );
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn the_socket_is_0666_in_a_created_0755_directory_and_removed_on_stop() {
    let dir = watchdog_testsupport::scratch();
    let path = dir.path().join("a/b/daemon.sock");
    let server = StatusServer::bind(&path).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&path), 0o666);
    // The umask may take bits away, never add them.
    assert_eq!(mode(&dir.path().join("a/b")) & !0o755, 0);
    let handle = server.serve(daemon_handler(Arc::new(Mutex::new(Vec::new()))));
    assert_eq!(handle.path(), Some(path.as_path()));
    handle.stop();
    assert!(!path.exists(), "stop removes the socket");
    let e = query(&path, &Request::Status).unwrap_err();
    assert!(e.contains("no such file"), "{e}");

    // Dropping the handle does too; dropping an unserved server as well.
    let handle = StatusServer::bind(&path)
        .unwrap()
        .serve(daemon_handler(Arc::new(Mutex::new(Vec::new()))));
    drop(handle);
    assert!(!path.exists());
    drop(StatusServer::bind(&path).unwrap());
    assert!(!path.exists());
}

#[test]
fn a_silent_client_does_not_block_another_and_is_told_it_timed_out() {
    let dir = watchdog_testsupport::scratch();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _server) = serve(dir.path(), &peers);
    let silent: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    let start = Instant::now();
    let answer = query(&path, &Request::Status).unwrap();
    let took = start.elapsed();
    assert!(matches!(answer, Response::Status(_)));
    assert!(
        took < REQUEST_TIMEOUT,
        "the second client waited {took:?}, as long as the silent ones may take"
    );
    for s in silent {
        assert_eq!(
            answer_to(s, b""),
            Response::Error("no request line within 2s".into())
        );
    }
}

/// 100 idle connections made `watchdog status` fail after 5 s and a registration time out
/// (each held one of 16 threads for 2 s). Now hundreds of them delay nobody: the next
/// status and registration are answered at once, and the idle ones are told they timed
/// out, or closed when they were the oldest beyond the limit of waiting connections.
#[test]
fn hundreds_of_idle_clients_delay_neither_status_nor_registration() {
    watchdog_testsupport::raise_fd_limit(4096);
    let dir = watchdog_testsupport::scratch();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _server) = serve(dir.path(), &peers);
    let idle: Vec<UnixStream> = (0..300)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let answer = query(&path, &Request::Status);
    assert!(matches!(answer, Ok(Response::Status(_))), "{answer:?}");
    let me = std::process::id();
    let answer = query(&path, &Request::Register { pid: me });
    assert!(matches!(answer, Ok(Response::Registered(_))), "{answer:?}");
    let took = start.elapsed();
    assert!(
        took < REQUEST_TIMEOUT,
        "status and registration took {took:?} behind idle clients"
    );
    let mut told = 0;
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut line = String::new();
        // Closed without a word (evicted) or told it timed out.
        let _ = s.read_to_string(&mut line);
        if !line.is_empty() {
            assert_eq!(
                decode(line.trim_end()),
                Response::Error("no request line within 2s".into())
            );
            told += 1;
        }
    }
    assert!(told > 0, "no idle client was kept and told it timed out");
}

#[test]
fn a_request_over_64_kib_or_malformed_gets_a_one_line_error() {
    let dir = watchdog_testsupport::scratch();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (path, _server) = serve(dir.path(), &peers);
    let ask = |bytes: &[u8]| answer_to(UnixStream::connect(&path).unwrap(), bytes);
    assert_eq!(
        ask(&vec![b' '; 70 * 1024]),
        Response::Error("request longer than 64 KiB".into())
    );
    assert_eq!(
        ask(b"{\"op\":\"shutdown\"}\n"),
        Response::Error("unknown op 'shutdown': expected \"status\" or \"register\"".into())
    );
    assert!(matches!(ask(b"{\"op\":\"status\"}\n"), Response::Status(_)));
    // No newline, then end of stream: still one request.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(b"{\"op\":\"status\"}").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut line = String::new();
    s.read_to_string(&mut line).unwrap();
    assert!(matches!(decode(line.trim_end()), Response::Status(_)));
}

#[test]
fn a_panicking_handler_answers_an_error_and_the_server_goes_on() {
    let dir = watchdog_testsupport::scratch();
    let path = dir.path().join("daemon.sock");
    let handler: Handler = Arc::new(|_: &Peer, req: Request| match req {
        Request::Status => panic!("a bug in the handler"),
        Request::Register { pid } => Response::error(&format!("no {pid}")),
    });
    let _server = StatusServer::bind(&path).unwrap().serve(handler);
    assert_eq!(
        query(&path, &Request::Status).unwrap(),
        Response::Error("the watchdog failed to answer (a bug)".into())
    );
    assert_eq!(
        query_within(
            &path,
            &Request::Register { pid: 7 },
            Duration::from_secs(30)
        )
        .unwrap(),
        Response::Error("no 7".into())
    );
}
