"""The checkpoint signal: one check for install(), attach(), WATCHDOG_SIGNAL and the daemon's
answer, accepting exactly what the binary accepts.

python3 -m unittest discover -s python/tests
"""

import json
import os
import signal
import subprocess
import sys
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import need  # noqa: E402
import training_watchdog as tw  # noqa: E402
from test_client import Base  # noqa: E402
from test_daemon import DaemonBase, FakeDaemon  # noqa: E402

# (value, words the error must contain)
REFUSED = [
    ("SIGKILL", "cannot be caught"),
    ("STOP", "cannot be caught"),
    ("9", "cannot be caught"),
    ("0", "not a signal a process can catch"),
    ("99", "not a signal a process can catch"),
    ("32", "not a signal a process can catch"),
    ("SIGSEGV", "crash signal"),
    ("SIGABRT", "crash signal"),
    ("IOT", "crash signal"),
    ("SIGBUS", "crash signal"),
    ("QUIT", "crash signal"),
    ("SIGNOPE", "unknown signal"),
    ("CLD", "unknown signal"),  # Python's alias for CHLD; the binary knows no CLD
]

# Every way the binary may be asked: all numbers up to past SIGRTMAX, and all names.
CANDIDATES = [str(n) for n in range(0, int(signal.SIGRTMAX) + 3)] + sorted(
    set(name for name in signal.Signals.__members__ if not name.startswith("SIG_"))
    | {"SIGRTMIN+2", "RTMAX-1", "IOT", "POLL", "CLD", "SIGRTMIN-1", "NOPE"}
)


class InstallTests(Base):
    def handlers(self):
        return {n: signal.getsignal(n) for n in signal.valid_signals()
                if n not in (signal.SIGKILL, signal.SIGSTOP)}

    def test_install_refuses_what_the_binary_refuses_naming_the_argument(self):
        # install("SIGSEGV") replaced faulthandler's handler; SIGKILL gave a bare OSError.
        before = self.handlers()
        for value, words in REFUSED:
            for given in (value, int(value) if value.isdigit() else None):
                if given is None:
                    continue
                with self.subTest(sig=given):
                    with self.assertRaises(ValueError) as cm:
                        tw.install(given)
                    self.assertIn("sig=%r" % (given,), str(cm.exception))
                    self.assertIn(words, str(cm.exception))
                    self.assertIn("expected", str(cm.exception))
        self.assertEqual(self.handlers(), before)

    def test_watchdog_signal_errors_name_the_variable(self):
        # WATCHDOG_SIGNAL=SIGKILL gave a bare OSError, 0 or 99 "signal number out of range".
        before = self.handlers()
        for value, words in REFUSED:
            with self.subTest(WATCHDOG_SIGNAL=value):
                os.environ["WATCHDOG_SIGNAL"] = value
                with self.assertRaises(ValueError) as cm:
                    tw.install()
                self.assertIn("WATCHDOG_SIGNAL=%r" % value, str(cm.exception))
                self.assertIn(words, str(cm.exception))
                with self.assertRaises(ValueError) as cm:
                    tw.attach(watchdog=sys.executable)
                self.assertIn("WATCHDOG_SIGNAL=%r" % value, str(cm.exception))
        self.assertEqual(self.handlers(), before)
        self.assertIsNone(tw.attached())

    def test_accepted_signals_are_installed(self):
        for given in ("SIGUSR2", "usr1", "10", signal.SIGRTMIN + 2, "SIGRTMAX-1", "HUP", "INT"):
            with self.subTest(sig=given):
                signum = tw.install(given)
                self.assertIs(signal.getsignal(signum), tw._handler)
                default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
                signal.signal(signum, default)


    def test_sigint_is_installed_with_a_warning_that_a_request_still_interrupts(self):
        # The binary's caution used to advise install() for SIGINT, yet install() keeps
        # Python's handler (Ctrl-C must still stop the run): each request raised
        # KeyboardInterrupt into the loop without a word.
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                tw.install("SIGINT")
            texts = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
            self.assertEqual(len(texts), 1, texts)
            self.assertIn("KeyboardInterrupt", texts[0])
            self.assertIn("SIGUSR1", texts[0])
            with self.assertRaises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs here, in the main thread
            self.assertTrue(tw.checkpoint_requested())
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            tw.acknowledge()


class SameAsTheBinaryTests(unittest.TestCase):
    def test_the_same_set_as_the_binary(self):
        binary = need.watchdog_bin()
        for text in CANDIDATES:
            with self.subTest(signal=text):
                proc = subprocess.run([binary, "--signal", text, "--pid", "999999999"],
                                      capture_output=True, text=True, timeout=30)
                # The PID is always refused; only the signal's verdict differs.
                self.assertEqual(proc.returncode, 2, proc.stderr)
                binary_accepts = "--signal" not in proc.stderr
                try:
                    tw._checkpoint_signal(text)
                    client_accepts = True
                except ValueError:
                    client_accepts = False
                self.assertEqual(client_accepts, binary_accepts, proc.stderr)


class DaemonAnswerTests(DaemonBase):
    def test_a_bad_signal_in_the_daemons_answer_is_a_warning(self):
        # The docs promise a warning; install() raised OSError or ValueError.
        sock = os.path.join(self.dir.name, "daemon.sock")
        os.environ["WATCHDOG_SOCKET"] = sock
        named = os.path.join(self.dir.name, "named.request.json")
        for bad in ("SIGKILL", "SIGSTOP", 0, "0", "SIGSEGV", "NOPE", 99, True, ["USR2"]):
            with self.subTest(signal=bad):
                tw._reset()
                if os.path.exists(sock):
                    os.unlink(sock)
                reply = json.dumps({"ok": True, "registered": {"pid": os.getpid(), "request_file": named,
                                                               "signal": bad}}) + "\n"
                daemon = FakeDaemon(sock, reply)
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        self.assertEqual(tw.install(), signal.SIGUSR1)
                finally:
                    daemon.close()
                messages = [str(w.message) for w in caught]
                self.assertEqual(len(messages), 1, messages)
                self.assertIn("names the signal %r" % (bad,), messages[0])
                self.assertIn("cannot be the checkpoint signal", messages[0])
                self.assertEqual(caught[0].filename, __file__)
                # The registration stands: the request file works without the signal.
                self.assertEqual(tw.request_file(), named)


if __name__ == "__main__":
    unittest.main()
