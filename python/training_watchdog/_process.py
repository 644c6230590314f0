"""``attach()``: the binary started from the training process itself, for notebooks.

Finding the binary, turning ``attach()``'s keywords into its flags (:data:`_OPTIONS`, which a
test keeps in step with the binary's ``--help``), starting it in its own session and waiting
for its ``--ready-fd`` line, the handle that stops it, and putting back what ``attach()``
changed in this process. At most one watchdog is attached at a time.
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

from training_watchdog import _defaults, _signals
from training_watchdog._display import _report
from training_watchdog._environment import _report_environment
from training_watchdog._signals import _handler, _previous, install
from training_watchdog._units import _checkpoint_signal, _duration_seconds, _seconds_text


# How long attach() waits for the watchdog to say it is watching (a busy machine can be slow).
_READY_TIMEOUT_S = 60.0
# The variables attach() sets for this process, as `watchdog run` sets them for its child.
_ENV_KEYS = ("WATCHDOG_SIGNAL", "WATCHDOG_REQUEST_FILE", "WATCHDOG_PID", "WATCHDOG_INTERVAL")
# The flags attach() gives the binary itself; ``args`` may not repeat them.
_OWN_FLAGS = {
    "--pid": "it is always this process",
    "--request-file": "use attach(request_file=...)",
    "--signal": "use attach(sig=...)",
    "--ready-fd": "attach() uses it to learn that the watchdog is watching",
}
# attach()'s keyword options: name -> (the binary's flag, kind of value). Every flag the binary's
# `--pid` takes has one here, but the ones attach() sets itself (_OWN_FLAGS, `sig`,
# `request_file`); python/tests/test_flags.py compares this table with the binary's --help.
_OPTIONS = {
    "metrics": ("--metrics", "text"),
    "config": ("--config", "path"),
    "interval": ("--interval", "duration"),
    "max_interval": ("--max-interval", "duration"),
    "lead": ("--lead", "duration"),
    "mem_limit": ("--mem-limit", "size"),
    "disk": ("--disk", "paths"),
    "max_runtime": ("--max-runtime", "duration"),
    "deadline": ("--deadline", "deadline"),
    "events": ("--events", "path"),
    "on_alert": ("--on-alert", "text"),
    "hook_timeout": ("--hook-timeout", "duration"),
    "record": ("--record", "path"),
    "record_window": ("--record-window", "duration"),
    "dry_run": ("--dry-run", "flag"),
    "gpu": ("--gpu", "text"),
    "floor": ("--floor", "number"),
    "notify": ("--no-notify", "negated"),
    "status": ("--no-status", "negated"),
    "log_format": ("--log-format", "text"),
    "slurm_poll": ("--slurm-poll", "duration"),
    "checkpoint_record": ("--checkpoint-record", "path"),
    "term_grace": ("--term-grace", "duration"),
    "notice": ("--notice", "text"),
    "notice_endpoint": ("--notice-endpoint", "text"),
    "notice_interval": ("--notice-interval", "duration"),
}
_MISSING = object()

# The handle of the watchdog attach() started and nobody stopped yet, or None.
_attached = None
_atexit_registered = False


def _find_watchdog(watchdog):
    """The binary to run: a path as given, else ``$WATCHDOG_BIN``, else the name in this
    Python's scripts directory (beside ``sys.executable``: where ``pip install`` puts it, found
    even when a kernel did not activate its venv), else the user scheme's scripts directory
    (``pip install --user``), else on PATH."""
    watchdog = os.fspath(watchdog)
    if os.sep in watchdog:
        if os.path.isfile(watchdog) and os.access(watchdog, os.X_OK):
            return os.path.abspath(watchdog)
        raise FileNotFoundError("watchdog binary %r is not an executable file" % watchdog)
    env = os.environ.get("WATCHDOG_BIN")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise FileNotFoundError("WATCHDOG_BIN=%r is not an executable file" % env)
    import sysconfig

    dirs = [os.path.dirname(sys.executable)] if sys.executable else []
    for scheme in (None, "%s_user" % os.name):
        try:
            dirs.append(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"))
        except (KeyError, ValueError):
            pass
    for d in dirs:
        candidate = os.path.join(d, watchdog)
        if d and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(watchdog)
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the %r binary beside %s or on PATH: install it into this environment with "
        "`%s -m pip install training-watchdog` (or a checkout of the repository), or set WATCHDOG_BIN "
        "to its path" % (watchdog, sys.executable, sys.executable)
    )


def _option_args(name, value):
    """The binary's arguments for one attach() keyword option (values it parses are checked by it)."""
    if name not in _OPTIONS:
        raise TypeError(
            "attach() got an unexpected keyword argument %r; expected one of: %s (or pass the "
            "binary's flags in args=[...])" % (name, ", ".join(sorted(_OPTIONS)))
        )
    flag, kind = _OPTIONS[name]
    if value is None:
        return []
    if kind in ("flag", "negated"):
        if not isinstance(value, bool):
            raise TypeError("%s=%r: expected True or False" % (name, value))
        return [flag] if value == (kind == "flag") else []
    if isinstance(value, str):
        return [flag, value]
    if kind == "duration":
        return [flag, _seconds_text(name, value)]
    if kind == "size" and isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("%s=%r: expected a positive number of bytes or a size such as '12GiB'" % (name, value))
        return [flag, str(value)]
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return [flag, repr(value)]
    if kind == "deadline" and hasattr(value, "isoformat") and getattr(value, "tzinfo", None) is not None:
        return [flag, value.isoformat()]
    if kind in ("path", "paths") and isinstance(value, os.PathLike):
        return [flag, os.fspath(value)]
    if kind == "paths" and isinstance(value, (list, tuple)):
        out = []
        for v in value:
            if not isinstance(v, (str, os.PathLike)):
                raise TypeError("%s=%r: expected a path or a list of paths" % (name, value))
            out += [flag, os.fspath(v)]
        return out
    expected = {
        "size": "a number of bytes or a size string such as '12GiB'",
        "number": "a number",
        "deadline": "a timezone-aware datetime or an RFC 3339 string",
        "path": "a path",
        "paths": "a path or a list of paths",
        "text": "a string",
    }.get(kind, "a string")
    raise TypeError("%s=%r: expected %s" % (name, value, expected))


