//! A tiny metadata server on 127.0.0.1 for each provider, answering as the provider
//! documents: "no notice" until told to announce an end with a deadline, then the notice.
//! Real HTTP/1.1 over a real socket, one request per connection, on a thread of its own.

#![allow(dead_code)] // Shared by the tests and the cost example; each uses part of it.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use watchdog_notice::Provider;

/// The IMDSv2 token this server hands out.
pub const AWS_TOKEN: &str = "AQAEAFakeTokenForTests==";

/// One request as read.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub target: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server has seen and what it announces.
#[derive(Default)]
pub struct Seen {
    pub connections: AtomicUsize,
    pub tokens: AtomicUsize,
    /// Requests refused for a missing or wrong header (the token, the flavor...).
    pub refused: AtomicUsize,
    /// Answer HTTP 503 to everything while set.
    pub broken: AtomicBool,
    /// The deadline announced, in unix seconds; `None`: no notice.
    pub deadline: Mutex<Option<f64>>,
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

impl Server {
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, announce an end at `deadline_unix`.
    pub fn announce(&self, deadline_unix: f64) {
        *self
            .seen
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(deadline_unix);
    }
}

/// Starts a server answering as `provider`'s metadata server does.
pub fn serve(provider: Provider) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local addr");
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            shared.connections.fetch_add(1, Ordering::SeqCst);
            let _ = handle(stream, provider, &shared);
        }
    });
    Server { addr, seen }
}

/// A listener that is bound and never accepts: the kernel completes the handshake into the
/// backlog, and no answer ever comes. Kept alive by the caller.
pub fn silent() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    (listener, base)
}

/// A server that reads every request and never answers it, holding its connection open:
/// each question to it stays in flight until the client gives up (its timeout) and closes
/// the connection, which is seen from here ([`Holding::open`]).
pub struct Holding {
    pub base: String,
    /// The connections, in the order their requests were read.
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Holding {
    /// How many requests it has read.
    pub fn requests(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether the client still holds request `i`'s connection open (0: the first request
    /// read): the question is still in flight. Once closed, a connection stays closed.
    pub fn open(&self, i: usize) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(stream) = held.get(i) else {
            return false;
        };
        stream.set_nonblocking(true).expect("nonblocking");
        match stream.peek(&mut [0u8; 1]) {
            // Nothing to read and no end of stream: the client waits.
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            // 0: the client closed it (more bytes would be a second request on it).
            Ok(n) => n > 0,
        }
    }
}

/// Starts a [`Holding`] server.
pub fn holding() -> Holding {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    let held = Arc::new(Mutex::new(Vec::new()));
    let shared = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The request is read whole before it counts (a client sends it at once).
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = read_request(&mut stream);
            shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(stream);
        }
    });
    Holding { base, held }
}

/// A listener that counts the connections made to it and answers none.
pub fn counting() -> (Arc<AtomicUsize>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let shared = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            shared.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (count, base)
}

fn handle(mut stream: TcpStream, provider: Provider, seen: &Seen) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let request = read_request(&mut stream)?;
    let deadline = *seen.deadline.lock().unwrap_or_else(PoisonError::into_inner);
    let (status, headers, body) = if seen.broken.load(Ordering::SeqCst) {
        (503, vec![], "unavailable".to_owned())
    } else {
        match provider {
            Provider::Gce => gce(&request, deadline, seen),
            Provider::Aws => aws(&request, deadline, seen),
            Provider::Azure => azure(&request, deadline, seen),
        }
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Other",
    };
    let mut text = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(&body);
    stream.write_all(text.as_bytes())
}

fn read_request(stream: &mut TcpStream) -> std::io::Result<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_owned();
    let target = first.next().unwrap_or("").to_owned();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Request {
        method,
        target,
        headers,
    })
}

type Answer = (u16, Vec<(&'static str, String)>, String);

/// GCE: `Metadata-Flavor: Google` asked and answered; `preempted` TRUE once announced.
fn gce(r: &Request, deadline: Option<f64>, seen: &Seen) -> Answer {
    let flavor = vec![("Metadata-Flavor", "Google".to_owned())];
    if r.header("metadata-flavor") != Some("Google") {
        seen.refused.fetch_add(1, Ordering::SeqCst);
        return (403, flavor, "Missing Metadata-Flavor:Google header.".into());
    }
    match (r.method.as_str(), r.target.as_str()) {
        ("GET", "/computeMetadata/v1/instance/preempted") => {
            let v = if deadline.is_some() { "TRUE" } else { "FALSE" };
            (200, flavor, v.into())
        }
        ("GET", "/computeMetadata/v1/instance/maintenance-event") => (200, flavor, "NONE".into()),
        _ => (404, flavor, "Not Found".into()),
    }
}

/// AWS IMDSv2: a token by PUT, the GET refused without it; 404 until announced.
fn aws(r: &Request, deadline: Option<f64>, seen: &Seen) -> Answer {
    match (r.method.as_str(), r.target.as_str()) {
        ("PUT", "/latest/api/token") => {
            if r.header("x-aws-ec2-metadata-token-ttl-seconds").is_none() {
                seen.refused.fetch_add(1, Ordering::SeqCst);
                return (400, vec![], String::new());
            }
            seen.tokens.fetch_add(1, Ordering::SeqCst);
            (200, vec![], AWS_TOKEN.into())
        }
        ("GET", "/latest/meta-data/spot/instance-action") => {
            if r.header("x-aws-ec2-metadata-token") != Some(AWS_TOKEN) {
                seen.refused.fetch_add(1, Ordering::SeqCst);
                return (401, vec![], String::new());
            }
            match deadline {
                None => (404, vec![], "Not Found".into()),
                Some(d) => {
                    let time = jiff::Timestamp::from_second(d as i64).expect("a time");
                    let body = format!(r#"{{"action": "terminate", "time": "{time}"}}"#);
                    (200, vec![("Content-Type", "text/plain".into())], body)
                }
            }
        }
        _ => (404, vec![], String::new()),
    }
}

/// Azure: `Metadata: true` required; a `Preempt` event once announced.
fn azure(r: &Request, deadline: Option<f64>, seen: &Seen) -> Answer {
    if r.header("metadata") != Some("true") {
        seen.refused.fetch_add(1, Ordering::SeqCst);
        return (
            400,
            vec![],
            r#"{"error":"Bad request. Required metadata header not specified"}"#.into(),
        );
    }
    if r.method != "GET" || r.target != "/metadata/scheduledevents?api-version=2020-07-01" {
        return (404, vec![], String::new());
    }
    let json = vec![("Content-Type", "application/json; charset=utf-8".to_owned())];
    match deadline {
        None => (200, json, r#"{"DocumentIncarnation":1,"Events":[]}"#.into()),
        Some(d) => {
            let at = jiff::Timestamp::from_second(d as i64).expect("a time");
            let not_before = jiff::fmt::rfc2822::DateTimePrinter::new()
                .timestamp_to_rfc9110_string(&at)
                .expect("an RFC 1123 date");
            let body = format!(
                r#"{{"DocumentIncarnation":2,"Events":[{{"EventId":"602d9444-d2cd-49c7-8624-8643e7171297","EventStatus":"Scheduled","EventType":"Preempt","ResourceType":"VirtualMachine","Resources":["vm1"],"NotBefore":"{not_before}","Description":"","EventSource":"Platform","DurationInSeconds":-1}}]}}"#
            );
            (200, json, body)
        }
    }
}
