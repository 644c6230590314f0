"""Client for ``watchdog``: learn that a checkpoint is needed, save it at a safe point, say so.

The watchdog watches a training run (memory, cgroup memory, disk, runtime), predicts when a
resource will run out, and then (1) writes a JSON *request file*, and (2) sends a signal
(default SIGUSR1) to every process of the run that catches it. This module is the training
side, standard library only::

    import training_watchdog as tw
    tw.install()                         # catch the signal: only sets a flag
    for step in range(steps):
        train_step()
        if tw.checkpoint_requested():    # flag set, or a request file not yet acknowledged
            save_checkpoint()
            tw.acknowledge()             # writes <request file>.ack

Never save inside the signal handler (that hangs intermittently); the handler only sets a
flag and the loop checkpoints at the next step. ``checkpoint_requested()`` also looks at the
request file, because a notebook kernel may reset signal handlers between cells.

Environment, set by ``watchdog run`` (or by :func:`attach`): ``WATCHDOG_SIGNAL`` (e.g.
``SIGUSR1``), ``WATCHDOG_REQUEST_FILE`` (path of the request file), ``WATCHDOG_PID``.

Acknowledgment protocol: :func:`acknowledge` writes ``<request file>.ack`` atomically (temp
file + rename) with ``{"seq": N, "time_unix": T}``, ``N`` the ``seq`` of the request handled and
``T`` the time the checkpoint was done. A request is pending while no ack has its ``seq`` and a
``time_unix`` at or after the request's ``time_unix``.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

__all__ = [
    "install",
    "checkpoint_requested",
    "request",
    "acknowledge",
    "attach",
    "WatchdogHandle",
    "request_file",
]

__version__ = "0.1.0"

_flag = False
# signal number -> the handler that was installed before ours (chained on every signal)
_previous = {}
# the request being handled: what checkpoint_requested() saw when it returned True
_handling = None
# (seq, time_unix) of the last request this process acknowledged
_acked = None
# path -> ((ino, mtime_ns, size), parsed JSON or None): files are parsed only when they change
_cache = {}


# Signals whose handlers are crash or abort paths; the binary refuses them as the checkpoint signal.
_CRASH_SIGNALS = frozenset(
    "SIG" + n for n in "SEGV BUS FPE ILL ABRT TRAP SYS QUIT XCPU XFSZ".split()
)

_RT_NAME = re.compile(r"RTM(IN|AX)(?:([+-])([0-9]+))?")


def _resolve_signal(sig=None):
    """Signal number from an int, a numeric string or a name, as the watchdog writes them.

    Names with or without ``SIG``, any case: ``SIGUSR1``, ``USR1``, and the real-time
    ``SIGRTMIN``, ``SIGRTMIN+n``, ``SIGRTMAX-n``, ``SIGRTMAX`` (computed from
    ``signal.SIGRTMIN``/``signal.SIGRTMAX``, as the binary does at run time). Raises
    ValueError for anything else, or a real-time offset outside SIGRTMIN..SIGRTMAX.
    """
    if sig is None:
        sig = os.environ.get("WATCHDOG_SIGNAL") or "SIGUSR1"
    if isinstance(sig, int) and not isinstance(sig, bool):
        return int(sig)
    text = str(sig).strip().upper()
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    name = text[3:] if text.startswith("SIG") else text
    rt = _RT_NAME.fullmatch(name)
    if rt and hasattr(signal, "SIGRTMIN"):
        lo, hi = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
        which, sign, offset = rt.groups()
        if sign is None:
            return lo if which == "IN" else hi
        if (which, sign) == ("IN", "+"):
            num = lo + int(offset)
        elif (which, sign) == ("AX", "-"):
            num = hi - int(offset)
        else:
            num = None
        if num is not None and lo <= num <= hi:
            return num
    elif name:
        member = signal.Signals.__members__.get("SIG" + name)
        if member is not None:
            return int(member)
    raise ValueError(
        "unknown signal %r: expected a name like SIGUSR1 or USR1, SIGRTMIN+n or SIGRTMAX-n, "
        "or a number" % (sig,)
    )


def _signal_name(signum):
    """The name the watchdog gives a signal number: ``SIGUSR1``, ``SIGRTMIN``, ``SIGRTMIN+2``."""
    lo = int(getattr(signal, "SIGRTMIN", 0)) or None
    if lo is not None and lo < signum <= int(signal.SIGRTMAX):
        return "SIGRTMIN+%d" % (signum - lo)
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def _handler(signum, frame):
    global _flag
    _flag = True
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)


def install(sig=None):
    """Catch the watchdog's signal (``WATCHDOG_SIGNAL``, default SIGUSR1); the handler only sets a flag.

    A Python handler installed before is chained (called after the flag is set). Calling
    ``install()`` again is harmless and re-installs the handler if something replaced it.
    Must be called from the main thread (Python runs signal handlers there only).
    Returns the signal number.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "training_watchdog.install() must be called from the main thread: "
            "Python only lets the main thread install signal handlers"
        )
    signum = _resolve_signal(sig)
    current = signal.getsignal(signum)
    if current is _handler:
        return signum
    # SIG_DFL would terminate the process (the default for SIGUSR1) and SIG_IGN does nothing:
    # neither is chained. None means a handler installed outside Python: it cannot be called.
    _previous[signum] = current if callable(current) else None
    signal.signal(signum, _handler)
    return signum


