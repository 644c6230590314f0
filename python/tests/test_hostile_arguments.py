"""Client calls given objects whose every conversion raises, and last-chance saves that are
interrupted or too slow (issue 29, item 6): ``report_step`` returns False with one warning,
``acknowledge`` raises a ValueError naming the argument, and ``last_chance`` always lets the
original error go on. Standard library only: real objects whose dunders raise."""

import io
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402
from training_watchdog import allocator, oom  # noqa: E402

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity)"


class Hostile(Exception):
    """What every dunder of :class:`Evil` raises: not a TypeError nor a ValueError."""


def _raise(*args, **kwargs):
    raise Hostile("a dunder was called")


class Evil:
    """Every conversion and comparison raises."""

    __int__ = __index__ = __float__ = __bool__ = __eq__ = __ne__ = __hash__ = _raise
    __fspath__ = __str__ = __repr__ = __format__ = __lt__ = __le__ = __gt__ = __ge__ = _raise


class EvilInt(int):
    """An int whose own methods raise."""

    __index__ = __int__ = __eq__ = __ne__ = __hash__ = __lt__ = __le__ = __gt__ = __ge__ = _raise
    __str__ = __repr__ = __bool__ = _raise


class EvilStr(str):
    """A str whose own methods raise."""

    __eq__ = __ne__ = __hash__ = __str__ = __repr__ = __contains__ = _raise
    startswith = endswith = encode = _raise


class UnprintableOom(RuntimeError):
    """A CUDA-OOM-looking error whose ``__str__`` and ``__repr__`` raise."""

    __str__ = __repr__ = _raise


class SaysWhen(io.StringIO):
    """A stderr that sets :attr:`said` once ``text`` was written to it, from any thread."""

    def __init__(self, text):
        super().__init__()
        self.text = text
        self.said = threading.Event()
        self.lock = threading.Lock()

    def write(self, s):
        with self.lock:
            n = super().write(s)
            if self.text in self.getvalue():
                self.said.set()
        return n


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.request = os.path.join(self.dir.name, "request.json")
        self.saved = {k: os.environ.get(k) for k in ("WATCHDOG_REQUEST_FILE", "WATCHDOG_INTERVAL")}
        os.environ["WATCHDOG_REQUEST_FILE"] = self.request
        tw._reset()
        allocator._reset()

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tw._reset()
        allocator._reset()
        self.dir.cleanup()

    def ack(self):
        with open(self.request + ".ack") as f:
            return json.load(f)


