"""Tests for training_watchdog (standard library only): python3 -m unittest discover -s python/tests"""

import json
import os
import signal
import stat
import sys
import tempfile
import textwrap
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402

ENV_KEYS = ("WATCHDOG_SIGNAL", "WATCHDOG_REQUEST_FILE", "WATCHDOG_PID", "WATCHDOG_BIN")


def wait_until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def write_request(path, seq, time_unix=None):
    req = {
        "seq": seq,
        "resource": "cgroup_memory",
        "kind": "cgroup_memory",
        "reason": "trend",
        "used": 900,
        "limit": 1000,
        "unit": "bytes",
        "predicted_s": 12.5,
        "time": "2026-11-22T20:31:05.123Z",
        "time_unix": time.time() if time_unix is None else time_unix,
        "pid": os.getpid(),
        "signal": "SIGUSR1",
        "watchdog_pid": 1,
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(req, f)
    os.replace(tmp, path)
    return req


class Base(unittest.TestCase):
    def setUp(self):
        self.saved_env = {k: os.environ.get(k) for k in ENV_KEYS}
        for k in ENV_KEYS:
            os.environ.pop(k, None)
        self.saved_handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
        self.dir = tempfile.TemporaryDirectory()
        tw._reset()

    def tearDown(self):
        for s, h in self.saved_handlers.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.dir.cleanup()
        tw._reset()


class SignalTests(Base):
    def test_real_signal_sets_flag(self):
        self.assertEqual(tw.install(), signal.SIGUSR1)
        self.assertFalse(tw.checkpoint_requested())
        os.kill(os.getpid(), signal.SIGUSR1)
        self.assertTrue(wait_until(tw.checkpoint_requested))
        self.assertIsNone(tw.acknowledge())  # no request file: only clears the flag
        self.assertFalse(tw.checkpoint_requested())

    def test_signal_from_env(self):
        os.environ["WATCHDOG_SIGNAL"] = "USR2"
        self.assertEqual(tw.install(), signal.SIGUSR2)
        self.assertIs(signal.getsignal(signal.SIGUSR2), tw._handler)
        os.kill(os.getpid(), signal.SIGUSR2)
        self.assertTrue(wait_until(tw.checkpoint_requested))

    def test_signal_names(self):
        for given, want in [("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2), ("10", 10), (12, 12)]:
            self.assertEqual(tw._resolve_signal(given), want)
        self.assertEqual(tw._resolve_signal("SIGRTMIN+2"), signal.SIGRTMIN + 2)
        for bad in ("SIGNOPE", "SIG_DFL", "_DFL", "", "RTMIN+x", "SIG", "²"):
            with self.assertRaises(ValueError):
                tw._resolve_signal(bad)

    def test_resolves_every_name_the_binary_writes(self):
        """WATCHDOG_SIGNAL=SIGRTMAX-1 (or RTMIN+n in any case) was refused or misread."""
        lo, hi = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
        table = [
            ("SIGUSR1", signal.SIGUSR1),
            ("USR1", signal.SIGUSR1),
            ("sigusr2", signal.SIGUSR2),
            ("SIGHUP", signal.SIGHUP),
            ("WINCH", signal.SIGWINCH),
            (" 10 ", 10),
            ("SIGRTMIN", lo),
            ("RTMIN", lo),
            ("SIGRTMIN+0", lo),
            ("SIGRTMIN+3", lo + 3),
            ("rtmin+3", lo + 3),
            ("SIGRTMAX", hi),
            ("SIGRTMAX-2", hi - 2),
            ("RtMax-0", hi),
            ("SIGRTMIN+%d" % (hi - lo), hi),
            ("SIGRTMAX-%d" % (hi - lo), lo),
        ]
        for given, want in table:
            with self.subTest(given=given):
                self.assertEqual(tw._resolve_signal(given), want)
                os.environ["WATCHDOG_SIGNAL"] = given
                self.assertEqual(tw._resolve_signal(), want)
        for bad in (
            "SIGRTMIN-1", "SIGRTMAX+1", "SIGRTMIN+%d" % (hi - lo + 1), "SIGRTMAX-%d" % (hi - lo + 1),
            "SIGRTMIN+", "SIGRTMIN2", "SIGRTMIN+ 2", "SIGRTMIN+-2", "RTMID",
        ):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                tw._resolve_signal(bad)

    def test_signal_name_round_trips_like_the_binary(self):
        lo, hi = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
        self.assertEqual(tw._signal_name(signal.SIGUSR1), "SIGUSR1")
        self.assertEqual(tw._signal_name(lo), "SIGRTMIN")
        self.assertEqual(tw._signal_name(lo + 2), "SIGRTMIN+2")
        for n in list(range(1, 32)) + list(range(lo, hi + 1)):
            with self.subTest(n=n):
                self.assertEqual(tw._resolve_signal(tw._signal_name(n)), n)

    def test_chains_previous_handler_and_is_idempotent(self):
        calls = []
        signal.signal(signal.SIGUSR1, lambda s, f: calls.append(s))
        tw.install(signal.SIGUSR1)
        tw.install("SIGUSR1")  # again: must not chain to itself
        os.kill(os.getpid(), signal.SIGUSR1)
        self.assertTrue(wait_until(lambda: calls))
        self.assertTrue(tw.checkpoint_requested())
        time.sleep(0.05)
        self.assertEqual(calls, [signal.SIGUSR1])

    def test_default_action_not_chained(self):
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        tw.install()
        os.kill(os.getpid(), signal.SIGUSR1)  # would kill the test if SIG_DFL were chained
        self.assertTrue(wait_until(tw.checkpoint_requested))

    def test_install_from_thread_is_refused(self):
        errors = []

        def run():
            try:
                tw.install()
            except RuntimeError as e:
                errors.append(str(e))

        t = threading.Thread(target=run)
        t.start()
        t.join()
        self.assertEqual(len(errors), 1)
        self.assertIn("main thread", errors[0])


class RequestFileTests(Base):
    def setUp(self):
        super().setUp()
        self.req = os.path.join(self.dir.name, "request.json")
        os.environ["WATCHDOG_REQUEST_FILE"] = self.req

    def test_no_file_no_request(self):
        self.assertIsNone(tw.request())
        self.assertFalse(tw.checkpoint_requested())

    def test_request_file_fallback_without_signal(self):
        # No handler installed (a notebook kernel reset it): the file alone is enough.
        write_request(self.req, 1)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.request()["resource"], "cgroup_memory")
        self.assertEqual(tw.acknowledge(), 1)
        self.assertFalse(tw.checkpoint_requested())
        write_request(self.req, 2)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.acknowledge(), 2)
        self.assertFalse(tw.checkpoint_requested())

    def test_ack_from_another_process_counts(self):
        req = write_request(self.req, 3)
        with open(self.req + ".ack", "w") as f:
            json.dump({"seq": 3, "time_unix": req["time_unix"] + 1}, f)
        self.assertFalse(tw.checkpoint_requested())

    def test_stale_ack_from_earlier_run_does_not_count(self):
        with open(self.req + ".ack", "w") as f:
            json.dump({"seq": 1, "time_unix": 1000.0}, f)
        write_request(self.req, 1, time_unix=2000.0)
        self.assertTrue(tw.checkpoint_requested())

    def test_malformed_request_is_ignored(self):
        with open(self.req, "w") as f:
            f.write('{"seq": 1, "time_')
        self.assertIsNone(tw.request())
        self.assertFalse(tw.checkpoint_requested())
        write_request(self.req, 1)
        self.assertTrue(tw.checkpoint_requested())

    def test_acknowledge_is_atomic(self):
        req = write_request(self.req, 5)
        self.assertTrue(tw.checkpoint_requested())
        replaced = []
        real_replace = os.replace

        def spy(src, dst):
            # At rename time the temp file is complete, in the same directory, and the ack not yet there.
            with open(src) as f:
                replaced.append((os.path.dirname(src), json.load(f), os.path.exists(dst)))
            return real_replace(src, dst)

        os.replace = spy
        try:
            before = time.time()
            self.assertEqual(tw.acknowledge(), 5)
        finally:
            os.replace = real_replace
        self.assertEqual(len(replaced), 1)
        d, body, existed = replaced[0]
        self.assertEqual(d, self.dir.name)
        self.assertEqual(body["seq"], 5)
        self.assertFalse(existed)
        with open(self.req + ".ack") as f:
            ack = json.load(f)
        self.assertEqual(ack["seq"], 5)
        self.assertGreaterEqual(ack["time_unix"], before)
        self.assertGreaterEqual(ack["time_unix"], req["time_unix"])
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["request.json", "request.json.ack"])

    def test_acknowledge_handles_the_request_it_saw(self):
        write_request(self.req, 1)
        self.assertTrue(tw.checkpoint_requested())
        write_request(self.req, 2)  # a new alert while the checkpoint was being saved
        self.assertEqual(tw.acknowledge(), 1)
        self.assertTrue(tw.checkpoint_requested())  # seq 2 is still pending
        self.assertEqual(tw.acknowledge(), 2)
        self.assertFalse(tw.checkpoint_requested())

    def test_ack_symlink_not_followed(self):
        write_request(self.req, 1)
        victim = os.path.join(self.dir.name, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        os.symlink(victim, self.req + ".ack")
        with self.assertWarns(RuntimeWarning):
            tw.acknowledge()
        with open(victim) as f:
            self.assertEqual(f.read(), "keep")


FAKE_WATCHDOG = """\
#!{python}
import json, os, sys, time
with open({argv_file!r} + ".tmp", "w") as f:
    json.dump(sys.argv[1:], f)
os.rename({argv_file!r} + ".tmp", {argv_file!r})
if "--fail" in sys.argv:
    print("error: invalid duration '5x': expected a number with a unit", file=sys.stderr)
    sys.exit(2)
print("watching", flush=True)
time.sleep(60)
"""


class AttachTests(Base):
    def fake(self):
        argv_file = os.path.join(self.dir.name, "argv.json")
        path = os.path.join(self.dir.name, "watchdog")
        with open(path, "w") as f:
            f.write(textwrap.dedent(FAKE_WATCHDOG.format(python=sys.executable, argv_file=argv_file)))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path, argv_file

    def test_attach_starts_watchdog_and_installs(self):
        path, argv_file = self.fake()
        os.environ["WATCHDOG_BIN"] = path
        h = tw.attach(args=("--lead", "60s"))
        try:
            self.assertTrue(wait_until(lambda: os.path.exists(argv_file)))
            with open(argv_file) as f:
                argv = json.load(f)
            self.assertEqual(argv[:2], ["--pid", str(os.getpid())])
            self.assertIn("--request-file", argv)
            self.assertEqual(argv[argv.index("--request-file") + 1], h.request_file)
            self.assertEqual(argv[-2:], ["--lead", "60s"])
            self.assertEqual(os.environ["WATCHDOG_REQUEST_FILE"], h.request_file)
            self.assertEqual(os.environ["WATCHDOG_SIGNAL"], "SIGUSR1")
            self.assertEqual(os.environ["WATCHDOG_PID"], str(h.process.pid))
            self.assertIs(signal.getsignal(signal.SIGUSR1), tw._handler)
            # Own session: the kernel's Ctrl-C does not reach it.
            self.assertEqual(os.getsid(h.process.pid), h.process.pid)
            self.assertTrue(wait_until(lambda: "watching" in h.log()))
            self.assertTrue(h.running)
        finally:
            h.stop()
        self.assertFalse(h.running)

    def test_attach_reports_early_exit(self):
        path, _ = self.fake()
        with self.assertRaises(RuntimeError) as cm:
            tw.attach(watchdog=path, args=("--fail",))
        self.assertIn("invalid duration", str(cm.exception))
        self.assertIn("status 2", str(cm.exception))

    def test_attach_refuses_a_crash_signal(self):
        # SIGSEGV as the checkpoint signal replaced faulthandler's handler and killed the run.
        path, argv_file = self.fake()
        for sig in ("SEGV", "SIGABRT", "IOT", signal.SIGBUS, "QUIT"):
            before = signal.getsignal(signal.SIGSEGV)
            with self.assertRaises(ValueError) as cm:
                tw.attach(watchdog=path, sig=sig)
            self.assertIn("crash signal", str(cm.exception))
            self.assertEqual(signal.getsignal(signal.SIGSEGV), before)
        self.assertFalse(os.path.exists(argv_file))

    def test_attach_without_binary_is_a_clear_error(self):
        old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = self.dir.name
        try:
            with self.assertRaises(FileNotFoundError) as cm:
                tw.attach()
        finally:
            os.environ["PATH"] = old_path
        self.assertIn("WATCHDOG_BIN", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
