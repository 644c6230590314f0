"""acknowledge(path, step, cause) and the plain-loop last-chance save, standard library only
(the frameworks' last-chance saves with a real torch.OutOfMemoryError are in
test_last_chance_frameworks.py)."""

import json
import os
import sys
import tempfile
import time
import unittest
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402
from training_watchdog import oom  # noqa: E402

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity)"


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.request = os.path.join(self.dir.name, "request.json")
        self.saved = os.environ.get("WATCHDOG_REQUEST_FILE")
        os.environ["WATCHDOG_REQUEST_FILE"] = self.request
        tw._reset()

    def tearDown(self):
        if self.saved is None:
            os.environ.pop("WATCHDOG_REQUEST_FILE", None)
        else:
            os.environ["WATCHDOG_REQUEST_FILE"] = self.saved
        tw._reset()
        self.dir.cleanup()

    def ask(self, seq):
        with open(self.request, "w") as f:
            json.dump({"seq": seq, "time_unix": time.time() - 1, "resource": "tree_memory"}, f)

    def ack(self):
        with open(self.request + ".ack") as f:
            return json.load(f)


class AcknowledgeFields(Base):
    def test_a_requested_save_carries_its_path_and_step(self):
        self.ask(4)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.acknowledge(path=os.path.join("ckpt", "step=120.ckpt"), step=120), 4)
        ack = self.ack()
        self.assertEqual((ack["seq"], ack["path"], ack["step"]), (4, os.path.abspath("ckpt/step=120.ckpt"), 120))
        self.assertNotIn("cause", ack)
        self.assertFalse(tw.checkpoint_requested())

    def test_without_arguments_the_ack_is_as_before(self):
        self.ask(2)
        self.assertEqual(tw.acknowledge(), 2)
        self.assertEqual(sorted(self.ack()), ["seq", "time_unix"])

    def test_a_cause_is_acknowledged_with_seq_0_when_no_request_is_pending(self):
        self.assertIsNone(tw.acknowledge(path="x", step=1), "no request, no cause: nothing written")
        self.assertFalse(os.path.exists(self.request + ".ack"))
        self.assertEqual(tw.acknowledge(path="x", step=7, cause="cuda_oom"), 0)
        ack = self.ack()
        self.assertEqual((ack["seq"], ack["path"], ack["step"], ack["cause"]), (0, os.path.abspath("x"), 7, "cuda_oom"))

    def test_a_cause_answers_the_pending_request(self):
        self.ask(3)
        self.assertEqual(tw.acknowledge(path="x", step=9, cause="cuda_oom"), 3)
        self.assertEqual(self.ack()["seq"], 3)
        self.assertFalse(tw.checkpoint_requested())

    def test_a_cause_after_the_request_was_answered_is_not_taken_for_it(self):
        self.ask(5)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.acknowledge(step=10), 5)
        self.assertEqual(tw.acknowledge(step=12, cause="cuda_oom"), 0)
        self.assertEqual(self.ack()["seq"], 0)

    def test_a_path_that_is_not_utf_8_leaves_the_ack_readable(self):
        # A legal Linux file name that is not UTF-8 was written as "\\udcff": the watchdog's
        # JSON parser refused the whole ack, so the save was never seen.
        path = os.path.join(self.dir.name, os.fsdecode(b"ckpt-\xff.pt"))
        self.assertEqual(tw.acknowledge(path=path, step=3, cause="cuda_oom"), 0)
        with open(self.request + ".ack", "rb") as f:
            raw = f.read()
        self.assertNotIn(b"\\udc", raw)
        ack = json.loads(raw)
        self.assertEqual((ack["seq"], ack["step"], ack["cause"]), (0, 3, "cuda_oom"))
        self.assertNotIn("path", ack)

    def test_bad_fields_are_refused_by_name(self):
        # 2**64: a step the watchdog reads as u64 could not be read, and the whole ack was ignored.
        for kwargs in ({"step": -1}, {"step": 1.5}, {"step": True}, {"step": "3"}, {"step": 2 ** 64},
                       {"cause": "CUDA OOM"}, {"cause": 3}, {"path": 12}):
            with self.assertRaises(ValueError, msg=repr(kwargs)) as cm:
                tw.acknowledge(**kwargs)
            self.assertIn("acknowledge(%s=" % next(iter(kwargs)), str(cm.exception))
        self.assertFalse(os.path.exists(self.request + ".ack"))


class Held:
    """Stands for a tensor the failed step held."""


