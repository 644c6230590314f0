//! Gathering requests from many connections on one thread, so that clients that connect
//! and say nothing cannot hold the server: the status socket and the metrics endpoint
//! both read their requests here and hand only complete ones to a thread.
//!
//! Every connection waiting for its request is non-blocking and polled together with the
//! listener; one that has sent nothing within the timeout is told so (by the caller) and
//! closed. At most `max_open` wait at once: a new one beyond that closes a silent one
//! (the oldest of the owner holding the most, so one user flooding the socket evicts its
//! own connections first), never refuses the newcomer. An honest client sends its request
//! as soon as it connects, so it is read long before it could become the oldest.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// What the caller gets back for a connection that has finished waiting.
#[derive(Debug)]
pub enum Arrived<S> {
    /// The request, up to and including its end.
    Complete(S, Vec<u8>),
    /// The client closed its side before the end of a request: what it sent.
    Closed(S, Vec<u8>),
    /// More than `max_bytes` without the end of a request.
    TooLong(S),
    /// Nothing complete within the timeout.
    TimedOut(S),
}

/// One connection still sending its request.
struct Waiting<S> {
    stream: S,
    owner: u32,
    bytes: Vec<u8>,
    since: Instant,
}

/// The connections still sending their requests.
pub struct Intake<S> {
    waiting: Vec<Waiting<S>>,
    max_open: usize,
    max_bytes: usize,
    timeout: Duration,
    end_of_request: fn(&[u8]) -> Option<usize>,
}

impl<S: io::Read + AsFd> Intake<S> {
    /// At most `max_open` connections waiting, each with `timeout` to send at most
    /// `max_bytes`; `end_of_request` finds where a request ends in what was received.
    pub fn new(
        max_open: usize,
        max_bytes: usize,
        timeout: Duration,
        end_of_request: fn(&[u8]) -> Option<usize>,
    ) -> Intake<S> {
        Intake {
            waiting: Vec::new(),
            max_open: max_open.max(1),
            max_bytes,
            timeout,
            end_of_request,
        }
    }

    /// How many connections are waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Takes a new, non-blocking connection of `owner` (a uid, or 0 when unknown). Returns
    /// the connection closed to make room, when `max_open` were already waiting.
    pub fn add(&mut self, stream: S, owner: u32) -> Option<S> {
        let evicted = (self.waiting.len() >= self.max_open)
            .then(|| self.evict())
            .flatten();
        self.waiting.push(Waiting {
            stream,
            owner,
            bytes: Vec::new(),
            since: Instant::now(),
        });
        evicted
    }

    /// Removes the oldest connection of the owner holding the most.
    fn evict(&mut self) -> Option<S> {
        let count = |owner: u32| self.waiting.iter().filter(|w| w.owner == owner).count();
        let greediest = self
            .waiting
            .iter()
            .map(|w| (count(w.owner), w.owner))
            .max_by_key(|&(n, _)| n)?
            .1;
        // `waiting` is in order of arrival: the first of that owner is its oldest.
        let at = self.waiting.iter().position(|w| w.owner == greediest)?;
        Some(self.waiting.remove(at).stream)
    }

