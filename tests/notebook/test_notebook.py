"""The notebook path as a new user gets it, end to end and for real.

A fresh virtual environment; ``pip install`` of this checkout into it (pip builds the wheel
with maturin, release profile, and installs ``watchdog`` into the venv's ``bin/``), with
ipykernel and nbclient from PyPI; a kernelspec in a private ``JUPYTER_PATH`` that runs the
venv's Python *without activating the venv* (its ``bin/`` is not on PATH, and a decoy
``watchdog`` that fails is); then a notebook run through nbclient in that real kernel:

1. ``attach(mem_limit=..., lead=...)``: finds the venv's binary beside ``sys.executable``;
2. a leaking loop that stops when ``checkpoint_requested()`` and acknowledges: asked before
   the limit, and the request is shown in the cell;
3. the same cell again at once: asked (and shown) again;
4. ``attach()`` again with the same arguments: the same handle, one watchdog; with other
   arguments: replaced, still one;
5. ``report()`` inline, then ``stop()``: no watchdog process and no ``training-watchdog-*``
   directory remain, and the recording is in the state directory.

Slow (a release build of the binary, a few minutes; pip downloads): scripts/test.sh runs it
on its own, once. Needs ``python3 -m venv`` (Debian: python3-venv), a Rust toolchain and
PyPI: without them it fails when CI is set and skips saying why otherwise
(python/tests/need.py).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL = "training-watchdog-test"

sys.path.insert(0, os.path.join(REPO, "python", "tests"))
import need  # noqa: E402  (the CI rule of every test: fail when CI is set, else skip)

# The notebook's cells. {limit_mib} is the headroom over the kernel's RSS at attach().
CELLS = [
    """
    import json, os, sys, tempfile, time
    import training_watchdog as tw

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def watchdogs():
        # This kernel's live watchdog children, from each "PID (comm) STATE PPID ..." stat line.
        found = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/stat" % p) as f:
                    comm, rest = f.read().split(" (", 1)[1].rsplit(") ", 1)
            except (OSError, ValueError):
                continue
            state, ppid = rest.split()[:2]
            if comm == "watchdog" and state != "Z" and int(ppid) == os.getpid():
                found.append(int(p))
        return sorted(found)

    limit = rss() + {headroom_mib} * 2**20
    options = dict(mem_limit=limit, lead="2s", interval="20ms", gpu="off", notify=False)
    t0 = time.monotonic()
    h = tw.attach(**options)
    print(json.dumps({{"attach_s": time.monotonic() - t0, "binary": h.command[0],
                      "executable": sys.executable, "module": tw.__file__, "limit": limit,
                      "watchdogs": watchdogs(), "pid": h.pid, "path": os.environ["PATH"]}}))
    """,
    # The leak; run twice in a row.
    """
    kept, got = [], None
    for step in range(2000):
        kept.append(b"\\x01" * (2 << 20))
        time.sleep(0.02)
        if tw.checkpoint_requested():
            got = {{"step": step, "rss": rss(), "request": tw.request()}}
            tw.acknowledge()
            break
        if rss() > limit + 200 * 2**20:
            break  # never asked: stop leaking, the test fails on got = None
    del kept
    print(json.dumps(got))
    """,
    None,  # the leak cell again
    """
    again = tw.attach(**options)
    same = {{"same_handle": again is h, "watchdogs": watchdogs()}}
    replaced = tw.attach(**dict(options, lead="3s"))
    same.update(replaced_is_new=replaced is not h, old_running=h.running,
                watchdogs_after_replace=watchdogs(), new_pid=replaced.pid)
    print(json.dumps(same))
    """,
    """
    page = replaced.report()
    result = replaced.stop()
    print(json.dumps({{
        "returned": type(result).__name__, "repr": repr(result), "recording": result.recording,
        "recording_exists": bool(result.recording) and os.path.isfile(result.recording),
        "watchdogs": watchdogs(),
        "temp_dirs": [d for d in os.listdir(tempfile.gettempdir()) if d.startswith("training-watchdog-")],
        "env": {{k: os.environ.get(k) for k in ("WATCHDOG_PID", "WATCHDOG_REQUEST_FILE")}},
    }}))
    page
    """,
]

DRIVER = """
import sys
import nbformat
from nbclient import NotebookClient

