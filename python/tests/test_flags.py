"""attach()'s keywords against the real binary's flags: every flag `watchdog run --help` lists
is an attach() keyword, or one of the exceptions below with its reason; and every keyword
reaches the binary as its flag, which the binary takes (it says it is watching) and checks
(a bad value is its own ValueError naming the flag).

Needs the built binary in $WATCHDOG_BIN (scripts/test.sh sets it); without it the tests
fail when CI is set and skip otherwise (need.py).

python3 -m unittest discover -s python/tests
"""

import inspect
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import need  # noqa: E402
import training_watchdog as tw  # noqa: E402
from test_client import Base  # noqa: E402

# The binary's flags that are no keyword of attach()'s own name: flag -> (the attach()
# parameter that sets it, or None when attach() does not take it; why).
RUN_ONLY = "`run` only: the binary refuses it with --pid, since it did not start the process"
EXCEPTIONS = {
    "ready-fd": (None, "attach() passes it itself: the pipe it waits on for the ready line"),
    "signal": ("sig", "attach(sig=...) also installs the handler for it in this process"),
    "request-file": ("request_file", "attach(request_file=...) also sets WATCHDOG_REQUEST_FILE here"),
    "restart": (None, RUN_ONLY + " and cannot start it again"),
    "restart-on": (None, RUN_ONLY + " and cannot start it again"),
    "restart-per-hour": (None, RUN_ONLY + " and cannot start it again"),
    "requeue": (None, RUN_ONLY + " (only the job's own command knows the save before the end)"),
}

# The long flags of --help that are about the program, not a setting.
NOT_SETTINGS = ("help", "verbose", "quiet")


