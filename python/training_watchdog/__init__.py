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

In a notebook, :func:`attach` starts the watchdog on the kernel itself (the binary comes with
``pip install training-watchdog``; no need to activate the environment)::

    h = tw.attach(mem_limit="12GiB", lead="60s")   # returns once it watches; again: same handle
    ...                                            # the loop above; a request is shown in the cell
    h.report()                                     # the flight recording, drawn inline
    h.stop()                                       # stopped, temp dir removed, recording kept

Environment, set by ``watchdog run`` (or by :func:`attach`): ``WATCHDOG_SIGNAL`` (e.g.
``SIGUSR1``), ``WATCHDOG_REQUEST_FILE`` (path of the request file), ``WATCHDOG_PID``.

Under ``watchdog daemon`` (the workstation service, which finds runs by itself) nothing is
set. Then :func:`install` registers the process with the daemon when its socket
(``$WATCHDOG_SOCKET``, default ``/run/watchdog/daemon.sock``) exists: one JSON line
``{"op": "register", "pid": PID}``, answered by the request file the daemon will write
(2 s timeout; no socket: nothing happens; an error: a warning, never an exception).
``install(register=False)`` does not register. And :func:`request_file` finds a run the
daemon discovered without registration: ``<dir>/<uid>/<pid>.request.json``, ``<dir>`` being
``$WATCHDOG_DAEMON_DIR`` (default ``/run/watchdog/users``), for this process's PID and then
each ancestor's of the same user (the daemon names the file after the run's first process,
and this may be a child of it). The ancestors are read from ``/proc`` once per process;
after that a call costs one ``stat`` more than with ``WATCHDOG_REQUEST_FILE``.

Acknowledgment protocol: :func:`acknowledge` writes ``<request file>.ack`` atomically (temp
file + rename) with ``{"seq": N, "time_unix": T}``, ``N`` the ``seq`` of the request handled and
``T`` the time the checkpoint was done, plus ``path``, ``step`` and ``cause`` when given
(docs/recording.md). A request is pending while no ack has its ``seq`` and a ``time_unix`` at
or after the request's ``time_unix``.

When a CUDA out-of-memory error ends a step anyway, :func:`last_chance` (a context manager
around a plain loop; the framework modules have their own) saves the run before the error
ends it, acknowledges with ``cause="cuda_oom"`` and re-raises the error.

