//! Desktop notifications are the `notify` cargo feature, on by default. A headless build
//! (`--no-default-features`) that alerts with notifications on (the default) says once
//! why none are shown; a build with them, on a machine without a session bus (as `bin()`
//! runs every watchdog), says nothing about it at the default log level.
//!
//! `scripts/test.sh` runs this test in both builds.

use crate::support::*;

const UNAVAILABLE: &str =
    "no desktop notifications: this watchdog was built without the `notify` feature";

#[test]
fn notifications_missing_from_the_build_are_explained_once() {
    let scene = Scene::new();
    // One alert about 1 s in, from the runtime limit: the moment a notification would be shown.
    let out = scene.run_hog(
        &["--max-runtime", "2s", "--lead", "1s"],
        &["wait", "--seconds", "3"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = read_events(&scene.events);
    assert_eq!(of_kind(&events, "alert").len(), 1, "{stderr}");
    let told = stderr.matches(UNAVAILABLE).count();
    if cfg!(feature = "notify") {
        assert_eq!(told, 0, "{stderr}");
    } else {
        assert_eq!(told, 1, "{stderr}");
    }
}