class _Plan:
    """attach()'s arguments, checked, before anything is changed."""

    def __init__(self, watchdog, args, request_file, sig, options):
        if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
            raise TypeError(
                "args=%r: expected a list of the binary's arguments, e.g. ['--lead', '60s']" % (args,)
            )
        argv = []
        for a in args:
            if isinstance(a, bool) or not isinstance(a, (str, int, float, os.PathLike)):
                raise TypeError("args: %r is not a string, number or path" % (a,))
            a = os.fspath(a) if isinstance(a, os.PathLike) else str(a)
            own = a.split("=", 1)[0]
            if own in _OWN_FLAGS:
                raise ValueError("args: %s is set by attach() (%s)" % (own, _OWN_FLAGS[own]))
            argv.append(a)
        for name in sorted(options):
            argv += _option_args(name, options[name])
        if request_file is not None:
            if not isinstance(request_file, (str, os.PathLike)):
                raise TypeError("request_file=%r: expected a path" % (request_file,))
            request_file = os.path.abspath(os.fspath(request_file))
            if os.path.isdir(request_file):
                raise ValueError("request_file=%r: expected a file path, not a directory" % request_file)
            if not os.path.isdir(os.path.dirname(request_file)):
                raise ValueError(
                    "request_file=%r: its directory does not exist; expected a path in an existing "
                    "directory" % request_file
                )
        self.signum, self.signame = _checkpoint_signal(sig, for_attach=True)
        self.binary = _find_watchdog(watchdog)
        self.request_file = request_file
        self.argv = argv
        # Two calls with equal keys ask for the same watchdog.
        self.key = (os.path.realpath(self.binary), self.signum, request_file, tuple(argv))


