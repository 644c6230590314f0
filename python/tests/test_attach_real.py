"""attach() against the real watchdog binary: a notebook-like process that leaks memory
past a --mem-limit budget is asked to checkpoint, saves, acknowledges, and the watchdog
records the acknowledgment.

Needs the built binary in $WATCHDOG_BIN (scripts/test.sh sets it); fails under CI=true
without it, skips otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)

NOTEBOOK = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {python_dir!r})
    import training_watchdog as tw
    h = tw.attach(args=["--lead", "1s", "--interval", "20ms", "--gpu", "off",
                        "--mem-limit", "200MiB", "--events", {events!r}])
    kept, saved = [], None
    for step in range(400):
        kept.append(b"\\x01" * (2 << 20))
        time.sleep(0.02)
        if tw.checkpoint_requested():
            saved = {{"step": step, "request": tw.request()}}
            tw.acknowledge()
            break
    time.sleep(0.5)  # let the watchdog see the acknowledgment
    with open({out!r}, "w") as f:
        json.dump({{"saved": saved, "watchdog_pid": os.environ.get("WATCHDOG_PID"),
                   "handle_pid": h.process.pid}}, f)
    h.stop()
    """
)


class AttachWithRealBinary(unittest.TestCase):
    def test_leak_in_an_attached_process_is_checkpointed(self):
        binary = os.environ.get("WATCHDOG_BIN")
        if not binary or not os.path.exists(binary):
            if os.environ.get("CI") == "true":
                self.fail("WATCHDOG_BIN must name the built watchdog binary under CI")
            self.skipTest("WATCHDOG_BIN is not set to the built binary")
        with tempfile.TemporaryDirectory() as d:
            out, events = os.path.join(d, "out.json"), os.path.join(d, "events.jsonl")
            script = NOTEBOOK.format(python_dir=PYTHON_DIR, events=events, out=out)
            proc = subprocess.run([sys.executable, "-c", script], timeout=60,
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(out) as f:
                result = json.load(f)
            self.assertIsNotNone(result["saved"], "never asked to checkpoint")
            self.assertEqual(result["saved"]["request"]["resource"], "tree_memory")
            self.assertEqual(result["watchdog_pid"], str(result["handle_pid"]))
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


if __name__ == "__main__":
    unittest.main()