cells = [nbformat.v4.new_code_cell(src) for src in {cells!r}]
nb = nbformat.v4.new_notebook(cells=cells)
NotebookClient(nb, kernel_name={kernel!r}, timeout=600, startup_timeout=120).execute()
nbformat.write(nb, {out!r})
"""


def venv_works():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


def run(argv, what, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", **kw)
    if proc.returncode != 0:
        raise AssertionError(
            "%s failed with status %d: %s\n--- stdout\n%s\n--- stderr\n%s"
            % (what, proc.returncode, " ".join(argv), proc.stdout[-8000:], proc.stderr[-8000:])
        )
    return proc


def joined(text):
    """A notebook string field: nbformat may store it as a list of lines."""
    return "".join(text) if isinstance(text, list) else text


def outputs_text(cell, kind):
    """The text of a cell's outputs of one type ('stream', 'display_data', ...)."""
    texts = []
    for out in cell["outputs"]:
        if out["output_type"] != kind:
            continue
        if kind == "stream":
            texts.append(joined(out["text"]))
        else:
            data = out.get("data", {})
            texts.append(joined(data.get("text/plain", "")) + joined(data.get("text/html", "")))
    return texts


def printed_json(cell):
    lines = [line for line in "".join(outputs_text(cell, "stream")).splitlines() if line.startswith(("{", "null"))]
    return json.loads(lines[-1])


