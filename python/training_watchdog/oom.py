"""The last-chance save: when a CUDA out-of-memory error ends a step, save the run before it ends the process.

A CUDA OOM is a Python exception raised inside one step: the process is still alive and
its model, optimizer and loop state are intact up to the last completed step, but the
exception ends the script and the run is lost. :func:`rescue` is what each framework's
hook does with such an exception, in this order:

1. tell the allocator report (``training_watchdog.allocator.report_exception``) the step,
   the phase and the allocator's figures at the error;
2. free the failed step's memory: the traceback holds the frames of the step and their
   tensors (activations, the batch), so their local variables are cleared
   (``traceback.clear_frames``: a post-mortem debugger then shows the lines but not the
   locals), then ``gc.collect()`` and, only when CUDA was initialized,
   ``torch.cuda.empty_cache()``;
3. save, through the framework's own save, without any collective (the failing rank is
   alone: the others are blocked in the step's all-reduce);
4. :func:`training_watchdog.acknowledge` with ``path``, ``step`` and ``cause="cuda_oom"``;
5. return, so that the caller re-raises the original error.

A save that fails is logged (and added as a note to the original error); it never replaces
the original error. Each exception is handled once, however many hooks see it.

Whatever happens in between, the original error goes on unchanged (the same object; only a
note is added, on Python 3.11 and later):

- an error whose ``__str__`` raises is not read as "CUDA out of memory" by its message (a
  ``torch.OutOfMemoryError`` still is, by its type), and is raised again as it is;
- a ``KeyboardInterrupt`` or ``SystemExit`` raised during the save (Ctrl-C, a ``sys.exit``
  in the save) ends the save, which is not acknowledged; it is logged on stderr and noted on
  the original error ("the last-chance save was interrupted by KeyboardInterrupt"), and not
  raised in its place: the out-of-memory error is what ends the run, and what a caller
  catches;
- the save has a time bound, ``timeout`` seconds (:data:`DEFAULT_TIMEOUT_S`, 300; None: no
  bound). In the main thread, when the program has no ``SIGALRM`` handler and no
  ``ITIMER_REAL`` timer of its own, a real-time timer interrupts a save that takes longer
  (at its next Python instruction or interrupted system call: a wait inside a C extension
  that never returns is not interrupted); the save is then logged as too slow and not
  acknowledged (a checkpoint it left part-written is never offered: the resume helpers
  check completeness), and the handler and timer are put back as they were. Elsewhere (another
  thread, or ``SIGALRM`` in use) nothing is interrupted and no thread is killed: one line on
  stderr says the save is late when the bound passes, and the save goes on to its end.

:class:`LastChance` is the context manager around a plain loop
(``training_watchdog.last_chance``); the framework modules subclass it. This module never
imports torch: it uses the torch the process already imported.
"""

import gc
import inspect
import math
import os
import signal
import sys
import threading
import time
import traceback

import training_watchdog as _tw
from training_watchdog import _defaults, _messages
from training_watchdog import allocator

__all__ = ["CAUSE", "DEFAULT_TIMEOUT_S", "LastChance", "free_memory", "is_cuda_oom", "rescue", "sharded"]

#: The ``cause`` of the acknowledgment written after a last-chance save.
CAUSE = "cuda_oom"
#: Seconds a last-chance save may take before it is stopped (or said to be late; see above).
DEFAULT_TIMEOUT_S = _defaults.LAST_CHANCE_TIMEOUT_S

# Set on an exception once handled: Lightning's hook and a context manager around fit() both
# see the same exception, and it is saved once.
_HANDLED = "_training_watchdog_last_chance"

# What torch says in a CUDA OOM it raises as a plain RuntimeError (older versions, C++ paths).
_MESSAGE = "CUDA out of memory"


def is_cuda_oom(exc):
    """Whether ``exc`` (or an exception it was raised ``from``) is a CUDA out-of-memory error:
    a ``torch.OutOfMemoryError`` (it exists in CPU builds too) or a RuntimeError saying
    "CUDA out of memory" (an error whose ``__str__`` raises says nothing). Never imports
    torch, never raises."""
    seen = set()
    try:
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            torch = sys.modules.get("torch")
            oom = getattr(torch, "OutOfMemoryError", None)
            if isinstance(oom, type) and isinstance(exc, oom):
                return True
            if isinstance(exc, RuntimeError) and _MESSAGE in _messages._message(exc):
                return True
            exc = exc.__cause__
    except Exception:
        pass
    return False