def binary_flags(binary):
    """The long flags `watchdog run --help` lists, in its order."""
    out = subprocess.run([binary, "run", "--help"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError("%s run --help failed with status %d: %s" % (binary, out.returncode, out.stderr))
    return re.findall(r"^\s+(?:-[A-Za-z], )?--([a-z][a-z0-9-]*)", out.stdout, re.M)


def keyword_flags():
    """attach()'s keyword -> the binary's flag (without its dashes)."""
    return {name: flag[2:] for name, (flag, _kind) in tw._process._OPTIONS.items()}


class FlagsOfTheBinary(unittest.TestCase):
    def test_every_flag_of_the_binary_is_an_attach_keyword_or_a_named_exception(self):
        flags = binary_flags(need.watchdog_bin())
        # The settings table's flags come between --config and -v, -q (settings.rs).
        self.assertIn("config", flags)
        self.assertEqual(flags[-3:], ["verbose", "quiet", "help"])
        flags = [f for f in flags if f not in NOT_SETTINGS]
        by_flag = {flag: name for name, flag in keyword_flags().items()}
        params = inspect.signature(tw.attach).parameters
        missing = [f for f in flags if f not in by_flag and f not in EXCEPTIONS]
        self.assertEqual(missing, [], "flags of the binary that attach() takes no keyword for: add them to "
                                      "_OPTIONS in training_watchdog/_process.py, or to EXCEPTIONS here with why")
        for flag, (param, why) in EXCEPTIONS.items():
            self.assertIn(flag, flags, "an exception for a flag the binary no longer has: --%s" % flag)
            self.assertNotIn(flag, by_flag, "--%s is an exception and a keyword" % flag)
            self.assertTrue(why)
            if param is not None:
                self.assertIn(param, params, "--%s: attach() has no %s parameter" % (flag, param))
        stale = sorted(set(by_flag) - set(flags))
        self.assertEqual(stale, [], "attach() keywords for flags the binary does not have")
        for name, flag in keyword_flags().items():
            # Named after the flag: dashes as underscores, --no-X as X=False.
            self.assertEqual(name, re.sub(r"^no-", "", flag).replace("-", "_"))

    def test_the_run_only_flags_are_refused_with_pid(self):
        binary = need.watchdog_bin()
        values = {"restart": ["1"], "restart-on": ["crash"], "restart-per-hour": ["3"], "requeue": []}
        self.assertEqual(sorted(values), sorted(f for f, (_, why) in EXCEPTIONS.items() if why.startswith(RUN_ONLY)))
        target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            for flag, value in values.items():
                out = subprocess.run([binary, "--pid", str(target.pid), "--gpu", "off", "--dry-run",
                                      "--%s" % flag] + value, capture_output=True, text=True, timeout=30)
                self.assertEqual(out.returncode, 2, (flag, out.stderr))
                self.assertIn("--%s cannot be used with --pid" % flag, out.stderr)
        finally:
            target.kill()
            target.wait()


class KeywordsReachTheBinary(Base):
    def setUp(self):
        self.binary = need.watchdog_bin()  # before Base unsets $WATCHDOG_BIN
        super().setUp()
        self.saved_state = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = os.path.join(self.dir.name, "state")

    def tearDown(self):
        tw._reset()
        if self.saved_state is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = self.saved_state
        super().tearDown()

    def samples(self):
        """keyword -> (a value, the arguments the binary must get for it)."""
        d = self.dir.name
        config = os.path.join(d, "watchdog.toml")
        with open(config, "w") as f:
            f.write("# no settings\n")
        return {
            "metrics": ("127.0.0.1:0", ["--metrics", "127.0.0.1:0"]),
            "config": (config, ["--config", config]),
            "interval": ("50ms", ["--interval", "50ms"]),
            "max_interval": ("2s", ["--max-interval", "2s"]),
            "lead": (60, ["--lead", "60s"]),
            "mem_limit": ("12GiB", ["--mem-limit", "12GiB"]),
            "disk": ([d], ["--disk", d]),
            "max_runtime": ("1h", ["--max-runtime", "1h"]),
            "deadline": ("2099-01-01T00:00:00Z", ["--deadline", "2099-01-01T00:00:00Z"]),
            "events": (os.path.join(d, "e.jsonl"), ["--events", os.path.join(d, "e.jsonl")]),
            "on_alert": ("true", ["--on-alert", "true"]),
            "hook_timeout": ("30s", ["--hook-timeout", "30s"]),
            "record": (os.path.join(d, "r.csv"), ["--record", os.path.join(d, "r.csv")]),
            "record_window": ("5m", ["--record-window", "5m"]),
            "dry_run": (True, ["--dry-run"]),
            "gpu": ("off", ["--gpu", "off"]),
            "floor": (2.5, ["--floor", "2.5"]),
            "notify": (False, ["--no-notify"]),
            "status": (False, ["--no-status"]),
            "log_format": ("json", ["--log-format", "json"]),
            "slurm_poll": ("10m", ["--slurm-poll", "10m"]),
            "checkpoint_record": (os.path.join(d, "c.json"), ["--checkpoint-record", os.path.join(d, "c.json")]),
            "term_grace": ("2s", ["--term-grace", "2s"]),
            "notice": ("off", ["--notice", "off"]),
            "notice_endpoint": ("http://127.0.0.1:9", ["--notice-endpoint", "http://127.0.0.1:9"]),
            "notice_interval": ("10s", ["--notice-interval", "10s"]),
        }

    def cmdline(self, pid):
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode() for a in f.read().split(b"\0")[:-1]]

    def test_every_keyword_becomes_its_flag_and_the_binary_takes_it(self):
        samples = self.samples()
        self.assertEqual(sorted(samples), sorted(tw._process._OPTIONS), "a sample for every keyword")
        for name, (value, expected) in samples.items():
            with self.subTest(keyword=name):
                extra = {} if name in ("gpu", "notice") else {"gpu": "off", "notice": "off"}
                h = tw.attach(watchdog=self.binary, **dict(extra, **{name: value}))
                try:
                    argv = self.cmdline(h.pid)
                    at = [i for i in range(len(argv)) if argv[i:i + len(expected)] == expected]
                    self.assertTrue(at, "%s=%r: expected %s in %s" % (name, value, expected, argv))
                    self.assertTrue(h.running, h.log())
                finally:
                    h.stop()

    def test_max_interval_and_hook_timeout_are_the_binarys_to_check(self):
        # attach(max_interval=...) was refused as an unexpected keyword before; now the binary
        # gets the flag, takes a good value and refuses a bad one naming it.
        for name, flag in (("max_interval", "--max-interval"), ("hook_timeout", "--hook-timeout")):
            with self.subTest(keyword=name):
                h = tw.attach(watchdog=self.binary, gpu="off", notice="off", **{name: "2s"})
                try:
                    argv = self.cmdline(h.pid)
                    self.assertEqual(argv[argv.index(flag) + 1], "2s")
                    time.sleep(0.3)
                    self.assertTrue(h.running, h.log())
                finally:
                    h.stop()
                with self.assertRaises(ValueError) as e:
                    tw.attach(watchdog=self.binary, gpu="off", notice="off", **{name: "2x"})
                self.assertIn("invalid value '2x' for '%s <DUR>'" % flag, str(e.exception))
                self.assertIsNone(tw.attached())
                # A number of seconds or a timedelta is written as the flag takes it.
                h = tw.attach(watchdog=self.binary, gpu="off", notice="off", **{name: 1.5})
                try:
                    argv = self.cmdline(h.pid)
                    self.assertEqual(argv[argv.index(flag) + 1], "1.5s")
                finally:
                    h.stop()


if __name__ == "__main__":
    unittest.main()