When SIGTERM reaches the run itself (SLURM's ``scancel``, systemd's ``KillMode=control-group``
and a VM's shutdown send it to every process), ``install(on_term="save")`` turns it into a
request: the handler only sets a flag, :func:`checkpoint_requested` returns True, the loop
saves and calls :func:`acknowledge` (``{"seq": 0, "cause": "terminating"}`` when no request
file asks for the save), and then SIGTERM is raised again with the disposition it had
before, so the process ends with status 143 (docs/notices.md).
"""

import errno
import json
import operator
import os
import re
import shutil
import signal
import stat
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
    "last_chance",
    "attach",
    "attached",
    "WatchdogHandle",
    "StopResult",
    "CheckpointRequestWarning",
    "request_file",
    "report_step",
    "TERM_CAUSE",
]

__version__ = "0.1.0"

_flag = False
# time.time() when the handler last ran
_flag_at = 0.0
# A signal this soon after its request was written, arriving once that request is acknowledged,
# is that request's own signal come late (the watchdog writes the file, then signals).
_LATE_SIGNAL_S = 5.0
# signal number -> the handler that was installed before ours (chained on every signal)
_previous = {}
# the request being handled: what checkpoint_requested() saw when it returned True
_handling = None
# (seq, time_unix) of the last request this process acknowledged
_acked = None
# path -> ((ino, mtime_ns, size), parsed JSON or None): files are parsed only when they change
_cache = {}


# The standard signals the binary knows by name (crates/watchdog-types/src/units.rs, SIGNALS);
# it also reads IOT as ABRT. Aliases Python knows beyond these (CLD, POLL) are refused, as there.
_SIGNAL_NAMES = tuple(
    "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP "
    "TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split()
)

# Signals whose handlers are crash or abort paths; the binary refuses them as the checkpoint
# signal (CRASH_SIGNALS there).
_CRASH_SIGNALS = frozenset(
    "SIG" + n for n in "SEGV BUS FPE ILL ABRT TRAP SYS QUIT XCPU XFSZ".split()
)

_RT_NAME = re.compile(r"RTM(IN|AX)(?:([+-])([0-9]+))?")

_SIGNAL_EXPECTED = "expected e.g. SIGUSR1, USR2, 10 or SIGRTMIN+2"


def _resolve_signal(sig=None):
    """Signal number from an int, a numeric string or a name, as the watchdog writes them.

    Names with or without ``SIG``, any case: ``SIGUSR1``, ``USR1``, and the real-time
    ``SIGRTMIN``, ``SIGRTMIN+n``, ``SIGRTMAX-n``, ``SIGRTMAX`` (computed from
    ``signal.SIGRTMIN``/``signal.SIGRTMAX``, as the binary does at run time). Raises
    ValueError for anything else, or a real-time offset outside SIGRTMIN..SIGRTMAX. Whether
    the number may be the checkpoint signal is :func:`_checkpoint_signal`'s question.
    """
    if sig is None:
        sig = os.environ.get("WATCHDOG_SIGNAL") or "SIGUSR1"
    if isinstance(sig, int) and not isinstance(sig, bool):
        return int(sig)
    text = str(sig).strip().upper() if isinstance(sig, str) else ""
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    name = text[3:] if text.startswith("SIG") else text
    name = "ABRT" if name == "IOT" else name
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
    elif name in _SIGNAL_NAMES:
        member = signal.Signals.__members__.get("SIG" + name)
        if member is not None:
            return int(member)
    raise ValueError(
        "unknown signal: expected a name like SIGUSR1 or USR1, SIGRTMIN+n or SIGRTMAX-n, or a number"
    )


def _signal_problem(signum, for_attach=False):
    """Why ``signum`` cannot be the checkpoint signal, or None when it can.

    The binary's rule (``parse_signal``): a standard signal but KILL and STOP, or one in
    SIGRTMIN..SIGRTMAX (not the numbers the C library keeps for itself below SIGRTMIN), and
    not a crash signal. :func:`attach` also refuses SIGINT, which Jupyter interrupts with.
    """
    name = _signal_name(signum)
    standard = name[3:] in _SIGNAL_NAMES
    realtime = hasattr(signal, "SIGRTMIN") and int(signal.SIGRTMIN) <= signum <= int(signal.SIGRTMAX)
    if name in ("SIGKILL", "SIGSTOP"):
        return "%s cannot be caught, so no process could be asked to checkpoint with it" % name
    if not (standard or realtime) or signum not in signal.valid_signals():
        lo, hi = int(getattr(signal, "SIGRTMIN", 0)), int(getattr(signal, "SIGRTMAX", 0))
        return "%d is not a signal a process can catch (here: 1-31 but KILL and STOP, and %d-%d)" % (
            signum, lo, hi)
    if name in _CRASH_SIGNALS:
        return "%s is a crash signal (faulthandler and C runtimes end the process on it)" % name
    if for_attach and name == "SIGINT":
        return "Jupyter interrupts the running cell with it"
    return None


def _checkpoint_signal(sig=None, for_attach=False):
    """(number, name) of the checkpoint signal ``sig`` (None: ``$WATCHDOG_SIGNAL``, else SIGUSR1).

    The one check for :func:`install`, :func:`attach` and ``WATCHDOG_SIGNAL``; it accepts
    what the binary accepts. A ValueError names where the bad value came from
    (``sig=...`` or ``WATCHDOG_SIGNAL=...``), why it cannot be used, and what is expected.
    """
    source = "sig=%r" % (sig,)
    if sig is None:
        env = os.environ.get("WATCHDOG_SIGNAL")
        source = "WATCHDOG_SIGNAL=%r" % env if env else "the default SIGUSR1"
    try:
        signum = _resolve_signal(sig)
    except ValueError as e:
        raise ValueError("%s: %s" % (source, e)) from None
    why = _signal_problem(signum, for_attach)
    if why is not None:
        raise ValueError("%s cannot be the checkpoint signal: %s; %s" % (source, why, _SIGNAL_EXPECTED))
    return signum, _signal_name(signum)


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
    global _flag, _flag_at
    _flag = True
    _flag_at = time.time()
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)


def install(sig=None, register=True, on_term=None):
    """Catch the watchdog's signal (``WATCHDOG_SIGNAL``, default SIGUSR1); the handler only sets a flag.

    A Python handler installed before is chained (called after the flag is set). Calling
    ``install()`` again is harmless and re-installs the handler if something replaced it.
    Must be called from the main thread (Python runs signal handlers there only).
    Returns the signal number. A signal the binary would refuse (KILL, STOP, a crash signal
    such as SEGV or ABRT, a number no process can catch) is a ValueError naming ``sig=`` or
    ``WATCHDOG_SIGNAL``, and nothing is installed.

    With ``register`` (the default), when ``WATCHDOG_REQUEST_FILE`` is unset and a
    ``watchdog daemon`` listens on ``$WATCHDOG_SOCKET`` (default
    ``/run/watchdog/daemon.sock``), registers this process with it (once per process) and
    uses the request file it names from then on; the signal it names is caught too. No
    socket: nothing happens. A refusal or an error (a bad signal in its answer included) is a
    ``RuntimeWarning``, never an exception: training goes on without the daemon.

    ``on_term="save"``: SIGTERM is a request too (reason ``terminating``). Its handler only
    sets a flag; :func:`checkpoint_requested` returns True; once the loop has saved,
    :func:`acknowledge` writes the ack (``cause="terminating"``, ``seq`` 0 when no request
    file asks for this save) and raises SIGTERM again with the disposition it had before
    ``install()`` (the default: the process ends with status 143; a Python handler that
    was there: it runs now, after the save; ignored: training goes on). Acknowledging the
    watchdog's own notice (kind ``notice``, reason ``terminating``: ``watchdog run`` got
    SIGTERM and forwards it after the ack) ends the process the same way, so the forwarded
    SIGTERM is not saved for twice. A SIGTERM no step boundary saw is raised again at
    interpreter exit. ``on_term=None`` (the default) leaves SIGTERM as it is; a second
    SIGTERM does not hurry the save (SIGKILL still ends the process at once).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "training_watchdog.install() must be called from the main thread: "
            "Python only lets the main thread install signal handlers"
        )
    _check_on_term(on_term)
    signum = _checkpoint_signal(sig)[0]
    _check_term_signal(signum, on_term)
    if signum == signal.SIGINT:
        import warnings

        warnings.warn(
            "training_watchdog.install(): SIGINT as the checkpoint signal still raises "
            "KeyboardInterrupt (the handler keeps the previous one, so Ctrl-C stops the run), "
            "so each request from the watchdog ends the loop; use SIGUSR1",
            RuntimeWarning,
            stacklevel=2,
        )
    _catch(signum)
    if on_term is not None:
        _take_sigterm()
    if register and not os.environ.get("WATCHDOG_REQUEST_FILE") and _registered is None:
        named = _register_with_daemon()
        if named is not None and named != signum:
            _catch(named)
    _report_environment(request_file())
    return signum


