"""The framework callbacks in real training loops on CPU, under the real watchdog.

For Lightning, Hugging Face Transformers and Keras (torch backend): a small model trains
under ``watchdog --mem-limit 2GiB run -- python3 frameworks/train_X.py leak DIR`` and leaks
24 MiB per step; the watchdog asks for a checkpoint before the limit, the callback saves a
real checkpoint and acknowledges, the run dies soon after (as it would once out of memory);
a second run resumes from the checkpoint: it starts at the saved step with the saved weights.

Lightning under SLURM (its variables set, a fake ``scontrol``): a watchdog request saves
without requeueing the job; SLURM's own SIGUSR1 still requeues.

Two ranks: ``torchrun --nproc_per_node 2`` (gloo) trains, with
:class:`training_watchdog.distributed.Agreement` in a plain loop, and with the Lightning
callback under DDP; a request reaches rank 1 only (its own request file, and a signal to
it alone); both ranks save at the same step and train on; only rank 1 acknowledges.

The frameworks come from scripts/frameworks-requirements.txt (.ci/run installs them). When
one is missing these tests fail when CI is set and skip (saying so) otherwise (need.py). Needs the
built binary in $WATCHDOG_BIN, as test_attach_real.py.
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
import common  # noqa: E402
import need  # noqa: E402

MEM_LIMIT = 2 << 30
RUN_TIMEOUT = 300  # seconds for one training run: importing torch alone takes 10 s on a busy machine


def child_env():
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    for k in list(env):
        if k.startswith(("SLURM_", "WATCHDOG_")) and k != "WATCHDOG_BIN":
            del env[k]
    return env


def read_events(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


class CallbackSavesBeforeTheLimitAndResumes(unittest.TestCase):
    def leak_run(self, d, script, mode="leak", env=None):
        """Run SCRIPT in MODE under the watchdog; check it saved before the limit and acknowledged."""
        binary = need.watchdog_bin()
        events = os.path.join(d, "events.jsonl")
        cmd = [binary, "--mem-limit", str(MEM_LIMIT), "--lead", "1s", "--interval", "20ms",
               "--gpu", "off", "--events", events, "--request-file", os.path.join(d, "request.json"),
               "run", "--", sys.executable, os.path.join(SCRIPTS, script), mode, d]
        t0 = time.monotonic()
        leak = subprocess.run(cmd, cwd=d, env=env or child_env(), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
        took = time.monotonic() - t0
        self.assertEqual(leak.returncode, common.DIED,
                         "the leaking run should die after its checkpoint\n" + leak.stderr[-4000:])
        with open(os.path.join(d, "result.json")) as f:
            saved = json.load(f)
        self.assertLess(saved["rss_bytes"], MEM_LIMIT, "saved after the limit was reached")
        self.assertIsNotNone(saved["request"], "saved without a request file")
        self.assertEqual(saved["request"]["resource"], "tree_memory")
        self.assertGreater(saved["step"], 0)
        deadline = time.monotonic() + 5
        while "ack" not in [e["event"] for e in read_events(events)] and time.monotonic() < deadline:
            time.sleep(0.1)
        kinds = [e["event"] for e in read_events(events)]
        self.assertIn("alert", kinds)
        self.assertIn("ack", kinds)
        # The ack names the checkpoint and its step (Keras: the backup directory and the
        # optimizer's iterations, which result.json does not hold).
        with open(os.path.join(d, "request.json.ack")) as f:
            ack = json.load(f)
        self.assertTrue(os.path.exists(ack["path"]) and isinstance(ack["step"], int), ack)
        if "path" in saved:
            self.assertEqual((ack["path"], ack["step"]), (os.path.abspath(saved["path"]), saved["step"]))
        return saved, took

    def leak_then_resume(self, script):
        with tempfile.TemporaryDirectory(prefix="tw-frameworks-") as d:
            saved, leak_s = self.leak_run(d, script)
            t0 = time.monotonic()
            resume = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), "resume", d], cwd=d,
                                    env=child_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
            resume_s = time.monotonic() - t0
            self.assertEqual(resume.returncode, 0, resume.stderr[-4000:])
            with open(os.path.join(d, "resumed.json")) as f:
                resumed = json.load(f)
            self.assertEqual(resumed["step"], saved["step"], "did not resume at the saved step")
            self.assertEqual(resumed["digest"], saved["digest"], "resumed weights differ from the saved ones")
            sys.stderr.write("  %s: leak run %.1f s (saved at step %d, RSS %.0f MiB), resume %.1f s\n"
                             % (script, leak_s, saved["step"], saved["rss_bytes"] / 2**20, resume_s))

    def test_lightning_callback_saves_through_the_trainer_and_fit_resumes(self):
        need.require_modules("torch", "lightning")
        self.leak_then_resume("train_lightning.py")

    def test_lightning_under_slurm_a_watchdog_request_does_not_requeue_but_slurms_signal_does(self):
        need.require_modules("torch", "lightning")
        with tempfile.TemporaryDirectory(prefix="tw-slurm-") as d:
            bin_dir, marker = os.path.join(d, "bin"), os.path.join(d, "requeued")
            os.mkdir(bin_dir)
            with open(os.path.join(bin_dir, "scontrol"), "w") as f:
                f.write('#!/bin/sh\necho "$@" > "$SCONTROL_MARKER"\n')
            os.chmod(os.path.join(bin_dir, "scontrol"), 0o755)
            env = dict(child_env(), SLURM_JOB_ID="4242", SLURM_NTASKS="1", SLURM_JOB_NAME="train",
                       SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NODELIST="localhost",
                       SCONTROL_MARKER=marker, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
            saved, _ = self.leak_run(d, "train_lightning.py", "slurm", env)
            with open(os.path.join(d, "slurm.json")) as f:
                slurm = json.load(f)
            self.assertFalse(slurm["requeued_by_the_watchdog"], "a watchdog request requeued the job")
            self.assertEqual(slurm["hpc_by_the_watchdog"], [])
            self.assertTrue(slurm["requeued_by_slurm"], "SLURM's own SIGUSR1 no longer requeues: %s" % slurm)
            self.assertEqual(len(slurm["hpc_by_slurm"]), 1, slurm)
            self.assertTrue(os.path.exists(saved["path"]), saved)

    def test_transformers_callback_saves_a_checkpoint_and_train_resumes(self):
        need.require_modules("torch", "transformers", "accelerate")
        self.leak_then_resume("train_transformers.py")

    def test_keras_callback_saves_through_backup_and_restore_and_fit_resumes(self):
        need.require_modules("torch", "keras")
        self.leak_then_resume("train_keras.py")


class TwoRanksAgree(unittest.TestCase):
    def ask_rank_1(self, d, proc, deadline):
        """Once rank 1 trains, do what its node's watchdog would: write its request file, signal it."""
        progress = os.path.join(d, "rank1.progress")
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(progress) as f:
                    state = json.load(f)
                if state["step"] >= 5:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            return  # the run ended or timed out before training: the assertions say so
        now = time.time()
        common.write_json(os.path.join(d, "request-rank1.json"), {
            "seq": 1, "resource": "tree_memory", "kind": "tree_memory", "reason": "trend",
            "used": 1, "limit": 2, "unit": "bytes", "predicted_s": 1.0, "time": "",
            "time_unix": now, "pid": state["pid"], "signal": "SIGUSR1", "watchdog_pid": os.getpid()})
        os.kill(state["pid"], signal.SIGUSR1)

    def two_ranks(self, script):
        """Run SCRIPT on two ranks, ask rank 1 only; check both saved once at one step and went on."""
        with tempfile.TemporaryDirectory(prefix="tw-ranks-") as d:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--standalone", os.path.join(SCRIPTS, script), d]
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=d, env=child_env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                self.ask_rank_1(d, proc, t0 + RUN_TIMEOUT)
                out, _ = proc.communicate(timeout=max(1, t0 + RUN_TIMEOUT - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                self.fail("torchrun hung (a rank waited for the other?)\n" + out[-4000:])
            took = time.monotonic() - t0
            self.assertEqual(proc.returncode, 0, out[-4000:])
            ranks = []
            for rank in (0, 1):
                with open(os.path.join(d, "rank%d.json" % rank)) as f:
                    ranks.append(json.load(f))
            asked = ranks[1]["asked_at"]
            self.assertIsNotNone(asked, "rank 1 was never asked")
            self.assertIsNone(ranks[0]["asked_at"], "the request reached rank 0 too")
            self.assertEqual(ranks[0]["saved_steps"], ranks[1]["saved_steps"])
            self.assertEqual(len(ranks[0]["saved_steps"]), 1, ranks)
            step = ranks[0]["saved_steps"][0]
            every = ranks[0]["every"]
            self.assertEqual(step % every, 0, "ranks agree on multiples of every=%d only" % every)
            # rank 1 notices the request at step `asked` (or the agreement, just before, at asked - 1)
            self.assertGreaterEqual(step, asked - 1)
            self.assertLess(step, asked + every, "the agreement came late")
            for r in ranks:
                self.assertTrue(os.path.exists(r["checkpoint"]), r)
                self.assertGreater(r["final_step"], step, "training did not go on after the save")
            self.assertTrue(os.path.exists(os.path.join(d, "request-rank1.json.ack")), "rank 1 did not acknowledge")
            self.assertFalse(os.path.exists(os.path.join(d, "request-rank0.json.ack")))
            sys.stderr.write("  %s: saved at step %d on both ranks (rank 1 asked at step %d), %.1f s\n"
                             % (script, step, asked, took))

    def test_request_on_one_rank_saves_on_both_at_the_same_step(self):
        need.require_modules("torch")
        self.two_ranks("train_ranks.py")

    def test_lightning_ddp_request_on_one_rank_saves_on_both_through_the_strategy(self):
        need.require_modules("torch", "lightning")
        self.two_ranks("train_lightning_ranks.py")

if __name__ == "__main__":
    unittest.main()
