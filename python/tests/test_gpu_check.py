"""scripts/gpu-check.sh, the check for a real GPU, where there is none.

The no-GPU path for real: with ``CUDA_VISIBLE_DEVICES=""`` (torch then sees no device, so the
test takes this path on any machine) it must say so in one line, run the checks that need no
GPU (the binary, the client, torch, the last-chance save of a raised torch.OutOfMemoryError on
the CPU) in one table, and exit 0 exactly when none of them failed: when this checkout's client
has the issue-19 API (``report_step``, ``last_chance``, ``acknowledge(path, step, cause)``,
``transformers.last_chance``) every row must pass; when it lacks one, the client row fails
naming it and the exit status is 1.

The GPU path's logic through its self-test: ``GPU_CHECK_SELF_TEST_FAKE_NVML`` names the fake
NVML library (tests/fake-nvml) and the cases run over a fake CUDA allocator; no GPU row may
then say ``pass`` (only ``fake-pass``, ``FAILED`` or ``skipped``), and the NVML figures case,
which depends only on the fake figures and the watchdog's reading of them, must agree.

The judges of the cases (check.py), from result files as the workloads write them, for the
pass paths the fakes cannot reach without the engine's step_peak and eval_peak.

Needs torch and the built binary in $WATCHDOG_BIN (need.py); the self-test also a C compiler.
"""

import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import need

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "gpu-check.sh")
ROW = re.compile(r"^(\S+(?: \S+)*?)\s{2,}(pass|fake-pass|FAILED|skipped)\s{2,}(.*)$")
GPU_ROWS = ("a leak", "b eval peak", "c plain last chance", "c lightning", "c transformers",
            "d NVML figures", "d memory_stats()")


def client_has_the_api():
    sys.path.insert(0, os.path.join(REPO, "python"))
    try:
        import training_watchdog as tw

        try:
            import training_watchdog.transformers as twt
        except Exception:  # noqa: BLE001 - Transformers missing: the row says so
            twt = None
        params = inspect.signature(tw.acknowledge).parameters
        return (hasattr(tw, "report_step") and hasattr(tw, "last_chance") and twt is not None
                and hasattr(twt, "last_chance") and all(p in params for p in ("path", "step", "cause")))
    finally:
        sys.path.pop(0)


def run_check(env_extra):
    tmp = tempfile.mkdtemp(prefix="gpu-check-test.")   # the check keeps its work dir when a case failed
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable, TMPDIR=tmp, **env_extra)
    try:
        p = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return p, rows