class _Restore:
    """What attach() changed in this process (environment, signal handlers), to put back."""

    def __init__(self):
        self.env = {}
        self.handlers = {}
        # whether attach(on_term="save") took SIGTERM (nobody had before)
        self.term = False

    def note(self, signum):
        for key in _ENV_KEYS:
            self.env.setdefault(key, os.environ.get(key))
        if signum not in self.handlers:
            self.handlers[signum] = (signal.getsignal(signum), _previous.get(signum, _MISSING))

    def under(self, older):
        """This record beneath an older one: the older values (before the first attach) win."""
        merged = _Restore()
        merged.env = dict(self.env)
        merged.env.update(older.env)
        merged.handlers = dict(self.handlers)
        merged.handlers.update(older.handlers)
        merged.term = self.term or older.term
        return merged

    def restore(self):
        for key, value in self.env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for signum, (handler, previous) in self.handlers.items():
            # Only our own handler is undone; None (a handler set outside Python) cannot be
            # put back, and leaving ours (it only sets a flag) is safer than SIG_DFL.
            if handler is not None and signal.getsignal(signum) is _handler:
                try:
                    signal.signal(signum, handler)
                except (OSError, ValueError):  # not the main thread: leave ours
                    continue
            if previous is _MISSING:
                _previous.pop(signum, None)
            else:
                _previous[signum] = previous
        if self.term and not (_signals._term_flag or _signals._term_saved):
            _signals._release_term()  # a SIGTERM waiting for its save keeps it (it ends the process)


def _keep_recording(path, workdir):
    """A recording inside ``workdir`` (about to be removed) moved to the state directory.

    Only an older binary writes it there (beside the request file); one that writes to the
    state directory itself is left alone. Returns the path the recording is at, or None.
    """
    if not path or not os.path.isfile(path):
        return path
    inside = os.path.realpath(path).startswith(os.path.realpath(workdir) + os.sep)
    if not inside:
        return path
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        directory = _defaults.state_dir()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        for n in range(1000):
            suffix = "" if n == 0 else "-%d" % n
            dest = os.path.join(directory, "watchdog-%d-%s%s.recording.csv" % (os.getpid(), stamp, suffix))
            if not os.path.exists(dest):
                shutil.move(path, dest)
                return dest
        raise OSError("too many recordings named watchdog-%d-%s*" % (os.getpid(), stamp))
    except OSError as e:
        import warnings

        warnings.warn("training_watchdog: cannot keep the recording %s: %s" % (path, e), RuntimeWarning, stacklevel=3)
        return None


# The recording's path in the watchdog's log: the closing summary (`Recording: PATH.`) and the
# line written when it is saved; both are also the message of a `--log-format json` line.
_RECORDING_IN_LOG = (re.compile(r"Recording: (.+)\.\s*$"), re.compile(r"recording written to (.+?)\s*$"))


def _recording_from_log(log):
    found = []
    for line in reversed(log.splitlines()):
        text = line
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                text = str(obj.get("message") or obj.get("fields", {}).get("message") or "")
            except (ValueError, AttributeError):
                pass
        for rx in _RECORDING_IN_LOG:
            m = rx.search(text)
            if m:
                found.append(m.group(1))
    return found


class StopResult:
    """What :meth:`WatchdogHandle.stop` returns.

    ``recording``: the path of the flight recording (None when none was written, e.g. a dry
    run); ``log``: the watchdog's log (its temporary directory is gone); ``returncode``: the
    binary's exit status, for the record: 0 when the watched process exited first, 143
    (128 + SIGTERM, the binary's documented status) when ``stop()`` stopped it as asked; neither
    is an error. ``report()`` draws the recording.
    """

    def __init__(self, returncode, recording, log, binary):
        self.returncode = returncode
        self.recording = recording
        self.log = log
        self._binary = binary

    def report(self, output=None):
        """Draw the recording as one HTML page (``watchdog report``); in IPython, return it to show inline."""
        if not self.recording:
            raise RuntimeError("no recording was written (a dry run writes none unless record= is given)")
        return _report(self._binary, self.recording, output)

    def __repr__(self):
        where = "recording: %s" % self.recording if self.recording else "no recording"
        return "<watchdog stopped; %s>" % where


