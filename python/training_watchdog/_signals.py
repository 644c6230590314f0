"""The checkpoint signal's handler, :func:`install`, and SIGTERM as a request.

The handler only sets a flag (a save inside a signal handler hangs); :func:`install` puts it
in place, chaining what was there, and registers with the service. ``on_term="save"`` takes
SIGTERM too: its handler only sets a flag, and once the loop has saved, SIGTERM is raised
again with the disposition it had before. The request file is read by
:mod:`training_watchdog._requests`, which asks here whether a signal or a SIGTERM came.
"""

import os
import signal
import sys
import threading
import time

from training_watchdog import _service
from training_watchdog._environment import _report_environment
from training_watchdog._units import _checkpoint_signal


_flag = False
# time.time() when the handler last ran
_flag_at = 0.0
# signal number -> the handler that was installed before ours (chained on every signal)
_previous = {}


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
    if register and not os.environ.get("WATCHDOG_REQUEST_FILE") and _service._registered is None:
        named = _service._register_with_daemon()
        if named is not None and named != signum:
            _catch(named)
    _report_environment(_service.request_file())
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


# SIGTERM as a notice: install(on_term="save").
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


def _clear_flag():
    """The signal's request is being answered: the flag is down."""
    global _flag
    _flag = False


def _term_answered():
    """A save answering a SIGTERM was acknowledged: the process is to end, now unless a
    framework callback ends it at a point of its own."""
    global _term_saved
    _term_saved = True
    if not _term_deferred:
        _end_by_sigterm()


def _reset_state():
    """Forget the flags and give SIGTERM back (for tests)."""
    global _on_term, _term_flag, _term_at, _term_saved, _term_deferred, _flag, _flag_at
    if _on_term is not None and signal.getsignal(signal.SIGTERM) is _term_handler:
        signal.signal(signal.SIGTERM, _term_previous)
    _on_term = None
    _term_flag = False
    _term_at = 0.0
    _term_saved = False
    _term_deferred = False
    _flag = False
    _flag_at = 0.0
    _previous.clear()
