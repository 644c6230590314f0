//! Desktop notifications, when a session bus is there, always under a timeout.
//!
//! notify-rust talks D-Bus through zbus. With no bus it fails in under a millisecond,
//! but a bus socket that accepts the connection and never answers would block forever,
//! so every call goes through `tokio::time::timeout`. On a headless machine (no
//! `DBUS_SESSION_BUS_ADDRESS` and no `/run/user/UID/bus`) the call is skipped with one
//! debug line. [`spawn_notify`] runs it on its own thread and runtime so a caller that
//! is not async (or must not wait) can fire and forget; a [`Notifier`] keeps one runtime
//! for many notifications on a thread of its own.
//!
//! All of this is the `notify` cargo feature (on by default; tokio and zbus are the
//! slowest part of the build). Without it (`--no-default-features`, a headless build)
//! nothing of D-Bus is built: [`UNAVAILABLE`] says why, and a [`Notifier`] says it once
//! and returns [`NotifyOutcome::NotBuilt`].

use std::path::PathBuf;
use std::time::Duration;

/// Why this build cannot show desktop notifications, or `None` when it can.
pub const UNAVAILABLE: Option<&str> = if cfg!(feature = "notify") {
    None
} else {
    Some("this watchdog was built without the `notify` feature (--no-default-features)")
};

/// What happened to a notification that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// The notification server accepted it.
    Shown,
    /// No session bus: skipped.
    NoBus,
    /// Built without the `notify` feature: skipped (see [`UNAVAILABLE`]).
    NotBuilt,
}

/// What can go wrong showing a notification.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The bus did not answer in time.
    #[error("the desktop notification timed out after {0:?} (the session bus did not answer)")]
    Timeout(Duration),
    /// The bus or the notification server refused.
    #[error("the desktop notification failed: {0}")]
    Failed(String),
    /// The runtime for [`notify_desktop_blocking`] could not be built.
    #[error("cannot start a runtime for the desktop notification: {0}")]
    Runtime(std::io::Error),
}

/// Where a session bus would be: `DBUS_SESSION_BUS_ADDRESS`, else `/run/user/UID/bus` when it exists.
pub fn session_bus() -> Option<String> {
    if let Some(addr) = std::env::var_os("DBUS_SESSION_BUS_ADDRESS")
        && !addr.is_empty()
    {
        return Some(addr.to_string_lossy().into_owned());
    }
    let uid = rustix::process::getuid().as_raw();
    let p = PathBuf::from(format!("/run/user/{uid}/bus"));
    p.exists().then(|| format!("unix:path={}", p.display()))
}

/// Shows a desktop notification, giving up after `timeout`. Needs a tokio runtime with the time driver.
#[cfg(feature = "notify")]
pub async fn notify_desktop(
    summary: &str,
    body: &str,
    timeout: Duration,
) -> Result<NotifyOutcome, NotifyError> {
    if session_bus().is_none() {
        tracing::debug!(
            "no desktop notification: DBUS_SESSION_BUS_ADDRESS is unset and there is no /run/user/UID/bus"
        );
        return Ok(NotifyOutcome::NoBus);
    }
    let mut n = notify_rust::Notification::new();
    n.appname("watchdog")
        .summary(summary)
        .body(body)
        .urgency(notify_rust::Urgency::Critical);
    match tokio::time::timeout(timeout, n.show_async()).await {
        Ok(Ok(_handle)) => Ok(NotifyOutcome::Shown),
        Ok(Err(e)) => Err(NotifyError::Failed(e.to_string())),
        Err(_) => Err(NotifyError::Timeout(timeout)),
    }
}

/// Shows notifications one at a time, blocking, on a current-thread runtime kept between them.
#[derive(Default)]
pub struct Notifier {
    #[cfg(feature = "notify")]
    runtime: Option<tokio::runtime::Runtime>,
    #[cfg(not(feature = "notify"))]
    told: bool,
}

impl Notifier {
    /// A notifier; its runtime is built at the first notification.
    pub fn new() -> Notifier {
        Notifier::default()
    }

    /// Shows a desktop notification, blocking the caller for at most about `timeout`.
    #[cfg(feature = "notify")]
    pub fn show(
        &mut self,
        summary: &str,
        body: &str,
        timeout: Duration,
    ) -> Result<NotifyOutcome, NotifyError> {
        let rt = match &mut self.runtime {
            Some(rt) => rt,
            none => none.insert(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(NotifyError::Runtime)?,
            ),
        };
        rt.block_on(notify_desktop(summary, body, timeout))
    }

    /// Built without the `notify` feature: says so once (at info level), shows nothing.
    #[cfg(not(feature = "notify"))]
    pub fn show(
        &mut self,
        _summary: &str,
        _body: &str,
        _timeout: Duration,
    ) -> Result<NotifyOutcome, NotifyError> {
        if !std::mem::replace(&mut self.told, true)
            && let Some(why) = UNAVAILABLE
        {
            tracing::info!("no desktop notifications: {why}");
        }
        Ok(NotifyOutcome::NotBuilt)
    }
}

/// Shows one notification on a fresh runtime, blocking the caller for at most about `timeout`.
pub fn notify_desktop_blocking(
    summary: &str,
    body: &str,
    timeout: Duration,
) -> Result<NotifyOutcome, NotifyError> {
    Notifier::new().show(summary, body, timeout)
}

/// Shows a notification from a background thread and logs the outcome; never blocks the caller.
pub fn spawn_notify(
    summary: String,
    body: String,
    timeout: Duration,
) -> std::io::Result<std::thread::JoinHandle<Result<NotifyOutcome, NotifyError>>> {
    std::thread::Builder::new()
        .name("watchdog-notify".to_string())
        .spawn(move || {
            let r = notify_desktop_blocking(&summary, &body, timeout);
            match &r {
                Ok(NotifyOutcome::Shown) => tracing::debug!("desktop notification shown"),
                Ok(NotifyOutcome::NoBus | NotifyOutcome::NotBuilt) => {}
                Err(e) => tracing::warn!("{e}"),
            }
            r
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A headless build (`--no-default-features`) shows nothing, says why, and never fails.
    #[test]
    #[cfg(not(feature = "notify"))]
    fn without_the_feature_nothing_is_shown_and_the_reason_is_given() {
        assert!(UNAVAILABLE.is_some_and(|why| why.contains("`notify` feature")));
        let mut n = Notifier::new();
        for _ in 0..2 {
            let r = n.show("watchdog", "test", Duration::from_millis(10));
            assert!(matches!(r, Ok(NotifyOutcome::NotBuilt)), "{r:?}");
        }
    }

    #[test]
    #[cfg(feature = "notify")]
    fn with_the_feature_notifications_are_available() {
        assert_eq!(UNAVAILABLE, None);
    }
}