class WatchdogHandle:
    """A watchdog started by :func:`attach`.

    ``process`` (its ``subprocess.Popen``), ``pid``, ``request_file``, ``log_path``, ``command``,
    ``recording`` (where it writes its flight recording), ``running``, ``log()``, ``report()``
    and ``stop()``.
    """

    def __init__(self, process, workdir, request_file, command, ready, key, restore):
        self.process = process
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "watchdog.log")
        self.request_file = request_file
        self.command = command
        self.recording = ready.get("recording") if isinstance(ready.get("recording"), str) else None
        self._key = key
        self._restore = restore
        self._result = None
        # The process that started it: the only one that stops it or removes its directory
        # (a forked child has a copy of this handle, and of the atexit hook).
        self._owner = os.getpid()

    @property
    def pid(self):
        """The watchdog's PID (also ``WATCHDOG_PID``)."""
        return self.process.pid

    @property
    def running(self):
        """Whether the watchdog process is still running."""
        return self.process.poll() is None

    def log(self):
        """The watchdog's log so far (kept after ``stop()``)."""
        if self._result is not None:
            return self._result.log
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def report(self, output=None):
        """Draw the flight recording as one self-contained HTML page (``watchdog report``).

        While the watchdog runs it is first asked (SIGUSR2) to write the recording so far.
        ``output`` defaults to the recording's path ending ``.report.html``. In IPython returns
        an HTML object that shows the page inline; elsewhere the page's path.
        """
        if self._result is not None:
            return self._result.report(output)
        if not self.recording:
            raise RuntimeError("this watchdog writes no recording (a dry run writes none unless record= is given)")
        if self.running:
            failure = _fresh_recording(self.process, self.recording, self.log)
            if failure:
                raise RuntimeError("the watchdog did not write its recording %s: %s" % (self.recording, failure))
        return _report(self.command[0], self.recording, output)

    def stop(self, timeout=5.0):
        """Stop the watchdog and clean up; returns a :class:`StopResult` (never raises for its status).

        SIGTERM, then SIGKILL after ``timeout`` seconds. Removes the temporary directory, keeps
        the recording (in the state directory) and restores what :func:`attach` set in this
        process (``WATCHDOG_*`` variables, the signal handler) when this is the attached
        watchdog. Calling it again returns the same result. In a process forked from the one
        that attached, it stops and removes nothing (``returncode`` None): the watchdog and its
        directory are the parent's.
        """
        global _attached
        if self._result is None:
            self._result = self._shutdown(timeout)
        if _attached is self:
            _attached = None
            self._restore.restore()
        return self._result

    def _shutdown(self, timeout):
        if os.getpid() != self._owner:
            return StopResult(None, self.recording, self.log(), self.command[0])
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        log = self.log()
        candidates = ([self.recording] if self.recording else []) + _recording_from_log(log)
        recording = next((p for p in candidates if os.path.isfile(p)), None)
        recording = _keep_recording(recording, self.workdir)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.recording = recording
        return StopResult(self.process.returncode, recording, log, self.command[0])

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return "<WatchdogHandle pid=%d %s request_file=%s>" % (self.process.pid, state, self.request_file)


# What the watchdog logs when it cannot write an output (crates/watchdog-watch/src/outputs.rs,
# write_failed): "cannot write the recording PATH: WHY".
_CANNOT_WRITE_RECORDING = "cannot write the recording "


def _fresh_recording(process, path, log=lambda: "", timeout=10.0):
    """Asks a running watchdog to write its recording now (SIGUSR2) and waits until it has.

    Returns None once written (or after ``timeout``), or why it was not: what the watchdog
    logged after the signal (``log``: its log so far), such as a nearly full filesystem; or,
    when nothing was written 3 s after the signal, the last such line before it (the
    watchdog logs a failure again only when it changes or after a write that worked).
    """

    def stamp():
        try:
            st = os.stat(path)
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    def failure(logged_before):
        why = None
        for line in log()[logged_before:].splitlines():
            at = line.find(_CANNOT_WRITE_RECORDING)
            if at >= 0:
                why = line[at + len(_CANNOT_WRITE_RECORDING):]
                named = "%s: " % path
                why = why[len(named):] if why.startswith(named) else why
        return why

    before, logged = stamp(), len(log())
    process.send_signal(signal.SIGUSR2)
    start = time.monotonic()
    while time.monotonic() < start + timeout and process.poll() is None:
        now = stamp()
        if now is not None and now != before:
            return None
        why = failure(logged if time.monotonic() < start + 3.0 else 0)
        if why:
            return why
        time.sleep(0.02)
    return None


