"""The client under ``watchdog daemon``: no WATCHDOG_REQUEST_FILE, a per-user directory, a socket.

python3 -m unittest discover -s python/tests
"""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402
from test_client import Base, write_request  # noqa: E402

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DAEMON_KEYS = ("WATCHDOG_DAEMON_DIR", "WATCHDOG_SOCKET")


class DaemonBase(Base):
    def setUp(self):
        super().setUp()
        self.saved_daemon_env = {k: os.environ.get(k) for k in DAEMON_KEYS}
        self.base = os.path.join(self.dir.name, "users")
        self.user_dir = os.path.join(self.base, str(os.getuid()))
        os.makedirs(self.user_dir, mode=0o700)
        os.environ["WATCHDOG_DAEMON_DIR"] = self.base
        # Never the machine's real socket.
        os.environ["WATCHDOG_SOCKET"] = os.path.join(self.dir.name, "no-daemon.sock")

    def tearDown(self):
        for k, v in self.saved_daemon_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        super().tearDown()

    def file_of(self, pid):
        return os.path.join(self.user_dir, "%d.request.json" % pid)


class PerUserLookupTests(DaemonBase):
    def test_own_pid_file_is_found_then_acknowledged(self):
        self.assertIsNone(tw.request_file())
        self.assertFalse(tw.checkpoint_requested())
        path = self.file_of(os.getpid())
        write_request(path, 3)
        self.assertEqual(tw.request_file(), path)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.acknowledge(), 3)
        with open(path + ".ack") as f:
            self.assertEqual(json.load(f)["seq"], 3)
        self.assertFalse(tw.checkpoint_requested())

    def test_own_pid_wins_over_the_parents(self):
        write_request(self.file_of(os.getppid()), 1)
        write_request(self.file_of(os.getpid()), 2)
        self.assertEqual(tw.request_file(), self.file_of(os.getpid()))

    def test_a_grandchild_finds_and_acknowledges_this_process_file(self):
        """The daemon names the file after the run's first process; the client may be deeper."""
        path = self.file_of(os.getpid())
        write_request(path, 5)
        script = textwrap.dedent(
            """
            import json, os, sys
            sys.path.insert(0, %r)
            import training_watchdog as tw
            print(json.dumps({"file": tw.request_file(), "requested": tw.checkpoint_requested(),
                              "acked": tw.acknowledge(), "ppid": os.getppid()}))
            """
            % PACKAGE_DIR
        )
        env = {k: v for k, v in os.environ.items() if k != "WATCHDOG_REQUEST_FILE"}
        # `; true` keeps the shell alive as the python's parent: a grandchild of this process.
        out = subprocess.run(
            ["sh", "-c", '"$0" -c "$1"; true', sys.executable, script],
            env=env,
            capture_output=True,
            timeout=60,
            check=True,
        )
        got = json.loads(out.stdout.decode())
        self.assertNotEqual(got["ppid"], os.getpid(), "not a grandchild: %r" % got)
        self.assertEqual(got["file"], path)
        self.assertTrue(got["requested"])
        self.assertEqual(got["acked"], 5)
        with open(path + ".ack") as f:
            self.assertEqual(json.load(f)["seq"], 5)

    def test_nothing_outside_the_own_users_directory(self):
        other = os.path.join(self.base, str(os.getuid() + 1))
        os.makedirs(other)
        write_request(os.path.join(other, "%d.request.json" % os.getpid()), 1)
        self.assertIsNone(tw.request_file())
        self.assertFalse(tw.checkpoint_requested())

    def test_env_request_file_wins(self):
        write_request(self.file_of(os.getpid()), 1)
        own = os.path.join(self.dir.name, "own.json")
        os.environ["WATCHDOG_REQUEST_FILE"] = own
        self.assertEqual(tw.request_file(), own)

    def test_ancestors_are_read_once_per_process(self):
        self.assertIsNone(tw.request_file())
        calls = []
        real = tw._service._ancestors
        tw._service._ancestors = lambda pid: calls.append(pid) or real(pid)
        try:
            for _ in range(100):
                tw.checkpoint_requested()
            write_request(self.file_of(os.getpid()), 1)
            self.assertTrue(tw.checkpoint_requested())
        finally:
            tw._service._ancestors = real
        self.assertEqual(calls, [])

    def test_a_file_created_after_a_quiet_look_is_found(self):
        """The candidates are skipped while the directory's mtime stays old, not after it changes."""
        old = time.time() - 60
        os.utime(self.user_dir, (old, old))
        self.assertIsNone(tw.request_file())
        self.assertIsNone(tw.request_file())
        write_request(self.file_of(os.getppid()), 4)  # the directory's mtime is now
        self.assertEqual(tw.request_file(), self.file_of(os.getppid()))
        self.assertTrue(tw.checkpoint_requested())

    def test_ancestors_stop_at_another_user(self):
        chain = tw._ancestors(os.getpid())
        self.assertEqual(chain[0], os.getpid())
        self.assertEqual(chain[1], os.getppid())
        self.assertNotIn(1, chain)
        for pid in chain:
            self.assertEqual(os.stat("/proc/%d" % pid).st_uid, os.getuid())

    def test_cost_per_step_is_printed(self):
        """What checkpoint_requested() costs per call with the lookup (printed, generous bound)."""
        costs = {}
        for case in ("no user dir", "no file yet", "found"):
            if case == "no user dir":
                os.environ["WATCHDOG_DAEMON_DIR"] = os.path.join(self.dir.name, "none")
            else:
                os.environ["WATCHDOG_DAEMON_DIR"] = self.base
                # As on a real run: the directory was last changed long ago.
                old = time.time() - 60
                os.utime(self.user_dir, (old, old))
            if case == "found":
                write_request(self.file_of(os.getpid()), 1)
                tw.checkpoint_requested()
                tw.acknowledge()
            tw.checkpoint_requested()
            runs = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(2000):
                    tw.checkpoint_requested()
                runs.append((time.perf_counter() - t) / 2000 * 1e6)
            costs[case] = runs
            self.assertLess(min(runs), 1000, "%s: %r µs per call" % (case, runs))
        sys.stderr.write(
            "\ncheckpoint_requested() under the daemon, µs per call (5 runs of 2000, %d ancestors): %s\n"
            % (len(tw._ancestors(os.getpid())),
               "; ".join("%s %s" % (k, "/".join("%.1f" % c for c in v)) for k, v in costs.items()))
        )


