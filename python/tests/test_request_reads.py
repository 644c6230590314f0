"""Request and ack files the client must not trust: a FIFO, a device, a huge or deeply nested
file, a symbolic link. checkpoint_requested() never blocks, never raises, reads at most
64 KiB (as the daemon does) and warns once per bad file.

Each case runs in a child Python under a 1 GiB address-space limit and a timeout, so a
client that reads /dev/zero or opens a FIFO fails the test instead of the machine.

python3 -m unittest discover -s python/tests
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from test_client import write_request  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Three calls in the training loop, then what a request() returns; every warning recorded.
LOOP = textwrap.dedent(
    """
    import json, sys, warnings
    sys.path.insert(0, {python_dir!r})
    import training_watchdog as tw
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            results = [tw.checkpoint_requested() for _ in range(3)]
            req = tw.request()
            error = None
        except BaseException as e:
            results, req, error = None, None, "%s: %s" % (type(e).__name__, str(e)[:200])
    print(json.dumps({{"results": results, "request": req, "error": error,
                      "warnings": [(w.category.__name__, str(w.message), w.filename) for w in caught]}}))
    """
)


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


class BadRequestFileTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.req = os.path.join(self.dir.name, "request.json")

    def tearDown(self):
        self.dir.cleanup()

    def loop(self, request_file=None, script=LOOP, flags=()):
        env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
        env["WATCHDOG_REQUEST_FILE"] = request_file or self.req
        env["WATCHDOG_DAEMON_DIR"] = os.path.join(self.dir.name, "no-daemon")
        env["WATCHDOG_SOCKET"] = os.path.join(self.dir.name, "no-daemon.sock")
        try:
            proc = subprocess.run(
                [sys.executable] + list(flags) + ["-c", script.format(python_dir=PYTHON_DIR)],
                env=env, capture_output=True, text=True, timeout=30, preexec_fn=limit_memory,
            )
        except subprocess.TimeoutExpired:
            self.fail("checkpoint_requested() blocked for 30 s")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def assert_refused_once(self, out, path, words):
        self.assertIsNone(out["error"], "raised into the training loop")
        self.assertEqual(out["results"], [False, False, False])
        self.assertIsNone(out["request"])
        self.assertEqual(len(out["warnings"]), 1, out["warnings"])
        category, message, filename = out["warnings"][0]
        self.assertEqual(category, "RuntimeWarning")
        self.assertIn(path, message)
        self.assertIn(words, message)
        self.assertEqual(filename, "<string>", "the warning points at the loop, not the package")

    def test_a_fifo_does_not_block_the_loop(self):
        os.mkfifo(self.req)
        self.assert_refused_once(self.loop(), self.req, "not a regular file")

    def test_a_fifo_ack_does_not_block_the_loop(self):
        write_request(self.req, 1)
        os.mkfifo(self.req + ".ack")
        out = self.loop()
        self.assertIsNone(out["error"], "raised into the training loop")
        self.assertEqual(out["results"], [True, True, True])  # the request stands: no ack read
        self.assertEqual(len(out["warnings"]), 1, out["warnings"])
        self.assertIn(self.req + ".ack", out["warnings"][0][1])
        self.assertIn("not a regular file", out["warnings"][0][1])

    def test_dev_zero_is_not_read(self):
        # It raised MemoryError into the loop after reading until memory ran out.
        self.assert_refused_once(self.loop("/dev/zero"), "/dev/zero", "not a regular file")

    def test_a_deeply_nested_file_does_not_raise(self):
        # RecursionError from json.loads reached the loop.
        with open(self.req, "w") as f:
            f.write("[" * 30000 + "]" * 30000)
        self.assert_refused_once(self.loop(), self.req, "nested")

    def test_more_than_64_kib_is_not_read(self):
        body = write_request(self.req, 1)
        body["padding"] = "x" * (64 * 1024)
        with open(self.req, "w") as f:
            json.dump(body, f)
        self.assert_refused_once(self.loop(), self.req, "more than the 65536")

    def test_a_symbolic_link_is_not_followed(self):
        target = os.path.join(self.dir.name, "elsewhere.json")
        write_request(target, 1)
        os.symlink(target, self.req)
        self.assert_refused_once(self.loop(), self.req, "symbolic link")

    def test_not_json_is_warned_about_once(self):
        with open(self.req, "wb") as f:
            f.write(b'\xff{"seq": 1')
        self.assert_refused_once(self.loop(), self.req, "not a JSON object")

    def test_warnings_as_errors_do_not_raise_into_the_loop(self):
        # Test suites often run with -W error (pytest's filterwarnings = error).
        os.mkfifo(self.req)
        script = textwrap.dedent(
            """
            import json, sys
            sys.path.insert(0, {python_dir!r})
            import training_watchdog as tw
            print(json.dumps([tw.checkpoint_requested() for _ in range(3)]))
            """
        )
        self.assertEqual(self.loop(script=script, flags=("-W", "error")), [False, False, False])

    def test_a_good_file_still_counts(self):
        write_request(self.req, 7)
        out = self.loop()
        self.assertEqual((out["error"], out["results"], out["warnings"]), (None, [True, True, True], []))
        self.assertEqual(out["request"]["seq"], 7)


if __name__ == "__main__":
    unittest.main()