def _wait_ready(read_fd, timeout):
    """(ready line as a dict or None, timed out?) from the watchdog's ``--ready-fd`` pipe.

    End of file with no line means it exited before watching.
    """
    import select

    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, True
        readable, _, _ = select.select([read_fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        buf += chunk
    try:
        ready = json.loads(buf.split(b"\n", 1)[0].decode("utf-8", "replace"))
    except ValueError:
        return None, False
    return (ready if isinstance(ready, dict) and ready.get("ready") is True else None), False


def _start_failure(process, command, log_path, timed_out):
    """The exception for a watchdog that did not start watching (it is stopped by then)."""
    if timed_out and process.poll() is None:
        process.kill()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    try:
        with open(log_path, "r", errors="replace") as f:
            log = f.read().strip()
    except OSError:
        log = ""
    errors = [line.split("error: ", 1)[1] for line in log.splitlines() if line.startswith("watchdog: error: ")]
    cmd = " ".join(command)
    if timed_out:
        return RuntimeError(
            "the watchdog did not say it was watching within %g s; it was stopped. Command: %s; log:\n%s"
            % (_READY_TIMEOUT_S, cmd, log)
        )
    if process.returncode == 2:
        # The binary's usage errors name the flag or value and what it expected.
        return ValueError("the watchdog refused its arguments: %s (command: %s)" % ("; ".join(errors) or log, cmd))
    return RuntimeError(
        "the watchdog exited with status %s before watching: %s (command: %s)"
        % (process.returncode, "; ".join(errors) or log or "no output", cmd)
    )


def attach(watchdog="watchdog", args=(), request_file=None, sig=None, on_term=None, **options):
    """Start ``watchdog --pid <this process>`` in the background (for notebooks) and install the handler.

    Options are keywords named after the binary's flags (dashes as underscores), e.g.
    ``attach(mem_limit="12GiB", lead="60s")``; every flag ``watchdog --pid`` takes has one.
    Durations (``interval``, ``max_interval``, ``lead``, ``max_runtime``, ``hook_timeout``,
    ``record_window``, ``slurm_poll``, ``term_grace``, ``notice_interval``): seconds as a
    number, a ``timedelta`` or a string such as ``"1h30m"``; ``mem_limit``: bytes or
    ``"12GiB"``; ``disk``: one path or a list; ``deadline``: an aware ``datetime`` or RFC 3339
    text; ``dry_run``: True; ``notify=False`` and ``status=False`` for ``--no-notify`` and
    ``--no-status``; the others (``metrics``, ``config``, ``events``, ``on_alert``, ``record``,
    ``gpu``, ``floor``, ``log_format``, ``checkpoint_record``, ``notice``, ``notice_endpoint``)
    as the flag takes them. Flags may also go in ``args``. ``sig`` is the checkpoint signal
    (default ``$WATCHDOG_SIGNAL``, else SIGUSR1); ``request_file`` defaults to one in a new
    temporary directory ``training-watchdog-*``, which also holds the watchdog's log.

    The binary: ``watchdog`` if it is a path, else ``$WATCHDOG_BIN``, else ``watchdog`` beside
    ``sys.executable`` (where ``pip install training-watchdog`` puts it: found even when the
    kernel did not activate its virtual environment), else on PATH.

    Returns as soon as the watchdog says it is watching (its ``--ready-fd`` line). Everything
    is checked first; on any failure nothing is left changed (no variable, handler, file or
    process) and the error says what was wrong: ValueError for a bad value (the binary's own
    message when it refuses one, naming the flag), TypeError for a value of the wrong type,
    FileNotFoundError when there is no binary, RuntimeError otherwise.

    Idempotent: calling it again with the same arguments while that watchdog runs returns the
    same handle (re-installing the handler if something replaced it); with other arguments it
    replaces it cleanly: the new watchdog is started, and once it is watching the old one is
    stopped (as by ``stop()``). There is never more than one.

    The watchdog runs in its own session (the kernel's interrupt does not reach it) and exits
    by itself when this process exits; at interpreter exit it is stopped and its temporary
    directory removed, by this process only (a forked child has no attached watchdog). Sets ``WATCHDOG_SIGNAL``, ``WATCHDOG_REQUEST_FILE`` and
    ``WATCHDOG_PID`` in ``os.environ`` and calls :func:`install`; ``stop()`` puts them back.
    While attached, the first :func:`checkpoint_requested` that sees a new request shows it
    (an IPython display in a notebook, else a :class:`CheckpointRequestWarning`).

    ``on_term="save"``: as for :func:`install`, SIGTERM to this process asks for a save and
    ends it once acknowledged (a client option: the watchdog is not told); ``stop()`` gives
    SIGTERM back its earlier disposition unless one is waiting for its save.
    """
    global _attached
    _signals._check_on_term(on_term)
    plan = _Plan(watchdog, args, request_file, sig, options)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "training_watchdog.attach() must be called from the main thread: "
            "Python only lets the main thread install signal handlers"
        )
    current = _attached
    _signals._check_term_signal(plan.signum, on_term)
    if current is not None and current.running and current._key == plan.key:
        if on_term is not None:
            current._restore.term = current._restore.term or _signals._on_term is None
        install(plan.signum, on_term=on_term)
        return current

    restore = _Restore()
    restore.note(plan.signum)
    restore.term = on_term is not None and _signals._on_term is None
    workdir = process = read_fd = write_fd = None
    try:
        install(plan.signum, on_term=on_term)
        workdir = tempfile.mkdtemp(prefix="training-watchdog-")
        request_path = plan.request_file or os.path.join(workdir, "request.json")
        read_fd, write_fd = os.pipe()
        command = [plan.binary, "--pid", str(os.getpid()), "--request-file", request_path,
                   "--signal", plan.signame, "--ready-fd", str(write_fd)] + plan.argv
        with open(os.path.join(workdir, "watchdog.log"), "wb") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=(write_fd,),
            )
        os.close(write_fd)
        write_fd = None
        ready, timed_out = _wait_ready(read_fd, _READY_TIMEOUT_S)
        if ready is None:
            raise _start_failure(process, command, os.path.join(workdir, "watchdog.log"), timed_out)
    except BaseException:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        restore.restore()
        raise
    finally:
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.close(fd)

    os.environ["WATCHDOG_SIGNAL"] = plan.signame
    os.environ["WATCHDOG_REQUEST_FILE"] = request_path
    os.environ["WATCHDOG_PID"] = str(process.pid)  # the watchdog's PID, as `watchdog run` sets it
    _set_interval(plan.argv)
    _report_environment(request_path)
    handle = WatchdogHandle(process, workdir, request_path, command, ready, plan.key, restore)
    if current is not None:
        # Replaced: stop the old one without putting back what it changed; the new one
        # restores the state from before the first attach() when it stops.
        current._result = current._result or current._shutdown(5.0)
        handle._restore = restore.under(current._restore)
    _attached = handle
    _register_atexit()
    return handle


