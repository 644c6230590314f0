"""The client's parsers of durations and signal names against tests/cases/units.json, the
table the binary's own parsers are tested with (crates/watchdog-config/tests/units_cases.rs):
the binary is the reference, and the client must read every text as it does. The table's
sizes are the binary's alone: the client parses no size (attach() passes the text on).

python3 -m unittest discover -s python/tests
"""

import json
import os
import signal
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from training_watchdog import _units  # noqa: E402

CASES = os.path.join(HERE, "..", "..", "tests", "cases", "units.json")


def load(section, field):
    """``[(text, value or None for an error)]`` of one section of the table."""
    with open(CASES, encoding="utf-8") as f:
        rows = json.load(f)[section]
    out = []
    for row in rows:
        if (field in row) == ("error" in row):
            raise AssertionError("%s %r: expected exactly one of %s and error" % (section, row["text"], field))
        out.append((row["text"], row.get(field)))
    return out


class UnitsCases(unittest.TestCase):
    def test_durations_parse_as_the_binary_parses_them(self):
        cases = load("durations", "seconds")
        self.assertTrue(any(v is None for _, v in cases) and any(v is not None for _, v in cases))
        wrong = []
        for text, want in cases:
            got = _units._duration_seconds(text)
            if want is None:
                ok = got is None
            else:
                ok = got is not None and abs(got - want) <= 1e-9 * max(want, 1.0)
            if not ok:
                wrong.append("%r: expected %s, got %r" % (text, "an error" if want is None else want, got))
        self.assertEqual(wrong, [], "the client disagrees with tests/cases/units.json")

    def test_signals_parse_as_the_binary_parses_them(self):
        self.assertEqual((int(signal.SIGRTMIN), int(signal.SIGRTMAX)), (34, 64),
                         "the table's real-time numbers are glibc's")
        cases = load("signals", "number")
        self.assertTrue(any(v is None for _, v in cases) and any(v is not None for _, v in cases))
        wrong = []
        for text, want in cases:
            try:
                got = _units._checkpoint_signal(text)[0]
            except ValueError:
                got = None
            if got != want:
                wrong.append("%r: expected %s, got %s" % (text, "an error" if want is None else want,
                                                          "an error" if got is None else got))
        self.assertEqual(wrong, [], "the client disagrees with tests/cases/units.json")


if __name__ == "__main__":
    unittest.main()
