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

/// The queue to the action thread, which starts with the first action: most runs never
/// alert, and a service watching a hundred of them would otherwise hold a hundred idle
/// threads.
pub struct Actions {
    tx: Option<mpsc::Sender<Action>>,
    thread: Option<JoinHandle<()>>,
    /// The hooks the thread will run, until it is started.
    waiting: Option<Hooks>,
    notify: bool,
}

impl Actions {
    /// The queue; `notify` enables desktop notifications; hooks run through `hooks` (their
    /// process groups, timeout and outcomes).
    pub fn new(notify: bool, hooks: Hooks) -> Actions {
        Actions {
            tx: None,
            thread: None,
            waiting: Some(hooks),
            notify,
        }
    }

    /// Queues a hook run.
    pub fn hook(&mut self, cmd: String, env: Vec<(String, String)>) {
        self.send(Action::Hook { cmd, env });
    }

    /// Queues a desktop notification (when enabled).
    pub fn notify(&mut self, summary: String, body: String) {
        if self.notify {
            self.send(Action::Notify { summary, body });
        }
    }

    fn send(&mut self, action: Action) {
        if let Some(hooks) = self.waiting.take() {
            self.spawn(hooks);
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(action);
        }
    }

    fn spawn(&mut self, hooks: Hooks) {
        let (tx, rx) = mpsc::channel::<Action>();
        let thread = std::thread::Builder::new()
            .name("watchdog-actions".into())
            .spawn(move || serve(rx, hooks));
        match thread {
            Ok(handle) => {
                self.tx = Some(tx);
                self.thread = Some(handle);
            }
            Err(e) => {
                tracing::warn!(
                    "cannot start the action thread, hooks and notifications are off: {e}"
                );
            }
        }
    }

    /// Lets queued actions finish, waiting at most `timeout`.
    pub fn finish(&mut self, timeout: Duration) {
        self.tx = None;
        self.waiting = None;
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
