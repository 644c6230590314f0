//! The slow half of an alert, on its own thread: hooks (`--on-alert`) and desktop
//! notifications. The poll loop only queues them, so a hook that takes seconds or a
//! session bus that never answers cannot delay the next sample.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use watchdog_alerter::hook::Hooks;
use watchdog_alerter::notify::Notifier;

/// How long a desktop notification may take before it is given up.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

enum Action {
    Hook {
        cmd: String,
        env: Vec<(String, String)>,
    },
    Notify {
        summary: String,
        body: String,
    },
}

/// The queue to the action thread.
pub struct Actions {
    tx: Option<mpsc::Sender<Action>>,
    thread: Option<JoinHandle<()>>,
    notify: bool,
}

impl Actions {
    /// Starts the action thread; `notify` enables desktop notifications; hooks run
    /// through `hooks` (their process groups, timeout and outcomes).
    pub fn start(notify: bool, hooks: Hooks) -> Actions {
        let (tx, rx) = mpsc::channel::<Action>();
        let thread = std::thread::Builder::new()
            .name("watchdog-actions".into())
            .spawn(move || serve(rx, hooks));
        match thread {
            Ok(handle) => Actions {
                tx: Some(tx),
                thread: Some(handle),
                notify,
            },
            Err(e) => {
                tracing::warn!(
                    "cannot start the action thread, hooks and notifications are off: {e}"
                );
                Actions {
                    tx: None,
                    thread: None,
                    notify: false,
                }
            }
        }
    }

    /// Queues a hook run.
    pub fn hook(&self, cmd: String, env: Vec<(String, String)>) {
        self.send(Action::Hook { cmd, env });
    }

    /// Queues a desktop notification (when enabled).
    pub fn notify(&self, summary: String, body: String) {
        if self.notify {
            self.send(Action::Notify { summary, body });
        }
    }

    fn send(&self, action: Action) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(action);
        }
    }

    /// Lets queued actions finish, waiting at most `timeout`.
    pub fn finish(&mut self, timeout: Duration) {
        self.tx = None;
        if let Some(handle) = self.thread.take() {
            let deadline = std::time::Instant::now() + timeout;
            while !handle.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

fn serve(rx: mpsc::Receiver<Action>, hooks: Hooks) {
    let mut notifier = None;
    for action in rx {
        match action {
            Action::Hook { cmd, env } => {
                if let Err(e) = hooks.run(&cmd, &env) {
                    tracing::warn!("{e}");
                }
            }
            Action::Notify { summary, body } => {
                let notifier = notifier.get_or_insert_with(Notifier::new);
                if let Err(e) = notifier.show(&summary, &body, NOTIFY_TIMEOUT) {
                    tracing::debug!("desktop notification not shown: {e}");
                }
            }
        }
    }
}