def _log(text):
    try:
        sys.stderr.write("training_watchdog: %s\n" % text)
        sys.stderr.flush()
    except Exception:
        pass


def _report_exception(exc, step, phase):
    """The allocator's record of the error, in ``<request file>.steps`` (``.steps.<pid>`` for one
    of several ranks)."""
    try:
        allocator.report_exception(exc, step=step, phase=phase)
    except Exception as e:  # a report must never stop the save
        _log("cannot report the CUDA out-of-memory error to the watchdog: %s" % _messages._failure(e))


def free_memory(exc):
    """Free what the failed step held: the locals of the traceback's finished frames, then
    a collection, then PyTorch's cached CUDA blocks (only when CUDA was initialized)."""
    tb = getattr(exc, "__traceback__", None)
    if tb is not None:
        traceback.clear_frames(tb)  # skips frames still running (the caller's)
    gc.collect()
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            cuda.empty_cache()
    except Exception as e:
        _log("cannot empty the CUDA cache: %s" % _messages._failure(e))


def rescue(exc, save, step=None, phase="train", timeout=DEFAULT_TIMEOUT_S):
    """The last-chance save for ``exc`` when it is a CUDA OOM not handled yet; else nothing.

    ``save()`` saves in the framework's format and returns ``(path, step)``: the checkpoint
    written and the global step it holds. ``step`` and ``phase`` (``train``, ``eval``,
    ``other``) are where the error happened, for the allocator report. ``timeout``: seconds
    the save may take (see the module documentation). Returns ``(path, step)`` after a save,
    None otherwise; never raises, not even an interrupt during the save (the caller
    re-raises ``exc``).
    """
    try:
        return _rescue(exc, save, step, phase, timeout)
    except BaseException as e:  # never in the original error's place
        _failed(exc, "the last-chance save after a CUDA out-of-memory error was interrupted by %s"
                % _messages._safe_repr(e))
        return None


def _rescue(exc, save, step, phase, timeout):
    if exc is None or not is_cuda_oom(exc) or getattr(exc, _HANDLED, False):
        return None
    try:
        setattr(exc, _HANDLED, True)
    except Exception:
        pass
    _report_exception(exc, step, phase)
    free_memory(exc)
    started = time.monotonic()
    try:
        path, saved_step = _within(timeout, save)
        if path is not None:
            path = os.path.abspath(os.fsdecode(os.fspath(path)))
    except _TooSlow:
        _failed(exc, "the last-chance save after a CUDA out-of-memory error took more than %g s (its "
                "timeout) and was stopped" % timeout)
        return None
    except Exception as e:
        _failed(exc, "the last-chance save after a CUDA out-of-memory error failed: %s" % _messages._failure(e))
        return None
    except BaseException as e:  # KeyboardInterrupt, SystemExit: noted, never raised in its place
        _failed(exc, "the last-chance save after a CUDA out-of-memory error was interrupted by %s"
                % _messages._safe_repr(e))
        return None
    took = time.monotonic() - started
    if timeout is not None and took > timeout:
        _log("the last-chance save took %.1f s, more than its timeout of %g s; it finished and is "
             "acknowledged" % (took, timeout))
    try:
        _tw.acknowledge(path=path, step=saved_step, cause=CAUSE)
    except Exception as e:
        _log("cannot acknowledge the last-chance save: %s" % _messages._failure(e))
    where = "" if saved_step is None else " at step %s" % _messages._message(saved_step)  # any step the caller set
    if path is not None:
        where += " to %s" % path
    _log("CUDA out of memory: the run was saved%s before the error ends it" % where)
    _note(exc, "the run was saved%s (last-chance save)" % where)
    return path, saved_step


def _failed(exc, text):
    """A last-chance save that did not happen: said on stderr and noted on the original error."""
    _log(text + "; nothing was acknowledged, the original error follows")
    _note(exc, text)


