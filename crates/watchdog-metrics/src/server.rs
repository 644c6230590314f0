//! The `/metrics` endpoint: a minimal HTTP/1.1 server on its own thread, on `std::net`.
//!
//! A scrape is one GET a few seconds apart; that needs no async runtime and no HTTP crate
//! (`tiny_http` would do, but brings its own thread pool and a chunked-encoding path for a
//! job of 150 lines). What it must get right is not being hung or flooded by a client:
//! request heads are read for every connection at once on the serving thread, without
//! blocking (`watchdog_status::intake`, shared with the status socket), so an idle client
//! holds no thread; a head is capped at [`MAX_HEAD`] bytes and must arrive within
//! [`HEAD_TIMEOUT`]; at most [`MAX_WAITING`] connections wait for theirs (a new one beyond
//! closes the oldest); writes time out too, at most [`MAX_CONNECTIONS`] requests are served
//! at once (others get 503), and every response closes the connection.

use std::io::Write as _;
use std::net::{
    IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs as _,
};
use std::os::fd::AsFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use watchdog_status::intake::{Arrived, Intake};
use watchdog_types::status::WatchStatus;

use crate::exposition::{self, CONTENT_TYPE};

/// Longest request head (request line and headers) read; longer gets 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its whole request head; slower ones are dropped.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to take the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests served at once; more get 503 at once. Connections still sending their head do
/// not count: see [`MAX_WAITING`].
pub const MAX_CONNECTIONS: usize = 8;
/// Connections waiting for their request head at once; a new one beyond it closes the
/// oldest of them, so idle clients can neither exhaust descriptors nor keep a scrape out.
pub const MAX_WAITING: usize = 64;
/// How often the serving thread looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What the server calls on each scrape for the figures to render.
pub type Snapshot = Arc<dyn Fn() -> WatchStatus + Send + Sync>;

/// A bound, not yet serving, metrics listener.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    addr: SocketAddr,
}