def request_file():
    """The request file path from ``WATCHDOG_REQUEST_FILE``, or None."""
    return os.environ.get("WATCHDOG_REQUEST_FILE") or None


def _ack_path(path):
    return path + ".ack"


def _read_json_cached(path):
    """Parsed JSON object of ``path``, re-read only when its inode, mtime or size changed."""
    try:
        st = os.stat(path)
    except OSError:
        _cache.pop(path, None)
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        with open(path, "rb") as f:
            value = json.loads(f.read().decode("utf-8"))
        if not isinstance(value, dict):
            value = None
    except (OSError, ValueError):
        return None  # not cached: a half-written file is read again next time
    _cache[path] = (stamp, value)
    return value


def _number(d, key):
    v = d.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def request():
    """The current request (parsed request file) as a dict, or None when there is none."""
    path = request_file()
    if path is None:
        return None
    req = _read_json_cached(path)
    return dict(req) if req is not None else None


def _pending(req):
    seq, t = _number(req, "seq"), _number(req, "time_unix") or 0.0
    if seq is None:
        return False
    if _acked is not None and _acked == (seq, t):
        return False
    path = request_file()
    ack = _read_json_cached(_ack_path(path)) if path else None
    if ack is not None and _number(ack, "seq") == seq and (_number(ack, "time_unix") or 0.0) >= t:
        return False
    return True


def checkpoint_requested():
    """True when the signal arrived or the request file holds a request not yet acknowledged.

    Cheap enough for every step: one ``stat`` of the request file (and of the ack when a
    request exists); files are parsed only when they change.
    """
    global _handling
    req = request()
    if req is not None and _pending(req):
        _handling = req
        return True
    if _flag:
        if req is not None:
            _handling = req
        return True
    return False


def _write_atomic(path, data):
    """Write bytes to ``path`` via a temp file (O_EXCL|O_NOFOLLOW) in the same directory, fsync, rename."""
    if os.path.islink(path):
        raise OSError("refusing to write %s: it is a symbolic link" % path)
    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for attempt in range(100):
        tmp = os.path.join(directory, ".%s.tmp.%d.%d.%d" % (base, os.getpid(), time.monotonic_ns(), attempt))
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue
    else:
        raise OSError("cannot create a temp file next to %s" % path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def acknowledge():
    """Tell the watchdog the checkpoint is saved: write ``<request file>.ack`` and clear the flag.

    Acknowledges the request seen by the last ``checkpoint_requested()`` that returned True
    (or the current one). Returns the acknowledged ``seq``, or None when there was no request
    file (the flag is cleared anyway). A failure to write the ack is reported with a warning,
    never raised into the training loop.
    """
    global _flag, _handling, _acked
    _flag = False
    req = _handling if _handling is not None else request()
    _handling = None
    path = request_file()
    if req is None or path is None:
        return None
    seq = _number(req, "seq")
    if seq is None:
        return None
    _acked = (seq, _number(req, "time_unix") or 0.0)
    body = json.dumps({"seq": seq, "time_unix": time.time()}).encode("utf-8") + b"\n"
    try:
        _write_atomic(_ack_path(path), body)
    except OSError as e:
        import warnings

        warnings.warn("training_watchdog: cannot write the acknowledgment: %s" % e, RuntimeWarning, stacklevel=2)
    return seq


def _find_watchdog(watchdog):
    if os.sep in watchdog:
        if os.access(watchdog, os.X_OK):
            return watchdog
        raise FileNotFoundError("watchdog binary %r is not an executable file" % watchdog)
    env = os.environ.get("WATCHDOG_BIN")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise FileNotFoundError("WATCHDOG_BIN=%r is not an executable file" % env)
    found = shutil.which(watchdog)
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the %r binary: set WATCHDOG_BIN to its path or put it on PATH "
        "(build it with `cargo build --release` and use target/release/watchdog)" % watchdog
    )