def venv_watchdogs(binary):
    """PIDs of live processes running ``binary``."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
            except OSError:
                continue
            if argv0 == binary.encode():
                found.append(int(p))
    return found


class NotebookInAFreshVenv(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need.require(venv_works(), "python3 -m venv (Debian: apt-get install python3-venv)")
        need.require(shutil.which("cargo") is not None, "cargo on PATH (to build the wheel)")
        cls.tmp = tempfile.mkdtemp(prefix="wd-notebook-test-")
        cls.venv = os.path.join(cls.tmp, "venv")
        # The environment a user's shell would have: nothing of this project's test setup.
        env = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "WATCHDOG_BIN", "PYTHONPATH", "PYTHONHOME")}
        cls.env = env
        run([sys.executable, "-m", "venv", cls.venv], "creating the venv", env=env, timeout=300)
        cls.python = os.path.join(cls.venv, "bin", "python")
        print("\n[notebook test] pip install %s ipykernel nbclient into a fresh venv "
              "(builds the wheel, release profile: minutes)" % REPO, file=sys.stderr, flush=True)
        run([cls.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REPO,
             "ipykernel", "nbclient"], "pip install of the checkout", env=env, cwd=cls.tmp, timeout=3600)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_wheel_puts_the_binary_in_the_venv_and_has_no_dependency(self):
        binary = os.path.join(self.venv, "bin", "watchdog")
        self.assertTrue(os.access(binary, os.X_OK), "%s is not an executable" % binary)
        version = run([binary, "--version"], "watchdog --version", env=self.env)
        self.assertIn("watchdog", version.stdout)
        show = run([self.python, "-m", "pip", "show", "--files", "training-watchdog"], "pip show", env=self.env)
        fields = dict(line.split(": ", 1) for line in show.stdout.splitlines() if ": " in line)
        self.assertEqual(fields.get("Requires", "").strip(), "")
        files = show.stdout.split("Files:", 1)[1].split()
        self.assertIn("training_watchdog/__init__.py", files)
        self.assertTrue(any(f.endswith("bin/watchdog") for f in files), files)
        self.assertFalse(any("tests" in f.split("/") for f in files), files)

    def test_notebook_attach_leak_rerun_reattach_stop(self):
        tmp = self.tmp
        # Private Jupyter, IPython, temp and state directories.
        jupyter = os.path.join(tmp, "jupyter")
        kernel_tmp = os.path.join(tmp, "kernel-tmp")
        state = os.path.join(tmp, "state")
        decoy_dir = os.path.join(tmp, "decoy-bin")
        for d in (kernel_tmp, state, decoy_dir, os.path.join(jupyter, "kernels", KERNEL)):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(jupyter, "kernels", KERNEL, "kernel.json"), "w") as f:
            json.dump({"argv": [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                       "display_name": "training-watchdog test venv", "language": "python"}, f)
        # A `watchdog` first on PATH that is not ours: the venv's must win without activation.
        decoy = os.path.join(decoy_dir, "watchdog")
        with open(decoy, "w") as f:
            f.write("#!/bin/sh\necho 'watchdog: error: the decoy on PATH was run' >&2\nexit 1\n")
        os.chmod(decoy, 0o755)
        path = [decoy_dir] + [p for p in self.env.get("PATH", "").split(os.pathsep)
                              if p and os.path.realpath(p) != os.path.realpath(os.path.join(self.venv, "bin"))]
        env = dict(self.env, JUPYTER_PATH=jupyter, JUPYTER_DATA_DIR=os.path.join(tmp, "jupyter-data"),
                   JUPYTER_CONFIG_DIR=os.path.join(tmp, "jupyter-config"),
                   JUPYTER_RUNTIME_DIR=os.path.join(tmp, "jupyter-runtime"),
                   IPYTHONDIR=os.path.join(tmp, "ipython"), TMPDIR=kernel_tmp, XDG_STATE_HOME=state,
                   PATH=os.pathsep.join(path))
        cells = [textwrap.dedent(c or CELLS[1]).format(headroom_mib=400) for c in CELLS]
        out = os.path.join(tmp, "executed.ipynb")
        driver = DRIVER.format(cells=cells, kernel=KERNEL, out=out)
        run([self.python, "-c", driver], "running the notebook through nbclient", env=env, cwd=tmp, timeout=1200)
        with open(out) as f:
            nb = json.load(f)
        setup, leak1, leak2, reattach, stop = nb["cells"]
        binary = os.path.join(self.venv, "bin", "watchdog")

        facts = printed_json(setup)
        self.assertEqual(facts["executable"], self.python)
        self.assertEqual(facts["binary"], binary)  # beside sys.executable, not the decoy on PATH
        self.assertNotIn(os.path.join(self.venv, "bin"), facts["path"].split(os.pathsep))
        self.assertTrue(facts["module"].startswith(self.venv), facts["module"])
        self.assertEqual(facts["watchdogs"], [facts["pid"]])

        for n, cell in enumerate((leak1, leak2), start=1):
            got = printed_json(cell)
            self.assertIsNotNone(got, "leak %d: never asked to checkpoint" % n)
            self.assertLess(got["rss"], facts["limit"], "leak %d: asked after the limit: %s" % (n, got))
            self.assertEqual(got["request"]["resource"], "tree_memory")
            self.assertEqual(got["request"]["seq"], n)
            shown = outputs_text(cell, "display_data")
            self.assertTrue(any("tree_memory is running out" in t and "request %d" % n in t for t in shown),
                            "leak %d: the request was not shown in the cell: %s" % (n, cell["outputs"]))

        again = printed_json(reattach)
        self.assertTrue(again["same_handle"])
        self.assertEqual(again["watchdogs"], [facts["pid"]])
        self.assertTrue(again["replaced_is_new"])
        self.assertFalse(again["old_running"])
        self.assertEqual(again["watchdogs_after_replace"], [again["new_pid"]])

        done = printed_json(stop)
        self.assertEqual(done["returned"], "StopResult")
        self.assertEqual(done["watchdogs"], [])
        self.assertEqual(done["temp_dirs"], [])
        self.assertTrue(done["recording_exists"], done)
        self.assertTrue(done["recording"].startswith(os.path.join(state, "watchdog") + os.sep), done)
        self.assertIn(done["recording"], done["repr"])
        self.assertEqual(done["env"], {"WATCHDOG_PID": None, "WATCHDOG_REQUEST_FILE": None})
        self.assertEqual(outputs_text(stop, "stream")[1:], [], "unexpected output (a warning?)")
        report = [o for o in stop["outputs"] if o["output_type"] == "execute_result"]
        self.assertTrue(report and "<iframe srcdoc=" in joined(report[0]["data"].get("text/html", "")), stop["outputs"])

        # The kernel is gone: nothing of ours is left behind.
        self.assertEqual(venv_watchdogs(binary), [])
        self.assertEqual([d for d in os.listdir(kernel_tmp) if d.startswith("training-watchdog-")], [])


if __name__ == "__main__":
    unittest.main()
