//! Asking a running watchdog over its status socket: `watchdog status` and tests use
//! [`query`]; the Python client speaks the same protocol itself.
//!
//! Every failure is one line naming the socket and what was expected, so the CLI can
//! print it as it is.

use std::io::{self, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::protocol::{Request, Response};

/// How long [`query`] waits for the whole answer.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest answer read, in bytes (a status of a few hundred runs is well under 1 MiB).
pub const MAX_RESPONSE_BYTES: u64 = 16 << 20;

/// Sends `req` to the server at `socket` and returns its answer, within [`QUERY_TIMEOUT`].
/// An `{"ok":false}` answer is `Ok(Response::Error(..))`: the server did answer.
pub fn query(socket: &Path, req: &Request) -> Result<Response, String> {
    query_within(socket, req, QUERY_TIMEOUT)
}

/// [`query`] with its own time limit.
pub fn query_within(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, String> {
    let shown = socket.display();
    let mut stream = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
    let deadline = Instant::now() + timeout;
    let fail = |what: &str, e: io::Error| format!("{what} {shown}: {e}");
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| fail("cannot set a timeout on", e))?;
    stream
        .write_all(format!("{}\n", req.encode()).as_bytes())
        .map_err(|e| fail("cannot send the request to", e))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(no_answer(socket, timeout));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| fail("cannot set a timeout on", e))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let end = buf[..n].iter().position(|&b| b == b'\n');
                answer.extend_from_slice(&buf[..end.unwrap_or(n)]);
                if end.is_some() {
                    break;
                }
                if answer.len() as u64 > MAX_RESPONSE_BYTES {
                    return Err(format!(
                        "the answer from {shown} is longer than {} MiB: expected one JSON line",
                        MAX_RESPONSE_BYTES >> 20
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(no_answer(socket, timeout));
            }
            Err(e) => return Err(fail("cannot read the answer from", e)),
        }
    }
    if answer.is_empty() {
        return Err(format!(
            "{shown} closed the connection without answering: expected one JSON line"
        ));
    }
    Response::decode(&answer).map_err(|e| format!("malformed answer from {shown}: {e}"))
}

fn no_answer(socket: &Path, timeout: Duration) -> String {
    format!(
        "no answer from {} within {}s: expected one JSON line; is `watchdog daemon` stuck?",
        socket.display(),
        timeout.as_secs_f64()
    )
}

/// "cannot connect to PATH: REASON; HINT".
fn connect_error(socket: &Path, e: &io::Error) -> String {
    let shown = socket.display();
    match e.kind() {
        io::ErrorKind::NotFound => {
            format!("cannot connect to {shown}: no such file; is `watchdog daemon` running?")
        }
        io::ErrorKind::ConnectionRefused if !is_socket(socket) => not_a_socket_error(socket),
        io::ErrorKind::ConnectionRefused => format!(
            "cannot connect to {shown}: nobody is listening (a stale socket); is `watchdog daemon` running?"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "cannot connect to {shown}: permission denied; expected a socket every user may connect to (0666)"
        ),
        _ => format!("cannot connect to {shown}: {e}"),
    }
}

/// The error for a `--socket PATH` at which something other than a socket is (a file, a
/// FIFO, a directory), or None: the path given is wrong, not the daemon (exit 2, not 1).
pub fn not_a_socket(socket: &Path) -> Option<String> {
    (std::fs::metadata(socket).is_ok() && !is_socket(socket)).then(|| not_a_socket_error(socket))
}

fn not_a_socket_error(socket: &Path) -> String {
    format!(
        "cannot connect to {}: not a socket; expected the socket of `watchdog daemon` (--socket PATH)",
        socket.display()
    )
}

/// Whether `path` is a socket (connecting to any other kind of file is refused too).
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    #[test]
    fn a_missing_socket_says_so_and_suggests_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let e = query(&path, &Request::Status).unwrap_err();
        assert_eq!(
            e,
            format!(
                "cannot connect to {}: no such file; is `watchdog daemon` running?",
                path.display()
            )
        );
    }

    #[test]
    fn a_stale_socket_is_named_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        drop(UnixListener::bind(&path).unwrap());
        let e = query(&path, &Request::Status).unwrap_err();
        assert!(e.contains("nobody is listening (a stale socket)"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_named_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        std::fs::write(&path, "").unwrap();
        for p in [path.as_path(), dir.path()] {
            let e = query(p, &Request::Status).unwrap_err();
            assert!(e.contains(": not a socket; expected the socket"), "{e}");
        }
    }

    #[test]
    fn a_silent_server_times_out_with_the_socket_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let _listener = UnixListener::bind(&path).unwrap();
        let e = query_within(&path, &Request::Status, Duration::from_millis(300)).unwrap_err();
        assert!(
            e.starts_with(&format!("no answer from {} within 0.3s", path.display())),
            "{e}"
        );
    }

    /// Queries a one-shot server that reads the request and answers `answer` raw.
    fn query_fake_server(answer: &'static [u8]) -> (PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut line = [0u8; 64];
            let _ = s.read(&mut line).unwrap();
            s.write_all(answer).unwrap();
        });
        let e = query(&path, &Request::Status).unwrap_err();
        server.join().unwrap();
        (path, e)
    }

    #[test]
    fn a_garbage_answer_is_malformed_and_one_line() {
        let (path, e) = query_fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        assert!(
            e.starts_with(&format!(
                "malformed answer from {}: expected one JSON line",
                path.display()
            )),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn a_server_that_hangs_up_is_reported() {
        let (_, e) = query_fake_server(b"");
        assert!(e.contains("closed the connection without answering"), "{e}");
    }
}
