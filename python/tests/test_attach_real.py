"""attach() against the real watchdog binary: a notebook-like process that leaks memory
past a --mem-limit budget is asked to checkpoint, saves, acknowledges, and the watchdog
records the acknowledgment.

Needs the built binary in $WATCHDOG_BIN (scripts/test.sh sets it); without it the tests
fail when CI is set and skip otherwise (need.py).
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import need

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)

NOTEBOOK = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {python_dir!r})
    import training_watchdog as tw
    h = tw.attach(args=["--lead", "1s", "--interval", "20ms", "--gpu", "off",
                        "--mem-limit", "200MiB", "--events", {events!r}])
    {before_loop}
    kept, saved = [], None
    for step in range(400):
        kept.append(b"\\x01" * (2 << 20))
        time.sleep(0.02)
        if tw.checkpoint_requested():
            saved = {{"step": step, "request": tw.request()}}
            tw.acknowledge()
            break
    time.sleep(0.5)  # let the watchdog see the acknowledgment
    report = h.report()  # not in IPython: the page's path
    with open(report) as f:
        page = f.read()
    watchdog_pid, handle_pid = os.environ.get("WATCHDOG_PID"), h.process.pid
    result = h.stop()
    with open({out!r}, "w") as f:
        json.dump({{"saved": saved, "watchdog_pid": watchdog_pid, "handle_pid": handle_pid,
                   "report": report, "page_is_html": page.lstrip().lower().startswith("<!doctype html"),
                   "recording": result.recording, "returncode": result.returncode,
                   "alive": os.path.exists("/proc/%d" % handle_pid) and
                            open("/proc/%d/stat" % handle_pid).read().rsplit(")", 1)[1].split()[0] != "Z",
                   "temp_dirs": [d for d in os.listdir({tmp!r}) if d.startswith("training-watchdog-")]}}, f)
    """
)


# A child forked after attach() that leaves with sys.exit(), running its atexit hooks: it
# removed the parent's directory, so the parent's alert came as a signal with no request file.
FORKED_CHILD_EXITS = "pid = os.fork()\nif pid == 0: sys.exit(0)\nos.waitpid(pid, 0)"


