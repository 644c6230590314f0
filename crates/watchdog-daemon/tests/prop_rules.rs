//! Property tests of the daemon's config file on arbitrary and near-valid text: parsing
//! never panics, and every rejection is one line of bounded length. See `docs/testing.md`
//! for the long run.

#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use std::path::Path;

use prop_support::{arbitrary_text, check_message, config, near_valid};
use proptest::prelude::*;

use watchdog_daemon::rules::DaemonConfig;

/// The fixed part of a message (`config file d.toml:N: rule 'NAME': ...` and the longest
/// expectation, the regex one).
const FIXED: usize = 420;

/// Valid files: every top-level key, every match key, watch tables as headers and inline.
const CONFIGS: &[&str] = &[
    "interval = \"100ms\"\nscan_interval = \"250ms\"\nsocket = \"/run/watchdog/daemon.sock\"\n\
     request_dir = \"/run/watchdog/users\"\nstate_dir = \"/var/lib/watchdog\"\n\
     metrics = \"127.0.0.1:9187\"\n[[rule]]\nname = \"registered\"\n[rule.match]\nregistered = true\n",
    "[[rule]]\nname = \"training\"\n[rule.match]\ncommand = \"python.*train\\\\.py\"\n\
     user = [\"root\", 1000]\ngpu = true\n[rule.watch]\nlead = \"45s\"\nmem_limit = \"16GiB\"\n",
    "[[rule]]\nname = \"a\"\n[rule.match]\ncgroup = \"/user.slice/user-1000.slice\"\n\
     slice = \"training.slice\"\nenv = \"WATCHDOG_WATCH=1\"\n\
     [[rule]]\nname = \"b\"\nmatch = { user = \"root\" }\nwatch = { signal = \"USR2\", floor = 2.5 }\n",
    "[[rule]]\nname = \"c\"\n[rule.match]\nenv = \"NAME\"\n[rule.watch]\ndisks = [\"/tmp\"]\n\
     max_runtime = \"12h\"\ndeadline = 2099-01-01T00:00:00Z\non_alert = \"echo hi\"\n",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_daemon_config_arbitrary_text(text in arbitrary_text()) {
        check(&text)?;
    }

    #[test]
    fn prop_daemon_config_near_valid(text in near_valid(CONFIGS)) {
        check(&text)?;
    }
}

fn check(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = DaemonConfig::parse(text, Path::new("d.toml")) {
        // A value is quoted as TOML decoded it (an escape may grow to 6 characters), so up
        // to 3 times the input, as for config/watchdog.toml.
        check_message(&e, &text.repeat(3), FIXED)?;
    }
    Ok(())
}

#[test]
fn the_seed_configs_are_valid() {
    for text in CONFIGS {
        DaemonConfig::parse(text, Path::new("d.toml")).unwrap();
    }
}