def _catch(signum):
    """Install :func:`_handler` for ``signum``, chaining what was there (unless it is ours)."""
    current = signal.getsignal(signum)
    if current is _handler:
        return
    # SIG_DFL would terminate the process (the default for SIGUSR1) and SIG_IGN does nothing:
    # neither is chained. None means a handler installed outside Python: it cannot be called.
    _previous[signum] = current if callable(current) else None
    signal.signal(signum, _handler)


# ---------------------------------------------------------------------------------------------
# SIGTERM as a notice: install(on_term="save").

#: The ``cause`` of an acknowledgment written for a SIGTERM this process caught itself
#: (and the ``reason`` of the watchdog's own SIGTERM notice).
TERM_CAUSE = "terminating"
_ON_TERM = (None, "save")
# "save" while SIGTERM is taken by _term_handler, else None
_on_term = None
# SIGTERM's disposition before ours: what the SIGTERM is given to once the run has saved
_term_previous = signal.SIG_DFL
# set by _term_handler (the only thing it does)
_term_flag = False
_term_at = 0.0
# a save answering the end was acknowledged: the process is to end
_term_saved = False
# a framework callback ends the process itself, at a point of its own (else acknowledge() does)
_term_deferred = False
_term_atexit = False


def _check_on_term(on_term):
    if on_term not in _ON_TERM:
        raise ValueError("on_term=%r: expected None (SIGTERM left as it is) or 'save' (SIGTERM "
                         "asks for a checkpoint, then ends the run)" % (on_term,))


def _check_term_signal(signum, on_term):
    if on_term is not None and signum == signal.SIGTERM:
        raise ValueError(
            "on_term=%r with SIGTERM as the checkpoint signal: SIGTERM cannot both ask for a save "
            "and end the run; expected another checkpoint signal, e.g. SIGUSR1" % (on_term,))


def _term_handler(signum, frame):
    """SIGTERM under ``install(on_term="save")``: only sets flags (the loop saves)."""
    global _term_flag, _term_at
    if not _term_flag:
        _term_at = time.time()
    _term_flag = True


def _take_sigterm(deferred=False):
    """Installs :func:`_term_handler` for SIGTERM (main thread), keeping the disposition it
    replaces for the end. ``deferred``: the caller (a framework callback) ends the process
    itself with :func:`_end_by_sigterm` or :func:`_release_term`; :func:`acknowledge` does not."""
    global _on_term, _term_previous, _term_deferred, _term_atexit
    current = signal.getsignal(signal.SIGTERM)
    if current is not _term_handler:
        # None: a handler installed outside Python, which cannot be put back: the default.
        _term_previous = current if current is not None else signal.SIG_DFL
        signal.signal(signal.SIGTERM, _term_handler)
    _on_term = "save"
    _term_deferred = _term_deferred or bool(deferred)
    if not _term_atexit:
        import atexit

        atexit.register(_term_at_exit)
        _term_atexit = True


def _term_pending():
    """Whether a SIGTERM caught under ``on_term="save"`` waits for its save."""
    return _on_term is not None and _term_flag and not _term_saved


def _is_notice(req):
    return req.get("kind") == "notice" or req.get("resource") == "notice"


def _is_term_notice(req):
    """The watchdog's notice of a SIGTERM it got (it forwards SIGTERM once the save is acknowledged)."""
    return _is_notice(req) and req.get("reason") == TERM_CAUSE


