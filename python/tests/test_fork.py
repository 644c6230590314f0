"""attach() and os.fork(): only the process that started the watchdog stops it or removes its
directory (a real fork, a real atexit, the stand-in binary of test_client).

python3 -m unittest discover -s python/tests
"""

import json
import os
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import training_watchdog as tw  # noqa: E402
from test_client import FAKE_WATCHDOG, Base, pids_running  # noqa: E402

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tw.__file__)))

# The parent attaches, then forks twice: a child that leaves with sys.exit() (its atexit
# handlers run) and a child that calls stop() on its copy of the handle. Then the parent looks.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys, tempfile
    sys.path.insert(0, {python_dir!r})
    tempfile.tempdir = {tmp!r}
    import training_watchdog as tw
    h = tw.attach(watchdog={path!r})
    out = {{"parent": os.getpid(), "children": []}}

    def child(body, name):
        pid = os.fork()
        if pid == 0:
            seen = {{"attached_in_child": tw.attached() is not None}}
            if body == "stop":
                r = h.stop()
                seen["stop_returncode"] = r.returncode
            with open(os.path.join({tmp!r}, name), "w") as f:
                json.dump(seen, f)
            sys.exit(0)  # atexit handlers run here, in the child
        _, status = os.waitpid(pid, 0)
        with open(os.path.join({tmp!r}, name)) as f:
            out["children"].append(dict(json.load(f), status=status))

    child("exit", "exit.json")
    child("stop", "stop.json")
    out["workdir_kept"] = os.path.isdir(h.workdir)
    out["running"] = h.running
    out["attached"] = tw.attached() is h
    result = h.stop()
    out["log"] = result.log
    out["recording"] = result.recording
    out["workdir_removed"] = not os.path.exists(h.workdir)
    print(json.dumps(out))
    """
)


class ForkTests(Base):
    def setUp(self):
        super().setUp()
        self.tmp = os.path.join(self.dir.name, "tmp")
        os.mkdir(self.tmp)
        self.env = dict(os.environ, XDG_STATE_HOME=os.path.join(self.dir.name, "state"))

    def fake(self):
        path = os.path.join(self.dir.name, "watchdog")
        argv_file = os.path.join(self.dir.name, "argv.json")
        with open(path, "w") as f:
            f.write(textwrap.dedent(FAKE_WATCHDOG.format(python=sys.executable, argv_file=argv_file)))
        os.chmod(path, 0o755)
        return path

    def test_a_forked_child_leaves_the_parents_watchdog_alone(self):
        """The child's atexit removed the parent's directory: its alerts had no request file."""
        path = self.fake()
        script = SCRIPT.format(python_dir=PYTHON_DIR, tmp=self.tmp, path=path)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120, env=self.env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        self.assertEqual([seen["status"] for seen in out["children"]], [0, 0], out)
        self.assertTrue(out["workdir_kept"], "a child removed the parent's working directory")
        self.assertTrue(out["running"], "a child stopped the parent's watchdog")
        self.assertTrue(out["attached"])
        self.assertIn("watching", out["log"])
        self.assertIsNotNone(out["recording"])
        self.assertTrue(out["workdir_removed"], "the parent's own stop() cleans up")
        for seen in out["children"]:
            self.assertFalse(seen["attached_in_child"], "the child does not own the parent's watchdog")
        self.assertIsNone(out["children"][1]["stop_returncode"], "stop() in a child stops nothing")
        self.assertEqual([n for n in os.listdir(self.tmp) if n.startswith("training-watchdog-")], [])
        self.assertEqual(pids_running(path), [])


if __name__ == "__main__":
    unittest.main()