class WatchdogHandle:
    """A watchdog started by :func:`attach`: ``.process``, ``.log_path``, ``.request_file``, ``.stop()``."""

    def __init__(self, process, log_path, request_file, command):
        self.process = process
        self.log_path = log_path
        self.request_file = request_file
        self.command = command

    @property
    def running(self):
        """Whether the watchdog process is still running."""
        return self.process.poll() is None

    def log(self):
        """The watchdog's log so far."""
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=5.0):
        """Stop the watchdog (SIGTERM, then SIGKILL after ``timeout`` seconds); returns its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __repr__(self):
        state = "running" if self.running else "exited %s" % self.process.returncode
        return "<WatchdogHandle pid=%d %s log=%s>" % (self.process.pid, state, self.log_path)


def attach(watchdog="watchdog", args=(), request_file=None, sig=None):
    """Start ``watchdog --pid <this process>`` in the background (for notebooks) and install the handler.

    The binary is ``watchdog`` if it is a path, else ``$WATCHDOG_BIN``, else found on PATH.
    Its output goes to ``watchdog.log`` in a new temp directory (``handle.log_path``); it runs
    in its own session so the kernel's interrupt (SIGINT) does not reach it, and it exits by
    itself when this process exits. Sets ``WATCHDOG_SIGNAL``, ``WATCHDOG_REQUEST_FILE`` and
    ``WATCHDOG_PID`` in ``os.environ`` and calls :func:`install`. Raises RuntimeError with
    the log when the watchdog exits at once (a bad argument, for example).
    """
    binary = _find_watchdog(watchdog)
    signum = _resolve_signal(sig)
    signame = _signal_name(signum)
    if signame in _CRASH_SIGNALS:
        # The binary refuses these too; refuse before a handler replaces faulthandler's.
        raise ValueError(
            "%s cannot be the checkpoint signal: it is a crash signal (faulthandler and C runtimes "
            "end the process on it); expected e.g. SIGUSR1, SIGUSR2 or SIGRTMIN+2" % signame
        )
    workdir = tempfile.mkdtemp(prefix="training-watchdog-")
    if request_file is None:
        request_file = os.path.join(workdir, "request.json")
    request_file = os.path.abspath(request_file)
    for stale in (request_file, _ack_path(request_file)):
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    log_path = os.path.join(workdir, "watchdog.log")
    pid = os.getpid()
    command = [binary, "--pid", str(pid), "--request-file", request_file, "--signal", signame]
    command += [str(a) for a in args]

    os.environ["WATCHDOG_SIGNAL"] = signame
    os.environ["WATCHDOG_REQUEST_FILE"] = request_file
    install(signum)

    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    os.environ["WATCHDOG_PID"] = str(process.pid)  # the watchdog's PID, as `watchdog run` sets it
    handle = WatchdogHandle(process, log_path, request_file, command)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    if process.poll() is not None:
        raise RuntimeError(
            "watchdog exited at once with status %s; command: %s; log (%s):\n%s"
            % (process.returncode, " ".join(command), log_path, handle.log().strip())
        )
    return handle


def _reset():
    """Forget all state (for tests)."""
    global _flag, _handling, _acked
    _flag = False
    _handling = None
    _acked = None
    _previous.clear()
    _cache.clear()