class NoGpu(unittest.TestCase):
    def setUp(self):
        need.require_modules("torch")
        self.binary = need.watchdog_bin()

    def test_without_a_gpu_it_says_so_once_and_runs_what_needs_none(self):
        p, rows = run_check({"WATCHDOG_BIN": self.binary})
        out = p.stdout + p.stderr
        said = [ln for ln in p.stdout.splitlines() if ln.startswith("No GPU here (")]
        self.assertEqual(len(said), 1, out)
        self.assertIn("ran only the checks that need none", said[0])
        for case in ("binary", "client", "torch", "c-cpu last chance"):
            self.assertIn(case, rows, out)
        for case in GPU_ROWS:
            self.assertNotIn(case, rows, out)
        self.assertEqual(rows["binary"][0], "pass", out)
        self.assertEqual(rows["torch"][0], "pass", out)
        if client_has_the_api():
            for case, (result, text) in rows.items():
                self.assertEqual(result, "pass", "%s: %s\n%s" % (case, text, out))
            self.assertIn("resumed 4->5", rows["c-cpu last chance"][1], out)
            self.assertEqual(p.returncode, 0, out)
        else:
            self.assertEqual(rows["client"][0], "FAILED", out)
            self.assertIn("lacks", rows["client"][1], out)
            self.assertEqual(p.returncode, 1, out)
        self.assertIn(" case(s): ", p.stdout, out)

    def test_a_machine_without_transformers_skips_its_case_and_the_client_passes(self):
        # Transformers is optional: its absence used to fail the client row ("lacks
        # transformers.last_chance (No module named 'transformers')") and the whole check.
        need.require(client_has_the_api(), "this checkout's client with the issue-19 API")
        stub = tempfile.mkdtemp(prefix="gpu-check-no-transformers.")
        self.addCleanup(shutil.rmtree, stub, True)
        os.mkdir(os.path.join(stub, "transformers"))
        with open(os.path.join(stub, "transformers", "__init__.py"), "w") as f:
            f.write("raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
        path = os.pathsep.join(filter(None, [stub, os.environ.get("PYTHONPATH")]))
        p, rows = run_check({"WATCHDOG_BIN": self.binary, "PYTHONPATH": path})
        out = p.stdout + p.stderr
        self.assertEqual(rows["client"][0], "pass", out)
        self.assertIn("Transformers absent", rows["torch"][1], out)
        self.assertEqual(p.returncode, 0, out)

    def test_a_missing_binary_is_a_failed_row_naming_it(self):
        p, rows = run_check({"WATCHDOG_BIN": "/nonexistent/watchdog"})
        out = p.stdout + p.stderr
        self.assertEqual(rows["binary"][0], "FAILED", out)
        self.assertIn("WATCHDOG_BIN", rows["binary"][1], out)
        self.assertEqual(p.returncode, 1, out)


class SelfTest(unittest.TestCase):
    def setUp(self):
        need.require_modules("torch")
        self.binary = need.watchdog_bin()
        need.require(shutil.which(os.environ.get("CC", "cc")) is not None, "a C compiler (cc) for the fake NVML")
        self.dir = tempfile.mkdtemp(prefix="gpu-check-test.")
        self.addCleanup(shutil.rmtree, self.dir, True)
        build = subprocess.run(["sh", os.path.join(REPO, "tests", "fake-nvml", "build.sh"), self.dir],
                               capture_output=True, text=True)
        self.assertEqual(build.returncode, 0, build.stderr)
        self.lib = build.stdout.strip()

    def test_the_gpu_path_over_the_fake_never_says_pass(self):
        p, rows = run_check({"WATCHDOG_BIN": self.binary, "GPU_CHECK_SELF_TEST_FAKE_NVML": self.lib})
        out = p.stdout + p.stderr
        self.assertIn("SELF-TEST against the fake NVML", p.stdout, out)
        self.assertNotIn("No GPU here", p.stdout, out)
        for case in GPU_ROWS:
            self.assertIn(case, rows, out)
            self.assertIn(rows[case][0], ("fake-pass", "FAILED", "skipped"), "%s\n%s" % (case, out))
        # the figures case: the watchdog's reading of the fake device against the fake allocator
        self.assertEqual(rows["d NVML figures"][0], "fake-pass", out)
        self.assertIn("headroom diff 0 MiB", rows["d NVML figures"][1], out)
        self.assertIn("used diff 0 MiB", rows["d NVML figures"][1], out)
        self.assertEqual(rows["d memory_stats()"][0], "fake-pass", out)
        self.assertEqual(p.returncode, 1 if any(r[0] == "FAILED" for r in rows.values()) else 0, out)

    def test_outside_the_self_test_a_fake_nvml_voids_the_case(self):
        # WATCHDOG_NVML_LIB left pointing at the fake (its script beside it, where it looks
        # without FAKE_NVML_SCRIPT): the real path must not take its figures for a GPU's.
        with open(os.path.join(self.dir, "fake-nvml.script"), "w") as f:
            f.write("device Fake_GPU GPU-00000000-1111-2222-3333-444444444444 1088 0 0 64\n")
        sys.path.insert(0, os.path.join(REPO, "scripts", "gpu-check"))
        self.addCleanup(sys.path.pop, 0)
        import check

        saved = {k: os.environ.get(k) for k in ("WATCHDOG_NVML_LIB", "GPU_CHECK_SELF_TEST_FAKE_NVML")}
        os.environ["WATCHDOG_NVML_LIB"] = self.lib
        os.environ.pop("GPU_CHECK_SELF_TEST_FAKE_NVML", None)
        try:
            args = check.argparse.Namespace(bin=self.binary, repo=REPO, python=sys.executable,
                                            work=os.path.join(self.dir, "work"))
            driver = check.Driver(args)
            # as on a GPU machine: nvidia-smi there, torch sees CUDA; the NVML row must fail
            which = check.shutil.which
            check.shutil.which = lambda name: "/usr/bin/" + name
            try:
                self.assertIsNone(driver.why_no_gpu({"cuda_available": True}))
            finally:
                check.shutil.which = which
            self.assertFalse(driver.nvml_ok)
            driver.nvml_ok = True
            check.case_d_figures(driver, {"device": {"uuid": "00000000-1111-2222-3333-444444444444"}})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        rows = {r[0]: r for r in driver.rows}
        self.assertEqual(rows["nvml"][1], "FAILED", rows)
        self.assertIn("FAKE NVML", rows["nvml"][3], rows)
        self.assertEqual(rows["d NVML figures"][1], "FAILED", rows)
        self.assertIn("FAKE NVML", rows["d NVML figures"][3], rows)
        self.assertTrue(driver.failed())


class Judges(unittest.TestCase):
    """How check.py judges what a case saw, from result files as the workloads write them
    (the pass paths the fakes here cannot reach: no eval_peak or step_peak without the engine)."""

    def setUp(self):
        sys.path.insert(0, os.path.join(REPO, "scripts", "gpu-check"))
        self.addCleanup(sys.path.pop, 0)
        import check

        self.check = check
        self.dir = tempfile.mkdtemp(prefix="gpu-check-judges.")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def judge(self, fn, result, verdict=("gpu_oom", "CUDA out of memory at step 5")):
        check = self.check
        run = check.Run(self.dir)
        run.result = dict(result, device="cuda:0")
        run.events = [{"event": "ack", "checkpoint_s": 0.1},
                      {"event": "exit", "verdict": verdict[0], "summary": verdict[1]}]

        class Driver(check.Driver):
            def workload(self, *a, **k):
                return run

        d = Driver(check.argparse.Namespace(bin="x", repo=REPO, python=sys.executable, work=self.dir))
        d.nvml_ok = True
        fn(d)
        return d.rows[0]

    def eval_result(self, warned_after):
        reqs = [{"reason": "eval_peak", "evals_done": n, "phase": "eval", "step": 2, "predicted_peak": 5 << 30}
                for n in warned_after]
        return {"planned_failing_eval": 5, "oom_eval": 5, "eval_unit": 1 << 30, "requests": reqs,
                "saved": [{"step": 50}] if reqs else []}

    def test_eval_peak_before_the_failing_evaluation_passes(self):
        row = self.judge(self.check.case_b_eval, self.eval_result([4]))
        self.assertEqual(row[1], "pass", row)

    def test_eval_peak_only_after_the_failure_fails(self):
        row = self.judge(self.check.case_b_eval, self.eval_result([5]))
        self.assertEqual(row[1], "FAILED", row)
        self.assertIn("no eval_peak request before", row[3])

    def test_a_step_peak_request_without_its_fields_fails(self):
        result = {"oom_step": 80, "chunk": 1 << 30, "requests": [{"reason": "step_peak", "seen_at_step": 60}],
                  "saved": [{"step": 60, "ack": {"seq": 1}}]}
        row = self.judge(self.check.case_a_leak, result)
        self.assertEqual(row[1], "FAILED", row)
        self.assertIn("lacks phase, step, predicted_peak", row[3])
        result["requests"][0].update(phase="train", step=60, predicted_peak=80 << 30)
        row = self.judge(self.check.case_a_leak, result)
        self.assertEqual(row[1], "pass", row)
        self.assertIn("lead 20 steps", row[2])

    def test_a_leak_warned_only_by_the_headroom_floor_fails(self):
        result = {"oom_step": 80, "chunk": 1 << 30, "requests": [{"reason": "headroom_floor", "seen_at_step": 79}],
                  "saved": [{"step": 79, "ack": {"seq": 1}}]}
        row = self.judge(self.check.case_a_leak, result)
        self.assertEqual(row[1], "FAILED", row)
        self.assertIn("only headroom_floor", row[3])


if __name__ == "__main__":
    unittest.main()
