//! Asks the metadata server for a notice on a thread of its own: at start, then every
//! interval. The watchdog's loop never waits for the server; it reads what changed since it
//! last looked ([`NoticePoller::news`]).

use std::collections::HashSet;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use watchdog_types::outage::{Outage, Said};

use crate::answer::Notice;
use crate::ask::{Asker, NoticeError};
use crate::dmi::Provider;

/// The shortest interval between two questions (a zero interval would spin).
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// What changed since the last [`NoticePoller::news`].
#[derive(Clone, Debug, PartialEq)]
pub enum News {
    /// The provider announces the VM's end (said once per notice).
    Notice {
        /// Who announced it.
        provider: Provider,
        /// When the end comes, in unix seconds.
        deadline_unix: f64,
        /// What the provider said.
        detail: String,
    },
    /// The metadata server gave no usable answer (said once until it answers again).
    Unanswered(String),
    /// It answers again after not answering.
    Answered,
}

impl From<Notice> for News {
    fn from(n: Notice) -> News {
        News::Notice {
            provider: n.provider,
            deadline_unix: n.deadline_unix,
            detail: n.detail,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Notices read and not yet said, oldest first.
    pending: Vec<Notice>,
    /// The ids of the notices in the latest answer: read again, they are not said again.
    current: HashSet<String>,
    /// Whether the server answers, and what of it was said.
    outage: Outage,
    /// Questions asked, answered or not.
    asked: u64,
}

/// A provider's notice, kept fresh by a thread.
#[derive(Debug)]
pub struct NoticePoller {
    provider: Provider,
    base: String,
    state: Arc<Mutex<State>>,
    /// Dropped, it ends the thread (after the question in flight).
    stop: Option<Sender<()>>,
}

impl NoticePoller {
    /// Starts asking `provider`'s metadata server at `base_url` at once, then every
    /// `interval` (at least 10 ms). Returns at once; the first answer comes later.
    pub fn start(provider: Provider, base_url: &str, interval: Duration) -> NoticePoller {
        let interval = interval.max(MIN_INTERVAL);
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = mpsc::channel::<()>();
        let mut asker = Asker::new(provider, base_url);
        let base = asker.base_url().to_owned();
        let shared = state.clone();
        let spawned = std::thread::Builder::new()
            .name("watchdog-notice".into())
            .spawn(move || {
                loop {
                    let answer = asker.ask();
                    record(&shared, answer);
                    match stopped.recv_timeout(interval) {
                        Ok(()) | Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            });
        if let Err(e) = spawned {
            record_error(
                &state,
                format!("cannot start the thread that asks for {provider}'s notice: {e}"),
            );
        }
        NoticePoller {
            provider,
            base,
            state,
            stop: Some(stop),
        }
    }

    /// The provider asked.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The base URL asked.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// How many questions the thread has finished (answered or not).
    pub fn asked(&self) -> u64 {
        self.lock().asked
    }

    /// What changed since the last call, oldest first: each notice once, a failure once
    /// until the server answers again, then `Answered`. Never waits for the server.
    pub fn news(&self) -> Vec<News> {
        let mut s = self.lock();
        let mut out: Vec<News> = s
            .outage
            .news()
            .into_iter()
            .map(|said| match said {
                Said::Unanswered(why) => News::Unanswered(why),
                Said::Answered => News::Answered,
            })
            .collect();
        out.extend(s.pending.drain(..).map(News::from));
        out
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps one answer: a notice not in the previous answer becomes pending; an error is kept
/// to be said once.
fn record(state: &Mutex<State>, answer: Result<Option<Notice>, NoticeError>) {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    s.asked += 1;
    match answer {
        Ok(notice) => {
            s.outage.answered();
            let mut current = HashSet::new();
            if let Some(n) = notice {
                current.insert(n.id.clone());
                if !s.current.contains(&n.id) {
                    s.pending.push(n);
                }
            }
            // A notice gone from the answer is forgotten: if it comes back, it is said again.
            s.current = current;
        }
        Err(e) => s.outage.failed(e.to_string()),
    }
}

fn record_error(state: &Mutex<State>, text: String) {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    s.outage.failed(text);
}

impl Drop for NoticePoller {
    fn drop(&mut self) {
        // Not joined: a question in flight may take its timeout (2 s).
        drop(self.stop.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(id: &str, deadline_unix: f64) -> Notice {
        Notice {
            provider: Provider::Gce,
            deadline_unix,
            detail: id.into(),
            id: id.into(),
        }
    }

    fn poller_over(state: Arc<Mutex<State>>) -> NoticePoller {
        NoticePoller {
            provider: Provider::Gce,
            base: "http://test.invalid".into(),
            state,
            stop: None,
        }
    }

    #[test]
    fn a_notice_is_said_once_and_again_only_after_it_went_away() {
        let state = Arc::new(Mutex::new(State::default()));
        let poller = poller_over(state.clone());
        record(&state, Ok(None));
        assert_eq!(poller.news(), vec![]);
        record(&state, Ok(Some(notice("a", 100.0))));
        // Read again with a later deadline (GCE's is "now + 30 s"): not said again.
        record(&state, Ok(Some(notice("a", 105.0))));
        assert_eq!(poller.news(), vec![News::from(notice("a", 100.0))]);
        record(&state, Ok(Some(notice("a", 110.0))));
        assert_eq!(poller.news(), vec![]);
        // A failed question does not forget it.
        record(&state, Err(NoticeError::TooLong { url: "u".into() }));
        record(&state, Ok(Some(notice("a", 115.0))));
        let news = poller.news();
        assert!(
            !news.iter().any(|n| matches!(n, News::Notice { .. })),
            "{news:?}"
        );
        // Gone, then back: a new notice.
        record(&state, Ok(None));
        record(&state, Ok(Some(notice("a", 120.0))));
        assert_eq!(poller.news(), vec![News::from(notice("a", 120.0))]);
    }

    #[test]
    fn a_notice_seen_between_two_looks_is_not_lost() {
        let state = Arc::new(Mutex::new(State::default()));
        let poller = poller_over(state.clone());
        record(&state, Ok(Some(notice("a", 100.0))));
        record(&state, Ok(None));
        assert_eq!(poller.news(), vec![News::from(notice("a", 100.0))]);
    }

    #[test]
    fn a_failure_is_said_once_until_it_answers_again() {
        let state = Arc::new(Mutex::new(State::default()));
        let poller = poller_over(state.clone());
        let fail = || Err(NoticeError::TooLong { url: "u".into() });
        record(&state, fail());
        let news = poller.news();
        assert!(matches!(news.as_slice(), [News::Unanswered(_)]), "{news:?}");
        record(&state, fail());
        assert_eq!(poller.news(), vec![]);
        record(&state, Ok(None));
        assert_eq!(poller.news(), vec![News::Answered]);
        assert_eq!(poller.news(), vec![]);
        assert_eq!(poller.asked(), 3);
    }
}