def _note(exc, text):
    """``exc.add_note`` (Python 3.11 and later), never raising."""
    try:
        add_note = getattr(exc, "add_note", None)
        if add_note is not None:
            add_note("training_watchdog: " + text)
    except Exception:
        pass


class _TooSlow(BaseException):
    """Raised inside a last-chance save by its timer: a BaseException, so that a save's own
    ``except Exception`` does not swallow it."""


def _check_timeout(timeout):
    """``timeout`` as seconds (a float > 0) or None; a ValueError naming it otherwise."""
    if timeout is None:
        return None
    try:
        seconds = None if isinstance(timeout, (bool, str, bytes)) else float(timeout)
    except Exception:
        seconds = None
    if seconds is None or not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError("last_chance(timeout=%s): expected seconds, more than 0, or None for no bound"
                         % _messages._safe_repr(timeout))
    return seconds


def _within(timeout, save):
    """``save()``, bounded by ``timeout`` seconds: interrupted by SIGALRM (:class:`_TooSlow`)
    where this thread may own it, else said to be late on stderr and left to finish."""
    if timeout is None:
        return save()
    if _may_take_the_alarm():
        return _with_alarm(timeout, save)
    timer = threading.Timer(timeout, _log, ("the last-chance save has taken more than %g s (its timeout); it is "
                                            "not interrupted outside the main thread or while the program uses "
                                            "SIGALRM, and goes on" % timeout,))
    timer.daemon = True
    timer.start()
    try:
        return save()
    finally:
        timer.cancel()


def _may_take_the_alarm():
    """Whether SIGALRM and the real-time timer are free: this is the main thread, the program has
    no SIGALRM handler of its own (the default disposition) and no timer running."""
    try:
        return (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    except (AttributeError, ValueError, OSError):  # no SIGALRM on this platform
        return False


def _with_alarm(timeout, save):
    armed = [True]

    def expired(signum, frame):
        if armed[0]:  # not once the save returned, even if the timer fires in between
            armed[0] = False
            raise _TooSlow()

    signal.signal(signal.SIGALRM, expired)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return save()
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def sharded(what, ranks):
    """The error for a state ``what`` shards across ``ranks``: one rank cannot save it alone."""
    return RuntimeError(
        "%s shards the training state across the %d ranks: one failing rank cannot save it alone "
        "(the others would have to join); nothing was saved, the last checkpoint the watchdog "
        "asked for is the one to resume from" % (what, ranks))


def _takes_an_argument(fn):
    """Whether ``fn`` can be called with one positional argument (False when unknown)."""
    try:
        inspect.signature(fn).bind(None)
        return True
    except (TypeError, ValueError):
        return False


class LastChance:
    """Around a training loop: on a CUDA OOM inside it, ``save`` before the error ends the run.

    ::

        with training_watchdog.last_chance(save) as run:
            for step in range(start, steps):
                run.step = step          # optional: the step the save and the ack are given
                train_step()

    ``save`` saves the run and returns the path written; it is called ``save(step)`` when
    it takes an argument (``step``: the last value given to ``run.step``, None when none
    was), else ``save()``. ``step`` is the step the ack and the allocator report carry,
    ``phase`` the phase (``train``, ``eval``, ``other``; settable in the loop). ``timeout``:
    the seconds the save may take (see the module documentation). The error is always
    raised again, unchanged. After a save, ``path`` and ``saved_step`` say what was written.
    """

    def __init__(self, save=None, step=None, phase="train", timeout=DEFAULT_TIMEOUT_S):
        if save is not None and not callable(save):
            raise TypeError("last_chance(save=%s): expected a function that saves and returns the path"
                            % _messages._safe_repr(save))
        self.save = save
        self.step = step
        self.phase = phase
        self.timeout = _check_timeout(timeout)
        self.path = None
        self.saved_step = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            try:
                step = self._current_step()
            except Exception:
                step = None
            done = rescue(exc, self._save, step=step, phase=self.phase, timeout=self.timeout)
            if done is not None:
                self.path, self.saved_step = done
        return False  # the original error goes on

    def _current_step(self):
        """The step the error happened at (the frameworks read theirs)."""
        return self.step

    def _save(self):
        """Saves; returns ``(path, step)``."""
        step = self.step
        path = self.save(step) if _takes_an_argument(self.save) else self.save()
        return path, step
