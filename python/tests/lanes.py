"""Runs the client's tests by lane, so that scripts/test.sh can run the slow ones side by side.

``python3 python/tests/lanes.py quick`` runs every ``test_*.py`` here but the files that
train real models (``MODELS``: torch, Lightning, Transformers, Keras; most of the suite's
time); ``python3 python/tests/lanes.py test_gpu_check test_frameworks`` runs the named files.
Exit status 0 when every test passed, 1 otherwise, as ``python3 -m unittest``.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("test_frameworks", "test_gpu_check", "test_last_chance_frameworks")


def modules(lane):
    """The test modules of a lane: ``quick``, or the names given."""
    if lane != ["quick"]:
        return lane
    names = sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
    return [n for n in names if n not in MODELS]


def main(argv):
    if not argv:
        sys.stderr.write("usage: lanes.py quick | lanes.py TEST_MODULE...\n")
        return 2
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.discover(HERE, pattern=name + ".py") for name in modules(argv))
    if suite.countTestCases() == 0:
        sys.stderr.write("lanes.py: no tests in %s\n" % " ".join(argv))
        return 1
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
