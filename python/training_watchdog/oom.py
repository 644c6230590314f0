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

:class:`LastChance` is the context manager around a plain loop
(``training_watchdog.last_chance``); the framework modules subclass it. This module never
imports torch: it uses the torch the process already imported.
"""

import gc
import inspect
import os
import sys
import traceback

import training_watchdog as _tw
from training_watchdog import allocator

__all__ = ["CAUSE", "LastChance", "free_memory", "is_cuda_oom", "rescue", "sharded"]

#: The ``cause`` of the acknowledgment written after a last-chance save.
CAUSE = "cuda_oom"

# Set on an exception once handled: Lightning's hook and a context manager around fit() both
# see the same exception, and it is saved once.
_HANDLED = "_training_watchdog_last_chance"

# What torch says in a CUDA OOM it raises as a plain RuntimeError (older versions, C++ paths).
_MESSAGE = "CUDA out of memory"


def is_cuda_oom(exc):
    """Whether ``exc`` (or an exception it was raised ``from``) is a CUDA out-of-memory error:
    a ``torch.OutOfMemoryError`` (it exists in CPU builds too) or a RuntimeError saying
    "CUDA out of memory". Never imports torch."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        torch = sys.modules.get("torch")
        oom = getattr(torch, "OutOfMemoryError", None)
        if isinstance(oom, type) and isinstance(exc, oom):
            return True
        if isinstance(exc, RuntimeError) and _MESSAGE in str(exc):
            return True
        exc = exc.__cause__
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
        _log("cannot report the CUDA out-of-memory error to the watchdog: %s" % e)


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
        _log("cannot empty the CUDA cache: %s" % e)


def rescue(exc, save, step=None, phase="train"):
    """The last-chance save for ``exc`` when it is a CUDA OOM not handled yet; else nothing.

    ``save()`` saves in the framework's format and returns ``(path, step)``: the checkpoint
    written and the global step it holds. ``step`` and ``phase`` (``train``, ``eval``,
    ``other``) are where the error happened, for the allocator report. Returns ``(path,
    step)`` after a save, None otherwise; never raises (the caller re-raises ``exc``).
    """
    if exc is None or not is_cuda_oom(exc) or getattr(exc, _HANDLED, False):
        return None
    try:
        setattr(exc, _HANDLED, True)
    except Exception:
        pass
    _report_exception(exc, step, phase)
    free_memory(exc)
    try:
        path, saved_step = save()
        if path is not None:
            path = os.path.abspath(os.fsdecode(os.fspath(path)))
    except Exception as e:
        text = "the last-chance save after a CUDA out-of-memory error failed: %s: %s" % (type(e).__name__, e)
        _log(text + "; the original error follows")
        if hasattr(exc, "add_note"):
            exc.add_note("training_watchdog: " + text)
        return None
    try:
        _tw.acknowledge(path=path, step=saved_step, cause=CAUSE)
    except Exception as e:
        _log("cannot acknowledge the last-chance save: %s" % e)
    where = "" if saved_step is None else " at step %s" % (saved_step,)  # %s: any step the caller set
    if path is not None:
        where += " to %s" % path
    _log("CUDA out of memory: the run was saved%s before the error ends it" % where)
    if hasattr(exc, "add_note"):
        exc.add_note("training_watchdog: the run was saved%s (last-chance save)" % where)
    return path, saved_step


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
    ``phase`` the phase (``train``, ``eval``, ``other``; settable in the loop). The error
    is always raised again. After a save, ``path`` and ``saved_step`` say what was written.
    """

    def __init__(self, save=None, step=None, phase="train"):
        if save is not None and not callable(save):
            raise TypeError("last_chance(save=%r): expected a function that saves and returns the path" % (save,))
        self.save = save
        self.step = step
        self.phase = phase
        self.path = None
        self.saved_step = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            done = rescue(exc, self._save, step=self._current_step(), phase=self.phase)
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