/// The serving thread; stops it when dropped.
#[derive(Debug)]
pub struct MetricsHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr`: `PORT`, `:PORT`, `HOST:PORT` or `[IPv6]:PORT`; without a host, 127.0.0.1.
    /// Port 0 picks a free port ([`MetricsServer::local_addr`] says which).
    pub fn bind(addr: &str) -> Result<MetricsServer, String> {
        let candidates = parse_addr(addr)?;
        let mut last = None;
        for candidate in candidates {
            match TcpListener::bind(candidate) {
                Ok(listener) => {
                    let addr = listener.local_addr().map_err(|e| {
                        format!("cannot read the metrics address bound for {addr:?}: {e}")
                    })?;
                    return Ok(MetricsServer { listener, addr });
                }
                Err(e) => last = Some((candidate, e)),
            }
        }
        Err(match last {
            Some((at, e)) if e.kind() == std::io::ErrorKind::AddrInUse => format!(
                "cannot serve metrics on {at}: the port is already in use (another program, or another watchdog, listens there); choose another port with --metrics"
            ),
            Some((at, e)) => format!("cannot serve metrics on {at}: {e}"),
            None => format!("invalid metrics address {addr:?}: the host has no address"),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `GET /metrics` with [`exposition::render`] of what `snapshot` returns at each
    /// request, on a thread of its own, until the handle is stopped or dropped.
    pub fn serve(self, snapshot: Snapshot) -> MetricsHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let listener = self.listener;
        let thread = std::thread::Builder::new()
            .name("watchdog-metrics".to_string())
            .spawn(move || accept_loop(&listener, &flag, &snapshot));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                warn(&format!("cannot start the metrics thread: {e}"));
                None
            }
        };
        MetricsHandle {
            addr: self.addr,
            stop,
            thread,
        }
    }
}

impl MetricsHandle {
    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for the serving thread (requests in progress finish on
    /// their own threads within their timeouts).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The thread polls its listener and sees the flag within STOP_POLL.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for MetricsHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The socket addresses `addr` names: `PORT`, `:PORT`, `HOST:PORT` (an IPv4 address or a host
/// name) or `[IPv6]:PORT`.
pub fn parse_addr(addr: &str) -> Result<Vec<SocketAddr>, String> {
    let bad = |why: &str| {
        format!(
            "invalid metrics address {addr:?}: {why}; expected PORT, HOST:PORT or [IPv6]:PORT (e.g. 9187, 127.0.0.1:9187, [::1]:9187)"
        )
    };
    let trimmed = addr.trim();
    let (host, port) = match trimmed.rsplit_once(':') {
        None => ("", trimmed),
        Some((host, port)) => (host, port),
    };
    let port: u16 = port
        .parse()
        .map_err(|_| bad(&format!("{port:?} is not a port number (0-65535)")))?;
    if host.is_empty() {
        return Ok(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]);
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| bad("an IPv6 address needs its closing ']' before :PORT"))?;
        let ip: std::net::Ipv6Addr = inner
            .parse()
            .map_err(|_| bad(&format!("{inner:?} is not an IPv6 address")))?;
        return Ok(vec![SocketAddr::new(IpAddr::V6(ip), port)]);
    }
    if host.contains(':') {
        return Err(bad("an IPv6 address must be written in brackets"));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    // The resolver would take "1.2.3" as 1.2.0.3; digits and dots are meant as an address.
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad(&format!("{host:?} is not an IPv4 address")));
    }
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve host {host:?} ({e})")))?
        .collect();
    if resolved.is_empty() {
        return Err(bad(&format!("host {host:?} has no address")));
    }
    Ok(resolved)
}

/// The one message this crate prints itself (it has no logger): the thread could not start.
fn warn(message: &str) {
    eprintln!("watchdog: {message}");
}

/// Accepts until `stop` is set. Request heads are read here, from every connection at once
/// and without blocking ([`Intake`]), so idle clients hold no thread; each complete head is
/// answered on a thread of its own, at most [`MAX_CONNECTIONS`] at once (503 beyond).
fn accept_loop(listener: &TcpListener, stop: &AtomicBool, snapshot: &Snapshot) {
    if listener.set_nonblocking(true).is_err() {
        warn("cannot make the metrics listener non-blocking: metrics are not served");
        return;
    }
    let busy = Arc::new(AtomicUsize::new(0));
    let mut intake: Intake<TcpStream> = Intake::new(MAX_WAITING, MAX_HEAD, HEAD_TIMEOUT, find_end);
    while !stop.load(Ordering::SeqCst) {
        let Ok((listener_ready, arrived)) = intake.wait(listener.as_fd(), STOP_POLL) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        for a in arrived {
            match a {
                Arrived::Complete(stream, head) => dispatch(stream, head, snapshot, &busy),
                Arrived::TooLong(stream) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    respond(
                        &stream,
                        &Response::plain(431, "request head larger than 8 KiB\n"),
                        false,
                    );
                }
                // Timed out or went away before a whole head: nobody to answer.
                Arrived::TimedOut(_) | Arrived::Closed(..) => {}
            }
        }
        if listener_ready {
            accept_all(listener, &mut intake);
        }
    }
}

/// Takes every connection the listener has queued into `intake` (all count as one owner:
/// TCP does not say who connects, so the oldest idle one makes room).
fn accept_all(listener: &TcpListener, intake: &mut Intake<TcpStream>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_ok() {
                    drop(intake.add(stream, 0));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // WouldBlock: all taken; anything else (out of descriptors, most likely):
            // serve what is open first.
            Err(_) => return,
        }
    }
}

/// Answers a complete request head on a thread of its own, or 503 when
/// [`MAX_CONNECTIONS`] are being answered already.
fn dispatch(stream: TcpStream, head: Vec<u8>, snapshot: &Snapshot, busy: &Arc<AtomicUsize>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        busy.fetch_sub(1, Ordering::SeqCst);
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        respond(
            &stream,
            &Response::plain(503, "too many requests at once\n"),
            false,
        );
        return;
    }
    let snapshot = Arc::clone(snapshot);
    let slot = Arc::clone(busy);
    let spawned = std::thread::Builder::new()
        .name("watchdog-metrics-req".to_string())
        .spawn(move || {
            let (response, head_only) = route(&head, &snapshot);
            respond(&stream, &response, head_only);
            slot.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What to send back.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: bool,
}

impl Response {
    fn plain(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
            allow: false,
        }
    }
}

const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>watchdog</title></head>\n<body><h1>watchdog</h1>\n<p><a href=\"/metrics\">Metrics</a></p>\n</body></html>\n";

/// The response to a request head, without I/O.
fn route(head: &[u8], snapshot: &Snapshot) -> (Response, bool) {
    let text = String::from_utf8_lossy(head);
    let mut parts = text.lines().next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return (Response::plain(400, "bad request line\n"), false);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return (Response::plain(400, "bad request line\n"), false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let mut r = Response::plain(405, "only GET and HEAD are served\n");
        r.allow = true;
        return (r, false);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let response = match path {
        "/metrics" => Response {
            status: 200,
            content_type: CONTENT_TYPE,
            body: exposition::render(&snapshot()),
            allow: false,
        },
        "/" => Response {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: INDEX.to_string(),
            allow: false,
        },
        _ => Response::plain(404, "not found: the metrics are at /metrics\n"),
    };
    (response, head_only)
}

/// Where the head ends in `bytes` (after `\r\n\r\n`, or `\n\n` from lenient clients).
fn find_end(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find_map(|i| {
        let rest = &bytes[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    }
}

fn respond(mut stream: &TcpStream, response: &Response, head_only: bool) {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if response.allow {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&response.body);
    }
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_without_a_host_mean_localhost() {
        for a in ["9187", ":9187", " 9187 "] {
            assert_eq!(
                parse_addr(a),
                Ok(vec![
                    "127.0.0.1:9187".parse().unwrap_or_else(|e| panic!("{e}"))
                ]),
                "{a}"
            );
        }
    }

    #[test]
    fn hosts_v4_v6_and_names_parse() {
        let one = |a: &str| parse_addr(a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one("0.0.0.0:1")[0].to_string(), "0.0.0.0:1");
        assert_eq!(one("[::1]:9187")[0].to_string(), "[::1]:9187");
        assert_eq!(one("[::]:0")[0].to_string(), "[::]:0");
        assert!(one("localhost:9187").iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn bad_addresses_name_the_address_and_what_was_expected() {
        for (a, why) in [
            ("", "is not a port number"),
            ("abc", "is not a port number"),
            ("70000", "is not a port number"),
            ("127.0.0.1:", "is not a port number"),
            ("::1:9187", "brackets"),
            ("[::1:9187", "closing ']'"),
            ("[::1]x:9187", "closing ']'"),
            ("[nope]:9187", "is not an IPv6 address"),
            ("1.2.3:9187", "is not an IPv4 address"),
            ("256.0.0.1:9187", "is not an IPv4 address"),
            ("no-such-host.invalid:9187", "cannot resolve"),
        ] {
            let e = parse_addr(a)
                .err()
                .unwrap_or_else(|| panic!("{a:?} accepted"));
            assert!(
                e.starts_with(&format!("invalid metrics address {a:?}: ")),
                "{e}"
            );
            assert!(e.contains(why), "{a:?}: {e}");
            assert!(e.contains("expected PORT, HOST:PORT or [IPv6]:PORT"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn head_end_is_found_with_crlf_or_lf() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"), Some(27));
        assert_eq!(find_end(b"GET / HTTP/1.0\n\n"), Some(16));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn routes_by_method_and_path() {
        let snap: Snapshot = Arc::new(WatchStatus::default);
        let status = |head: &str| route(head.as_bytes(), &snap).0.status;
        assert_eq!(status("GET /metrics HTTP/1.1\r\n\r\n"), 200);
        assert_eq!(status("GET /metrics?x=1 HTTP/1.1\r\n\r\n"), 200);
        assert_eq!(status("GET / HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status("GET /other HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(status("POST /metrics HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(status("DELETE / HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(status("GET /metrics\r\n\r\n"), 400);
        assert_eq!(status("GET metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("\u{1}\u{2}\r\n\r\n"), 400);
        let (r, head_only) = route(b"HEAD /metrics HTTP/1.1\r\n\r\n", &snap);
        assert_eq!((r.status, head_only), (200, true));
    }
}
