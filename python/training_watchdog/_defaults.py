"""The binary's defaults the client has to know, each said once here.

The checkpoint signal when none is named, where the workstation service listens and keeps
its per-user request files, where recordings are kept (the state directory), and how much of
a file a user could plant is read. Each names its source in the Rust crates; the client's own
defaults (the last-chance save's bound) are here too.
"""

import os

#: The checkpoint signal when neither ``sig=`` nor ``$WATCHDOG_SIGNAL`` names one
#: (``EngineSettings::default`` in crates/watchdog-engine).
SIGNAL = "SIGUSR1"

#: The service's socket, unless ``$WATCHDOG_SOCKET`` names another (DEFAULT_SOCKET in
#: crates/watchdog-daemon/src/rules.rs).
DAEMON_SOCKET = "/run/watchdog/daemon.sock"
#: The service's per-user directory of request files, unless ``$WATCHDOG_DAEMON_DIR``
#: (DEFAULT_REQUEST_DIR there).
DAEMON_DIR = "/run/watchdog/users"

#: The most read of a request or ack file: the daemon's cap on a file a user wrote
#: (MAX_USER_FILE_BYTES in crates/watchdog-alerter/src/beneath.rs).
MAX_FILE_BYTES = 64 * 1024

#: How long a last-chance save may take by default, in seconds (training_watchdog.oom keeps
#: it): a large model written to a network file system takes minutes, a hung one never ends.
LAST_CHANCE_TIMEOUT_S = 300.0


def state_dir():
    """Where recordings are kept: ``$XDG_STATE_HOME/watchdog``, else ``~/.local/state/watchdog``
    (an ``$XDG_STATE_HOME`` that is not absolute is ignored, as the binary's ``Host::state_home``
    in crates/watchdog-config does)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "watchdog")
