"""``watchdog run --restart`` with the real frameworks, OOM-killed in a real memory cgroup.

The watchdog runs inside a fresh memory cgroup (``LIMIT``; its child inherits it) with
``--restart 2 run -- python3 frameworks/restart_X.py DIR``. The first attempt leaks (only
it: ``WATCHDOG_RESTART`` is unset) until the kernel's OOM killer ends it; before that the
watchdog asks for a checkpoint and the callback saves and acknowledges. The watchdog then
starts the command again with ``WATCHDOG_RESUME_FROM``; the script passes what
``latest_checkpoint``/``resume_checkpoint`` answer to the framework, which resumes there:
the first step trained is that checkpoint's + 1. The run finishes and the watchdog exits 0.
``attempts.jsonl`` numbers attempts by ``WATCHDOG_RESTART`` (0, 1), the events from 1.

A notebook's ``attach()`` cannot restart the kernel: ``--restart`` there is refused.

Needs root (to create the cgroup), torch and the framework (need.py: fails under CI, skips
elsewhere) and the built binary in $WATCHDOG_BIN.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "frameworks")
sys.path.insert(0, HERE)
import need  # noqa: E402
from test_frameworks import child_env, read_events  # noqa: E402

sys.path.insert(0, SCRIPTS)
import restart  # noqa: E402

# torch and a framework on CPU: about 880 MB resident, 430 MiB of it charged to the cgroup as
# anonymous memory (the libraries' pages are cache); the rest is for the leak, 24 MiB a step.
LIMIT = 1536 << 20
RUN_TIMEOUT = 300  # seconds for the whole run: every attempt imports torch again


class MemoryCgroup:
    """A fresh memory cgroup with a limit (v1 or v2, whichever is mounted); ``remove()`` it."""

    def __init__(self, limit):
        name = "tw-restart-%d-%d" % (os.getpid(), time.monotonic_ns() % 1000000)
        v1 = "/sys/fs/cgroup/memory"
        if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
            self.dir, files = os.path.join(v1, name), [("memory.limit_in_bytes", limit),
                                                       ("memory.memsw.limit_in_bytes", limit)]
        else:
            self.dir, files = os.path.join("/sys/fs/cgroup", name), [("memory.max", limit), ("memory.swap.max", 0)]
        os.mkdir(self.dir)
        for name, value in files:
            path = os.path.join(self.dir, name)
            if name == "memory.memsw.limit_in_bytes" and not os.path.exists(path):
                continue  # no swap accounting: the limit holds RAM alone
            with open(path, "w") as f:
                f.write(str(value))
        self.procs = os.path.join(self.dir, "cgroup.procs")

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def memory_cgroup(test, limit):
    need.require(os.geteuid() == 0, "root (to create a memory cgroup)")
    try:
        cg = MemoryCgroup(limit)
    except OSError as e:
        cg = None
        need.require(False, "a memory cgroup (%s)" % e)
    test.addCleanup(cg.remove)
    return cg


def attempts(path):
    """attempts.jsonl by attempt: {attempt: {event: [records]}}."""
    by = {}
    for r in read_events(path):
        by.setdefault(r["attempt"], {}).setdefault(r["event"], []).append(r)
    return by


class RestartedAfterTheOomKillResumesFromTheAcknowledgedCheckpoint(unittest.TestCase):
    def restart_run(self, script, step_of):
        binary = need.watchdog_bin()
        cg = memory_cgroup(self, LIMIT)
        with tempfile.TemporaryDirectory(prefix="tw-restart-") as d:
            events = os.path.join(d, "events.jsonl")
            cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', cg.procs,
                   binary, "--lead", "1s", "--interval", "20ms", "--gpu", "off", "--events", events,
                   "--request-file", os.path.join(d, "request.json"),
                   "--restart", "2", "run", "--", sys.executable, os.path.join(SCRIPTS, script), d]
            t0 = time.monotonic()
            run = subprocess.run(cmd, cwd=d, env=child_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
            took = time.monotonic() - t0
            log = run.stderr[-6000:]
            by = attempts(os.path.join(d, "attempts.jsonl"))
            ev = read_events(events)
            self.assertEqual(run.returncode, 0, "the restarted run should finish\n%s\n%s" % (log, by))
            self.assertEqual(sorted(by), [0, 1], "two attempts: %s\n%s" % (by, log))
            first, second = by[0], by[1]

            # The first attempt: a fresh start, saved when asked, then the OOM kill.
            self.assertIsNone(first["start"][0]["chosen"])
            self.assertIn("saved", first, "the first attempt never saved: %s\n%s" % (first, log))
            self.assertNotIn("end", first, "the first attempt was not killed")
            exits = [e for e in ev if e["event"] == "exit"]
            self.assertTrue(any(e["event"] == "alert" and e["resource"] == "cgroup_memory" for e in ev), ev)
            acks = [e for e in ev if e["event"] == "ack"]
            self.assertTrue(acks, "no acknowledgment seen: %s" % ev)

            # The second: the last acknowledged checkpoint, resumed, and one step after it.
            last = first["saved"][-1]
            start = second["start"][0]
            self.assertEqual(start["last_verdict"], "oom_kill")
            self.assertIsNotNone(start["resume_from"], "no WATCHDOG_RESUME_FROM: %s\n%s" % (start, log))
            self.assertEqual(os.path.realpath(start["resume_from"]), os.path.realpath(last["path"]))
            self.assertEqual(start["chosen"], start["resume_from"])
            self.assertEqual(step_of(start["chosen"]), last["step"])
            restarts = [e for e in ev if e["event"] == "restart"]
            self.assertEqual(len(restarts), 1, restarts)
            self.assertEqual((restarts[0]["attempt"], restarts[0]["verdict"], restarts[0]["step"]),
                             (2, "oom_kill", last["step"]), restarts)
            self.assertEqual(os.path.realpath(restarts[0]["resume_from"]), os.path.realpath(last["path"]))
            self.assertEqual(second["resumed"][0]["step"], last["step"], "the framework restored another step")
            self.assertEqual(second["step"][0]["step"], last["step"] + 1, "the first step after resume")
            self.assertNotIn("saved", second)
            self.assertEqual(second["end"][0]["step"], restart.MAX_STEPS)
            self.assertIn("resuming at step %d from" % last["step"], run.stderr)
            self.assertEqual([(e["attempt"], e["verdict"], e["code"]) for e in exits],
                             [(1, "oom_kill", None), (2, "exited", 0)], exits)
            sys.stderr.write("  %s: checkpoint at step %d, OOM-killed, resumed at step %d, %.1f s for both attempts\n"
                             % (script, last["step"], last["step"], took))

    def test_transformers_run_is_restarted_and_resumes_after_its_checkpoint(self):
        need.require_modules("torch", "transformers", "accelerate")

        def step_of(path):
            with open(os.path.join(path, "trainer_state.json")) as f:
                return json.load(f)["global_step"]

        self.restart_run("restart_transformers.py", step_of)

    def test_lightning_run_is_restarted_and_resumes_after_its_checkpoint(self):
        need.require_modules("torch", "lightning")

        def step_of(path):
            import torch

            return torch.load(path, map_location="cpu", weights_only=False)["global_step"]

        self.restart_run("restart_lightning.py", step_of)


class NotebooksCannotRestart(unittest.TestCase):
    def test_attach_with_restart_is_refused_and_leaves_nothing_changed(self):
        binary = need.watchdog_bin()
        sys.path.insert(0, os.path.join(HERE, ".."))
        import training_watchdog as tw

        before = {k: os.environ.get(k) for k in ("WATCHDOG_REQUEST_FILE", "WATCHDOG_PID", "WATCHDOG_SIGNAL")}
        with self.assertRaises(ValueError) as refused:
            tw.attach(watchdog=binary, args=["--restart", "2"])
        self.assertIn("--restart cannot be used with --pid", str(refused.exception))
        self.assertIsNone(tw.attached())
        self.assertEqual(before, {k: os.environ.get(k) for k in before})
        with self.assertRaises(TypeError):
            tw.attach(watchdog=binary, restart=2)


if __name__ == "__main__":
    unittest.main()