class ReportStep(Base):
    def test_any_object_is_false_and_one_warning_never_an_exception(self):
        calls = [((Evil(),), {}), ((EvilInt(3),), {}), ((0,), {"phase": Evil()}), ((0,), {"phase": EvilStr("train")}),
                 ((0,), {"batch_size": Evil()}), ((0,), {"tokens": EvilInt(5)}), ((0,), {"reset_peak": Evil()})]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for args, kwargs in calls:
                self.assertIs(tw.report_step(*args, **kwargs), False, (args, kwargs))
                self.assertIs(allocator.report_step(*args, **kwargs), False, (args, kwargs))
        self.assertEqual(len(seen), 1, [str(w.message) for w in seen])
        self.assertIs(seen[0].category, RuntimeWarning)
        self.assertIn("step=<unprintable Evil>", str(seen[0].message))

    def test_even_under_w_error(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.assertIs(tw.report_step(Evil()), False)
            self.assertIs(tw.report_step(0, phase=Evil()), False)

    def test_an_exception_report_with_hostile_parts_never_raises(self):
        self.assertIs(allocator.report_exception(UnprintableOom(OOM), step=Evil(), phase=Evil()), False)
        self.assertIs(allocator.report_exception(RuntimeError(OOM), step=Evil(), phase=Evil()), True)
        with open(self.request + ".steps") as f:
            record = json.load(f)["exception"]
        self.assertNotIn("step", record)
        self.assertNotIn("phase", record)
        self.assertIs(allocator.report_exception(RuntimeError(OOM), step=EvilInt(2), phase=EvilStr("eval")), True)
        with open(self.request + ".steps") as f:
            record = json.load(f)["exception"]
        self.assertEqual((record["step"], record["phase"]), (2, "eval"))


class Acknowledge(Base):
    def test_a_hostile_argument_is_a_value_error_naming_it(self):
        for name, value in (("path", Evil()), ("step", Evil()), ("cause", Evil())):
            with self.assertRaises(ValueError, msg=name) as cm:
                tw.acknowledge(**{name: value})
            self.assertIn("acknowledge(%s=<unprintable " % name, str(cm.exception))
        self.assertFalse(os.path.exists(self.request + ".ack"))

    def test_subclasses_of_int_and_str_are_taken_by_value_without_their_methods(self):
        self.assertEqual(tw.acknowledge(step=EvilInt(3), cause=EvilStr("cuda_oom")), 0)
        ack = self.ack()
        self.assertEqual((ack["step"], ack["cause"]), (3, "cuda_oom"))

    def test_a_path_whose_fspath_gives_a_hostile_str_is_written_as_a_plain_str(self):
        class Named:
            def __fspath__(self):
                return EvilStr(os.path.join(self_dir, "ckpt"))

        self_dir = self.dir.name
        self.assertEqual(tw.acknowledge(path=Named(), step=4, cause="cuda_oom"), 0)
        self.assertEqual(self.ack()["path"], os.path.join(self_dir, "ckpt"))


class LastChance(Base):
    def run_loop(self, save, error, **kwargs):
        with tw.last_chance(save, **kwargs) as run:
            run.step = 7
            raise error

    def test_an_oom_whose_str_raises_is_raised_again_unchanged(self):
        error = UnprintableOom(OOM)
        saves = []
        with self.assertRaises(UnprintableOom) as cm:
            self.run_loop(lambda: saves.append(1), error)
        self.assertIs(cm.exception, error)
        self.assertEqual(saves, [], "its message cannot be read: not taken for a CUDA OOM")
        self.assertFalse(hasattr(error, "__notes__"))

    def test_an_interrupt_in_the_save_is_noted_and_the_oom_goes_on(self):
        for interrupt in (KeyboardInterrupt(), SystemExit(3)):
            tw._reset()
            error = RuntimeError(OOM)

            def save(step, interrupt=interrupt):
                raise interrupt

            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(RuntimeError) as cm:
                self.run_loop(save, error)
            self.assertIs(cm.exception, error)
            self.assertIn("interrupted by %s" % type(interrupt).__name__, err.getvalue())
            if sys.version_info >= (3, 11):
                self.assertIn("interrupted by %s" % type(interrupt).__name__, " ".join(error.__notes__))
            self.assertFalse(os.path.exists(self.request + ".ack"), "nothing was saved: nothing acknowledged")

    def test_a_save_past_its_timeout_is_stopped_and_the_oom_goes_on(self):
        error = RuntimeError(OOM)
        before = signal.getsignal(signal.SIGALRM)

        finished = []

        def save():
            time.sleep(30)
            finished.append(1)
            return "never"

        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(RuntimeError) as cm:
            self.run_loop(save, error, timeout=0.3)
        self.assertEqual(finished, [], "the save ran to its end: it was not stopped")
        self.assertIs(cm.exception, error)
        self.assertIn("took more than 0.3 s (its timeout) and was stopped", err.getvalue())
        self.assertFalse(os.path.exists(self.request + ".ack"))
        self.assertEqual(signal.getsignal(signal.SIGALRM), before)
        self.assertEqual(signal.getitimer(signal.ITIMER_REAL), (0.0, 0.0))

    def test_a_save_that_swallows_exceptions_is_still_stopped(self):
        swallowed, finished = [], []

        def save():
            try:
                time.sleep(30)
            except Exception:
                swallowed.append(1)
                time.sleep(30)
            finished.append(1)

        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(RuntimeError):
            self.run_loop(save, RuntimeError(OOM), timeout=0.3)
        self.assertEqual((swallowed, finished), ([], []), "the save's own except took the stop, or it ran to its end")

    def test_outside_the_main_thread_a_late_save_is_said_and_finishes(self):
        result = {}
        late = "has taken more than 0.2 s"
        err = SaysWhen(late)

        def save():
            # Late for sure: it ends only once the timeout's line was said (a loaded machine may
            # run the timer's thread long after 0.2 s), or after 30 s without it.
            result["said_while_saving"] = err.said.wait(30)
            return os.path.join(self.dir.name, "late.pt")

        def loop():
            try:
                self.run_loop(save, RuntimeError(OOM), timeout=0.2)
            except RuntimeError as e:
                result["error"] = e

        with contextlib.redirect_stderr(err):
            thread = threading.Thread(target=loop)
            thread.start()
            thread.join(60)
        self.assertFalse(thread.is_alive(), "the loop never ended")
        self.assertIn("error", result)
        self.assertTrue(result["said_while_saving"], "no line while the save ran: %r" % err.getvalue())
        self.assertIn(late, err.getvalue())
        self.assertEqual(self.ack()["path"], os.path.join(self.dir.name, "late.pt"))

    def test_a_program_s_own_sigalrm_is_left_alone(self):
        fired = []
        previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
        self.addCleanup(signal.signal, signal.SIGALRM, previous)

        def save():
            time.sleep(0.5)
            return os.path.join(self.dir.name, "ok.pt")

        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(RuntimeError):
            self.run_loop(save, RuntimeError(OOM), timeout=0.1)
        self.assertEqual(fired, [])
        self.assertEqual(self.ack()["path"], os.path.join(self.dir.name, "ok.pt"))
        self.assertIn("took", err.getvalue())

    def test_a_bad_timeout_is_refused_by_name(self):
        for timeout in (0, -1, float("nan"), float("inf"), True, "5", Evil()):
            with self.assertRaises(ValueError, msg=repr(type(timeout))) as cm:
                tw.last_chance(lambda: None, timeout=timeout)
            self.assertIn("last_chance(timeout=", str(cm.exception))
        self.assertIsNone(tw.last_chance(lambda: None, timeout=None).timeout)
        self.assertEqual(tw.last_chance(lambda: None).timeout, oom.DEFAULT_TIMEOUT_S)

    def test_a_save_returning_hostile_values_is_logged_and_the_oom_goes_on(self):
        error = RuntimeError(OOM)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(RuntimeError) as cm:
            self.run_loop(lambda: Evil(), error)
        self.assertIs(cm.exception, error)
        self.assertIn("failed: Hostile", err.getvalue())

    def test_an_oom_with_a_hostile_step_is_saved_and_raised_again(self):
        error = RuntimeError(OOM)
        path = os.path.join(self.dir.name, "s.pt")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(RuntimeError) as cm:
            with tw.last_chance(lambda: path) as run:
                run.step = Evil()
                raise error
        self.assertIs(cm.exception, error)
        self.assertIn("cannot acknowledge the last-chance save: ValueError", err.getvalue())


if __name__ == "__main__":
    unittest.main()
