//! The systemd notification protocol (`sd_notify(3)`), for `Type=notify` and `WatchdogSec=`.
//!
//! The service tells systemd when it is ready (`READY=1`), what it is doing (`STATUS=`),
//! that it is reloading (`RELOADING=1` with `MONOTONIC_USEC=`, as systemd 253+ wants;
//! 252 ignores the extra line) or stopping (`STOPPING=1`), and that it is alive
//! (`WATCHDOG=1`, at half of `WATCHDOG_USEC`). Each message is one datagram of
//! `KEY=value` lines sent to the socket named by `NOTIFY_SOCKET`: a path, or `@name` for
//! an abstract socket.
//!
//! This module reads no environment variable: the values come from
//! [`watchdog_config::Host`] (see [`ServiceNotifier::from_host`]), so tests give their
//! own. Without a socket every call is a no-op that returns `Ok`. The clock is a
//! parameter too ([`ServiceNotifier::keepalive_due`]), so the keep-alive cadence is
//! tested without sleeping. Why this is ~40 lines of std rather than the `sd-notify`
//! crate: docs/service.md.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use watchdog_config::Host;

/// A value systemd put in the environment that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyError {
    /// The variable (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`).
    pub var: &'static str,
    /// Its value, lossily decoded.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for NotifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} '{}': expected {}",
            self.var, self.value, self.expected
        )
    }
}

impl std::error::Error for NotifyError {}

/// Talks to systemd's notification socket, or does nothing when there is none.
#[derive(Debug)]
pub struct ServiceNotifier {
    /// The socket, unbound, and where to send; `None` outside systemd.
    target: Option<(UnixDatagram, SocketAddr)>,
    /// How often to send `WATCHDOG=1` (half of `WATCHDOG_USEC`); `None` when systemd
    /// does not expect it from this process.
    keepalive_every: Option<Duration>,
    /// When `WATCHDOG=1` was last sent.
    last_keepalive: Option<Instant>,
}

impl ServiceNotifier {
    /// A notifier that sends nothing (not under systemd, or its values were unusable).
    pub fn disabled() -> ServiceNotifier {
        ServiceNotifier {
            target: None,
            keepalive_every: None,
            last_keepalive: None,
        }
    }

    /// From the values [`Host::from_env`] read.
    pub fn from_host(host: &Host) -> Result<ServiceNotifier, NotifyError> {
        ServiceNotifier::from_env_values(
            host.notify_socket.clone(),
            host.watchdog_usec.clone(),
            host.watchdog_pid.clone(),
        )
    }

    /// From the values of `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`, for this
    /// process. An empty or missing `NOTIFY_SOCKET` gives a notifier that sends nothing.
    pub fn from_env_values(
        notify_socket: Option<OsString>,
        watchdog_usec: Option<String>,
        watchdog_pid: Option<String>,
    ) -> Result<ServiceNotifier, NotifyError> {
        ServiceNotifier::for_pid(
            std::process::id(),
            notify_socket,
            watchdog_usec,
            watchdog_pid,
        )
    }

