//! Prometheus for the tests: a plain HTTP/1.0 client ([`get`], [`exchange`]), a free
//! port, Debian's `prometheus` package's tools ([`tool`]) and a real Prometheus server
//! ([`Prometheus`]) scraping one endpoint, asked through its HTTP API.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::need;

/// An HTTP response: status, headers (names lower-cased) and body.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers, names lower-cased.
    pub headers: BTreeMap<String, String>,
    /// The body, as text.
    pub body: String,
}

/// Sends `request` as is and reads the whole response (the server closes the connection).
pub fn exchange(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("{e}"));
    stream
        .write_all(request)
        .unwrap_or_else(|e| panic!("cannot send to {addr}: {e}"));
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("cannot read from {addr}: {e}"));
    let raw = String::from_utf8(raw).unwrap_or_else(|e| panic!("not UTF-8: {e}"));
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {raw:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `GET path` from `addr`.
pub fn get(addr: SocketAddr, path: &str) -> Reply {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: */*\r\n\r\n");
    exchange(addr, request.as_bytes())
}

/// A port nobody listens on now (the kernel's pick for 127.0.0.1:0, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// `/usr/bin/NAME` of Debian's `prometheus` package (`promtool`, `prometheus`), under the
/// rule of [`need`].
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = Path::new("/usr/bin").join(name);
    need(
        path.exists().then_some(path),
        &format!("{name} (Debian: apt-get install prometheus)"),
    )
}

/// A Prometheus server on a free port of 127.0.0.1 scraping one target every second, its
/// data and log in a directory of the caller's; killed when dropped.
pub struct Prometheus {
    child: Child,
    log: PathBuf,
    api: SocketAddr,
}

impl Prometheus {
    /// Starts `bin` in `dir` scraping `target` (job `watchdog`), with `rule_files` loaded.
    pub fn start(bin: &Path, dir: &Path, target: SocketAddr, rule_files: &[PathBuf]) -> Self {
        let config = dir.join("prometheus.yml");
        let rules: Vec<String> = rule_files
            .iter()
            .map(|r| format!("\"{}\"", r.display()))
            .collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files: [{}]\n\
                 scrape_configs:\n  - job_name: watchdog\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules.join(", ")
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let port = free_port();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let err_file = log_file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .current_dir(dir)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let api = SocketAddr::from(([127, 0, 0, 1], port));
        Prometheus { child, log, api }
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` from the server's HTTP API, or `None` while it is not listening yet.
    /// Panics, with its log, if the server has exited.
    pub fn get(&mut self, path: &str) -> Option<Reply> {
        if let Ok(Some(exit)) = self.child.try_wait() {
            panic!("prometheus exited ({exit}):\n{}", self.log());
        }
        TcpStream::connect_timeout(&self.api, Duration::from_secs(1)).ok()?;
        Some(get(self.api, path))
    }

    /// Asks `/api/v1/query?query=QUERY` every 500 ms until `accept` takes the body, for at
    /// most 60 s (start-up and the first scrapes compete for 2 busy cores); panics with the
    /// last answer and the log otherwise.
    pub fn wait_for_query(&mut self, query: &str, accept: impl Fn(&str) -> bool) -> String {
        let path = format!("/api/v1/query?query={}", url_encode(query));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::from("(no answer yet)");
        loop {
            if let Some(reply) = self.get(&path) {
                if reply.status == 200 && accept(&reply.body) {
                    return reply.body;
                }
                last = format!("{} {}", reply.status, reply.body);
            }
            assert!(
                Instant::now() < deadline,
                "prometheus never gave the wanted answer to {query:?}.\nlast answer: {last}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
