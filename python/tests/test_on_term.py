"""SIGTERM that reaches the run itself (issue 28, item 3): ``install(on_term="save")`` and the
framework callbacks' ``on_term="save"``, with real processes and real signals.

A plain loop saves at its next step boundary, acknowledges (``{"seq": 0, "cause":
"terminating"}`` when no request file asks) and ends of SIGTERM (-15 to subprocess, 143 to
a shell); without ``on_term`` it dies of SIGTERM at once, as before; a handler of its own is
given the SIGTERM after the save. Under ``watchdog run``, SIGTERM to the whole process group
(systemd's ``KillMode=control-group``) is saved once: the watchdog's notice and the run's own
SIGTERM are one save. Lightning and the Transformers Trainer save on SIGTERM, end with -15,
and a rerun resumes from that checkpoint.

python3 -m unittest python/tests/test_on_term.py -v (WATCHDOG_BIN for the watchdog test; the
frameworks from scripts/frameworks-requirements.txt).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "frameworks")
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import need  # noqa: E402
from test_frameworks import child_env, read_events  # noqa: E402

RUN_TIMEOUT = 300


def read_json(path):
    with open(path) as f:
        return json.load(f)


def wait_for_step(d, proc, step, timeout=RUN_TIMEOUT):
    """The run's progress once it reached ``step`` (None when it ended or timed out first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            progress = read_json(os.path.join(d, "progress.json"))
            if progress["step"] >= step:
                return progress
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    return None


def finish(proc, timeout=RUN_TIMEOUT):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("the run did not end after SIGTERM\n" + out[-4000:])
    return out


def start(cmd, d, env):
    return subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


