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
    thread: Thread,
    notify: bool,
}

/// Where the action thread is in its life.
enum Thread {
    /// Not started: the hooks it will run.
    NotYet(Hooks),
    /// Running, fed through `tx`.
    Started {
        tx: mpsc::Sender<Action>,
        handle: JoinHandle<()>,
    },
    /// Finished, or could not be started: actions are dropped.
    Off,
}

impl Actions {
    /// The queue; `notify` enables desktop notifications; hooks run through `hooks` (their
    /// process groups, timeout and outcomes).
    pub fn new(notify: bool, hooks: Hooks) -> Actions {
        Actions {
            thread: Thread::NotYet(hooks),
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
        self.thread = match std::mem::replace(&mut self.thread, Thread::Off) {
            Thread::NotYet(hooks) => spawn(hooks),
            other => other,
        };
        if let Thread::Started { tx, .. } = &self.thread {
            let _ = tx.send(action);
        }
    }

    /// Lets queued actions finish, waiting at most `timeout`.
    pub fn finish(&mut self, timeout: Duration) {
        if let Thread::Started { tx, handle } = std::mem::replace(&mut self.thread, Thread::Off) {
            // Without a sender the thread's loop ends once the queue is empty.
            drop(tx);
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

/// Starts the action thread with `hooks`; [`Thread::Off`] when the system refuses a thread.
fn spawn(hooks: Hooks) -> Thread {
    let (tx, rx) = mpsc::channel::<Action>();
    let thread = std::thread::Builder::new()
        .name("watchdog-actions".into())
        .spawn(move || serve(rx, hooks));
    match thread {
        Ok(handle) => Thread::Started { tx, handle },
        Err(e) => {
            tracing::warn!("cannot start the action thread, hooks and notifications are off: {e}");
            Thread::Off
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