class AttachWithRealBinary(unittest.TestCase):
    def test_leak_in_an_attached_process_is_checkpointed(self):
        self.leak_is_checkpointed(before_loop="")

    def test_a_forked_child_exiting_leaves_the_request_file_to_the_parent(self):
        self.leak_is_checkpointed(before_loop=FORKED_CHILD_EXITS)

    def leak_is_checkpointed(self, before_loop):
        need.watchdog_bin()
        with tempfile.TemporaryDirectory() as d:
            out, events = os.path.join(d, "out.json"), os.path.join(d, "events.jsonl")
            tmp, state = os.path.join(d, "tmp"), os.path.join(d, "state")
            os.mkdir(tmp)
            script = NOTEBOOK.format(python_dir=PYTHON_DIR, events=events, out=out, tmp=tmp,
                                     before_loop=before_loop)
            env = dict(os.environ, TMPDIR=tmp, XDG_STATE_HOME=state)
            proc = subprocess.run([sys.executable, "-c", script], timeout=60,
                                  capture_output=True, text=True, env=env)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(out) as f:
                result = json.load(f)
            self.assertIsNotNone(result["saved"], "never asked to checkpoint")
            self.assertIsNotNone(result["saved"]["request"], "asked by a signal with no request file")
            self.assertEqual(result["saved"]["request"]["resource"], "tree_memory")
            self.assertEqual(result["watchdog_pid"], str(result["handle_pid"]))
            self.assertTrue(result["page_is_html"], result["report"])
            self.assertEqual(result["returncode"], 143)
            self.assertFalse(result["alive"])
            self.assertEqual(result["temp_dirs"], [])
            self.assertTrue(result["recording"].startswith(os.path.join(state, "watchdog") + os.sep), result)
            with open(result["recording"]) as f:
                self.assertEqual(f.readline(), "# watchdog recording v1\n")
            deadline = time.monotonic() + 5
            kinds = []
            while time.monotonic() < deadline:
                with open(events) as f:
                    kinds = [json.loads(line)["event"] for line in f if line.strip()]
                if "ack" in kinds:
                    break
                time.sleep(0.1)
            self.assertIn("alert", kinds)
            self.assertIn("ack", kinds)
            # attach() reported the Python side, and the watchdog took it.
            self.assertIn("environment", kinds)


    def test_report_on_a_nearly_full_filesystem_says_why_there_is_no_recording(self):
        # The recorder leaves a filesystem's last 16 MiB of 64 free (docs/recording.md): a
        # state directory on a tmpfs with 8 MiB left gets the header reserved at the start
        # and no recording. report() says so at once, in the watchdog's words, not as an
        # "empty recording" after waiting for one that never comes.
        need.watchdog_bin()
        need.require(os.geteuid() == 0, "root (to mount a 64 MiB tmpfs)")
        with tempfile.TemporaryDirectory() as d:
            state = os.path.join(d, "state")
            os.mkdir(state)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", state], check=True)
            try:
                with open(os.path.join(state, "filler"), "wb") as f:
                    f.write(b"\0" * (56 << 20))
                script = textwrap.dedent(
                    """
                    import json, sys, time
                    sys.path.insert(0, {python_dir!r})
                    import training_watchdog as tw
                    h = tw.attach(args=["--gpu", "off", "--no-notify"])
                    t0 = time.monotonic()
                    try:
                        h.report()
                        said = None
                    except RuntimeError as e:
                        said = str(e)
                    took = time.monotonic() - t0
                    h.stop()
                    print(json.dumps({{"said": said, "took": took, "recording": h.recording}}))
                    """
                ).format(python_dir=PYTHON_DIR)
                env = dict(os.environ, XDG_STATE_HOME=state)
                proc = subprocess.run([sys.executable, "-c", script], timeout=60,
                                      capture_output=True, text=True, env=env)
            finally:
                subprocess.run(["umount", "--lazy", state])
            self.assertEqual(proc.returncode, 0, proc.stderr)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            said = result["said"]
            self.assertIsNotNone(said, "report() drew a page from a recording that was never written")
            self.assertIn("the watchdog did not write its recording", said)
            self.assertIn("nearly full", said)
            self.assertNotIn("\n", said)
            self.assertLess(result["took"], 5.0, "report() waited for the timeout: %r" % said)

    def test_ready_fd_line_and_end_of_file(self):
        # The binary's side of attach()'s ready signal.
        binary = need.watchdog_bin()
        with tempfile.TemporaryDirectory() as d:
            request = os.path.join(d, "r.request.json")
            target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            try:
                r, w = os.pipe()
                wd = subprocess.Popen([binary, "--ready-fd", str(w), "--pid", str(target.pid),
                                       "--request-file", request, "--gpu", "off", "--no-notify"],
                                      pass_fds=(w,), stderr=subprocess.DEVNULL)
                os.close(w)
                with os.fdopen(r, "rb") as pipe:
                    data = pipe.read()  # the line, then end of file: the watchdog closed it
                ready = json.loads(data)
                self.assertEqual(data.count(b"\n"), 1)
                self.assertEqual(ready["ready"], True)
                self.assertEqual(ready["pid"], target.pid)
                self.assertEqual(ready["watchdog_pid"], wd.pid)
                self.assertEqual(ready["request_file"], request)
                self.assertTrue(ready["recording"].endswith(".recording.csv"), ready)
                self.assertIsNone(wd.poll())  # still watching
                wd.terminate()
                wd.wait(10)
            finally:
                target.kill()
                target.wait()
            # An error before watching: end of file with no line, and the error on stderr.
            r, w = os.pipe()
            wd = subprocess.Popen([binary, "--ready-fd", str(w), "--pid", str(target.pid)],
                                  pass_fds=(w,), stderr=subprocess.PIPE, text=True)
            os.close(w)
            with os.fdopen(r, "rb") as pipe:
                self.assertEqual(pipe.read(), b"")
            self.assertEqual(wd.wait(10), 2)
            with wd.stderr:
                self.assertIn("no process with PID", wd.stderr.read())
            # A descriptor that is not open, and the standard streams, are refused.
            for fd, text in (("9", "descriptor 9 is not open"), ("2", "expected the number (3 or more)")):
                proc = subprocess.run([binary, "--ready-fd", fd, "--pid", str(os.getpid())],
                                      capture_output=True, text=True, timeout=30)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(text, proc.stderr)


if __name__ == "__main__":
    unittest.main()