class PlainLoopLastChance(Base):
    def loop(self, save, fail_at=3, error=None):
        """A loop whose step ``fail_at`` raises ``error`` (a CUDA OOM by default) from a nested call."""
        held = []

        def forward(step):
            activations = Held()  # only the failing frame refers to it
            held.append(weakref.ref(activations))
            if step == fail_at:
                raise error if error is not None else RuntimeError(OOM)

        with tw.last_chance(save) as run:
            for step in range(10):
                run.step = step
                forward(step)
        return run, held

    def test_an_oom_is_saved_acknowledged_and_raised_again(self):
        calls = []

        def save(step):
            calls.append(step)
            return os.path.join(self.dir.name, "ckpt-%d.pt" % step)

        with self.assertRaises(RuntimeError) as cm:
            self.loop(save)
        self.assertIn(OOM, str(cm.exception))
        self.assertEqual(calls, [3])
        ack = self.ack()
        self.assertEqual((ack["seq"], ack["step"], ack["cause"]), (0, 3, "cuda_oom"))
        self.assertEqual(ack["path"], os.path.join(self.dir.name, "ckpt-3.pt"))
        self.assertTrue(any("last-chance save" in n for n in cm.exception.__notes__))

    def test_the_failed_steps_locals_are_freed_before_the_save(self):
        alive = []
        refs = []

        def save():
            alive.append(refs[-1]() is not None)
            return "p"

        def forward():
            activations = Held()
            refs.append(weakref.ref(activations))
            raise RuntimeError(OOM)

        with self.assertRaises(RuntimeError):
            with tw.last_chance(save):
                forward()
        self.assertEqual(alive, [False], "the failed step's locals were still alive at the save")

    def test_save_without_an_argument_and_without_a_step(self):
        with self.assertRaises(RuntimeError):
            with tw.last_chance(lambda: "p"):
                raise RuntimeError(OOM)
        ack = self.ack()
        self.assertEqual(ack["path"], os.path.abspath("p"))
        self.assertNotIn("step", ack)

    def test_other_errors_are_not_saved(self):
        calls = []
        with self.assertRaises(ValueError):
            self.loop(lambda step: calls.append(step), error=ValueError("bad batch"))
        with self.assertRaises(RuntimeError):
            self.loop(lambda step: calls.append(step), error=RuntimeError("CPU out of memory"))
        self.assertEqual(calls, [])
        self.assertFalse(os.path.exists(self.request + ".ack"))

    def test_an_oom_raised_from_another_error_is_one(self):
        self.assertTrue(oom.is_cuda_oom(self.chained()))
        self.assertFalse(oom.is_cuda_oom(ValueError("x")))

    @staticmethod
    def chained():
        try:
            raise RuntimeError(OOM)
        except RuntimeError as e:
            try:
                raise ValueError("the batch did not fit") from e
            except ValueError as outer:
                return outer

    def test_a_failing_save_never_hides_the_original_error(self):
        def save(step):
            raise OSError("No space left on device")

        with self.assertRaises(RuntimeError) as cm:
            self.loop(save)
        self.assertIn(OOM, str(cm.exception))
        self.assertTrue(any("No space left on device" in n for n in cm.exception.__notes__))
        self.assertFalse(os.path.exists(self.request + ".ack"))

    def test_a_step_of_the_wrong_type_never_replaces_the_original_error(self):
        # run.step = "5": the save ran, then the note's "%d" raised a TypeError in place of the OOM.
        calls = []

        def save():
            calls.append(1)

        with self.assertRaises(RuntimeError) as cm:
            with tw.last_chance(save) as run:
                run.step = "5"
                raise RuntimeError(OOM)
        self.assertIn(OOM, str(cm.exception))
        self.assertEqual(calls, [1])
        notes = cm.exception.__notes__
        self.assertTrue(any("at step 5 (last-chance save)" in n for n in notes), notes)

    def test_an_error_is_saved_once_however_many_managers_see_it(self):
        calls = []
        with self.assertRaises(RuntimeError):
            with tw.last_chance(lambda: calls.append("outer") or "o"):
                with tw.last_chance(lambda: calls.append("inner") or "i"):
                    raise RuntimeError(OOM)
        self.assertEqual(calls, ["inner"])

    def test_save_must_be_callable(self):
        with self.assertRaises(TypeError):
            tw.last_chance("ckpt.pt")

    def test_without_a_request_file_it_saves_and_writes_no_ack(self):
        os.environ.pop("WATCHDOG_REQUEST_FILE")
        calls = []
        with self.assertRaises(RuntimeError):
            self.loop(lambda step: calls.append(step) or "p")
        self.assertEqual(calls, [3])


if __name__ == "__main__":
    unittest.main()