    /// Waits up to `max_wait` for the listener or a waiting connection to be readable,
    /// reads what came, and returns whether the listener is readable and the connections
    /// that are done waiting.
    pub fn wait(
        &mut self,
        listener: BorrowedFd<'_>,
        max_wait: Duration,
    ) -> io::Result<(bool, Vec<Arrived<S>>)> {
        let now = Instant::now();
        let first_deadline = self.waiting.iter().map(|w| w.since + self.timeout).min();
        let wait =
            first_deadline.map_or(max_wait, |d| max_wait.min(d.saturating_duration_since(now)));
        let ts = Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let (listener_ready, readable) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + self.waiting.len());
            fds.push(PollFd::from_borrowed_fd(listener, PollFlags::IN));
            for w in &self.waiting {
                fds.push(PollFd::new(&w.stream, PollFlags::IN));
            }
            match poll(&mut fds, Some(&ts)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok((false, Vec::new())),
                Err(e) => return Err(e.into()),
            }
            let ready = |f: &PollFd<'_>| !f.revents().is_empty();
            let readable: Vec<bool> = fds[1..].iter().map(ready).collect();
            (ready(&fds[0]), readable)
        };
        let mut arrived = Vec::new();
        let now = Instant::now();
        let mut kept = Vec::with_capacity(self.waiting.len());
        let all = std::mem::take(&mut self.waiting);
        for (w, readable) in all
            .into_iter()
            .zip(readable.into_iter().chain(std::iter::repeat(false)))
        {
            let w = if readable {
                match self.read_some(w) {
                    Read::Done(done) => {
                        arrived.push(done);
                        continue;
                    }
                    // The client is gone or the socket failed: nobody to answer.
                    Read::Failed => continue,
                    Read::More(w) => w,
                }
            } else {
                w
            };
            if now >= w.since + self.timeout {
                arrived.push(Arrived::TimedOut(w.stream));
            } else {
                kept.push(w);
            }
        }
        self.waiting = kept;
        Ok((listener_ready, arrived))
    }

    /// Reads what is there without blocking.
    fn read_some(&self, mut w: Waiting<S>) -> Read<S> {
        let mut buf = [0u8; 4096];
        loop {
            let room = self.max_bytes + 1 - w.bytes.len().min(self.max_bytes);
            let want = buf.len().min(room);
            match w.stream.read(&mut buf[..want]) {
                Ok(0) => return Read::Done(Arrived::Closed(w.stream, w.bytes)),
                Ok(n) => {
                    let scan_from = w.bytes.len().saturating_sub(3);
                    w.bytes.extend_from_slice(&buf[..n]);
                    if let Some(end) = (self.end_of_request)(&w.bytes[scan_from..]) {
                        w.bytes.truncate(scan_from + end);
                        return Read::Done(Arrived::Complete(w.stream, w.bytes));
                    }
                    if w.bytes.len() > self.max_bytes {
                        return Read::Done(Arrived::TooLong(w.stream));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::More(w),
                Err(_) => return Read::Failed,
            }
        }
    }
}

/// What one non-blocking read of a waiting connection came to.
enum Read<S> {
    Done(Arrived<S>),
    More(Waiting<S>),
    Failed,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixStream;

    fn newline(bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|&b| b == b'\n').map(|i| i + 1)
    }

    /// Pairs of (server side, client side).
    fn pairs(n: usize) -> Vec<(UnixStream, UnixStream)> {
        (0..n)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                (a, b)
            })
            .collect()
    }

    #[test]
    fn beyond_the_limit_the_oldest_of_the_greediest_owner_is_closed() {
        let mut intake: Intake<UnixStream> = Intake::new(4, 64, Duration::from_secs(60), newline);
        let mut clients = Vec::new();
        for ((server, client), owner) in pairs(5).into_iter().zip([1000, 0, 1000, 1000, 0]) {
            let evicted = intake.add(server, owner);
            clients.push((client, evicted.is_some()));
        }
        assert_eq!(intake.len(), 4);
        // Only the fifth found the intake full; it closed uid 1000's first connection.
        let evicted: Vec<bool> = clients.iter().map(|c| c.1).collect();
        assert_eq!(evicted, [false, false, false, false, true]);
        let mut buf = [0u8; 1];
        clients[0].0.set_nonblocking(true).unwrap();
        // The first client (uid 1000's oldest) sees end-of-file: its server side is gone.
        assert_eq!((&clients[0].0).read(&mut buf).unwrap(), 0);
        clients[1].0.set_nonblocking(true).unwrap();
        assert!((&clients[1].0).read(&mut buf).is_err(), "root's was kept");
    }

    #[test]
    fn requests_are_gathered_whole_and_silent_ones_time_out() {
        let (listener, _l) = UnixStream::pair().unwrap();
        let mut intake: Intake<UnixStream> =
            Intake::new(8, 16, Duration::from_millis(300), newline);
        let mut clients = Vec::new();
        for (server, client) in pairs(4) {
            intake.add(server, 0);
            clients.push(client);
        }
        let [_silent, mut partial, mut whole, mut long] =
            <[UnixStream; 4]>::try_from(clients).unwrap();
        partial.write_all(b"{\"op\"").unwrap();
        whole.write_all(b"line one\nrest").unwrap();
        long.write_all(&[b'x'; 40]).unwrap();
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while !intake.is_empty() && Instant::now() < end {
            let (_, arrived) = intake
                .wait(listener.as_fd(), Duration::from_millis(50))
                .unwrap();
            got.extend(arrived.into_iter().map(|a| match a {
                Arrived::Complete(_, b) => format!("complete {}", String::from_utf8_lossy(&b)),
                Arrived::Closed(_, b) => format!("closed {}", String::from_utf8_lossy(&b)),
                Arrived::TooLong(_) => "too long".to_string(),
                Arrived::TimedOut(_) => "timed out".to_string(),
            }));
        }
        got.sort();
        assert_eq!(
            got,
            ["complete line one\n", "timed out", "timed out", "too long"]
        );
    }
}