class PlainLoop(unittest.TestCase):
    def run_plain(self, on_term, extra=(), request_file=True):
        d = tempfile.mkdtemp(prefix="tw-term-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        env = child_env()
        if request_file:
            env["WATCHDOG_REQUEST_FILE"] = os.path.join(d, "request.json")
        proc = start([sys.executable, os.path.join(SCRIPTS, "term_plain.py"), d, on_term] + list(extra), d, env)
        if wait_for_step(d, proc, 3, timeout=60) is None:
            self.fail("the loop never got to step 3\n" + finish(proc, timeout=5))
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        out = finish(proc, timeout=30)
        return d, proc.returncode, time.monotonic() - t0, out

    def saves(self, d):
        try:
            with open(os.path.join(d, "saves.jsonl")) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def test_sigterm_is_saved_acknowledged_and_ends_the_process_with_it(self):
        d, status, _, out = self.run_plain("save")
        self.assertEqual(status, -signal.SIGTERM, out)
        saves = self.saves(d)
        self.assertEqual(len(saves), 1, saves)
        self.assertEqual(saves[0]["request"]["reason"], "terminating")
        self.assertEqual(saves[0]["request"]["kind"], "notice")
        ack = read_json(os.path.join(d, "request.json.ack"))
        step = saves[0]["step"]
        self.assertEqual((ack["seq"], ack["cause"], ack["step"]), (0, "terminating", step), ack)
        self.assertEqual(os.path.realpath(ack["path"]), os.path.realpath(os.path.join(d, "ckpt-%d.json" % step)))

    def test_with_no_watchdog_at_all_it_still_saves_and_ends_with_sigterm(self):
        d, status, _, out = self.run_plain("save", request_file=False)
        self.assertEqual(status, -signal.SIGTERM, out)
        self.assertEqual(len(self.saves(d)), 1)

    def test_status_143_to_a_shell(self):
        with tempfile.TemporaryDirectory(prefix="tw-term-") as d:
            script = "%s %s %s save & pid=$!; while [ ! -s %s/progress.json ]; do sleep 0.05; done; " \
                     "kill -TERM $pid; wait $pid; echo status=$?" % (
                         sys.executable, os.path.join(SCRIPTS, "term_plain.py"), d, d)
            out = subprocess.run(["sh", "-c", script], cwd=d, env=child_env(), capture_output=True,
                                 text=True, timeout=60).stdout
            self.assertIn("status=143", out)
            self.assertEqual(len(self.saves(d)), 1)

    def test_without_on_term_sigterm_ends_the_run_at_once_unsaved(self):
        d, status, took, out = self.run_plain("none")
        self.assertEqual(status, -signal.SIGTERM, out)
        self.assertEqual(self.saves(d), [])
        self.assertFalse(os.path.exists(os.path.join(d, "request.json.ack")))
        self.assertLess(took, 5.0)

    def test_a_sigterm_handler_of_the_run_gets_the_sigterm_after_the_save(self):
        d, status, _, out = self.run_plain("save", ["chain"])
        self.assertEqual(status, 7, out)  # the script's own handler exits 7
        self.assertEqual(len(self.saves(d)), 1)
        self.assertTrue(os.path.exists(os.path.join(d, "chained.json")))
        self.assertEqual(read_json(os.path.join(d, "request.json.ack"))["cause"], "terminating")


class Arguments(unittest.TestCase):
    def test_bad_on_term_and_sigterm_as_the_checkpoint_signal_are_refused(self):
        import training_watchdog as tw

        before = signal.getsignal(signal.SIGTERM)
        with self.assertRaises(ValueError) as cm:
            tw.install(on_term="yes", register=False)
        self.assertIn("on_term='yes'", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            tw.install("SIGTERM", on_term="save", register=False)
        self.assertIn("SIGUSR1", str(cm.exception))
        self.assertIs(signal.getsignal(signal.SIGTERM), before)

    def test_a_notice_is_shown_as_an_end_with_its_deadline(self):
        import training_watchdog as tw

        text = tw._alert_text({"seq": 3, "kind": "notice", "resource": "notice", "reason": "terminating",
                               "used": 0, "limit": 0, "unit": "millis", "deadline_unix": time.time() + 20})
        self.assertIn("the run is being stopped (SIGTERM); save by ", text)
        self.assertIn(" from now (request 3)", text)
        self.assertNotIn("running out", text)


class UnderTheWatchdog(unittest.TestCase):
    def test_sigterm_to_the_whole_group_is_saved_once(self):
        # systemd's KillMode=control-group, SLURM's scancel: SIGTERM reaches `watchdog run`
        # (a notice: it asks for a save with SIGUSR1 and a request of kind notice) and the run
        # itself. One save answers both; the run ends of SIGTERM and the watchdog with it.
        binary = need.watchdog_bin()
        with tempfile.TemporaryDirectory(prefix="tw-term-") as d:
            events = os.path.join(d, "events.jsonl")
            cmd = [binary, "--gpu", "off", "--interval", "20ms", "--events", events,
                   "--request-file", os.path.join(d, "request.json"), "run", "--",
                   sys.executable, os.path.join(SCRIPTS, "term_plain.py"), d, "save"]
            proc = start(cmd, d, child_env())
            if wait_for_step(d, proc, 3, timeout=60) is None:
                self.fail("the run never got to step 3\n" + finish(proc, timeout=5))
            os.killpg(proc.pid, signal.SIGTERM)
            out = finish(proc, timeout=60)
            self.assertIn(proc.returncode, (143, -signal.SIGTERM), out[-4000:])
            with open(os.path.join(d, "saves.jsonl")) as f:
                saves = [json.loads(line) for line in f]
            self.assertEqual(len(saves), 1, saves)
            self.assertEqual(saves[0]["request"]["reason"], "terminating", saves)
            notices = [e for e in read_events(events) if e["event"] == "notice"]
            self.assertEqual(len(notices), 1, read_events(events))
            self.assertTrue(notices[0]["saved"], notices)


class Frameworks(unittest.TestCase):
    def term_then_resume(self, script, saved_path, mode="run", resume=True):
        d = tempfile.mkdtemp(prefix="tw-term-fw-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        env = dict(child_env(), WATCHDOG_REQUEST_FILE=os.path.join(d, "request.json"))
        t0 = time.monotonic()
        proc = start([sys.executable, os.path.join(SCRIPTS, script), mode, d], d, env)
        if mode == "run":
            if wait_for_step(d, proc, 5) is None:
                self.fail("the run never got to step 5\n" + finish(proc, timeout=5)[-4000:])
            os.kill(proc.pid, signal.SIGTERM)
        out = finish(proc)
        self.assertEqual(proc.returncode, -signal.SIGTERM, out[-4000:])
        ack = read_json(os.path.join(d, "request.json.ack"))
        self.assertEqual((ack["seq"], ack["cause"]), (0, "terminating"), ack)
        self.assertEqual(os.path.realpath(ack["path"]), os.path.realpath(saved_path(d, ack["step"])))
        self.assertTrue(os.path.exists(ack["path"]), ack)
        if resume:
            again = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), "resume", d], cwd=d,
                                   env=child_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
            self.assertEqual(again.returncode, 0, again.stderr[-4000:])
            self.assertEqual(read_json(os.path.join(d, "resumed.json"))["step"], ack["step"])
        sys.stderr.write("  %s %s: saved at step %d on SIGTERM, %.1f s in all\n"
                         % (script, mode, ack["step"], time.monotonic() - t0))
        return d, ack

    def test_lightning_saves_on_sigterm_ends_143_and_resumes(self):
        need.require_modules("torch", "lightning")
        self.term_then_resume("term_lightning.py",
                              lambda d, step: os.path.join(d, "checkpoints", "watchdog-step=%d.ckpt" % step))

    def test_lightning_sigterm_in_validation_is_saved_in_on_exception(self):
        need.require_modules("torch", "lightning")
        self.term_then_resume("term_lightning.py",
                              lambda d, step: os.path.join(d, "checkpoints", "watchdog-step=%d.ckpt" % step),
                              mode="val", resume=False)

    def test_transformers_saves_on_sigterm_ends_143_and_resumes(self):
        need.require_modules("torch", "transformers", "accelerate")
        d, ack = self.term_then_resume("term_transformers.py",
                                       lambda d, step: os.path.join(d, "out", "checkpoint-%d" % step))
        # the process ended after every callback's on_save, not inside the watchdog's
        self.assertEqual(read_json(os.path.join(d, "on_save.json"))["step"], ack["step"])


if __name__ == "__main__":
    unittest.main()
