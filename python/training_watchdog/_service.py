"""The workstation service (``watchdog daemon``), and where the request file is.

:func:`request_file` is ``$WATCHDOG_REQUEST_FILE`` (set by ``watchdog run`` or ``attach()``),
else the file the daemon named when this process registered over its socket, else the one it
keeps for this run in its per-user directory. Registration is one JSON line each way; any
failure is a warning, never an exception.
"""

import json
import os
import time

from training_watchdog import _defaults
from training_watchdog._environment import _report_environment
from training_watchdog._units import _resolve_signal, _signal_problem


_REGISTER_TIMEOUT_S = 2.0
# Largest answer read from the daemon.
_MAX_REPLY = 65536
# The request file the daemon named when this process (or its parent, before a fork) registered.
_registered = None
# The per-user lookup, see _daemon_request_file().
_lookup = None


def _register_with_daemon():
    """Register with a running daemon; remember the request file it names. Returns the signal
    number it names (None when it named none, or on any failure: warned, never raised)."""
    global _registered
    path = os.environ.get("WATCHDOG_SOCKET") or _defaults.DAEMON_SOCKET
    if not os.path.exists(path):
        return None  # no daemon on this machine: nothing to say
    import socket
    import warnings

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(_REGISTER_TIMEOUT_S)
            conn.connect(path)
            conn.sendall(json.dumps({"op": "register", "pid": os.getpid()}).encode() + b"\n")
            reply = b""
            while b"\n" not in reply and len(reply) <= _MAX_REPLY:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
        answer = json.loads(reply.split(b"\n", 1)[0].decode("utf-8"))
        if not isinstance(answer, dict):
            raise ValueError("expected a JSON object, got %r" % (answer,))
        if answer.get("ok") is not True:
            raise ValueError("it refused: %s" % (answer.get("error") or "no reason given"))
        registered = answer.get("registered")
        named = registered.get("request_file") if isinstance(registered, dict) else None
        if not isinstance(named, str) or not named:
            raise ValueError("its answer names no request file: %r" % (answer,))
        _registered = named
    except (OSError, ValueError) as e:
        warnings.warn(
            "training_watchdog: cannot register with the watchdog daemon at %s: %s" % (path, e),
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    named_signal = registered.get("signal", None)
    if named_signal is None:
        return None
    try:
        if not isinstance(named_signal, (str, int)):
            raise ValueError("expected a signal name or number")
        signum = _resolve_signal(named_signal)
        why = _signal_problem(signum)
        if why is None:
            return signum
    except ValueError as e:
        why = str(e)
    # The registration stands (the request file works without a signal); the docs promise a
    # warning, never an exception, for whatever the daemon answers.
    warnings.warn(
        "training_watchdog: the watchdog daemon at %s names the signal %r, which cannot be the "
        "checkpoint signal: %s; only its request file %s is watched" % (path, named_signal, why, named),
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def _ancestors(pid):
    """``pid`` and its ancestors of the same user, nearest first, from ``/proc/PID/status``."""
    chain, uid = [], None
    while pid > 1 and len(chain) < 64:
        try:
            with open("/proc/%d/status" % pid, "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
            ppid = int(fields[b"PPid"])
            owner = int(fields[b"Uid"].split()[0])
        except (OSError, KeyError, ValueError, IndexError):
            break
        if uid is None:
            uid = owner
        elif owner != uid:
            break  # the daemon keys a user's runs by that user's processes only
        chain.append(pid)
        pid = ppid
    return chain


def _daemon_request_file():
    """The request file the daemon keeps for this process's run, or None (see the module docs).

    The candidates (this PID and its ancestors') are computed once per process and daemon
    directory; once one exists it is the answer for good. Until then a call costs one ``stat``
    of the user's directory: the candidates are looked at again only when its mtime changed
    (a file was added or removed), or is less than a second old (a file created within the
    same clock tick as the last look leaves the same mtime).
    """
    global _lookup
    key = (os.getpid(), os.environ.get("WATCHDOG_DAEMON_DIR") or _defaults.DAEMON_DIR, os.getuid())
    if _lookup is None or _lookup["key"] != key:
        pid, base, uid = key
        candidates = [os.path.join(base, str(uid), "%d.request.json" % p) for p in _ancestors(pid)]
        _lookup = {"key": key, "dir": os.path.join(base, str(uid)), "candidates": candidates,
                   "found": None, "seen": None}
    if _lookup["found"] is not None:
        return _lookup["found"]
    try:
        mtime = os.stat(_lookup["dir"]).st_mtime_ns
    except OSError:
        return None  # no daemon, or it keeps nothing for this user
    if mtime == _lookup["seen"] and time.time_ns() - mtime > 1_000_000_000:
        return None
    for path in _lookup["candidates"]:
        if os.path.exists(path):
            _lookup["found"] = path
            _report_environment(path)
            return path
    _lookup["seen"] = mtime
    return None


def request_file():
    """The request file path: ``WATCHDOG_REQUEST_FILE``; else the one a ``watchdog daemon``
    named when :func:`install` registered; else the daemon's file for this run in its per-user
    directory, once there is one (see the module documentation); else None."""
    return os.environ.get("WATCHDOG_REQUEST_FILE") or _registered or _daemon_request_file()


# The PID that registered with the daemon on its own, for a step report or a last-chance
# ack (at most once per process: a refusal is not asked again at every step).
_register_tried = None


def _request_file_or_register():
    """:func:`request_file`; when there is none yet, register with a listening daemon once
    per process, as :func:`install` does, and take the file it names. A run the daemon found
    by itself has no request file until the daemon's first request, yet its step reports and
    a last-chance acknowledgment need one; a loop that never called ``install()`` would
    otherwise tell the daemon nothing."""
    global _register_tried
    path = request_file()
    if path is not None or _register_tried == os.getpid() or os.environ.get("WATCHDOG_REQUEST_FILE"):
        return path
    _register_tried = os.getpid()
    _register_with_daemon()
    return request_file()


def _reset_state():
    """Forget the registration and the per-user lookup (for tests)."""
    global _registered, _lookup, _register_tried
    _registered = None
    _lookup = None
    _register_tried = None
