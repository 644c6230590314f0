"""What the Python tests need from the machine, said one way.

The rule of the Rust tests (crates/watchdog-testsupport): when something a test needs is
missing, the test FAILS if the CI variable is set to anything but empty, "false" or "0",
and is SKIPPED with the reason otherwise. Skips are also appended to the file named by
$WATCHDOG_TEST_SKIPS, when set, so scripts/test.sh can list them at the end.
"""

import importlib.util
import os
import sys
import unittest


def strict(value=None):
    """Whether CI (or VALUE) demands that every test runs for real."""
    value = os.environ.get("CI") if value is None else value
    value = (value or "").strip()
    return value not in ("", "0") and value.lower() != "false"


def _test_name():
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_name
        if name.startswith("test") or name in ("setUp", "setUpClass"):
            return name
        frame = frame.f_back
    return "a test"


def require(ok, what):
    """Return when OK; else fail under CI, skip (saying WHAT is needed) elsewhere."""
    if ok:
        return
    test = _test_name()
    skips = os.environ.get("WATCHDOG_TEST_SKIPS")
    if strict():
        raise AssertionError("%s needs %s, and CI=%r: refusing to skip" % (test, what, os.environ.get("CI")))
    if skips:
        with open(skips, "a") as f:
            f.write("%s (python): needs %s\n" % (test, what))
    raise unittest.SkipTest("needs %s" % what)


def require_modules(*modules):
    """The importable MODULES (the frameworks come from scripts/frameworks-requirements.txt)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    require(not missing, "%s importable (pip install -r scripts/frameworks-requirements.txt)"
            % ", ".join(missing))


def watchdog_bin():
    """The built watchdog binary named by $WATCHDOG_BIN (scripts/test.sh sets it)."""
    binary = os.environ.get("WATCHDOG_BIN")
    require(bool(binary) and os.path.exists(binary), "$WATCHDOG_BIN naming the built watchdog binary")
    return binary