    /// [`from_env_values`](Self::from_env_values) as if this process were `pid`.
    pub fn for_pid(
        pid: u32,
        notify_socket: Option<OsString>,
        watchdog_usec: Option<String>,
        watchdog_pid: Option<String>,
    ) -> Result<ServiceNotifier, NotifyError> {
        let Some(socket) = notify_socket.filter(|s| !s.is_empty()) else {
            return Ok(ServiceNotifier::disabled());
        };
        let addr = socket_addr(&socket)?;
        let keepalive_every = keepalive_period(pid, watchdog_usec, watchdog_pid)?;
        // Non-blocking: a manager that stops reading fills the socket's queue (ten datagrams
        // by default), and the loop must never wait for it; a send that would wait is dropped.
        let sock = UnixDatagram::unbound()
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| NotifyError {
                var: "NOTIFY_SOCKET",
                value: socket.to_string_lossy().into_owned(),
                expected: socket_failure(&e),
            })?;
        Ok(ServiceNotifier {
            target: Some((sock, addr)),
            keepalive_every,
            last_keepalive: None,
        })
    }

    /// Whether there is a socket to talk to.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often `WATCHDOG=1` is sent (half of `WATCHDOG_USEC`), when systemd expects it
    /// from this process.
    pub fn keepalive_every(&self) -> Option<Duration> {
        self.target.as_ref().and(self.keepalive_every)
    }

    /// `READY=1` with a status line: start-up (or a reload) is complete.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// `STATUS=...`, shown by `systemctl status` ("watching 3 runs").
    pub fn status(&self, text: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}", one_line(text)))
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=` (`CLOCK_MONOTONIC` now): the configuration is
    /// being reloaded; send [`ready`](Self::ready) when done.
    pub fn reloading(&self) -> io::Result<()> {
        if self.target.is_none() {
            return Ok(());
        }
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()))
    }

    /// `STOPPING=1`: the service is shutting down.
    pub fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1")
    }

    /// Whether `WATCHDOG=1` is due at `now`: systemd expects it from this process and
    /// none was sent in the last half of `WATCHDOG_USEC` (the first one is due at once).
    pub fn keepalive_due(&self, now: Instant) -> bool {
        match (self.keepalive_every(), self.last_keepalive) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(every), Some(last)) => now.saturating_duration_since(last) >= every,
        }
    }

    /// When the next `WATCHDOG=1` is due (`now` if none was sent yet), for a loop that
    /// sleeps until then.
    pub fn next_keepalive(&self, now: Instant) -> Option<Instant> {
        let every = self.keepalive_every()?;
        Some(self.last_keepalive.map_or(now, |t| t + every))
    }

    /// Sends `WATCHDOG=1` and remembers `now` as the time it was sent. A no-op when
    /// systemd does not expect it from this process.
    pub fn keepalive(&mut self, now: Instant) -> io::Result<()> {
        if self.keepalive_every().is_none() {
            return Ok(());
        }
        self.last_keepalive = Some(now);
        self.send("WATCHDOG=1")
    }

    /// Sends one datagram.
    fn send(&self, message: &str) -> io::Result<()> {
        let Some((sock, addr)) = &self.target else {
            return Ok(());
        };
        sock.send_to_addr(message.as_bytes(), addr).map(|_| ())
    }
}

/// `NOTIFY_SOCKET` as an address: an absolute path, or `@name` for an abstract socket.
fn socket_addr(value: &OsStr) -> Result<SocketAddr, NotifyError> {
    let bytes = value.as_bytes();
    let bad = |expected| NotifyError {
        var: "NOTIFY_SOCKET",
        value: value.to_string_lossy().into_owned(),
        expected,
    };
    match bytes.first() {
        Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..])
            .map_err(|_| bad("an abstract socket name of at most 107 bytes after '@'")),
        Some(b'/') => {
            SocketAddr::from_pathname(value).map_err(|_| bad("a socket path of at most 107 bytes"))
        }
        _ => Err(bad("an absolute socket path or '@' and an abstract name")),
    }
}

/// Half of `WATCHDOG_USEC` when the keep-alive is expected from `pid`: `WATCHDOG_PID`
/// is unset or names `pid` (systemd sets it to the main process; a child that inherited
/// the environment must not answer for it).
fn keepalive_period(
    pid: u32,
    usec: Option<String>,
    watchdog_pid: Option<String>,
) -> Result<Option<Duration>, NotifyError> {
    let Some(usec) = usec.filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    let micros = usec
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| NotifyError {
            var: "WATCHDOG_USEC",
            value: usec.clone(),
            expected: "a positive number of microseconds",
        })?;
    if let Some(wpid) = watchdog_pid.filter(|s| !s.trim().is_empty()) {
        let named = wpid
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| NotifyError {
                var: "WATCHDOG_PID",
                value: wpid.clone(),
                expected: "a process id",
            })?;
        if named != pid {
            return Ok(None);
        }
    }
    Ok(Some(Duration::from_micros(micros) / 2))
}

/// A status value on one line: each line of a notification is one `KEY=value`.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// `CLOCK_MONOTONIC` in microseconds, the clock systemd compares `MONOTONIC_USEC=` with.
fn monotonic_usec() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u128::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u128::try_from(t.tv_nsec).unwrap_or(0);
    secs * 1_000_000 + nanos / 1_000
}

/// Why a datagram socket could not be made, as a static phrase for [`NotifyError`].
fn socket_failure(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => "a socket this process may create (permission denied)",
        _ => "a socket this process can create (socket(AF_UNIX, SOCK_DGRAM) failed)",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::net::UnixDatagram;

    /// A socket bound where systemd's would be, and the notifier pointed at it.
    struct Listener {
        sock: UnixDatagram,
        _dir: Option<tempfile::TempDir>,
        env: OsString,
    }

    impl Listener {
        fn at_path() -> Listener {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("notify");
            let sock = UnixDatagram::bind(&path).unwrap();
            Listener {
                sock,
                _dir: Some(dir),
                env: path.into_os_string(),
            }
        }

        fn abstract_() -> Listener {
            let name = format!("wd-test-notify-{}-{:?}", std::process::id(), Instant::now());
            let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            let sock = UnixDatagram::bind_addr(&addr).unwrap();
            Listener {
                sock,
                _dir: None,
                env: OsString::from(format!("@{name}")),
            }
        }

        fn notifier(&self, usec: Option<&str>, wpid: Option<&str>) -> ServiceNotifier {
            ServiceNotifier::from_env_values(
                Some(self.env.clone()),
                usec.map(str::to_string),
                wpid.map(str::to_string),
            )
            .unwrap()
        }

        /// Every datagram waiting, without blocking.
        fn received(&self) -> Vec<String> {
            self.sock.set_nonblocking(true).unwrap();
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match self.sock.recv(&mut buf) {
                    Ok(n) => out.push(String::from_utf8(buf[..n].to_vec()).unwrap()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
    }

    #[test]
    fn ready_status_stopping_reach_a_path_socket_exactly() {
        let l = Listener::at_path();
        let n = l.notifier(None, None);
        assert!(n.enabled());
        n.ready("watching 3 runs").unwrap();
        n.status("watching 2 runs\nand a newline").unwrap();
        n.stopping().unwrap();
        assert_eq!(
            l.received(),
            [
                "READY=1\nSTATUS=watching 3 runs",
                "STATUS=watching 2 runs and a newline",
                "STOPPING=1",
            ]
        );
    }

    #[test]
    fn an_abstract_socket_receives_the_same() {
        let l = Listener::abstract_();
        let n = l.notifier(None, None);
        n.ready("watching 0 runs").unwrap();
        n.stopping().unwrap();
        assert_eq!(
            l.received(),
            ["READY=1\nSTATUS=watching 0 runs", "STOPPING=1"]
        );
    }

    #[test]
    fn reloading_sends_the_monotonic_clock() {
        let l = Listener::at_path();
        let n = l.notifier(None, None);
        let before = monotonic_usec();
        n.reloading().unwrap();
        let after = monotonic_usec();
        let got = l.received();
        assert_eq!(got.len(), 1, "{got:?}");
        let usec: u128 = got[0]
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap_or_else(|| panic!("unexpected message {:?}", got[0]))
            .parse()
            .unwrap();
        assert!(
            before <= usec && usec <= after,
            "{before} <= {usec} <= {after}"
        );
        // Reload done: ready again.
        n.ready("watching 1 run").unwrap();
        assert_eq!(l.received(), ["READY=1\nSTATUS=watching 1 run"]);
    }

    #[test]
    fn keepalive_is_sent_at_half_of_watchdog_usec() {
        let l = Listener::at_path();
        // WatchdogSec=10s: a keep-alive every 5 s.
        let mut n = l.notifier(Some("10000000"), None);
        assert_eq!(n.keepalive_every(), Some(Duration::from_secs(5)));
        let t0 = Instant::now();
        let mut sent_at = Vec::new();
        // Drive the loop every 250 ms of simulated time for 21 s.
        for step in 0..=84u32 {
            let now = t0 + Duration::from_millis(250) * step;
            if n.keepalive_due(now) {
                n.keepalive(now).unwrap();
                sent_at.push(now - t0);
            }
        }
        let secs: Vec<u64> = sent_at.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [0, 5, 10, 15, 20]);
        assert_eq!(l.received(), vec!["WATCHDOG=1"; 5]);
        assert_eq!(
            n.next_keepalive(t0),
            Some(t0 + Duration::from_secs(25)),
            "the next one is due half a period after the last"
        );
    }

    #[test]
    fn keepalive_waits_for_a_late_tick_then_restarts_the_period() {
        let l = Listener::at_path();
        let mut n = l.notifier(Some("2000000"), Some(&std::process::id().to_string()));
        let t0 = Instant::now();
        assert!(n.keepalive_due(t0));
        n.keepalive(t0).unwrap();
        assert!(!n.keepalive_due(t0 + Duration::from_millis(999)));
        // The loop was late: sent at 1.7 s, the next is due at 2.7 s, not 2 s.
        let late = t0 + Duration::from_millis(1700);
        assert!(n.keepalive_due(late));
        n.keepalive(late).unwrap();
        assert!(!n.keepalive_due(t0 + Duration::from_millis(2600)));
        assert!(n.keepalive_due(t0 + Duration::from_millis(2700)));
        assert_eq!(l.received(), ["WATCHDOG=1", "WATCHDOG=1"]);
    }

    #[test]
    fn keepalive_is_not_ours_when_watchdog_pid_names_another_process() {
        let l = Listener::at_path();
        let other = (std::process::id() + 1).to_string();
        let mut n = l.notifier(Some("10000000"), Some(&other));
        assert_eq!(n.keepalive_every(), None);
        let now = Instant::now();
        assert!(!n.keepalive_due(now));
        n.keepalive(now).unwrap();
        n.ready("still ready").unwrap();
        assert_eq!(l.received(), ["READY=1\nSTATUS=still ready"]);
    }

    #[test]
    fn no_socket_makes_every_call_a_no_op() {
        for socket in [None, Some(OsString::new())] {
            let mut n =
                ServiceNotifier::from_env_values(socket, Some("10000000".into()), None).unwrap();
            assert!(!n.enabled());
            assert_eq!(n.keepalive_every(), None);
            assert!(!n.keepalive_due(Instant::now()));
            assert_eq!(n.next_keepalive(Instant::now()), None);
            n.ready("x").unwrap();
            n.status("x").unwrap();
            n.reloading().unwrap();
            n.stopping().unwrap();
            n.keepalive(Instant::now()).unwrap();
        }
    }

    /// Regression: a listener that stopped reading blocked the daemon's loop on the
    /// eleventh message (the default `max_dgram_qlen` is 10).
    #[test]
    fn a_listener_that_stops_reading_never_blocks_a_send() {
        let listener = Listener::at_path();
        let n = listener.notifier(None, None);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let refused = (0..1000)
                .filter(|i| n.status(&format!("{i}")).is_err())
                .count();
            let _ = tx.send(refused);
        });
        let refused = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a send blocked");
        assert!(refused > 0, "the queue never filled");
        assert!(listener.received().len() >= 10);
    }

    #[test]
    fn a_socket_nobody_listens_on_is_an_error_of_the_send_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let n = ServiceNotifier::from_env_values(
            Some(dir.path().join("gone").into_os_string()),
            None,
            None,
        )
        .unwrap();
        assert!(n.ready("x").is_err());
    }

    #[test]
    fn bad_values_name_the_variable_and_what_was_expected() {
        let sock = || Some(OsString::from("/run/systemd/notify"));
        /// NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID, and the error expected.
        type Case = (
            Option<OsString>,
            Option<&'static str>,
            Option<&'static str>,
            &'static str,
        );
        let cases: [Case; 5] = [
            (
                Some(OsString::from("run/notify")),
                None,
                None,
                "invalid NOTIFY_SOCKET 'run/notify': expected an absolute socket path or '@' and an abstract name",
            ),
            (
                Some(OsString::from(format!("/{}", "x".repeat(200)))),
                None,
                None,
                "expected a socket path of at most 107 bytes",
            ),
            (
                sock(),
                Some("ten"),
                None,
                "invalid WATCHDOG_USEC 'ten': expected a positive number of microseconds",
            ),
            (
                sock(),
                Some("0"),
                None,
                "invalid WATCHDOG_USEC '0': expected a positive number of microseconds",
            ),
            (
                sock(),
                Some("1000"),
                Some("-3"),
                "invalid WATCHDOG_PID '-3': expected a process id",
            ),
        ];
        for (socket, usec, wpid, want) in cases {
            let err = ServiceNotifier::from_env_values(
                socket,
                usec.map(str::to_string),
                wpid.map(str::to_string),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
    }

    #[test]
    fn from_host_uses_the_hosts_values() {
        let l = Listener::at_path();
        let mut host = Host::from_env();
        host.notify_socket = Some(l.env.clone());
        host.watchdog_usec = Some("4000000".into());
        host.watchdog_pid = Some(std::process::id().to_string());
        let n = ServiceNotifier::from_host(&host).unwrap();
        assert_eq!(n.keepalive_every(), Some(Duration::from_secs(2)));
        n.status("from host").unwrap();
        assert_eq!(l.received(), ["STATUS=from host"]);
    }
}
