"""need.py: the one rule for tests that need something the machine may lack."""

import os
import tempfile
import unittest
from unittest import mock

import need


class TheCiRule(unittest.TestCase):
    def test_ci_is_strict_unless_empty_false_or_zero(self):
        for value, strict in [("", False), ("false", False), ("FALSE", False), ("0", False),
                              ("true", True), ("1", True), ("yes", True)]:
            self.assertEqual(need.strict(value), strict, "CI=%r" % value)

    def test_missing_fails_under_ci_and_skips_elsewhere(self):
        with tempfile.TemporaryDirectory() as d:
            skips = os.path.join(d, "skips")
            with mock.patch.dict(os.environ, {"CI": "1", "WATCHDOG_TEST_SKIPS": skips}):
                with self.assertRaisesRegex(AssertionError, "needs a unicorn, and CI='1'"):
                    need.require(False, "a unicorn")
            with mock.patch.dict(os.environ, {"CI": "false", "WATCHDOG_TEST_SKIPS": skips}):
                with self.assertRaisesRegex(unittest.SkipTest, "needs a unicorn"):
                    need.require(False, "a unicorn")
                need.require(True, "a unicorn")
            with open(skips) as f:
                self.assertEqual(f.read(), "test_missing_fails_under_ci_and_skips_elsewhere (python): needs a unicorn\n")


if __name__ == "__main__":
    unittest.main()