def attached():
    """The handle of the watchdog :func:`attach` started and nobody stopped yet, or None."""
    return _attached


def _register_atexit():
    global _atexit_registered
    if not _atexit_registered:
        import atexit

        atexit.register(_stop_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_in_child)
        _atexit_registered = True


def _forget_in_child():
    """After ``os.fork()``: the child did not attach, so it has no attached watchdog (its
    ``WATCHDOG_*`` variables and handler stay: the parent's watchdog watches it too)."""
    global _attached
    _attached = None


def _stop_at_exit():
    handle = _attached
    if handle is not None and handle._owner == os.getpid():
        try:
            handle.stop(timeout=2.0)
        except Exception:
            pass


def _set_interval(argv):
    """``WATCHDOG_INTERVAL`` (seconds) from the ``--interval`` in ``argv``, for the step reports;
    unset when it is not given or not a plain duration (the reports then use 0.1 s)."""
    seconds = None
    for flag, value in zip(argv, argv[1:]):
        if flag == "--interval":
            seconds = _duration_seconds(value)
    for a in argv:
        if a.startswith("--interval="):
            seconds = _duration_seconds(a.split("=", 1)[1])
    if seconds is None:
        os.environ.pop("WATCHDOG_INTERVAL", None)
    else:
        os.environ["WATCHDOG_INTERVAL"] = ("%.6f" % seconds).rstrip("0").rstrip(".") or "0"
