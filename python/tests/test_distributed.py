"""training_watchdog.distributed.Agreement without torch: which steps run the collective,
what each rank contributes, and what it answers (standard library only)."""

import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402
from training_watchdog.distributed import DEFAULT_EVERY, Agreement  # noqa: E402


class AgreementTests(unittest.TestCase):
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

    def ask(self, seq=1):
        with open(self.request, "w") as f:
            json.dump({"seq": seq, "time_unix": time.time(), "resource": "tree_memory"}, f)

    def test_every_must_be_a_positive_whole_number(self):
        for bad in (0, -3, 1.5, True, "10", None):
            with self.assertRaises(ValueError, msg=repr(bad)):
                Agreement(bad)
        self.assertGreaterEqual(DEFAULT_EVERY, 1)

    def test_one_rank_answers_its_own_request_at_every_step_without_a_collective(self):
        def never(flag):
            raise AssertionError("no collective with one rank")

        a = Agreement(every=10, reduce_any=never, world_size=1)
        self.assertFalse(a.requested(3))
        self.ask()
        self.assertTrue(a.requested(7))
        self.assertEqual(a.acknowledge(), 1)
        self.assertFalse(a.requested(8))

    def test_several_ranks_reduce_only_on_multiples_of_every_and_share_the_answer(self):
        calls = []

        def other_rank_asked(flag):
            calls.append(flag)
            return True  # as if another rank had a request

        a = Agreement(every=4, reduce_any=other_rank_asked, world_size=2)
        answers = [a.requested(step) for step in range(9)]
        self.assertEqual(answers, [s % 4 == 0 for s in range(9)])
        self.assertEqual(calls, [False, False, False], "this rank had no request of its own")
        self.assertIsNone(a.acknowledge(), "nothing to acknowledge on a rank that was not asked")

    def test_a_local_request_waits_for_the_next_agreement_and_is_contributed(self):
        calls = []
        a = Agreement(every=5, reduce_any=lambda flag: calls.append(flag) or flag, world_size=2)
        self.assertFalse(a.requested(0))
        self.ask()
        self.assertEqual([a.requested(s) for s in (1, 2, 3, 4)], [False] * 4, "no save between agreements")
        self.assertTrue(a.requested(5))
        self.assertEqual(calls, [False, True])
        self.assertEqual(a.acknowledge(), 1)
        self.assertFalse(a.requested(10))

    def test_without_a_step_the_calls_are_counted(self):
        calls = []
        a = Agreement(every=3, reduce_any=lambda flag: calls.append(flag) or False, world_size=2)
        for _ in range(7):
            a.requested()
        self.assertEqual(len(calls), 3)  # calls 0, 3 and 6

    def test_without_a_process_group_the_world_is_one_rank(self):
        a = Agreement()
        self.assertEqual(a.world_size, 1)  # no process group in this process
        self.ask()
        self.assertTrue(a.requested(1))


if __name__ == "__main__":
    unittest.main()