def _end_by_sigterm():
    """Ends the process as the SIGTERM would have without the client: SIGTERM's earlier
    disposition back, SIGTERM raised again. The default ends the process (status 143, -15 to
    ``subprocess``); a Python handler runs (and decides); an ignored SIGTERM changes nothing.
    Outside the main thread the main thread's handler is asked to do it."""
    global _on_term, _term_flag, _term_saved, _term_deferred
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # a signal's default action does not flush Python's buffers
        except Exception:
            pass
    previous = _term_previous
    if threading.current_thread() is not threading.main_thread():
        _term_deferred = False  # the main thread's next checkpoint_requested() ends it
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _on_term, _term_flag, _term_saved, _term_deferred = None, False, False, False
    try:
        signal.signal(signal.SIGTERM, previous)
    except (OSError, TypeError, ValueError):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    except (AttributeError, OSError, ValueError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _release_term():
    """Training is over (a framework callback's end): a SIGTERM that came, saved for or too
    late for a save, is raised again now (:func:`_end_by_sigterm`); else SIGTERM gets its
    earlier disposition back."""
    global _on_term, _term_deferred
    if _on_term is None:
        return
    if _term_flag or _term_saved:
        _end_by_sigterm()
        return
    _on_term, _term_deferred = None, False
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _term_handler:
        try:
            signal.signal(signal.SIGTERM, _term_previous)
        except (OSError, TypeError, ValueError):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _term_at_exit():
    """At interpreter exit: a SIGTERM that came (saved or not) ends the process with it."""
    if _on_term is not None and (_term_flag or _term_saved):
        _end_by_sigterm()


# ---------------------------------------------------------------------------------------------
# watchdog daemon: registration over its socket, and its per-user directory.

_DAEMON_SOCKET = "/run/watchdog/daemon.sock"
_DAEMON_DIR = "/run/watchdog/users"
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
    path = os.environ.get("WATCHDOG_SOCKET") or _DAEMON_SOCKET
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
    key = (os.getpid(), os.environ.get("WATCHDOG_DAEMON_DIR") or _DAEMON_DIR, os.getuid())
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


# The packages whose versions decide how training behaves (their distribution names).
_PACKAGES = ("torch", "tensorflow", "keras", "jax", "lightning", "pytorch-lightning", "transformers", "numpy")
_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]{1,32})['\"]", re.M)
_reported = set()


def _normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def _metadata_version(path):
    """The ``Version:`` header of a METADATA or PKG-INFO file, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line[8:].strip()[:64] or None
                if line in ("\n", "\r\n"):  # the headers end at the first blank line
                    return None
    except OSError:
        return None
    return None


def _installed(wanted):
    """``{name: (version, sys.path entry)}`` of the distributions in ``wanted`` (their normalized
    names), from the ``.dist-info``/``.egg-info`` metadata on ``sys.path``; the first entry wins,
    as for an import. Reads directory listings and METADATA headers only: importing
    ``importlib.metadata`` alone costs more than the 50 ms budget of ``install()``."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for item in names:
            stem, dot, suffix = item.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            name = _normalized(stem.split("-", 1)[0])
            if name not in wanted or name in found:
                continue
            path = os.path.join(entry or ".", item)
            meta = os.path.join(path, "METADATA" if suffix == "dist-info" else "PKG-INFO")
            version = _metadata_version(meta) if os.path.isdir(path) else _metadata_version(path)
            if version is None and "-" in stem:
                version = stem.split("-")[1]
            if version:
                found[name] = (version, entry or ".")
    return found


def environment():
    """The run's Python side, as the watchdog records it: the interpreter's implementation and
    version (not its path), the installed versions of the packages that decide how training
    behaves (from their metadata; none is imported) and torch's CUDA build (read from
    ``torch/version.py`` as a file). Standard library only."""
    wanted = {_normalized(n): n for n in _PACKAGES}
    packages = {}
    torch_cuda = None
    for key, (version, entry) in _installed(wanted).items():
        packages[wanted[key]] = version
        if key == "torch":
            try:
                with open(os.path.join(entry, "torch", "version.py"), encoding="utf-8") as f:
                    found = _CUDA_LINE.search(f.read(65536))
                torch_cuda = found.group(1) if found else None
            except (OSError, ValueError):
                pass
    v = sys.version_info
    report = {
        "implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name),
        "version": "%d.%d.%d" % (v.major, v.minor, v.micro),
        "packages": packages,
    }
    if torch_cuda:
        report["torch_cuda"] = torch_cuda
    return report


def _report_environment(path):
    """Write :func:`environment` to ``<request file>.environment`` once per request file."""
    if not path or path in _reported:
        return
    _reported.add(path)
    try:
        # The PID tells the watchdog the file is this run's, not one left by an earlier run.
        report = dict(environment(), pid=os.getpid())
        _write_atomic(path + ".environment", (json.dumps(report, sort_keys=True) + "\n").encode())
    except Exception as e:  # the report is a nicety: never stop the run for it
        sys.stderr.write("training_watchdog: cannot write the environment report: %s\n" % e)


def request_file():
    """The request file path: ``WATCHDOG_REQUEST_FILE``; else the one a ``watchdog daemon``
    named when :func:`install` registered; else the daemon's file for this run in its per-user
    directory, once there is one (see the module documentation); else None."""
    return os.environ.get("WATCHDOG_REQUEST_FILE") or _registered or _daemon_request_file()


def _ack_path(path):
    return path + ".ack"


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


# The most read of a request or ack file: the daemon's cap on a file a user wrote
# (MAX_USER_FILE_BYTES in crates/watchdog-alerter/src/beneath.rs).
_MAX_FILE_BYTES = 64 * 1024
# As the daemon opens them: never through a symbolic link, never blocking on a FIFO, never
# adopting a terminal.
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
# path -> why it was last refused: a bad file is warned about once, not at every step.
_refused = {}


class _Unfit(Exception):
    """A request or ack file that is not read: why, for the warning."""


def _open_regular(path, follow=False):
    """``(fd, stat)`` of ``path`` opened for reading as the daemon opens a user's file, or None when
    it is missing: ``O_NONBLOCK`` (a FIFO never blocks the open), ``O_NOFOLLOW`` unless
    ``follow`` (a checkpoint the user named through a link is read through it; a file inside
    one never is), and a regular file by ``fstat`` of what was opened (no race with a swap).
    Raises :class:`_Unfit` otherwise. Every file a run, a user or a crashed attempt could
    have planted is opened here (request, ack, checkpoint record, ``trainer_state.json``, a
    checkpoint's zip)."""
    flags = _READ_FLAGS if not follow else _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _Unfit("it is a symbolic link") from None
        raise _Unfit(e.strerror or str(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unfit("not a regular file")
    except BaseException as e:
        os.close(fd)
        if isinstance(e, OSError):
            raise _Unfit(e.strerror or str(e)) from None
        raise
    return fd, st


def _read_capped(path, limit=_MAX_FILE_BYTES, owner=None, follow=False):
    """The bytes of ``path`` (None when it is missing), read as the daemon reads a user's file:
    opened by :func:`_open_regular`, at most ``limit`` bytes (64 KiB), owned by uid ``owner``
    when given. Raises :class:`_Unfit` otherwise."""
    opened = _open_regular(path, follow)
    if opened is None:
        return None
    fd, st = opened
    try:
        if owner is not None and st.st_uid != owner:
            raise _Unfit("owned by uid %d, not by this user (uid %d)" % (st.st_uid, owner))
        if st.st_size > limit:
            raise _Unfit("%d bytes, more than the %d read" % (st.st_size, limit))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew since the fstat
            raise _Unfit("more than the %d bytes read" % limit)
        return b"".join(chunks)
    except OSError as e:
        raise _Unfit(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def _safe_repr(value, limit=80):
    """``repr(value)`` in at most ``limit`` characters, for a message about a bad argument: never
    raises, whatever the object's ``__repr__`` does (then ``<unprintable TYPE>``)."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError
        text = str.__str__(text)
    except Exception:
        text = "<unprintable %s>" % _type_name(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _message(exc):
    """The text of an exception for a log line: ``str(exc)``, or ``<unprintable TYPE>`` when its
    ``__str__`` raises; never raises."""
    try:
        text = str(exc)
        if isinstance(text, str):
            return str.__str__(text)
    except Exception:
        pass
    return "<unprintable %s>" % _type_name(exc)


def _failure(exc):
    """``TYPE: message`` of an exception, for a log line or a warning; never raises."""
    return "%s: %s" % (_type_name(exc), _message(exc))


def _type_name(value):
    """The name of ``value``'s type; ``object`` when even that cannot be read."""
    try:
        return str.__str__(type.__getattribute__(type(value), "__name__"))
    except Exception:
        return "object"


def _parse_object(data):
    """The JSON object in ``data``; :class:`_Unfit` for anything else."""
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise _Unfit("JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both are
        raise _Unfit("not a JSON object (%s)" % e) from None
    if not isinstance(value, dict):
        raise _Unfit("not a JSON object")
    return value


def _caller_stacklevel():
    """The ``stacklevel`` that makes a warning point at the first caller outside this package."""
    def inside(frame):
        name = frame.f_globals.get("__name__", "")
        return name == __name__ or name.startswith(__name__ + ".")

    level, frame = 1, sys._getframe(1)
    while frame is not None and inside(frame):
        level += 1
        frame = frame.f_back
    return level


def _warn_refused(path, why):
    """Warn once that ``path`` is not read (never raised, even under ``-W error``)."""
    if _refused.get(path) == why:
        return
    _refused[path] = why
    try:
        import warnings

        warnings.warn(
            "training_watchdog: not reading %s: %s; taken as no request or acknowledgment" % (path, why),
            RuntimeWarning,
            stacklevel=_caller_stacklevel(),
        )
    except Exception:
        pass


def _read_json_cached(path):
    """Parsed JSON object of ``path``, re-read only when its inode, mtime or size changed.

    Never raises and never blocks: a file that is not a regular file of at most 64 KiB
    holding a JSON object is warned about once and taken as None (missing: None, silently).
    """
    try:
        st = os.lstat(path)
    except OSError:
        _cache.pop(path, None)
        _refused.pop(path, None)
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        data = _read_capped(path)
        if data is None:
            return None
        value = _parse_object(data)
    except _Unfit as e:
        _warn_refused(path, str(e))
        _cache[path] = (stamp, None)  # read again only once it changes
        return None
    _refused.pop(path, None)
    _cache[path] = (stamp, value)
    return value


def _number(d, key):
    v = d.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _file_request():
    """The parsed request file as a dict, or None."""
    path = request_file()
    if path is None:
        return None
    req = _read_json_cached(path)
    return dict(req) if req is not None else None


def request():
    """The current request as a dict, or None when there is none: the parsed request file;
    while a SIGTERM caught by ``install(on_term="save")`` waits for its save and the file
    holds no pending request, ``{"seq": 0, "kind": "notice", "resource": "notice",
    "reason": "terminating", "source": "sigterm", "time_unix": T, "used": 0, "limit": 0}``
    (no ``deadline_unix``: the grace of a SIGTERM sent to the run itself is not known here).
    A notice from the watchdog has ``kind`` ``notice`` and a ``deadline_unix``."""
    req = _file_request()
    if _term_pending() and (req is None or not _pending(req)):
        return {"seq": 0, "kind": "notice", "resource": "notice", "reason": TERM_CAUSE,
                "source": "sigterm", "time_unix": _term_at, "used": 0, "limit": 0}
    return req


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
    request exists); files are parsed only when they change. It never blocks or raises: a
    request or ack file that is not a regular file of at most 64 KiB holding a JSON object
    (a FIFO, ``/dev/zero``, a symbolic link) is one ``RuntimeWarning`` and no request.
    While a watchdog started by :func:`attach` runs, a new request is also shown once: an
    IPython display in a notebook (what runs out, how much is used, how long is left), else
    a :class:`CheckpointRequestWarning`. Under ``watchdog run`` the watchdog's own log says it.
    The watchdog writes the file before it signals, so a signal that arrives once its request
    is acknowledged (read from the file first, here or by another rank), within 5 s of the
    request, is that request's own and no new one.
    """
    global _handling, _flag
    req = _file_request()
    if req is not None and _pending(req):
        _handling = req
        if _attached is not None:
            _announce(req)
        return True
    if _term_pending():
        return True
    if _term_saved and _term_flag:
        # SIGTERM came after its save (the watchdog's notice was acknowledged first): the
        # end, not a second save. A framework callback carries it out at its own point.
        if not _term_deferred:
            _end_by_sigterm()
        return False
    if _flag:
        if req is not None:
            if _late_signal_of(req):
                _flag = False
                return False
            _handling = req
        return True
    return False


def _late_signal_of(req):
    """Whether the flag was raised by the signal of ``req``, already acknowledged (read from its
    file before its signal arrived, by this process or another rank): no new request."""
    t = _number(req, "time_unix")
    return t is not None and 0.0 <= _flag_at - t < _LATE_SIGNAL_S


def _write_atomic(path, data, sync=True):
    """Write bytes to ``path`` via a temp file (O_EXCL|O_NOFOLLOW) in the same directory, fsync, rename.

    ``sync=False`` skips the fsync, for a file the watchdog reads within an interval and that
    is worth nothing after a crash (the step reports)."""
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
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def acknowledge(path=None, step=None, cause=None):
    """Tell the watchdog the checkpoint is saved: write ``<request file>.ack`` and clear the flag.

    Acknowledges the request seen by the last ``checkpoint_requested()`` that returned True
    (or the current one). ``path`` (the checkpoint written, a file or a directory; written
    absolute), ``step`` (the framework's global step it holds) and ``cause`` (why the client
    saved without a request: ``"cuda_oom"`` for the last-chance save) go into the ack when
    given; the fields are in docs/recording.md. An acknowledgment with a ``cause`` is written even when
    no request is pending, with ``seq`` 0 (the pending request's ``seq`` when there is one).
    Returns the acknowledged ``seq``, or None when nothing was written (no request file, or no
    request and no cause; the flag is cleared anyway). A failure to write the ack is reported
    with a warning, never raised into the training loop; a bad argument is a ValueError.

    After ``install(on_term="save")``, when the save answers a SIGTERM this process caught
    (``cause`` defaults to ``"terminating"`` unless a notice request of the watchdog's asks
    for it) or acknowledges such a notice, the process then ends as the SIGTERM would have
    ended it (see :func:`install`): with the default disposition this call does not return.
    """
    global _flag, _handling, _acked, _term_saved
    extra = _ack_fields(path, step, cause)
    _flag = False
    req = _handling if _handling is not None else _file_request()
    _handling = None
    own_term = _term_pending()
    notice = _on_term is not None and req is not None and _is_term_notice(req) and _pending(req)
    if own_term and cause is None and not notice:
        cause = TERM_CAUSE
        extra["cause"] = cause
    try:
        return _write_ack(req, cause, extra)
    finally:
        if own_term or notice:
            _term_saved = True
            if not _term_deferred:
                _end_by_sigterm()


def _write_ack(req, cause, extra):
    """Writes the ack of :func:`acknowledge`; returns its ``seq`` (None when none was written)."""
    global _acked
    if cause is not None and req is not None and not _pending(req):
        req = None  # a save nobody asked for: not an answer to a request handled before
    file = request_file() if cause is None else _request_file_or_register()
    seq = _number(req, "seq") if req is not None else None
    if file is None or (seq is None and cause is None):
        return None
    if seq is None:
        seq = 0
    else:
        _acked = (seq, _number(req, "time_unix") or 0.0)
    body = json.dumps(dict({"seq": seq, "time_unix": time.time()}, **extra)).encode("utf-8") + b"\n"
    try:
        _write_atomic(_ack_path(file), body)
    except OSError as e:
        import warnings

        warnings.warn("training_watchdog: cannot write the acknowledgment: %s" % e, RuntimeWarning,
                      stacklevel=_caller_stacklevel())
    return seq


def _ack_fields(path, step, cause):
    """The optional fields of an ack, checked: ``path`` a path, ``step`` a whole number >= 0,
    ``cause`` a short name. A ValueError names the argument and what was expected, whatever
    the object does (its ``__fspath__``, ``__index__``, ``__eq__`` or ``__repr__`` raising
    included); what is kept is a plain ``str`` or ``int``, never the caller's object."""
    fields = {}
    if path is not None:
        try:
            raw = os.fspath(path)
            if isinstance(raw, bytes):
                text = bytes.decode(raw, sys.getfilesystemencoding(), "surrogateescape")
            else:
                text = str.__str__(raw)
            # Absolute: the watchdog, and a restarted run, may not share this process's directory.
            absolute = os.path.abspath(text)
        except Exception:
            raise ValueError("acknowledge(path=%s): expected a path (str or os.PathLike)" % _safe_repr(path)) from None
        try:
            absolute.encode("utf-8")
            fields["path"] = absolute
        except UnicodeEncodeError:
            pass  # not UTF-8: the watchdog could not read the ack at all; it goes without its path
    if step is not None:
        # At most 2**64 - 1: the watchdog reads it as a u64, and ignores an ack it cannot read.
        try:
            value = None if isinstance(step, bool) else int.__int__(operator.index(step))
        except Exception:
            value = None
        if value is None or not 0 <= value < 1 << 64:
            raise ValueError("acknowledge(step=%s): expected a whole number of steps, 0 to 2**64 - 1"
                             % _safe_repr(step))
        fields["step"] = value
    if cause is not None:
        try:
            name = str.__str__(cause) if isinstance(cause, str) else None
        except Exception:
            name = None
        if name is None or not re.fullmatch(r"[a-z0-9_]{1,64}", name):
            raise ValueError("acknowledge(cause=%s): expected a name such as 'cuda_oom'" % _safe_repr(cause))
        fields["cause"] = name
    return fields


# How long a last-chance save may take by default, in seconds (training_watchdog.oom keeps it):
# a large model written to a network file system takes minutes, a hung one never ends.
_LAST_CHANCE_TIMEOUT_S = 300.0


def last_chance(save, step=None, phase="train", timeout=_LAST_CHANCE_TIMEOUT_S):
    """Context manager around a plain training loop: on a CUDA out-of-memory error inside
    it, free the step's memory, call ``save`` (it saves and returns the path), acknowledge
    with ``cause="cuda_oom"``, and let the error go on::

        def save(step):                  # or save(): the step is given when it takes one
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, p)
            return p

        with training_watchdog.last_chance(save) as run:
            for step in range(start, steps):
                run.step = step          # where the loop is: the checkpoint resumes there
                train_step()

    The original error always goes on, unchanged: a save that fails, is interrupted
    (``KeyboardInterrupt``, ``SystemExit``: noted on the error and logged, never raised in
    its place) or takes more than ``timeout`` seconds (default 300; None: no bound) is
    logged and not acknowledged. See :mod:`training_watchdog.oom` for how the bound is kept;
    Lightning, Transformers and Keras have their own.
    """
    from training_watchdog.oom import LastChance

    if not callable(save):
        raise TypeError("last_chance(save=%s): expected a function that saves and returns the path" % _safe_repr(save))
    return LastChance(save, step=step, phase=phase, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# attach(): a watchdog started from the training process itself, for notebooks.

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
# attach()'s keyword options: name -> (the binary's flag, kind of value).
_OPTIONS = {
    "lead": ("--lead", "duration"),
    "interval": ("--interval", "duration"),
    "mem_limit": ("--mem-limit", "size"),
    "max_runtime": ("--max-runtime", "duration"),
    "deadline": ("--deadline", "deadline"),
    "disk": ("--disk", "paths"),
    "events": ("--events", "path"),
    "record": ("--record", "path"),
    "record_window": ("--record-window", "duration"),
    "on_alert": ("--on-alert", "text"),
    "gpu": ("--gpu", "text"),
    "floor": ("--floor", "number"),
    "config": ("--config", "path"),
    "dry_run": ("--dry-run", "flag"),
    "notify": ("--no-notify", "negated"),
}
_MISSING = object()

# The handle of the watchdog attach() started and nobody stopped yet, or None.
_attached = None
# (seq, time_unix) of the last request shown in the notebook.
_shown = None
_atexit_registered = False


class CheckpointRequestWarning(UserWarning):
    """The warning shown (outside IPython) when an attached watchdog asks for a checkpoint."""


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


def _seconds_text(name, value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif hasattr(value, "total_seconds"):  # datetime.timedelta
        seconds = value.total_seconds()
    else:
        raise TypeError(
            "%s=%r: expected a number of seconds, a datetime.timedelta or a duration string "
            "such as '60s' or '1h30m'" % (name, value)
        )
    text = ("%.6f" % seconds).rstrip("0").rstrip(".")
    if seconds < 0 or seconds != seconds or (seconds > 0 and text == "0"):
        raise ValueError("%s=%r: expected a duration of 1 µs or more, or 0" % (name, value))
    return text + "s"


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
        if self.term and not (_term_flag or _term_saved):
            _release_term()  # a SIGTERM waiting for its save keeps it (it ends the process)


def _state_dir():
    """Where recordings are kept: ``$XDG_STATE_HOME/watchdog``, else ``~/.local/state/watchdog``."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "watchdog")


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
        directory = _state_dir()
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


def _ipython():
    """The running IPython shell, or None (IPython is never imported here if it is not loaded)."""
    mod = sys.modules.get("IPython")
    get = getattr(mod, "get_ipython", None)
    try:
        return get() if get is not None else None
    except Exception:
        return None


def _html_inline(path):
    """An IPython HTML object showing the page at ``path`` in an iframe (its style stays inside)."""
    import html

    from IPython.display import HTML

    with open(path, "r", encoding="utf-8", errors="replace") as f:
        page = f.read()
    return HTML(
        '<div><iframe srcdoc="%s" style="width:100%%;height:720px;border:1px solid #ccc" '
        'title="watchdog report"></iframe></div>' % html.escape(page, quote=True)
    )


def _report(binary, recording, output):
    """Runs ``watchdog report``; returns an inline HTML object in IPython, else the page's path."""
    if output is None:
        name = os.path.basename(recording)
        name = name[: -len(".recording.csv")] if name.endswith(".recording.csv") else name
        # Beside the recording, unless that is attach()'s temporary directory.
        directory = os.path.dirname(recording)
        if os.path.basename(directory).startswith("training-watchdog-"):
            directory = _state_dir()
            os.makedirs(directory, mode=0o700, exist_ok=True)
        output = os.path.join(directory, name + ".report.html")
    output = os.fspath(output)
    proc = subprocess.run(
        [binary, "report", recording, "-o", output],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            "watchdog report %s -o %s failed with status %d: %s"
            % (recording, output, proc.returncode, proc.stderr.strip())
        )
    if _ipython() is not None and output.endswith(".html"):
        return _html_inline(output)
    return output


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
            _fresh_recording(self.process, self.recording)
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


def _fresh_recording(process, path, timeout=10.0):
    """Asks a running watchdog to write its recording now (SIGUSR2) and waits until it has."""

    def stamp():
        try:
            st = os.stat(path)
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    before = stamp()
    process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        now = stamp()
        if now is not None and now != before:
            return
        time.sleep(0.02)


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

    Options are keywords named after the binary's flags, e.g.
    ``attach(mem_limit="12GiB", lead="60s")``: ``lead``, ``interval``, ``max_runtime`` and
    ``record_window`` (seconds as a number, a ``timedelta`` or a string such as ``"1h30m"``),
    ``mem_limit`` (bytes or ``"12GiB"``), ``deadline``, ``disk`` (one path or a list),
    ``events``, ``record``, ``on_alert``, ``gpu``, ``floor``, ``config``, ``dry_run`` and
    ``notify``; any other flag goes in ``args``. ``sig`` is the checkpoint signal (default
    ``$WATCHDOG_SIGNAL``, else SIGUSR1); ``request_file`` defaults to one in a new temporary
    directory ``training-watchdog-*``, which also holds the watchdog's log.

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
    _check_on_term(on_term)
    plan = _Plan(watchdog, args, request_file, sig, options)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "training_watchdog.attach() must be called from the main thread: "
            "Python only lets the main thread install signal handlers"
        )
    current = _attached
    _check_term_signal(plan.signum, on_term)
    if current is not None and current.running and current._key == plan.key:
        if on_term is not None:
            current._restore.term = current._restore.term or _on_term is None
        install(plan.signum, on_term=on_term)
        return current

    restore = _Restore()
    restore.note(plan.signum)
    restore.term = on_term is not None and _on_term is None
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


def _format_amount(value, unit):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    if unit == "bytes":
        for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= scale:
                return "%.1f %s" % (value / scale, name)
        return "%d B" % value
    if unit == "millis":
        return _format_seconds(value / 1000.0)
    return "%d" % value


def _format_seconds(s):
    if s >= 3600:
        return "%dh%02dm" % (s // 3600, (s % 3600) // 60)
    if s >= 60:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%.1f s" % s


def _alert_text(req):
    """One sentence for a person: what runs out, how much is used, how long is left; for a
    notice (kind ``notice``), that the run is being stopped and by when to save."""
    if _is_notice(req):
        why = {"terminating": "the run is being stopped (SIGTERM)",
               "preemption": "the machine is being preempted"}.get(req.get("reason"), "the run is being stopped")
        deadline = _number(req, "deadline_unix")
        if deadline is not None:
            by = "; save by %s, %s from now" % (time.strftime("%H:%M:%S", time.localtime(deadline)),
                                              _format_seconds(max(deadline - time.time(), 0.0)))
        else:
            by = "; save now"
        return (
            "watchdog: %s%s (request %s). Save a checkpoint, then call training_watchdog.acknowledge()."
            % (why, by, req.get("seq", "?"))
        )
    unit = req.get("unit")
    used, limit = _format_amount(req.get("used"), unit), _format_amount(req.get("limit"), unit)
    left = _number(req, "predicted_s")
    when = "about %s left" % _format_seconds(max(left, 0.0)) if left is not None else "headroom below the floor"
    return (
        "watchdog: %s is running out: %s of %s used, %s (request %s). Save a checkpoint, then call "
        "training_watchdog.acknowledge(); the handle's report() draws the recording."
        % (req.get("resource", "a resource"), used, limit, when, req.get("seq", "?"))
    )


def _announce(req):
    """Shows a new request once, while a watchdog is attached (never raises into the loop)."""
    global _shown
    key = (_number(req, "seq"), _number(req, "time_unix"))
    if _attached is None or key == _shown:
        return
    _shown = key
    text = _alert_text(req)
    try:
        shell = _ipython()
        if shell is not None:
            import html

            from IPython.display import display

            box = (
                '<div style="border-left:4px solid #c0392b;background:#fdecea;padding:6px 10px">'
                "&#9888; %s</div>" % html.escape(text)
            )
            display({"text/plain": text, "text/html": box}, raw=True)
            return
    except Exception:
        pass
    import warnings

    warnings.warn(text, CheckpointRequestWarning, stacklevel=3)


def _reset():
    """Forget all state (for tests); stops an attached watchdog."""
    global _flag, _flag_at, _handling, _acked, _shown, _registered, _lookup, _register_tried
    global _on_term, _term_flag, _term_at, _term_saved, _term_deferred
    if _attached is not None:
        _attached.stop()
    if _on_term is not None and signal.getsignal(signal.SIGTERM) is _term_handler:
        signal.signal(signal.SIGTERM, _term_previous)
    _on_term = None
    _term_flag = False
    _term_at = 0.0
    _term_saved = False
    _term_deferred = False
    _flag = False
    _flag_at = 0.0
    _handling = None
    _acked = None
    _shown = None
    _registered = None
    _register_tried = None
    _lookup = None
    _previous.clear()
    _cache.clear()
    _refused.clear()
    _reported.clear()


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


# The binary's duration units (parse_duration in crates/watchdog-types/src/units.rs).
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|secs|sec|s|mins|min|m|hrs|hr|h|d)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0,
                   "m": 60.0, "min": 60.0, "mins": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0,
                   "d": 86400.0}


def _duration_seconds(text):
    """Seconds of a duration such as ``"20ms"``, ``"1.5s"`` or ``"1m30s"``; None otherwise."""
    text = str(text).strip()
    if text == "0":
        return 0.0
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def report_step(step, phase="train", batch_size=None, tokens=None, reset_peak=True):
    """The allocator's figures at the end of one step, for the watchdog: see
    :func:`training_watchdog.allocator.report_step` (one call per step in a plain loop)."""
    from training_watchdog import allocator

    return allocator.report_step(step, phase, batch_size, tokens, reset_peak)