class FakeDaemon:
    """A real Unix socket that answers one registration with ``reply`` (None: never answers)."""

    def __init__(self, path, reply):
        self.path = path
        self.reply = reply
        self.lines = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.sock.settimeout(10)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            self.lines.append(data.decode())
            if self.reply is None:
                time.sleep(4)  # past the client's 2 s timeout
                return
            conn.sendall(self.reply.encode())

    def close(self):
        self.thread.join(10)
        self.sock.close()


class RegisterTests(DaemonBase):
    def setUp(self):
        super().setUp()
        self.sock_path = os.path.join(self.dir.name, "daemon.sock")
        os.environ["WATCHDOG_SOCKET"] = self.sock_path

    def install_against(self, reply, **kwargs):
        daemon = FakeDaemon(self.sock_path, reply)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tw.install(**kwargs)
        finally:
            daemon.close()
        return daemon.lines, [str(w.message) for w in caught]

    def test_install_registers_and_adopts_the_request_file(self):
        named = os.path.join(self.dir.name, "named.request.json")
        reply = json.dumps({"ok": True, "registered": {"pid": os.getpid(), "request_file": named,
                                                       "signal": "SIGUSR1"}}) + "\n"
        lines, caught = self.install_against(reply)
        self.assertEqual(caught, [])
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].endswith("\n"), lines)
        self.assertEqual(json.loads(lines[0]), {"op": "register", "pid": os.getpid()})
        self.assertEqual(tw.request_file(), named)
        write_request(named, 2)
        self.assertTrue(tw.checkpoint_requested())
        self.assertEqual(tw.acknowledge(), 2)
        self.assertTrue(os.path.exists(named + ".ack"))
        # Registered once per process.
        tw.install()
        self.assertEqual(tw.request_file(), named)

    def test_the_signal_the_daemon_names_is_caught(self):
        import signal

        named = os.path.join(self.dir.name, "named.request.json")
        reply = json.dumps({"ok": True, "registered": {"pid": os.getpid(), "request_file": named,
                                                       "signal": "SIGUSR2"}}) + "\n"
        _, caught = self.install_against(reply)
        self.assertEqual(caught, [])
        self.assertIs(signal.getsignal(signal.SIGUSR1), tw._handler)
        self.assertIs(signal.getsignal(signal.SIGUSR2), tw._handler)

    def test_refusal_is_a_warning(self):
        reply = json.dumps({"ok": False, "error": "pid 1 is not yours"}) + "\n"
        lines, caught = self.install_against(reply)
        self.assertEqual(len(lines), 1)
        self.assertEqual(len(caught), 1, caught)
        self.assertIn("pid 1 is not yours", caught[0])
        self.assertIsNone(tw.request_file())

    def test_garbage_and_silence_are_warnings(self):
        for reply, words in (("not json\n", "cannot register"), (None, "timed out")):
            with self.subTest(reply=reply):
                tw._reset()
                if os.path.exists(self.sock_path):
                    os.unlink(self.sock_path)
                t = time.monotonic()
                _, caught = self.install_against(reply)
                self.assertEqual(len(caught), 1, caught)
                self.assertIn(words, caught[0])
                self.assertLess(time.monotonic() - t, 10)
                self.assertIsNone(tw.request_file())

    def test_no_socket_is_silent(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tw.install()
        self.assertEqual(caught, [])
        self.assertIsNone(tw.request_file())

    def test_no_registration_when_asked_not_or_when_the_file_is_given(self):
        os.environ["WATCHDOG_REQUEST_FILE"] = os.path.join(self.dir.name, "given.json")
        lines, caught = self.install_against_nobody_connects()
        self.assertEqual((lines, caught), ([], []))
        del os.environ["WATCHDOG_REQUEST_FILE"]
        lines, caught = self.install_against_nobody_connects(register=False)
        self.assertEqual((lines, caught), ([], []))

    def named_by(self, daemon_reply_file):
        return json.dumps({"ok": True, "registered": {"pid": os.getpid(), "request_file": daemon_reply_file,
                                                      "signal": "SIGUSR1"}}) + "\n"

    def test_a_last_chance_ack_without_install_registers_and_is_written_where_the_daemon_looks(self):
        # A run the daemon found by itself has no request file before the daemon's first
        # request; a loop that never called install() must still get its cause ack there.
        named = os.path.join(self.dir.name, "found.request.json")
        daemon = FakeDaemon(self.sock_path, self.named_by(named))
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                seq = tw.acknowledge(path=os.path.join(self.dir.name, "ckpt.pt"), step=7, cause="cuda_oom")
        finally:
            daemon.close()
        self.assertEqual([str(w.message) for w in caught], [])
        self.assertEqual(len(daemon.lines), 1)
        self.assertEqual(seq, 0)
        with open(named + ".ack") as f:
            ack = json.load(f)
        self.assertEqual((ack["cause"], ack["step"]), ("cuda_oom", 7))

    def test_step_reports_without_install_register_once_and_go_where_the_daemon_looks(self):
        from fake_allocator import FakeAllocator  # imports torch (CPU build)

        named = os.path.join(self.dir.name, "found.request.json")
        daemon = FakeDaemon(self.sock_path, self.named_by(named))
        try:
            with FakeAllocator("steady") as fake, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for step in range(3):
                    fake.step("train")
                    tw.report_step(step)
                tw.allocator.flush()
        finally:
            daemon.close()
        self.assertEqual([str(w.message) for w in caught], [])
        self.assertEqual(len(daemon.lines), 1, "registered once, not at every step")
        with open(named + ".steps") as f:
            steps = json.load(f)
        self.assertEqual(steps["pid"], os.getpid())
        self.assertGreaterEqual(len(steps["steps"]), 1)

    def test_a_refused_registration_is_asked_once_per_process(self):
        daemon = FakeDaemon(self.sock_path, json.dumps({"ok": False, "error": "no rule takes it"}) + "\n")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    self.assertIsNone(tw.acknowledge(cause="cuda_oom"))
        finally:
            daemon.close()
        self.assertEqual(len(daemon.lines), 1)
        self.assertEqual(len(caught), 1, [str(w.message) for w in caught])
        self.assertIn("no rule takes it", str(caught[0].message))

    def install_against_nobody_connects(self, **kwargs):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.sock_path)
        server.listen(1)
        server.setblocking(False)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tw.install(**kwargs)
            try:
                conn, _ = server.accept()
                conn.close()
                lines = ["a connection"]
            except BlockingIOError:
                lines = []
        finally:
            server.close()
            os.unlink(self.sock_path)
        return lines, [str(w.message) for w in caught]


if __name__ == "__main__":
    unittest.main()
